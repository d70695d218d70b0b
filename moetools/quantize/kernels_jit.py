"""ggml's quantizers compiled with numba: every K-quant, IQ4_NL/IQ4_XS and the 32-value block types,
without and with an importance matrix, byte-identical to ggml (and to the numpy kernels in kernels.py).

Each function follows ggml/src/ggml-quants.c loop for loop (the algorithms of `quantize_row_*_ref`,
the `quantize_row_*_impl` imatrix variants, `make_qx_quants`, `make_q3_quants`, `make_qkx2_quants` /
`make_qkx3_quants`, `make_qp_quants`, `quantize_row_iq4_nl_impl`), reimplemented as scalar loops a
compiler turns into what the C compiler makes of ggml's. Byte identity needs the same float32
operations in the same order, so every intermediate is rounded to float32 explicitly (`F32(...)`:
numba, like numpy, would otherwise widen a float32 combined with an int or a Python float), products
are never fused (numba does not allow LLVM to contract a*b+c without fastmath), and float16 is
converted with round-to-nearest-even as ggml's GGML_FP32_TO_FP16 does.

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


@numba.njit(**_JIT)
def _rne(value):
    """Round a float64 in [0, 2^52) half to even."""
    return (value + 4503599627370496.0) - 4503599627370496.0


@numba.njit(**_JIT)
def half_bits(f):
    """float32 -> IEEE half bits, round to nearest even (ggml's GGML_FP32_TO_FP16)."""
    sign = 0x8000 if math.copysign(1.0, F64(f)) < 0 else 0
    a = abs(F64(f))
    if a != a:
        return sign | 0x7E00
    if a >= 65520.0:
        return sign | 0x7C00
    if a < 6.103515625e-05:  # below 2^-14: a subnormal half (or the smallest normal after rounding)
        return sign | int(_rne(a * 16777216.0))
    mantissa, exponent = math.frexp(a)
    bits = int(_rne((mantissa * 2.0 - 1.0) * 1024.0))
    biased = exponent + 14
    if bits == 1024:
        bits = 0
        biased += 1
    return sign | (biased << 10) | bits


@numba.njit(**_JIT)
def half_value(h):
    """IEEE half bits -> float32 (GGML_FP16_TO_FP32)."""
    exponent = (h >> 10) & 0x1F
    mantissa = h & 0x3FF
    if exponent == 0:
        value = mantissa * 5.9604644775390625e-08
    elif exponent == 31:
        value = math.inf if mantissa == 0 else math.nan
    else:
        value = math.ldexp(F64(1024 + mantissa), exponent - 25)
    return F32(-value if h & 0x8000 else value)


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


@numba.njit(inline="always", **_JIT)
def best_index_int8(n, values, x):
    """Index of the entry of the sorted `values` nearest to x (ggml's best_index_int8)."""
    if x <= F32(values[0]):
        return 0
    if x >= F32(values[n - 1]):
        return n - 1
    ml = 0
    mu = n - 1
    while mu - ml > 1:
        mav = (ml + mu) // 2
        if x < F32(values[mav]):
            mu = mav
        else:
            ml = mav
    return mu - 1 if F32(x - F32(values[mu - 1])) < F32(F32(values[mu]) - x) else mu


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
    for i in range(n):
        xi = x[i]
        w = qw[i] if has_qw else F32(xi * xi)
        wx = F32(w * xi)
        for s in range(QX_STEPS):
            lf = F32(max(-nmax, min(nmax - 1, nearest_int(F32(iscales[s] * xi)))))
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
        L[i] = nmax + max(-nmax, min(nmax - 1, nearest_int(F32(iscale * x[i]))))
    return scale


@numba.njit(inline="always", **_JIT)
def make_q3_quants(n, nmax, x, L):
    """make_q3_quants(n, nmax, x, L, do_rmse=true): L[i] = level + nmax (0 for an all-zero group)."""
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
    iscale = F32(F32(-nmax) / vmax)
    sumlx = F32(0)
    suml2 = F32(0)
    for i in range(n):
        lv = max(-nmax, min(nmax - 1, nearest_int(F32(iscale * x[i]))))
        L[i] = lv
        w = F32(x[i] * x[i])
        lf = F32(lv)
        sumlx = F32(sumlx + F32(F32(w * x[i]) * lf))
        suml2 = F32(suml2 + F32(F32(w * lf) * lf))
    for _ in range(5):
        n_changed = 0
        for i in range(n):
            w = F32(x[i] * x[i])
            li = F32(L[i])
            slx = F32(sumlx - F32(F32(w * x[i]) * li))
            if slx > 0:
                sl2 = F32(suml2 - F32(F32(w * li) * li))
                new_l = max(-nmax, min(nmax - 1, nearest_int(F32(F32(x[i] * sl2) / slx))))
                if new_l != L[i]:
                    nf = F32(new_l)
                    slx = F32(slx + F32(F32(w * x[i]) * nf))
                    sl2 = F32(sl2 + F32(F32(w * nf) * nf))
                    if sl2 > 0 and F32(F32(slx * slx) * suml2) > F32(F32(sumlx * sumlx) * sl2):
                        L[i] = new_l
                        sumlx = slx
                        suml2 = sl2
                        n_changed += 1
        if n_changed == 0:
            break
    for i in range(n):
        L[i] += nmax
    return F32(sumlx / suml2) if suml2 > 0 else F32(0)


@numba.njit(inline="always", **_JIT)
def make_qkx(n, nmax, x, weights, L, Laux, rmin, rdelta, nstep, use_mad):
    """make_qkx2_quants / make_qkx3_quants (the same search when weights are given: qkx3's `max <= min`
    test is qkx2's `max == min` once min is clipped to <= 0). Returns (scale, the_min)."""
    vmin = x[0]
    vmax = x[0]
    sum_w = weights[0]
    sum_x = F32(sum_w * x[0])
    for i in range(1, n):
        if x[i] < vmin:
            vmin = x[i]
        if x[i] > vmax:
            vmax = x[i]
        w = weights[i]
        sum_w = F32(sum_w + w)
        sum_x = F32(sum_x + F32(w * x[i]))
    if vmin > 0:
        vmin = F32(0)
    if vmax <= vmin:
        for i in range(n):
            L[i] = 0
        return F32(0), F32(-vmin)
    nmax_f = F32(nmax)
    iscale = F32(nmax_f / F32(vmax - vmin))
    scale = F32(F32(1) / iscale)
    best_error = F32(0)
    for i in range(n):
        lv = max(0, min(nmax, nearest_int(F32(iscale * F32(x[i] - vmin)))))
        L[i] = lv
        diff = F32(F32(F32(scale * F32(lv)) + vmin) - x[i])
        diff = abs(diff) if use_mad else F32(diff * diff)
        best_error = F32(best_error + F32(weights[i] * diff))
    if nstep < 1:
        return scale, F32(-vmin)
    for step in range(nstep + 1):
        iscale = F32(F32(F32(rmin + F32(rdelta * F32(step))) + nmax_f) / F32(vmax - vmin))
        sum_l = F32(0)
        sum_l2 = F32(0)
        sum_xl = F32(0)
        for i in range(n):
            lv = max(0, min(nmax, nearest_int(F32(iscale * F32(x[i] - vmin)))))
            Laux[i] = lv
            w = weights[i]
            wl = F32(w * F32(lv))
            sum_l = F32(sum_l + wl)
            sum_l2 = F32(sum_l2 + F32(wl * F32(lv)))
            sum_xl = F32(sum_xl + F32(wl * x[i]))
        det = F32(F32(sum_w * sum_l2) - F32(sum_l * sum_l))
        if det > 0:
            this_scale = F32(F32(F32(sum_w * sum_xl) - F32(sum_x * sum_l)) / det)
            this_min = F32(F32(F32(sum_l2 * sum_x) - F32(sum_l * sum_xl)) / det)
            if this_min > 0:
                this_min = F32(0)
                this_scale = F32(sum_xl / sum_l2)
            cur_error = F32(0)
            for i in range(n):
                diff = F32(F32(F32(this_scale * F32(Laux[i])) + this_min) - x[i])
                diff = abs(diff) if use_mad else F32(diff * diff)
                cur_error = F32(cur_error + F32(weights[i] * diff))
            if cur_error < best_error:
                for i in range(n):
                    L[i] = Laux[i]
                best_error = cur_error
                scale = this_scale
                vmin = this_min
    return scale, F32(-vmin)


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

@numba.njit(**_JIT)
def q2_k_block(x, y, qw, has_qw, L, Laux, weights, scales, mins, sw, Ls, Lm):
    """quantize_row_q2_K_ref (no qw) or quantize_row_q2_K_impl: y (84,) = scales, qs, d, dmin."""
    if has_qw:
        sigma2 = F32(_sum_squares(x, 0, 256) / F32(256))
        for j in range(16):
            sw[j] = _imatrix_weights(x, qw, 16 * j, 16, sigma2, weights)
            scales[j], mins[j] = make_qkx(16, 3, x[16 * j:16 * j + 16], weights, L[16 * j:16 * j + 16], Laux,
                                          F32(-0.9), F32(0.05), 36, False)
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
            for l in range(16):
                weights[l] = abs(x[16 * j + l])
            scales[j], mins[j] = make_qkx(16, 3, x[16 * j:16 * j + 16], weights, L[16 * j:16 * j + 16], Laux,
                                          F32(-0.5), F32(0.1), 15, True)
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
            L[16 * j + ii] = max(0, min(3, nearest_int(F32(F32(x[16 * j + ii] + m) / d))))
    _pack_2bit(L, y, 16)


@numba.njit(**_JIT)
def _pack_q3_scale(y, j, l):
    """Put 6-bit scale l (0..63) of sub-block j into the 12 scale bytes at y[96:108]."""
    if j < 8:
        y[96 + j] = l & 0xF
    else:
        y[96 + j - 8] = np.int64(y[96 + j - 8]) | ((l & 0xF) << 4)
    y[96 + 8 + j % 4] = np.int64(y[96 + 8 + j % 4]) | ((l >> 4) << (2 * (j // 4)))


@numba.njit(**_JIT)
def q3_k_block(x, y, qw, has_qw, L, scales, weights, sw, Ls, work):
    """quantize_row_q3_K_ref (no qw) or quantize_row_q3_K_impl: y (110,) = hmask, qs, scales, d."""
    for k in range(96, 108):
        y[k] = 0
    if has_qw:
        sigma2 = F32(F32(F32(2) * _sum_squares(x, 0, 256)) / F32(256))
        for j in range(16):
            sw[j] = _imatrix_weights(x, qw, 16 * j, 16, sigma2, weights)
            scales[j] = make_qx_quants(16, 4, x[16 * j:16 * j + 16], L[16 * j:16 * j + 16], weights, True, work)
        d_block = make_qx_quants(16, 32, scales, Ls, sw, True, work)
        for j in range(16):
            _pack_q3_scale(y, j, np.int64(Ls[j]))
        dval = put_half(y, 108, d_block)
    else:
        max_scale = F32(0)
        amax = F32(0)
        for j in range(16):
            scales[j] = make_q3_quants(16, 4, x[16 * j:16 * j + 16], L[16 * j:16 * j + 16])
            scale = abs(scales[j])
            if scale > amax:
                amax = scale
                max_scale = scales[j]
        if max_scale != 0:
            iscale = F32(F32(-32) / max_scale)
            for j in range(16):
                l = nearest_int(F32(iscale * scales[j])) & 0xFF  # int8_t l = nearest_int(...)
                l = l - 256 if l > 127 else l
                _pack_q3_scale(y, j, max(-32, min(31, l)) + 32)
            dval = put_half(y, 108, F32(F32(1) / iscale))
        else:
            dval = put_half(y, 108, F32(0))
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
def _qk_min_block(x, y, qw, has_qw, nmax, rmin, nstep, L, Laux, weights, scales, mins, sw, Ls, Lm):
    """The shared part of Q4_K (nmax 15) and Q5_K (nmax 31): d, dmin and scale bytes into y[0:16],
    the final levels into L."""
    if has_qw:
        sigma2 = F32(F32(F32(2) * _sum_squares(x, 0, 256)) / F32(256))
        for j in range(8):
            sw[j] = _imatrix_weights(x, qw, 32 * j, 32, sigma2, weights)
            scales[j], mins[j] = make_qkx(32, nmax, x[32 * j:32 * j + 32], weights, L[32 * j:32 * j + 32], Laux,
                                          F32(-0.9), F32(0.05), 36, False)
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
            av_x = _sqrt(F32(_sum_squares(x, 32 * j, 32) / F32(32)))
            for l in range(32):
                weights[l] = F32(av_x + abs(x[32 * j + l]))
            scales[j], mins[j] = make_qkx(32, nmax, x[32 * j:32 * j + 32], weights, L[32 * j:32 * j + 32], Laux,
                                          rmin, F32(0.1), nstep, False)
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


@numba.njit(**_JIT)
def q4_k_block(x, y, qw, has_qw, L, Laux, weights, scales, mins, sw, Ls, Lm):
    """quantize_row_q4_K_ref / _impl: y (144,) = d, dmin, 12 scale bytes, 128 nibble bytes."""
    _qk_min_block(x, y, qw, has_qw, 15, F32(-1.0), 20, L, Laux, weights, scales, mins, sw, Ls, Lm)
    for j in range(0, 256, 64):
        for l in range(32):
            y[16 + j // 2 + l] = np.int64(L[j + l]) | (np.int64(L[j + l + 32]) << 4)


@numba.njit(**_JIT)
def q5_k_block(x, y, qw, has_qw, L, Laux, weights, scales, mins, sw, Ls, Lm):
    """quantize_row_q5_K_ref / _impl: y (176,) = d, dmin, 12 scale bytes, 32 high-bit bytes, 128 nibble bytes."""
    _qk_min_block(x, y, qw, has_qw, 31, F32(-0.5), 15, L, Laux, weights, scales, mins, sw, Ls, Lm)
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
        for ii in range(16):
            L[16 * j + ii] = max(-32, min(31, nearest_int(F32(x[16 * j + ii] / d)))) + 32
    for j in range(0, 256, 128):
        for l in range(32):
            l1, l2, l3, l4 = np.int64(L[j + l]), np.int64(L[j + l + 32]), np.int64(L[j + l + 64]), np.int64(L[j + l + 96])
            y[j // 2 + l] = (l1 & 0xF) | ((l3 & 0xF) << 4)
            y[j // 2 + l + 32] = (l2 & 0xF) | ((l4 & 0xF) << 4)
            y[128 + j // 4 + l] = (l1 >> 4) | ((l2 >> 4) << 2) | ((l3 >> 4) << 4) | ((l4 >> 4) << 6)


# --- IQ4 (non-linear 4-bit) ------------------------------------------------------------------------

@numba.njit(**_JIT)
def iq4_block(super_block, x, y, qw, has_qw, L, scales, weight):
    """quantize_row_iq4_nl_impl(super_block, 32, ..., kvalues_iq4nl, qw, ntry=7) as quantize_iq4_nl
    (super_block 32, y (18,) = d, qs) and quantize_iq4_xs (256, y (136,) = d, scales_h, scales_l, qs) call it."""
    values = KVALUES_IQ4NL
    ntry = 7
    sigma2 = F32(_sum_squares(x, 0, super_block) * F32(F32(2) / F32(super_block)))
    n_blocks = super_block // 32
    q4 = 2 if n_blocks == 1 else 8
    for k in range(super_block // 2):
        y[q4 + k] = 0
    max_scale = F32(0)
    amax_scale = F32(0)
    for ib in range(n_blocks):
        xb = x[ib * 32:ib * 32 + 32]
        if has_qw:
            _imatrix_weights(x, qw, ib * 32, 32, sigma2, weight)
        else:
            for j in range(32):
                weight[j] = F32(xb[j] * xb[j])
        amax = F32(0)
        vmax = F32(0)
        for j in range(32):
            ax = abs(xb[j])
            if ax > amax:
                amax = ax
                vmax = xb[j]
        if amax < F32(GROUP_MAX_EPS):
            scales[ib] = F32(0)
            continue
        d = F32(-vmax / F32(values[0]))
        inv = F32(F32(1) / d)
        sumqx = F32(0)
        sumq2 = F32(0)
        for j in range(32):
            q = F32(values[best_index_int8(16, values, F32(inv * xb[j]))])
            w = weight[j]
            sumqx = F32(sumqx + F32(F32(w * q) * xb[j]))
            sumq2 = F32(sumq2 + F32(F32(w * q) * q))
        d = F32(sumqx / sumq2) if sumq2 > 0 else F32(0)
        best = F32(d * sumqx)
        for itry in range(-ntry, ntry + 1):
            inv = F32(F32(itry + values[0]) / vmax)
            sumqx = F32(0)
            sumq2 = F32(0)
            for j in range(32):
                q = F32(values[best_index_int8(16, values, F32(inv * xb[j]))])
                w = weight[j]
                sumqx = F32(sumqx + F32(F32(w * q) * xb[j]))
                sumq2 = F32(sumq2 + F32(F32(w * q) * q))
            if sumq2 > 0 and F32(sumqx * sumqx) > F32(best * sumq2):
                d = F32(sumqx / sumq2)
                best = F32(d * sumqx)
        scales[ib] = d
        if abs(d) > amax_scale:
            amax_scale = abs(d)
            max_scale = d
    if n_blocks > 1:
        y[2] = 0
        y[3] = 0
        d = F32(-max_scale / F32(32))
        put_half(y, 0, d)
        inv = F32(F32(1) / d) if d != 0 else F32(0)
        scales_h = 0
        for ib in range(n_blocks):
            l = max(-32, min(31, nearest_int(F32(inv * scales[ib]))))
            dl = F32(d * F32(l))
            idl = F32(F32(1) / dl) if dl != 0 else F32(0)
            for j in range(32):
                L[ib * 32 + j] = best_index_int8(16, values, F32(idl * x[ib * 32 + j]))
            l += 32
            if ib % 2 == 0:
                y[4 + ib // 2] = l & 0xF
            else:
                y[4 + ib // 2] = np.int64(y[4 + ib // 2]) | ((l & 0xF) << 4)
            scales_h |= (l >> 4) << (2 * (ib % 8))
        y[2] = scales_h & 0xFF
        y[3] = (scales_h >> 8) & 0xFF
    else:
        put_half(y, 0, scales[0])
        inv = F32(F32(1) / scales[0]) if scales[0] != 0 else F32(0)
        for j in range(super_block):
            L[j] = best_index_int8(16, values, F32(inv * x[j]))
    for i in range(super_block // 32):
        for j in range(16):
            y[q4 + 16 * i + j] = np.int64(L[32 * i + j]) | (np.int64(L[32 * i + 16 + j]) << 4)


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
def q4_0_block(x, y, qw, has_qw, sigma2, L, Laux, weight, work):
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
def q5_0_block(x, y, qw, has_qw, sigma2, L, Laux, weight, work):
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
def q4_1_block(x, y, qw, has_qw, sigma2, L, Laux, weight, work):
    if has_qw:
        _imatrix_weights(x, qw, 0, 32, sigma2, weight)
        d, the_min = make_qkx(32, 15, x, weight, L, Laux, F32(-0.9), F32(0.05), 36, False)
        put_half(y, 0, d)
        put_half(y, 2, F32(-the_min))
        for j in range(16):
            y[4 + j] = np.int64(L[j]) | (np.int64(L[j + 16]) << 4)
        return
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
def q5_1_block(x, y, qw, has_qw, sigma2, L, Laux, weight, work):
    if has_qw:
        _imatrix_weights(x, qw, 0, 32, sigma2, weight)
        d, the_min = make_qkx(32, 31, x, weight, L, Laux, F32(-0.9), F32(0.05), 36, False)
        put_half(y, 0, d)
        put_half(y, 2, F32(-the_min))
        _put_q5_bits(y, 4, 8, L)
        return
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
    """The 256-value super-block types over rows (kind 2..6: Q2_K..Q6_K, 7: IQ4_XS), with one set of
    scratch arrays sized for the largest of them."""
    levels = np.zeros(256, np.uint8)
    signed_levels = np.zeros(256, np.int8)
    Laux = np.zeros(32, np.uint8)
    weights = np.zeros(32, np.float32)
    scales = np.zeros(16, np.float32)
    mins = np.zeros(16, np.float32)
    sw = np.zeros(16, np.float32)
    Ls = np.zeros(16, np.uint8)
    Lm = np.zeros(16, np.uint8)
    signed_Ls = np.zeros(16, np.int8)
    work = np.zeros((3, QX_STEPS), np.float32)
    for r in range(x.shape[0]):
        for i in range(x.shape[1] // 256):
            xb = x[r, 256 * i:256 * i + 256]
            yb = out[r, block_bytes * i:block_bytes * i + block_bytes]
            qb = qw[256 * i:256 * i + 256]
            if kind == 2:
                q2_k_block(xb, yb, qb, has_qw, levels, Laux, weights, scales, mins, sw, Ls, Lm)
            elif kind == 3:
                q3_k_block(xb, yb, qb, has_qw, signed_levels, scales, weights, sw, signed_Ls, work)
            elif kind == 4:
                q4_k_block(xb, yb, qb, has_qw, levels, Laux, weights, scales, mins, sw, Ls, Lm)
            elif kind == 5:
                q5_k_block(xb, yb, qb, has_qw, levels, Laux, weights, scales, mins, sw, Ls, Lm)
            elif kind == 6:
                q6_k_block(xb, yb, qb, has_qw, signed_levels, scales, work)
            else:
                iq4_block(256, xb, yb, qb, has_qw, levels, scales, weights)


@numba.njit(**_JIT)
def _rows_32(kind, x, out, qw, has_qw, block_bytes):
    """The 32-value block types over rows (kind 0..3: Q4_0, Q4_1, Q5_0, Q5_1; 4: Q8_0; 5: IQ4_NL)."""
    scale = np.zeros(1, np.float32)
    L = np.zeros(32, np.int8)
    Lu = np.zeros(32, np.uint8)
    Laux = np.zeros(32, np.uint8)
    weight = np.zeros(32, np.float32)
    work = np.zeros((3, QX_STEPS), np.float32)
    for r in range(x.shape[0]):
        sigma2 = _row_sigma2(x[r]) if has_qw and kind < 4 else F32(0)
        for i in range(x.shape[1] // 32):
            xb = x[r, 32 * i:32 * i + 32]
            yb = out[r, block_bytes * i:block_bytes * i + block_bytes]
            qb = qw[32 * i:32 * i + 32]
            if kind == 0:
                q4_0_block(xb, yb, qb, has_qw, sigma2, L, Laux, weight, work)
            elif kind == 1:
                q4_1_block(xb, yb, qb, has_qw, sigma2, Lu, Laux, weight, work)
            elif kind == 2:
                q5_0_block(xb, yb, qb, has_qw, sigma2, L, Laux, weight, work)
            elif kind == 3:
                q5_1_block(xb, yb, qb, has_qw, sigma2, Lu, Laux, weight, work)
            elif kind == 4:
                q8_0_block(xb, yb)
            else:
                iq4_block(32, xb, yb, qb, has_qw, Lu, scale, weight)


# ggml type name -> (row driver, kind): kernels.quantize calls driver(kind, x, out, qw, has_qw, block_bytes)
# with x (n_rows, n_per_row) float32, out (n_rows, row_bytes) uint8, qw (n_per_row,) float32 (GIL released)
ROWS = {"q2_K": (_rows_256, 2), "q3_K": (_rows_256, 3), "q4_K": (_rows_256, 4), "q5_K": (_rows_256, 5),
        "q6_K": (_rows_256, 6), "iq4_xs": (_rows_256, 7), "q4_0": (_rows_32, 0), "q4_1": (_rows_32, 1),
        "q5_0": (_rows_32, 2), "q5_1": (_rows_32, 3), "q8_0": (_rows_32, 4), "iq4_nl": (_rows_32, 5)}


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
    d_all = _half_at(y, 108)
    at = 0
    j = 0
    m = 1
    for n in range(0, 256, 128):
        shift = 0
        for _ in range(4):
            for half in range(2):
                if j < 8:
                    sc = np.int64(y[96 + j]) & 0xF
                else:
                    sc = np.int64(y[96 + j - 8]) >> 4
                sc = (sc | ((np.int64(y[96 + 8 + j % 4]) >> (2 * (j // 4))) & 3) << 4) - 32
                j += 1
                dl = F32(d_all * F32(sc))
                for l in range(16):
                    k = 16 * half + l
                    q = ((np.int64(y[32 + n // 4 + k]) >> shift) & 3) - (0 if np.int64(y[k]) & m else 4)
                    out[at] = F32(dl * F32(q))
                    at += 1
            shift += 2
            m <<= 1


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
def _dequantize_rows(kind, data, out, block, block_bytes):
    for r in range(data.shape[0]):
        for i in range(out.shape[1] // block):
            y = data[r, block_bytes * i:block_bytes * i + block_bytes]
            o = out[r, block * i:block * i + block]
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
            else:
                deq_iq4_nl(y, o)


# ggml type name -> (kind for _dequantize_rows, values per block, bytes per block)
DEQUANT = {"q2_K": (2, 256, 84), "q3_K": (3, 256, 110), "q4_K": (4, 256, 144), "q5_K": (5, 256, 176),
           "q6_K": (6, 256, 210), "iq4_xs": (7, 256, 136), "iq4_nl": (8, 32, 18)}


def dequantize_rows(name, data, n_rows, row):
    """float32 (n_rows, row) of ggml `name` bytes `data` (uint8, n_rows * row_bytes), as ggml's dequantize_row_*."""
    kind, block, block_bytes = DEQUANT[name]
    out = np.empty((n_rows, row), dtype=np.float32)
    _dequantize_rows(kind, np.ascontiguousarray(data).reshape(n_rows, row // block * block_bytes), out, block, block_bytes)
    return out
