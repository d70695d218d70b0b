"""What the graph depends on: per-layer and whole-graph shapes read from a GGUF header.

Mirrors the hparams llama.cpp's graph code reads (src/llama-model.cpp load_hparams / load_tensors and
src/llama-hparams.h): which mixer and FFN each layer has, head counts, widths, gating and weight
normalisation of the experts, the NextN/MTP blocks.
"""

from moetools.arch.registry import profile, resolve
from moetools.devicefit import kv as kvmod
from moetools.devicefit.graph.archsets import (ATTN_RES_ARCHES, GATED_Q_ARCHES, MROPE_ARCHES, MROPE_IF_SECTIONS,
    MTP_GRAPH_ARCHES, MTP_HEAD_NORM_FALLBACK, NO_ROPE_ARCHES, PARALLEL_SSM_ARCHES, RELU_SQR_ARCHES,
    RESIDUAL_FIRST_ARCHES, _NORM_W_ALWAYS, _NORM_W_DEFAULT, _NORM_W_NEVER, _SIGMOID_DEFAULT, _SOFTMAX_WEIGHT)
from moetools.devicefit.graph.mixers.mamba import MAMBA1, MAMBA2
from moetools.devicefit.graph.mixers.rwkv import RWKV6, RWKV6_MIXERS, RWKV7_MIXERS
from moetools.devicefit.graph.models.deepseek4 import _dsv4_shape
from moetools.devicefit.record import REQUIRED, Record
from moetools.errors import GGUFError
from moetools.gguf.constants import Keys


# --- what the graph depends on ----------------------------------------------------------------

class LayerShape(Record):
    """One block's graph-relevant widths (read from its tensors' shapes)."""

    FIELDS = (
        ("mixer", REQUIRED),  # "attention", "mla", "kda", "bkda" (bailingmoe3's KDA), "gdn", "lightning", "mamba", "mamba2", "shortconv",
        # "attention+mamba2" (falcon-h1), "none"
        ("q_rows", 0),  # rows of the query projection output (attn_q / attn_q_b / fused qkv)
        ("k_rows", 0),
        ("v_rows", 0),
        ("fused_qkv", False),
        ("q_lora", 0),
        ("qkv_bias", False),
        ("o_bias", False),
        ("qk_norm", False),
        ("gate_rows", 0),  # attention output gate (qwen3next, kimi MLA)
        ("ffn", "none"),  # "moe", "dense", "none"
        ("n_ff", 0),  # dense FFN width
        ("n_expert", 0),
        ("top_k", 0),
        ("n_ff_exp", 0),
        ("expert_in", 0),  # width the experts read (latent MoE: expert_latent_length)
        ("gate_up_merged", False),
        ("exp_gated", True),  # routed experts have a gate (ffn_gate_exps / merged): GLU, else up -> activation
        ("shexp_gated", True),  # the shared expert has ffn_gate_shexp
        ("ffn_gated", True),  # the dense FFN has ffn_gate
        ("head_norm_own", True),  # a NextN block with its own head norm (else graph_mtp uses output_norm)
        ("expert_bias", False),
        ("router_bias", False),  # ffn_gate_inp.bias
        ("probs_bias", False),  # exp_probs_b (DeepSeek-V3 selection bias)
        ("norm_w", False),
        ("w_scale", False),  # expert_weights_scale other than 0 and 1: the weights are scaled
        ("gating", 1),  # 1 softmax, 2 sigmoid, 3 softmax over the selected
        ("n_ff_shexp", 0),
        # gemma4.cpp: a dense GeGLU MLP this wide beside the experts (the block holds ffn_up and
        # pre_ffw_norm_2): each branch with its own pre and post norm, the router on a scaled rms_norm
        ("n_ff_beside", 0),
        ("out_scale", False),  # layer_output_scale: the block's output times a per-layer scalar (gemma4.cpp)
        ("ssm_in_rows", 0),  # recurrent input projection rows
        ("ssm_inner", 0),
        ("ssm_conv_channels", 0),
        ("ssm_state", 0),
        ("ssm_heads", 0),
        ("ssm_norm", False),  # Mamba-2's grouped RMS norm before the output projection (Mamba-1: dt/B/C norms)
        ("ssm_x_rows", 0),  # Mamba-1: rows of ssm_x (dt_rank + 2 d_state)
        ("lora", ()),  # RWKV-7: the w, a, v, g low-rank widths (0: absent)
        ("ssm_dt_rank", 0),
        ("gated_q", False),  # the query projection carries the output gate (qwen3next, qwen35: Qcur_full)
        ("ssm_groups", 0),  # gated delta net: key heads (ssm_n_group; ssm_heads are the value heads)
        ("ssm_ba", False),  # gated delta net: beta and alpha from one projection (qwen3next's ssm_ba)
        ("ssm_legacy", False),
        ("shexp_gate", False),  # the shared expert's output is scaled by sigmoid(ffn_gate_inp_shexp x)  # gated delta net: q, k, v and z from one ssm_in projection (older qwen3next GGUFs)
    )


class GraphShape(Record):
    """What llama.cpp's worst-case graph depends on, from the header."""

    FIELDS = (
        ("architecture", REQUIRED),
        ("n_embd", REQUIRED),
        ("n_vocab", REQUIRED),
        ("layers", REQUIRED),  # LayerShape per trunk block
        ("n_head", REQUIRED),  # per block
        ("mla_rope", 0),
        ("mla_nope", 0),
        ("mla_v_head", 0),
        ("kv_lora", 0),
        ("embd_scale", False),
        ("attn_res_block", 0),  # kimi-k3's attention residuals: a checkpoint banked every N layers
        ("situ", False),  # kimi-k3's situ activation instead of swiglu
        ("situ_linear", False),  # ... with the up branch transformed too (situ_linear_beta > 0)
        ("rope", True),  # attention layers rope q and k (Nemotron-H and Jamba attention has no positions)
        ("relu_sqr", False),  # ungated FFNs use relu^2 (two in-place ops) instead of one activation
        ("residual_first", False),  # the residual adds read the stream first (in-place reuse prefers it)
        ("indexer_heads", 0),  # DSA lightning indexer (deepseek32, glm-dsa): query heads,
        ("indexer_head", 0),  # ... their width (one key head of it cached per cell),
        ("indexer_top_k", 0),  # ... and the cells each token attends to (MSA: the blocks)
        ("indexer_block", 0),  # MSA (minimax-m3): positions per indexer block
        ("n_embd_target", 0),  # gemma4-assistant: the target's width (embedding_length_out)
        ("pos_per_token", 1),  # inp_pos entries per token: 4 with M-RoPE (llama_hparams::n_pos_per_embd)
        ("notes", list),
        ("mtp_layers", dict),  # {block: LayerShape} of the NextN/MTP blocks an MTP context runs (MTP_GRAPH_ARCHES)
        ("mtp_own_head", False),  # the first NextN block has its own LM head (nextn.shared_head_head), on its device
        ("altup", 0),  # gemma3n: AltUp streams (n_altup; 0: not a gemma3n graph),
        ("altup_width", 0),  # ... the per-layer input width (n_embd_altup),
        ("laurel_rank", 0),  # ... and LAuReL's rank
        ("mla_swa", ()),  # dots3note: the sliding-window layers' own (kv_lora, nope, v_head) MLA widths
        ("dsv4", dict),  # deepseek4: hyper-connection streams, head, rope, q latent and grouped output widths
    )


def _rows(model, name, axis=1):
    tensor = model.tensor_by_name.get(name)
    if tensor is None or len(tensor.shape) <= axis:
        return 0
    return tensor.shape[axis]


def _has(model, name):
    return name in model.tensor_by_name


def _layer_shape(model, il, kvshape, top_k, n_expert, gating, norm_w, w_scale=False):
    blk = f"blk.{il}."
    mixer = "none"
    own_mixer = profile(kvshape.architecture).mixer_name
    if kvshape.is_recurrent[il] and kvshape.recurrent_kind == "gdn":
        mixer = "gdn"
    elif kvshape.is_recurrent[il] and kvshape.recurrent_kind == "lightning":
        mixer = "lightning"
    elif kvshape.is_recurrent[il] and kvshape.recurrent_kind == "kda":
        mixer = own_mixer or "kda"  # bailingmoe3's KDA is "bkda"
    elif own_mixer in RWKV6_MIXERS + RWKV7_MIXERS and _has(model, blk + "time_mix_lerp_fused.weight") \
            and (own_mixer != RWKV6 or _has(model, blk + "time_mix_first.weight")):
        mixer = own_mixer  # rwkv6qwen2 has no time_mix_first: the gated-linear-attention variant (is_qrwkv)
    elif _has(model, blk + "shortconv.in_proj.weight"):
        mixer = "shortconv"  # LFM2
    elif _has(model, blk + "ssm_x.weight"):
        mixer = MAMBA1  # dt/B/C from an x projection (jamba)
    elif _has(model, blk + "ssm_conv1d.weight") or _has(model, blk + "ssm_in.weight"):
        mixer = MAMBA2
    elif kvshape.compress_ratios:
        mixer = "dsv4"  # one K-only head, compressors by the layer's ratio (_dsv4_attention)
    elif kvshape.head_count_kv[il] and kvshape.mla:
        if not _has(model, blk + "attn_kv_a_mqa.weight"):  # llama.cpp: "missing tensor" at load
            raise GGUFError(model.path, f"tensor {blk}attn_kv_a_mqa.weight is missing: layer {il} is an MLA "
                                        "attention layer (its KV cache is sized from kv_lora_rank)")
        mixer = "mla"
    elif kvshape.head_count_kv[il]:
        mixer = "attention"
    if mixer == MAMBA2 and kvshape.architecture in PARALLEL_SSM_ARCHES and kvshape.head_count_kv[il]:
        mixer = "attention+mamba2"
    shape = LayerShape(mixer)
    if mixer in RWKV6_MIXERS:  # lora: the data-dependent lerp's and the decay's low-rank widths
        shape.lora = (_rows(model, blk + "time_mix_w1.weight"), _rows(model, blk + "time_mix_decay_w1.weight"))
        shape.n_ff = _rows(model, blk + "channel_mix_key.weight") or _rows(model, blk + "ffn_up.weight")
        shape.k_rows = _rows(model, blk + "time_mix_key.weight")  # n_head_kv x head_size (rwkv6qwen2's GQA)
        return shape
    if mixer in RWKV7_MIXERS:
        shape.lora = tuple(_rows(model, f"{blk}time_mix_{name}1.weight") for name in ("w", "a", "v", "g"))
        shape.n_ff = _rows(model, blk + "channel_mix_key.weight") or _rows(model, blk + "ffn_up.weight")
        shape.ssm_norm = _has(model, blk + "time_mix_ln.weight") and _has(model, blk + "time_mix_ln.bias")
        return shape
    if mixer in ("attention", "mla", "attention+mamba2"):
        fused = _rows(model, blk + "attn_qkv.weight")
        shape.fused_qkv = bool(fused)
        shape.q_rows = fused or _rows(model, blk + "attn_q.weight") or _rows(model, blk + "attn_q_b.weight")
        shape.q_lora = _rows(model, blk + "attn_q_a.weight")
        shape.k_rows = _rows(model, blk + "attn_k.weight")
        shape.v_rows = _rows(model, blk + "attn_v.weight")
        shape.qkv_bias = _has(model, blk + "attn_q.bias") or _has(model, blk + "attn_qkv.bias")
        shape.o_bias = _has(model, blk + "attn_output.bias")
        shape.qk_norm = _has(model, blk + "attn_q_norm.weight")
        shape.gate_rows = _rows(model, blk + "attn_gate.weight")
    elif mixer == "lightning":
        shape.q_rows = _rows(model, blk + "attn_qkv.weight")  # q, k and v of every head
        shape.gate_rows = _rows(model, blk + "attn_gate.weight")
    elif mixer == "bkda":
        shape.q_rows = _rows(model, blk + "attn_q.weight")
    elif mixer == "kda":
        shape.q_rows = _rows(model, blk + "attn_q.weight")
        shape.ssm_conv_channels = shape.q_rows
        shape.ssm_dt_rank = _rows(model, blk + "ssm_f_a.weight")  # the decay gate's low rank
        shape.ssm_inner = _rows(model, blk + "ssm_g_a.weight")  # kimi-linear's factored output gate (0: ssm_g)
    elif mixer == "gdn":
        shape.ssm_legacy = not _has(model, blk + "attn_qkv.weight") and _has(model, blk + "ssm_in.weight")
        shape.ssm_in_rows = _rows(model, blk + ("ssm_in.weight" if shape.ssm_legacy else "attn_qkv.weight"))
        shape.ssm_inner = _rows(model, blk + "ssm_out.weight", 0)
        shape.ssm_ba = _has(model, blk + "ssm_ba.weight")
        shape.ssm_heads = _rows(model, blk + "ssm_beta.weight") or _rows(model, blk + "ssm_ba.weight") // 2
        shape.ssm_state = model.get_int(Keys.SSM_STATE_SIZE, 0)
        shape.ssm_groups = model.get_int(Keys.SSM_GROUP_COUNT, 0) or shape.ssm_heads
        conv = model.tensor_by_name.get(blk + "ssm_conv1d.weight")
        shape.ssm_conv_channels = conv.shape[-1] if conv is not None else shape.ssm_in_rows
    elif mixer == MAMBA1:
        shape.ssm_in_rows = _rows(model, blk + "ssm_in.weight")
        shape.ssm_inner = _rows(model, blk + "ssm_out.weight", 0)
        shape.ssm_conv_channels = shape.ssm_inner
        shape.ssm_x_rows = _rows(model, blk + "ssm_x.weight")
        shape.ssm_dt_rank = _rows(model, blk + "ssm_dt.weight", 0)
        shape.ssm_state = (shape.ssm_x_rows - shape.ssm_dt_rank) // 2
        shape.ssm_norm = _has(model, blk + "ssm_dt_norm.weight") and _has(model, blk + "ssm_b_norm.weight")
    if mixer in (MAMBA2, "attention+mamba2"):
        shape.ssm_in_rows = _rows(model, blk + "ssm_in.weight")
        shape.ssm_inner = _rows(model, blk + "ssm_out.weight", 0)
        conv = model.tensor_by_name.get(blk + "ssm_conv1d.weight")
        shape.ssm_conv_channels = conv.shape[-1] if conv is not None else 0
        ssm_a = model.tensor_by_name.get(blk + "ssm_a")
        shape.ssm_heads = _rows(model, blk + "ssm_dt.bias", 0) or (max(ssm_a.shape) if ssm_a is not None else 0)
        shape.ssm_norm = _has(model, blk + "ssm_norm.weight")
    shape.out_scale = _has(model, blk + "layer_output_scale.weight")
    up_exps = model.tensor_by_name.get(blk + "ffn_up_exps.weight") or model.tensor_by_name.get(blk + "ffn_gate_up_exps.weight")
    if up_exps is not None:
        shape.ffn = "moe"
        shape.gate_up_merged = _has(model, blk + "ffn_gate_up_exps.weight")
        shape.exp_gated = shape.gate_up_merged or _has(model, blk + "ffn_gate_exps.weight")
        shape.shexp_gated = _has(model, blk + "ffn_gate_shexp.weight")
        shape.n_ff_exp = up_exps.shape[1] // (2 if shape.gate_up_merged else 1)
        shape.expert_in = up_exps.shape[0]
        shape.n_expert = up_exps.shape[2] if len(up_exps.shape) > 2 else n_expert
        shape.top_k = top_k[il] or 1
        shape.expert_bias = _has(model, blk + "ffn_up_exps.bias") or _has(model, blk + "ffn_gate_up_exps.bias")
        shape.router_bias = _has(model, blk + "ffn_gate_inp.bias")
        shape.probs_bias = _has(model, blk + "exp_probs_b.bias")
        shape.gating = gating
        shape.norm_w = norm_w
        shape.w_scale = w_scale
        shape.n_ff_shexp = _rows(model, blk + "ffn_up_shexp.weight")
        if _has(model, blk + "pre_ffw_norm_2.weight"):
            shape.n_ff_beside = _rows(model, blk + "ffn_up.weight")
        shape.shexp_gate = _has(model, blk + "ffn_gate_inp_shexp.weight")
    elif _has(model, blk + "ffn_up.weight") or _has(model, blk + "ffn_down.weight"):
        shape.ffn = "dense"
        shape.n_ff = _rows(model, blk + "ffn_up.weight") or _rows(model, blk + "ffn_down.weight", 0)
        shape.ffn_gated = _has(model, blk + "ffn_gate.weight")
    return shape


def graph_shape(model, kvshape=None):
    """The GraphShape of an open moetools.gguf.Model. Raises GGUFError naming what is missing."""
    kvshape = kvshape or kvmod.kv_shape(model)
    arch = model.architecture
    entry = profile(arch)
    n_embd = model.get_int(Keys.EMBEDDING_LENGTH, None, required_for="the compute buffer")
    n_vocab = _rows(model, "output.weight") or _rows(model, "token_embd.weight")
    if not n_vocab:
        if entry.block_draft:  # dflash.cpp then takes the target's (ctx_other)
            raise GGUFError(model.path, "a DFlash draft without its own token_embd/output borrows the target's "
                                        "(llama.cpp's ctx_other): device-fit does not plan such a draft")
        raise GGUFError(model.path, "no output.weight or token_embd.weight to size the logits")
    n_expert = model.expert_count
    top_k = model.layer_values(Keys.EXPERT_USED_COUNT, 0)
    if any(isinstance(k, int) and k > max(n_expert, 1) for k in top_k):
        # llama.cpp asserts n_expert_used <= n_expert (llama-model.cpp load_hparams); a damaged header
        # must not make the graph replay build millions of expert views
        raise GGUFError(model.path, f"expert_used_count {max(top_k)} is more than expert_count {n_expert} "
                                    "(llama.cpp refuses it)", key=model.key(Keys.EXPERT_USED_COUNT))
    gating = model.get_int("{arch}.expert_gating_func", 0) or (
        2 if arch in _SIGMOID_DEFAULT else 3 if arch in _SOFTMAX_WEIGHT else 1)
    if arch in _SOFTMAX_WEIGHT:
        gating = 3
    if entry.gating_fixed:  # (qwen4exp.cpp) the loader passes softmax whatever expert_gating_func says
        gating = 1
    norm_w = (bool(model.get("{arch}.expert_weights_norm", arch in _NORM_W_DEFAULT)) and arch not in _NORM_W_NEVER
              or arch in _NORM_W_ALWAYS)
    scale = model.get("{arch}.expert_weights_scale", 0.0)
    w_scale = isinstance(scale, (int, float)) and float(scale) not in (0.0, 1.0)
    layers = [_layer_shape(model, il, kvshape, [k or 0 for k in top_k], n_expert, gating, norm_w, w_scale)
              for il in range(kvshape.trunk_layers)]
    head_count = [value or 0 for value in model.layer_values(Keys.HEAD_COUNT, 0)]
    shape = GraphShape(architecture=arch, n_embd=n_embd, n_vocab=n_vocab, layers=layers, n_head=head_count)
    if arch in NO_ROPE_ARCHES:
        shape.rope = False
    if arch in RELU_SQR_ARCHES:
        shape.relu_sqr = True
    if arch in RESIDUAL_FIRST_ARCHES:
        shape.residual_first = True
    if arch in ATTN_RES_ARCHES:
        shape.attn_res_block = model.get_int("{arch}.attn_res.block_size", 0)
        shape.situ = True
        shape.situ_linear = float(model.get("{arch}.activation.situ_linear_beta", 0.0) or 0.0) > 0.0
    if kvshape.mla:
        shape.kv_lora = model.get_int(Keys.KV_LORA_RANK, 0)
        shape.mla_rope = model.get_int(Keys.ROPE_DIMENSION_COUNT, 0)
        k_mla = model.get_int(Keys.KEY_LENGTH_MLA, 0)
        shape.mla_nope = k_mla - shape.mla_rope
        shape.mla_v_head = model.get_int(Keys.VALUE_LENGTH_MLA, 0)
        if entry.mla_swa:
            need = "the sliding-window layers' MLA compute"
            shape.mla_swa = (model.get_int("{arch}.attention.kv_lora_rank_swa", None, required_for=need),
                             model.get_int("{arch}.attention.key_length_mla_swa", None, required_for=need) - shape.mla_rope,
                             model.get_int("{arch}.attention.value_length_mla_swa", None, required_for=need))
    if arch in MTP_GRAPH_ARCHES:
        shape.mtp_layers = _mtp_layer_shapes(model, kvshape, [k or 0 for k in top_k], n_expert, gating, norm_w, w_scale)
        shape.mtp_own_head = _has(model, f"blk.{kvshape.trunk_layers}.nextn.shared_head_head.weight")
    if arch in GATED_Q_ARCHES:
        for il, layer in [*enumerate(layers), *shape.mtp_layers.items()]:
            n_head = head_count[il] if il < len(head_count) else 0
            layer.gated_q = (layer.mixer == "attention" and not layer.gate_rows and not layer.fused_qkv
                             and layer.q_rows == 2 * n_head * kvshape.k_width[il])
    sections = model.get("{arch}.rope.dimension_sections", None)
    if arch in MROPE_ARCHES or (arch in MROPE_IF_SECTIONS and isinstance(sections, (list, tuple))
                                and len(sections) > 1 and sections[0] > 0 and sections[1] > 0):
        shape.pos_per_token = 4  # GGML_MROPE_SECTIONS
    if kvshape.compress_ratios:
        _dsv4_shape(model, shape)
    elif entry.shape_reader:  # a bespoke graph's own widths, read by its module (graph/models/)
        resolve(entry.shape_reader)(model, kvshape, shape)
    if kvshape.borrowed:
        shape.n_embd_target = model.get_int("{arch}.embedding_length_out", None, required_for="the assistant's input")
    if kvshape.indexer_width and entry.sparse_kv == "msa":
        shape.indexer_heads = model.get_int("{arch}.attention.indexer.head_count", None,
                                            required_for="the MSA indexer's compute")
        shape.indexer_head = kvshape.indexer_width
        shape.indexer_top_k = model.get_int("{arch}.attention.indexer.top_k", None, required_for="the MSA indexer's compute")
        shape.indexer_block = model.get_int("{arch}.attention.indexer.block_size", None,
                                            required_for="the MSA indexer's compute")
        if shape.indexer_block < 1:
            raise GGUFError(model.path, "MSA indexer block size 0 (llama.cpp asserts it is positive)",
                            key=model.key("{arch}.attention.indexer.block_size"))
    if kvshape.indexer_width and entry.sparse_kv != "msa":
        shape.indexer_heads = model.get_int("{arch}.attention.indexer.head_count", None,
                                            required_for="the DSA lightning indexer's compute")
        shape.indexer_head = kvshape.indexer_width
        if entry.indexer_kpool:  # (its cache row is key, gate and pooled key)
            shape.indexer_head = model.get_int(kvmod.INDEXER_KEY_LENGTH, None, required_for="the DSA lightning indexer's compute")
        shape.indexer_top_k = model.get_int("{arch}.attention.indexer.top_k", None,
                                            required_for="the DSA lightning indexer's compute")
    return shape


def _mtp_layer_shapes(model, kvshape, top_k, n_expert, gating, norm_w, w_scale=False):
    """{block: LayerShape} of the NextN blocks, or {} when one is not a block llama.cpp's MTP graph can
    run (the trunk loads without them, so that is not an error here)."""
    shapes = {}
    for il in range(kvshape.trunk_layers, kvshape.block_count):
        try:
            layer = _layer_shape(model, il, kvshape, top_k, n_expert, gating, norm_w, w_scale)
        except GGUFError:
            return {}
        if layer.mixer not in ("attention", "mla", "dsv4") or not _has(model, f"blk.{il}.nextn.eh_proj.weight"):
            return {}
        if kvshape.architecture in MTP_HEAD_NORM_FALLBACK:
            own = MTP_HEAD_NORM_FALLBACK[kvshape.architecture]
            layer.head_norm_own = any(_has(model, f"blk.{il}.{name}.weight") for name in own)
        shapes[il] = layer
    return shapes
