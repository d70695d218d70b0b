"""Synthetic builders: DeepSeek-style MLA layouts (deepseek, deepseek2, deepseek32, deepseek4, dots, Hunyuan).

Each builder returns a ModelSpec in the layout llama.cpp's loader expects (src/models/<arch>.cpp).
`BUILDERS` maps the architecture names (and test aliases) of this family to their tiny builders."""

from gguf.constants import MODEL_TENSOR, Keys

import moetools.synth.keys as keys
import moetools.synth.names as names
from moetools.synth.blocks import _common, _dense_ffn, _dsa_indexer, _embeddings, _experts, _gqa_attention, _gqa_keys, _hc_head, _hc_mixes, _mla_attention, _mla_keys, _nextn_block, _renamed, _router_groups, _shared_experts_moe
from moetools.synth.names import parse, tn
from moetools.synth.spec import IQ2_XS, IQ3_XXS, Q4_K, Q6_K, Q8_0, ModelSpec, TensorSpec, Types


def hunyuan_moe(t=Types(), **p):
    """Hunyuan MoE (`hunyuan-moe`, Hunyuan-A13B): GQA attention with q/k norms applied after the rope,
    routed experts (feed_forward_length wide) plus an always-on shared MLP added to them (llama.cpp
    src/models/hunyuan-moe.cpp)."""
    p = {"n_layer": 4, "n_embd": 256, "n_head": 4, "n_head_kv": 2, "n_ff": 128, "n_ff_shexp": 256, "n_expert": 16,
         "top_k": 4, "vocab": 1024, "ctx": 4096, "rope_base": 1e4} | p
    spec = ModelSpec("hunyuan-moe", [])
    _common(spec, p)
    head, n_embd = p["n_embd"] // p["n_head"], p["n_embd"]
    _gqa_keys(spec, p, p["n_ff"])
    spec.meta(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH, p["n_ff"])
    spec.meta(Keys.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH, p["n_ff_shexp"])
    _embeddings(spec, p, t)
    for il in range(p["n_layer"]):
        spec.add(tn(MODEL_TENSOR.ATTN_NORM, il), (n_embd,), t.norm)
        _gqa_attention(spec, il, p, head, t)
        spec.add(tn(MODEL_TENSOR.ATTN_K_NORM, il), (head,), t.norm)
        spec.add(tn(MODEL_TENSOR.ATTN_Q_NORM, il), (head,), t.norm)
        spec.add(tn(MODEL_TENSOR.FFN_NORM, il), (n_embd,), t.norm)
        spec.add(tn(MODEL_TENSOR.FFN_GATE_INP, il), (n_embd, p["n_expert"]), t.norm)
        _experts(spec, il, n_embd, p["n_ff"], p["n_expert"], t)
        _dense_ffn(spec, il, n_embd, p["n_ff_shexp"], t, shared=True)
    return spec


def deepseek(t=Types(), **p):
    """DeepSeek-MoE (`deepseek`, DeepSeek-MoE-16B / V1): GQA attention, `n_dense` leading dense blocks,
    then routed experts (softmax, weights not normalised) and `n_shared` shared experts of the expert
    width (llama.cpp src/models/deepseek.cpp)."""
    p = {"n_head_kv": 4} | p
    return _shared_experts_moe("deepseek", t, p, 1.0, probs_bias=False)


def dots1(t=Types(), **p):
    """dots.llm1 (`dots1`): multi-head attention with per-head q/k norms, `n_dense` leading dense blocks,
    then sigmoid-routed experts with a selection bias, normalised and scaled weights, and shared experts
    (llama.cpp src/models/dots1.cpp)."""
    p = p | {"n_head_kv": p.get("n_head", 4)}
    return _shared_experts_moe("dots1", t, p, 2.5, probs_bias=True, qk_norm=True,
                               extra=(("expert_weights_norm", True, "bool"), ("expert_gating_func", 2, "u32")))


def hy_v3(t=Types(), **p):
    """Hunyuan-V3 (`hy_v3`): GQA with per-head q/k norms, a leading dense block (the loader goes by the
    tensors present), then sigmoid-routed experts with a selection bias (`exp_probs_b`, no suffix)
    beside a shared expert (llama.cpp src/models/hy-v3.cpp)."""
    p = {"n_head_kv": 2, "n_shared": 1, "n_layer": 4, "nextn": 0} | p
    trunk = p["n_layer"]
    spec = _shared_experts_moe("hy_v3", t, p | {"n_layer": trunk + p["nextn"]}, 1.0, probs_bias=True, qk_norm=True,
                               extra=(("expert_weights_norm", True, "bool"), ("expert_gating_func", 2, "u32"),
                                      ("expert_shared_feed_forward_length", p.get("n_ff_exp", 128), "u32")))
    for i, x in enumerate(spec.tensors):  # exp_probs_b without a suffix
        kind, il, _ = parse(x.name)
        if kind == MODEL_TENSOR.FFN_EXP_PROBS_B:
            spec.tensors[i] = TensorSpec(tn(kind, il, suffix=None), x.shape, x.type_id)
    if p["nextn"]:  # the converter appends the MTP blocks (full hy_v3 blocks) with their final_layernorm as
        # nextn.shared_head_norm and no embeddings or head of their own (conversion/hunyuan.py HYV3Model)
        spec.meta(Keys.LLM.NEXTN_PREDICT_LAYERS, p["nextn"])
        for il in range(trunk, trunk + p["nextn"]):
            _nextn_block(spec, il, p.get("n_embd", 256), t)
    return spec


def deepseek2(t=Types(), **p):
    """DeepSeek-V3 / Kimi-K2 layout: MLA, leading dense blocks, shared expert, sigmoid router bias."""
    p = {"n_layer": 4, "n_embd": 256, "n_head": 4, "n_ff": 512, "n_ff_exp": 128, "n_expert": 16, "top_k": 4,
         "n_shared": 1, "n_dense": 1, "q_lora": 64, "kv_lora": 64, "rope": 16, "qk_nope": 32, "v_head": 32,
         "vocab": 1024, "ctx": 2048} | p
    spec = ModelSpec("deepseek2", [])
    _common(spec, p)
    spec.meta(Keys.LLM.FEED_FORWARD_LENGTH, p["n_ff"])
    spec.meta(Keys.Attention.HEAD_COUNT, p["n_head"])
    spec.meta(Keys.Attention.HEAD_COUNT_KV, 1)
    spec.meta(Keys.LLM.EXPERT_COUNT, p["n_expert"])
    spec.meta(Keys.LLM.EXPERT_USED_COUNT, p["top_k"])
    spec.meta(Keys.LLM.EXPERT_GATING_FUNC, 2)
    spec.meta(Keys.LLM.LEADING_DENSE_BLOCK_COUNT, p["n_dense"])
    spec.meta(Keys.LLM.VOCAB_SIZE, p["vocab"])
    spec.meta(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH, p["n_ff_exp"])
    spec.meta(Keys.LLM.EXPERT_SHARED_COUNT, p["n_shared"])
    spec.meta(Keys.LLM.EXPERT_WEIGHTS_SCALE, 2.5, "f32")
    spec.meta(Keys.LLM.EXPERT_WEIGHTS_NORM, True, "bool")
    _router_groups(spec, p)
    _mla_keys(spec, p)
    _embeddings(spec, p, t)
    for il in range(p["n_layer"]):
        spec.add(tn(MODEL_TENSOR.ATTN_NORM, il), (p["n_embd"],), t.norm)
        _mla_attention(spec, il, p, t)
        spec.add(tn(MODEL_TENSOR.FFN_NORM, il), (p["n_embd"],), t.norm)
        if il < p["n_dense"]:
            _dense_ffn(spec, il, p["n_embd"], p["n_ff"], t)
            continue
        spec.add(tn(MODEL_TENSOR.FFN_GATE_INP, il), (p["n_embd"], p["n_expert"]), t.norm)
        spec.add(tn(MODEL_TENSOR.FFN_EXP_PROBS_B, il, "bias"), (p["n_expert"],), t.norm)
        _experts(spec, il, p["n_embd"], p["n_ff_exp"], p["n_expert"], t)
        _dense_ffn(spec, il, p["n_embd"], p["n_ff_exp"] * p["n_shared"], t, shared=True)
    return spec


def deepseek32(t=Types(), **p):
    """DeepSeek-V3.2 (`deepseek32`): the DeepSeek-V3 layout plus the DSA lightning indexer in every
    block (indexer.k_norm, .proj, .attn_k, .attn_q_b) and `nextn` NextN/MTP blocks at the end
    (llama.cpp src/models/deepseek32.cpp)."""
    p = {"n_layer": 4, "n_embd": 256, "n_head": 4, "n_ff": 512, "n_ff_exp": 128, "n_expert": 16, "top_k": 4,
         "n_shared": 1, "n_dense": 1, "q_lora": 64, "kv_lora": 64, "rope": 16, "qk_nope": 32, "v_head": 32,
         "idx_heads": 4, "idx_head": 64, "idx_top_k": 64, "nextn": 1, "vocab": 1024, "ctx": 4096} | p
    trunk = p["n_layer"]
    spec = deepseek2(t, **(p | {"n_layer": trunk + p["nextn"]}))
    spec.architecture = "deepseek32"
    spec.metadata = [(key.replace("deepseek2.", "deepseek32.", 1), value, kind) for key, value, kind in spec.metadata]
    spec.meta(keys.ATTENTION_INDEXER_HEAD_COUNT, p["idx_heads"])
    spec.meta(keys.ATTENTION_INDEXER_KEY_LENGTH, p["idx_head"])
    spec.meta(keys.ATTENTION_INDEXER_TOP_K, p["idx_top_k"])
    if p["nextn"]:
        spec.meta(Keys.LLM.NEXTN_PREDICT_LAYERS, p["nextn"])
    n_embd = p["n_embd"]
    for il in range(trunk + p["nextn"]):
        _dsa_indexer(spec, il, p, t)
        if il >= trunk:
            _nextn_block(spec, il, n_embd, t)
    return spec


def dots3note(t=Types(), **p):
    """dots.llm3 (`dots3note`): DeepSeek-V3.2's MLA + DSA layout with sliding-window layers of their own
    MLA geometry (`*_swa` keys, `swa` a 0/1 string per trunk layer), the lightning indexer only in the
    layers `indexer.types` marks (the full ones), a norm on the shared rope key (attn_k_norm), a
    head-wise sigmoid output gate (attn_gate) and `nextn` MTP blocks with a dense FFN
    (llama.cpp src/models/dots3note.cpp)."""
    p = {"swa": "0101", "n_embd": 256, "n_head": 4, "n_ff": 512, "n_ff_exp": 128, "n_expert": 16, "top_k": 4,
         "n_shared": 1, "n_dense": 1, "q_lora": 64, "kv_lora": 64, "rope": 32, "qk_nope": 32, "v_head": 32,
         "kv_lora_swa": 32, "qk_nope_swa": 64, "v_head_swa": 64, "window": 128,
         "idx_heads": 4, "idx_head": 64, "idx_top_k": 64, "nextn": 0, "vocab": 1024, "ctx": 4096} | p
    pattern = [int(c) for c in p["swa"]]
    trunk = len(pattern)
    n_block = trunk + p["nextn"]
    spec = ModelSpec("dots3note", [])
    _common(spec, p | {"n_layer": n_block})
    n_embd = p["n_embd"]
    spec.meta(Keys.LLM.FEED_FORWARD_LENGTH, p["n_ff"])
    spec.meta(Keys.Attention.HEAD_COUNT, p["n_head"])
    spec.meta(Keys.Attention.HEAD_COUNT_KV, 1)
    spec.meta(Keys.LLM.EXPERT_COUNT, p["n_expert"])
    spec.meta(Keys.LLM.EXPERT_USED_COUNT, p["top_k"])
    spec.meta(Keys.LLM.EXPERT_GATING_FUNC, 2)
    spec.meta(Keys.LLM.LEADING_DENSE_BLOCK_COUNT, p["n_dense"])
    spec.meta(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH, p["n_ff_exp"])
    spec.meta(Keys.LLM.EXPERT_SHARED_COUNT, p["n_shared"])
    spec.meta(Keys.LLM.EXPERT_WEIGHTS_SCALE, 2.5, "f32")
    spec.meta(Keys.LLM.EXPERT_WEIGHTS_NORM, True, "bool")
    _mla_keys(spec, p)
    spec.meta(keys.ATTENTION_KV_LORA_RANK_SWA, p["kv_lora_swa"])
    spec.meta(Keys.Attention.KEY_LENGTH_SWA, p["kv_lora_swa"] + p["rope"])
    spec.meta(Keys.Attention.VALUE_LENGTH_SWA, p["kv_lora_swa"])
    spec.meta(keys.ATTENTION_KEY_LENGTH_MLA_SWA, p["qk_nope_swa"] + p["rope"])
    spec.meta(keys.ATTENTION_VALUE_LENGTH_MLA_SWA, p["v_head_swa"])
    spec.meta(Keys.Rope.FREQ_BASE_SWA, 10000.0, "f32")
    spec.meta(Keys.Attention.SLIDING_WINDOW, p["window"])
    spec.meta(Keys.Attention.SLIDING_WINDOW_PATTERN, pattern, "u32[]")
    spec.meta(keys.ATTENTION_INDEXER_HEAD_COUNT, p["idx_heads"])
    spec.meta(keys.ATTENTION_INDEXER_KEY_LENGTH, p["idx_head"])
    spec.meta(keys.ATTENTION_INDEXER_TOP_K, p["idx_top_k"])
    spec.meta(keys.ATTENTION_INDEXER_TYPES, [1 - flag for flag in pattern], "u32[]")
    if p["nextn"]:
        spec.meta(Keys.LLM.NEXTN_PREDICT_LAYERS, p["nextn"])
    _embeddings(spec, p, t)
    swa_geometry = {"kv_lora": p["kv_lora_swa"], "qk_nope": p["qk_nope_swa"], "v_head": p["v_head_swa"]}
    for il in range(n_block):
        is_mtp = il >= trunk
        is_swa = is_mtp or pattern[il]  # the NextN block uses the sliding-window geometry
        spec.add(tn(MODEL_TENSOR.ATTN_NORM, il), (n_embd,), t.norm)
        _mla_attention(spec, il, p | swa_geometry if is_swa else p, t)
        spec.add(tn(MODEL_TENSOR.ATTN_K_NORM, il), (p["rope"],), t.norm)
        spec.add(tn(MODEL_TENSOR.ATTN_GATE, il), (n_embd, p["n_head"]), t.resident)
        spec.add(tn(MODEL_TENSOR.FFN_NORM, il), (n_embd,), t.norm)
        if not is_mtp and not pattern[il]:
            _dsa_indexer(spec, il, p, t)
        if is_mtp or il < p["n_dense"]:
            _dense_ffn(spec, il, n_embd, p["n_ff"], t)
        else:
            spec.add(tn(MODEL_TENSOR.FFN_GATE_INP, il), (n_embd, p["n_expert"]), t.norm)
            spec.add(tn(MODEL_TENSOR.FFN_EXP_PROBS_B, il, "bias"), (p["n_expert"],), t.norm)
            _experts(spec, il, n_embd, p["n_ff_exp"], p["n_expert"], t)
            _dense_ffn(spec, il, n_embd, p["n_ff_exp"] * p["n_shared"], t, shared=True)
        if is_mtp:
            _nextn_block(spec, il, n_embd, t)
            spec.add(tn(MODEL_TENSOR.NEXTN_EMBED_TOKENS, il), (n_embd, p["vocab"]), t.embed)
    return spec


def hy_v4(t=Types(), **p):
    """Hunyuan-V4 (`hy_v4`): MLA with attention sinks and an element-wise sigmoid output gate, iHC
    hyper-connections (`hc` residual streams, pre/post mixes only), a leading dense block, experts
    with a shared one, and the DSA lightning indexer in the layers `idx_types` marks (a 0/1 string per
    layer, the first 1: the others reuse the last full layer's top-k; `idx_top_k` 0 writes a
    full-attention checkpoint without an indexer) (llama.cpp src/models/hy-v4.cpp)."""
    p = {"idx_types": "1010", "n_embd": 256, "n_head": 4, "n_ff": 512, "n_ff_exp": 128, "n_expert": 16,
         "top_k": 4, "n_shared": 1, "n_dense": 1, "q_lora": 64, "kv_lora": 64, "rope": 32, "qk_nope": 32,
         "v_head": 32, "idx_heads": 4, "idx_head": 64, "idx_top_k": 64, "hc": 4, "vocab": 1024, "ctx": 4096} | p
    types = [int(c) for c in p["idx_types"]]
    n_layer = len(types)
    spec = ModelSpec("hy_v4", [])
    _common(spec, p | {"n_layer": n_layer})
    n_embd, hc = p["n_embd"], p["hc"]
    spec.meta(Keys.LLM.FEED_FORWARD_LENGTH, p["n_ff"])
    spec.meta(Keys.Attention.HEAD_COUNT, p["n_head"])
    spec.meta(Keys.Attention.HEAD_COUNT_KV, 1)
    spec.meta(Keys.LLM.EXPERT_COUNT, p["n_expert"])
    spec.meta(Keys.LLM.EXPERT_USED_COUNT, p["top_k"])
    spec.meta(Keys.LLM.EXPERT_GATING_FUNC, 2)
    spec.meta(Keys.LLM.LEADING_DENSE_BLOCK_COUNT, p["n_dense"])
    spec.meta(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH, p["n_ff_exp"])
    spec.meta(Keys.LLM.EXPERT_SHARED_COUNT, p["n_shared"])
    spec.meta(Keys.LLM.EXPERT_WEIGHTS_SCALE, 1.0, "f32")
    spec.meta(Keys.LLM.EXPERT_WEIGHTS_NORM, True, "bool")
    spec.meta(Keys.LLM.SWIGLU_CLAMP_EXP, 10.0, "f32")
    spec.meta(keys.HYPER_CONNECTION_COUNT, hc)
    spec.meta(keys.HYPER_CONNECTION_EPSILON, 1e-6, "f32")
    spec.meta(keys.HYPER_CONNECTION_MAGNITUDE, 2.0, "f32")
    _mla_keys(spec, p)
    if p["idx_top_k"]:
        spec.meta(keys.ATTENTION_INDEXER_HEAD_COUNT, p["idx_heads"])
        spec.meta(keys.ATTENTION_INDEXER_KEY_LENGTH, p["idx_head"])
        spec.meta(keys.ATTENTION_INDEXER_TOP_K, p["idx_top_k"])
        spec.meta(keys.ATTENTION_INDEXER_TYPES, types, "u32[]")
    _embeddings(spec, p, t)
    _hc_head(spec, hc, n_embd, t)
    for il in range(n_layer):
        spec.add(tn(MODEL_TENSOR.ATTN_NORM, il), (n_embd,), t.norm)
        spec.add(tn(MODEL_TENSOR.ATTN_SINKS, il), (p["n_head"],), t.norm)
        _mla_attention(spec, il, p, t)
        spec.add(tn(MODEL_TENSOR.ATTN_GATE, il), (n_embd, p["n_head"] * p["v_head"]), t.resident)
        if p["idx_top_k"] and types[il]:
            spec.add(tn(MODEL_TENSOR.INDEXER_ATTN_Q_B, il), (p["q_lora"], p["idx_heads"] * p["idx_head"]), t.resident)
            spec.add(tn(MODEL_TENSOR.INDEXER_ATTN_K, il), (n_embd, p["idx_head"]), t.resident)
            spec.add(tn(MODEL_TENSOR.INDEXER_K_NORM, il), (p["idx_head"],), t.norm)
            spec.add(tn(MODEL_TENSOR.INDEXER_K_NORM, il, "bias"), (p["idx_head"],), t.norm)
            spec.add(tn(MODEL_TENSOR.INDEXER_PROJ, il), (n_embd, p["idx_heads"]), t.norm)
        _hc_mixes(spec, il, hc * n_embd, 2 * hc, 2, t)
        spec.add(tn(MODEL_TENSOR.FFN_NORM, il), (n_embd,), t.norm)
        if il < p["n_dense"]:
            _dense_ffn(spec, il, n_embd, p["n_ff"], t)
            continue
        spec.add(tn(MODEL_TENSOR.FFN_GATE_INP, il), (n_embd, p["n_expert"]), t.norm)
        spec.add(tn(MODEL_TENSOR.FFN_EXP_PROBS_B, il, "bias"), (p["n_expert"],), t.norm)
        _experts(spec, il, n_embd, p["n_ff_exp"], p["n_expert"], t)
        _dense_ffn(spec, il, n_embd, p["n_ff_exp"] * p["n_shared"], t, shared=True)
    return spec


def deepseek4(t=Types(), **p):
    """DeepSeek-V4 (`deepseek4`): one K-only head per token (`key_length` wide, rope on half) with
    attention sinks and a grouped low-rank output (attn_output_a/_b), hyper-connections (`hc` residual
    streams mixed by hc_attn_*/hc_ffn_*), and per layer a compression ratio (`ratios`): 0 sliding
    window only, 4 a CSA compressor plus the lightning indexer's, 128 an HCA compressor; sqrt-softplus
    routed experts with a shared one, `nextn` MTP blocks at the end (llama.cpp src/models/deepseek4.cpp)."""
    p = {"ratios": (0, 0, 4, 128), "n_embd": 512, "n_head": 8, "head": 128, "rope": 32, "q_lora": 64,
         "o_groups": 8, "o_lora": 32, "n_ff_exp": 128, "n_expert": 8, "top_k": 2, "n_shared": 1,
         "idx_heads": 4, "idx_head": 64, "idx_top_k": 512, "hc": 4, "swa": 128, "nextn": 0,
         "vocab": 1024, "ctx": 65536} | p
    ratios = list(p["ratios"])
    n_block = len(ratios)
    trunk = n_block - p["nextn"]
    spec = ModelSpec("deepseek4", [])
    _common(spec, p | {"n_layer": n_block})
    n_embd, n_head, head, hc = p["n_embd"], p["n_head"], p["head"], p["hc"]
    spec.meta(Keys.LLM.FEED_FORWARD_LENGTH, p["n_ff_exp"])
    spec.meta(Keys.Attention.HEAD_COUNT, n_head)
    spec.meta(Keys.Attention.HEAD_COUNT_KV, 1)
    spec.meta(Keys.Attention.KEY_LENGTH, head)
    spec.meta(Keys.Attention.VALUE_LENGTH, head)
    spec.meta(Keys.Rope.DIMENSION_COUNT, p["rope"])
    spec.meta(Keys.Attention.Q_LORA_RANK, p["q_lora"])
    spec.meta(Keys.Attention.SLIDING_WINDOW, p["swa"])
    spec.meta(Keys.LLM.EXPERT_COUNT, p["n_expert"])
    spec.meta(Keys.LLM.EXPERT_USED_COUNT, p["top_k"])
    spec.meta(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH, p["n_ff_exp"])
    spec.meta(Keys.LLM.EXPERT_SHARED_COUNT, p["n_shared"])
    spec.meta(Keys.LLM.EXPERT_WEIGHTS_SCALE, 1.5, "f32")
    spec.meta(Keys.LLM.EXPERT_WEIGHTS_NORM, True, "bool")
    spec.meta(Keys.LLM.EXPERT_GATING_FUNC, 4)  # sqrt(softplus), the only scoring the loader accepts
    spec.meta(Keys.LLM.SWIGLU_CLAMP_EXP, 10.0, "f32")
    spec.meta(keys.ATTENTION_INDEXER_HEAD_COUNT, p["idx_heads"])
    spec.meta(keys.ATTENTION_INDEXER_KEY_LENGTH, p["idx_head"])
    spec.meta(keys.ATTENTION_INDEXER_TOP_K, p["idx_top_k"])
    spec.meta(keys.ATTENTION_OUTPUT_GROUP_COUNT, p["o_groups"])
    spec.meta(keys.ATTENTION_OUTPUT_LORA_RANK, p["o_lora"])
    spec.meta(keys.ATTENTION_COMPRESS_RATIOS, ratios, "u32[]")
    spec.meta(keys.ATTENTION_COMPRESS_ROPE_FREQ_BASE, 160000.0, "f32")
    spec.meta(keys.HYPER_CONNECTION_COUNT, hc)
    spec.meta(keys.HYPER_CONNECTION_SINKHORN_ITERATIONS, 20)
    spec.meta(keys.HYPER_CONNECTION_EPSILON, 1e-6, "f32")
    spec.meta(keys.HASH_LAYER_COUNT, 0)
    spec.meta(Keys.LLM.EMBEDDING_LENGTH_OUT, hc * n_embd)
    if p["nextn"]:
        spec.meta(Keys.LLM.NEXTN_PREDICT_LAYERS, p["nextn"])
    _embeddings(spec, p, t)
    hc_dim, hc_mix = hc * n_embd, (2 + hc) * hc
    _hc_head(spec, hc, n_embd, t)
    for il, ratio in enumerate(ratios):
        spec.add(tn(MODEL_TENSOR.ATTN_NORM, il), (n_embd,), t.norm)
        spec.add(tn(MODEL_TENSOR.ATTN_SINKS, il), (n_head,), t.norm)
        spec.add(tn(MODEL_TENSOR.ATTN_Q_A, il), (n_embd, p["q_lora"]), t.resident)
        spec.add(tn(MODEL_TENSOR.ATTN_Q_A_NORM, il), (p["q_lora"],), t.norm)
        spec.add(tn(MODEL_TENSOR.ATTN_Q_B, il), (p["q_lora"], n_head * head), t.resident)
        spec.add(tn(names.ATTN_KV, il), (n_embd, head), t.resident)
        spec.add(tn(MODEL_TENSOR.ATTN_KV_A_NORM, il), (head,), t.norm)
        # the converter writes wo_a 2-D (the loader reshapes it to [heads x head / groups, o_lora, groups])
        spec.add(tn(names.ATTN_OUT_A, il), (n_head * head // p["o_groups"], p["o_lora"] * p["o_groups"]), t.resident)
        spec.add(tn(names.ATTN_OUT_B, il), (p["o_groups"] * p["o_lora"], n_embd), t.resident)
        _hc_mixes(spec, il, hc_dim, hc_mix, 3, t)
        if ratio:
            coff = 2 if ratio == 4 else 1
            spec.add(tn(names.ATTN_COMPRESSOR_WKV, il), (n_embd, coff * head), t.resident)
            spec.add(tn(names.ATTN_COMPRESSOR_WGATE, il), (n_embd, coff * head), t.resident)
            spec.add(tn(names.ATTN_COMPRESSOR_APE, il), (coff * head, ratio), t.norm)
            spec.add(tn(names.ATTN_COMPRESSOR_NORM, il), (head,), t.norm)
        if ratio == 4:
            idx = p["idx_head"]
            spec.add(tn(MODEL_TENSOR.INDEXER_PROJ, il), (n_embd, p["idx_heads"]), t.norm)
            spec.add(tn(MODEL_TENSOR.INDEXER_ATTN_Q_B, il), (p["q_lora"], p["idx_heads"] * idx), t.resident)
            spec.add(tn(names.INDEXER_COMPRESSOR_WKV, il), (n_embd, 2 * idx), t.resident)
            spec.add(tn(names.INDEXER_COMPRESSOR_WGATE, il), (n_embd, 2 * idx), t.resident)
            spec.add(tn(names.INDEXER_COMPRESSOR_APE, il), (2 * idx, ratio), t.norm)
            spec.add(tn(names.INDEXER_COMPRESSOR_NORM, il), (idx,), t.norm)
        spec.add(tn(MODEL_TENSOR.FFN_GATE_INP, il), (n_embd, p["n_expert"]), t.norm)
        spec.add(tn(MODEL_TENSOR.FFN_EXP_PROBS_B, il, "bias"), (p["n_expert"],), t.norm)
        spec.add(tn(MODEL_TENSOR.FFN_NORM, il), (n_embd,), t.norm)
        _experts(spec, il, n_embd, p["n_ff_exp"], p["n_expert"], t)
        _dense_ffn(spec, il, n_embd, p["n_ff_exp"] * p["n_shared"], t, shared=True)
        if il >= trunk:
            _nextn_block(spec, il, n_embd, t)
    return spec


BUILDERS = {
    "deepseek2": deepseek2,
    "deepseek32": deepseek32,
    "deepseek4": deepseek4,
    "dots3note": dots3note,
    "hy_v4": hy_v4,
    "hy_v3": hy_v3,
    # DeepSeek-OCR's language model: DeepSeek-MoE V1's layout (MHA, shared experts; src/models/deepseek2ocr.cpp)
    "deepseek2-ocr": lambda t=Types(), **p: _renamed(deepseek(t, **p), "deepseek2-ocr"),
    "deepseek": deepseek,
    "hunyuan-moe": hunyuan_moe,
    "dots1": dots1,
}


# Full-size presets (header-only, sparse) of this family, by name: presets.py merges them into synth.PRESETS.
# Types are those of common community quantizations.
PRESETS = {
    "kimi-k2": lambda: deepseek2(
        Types(expert=IQ2_XS, expert_down=IQ3_XXS, resident=Q8_0, embed=Q4_K, output=Q6_K),
        name="Kimi-K2 (synthetic)", n_layer=61, n_embd=7168, n_head=64, n_ff=18432, n_ff_exp=2048,
        n_expert=384, top_k=8, n_dense=1, q_lora=1536, kv_lora=512, rope=64, qk_nope=128, v_head=128,
        vocab=163840, merges=163328, ctx=131072, file_type=17),
    "deepseek-v3": lambda: deepseek2(
        Types(expert=Q4_K, resident=Q8_0, embed=Q4_K, output=Q6_K),
        name="DeepSeek-V3 (synthetic)", n_layer=61, n_embd=7168, n_head=128, n_ff=18432, n_ff_exp=2048,
        n_expert=256, top_k=8, n_dense=3, q_lora=1536, kv_lora=512, rope=64, qk_nope=128, v_head=128,
        vocab=129280, ctx=163840, file_type=15),
    # deepseek-ai/DeepSeek-V3.2 config.json: DeepSeek-V3's widths, an indexer of 64 heads of 128 picking
    # 2048 tokens, one NextN/MTP block (62 blocks in the GGUF). Re-read 2026-12-01 from copies of
    # DeepseekV32ForCausalLM's config.json in public repos (a Rust test fixture `deepseek_v32_config`, a
    # DSA_MODEL_DIMS table): as above, plus n_group 8 / topk_group 4 (grouped routing), which
    # llama.cpp's converter writes as expert_group_count / expert_group_used_count: they were missing.
    "deepseek-v3.2": lambda: deepseek32(
        Types(expert=Q4_K, resident=Q8_0, embed=Q4_K, output=Q6_K),
        name="DeepSeek-V3.2 (synthetic)", n_layer=61, n_embd=7168, n_head=128, n_ff=18432, n_ff_exp=2048,
        n_expert=256, top_k=8, n_dense=3, q_lora=1536, kv_lora=512, rope=64, qk_nope=128, v_head=128,
        idx_heads=64, idx_head=128, idx_top_k=2048, nextn=1, expert_groups=8, expert_groups_used=4, vocab=129280,
        ctx=163840, file_type=15),
}
