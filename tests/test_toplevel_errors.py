"""The top of every command: a bug is one line and exit 2 with a hint to report it; Ctrl-C is exit 130.

Real subprocesses: the `moetools` entry point as users run it. The bug is a real exception from a real
command module registered beside the others (tests/boom_command.py), not a patched internal.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

RUN_WITH_BOOM = (
    "import sys; from moetools import cli; "
    "cli.COMMANDS['boom'] = 'tests.boom_command:boom_command'; "
    "sys.argv = ['moetools', 'boom'] + sys.argv[1:]; cli.main()"
)


def run_boom(*args):
    return subprocess.run([sys.executable, "-c", RUN_WITH_BOOM, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("kind", ["index", "memory", "zero"])
def test_an_unexpected_exception_is_one_line_and_exit_2(kind):
    result = run_boom(kind)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert lines[0].startswith("error: internal error: ")
    assert "please report it" in lines[0] and "boom_command.py" in lines[0]


def test_the_line_names_the_exception_type():
    assert "IndexError: list index out of range" in run_boom("index").stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs a FIFO to block a real command on its input")
def test_ctrl_c_is_interrupted_exit_130(tmp_path):
    fifo = tmp_path / "blocked.gguf"
    os.mkfifo(fifo)
    # SIGINT back to its default in the child: a suite run from a shell's background job inherits it ignored
    process = subprocess.Popen([sys.executable, "-m", "moetools", "inspect", str(fifo)], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    # wait until the command is blocked opening the FIFO (elsewhere than Linux: give it up to 30 s)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not _blocked_on(process.pid, fifo):
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    try:
        _, stderr = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()  # never leave it blocked on its FIFO after the test
        process.communicate()
        pytest.fail("still running 30 s after SIGINT")
    assert process.returncode == 130, stderr
    assert stderr.strip() == "interrupted"


def _blocked_on(pid, path):
    """True once `pid` waits in open() of the FIFO `path` for a writer (Linux: /proc/PID/wchan)."""
    try:
        with open(f"/proc/{pid}/wchan") as handle:
            return handle.read().strip() == "wait_for_partner"
    except OSError:
        return False


def test_an_os_error_line_names_its_file_and_never_a_descriptor_number():
    from moetools.cli import error_line

    assert error_line(FileNotFoundError(2, "No such file or directory", "/m/x.gguf")) == (
        "/m/x.gguf: no such file or folder", 2)
    line, code = error_line(IsADirectoryError(21, "Is a directory", 4))  # what os.fdopen(fd) raises
    assert code == 2 and not line.startswith("4:") and "report it" in line
    line, _ = error_line(OSError(28, "No space left on device"))
    assert line == "no space left on device (the file was not named: please report it)"
