"""State-space and short-convolution loaders and their hybrids (mamba, jamba, falcon-h1, nemotron-h, lfm2, ...).

One ArchProfile per architecture (moetools.arch.profile); fields left out keep their defaults."""

from moetools.arch.profile import ArchProfile as P

PROFILES = (
    P("falcon-h1", llama_cpp="src/models/falcon-h1.cpp", synth_builder="moetools.synth.families.ssm:falcon_h1",
      recurrent=("mamba", "all", "all"), parallel_ssm=True),
    P("granitehybrid", llama_cpp="src/models/granite-hybrid.cpp", synth_builder="moetools.synth.families.ssm:granitehybrid",
      recurrent=("mamba", "hkv0", "not_recurrent")),
    P("jamba", llama_cpp="src/models/jamba.cpp", synth_builder="moetools.synth.families.ssm:jamba",
      recurrent=("mamba", "hkv0", "not_recurrent"), norm_w="never", no_rope=True, residual_first=True,
      ssm_groups_optional=True),
    P("lfm2", llama_cpp="src/models/lfm2.cpp", synth_builder="moetools.synth.families.ssm:lfm2",
      recurrent=("shortconv", "hkv0", "not_recurrent"), swa=("key>0", 0, False, None, "standard"), rs_rollback=True,
      residual_first=True, layer_input="graph", swa_skips_recurrent=True),
    P("lfm2moe", llama_cpp="src/models/lfm2moe.cpp", synth_builder="moetools.synth.families.ssm:lfm2",
      recurrent=("shortconv", "hkv0", "not_recurrent"), rs_rollback=True, norm_w="always", residual_first=True),
    P("mamba", llama_cpp="src/models/mamba.cpp", synth_builder="moetools.synth.families.ssm:mamba",
      recurrent=("mamba", "all", "none"), ssm_groups_optional=True),
    P("mamba2", llama_cpp="src/models/mamba2.cpp", synth_builder="moetools.synth.families.ssm:mamba2",
      recurrent=("mamba", "all", "none")),
    P("nemotron_h", llama_cpp="src/models/nemotron-h.cpp", synth_builder="moetools.synth.families.ssm:nemotron_h",
      recurrent=("mamba", "hkv0_ff0", "ff0"), rs_rollback=True, no_rope=True, relu_sqr=True, nextn_tail=True,
      mtp="skip", layer_input="graph"),
    P("nemotron_h_moe", mtp_crop_before_ffn=True, llama_cpp="src/models/nemotron-h-moe.cpp", synth_builder="moetools.synth.families.ssm:nemotron_h_moe",
      recurrent=("mamba", "hkv0_ff0", "ff0"), rs_rollback=True, no_rope=True, relu_sqr=True, nextn_tail=True,
      mtp="graph"),
    P("plamo2", llama_cpp="src/models/plamo2.cpp", synth_builder="moetools.synth.families.ssm:plamo2",
      recurrent=("mamba", "hkv0", "not_recurrent")),
)
