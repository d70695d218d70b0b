"""moetools.arch: the registry equals every architecture table it replaces, and every architecture with
facts of its own has a synth builder and a measured case.

The first half pins the registry against the legacy tuples, sets and dicts as they stood at main a9f6c85:
the memory tables in tests/arch_memory_tables.py (devicefit/memory/archsets.py, removed), the others
(draft.py, layers.py, quantize/rules.py, devicefit/graph/archsets.py) below. Each test names the field or query that replaces the table.
"""

import glob
import importlib
import json
import os
import subprocess
import sys

import pytest

from moetools.arch import registry
from moetools.arch.profile import MTP_FFN_KEPT, MTP_LEVELS, ArchProfile
import types

from tests import arch_memory_tables as kv
from moetools.devicefit.graph import mtp
from moetools.devicefit.graph.models import cohere2moe, deepseek4, gemma3n, gemma4_assistant, mimo2, qwen4exp

# the graph code's legacy tables as they stood at a9f6c85 (frozen here: devicefit/graph/archsets.py now
# derives them from the registry), and its builders where the move into devicefit/graph put them
GRAPH_TABLES = {
    '_SIGMOID_DEFAULT': ('deepseek2', 'kimi-k3', 'kimi-linear', 'glm4moe', 'minimax-m2', 'dots1', 'deepseek32', 'glm-dsa'),
    '_SOFTMAX_WEIGHT': ('gpt-oss',),
    '_NORM_W_DEFAULT': ('qwen3moe', 'qwen3next', 'qwen35moe', 'minimax-m2', 'glm4moe'),
    '_NORM_W_NEVER': ('gpt-oss', 'jamba'),
    '_NORM_W_ALWAYS': ('lfm2moe', 'ernie4_5-moe', 'kimi-linear', 'minimax-01', 'qwen4exp'),
    'NO_ROPE_ARCHES': ('nemotron_h', 'nemotron_h_moe', 'jamba', 'kimi-k3', 'kimi-linear'),
    'PARALLEL_SSM_ARCHES': ('falcon-h1',),
    'RESIDUAL_FIRST_ARCHES': ('jamba', 'lfm2', 'lfm2moe', 'kimi-k3'),
    'RELU_SQR_ARCHES': ('nemotron_h', 'nemotron_h_moe'),
    'NEXTN_RAW_STATE': ('gpt-oss', 'step35'),
    'NORM_FIRST_ARCHES': ('qwen3next', 'qwen35', 'qwen35moe', 'kimi-linear'),
    'NORMED_RESIDUAL_ARCHES': ('minimax-01',),
    'EVERY_ROW_ARCHES': ('dflash',),
    'POST_NORM_ARCHES': ('exaone4',),
    'GATED_Q_ARCHES': ('qwen3next', 'qwen35', 'qwen35moe', 'qwen4exp'),
    'MROPE_ARCHES': ('qwen2vl', 'paddleocr', 'qwen3vl', 'qwen3vlmoe', 'qwen35', 'qwen35moe', 'qwen4exp', 'qwen3tts'),
    'MROPE_IF_SECTIONS': ('glm4', 'glm4moe', 'bailingmoe3', 'hunyuan_vl'),
    'NEXTN_TAIL': ('bailingmoe3', 'cohere2moe', 'gemma4', 'hy_v3', 'nemotron_h', 'nemotron_h_moe', 'gpt-oss', 'qwen35', 'qwen35moe', 'qwen3next', 'step35'),
    'ATTN_RES_ARCHES': ('kimi-k3',),
    'MTP_GRAPH_ARCHES': ('bailingmoe3', 'cohere2moe', 'deepseek2', 'deepseek32', 'deepseek4', 'glm-dsa', 'glm4moe', 'hy_v3', 'mimo2', 'nemotron_h_moe', 'qwen35', 'qwen35moe', 'qwen3next', 'step35'),
    'LLAMA_MTP_ARCHES': ('bailingmoe3', 'cohere2moe', 'deepseek2', 'deepseek32', 'deepseek4', 'glm-dsa', 'glm4moe', 'glm5-next', 'hy_v3', 'mimo2', 'nemotron_h_moe', 'qwen35', 'qwen35moe', 'qwen3next', 'step35'),
    'MTP_ROWS_AFTER_ATTENTION': ('qwen3next',),
    'MTP_ROWS_BEFORE_HEAD_NORM': ('step35',),
    'MTP_ISWA_ARCHES': ('step35',),
    'MTP_HEAD_NORM_FALLBACK': {'cohere2moe': ('nextn.shared_head_norm',), 'mimo2': ('nextn.shared_head_norm', 'layer_output_norm'), 'qwen35': ('nextn.shared_head_norm',), 'qwen35moe': ('nextn.shared_head_norm',)},
    'PARALLEL_FFN_ARCHES': ('cohere2moe',),
}
# mtp.py's MTP_BUILDERS and graph/archsets.py's MTP_BLOCK_NEEDS as they stood (now the profiles' mtp_builder, and
# MTP_NEEDS in the module each names)
MTP_TABLES = {"MTP_BUILDERS": {"cohere2moe": cohere2moe._build_mtp_cohere2moe, "mimo2": mimo2._build_mtp_mimo2},
              "MTP_BLOCK_NEEDS": {"mimo2": mimo2.MTP_NEEDS, "cohere2moe": cohere2moe.MTP_NEEDS}}
compute = types.SimpleNamespace(**{**vars(mtp), **GRAPH_TABLES, **MTP_TABLES, "_build_mtp_dsv4": deepseek4._build_mtp_dsv4,
                                   "_build_dsv4": deepseek4._build_dsv4, "_build_gemma3n": gemma3n._build_gemma3n,
                                   "_build_assistant": gemma4_assistant._build_assistant,
                                   "_build_qwen4exp": qwen4exp._build_qwen4exp})

HERE = os.path.dirname(__file__)


def names(field, value=True):
    return set(registry.names_with(field, value))


def mapping(field):
    return {name: getattr(entry, field) for name, entry in registry.profiles().items()
            if getattr(entry, field) != getattr(ArchProfile("?"), field)}


# --- the legacy tables of draft.py, layers.py and quantize/rules.py at main a9f6c85 -----------------

_FFN_KEPT = (".ffn_gate.weight", ".ffn_down.weight", ".ffn_up.weight", ".ffn_gate_inp.weight", ".ffn_gate_exps.weight",
             ".ffn_up_exps.weight", ".ffn_down_exps.weight", ".ffn_gate_up_exps.weight", "_shexp.weight",
             ".nextn.embed_tokens.weight", ".nextn.shared_head_head.weight", ".nextn.shared_head_norm.weight")
LEGACY = {
    "layers.MTP_SKIP_ARCHES": ("bailingmoe3", "cohere2moe", "deepseek2", "deepseek32", "deepseek4", "glm-dsa",
                               "glm4moe", "glm5-next", "hy_v3", "mimo2", "nemotron_h", "nemotron_h_moe", "qwen35",
                               "qwen35moe", "qwen3next", "step35"),
    "layers.MTP_KEPT": {"deepseek32": (".exp_probs_b.bias",), "glm-dsa": (".exp_probs_b.bias",),
                        "hy_v3": _FFN_KEPT + (".exp_probs_b",),
                        "step35": _FFN_KEPT + (".exp_probs_b.bias", ".attn_q_norm.weight", ".attn_k_norm.weight",
                                               ".attn_gate.weight")},
    "draft.BLOCK_DRAFT_ARCHES": ("dflash",),
    "draft.LAYER_INPUT_ARCHES": ("bailingmoe3", "gemma4", "gpt-oss", "hunyuan_vl", "lfm2", "llama", "mimo2",
                                 "minimax-01", "minimax-m2", "muse-glimmer", "nanbeige", "nemotron_h", "qwen3",
                                 "qwen35", "qwen35moe", "qwen3moe", "qwen3next"),
    "draft.LAYER_INPUT_UNPLANNED": ("deepseek4",),
    "draft.LLAMA_MTP_FAILS": {"glm5-next": "GLM5-Next NextN graph not implemented yet"},
    "draft.MTP_SINGLE_BLOCK": {"glm-dsa": "GLM_DSA MTP currently only supports a single MTP block",
                               "deepseek4": "DEEPSEEK4 MTP currently only supports a single MTP block",
                               "qwen35": "QWEN35 MTP currently only supports a single MTP block",
                               "cohere2moe": "COHERE2MOE MTP currently only supports a single MTP block",
                               "bailingmoe3": "BailingMoE3 MTP requires one NextN layer"},
    'draft: arch == "qwen4exp" (check_layer_inputs)': ("qwen4exp",),
    'draft: arch == "deepseek4" (_mtp_assert)': ("deepseek4",),
    "rules._KEEP_BY_ARCH": {
        "glm5-next": ("hc_", "indexer.attn_q_b", "indexer.attn_k", "indexer.proj", "indexer_compressor_gate",
                      "indexer_compressor_ape", "ssm_f_a.weight", "ssm_f_b.weight", "ssm_g_a.weight",
                      "ssm_g_b.weight", "ssm_beta.weight", "attn_kv_a_mqa.weight", "attn_k_b.weight",
                      "attn_v_b.weight")},
    "rules._SEVENTY_B": {"qwen2": 80, "deci": 80, "olmo": 80, "jais2": 68},
}


def test_draft_layers_rules_tables():
    assert registry.mtp_names("skip") == LEGACY["layers.MTP_SKIP_ARCHES"]
    assert mapping("mtp_kept") == LEGACY["layers.MTP_KEPT"]
    assert MTP_FFN_KEPT == _FFN_KEPT
    assert registry.names_with("block_draft") == LEGACY["draft.BLOCK_DRAFT_ARCHES"]
    assert registry.names_with("layer_input", "graph") == LEGACY["draft.LAYER_INPUT_ARCHES"]
    assert registry.names_with("layer_input", "unplanned") == LEGACY["draft.LAYER_INPUT_UNPLANNED"]
    assert registry.names_with("layer_input", "hc_streams") == LEGACY['draft: arch == "qwen4exp" (check_layer_inputs)']
    assert registry.names_with("mtp_compressed_assert") == LEGACY['draft: arch == "deepseek4" (_mtp_assert)']
    assert mapping("mtp_fails") == LEGACY["draft.LLAMA_MTP_FAILS"]
    assert mapping("mtp_single_block") == LEGACY["draft.MTP_SINGLE_BLOCK"]
    assert mapping("quant_keep") == LEGACY["rules._KEEP_BY_ARCH"]
    seventy = {name: layers for name, layers in mapping("quant_70b").items() if name != "llama"}
    assert seventy == LEGACY["rules._SEVENTY_B"]
    # rules: `arch == "llama"` (n_layer 80 with GQA), `arch == "glm5-next"` (q8_0 fragments), `arch == "falcon"`
    assert registry.profile("llama").quant_70b == 80 and names("quant_70b_gqa") == {"llama"}
    assert mapping("quant_q8_0") == {"glm5-next": ("attn_q_a", "attn_q_b", "nextn.eh_proj")}
    assert names("quant_falcon") == {"falcon"}


def test_legacy_names_still_read_from_draft():
    """draft.py keeps its old module-level names (upstream.py reads BLOCK_DRAFT_ARCHES) for one release."""
    from moetools.devicefit import draft

    assert draft.BLOCK_DRAFT_ARCHES == LEGACY["draft.BLOCK_DRAFT_ARCHES"]
    assert draft.LAYER_INPUT_ARCHES == LEGACY["draft.LAYER_INPUT_ARCHES"]
    assert draft.LAYER_INPUT_UNPLANNED == LEGACY["draft.LAYER_INPUT_UNPLANNED"]


# --- compute.py (to become devicefit/graph/archsets.py) ---------------------------------------------

COMPUTE_FLAGS = {"NO_ROPE_ARCHES": "no_rope", "PARALLEL_SSM_ARCHES": "parallel_ssm",
                 "RESIDUAL_FIRST_ARCHES": "residual_first", "RELU_SQR_ARCHES": "relu_sqr",
                 "NEXTN_RAW_STATE": "nextn_raw_state", "NORM_FIRST_ARCHES": "norm_first",
                 "NORMED_RESIDUAL_ARCHES": "normed_residual", "EVERY_ROW_ARCHES": "every_row",
                 "POST_NORM_ARCHES": "post_norm", "GATED_Q_ARCHES": "gated_q", "NEXTN_TAIL": "nextn_tail",
                 "ATTN_RES_ARCHES": "attn_res", "PARALLEL_FFN_ARCHES": "parallel_ffn", "MTP_ISWA_ARCHES": "mtp_iswa"}
COMPUTE_VALUES = {"_SIGMOID_DEFAULT": ("gating", "sigmoid"), "_SOFTMAX_WEIGHT": ("gating", "softmax_weight"),
                  "_NORM_W_DEFAULT": ("norm_w", "default_true"), "_NORM_W_NEVER": ("norm_w", "never"),
                  "_NORM_W_ALWAYS": ("norm_w", "always"), "MROPE_ARCHES": ("mrope", "always"),
                  "MROPE_IF_SECTIONS": ("mrope", "if_sections"),
                  "MTP_ROWS_AFTER_ATTENTION": ("mtp_rows", "after_attention"),
                  "MTP_ROWS_BEFORE_HEAD_NORM": ("mtp_rows", "before_head_norm")}


@pytest.mark.parametrize("table", sorted(COMPUTE_FLAGS))
def test_compute_flags(table):
    assert names(COMPUTE_FLAGS[table]) == set(getattr(compute, table))


@pytest.mark.parametrize("table", sorted(COMPUTE_VALUES))
def test_compute_values(table):
    assert names(*COMPUTE_VALUES[table]) == set(getattr(compute, table))


def test_compute_mtp():
    """One field, `mtp`, replaces the three hand-synchronised lists (layers' MTP_SKIP_ARCHES above)."""
    assert registry.mtp_names("graph") == compute.MTP_GRAPH_ARCHES  # the order the error messages print
    assert registry.mtp_names("llama") == compute.LLAMA_MTP_ARCHES
    assert set(compute.MTP_GRAPH_ARCHES) <= set(compute.LLAMA_MTP_ARCHES) <= set(LEGACY["layers.MTP_SKIP_ARCHES"])
    assert mapping("mtp_head_norm") == compute.MTP_HEAD_NORM_FALLBACK
    # MTP_BUILDERS, plus deepseek4's `graph_shape.architecture == "deepseek4"` in _build_mtp
    builders = {name: _resolve(path) for name, path in mapping("mtp_builder").items()}
    assert builders == {**compute.MTP_BUILDERS, "deepseek4": compute._build_mtp_dsv4}


def test_graph_builders():
    """The bespoke whole-model graphs _build dispatches to (by kvshape.borrowed, architecture, shape.dsv4
    or shape.altup today); every other architecture runs the generic trunk."""
    builders = {name: _resolve(path) for name, path in mapping("graph_builder").items()}
    assert builders == {"gemma4-assistant": compute._build_assistant, "qwen4exp": compute._build_qwen4exp,
                        "deepseek4": compute._build_dsv4, "glm5-next": compute._build_dsv4,
                        "hy_v4": compute._build_dsv4, "gemma3n": compute._build_gemma3n}
    assert names("borrowed_kv") == {name for name, f in builders.items() if f is compute._build_assistant}


def _resolve(path):
    module, function = path.split(":")
    return getattr(importlib.import_module(module), function)
    assert set(compute.MTP_BLOCK_NEEDS) <= set(registry.mtp_names("graph"))


# --- the memory tables (kv.py, then devicefit/memory/archsets.py) -------------------------------------------------

KV_FLAGS = {"BORROWED_KV_ARCHES": "borrowed_kv", "FLASH_ATTN_FORCED_OFF": "flash_attn_off",
            "RS_ROLLBACK_ARCHES": "rs_rollback"}
KV_VALUES = {"KDA_ARCHES": ("recurrent_mixer", "kda"), "GDN_ARCHES": ("recurrent_mixer", "gdn"),
             "LIGHTNING_ARCHES": ("recurrent_mixer", "lightning"), "DSA_ARCHES": ("sparse_kv", "dsa"),
             "MSA_ARCHES": ("sparse_kv", "msa"), "NO_MEMORY": ("memory", "none")}


@pytest.mark.parametrize("table", sorted(KV_FLAGS))
def test_kv_flags(table):
    assert names(KV_FLAGS[table]) == set(getattr(kv, table))


@pytest.mark.parametrize("table", sorted(KV_VALUES))
def test_kv_values(table):
    assert names(*KV_VALUES[table]) == set(getattr(kv, table))


def test_kv_dicts():
    assert mapping("swa") == kv.SWA_RULES
    assert mapping("fixed_swa") == kv.FIXED_SWA
    assert mapping("recurrent") == kv.RECURRENT_RULES
    assert mapping("unsupported") == kv.UNSUPPORTED
    assert names("memory", "unsupported") == set(kv.UNSUPPORTED)
    assert names("known") == set(kv.KNOWN_ARCHES)
    assert set(registry.profiles()) == set(kv.KNOWN_ARCHES)
    assert set(registry.names_where(lambda entry: entry.memory_kind == "hybrid")) == set(kv.HYBRID_ARCHES)


# --- inline `arch == "..."` / `arch in (...)` tests at main a9f6c85 that became fields ----------------

INLINE = {  # field: {architecture: value}, with where the test stands today
    "mixer_name": {"bailingmoe3": "bkda", "rwkv7": "rwkv7", "arwkv7": "arwkv7", "rwkv6": "rwkv6",
                   "rwkv6qwen2": "rwkv6qwen2"},  # compute._layer_shape's mixer choice
    "kda_conv_snapshots": {"kimi-k3": True, "glm5-next": True},  # compute: _kda_conv_windows' snapshots
    "gating_fixed": {"qwen4exp": True},  # compute.graph_shape: gating = 1
    "gdn_repeat_groups": {"qwen3next": True},  # compute: the GDN's q/k repeat
    "ffn_dense_residual": {"arctic": True},  # compute._build: arctic's dense FFN beside the experts
    "ssm_groups_optional": {"mamba": True, "jamba": True},  # kv: group_required
    "kv_layers_from_start": {"gemma4": "key", "gemma3n": kv.GEMMA3N_KV_LAYERS},  # kv._layer_filters
    "swa_skips_recurrent": {"lfm2": True},  # kv.kv_shape: is_swa of lfm2
    "assistant_target": {"gemma4": True},  # command.py: a borrowed-KV draft's target
    # inline tests that stood in kv.py, graph/shape.py, trunk.py, mtp.py and the mixers until 0.2.0's last move
    "kv_trunk_only": {"glm5-next": True},  # kv._layer_filters
    "swa_width_required": {"gemma4": True},  # kv.kv_shape: swa_required
    "dsv4_cache": {"deepseek4": True},  # kv.kv_shape, mtp.mtp_kv_shape
    "indexer_rule": {"deepseek32": "trunk", "glm-dsa": "glm_dsa", "glm5-next": "types_kv", "hy_v4": "types_layer0",
                     "dots3note": "types_required"},  # kv._indexer_layers
    "indexer_optional": {"hy_v4": True},  # kv.kv_shape: hy_v4 without indexer.top_k
    "indexer_kpool": {"glm5-next": True},  # kv.kv_shape, shape.graph_shape: the k-pool row
    "qsa_indexer": {"qwen4exp": True},  # kv.kv_shape: the QSA cache and PLE
    "mla_swa": {"dots3note": True},  # shape.graph_shape
    "indexer_no_rotate": {"hy_v4": True},  # mixers/mla._dsa_inputs
    "mtp_crop_before_ffn": {"nemotron_h_moe": True},  # mtp._build_mtp
    "mla_k_rope_norm": {"dots3note": True},  # mixers/mla._mla_layer
    "mla_gate": {"dots3note": "broadcast", "bailingmoe3": "per_head"},  # mixers/mla._mla_layer
    "dsa_before_swa": {"dots3note": True},  # kv.kv_caches' order
    "shape_reader": {"gemma3n": "moetools.devicefit.graph.models.gemma3n:read_gemma3n_shape",
                     "glm5-next": "moetools.devicefit.graph.models.deepseek4:read_glm5_next_shape",
                     "hy_v4": "moetools.devicefit.graph.models.deepseek4:read_hy_v4_shape",
                     "qwen4exp": "moetools.devicefit.graph.models.qwen4exp:read_qwen4exp_shape"},  # shape.graph_shape
}


@pytest.mark.parametrize("field", sorted(INLINE))
def test_inline_tests(field):
    assert mapping(field) == INLINE[field]


def test_inline_tests_answered_by_existing_fields():
    """Inline tests whose set another field already gives (the call sites can ask it)."""
    assert names("block_draft") == {"dflash"}  # compute.graph_shape / kv.kv_shape: arch == "dflash"
    assert set(registry.names_where(lambda e: e.swa and e.swa[0] == "64 blocks")) == {"exaone4"}  # kv: exaone4 note
    assert names("borrowed_kv") == {"gemma4-assistant"}
    assert names("recurrent_mixer", "gdn") == set(kv.GDN_ARCHES)  # shape._layer_shape: kvshape.recurrent_kind "gdn"
    assert set(registry.names_where(lambda e: e.mixer_name in ("rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"))) == {
        "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"}  # shape._layer_shape's RWKV mixer choice


def test_every_named_function_exists():
    """Each "module:function" field names a function that imports (graph_builder, shape_reader, …)."""
    for entry in registry.profiles().values():
        for field in ("graph_builder", "shape_reader", "mtp_builder", "synth_builder"):
            if getattr(entry, field):
                assert callable(registry.resolve(getattr(entry, field))), (entry.name, field)


# --- the registry itself ----------------------------------------------------------------------------

def test_profile_is_a_frozen_record():
    entry = registry.profile("kimi-k3")
    with pytest.raises(AttributeError):
        entry.gating = "softmax"
    with pytest.raises(TypeError):
        ArchProfile("x", no_such_field=1)
    assert entry == ArchProfile("kimi-k3", **{f: getattr(entry, f) for f in ArchProfile.FIELDS[1:]})
    assert hash(entry) == hash(registry.profile("kimi-k3")) and "gating='sigmoid'" in repr(entry)


def test_unknown_name_gets_the_defaults():
    entry = registry.profile("no-such-arch")
    assert entry == ArchProfile("no-such-arch", known=False)
    assert entry.memory_kind == "attention" and not entry.mtp_at_least("skip") and not registry.is_known("x")
    assert all(entry.mtp in MTP_LEVELS for entry in registry.profiles().values())


def test_llama_cpp_files_name_a_model_file():
    for name, entry in registry.profiles().items():
        assert entry.llama_cpp == "" or (entry.llama_cpp.startswith("src/models/") and entry.llama_cpp.endswith(".cpp"))


def test_registry_is_cheap_and_plain():
    """No numpy, gguf or dataclasses behind the registry; its first query is quick (the device-fit
    start-up path)."""
    code = ("import sys, time; t = time.perf_counter(); from moetools.arch import registry; registry.profile('llama');"
            "print(time.perf_counter() - t, 'numpy' in sys.modules, any(m.startswith('gguf') for m in sys.modules),"
            "'dataclasses' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[1:] == ["False", "False", "False"]
    assert float(out[0]) < 0.5


# --- every architecture with facts of its own has a synth builder and a measured case ---------------

# profiles whose only facts are these are llama.cpp names device-fit plans through the generic trunk
_PLAIN = {"name", "known", "llama_cpp"}
# known gaps, each with why; a NEW architecture with a profile of its own must not be added here
NO_SYNTH_BUILDER = {
    "qwen2vl": "M-RoPE only; dense vision-language model, planned like qwen2 (no MoE layout to synthesise)",
    "qwen3": "dense: a DFlash target only (layer_input); the qwen3moe builder covers its layout",
    "qwen3vl": "M-RoPE only; dense VL model", "qwen3tts": "M-RoPE only; a TTS model",
    "paddleocr": "M-RoPE only; an OCR model", "glm4": "M-RoPE only; dense", "hunyuan_vl": "M-RoPE and layer inputs only",
    "qwen3next": "no BUILDERS entry: the tests build it with qwen35moe(arch=\"qwen3next\") (measured)",
    "muse-glimmer": "sliding-window rule only", "nanbeige": "layer inputs only (dense)",
    "gemma2": "sliding-window rule only (dense)", "gemma3": "sliding-window rule only (dense)",
    "cohere2": "sliding-window rule only (dense)", "olmo2": "sliding-window rule only (dense)",
    "plamo3": "sliding-window rule only (dense)", "spark2_5": "sliding-window rule only",
    "bert": "no memory: refused", "jina-bert-v2": "no memory: refused", "jina-bert-v3": "no memory: refused",
    "nomic-bert": "no memory: refused", "nomic-bert-moe": "no memory: refused", "neo-bert": "no memory: refused",
    "eurobert": "no memory: refused", "wavtokenizer-dec": "no memory: refused", "dream": "no memory: refused",
    "llada": "no memory: refused", "llada-moe": "no memory: refused", "rnd1": "no memory: refused",
    "gemma-embedding": "unsupported: refused", "modern-bert": "unsupported: refused",
    "qwen2": "quantize's 70B rule only (dense)", "deci": "quantize's 70B rule only (dense)",
    "olmo": "quantize's 70B rule only (dense)", "jais2": "quantize's 70B rule only (dense)",
    "falcon": "quantize's falcon branches only (dense)",
}


def _own_facts(entry):
    default = ArchProfile(entry.name)
    return {field for field in ArchProfile.FIELDS if getattr(entry, field) != getattr(default, field)} - _PLAIN


def _measured_architectures():
    from moetools import synth

    strings = set()

    def walk(value):
        if isinstance(value, str):
            strings.add(value)
        elif isinstance(value, dict):
            for key, item in value.items():
                strings.add(key)
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    for path in glob.glob(os.path.join(HERE, "data", "devicefit_llama_*.json")):
        with open(path) as handle:
            walk(json.load(handle))
    found = set()
    for text in strings:
        if text in synth.PRESETS:
            found.add(synth.preset(text).architecture)
        if text in synth.BUILDERS:
            found.add(synth.tiny(text).architecture)
        if text in registry.profiles():
            found.add(text)
    return found


def test_every_architecture_has_a_synth_builder():
    from moetools import synth

    missing = set()
    for name, entry in registry.profiles().items():
        if entry.synth_builder:
            module, function = entry.synth_builder.split(":")
            assert callable(getattr(importlib.import_module(module), function)), (name, entry.synth_builder)
        elif _own_facts(entry) and name not in NO_SYNTH_BUILDER:
            missing.add(name)
    assert not missing, f"architectures with facts of their own but no synth builder: {sorted(missing)}"
    stale = {name for name in NO_SYNTH_BUILDER if registry.profile(name).synth_builder}
    assert not stale, f"listed as gaps but have a builder now: {sorted(stale)}"
    assert {synth.tiny(key).architecture for key in synth.BUILDERS} <= set(registry.names_where(lambda e: e.synth_builder))


# architectures with facts of their own but no case in tests/data/devicefit_llama_*.json, each with why
# (every architecture with a synth builder is measured)
NO_MEASURED_CASE = {name: why for name, why in NO_SYNTH_BUILDER.items() if name != "qwen3next"}


def test_every_architecture_has_a_measured_case():
    measured = _measured_architectures()
    missing = {name for name, entry in registry.profiles().items()
               if (entry.synth_builder or _own_facts(entry)) and name not in measured and name not in NO_MEASURED_CASE}
    assert not missing, f"architectures with no measured case: {sorted(missing)}"
    stale = {name for name in NO_MEASURED_CASE if name in measured}
    assert not stale, f"listed as gaps but measured now: {sorted(stale)}"
