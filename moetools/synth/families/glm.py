"""Synthetic builders: GLM MoE layouts (glm4moe, glm-dsa, glm5-next).

Each builder returns a ModelSpec in the layout llama.cpp's loader expects (src/models/<arch>.cpp).
`BUILDERS` maps the architecture names (and test aliases) of this family to their tiny builders."""

from gguf.constants import MODEL_TENSOR, Keys

import moetools.synth.keys as keys
import moetools.synth.names as names
from moetools.synth.blocks import _common, _dense_ffn, _dsa_indexer, _embeddings, _experts, _gqa_attention, _gqa_keys, _hc_mixes, _kda_block, _mla_attention, _mla_keys, _nextn_block, _router_groups
from moetools.synth.families.deepseek import deepseek32
from moetools.synth.names import parse, tn
from moetools.synth.spec import Q4_K, Q6_K, Q8_0, ModelSpec, TensorSpec, Types


def glm_dsa(t=Types(), **p):
    """GLM-5 / GLM-5.2 (`glm-dsa`): the DeepSeek-V3.2 layout (MLA, DSA indexer, sigmoid-routed experts,
    NextN blocks) where only the layers `indexer.types` marks full (`idx_types`, a string of 0/1 per trunk
    layer) carry the indexer's tensors; the shared ones reuse the last full layer's top-k
    (llama.cpp src/models/glm-dsa.cpp)."""
    p = {"idx_types": "1001"} | p
    types = [int(c) for c in p["idx_types"]]
    spec = deepseek32(t, **(p | {"n_layer": len(types)}))
    spec.architecture = "glm-dsa"
    spec.metadata = [(key.replace("deepseek32.", "glm-dsa.", 1), value, kind) for key, value, kind in spec.metadata]
    spec.meta(keys.ATTENTION_INDEXER_TYPES, types, "u32[]")
    shared = {il for il, full in enumerate(types) if not full}
    indexer = (MODEL_TENSOR.INDEXER_K_NORM, MODEL_TENSOR.INDEXER_PROJ, MODEL_TENSOR.INDEXER_ATTN_K,
               MODEL_TENSOR.INDEXER_ATTN_Q_B)
    dropped = {(kind, il) for kind in indexer for il in shared}
    spec.tensors = [tensor for tensor in spec.tensors if parse(tensor.name)[:2] not in dropped]
    return spec


def glm5_next(t=Types(), **p):
    """GLM-5.3-Flash (`glm5-next`): KDA layers (head_count_kv 0; `layers` a string of K = KDA, * = attention)
    and NoPE MLA layers (the cache row is the latent alone) with a k-pool DSA indexer (key, gate and
    pooled key cached per token; `idx_types`, a 0/1 string per trunk layer, writes `indexer.types`: the
    shared layers carry no indexer tensors), mHC residual streams (`hc`, DeepSeek-V4's Sinkhorn mixes),
    a leading dense block and sigmoid-routed experts with a shared one, `nextn` NextN blocks
    (llama.cpp src/models/glm5-next.cpp)."""
    p = {"layers": "KK*K", "n_embd": 256, "n_head": 4, "kda_head": 64, "conv": 4, "n_ff": 512, "n_ff_exp": 128,
         "n_expert": 16, "top_k": 4, "n_shared": 1, "n_dense": 1, "q_lora": 64, "kv_lora": 64, "qk_nope": 64,
         "v_head": 32, "idx_heads": 4, "idx_head": 64, "idx_top_k": 64, "kpool": 4, "hc": 4, "nextn": 0,
         "vocab": 1024, "ctx": 4096} | p
    kinds = p["layers"] + "*" * p["nextn"]
    n_block, trunk = len(kinds), len(p["layers"])
    spec = ModelSpec("glm5-next", [])
    _common(spec, p | {"n_layer": n_block})
    n_embd, n_head, hc = p["n_embd"], p["n_head"], p["hc"]
    spec.meta(Keys.LLM.FEED_FORWARD_LENGTH, p["n_ff"])
    spec.meta(Keys.Attention.HEAD_COUNT, n_head)
    spec.meta(Keys.Attention.HEAD_COUNT_KV, [0 if kind == "K" else 1 for kind in kinds], "u32[]")
    spec.meta(Keys.LLM.EXPERT_COUNT, p["n_expert"])
    spec.meta(Keys.LLM.EXPERT_USED_COUNT, p["top_k"])
    spec.meta(Keys.LLM.EXPERT_GATING_FUNC, 2)
    spec.meta(Keys.LLM.LEADING_DENSE_BLOCK_COUNT, p["n_dense"])
    spec.meta(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH, p["n_ff_exp"])
    spec.meta(Keys.LLM.EXPERT_SHARED_COUNT, p["n_shared"])
    spec.meta(Keys.LLM.EXPERT_WEIGHTS_SCALE, 2.5, "f32")
    spec.meta(Keys.LLM.EXPERT_WEIGHTS_NORM, True, "bool")
    _mla_keys(spec, p | {"rope": 0})
    spec.meta(Keys.SSM.CONV_KERNEL, p["conv"])
    spec.meta(Keys.KDA.HEAD_DIM, p["kda_head"])
    spec.meta(keys.ATTENTION_INDEXER_HEAD_COUNT, p["idx_heads"])
    spec.meta(keys.ATTENTION_INDEXER_KEY_LENGTH, p["idx_head"])
    spec.meta(keys.ATTENTION_INDEXER_TOP_K, p["idx_top_k"])
    spec.meta(keys.ATTENTION_INDEXER_KPOOL, p["kpool"])
    idx_types = [int(c) for c in p.get("idx_types", "1" * trunk)]
    if "idx_types" in p:
        spec.meta(keys.ATTENTION_INDEXER_TYPES, idx_types, "u32[]")
    spec.meta(keys.HYPER_CONNECTION_COUNT, hc)
    spec.meta(keys.HYPER_CONNECTION_SINKHORN_ITERATIONS, 20)
    spec.meta(keys.HYPER_CONNECTION_EPSILON, 1e-6, "f32")
    if p["nextn"]:
        spec.meta(Keys.LLM.NEXTN_PREDICT_LAYERS, p["nextn"])
    _embeddings(spec, p, t)
    hc_mix = (2 + hc) * hc
    idx = p["idx_head"]
    for il, kind in enumerate(kinds):
        spec.add(tn(MODEL_TENSOR.ATTN_NORM, il), (n_embd,), t.norm)
        spec.add(tn(MODEL_TENSOR.FFN_NORM, il), (n_embd,), t.norm)
        if il < trunk:
            _hc_mixes(spec, il, hc * n_embd, hc_mix, 3, t)
        if kind == "K":
            _kda_block(spec, il, p, t, factored_gate=True)
            spec.tensors = [TensorSpec(x.name, (n_head,), x.type_id) if x.name == tn(MODEL_TENSOR.SSM_A, il, suffix=None) else x
                            for x in spec.tensors]
        else:
            _mla_attention(spec, il, p | {"rope": 0}, t)
        if kind != "K" and (il >= trunk or idx_types[il]):
            _dsa_indexer(spec, il, p, t)
            spec.add(tn(names.INDEXER_KPOOL_GATE, il), (n_embd, idx), t.resident)
            spec.add(tn(names.INDEXER_KPOOL_APE, il), (idx, p["kpool"]), t.norm)
        if il < p["n_dense"]:
            _dense_ffn(spec, il, n_embd, p["n_ff"], t)
        else:
            spec.add(tn(MODEL_TENSOR.FFN_GATE_INP, il), (n_embd, p["n_expert"]), t.norm)
            spec.add(tn(MODEL_TENSOR.FFN_EXP_PROBS_B, il, "bias"), (p["n_expert"],), t.norm)
            _experts(spec, il, n_embd, p["n_ff_exp"], p["n_expert"], t)
            _dense_ffn(spec, il, n_embd, p["n_ff_exp"] * p["n_shared"], t, shared=True)
        if il >= trunk:
            _nextn_block(spec, il, n_embd, t)
    return spec


def glm4moe(t=Types(), **p):
    """GLM-4.5 / GLM-4.5-Air (`glm4moe`): GQA with q/k/v biases and partial rotary, leading dense
    blocks, sigmoid-routed experts with a shared expert, and `nextn` NextN/MTP blocks at the end
    (llama.cpp src/models/glm4-moe.cpp)."""
    p = {"n_layer": 4, "n_embd": 256, "n_head": 4, "n_head_kv": 2, "head": 64, "n_ff": 512, "n_ff_exp": 128,
         "n_expert": 16, "top_k": 4, "n_shared": 1, "n_dense": 1, "nextn": 1, "qk_norm": False, "vocab": 1024,
         "ctx": 4096, "rope_base": 1e6} | p
    spec = ModelSpec("glm4moe", [])
    n_all = p["n_layer"] + p["nextn"]
    _common(spec, p | {"n_layer": n_all})
    head, n_embd = p["head"], p["n_embd"]
    _gqa_keys(spec, p, p["n_ff"], head)
    spec.meta(Keys.Rope.DIMENSION_COUNT, head // 2)
    spec.meta(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH, p["n_ff_exp"])
    spec.meta(Keys.LLM.EXPERT_SHARED_COUNT, p["n_shared"])
    spec.meta(Keys.LLM.LEADING_DENSE_BLOCK_COUNT, p["n_dense"])
    spec.meta(Keys.LLM.EXPERT_GATING_FUNC, 2)
    spec.meta(Keys.LLM.EXPERT_WEIGHTS_SCALE, 1.0, "f32")
    spec.meta(Keys.LLM.EXPERT_WEIGHTS_NORM, True, "bool")
    _router_groups(spec, p)
    if p["nextn"]:
        spec.meta(Keys.LLM.NEXTN_PREDICT_LAYERS, p["nextn"])
    _embeddings(spec, p, t)
    for il in range(n_all):
        spec.add(tn(MODEL_TENSOR.ATTN_NORM, il), (n_embd,), t.norm)
        _gqa_attention(spec, il, p, head, t)
        for kind, heads in ((MODEL_TENSOR.ATTN_Q, p["n_head"]), (MODEL_TENSOR.ATTN_K, p["n_head_kv"]),
                            (MODEL_TENSOR.ATTN_V, p["n_head_kv"])):
            spec.add(tn(kind, il, "bias"), (heads * head,), t.norm)
        if p["qk_norm"]:
            spec.add(tn(MODEL_TENSOR.ATTN_Q_NORM, il), (head,), t.norm)
            spec.add(tn(MODEL_TENSOR.ATTN_K_NORM, il), (head,), t.norm)
        spec.add(tn(MODEL_TENSOR.ATTN_POST_NORM, il), (n_embd,), t.norm)
        if il < p["n_dense"]:
            _dense_ffn(spec, il, n_embd, p["n_ff"], t)
        else:
            spec.add(tn(MODEL_TENSOR.FFN_GATE_INP, il), (n_embd, p["n_expert"]), t.norm)
            spec.add(tn(MODEL_TENSOR.FFN_EXP_PROBS_B, il, "bias"), (p["n_expert"],), t.norm)
            _experts(spec, il, n_embd, p["n_ff_exp"], p["n_expert"], t)
            _dense_ffn(spec, il, n_embd, p["n_ff_exp"] * p["n_shared"], t, shared=True)
        if il >= p["n_layer"]:
            _nextn_block(spec, il, n_embd, t)
    return spec


BUILDERS = {
    "glm-dsa": glm_dsa,
    "glm5-next": glm5_next,
    "glm4moe": glm4moe,
}


# Full-size presets (header-only, sparse) of this family, by name: presets.py merges them into synth.PRESETS.
# Types are those of common community quantizations.
PRESETS = {
    # zai-org/GLM-4.5-Air config.json: 46 layers + 1 NextN block, 4096 wide, 96 query / 8 KV heads of 128
    # (half rotary, q/k/v biases), one dense block of 10944, 128 experts of 1408 (top-8) + 1 shared.
    # Rows of 1408/704 values (2688 for Nemotron) do not fill Q4_K's 256-value blocks: those are Q8_0/Q4_0.
    # Re-read 2026-12-01 from slime's scripts/models/glm4.5-106B-A12B.sh (Megatron args of the same
    # checkpoint: 1 dense + 45 MoE layers, 96 heads / 8 query groups of 128, rotary 0.5, q/k/v biases, no
    # q/k norm, ffn 10944, experts and shared expert 1408, top-8 of 128, vocab 151552, rope 1e6): all as
    # above; config.json's n_group 1 / topk_group 1 are written as llama.cpp's converter does.
    "glm-4.5-air": lambda: glm4moe(
        Types(expert=Q4_K, expert_down=Q8_0, resident=Q8_0, embed=Q4_K, output=Q6_K), name="GLM-4.5-Air (synthetic)",
        n_layer=46, nextn=1, n_embd=4096, n_head=96, n_head_kv=8, head=128, n_ff=10944, n_ff_exp=1408,
        n_expert=128, top_k=8, n_shared=1, n_dense=1, expert_groups=1, expert_groups_used=1, vocab=151552,
        ctx=131072, file_type=15),
}
