"""Progress bars as a user sees them: on a terminal every long pass shows a bar with its total (so
tqdm can show an ETA); in a pipe nothing but the answer.

Real subprocesses with stderr on a real pseudo-terminal (the pty module), not a patched isatty.
"""

import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_tracetail_cli import skewed_tokens, write_tokens

ROOT = Path(__file__).resolve().parent.parent

pty = pytest.importorskip("pty", reason="needs a POSIX pseudo-terminal to show a progress bar")
fcntl = pytest.importorskip("fcntl", reason="needs a POSIX pseudo-terminal to show a progress bar")
termios = pytest.importorskip("termios", reason="needs a POSIX pseudo-terminal to show a progress bar")


def run_on_terminal(args):
    """(exit code, everything the command wrote to its terminal stderr) with stdout in a pipe."""
    leader, follower = pty.openpty()
    # an 80x24 window, as a terminal has (a fresh pty is 0x0 and tqdm draws nothing in 0 columns)
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    try:
        process = subprocess.Popen([sys.executable, "-m", "moetools", *args], cwd=ROOT, stdout=subprocess.PIPE,
                                   stderr=follower, stdin=subprocess.DEVNULL)
        os.close(follower)
        follower = None
        seen = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the command closed its end
                break
            if not chunk:
                break
            seen += chunk
        process.stdout.read()
        process.wait(timeout=120)
        return process.returncode, seen.decode("utf-8", "replace")
    finally:
        os.close(leader)
        if follower is not None:
            os.close(follower)


def bars_with_totals(text):
    """{description: total} of every tqdm bar drawn with an `n/total` counter."""
    found = {}
    for desc, total in re.findall(r"([A-Za-z][A-Za-z ]*?):\s+\d+%\|[^|]*\|\s*[\d.]+[kMG]?i?B?/([\d.]+[kMG]?i?B?)", text):
        found[desc.strip()] = total
    return found


def test_trace_tail_offline_passes_show_totals_on_a_terminal(tmp_path):
    trace = write_tokens(tmp_path / "t.trace", skewed_tokens(3000))
    code, shown = run_on_terminal(["trace-tail", str(trace), "--synth-layers", "4", "--experts", "16", "--budget-slots", "8",
                                   "--curve", "--json"])
    assert code == 0, shown
    bars = bars_with_totals(shown)
    assert {"tokenising", "policy replay", "Belady pass"} <= set(bars), shown
    assert bars["policy replay"] == "3000" and bars["Belady pass"] == "24000"


def test_trace_tail_in_a_pipe_shows_no_bar(tmp_path):
    trace = write_tokens(tmp_path / "t.trace", skewed_tokens(300))
    result = subprocess.run([sys.executable, "-m", "moetools", "trace-tail", str(trace), "--synth-layers", "4",
                             "--experts", "16", "--budget-slots", "8"], cwd=ROOT, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert "%|" not in result.stderr and "policy replay" not in result.stderr
