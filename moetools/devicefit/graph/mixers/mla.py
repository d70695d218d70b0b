"""Multi-head latent attention and the DSA lightning indexer (src/models/deepseek2.cpp,
src/models/deepseek32.cpp / glm-dsa: llm_build_deepseek2's MLA body, the indexer's scores, top-k and
rebuilt KQ mask).
"""

from moetools.arch.registry import profile
from moetools.devicefit.ggml.allocator import F16_BYTES, I32_BYTES, I64_BYTES, _Tensor
from moetools.devicefit.graph.common import build_attn_mha


def _mla_layer(b, il, x, layer):
    g, T = b.g, b.T
    shape = b.shape
    n_head = shape.n_head[il]
    kv_lora, rope, nope, v_head = shape.kv_lora, shape.mla_rope, shape.mla_nope, shape.mla_v_head
    kind = "swa" if b.kv.is_swa[il] else "full"
    if kind == "swa" and shape.mla_swa:  # dots3note's sliding-window layers: their own MLA widths
        kv_lora, nope, v_head = shape.mla_swa
    entry = profile(shape.architecture)
    mask = None
    if layer.q_lora:
        qr = b.mm(layer.q_lora, x)
        qr = b.norm(qr, layer.q_lora)
        if "indexer" in b.masks and kind == "full":  # (the MTP graph's dense MLA has no indexer)
            mask = _dsa_mask(b, il, x, qr)
        q = b.mm(n_head * (nope + rope), qr)
    else:
        q = b.mm(n_head * (nope + rope), x)
    q = g.view(q)
    kv_pe = b.mm(kv_lora + rope, x)
    if entry.mla_k_rope_norm:  # dots3note.cpp: an RMS norm of the shared rope key (a view: a new tensor) before its rope
        k_pe = g.op(b.f32(rope, T), g.view(kv_pe))
        k_pe = g.op(k_pe.nbytes, k_pe, b.weights, inplace=(0,))
        k_pe = g.op(k_pe.nbytes, k_pe, b.pos, inplace=(0,))
    else:
        k_pe = g.op(b.f32(rope, T), g.view(kv_pe), b.pos, inplace=(0,)) if shape.rope else g.view(kv_pe)
    kv_c = g.op(b.f32(kv_lora, T), g.view(kv_pe), inplace=(0,))
    kv_c = g.op(kv_c.nbytes, kv_c, b.weights, inplace=(0,))
    q_pe = g.op(b.f32(rope, n_head, T), g.view(q), b.pos, inplace=(0,)) if shape.rope else g.view(q)
    q_abs = g.op(b.f32(kv_lora, T, n_head), b.weights, g.view(g.view(q)))
    q_cur = g.op(b.f32(kv_lora + rope, n_head, T), g.view(q_abs), q_pe)
    kv_c3 = g.view(kv_c)
    k_cur = g.op(b.f32(kv_lora + rope, T), kv_c3, k_pe)
    g.expand(q_cur)
    g.expand(kv_c3)
    g.expand(k_cur)
    g.expand(g.write(b.cache, g.view(k_cur), b.k_idxs[kind]))
    cur = build_attn_mha(b, il, q_cur, kv_lora + rope, kind, n_head, kv_lora + rope, kv_lora, v_mla_rows=v_head, mask=mask)
    if layer.gate_rows and entry.mla_gate == "per_head":
        # bailingmoe3.cpp: one sigmoid gate per head (of a reshape: a new tensor), the output reshaped
        # (a view: the mul is a new tensor) and made contiguous before the projection
        gate = b.unary(g.view(b.mm(layer.gate_rows, x)), b.f32(layer.gate_rows, T))
        cur = g.op(b.f32(n_head * v_head, T), g.view(cur), gate)
        cur = g.op(cur.nbytes, g.view(cur))
    elif layer.gate_rows:
        gate = b.mm(layer.gate_rows, x)
        gate = b.unary(gate, gate.nbytes)
        if entry.mla_gate == "broadcast":  # the head-wise gate broadcast over reshapes: a new tensor
            cur = g.op(b.f32(n_head * v_head, T), g.view(cur), g.view(gate))
        else:
            cur = g.op(b.f32(n_head * v_head, T), cur, gate, inplace=(0, 1))  # mul: in place of the sigmoid
    return b.mm(shape.n_embd, cur)


def _dsa_inputs(b):
    """build_attn_inp_k_dsa's indexer inputs: the indexer cache's k_idxs, its KQ mask (f16: the fused
    lightning indexer, cparams.fused_lid, is always on) and the Hadamard rotation llama_kv_cache always
    builds for a DeepSeek indexer (nrot: the largest power of two from 64 dividing the key width)."""
    g, T = b.g, b.T
    b.k_idxs["indexer"] = g.input(I64_BYTES * T)
    b.masks["indexer"] = g.input(F16_BYTES * b.cells["indexer"] * T)
    b.indexer_rot = None
    if not profile(b.shape.architecture).indexer_no_rotate:  # hy-v4.cpp skips it (it only helps FP8 kernels)
        nrot = 64
        while b.shape.indexer_head % (nrot * 2) == 0:
            nrot *= 2
        b.indexer_rot = g.input(b.f32(nrot, nrot))
    b.top_k = None


def _dsa_mask(b, il, x, qr):
    """The DSA layer's KQ mask (src/models/deepseek32.cpp, glm-dsa.cpp lightning indexer and
    llm_graph_context::build_attn for llm_graph_input_attn_k_dsa): indexer queries from the q latent,
    one key head from the layer input (normed, roped, Hadamard-rotated, stored in the indexer cache),
    per-head weights, the fused lightning indexer's scores (n_kv x tokens f32), their top-k cells (a
    contiguous i32 copy), and a mask filled with -inf, unmasked at the top-k cells by set_rows from a
    zero-filled tensor (whose empty source is a graph leaf: allocated before the first node) and added
    to the layer's mask (a new mask-sized tensor). glm-dsa's shared layers reuse the last full layer's top-k.
    Only the cache store is expanded here; the rest joins the graph when attention reads the mask."""
    g, T, shape = b.g, b.T, b.shape
    heads, width = shape.indexer_heads, shape.indexer_head
    n_kv = b.cells["indexer"]
    if b.kv.indexer_layers[il] or b.top_k is None:
        # (a rope or scale of a reshaped/viewed tensor is a new tensor: ggml-alloc's reserve takes a
        # view's unallocated data for external memory and never reuses it)
        q = b.mm(heads * width, qr)
        q = g.op(q.nbytes, g.view(q), b.pos, inplace=(0,))
        k = b.mm(width, x)
        k = g.op(k.nbytes, k)  # layer norm (GGML_OP_NORM is not in ggml_op_can_inplace), weight, bias
        k = g.op(k.nbytes, k, b.weights, inplace=(0,))
        k = g.op(k.nbytes, k, b.weights, inplace=(0,))
        k = g.op(k.nbytes, g.view(k), b.pos, inplace=(0,))
        if b.indexer_rot is not None:
            q = g.op(q.nbytes, b.indexer_rot, q)
            k = g.op(k.nbytes, b.indexer_rot, k)
        g.expand(g.write(b.cache, g.view(k), b.k_idxs["indexer"]))
        weights = b.mm(heads, x)
        weights = g.op(weights.nbytes, g.view(weights), inplace=(0,))  # scale of the per-stream view
        scores = g.op(b.f32(n_kv, T), g.view(q), g.view(b.cache), weights, b.masks["indexer"])
        top_k = g.op(I32_BYTES * min(n_kv, shape.indexer_top_k) * T, scores)
        b.top_k = g.op(top_k.nbytes, g.view(top_k))  # cont
    top_k = b.top_k
    mask = b.masks["full"]
    filled = g.op(mask.nbytes, mask, inplace=(0,))  # ggml_fill (the mask input has other readers: a new tensor)
    empty = _Tensor(b.f32(top_k.nbytes // I32_BYTES), has_op=False)
    if b.homes is not None:
        empty.device = b.dev  # the scheduler gives a leaf without a buffer its consumer's backend
    zeros = g.op(empty.nbytes, empty, inplace=(0,))  # fill in place of its leaf
    # set_rows: a view of the fill, reading the zeros, the top-k and (last) the fill
    unmasked = _Tensor(0, (zeros, g.view(top_k), g.view(filled)), view_src=filled)
    return g.op(filled.nbytes, g.view(unmasked), mask, inplace=(0,))  # add: a new tensor (its source is a view)
