"""The numpy quantizers against ggml's reference bytes, gguf's quantizers and dequantizers.

tests/data/quantize_golden_*.npz hold the bytes ggml's `quantize_row_*_ref` (ggml-quants.c of the
llama.cpp vendored in llama-cpp-python 0.3.36, built without FMA contraction as ggml-base is)
produced for the fixed inputs in quantize_golden_input.npz: normal, wide-range, one-signed, integer,
signed-zero, constant, zero, tiny, huge (float16 scale overflow), outlier and heavy-tailed rows;
HASHED_DIGESTS below hold the digests of its bytes for 2048 more super-blocks made without an RNG.
"""

from pathlib import Path

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, quants

from moetools.quantize import kernels

DATA = Path(__file__).parent / "data"
TYPES = {"q8_0": 8, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q6_K": 14, "q5_K": 13, "q4_K": 12, "q3_K": 11, "q2_K": 10}
GGUF_QUANTIZABLE = ("q8_0", "q4_0", "q4_1", "q5_0", "q5_1")


@pytest.fixture(scope="module")
def golden_input():
    data = np.load(DATA / "quantize_golden_input.npz")
    return data["x"], [str(name) for name in data["names"]]


def test_type_ids_and_sizes_match_gguf():
    for name, type_id in TYPES.items():
        qtype = GGMLQuantizationType[name.upper()]
        assert qtype == type_id
        block, block_bytes, _ = kernels.KERNELS[type_id]
        assert GGML_QUANT_SIZES[qtype] == (block, block_bytes)


@pytest.mark.parametrize("name", list(TYPES))
def test_bytes_equal_ggml_reference(name, golden_input):
    x, names = golden_input
    golden = np.load(DATA / f"quantize_golden_{name}.npz")["out"]
    for row, case, expected in zip(x, names, golden):
        got = kernels.quantize(row, TYPES[name]).ravel()
        assert got.tobytes() == expected.tobytes(), f"{name} differs from ggml on the {case!r} row"
    # all rows at once (one call, several chunks and threads) gives the same bytes
    assert kernels.quantize(x, TYPES[name], threads=2).tobytes() == golden.tobytes()


@pytest.mark.parametrize("name", GGUF_QUANTIZABLE)
def test_bytes_equal_gguf_quantize(name):
    rng = np.random.default_rng(7)
    # normal weights, plus values on and next to every rounding boundary k + 0.5 of q8_0's scale
    x = (rng.standard_normal((64, 512)) * 0.02).astype(np.float32)
    boundary = np.arange(-127, 128, dtype=np.float32) + np.float32(0.5)
    near = np.concatenate([np.nextafter(boundary, np.float32(-1e9)), boundary, np.nextafter(boundary, np.float32(1e9))])
    near = np.concatenate([near, np.full(-near.size % 31, 1.0, dtype=np.float32)]).reshape(-1, 31)
    with_max = np.concatenate([near, np.full((near.shape[0], 1), 127, dtype=np.float32)], axis=1)  # scale d = 1
    for values in (x, with_max):
        qtype = GGMLQuantizationType[name.upper()]
        assert kernels.quantize(values, TYPES[name]).tobytes() == quants.quantize(values, qtype).tobytes()


@pytest.mark.parametrize("name", list(TYPES))
def test_round_trip_through_gguf_dequantizer(name):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((16, 1024)) * 0.05).astype(np.float32)
    data = kernels.quantize(x, TYPES[name])
    assert data.shape == (16, 1024 // GGML_QUANT_SIZES[GGMLQuantizationType(TYPES[name])][0] * kernels.KERNELS[TYPES[name]][1])
    back = quants.dequantize(data, GGMLQuantizationType(TYPES[name]))
    rel_rmse = float(np.sqrt(np.mean((back - x) ** 2) / np.mean(x**2)))
    bound = {"q8_0": 0.01, "q6_K": 0.02, "q5_K": 0.04, "q5_1": 0.04, "q5_0": 0.05, "q4_K": 0.08, "q4_1": 0.09,
             "q4_0": 0.11, "q3_K": 0.2, "q2_K": 0.4}[name]
    assert 0 < rel_rmse < bound
    assert np.array_equal(kernels.dequantize(data, TYPES[name], x.shape), back)


def test_error_decreases_with_bits():
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((8, 2048)) * 0.05).astype(np.float32)
    errors = []
    for name in ("q2_K", "q3_K", "q4_K", "q5_K", "q6_K", "q8_0"):
        back = kernels.dequantize(kernels.quantize(x, TYPES[name]), TYPES[name], x.shape)
        errors.append(float(np.mean((back - x) ** 2)))
    assert errors == sorted(errors, reverse=True)


@pytest.mark.parametrize("name", ["q8_0", "q4_K", "q6_K"])
def test_threads_and_chunking_do_not_change_bytes(name):
    rng = np.random.default_rng(11)
    # an odd number of blocks that does not divide into the per-step chunk
    x = (rng.standard_normal((3, 256 * 37)) * 0.1).astype(np.float32)
    single = kernels.quantize(x, TYPES[name], threads=1)
    assert np.array_equal(kernels.quantize(x, TYPES[name], threads=2), single)
    rows = np.concatenate([kernels.quantize(row, TYPES[name], threads=1)[None] for row in x])
    assert np.array_equal(rows, single)


def test_outer_axis_reduction_is_sequential():
    """The K-quant kernels rely on numpy summing an outer axis row after row, as ggml's loops do."""
    rng = np.random.default_rng(0)
    for columns in (1, 2, 7, 4096):
        a = (rng.standard_normal((32, columns)) * np.exp(rng.standard_normal((32, columns)) * 4)).astype(np.float32)
        total = a[0].copy()
        for row in a[1:]:
            total = total + row
        assert np.array_equal(kernels._sum(a), total)


def test_f16_and_bf16_match_gguf():
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((4, 96)) * 3).astype(np.float32)
    assert kernels.quantize(x, 1).tobytes() == x.astype(np.float16).tobytes()
    assert kernels.quantize(x, 30).tobytes() == quants.quantize(x, GGMLQuantizationType.BF16).tobytes()


def test_rows_that_do_not_divide_are_refused():
    with pytest.raises(ValueError, match="does not divide"):
        kernels.quantize(np.zeros((2, 48), dtype=np.float32), TYPES["q4_K"])


def test_can_dequantize():
    assert kernels.can_dequantize(0) and kernels.can_dequantize(30) and kernels.can_dequantize(39)  # f32, bf16, mxfp4
    assert kernels.can_dequantize(16)  # iq2_xxs
    assert not kernels.can_dequantize(15)  # q8_K: gguf has no dequantizer
    assert not kernels.can_dequantize(26)  # i32


# sha256 of the bytes ggml's quantize_row_*_ref wrote for hashed_inputs() (2048 super-blocks of 256
# values: wide range of block scales, integer, sparse and one-signed blocks)
HASHED_DIGESTS = {
    "q8_0": "797cae1a3da9da5e6eb6c61d3164751921a6f510f1964d65a12ef69d06742177",
    "q4_0": "a1cc720549a4ab3144c331221da7de61e1b80e56722c46963adefcd6d703dd47",
    "q4_1": "d8f11dc79390f82bda05b6d509c5625cef342a50eddf251495a72ff0b86ecfd5",
    "q5_0": "b07af822e91f1223248643e7de7fd493bff03217e0838b23e0ad1b6c0ce7c8c8",
    "q5_1": "9d8a1c88f4a49d1a118d0d03121a2cc131fc98694e06a30bb284fc815e9637ef",
    "q6_K": "ed24445e98885df32807ed0a1ce4edbd9c1a3e0cecb4161d609935a5bbaedff8",
    "q5_K": "4bd4f277857ffced1907672f6a4c4ece25870f45fcf5500715ab7614ab6b642a",
    "q4_K": "ab47edb9d92b3325e1e9f3446f1681d1bc26598755bc6d030f6d6a13fb1e6f79",
    "q3_K": "dacf9891f35cb478ecfed370b950e9efde1b62e42dcdba9433a8d790def8a556",
    "q2_K": "7ceaa006a8c50f1a1e823f9bea06a10241384a167245f1f4e48bd2b008be4886",
}


def hashed_inputs(n_blocks=2048, block=256):
    """Deterministic float32 test rows from integer hashing only (no RNG, no libm)."""
    i = np.arange(n_blocks * block, dtype=np.uint64)
    h = (i * np.uint64(2654435761) + np.uint64(12345)) % np.uint64(1 << 32)
    h ^= h >> np.uint64(13)
    h = (h * np.uint64(2246822519)) % np.uint64(1 << 32)
    h ^= h >> np.uint64(16)
    mantissa = (h & np.uint64(0xFFFFFF)).astype(np.int64) - (1 << 23)      # [-2^23, 2^23)
    b = np.arange(n_blocks, dtype=np.int64)
    exponent = (b * 7919) % 31 - 20 - 23                                     # block scale 2^-43 .. 2^-13 per unit
    values = np.ldexp(mantissa.reshape(n_blocks, block).astype(np.float64), exponent[:, None])
    kind = b % 5
    values[kind == 1] = np.round(values[kind == 1] / np.abs(values[kind == 1]).max(axis=1, keepdims=True) * 8)   # integers
    values[kind == 2] = np.where((h.reshape(n_blocks, block)[kind == 2] >> np.uint64(24)) < 16, values[kind == 2], 0.0)  # sparse
    values[kind == 3] = np.abs(values[kind == 3])                           # one-signed
    return values.astype(np.float32)


@pytest.mark.parametrize("name", list(TYPES))
def test_many_blocks_equal_ggml_reference(name):
    import hashlib

    assert hashlib.sha256(kernels.quantize(hashed_inputs(), TYPES[name]).tobytes()).hexdigest() == HASHED_DIGESTS[name]
