"""ggml's quantizers compiled with numba: every K-quant, IQ4_NL/IQ4_XS and the 32-value block types,
without and with an importance matrix, byte-identical to ggml (and to the numpy kernels beside
each *_jit.py module: legacy.py, kquants.py, iq4.py, searches.py). This module holds what they all
use: ggml's scalar conventions (nearest_int, float16 both ways, roundf, C's int8 cast) and the
imatrix weighting.

Each function follows ggml/src/ggml-quants.c (the algorithms of `quantize_row_*_ref`, the
`quantize_row_*_impl` imatrix variants, `make_qx_quants`, `make_q3_quants`, `make_qkx2_quants` /
`make_qkx3_quants`, `make_qp_quants`, `quantize_row_iq4_nl_impl`). Byte identity needs the same
float32 operations in the same order, so every intermediate is rounded to float32 explicitly
(`F32(...)`: numba, like numpy, would otherwise widen a float32 combined with an int or a Python
float), products are never fused (numba does not allow LLVM to contract a*b+c without fastmath),
and float16 is converted with round-to-nearest-even as ggml's GGML_FP32_TO_FP16 does.

Speed: ggml searches the scale of one group (16 or 32 values) after the other, each search a chain
of dependent float32 additions that no compiler may reorder. The groups do not depend on each
other, so the searches that dominate (make_qkx2/3 for Q2_K/Q4_K/Q5_K and Q4_1/Q5_1 with an imatrix,
make_q3 for Q3_K, the IQ4 search) run LANES groups at once (`make_*_lanes`): values laid out (element, group), every loop over
the groups innermost, which the compiler turns into SIMD with one group per lane: each group still
does ggml's operations in ggml's order, ggml's branches become per-lane selects. make_qx_quants
(Q6_K, Q3_K with an imatrix) instead runs its 19 trial scales side by side within one group.
Measured against ggml's C on one core by benchmarks/bench_quantize.py.

Row drivers take (kind, x (n_rows, n_per_row) float32, out (n_rows, row_bytes) uint8, qw (n_per_row,)
float32, has_qw, block_bytes) and release the GIL, so kernels.quantize runs them on every core, one span of rows
per thread. Imported lazily and only through engine_jit.py, by kernels.compiled_kernels (numba's import
costs a few hundred ms); the machine code is cached beside these files, so the compile happens once
per install. numba keys a function's cached code to its own file only, while the kernels of one
*_jit.py module inline or call those of others: every kernel's cache is keyed to all of them
(SOURCE_STAMP, moetools.jitcache), so an edit to any one recompiles them all.
"""

import glob
import math
import os

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from moetools.jitcache import make_cache_writes_best_effort, source_stamp

F32 = np.float32
F64 = np.float64
_JIT = {"nogil": True, "cache": True, "error_model": "numpy"}  # C division: inf/nan, never an exception
GROUP_MAX_EPS = 1e-15

# The freshness stamp of every kernel's cached machine code: every *_jit.py file of this package.
SOURCE_STAMP = source_stamp(sorted(glob.glob(os.path.join(os.path.dirname(os.path.abspath(__file__)), "*_jit.py"))))


# --- scalar helpers ------------------------------------------------------------------------------

@intrinsic
def _float32_bits(typingctx, value):
    """The bits of a float32 as an int32 (C's memcpy(&i, &f, 4)): one LLVM bitcast."""
    if value != types.float32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return types.int32(types.float32), codegen


@numba.njit(inline="always", **_JIT)
def nearest_int(fval):
    """ggml's nearest_int: the mantissa bits of fval + 1.5*2^23, exactly as C computes it (round half
    to even below 2^22, C's wrap-around above). Inlined: it runs in every inner loop."""
    return (np.int64(_float32_bits(F32(fval + F32(12582912.0)))) & 0x007FFFFF) - 0x00400000


@intrinsic
def nearest_float(typingctx, value):
    """float32(nearest_int(v)): ggml's nearest_int with every step in 32-bit lanes (fadd, bitcast, and,
    sub, int32 -> float32), so a loop of it vectorises; exact, as nearest_int's result has at most
    23 bits. The searches clamp levels as floats: min/max of small integers are the same either way."""
    if value != types.float32:
        return None

    def codegen(context, builder, signature, args):
        f32, i32 = ir.FloatType(), ir.IntType(32)
        bits = builder.bitcast(builder.fadd(args[0], ir.Constant(f32, 12582912.0)), i32)
        level = builder.sub(builder.and_(bits, ir.Constant(i32, 0x007FFFFF)), ir.Constant(i32, 0x00400000))
        return builder.sitofp(level, f32)

    return types.float32(types.float32), codegen


@intrinsic
def _opaque(typingctx, value):
    """int64 `value` hidden from the optimiser (passed through an empty inline asm): a loop bounded by
    it is vectorised, where a constant trip count (16, 32: known once the helper is inlined and its
    scratch arrays' shapes are) gets the loop unrolled into scalar code before the vectoriser sees it."""
    if not isinstance(value, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        argument = context.cast(builder, args[0], signature.args[0], types.int64)
        return builder.asm(ir.FunctionType(i64, [i64]), "", "=r,0", [argument], side_effect=False)

    return types.int64(value), codegen


@numba.njit(inline="always", **_JIT)
def _clamped(v, low, high):
    """min(max(float32(nearest_int(v)), low), high): C's MAX(low, MIN(high, nearest_int(v))) as a float."""
    return min(max(nearest_float(v), low), high)


@numba.njit(**_JIT)
def _rne(value):
    """Round a float64 in [0, 2^52) half to even."""
    return (value + 4503599627370496.0) - 4503599627370496.0


@numba.njit(**_JIT)
def half_bits(f):
    """float32 -> IEEE half bits, round to nearest even (ggml's GGML_FP32_TO_FP16), from the float's
    bits: NaN -> 0x7E00, 65520 and above -> infinity, below 2^-14 a subnormal half."""
    u = np.int64(_float32_bits(F32(f))) & 0xFFFFFFFF
    sign = (u >> 16) & 0x8000
    a = u & 0x7FFFFFFF
    if a > 0x7F800000:
        return sign | 0x7E00
    if a >= 0x477FF000:  # 65520.0: rounds to infinity
        return sign | 0x7C00
    if a >= 0x38800000:  # 2^-14: a normal half, the exponent rebased by 112 and 13 bits rounded off
        h = (a - 0x38000000) >> 13
        rest = a & 0x1FFF
        return sign | (h + (1 if rest > 0x1000 or (rest == 0x1000 and (h & 1) != 0) else 0))
    exponent = a >> 23
    if exponent < 102:  # below 2^-25: rounds to 0
        return sign
    mantissa = (a & 0x7FFFFF) | 0x800000
    shift = 126 - exponent  # in units of 2^-24, the half's subnormal step
    h = mantissa >> shift
    rest = mantissa & ((1 << shift) - 1)
    halfway = 1 << (shift - 1)
    return sign | (h + (1 if rest > halfway or (rest == halfway and (h & 1) != 0) else 0))


@intrinsic
def _float32_from_bits(typingctx, value):
    """The float32 whose bits are the low 32 of an int64: one trunc and one bitcast."""
    if value != types.int64:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(builder.trunc(args[0], ir.IntType(32)), ir.FloatType())

    return types.float32(types.int64), codegen


@numba.njit(**_JIT)
def half_value(h):
    """IEEE half bits -> float32 (GGML_FP16_TO_FP32), from the bits (a NaN's sign kept, its payload
    the default one)."""
    h = np.int64(h)
    exponent = (h >> 10) & 0x1F
    mantissa = h & 0x3FF
    sign = (h & 0x8000) << 16
    if exponent == 0:  # zero or subnormal: mantissa * 2^-24, exact
        value = F32(F32(mantissa) * F32(5.9604644775390625e-08))
        return F32(-value) if sign != 0 else value
    if exponent == 31:
        return _float32_from_bits(sign | (0x7F800000 if mantissa == 0 else 0x7FC00000))
    return _float32_from_bits(sign | ((exponent + 112) << 23) | (mantissa << 13))


@numba.njit(**_JIT)
def put_half(y, offset, f):
    """Store float32 f as ggml_half at y[offset:offset+2]; returns the float32 ggml reads back."""
    h = half_bits(f)
    y[offset] = h & 0xFF
    y[offset + 1] = h >> 8
    return half_value(h)


@numba.njit(inline="always", **_JIT)
def _sqrt(v):
    """sqrtf: float64 sqrt rounded to float32 is the correctly rounded float32 sqrt."""
    return F32(math.sqrt(F64(v)))


@numba.njit(inline="always", **_JIT)
def _round_away(v):
    """roundf: half away from zero."""
    t = F32(math.trunc(F64(v)))
    if abs(F32(v - t)) >= F32(0.5):
        t = F32(t + (F32(1) if v > 0 else F32(-1)))
    return t


@numba.njit(inline="always", **_JIT)
def _c_int8(v):
    """C's (int8_t) of a float: truncation toward zero, then the low byte as signed."""
    i = int(math.trunc(F64(v))) & 0xFF
    return i - 256 if i > 127 else i


# --- reading a stored block back (every family's dequantize_row_*) --------------------------------

@numba.njit(inline="always", **_JIT)
def _half_at(y, offset):
    return half_value(np.int64(y[offset]) | (np.int64(y[offset + 1]) << 8))


@numba.njit(inline="always", **_JIT)
def _int8(byte):
    value = np.int64(byte)
    return value - 256 if value > 127 else value


# --- the imatrix weighting shared by the K-quants, IQ4 and the 32-value types ---------------------

@numba.njit(inline="always", **_JIT)
def _sum_squares(x, start, n):
    """x[start]^2 + ... + x[start+n-1]^2, added in order in float32 (ggml's sumx2 loops)."""
    total = F32(0)
    for j in range(start, start + n):
        total = F32(total + F32(x[j] * x[j]))
    return total


@numba.njit(inline="always", **_JIT)
def _imatrix_weights(x, qw, start, n, sigma2, weights):
    """weights[l] = qw[start+l] * sqrtf(sigma2 + x[start+l]^2) for l < n, as every `_impl` quantizer
    weighs its values by the importance matrix; returns their sum (added in order)."""
    total = F32(0)
    for l in range(n):
        w = F32(qw[start + l] * _sqrt(F32(sigma2 + F32(x[start + l] * x[start + l]))))
        weights[l] = w
        total = F32(total + w)
    return total


# Every kernel's cache written best effort (moetools.jitcache: a full drive does not fail the run), keyed
# to every *_jit.py file (SOURCE_STAMP).
make_cache_writes_best_effort(globals(), SOURCE_STAMP)
