"""Lightning attention (src/models/minimax-01.cpp): linear attention over a recurrent state.
"""

from moetools.devicefit.graph.common import build_rs


def _lightning_inputs(b):
    """minimax-01.cpp's llm_graph_input_la: the per-head slopes, the q and k decay exponents (one per head
    and token) and the diagonal decay (n_seq_tokens^2 per head and sequence), all f32."""
    if getattr(b, "la", None) is None:
        heads = b.shape.n_head[0]
        n_seq = max(1, b.settings.n_seq)
        t = b.T // n_seq
        g = b.g
        b.la = (g.input(b.f32(heads)), g.input(b.f32(heads, b.T)), g.input(b.f32(heads, b.T)),
                g.input(b.f32(t, t, heads, n_seq)))
    return b.la


def _lightning_layer(b, il, x, layer):
    """MiniMax-01's lightning attention block (minimax-01.cpp): the (empty) conv state and the state
    gathered (build_rs), the silu'd fused qkv, the decays exp(scale(input)), q times its decay against
    the old state, the intra-chunk q k^T times the diagonal decay against v (contiguous), their sum; the
    block decay of the slopes, the old state times it plus (k times its decay, contiguous) v^T, copied
    back to the cache; the output permuted contiguous, RMS-normed, times sigmoid of the gate, projected.
    Views (the q/k/v slices, the state's reshape) are never reused in place."""
    g, T = b.g, b.T
    n_seq = max(1, b.settings.n_seq)
    heads = b.shape.n_head[il]
    head = layer.q_rows // (3 * heads)
    t = T // n_seq
    slopes, q_decay_in, k_decay_in, diag_decay_in = _lightning_inputs(b)
    s_main, s_extra = build_rs(b)
    g.expand(g.op(b.f32(b.kv.state_r, n_seq), g.view(b.cache), s_main))  # conv state (0 wide)
    g.expand(g.view(b.cache, g.op(0, g.view(b.cache), s_extra)))
    slope_rate = g.op(b.f32(heads), slopes, inplace=(0,))
    qkv_mixed = b.unary(b.mm(layer.q_rows, g.view(x)), b.f32(layer.q_rows, T))  # silu
    q, k, v = g.view(qkv_mixed), g.view(qkv_mixed), g.view(qkv_mixed)
    state = g.expand(g.op(b.f32(b.kv.state_s, n_seq), g.view(b.cache), s_main))
    g.expand(g.view(b.cache, g.op(0, g.view(b.cache), s_extra)))
    kv_old = g.view(state)
    decay = lambda source: b.unary(g.op(source.nbytes, source, inplace=(0,)), source.nbytes)  # noqa: E731
    q_decay = decay(q_decay_in)
    q_s = g.op(b.f32(head, heads, T), q, q_decay)
    qkv_none_diag = g.op(b.f32(head, t, heads, n_seq), kv_old, g.view(q_s))
    qk = g.op(b.f32(t, t, heads, n_seq), g.view(k), g.view(q))
    qk = g.op(qk.nbytes, qk, decay(diag_decay_in), inplace=(0,))
    v_trans = g.op(b.f32(head, heads, T), g.view(v))  # cont(permute)
    qkv_diag = g.op(b.f32(head, t, heads, n_seq), v_trans, qk)
    out = g.expand(g.op(qkv_none_diag.nbytes, qkv_none_diag, qkv_diag, inplace=(0,)))
    block_decay = b.unary(g.op(slope_rate.nbytes, slope_rate, inplace=(0,)), slope_rate.nbytes)  # scale, exp
    kv_old_s = g.op(b.f32(b.kv.state_s, n_seq), kv_old, g.view(block_decay))
    k_after = g.op(b.f32(head, heads, T), k, decay(k_decay_in))
    k_after_trans = g.op(k_after.nbytes, g.view(k_after))  # cont(permute)
    kv_cur = g.op(b.f32(b.kv.state_s, n_seq), k_after_trans, v_trans)
    kv_new = g.op(kv_cur.nbytes, kv_old_s, kv_cur, inplace=(0,))
    g.expand(g.view(b.cache, kv_new, g.view(b.cache)))  # cpy into the state cache
    out = g.op(b.f32(head * heads, T), g.view(out))  # cont(permute)
    out = b.norm(g.view(out), head * heads)
    gate = b.unary(b.mm(layer.gate_rows, g.view(x)), b.f32(layer.gate_rows, T))  # sigmoid
    out = g.op(gate.nbytes, gate, out, inplace=(0, 1))
    return g.view(b.mm(b.shape.n_embd, out))
