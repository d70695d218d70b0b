"""The gated delta net (src/models/qwen3next.cpp / qwen35*.cpp, models.h's delta-net base).
"""

from moetools.arch.registry import profile
from moetools.devicefit.graph.common import build_rs, clear_state


def _gdn_layer(b, il, x, layer):
    """Gated delta net (qwen35moe.cpp / qwen3next.cpp build_layer_attn_linear, delta-net-base.cpp): the
    q/k/v (and z) projections, beta and alpha (the gate: bias, softplus, A in place), the conv states
    gathered (build_rs) and concatenated with the tokens (build_conv_state), the ssm states gathered,
    the conv and silu, l2-normed q and k (rms_norm of a view: new tensors; qwen3next repeats them to the
    value heads), the fused GATED_DELTA_NET op (llama_context turns fused_gdn_ar/ch on: the output rows
    and 1 + n_rs_seq state snapshots in one tensor), its states copied back to the cache, the gated norm
    (z's silu read last) and the output projection. Views are never reused in place, so the residual add
    after the layer takes the stream's memory (the layer's output is a reshape)."""
    g, T = b.g, b.T
    n_seq = max(1, b.settings.n_seq)
    channels, inner, heads = layer.ssm_conv_channels, layer.ssm_inner, layer.ssm_heads
    key = (channels - inner) // 2
    snapshots = 1 + b.settings.rs_seq if profile(b.kv.architecture).rs_rollback else 1
    if layer.ssm_legacy:  # build_qkvz's legacy path: one projection split by contiguous copies and concats
        qkvz = b.mm(layer.ssm_in_rows, x)
        z = g.op(b.f32(inner, T), g.view(qkvz))
        q_flat = g.op(b.f32(key, T), g.view(qkvz))
        k_flat = g.op(b.f32(key, T), g.view(qkvz))
        v_flat = g.op(b.f32(inner, T), g.view(qkvz))
        mixed = g.op(b.f32(channels, T), g.op(b.f32(2 * key, T), q_flat, k_flat), v_flat)
    else:
        mixed = b.mm(channels, x)
        z = b.mm(inner, x)
    if layer.ssm_ba:  # qwen3next: beta and alpha from one projection, each made contiguous
        ba = b.mm(2 * heads, x)
        beta = b.unary(g.op(b.f32(heads, T), g.view(ba)), b.f32(heads, T))  # cont, sigmoid in place
        alpha = g.op(b.f32(heads, T), g.view(ba))  # cont_3d
        alpha = g.op(alpha.nbytes, alpha, b.weights, inplace=(0,))  # + dt bias
    else:
        beta = b.unary(g.view(b.mm(heads, x)), b.f32(heads, T))  # sigmoid of a reshape: a new tensor
        alpha = g.op(b.f32(heads, T), g.view(b.mm(heads, x)), b.weights, inplace=(0,))
    gate = g.op(alpha.nbytes, b.unary(alpha, alpha.nbytes), b.weights, inplace=(0,))  # softplus, * A
    s_main, s_extra = build_rs(b)
    clear_state(b)
    conv_state = g.expand(g.op(b.f32(b.kv.state_r, n_seq), g.view(b.cache), s_main))  # build_rs
    g.expand(g.view(b.cache, g.op(0, g.view(b.cache), s_extra)))  # its extra states (none reserving)
    conv_in = g.op(b.f32(channels, T) + b.f32(b.kv.state_r, n_seq), g.view(conv_state), g.view(mixed))  # concat
    g.expand(g.view(b.cache, g.view(conv_in)))  # the last d_conv-1 columns back to the cache
    clear_state(b)
    state = g.expand(g.op(b.f32(b.kv.state_s, n_seq), g.view(b.cache), s_main))
    g.expand(g.view(b.cache, g.op(0, g.view(b.cache), s_extra)))
    conv = b.unary(g.op(b.f32(channels, T), conv_in, b.weights), b.f32(channels, T))  # ssm_conv, silu
    q = b.unary(g.op(b.f32(key, T), g.view(conv), inplace=(0,)), b.f32(key, T))  # l2 norm: rms_norm, scale
    k = b.unary(g.op(b.f32(key, T), g.view(conv), inplace=(0,)), b.f32(key, T))
    if layer.ssm_groups != heads and profile(b.kv.architecture).gdn_repeat_groups:  # repeat to the value heads
        q = g.view(g.op(b.f32(key // layer.ssm_groups * heads, T), g.view(q)))
        k = g.view(g.op(b.f32(key // layer.ssm_groups * heads, T), g.view(k)))
    out = g.op(b.f32(inner, T) + snapshots * b.f32(b.kv.state_s, n_seq), q, k, g.view(conv), g.view(gate),
               g.view(beta), g.view(state))
    g.expand(g.view(b.cache, g.view(out)))  # the new state(s) back to the cache
    y = b.norm(g.view(out), inner)
    y = g.op(y.nbytes, y, b.unary(g.view(z), z.nbytes), inplace=(0, 1))  # * silu(z)
    return g.view(b.mm(b.shape.n_embd, g.view(y)))
