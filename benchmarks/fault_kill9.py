"""kill -9 loops for the tools that write outputs: `python benchmarks/fault_kill9.py [N] [TOOL...]`.

TOOL is container-encode, trace-tail or cold-twin (default: all; N kills each, default 40); quantize's
loop, which also checks its all-or-nothing publish and resume, is benchmarks/fault_quantize.py.
Each iteration starts the real command in a subprocess, SIGKILLs it at a random point inside the
time an uninterrupted run of the same command takes (measured first, in the same script run), then
checks what the kill left, reruns the same command and checks the result:

- container-encode: after the kill the folder holds no manifest, or a container that
  `container-verify` passes; after the rerun `container-verify --model` passes; no temporaries.
- trace-tail --plan: after the kill the plan file is the old plan or a new one, valid JSON either
  way; after the rerun no `.plan.json.*.tmp` is left.
- cold-twin: tests/test_coldtwin_faults.py's loops (plain folders and a Hugging Face cache) with N kills.

A failed check is printed and counted; exit 1 when any failed. Prints the load average.
"""

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from moetools import synth  # noqa: E402

MOETOOLS = [sys.executable, "-m", "moetools"]
# trace-tail's compiled replay is cached by the baseline run, before any kill.
ENVS = {}


def run(argv, **kwargs):
    env = ENVS.get(argv[0], os.environ)
    return subprocess.run(MOETOOLS + argv, cwd=ROOT, env=env, capture_output=True, text=True, **kwargs)


def temporaries(folder):
    return sorted(str(path.relative_to(folder)) for path in Path(folder).rglob(".*") if path.name.endswith(".tmp"))


def timed(argv):
    start = time.perf_counter()
    result = run(argv)
    if result.returncode != 0:
        raise SystemExit(f"uninterrupted run failed: {' '.join(argv)}\n{result.stderr}")
    return time.perf_counter() - start


def kill_at(argv, delay):
    """Start `argv`, SIGKILL it after `delay` seconds; True when the kill landed (it was still running)."""
    process = subprocess.Popen(MOETOOLS + argv, cwd=ROOT, env=ENVS.get(argv[0], os.environ), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + delay
    while process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    landed = process.poll() is None
    if landed:
        process.send_signal(signal.SIGKILL)
    process.wait()
    return landed


class Loop:
    """One tool's loop: `setup(base)` -> argv, `after_kill(base)` and `after_rerun(base)` -> [problems]."""

    name = ""

    def __init__(self, work):
        self.work = Path(work)
        self.model = Path(synth.write_model(synth.tiny("qwen3moe"), self.work / "model.gguf")[0])

    def setup(self, base):
        raise NotImplementedError

    def after_kill(self, base):
        return []

    def after_rerun(self, base, result):
        return [] if result.returncode == 0 else [f"rerun exit {result.returncode}: {result.stderr.strip()[-300:]}"]


class ContainerLoop(Loop):
    name = "container-encode"

    def setup(self, base):
        return ["container-encode", str(self.model), "-o", str(base / "container"), "--json"]

    def after_kill(self, base):
        folder = base / "container"
        if not (folder / "manifest.json").exists():
            return []
        verify = run(["container-verify", str(folder), "--json"])
        return [] if verify.returncode == 0 else [f"manifest present but container-verify exit {verify.returncode}: "
                                                  f"{verify.stderr.strip()[-300:]}"]

    def after_rerun(self, base, result):
        problems = super().after_rerun(base, result)
        verify = run(["container-verify", str(base / "container"), "--model", str(self.model), "--json"])
        if verify.returncode != 0:
            problems.append(f"container-verify after the rerun: exit {verify.returncode} {verify.stderr.strip()[-300:]}")
        problems += [f"temporary left: {name}" for name in temporaries(base / "container")]
        return problems


class TraceTailLoop(Loop):
    name = "trace-tail --plan"

    def __init__(self, work):
        super().__init__(work)
        rng = random.Random(7)
        self.trace = self.work / "trace.jsonl"
        with open(self.trace, "w") as handle:
            for token in range(100):
                for layer in range(8):
                    experts = rng.sample(range(64), 4)
                    handle.write(json.dumps({"token": token, "layer": layer, "experts": experts}) + "\n")

    def plan_path(self, base):
        return base / "plans" / "plan.json"

    def setup(self, base):
        plan = self.plan_path(base)
        argv = [str(self.trace), "--experts", "64", "--budget-slots", "64", "--expert-bytes", "2KiB", "--plan", str(plan), "--json"]
        if not plan.exists():  # an old plan in place: the kill must leave it or the new one, never a torn file
            plan.parent.mkdir(parents=True, exist_ok=True)
            first = run(["trace-tail", *argv])
            if first.returncode != 0:
                raise SystemExit(f"trace-tail failed: {first.stderr}")
        return ["trace-tail", *argv]

    def after_kill(self, base):
        try:
            doc = json.loads(self.plan_path(base).read_text())
        except (OSError, ValueError) as err:
            return [f"plan unreadable after the kill: {err}"]
        return [] if isinstance(doc, dict) and "pin_list" in doc else ["plan after the kill has no pin_list"]

    def after_rerun(self, base, result):
        return super().after_rerun(base, result) + self.after_kill(base) + [
            f"temporary left: {name}" for name in temporaries(base / "plans")]


LOOPS = {"container-encode": ContainerLoop, "trace-tail": TraceTailLoop}


def run_loop(loop_class, kills, seed):
    rng = random.Random(seed)
    failures, landed = [], 0
    with tempfile.TemporaryDirectory(prefix="fault-kill9-", dir=os.environ.get("MOETOOLS_BENCH_DIR")) as work:
        loop = loop_class(work)
        baseline_base = Path(work) / "baseline"
        baseline_base.mkdir()
        baseline = timed(loop.setup(baseline_base))
        for iteration in range(kills):
            base = Path(work) / f"run{iteration}"
            base.mkdir()
            argv = loop.setup(base)
            landed += kill_at(argv, rng.uniform(0.05, 1.0) * baseline)
            problems = [f"after the kill: {p}" for p in loop.after_kill(base)]
            rerun = run(argv)
            problems += [f"after the rerun: {p}" for p in loop.after_rerun(base, rerun)]
            failures += [f"{loop.name} iteration {iteration}: {p}" for p in problems]
    print(f"{loop_class.name}: {kills} kills ({landed} landed inside the run, uninterrupted run {baseline:.2f} s), "
          f"{len(failures)} failed checks")
    for line in failures[:20]:
        print("  FAIL", line)
    return failures


def run_coldtwin(kills):
    env = dict(os.environ, MOETOOLS_COLDTWIN_KILLS=str(kills), MOETOOLS_COLDTWIN_HF_KILLS=str(kills))
    code = subprocess.call([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_coldtwin_faults.py"],
                           cwd=ROOT, env=env)
    print(f"cold-twin: {kills} kills per loop (plain folders, Hugging Face cache): "
          f"{'passed' if code == 0 else 'FAILED'}")
    return [] if code == 0 else ["cold-twin loops failed"]


def main():
    args = sys.argv[1:]
    kills = int(args.pop(0)) if args and args[0].isdigit() else 40
    tools = args or ["container-encode", "trace-tail", "cold-twin"]
    failures = []
    for index, tool in enumerate(tools):
        if tool == "cold-twin":
            failures += run_coldtwin(kills)
        elif tool in LOOPS:
            failures += run_loop(LOOPS[tool], kills, seed=index + 1)
        else:
            raise SystemExit(f"unknown tool {tool!r}: one of {', '.join([*LOOPS, 'cold-twin'])}")
    load = " ".join(f"{value:.1f}" for value in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"
    print(f"{len(failures)} failed checks; load average {load}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
