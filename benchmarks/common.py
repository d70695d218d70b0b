"""Shared benchmark plumbing: timing a whole process, a scratch folder, printing ratios."""

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The console script pip installs, as a user runs it (falls back to `python -m moetools`).
_SCRIPT = Path(sys.executable).with_name("moetools")
MOETOOLS = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "moetools"]


def time_process(argv, repeat=5, env=None):
    """Median wall time (s) of running `argv` to completion, stdout discarded."""
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def scratch(prefix):
    """A temporary folder on the same disk as the repository (removed by the caller's `with`)."""
    root = Path(__file__).resolve().parent.parent
    return tempfile.TemporaryDirectory(prefix=prefix, dir=os.environ.get("MOETOOLS_BENCH_DIR", root))


def report(name, ours, baseline, unit="s", higher_is_better=False):
    """Print one figure as `name: ours vs baseline -> ratio x`."""
    ratio = ours / baseline if higher_is_better else baseline / ours
    print(f"{name}: {ours:.4g} {unit} vs baseline {baseline:.4g} {unit} -> {ratio:.1f}x")
    return ratio


def drop_cache(*paths):
    """Drop files' clean pages from the page cache (fsync first; needs no privileges)."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
