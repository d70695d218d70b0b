"""The generic layer loop: llama.cpp's per-architecture graph builders that follow the common shape
(src/models/<arch>.cpp: embeddings, per layer norm / mixer / residual / norm / FFN / residual, output
norm and logits), with the layer's mixer chosen from graph_shape. Whole-model graphs that do not
follow it live in graph/models/.
"""

from moetools.arch.registry import profile, resolve
from moetools.devicefit.ggml.allocator import HOST, I32_BYTES
from moetools.devicefit.graph.archsets import (EVERY_ROW_ARCHES, NEXTN_RAW_STATE, NEXTN_TAIL, NORMED_RESIDUAL_ARCHES,
    NORM_FIRST_ARCHES, PARALLEL_FFN_ARCHES, PARALLEL_SSM_ARCHES, POST_NORM_ARCHES)
from moetools.devicefit.graph.common import _ResidualStack, _backend_top_k, build_ffn, build_attn, build_moe_ffn
from moetools.devicefit.graph.context import _Build, _Slots, build_attn_inp
from moetools.devicefit.graph.mixers.gdn import _gdn_layer
from moetools.devicefit.graph.mixers.kda import _bailing_kda_layer, _kda_layer
from moetools.devicefit.graph.mixers.lightning import _lightning_layer
from moetools.devicefit.graph.mixers.mamba import MAMBA1, MAMBA2, _mamba2_layer, _mamba_layer
from moetools.devicefit.graph.mixers.mla import _dsa_inputs, _mla_layer
from moetools.devicefit.graph.mixers.msa import _msa_inputs, _msa_layer
from moetools.devicefit.graph.mixers.rwkv import RWKV6, RWKV6_MIXERS, RWKV7, RWKV_MIXERS, _rwkv6_block, _rwkv7_block
from moetools.devicefit.graph.mixers.shortconv import _shortconv_layer
from moetools.devicefit.graph.models.cohere2moe import _cohere2moe_block
from moetools.devicefit.graph.models.gemma3n import _build_gemma3n
from moetools.devicefit.graph.models.gemma4_assistant import _build_assistant


# mixers whose builder first expands a gather of the cached state (build_rs), which does not depend
# on the layer input: the loaders expand nothing at a layer's end, so it runs before the previous tail
STATE_FIRST_MIXERS = (MAMBA1, MAMBA2, "shortconv", "lightning", "bkda")


# LayerShape.mixer -> its builder (b, il, x, layer) -> the mixer's output (models.h's layer families,
# graph/mixers/). Two cases stay in _build: an indexed attention layer of an MSA model, and falcon-h1's
# attention beside Mamba-2 (which reads the un-normed layer input too). A mixer not listed builds nothing.
MIXERS = {
    "attention": build_attn,
    "mla": _mla_layer,
    "kda": _kda_layer,
    "bkda": _bailing_kda_layer,
    "gdn": _gdn_layer,
    "lightning": _lightning_layer,
    MAMBA2: _mamba2_layer,
    MAMBA1: _mamba_layer,
    "shortconv": _shortconv_layer,
}


RUN_KEPT = 4  # identical consecutive layers replayed before the allocator is taken to repeat itself
RUN_KEPT_SPLIT = 2  # the same for a placement's replay (checked equal to RUN_KEPT on the K2-class plans)


def _repeats(graph_shape, kvshape, layer_set, homes=None, kept=()):
    """Layers left out of the replay: within a run of identical consecutive layers, all after the
    first RUN_KEPT (the last layer, which drops the non-output rows, is always kept). ggml-alloc
    reaches the same free-block layout after a layer or two of the same shape, so the rest repeat
    its high-water mark; checked against llama.cpp's figures in tests/test_devicefit_compute.py.
    kept: layers whose input stays allocated to the end (settings.layer_inputs): each breaks a run."""
    def signature(il):
        where = None
        if homes is not None:  # a layer on another device, or with its experts elsewhere, is not a repeat
            where = (homes.layer_device[il], tuple(sorted(homes.expert_device.get(il, {}).items())))
        # a layer reusing an earlier layer's KV (gemma4) is never a repeat: it builds no K/V, and its reads
        # of a cache on another device are copies that stay (pipeline parallelism pins them)
        shared = il if kvshape.kv_from_start and il >= kvshape.kv_from_start else -1
        return (graph_shape.layers[il].as_tuple(), graph_shape.n_head[il], kvshape.head_count_kv[il],
                kvshape.k_width[il], kvshape.v_width[il], kvshape.is_swa[il], where, il in kept, shared)
    if graph_shape.attn_res_block or graph_shape.altup:
        # the residual stack grows: no two layers see the same allocator state (gemma3n: replayed whole)
        return set()
    if graph_shape.indexer_heads:
        # every DSA layer's zero-filled top-k source is a graph leaf, allocated before the first node
        # and freed in its layer: the free blocks shift from layer to layer (measured: leaving repeats
        # out lost a third of DeepSeek-V3.2's buffer)
        return set()
    if any(layer.mixer == "lightning" for layer in graph_shape.layers):
        # minimax-01's stream moves to the experts' output every layer and the next layer's state gathers
        # run before that: the free blocks alternate between two layouts, so leaving an odd number of
        # layers out shifts everything after (measured: 6% over on a tiny model at MiniMax-Text-01's width)
        return set()
    skipped, run, previous = set(), 0, None
    last = len(graph_shape.layers) - 1
    for il in sorted(layer_set):
        key = signature(il)
        run = run + 1 if key == previous else 1
        previous = key
        if run > (RUN_KEPT if homes is None else RUN_KEPT_SPLIT) and il != last:
            skipped.add(il)
    return skipped


def _mlp_beside_experts(b, il, attn_out, layer):
    """gemma4.cpp's MoE block: the dense GeGLU MLP (ffn_norm, then post_ffw_norm_1), the experts' input
    (pre_ffw_norm_2), the router's logits from a bare rms_norm of the block input, scaled and times
    ffn_gate_inp.scale, the experts (then post_ffw_norm_2), and the two branches added."""
    g, T, n_embd = b.g, b.T, b.shape.n_embd
    mlp = b.norm(build_ffn(b, b.norm(attn_out, n_embd), layer.n_ff_beside), n_embd)
    moe_in = b.norm(attn_out, n_embd)
    tmp = g.op(b.f32(n_embd, T), attn_out)  # ggml_rms_norm: a new tensor (attn_out is read on)
    tmp = g.op(tmp.nbytes, b.unary(tmp, tmp.nbytes), b.weights, inplace=(0,))  # scale, times the router scale
    moe = b.norm(build_moe_ffn(b, il, moe_in, layer, logits=b.mm(layer.n_expert, tmp)), n_embd)
    return g.op(b.f32(n_embd, T), mlp, moe, inplace=(0, 1))


def _build(graph_shape, kvshape, caches, settings, tokens, streams, layers, output, homes=None, outputs=None):
    """outputs: rows the graph outputs (output_rows: llama_context's min(n_ubatch, n_outputs_max) before
    the tokens are rounded to the sequences; None: the settings' `outputs`, whose 0 means every token —
    a draft model's context outputs one row per sequence, llama-server's target one per sequence and
    drafted token)."""
    outputs = outputs or settings.outputs or None
    b = _Build(graph_shape, kvshape, caches, settings, tokens, streams, homes)
    g, T, n_embd = b.g, tokens, graph_shape.n_embd
    n_out = min(outputs, T) if outputs else T
    if kvshape.borrowed:
        return _build_assistant(b, layers, output, n_out)
    if graph_shape.architecture in EVERY_ROW_ARCHES:
        n_out = T
    # NextN/MTP blocks a device holds are not in the main graph (graph_shape.layers is the trunk)
    layer_set = set(range(len(graph_shape.layers))) if layers is None else {il for il in layers if il < len(graph_shape.layers)}
    skipped = _repeats(graph_shape, kvshape, layer_set, homes.real if isinstance(homes, _Slots) else homes,
                       settings.layer_inputs)
    tokens_in = g.input(I32_BYTES * T)
    embd_in = g.input(b.f32(n_embd, T)) if graph_shape.architecture not in EVERY_ROW_ARCHES else None
    if homes is not None:
        b.move(HOST, -1)  # the input layer (token embeddings) stays on the CPU
    lookup = g.op(b.f32(n_embd, T), b.weights, tokens_in)
    lookup.host = True
    lookup.offloadable = False  # GET_ROWS: batch size 0 for ggml-cuda's offload_op
    g.expand(lookup)
    if embd_in is not None:
        g.expand(embd_in)
    cur = lookup
    b.pos = g.input(I32_BYTES * T * graph_shape.pos_per_token)
    if graph_shape.dsv4:  # a hyper-connection graph: deepseek4.cpp's (also glm5-next, hy_v4) or qwen4exp.cpp's
        builder = resolve(profile(graph_shape.architecture).graph_builder)
        return builder(b, graph_shape, layer_set, output, g.input(I32_BYTES * n_out), n_out, lookup)
    kinds = [kind for kind in ("full", "swa") if kind in b.cells]
    build_attn_inp(b, kinds)
    if graph_shape.indexer_heads and "indexer" in b.cells:
        if graph_shape.indexer_block:
            _msa_inputs(b)
        else:
            _dsa_inputs(b)
    out_ids = g.input(I32_BYTES * n_out)
    if graph_shape.altup:
        return _build_gemma3n(b, graph_shape, layer_set, output, out_ids, n_out, lookup,
                              homes.layer_device[0] if homes is not None else None)
    last = len(graph_shape.layers) - 1
    dense_residual = profile(graph_shape.architecture).ffn_dense_residual  # arctic.cpp
    stack = _ResidualStack(b) if graph_shape.attn_res_block else None
    rwkv = {}  # RWKV-7: the first layer's v, mixed into every later layer
    for il, layer in enumerate(graph_shape.layers):
        if il not in layer_set or il in skipped:
            continue
        if layer.mixer in RWKV_MIXERS:
            if homes is not None:
                b.move(homes.layer_device[il], il)
            if il == 0 and layer.mixer in (RWKV6, RWKV7):  # rwkv6/7.cpp norm the token embedding (layer norm, bias)
                cur = g.op(b.f32(n_embd, T), cur)
                cur = g.op(cur.nbytes, g.op(cur.nbytes, cur, b.weights, inplace=(0,)), b.weights, inplace=(0,))
            if layer.mixer in RWKV6_MIXERS:
                cur = _rwkv6_block(b, il, cur, layer, last, out_ids, n_out)
            else:
                cur = _rwkv7_block(b, il, cur, layer, last, out_ids, n_out, rwkv)
            T = b.T
            g.boundaries.append(cur)
            continue
        if homes is not None:
            b.move(homes.layer_device[il], il)
        if il in settings.layer_inputs:
            cur.is_output = True  # res->t_layer_inp[il] = inpL, ggml_set_output: kept to the graph's end
        if graph_shape.architecture in PARALLEL_FFN_ARCHES:
            cur = _cohere2moe_block(b, il, cur, layer, rope=kvshape.is_swa[il] or layer.ffn == "dense")
            g.expand(cur)
            g.boundaries.append(cur)
            continue
        residual = cur
        banked = False
        if stack is not None:
            mixed_in = stack.mix(cur)
            if il % graph_shape.attn_res_block == 0:
                stack.push(cur)  # banks the raw layer input
                banked = True
            cur = mixed_in
        post_norm = graph_shape.architecture in POST_NORM_ARCHES
        x = cur if post_norm else b.norm(cur, n_embd)
        normed_residual = graph_shape.architecture in NORMED_RESIDUAL_ARCHES
        if normed_residual:
            residual = x
        if stack is not None or graph_shape.architecture in NORM_FIRST_ARCHES:
            # kimi-k3.cpp expands attn_norm before the layer body (so the mix runs before the push);
            # qwen3next.cpp / qwen35moe.cpp too (before the delta net gathers its states)
            g.expand(x)
        if layer.mixer == "attention" and b.msa is not None and kvshape.indexer_layers[il]:
            mixed = _msa_layer(b, il, x, layer)
        elif layer.mixer == "attention+mamba2":  # falcon-h1.cpp: a second norm of the input feeds the SSM
            attn = build_attn(b, il, x, layer)
            ssm = _mamba2_layer(b, il, b.norm(cur, n_embd), layer)
            mixed = g.op(b.f32(n_embd, T), attn, ssm, inplace=(0, 1))
        else:
            mixer = MIXERS.get(layer.mixer)
            mixed = mixer(b, il, x, layer) if mixer is not None else None
        if il == last and graph_shape.architecture in PARALLEL_SSM_ARCHES:
            # falcon-h1.cpp adds the residual before dropping the non-output rows
            cur = g.op(b.f32(n_embd, n_out), g.op(b.f32(n_embd, T), mixed, residual, inplace=(0, 1)), out_ids)
            mixed = None
            residual = cur
            T = b.T = n_out
        elif il == last and graph_shape.architecture not in NEXTN_TAIL and stack is None \
                and graph_shape.architecture not in EVERY_ROW_ARCHES:
            if mixed is not None:
                mixed = g.op(mixed.nbytes // T * n_out, mixed, out_ids)
            residual = g.op(b.f32(n_embd, n_out), residual, out_ids)
            T = b.T = n_out  # the rest runs on the output rows only
        if post_norm and mixed is not None:
            mixed = b.norm(mixed, n_embd)  # attn_post_norm (after the last layer's output rows are taken)
        if normed_residual:
            residual = g.op(residual.nbytes, residual, inplace=(0,))  # scale by residual_scale
        if banked and mixed is not None:
            cur = mixed  # the stream restarts from the mixer's output
        elif mixed is not None:
            pair = (residual, mixed) if graph_shape.residual_first else (mixed, residual)
            cur = g.op(b.f32(n_embd, T), *pair, inplace=(0, 1))
        else:
            cur = residual
        if layer.ffn == "moe" and dense_residual:
            # arctic.cpp: a dense n_embd-wide FFN of the normed ffn_inp, added to it; the experts read the
            # layer input (inpSA, alive until then) normed by ffn_norm_exps, and add to that sum
            dense = build_ffn(b, b.norm(cur, n_embd), n_embd)
            ffn_out = g.op(b.f32(n_embd, T), dense, cur, inplace=(0, 1))
            out = build_moe_ffn(b, il, b.norm(residual, n_embd), layer)
            cur = g.op(b.f32(n_embd, T), out, ffn_out, inplace=(0, 1))
        elif layer.ffn == "moe" and layer.n_ff_beside:
            out = _mlp_beside_experts(b, il, cur, layer)
            il_saved, b.il = b.il, -1  # ffn_post_norm, built with il = -1 (never pinned)
            out = b.norm(out, n_embd)
            b.il = il_saved
            cur = g.op(b.f32(n_embd, T), out, cur, inplace=(0, 1))
        elif layer.ffn != "none":
            ffn_in = cur
            x = cur if post_norm else b.norm(stack.mix(cur) if stack is not None else cur, n_embd)
            out = build_moe_ffn(b, il, x, layer) if layer.ffn == "moe" else build_ffn(b, x, layer.n_ff, layer.ffn_gated)
            if normed_residual:  # the FFN's residual is its normed input, scaled after the experts ran
                ffn_in = g.op(x.nbytes, x, inplace=(0,))
            if post_norm:  # ffn_post_norm, built with il = -1 (never pinned to the layer's device)
                il_saved, b.il = b.il, -1
                out = b.norm(out, n_embd)
                b.il = il_saved
            pair = (ffn_in, out) if graph_shape.residual_first else (out, ffn_in)
            cur = g.op(b.f32(n_embd, T), *pair, inplace=(0, 1))
        if layer.out_scale:  # ggml_mul by the layer's output scale: an op with a weight, on the layer's device
            cur = g.op(cur.nbytes, cur, b.weights, inplace=(0,))
        following = next((graph_shape.layers[j] for j in range(il + 1, last + 1) if j in layer_set and j not in skipped), None)
        if stack is None and (following is None or following.mixer not in STATE_FIRST_MIXERS):
            # (else the next layer's state gathering joins the graph before this layer's tail; kimi-k3.cpp
            # expands nothing at a layer's end, the last one included: the next mix's stack scores come
            # first — the final mix's, on the output layer's device, amid the last layer's tail)
            g.expand(cur)
        g.boundaries.append(cur)
    if stack is not None:  # the final mix, then the output rows
        if homes is not None:
            # output_res_score is an output-layer weight (LLM_TENSOR_LAYER_OUTPUT): its two score products
            # run on the output layer's device, and the stack's norm before them joins that split, in
            # the middle of the last layer's tail (its experts' sum is expanded, the rest is not yet)
            b.move(homes.layer_device[-1], -1)
        cur = g.op(b.f32(n_embd, n_out), stack.mix(cur), out_ids)
        T = b.T = n_out
    normed = False
    if graph_shape.architecture not in NEXTN_TAIL:
        # without the head the graph ends here (g.expand(cur) below): the nodes up to cur are the same
        # either way, in the same order (the head's expansion reaches cur's ancestors first)
        g.head_input = cur
    if graph_shape.architecture in NEXTN_TAIL:
        if graph_shape.architecture not in NEXTN_RAW_STATE and output:
            # t_h_nextn is the output norm of every row, on the output layer's device: the rows cross there
            if homes is not None:
                b.move(homes.layer_device[-1], -1)
            cur = b.norm(cur, n_embd)
            normed = True
        cur.is_output = True  # t_h_nextn
        cur = g.op(b.f32(n_embd, n_out), cur, out_ids)
        T = b.T = n_out
    if output:
        if homes is not None:
            b.move(homes.layer_device[-1], -1)
        if not normed:
            cur = b.norm(cur, n_embd)
        cur.is_output = True  # t_embd
        logits = b.mm(graph_shape.n_vocab, cur)
        logits.is_output = True
        g.expand(logits)
        if settings.sampled_rows:
            _backend_top_k(b, logits, graph_shape.n_vocab, n_out, min(settings.sampled_rows, n_out))
    else:
        g.expand(cur)
    return g
