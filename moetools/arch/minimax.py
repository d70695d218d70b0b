"""MiniMax loaders (minimax-01 lightning attention, minimax-m2, minimax-m3 sparse attention).

One ArchProfile per architecture (moetools.arch.profile); fields left out keep their defaults."""

from moetools.arch.profile import ArchProfile as P

PROFILES = (
    P("minimax-01", llama_cpp="src/models/minimax-01.cpp", synth_builder="moetools.synth.families.minimax:minimax_01",
      recurrent_mixer="lightning", norm_w="always", normed_residual=True, layer_input="graph"),
    P("minimax-m2", llama_cpp="src/models/minimax-m2.cpp", synth_builder="moetools.synth.families.minimax:minimax_m2",
      gating="sigmoid", norm_w="default_true", layer_input="graph"),
    P("minimax-m3", llama_cpp="src/models/minimax-m3.cpp", synth_builder="moetools.synth.families.minimax:minimax_m3",
      sparse_kv="msa"),
)
