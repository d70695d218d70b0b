"""`moetools quantize`: precision tiers of a MoE model's resident weights (see core.py).

Modules: `rules` (which tensors llama-quantize keeps, fallbacks, target types; no numpy),
`kernels/` (ggml's quantizers, numpy and numba, byte-identical to ggml's reference: one
module per quant family and engine, side by side), `core` (plan, stream, write,
measure), `command` (the click command).
"""
