"""The compiled engine as kernels.compiled_kernels hands it to kernels.quantize, dequantize and the
error figures: ROWS (each type's row driver, from legacy_jit, kquants_jit and iq4_jit), DEQUANT and the
dequantizers' driver over every family's dequantize_row_*, and a tier's error pass. Importing it
imports every *_jit.py module (MODULES: what jitload prepares)."""

import sys

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

import moetools.quantize.kernels.common_jit as common_jit
import moetools.quantize.kernels.iq4_jit as iq4_jit
import moetools.quantize.kernels.kquants_jit as kquants_jit
import moetools.quantize.kernels.legacy_jit as legacy_jit
import moetools.quantize.kernels.searches_jit as searches_jit
from moetools.jitcache import make_cache_writes_best_effort
from moetools.quantize.kernels.common_jit import _JIT, F32, F64, SOURCE_STAMP, _float32_bits
from moetools.quantize.kernels.iq4_jit import _rows_iq4, deq_iq4_nl, deq_iq4_xs
from moetools.quantize.kernels.kquants_jit import (_rows_256, _rows_k_min, _rows_q3_k, deq_q2_k, deq_q3_k, deq_q4_k,
                                                   deq_q5_k, deq_q6_k)
from moetools.quantize.kernels.legacy_jit import _deq_32, _rows_32, _rows_min_32, deq_q8_0


# ggml type name -> (row driver, kind): kernels.quantize calls driver(kind, x, out, qw, has_qw, block_bytes)
# with x (n_rows, n_per_row) float32, out (n_rows, row_bytes) uint8, qw (n_per_row,) float32 (GIL released)
ROWS = {"q2_K": (_rows_k_min, 2), "q3_K": (_rows_q3_k, 3), "q4_K": (_rows_k_min, 4), "q5_K": (_rows_k_min, 5),
        "q6_K": (_rows_256, 6), "iq4_xs": (_rows_iq4, 256), "q4_0": (_rows_32, 0), "q4_1": (_rows_min_32, 1),
        "q5_0": (_rows_32, 2), "q5_1": (_rows_min_32, 3), "q8_0": (_rows_32, 4), "iq4_nl": (_rows_iq4, 32)}


# --- the dequantizers' driver: every family's dequantize_row_*, by kind --------------------------

@numba.njit(**_JIT)
def _dequantize_block(kind, y, o):
    """One block of `kind` (DEQUANT's) from its bytes y into o."""
    if kind == 2:
        deq_q2_k(y, o)
    elif kind == 3:
        deq_q3_k(y, o)
    elif kind == 4:
        deq_q4_k(y, o)
    elif kind == 5:
        deq_q5_k(y, o)
    elif kind == 6:
        deq_q6_k(y, o)
    elif kind == 7:
        deq_iq4_xs(y, o)
    elif kind == 8:
        deq_iq4_nl(y, o)
    elif kind == 9:
        deq_q8_0(y, o)
    else:  # 10..13: Q4_0, Q4_1, Q5_0, Q5_1
        _deq_32(y, o, kind >= 12, kind % 2 == 1)


@numba.njit(**_JIT)
def _dequantize_rows(kind, data, out, block, block_bytes):
    for r in range(data.shape[0]):
        for i in range(out.shape[1] // block):
            _dequantize_block(kind, data[r, block_bytes * i:block_bytes * i + block_bytes], out[r, block * i:block * i + block])


# ggml type name -> (kind for _dequantize_rows, values per block, bytes per block)
DEQUANT = {"q2_K": (2, 256, 84), "q3_K": (3, 256, 110), "q4_K": (4, 256, 144), "q5_K": (5, 256, 176),
           "q6_K": (6, 256, 210), "iq4_xs": (7, 256, 136), "iq4_nl": (8, 32, 18), "q8_0": (9, 32, 34),
           "q4_0": (10, 32, 18), "q4_1": (11, 32, 20), "q5_0": (12, 32, 22), "q5_1": (13, 32, 24)}


# --- the error measurement: a tier's figures without a dequantized copy of the tensor -------------
# Sums of squares are added in float64 (each float32 square is exact in float64) in whatever order
# the compiler vectorises them ("reassoc" on _squares_and_peak only; the dequantizers keep
# ggml's float32 operations). The largest |error| is taken on the float32 bits of |error| as
# integers, which order as the magnitudes do, with every NaN above infinity above every finite
# value: numpy's max (NaN if any value is), in a loop that vectorises without letting the compiler
# assume there are no NaNs.

@numba.njit(nogil=True, cache=True, error_model="numpy", fastmath={"reassoc"})
def _squares_and_peak(a, b, first, n, peak_bits):
    """(the sum of (a[l] - b[first + l])^2 for l < n in float64, the largest of peak_bits and the
    float32 bits of every |a[l] - b[first + l]|). Not inlined: its "reassoc" would not come along."""
    total = 0.0
    top = np.int32(peak_bits)
    for l in range(n):
        e = F32(a[l] - b[first + l])
        total += F64(e) * F64(e)
        top = max(top, _float32_bits(abs(e)))
    return total, top


@intrinsic
def _float32_of_bits32(typingctx, value):
    """The float32 whose bits are an int32."""
    if value != types.int32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(types.int32), codegen


@numba.njit(**_JIT)
def _source_stats(source, out):
    """out[0] = sum of source^2 (float64); returns the largest |source| (NaN or infinite if one is)."""
    zeros = np.zeros(source.shape[1], dtype=np.float32)
    total = 0.0
    top = np.int32(0)
    for r in range(source.shape[0]):
        part, top = _squares_and_peak(source[r], zeros, 0, source.shape[1], top)
        total += part
    out[0] = total
    return _float32_of_bits32(top)


@numba.njit(**_JIT)
def _error_rows(kind, data, source, block, block_bytes, out):
    """out[0] = sum over the rows of (dequantized data - source)^2; returns the largest |error|."""
    deq = np.empty(source.shape[1], dtype=np.float32)
    total = 0.0
    top = np.int32(0)
    for r in range(source.shape[0]):
        for i in range(source.shape[1] // block):
            _dequantize_block(kind, data[r, block_bytes * i:block_bytes * i + block_bytes], deq[block * i:block * i + block])
        part, top = _squares_and_peak(deq, source[r], 0, source.shape[1], top)
        total += part
    out[0] = total
    return _float32_of_bits32(top)


def source_stats(source):
    """(sum of squares (float64), largest |value|) of a C-contiguous float32 (n_rows, row) array; the
    largest is NaN or infinite when a value is."""
    out = np.zeros(1, dtype=np.float64)
    peak = _source_stats(source, out)
    return float(out[0]), float(peak)


def error_rows(name, data, source):
    """(sum of squared errors, largest |error|) of ggml `name` bytes `data` (C-contiguous uint8, n_rows
    * row_bytes) against C-contiguous float32 `source` (n_rows, row): what dequantizing them and
    subtracting the source gives, without the dequantized copy."""
    kind, block, block_bytes = DEQUANT[name]
    n_rows, row = source.shape
    out = np.zeros(1, dtype=np.float64)
    peak = _error_rows(kind, data.reshape(n_rows, row // block * block_bytes), source, block, block_bytes, out)
    return float(out[0]), float(peak)


def dequantize_rows(name, data, n_rows, row):
    """float32 (n_rows, row) of ggml `name` bytes `data` (uint8, n_rows * row_bytes), as ggml's dequantize_row_*."""
    kind, block, block_bytes = DEQUANT[name]
    out = np.empty((n_rows, row), dtype=np.float32)
    _dequantize_rows(kind, np.ascontiguousarray(data).reshape(n_rows, row // block * block_bytes), out, block, block_bytes)
    return out


# Every module of the compiled engine: kernels.compiled_kernels has jitload prepare their dispatchers.
MODULES = (common_jit, searches_jit, legacy_jit, kquants_jit, iq4_jit, sys.modules[__name__])

# Every kernel's cache written best effort (moetools.jitcache: a full drive does not fail the run), keyed
# to every *_jit.py file (SOURCE_STAMP).
make_cache_writes_best_effort(globals(), SOURCE_STAMP)
