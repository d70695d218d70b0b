"""The numpy quantizers against ggml's reference bytes, gguf's quantizers and dequantizers.

tests/data/quantize_golden_*.npz hold the bytes ggml's `quantize_row_*_ref` (ggml-quants.c of the
llama.cpp vendored in llama-cpp-python 0.3.36, built without FMA contraction as ggml-base is)
produced for the fixed inputs in quantize_golden_input.npz: normal, wide-range, one-signed, integer,
signed-zero, constant, zero, tiny, huge (float16 scale overflow), outlier and heavy-tailed rows.
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
