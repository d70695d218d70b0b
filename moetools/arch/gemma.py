"""Google's Gemma loaders (gemma .. gemma4, the gemma4 assistant draft, the embedding model).

One ArchProfile per architecture (moetools.arch.profile); fields left out keep their defaults."""

from moetools.arch.profile import ArchProfile as P

PROFILES = (
    P("gemma", llama_cpp="src/models/gemma.cpp"),
    P("gemma-embedding", llama_cpp="src/models/gemma-embedding.cpp", memory="unsupported",
      unsupported="no KV cache (an embedding model device-fit does not plan)"),
    P("gemma2", llama_cpp="src/models/gemma2.cpp", swa=("always", 2, False, 4096, "standard")),
    P("gemma3", llama_cpp="src/models/gemma3.cpp", swa=("key>0", 6, False, None, "standard")),
    P("gemma3n", shape_reader="moetools.devicefit.graph.models.gemma3n:read_gemma3n_shape", llama_cpp="src/models/gemma3n.cpp", synth_builder="moetools.synth.families.gemma:gemma3n",
      graph_builder="moetools.devicefit.graph.models.gemma3n:_build_gemma3n", swa=("always", 5, False, None, "standard"),
      kv_layers_from_start=20),
    P("gemma4", swa_width_required=True, llama_cpp="src/models/gemma4.cpp", synth_builder="moetools.synth.families.gemma:gemma4",
      swa=("array", 0, False, None, "standard"), nextn_tail=True, layer_input="graph", kv_layers_from_start="key",
      assistant_target=True),
    P("gemma4-assistant", llama_cpp="src/models/gemma4-assistant.cpp",
      synth_builder="moetools.synth.families.gemma:gemma4_assistant", graph_builder="moetools.devicefit.graph.models.gemma4_assistant:_build_assistant",
      swa=("array", 0, False, None, "standard"), borrowed_kv=True),
)
