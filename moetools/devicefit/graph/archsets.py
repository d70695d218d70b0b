"""The architecture-name tuples the graph builders test, collected in one place.

Temporary home: each set moves, name unchanged, from the graph code that reads it; a later step replaces
this module by the per-architecture registry under moetools/arch/. The comments say which
src/models/<arch>.cpp behaviour each set stands for.
"""


# gating function defaults of the loaders (expert_gating_func absent): softmax, except these
_SIGMOID_DEFAULT = ("deepseek2", "kimi-k3", "kimi-linear", "glm4moe", "minimax-m2", "dots1", "deepseek32", "glm-dsa")
_SOFTMAX_WEIGHT = ("gpt-oss",)
_NORM_W_DEFAULT = ("qwen3moe", "qwen3next", "qwen35moe", "minimax-m2", "glm4moe")
_NORM_W_NEVER = ("gpt-oss", "jamba")  # openai-moe.cpp / jamba.cpp pass false whatever the key says
_NORM_W_ALWAYS = ("lfm2moe", "ernie4_5-moe", "kimi-linear", "minimax-01", "qwen4exp")  # lfm2.cpp, ernie4-5-moe.cpp, kimi-linear.cpp, minimax-01.cpp, qwen4exp.cpp pass true
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


ATTN_RES_ARCHES = ("kimi-k3",)


# the MTP draft context (--spec-type draft-mtp), graph/mtp.py and graph/shape.py

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


# graph_mtp's head norm: the block's own tensor(s) in this order, else model.output_norm (which lives on
# the output layer's device, so the every-row state crosses there): cohere2moe.cpp, mimo2.cpp, qwen35.cpp
# and qwen35moe.cpp
MTP_HEAD_NORM_FALLBACK = {"cohere2moe": ("nextn.shared_head_norm",),
                          "mimo2": ("nextn.shared_head_norm", "layer_output_norm"),
                          "qwen35": ("nextn.shared_head_norm",), "qwen35moe": ("nextn.shared_head_norm",)}


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


PARALLEL_FFN_ARCHES = ("cohere2moe",)  # attention and FFN side by side from one norm, both added to the input
