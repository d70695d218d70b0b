"""Synthetic builders: State-space layouts and their hybrids (Mamba, Mamba-2, Jamba, Granite-H, LFM2, Falcon-H1, PLaMo-2, Nemotron-H).

Each builder returns a ModelSpec in the layout llama.cpp's loader expects (src/models/<arch>.cpp).
`BUILDERS` maps the architecture names (and test aliases) of this family to their tiny builders."""

from gguf.constants import MODEL_TENSOR, Keys

from moetools.synth.blocks import _common, _dense_ffn, _embeddings, _experts, _gqa_attention, _gqa_keys, _hybrid_widths, _mamba1_block, _mamba2_block, _nemotron_moe_keys, _nextn_block, _ssm_keys
from moetools.synth.names import tn
from moetools.synth.spec import Q4_0, Q8_0, ModelSpec, Types


def mamba2(t=Types(), **p):
    """Mamba-2 (`mamba2`): recurrent blocks only, no attention (llama.cpp src/models/mamba2.cpp)."""
    p = {"n_layer": 4, "n_embd": 256, "conv": 4, "ssm_heads": 8, "ssm_head": 64, "state": 64, "groups": 2,
         "vocab": 1024, "ctx": 4096} | p
    spec = ModelSpec("mamba2", [])
    _common(spec, p)
    _ssm_keys(spec, p)
    _embeddings(spec, p, t)
    for il in range(p["n_layer"]):
        spec.add(tn(MODEL_TENSOR.ATTN_NORM, il), (p["n_embd"],), t.norm)
        _mamba2_block(spec, il, p, t)
    return spec


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
    spec.meta(Keys.LLM.EXPERT_COUNT, p["n_expert"])
    spec.meta(Keys.LLM.EXPERT_USED_COUNT, p["top_k"])
    spec.meta(Keys.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH, p["n_ff_shexp"])
    spec.meta(Keys.Rope.DIMENSION_COUNT, head)
    _ssm_keys(spec, p)
    _embeddings(spec, p, t)
    for il, kind in enumerate(pattern):
        spec.add(tn(MODEL_TENSOR.ATTN_NORM, il), (n_embd,), t.norm)
        if kind == "M":
            _mamba2_block(spec, il, p, t)
        else:
            _gqa_attention(spec, il, p, head, t)
        spec.add(tn(MODEL_TENSOR.FFN_NORM, il), (n_embd,), t.norm)
        spec.add(tn(MODEL_TENSOR.FFN_GATE_INP, il), (n_embd, p["n_expert"]), t.norm)
        _experts(spec, il, n_embd, p["n_ff"], p["n_expert"], t)
        _dense_ffn(spec, il, n_embd, p["n_ff_shexp"], t, shared=True)
    return spec


def mamba(t=Types(), **p):
    """Mamba (`mamba`, Mamba-1): recurrent blocks only, d_inner = 2 x n_embd, no dt/B/C norms, no FFN, the
    head tied to the token embedding (llama.cpp src/models/mamba.cpp, build_mamba_layer)."""
    p = {"n_layer": 4, "n_embd": 256, "conv": 4, "state": 16, "dt_rank": 16, "vocab": 1024, "ctx": 1048576} | p
    spec = ModelSpec("mamba", [])
    _common(spec, p)
    n_embd, d_inner = p["n_embd"], 2 * p["n_embd"]
    spec.meta(Keys.SSM.CONV_KERNEL, p["conv"])
    spec.meta(Keys.SSM.INNER_SIZE, d_inner)
    spec.meta(Keys.SSM.STATE_SIZE, p["state"])
    spec.meta(Keys.SSM.TIME_STEP_RANK, p["dt_rank"])
    spec.add(tn(MODEL_TENSOR.TOKEN_EMBD), (n_embd, p["vocab"]), t.embed)
    spec.add(tn(MODEL_TENSOR.OUTPUT_NORM), (n_embd,), t.norm)
    for il in range(p["n_layer"]):
        spec.add(tn(MODEL_TENSOR.ATTN_NORM, il), (n_embd,), t.norm)
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
    spec.meta(Keys.LLM.EXPERT_COUNT, p["n_expert"])
    spec.meta(Keys.LLM.EXPERT_USED_COUNT, p["top_k"])
    spec.meta(Keys.SSM.CONV_KERNEL, p["conv"])
    spec.meta(Keys.SSM.INNER_SIZE, d_inner)
    spec.meta(Keys.SSM.STATE_SIZE, d_state)
    spec.meta(Keys.SSM.TIME_STEP_RANK, dt_rank)
    _embeddings(spec, p, t)
    for il, kind in enumerate(pattern):
        spec.add(tn(MODEL_TENSOR.ATTN_NORM, il), (n_embd,), t.norm)
        if kind == "M":
            _mamba1_block(spec, il, n_embd, d_inner, d_state, dt_rank, p["conv"], t, norms=True)
        else:
            _gqa_attention(spec, il, p, head, t)
        spec.add(tn(MODEL_TENSOR.FFN_NORM, il), (n_embd,), t.norm)
        if (il + 1) % p["moe_every"] == 0:
            spec.add(tn(MODEL_TENSOR.FFN_GATE_INP, il), (n_embd, p["n_expert"]), t.norm)
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
    spec.meta(Keys.ShortConv.L_CACHE, p["l_cache"])
    if p["swa"]:
        spec.meta(Keys.Attention.SLIDING_WINDOW, p["swa"])
    if moe:
        spec.meta(Keys.LLM.EXPERT_COUNT, p["n_expert"])
        spec.meta(Keys.LLM.EXPERT_USED_COUNT, p["top_k"])
        spec.meta(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH, p["n_ff_exp"])
        spec.meta(Keys.LLM.LEADING_DENSE_BLOCK_COUNT, p["n_dense"])
        spec.meta(Keys.LLM.EXPERT_GATING_FUNC, 2)
    spec.add(tn(MODEL_TENSOR.TOKEN_EMBD), (n_embd, p["vocab"]), t.embed)
    spec.add(tn(MODEL_TENSOR.TOKEN_EMBD_NORM), (n_embd,), t.norm)  # llama.cpp's LFM2 output norm name
    spec.add(tn(MODEL_TENSOR.OUTPUT), (n_embd, p["vocab"]), t.output)
    for il, kind in enumerate(pattern):
        spec.add(tn(MODEL_TENSOR.FFN_NORM, il), (n_embd,), t.norm)
        if moe and il >= p["n_dense"]:
            spec.add(tn(MODEL_TENSOR.FFN_GATE_INP, il), (n_embd, p["n_expert"]), t.norm)
            _experts(spec, il, n_embd, p["n_ff_exp"], p["n_expert"], t)
            spec.add(tn(MODEL_TENSOR.FFN_EXP_PROBS_B, il, "bias"), (p["n_expert"],), t.norm)
        else:
            _dense_ffn(spec, il, n_embd, p["n_ff"], t)
        spec.add(tn(MODEL_TENSOR.ATTN_NORM, il), (n_embd,), t.norm)
        if kind == "*":
            spec.add(tn(MODEL_TENSOR.ATTN_Q_NORM, il), (head,), t.norm)
            spec.add(tn(MODEL_TENSOR.ATTN_K_NORM, il), (head,), t.norm)
            _gqa_attention(spec, il, p, head, t)
        else:
            spec.add(tn(MODEL_TENSOR.SHORTCONV_CONV, il), (p["l_cache"], n_embd), t.norm)
            spec.add(tn(MODEL_TENSOR.SHORTCONV_INPROJ, il), (n_embd, 3 * n_embd), t.resident)
            spec.add(tn(MODEL_TENSOR.SHORTCONV_OUTPROJ, il), (n_embd, n_embd), t.resident)
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
    spec.meta(Keys.Rope.DIMENSION_COUNT, head)
    _ssm_keys(spec, p)
    _embeddings(spec, p, t)
    for il in range(p["n_layer"]):
        spec.add(tn(MODEL_TENSOR.ATTN_NORM, il), (n_embd,), t.norm)
        _mamba2_block(spec, il, p, t)
        _gqa_attention(spec, il, p, head, t)
        spec.add(tn(MODEL_TENSOR.FFN_NORM, il, suffix=None), (n_embd,), t.norm)
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
    spec.meta(Keys.Attention.KEY_LENGTH, head)
    spec.meta(Keys.Attention.VALUE_LENGTH, head)
    spec.meta(Keys.Rope.DIMENSION_COUNT, head)
    spec.meta(Keys.SSM.CONV_KERNEL, p["conv"])
    spec.meta(Keys.SSM.INNER_SIZE, d_inner)
    spec.meta(Keys.SSM.STATE_SIZE, d_state)
    spec.meta(Keys.SSM.TIME_STEP_RANK, p["ssm_heads"])
    spec.meta(Keys.SSM.GROUP_COUNT, 0)
    _embeddings(spec, p, t)
    for il, kind in enumerate(pattern):
        spec.add(tn(MODEL_TENSOR.ATTN_NORM, il), (n_embd,), t.norm)
        if kind == "M":
            spec.add(tn(MODEL_TENSOR.SSM_IN, il), (n_embd, 2 * d_inner), t.resident)
            spec.add(tn(MODEL_TENSOR.SSM_CONV1D, il), (p["conv"], d_inner), t.norm)
            spec.add(tn(MODEL_TENSOR.SSM_X, il), (d_inner, dt_dim + 2 * d_state), t.resident)
            spec.add(tn(MODEL_TENSOR.SSM_DT, il), (dt_dim, p["ssm_heads"]), t.norm)
            spec.add(tn(MODEL_TENSOR.SSM_DT, il, "bias"), (p["ssm_heads"],), t.norm)
            spec.add(tn(MODEL_TENSOR.SSM_A, il, suffix=None), (p["ssm_heads"],), t.norm)
            spec.add(tn(MODEL_TENSOR.SSM_D, il, suffix=None), (p["ssm_heads"],), t.norm)
            spec.add(tn(MODEL_TENSOR.SSM_OUT, il), (d_inner, n_embd), t.resident)
            spec.add(tn(MODEL_TENSOR.SSM_DT_NORM, il, suffix=None), (dt_dim,), t.norm)
            spec.add(tn(MODEL_TENSOR.SSM_B_NORM, il, suffix=None), (d_state,), t.norm)
            spec.add(tn(MODEL_TENSOR.SSM_C_NORM, il, suffix=None), (d_state,), t.norm)
        else:
            qkv = (p["n_head"] + 2 * p["n_head_kv"]) * head
            spec.add(tn(MODEL_TENSOR.ATTN_QKV, il), (n_embd, qkv), t.resident)
            spec.add(tn(MODEL_TENSOR.ATTN_Q_NORM, il), (head, p["n_head"]), t.norm)
            spec.add(tn(MODEL_TENSOR.ATTN_K_NORM, il), (head, p["n_head_kv"]), t.norm)
            spec.add(tn(MODEL_TENSOR.ATTN_OUT, il), (p["n_head"] * head, n_embd), t.resident)
        spec.add(tn(MODEL_TENSOR.ATTN_POST_NORM, il, suffix=None), (n_embd,), t.norm)
        spec.add(tn(MODEL_TENSOR.FFN_NORM, il), (n_embd,), t.norm)
        spec.add(tn(MODEL_TENSOR.FFN_DOWN, il), (p["n_ff"], n_embd), t.resident)
        spec.add(tn(MODEL_TENSOR.FFN_UP, il), (n_embd, 2 * p["n_ff"]), t.resident)
        spec.add(tn(MODEL_TENSOR.FFN_POST_NORM, il, suffix=None), (n_embd,), t.norm)
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
        spec.meta(Keys.LLM.NEXTN_PREDICT_LAYERS, p["nextn"])
    n_embd, head = p["n_embd"], p["head"]
    spec.meta(Keys.Attention.LAYERNORM_EPS, 1e-5, "f32")
    spec.meta(Keys.Attention.HEAD_COUNT, p["n_head"])
    spec.meta(Keys.Attention.HEAD_COUNT_KV, [p["n_head_kv"] if c in "*N" else 0 for c in pattern], "u32[]")
    spec.meta(Keys.LLM.FEED_FORWARD_LENGTH, [{"E": p["n_ff_exp"], "N": p["n_ff_exp"], "-": p["n_ff"]}.get(c, 0)
                                             for c in pattern], "u32[]")
    spec.meta(Keys.Attention.KEY_LENGTH, head)
    spec.meta(Keys.Attention.VALUE_LENGTH, head)
    if p["moe"]:
        _nemotron_moe_keys(spec, p)
    _ssm_keys(spec, p)
    _embeddings(spec, p, t)
    for il, kind in enumerate(pattern):
        spec.add(tn(MODEL_TENSOR.ATTN_NORM, il), (n_embd,), t.norm)
        if kind == "M":
            _mamba2_block(spec, il, p, t)
        elif kind == "*":
            _gqa_attention(spec, il, p, head, t)
        elif kind == "-":
            spec.add(tn(MODEL_TENSOR.FFN_UP, il), (n_embd, p["n_ff"]), t.resident)
            spec.add(tn(MODEL_TENSOR.FFN_DOWN, il), (p["n_ff"], n_embd), t.resident)
        if kind == "N":
            _nextn_block(spec, il, n_embd, t)
            _gqa_attention(spec, il, p, head, t)
            spec.add(tn(MODEL_TENSOR.ATTN_POST_NORM, il), (n_embd,), t.norm)
        if kind in "EN":
            spec.add(tn(MODEL_TENSOR.FFN_GATE_INP, il), (n_embd, p["n_expert"]), t.norm)
            spec.add(tn(MODEL_TENSOR.FFN_EXP_PROBS_B, il, "bias"), (p["n_expert"],), t.norm)
            spec.add(tn(MODEL_TENSOR.FFN_UP_EXP, il), (n_embd, p["n_ff_exp"], p["n_expert"]), t.expert)
            spec.add(tn(MODEL_TENSOR.FFN_DOWN_EXP, il), (p["n_ff_exp"], n_embd, p["n_expert"]),
                     t.expert_down if t.expert_down is not None else t.expert)
            spec.add(tn(MODEL_TENSOR.FFN_UP_SHEXP, il), (n_embd, p["n_ff_shexp"]), t.resident)
            spec.add(tn(MODEL_TENSOR.FFN_DOWN_SHEXP, il), (p["n_ff_shexp"], n_embd), t.resident)
    return spec


def nemotron_h(t=Types(), **p):
    """Nemotron-H (`nemotron_h`): the dense hybrid — Mamba-2 (M), attention (*) and relu^2 MLP (-) blocks."""
    return nemotron_h_moe(t, **({"pattern": "M*M-M*M-"} | p | {"moe": False}))


BUILDERS = {
    "nemotron_h_moe": nemotron_h_moe,
    "mamba2": mamba2,
    "granitehybrid": granitehybrid,
    "jamba": jamba,
    "falcon-h1": falcon_h1,
    "plamo2": plamo2,
    "nemotron_h": nemotron_h,
    "mamba": mamba,
    "lfm2": lfm2,
    "lfm2moe": lambda t=Types(), **p: lfm2(t, **({"n_expert": 16} | p)),
    "lfm2-swa": lambda t=Types(), **p: lfm2(t, **({"swa": 128} | p)),  # `lfm2` with a sliding window
}


# Full-size presets (header-only, sparse) of this family, by name: presets.py merges them into synth.PRESETS.
# Types are those of common community quantizations.
PRESETS = {
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
}
