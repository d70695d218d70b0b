"""The compiled K-quants Q2_K, Q3_K, Q4_K, Q5_K and Q6_K over super-blocks of 256 values
(quantize_row_*_K_ref, the `_impl` variants with an importance matrix, and their dequantize_row_*).
The numpy versions: kquants.py. See common_jit.py for the float32 rules and the lanes."""

import numba
import numpy as np

from moetools.jitcache import make_cache_writes_best_effort
from moetools.quantize.kernels.common_jit import (_JIT, F32, GROUP_MAX_EPS, SOURCE_STAMP, _clamped, _half_at,
                                                  _imatrix_weights, _int8, _opaque, _sqrt, _sum_squares, half_value,
                                                  nearest_int, put_half)
from moetools.quantize.kernels.searches_jit import (LANE_STATE, LANES, QX_STEPS, make_q3_lanes, make_qkx_lanes,
                                                    make_qp_quants, make_qx_quants)


# --- packing shared by the K-quants ----------------------------------------------------------------

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


# --- dequantizers (ggml's dequantize_row_*): the error measurement of a tier reads them -----------

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


# Every kernel's cache written best effort (moetools.jitcache: a full drive does not fail the run), keyed
# to every *_jit.py file (SOURCE_STAMP).
make_cache_writes_best_effort(globals(), SOURCE_STAMP)
