"""A kernel whose numba cache cannot be written (a full drive, a file-size limit) still runs:
moetools.jitcache makes the save best effort, so the command goes on to its own output, whose
failure it names (tests/test_disk_full_paths.py). Real failing writes, under RLIMIT_FSIZE in a
subprocess, into an empty NUMBA_CACHE_DIR so the compile and its save happen in that process.
And a kernel's cached code is discarded when another module of its stamp changes (a helper it
calls), not only its own file, as quantize's kernels, split over several *_jit.py files, need."""

import json
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
    from moetools.quantize.kernels import engine_jit
    from moetools.tracetail import stackjit

    for module in (stackjit, *engine_jit.MODULES):
        dispatchers = {name: value for name, value in vars(module).items() if isinstance(value, Dispatcher)}
        assert dispatchers
        plain = [name for name, value in dispatchers.items() if not isinstance(value._cache, BestEffortCache)]
        assert not plain, f"{module.__name__}: {plain}"


def test_every_quantize_kernel_cache_is_keyed_to_every_jit_file():
    """Each compiled quantize kernel's cached code is fresh only under the stamp of all the package's
    *_jit.py files (they inline and call one another), and engine_jit.MODULES names every one."""
    from numba.core.dispatcher import Dispatcher

    from moetools.jitcache import source_stamp
    from moetools.quantize.kernels import common_jit, engine_jit

    folder = Path(common_jit.__file__).parent
    files = sorted(folder.glob("*_jit.py"))
    assert sorted(Path(module.__file__) for module in engine_jit.MODULES) == files
    assert common_jit.SOURCE_STAMP == source_stamp(files)
    for module in engine_jit.MODULES:
        for name, value in vars(module).items():
            if isinstance(value, Dispatcher):
                assert value._cache._cache_file._source_stamp == common_jit.SOURCE_STAMP, f"{module.__name__}.{name}"


HELPER = "import numba\n\n\n@numba.njit(cache=True)\ndef value():\n    return {value}\n"

CALLER = """
import glob, json, os
import numba
from moetools.jitcache import make_cache_writes_best_effort, source_stamp
from helpermod import value


@numba.njit(cache=True)
def kernel():
    return value()


make_cache_writes_best_effort(globals(), source_stamp(sorted(glob.glob(os.path.join(os.path.dirname(__file__), "*mod.py")))))
print(json.dumps({"value": kernel(), "hits": sum(kernel.stats.cache_hits.values())}))
"""


def test_a_kernels_cache_is_discarded_when_a_module_it_calls_changes(tmp_path):
    """A kernel whose stamp covers the helper module it calls: cached on the second run, compiled
    again (with the helper's new code) once only the helper changed. numba's own stamp covers the
    kernel's file alone, and would have run the helper's old code from the cache."""
    (tmp_path / "callermod.py").write_text(CALLER)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(tmp_path)]), NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("MOETOOLS_NO_JIT", None)
    runs = []
    for value in (1, None, 23):  # None: the files left as they are
        if value is not None:
            (tmp_path / "helpermod.py").write_text(HELPER.format(value=value))
        result = subprocess.run([sys.executable, "-c", "import callermod"], capture_output=True, text=True, timeout=300,
                                env=env)
        assert result.returncode == 0, result.stderr
        runs.append(json.loads(result.stdout))
    assert runs == [{"value": 1, "hits": 0}, {"value": 1, "hits": 1}, {"value": 23, "hits": 0}]
