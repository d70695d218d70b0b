"""KV and recurrent-state sizing against figures worked out by hand from llama.cpp's rules
(src/llama-context.cpp, llama-kv-cache*.cpp, llama-memory-recurrent.cpp, llama-hparams.cpp)."""

import pytest

from moetools import synth
from moetools.devicefit import kv
from moetools.devicefit.kv import KVSettings
from moetools.errors import GGUFError, UsageError
from moetools.gguf import open_model
from tests import factory

F16 = KVSettings()


def shape_of(path):
    with open_model(path) as model:
        return kv.kv_shape(model)


def by_kind(caches):
    return {cache.kind: cache for cache in caches}


# --- the published per-token figures ------------------------------------------------------------

def test_llama3_8b_f16_is_131072_bytes_per_token(preset_model):
    shape = shape_of(preset_model("llama3-8b"))
    assert kv.bytes_per_token(shape, F16) == 131072  # 32 layers x 8 heads x 128 x (2 + 2)
    caches = kv.kv_caches(shape, 8192, F16)
    assert [c.kind for c in caches] == ["full"]
    assert caches[0].cells == 8192 and caches[0].layers == 32
    assert caches[0].k_bytes == caches[0].v_bytes == 8192 * 32 * 8 * 128 * 2
    assert kv.kv_bytes(shape, 8192, F16) == 8192 * 131072 == 1024**3


@pytest.mark.parametrize("preset", ["kimi-k2", "deepseek-v3"])
def test_mla_61_layers_512_plus_64_is_70272_bytes_per_token(preset_model, preset):
    shape = shape_of(preset_model(preset))
    assert shape.mla
    assert kv.bytes_per_token(shape, F16) == 70272  # 61 x (512 + 64) x 2, K only
    full = by_kind(kv.kv_caches(shape, 4096, F16))["full"]
    assert full.v_bytes == 0 and full.k_bytes == 4096 * 70272


def test_qwen3_235b_is_192512_bytes_per_token(preset_model):
    shape = shape_of(preset_model("qwen3-235b"))
    assert kv.bytes_per_token(shape, F16) == 192512  # 94 x 4 x 128 x (2 + 2)
    assert kv.kv_bytes(shape, 40960, F16) == 40960 * 192512


def test_gpt_oss_120b_full_and_sliding_window_layers(preset_model):
    shape = shape_of(preset_model("gpt-oss-120b"))
    assert sum(shape.is_swa) == 18 and shape.n_swa == 128
    assert shape.is_swa[:4] == [True, False, True, False]  # every 2nd layer full (set_swa_pattern(2))
    assert kv.bytes_per_token(shape, F16) == 36864  # 18 full x 8 x 64 x 2 x 2
    caches = by_kind(kv.kv_caches(shape, 131072, F16))
    assert caches["full"].cells == 131072 and caches["full"].layers == 18
    assert caches["full"].k_bytes + caches["full"].v_bytes == 131072 * 36864
    swa = caches["swa"]
    assert swa.cells == 768 and swa.layers == 18  # pad256(min(131072, 128 + 512))
    assert swa.k_bytes + swa.v_bytes == 18 * 768 * 8 * 64 * 2 * 2
    assert by_kind(kv.kv_caches(shape, 131072, KVSettings(swa_full=True)))["swa"].cells == 131072


def test_kimi_k3_preset_mla_and_kda_state(preset_model):
    shape = shape_of(preset_model("kimi-k3"))
    assert sum(shape.is_recurrent) == 70  # 93 blocks, MLA every 4th (1-indexed)
    assert kv.bytes_per_token(shape, F16) == 23 * 576 * 2
    caches = by_kind(kv.kv_caches(shape, 4096, F16))
    assert caches["full"].layers == 23 and caches["full"].k_bytes == 4096 * 23 * 576 * 2 and caches["full"].v_bytes == 0
    state = caches["recurrent"]
    # n_embd_r = 3 x (4 - 1) x 32 x 128, n_embd_s = 128 x 128 x 32 f32 values, one row per sequence
    assert state.layers == 70 and state.cells == 1
    assert state.r_bytes == 70 * 3 * 3 * 32 * 128 * 4
    assert state.s_bytes == 70 * 128 * 128 * 32 * 4
    two = by_kind(kv.kv_caches(shape, 4096, KVSettings(n_seq=2)))["recurrent"]
    assert two.total == 2 * state.total


# --- every tiny architecture -------------------------------------------------------------------

TINY_PER_TOKEN = {
    "mixtral": 4 * 2 * 64 * 4,  # 4 layers x 2 KV heads x 64 x (2 + 2)
    "qwen3moe": 4 * 2 * 64 * 4,
    "dense": 4 * 2 * 64 * 4,
    "deepseek2": 4 * (64 + 16) * 2,  # MLA: K only
    "gpt-oss": 2 * 2 * 64 * 4,  # the 2 full layers
    "kimi-k3": 2 * (64 + 16) * 2,  # 2 MLA layers of 8
}


@pytest.mark.parametrize("arch", factory.TINY_ARCHES)
def test_every_tiny_architecture(tiny_models, arch):
    shape = shape_of(tiny_models[arch])
    assert kv.bytes_per_token(shape, F16) == TINY_PER_TOKEN[arch]
    total = kv.kv_bytes(shape, 1000, F16)  # 1000 -> 1024 cells
    expected = 1024 * TINY_PER_TOKEN[arch]
    if arch == "gpt-oss":
        expected += 2 * 768 * 2 * 64 * 4  # 2 SWA layers: pad256(min(1024, 128 + 512)) cells
    if arch == "kimi-k3":
        expected += 6 * (3 * 3 * 4 * 64 + 64 * 64 * 4) * 4  # 6 KDA layers' f32 state, one sequence
    assert total == expected


def test_q8_0_cache_costs_34_bytes_per_32_values(tiny_models, preset_model):
    shape = shape_of(preset_model("llama3-8b"))
    settings = KVSettings(ctk="q8_0", ctv="q8_0")
    kv.check_settings(shape, settings)
    assert kv.bytes_per_token(shape, settings) == 32 * 2 * (1024 // 32 * 34)
    mixed = KVSettings(ctk="q8_0", ctv="f16")
    assert kv.bytes_per_token(shape, mixed) == 32 * (1024 // 32 * 34 + 1024 * 2)
    assert kv.bytes_per_token(shape, KVSettings(ctk="q4_0", ctv="q4_0")) == 32 * 2 * (1024 // 32 * 18)


def test_block_that_does_not_divide_a_head_width_is_refused(tiny_models):
    shape = shape_of(tiny_models["deepseek2"])  # K width 80: not a multiple of 32
    with pytest.raises(UsageError, match="does not divide the key head width 80 of layer 0"):
        kv.check_settings(shape, KVSettings(ctk="q8_0", ctv="q8_0"))
    with pytest.raises(UsageError, match="same K and V cache type"):
        kv.check_settings(shape, KVSettings(ctk="f16", ctv="bf16"))
    kv.check_settings(shape, KVSettings(ctk="bf16", ctv="bf16"))


def test_quantized_v_needs_flash_attention_and_no_fa_pads_v(tiny_models):
    shape = shape_of(tiny_models["qwen3moe"])
    with pytest.raises(UsageError, match="flash attention"):
        kv.check_settings(shape, KVSettings(ctv="q8_0", flash_attn=False))
    assert kv.kv_bytes(shape, 256, KVSettings(flash_attn=False)) == kv.kv_bytes(shape, 256, F16)


def test_parallel_streams_and_unified_cache(preset_model):
    shape = shape_of(preset_model("llama3-8b"))
    split = kv.kv_caches(shape, 8192, KVSettings(n_seq=3))[0]
    assert (split.cells, split.streams) == (2816, 3)  # pad256(8192 / 3) cells per sequence
    unified = kv.kv_caches(shape, 8192, KVSettings(n_seq=3, unified=True))[0]
    assert (unified.cells, unified.streams) == (8192, 1)
    oss = shape_of(preset_model("gpt-oss-120b"))
    assert by_kind(kv.kv_caches(oss, 8192, KVSettings(n_seq=2, unified=True)))["swa"].cells == 768  # 128 x 2 + 512
    per_seq = by_kind(kv.kv_caches(oss, 8192, KVSettings(n_seq=2)))["swa"]
    assert (per_seq.cells, per_seq.streams) == (768, 2)
    small_batch = by_kind(kv.kv_caches(oss, 8192, KVSettings(ubatch=64)))["swa"]
    assert small_batch.cells == 256  # pad256(128 + 64)


def test_context_of_zero_is_refused(tiny_models):
    with pytest.raises(UsageError):
        kv.kv_caches(shape_of(tiny_models["mixtral"]), 0, F16)


def test_sliding_window_pattern_key_overrides_the_builtin(tmp_path):
    spec = synth.tiny("gpt-oss", n_layer=6)
    spec.meta("{arch}.attention.sliding_window_pattern", 3)
    path = synth.write_model(spec, tmp_path / "p.gguf", sparse=True)[0]
    assert shape_of(path).is_swa == [True, True, False, True, True, False]
    spec = synth.tiny("gpt-oss", n_layer=4)
    spec.meta("{arch}.attention.sliding_window_pattern", [True, True, True, False], "u32[]")
    path = synth.write_model(spec, tmp_path / "a.gguf", sparse=True)[0]
    assert shape_of(path).is_swa == [True, True, True, False]


def test_gemma3_every_sixth_layer_full(tmp_path):
    spec = synth.tiny("mixtral", n_expert=0, n_layer=12)
    spec.architecture = "gemma3"
    spec.metadata = [(key.replace("llama.", "gemma3."), value, kind) for key, value, kind in spec.metadata]
    spec.meta("{arch}.attention.sliding_window", 1024)
    path = synth.write_model(spec, tmp_path / "g.gguf", sparse=True)[0]
    shape = shape_of(path)
    assert [il for il in range(12) if not shape.is_swa[il]] == [5, 11]
    caches = by_kind(kv.kv_caches(shape, 8192, F16))
    assert caches["full"].layers == 2 and caches["swa"].layers == 10 and caches["swa"].cells == 1536


def _without(arch, key, tmp_path, **params):
    spec = synth.tiny(arch, **params)
    full_key = key.format(arch=spec.architecture)
    spec.metadata = [entry for entry in spec.metadata if entry[0] != full_key]
    return synth.write_model(spec, tmp_path / f"{arch}.gguf", sparse=True)[0]


@pytest.mark.parametrize("arch,key", [
    ("mixtral", "{arch}.context_length"),
    ("mixtral", "{arch}.attention.head_count"),
    ("mixtral", "{arch}.embedding_length"),
    ("deepseek2", "{arch}.attention.kv_lora_rank"),
    ("deepseek2", "{arch}.attention.key_length"),
    ("kimi-k3", "{arch}.ssm.conv_kernel"),
    ("kimi-k3", "{arch}.kda.head_dim"),
    ("gpt-oss", "{arch}.attention.sliding_window"),
])
def test_missing_keys_are_named(tmp_path, arch, key):
    path = _without(arch, key, tmp_path)
    with pytest.raises(GGUFError) as err:
        shape_of(path)
    assert key.format(arch=synth.tiny(arch).architecture) in str(err.value)


def test_real_converter_models(shared_models):
    expected = {
        "tiny-qwen3moe-Q8_0.gguf": (2048, {}),
        "tiny-mixtral-Q8_0.gguf": (2048, {}),
        "tiny-deepseekv3-Q8_0.gguf": (4 * 80 * 2, {}),  # MLA, key_length 80 = 64 + 16
        "tiny-gptoss-Q8_0.gguf": (1024, {"swa": 768}),
    }
    seen = 0
    for path in shared_models:
        if path.name not in expected:
            continue
        seen += 1
        per_token, swa_cells = expected[path.name]
        shape = shape_of(path)
        assert kv.bytes_per_token(shape, F16) == per_token, path.name
        caches = by_kind(kv.kv_caches(shape, 2048, F16))
        assert caches["full"].cells == 2048
        for kind, cells in swa_cells.items():
            assert caches[kind].cells == cells
    assert seen == 4


def test_nextn_layers(tmp_path):
    """llama.cpp's plain KV cache filters NextN/MTP blocks out of the main context; the hybrid memory's
    attention filter (not recurrent) keeps them."""
    spec = synth.tiny("deepseek2")
    spec.meta("{arch}.nextn_predict_layers", 1)
    shape = shape_of(synth.write_model(spec, tmp_path / "d.gguf", sparse=True)[0])
    assert kv.bytes_per_token(shape, F16) == 3 * 80 * 2
    spec = synth.tiny("kimi-k3")
    spec.meta("{arch}.nextn_predict_layers", 1)
    shape = shape_of(synth.write_model(spec, tmp_path / "k.gguf", sparse=True)[0])
    caches = by_kind(kv.kv_caches(shape, 256, F16))
    assert caches["full"].layers == 2 and caches["recurrent"].layers == 6
