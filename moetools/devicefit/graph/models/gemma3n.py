"""gemma3n's whole-model graph (src/models/gemma3n.cpp): AltUp streams, laurel, per-layer inputs and
the gaussian top-k sparsity of its first layers.
"""

from moetools.devicefit.ggml.allocator import I32_BYTES
from moetools.devicefit.graph.common import build_attn_mha, _store
from moetools.errors import GGUFError


def read_gemma3n_shape(model, kvshape, shape):
    """gemma3n's AltUp stream count, per-layer input width and LAuReL rank (the profile's shape_reader),
    from the tensors the loader sizes with them (llama_hparams defaults 4, 256 and 64, not keys).
    Raises GGUFError."""
    altup = model.tensor_by_name.get("altup_proj.weight")
    norm = model.tensor_by_name.get("per_layer_proj_norm.weight")
    laurel = model.tensor_by_name.get("blk.0.laurel_l.weight")
    laurel = laurel.shape[1] if laurel is not None and len(laurel.shape) > 1 else 0
    if altup is None or len(altup.shape) < 3 or norm is None or not laurel:
        raise GGUFError(model.path, "gemma3n needs altup_proj.weight, per_layer_proj_norm.weight and "
                                    "blk.0.laurel_l.weight to size its compute buffer")
    shape.altup, shape.altup_width, shape.laurel_rank = altup.shape[2] + 1, norm.shape[0], laurel


# --- gemma3n (src/models/gemma3n.cpp) --------------------------------------------------------

GEMMA3N_SPARSE_LAYERS = 10  # llama_model_gemma3n::graph n_layer_sparsity: gaussian top-k before the gelu


def _g3n_magnitude(b, x, rows):
    """calc_magnitude: sqrt(sum_rows(sqr(x))), one f32 per row."""
    return b.unary(b.g.op(b.f32(rows), b.unary(x, x.nbytes)), b.f32(rows))


def _g3n_router(b, x):
    """altup_compute_router_modalities: weighted rms norm, scale, the router projection, tanh."""
    cur = b.norm(x, b.shape.n_embd)
    cur = b.unary(cur, cur.nbytes)
    modalities = b.mm(b.shape.altup, cur)
    return b.unary(modalities, modalities.nbytes)


def _g3n_gaussian_topk(b, x):
    """gaussian_topk: relu(x - (mean + std_mul * std)), mean and std over each row."""
    g, T = b.g, b.T
    mean = g.op(b.f32(1, T), x)
    centred = g.op(x.nbytes, x, mean, inplace=(0,))
    std = b.unary(b.unary(g.op(b.f32(1, T), b.unary(centred, centred.nbytes)), b.f32(1, T)), b.f32(1, T))
    cutoff = g.op(b.f32(1, T), mean, b.unary(std, b.f32(1, T)), inplace=(0, 1))
    return b.unary(g.op(x.nbytes, x, cutoff, inplace=(0,)), x.nbytes)


def _g3n_attention(b, il, x, layer):
    """A gemma3n block's attention: q and k rms-normed (weighted) and roped, v rms-normed without a
    weight; a layer past n_layer_kv_from_start projects only its query and reads the cache of the
    earlier layer of its kind (build_attn with no k/v: nothing stored)."""
    g, T, kv = b.g, b.T, b.kv
    kind = "swa" if kv.is_swa[il] else "full"
    n_head, hkv, width, v_width = b.shape.n_head[il], kv.head_count_kv[il], kv.k_width[il], kv.v_width[il]
    q_bytes, k_bytes, v_bytes = b.f32(n_head * width, T), b.f32(hkv * width, T), b.f32(hkv * v_width, T)
    k_rot, v_rot = b.rot_swa if kind == "swa" else (b.k_rot, b.v_rot)
    q = b.mm(n_head * width, x)
    k = v = None
    if kv.has_kv[il]:
        k = b.mm(hkv * width, x)
        v = b.mm(hkv * v_width, x)
    q = g.op(q_bytes, b.norm(g.view(q), n_head * width), b.pos, inplace=(0,))
    if k is not None:
        k = g.op(k_bytes, b.norm(g.view(k), hkv * width), b.pos, inplace=(0,))
        v = b.norm(g.view(v), hkv * v_width, weight=False)
    if k_rot is not None:
        q = g.view(g.op(q_bytes, k_rot, g.view(q)))
        if k is not None:
            k = g.view(g.op(k_bytes, k_rot, g.view(k)))
    if v_rot is not None and v is not None:
        v = g.view(g.op(v_bytes, v_rot, g.view(v)))
    for tensor in (q, k, v):
        if tensor is not None:
            g.expand(tensor)
    if k is not None:
        _store(b, kind, k, v, False, v_bytes)
    cur = build_attn_mha(b, il, q, width, kind, n_head, width, v_width)
    if v_rot is not None:
        cur = g.view(g.op(b.f32(n_head * v_width, T), v_rot, g.view(cur)))
    return b.mm(b.shape.n_embd, cur)


def _g3n_block(b, il, cur, layer, per_layer):
    """One gemma3n block over the AltUp streams `cur` [n_embd, T, n_altup]: predict, LAuReL beside the
    attention, the (sparse) gelu FFN, correct, and the per-layer input gated into streams 1..n-1."""
    g, T, n_embd, n_altup = b.g, b.T, b.shape.n_embd, b.shape.altup
    streams = b.f32(n_embd, T, n_altup)
    # altup_predict
    modalities = _g3n_router(b, g.view(cur))
    coefs = g.view(b.mm(n_altup * n_altup, modalities))
    permuted = g.op(streams, g.view(cur))  # cont(permute)
    predictions = g.op(streams, g.view(g.op(streams, permuted, coefs)))  # mul_mat, cont(permute)
    predictions = g.op(streams, predictions, cur, inplace=(0, 1))
    active = g.view(predictions)
    x = b.norm(active, n_embd)
    # laurel
    laurel = b.norm(b.mm(n_embd, b.mm(b.shape.laurel_rank, x)), n_embd)
    laurel = g.op(laurel.nbytes, laurel, x, inplace=(0, 1))
    attn = b.norm(_g3n_attention(b, il, x, layer), n_embd)
    attn = g.op(attn.nbytes, attn, active, inplace=(0,))
    attn_laurel = b.unary(g.op(attn.nbytes, attn, laurel, inplace=(0, 1)), attn.nbytes)
    y = b.norm(attn_laurel, n_embd)
    up = b.mm(layer.n_ff, y)
    gate = b.mm(layer.n_ff, y)
    if il < GEMMA3N_SPARSE_LAYERS:
        gate = _g3n_gaussian_topk(b, gate)
    gate = b.unary(gate, gate.nbytes)
    ffn = b.mm(n_embd, g.op(up.nbytes, up, gate, inplace=(0, 1)))
    il_saved, b.il = b.il, -1  # ffn_post_norm is built with il = -1 (never pinned)
    ffn = b.norm(ffn, n_embd)
    b.il = il_saved
    gated = g.op(ffn.nbytes, ffn, attn_laurel, inplace=(0, 1))
    # altup_correct
    modalities = _g3n_router(b, gated)
    innovation = g.op(gated.nbytes, gated, g.view(predictions), inplace=(0,))
    innovation = g.op(streams, innovation)  # repeat_4d
    coefs = b.mm(n_altup, modalities)
    coefs = g.op(coefs.nbytes, g.view(b.unary(coefs, coefs.nbytes)))  # scale_bias, cont_3d(transpose)
    corrected = g.op(streams, g.op(streams, innovation, coefs, inplace=(0,)), predictions, inplace=(0, 1))
    # the per-layer input, gated by the corrected active stream
    first = g.op(b.f32(n_embd, T), g.view(corrected), b.weights)
    first = b.mm(b.shape.altup_width, first)
    first = b.unary(first, first.nbytes)
    first = g.op(first.nbytes, first, g.view(per_layer), inplace=(0,))
    first = b.norm(b.mm(n_embd, first), n_embd)
    rest = g.op(b.f32(n_embd, T, n_altup - 1), g.view(corrected), first)
    return g.op(streams, g.view(corrected), rest)  # concat


def _build_gemma3n(b, graph_shape, layer_set, output, out_ids, n_out, lookup, first_device):
    """gemma3n's graph (llama_model_gemma3n::graph): the scaled embedding projected to n_altup streams,
    the per-layer inputs (their own token lookup plus a projection of the embedding, [altup_width, T,
    n_layer], alive to the last block), the blocks, the streams merged back, the output rows and the
    soft-capped head."""
    g, T, n_embd, n_altup, n_layer = b.g, b.T, graph_shape.n_embd, graph_shape.altup, len(graph_shape.layers)
    width = graph_shape.altup_width
    homes = b.homes
    inp = b.unary(lookup, lookup.nbytes)  # scale by sqrt(n_embd)
    tokens = g.input(I32_BYTES * T)
    rows = g.op(b.f32(width * n_layer, T), b.weights, tokens)  # per_layer_token_embd: an input-layer weight
    rows.host = True
    rows.offloadable = False
    selected = g.expand(g.op(rows.nbytes, g.view(rows)))  # scale of the reshape
    if homes is not None:
        b.move(first_device, 0)  # per_layer_model_proj / per_layer_proj_norm are block 0's
    proj = b.mm(width * n_layer, inp)
    proj = b.unary(proj, proj.nbytes)
    proj = b.norm(g.view(proj), width * n_layer)
    proj = b.unary(g.op(proj.nbytes, proj, selected, inplace=(0, 1)), proj.nbytes)
    per_layer = g.op(proj.nbytes, g.view(proj))  # cont(permute): [altup_width, T, n_layer]
    if homes is not None:
        b.move(homes.layer_device[-1], -1)  # altup_proj / altup_unembd_proj are output-layer weights
    out_w = b.weights
    added_bytes = b.f32(n_embd, T, n_altup - 1)
    target = _g3n_magnitude(b, inp, T)
    added = g.op(added_bytes, out_w, g.op(added_bytes, inp))  # mul_mat(altup_proj, repeat_4d)
    magnitude = _g3n_magnitude(b, added, T * (n_altup - 1))
    added = g.op(added_bytes, g.op(added_bytes, added, target, inplace=(0,)), magnitude, inplace=(0,))
    cur = g.op(b.f32(n_embd, T, n_altup), inp, added)  # concat
    for il, layer in enumerate(graph_shape.layers):
        if il not in layer_set:
            continue
        if homes is not None:
            b.move(homes.layer_device[il], il)
        cur = _g3n_block(b, il, cur, layer, per_layer)
        g.boundaries.append(cur)
    if not output:
        g.expand(cur)
        return g
    if homes is not None:
        b.move(homes.layer_device[-1], -1)
    target = _g3n_magnitude(b, g.view(cur), T)
    unembd = g.op(added_bytes, b.weights, g.view(cur))
    magnitude = _g3n_magnitude(b, unembd, T * (n_altup - 1))
    unembd = g.op(added_bytes, g.op(added_bytes, unembd, target, inplace=(0,)), magnitude, inplace=(0,))
    merged = g.view(cur)
    for _ in range(n_altup - 1):
        merged = g.op(b.f32(n_embd, T), merged, g.view(unembd), inplace=(0,))
    merged = b.unary(merged, merged.nbytes)
    cur = g.op(b.f32(n_embd, n_out), merged, out_ids)
    T = b.T = n_out
    cur = b.norm(cur, n_embd)
    cur.is_output = True  # t_embd
    logits = b.mm(graph_shape.n_vocab, cur)
    for _ in range(3):  # the final soft-capping: scale, tanh, scale (in place)
        logits = b.unary(logits, logits.nbytes)
    logits.is_output = True
    g.expand(logits)
    return g
