"""The numpy engine's 32-value block types Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 (quantize_row_*_ref, and
the q4_0..q5_1 `_impl` variants with an importance matrix). Compiled counterparts: legacy_jit.py."""

import numpy as np

from moetools.quantize.kernels.common import F32, _first_absmax, _first_extreme, _imatrix_weights, _inverse, _put_half
from moetools.quantize.kernels.searches import _make_qkx2, _make_qx

_BELOW_HALF = np.nextafter(F32(0.5), F32(0))  # 0.49999997: round-half-away via trunc(x + this)


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
