"""cold-twin against a concurrent second run (real processes holding the folder locks), a full disk
under its action log and hash cache (a real file size limit), and its quick-check progress bar."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.coldtwin_util import cache_folder, payload, run, trees, write  # noqa: F401 (fixtures)

ROOT = Path(__file__).resolve().parent.parent
MIB = 1024 * 1024


def cold_twin(*args, env=None, **kwargs):
    command = [sys.executable, "-m", "moetools", "cold-twin", *map(str, args)]
    options = dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    options.update(kwargs)
    return subprocess.Popen(command, cwd=ROOT, env=env or os.environ.copy(), **options)


def slow_env():
    """A pause per 16 KiB chunk: a 1 MiB migration takes seconds, long enough to meet a second run."""
    return dict(os.environ, MOETOOLS_COLDTWIN_TEST_DELAY="0.02", MOETOOLS_COLDTWIN_TEST_CHUNK="16384")


def wait_for_lock(folder, process):
    lock = Path(folder) / ".moetools.lock"
    deadline = time.monotonic() + 60
    while True:
        try:
            return json.loads(lock.read_text())
        except (OSError, ValueError):  # not there yet, or still being written
            pass
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the first run never took the lock"
        time.sleep(0.01)


def test_a_second_migration_into_the_same_cold_folder_stops_naming_the_first(trees):
    hot, cold = trees
    data = payload(MIB, 1)
    write(hot / "m" / "model.gguf", data)
    first = cold_twin(hot, "--migrate", cold, "--yes", "--json", env=slow_env())
    try:
        holder = wait_for_lock(cold, first)
        assert holder["pid"] == first.pid and holder["tool"] == "cold-twin"
        # another log, the same cold folder: the cold folder's lock alone stops it
        second = cold_twin(hot, "--migrate", cold, "--yes", "--json", "--log", hot.parent / "other.jsonl")
        _, err = second.communicate(timeout=60)
        assert second.returncode == 2
        assert err.strip().splitlines()[-1] == (
            f"error: {cold}: in use by pid {first.pid} (cold-twin) since {holder['started']}; "
            "wait for it to finish or pass --wait")
        assert first.poll() is None  # the refused run did not disturb the first
    finally:
        out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert (cold / "m" / "model.gguf").read_bytes() == data and not (hot / "m" / "model.gguf").exists()
    assert not (cold / ".moetools.lock").exists()


def test_a_second_run_on_the_same_log_waits_with_wait_and_then_finds_the_work_done(trees, tmp_path):
    hot, cold = trees
    data = payload(MIB, 2)
    write(hot / "model.gguf", data)
    log = tmp_path / "logs" / "actions.jsonl"
    first = cold_twin(hot, "--migrate", cold, "--yes", "--json", "--log", log, env=slow_env())
    try:
        wait_for_lock(log.parent, first)
        # an eviction sharing only the log: without --wait it stops, with --wait it runs after
        refused = cold_twin(hot, cold, "--evict", "--yes", "--json", "--log", log)
        _, refused_err = refused.communicate(timeout=60)
        waiting = cold_twin(hot, cold, "--evict", "--yes", "--json", "--log", log, "--wait")
        out, err = waiting.communicate(timeout=180)
    finally:
        first.communicate(timeout=180)
    assert refused.returncode == 2 and f"{log.parent}: in use by pid {first.pid} (cold-twin)" in refused_err
    assert first.returncode == 0
    assert f"in use by pid {first.pid} (cold-twin)" in err and "; waiting" in err
    assert waiting.returncode == 0, err
    assert json.loads(out)["ok"] is True  # the model was migrated and evicted by the first run
    assert (cold / "model.gguf").read_bytes() == data and not (hot / "model.gguf").exists()
    assert not (log.parent / ".moetools.lock").exists()


def test_a_killed_runs_lock_is_taken_over_by_the_next_run(trees):
    if not hasattr(signal, "SIGKILL"):
        pytest.skip("needs POSIX signals")
    hot, cold = trees
    data = payload(MIB, 3)
    write(hot / "model.gguf", data)
    first = cold_twin(hot, "--migrate", cold, "--yes", "--json", env=slow_env())
    wait_for_lock(cold, first)
    first.send_signal(signal.SIGKILL)
    first.communicate(timeout=60)
    assert (cold / ".moetools.lock").exists()  # left behind by the kill
    code, doc, result = run(hot, "--migrate", cold, "--yes")
    assert code == 0, result.output
    assert (cold / "model.gguf").read_bytes() == data and not (cold / ".moetools.lock").exists()


def _limit_file_size(limit):
    """preexec_fn: files this process writes may not grow past `limit` bytes (writes fail with
    EFBIG, as a full disk fails them with ENOSPC; SIGXFSZ ignored so the write reports it)."""
    import resource

    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


needs_rlimit = pytest.mark.skipif(not hasattr(signal, "SIGXFSZ") or sys.platform == "win32",
                                  reason="needs RLIMIT_FSIZE (POSIX)")
LIMIT = 2 * MIB


@needs_rlimit
def test_a_log_that_cannot_grow_stops_the_run_naming_the_log(trees, tmp_path):
    hot, cold = trees
    data = payload(MIB, 4)
    write(hot / "model.gguf", data)
    log = tmp_path / "actions.jsonl"
    log.write_text("\n" * (LIMIT - 100))  # a few lines from the limit: the log fills up mid-migration
    process = cold_twin(hot, "--migrate", cold, "--yes", "--json", "--log", log, preexec_fn=_limit_file_size(LIMIT))
    out, err = process.communicate(timeout=120)
    assert process.returncode == 2, err
    lines = [line for line in err.splitlines() if not line.startswith("warning:")]
    assert len(lines) == 1 and lines[0].startswith(f"error: {log}: cannot write the action log (File too large); "
                                                   "stopped before the next step of ")
    assert "Traceback" not in err and (hot / "model.gguf").read_bytes() == data  # nothing removed


@needs_rlimit
def test_a_hash_cache_that_cannot_be_saved_is_a_warning_naming_the_cache(trees, cache_folder):  # noqa: F811
    hot, cold = trees
    write(hot / "model.gguf", payload(3 * MIB // 2, 5))
    write(cold / "model.gguf", payload(3 * MIB // 2, 5))
    # a cache already past the size limit (entries of files elsewhere are kept): its rewrite fails
    entries = {f"1:{k}": {"size": 1, "mtime_ns": 1, "quick": "0" * 32, "path": f"/elsewhere/{k:08d}"}
               for k in range(LIMIT // 60)}
    cache = cache_folder / "coldtwin-hashes.json"
    write(cache, json.dumps({"version": 1, "entries": entries}).encode())
    assert cache.stat().st_size > LIMIT
    process = cold_twin(hot, cold, "--json", preexec_fn=_limit_file_size(LIMIT))
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    assert f"warning: {cache}: cannot save the hash cache ({cache}: write failed: File too large)" in err
    assert json.loads(out)["summary"]["quick_match"] == 1
    assert [name for name in os.listdir(cache_folder) if name.endswith(".tmp")] == []


def test_a_device_as_the_log_is_refused_not_read_for_ever(trees):
    if not os.path.exists(os.devnull) or sys.platform == "win32":
        pytest.skip("needs a character device")
    hot, cold = trees
    write(hot / "model.gguf", payload(1000, 6))
    code, _, result = run(hot, "--migrate", cold, "--yes", "--log", os.devnull, ok_codes=(2,))
    assert result.stderr.strip().splitlines()[-1] == f"error: {os.devnull}: the action log must be a regular file"


def test_the_quick_check_shows_a_bar_counting_models(trees, monkeypatch):
    from moetools.coldtwin import command
    from moetools.progress import progress as real_progress

    bars = []

    def recording(total=None, desc="", **kwargs):
        bar = real_progress(total=total, desc=desc, enabled=False)
        bars.append((desc, total, kwargs.get("unit"), bar))
        return bar

    monkeypatch.setattr(command, "progress", recording)
    hot, cold = trees
    for k in range(3):
        write(hot / f"m{k}.gguf", payload(3000, k))
        write(cold / f"m{k}.gguf", payload(3000, k))
    assert run(hot, cold)[0] == 0
    assert [(desc, total, unit, bar.n) for desc, total, unit, bar in bars] == [
        ("quick check: first/last MiB", 3, "model", 3)]


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pseudo-terminal")
def test_the_quick_check_bar_draws_on_a_terminal_and_not_in_a_pipe(trees):
    from tests.terminal import run_on_terminal

    hot, cold = trees
    write(hot / "m.gguf", payload(3000, 1))
    write(cold / "m.gguf", payload(3000, 1))
    code, drawn = run_on_terminal(["cold-twin", hot, cold, "--json"])
    assert code == 0
    assert "quick check: first/last MiB" in drawn and "0/1 [" in drawn  # the total, and an ETA field
    piped = cold_twin(hot, cold, "--json")
    _, err = piped.communicate(timeout=60)
    assert piped.returncode == 0 and err == ""
