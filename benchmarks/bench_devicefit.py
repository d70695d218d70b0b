"""Benchmark: `moetools device-fit --json` as a whole process on a Kimi-K2-class 8-shard header —
the fork's one-GPU division, and a 4-device upstream plan (`--runtime llama`, two GPUs and two RPC
servers plus the CPU, the context trade-off planning seven contexts).

Target: under 0.5 s per run (the header path imports neither numpy, gguf nor rich at start-up).
Baselines, run in this script: `python -c pass` (the interpreter's own start-up, the floor of any
whole-process figure) and gguf.GGUFReader opening the same 8 shards (what a tool built on gguf-py pays
before it can size anything). Also checks with `python -X importtime` that the run never imports
numpy, gguf or rich.

Then the K3 example `make run` plans (a 14-shard Kimi-K3-class header, 93 layers whose attention-residual
stack keeps every layer in the compute-buffer replay): the fork plan (the context trade-off, 8 contexts)
and the llama plan on the same 32 GB card, table and --json; and, in this process, the compute buffers of
the fork plan's contexts by the compiled replay against the plain per-context replay (the path device-fit
took before: the graph built and replayed tensor by tensor for every context). The K3 llama plan's
figure is printed against the 0.5 s target but does not decide the exit status: it is known to miss it
(each of the ~7 placements its search tries is scheduled and compiled anew, about 0.06 s of CPU each).

    .venv/bin/python benchmarks/bench_devicefit.py
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time

from moetools import synth

RUNS = 7
# The warm-up run writes the bytecode cache an installed package has (pip compiles it): without that,
# PYTHONDONTWRITEBYTECODE (set on some CI machines) makes every run compile device-fit's sources again.
ENV = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}


def children_cpu():
    """CPU seconds used by finished children (user + system); 0 where resource is missing (Windows)."""
    try:
        import resource
    except ImportError:
        return 0.0
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_process(argv, cpu=None):
    start, cpu_start = time.perf_counter(), children_cpu()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=ENV)
    if cpu is not None:
        cpu.append(children_cpu() - cpu_start)
    return time.perf_counter() - start


K3_FORK = ["--vram", "32G", "--coverage", os.path.join(os.path.dirname(__file__), "..", "examples", "k3-coverage.json")]
K3_LLAMA = ["--runtime", "llama", "--vram", "32G", "--ram", "1T"]
K3_CONTEXTS = (4096, 8192, 16384, 32768, 65536, 131072, 262144)


def k3_replays(path):
    """CPU seconds of the fork plan's compute buffers (its trade-off contexts) by the compiled replay
    and by the plain per-context replay, and whether every figure agrees."""
    from moetools.devicefit import compute, core, kv
    from moetools.gguf import open_model

    with open_model(path) as model:
        facts = core.model_facts(model)
    settings = kv.KVSettings()
    start = time.process_time()
    fast = [compute.compute_buffers(facts.graph, facts.shape, ctx, settings, alignment=compute.CUDA_ALIGNMENT).device_bytes
            for ctx in K3_CONTEXTS]
    compiled = time.process_time() - start
    start = time.process_time()
    plain = []
    for ctx in K3_CONTEXTS:
        caches = kv.kv_caches(facts.shape, ctx, settings)
        tokens, streams = compute.reserve_tokens(settings, ctx)
        graph = compute._build(facts.graph, facts.shape, caches, settings, tokens, streams, None, True,
                               outputs=compute.output_rows(settings, ctx))
        plain.append(graph.peak(compute.CUDA_ALIGNMENT))
    return compiled, time.process_time() - start, fast == plain


def median_run(argv, cpu=None):
    time_process(argv)  # warm the page cache and the bytecode cache
    return statistics.median([time_process(argv, cpu) for _ in range(RUNS)])


def k3_figures(folder):
    paths = synth.write_model(synth.preset("kimi-k3"), os.path.join(folder, "kimi-k3.gguf"), sparse=True, shards=14)
    base = [sys.executable, "-m", "moetools", "device-fit", paths[0]]
    figures = {}
    for name, args in (("fork", K3_FORK), ("llama", K3_LLAMA)):
        for shape, extra in (("table", []), ("--json", ["--json"])):
            cpu = []
            figures[name, shape] = (median_run(base + args + extra, cpu), statistics.median(cpu) if cpu else float("nan"))
    return figures, k3_replays(paths[0])


def main():
    with tempfile.TemporaryDirectory(prefix="bench-devicefit-") as folder:
        paths = synth.write_model(synth.preset("kimi-k2"), os.path.join(folder, "k2.gguf"), sparse=True, shards=8)
        argv = [sys.executable, "-m", "moetools", "device-fit", paths[0], "--vram", "32G", "--json"]
        time_process(argv)  # warm the page cache and the bytecode cache
        runs = [time_process(argv) for _ in range(RUNS)]
        median = statistics.median(runs)
        four = [sys.executable, "-m", "moetools", "device-fit", paths[0], "--runtime", "llama", "--vram", "24G,24G",
                "--rpc", "10.0.0.2:50052=24G", "--rpc", "10.0.0.3:50052=24G", "--ram", "512G", "--json"]
        time_process(four)
        four_cpu = []
        four_median = statistics.median([time_process(four, four_cpu) for _ in range(RUNS)])
        bare = statistics.median([time_process([sys.executable, "-c", "pass"]) for _ in range(RUNS)])

        imports = "".join(subprocess.run([sys.executable, "-X", "importtime", *command[1:]], check=True, env=ENV,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True).stderr
                          for command in (argv, four))
        heavy = sorted({line.rsplit("|", 1)[-1].strip() for line in imports.splitlines()
                        if line.rsplit("|", 1)[-1].strip().split(".")[0] in ("numpy", "gguf", "rich")})

        k3, (compiled, plain, agree) = k3_figures(folder)

        start = time.perf_counter()
        from gguf import GGUFReader

        for path in paths:
            GGUFReader(path)
        baseline = time.perf_counter() - start

    print(f"device-fit --json, whole process, K2-class 8 shards: median {median:.3f} s over {RUNS} runs "
          f"(min {min(runs):.3f}, max {max(runs):.3f}); target < 0.5 s: {'ok' if median < 0.5 else 'MISSED'}")
    print(f"4-device upstream plan (--runtime llama, 2 GPUs + 2 RPC + CPU, 7 contexts): median {four_median:.3f} s; "
          f"target < 0.5 s: {'ok' if four_median < 0.5 else 'MISSED'}")
    print(f"4-device plan CPU time (user + system, what a loaded machine's wall clock hides): median "
          f"{statistics.median(four_cpu) if four_cpu else float('nan'):.3f} s")
    print(f"baseline python -c pass: {bare:.3f} s; the 4-device plan costs {four_median / bare:.1f}x the bare interpreter, "
          f"the fork division {median / bare:.1f}x; load average {os.getloadavg()[0]:.2f}")
    print(f"baseline gguf.GGUFReader on the same 8 shards (import included): {baseline:.2f} s")
    print(f"ratio: device-fit is {baseline / median:.0f}x faster than opening the shards with gguf.GGUFReader")
    print(f"heavy modules imported on the header path: {', '.join(heavy) if heavy else 'none'}")
    for (name, shape), (wall, cpu) in k3.items():
        print(f"K3 example, {name} plan ({shape}), whole process: median {wall:.3f} s ({wall / bare:.1f}x python -c pass), "
              f"CPU {cpu:.3f} s; target < 0.5 s: {'ok' if wall < 0.5 else 'MISSED'}")
    print(f"K3 fork plan's {len(K3_CONTEXTS)} compute buffers in-process (CPU): compiled replay {compiled:.3f} s, "
          f"plain per-context replay {plain:.3f} s — {plain / compiled:.1f}x; figures equal: {'yes' if agree else 'NO'}")
    print(f"load average at the end: {' '.join(f'{value:.2f}' for value in os.getloadavg())}")
    k3_ok = all(wall < 0.5 for (name, _), (wall, _) in k3.items() if name == "fork") and agree
    return 0 if median < 0.5 and four_median < 0.5 and not heavy and k3_ok else 1


if __name__ == "__main__":
    sys.exit(main())
