"""quantize's fixed costs: what a run imports and what numba compiles or loads for it."""

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from moetools import synth
from moetools.quantize import kernels, startup
from tests import factory

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NUMBA_INSTALLED = importlib.util.find_spec("numba") is not None

# Runs the quantize command in this process and prints, as JSON, its exit code and whether numba
# and the compiled kernels were imported: a real process, so no other test's imports count.
_PROBE = """
import json, sys
from moetools.cli import cli
try:
    cli(sys.argv[1:], standalone_mode=False)
    code = 0
except SystemExit as exit:
    code = exit.code
print(json.dumps({"code": code, "numba": "numba" in sys.modules,
                  "kernels_jit": any(name.startswith("moetools.quantize.kernels.") and name.endswith("_jit")
                                     for name in sys.modules)}), file=sys.stderr)
"""


def _probe(*args, env=None):
    run = subprocess.run([sys.executable, "-c", _PROBE, *map(str, args)], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, **(env or {})}, timeout=900)
    return json.loads(run.stderr.strip().splitlines()[-1])


def test_dry_run_and_eta_do_not_import_numba(tmp_path):
    """Planning a tier (and its ETA, which asks which engine runs) needs no numba: its import is a
    third of a small tier's start-up. The real run then does import it."""
    source = factory.write_tiny(tmp_path, "qwen3moe", n_layer=1, vocab=256,
                                types=synth.Types(resident=synth.F32, embed=synth.F32, output=synth.F32))
    env = {kernels.NO_JIT_ENV: ""}
    dry = _probe("quantize", source, "--type", "Q4_K_M", "-o", tmp_path / "tiers", "--dry-run", "--json", env=env)
    assert dry == {"code": 0, "numba": False, "kernels_jit": False}
    if NUMBA_INSTALLED:
        real = _probe("quantize", source, "--pure", "--type", "q8_0", "-o", tmp_path / "tiers", "--json", env=env)
        assert real == {"code": 0, "numba": True, "kernels_jit": True}


@pytest.mark.parametrize(("value", "expected"), [("1", "numpy"), ("0", "numba"), ("", "numba")])
def test_engine_answer_before_the_first_call_is_the_one_after(monkeypatch, value, expected):
    """engine() answers without importing numba until a kernel runs; its answer is the engine that
    then serves."""
    monkeypatch.setenv(kernels.NO_JIT_ENV, value)
    monkeypatch.setattr(kernels, "_compiled", {})
    if not NUMBA_INSTALLED:
        expected = "numpy"
    before = kernels.engine()
    assert "module" not in kernels._compiled
    kernels.quantize(np.ones((1, 32), dtype=np.float32), kernels.Q8_0, threads=1)
    assert before == kernels.engine() == expected


def test_read_only_and_writable_rows_share_one_compiled_driver(monkeypatch):
    """An F32 source reaches the kernels read-only (the file's bytes), a dequantized one writable:
    both run the one compiled specialisation (numba compiles one per argument type, so a first run
    over a model with both compiled every driver twice), as does the error pass's dequantize."""
    monkeypatch.setattr(kernels, "_compiled", {})
    monkeypatch.delenv(kernels.NO_JIT_ENV, raising=False)
    compiled = kernels.compiled_kernels()
    if compiled is None:
        pytest.skip("numba is not importable here")
    rows = (np.random.default_rng(3).standard_normal((3, 512)) * 0.1).astype(np.float32)
    frozen = rows.copy()
    frozen.flags.writeable = False
    for name, type_id in (("q8_0", kernels.Q8_0), ("q6_K", kernels.Q6_K)):
        driver = compiled.ROWS[name][0]
        before = set(driver.signatures)
        data = [kernels.quantize(values, type_id, threads=1) for values in (rows, frozen)]
        assert data[0].tobytes() == data[1].tobytes()
        added = set(driver.signatures) - before
        assert len(added) <= 1 and not any(sig[1].mutable for sig in added), added
    dequantizer = compiled._dequantize_rows
    before = set(dequantizer.signatures)
    fresh = kernels.quantize(rows, kernels.Q6_K, threads=1)  # writable bytes, as the error pass has them
    stored = fresh.copy()
    stored.flags.writeable = False  # read-only, as a K-quant source's file bytes are
    values = [kernels.dequantize(data, kernels.Q6_K, rows.shape) for data in (fresh, stored)]
    assert np.array_equal(values[0], values[1])
    added = set(dequantizer.signatures) - before
    assert len(added) <= 1 and not any(sig[1].mutable for sig in added), added


# The command's process state: the collector while it runs and after, OpenBLAS's thread count, and
# whether numba's typing of the kernels' read-only arrays imported numpy.ma.
_LEAN_PROBE = """
import gc, json, os, sys
from moetools.cli import cli
from moetools.quantize import core
seen = []
real = core.plan_tiers
def plan_tiers(*args, **kwargs):
    seen.append(gc.isenabled())
    return real(*args, **kwargs)
core.plan_tiers = plan_tiers
try:
    cli(sys.argv[1:], standalone_mode=False)
    code = 0
except SystemExit as exit:
    code = exit.code
print(json.dumps({"code": code, "collector_in_command": seen, "collector_after": gc.isenabled(),
                  "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS"), "numpy.ma": "numpy.ma" in sys.modules}),
      file=sys.stderr)
"""


def test_a_run_pauses_the_collector_keeps_blas_on_one_thread_and_never_imports_numpy_ma(tmp_path):
    """A quantize process runs with the cyclic collector paused (numba's import and cache loads make
    hundreds of collections of objects that are not garbage) and switched back on after; it asks
    OpenBLAS for one thread before numpy loads (an idle worker spins a tenth of a second), unless
    the user chose a count; and numba's typing of the kernels' read-only arrays does not import
    numpy.ma (jitload.cheap_array_typing: 35 ms of CPU)."""
    source = factory.write_tiny(tmp_path, "qwen3moe", n_layer=1, vocab=256,
                                types=synth.Types(resident=synth.F32, embed=synth.F32, output=synth.F32))
    env = {name: value for name, value in os.environ.items() if name not in startup.BLAS_THREAD_VARIABLES}
    outcomes = []
    for extra_env in ({}, {"OPENBLAS_NUM_THREADS": "3"}):
        run = subprocess.run([sys.executable, "-c", _LEAN_PROBE, "quantize", str(source), "--pure", "--type", "q6_K",
                              "-o", str(tmp_path / "tiers"), "--force", "--json"], capture_output=True, text=True,
                             cwd=ROOT, env={**env, kernels.NO_JIT_ENV: "", **extra_env}, timeout=900)
        outcomes.append(json.loads(run.stderr.strip().splitlines()[-1]))
    assert outcomes == [{"code": 0, "collector_in_command": [False], "collector_after": True, "blas_threads": "1",
                         "numpy.ma": False},
                        {"code": 0, "collector_in_command": [False], "collector_after": True, "blas_threads": "3",
                         "numpy.ma": False}]


def test_quiet_blas_leaves_a_chosen_count_and_a_loaded_numpy_alone():
    assert startup.quiet_blas(environ={}, loaded={}) is True
    for environ, loaded in (({"OMP_NUM_THREADS": "4"}, {}), ({}, {"numpy": object()})):
        chosen = dict(environ)
        assert startup.quiet_blas(environ=chosen, loaded=loaded) is False and chosen == environ


@pytest.mark.skipif(not NUMBA_INSTALLED, reason="numba is not installed")
def test_array_typing_is_numbas_and_dispatches_the_same(tmp_path):
    """jitload.array_type gives numba's typeof of plain arrays (dtype, dimensions, C/F/A layout,
    read-only); a dispatcher given cheap_array_typing types a read-only array so, runs it, and
    leaves anything else (a scalar, a masked array) to numba's own typing."""
    import types as pytypes

    import numba

    from moetools.quantize import jitload

    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    frozen = base.copy()
    frozen.flags.writeable = False
    arrays = [base, frozen, base[:, ::2], np.asfortranarray(base), np.zeros(5, dtype=np.uint8), np.zeros((), np.int64),
              np.zeros((2, 2), np.complex64), frozen[1:3]]
    for value in arrays:
        assert jitload.array_type(value) == numba.typeof(value), value.flags

    @numba.njit
    def total(values):
        return values.sum()

    @numba.njit
    def doubled(x):
        return 2 * x

    namespace = pytypes.SimpleNamespace(total=total, doubled=doubled, other=len)
    assert jitload.cheap_array_typing(namespace) == 2
    assert total(frozen) == frozen.sum() and total(base[:, ::2]) == base[:, ::2].sum()
    assert set(total.signatures) == {(numba.typeof(frozen),), (numba.typeof(base[:, ::2]),)}
    assert doubled(21) == 42
    with pytest.raises(numba.core.errors.NumbaError):
        total(np.ma.masked_array(base))


_CACHED_PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
import numba
from moetools.quantize import jitload
import probe_kernels
changed = jitload.cheap_cache_loads(probe_kernels)
sig = (numba.types.int64,)
before = jitload.is_cached(probe_kernels.twice, sig)
jitload.load_signature(probe_kernels.twice, sig)
print(json.dumps({"changed": changed, "before": before, "after": jitload.is_cached(probe_kernels.twice, sig),
                  "value": probe_kernels.twice(21), "signatures": len(probe_kernels.twice.signatures),
                  "hits": sum(probe_kernels.twice.stats.cache_hits.values()),
                  "refreshed": "numba.np.linalg" in sys.modules}))
"""


@pytest.mark.skipif(not NUMBA_INSTALLED, reason="numba is not installed")
def test_cached_machine_code_loads_by_signature_without_numbas_refresh(tmp_path):
    """jitload: the first process compiles a cached function (is_cached said it would), the second
    finds it cached and loads it by its signature, without numba's target refresh (which imports
    numba.np.linalg among every other registry), and it runs; one specialisation each time."""
    (tmp_path / "probe_kernels.py").write_text("import numba\n\n\n@numba.njit(cache=True)\ndef twice(x):\n    return 2 * x\n")
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache")}
    runs = [json.loads(subprocess.run([sys.executable, "-c", _CACHED_PROBE, str(tmp_path)], capture_output=True, text=True,
                                      cwd=ROOT, env=env, timeout=600, check=True).stdout) for _ in range(2)]
    assert runs[0] == {"changed": 1, "before": False, "after": True, "value": 42, "signatures": 1, "hits": 0,
                       "refreshed": True}
    assert runs[1] == {"changed": 1, "before": True, "after": True, "value": 42, "signatures": 1, "hits": 1,
                       "refreshed": False}


_CHANGED_PRIVATE_PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
import numba
from moetools.quantize import jitload
import probe_kernels
cache = probe_kernels.twice._cache
real = cache._load_overload
# a numba whose private call takes other arguments, and whose own public lookup knows them
cache._load_overload = lambda sig, target_context, *, new_argument: real(sig, target_context)
cache.load_overload = lambda sig, target_context: real(sig, target_context)
jitload.cheap_cache_loads(probe_kernels)
jitload.load_signature(probe_kernels.twice, (numba.types.int64,))
print(json.dumps({"value": probe_kernels.twice(21), "hits": sum(probe_kernels.twice.stats.cache_hits.values())}))
"""


@pytest.mark.skipif(not NUMBA_INSTALLED, reason="numba is not installed")
def test_a_numba_with_other_private_cache_calls_falls_back_to_its_own_cache_path(tmp_path):
    """jitload relies on numba's private cache methods (numba is not pinned above): when their calls
    differ, the cached machine code still loads, through numba's own lookup, and runs."""
    (tmp_path / "probe_kernels.py").write_text("import numba\n\n\n@numba.njit(cache=True)\ndef twice(x):\n    return 2 * x\n")
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache")}
    first = subprocess.run([sys.executable, "-c", _CACHED_PROBE, str(tmp_path)], capture_output=True, text=True,
                           cwd=ROOT, env=env, timeout=600, check=True)
    assert json.loads(first.stdout)["value"] == 42
    second = subprocess.run([sys.executable, "-c", _CHANGED_PRIVATE_PROBE, str(tmp_path)], capture_output=True,
                            text=True, cwd=ROOT, env=env, timeout=600)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout) == {"value": 42, "hits": 1}


@pytest.mark.slow
@pytest.mark.skipif(not NUMBA_INSTALLED, reason="numba is not installed")
def test_first_run_says_it_compiles_the_kernels(tmp_path):
    """With an empty numba cache a run says once, before it starts, which kernels it compiles; the
    next run (cached) says nothing of it. (Compiles Q8_0's driver and the error pass once: about 10 s
    of CPU.)"""
    source = factory.write_tiny(tmp_path, "qwen3moe", n_layer=1, vocab=256,
                                types=synth.Types(resident=synth.F32, embed=synth.F32, output=synth.F32))
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache"), kernels.NO_JIT_ENV: ""}
    notes = []
    for _ in range(2):
        run = subprocess.run([sys.executable, "-m", "moetools", "quantize", str(source), "--pure", "--type", "q8_0",
                              "-o", str(tmp_path / "tiers"), "--force", "--json"], capture_output=True, text=True,
                             cwd=ROOT, env=env, timeout=900)
        assert run.returncode == 0, run.stderr
        notes.append([line for line in run.stderr.splitlines() if "compiling" in line])
    assert notes == [["quantize: compiling the kernels for q8_0, the dequantizers (first run; numba caches them for the next runs)"], []]


_TEARDOWN_PROBE = """
import atexit, sys
atexit.register(lambda: print("teardown ran", file=sys.stderr))
from moetools.cli import main
sys.argv = ["moetools", *sys.argv[1:]]
main()
"""


def test_a_finished_quantize_process_skips_the_interpreter_teardown(tmp_path):
    """After a run the process ends without the interpreter's teardown (a fifth of a second of CPU
    once numba has loaded), its output complete and its exit code kept; a dry run (and any command
    that did not ask for it) ends normally."""
    source = factory.write_tiny(tmp_path, "qwen3moe", n_layer=1, vocab=256,
                                types=synth.Types(resident=synth.F32, embed=synth.F32, output=synth.F32))
    outcomes = []
    for extra in ([], ["--dry-run"]):
        run = subprocess.run([sys.executable, "-c", _TEARDOWN_PROBE, "quantize", str(source), "--pure", "--type", "q8_0",
                              "-o", str(tmp_path / "tiers"), "--force", "--json", *extra], capture_output=True, text=True,
                             cwd=ROOT, timeout=900)
        outcomes.append((run.returncode, "teardown ran" in run.stderr, json.loads(run.stdout)["tiers"][0]["tier"]))
    assert outcomes == [(0, False, "q8_0"), (0, True, "q8_0")]
