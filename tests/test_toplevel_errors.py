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

from tests.httpfixture import SilentServer

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


@pytest.mark.skipif(os.name == "nt", reason="sends SIGINT to a child and resets it with preexec_fn (POSIX)")
def test_ctrl_c_is_interrupted_exit_130(tmp_path):
    # a remote MODEL whose server never answers keeps the command waiting (a FIFO is refused at once now)
    with SilentServer() as server:
        # SIGINT back to its default in the child: a suite run from a shell's background job inherits it ignored
        process = subprocess.Popen([sys.executable, "-m", "moetools", "inspect", server.url("blocked.gguf"),
                                    "--timeout", "600"], cwd=ROOT,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        # wait until the command has sent its request and waits for the answer
        server.asked.wait(30)
        time.sleep(0.2)
        process.send_signal(signal.SIGINT)
        try:
            _, stderr = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()  # never leave it waiting after the test
            process.communicate()
            pytest.fail("still running 30 s after SIGINT")
    assert process.returncode == 130, stderr
    assert stderr.strip() == "interrupted"


def test_an_os_error_line_names_its_file_and_never_a_descriptor_number():
    from moetools.cli import error_line

    assert error_line(FileNotFoundError(2, "No such file or directory", "/m/x.gguf")) == (
        "/m/x.gguf: no such file or folder", 2)
    line, code = error_line(IsADirectoryError(21, "Is a directory", 4))  # what os.fdopen(fd) raises
    assert code == 2 and not line.startswith("4:") and "report it" in line
    line, _ = error_line(OSError(28, "No space left on device"))
    assert line == "no space left on device (the file was not named: please report it)"
