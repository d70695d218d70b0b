"""Tensor names: `tn(kind, bid, suffix)` formats one from gguf-py's templates
(`gguf.constants.TENSOR_NAMES[MODEL_TENSOR.ATTN_NORM]` is "blk.{bid}.attn_norm"), as llama.cpp's
`tn(LLM_TENSOR_ATTN_NORM, "weight", il)` does; `parse(name)` reads one back.

The templates below are those of tensors newer than the gguf package moetools pins (gguf 0.19 lacks
them), named as gguf-py names them at llama.cpp 0c1e57098 (gguf-py/gguf/constants.py MODEL_TENSOR, so a
newer gguf's `MODEL_TENSOR.X` replaces `names.X`); each comment names its entry in that commit's
src/llama-arch.cpp LLM_TENSOR_NAMES. Every other tensor synth writes is a `MODEL_TENSOR` of gguf 0.19."""

import re

from gguf.constants import TENSOR_NAMES

# DeepSeek-V4 attention: one K-only head, grouped low-rank output, the CSA/HCA compressors
ATTN_KV = "blk.{bid}.attn_kv"  # LLM_TENSOR_ATTN_KV
ATTN_OUT_A = "blk.{bid}.attn_output_a"  # LLM_TENSOR_ATTN_OUT_A
ATTN_OUT_B = "blk.{bid}.attn_output_b"  # LLM_TENSOR_ATTN_OUT_B
ATTN_COMPRESSOR_WKV = "blk.{bid}.attn_compressor_kv"  # LLM_TENSOR_ATTN_COMPRESSOR_WKV
ATTN_COMPRESSOR_WGATE = "blk.{bid}.attn_compressor_gate"  # LLM_TENSOR_ATTN_COMPRESSOR_WGATE
ATTN_COMPRESSOR_APE = "blk.{bid}.attn_compressor_ape"  # LLM_TENSOR_ATTN_COMPRESSOR_APE
ATTN_COMPRESSOR_NORM = "blk.{bid}.attn_compressor_norm"  # LLM_TENSOR_ATTN_COMPRESSOR_NORM
# the lightning indexer's compressor (DeepSeek-V4) and k-pool (GLM-5.3-Flash: the same names)
INDEXER_COMPRESSOR_WKV = "blk.{bid}.indexer_compressor_kv"  # LLM_TENSOR_INDEXER_COMPRESSOR_WKV
INDEXER_COMPRESSOR_WGATE = "blk.{bid}.indexer_compressor_gate"  # LLM_TENSOR_INDEXER_COMPRESSOR_WGATE
INDEXER_COMPRESSOR_APE = "blk.{bid}.indexer_compressor_ape"  # LLM_TENSOR_INDEXER_COMPRESSOR_APE
INDEXER_COMPRESSOR_NORM = "blk.{bid}.indexer_compressor_norm"  # LLM_TENSOR_INDEXER_COMPRESSOR_NORM
INDEXER_KPOOL_GATE = "blk.{bid}.indexer_compressor_gate"  # LLM_TENSOR_INDEXER_KPOOL_GATE
INDEXER_KPOOL_APE = "blk.{bid}.indexer_compressor_ape"  # LLM_TENSOR_INDEXER_KPOOL_APE
# the QSA / MiniMax sparse-attention indexer (qwen4exp, minimax-m3)
INDEXER_Q_PROJ = "blk.{bid}.indexer.q_proj"  # LLM_TENSOR_INDEXER_Q_PROJ
INDEXER_K_PROJ = "blk.{bid}.indexer.k_proj"  # LLM_TENSOR_INDEXER_K_PROJ
INDEXER_Q_NORM = "blk.{bid}.indexer.q_norm"  # LLM_TENSOR_INDEXER_Q_NORM
# hyper-connections: DeepSeek-V4's Sinkhorn mixes (fn/base/scale), qwen4exp's low-rank ones (norm/down/up/inject)
HC_ATTN_FN = "blk.{bid}.hc_attn_fn"  # LLM_TENSOR_HC_ATTN_FN
HC_ATTN_BASE = "blk.{bid}.hc_attn_base"  # LLM_TENSOR_HC_ATTN_BASE
HC_ATTN_SCALE = "blk.{bid}.hc_attn_scale"  # LLM_TENSOR_HC_ATTN_SCALE
HC_FFN_FN = "blk.{bid}.hc_ffn_fn"  # LLM_TENSOR_HC_FFN_FN
HC_FFN_BASE = "blk.{bid}.hc_ffn_base"  # LLM_TENSOR_HC_FFN_BASE
HC_FFN_SCALE = "blk.{bid}.hc_ffn_scale"  # LLM_TENSOR_HC_FFN_SCALE
HC_ATTN_NORM = "blk.{bid}.hc_attn_norm"  # LLM_TENSOR_HC_ATTN_NORM
HC_ATTN_DOWN = "blk.{bid}.hc_attn_down"  # LLM_TENSOR_HC_ATTN_DOWN
HC_ATTN_UP = "blk.{bid}.hc_attn_up"  # LLM_TENSOR_HC_ATTN_UP
HC_ATTN_INJECT = "blk.{bid}.hc_attn_inject"  # LLM_TENSOR_HC_ATTN_INJECT
HC_FFN_NORM = "blk.{bid}.hc_ffn_norm"  # LLM_TENSOR_HC_FFN_NORM
HC_FFN_DOWN = "blk.{bid}.hc_ffn_down"  # LLM_TENSOR_HC_FFN_DOWN
HC_FFN_UP = "blk.{bid}.hc_ffn_up"  # LLM_TENSOR_HC_FFN_UP
HC_FFN_INJECT = "blk.{bid}.hc_ffn_inject"  # LLM_TENSOR_HC_FFN_INJECT
HC_HEAD_FN = "output_hc_fn"  # LLM_TENSOR_HC_HEAD_FN
HC_HEAD_BASE = "output_hc_base"  # LLM_TENSOR_HC_HEAD_BASE
HC_HEAD_SCALE = "output_hc_scale"  # LLM_TENSOR_HC_HEAD_SCALE
HC_HEAD_NORM = "output_hc_norm"  # LLM_TENSOR_HC_HEAD_NORM
HC_HEAD_DOWN = "output_hc_down"  # LLM_TENSOR_HC_HEAD_DOWN
HC_HEAD_UP = "output_hc_up"  # LLM_TENSOR_HC_HEAD_UP
# Kimi-K3: the KDA output gate, attention residuals, the latent MoE's projections
SSM_G = "blk.{bid}.ssm_g"  # LLM_TENSOR_SSM_G
ATTN_RES_SCORE = "blk.{bid}.attn_res_score"  # LLM_TENSOR_ATTN_RES_SCORE
FFN_RES_SCORE = "blk.{bid}.ffn_res_score"  # LLM_TENSOR_FFN_RES_SCORE
OUTPUT_RES_SCORE = "output_res_score"  # LLM_TENSOR_OUTPUT_RES_SCORE
FFN_ROUTED_DOWN = "blk.{bid}.ffn_routed_down"  # LLM_TENSOR_FFN_ROUTED_DOWN
FFN_ROUTED_UP = "blk.{bid}.ffn_routed_up"  # LLM_TENSOR_FFN_ROUTED_UP
FFN_ROUTED_NORM = "blk.{bid}.ffn_routed_norm"  # LLM_TENSOR_FFN_ROUTED_NORM
# qwen4exp's PLE module
PLE_KEY = "blk.{bid}.ple_key"  # LLM_TENSOR_PLE_KEY
PLE_VALUE = "blk.{bid}.ple_value"  # LLM_TENSOR_PLE_VALUE
PLE_NORM_KEY = "blk.{bid}.ple_norm_key"  # LLM_TENSOR_PLE_NORM_KEY
PLE_NORM_QUERY = "blk.{bid}.ple_norm_query"  # LLM_TENSOR_PLE_NORM_QUERY
PLE_NORM_CONV = "blk.{bid}.ple_norm_conv"  # LLM_TENSOR_PLE_NORM_CONV
PLE_CONV1D = "blk.{bid}.ple_conv1d"  # LLM_TENSOR_PLE_CONV1D
# drafts: DFlash's feature fusion, the Gemma 4 assistant's projections
FC = "fc"  # LLM_TENSOR_FC
NEXTN_PROJ_PRE = "nextn.pre_projection"  # LLM_TENSOR_NEXTN_PROJ_PRE
NEXTN_PROJ_POST = "nextn.post_projection"  # LLM_TENSOR_NEXTN_PROJ_POST


def tn(kind, bid=None, suffix="weight"):
    """The name of tensor `kind` (a gguf MODEL_TENSOR or a template above) in block `bid` (None: a
    tensor outside the blocks) with `suffix` ("weight", "bias", "scale"; None: none, as a few loaders
    ask): tn(MODEL_TENSOR.ATTN_NORM, 3) is "blk.3.attn_norm.weight"."""
    template = kind if isinstance(kind, str) else TENSOR_NAMES[kind]
    name = template.format(bid=bid)
    return name if suffix is None else f"{name}.{suffix}"


_KINDS = {}  # template -> kind, gguf's first (FFN_NORM before FFN_PRE_NORM, which share one)
for _kind, _template in TENSOR_NAMES.items():
    _KINDS.setdefault(_template, _kind)
for _template in [value for key, value in globals().items() if key.isupper() and isinstance(value, str)]:
    _KINDS.setdefault(_template, _template)
_BLOCK = re.compile(r"blk\.(\d+)\.")


def parse(name):
    """(kind, bid, suffix) of a tensor name, the inverse of tn: parse("blk.3.attn_q.bias") is
    (MODEL_TENSOR.ATTN_Q, 3, "bias"); (None, bid, None) for a name of no known kind."""
    match = _BLOCK.match(name)
    bid = int(match.group(1)) if match else None
    template = "blk.{bid}." + name[match.end():] if match else name
    if template in _KINDS:
        return _KINDS[template], bid, None
    stem, _, suffix = template.rpartition(".")
    return _KINDS.get(stem), bid, suffix if stem in _KINDS else None
