"""Block builders shared by the families: metadata prologue, embeddings, attention, MoE and dense FFN
tensors, in llama.cpp's tensor names."""

from gguf.constants import MODEL_TENSOR, Keys

import moetools.synth.names as names
from moetools.synth.names import parse, tn
from moetools.synth.spec import F32, ModelSpec, TensorSpec


def _common(spec, p):
    spec.meta(Keys.General.NAME, p.get("name", f"synthetic {spec.architecture}"), "str")
    spec.meta(Keys.LLM.BLOCK_COUNT, p["n_layer"])
    spec.meta(Keys.LLM.CONTEXT_LENGTH, p["ctx"])
    spec.meta(Keys.LLM.EMBEDDING_LENGTH, p["n_embd"])
    spec.meta(Keys.Attention.LAYERNORM_RMS_EPS, 1e-6, "f32")
    spec.meta(Keys.Rope.FREQ_BASE, p.get("rope_base", 10000.0), "f32")
    spec.meta(Keys.General.FILE_TYPE, p.get("file_type", 7))
    spec.vocab_size = p["vocab"]
    spec.merges = p.get("merges", 64)  # llama.cpp's BPE loader refuses a vocabulary without merges


def _experts(spec, il, n_embd, n_ff, n_expert, t, bias=False):
    down = t.expert_down if t.expert_down is not None else t.expert
    if t.expert_down_blocks is not None and il not in t.expert_down_blocks:
        down = t.expert
    spec.add(tn(MODEL_TENSOR.FFN_GATE_EXP, il), (n_embd, n_ff, n_expert), t.expert)
    spec.add(tn(MODEL_TENSOR.FFN_UP_EXP, il), (n_embd, n_ff, n_expert), t.expert)
    spec.add(tn(MODEL_TENSOR.FFN_DOWN_EXP, il), (n_ff, n_embd, n_expert), down)
    if bias:
        spec.add(tn(MODEL_TENSOR.FFN_GATE_EXP, il, "bias"), (n_ff, n_expert), F32)
        spec.add(tn(MODEL_TENSOR.FFN_UP_EXP, il, "bias"), (n_ff, n_expert), F32)
        spec.add(tn(MODEL_TENSOR.FFN_DOWN_EXP, il, "bias"), (n_embd, n_expert), F32)


def _dense_ffn(spec, il, n_embd, n_ff, t, shared=False):
    """A SwiGLU FFN's gate, up and down (`shared`: a shared expert's, ffn_*_shexp)."""
    gate, up, down = ((MODEL_TENSOR.FFN_GATE_SHEXP, MODEL_TENSOR.FFN_UP_SHEXP, MODEL_TENSOR.FFN_DOWN_SHEXP) if shared
                      else (MODEL_TENSOR.FFN_GATE, MODEL_TENSOR.FFN_UP, MODEL_TENSOR.FFN_DOWN))
    spec.add(tn(gate, il), (n_embd, n_ff), t.resident)
    spec.add(tn(up, il), (n_embd, n_ff), t.resident)
    spec.add(tn(down, il), (n_ff, n_embd), t.resident)


def _embeddings(spec, p, t):
    spec.add(tn(MODEL_TENSOR.TOKEN_EMBD), (p["n_embd"], p["vocab"]), t.embed)
    spec.add(tn(MODEL_TENSOR.OUTPUT_NORM), (p["n_embd"],), t.norm)
    spec.add(tn(MODEL_TENSOR.OUTPUT), (p["n_embd"], p["vocab"]), t.output)


def _gqa_keys(spec, p, n_ff, head=None):
    """Keys of a grouped-query attention MoE model; `head` writes explicit key/value widths."""
    spec.meta(Keys.LLM.FEED_FORWARD_LENGTH, n_ff)
    spec.meta(Keys.Attention.HEAD_COUNT, p["n_head"])
    spec.meta(Keys.Attention.HEAD_COUNT_KV, p["n_head_kv"])
    if p.get("n_expert"):
        spec.meta(Keys.LLM.EXPERT_COUNT, p["n_expert"])
        spec.meta(Keys.LLM.EXPERT_USED_COUNT, p["top_k"])
    if head:
        spec.meta(Keys.Attention.KEY_LENGTH, head)
        spec.meta(Keys.Attention.VALUE_LENGTH, head)


def _gqa_attention(spec, il, p, head, t, bias=False):
    """attn_q/k/v/output of one block (with biases for gpt-oss)."""
    n_embd, q, kv = p["n_embd"], p["n_head"] * head, p["n_head_kv"] * head
    for kind, rows in ((MODEL_TENSOR.ATTN_Q, q), (MODEL_TENSOR.ATTN_K, kv), (MODEL_TENSOR.ATTN_V, kv)):
        spec.add(tn(kind, il), (n_embd, rows), t.resident)
        if bias:
            spec.add(tn(kind, il, "bias"), (rows,), t.norm)
    spec.add(tn(MODEL_TENSOR.ATTN_OUT, il), (q, n_embd), t.resident)
    if bias:
        spec.add(tn(MODEL_TENSOR.ATTN_OUT, il, "bias"), (n_embd,), t.norm)


def _normed_gqa_attention(spec, il, p, head, t):
    """attn_norm, then GQA attention with per-head q/k norms (gemma3n, dflash)."""
    spec.add(tn(MODEL_TENSOR.ATTN_NORM, il), (p["n_embd"],), t.norm)
    _gqa_attention(spec, il, p, head, t)
    spec.add(tn(MODEL_TENSOR.ATTN_Q_NORM, il), (head,), t.norm)
    spec.add(tn(MODEL_TENSOR.ATTN_K_NORM, il), (head,), t.norm)


def _renamed(spec, arch):
    """The spec under another architecture name (its `{arch}.` keys renamed with it)."""
    old = spec.architecture
    spec.architecture = arch
    spec.metadata = [(key.replace(old + ".", arch + ".", 1), value, kind) for key, value, kind in spec.metadata]
    return spec


def _fuse_qkv(spec):
    """attn_q/k/v of every block replaced by one attn_qkv of their rows, in the position of attn_q."""
    qkv = (MODEL_TENSOR.ATTN_Q, MODEL_TENSOR.ATTN_K, MODEL_TENSOR.ATTN_V)
    shapes = {tensor.name: tensor.shape for tensor in spec.tensors}
    fused = []
    for tensor in spec.tensors:
        kind, il, suffix = parse(tensor.name)
        if kind in qkv[1:] and suffix == "weight":
            continue
        if kind == MODEL_TENSOR.ATTN_Q and suffix == "weight":
            rows = sum(shapes[tn(part, il)][1] for part in qkv)
            tensor = TensorSpec(tn(MODEL_TENSOR.ATTN_QKV, il), (tensor.shape[0], rows), tensor.type_id)
        fused.append(tensor)
    spec.tensors = fused
    return spec


def _shared_experts_moe(arch, t, p, weights_scale, probs_bias, qk_norm=False, extra=()):
    """DeepSeek-V1-style MoE layouts: leading dense blocks, then routed experts and n_shared shared
    experts of the expert width."""
    p = {"n_layer": 4, "n_embd": 256, "n_head": 4, "n_head_kv": 4, "n_ff": 512, "n_ff_exp": 128, "n_shared": 2,
         "n_expert": 16, "top_k": 4, "n_dense": 1, "vocab": 1024, "ctx": 4096, "rope_base": 1e4} | p
    spec = ModelSpec(arch, [])
    _common(spec, p)
    _gqa_keys(spec, p, p["n_ff"])
    spec.meta(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH, p["n_ff_exp"])
    spec.meta(Keys.LLM.EXPERT_SHARED_COUNT, p["n_shared"])
    spec.meta(Keys.LLM.LEADING_DENSE_BLOCK_COUNT, p["n_dense"])
    spec.meta(Keys.LLM.EXPERT_WEIGHTS_SCALE, weights_scale, "f32")
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
        spec.add(tn(MODEL_TENSOR.ATTN_NORM, il), (n_embd,), t.norm)
        _gqa_attention(spec, il, p, head, t)
        if qk_norm:
            spec.add(tn(MODEL_TENSOR.ATTN_K_NORM, il), (head,), t.norm)
            spec.add(tn(MODEL_TENSOR.ATTN_Q_NORM, il), (head,), t.norm)
        spec.add(tn(MODEL_TENSOR.FFN_NORM, il), (n_embd,), t.norm)
        if il < p["n_dense"]:
            _dense_ffn(spec, il, n_embd, p["n_ff"], t)
            continue
        spec.add(tn(MODEL_TENSOR.FFN_GATE_INP, il), (n_embd, p["n_expert"]), t.norm)
        if probs_bias:
            spec.add(tn(MODEL_TENSOR.FFN_EXP_PROBS_B, il, "bias"), (p["n_expert"],), t.norm)
        _experts(spec, il, n_embd, p["n_ff_exp"], p["n_expert"], t)
        _dense_ffn(spec, il, n_embd, p["n_ff_shexp"], t, shared=True)


def _mla_attention(spec, il, p, t):
    """DeepSeek-style MLA as llama.cpp's converter writes it today (absorbed k_b / v_b)."""
    n_embd, n_head = p["n_embd"], p["n_head"]
    nope, rope, v_head, kv_lora = p["qk_nope"], p["rope"], p["v_head"], p["kv_lora"]
    if p.get("q_lora"):
        spec.add(tn(MODEL_TENSOR.ATTN_Q_A, il), (n_embd, p["q_lora"]), t.resident)
        spec.add(tn(MODEL_TENSOR.ATTN_Q_A_NORM, il), (p["q_lora"],), t.norm)
        spec.add(tn(MODEL_TENSOR.ATTN_Q_B, il), (p["q_lora"], n_head * (nope + rope)), t.resident)
    else:
        spec.add(tn(MODEL_TENSOR.ATTN_Q, il), (n_embd, n_head * (nope + rope)), t.resident)
    spec.add(tn(MODEL_TENSOR.ATTN_KV_A_MQA, il), (n_embd, kv_lora + rope), t.resident)
    spec.add(tn(MODEL_TENSOR.ATTN_KV_A_NORM, il), (kv_lora,), t.norm)
    spec.add(tn(MODEL_TENSOR.ATTN_K_B, il), (nope, kv_lora, n_head), t.resident)
    spec.add(tn(MODEL_TENSOR.ATTN_V_B, il), (kv_lora, v_head, n_head), t.resident)
    spec.add(tn(MODEL_TENSOR.ATTN_OUT, il), (n_head * v_head, n_embd), t.resident)


def _dsa_indexer(spec, il, p, t):
    """The DSA lightning indexer of one block (DeepSeek-V3.2 and its descendants): k_norm with its bias,
    the head weights (proj), the key and the query up-projection from the q latent."""
    n_embd, idx, idx_heads = p["n_embd"], p["idx_head"], p["idx_heads"]
    spec.add(tn(MODEL_TENSOR.INDEXER_K_NORM, il), (idx,), t.norm)
    spec.add(tn(MODEL_TENSOR.INDEXER_K_NORM, il, "bias"), (idx,), t.norm)
    spec.add(tn(MODEL_TENSOR.INDEXER_PROJ, il), (n_embd, idx_heads), t.norm)
    spec.add(tn(MODEL_TENSOR.INDEXER_ATTN_K, il), (n_embd, idx), t.resident)
    spec.add(tn(MODEL_TENSOR.INDEXER_ATTN_Q_B, il), (p["q_lora"], idx_heads * idx), t.resident)


def _mla_keys(spec, p):
    if p.get("q_lora"):
        spec.meta(Keys.Attention.Q_LORA_RANK, p["q_lora"])
    spec.meta(Keys.Attention.KV_LORA_RANK, p["kv_lora"])
    spec.meta(Keys.Attention.KEY_LENGTH, p["kv_lora"] + p["rope"])
    spec.meta(Keys.Attention.VALUE_LENGTH, p["kv_lora"])
    spec.meta(Keys.Attention.KEY_LENGTH_MLA, p["qk_nope"] + p["rope"])
    spec.meta(Keys.Attention.VALUE_LENGTH_MLA, p["v_head"])
    spec.meta(Keys.Rope.DIMENSION_COUNT, p["rope"])


def _router_groups(spec, p):
    """llama.cpp's converter writes the router's expert groups when config.json has them (`n_group`,
    `topk_group`; conversion/base.py, nemotron.py): grouped top-k in build_moe_ffn when more than one."""
    if p.get("expert_groups") is not None:
        spec.meta(Keys.LLM.EXPERT_GROUP_COUNT, p["expert_groups"])
    if p.get("expert_groups_used") is not None:
        spec.meta(Keys.LLM.EXPERT_GROUP_USED_COUNT, p["expert_groups_used"])


def _kimi_keys(spec, p, is_mla, k3):
    """The keys kimi-k3 and kimi-linear share (KV heads only in the MLA layers); K3 also writes
    vocab_size and expert_weights_norm (kimi-linear.cpp normalises the weights whatever the key says)."""
    spec.meta(Keys.LLM.FEED_FORWARD_LENGTH, p["n_ff"])
    spec.meta(Keys.Attention.HEAD_COUNT, p["n_head"])
    spec.meta(Keys.Attention.HEAD_COUNT_KV, [1 if mla else 0 for mla in is_mla], "u32[]")
    if k3:
        spec.meta(Keys.LLM.VOCAB_SIZE, p["vocab"])
    spec.meta(Keys.SSM.CONV_KERNEL, p["conv"])
    spec.meta(Keys.KDA.HEAD_DIM, p["kda_head"])
    _mla_keys(spec, p)
    spec.meta(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH, p["n_ff_exp"])
    spec.meta(Keys.LLM.EXPERT_COUNT, p["n_expert"])
    spec.meta(Keys.LLM.EXPERT_USED_COUNT, p["top_k"])
    spec.meta(Keys.LLM.EXPERT_SHARED_COUNT, p["n_shared"])
    spec.meta(Keys.LLM.LEADING_DENSE_BLOCK_COUNT, p["n_dense"])
    spec.meta(Keys.LLM.EXPERT_WEIGHTS_SCALE, 2.5, "f32")
    if k3:
        spec.meta(Keys.LLM.EXPERT_WEIGHTS_NORM, True, "bool")
    spec.meta(Keys.LLM.EXPERT_GATING_FUNC, 2)


def _kda_qkv(spec, il, p, t):
    """A KDA block's q/k/v short convolutions and projections (kda_head x n_head wide)."""
    d_inner = p["kda_head"] * p["n_head"]
    for conv in (MODEL_TENSOR.SSM_CONV1D_Q, MODEL_TENSOR.SSM_CONV1D_K, MODEL_TENSOR.SSM_CONV1D_V):
        spec.add(tn(conv, il), (p["conv"], 1, d_inner), t.norm)
    for kind in (MODEL_TENSOR.ATTN_Q, MODEL_TENSOR.ATTN_K, MODEL_TENSOR.ATTN_V):
        spec.add(tn(kind, il), (p["n_embd"], d_inner), t.resident)


def _kda_block(spec, il, p, t, factored_gate):
    """One KDA block's tensors: q/k/v short convs and projections, the decay gate, beta, A, dt bias, the
    output gate (K3: ssm_g; kimi-linear: ssm_g_a / ssm_g_b, with A as {1, n_head}), its norm and output."""
    n_embd, n_head, head = p["n_embd"], p["n_head"], p["kda_head"]
    d_inner = head * n_head
    _kda_qkv(spec, il, p, t)
    spec.add(tn(MODEL_TENSOR.SSM_F_A, il), (n_embd, head), t.resident)
    spec.add(tn(MODEL_TENSOR.SSM_F_B, il), (head, d_inner), t.resident)
    spec.add(tn(MODEL_TENSOR.SSM_BETA, il), (n_embd, n_head), t.norm)
    spec.add(tn(MODEL_TENSOR.SSM_A, il, suffix=None), (1, n_head) if factored_gate else (n_head,), t.norm)
    spec.add(tn(MODEL_TENSOR.SSM_DT, il, "bias"), (d_inner,), t.norm)
    if factored_gate:
        spec.add(tn(MODEL_TENSOR.SSM_G_A, il), (n_embd, head), t.resident)
        spec.add(tn(MODEL_TENSOR.SSM_G_B, il), (head, d_inner), t.resident)
    else:
        spec.add(tn(names.SSM_G, il), (n_embd, d_inner), t.resident)
    spec.add(tn(MODEL_TENSOR.SSM_NORM, il), (head,), t.norm)
    spec.add(tn(MODEL_TENSOR.ATTN_OUT, il), (d_inner, n_embd), t.resident)
def _gdn_keys(spec, p):
    """The gated delta net keys of the Qwen hybrids; returns (key_dim, value_dim)."""
    key_dim, value_dim = p["state"] * p["k_heads"], p["state"] * p["v_heads"]
    spec.meta(Keys.SSM.CONV_KERNEL, p["conv"])
    spec.meta(Keys.SSM.INNER_SIZE, value_dim)
    spec.meta(Keys.SSM.STATE_SIZE, p["state"])
    spec.meta(Keys.SSM.TIME_STEP_RANK, p["v_heads"])
    spec.meta(Keys.SSM.GROUP_COUNT, p["k_heads"])
    spec.meta(Keys.LLM.FULL_ATTENTION_INTERVAL, p["full_every"])
    return key_dim, value_dim


def _gated_attention(spec, il, p, t):
    """A Qwen hybrid's full-attention block: queries with their output gate, K, V, q/k norms."""
    n_embd, head = p["n_embd"], p["head"]
    q, kv = p["n_head"] * head, p["n_head_kv"] * head
    spec.add(tn(MODEL_TENSOR.ATTN_Q, il), (n_embd, 2 * q), t.resident)
    spec.add(tn(MODEL_TENSOR.ATTN_K, il), (n_embd, kv), t.resident)
    spec.add(tn(MODEL_TENSOR.ATTN_V, il), (n_embd, kv), t.resident)
    spec.add(tn(MODEL_TENSOR.ATTN_OUT, il), (q, n_embd), t.resident)
    spec.add(tn(MODEL_TENSOR.ATTN_Q_NORM, il), (head,), t.norm)
    spec.add(tn(MODEL_TENSOR.ATTN_K_NORM, il), (head,), t.norm)


def _gdn_block(spec, il, p, t, key_dim, value_dim, fused_ba=False):
    """A gated delta net block: qkv and gate projections, conv, dt bias, A, beta / alpha (qwen3next:
    one ssm_ba projection), the norm and the output projection."""
    n_embd = p["n_embd"]
    conv_dim = 2 * key_dim + value_dim
    spec.add(tn(MODEL_TENSOR.ATTN_QKV, il), (n_embd, conv_dim), t.resident)
    spec.add(tn(MODEL_TENSOR.ATTN_GATE, il), (n_embd, value_dim), t.resident)
    spec.add(tn(MODEL_TENSOR.SSM_CONV1D, il), (p["conv"], conv_dim), t.norm)
    spec.add(tn(MODEL_TENSOR.SSM_DT, il, "bias"), (p["v_heads"],), t.norm)
    spec.add(tn(MODEL_TENSOR.SSM_A, il, suffix=None), (p["v_heads"],), t.norm)
    if fused_ba:
        spec.add(tn(MODEL_TENSOR.SSM_BETA_ALPHA, il), (n_embd, 2 * p["v_heads"]), t.norm)
    else:
        spec.add(tn(MODEL_TENSOR.SSM_BETA, il), (n_embd, p["v_heads"]), t.norm)
        spec.add(tn(MODEL_TENSOR.SSM_ALPHA, il), (n_embd, p["v_heads"]), t.norm)
    spec.add(tn(MODEL_TENSOR.SSM_NORM, il), (p["state"],), t.norm)
    spec.add(tn(MODEL_TENSOR.SSM_OUT, il), (value_dim, n_embd), t.resident)


def _nextn_block(spec, il, n_embd, t):
    """The NextN/MTP input-fusion tensors of a trailing predict block (DeepSeek-V3, GLM-4.5)."""
    spec.add(tn(MODEL_TENSOR.NEXTN_EH_PROJ, il), (2 * n_embd, n_embd), t.resident)
    spec.add(tn(MODEL_TENSOR.NEXTN_ENORM, il), (n_embd,), t.norm)
    spec.add(tn(MODEL_TENSOR.NEXTN_HNORM, il), (n_embd,), t.norm)
    spec.add(tn(MODEL_TENSOR.NEXTN_SHARED_HEAD_NORM, il), (n_embd,), t.norm)


def _hc_mixes(spec, il, width, n_mix, n_scale, t):
    """A block's hyper-connection mixes before its attention and its FFN (fn, base, scale: hy_v4's
    pre/post mixes, DeepSeek-V4's Sinkhorn ones): `width` the streams' width, `n_mix` the mix's outputs."""
    for fn, base, scale in ((names.HC_ATTN_FN, names.HC_ATTN_BASE, names.HC_ATTN_SCALE),
                            (names.HC_FFN_FN, names.HC_FFN_BASE, names.HC_FFN_SCALE)):
        spec.add(tn(fn, il), (width, n_mix), t.norm)
        spec.add(tn(base, il), (n_mix,), t.norm)
        spec.add(tn(scale, il), (n_scale,), t.norm)


def _hc_head(spec, hc, n_embd, t):
    """The hyper-connection streams' merge before the output norm (hy_v4, DeepSeek-V4)."""
    spec.add(tn(names.HC_HEAD_FN), (hc * n_embd, hc), t.norm)
    spec.add(tn(names.HC_HEAD_BASE), (hc,), t.norm)
    spec.add(tn(names.HC_HEAD_SCALE), (1,), t.norm)


def _rwkv7_time_mix(spec, il, p, t):
    """An RWKV-7 time mix's tensors: the w/a/v/g low-rank paths (layer 0's v path at the iclr rank),
    the fused lerp, k_k/k_a/r_k and the four projections."""
    n_embd = p["n_embd"]
    lora_v = p["lora_iclr"] if il == 0 else p["lora_value"]
    lora_paths = ((MODEL_TENSOR.TIME_MIX_W0, MODEL_TENSOR.TIME_MIX_W1, MODEL_TENSOR.TIME_MIX_W2, p["lora_decay"]),
                  (MODEL_TENSOR.TIME_MIX_A0, MODEL_TENSOR.TIME_MIX_A1, MODEL_TENSOR.TIME_MIX_A2, p["lora_iclr"]),
                  (MODEL_TENSOR.TIME_MIX_V0, MODEL_TENSOR.TIME_MIX_V1, MODEL_TENSOR.TIME_MIX_V2, lora_v))
    for x0, x1, x2, rank in lora_paths:
        spec.add(tn(x0, il), (n_embd,), t.norm)
        spec.add(tn(x1, il), (n_embd, rank), t.norm)
        spec.add(tn(x2, il), (rank, n_embd), t.norm)
    spec.add(tn(MODEL_TENSOR.TIME_MIX_G1, il), (n_embd, p["lora_gate"]), t.norm)
    spec.add(tn(MODEL_TENSOR.TIME_MIX_G2, il), (p["lora_gate"], n_embd), t.norm)
    spec.add(tn(MODEL_TENSOR.TIME_MIX_LERP_FUSED, il), (n_embd, 1, 1, 6), t.norm)
    for kind in (MODEL_TENSOR.TIME_MIX_K_K, MODEL_TENSOR.TIME_MIX_K_A, MODEL_TENSOR.TIME_MIX_R_K):
        spec.add(tn(kind, il), (n_embd,), t.norm)
    for kind in (MODEL_TENSOR.TIME_MIX_KEY, MODEL_TENSOR.TIME_MIX_VALUE, MODEL_TENSOR.TIME_MIX_RECEPTANCE,
                 MODEL_TENSOR.TIME_MIX_OUTPUT):
        spec.add(tn(kind, il), (n_embd, n_embd), t.resident)


def _rwkv_norms(spec, p, t):
    """RWKV's embedding/output layer norms (with biases), embeddings and head."""
    n_embd = p["n_embd"]
    spec.add(tn(MODEL_TENSOR.TOKEN_EMBD), (n_embd, p["vocab"]), t.embed)
    for kind in (MODEL_TENSOR.TOKEN_EMBD_NORM, MODEL_TENSOR.OUTPUT_NORM):
        spec.add(tn(kind), (n_embd,), t.norm)
        spec.add(tn(kind, suffix="bias"), (n_embd,), t.norm)
    spec.add(tn(MODEL_TENSOR.OUTPUT), (n_embd, p["vocab"]), t.output)


def _rwkv_block_norms(spec, il, n_embd, t):
    for kind in (MODEL_TENSOR.ATTN_NORM, MODEL_TENSOR.ATTN_NORM_2, MODEL_TENSOR.TIME_MIX_LN):
        spec.add(tn(kind, il), (n_embd,), t.norm)
        spec.add(tn(kind, il, "bias"), (n_embd,), t.norm)


def _rwkv6_keys(spec, p, token_shift_count):
    spec.meta(Keys.WKV.HEAD_SIZE, p["head_size"])
    spec.meta(Keys.LLM.TIME_MIX_EXTRA_DIM, p["mix_extra"])
    spec.meta(Keys.LLM.TIME_DECAY_EXTRA_DIM, p["decay_extra"])
    spec.meta(Keys.LLM.TOKEN_SHIFT_COUNT, token_shift_count)


def _rwkv6_lerp_and_decay(spec, il, p, t, first=False):
    """An RWKV-6 time mix's data-dependent lerp (w1/w2, lerp_x, the fused five), time_mix_first (the
    wkv6 bonus; rwkv6qwen2 has none) and low-rank decay."""
    n_embd = p["n_embd"]
    spec.add(tn(MODEL_TENSOR.TIME_MIX_W1, il), (n_embd, p["mix_extra"] * 5), t.norm)
    spec.add(tn(MODEL_TENSOR.TIME_MIX_W2, il), (p["mix_extra"], n_embd, 5), t.norm)
    spec.add(tn(MODEL_TENSOR.TIME_MIX_LERP_X, il), (n_embd, 1, 1), t.norm)
    spec.add(tn(MODEL_TENSOR.TIME_MIX_LERP_FUSED, il), (n_embd, 1, 1, 5), t.norm)
    if first:
        spec.add(tn(MODEL_TENSOR.TIME_MIX_FIRST, il), (p["head_size"], n_embd // p["head_size"]), t.norm)
    spec.add(tn(MODEL_TENSOR.TIME_MIX_DECAY, il), (n_embd,), t.norm)
    spec.add(tn(MODEL_TENSOR.TIME_MIX_DECAY_W1, il), (n_embd, p["decay_extra"]), t.norm)
    spec.add(tn(MODEL_TENSOR.TIME_MIX_DECAY_W2, il), (p["decay_extra"], n_embd), t.norm)


def _mamba2_block(spec, il, p, t):
    """A Mamba-2 mixer's tensors (ssm_in, conv, dt bias, A, D, grouped norm, ssm_out)."""
    n_embd, d_inner = p["n_embd"], p["ssm_heads"] * p["ssm_head"]
    conv_dim = d_inner + 2 * p["groups"] * p["state"]
    spec.add(tn(MODEL_TENSOR.SSM_IN, il), (n_embd, d_inner + conv_dim + p["ssm_heads"]), t.resident)
    spec.add(tn(MODEL_TENSOR.SSM_CONV1D, il), (p["conv"], conv_dim), t.norm)
    spec.add(tn(MODEL_TENSOR.SSM_CONV1D, il, "bias"), (conv_dim,), t.norm)
    spec.add(tn(MODEL_TENSOR.SSM_DT, il, "bias"), (p["ssm_heads"],), t.norm)
    spec.add(tn(MODEL_TENSOR.SSM_A, il, suffix=None), (1, p["ssm_heads"]), t.norm)
    spec.add(tn(MODEL_TENSOR.SSM_D, il, suffix=None), (1, p["ssm_heads"]), t.norm)
    spec.add(tn(MODEL_TENSOR.SSM_NORM, il), (d_inner // p["groups"], p["groups"]), t.norm)
    spec.add(tn(MODEL_TENSOR.SSM_OUT, il), (d_inner, n_embd), t.resident)


def _ssm_keys(spec, p):
    spec.meta(Keys.SSM.CONV_KERNEL, p["conv"])
    spec.meta(Keys.SSM.INNER_SIZE, p["ssm_heads"] * p["ssm_head"])
    spec.meta(Keys.SSM.STATE_SIZE, p["state"])
    spec.meta(Keys.SSM.TIME_STEP_RANK, p["ssm_heads"])
    spec.meta(Keys.SSM.GROUP_COUNT, p["groups"])


def _hybrid_widths(spec, p, pattern):
    """The FFN width and head counts of a hybrid layout: KV heads only in its attention (`*`) blocks."""
    spec.meta(Keys.LLM.FEED_FORWARD_LENGTH, p["n_ff"])
    spec.meta(Keys.Attention.HEAD_COUNT, p["n_head"])
    spec.meta(Keys.Attention.HEAD_COUNT_KV, [p["n_head_kv"] if c == "*" else 0 for c in pattern], "u32[]")


def _mamba1_block(spec, il, n_embd, d_inner, d_state, dt_rank, d_conv, t, norms):
    """A Mamba-1 mixer's tensors (ssm_in, conv, the x projection to dt/B/C, dt, A, D, ssm_out); norms:
    jamba's dt/B/C RMS norms."""
    spec.add(tn(MODEL_TENSOR.SSM_IN, il), (n_embd, 2 * d_inner), t.resident)
    spec.add(tn(MODEL_TENSOR.SSM_CONV1D, il), (d_conv, d_inner), t.norm)
    spec.add(tn(MODEL_TENSOR.SSM_CONV1D, il, "bias"), (d_inner,), t.norm)
    spec.add(tn(MODEL_TENSOR.SSM_X, il), (d_inner, dt_rank + 2 * d_state), t.resident)
    if norms:
        spec.add(tn(MODEL_TENSOR.SSM_DT_NORM, il), (dt_rank,), t.norm)
    spec.add(tn(MODEL_TENSOR.SSM_DT, il), (dt_rank, d_inner), t.norm)
    spec.add(tn(MODEL_TENSOR.SSM_DT, il, "bias"), (d_inner,), t.norm)
    if norms:
        spec.add(tn(MODEL_TENSOR.SSM_B_NORM, il), (d_state,), t.norm)
        spec.add(tn(MODEL_TENSOR.SSM_C_NORM, il), (d_state,), t.norm)
    spec.add(tn(MODEL_TENSOR.SSM_A, il, suffix=None), (d_state, d_inner), t.norm)
    spec.add(tn(MODEL_TENSOR.SSM_D, il, suffix=None), (d_inner,), t.norm)
    spec.add(tn(MODEL_TENSOR.SSM_OUT, il), (d_inner, n_embd), t.resident)


def _nemotron_moe_keys(spec, p):
    spec.meta(Keys.LLM.EXPERT_COUNT, p["n_expert"])
    spec.meta(Keys.LLM.EXPERT_USED_COUNT, p["top_k"])
    spec.meta(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH, p["n_ff_exp"])
    spec.meta(Keys.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH, p["n_ff_shexp"])
    spec.meta(Keys.LLM.EXPERT_SHARED_COUNT, 1)
    spec.meta(Keys.LLM.EXPERT_WEIGHTS_NORM, True, "bool")
    spec.meta(Keys.LLM.EXPERT_WEIGHTS_SCALE, 2.5, "f32")
    spec.meta(Keys.LLM.EXPERT_GATING_FUNC, 2)
    _router_groups(spec, p)


def _gemma4_window_keys(spec, p, is_full):
    """gemma4's (and its assistant's) head widths of the full and sliding-window layers, the window, the
    per-layer pattern and the rope widths."""
    spec.meta(Keys.Attention.KEY_LENGTH, p["head"])
    spec.meta(Keys.Attention.VALUE_LENGTH, p["head"])
    spec.meta(Keys.Attention.KEY_LENGTH_SWA, p["head_swa"])
    spec.meta(Keys.Attention.VALUE_LENGTH_SWA, p["head_swa"])
    spec.meta(Keys.Attention.SLIDING_WINDOW, p["swa"])
    spec.meta(Keys.Attention.SLIDING_WINDOW_PATTERN, [not full for full in is_full], "bool[]")
    spec.meta(Keys.Rope.DIMENSION_COUNT, p["head"])
    spec.meta(Keys.Rope.DIMENSION_COUNT_SWA, p["head_swa"])
