"""Check device-fit's --runtime llama plan against llama.cpp itself and record what llama.cpp logs.

    .venv/bin/python benchmarks/check_devicefit_llama.py --bin DIR_WITH_LLAMA_TOOLS [--write]

Starts two `ggml-rpc-server` processes on 127.0.0.1 (ports in tests/devicefit_llama_case.py; stopped
at the end), writes the case's fixture model, asks device-fit for the llama-server flags, launches
`llama-completion` with them (`-nr -lv 4`, no mmap, one token) and reads the model, KV and compute
buffers llama.cpp logs per device; then asks `llama-fit-params` for its flags with the same free memory
(its margins = what each server reports free minus the size device-fit was given) and launches those
too, and a full offload without overrides (pipeline parallelism). Prints the comparison; `--write` records it in tests/data/devicefit_llama_check.json (with the
llama.cpp commit given by --commit) for tests/test_devicefit_llama_devices.py, which needs no llama.cpp.
moetools ships no llama.cpp code and no recipe to build it: bring your own binaries.
"""

import argparse
import contextlib
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from moetools import synth  # noqa: E402
from tests import devicefit_llama_case as case  # noqa: E402

BUFFER = re.compile(r"(?P<device>CPU|CUDA\d+|RPC\d+\[[^\]]+\]) +(?P<kind>model|KV|compute) buffer size = +(?P<mib>[\d.]+) MiB")
FREE = re.compile(r"using device (RPC\d+) \(([^)]+)\).* - (\d+) MiB free")
MiB = 1024 * 1024


def buffers(log):
    """{device: {"model": "95.36", "kv": ..., "compute": ...}} (MiB with two decimals, as logged)."""
    result = {}
    for match in BUFFER.finditer(log):
        name = match["device"]
        result.setdefault(name, {})[match["kind"].lower()] = match["mib"]
    return result


def launch(binary, model, args):
    argv = [binary, "-m", model, *args, "-nr", "-lv", "4", "-n", "1", "-p", "hello", "-lm", "none", "-no-cnv"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    log = done.stdout + done.stderr
    found = buffers(log)
    if not found:
        raise SystemExit(f"no buffers logged by {shlex.join(argv)}:\n{log[-3000:]}")
    return found, log


@contextlib.contextmanager
def rpc_servers(bin_dir, ports):
    """ggml-rpc-server processes on 127.0.0.1 at these ports for the block's duration, stopped after it."""
    servers = [subprocess.Popen([os.path.join(bin_dir, "ggml-rpc-server"), "-H", "127.0.0.1", "-p", str(port)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for port in ports]
    try:
        time.sleep(1.0)
        yield servers
    finally:
        for server in servers:
            server.terminate()
        for server in servers:
            server.wait(timeout=10)


def device_row(device, logged):
    """One device of device-fit's plan beside what llama.cpp logged for it: model, KV and compute MiB, and
    device-fit's compute over llama.cpp's."""
    got = logged.get(device["name"], {})
    ratio = device["compute_bytes"] / MiB / float(got["compute"]) if got.get("compute") else float("nan")
    return (f"  {device['name']:24} layers {device.get('layers')!s:8} "
            f"model {(device['resident_bytes'] + device['expert_bytes']) / MiB:8.2f} vs {got.get('model', '-'):>8}  "
            f"kv {device['kv_bytes'] / MiB:7.2f} vs {got.get('kv', '0.00'):>7}  "
            f"compute {device['compute_bytes'] / MiB:8.2f} vs {got.get('compute', '-'):>8}  x{ratio:.4f}")


def without_model(args):
    out, skip = [], False
    for item in args:
        if skip:
            skip = False
            continue
        if item == "-m":
            skip = True
            continue
        out.append(item)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", required=True, help="folder holding llama-completion, llama-fit-params, ggml-rpc-server")
    parser.add_argument("--commit", default="0c1e57098", help="the llama.cpp commit those binaries were built from")
    parser.add_argument("--write", action="store_true", help="record the figures in " + case.RECORD)
    options = parser.parse_args()
    tool = lambda name: os.path.join(options.bin, name)  # noqa: E731
    with rpc_servers(options.bin, case.RPC_PORTS):
        with tempfile.TemporaryDirectory(prefix="devicefit-llama-") as folder:
            model = synth.write_model(case.fixture_spec(), os.path.join(folder, "fixture.gguf"), seed=1)[0]
            plan = subprocess.run([sys.executable, "-m", "moetools", "device-fit", *case.device_fit_args(model), "--json"],
                                  capture_output=True, text=True, check=True).stdout
            doc = json.loads(plan)
            ours_args = without_model(doc["launch"]["llama"]["args"])
            # llama-completion has no --no-kv-unified (llama-server's flag); with -np 1 it changes nothing
            ours, log = launch(tool("llama-completion"), model, [a for a in ours_args if a != "--no-kv-unified"])
            free = {f"RPC0[{endpoint}]": int(mib) for _, endpoint, mib in FREE.findall(log)}
            capacities = {device["name"]: device["capacity_bytes"] for device in doc["devices"]}
            margins = [str(free[name] - capacities[name] // MiB) for name in free]
            fit = subprocess.run([tool("llama-fit-params"), "-m", model, "--rpc", ",".join(f"127.0.0.1:{p}" for p in case.RPC_PORTS),
                                  "-c", str(case.CONTEXT), "-fa", "on", "-nr", "-fitt", ",".join(margins),
                                  "-fitc", str(case.CONTEXT)], capture_output=True, text=True, timeout=600)
            fit_line = [line for line in fit.stdout.splitlines() if line.startswith("-c ")]
            if not fit_line:
                raise SystemExit(f"llama-fit-params printed no arguments:\n{(fit.stdout + fit.stderr)[-3000:]}")
            fit_args = shlex.split(fit_line[-1])
            theirs, _ = launch(tool("llama-completion"), model,
                               ["--rpc", ",".join(f"127.0.0.1:{p}" for p in case.RPC_PORTS), *fit_args, "-fa", "on", "--fit", "off"])
            # every expert on its layer's device, no -ot: llama.cpp turns pipeline parallelism on
            full_args = ["--rpc", ",".join(f"127.0.0.1:{p}" for p in case.RPC_PORTS), "-c", str(case.CONTEXT),
                         "-ngl", "99", "-ts", case.FULL_OFFLOAD_TS, "-fa", "on", "--fit", "off"]
            full, full_log = launch(tool("llama-completion"), model, full_args)
    record = {
        "llama_cpp_commit": options.commit,
        "device_fit_args": case.device_fit_args("MODEL")[1:],
        "emitted_args": ours_args,
        "logged": ours,
        "reported_free_mib": free,
        "fit_params_args": fit_args,
        "fit_params_logged": theirs,
        "full_offload_args": full_args[2:],
        "full_offload_logged": full,
        "full_offload_pipeline": "pipeline parallelism enabled" in full_log,
    }
    ours_gpu = sum(float(v["model"]) + float(v.get("kv", 0)) for k, v in ours.items() if k != "CPU")
    theirs_gpu = sum(float(v["model"]) + float(v.get("kv", 0)) for k, v in theirs.items() if k != "CPU")
    print(json.dumps(record, indent=2))
    print(f"on the RPC devices: device-fit {ours_gpu:.2f} MiB, llama-fit-params {theirs_gpu:.2f} MiB")
    for device in doc["devices"]:
        logged = ours.get(device["name"], {})
        total = sum(float(logged.get(k, 0)) for k in ("model", "kv", "compute")) * MiB
        print(f"{device['name']}: ledger model {(device['resident_bytes'] + device['expert_bytes']) / MiB:.2f} "
              f"kv {device['kv_bytes'] / MiB:.2f} compute {device['compute_bytes'] / MiB:.2f} | logged {logged} | "
              f"logged total {total / MiB:.2f} of {device['capacity_bytes'] / MiB:.2f} MiB")
    if options.write:
        from moetools.atomic import write_json

        write_json(case.RECORD, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
