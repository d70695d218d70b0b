"""Mamba and Mamba-2 layers (models.h's llm_graph_context_mamba: build_mamba_layer /
build_mamba2_layer; src/models/mamba.cpp, jamba.cpp, nemotron-h.cpp, falcon-h1.cpp, granite-hybrid.cpp).
"""

from moetools.devicefit.graph.common import build_rs, clear_state

# LayerShape.mixer of the two Mamba layer kinds (graph/shape.py picks them from the layer's tensors)
MAMBA1 = "mamba"
MAMBA2 = "mamba2"


def _mamba_layer(b, il, x, layer):
    """llm_build_mamba_base::build_mamba_layer (Mamba-1, jamba): conv states gathered, x/z projection,
    conv input, conv with bias and silu, the x projection to dt/B/C (RMS-normed when the layer has the
    norms, else dt made contiguous), dt's projection and bias, the scan (outputs and new state), y +
    x*D (the mul in place of the conv output, which is not a view here), z made contiguous, the gated
    output and the output projection."""
    g, T = b.g, b.T
    n_seq = max(1, b.settings.n_seq)
    inner, rank, state = layer.ssm_inner, layer.ssm_dt_rank, layer.ssm_state
    s_main, s_extra = build_rs(b)
    clear_state(b)
    conv_state = g.expand(g.op(b.f32(b.kv.state_r, n_seq), g.view(b.cache), s_main))
    g.expand(g.view(b.cache, g.op(0, g.view(b.cache), s_extra)))
    xz = b.mm(layer.ssm_in_rows, g.view(x))
    conv_in = g.op(b.f32(inner, T) + b.f32(b.kv.state_r, n_seq), g.view(conv_state), g.view(xz))
    g.expand(g.view(b.cache, g.view(conv_in)))
    conv = g.op(b.f32(inner, T), conv_in, b.weights)
    conv = g.op(conv.nbytes, conv, b.weights, inplace=(0,))
    conv = b.unary(conv, conv.nbytes)
    x_db = b.mm(layer.ssm_x_rows, conv)
    if layer.ssm_norm:
        dt = b.norm(g.view(x_db), rank)
        b_in = b.norm(g.view(x_db), state)
        c_in = b.norm(g.view(x_db), state)
    else:
        dt = g.op(b.f32(rank, T), g.view(x_db))
        b_in = c_in = g.view(x_db)
    dt = b.mm(inner, dt)
    dt = g.op(dt.nbytes, dt, b.weights, inplace=(0,))
    clear_state(b)
    scan = g.expand(g.op(b.f32(inner, T) + b.f32(b.kv.state_s, n_seq), g.view(b.cache), g.view(conv), dt,
                         b.weights, b_in, c_in, s_main))
    g.expand(g.view(b.cache, g.op(0, g.view(b.cache), s_extra)))
    g.expand(g.view(b.cache, g.view(scan)))
    x_d = g.op(b.f32(inner, T), conv, b.weights, inplace=(0,))
    y = g.op(b.f32(inner, T), g.view(scan), x_d, inplace=(0, 1))
    z = g.op(b.f32(inner, T), g.view(xz))
    y = g.op(b.f32(inner, T), z, y)
    return b.mm(b.shape.n_embd, y)


def _mamba2_layer(b, il, x, layer):
    """llm_build_mamba_base::build_mamba2_layer: the conv states gathered from the cache (get_rows),
    the input projection, the conv input (states + tokens, concatenated), the conv and its bias/silu in
    place, dt made contiguous, the scan (outputs and new states in one tensor, reading the ssm states
    straight from the cache), y + x*D, z made contiguous, the gated output, the grouped norm and the
    output projection. A new tensor wherever the source is a view (ggml-alloc never reuses a view)."""
    g, T = b.g, b.T
    n_seq = max(1, b.settings.n_seq)
    channels, inner = layer.ssm_conv_channels, layer.ssm_inner
    s_main, s_extra = build_rs(b)
    clear_state(b)
    conv_state = g.expand(g.op(b.f32(b.kv.state_r, n_seq), g.view(b.cache), s_main))  # get_rows
    g.expand(g.view(b.cache, g.op(0, g.view(b.cache), s_extra)))  # the extra states: none when reserving
    zxbcdt = b.mm(layer.ssm_in_rows, x)
    conv_in = g.op(b.f32(channels, T) + b.f32(b.kv.state_r, n_seq), g.view(conv_state), g.view(zxbcdt))  # concat
    g.expand(g.view(b.cache, g.view(conv_in)))  # the last d_conv-1 columns back to the cache
    conv = g.op(b.f32(channels, T), conv_in, b.weights)  # ssm_conv
    conv = g.op(conv.nbytes, conv, b.weights, inplace=(0,))  # bias
    conv = b.unary(conv, conv.nbytes)  # silu
    dt = g.op(b.f32(layer.ssm_heads, T), g.view(zxbcdt))  # cont
    dt = g.op(dt.nbytes, dt, b.weights, inplace=(0,))
    clear_state(b)
    scan = g.expand(g.op(b.f32(inner, T) + b.f32(b.kv.state_s, n_seq), g.view(b.cache), g.view(conv), dt,
                         b.weights, g.view(conv), g.view(conv), s_main))
    g.expand(g.view(b.cache, g.op(0, g.view(b.cache), s_extra)))
    g.expand(g.view(b.cache, g.view(scan)))  # the new states back to the cache
    x_d = g.op(b.f32(inner, T), g.view(conv), b.weights)  # x * D
    y = g.op(b.f32(inner, T), g.view(scan), x_d, inplace=(0, 1))
    z = g.op(b.f32(inner, T), g.view(zxbcdt))  # cont
    y = g.op(b.f32(inner, T), z, y)  # swiglu_split: a new tensor
    if layer.ssm_norm:
        y = b.norm(g.view(y), inner)
    return b.mm(b.shape.n_embd, g.view(y))
