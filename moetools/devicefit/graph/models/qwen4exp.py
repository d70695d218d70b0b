"""Qwen4-Exp's whole-model graph (src/models/qwen4exp.cpp, llama_memory_hybrid_idx): hyper-connection
mixes, QSA attention, per-layer embeddings.
"""

from moetools.devicefit.ggml.allocator import F32_BYTES, I32_BYTES, I64_BYTES, _Tensor
from moetools.devicefit.graph.common import build_attn, build_moe_ffn, build_rs
from moetools.devicefit.graph.context import build_attn_inp
from moetools.devicefit.graph.mixers.gdn import _gdn_layer
from moetools.gguf.constants import tensor_nbytes


def read_qwen4exp_shape(model, kvshape, shape):
    """qwen4exp.cpp's widths (the profile's shape_reader): low-rank hyper-connections, QSA over the
    attention layers, and the PLE module."""
    need = "Qwen4-Exp's compute"
    ratios = model.layer_values("{arch}.attention.compress_ratios", 0)
    # per block: its attention layer's QSA block size (0: a recurrent layer, or dense attention)
    ratios = tuple(0 if il >= kvshape.trunk_layers or kvshape.is_recurrent[il] else ratios[il] or 0
                   for il in range(kvshape.block_count))
    shape.dsv4 = {"hc": model.get_int("{arch}.hyper_connection.count", None, required_for=need),
                  "rank": model.get_int("{arch}.hyper_connection.low_rank", None, required_for=need),
                  "ratios": ratios}
    if any(kvshape.ple_layers):  # the PLE module (kv._ple_module checked its layer and kernel)
        ple = kvshape.ple_layers.index(True)
        ngram = model.get_int("{arch}.ple.ngram_size", None, required_for=need)
        heads = (ngram - 1) * model.get_int("{arch}.ple.heads_per_ngram", None, required_for=need)
        conv = model.tensor_by_name.get(f"blk.{ple}.ple_conv1d.weight")
        conv_type = 0 if conv is None else conv.type_id  # (kv._ple_module refused block types)
        shape.dsv4.update(ple=ple, ple_heads=heads, ple_ngram=ngram,
                          ple_width=heads * model.get_int("{arch}.embedding_length_per_layer_input", None, required_for=need),
                          ple_kernel=model.get_int("{arch}.ple.conv_kernel", None, required_for=need),
                          ple_conv_f32=conv_type == 0,
                          ple_column_bytes=tensor_nbytes(conv_type, (1, shape.dsv4["hc"] * shape.n_embd)))


# --- Qwen4-Exp (src/models/qwen4exp.cpp, llama_memory_hybrid_idx) --------------------------------

def _q4_hc_mix(b, stream, head=False):
    """build_hc_mix: the streams' grouped RMS norm (times its gammas), a low-rank gate (down, scale,
    silu, up), the fused gated mean (the head's unfused: sigmoid, times, the mean of a cont and adds,
    scale), and for a layer the inject projection. Returns (mixed, normed streams)."""
    g, T, hc, n_embd, rank = b.g, b.T, b.shape.dsv4["hc"], b.shape.n_embd, b.shape.dsv4["rank"]
    xn = g.op(b.f32(n_embd, hc, T), stream)  # rms_norm
    xn = g.op(xn.nbytes, xn, b.weights, inplace=(0,))
    lo = b.mm(rank, g.view(xn))
    lo = b.unary(b.unary(lo, lo.nbytes), lo.nbytes)  # scale, silu
    gate = b.mm(hc * n_embd, lo)
    if not head:
        return g.op(b.f32(n_embd, T), g.view(xn), g.view(gate)), xn  # GGML_OP_DSV4_HC_PRE (gated)
    gated = g.op(xn.nbytes, xn, b.unary(gate, gate.nbytes), inplace=(0, 1))
    mixed = g.op(b.f32(n_embd, T), g.view(gated))  # cont of the first stream
    for _ in range(hc - 1):
        mixed = g.op(mixed.nbytes, mixed, g.view(gated), inplace=(0,))
    return g.op(mixed.nbytes, mixed, inplace=(0,)), xn


def _q4_combine(b, stream, out, inject):
    """build_hc_combine: 2 sigmoid(inject / hc) (in place) and the fused post (identity comb)."""
    g = b.g
    w = b.unary(b.unary(b.unary(inject, inject.nbytes), inject.nbytes), inject.nbytes)
    return g.op(stream.nbytes, out, stream, w)


def _q4_qsa_inputs(b):
    """llm_graph_input_qsa, one set per ratio (the layers sharing a ratio share it), made at the first
    layer with that ratio: the indexer cache's k_idxs, the cell -> block map, the block members and
    positions, the per-block bias."""
    g, T = b.g, b.T
    n_kv, streams = b.cells["full"], b.streams
    b.qsa = {}
    for r in b.shape.dsv4["ratios"]:
        if r and r not in b.qsa:
            n_blocks = -(-n_kv // r)
            b.qsa[r] = {"k_idxs": g.input(I64_BYTES * T), "cell_blk": g.input(I32_BYTES * n_kv * streams),
                        "blk_cells": g.input(I32_BYTES * r * n_blocks * streams),
                        "blk_pos": g.input(I32_BYTES * 4 * n_blocks * streams),
                        "bias": g.input(F32_BYTES * n_blocks * T), "n_blocks": n_blocks}


def _q4_qsa_mask(b, x, r):
    """build_qsa_top_k + build_attn_qsa's mask: raw indexer keys cached, each block's members gathered
    and mean-pooled (a cont per member, adds), normed and roped; queries normed and roped; rectified
    per-head block scores summed, plus the block bias, expanded to cells, plus the mask (cast to f32
    with flash attention); the top cells (whole blocks plus the tail), then -inf filled, zeros set at them,
    added to the mask."""
    g, T, shape, qsa = b.g, b.T, b.shape, b.qsa[r]
    n_blocks, streams = qsa["n_blocks"], b.streams
    width, heads = shape.indexer_head, shape.indexer_heads
    n_kv = b.cells["full"]
    k_raw = b.mm(width, x)
    g.expand(g.view(b.cache, g.view(k_raw), qsa["k_idxs"]))
    members = g.op(b.f32(width, r * n_blocks * streams), g.view(b.cache), qsa["blk_cells"])
    pooled = None
    for _ in range(r):
        part = g.op(b.f32(width, n_blocks * streams), g.view(members))  # cont of a member slice
        pooled = part if pooled is None else g.op(part.nbytes, pooled, part, inplace=(0, 1))
    pooled = b.unary(pooled, pooled.nbytes)  # scale 1/r
    pooled = g.op(pooled.nbytes, g.op(pooled.nbytes, g.view(pooled)), b.weights, inplace=(0,))  # rms norm of the reshape
    pooled = g.op(pooled.nbytes, g.view(pooled), qsa["blk_pos"])  # rope_multi of the reshape
    q = b.mm(heads * width, x)
    q = g.op(q.nbytes, g.op(q.nbytes, g.view(q)), b.weights, inplace=(0,))
    q = g.op(q.nbytes, q, b.pos, inplace=(0,))
    score = g.op(b.f32(n_blocks, heads, T), g.view(pooled), g.view(q))
    score = g.op(score.nbytes, g.view(score))  # relu of the reshape
    summed = g.op(b.f32(n_blocks, T), g.view(score))  # cont of head 0
    for _ in range(heads - 1):
        summed = g.op(summed.nbytes, summed, g.view(score), inplace=(0,))
    summed = g.op(summed.nbytes, summed, qsa["bias"], inplace=(0,))
    expanded = g.op(summed.nbytes, g.view(summed))  # cont(permute)
    expanded = g.op(b.f32(n_kv, T), expanded, qsa["cell_blk"])  # get_rows
    expanded = g.op(expanded.nbytes, g.view(expanded))  # cont(permute)
    mask = b.masks["full"]
    mask_f32 = g.op(b.f32(n_kv, T), mask) if b.fa else mask  # cast
    expanded = g.op(expanded.nbytes, expanded, g.view(mask_f32), inplace=(0,))
    k_top = min(n_kv, shape.indexer_top_k + r - 1)
    top_k = g.op(I32_BYTES * k_top * T, expanded)
    top_k = g.op(top_k.nbytes, top_k)  # cont
    filled = g.op(mask.nbytes, mask, inplace=(0,))
    empty = _Tensor(b.f32(k_top, T), has_op=False)
    if b.homes is not None:
        empty.device = b.dev  # (a leaf without a buffer goes to its consumer's backend)
    zeros = g.op(empty.nbytes, empty, inplace=(0,))
    unmasked = _Tensor(0, (zeros, g.view(top_k), g.view(filled)), view_src=filled)
    return g.op(filled.nbytes, g.view(unmasked), mask, inplace=(0,))


def _q4_ple_embedding(b):
    """build_inp_ple: the host-hashed rows (I32, ple heads x T) and their gather from per_layer_token_embd
    (an input-layer weight, on the CPU), expanded at once so it shares the embedding's split."""
    g, T = b.g, b.T
    rows = g.input(I32_BYTES * b.shape.dsv4["ple_heads"] * T)
    emb = g.op(b.f32(b.shape.dsv4["ple_width"], T), b.weights, rows)
    emb.host = True
    emb.offloadable = False  # GET_ROWS
    return g.expand(emb)


def _q4_ple(b, emb, stream):
    """build_ple: key and value projections of the n-gram embedding, per-stream grouped norms of the key
    and the streams, their dot product into a signed-sqrt sigmoid gate, the value repeated over the
    streams and gated, its grouped norm, then build_conv_state_at (the history row gathered, concatenated
    with the tokens, 1 + n_rs_seq tails made contiguous and copied back) and the dilated causal conv as
    conv_kernel shifted contiguous copies times a kernel column (cast when the file's type is not f32),
    summed; silu, cont, and the stream plus gated value plus conv."""
    g, T, hc, n_embd = b.g, b.T, b.shape.dsv4["hc"], b.shape.n_embd
    q4 = b.shape.dsv4
    n_seq = max(1, b.settings.n_seq)
    streams = b.f32(n_embd, hc, T)
    key = b.mm(hc * n_embd, emb)
    value = b.mm(n_embd, emb)
    key = g.op(streams, g.view(key))  # rms_norm of the reshape
    key = g.op(streams, key, b.weights, inplace=(0,))
    query = g.op(streams, stream)  # rms_norm
    query = g.op(streams, query, b.weights, inplace=(0,))
    score = g.op(b.f32(1, hc, T), g.op(streams, key, query, inplace=(0, 1)))  # mul, sum_rows
    score = b.unary(score, score.nbytes)  # scale
    mag = b.unary(b.unary(b.unary(score, score.nbytes), score.nbytes), score.nbytes)  # abs, clamp, sqrt
    sign = b.unary(score, score.nbytes)  # sgn
    gate = b.unary(g.op(score.nbytes, sign, mag, inplace=(0, 1)), score.nbytes)  # mul, sigmoid
    gated = g.op(streams, g.op(streams, g.view(value)), gate, inplace=(0,))  # repeat_4d, mul
    normed = g.op(streams, g.view(gated))  # rms_norm
    normed = g.op(streams, normed, b.weights, inplace=(0,))
    s_main, s_extra = build_rs(b)
    # build_rs expands the history's gather (and its 0-row extra states' copy) first; the first tail's
    # copy then walks the whole module, the previous layer's end reached only through the query's norm
    history = g.expand(g.op(b.f32(b.kv.ple_state, n_seq), g.view(b.cache), s_main))
    g.expand(g.view(b.cache, g.op(0, g.view(b.cache), s_extra)))
    padded = g.op(b.f32(b.kv.ple_state, n_seq) + streams, g.view(history), g.view(normed))  # concat
    for _ in range(1 + b.settings.rs_seq):  # the tails, contiguous, copied into the cache
        g.expand(g.view(b.cache, g.op(b.f32(b.kv.ple_state, n_seq), g.view(padded))))
    conv = None
    for _ in range(q4["ple_kernel"]):
        shifted = g.op(streams, g.view(padded))  # cont(transpose(view))
        column = g.op(q4["ple_column_bytes"], b.weights)  # cont of the kernel column, in the file's type
        if not q4["ple_conv_f32"]:
            column = g.op(b.f32(hc * n_embd, 1), column)  # cast to f32
        term = g.op(streams, shifted, g.view(column), inplace=(0,))
        conv = term if conv is None else g.op(streams, conv, term, inplace=(0, 1))
    conv = g.op(streams, b.unary(conv, streams))  # silu, cont
    return g.op(streams, stream, g.op(streams, gated, conv, inplace=(0, 1)), inplace=(0, 1))


def _build_qwen4exp(b, graph_shape, layer_set, output, out_ids, n_out, lookup):
    """llama_model_qwen4exp::graph: the embedding repeated into hc streams; per layer a low-rank
    hyper-connection mix, the gated delta net or gated attention (through the QSA top-k mask where the
    layer has a compression ratio), the output rows of the last layer, the combine; again around the
    MoE with its gated shared expert; the head's mix is the output norm."""
    g, n_embd, hc = b.g, graph_shape.n_embd, graph_shape.dsv4["hc"]
    build_attn_inp(b, ["full"])
    if graph_shape.indexer_heads and any(graph_shape.dsv4["ratios"]):
        _q4_qsa_inputs(b)
    else:
        b.qsa = {}
    ple = graph_shape.dsv4.get("ple")
    emb = _q4_ple_embedding(b) if ple is not None else None
    g.expand(lookup)
    stream = g.op(b.f32(n_embd, hc, b.T), g.view(lookup))  # repeat_4d
    last = len(graph_shape.layers) - 1
    for il, layer in enumerate(graph_shape.layers):
        if il not in layer_set:
            continue
        if b.homes is not None:
            b.move(b.homes.layer_device[il], il)
        if il == ple:
            stream = _q4_ple(b, emb, stream)
        cur, xn = _q4_hc_mix(b, stream)
        g.expand(cur)
        if layer.mixer == "gdn":
            cur = _gdn_layer(b, il, cur, layer)
        else:
            ratio = graph_shape.dsv4["ratios"][il]
            mask = _q4_qsa_mask(b, cur, ratio) if ratio in b.qsa else None
            cur = build_attn(b, il, cur, layer, mask=mask)
        inject = b.mm(hc, g.view(xn))
        if il == last:
            cur = g.op(b.f32(n_embd, n_out), cur, out_ids)
            inject = g.op(b.f32(hc, n_out), inject, out_ids)
            stream = g.op(b.f32(n_embd * hc, n_out), g.view(stream), out_ids)
            b.T = n_out
        stream = _q4_combine(b, stream, cur, inject)
        cur, xn = _q4_hc_mix(b, stream)
        out = build_moe_ffn(b, il, cur, layer)
        stream = _q4_combine(b, stream, out, b.mm(hc, g.view(xn)))
        if il + 1 != ple or il + 1 not in layer_set:  # (qwen4exp.cpp expands nothing at a layer's end:
            g.expand(stream)  # the PLE module's tail copies reach this layer's shared expert and combine)
            g.boundaries.append(stream)
    if not output:
        g.expand(stream)
        return g
    if b.homes is not None:
        b.move(b.homes.layer_device[-1], -1)
    cur, _ = _q4_hc_mix(b, stream, head=True)
    cur.is_output = True
    logits = b.mm(graph_shape.n_vocab, cur)
    logits.is_output = True
    g.expand(logits)
    return g
