"""A kernel whose numba cache cannot be written (a full drive, a file-size limit) still runs:
moetools.jitcache makes the save best effort, so the command goes on to its own output, whose
failure it names (tests/test_disk_full_paths.py). Real failing writes, under RLIMIT_FSIZE in a
subprocess, into an empty NUMBA_CACHE_DIR so the compile and its save happen in that process."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("numba", reason="the compiled kernels need numba")
resource = pytest.importorskip("resource", reason="needs POSIX RLIMIT_FSIZE to make writes fail for real")

ROOT = Path(__file__).resolve().parent.parent

KERNEL = """
import numba
from moetools.jitcache import best_effort


def total(n):
    value = 0
    for i in range(n):
        value += i
    return value


kernel = {wrap}(numba.njit(cache=True)(total))
print(kernel(10))
"""


def run_limited(tmp, wrap, limit=40):
    """Run a module compiling one cached kernel (wrapped by `wrap`) with writes limited to `limit` bytes."""
    (tmp / "kernelmod.py").write_text(KERNEL.format(wrap=wrap))

    def limit_writes():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(tmp)]), NUMBA_CACHE_DIR=str(tmp / "cache"))
    env.pop("MOETOOLS_NO_JIT", None)
    return subprocess.run([sys.executable, "-c", "import kernelmod"], capture_output=True, text=True, timeout=300,
                          preexec_fn=limit_writes, env=env)


def test_a_kernel_runs_when_its_cache_cannot_be_written(tmp_path):
    result = run_limited(tmp_path, "best_effort")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["45"]
    leftovers = [path.name for path in (tmp_path / "cache").rglob("*") if path.is_file() and path.stat().st_size]
    assert not any(".tmp." in name for name in leftovers), leftovers  # numba's temporary files removed


def test_the_cache_is_still_written_when_it_can_be(tmp_path):
    result = run_limited(tmp_path, "best_effort", limit=resource.RLIM_INFINITY)
    assert result.returncode == 0, result.stderr
    assert list((tmp_path / "cache").rglob("*.nbi")) and list((tmp_path / "cache").rglob("*.nbc"))


def test_every_compiled_kernel_of_trace_tail_and_quantize_saves_best_effort():
    from numba.core.dispatcher import Dispatcher

    from moetools.jitcache import BestEffortCache
    from moetools.quantize import kernels_jit
    from moetools.tracetail import stackjit

    for module in (stackjit, kernels_jit):
        dispatchers = {name: value for name, value in vars(module).items() if isinstance(value, Dispatcher)}
        assert dispatchers
        plain = [name for name, value in dispatchers.items() if not isinstance(value._cache, BestEffortCache)]
        assert not plain, f"{module.__name__}: {plain}"
