"""Gemma 4's assistant (draft) model over the target's KV cache (src/models/gemma4-assistant.cpp).
"""

from moetools.devicefit.ggml.allocator import HOST, I32_BYTES
from moetools.devicefit.graph.common import build_ffn, build_attn_mha
from moetools.devicefit.graph.context import build_attn_inp


def _build_assistant(b, layers, output, n_out):
    """gemma4-assistant.cpp's graph over the target's KV: the target's token embedding (get_rows on the
    host, scaled) beside the target's hidden state (an input, embedding_length_out wide), concatenated
    and projected (nextn.pre_projection); per block a query only (normed, roped) attending to the borrowed
    cache, the post-attention norm, the residual, the normed GeGLU MLP, its post norm, the residual and the
    output scale (the last block on the output rows); the output norm, the logits and
    nextn.post_projection (both outputs)."""
    g, T, shape, kv = b.g, b.T, b.shape, b.kv
    n_embd, n_target = shape.n_embd, shape.n_embd_target
    tokens_in = g.input(I32_BYTES * T)
    hidden = g.input(b.f32(n_target, T))
    if b.homes is not None:
        b.move(HOST, -1)
    lookup = g.op(b.f32(n_target, T), b.weights, tokens_in)  # the target's token_embd (a host weight)
    lookup.host = True
    lookup.offloadable = False
    x = g.op(lookup.nbytes, lookup, inplace=(0,))  # scale by sqrt(n_embd_target)
    xh = g.op(b.f32(2 * n_target, T), x, hidden)  # concat
    if b.homes is not None:
        b.move(b.homes.layer_device[0], 0)  # pre_projection is the first block's tensor
    cur = b.mm(n_embd, xh)
    kinds = [kind for kind in ("full", "swa") if kind in b.cells]
    build_attn_inp(b, kinds)
    b.pos = g.input(I32_BYTES * T * shape.pos_per_token)
    out_ids = g.input(I32_BYTES * n_out)
    last = len(shape.layers) - 1
    layer_set = set(range(len(shape.layers))) if layers is None else set(layers)
    for il, layer in enumerate(shape.layers):
        if il not in layer_set:
            continue
        if b.homes is not None:
            b.move(b.homes.layer_device[il], il)
        kind = "swa" if kv.is_swa[il] else "full"
        n_head, width = shape.n_head[il], kv.k_width[il]
        residual = cur
        x = b.norm(cur, n_embd)
        q = b.norm(g.view(b.mm(layer.q_rows or n_head * width, x)), n_head * width)
        q = g.op(q.nbytes, q, b.pos, inplace=(0,))  # rope
        if b.k_rot is not None:
            q = g.view(g.op(q.nbytes, b.k_rot, g.view(q)))
        g.expand(q)
        out = build_attn_mha(b, il, q, width, kind, n_head, width, kv.v_width[il])
        if b.v_rot is not None:
            out = g.view(g.op(b.f32(n_head * kv.v_width[il], T), b.v_rot, g.view(out)))
        out = b.mm(n_embd, out)
        if il == last:
            out = g.op(b.f32(n_embd, n_out), out, out_ids)
            residual = g.op(b.f32(n_embd, n_out), residual, out_ids)
            T = b.T = n_out
        out = b.norm(out, n_embd)  # attn_post_norm
        attn_out = g.op(b.f32(n_embd, T), out, residual, inplace=(0, 1))
        ffn = build_ffn(b, b.norm(attn_out, n_embd), layer.n_ff)
        il_saved, b.il = b.il, -1  # ffn_post_norm is built with il = -1
        ffn = b.norm(ffn, n_embd)
        b.il = il_saved
        cur = g.op(b.f32(n_embd, T), ffn, attn_out, inplace=(0, 1))
        cur = g.op(cur.nbytes, cur, b.weights, inplace=(0,))  # * layer_output_scale
        g.boundaries.append(cur)
    if not output:
        g.expand(cur)
        return g
    if b.homes is not None:
        b.move(b.homes.layer_device[-1], -1)
    cur = b.norm(cur, n_embd)
    logits = b.mm(shape.n_vocab, cur)
    logits.is_output = True
    h_next = b.mm(n_target, cur)
    h_next.is_output = True
    g.expand(logits)
    g.expand(h_next)
    return g
