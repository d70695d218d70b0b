"""Fault injection: kill `moetools cold-twin --migrate --evict --yes` at random points, in a loop.

After every SIGKILL each artifact must still exist complete and byte-identical in at least one
place (all of its files on the hot tier, or all of them in the cold folder), and no file under a
final name in the cold folder may differ from its source. Then a rerun must finish the job.
The real CLI runs in a subprocess with a test-only pause per chunk (MOETOOLS_COLDTWIN_TEST_DELAY)
and 16 KiB chunks, so the kills land inside copies, re-reads, renames and unlinks.
"""

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from moetools.coldtwin.actions import interrupted_actions
from tests.coldtwin_util import payload, run

ITERATIONS = int(os.environ.get("MOETOOLS_COLDTWIN_KILLS", "16"))
# Lines an uninterrupted run logs for make_tree: the set's migration (17), the single file's (9),
# the twinned file's eviction (3).
LOG_LINES = 29
ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX signals")


def make_tree(base, seed):
    """hot: a 3-shard set in a subfolder, a single file, and a file that already has a cold twin.

    Returns {artifact name: {relative path below hot/cold: bytes}}.
    """
    hot, cold = base / "hot tier", base / "cold tier"
    artifacts = {
        "set": {os.path.join("k2 q4", f"k2-{k:05d}-of-00003.gguf"): payload(48 * 1024 + k, seed * 10 + k) for k in (1, 2, 3)},
        "single": {"single.gguf": payload(40 * 1024, seed * 10 + 5)},
        "twinned": {"twinned.gguf": payload(40 * 1024, seed * 10 + 6)},
    }
    for files in artifacts.values():
        for relative, data in files.items():
            (hot / relative).parent.mkdir(parents=True, exist_ok=True)
            (hot / relative).write_bytes(data)
    cold.mkdir()
    (cold / "twinned.gguf").write_bytes(artifacts["twinned"]["twinned.gguf"])
    return hot, cold, artifacts


def complete_in(folder, files):
    return all((folder / relative).is_file() and (folder / relative).read_bytes() == data for relative, data in files.items())


def check_invariant(hot, cold, artifacts, when):
    for name, files in artifacts.items():
        assert complete_in(hot, files) or complete_in(cold, files), f"{name} is complete nowhere {when}"
    originals = {relative: data for files in artifacts.values() for relative, data in files.items()}
    for path in cold.rglob("*"):
        if path.is_file() and not path.name.startswith("."):
            relative = str(path.relative_to(cold))
            assert path.read_bytes() == originals[relative], f"{relative} in the cold tier differs {when}"


def logged(log):
    try:
        return log.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def run_and_kill(command, env, log, rng, log_lines):
    """Start `command` and SIGKILL it once its log holds a random number of lines (a point inside the
    run however fast the machine is), plus a random few milliseconds: inside a copy, a re-read or
    between unlinks. Returns 1 when the kill landed before the run ended, else 0."""
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    target = rng.randint(1, log_lines)
    deadline = time.monotonic() + 30
    while process.poll() is None and time.monotonic() < deadline and logged(log) < target:
        time.sleep(0.001)
    time.sleep(rng.uniform(0, 0.02))
    killed = process.poll() is None
    if killed:
        process.send_signal(signal.SIGKILL)
    process.wait()
    return int(killed)


def test_kill_during_migrate_and_evict(tmp_path, monkeypatch):
    rng = random.Random(20261129)
    monkeypatch.setenv("MOETOOLS_CACHE_DIR", str(tmp_path / "cache"))
    env = dict(os.environ, MOETOOLS_COLDTWIN_TEST_DELAY="0.002", MOETOOLS_COLDTWIN_TEST_CHUNK="16384")
    killed_mid_action = 0
    for iteration in range(ITERATIONS):
        base = tmp_path / f"run {iteration}"
        hot, cold, artifacts = make_tree(base, iteration)
        log = base / "actions.jsonl"
        command = [sys.executable, "-m", "moetools", "cold-twin", str(hot), str(cold), "--migrate", str(cold),
                   "--evict", "--yes", "--json", "--log", str(log)]
        killed_mid_action += run_and_kill(command, env, log, rng, LOG_LINES)
        check_invariant(hot, cold, artifacts, f"after the kill in iteration {iteration}")
        unfinished = interrupted_actions(str(log))
        code, doc, result = run(hot, cold, "--migrate", cold, "--evict", "--yes", "--log", log)
        assert code == 0, result.output
        for record in unfinished:  # the rerun says what it picks up
            assert f"was interrupted during {record['event'].split('-')[0]} of {record['hot']}" in result.stderr
        check_invariant(hot, cold, artifacts, f"after the rerun in iteration {iteration}")
        assert all(complete_in(cold, files) for files in artifacts.values())
        assert [path for path in hot.rglob("*") if path.is_file()] == []
        assert [path.name for path in cold.rglob(".*")] == []  # no temporary copy left behind
    assert killed_mid_action >= ITERATIONS // 2  # the kills really landed inside the actions


# Kept short in the suite; benchmarks/fault_coldtwin.py runs the same loops longer.
HF_ITERATIONS = int(os.environ.get("MOETOOLS_COLDTWIN_HF_KILLS", "4"))
HF_LOG_LINES = 30  # about what one uninterrupted run logs for make_hf_tree


def make_hf_tree(base, seed):
    """hot: a Hugging Face hub folder with one repo, two revisions sharing blobs. Returns
    (hot, cold, {(commit, path): bytes})."""
    from tests.hf_util import build_repo

    rng = random.Random(seed)
    weights = rng.randbytes(96 * 1024)
    revisions = {
        "a" * 40: {"model.safetensors": weights, "config.json": b'{"v": 1}', "t/tok.json": rng.randbytes(20000)},
        "b" * 40: {"model.safetensors": weights, "config.json": b'{"v": 2}', "extra.bin": rng.randbytes(30000)},
    }
    hot, cold = base / "hf home", base / "cold drive"
    build_repo(hot / "hub", "acme/m", revisions, {"main": "b" * 40, "old": "a" * 40})
    cold.mkdir()
    files = {(commit, relative): data for commit, entries in revisions.items() for relative, data in entries.items()}
    return hot, cold, files


def hf_complete_somewhere(hot, cold, files, when):
    snapshots = [root / "hub" / "models--acme--m" / "snapshots" for root in (hot, cold)]
    for (commit, relative), data in files.items():
        places = [folder / commit / relative for folder in snapshots]
        assert any(place.is_file() and place.read_bytes() == data for place in places), \
            f"{commit[:8]}/{relative} is complete nowhere {when}"


def test_kill_during_migrate_and_evict_of_a_hugging_face_cache(tmp_path, monkeypatch):
    pytest.importorskip("huggingface_hub", reason="huggingface_hub builds and checks the caches")
    from tests.hf_util import cache_contents

    rng = random.Random(20261201)
    monkeypatch.setenv("MOETOOLS_CACHE_DIR", str(tmp_path / "cache"))
    env = dict(os.environ, MOETOOLS_COLDTWIN_TEST_DELAY="0.002", MOETOOLS_COLDTWIN_TEST_CHUNK="16384")
    killed = 0
    for iteration in range(HF_ITERATIONS):
        base = tmp_path / f"hf run {iteration}"
        hot, cold, files = make_hf_tree(base, iteration)
        log = base / "actions.jsonl"
        command = [sys.executable, "-m", "moetools", "cold-twin", str(hot), "--migrate", str(cold),
                   "--yes", "--json", "--log", str(log)]
        killed += run_and_kill(command, env, log, rng, HF_LOG_LINES)
        hf_complete_somewhere(hot, cold, files, f"after the kill in iteration {iteration}")
        code, doc, result = run(hot, "--migrate", cold, "--yes", "--log", log)
        assert code == 0, result.output
        hf_complete_somewhere(hot, cold, files, f"after the rerun in iteration {iteration}")
        contents, _ = cache_contents(cold / "hub")
        assert contents == {("acme/m", commit, relative): data for (commit, relative), data in files.items()}
        assert [path for path in hot.rglob("*") if not path.is_dir()] == []
    assert killed >= HF_ITERATIONS // 2
