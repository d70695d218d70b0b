"""DeepSeek and the loaders built on its MLA/DSA layout (deepseek*, dots*).

One ArchProfile per architecture (moetools.arch.profile); fields left out keep their defaults."""

from moetools.arch.profile import ArchProfile as P

PROFILES = (
    P("deepseek", llama_cpp="src/models/deepseek.cpp", synth_builder="moetools.synth.families.deepseek:deepseek"),
    P("deepseek2", llama_cpp="src/models/deepseek2.cpp", synth_builder="moetools.synth.families.deepseek:deepseek2", gating="sigmoid",
      mtp="graph"),
    P("deepseek2-ocr", llama_cpp="src/models/deepseek2ocr.cpp", synth_builder="moetools.synth.families.deepseek:deepseek"),
    P("deepseek32", indexer_rule="trunk", llama_cpp="src/models/deepseek32.cpp", synth_builder="moetools.synth.families.deepseek:deepseek32", sparse_kv="dsa",
      gating="sigmoid", mtp="graph", mtp_kept=(".exp_probs_b.bias",)),
    P("deepseek4", dsv4_cache=True, llama_cpp="src/models/deepseek4.cpp", synth_builder="moetools.synth.families.deepseek:deepseek4",
      graph_builder="moetools.devicefit.graph.models.deepseek4:_build_dsv4", rs_rollback=True, mtp="graph",
      mtp_builder="moetools.devicefit.graph.models.deepseek4:_build_mtp_dsv4",
      mtp_single_block="DEEPSEEK4 MTP currently only supports a single MTP block", mtp_compressed_assert=True,
      layer_input="unplanned"),
    P("dots1", llama_cpp="src/models/dots1.cpp", synth_builder="moetools.synth.families.deepseek:dots1", gating="sigmoid"),
    P("dots3note", indexer_rule="types_required", mla_swa=True, mla_k_rope_norm=True, mla_gate="broadcast",
      dsa_before_swa=True, llama_cpp="src/models/dots3note.cpp", synth_builder="moetools.synth.families.deepseek:dots3note", sparse_kv="dsa",
      swa=("array", 0, False, None, "standard")),
)
