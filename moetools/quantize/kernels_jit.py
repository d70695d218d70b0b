"""ggml's quantizers compiled with numba: every K-quant, IQ4_NL/IQ4_XS and the 32-value block types,
without and with an importance matrix, byte-identical to ggml (and to the numpy kernels in kernels.py).

Each function follows ggml/src/ggml-quants.c (the algorithms of `quantize_row_*_ref`, the
`quantize_row_*_impl` imatrix variants, `make_qx_quants`, `make_q3_quants`, `make_qkx2_quants` /
`make_qkx3_quants`, `make_qp_quants`, `quantize_row_iq4_nl_impl`). Byte identity needs the same
float32 operations in the same order, so every intermediate is rounded to float32 explicitly
(`F32(...)`: numba, like numpy, would otherwise widen a float32 combined with an int or a Python
float), products are never fused (numba does not allow LLVM to contract a*b+c without fastmath),
and float16 is converted with round-to-nearest-even as ggml's GGML_FP32_TO_FP16 does.

Speed: ggml searches the scale of one group (16 or 32 values) after the other, each search a chain
of dependent float32 additions that no compiler may reorder. The groups do not depend on each
other, so the searches that dominate (make_qkx2/3 for Q2_K/Q4_K/Q5_K and Q4_1/Q5_1 with an imatrix,
make_q3 for Q3_K, the IQ4 search) run LANES groups at once (`make_*_lanes`): values laid out (element, group), every loop over
the groups innermost, which the compiler turns into SIMD with one group per lane: each group still
does ggml's operations in ggml's order, ggml's branches become per-lane selects. make_qx_quants
(Q6_K, Q3_K with an imatrix) instead runs its 19 trial scales side by side within one group.
Measured against ggml's C on one core by benchmarks/bench_quantize.py.

Row drivers take (kind, x (n_rows, n_per_row) float32, out (n_rows, row_bytes) uint8, qw (n_per_row,)
float32, has_qw, block_bytes) and release the GIL, so kernels.quantize runs them on every core, one span of rows
per thread. Imported lazily and only by kernels.py (numba's import costs a few hundred ms); the
machine code is cached beside this file, so the compile happens once per install.
"""

import math

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from moetools.jitcache import make_cache_writes_best_effort

F32 = np.float32
F64 = np.float64
_JIT = {"nogil": True, "cache": True, "error_model": "numpy"}  # C division: inf/nan, never an exception
GROUP_MAX_EPS = 1e-15
KVALUES_IQ4NL = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=np.int8)


# --- scalar helpers ------------------------------------------------------------------------------

@intrinsic
def _float32_bits(typingctx, value):
    """The bits of a float32 as an int32 (C's memcpy(&i, &f, 4)): one LLVM bitcast."""
    if value != types.float32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return types.int32(types.float32), codegen


@numba.njit(inline="always", **_JIT)
def nearest_int(fval):
    """ggml's nearest_int: the mantissa bits of fval + 1.5*2^23, exactly as C computes it (round half
    to even below 2^22, C's wrap-around above). Inlined: it runs in every inner loop."""
    return (np.int64(_float32_bits(F32(fval + F32(12582912.0)))) & 0x007FFFFF) - 0x00400000


@intrinsic
def nearest_float(typingctx, value):
    """float32(nearest_int(v)): ggml's nearest_int with every step in 32-bit lanes (fadd, bitcast, and,
    sub, int32 -> float32), so a loop of it vectorises; exact, as nearest_int's result has at most
    23 bits. The searches clamp levels as floats: min/max of small integers are the same either way."""
    if value != types.float32:
        return None

    def codegen(context, builder, signature, args):
        f32, i32 = ir.FloatType(), ir.IntType(32)
        bits = builder.bitcast(builder.fadd(args[0], ir.Constant(f32, 12582912.0)), i32)
        level = builder.sub(builder.and_(bits, ir.Constant(i32, 0x007FFFFF)), ir.Constant(i32, 0x00400000))
        return builder.sitofp(level, f32)

    return types.float32(types.float32), codegen


@intrinsic
def _opaque(typingctx, value):
    """int64 `value` hidden from the optimiser (passed through an empty inline asm): a loop bounded by
    it is vectorised, where a constant trip count (16, 32: known once the helper is inlined and its
    scratch arrays' shapes are) gets the loop unrolled into scalar code before the vectoriser sees it."""
    if not isinstance(value, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        argument = context.cast(builder, args[0], signature.args[0], types.int64)
        return builder.asm(ir.FunctionType(i64, [i64]), "", "=r,0", [argument], side_effect=False)

    return types.int64(value), codegen


@numba.njit(inline="always", **_JIT)
def _clamped(v, low, high):
    """min(max(float32(nearest_int(v)), low), high): C's MAX(low, MIN(high, nearest_int(v))) as a float."""
    return min(max(nearest_float(v), low), high)


@numba.njit(**_JIT)
def _rne(value):
    """Round a float64 in [0, 2^52) half to even."""
    return (value + 4503599627370496.0) - 4503599627370496.0


@numba.njit(**_JIT)
def half_bits(f):
    """float32 -> IEEE half bits, round to nearest even (ggml's GGML_FP32_TO_FP16), from the float's
    bits: NaN -> 0x7E00, 65520 and above -> infinity, below 2^-14 a subnormal half."""
    u = np.int64(_float32_bits(F32(f))) & 0xFFFFFFFF
    sign = (u >> 16) & 0x8000
    a = u & 0x7FFFFFFF
    if a > 0x7F800000:
        return sign | 0x7E00
    if a >= 0x477FF000:  # 65520.0: rounds to infinity
        return sign | 0x7C00
    if a >= 0x38800000:  # 2^-14: a normal half, the exponent rebased by 112 and 13 bits rounded off
        h = (a - 0x38000000) >> 13
        rest = a & 0x1FFF
        return sign | (h + (1 if rest > 0x1000 or (rest == 0x1000 and (h & 1) != 0) else 0))
    exponent = a >> 23
    if exponent < 102:  # below 2^-25: rounds to 0
        return sign
    mantissa = (a & 0x7FFFFF) | 0x800000
    shift = 126 - exponent  # in units of 2^-24, the half's subnormal step
    h = mantissa >> shift
    rest = mantissa & ((1 << shift) - 1)
    halfway = 1 << (shift - 1)
    return sign | (h + (1 if rest > halfway or (rest == halfway and (h & 1) != 0) else 0))


@intrinsic
def _float32_from_bits(typingctx, value):
    """The float32 whose bits are the low 32 of an int64: one trunc and one bitcast."""
    if value != types.int64:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(builder.trunc(args[0], ir.IntType(32)), ir.FloatType())

    return types.float32(types.int64), codegen


@numba.njit(**_JIT)
def half_value(h):
    """IEEE half bits -> float32 (GGML_FP16_TO_FP32), from the bits (a NaN's sign kept, its payload
    the default one)."""
    h = np.int64(h)
    exponent = (h >> 10) & 0x1F
    mantissa = h & 0x3FF
    sign = (h & 0x8000) << 16
    if exponent == 0:  # zero or subnormal: mantissa * 2^-24, exact
        value = F32(F32(mantissa) * F32(5.9604644775390625e-08))
        return F32(-value) if sign != 0 else value
    if exponent == 31:
        return _float32_from_bits(sign | (0x7F800000 if mantissa == 0 else 0x7FC00000))
    return _float32_from_bits(sign | ((exponent + 112) << 23) | (mantissa << 13))


@numba.njit(**_JIT)
def put_half(y, offset, f):
    """Store float32 f as ggml_half at y[offset:offset+2]; returns the float32 ggml reads back."""
    h = half_bits(f)
    y[offset] = h & 0xFF
    y[offset + 1] = h >> 8
    return half_value(h)


@numba.njit(inline="always", **_JIT)
def _sqrt(v):
    """sqrtf: float64 sqrt rounded to float32 is the correctly rounded float32 sqrt."""
    return F32(math.sqrt(F64(v)))


@numba.njit(inline="always", **_JIT)
def _round_away(v):
    """roundf: half away from zero."""
    t = F32(math.trunc(F64(v)))
    if abs(F32(v - t)) >= F32(0.5):
        t = F32(t + (F32(1) if v > 0 else F32(-1)))
    return t


@numba.njit(inline="always", **_JIT)
def _c_int8(v):
    """C's (int8_t) of a float: truncation toward zero, then the low byte as signed."""
    i = int(math.trunc(F64(v))) & 0xFF
    return i - 256 if i > 127 else i


# --- the imatrix weighting shared by the K-quants, IQ4 and the 32-value types ---------------------

@numba.njit(inline="always", **_JIT)
def _sum_squares(x, start, n):
    """x[start]^2 + ... + x[start+n-1]^2, added in order in float32 (ggml's sumx2 loops)."""
    total = F32(0)
    for j in range(start, start + n):
        total = F32(total + F32(x[j] * x[j]))
    return total


@numba.njit(inline="always", **_JIT)
def _imatrix_weights(x, qw, start, n, sigma2, weights):
    """weights[l] = qw[start+l] * sqrtf(sigma2 + x[start+l]^2) for l < n, as every `_impl` quantizer
    weighs its values by the importance matrix; returns their sum (added in order)."""
    total = F32(0)
    for l in range(n):
        w = F32(qw[start + l] * _sqrt(F32(sigma2 + F32(x[start + l] * x[start + l]))))
        weights[l] = w
        total = F32(total + w)
    return total


# --- the scale searches ------------------------------------------------------------------------

QX_STEPS = 19  # make_qx_quants' first scale and its 18 tries (is = -9..9 without 0)


@numba.njit(inline="always", **_JIT)
def make_qx_quants(n, nmax, x, L, qw, has_qw, work):
    """make_qx_quants(n, nmax, x, L, rmse_type=1, qw or NULL): L[i] = level + nmax; returns the scale.

    ggml tries 19 scales one after another, each a serial sum over the n values; the sums of one
    try do not depend on the others, so here the loops are exchanged (values outer, tries inner:
    19 independent accumulators the compiler vectorises), each sum still added in ggml's order,
    and the best try is then picked in ggml's order. `work` is float32 scratch (3, QX_STEPS)."""
    vmax = F32(0)
    amax = F32(0)
    for i in range(n):
        ax = abs(x[i])
        if ax > amax:
            amax = ax
            vmax = x[i]
    if amax < F32(GROUP_MAX_EPS):
        for i in range(n):
            L[i] = 0
        return F32(0)
    iscales = work[0]
    sumlx = work[1]
    suml2 = work[2]
    iscales[0] = F32(F32(-nmax) / vmax)
    k = 1
    for step in range(-9, 10):
        if step != 0:
            iscales[k] = F32(F32(-F32(F32(nmax) + F32(F32(0.1) * F32(step)))) / vmax)
            k += 1
    for s in range(QX_STEPS):
        sumlx[s] = F32(0)
        suml2[s] = F32(0)
    low = F32(-nmax)
    high = F32(nmax - 1)
    for i in range(n):
        xi = x[i]
        w = qw[i] if has_qw else F32(xi * xi)
        wx = F32(w * xi)
        for s in range(QX_STEPS):
            lf = _clamped(F32(iscales[s] * xi), low, high)  # 32-bit lanes: int64 -> float does not vectorise
            sumlx[s] = F32(sumlx[s] + F32(wx * lf))
            suml2[s] = F32(suml2[s] + F32(F32(w * lf) * lf))
    scale = F32(sumlx[0] / suml2[0]) if suml2[0] != 0 else F32(0)
    best = F32(scale * sumlx[0])
    chosen = 0
    for s in range(1, QX_STEPS):
        if suml2[s] > 0 and F32(sumlx[s] * sumlx[s]) > F32(best * suml2[s]):
            scale = F32(sumlx[s] / suml2[s])
            best = F32(scale * sumlx[s])
            chosen = s
    iscale = iscales[chosen]
    for i in range(n):
        L[i] = np.int32(_clamped(F32(iscale * x[i]), low, high)) + np.int32(nmax)
    return scale


LANE_STATE = 17  # rows of the per-lane state make_qkx_lanes keeps (one float32 per group and quantity)


@numba.njit(inline="always", **_JIT)
def make_qkx_lanes(n, lanes, nmax, lane, state, rmin, rdelta, nstep, use_mad, scales, mins):
    """make_qkx2_quants / make_qkx3_quants for `lanes` groups of n values at once, one group per lane:
    lane[0] holds the values as (n, lanes) (element i of group g at [i, g]), lane[1] their weights;
    the levels come back in lane[2] (as float32), the scales and the_min in scales[g] / mins[g].

    ggml searches one group after the other, each a chain of dependent float32 additions; the groups
    of a super-block do not depend on each other, so here every loop runs over the groups innermost
    (a SIMD lane each, the compiler vectorises it) while each group still does exactly ggml's
    operations in ggml's order. ggml's branches become per-lane selects: a trial is taken where
    ggml takes it (det > 0 and a smaller error), a flat group keeps its start. As in the numpy
    engine, the levels of the best trial are rebuilt once from the iscale and offset that made
    them (the same float32 operations), rather than copied at every improvement."""
    X, W, L, Laux = lane[0], lane[1], lane[2], lane[3]
    vmin, vmax, sum_w, sum_x, best, scale, isc = state[0], state[1], state[2], state[3], state[4], state[5], state[6]
    s_l, s_l2, s_xl, b_isc, b_low, ts, tm, cur, det, flat = (state[7], state[8], state[9], state[10], state[11],
                                                             state[12], state[13], state[14], state[15], state[16])
    nmax_f = F32(nmax)
    zero = F32(0)
    for g in range(lanes):
        vmin[g] = X[0, g]
        vmax[g] = X[0, g]
        sum_w[g] = W[0, g]
        sum_x[g] = F32(W[0, g] * X[0, g])
    for i in range(1, n):
        for g in range(lanes):
            xv = X[i, g]
            w = W[i, g]
            vmin[g] = xv if xv < vmin[g] else vmin[g]
            vmax[g] = xv if xv > vmax[g] else vmax[g]
            sum_w[g] = F32(sum_w[g] + w)
            sum_x[g] = F32(sum_x[g] + F32(w * xv))
    for g in range(lanes):
        low = zero if vmin[g] > 0 else vmin[g]
        vmin[g] = low
        b_low[g] = low
        flat[g] = F32(1) if vmax[g] == low else zero
        iscale = F32(nmax_f / F32(vmax[g] - low))
        isc[g] = iscale
        b_isc[g] = iscale
        scale[g] = F32(F32(1) / iscale)
        best[g] = zero
    for i in range(n):
        for g in range(lanes):
            xv = X[i, g]
            lv = _clamped(F32(isc[g] * F32(xv - vmin[g])), zero, nmax_f)
            diff = F32(F32(F32(scale[g] * lv) + vmin[g]) - xv)
            diff = abs(diff) if use_mad else F32(diff * diff)
            best[g] = F32(best[g] + F32(W[i, g] * diff))
    for step in range(nstep + 1):
        numerator = F32(F32(rmin + F32(rdelta * F32(step))) + nmax_f)
        for g in range(lanes):
            isc[g] = F32(numerator / F32(vmax[g] - vmin[g]))
            s_l[g] = zero
            s_l2[g] = zero
            s_xl[g] = zero
        for i in range(n):
            for g in range(lanes):
                xv = X[i, g]
                lv = _clamped(F32(isc[g] * F32(xv - vmin[g])), zero, nmax_f)
                Laux[i, g] = lv
                wl = F32(W[i, g] * lv)
                s_l[g] = F32(s_l[g] + wl)
                s_l2[g] = F32(s_l2[g] + F32(wl * lv))
                s_xl[g] = F32(s_xl[g] + F32(wl * xv))
        for g in range(lanes):
            d = F32(F32(sum_w[g] * s_l2[g]) - F32(s_l[g] * s_l[g]))
            det[g] = d
            this_scale = F32(F32(F32(sum_w[g] * s_xl[g]) - F32(sum_x[g] * s_l[g])) / d)
            this_min = F32(F32(F32(s_l2[g] * sum_x[g]) - F32(s_l[g] * s_xl[g])) / d)
            positive = this_min > 0
            tm[g] = zero if positive else this_min
            ts[g] = F32(s_xl[g] / s_l2[g]) if positive else this_scale
            cur[g] = zero
        for i in range(n):
            for g in range(lanes):
                diff = F32(F32(F32(ts[g] * Laux[i, g]) + tm[g]) - X[i, g])
                diff = abs(diff) if use_mad else F32(diff * diff)
                cur[g] = F32(cur[g] + F32(W[i, g] * diff))
        for g in range(lanes):
            take = det[g] > 0 and cur[g] < best[g] and flat[g] == 0
            best[g] = cur[g] if take else best[g]
            scale[g] = ts[g] if take else scale[g]
            b_isc[g] = isc[g] if take else b_isc[g]
            b_low[g] = vmin[g] if take else b_low[g]
            vmin[g] = tm[g] if take else vmin[g]
    for i in range(n):
        for g in range(lanes):
            lv = _clamped(F32(b_isc[g] * F32(X[i, g] - b_low[g])), zero, nmax_f)
            L[i, g] = zero if flat[g] != 0 else lv
    for g in range(lanes):
        scales[g] = zero if flat[g] != 0 else scale[g]
        mins[g] = F32(-vmin[g])


@numba.njit(inline="always", **_JIT)
def _lanes_absmax(n, lanes, X, amax, vmax):
    """ggml's `if (ax > amax) { amax = ax; max = x[i]; }` from 0 in every lane of X (n, lanes): the
    largest |x| and the first value that has it."""
    for g in range(lanes):
        amax[g] = F32(0)
        vmax[g] = F32(0)
    for i in range(n):
        for g in range(lanes):
            xv = X[i, g]
            ax = abs(xv)
            a = amax[g]
            m = vmax[g]
            larger = ax > a
            amax[g] = ax if larger else a
            vmax[g] = xv if larger else m


@numba.njit(inline="always", **_JIT)
def make_q3_lanes(n, lanes, nmax, lane, state, chain, scales):
    """make_q3_quants(n, nmax, x, L, do_rmse=true) for `lanes` groups at once, laid out as in
    make_qkx_lanes: values in lane[0] (n, lanes); returns the buffer (lane[2] or lane[3]) holding the
    levels -nmax..nmax-1 (as float32; without ggml's final + nmax, and meaningless in a group whose
    values are all below GROUP_MAX_EPS: state[5][g] != 0 marks those), scales in scales[g]. ggml's
    passes over a group stop after one that changes nothing; here a pass runs until no lane changes
    (a lane whose pass changed nothing would change nothing in the next one either: the same state
    gives the same pass), so every lane ends where ggml's group ends.

    Every running per-lane quantity (largest |x| and its value, sum of w*x*l, sum of w*l*l) lives in
    a chain (n + 1, lanes) of `chain`, element i reading row i and writing row i + 1, and the levels
    alternate between two buffers: a lane loop whose store of a select goes back to where one of its
    operands was loaded from becomes a masked store (vmaskmovps), very slow on AMD's Zen. The count
    of changes is 32-bit: an int64 one halves the loop's vector width."""
    X = lane[0]
    A, V, SX, S2 = chain[0], chain[1], chain[2], chain[3]
    isc, empty = state[4], state[5]
    low = F32(-nmax)
    high = F32(nmax - 1)
    zero = F32(0)
    for g in range(lanes):
        A[0, g] = zero
        V[0, g] = zero
    for i in range(n):  # ggml's `if (ax > amax) { amax = ax; max = x[i]; }`
        for g in range(lanes):
            xv = X[i, g]
            ax = abs(xv)
            a = A[i, g]
            v = V[i, g]  # loaded unconditionally: a load in one arm of the select becomes a masked one
            larger = ax > a
            A[i + 1, g] = ax if larger else a
            V[i + 1, g] = xv if larger else v
    for g in range(lanes):
        empty[g] = F32(1) if A[n, g] < F32(GROUP_MAX_EPS) else zero
        isc[g] = F32(low / V[n, g])
        SX[0, g] = zero
        S2[0, g] = zero
    L = lane[2]
    W, WX = lane[1][:n], lane[1][n:2 * n]  # x*x and x*x*x, as ggml computes them in every pass
    for i in range(n):
        for g in range(lanes):
            xv = X[i, g]
            lv = _clamped(F32(isc[g] * xv), low, high)
            L[i, g] = lv
            w = F32(xv * xv)
            wx = F32(w * xv)
            W[i, g] = w
            WX[i, g] = wx
            SX[i + 1, g] = F32(SX[i, g] + F32(wx * lv))
            S2[i + 1, g] = F32(S2[i, g] + F32(F32(w * lv) * lv))
    for g in range(lanes):
        SX[0, g] = SX[n, g]
        S2[0, g] = S2[n, g]
    for attempt in range(5):
        source, target = (lane[2], lane[3]) if attempt % 2 == 0 else (lane[3], lane[2])
        n_changed = np.int32(0)
        for i in range(n):
            for g in range(lanes):
                xv = X[i, g]
                w = W[i, g]
                wx = WX[i, g]
                li = source[i, g]
                lx = SX[i, g]
                l2 = S2[i, g]
                slx = F32(lx - F32(wx * li))
                sl2 = F32(l2 - F32(F32(w * li) * li))
                new = _clamped(F32(F32(xv * sl2) / slx), low, high)
                slx_new = F32(slx + F32(wx * new))
                sl2_new = F32(sl2 + F32(F32(w * new) * new))
                take = ((slx > 0) & (new != li) & (sl2_new > 0) & (empty[g] == 0)
                        & (F32(F32(slx_new * slx_new) * l2) > F32(F32(lx * lx) * sl2_new)))
                target[i, g] = new if take else li
                SX[i + 1, g] = slx_new if take else lx
                S2[i + 1, g] = sl2_new if take else l2
                n_changed = np.int32(n_changed + np.int32(take))
        for g in range(lanes):
            SX[0, g] = SX[n, g]
            S2[0, g] = S2[n, g]
        L = target
        if n_changed == 0:
            break
    for g in range(lanes):
        scale = F32(SX[0, g] / S2[0, g]) if S2[0, g] > 0 else zero
        scales[g] = zero if empty[g] != 0 else scale
    return L


@numba.njit(inline="always", **_JIT)
def make_qp_quants(n, nmax, x, L, qw):
    """make_qp_quants: levels 0..nmax of the non-negative x (sub-block scales) under weights qw."""
    vmax = F32(0)
    for i in range(n):
        vmax = vmax if vmax > x[i] else x[i]
    if vmax < F32(GROUP_MAX_EPS):
        for i in range(n):
            L[i] = 0
        return F32(0)
    iscale = F32(F32(nmax) / vmax)
    for i in range(n):
        L[i] = nearest_int(F32(iscale * x[i])) & 0xFF
    scale = F32(F32(1) / iscale)
    best_mse = F32(0)
    for i in range(n):
        diff = F32(x[i] - F32(scale * F32(L[i])))
        best_mse = F32(best_mse + F32(F32(qw[i] * diff) * diff))
    for step in range(-4, 5):
        if step == 0:
            continue
        iscale_is = F32(F32(F32(F32(0.1) * F32(step)) + F32(nmax)) / vmax)
        scale_is = F32(F32(1) / iscale_is)
        mse = F32(0)
        for i in range(n):
            lv = min(nmax, nearest_int(F32(iscale_is * x[i])))
            diff = F32(x[i] - F32(scale_is * F32(lv)))
            mse = F32(mse + F32(F32(qw[i] * diff) * diff))
        if mse < best_mse:
            best_mse = mse
            iscale = iscale_is
    sumlx = F32(0)
    suml2 = F32(0)
    for i in range(n):
        lv = min(nmax, nearest_int(F32(iscale * x[i])))
        L[i] = lv & 0xFF
        w = qw[i]
        lf = F32(lv)
        sumlx = F32(sumlx + F32(F32(w * x[i]) * lf))
        suml2 = F32(suml2 + F32(F32(w * lf) * lf))
    for _ in range(5):
        n_changed = 0
        for i in range(n):
            w = qw[i]
            li = F32(L[i])
            slx = F32(sumlx - F32(F32(w * x[i]) * li))
            sl2 = F32(suml2 - F32(F32(w * li) * li))
            if slx > 0 and sl2 > 0:
                new_l = min(nmax, nearest_int(F32(F32(x[i] * sl2) / slx)))
                if new_l != L[i]:
                    nf = F32(new_l)
                    slx = F32(slx + F32(F32(w * x[i]) * nf))
                    sl2 = F32(sl2 + F32(F32(w * nf) * nf))
                    if F32(F32(slx * slx) * suml2) > F32(F32(sumlx * sumlx) * sl2):
                        L[i] = new_l & 0xFF
                        sumlx = slx
                        suml2 = sl2
                        n_changed += 1
        if n_changed == 0:
            break
    return F32(sumlx / suml2) if suml2 > 0 else F32(0)


# --- packing shared by several types --------------------------------------------------------------

@numba.njit(inline="always", **_JIT)
def _pack_2bit(L, y, at):
    """qs of Q2_K/Q3_K: byte l of half h holds elements 128h + l + 32k at bits 2k."""
    for j in range(0, 256, 128):
        for l in range(32):
            y[at + j // 4 + l] = np.int64(L[j + l]) | (np.int64(L[j + l + 32]) << 2) | (np.int64(L[j + l + 64]) << 4) | (np.int64(L[j + l + 96]) << 6)


@numba.njit(**_JIT)
def _pack_k4_scales(y, ls, lm):
    """The 12 scale bytes of Q4_K/Q5_K at y[4:16] from 6-bit scales ls and mins lm (8 each)."""
    for j in range(8):
        s, m = np.int64(ls[j]), np.int64(lm[j])
        if j < 4:
            y[4 + j] = s
            y[4 + j + 4] = m
        else:
            y[4 + j + 4] = (s & 0xF) | ((m & 0xF) << 4)
            y[4 + j - 4] = np.int64(y[4 + j - 4]) | ((s >> 4) << 6)
            y[4 + j] = np.int64(y[4 + j]) | ((m >> 4) << 6)


@numba.njit(**_JIT)
def _scale_min_k4(j, y):
    """get_scale_min_k4 over the scale bytes at y[4:16]."""
    if j < 4:
        return np.int64(y[4 + j]) & 63, np.int64(y[4 + j + 4]) & 63
    low, high, upper = np.int64(y[4 + j + 4]), np.int64(y[4 + j - 4]), np.int64(y[4 + j])
    return (low & 0xF) | ((high >> 6) << 4), (low >> 4) | ((upper >> 6) << 4)


@numba.njit(inline="always", **_JIT)
def _requant_k4(x, y, L, nmax):
    """Final levels of Q4_K/Q5_K from the stored d, dmin and 6-bit scales."""
    d_all = half_value(np.int64(y[0]) | (np.int64(y[1]) << 8))
    dmin_all = half_value(np.int64(y[2]) | (np.int64(y[3]) << 8))
    for j in range(8):
        sc, m = _scale_min_k4(j, y)
        d = F32(d_all * F32(sc))
        if d == 0:
            continue
        dm = F32(dmin_all * F32(m))
        for ii in range(32):
            L[32 * j + ii] = max(0, min(nmax, nearest_int(F32(F32(x[32 * j + ii] + dm) / d))))


# --- 256-value super-block types -------------------------------------------------------------------

LANES = 32  # groups searched together by make_qkx_lanes: the compiler's vector loop takes 8 floats x 4


@numba.njit(inline="always", **_JIT)
def _load_k_min(kind, x, qw, has_qw, lane, first, sw, weights):
    """Put the groups of one super-block x (256,) of Q2_K (kind 2: 16 groups of 16) or Q4_K/Q5_K (8 of
    32) into lanes first.. of lane[0] (values) and lane[1] (the weights ggml gives make_qkx2/3_quants),
    and each group's weight sum into sw[lane] (the imatrix variants' make_qp_quants weights)."""
    n = 16 if kind == 2 else 32
    X, W = lane[0], lane[1]
    sigma2 = F32(0)
    if has_qw:
        total = _sum_squares(x, 0, 256)
        sigma2 = F32(total / F32(256)) if kind == 2 else F32(F32(F32(2) * total) / F32(256))
    for j in range(256 // n):
        column = first + j
        for i in range(n):
            X[i, column] = x[n * j + i]
        if has_qw:
            sw[column] = _imatrix_weights(x, qw, n * j, n, sigma2, weights)
            for i in range(n):
                W[i, column] = weights[i]
        elif kind == 2:
            for i in range(n):
                W[i, column] = abs(x[n * j + i])
        else:
            av_x = _sqrt(F32(_sum_squares(x, n * j, n) / F32(32)))
            for i in range(n):
                W[i, column] = F32(av_x + abs(x[n * j + i]))


@numba.njit(inline="always", **_JIT)
def _lane_levels(n, groups, lane, first, L):
    """L[n*j + i] = the level make_qkx_lanes left for element i of the group in lane first + j."""
    levels = lane[2]
    for j in range(groups):
        for i in range(n):
            L[n * j + i] = np.uint8(levels[i, first + j])


@numba.njit(**_JIT)
def q2_k_finish(x, y, has_qw, L, scales, mins, sw, Ls, Lm):
    """The rest of quantize_row_q2_K_ref (no qw) or quantize_row_q2_K_impl once the 16 groups' scales,
    mins and levels (in L) are known: y (84,) = scales, qs, d, dmin."""
    if has_qw:
        dm = make_qp_quants(16, 15, scales, Ls, sw)
        mm = make_qp_quants(16, 15, mins, Lm, sw)
        dm = put_half(y, 80, dm)
        mm = put_half(y, 82, mm)
        for j in range(16):
            y[j] = (np.int64(Ls[j]) | (np.int64(Lm[j]) << 4)) & 0xFF
    else:
        max_scale = F32(0)
        max_min = F32(0)
        for j in range(16):
            if scales[j] > max_scale:
                max_scale = scales[j]
            if mins[j] > max_min:
                max_min = mins[j]
        if max_scale > 0:
            iscale = F32(F32(15) / max_scale)
            for j in range(16):
                y[j] = nearest_int(F32(iscale * scales[j])) & 0xFF
            dm = put_half(y, 80, F32(max_scale / F32(15)))
        else:
            for j in range(16):
                y[j] = 0
            dm = put_half(y, 80, F32(0))
        if max_min > 0:
            iscale = F32(F32(15) / max_min)
            for j in range(16):
                y[j] = (np.int64(y[j]) | (nearest_int(F32(iscale * mins[j])) << 4)) & 0xFF
            mm = put_half(y, 82, F32(max_min / F32(15)))
        else:
            mm = put_half(y, 82, F32(0))
    for j in range(16):
        d = F32(dm * F32(np.int64(y[j]) & 0xF))
        if d == 0:
            continue
        m = F32(mm * F32(np.int64(y[j]) >> 4))
        for ii in range(16):
            L[16 * j + ii] = np.uint8(_clamped(F32(F32(x[16 * j + ii] + m) / d), F32(0), F32(3)))
    _pack_2bit(L, y, 16)


@numba.njit(**_JIT)
def k4_finish(x, y, has_qw, nmax, L, scales, mins, sw, Ls, Lm):
    """The rest of Q4_K (nmax 15) / Q5_K (nmax 31), ref or _impl, once the 8 groups' scales, mins and
    levels (in L) are known: d, dmin and the scale bytes into y[0:16], the final levels into L."""
    if has_qw:
        d_block = make_qp_quants(8, 63, scales, Ls, sw)
        m_block = make_qp_quants(8, 63, mins, Lm, sw)
        for j in range(8):
            Ls[j] = min(63, Ls[j])
            Lm[j] = min(63, Lm[j])
        _pack_k4_scales(y, Ls, Lm)
        put_half(y, 0, d_block)
        put_half(y, 2, m_block)
    else:
        max_scale = F32(0)
        max_min = F32(0)
        for j in range(8):
            if scales[j] > max_scale:
                max_scale = scales[j]
            if mins[j] > max_min:
                max_min = mins[j]
        inv_scale = F32(F32(63) / max_scale) if max_scale > 0 else F32(0)
        inv_min = F32(F32(63) / max_min) if max_min > 0 else F32(0)
        for j in range(8):
            Ls[j] = min(63, nearest_int(F32(inv_scale * scales[j])) & 0xFF)
            Lm[j] = min(63, nearest_int(F32(inv_min * mins[j])) & 0xFF)
        _pack_k4_scales(y, Ls, Lm)
        put_half(y, 0, F32(max_scale / F32(63)))
        put_half(y, 2, F32(max_min / F32(63)))
    _requant_k4(x, y, L, nmax)


@numba.njit(inline="always", **_JIT)
def _pack_q4_k(y, L):
    """qs of Q4_K at y[16:144]."""
    for j in range(0, 256, 64):
        for l in range(32):
            y[16 + j // 2 + l] = np.int64(L[j + l]) | (np.int64(L[j + l + 32]) << 4)


@numba.njit(inline="always", **_JIT)
def _pack_q5_k(y, L):
    """qh (fifth bits) at y[16:48] and qs at y[48:176] of Q5_K."""
    for j in range(32):
        y[16 + j] = 0
    m1 = 1
    m2 = 2
    for n in range(0, 256, 64):
        for j in range(32):
            l1 = np.int64(L[n + j])
            if l1 > 15:
                l1 -= 16
                y[16 + j] = np.int64(y[16 + j]) | m1
            l2 = np.int64(L[n + j + 32])
            if l2 > 15:
                l2 -= 16
                y[16 + j] = np.int64(y[16 + j]) | m2
            y[48 + n // 2 + j] = l1 | (l2 << 4)
        m1 <<= 2
        m2 <<= 2


@numba.njit(**_JIT)
def _rows_k_min(kind, x, out, qw, has_qw, block_bytes):
    """Q2_K (kind 2), Q4_K (4) and Q5_K (5) over rows: the groups of LANES // groups-per-block
    super-blocks are searched together (make_qkx_lanes), then each super-block is finished alone."""
    n = 16 if kind == 2 else 32
    groups = 256 // n
    per_batch = LANES // groups
    nmax = 3 if kind == 2 else (15 if kind == 4 else 31)
    if has_qw:
        rmin, rdelta, nstep, use_mad = F32(-0.9), F32(0.05), 36, False
    elif kind == 2:
        rmin, rdelta, nstep, use_mad = F32(-0.5), F32(0.1), 15, True
    elif kind == 4:
        rmin, rdelta, nstep, use_mad = F32(-1.0), F32(0.1), 20, False
    else:
        rmin, rdelta, nstep, use_mad = F32(-0.5), F32(0.1), 15, False
    lane = np.zeros((4, 32, LANES), np.float32)
    state = np.zeros((LANE_STATE, LANES), np.float32)
    scales = np.zeros(LANES, np.float32)
    mins = np.zeros(LANES, np.float32)
    sw = np.zeros(LANES, np.float32)
    weights = np.zeros(32, np.float32)
    L = np.zeros(256, np.uint8)
    Ls = np.zeros(16, np.uint8)
    Lm = np.zeros(16, np.uint8)
    n_blocks = x.shape[1] // 256
    for r in range(x.shape[0]):
        for first in range(0, n_blocks, per_batch):
            count = min(per_batch, n_blocks - first)
            for b in range(count):
                _load_k_min(kind, x[r, 256 * (first + b):256 * (first + b) + 256],
                            qw[256 * (first + b):256 * (first + b) + 256], has_qw, lane, groups * b, sw, weights)
            for column in range(groups * count, LANES):  # a short last batch: flat groups in the rest
                for i in range(n):
                    lane[0][i, column] = F32(0)
                    lane[1][i, column] = F32(0)
            # the lane count is read from the array, not a constant: a constant trip count lets the
            # compiler unroll the lane loops into scalar code before it can vectorise them
            make_qkx_lanes(n, state.shape[1], nmax, lane, state, rmin, rdelta, nstep, use_mad, scales, mins)
            for b in range(count):
                block = first + b
                xb = x[r, 256 * block:256 * block + 256]
                yb = out[r, block_bytes * block:block_bytes * block + block_bytes]
                at = groups * b
                _lane_levels(n, groups, lane, at, L)
                if kind == 2:
                    q2_k_finish(xb, yb, has_qw, L, scales[at:at + 16], mins[at:at + 16], sw[at:at + 16], Ls, Lm)
                else:
                    k4_finish(xb, yb, has_qw, nmax, L, scales[at:at + 8], mins[at:at + 8], sw[at:at + 8], Ls, Lm)
                    if kind == 4:
                        _pack_q4_k(yb, L)
                    else:
                        _pack_q5_k(yb, L)


@numba.njit(**_JIT)
def _pack_q3_scale(y, j, l):
    """Put 6-bit scale l (0..63) of sub-block j into the 12 scale bytes at y[96:108]."""
    if j < 8:
        y[96 + j] = l & 0xF
    else:
        y[96 + j - 8] = np.int64(y[96 + j - 8]) | ((l & 0xF) << 4)
    y[96 + 8 + j % 4] = np.int64(y[96 + 8 + j % 4]) | ((l >> 4) << (2 * (j // 4)))


@numba.njit(**_JIT)
def q3_k_block(x, y, qw, L, scales, weights, sw, Ls, work):
    """quantize_row_q3_K_impl (with qw): y (110,) = hmask, qs, scales, d. (Without qw, Q3_K runs
    through make_q3_lanes in _rows_q3_k.)"""
    for k in range(96, 108):
        y[k] = 0
    sigma2 = F32(F32(F32(2) * _sum_squares(x, 0, 256)) / F32(256))
    for j in range(16):
        sw[j] = _imatrix_weights(x, qw, 16 * j, 16, sigma2, weights)
        scales[j] = make_qx_quants(16, 4, x[16 * j:16 * j + 16], L[16 * j:16 * j + 16], weights, True, work)
    d_block = make_qx_quants(16, 32, scales, Ls, sw, True, work)
    for j in range(16):
        _pack_q3_scale(y, j, np.int64(Ls[j]))
    dval = put_half(y, 108, d_block)
    for j in range(16):
        if j < 8:
            sc = np.int64(y[96 + j]) & 0xF
        else:
            sc = np.int64(y[96 + j - 8]) >> 4
        sc = (sc | ((np.int64(y[96 + 8 + j % 4]) >> (2 * (j // 4))) & 3) << 4) - 32
        d = F32(dval * F32(sc))
        if d == 0:
            continue
        for ii in range(16):
            L[16 * j + ii] = max(-4, min(3, nearest_int(F32(x[16 * j + ii] / d)))) + 4
    for k in range(32):
        y[k] = 0
    m = 0
    hm = 1
    for j in range(256):
        if L[j] > 3:
            y[m] = np.int64(y[m]) | hm
            L[j] -= 4
        m += 1
        if m == 32:
            m = 0
            hm <<= 1
    _pack_2bit(L, y, 32)


@numba.njit(**_JIT)
def q6_k_block(x, y, qw, has_qw, L, scales, work):
    """quantize_row_q6_K_ref / _impl: y (210,) = 128 low-nibble bytes, 64 high-bit bytes, 16 int8 scales, d."""
    max_scale = F32(0)
    max_abs_scale = F32(0)
    for ib in range(16):
        scale = make_qx_quants(16, 32, x[16 * ib:16 * ib + 16], L[16 * ib:16 * ib + 16], qw[16 * ib:16 * ib + 16], has_qw, work)
        scales[ib] = scale
        if abs(scale) > max_abs_scale:
            max_abs_scale = abs(scale)
            max_scale = scale
    if max_abs_scale < F32(GROUP_MAX_EPS):
        for k in range(210):
            y[k] = 0
        return
    iscale = F32(F32(-128) / max_scale)
    dval = put_half(y, 208, F32(F32(1) / iscale))
    for ib in range(16):
        y[192 + ib] = min(127, nearest_int(F32(iscale * scales[ib]))) & 0xFF
    for j in range(16):
        sc = np.int64(y[192 + j])
        sc = sc - 256 if sc > 127 else sc
        d = F32(dval * F32(sc))
        if d == 0:
            continue
        for ii in range(16):  # clamped as floats in 32-bit lanes: AVX2 has no int64 min/max or int64 -> float
            L[16 * j + ii] = np.int32(_clamped(F32(x[16 * j + ii] / d), F32(-32), F32(31))) + np.int32(32)
    for j in range(0, 256, 128):
        for l in range(32):
            l1, l2, l3, l4 = np.int64(L[j + l]), np.int64(L[j + l + 32]), np.int64(L[j + l + 64]), np.int64(L[j + l + 96])
            y[j // 2 + l] = (l1 & 0xF) | ((l3 & 0xF) << 4)
            y[j // 2 + l + 32] = (l2 & 0xF) | ((l4 & 0xF) << 4)
            y[128 + j // 4 + l] = (l1 >> 4) | ((l2 >> 4) << 2) | ((l3 >> 4) << 4) | ((l4 >> 4) << 6)


# --- 32-value block types ------------------------------------------------------------------------

@numba.njit(**_JIT)
def _row_sigma2(x):
    """sum(x^2) / n over a whole row (the 32-block imatrix variants weigh by the row's spread)."""
    return F32(_sum_squares(x, 0, x.shape[0]) / F32(x.shape[0]))


@numba.njit(**_JIT)
def q8_0_block(x, y):
    amax = F32(0)
    for j in range(32):
        ax = abs(x[j])
        amax = amax if amax > ax else ax
    d = F32(amax / F32(127))
    inv = F32(F32(1) / d) if d != 0 else F32(0)
    put_half(y, 0, d)
    for j in range(32):
        y[2 + j] = int(_round_away(F32(x[j] * inv))) & 0xFF


@numba.njit(**_JIT)
def _absmax_value(x):
    amax = F32(0)
    vmax = F32(0)
    for j in range(32):
        if amax < abs(x[j]):
            amax = abs(x[j])
            vmax = x[j]
    return vmax


@numba.njit(**_JIT)
def _min_max(x):
    vmin = F32(3.4028234663852886e38)
    vmax = F32(-3.4028234663852886e38)
    for j in range(32):
        if x[j] < vmin:
            vmin = x[j]
        if x[j] > vmax:
            vmax = x[j]
    return vmin, vmax


@numba.njit(**_JIT)
def _put_q5_bits(y, at_qh, at_qs, L):
    """16 nibble bytes at y[at_qs:] and the 32 fifth bits as a little-endian u32 at y[at_qh:]."""
    qh = 0
    for j in range(16):
        x0 = np.int64(L[j])
        x1 = np.int64(L[j + 16])
        y[at_qs + j] = (x0 & 0x0F) | ((x1 & 0x0F) << 4)
        qh |= ((x0 & 0x10) >> 4) << j
        qh |= ((x1 & 0x10) >> 4) << (j + 16)
    for k in range(4):
        y[at_qh + k] = (qh >> (8 * k)) & 0xFF


@numba.njit(**_JIT)
def q4_0_block(x, y, qw, has_qw, sigma2, L, weight, work):
    if has_qw:
        _imatrix_weights(x, qw, 0, 32, sigma2, weight)
        put_half(y, 0, make_qx_quants(32, 8, x, L, weight, True, work))
        for j in range(16):
            y[2 + j] = np.int64(L[j]) | (np.int64(L[j + 16]) << 4)
        return
    d = F32(_absmax_value(x) / F32(-8))
    inv = F32(F32(1) / d) if d != 0 else F32(0)
    put_half(y, 0, d)
    for j in range(16):
        x0 = min(15, _c_int8(F32(F32(x[j] * inv) + F32(8.5)))) & 0xFF
        x1 = min(15, _c_int8(F32(F32(x[j + 16] * inv) + F32(8.5)))) & 0xFF
        y[2 + j] = x0 | (x1 << 4)


@numba.njit(**_JIT)
def q5_0_block(x, y, qw, has_qw, sigma2, L, weight, work):
    if has_qw:
        _imatrix_weights(x, qw, 0, 32, sigma2, weight)
        put_half(y, 0, make_qx_quants(32, 16, x, L, weight, True, work))
        _put_q5_bits(y, 2, 6, L)
        return
    d = F32(_absmax_value(x) / F32(-16))
    inv = F32(F32(1) / d) if d != 0 else F32(0)
    put_half(y, 0, d)
    for j in range(32):
        L[j] = min(31, _c_int8(F32(F32(x[j] * inv) + F32(16.5)))) & 0xFF
    _put_q5_bits(y, 2, 6, L)


@numba.njit(**_JIT)
def q4_1_block(x, y):
    """quantize_row_q4_1_ref (with an imatrix Q4_1 runs through _rows_min_32)."""
    vmin, vmax = _min_max(x)
    d = F32(F32(vmax - vmin) / F32(15))
    inv = F32(F32(1) / d) if d != 0 else F32(0)
    put_half(y, 0, d)
    put_half(y, 2, vmin)
    for j in range(16):
        x0 = min(15, _c_int8(F32(F32(F32(x[j] - vmin) * inv) + F32(0.5)))) & 0xFF
        x1 = min(15, _c_int8(F32(F32(F32(x[j + 16] - vmin) * inv) + F32(0.5)))) & 0xFF
        y[4 + j] = x0 | (x1 << 4)


@numba.njit(**_JIT)
def q5_1_block(x, y, L):
    """quantize_row_q5_1_ref (with an imatrix Q5_1 runs through _rows_min_32)."""
    vmin, vmax = _min_max(x)
    d = F32(F32(vmax - vmin) / F32(31))
    inv = F32(F32(1) / d) if d != 0 else F32(0)
    put_half(y, 0, d)
    put_half(y, 2, vmin)
    for j in range(32):
        L[j] = int(math.trunc(F64(F32(F32(F32(x[j] - vmin) * inv) + F32(0.5))))) & 0xFF  # (uint8_t)(x + 0.5f)
    _put_q5_bits(y, 4, 8, L)


# --- row drivers (one per type; the GIL is released) ---------------------------------------------

@numba.njit(**_JIT)
def _rows_256(kind, x, out, qw, has_qw, block_bytes):
    """Q6_K (kind 6) and Q3_K with an imatrix (3) over rows, block after block."""
    levels = np.zeros(256, np.int8)
    weights = np.zeros(32, np.float32)
    scales = np.zeros(16, np.float32)
    sw = np.zeros(16, np.float32)
    Ls = np.zeros(16, np.int8)
    work = np.zeros((3, QX_STEPS), np.float32)
    for r in range(x.shape[0]):
        for i in range(x.shape[1] // 256):
            xb = x[r, 256 * i:256 * i + 256]
            yb = out[r, block_bytes * i:block_bytes * i + block_bytes]
            qb = qw[256 * i:256 * i + 256]
            if kind == 3:
                q3_k_block(xb, yb, qb, levels, scales, weights, sw, Ls, work)
            else:
                q6_k_block(xb, yb, qb, has_qw, levels, scales, work)


@numba.njit(**_JIT)
def _rows_32(kind, x, out, qw, has_qw, block_bytes):
    """The 32-value block types over rows (kind 0..3: Q4_0, Q4_1, Q5_0, Q5_1; 4: Q8_0), block after
    block (Q4_1/Q5_1 here only without an imatrix: see _rows_min_32)."""
    L = np.zeros(32, np.int8)
    Lu = np.zeros(32, np.uint8)
    weight = np.zeros(32, np.float32)
    work = np.zeros((3, QX_STEPS), np.float32)
    for r in range(x.shape[0]):
        sigma2 = _row_sigma2(x[r]) if has_qw and kind < 4 else F32(0)
        for i in range(x.shape[1] // 32):
            xb = x[r, 32 * i:32 * i + 32]
            yb = out[r, block_bytes * i:block_bytes * i + block_bytes]
            qb = qw[32 * i:32 * i + 32]
            if kind == 0:
                q4_0_block(xb, yb, qb, has_qw, sigma2, L, weight, work)
            elif kind == 1:
                q4_1_block(xb, yb)
            elif kind == 2:
                q5_0_block(xb, yb, qb, has_qw, sigma2, L, weight, work)
            elif kind == 3:
                q5_1_block(xb, yb, Lu)
            else:
                q8_0_block(xb, yb)


@numba.njit(**_JIT)
def _rows_min_32(kind, x, out, qw, has_qw, block_bytes):
    """Q4_1 (kind 1) and Q5_1 (3) over rows. With an imatrix (quantize_row_q4_1_impl / q5_1_impl:
    make_qkx3_quants per block of 32) LANES blocks are searched together (make_qkx_lanes); without
    one, block after block (_rows_32)."""
    if not has_qw:
        _rows_32(kind, x, out, qw, has_qw, block_bytes)
        return
    nmax = 15 if kind == 1 else 31
    lane = np.zeros((4, 32, LANES), np.float32)
    state = np.zeros((LANE_STATE, LANES), np.float32)
    scales = np.zeros(LANES, np.float32)
    mins = np.zeros(LANES, np.float32)
    weights = np.zeros(32, np.float32)
    L = np.zeros(32, np.uint8)
    X, W = lane[0], lane[1]
    n_blocks = x.shape[1] // 32
    for r in range(x.shape[0]):
        sigma2 = _row_sigma2(x[r])
        for first in range(0, n_blocks, LANES):
            count = min(LANES, n_blocks - first)
            for g in range(LANES):
                if g < count:
                    _imatrix_weights(x[r], qw, 32 * (first + g), 32, sigma2, weights)
                for i in range(32):
                    X[i, g] = x[r, 32 * (first + g) + i] if g < count else F32(0)
                    W[i, g] = weights[i] if g < count else F32(0)
            lanes = state.shape[1]  # from the array, not a constant: see _rows_k_min
            make_qkx_lanes(32, lanes, nmax, lane, state, F32(-0.9), F32(0.05), 36, False, scales, mins)
            for g in range(count):
                block = first + g
                y = out[r, block_bytes * block:block_bytes * block + block_bytes]
                put_half(y, 0, scales[g])
                put_half(y, 2, F32(-mins[g]))
                for i in range(32):
                    L[i] = np.uint8(lane[2][i, g])
                if kind == 1:
                    for j in range(16):
                        y[4 + j] = np.int64(L[j]) | (np.int64(L[j + 16]) << 4)
                else:
                    _put_q5_bits(y, 4, 8, L)


# --- Q3_K without an imatrix ----------------------------------------------------------------------

@numba.njit(inline="always", **_JIT)
def _q3_k_scales(y, scales, first, l6, dl):
    """quantize_row_q3_K_ref's scale part for the 16 group scales[first:first+16] of one super-block:
    the 12 scale bytes y[96:108] and d (y[108:110]); dl[first + j] = d * (6-bit scale j - 32), the
    divisor of group j's final levels (0: keep the search's levels), as ggml reads it back (the 6
    bits read back are the l6[j] written; with every scale 0 ggml's bytes stay 0, read back as -32)."""
    max_scale = F32(0)
    amax = F32(0)
    for j in range(16):
        v = scales[first + j]
        scale = abs(v)
        larger = scale > amax
        amax = scale if larger else amax
        max_scale = v if larger else max_scale
    if max_scale != 0:
        iscale = F32(F32(-32) / max_scale)
        for j in range(16):
            l = nearest_int(F32(iscale * scales[first + j])) & 0xFF  # int8_t l = nearest_int(...)
            l = l - 256 if l > 127 else l
            l6[j] = max(-32, min(31, l)) + 32
        dval = put_half(y, 108, F32(F32(1) / iscale))
    else:
        for j in range(16):
            l6[j] = 0
        dval = put_half(y, 108, F32(0))
    for j in range(8):
        y[96 + j] = (l6[j] & 0xF) | ((l6[j + 8] & 0xF) << 4)
    for k in range(4):
        y[104 + k] = (l6[k] >> 4) | ((l6[k + 4] >> 4) << 2) | ((l6[k + 8] >> 4) << 4) | ((l6[k + 12] >> 4) << 6)
    for j in range(16):
        dl[first + j] = F32(dval * F32(l6[j] - 32))


@numba.njit(inline="always", **_JIT)
def _q3_k_levels(x, levels, empty, dl, first, Lb):
    """The final levels 0..7 of one super-block into Lb (256,) in element order: x / dl[group]
    rounded and clamped, + 4 (ggml's second pass), or, where dl is 0, the search's levels (+ 4; 0 in an
    all-zero group), which levels[i, first + j] holds for element 16j + i."""
    n = _opaque(16)
    for j in range(16):
        d = dl[first + j]
        if d == 0:
            for i in range(16):
                Lb[16 * j + i] = 0 if empty[first + j] != 0 else np.int32(levels[i, first + j]) + 4
        else:
            for i in range(n):
                Lb[16 * j + i] = np.int32(_clamped(F32(x[16 * j + i] / d), F32(-4), F32(3))) + 4


@numba.njit(inline="always", **_JIT)
def _q3_k_pack(y, Lb, packed):
    """hmask (y[0:32]: bit k of byte m set when element 32k + m is above 3) and qs (y[32:96]: byte l
    of half h holds element 128h + l + 32t at bits 2t, each level's low two bits) of one super-block
    whose levels 0..7 are Lb[0:256]; packed (96,) int32 is scratch."""
    n = _opaque(32)
    for m in range(n):
        packed[m] = np.int32(Lb[m] > 3)
    for k in range(1, 8):
        for m in range(n):
            packed[m] = packed[m] | (np.int32(Lb[32 * k + m] > 3) << k)
    for half in range(2):
        for l in range(n):
            packed[32 + 32 * half + l] = Lb[128 * half + l] & 3
        for t in range(1, 4):
            for l in range(n):
                at = 32 + 32 * half + l
                packed[at] = packed[at] | ((Lb[128 * half + 32 * t + l] & 3) << (2 * t))
    for m in range(3 * n):
        y[m] = packed[m]


@numba.njit(**_JIT)
def _rows_q3_k(kind, x, out, qw, has_qw, block_bytes):
    """Q3_K over rows. Without an imatrix the groups of LANES // 16 super-blocks are searched together
    (make_q3_lanes), then each super-block's scales, final levels (from its row, in element order)
    and bytes are made alone; with one, block after block (q3_k_block)."""
    if has_qw:
        _rows_256(kind, x, out, qw, has_qw, block_bytes)
        return
    per_batch = LANES // 16
    lane = np.zeros((4, 32, LANES), np.float32)
    state = np.zeros((LANE_STATE, LANES), np.float32)
    chain = np.zeros((4, 17, LANES), np.float32)
    lane_scales = np.zeros(LANES, np.float32)
    dl = np.zeros(LANES, np.float32)
    l6 = np.zeros(16, np.int32)
    Lb = np.zeros(256, np.int32)
    packed = np.zeros(96, np.int32)
    n_blocks = x.shape[1] // 256
    X = lane[0]
    for r in range(x.shape[0]):
        for first in range(0, n_blocks, per_batch):
            count = min(per_batch, n_blocks - first)
            for b in range(per_batch):
                for j in range(16):
                    for i in range(16):
                        X[i, 16 * b + j] = x[r, 256 * (first + b) + 16 * j + i] if b < count else F32(0)
            lanes = state.shape[1]  # from the array, not a constant: see _rows_k_min
            levels = make_q3_lanes(16, lanes, 4, lane, state, chain, lane_scales)
            for b in range(count):
                block = first + b
                y = out[r, block_bytes * block:block_bytes * block + block_bytes]
                _q3_k_scales(y, lane_scales, 16 * b, l6, dl)
                _q3_k_levels(x[r, 256 * block:256 * block + 256], levels, state[5], dl, 16 * b, Lb)
                _q3_k_pack(y, Lb, packed)


# --- IQ4 (non-linear 4-bit) ------------------------------------------------------------------------

@numba.njit(inline="always", **_JIT)
def _iq4_nearest(v):
    """(index, value) of the kvalues_iq4nl entry ggml's best_index_int8 picks for v, without branches
    (so a loop of it vectorises): the pair (lo, hi) of neighbours around v found by comparing v with
    each value, then ggml's own `v - lo < hi - v` test. The same index as the binary search for every
    v: below the first value the pair is (v0, v1) and the test picks v0, above the last (v14, v15) and
    it picks v15; a NaN, which the binary search walks up to the last entry, also gets the last."""
    lo = F32(-127)
    hi = F32(-104)
    index = F32(1)
    for k in range(1, 15):
        above = v >= F32(KVALUES_IQ4NL[k])
        lo = F32(KVALUES_IQ4NL[k]) if above else lo
        hi = F32(KVALUES_IQ4NL[k + 1]) if above else hi
        index = F32(k + 1) if above else index
    low = F32(v - lo) < F32(hi - v)
    nan = v != v
    index = F32(15) if nan else (F32(index - F32(1)) if low else index)
    value = F32(113) if nan else (lo if low else hi)
    return index, value


@numba.njit(inline="always", **_JIT)
def _iq4_sums(n, lanes, X, W, inv, sqx, sq2):
    """One trial of the IQ4 search in every lane: sqx[g] = sum w*q*x, sq2[g] = sum w*q*q (in ggml's
    order) over the values nearest to inv[g] * x."""
    for g in range(lanes):
        sqx[g] = F32(0)
        sq2[g] = F32(0)
    for i in range(n):
        for g in range(lanes):
            xv = X[i, g]
            q = _iq4_nearest(F32(inv[g] * xv))[1]
            wq = F32(W[i, g] * q)
            sqx[g] = F32(sqx[g] + F32(wq * xv))
            sq2[g] = F32(sq2[g] + F32(wq * q))


@numba.njit(inline="always", **_JIT)
def make_iq4_lanes(n, lanes, lane, state, scales):
    """quantize_row_iq4_nl_impl's scale search (ntry 7) for `lanes` blocks of n values at once, laid out
    as in make_qkx_lanes: values in lane[0] (n, lanes), weights in lane[1]; the block scales come
    back in scales[g] (0 for a block below GROUP_MAX_EPS, as ggml's `continue` leaves it)."""
    X, W = lane[0], lane[1]
    amax, vmax, inv, sqx, sq2, d, best = state[0], state[1], state[2], state[3], state[4], state[5], state[6]
    zero = F32(0)
    _lanes_absmax(n, lanes, X, amax, vmax)
    for g in range(lanes):
        inv[g] = F32(F32(1) / F32(F32(-vmax[g]) / F32(-127)))
    _iq4_sums(n, lanes, X, W, inv, sqx, sq2)
    for g in range(lanes):
        scale = F32(sqx[g] / sq2[g]) if sq2[g] > 0 else zero
        d[g] = scale
        best[g] = F32(scale * sqx[g])
    for itry in range(-7, 8):
        for g in range(lanes):
            inv[g] = F32(F32(itry - 127) / vmax[g])
        _iq4_sums(n, lanes, X, W, inv, sqx, sq2)
        for g in range(lanes):
            better = (sq2[g] > 0) & (F32(sqx[g] * sqx[g]) > F32(best[g] * sq2[g]))
            scale = F32(sqx[g] / sq2[g])
            d[g] = scale if better else d[g]
            best[g] = F32(scale * sqx[g]) if better else best[g]
    for g in range(lanes):
        scales[g] = zero if amax[g] < F32(GROUP_MAX_EPS) else d[g]


@numba.njit(**_JIT)
def _rows_iq4(super_block, x, out, qw, has_qw, block_bytes):
    """IQ4_NL (super_block 32) and IQ4_XS (256) over rows, as quantize_iq4_nl / quantize_iq4_xs call
    quantize_row_iq4_nl_impl: LANES blocks of 32 (LANES // 8 IQ4_XS super-blocks) searched together
    (make_iq4_lanes), their final indices found together, each super-block's bytes written alone."""
    per_batch = LANES * 32 // super_block
    blocks = super_block // 32
    lane = np.zeros((4, 32, LANES), np.float32)
    state = np.zeros((LANE_STATE, LANES), np.float32)
    scales = np.zeros(LANES, np.float32)
    inverse = np.zeros(LANES, np.float32)
    weights = np.zeros(32, np.float32)
    X, W, L = lane[0], lane[1], lane[2]
    n_super = x.shape[1] // super_block
    for r in range(x.shape[0]):
        for first in range(0, n_super, per_batch):
            count = min(per_batch, n_super - first)
            for b in range(per_batch):
                if b >= count:
                    for column in range(blocks * b, blocks * b + blocks):
                        for j in range(32):
                            X[j, column] = F32(0)
                            W[j, column] = F32(0)
                    continue
                xs = x[r, super_block * (first + b):super_block * (first + b) + super_block]
                sigma2 = F32(_sum_squares(xs, 0, super_block) * F32(F32(2) / F32(super_block)))
                for ib in range(blocks):
                    column = blocks * b + ib
                    if has_qw:
                        _imatrix_weights(xs, qw[super_block * (first + b):], 32 * ib, 32, sigma2, weights)
                    for j in range(32):
                        xv = xs[32 * ib + j]
                        X[j, column] = xv
                        W[j, column] = weights[j] if has_qw else F32(xv * xv)
            lanes = state.shape[1]  # from the array, not a constant: see _rows_k_min
            make_iq4_lanes(32, lanes, lane, state, scales)
            for b in range(per_batch):
                if b >= count:
                    for ib in range(blocks):
                        inverse[blocks * b + ib] = F32(0)
                    continue
                y = out[r, block_bytes * (first + b):block_bytes * (first + b) + block_bytes]
                if blocks == 1:
                    put_half(y, 0, scales[b])
                    inverse[b] = F32(F32(1) / scales[b]) if scales[b] != 0 else F32(0)
                    continue
                max_scale = F32(0)
                amax_scale = F32(0)
                for ib in range(blocks):
                    scale = scales[blocks * b + ib]
                    if abs(scale) > amax_scale:
                        amax_scale = abs(scale)
                        max_scale = scale
                d = F32(-max_scale / F32(32))
                put_half(y, 0, d)
                inv = F32(F32(1) / d) if d != 0 else F32(0)
                scales_h = 0
                for ib in range(blocks):
                    l = max(-32, min(31, nearest_int(F32(inv * scales[blocks * b + ib]))))
                    dl = F32(d * F32(l))
                    inverse[blocks * b + ib] = F32(F32(1) / dl) if dl != 0 else F32(0)
                    l += 32
                    if ib % 2 == 0:
                        y[4 + ib // 2] = l & 0xF
                    else:
                        y[4 + ib // 2] = np.int64(y[4 + ib // 2]) | ((l & 0xF) << 4)
                    scales_h |= (l >> 4) << (2 * (ib % 8))
                y[2] = scales_h & 0xFF
                y[3] = (scales_h >> 8) & 0xFF
            for j in range(32):
                for g in range(lanes):
                    L[j, g] = _iq4_nearest(F32(inverse[g] * X[j, g]))[0]
            q4 = 2 if blocks == 1 else 8
            for b in range(count):
                y = out[r, block_bytes * (first + b):block_bytes * (first + b) + block_bytes]
                for ib in range(blocks):
                    for j in range(16):
                        y[q4 + 16 * ib + j] = np.int64(L[j, blocks * b + ib]) | (np.int64(L[j + 16, blocks * b + ib]) << 4)


# ggml type name -> (row driver, kind): kernels.quantize calls driver(kind, x, out, qw, has_qw, block_bytes)
# with x (n_rows, n_per_row) float32, out (n_rows, row_bytes) uint8, qw (n_per_row,) float32 (GIL released)
ROWS = {"q2_K": (_rows_k_min, 2), "q3_K": (_rows_q3_k, 3), "q4_K": (_rows_k_min, 4), "q5_K": (_rows_k_min, 5),
        "q6_K": (_rows_256, 6), "iq4_xs": (_rows_iq4, 256), "q4_0": (_rows_32, 0), "q4_1": (_rows_min_32, 1),
        "q5_0": (_rows_32, 2), "q5_1": (_rows_min_32, 3), "q8_0": (_rows_32, 4), "iq4_nl": (_rows_iq4, 32)}


# --- dequantizers (ggml's dequantize_row_*): the error measurement of a tier reads them -----------

@numba.njit(inline="always", **_JIT)
def _half_at(y, offset):
    return half_value(np.int64(y[offset]) | (np.int64(y[offset + 1]) << 8))


@numba.njit(**_JIT)
def deq_q2_k(y, out):
    d = _half_at(y, 80)
    dmin = _half_at(y, 82)
    at = 0
    sc_index = 0
    for n in range(0, 256, 128):
        shift = 0
        for _ in range(4):
            for half in range(2):
                sc = np.int64(y[sc_index])
                sc_index += 1
                dl = F32(d * F32(sc & 0xF))
                ml = F32(dmin * F32(sc >> 4))
                for l in range(16):
                    q = (np.int64(y[16 + n // 4 + 16 * half + l]) >> shift) & 3
                    out[at] = F32(F32(dl * F32(q)) - ml)
                    at += 1
            shift += 2


@numba.njit(**_JIT)
def deq_q3_k(y, out):
    """dequantize_row_q3_K: element 16j + l of group j is d * scale_j * (its 2 bits from qs, minus 4
    unless its hmask bit is set). Group by group, each a loop of 16 without branches in 32-bit
    integers (so it vectorises: the bound is opaque, see _opaque)."""
    d_all = _half_at(y, 108)
    n = _opaque(16)
    for j in range(16):
        chunk = j // 2  # the 32 elements 32 * chunk..: qs half chunk // 4 at shift 2 * (chunk % 4), hmask bit chunk
        half = j % 2
        low = (np.int32(y[96 + j]) & 0xF) if j < 8 else (np.int32(y[96 + j - 8]) >> 4)
        sc = (low | (((np.int32(y[104 + j % 4]) >> (2 * (j // 4))) & 3) << 4)) - 32
        dl = F32(d_all * F32(sc))
        qs = 32 + 32 * (chunk // 4) + 16 * half
        shift = np.int32(2 * (chunk % 4))
        bit = np.int32(chunk)
        for l in range(n):
            q = ((np.int32(y[qs + l]) >> shift) & np.int32(3)) - np.int32(4) + (((np.int32(y[16 * half + l]) >> bit) & np.int32(1)) << np.int32(2))
            out[16 * j + l] = F32(dl * F32(q))


@numba.njit(**_JIT)
def _deq_k4(y, out, high_bits):
    """Q4_K (high_bits False) and Q5_K: d, dmin, 6-bit scales and mins, nibbles (and fifth bits)."""
    d = _half_at(y, 0)
    dmin = _half_at(y, 2)
    qs = 48 if high_bits else 16
    at = 0
    u1 = 1
    u2 = 2
    for group in range(4):
        sc, m = _scale_min_k4(2 * group, y)
        d1 = F32(d * F32(sc))
        m1 = F32(dmin * F32(m))
        sc, m = _scale_min_k4(2 * group + 1, y)
        d2 = F32(d * F32(sc))
        m2 = F32(dmin * F32(m))
        for l in range(32):
            q = np.int64(y[qs + 32 * group + l]) & 0xF
            if high_bits and np.int64(y[16 + l]) & u1:
                q += 16
            out[at + l] = F32(F32(d1 * F32(q)) - m1)
        for l in range(32):
            q = np.int64(y[qs + 32 * group + l]) >> 4
            if high_bits and np.int64(y[16 + l]) & u2:
                q += 16
            out[at + 32 + l] = F32(F32(d2 * F32(q)) - m2)
        at += 64
        u1 <<= 2
        u2 <<= 2


@numba.njit(**_JIT)
def deq_q4_k(y, out):
    _deq_k4(y, out, False)


@numba.njit(**_JIT)
def deq_q5_k(y, out):
    _deq_k4(y, out, True)


@numba.njit(**_JIT)
def deq_q6_k(y, out):
    d = _half_at(y, 208)
    for n in range(2):
        ql = 64 * n
        qh = 128 + 32 * n
        sc = 192 + 8 * n
        for l in range(32):
            s = l // 16
            h = np.int64(y[qh + l])
            q1 = ((np.int64(y[ql + l]) & 0xF) | ((h & 3) << 4)) - 32
            q2 = ((np.int64(y[ql + l + 32]) & 0xF) | (((h >> 2) & 3) << 4)) - 32
            q3 = ((np.int64(y[ql + l]) >> 4) | (((h >> 4) & 3) << 4)) - 32
            q4 = ((np.int64(y[ql + l + 32]) >> 4) | (((h >> 6) & 3) << 4)) - 32
            base = 128 * n
            out[base + l] = F32(F32(d * F32(_int8(y[sc + s]))) * F32(q1))
            out[base + l + 32] = F32(F32(d * F32(_int8(y[sc + s + 2]))) * F32(q2))
            out[base + l + 64] = F32(F32(d * F32(_int8(y[sc + s + 4]))) * F32(q3))
            out[base + l + 96] = F32(F32(d * F32(_int8(y[sc + s + 6]))) * F32(q4))


@numba.njit(inline="always", **_JIT)
def _int8(byte):
    value = np.int64(byte)
    return value - 256 if value > 127 else value


@numba.njit(**_JIT)
def deq_iq4_nl(y, out):
    d = _half_at(y, 0)
    for j in range(16):
        byte = np.int64(y[2 + j])
        out[j] = F32(d * F32(KVALUES_IQ4NL[byte & 0xF]))
        out[j + 16] = F32(d * F32(KVALUES_IQ4NL[byte >> 4]))


@numba.njit(**_JIT)
def deq_iq4_xs(y, out):
    d = _half_at(y, 0)
    scales_h = np.int64(y[2]) | (np.int64(y[3]) << 8)
    for ib in range(8):
        ls = ((np.int64(y[4 + ib // 2]) >> (4 * (ib % 2))) & 0xF) | (((scales_h >> (2 * ib)) & 3) << 4)
        dl = F32(d * F32(ls - 32))
        for j in range(16):
            byte = np.int64(y[8 + 16 * ib + j])
            out[32 * ib + j] = F32(dl * F32(KVALUES_IQ4NL[byte & 0xF]))
            out[32 * ib + j + 16] = F32(dl * F32(KVALUES_IQ4NL[byte >> 4]))


@numba.njit(**_JIT)
def deq_q8_0(y, out):
    d = _half_at(y, 0)
    for j in range(32):
        out[j] = F32(F32(_int8(y[2 + j])) * d)


@numba.njit(inline="always", **_JIT)
def _u32_at(y, offset):
    return np.int64(y[offset]) | (np.int64(y[offset + 1]) << 8) | (np.int64(y[offset + 2]) << 16) | (np.int64(y[offset + 3]) << 24)


@numba.njit(**_JIT)
def _deq_32(y, out, fifth_bit, has_min):
    """Q4_0 (no fifth bit, no min), Q4_1 (a min), Q5_0 (fifth bits), Q5_1 (both): gguf's d * q (- 8 or
    16 without a min) or d * q + m, in float32."""
    d = _half_at(y, 0)
    m = _half_at(y, 2) if has_min else F32(0)
    at = 4 if has_min else 2
    qh = _u32_at(y, at) if fifth_bit else 0
    qs = at + 4 if fifth_bit else at
    offset = 0 if has_min else (16 if fifth_bit else 8)
    for j in range(16):
        byte = np.int64(y[qs + j])
        low = (byte & 0xF) | (((qh >> j) & 1) << 4)
        high = (byte >> 4) | (((qh >> (j + 16)) & 1) << 4)
        if has_min:
            out[j] = F32(F32(d * F32(low)) + m)
            out[j + 16] = F32(F32(d * F32(high)) + m)
        else:
            out[j] = F32(d * F32(low - offset))
            out[j + 16] = F32(d * F32(high - offset))


@numba.njit(**_JIT)
def _dequantize_block(kind, y, o):
    """One block of `kind` (DEQUANT's) from its bytes y into o."""
    if kind == 2:
        deq_q2_k(y, o)
    elif kind == 3:
        deq_q3_k(y, o)
    elif kind == 4:
        deq_q4_k(y, o)
    elif kind == 5:
        deq_q5_k(y, o)
    elif kind == 6:
        deq_q6_k(y, o)
    elif kind == 7:
        deq_iq4_xs(y, o)
    elif kind == 8:
        deq_iq4_nl(y, o)
    elif kind == 9:
        deq_q8_0(y, o)
    else:  # 10..13: Q4_0, Q4_1, Q5_0, Q5_1
        _deq_32(y, o, kind >= 12, kind % 2 == 1)


@numba.njit(**_JIT)
def _dequantize_rows(kind, data, out, block, block_bytes):
    for r in range(data.shape[0]):
        for i in range(out.shape[1] // block):
            _dequantize_block(kind, data[r, block_bytes * i:block_bytes * i + block_bytes], out[r, block * i:block * i + block])


# ggml type name -> (kind for _dequantize_rows, values per block, bytes per block)
DEQUANT = {"q2_K": (2, 256, 84), "q3_K": (3, 256, 110), "q4_K": (4, 256, 144), "q5_K": (5, 256, 176),
           "q6_K": (6, 256, 210), "iq4_xs": (7, 256, 136), "iq4_nl": (8, 32, 18), "q8_0": (9, 32, 34),
           "q4_0": (10, 32, 18), "q4_1": (11, 32, 20), "q5_0": (12, 32, 22), "q5_1": (13, 32, 24)}


# --- the error measurement: a tier's figures without a dequantized copy of the tensor -------------
# Sums of squares are added in float64 (each float32 square is exact in float64) in whatever order
# the compiler vectorises them ("reassoc" on _squares_and_peak only; the dequantizers above keep
# ggml's float32 operations). The largest |error| is taken on the float32 bits of |error| as
# integers, which order as the magnitudes do, with every NaN above infinity above every finite
# value: numpy's max (NaN if any value is), in a loop that vectorises without letting the compiler
# assume there are no NaNs.

@numba.njit(nogil=True, cache=True, error_model="numpy", fastmath={"reassoc"})
def _squares_and_peak(a, b, first, n, peak_bits):
    """(the sum of (a[l] - b[first + l])^2 for l < n in float64, the largest of peak_bits and the
    float32 bits of every |a[l] - b[first + l]|). Not inlined: its "reassoc" would not come along."""
    total = 0.0
    top = np.int32(peak_bits)
    for l in range(n):
        e = F32(a[l] - b[first + l])
        total += F64(e) * F64(e)
        top = max(top, _float32_bits(abs(e)))
    return total, top


@intrinsic
def _float32_of_bits32(typingctx, value):
    """The float32 whose bits are an int32."""
    if value != types.int32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(types.int32), codegen


@numba.njit(**_JIT)
def _source_stats(source, out):
    """out[0] = sum of source^2 (float64); returns the largest |source| (NaN or infinite if one is)."""
    zeros = np.zeros(source.shape[1], dtype=np.float32)
    total = 0.0
    top = np.int32(0)
    for r in range(source.shape[0]):
        part, top = _squares_and_peak(source[r], zeros, 0, source.shape[1], top)
        total += part
    out[0] = total
    return _float32_of_bits32(top)


@numba.njit(**_JIT)
def _error_rows(kind, data, source, block, block_bytes, out):
    """out[0] = sum over the rows of (dequantized data - source)^2; returns the largest |error|."""
    deq = np.empty(source.shape[1], dtype=np.float32)
    total = 0.0
    top = np.int32(0)
    for r in range(source.shape[0]):
        for i in range(source.shape[1] // block):
            _dequantize_block(kind, data[r, block_bytes * i:block_bytes * i + block_bytes], deq[block * i:block * i + block])
        part, top = _squares_and_peak(deq, source[r], 0, source.shape[1], top)
        total += part
    out[0] = total
    return _float32_of_bits32(top)


def source_stats(source):
    """(sum of squares (float64), largest |value|) of a C-contiguous float32 (n_rows, row) array; the
    largest is NaN or infinite when a value is."""
    out = np.zeros(1, dtype=np.float64)
    peak = _source_stats(source, out)
    return float(out[0]), float(peak)


def error_rows(name, data, source):
    """(sum of squared errors, largest |error|) of ggml `name` bytes `data` (C-contiguous uint8, n_rows
    * row_bytes) against C-contiguous float32 `source` (n_rows, row): what dequantizing them and
    subtracting the source gives, without the dequantized copy."""
    kind, block, block_bytes = DEQUANT[name]
    n_rows, row = source.shape
    out = np.zeros(1, dtype=np.float64)
    peak = _error_rows(kind, data.reshape(n_rows, row // block * block_bytes), source, block, block_bytes, out)
    return float(out[0]), float(peak)


def dequantize_rows(name, data, n_rows, row):
    """float32 (n_rows, row) of ggml `name` bytes `data` (uint8, n_rows * row_bytes), as ggml's dequantize_row_*."""
    kind, block, block_bytes = DEQUANT[name]
    out = np.empty((n_rows, row), dtype=np.float32)
    _dequantize_rows(kind, np.ascontiguousarray(data).reshape(n_rows, row // block * block_bytes), out, block, block_bytes)
    return out


# Every kernel's cache written best effort (moetools.jitcache: a full drive does not fail the run).
make_cache_writes_best_effort(globals())
