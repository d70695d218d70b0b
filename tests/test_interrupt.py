"""Ctrl-C in every command: one line `interrupted`, exit 130, and nothing half-written left behind.

Each test runs the real `moetools` entry point in a subprocess and sends it a real SIGINT mid-run:
while it waits on an input that never comes (a FIFO, an open pipe, a probe that hangs), or while it
writes (the moment its temporary file appears in the output folder). Writers must leave no
temporary file and no final output of the interrupted run. (`trace-tail --follow` has its own
SIGINT/SIGTERM tests in test_cli_ux.py, `inspect` in test_toplevel_errors.py.)
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from moetools import synth
from tests import factory
from tests.httpfixture import SilentServer

ROOT = Path(__file__).resolve().parent.parent
WAIT_SECONDS = 120

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGINT") or os.name == "nt",
                                reason="sends a POSIX SIGINT to a running subprocess")


def default_sigint():
    """In the child before exec: SIGINT back to its default. A shell starts background jobs with SIGINT
    ignored, and Python keeps an ignored SIGINT ignored (no KeyboardInterrupt), so a suite run from a
    background job would otherwise test nothing but the timeout."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start(*args, **popen):
    return subprocess.Popen([sys.executable, "-m", "moetools", *map(str, args)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint, **popen)


def interrupt_when(process, ready, what):
    """Send SIGINT once `ready()` holds; returns (stdout, stderr). Fails if the run ended first."""
    deadline = time.monotonic() + WAIT_SECONDS
    while not ready():
        if process.poll() is not None:
            out, err = process.communicate()
            pytest.fail(f"the command ended (exit {process.returncode}) before {what}: {err.strip()[-500:]}")
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"never saw {what} in {WAIT_SECONDS} s")
        time.sleep(0.002)
    process.send_signal(signal.SIGINT)
    try:
        return process.communicate(timeout=WAIT_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()  # never leave it blocked on its FIFO after the test
        process.communicate()
        pytest.fail(f"{what}: still running {WAIT_SECONDS} s after SIGINT")


def assert_interrupted(process, stderr):
    assert process.returncode == 130, stderr
    lines = stderr.strip().splitlines()
    assert lines and lines[-1] == "interrupted", stderr
    assert "Traceback" not in stderr and "Aborted" not in stderr


def blocked_on_fifo(pid):
    """True once `pid` waits in open() of a FIFO for a writer (Linux: /proc/PID/wchan)."""
    def ready():
        try:
            with open(f"/proc/{pid}/wchan") as handle:
                return handle.read().strip() == "wait_for_partner"
        except OSError:
            return False
    return ready


def reading_a_pipe_after(pid, count):
    """True once `pid` has read at least `count` bytes (rchar counts the interpreter's own reads too)
    and waits in a read of a pipe for more (Linux: /proc/PID/io and /proc/PID/wchan)."""
    def ready():
        try:
            with open(f"/proc/{pid}/io") as handle:
                fields = dict(line.split(": ") for line in handle.read().splitlines())
            with open(f"/proc/{pid}/wchan") as handle:
                waiting = handle.read().strip()
            return int(fields["rchar"]) >= count and (waiting.endswith("pipe_read") or waiting == "pipe_wait")
        except (OSError, KeyError, ValueError):
            return False
    return ready


def temps_in(folder):
    return sorted(str(p) for p in Path(folder).rglob("*.tmp")) + sorted(str(p) for p in Path(folder).rglob(".*-tmp*"))


def temp_appears(folder):
    return lambda: bool(temps_in(folder))


linux_proc = pytest.mark.skipif(not Path("/proc/self/wchan").exists() or not hasattr(os, "mkfifo"),
                                reason="needs Linux /proc and FIFOs to know the command is waiting")


def encoded_container(tmp_path, model):
    container = tmp_path / "c"
    subprocess.run([sys.executable, "-m", "moetools", "container-encode", model, "-o", container], cwd=ROOT, check=True,
                   capture_output=True)
    return container


@pytest.fixture(scope="module")
def big_moe(tmp_path_factory):
    """A sparse (header-only) MoE whose expert and resident bytes take seconds to write out."""
    folder = tmp_path_factory.mktemp("big")
    spec = synth.tiny("mixtral", n_layer=8, n_embd=1024, n_ff=2048, n_expert=8, vocab=32000)
    return Path(synth.write_model(spec, folder / "big.gguf", sparse=True)[0])


# --- commands waiting on an input --------------------------------------------------------------------


def test_device_fit_waiting_on_its_model():
    # a remote MODEL whose server never answers (a FIFO as MODEL is refused at once: issue 32)
    with SilentServer() as server:
        process = start("device-fit", server.url("model.gguf"), "--vram", "24G", "--timeout", "600")
        _, stderr = interrupt_when(process, server.asked.is_set, "device-fit waiting on the model")
    assert_interrupted(process, stderr)


@linux_proc
def test_container_verify_refuses_a_fifo_source_at_once(tmp_path, tiny_models):
    """A FIFO as --model once kept container-verify waiting for a writer; it is refused before the open."""
    container = encoded_container(tmp_path, tiny_models["mixtral"])
    fifo = tmp_path / "source.gguf"
    os.mkfifo(fifo)
    result = subprocess.run([sys.executable, "-m", "moetools", "container-verify", str(container), "--model", str(fifo)],
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("error: ") and "not a regular file" in result.stderr


@linux_proc
def test_container_read_waiting_on_a_bank(tmp_path, tiny_models):
    container = encoded_container(tmp_path, tiny_models["mixtral"])
    bank = sorted(container.glob("experts-L*.bin"))[0]
    layer = int(bank.stem.split("L")[1])
    bank.unlink()
    os.mkfifo(bank)  # a bank on a stalled network mount: the open never returns
    process = start("container-read", container, "--layer", layer, "--expert", "0")
    _, stderr = interrupt_when(process, blocked_on_fifo(process.pid), "container-read opening the bank")
    assert_interrupted(process, stderr)


@linux_proc
def test_trace_tail_waiting_on_stdin(tmp_path):
    from tests.test_tracetail_cli import skewed_tokens, write_tokens

    half = write_tokens(tmp_path / "t.trace", skewed_tokens(50)).read_bytes()
    process = start("trace-tail", "-", "--synth-layers", "4", "--experts", "16", "--budget-slots", "8",
                    "--plan", tmp_path / "plan.json", "--expert-bytes", "1M", stdin=subprocess.PIPE)
    process.stdin.buffer.write(half)  # the raw records (the text-mode pipe would re-encode them)
    process.stdin.buffer.flush()
    _, stderr = interrupt_when(process, reading_a_pipe_after(process.pid, len(half)), "trace-tail reading the first half")
    assert_interrupted(process, stderr)
    assert not (tmp_path / "plan.json").exists() and not temps_in(tmp_path)


def test_build_env_waiting_on_a_hung_probe(tmp_path):
    """A tool on PATH that hangs when asked its version (a network file system, a licence check):
    Ctrl-C still stops build-env cleanly."""
    bin_folder = tmp_path / "bin"
    bin_folder.mkdir()
    started = tmp_path / "cmake-started"
    cmake = bin_folder / "cmake"
    cmake.write_text(f"#!/bin/sh\ntouch '{started}'\nexec sleep 60\n")
    cmake.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_folder}{os.pathsep}{os.environ.get('PATH', '')}")
    process = start("build-env", "--check", "--arch", "86", env=env)
    _, stderr = interrupt_when(process, started.exists, "build-env asking cmake its version")
    assert_interrupted(process, stderr)


# --- commands writing outputs ------------------------------------------------------------------------


def test_container_encode_mid_write(tmp_path, big_moe):
    out = tmp_path / "c"
    process = start("container-encode", big_moe, "-o", out)
    _, stderr = interrupt_when(process, lambda: out.exists() and bool(temps_in(out)),
                               "container-encode's temporary bank")
    assert_interrupted(process, stderr)
    assert not temps_in(out)
    assert not (out / "manifest.json").exists()  # the container is published only when complete


@pytest.mark.parametrize("options", [["-t", "Q8_0"], ["-t", "Q4_K_M", "--full", "--no-error"]])  # --full: experts too
def test_quantize_mid_write(tmp_path, big_moe, options):
    out = tmp_path / "tiers"
    out.mkdir()
    process = start("quantize", big_moe, *options, "-o", out)
    _, stderr = interrupt_when(process, temp_appears(out), "quantize's temporary tier")
    assert_interrupted(process, stderr)
    assert not temps_in(out)
    assert not list(out.glob("*.gguf")), "an interrupted run published a tier"


def test_cold_twin_migrate_mid_copy(tmp_path, big_moe):
    hot, cold = tmp_path / "hot", tmp_path / "cold"
    hot.mkdir()
    cold.mkdir()
    model = hot / "big.gguf"
    with open(big_moe, "rb") as source, open(model, "wb") as target:  # a real (not sparse) copy to migrate
        while chunk := source.read(16 << 20):
            target.write(chunk)
    process = start("cold-twin", hot, cold, "--migrate", cold, "--yes")
    _, stderr = interrupt_when(process, temp_appears(cold), "cold-twin's temporary copy")
    assert_interrupted(process, stderr)
    assert not temps_in(cold)
    assert not (cold / "big.gguf").exists(), "a half copy under the final name"
    assert model.stat().st_size == big_moe.stat().st_size
