"""The compiled scale searches the quant families share, ggml's `make_*_quants`: make_qx_quants (Q6_K,
Q3_K with an imatrix, Q4_0/Q5_0 with one), make_qkx_lanes (make_qkx2/qkx3: Q2_K, Q4_K, Q5_K, Q4_1/Q5_1
with an imatrix), make_q3_lanes (Q3_K) and make_qp_quants (the K-quants' sub-block scales with an
imatrix). The numpy versions: searches.py. See common_jit.py for the float32 rules and the lanes."""

import numba
import numpy as np

from moetools.jitcache import make_cache_writes_best_effort
from moetools.quantize.kernels.common_jit import _JIT, F32, GROUP_MAX_EPS, SOURCE_STAMP, _clamped, nearest_int

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
LANES = 32  # groups searched together by make_qkx_lanes: the compiler's vector loop takes 8 floats x 4


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


# Every kernel's cache written best effort (moetools.jitcache: a full drive does not fail the run), keyed
# to every *_jit.py file (SOURCE_STAMP).
make_cache_writes_best_effort(globals(), SOURCE_STAMP)
