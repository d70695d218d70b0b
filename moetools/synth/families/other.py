"""Synthetic builders: Other MoE layouts (gpt-oss, ERNIE, Ling, Step, MiMo, AFMoE, SmallThinker, Cohere, EXAONE, GroveMoE).

Each builder returns a ModelSpec in the layout llama.cpp's loader expects (src/models/<arch>.cpp).
`BUILDERS` maps the architecture names (and test aliases) of this family to their tiny builders."""

from gguf.constants import MODEL_TENSOR, Keys

import moetools.synth.keys as keys
from moetools.synth.blocks import _common, _dense_ffn, _dense_lead_moe_blocks, _embeddings, _experts, _fuse_qkv, _gqa_attention, _gqa_keys, _nextn_block, _renamed, _shared_experts_moe
from moetools.synth.families.llama import llama_moe
from moetools.synth.families.qwen import qwen3moe
from moetools.synth.names import parse, tn
from moetools.synth.spec import F32, MXFP4, Q8_0, ModelSpec, TensorSpec, Types


def ernie4_5_moe(t=Types(), **p):
    """ERNIE-4.5 MoE (`ernie4_5-moe`, ERNIE-4.5-21B-A3B): GQA attention without q/k norms, `n_dense`
    leading dense blocks, then routed experts with a selection bias and a shared expert, weights always
    normalised (llama.cpp src/models/ernie4-5.cpp, ernie4-5-moe.cpp)."""
    p = {"n_layer": 4, "n_embd": 256, "n_head": 4, "n_head_kv": 2, "n_ff": 512, "n_ff_exp": 128, "n_ff_shexp": 256,
         "n_expert": 16, "top_k": 4, "n_dense": 1, "vocab": 1024, "ctx": 4096, "rope_base": 5e5} | p
    spec = ModelSpec("ernie4_5-moe", [])
    _common(spec, p)
    head, n_embd = p["n_embd"] // p["n_head"], p["n_embd"]
    _gqa_keys(spec, p, p["n_ff"])
    spec.meta(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH, p["n_ff_exp"])
    spec.meta(Keys.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH, p["n_ff_shexp"])
    spec.meta(Keys.LLM.INTERLEAVE_MOE_LAYER_STEP, 1)
    spec.meta(Keys.LLM.LEADING_DENSE_BLOCK_COUNT, p["n_dense"])
    _dense_lead_moe_blocks(spec, p, t, head, probs_bias=True)
    return spec


def bailingmoe2(t=Types(), **p):
    """Ling/Ring-2.0 (`bailingmoe2`): a fused qkv with per-head q/k norms and partial rotary, leading dense
    blocks, sigmoid-routed experts with a selection bias and normalised weights beside shared experts
    (llama.cpp src/models/bailingmoe2.cpp)."""
    p = {"n_head_kv": 2} | p
    spec = _shared_experts_moe("bailingmoe2", t, p, 2.5, probs_bias=True, qk_norm=True,
                               extra=(("expert_weights_norm", True, "bool"), ("expert_gating_func", 2, "u32")))
    head = spec.tensors[0].shape[0] // p.get("n_head", 4)
    spec.meta(Keys.Rope.DIMENSION_COUNT, head // 2)
    return _fuse_qkv(spec)


def step35(t=Types(), **p):
    """Step-3.5-Flash (`step35`): sliding-window and full-attention layers (`pattern`, S/F per layer) with
    their own query-head counts (`head_count` per layer), per-head q/k norms, a head-wise sigmoid gate on
    the attention output, a leading dense block, then sigmoid-routed experts with a selection bias beside
    a shared expert (llama.cpp src/models/step35.cpp)."""
    p = {"n_layer": 4, "n_embd": 256, "heads_full": 4, "heads_swa": 6, "n_head_kv": 2, "head": 64, "n_ff": 512,
         "n_ff_exp": 128, "n_ff_shexp": 128, "n_expert": 16, "top_k": 4, "n_dense": 1, "pattern": "FSSS",
         "swa": 128, "vocab": 1024, "ctx": 4096, "rope_base": 5e6, "nextn": 0, "mtp_pattern": None} | p
    if p["nextn"]:  # the MTP blocks' layer types (F/S) follow the trunk's in `pattern` (the converter pads with F)
        p["pattern"] = p["pattern"] + (p["mtp_pattern"] or "F" * p["nextn"])
    p["n_layer"] = len(p["pattern"])
    trunk = p["n_layer"] - p["nextn"]
    spec = ModelSpec("step35", [])
    _common(spec, p)
    n_embd, head = p["n_embd"], p["head"]
    heads = [p["heads_full"] if c == "F" else p["heads_swa"] for c in p["pattern"]]
    spec.meta(Keys.LLM.FEED_FORWARD_LENGTH, p["n_ff"])
    spec.meta(Keys.Attention.HEAD_COUNT, heads, "u32[]")
    spec.meta(Keys.Attention.HEAD_COUNT_KV, p["n_head_kv"])
    spec.meta(Keys.Attention.KEY_LENGTH, head)
    spec.meta(Keys.Attention.VALUE_LENGTH, head)
    spec.meta(Keys.Rope.DIMENSION_COUNT, head)
    spec.meta(Keys.LLM.EXPERT_COUNT, p["n_expert"])
    spec.meta(Keys.LLM.EXPERT_USED_COUNT, p["top_k"])
    spec.meta(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH, p["n_ff_exp"])
    spec.meta(Keys.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH, p["n_ff_shexp"])
    spec.meta(Keys.LLM.EXPERT_WEIGHTS_NORM, True, "bool")
    spec.meta(Keys.LLM.EXPERT_WEIGHTS_SCALE, 3.0, "f32")
    spec.meta(Keys.Attention.SLIDING_WINDOW, p["swa"])
    spec.meta(Keys.Attention.SLIDING_WINDOW_PATTERN, [c == "S" for c in p["pattern"]], "bool[]")
    _embeddings(spec, p, t)
    for il, n_head in enumerate(heads):
        spec.add(tn(MODEL_TENSOR.ATTN_NORM, il), (n_embd,), t.norm)
        _gqa_attention(spec, il, p | {"n_head": n_head}, head, t)
        spec.add(tn(MODEL_TENSOR.ATTN_Q_NORM, il), (head,), t.norm)
        spec.add(tn(MODEL_TENSOR.ATTN_K_NORM, il), (head,), t.norm)
        spec.add(tn(MODEL_TENSOR.ATTN_GATE, il), (n_embd, n_head), t.resident)
        spec.add(tn(MODEL_TENSOR.FFN_NORM, il), (n_embd,), t.norm)
        if il < p["n_dense"]:
            _dense_ffn(spec, il, n_embd, p["n_ff"], t)
            continue
        spec.add(tn(MODEL_TENSOR.FFN_GATE_INP, il), (n_embd, p["n_expert"]), t.norm)
        spec.add(tn(MODEL_TENSOR.FFN_EXP_PROBS_B, il, "bias"), (p["n_expert"],), F32)
        _experts(spec, il, n_embd, p["n_ff_exp"], p["n_expert"], t)
        _dense_ffn(spec, il, n_embd, p["n_ff_shexp"], t, shared=True)
        if il >= trunk:  # each MTP block has its own shared head (norm and LM head: conversion/step3.py)
            _nextn_block(spec, il, n_embd, t)
            spec.add(tn(MODEL_TENSOR.NEXTN_SHARED_HEAD_HEAD, il), (n_embd, p["vocab"]), t.output)
    if p["nextn"]:
        spec.meta(Keys.LLM.NEXTN_PREDICT_LAYERS, p["nextn"])
    return spec


def mimo2(t=Types(), **p):
    """MiMo-V2-Flash (`mimo2`): sliding-window and full layers (`pattern`) with their own key/value head
    counts, keys wider than values, attention sinks, scaled values, a leading dense block, then
    sigmoid-routed experts with a selection bias (llama.cpp src/models/mimo2.cpp). `nextn` MTP blocks
    after the trunk as conversion/mimo.py writes them: sliding-window layers (the pattern and the
    per-layer head_count_kv extended), one fused attn_qkv (`nextn_fused`: the MTP graph asserts it), a
    dense FFN, the NextN fusion tensors and layer_output_norm (the checkpoint's final_layernorm)."""
    p = {"n_layer": 4, "n_embd": 256, "n_head": 4, "kv_full": 2, "kv_swa": 4, "k_head": 96, "v_head": 64, "n_ff": 512,
         "n_ff_exp": 128, "n_expert": 16, "top_k": 4, "n_dense": 1, "pattern": "FSSS", "swa": 128, "vocab": 1024,
         "ctx": 4096, "rope_base": 5e6, "nextn": 0, "nextn_fused": True} | p
    spec = ModelSpec("mimo2", [])
    trunk = len(p["pattern"])
    pattern = p["pattern"] + "S" * p["nextn"]
    _common(spec, p | {"n_layer": len(pattern)})
    n_embd, k_head, v_head, n_head = p["n_embd"], p["k_head"], p["v_head"], p["n_head"]
    kv_heads = [p["kv_full"] if c == "F" else p["kv_swa"] for c in pattern]
    spec.meta(Keys.LLM.FEED_FORWARD_LENGTH, p["n_ff"])
    spec.meta(Keys.Attention.HEAD_COUNT, n_head)
    spec.meta(Keys.Attention.HEAD_COUNT_KV, kv_heads, "u32[]")
    spec.meta(Keys.Attention.KEY_LENGTH, k_head)
    spec.meta(Keys.Attention.VALUE_LENGTH, v_head)
    spec.meta(Keys.Rope.DIMENSION_COUNT, k_head // 2)
    spec.meta(Keys.LLM.EXPERT_COUNT, p["n_expert"])
    spec.meta(Keys.LLM.EXPERT_USED_COUNT, p["top_k"])
    spec.meta(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH, p["n_ff_exp"])
    spec.meta(Keys.Attention.SLIDING_WINDOW, p["swa"])
    spec.meta(Keys.Attention.SLIDING_WINDOW_PATTERN, [c == "S" for c in pattern], "bool[]")
    spec.meta(keys.ATTENTION_VALUE_SCALE, 0.707, "f32")
    if p["nextn"]:
        spec.meta(Keys.LLM.NEXTN_PREDICT_LAYERS, p["nextn"])
    _embeddings(spec, p, t)
    for il, n_kv in enumerate(kv_heads):
        spec.add(tn(MODEL_TENSOR.ATTN_NORM, il), (n_embd,), t.norm)
        if il >= trunk and p["nextn_fused"]:
            spec.add(tn(MODEL_TENSOR.ATTN_QKV, il), (n_embd, n_head * k_head + n_kv * (k_head + v_head)), t.resident)
        else:
            spec.add(tn(MODEL_TENSOR.ATTN_Q, il), (n_embd, n_head * k_head), t.resident)
            spec.add(tn(MODEL_TENSOR.ATTN_K, il), (n_embd, n_kv * k_head), t.resident)
            spec.add(tn(MODEL_TENSOR.ATTN_V, il), (n_embd, n_kv * v_head), t.resident)
        spec.add(tn(MODEL_TENSOR.ATTN_OUT, il), (n_head * v_head, n_embd), t.resident)
        spec.add(tn(MODEL_TENSOR.ATTN_SINKS, il), (n_head,), F32)
        spec.add(tn(MODEL_TENSOR.FFN_NORM, il), (n_embd,), t.norm)
        if il >= trunk:
            _dense_ffn(spec, il, n_embd, p["n_ff"], t)
            spec.add(tn(MODEL_TENSOR.NEXTN_EH_PROJ, il), (2 * n_embd, n_embd), t.resident)
            spec.add(tn(MODEL_TENSOR.NEXTN_ENORM, il), (n_embd,), t.norm)
            spec.add(tn(MODEL_TENSOR.NEXTN_HNORM, il), (n_embd,), t.norm)
            spec.add(tn(MODEL_TENSOR.LAYER_OUT_NORM, il), (n_embd,), t.norm)
            continue
        if il < p["n_dense"]:
            _dense_ffn(spec, il, n_embd, p["n_ff"], t)
            continue
        spec.add(tn(MODEL_TENSOR.FFN_GATE_INP, il), (n_embd, p["n_expert"]), t.norm)
        spec.add(tn(MODEL_TENSOR.FFN_EXP_PROBS_B, il, "bias"), (p["n_expert"],), F32)
        _experts(spec, il, n_embd, p["n_ff_exp"], p["n_expert"], t)
    return spec


def afmoe(t=Types(), **p):
    """Arcee Trinity (`afmoe`): GQA with per-head q/k norms and a sigmoid gate on the attention output,
    norms before and after attention and FFN, three sliding-window layers to one full (`swa` tokens),
    a leading dense block, then sigmoid-routed experts with a selection bias beside shared experts
    (llama.cpp src/models/afmoe.cpp)."""
    p = {"n_head_kv": 2, "n_shared": 1, "swa": 128} | p
    spec = _shared_experts_moe("afmoe", t, p, 2.5, probs_bias=True, qk_norm=True,
                               extra=(("expert_weights_norm", True, "bool"), ("expert_gating_func", 2, "u32"),
                                      ("attention.sliding_window", p["swa"], "u32")))
    # the gate beside attn_q (its shape), the post norms beside the pre norms
    beside = {MODEL_TENSOR.ATTN_Q: MODEL_TENSOR.ATTN_GATE, MODEL_TENSOR.ATTN_NORM: MODEL_TENSOR.ATTN_POST_NORM,
              MODEL_TENSOR.FFN_NORM: MODEL_TENSOR.FFN_POST_NORM}
    extra = []
    for tensor in spec.tensors:
        kind, il, _ = parse(tensor.name)
        if kind in beside:
            extra.append(TensorSpec(tn(beside[kind], il), tensor.shape, tensor.type_id))
    spec.tensors += extra
    return spec


def smallthinker(t=Types(), **p):
    """SmallThinker (`smallthinker`): the llama layout with routed experts whose router reads the layer
    input before attention; with `attention.sliding_window` set, three 4096-token sliding-window layers
    to one full one, the full ones without rope (llama.cpp src/models/smallthinker.cpp)."""
    p = {"swa": 4096, "n_ff_exp": 128} | p
    spec = llama_moe(t, **(p | {"arch": "smallthinker", "n_ff": p["n_ff_exp"]}))
    spec.meta(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH, p["n_ff_exp"])
    spec.meta(Keys.LLM.EXPERT_GATING_FUNC, 2)
    if p["swa"]:
        spec.meta(Keys.Attention.SLIDING_WINDOW, p["swa"])
    return spec


def cohere2moe(t=Types(), **p):
    """Cohere Command MoE (`cohere2moe`): parallel attention and FFN from one norm, three sliding-window
    layers to one full, a logit scale, a leading dense block, then sigmoid-routed experts beside a shared
    expert (llama.cpp src/models/cohere2moe.cpp). `nextn` MTP blocks after the trunk as
    conversion/command_r.py writes them (block_count grown, nextn_predict_layers): full-attention MoE
    blocks (set_swa_pattern leaves them full) with the NextN fusion tensors (`nextn_fusion`: False
    leaves them out, a checkpoint converted without its MTP weights)."""
    p = {"n_layer": 4, "n_embd": 256, "n_head": 4, "n_head_kv": 2, "n_ff": 512, "n_ff_exp": 128, "n_shared": 1,
         "n_expert": 16, "top_k": 4, "n_dense": 1, "swa": 128, "vocab": 1024, "ctx": 4096, "rope_base": 5e4,
         "nextn": 0, "nextn_fusion": True} | p
    spec = ModelSpec("cohere2moe", [])
    trunk, n_all = p["n_layer"], p["n_layer"] + p["nextn"]
    _common(spec, p | {"n_layer": n_all})
    n_embd, head = p["n_embd"], p["n_embd"] // p["n_head"]
    _gqa_keys(spec, p, p["n_ff"])
    for key, value, kind in (("attention.sliding_window", p["swa"], "u32"), ("logit_scale", 0.125, "f32"),
                             ("leading_dense_block_count", p["n_dense"], "u32"),
                             ("expert_feed_forward_length", p["n_ff_exp"], "u32"),
                             ("expert_shared_count", p["n_shared"], "u32"), ("expert_weights_norm", True, "bool")):
        spec.meta("{arch}." + key, value, kind)
    if p["nextn"]:
        spec.meta(Keys.LLM.NEXTN_PREDICT_LAYERS, p["nextn"])
    _embeddings(spec, p, t)
    for il in range(n_all):
        spec.add(tn(MODEL_TENSOR.ATTN_NORM, il), (n_embd,), t.norm)
        _gqa_attention(spec, il, p, head, t)
        if il < p["n_dense"]:
            _dense_ffn(spec, il, n_embd, p["n_ff"], t)
            continue
        spec.add(tn(MODEL_TENSOR.FFN_GATE_INP, il), (n_embd, p["n_expert"]), t.norm)
        _experts(spec, il, n_embd, p["n_ff_exp"], p["n_expert"], t)
        _dense_ffn(spec, il, n_embd, p["n_ff_exp"] * p["n_shared"], t, shared=True)
        if il >= trunk and p["nextn_fusion"]:
            spec.add(tn(MODEL_TENSOR.NEXTN_EH_PROJ, il), (2 * n_embd, n_embd), t.resident)
            spec.add(tn(MODEL_TENSOR.NEXTN_ENORM, il), (n_embd,), t.norm)
            spec.add(tn(MODEL_TENSOR.NEXTN_HNORM, il), (n_embd,), t.norm)
    return spec


def exaone_moe(t=Types(), **p):
    """EXAONE MoE (`exaone-moe`): GQA with per-head q/k norms, three sliding-window layers to one full, a
    leading dense block, then sigmoid-routed experts with a selection bias beside a shared expert
    (llama.cpp src/models/exaone-moe.cpp)."""
    p = {"n_head_kv": 2, "n_shared": 1, "swa": 128} | p
    return _shared_experts_moe("exaone-moe", t, p, 2.5, probs_bias=True, qk_norm=True,
                               extra=(("expert_weights_norm", True, "bool"), ("expert_gating_func", 2, "u32"),
                                      ("attention.sliding_window", p["swa"], "u32")))


def exaone4(t=Types(), **p):
    """EXAONE-4.0 (`exaone4`): post-norm blocks (attention and FFN outputs RMS-normed before their
    residual adds, no pre-norms), GQA with per-head q/k norms, a dense SwiGLU FFN. llama.cpp's loader
    gives only the 64-block model (EXAONE-4.0-32B) sliding-window layers: three to one full (unroped)
    layer, a 4096 window unless `attention.sliding_window` says otherwise (src/models/exaone4.cpp)."""
    p = {"n_layer": 64, "n_embd": 256, "n_head": 4, "n_head_kv": 2, "head": 64, "n_ff": 512, "swa": 128,
         "vocab": 1024, "ctx": 8192, "rope_base": 1e6} | p
    spec = ModelSpec("exaone4", [])
    _common(spec, p)
    n_embd, head = p["n_embd"], p["head"]
    _gqa_keys(spec, p, p["n_ff"], head)
    spec.meta(Keys.Rope.DIMENSION_COUNT, head)
    if p["swa"]:
        spec.meta(Keys.Attention.SLIDING_WINDOW, p["swa"])
    _embeddings(spec, p, t)
    for il in range(p["n_layer"]):
        _gqa_attention(spec, il, p | {"n_embd": n_embd}, head, t)
        spec.add(tn(MODEL_TENSOR.ATTN_Q_NORM, il), (head,), t.norm)
        spec.add(tn(MODEL_TENSOR.ATTN_K_NORM, il), (head,), t.norm)
        spec.add(tn(MODEL_TENSOR.ATTN_POST_NORM, il), (n_embd,), t.norm)
        _dense_ffn(spec, il, n_embd, p["n_ff"], t)
        spec.add(tn(MODEL_TENSOR.FFN_POST_NORM, il), (n_embd,), t.norm)
    return spec


def grovemoe(t=Types(), **p):
    """GroveMoE (`grovemoe`): the qwen3moe layout plus adjugate "chunk" experts, one per group of
    `experts_per_group` routed experts, `n_ff_chexp` wide (llama.cpp src/models/grovemoe.cpp)."""
    p = {"n_ff_chexp": 64, "per_group": 2} | p
    spec = _renamed(qwen3moe(t, **p), "grovemoe")
    spec.meta(Keys.LLM.EXPERT_CHUNK_FEED_FORWARD_LENGTH, p["n_ff_chexp"])
    spec.meta(Keys.LLM.EXPERT_GROUP_SCALE, 0.05, "f32")
    spec.meta(Keys.LLM.EXPERTS_PER_GROUP, p["per_group"])
    n_embd = spec.tensors[0].shape[0]
    n_chunk = p.get("n_expert", 16) // p["per_group"]
    tensors = []
    for tensor in spec.tensors:
        tensors.append(tensor)
        kind, il, _ = parse(tensor.name)
        if kind == MODEL_TENSOR.FFN_DOWN_EXP:
            c = p["n_ff_chexp"]
            for part, shape in ((MODEL_TENSOR.FFN_GATE_CHEXP, (n_embd, c, n_chunk)),
                                (MODEL_TENSOR.FFN_UP_CHEXP, (n_embd, c, n_chunk)),
                                (MODEL_TENSOR.FFN_DOWN_CHEXP, (c, n_embd, n_chunk))):
                tensors.append(TensorSpec(tn(part, il), shape, t.expert))
    spec.tensors = tensors
    return spec


def bailingmoe(t=Types(), **p):
    """Ling-1.x (`bailingmoe`): GQA, softmax-routed experts beside shared experts in every block
    (llama.cpp src/models/bailingmoe.cpp)."""
    p = {"n_head_kv": 2, "n_dense": 0} | p
    spec = _shared_experts_moe("bailingmoe", t, p, 1.0, probs_bias=False, extra=(("expert_weights_norm", True, "bool"),))
    spec.meta(Keys.Rope.DIMENSION_COUNT, spec.tensors[0].shape[0] // p.get("n_head", 4))
    return spec


def laguna(t=Types(), **p):
    """Laguna (`laguna`, XS.2): step35's layout (full / sliding-window / sliding-window / sliding-window
    with their own query-head counts, a per-head sigmoid gate, a leading dense block, sigmoid routing with
    a selection bias beside a shared expert) under its own loader (llama.cpp src/models/laguna.cpp)."""
    p = {"n_dense": 1} | p
    spec = _renamed(step35(t, **p), "laguna")
    spec.meta(Keys.LLM.LEADING_DENSE_BLOCK_COUNT, p["n_dense"])
    return spec


def gpt_oss(t=Types(), **p):
    """gpt-oss: sliding window on alternate layers, attention sinks, biases everywhere, expert biases."""
    p = {"n_layer": 4, "n_embd": 256, "n_head": 4, "n_head_kv": 2, "head": 64, "n_ff_exp": 128, "n_expert": 16,
         "top_k": 4, "swa": 128, "vocab": 1024, "ctx": 131072, "rope_base": 150000.0} | p
    spec = ModelSpec("gpt-oss", [])
    _common(spec, p)
    head = p["head"]
    _gqa_keys(spec, p, p["n_ff_exp"], head)
    spec.meta(Keys.Attention.SLIDING_WINDOW, p["swa"])
    spec.meta(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH, p["n_ff_exp"])
    _embeddings(spec, p, t)
    for il in range(p["n_layer"]):
        n_embd = p["n_embd"]
        spec.add(tn(MODEL_TENSOR.ATTN_NORM, il), (n_embd,), t.norm)
        _gqa_attention(spec, il, p, head, t, bias=True)
        spec.add(tn(MODEL_TENSOR.ATTN_SINKS, il), (p["n_head"],), t.norm)
        spec.add(tn(MODEL_TENSOR.ATTN_POST_NORM, il), (n_embd,), t.norm)
        spec.add(tn(MODEL_TENSOR.FFN_GATE_INP, il), (n_embd, p["n_expert"]), t.norm)
        spec.add(tn(MODEL_TENSOR.FFN_GATE_INP, il, "bias"), (p["n_expert"],), t.norm)
        _experts(spec, il, n_embd, p["n_ff_exp"], p["n_expert"], t, bias=True)
    return spec


BUILDERS = {
    "gpt-oss": gpt_oss,
    "exaone4": exaone4,
    "bailingmoe2": bailingmoe2,
    "step35": step35,
    "mimo2": mimo2,
    "afmoe": afmoe,
    "smallthinker": smallthinker,
    "cohere2moe": cohere2moe,
    "exaone-moe": exaone_moe,
    "grovemoe": grovemoe,
    "bailingmoe": bailingmoe,
    "laguna": laguna,
    "ernie4_5-moe": ernie4_5_moe,
}


# Full-size presets (header-only, sparse) of this family, by name: presets.py merges them into synth.PRESETS.
# Types are those of common community quantizations.
PRESETS = {
    "gpt-oss-120b": lambda: gpt_oss(
        Types(expert=MXFP4, resident=Q8_0, embed=Q8_0, output=Q8_0),
        name="gpt-oss-120b (synthetic)", n_layer=36, n_embd=2880, n_head=64, n_head_kv=8, head=64,
        n_ff_exp=2880, n_expert=128, top_k=4, swa=128, vocab=201088, ctx=131072, file_type=38),
}
