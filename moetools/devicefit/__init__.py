"""device-fit: plan a MoE model on the devices at hand and predict its decode speed.

Modules: `kv` sizes the KV cache and recurrent state as llama.cpp allocates them (memory model);
`layers` reads what each layer weighs from the header; `devices` parses the GPUs, RPC servers and the
host; `placement` assigns layers and expert matrices to devices as llama.cpp's `-ts`/`-ngl`/`-ot` do and
keeps the per-device ledger; `speed` prices a placement per token; `upstream` plans `--runtime llama`;
`core` is the streaming fork's one-GPU division (`--runtime fork`); `command` is the click command.
Nothing here imports numpy, gguf or rich (the header path must start in well under 0.5 s).
"""
