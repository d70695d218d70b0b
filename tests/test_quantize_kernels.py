"""The quantizers (compiled and numpy engines) against ggml's bytes, gguf's quantizers and dequantizers.

tests/data/quantize_golden_*.npz hold the bytes ggml's `quantize_row_*_ref` (ggml-quants.c of the
llama.cpp vendored in llama-cpp-python 0.3.36, built without FMA contraction as ggml-base is)
produced for the fixed inputs in quantize_golden_input.npz: normal, wide-range, one-signed, integer,
signed-zero, constant, zero, tiny, huge (float16 scale overflow), outlier and heavy-tailed rows;
HASHED_DIGESTS below hold the digests of its bytes for 2048 more super-blocks made without an RNG.
quantize_golden_imatrix.npz holds what ggml_quantize_chunk (libggml-base of llama.cpp 0c1e57098)
wrote for the same rows with the importance matrix stored beside them (`*_imatrix`), and for IQ4_NL
and IQ4_XS without one; IMATRIX_DIGESTS the same for the hashed rows with `hashed_imatrix()`.
"""

from pathlib import Path

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, quants

from moetools.quantize import kernels

DATA = Path(__file__).parent / "data"
TYPES = {"q8_0": 8, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q6_K": 14, "q5_K": 13, "q4_K": 12, "q3_K": 11, "q2_K": 10}
GGUF_QUANTIZABLE = ("q8_0", "q4_0", "q4_1", "q5_0", "q5_1")


@pytest.fixture(params=["numba", "numpy"])
def engine(request, monkeypatch):
    """Runs a test with each kernel engine: the numba-compiled kernels and the numpy ones."""
    if request.param == "numpy":
        monkeypatch.setitem(kernels._compiled, "module", None)
    elif kernels.compiled_kernels() is None:
        pytest.skip(f"numba is not importable here (or ${kernels.NO_JIT_ENV} is set): only the numpy engine runs")
    assert kernels.engine() == request.param
    return request.param


@pytest.fixture
def compiled(monkeypatch):
    """The compiled engine, or a skip."""
    if kernels.compiled_kernels() is None:
        pytest.skip(f"numba is not importable here (or ${kernels.NO_JIT_ENV} is set)")
    return kernels.compiled_kernels()


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
def test_bytes_equal_ggml_reference(name, golden_input, engine):
    x, names = golden_input
    golden = np.load(DATA / f"quantize_golden_{name}.npz")["out"]
    for row, case, expected in zip(x, names, golden):
        got = kernels.quantize(row, TYPES[name]).ravel()
        assert got.tobytes() == expected.tobytes(), f"{name} differs from ggml on the {case!r} row"
    # all rows at once (one call, several chunks and threads) gives the same bytes
    assert kernels.quantize(x, TYPES[name], threads=2).tobytes() == golden.tobytes()


@pytest.mark.parametrize("name", GGUF_QUANTIZABLE)
def test_bytes_equal_gguf_quantize(name, engine):
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
def test_threads_and_chunking_do_not_change_bytes(name, engine):
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
        # a transposed view (as the imatrix variants' sub-block scales are) is summed in the same order
        assert np.array_equal(kernels._sum(np.asfortranarray(a)), total)


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
def test_many_blocks_equal_ggml_reference(name, engine):
    import hashlib

    assert hashlib.sha256(kernels.quantize(hashed_inputs(), TYPES[name]).tobytes()).hexdigest() == HASHED_DIGESTS[name]


# --- importance matrix and IQ4 (both engines) --------------------------------------------------------

IMATRIX_TYPES = {"q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q6_K": 14, "q5_K": 13, "q4_K": 12, "q3_K": 11, "q2_K": 10,
                 "iq4_nl": 20, "iq4_xs": 23}
# sha256 of ggml_quantize_chunk's bytes for hashed_inputs() as 512 rows of 1024, with hashed_imatrix()
IMATRIX_DIGESTS = {
    "q4_0_imatrix": "cccfdb9007d91bca4200071d4b056f9bd15d1de64852f26b5ec428cd8d989e50",
    "q4_1_imatrix": "524c382f145b15abd7119a880bf1e0278d882fa026fe9e04cc47b3a7a7b4b26b",
    "q5_0_imatrix": "a703c4a17f071f5e2f62a5bc5ac7052d429c6ecc354e809a96581358c9483829",
    "q5_1_imatrix": "fb429db5936a5c8ebef0a0aa95b772d1f6b54c89ab7971f07aaee048c03ebae6",
    "q6_K_imatrix": "75640d21386541fc1764a42fc91575532f4dc2627332afe96751854e1936cfa1",
    "q5_K_imatrix": "eba1c458a2f7af383e76354e2fddbae1986e0f6bc7569401b8900258d02e63a4",
    "q4_K_imatrix": "a05b713b540ec11cf9307a52e9c9ab104d43af8bdaf10455359101ba2c7bbe0c",
    "q3_K_imatrix": "b40dfd29ba31a1fc6046f6d4a8055d48ef69c3bb1ed19b50c554654f7dc6aa3d",
    "q2_K_imatrix": "a4f9cc9cffb89c356ddd02bfdb3c81e287e9f5bb6c30a7481818d67446782b15",
    "iq4_nl_imatrix": "9110bad2667fc94987ee03a62b1aab980c6ebb817aacbab6de90d3325bf8a7bb",
    "iq4_nl": "ed4fa7372bfde8fbd214e2d4f2de0ecf5577f1f428a40d9a6a8ffb67805fb434",
    "iq4_xs_imatrix": "d8e6d8c6427e43ebfe1df34caa7471555ab8b076f31c9dbdf55ce93a4aba4a49",
    "iq4_xs": "8124667efd51d9b2db421c49695277ad0655197293d8c5aad2d7b241e651a2de",
}


def hashed_imatrix(n=1024):
    j = np.arange(n, dtype=np.float64)
    return (np.exp(np.cos(j * 0.113) * 5.0) * 0.01).astype(np.float32)


@pytest.mark.parametrize("name", list(IMATRIX_TYPES))
def test_imatrix_and_iq4_bytes_equal_ggml(name, golden_input, engine):
    x, names = golden_input
    golden = np.load(DATA / "quantize_golden_imatrix.npz")
    keys = [f"{name}_imatrix"] + ([name] if name.startswith("iq4") else [])
    for key in keys:
        imatrix = golden["imatrix"] if key.endswith("_imatrix") else None
        got = kernels.quantize(x, IMATRIX_TYPES[name], threads=2, imatrix=imatrix)
        for row, case, expected, mine in zip(x, names, golden[key], got):
            assert mine.tobytes() == expected.tobytes(), f"{key} differs from ggml on the {case!r} row"


@pytest.mark.parametrize("key", list(IMATRIX_DIGESTS))
def test_imatrix_and_iq4_many_blocks_equal_ggml(key, engine):
    import hashlib

    name = key.removesuffix("_imatrix")
    imatrix = hashed_imatrix() if key.endswith("_imatrix") else None
    data = kernels.quantize(hashed_inputs().reshape(512, 1024), IMATRIX_TYPES[name], imatrix=imatrix)
    assert hashlib.sha256(data.tobytes()).hexdigest() == IMATRIX_DIGESTS[key]


def test_imatrix_changes_the_bytes_and_lowers_the_weighted_error(engine):
    rng = np.random.default_rng(9)
    x = (rng.standard_normal((32, 512)) * 0.05).astype(np.float32)
    weights = np.ones(512, dtype=np.float32)
    weights[:64] = 1000  # the first columns matter most
    for name in ("q4_K", "q3_K", "iq4_xs"):
        plain = kernels.quantize(x, IMATRIX_TYPES[name])
        weighted = kernels.quantize(x, IMATRIX_TYPES[name], imatrix=weights)
        assert plain.tobytes() != weighted.tobytes()
        error = [float(np.sum(weights * (kernels.dequantize(d, IMATRIX_TYPES[name], x.shape) - x) ** 2)) for d in (plain, weighted)]
        assert error[1] < error[0], name


def test_q8_0_ignores_the_imatrix_as_ggml_does(engine):
    x = np.linspace(-1, 1, 256, dtype=np.float32).reshape(2, 128)
    assert kernels.quantize(x, 8, imatrix=np.arange(128, dtype=np.float32)).tobytes() == kernels.quantize(x, 8).tobytes()


def test_imatrix_of_the_wrong_length_is_refused(engine):
    with pytest.raises(ValueError, match="imatrix of 64 values for rows of 128"):
        kernels.quantize(np.zeros((2, 128), dtype=np.float32), 2, imatrix=np.ones(64, dtype=np.float32))


@pytest.mark.parametrize("name", list(IMATRIX_TYPES) + ["q8_0"])
def test_numpy_engine_equals_the_compiled_one(name, compiled, monkeypatch):
    """The numpy kernels are the tested fallback for every type, with and without an imatrix: the
    same bytes as the compiled kernels on rows of a wide dynamic range, zero and constant blocks,
    with a spread-out imatrix (zeros included) and several threads."""
    rng = np.random.default_rng(21)
    x = (rng.standard_normal((6, 1536)) * np.exp(rng.standard_normal((6, 1)) * 3)).astype(np.float32)
    x[1, 256:512] = 0
    x[2, :32] = 0.25
    x[3, 512:768] = np.abs(x[3, 512:768])
    weights = (np.exp(rng.standard_normal(1536) * 2) * (rng.random(1536) > 0.05)).astype(np.float32)
    type_id = kernels.GGML_TYPE_IDS[name]
    expected = [kernels.quantize(x, type_id, threads=2, imatrix=imatrix) for imatrix in (None, weights)]
    monkeypatch.setitem(kernels._compiled, "module", None)
    for imatrix, want in zip((None, weights), expected):
        assert kernels.quantize(x, type_id, threads=2, imatrix=imatrix).tobytes() == want.tobytes(), imatrix is not None


@pytest.mark.parametrize("name", list(IMATRIX_TYPES) + ["q8_0"])
def test_numpy_engine_equals_the_compiled_one_where_squares_overflow(name, compiled, monkeypatch):
    """Weights near float32's range make x*x overflow to inf and a group's scale NaN. ggml's
    `amax < fabsf(v)` / `v > max` loops never pick a NaN, np.argmax/np.max would: both engines must
    still write ggml's bytes (the numpy Q3_K kernel wrote a zero block scale here before)."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((5, 512)).astype(np.float32)
    x[0, 5] = 1e30
    x[1, :16] = 3e18
    x[2, :256] *= np.float32(1e20)
    x[3, 300] = -1e19
    x[4, 100:140] = 2e19
    weights = np.exp(rng.standard_normal(512)).astype(np.float32)
    type_id = kernels.GGML_TYPE_IDS[name]
    with np.errstate(all="ignore"):
        expected = [kernels.quantize(x, type_id, threads=1, imatrix=imatrix) for imatrix in (None, weights)]
        monkeypatch.setitem(kernels._compiled, "module", None)
        for imatrix, want in zip((None, weights), expected):
            got = kernels.quantize(x, type_id, threads=1, imatrix=imatrix)
            assert got.tobytes() == want.tobytes(), imatrix is not None


@pytest.mark.parametrize("value", ["1", "0", ""])
def test_no_jit_switch_and_no_silent_fallback(monkeypatch, value):
    # numba is a declared dependency: when it imports and the switch is off, it must serve
    import importlib.util

    monkeypatch.setenv(kernels.NO_JIT_ENV, value)
    monkeypatch.setattr(kernels, "_compiled", {})
    numba_installed = importlib.util.find_spec("numba") is not None
    assert kernels.engine() == ("numba" if numba_installed and value != "1" else "numpy")


@pytest.mark.parametrize("name", ["q4_K", "iq4_nl", "iq4_xs", "q4_0"])
def test_threads_do_not_change_bytes_with_an_imatrix(name, engine):
    rng = np.random.default_rng(12)
    x = (rng.standard_normal((7, 768)) * 0.1).astype(np.float32)
    weights = np.abs(rng.standard_normal(768)).astype(np.float32)
    for imatrix in (None, weights):
        one = kernels.quantize(x, IMATRIX_TYPES[name], threads=1, imatrix=imatrix)
        assert np.array_equal(kernels.quantize(x, IMATRIX_TYPES[name], threads=3, imatrix=imatrix), one)


DEQUANTIZED = ["q2_K", "q3_K", "q4_K", "q5_K", "q6_K", "iq4_xs", "iq4_nl", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1"]


@pytest.mark.parametrize("name", DEQUANTIZED)
def test_compiled_dequantizers_give_gguf_floats(name, golden_input, compiled):
    """The compiled dequantizers (a tier's error measurement) give gguf's floats bit for bit, for
    quantizer output and for random bytes (every bit pattern of the levels and scale bytes)."""
    x, _ = golden_input
    type_id = kernels.GGML_TYPE_IDS[name]
    block, block_bytes = GGML_QUANT_SIZES[GGMLQuantizationType(type_id)]
    rows = x.reshape(-1, 256)
    quantized = kernels.quantize(rows, type_id).reshape(rows.shape[0], -1)
    noise = np.random.default_rng(7).integers(0, 256, size=(64, 256 // block * block_bytes), dtype=np.uint8)
    blocks = noise.reshape(-1, block_bytes)
    half_at = {"q2_K": (80, 82), "q3_K": (108,), "q4_K": (0, 2), "q5_K": (0, 2), "q6_K": (208,), "iq4_xs": (0,),
               "iq4_nl": (0,), "q8_0": (0,), "q4_0": (0,), "q4_1": (0, 2), "q5_0": (0,), "q5_1": (0, 2)}[name]
    for offset in half_at:  # finite float16 scales (random ones may be NaN, which compare unequal)
        blocks[:, offset] = np.random.default_rng(offset).integers(0, 256, size=blocks.shape[0], dtype=np.uint8)
        blocks[:, offset + 1] = np.random.default_rng(offset + 1).integers(0, 0x7B, size=blocks.shape[0], dtype=np.uint8)
    for data in (quantized, noise):
        if block < 256:
            data = np.ascontiguousarray(data).reshape(-1, 256 // block * block_bytes)
        ours = compiled.dequantize_rows(name, data, data.shape[0], 256)
        theirs = quants.dequantize(data, GGMLQuantizationType(type_id)).reshape(data.shape[0], 256)
        assert ours.view(np.uint32).tolist() == theirs.view(np.uint32).tolist()
        assert np.array_equal(kernels.dequantize(data, type_id, (data.shape[0], 256)).view(np.uint32), ours.view(np.uint32))


@pytest.mark.parametrize("name", ["q2_K", "q3_K", "q4_K", "q5_K", "q6_K", "iq4_nl", "iq4_xs"])
@pytest.mark.parametrize("weighted", [False, True])
def test_block_bytes_do_not_depend_on_the_row_width(name, weighted, engine):
    """The compiled K-quant and IQ4 kernels search the groups of several blocks together (one SIMD
    lane each) and pad a row's last batch with empty groups, the numpy ones take an imatrix row by
    row: a block's bytes must not depend on its neighbours, so rows of one super-block and rows of
    eleven (a short last batch for every batch size) give the same bytes, with and without an
    importance matrix."""
    x = hashed_inputs(88)
    imatrix = hashed_imatrix(256) if weighted else None
    narrow = kernels.quantize(x, IMATRIX_TYPES[name], threads=1, imatrix=imatrix)
    wide = kernels.quantize(x.reshape(8, 11 * 256), IMATRIX_TYPES[name], threads=1,
                            imatrix=None if imatrix is None else np.tile(imatrix, 11))
    assert narrow.tobytes() == wide.tobytes()


@pytest.mark.parametrize("name", DEQUANTIZED)
def test_compiled_error_figures_equal_dequantizing(name, golden_input, compiled):
    """A tier's error figures from the compiled pass (no dequantized copy, squares added in float64)
    are what dequantizing and subtracting gives: the largest error exactly, the sum of squares to
    float64 rounding of the exact float32 errors' squares (numpy's float32 row sums differ from it
    only by their own rounding)."""
    rng = np.random.default_rng(8)
    x = (rng.standard_normal((6, 512)) * 0.05).astype(np.float32)
    x[2, :40] *= 30  # a few large values: blocks of very different scales
    type_id = kernels.GGML_TYPE_IDS[name]
    data = kernels.quantize(x, type_id)
    error = kernels.dequantize(data, type_id, x.shape) - x
    sse, peak = kernels.error_figures(data, type_id, x)
    assert peak == float(np.abs(error).max())
    assert sse == pytest.approx(float(np.sum(error.astype(np.float64) ** 2)), rel=1e-12)
    numpy_sse, numpy_peak = kernels.squares_and_peak(error)
    assert numpy_peak == peak and numpy_sse == pytest.approx(sse, rel=1e-6)


def test_figures_see_nan_and_infinity(compiled):
    """The compiled figures propagate a NaN (above everything, as numpy's max) and an infinity."""
    x = (np.random.default_rng(9).standard_normal((3, 256)) * 0.05).astype(np.float32)
    data = kernels.quantize(x, kernels.GGML_TYPE_IDS["q8_0"])
    assert kernels.source_figures(x) == pytest.approx((float(np.sum(x.astype(np.float64) ** 2)), float(np.abs(x).max())))
    for bad in (np.inf, -np.inf, np.nan):
        broken = x.copy()
        broken[1, 77] = bad
        for figures in (kernels.source_figures(broken), kernels.error_figures(data, kernels.GGML_TYPE_IDS["q8_0"], broken)):
            if np.isnan(bad):
                assert all(np.isnan(value) for value in figures)
            else:
                assert figures == (np.inf, np.inf)
    assert kernels.source_figures(np.zeros((0, 4), np.float32)) == (0.0, 0.0)
