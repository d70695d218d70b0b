"""The numpy engine's shared parts: ggml's scalar conventions over arrays (nearest_int, halves, the
first extreme value), sums in ggml's order, the groups layout of the K-quants and IQ4, and the
thread spans every quantize call runs on. See the package's docstring for the float32 rules."""

import os

import numpy as np

from moetools.gguf.constants import GGML_TYPE_IDS

F32 = np.float32
QK_K = 256
GROUP_MAX_EPS = F32(1e-15)
_MAGIC = F32(12582912.0)  # 1.5 * 2^23: ggml's nearest_int

F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, BF16, IQ4_NL, IQ4_XS = (
    GGML_TYPE_IDS[name] for name in ("f16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_K", "q3_K", "q4_K", "q5_K", "q6_K", "bf16",
                                     "iq4_nl", "iq4_xs"))


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


# --- group helpers for the K-quants and IQ4 (groups laid out as (n_elements, n_groups)) ----------

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


def _imatrix_weights(groups, qw_groups, sigma2):
    """qw * sqrtf(sigma2 + x^2) per value of groups (n, g), the weights every `_impl` quantizer gives
    its search, with the sum of each group's weights (ggml's sw[j], added in order)."""
    weights = qw_groups * np.sqrt(sigma2 + groups * groups)
    return weights, _sum(weights)


def _groups(x, size):
    """x (nb, 256) -> (size, nb * 256/size) contiguous: element index first, group second."""
    return np.ascontiguousarray(x.reshape(-1, size).T)


def _ungroup(levels, nb):
    """Inverse of _groups: (size, g) -> (nb, 256)."""
    return levels.T.reshape(nb, QK_K)


# --- threads: a call's rows (or blocks) in spans, one per thread --------------------------------

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
