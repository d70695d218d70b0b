"""Synthetic builders: Kimi KDA hybrids (kimi-k3, kimi-linear) and bailingmoe3.

Each builder returns a ModelSpec in the layout llama.cpp's loader expects (src/models/<arch>.cpp).
`BUILDERS` maps the architecture names (and test aliases) of this family to their tiny builders."""

from gguf.constants import MODEL_TENSOR, Keys

import moetools.synth.keys as keys
import moetools.synth.names as names
from moetools.synth.blocks import _common, _dense_ffn, _embeddings, _experts, _kda_block, _kda_qkv, _kimi_keys, _mla_attention
from moetools.synth.names import tn
from moetools.synth.spec import IQ2_XS, IQ3_XXS, Q4_K, Q6_K, Q8_0, ModelSpec, Types


def kimi_k3(t=Types(), **p):
    """llama.cpp's `kimi-k3`: KDA recurrent layers (head_count_kv 0) and MLA layers, one leading dense
    block, a shared expert, and a latent MoE whose routed experts run at expert_latent_length."""
    p = {"n_layer": 8, "n_embd": 256, "n_head": 4, "kda_head": 64, "conv": 4, "n_ff": 512, "n_ff_exp": 128,
         "latent": 128, "n_expert": 16, "top_k": 4, "n_shared": 1, "n_dense": 1, "q_lora": 64, "kv_lora": 64,
         "rope": 16, "qk_nope": 32, "v_head": 32, "full_every": 4, "vocab": 1024, "ctx": 4096} | p
    spec = ModelSpec("kimi-k3", [])
    _common(spec, p)
    n_layer, n_embd, n_head = p["n_layer"], p["n_embd"], p["n_head"]
    # KimiLinearConfig: full-attention layers are 1-indexed multiples of `full_every`; the rest are KDA.
    is_mla = [(il + 1) % p["full_every"] == 0 for il in range(n_layer)]
    _kimi_keys(spec, p, is_mla, k3=True)
    spec.meta(keys.EXPERT_LATENT_LENGTH, p["latent"])
    spec.meta(keys.ACTIVATION_SITU_BETA, 1.0, "f32")
    spec.meta(keys.ACTIVATION_SITU_LINEAR_BETA, 0.5, "f32")
    spec.meta(keys.ATTN_RES_BLOCK_SIZE, 8)
    _embeddings(spec, p, t)
    spec.add(tn(names.OUTPUT_RES_SCORE), (n_embd,), t.norm)
    for il in range(n_layer):
        spec.add(tn(MODEL_TENSOR.ATTN_NORM, il), (n_embd,), t.norm)
        spec.add(tn(MODEL_TENSOR.FFN_NORM, il), (n_embd,), t.norm)
        spec.add(tn(names.ATTN_RES_SCORE, il), (n_embd,), t.norm)
        spec.add(tn(names.FFN_RES_SCORE, il), (n_embd,), t.norm)
        if is_mla[il]:
            _mla_attention(spec, il, p, t)
            spec.add(tn(MODEL_TENSOR.ATTN_GATE, il), (n_embd, n_head * p["v_head"]), t.resident)
        else:
            _kda_block(spec, il, p, t, factored_gate=False)
        if il < p["n_dense"]:
            _dense_ffn(spec, il, n_embd, p["n_ff"], t)
            continue
        spec.add(tn(MODEL_TENSOR.FFN_GATE_INP, il), (n_embd, p["n_expert"]), t.norm)
        spec.add(tn(MODEL_TENSOR.FFN_EXP_PROBS_B, il, "bias"), (p["n_expert"],), t.norm)
        _experts(spec, il, p["latent"], p["n_ff_exp"], p["n_expert"], t)
        spec.add(tn(names.FFN_ROUTED_DOWN, il), (n_embd, p["latent"]), t.resident)
        spec.add(tn(names.FFN_ROUTED_UP, il), (p["latent"], n_embd), t.resident)
        spec.add(tn(names.FFN_ROUTED_NORM, il), (p["latent"],), t.norm)
        _dense_ffn(spec, il, n_embd, p["n_ff_exp"] * p["n_shared"], t, shared=True)
    return spec


def kimi_linear(t=Types(), **p):
    """llama.cpp's `kimi-linear` (src/models/kimi-linear.cpp): KDA recurrent layers (head_count_kv 0)
    with a factored output gate (ssm_g_a / ssm_g_b) and NoPE MLA layers every `full_every`, one leading
    dense block, then a sigmoid-routed MoE with a shared expert."""
    p = {"n_layer": 8, "n_embd": 256, "n_head": 4, "kda_head": 64, "conv": 4, "n_ff": 512, "n_ff_exp": 128,
         "n_expert": 16, "top_k": 4, "n_shared": 1, "n_dense": 1, "q_lora": 0, "kv_lora": 64, "rope": 16,
         "qk_nope": 32, "v_head": 32, "full_every": 4, "vocab": 1024, "ctx": 4096} | p
    spec = ModelSpec("kimi-linear", [])
    _common(spec, p)
    n_layer, n_embd, n_head = p["n_layer"], p["n_embd"], p["n_head"]
    is_mla = [(il + 1) % p["full_every"] == 0 for il in range(n_layer)]
    _kimi_keys(spec, p, is_mla, k3=False)
    _embeddings(spec, p, t)
    for il in range(n_layer):
        spec.add(tn(MODEL_TENSOR.ATTN_NORM, il), (n_embd,), t.norm)
        spec.add(tn(MODEL_TENSOR.FFN_NORM, il), (n_embd,), t.norm)
        if is_mla[il]:
            _mla_attention(spec, il, p, t)
        else:
            _kda_block(spec, il, p, t, factored_gate=True)
        if il < p["n_dense"]:
            _dense_ffn(spec, il, n_embd, p["n_ff"], t)
            continue
        spec.add(tn(MODEL_TENSOR.FFN_GATE_INP, il), (n_embd, p["n_expert"]), t.norm)
        spec.add(tn(MODEL_TENSOR.FFN_EXP_PROBS_B, il, "bias"), (p["n_expert"],), t.norm)
        _experts(spec, il, n_embd, p["n_ff_exp"], p["n_expert"], t)
        _dense_ffn(spec, il, n_embd, p["n_ff_exp"] * p["n_shared"], t, shared=True)
    return spec


def bailingmoe3(t=Types(), **p):
    """Ling/Ring-2.5-style `bailingmoe3` (src/models/bailingmoe3.cpp): KDA linear-attention blocks
    (head_count_kv 0: per-q/k/v short convs, a one-projection decay gate with dt bias and A, a
    one-projection output gate) and gated MLA blocks (a per-head sigmoid gate) every `full_every`, a
    leading dense block, sigmoid-routed experts with a selection bias beside a shared expert, and
    `nextn` MTP blocks after the trunk (which the hybrid's default filter gives a KV cache)."""
    p = {"n_layer": 8, "n_embd": 256, "n_head": 4, "kda_head": 64, "conv": 4, "n_ff": 512, "n_ff_exp": 128,
         "n_expert": 16, "top_k": 4, "n_shared": 1, "n_dense": 1, "q_lora": 0, "kv_lora": 64, "rope": 16,
         "qk_nope": 32, "v_head": 32, "full_every": 4, "nextn": 1, "vocab": 1024, "ctx": 4096} | p
    spec = ModelSpec("bailingmoe3", [])
    trunk, n_all = p["n_layer"], p["n_layer"] + p["nextn"]
    _common(spec, p | {"n_layer": n_all})
    n_embd, n_head, head = p["n_embd"], p["n_head"], p["kda_head"]
    d_inner = n_head * head
    is_mla = [(il + 1) % p["full_every"] == 0 or il >= trunk for il in range(n_all)]
    _kimi_keys(spec, p, is_mla, k3=False)
    spec.meta(keys.KDA_GATE_LOWER_BOUND, -5.0, "f32")  # bailingmoe3.cpp requires it (and asserts < 0)
    spec.meta(Keys.LLM.EXPERT_WEIGHTS_NORM, True, "bool")
    if p["nextn"]:
        spec.meta(Keys.LLM.NEXTN_PREDICT_LAYERS, p["nextn"])
    _embeddings(spec, p, t)
    for il in range(n_all):
        spec.add(tn(MODEL_TENSOR.ATTN_NORM, il), (n_embd,), t.norm)
        spec.add(tn(MODEL_TENSOR.FFN_NORM, il), (n_embd,), t.norm)
        if is_mla[il]:
            _mla_attention(spec, il, p, t)
            spec.add(tn(MODEL_TENSOR.ATTN_GATE, il), (n_embd, n_head), t.norm)
        else:
            _kda_qkv(spec, il, p, t)
            spec.add(tn(MODEL_TENSOR.SSM_F_A, il), (n_embd, d_inner), t.resident)
            spec.add(tn(MODEL_TENSOR.SSM_BETA, il), (n_embd, n_head), t.norm)
            spec.add(tn(MODEL_TENSOR.SSM_A, il, suffix=None), (1, n_head), t.norm)
            spec.add(tn(MODEL_TENSOR.SSM_DT, il, "bias"), (d_inner,), t.norm)
            spec.add(tn(MODEL_TENSOR.SSM_G_A, il), (n_embd, d_inner), t.resident)
            spec.add(tn(MODEL_TENSOR.SSM_NORM, il), (head,), t.norm)
            spec.add(tn(MODEL_TENSOR.ATTN_OUT, il), (d_inner, n_embd), t.resident)
        if il < p["n_dense"]:
            _dense_ffn(spec, il, n_embd, p["n_ff"], t)
        else:
            spec.add(tn(MODEL_TENSOR.FFN_GATE_INP, il), (n_embd, p["n_expert"]), t.norm)
            spec.add(tn(MODEL_TENSOR.FFN_EXP_PROBS_B, il, "bias"), (p["n_expert"],), t.norm)
            _experts(spec, il, n_embd, p["n_ff_exp"], p["n_expert"], t)
            _dense_ffn(spec, il, n_embd, p["n_ff_exp"] * p["n_shared"], t, shared=True)
        if il >= trunk:
            spec.add(tn(MODEL_TENSOR.NEXTN_EH_PROJ, il), (2 * n_embd, n_embd), t.resident)
            spec.add(tn(MODEL_TENSOR.NEXTN_ENORM, il), (n_embd,), t.norm)
            spec.add(tn(MODEL_TENSOR.NEXTN_HNORM, il), (n_embd,), t.norm)
            spec.add(tn(MODEL_TENSOR.LAYER_OUT_NORM, il), (n_embd,), t.norm)
    return spec


BUILDERS = {
    "kimi-k3": kimi_k3,
    "kimi-linear": kimi_linear,
    "bailingmoe3": bailingmoe3,
}


# Full-size presets (header-only, sparse) of this family, by name: presets.py merges them into synth.PRESETS.
# Types are those of common community quantizations.
PRESETS = {
    "kimi-k3": lambda: kimi_k3(
        Types(expert=IQ2_XS, expert_down=IQ3_XXS, resident=Q8_0, embed=Q4_K, output=Q6_K),
        name="Kimi-K3 (synthetic, header-faithful)", n_layer=93, n_embd=7168, n_head=32, kda_head=128,
        n_ff=18432, n_ff_exp=2048, latent=4096, n_expert=896, top_k=16, q_lora=1536, kv_lora=512, rope=64,
        qk_nope=128, v_head=128, vocab=163840, merges=163328, ctx=262144, file_type=17),
}
