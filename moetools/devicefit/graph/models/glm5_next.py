"""GLM5-Next's DSA layers with the latent pool (src/models/glm5-next.cpp, llama_memory_hybrid_idx).
"""

from moetools.devicefit.ggml.allocator import F16_BYTES, F32_BYTES, I32_BYTES, I64_BYTES, _Tensor
from moetools.devicefit.graph.common import build_attn_mha
from moetools.devicefit.graph.context import build_attn_inp


# --- GLM5-Next (src/models/glm5-next.cpp, llama_memory_hybrid_idx) -------------------------------

KPOOL_GATHER_MAX_UBATCH = 16  # build_inp_kpool: ubatches up to this gather the selected latents


def _glm5_inputs(b):
    """build_inp_mem_hybrid_k's attention inputs and build_inp_kpool's: the indexer cache's k_idxs,
    pool cells / members / mask (f16: the fused lightning indexer) / tail members, the gather mask and
    the new pools' members and rows. At reserve every pool is new: (cells per stream / kpool) x n_seq of
    them (llama_memory_hybrid_idx_context's full context), padded by kpool_pad to 64 past one more."""
    g, T, d = b.g, b.T, b.shape.dsv4
    build_attn_inp(b, ["full"])
    kpool = d["kpool"]
    n_new = b.cells["full"] // kpool * max(1, b.settings.n_seq)
    n_pool = max(64, -(-(n_new + 1) // 64) * 64)
    n_sel = kpool * min(n_pool, b.shape.indexer_top_k // kpool) + (kpool - 1 if d["select_tail"] else 0)
    b.kpool = {"k_idxs": g.input(I64_BYTES * T), "cells": g.input(I32_BYTES * n_pool),
               "members": g.input(I32_BYTES * kpool * n_pool), "mask": g.input(F16_BYTES * n_pool * T),
               "tail": g.input(I32_BYTES * (kpool - 1) * T), "gather_mask": g.input(F32_BYTES * n_sel * T),
               "new": g.input(I32_BYTES * kpool * n_new), "new_rep": g.input(I64_BYTES * n_new), "n_pool": n_pool,
               "n_new": n_new, "n_sel": n_sel}
    b.kpool["gather"] = T <= KPOOL_GATHER_MAX_UBATCH and b.cells["full"] > n_sel
    b.prev_sel = None


def _glm5_kpool_select(b, x, qr):
    """build_kpool_select: indexer queries, the key (layer norm) and pool gate cached with a zero pooled
    slot, the new pool's members gathered, gated by softmax over the pool and summed, scattered to the
    pooled slots and all pools gathered; the lightning indexer's pool scores, their top pools ordered by
    score, expanded to member cells (plus the tail), then (scatter path) a -inf mask of n_kv + n_sel
    rows with zeros set at the live cells, added to the causal mask."""
    g, T, d, kp = b.g, b.T, b.shape.dsv4, b.kpool
    heads, width, kpool, n_pool, n_sel = b.shape.indexer_heads, b.shape.indexer_head, d["kpool"], kp["n_pool"], kp["n_sel"]
    n_new = kp["n_new"]
    iq = g.view(b.mm(heads * width, qr))
    ik = b.mm(width, x)
    ik = g.op(ik.nbytes, g.op(ik.nbytes, g.op(ik.nbytes, ik), b.weights, inplace=(0,)), b.weights, inplace=(0,))
    ig = b.mm(width, x)
    empty = _Tensor(b.f32(width, T), has_op=False)
    if b.homes is not None:
        empty.device = b.dev  # (a leaf without a buffer goes to its consumer's backend)
    pzero = g.op(empty.nbytes, empty, inplace=(0,))
    packed = g.op(b.f32(3 * width, T), g.op(b.f32(2 * width, T), ik, ig), pzero)
    g.expand(g.view(b.cache, g.view(packed), kp["k_idxs"]))
    rows = g.op(b.f32(2 * width, kpool, n_new), g.view(b.cache), g.view(kp["new"]))
    logits = g.op(b.f32(width, kpool, n_new), g.view(rows), b.weights)
    logits = g.op(logits.nbytes, g.view(logits))  # cont(permute)
    probs = g.op(logits.nbytes, g.view(logits))  # soft_max of the reshape
    pk = g.op(b.f32(width, kpool, n_new), g.view(g.view(rows)))  # cont(permute)
    pooled_new = g.op(b.f32(width, n_new), g.op(pk.nbytes, g.view(probs), pk, inplace=(0, 1)))  # sum_rows(mul)
    g.expand(g.view(b.cache, g.view(pooled_new), kp["new_rep"]))
    pooled = g.op(b.f32(width, n_pool), g.view(b.cache), kp["cells"])
    weights = b.mm(heads, x)
    weights = g.op(weights.nbytes, g.view(weights), inplace=(0,))  # scale of the per-stream view
    score = g.op(b.f32(n_pool, T), iq, g.view(pooled), weights, kp["mask"])
    n_top = min(n_pool, b.shape.indexer_top_k // kpool)
    top_k = g.op(I32_BYTES * n_top * T, score)
    sel_score = g.op(b.f32(n_top, T), g.view(score), top_k)
    order = g.op(I32_BYTES * n_top * T, g.view(sel_score))
    top_f = g.op(b.f32(n_top, T), top_k)
    top_f = g.op(b.f32(n_top, T), g.view(top_f), order)
    top_f = g.op(top_f.nbytes, g.view(top_f))  # cont of the reshape
    top_k = g.op(I32_BYTES * n_top * T, top_f)
    sel_idx = g.op(I32_BYTES * kpool * n_top * T, kp["members"], g.view(top_k))
    if d["select_tail"]:
        sel_idx = g.op(I32_BYTES * n_sel * T, g.view(sel_idx), kp["tail"])
    if kp["gather"]:
        return sel_idx
    n_kv = b.cells["full"]
    mask_type = F16_BYTES if b.fa else F32_BYTES
    seed = g.op(F32_BYTES, g.view(sel_idx))
    mask_seed = seed if not b.fa else g.op(F16_BYTES, seed)
    mask_seed = g.op(mask_seed.nbytes, mask_seed)  # fill -inf
    mask_all = g.op(mask_type * (n_kv + n_sel) * T, mask_seed)  # repeat
    zeros = g.op(b.f32(n_sel, T), g.op(F32_BYTES, seed))  # fill 0, repeat
    live = g.op(b.f32(n_sel, T), g.view(kp["gather_mask"]))  # exp of the reshape
    dump = g.op(b.f32(n_sel))  # arange
    idx = g.op(b.f32(n_sel, T), sel_idx)
    idx = g.op(idx.nbytes, g.op(idx.nbytes, g.op(idx.nbytes, idx, dump, inplace=(0,)), live, inplace=(0, 1)), dump, inplace=(0,))
    idx = g.op(I32_BYTES * n_sel * T, idx)
    sel = _Tensor(0, (g.view(zeros), g.view(idx), g.view(mask_all)), view_src=mask_all)  # set_rows
    return g.op(mask_type * n_kv * T, g.view(sel), g.view(b.masks["full"]))


def _glm5_dsa_layer(b, il, x, layer):
    """build_dsa_layer: NoPE MLA (q latent, the absorbed query, the normed latent cached alone) over
    the k-pool selection (the last full indexer layer's for a shared one)."""
    g, T, shape = b.g, b.T, b.shape
    n_head, kv_lora, nope, v_head = shape.n_head[il], shape.kv_lora, shape.mla_nope, shape.mla_v_head
    qr = b.norm(b.mm(layer.q_lora, x), layer.q_lora)
    q = b.mm(n_head * nope, qr)
    kv = b.norm(b.mm(kv_lora, x), kv_lora)
    q_abs = g.op(b.f32(kv_lora, T, n_head), b.weights, g.view(g.view(q)))
    if b.kv.indexer_layers[il] or b.prev_sel is None:
        b.prev_sel = _glm5_kpool_select(b, x, qr)
    sel = b.prev_sel
    g.expand(q_abs)
    g.expand(kv)
    g.expand(g.view(b.cache, g.view(kv), b.k_idxs["full"]))
    if b.kpool["gather"]:  # small decode batches: attention over the gathered latents
        g.expand(b.masks["full"])
        n_sel = b.kpool["n_sel"]
        k_g = g.op(b.f32(kv_lora, n_sel, T), g.view(b.cache), g.view(sel))
        kq = g.op(b.f32(n_sel, n_head, T), k_g, g.view(q_abs))
        kq = g.op(kq.nbytes, kq, b.kpool["gather_mask"], inplace=(0,))
        v_t = g.op(k_g.nbytes, g.view(k_g))
        kqv = g.op(b.f32(v_head, n_head, T), b.weights, g.op(b.f32(kv_lora, n_head, T), v_t, kq))
        out = g.op(kqv.nbytes, g.view(kqv))
    else:
        out = build_attn_mha(b, il, g.view(q_abs), kv_lora, "full", n_head, kv_lora, kv_lora, v_mla_rows=v_head, mask=g.view(sel))
    return b.mm(shape.n_embd, out)
