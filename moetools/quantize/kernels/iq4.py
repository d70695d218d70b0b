"""The numpy engine's IQ4_NL and IQ4_XS (non-linear 4-bit: quantize_iq4_nl / quantize_iq4_xs through
quantize_row_iq4_nl_impl). Compiled counterparts: iq4_jit.py."""

import numpy as np

from moetools.quantize.kernels.common import (F32, GROUP_MAX_EPS, QK_K, _first_absmax, _groups, _imatrix_weights,
                                              _inverse, _nearest_exact, _put_half, _sum)

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
