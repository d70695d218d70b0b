"""Block builders shared by the families: metadata prologue, embeddings, attention, MoE and dense FFN
tensors, in llama.cpp's tensor names."""

from gguf.constants import Keys

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


def _renamed(spec, arch):
    """The spec under another architecture name (its `{arch}.` keys renamed with it)."""
    old = spec.architecture
    spec.architecture = arch
    spec.metadata = [(key.replace(old + ".", arch + ".", 1), value, kind) for key, value, kind in spec.metadata]
    return spec


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


def _nextn_block(spec, il, n_embd, t):
    """The NextN/MTP input-fusion tensors of a trailing predict block (DeepSeek-V3, GLM-4.5)."""
    spec.add(f"blk.{il}.nextn.eh_proj.weight", (2 * n_embd, n_embd), t.resident)
    spec.add(f"blk.{il}.nextn.enorm.weight", (n_embd,), t.norm)
    spec.add(f"blk.{il}.nextn.hnorm.weight", (n_embd,), t.norm)
    spec.add(f"blk.{il}.nextn.shared_head_norm.weight", (n_embd,), t.norm)


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
    spec.meta(Keys.WKV.HEAD_SIZE, p["head_size"])
    spec.meta(Keys.LLM.TIME_MIX_EXTRA_DIM, p["mix_extra"])
    spec.meta(Keys.LLM.TIME_DECAY_EXTRA_DIM, p["decay_extra"])
    spec.meta(Keys.LLM.TOKEN_SHIFT_COUNT, token_shift_count)


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
