"""Per-architecture facts as data: one ArchProfile per llama.cpp architecture name.

`profile.py` defines the record, the family modules (qwen, deepseek, kimi, glm, gemma, minimax, ssm,
rwkv, other) hold one PROFILES tuple each, and `registry.py` answers queries: `profile(name)` and
`names_with(field, value)`. Plain Python with no numpy or gguf import, read lazily on the first query,
so the inspect/device-fit start-up path stays cheap. This package imports nothing here on purpose
(submodules are imported by their full dotted path).
"""
