"""RWKV-6 and RWKV-7 blocks (src/models/rwkv6*.cpp, rwkv7*.cpp, arwkv7.cpp; models.h's
llm_build_rwkv6_base / llm_build_rwkv7_base): token shift, time mix, channel mix.
"""

from moetools.devicefit.graph.common import build_ffn, build_rs

# LayerShape.mixer of the RWKV blocks: an RWKV architecture's profile names its own (mixer_name)
RWKV6, RWKV6_QWEN2, RWKV7, ARWKV7 = "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"
RWKV6_MIXERS = (RWKV6, RWKV6_QWEN2)
RWKV7_MIXERS = (RWKV7, ARWKV7)
RWKV_MIXERS = RWKV6_MIXERS + RWKV7_MIXERS


def _rwkv_qwen2_tail(b, il, out, inp, att, layer, last, out_ids, n_out):
    """The end of an RWKV block on a Qwen2 body (arwkv7.cpp, rwkv6qwen2.cpp): the token shift stored
    straight from the attention norm, the residual (of two reshapes: a new tensor), the last layer's
    output rows, the RMS-normed SwiGLU FFN and its residual."""
    g, n_embd = b.g, b.shape.n_embd
    g.expand(g.view(b.cache, g.view(att)))
    ffn_inp = g.view(g.op(b.f32(n_embd, b.T), out, inp))
    if il == last:
        ffn_inp = g.op(b.f32(n_embd, n_out), ffn_inp, out_ids)
        b.T = n_out
    out = build_ffn(b, b.norm(ffn_inp, n_embd), layer.n_ff, True)
    return g.op(b.f32(n_embd, b.T), out, ffn_inp, inplace=(0, 1))


def _rwkv_norm(b, x, rms):
    """An RWKV block's norm of x: the layer norm with its weight and bias (both applied in place), or,
    `rms` (arwkv7, rwkv6qwen2), an RMS norm with a weight (in place unless x is a view)."""
    if rms:
        return b.norm(x, b.shape.n_embd)
    g = b.g
    f = lambda: b.f32(b.shape.n_embd, b.T)  # noqa: E731
    y = g.op(f(), x)
    return g.op(f(), g.op(f(), y, b.weights, inplace=(0,)), b.weights, inplace=(0,))


def _rwkv7_block(b, il, cur, layer, last, out_ids, n_out, state):
    """One RWKV-7 block as src/models/rwkv7.cpp and rwkv7-base.cpp build it: the token-shift state
    gathered, the layer norm (GGML_OP_NORM: a new tensor) with bias, the shifted input, the time mix
    (sx repeated to 6 lerp inputs, r/w/k/v/a/g projections with their low-rank paths, the first layer's
    v kept to the end as every later layer mixes it in, kk l2-normed, the wkv7 scan with its state, the
    group norm, the r_k bonus, the gate and the output projection), the FFN norm and shift, the state
    store and the channel mix (relu^2). `state` carries the first layer's v."""
    g, T, n_embd = b.g, b.T, b.shape.n_embd
    n_seq = max(1, b.settings.n_seq)
    f = lambda rows=n_embd, cols=None: b.f32(rows, cols or b.T)  # noqa: E731
    s_main, s_extra = build_rs(b)
    shift = g.expand(g.op(b.f32(b.kv.state_r, n_seq), g.view(b.cache), s_main))
    g.expand(g.view(b.cache, g.op(0, g.view(b.cache), s_extra)))
    inp = g.view(cur)
    arwkv = layer.mixer == ARWKV7

    layer_norm = lambda x: _rwkv_norm(b, x, rms=arwkv)  # noqa: E731  arwkv7: RMS norm, no bias

    att = layer_norm(inp)
    x_prev = g.op(f(), g.view(shift), g.view(att))  # concat
    sx = g.op(f(), x_prev, att, inplace=(0,))  # sub
    lora_w, lora_a, lora_v, lora_g = layer.lora
    parts = 6 if lora_g else 5
    sx = g.op(f() * parts, sx)  # repeat
    xxx = g.op(f() * parts, g.op(f() * parts, sx, b.weights, inplace=(0,)), att, inplace=(0,))
    view = lambda: g.view(xxx)  # noqa: E731
    r = b.mm(n_embd, view())
    w = b.mm(n_embd, b.unary(b.mm(lora_w, view()), f(lora_w)))
    for _ in range(4):  # + w0, sigmoid, scale, exp
        w = b.unary(w, w.nbytes)
    k = b.mm(n_embd, view())
    v = b.mm(n_embd, view())
    xv = view()
    if state.get("v_first") is None:
        state["v_first"] = v
    else:
        diff = g.op(f(), state["v_first"], v)
        mix = b.unary(b.unary(b.mm(n_embd, b.mm(lora_v, xv)), f()), f())
        v = g.op(f(), v, g.op(f(), diff, mix, inplace=(0, 1)), inplace=(0, 1))
    gate = b.mm(n_embd, b.unary(b.mm(lora_g, view()), f(lora_g))) if lora_g else None
    a = b.unary(b.unary(b.mm(n_embd, b.mm(lora_a, view())), f()), f())
    kk = g.op(f(), g.view(g.op(f(), k, b.weights, inplace=(0,))))  # mul then l2_norm of the reshape
    ka = g.op(f(), k, b.weights, inplace=(0,))
    k = g.op(f(), k, g.op(f(), g.op(f(), a, ka, inplace=(0, 1)), ka, inplace=(0,)), inplace=(0, 1))
    wkv_state = g.expand(g.op(b.f32(b.kv.state_s, n_seq), g.view(b.cache), s_main))
    g.expand(g.view(b.cache, g.op(0, g.view(b.cache), s_extra)))
    wkv = g.op(f() + b.f32(b.kv.state_s, n_seq), g.view(r), g.view(w), g.view(k), g.view(v),
               g.op(f(), kk, inplace=(0,)), g.op(f(), kk, a, inplace=(0, 1)), wkv_state)
    g.expand(g.view(b.cache, g.view(wkv)))
    if layer.ssm_norm:  # time_mix_ln: the group norm of the reshaped output, * ln (a reshape: new), + bias
        out = g.op(f(), g.view(g.view(wkv)))
        out = g.op(f(), g.view(out), b.weights)
        out = g.op(f(), out, b.weights, inplace=(0,))
    else:
        out = g.view(g.view(wkv))
    rk = g.op(f(), g.view(k), g.view(r))
    rk = g.op(f(), rk, b.weights, inplace=(0,))
    heads = n_embd // max(1, b.kv.state_s // n_embd)  # n_embd_s = n_embd x head_size
    rk = g.op(b.f32(heads, T), rk)  # sum_rows: one per head
    out = g.op(f(), out, g.view(g.op(f(), g.view(v), rk)), inplace=(0,))  # (a new tensor when out is a view)
    if gate is not None:
        out = g.op(f(), out, gate, inplace=(0, 1))
    out = g.view(b.mm(n_embd, out))
    if arwkv:  # arwkv7.cpp: the shift stored straight from the norm, then the Qwen2 FFN
        return _rwkv_qwen2_tail(b, il, out, inp, att, layer, last, out_ids, n_out)
    ffn_inp = g.op(f(), out, inp)  # both views: a new tensor
    ffn = layer_norm(ffn_inp)
    x_prev = g.op(f(), g.view(shift), g.view(ffn))
    g.expand(g.view(b.cache, g.op(b.f32(b.kv.state_r, n_seq), g.view(att), g.view(ffn))))  # the shifts stored
    ffn_inp, ffn, x_prev = g.view(ffn_inp), g.view(ffn), g.view(x_prev)
    if il == last:
        ffn_inp = g.op(b.f32(n_embd, n_out), ffn_inp, out_ids)
        ffn = g.op(b.f32(n_embd, n_out), ffn, out_ids)
        x_prev = g.op(b.f32(n_embd, n_out), x_prev, out_ids)
        T = b.T = n_out
    sx = g.op(f(), x_prev, ffn, inplace=(0,))
    xk = g.op(f(), g.op(f(), sx, b.weights, inplace=(0,)), ffn, inplace=(0,))
    key = b.unary(b.unary(b.mm(layer.n_ff, xk), f(layer.n_ff)), f(layer.n_ff))
    return g.op(f(), b.mm(n_embd, key), ffn_inp, inplace=(0, 1))


def _rwkv6_block(b, il, cur, layer, last, out_ids, n_out):
    """One RWKV-6 block (src/models/rwkv6.cpp, rwkv6-base.cpp): token shift gathered, layer norm, the
    shifted input, the time mix (the lerp of x through time_mix_w1's tanh and w2's five outputs,
    added to the fused lerp, r/k/v/g projections, silu gate, the low-rank decay exp(-exp(w)), the wkv6
    scan with its state, group norm), the FFN norm and shift, the shift store and the channel mix
    (receptance sigmoid times relu^2's value).

    rwkv6qwen2 (src/models/rwkv6qwen2.cpp, is_qrwkv): RMS norms, a sigmoid gate, k and v repeated from
    n_head_kv heads (new tensors), k * (1 - w), the gated linear attention scan, no group norm, the shift stored from the
    attention norm, then a Qwen2 SwiGLU FFN. The r/k/v biases are added in place (no memory)."""
    g, n_embd = b.g, b.shape.n_embd
    qrwkv = layer.mixer == RWKV6_QWEN2
    n_seq = max(1, b.settings.n_seq)
    f = lambda rows=n_embd: b.f32(rows, b.T)  # noqa: E731
    s_main, s_extra = build_rs(b)
    shift = g.expand(g.op(b.f32(b.kv.state_r, n_seq), g.view(b.cache), s_main))
    g.expand(g.view(b.cache, g.op(0, g.view(b.cache), s_extra)))
    inp = g.view(cur)

    layer_norm = lambda x: _rwkv_norm(b, x, rms=qrwkv)  # noqa: E731  rwkv6qwen2: RMS norm with a weight

    att = layer_norm(inp)
    x_prev = g.op(f(), g.view(shift), g.view(att))
    sx = g.op(f(), x_prev, att, inplace=(0,))
    mix_rank, decay_rank = layer.lora
    xxx = g.op(f(), g.op(f(), g.view(sx), b.weights), g.view(att), inplace=(0,))  # lerp_x (sx reshaped: new)
    xxx = b.unary(b.mm(mix_rank, xxx), f(mix_rank))  # tanh(w1 x)
    xxx = g.op(f(mix_rank), g.view(xxx))  # cont(permute)
    xxx = g.op(f(5 * n_embd), b.weights, xxx)  # w2: five lerp deltas
    xxx = g.op(xxx.nbytes, xxx, b.weights, inplace=(0,))  # + lerp_fused
    xxx = g.op(xxx.nbytes, xxx, g.view(sx), inplace=(0,))
    xxx = g.op(xxx.nbytes, xxx, g.view(att), inplace=(0,))
    view = lambda: g.view(xxx)  # noqa: E731
    xw, xk, xv, xr, xg = view(), view(), view(), view(), view()
    kv_rows = layer.k_rows or n_embd
    r = b.mm(n_embd, xr)
    k = b.mm(kv_rows, xk)
    v = b.mm(kv_rows, xv)
    gate = b.unary(b.mm(n_embd, xg), f())  # silu (rwkv6qwen2: sigmoid)
    if kv_rows != n_embd:  # ggml_repeat to every head (the tensor giving the shape is not a source)
        k = g.op(f(), g.view(k))
        v = g.op(f(), g.view(v))
    w = b.mm(n_embd, b.unary(b.mm(decay_rank, xw), f(decay_rank)))
    for _ in range(4):  # + decay, exp, neg, exp
        w = b.unary(w, w.nbytes)
    if qrwkv:  # k - k * w (of the reshapes: the product is a new tensor, the difference takes its place)
        k = g.op(f(), g.view(k), g.op(f(), g.view(k), g.view(w)), inplace=(0, 1))
    wkv_state = g.expand(g.op(b.f32(b.kv.state_s, n_seq), g.view(b.cache), s_main))
    g.expand(g.view(b.cache, g.op(0, g.view(b.cache), s_extra)))
    if qrwkv:  # ggml_gated_linear_attn(k, v, r, w, state)
        wkv = g.op(f() + b.f32(b.kv.state_s, n_seq), k, g.view(v), g.view(r), g.view(w), wkv_state)
    else:
        wkv = g.op(f() + b.f32(b.kv.state_s, n_seq), g.view(k), g.view(v), g.view(r), b.weights, g.view(w), wkv_state)
    g.expand(g.view(b.cache, g.view(wkv)))
    if qrwkv:
        out = g.view(g.view(wkv))
    else:
        out = g.op(f(), g.view(g.view(wkv)))  # group norm of the reshaped output
        out = g.op(f(), g.view(out), b.weights)
        out = g.op(f(), out, b.weights, inplace=(0,))
    out = g.op(f(), out, gate, inplace=(0, 1))
    out = g.view(b.mm(n_embd, out))
    if qrwkv:  # the shift stored straight from the attention norm, then the Qwen2 FFN
        return _rwkv_qwen2_tail(b, il, out, inp, att, layer, last, out_ids, n_out)
    ffn_inp = g.op(f(), out, inp)
    ffn = layer_norm(ffn_inp)
    x_prev = g.op(f(), g.view(shift), g.view(ffn))
    g.expand(g.view(b.cache, g.op(b.f32(b.kv.state_r, n_seq), g.view(att), g.view(ffn))))
    ffn_inp, ffn, x_prev = g.view(ffn_inp), g.view(ffn), g.view(x_prev)
    if il == last:
        ffn_inp = g.op(b.f32(n_embd, n_out), ffn_inp, out_ids)
        ffn = g.op(b.f32(n_embd, n_out), ffn, out_ids)
        x_prev = g.op(b.f32(n_embd, n_out), x_prev, out_ids)
        b.T = n_out
    sx = g.op(f(), x_prev, ffn, inplace=(0,))
    xk = g.op(f(), g.op(f(), sx, b.weights, inplace=(0,)), ffn, inplace=(0,))
    xr = g.op(f(), g.op(f(), sx, b.weights, inplace=(0,)), ffn, inplace=(0,))
    rr = b.unary(b.mm(n_embd, xr), f())
    key = b.unary(b.unary(b.mm(layer.n_ff, xk), f(layer.n_ff)), f(layer.n_ff))
    out = g.op(f(), rr, b.mm(n_embd, key), inplace=(0, 1))
    return g.op(f(), out, ffn_inp, inplace=(0, 1))
