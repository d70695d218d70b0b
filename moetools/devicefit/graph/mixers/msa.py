"""Block-sparse (MSA) attention: the indexer over blocks of positions (llama_kv_cache_msa_context,
src/models/*'s MSA layers).
"""

from moetools.devicefit.ggml.allocator import F16_BYTES, I32_BYTES, I64_BYTES, _Tensor
from moetools.devicefit.graph.common import _store


MSA_MIN_POSITIONS = 256  # llama_kv_cache_msa_context::get_n_pos on an empty cache: max(n_pad, 256)


def _msa_inputs(b):
    """minimax-m3.cpp's MSA inputs, when its sparse attention runs (flash attention on, and one sequence
    or a cache per sequence; else every layer is dense): the local-force bias and position mask (f32,
    per position block / position and token), the position -> cell and cell -> block maps (i32), the
    indexer cache's k_idxs, and the KQ mask cast to f32 (a node, alive through every sparse layer). At
    the worst-case reserve the cache is empty: the position axis is get_n_pos's 256, padded to a block."""
    s = b.settings
    if not b.fa or (s.n_seq > 1 and s.unified):
        return
    g, T = b.g, b.T
    block = b.shape.indexer_block
    n_ps = -(-MSA_MIN_POSITIONS // block) * block
    n_kv = b.cells["full"]
    b.k_idxs["indexer"] = g.input(I64_BYTES * T)
    b.msa = {"n_ps": n_ps, "nblk": n_ps // block, "ns": b.streams,
             "bias": g.input(b.f32(n_ps // block, T)), "pos_mask": g.input(b.f32(n_ps, T)),
             "pos_slot": g.input(I32_BYTES * n_ps * b.streams), "cell_blk": g.input(I32_BYTES * n_kv * b.streams),
             "mask_f32": g.op(b.f32(n_kv, T), b.masks["full"])}


def _msa_layer(b, il, x, layer):
    """A sparse minimax-m3 block's attention (minimax-m3.cpp, the batch path the reserve builds): q/k/v
    (per-head q/k norms, partial rope), the indexer's query and key (normed, roped; the key stored in the
    indexer cache first), the K/V stores; then per stream the indexer keys gathered by position, the
    block scores (max-pooled, biased), their top-k, a -inf block mask unmasked at the top-k (set_rows
    from zeros), made contiguous twice, gathered to cells (f32), transposed back, added to the f32 KQ
    mask and cast to f16; flash attention over the cache with that mask, made contiguous; the streams
    concatenated; the output projection."""
    g, T, msa = b.g, b.T, b.msa
    kv = b.kv
    n_head, hkv = b.shape.n_head[il], kv.head_count_kv[il]
    width = kv.k_width[il]
    heads_idx, idx_width = b.shape.indexer_heads, b.shape.indexer_head
    ns, n_ps, nblk = msa["ns"], msa["n_ps"], msa["nblk"]
    n_tps = T // ns
    n_kv = b.cells["full"]
    top = min(b.shape.indexer_top_k, nblk)
    q = b.norm(g.view(b.mm(layer.q_rows or n_head * width, x)), n_head * width)
    k = b.norm(g.view(b.mm(layer.k_rows or hkv * width, x)), hkv * width)
    v = g.view(b.mm(layer.v_rows or hkv * kv.v_width[il], x))
    q = g.op(q.nbytes, q, b.pos, inplace=(0,))
    k = g.op(k.nbytes, k, b.pos, inplace=(0,))
    iq = b.norm(g.view(b.mm(heads_idx * idx_width, x)), heads_idx * idx_width)
    ik = b.norm(g.view(b.mm(idx_width, x)), idx_width)
    iq = g.op(iq.nbytes, iq, b.pos, inplace=(0,))
    ik = g.op(ik.nbytes, ik, b.pos, inplace=(0,))
    g.expand(g.write(b.cache, g.view(ik), b.k_idxs["indexer"]))  # cpy_k into the indexer cache
    if b.k_rot is not None:
        q = g.view(g.op(q.nbytes, b.k_rot, g.view(q)))
        k = g.view(g.op(k.nbytes, b.k_rot, g.view(k)))
    if b.v_rot is not None:
        v = g.view(g.op(b.f32(hkv * kv.v_width[il], T), b.v_rot, g.view(v)))
    for tensor in (q, k, v):
        g.expand(tensor)
    _store(b, "full", k, v, False, b.f32(hkv * kv.v_width[il], T))
    outs = []
    for _ in range(ns):
        keys = g.op(b.f32(idx_width, n_ps), g.view(b.cache), g.view(msa["pos_slot"]))  # get_rows
        scores = g.op(b.f32(n_ps, heads_idx, n_tps), keys, g.view(g.view(iq)))
        scores = g.op(scores.nbytes, scores, g.view(msa["pos_mask"]), inplace=(0,))  # add_inplace
        blocks = g.op(b.f32(nblk, heads_idx, n_tps), scores)  # pool_2d max
        bias = g.view(msa["bias"])
        blocks = g.op(blocks.nbytes, blocks, bias, inplace=(0,))
        top_k = g.op(I32_BYTES * top * heads_idx * n_tps, blocks)
        ninf = g.op(F16_BYTES * nblk * n_tps, g.op(b.f32(nblk, n_tps), bias))  # scale_bias, cast
        ninf = g.op(F16_BYTES * nblk * heads_idx * n_tps, ninf)  # repeat_4d
        zero = g.op(b.f32(top, heads_idx, n_tps), top_k)  # cast
        zero = g.op(zero.nbytes, zero, inplace=(0,))  # scale by 0
        unmasked = _Tensor(0, (g.view(zero), g.view(top_k), g.view(ninf)), view_src=ninf)  # set_rows
        mask = g.op(ninf.nbytes, g.view(g.view(unmasked)))  # cont(permute)
        mask = g.op(mask.nbytes, g.view(g.view(mask)))  # cont(transpose): [n_tps * heads, nblk]
        cells = g.op(b.f32(n_tps * heads_idx, n_kv), mask, g.view(msa["cell_blk"]))  # get_rows (f32)
        cells = g.op(cells.nbytes, g.view(cells))  # cont(transpose)
        cells = g.op(cells.nbytes, cells, g.view(msa["mask_f32"]), inplace=(0,))  # add_inplace
        mask4 = g.op(F16_BYTES * n_kv * n_tps * heads_idx, g.view(cells))  # cast to f16
        out = g.op(b.f32(width, n_head, n_tps), g.view(g.view(q)), g.view(b.cache), g.view(b.cache), mask4)
        if hkv > 1 and n_tps > 1:
            out = g.op(out.nbytes, g.view(out))  # cont of the permuted output
        outs.append(g.view(out))
    cur = outs[0]
    for index, part in enumerate(outs[1:], 2):
        cur = g.op(b.f32(width * n_head, n_tps * index), cur, part)  # concat
    if b.v_rot is not None:
        cur = g.view(g.op(cur.nbytes, b.v_rot, g.view(cur)))
    return b.mm(b.shape.n_embd, cur)
