"""Moonshot's Kimi loaders (kimi-linear, kimi-k3: Kimi Delta Attention hybrids).

One ArchProfile per architecture (moetools.arch.profile); fields left out keep their defaults."""

from moetools.arch.profile import ArchProfile as P

PROFILES = (
    P("kimi-k3", llama_cpp="src/models/kimi-k3.cpp", synth_builder="moetools.synth.families.kimi:kimi_k3", recurrent_mixer="kda",
      rs_rollback=True, gating="sigmoid", no_rope=True, residual_first=True, attn_res=True, kda_conv_snapshots=True),
    P("kimi-linear", llama_cpp="src/models/kimi-linear.cpp", synth_builder="moetools.synth.families.kimi:kimi_linear",
      recurrent_mixer="kda", gating="sigmoid", norm_w="always", no_rope=True, norm_first=True),
)
