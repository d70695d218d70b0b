"""cohere2moe's parallel block (src/models/cohere2moe.cpp): attention and FFN side by side from one norm;
and its MTP graph (graph_mtp).
"""

from moetools.devicefit.graph.common import build_ffn, build_attn, build_moe_ffn
from moetools.devicefit.graph.nextn import _mtp_head, _mtp_head_norm, _mtp_prologue


def _cohere2moe_block(b, il, cur, layer, rope):
    """cohere2moe.cpp's block: one norm feeds the attention (roped only where `rope`: its sliding-window
    and leading dense layers; the MTP block always) and the FFN — the routed experts beside the shared
    expert, their sum halved, or the dense FFN of a leading block; then the input and the attention
    output are added to it."""
    g, T, n_embd = b.g, b.T, b.shape.n_embd
    x = b.norm(cur, n_embd)
    attn = build_attn(b, il, x, layer, rope=rope)
    if layer.ffn == "moe":
        out = build_moe_ffn(b, il, x, layer)  # + the shared expert (build_ffn of the same norm)
        if layer.n_ff_shexp:
            out = g.op(out.nbytes, out, inplace=(0,))  # ggml_scale 0.5
    else:
        out = build_ffn(b, x, layer.n_ff, layer.ffn_gated)
    out = g.op(b.f32(n_embd, T), out, cur, inplace=(0, 1))
    return g.op(b.f32(n_embd, T), out, attn, inplace=(0, 1))


# What the MTP load needs of the NextN block beyond eh_proj (see mimo2.MTP_NEEDS): cohere2moe.cpp's
# load_block_mtp requires the experts.
MTP_NEEDS = ((lambda layer: layer.ffn == "moe", "routed experts (ffn_gate_inp, *_exps)",
              "fails to load the model for MTP: tensor 'blk.{il}.ffn_gate_inp.weight' not found"),)


def _build_mtp_cohere2moe(b, graph_shape, n_out):
    """cohere2moe.cpp graph_mtp: after the fusion one norm feeds both the (always roped) attention and
    the MoE beside its shared expert (their sum halved); the block's input and the attention output are
    added to it, then the shared head norm of every row (t_h_nextn), the output rows, the scaled logits."""
    g, T, n_embd = b.g, b.T, graph_shape.n_embd
    il = min(graph_shape.mtp_layers)
    layer = graph_shape.mtp_layers[il]
    cur, out_ids = _mtp_prologue(b, graph_shape, il, n_out, [k for k in ("full", "swa") if k in b.cells])
    cur = _mtp_head_norm(b, layer, _cohere2moe_block(b, il, cur, layer, rope=True))
    cur.is_output = True  # t_h_nextn
    cur = g.op(b.f32(n_embd, n_out), cur, out_ids)
    b.T = n_out
    return _mtp_head(b, graph_shape, cur, n_out, scale=True)
