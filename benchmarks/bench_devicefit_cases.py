"""Benchmark: every `device-fit --json` and `inspect --json` invocation the run-time target covers, as a whole
process, this tree against a baseline commit in the same script run (figures as ratios).

Cases: the header-only presets (`python -m moetools.synth PRESET`) with the fork runtime and with
`--runtime llama` on one GPU, a multi-device llama plan (2 GPUs + 2 RPC servers + CPU), the Kimi-K2-class
8-shard header, the Kimi-K3-class 14-shard header (`make run`'s plan with its coverage curve, auto and fork alone, and the
llama plan), `--draft MODEL` plans and `--spec-type draft-mtp` plans; `inspect` on the same files.
Target: every case at most 0.4 s of CPU (user + system of the whole process) at a low load.

Both trees run from their sources (PYTHONPATH) with PYTHONDONTWRITEBYTECODE unset, so each case's
warm-up run writes the bytecode cache an installed package has; the baseline is a `git worktree` of
REF in a temporary folder. Runs alternate between the two trees so load changes hit both alike. Each
case's --json output is also compared between the trees (device-fit's plan must not change).

    .venv/bin/python benchmarks/bench_devicefit_cases.py [--against REF] [--runs N] [--only SUBSTRING,...]
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_devicefit import children_cpu  # noqa: E402

from moetools import synth  # noqa: E402

TARGET_CPU_S = 0.4
PRESETS = ("deepseek-v3", "deepseek-v3.2", "gemma-4-26b-a4b", "glm-4.5-air", "gpt-oss-120b", "llama3-8b", "minimax-m2",
           "nemotron-3-nano-30b-a3b", "qwen3-235b", "qwen3-30b-a3b", "qwen3-next-80b-a3b", "qwen3.5-35b-a3b")
LLAMA_ONE = ["--runtime", "llama", "--vram", "32G", "--ram", "1T"]
LLAMA_FOUR = ["--runtime", "llama", "--vram", "24G,24G", "--rpc", "10.0.0.2:50052=24G", "--rpc", "10.0.0.3:50052=24G",
              "--ram", "512G"]
FORK = ["--runtime", "fork"]  # the default is auto (llama.cpp, with the fork beside it where it applies) since 0.3
MTP_PRESETS = ("deepseek-v3.2", "glm-4.5-air", "qwen3.5-35b-a3b", "qwen3-next-80b-a3b")
DRAFTS = (("qwen3-235b", "qwen3-30b-a3b"), ("qwen3-next-80b-a3b", "qwen3-30b-a3b"), ("kimi-k3", "kimi-k2"))


def write_models(folder):
    """Header-only models: every preset (one file), K2 in 8 shards, K3 in 14; name -> first file."""
    paths = {name: str(synth.write_model(synth.preset(name), Path(folder) / f"{name}.gguf", sparse=True)[0])
             for name in PRESETS}
    paths["kimi-k2"] = str(synth.write_model(synth.preset("kimi-k2"), Path(folder) / "k2.gguf", sparse=True, shards=8)[0])
    paths["kimi-k3"] = str(synth.write_model(synth.preset("kimi-k3"), Path(folder) / "k3.gguf", sparse=True, shards=14)[0])
    return paths


def cases(paths):
    """(name, argv after `python -m moetools`) of every case."""
    coverage = str(ROOT / "examples" / "k3-coverage.json")
    out = []
    for name in ("kimi-k2", "kimi-k3", *PRESETS):
        out.append((f"inspect {name}", ["inspect", paths[name], "--json"]))
    out.append(("fork kimi-k2 (8 shards)", ["device-fit", paths["kimi-k2"], *FORK, "--vram", "32G", "--json"]))
    out.append(("llama 4-device kimi-k2", ["device-fit", paths["kimi-k2"], *LLAMA_FOUR, "--json"]))
    out.append(("fork kimi-k3 + coverage", ["device-fit", paths["kimi-k3"], *FORK, "--vram", "32G", "--coverage", coverage, "--json"]))
    out.append(("auto kimi-k3 + coverage (make run)", ["device-fit", paths["kimi-k3"], "--vram", "32G", "--coverage", coverage, "--json"]))
    out.append(("llama kimi-k3", ["device-fit", paths["kimi-k3"], "--runtime", "llama", "--vram", "32G", "--ram", "1T", "--json"]))
    out.append(("llama 4-device kimi-k3", ["device-fit", paths["kimi-k3"], *LLAMA_FOUR, "--json"]))
    for name in PRESETS:
        out.append((f"fork {name}", ["device-fit", paths[name], *FORK, "--vram", "32G", "--json"]))
        out.append((f"llama {name}", ["device-fit", paths[name], *LLAMA_ONE, "--json"]))
    for name in ("deepseek-v3", "qwen3-235b", "gpt-oss-120b", "qwen3.5-35b-a3b"):
        out.append((f"llama 4-device {name}", ["device-fit", paths[name], *LLAMA_FOUR, "--json"]))
    for name in MTP_PRESETS:
        out.append((f"draft-mtp {name}", ["device-fit", paths[name], *LLAMA_ONE, "--spec-type", "draft-mtp", "--json"]))
    for target, draft in DRAFTS:
        out.append((f"--draft {target} <- {draft}", ["device-fit", paths[target], *LLAMA_ONE, "--draft", paths[draft], "--json"]))
    return out


def run_once(tree, argv):
    """(wall s, CPU s, stdout) of one whole `python -m moetools ...` process from `tree`'s sources."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(tree)
    start, cpu_start = time.perf_counter(), children_cpu()
    # one working folder for both trees: the fork's launch holds absolute paths made from it (the trace file)
    result = subprocess.run([sys.executable, "-m", "moetools", *argv], env=env, cwd=tempfile.gettempdir(), stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    return time.perf_counter() - start, children_cpu() - cpu_start, result.stdout, result.returncode


def baseline_tree(ref, folder):
    tree = Path(folder) / "baseline"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), ref], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return tree


def measure(trees, argv, runs):
    """Per tree: (median wall, median CPU, stdout of the warm-up run, exit code)."""
    warm = {label: run_once(tree, argv) for label, tree in trees.items()}  # writes __pycache__, warms the page cache
    samples = {label: [] for label in trees}
    for _ in range(runs):
        for label, tree in trees.items():
            wall, cpu, _, _ = run_once(tree, argv)
            samples[label].append((wall, cpu))
    return {label: (statistics.median(s[0] for s in samples[label]), statistics.median(s[1] for s in samples[label]),
                    warm[label][2], warm[label][3]) for label in trees}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", default="main", help="baseline commit (default main)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", default="", help="only cases whose name contains one of these (comma-separated)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-devicefit-cases-") as folder:
        paths = write_models(folder)
        trees = {"new": ROOT}
        if args.against != "none":
            trees["old"] = baseline_tree(args.against, folder)
        try:
            print(f"load average at the start: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
            print(f"{'case':44} {'old CPU':>8} {'new CPU':>8} {'ratio':>6} {'old wall':>8} {'new wall':>8}  same-output  target")
            over, differ = [], []
            for name, case_argv in cases(paths):
                if args.only and not any(part in name for part in args.only.split(",")):
                    continue
                figures = measure(trees, case_argv, args.runs)
                new_wall, new_cpu, new_out, new_rc = figures["new"]
                old_wall, old_cpu, old_out, old_rc = figures.get("old", (float("nan"),) * 2 + (new_out, new_rc))
                same = new_out == old_out and new_rc == old_rc
                if not same:
                    differ.append(name)
                if new_cpu > TARGET_CPU_S:
                    over.append(name)
                print(f"{name:44} {old_cpu:8.3f} {new_cpu:8.3f} {old_cpu / new_cpu:6.2f} {old_wall:8.3f} {new_wall:8.3f}  "
                      f"{'yes' if same else 'NO':11}  {'ok' if new_cpu <= TARGET_CPU_S else 'OVER'}", flush=True)
            print(f"load average at the end: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
            print(f"cases over {TARGET_CPU_S} s CPU: {', '.join(over) if over else 'none'}")
            print(f"cases whose output differs from the baseline: {', '.join(differ) if differ else 'none'}")
        finally:
            if "old" in trees:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(trees["old"])],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
