"""The shared graph helpers of src/llama-graph.cpp, under llama.cpp's names: attention, the MoE FFN,
the dense FFN.

build_attn_mha (llm_graph_context::build_attn_mha), _store the KV cache's cpy_k/cpy_v
(llama-kv-cache.cpp), build_attn the usual attention layer body around it (q/k/v projections, rope,
build_attn, output projection), build_moe_ffn, build_ffn, build_rs with _state_copy (the recurrent
state gathers), _ResidualStack kimi-k3's attention residual stack, _backend_top_k build_sampling's
backend top-k chain. build_attn_inp (the attention inputs) is in graph/context.py.
"""

from moetools.devicefit import kv as kvmod
from moetools.devicefit.ggml.allocator import I32_BYTES


def build_attn_mha(b, il, q, q_bytes_per_head, kind, n_head, k_width, v_width, v_mla_rows=0, mask=None):
    """build_attn_mha: returns the attention output, n_head x v width x tokens (f32), contiguous.
    mask: the KQ mask it reads (None: the layer kind's input mask)."""
    g, T = b.g, b.T
    n_kv = b.cells[kind]
    mask = b.masks[kind] if mask is None else mask
    source = shared_kv_source(b, il)
    if source is None:
        k = g.view(b.cache)
        v = g.view(b.cache)
        k_read, v_read = g.view(k), g.view(v)
    else:
        # a layer past n_layer_kv_from_start reads the views get_k / get_v make of the earlier layer's
        # cache, on that layer's device: on another device the scheduler copies each view whole
        # (ggml_backend_sched_split_graph: a split input is ggml_dup_tensor of the view), per layer
        cache, hkv = source
        k = v = g.view(cache)
        k_read, v_read = g.view(k), g.view(v)
        k_read.nbytes = kvmod.row_bytes(b.settings.ctk, k_width) * hkv * n_kv * b.streams
        v_read.nbytes = kvmod.row_bytes(b.settings.ctv, v_width) * hkv * n_kv * b.streams
    qv = g.view(g.view(q))
    if b.fa:
        cur = g.op(b.f32(v_width, n_head, T), qv, k_read, v_read, mask)
        if v_mla_rows:
            cur = g.op(b.f32(v_mla_rows, T, n_head), b.weights, g.view(cur))
            cur = g.op(b.f32(v_mla_rows, n_head, T), g.view(cur))
        return g.expand(g.view(cur))  # build_attn_mha expands its output
    kq = g.op(b.f32(n_kv, T, n_head), k_read, qv)
    kq = g.op(kq.nbytes, kq, mask, inplace=(0,))  # soft_max_ext
    if b.kv.mla:
        v = g.op(kvmod.row_bytes(b.settings.ctk, v_width) * n_kv * b.streams, g.view(v))  # cont(transpose(v))
    kqv = g.op(b.f32(v_width, T, n_head), v if b.kv.mla else v_read, kq)
    if v_mla_rows:
        kqv = g.op(b.f32(v_mla_rows, T, n_head), b.weights, kqv)
        v_width = v_mla_rows
    return g.expand(g.op(b.f32(v_width * n_head, T), g.view(kqv)))  # cont_2d


def shared_kv_source(b, il):
    """(the cache external, its KV heads) of the earlier layer whose KV layer il reads when il is past
    llama_hparams::n_layer_kv_from_start (gemma4's shared_kv_layers: llama_model's reuse callback,
    n_layer_kv_from_start - 2 for a sliding-window layer, - 1 for a full one; llama_kv_cache maps the
    layer to that one's tensors); None for a layer with its own cache."""
    kv = b.kv
    if not kv.kv_from_start or il < kv.kv_from_start or kv.has_kv[il]:
        return None
    reuse = kv.kv_from_start - (2 if kv.is_swa[il] else 1)
    return b.layer_cache(reuse), kv.head_count_kv[reuse]


def _store(b, kind, k_cur, v_cur, v_strided, v_bytes):
    """cpy_k / cpy_v: set_rows into the caches (views of them). Without flash attention V is stored
    transposed: a strided V is made contiguous first, and a V narrower than the widest is padded."""
    g = b.g
    g.expand(g.write(b.cache, g.view(k_cur), b.k_idxs[kind]))
    if v_cur is None:
        return
    if not b.fa:
        if v_strided:
            v_cur = g.op(v_bytes, v_cur)
        v_max = max(hkv * width for hkv, width in zip(b.kv.head_count_kv, b.kv.v_width))
        if v_bytes < b.f32(v_max, b.T):
            v_cur = g.op(b.f32(v_max, b.T), v_cur)
    g.expand(g.write(b.cache, g.view(v_cur), b.v_idxs[kind]))


def build_attn(b, il, x, layer, mask=None, rope=None):
    """rope: whether this layer ropes its q and k (None: the graph's rope)."""
    g, T = b.g, b.T
    kv = b.kv
    kind = "swa" if kv.is_swa[il] else "full"
    n_head, hkv = b.shape.n_head[il], kv.head_count_kv[il]
    k_width, v_width = kv.k_width[il], kv.v_width[il]
    q_rows = layer.q_rows or n_head * k_width
    if shared_kv_source(b, il) is not None:
        return _build_attn_shared(b, il, x, layer, kind, n_head, k_width, v_width, q_rows, mask, rope)
    if layer.fused_qkv:
        qkv = b.mm(q_rows, x)
        if layer.qkv_bias:
            qkv = g.op(qkv.nbytes, qkv, b.weights, inplace=(0,))
        q, k, v = g.view(qkv), g.view(qkv), g.view(qkv)
    else:
        q = q_full = b.mm(q_rows, x)
        if layer.qkv_bias:
            q = g.op(q.nbytes, q, b.weights, inplace=(0,))
        k = b.mm(layer.k_rows or hkv * k_width, x)
        if layer.qkv_bias:
            k = g.op(k.nbytes, k, b.weights, inplace=(0,))
        v = b.mm(layer.v_rows or hkv * v_width, x)
        if layer.qkv_bias:
            v = g.op(v.nbytes, v, b.weights, inplace=(0,))
        q, k, v = g.view(q), g.view(k), g.view(v)
    q_bytes = b.f32(n_head * k_width, T)
    k_bytes = b.f32(hkv * k_width, T)
    if layer.qk_norm:
        q = b.norm(q, n_head * k_width)
        k = b.norm(k, hkv * k_width)
    if b.shape.rope if rope is None else rope:
        q = g.op(q_bytes, q, b.pos, inplace=(0,))  # rope (a new tensor when its source is a view)
        k = g.op(k_bytes, k, b.pos, inplace=(0,))
    # build_attn (iswa): a sliding-window layer rotates by its own cache's inputs (self_k_rot_swa)
    k_rot, v_rot = b.rot_swa if kind == "swa" and any(rot is not None for rot in b.rot_swa) else (b.k_rot, b.v_rot)
    if k_rot is not None:
        q = g.view(g.op(q_bytes, k_rot, g.view(q)))
        k = g.view(g.op(k_bytes, k_rot, g.view(k)))
    if v_rot is not None:
        v = g.view(g.op(b.f32(hkv * v_width, T), v_rot, g.view(v)))
    # build_attn expands q, v, k; its sliding-window (iswa) variant q, k, v
    for tensor in ((q, k, v) if "swa" in b.cells or b.iswa else (q, v, k)):
        g.expand(tensor)
    _store(b, kind, k, v, layer.fused_qkv and v_rot is None, b.f32(hkv * v_width, T))
    cur = build_attn_mha(b, il, q, k_width, kind, n_head, k_width, v_width, mask=mask)
    if v_rot is not None:
        cur = g.view(g.op(b.f32(n_head * v_width, T), v_rot, g.view(cur)))
    if layer.gated_q:  # the gate half of Qcur_full (alive until here), contiguous, sigmoid, times the output
        gate = g.op(b.f32(n_head * k_width, T), g.view(q_full))
        gate = b.unary(gate, gate.nbytes)
        cur = g.op(b.f32(n_head * v_width, T), cur, gate, inplace=(0, 1))
    elif layer.gate_rows:
        gate = b.mm(layer.gate_rows, x)
        gate = b.unary(gate, gate.nbytes)
        cur = g.op(cur.nbytes if cur.nbytes else b.f32(n_head * v_width, T), cur, gate)
    cur = b.mm(b.shape.n_embd, cur)
    if layer.o_bias:
        cur = g.op(cur.nbytes, cur, b.weights, inplace=(0,))
    return cur


def _build_attn_shared(b, il, x, layer, kind, n_head, k_width, v_width, q_rows, mask, rope):
    """build_attn of a layer that reuses an earlier layer's KV (gemma4.cpp: no k_cur / v_cur): the query
    alone (projected, normed, roped), nothing stored, the attention over the earlier layer's cache."""
    g, T = b.g, b.T
    q = g.view(b.mm(q_rows, x))
    if layer.qk_norm:
        q = b.norm(q, n_head * k_width)
    if b.shape.rope if rope is None else rope:
        q = g.op(b.f32(n_head * k_width, T), q, b.pos, inplace=(0,))
    g.expand(q)
    cur = build_attn_mha(b, il, q, k_width, kind, n_head, k_width, v_width, mask=mask)
    return b.mm(b.shape.n_embd, cur)


def _state_copy(b):
    """build_rs_inp: the recurrent cache's s_copy input (i32, one per cell: n_seq of them)."""
    if b.s_copy is None:
        b.s_copy = b.g.input(I32_BYTES * max(1, b.settings.n_seq))
    return b.s_copy


def build_rs(b):
    """build_rs_inp's two views of s_copy, s_copy_main (the rows the ubatch's sequences gather) and
    s_copy_extra (the states copied along: none when reserving), made once per graph and read by every
    recurrent layer: split across devices, each backend holds one copy of each view for the whole graph
    (ggml-backend copies a tensor once per backend), not one per layer."""
    if b.s_views is None:
        s_copy = _state_copy(b)
        b.s_views = (b.g.view(s_copy), b.g.view(s_copy))
    return b.s_views


def clear_state(b):
    """build_rs's ggml_scale_inplace(state_zero, 0) on a view of the layer's state cache, expanded before
    its gather: no memory of its own, but an op whose source lives in the cache's buffer, so the scheduler
    runs it on the cache's backend (ggml_backend_sched_backend_id_from_cur) and the expansions carry that
    backend on to the gather and to the previous layer's weightless tail that follows it in the graph."""
    b.g.expand(b.g.write(b.cache))


def build_moe_ffn(b, il, x, layer, logits=None, shared=None):
    """build_moe_ffn (and the shared expert of build_ffn beside it). logits / shared: the router
    logits and the shared expert's output when the caller built them first (nemotron-h-moe's MTP head)."""
    g, T = b.g, b.T
    n_embd, n_expert, top_k = b.shape.n_embd, layer.n_expert, layer.top_k
    if layer.expert_in and layer.expert_in != n_embd:  # latent MoE: down-project before the experts
        x_in = b.norm(b.mm(layer.expert_in, x), layer.expert_in)
    else:
        x_in = x
    logits = b.mm(n_expert, x) if logits is None else logits
    if layer.router_bias:
        logits = g.op(logits.nbytes, logits, b.weights, inplace=(0,))
    if layer.gating == 3:
        probs = logits
    else:
        probs = b.unary(logits, logits.nbytes)
        if layer.gating == 4:  # sqrt(softplus(logits)) (DeepSeek-V4)
            probs = b.unary(probs, probs.nbytes)
    selection = probs
    if layer.probs_bias:
        selection = g.op(probs.nbytes, probs, b.weights, inplace=(0,))
    argsort = g.op(I32_BYTES * n_expert * T, selection)
    selected = g.view(argsort)
    weights = g.op(b.f32(top_k, T), g.view(probs), selected)
    if layer.gating == 3:
        weights = g.view(b.unary(g.view(weights), weights.nbytes))
    if layer.norm_w:
        w2 = g.view(weights)
        total = g.op(b.f32(1, T), w2)
        total = b.unary(total, total.nbytes)
        weights = g.view(g.op(weights.nbytes, w2, total, inplace=(0,)))
    if layer.w_scale:
        weights = g.op(b.f32(top_k, T), weights, inplace=(0,))  # ggml_scale (a new tensor after the norm's reshape)
    g.expand(weights)
    cur = g.view(x_in)
    ff = layer.n_ff_exp
    if layer.gate_up_merged:
        gate_up = g.op(b.f32(2 * ff, top_k, T), b.expert_weights(il, "gate_up"), cur, selected)
        if layer.expert_bias:
            gate_up = g.op(gate_up.nbytes, gate_up, b.expert_weights(il, "gate_up"), selected, inplace=(0,))
        gate, up = g.view(gate_up), g.view(gate_up)
    else:
        up = g.op(b.f32(ff, top_k, T), b.expert_weights(il, "up"), cur, selected)
        if layer.expert_bias:
            up = g.op(up.nbytes, up, b.expert_weights(il, "up"), selected, inplace=(0,))
        gate = None
        if layer.exp_gated:
            gate = g.op(b.f32(ff, top_k, T), b.expert_weights(il, "gate"), cur, selected)
            if layer.expert_bias:
                gate = g.op(gate.nbytes, gate, b.expert_weights(il, "gate"), selected, inplace=(0,))
    if gate is None:
        act = _ungated(b, up)
    elif b.shape.situ:
        act = _situ(b, gate, up)
    else:
        act = g.op(b.f32(ff, top_k, T), gate, up)  # swiglu / swiglu_oai: a new tensor
    out_width = layer.expert_in if layer.expert_in and layer.expert_in != n_embd else n_embd
    down = g.op(b.f32(out_width, top_k, T), b.expert_weights(il, "down"), act, selected)
    if layer.expert_bias:
        down = g.op(down.nbytes, down, b.expert_weights(il, "down"), selected, inplace=(0,))
    down = g.op(down.nbytes, down, weights, inplace=(0,))
    g.expand(down)
    parts = [g.expand(g.view(down)) for _ in range(top_k)]
    out = parts[0]
    for part in parts[1:]:
        out = g.expand(g.op(b.f32(out_width, T), out, part, inplace=(0,)))
    if top_k == 1:
        out = g.op(b.f32(out_width, T), out)
    if out_width != n_embd:
        out = b.mm(n_embd, b.norm(out, out_width))
    if layer.n_ff_shexp:
        shared = build_ffn(b, x, layer.n_ff_shexp, layer.shexp_gated) if shared is None else shared
        if layer.shexp_gate:  # qwen2moe / qwen3next / qwen35moe: times sigmoid of a one-row projection
            shared_gate = b.mm(1, x)
            shared = g.op(shared.nbytes, shared, b.unary(shared_gate, shared_gate.nbytes), inplace=(0, 1))
        out = g.op(b.f32(n_embd, T), out, shared, inplace=(0, 1))
    return out


class _ResidualStack:
    """kimi-k3's cross-layer residual attention (src/models/kimi-k3.cpp res_push / res_mix): the raw
    input of every block_size-th layer is appended to a stack [n_embd, n_ckpt, tokens] (a concat: a new,
    larger tensor each time, alive to the end), and each mixer and FFN reads a softmax-weighted mix of
    the stack and the current stream."""

    def __init__(self, b):
        self.b = b
        self.top = None
        self.count = 0

    def push(self, cur):
        b, g = self.b, self.b.g
        checkpoint = g.view(cur)
        self.top = checkpoint if self.top is None else g.op(b.f32(b.shape.n_embd, self.count + 1, b.T), self.top, checkpoint)
        self.count += 1

    def mix(self, cur):
        if self.top is None:
            return cur
        b, g, T, n_embd, count = self.b, self.b.g, self.b.T, self.b.shape.n_embd, self.count
        # bare ggml_rms_norms (unnamed, so never pinned to the layer's device): with full offload the
        # scheduler runs them where the stream is, the next device copies their outputs and the stack
        scores = b.norm(self.top, n_embd * count, pinned=False)  # over every checkpoint, times the score weights
        scores = g.view(g.op(b.f32(1, count, T), scores))  # sum_rows
        current = g.op(b.f32(1, T), b.norm(cur, n_embd, pinned=False))
        probs = g.op(b.f32(count + 1, T), scores, current)  # concat
        probs = b.unary(probs, probs.nbytes)  # soft_max
        p_stack = g.op(b.f32(count, T), g.view(probs))  # cont
        p_current = g.op(b.f32(1, T), g.view(probs))
        mixed = g.op(b.f32(n_embd, T), self.top, p_stack)  # dsv4_hc_pre
        return g.op(b.f32(n_embd, T), mixed, g.op(b.f32(n_embd, T), cur, p_current, inplace=(0,)), inplace=(0, 1))


def _situ(b, gate, up):
    """kimi-k3's situ activation (LLM_FFN_SITU): beta*tanh(gate/beta)*sigmoid(gate) times
    linear_beta*tanh(up/linear_beta) — scale, tanh, scale and mul in place, sigmoid taking the gate."""
    g = b.g
    a = b.unary(b.unary(b.unary(gate, gate.nbytes), gate.nbytes), gate.nbytes)  # scale (a new tensor: the gate is read twice)
    a = g.op(gate.nbytes, a, b.unary(gate, gate.nbytes), inplace=(0,))
    if b.shape.situ_linear:
        up = b.unary(b.unary(b.unary(up, up.nbytes), up.nbytes), up.nbytes)
    return g.op(gate.nbytes, a, up, inplace=(0,))


def _ungated(b, up):
    """An FFN without a gate: the activation in place of up (relu^2: relu then sqr)."""
    act = b.unary(up, up.nbytes)
    return b.unary(act, act.nbytes) if b.shape.relu_sqr else act


def build_ffn(b, x, n_ff, gated=True):
    g = b.g
    up = b.mm(n_ff, x)
    if not gated:
        return b.mm(b.shape.n_embd, _ungated(b, up))
    gate = b.mm(n_ff, x)
    act = _situ(b, gate, up) if b.shape.situ else g.op(up.nbytes, gate, up)
    return b.mm(b.shape.n_embd, act)


BACKEND_TOP_K = 10  # common_speculative_impl_draft_dflash's sampler chain: top_k(10)


def _backend_top_k(b, logits, n_vocab, n_out, rows):
    """llm_graph_context::build_sampling with a backend top-k chain: the logits padded by one row
    (ggml_pad: a copy, alive while any row samples), then per sampled row the top_k ids of its view and
    those logits gathered (get_rows), both graph outputs (t_candidates, t_sampled_logits)."""
    g = b.g
    padded = g.op(b.f32(n_vocab, n_out + 1), logits)
    for _ in range(rows):
        row = g.view(padded)
        ids = g.op(I32_BYTES * BACKEND_TOP_K, row)
        ids.is_output = True
        picked = g.op(b.f32(1, BACKEND_TOP_K), g.view(row), ids)
        picked.is_output = True
        g.expand(picked)
