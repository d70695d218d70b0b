"""device-fit: divide one GPU's VRAM between compute reserve, resident weights, KV cache and the
hot-expert cache, predict decode speed per division, and print the launch settings.

`kv` sizes the KV cache and recurrent state as llama.cpp allocates them; `core` does the division;
`command` is the click command. Nothing here imports numpy, gguf or rich (the header path must start
in well under 0.5 s).
"""
