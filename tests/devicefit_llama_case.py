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


# The -ot cases (benchmarks/check_devicefit_ot.py, tests/test_devicefit_ot_llama.py): the user's own
# placement flags, llama.cpp's patterns as its users type them, on the same two RPC devices.
OT_RECORD = "tests/data/devicefit_llama_ot.json"
# llama.cpp 0c1e57098 names every RPC server's buffer type RPC0[host:port] (ggml-rpc.cpp: one device per
# server, each the first of its endpoint), and -ot takes those names
RPC0, RPC1 = (f"RPC0[127.0.0.1:{port}]" for port in RPC_PORTS)
# (name, the user's placement flags): llama.cpp's own patterns, the ones its users trade
OT_CASES = [
    ("every expert on the CPU", ["-ngl", "99", "-ts", "4,5", "-ot", "exps=CPU"]),
    ("blocks 0-3's experts on the CPU", ["-ngl", "99", "-ts", "4,5", "-ot", r"blk\.[0-3]\.ffn_.*_exps=CPU"]),
    ("block 0 whole on the second device, the experts of 4-7 on the CPU",
     ["-ngl", "99", "-ts", "1,1", "-ot", rf"blk\.0\.={RPC1}", "-ot", r"blk\.[4-7]\.ffn_.*_exps\.=CPU"]),
    ("-ot before --n-cpu-moe", ["-ngl", "99", "-ts", "4,5", "-ot", rf"blk\.2\.={RPC0}", "--n-cpu-moe", "4"]),
    # the same two, the other way round: llama.cpp keeps one override list in command-line order and the
    # first match wins (common/arg.cpp, llama-model-loader.cpp), so block 2's experts stay on the CPU
    ("--n-cpu-moe before -ot", ["-ngl", "99", "-ts", "4,5", "--n-cpu-moe", "4", "-ot", rf"blk\.2\.={RPC0}"]),
]


def ot_device_fit_args(model_path, flags):
    return [*device_fit_args(model_path), *flags]
