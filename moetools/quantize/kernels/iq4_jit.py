"""The compiled IQ4_NL and IQ4_XS (non-linear 4-bit: quantize_iq4_nl / quantize_iq4_xs through
quantize_row_iq4_nl_impl, and their dequantize_row_*). The numpy versions: iq4.py. See
common_jit.py for the float32 rules and the lanes."""

import numba
import numpy as np

from moetools.jitcache import make_cache_writes_best_effort
from moetools.quantize.kernels.common_jit import (_JIT, F32, GROUP_MAX_EPS, SOURCE_STAMP, _half_at, _imatrix_weights,
                                                  _sum_squares, nearest_int, put_half)
from moetools.quantize.kernels.searches_jit import LANE_STATE, LANES

KVALUES_IQ4NL = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=np.int8)


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
            lanes = state.shape[1]  # from the array, not a constant: see kquants_jit._rows_k_min
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


# --- dequantizers (ggml's dequantize_row_*): the error measurement of a tier reads them -----------

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


# Every kernel's cache written best effort (moetools.jitcache: a full drive does not fail the run), keyed
# to every *_jit.py file (SOURCE_STAMP).
make_cache_writes_best_effort(globals(), SOURCE_STAMP)
