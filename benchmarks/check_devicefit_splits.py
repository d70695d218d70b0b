"""Check device-fit's per-device compute buffers on split placements against llama.cpp itself (issue 32).

    .venv/bin/python benchmarks/check_devicefit_splits.py --bin DIR_WITH_LLAMA_TOOLS [--write] [--only ID]

Starts two `ggml-rpc-server` processes on 127.0.0.1 (ports and sizes below), writes each case's synthetic
model (`moetools.synth.tiny`, seed 1) and launches `llama-completion` with the placement as a llama.cpp
user types it (`--rpc A,B -ngl N -ts a,b -c C -fa on|off -ub U`, `-nr -lv 4`, one token); reads the model,
KV and compute buffers llama.cpp logs per device (the parsing of benchmarks/check_devicefit_llama.py) and
prints device-fit's figures for the same flags beside them (`device-fit MODEL --runtime llama --rpc
HOST:PORT=SIZE ... -ngl N -ts a,b ...`). The cases: gemma4 (sliding-window and full layers on different
devices, shared-KV layers whose source layer is on another device), nemotron_h_moe (Mamba-2, attention
and MoE blocks split across devices) and qwen3next (gated delta-net and attention layers split), small
and mid-size widths. `--write` records what llama.cpp logged in tests/data/devicefit_llama_splits.json
(with the commit given by --commit) for tests/test_devicefit_splits_llama.py, which needs no llama.cpp.
moetools ships no llama.cpp code and no recipe to build it: bring your own binaries.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from moetools import synth  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_devicefit_llama import device_row, launch, rpc_servers  # noqa: E402

# check_devicefit_llama's pattern with the recurrent-state (RS) buffers, counted as KV
BUFFER = re.compile(r"(?P<device>CPU|RPC\d+\[[^\]]+\]) +(?P<kind>model|KV|RS|compute) buffer size = +(?P<mib>[\d.]+) MiB")

RECORD = "tests/data/devicefit_llama_splits.json"
RPC_PORTS = (50632, 50633)
RPC_SIZES = ("2G", "2G")  # large enough that every case loads whole; the servers offer the host's memory

GEMMA4_MID = {"n_layer": 12, "n_embd": 512, "n_head": 8, "n_head_kv": 2, "n_head_kv_swa": 4, "head": 128, "head_swa": 64,
              "n_ff": 512, "n_ff_exp": 128, "n_expert": 16, "top_k": 4, "swa": 512, "full_every": 4, "shared_kv": 4,
              "vocab": 2048, "ctx": 8192}
NEMOTRON_MID = {"pattern": "ME*EMEM*EME", "n_embd": 1024, "n_head": 8, "n_head_kv": 2, "head": 128, "n_ff_exp": 256,
                "n_ff_shexp": 512, "n_expert": 16, "top_k": 4, "ssm_heads": 16, "ssm_head": 64, "state": 64, "groups": 4,
                "vocab": 2048, "ctx": 8192}
# Nemotron 3 Nano's widths (2688 wide, 32 query / 2 KV heads of 128, 64 Mamba heads of 64, state 128, 8 groups,
# 1856-wide experts, top 6, 3712-wide shared expert) with fewer experts and layers
NEMOTRON_FULL = {"pattern": "MEM*EMEM*E", "n_embd": 2688, "n_head": 32, "n_head_kv": 2, "head": 128, "n_ff_exp": 1856,
                 "n_ff_shexp": 3712, "n_expert": 8, "top_k": 6, "ssm_heads": 64, "ssm_head": 64, "state": 128, "groups": 8,
                 "vocab": 2048, "ctx": 8192}
# Qwen3-Next-80B-A3B's widths (2048 wide, 16 query / 2 KV heads of 256, 16 key / 32 value delta-net heads of
# 128, 512-wide experts and shared expert, top 10) with fewer experts and layers
QWEN3NEXT_FULL = {"arch": "qwen3next", "n_layer": 8, "n_embd": 2048, "n_head": 16, "n_head_kv": 2, "head": 256, "rope": 64,
                  "n_ff_exp": 512, "n_ff_shexp": 512, "n_expert": 16, "top_k": 10, "k_heads": 16, "v_heads": 32,
                  "state": 128, "full_every": 4, "vocab": 2048, "ctx": 8192}
QWEN3NEXT_MID = {"arch": "qwen3next", "n_layer": 8, "n_embd": 1024, "n_head": 8, "n_head_kv": 2, "head": 128, "rope": 32, "n_ff_exp": 256,
                 "n_ff_shexp": 256, "n_expert": 16, "top_k": 4, "k_heads": 4, "v_heads": 8, "state": 64, "full_every": 4,
                 "vocab": 2048, "ctx": 8192}


def _cases():
    out = []

    def add(case_id, tiny, params, ngl, ts, ctx=4096, fa="on", ub=512):
        out.append({"id": case_id, "tiny": tiny, "params": params,
                    "flags": ["-ngl", str(ngl), "-ts", ts, "-c", str(ctx), "-fa", fa, "-ub", str(ub)]})

    small_g4 = {"n_layer": 6, "full_every": 2, "shared_kv": 2, "ctx": 8192}
    add("gemma4-small", "gemma4", small_g4, 99, "1,1")
    add("gemma4-small-fa-off", "gemma4", small_g4, 99, "1,1", fa="off")
    add("gemma4-small-partial", "gemma4", small_g4, 4, "1,1")
    for ts in ("1,1", "2,1", "1,2"):
        add(f"gemma4-mid-ts{ts.replace(',', '-')}", "gemma4", GEMMA4_MID, 99, ts)
    add("gemma4-mid-c8192", "gemma4", GEMMA4_MID, 99, "1,1", ctx=8192)
    add("gemma4-mid-fa-off", "gemma4", GEMMA4_MID, 99, "1,1", fa="off")
    add("gemma4-mid-fa-off-c8192", "gemma4", GEMMA4_MID, 99, "1,1", ctx=8192, fa="off")
    add("gemma4-mid-ub128", "gemma4", GEMMA4_MID, 99, "1,1", ub=128)
    add("gemma4-mid-partial", "gemma4", GEMMA4_MID, 8, "1,1")
    add("gemma4-mid-noshared", "gemma4", GEMMA4_MID | {"shared_kv": 0}, 99, "1,1")
    add("gemma4-mid-partial-fa-off", "gemma4", GEMMA4_MID, 8, "1,1", fa="off")
    add("gemma4-mid-partial-ub128", "gemma4", GEMMA4_MID, 10, "2,1", ub=128)

    small_nh = {"pattern": "ME*EME*E", "ctx": 8192}
    add("nemotron_h_moe-small", "nemotron_h_moe", small_nh, 99, "1,1")
    add("nemotron_h_moe-small-fa-off", "nemotron_h_moe", small_nh, 99, "1,1", fa="off")
    for ts in ("1,1", "2,1", "1,2"):
        add(f"nemotron_h_moe-mid-ts{ts.replace(',', '-')}", "nemotron_h_moe", NEMOTRON_MID, 99, ts)
    add("nemotron_h_moe-mid-c8192", "nemotron_h_moe", NEMOTRON_MID, 99, "1,1", ctx=8192)
    add("nemotron_h_moe-mid-fa-off", "nemotron_h_moe", NEMOTRON_MID, 99, "1,1", fa="off")
    add("nemotron_h_moe-mid-ub128", "nemotron_h_moe", NEMOTRON_MID, 99, "1,1", ub=128)
    add("nemotron_h_moe-mid-partial", "nemotron_h_moe", NEMOTRON_MID, 7, "1,1")

    for ts in ("1,1", "2,1"):
        add(f"nemotron_h_moe-full-ts{ts.replace(',', '-')}", "nemotron_h_moe", NEMOTRON_FULL, 99, ts)
    add("nemotron_h_moe-full-ub128", "nemotron_h_moe", NEMOTRON_FULL, 99, "1,1", ub=128)
    add("nemotron_h_moe-full-fa-off-c8192", "nemotron_h_moe", NEMOTRON_FULL, 99, "1,1", ctx=8192, fa="off")
    add("nemotron_h_moe-full-partial", "nemotron_h_moe", NEMOTRON_FULL, 6, "1,1")

    small_q = {"arch": "qwen3next", "n_layer": 8, "ctx": 8192}
    add("qwen3next-small", "qwen35moe", small_q, 99, "1,1")
    add("qwen3next-small-fa-off", "qwen35moe", small_q, 99, "1,1", fa="off")
    for ts in ("1,1", "3,1", "1,3"):
        add(f"qwen3next-mid-ts{ts.replace(',', '-')}", "qwen35moe", QWEN3NEXT_MID, 99, ts)
    add("qwen3next-mid-c8192", "qwen35moe", QWEN3NEXT_MID, 99, "1,1", ctx=8192)
    add("qwen3next-mid-fa-off", "qwen35moe", QWEN3NEXT_MID, 99, "1,1", fa="off")
    add("qwen3next-mid-ub128", "qwen35moe", QWEN3NEXT_MID, 99, "1,1", ub=128)
    add("qwen3next-mid-partial", "qwen35moe", QWEN3NEXT_MID, 5, "1,1")
    add("qwen3next-full-ts1-1", "qwen35moe", QWEN3NEXT_FULL, 99, "1,1")
    add("qwen3next-full-ts3-1", "qwen35moe", QWEN3NEXT_FULL, 99, "3,1")
    add("qwen3next-full-fa-off", "qwen35moe", QWEN3NEXT_FULL, 99, "1,1", fa="off")
    add("qwen3next-full-ub128", "qwen35moe", QWEN3NEXT_FULL, 99, "1,1", ub=128)
    add("qwen3next-full-partial", "qwen35moe", QWEN3NEXT_FULL, 6, "1,1")
    add("qwen3next-full-partial-c8192", "qwen35moe", QWEN3NEXT_FULL, 4, "2,1", ctx=8192)
    return out


CASES = _cases()


def buffers(log):
    """{device: {"model": ..., "kv": ..., "compute": ...}}, MiB with two decimals; a device's KV buffers summed
    (gemma4 logs its full-attention and its sliding-window cache apart), the last model/compute line kept."""
    result = {}
    for match in BUFFER.finditer(log):
        found = result.setdefault(match["device"], {})
        kind = {"rs": "kv"}.get(match["kind"].lower(), match["kind"].lower())
        if kind == "kv" and kind in found:
            found[kind] = f"{float(found[kind]) + float(match['mib']):.2f}"
        else:
            found[kind] = match["mib"]
    return result


def rpc_flags():
    return ["--rpc", ",".join(f"127.0.0.1:{port}" for port in RPC_PORTS)]


def device_fit_args(model_path, flags):
    args = [str(model_path), "--runtime", "llama", "--ram", "16G", "--margin", "0", "--n-outputs", "0"]
    for port, size in zip(RPC_PORTS, RPC_SIZES):
        args += ["--rpc", f"127.0.0.1:{port}={size}"]
    return [*args, *flags]


def write_case_model(case, folder):
    spec = synth.tiny(case["tiny"], **case["params"])
    spec.merges = 16  # llama.cpp's BPE loader wants merges
    return synth.write_model(spec, os.path.join(folder, f"{case['id']}.gguf"), seed=1)[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", required=True, help="folder holding llama-completion and ggml-rpc-server")
    parser.add_argument("--commit", default="0c1e57098", help="the llama.cpp commit those binaries were built from")
    parser.add_argument("--write", action="store_true", help="record the figures in " + RECORD)
    parser.add_argument("--only", action="append",
                        help="run only the cases whose id starts with this (repeatable; --write then keeps the others' records)")
    options = parser.parse_args()
    tool = lambda name: os.path.join(options.bin, name)  # noqa: E731
    record = {"llama_cpp_commit": options.commit,
              "source": "two ggml-rpc-server processes on 127.0.0.1 and the CPU; llama-completion -nr -lv 4 -n 1 -lm none "
                        "with --rpc and each case's flags, on the synth.tiny layout (params) written whole, seed 1; "
                        "model, KV and compute buffers per device, MiB with two decimals, as logged",
              "rpc": [f"127.0.0.1:{port}={size}" for port, size in zip(RPC_PORTS, RPC_SIZES)],
              "cases": []}
    cases = [c for c in CASES if not options.only or any(c["id"].startswith(o) for o in options.only)]
    with rpc_servers(options.bin, RPC_PORTS):
        with tempfile.TemporaryDirectory(prefix="devicefit-splits-") as folder:
            for case in cases:
                model = write_case_model(case, folder)
                _, log = launch(tool("llama-completion"), model, [*rpc_flags(), *case["flags"], "--fit", "off"])
                logged = buffers(log)
                fit = subprocess.run([sys.executable, "-m", "moetools", "device-fit", *device_fit_args(model, case["flags"]),
                                      "--json"], capture_output=True, text=True)
                record["cases"].append({**case, "logged": logged})
                print(f"== {case['id']}: {' '.join(case['flags'])} (device-fit exit {fit.returncode})", flush=True)
                try:
                    doc = json.loads(fit.stdout)
                except ValueError:
                    print(fit.stdout[-2000:], fit.stderr[-2000:])
                    continue
                for device in doc["devices"]:
                    print(device_row(device, logged), flush=True)
    if options.write:
        from moetools.atomic import write_json

        if options.only and os.path.exists(RECORD):  # the cases run replace theirs in the record, the rest stay
            with open(RECORD) as handle:
                kept = json.load(handle)
            ran = {case["id"]: case for case in record["cases"]}
            order = [case["id"] for case in CASES]
            merged = {case["id"]: case for case in kept["cases"]} | ran
            record["cases"] = [merged[name] for name in order if name in merged]
        write_json(RECORD, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
