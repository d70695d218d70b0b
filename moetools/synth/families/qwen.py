"""Synthetic builders: Qwen MoE layouts (qwen2moe, qwen3moe, qwen3vlmoe, qwen35/qwen35moe gated delta nets, qwen4exp).

Each builder returns a ModelSpec in the layout llama.cpp's loader expects (src/models/<arch>.cpp).
`BUILDERS` maps the architecture names (and test aliases) of this family to their tiny builders."""

from gguf.constants import MODEL_TENSOR, Keys

import moetools.synth.keys as keys
import moetools.synth.names as names
from moetools.synth.blocks import _common, _dense_ffn, _embeddings, _experts, _gated_attention, _gdn_block, _gdn_keys, _gqa_attention, _gqa_keys, _nextn_block, _renamed
from moetools.synth.names import tn
from moetools.synth.spec import Q4_K, Q6_K, Q8_0, ModelSpec, Types, more_bits_blocks


def qwen3moe(t=Types(), **p):
    p = {"n_layer": 4, "n_embd": 256, "n_head": 4, "n_head_kv": 2, "head": 64, "n_ff": 512, "n_ff_exp": 128,
         "n_expert": 16, "top_k": 4, "vocab": 1024, "ctx": 2048, "rope_base": 1e6} | p
    spec = ModelSpec("qwen3moe", [])
    _common(spec, p)
    head = p["head"]
    _gqa_keys(spec, p, p["n_ff"], head)
    spec.meta(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH, p["n_ff_exp"])
    _embeddings(spec, p, t)
    for il in range(p["n_layer"]):
        spec.add(tn(MODEL_TENSOR.ATTN_NORM, il), (p["n_embd"],), t.norm)
        _gqa_attention(spec, il, p, head, t)
        spec.add(tn(MODEL_TENSOR.ATTN_Q_NORM, il), (head,), t.norm)
        spec.add(tn(MODEL_TENSOR.ATTN_K_NORM, il), (head,), t.norm)
        spec.add(tn(MODEL_TENSOR.FFN_NORM, il), (p["n_embd"],), t.norm)
        spec.add(tn(MODEL_TENSOR.FFN_GATE_INP, il), (p["n_embd"], p["n_expert"]), t.norm)
        _experts(spec, il, p["n_embd"], p["n_ff_exp"], p["n_expert"], t)
    return spec


def qwen3vlmoe(t=Types(), **p):
    """Qwen3-VL MoE's text model (`qwen3vlmoe`): the qwen3moe layout with M-RoPE (`rope.dimension_sections`,
    four positions per token; llama.cpp src/models/qwen3vlmoe.cpp)."""
    spec = _renamed(qwen3moe(t, **p), "qwen3vlmoe")
    spec.meta(Keys.Rope.DIMENSION_SECTIONS, [12, 10, 10, 0], "i32[]")
    return spec


def qwen2moe(t=Types(), **p):
    """Qwen2-MoE (`qwen2moe`, Qwen1.5-MoE / Qwen2-57B-A14B): q/k/v biases, no q/k norm, routed experts
    plus a shared expert behind a sigmoid gate (ffn_gate_inp_shexp) (llama.cpp src/models/qwen2moe.cpp)."""
    p = {"n_layer": 4, "n_embd": 256, "n_head": 4, "n_head_kv": 2, "n_ff": 512, "n_ff_exp": 128, "n_ff_shexp": 512,
         "n_expert": 16, "top_k": 4, "vocab": 1024, "ctx": 2048, "rope_base": 1e6} | p
    spec = ModelSpec("qwen2moe", [])
    _common(spec, p)
    head = p["n_embd"] // p["n_head"]
    _gqa_keys(spec, p, p["n_ff"])
    spec.meta(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH, p["n_ff_exp"])
    spec.meta(Keys.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH, p["n_ff_shexp"])
    _embeddings(spec, p, t)
    for il in range(p["n_layer"]):
        spec.add(tn(MODEL_TENSOR.ATTN_NORM, il), (p["n_embd"],), t.norm)
        _gqa_attention(spec, il, p, head, t)
        for kind, rows in ((MODEL_TENSOR.ATTN_Q, p["n_embd"]), (MODEL_TENSOR.ATTN_K, p["n_head_kv"] * head),
                           (MODEL_TENSOR.ATTN_V, p["n_head_kv"] * head)):
            spec.add(tn(kind, il, "bias"), (rows,), t.norm)
        spec.add(tn(MODEL_TENSOR.FFN_NORM, il), (p["n_embd"],), t.norm)
        spec.add(tn(MODEL_TENSOR.FFN_GATE_INP, il), (p["n_embd"], p["n_expert"]), t.norm)
        _experts(spec, il, p["n_embd"], p["n_ff_exp"], p["n_expert"], t)
        spec.add(tn(MODEL_TENSOR.FFN_GATE_INP_SHEXP, il), (p["n_embd"],), t.norm)
        _dense_ffn(spec, il, p["n_embd"], p["n_ff_shexp"], t, shared=True)
    return spec


def qwen3moe_swa(arch):
    """A builder of the qwen3moe layout under a sliding-window loader: `mellum` (three sliding-window
    layers to one full once `attention.sliding_window` is set) and `maple` (`pattern` S/F, a SwiGLU clamp
    per layer) (llama.cpp src/models/mellum.cpp, maple.cpp)."""
    def build(t=Types(), **p):
        p = {"swa": 128, "pattern": "SSSF"} | p
        spec = _renamed(qwen3moe(t, **(p | {"n_layer": len(p["pattern"])})), arch)
        spec.meta(Keys.Attention.SLIDING_WINDOW, p["swa"])
        if arch == "maple":
            spec.meta(Keys.Attention.SLIDING_WINDOW_PATTERN, [c == "S" for c in p["pattern"]], "bool[]")
            spec.meta(Keys.LLM.SWIGLU_CLAMP_EXP, 7.0, "f32")
        return spec
    return build


def qwen35moe(t=Types(), **p):
    """Qwen3.5 MoE (`qwen35moe`) and Qwen3-Next (`qwen3next`): gated delta net layers, one full
    attention layer every `full_every` (gated queries, q/k norms), routed experts and a gated shared
    expert (llama.cpp src/models/qwen35moe.cpp, qwen3next.cpp). With arch `qwen35` (dense Qwen3.5,
    src/models/qwen35.cpp) the same layers with an `n_ff`-wide SwiGLU FFN instead of the experts."""
    p = {"arch": "qwen35moe", "n_layer": 4, "n_embd": 256, "n_head": 4, "n_head_kv": 2, "head": 64, "rope": 16,
         "n_ff_exp": 64, "n_ff_shexp": 64, "n_expert": 16, "top_k": 4, "conv": 4, "k_heads": 2, "v_heads": 4,
         "state": 32, "full_every": 4, "nextn": 0, "vocab": 1024, "ctx": 4096, "rope_base": 1e7, "n_ff": 512} | p
    dense = p["arch"] == "qwen35"
    spec = ModelSpec(p["arch"], [])
    trunk, n_all = p["n_layer"], p["n_layer"] + p["nextn"]
    _common(spec, p | {"n_layer": n_all})
    if p["nextn"]:  # the MTP head: full-attention blocks after the trunk (never recurrent)
        spec.meta(Keys.LLM.NEXTN_PREDICT_LAYERS, p["nextn"])
    n_embd, head = p["n_embd"], p["head"]
    spec.meta(Keys.LLM.FEED_FORWARD_LENGTH, p["n_ff"] if dense else p["n_ff_exp"])
    spec.meta(Keys.Attention.HEAD_COUNT, p["n_head"])
    spec.meta(Keys.Attention.HEAD_COUNT_KV, p["n_head_kv"])
    spec.meta(Keys.Attention.KEY_LENGTH, head)
    spec.meta(Keys.Attention.VALUE_LENGTH, head)
    spec.meta(Keys.Rope.DIMENSION_COUNT, p["rope"])
    if p["arch"] in ("qwen35moe", "qwen35"):
        spec.meta(Keys.Rope.DIMENSION_SECTIONS, [11, 11, 10, 0], "i32[]")
    if not dense:
        spec.meta(Keys.LLM.EXPERT_COUNT, p["n_expert"])
        spec.meta(Keys.LLM.EXPERT_USED_COUNT, p["top_k"])
        spec.meta(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH, p["n_ff_exp"])
        spec.meta(Keys.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH, p["n_ff_shexp"])
    key_dim, value_dim = _gdn_keys(spec, p)
    _embeddings(spec, p, t)
    for il in range(n_all):
        spec.add(tn(MODEL_TENSOR.ATTN_NORM, il), (n_embd,), t.norm)
        spec.add(tn(MODEL_TENSOR.ATTN_POST_NORM, il), (n_embd,), t.norm)
        if il >= trunk:
            _nextn_block(spec, il, n_embd, t)
        if (il + 1) % p["full_every"] == 0 or il >= trunk:
            _gated_attention(spec, il, p, t)
        else:  # qwen3next: beta and alpha in one projection
            _gdn_block(spec, il, p, t, key_dim, value_dim, fused_ba=p["arch"] == "qwen3next")
        if dense:
            _dense_ffn(spec, il, n_embd, p["n_ff"], t)
            continue
        spec.add(tn(MODEL_TENSOR.FFN_GATE_INP, il), (n_embd, p["n_expert"]), t.norm)
        _experts(spec, il, n_embd, p["n_ff_exp"], p["n_expert"], t)
        spec.add(tn(MODEL_TENSOR.FFN_GATE_INP_SHEXP, il), (n_embd,), t.norm)
        _dense_ffn(spec, il, n_embd, p["n_ff_shexp"], t, shared=True)
    return spec


def qwen4exp(t=Types(), **p):
    """Qwen4-Exp (`qwen4exp`): Qwen3.5's gated delta net layers with one full-attention layer every
    `full_every` (gated queries, q/k norms) that attends through the QSA indexer (indexer q/k projections
    and norms; `ratio` writes attention.compress_ratios, one for all layers or a list, 0 leaves the key
    out: dense attention), low-rank
    hyper-connections (`hc` streams, `hc_rank`) in place of the layer norms and the output norm, routed
    experts and a gated shared expert (llama.cpp src/models/qwen4exp.cpp). `ple` (a gated delta net
    layer's index, None: none) adds the PLE module there: an n-gram hash embedding table
    (per_layer_token_embd, `ple_ngram` - 1 times `ple_heads` heads of n_embd / heads) gated into the
    streams and a dilated causal conv whose history is a row of the recurrent cache; `ple_conv_type`
    stores that conv's kernel as another ggml type (F16, BF16: llama.cpp casts each column to f32;
    None: the norms' type)."""
    p = {"ple": None, "ple_conv_type": None, "ple_ngram": 3, "ple_heads": 2, "ple_kernel": 4, "ple_vocab": 64, "n_layer": 4, "n_embd": 256, "n_head": 4, "n_head_kv": 2, "head": 64, "rope": 16, "n_ff_exp": 64,
         "n_ff_shexp": 64, "n_expert": 16, "top_k": 4, "conv": 4, "k_heads": 2, "v_heads": 4, "state": 32,
         "full_every": 4, "hc": 4, "hc_rank": 8, "idx_heads": 4, "idx_head": 64, "idx_top_k": 64, "ratio": 4,
         "vocab": 1024, "ctx": 4096, "rope_base": 1e7} | p
    spec = ModelSpec("qwen4exp", [])
    n_layer = p["n_layer"]
    _common(spec, p)
    n_embd, head, hc, rank = p["n_embd"], p["head"], p["hc"], p["hc_rank"]
    spec.meta(Keys.LLM.FEED_FORWARD_LENGTH, p["n_ff_exp"])
    spec.meta(Keys.Attention.HEAD_COUNT, p["n_head"])
    spec.meta(Keys.Attention.HEAD_COUNT_KV, p["n_head_kv"])
    spec.meta(Keys.Attention.KEY_LENGTH, head)
    spec.meta(Keys.Attention.VALUE_LENGTH, head)
    spec.meta(Keys.Rope.DIMENSION_COUNT, p["rope"])
    spec.meta(Keys.Rope.DIMENSION_SECTIONS, [p["rope"] // 8, p["rope"] // 8, p["rope"] // 4, 0], "i32[]")
    spec.meta(Keys.LLM.EXPERT_COUNT, p["n_expert"])
    spec.meta(Keys.LLM.EXPERT_USED_COUNT, p["top_k"])
    spec.meta(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH, p["n_ff_exp"])
    spec.meta(Keys.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH, p["n_ff_shexp"])
    key_dim, value_dim = _gdn_keys(spec, p)
    spec.meta(keys.HYPER_CONNECTION_COUNT, hc)
    spec.meta(keys.HYPER_CONNECTION_LOW_RANK, rank)
    spec.meta(keys.ATTENTION_INDEXER_HEAD_COUNT, p["idx_heads"])
    spec.meta(keys.ATTENTION_INDEXER_KEY_LENGTH, p["idx_head"])
    spec.meta(keys.ATTENTION_INDEXER_TOP_K, p["idx_top_k"])
    if p["ratio"]:  # one ratio for every layer, or a list per layer
        ratios = list(p["ratio"]) if isinstance(p["ratio"], (list, tuple)) else [p["ratio"]] * n_layer
        spec.meta(keys.ATTENTION_COMPRESS_RATIOS, ratios, "u32[]")
    if p["ple"] is not None:
        n_heads = (p["ple_ngram"] - 1) * p["ple_heads"]
        spec.meta(keys.PLE_LAYERS, [p["ple"]], "u32[]")
        spec.meta(keys.PLE_NGRAM_SIZE, p["ple_ngram"])
        spec.meta(keys.PLE_HEADS_PER_NGRAM, p["ple_heads"])
        spec.meta(keys.PLE_CONV_KERNEL, p["ple_kernel"])
        spec.meta(keys.PLE_EOS_TOKEN_ID, 2)
        spec.meta(Keys.LLM.EMBD_LENGTH_PER_LAYER_INP, n_embd // n_heads)
        spec.meta(keys.PLE_LAYER_MULTIPLIERS, [1000003 + 2 * i for i in range(p["ple_ngram"])], "u64[]")
        spec.meta(keys.PLE_HEAD_OFFSETS, [h * p["ple_vocab"] for h in range(n_heads)], "u64[]")
        spec.meta(keys.PLE_HEAD_VOCAB_SIZES, [p["ple_vocab"]] * n_heads, "u64[]")
        spec.add(tn(MODEL_TENSOR.PER_LAYER_TOKEN_EMBD), (n_embd // n_heads, n_heads * p["ple_vocab"]), t.embed)
    spec.add(tn(MODEL_TENSOR.TOKEN_EMBD), (n_embd, p["vocab"]), t.embed)
    spec.add(tn(MODEL_TENSOR.OUTPUT), (n_embd, p["vocab"]), t.output)
    spec.add(tn(names.HC_HEAD_NORM), (n_embd, hc), t.norm)
    spec.add(tn(names.HC_HEAD_DOWN), (hc * n_embd, rank), t.norm)
    spec.add(tn(names.HC_HEAD_UP), (rank, hc * n_embd), t.norm)
    for il in range(n_layer):
        for norm, down, up, inject in ((names.HC_ATTN_NORM, names.HC_ATTN_DOWN, names.HC_ATTN_UP, names.HC_ATTN_INJECT),
                                       (names.HC_FFN_NORM, names.HC_FFN_DOWN, names.HC_FFN_UP, names.HC_FFN_INJECT)):
            spec.add(tn(norm, il), (n_embd, hc), t.norm)
            spec.add(tn(down, il), (hc * n_embd, rank), t.norm)
            spec.add(tn(up, il), (rank, hc * n_embd), t.norm)
            spec.add(tn(inject, il), (hc * n_embd, hc), t.norm)
        if (il + 1) % p["full_every"] == 0:
            idx = p["idx_head"]
            _gated_attention(spec, il, p, t)
            spec.add(tn(names.INDEXER_Q_PROJ, il), (n_embd, p["idx_heads"] * idx), t.resident)
            spec.add(tn(names.INDEXER_K_PROJ, il), (n_embd, idx), t.resident)
            spec.add(tn(names.INDEXER_Q_NORM, il), (idx,), t.norm)
            spec.add(tn(MODEL_TENSOR.INDEXER_K_NORM, il), (idx,), t.norm)
        else:
            _gdn_block(spec, il, p, t, key_dim, value_dim)
        if il == p["ple"]:
            spec.add(tn(names.PLE_KEY, il), (n_embd, hc * n_embd), t.resident)
            spec.add(tn(names.PLE_VALUE, il), (n_embd, n_embd), t.resident)
            for norm in (names.PLE_NORM_KEY, names.PLE_NORM_QUERY, names.PLE_NORM_CONV):
                spec.add(tn(norm, il), (n_embd, hc), t.norm)
            conv_type = t.norm if p["ple_conv_type"] is None else p["ple_conv_type"]
            spec.add(tn(names.PLE_CONV1D, il), (p["ple_kernel"], hc * n_embd), conv_type)
        spec.add(tn(MODEL_TENSOR.FFN_GATE_INP, il), (n_embd, p["n_expert"]), t.norm)
        _experts(spec, il, n_embd, p["n_ff_exp"], p["n_expert"], t)
        spec.add(tn(MODEL_TENSOR.FFN_GATE_INP_SHEXP, il), (n_embd,), t.norm)
        _dense_ffn(spec, il, n_embd, p["n_ff_shexp"], t, shared=True)
    return spec


BUILDERS = {
    "qwen3moe": qwen3moe,
    "qwen35moe": qwen35moe,
    "qwen35": lambda t=Types(), **p: qwen35moe(t, **({"arch": "qwen35"} | p)),
    "qwen4exp": qwen4exp,
    "qwen3vlmoe": qwen3vlmoe,
    "mellum": qwen3moe_swa("mellum"),
    "maple": qwen3moe_swa("maple"),
    "qwen2moe": qwen2moe,
}


# Full-size presets (header-only, sparse) of this family, by name: presets.py merges them into synth.PRESETS.
# Types are those of common community quantizations.
PRESETS = {
    "qwen3-235b": lambda: qwen3moe(
        Types(expert=Q4_K, resident=Q8_0, embed=Q4_K, output=Q6_K),
        name="Qwen3-235B-A22B (synthetic)", n_layer=94, n_embd=4096, n_head=64, n_head_kv=4, head=128,
        n_ff=12288, n_ff_exp=1536, n_expert=128, top_k=8, vocab=151936, ctx=40960, file_type=15),
    # The model of ../shared/traces/qwen.route.csv (Qwen3-30B-A3B Q4_K_M): its preamble's expert bytes
    # (3,059,712 with a Q6_K down, 2,654,208 with Q4_K) are this preset's, block by block.
    "qwen3-30b-a3b": lambda: qwen3moe(
        Types(expert=Q4_K, expert_down=Q6_K, expert_down_blocks=more_bits_blocks(48), resident=Q4_K, embed=Q4_K,
              output=Q6_K),
        name="Qwen3-30B-A3B (synthetic)", n_layer=48, n_embd=2048, n_head=32, n_head_kv=4, head=128,
        n_ff=6144, n_ff_exp=768, n_expert=128, top_k=8, vocab=151936, ctx=40960, file_type=15),
    # Qwen/Qwen3.5-35B-A3B and Qwen/Qwen3-Next-80B-A3B-Instruct config.json: 2048 wide, 16 query heads and
    # 2 KV heads of 256 (gated queries), 16 key / 32 value linear-attention heads of 128, conv 4, a
    # full-attention layer every 4th, 512-wide experts and shared expert, rotary 25% of the head.
    # Plus one NextN/MTP block (re-read 2026-12-01: Qwen3.5 text configs carry mtp_num_hidden_layers 1;
    # Qwen3-Next ships mtp.* tensors; llama.cpp's conversion/qwen.py _QwenMtpMixin exports that block and
    # nextn_predict_layers unless --no-mtp), as a GGUF converted at 0c1e57098 has it.
    "qwen3.5-35b-a3b": lambda: qwen35moe(
        Types(expert=Q4_K, resident=Q8_0, embed=Q4_K, output=Q6_K), name="Qwen3.5-35B-A3B (synthetic)",
        arch="qwen35moe", n_layer=40, n_embd=2048, n_head=16, n_head_kv=2, head=256, rope=64, n_ff_exp=512,
        n_ff_shexp=512, n_expert=256, top_k=8, k_heads=16, v_heads=32, state=128, nextn=1, vocab=248320,
        ctx=262144, file_type=15),
    "qwen3-next-80b-a3b": lambda: qwen35moe(
        Types(expert=Q4_K, resident=Q8_0, embed=Q4_K, output=Q6_K), name="Qwen3-Next-80B-A3B (synthetic)",
        arch="qwen3next", n_layer=48, n_embd=2048, n_head=16, n_head_kv=2, head=256, rope=64, n_ff_exp=512,
        n_ff_shexp=512, n_expert=512, top_k=10, k_heads=16, v_heads=32, state=128, nextn=1, vocab=151936,
        ctx=262144, file_type=15),
}
