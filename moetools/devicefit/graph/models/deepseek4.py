"""DeepSeek-V4's whole-model graph (src/models/deepseek4.cpp, llama_kv_cache_dsv4): hyper-connection
streams, compressed attention (CSA/HCA) and its compressor state, and its MTP draft graph.
"""

from moetools.devicefit import kv as kvmod
from moetools.devicefit.ggml.allocator import F16_BYTES, F32_BYTES, HOST, I32_BYTES, I64_BYTES, _Tensor
from moetools.devicefit.graph.common import build_ffn, build_moe_ffn
from moetools.devicefit.graph.context import build_attn_inp
from moetools.devicefit.graph.mixers.kda import _kda_layer
from moetools.devicefit.graph.mixers.mla import _dsa_inputs, _mla_layer
from moetools.devicefit.graph.models.glm5_next import _glm5_dsa_layer, _glm5_inputs
from moetools.gguf.constants import Keys


def read_glm5_next_shape(model, kvshape, shape):
    """glm5-next.cpp's widths (the profile's shape_reader): mHC streams around KDA and NoPE MLA with the
    k-pool indexer."""
    need = "GLM5-Next's compute"
    shape.dsv4 = {"hc": model.get_int("{arch}.hyper_connection.count", None, required_for=need),
                  "kpool": model.get_int("{arch}.attention.indexer.kpool", None, required_for=need),
                  "select_tail": bool(model.get("{arch}.attention.indexer.kpool_select_tail", False))}


def read_hy_v4_shape(model, kvshape, shape):
    """hy-v4.cpp's widths (the profile's shape_reader): iHC streams around MLA."""
    shape.dsv4 = {"hc": model.get_int("{arch}.hyper_connection.count", None, required_for="Hunyuan-V4's compute")}


# --- DeepSeek-V4 (src/models/deepseek4.cpp, llama_kv_cache_dsv4) ----------------------------------

DSV4_STATE_ROWS = {4: 8, 128: 128}  # compressor state rows per ratio (CSA overlaps two blocks of 4)


def _dsv4_shape(model, shape):
    """The widths deepseek4.cpp's graph reads, from the keys its loader requires."""
    need = "DeepSeek-V4's compute"
    shape.dsv4 = {
        "hc": model.get_int("{arch}.hyper_connection.count", None, required_for=need),
        "head": model.get_int(Keys.KEY_LENGTH, None, required_for=need),
        "rope": model.get_int(Keys.ROPE_DIMENSION_COUNT, 0),
        "q_lora": model.get_int("{arch}.attention.q_lora_rank", None, required_for=need),
        "o_groups": model.get_int("{arch}.attention.output_group_count", None, required_for=need),
        "o_lora": model.get_int("{arch}.attention.output_lora_rank", None, required_for=need),
    }


def _dsv4_inputs(b):
    """llm_graph_input_dsv4: the raw window cache's k_idxs and mask, and per compressed kind its state
    positions, write positions / indices, read and persist indices and mask (f16 with flash attention,
    the lightning indexer's always), plus the Hadamard rotations (the indexer's always)."""
    g, T = b.g, b.T
    mask_type = F16_BYTES if b.fa else F32_BYTES
    b.k_idxs["swa"] = g.input(I64_BYTES * T)
    b.masks["swa"] = g.input(mask_type * b.cells["swa"] * T)
    quantized = kvmod.cache_type(b.settings.ctk)[0] > 1
    head = b.shape.dsv4["head"]
    b.k_rot = g.input(b.f32(_nrot(head), _nrot(head))) if quantized and head % 64 == 0 else None
    b.dsv4_inputs = {}
    for kind, ratio in (("csa", 4), ("hca", 128), ("indexer", 4)):
        if kind not in b.cells:
            continue
        rows = DSV4_STATE_ROWS[ratio]
        blocks = _dsv4_blocks(b, ratio)
        inputs = {"pos": g.input(I32_BYTES * T), "write_pos": g.input(I32_BYTES * blocks),
                  "read": g.input(I32_BYTES * (2 if ratio == 4 else 1) * ratio * blocks),
                  "write": g.input(I64_BYTES * blocks), "persist_src": g.input(I32_BYTES * rows),
                  "persist_dst": g.input(I32_BYTES * rows),
                  "mask": g.input((F16_BYTES if kind == "indexer" else mask_type) * b.cells[kind] * T)}
        if b.settings.rs_seq:  # dsv4_build_comp_plan: the state's rollback planes (MTP drafting's n_rs_seq)
            restored = rows * max(1, b.settings.n_seq)
            inputs.update(restore_src=g.input(I32_BYTES * restored), restore_dst=g.input(I32_BYTES * restored),
                          snapshot_src=g.input(I32_BYTES * b.settings.rs_seq * restored),
                          snapshot_dst=g.input(I32_BYTES * b.settings.rs_seq * restored))
        width = b.shape.indexer_head if kind == "indexer" else head
        if kind == "indexer" or (quantized and width % 64 == 0):
            inputs["rot"] = g.input(b.f32(_nrot(width), _nrot(width)))
        b.dsv4_inputs[kind] = inputs


def _dsv4_blocks(b, ratio):
    """Compressed blocks a ubatch touches: per sequence stream (llama_kv_cache_dsv4 keeps one per
    sequence even with --kv-unified) its tokens' blocks plus one."""
    streams = max(1, b.settings.n_seq)
    return streams * (b.T // streams // ratio + 1)


def _nrot(width):
    nrot = 64
    while width % (nrot * 2) == 0:
        nrot *= 2
    return nrot


def _hadamard(b, x, rot, nbytes=None):
    """llama_mul_mat_hadamard: a (made contiguous / reshaped) x times the rotation, the same size
    (nbytes: that size when x is a view)."""
    return b.g.op(nbytes or x.nbytes, rot, b.g.view(x))


def _dsv4_hc_pre(b, stream):
    """build_hc_pre: rms norm of the flattened streams, their mixes, the pre / post weights (sigmoid
    affine of views: new tensors), the fused Sinkhorn combination and the fused weighted sum."""
    g, T, hc, n_embd = b.g, b.T, b.shape.dsv4["hc"], b.shape.n_embd
    flat = g.op(b.f32(hc * n_embd, T), g.view(stream))
    mixes = b.mm((2 + hc) * hc, flat)
    parts = []
    for _ in ("pre", "post"):
        part = g.op(b.f32(hc, T), g.view(mixes), b.weights)  # mul of a view: a new tensor
        for _ in range(3):  # add base, sigmoid, scale(_bias)
            part = g.op(part.nbytes, part, inplace=(0,))
        parts.append(part)
    comb = g.op(b.f32(hc, hc, T), mixes, b.weights, b.weights)  # GGML_OP_DSV4_HC_COMB
    return g.op(b.f32(n_embd, T), stream, parts[0]), parts[1], comb  # GGML_OP_DSV4_HC_PRE


def _dsv4_compress(b, kind, x, width, ratio):
    """The compressor of one kind: state kv / score projections of the layer input (the score plus its
    APE rows), the state sources (the stored rows concatenated with them), the block rows gathered,
    softmax-weighted and summed, normed, roped (and rotated), written to the compressed cache; the last
    rows kept in the state. Returns the state kv and score projections."""
    g, T = b.g, b.T
    inputs = b.dsv4_inputs[kind]
    rows = DSV4_STATE_ROWS[ratio]
    coff = 2 if ratio == 4 else 1
    blocks = _dsv4_blocks(b, ratio)
    kv = b.mm(coff * width, x)
    score = b.mm(coff * width, x)
    ape = g.op(b.f32(coff * width, T), b.weights, inputs["pos"])
    score = g.op(score.nbytes, score, ape, inplace=(0,))
    state_kv, state_score = g.view(b.cache), g.view(b.cache)
    live_rows = rows * max(1, b.settings.n_seq)  # every sequence's plane of state rows
    if "restore_src" in inputs:  # dsv4_build_state_restore: the live plane's rows gathered and stored back
        restored = []
        for state in (state_kv, state_score):
            gathered = g.op(b.f32(coff * width, live_rows), state, inputs["restore_src"])
            restored.append(g.write(b.cache, gathered, inputs["restore_dst"]))
        state_kv, state_score = restored
    source_kv = g.op(b.f32(coff * width, rows + T), g.view(state_kv), kv)
    source_score = g.op(b.f32(coff * width, rows + T), g.view(state_score), score)
    n_read = ratio * blocks
    if ratio == 4:  # build_overlap_compressed_kv_from_state: a zero (-inf) row appended first
        padded = []
        for source in (source_kv, source_score):
            row = g.op(b.f32(coff * width), g.view(source))
            padded.append(g.op(source.nbytes + row.nbytes, source, g.view(row)))
        kv_rows = g.op(b.f32(coff * width, 2 * n_read), padded[0], inputs["read"])
        score_rows = g.op(b.f32(coff * width, 2 * n_read), padded[1], inputs["read"])
        halves = [g.op(b.f32(width, n_read), g.view(src)) for src in (kv_rows, kv_rows, score_rows, score_rows)]
        values = g.op(b.f32(width, 2 * ratio, blocks), g.view(halves[0]), g.view(halves[1]))
        scores = g.op(b.f32(width, 2 * ratio, blocks), g.view(halves[2]), g.view(halves[3]))
    else:  # build_hca_compressed_kv_from_state
        values = g.op(b.f32(width, n_read), source_kv, inputs["read"])
        scores = g.op(b.f32(width, n_read), source_score, inputs["read"])
    values = g.op(values.nbytes, g.view(g.view(values)))  # cont(permute)
    scores = g.op(scores.nbytes, g.view(g.view(scores)))
    weights = g.op(scores.nbytes, scores, inplace=(0,))  # soft_max
    comp = g.op(values.nbytes, values, weights, inplace=(0, 1))
    comp = g.op(b.f32(width, blocks), comp)  # sum_rows
    comp = g.op(comp.nbytes, g.view(comp))  # cont(permute)
    comp = g.op(comp.nbytes, g.op(comp.nbytes, comp, inplace=(0,)), b.weights, inplace=(0,))  # rms norm, weight
    comp = g.op(comp.nbytes, comp, inputs["write_pos"], inplace=(0,))  # rope
    if "rot" in inputs:
        comp = _hadamard(b, comp, inputs["rot"])
    g.expand(g.view(b.cache, g.view(comp), inputs["write"]))
    if "snapshot_src" in inputs:  # dsv4_build_state_snapshot: rows of every plane and the new rows, stored
        planes = live_rows * (1 + b.settings.rs_seq)
        sources = [g.op(b.f32(coff * width, planes + T), state, new) for state, new in ((state_kv, kv), (state_score, score))]
        for source in sources:
            gathered = g.op(b.f32(coff * width, b.settings.rs_seq * live_rows), source, inputs["snapshot_src"])
            g.expand(g.write(b.cache, gathered, inputs["snapshot_dst"]))
    for source in (kv, score):
        persist = g.op(b.f32(coff * width, rows), source, inputs["persist_src"])
        g.expand(g.view(b.cache, persist, inputs["persist_dst"]))
    return kv, score


def _dsv4_attention(b, il, x, ratio):
    """build_attention_impl: q from the q latent (rms-normed per head, roped), one K/V head (normed,
    roped), the layer's compressors, then attention over the raw window (and the compressed rows:
    csa's top-k of the lightning indexer's scores, or every hca row) with sinks, de-roped, the grouped
    low-rank output projection."""
    g, T, d = b.g, b.T, b.shape.dsv4
    n_head, head = b.shape.n_head[il], d["head"]
    qr = b.norm(b.mm(d["q_lora"], x), d["q_lora"])
    q = b.mm(n_head * head, qr)
    q = g.op(q.nbytes, g.view(q))  # rms_norm of the per-head reshape
    q = g.op(q.nbytes, q, b.pos, inplace=(0,))
    kv = b.norm(b.mm(head, x), head)
    kv = g.op(kv.nbytes, g.view(kv), b.pos)  # rope of the reshape
    if ratio == 128:
        _dsv4_compress(b, "hca", x, head, 128)
    elif ratio == 4:
        _dsv4_compress(b, "csa", x, head, 4)
        _dsv4_compress(b, "indexer", x, b.shape.indexer_head, 4)
    kind = {4: "csa", 128: "hca"}.get(ratio)
    raw_cells = b.cells["swa"]
    mask = b.masks["swa"]
    n_kv = raw_cells
    if kind == "csa":
        inputs = b.dsv4_inputs["indexer"]
        heads, width = b.shape.indexer_heads, b.shape.indexer_head
        iq = b.mm(heads * width, qr)
        iq = g.op(iq.nbytes, g.view(iq), b.pos)  # rope of the reshape
        iq = _hadamard(b, iq, inputs["rot"])
        iw = b.mm(heads, x)
        iw = g.op(iw.nbytes, iw, inplace=(0,))  # scale
        n_lid = b.cells["indexer"]
        scores = g.op(b.f32(n_lid, T), g.view(iq), g.view(b.cache), g.view(iw), inputs["mask"])
        k_top = min(n_lid, b.shape.indexer_top_k)
        top_k = g.op(I32_BYTES * k_top * T, scores)
        top_k = g.op(top_k.nbytes, g.view(top_k))  # cont
    if b.k_rot is not None:
        q = _hadamard(b, q, b.k_rot)
        kv = _hadamard(b, kv, b.k_rot)
    g.expand(q)
    g.expand(kv)
    g.expand(g.view(b.cache, g.view(kv), b.k_idxs["swa"]))
    k = g.view(b.cache)
    mask_type = F16_BYTES if b.fa else F32_BYTES
    if kind is not None:
        n_comp = b.cells[kind]
        n_kv = raw_cells + n_comp
        k = g.op(kvmod.row_bytes(b.settings.ctk, head) * n_kv * b.settings.n_seq, g.view(b.cache), g.view(b.cache))  # concat
        comp_mask = b.dsv4_inputs[kind]["mask"]
        if kind == "csa":  # build_top_k_mask
            filled = g.op(comp_mask.nbytes, comp_mask, inplace=(0,))
            empty = _Tensor(mask_type * k_top * T, has_op=False)
            if b.homes is not None:
                empty.device = b.dev  # (a leaf without a buffer goes to its consumer's backend)
            zeros = g.op(empty.nbytes, empty, inplace=(0,))
            unmasked = _Tensor(0, (zeros, g.view(top_k), g.view(filled)), view_src=filled)
            # add: in place of the csa mask input when this is its last reader (ggml-alloc reuses an input too)
            comp_mask = g.op(filled.nbytes, g.view(unmasked), comp_mask, inplace=(0, 1))
        mask = g.op(mask_type * n_kv * T, mask, comp_mask)  # concat
    qv = g.view(g.view(q))
    if b.fa:
        cur = g.op(b.f32(head, n_head, T), qv, g.view(k), g.view(k), mask)
        cur = g.expand(g.view(cur))
    else:
        kq = g.op(b.f32(n_kv, T, n_head), g.view(k), qv)
        kq = g.op(kq.nbytes, kq, mask, b.weights, inplace=(0,))  # soft_max_ext with sinks
        v = g.op(kvmod.row_bytes(b.settings.ctk, head) * n_kv * b.settings.n_seq, g.view(g.view(k)))  # cont(transpose)
        kqv = g.op(b.f32(head, T, n_head), v, kq)
        cur = g.expand(g.op(b.f32(head * n_head, T), g.view(kqv)))
    if b.k_rot is not None:
        cur = _hadamard(b, cur, b.k_rot, b.f32(head, n_head, T))
    cur = g.op(b.f32(head, n_head, T), g.view(cur), b.pos)  # rope_back of the reshape
    oa = g.op(b.f32(d["o_lora"], T, d["o_groups"]), b.weights, g.view(g.view(cur)))
    oa = g.op(oa.nbytes, g.view(oa))  # cont_2d of the permute
    return b.mm(b.shape.n_embd, oa)


def _ihc_reduce(b, x, pre, tokens):
    """hy_v4_hc_reduce: x cast to f32 (a copy), each stream times its weight, summed, cast back."""
    g, hc, n_embd = b.g, b.shape.dsv4["hc"], b.shape.n_embd
    x_f32 = g.op(b.f32(n_embd, hc, tokens), x)
    cur = None
    for _ in range(hc):
        part = g.op(b.f32(n_embd, tokens), g.view(x_f32), g.view(pre))
        cur = part if cur is None else g.op(part.nbytes, cur, part, inplace=(0,))
    return g.op(cur.nbytes, cur)


def _ihc_pre(b, stream):
    """llama_model_hy_v4::graph::build_hc_pre (unfused, no Sinkhorn term): rms norm of the flattened
    streams, 2 x hc mixes, pre and post weights (sigmoid affine of views), the weighted reduce."""
    g, T, hc, n_embd = b.g, b.T, b.shape.dsv4["hc"], b.shape.n_embd
    flat = g.op(b.f32(hc * n_embd, T), g.view(stream))
    mixes = b.mm(2 * hc, flat)
    pre = g.op(b.f32(hc, T), g.view(mixes), b.weights)
    for _ in range(3):  # add base, sigmoid, scale_bias
        pre = g.op(pre.nbytes, pre, inplace=(0,))
    post = g.op(b.f32(hc, T), g.view(mixes), b.weights)
    for _ in range(4):  # add base, sigmoid, scale (magnitude), scale_bias
        post = g.op(post.nbytes, post, inplace=(0,))
    return _ihc_reduce(b, stream, pre, T), post


def _ihc_post(b, x, residual, post):
    """build_hc_post: x, post and the residual cast to f32, per stream residual + x x post (concatenated
    one stream at a time), cast back."""
    g, T, hc, n_embd = b.g, b.T, b.shape.dsv4["hc"], b.shape.n_embd
    x_f32 = g.op(x.nbytes, x)
    post_f32 = g.op(post.nbytes, post)
    res_f32 = g.op(b.f32(n_embd, hc, T), residual)
    out = None
    for i in range(hc):
        # (x x post: in place of the f32 copy of x at its last reader, the last stream)
        cur = g.op(b.f32(n_embd, T), g.view(res_f32), g.op(b.f32(n_embd, T), x_f32, g.view(post_f32), inplace=(0,)), inplace=(0, 1))
        cur = g.view(cur)
        out = cur if out is None else g.op(b.f32(n_embd, i + 1, T), out, cur)
    return g.op(b.f32(n_embd, hc, T), out)


def _build_dsv4(b, graph_shape, layer_set, output, out_ids, n_out, lookup):
    """The hyper-connection graphs: llama_model_deepseek4::graph (fused pre/post mixes with a Sinkhorn
    combination, its own attention, sqrt-softplus MoE) and llama_model_hy_v4::graph (unfused iHC mixes
    around MLA / DSA attention, a dense lead FFN). The embedding repeated into hc streams, per layer a
    pre-mix, the mixer, a post-mix, again around the FFN; the streams' output rows, the head's
    (unfused) mix, the norm and the logits."""
    g, n_embd, hc = b.g, graph_shape.n_embd, graph_shape.dsv4["hc"]
    ihc = graph_shape.architecture == "hy_v4"
    glm5 = graph_shape.architecture == "glm5-next"
    if ihc:
        build_attn_inp(b, ["full"])
        if graph_shape.indexer_heads:
            _dsa_inputs(b)
    elif glm5:
        _glm5_inputs(b)
    else:
        _dsv4_inputs(b)
    stream = g.op(b.f32(n_embd, hc, b.T), g.view(lookup))  # repeat_4d
    for il, layer in enumerate(graph_shape.layers):
        if il not in layer_set:
            continue
        if b.homes is not None:
            b.move(b.homes.layer_device[il], il)
        residual = stream
        if ihc:
            cur, post = _ihc_pre(b, stream)
            cur = _mla_layer(b, il, b.norm(cur, n_embd), layer)
            stream = _ihc_post(b, cur, residual, post)
            residual = stream
            cur, post = _ihc_pre(b, stream)
        else:
            cur, post, comb = _dsv4_hc_pre(b, stream)
            cur = b.norm(cur, n_embd)
            if glm5:  # glm5-next.cpp expands the attention norm before the layer body
                g.expand(cur)
                cur = _kda_layer(b, il, cur, layer) if layer.mixer == "kda" else _glm5_dsa_layer(b, il, cur, layer)
            else:
                cur = _dsv4_attention(b, il, cur, b.kv.compress_ratios[il])
            stream = g.op(b.f32(n_embd, hc, b.T), cur, residual, post, comb)  # GGML_OP_DSV4_HC_POST
            residual = stream
            cur, post, comb = _dsv4_hc_pre(b, stream)
            if not glm5:
                for tensor in (residual, post, comb):
                    g.expand(tensor)
        x = b.norm(cur, n_embd)
        out = build_moe_ffn(b, il, x, layer) if layer.ffn == "moe" else build_ffn(b, x, layer.n_ff, layer.ffn_gated)
        if ihc:
            stream = _ihc_post(b, out, residual, post)
        else:
            stream = g.op(b.f32(n_embd, hc, b.T), out, residual, post, comb)
        if ihc or glm5:
            g.expand(stream)
        g.boundaries.append(stream)
    if not output:
        g.expand(stream)
        return g
    if b.homes is not None:
        b.move(b.homes.layer_device[-1], -1)
    rows = g.op(b.f32(n_embd * hc, n_out), g.view(stream), out_ids)
    b.T = n_out
    if glm5:  # build_hc_mean: the streams summed (views: a new tensor, then in place) and scaled
        cur = g.op(b.f32(n_embd, n_out), g.view(rows), g.view(rows))
        for _ in range(hc - 2):
            cur = g.op(cur.nbytes, cur, g.view(rows), inplace=(0,))
        cur = b.norm(g.op(cur.nbytes, cur, inplace=(0,)), n_embd)  # scale 1/hc, the output norm
        cur.is_output = True
        logits = b.mm(graph_shape.n_vocab, cur)
        logits.is_output = True
        g.expand(logits)
        return g
    _dsv4_head(b, rows, n_out, ihc)
    return g


def _dsv4_head(b, rows, n_out, ihc=False):
    """build_hc_head over the streams' output rows: their mix weights (rms norm of the reshape, the mix
    projection, scale / base / sigmoid / bias in place), the weighted sum of the streams, the head norm
    (an output) and the logits."""
    g, hc, n_embd = b.g, b.shape.dsv4["hc"], b.shape.n_embd
    flat = g.op(rows.nbytes, g.view(rows))  # rms_norm of the reshape
    pre = b.mm(hc, flat)
    for _ in range(4):  # mul scale, add base, sigmoid, scale_bias
        pre = g.op(pre.nbytes, pre, inplace=(0,))
    if ihc:
        cur = _ihc_reduce(b, g.view(rows), pre, n_out)
    else:
        cur = None
        for _ in range(hc):  # build_hc_pre unfused (il -1): one weighted stream at a time
            stream = g.view(rows)
            # a stream's (strided) view is what the scheduler copies to another backend, with its layout:
            # ggml_nbytes of the view, n_out - 1 rows of every stream plus one stream's last row
            stream.nbytes = b.f32(hc * n_embd * (n_out - 1) + n_embd)
            part = g.op(b.f32(n_embd, n_out), stream, g.view(pre))
            cur = part if cur is None else g.op(part.nbytes, cur, part, inplace=(0,))
    cur = b.norm(cur, n_embd)
    cur.is_output = True
    logits = b.mm(b.shape.n_vocab, cur)
    logits.is_output = True
    g.expand(logits)


def _build_mtp_dsv4(b, graph_shape, n_out):
    """llama_model_deepseek4::graph_mtp: the token embedding (CPU) normed and repeated into the hc
    streams, concatenated with the normed streams of the trunk's hidden state (mtp_h_input, hc x n_embd
    wide), eh_proj, then the NextN block as a trunk
    block (hc pre-mix, its sliding-window attention through llm_graph_input_attn_k_iswa, hc post-mix,
    the MoE), the streams' output rows (t_h_nextn) and the head's mix, norm and logits."""
    g, T, shape = b.g, b.T, b.shape
    n_embd, hc = shape.n_embd, shape.dsv4["hc"]
    il = min(shape.mtp_layers)
    layer = shape.mtp_layers[il]
    tokens_in = g.input(I32_BYTES * T)
    if b.homes is not None:
        b.move(HOST, -1)
    lookup = g.op(b.f32(n_embd, T), b.weights, tokens_in)
    lookup.host = True
    lookup.offloadable = False
    hidden = g.input(b.f32(hc * n_embd, T))
    b.pos = g.input(I32_BYTES * T)
    out_ids = g.input(I32_BYTES * n_out)
    build_attn_inp(b, ["swa"])
    if b.homes is not None:
        b.move(b.homes.layer_device[il], il)
    h_norm = b.norm(g.view(hidden), hc * n_embd)  # of the input's reshape (a view: a new tensor)
    e_norm = b.norm(lookup, n_embd)
    e_norm = g.op(b.f32(n_embd, hc, T), g.view(e_norm))  # repeat_4d of the reshape
    concat = g.op(b.f32(2 * n_embd, hc, T), e_norm, h_norm)
    stream = b.mm(n_embd, concat, hc * T)  # eh_proj over every stream
    residual = stream
    cur, post, comb = _dsv4_hc_pre(b, stream)
    cur = _dsv4_attention(b, il, b.norm(cur, n_embd), 0)
    stream = g.op(b.f32(n_embd, hc, T), cur, residual, post, comb)  # GGML_OP_DSV4_HC_POST
    residual = stream
    cur, post, comb = _dsv4_hc_pre(b, stream)
    out = build_moe_ffn(b, il, b.norm(cur, n_embd), layer)
    stream = g.op(b.f32(n_embd, hc, T), out, residual, post, comb)
    rows = g.op(b.f32(n_embd * hc, n_out), g.view(stream), out_ids)  # h_nextn
    rows.is_output = True
    b.T = n_out
    if b.homes is not None:
        b.move(b.homes.layer_device[-1], -1)
    _dsv4_head(b, rows, n_out)
    return g
