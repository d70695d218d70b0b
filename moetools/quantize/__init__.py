"""`moetools quantize`: precision tiers of a MoE model's resident weights (see core.py).

Modules: `rules` (which tensors llama-quantize keeps, fallbacks, target types; no numpy),
`kernels` (numpy quantizers byte-identical to ggml's reference), `core` (plan, stream, write,
measure), `command` (the click command).
"""
