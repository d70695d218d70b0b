"""Synthetic builders: RWKV-6/7 layouts.

Each builder returns a ModelSpec in the layout llama.cpp's loader expects (src/models/<arch>.cpp).
`BUILDERS` maps the architecture names (and test aliases) of this family to their tiny builders."""

from gguf.constants import MODEL_TENSOR, Keys

from moetools.synth.blocks import _common, _dense_ffn, _embeddings, _rwkv6_keys, _rwkv6_lerp_and_decay, _rwkv7_time_mix, _rwkv_block_norms, _rwkv_norms
from moetools.synth.names import tn
from moetools.synth.spec import ModelSpec, Types


def rwkv6(t=Types(), **p):
    """RWKV-6 (`rwkv6`): time mix (a data-dependent lerp through time_mix_w1/w2, a low-rank decay, the
    wkv6 state, group norm, silu gate) and channel mix (receptance-gated relu^2) blocks, two token-shift
    rows per layer, no attention cache (llama.cpp src/models/rwkv6.cpp, rwkv6-base.cpp)."""
    p = {"n_layer": 4, "n_embd": 256, "head_size": 64, "n_ff": 896, "mix_extra": 32, "decay_extra": 64,
         "vocab": 1024, "ctx": 1048576} | p
    spec = ModelSpec("rwkv6", [])
    _common(spec, p)
    n_embd, n_ff = p["n_embd"], p["n_ff"]
    spec.meta(Keys.LLM.FEED_FORWARD_LENGTH, n_ff)
    spec.meta(Keys.Attention.LAYERNORM_EPS, 1e-5, "f32")
    _rwkv6_keys(spec, p, 2)
    _rwkv_norms(spec, p, t)
    for il in range(p["n_layer"]):
        _rwkv_block_norms(spec, il, n_embd, t)
        _rwkv6_lerp_and_decay(spec, il, p, t, first=True)
        for kind in (MODEL_TENSOR.TIME_MIX_KEY, MODEL_TENSOR.TIME_MIX_VALUE, MODEL_TENSOR.TIME_MIX_RECEPTANCE,
                     MODEL_TENSOR.TIME_MIX_GATE, MODEL_TENSOR.TIME_MIX_OUTPUT):
            spec.add(tn(kind, il), (n_embd, n_embd), t.resident)
        spec.add(tn(MODEL_TENSOR.CHANNEL_MIX_LERP_K, il), (n_embd, 1, 1), t.norm)
        spec.add(tn(MODEL_TENSOR.CHANNEL_MIX_LERP_R, il), (n_embd, 1, 1), t.norm)
        spec.add(tn(MODEL_TENSOR.CHANNEL_MIX_KEY, il), (n_embd, n_ff), t.resident)
        spec.add(tn(MODEL_TENSOR.CHANNEL_MIX_VALUE, il), (n_ff, n_embd), t.resident)
        spec.add(tn(MODEL_TENSOR.CHANNEL_MIX_RECEPTANCE, il), (n_embd, n_embd), t.resident)
    return spec


def rwkv6qwen2(t=Types(), **p):
    """RWKV-6 on a Qwen2 body (`rwkv6qwen2`, QRWKV6): RMS norms without biases, a one-row token shift
    (token_shift_count 1), the RWKV-6 time mix without time_mix_first (so llama.cpp's gated linear
    attention: sigmoid gate, k * (1 - w), no group norm) whose key/value project to n_head_kv heads
    (repeated to the n_embd / head_size heads), r/k/v biases, and a SwiGLU FFN (llama.cpp
    src/models/rwkv6qwen2.cpp, rwkv6-base.cpp)."""
    p = {"n_layer": 4, "n_embd": 256, "head_size": 64, "n_head_kv": 2, "n_ff": 768, "mix_extra": 32,
         "decay_extra": 64, "vocab": 1024, "ctx": 1048576} | p
    spec = ModelSpec("rwkv6qwen2", [])
    _common(spec, p)
    n_embd, head = p["n_embd"], p["head_size"]
    kv_width = n_embd if p["n_head_kv"] in (0, n_embd // head) else p["n_head_kv"] * head
    spec.meta(Keys.LLM.FEED_FORWARD_LENGTH, p["n_ff"])
    spec.meta(Keys.Attention.HEAD_COUNT, n_embd // head)
    spec.meta(Keys.Attention.HEAD_COUNT_KV, p["n_head_kv"])
    _rwkv6_keys(spec, p, 1)
    _embeddings(spec, p, t)
    for il in range(p["n_layer"]):
        spec.add(tn(MODEL_TENSOR.ATTN_NORM, il), (n_embd,), t.norm)
        _rwkv6_lerp_and_decay(spec, il, p, t)
        spec.add(tn(MODEL_TENSOR.TIME_MIX_KEY, il), (n_embd, kv_width), t.resident)
        spec.add(tn(MODEL_TENSOR.TIME_MIX_VALUE, il), (n_embd, kv_width), t.resident)
        for kind in (MODEL_TENSOR.TIME_MIX_RECEPTANCE, MODEL_TENSOR.TIME_MIX_GATE, MODEL_TENSOR.TIME_MIX_OUTPUT):
            spec.add(tn(kind, il), (n_embd, n_embd), t.resident)
        for kind, width in ((MODEL_TENSOR.TIME_MIX_KEY, kv_width), (MODEL_TENSOR.TIME_MIX_VALUE, kv_width),
                            (MODEL_TENSOR.TIME_MIX_RECEPTANCE, n_embd)):
            spec.add(tn(kind, il, "bias"), (width,), t.norm)
        spec.add(tn(MODEL_TENSOR.FFN_NORM, il), (n_embd,), t.norm)
        _dense_ffn(spec, il, n_embd, p["n_ff"], t)
    return spec


def rwkv7(t=Types(), **p):
    """RWKV-7 (`rwkv7`): time-mix (the wkv state) and channel-mix blocks, no attention cache
    (llama.cpp src/models/rwkv7.cpp)."""
    p = {"n_layer": 4, "n_embd": 256, "head_size": 64, "n_ff": 1024, "lora_decay": 32, "lora_iclr": 32,
         "lora_value": 32, "lora_gate": 64, "vocab": 1024, "ctx": 1048576} | p
    spec = ModelSpec("rwkv7", [])
    _common(spec, p)
    n_embd = p["n_embd"]
    spec.meta(Keys.LLM.FEED_FORWARD_LENGTH, p["n_ff"])
    spec.meta(Keys.Attention.LAYERNORM_EPS, 1e-5, "f32")
    spec.meta(Keys.WKV.HEAD_SIZE, p["head_size"])
    spec.meta(Keys.Attention.DECAY_LORA_RANK, p["lora_decay"])
    spec.meta(Keys.Attention.ICLR_LORA_RANK, p["lora_iclr"])
    spec.meta(Keys.Attention.VALUE_RESIDUAL_MIX_LORA_RANK, p["lora_value"])
    spec.meta(Keys.Attention.GATE_LORA_RANK, p["lora_gate"])
    _rwkv_norms(spec, p, t)
    for il in range(p["n_layer"]):
        _rwkv_block_norms(spec, il, n_embd, t)
        _rwkv7_time_mix(spec, il, p, t)
        spec.add(tn(MODEL_TENSOR.CHANNEL_MIX_LERP_K, il), (n_embd, 1, 1), t.norm)
        spec.add(tn(MODEL_TENSOR.CHANNEL_MIX_KEY, il), (n_embd, p["n_ff"]), t.resident)
        spec.add(tn(MODEL_TENSOR.CHANNEL_MIX_VALUE, il), (p["n_ff"], n_embd), t.resident)
    return spec


def arwkv7(t=Types(), **p):
    """ARWKV-7 (`arwkv7`, RWKV-7 time mix on a Qwen2.5 body): RMS norms without biases, a one-row token
    shift (token_shift_count 1), the RWKV-7 time mix without its group norm, and a SwiGLU FFN
    (llama.cpp src/models/arwkv7.cpp)."""
    p = {"n_layer": 4, "n_embd": 256, "head_size": 64, "n_ff": 1024, "lora_decay": 32, "lora_iclr": 32,
         "lora_value": 32, "lora_gate": 64, "vocab": 1024, "ctx": 1048576} | p
    spec = ModelSpec("arwkv7", [])
    _common(spec, p)
    n_embd = p["n_embd"]
    spec.meta(Keys.LLM.FEED_FORWARD_LENGTH, p["n_ff"])
    spec.meta(Keys.WKV.HEAD_SIZE, p["head_size"])
    spec.meta(Keys.LLM.TOKEN_SHIFT_COUNT, 1)
    spec.meta(Keys.Attention.DECAY_LORA_RANK, p["lora_decay"])
    spec.meta(Keys.Attention.ICLR_LORA_RANK, p["lora_iclr"])
    spec.meta(Keys.Attention.VALUE_RESIDUAL_MIX_LORA_RANK, p["lora_value"])
    spec.meta(Keys.Attention.GATE_LORA_RANK, p["lora_gate"])
    _embeddings(spec, p, t)
    for il in range(p["n_layer"]):
        spec.add(tn(MODEL_TENSOR.ATTN_NORM, il), (n_embd,), t.norm)
        _rwkv7_time_mix(spec, il, p, t)
        spec.add(tn(MODEL_TENSOR.FFN_NORM, il), (n_embd,), t.norm)
        _dense_ffn(spec, il, n_embd, p["n_ff"], t)
    return spec


BUILDERS = {
    "rwkv7": rwkv7,
    "arwkv7": arwkv7,
    "rwkv6": rwkv6,
    "rwkv6qwen2": rwkv6qwen2,
}


PRESETS = {}  # no full-size presets of this family
