"""The MTP draft context (--spec-type draft-mtp): the NextN blocks' graph (src/models/*.cpp graph_mtp,
llama_context's MTP context) and its compute buffer.
"""

import importlib

from moetools.arch.registry import profile, resolve
from moetools.devicefit import kv as kvmod
from moetools.devicefit.buffers import (ALIGNMENT, PIPELINE_COPIES, _MEMO_MAX, _placement_key, homes_of, output_rows,
    pipeline_parallel, reserve_tokens)
from moetools.devicefit.ggml.allocator import HOST, I32_BYTES
from moetools.devicefit.ggml.scheduler import peaks, schedule
from moetools.devicefit.graph.archsets import MTP_ISWA_ARCHES, MTP_ROWS_AFTER_ATTENTION, MTP_ROWS_BEFORE_HEAD_NORM
from moetools.devicefit.graph.common import build_ffn, build_attn, build_moe_ffn
from moetools.devicefit.graph.context import _Build, build_attn_inp
from moetools.devicefit.graph.mixers.mla import _mla_layer
from moetools.devicefit.graph.nextn import _mtp_head_norm


def mtp_block_missing(architecture, layers):
    """(the first NextN block lacking something, what it lacks, what llama.cpp then does), or None. What a
    loader needs is declared as MTP_NEEDS by the module of the architecture's bespoke MTP graph."""
    builder = profile(architecture).mtp_builder
    needs = getattr(importlib.import_module(builder.split(":")[0]), "MTP_NEEDS", ()) if builder else ()
    for test, need, effect in needs:
        for il, layer in sorted(layers.items()):
            if not test(layer):
                return il, need, effect.format(il=il)
    return None


def _build_mtp(graph_shape, kvshape, caches, settings, tokens, streams, homes=None, outputs=None):
    """The MTP context's worst-case graph (graph_mtp at nextn_layer_offset 0: its first NextN block)."""
    b = _Build(graph_shape, kvshape, caches, settings, tokens, streams, homes)
    builder = resolve(profile(graph_shape.architecture).mtp_builder)  # deepseek4, cohere2moe, mimo2
    if builder is not None:
        return builder(b, graph_shape, min(outputs, tokens) if outputs else tokens)
    g, T, n_embd = b.g, tokens, graph_shape.n_embd
    n_out = min(outputs, T) if outputs else T
    il = min(graph_shape.mtp_layers)
    layer = graph_shape.mtp_layers[il]
    arch = graph_shape.architecture
    b.iswa = arch in MTP_ISWA_ARCHES
    tokens_in = g.input(I32_BYTES * T)
    if homes is not None:
        b.move(HOST, -1)
    lookup = g.op(b.f32(n_embd, T), b.weights, tokens_in)  # the token embedding stays on the CPU
    lookup.host = True
    lookup.offloadable = False
    hidden = g.input(b.f32(n_embd, T))  # mtp_h_input: the target's last hidden state
    b.pos = g.input(I32_BYTES * T * graph_shape.pos_per_token)
    out_ids = g.input(I32_BYTES * n_out)
    build_attn_inp(b, [kind for kind in ("full", "swa") if kind in b.cells] if b.iswa else ["full"])
    if homes is not None:
        b.move(homes.layer_device[il], il)
    h_norm = b.norm(hidden, n_embd)
    e_norm = b.norm(lookup, n_embd)
    concat = g.op(b.f32(2 * n_embd, T), e_norm, h_norm)
    cur = b.mm(n_embd, concat)  # eh_proj
    residual = cur
    x = b.norm(cur, n_embd)
    mixed = _mla_layer(b, il, x, layer) if layer.mixer == "mla" else build_attn(b, il, x, layer)
    nemotron = profile(arch).mtp_crop_before_ffn  # nemotron-h-moe.cpp's NextN block
    rows_dropped = graph_shape.architecture in MTP_ROWS_AFTER_ATTENTION
    if rows_dropped:
        mixed = g.op(mixed.nbytes // T * n_out, mixed, out_ids)
        residual = g.op(b.f32(n_embd, n_out), residual, out_ids)
        T = b.T = n_out
    cur = g.op(b.f32(n_embd, T), mixed, residual, inplace=(0, 1))
    # nemotron-h-moe.cpp graph_mtp: crop_before_ffn = inp_out_ids && (!embeddings_nextn || masked), true
    # for a drafting context: the MoE runs on the output rows
    if nemotron:
        cur = g.op(b.f32(n_embd, n_out), cur, out_ids)
        T = b.T = n_out
        rows_dropped = True
    ffn_in = cur
    x = b.norm(cur, n_embd)
    if nemotron:  # router logits, then the (ungated, relu^2) shared expert, then the routed experts
        logits = b.mm(layer.n_expert, x)
        shared = build_ffn(b, x, layer.n_ff_shexp, layer.shexp_gated)
        out = build_moe_ffn(b, il, x, layer, logits=logits, shared=shared)
    else:
        out = build_moe_ffn(b, il, x, layer) if layer.ffn == "moe" else build_ffn(b, x, layer.n_ff)
    cur = g.op(b.f32(n_embd, T), out, ffn_in, inplace=(0, 1))
    if nemotron:  # shared_head_norm is a LayerNorm (GGML_OP_NORM: a new tensor), then its weight in place
        cur = g.op(b.f32(n_embd, T), cur)
        cur = g.op(cur.nbytes, cur, b.weights, inplace=(0,))
        cur.is_output = True
    elif arch in MTP_ROWS_BEFORE_HEAD_NORM:  # t_h_nextn: the block's output rows, then the head norm
        cur = g.op(b.f32(n_embd, n_out), cur, out_ids)
        cur.is_output = True
        T = b.T = n_out
        rows_dropped = True
        cur = b.norm(cur, n_embd)
    else:
        cur = _mtp_head_norm(b, layer, cur)  # shared_head_norm: t_h_nextn, an output of every row
        cur.is_output = True
    if not rows_dropped:
        cur = g.op(b.f32(n_embd, n_out), cur, out_ids)
        T = b.T = n_out
    if homes is not None and not graph_shape.mtp_own_head:
        b.move(homes.layer_device[-1], -1)  # the LM head (model.output) lives with the output layer
    logits = b.mm(graph_shape.n_vocab, cur)
    logits.is_output = True
    g.expand(logits)
    return g


def mtp_kv_shape(kvshape, blocks):
    """The KVShape of an MTP context: a plain attention cache of the NextN blocks only (the
    ctx_type MTP branches of llama_model::create_memory: no DSA indexer, no recurrent state)."""
    n = kvshape.block_count
    changes = dict(has_kv=[il in blocks and bool(kvshape.head_count_kv[il]) for il in range(n)],
                   indexer_layers=[False] * n, is_recurrent=[False] * n)
    if profile(kvshape.architecture).dsv4_cache:  # llama_kv_cache_iswa of the NextN block (sliding-window): no
        changes.update(compress_ratios=[], mla=False)  # compressed caches, K and V (no MLA widths in its hparams)
    return kvshape.replace(**changes)


def mtp_placement_compute(facts, placement, kinds, settings, ctx, outputs=None):
    """{device key: compute buffer bytes} of the MTP context over the target's placement (the same
    model, so the same devices, pipeline parallelism and op offload), memoised on the facts.
    settings: the MTP context's (draft cache types); outputs: its n_outputs_max (-np)."""
    memo = facts.graph.__dict__.setdefault("_mtp_memo", {})
    key = _placement_key(placement, kinds, settings, ctx, outputs)
    if key not in memo:
        if len(memo) >= _MEMO_MAX:
            memo.clear()
        kvshape = mtp_kv_shape(facts.shape, set(facts.graph.mtp_layers))
        caches = kvmod.kv_caches(kvshape, ctx, settings)
        tokens, streams = reserve_tokens(settings, ctx)
        graph = _build_mtp(facts.graph, kvshape, caches, settings, tokens, streams, homes_of(facts, placement),
                           output_rows(settings, ctx, outputs))
        backends = [k for k in kinds if k != HOST] + [HOST]
        offload_to = next((k for k in backends if kinds[k] == "gpu"), None)
        pipeline = pipeline_parallel(placement, len(kinds) - 1)
        leafs, nodes = schedule(graph, backends, offload_to, tokens, PIPELINE_COPIES if pipeline else 1)
        memo[key] = peaks(graph, leafs, nodes, {k: ALIGNMENT[kinds[k]] for k in backends})
    return memo[key]
