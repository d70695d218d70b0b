"""Qwen (Alibaba): qwen*, their MoE, next, 3.5, VL and 4exp loaders.

One ArchProfile per architecture (moetools.arch.profile); fields left out keep their defaults."""

from moetools.arch.profile import ArchProfile as P

PROFILES = (
    P("qwen", llama_cpp="src/models/qwen.cpp"),
    P("qwen2", llama_cpp="src/models/qwen2.cpp", quant_70b=80),
    P("qwen2moe", llama_cpp="src/models/qwen2moe.cpp", synth_builder="moetools.synth.families.qwen:qwen2moe"),
    P("qwen2vl", llama_cpp="src/models/qwen2vl.cpp", mrope="always"),
    P("qwen3", llama_cpp="src/models/qwen3.cpp", layer_input="graph"),
    P("qwen35", llama_cpp="src/models/qwen35.cpp", synth_builder="moetools.synth.families.qwen:qwen35moe", recurrent_mixer="gdn",
      rs_rollback=True, mrope="always", gated_q=True, norm_first=True, nextn_tail=True, mtp="graph",
      mtp_head_norm=("nextn.shared_head_norm",),
      mtp_single_block="QWEN35 MTP currently only supports a single MTP block", layer_input="graph"),
    P("qwen35moe", llama_cpp="src/models/qwen35moe.cpp", synth_builder="moetools.synth.families.qwen:qwen35moe",
      recurrent_mixer="gdn", rs_rollback=True, norm_w="default_true", mrope="always", gated_q=True, norm_first=True,
      nextn_tail=True, mtp="graph", mtp_head_norm=("nextn.shared_head_norm",), layer_input="graph"),
    P("qwen3moe", llama_cpp="src/models/qwen3moe.cpp", synth_builder="moetools.synth.families.qwen:qwen3moe", norm_w="default_true",
      layer_input="graph"),
    P("qwen3next", split_compute_off="0.88x on a partial offload at Qwen3-Next-80B's widths", llama_cpp="src/models/qwen3next.cpp", recurrent_mixer="gdn", norm_w="default_true", gated_q=True,
      norm_first=True, nextn_tail=True, mtp="graph", mtp_rows="after_attention", layer_input="graph",
      gdn_repeat_groups=True),
    P("qwen3tts", llama_cpp="src/models/qwen3tts.cpp", mrope="always"),
    P("qwen3vl", llama_cpp="src/models/qwen3vl.cpp", mrope="always"),
    P("qwen3vlmoe", llama_cpp="src/models/qwen3vlmoe.cpp", synth_builder="moetools.synth.families.qwen:qwen3vlmoe", mrope="always"),
    P("qwen4exp", qsa_indexer=True, shape_reader="moetools.devicefit.graph.models.qwen4exp:read_qwen4exp_shape",
      llama_cpp="src/models/qwen4exp.cpp", synth_builder="moetools.synth.families.qwen:qwen4exp",
      graph_builder="moetools.devicefit.graph.models.qwen4exp:_build_qwen4exp", recurrent_mixer="gdn", rs_rollback=True,
      norm_w="always", mrope="always", gated_q=True, layer_input="hc_streams", gating_fixed=True),
)
