"""The compiled 32-value block types Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 (quantize_row_*_ref, the q4_0..q5_1
`_impl` variants with an importance matrix, and their dequantize_row_*). The numpy versions:
legacy.py. See common_jit.py for the float32 rules."""

import math

import numba
import numpy as np

from moetools.jitcache import make_cache_writes_best_effort
from moetools.quantize.kernels.common_jit import (_JIT, F32, F64, SOURCE_STAMP, _c_int8, _half_at, _imatrix_weights, _int8,
                                                  _round_away, _sum_squares, put_half)
from moetools.quantize.kernels.searches_jit import LANE_STATE, LANES, QX_STEPS, make_qkx_lanes, make_qx_quants


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
            lanes = state.shape[1]  # from the array, not a constant: see kquants_jit._rows_k_min
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


# --- dequantizers (ggml's dequantize_row_*): the error measurement of a tier reads them -----------

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


# Every kernel's cache written best effort (moetools.jitcache: a full drive does not fail the run), keyed
# to every *_jit.py file (SOURCE_STAMP).
make_cache_writes_best_effort(globals(), SOURCE_STAMP)
