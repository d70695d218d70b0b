"""Bad input that is not a broken header byte (issue 32): special files, non-finite numbers, control
characters in names, huge strings, slow servers, a lying tensor count. Every file is damaged for real by
the test and every command answers in one line with exit 2, or in valid JSON."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import factory

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    return factory.write_tiny(tmp_path_factory.mktemp("good"), "qwen3moe", alignment=64)


def moetools(*args, timeout=60):
    """Run the real CLI in a child process (a hang fails the test at `timeout` instead of hanging it)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="100")
    return subprocess.run([sys.executable, "-m", "moetools", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env, stdin=subprocess.DEVNULL)


def one_line_error(result, *names):
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "internal error" not in lines[0], result.stderr
    for name in names:
        assert str(name) in lines[0]
    return lines[0]


# --- 1. a FIFO, device or socket is refused before it is opened ------------------------------------------

needs_mkfifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="os.mkfifo is POSIX-only (Windows has no FIFOs in the file system)")


@needs_mkfifo
@pytest.mark.parametrize("command", [
    ["inspect", "--json"],
    ["device-fit", "--vram", "8G"],
    ["quantize", "--type", "q8_0", "-o", "{out}"],
    ["container-encode", "-o", "{out}"],
])
def test_a_fifo_model_is_refused_not_read(tmp_path, command):
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    args = [command[0], fifo] + [part.replace("{out}", str(tmp_path / "out")) for part in command[1:]]
    line = one_line_error(moetools(*args, timeout=60), fifo)
    assert "FIFO" in line and "not a regular file" in line


@needs_mkfifo
def test_a_fifo_shard_of_a_split_model_is_refused(good, tmp_path):
    first = tmp_path / "m-00001-of-00002.gguf"
    first.write_bytes(good.read_bytes())
    second = tmp_path / "m-00002-of-00002.gguf"
    os.mkfifo(second)
    line = one_line_error(moetools("inspect", first, "--json"), second)
    assert "not a regular file" in line


@pytest.mark.skipif(not os.path.exists("/dev/null") or sys.platform == "win32", reason="needs the POSIX character device /dev/null")
def test_a_character_device_is_refused():
    one_line_error(moetools("inspect", "/dev/null", "--json"), "/dev/null")
