"""llama.cpp's compute graphs, rebuilt from a GGUF header for the allocator replay (moetools.devicefit.ggml).

Laid out as llama.cpp's src/ is: shape.py (the hparams the graphs read), context.py (llm_graph_context),
common.py (llama-graph.cpp's build_attn / build_moe_ffn / build_ffn), mixers/ (models.h's layer-family
base classes), trunk.py (the generic layer loop), models/ (src/models/<arch>.cpp, only the bespoke
whole-model graphs), mtp.py (the MTP draft context). archsets.py holds the architecture-name sets for
now. Kept free of imports (submodules are imported by their full dotted path)."""
