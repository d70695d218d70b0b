"""The numpy engine's K-quants Q2_K, Q3_K, Q4_K, Q5_K and Q6_K over super-blocks of 256 values
(quantize_row_*_K_ref, and the `_impl` variants with an importance matrix). Compiled counterparts:
kquants_jit.py."""

import numpy as np

from moetools.quantize.kernels.common import (F32, GROUP_MAX_EPS, QK_K, _first_absmax, _groups, _half_value,
                                              _imatrix_weights, _nearest_exact, _positive_max, _put_half, _sum,
                                              _ungroup)
from moetools.quantize.kernels.searches import _make_q3, _make_qkx2, _make_qp, _make_qx


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
