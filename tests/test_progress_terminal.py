"""Progress bars as a user sees them: on a terminal every long pass shows a bar with its total (so
tqdm can show an ETA); in a pipe nothing but the answer.

Real subprocesses with stderr on a real pseudo-terminal (the pty module), not a patched isatty.
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.terminal import run_on_terminal
from tests.test_tracetail_cli import skewed_tokens, write_tokens

ROOT = Path(__file__).resolve().parent.parent

pytest.importorskip("pty", reason="needs a POSIX pseudo-terminal to show a progress bar")


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
