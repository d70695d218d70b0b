"""Record what llama.cpp's `--fit` chooses (llama-fit-params' printed flags) for MoE models on two loopback
RPC devices and the CPU, for tests/test_devicefit_fitparams.py (devicefit/fit_emulation.py must choose
the same), and the scheduler's splits llama-completion logs for experts on the CPU at either end of a
device's range (sched_splits, for the hop count of the speed model).

    .venv/bin/python benchmarks/check_devicefit_fitparams.py --bin DIR_WITH_LLAMA_TOOLS [--write]

Starts two `ggml-rpc-server` processes on 127.0.0.1 (stopped at the end). An RPC server's CPU backend
reports the host's whole physical memory as free (ggml-cpu.cpp ggml_backend_cpu_device_get_memory:
free = total), so each device's size is set by its fit target: `-fitt` = reported free MiB - size MiB,
which leaves a target of the size plus the part of a MiB the free memory has beyond whole MiB; the
record keeps the reported free bytes (sysconf on this host) to reproduce that exactly. Header-only
presets (`python -m moetools.synth`) cost no RAM: llama-fit-params loads with no_alloc and
LLAMA_LOAD_MODE_NONE and never reads tensor data. `--write` records tests/data/devicefit_llama_fitparams.json
(with --commit), keeping the record's hand-written `xfail` entries (cases device-fit's memory model
is known to decide otherwise, and why). moetools ships no llama.cpp code and no recipe to build it: bring your own binaries.
"""

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from moetools import synth  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_devicefit_llama import rpc_servers  # noqa: E402

RECORD = "tests/data/devicefit_llama_fitparams.json"
PORTS = (50271, 50272)
MIB = 1024 * 1024
SHARED_MODELS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "shared", "models")
# (name, model: a synth preset or a file of ../shared/models, device sizes MiB, -c (None: not given, so
# the training context, which --fit may reduce to -fitc; 0: the training context, which -c 0 forbids the
# fit to reduce, common/arg.cpp setting fit_params_min_ctx to UINT32_MAX unless a later -fitc resets it),
# -fitc or None)
CASES = [
    ("gpt-oss-120b on 16+20 GiB", "gpt-oss-120b", [16000, 20000], 4096, None),
    ("gpt-oss-120b on one 20 GiB device", "gpt-oss-120b", [20000], 4096, None),
    ("gpt-oss-120b, -c 0 -fitc 8192 (context reduced to 8192)", "gpt-oss-120b", [16000, 20000], 0, 8192),
    ("qwen3-235b on 20+22 GiB", "qwen3-235b", [20000, 22000], 4096, None),
    ("glm-4.5-air on 12+18 GiB", "glm-4.5-air", [12000, 18000], 8192, None),
    ("qwen3-30b-a3b on 6+8 GiB", "qwen3-30b-a3b", [6000, 8000], 4096, None),
    ("qwen3-30b-a3b, no -c, one 20 GiB device (only the context changes)", "qwen3-30b-a3b", [20000], None, None),
    ("qwen3-30b-a3b, no -c, one 17.5 GiB device (context at the minimum, then experts)", "qwen3-30b-a3b", [17500],
     None, None),
    ("qwen3-30b-a3b, -c 0, one 17.5 GiB device (the training context kept)", "qwen3-30b-a3b", [17500], 0, None),
    ("qwen3-235b, no -c, on 20+23 GiB", "qwen3-235b", [20000, 23000], None, None),
    ("qwen3-30b-a3b fits as it is", "qwen3-30b-a3b", [20000, 20000], 4096, None),
    ("deepseek-v3 on 20+22 GiB", "deepseek-v3", [20000, 22000], 4096, None),
    ("deepseek-v3 on 3+3 GiB (dense weights do not fit)", "deepseek-v3", [3000, 3000], 4096, None),
    ("kimi-k2 on 18+23 GiB", "kimi-k2", [18000, 23000], 4096, None),
    ("llama3-8b (dense) on 2+3 GiB", "llama3-8b", [2000, 3000], 8192, None),
    ("llama3-8b (dense) on 3+9 GiB", "llama3-8b", [3000, 9000], 8192, None),
    ("llama3-8b (dense) on one 4 GiB device", "llama3-8b", [4000], 8192, None),
    ("tiny-qwen3moe on 3+4 MiB (only the output layer fits)", "tiny-qwen3moe-Q8_0.gguf", [3, 4], 512, None),
    ("tiny-qwen3moe on 6+8 MiB", "tiny-qwen3moe-Q8_0.gguf", [6, 8], 512, None),
    ("tiny-gptoss on 8+8 MiB", "tiny-gptoss-Q8_0.gguf", [8, 8], 512, None),
    ("tiny-deepseekv3 on 5+6 MiB", "tiny-deepseekv3-Q8_0.gguf", [5, 6], 512, None),
    ("tiny-mixtral on 5+6 MiB", "tiny-mixtral-Q8_0.gguf", [5, 6], 512, None),
    ("tiny-mixtral on one 4 MiB device", "tiny-mixtral-Q8_0.gguf", [4], 512, None),
]

# The scheduler's splits of a placement (ggml-backend.cpp ggml_backend_sched_split_graph, logged by
# llama.cpp as "graph: nodes = N, splits = S"): tiny-qwen3moe (4 blocks) on the two RPC devices, -ngl 99
# -ts 1,1 (blocks 0-2 on the first, block 3 and the output on the second), experts moved by -ot;
# (name, -ot value or None, -ub). RPC backends never take the CPU's weights' ops (ggml-rpc.cpp: no
# offload_op), so prompt and decode graphs split alike.
SPLITS_MODEL = "tiny-qwen3moe-Q8_0.gguf"
SPLITS_RPC1 = f"RPC0[127.0.0.1:{PORTS[1]}]"
EXPS = r"ffn_(up|down|gate)_exps"
SPLIT_CASES = [
    ("every expert on its layer's device", None, 512),
    ("block 0's experts on the CPU (first of device 0's range)", rf"blk\.0\.{EXPS}=CPU", 512),
    ("block 2's experts on the CPU (last of device 0's range)", rf"blk\.2\.{EXPS}=CPU", 512),
    ("blocks 0-1 on the CPU (first two)", rf"blk\.[01]\.{EXPS}=CPU", 512),
    ("blocks 1-2 on the CPU (last two)", rf"blk\.[12]\.{EXPS}=CPU", 512),
    ("blocks 0-1 on the CPU, -ub 1", rf"blk\.[01]\.{EXPS}=CPU", 1),
    ("blocks 1-2 on the CPU, -ub 1", rf"blk\.[12]\.{EXPS}=CPU", 1),
    ("blocks 0-2 on the CPU (the whole range)", rf"blk\.[0-2]\.{EXPS}=CPU", 512),
    ("block 3's experts on the CPU (last device, before the output)", rf"blk\.3\.{EXPS}=CPU", 512),
    ("block 2 keeps up (LAYER_FRACTION_UP to the CPU)", r"blk\.2\.ffn_(gate|down)_exps=CPU", 512),
    ("block 0 keeps up (LAYER_FRACTION_UP to the CPU)", r"blk\.0\.ffn_(gate|down)_exps=CPU", 512),
    ("block 2 keeps up and gate (LAYER_FRACTION_GATE to the CPU)", r"blk\.2\.ffn_down_exps=CPU", 512),
    ("block 0 keeps up and gate (LAYER_FRACTION_GATE to the CPU)", r"blk\.0\.ffn_down_exps=CPU", 512),
    ("block 2 keeps up, its gate and down on the next device", rf"blk\.2\.ffn_(gate|down)_exps={SPLITS_RPC1}", 512),
    ("block 0 keeps up, its gate and down on the next device", rf"blk\.0\.ffn_(gate|down)_exps={SPLITS_RPC1}", 512),
]


def sched_splits(binary, model, ot, ubatch):
    """The splits llama.cpp logs for its reserved graph with this -ot on the two RPC devices."""
    argv = [binary, "-m", model, "--rpc", ",".join(f"127.0.0.1:{port}" for port in PORTS), "-ngl", "99", "-ts", "1,1",
            *(["-ot", ot] if ot else []), "-c", "512", "-ub", str(ubatch), "-b", str(max(ubatch, 1)), "-fa", "on",
            "--fit", "off", "-n", "1", "-p", "hi", "-no-cnv", "-lv", "4"]
    # errors="replace": the tiny model's one sampled token is any bytes
    done = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=600)
    found = re.findall(r"graph: nodes = \d+, splits = (\d+)", done.stdout + done.stderr)
    if not found:
        raise SystemExit(f"no splits logged by {shlex.join(argv)}:\n{(done.stdout + done.stderr)[-2000:]}")
    return int(found[-1])


def reported_free():
    """What an RPC server's CPU backend reports free on this host: the physical memory (bytes)."""
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def model_path(model, folder):
    if model.endswith(".gguf"):
        return os.path.abspath(os.path.join(SHARED_MODELS, model))
    path = os.path.join(folder, f"{model}.gguf")
    if not os.path.exists(path):
        synth.write_model(synth.preset(model), path, sparse=True)
    return path


def fit_params(binary, model, sizes, ctx, fitc, free):
    margins = [free // MIB - size for size in sizes]
    argv = [binary, "-m", model, "--rpc", ",".join(f"127.0.0.1:{port}" for port in PORTS[:len(sizes)]),
            *(["-c", str(ctx)] if ctx is not None else []), "-fa", "on", "-fitt", ",".join(map(str, margins))]
    if fitc is not None:
        argv += ["-fitc", str(fitc)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    lines = [line for line in done.stdout.splitlines() if line.startswith("-c ")]
    return argv, margins, (lines[-1] if lines else None), done.returncode, done.stderr[-2000:]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", required=True, help="folder holding llama-fit-params and ggml-rpc-server")
    parser.add_argument("--commit", default="0c1e57098", help="the llama.cpp commit those binaries were built from")
    parser.add_argument("--write", action="store_true", help="record the flags in " + RECORD)
    options = parser.parse_args()
    free = reported_free()
    record = {"llama_cpp_commit": options.commit, "reported_free_bytes": free, "ports": list(PORTS), "cases": [],
              "splits_model": SPLITS_MODEL, "sched_splits": []}
    with rpc_servers(options.bin, PORTS):
        with tempfile.TemporaryDirectory(prefix="devicefit-fitparams-") as folder:
            for name, model, sizes, ctx, fitc in CASES:
                argv, margins, line, rc, tail = fit_params(os.path.join(options.bin, "llama-fit-params"),
                                                           model_path(model, folder), sizes, ctx, fitc, free)
                print(f"== {name}: exit {rc}\n   {line or tail}")
                record["cases"].append({"name": name, "model": model, "sizes_mib": sizes, "ctx": ctx, "fitc": fitc,
                                        "fitt_mib": margins, "exit": rc, "printed": shlex.split(line) if line else None})
            for name, ot, ubatch in SPLIT_CASES:
                splits = sched_splits(os.path.join(options.bin, "llama-completion"), model_path(SPLITS_MODEL, folder), ot, ubatch)
                print(f"== splits, {name}: {splits}")
                record["sched_splits"].append({"name": name, "ot": ot, "ubatch": ubatch, "splits": splits})
    if options.write:
        from moetools.atomic import write_json

        if os.path.exists(RECORD):  # the hand-written list of cases device-fit is known to choose otherwise
            with open(RECORD) as handle:
                known = json.load(handle).get("xfail", {})
            names = {entry["name"] for entry in record["cases"]}
            record["xfail"] = {name: why for name, why in known.items() if name in names}

        write_json(RECORD, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
