"""What the NextN (MTP) graphs of several architectures share (src/models/*.cpp graph_mtp): the input
fusion (enorm / hnorm of the token embedding and the target's hidden state, eh_proj), the shared head
norm and the output head.
"""

from moetools.devicefit.ggml.allocator import HOST, I32_BYTES
from moetools.devicefit.graph.context import build_attn_inp


def _mtp_head_norm(b, layer, cur):
    """The head norm of an MTP graph where its weight lives (head_norm_own: the block's device)."""
    if not layer.head_norm_own and b.homes is not None:
        b.move(b.homes.layer_device[-1], -1)
    return b.norm(cur, b.shape.n_embd)


def _mtp_prologue(b, graph_shape, il, n_out, kinds):
    """graph_mtp's inputs and input fusion: the token embedding (get_rows on the host) and the target's
    hidden state (mtp_h_input), each normed (enorm / hnorm), concatenated and projected by eh_proj.
    Returns (the projection, out_ids)."""
    g, T, n_embd = b.g, b.T, graph_shape.n_embd
    # a sliding-window model's MTP context is a llama_kv_cache_iswa even when its NextN blocks use one
    # of the two caches only (llama_model::create_memory filters the layers, not the cache type)
    b.iswa = any(b.kv.is_swa)
    tokens_in = g.input(I32_BYTES * T)
    if b.homes is not None:
        b.move(HOST, -1)
    lookup = g.op(b.f32(n_embd, T), b.weights, tokens_in)
    lookup.host = True
    lookup.offloadable = False
    hidden = g.input(b.f32(n_embd, T))
    b.pos = g.input(I32_BYTES * T * graph_shape.pos_per_token)
    out_ids = g.input(I32_BYTES * n_out)
    build_attn_inp(b, kinds)
    if b.homes is not None:
        b.move(b.homes.layer_device[il], il)
    h_norm = b.norm(hidden, n_embd)
    e_norm = b.norm(lookup, n_embd)
    return b.mm(n_embd, g.op(b.f32(2 * n_embd, T), e_norm, h_norm)), out_ids


def _mtp_head(b, graph_shape, cur, n_out, scale=False):
    """The LM head of an MTP graph on the output layer's device (model.output), optionally scaled
    (cohere2moe's logit scale: in place)."""
    if b.homes is not None:
        b.move(b.homes.layer_device[-1], -1)
    logits = b.mm(graph_shape.n_vocab, cur)
    if scale:
        logits = b.g.op(logits.nbytes, logits, inplace=(0,))
    logits.is_output = True
    b.g.expand(logits)
    return b.g
