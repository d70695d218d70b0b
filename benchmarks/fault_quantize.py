"""The quantize kill -9 loop: `python benchmarks/fault_quantize.py [N]` (default 40 kills).

Each round starts `moetools quantize` (a split source, `--full --keep-split`, two tiers: 8 files
and a staging journal), kills it with SIGKILL after a random delay, and checks what a reader sees:
no shard of a split set under its final name unless the whole set is there or a journal says it is
being published, and no manifest a reader lists without its complete GGUF. Then it reruns the same
command, which must exit 0 and leave every output byte-identical to an uninterrupted run, with no
staging folder and no temporary left. Prints the counts per outcome. Not on Windows (SIGKILL).
"""

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from moetools import synth  # noqa: E402
from moetools.formats import quantize_staging  # noqa: E402
from moetools.formats.resident_manifest import find_manifests  # noqa: E402
from tests import factory  # noqa: E402

ARGS = ["--full", "--keep-split", "--pure", "--type", "q4_K,q8_0"]


def command(source, out):
    return [sys.executable, "-m", "moetools", "quantize", str(source), *ARGS, "-o", str(out)]


def visible(out):
    return {p.name: p.read_bytes() for p in Path(out).iterdir() if not p.name.startswith(".")}


def check_after_kill(out, reference):
    """The reader's view after a kill; returns the outcome's name, raises AssertionError on a violation."""
    if not Path(out).exists():
        return "nothing"
    pending = quantize_staging.pending_names(out)
    files = visible(out)
    for name, data in files.items():
        assert name in reference, f"unexpected file {name}"
        assert data == reference[name], f"{name} is visible but not complete"
    shown = {name for name in files if name not in pending}
    for tier in ("q4_K", "q8_0"):
        shards = {name for name in reference if f"-{tier}-full-" in name}
        assert not (shown & shards) or shards <= set(files), f"{tier}: part of a split set visible without a journal"
    assert find_manifests(out) == []  # --full writes no manifests; a reader lists nothing pending
    if pending:
        return "publishing"
    return "complete" if files else "nothing visible"


def main():
    kills = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    rng = random.Random(0)
    folder = Path(tempfile.mkdtemp(prefix="fault-quantize-"))
    try:
        types = synth.Types(resident=synth.F16, embed=synth.BF16, output=synth.F32)
        source = factory.write_tiny(folder / "src", "qwen3moe", types=types, n_layer=4, vocab=512, n_embd=256, shards=4)
        ref = folder / "ref"
        start = time.perf_counter()
        subprocess.run(command(source, ref), check=True, capture_output=True)
        full_s = time.perf_counter() - start
        reference = visible(ref)
        print(f"uninterrupted run {full_s:.2f} s, {len(reference)} files; load average {os.getloadavg()[0]:.1f}")
        outcomes = {}
        for round_number in range(kills):
            out = folder / f"out{round_number}"
            process = subprocess.Popen(command(source, out), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(rng.uniform(0, full_s * 1.1))
            process.send_signal(signal.SIGKILL)
            process.wait()
            outcome = check_after_kill(out, reference) if process.returncode == -signal.SIGKILL else "finished first"
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            rerun = subprocess.run(command(source, out), capture_output=True, text=True)
            if outcome == "finished first" or (outcome == "complete" and "already exists" in rerun.stderr):
                pass  # the first run had published everything: the rerun rightly refuses without --force
            else:
                assert rerun.returncode == 0, f"round {round_number} ({outcome}): {rerun.stderr}"
            assert visible(out) == reference, f"round {round_number}: outputs differ from the uninterrupted run"
            leftovers = [p.name for p in out.iterdir() if p.name.startswith(".") and p.name != ".moetools.lock"]
            assert not leftovers, f"round {round_number}: left {leftovers}"
            shutil.rmtree(out)
        print(f"{kills} kills: " + ", ".join(f"{name} {count}" for name, count in sorted(outcomes.items())) +
              "; every rerun complete and byte-identical, nothing left behind")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
