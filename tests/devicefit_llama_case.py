"""The case device-fit's ledger is checked on against llama.cpp itself: a small qwen3moe model, two
llama.cpp RPC servers on loopback offering 120 and 90 MiB, and the CPU.

`benchmarks/check_devicefit_llama.py` runs llama.cpp on it and records what llama.cpp logs in
tests/data/devicefit_llama_check.json; tests/test_devicefit_llama_devices.py checks device-fit against
that record without llama.cpp.
"""

from moetools import synth

RPC_PORTS = (50152, 50153)
RPC_SIZES = ("120M", "90M")
CONTEXT = 4096
RECORD = "tests/data/devicefit_llama_check.json"


def fixture_spec():
    spec = synth.tiny("qwen3moe", n_layer=8, n_embd=512, n_ff_exp=512, n_expert=32, vocab=2048, ctx=8192)
    spec.merges = 16  # llama.cpp's BPE loader wants merges
    return spec


def device_fit_args(model_path):
    # --n-outputs 0: the record's launches are llama-completion's, whose context outputs every batch row
    args = [str(model_path), "--runtime", "llama", "--ram", "16G", "--margin", "0", "-c", str(CONTEXT), "--n-outputs", "0"]
    for port, size in zip(RPC_PORTS, RPC_SIZES):
        args += ["--rpc", f"127.0.0.1:{port}={size}"]
    return args
FULL_OFFLOAD_TS = "4,5"  # the third launch: every layer and expert on the RPC devices (-ngl 99)
