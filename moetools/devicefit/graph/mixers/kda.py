"""Kimi delta attention (src/models/kimi-linear.cpp, models.h's delta-net base) and bailing's KDA variant
(src/models/bailingmoe3.cpp): projections, short convolutions, the chunked scan's outputs.
"""

from moetools.arch.registry import profile
from moetools.devicefit.graph.common import build_rs


def _kda_conv_windows(b, x, d_inner, copies):
    """A KDA block's conv states gathered at once (build_rs), then per q/k/v a projection, its concat
    with its state and `copies` copies of the window back to the cache: the three concats."""
    g, T = b.g, b.T
    n_seq = max(1, b.settings.n_seq)
    s_main, s_extra = build_rs(b)
    conv_states = g.expand(g.op(b.f32(b.kv.state_r, n_seq), g.view(b.cache), s_main))
    g.expand(g.view(b.cache, g.op(0, g.view(b.cache), s_extra)))
    conv_ins = []
    for _ in range(3):
        proj = b.mm(d_inner, x)
        conv_in = g.op(b.f32(d_inner, T) + b.f32(b.kv.state_r // 3, n_seq), g.view(conv_states), g.view(proj))
        for _ in range(copies):
            g.expand(g.view(b.cache, g.view(conv_in)))  # the window back to the cache
        conv_ins.append(conv_in)
    return conv_ins


def _kda_layer(b, il, x, layer):
    """Kimi delta attention (kimi-k3.cpp build_kda_layer, kimi-linear.cpp): the three conv states
    gathered at once (build_rs), per q/k/v a projection, the concat with its state and the copy back
    (one per rollback snapshot), the ssm states gathered; each conv, silu (of a reshape: a new tensor),
    q and k l2-normed; the decay gate f_b(f_a x) + dt (softplus, times A: a new tensor after the
    reshape), beta's sigmoid, the fused GATED_DELTA_NET (its output rows and state snapshots), the
    states copied back, the output made contiguous, normed, times sigmoid of the output gate (ssm_g, or
    kimi-linear's g_b(g_a x)), made contiguous again and projected."""
    g, T = b.g, b.T
    n_seq = max(1, b.settings.n_seq)
    d_inner = layer.q_rows
    entry = profile(b.kv.architecture)
    snapshots = 1 + b.settings.rs_seq if entry.rs_rollback else 1
    s_main, s_extra = build_rs(b)
    conv_ins = _kda_conv_windows(b, x, d_inner, snapshots if entry.kda_conv_snapshots else 1)
    gate = g.op(b.f32(d_inner, T), b.weights, b.mm(layer.ssm_dt_rank or d_inner, x))  # f_b(f_a x)
    gate = b.unary(g.op(gate.nbytes, gate, b.weights, inplace=(0,)), gate.nbytes)  # + dt bias, softplus
    gate = g.op(gate.nbytes, g.view(gate), b.weights, inplace=(0,))  # * A (of a reshape: a new tensor)
    gate = b.unary(b.unary(gate, gate.nbytes), gate.nbytes)  # K3's lower-bound path: scale, sigmoid, scale
    beta = b.unary(g.view(b.mm(b.shape.n_head[il] or 1, x)), b.f32(b.shape.n_head[il] or 1, T))
    state = g.expand(g.op(b.f32(b.kv.state_s, n_seq), g.view(b.cache), s_main))
    g.expand(g.view(b.cache, g.op(0, g.view(b.cache), s_extra)))
    qkv = []
    for index, conv_in in enumerate(conv_ins):
        conv = b.unary(g.view(g.op(b.f32(d_inner, T), conv_in, b.weights)), b.f32(d_inner, T))  # ssm_conv, silu
        if index < 2:  # l2 norm: rms_norm of a reshape, scale in place
            conv = b.unary(g.op(b.f32(d_inner, T), g.view(conv), inplace=(0,)), b.f32(d_inner, T))
        qkv.append(conv)
    out = g.op(b.f32(d_inner, T) + snapshots * b.f32(b.kv.state_s, n_seq), qkv[0], qkv[1], g.view(qkv[2]),
               g.view(gate), g.view(beta), g.view(state))
    g.expand(g.view(b.cache, g.view(out)))  # the new state(s) back to the cache
    y = g.op(b.f32(d_inner, T), g.view(out))  # cont
    y = b.norm(g.view(y), d_inner)
    out_gate = b.mm(d_inner, b.mm(layer.ssm_inner, g.view(x))) if layer.ssm_inner else b.mm(d_inner, g.view(x))
    y = g.op(y.nbytes, y, b.unary(g.view(out_gate), out_gate.nbytes), inplace=(0, 1))  # * sigmoid(g2)
    y = g.op(b.f32(d_inner, T), y)  # cont_2d
    return b.mm(b.shape.n_embd, y)


def _bailing_kda_layer(b, il, x, layer):
    """bailingmoe3's KDA block (bailingmoe3.cpp): the conv states gathered (build_rs), then per q/k/v its
    projection, the concat with its state and the copies back (one per written rollback snapshot); only
    those are expanded, so the rest joins the graph when the delta net's state copy does: per q, k, v the
    conv and silu (of a reshape: a new tensor), q and k l2-normed (rms_norm of a view, scale in place),
    the decay gate (f_a x + dt bias, times A, sigmoid, scale), beta's sigmoid, the fused GATED_DELTA_NET
    (output rows and state snapshots); then the output contiguous, RMS-normed, times sigmoid of the
    output gate (g_a x), contiguous again and projected."""
    g, T = b.g, b.T
    n_seq = max(1, b.settings.n_seq)
    d_inner = layer.q_rows
    n_head = b.shape.n_head[il] or 1
    t = T // n_seq
    snapshots = 1 + b.settings.rs_seq
    s_main, s_extra = build_rs(b)
    conv_ins = _kda_conv_windows(b, x, d_inner, min(t, snapshots))
    state = g.expand(g.op(b.f32(b.kv.state_s, n_seq), g.view(b.cache), s_main))
    g.expand(g.view(b.cache, g.op(0, g.view(b.cache), s_extra)))
    qkv = []
    for index, conv_in in enumerate(conv_ins):
        conv = b.unary(g.view(g.op(b.f32(d_inner, T), conv_in, b.weights)), b.f32(d_inner, T))  # ssm_conv, silu
        if index < 2:  # build_gdn_l2_norm: rms_norm of a reshape (a new tensor), scale in place
            conv = b.unary(g.op(b.f32(d_inner, T), g.view(conv), inplace=(0,)), b.f32(d_inner, T))
        qkv.append(conv)
    gate = g.op(b.f32(d_inner, T), b.mm(d_inner, x), b.weights, inplace=(0,))  # f_a x + dt bias
    gate = g.op(gate.nbytes, g.view(gate), b.weights, inplace=(0,))  # * A (of a reshape: a new tensor)
    gate = b.unary(b.unary(gate, gate.nbytes), gate.nbytes)  # sigmoid, scale by the lower bound
    beta = b.unary(g.view(b.mm(n_head, x)), b.f32(n_head, T))  # sigmoid of a reshape: a new tensor
    out = g.op(b.f32(d_inner, T) + snapshots * b.f32(b.kv.state_s, n_seq), g.view(qkv[0]), g.view(qkv[1]),
               g.view(qkv[2]), g.view(gate), beta, g.view(state))
    for _ in range(min(t, snapshots) if snapshots > 1 else 1):
        g.expand(g.view(b.cache, g.view(out), g.view(b.cache)))  # the new state(s) back to the cache
    y = g.op(b.f32(d_inner, T), g.view(out))  # cont
    y = b.norm(g.view(y), d_inner)
    out_gate = b.mm(d_inner, x)
    y = g.op(y.nbytes, y, b.unary(g.view(out_gate), out_gate.nbytes), inplace=(0, 1))  # * sigmoid(g_a x)
    y = g.op(b.f32(d_inner, T), g.view(y))  # cont_2d
    return b.mm(b.shape.n_embd, y)
