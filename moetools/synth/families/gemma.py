"""Synthetic builders: Gemma layouts (gemma3n, gemma4, gemma4-assistant).

Each builder returns a ModelSpec in the layout llama.cpp's loader expects (src/models/<arch>.cpp).
`BUILDERS` maps the architecture names (and test aliases) of this family to their tiny builders."""

from gguf.constants import MODEL_TENSOR, Keys

import moetools.synth.names as names
from moetools.synth.blocks import _common, _dense_ffn, _experts, _gemma4_window_keys, _gqa_keys, _normed_gqa_attention
from moetools.synth.names import tn
from moetools.synth.spec import Q4_K, Q6_K, Q8_0, ModelSpec, Types


def gemma3n(t=Types(), **p):
    """Gemma 3n (`gemma3n`): sliding-window attention (every 5th layer full) whose layers from the 20th
    on reuse an earlier layer's KV (n_layer_kv_from_start), with the AltUp streams, LAuReL and per-layer
    input tensors the loader requires (llama.cpp src/models/gemma3n.cpp; n_altup 4, laurel rank 64 and
    256 per-layer widths are llama_hparams defaults, not keys)."""
    p = {"n_layer": 24, "n_embd": 256, "n_head": 4, "n_head_kv": 2, "head": 64, "n_ff": 512, "swa": 128,
         "vocab": 1024, "ctx": 4096, "altup": 4, "laurel": 64, "embd_altup": 256} | p
    spec = ModelSpec("gemma3n", [])
    _common(spec, p)
    n_embd, head, n_layer = p["n_embd"], p["head"], p["n_layer"]
    _gqa_keys(spec, p, p["n_ff"], head)
    spec.meta(Keys.Attention.SLIDING_WINDOW, p["swa"])
    spec.add(tn(MODEL_TENSOR.TOKEN_EMBD), (n_embd, p["vocab"]), t.embed)
    spec.add(tn(MODEL_TENSOR.ALTUP_PROJ), (n_embd, n_embd, p["altup"] - 1), t.norm)
    spec.add(tn(MODEL_TENSOR.ALTUP_UNEMBD_PROJ), (n_embd, n_embd, p["altup"] - 1), t.norm)
    spec.add(tn(MODEL_TENSOR.PER_LAYER_TOKEN_EMBD), (p["embd_altup"] * n_layer, p["vocab"]), t.embed)
    spec.add(tn(MODEL_TENSOR.PER_LAYER_MODEL_PROJ), (n_embd, p["embd_altup"] * n_layer), t.norm)
    spec.add(tn(MODEL_TENSOR.PER_LAYER_PROJ_NORM), (p["embd_altup"],), t.norm)
    spec.add(tn(MODEL_TENSOR.OUTPUT_NORM), (n_embd,), t.norm)
    for il in range(n_layer):
        _normed_gqa_attention(spec, il, p, head, t)
        spec.add(tn(MODEL_TENSOR.ATTN_POST_NORM, il), (n_embd,), t.norm)
        spec.add(tn(MODEL_TENSOR.FFN_NORM, il), (n_embd,), t.norm)
        _dense_ffn(spec, il, n_embd, p["n_ff"], t)
        spec.add(tn(MODEL_TENSOR.FFN_POST_NORM, il), (n_embd,), t.norm)
        spec.add(tn(MODEL_TENSOR.PER_LAYER_INP_GATE, il), (n_embd, p["embd_altup"]), t.norm)
        spec.add(tn(MODEL_TENSOR.PER_LAYER_PROJ, il), (p["embd_altup"], n_embd), t.norm)
        spec.add(tn(MODEL_TENSOR.PER_LAYER_POST_NORM, il), (n_embd,), t.norm)
        spec.add(tn(MODEL_TENSOR.ALTUP_CORRECT_COEF, il), (p["altup"], p["altup"]), t.norm)
        spec.add(tn(MODEL_TENSOR.ALTUP_CORRECT_SCALE, il), (n_embd,), t.norm)
        spec.add(tn(MODEL_TENSOR.ALTUP_PREDICT_COEF, il), (p["altup"], p["altup"] ** 2), t.norm)
        spec.add(tn(MODEL_TENSOR.ALTUP_ROUTER, il), (n_embd, p["altup"]), t.norm)
        spec.add(tn(MODEL_TENSOR.ALTUP_ROUTER_NORM, il), (n_embd,), t.norm)
        spec.add(tn(MODEL_TENSOR.LAUREL_L, il), (n_embd, p["laurel"]), t.norm)
        spec.add(tn(MODEL_TENSOR.LAUREL_R, il), (p["laurel"], n_embd), t.norm)
        spec.add(tn(MODEL_TENSOR.LAUREL_POST_NORM, il), (n_embd,), t.norm)
    return spec


def gemma4(t=Types(), **p):
    """Gemma 4 MoE (`gemma4`, gemma-4-26B-A4B): sliding-window layers (head `head_swa`, `n_head_kv_swa`
    KV heads) with a full-attention layer every `full_every`-th (head `head`, `n_head_kv` KV heads, one
    shared rope_freqs), a dense GeGLU MLP beside 128 routed experts in every block, tied embeddings;
    the last `shared_kv` layers reuse earlier layers' KV (llama.cpp src/models/gemma4.cpp)."""
    p = {"n_layer": 6, "n_embd": 256, "n_head": 4, "n_head_kv": 1, "n_head_kv_swa": 2, "head": 128,
         "head_swa": 64, "n_ff": 256, "n_ff_exp": 64, "n_expert": 16, "top_k": 4, "swa": 128, "full_every": 6,
         "shared_kv": 0, "vocab": 1024, "ctx": 4096, "rope_base": 1e6} | p
    spec = ModelSpec("gemma4", [])
    _common(spec, p)
    n_embd, n_layer = p["n_embd"], p["n_layer"]
    is_full = [(il + 1) % p["full_every"] == 0 for il in range(n_layer)]
    spec.meta(Keys.LLM.FEED_FORWARD_LENGTH, p["n_ff"])
    spec.meta(Keys.Attention.HEAD_COUNT, p["n_head"])
    spec.meta(Keys.Attention.HEAD_COUNT_KV, [p["n_head_kv"] if full else p["n_head_kv_swa"] for full in is_full], "u32[]")
    _gemma4_window_keys(spec, p, is_full)
    spec.meta(Keys.Attention.SHARED_KV_LAYERS, p["shared_kv"])
    spec.meta(Keys.LLM.EMBD_LENGTH_PER_LAYER_INP, 0)
    spec.meta(Keys.LLM.FINAL_LOGIT_SOFTCAPPING, 30.0, "f32")
    spec.meta(Keys.LLM.EXPERT_COUNT, p["n_expert"])
    spec.meta(Keys.LLM.EXPERT_USED_COUNT, p["top_k"])
    spec.meta(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH, p["n_ff_exp"])
    spec.add(tn(MODEL_TENSOR.TOKEN_EMBD), (n_embd, p["vocab"]), t.embed)
    spec.add(tn(MODEL_TENSOR.OUTPUT_NORM), (n_embd,), t.norm)
    spec.add(tn(MODEL_TENSOR.ROPE_FREQS), (p["head"] // 2,), t.norm)
    for il in range(n_layer):
        head = p["head"] if is_full[il] else p["head_swa"]
        hkv = p["n_head_kv"] if is_full[il] else p["n_head_kv_swa"]
        spec.add(tn(MODEL_TENSOR.ATTN_NORM, il), (n_embd,), t.norm)
        spec.add(tn(MODEL_TENSOR.ATTN_Q, il), (n_embd, p["n_head"] * head), t.resident)
        spec.add(tn(MODEL_TENSOR.ATTN_K, il), (n_embd, hkv * head), t.resident)
        if not is_full[il]:  # the full layers use K as V (attention_k_eq_v)
            spec.add(tn(MODEL_TENSOR.ATTN_V, il), (n_embd, hkv * head), t.resident)
        spec.add(tn(MODEL_TENSOR.ATTN_OUT, il), (p["n_head"] * head, n_embd), t.resident)
        spec.add(tn(MODEL_TENSOR.ATTN_Q_NORM, il), (head,), t.norm)
        spec.add(tn(MODEL_TENSOR.ATTN_K_NORM, il), (head,), t.norm)
        spec.add(tn(MODEL_TENSOR.ATTN_POST_NORM, il), (n_embd,), t.norm)
        spec.add(tn(MODEL_TENSOR.LAYER_OUT_SCALE, il), (1,), t.norm)
        spec.add(tn(MODEL_TENSOR.FFN_NORM, il), (n_embd,), t.norm)
        _dense_ffn(spec, il, n_embd, p["n_ff"], t)
        spec.add(tn(MODEL_TENSOR.FFN_POST_NORM, il), (n_embd,), t.norm)
        spec.add(tn(MODEL_TENSOR.FFN_GATE_INP, il), (n_embd, p["n_expert"]), t.norm)
        spec.add(tn(MODEL_TENSOR.FFN_GATE_INP, il, "scale"), (n_embd,), t.norm)
        spec.add(tn(MODEL_TENSOR.FFN_PRE_NORM_2, il), (n_embd,), t.norm)
        spec.add(tn(MODEL_TENSOR.FFN_POST_NORM_1, il), (n_embd,), t.norm)
        spec.add(tn(MODEL_TENSOR.FFN_POST_NORM_2, il), (n_embd,), t.norm)
        _experts(spec, il, n_embd, p["n_ff_exp"], p["n_expert"], t)
    return spec


def gemma4_assistant(t=Types(), **p):
    """A Gemma 4 assistant (`gemma4-assistant`, src/models/gemma4-assistant.cpp): a draft of
    `nextn_predict_layers` query-only blocks that read the target gemma4 context's KV (its last
    sliding-window and last full layer), fed the target's scaled token embedding beside its hidden state
    (`embedding_length_out` wide) through nextn.pre_projection, with pre and post norms, a GeGLU MLP, a
    per-block output scale, tied embeddings and nextn.post_projection back to the target's width."""
    p = {"n_layer": 4, "n_embd": 128, "n_embd_target": 256, "n_head": 4, "head": 128, "head_swa": 64, "n_ff": 256,
         "swa": 128, "full_every": 4, "vocab": 1024, "ctx": 4096, "rope_base": 1e6} | p
    spec = ModelSpec("gemma4-assistant", [])
    _common(spec, p)
    n_embd, n_layer, n_bb = p["n_embd"], p["n_layer"], p["n_embd_target"]
    is_full = [(il + 1) % p["full_every"] == 0 for il in range(n_layer)]
    spec.meta(Keys.LLM.NEXTN_PREDICT_LAYERS, n_layer)
    spec.meta(Keys.LLM.EMBEDDING_LENGTH_OUT, n_bb)
    spec.meta(Keys.LLM.FEED_FORWARD_LENGTH, p["n_ff"])
    spec.meta(Keys.Attention.HEAD_COUNT, p["n_head"])
    spec.meta(Keys.Attention.HEAD_COUNT_KV, 1)
    _gemma4_window_keys(spec, p, is_full)
    spec.add(tn(MODEL_TENSOR.TOKEN_EMBD), (n_embd, p["vocab"]), t.embed)
    spec.add(tn(MODEL_TENSOR.OUTPUT_NORM), (n_embd,), t.norm)
    spec.add(tn(names.NEXTN_PROJ_PRE), (2 * n_bb, n_embd), t.resident)
    spec.add(tn(names.NEXTN_PROJ_POST), (n_embd, n_bb), t.resident)
    spec.add(tn(MODEL_TENSOR.ROPE_FREQS), (p["head"] // 2,), t.norm)
    for il in range(n_layer):
        head = p["head"] if is_full[il] else p["head_swa"]
        spec.add(tn(MODEL_TENSOR.ATTN_NORM, il), (n_embd,), t.norm)
        spec.add(tn(MODEL_TENSOR.ATTN_Q, il), (n_embd, p["n_head"] * head), t.resident)
        spec.add(tn(MODEL_TENSOR.ATTN_OUT, il), (p["n_head"] * head, n_embd), t.resident)
        spec.add(tn(MODEL_TENSOR.ATTN_Q_NORM, il), (head,), t.norm)
        spec.add(tn(MODEL_TENSOR.ATTN_POST_NORM, il), (n_embd,), t.norm)
        spec.add(tn(MODEL_TENSOR.LAYER_OUT_SCALE, il), (1,), t.norm)
        spec.add(tn(MODEL_TENSOR.FFN_NORM, il), (n_embd,), t.norm)
        _dense_ffn(spec, il, n_embd, p["n_ff"], t)
        spec.add(tn(MODEL_TENSOR.FFN_POST_NORM, il), (n_embd,), t.norm)
    return spec


BUILDERS = {
    "gemma4-assistant": gemma4_assistant,
    "gemma3n": gemma3n,
    "gemma4": gemma4,
}


# Full-size presets (header-only, sparse) of this family, by name: presets.py merges them into synth.PRESETS.
# Types are those of common community quantizations.
PRESETS = {
    # google/gemma-4-26B-A4B config.json (values as cross-checked in public GGUF readers): 30 layers,
    # 2816 wide, 16 query heads; sliding layers 8 KV heads of 256 with a 1024 window, every 6th layer full
    # with 2 KV heads of 512; a 2112-wide dense MLP beside 128 experts of 704 (top-8); tied embeddings.
    # Re-read 2026-12-02 from copies of its text_config in public repos (Gemma4ForConditionalGeneration:
    # num_global_key_value_heads 2, global_head_dim 512, attention_k_eq_v true, layer_types 5 sliding +
    # 1 full, max_position_embeddings 262144, vocab 262144): all as above.
    "gemma-4-26b-a4b": lambda: gemma4(
        Types(expert=Q4_K, expert_down=Q8_0, resident=Q8_0, embed=Q6_K, output=Q6_K), name="gemma-4-26B-A4B (synthetic)",
        n_layer=30, n_embd=2816, n_head=16, n_head_kv=2, n_head_kv_swa=8, head=512, head_swa=256, n_ff=2112,
        n_ff_exp=704, n_expert=128, top_k=8, swa=1024, full_every=6, vocab=262144, ctx=262144, file_type=15),
    # google/gemma-3n-E4B config.json (text_config): 35 layers, 2048 wide, 8 query / 2 KV heads of 256,
    # a 512-token window with every 5th layer full, the last 15 layers sharing the KV of layers 18/19
    # (num_kv_shared_layers; llama.cpp's n_layer_kv_from_start 20), a 16384-wide FFN in every layer (the
    # first 10 with activation sparsity), AltUp 4 streams, LAuReL rank 64, 256-wide per-layer inputs;
    # the 262144 text tokens llama.cpp's converter keeps (not MoE: the KV-sharing / AltUp layout at width).
    "gemma-3n-e4b": lambda: gemma3n(
        Types(resident=Q8_0, embed=Q6_K, output=Q6_K), name="gemma-3n-E4B (synthetic)", n_layer=35, n_embd=2048,
        n_head=8, n_head_kv=2, head=256, n_ff=16384, swa=512, vocab=262144, ctx=32768, file_type=7),
}
