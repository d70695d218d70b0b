"""MiMo-V2's MTP draft graph (src/models/mimo2.cpp, graph_mtp).
"""

from moetools.devicefit.graph.common import build_ffn, build_attn
from moetools.devicefit.graph.nextn import _mtp_head, _mtp_head_norm, _mtp_prologue


# What graph_mtp needs of the NextN block beyond eh_proj: ((LayerShape test, what is missing, what llama.cpp
# 0c1e57098 does without it), ...): mimo2.cpp's graph_mtp asserts (GGML_ASSERT: the process aborts).
MTP_NEEDS = ((lambda layer: layer.fused_qkv, "a fused attn_qkv",
              'aborts building the MTP graph: GGML_ASSERT "MIMO2 MTP requires fused attn_qkv"'),
             (lambda layer: layer.ffn == "dense" and layer.ffn_gated, "a dense gated FFN (ffn_gate/up/down)",
              'aborts building the MTP graph: GGML_ASSERT "MIMO2 MTP requires dense FFN tensors"'))


def _build_mtp_mimo2(b, graph_shape, n_out):
    """mimo2.cpp graph_mtp: after the fusion a sliding-window (or full) attention block from one fused
    qkv projection with sinks, its output scaled by the value scale, a dense FFN; the output rows are
    taken before the head norm (t_h_nextn is the un-normed output rows), then the LM head."""
    g, T, n_embd = b.g, b.T, graph_shape.n_embd
    il = min(graph_shape.mtp_layers)
    layer = graph_shape.mtp_layers[il]
    cur, out_ids = _mtp_prologue(b, graph_shape, il, n_out, [k for k in ("full", "swa") if k in b.cells])
    residual = cur
    mixed = build_attn(b, il, b.norm(cur, n_embd), layer)
    # ggml_scale by the value scale (only with attention.value_scale != 1; in place, so no bytes either way)
    mixed = g.op(mixed.nbytes, mixed, inplace=(0,))
    cur = g.op(b.f32(n_embd, T), mixed, residual, inplace=(0, 1))
    ffn_in = cur
    out = build_ffn(b, b.norm(cur, n_embd), layer.n_ff, layer.ffn_gated)
    cur = g.op(b.f32(n_embd, T), out, ffn_in, inplace=(0, 1))
    cur = g.op(b.f32(n_embd, n_out), cur, out_ids)
    cur.is_output = True  # t_h_nextn
    b.T = n_out
    return _mtp_head(b, graph_shape, _mtp_head_norm(b, layer, cur), n_out)
