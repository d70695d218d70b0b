"""The numpy engine's scale searches, ggml's `make_*_quants` over whole arrays of groups laid out
(n_elements, n_groups): make_qkx2/qkx3 (Q2_K, Q4_K, Q5_K; Q4_1/Q5_1 with an imatrix), make_qx
(Q6_K, Q3_K with an imatrix; Q4_0/Q5_0 with one), make_q3 (Q3_K) and make_qp (the K-quants'
sub-block scales with an imatrix). Compiled counterparts: searches_jit.py."""

import numpy as np

from moetools.quantize.kernels.common import F32, GROUP_MAX_EPS, _first_absmax, _nearest_exact, _sum


def _qkx2_levels(x, iscale, low, nmax, out):
    """clip(nearest(iscale * (x - low)), 0, nmax) into `out` (n, g), in place."""
    np.subtract(x, low, out=out)
    out *= iscale
    np.rint(out, out=out)
    np.maximum(out, 0, out=out)
    np.minimum(out, nmax, out=out)
    return out


def _qkx2_error(x, w, levels, scale, low, use_mad, buf):
    """Sequential sum over axis 0 of w * |diff| or w * diff^2, diff = scale*L + low - x."""
    np.multiply(levels, scale, out=buf)
    buf += low
    buf -= x
    if use_mad:
        np.abs(buf, out=buf)
    else:
        buf *= buf
    buf *= w
    return _sum(buf)


def _make_qkx2(x, w, nmax, rmin, rdelta, nstep, use_mad):
    """ggml make_qkx2_quants over groups: x, w (n, g) float32 -> (scale (g,), min (g,), L (n, g)).

    `min` is returned as ggml's `the_min` (the negated offset, >= 0). L holds 0..nmax as float32.
    Levels of a trial are not kept: the iscale and offset that produced the best ones are, and the
    levels are recomputed from them once at the end (the same float32 operations, the same values).
    """
    nmax = F32(nmax)
    # ggml's `if (x[i] < min) min = x[i]` from x[0]: the first minimum, so a zero keeps its sign
    # (Q4_1/Q5_1 store the min itself)
    low = np.take_along_axis(x, np.argmin(x, axis=0)[None], 0)[0]
    high = x.max(axis=0)
    sum_w = _sum(w)
    sum_x = _sum(w * x)
    low = np.where(low > 0, F32(0), low)
    flat = high == low
    iscale = nmax / (high - low)
    scale = F32(1) / iscale
    trial = np.empty_like(x)
    buf = np.empty_like(x)
    _qkx2_levels(x, iscale, low, nmax, trial)
    best = _qkx2_error(x, w, trial, scale, low, use_mad, buf)
    best_iscale, best_low = iscale, low  # what the kept levels were computed from
    for step in range(nstep + 1):
        iscale = (F32(rmin) + F32(rdelta) * F32(step) + nmax) / (high - low)
        _qkx2_levels(x, iscale, low, nmax, trial)
        wl = np.multiply(w, trial, out=buf)
        sum_l = _sum(wl)
        sum_xl = _sum(wl * x)
        wl *= trial
        sum_l2 = _sum(wl)
        det = sum_w * sum_l2 - sum_l * sum_l
        this_scale = (sum_w * sum_xl - sum_x * sum_l) / det
        this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det
        positive = this_min > 0
        this_min = np.where(positive, F32(0), this_min)
        this_scale = np.where(positive, sum_xl / sum_l2, this_scale)
        error = _qkx2_error(x, w, trial, this_scale, this_min, use_mad, buf)
        better = (det > 0) & (error < best)
        best = np.where(better, error, best)
        scale = np.where(better, this_scale, scale)
        best_iscale = np.where(better, iscale, best_iscale)
        best_low = np.where(better, low, best_low)
        low = np.where(better, this_min, low)
    levels = _qkx2_levels(x, best_iscale, best_low, nmax, trial)
    scale = np.where(flat, F32(0), scale)
    levels = np.where(flat, F32(0), levels)
    return scale, -low, levels


def _qx_levels(x, iscale, nmax, out):
    """clip(nearest(iscale * x), -nmax, nmax - 1) into `out` (n, g), in place. A NaN product (an
    overflowed weight made the scale NaN) is level 0, as ggml's nearest_int gives for NaN."""
    np.multiply(x, iscale, out=out)
    np.rint(out, out=out)
    np.copyto(out, F32(0), where=np.isnan(out))
    np.maximum(out, -nmax, out=out)
    np.minimum(out, nmax - 1, out=out)
    return out


def _make_qx(x, nmax, w=None):
    """ggml make_qx_quants(n, nmax, x, L, rmse_type=1, qw) over groups: x (n, g) -> (scale (g,), L (n, g)),
    with the weights w (n, g) (an imatrix variant's) or, without them, x*x.

    L holds 0..2*nmax-1 as float32 (level + nmax). As in _make_qkx2, the levels of the best trial
    are rebuilt once from its iscale rather than kept on every improvement.
    """
    max_value, amax = _first_absmax(x, 0)
    zero = amax < GROUP_MAX_EPS
    nmax_f = F32(nmax)
    if w is None:
        w = x * x
    wx = w * x
    level = np.empty_like(x)
    buf = np.empty_like(x)

    def sums(iscale):
        _qx_levels(x, iscale, nmax_f, level)
        sumlx = _sum(np.multiply(wx, level, out=buf))
        np.multiply(w, level, out=buf)
        return sumlx, _sum(np.multiply(buf, level, out=buf))

    best_iscale = iscale = F32(-nmax) / max_value
    sumlx, suml2 = sums(iscale)
    scale = np.where(suml2 != 0, sumlx / suml2, F32(0))
    best = scale * sumlx
    for step in range(-9, 10):
        if step == 0:
            continue
        iscale = -(nmax_f + F32(0.1) * F32(step)) / max_value
        sumlx, suml2 = sums(iscale)
        better = (suml2 > 0) & (sumlx * sumlx > best * suml2)
        best_iscale = np.where(better, iscale, best_iscale)
        scale = np.where(better, sumlx / suml2, scale)
        best = np.where(better, scale * sumlx, best)
    levels = _qx_levels(x, best_iscale, nmax_f, level) + nmax_f
    return np.where(zero, F32(0), scale), np.where(zero, F32(0), levels)


def _make_q3(x, nmax):
    """ggml make_q3_quants(n, nmax, x, L, do_rmse=true) over groups: x (n, g) -> (scale (g,), L (n, g))."""
    max_value, amax = _first_absmax(x, 0)
    zero = amax < GROUP_MAX_EPS
    nmax_f = F32(nmax)
    iscale = F32(-nmax) / max_value
    levels = np.clip(np.rint(iscale * x), -nmax_f, nmax_f - 1)
    w = x * x
    wx = w * x
    sumlx = _sum(wx * levels)
    suml2 = _sum((w * levels) * levels)
    n = x.shape[0]
    for _ in range(5):
        # ggml stops after a pass that changes nothing; another pass from the same state changes
        # nothing either, so running all five passes for every group gives the same result.
        for i in range(n):
            wi, xi, li, wxi = w[i], x[i], levels[i], wx[i]
            slx = sumlx - wxi * li
            sl2 = suml2 - (wi * li) * li
            new = np.clip(np.rint((xi * sl2) / slx), -nmax_f, nmax_f - 1)
            slx_new = slx + wxi * new
            sl2_new = sl2 + (wi * new) * new
            take = (slx > 0) & (new != li) & (sl2_new > 0) & ((slx_new * slx_new) * suml2 > (sumlx * sumlx) * sl2_new)
            levels[i] = np.where(take, new, li)
            sumlx = np.where(take, slx_new, sumlx)
            suml2 = np.where(take, sl2_new, suml2)
    scale = np.where(suml2 > 0, sumlx / suml2, F32(0))
    return np.where(zero, F32(0), scale), np.where(zero[None, :], F32(0), levels + nmax_f)


def _nearest_float(values):
    """ggml's nearest_int bit for bit (see _nearest_exact), as float32: for the searches whose
    argument is not bounded by the scale (x * sl2 / slx can be anything)."""
    return _nearest_exact(values).astype(F32)


def _make_qp(x, nmax, w):
    """ggml make_qp_quants(n, nmax, x, L, quant_weights) over groups: the n non-negative sub-block
    scales x (n, g) under weights w (n, g) -> (scale (g,), L (n, g) as float32, the uint8 ggml
    stores). The passes run five times for every group (ggml stops a group after a pass that
    changes nothing, and a further pass from the same state changes nothing either)."""
    n = x.shape[0]
    top = np.zeros(x.shape[1], dtype=F32)
    for row in x:  # max = MAX(max, x[i]): `max > x ? max : x`, in order
        top = np.where(top > row, top, row)
    zero = top < GROUP_MAX_EPS
    nmax_f = F32(nmax)
    iscale = nmax_f / top
    level = (_nearest_exact(iscale * x) & 0xFF).astype(F32)  # uint8 L[i] = nearest_int(...)
    scale = F32(1) / iscale
    diff = x - scale * level
    best = _sum((w * diff) * diff)
    for step in range(-4, 5):
        if step == 0:
            continue
        trial = (F32(0.1) * F32(step) + nmax_f) / top
        diff = x - (F32(1) / trial) * np.minimum(_nearest_float(trial * x), nmax_f)
        mse = _sum((w * diff) * diff)
        better = mse < best
        best = np.where(better, mse, best)
        iscale = np.where(better, trial, iscale)
    chosen = np.minimum(_nearest_float(iscale * x), nmax_f)
    wx = w * x
    sumlx = _sum(wx * chosen)
    suml2 = _sum((w * chosen) * chosen)
    level = (chosen.astype(np.int32) & 0xFF).astype(F32)  # stored as uint8: a negative level wraps
    for _ in range(5):
        for i in range(n):
            li = level[i]
            slx = sumlx - wx[i] * li
            sl2 = suml2 - (w[i] * li) * li
            new = np.minimum(_nearest_float((x[i] * sl2) / slx), nmax_f)
            slx_new = slx + wx[i] * new
            sl2_new = sl2 + (w[i] * new) * new
            take = (slx > 0) & (sl2 > 0) & (new != li) & ((slx_new * slx_new) * suml2 > (sumlx * sumlx) * sl2_new)
            level[i] = np.where(take, (new.astype(np.int32) & 0xFF).astype(F32), li)
            sumlx = np.where(take, slx_new, sumlx)
            suml2 = np.where(take, sl2_new, suml2)
    scale = np.where(suml2 > 0, sumlx / suml2, F32(0))
    return np.where(zero, F32(0), scale), np.where(zero, F32(0), level)
