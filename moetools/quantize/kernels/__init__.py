"""ggml's quantizers: compiled (numba, the *_jit.py modules) and vectorised numpy, byte-identical to ggml.

`quantize(values, type_id, imatrix=None)` turns float32 rows into ggml blocks, with or without an
importance matrix (per-column weights, as llama-quantize passes them to ggml_quantize_chunk);
`dequantize(data, type_id, shape)` turns any type gguf knows back into float32.

Two engines give the same bytes, for every K-quant, IQ4_NL, IQ4_XS and the 32-value block types,
with and without an imatrix. The compiled one (the *_jit.py modules) serves whenever numba imports and
$MOETOOLS_NO_JIT is unset or "0"; the numpy kernels serve otherwise (`engine()` says which).
Both split the rows into spans run on a thread pool (the compiled kernels and numpy's loops release
the GIL), so a call uses every core. Each quant family's two versions of one algorithm sit side by
side, numpy beside numba:

    common.py    common_jit.py     ggml's scalar conventions, sums in its order, threads (numpy);
                                   nearest_int, halves, the imatrix weights (numba)
    searches.py  searches_jit.py   the scale searches the families share (make_qx/qkx2/q3/qp_quants)
    legacy.py    legacy_jit.py     the 32-value block types Q4_0, Q4_1, Q5_0, Q5_1, Q8_0
    kquants.py   kquants_jit.py    the K-quants Q2_K, Q3_K, Q4_K, Q5_K, Q6_K
    iq4.py       iq4_jit.py        IQ4_NL, IQ4_XS
                 engine_jit.py     the compiled engine this module calls: each type's row driver
                                   (ROWS), the dequantizers (DEQUANT) and a tier's error pass

This module holds the dispatch: which engine runs (imported lazily: numba stays off the start-up
path), the numpy kernels' table (KERNELS), the thread pool, the ETA figures. A family module imports
common and searches only, a *_jit.py module only other *_jit.py modules, never this one.

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

from moetools.gguf.constants import GGML_TYPE_IDS, GGML_TYPES  # noqa: F401 (GGML_TYPE_IDS: for callers)
from moetools.quantize.kernels.common import (BF16, F16, F32, IQ4_NL, IQ4_XS, Q2_K, Q3_K, Q4_0, Q4_1, Q4_K, Q5_0,
                                              Q5_1, Q5_K, Q6_K, Q8_0, _run_blocks, _spans, _sum, default_threads)
from moetools.quantize.kernels.iq4 import _iq4_nl, _iq4_xs
from moetools.quantize.kernels.kquants import _q2_k, _q3_k, _q4_k, _q5_k, _q6_k
from moetools.quantize.kernels.legacy import _q4_0, _q4_1, _q5_0, _q5_1, _q8_0

NO_JIT_ENV = "MOETOOLS_NO_JIT"
_compiled = {}  # "module": engine_jit, or None when numba is missing or switched off

# Values handled per step inside one chunk, as measured on a 2-core machine: the 32-block kernels
# make many short numpy calls (the halving trees), so they want big steps; the K-quant searches
# make hundreds of calls over their temporaries and do best when those stay in cache, except
# Q3_K's, which walks the 16 values of a group one at a time over vectors of groups.
_STEP_VALUES = {Q8_0: 1 << 18, Q4_0: 1 << 18, Q4_1: 1 << 18, Q5_0: 1 << 18, Q5_1: 1 << 18,
                Q6_K: 1 << 15, Q5_K: 1 << 15, Q4_K: 1 << 15, Q3_K: 1 << 17, Q2_K: 1 << 15, IQ4_NL: 1 << 15,
                IQ4_XS: 1 << 15}


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


def compiled_kernels():
    """The numba-compiled engine (engine_jit: ROWS, DEQUANT, the error pass), or None (numba not
    importable, or $MOETOOLS_NO_JIT set to anything but "" or "0"). Looked up once per process."""
    if "module" not in _compiled:
        module = None
        if os.environ.get(NO_JIT_ENV, "") in ("", "0"):
            try:
                from moetools.quantize import jitload
                from moetools.quantize.kernels import engine_jit as module

                jitload.cheap_cache_loads(*module.MODULES)
                jitload.cheap_array_typing(*module.MODULES)
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
    """Run a compiled row driver (engine_jit.ROWS: (function, kind)) over `rows` (n, row) in spans
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
