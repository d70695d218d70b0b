"""RWKV loaders (rwkv6, rwkv6qwen2, rwkv7, arwkv7).

One ArchProfile per architecture (moetools.arch.profile); fields left out keep their defaults."""

from moetools.arch.profile import ArchProfile as P

PROFILES = (
    P("arwkv7", llama_cpp="src/models/arwkv7.cpp", synth_builder="moetools.synth.families.rwkv:arwkv7",
      recurrent=("rwkv", "all", "none"), mixer_name="arwkv7"),
    P("rwkv6", llama_cpp="src/models/rwkv6.cpp", synth_builder="moetools.synth.families.rwkv:rwkv6",
      recurrent=("rwkv", "all", "none"), mixer_name="rwkv6"),
    P("rwkv6qwen2", llama_cpp="src/models/rwkv6qwen2.cpp", synth_builder="moetools.synth.families.rwkv:rwkv6qwen2",
      recurrent=("rwkv", "all", "none"), mixer_name="rwkv6qwen2"),
    P("rwkv7", llama_cpp="src/models/rwkv7.cpp", synth_builder="moetools.synth.families.rwkv:rwkv7",
      recurrent=("rwkv", "all", "none"), mixer_name="rwkv7"),
)
