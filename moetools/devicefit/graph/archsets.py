"""The architecture sets the graph builders test, as views of the per-architecture registry
(moetools/arch): each name below is the set of architectures whose profile has that field, so a new
architecture sets its flags in its profile and never here. The comments say which src/models/<arch>.cpp
behaviour each set stands for. tests/test_arch_registry.py holds the sets as they were before the
registry, name by name.
"""

from moetools.arch.registry import mtp_names, names_with, profiles


# gating function defaults of the loaders (expert_gating_func absent): softmax, except these
_SIGMOID_DEFAULT = names_with("gating", "sigmoid")
_SOFTMAX_WEIGHT = names_with("gating", "softmax_weight")
_NORM_W_DEFAULT = names_with("norm_w", "default_true")
_NORM_W_NEVER = names_with("norm_w", "never")  # openai-moe.cpp / jamba.cpp pass false whatever the key says
_NORM_W_ALWAYS = names_with("norm_w", "always")  # lfm2.cpp, ernie4-5-moe.cpp, kimi-linear.cpp, minimax-01.cpp, qwen4exp.cpp pass true
NO_ROPE_ARCHES = names_with("no_rope")  # NoPE MLA: k_pe and q_pe are views, never roped
PARALLEL_SSM_ARCHES = names_with("parallel_ssm")  # attention and Mamba-2 side by side in every block, outputs added
RESIDUAL_FIRST_ARCHES = names_with("residual_first")  # ggml_add(residual, layer output)
RELU_SQR_ARCHES = names_with("relu_sqr")  # LLM_FFN_RELU_SQR experts, shared expert and dense FFN
# ... of those, the loaders whose t_h_nextn is the state before the output norm (openai-moe.cpp, step35.cpp:
# get_rows, then the norm); the others norm every row first and drop the rows after it
NEXTN_RAW_STATE = names_with("nextn_raw_state")
# loaders that expand the attention norm before the layer body (before a delta net gathers its states)
NORM_FIRST_ARCHES = names_with("norm_first")
# loaders whose residuals are the *normed* block inputs, scaled by residual_scale (minimax-01.cpp: the
# attention adds scale(attn_norm(x)), the FFN scale(ffn_norm(h)))
NORMED_RESIDUAL_ARCHES = names_with("normed_residual")
# loaders whose graph has no inp_out_ids and no embeddings input (dflash.cpp's decoder: the draft's
# block of tokens embedded from their ids, every row to the logits whatever n_outputs_max is)
EVERY_ROW_ARCHES = names_with("every_row")
# loaders whose blocks have no pre-norms (exaone4.cpp): attention and FFN read the stream itself and
# their outputs are RMS-normed before each residual add
POST_NORM_ARCHES = names_with("post_norm")
# build_layer_attn of qwen3next.cpp / qwen35moe.cpp / qwen35.cpp: attn_q gives the query and the output
# gate side by side (Qcur_full); the gate is made contiguous after the attention (ggml_cont_2d)
GATED_Q_ARCHES = names_with("gated_q")
# llama_model_rope_type: M-RoPE / interleaved M-RoPE (4 positions per token), always or with rope sections
MROPE_ARCHES = names_with("mrope", "always")
MROPE_IF_SECTIONS = names_with("mrope", "if_sections")
# Loaders whose graph keeps the trunk's last hidden state as an output (t_h_nextn) and drops the
# non-output rows after the trunk instead of inside the last layer (src/models/*.cpp).
NEXTN_TAIL = names_with("nextn_tail")


ATTN_RES_ARCHES = names_with("attn_res")


# the MTP draft context (--spec-type draft-mtp), graph/mtp.py and graph/shape.py

# Loaders whose graph_mtp (LLM_GRAPH_TYPE_DECODER_MTP) runs one NextN block as a trunk block fed by
# eh_proj(concat(enorm(token embedding), hnorm(the trunk's hidden state))), then the shared head norm,
# the output rows and the LM head: src/models/deepseek2.cpp, deepseek32.cpp (dense MLA, no indexer),
# glm4-moe.cpp, qwen35moe.cpp and qwen3next.cpp (gated-query attention). Other MTP graphs differ
# (Nemotron-H, DeepSeek-V4, ...).
MTP_GRAPH_ARCHES = mtp_names("graph")
# the loaders whose build_arch_graph builds an LLM_GRAPH_TYPE_DECODER_MTP graph at llama.cpp 0c1e57098
# (src/models/*.cpp); for any other architecture llama.cpp does not draft with the model's NextN blocks
LLAMA_MTP_ARCHES = mtp_names("llama")
# ... of which these drop the non-output rows right after the attention (the FFN and head run on the
# output rows only), as a trunk's last layer does: src/models/qwen3next.cpp graph_mtp.
MTP_ROWS_AFTER_ATTENTION = names_with("mtp_rows", "after_attention")
# ... of which these take the output rows after the block, before the shared head norm (t_h_nextn is the
# block's raw output row: src/models/step35.cpp graph_mtp)
MTP_ROWS_BEFORE_HEAD_NORM = names_with("mtp_rows", "before_head_norm")
# ... of which these attend through llama_kv_cache_iswa's inputs (the MTP context's cache is an iswa one)
MTP_ISWA_ARCHES = names_with("mtp_iswa")


# graph_mtp's head norm: the block's own tensor(s) in this order, else model.output_norm (which lives on
# the output layer's device, so the every-row state crosses there): cohere2moe.cpp, mimo2.cpp, qwen35.cpp
# and qwen35moe.cpp
MTP_HEAD_NORM_FALLBACK = {name: entry.mtp_head_norm for name, entry in profiles().items() if entry.mtp_head_norm}


PARALLEL_FFN_ARCHES = names_with("parallel_ffn")  # attention and FFN side by side from one norm, both added to the input
