"""The output-folder lock and stale-temporary clean-up, with real concurrent processes."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from moetools import atomic, locking
from moetools.errors import OutputError

ROOT = Path(__file__).resolve().parent.parent

HOLD = (
    "import sys, time; from moetools import locking\n"
    "lock = locking.acquire(sys.argv[1], tool='holder')\n"
    "print('held', flush=True)\n"
    "sys.stdin.read()\n"
    "lock.release()\n"
)


def hold(folder):
    """A real process holding `folder`'s lock until its stdin is closed (or it is killed)."""
    process = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], cwd=ROOT, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "held"
    return process


def dead_pid():
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_a_held_folder_refuses_a_second_taker_naming_the_holder(tmp_path):
    holder = hold(tmp_path)
    try:
        with pytest.raises(OutputError) as caught:
            locking.acquire(tmp_path, tool="second")
        message = str(caught.value)
        assert f"in use by pid {holder.pid} (holder) since " in message and "--wait" in message
        assert str(tmp_path) in message
    finally:
        holder.communicate("")
    assert not (tmp_path / locking.LOCK_NAME).exists()
    locking.acquire(tmp_path).release()


def test_wait_takes_the_lock_once_the_holder_ends(tmp_path):
    holder = hold(tmp_path)
    told = []
    waiter = subprocess.Popen(
        [sys.executable, "-c", "import sys; from moetools import locking\n"
         "with locking.folder_lock(sys.argv[1], wait=True, on_wait=lambda m: print(m, flush=True)):\n"
         "    print('got it', flush=True)", str(tmp_path)],
        cwd=ROOT, stdout=subprocess.PIPE, text=True)
    told.append(waiter.stdout.readline())
    assert "waiting" in told[0] and str(holder.pid) in told[0]
    holder.communicate("")
    out, _ = waiter.communicate(timeout=60)
    assert out.strip() == "got it" and waiter.returncode == 0


def test_a_killed_holder_leaves_a_stale_lock_that_is_taken_over(tmp_path):
    holder = hold(tmp_path)
    holder.send_signal(signal.SIGKILL) if hasattr(signal, "SIGKILL") else holder.kill()
    holder.wait()
    holder.stdin.close()
    holder.stdout.close()
    assert json.loads((tmp_path / locking.LOCK_NAME).read_text())["pid"] == holder.pid
    with locking.folder_lock(tmp_path, tool="next") as lock:
        assert locking.read_holder(lock.path)["pid"] == os.getpid()
    assert not (tmp_path / locking.LOCK_NAME).exists()


def test_a_lock_from_another_host_is_never_broken(tmp_path):
    (tmp_path / locking.LOCK_NAME).write_text(json.dumps(
        {"pid": dead_pid(), "host": socket.gethostname() + "-elsewhere", "started": "2026-01-01T00:00:00", "tool": "quantize"}))
    with pytest.raises(OutputError) as caught:
        locking.acquire(tmp_path)
    assert "another machine" in str(caught.value) and locking.LOCK_NAME in str(caught.value)


def test_many_racing_processes_take_the_lock_one_at_a_time(tmp_path):
    """Twelve processes each append to a log while holding the lock: no two inside at once."""
    log = tmp_path / "log"
    code = ("import sys, os, time; from moetools import locking\n"
            "with locking.folder_lock(sys.argv[1], wait=True):\n"
            "    with open(sys.argv[2], 'a') as f: f.write(f'in {os.getpid()}\\n')\n"
            "    time.sleep(0.02)\n"
            "    with open(sys.argv[2], 'a') as f: f.write(f'out {os.getpid()}\\n')\n")
    processes = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path), str(log)], cwd=ROOT) for _ in range(12)]
    assert [process.wait(timeout=120) for process in processes] == [0] * 12
    lines = log.read_text().split("\n")[:-1]
    assert len(lines) == 24
    for first, second in zip(lines[::2], lines[1::2]):
        assert first.startswith("in ") and second == "out " + first[3:]


def test_stale_temporaries_of_dead_owners_are_removed_live_ones_kept(tmp_path):
    dead = dead_pid()
    stale = tmp_path / f".tier.gguf.{dead}-abc123.tmp"
    live = tmp_path / f".tier.gguf.{os.getppid()}-def456.tmp"
    foreign = tmp_path / ".someone-elses.tmp"
    for path in (stale, live, foreign):
        path.write_bytes(b"x")
    assert locking.remove_stale_temps(tmp_path) == [stale.name]
    assert live.exists() and foreign.exists() and not stale.exists()


def test_atomic_temporaries_carry_the_owner_pid(tmp_path):
    with atomic.atomic_write(tmp_path / "out.json", "w") as handle:
        names = [p.name for p in tmp_path.iterdir()]
        handle.write("{}")
    assert len(names) == 1 and locking.temp_owner(names[0]) == os.getpid()


def test_an_atomic_write_removes_what_a_dead_writer_of_the_same_file_left(tmp_path):
    # any folder, no lock: e.g. trace-tail -o curve.json killed mid-write, then run again
    dead = dead_pid()
    stale = tmp_path / f".curve.json.{dead}-abc123.tmp"
    live = tmp_path / f".curve.json.{os.getppid()}-def456.tmp"
    other_file = tmp_path / f".other.json.{dead}-abc123.tmp"
    look_alike = tmp_path / f".curve.json.x.{dead}-abc123.tmp"  # a file named "curve.json.x": not ours to touch
    for path in (stale, live, other_file, look_alike):
        path.write_bytes(b"x")
    atomic.write_json(tmp_path / "curve.json", {})
    assert not stale.exists() and live.exists() and other_file.exists() and look_alike.exists()


# --- the tools hold their output folders ---------------------------------------------------------

def moetools(*args, wait=True):
    command = [sys.executable, "-m", "moetools", *map(str, args)]
    if not wait:
        return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("tool", ["container-encode", "quantize"])
def test_a_tool_stops_on_a_folder_in_use_and_waits_with_wait(tiny_models, tmp_path, tool):
    out = tmp_path / "out"
    args = {"container-encode": ["container-encode", tiny_models["qwen3moe"], "-o", out],
            "quantize": ["quantize", tiny_models["qwen3moe"], "--type", "q8_0", "-o", out]}[tool]
    holder = hold(out)
    try:
        refused = moetools(*args)
        assert refused.returncode == 2, refused.stderr
        assert refused.stderr.strip().splitlines() == [
            line for line in refused.stderr.strip().splitlines() if f"in use by pid {holder.pid} (holder) since" in line]
        waiter = moetools(*args, "--wait", "--json", wait=False)
        assert "waiting" in waiter.stderr.readline()
    finally:
        holder.communicate("")
    _, stderr = waiter.communicate(timeout=300)
    assert waiter.returncode == 0, stderr
    assert not (out / locking.LOCK_NAME).exists()


def test_two_encodes_of_different_models_never_mix(tiny_models, tmp_path):
    """Both start at once into one folder: one wins, the other stops (in use, or another model's
    container); the container verifies against the winner's model."""
    out = tmp_path / "c"
    models = [tiny_models["qwen3moe"], tiny_models["mixtral"]]
    runs = [moetools("container-encode", model, "-o", out, wait=False) for model in models]
    results = [(run.wait(timeout=300), run.stderr.read()) for run in runs]
    for run in runs:
        run.stdout.close(), run.stderr.close()
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2], results
    winner = models[[code for code, _ in results].index(0)]
    loser_error = [err for code, err in results if code == 2][0]
    assert "in use" in loser_error or "another model" in loser_error  # by pid, or the lock file caught mid-write
    verify = moetools("container-verify", out, "--model", winner)
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_quantize_removes_temporaries_of_killed_runs_only(tiny_models, tmp_path):
    out = tmp_path / "tiers"
    out.mkdir()
    stale = out / f".qwen3moe-q8_0.gguf.{dead_pid()}-k1ll3d.tmp"
    live = out / f".qwen3moe-q8_0.gguf.{os.getpid()}-al1ve0.tmp"
    stale.write_bytes(b"\0" * 4096)
    live.write_bytes(b"\0" * 4096)
    result = moetools("quantize", tiny_models["qwen3moe"], "--type", "q8_0", "-o", out, "--json")
    assert result.returncode == 0, result.stderr
    assert not stale.exists() and live.exists()
    assert str(stale) in result.stderr


def test_trace_tail_plan_write_removes_stale_plan_temporaries(tmp_path):
    from tests.test_tracetail_cli import skewed_tokens, write_tokens

    binary = write_tokens(tmp_path / "t.trace", skewed_tokens(10))
    stale = tmp_path / f".plan.json.{dead_pid()}-abcdef.tmp"
    stale.write_text("{")
    result = moetools("trace-tail", binary, "--synth-layers", "4", "--experts", "16", "--budget-slots", "10",
                      "--expert-bytes", "2KiB", "--plan", tmp_path / "plan.json", "--json")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "plan.json").exists() and not stale.exists()
    assert not (tmp_path / locking.LOCK_NAME).exists()
