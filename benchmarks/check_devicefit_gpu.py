"""Check device-fit's own --runtime llama plans on a real device: the memory llama.cpp allocates and the
margin it leaves, and the speed llama-bench measures beside the speed device-fit predicts.

    .venv/bin/python benchmarks/check_devicefit_gpu.py --bin DIR --device rpc [--device cpu] [--out FILE]

For each case: device-fit plans the model for the device(s) (`device-fit MODEL --runtime llama ... --json`;
on CUDA with `--vram auto` and the default 1 GiB margin), `llama-server` is launched with the flags the
plan emits plus `-lv 4 -nr -lm none` (no repacking and no mmap, so the CPU's model buffer is one plain
`CPU` buffer, as device-fit's CPU ledger counts it) and stopped once it listens; its log gives each device's model, KV and compute buffers (the
lines of load_tensors, llama_kv_cache and sched_reserve, summed per device: an iSWA model logs two KV
buffers) and the free memory llama.cpp reports for each device it loads onto (src/llama.cpp
llama_prepare_model_devices: "using device NAME (DESCRIPTION) (ID) - N MiB free"; the CPU's from
common/common.cpp common_params_print_info's device list, printed at -lv 4). Then llama-bench runs the
same placement (`-p 512 -n 64`, `-p 128 -n 32` on rpc/cpu) and device-fit evaluates that run's exact
placement (moetools/formats/llama_bench.py device_fit_args, `--depth 0`) for its predicted tok/s. The
record holds, per case and device, predicted vs logged buffers, the free memory reported, the margin
left (free - logged model - KV - compute) beside the margin device-fit planned, and per llama-bench test
measured vs predicted tok/s (a prompt-speed prediction is null while device-fit's JSON has none).

Devices:
- rpc: two `ggml-rpc-server` on 127.0.0.1 (ports 50240, 50241; rpc_servers of check_devicefit_llama.py)
  offering device-fit 14 MiB and 10 MiB, the tiny real models of ../shared/models, -c 1024 (the case
  fixture of tests/devicefit_llama_case.py with its 120 and 90 MiB when they are absent or with
  `--case fixture-qwen3moe`). Writes tests/data/devicefit_gpu_margin_cpu.json.
- cpu: the same models on the CPU alone (-ngl 0). Same file (one key per device).
- cuda: header-only presets (moetools.synth: sparse files, which llama.cpp reads as zeros: the weights
  are never looked at, the memory and the kernels are real) on the GPU nvidia-smi reports. Writes
  tests/data/devicefit_gpu_margin.json with the GPU's name and driver.

A one-shot CUDA run on a fresh H100 machine (llama.cpp's source in $LLAMA_SRC; builds only the sm_90
arch and only the two tools, out of the repository; about 4 minutes of build with 16 cores, then about
3 minutes of runs):

    cmake -S "$LLAMA_SRC" -B /tmp/llama-cuda -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF \
      -DLLAMA_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=Release && \
    cmake --build /tmp/llama-cuda -j16 --target llama-server llama-bench && \
    python benchmarks/check_devicefit_gpu.py --bin /tmp/llama-cuda/bin --device cuda --commit 0c1e57098

moetools ships no llama.cpp code and no recipe beyond that command: bring your own source.
"""

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.check_devicefit_llama import BUFFER, rpc_servers  # noqa: E402
from moetools import synth  # noqa: E402
from moetools.devicefit.overrides import EXPS_REGEX  # noqa: E402
from moetools.formats import llama_bench  # noqa: E402
from tests import devicefit_llama_case as case  # noqa: E402
from tests.factory import SHARED_MODELS  # noqa: E402

MiB = 1024 * 1024
RPC_PORTS = (50240, 50241)
RPC_SIZES = ("14M", "10M")
SERVER_PORT = 50245
TINY = ("tiny-qwen3moe-Q8_0.gguf", "tiny-gptoss-Q8_0.gguf", "tiny-deepseekv3-Q8_0.gguf", "tiny-mixtral-Q8_0.gguf")
CUDA_PRESETS = ("qwen3-30b-a3b", "gpt-oss-120b")
OUT = {"cuda": "tests/data/devicefit_gpu_margin.json", "rpc": "tests/data/devicefit_gpu_margin_cpu.json",
       "cpu": "tests/data/devicefit_gpu_margin_cpu.json"}
# llama-bench sizes: the GPU's as asked, smaller on the CPU (2 cores here)
BENCH = {"cuda": ("512", "64", "3"), "rpc": ("128", "32", "2"), "cpu": ("128", "32", "2")}
# src/llama.cpp llama_prepare_model_devices (0c1e57098)
DEVICE_FREE = re.compile(r"using device (\S+) \((.*?)\) \(.*?\) - (\d+) MiB free")
# common/common.cpp common_params_print_info, at -lv 4: every device, the CPU included
LISTED_FREE = re.compile(r"^.*- (\S+) +: (.*) \((\d+) MiB, (\d+) MiB free\)$", re.M)
TOLERANCE = 0.01  # buffers agree when within 1% (or the 0.005 MiB rounding of the log's two decimals)


def device_buffers(log):
    """{buffer name: {"model": MiB, "kv": MiB, "compute": MiB}} from a -lv 4 log, each kind summed over
    its lines (an iSWA model logs a KV buffer per cache)."""
    result = {}
    for match in BUFFER.finditer(log):
        kinds = result.setdefault(match["device"], {"model": 0.0, "kv": 0.0, "compute": 0.0})
        kinds[match["kind"].lower()] = round(kinds[match["kind"].lower()] + float(match["mib"]), 2)
    return result


def buffer_name(name, description):
    # llama.cpp 0c1e57098 names every RPC server's buffer type RPC0[host:port] (ggml-rpc.cpp)
    return f"RPC0[{description}]" if name.startswith("RPC") else name


def reported_free(log):
    """{buffer name: MiB free} as llama.cpp reported each device it loads onto, plus the CPU's."""
    free = {buffer_name(name, desc): int(mib) for name, desc, mib in DEVICE_FREE.findall(log)}
    for name, _desc, _total, mib in LISTED_FREE.findall(log):
        if name == "CPU":
            free["CPU"] = int(mib)
    return free


def bench_flags(server_args):
    """llama-bench's flags for a llama-server command line's placement: -ts weights joined by "/", every
    override (-ot entries, --cpu-moe, --n-cpu-moe as the patterns llama.cpp makes of them) in one -ot
    group joined by ";" in command-line order (llama-bench would apply its -ncmoe after -ot), and the
    server-only flags (-c, -np, --no-kv-unified, --fit) dropped. Raises ValueError for a flag it does not know."""
    flags, overrides, args = [], [], list(server_args)
    keep = {"-m", "--rpc", "-ngl", "-ctk", "-ctv", "-fa", "-ub", "-b", "-t", "-mg", "-sm", "-dev"}
    drop_value, drop_flag = {"-c", "-np", "--fit"}, {"--no-kv-unified", "-kvu", "--kv-unified"}
    while args:
        flag = args.pop(0)
        if flag in drop_flag:
            continue
        value = args.pop(0) if flag != "--cpu-moe" else None
        if flag in keep:
            flags += [flag, value]
        elif flag == "-ts":
            flags += ["-ts", value.replace(",", "/")]
        elif flag == "-ot":
            overrides += value.split(",")
        elif flag == "--cpu-moe":
            overrides.append(f"{EXPS_REGEX}=CPU")
        elif flag == "--n-cpu-moe":
            overrides += [rf"blk\.{i}{EXPS_REGEX}=CPU" for i in range(int(value))]
        elif flag not in drop_value:
            raise ValueError(f"llama-bench has no equivalent of {flag} {value}")
    return flags + (["-ot", ";".join(overrides)] if overrides else [])


def serve(bin_dir, args, extra):
    """The -lv 4 log of llama-server with these args, stopped once it listens (or exits)."""
    argv = [os.path.join(bin_dir, "llama-server"), *args, *extra, "-lv", "4", "--host", "127.0.0.1", "--port", str(SERVER_PORT)]
    with tempfile.TemporaryFile("w+") as log_file:
        server = subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.monotonic() + 600
            while server.poll() is None and time.monotonic() < deadline:
                log_file.seek(0)
                if "listening on http" in log_file.read():
                    break
                time.sleep(0.2)
        finally:
            server.terminate()
            server.wait(timeout=60)
        log_file.seek(0)
        log = log_file.read()
    if "listening on http" not in log:
        raise SystemExit(f"llama-server did not come up: {shlex.join(argv)}\n{log[-3000:]}")
    return log


def device_fit(args):
    done = subprocess.run([sys.executable, "-m", "moetools", "device-fit", *args, "--json"], capture_output=True, text=True)
    if done.returncode not in (0, 1):
        raise SystemExit(f"device-fit {shlex.join(args)} failed: {done.stderr.strip()}")
    return json.loads(done.stdout)


def prompt_prediction(doc):
    """device-fit's predicted prompt speed (tok/s) where its JSON holds one, else None."""
    for key in ("pp_tok_s", "prompt_tok_s", "prefill_tok_s"):
        if isinstance(doc.get(key), (int, float)):
            return doc[key]
    return None


def agrees(predicted_mib, logged_mib):
    return abs(predicted_mib - logged_mib) <= max(TOLERANCE * logged_mib, 0.005)


def device_rows(doc, logged, free):
    """Per device of the plan: predicted and logged model/KV/compute MiB, free reported, margin planned
    (device-fit's free_bytes after its division, margin included) and margin left (reported free minus
    what llama.cpp allocated)."""
    rows = []
    for device in doc["devices"]:
        got = logged.get(device["name"], {"model": 0.0, "kv": 0.0, "compute": 0.0})
        predicted = {"model": round((device["resident_bytes"] + device["expert_bytes"]) / MiB, 2),
                     "kv": round(device["kv_bytes"] / MiB, 2), "compute": round(device["compute_bytes"] / MiB, 2)}
        used = sum(got.values())
        free_mib = free.get(device["name"])
        rows.append({
            "name": device["name"], "layers": device.get("layers"), "capacity_mib": round(device["capacity_bytes"] / MiB, 2),
            "predicted_mib": predicted, "logged_mib": got,
            "agree": {kind: agrees(predicted[kind], got[kind]) for kind in predicted},
            "reported_free_mib": free_mib, "planned_margin_mib": round((device.get("margin_bytes", 0) + device["free_bytes"]) / MiB, 2),
            "margin_left_mib": None if free_mib is None else round(free_mib - used, 2)})
    return rows


def bench_rows(bin_dir, model, flags, device_args, device):
    p, n, r = BENCH[device]
    argv = [os.path.join(bin_dir, "llama-bench"), *flags, "-p", p, "-n", n, "-r", r, "--repack", "0", "-lm", "none", "-o", "json"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"llama-bench failed: {shlex.join(argv)}\n{done.stderr[-3000:]}")
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        handle.write(done.stdout)
    try:
        runs, refusals = llama_bench.read_runs(handle.name)
    finally:
        os.unlink(handle.name)
    if refusals:
        raise SystemExit(f"llama-bench printed runs moetools refused: {refusals}")
    rows = []
    for run in runs:
        placement = llama_bench.placement_of(run)
        evaluated = device_fit([model, "--runtime", "llama", *device_args, *llama_bench.device_fit_args(placement)])
        rows.append({"kind": run.kind, "n_prompt": run.n_prompt, "n_gen": run.n_gen, "n_depth": run.n_depth,
                     "measured_tok_s": round(run.avg_ts, 2), "stddev_tok_s": round(run.stddev_ts, 2),
                     "predicted_tok_s": (evaluated.get("tok_s") if run.kind == "tg" else prompt_prediction(evaluated)),
                     "build_commit": run.build_commit, "cpu_info": run.cpu_info, "gpu_info": run.gpu_info,
                     "backends": run.backends})
    return rows, argv


def run_case(bin_dir, device, name, model, device_args, context_args):
    """One case's record: device-fit's plan, what llama-server logged, what llama-bench measured."""
    doc = device_fit([model, "--runtime", "llama", *device_args, *context_args])
    if doc.get("verdict") == "unfittable":
        return {"case": name, "verdict": "unfittable", "device_fit_args": [*device_args, *context_args]}
    server_args = doc["launch"]["llama"]["args"]
    extra = ["-nr", "-lm", "none"]
    log = serve(bin_dir, server_args, extra)
    logged, free = device_buffers(log), reported_free(log)
    rows, bench_argv = bench_rows(bin_dir, model, bench_flags(server_args), device_args, device)
    return {"case": name, "verdict": doc.get("verdict"), "context": doc.get("context"),
            "device_fit_args": [*device_args, *context_args], "server_args": [*server_args[2:], *extra],
            "bench_args": bench_argv[3:], "plan_tok_s": doc.get("tok_s"), "plan_pp_tok_s": prompt_prediction(doc),
            "devices": device_rows(doc, logged, free), "bench": rows}


def gpu_facts():
    try:
        line = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30).stdout.splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        return {"device_name": None, "driver": None}
    name, driver, total = (part.strip() for part in line.split(","))
    return {"device_name": name, "driver": driver, "memory_total": total}


def cpu_name():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            return next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")), None)
    except OSError:
        return None


def models(device, folder, only=()):
    """[(case name, model path)] for a device: on rpc/cpu the tiny real models, and the case fixture when
    they are absent or asked for by name (fixture-qwen3moe)."""
    if device == "cuda":
        out = []
        for preset in CUDA_PRESETS:
            path = os.path.join(folder, f"{preset}.gguf")
            subprocess.run([sys.executable, "-m", "moetools.synth", preset, path], check=True)
            out.append((preset, path))
        return out
    found = [(name[:-5], str(SHARED_MODELS / name)) for name in TINY if (SHARED_MODELS / name).is_file()]
    if not found or "fixture-qwen3moe" in only:
        found.append(("fixture-qwen3moe", synth.write_model(case.fixture_spec(), os.path.join(folder, "fixture.gguf"), seed=1)[0]))
    return found


def device_args(device, name):
    """device-fit's device flags for a case: the GPU's free memory on CUDA; on rpc the two servers (the
    fixture, 8x larger than the tiny models, gets the sizes of tests/devicefit_llama_case.py)."""
    if device == "cuda":
        return ["--vram", "auto"]
    if device == "cpu":
        return ["--ram", "16G"]
    sizes = case.RPC_SIZES if name == "fixture-qwen3moe" else RPC_SIZES
    return [arg for port, size in zip(RPC_PORTS, sizes) for arg in ("--rpc", f"127.0.0.1:{port}={size}")] + ["--margin", "0", "--ram", "16G"]


def device_record(bin_dir, device, only):
    context_args = [] if device == "cuda" else ["-c", "1024"]
    with tempfile.TemporaryDirectory(prefix="devicefit-gpu-") as folder:
        cases = [(name, path) for name, path in models(device, folder, only) if not only or name in only]
        records = []
        for name, path in cases:
            if device == "rpc":
                with rpc_servers(bin_dir, RPC_PORTS):
                    records.append(run_case(bin_dir, device, name, path, device_args(device, name), context_args))
            else:
                records.append(run_case(bin_dir, device, name, path, device_args(device, name), context_args))
    facts = gpu_facts() if device == "cuda" else {
        "device_name": "two ggml-rpc-server on 127.0.0.1 (CPU backend)" if device == "rpc" else "CPU", "driver": None,
        # ggml-cpu.cpp ggml_backend_cpu_device_get_memory: on Linux free = total RAM ("ill-defined")
        "free_note": "the CPU backend (also behind an RPC server) reports all of RAM as free on Linux, so "
                     "margin_left_mib is RAM minus buffers, not a measured margin"}
    return {**facts, "cpu": cpu_name(), "cases": records}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", required=True, help="folder holding llama-server, llama-bench (and ggml-rpc-server for rpc)")
    parser.add_argument("--device", action="append", choices=("cuda", "rpc", "cpu"), required=True,
                        help="the device(s) to check (repeatable)")
    parser.add_argument("--commit", default="0c1e57098", help="the llama.cpp commit those binaries were built from")
    parser.add_argument("--case", action="append", default=[], help="only these cases (model stem or preset)")
    parser.add_argument("--out", help="the record to write (default tests/data/devicefit_gpu_margin[_cpu].json); "
                                      "a device already in it is replaced, the others kept")
    options = parser.parse_args(argv)
    by_file = {}
    for device in dict.fromkeys(options.device):
        by_file.setdefault(options.out or OUT[device], {})[device] = device_record(options.bin, device, options.case)
    from moetools.atomic import write_json

    for path, devices in by_file.items():
        doc = {}
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as handle:
                doc = json.load(handle)
        doc["llama_cpp_commit"] = options.commit
        doc.setdefault("devices", {}).update(devices)
        write_json(path, doc)
        for device, record in devices.items():
            for entry in record["cases"]:
                for row in entry.get("devices", []):
                    print(f"{device} {entry['case']:28} {row['name']:24} predicted {row['predicted_mib']} "
                          f"logged {row['logged_mib']} free {row['reported_free_mib']} left {row['margin_left_mib']}")
                for row in entry.get("bench", []):
                    print(f"{device} {entry['case']:28} {row['kind']} measured {row['measured_tok_s']} tok/s, "
                          f"predicted {row['predicted_tok_s']}")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
