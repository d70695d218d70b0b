"""Synthetic builders: MiniMax layouts (minimax-01 lightning attention, minimax-m2, minimax-m3).

Each builder returns a ModelSpec in the layout llama.cpp's loader expects (src/models/<arch>.cpp).
`BUILDERS` maps the architecture names (and test aliases) of this family to their tiny builders."""

from gguf.constants import MODEL_TENSOR, Keys

import moetools.synth.names as names
from moetools.synth.blocks import _common, _embeddings, _experts, _gqa_attention, _gqa_keys, _shared_experts_moe
from moetools.synth.names import tn
from moetools.synth.spec import Q4_K, Q6_K, Q8_0, ModelSpec, Types


def minimax_01(t=Types(), **p):
    """MiniMax-Text-01 (`minimax-01`): lightning (linear) attention blocks — a fused silu'd qkv, an
    RMS-normed output times a sigmoid gate — with one softmax GQA block every `full_every` (roped over
    half the head), routed experts (softmax gate) in every block, residuals of the normed input scaled
    by `residual_scale` (llama.cpp src/models/minimax-01.cpp)."""
    p = {"n_layer": 8, "n_embd": 256, "n_head": 4, "n_head_kv": 2, "head": 64, "n_ff": 128, "n_expert": 8,
         "top_k": 2, "full_every": 8, "vocab": 1024, "ctx": 8192, "rope_base": 1e7} | p
    spec = ModelSpec("minimax-01", [])
    _common(spec, p)
    n_embd, head, heads = p["n_embd"], p["head"], p["n_head"] * p["head"]
    _gqa_keys(spec, p, p["n_ff"], head)
    spec.meta(Keys.Rope.DIMENSION_COUNT, head // 2)
    spec.meta(Keys.LLM.RESIDUAL_SCALE, 3.5565588200778455, "f32")
    spec.meta(Keys.LLM.FULL_ATTENTION_INTERVAL, p["full_every"])
    _embeddings(spec, p, t)
    for il in range(p["n_layer"]):
        spec.add(tn(MODEL_TENSOR.ATTN_NORM, il), (n_embd,), t.norm)
        if (il + 1) % p["full_every"] == 0:
            _gqa_attention(spec, il, p, head, t)
        else:
            spec.add(tn(MODEL_TENSOR.ATTN_NORM_2, il), (heads,), t.norm)
            spec.add(tn(MODEL_TENSOR.ATTN_QKV, il), (n_embd, 3 * heads), t.resident)
            spec.add(tn(MODEL_TENSOR.ATTN_GATE, il), (n_embd, heads), t.resident)
            spec.add(tn(MODEL_TENSOR.ATTN_OUT, il), (heads, n_embd), t.resident)
        spec.add(tn(MODEL_TENSOR.FFN_NORM, il), (n_embd,), t.norm)
        spec.add(tn(MODEL_TENSOR.FFN_GATE_INP, il), (n_embd, p["n_expert"]), t.norm)
        _experts(spec, il, n_embd, p["n_ff"], p["n_expert"], t)
    return spec


def minimax_m2(t=Types(), **p):
    """MiniMax-M2 (`minimax-m2`): GQA with whole-width q/k norms, sigmoid-routed experts of
    feed_forward_length with a probability bias, no shared expert (llama.cpp src/models/minimax-m2.cpp)."""
    p = {"n_layer": 4, "n_embd": 256, "n_head": 4, "n_head_kv": 2, "head": 64, "n_ff_exp": 128, "n_expert": 16,
         "top_k": 4, "rope": 32, "vocab": 1024, "ctx": 4096, "rope_base": 5e6} | p
    spec = ModelSpec("minimax-m2", [])
    _common(spec, p)
    head, n_embd = p["head"], p["n_embd"]
    _gqa_keys(spec, p, p["n_ff_exp"], head)
    spec.meta(Keys.Rope.DIMENSION_COUNT, p["rope"])
    spec.meta(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH, p["n_ff_exp"])
    spec.meta(Keys.LLM.EXPERT_GATING_FUNC, 2)
    _embeddings(spec, p, t)
    for il in range(p["n_layer"]):
        spec.add(tn(MODEL_TENSOR.ATTN_NORM, il), (n_embd,), t.norm)
        _gqa_attention(spec, il, p, head, t)
        spec.add(tn(MODEL_TENSOR.ATTN_Q_NORM, il), (p["n_head"] * head,), t.norm)
        spec.add(tn(MODEL_TENSOR.ATTN_K_NORM, il), (p["n_head_kv"] * head,), t.norm)
        spec.add(tn(MODEL_TENSOR.FFN_NORM, il), (n_embd,), t.norm)
        spec.add(tn(MODEL_TENSOR.FFN_GATE_INP, il), (n_embd, p["n_expert"]), t.norm)
        spec.add(tn(MODEL_TENSOR.FFN_EXP_PROBS_B, il, "bias"), (p["n_expert"],), t.norm)
        _experts(spec, il, n_embd, p["n_ff_exp"], p["n_expert"], t)
    return spec


def minimax_m3(t=Types(), **p):
    """MiniMax-M3 (`minimax-m3`, src/models/minimax-m3.cpp): GQA with per-head q/k norms and partial
    rotary, leading dense blocks, then sigmoid-routed experts with a selection bias beside a shared
    expert, and MiniMax Sparse Attention in those blocks: an indexer (one `idx_head`-wide query head per
    KV head, one key head) whose keys llama_kv_cache_msa caches beside the KV."""
    p = {"n_head_kv": 2, "n_shared": 1, "idx_head": 64, "idx_top_k": 4, "idx_block": 64, "idx_local": 1,
         "rope": 32} | p
    p = {"n_layer": 4, "n_embd": 256, "n_head": 4, "n_ff": 512, "n_ff_exp": 128, "n_expert": 16, "top_k": 4,
         "n_dense": 1, "vocab": 1024, "ctx": 4096} | p
    extra = (("expert_gating_func", 2, "u32"), ("expert_weights_norm", True, "bool"),
             ("rope.dimension_count", p["rope"], "u32"),
             ("attention.indexer.head_count", p["n_head_kv"], "u32"),
             ("attention.indexer.key_length", p["idx_head"], "u32"),
             ("attention.indexer.top_k", p["idx_top_k"], "u32"),
             ("attention.indexer.block_size", p["idx_block"], "u32"),
             ("attention.indexer.local_blocks", p["idx_local"], "u32"))
    spec = _shared_experts_moe("minimax-m3", t, p, 2.5, probs_bias=True, qk_norm=True, extra=extra)
    for il in range(p["n_dense"], p["n_layer"]):
        spec.add(tn(names.INDEXER_Q_PROJ, il), (p["n_embd"], p["n_head_kv"] * p["idx_head"]), t.resident)
        spec.add(tn(names.INDEXER_K_PROJ, il), (p["n_embd"], p["idx_head"]), t.resident)
        spec.add(tn(names.INDEXER_Q_NORM, il), (p["idx_head"],), t.norm)
        spec.add(tn(MODEL_TENSOR.INDEXER_K_NORM, il), (p["idx_head"],), t.norm)
    return spec


BUILDERS = {
    "minimax-01": minimax_01,
    "minimax-m3": minimax_m3,
    "minimax-m2": minimax_m2,
}


# Full-size presets (header-only, sparse) of this family, by name: presets.py merges them into synth.PRESETS.
# Types are those of common community quantizations.
PRESETS = {
    # MiniMaxAI/MiniMax-M2 config.json: 62 layers, 3072 wide, 48 query / 8 KV heads of 128 (64 rotary),
    # 256 experts of 1536 (top-8), no shared expert. Re-read 2026-12-01 from copies of its config.json in
    # public repos (MiniMaxM2ForCausalLM: vocab 200064, max_position_embeddings 196608, use_qk_norm
    # per_layer, no n_group): all as above. Its 3 MTP modules are not converted by llama.cpp
    # (conversion/minimax.py keeps no mtp tensors for the text model), so the preset has none.
    "minimax-m2": lambda: minimax_m2(
        Types(expert=Q4_K, resident=Q8_0, embed=Q4_K, output=Q6_K), name="MiniMax-M2 (synthetic)",
        n_layer=62, n_embd=3072, n_head=48, n_head_kv=8, head=128, rope=64, n_ff_exp=1536, n_expert=256,
        top_k=8, vocab=200064, ctx=196608, file_type=15),
    # MiniMaxAI/MiniMax-Text-01 config.json: 80 layers, 6144 wide, 64 query / 8 KV heads of 128
    # (rotary_dim 64), attn_type_list: seven lightning-attention layers then one softmax layer, 32 experts
    # of 9216 (top-2), vocab 200064, 10,240,000-token context; llama.cpp's conversion writes the layernorm
    # alphas as residual_scale. Re-read 2026-12-02 from copies of MiniMax-M1's config.json in public repos
    # (the same 456B layout: MiniMaxM1ForCausalLM, attn_type_list [0]*7+[1] x 10, rotary_dim 64,
    # shared_intermediate_size 0) and transformers' MiniMax-VL-01 test of the legacy Text-01 text config.
    "minimax-text-01": lambda: minimax_01(
        Types(expert=Q4_K, resident=Q8_0, embed=Q4_K, output=Q6_K), name="MiniMax-Text-01 (synthetic)",
        n_layer=80, n_embd=6144, n_head=64, n_head_kv=8, head=128, n_ff=9216, n_expert=32, top_k=2,
        vocab=200064, ctx=10240000, file_type=15),
}
