"""The short-convolution mixer (src/models/lfm2.cpp).
"""

from moetools.devicefit.graph.common import build_rs


def _shortconv_layer(b, il, x, layer):
    """LFM2's short-convolution block (src/models/lfm2.cpp build_shortconv_block): the conv state
    gathered first, in_proj to b/c/x, b*x (a new tensor: both are views), the state and b*x
    concatenated, written back, the conv, c*conv in place of the conv and out_proj."""
    g, T, n_embd = b.g, b.T, b.shape.n_embd
    n_seq = max(1, b.settings.n_seq)
    s_main, s_extra = build_rs(b)
    conv_state = g.expand(g.op(b.f32(b.kv.state_r, n_seq), g.view(b.cache), s_main))
    g.expand(g.view(b.cache, g.op(0, g.view(b.cache), s_extra)))
    bcx = b.mm(3 * n_embd, g.view(x))
    bx = g.op(b.f32(n_embd, T), g.view(bcx), g.view(bcx))
    conv_in = g.op(b.f32(n_embd, T) + b.f32(b.kv.state_r, n_seq), g.view(conv_state), g.view(bx))
    g.expand(g.view(b.cache, g.view(conv_in)))
    conv = g.op(b.f32(n_embd, T), conv_in, b.weights)
    y = g.op(conv.nbytes, g.view(bcx), conv, inplace=(0, 1))
    return b.mm(n_embd, y)
