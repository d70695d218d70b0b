"""ggml's quantizers: compiled (numba, kernels_jit.py) and vectorised numpy, byte-identical to ggml.

`quantize(values, type_id, imatrix=None)` turns float32 rows into ggml blocks, with or without an
importance matrix (per-column weights, as llama-quantize passes them to ggml_quantize_chunk);
`dequantize(data, type_id, shape)` turns any type gguf knows back into float32.

Two engines give the same bytes, for every K-quant, IQ4_NL, IQ4_XS and the 32-value block types,
with and without an imatrix. The compiled one (kernels_jit.py) serves whenever numba imports and
$MOETOOLS_NO_JIT is unset or "0"; the numpy kernels below serve otherwise (`engine()` says which).
Both split the rows into spans run on a thread pool (the compiled kernels and numpy's loops release
the GIL), so a call uses every core.

Byte identity with ggml depends on doing the very same float32 operations in the same order:
- every sum over the elements of a group is sequential, as in ggml's C loops. The groups are laid
  out as `(n_elements, n_groups)` and reduced along axis 0, which numpy does row after row (a test
  pins this); a sum along the contiguous axis would use pairwise summation and differ;
- `a*b*c` is `(a*b)*c`, `a*b + c - d` is `((a*b) + c) - d`, never fused (ggml-base is built
  without FMA contraction);
- ggml's `nearest_int` (add 1.5*2^23, keep the mantissa) is round-half-to-even on float32: `np.rint`
  for the bulk, the exact bit trick where a result is stored with C integer wrap-around;
- `roundf` (Q8_0) rounds half away from zero; C casts to int8 truncate toward zero.
Source: the algorithms of ggml/src/ggml-quants.c (`quantize_row_*_ref`, the `quantize_row_*_impl`
imatrix variants, `make_qx_quants`, `make_q3_quants`, `make_qkx2_quants` / `make_qkx3_quants`,
`make_qp_quants`, `quantize_row_iq4_nl_impl`), reimplemented here over whole arrays of groups.
"""

import math
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from moetools.gguf.constants import GGML_TYPE_IDS, GGML_TYPES

F32 = np.float32
QK_K = 256
GROUP_MAX_EPS = F32(1e-15)
_MAGIC = F32(12582912.0)  # 1.5 * 2^23: ggml's nearest_int
_BELOW_HALF = np.nextafter(F32(0.5), F32(0))  # 0.49999997: round-half-away via trunc(x + this)

F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, BF16, IQ4_NL, IQ4_XS = (
    GGML_TYPE_IDS[name] for name in ("f16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_K", "q3_K", "q4_K", "q5_K", "q6_K", "bf16",
                                     "iq4_nl", "iq4_xs"))
NO_JIT_ENV = "MOETOOLS_NO_JIT"
_compiled = {}  # "module": kernels_jit, or None when numba is missing or switched off

# Values handled per step inside one chunk, as measured on a 2-core machine: the 32-block kernels
# make many short numpy calls (the halving trees), so they want big steps; the K-quant searches
# make hundreds of calls over their temporaries and do best when those stay in cache, except
# Q3_K's, which walks the 16 values of a group one at a time over vectors of groups.
_STEP_VALUES = {Q8_0: 1 << 18, Q4_0: 1 << 18, Q4_1: 1 << 18, Q5_0: 1 << 18, Q5_1: 1 << 18,
                Q6_K: 1 << 15, Q5_K: 1 << 15, Q4_K: 1 << 15, Q3_K: 1 << 17, Q2_K: 1 << 15, IQ4_NL: 1 << 15,
                IQ4_XS: 1 << 15}


def _nearest_exact(values):
    """ggml's nearest_int, bit for bit (int32), including what it gives for an infinite or huge
    argument (e.g. a scale that overflowed float16). np.rint is the same for |v| < 2^22 and is
    used in the searches, whose arguments stay that small."""
    shifted = np.asarray(values, dtype=F32) + _MAGIC
    return (shifted.view(np.int32) & 0x007FFFFF) - 0x00400000


def _half_value(values):
    """What ggml reads back from a stored half: float32 of the float16."""
    return np.asarray(values, dtype=F32).astype(np.float16).astype(F32)


def _first_absmax(x, axis):
    """(value with the largest |x|, that |x|) along `axis`, as ggml's `if (amax < fabsf(v))` loop
    finds it: the first one wins ties, and +0.0 (its start value) when every |x| is 0. A NaN never
    wins (`amax < NaN` is false), where np.argmax would pick it (a scale made NaN by an overflow)."""
    ax = np.abs(x)
    ax = np.where(np.isnan(ax), F32(-1), ax)
    index = np.expand_dims(np.argmax(ax, axis=axis), axis)
    amax = np.maximum(np.take_along_axis(ax, index, axis).squeeze(axis), F32(0))
    return np.where(amax > 0, np.take_along_axis(x, index, axis).squeeze(axis), F32(0)), amax


def _first_extreme(x, pick):
    """ggml's `if (v < min) min = v` (np.argmin) or `>` max (np.argmax) over axis 1: the first
    extreme value, which keeps the sign of a zero as ggml does."""
    return np.take_along_axis(x, pick(x, axis=1)[:, None], 1)[:, 0]


def _positive_max(values):
    """ggml's `max = 0; if (v > max) max = v` over axis 1: +0.0 unless some value is positive."""
    top = np.where(np.isnan(values), F32(0), values).max(axis=1)  # `NaN > max` is false: never taken
    return np.where(top > 0, top, F32(0))


def _inverse(d):
    """1/d where d != 0, else 0 (float32)."""
    with np.errstate(divide="ignore"):
        out = F32(1) / d
    out[d == 0] = 0
    return out


def _put_half(out, byte, values):
    """Store float32 `values` (n,) as ggml_half at byte offset `byte` (even) of each row of out (n, m)."""
    out.view(np.uint16)[:, byte // 2] = np.asarray(values, dtype=F32).astype(np.float16).view(np.uint16)


# --- 32-value block types ---------------------------------------------------------------------
# Reductions over a block's 32 values use a halving tree of element-wise max/min on strided views:
# numpy's reduce along a short contiguous axis is several times slower. max/min are exact, so the
# tree gives ggml's values; only which of two equal candidates ggml keeps (the first: a +0.0 or a
# -0.0, or +v against -v for the largest |x|) needs the few rows where that can matter fixed up.

def _tree(x, op):
    """op-reduction of each row of x (n, 2^k) by halving (exact for max/min)."""
    while x.shape[1] > 1:
        x = op(x[:, 0::2], x[:, 1::2])
    return x[:, 0]


def _block_absmax(x):
    """(value with the largest |x|, that |x|) per row of x (n, 32), as ggml's Q4_0/Q5_0 loop finds
    it: the first such value wins, and +0.0 when the block is all zeros."""
    high = _tree(x, np.maximum)
    low = _tree(x, np.minimum)
    amax = np.maximum(high, -low)
    value = np.where(high >= -low, high, low)
    tied = np.flatnonzero((high == -low) & (high != 0))  # +v and -v both present: the first one wins
    if tied.size:
        first, _ = _first_absmax(x[tied], 1)
        value[tied] = first
    return np.where(amax > 0, value, F32(0)), amax


def _block_extreme(x, op, pick):
    """ggml's `if (v < min) min = v` (op=np.minimum, pick=np.argmin) or the `>` max per row: the
    first extreme value, so a zero extreme keeps the sign of the first zero, as in ggml."""
    value = _tree(x, op)
    zero = np.flatnonzero(value == 0)
    if zero.size:
        value[zero] = _first_extreme(x[zero], pick)
    return value


def _q8_0(x, out):
    """x (n, 32) float32 -> out (n, 34): f16 d, 32 int8."""
    d = _tree(np.abs(x), np.maximum) / F32(127)
    v = x * _inverse(d)[:, None]
    # roundf: half away from zero. trunc(v + copysign(0.49999997, v)) equals it for |v| <= 127.
    v += np.copysign(_BELOW_HALF, v)
    np.trunc(v, out=v)
    _put_half(out, 0, d)
    np.copyto(out[:, 2:].view(np.int8), v, casting="unsafe")


def _pack_nibbles(q, out):
    """q (n, 32) uint8 values 0..15 -> out (n, 16): element j in the low nibble, j+16 in the high one.

    Works on 8 bytes at a time over the flat array (shifting a u64 of values below 16 left by 4
    moves each into its own byte's high nibble): u64 word k of a block is combined with word k+2,
    and only words 0 and 1 of each block are kept."""
    words = np.ascontiguousarray(q).reshape(-1).view(np.uint64)
    packed = np.empty_like(words)
    np.left_shift(words[2:], np.uint64(4), out=packed[:-2])
    packed[:-2] |= words[:-2]
    out[:] = packed.reshape(-1, 4)[:, :2].view(np.uint8)


def _high_bits(q):
    """Bit 4 of each of 32 values as a little-endian u32 (bit j = element j), shape (n, 4) bytes."""
    return np.packbits((q >> 4) & 1, axis=1, bitorder="little")


def _levels(v, top):
    """C's `MIN(top, (int8_t)v)` for v >= 0 (trunc toward zero), as uint8."""
    np.minimum(v, F32(top), out=v)
    return v.astype(np.uint8)


def _symmetric(x, divisor, offset):
    """Q4_0/Q5_0: d = (value with the largest |x|) / divisor, v = x * (1/d) + offset (float32)."""
    max_value, _ = _block_absmax(x)
    d = max_value / F32(divisor)
    v = x * _inverse(d)[:, None]
    v += F32(offset)
    return d, v


def _from_min(x, steps):
    """Q4_1/Q5_1: min, d = (max - min) / steps, v = (x - min) * (1/d) + 0.5 (float32)."""
    low = _block_extreme(x, np.minimum, np.argmin)
    d = (_block_extreme(x, np.maximum, np.argmax) - low) / F32(steps)
    v = x - low[:, None]
    v *= _inverse(d)[:, None]
    v += F32(0.5)
    return low, d, v


def _symmetric_levels(x, qw, sigma2, nmax):
    """Q4_0 (nmax 8) / Q5_0 (16): (d, levels 0..2*nmax-1 as uint8) by the _ref rounding or, with the
    imatrix qw (n, 32) and its rows' sigma2 (n,), by the _impl search."""
    if qw is None:
        d, v = _symmetric(x, -nmax, nmax + 0.5)
        return d, _levels(v, 2 * nmax - 1)
    return _symmetric_weighted(x, qw, sigma2, nmax)


def _q4_0(x, out, qw=None, sigma2=None):
    """x (n, 32) -> out (n, 18): f16 d, 16 nibble bytes."""
    d, q = _symmetric_levels(x, qw, sigma2, 8)
    _put_half(out, 0, d)
    _pack_nibbles(q, out[:, 2:])


def _q4_1(x, out, qw=None, sigma2=None):
    """x (n, 32) -> out (n, 20): f16 d, f16 min, 16 nibble bytes."""
    if qw is None:
        low, d, v = _from_min(x, 15)
        q = _levels(v, 15)
    else:
        d, low, q = _from_min_weighted(x, qw, sigma2, 15)
    _put_half(out, 0, d)
    _put_half(out, 2, low)
    _pack_nibbles(q, out[:, 4:])


def _q5_0(x, out, qw=None, sigma2=None):
    """x (n, 32) -> out (n, 22): f16 d, u32 high bits, 16 nibble bytes."""
    d, q = _symmetric_levels(x, qw, sigma2, 16)
    _put_half(out, 0, d)
    out[:, 2:6] = _high_bits(q)
    _pack_nibbles(q & 0x0F, out[:, 6:])


def _q5_1(x, out, qw=None, sigma2=None):
    """x (n, 32) -> out (n, 24): f16 d, f16 min, u32 high bits, 16 nibble bytes."""
    if qw is None:
        low, d, v = _from_min(x, 31)
        q = v.astype(np.uint8)  # C: (uint8_t)(x0 + 0.5f), no clamp
    else:
        d, low, q = _from_min_weighted(x, qw, sigma2, 31)
    _put_half(out, 0, d)
    _put_half(out, 2, low)
    out[:, 4:8] = _high_bits(q)
    _pack_nibbles(q & 0x0F, out[:, 8:])


# --- group helpers for the K-quants (groups laid out as (n_elements, n_groups)) ------------------

def _sum(a):
    """Sequential float32 sum over axis 0 (ggml's `for (i...) s += ...` order).

    numpy reduces an outer axis row after row of a C-contiguous array (a transposed view it may
    reduce along memory order, pairwise: made contiguous first); with a single column the axis is
    contiguous and numpy would switch to pairwise summation, so that case is summed explicitly."""
    a = np.ascontiguousarray(a)
    if a.ndim == 2 and a.shape[1] == 1:
        total = a[0].copy()
        for row in a[1:]:
            total += row
        return total
    return np.add.reduce(a, axis=0)


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


def _imatrix_weights(groups, qw_groups, sigma2):
    """qw * sqrtf(sigma2 + x^2) per value of groups (n, g), the weights every `_impl` quantizer gives
    its search, with the sum of each group's weights (ggml's sw[j], added in order)."""
    weights = qw_groups * np.sqrt(sigma2 + groups * groups)
    return weights, _sum(weights)


def _block_sigma2(x, twice):
    """Each super-block's sum of x^2 (in order) / 256, doubled first when `twice` (Q3_K..Q5_K's
    `2*sumx2/QK_K`; Q2_K's is `sumx2/QK_K`), as the imatrix variants weigh: x (nb, 256) -> (nb,)."""
    total = _sum(_groups(x, QK_K) ** 2)
    return (F32(2) * total if twice else total) / F32(QK_K)


def _weighted_groups(x, qw, size, twice):
    """The imatrix variants' groups of `size` values of x (nb, 256), their weights and the weight
    sums: (groups (size, g), weights (size, g), sw (g,)); qw (nb, 256) is the imatrix beside x."""
    groups = _groups(x, size)
    sigma2 = np.repeat(_block_sigma2(x, twice), QK_K // size)
    weights, sw = _imatrix_weights(groups, _groups(qw, size), sigma2)
    return groups, weights, sw


def _groups(x, size):
    """x (nb, 256) -> (size, nb * 256/size) contiguous: element index first, group second."""
    return np.ascontiguousarray(x.reshape(-1, size).T)


def _ungroup(levels, nb):
    """Inverse of _groups: (size, g) -> (nb, 256)."""
    return levels.T.reshape(nb, QK_K)


def _pack_2bit(levels, out):
    """levels (nb, 256) 0..3 -> out (nb, 64): byte l of half h holds elements 128h + l + 32k at bits 2k."""
    q = levels.reshape(-1, 2, 4, 32).astype(np.uint8)
    np.bitwise_or(q[:, :, 0] | (q[:, :, 1] << 2), (q[:, :, 2] << 4) | (q[:, :, 3] << 6), out=out.reshape(-1, 2, 32))


def _k4_scales(scales, mins):
    """Q4_K/Q5_K: 8 sub-block scales and mins (nb, 8) -> (12 packed bytes, d, dmin, sc, m)."""
    max_scale = _positive_max(scales)
    max_min = _positive_max(mins)
    inv_scale = np.where(max_scale > 0, F32(63) / max_scale, F32(0))
    inv_min = np.where(max_min > 0, F32(63) / max_min, F32(0))
    ls = np.minimum(_nearest_exact(inv_scale[:, None] * scales) & 0xFF, 63).astype(np.uint8)
    lm = np.minimum(_nearest_exact(inv_min[:, None] * mins) & 0xFF, 63).astype(np.uint8)
    return _pack_k4(ls, lm), max_scale / F32(63), max_min / F32(63), ls, lm


def _pack_k4(ls, lm):
    """The 12 scale bytes of Q4_K/Q5_K from 6-bit scales and mins (nb, 8) uint8."""
    packed = np.empty((ls.shape[0], 12), dtype=np.uint8)
    packed[:, 0:4] = ls[:, :4] | ((ls[:, 4:] >> 4) << 6)
    packed[:, 4:8] = lm[:, :4] | ((lm[:, 4:] >> 4) << 6)
    packed[:, 8:12] = (ls[:, 4:] & 0x0F) | ((lm[:, 4:] & 0x0F) << 4)
    return packed


def _requant_with_min(x, levels, d, dmin, sc, m, nmax):
    """Final levels of Q4_K/Q5_K/Q2_K: round((x + dm)/d) where d != 0, else keep the search's levels.

    x, levels (nb, k, size); d, dmin (nb,); sc, m (nb, k)."""
    dd = _half_value(d)[:, None] * sc.astype(F32)
    dm = _half_value(dmin)[:, None] * m.astype(F32)
    with np.errstate(divide="ignore", invalid="ignore"):
        fresh = np.clip(_nearest_exact((x + dm[..., None]) / dd[..., None]), 0, nmax)
    return np.where((dd != 0)[..., None], fresh, levels)


def _qk_min_type(x, out, nmax, rmin, nstep, qw):
    """Shared part of Q4_K and Q5_K (quantize_row_q4/5_K_ref, or _impl with the imatrix qw (nb, 256)):
    writes d, dmin and the 12 scale bytes of x (nb, 256) into out, returns the levels as (low, high)
    halves of each 64-value pair of sub-blocks, (nb, 4, 32) each."""
    nb = x.shape[0]
    if qw is None:
        groups = _groups(x, 32)
        av_x = np.sqrt(_sum(groups * groups) / F32(32))
        weights = av_x + np.abs(groups)
        scales, mins, levels = _make_qkx2(groups, weights, nmax, rmin, 0.1, nstep, False)
        packed, d, dmin, ls, lm = _k4_scales(scales.reshape(nb, 8), mins.reshape(nb, 8))
    else:
        groups, weights, sw = _weighted_groups(x, qw, 32, True)
        scales, mins, levels = _make_qkx2(groups, weights, nmax, -0.9, 0.05, 36, False)
        sw = sw.reshape(nb, 8).T
        d, ls = _make_qp(scales.reshape(nb, 8).T, 63, sw)
        dmin, lm = _make_qp(mins.reshape(nb, 8).T, 63, sw)
        ls = np.minimum(ls.T, 63).astype(np.uint8)
        lm = np.minimum(lm.T, 63).astype(np.uint8)
        packed = _pack_k4(ls, lm)
    levels = _requant_with_min(x.reshape(nb, 8, 32), _ungroup(levels, nb).reshape(nb, 8, 32), d, dmin, ls, lm, nmax)
    _put_half(out, 0, d)
    _put_half(out, 2, dmin)
    out[:, 4:16] = packed
    pairs = levels.astype(np.uint8).reshape(nb, 4, 2, 32)
    return pairs[:, :, 0], pairs[:, :, 1]


def _q4_k(x, out, qw=None):
    """x (nb, 256) -> out (nb, 144): f16 d, f16 dmin, 12 scale bytes, 128 nibble bytes."""
    low, high = _qk_min_type(x, out, 15, -1.0, 20, qw)
    np.bitwise_or(low, high << 4, out=out[:, 16:].reshape(-1, 4, 32))


def _q5_k(x, out, qw=None):
    """x (nb, 256) -> out (nb, 176): f16 d, f16 dmin, 12 scale bytes, 32 high-bit bytes, 128 nibble bytes."""
    low, high = _qk_min_type(x, out, 31, -0.5, 15, qw)
    np.bitwise_or(low & 0x0F, (high & 0x0F) << 4, out=out[:, 48:].reshape(-1, 4, 32))
    # bit 2n of qh[j]: element 64n + j above 15; bit 2n+1: element 64n + 32 + j
    shifts = (2 * np.arange(4, dtype=np.uint8))[None, :, None]
    bits = (((low >> 4) & 1) << shifts) | (((high >> 4) & 1) << (shifts + 1))
    out[:, 16:48] = np.bitwise_or.reduce(bits, axis=1)


def _q6_k(x, out, qw=None):
    """x (nb, 256) -> out (nb, 210): 128 low-nibble bytes, 64 high-bit bytes, 16 int8 scales, f16 d
    (quantize_row_q6_K_impl with the imatrix qw (nb, 256): its values weigh make_qx_quants directly)."""
    nb = x.shape[0]
    scales, levels = _make_qx(_groups(x, 16), 32, None if qw is None else _groups(qw, 16))
    scales = scales.reshape(nb, 16)
    max_scale, max_abs = _first_absmax(scales, 1)
    zero = max_abs < GROUP_MAX_EPS
    with np.errstate(divide="ignore", invalid="ignore"):
        iscale = F32(-128) / max_scale
        d = F32(1) / iscale
    sc = np.minimum(_nearest_exact(iscale[:, None] * scales), 127).astype(np.int8)
    dd = _half_value(d)[:, None] * sc.astype(F32)
    xs = x.reshape(nb, 16, 16)
    with np.errstate(divide="ignore", invalid="ignore"):
        fresh = np.clip(_nearest_exact(xs / dd[..., None]), -32, 31) + 32
    levels = np.where((dd != 0)[..., None], fresh, _ungroup(levels, nb).reshape(nb, 16, 16)).astype(np.uint8)
    q = levels.reshape(nb, 2, 4, 32)
    ql = out[:, 0:128].reshape(nb, 2, 2, 32)
    np.bitwise_or(q[:, :, 0:2] & 0x0F, (q[:, :, 2:4] & 0x0F) << 4, out=ql)
    np.bitwise_or((q[:, :, 0] >> 4) | ((q[:, :, 1] >> 4) << 2), ((q[:, :, 2] >> 4) << 4) | ((q[:, :, 3] >> 4) << 6),
                  out=out[:, 128:192].reshape(nb, 2, 32))
    out[:, 192:208] = sc.view(np.uint8)
    _put_half(out, 208, d)
    out[zero] = 0


def _q3_k(x, out, qw=None):
    """x (nb, 256) -> out (nb, 110): 32 high-bit mask bytes, 64 2-bit bytes, 12 scale bytes, f16 d
    (quantize_row_q3_K_ref, or quantize_row_q3_K_impl with the imatrix qw (nb, 256))."""
    nb = x.shape[0]
    if qw is None:
        scales, levels = _make_q3(_groups(x, 16), 4)
        scales = scales.reshape(nb, 16)
        max_scale, _ = _first_absmax(scales, 1)
        nonzero = max_scale != 0
        with np.errstate(divide="ignore", invalid="ignore"):
            iscale = F32(-32) / max_scale
            d = np.where(nonzero, F32(1) / iscale, F32(0))
        # C: int8_t l = nearest_int(...); l = MAX(-32, MIN(31, l)) + 32
        raw = (_nearest_exact(iscale[:, None] * scales) & 0xFF).astype(np.uint8).view(np.int8).astype(np.int32)
        l6 = np.where(nonzero[:, None], np.clip(raw, -32, 31) + 32, 0).astype(np.uint8)
    else:
        groups, weights, sw = _weighted_groups(x, qw, 16, True)
        scales, levels = _make_qx(groups, 4, weights)
        d, l6 = _make_qx(scales.reshape(nb, 16).T, 32, sw.reshape(nb, 16).T)
        l6 = l6.T.astype(np.uint8)  # levels + 32: 0..63
        nonzero = np.ones(nb, dtype=bool)
    packed = np.zeros((nb, 12), dtype=np.uint8)
    packed[:, 0:8] = (l6[:, 0:8] & 0x0F) | ((l6[:, 8:16] & 0x0F) << 4)
    top = (l6 >> 4).reshape(nb, 4, 4)  # [j // 4, j % 4]
    packed[:, 8:12] = top[:, 0] | (top[:, 1] << 2) | (top[:, 2] << 4) | (top[:, 3] << 6)
    sc = np.where(nonzero[:, None], l6.astype(np.int32) - 32, 0).astype(F32)
    dd = _half_value(d)[:, None] * sc
    xs = x.reshape(nb, 16, 16)
    with np.errstate(divide="ignore", invalid="ignore"):
        fresh = np.clip(_nearest_exact(xs / dd[..., None]), -4, 3) + 4
    levels = np.where((dd != 0)[..., None], fresh, _ungroup(levels, nb).reshape(nb, 16, 16)).astype(np.uint8)
    levels = levels.reshape(nb, QK_K)
    # hmask[m] bit k: element 32k + m is above 3
    high = (levels > 3).reshape(nb, 8, 32)
    out[:, 0:32] = np.bitwise_or.reduce(high.astype(np.uint8) << np.arange(8, dtype=np.uint8)[None, :, None], axis=1)
    _pack_2bit(np.where(levels > 3, levels - 4, levels), out[:, 32:96])
    out[:, 96:108] = packed
    _put_half(out, 108, d)


def _q2_k(x, out, qw=None):
    """x (nb, 256) -> out (nb, 84): 16 scale bytes (scale | min << 4), 64 2-bit bytes, f16 d, f16 dmin
    (quantize_row_q2_K_ref, or quantize_row_q2_K_impl with the imatrix qw (nb, 256))."""
    nb = x.shape[0]
    if qw is None:
        groups = _groups(x, 16)
        scales, mins, levels = _make_qkx2(groups, np.abs(groups), 3, -0.5, 0.1, 15, True)
        scales, mins = scales.reshape(nb, 16), mins.reshape(nb, 16)
        max_scale = _positive_max(scales)
        max_min = _positive_max(mins)
        has_scale, has_min = max_scale > 0, max_min > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            ls = _nearest_exact((F32(15) / max_scale)[:, None] * scales) & 0xFF
            lm = _nearest_exact((F32(15) / max_min)[:, None] * mins)
        ls = np.where(has_scale[:, None], ls, 0)
        lm = np.where(has_min[:, None], (lm << 4) & 0xFF, 0)
        d = np.where(has_scale, max_scale / F32(15), F32(0))
        dmin = np.where(has_min, max_min / F32(15), F32(0))
    else:
        groups, weights, sw = _weighted_groups(x, qw, 16, False)
        scales, mins, levels = _make_qkx2(groups, weights, 3, -0.9, 0.05, 36, False)
        sw = sw.reshape(nb, 16).T
        d, ls = _make_qp(scales.reshape(nb, 16).T, 15, sw)
        dmin, lm = _make_qp(mins.reshape(nb, 16).T, 15, sw)
        ls = ls.T.astype(np.int32)
        lm = (lm.T.astype(np.int32) << 4) & 0xFF
    packed = (ls | lm).astype(np.uint8)
    levels = _requant_with_min(x.reshape(nb, 16, 16), _ungroup(levels, nb).reshape(nb, 16, 16), d, dmin,
                               packed & 0x0F, packed >> 4, 3)
    out[:, 0:16] = packed
    _pack_2bit(levels.reshape(nb, QK_K), out[:, 16:80])
    _put_half(out, 80, d)
    _put_half(out, 82, dmin)


# --- IQ4 (non-linear 4-bit): quantize_row_iq4_nl_impl over blocks of 32 --------------------------

KVALUES_IQ4NL = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=F32)


def _iq4_index(v):
    """ggml's best_index_int8(16, kvalues_iq4nl, v) for every v: mu = how many values are <= v,
    kept within 1..15, then ggml's `v - values[mu-1] < values[mu] - v` test; below the first value
    that picks index 0, above the last 15, and a NaN (sorted last by searchsorted) gets 15 as the
    binary search gives it. Returns int indices."""
    mu = np.clip(np.searchsorted(KVALUES_IQ4NL, v, side="right"), 1, 15)
    low = (v - KVALUES_IQ4NL[mu - 1]) < (KVALUES_IQ4NL[mu] - v)
    return mu - low


def _iq4_search(x, w):
    """The block scales quantize_row_iq4_nl_impl finds (ntry 7) for blocks laid out as x (32, nb) with
    weights w (32, nb): 0 for a block below GROUP_MAX_EPS (ggml's `continue`)."""
    max_value, amax = _first_absmax(x, 0)

    def sums(inverse):
        q = KVALUES_IQ4NL[_iq4_index(inverse * x)]
        wq = w * q
        return _sum(wq * x), _sum(wq * q)

    sumqx, sumq2 = sums(F32(1) / ((-max_value) / F32(-127)))
    d = np.where(sumq2 > 0, sumqx / sumq2, F32(0))
    best = d * sumqx
    for itry in range(-7, 8):
        sumqx, sumq2 = sums(F32(itry - 127) / max_value)
        better = (sumq2 > 0) & (sumqx * sumqx > best * sumq2)
        d = np.where(better, sumqx / sumq2, d)
        best = np.where(better, d * sumqx, best)
    return np.where(amax < GROUP_MAX_EPS, F32(0), d)


def _iq4_blocks(x, qw, super_block):
    """Blocks of 32 of x (nb, super_block) laid out (32, nb * super_block/32), with the search's
    weights: qw * sqrtf(sigma2 + x^2) with sigma2 = sum x^2 * (2/super_block) per super-block, or x^2."""
    groups = _groups(x, 32) if super_block == QK_K else np.ascontiguousarray(x.T)
    if qw is None:
        return groups, groups * groups
    total = _sum(_groups(x, QK_K) ** 2) if super_block == QK_K else _sum(groups * groups)
    sigma2 = np.repeat(total * (F32(2) / F32(super_block)), super_block // 32)
    qw_groups = _groups(qw, 32) if super_block == QK_K else np.ascontiguousarray(qw.T)
    return groups, _imatrix_weights(groups, qw_groups, sigma2)[0]


def _pack_iq4(index, out):
    """index (nb, 32 * k) 0..15 -> nibbles of each 32-block: element j low, j + 16 high."""
    q = index.astype(np.uint8).reshape(index.shape[0], -1, 2, 16)
    np.bitwise_or(q[:, :, 0], q[:, :, 1] << 4, out=out.reshape(out.shape[0], -1, 16))


def _iq4_nl(x, out, qw=None):
    """x (nb, 32) -> out (nb, 18): f16 d, 16 nibble bytes (quantize_iq4_nl, with or without imatrix)."""
    groups, weights = _iq4_blocks(x, qw, 32)
    d = _iq4_search(groups, weights)
    _put_half(out, 0, d)
    _pack_iq4(_iq4_index(_inverse(d)[:, None] * x), out[:, 2:])


def _iq4_xs(x, out, qw=None):
    """x (nb, 256) -> out (nb, 136): f16 d, u16 scales_h, 4 bytes scales_l, 128 nibble bytes (quantize_iq4_xs)."""
    nb = x.shape[0]
    groups, weights = _iq4_blocks(x, qw, QK_K)
    scales = _iq4_search(groups, weights).reshape(nb, 8)
    max_scale, _ = _first_absmax(scales, 1)
    d = -max_scale / F32(32)
    l = np.clip(_nearest_exact(_inverse(d)[:, None] * scales), -32, 31)
    dl = d[:, None] * l.astype(F32)
    index = _iq4_index(_inverse(dl.reshape(-1)).reshape(nb, 8, 1) * x.reshape(nb, 8, 32))
    l = (l + 32).astype(np.uint16)
    _put_half(out, 0, d)
    high = np.bitwise_or.reduce((l >> 4) << (2 * np.arange(8, dtype=np.uint16)), axis=1).astype(np.uint16)
    out[:, 2:4] = high[:, None].view(np.uint8)
    out[:, 4:8] = ((l[:, 0::2] & 0xF) | ((l[:, 1::2] & 0xF) << 4)).astype(np.uint8)
    _pack_iq4(index.reshape(nb, QK_K), out[:, 8:])


# --- the 32-value types with an importance matrix (quantize_row_q4_0_impl ... q5_1_impl) -----------

def _weighted_32(x, qw, sigma2):
    """Blocks x (nb, 32) as (32, nb) groups with their weights qw * sqrtf(sigma2 + x^2), sigma2 (nb,)
    being each block's row's sum x^2 / n (the 32-value variants weigh by the whole row's spread)."""
    groups = np.ascontiguousarray(x.T)
    return groups, _imatrix_weights(groups, np.ascontiguousarray(qw.T), sigma2)[0]


def _symmetric_weighted(x, qw, sigma2, nmax):
    """Q4_0/Q5_0 _impl: make_qx_quants(32, nmax, x, L, 1, weights) -> (d (nb,), levels (nb, 32) uint8 0..2*nmax-1)."""
    groups, weights = _weighted_32(x, qw, sigma2)
    d, levels = _make_qx(groups, nmax, weights)
    return d, levels.T.astype(np.uint8)


def _from_min_weighted(x, qw, sigma2, nmax):
    """Q4_1/Q5_1 _impl: make_qkx3_quants(32, nmax, x, weights, L, &the_min, Laux, -0.9, 0.05, 36, false)
    -> (d, min (-the_min), levels (nb, 32) uint8)."""
    groups, weights = _weighted_32(x, qw, sigma2)
    d, the_min, levels = _make_qkx2(groups, weights, nmax, -0.9, 0.05, 36, False)
    return d, -the_min, levels.T.astype(np.uint8)


# type id -> (values per block, bytes per block, kernel); block geometry from the shared type table.
# kernel(x (n, block), out (n, bytes)) quantizes without an imatrix, kernel(x, out, qw) with one (qw
# the importance weights beside each value), and the 32-value types also take their rows' sigma2.
KERNELS = {
    type_id: (*GGML_TYPES[type_id][1:], kernel)
    for type_id, kernel in ((Q8_0, _q8_0), (Q4_0, _q4_0), (Q4_1, _q4_1), (Q5_0, _q5_0), (Q5_1, _q5_1),
                            (Q6_K, _q6_k), (Q5_K, _q5_k), (Q4_K, _q4_k), (Q3_K, _q3_k), (Q2_K, _q2_k),
                            (IQ4_NL, _iq4_nl), (IQ4_XS, _iq4_xs))
}
ROW_WEIGHTED = {Q4_0, Q4_1, Q5_0, Q5_1}  # their imatrix variants weigh by the whole row's sum of squares


def default_threads():
    return max(1, os.cpu_count() or 1)


def _run_blocks(kernel, blocks, out, step, weights=None, first=0):
    """kernel over blocks (n, block) in steps; with weights (qw (blocks per row, block), sigma2 per
    block or None), block k of `blocks` is block first + k of the rows: its weights are row
    (first + k) % blocks-per-row of qw."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for start in range(0, blocks.shape[0], step):
            part = slice(start, start + step)
            if weights is None:
                kernel(blocks[part], out[part])
                continue
            qw, sigma2 = weights
            index = np.arange(first + start, first + min(start + step, blocks.shape[0]))
            if sigma2 is None:
                kernel(blocks[part], out[part], qw[index % qw.shape[0]])
            else:
                kernel(blocks[part], out[part], qw[index % qw.shape[0]], sigma2[index])


def _spans(count, parts, multiple=1):
    """Split range(count) into at most `parts` contiguous spans, boundaries multiples of `multiple`."""
    parts = max(1, min(parts, -(-count // multiple)))
    bounds = [min(count, -(-count * k // parts // multiple) * multiple) for k in range(parts + 1)]
    bounds[-1] = count
    return [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


def compiled_kernels():
    """The numba-compiled kernel module, or None (numba not importable, or $MOETOOLS_NO_JIT set to
    anything but "" or "0"). Looked up once per process."""
    if "module" not in _compiled:
        module = None
        if os.environ.get(NO_JIT_ENV, "") in ("", "0"):
            try:
                from moetools.quantize import jitload, kernels_jit as module

                jitload.cheap_cache_loads(module)
                jitload.cheap_array_typing(module)
                _compiled["jitload"] = jitload
            except Exception:  # numba absent, unusable with this numpy, or no cache folder it can
                module = None  # use: the numpy kernels serve, with the same bytes
        _compiled["module"] = module
    return _compiled["module"]


def engine():
    """'numba' or 'numpy': which kernels `quantize` runs. Before the first quantize call this is
    answered without importing numba (its import is a third of a small tier's start-up, and a dry
    run or an ETA needs none of it): "numba" when the switch is off and numba is installed. Only a
    numba that is installed but fails to import makes the later answer "numpy"."""
    if "module" in _compiled:
        return "numpy" if _compiled["module"] is None else "numba"
    if os.environ.get(NO_JIT_ENV, "") not in ("", "0"):
        return "numpy"
    import importlib.util

    return "numba" if importlib.util.find_spec("numba") is not None else "numpy"


# Types whose quantizer ggml runs without the importance matrix even when one is given.
IGNORES_IMATRIX = {Q8_0, F16, BF16, 0}


# Per-core speed of each engine, MB of float32 input per second, as benchmarks/bench_quantize.py
# measured them on the 2-core development machine (CPU time of one thread, so what one core gives
# whatever the load; README has the figures), without and with an importance matrix. quantize's ETA
# uses them; unknown types count at the slowest figure.
MEASURED_MB_PER_S = {
    "numba": {"q8_0": 800.0, "q4_0": 730.0, "q4_1": 700.0, "q5_0": 700.0, "q5_1": 800.0, "q6_K": 170.0, "q5_K": 200.0,
              "q4_K": 220.0, "q3_K": 580.0, "q2_K": 240.0, "iq4_xs": 175.0, "iq4_nl": 170.0, "f16": 500.0, "bf16": 300.0},
    "numba imatrix": {"q4_0": 190.0, "q4_1": 120.0, "q5_0": 135.0, "q5_1": 120.0, "q6_K": 170.0, "q5_K": 100.0, "q4_K": 100.0,
                      "q3_K": 90.0, "q2_K": 110.0, "iq4_xs": 175.0, "iq4_nl": 170.0},
    "numpy": {"q8_0": 330.0, "q4_0": 550.0, "q4_1": 520.0, "q5_0": 390.0, "q5_1": 550.0, "q6_K": 34.0, "q5_K": 19.0,
              "q4_K": 18.0, "q3_K": 39.0, "q2_K": 25.0, "iq4_xs": 5.8, "iq4_nl": 5.8, "f16": 500.0, "bf16": 300.0},
    "numpy imatrix": {"q4_0": 31.0, "q4_1": 15.0, "q5_0": 29.0, "q5_1": 16.0, "q6_K": 33.0, "q5_K": 8.0, "q4_K": 8.9,
                      "q3_K": 24.0, "q2_K": 6.9, "iq4_xs": 5.8, "iq4_nl": 5.7},
}


def estimated_seconds(type_id, n_values, threads=1, imatrix=False):
    """How long quantizing `n_values` float32 values to `type_id` (with an importance matrix or not)
    takes with this engine on `threads` cores, from MEASURED_MB_PER_S."""
    weighted = imatrix and type_id not in IGNORES_IMATRIX
    rates = MEASURED_MB_PER_S[engine() + (" imatrix" if weighted else "")]
    every = [rate for table in MEASURED_MB_PER_S.values() for rate in table.values()]
    rate = rates.get(GGML_TYPES[type_id][0], min(every))
    return n_values * 4 / 1e6 / rate / max(1, threads)


def uncompiled_types(type_ids, dequantized=(), measured=()):
    """The ggml type names among `type_ids` (to quantize to), `dequantized` (source types to dequantize
    with the compiled dequantizers) and `measured` (types whose error is measured: the compiled error
    pass) whose compiled kernels numba's cache does not hold yet: what a first run compiles (tens of
    seconds of CPU each; cached after). [] with the numpy engine."""
    compiled = compiled_kernels()
    if compiled is None:
        return []
    jitload = _compiled.get("jitload")
    if jitload is None:
        return []
    names = []
    for type_id in sorted(set(type_ids)):
        name = GGML_TYPES[type_id][0] if type_id in GGML_TYPES else None
        if name in compiled.ROWS and jitload.is_cached(compiled.ROWS[name][0], _quantize_signature(jitload)) is False:
            names.append(name)
    wanted = []  # the dequantizer drivers this run calls
    if any(GGML_TYPES.get(type_id, ("",))[0] in compiled.DEQUANT for type_id in dequantized):
        wanted.append((compiled._dequantize_rows, _dequantize_signature))
    if any(GGML_TYPES.get(type_id, ("",))[0] in compiled.DEQUANT for type_id in measured):
        wanted += [(compiled._error_rows, _error_signature), (compiled._source_stats, _source_signature)]
    if any(jitload.is_cached(function, signature(jitload)) is False for function, signature in wanted):
        names.append("the dequantizers")
    return names


def _quantize_signature(jitload):
    """The compiled quantizers' signature: (kind, rows (read-only), bytes out, imatrix weights
    (read-only), whether there are weights, bytes per block)."""
    return (jitload.types.int64, jitload.array(F32, 2, True), jitload.array(np.uint8, 2, False), jitload.array(F32, 1, True),
            jitload.types.boolean, jitload.types.int64)


def _dequantize_signature(jitload):
    """The compiled dequantizer's signature: (kind, bytes (read-only), floats out, block, block bytes)."""
    return (jitload.types.int64, jitload.array(np.uint8, 2, True), jitload.array(F32, 2, False), jitload.types.int64,
            jitload.types.int64)


def _error_signature(jitload):
    """The compiled error pass's signature: (kind, bytes (read-only), source (read-only), block, block
    bytes, float64 sum out)."""
    return (jitload.types.int64, jitload.array(np.uint8, 2, True), jitload.array(F32, 2, True), jitload.types.int64,
            jitload.types.int64, jitload.array(np.float64, 1, False))


def _source_signature(jitload):
    """The compiled source figures' signature: (source (read-only), float64 sum out)."""
    return (jitload.array(F32, 2, True), jitload.array(np.float64, 1, False))


def _load_compiled(dispatcher, signature):
    """Have `dispatcher`'s machine code for `signature(jitload)` loaded (compiled on a first run)
    before its first call, by that explicit signature (jitload.py: cheaper than numba's first call)."""
    jitload = _compiled.get("jitload")
    if jitload is not None:
        jitload.load_signature(dispatcher, signature(jitload))


def _read_only(array):
    """A read-only view of `array`. numba compiles a driver once per argument type, and a writable
    array is another type than a read-only one: an F32 source reaches the kernels read-only (a view
    of the file's bytes), a dequantized one writable, so without this a model with both, or the error
    pass (which dequantizes the tier's fresh bytes and a K-quant source's file bytes), compiled every
    driver twice on a first run."""
    view = array.view()
    view.flags.writeable = False
    return view


def _run_compiled(driver, rows, qw, threads, block, block_bytes):
    """Run a compiled row driver (kernels_jit.ROWS: (function, kind)) over `rows` (n, row) in spans
    of rows, one per thread."""
    function, kind = driver

    def rows_function(x, out, weights, has_qw):
        function(kind, x, out, weights, has_qw, block_bytes)

    out = np.empty((rows.shape[0], rows.shape[1] // block * block_bytes), dtype=np.uint8)
    has_qw = qw is not None
    rows, weights = _read_only(rows), _read_only(qw if has_qw else np.zeros(0, dtype=F32))
    spans = _spans(rows.shape[0], threads)
    _load_compiled(function, _quantize_signature)
    if len(spans) == 1:
        rows_function(rows, out, weights, has_qw)
    else:
        with ThreadPoolExecutor(max_workers=len(spans)) as pool:
            for future in [pool.submit(rows_function, rows[a:b], out[a:b], weights, has_qw) for a, b in spans]:
                future.result()
    return out


def quantize(values, type_id, threads=None, imatrix=None):
    """Quantize float32 values to ggml `type_id` bytes, byte-identical to ggml_quantize_chunk.

    values: float32 array whose last axis (the ggml row, ne[0]) divides into the type's blocks.
    imatrix: None, or float32 (row,) importance weights of the row's columns (llama-quantize's
    per-tensor imatrix slice); ignored where ggml ignores it (Q8_0, F16, BF16).
    Returns uint8 of shape (..., row_bytes). F16 and BF16 go through gguf.quants (which matches
    ggml's conversions); the others through the compiled kernels or, without them, numpy's (the
    same bytes).
    """
    values = np.ascontiguousarray(values, dtype=F32)
    if type_id in (F16, BF16):
        from gguf import GGMLQuantizationType, quants

        if type_id == F16:
            return values.astype(np.float16).view(np.uint8)
        return quants.quantize(values, GGMLQuantizationType.BF16)
    name, block, block_bytes = GGML_TYPES[type_id]
    row = values.shape[-1] if values.ndim else 1
    if row % block:
        raise ValueError(f"row of {row} values does not divide into blocks of {block}")
    qw = None
    if imatrix is not None and type_id not in IGNORES_IMATRIX:
        qw = np.ascontiguousarray(imatrix, dtype=F32).reshape(-1)
        if qw.size != row:
            raise ValueError(f"imatrix of {qw.size} values for rows of {row}")
    threads = threads or default_threads()
    compiled = compiled_kernels()
    if compiled is not None and name in compiled.ROWS:
        out = _run_compiled(compiled.ROWS[name], values.reshape(-1, row), qw, threads, block, block_bytes)
        return out.reshape(*values.shape[:-1], row // block * block_bytes)
    if type_id not in KERNELS:
        raise NotImplementedError(f"no quantizer for {name}")
    block, block_bytes, kernel = KERNELS[type_id]
    blocks = values.reshape(-1, block)
    out = np.empty((blocks.shape[0], block_bytes), dtype=np.uint8)
    weights = None
    if qw is not None:
        sigma2 = None
        if type_id in ROW_WEIGHTED:  # each row's sum of x^2 (in order) / n, once per block
            rows = np.ascontiguousarray(values.reshape(-1, row).T)
            sigma2 = np.repeat(_sum(rows * rows) / F32(row), row // block)
        weights = (qw.reshape(row // block, block), sigma2)
    step = max(1, _STEP_VALUES[type_id] // block)
    spans = _spans(blocks.shape[0], threads, step) if blocks.shape[0] > step else [(0, blocks.shape[0])]
    if len(spans) == 1:
        _run_blocks(kernel, blocks, out, step, weights)
    else:
        with ThreadPoolExecutor(max_workers=len(spans)) as pool:
            for future in [pool.submit(_run_blocks, kernel, blocks[a:b], out[a:b], step, weights, a) for a, b in spans]:
                future.result()
    return out.reshape(*values.shape[:-1], row // block * block_bytes)


_DEQUANTIZABLE = {0: True, 1: True}


def can_dequantize(type_id):
    """Whether gguf can turn ggml `type_id` back into floats (asked once per type, with one zero block)."""
    if type_id not in _DEQUANTIZABLE:
        from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, quants

        try:
            qtype = GGMLQuantizationType(type_id)
            quants.dequantize(np.zeros((1, GGML_QUANT_SIZES[qtype][1]), dtype=np.uint8), qtype)
            _DEQUANTIZABLE[type_id] = True
        except (ValueError, KeyError, NotImplementedError):
            _DEQUANTIZABLE[type_id] = False
    return _DEQUANTIZABLE[type_id]


def dequantize(data, type_id, shape):
    """ggml bytes of `type_id` -> float32 array of numpy `shape` (reversed ggml shape), via gguf
    (the K-quants and IQ4 through the compiled dequantizers when they are there, the same floats).

    Raises NotImplementedError for a type gguf cannot dequantize.
    """
    from gguf import GGMLQuantizationType, quants

    data = np.asarray(data, dtype=np.uint8)
    if type_id == 0:
        return data.view(F32).reshape(shape)
    qtype = GGMLQuantizationType(type_id)
    if type_id == F16:
        return data.view(np.float16).astype(F32).reshape(shape)
    n_rows = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
    compiled = compiled_kernels()
    name = GGML_TYPES[type_id][0] if type_id in GGML_TYPES else None
    if compiled is not None and name in compiled.DEQUANT:
        # the K-quants and IQ4 compiled: gguf's numpy dequantizers were as slow as the quantizers,
        # and a tier's error measurement runs one per tensor (same floats: tests compare them)
        _load_compiled(compiled._dequantize_rows, _dequantize_signature)
        return compiled.dequantize_rows(name, _read_only(np.ascontiguousarray(data)), n_rows, shape[-1]).reshape(shape)
    return quants.dequantize(data.reshape(n_rows, -1), qtype).reshape(shape)


def squares_and_peak(values):
    """(sum of squares, largest |value|) of a float32 array, numpy's way; NaN if any value is. Each
    row's squares are summed in float32 by one dot product (einsum: no squared copy), the row sums
    in float64."""
    if not values.size:
        return 0.0, 0.0
    rows = values.reshape(-1, values.shape[-1]) if values.ndim > 1 else values.reshape(1, -1)
    sum_of_squares = float(np.einsum("ij,ij->i", rows, rows).sum(dtype=np.float64))
    if not math.isfinite(sum_of_squares) and np.isfinite(rows).all():  # a float32 row sum overflowed (|x| > 1e19)
        sum_of_squares = float(np.add.reduce(np.square(rows, dtype=np.float64), axis=None))
    return sum_of_squares, float(np.maximum(rows.max(), -rows.min()))


def source_figures(source):
    """(sum of squares, largest |value|) of float32 `source` (n_rows, row): NaN or infinite when a
    value is. Compiled when the kernels are (one pass, the squares added in float64)."""
    compiled = compiled_kernels()
    if compiled is None or not source.size:
        return squares_and_peak(source)
    _load_compiled(compiled._source_stats, _source_signature)
    return compiled.source_stats(_read_only(np.ascontiguousarray(source, dtype=F32).reshape(-1, source.shape[-1])))


def error_figures(data, type_id, source):
    """(sum of squared errors, largest |error|) of `type_id` bytes `data` (the quantized `source`)
    against float32 `source` (n_rows, row): what dequantizing `data` and subtracting `source` gives.
    Compiled for the types the compiled dequantizers cover (block by block, no dequantized copy of
    the tensor, the squares added in float64: the same figure to float32 rounding); otherwise
    through `dequantize` and numpy."""
    compiled = compiled_kernels()
    name = GGML_TYPES[type_id][0] if type_id in GGML_TYPES else None
    if compiled is not None and name in compiled.DEQUANT and source.size:
        _load_compiled(compiled._error_rows, _error_signature)
        return compiled.error_rows(name, _read_only(np.ascontiguousarray(data)), _read_only(np.ascontiguousarray(source, dtype=F32)))
    return squares_and_peak(dequantize(data, type_id, source.shape) - source)
