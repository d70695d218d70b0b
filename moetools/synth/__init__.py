"""Synthetic GGUF models in llama.cpp's real layouts, for the quick start, the tests and the benchmarks.

Each builder returns a `ModelSpec`: the architecture's metadata keys and its tensors with the names,
ggml-order shapes and types llama.cpp's loader expects (src/models/*.cpp, gguf-py constants).
`write_model` writes a spec with gguf.GGUFWriter either with real (random) tensor data, for tiny
models, or header-only as sparse files of full apparent size, for K2/K3-class shapes.

The package: `spec` (the records and type ids), `blocks` (block builders shared by the families),
`families/<family>` (one module per family of architectures, each with its `BUILDERS` table of tiny
builders and its `PRESETS` table of full-size presets), `writer` (write_model) and `presets` (the families'
tables merged, `tiny`, `preset`, the `python -m moetools.synth` command). This
module re-exports the public API (the records, write_model, tiny, preset, BUILDERS, PRESETS); a family's
builders are reached through `BUILDERS[arch]` or their family module.
"""

from moetools.synth.spec import F32, F16, Q4_0, Q8_0, Q4_K, Q6_K, IQ2_XS, IQ3_XXS, BF16, MXFP4, TensorSpec, ModelSpec, Types, more_bits_blocks  # noqa: F401
from moetools.synth.writer import write_model, _vocab_arrays  # noqa: F401
from moetools.synth.presets import PRESETS, preset, tiny, main  # noqa: F401
from moetools.synth.presets import BUILDERS  # noqa: F401
