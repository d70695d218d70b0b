"""Synthetic builders: Llama-style MoE layouts (Mixtral, PhiMoE, DBRX, Grok, Granite, OLMoE, Llama 4, Arctic, ...).

Each builder returns a ModelSpec in the layout llama.cpp's loader expects (src/models/<arch>.cpp).
`BUILDERS` maps the architecture names (and test aliases) of this family to their tiny builders."""

from gguf.constants import MODEL_TENSOR, Keys

import moetools.synth.keys as keys
import moetools.synth.names as names
from moetools.synth.blocks import _common, _dense_ffn, _embeddings, _experts, _gqa_attention, _gqa_keys, _normed_gqa_attention, _renamed
from moetools.synth.names import parse, tn
from moetools.synth.spec import F16, F32, ModelSpec, TensorSpec, Types


def llama_moe(t=Types(), **p):
    """Mixtral-style experts in the `llama` architecture (also a dense llama with n_expert=0)."""
    p = {"n_layer": 4, "n_embd": 256, "n_head": 4, "n_head_kv": 2, "n_ff": 256, "n_expert": 8, "top_k": 2,
         "vocab": 1024, "ctx": 2048, "rope_base": 1e6} | p
    spec = ModelSpec(p.get("arch", "llama"), [])
    _common(spec, p)
    head = p["n_embd"] // p["n_head"]
    _gqa_keys(spec, p, p["n_ff"])
    spec.meta(Keys.Rope.DIMENSION_COUNT, head)
    spec.meta(Keys.LLM.VOCAB_SIZE, p["vocab"])
    _embeddings(spec, p, t)
    for il in range(p["n_layer"]):
        spec.add(tn(MODEL_TENSOR.ATTN_NORM, il), (p["n_embd"],), t.norm)
        _gqa_attention(spec, il, p, head, t)
        spec.add(tn(MODEL_TENSOR.FFN_NORM, il), (p["n_embd"],), t.norm)
        if p["n_expert"]:
            spec.add(tn(MODEL_TENSOR.FFN_GATE_INP, il), (p["n_embd"], p["n_expert"]), t.norm)
            _experts(spec, il, p["n_embd"], p["n_ff"], p["n_expert"], t)
        else:
            _dense_ffn(spec, il, p["n_embd"], p["n_ff"], t)
    return spec


def phimoe(t=Types(), **p):
    """Phi-3.5-MoE (`phimoe`): the llama layout with routed experts, LayerNorms with biases, q/k/v/output
    biases and an output bias (llama.cpp src/models/phimoe.cpp)."""
    spec = llama_moe(t, **(p | {"arch": "phimoe"}))
    n_embd = spec.tensors[0].shape[0]
    vocab = spec.tensors[0].shape[1]
    spec.add(tn(MODEL_TENSOR.OUTPUT_NORM, suffix="bias"), (n_embd,), t.norm)
    spec.add(tn(MODEL_TENSOR.OUTPUT, suffix="bias"), (vocab,), t.norm)
    biased = (MODEL_TENSOR.ATTN_NORM, MODEL_TENSOR.ATTN_Q, MODEL_TENSOR.ATTN_K, MODEL_TENSOR.ATTN_V, MODEL_TENSOR.ATTN_OUT,
              MODEL_TENSOR.FFN_NORM)
    for tensor in list(spec.tensors):
        kind, il, _ = parse(tensor.name)
        if kind in biased:
            spec.add(tn(kind, il, "bias"), (tensor.shape[-1],), t.norm)
    return spec


def dbrx(t=Types(), **p):
    """DBRX (`dbrx`): a fused qkv projection (its values clamped to `attention.clamp_kqv`), LayerNorms,
    `attn_output_norm` before the routed experts (llama.cpp src/models/dbrx.cpp)."""
    p = {"n_layer": 4, "n_embd": 256, "n_head": 4, "n_head_kv": 2, "n_ff": 256, "n_expert": 8, "top_k": 2,
         "vocab": 1024, "ctx": 2048, "rope_base": 5e5} | p
    spec = ModelSpec("dbrx", [])
    _common(spec, p)
    n_embd, head = p["n_embd"], p["n_embd"] // p["n_head"]
    _gqa_keys(spec, p, p["n_ff"])
    spec.meta(Keys.Attention.LAYERNORM_EPS, 1e-5, "f32")
    spec.meta(Keys.Attention.CLAMP_KQV, 8.0, "f32")
    _embeddings(spec, p, t)
    for il in range(p["n_layer"]):
        spec.add(tn(MODEL_TENSOR.ATTN_NORM, il), (n_embd,), t.norm)
        spec.add(tn(MODEL_TENSOR.ATTN_QKV, il), (n_embd, n_embd + 2 * p["n_head_kv"] * head), t.resident)
        spec.add(tn(MODEL_TENSOR.ATTN_OUT, il), (n_embd, n_embd), t.resident)
        spec.add(tn(MODEL_TENSOR.ATTN_OUT_NORM, il), (n_embd,), t.norm)
        spec.add(tn(MODEL_TENSOR.FFN_GATE_INP, il), (n_embd, p["n_expert"]), t.norm)
        _experts(spec, il, n_embd, p["n_ff"], p["n_expert"], t)
    return spec


def grok(t=Types(), **p):
    """Grok-2 (`grok`; `dense=False`: Grok-1): GQA with a post-attention norm, a dense SwiGLU FFN beside
    the routed experts (Grok-2 only), a post-FFN norm, softcapped attention and router logits
    (llama.cpp src/models/grok.cpp)."""
    p = {"n_layer": 4, "n_embd": 256, "n_head": 4, "n_head_kv": 2, "n_ff": 512, "n_ff_exp": 128, "n_expert": 8,
         "top_k": 2, "dense": True, "vocab": 1024, "ctx": 2048, "rope_base": 2.08e5} | p
    spec = ModelSpec("grok", [])
    _common(spec, p)
    n_embd, head = p["n_embd"], p["n_embd"] // p["n_head"]
    _gqa_keys(spec, p, p["n_ff"])
    n_ff_exp = p["n_ff_exp"] if p["dense"] else p["n_ff"]
    spec.meta(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH, n_ff_exp)
    _embeddings(spec, p, t)
    for il in range(p["n_layer"]):
        spec.add(tn(MODEL_TENSOR.ATTN_NORM, il), (n_embd,), t.norm)
        _gqa_attention(spec, il, p, head, t)
        spec.add(tn(MODEL_TENSOR.ATTN_OUT_NORM, il), (n_embd,), t.norm)
        spec.add(tn(MODEL_TENSOR.FFN_NORM, il), (n_embd,), t.norm)
        if p["dense"]:
            _dense_ffn(spec, il, n_embd, p["n_ff"], t)
        spec.add(tn(MODEL_TENSOR.FFN_GATE_INP, il), (n_embd, p["n_expert"]), t.norm)
        _experts(spec, il, n_embd, n_ff_exp, p["n_expert"], t)
        spec.add(tn(MODEL_TENSOR.LAYER_OUT_NORM, il), (n_embd,), t.norm)
    return spec


def granitemoe(t=Types(), **p):
    """Granite MoE (`granitemoe`, granite-3.x-MoE): the llama layout with routed experts plus Granite's
    embedding, residual, attention and logit scales (in-place scalings; llama.cpp src/models/granite-moe.cpp)."""
    spec = llama_moe(t, **(p | {"arch": "granitemoe"}))
    for key, value in (("embedding_scale", 12.0), ("residual_scale", 0.22), ("attention.scale", 0.0078125),
                       ("logit_scale", 6.0)):
        spec.meta("{arch}." + key, value, "f32")
    return spec


def olmoe(t=Types(), **p):
    """OLMoE (`olmoe`): multi-head attention whose q and k are rms-normed over the whole projection
    before the reshape (attn_q_norm / attn_k_norm n_embd wide), routed experts without a shared one
    (llama.cpp src/models/olmoe.cpp)."""
    p = {"n_layer": 4, "n_embd": 256, "n_head": 4, "n_ff": 512, "n_ff_exp": 128, "n_expert": 16, "top_k": 4,
         "vocab": 1024, "ctx": 4096, "rope_base": 1e4} | p
    p["n_head_kv"] = p["n_head"]
    spec = ModelSpec("olmoe", [])
    _common(spec, p)
    head = p["n_embd"] // p["n_head"]
    _gqa_keys(spec, p, p["n_ff_exp"])
    _embeddings(spec, p, t)
    for il in range(p["n_layer"]):
        spec.add(tn(MODEL_TENSOR.ATTN_NORM, il), (p["n_embd"],), t.norm)
        _gqa_attention(spec, il, p, head, t)
        spec.add(tn(MODEL_TENSOR.ATTN_Q_NORM, il), (p["n_embd"],), t.norm)
        spec.add(tn(MODEL_TENSOR.ATTN_K_NORM, il), (p["n_embd"],), t.norm)
        spec.add(tn(MODEL_TENSOR.FFN_NORM, il), (p["n_embd"],), t.norm)
        spec.add(tn(MODEL_TENSOR.FFN_GATE_INP, il), (p["n_embd"], p["n_expert"]), t.norm)
        _experts(spec, il, p["n_embd"], p["n_ff_exp"], p["n_expert"], t)
    return spec


def arctic(t=Types(), **p):
    """Snowflake Arctic (`arctic`): a dense n_embd-wide residual FFN in every block, then a second norm and
    routed experts on its output (llama.cpp src/models/arctic.cpp)."""
    spec = llama_moe(t, **(p | {"arch": "arctic"}))
    n_embd = spec.tensors[0].shape[0]
    tensors = []
    for tensor in spec.tensors:
        kind, il, _ = parse(tensor.name)
        if kind == MODEL_TENSOR.FFN_GATE_INP:
            for part in (MODEL_TENSOR.FFN_GATE, MODEL_TENSOR.FFN_UP, MODEL_TENSOR.FFN_DOWN):
                tensors.append(TensorSpec(tn(part, il), (n_embd, n_embd), t.resident))
            tensors.append(TensorSpec(tn(MODEL_TENSOR.FFN_NORM_EXP, il), (n_embd,), t.norm))
        tensors.append(tensor)
    spec.tensors = tensors
    return spec


def granite_moe_shexp(t=Types(), **p):
    """Granite-4.0's attention-only MoE (`granite` with experts): granitemoe's layout and scales plus a
    shared expert `n_ff_shexp` wide (llama.cpp src/models/granite.cpp)."""
    p = {"n_ff_shexp": 256} | p
    spec = _renamed(granitemoe(t, **p), "granite")
    spec.meta(Keys.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH, p["n_ff_shexp"])
    n_embd = spec.tensors[0].shape[0]
    for il in range(p.get("n_layer", 4)):
        _dense_ffn(spec, il, n_embd, p["n_ff_shexp"], t, shared=True)
    return spec


def granite_swa(t=Types(), **p):
    """Granite's sliding-window MoE (`granite_swa`): granite's MoE with a shared expert, sliding-window
    layers by `pattern` (S/F) and attention sinks in every layer (llama.cpp src/models/granite-swa.cpp)."""
    p = {"pattern": "SSSF", "swa": 128} | p
    spec = _renamed(granite_moe_shexp(t, **(p | {"n_layer": len(p["pattern"])})), "granite_swa")
    spec.meta(Keys.Attention.SLIDING_WINDOW, p["swa"])
    spec.meta(Keys.Attention.SLIDING_WINDOW_PATTERN, [c == "S" for c in p["pattern"]], "bool[]")
    n_head = p.get("n_head", 4)
    tensors = []  # the shared expert's gate and up fused in ffn_up_shexp (2 x n_ff_shexp rows, LLM_FFN_SWIGLU)
    for x in spec.tensors:
        kind = parse(x.name)[0]
        if kind == MODEL_TENSOR.FFN_UP_SHEXP:
            tensors.append(TensorSpec(x.name, (x.shape[0], 2 * x.shape[1]), x.type_id))
        elif kind != MODEL_TENSOR.FFN_GATE_SHEXP:
            tensors.append(x)
    spec.tensors = tensors
    for il in range(len(p["pattern"])):
        spec.add(tn(MODEL_TENSOR.ATTN_SINKS, il), (n_head,), F32)
    return spec


def llama_like_moe(arch):
    """A builder of the llama layout with routed experts under another loader (`mistral3`, `minicpm`:
    their loaders take experts when `expert_count` is set; src/models/mistral3.cpp, minicpm.cpp)."""
    return lambda t=Types(), **p: _renamed(llama_moe(t, **p), arch)


def dflash(t=Types(), **p):
    """A DFlash block-diffusion draft (`dflash`, src/models/dflash.cpp, not the DSV4 DSpark stages):
    `target_layers` (the target's hidden states it reads), an `fc` fusing them and its `enc.output_norm`,
    then GQA blocks with q/k norms and a SwiGLU FFN, with its own token embeddings and head (a draft that
    has them needs no ctx_other)."""
    p = {"n_layer": 2, "n_embd": 256, "n_head": 4, "n_head_kv": 2, "head": 64, "n_ff": 512, "target_layers": (1, 3),
         "block_size": 16, "vocab": 1024, "ctx": 4096, "rope_base": 1e6} | p
    spec = ModelSpec("dflash", [])
    _common(spec, p)
    n_embd, head = p["n_embd"], p["head"]
    _gqa_keys(spec, p, p["n_ff"], head)
    spec.meta(keys.TARGET_LAYERS, list(p["target_layers"]), "i32[]")
    spec.meta(keys.BLOCK_SIZE, p["block_size"])
    _embeddings(spec, p, t)
    spec.add(tn(MODEL_TENSOR.ENC_OUTPUT_NORM), (n_embd,), t.norm)
    spec.add(tn(names.FC), (len(p["target_layers"]) * n_embd, n_embd), t.resident)
    for il in range(p["n_layer"]):
        _normed_gqa_attention(spec, il, p, head, t)
        spec.add(tn(MODEL_TENSOR.FFN_NORM, il), (n_embd,), t.norm)
        _dense_ffn(spec, il, n_embd, p["n_ff"], t)
    return spec


def llama4(t=Types(), **p):
    """Llama 4 (`llama4`): chunked attention (8192-token chunks) in three layers of four, every
    `moe_every`-th block MoE with a shared expert of the expert width, the others dense
    (llama.cpp src/models/llama4.cpp)."""
    p = {"n_layer": 4, "n_embd": 256, "n_head": 4, "n_head_kv": 2, "n_ff": 512, "n_ff_exp": 128, "n_expert": 16,
         "top_k": 1, "moe_every": 2, "vocab": 1024, "ctx": 262144, "rope_base": 5e5} | p
    spec = ModelSpec("llama4", [])
    _common(spec, p)
    head, n_embd = p["n_embd"] // p["n_head"], p["n_embd"]
    _gqa_keys(spec, p, p["n_ff"])
    spec.meta(Keys.Rope.DIMENSION_COUNT, head)
    spec.meta(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH, p["n_ff_exp"])
    spec.meta(Keys.LLM.INTERLEAVE_MOE_LAYER_STEP, p["moe_every"])
    _embeddings(spec, p, t)
    for il in range(p["n_layer"]):
        spec.add(tn(MODEL_TENSOR.ATTN_NORM, il), (n_embd,), t.norm)
        _gqa_attention(spec, il, p, head, t)
        spec.add(tn(MODEL_TENSOR.FFN_NORM, il), (n_embd,), t.norm)
        if (il + 1) % p["moe_every"] == 0:
            spec.add(tn(MODEL_TENSOR.FFN_GATE_INP, il), (n_embd, p["n_expert"]), t.norm)
            _experts(spec, il, n_embd, p["n_ff_exp"], p["n_expert"], t)
            _dense_ffn(spec, il, n_embd, p["n_ff_exp"], t, shared=True)
        else:
            _dense_ffn(spec, il, n_embd, p["n_ff"], t)
    return spec


BUILDERS = {
    "mixtral": llama_moe,
    "dflash": dflash,
    "phimoe": phimoe,
    "dbrx": dbrx,
    "grok": grok,
    "arctic": arctic,
    "granite": granite_moe_shexp,
    "granite_swa": granite_swa,
    "mistral3": llama_like_moe("mistral3"),
    "minicpm": llama_like_moe("minicpm"),
    "llama4": llama4,
    "olmoe": olmoe,
    "granitemoe": granitemoe,
    "dense": lambda t=Types(), **p: llama_moe(t, **({"n_expert": 0, "n_ff": 512} | p)),
}


# Full-size presets (header-only, sparse) of this family, by name: presets.py merges them into synth.PRESETS.
# Types are those of common community quantizations.
PRESETS = {
    "llama3-8b": lambda: llama_moe(
        Types(resident=F16, embed=F16, output=F16), name="Llama-3-8B (synthetic)", n_expert=0, n_layer=32,
        n_embd=4096, n_head=32, n_head_kv=8, n_ff=14336, vocab=128256, ctx=8192, file_type=1),
}
