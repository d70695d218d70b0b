"""Synthetic GGUF models in llama.cpp's real layouts, for the quick start, the tests and the benchmarks.

Each builder returns a `ModelSpec`: the architecture's metadata keys and its tensors with the names,
ggml-order shapes and types llama.cpp's loader expects (src/models/*.cpp, gguf-py constants).
`write_model` writes a spec with gguf.GGUFWriter either with real (random) tensor data, for tiny
models, or header-only as sparse files of full apparent size, for K2/K3-class shapes: the header is
real and every offset is right, the tensor data is a hole that costs no disk.

Full-size presets match public configurations where those exist (DeepSeek-V3, Kimi-K2,
Qwen3-235B-A22B, gpt-oss-120b, Llama-3-8B). The Kimi-K3 preset is header-faithful to llama.cpp's
`kimi-k3` loader (93 blocks, hybrid KDA/MLA, latent MoE, 896 experts, top-16); its widths are
chosen so one routed expert is 8,060,928 bytes in IQ2_XS/IQ3_XXS, within 0.5% of the published
8,093,696, not copied from a released checkpoint.
"""

import os
from dataclasses import dataclass, field

# ggml type ids used below (equal to gguf.GGMLQuantizationType, checked by the constants test)
F32, F16, Q4_0, Q8_0, Q4_K, Q6_K, IQ2_XS, IQ3_XXS, BF16, MXFP4 = 0, 1, 2, 8, 12, 14, 17, 18, 30, 39


@dataclass
class TensorSpec:
    name: str
    shape: tuple  # ggml order: ne[0] is the row length
    type_id: int


@dataclass
class ModelSpec:
    architecture: str
    metadata: list  # (key, value, kind) with kind in "u32", "i32", "f32", "bool", "str", "u32[]", "i32[]", "u64[]", "str[]"
    tensors: list = field(default_factory=list)
    vocab_size: int = 0
    merges: int = 0  # number of BPE merges to write (0: none)

    def add(self, name, shape, type_id):
        self.tensors.append(TensorSpec(name, tuple(int(d) for d in shape), type_id))

    def meta(self, key, value, kind="u32"):
        self.metadata.append((key.format(arch=self.architecture), value, kind))


@dataclass
class Types:
    """Which ggml type each class of tensor gets."""

    expert: int = Q8_0
    expert_down: int = None  # defaults to `expert`
    # When set, only these blocks' ffn_down_exps get `expert_down` (the others `expert`): llama-quantize's
    # *_K_M mixes give ffn_down more bits in the layers its use_more_bits rule picks.
    expert_down_blocks: tuple = None
    resident: int = Q8_0  # 2-D resident matrices
    embed: int = Q8_0
    output: int = Q8_0
    norm: int = F32  # 1-D tensors, router, biases


def _common(spec, p):
    spec.meta("general.name", p.get("name", f"synthetic {spec.architecture}"), "str")
    spec.meta("{arch}.block_count", p["n_layer"])
    spec.meta("{arch}.context_length", p["ctx"])
    spec.meta("{arch}.embedding_length", p["n_embd"])
    spec.meta("{arch}.attention.layer_norm_rms_epsilon", 1e-6, "f32")
    spec.meta("{arch}.rope.freq_base", p.get("rope_base", 10000.0), "f32")
    spec.meta("general.file_type", p.get("file_type", 7))
    spec.vocab_size = p["vocab"]
    spec.merges = p.get("merges", 64)  # llama.cpp's BPE loader refuses a vocabulary without merges


def _experts(spec, il, n_embd, n_ff, n_expert, t, bias=False):
    down = t.expert_down if t.expert_down is not None else t.expert
    if t.expert_down_blocks is not None and il not in t.expert_down_blocks:
        down = t.expert
    spec.add(f"blk.{il}.ffn_gate_exps.weight", (n_embd, n_ff, n_expert), t.expert)
    spec.add(f"blk.{il}.ffn_up_exps.weight", (n_embd, n_ff, n_expert), t.expert)
    spec.add(f"blk.{il}.ffn_down_exps.weight", (n_ff, n_embd, n_expert), down)
    if bias:
        spec.add(f"blk.{il}.ffn_gate_exps.bias", (n_ff, n_expert), F32)
        spec.add(f"blk.{il}.ffn_up_exps.bias", (n_ff, n_expert), F32)
        spec.add(f"blk.{il}.ffn_down_exps.bias", (n_embd, n_expert), F32)


def _dense_ffn(spec, il, n_embd, n_ff, t, suffix=""):
    spec.add(f"blk.{il}.ffn_gate{suffix}.weight", (n_embd, n_ff), t.resident)
    spec.add(f"blk.{il}.ffn_up{suffix}.weight", (n_embd, n_ff), t.resident)
    spec.add(f"blk.{il}.ffn_down{suffix}.weight", (n_ff, n_embd), t.resident)


def _embeddings(spec, p, t):
    spec.add("token_embd.weight", (p["n_embd"], p["vocab"]), t.embed)
    spec.add("output_norm.weight", (p["n_embd"],), t.norm)
    spec.add("output.weight", (p["n_embd"], p["vocab"]), t.output)


def _gqa_keys(spec, p, n_ff, head=None):
    """Keys of a grouped-query attention MoE model; `head` writes explicit key/value widths."""
    spec.meta("{arch}.feed_forward_length", n_ff)
    spec.meta("{arch}.attention.head_count", p["n_head"])
    spec.meta("{arch}.attention.head_count_kv", p["n_head_kv"])
    if p.get("n_expert"):
        spec.meta("{arch}.expert_count", p["n_expert"])
        spec.meta("{arch}.expert_used_count", p["top_k"])
    if head:
        spec.meta("{arch}.attention.key_length", head)
        spec.meta("{arch}.attention.value_length", head)


def _gqa_attention(spec, il, p, head, t, bias=False):
    """attn_q/k/v/output of one block (with biases for gpt-oss)."""
    n_embd, q, kv = p["n_embd"], p["n_head"] * head, p["n_head_kv"] * head
    for name, rows in (("attn_q", q), ("attn_k", kv), ("attn_v", kv)):
        spec.add(f"blk.{il}.{name}.weight", (n_embd, rows), t.resident)
        if bias:
            spec.add(f"blk.{il}.{name}.bias", (rows,), t.norm)
    spec.add(f"blk.{il}.attn_output.weight", (q, n_embd), t.resident)
    if bias:
        spec.add(f"blk.{il}.attn_output.bias", (n_embd,), t.norm)


def _normed_gqa_attention(spec, il, p, head, t):
    """attn_norm, then GQA attention with per-head q/k norms (gemma3n, dflash)."""
    spec.add(f"blk.{il}.attn_norm.weight", (p["n_embd"],), t.norm)
    _gqa_attention(spec, il, p, head, t)
    spec.add(f"blk.{il}.attn_q_norm.weight", (head,), t.norm)
    spec.add(f"blk.{il}.attn_k_norm.weight", (head,), t.norm)


def llama_moe(t=Types(), **p):
    """Mixtral-style experts in the `llama` architecture (also a dense llama with n_expert=0)."""
    p = {"n_layer": 4, "n_embd": 256, "n_head": 4, "n_head_kv": 2, "n_ff": 256, "n_expert": 8, "top_k": 2,
         "vocab": 1024, "ctx": 2048, "rope_base": 1e6} | p
    spec = ModelSpec(p.get("arch", "llama"), [])
    _common(spec, p)
    head = p["n_embd"] // p["n_head"]
    _gqa_keys(spec, p, p["n_ff"])
    spec.meta("{arch}.rope.dimension_count", head)
    spec.meta("{arch}.vocab_size", p["vocab"])
    _embeddings(spec, p, t)
    for il in range(p["n_layer"]):
        spec.add(f"blk.{il}.attn_norm.weight", (p["n_embd"],), t.norm)
        _gqa_attention(spec, il, p, head, t)
        spec.add(f"blk.{il}.ffn_norm.weight", (p["n_embd"],), t.norm)
        if p["n_expert"]:
            spec.add(f"blk.{il}.ffn_gate_inp.weight", (p["n_embd"], p["n_expert"]), t.norm)
            _experts(spec, il, p["n_embd"], p["n_ff"], p["n_expert"], t)
        else:
            _dense_ffn(spec, il, p["n_embd"], p["n_ff"], t)
    return spec


def qwen3moe(t=Types(), **p):
    p = {"n_layer": 4, "n_embd": 256, "n_head": 4, "n_head_kv": 2, "head": 64, "n_ff": 512, "n_ff_exp": 128,
         "n_expert": 16, "top_k": 4, "vocab": 1024, "ctx": 2048, "rope_base": 1e6} | p
    spec = ModelSpec("qwen3moe", [])
    _common(spec, p)
    head = p["head"]
    _gqa_keys(spec, p, p["n_ff"], head)
    spec.meta("{arch}.expert_feed_forward_length", p["n_ff_exp"])
    _embeddings(spec, p, t)
    for il in range(p["n_layer"]):
        spec.add(f"blk.{il}.attn_norm.weight", (p["n_embd"],), t.norm)
        _gqa_attention(spec, il, p, head, t)
        spec.add(f"blk.{il}.attn_q_norm.weight", (head,), t.norm)
        spec.add(f"blk.{il}.attn_k_norm.weight", (head,), t.norm)
        spec.add(f"blk.{il}.ffn_norm.weight", (p["n_embd"],), t.norm)
        spec.add(f"blk.{il}.ffn_gate_inp.weight", (p["n_embd"], p["n_expert"]), t.norm)
        _experts(spec, il, p["n_embd"], p["n_ff_exp"], p["n_expert"], t)
    return spec


def _renamed(spec, arch):
    """The spec under another architecture name (its `{arch}.` keys renamed with it)."""
    old = spec.architecture
    spec.architecture = arch
    spec.metadata = [(key.replace(old + ".", arch + ".", 1), value, kind) for key, value, kind in spec.metadata]
    return spec


def qwen3vlmoe(t=Types(), **p):
    """Qwen3-VL MoE's text model (`qwen3vlmoe`): the qwen3moe layout with M-RoPE (`rope.dimension_sections`,
    four positions per token; llama.cpp src/models/qwen3vlmoe.cpp)."""
    spec = _renamed(qwen3moe(t, **p), "qwen3vlmoe")
    spec.meta("{arch}.rope.dimension_sections", [12, 10, 10, 0], "i32[]")
    return spec


def phimoe(t=Types(), **p):
    """Phi-3.5-MoE (`phimoe`): the llama layout with routed experts, LayerNorms with biases, q/k/v/output
    biases and an output bias (llama.cpp src/models/phimoe.cpp)."""
    spec = llama_moe(t, **(p | {"arch": "phimoe"}))
    n_embd = spec.tensors[0].shape[0]
    vocab = spec.tensors[0].shape[1]
    spec.add("output_norm.bias", (n_embd,), t.norm)
    spec.add("output.bias", (vocab,), t.norm)
    for tensor in list(spec.tensors):
        name = tensor.name
        if name.endswith(("attn_norm.weight", "ffn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight",
                          "attn_output.weight")) and name.startswith("blk."):
            spec.add(name[:-len("weight")] + "bias", (tensor.shape[-1] if "attn_" in name and "norm" not in name
                                                       else n_embd,), t.norm)
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
    spec.meta("{arch}.attention.layer_norm_epsilon", 1e-5, "f32")
    spec.meta("{arch}.attention.clamp_kqv", 8.0, "f32")
    _embeddings(spec, p, t)
    for il in range(p["n_layer"]):
        spec.add(f"blk.{il}.attn_norm.weight", (n_embd,), t.norm)
        spec.add(f"blk.{il}.attn_qkv.weight", (n_embd, n_embd + 2 * p["n_head_kv"] * head), t.resident)
        spec.add(f"blk.{il}.attn_output.weight", (n_embd, n_embd), t.resident)
        spec.add(f"blk.{il}.attn_output_norm.weight", (n_embd,), t.norm)
        spec.add(f"blk.{il}.ffn_gate_inp.weight", (n_embd, p["n_expert"]), t.norm)
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
    spec.meta("{arch}.expert_feed_forward_length", n_ff_exp)
    _embeddings(spec, p, t)
    for il in range(p["n_layer"]):
        spec.add(f"blk.{il}.attn_norm.weight", (n_embd,), t.norm)
        _gqa_attention(spec, il, p, head, t)
        spec.add(f"blk.{il}.attn_output_norm.weight", (n_embd,), t.norm)
        spec.add(f"blk.{il}.ffn_norm.weight", (n_embd,), t.norm)
        if p["dense"]:
            _dense_ffn(spec, il, n_embd, p["n_ff"], t)
        spec.add(f"blk.{il}.ffn_gate_inp.weight", (n_embd, p["n_expert"]), t.norm)
        _experts(spec, il, n_embd, n_ff_exp, p["n_expert"], t)
        spec.add(f"blk.{il}.layer_output_norm.weight", (n_embd,), t.norm)
    return spec


def granitemoe(t=Types(), **p):
    """Granite MoE (`granitemoe`, granite-3.x-MoE): the llama layout with routed experts plus Granite's
    embedding, residual, attention and logit scales (in-place scalings; llama.cpp src/models/granite-moe.cpp)."""
    spec = llama_moe(t, **(p | {"arch": "granitemoe"}))
    for key, value in (("embedding_scale", 12.0), ("residual_scale", 0.22), ("attention.scale", 0.0078125),
                       ("logit_scale", 6.0)):
        spec.meta("{arch}." + key, value, "f32")
    return spec


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
    spec.meta("{arch}.expert_feed_forward_length", p["n_ff"])
    spec.meta("{arch}.expert_shared_feed_forward_length", p["n_ff_shexp"])
    _embeddings(spec, p, t)
    for il in range(p["n_layer"]):
        spec.add(f"blk.{il}.attn_norm.weight", (n_embd,), t.norm)
        _gqa_attention(spec, il, p, head, t)
        spec.add(f"blk.{il}.attn_k_norm.weight", (head,), t.norm)
        spec.add(f"blk.{il}.attn_q_norm.weight", (head,), t.norm)
        spec.add(f"blk.{il}.ffn_norm.weight", (n_embd,), t.norm)
        spec.add(f"blk.{il}.ffn_gate_inp.weight", (n_embd, p["n_expert"]), t.norm)
        _experts(spec, il, n_embd, p["n_ff"], p["n_expert"], t)
        _dense_ffn(spec, il, n_embd, p["n_ff_shexp"], t, suffix="_shexp")
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
    spec.meta("{arch}.expert_feed_forward_length", p["n_ff_exp"])
    spec.meta("{arch}.expert_shared_feed_forward_length", p["n_ff_shexp"])
    _embeddings(spec, p, t)
    for il in range(p["n_layer"]):
        spec.add(f"blk.{il}.attn_norm.weight", (p["n_embd"],), t.norm)
        _gqa_attention(spec, il, p, head, t)
        for name, rows in (("attn_q", p["n_embd"]), ("attn_k", p["n_head_kv"] * head), ("attn_v", p["n_head_kv"] * head)):
            spec.add(f"blk.{il}.{name}.bias", (rows,), t.norm)
        spec.add(f"blk.{il}.ffn_norm.weight", (p["n_embd"],), t.norm)
        spec.add(f"blk.{il}.ffn_gate_inp.weight", (p["n_embd"], p["n_expert"]), t.norm)
        _experts(spec, il, p["n_embd"], p["n_ff_exp"], p["n_expert"], t)
        spec.add(f"blk.{il}.ffn_gate_inp_shexp.weight", (p["n_embd"],), t.norm)
        _dense_ffn(spec, il, p["n_embd"], p["n_ff_shexp"], t, suffix="_shexp")
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
        spec.add(f"blk.{il}.attn_norm.weight", (p["n_embd"],), t.norm)
        _gqa_attention(spec, il, p, head, t)
        spec.add(f"blk.{il}.attn_q_norm.weight", (p["n_embd"],), t.norm)
        spec.add(f"blk.{il}.attn_k_norm.weight", (p["n_embd"],), t.norm)
        spec.add(f"blk.{il}.ffn_norm.weight", (p["n_embd"],), t.norm)
        spec.add(f"blk.{il}.ffn_gate_inp.weight", (p["n_embd"], p["n_expert"]), t.norm)
        _experts(spec, il, p["n_embd"], p["n_ff_exp"], p["n_expert"], t)
    return spec


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
    spec.meta("{arch}.expert_feed_forward_length", p["n_ff_exp"])
    spec.meta("{arch}.expert_shared_feed_forward_length", p["n_ff_shexp"])
    spec.meta("{arch}.interleave_moe_layer_step", 1)
    spec.meta("{arch}.leading_dense_block_count", p["n_dense"])
    _dense_lead_moe_blocks(spec, p, t, head, probs_bias=True)
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


def _fuse_qkv(spec):
    """attn_q/k/v of every block replaced by one attn_qkv of their rows, in the position of attn_q."""
    fused = []
    for tensor in spec.tensors:
        name = tensor.name
        if name.endswith(("attn_k.weight", "attn_v.weight")):
            continue
        if name.endswith("attn_q.weight"):
            blk = name[:-len("attn_q.weight")]
            rows = sum(next(x for x in spec.tensors if x.name == blk + part).shape[1]
                       for part in ("attn_q.weight", "attn_k.weight", "attn_v.weight"))
            tensor = TensorSpec(blk + "attn_qkv.weight", (tensor.shape[0], rows), tensor.type_id)
        fused.append(tensor)
    spec.tensors = fused
    return spec


def bailingmoe2(t=Types(), **p):
    """Ling/Ring-2.0 (`bailingmoe2`): a fused qkv with per-head q/k norms and partial rotary, leading dense
    blocks, sigmoid-routed experts with a selection bias and normalised weights beside shared experts
    (llama.cpp src/models/bailingmoe2.cpp)."""
    p = {"n_head_kv": 2} | p
    spec = _shared_experts_moe("bailingmoe2", t, p, 2.5, probs_bias=True, qk_norm=True,
                               extra=(("expert_weights_norm", True, "bool"), ("expert_gating_func", 2, "u32")))
    head = spec.tensors[0].shape[0] // p.get("n_head", 4)
    spec.meta("{arch}.rope.dimension_count", head // 2)
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
    spec.meta("{arch}.feed_forward_length", p["n_ff"])
    spec.meta("{arch}.attention.head_count", heads, "u32[]")
    spec.meta("{arch}.attention.head_count_kv", p["n_head_kv"])
    spec.meta("{arch}.attention.key_length", head)
    spec.meta("{arch}.attention.value_length", head)
    spec.meta("{arch}.rope.dimension_count", head)
    spec.meta("{arch}.expert_count", p["n_expert"])
    spec.meta("{arch}.expert_used_count", p["top_k"])
    spec.meta("{arch}.expert_feed_forward_length", p["n_ff_exp"])
    spec.meta("{arch}.expert_shared_feed_forward_length", p["n_ff_shexp"])
    spec.meta("{arch}.expert_weights_norm", True, "bool")
    spec.meta("{arch}.expert_weights_scale", 3.0, "f32")
    spec.meta("{arch}.attention.sliding_window", p["swa"])
    spec.meta("{arch}.attention.sliding_window_pattern", [c == "S" for c in p["pattern"]], "bool[]")
    _embeddings(spec, p, t)
    for il, n_head in enumerate(heads):
        spec.add(f"blk.{il}.attn_norm.weight", (n_embd,), t.norm)
        _gqa_attention(spec, il, p | {"n_head": n_head}, head, t)
        spec.add(f"blk.{il}.attn_q_norm.weight", (head,), t.norm)
        spec.add(f"blk.{il}.attn_k_norm.weight", (head,), t.norm)
        spec.add(f"blk.{il}.attn_gate.weight", (n_embd, n_head), t.resident)
        spec.add(f"blk.{il}.ffn_norm.weight", (n_embd,), t.norm)
        if il < p["n_dense"]:
            _dense_ffn(spec, il, n_embd, p["n_ff"], t)
            continue
        spec.add(f"blk.{il}.ffn_gate_inp.weight", (n_embd, p["n_expert"]), t.norm)
        spec.add(f"blk.{il}.exp_probs_b.bias", (p["n_expert"],), F32)
        _experts(spec, il, n_embd, p["n_ff_exp"], p["n_expert"], t)
        _dense_ffn(spec, il, n_embd, p["n_ff_shexp"], t, suffix="_shexp")
        if il >= trunk:  # each MTP block has its own shared head (norm and LM head: conversion/step3.py)
            _nextn_block(spec, il, n_embd, t)
            spec.add(f"blk.{il}.nextn.shared_head_head.weight", (n_embd, p["vocab"]), t.output)
    if p["nextn"]:
        spec.meta("{arch}.nextn_predict_layers", p["nextn"])
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
    spec.meta("{arch}.feed_forward_length", p["n_ff"])
    spec.meta("{arch}.attention.head_count", n_head)
    spec.meta("{arch}.attention.head_count_kv", kv_heads, "u32[]")
    spec.meta("{arch}.attention.key_length", k_head)
    spec.meta("{arch}.attention.value_length", v_head)
    spec.meta("{arch}.rope.dimension_count", k_head // 2)
    spec.meta("{arch}.expert_count", p["n_expert"])
    spec.meta("{arch}.expert_used_count", p["top_k"])
    spec.meta("{arch}.expert_feed_forward_length", p["n_ff_exp"])
    spec.meta("{arch}.attention.sliding_window", p["swa"])
    spec.meta("{arch}.attention.sliding_window_pattern", [c == "S" for c in pattern], "bool[]")
    spec.meta("{arch}.attention.value_scale", 0.707, "f32")
    if p["nextn"]:
        spec.meta("{arch}.nextn_predict_layers", p["nextn"])
    _embeddings(spec, p, t)
    for il, n_kv in enumerate(kv_heads):
        spec.add(f"blk.{il}.attn_norm.weight", (n_embd,), t.norm)
        if il >= trunk and p["nextn_fused"]:
            spec.add(f"blk.{il}.attn_qkv.weight", (n_embd, n_head * k_head + n_kv * (k_head + v_head)), t.resident)
        else:
            spec.add(f"blk.{il}.attn_q.weight", (n_embd, n_head * k_head), t.resident)
            spec.add(f"blk.{il}.attn_k.weight", (n_embd, n_kv * k_head), t.resident)
            spec.add(f"blk.{il}.attn_v.weight", (n_embd, n_kv * v_head), t.resident)
        spec.add(f"blk.{il}.attn_output.weight", (n_head * v_head, n_embd), t.resident)
        spec.add(f"blk.{il}.attn_sinks.weight", (n_head,), F32)
        spec.add(f"blk.{il}.ffn_norm.weight", (n_embd,), t.norm)
        if il >= trunk:
            _dense_ffn(spec, il, n_embd, p["n_ff"], t)
            spec.add(f"blk.{il}.nextn.eh_proj.weight", (2 * n_embd, n_embd), t.resident)
            spec.add(f"blk.{il}.nextn.enorm.weight", (n_embd,), t.norm)
            spec.add(f"blk.{il}.nextn.hnorm.weight", (n_embd,), t.norm)
            spec.add(f"blk.{il}.layer_output_norm.weight", (n_embd,), t.norm)
            continue
        if il < p["n_dense"]:
            _dense_ffn(spec, il, n_embd, p["n_ff"], t)
            continue
        spec.add(f"blk.{il}.ffn_gate_inp.weight", (n_embd, p["n_expert"]), t.norm)
        spec.add(f"blk.{il}.exp_probs_b.bias", (p["n_expert"],), F32)
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
    n_embd = spec.tensors[0].shape[0]
    extra = []
    for tensor in spec.tensors:
        name = tensor.name
        if name.endswith("attn_q.weight"):
            extra.append(TensorSpec(name.replace("attn_q", "attn_gate"), tensor.shape, tensor.type_id))
        if name.endswith(("attn_norm.weight", "ffn_norm.weight")):
            post = name.replace("attn_norm", "post_attention_norm").replace("ffn_norm", "post_ffw_norm")
            extra.append(TensorSpec(post, (n_embd,), tensor.type_id))
    spec.tensors += extra
    return spec


def smallthinker(t=Types(), **p):
    """SmallThinker (`smallthinker`): the llama layout with routed experts whose router reads the layer
    input before attention; with `attention.sliding_window` set, three 4096-token sliding-window layers
    to one full one, the full ones without rope (llama.cpp src/models/smallthinker.cpp)."""
    p = {"swa": 4096, "n_ff_exp": 128} | p
    spec = llama_moe(t, **(p | {"arch": "smallthinker", "n_ff": p["n_ff_exp"]}))
    spec.meta("{arch}.expert_feed_forward_length", p["n_ff_exp"])
    spec.meta("{arch}.expert_gating_func", 2)
    if p["swa"]:
        spec.meta("{arch}.attention.sliding_window", p["swa"])
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
        spec.meta("{arch}.nextn_predict_layers", p["nextn"])
    _embeddings(spec, p, t)
    for il in range(n_all):
        spec.add(f"blk.{il}.attn_norm.weight", (n_embd,), t.norm)
        _gqa_attention(spec, il, p, head, t)
        if il < p["n_dense"]:
            _dense_ffn(spec, il, n_embd, p["n_ff"], t)
            continue
        spec.add(f"blk.{il}.ffn_gate_inp.weight", (n_embd, p["n_expert"]), t.norm)
        _experts(spec, il, n_embd, p["n_ff_exp"], p["n_expert"], t)
        _dense_ffn(spec, il, n_embd, p["n_ff_exp"] * p["n_shared"], t, suffix="_shexp")
        if il >= trunk and p["nextn_fusion"]:
            spec.add(f"blk.{il}.nextn.eh_proj.weight", (2 * n_embd, n_embd), t.resident)
            spec.add(f"blk.{il}.nextn.enorm.weight", (n_embd,), t.norm)
            spec.add(f"blk.{il}.nextn.hnorm.weight", (n_embd,), t.norm)
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
    spec.meta("{arch}.rope.dimension_count", head)
    if p["swa"]:
        spec.meta("{arch}.attention.sliding_window", p["swa"])
    _embeddings(spec, p, t)
    for il in range(p["n_layer"]):
        blk = f"blk.{il}."
        _gqa_attention(spec, il, p | {"n_embd": n_embd}, head, t)
        spec.add(blk + "attn_q_norm.weight", (head,), t.norm)
        spec.add(blk + "attn_k_norm.weight", (head,), t.norm)
        spec.add(blk + "post_attention_norm.weight", (n_embd,), t.norm)
        _dense_ffn(spec, il, n_embd, p["n_ff"], t)
        spec.add(blk + "post_ffw_norm.weight", (n_embd,), t.norm)
    return spec


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
    spec.meta("{arch}.rope.dimension_count", head // 2)
    spec.meta("{arch}.residual_scale", 3.5565588200778455, "f32")
    spec.meta("{arch}.full_attention_interval", p["full_every"])
    _embeddings(spec, p, t)
    for il in range(p["n_layer"]):
        blk = f"blk.{il}."
        spec.add(blk + "attn_norm.weight", (n_embd,), t.norm)
        if (il + 1) % p["full_every"] == 0:
            _gqa_attention(spec, il, p, head, t)
        else:
            spec.add(blk + "attn_norm_2.weight", (heads,), t.norm)
            spec.add(blk + "attn_qkv.weight", (n_embd, 3 * heads), t.resident)
            spec.add(blk + "attn_gate.weight", (n_embd, heads), t.resident)
            spec.add(blk + "attn_output.weight", (heads, n_embd), t.resident)
        spec.add(blk + "ffn_norm.weight", (n_embd,), t.norm)
        spec.add(blk + "ffn_gate_inp.weight", (n_embd, p["n_expert"]), t.norm)
        _experts(spec, il, n_embd, p["n_ff"], p["n_expert"], t)
    return spec


def arctic(t=Types(), **p):
    """Snowflake Arctic (`arctic`): a dense n_embd-wide residual FFN in every block, then a second norm and
    routed experts on its output (llama.cpp src/models/arctic.cpp)."""
    spec = llama_moe(t, **(p | {"arch": "arctic"}))
    n_embd = spec.tensors[0].shape[0]
    tensors = []
    for tensor in spec.tensors:
        if tensor.name.endswith("ffn_gate_inp.weight"):
            blk = tensor.name[:-len("ffn_gate_inp.weight")]
            for part, shape in (("ffn_gate", (n_embd, n_embd)), ("ffn_up", (n_embd, n_embd)), ("ffn_down", (n_embd, n_embd))):
                tensors.append(TensorSpec(blk + part + ".weight", shape, t.resident))
            tensors.append(TensorSpec(blk + "ffn_norm_exps.weight", (n_embd,), t.norm))
        tensors.append(tensor)
    spec.tensors = tensors
    return spec


def grovemoe(t=Types(), **p):
    """GroveMoE (`grovemoe`): the qwen3moe layout plus adjugate "chunk" experts, one per group of
    `experts_per_group` routed experts, `n_ff_chexp` wide (llama.cpp src/models/grovemoe.cpp)."""
    p = {"n_ff_chexp": 64, "per_group": 2} | p
    spec = _renamed(qwen3moe(t, **p), "grovemoe")
    spec.meta("{arch}.expert_chunk_feed_forward_length", p["n_ff_chexp"])
    spec.meta("{arch}.expert_group_scale", 0.05, "f32")
    spec.meta("{arch}.experts_per_group", p["per_group"])
    n_embd = spec.tensors[0].shape[0]
    n_chunk = p.get("n_expert", 16) // p["per_group"]
    tensors = []
    for tensor in spec.tensors:
        tensors.append(tensor)
        if tensor.name.endswith("ffn_down_exps.weight"):
            blk = tensor.name[:-len("ffn_down_exps.weight")]
            c = p["n_ff_chexp"]
            for part, shape in (("ffn_gate_chexps", (n_embd, c, n_chunk)), ("ffn_up_chexps", (n_embd, c, n_chunk)),
                                ("ffn_down_chexps", (c, n_embd, n_chunk))):
                tensors.append(TensorSpec(blk + part + ".weight", shape, t.expert))
    spec.tensors = tensors
    return spec


def bailingmoe(t=Types(), **p):
    """Ling-1.x (`bailingmoe`): GQA, softmax-routed experts beside shared experts in every block
    (llama.cpp src/models/bailingmoe.cpp)."""
    p = {"n_head_kv": 2, "n_dense": 0} | p
    spec = _shared_experts_moe("bailingmoe", t, p, 1.0, probs_bias=False, extra=(("expert_weights_norm", True, "bool"),))
    spec.meta("{arch}.rope.dimension_count", spec.tensors[0].shape[0] // p.get("n_head", 4))
    return spec


def granite_moe_shexp(t=Types(), **p):
    """Granite-4.0's attention-only MoE (`granite` with experts): granitemoe's layout and scales plus a
    shared expert `n_ff_shexp` wide (llama.cpp src/models/granite.cpp)."""
    p = {"n_ff_shexp": 256} | p
    spec = _renamed(granitemoe(t, **p), "granite")
    spec.meta("{arch}.expert_shared_feed_forward_length", p["n_ff_shexp"])
    n_embd = spec.tensors[0].shape[0]
    for il in range(p.get("n_layer", 4)):
        _dense_ffn(spec, il, n_embd, p["n_ff_shexp"], t, suffix="_shexp")
    return spec


def granite_swa(t=Types(), **p):
    """Granite's sliding-window MoE (`granite_swa`): granite's MoE with a shared expert, sliding-window
    layers by `pattern` (S/F) and attention sinks in every layer (llama.cpp src/models/granite-swa.cpp)."""
    p = {"pattern": "SSSF", "swa": 128} | p
    spec = _renamed(granite_moe_shexp(t, **(p | {"n_layer": len(p["pattern"])})), "granite_swa")
    spec.meta("{arch}.attention.sliding_window", p["swa"])
    spec.meta("{arch}.attention.sliding_window_pattern", [c == "S" for c in p["pattern"]], "bool[]")
    n_head = p.get("n_head", 4)
    # the shared expert's gate and up fused in ffn_up_shexp (2 x n_ff_shexp rows, LLM_FFN_SWIGLU)
    spec.tensors = [TensorSpec(x.name, (x.shape[0], 2 * x.shape[1]), x.type_id) if x.name.endswith("ffn_up_shexp.weight")
                    else x for x in spec.tensors if not x.name.endswith("ffn_gate_shexp.weight")]
    for il in range(len(p["pattern"])):
        spec.add(f"blk.{il}.attn_sinks.weight", (n_head,), F32)
    return spec


def hy_v3(t=Types(), **p):
    """Hunyuan-V3 (`hy_v3`): GQA with per-head q/k norms, a leading dense block (the loader goes by the
    tensors present), then sigmoid-routed experts with a selection bias (`exp_probs_b`, no suffix)
    beside a shared expert (llama.cpp src/models/hy-v3.cpp)."""
    p = {"n_head_kv": 2, "n_shared": 1, "n_layer": 4, "nextn": 0} | p
    trunk = p["n_layer"]
    spec = _shared_experts_moe("hy_v3", t, p | {"n_layer": trunk + p["nextn"]}, 1.0, probs_bias=True, qk_norm=True,
                               extra=(("expert_weights_norm", True, "bool"), ("expert_gating_func", 2, "u32"),
                                      ("expert_shared_feed_forward_length", p.get("n_ff_exp", 128), "u32")))
    spec.tensors = [TensorSpec(x.name[:-len(".bias")], x.shape, x.type_id) if x.name.endswith("exp_probs_b.bias") else x
                    for x in spec.tensors]
    if p["nextn"]:  # the converter appends the MTP blocks (full hy_v3 blocks) with their final_layernorm as
        # nextn.shared_head_norm and no embeddings or head of their own (conversion/hunyuan.py HYV3Model)
        spec.meta("{arch}.nextn_predict_layers", p["nextn"])
        for il in range(trunk, trunk + p["nextn"]):
            _nextn_block(spec, il, p.get("n_embd", 256), t)
    return spec


def qwen3moe_swa(arch):
    """A builder of the qwen3moe layout under a sliding-window loader: `mellum` (three sliding-window
    layers to one full once `attention.sliding_window` is set) and `maple` (`pattern` S/F, a SwiGLU clamp
    per layer) (llama.cpp src/models/mellum.cpp, maple.cpp)."""
    def build(t=Types(), **p):
        p = {"swa": 128, "pattern": "SSSF"} | p
        spec = _renamed(qwen3moe(t, **(p | {"n_layer": len(p["pattern"])})), arch)
        spec.meta("{arch}.attention.sliding_window", p["swa"])
        if arch == "maple":
            spec.meta("{arch}.attention.sliding_window_pattern", [c == "S" for c in p["pattern"]], "bool[]")
            spec.meta("{arch}.swiglu_clamp_exp", 7.0, "f32")
        return spec
    return build


def laguna(t=Types(), **p):
    """Laguna (`laguna`, XS.2): step35's layout (full / sliding-window / sliding-window / sliding-window
    with their own query-head counts, a per-head sigmoid gate, a leading dense block, sigmoid routing with
    a selection bias beside a shared expert) under its own loader (llama.cpp src/models/laguna.cpp)."""
    p = {"n_dense": 1} | p
    spec = _renamed(step35(t, **p), "laguna")
    spec.meta("{arch}.leading_dense_block_count", p["n_dense"])
    return spec


def llama_like_moe(arch):
    """A builder of the llama layout with routed experts under another loader (`mistral3`, `minicpm`:
    their loaders take experts when `expert_count` is set; src/models/mistral3.cpp, minicpm.cpp)."""
    return lambda t=Types(), **p: _renamed(llama_moe(t, **p), arch)


def _shared_experts_moe(arch, t, p, weights_scale, probs_bias, qk_norm=False, extra=()):
    """DeepSeek-V1-style MoE layouts: leading dense blocks, then routed experts and n_shared shared
    experts of the expert width."""
    p = {"n_layer": 4, "n_embd": 256, "n_head": 4, "n_head_kv": 4, "n_ff": 512, "n_ff_exp": 128, "n_shared": 2,
         "n_expert": 16, "top_k": 4, "n_dense": 1, "vocab": 1024, "ctx": 4096, "rope_base": 1e4} | p
    spec = ModelSpec(arch, [])
    _common(spec, p)
    _gqa_keys(spec, p, p["n_ff"])
    spec.meta("{arch}.expert_feed_forward_length", p["n_ff_exp"])
    spec.meta("{arch}.expert_shared_count", p["n_shared"])
    spec.meta("{arch}.leading_dense_block_count", p["n_dense"])
    spec.meta("{arch}.expert_weights_scale", weights_scale, "f32")
    for key, value, kind in extra:
        spec.meta("{arch}." + key, value, kind)
    _dense_lead_moe_blocks(spec, p | {"n_ff_shexp": p["n_ff_exp"] * p["n_shared"]}, t, p["n_embd"] // p["n_head"],
                           probs_bias=probs_bias, qk_norm=qk_norm)
    return spec


def _dense_lead_moe_blocks(spec, p, t, head, probs_bias, qk_norm=False):
    """Embeddings, then blocks of GQA attention (optionally with per-head q/k norms) and a dense FFN (the
    first n_dense) or routed experts (optionally with a selection bias) beside a shared expert n_ff_shexp wide."""
    n_embd = p["n_embd"]
    _embeddings(spec, p, t)
    for il in range(p["n_layer"]):
        spec.add(f"blk.{il}.attn_norm.weight", (n_embd,), t.norm)
        _gqa_attention(spec, il, p, head, t)
        if qk_norm:
            spec.add(f"blk.{il}.attn_k_norm.weight", (head,), t.norm)
            spec.add(f"blk.{il}.attn_q_norm.weight", (head,), t.norm)
        spec.add(f"blk.{il}.ffn_norm.weight", (n_embd,), t.norm)
        if il < p["n_dense"]:
            _dense_ffn(spec, il, n_embd, p["n_ff"], t)
            continue
        spec.add(f"blk.{il}.ffn_gate_inp.weight", (n_embd, p["n_expert"]), t.norm)
        if probs_bias:
            spec.add(f"blk.{il}.exp_probs_b.bias", (p["n_expert"],), t.norm)
        _experts(spec, il, n_embd, p["n_ff_exp"], p["n_expert"], t)
        _dense_ffn(spec, il, n_embd, p["n_ff_shexp"], t, suffix="_shexp")


def _mla_attention(spec, il, p, t):
    """DeepSeek-style MLA as llama.cpp's converter writes it today (absorbed k_b / v_b)."""
    n_embd, n_head = p["n_embd"], p["n_head"]
    nope, rope, v_head, kv_lora = p["qk_nope"], p["rope"], p["v_head"], p["kv_lora"]
    if p.get("q_lora"):
        spec.add(f"blk.{il}.attn_q_a.weight", (n_embd, p["q_lora"]), t.resident)
        spec.add(f"blk.{il}.attn_q_a_norm.weight", (p["q_lora"],), t.norm)
        spec.add(f"blk.{il}.attn_q_b.weight", (p["q_lora"], n_head * (nope + rope)), t.resident)
    else:
        spec.add(f"blk.{il}.attn_q.weight", (n_embd, n_head * (nope + rope)), t.resident)
    spec.add(f"blk.{il}.attn_kv_a_mqa.weight", (n_embd, kv_lora + rope), t.resident)
    spec.add(f"blk.{il}.attn_kv_a_norm.weight", (kv_lora,), t.norm)
    spec.add(f"blk.{il}.attn_k_b.weight", (nope, kv_lora, n_head), t.resident)
    spec.add(f"blk.{il}.attn_v_b.weight", (kv_lora, v_head, n_head), t.resident)
    spec.add(f"blk.{il}.attn_output.weight", (n_head * v_head, n_embd), t.resident)


def _mla_keys(spec, p):
    if p.get("q_lora"):
        spec.meta("{arch}.attention.q_lora_rank", p["q_lora"])
    spec.meta("{arch}.attention.kv_lora_rank", p["kv_lora"])
    spec.meta("{arch}.attention.key_length", p["kv_lora"] + p["rope"])
    spec.meta("{arch}.attention.value_length", p["kv_lora"])
    spec.meta("{arch}.attention.key_length_mla", p["qk_nope"] + p["rope"])
    spec.meta("{arch}.attention.value_length_mla", p["v_head"])
    spec.meta("{arch}.rope.dimension_count", p["rope"])


def _router_groups(spec, p):
    """llama.cpp's converter writes the router's expert groups when config.json has them (`n_group`,
    `topk_group`; conversion/base.py, nemotron.py): grouped top-k in build_moe_ffn when more than one."""
    if p.get("expert_groups") is not None:
        spec.meta("{arch}.expert_group_count", p["expert_groups"])
    if p.get("expert_groups_used") is not None:
        spec.meta("{arch}.expert_group_used_count", p["expert_groups_used"])


def deepseek2(t=Types(), **p):
    """DeepSeek-V3 / Kimi-K2 layout: MLA, leading dense blocks, shared expert, sigmoid router bias."""
    p = {"n_layer": 4, "n_embd": 256, "n_head": 4, "n_ff": 512, "n_ff_exp": 128, "n_expert": 16, "top_k": 4,
         "n_shared": 1, "n_dense": 1, "q_lora": 64, "kv_lora": 64, "rope": 16, "qk_nope": 32, "v_head": 32,
         "vocab": 1024, "ctx": 2048} | p
    spec = ModelSpec("deepseek2", [])
    _common(spec, p)
    spec.meta("{arch}.feed_forward_length", p["n_ff"])
    spec.meta("{arch}.attention.head_count", p["n_head"])
    spec.meta("{arch}.attention.head_count_kv", 1)
    spec.meta("{arch}.expert_count", p["n_expert"])
    spec.meta("{arch}.expert_used_count", p["top_k"])
    spec.meta("{arch}.expert_gating_func", 2)
    spec.meta("{arch}.leading_dense_block_count", p["n_dense"])
    spec.meta("{arch}.vocab_size", p["vocab"])
    spec.meta("{arch}.expert_feed_forward_length", p["n_ff_exp"])
    spec.meta("{arch}.expert_shared_count", p["n_shared"])
    spec.meta("{arch}.expert_weights_scale", 2.5, "f32")
    spec.meta("{arch}.expert_weights_norm", True, "bool")
    _router_groups(spec, p)
    _mla_keys(spec, p)
    _embeddings(spec, p, t)
    for il in range(p["n_layer"]):
        spec.add(f"blk.{il}.attn_norm.weight", (p["n_embd"],), t.norm)
        _mla_attention(spec, il, p, t)
        spec.add(f"blk.{il}.ffn_norm.weight", (p["n_embd"],), t.norm)
        if il < p["n_dense"]:
            _dense_ffn(spec, il, p["n_embd"], p["n_ff"], t)
            continue
        spec.add(f"blk.{il}.ffn_gate_inp.weight", (p["n_embd"], p["n_expert"]), t.norm)
        spec.add(f"blk.{il}.exp_probs_b.bias", (p["n_expert"],), t.norm)
        _experts(spec, il, p["n_embd"], p["n_ff_exp"], p["n_expert"], t)
        _dense_ffn(spec, il, p["n_embd"], p["n_ff_exp"] * p["n_shared"], t, suffix="_shexp")
    return spec


def gpt_oss(t=Types(), **p):
    """gpt-oss: sliding window on alternate layers, attention sinks, biases everywhere, expert biases."""
    p = {"n_layer": 4, "n_embd": 256, "n_head": 4, "n_head_kv": 2, "head": 64, "n_ff_exp": 128, "n_expert": 16,
         "top_k": 4, "swa": 128, "vocab": 1024, "ctx": 131072, "rope_base": 150000.0} | p
    spec = ModelSpec("gpt-oss", [])
    _common(spec, p)
    head = p["head"]
    _gqa_keys(spec, p, p["n_ff_exp"], head)
    spec.meta("{arch}.attention.sliding_window", p["swa"])
    spec.meta("{arch}.expert_feed_forward_length", p["n_ff_exp"])
    _embeddings(spec, p, t)
    for il in range(p["n_layer"]):
        n_embd = p["n_embd"]
        spec.add(f"blk.{il}.attn_norm.weight", (n_embd,), t.norm)
        _gqa_attention(spec, il, p, head, t, bias=True)
        spec.add(f"blk.{il}.attn_sinks.weight", (p["n_head"],), t.norm)
        spec.add(f"blk.{il}.post_attention_norm.weight", (n_embd,), t.norm)
        spec.add(f"blk.{il}.ffn_gate_inp.weight", (n_embd, p["n_expert"]), t.norm)
        spec.add(f"blk.{il}.ffn_gate_inp.bias", (p["n_expert"],), t.norm)
        _experts(spec, il, n_embd, p["n_ff_exp"], p["n_expert"], t, bias=True)
    return spec


def _kimi_keys(spec, p, is_mla, k3):
    """The keys kimi-k3 and kimi-linear share (KV heads only in the MLA layers); K3 also writes
    vocab_size and expert_weights_norm (kimi-linear.cpp normalises the weights whatever the key says)."""
    spec.meta("{arch}.feed_forward_length", p["n_ff"])
    spec.meta("{arch}.attention.head_count", p["n_head"])
    spec.meta("{arch}.attention.head_count_kv", [1 if mla else 0 for mla in is_mla], "u32[]")
    if k3:
        spec.meta("{arch}.vocab_size", p["vocab"])
    spec.meta("{arch}.ssm.conv_kernel", p["conv"])
    spec.meta("{arch}.kda.head_dim", p["kda_head"])
    _mla_keys(spec, p)
    spec.meta("{arch}.expert_feed_forward_length", p["n_ff_exp"])
    spec.meta("{arch}.expert_count", p["n_expert"])
    spec.meta("{arch}.expert_used_count", p["top_k"])
    spec.meta("{arch}.expert_shared_count", p["n_shared"])
    spec.meta("{arch}.leading_dense_block_count", p["n_dense"])
    spec.meta("{arch}.expert_weights_scale", 2.5, "f32")
    if k3:
        spec.meta("{arch}.expert_weights_norm", True, "bool")
    spec.meta("{arch}.expert_gating_func", 2)


def _kda_block(spec, il, p, t, factored_gate):
    """One KDA block's tensors: q/k/v short convs and projections, the decay gate, beta, A, dt bias, the
    output gate (K3: ssm_g; kimi-linear: ssm_g_a / ssm_g_b, with A as {1, n_head}), its norm and output."""
    n_embd, n_head, head = p["n_embd"], p["n_head"], p["kda_head"]
    d_inner = head * n_head
    for conv in ("q", "k", "v"):
        spec.add(f"blk.{il}.ssm_conv1d_{conv}.weight", (p["conv"], 1, d_inner), t.norm)
    for name in ("attn_q", "attn_k", "attn_v"):
        spec.add(f"blk.{il}.{name}.weight", (n_embd, d_inner), t.resident)
    spec.add(f"blk.{il}.ssm_f_a.weight", (n_embd, head), t.resident)
    spec.add(f"blk.{il}.ssm_f_b.weight", (head, d_inner), t.resident)
    spec.add(f"blk.{il}.ssm_beta.weight", (n_embd, n_head), t.norm)
    spec.add(f"blk.{il}.ssm_a", (1, n_head) if factored_gate else (n_head,), t.norm)
    spec.add(f"blk.{il}.ssm_dt.bias", (d_inner,), t.norm)
    if factored_gate:
        spec.add(f"blk.{il}.ssm_g_a.weight", (n_embd, head), t.resident)
        spec.add(f"blk.{il}.ssm_g_b.weight", (head, d_inner), t.resident)
    else:
        spec.add(f"blk.{il}.ssm_g.weight", (n_embd, d_inner), t.resident)
    spec.add(f"blk.{il}.ssm_norm.weight", (head,), t.norm)
    spec.add(f"blk.{il}.attn_output.weight", (d_inner, n_embd), t.resident)


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
    spec.meta("{arch}.expert_latent_length", p["latent"])
    spec.meta("{arch}.activation.situ_beta", 1.0, "f32")
    spec.meta("{arch}.activation.situ_linear_beta", 0.5, "f32")
    spec.meta("{arch}.attn_res.block_size", 8)
    _embeddings(spec, p, t)
    spec.add("output_res_score.weight", (n_embd,), t.norm)
    for il in range(n_layer):
        spec.add(f"blk.{il}.attn_norm.weight", (n_embd,), t.norm)
        spec.add(f"blk.{il}.ffn_norm.weight", (n_embd,), t.norm)
        spec.add(f"blk.{il}.attn_res_score.weight", (n_embd,), t.norm)
        spec.add(f"blk.{il}.ffn_res_score.weight", (n_embd,), t.norm)
        if is_mla[il]:
            _mla_attention(spec, il, p, t)
            spec.add(f"blk.{il}.attn_gate.weight", (n_embd, n_head * p["v_head"]), t.resident)
        else:
            _kda_block(spec, il, p, t, factored_gate=False)
        if il < p["n_dense"]:
            _dense_ffn(spec, il, n_embd, p["n_ff"], t)
            continue
        spec.add(f"blk.{il}.ffn_gate_inp.weight", (n_embd, p["n_expert"]), t.norm)
        spec.add(f"blk.{il}.exp_probs_b.bias", (p["n_expert"],), t.norm)
        _experts(spec, il, p["latent"], p["n_ff_exp"], p["n_expert"], t)
        spec.add(f"blk.{il}.ffn_routed_down.weight", (n_embd, p["latent"]), t.resident)
        spec.add(f"blk.{il}.ffn_routed_up.weight", (p["latent"], n_embd), t.resident)
        spec.add(f"blk.{il}.ffn_routed_norm.weight", (p["latent"],), t.norm)
        _dense_ffn(spec, il, n_embd, p["n_ff_exp"] * p["n_shared"], t, suffix="_shexp")
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
        spec.add(f"blk.{il}.attn_norm.weight", (n_embd,), t.norm)
        spec.add(f"blk.{il}.ffn_norm.weight", (n_embd,), t.norm)
        if is_mla[il]:
            _mla_attention(spec, il, p, t)
        else:
            _kda_block(spec, il, p, t, factored_gate=True)
        if il < p["n_dense"]:
            _dense_ffn(spec, il, n_embd, p["n_ff"], t)
            continue
        spec.add(f"blk.{il}.ffn_gate_inp.weight", (n_embd, p["n_expert"]), t.norm)
        spec.add(f"blk.{il}.exp_probs_b.bias", (p["n_expert"],), t.norm)
        _experts(spec, il, n_embd, p["n_ff_exp"], p["n_expert"], t)
        _dense_ffn(spec, il, n_embd, p["n_ff_exp"] * p["n_shared"], t, suffix="_shexp")
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
    spec.meta("{arch}.kda.gate_lower_bound", -5.0, "f32")  # bailingmoe3.cpp requires it (and asserts < 0)
    spec.meta("{arch}.expert_weights_norm", True, "bool")
    if p["nextn"]:
        spec.meta("{arch}.nextn_predict_layers", p["nextn"])
    _embeddings(spec, p, t)
    for il in range(n_all):
        blk = f"blk.{il}."
        spec.add(blk + "attn_norm.weight", (n_embd,), t.norm)
        spec.add(blk + "ffn_norm.weight", (n_embd,), t.norm)
        if is_mla[il]:
            _mla_attention(spec, il, p, t)
            spec.add(blk + "attn_gate.weight", (n_embd, n_head), t.norm)
        else:
            for conv in ("q", "k", "v"):
                spec.add(f"{blk}ssm_conv1d_{conv}.weight", (p["conv"], 1, d_inner), t.norm)
            for name in ("attn_q", "attn_k", "attn_v"):
                spec.add(f"{blk}{name}.weight", (n_embd, d_inner), t.resident)
            spec.add(blk + "ssm_f_a.weight", (n_embd, d_inner), t.resident)
            spec.add(blk + "ssm_beta.weight", (n_embd, n_head), t.norm)
            spec.add(blk + "ssm_a", (1, n_head), t.norm)
            spec.add(blk + "ssm_dt.bias", (d_inner,), t.norm)
            spec.add(blk + "ssm_g_a.weight", (n_embd, d_inner), t.resident)
            spec.add(blk + "ssm_norm.weight", (head,), t.norm)
            spec.add(blk + "attn_output.weight", (d_inner, n_embd), t.resident)
        if il < p["n_dense"]:
            _dense_ffn(spec, il, n_embd, p["n_ff"], t)
        else:
            spec.add(blk + "ffn_gate_inp.weight", (n_embd, p["n_expert"]), t.norm)
            spec.add(blk + "exp_probs_b.bias", (p["n_expert"],), t.norm)
            _experts(spec, il, n_embd, p["n_ff_exp"], p["n_expert"], t)
            _dense_ffn(spec, il, n_embd, p["n_ff_exp"] * p["n_shared"], t, suffix="_shexp")
        if il >= trunk:
            spec.add(blk + "nextn.eh_proj.weight", (2 * n_embd, n_embd), t.resident)
            spec.add(blk + "nextn.enorm.weight", (n_embd,), t.norm)
            spec.add(blk + "nextn.hnorm.weight", (n_embd,), t.norm)
            spec.add(blk + "layer_output_norm.weight", (n_embd,), t.norm)
    return spec
def _gdn_keys(spec, p):
    """The gated delta net keys of the Qwen hybrids; returns (key_dim, value_dim)."""
    key_dim, value_dim = p["state"] * p["k_heads"], p["state"] * p["v_heads"]
    spec.meta("{arch}.ssm.conv_kernel", p["conv"])
    spec.meta("{arch}.ssm.inner_size", value_dim)
    spec.meta("{arch}.ssm.state_size", p["state"])
    spec.meta("{arch}.ssm.time_step_rank", p["v_heads"])
    spec.meta("{arch}.ssm.group_count", p["k_heads"])
    spec.meta("{arch}.full_attention_interval", p["full_every"])
    return key_dim, value_dim


def _gated_attention(spec, il, p, t):
    """A Qwen hybrid's full-attention block: queries with their output gate, K, V, q/k norms."""
    n_embd, head = p["n_embd"], p["head"]
    q, kv = p["n_head"] * head, p["n_head_kv"] * head
    spec.add(f"blk.{il}.attn_q.weight", (n_embd, 2 * q), t.resident)
    spec.add(f"blk.{il}.attn_k.weight", (n_embd, kv), t.resident)
    spec.add(f"blk.{il}.attn_v.weight", (n_embd, kv), t.resident)
    spec.add(f"blk.{il}.attn_output.weight", (q, n_embd), t.resident)
    spec.add(f"blk.{il}.attn_q_norm.weight", (head,), t.norm)
    spec.add(f"blk.{il}.attn_k_norm.weight", (head,), t.norm)


def _gdn_block(spec, il, p, t, key_dim, value_dim, fused_ba=False):
    """A gated delta net block: qkv and gate projections, conv, dt bias, A, beta / alpha (qwen3next:
    one ssm_ba projection), the norm and the output projection."""
    n_embd = p["n_embd"]
    conv_dim = 2 * key_dim + value_dim
    spec.add(f"blk.{il}.attn_qkv.weight", (n_embd, conv_dim), t.resident)
    spec.add(f"blk.{il}.attn_gate.weight", (n_embd, value_dim), t.resident)
    spec.add(f"blk.{il}.ssm_conv1d.weight", (p["conv"], conv_dim), t.norm)
    spec.add(f"blk.{il}.ssm_dt.bias", (p["v_heads"],), t.norm)
    spec.add(f"blk.{il}.ssm_a", (p["v_heads"],), t.norm)
    if fused_ba:
        spec.add(f"blk.{il}.ssm_ba.weight", (n_embd, 2 * p["v_heads"]), t.norm)
    else:
        spec.add(f"blk.{il}.ssm_beta.weight", (n_embd, p["v_heads"]), t.norm)
        spec.add(f"blk.{il}.ssm_alpha.weight", (n_embd, p["v_heads"]), t.norm)
    spec.add(f"blk.{il}.ssm_norm.weight", (p["state"],), t.norm)
    spec.add(f"blk.{il}.ssm_out.weight", (value_dim, n_embd), t.resident)


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
        spec.meta("{arch}.nextn_predict_layers", p["nextn"])
    n_embd, head = p["n_embd"], p["head"]
    spec.meta("{arch}.feed_forward_length", p["n_ff"] if dense else p["n_ff_exp"])
    spec.meta("{arch}.attention.head_count", p["n_head"])
    spec.meta("{arch}.attention.head_count_kv", p["n_head_kv"])
    spec.meta("{arch}.attention.key_length", head)
    spec.meta("{arch}.attention.value_length", head)
    spec.meta("{arch}.rope.dimension_count", p["rope"])
    if p["arch"] in ("qwen35moe", "qwen35"):
        spec.meta("{arch}.rope.dimension_sections", [11, 11, 10, 0], "i32[]")
    if not dense:
        spec.meta("{arch}.expert_count", p["n_expert"])
        spec.meta("{arch}.expert_used_count", p["top_k"])
        spec.meta("{arch}.expert_feed_forward_length", p["n_ff_exp"])
        spec.meta("{arch}.expert_shared_feed_forward_length", p["n_ff_shexp"])
    key_dim, value_dim = p["state"] * p["k_heads"], p["state"] * p["v_heads"]
    spec.meta("{arch}.ssm.conv_kernel", p["conv"])
    spec.meta("{arch}.ssm.inner_size", value_dim)
    spec.meta("{arch}.ssm.state_size", p["state"])
    spec.meta("{arch}.ssm.time_step_rank", p["v_heads"])
    spec.meta("{arch}.ssm.group_count", p["k_heads"])
    spec.meta("{arch}.full_attention_interval", p["full_every"])
    _embeddings(spec, p, t)
    for il in range(n_all):
        spec.add(f"blk.{il}.attn_norm.weight", (n_embd,), t.norm)
        spec.add(f"blk.{il}.post_attention_norm.weight", (n_embd,), t.norm)
        if il >= trunk:
            _nextn_block(spec, il, n_embd, t)
        if (il + 1) % p["full_every"] == 0 or il >= trunk:
            q = p["n_head"] * head
            kv = p["n_head_kv"] * head
            spec.add(f"blk.{il}.attn_q.weight", (n_embd, 2 * q), t.resident)
            spec.add(f"blk.{il}.attn_k.weight", (n_embd, kv), t.resident)
            spec.add(f"blk.{il}.attn_v.weight", (n_embd, kv), t.resident)
            spec.add(f"blk.{il}.attn_output.weight", (q, n_embd), t.resident)
            spec.add(f"blk.{il}.attn_q_norm.weight", (head,), t.norm)
            spec.add(f"blk.{il}.attn_k_norm.weight", (head,), t.norm)
        else:
            conv_dim = 2 * key_dim + value_dim
            spec.add(f"blk.{il}.attn_qkv.weight", (n_embd, conv_dim), t.resident)
            spec.add(f"blk.{il}.attn_gate.weight", (n_embd, value_dim), t.resident)
            spec.add(f"blk.{il}.ssm_conv1d.weight", (p["conv"], conv_dim), t.norm)
            spec.add(f"blk.{il}.ssm_dt.bias", (p["v_heads"],), t.norm)
            spec.add(f"blk.{il}.ssm_a", (p["v_heads"],), t.norm)
            if p["arch"] == "qwen3next":  # beta and alpha in one projection
                spec.add(f"blk.{il}.ssm_ba.weight", (n_embd, 2 * p["v_heads"]), t.norm)
            else:
                spec.add(f"blk.{il}.ssm_beta.weight", (n_embd, p["v_heads"]), t.norm)
                spec.add(f"blk.{il}.ssm_alpha.weight", (n_embd, p["v_heads"]), t.norm)
            spec.add(f"blk.{il}.ssm_norm.weight", (p["state"],), t.norm)
            spec.add(f"blk.{il}.ssm_out.weight", (value_dim, n_embd), t.resident)
        if dense:
            _dense_ffn(spec, il, n_embd, p["n_ff"], t)
            continue
        spec.add(f"blk.{il}.ffn_gate_inp.weight", (n_embd, p["n_expert"]), t.norm)
        _experts(spec, il, n_embd, p["n_ff_exp"], p["n_expert"], t)
        spec.add(f"blk.{il}.ffn_gate_inp_shexp.weight", (n_embd,), t.norm)
        _dense_ffn(spec, il, n_embd, p["n_ff_shexp"], t, suffix="_shexp")
    return spec


def _nextn_block(spec, il, n_embd, t):
    """The NextN/MTP input-fusion tensors of a trailing predict block (DeepSeek-V3, GLM-4.5)."""
    spec.add(f"blk.{il}.nextn.eh_proj.weight", (2 * n_embd, n_embd), t.resident)
    spec.add(f"blk.{il}.nextn.enorm.weight", (n_embd,), t.norm)
    spec.add(f"blk.{il}.nextn.hnorm.weight", (n_embd,), t.norm)
    spec.add(f"blk.{il}.nextn.shared_head_norm.weight", (n_embd,), t.norm)


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
    spec.meta("{arch}.attention.indexer.head_count", p["idx_heads"])
    spec.meta("{arch}.attention.indexer.key_length", p["idx_head"])
    spec.meta("{arch}.attention.indexer.top_k", p["idx_top_k"])
    if p["nextn"]:
        spec.meta("{arch}.nextn_predict_layers", p["nextn"])
    n_embd = p["n_embd"]
    for il in range(trunk + p["nextn"]):
        spec.add(f"blk.{il}.indexer.k_norm.weight", (p["idx_head"],), t.norm)
        spec.add(f"blk.{il}.indexer.k_norm.bias", (p["idx_head"],), t.norm)
        spec.add(f"blk.{il}.indexer.proj.weight", (n_embd, p["idx_heads"]), t.norm)
        spec.add(f"blk.{il}.indexer.attn_k.weight", (n_embd, p["idx_head"]), t.resident)
        spec.add(f"blk.{il}.indexer.attn_q_b.weight", (p["q_lora"], p["idx_heads"] * p["idx_head"]), t.resident)
        if il >= trunk:
            _nextn_block(spec, il, n_embd, t)
    return spec


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
    spec.meta("{arch}.attention.indexer.types", types, "u32[]")
    shared = {il for il, full in enumerate(types) if not full}
    spec.tensors = [tensor for tensor in spec.tensors
                    if not (".indexer." in tensor.name and int(tensor.name.split(".")[1]) in shared)]
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
    spec.meta("{arch}.feed_forward_length", p["n_ff"])
    spec.meta("{arch}.attention.head_count", p["n_head"])
    spec.meta("{arch}.attention.head_count_kv", 1)
    spec.meta("{arch}.expert_count", p["n_expert"])
    spec.meta("{arch}.expert_used_count", p["top_k"])
    spec.meta("{arch}.expert_gating_func", 2)
    spec.meta("{arch}.leading_dense_block_count", p["n_dense"])
    spec.meta("{arch}.expert_feed_forward_length", p["n_ff_exp"])
    spec.meta("{arch}.expert_shared_count", p["n_shared"])
    spec.meta("{arch}.expert_weights_scale", 2.5, "f32")
    spec.meta("{arch}.expert_weights_norm", True, "bool")
    _mla_keys(spec, p)
    spec.meta("{arch}.attention.kv_lora_rank_swa", p["kv_lora_swa"])
    spec.meta("{arch}.attention.key_length_swa", p["kv_lora_swa"] + p["rope"])
    spec.meta("{arch}.attention.value_length_swa", p["kv_lora_swa"])
    spec.meta("{arch}.attention.key_length_mla_swa", p["qk_nope_swa"] + p["rope"])
    spec.meta("{arch}.attention.value_length_mla_swa", p["v_head_swa"])
    spec.meta("{arch}.rope.freq_base_swa", 10000.0, "f32")
    spec.meta("{arch}.attention.sliding_window", p["window"])
    spec.meta("{arch}.attention.sliding_window_pattern", pattern, "u32[]")
    spec.meta("{arch}.attention.indexer.head_count", p["idx_heads"])
    spec.meta("{arch}.attention.indexer.key_length", p["idx_head"])
    spec.meta("{arch}.attention.indexer.top_k", p["idx_top_k"])
    spec.meta("{arch}.attention.indexer.types", [1 - flag for flag in pattern], "u32[]")
    if p["nextn"]:
        spec.meta("{arch}.nextn_predict_layers", p["nextn"])
    _embeddings(spec, p, t)
    swa_geometry = {"kv_lora": p["kv_lora_swa"], "qk_nope": p["qk_nope_swa"], "v_head": p["v_head_swa"]}
    for il in range(n_block):
        is_mtp = il >= trunk
        is_swa = is_mtp or pattern[il]  # the NextN block uses the sliding-window geometry
        spec.add(f"blk.{il}.attn_norm.weight", (n_embd,), t.norm)
        _mla_attention(spec, il, p | swa_geometry if is_swa else p, t)
        spec.add(f"blk.{il}.attn_k_norm.weight", (p["rope"],), t.norm)
        spec.add(f"blk.{il}.attn_gate.weight", (n_embd, p["n_head"]), t.resident)
        spec.add(f"blk.{il}.ffn_norm.weight", (n_embd,), t.norm)
        if not is_mtp and not pattern[il]:
            spec.add(f"blk.{il}.indexer.k_norm.weight", (p["idx_head"],), t.norm)
            spec.add(f"blk.{il}.indexer.k_norm.bias", (p["idx_head"],), t.norm)
            spec.add(f"blk.{il}.indexer.proj.weight", (n_embd, p["idx_heads"]), t.norm)
            spec.add(f"blk.{il}.indexer.attn_k.weight", (n_embd, p["idx_head"]), t.resident)
            spec.add(f"blk.{il}.indexer.attn_q_b.weight", (p["q_lora"], p["idx_heads"] * p["idx_head"]), t.resident)
        if is_mtp or il < p["n_dense"]:
            _dense_ffn(spec, il, n_embd, p["n_ff"], t)
        else:
            spec.add(f"blk.{il}.ffn_gate_inp.weight", (n_embd, p["n_expert"]), t.norm)
            spec.add(f"blk.{il}.exp_probs_b.bias", (p["n_expert"],), t.norm)
            _experts(spec, il, n_embd, p["n_ff_exp"], p["n_expert"], t)
            _dense_ffn(spec, il, n_embd, p["n_ff_exp"] * p["n_shared"], t, suffix="_shexp")
        if is_mtp:
            _nextn_block(spec, il, n_embd, t)
            spec.add(f"blk.{il}.nextn.embed_tokens.weight", (n_embd, p["vocab"]), t.embed)
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
    spec.meta("{arch}.feed_forward_length", p["n_ff"])
    spec.meta("{arch}.attention.head_count", p["n_head"])
    spec.meta("{arch}.attention.head_count_kv", 1)
    spec.meta("{arch}.expert_count", p["n_expert"])
    spec.meta("{arch}.expert_used_count", p["top_k"])
    spec.meta("{arch}.expert_gating_func", 2)
    spec.meta("{arch}.leading_dense_block_count", p["n_dense"])
    spec.meta("{arch}.expert_feed_forward_length", p["n_ff_exp"])
    spec.meta("{arch}.expert_shared_count", p["n_shared"])
    spec.meta("{arch}.expert_weights_scale", 1.0, "f32")
    spec.meta("{arch}.expert_weights_norm", True, "bool")
    spec.meta("{arch}.swiglu_clamp_exp", 10.0, "f32")
    spec.meta("{arch}.hyper_connection.count", hc)
    spec.meta("{arch}.hyper_connection.epsilon", 1e-6, "f32")
    spec.meta("{arch}.hyper_connection.magnitude", 2.0, "f32")
    _mla_keys(spec, p)
    if p["idx_top_k"]:
        spec.meta("{arch}.attention.indexer.head_count", p["idx_heads"])
        spec.meta("{arch}.attention.indexer.key_length", p["idx_head"])
        spec.meta("{arch}.attention.indexer.top_k", p["idx_top_k"])
        spec.meta("{arch}.attention.indexer.types", types, "u32[]")
    _embeddings(spec, p, t)
    spec.add("output_hc_fn.weight", (hc * n_embd, hc), t.norm)
    spec.add("output_hc_base.weight", (hc,), t.norm)
    spec.add("output_hc_scale.weight", (1,), t.norm)
    for il in range(n_layer):
        spec.add(f"blk.{il}.attn_norm.weight", (n_embd,), t.norm)
        spec.add(f"blk.{il}.attn_sinks.weight", (p["n_head"],), t.norm)
        _mla_attention(spec, il, p, t)
        spec.add(f"blk.{il}.attn_gate.weight", (n_embd, p["n_head"] * p["v_head"]), t.resident)
        if p["idx_top_k"] and types[il]:
            spec.add(f"blk.{il}.indexer.attn_q_b.weight", (p["q_lora"], p["idx_heads"] * p["idx_head"]), t.resident)
            spec.add(f"blk.{il}.indexer.attn_k.weight", (n_embd, p["idx_head"]), t.resident)
            spec.add(f"blk.{il}.indexer.k_norm.weight", (p["idx_head"],), t.norm)
            spec.add(f"blk.{il}.indexer.k_norm.bias", (p["idx_head"],), t.norm)
            spec.add(f"blk.{il}.indexer.proj.weight", (n_embd, p["idx_heads"]), t.norm)
        for part in ("attn", "ffn"):
            spec.add(f"blk.{il}.hc_{part}_fn.weight", (hc * n_embd, 2 * hc), t.norm)
            spec.add(f"blk.{il}.hc_{part}_base.weight", (2 * hc,), t.norm)
            spec.add(f"blk.{il}.hc_{part}_scale.weight", (2,), t.norm)
        spec.add(f"blk.{il}.ffn_norm.weight", (n_embd,), t.norm)
        if il < p["n_dense"]:
            _dense_ffn(spec, il, n_embd, p["n_ff"], t)
            continue
        spec.add(f"blk.{il}.ffn_gate_inp.weight", (n_embd, p["n_expert"]), t.norm)
        spec.add(f"blk.{il}.exp_probs_b.bias", (p["n_expert"],), t.norm)
        _experts(spec, il, n_embd, p["n_ff_exp"], p["n_expert"], t)
        _dense_ffn(spec, il, n_embd, p["n_ff_exp"] * p["n_shared"], t, suffix="_shexp")
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
    spec.meta("{arch}.feed_forward_length", p["n_ff"])
    spec.meta("{arch}.attention.head_count", n_head)
    spec.meta("{arch}.attention.head_count_kv", [0 if kind == "K" else 1 for kind in kinds], "u32[]")
    spec.meta("{arch}.expert_count", p["n_expert"])
    spec.meta("{arch}.expert_used_count", p["top_k"])
    spec.meta("{arch}.expert_gating_func", 2)
    spec.meta("{arch}.leading_dense_block_count", p["n_dense"])
    spec.meta("{arch}.expert_feed_forward_length", p["n_ff_exp"])
    spec.meta("{arch}.expert_shared_count", p["n_shared"])
    spec.meta("{arch}.expert_weights_scale", 2.5, "f32")
    spec.meta("{arch}.expert_weights_norm", True, "bool")
    _mla_keys(spec, p | {"rope": 0})
    spec.meta("{arch}.ssm.conv_kernel", p["conv"])
    spec.meta("{arch}.kda.head_dim", p["kda_head"])
    spec.meta("{arch}.attention.indexer.head_count", p["idx_heads"])
    spec.meta("{arch}.attention.indexer.key_length", p["idx_head"])
    spec.meta("{arch}.attention.indexer.top_k", p["idx_top_k"])
    spec.meta("{arch}.attention.indexer.kpool", p["kpool"])
    idx_types = [int(c) for c in p.get("idx_types", "1" * trunk)]
    if "idx_types" in p:
        spec.meta("{arch}.attention.indexer.types", idx_types, "u32[]")
    spec.meta("{arch}.hyper_connection.count", hc)
    spec.meta("{arch}.hyper_connection.sinkhorn_iterations", 20)
    spec.meta("{arch}.hyper_connection.epsilon", 1e-6, "f32")
    if p["nextn"]:
        spec.meta("{arch}.nextn_predict_layers", p["nextn"])
    _embeddings(spec, p, t)
    hc_mix = (2 + hc) * hc
    idx = p["idx_head"]
    for il, kind in enumerate(kinds):
        spec.add(f"blk.{il}.attn_norm.weight", (n_embd,), t.norm)
        spec.add(f"blk.{il}.ffn_norm.weight", (n_embd,), t.norm)
        if il < trunk:
            for part in ("attn", "ffn"):
                spec.add(f"blk.{il}.hc_{part}_fn.weight", (hc * n_embd, hc_mix), t.norm)
                spec.add(f"blk.{il}.hc_{part}_base.weight", (hc_mix,), t.norm)
                spec.add(f"blk.{il}.hc_{part}_scale.weight", (3,), t.norm)
        if kind == "K":
            _kda_block(spec, il, p, t, factored_gate=True)
            spec.tensors = [TensorSpec(x.name, (n_head,), x.type_id) if x.name == f"blk.{il}.ssm_a" else x
                            for x in spec.tensors]
        else:
            _mla_attention(spec, il, p | {"rope": 0}, t)
        if kind != "K" and (il >= trunk or idx_types[il]):
            spec.add(f"blk.{il}.indexer.k_norm.weight", (idx,), t.norm)
            spec.add(f"blk.{il}.indexer.k_norm.bias", (idx,), t.norm)
            spec.add(f"blk.{il}.indexer.proj.weight", (n_embd, p["idx_heads"]), t.norm)
            spec.add(f"blk.{il}.indexer.attn_k.weight", (n_embd, idx), t.resident)
            spec.add(f"blk.{il}.indexer.attn_q_b.weight", (p["q_lora"], p["idx_heads"] * idx), t.resident)
            spec.add(f"blk.{il}.indexer_compressor_gate.weight", (n_embd, idx), t.resident)
            spec.add(f"blk.{il}.indexer_compressor_ape.weight", (idx, p["kpool"]), t.norm)
        if il < p["n_dense"]:
            _dense_ffn(spec, il, n_embd, p["n_ff"], t)
        else:
            spec.add(f"blk.{il}.ffn_gate_inp.weight", (n_embd, p["n_expert"]), t.norm)
            spec.add(f"blk.{il}.exp_probs_b.bias", (p["n_expert"],), t.norm)
            _experts(spec, il, n_embd, p["n_ff_exp"], p["n_expert"], t)
            _dense_ffn(spec, il, n_embd, p["n_ff_exp"] * p["n_shared"], t, suffix="_shexp")
        if il >= trunk:
            _nextn_block(spec, il, n_embd, t)
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
    spec.meta("{arch}.feed_forward_length", p["n_ff_exp"])
    spec.meta("{arch}.attention.head_count", p["n_head"])
    spec.meta("{arch}.attention.head_count_kv", p["n_head_kv"])
    spec.meta("{arch}.attention.key_length", head)
    spec.meta("{arch}.attention.value_length", head)
    spec.meta("{arch}.rope.dimension_count", p["rope"])
    spec.meta("{arch}.rope.dimension_sections", [p["rope"] // 8, p["rope"] // 8, p["rope"] // 4, 0], "i32[]")
    spec.meta("{arch}.expert_count", p["n_expert"])
    spec.meta("{arch}.expert_used_count", p["top_k"])
    spec.meta("{arch}.expert_feed_forward_length", p["n_ff_exp"])
    spec.meta("{arch}.expert_shared_feed_forward_length", p["n_ff_shexp"])
    key_dim, value_dim = _gdn_keys(spec, p)
    spec.meta("{arch}.hyper_connection.count", hc)
    spec.meta("{arch}.hyper_connection.low_rank", rank)
    spec.meta("{arch}.attention.indexer.head_count", p["idx_heads"])
    spec.meta("{arch}.attention.indexer.key_length", p["idx_head"])
    spec.meta("{arch}.attention.indexer.top_k", p["idx_top_k"])
    if p["ratio"]:  # one ratio for every layer, or a list per layer
        ratios = list(p["ratio"]) if isinstance(p["ratio"], (list, tuple)) else [p["ratio"]] * n_layer
        spec.meta("{arch}.attention.compress_ratios", ratios, "u32[]")
    if p["ple"] is not None:
        n_heads = (p["ple_ngram"] - 1) * p["ple_heads"]
        spec.meta("{arch}.ple.layers", [p["ple"]], "u32[]")
        spec.meta("{arch}.ple.ngram_size", p["ple_ngram"])
        spec.meta("{arch}.ple.heads_per_ngram", p["ple_heads"])
        spec.meta("{arch}.ple.conv_kernel", p["ple_kernel"])
        spec.meta("{arch}.ple.eos_token_id", 2)
        spec.meta("{arch}.embedding_length_per_layer_input", n_embd // n_heads)
        spec.meta("{arch}.ple.layer_multipliers", [1000003 + 2 * i for i in range(p["ple_ngram"])], "u64[]")
        spec.meta("{arch}.ple.head_offsets", [h * p["ple_vocab"] for h in range(n_heads)], "u64[]")
        spec.meta("{arch}.ple.head_vocab_sizes", [p["ple_vocab"]] * n_heads, "u64[]")
        spec.add("per_layer_token_embd.weight", (n_embd // n_heads, n_heads * p["ple_vocab"]), t.embed)
    spec.add("token_embd.weight", (n_embd, p["vocab"]), t.embed)
    spec.add("output.weight", (n_embd, p["vocab"]), t.output)
    spec.add("output_hc_norm.weight", (n_embd, hc), t.norm)
    spec.add("output_hc_down.weight", (hc * n_embd, rank), t.norm)
    spec.add("output_hc_up.weight", (rank, hc * n_embd), t.norm)
    for il in range(n_layer):
        for part in ("attn", "ffn"):
            spec.add(f"blk.{il}.hc_{part}_norm.weight", (n_embd, hc), t.norm)
            spec.add(f"blk.{il}.hc_{part}_down.weight", (hc * n_embd, rank), t.norm)
            spec.add(f"blk.{il}.hc_{part}_up.weight", (rank, hc * n_embd), t.norm)
            spec.add(f"blk.{il}.hc_{part}_inject.weight", (hc * n_embd, hc), t.norm)
        if (il + 1) % p["full_every"] == 0:
            idx = p["idx_head"]
            _gated_attention(spec, il, p, t)
            spec.add(f"blk.{il}.indexer.q_proj.weight", (n_embd, p["idx_heads"] * idx), t.resident)
            spec.add(f"blk.{il}.indexer.k_proj.weight", (n_embd, idx), t.resident)
            spec.add(f"blk.{il}.indexer.q_norm.weight", (idx,), t.norm)
            spec.add(f"blk.{il}.indexer.k_norm.weight", (idx,), t.norm)
        else:
            _gdn_block(spec, il, p, t, key_dim, value_dim)
        if il == p["ple"]:
            spec.add(f"blk.{il}.ple_key.weight", (n_embd, hc * n_embd), t.resident)
            spec.add(f"blk.{il}.ple_value.weight", (n_embd, n_embd), t.resident)
            for norm in ("key", "query", "conv"):
                spec.add(f"blk.{il}.ple_norm_{norm}.weight", (n_embd, hc), t.norm)
            conv_type = t.norm if p["ple_conv_type"] is None else p["ple_conv_type"]
            spec.add(f"blk.{il}.ple_conv1d.weight", (p["ple_kernel"], hc * n_embd), conv_type)
        spec.add(f"blk.{il}.ffn_gate_inp.weight", (n_embd, p["n_expert"]), t.norm)
        _experts(spec, il, n_embd, p["n_ff_exp"], p["n_expert"], t)
        spec.add(f"blk.{il}.ffn_gate_inp_shexp.weight", (n_embd,), t.norm)
        _dense_ffn(spec, il, n_embd, p["n_ff_shexp"], t, suffix="_shexp")
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
    spec.meta("{arch}.feed_forward_length", p["n_ff_exp"])
    spec.meta("{arch}.attention.head_count", n_head)
    spec.meta("{arch}.attention.head_count_kv", 1)
    spec.meta("{arch}.attention.key_length", head)
    spec.meta("{arch}.attention.value_length", head)
    spec.meta("{arch}.rope.dimension_count", p["rope"])
    spec.meta("{arch}.attention.q_lora_rank", p["q_lora"])
    spec.meta("{arch}.attention.sliding_window", p["swa"])
    spec.meta("{arch}.expert_count", p["n_expert"])
    spec.meta("{arch}.expert_used_count", p["top_k"])
    spec.meta("{arch}.expert_feed_forward_length", p["n_ff_exp"])
    spec.meta("{arch}.expert_shared_count", p["n_shared"])
    spec.meta("{arch}.expert_weights_scale", 1.5, "f32")
    spec.meta("{arch}.expert_weights_norm", True, "bool")
    spec.meta("{arch}.expert_gating_func", 4)  # sqrt(softplus), the only scoring the loader accepts
    spec.meta("{arch}.swiglu_clamp_exp", 10.0, "f32")
    spec.meta("{arch}.attention.indexer.head_count", p["idx_heads"])
    spec.meta("{arch}.attention.indexer.key_length", p["idx_head"])
    spec.meta("{arch}.attention.indexer.top_k", p["idx_top_k"])
    spec.meta("{arch}.attention.output_group_count", p["o_groups"])
    spec.meta("{arch}.attention.output_lora_rank", p["o_lora"])
    spec.meta("{arch}.attention.compress_ratios", ratios, "u32[]")
    spec.meta("{arch}.attention.compress_rope_freq_base", 160000.0, "f32")
    spec.meta("{arch}.hyper_connection.count", hc)
    spec.meta("{arch}.hyper_connection.sinkhorn_iterations", 20)
    spec.meta("{arch}.hyper_connection.epsilon", 1e-6, "f32")
    spec.meta("{arch}.hash_layer_count", 0)
    spec.meta("{arch}.embedding_length_out", hc * n_embd)
    if p["nextn"]:
        spec.meta("{arch}.nextn_predict_layers", p["nextn"])
    _embeddings(spec, p, t)
    hc_dim, hc_mix = hc * n_embd, (2 + hc) * hc
    spec.add("output_hc_fn.weight", (hc_dim, hc), t.norm)
    spec.add("output_hc_base.weight", (hc,), t.norm)
    spec.add("output_hc_scale.weight", (1,), t.norm)
    for il, ratio in enumerate(ratios):
        spec.add(f"blk.{il}.attn_norm.weight", (n_embd,), t.norm)
        spec.add(f"blk.{il}.attn_sinks.weight", (n_head,), t.norm)
        spec.add(f"blk.{il}.attn_q_a.weight", (n_embd, p["q_lora"]), t.resident)
        spec.add(f"blk.{il}.attn_q_a_norm.weight", (p["q_lora"],), t.norm)
        spec.add(f"blk.{il}.attn_q_b.weight", (p["q_lora"], n_head * head), t.resident)
        spec.add(f"blk.{il}.attn_kv.weight", (n_embd, head), t.resident)
        spec.add(f"blk.{il}.attn_kv_a_norm.weight", (head,), t.norm)
        # the converter writes wo_a 2-D (the loader reshapes it to [heads x head / groups, o_lora, groups])
        spec.add(f"blk.{il}.attn_output_a.weight", (n_head * head // p["o_groups"], p["o_lora"] * p["o_groups"]), t.resident)
        spec.add(f"blk.{il}.attn_output_b.weight", (p["o_groups"] * p["o_lora"], n_embd), t.resident)
        for part in ("attn", "ffn"):
            spec.add(f"blk.{il}.hc_{part}_fn.weight", (hc_dim, hc_mix), t.norm)
            spec.add(f"blk.{il}.hc_{part}_base.weight", (hc_mix,), t.norm)
            spec.add(f"blk.{il}.hc_{part}_scale.weight", (3,), t.norm)
        if ratio:
            coff = 2 if ratio == 4 else 1
            spec.add(f"blk.{il}.attn_compressor_kv.weight", (n_embd, coff * head), t.resident)
            spec.add(f"blk.{il}.attn_compressor_gate.weight", (n_embd, coff * head), t.resident)
            spec.add(f"blk.{il}.attn_compressor_ape.weight", (coff * head, ratio), t.norm)
            spec.add(f"blk.{il}.attn_compressor_norm.weight", (head,), t.norm)
        if ratio == 4:
            idx = p["idx_head"]
            spec.add(f"blk.{il}.indexer.proj.weight", (n_embd, p["idx_heads"]), t.norm)
            spec.add(f"blk.{il}.indexer.attn_q_b.weight", (p["q_lora"], p["idx_heads"] * idx), t.resident)
            spec.add(f"blk.{il}.indexer_compressor_kv.weight", (n_embd, 2 * idx), t.resident)
            spec.add(f"blk.{il}.indexer_compressor_gate.weight", (n_embd, 2 * idx), t.resident)
            spec.add(f"blk.{il}.indexer_compressor_ape.weight", (2 * idx, ratio), t.norm)
            spec.add(f"blk.{il}.indexer_compressor_norm.weight", (idx,), t.norm)
        spec.add(f"blk.{il}.ffn_gate_inp.weight", (n_embd, p["n_expert"]), t.norm)
        spec.add(f"blk.{il}.exp_probs_b.bias", (p["n_expert"],), t.norm)
        spec.add(f"blk.{il}.ffn_norm.weight", (n_embd,), t.norm)
        _experts(spec, il, n_embd, p["n_ff_exp"], p["n_expert"], t)
        _dense_ffn(spec, il, n_embd, p["n_ff_exp"] * p["n_shared"], t, suffix="_shexp")
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
    spec.meta("{arch}.rope.dimension_count", head // 2)
    spec.meta("{arch}.expert_feed_forward_length", p["n_ff_exp"])
    spec.meta("{arch}.expert_shared_count", p["n_shared"])
    spec.meta("{arch}.leading_dense_block_count", p["n_dense"])
    spec.meta("{arch}.expert_gating_func", 2)
    spec.meta("{arch}.expert_weights_scale", 1.0, "f32")
    spec.meta("{arch}.expert_weights_norm", True, "bool")
    _router_groups(spec, p)
    if p["nextn"]:
        spec.meta("{arch}.nextn_predict_layers", p["nextn"])
    _embeddings(spec, p, t)
    for il in range(n_all):
        spec.add(f"blk.{il}.attn_norm.weight", (n_embd,), t.norm)
        _gqa_attention(spec, il, p, head, t)
        for name, rows in (("attn_q", p["n_head"] * head), ("attn_k", p["n_head_kv"] * head), ("attn_v", p["n_head_kv"] * head)):
            spec.add(f"blk.{il}.{name}.bias", (rows,), t.norm)
        if p["qk_norm"]:
            spec.add(f"blk.{il}.attn_q_norm.weight", (head,), t.norm)
            spec.add(f"blk.{il}.attn_k_norm.weight", (head,), t.norm)
        spec.add(f"blk.{il}.post_attention_norm.weight", (n_embd,), t.norm)
        if il < p["n_dense"]:
            _dense_ffn(spec, il, n_embd, p["n_ff"], t)
        else:
            spec.add(f"blk.{il}.ffn_gate_inp.weight", (n_embd, p["n_expert"]), t.norm)
            spec.add(f"blk.{il}.exp_probs_b.bias", (p["n_expert"],), t.norm)
            _experts(spec, il, n_embd, p["n_ff_exp"], p["n_expert"], t)
            _dense_ffn(spec, il, n_embd, p["n_ff_exp"] * p["n_shared"], t, suffix="_shexp")
        if il >= p["n_layer"]:
            _nextn_block(spec, il, n_embd, t)
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
    spec.meta("{arch}.rope.dimension_count", p["rope"])
    spec.meta("{arch}.expert_feed_forward_length", p["n_ff_exp"])
    spec.meta("{arch}.expert_gating_func", 2)
    _embeddings(spec, p, t)
    for il in range(p["n_layer"]):
        spec.add(f"blk.{il}.attn_norm.weight", (n_embd,), t.norm)
        _gqa_attention(spec, il, p, head, t)
        spec.add(f"blk.{il}.attn_q_norm.weight", (p["n_head"] * head,), t.norm)
        spec.add(f"blk.{il}.attn_k_norm.weight", (p["n_head_kv"] * head,), t.norm)
        spec.add(f"blk.{il}.ffn_norm.weight", (n_embd,), t.norm)
        spec.add(f"blk.{il}.ffn_gate_inp.weight", (n_embd, p["n_expert"]), t.norm)
        spec.add(f"blk.{il}.exp_probs_b.bias", (p["n_expert"],), t.norm)
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
        blk = f"blk.{il}."
        spec.add(blk + "indexer.q_proj.weight", (p["n_embd"], p["n_head_kv"] * p["idx_head"]), t.resident)
        spec.add(blk + "indexer.k_proj.weight", (p["n_embd"], p["idx_head"]), t.resident)
        spec.add(blk + "indexer.q_norm.weight", (p["idx_head"],), t.norm)
        spec.add(blk + "indexer.k_norm.weight", (p["idx_head"],), t.norm)
    return spec


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
    spec.meta("{arch}.target_layers", list(p["target_layers"]), "i32[]")
    spec.meta("{arch}.block_size", p["block_size"])
    _embeddings(spec, p, t)
    spec.add("enc.output_norm.weight", (n_embd,), t.norm)
    spec.add("fc.weight", (len(p["target_layers"]) * n_embd, n_embd), t.resident)
    for il in range(p["n_layer"]):
        blk = f"blk.{il}."
        _normed_gqa_attention(spec, il, p, head, t)
        spec.add(blk + "ffn_norm.weight", (n_embd,), t.norm)
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
    spec.meta("{arch}.rope.dimension_count", head)
    spec.meta("{arch}.expert_feed_forward_length", p["n_ff_exp"])
    spec.meta("{arch}.interleave_moe_layer_step", p["moe_every"])
    _embeddings(spec, p, t)
    for il in range(p["n_layer"]):
        spec.add(f"blk.{il}.attn_norm.weight", (n_embd,), t.norm)
        _gqa_attention(spec, il, p, head, t)
        spec.add(f"blk.{il}.ffn_norm.weight", (n_embd,), t.norm)
        if (il + 1) % p["moe_every"] == 0:
            spec.add(f"blk.{il}.ffn_gate_inp.weight", (n_embd, p["n_expert"]), t.norm)
            _experts(spec, il, n_embd, p["n_ff_exp"], p["n_expert"], t)
            _dense_ffn(spec, il, n_embd, p["n_ff_exp"], t, suffix="_shexp")
        else:
            _dense_ffn(spec, il, n_embd, p["n_ff"], t)
    return spec


def _rwkv7_time_mix(spec, il, p, t):
    """An RWKV-7 time mix's tensors: the w/a/v/g low-rank paths (layer 0's v path at the iclr rank),
    the fused lerp, k_k/k_a/r_k and the four projections."""
    blk, n_embd = f"blk.{il}.", p["n_embd"]
    lora_v = p["lora_iclr"] if il == 0 else p["lora_value"]
    for name, rank in (("w", p["lora_decay"]), ("a", p["lora_iclr"]), ("v", lora_v)):
        spec.add(f"{blk}time_mix_{name}0.weight", (n_embd,), t.norm)
        spec.add(f"{blk}time_mix_{name}1.weight", (n_embd, rank), t.norm)
        spec.add(f"{blk}time_mix_{name}2.weight", (rank, n_embd), t.norm)
    spec.add(blk + "time_mix_g1.weight", (n_embd, p["lora_gate"]), t.norm)
    spec.add(blk + "time_mix_g2.weight", (p["lora_gate"], n_embd), t.norm)
    spec.add(blk + "time_mix_lerp_fused.weight", (n_embd, 1, 1, 6), t.norm)
    for name in ("k_k", "k_a", "r_k"):
        spec.add(f"{blk}time_mix_{name}.weight", (n_embd,), t.norm)
    for name in ("key", "value", "receptance", "output"):
        spec.add(f"{blk}time_mix_{name}.weight", (n_embd, n_embd), t.resident)


def _rwkv_norms(spec, p, t):
    """RWKV's embedding/output layer norms (with biases), embeddings and head."""
    n_embd = p["n_embd"]
    spec.add("token_embd.weight", (n_embd, p["vocab"]), t.embed)
    for name in ("token_embd_norm", "output_norm"):
        spec.add(name + ".weight", (n_embd,), t.norm)
        spec.add(name + ".bias", (n_embd,), t.norm)
    spec.add("output.weight", (n_embd, p["vocab"]), t.output)


def _rwkv_block_norms(spec, il, n_embd, t):
    for name in ("attn_norm", "attn_norm_2", "time_mix_ln"):
        spec.add(f"blk.{il}.{name}.weight", (n_embd,), t.norm)
        spec.add(f"blk.{il}.{name}.bias", (n_embd,), t.norm)


def _rwkv6_keys(spec, p, token_shift_count):
    spec.meta("{arch}.wkv.head_size", p["head_size"])
    spec.meta("{arch}.time_mix_extra_dim", p["mix_extra"])
    spec.meta("{arch}.time_decay_extra_dim", p["decay_extra"])
    spec.meta("{arch}.token_shift_count", token_shift_count)


def _rwkv6_lerp_and_decay(spec, il, p, t, first=False):
    """An RWKV-6 time mix's data-dependent lerp (w1/w2, lerp_x, the fused five), time_mix_first (the
    wkv6 bonus; rwkv6qwen2 has none) and low-rank decay."""
    blk, n_embd = f"blk.{il}.", p["n_embd"]
    spec.add(blk + "time_mix_w1.weight", (n_embd, p["mix_extra"] * 5), t.norm)
    spec.add(blk + "time_mix_w2.weight", (p["mix_extra"], n_embd, 5), t.norm)
    spec.add(blk + "time_mix_lerp_x.weight", (n_embd, 1, 1), t.norm)
    spec.add(blk + "time_mix_lerp_fused.weight", (n_embd, 1, 1, 5), t.norm)
    if first:
        spec.add(blk + "time_mix_first.weight", (p["head_size"], n_embd // p["head_size"]), t.norm)
    spec.add(blk + "time_mix_decay.weight", (n_embd,), t.norm)
    spec.add(blk + "time_mix_decay_w1.weight", (n_embd, p["decay_extra"]), t.norm)
    spec.add(blk + "time_mix_decay_w2.weight", (p["decay_extra"], n_embd), t.norm)


def rwkv6(t=Types(), **p):
    """RWKV-6 (`rwkv6`): time mix (a data-dependent lerp through time_mix_w1/w2, a low-rank decay, the
    wkv6 state, group norm, silu gate) and channel mix (receptance-gated relu^2) blocks, two token-shift
    rows per layer, no attention cache (llama.cpp src/models/rwkv6.cpp, rwkv6-base.cpp)."""
    p = {"n_layer": 4, "n_embd": 256, "head_size": 64, "n_ff": 896, "mix_extra": 32, "decay_extra": 64,
         "vocab": 1024, "ctx": 1048576} | p
    spec = ModelSpec("rwkv6", [])
    _common(spec, p)
    n_embd, n_ff = p["n_embd"], p["n_ff"]
    spec.meta("{arch}.feed_forward_length", n_ff)
    spec.meta("{arch}.attention.layer_norm_epsilon", 1e-5, "f32")
    _rwkv6_keys(spec, p, 2)
    _rwkv_norms(spec, p, t)
    for il in range(p["n_layer"]):
        blk = f"blk.{il}."
        _rwkv_block_norms(spec, il, n_embd, t)
        _rwkv6_lerp_and_decay(spec, il, p, t, first=True)
        for name in ("key", "value", "receptance", "gate", "output"):
            spec.add(f"{blk}time_mix_{name}.weight", (n_embd, n_embd), t.resident)
        spec.add(blk + "channel_mix_lerp_k.weight", (n_embd, 1, 1), t.norm)
        spec.add(blk + "channel_mix_lerp_r.weight", (n_embd, 1, 1), t.norm)
        spec.add(blk + "channel_mix_key.weight", (n_embd, n_ff), t.resident)
        spec.add(blk + "channel_mix_value.weight", (n_ff, n_embd), t.resident)
        spec.add(blk + "channel_mix_receptance.weight", (n_embd, n_embd), t.resident)
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
    spec.meta("{arch}.feed_forward_length", p["n_ff"])
    spec.meta("{arch}.attention.head_count", n_embd // head)
    spec.meta("{arch}.attention.head_count_kv", p["n_head_kv"])
    _rwkv6_keys(spec, p, 1)
    _embeddings(spec, p, t)
    for il in range(p["n_layer"]):
        blk = f"blk.{il}."
        spec.add(blk + "attn_norm.weight", (n_embd,), t.norm)
        _rwkv6_lerp_and_decay(spec, il, p, t)
        spec.add(blk + "time_mix_key.weight", (n_embd, kv_width), t.resident)
        spec.add(blk + "time_mix_value.weight", (n_embd, kv_width), t.resident)
        for name in ("receptance", "gate", "output"):
            spec.add(f"{blk}time_mix_{name}.weight", (n_embd, n_embd), t.resident)
        for name, width in (("key", kv_width), ("value", kv_width), ("receptance", n_embd)):
            spec.add(f"{blk}time_mix_{name}.bias", (width,), t.norm)
        spec.add(blk + "ffn_norm.weight", (n_embd,), t.norm)
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
    spec.meta("{arch}.feed_forward_length", p["n_ff"])
    spec.meta("{arch}.attention.layer_norm_epsilon", 1e-5, "f32")
    spec.meta("{arch}.wkv.head_size", p["head_size"])
    spec.meta("{arch}.attention.decay_lora_rank", p["lora_decay"])
    spec.meta("{arch}.attention.iclr_lora_rank", p["lora_iclr"])
    spec.meta("{arch}.attention.value_residual_mix_lora_rank", p["lora_value"])
    spec.meta("{arch}.attention.gate_lora_rank", p["lora_gate"])
    _rwkv_norms(spec, p, t)
    for il in range(p["n_layer"]):
        blk = f"blk.{il}."
        _rwkv_block_norms(spec, il, n_embd, t)
        _rwkv7_time_mix(spec, il, p, t)
        spec.add(blk + "channel_mix_lerp_k.weight", (n_embd, 1, 1), t.norm)
        spec.add(blk + "channel_mix_key.weight", (n_embd, p["n_ff"]), t.resident)
        spec.add(blk + "channel_mix_value.weight", (p["n_ff"], n_embd), t.resident)
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
    spec.meta("{arch}.feed_forward_length", p["n_ff"])
    spec.meta("{arch}.wkv.head_size", p["head_size"])
    spec.meta("{arch}.token_shift_count", 1)
    spec.meta("{arch}.attention.decay_lora_rank", p["lora_decay"])
    spec.meta("{arch}.attention.iclr_lora_rank", p["lora_iclr"])
    spec.meta("{arch}.attention.value_residual_mix_lora_rank", p["lora_value"])
    spec.meta("{arch}.attention.gate_lora_rank", p["lora_gate"])
    _embeddings(spec, p, t)
    for il in range(p["n_layer"]):
        blk = f"blk.{il}."
        spec.add(blk + "attn_norm.weight", (n_embd,), t.norm)
        _rwkv7_time_mix(spec, il, p, t)
        spec.add(blk + "ffn_norm.weight", (n_embd,), t.norm)
        _dense_ffn(spec, il, n_embd, p["n_ff"], t)
    return spec


def _mamba2_block(spec, il, p, t):
    """A Mamba-2 mixer's tensors (ssm_in, conv, dt bias, A, D, grouped norm, ssm_out)."""
    n_embd, d_inner = p["n_embd"], p["ssm_heads"] * p["ssm_head"]
    conv_dim = d_inner + 2 * p["groups"] * p["state"]
    spec.add(f"blk.{il}.ssm_in.weight", (n_embd, d_inner + conv_dim + p["ssm_heads"]), t.resident)
    spec.add(f"blk.{il}.ssm_conv1d.weight", (p["conv"], conv_dim), t.norm)
    spec.add(f"blk.{il}.ssm_conv1d.bias", (conv_dim,), t.norm)
    spec.add(f"blk.{il}.ssm_dt.bias", (p["ssm_heads"],), t.norm)
    spec.add(f"blk.{il}.ssm_a", (1, p["ssm_heads"]), t.norm)
    spec.add(f"blk.{il}.ssm_d", (1, p["ssm_heads"]), t.norm)
    spec.add(f"blk.{il}.ssm_norm.weight", (d_inner // p["groups"], p["groups"]), t.norm)
    spec.add(f"blk.{il}.ssm_out.weight", (d_inner, n_embd), t.resident)


def _ssm_keys(spec, p):
    spec.meta("{arch}.ssm.conv_kernel", p["conv"])
    spec.meta("{arch}.ssm.inner_size", p["ssm_heads"] * p["ssm_head"])
    spec.meta("{arch}.ssm.state_size", p["state"])
    spec.meta("{arch}.ssm.time_step_rank", p["ssm_heads"])
    spec.meta("{arch}.ssm.group_count", p["groups"])


def mamba2(t=Types(), **p):
    """Mamba-2 (`mamba2`): recurrent blocks only, no attention (llama.cpp src/models/mamba2.cpp)."""
    p = {"n_layer": 4, "n_embd": 256, "conv": 4, "ssm_heads": 8, "ssm_head": 64, "state": 64, "groups": 2,
         "vocab": 1024, "ctx": 4096} | p
    spec = ModelSpec("mamba2", [])
    _common(spec, p)
    _ssm_keys(spec, p)
    _embeddings(spec, p, t)
    for il in range(p["n_layer"]):
        spec.add(f"blk.{il}.attn_norm.weight", (p["n_embd"],), t.norm)
        _mamba2_block(spec, il, p, t)
    return spec


def _hybrid_widths(spec, p, pattern):
    """The FFN width and head counts of a hybrid layout: KV heads only in its attention (`*`) blocks."""
    spec.meta("{arch}.feed_forward_length", p["n_ff"])
    spec.meta("{arch}.attention.head_count", p["n_head"])
    spec.meta("{arch}.attention.head_count_kv", [p["n_head_kv"] if c == "*" else 0 for c in pattern], "u32[]")


def granitehybrid(t=Types(), **p):
    """Granite 4.0-H (`granitehybrid`): Mamba-2 blocks (head_count_kv 0, d_inner = 2 x n_embd) and
    attention blocks in a `pattern` of M and *, every block with routed experts and a shared expert
    (llama.cpp src/models/granite-hybrid.cpp)."""
    p = {"pattern": "MMM*MMM*", "n_embd": 256, "n_head": 4, "n_head_kv": 2, "n_ff": 128, "n_ff_shexp": 256,
         "n_expert": 16, "top_k": 4, "conv": 4, "ssm_heads": 8, "ssm_head": 64, "state": 64, "groups": 1,
         "vocab": 1024, "ctx": 4096} | p
    pattern = p["pattern"]
    spec = ModelSpec("granitehybrid", [])
    _common(spec, p | {"n_layer": len(pattern)})
    n_embd = p["n_embd"]
    head = n_embd // p["n_head"]
    _hybrid_widths(spec, p, pattern)
    spec.meta("{arch}.expert_count", p["n_expert"])
    spec.meta("{arch}.expert_used_count", p["top_k"])
    spec.meta("{arch}.expert_shared_feed_forward_length", p["n_ff_shexp"])
    spec.meta("{arch}.rope.dimension_count", head)
    _ssm_keys(spec, p)
    _embeddings(spec, p, t)
    for il, kind in enumerate(pattern):
        spec.add(f"blk.{il}.attn_norm.weight", (n_embd,), t.norm)
        if kind == "M":
            _mamba2_block(spec, il, p, t)
        else:
            _gqa_attention(spec, il, p, head, t)
        spec.add(f"blk.{il}.ffn_norm.weight", (n_embd,), t.norm)
        spec.add(f"blk.{il}.ffn_gate_inp.weight", (n_embd, p["n_expert"]), t.norm)
        _experts(spec, il, n_embd, p["n_ff"], p["n_expert"], t)
        _dense_ffn(spec, il, n_embd, p["n_ff_shexp"], t, suffix="_shexp")
    return spec


def _mamba1_block(spec, il, n_embd, d_inner, d_state, dt_rank, d_conv, t, norms):
    """A Mamba-1 mixer's tensors (ssm_in, conv, the x projection to dt/B/C, dt, A, D, ssm_out); norms:
    jamba's dt/B/C RMS norms."""
    blk = f"blk.{il}."
    spec.add(blk + "ssm_in.weight", (n_embd, 2 * d_inner), t.resident)
    spec.add(blk + "ssm_conv1d.weight", (d_conv, d_inner), t.norm)
    spec.add(blk + "ssm_conv1d.bias", (d_inner,), t.norm)
    spec.add(blk + "ssm_x.weight", (d_inner, dt_rank + 2 * d_state), t.resident)
    if norms:
        spec.add(blk + "ssm_dt_norm.weight", (dt_rank,), t.norm)
    spec.add(blk + "ssm_dt.weight", (dt_rank, d_inner), t.norm)
    spec.add(blk + "ssm_dt.bias", (d_inner,), t.norm)
    if norms:
        spec.add(blk + "ssm_b_norm.weight", (d_state,), t.norm)
        spec.add(blk + "ssm_c_norm.weight", (d_state,), t.norm)
    spec.add(blk + "ssm_a", (d_state, d_inner), t.norm)
    spec.add(blk + "ssm_d", (d_inner,), t.norm)
    spec.add(blk + "ssm_out.weight", (d_inner, n_embd), t.resident)


def mamba(t=Types(), **p):
    """Mamba (`mamba`, Mamba-1): recurrent blocks only, d_inner = 2 x n_embd, no dt/B/C norms, no FFN, the
    head tied to the token embedding (llama.cpp src/models/mamba.cpp, build_mamba_layer)."""
    p = {"n_layer": 4, "n_embd": 256, "conv": 4, "state": 16, "dt_rank": 16, "vocab": 1024, "ctx": 1048576} | p
    spec = ModelSpec("mamba", [])
    _common(spec, p)
    n_embd, d_inner = p["n_embd"], 2 * p["n_embd"]
    spec.meta("{arch}.ssm.conv_kernel", p["conv"])
    spec.meta("{arch}.ssm.inner_size", d_inner)
    spec.meta("{arch}.ssm.state_size", p["state"])
    spec.meta("{arch}.ssm.time_step_rank", p["dt_rank"])
    spec.add("token_embd.weight", (n_embd, p["vocab"]), t.embed)
    spec.add("output_norm.weight", (n_embd,), t.norm)
    for il in range(p["n_layer"]):
        spec.add(f"blk.{il}.attn_norm.weight", (n_embd,), t.norm)
        _mamba1_block(spec, il, n_embd, d_inner, p["state"], p["dt_rank"], p["conv"], t, norms=False)
    return spec


def jamba(t=Types(), **p):
    """Jamba (`jamba`): Mamba-1 blocks (head_count_kv 0; ssm_x, dt/B/C norms, d_inner = 2 x n_embd) and
    rope-less attention blocks in a `pattern` of M and *, dense SwiGLU FFNs with routed experts in every
    `moe_every`-th block (llama.cpp src/models/jamba.cpp, build_mamba_layer)."""
    p = {"pattern": "MMM*MMMM", "n_embd": 256, "n_head": 4, "n_head_kv": 2, "n_ff": 512, "n_expert": 8, "top_k": 2,
         "moe_every": 2, "conv": 4, "state": 16, "dt_rank": 16, "vocab": 1024, "ctx": 4096} | p
    pattern = p["pattern"]
    spec = ModelSpec("jamba", [])
    _common(spec, p | {"n_layer": len(pattern)})
    n_embd, d_inner, d_state, dt_rank = p["n_embd"], 2 * p["n_embd"], p["state"], p["dt_rank"]
    head = n_embd // p["n_head"]
    _hybrid_widths(spec, p, pattern)
    spec.meta("{arch}.expert_count", p["n_expert"])
    spec.meta("{arch}.expert_used_count", p["top_k"])
    spec.meta("{arch}.ssm.conv_kernel", p["conv"])
    spec.meta("{arch}.ssm.inner_size", d_inner)
    spec.meta("{arch}.ssm.state_size", d_state)
    spec.meta("{arch}.ssm.time_step_rank", dt_rank)
    _embeddings(spec, p, t)
    for il, kind in enumerate(pattern):
        blk = f"blk.{il}."
        spec.add(blk + "attn_norm.weight", (n_embd,), t.norm)
        if kind == "M":
            _mamba1_block(spec, il, n_embd, d_inner, d_state, dt_rank, p["conv"], t, norms=True)
        else:
            _gqa_attention(spec, il, p, head, t)
        spec.add(blk + "ffn_norm.weight", (n_embd,), t.norm)
        if (il + 1) % p["moe_every"] == 0:
            spec.add(blk + "ffn_gate_inp.weight", (n_embd, p["n_expert"]), t.norm)
            _experts(spec, il, n_embd, p["n_ff"], p["n_expert"], t)
        else:
            _dense_ffn(spec, il, n_embd, p["n_ff"], t)
    return spec


def lfm2(t=Types(), **p):
    """LFM2 (`lfm2`) and LFM2-MoE (`lfm2moe`, with `n_expert`): short-convolution blocks (head_count_kv
    0; in_proj to b/c/x, a `l_cache`-wide causal conv) and attention blocks with q/k norms in a
    `pattern` of C and *, a dense SwiGLU FFN in the first `n_dense` blocks and routed experts (sigmoid
    gate, selection bias, normalised weights) after (llama.cpp src/models/lfm2.cpp, lfm2moe.cpp). `swa` > 0
    writes attention.sliding_window (lfm2.cpp then slides every attention block; lfm2moe.cpp ignores it)."""
    p = {"pattern": "CC*CC*CC", "n_embd": 256, "n_head": 4, "n_head_kv": 2, "n_ff": 512, "n_ff_exp": 128,
         "n_expert": 0, "top_k": 4, "n_dense": 2, "l_cache": 3, "vocab": 1024, "ctx": 4096, "swa": 0} | p
    pattern = p["pattern"]
    moe = p["n_expert"] > 0
    spec = ModelSpec("lfm2moe" if moe else "lfm2", [])
    _common(spec, p | {"n_layer": len(pattern)})
    n_embd = p["n_embd"]
    head = n_embd // p["n_head"]
    _hybrid_widths(spec, p, pattern)
    spec.meta("{arch}.shortconv.l_cache", p["l_cache"])
    if p["swa"]:
        spec.meta("{arch}.attention.sliding_window", p["swa"])
    if moe:
        spec.meta("{arch}.expert_count", p["n_expert"])
        spec.meta("{arch}.expert_used_count", p["top_k"])
        spec.meta("{arch}.expert_feed_forward_length", p["n_ff_exp"])
        spec.meta("{arch}.leading_dense_block_count", p["n_dense"])
        spec.meta("{arch}.expert_gating_func", 2)
    spec.add("token_embd.weight", (n_embd, p["vocab"]), t.embed)
    spec.add("token_embd_norm.weight", (n_embd,), t.norm)  # llama.cpp's LFM2 output norm name
    spec.add("output.weight", (n_embd, p["vocab"]), t.output)
    for il, kind in enumerate(pattern):
        blk = f"blk.{il}."
        spec.add(blk + "ffn_norm.weight", (n_embd,), t.norm)
        if moe and il >= p["n_dense"]:
            spec.add(blk + "ffn_gate_inp.weight", (n_embd, p["n_expert"]), t.norm)
            _experts(spec, il, n_embd, p["n_ff_exp"], p["n_expert"], t)
            spec.add(blk + "exp_probs_b.bias", (p["n_expert"],), t.norm)
        else:
            _dense_ffn(spec, il, n_embd, p["n_ff"], t)
        spec.add(blk + "attn_norm.weight", (n_embd,), t.norm)
        if kind == "*":
            spec.add(blk + "attn_q_norm.weight", (head,), t.norm)
            spec.add(blk + "attn_k_norm.weight", (head,), t.norm)
            _gqa_attention(spec, il, p, head, t)
        else:
            spec.add(blk + "shortconv.conv.weight", (p["l_cache"], n_embd), t.norm)
            spec.add(blk + "shortconv.in_proj.weight", (n_embd, 3 * n_embd), t.resident)
            spec.add(blk + "shortconv.out_proj.weight", (n_embd, n_embd), t.resident)
    return spec


def falcon_h1(t=Types(), **p):
    """Falcon-H1 (`falcon-h1`): every block runs attention and a Mamba-2 mixer side by side on the same
    norm and adds them, then a dense SwiGLU FFN (llama.cpp src/models/falcon-h1.cpp; the FFN norm is
    named `blk.N.ffn_norm`, without `.weight`, as the loader asks)."""
    p = {"n_layer": 4, "n_embd": 256, "n_head": 4, "n_head_kv": 2, "head": 64, "n_ff": 512, "conv": 4, "ssm_heads": 8,
         "ssm_head": 64, "state": 64, "groups": 1, "vocab": 1024, "ctx": 4096} | p
    spec = ModelSpec("falcon-h1", [])
    _common(spec, p)
    n_embd, head = p["n_embd"], p["head"]
    _gqa_keys(spec, p, p["n_ff"], head)
    spec.meta("{arch}.rope.dimension_count", head)
    _ssm_keys(spec, p)
    _embeddings(spec, p, t)
    for il in range(p["n_layer"]):
        blk = f"blk.{il}."
        spec.add(blk + "attn_norm.weight", (n_embd,), t.norm)
        _mamba2_block(spec, il, p, t)
        _gqa_attention(spec, il, p, head, t)
        spec.add(blk + "ffn_norm", (n_embd,), t.norm)
        _dense_ffn(spec, il, n_embd, p["n_ff"], t)
    return spec


def plamo2(t=Types(), **p):
    """PLaMo-2 (`plamo2`): Mamba blocks (head_count_kv 0: ssm_in to z/x, conv, ssm_x to B/C/dt with
    their norms, `ssm_heads` scan heads, group_count 0) and attention blocks (fused qkv, per-head q/k
    norms) in a `pattern` of M and *, every block with post-mixer and post-FFN norms around a fused
    up/gate SwiGLU (llama.cpp src/models/plamo2.cpp; its post norms and dt/B/C norms have no `.weight`)."""
    p = {"pattern": "MM*MM*", "n_embd": 512, "n_head": 8, "n_head_kv": 2, "head": 64, "n_ff": 1024, "conv": 4,
         "ssm_heads": 8, "d_inner": 1024, "state": 64, "vocab": 1024, "ctx": 4096} | p
    pattern = p["pattern"]
    spec = ModelSpec("plamo2", [])
    _common(spec, p | {"n_layer": len(pattern)})
    n_embd, head, d_inner, d_state = p["n_embd"], p["head"], p["d_inner"], p["state"]
    dt_dim = max(64, n_embd // 16)
    _hybrid_widths(spec, p, pattern)
    spec.meta("{arch}.attention.key_length", head)
    spec.meta("{arch}.attention.value_length", head)
    spec.meta("{arch}.rope.dimension_count", head)
    spec.meta("{arch}.ssm.conv_kernel", p["conv"])
    spec.meta("{arch}.ssm.inner_size", d_inner)
    spec.meta("{arch}.ssm.state_size", d_state)
    spec.meta("{arch}.ssm.time_step_rank", p["ssm_heads"])
    spec.meta("{arch}.ssm.group_count", 0)
    _embeddings(spec, p, t)
    for il, kind in enumerate(pattern):
        blk = f"blk.{il}."
        spec.add(blk + "attn_norm.weight", (n_embd,), t.norm)
        if kind == "M":
            spec.add(blk + "ssm_in.weight", (n_embd, 2 * d_inner), t.resident)
            spec.add(blk + "ssm_conv1d.weight", (p["conv"], d_inner), t.norm)
            spec.add(blk + "ssm_x.weight", (d_inner, dt_dim + 2 * d_state), t.resident)
            spec.add(blk + "ssm_dt.weight", (dt_dim, p["ssm_heads"]), t.norm)
            spec.add(blk + "ssm_dt.bias", (p["ssm_heads"],), t.norm)
            spec.add(blk + "ssm_a", (p["ssm_heads"],), t.norm)
            spec.add(blk + "ssm_d", (p["ssm_heads"],), t.norm)
            spec.add(blk + "ssm_out.weight", (d_inner, n_embd), t.resident)
            spec.add(blk + "ssm_dt_norm", (dt_dim,), t.norm)
            spec.add(blk + "ssm_b_norm", (d_state,), t.norm)
            spec.add(blk + "ssm_c_norm", (d_state,), t.norm)
        else:
            qkv = (p["n_head"] + 2 * p["n_head_kv"]) * head
            spec.add(blk + "attn_qkv.weight", (n_embd, qkv), t.resident)
            spec.add(blk + "attn_q_norm.weight", (head, p["n_head"]), t.norm)
            spec.add(blk + "attn_k_norm.weight", (head, p["n_head_kv"]), t.norm)
            spec.add(blk + "attn_output.weight", (p["n_head"] * head, n_embd), t.resident)
        spec.add(blk + "post_attention_norm", (n_embd,), t.norm)
        spec.add(blk + "ffn_norm.weight", (n_embd,), t.norm)
        spec.add(blk + "ffn_down.weight", (p["n_ff"], n_embd), t.resident)
        spec.add(blk + "ffn_up.weight", (n_embd, 2 * p["n_ff"]), t.resident)
        spec.add(blk + "post_ffw_norm", (n_embd,), t.norm)
    return spec


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
    spec.meta("{arch}.attention.sliding_window", p["swa"])
    spec.add("token_embd.weight", (n_embd, p["vocab"]), t.embed)
    spec.add("altup_proj.weight", (n_embd, n_embd, p["altup"] - 1), t.norm)
    spec.add("altup_unembd_proj.weight", (n_embd, n_embd, p["altup"] - 1), t.norm)
    spec.add("per_layer_token_embd.weight", (p["embd_altup"] * n_layer, p["vocab"]), t.embed)
    spec.add("per_layer_model_proj.weight", (n_embd, p["embd_altup"] * n_layer), t.norm)
    spec.add("per_layer_proj_norm.weight", (p["embd_altup"],), t.norm)
    spec.add("output_norm.weight", (n_embd,), t.norm)
    for il in range(n_layer):
        blk = f"blk.{il}."
        _normed_gqa_attention(spec, il, p, head, t)
        spec.add(blk + "post_attention_norm.weight", (n_embd,), t.norm)
        spec.add(blk + "ffn_norm.weight", (n_embd,), t.norm)
        _dense_ffn(spec, il, n_embd, p["n_ff"], t)
        spec.add(blk + "post_ffw_norm.weight", (n_embd,), t.norm)
        spec.add(blk + "inp_gate.weight", (n_embd, p["embd_altup"]), t.norm)
        spec.add(blk + "proj.weight", (p["embd_altup"], n_embd), t.norm)
        spec.add(blk + "post_norm.weight", (n_embd,), t.norm)
        spec.add(blk + "altup_correct_coef.weight", (p["altup"], p["altup"]), t.norm)
        spec.add(blk + "altup_correct_scale.weight", (n_embd,), t.norm)
        spec.add(blk + "altup_predict_coef.weight", (p["altup"], p["altup"] ** 2), t.norm)
        spec.add(blk + "altup_router.weight", (n_embd, p["altup"]), t.norm)
        spec.add(blk + "altup_router_norm.weight", (n_embd,), t.norm)
        spec.add(blk + "laurel_l.weight", (n_embd, p["laurel"]), t.norm)
        spec.add(blk + "laurel_r.weight", (p["laurel"], n_embd), t.norm)
        spec.add(blk + "laurel_post_norm.weight", (n_embd,), t.norm)
    return spec


def nemotron_h_moe(t=Types(), **p):
    """Nemotron-H MoE (`nemotron_h_moe`, Nemotron 3 Nano): a layer pattern of Mamba-2 (M), attention
    (*) and MoE (E) blocks. Mamba blocks have head_count_kv 0 and feed_forward_length 0, attention
    blocks feed_forward_length 0, MoE blocks head_count_kv 0; experts are up/down only (relu^2) with a
    shared expert (llama.cpp src/models/nemotron-h.cpp). A `-` block is a dense relu^2 MLP (ffn_up /
    ffn_down, n_ff wide): with `moe=False` and no E the layout is the dense `nemotron_h` (Nemotron-H)."""
    p = {"pattern": "ME*E", "moe": True, "n_ff": 512, "n_embd": 256, "n_head": 4, "n_head_kv": 2, "head": 64, "n_ff_exp": 128,
         "n_ff_shexp": 256, "n_expert": 16, "top_k": 4, "conv": 4, "ssm_heads": 8, "ssm_head": 32, "state": 32,
         "groups": 2, "nextn": 0, "vocab": 1024, "ctx": 4096} | p
    # NextN/MTP blocks after the trunk: attention and MoE folded into one block ("N"), as
    # nemotron-h.cpp load_arch_tensors creates them (nextn enorm/hnorm/eh_proj/shared_head_norm)
    pattern = p["pattern"] + "N" * p["nextn"]
    n_layer = len(pattern)
    spec = ModelSpec("nemotron_h_moe" if p["moe"] else "nemotron_h", [])
    _common(spec, p | {"n_layer": n_layer})
    if p["nextn"]:
        spec.meta("{arch}.nextn_predict_layers", p["nextn"])
    n_embd, head = p["n_embd"], p["head"]
    spec.meta("{arch}.attention.layer_norm_epsilon", 1e-5, "f32")
    spec.meta("{arch}.attention.head_count", p["n_head"])
    spec.meta("{arch}.attention.head_count_kv", [p["n_head_kv"] if c in "*N" else 0 for c in pattern], "u32[]")
    spec.meta("{arch}.feed_forward_length", [{"E": p["n_ff_exp"], "N": p["n_ff_exp"], "-": p["n_ff"]}.get(c, 0)
                                             for c in pattern], "u32[]")
    spec.meta("{arch}.attention.key_length", head)
    spec.meta("{arch}.attention.value_length", head)
    if p["moe"]:
        _nemotron_moe_keys(spec, p)
    _ssm_keys(spec, p)
    _embeddings(spec, p, t)
    for il, kind in enumerate(pattern):
        spec.add(f"blk.{il}.attn_norm.weight", (n_embd,), t.norm)
        if kind == "M":
            _mamba2_block(spec, il, p, t)
        elif kind == "*":
            _gqa_attention(spec, il, p, head, t)
        elif kind == "-":
            spec.add(f"blk.{il}.ffn_up.weight", (n_embd, p["n_ff"]), t.resident)
            spec.add(f"blk.{il}.ffn_down.weight", (p["n_ff"], n_embd), t.resident)
        if kind == "N":
            _nextn_block(spec, il, n_embd, t)
            _gqa_attention(spec, il, p, head, t)
            spec.add(f"blk.{il}.post_attention_norm.weight", (n_embd,), t.norm)
        if kind in "EN":
            spec.add(f"blk.{il}.ffn_gate_inp.weight", (n_embd, p["n_expert"]), t.norm)
            spec.add(f"blk.{il}.exp_probs_b.bias", (p["n_expert"],), t.norm)
            spec.add(f"blk.{il}.ffn_up_exps.weight", (n_embd, p["n_ff_exp"], p["n_expert"]), t.expert)
            spec.add(f"blk.{il}.ffn_down_exps.weight", (p["n_ff_exp"], n_embd, p["n_expert"]),
                     t.expert_down if t.expert_down is not None else t.expert)
            spec.add(f"blk.{il}.ffn_up_shexp.weight", (n_embd, p["n_ff_shexp"]), t.resident)
            spec.add(f"blk.{il}.ffn_down_shexp.weight", (p["n_ff_shexp"], n_embd), t.resident)
    return spec


def nemotron_h(t=Types(), **p):
    """Nemotron-H (`nemotron_h`): the dense hybrid — Mamba-2 (M), attention (*) and relu^2 MLP (-) blocks."""
    return nemotron_h_moe(t, **({"pattern": "M*M-M*M-"} | p | {"moe": False}))


def _nemotron_moe_keys(spec, p):
    spec.meta("{arch}.expert_count", p["n_expert"])
    spec.meta("{arch}.expert_used_count", p["top_k"])
    spec.meta("{arch}.expert_feed_forward_length", p["n_ff_exp"])
    spec.meta("{arch}.expert_shared_feed_forward_length", p["n_ff_shexp"])
    spec.meta("{arch}.expert_shared_count", 1)
    spec.meta("{arch}.expert_weights_norm", True, "bool")
    spec.meta("{arch}.expert_weights_scale", 2.5, "f32")
    spec.meta("{arch}.expert_gating_func", 2)
    _router_groups(spec, p)


def _gemma4_window_keys(spec, p, is_full):
    """gemma4's (and its assistant's) head widths of the full and sliding-window layers, the window, the
    per-layer pattern and the rope widths."""
    spec.meta("{arch}.attention.key_length", p["head"])
    spec.meta("{arch}.attention.value_length", p["head"])
    spec.meta("{arch}.attention.key_length_swa", p["head_swa"])
    spec.meta("{arch}.attention.value_length_swa", p["head_swa"])
    spec.meta("{arch}.attention.sliding_window", p["swa"])
    spec.meta("{arch}.attention.sliding_window_pattern", [not full for full in is_full], "bool[]")
    spec.meta("{arch}.rope.dimension_count", p["head"])
    spec.meta("{arch}.rope.dimension_count_swa", p["head_swa"])


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
    spec.meta("{arch}.feed_forward_length", p["n_ff"])
    spec.meta("{arch}.attention.head_count", p["n_head"])
    spec.meta("{arch}.attention.head_count_kv", [p["n_head_kv"] if full else p["n_head_kv_swa"] for full in is_full], "u32[]")
    _gemma4_window_keys(spec, p, is_full)
    spec.meta("{arch}.attention.shared_kv_layers", p["shared_kv"])
    spec.meta("{arch}.embedding_length_per_layer_input", 0)
    spec.meta("{arch}.final_logit_softcapping", 30.0, "f32")
    spec.meta("{arch}.expert_count", p["n_expert"])
    spec.meta("{arch}.expert_used_count", p["top_k"])
    spec.meta("{arch}.expert_feed_forward_length", p["n_ff_exp"])
    spec.add("token_embd.weight", (n_embd, p["vocab"]), t.embed)
    spec.add("output_norm.weight", (n_embd,), t.norm)
    spec.add("rope_freqs.weight", (p["head"] // 2,), t.norm)
    for il in range(n_layer):
        head = p["head"] if is_full[il] else p["head_swa"]
        hkv = p["n_head_kv"] if is_full[il] else p["n_head_kv_swa"]
        spec.add(f"blk.{il}.attn_norm.weight", (n_embd,), t.norm)
        spec.add(f"blk.{il}.attn_q.weight", (n_embd, p["n_head"] * head), t.resident)
        spec.add(f"blk.{il}.attn_k.weight", (n_embd, hkv * head), t.resident)
        if not is_full[il]:  # the full layers use K as V (attention_k_eq_v)
            spec.add(f"blk.{il}.attn_v.weight", (n_embd, hkv * head), t.resident)
        spec.add(f"blk.{il}.attn_output.weight", (p["n_head"] * head, n_embd), t.resident)
        spec.add(f"blk.{il}.attn_q_norm.weight", (head,), t.norm)
        spec.add(f"blk.{il}.attn_k_norm.weight", (head,), t.norm)
        spec.add(f"blk.{il}.post_attention_norm.weight", (n_embd,), t.norm)
        spec.add(f"blk.{il}.layer_output_scale.weight", (1,), t.norm)
        spec.add(f"blk.{il}.ffn_norm.weight", (n_embd,), t.norm)
        _dense_ffn(spec, il, n_embd, p["n_ff"], t)
        spec.add(f"blk.{il}.post_ffw_norm.weight", (n_embd,), t.norm)
        spec.add(f"blk.{il}.ffn_gate_inp.weight", (n_embd, p["n_expert"]), t.norm)
        spec.add(f"blk.{il}.ffn_gate_inp.scale", (n_embd,), t.norm)
        spec.add(f"blk.{il}.pre_ffw_norm_2.weight", (n_embd,), t.norm)
        spec.add(f"blk.{il}.post_ffw_norm_1.weight", (n_embd,), t.norm)
        spec.add(f"blk.{il}.post_ffw_norm_2.weight", (n_embd,), t.norm)
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
    spec.meta("{arch}.nextn_predict_layers", n_layer)
    spec.meta("{arch}.embedding_length_out", n_bb)
    spec.meta("{arch}.feed_forward_length", p["n_ff"])
    spec.meta("{arch}.attention.head_count", p["n_head"])
    spec.meta("{arch}.attention.head_count_kv", 1)
    _gemma4_window_keys(spec, p, is_full)
    spec.add("token_embd.weight", (n_embd, p["vocab"]), t.embed)
    spec.add("output_norm.weight", (n_embd,), t.norm)
    spec.add("nextn.pre_projection.weight", (2 * n_bb, n_embd), t.resident)
    spec.add("nextn.post_projection.weight", (n_embd, n_bb), t.resident)
    spec.add("rope_freqs.weight", (p["head"] // 2,), t.norm)
    for il in range(n_layer):
        head = p["head"] if is_full[il] else p["head_swa"]
        blk = f"blk.{il}."
        spec.add(blk + "attn_norm.weight", (n_embd,), t.norm)
        spec.add(blk + "attn_q.weight", (n_embd, p["n_head"] * head), t.resident)
        spec.add(blk + "attn_output.weight", (p["n_head"] * head, n_embd), t.resident)
        spec.add(blk + "attn_q_norm.weight", (head,), t.norm)
        spec.add(blk + "post_attention_norm.weight", (n_embd,), t.norm)
        spec.add(blk + "layer_output_scale.weight", (1,), t.norm)
        spec.add(blk + "ffn_norm.weight", (n_embd,), t.norm)
        _dense_ffn(spec, il, n_embd, p["n_ff"], t)
        spec.add(blk + "post_ffw_norm.weight", (n_embd,), t.norm)
    return spec


BUILDERS = {
    "mixtral": llama_moe,
    "qwen3moe": qwen3moe,
    "deepseek2": deepseek2,
    "gpt-oss": gpt_oss,
    "kimi-k3": kimi_k3,
    "kimi-linear": kimi_linear,
    "qwen35moe": qwen35moe,
    "qwen35": lambda t=Types(), **p: qwen35moe(t, **({"arch": "qwen35"} | p)),
    "exaone4": exaone4,
    "minimax-01": minimax_01,
    "bailingmoe3": bailingmoe3,
    "minimax-m3": minimax_m3,
    "dflash": dflash,
    "gemma4-assistant": gemma4_assistant,
    "deepseek32": deepseek32,
    "glm-dsa": glm_dsa,
    "deepseek4": deepseek4,
    "dots3note": dots3note,
    "hy_v4": hy_v4,
    "glm5-next": glm5_next,
    "qwen4exp": qwen4exp,
    "qwen3vlmoe": qwen3vlmoe,
    "phimoe": phimoe,
    "dbrx": dbrx,
    "grok": grok,
    "bailingmoe2": bailingmoe2,
    "step35": step35,
    "mimo2": mimo2,
    "afmoe": afmoe,
    "smallthinker": smallthinker,
    "cohere2moe": cohere2moe,
    "exaone-moe": exaone_moe,
    "arctic": arctic,
    "grovemoe": grovemoe,
    "bailingmoe": bailingmoe,
    "granite": granite_moe_shexp,
    "granite_swa": granite_swa,
    "hy_v3": hy_v3,
    "mellum": qwen3moe_swa("mellum"),
    "maple": qwen3moe_swa("maple"),
    "laguna": laguna,
    # DeepSeek-OCR's language model: DeepSeek-MoE V1's layout (MHA, shared experts; src/models/deepseek2ocr.cpp)
    "deepseek2-ocr": lambda t=Types(), **p: _renamed(deepseek(t, **p), "deepseek2-ocr"),
    "mistral3": llama_like_moe("mistral3"),
    "minicpm": llama_like_moe("minicpm"),
    "glm4moe": glm4moe,
    "minimax-m2": minimax_m2,
    "nemotron_h_moe": nemotron_h_moe,
    "mamba2": mamba2,
    "llama4": llama4,
    "rwkv7": rwkv7,
    "granitehybrid": granitehybrid,
    "jamba": jamba,
    "falcon-h1": falcon_h1,
    "plamo2": plamo2,
    "arwkv7": arwkv7,
    "rwkv6": rwkv6,
    "rwkv6qwen2": rwkv6qwen2,
    "qwen2moe": qwen2moe,
    "olmoe": olmoe,
    "nemotron_h": nemotron_h,
    "mamba": mamba,
    "ernie4_5-moe": ernie4_5_moe,
    "deepseek": deepseek,
    "granitemoe": granitemoe,
    "hunyuan-moe": hunyuan_moe,
    "dots1": dots1,
    "gemma3n": gemma3n,
    "lfm2": lfm2,
    "lfm2moe": lambda t=Types(), **p: lfm2(t, **({"n_expert": 16} | p)),
    "lfm2-swa": lambda t=Types(), **p: lfm2(t, **({"swa": 128} | p)),  # `lfm2` with a sliding window
    "gemma4": gemma4,
    "dense": lambda t=Types(), **p: llama_moe(t, **({"n_expert": 0, "n_ff": 512} | p)),
}

def more_bits_blocks(n_layer):
    """The blocks llama-quantize's use_more_bits(i, n) picks: the first and last eighth, and every
    third block in between (src/llama-quant.cpp)."""
    return tuple(i for i in range(n_layer)
                 if i < n_layer // 8 or i >= 7 * n_layer // 8 or (i - n_layer // 8) % 3 == 2)


# Full-size presets (header-only, sparse). Types are those of common community quantizations.
PRESETS = {
    "kimi-k3": lambda: kimi_k3(
        Types(expert=IQ2_XS, expert_down=IQ3_XXS, resident=Q8_0, embed=Q4_K, output=Q6_K),
        name="Kimi-K3 (synthetic, header-faithful)", n_layer=93, n_embd=7168, n_head=32, kda_head=128,
        n_ff=18432, n_ff_exp=2048, latent=4096, n_expert=896, top_k=16, q_lora=1536, kv_lora=512, rope=64,
        qk_nope=128, v_head=128, vocab=163840, merges=163328, ctx=262144, file_type=17),
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
    "gpt-oss-120b": lambda: gpt_oss(
        Types(expert=MXFP4, resident=Q8_0, embed=Q8_0, output=Q8_0),
        name="gpt-oss-120b (synthetic)", n_layer=36, n_embd=2880, n_head=64, n_head_kv=8, head=64,
        n_ff_exp=2880, n_expert=128, top_k=4, swa=128, vocab=201088, ctx=131072, file_type=38),
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
    # nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B (Megatron-Bridge Nemotron3NanoProvider / its config.json):
    # 52 blocks "MEMEM*EMEMEM*...", 2688 wide, 32 query / 2 KV heads of 128, Mamba-2 64 heads of 64,
    # state 128, 8 groups, conv 4, 128 experts of 1856 (top-6) plus a 3712-wide shared expert.
    # Re-read 2026-12-01 from NVIDIA-NeMo Megatron-Bridge models/nemotronh/nemotron_h_provider.py
    # (Nemotron3NanoProvider over NemotronHModelProvider: mamba_num_groups 8, mamba_head_dim 64,
    # num_query_groups 2, moe_router_topk_scaling_factor 2.5, moe_router_num_groups 1): all as above;
    # one router group, which llama.cpp's conversion/nemotron.py writes as expert_group_count.
    "nemotron-3-nano-30b-a3b": lambda: nemotron_h_moe(
        Types(expert=Q4_0, resident=Q8_0, embed=Q8_0, output=Q8_0), name="Nemotron-3-Nano-30B-A3B (synthetic)",
        pattern="MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME", n_embd=2688, n_head=32, n_head_kv=2,
        head=128, n_ff_exp=1856, n_ff_shexp=3712, n_expert=128, top_k=6, conv=4, ssm_heads=64, ssm_head=64,
        state=128, groups=8, expert_groups=1, vocab=131072, ctx=262144, file_type=15),
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
    "llama3-8b": lambda: llama_moe(
        Types(resident=F16, embed=F16, output=F16), name="Llama-3-8B (synthetic)", n_expert=0, n_layer=32,
        n_embd=4096, n_head=32, n_head_kv=8, n_ff=14336, vocab=128256, ctx=8192, file_type=1),
}


def _vocab_arrays(n_tokens, n_merges):
    """Token strings, token types and merges shaped like a BPE vocabulary of that size."""
    tokens = [f"tok{index}" for index in range(n_tokens)]
    merges = [f"t{index % 97} k{index}" for index in range(n_merges)]
    return tokens, [1] * n_tokens, merges


def _random_tensor(rng, spec_tensor):
    """Real data for one tensor: normal floats quantized by gguf, or raw bytes for types gguf cannot make."""
    import numpy as np
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, quants

    qtype = GGMLQuantizationType(spec_tensor.type_id)
    numpy_shape = tuple(reversed(spec_tensor.shape))
    values = (rng.standard_normal(numpy_shape, dtype=np.float32) * 0.02).astype(np.float32)
    if qtype == GGMLQuantizationType.F32:
        return values
    if qtype == GGMLQuantizationType.F16:
        return values.astype(np.float16)
    try:
        return quants.quantize(values, qtype)
    except NotImplementedError:
        block, block_bytes = GGML_QUANT_SIZES[qtype]
        byte_shape = (*numpy_shape[:-1], numpy_shape[-1] // block * block_bytes)
        return rng.integers(0, 256, size=byte_shape, dtype=np.uint8)


def write_model(spec, path, *, sparse=False, shards=1, seed=0, alignment=None):
    """Write `spec` to `path` (split into `shards` files when > 1) and return the file paths.

    sparse=True writes the header only and extends each file to its full size as a hole. The files
    are written in a temporary folder beside `path` and moved into place when complete, the first
    shard last, so an interrupted run never leaves a model that looks whole.
    """
    import shutil
    import tempfile

    folder = os.path.dirname(os.path.abspath(path))
    scratch = tempfile.mkdtemp(prefix=".synth-", dir=folder)
    try:
        written = _write_model(spec, os.path.join(scratch, os.path.basename(path)), sparse, shards, seed, alignment)
        final = [os.path.join(folder, os.path.basename(item)) for item in written]
        for source, target in reversed(list(zip(written, final))):
            os.replace(source, target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return final


def _write_model(spec, path, sparse, shards, seed, alignment):
    import numpy as np
    from gguf import GGMLQuantizationType, GGUFValueType, GGUFWriter

    from moetools.gguf.constants import tensor_nbytes

    kinds = {"u32": GGUFValueType.UINT32, "i32": GGUFValueType.INT32, "f32": GGUFValueType.FLOAT32,
             "bool": GGUFValueType.BOOL, "str": GGUFValueType.STRING}
    sizes = [tensor_nbytes(tensor.type_id, tensor.shape) for tensor in spec.tensors]
    split_max_tensors = 0
    if shards > 1:
        split_max_tensors = -(-len(spec.tensors) // shards)
    writer = GGUFWriter(os.fspath(path), spec.architecture, split_max_tensors=split_max_tensors)
    if alignment:
        writer.add_custom_alignment(alignment)
    for key, value, kind in spec.metadata:
        if kind == "u64[]":  # (add_array would infer i32)
            writer.add_key_value(key, value, GGUFValueType.ARRAY, sub_type=GGUFValueType.UINT64)
        elif kind.endswith("[]"):
            writer.add_array(key, value)
        else:
            writer.add_key_value(key, value, kinds[kind])
    if spec.vocab_size:
        tokens, token_types, merges = _vocab_arrays(spec.vocab_size, spec.merges)
        writer.add_tokenizer_model("gpt2")
        writer.add_token_list(tokens)
        writer.add_token_types(token_types)
        if merges:
            writer.add_token_merges(merges)
    rng = np.random.default_rng(seed)
    for tensor, n_bytes in zip(spec.tensors, sizes):
        if sparse:
            writer.add_tensor_info(tensor.name, tuple(reversed(tensor.shape)), np.dtype(np.float32), n_bytes,
                                   raw_dtype=GGMLQuantizationType(tensor.type_id))
        else:
            data = _random_tensor(rng, tensor)
            raw_dtype = None if tensor.type_id in (F32, F16) else GGMLQuantizationType(tensor.type_id)
            writer.add_tensor(tensor.name, data, raw_dtype=raw_dtype)
    writer.write_header_to_file(path=None)
    writer.write_kv_data_to_file()
    if sparse:
        writer.write_ti_data_to_file()
        align = writer.data_alignment
        for handle, shard_tensors in zip(writer.fout, writer.tensors):
            data_start = -(-handle.tell() // align) * align
            data_bytes = sum(-(-info.nbytes // align) * align for info in shard_tensors.values())
            handle.truncate(data_start + data_bytes)
    else:
        writer.write_tensors_to_file()
    paths = [os.fspath(handle.name) for handle in writer.fout]
    writer.close()
    return paths


def preset(name):
    """The full-size spec of a preset (`kimi-k3`, `kimi-k2`, `qwen3-235b`, ...)."""
    return PRESETS[name]()


def tiny(name, types=Types(), **params):
    """A tiny spec of an architecture (a key of BUILDERS: `mixtral`, `qwen3moe`, `deepseek2`, ...)."""
    return BUILDERS[name](types, **params)


def main(argv=None):
    """`python -m moetools.synth PRESET OUT.gguf [--shards N]`: write a header-only sparse model."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m moetools.synth", description=main.__doc__)
    parser.add_argument("preset", choices=sorted(PRESETS))
    parser.add_argument("output", help="output path (NAME.gguf; shards become NAME-0000k-of-0000N.gguf)")
    parser.add_argument("--shards", type=int, default=1)
    args = parser.parse_args(argv)
    folder = os.path.dirname(os.path.abspath(args.output))
    os.makedirs(folder, exist_ok=True)
    for path in write_model(preset(args.preset), args.output, sparse=True, shards=args.shards):
        print(path)


if __name__ == "__main__":
    main()
