"""The compute (graph) buffer llama.cpp's scheduler reserves, by replaying its allocator.

llama.cpp sizes the compute buffer once, at context creation (llama_context::sched_reserve): it builds
the worst-case graph — n_ubatch tokens (rounded up to a multiple of --parallel) against every KV cell,
every token an output — and lets ggml-alloc lay out the graph's intermediate tensors in one buffer,
reusing the memory of tensors whose last consumer has run. The buffer is the high-water mark of that
layout. It reserves the one-token graph too and keeps the larger, which is always the batch one.

This module rebuilds that graph from the header — the same tensors in the same order (src/llama-graph.cpp
build_attn / build_attn_mha / build_moe_ffn / build_ffn / build_inp_*, src/models/*.cpp for the layer
bodies) — and runs a pure-Python replay of ggml-alloc (ggml/src/ggml-alloc.c: best-fit free blocks with
merging, parents freed after their last child, in-place reuse for the ops ggml_op_can_inplace lists when
the parent is the node's last consumer). Read, not copied: the code is moetools' own.

What is modelled exactly: the attention scores without flash attention (n_kv x tokens x heads f32 per
stream), the KQ masks (f16 with flash attention, f32 without) and index inputs, MLA's absorbed query
and latent outputs, the router/top-k/weights and the selected experts' activations, dense and shared
FFNs, logits (n_vocab x n_ubatch f32, an output, never freed), the DSA lightning indexer (scores,
top-k, the rebuilt KQ mask) and Mamba-2 layers op by op. The KDA and gated delta net layers are
replayed by their projections, conv inputs and scan outputs; their chunked scan's own scratch (a few
MiB at 512 tokens) is below the 10% the tests allow and is not modelled op by op.
A view's memory is never reused in place: ggml-alloc's reserve sees a view's data unallocated and
takes it for external memory (so an in-place op on a reshape is a new tensor).

Per device: `layers` says which blocks a device computes and `output` whether it computes the output
head. Tensors that live on the host (the token-embedding lookup, whose weights llama.cpp keeps on the
CPU) are counted in `host_bytes`.
"""

import moetools.devicefit.ggml.compiled as compiled
from moetools.devicefit import kv as kvmod
from moetools.devicefit.ggml.allocator import (CPU_ALIGNMENT, CUDA_ALIGNMENT, F16_BYTES, F32_BYTES, Graph, HOST,
    I32_BYTES, I64_BYTES, _Tensor)
from moetools.devicefit.ggml.compiled import Program, _REGIMES_MAX, _cells, _holds, _program
from moetools.devicefit.ggml.fold import fold_inplace_chains
from moetools.devicefit.ggml.scheduler import peaks, schedule
from moetools.devicefit.ggml.split import _SplitGraph, _reset
from moetools.devicefit.record import REQUIRED, Record
from moetools.errors import GGUFError
from moetools.gguf.constants import Keys, tensor_nbytes

# re-exported for the old import path (tests, benchmarks), one release
from moetools.devicefit.ggml.allocator import _Blocks, _FREE_END
from moetools.devicefit.ggml.compiled import Affine, NotAffine, _CellsOnly, _Regime


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
    if kvshape.is_recurrent[il] and kvshape.architecture in kvmod.GDN_ARCHES:
        mixer = "gdn"
    elif kvshape.is_recurrent[il] and kvshape.recurrent_kind == "lightning":
        mixer = "lightning"
    elif kvshape.is_recurrent[il] and kvshape.recurrent_kind == "kda":
        mixer = "bkda" if kvshape.architecture == "bailingmoe3" else "kda"
    elif kvshape.architecture in ("rwkv7", "arwkv7") and _has(model, blk + "time_mix_lerp_fused.weight"):
        mixer = kvshape.architecture
    elif kvshape.architecture == "rwkv6" and _has(model, blk + "time_mix_lerp_fused.weight") \
            and _has(model, blk + "time_mix_first.weight"):
        mixer = "rwkv6"
    elif kvshape.architecture == "rwkv6qwen2" and _has(model, blk + "time_mix_lerp_fused.weight"):
        mixer = "rwkv6qwen2"  # without time_mix_first: the gated-linear-attention variant (is_qrwkv)
    elif _has(model, blk + "shortconv.in_proj.weight"):
        mixer = "shortconv"  # LFM2
    elif _has(model, blk + "ssm_x.weight"):
        mixer = "mamba"  # Mamba-1 (jamba, mamba): dt/B/C from an x projection
    elif _has(model, blk + "ssm_conv1d.weight") or _has(model, blk + "ssm_in.weight"):
        mixer = "mamba2"
    elif kvshape.compress_ratios:
        mixer = "dsv4"  # one K-only head, compressors by the layer's ratio (_dsv4_attention)
    elif kvshape.head_count_kv[il] and kvshape.mla:
        if not _has(model, blk + "attn_kv_a_mqa.weight"):  # llama.cpp: "missing tensor" at load
            raise GGUFError(model.path, f"tensor {blk}attn_kv_a_mqa.weight is missing: layer {il} is an MLA "
                                        "attention layer (its KV cache is sized from kv_lora_rank)")
        mixer = "mla"
    elif kvshape.head_count_kv[il]:
        mixer = "attention"
    if mixer == "mamba2" and kvshape.architecture in PARALLEL_SSM_ARCHES and kvshape.head_count_kv[il]:
        mixer = "attention+mamba2"
    shape = LayerShape(mixer)
    if mixer in ("rwkv6", "rwkv6qwen2"):  # lora: the data-dependent lerp's and the decay's low-rank widths
        shape.lora = (_rows(model, blk + "time_mix_w1.weight"), _rows(model, blk + "time_mix_decay_w1.weight"))
        shape.n_ff = _rows(model, blk + "channel_mix_key.weight") or _rows(model, blk + "ffn_up.weight")
        shape.k_rows = _rows(model, blk + "time_mix_key.weight")  # n_head_kv x head_size (rwkv6qwen2's GQA)
        return shape
    if mixer in ("rwkv7", "arwkv7"):
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
    elif mixer == "mamba":
        shape.ssm_in_rows = _rows(model, blk + "ssm_in.weight")
        shape.ssm_inner = _rows(model, blk + "ssm_out.weight", 0)
        shape.ssm_conv_channels = shape.ssm_inner
        shape.ssm_x_rows = _rows(model, blk + "ssm_x.weight")
        shape.ssm_dt_rank = _rows(model, blk + "ssm_dt.weight", 0)
        shape.ssm_state = (shape.ssm_x_rows - shape.ssm_dt_rank) // 2
        shape.ssm_norm = _has(model, blk + "ssm_dt_norm.weight") and _has(model, blk + "ssm_b_norm.weight")
    if mixer in ("mamba2", "attention+mamba2"):
        shape.ssm_in_rows = _rows(model, blk + "ssm_in.weight")
        shape.ssm_inner = _rows(model, blk + "ssm_out.weight", 0)
        conv = model.tensor_by_name.get(blk + "ssm_conv1d.weight")
        shape.ssm_conv_channels = conv.shape[-1] if conv is not None else 0
        ssm_a = model.tensor_by_name.get(blk + "ssm_a")
        shape.ssm_heads = _rows(model, blk + "ssm_dt.bias", 0) or (max(ssm_a.shape) if ssm_a is not None else 0)
        shape.ssm_norm = _has(model, blk + "ssm_norm.weight")
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
        shape.shexp_gate = _has(model, blk + "ffn_gate_inp_shexp.weight")
    elif _has(model, blk + "ffn_up.weight") or _has(model, blk + "ffn_down.weight"):
        shape.ffn = "dense"
        shape.n_ff = _rows(model, blk + "ffn_up.weight") or _rows(model, blk + "ffn_down.weight", 0)
        shape.ffn_gated = _has(model, blk + "ffn_gate.weight")
    return shape


# gating function defaults of the loaders (expert_gating_func absent): softmax, except these
_SIGMOID_DEFAULT = ("deepseek2", "kimi-k3", "kimi-linear", "glm4moe", "minimax-m2", "dots1", "deepseek32", "glm-dsa")
_SOFTMAX_WEIGHT = ("gpt-oss",)
_NORM_W_DEFAULT = ("qwen3moe", "qwen3next", "qwen35moe", "minimax-m2", "glm4moe")
_NORM_W_NEVER = ("gpt-oss", "jamba")  # openai-moe.cpp / jamba.cpp pass false whatever the key says
_NORM_W_ALWAYS = ("lfm2moe", "ernie4_5-moe", "kimi-linear", "minimax-01", "qwen4exp")  # lfm2.cpp, ernie4-5-moe.cpp, kimi-linear.cpp, minimax-01.cpp, qwen4exp.cpp pass true
# mixers whose builder first expands a gather of the cached state (build_rs), which does not depend
# on the layer input: the loaders expand nothing at a layer's end, so it runs before the previous tail
STATE_FIRST_MIXERS = ("mamba", "mamba2", "shortconv", "lightning", "bkda")
NO_ROPE_ARCHES = ("nemotron_h", "nemotron_h_moe", "jamba",  # build_qkv without ggml_rope_ext
                  "kimi-k3", "kimi-linear")  # NoPE MLA: k_pe and q_pe are views, never roped
PARALLEL_SSM_ARCHES = ("falcon-h1",)  # attention and Mamba-2 side by side in every block, outputs added
RESIDUAL_FIRST_ARCHES = ("jamba", "lfm2", "lfm2moe", "kimi-k3")  # ggml_add(residual, layer output)
RELU_SQR_ARCHES = ("nemotron_h", "nemotron_h_moe")  # LLM_FFN_RELU_SQR experts, shared expert and dense FFN
# ... of those, the loaders whose t_h_nextn is the state before the output norm (openai-moe.cpp, step35.cpp:
# get_rows, then the norm); the others norm every row first and drop the rows after it
NEXTN_RAW_STATE = ("gpt-oss", "step35")
# loaders that expand the attention norm before the layer body (before a delta net gathers its states)
NORM_FIRST_ARCHES = ("qwen3next", "qwen35", "qwen35moe", "kimi-linear")
# loaders whose residuals are the *normed* block inputs, scaled by residual_scale (minimax-01.cpp: the
# attention adds scale(attn_norm(x)), the FFN scale(ffn_norm(h)))
NORMED_RESIDUAL_ARCHES = ("minimax-01",)
# loaders whose graph has no inp_out_ids and no embeddings input (dflash.cpp's decoder: the draft's
# block of tokens embedded from their ids, every row to the logits whatever n_outputs_max is)
EVERY_ROW_ARCHES = ("dflash",)
# loaders whose blocks have no pre-norms (exaone4.cpp): attention and FFN read the stream itself and
# their outputs are RMS-normed before each residual add
POST_NORM_ARCHES = ("exaone4",)
# build_layer_attn of qwen3next.cpp / qwen35moe.cpp / qwen35.cpp: attn_q gives the query and the output
# gate side by side (Qcur_full); the gate is made contiguous after the attention (ggml_cont_2d)
GATED_Q_ARCHES = ("qwen3next", "qwen35", "qwen35moe", "qwen4exp")
# llama_model_rope_type: M-RoPE / interleaved M-RoPE (4 positions per token), always or with rope sections
MROPE_ARCHES = ("qwen2vl", "paddleocr", "qwen3vl", "qwen3vlmoe", "qwen35", "qwen35moe", "qwen4exp", "qwen3tts")
MROPE_IF_SECTIONS = ("glm4", "glm4moe", "bailingmoe3", "hunyuan_vl")
# Loaders whose graph keeps the trunk's last hidden state as an output (t_h_nextn) and drops the
# non-output rows after the trunk instead of inside the last layer (src/models/*.cpp).
NEXTN_TAIL = ("bailingmoe3", "cohere2moe", "gemma4", "hy_v3", "nemotron_h", "nemotron_h_moe", "gpt-oss", "qwen35",
              "qwen35moe", "qwen3next", "step35")


def graph_shape(model, kvshape=None):
    """The GraphShape of an open moetools.gguf.Model. Raises GGUFError naming what is missing."""
    kvshape = kvshape or kvmod.kv_shape(model)
    arch = model.architecture
    n_embd = model.get_int(Keys.EMBEDDING_LENGTH, None, required_for="the compute buffer")
    n_vocab = _rows(model, "output.weight") or _rows(model, "token_embd.weight")
    if not n_vocab:
        if arch == "dflash":  # dflash.cpp then takes the target's (ctx_other)
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
    if arch == "qwen4exp":  # qwen4exp.cpp passes softmax whatever expert_gating_func says
        gating = 1
    norm_w = (bool(model.get("{arch}.expert_weights_norm", arch in _NORM_W_DEFAULT)) and arch not in _NORM_W_NEVER
              or arch in _NORM_W_ALWAYS)
    scale = model.get("{arch}.expert_weights_scale", 0.0)
    w_scale = isinstance(scale, (int, float)) and float(scale) not in (0.0, 1.0)
    layers = [_layer_shape(model, il, kvshape, [k or 0 for k in top_k], n_expert, gating, norm_w, w_scale)
              for il in range(kvshape.trunk_layers)]
    head_count = [value or 0 for value in model.layer_values(Keys.HEAD_COUNT, 0)]
    shape = GraphShape(architecture=arch, n_embd=n_embd, n_vocab=n_vocab, layers=layers, n_head=head_count)
    if arch == "gemma3n":
        _gemma3n_widths(model, shape)
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
        if arch == "dots3note":
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
    elif arch == "glm5-next":  # mHC streams around KDA and NoPE MLA with the k-pool indexer
        need = "GLM5-Next's compute"
        shape.dsv4 = {"hc": model.get_int("{arch}.hyper_connection.count", None, required_for=need),
                      "kpool": model.get_int("{arch}.attention.indexer.kpool", None, required_for=need),
                      "select_tail": bool(model.get("{arch}.attention.indexer.kpool_select_tail", False))}
    elif arch == "qwen4exp":  # low-rank hyper-connections, QSA over the attention layers
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
    elif arch == "hy_v4":  # iHC streams around MLA
        shape.dsv4 = {"hc": model.get_int("{arch}.hyper_connection.count", None, required_for="Hunyuan-V4's compute")}
    if kvshape.borrowed:
        shape.n_embd_target = model.get_int("{arch}.embedding_length_out", None, required_for="the assistant's input")
    if kvshape.indexer_width and arch in kvmod.MSA_ARCHES:
        shape.indexer_heads = model.get_int("{arch}.attention.indexer.head_count", None,
                                            required_for="the MSA indexer's compute")
        shape.indexer_head = kvshape.indexer_width
        shape.indexer_top_k = model.get_int("{arch}.attention.indexer.top_k", None, required_for="the MSA indexer's compute")
        shape.indexer_block = model.get_int("{arch}.attention.indexer.block_size", None,
                                            required_for="the MSA indexer's compute")
        if shape.indexer_block < 1:
            raise GGUFError(model.path, "MSA indexer block size 0 (llama.cpp asserts it is positive)",
                            key=model.key("{arch}.attention.indexer.block_size"))
    if kvshape.indexer_width and arch not in kvmod.MSA_ARCHES:
        shape.indexer_heads = model.get_int("{arch}.attention.indexer.head_count", None,
                                            required_for="the DSA lightning indexer's compute")
        shape.indexer_head = kvshape.indexer_width
        if arch == "glm5-next":  # (its cache row is key, gate and pooled key)
            shape.indexer_head = model.get_int(kvmod.INDEXER_KEY_LENGTH, None, required_for="the DSA lightning indexer's compute")
        shape.indexer_top_k = model.get_int("{arch}.attention.indexer.top_k", None,
                                            required_for="the DSA lightning indexer's compute")
    return shape


def _gemma3n_widths(model, shape):
    """gemma3n's AltUp stream count, per-layer input width and LAuReL rank, from the tensors the loader
    sizes with them (llama_hparams defaults 4, 256 and 64, not keys). Raises GGUFError."""
    altup = model.tensor_by_name.get("altup_proj.weight")
    norm = model.tensor_by_name.get("per_layer_proj_norm.weight")
    laurel = _rows(model, "blk.0.laurel_l.weight")
    if altup is None or len(altup.shape) < 3 or norm is None or not laurel:
        raise GGUFError(model.path, "gemma3n needs altup_proj.weight, per_layer_proj_norm.weight and "
                                    "blk.0.laurel_l.weight to size its compute buffer")
    shape.altup, shape.altup_width, shape.laurel_rank = altup.shape[2] + 1, norm.shape[0], laurel


# --- the graph builders -----------------------------------------------------------------------

class _Build:
    """State shared by the layer builders: the graph, token counts, masks and index inputs."""

    def __init__(self, graph_shape, kvshape, caches, settings, tokens, streams, homes=None):
        self.g = Graph()
        self.shape = graph_shape
        self.kv = kvshape
        self.settings = settings
        self.fa = settings.flash_attn
        self.T = tokens
        self.streams = streams
        self.cells = {cache.kind: cache.cells for cache in caches}
        self.homes = homes  # Homes: which device holds each layer and expert matrix (None: one device)
        self._externals = {}
        self.move(0, -1)
        self.masks = {}
        self.k_idxs = {}
        self.v_idxs = {}
        self.pos = None
        self.k_rot = self.v_rot = None
        self.rot_swa = (None, None)  # the sliding-window cache's own k/v rotation inputs (gemma3n reads them)
        self.s_copy = None
        self.s_views = None  # (s_copy_main, s_copy_extra): _state_views
        self.msa = None  # minimax-m3's MSA inputs (_msa_inputs) when its sparse attention runs
        self.iswa = False  # the attention reads llama_kv_cache_iswa's inputs (even with no sliding-window layer)

    def _external(self, key, device, weight, nbytes=0):
        tensor = self._externals.get(key)
        if tensor is None:
            tensor = self._externals[key] = self.g.external(device, weight, nbytes)
        return tensor

    def move(self, dev, il):
        """Build layer il (-1: the input or output layer) on device `dev`: `weights` and `cache` are
        its weights and KV cache there (one external per device — only where they live matters — and
        per CPU layer, whose largest weight sizes the copy a GPU makes when it offloads the layer's ops)."""
        self.dev, self.il = dev, il
        if isinstance(self.homes, _Slots):
            self.weights, self.cache = self.homes.layer_externals(self, dev, il)
            return
        key = il if dev == HOST and self.homes is not None else None
        self.weights = self._external(("w", dev, key), dev, True, self._dense_copy_bytes())
        self.cache = self._external(("kv", dev), dev, False)

    def expert_weights(self, il, part):
        """An expert matrix of block il: on the device its -ot override (or its layer) puts it."""
        if self.homes is None:
            return self.weights
        if isinstance(self.homes, _Slots):
            return self.homes.expert_external(self, il, part)
        device = self.homes.expert_device.get(il, {}).get(part, self.dev)
        return self._external(("x", il, part), device, True, self.homes.expert_bytes.get(il, {}).get(part, 0))

    def _dense_copy_bytes(self):
        """What offloading one of this layer's CPU weights to a GPU copies: its largest dense tensor."""
        if self.homes is None or self.dev != HOST:
            return 0
        return self.homes.dense_max_bytes.get(self.il, 0)

    def f32(self, *dims):
        n = F32_BYTES
        for dim in dims:
            n *= dim
        return n

    def mm(self, rows, x, cols=None):
        return self.g.op(self.f32(rows, cols or self.T), self.weights, x)

    def norm(self, x, width, weight=True, pinned=True):
        """An RMS norm (times the layer's weight): pinned, it is build_norm's "norm", which graph_get_cb
        pins to the layer's device with full offload; a bare ggml_rms_norm (kimi-k3's residual scores)
        has no name and the scheduler places it."""
        cur = self.g.op(self.f32(width, self.T), x, inplace=(0,))
        pinned = pinned and weight and self.il >= 0
        if pinned and isinstance(self.homes, _Slots):
            self.homes.pins.append((cur, self.il))
        elif pinned and self.homes is not None and self.homes.full_offload:
            # llama_context::graph_get_cb pins a layer's "norm" to the layer's device when every layer is
            # offloaded (else the scheduler would run it on the previous layer's device)
            cur.device = self.dev
        if weight:
            cur = self.g.op(self.f32(width, self.T), cur, self.weights, inplace=(0,))
        return cur

    def unary(self, x, nbytes):
        return self.g.op(nbytes, x, inplace=(0,))


class _Slots:
    """The homes of a graph built once for every placement of a model (placement_buffers): each layer
    gets its own weight, KV-cache and expert-matrix externals and every pinnable norm is noted, so a
    placement only binds their devices and bytes (`bind`) instead of rebuilding 13,000 tensors. Sharing
    one external between a device's layers (the plain build) changes nothing the scheduler or the
    allocator sees: a node runs where its weight lives, so only host weights are ever copied, and those
    are per layer in both; tests/test_devicefit_compute_fast.py checks the figures equal."""

    def __init__(self, homes):
        self.real = homes  # the placement the build was asked for (its skipped layers)
        self.n_layer = len(homes.layer_device) - 1
        self.layer_device = [("layer", il) for il in range(self.n_layer)] + [("layer", -1)]
        self.full_offload = True
        self.input_weights = None
        self.dense = []  # (external, layer key): the layer's weights (-1: the output layer)
        self.caches = []  # (external, layer key)
        self.experts = []  # (external, block, part)
        self.pins = []  # (norm node, block)
        self.placed = []  # (tensor, layer key): put on its layer's device by the builder

    def layer_externals(self, b, dev, il):
        if not isinstance(dev, tuple):  # the input layer (HOST: its token embeddings stay on the CPU)
            weights = b._external(("w", dev, -1), dev, True)
            if dev == HOST:
                self.input_weights = weights
            return weights, b._external(("kv", dev), dev, False)
        key = dev[1]
        weights = b._externals.get(("w", key))
        if weights is None:
            weights = b._external(("w", key), None, True)
            cache = b._external(("kv", key), None, False)
            self.dense.append((weights, key))
            self.caches.append((cache, key))
        return weights, b._externals[("kv", key)]

    def expert_external(self, b, il, part):
        tensor = b._externals.get(("x", il, part))
        if tensor is None:
            tensor = b._external(("x", il, part), None, True)
            self.experts.append((tensor, il, part))
        return tensor

    def bind(self, homes):
        """Give every external and pinned norm the device (and copy bytes) `homes` puts it on."""
        where = lambda key: homes.layer_device[key]  # noqa: E731  (key -1: the output layer)
        for tensor, key in self.dense:
            tensor.device = where(key)
            tensor.nbytes = homes.dense_max_bytes.get(key, 0) if tensor.device == HOST else 0
        input_weights = self.input_weights
        if input_weights is not None:
            input_weights.nbytes = homes.dense_max_bytes.get(-1, 0)
        for tensor, key in self.caches:
            tensor.device = where(key)
        for tensor, il, part in self.experts:
            tensor.device = homes.expert_device.get(il, {}).get(part, homes.layer_device[il])
            tensor.nbytes = homes.expert_bytes.get(il, {}).get(part, 0)
        pin = homes.full_offload
        for node, il in self.pins:
            node.device = homes.layer_device[il] if pin else None
        for tensor, key in self.placed:
            tensor.device = homes.layer_device[key]


def _attention_inputs(b, kinds):
    g, T = b.g, b.T
    mask_type = F16_BYTES if b.fa else F32_BYTES
    v_trans = not b.fa
    v_max = max((hkv * width for hkv, width in zip(b.kv.head_count_kv, b.kv.v_width)), default=0)
    for kind in kinds:
        b.k_idxs[kind] = g.input(I64_BYTES * T)
        if not b.kv.mla:
            b.v_idxs[kind] = g.input(I64_BYTES * T * (v_max if v_trans else 1))
        b.masks[kind] = g.input(mask_type * b.cells[kind] * T)
    quantized = lambda name: kvmod.cache_type(name)[0] > 1  # noqa: E731
    head_k = max(b.kv.k_width[: b.kv.trunk_layers] or [0])
    if quantized(b.settings.ctk) and head_k and head_k % 64 == 0:
        nrot = 64
        while head_k % (nrot * 2) == 0:
            nrot *= 2
        b.k_rot = g.input(b.f32(nrot, nrot))
    head_v = max(b.kv.v_width[: b.kv.trunk_layers] or [0])
    if quantized(b.settings.ctv) and head_v and head_v % 64 == 0 and not b.kv.mla:
        b.v_rot = g.input(b.f32(64, 64))
    if "swa" in kinds:  # llama_kv_cache_iswa: each cache builds its own (of the same widths here)
        b.rot_swa = tuple(g.input(rot.nbytes) if rot is not None else None for rot in (b.k_rot, b.v_rot))


def _mha(b, il, q, q_bytes_per_head, kind, n_head, k_width, v_width, v_mla_rows=0, mask=None):
    """build_attn_mha: returns the attention output, n_head x v width x tokens (f32), contiguous.
    mask: the KQ mask it reads (None: the layer kind's input mask)."""
    g, T = b.g, b.T
    n_kv = b.cells[kind]
    mask = b.masks[kind] if mask is None else mask
    k = g.view(b.cache)
    v = g.view(b.cache)
    qv = g.view(g.view(q))
    if b.fa:
        cur = g.op(b.f32(v_width, n_head, T), qv, g.view(k), g.view(v), mask)
        if v_mla_rows:
            cur = g.op(b.f32(v_mla_rows, T, n_head), b.weights, g.view(cur))
            cur = g.op(b.f32(v_mla_rows, n_head, T), g.view(cur))
        return g.expand(g.view(cur))  # build_attn_mha expands its output
    kq = g.op(b.f32(n_kv, T, n_head), g.view(k), qv)
    kq = g.op(kq.nbytes, kq, mask, inplace=(0,))  # soft_max_ext
    if b.kv.mla:
        v = g.op(kvmod.row_bytes(b.settings.ctk, v_width) * n_kv * b.streams, g.view(v))  # cont(transpose(v))
    kqv = g.op(b.f32(v_width, T, n_head), v if b.kv.mla else g.view(v), kq)
    if v_mla_rows:
        kqv = g.op(b.f32(v_mla_rows, T, n_head), b.weights, kqv)
        v_width = v_mla_rows
    return g.expand(g.op(b.f32(v_width * n_head, T), g.view(kqv)))  # cont_2d


def _store(b, kind, k_cur, v_cur, v_strided, v_bytes):
    """cpy_k / cpy_v: set_rows into the caches (views of them). Without flash attention V is stored
    transposed: a strided V is made contiguous first, and a V narrower than the widest is padded."""
    g = b.g
    g.expand(g.write(b.cache, g.view(k_cur), b.k_idxs[kind]))
    if v_cur is None:
        return
    if not b.fa:
        if v_strided:
            v_cur = g.op(v_bytes, v_cur)
        v_max = max(hkv * width for hkv, width in zip(b.kv.head_count_kv, b.kv.v_width))
        if v_bytes < b.f32(v_max, b.T):
            v_cur = g.op(b.f32(v_max, b.T), v_cur)
    g.expand(g.write(b.cache, g.view(v_cur), b.v_idxs[kind]))


def _gqa_layer(b, il, x, layer, mask=None, rope=None):
    """rope: whether this layer ropes its q and k (None: the graph's rope)."""
    g, T = b.g, b.T
    kv = b.kv
    kind = "swa" if kv.is_swa[il] else "full"
    n_head, hkv = b.shape.n_head[il], kv.head_count_kv[il]
    k_width, v_width = kv.k_width[il], kv.v_width[il]
    q_rows = layer.q_rows or n_head * k_width
    if layer.fused_qkv:
        qkv = b.mm(q_rows, x)
        if layer.qkv_bias:
            qkv = g.op(qkv.nbytes, qkv, b.weights, inplace=(0,))
        q, k, v = g.view(qkv), g.view(qkv), g.view(qkv)
    else:
        q = q_full = b.mm(q_rows, x)
        if layer.qkv_bias:
            q = g.op(q.nbytes, q, b.weights, inplace=(0,))
        k = b.mm(layer.k_rows or hkv * k_width, x)
        if layer.qkv_bias:
            k = g.op(k.nbytes, k, b.weights, inplace=(0,))
        v = b.mm(layer.v_rows or hkv * v_width, x)
        if layer.qkv_bias:
            v = g.op(v.nbytes, v, b.weights, inplace=(0,))
        q, k, v = g.view(q), g.view(k), g.view(v)
    q_bytes = b.f32(n_head * k_width, T)
    k_bytes = b.f32(hkv * k_width, T)
    if layer.qk_norm:
        q = b.norm(q, n_head * k_width)
        k = b.norm(k, hkv * k_width)
    if b.shape.rope if rope is None else rope:
        q = g.op(q_bytes, q, b.pos, inplace=(0,))  # rope (a new tensor when its source is a view)
        k = g.op(k_bytes, k, b.pos, inplace=(0,))
    # build_attn (iswa): a sliding-window layer rotates by its own cache's inputs (self_k_rot_swa)
    k_rot, v_rot = b.rot_swa if kind == "swa" and any(rot is not None for rot in b.rot_swa) else (b.k_rot, b.v_rot)
    if k_rot is not None:
        q = g.view(g.op(q_bytes, k_rot, g.view(q)))
        k = g.view(g.op(k_bytes, k_rot, g.view(k)))
    if v_rot is not None:
        v = g.view(g.op(b.f32(hkv * v_width, T), v_rot, g.view(v)))
    # build_attn expands q, v, k; its sliding-window (iswa) variant q, k, v
    for tensor in ((q, k, v) if "swa" in b.cells or b.iswa else (q, v, k)):
        g.expand(tensor)
    _store(b, kind, k, v, layer.fused_qkv and v_rot is None, b.f32(hkv * v_width, T))
    cur = _mha(b, il, q, k_width, kind, n_head, k_width, v_width, mask=mask)
    if v_rot is not None:
        cur = g.view(g.op(b.f32(n_head * v_width, T), v_rot, g.view(cur)))
    if layer.gated_q:  # the gate half of Qcur_full (alive until here), contiguous, sigmoid, times the output
        gate = g.op(b.f32(n_head * k_width, T), g.view(q_full))
        gate = b.unary(gate, gate.nbytes)
        cur = g.op(b.f32(n_head * v_width, T), cur, gate, inplace=(0, 1))
    elif layer.gate_rows:
        gate = b.mm(layer.gate_rows, x)
        gate = b.unary(gate, gate.nbytes)
        cur = g.op(cur.nbytes if cur.nbytes else b.f32(n_head * v_width, T), cur, gate)
    cur = b.mm(b.shape.n_embd, cur)
    if layer.o_bias:
        cur = g.op(cur.nbytes, cur, b.weights, inplace=(0,))
    return cur


def _mla_layer(b, il, x, layer):
    g, T = b.g, b.T
    shape = b.shape
    n_head = shape.n_head[il]
    kv_lora, rope, nope, v_head = shape.kv_lora, shape.mla_rope, shape.mla_nope, shape.mla_v_head
    kind = "swa" if b.kv.is_swa[il] else "full"
    if kind == "swa" and shape.mla_swa:  # dots3note's sliding-window layers: their own MLA widths
        kv_lora, nope, v_head = shape.mla_swa
    dots3 = shape.architecture == "dots3note"
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
    if dots3:  # dots3note.cpp: an RMS norm of the shared rope key (a view: a new tensor) before its rope
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
    cur = _mha(b, il, q_cur, kv_lora + rope, kind, n_head, kv_lora + rope, kv_lora, v_mla_rows=v_head, mask=mask)
    if layer.gate_rows and shape.architecture == "bailingmoe3":
        # bailingmoe3.cpp: one sigmoid gate per head (of a reshape: a new tensor), the output reshaped
        # (a view: the mul is a new tensor) and made contiguous before the projection
        gate = b.unary(g.view(b.mm(layer.gate_rows, x)), b.f32(layer.gate_rows, T))
        cur = g.op(b.f32(n_head * v_head, T), g.view(cur), gate)
        cur = g.op(cur.nbytes, g.view(cur))
    elif layer.gate_rows:
        gate = b.mm(layer.gate_rows, x)
        gate = b.unary(gate, gate.nbytes)
        if dots3:  # the head-wise gate broadcast over reshapes: a new tensor
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
    if b.shape.architecture != "hy_v4":  # hy-v4.cpp skips the rotation (it only helps FP8 kernels)
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


def _kda_conv_windows(b, x, d_inner, copies):
    """A KDA block's conv states gathered at once (build_rs), then per q/k/v a projection, its concat
    with its state and `copies` copies of the window back to the cache: the three concats."""
    g, T = b.g, b.T
    n_seq = max(1, b.settings.n_seq)
    s_main, s_extra = _state_views(b)
    conv_states = g.expand(g.op(b.f32(b.kv.state_r, n_seq), g.view(b.cache), s_main))
    g.expand(g.view(b.cache, g.op(0, g.view(b.cache), s_extra)))
    conv_ins = []
    for _ in range(3):
        proj = b.mm(d_inner, x)
        conv_in = g.op(b.f32(d_inner, T) + b.f32(b.kv.state_r // 3, n_seq), g.view(conv_states), g.view(proj))
        for _ in range(copies):
            g.expand(g.view(b.cache, g.view(conv_in)))  # the window back to the cache
        conv_ins.append(conv_in)
    return conv_ins


def _kda_layer(b, il, x, layer):
    """Kimi delta attention (kimi-k3.cpp build_kda_layer, kimi-linear.cpp): the three conv states
    gathered at once (build_rs), per q/k/v a projection, the concat with its state and the copy back
    (one per rollback snapshot), the ssm states gathered; each conv, silu (of a reshape: a new tensor),
    q and k l2-normed; the decay gate f_b(f_a x) + dt (softplus, times A: a new tensor after the
    reshape), beta's sigmoid, the fused GATED_DELTA_NET (its output rows and state snapshots), the
    states copied back, the output made contiguous, normed, times sigmoid of the output gate (ssm_g, or
    kimi-linear's g_b(g_a x)), made contiguous again and projected."""
    g, T = b.g, b.T
    n_seq = max(1, b.settings.n_seq)
    d_inner = layer.q_rows
    snapshots = 1 + b.settings.rs_seq if b.kv.architecture in kvmod.RS_ROLLBACK_ARCHES else 1
    s_main, s_extra = _state_views(b)
    conv_ins = _kda_conv_windows(b, x, d_inner, snapshots if b.kv.architecture in ("kimi-k3", "glm5-next") else 1)
    gate = g.op(b.f32(d_inner, T), b.weights, b.mm(layer.ssm_dt_rank or d_inner, x))  # f_b(f_a x)
    gate = b.unary(g.op(gate.nbytes, gate, b.weights, inplace=(0,)), gate.nbytes)  # + dt bias, softplus
    gate = g.op(gate.nbytes, g.view(gate), b.weights, inplace=(0,))  # * A (of a reshape: a new tensor)
    gate = b.unary(b.unary(gate, gate.nbytes), gate.nbytes)  # K3's lower-bound path: scale, sigmoid, scale
    beta = b.unary(g.view(b.mm(b.shape.n_head[il] or 1, x)), b.f32(b.shape.n_head[il] or 1, T))
    state = g.expand(g.op(b.f32(b.kv.state_s, n_seq), g.view(b.cache), s_main))
    g.expand(g.view(b.cache, g.op(0, g.view(b.cache), s_extra)))
    qkv = []
    for index, conv_in in enumerate(conv_ins):
        conv = b.unary(g.view(g.op(b.f32(d_inner, T), conv_in, b.weights)), b.f32(d_inner, T))  # ssm_conv, silu
        if index < 2:  # l2 norm: rms_norm of a reshape, scale in place
            conv = b.unary(g.op(b.f32(d_inner, T), g.view(conv), inplace=(0,)), b.f32(d_inner, T))
        qkv.append(conv)
    out = g.op(b.f32(d_inner, T) + snapshots * b.f32(b.kv.state_s, n_seq), qkv[0], qkv[1], g.view(qkv[2]),
               g.view(gate), g.view(beta), g.view(state))
    g.expand(g.view(b.cache, g.view(out)))  # the new state(s) back to the cache
    y = g.op(b.f32(d_inner, T), g.view(out))  # cont
    y = b.norm(g.view(y), d_inner)
    out_gate = b.mm(d_inner, b.mm(layer.ssm_inner, g.view(x))) if layer.ssm_inner else b.mm(d_inner, g.view(x))
    y = g.op(y.nbytes, y, b.unary(g.view(out_gate), out_gate.nbytes), inplace=(0, 1))  # * sigmoid(g2)
    y = g.op(b.f32(d_inner, T), y)  # cont_2d
    return b.mm(b.shape.n_embd, y)


def _bailing_kda_layer(b, il, x, layer):
    """bailingmoe3's KDA block (bailingmoe3.cpp): the conv states gathered (build_rs), then per q/k/v its
    projection, the concat with its state and the copies back (one per written rollback snapshot); only
    those are expanded, so the rest joins the graph when the delta net's state copy does: per q, k, v the
    conv and silu (of a reshape: a new tensor), q and k l2-normed (rms_norm of a view, scale in place),
    the decay gate (f_a x + dt bias, times A, sigmoid, scale), beta's sigmoid, the fused GATED_DELTA_NET
    (output rows and state snapshots); then the output contiguous, RMS-normed, times sigmoid of the
    output gate (g_a x), contiguous again and projected."""
    g, T = b.g, b.T
    n_seq = max(1, b.settings.n_seq)
    d_inner = layer.q_rows
    n_head = b.shape.n_head[il] or 1
    t = T // n_seq
    snapshots = 1 + b.settings.rs_seq
    s_main, s_extra = _state_views(b)
    conv_ins = _kda_conv_windows(b, x, d_inner, min(t, snapshots))
    state = g.expand(g.op(b.f32(b.kv.state_s, n_seq), g.view(b.cache), s_main))
    g.expand(g.view(b.cache, g.op(0, g.view(b.cache), s_extra)))
    qkv = []
    for index, conv_in in enumerate(conv_ins):
        conv = b.unary(g.view(g.op(b.f32(d_inner, T), conv_in, b.weights)), b.f32(d_inner, T))  # ssm_conv, silu
        if index < 2:  # build_gdn_l2_norm: rms_norm of a reshape (a new tensor), scale in place
            conv = b.unary(g.op(b.f32(d_inner, T), g.view(conv), inplace=(0,)), b.f32(d_inner, T))
        qkv.append(conv)
    gate = g.op(b.f32(d_inner, T), b.mm(d_inner, x), b.weights, inplace=(0,))  # f_a x + dt bias
    gate = g.op(gate.nbytes, g.view(gate), b.weights, inplace=(0,))  # * A (of a reshape: a new tensor)
    gate = b.unary(b.unary(gate, gate.nbytes), gate.nbytes)  # sigmoid, scale by the lower bound
    beta = b.unary(g.view(b.mm(n_head, x)), b.f32(n_head, T))  # sigmoid of a reshape: a new tensor
    out = g.op(b.f32(d_inner, T) + snapshots * b.f32(b.kv.state_s, n_seq), g.view(qkv[0]), g.view(qkv[1]),
               g.view(qkv[2]), g.view(gate), beta, g.view(state))
    for _ in range(min(t, snapshots) if snapshots > 1 else 1):
        g.expand(g.view(b.cache, g.view(out), g.view(b.cache)))  # the new state(s) back to the cache
    y = g.op(b.f32(d_inner, T), g.view(out))  # cont
    y = b.norm(g.view(y), d_inner)
    out_gate = b.mm(d_inner, x)
    y = g.op(y.nbytes, y, b.unary(g.view(out_gate), out_gate.nbytes), inplace=(0, 1))  # * sigmoid(g_a x)
    y = g.op(b.f32(d_inner, T), g.view(y))  # cont_2d
    return b.mm(b.shape.n_embd, y)


def _gdn_layer(b, il, x, layer):
    """Gated delta net (qwen35moe.cpp / qwen3next.cpp build_layer_attn_linear, delta-net-base.cpp): the
    q/k/v (and z) projections, beta and alpha (the gate: bias, softplus, A in place), the conv states
    gathered (build_rs) and concatenated with the tokens (build_conv_state), the ssm states gathered,
    the conv and silu, l2-normed q and k (rms_norm of a view: new tensors; qwen3next repeats them to the
    value heads), the fused GATED_DELTA_NET op (llama_context turns fused_gdn_ar/ch on: the output rows
    and 1 + n_rs_seq state snapshots in one tensor), its states copied back to the cache, the gated norm
    (z's silu read last) and the output projection. Views are never reused in place, so the residual add
    after the layer takes the stream's memory (the layer's output is a reshape)."""
    g, T = b.g, b.T
    n_seq = max(1, b.settings.n_seq)
    channels, inner, heads = layer.ssm_conv_channels, layer.ssm_inner, layer.ssm_heads
    key = (channels - inner) // 2
    snapshots = 1 + b.settings.rs_seq if b.kv.architecture in kvmod.RS_ROLLBACK_ARCHES else 1
    if layer.ssm_legacy:  # build_qkvz's legacy path: one projection split by contiguous copies and concats
        qkvz = b.mm(layer.ssm_in_rows, x)
        z = g.op(b.f32(inner, T), g.view(qkvz))
        q_flat = g.op(b.f32(key, T), g.view(qkvz))
        k_flat = g.op(b.f32(key, T), g.view(qkvz))
        v_flat = g.op(b.f32(inner, T), g.view(qkvz))
        mixed = g.op(b.f32(channels, T), g.op(b.f32(2 * key, T), q_flat, k_flat), v_flat)
    else:
        mixed = b.mm(channels, x)
        z = b.mm(inner, x)
    if layer.ssm_ba:  # qwen3next: beta and alpha from one projection, each made contiguous
        ba = b.mm(2 * heads, x)
        beta = b.unary(g.op(b.f32(heads, T), g.view(ba)), b.f32(heads, T))  # cont, sigmoid in place
        alpha = g.op(b.f32(heads, T), g.view(ba))  # cont_3d
        alpha = g.op(alpha.nbytes, alpha, b.weights, inplace=(0,))  # + dt bias
    else:
        beta = b.unary(g.view(b.mm(heads, x)), b.f32(heads, T))  # sigmoid of a reshape: a new tensor
        alpha = g.op(b.f32(heads, T), g.view(b.mm(heads, x)), b.weights, inplace=(0,))
    gate = g.op(alpha.nbytes, b.unary(alpha, alpha.nbytes), b.weights, inplace=(0,))  # softplus, * A
    s_main, s_extra = _state_views(b)
    conv_state = g.expand(g.op(b.f32(b.kv.state_r, n_seq), g.view(b.cache), s_main))  # build_rs
    g.expand(g.view(b.cache, g.op(0, g.view(b.cache), s_extra)))  # its extra states (none reserving)
    conv_in = g.op(b.f32(channels, T) + b.f32(b.kv.state_r, n_seq), g.view(conv_state), g.view(mixed))  # concat
    g.expand(g.view(b.cache, g.view(conv_in)))  # the last d_conv-1 columns back to the cache
    state = g.expand(g.op(b.f32(b.kv.state_s, n_seq), g.view(b.cache), s_main))
    g.expand(g.view(b.cache, g.op(0, g.view(b.cache), s_extra)))
    conv = b.unary(g.op(b.f32(channels, T), conv_in, b.weights), b.f32(channels, T))  # ssm_conv, silu
    q = b.unary(g.op(b.f32(key, T), g.view(conv), inplace=(0,)), b.f32(key, T))  # l2 norm: rms_norm, scale
    k = b.unary(g.op(b.f32(key, T), g.view(conv), inplace=(0,)), b.f32(key, T))
    if layer.ssm_groups != heads and b.kv.architecture == "qwen3next":  # repeat to the value heads
        q = g.view(g.op(b.f32(key // layer.ssm_groups * heads, T), g.view(q)))
        k = g.view(g.op(b.f32(key // layer.ssm_groups * heads, T), g.view(k)))
    out = g.op(b.f32(inner, T) + snapshots * b.f32(b.kv.state_s, n_seq), q, k, g.view(conv), g.view(gate),
               g.view(beta), g.view(state))
    g.expand(g.view(b.cache, g.view(out)))  # the new state(s) back to the cache
    y = b.norm(g.view(out), inner)
    y = g.op(y.nbytes, y, b.unary(g.view(z), z.nbytes), inplace=(0, 1))  # * silu(z)
    return g.view(b.mm(b.shape.n_embd, g.view(y)))


def _lightning_inputs(b):
    """minimax-01.cpp's llm_graph_input_la: the per-head slopes, the q and k decay exponents (one per head
    and token) and the diagonal decay (n_seq_tokens^2 per head and sequence), all f32."""
    if getattr(b, "la", None) is None:
        heads = b.shape.n_head[0]
        n_seq = max(1, b.settings.n_seq)
        t = b.T // n_seq
        g = b.g
        b.la = (g.input(b.f32(heads)), g.input(b.f32(heads, b.T)), g.input(b.f32(heads, b.T)),
                g.input(b.f32(t, t, heads, n_seq)))
    return b.la


def _lightning_layer(b, il, x, layer):
    """MiniMax-01's lightning attention block (minimax-01.cpp): the (empty) conv state and the state
    gathered (build_rs), the silu'd fused qkv, the decays exp(scale(input)), q times its decay against
    the old state, the intra-chunk q k^T times the diagonal decay against v (contiguous), their sum; the
    block decay of the slopes, the old state times it plus (k times its decay, contiguous) v^T, copied
    back to the cache; the output permuted contiguous, RMS-normed, times sigmoid of the gate, projected.
    Views (the q/k/v slices, the state's reshape) are never reused in place."""
    g, T = b.g, b.T
    n_seq = max(1, b.settings.n_seq)
    heads = b.shape.n_head[il]
    head = layer.q_rows // (3 * heads)
    t = T // n_seq
    slopes, q_decay_in, k_decay_in, diag_decay_in = _lightning_inputs(b)
    s_main, s_extra = _state_views(b)
    g.expand(g.op(b.f32(b.kv.state_r, n_seq), g.view(b.cache), s_main))  # conv state (0 wide)
    g.expand(g.view(b.cache, g.op(0, g.view(b.cache), s_extra)))
    slope_rate = g.op(b.f32(heads), slopes, inplace=(0,))
    qkv_mixed = b.unary(b.mm(layer.q_rows, g.view(x)), b.f32(layer.q_rows, T))  # silu
    q, k, v = g.view(qkv_mixed), g.view(qkv_mixed), g.view(qkv_mixed)
    state = g.expand(g.op(b.f32(b.kv.state_s, n_seq), g.view(b.cache), s_main))
    g.expand(g.view(b.cache, g.op(0, g.view(b.cache), s_extra)))
    kv_old = g.view(state)
    decay = lambda source: b.unary(g.op(source.nbytes, source, inplace=(0,)), source.nbytes)  # noqa: E731
    q_decay = decay(q_decay_in)
    q_s = g.op(b.f32(head, heads, T), q, q_decay)
    qkv_none_diag = g.op(b.f32(head, t, heads, n_seq), kv_old, g.view(q_s))
    qk = g.op(b.f32(t, t, heads, n_seq), g.view(k), g.view(q))
    qk = g.op(qk.nbytes, qk, decay(diag_decay_in), inplace=(0,))
    v_trans = g.op(b.f32(head, heads, T), g.view(v))  # cont(permute)
    qkv_diag = g.op(b.f32(head, t, heads, n_seq), v_trans, qk)
    out = g.expand(g.op(qkv_none_diag.nbytes, qkv_none_diag, qkv_diag, inplace=(0,)))
    block_decay = b.unary(g.op(slope_rate.nbytes, slope_rate, inplace=(0,)), slope_rate.nbytes)  # scale, exp
    kv_old_s = g.op(b.f32(b.kv.state_s, n_seq), kv_old, g.view(block_decay))
    k_after = g.op(b.f32(head, heads, T), k, decay(k_decay_in))
    k_after_trans = g.op(k_after.nbytes, g.view(k_after))  # cont(permute)
    kv_cur = g.op(b.f32(b.kv.state_s, n_seq), k_after_trans, v_trans)
    kv_new = g.op(kv_cur.nbytes, kv_old_s, kv_cur, inplace=(0,))
    g.expand(g.view(b.cache, kv_new, g.view(b.cache)))  # cpy into the state cache
    out = g.op(b.f32(head * heads, T), g.view(out))  # cont(permute)
    out = b.norm(g.view(out), head * heads)
    gate = b.unary(b.mm(layer.gate_rows, g.view(x)), b.f32(layer.gate_rows, T))  # sigmoid
    out = g.op(gate.nbytes, gate, out, inplace=(0, 1))
    return g.view(b.mm(b.shape.n_embd, out))


def _state_copy(b):
    """build_rs_inp: the recurrent cache's s_copy input (i32, one per cell: n_seq of them)."""
    if b.s_copy is None:
        b.s_copy = b.g.input(I32_BYTES * max(1, b.settings.n_seq))
    return b.s_copy


def _state_views(b):
    """build_rs_inp's two views of s_copy, s_copy_main (the rows the ubatch's sequences gather) and
    s_copy_extra (the states copied along: none when reserving), made once per graph and read by every
    recurrent layer: split across devices, each backend holds one copy of each view for the whole graph
    (ggml-backend copies a tensor once per backend), not one per layer."""
    if b.s_views is None:
        s_copy = _state_copy(b)
        b.s_views = (b.g.view(s_copy), b.g.view(s_copy))
    return b.s_views


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
    out = _ffn(b, b.norm(ffn_inp, n_embd), layer.n_ff, True)
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
    s_main, s_extra = _state_views(b)
    shift = g.expand(g.op(b.f32(b.kv.state_r, n_seq), g.view(b.cache), s_main))
    g.expand(g.view(b.cache, g.op(0, g.view(b.cache), s_extra)))
    inp = g.view(cur)
    arwkv = layer.mixer == "arwkv7"

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
    qrwkv = layer.mixer == "rwkv6qwen2"
    n_seq = max(1, b.settings.n_seq)
    f = lambda rows=n_embd: b.f32(rows, b.T)  # noqa: E731
    s_main, s_extra = _state_views(b)
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


def _shortconv_layer(b, il, x, layer):
    """LFM2's short-convolution block (src/models/lfm2.cpp build_shortconv_block): the conv state
    gathered first, in_proj to b/c/x, b*x (a new tensor: both are views), the state and b*x
    concatenated, written back, the conv, c*conv in place of the conv and out_proj."""
    g, T, n_embd = b.g, b.T, b.shape.n_embd
    n_seq = max(1, b.settings.n_seq)
    s_main, s_extra = _state_views(b)
    conv_state = g.expand(g.op(b.f32(b.kv.state_r, n_seq), g.view(b.cache), s_main))
    g.expand(g.view(b.cache, g.op(0, g.view(b.cache), s_extra)))
    bcx = b.mm(3 * n_embd, g.view(x))
    bx = g.op(b.f32(n_embd, T), g.view(bcx), g.view(bcx))
    conv_in = g.op(b.f32(n_embd, T) + b.f32(b.kv.state_r, n_seq), g.view(conv_state), g.view(bx))
    g.expand(g.view(b.cache, g.view(conv_in)))
    conv = g.op(b.f32(n_embd, T), conv_in, b.weights)
    y = g.op(conv.nbytes, g.view(bcx), conv, inplace=(0, 1))
    return b.mm(n_embd, y)


def _mamba_layer(b, il, x, layer):
    """llm_build_mamba_base::build_mamba_layer (Mamba-1, jamba): conv states gathered, x/z projection,
    conv input, conv with bias and silu, the x projection to dt/B/C (RMS-normed when the layer has the
    norms, else dt made contiguous), dt's projection and bias, the scan (outputs and new state), y +
    x*D (the mul in place of the conv output, which is not a view here), z made contiguous, the gated
    output and the output projection."""
    g, T = b.g, b.T
    n_seq = max(1, b.settings.n_seq)
    inner, rank, state = layer.ssm_inner, layer.ssm_dt_rank, layer.ssm_state
    s_main, s_extra = _state_views(b)
    conv_state = g.expand(g.op(b.f32(b.kv.state_r, n_seq), g.view(b.cache), s_main))
    g.expand(g.view(b.cache, g.op(0, g.view(b.cache), s_extra)))
    xz = b.mm(layer.ssm_in_rows, g.view(x))
    conv_in = g.op(b.f32(inner, T) + b.f32(b.kv.state_r, n_seq), g.view(conv_state), g.view(xz))
    g.expand(g.view(b.cache, g.view(conv_in)))
    conv = g.op(b.f32(inner, T), conv_in, b.weights)
    conv = g.op(conv.nbytes, conv, b.weights, inplace=(0,))
    conv = b.unary(conv, conv.nbytes)
    x_db = b.mm(layer.ssm_x_rows, conv)
    if layer.ssm_norm:
        dt = b.norm(g.view(x_db), rank)
        b_in = b.norm(g.view(x_db), state)
        c_in = b.norm(g.view(x_db), state)
    else:
        dt = g.op(b.f32(rank, T), g.view(x_db))
        b_in = c_in = g.view(x_db)
    dt = b.mm(inner, dt)
    dt = g.op(dt.nbytes, dt, b.weights, inplace=(0,))
    scan = g.expand(g.op(b.f32(inner, T) + b.f32(b.kv.state_s, n_seq), g.view(b.cache), g.view(conv), dt,
                         b.weights, b_in, c_in, s_main))
    g.expand(g.view(b.cache, g.op(0, g.view(b.cache), s_extra)))
    g.expand(g.view(b.cache, g.view(scan)))
    x_d = g.op(b.f32(inner, T), conv, b.weights, inplace=(0,))
    y = g.op(b.f32(inner, T), g.view(scan), x_d, inplace=(0, 1))
    z = g.op(b.f32(inner, T), g.view(xz))
    y = g.op(b.f32(inner, T), z, y)
    return b.mm(b.shape.n_embd, y)


def _mamba2_layer(b, il, x, layer):
    """llm_build_mamba_base::build_mamba2_layer: the conv states gathered from the cache (get_rows),
    the input projection, the conv input (states + tokens, concatenated), the conv and its bias/silu in
    place, dt made contiguous, the scan (outputs and new states in one tensor, reading the ssm states
    straight from the cache), y + x*D, z made contiguous, the gated output, the grouped norm and the
    output projection. A new tensor wherever the source is a view (ggml-alloc never reuses a view)."""
    g, T = b.g, b.T
    n_seq = max(1, b.settings.n_seq)
    channels, inner = layer.ssm_conv_channels, layer.ssm_inner
    s_main, s_extra = _state_views(b)
    conv_state = g.expand(g.op(b.f32(b.kv.state_r, n_seq), g.view(b.cache), s_main))  # get_rows
    g.expand(g.view(b.cache, g.op(0, g.view(b.cache), s_extra)))  # the extra states: none when reserving
    zxbcdt = b.mm(layer.ssm_in_rows, x)
    conv_in = g.op(b.f32(channels, T) + b.f32(b.kv.state_r, n_seq), g.view(conv_state), g.view(zxbcdt))  # concat
    g.expand(g.view(b.cache, g.view(conv_in)))  # the last d_conv-1 columns back to the cache
    conv = g.op(b.f32(channels, T), conv_in, b.weights)  # ssm_conv
    conv = g.op(conv.nbytes, conv, b.weights, inplace=(0,))  # bias
    conv = b.unary(conv, conv.nbytes)  # silu
    dt = g.op(b.f32(layer.ssm_heads, T), g.view(zxbcdt))  # cont
    dt = g.op(dt.nbytes, dt, b.weights, inplace=(0,))
    scan = g.expand(g.op(b.f32(inner, T) + b.f32(b.kv.state_s, n_seq), g.view(b.cache), g.view(conv), dt,
                         b.weights, g.view(conv), g.view(conv), s_main))
    g.expand(g.view(b.cache, g.op(0, g.view(b.cache), s_extra)))
    g.expand(g.view(b.cache, g.view(scan)))  # the new states back to the cache
    x_d = g.op(b.f32(inner, T), g.view(conv), b.weights)  # x * D
    y = g.op(b.f32(inner, T), g.view(scan), x_d, inplace=(0, 1))
    z = g.op(b.f32(inner, T), g.view(zxbcdt))  # cont
    y = g.op(b.f32(inner, T), z, y)  # swiglu_split: a new tensor
    if layer.ssm_norm:
        y = b.norm(g.view(y), inner)
    return b.mm(b.shape.n_embd, g.view(y))


def _moe(b, il, x, layer, logits=None, shared=None):
    """build_moe_ffn (and the shared expert of build_ffn beside it). logits / shared: the router
    logits and the shared expert's output when the caller built them first (nemotron-h-moe's MTP head)."""
    g, T = b.g, b.T
    n_embd, n_expert, top_k = b.shape.n_embd, layer.n_expert, layer.top_k
    if layer.expert_in and layer.expert_in != n_embd:  # latent MoE: down-project before the experts
        x_in = b.norm(b.mm(layer.expert_in, x), layer.expert_in)
    else:
        x_in = x
    logits = b.mm(n_expert, x) if logits is None else logits
    if layer.router_bias:
        logits = g.op(logits.nbytes, logits, b.weights, inplace=(0,))
    if layer.gating == 3:
        probs = logits
    else:
        probs = b.unary(logits, logits.nbytes)
        if layer.gating == 4:  # sqrt(softplus(logits)) (DeepSeek-V4)
            probs = b.unary(probs, probs.nbytes)
    selection = probs
    if layer.probs_bias:
        selection = g.op(probs.nbytes, probs, b.weights, inplace=(0,))
    argsort = g.op(I32_BYTES * n_expert * T, selection)
    selected = g.view(argsort)
    weights = g.op(b.f32(top_k, T), g.view(probs), selected)
    if layer.gating == 3:
        weights = g.view(b.unary(g.view(weights), weights.nbytes))
    if layer.norm_w:
        w2 = g.view(weights)
        total = g.op(b.f32(1, T), w2)
        total = b.unary(total, total.nbytes)
        weights = g.view(g.op(weights.nbytes, w2, total, inplace=(0,)))
    if layer.w_scale:
        weights = g.op(b.f32(top_k, T), weights, inplace=(0,))  # ggml_scale (a new tensor after the norm's reshape)
    g.expand(weights)
    cur = g.view(x_in)
    ff = layer.n_ff_exp
    if layer.gate_up_merged:
        gate_up = g.op(b.f32(2 * ff, top_k, T), b.expert_weights(il, "gate_up"), cur, selected)
        if layer.expert_bias:
            gate_up = g.op(gate_up.nbytes, gate_up, b.expert_weights(il, "gate_up"), selected, inplace=(0,))
        gate, up = g.view(gate_up), g.view(gate_up)
    else:
        up = g.op(b.f32(ff, top_k, T), b.expert_weights(il, "up"), cur, selected)
        if layer.expert_bias:
            up = g.op(up.nbytes, up, b.expert_weights(il, "up"), selected, inplace=(0,))
        gate = None
        if layer.exp_gated:
            gate = g.op(b.f32(ff, top_k, T), b.expert_weights(il, "gate"), cur, selected)
            if layer.expert_bias:
                gate = g.op(gate.nbytes, gate, b.expert_weights(il, "gate"), selected, inplace=(0,))
    if gate is None:
        act = _ungated(b, up)
    elif b.shape.situ:
        act = _situ(b, gate, up)
    else:
        act = g.op(b.f32(ff, top_k, T), gate, up)  # swiglu / swiglu_oai: a new tensor
    out_width = layer.expert_in if layer.expert_in and layer.expert_in != n_embd else n_embd
    down = g.op(b.f32(out_width, top_k, T), b.expert_weights(il, "down"), act, selected)
    if layer.expert_bias:
        down = g.op(down.nbytes, down, b.expert_weights(il, "down"), selected, inplace=(0,))
    down = g.op(down.nbytes, down, weights, inplace=(0,))
    g.expand(down)
    parts = [g.expand(g.view(down)) for _ in range(top_k)]
    out = parts[0]
    for part in parts[1:]:
        out = g.expand(g.op(b.f32(out_width, T), out, part, inplace=(0,)))
    if top_k == 1:
        out = g.op(b.f32(out_width, T), out)
    if out_width != n_embd:
        out = b.mm(n_embd, b.norm(out, out_width))
    if layer.n_ff_shexp:
        shared = _ffn(b, x, layer.n_ff_shexp, layer.shexp_gated) if shared is None else shared
        if layer.shexp_gate:  # qwen2moe / qwen3next / qwen35moe: times sigmoid of a one-row projection
            shared_gate = b.mm(1, x)
            shared = g.op(shared.nbytes, shared, b.unary(shared_gate, shared_gate.nbytes), inplace=(0, 1))
        out = g.op(b.f32(n_embd, T), out, shared, inplace=(0, 1))
    return out


ATTN_RES_ARCHES = ("kimi-k3",)


class _ResidualStack:
    """kimi-k3's cross-layer residual attention (src/models/kimi-k3.cpp res_push / res_mix): the raw
    input of every block_size-th layer is appended to a stack [n_embd, n_ckpt, tokens] (a concat: a new,
    larger tensor each time, alive to the end), and each mixer and FFN reads a softmax-weighted mix of
    the stack and the current stream."""

    def __init__(self, b):
        self.b = b
        self.top = None
        self.count = 0

    def push(self, cur):
        b, g = self.b, self.b.g
        checkpoint = g.view(cur)
        self.top = checkpoint if self.top is None else g.op(b.f32(b.shape.n_embd, self.count + 1, b.T), self.top, checkpoint)
        self.count += 1

    def mix(self, cur):
        if self.top is None:
            return cur
        b, g, T, n_embd, count = self.b, self.b.g, self.b.T, self.b.shape.n_embd, self.count
        # bare ggml_rms_norms (unnamed, so never pinned to the layer's device): with full offload the
        # scheduler runs them where the stream is, the next device copies their outputs and the stack
        scores = b.norm(self.top, n_embd * count, pinned=False)  # over every checkpoint, times the score weights
        scores = g.view(g.op(b.f32(1, count, T), scores))  # sum_rows
        current = g.op(b.f32(1, T), b.norm(cur, n_embd, pinned=False))
        probs = g.op(b.f32(count + 1, T), scores, current)  # concat
        probs = b.unary(probs, probs.nbytes)  # soft_max
        p_stack = g.op(b.f32(count, T), g.view(probs))  # cont
        p_current = g.op(b.f32(1, T), g.view(probs))
        mixed = g.op(b.f32(n_embd, T), self.top, p_stack)  # dsv4_hc_pre
        return g.op(b.f32(n_embd, T), mixed, g.op(b.f32(n_embd, T), cur, p_current, inplace=(0,)), inplace=(0, 1))


def _situ(b, gate, up):
    """kimi-k3's situ activation (LLM_FFN_SITU): beta*tanh(gate/beta)*sigmoid(gate) times
    linear_beta*tanh(up/linear_beta) — scale, tanh, scale and mul in place, sigmoid taking the gate."""
    g = b.g
    a = b.unary(b.unary(b.unary(gate, gate.nbytes), gate.nbytes), gate.nbytes)  # scale (a new tensor: the gate is read twice)
    a = g.op(gate.nbytes, a, b.unary(gate, gate.nbytes), inplace=(0,))
    if b.shape.situ_linear:
        up = b.unary(b.unary(b.unary(up, up.nbytes), up.nbytes), up.nbytes)
    return g.op(gate.nbytes, a, up, inplace=(0,))


def _ungated(b, up):
    """An FFN without a gate: the activation in place of up (relu^2: relu then sqr)."""
    act = b.unary(up, up.nbytes)
    return b.unary(act, act.nbytes) if b.shape.relu_sqr else act


def _ffn(b, x, n_ff, gated=True):
    g = b.g
    up = b.mm(n_ff, x)
    if not gated:
        return b.mm(b.shape.n_embd, _ungated(b, up))
    gate = b.mm(n_ff, x)
    act = _situ(b, gate, up) if b.shape.situ else g.op(up.nbytes, gate, up)
    return b.mm(b.shape.n_embd, act)


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
        _attention_inputs(b, ["full"])
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
        out = _moe(b, il, x, layer) if layer.ffn == "moe" else _ffn(b, x, layer.n_ff, layer.ffn_gated)
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


# --- GLM5-Next (src/models/glm5-next.cpp, llama_memory_hybrid_idx) -------------------------------

KPOOL_GATHER_MAX_UBATCH = 16  # build_inp_kpool: ubatches up to this gather the selected latents


def _glm5_inputs(b):
    """build_inp_mem_hybrid_k's attention inputs and build_inp_kpool's: the indexer cache's k_idxs,
    pool cells / members / mask (f16: the fused lightning indexer) / tail members, the gather mask and
    the new pools' members and rows. At reserve every pool is new: (cells per stream / kpool) x n_seq of
    them (llama_memory_hybrid_idx_context's full context), padded by kpool_pad to 64 past one more."""
    g, T, d = b.g, b.T, b.shape.dsv4
    _attention_inputs(b, ["full"])
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
        out = _mha(b, il, g.view(q_abs), kv_lora, "full", n_head, kv_lora, kv_lora, v_mla_rows=v_head, mask=g.view(sel))
    return b.mm(shape.n_embd, out)


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
    s_main, s_extra = _state_views(b)
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
    _attention_inputs(b, ["full"])
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
            cur = _gqa_layer(b, il, cur, layer, mask=mask)
        inject = b.mm(hc, g.view(xn))
        if il == last:
            cur = g.op(b.f32(n_embd, n_out), cur, out_ids)
            inject = g.op(b.f32(hc, n_out), inject, out_ids)
            stream = g.op(b.f32(n_embd * hc, n_out), g.view(stream), out_ids)
            b.T = n_out
        stream = _q4_combine(b, stream, cur, inject)
        cur, xn = _q4_hc_mix(b, stream)
        out = _moe(b, il, cur, layer)
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


# --- gemma3n (src/models/gemma3n.cpp) --------------------------------------------------------

GEMMA3N_SPARSE_LAYERS = 10  # llama_model_gemma3n::graph n_layer_sparsity: gaussian top-k before the gelu


def _g3n_magnitude(b, x, rows):
    """calc_magnitude: sqrt(sum_rows(sqr(x))), one f32 per row."""
    return b.unary(b.g.op(b.f32(rows), b.unary(x, x.nbytes)), b.f32(rows))


def _g3n_router(b, x):
    """altup_compute_router_modalities: weighted rms norm, scale, the router projection, tanh."""
    cur = b.norm(x, b.shape.n_embd)
    cur = b.unary(cur, cur.nbytes)
    modalities = b.mm(b.shape.altup, cur)
    return b.unary(modalities, modalities.nbytes)


def _g3n_gaussian_topk(b, x):
    """gaussian_topk: relu(x - (mean + std_mul * std)), mean and std over each row."""
    g, T = b.g, b.T
    mean = g.op(b.f32(1, T), x)
    centred = g.op(x.nbytes, x, mean, inplace=(0,))
    std = b.unary(b.unary(g.op(b.f32(1, T), b.unary(centred, centred.nbytes)), b.f32(1, T)), b.f32(1, T))
    cutoff = g.op(b.f32(1, T), mean, b.unary(std, b.f32(1, T)), inplace=(0, 1))
    return b.unary(g.op(x.nbytes, x, cutoff, inplace=(0,)), x.nbytes)


def _g3n_attention(b, il, x, layer):
    """A gemma3n block's attention: q and k rms-normed (weighted) and roped, v rms-normed without a
    weight; a layer past n_layer_kv_from_start projects only its query and reads the cache of the
    earlier layer of its kind (build_attn with no k/v: nothing stored)."""
    g, T, kv = b.g, b.T, b.kv
    kind = "swa" if kv.is_swa[il] else "full"
    n_head, hkv, width, v_width = b.shape.n_head[il], kv.head_count_kv[il], kv.k_width[il], kv.v_width[il]
    q_bytes, k_bytes, v_bytes = b.f32(n_head * width, T), b.f32(hkv * width, T), b.f32(hkv * v_width, T)
    k_rot, v_rot = b.rot_swa if kind == "swa" else (b.k_rot, b.v_rot)
    q = b.mm(n_head * width, x)
    k = v = None
    if kv.has_kv[il]:
        k = b.mm(hkv * width, x)
        v = b.mm(hkv * v_width, x)
    q = g.op(q_bytes, b.norm(g.view(q), n_head * width), b.pos, inplace=(0,))
    if k is not None:
        k = g.op(k_bytes, b.norm(g.view(k), hkv * width), b.pos, inplace=(0,))
        v = b.norm(g.view(v), hkv * v_width, weight=False)
    if k_rot is not None:
        q = g.view(g.op(q_bytes, k_rot, g.view(q)))
        if k is not None:
            k = g.view(g.op(k_bytes, k_rot, g.view(k)))
    if v_rot is not None and v is not None:
        v = g.view(g.op(v_bytes, v_rot, g.view(v)))
    for tensor in (q, k, v):
        if tensor is not None:
            g.expand(tensor)
    if k is not None:
        _store(b, kind, k, v, False, v_bytes)
    cur = _mha(b, il, q, width, kind, n_head, width, v_width)
    if v_rot is not None:
        cur = g.view(g.op(b.f32(n_head * v_width, T), v_rot, g.view(cur)))
    return b.mm(b.shape.n_embd, cur)


def _g3n_block(b, il, cur, layer, per_layer):
    """One gemma3n block over the AltUp streams `cur` [n_embd, T, n_altup]: predict, LAuReL beside the
    attention, the (sparse) gelu FFN, correct, and the per-layer input gated into streams 1..n-1."""
    g, T, n_embd, n_altup = b.g, b.T, b.shape.n_embd, b.shape.altup
    streams = b.f32(n_embd, T, n_altup)
    # altup_predict
    modalities = _g3n_router(b, g.view(cur))
    coefs = g.view(b.mm(n_altup * n_altup, modalities))
    permuted = g.op(streams, g.view(cur))  # cont(permute)
    predictions = g.op(streams, g.view(g.op(streams, permuted, coefs)))  # mul_mat, cont(permute)
    predictions = g.op(streams, predictions, cur, inplace=(0, 1))
    active = g.view(predictions)
    x = b.norm(active, n_embd)
    # laurel
    laurel = b.norm(b.mm(n_embd, b.mm(b.shape.laurel_rank, x)), n_embd)
    laurel = g.op(laurel.nbytes, laurel, x, inplace=(0, 1))
    attn = b.norm(_g3n_attention(b, il, x, layer), n_embd)
    attn = g.op(attn.nbytes, attn, active, inplace=(0,))
    attn_laurel = b.unary(g.op(attn.nbytes, attn, laurel, inplace=(0, 1)), attn.nbytes)
    y = b.norm(attn_laurel, n_embd)
    up = b.mm(layer.n_ff, y)
    gate = b.mm(layer.n_ff, y)
    if il < GEMMA3N_SPARSE_LAYERS:
        gate = _g3n_gaussian_topk(b, gate)
    gate = b.unary(gate, gate.nbytes)
    ffn = b.mm(n_embd, g.op(up.nbytes, up, gate, inplace=(0, 1)))
    il_saved, b.il = b.il, -1  # ffn_post_norm is built with il = -1 (never pinned)
    ffn = b.norm(ffn, n_embd)
    b.il = il_saved
    gated = g.op(ffn.nbytes, ffn, attn_laurel, inplace=(0, 1))
    # altup_correct
    modalities = _g3n_router(b, gated)
    innovation = g.op(gated.nbytes, gated, g.view(predictions), inplace=(0,))
    innovation = g.op(streams, innovation)  # repeat_4d
    coefs = b.mm(n_altup, modalities)
    coefs = g.op(coefs.nbytes, g.view(b.unary(coefs, coefs.nbytes)))  # scale_bias, cont_3d(transpose)
    corrected = g.op(streams, g.op(streams, innovation, coefs, inplace=(0,)), predictions, inplace=(0, 1))
    # the per-layer input, gated by the corrected active stream
    first = g.op(b.f32(n_embd, T), g.view(corrected), b.weights)
    first = b.mm(b.shape.altup_width, first)
    first = b.unary(first, first.nbytes)
    first = g.op(first.nbytes, first, g.view(per_layer), inplace=(0,))
    first = b.norm(b.mm(n_embd, first), n_embd)
    rest = g.op(b.f32(n_embd, T, n_altup - 1), g.view(corrected), first)
    return g.op(streams, g.view(corrected), rest)  # concat


def _build_gemma3n(b, graph_shape, layer_set, output, out_ids, n_out, lookup, first_device):
    """gemma3n's graph (llama_model_gemma3n::graph): the scaled embedding projected to n_altup streams,
    the per-layer inputs (their own token lookup plus a projection of the embedding, [altup_width, T,
    n_layer], alive to the last block), the blocks, the streams merged back, the output rows and the
    soft-capped head."""
    g, T, n_embd, n_altup, n_layer = b.g, b.T, graph_shape.n_embd, graph_shape.altup, len(graph_shape.layers)
    width = graph_shape.altup_width
    homes = b.homes
    inp = b.unary(lookup, lookup.nbytes)  # scale by sqrt(n_embd)
    tokens = g.input(I32_BYTES * T)
    rows = g.op(b.f32(width * n_layer, T), b.weights, tokens)  # per_layer_token_embd: an input-layer weight
    rows.host = True
    rows.offloadable = False
    selected = g.expand(g.op(rows.nbytes, g.view(rows)))  # scale of the reshape
    if homes is not None:
        b.move(first_device, 0)  # per_layer_model_proj / per_layer_proj_norm are block 0's
    proj = b.mm(width * n_layer, inp)
    proj = b.unary(proj, proj.nbytes)
    proj = b.norm(g.view(proj), width * n_layer)
    proj = b.unary(g.op(proj.nbytes, proj, selected, inplace=(0, 1)), proj.nbytes)
    per_layer = g.op(proj.nbytes, g.view(proj))  # cont(permute): [altup_width, T, n_layer]
    if homes is not None:
        b.move(homes.layer_device[-1], -1)  # altup_proj / altup_unembd_proj are output-layer weights
    out_w = b.weights
    added_bytes = b.f32(n_embd, T, n_altup - 1)
    target = _g3n_magnitude(b, inp, T)
    added = g.op(added_bytes, out_w, g.op(added_bytes, inp))  # mul_mat(altup_proj, repeat_4d)
    magnitude = _g3n_magnitude(b, added, T * (n_altup - 1))
    added = g.op(added_bytes, g.op(added_bytes, added, target, inplace=(0,)), magnitude, inplace=(0,))
    cur = g.op(b.f32(n_embd, T, n_altup), inp, added)  # concat
    for il, layer in enumerate(graph_shape.layers):
        if il not in layer_set:
            continue
        if homes is not None:
            b.move(homes.layer_device[il], il)
        cur = _g3n_block(b, il, cur, layer, per_layer)
        g.boundaries.append(cur)
    if not output:
        g.expand(cur)
        return g
    if homes is not None:
        b.move(homes.layer_device[-1], -1)
    target = _g3n_magnitude(b, g.view(cur), T)
    unembd = g.op(added_bytes, b.weights, g.view(cur))
    magnitude = _g3n_magnitude(b, unembd, T * (n_altup - 1))
    unembd = g.op(added_bytes, g.op(added_bytes, unembd, target, inplace=(0,)), magnitude, inplace=(0,))
    merged = g.view(cur)
    for _ in range(n_altup - 1):
        merged = g.op(b.f32(n_embd, T), merged, g.view(unembd), inplace=(0,))
    merged = b.unary(merged, merged.nbytes)
    cur = g.op(b.f32(n_embd, n_out), merged, out_ids)
    T = b.T = n_out
    cur = b.norm(cur, n_embd)
    cur.is_output = True  # t_embd
    logits = b.mm(graph_shape.n_vocab, cur)
    for _ in range(3):  # the final soft-capping: scale, tanh, scale (in place)
        logits = b.unary(logits, logits.nbytes)
    logits.is_output = True
    g.expand(logits)
    return g


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
        return (graph_shape.layers[il].as_tuple(), graph_shape.n_head[il], kvshape.head_count_kv[il],
                kvshape.k_width[il], kvshape.v_width[il], kvshape.is_swa[il], where, il in kept)
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
    if graph_shape.architecture == "qwen4exp":
        return _build_qwen4exp(b, graph_shape, layer_set, output, g.input(I32_BYTES * n_out), n_out, lookup)
    if graph_shape.dsv4:
        return _build_dsv4(b, graph_shape, layer_set, output, g.input(I32_BYTES * n_out), n_out, lookup)
    kinds = [kind for kind in ("full", "swa") if kind in b.cells]
    _attention_inputs(b, kinds)
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
    stack = _ResidualStack(b) if graph_shape.attn_res_block else None
    rwkv = {}  # RWKV-7: the first layer's v, mixed into every later layer
    for il, layer in enumerate(graph_shape.layers):
        if il not in layer_set or il in skipped:
            continue
        if layer.mixer in ("rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"):
            if homes is not None:
                b.move(homes.layer_device[il], il)
            if il == 0 and layer.mixer in ("rwkv6", "rwkv7"):  # rwkv6/7.cpp norm the token embedding (layer norm, bias)
                cur = g.op(b.f32(n_embd, T), cur)
                cur = g.op(cur.nbytes, g.op(cur.nbytes, cur, b.weights, inplace=(0,)), b.weights, inplace=(0,))
            if layer.mixer in ("rwkv6", "rwkv6qwen2"):
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
        elif layer.mixer == "attention":
            mixed = _gqa_layer(b, il, x, layer)
        elif layer.mixer == "mla":
            mixed = _mla_layer(b, il, x, layer)
        elif layer.mixer == "kda":
            mixed = _kda_layer(b, il, x, layer)
        elif layer.mixer == "bkda":
            mixed = _bailing_kda_layer(b, il, x, layer)
        elif layer.mixer == "gdn":
            mixed = _gdn_layer(b, il, x, layer)
        elif layer.mixer == "lightning":
            mixed = _lightning_layer(b, il, x, layer)
        elif layer.mixer == "mamba2":
            mixed = _mamba2_layer(b, il, x, layer)
        elif layer.mixer == "mamba":
            mixed = _mamba_layer(b, il, x, layer)
        elif layer.mixer == "attention+mamba2":  # falcon-h1.cpp: a second norm of the input feeds the SSM
            attn = _gqa_layer(b, il, x, layer)
            ssm = _mamba2_layer(b, il, b.norm(cur, n_embd), layer)
            mixed = g.op(b.f32(n_embd, T), attn, ssm, inplace=(0, 1))
        elif layer.mixer == "shortconv":
            mixed = _shortconv_layer(b, il, x, layer)
        else:
            mixed = None
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
        if layer.ffn == "moe" and graph_shape.architecture == "arctic":
            # arctic.cpp: a dense n_embd-wide FFN of the normed ffn_inp, added to it; the experts read the
            # layer input (inpSA, alive until then) normed by ffn_norm_exps, and add to that sum
            dense = _ffn(b, b.norm(cur, n_embd), n_embd)
            ffn_out = g.op(b.f32(n_embd, T), dense, cur, inplace=(0, 1))
            out = _moe(b, il, b.norm(residual, n_embd), layer)
            cur = g.op(b.f32(n_embd, T), out, ffn_out, inplace=(0, 1))
        elif layer.ffn != "none":
            ffn_in = cur
            x = cur if post_norm else b.norm(stack.mix(cur) if stack is not None else cur, n_embd)
            out = _moe(b, il, x, layer) if layer.ffn == "moe" else _ffn(b, x, layer.n_ff, layer.ffn_gated)
            if normed_residual:  # the FFN's residual is its normed input, scaled after the experts ran
                ffn_in = g.op(x.nbytes, x, inplace=(0,))
            if post_norm:  # ffn_post_norm, built with il = -1 (never pinned to the layer's device)
                il_saved, b.il = b.il, -1
                out = b.norm(out, n_embd)
                b.il = il_saved
            pair = (ffn_in, out) if graph_shape.residual_first else (out, ffn_in)
            cur = g.op(b.f32(n_embd, T), *pair, inplace=(0, 1))
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


BACKEND_TOP_K = 10  # common_speculative_impl_draft_dflash's sampler chain: top_k(10)


def _backend_top_k(b, logits, n_vocab, n_out, rows):
    """llm_graph_context::build_sampling with a backend top-k chain: the logits padded by one row
    (ggml_pad: a copy, alive while any row samples), then per sampled row the top_k ids of its view and
    those logits gathered (get_rows), both graph outputs (t_candidates, t_sampled_logits)."""
    g = b.g
    padded = g.op(b.f32(n_vocab, n_out + 1), logits)
    for _ in range(rows):
        row = g.view(padded)
        ids = g.op(I32_BYTES * BACKEND_TOP_K, row)
        ids.is_output = True
        picked = g.op(b.f32(1, BACKEND_TOP_K), g.view(row), ids)
        picked.is_output = True
        g.expand(picked)


def _build_assistant(b, layers, output, n_out):
    """gemma4-assistant.cpp's graph over the target's KV: the target's token embedding (get_rows on the
    host, scaled) beside the target's hidden state (an input, embedding_length_out wide), concatenated
    and projected (nextn.pre_projection); per block a query only (normed, roped) attending to the borrowed
    cache, the post-attention norm, the residual, the normed GeGLU MLP, its post norm, the residual and the
    output scale (the last block on the output rows); the output norm, the logits and
    nextn.post_projection (both outputs)."""
    g, T, shape, kv = b.g, b.T, b.shape, b.kv
    n_embd, n_target = shape.n_embd, shape.n_embd_target
    tokens_in = g.input(I32_BYTES * T)
    hidden = g.input(b.f32(n_target, T))
    if b.homes is not None:
        b.move(HOST, -1)
    lookup = g.op(b.f32(n_target, T), b.weights, tokens_in)  # the target's token_embd (a host weight)
    lookup.host = True
    lookup.offloadable = False
    x = g.op(lookup.nbytes, lookup, inplace=(0,))  # scale by sqrt(n_embd_target)
    xh = g.op(b.f32(2 * n_target, T), x, hidden)  # concat
    if b.homes is not None:
        b.move(b.homes.layer_device[0], 0)  # pre_projection is the first block's tensor
    cur = b.mm(n_embd, xh)
    kinds = [kind for kind in ("full", "swa") if kind in b.cells]
    _attention_inputs(b, kinds)
    b.pos = g.input(I32_BYTES * T * shape.pos_per_token)
    out_ids = g.input(I32_BYTES * n_out)
    last = len(shape.layers) - 1
    layer_set = set(range(len(shape.layers))) if layers is None else set(layers)
    for il, layer in enumerate(shape.layers):
        if il not in layer_set:
            continue
        if b.homes is not None:
            b.move(b.homes.layer_device[il], il)
        kind = "swa" if kv.is_swa[il] else "full"
        n_head, width = shape.n_head[il], kv.k_width[il]
        residual = cur
        x = b.norm(cur, n_embd)
        q = b.norm(g.view(b.mm(layer.q_rows or n_head * width, x)), n_head * width)
        q = g.op(q.nbytes, q, b.pos, inplace=(0,))  # rope
        if b.k_rot is not None:
            q = g.view(g.op(q.nbytes, b.k_rot, g.view(q)))
        g.expand(q)
        out = _mha(b, il, q, width, kind, n_head, width, kv.v_width[il])
        if b.v_rot is not None:
            out = g.view(g.op(b.f32(n_head * kv.v_width[il], T), b.v_rot, g.view(out)))
        out = b.mm(n_embd, out)
        if il == last:
            out = g.op(b.f32(n_embd, n_out), out, out_ids)
            residual = g.op(b.f32(n_embd, n_out), residual, out_ids)
            T = b.T = n_out
        out = b.norm(out, n_embd)  # attn_post_norm
        attn_out = g.op(b.f32(n_embd, T), out, residual, inplace=(0, 1))
        ffn = _ffn(b, b.norm(attn_out, n_embd), layer.n_ff)
        il_saved, b.il = b.il, -1  # ffn_post_norm is built with il = -1
        ffn = b.norm(ffn, n_embd)
        b.il = il_saved
        cur = g.op(b.f32(n_embd, T), ffn, attn_out, inplace=(0, 1))
        cur = g.op(cur.nbytes, cur, b.weights, inplace=(0,))  # * layer_output_scale
        g.boundaries.append(cur)
    if not output:
        g.expand(cur)
        return g
    if b.homes is not None:
        b.move(b.homes.layer_device[-1], -1)
    cur = b.norm(cur, n_embd)
    logits = b.mm(shape.n_vocab, cur)
    logits.is_output = True
    h_next = b.mm(n_target, cur)
    h_next.is_output = True
    g.expand(logits)
    g.expand(h_next)
    return g


class ComputeBuffers(Record):
    """Compute buffer bytes: on the device that runs the layers, and on the host."""

    FIELDS = (
        ("device_bytes", REQUIRED),
        ("host_bytes", REQUIRED),
        ("tokens", REQUIRED),  # tokens of the worst-case graph
        ("streams", REQUIRED),
        ("logits_bytes", 0),
    )

    def to_doc(self):
        return {"device_bytes": self.device_bytes, "host_bytes": self.host_bytes, "tokens": self.tokens,
                "streams": self.streams, "logits_bytes": self.logits_bytes}


def reserve_tokens(settings, ctx):
    """Tokens and streams of llama.cpp's worst-case graph: min(n_ctx, n_ubatch) rounded up to a
    multiple of the sequences, one stream per sequence unless the cache is unified."""
    n_seq = settings.n_seq
    tokens = min(kvmod.pad(ctx), kvmod.n_ubatch(settings, ctx))
    tokens = -(-tokens // n_seq) * n_seq
    return tokens, (1 if settings.unified else n_seq)


def output_rows(settings, ctx, outputs=None):
    """The rows the worst-case graph outputs: llama_context::sched_reserve's min(n_tokens, n_outputs_max)
    with n_tokens = min(n_ctx, n_ubatch) *before* graph_reserve rounds it up to a multiple of the
    sequences (so 512 rows of a 513-token graph at -np 3). outputs: n_outputs_max (None/0: the settings'
    `outputs`, whose 0 means the batch)."""
    asked = min(kvmod.pad(ctx), kvmod.n_ubatch(settings, ctx))
    return min(outputs or settings.outputs or asked, asked)


def compute_buffers(graph_shape, kvshape, ctx, settings, *, layers=None, output=True, alignment=CPU_ALIGNMENT,
                    outputs=None, placements_follow=False):
    """The compute buffers llama.cpp reserves for a context of `ctx` tokens (ComputeBuffers).

    layers: block indices this device computes (None: all); output: whether it computes the head;
    outputs: the rows the graph outputs (None: every token). The host share is the token-embedding
    lookup (its weights stay on the CPU in llama.cpp). placements_follow: the caller goes on to replay
    placements of the model (llama's planner), so a whole-model graph that is the placements' shared
    graph gets its integer form now and its one-device program from it (the same program; no tensor
    walk to undo before the first placement)."""
    caches = kvmod.kv_caches(kvshape, ctx, settings)
    tokens, streams = reserve_tokens(settings, ctx)
    outputs = output_rows(settings, ctx, outputs)
    layers = None if layers is None else tuple(sorted(set(layers)))
    key = ("one", settings.as_tuple(), tokens, streams, _kinds(caches), layers, bool(output), outputs)
    def compile_symbolic(symbolic):
        every_layer = layers is None or set(range(len(graph_shape.layers))) <= set(layers)  # (NextN blocks are not in it)
        if every_layer and (output or placements_follow) and _shares_placement_graph(graph_shape):
            # the placements' graph (no layer left out either way): its tensors are the same, only
            # their devices differ, and one buffer ignores those; without the head, the steps before it
            homes = Homes(layer_device=[0] * (kvshape.block_count + 1))
            entry = _shared_entry(graph_shape, kvshape, symbolic, settings, tokens, streams, homes, outputs)
            if placements_follow and not entry.dirty:
                _split_form(entry)
            if output:
                return _one_device_program(entry, memo=not graph_shape.indexer_heads)
            program = _headless_program(entry, memo=not graph_shape.indexer_heads)
            if program is not None:
                return program
        return _one_program(_build(graph_shape, kvshape, symbolic, settings, tokens, streams, layers, output,
                                   outputs=outputs), memo=not graph_shape.indexer_heads)

    program = _program(graph_shape, kvshape, caches, key, compile_symbolic)
    if program is not None:
        total = program.peaks(_cells(caches), [alignment])[0]
    else:  # a builder needs the concrete cells: the plain replay at this context
        total = _build(graph_shape, kvshape, caches, settings, tokens, streams, layers, output,
                       outputs=outputs).peak(alignment)
    host = -(-(graph_shape.n_embd * tokens * F32_BYTES) // alignment) * alignment
    return ComputeBuffers(device_bytes=total, host_bytes=host, tokens=tokens, streams=streams,
                          logits_bytes=graph_shape.n_vocab * outputs * F32_BYTES if output else 0)


ALIGNMENT = {"gpu": CUDA_ALIGNMENT, "rpc": CUDA_ALIGNMENT, "cpu": CPU_ALIGNMENT}


def _kinds(caches):
    return tuple(cache.kind for cache in caches)


def _shares_placement_graph(graph_shape):
    """Whether a whole-model graph on one device is the placements' shared graph: both replay every
    layer (_repeats leaves none out of a residual-stack or DSA graph whatever the homes), and the
    builders' homes decide only which device a tensor is on."""
    return bool(graph_shape.attn_res_block or graph_shape.indexer_heads) and not graph_shape.altup


def _one_program(graph, memo=True):
    fold_inplace_chains(graph)
    return Program(graph.leafs, graph.nodes, boundaries=graph.boundaries, memo=memo)



_MEMO_MAX = 256


def compute_bytes(facts, layers, holds_output, settings, ctx, kind="gpu", outputs=None):
    """One device's compute buffer (bytes): the blocks in `layers`, the logits if `holds_output`.

    facts: core.ModelFacts (its .graph and .shape); kind "gpu"/"rpc" (128-byte alignment) or "cpu".
    Memoised: a placement search asks for the same device many times."""
    layers = None if layers is None else tuple(sorted(layers))
    memo = facts.graph.__dict__.setdefault("_compute_memo", {})
    key = (layers, bool(holds_output), settings.as_tuple(), ctx, kind, outputs)
    if key not in memo:
        if len(memo) >= _MEMO_MAX:
            memo.clear()
        memo[key] = compute_buffers(facts.graph, facts.shape, ctx, settings, layers=layers, output=holds_output,
                                    alignment=ALIGNMENT[kind], outputs=outputs, placements_follow=True).device_bytes
    return memo[key]


def host_bytes(facts, settings, ctx):
    """The host-side compute buffer of a fully offloaded model: the token-embedding lookup."""
    tokens, _ = reserve_tokens(settings, ctx)
    return -(-(facts.graph.n_embd * tokens * F32_BYTES) // CPU_ALIGNMENT) * CPU_ALIGNMENT


class Homes(Record):
    """Where a placement puts the weights, for the multi-device replay. layer_device: n_layer + 1 device
    keys (the last the output layer; HOST for the CPU); expert_device {block: {part: key}}; expert_bytes
    {block: {part: bytes}} and dense_max_bytes {block: bytes} size the copies of CPU weights a GPU makes
    when it offloads their ops."""

    FIELDS = (
        ("layer_device", REQUIRED),
        ("expert_device", dict),
        ("expert_bytes", dict),
        ("dense_max_bytes", dict),
    )

    @property
    def full_offload(self):
        """llama.cpp's full_offload: -ngl above n_layer (every block and the output layer offloaded)."""
        return HOST not in self.layer_device


def homes_of(facts, placement):
    """The Homes of a placement.Placement over core.ModelFacts (its LayerBytes size the weight copies)."""
    blocks = facts.layers.blocks
    return Homes(layer_device=list(placement.layer_device), expert_device=placement.expert_device,
                 expert_bytes={block.index: dict(block.experts) for block in blocks if block.experts},
                 dense_max_bytes={block.index: max((n for n, _ in block.dense_tensors), default=0) for block in blocks})


def placement_buffers(graph_shape, kvshape, ctx, settings, homes, kinds, op_offload=True, pipeline=False, outputs=None):
    """{device key: compute buffer bytes} of llama.cpp's worst-case graph split across the devices of a
    placement, as ggml_backend_sched reserves it: every node on the backend its weights (or KV cache)
    live on, the rest expanded around them, a copy of each tensor a split reads from another backend
    allocated in the split's buffer, one ggml-alloc buffer per backend.

    kinds: {key: "gpu" | "rpc" | "cpu"} for every device key and HOST, in the scheduler's priority
    order (offload devices in order, then HOST). With op_offload (llama.cpp's default) the first "gpu"
    (CUDA) device runs the ops of host-resident weights at the worst-case batch and holds a copy of
    each such weight (the RPC backend offloads nothing). pipeline: llama.cpp enables pipeline
    parallelism (4 scheduler copies) when more than one device holds every layer and no -ot override
    is given (llama_context's constructor)."""
    caches = kvmod.kv_caches(kvshape, ctx, settings)
    tokens, streams = reserve_tokens(settings, ctx)
    outputs = output_rows(settings, ctx, outputs)
    backends = [key for key in kinds if key != HOST] + [HOST]
    offload_to = next((key for key in backends if kinds[key] == "gpu"), None) if op_offload else None
    n_copies = PIPELINE_COPIES if pipeline else 1

    def scheduled(cache_list):
        graph = _build(graph_shape, kvshape, cache_list, settings, tokens, streams, None, True, homes, outputs)
        return graph, schedule(graph, backends, offload_to, tokens, n_copies)

    def compile_symbolic(symbolic):
        entry = _shared_entry(graph_shape, kvshape, symbolic, settings, tokens, streams, homes, outputs)
        return _split_program(entry, homes, backends, offload_to, tokens, n_copies,
                              eager=_shares_placement_graph(graph_shape))

    key = ("split", settings.as_tuple(), tokens, streams, _homes_key(homes), tuple(kinds.items()), bool(op_offload),
           n_copies, outputs, _kinds(caches))
    program = _program(graph_shape, kvshape, caches, key, compile_symbolic)
    if program is None:  # a builder needs the concrete cells: the plain replay at this context
        graph, (leafs, nodes) = scheduled(caches)
        return peaks(graph, leafs, nodes, {key: ALIGNMENT[kinds[key]] for key in backends})
    return dict(zip(backends, program.peaks(_cells(caches), [ALIGNMENT[kinds[key]] for key in backends])))


_GRAPHS_MAX = 4  # placement graphs kept per model: one per ubatch/settings in use


class _SharedEntry:
    """One placements' graph (_shared_entry) with what rebinding it needs: its _Slots, the nodes' built
    sources and the leafs' built output flags (_reset), the breakpoints its build decided, its integer
    form (_SplitGraph, made at the first placement that schedules it) and whether a tensor walk
    (schedule(), Program()) has left marks on its tensors since the last _reset."""

    __slots__ = ("kvshape", "graph", "slots", "srcs", "outputs", "conditions", "split", "dirty", "placements")

    def __init__(self, kvshape, graph, slots, conditions):
        self.kvshape, self.graph, self.slots, self.conditions = kvshape, graph, slots, conditions
        self.srcs = [node.srcs for node in graph.nodes]
        self.outputs = [leaf.is_output for leaf in graph.leafs]
        self.split = None
        self.dirty = False
        self.placements = 0  # placements scheduled on it so far


def _shared_entry(graph_shape, kvshape, symbolic, settings, tokens, streams, homes, outputs):
    """The _SharedEntry of `homes`' split graph: built once per model, settings and skipped layers with
    per-layer externals (_Slots), then reset (when a tensor walk marked it) and bound to each placement
    in turn. Called inside _program's symbolic build: a graph whose build decided a comparison with the
    cell count (the DSA indexer's min(n_kv, top_k)) serves only the contexts on the same side (its
    decisions are handed on to the program being compiled), the other side gets a graph of its own."""
    layer_set = set(range(len(graph_shape.layers)))
    skipped = frozenset(_repeats(graph_shape, kvshape, layer_set, homes, settings.layer_inputs))
    graphs = graph_shape.__dict__.setdefault("_split_graphs", {})
    key = (id(kvshape), settings.as_tuple(), tokens, streams, outputs, skipped, tuple(cache.kind for cache in symbolic),
           len(homes.layer_device))
    regime = compiled._REGIME
    entries = graphs.get(key)
    if not entries or entries[0].kvshape is not kvshape:  # (empty: a build that raised NotAffine)
        if len(graphs) >= _GRAPHS_MAX:
            graphs.pop(next(iter(graphs)))
        entries = graphs[key] = []
    entry = next((entry for entry in entries if regime is None or _holds(entry.conditions, regime.cells)), None)
    if entry is None:
        slots = _Slots(homes)
        graph = _build(graph_shape, kvshape, symbolic, settings, tokens, streams, None, True, slots, outputs)
        # tensors a builder put on "its layer's device" directly (b.dev): bound like the externals
        slots.placed = [(tensor, tensor.device[1]) for tensor in (*graph.leafs, *graph.nodes)
                        if isinstance(tensor.device, tuple)]
        fold_inplace_chains(graph, [node for node, _ in slots.pins] + [tensor for tensor, _ in slots.placed])
        if len(entries) >= _REGIMES_MAX:
            entries.pop(0)
        entry = _SharedEntry(kvshape, graph, slots, tuple(regime.conditions.items()) if regime is not None else ())
        entries.append(entry)
    else:
        if entry.dirty:
            _reset(entry.graph, entry.slots, entry.srcs, entry.outputs)
            entry.dirty = False
        if regime is not None:
            regime.conditions.update(entry.conditions)  # the program inherits the graph's breakpoints
    entry.slots.bind(homes)
    return entry


def _split_form(entry):
    """The entry's _SplitGraph, made at its first use (the graph is clean and bound then)."""
    if entry.split is None:
        entry.split = _SplitGraph(entry.graph, entry.slots)
    return entry.split


def _one_device_program(entry, memo):
    """Program(graph.leafs, graph.nodes) of a _SharedEntry's graph on one device: the integer form's
    walk where a placement made it already, else the tensor walk (cheaper than making the integer form
    for a plan that may never split: a fork plan)."""
    program = entry.split.one_device_program(memo) if entry.split is not None else None
    if program is None:
        entry.dirty = True
        graph = entry.graph
        program = Program(graph.leafs, graph.nodes, boundaries=graph.boundaries, memo=memo)
    return program


def _headless_program(entry, memo):
    """The one-device program of a _SharedEntry's graph without its output layer (the graph built with
    output=False): its integer form's steps up to the output layer's input (None: no integer form, or
    a builder that does not mark where the head starts)."""
    if entry.split is None:
        return None
    return entry.split.headless_program(memo)


def _split_program(entry, homes, backends, offload_to, tokens, n_copies, eager=True):
    """The Program of a _SharedEntry's graph bound to `homes`, scheduled over `backends`: by its integer form
    (_SplitGraph) where that applies, else by schedule() and Program() over its tensors. The integer form
    costs about two tensor walks to make: it is made at a graph's first placement when every placement
    shares that graph (`eager`: a residual-stack or DSA model, whose graph replays every layer), else at
    the graph's second (where placements leave different layers out, each set has its own graph, often
    scheduled once)."""
    positions = {key: index for index, key in enumerate(backends)}
    entry.placements += 1
    program = None
    if eager or entry.split is not None or entry.placements > 1:
        program = _split_form(entry).program(backends, offload_to, tokens, n_copies, positions, homes.full_offload)
    if program is None:
        entry.dirty = True
        leafs, nodes = schedule(entry.graph, backends, offload_to, tokens, n_copies)
        program = Program(leafs, nodes, positions, entry.graph.boundaries, memo=False)
    return program


def _homes_key(homes):
    nested = lambda table: tuple(sorted((block, tuple(sorted(parts.items()))) for block, parts in table.items()))  # noqa: E731
    return (tuple(homes.layer_device), nested(homes.expert_device), nested(homes.expert_bytes),
            tuple(sorted(homes.dense_max_bytes.items())))


PIPELINE_COPIES = 4  # GGML_SCHED_MAX_COPIES


def pipeline_parallel(placement, n_devices):
    """Whether llama.cpp runs this placement with pipeline parallelism: several devices, every layer
    and the output offloaded, split by layer, no tensor override (the emitted -ot, --n-cpu-moe)."""
    if n_devices < 2 or placement.main_gpu is not None or HOST in placement.layer_device:
        return False
    return all(home == placement.layer_device[block] for block, homes in placement.expert_device.items()
               for home in homes.values())


def _placement_key(placement, kinds, settings, ctx, outputs):
    """A hashable key of what a placement's compute buffers depend on (the memos' key)."""
    experts = tuple(sorted((block, tuple(sorted(homes.items()))) for block, homes in placement.expert_device.items()))
    return tuple(placement.layer_device), experts, tuple(kinds.items()), settings.as_tuple(), ctx, outputs


def placement_compute(facts, placement, kinds, settings, ctx, outputs=None):
    """placement_buffers for a placement.Placement over core.ModelFacts, memoised on the facts.
    outputs: the context's output rows (None: every token; a draft model's: one per sequence)."""
    memo = facts.graph.__dict__.setdefault("_placement_memo", {})
    key = _placement_key(placement, kinds, settings, ctx, outputs)
    if key not in memo:
        if len(memo) >= _MEMO_MAX:
            memo.clear()
        pipeline = pipeline_parallel(placement, len(kinds) - 1)
        memo[key] = placement_buffers(facts.graph, facts.shape, ctx, settings, homes_of(facts, placement), kinds,
                                      pipeline=pipeline, outputs=outputs)
    return memo[key]


# --- the MTP draft context (--spec-type draft-mtp) ---------------------------------------------

# Loaders whose graph_mtp (LLM_GRAPH_TYPE_DECODER_MTP) runs one NextN block as a trunk block fed by
# eh_proj(concat(enorm(token embedding), hnorm(the trunk's hidden state))), then the shared head norm,
# the output rows and the LM head: src/models/deepseek2.cpp, deepseek32.cpp (dense MLA, no indexer),
# glm4-moe.cpp, qwen35moe.cpp and qwen3next.cpp (gated-query attention). Other MTP graphs differ
# (Nemotron-H, DeepSeek-V4, ...).
MTP_GRAPH_ARCHES = ("bailingmoe3", "cohere2moe", "deepseek2", "deepseek32", "deepseek4", "glm-dsa", "glm4moe", "hy_v3",
                    "mimo2", "nemotron_h_moe", "qwen35", "qwen35moe", "qwen3next", "step35")
# the loaders whose build_arch_graph builds an LLM_GRAPH_TYPE_DECODER_MTP graph at llama.cpp 0c1e57098
# (src/models/*.cpp); for any other architecture llama.cpp does not draft with the model's NextN blocks
LLAMA_MTP_ARCHES = ("bailingmoe3", "cohere2moe", "deepseek2", "deepseek32", "deepseek4", "glm-dsa", "glm4moe",
                    "glm5-next", "hy_v3", "mimo2", "nemotron_h_moe", "qwen35", "qwen35moe", "qwen3next", "step35")
# ... of which these drop the non-output rows right after the attention (the FFN and head run on the
# output rows only), as a trunk's last layer does: src/models/qwen3next.cpp graph_mtp.
MTP_ROWS_AFTER_ATTENTION = ("qwen3next",)
# ... of which these take the output rows after the block, before the shared head norm (t_h_nextn is the
# block's raw output row: src/models/step35.cpp graph_mtp)
MTP_ROWS_BEFORE_HEAD_NORM = ("step35",)
# ... of which these attend through llama_kv_cache_iswa's inputs (the MTP context's cache is an iswa one)
MTP_ISWA_ARCHES = ("step35",)


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


# graph_mtp's head norm: the block's own tensor(s) in this order, else model.output_norm (which lives on
# the output layer's device, so the every-row state crosses there): cohere2moe.cpp, mimo2.cpp, qwen35.cpp
# and qwen35moe.cpp
MTP_HEAD_NORM_FALLBACK = {"cohere2moe": ("nextn.shared_head_norm",),
                          "mimo2": ("nextn.shared_head_norm", "layer_output_norm"),
                          "qwen35": ("nextn.shared_head_norm",), "qwen35moe": ("nextn.shared_head_norm",)}


def _mtp_head_norm(b, layer, cur):
    """The head norm of an MTP graph where its weight lives (head_norm_own: the block's device)."""
    if not layer.head_norm_own and b.homes is not None:
        b.move(b.homes.layer_device[-1], -1)
    return b.norm(cur, b.shape.n_embd)


# What a loader needs of its NextN blocks beyond eh_proj for MTP drafting: {architecture: ((LayerShape
# test, what is missing, what llama.cpp 0c1e57098 does without it), ...)} — mimo2.cpp's graph_mtp
# asserts (GGML_ASSERT: the process aborts), cohere2moe.cpp's load_block_mtp requires the experts.
MTP_BLOCK_NEEDS = {
    "mimo2": ((lambda layer: layer.fused_qkv, "a fused attn_qkv",
               'aborts building the MTP graph: GGML_ASSERT "MIMO2 MTP requires fused attn_qkv"'),
              (lambda layer: layer.ffn == "dense" and layer.ffn_gated, "a dense gated FFN (ffn_gate/up/down)",
               'aborts building the MTP graph: GGML_ASSERT "MIMO2 MTP requires dense FFN tensors"')),
    "cohere2moe": ((lambda layer: layer.ffn == "moe", "routed experts (ffn_gate_inp, *_exps)",
                    "fails to load the model for MTP: tensor 'blk.{il}.ffn_gate_inp.weight' not found"),),
}


def mtp_block_missing(architecture, layers):
    """(the first NextN block lacking something, what it lacks, what llama.cpp then does), or None."""
    for test, need, effect in MTP_BLOCK_NEEDS.get(architecture, ()):
        for il, layer in sorted(layers.items()):
            if not test(layer):
                return il, need, effect.format(il=il)
    return None


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
    _attention_inputs(b, kinds)
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


PARALLEL_FFN_ARCHES = ("cohere2moe",)  # attention and FFN side by side from one norm, both added to the input


def _cohere2moe_block(b, il, cur, layer, rope):
    """cohere2moe.cpp's block: one norm feeds the attention (roped only where `rope`: its sliding-window
    and leading dense layers; the MTP block always) and the FFN — the routed experts beside the shared
    expert, their sum halved, or the dense FFN of a leading block; then the input and the attention
    output are added to it."""
    g, T, n_embd = b.g, b.T, b.shape.n_embd
    x = b.norm(cur, n_embd)
    attn = _gqa_layer(b, il, x, layer, rope=rope)
    if layer.ffn == "moe":
        out = _moe(b, il, x, layer)  # + the shared expert (build_ffn of the same norm)
        if layer.n_ff_shexp:
            out = g.op(out.nbytes, out, inplace=(0,))  # ggml_scale 0.5
    else:
        out = _ffn(b, x, layer.n_ff, layer.ffn_gated)
    out = g.op(b.f32(n_embd, T), out, cur, inplace=(0, 1))
    return g.op(b.f32(n_embd, T), out, attn, inplace=(0, 1))


def _build_mtp_cohere2moe(b, graph_shape, n_out):
    """cohere2moe.cpp graph_mtp: after the fusion one norm feeds both the (always roped) attention and
    the MoE beside its shared expert (their sum halved); the block's input and the attention output are
    added to it, then the shared head norm of every row (t_h_nextn), the output rows, the scaled logits."""
    g, T, n_embd = b.g, b.T, graph_shape.n_embd
    il = min(graph_shape.mtp_layers)
    layer = graph_shape.mtp_layers[il]
    cur, out_ids = _mtp_prologue(b, graph_shape, il, n_out, [k for k in ("full", "swa") if k in b.cells])
    cur = _mtp_head_norm(b, layer, _cohere2moe_block(b, il, cur, layer, rope=True))
    cur.is_output = True  # t_h_nextn
    cur = g.op(b.f32(n_embd, n_out), cur, out_ids)
    b.T = n_out
    return _mtp_head(b, graph_shape, cur, n_out, scale=True)


def _build_mtp_mimo2(b, graph_shape, n_out):
    """mimo2.cpp graph_mtp: after the fusion a sliding-window (or full) attention block from one fused
    qkv projection with sinks, its output scaled by the value scale, a dense FFN; the output rows are
    taken before the head norm (t_h_nextn is the un-normed output rows), then the LM head."""
    g, T, n_embd = b.g, b.T, graph_shape.n_embd
    il = min(graph_shape.mtp_layers)
    layer = graph_shape.mtp_layers[il]
    cur, out_ids = _mtp_prologue(b, graph_shape, il, n_out, [k for k in ("full", "swa") if k in b.cells])
    residual = cur
    mixed = _gqa_layer(b, il, b.norm(cur, n_embd), layer)
    # ggml_scale by the value scale (only with attention.value_scale != 1; in place, so no bytes either way)
    mixed = g.op(mixed.nbytes, mixed, inplace=(0,))
    cur = g.op(b.f32(n_embd, T), mixed, residual, inplace=(0, 1))
    ffn_in = cur
    out = _ffn(b, b.norm(cur, n_embd), layer.n_ff, layer.ffn_gated)
    cur = g.op(b.f32(n_embd, T), out, ffn_in, inplace=(0, 1))
    cur = g.op(b.f32(n_embd, n_out), cur, out_ids)
    cur.is_output = True  # t_h_nextn
    b.T = n_out
    return _mtp_head(b, graph_shape, _mtp_head_norm(b, layer, cur), n_out)


MTP_BUILDERS = {"cohere2moe": _build_mtp_cohere2moe, "mimo2": _build_mtp_mimo2}


def _build_mtp(graph_shape, kvshape, caches, settings, tokens, streams, homes=None, outputs=None):
    """The MTP context's worst-case graph (graph_mtp at nextn_layer_offset 0: its first NextN block)."""
    b = _Build(graph_shape, kvshape, caches, settings, tokens, streams, homes)
    if graph_shape.architecture == "deepseek4":
        return _build_mtp_dsv4(b, min(outputs, tokens) if outputs else tokens)
    builder = MTP_BUILDERS.get(graph_shape.architecture)
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
    _attention_inputs(b, [kind for kind in ("full", "swa") if kind in b.cells] if b.iswa else ["full"])
    if homes is not None:
        b.move(homes.layer_device[il], il)
    h_norm = b.norm(hidden, n_embd)
    e_norm = b.norm(lookup, n_embd)
    concat = g.op(b.f32(2 * n_embd, T), e_norm, h_norm)
    cur = b.mm(n_embd, concat)  # eh_proj
    residual = cur
    x = b.norm(cur, n_embd)
    mixed = _mla_layer(b, il, x, layer) if layer.mixer == "mla" else _gqa_layer(b, il, x, layer)
    nemotron = graph_shape.architecture == "nemotron_h_moe"
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
        shared = _ffn(b, x, layer.n_ff_shexp, layer.shexp_gated)
        out = _moe(b, il, x, layer, logits=logits, shared=shared)
    else:
        out = _moe(b, il, x, layer) if layer.ffn == "moe" else _ffn(b, x, layer.n_ff)
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


def _build_mtp_dsv4(b, n_out):
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
    _attention_inputs(b, ["swa"])
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
    out = _moe(b, il, b.norm(cur, n_embd), layer)
    stream = g.op(b.f32(n_embd, hc, T), out, residual, post, comb)
    rows = g.op(b.f32(n_embd * hc, n_out), g.view(stream), out_ids)  # h_nextn
    rows.is_output = True
    b.T = n_out
    if b.homes is not None:
        b.move(b.homes.layer_device[-1], -1)
    _dsv4_head(b, rows, n_out)
    return g


def mtp_kv_shape(kvshape, blocks):
    """The KVShape of an MTP context: a plain attention cache of the NextN blocks only (the
    ctx_type MTP branches of llama_model::create_memory: no DSA indexer, no recurrent state)."""
    values = {name: getattr(kvshape, name) for name, _ in kvshape.FIELDS}
    n = kvshape.block_count
    values.update(has_kv=[il in blocks and bool(kvshape.head_count_kv[il]) for il in range(n)],
                  indexer_layers=[False] * n, is_recurrent=[False] * n)
    if kvshape.architecture == "deepseek4":  # llama_kv_cache_iswa of the NextN block (sliding-window): no
        values.update(compress_ratios=[], mla=False)  # compressed caches, K and V (no MLA widths in its hparams)
    return type(kvshape)(**values)


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
