"""Which tensors llama-quantize keeps as they are, and what it falls back to when a row does not fit.

Mirrors `tensor_allows_quantization` and `tensor_type_fallback` in llama.cpp's src/llama-quant.cpp
(read there, not copied), for the uniform (`--pure`) case: every quantizable tensor gets the
requested type. Pure data and names; no numpy or gguf, so the CLI can list types cheaply.
"""

from moetools.gguf.constants import GGML_TYPE_IDS, GGML_TYPES

# Targets, strongest first: ggml type name -> llama_ftype written as general.file_type (the value
# llama-quantize writes for that type; for K-quants the alias llama-quantize maps `Q4_K` etc. to).
TARGETS = {
    "bf16": 32,
    "f16": 1,
    "q8_0": 7,
    "q6_K": 18,
    "q5_K": 17,
    "q5_1": 9,
    "q5_0": 8,
    "q4_K": 15,
    "q4_1": 3,
    "q4_0": 2,
    "iq4_nl": 25,
    "iq4_xs": 30,
    "q3_K": 12,
    "q2_K": 10,
}

# A 256-block type whose rows do not divide falls back to this 32-block type (llama-quant.cpp).
FALLBACK = {"q2_K": "q4_0", "q3_K": "q4_0", "q4_K": "q5_0", "q5_K": "q5_1", "q6_K": "q8_0", "iq4_xs": "iq4_nl"}

# Substrings of tensor names llama-quantize never quantizes (besides norms, routers and 1-D tensors).
_KEEP_SUBSTRINGS = (
    ("ffn_gate_inp.weight", "router"),
    ("ffn_gate_tid2eid.weight", "routing table"),
    ("altup", "tiny altup tensor"),
    ("laurel", "tiny laurel tensor"),
    ("per_layer_model_proj", "kept as is by llama-quantize"),
    ("ssm_conv1d", "small conv1d weight"),
    ("shortconv.conv.weight", "small conv1d weight"),
    ("indexer.k_proj.weight", "tiny indexer projection"),
    ("indexer.q_proj.weight", "tiny indexer projection"),
    ("time_mix_first.weight", "small RWKV weight"),
    ("time_mix_w0.weight", "small RWKV weight"),
    ("time_mix_w1.weight", "small RWKV weight"),
    ("time_mix_w2.weight", "small RWKV weight"),
    ("time_mix_v0.weight", "small RWKV weight"),
    ("time_mix_v1.weight", "small RWKV weight"),
    ("time_mix_v2.weight", "small RWKV weight"),
    ("time_mix_a0.weight", "small RWKV weight"),
    ("time_mix_a1.weight", "small RWKV weight"),
    ("time_mix_a2.weight", "small RWKV weight"),
    ("time_mix_g1.weight", "small RWKV weight"),
    ("time_mix_g2.weight", "small RWKV weight"),
    ("time_mix_decay_w1.weight", "small RWKV weight"),
    ("time_mix_decay_w2.weight", "small RWKV weight"),
    ("time_mix_lerp_fused.weight", "small RWKV weight"),
    ("attn_rel_b.weight", "relative position bias"),
    (".position_embd", "positional embedding"),
    ("sam.pos_embd", "positional embedding"),
    ("sam.neck.", "multimodal tensor"),
    ("sam.net_", "multimodal tensor"),
    (".rel_pos", "multimodal tensor"),
    (".patch_embd", "multimodal tensor"),
    (".patch_merger", "multimodal tensor"),
    ("a.rvq.codebook", "audio codebook"),
    ("mm.a.code_embd", "audio codebook"),
)
_KEEP_EXACT = {"position_embd.weight": "positional embedding", "token_types.weight": "token types"}
# Kept only in one architecture: {architecture: fragments}
_KEEP_BY_ARCH = {
    "glm5-next": ("hc_", "indexer.attn_q_b", "indexer.attn_k", "indexer.proj", "indexer_compressor_gate",
                  "indexer_compressor_ape", "ssm_f_a.weight", "ssm_f_b.weight", "ssm_g_a.weight", "ssm_g_b.weight",
                  "ssm_beta.weight", "attn_kv_a_mqa.weight", "attn_k_b.weight", "attn_v_b.weight"),
}


def canonical_type(text):
    """The ggml spelling of a target type name typed in any case (`Q4_K`, `q4_k` -> `q4_K`), or None."""
    wanted = text.strip().lower()
    for name in TARGETS:
        if name.lower() == wanted:
            return name
    return None


def n_dims(shape):
    """ggml_n_dims: dimensions up to the last one above 1 (at least 1)."""
    count = 1
    for index, dim in enumerate(shape):
        if dim > 1:
            count = index + 1
    return count


def keep_reason(name, shape, architecture=""):
    """Why llama-quantize keeps tensor `name` (ggml `shape`) in its type, or None if it quantizes it."""
    if n_dims(shape) < 2:
        return "1-D"
    if not name.endswith("weight"):
        return "not a weight"
    if "_norm.weight" in name:
        return "norm"
    if name in _KEEP_EXACT:
        return _KEEP_EXACT[name]
    for fragment, reason in _KEEP_SUBSTRINGS:
        if fragment in name:
            return reason
    for fragment in _KEEP_BY_ARCH.get(architecture, ()):
        if fragment in name:
            return f"kept in {architecture}"
    return None


def target_for(row_length, target):
    """(type to write, fallback reason or None) for a quantizable tensor whose rows hold `row_length`
    values, as llama-quant.cpp's tensor_type_fallback picks it."""
    block = GGML_TYPES[GGML_TYPE_IDS[target]][1]
    if row_length % block == 0:
        return target, None
    chosen = FALLBACK.get(target, target)
    reason = f"row of {row_length} not divisible by {block} ({target})"
    if row_length % GGML_TYPES[GGML_TYPE_IDS[chosen]][1]:
        chosen = "f16"
        reason += "; unusual shape, must use f16"
    return chosen, reason
