"""Synthetic GGUF models in llama.cpp's real layouts, for the quick start, the tests and the benchmarks.

Each builder returns a `ModelSpec`: the architecture's metadata keys and its tensors with the names,
ggml-order shapes and types llama.cpp's loader expects (src/models/*.cpp, gguf-py constants).
`write_model` writes a spec with gguf.GGUFWriter either with real (random) tensor data, for tiny
models, or header-only as sparse files of full apparent size, for K2/K3-class shapes.

The package: `spec` (the records and type ids), `blocks` (block builders shared by the families),
`families/<family>` (one module per family of architectures, each with its `BUILDERS` table), `writer`
(write_model) and `presets` (full-size presets, `tiny`, the `python -m moetools.synth` command). This
module re-exports their public names, as `moetools.synth` was one module before 0.2.0.
"""

from moetools.synth.spec import F32, F16, Q4_0, Q8_0, Q4_K, Q6_K, IQ2_XS, IQ3_XXS, BF16, MXFP4, TensorSpec, ModelSpec, Types, more_bits_blocks  # noqa: F401
from moetools.synth.writer import write_model, _vocab_arrays  # noqa: F401
from moetools.synth.families.llama import llama_moe, phimoe, dbrx, grok, granitemoe, olmoe, arctic, granite_moe_shexp, granite_swa, llama_like_moe, dflash, llama4  # noqa: F401
from moetools.synth.families.qwen import qwen3moe, qwen3vlmoe, qwen2moe, qwen3moe_swa, qwen35moe, qwen4exp  # noqa: F401
from moetools.synth.families.deepseek import hunyuan_moe, deepseek, dots1, hy_v3, deepseek2, deepseek32, dots3note, hy_v4, deepseek4  # noqa: F401
from moetools.synth.families.kimi import kimi_k3, kimi_linear, bailingmoe3  # noqa: F401
from moetools.synth.families.glm import glm_dsa, glm5_next, glm4moe  # noqa: F401
from moetools.synth.families.minimax import minimax_01, minimax_m2, minimax_m3  # noqa: F401
from moetools.synth.families.gemma import gemma3n, gemma4, gemma4_assistant  # noqa: F401
from moetools.synth.families.ssm import mamba2, granitehybrid, mamba, jamba, lfm2, falcon_h1, plamo2, nemotron_h_moe, nemotron_h  # noqa: F401
from moetools.synth.families.rwkv import rwkv6, rwkv6qwen2, rwkv7, arwkv7  # noqa: F401
from moetools.synth.families.other import ernie4_5_moe, bailingmoe2, step35, mimo2, afmoe, smallthinker, cohere2moe, exaone_moe, exaone4, grovemoe, bailingmoe, laguna, gpt_oss  # noqa: F401
from moetools.synth.presets import PRESETS, preset, tiny, main  # noqa: F401
from moetools.synth.presets import BUILDERS  # noqa: F401
