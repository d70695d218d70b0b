"""moetools host --calibrate (issue 30): a host's efficiencies fitted on its own llama-bench runs (the
real outputs in tests/data/llama_bench/, of the tiny models in ../shared/models), kept in the profile with
the runs, used by device-fit --host and said to be calibrated; and what it refuses."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_host import profile_doc

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "tests" / "data" / "llama_bench"
MODELS = ROOT.parent / "shared" / "models"
needs_models = pytest.mark.skipif(not (MODELS / "tiny-qwen3moe-Q8_0.gguf").exists(),
                                  reason="the tiny real models of ../shared/models are absent (CI has them)")


def moetools(*args):
    return subprocess.run([sys.executable, "-m", "moetools", *map(str, args)], capture_output=True, text=True, cwd=ROOT)


@pytest.fixture
def cpu_host(tmp_path):
    """The machine the bench files were measured on, as a profile: no GPU, 2 threads."""
    doc = profile_doc(hostname="bench-box")
    doc["gpus"] = []
    doc["cpu"].update(threads=2, physical_cores=2, logical_cpus=2)
    doc["ram"].update(total_bytes=23 * 1024**3, read_bytes_per_s=30e9)
    path = tmp_path / "host.json"
    path.write_text(json.dumps(doc))
    return path


@needs_models
def test_calibration_fits_the_hosts_runs_and_device_fit_says_so(cpu_host, tmp_path):
    out = tmp_path / "calibrated.json"
    result = moetools("host", "--profile", cpu_host, "--calibrate", BENCH / "qwen3moe_grid.json",
                      "--calibrate", BENCH / "deepseek_mixtral.json", "--calibrate", BENCH / "qwen3moe_rpc.json",
                      "--models", MODELS, "-o", out)
    assert result.returncode == 0, result.stderr
    assert "ran over RPC devices" in result.stderr  # the RPC runs are named and left out
    record = json.loads(out.read_text())["calibration"]
    assert len(record["runs"]) == 40 and {run["kind"] for run in record["runs"]} == {"tg", "pp"}
    assert set(record["efficiencies"]) == {"cpu_efficiency", "cpu_compute_efficiency", "floor_s"}  # no GPU: no GPU figure
    for kind in ("tg", "pp"):
        assert record["error_calibrated"][kind]["mean_abs"] < record["error_default"][kind]["mean_abs"]
    run = record["runs"][0]
    assert run["measured_tok_s"] > 0 and run["predicted_tok_s"] > 0 and run["bench_file"].endswith(".json")
    # device-fit --host predicts with them and says on how many runs
    plan = moetools("device-fit", MODELS / "tiny-qwen3moe-Q8_0.gguf", "--host", out, "--ctx", 4096, "--json")
    assert plan.returncode == 0, plan.stderr
    rows = {row["figure"]: row for row in json.loads(plan.stdout)["speed_assumptions"]}
    assert rows["efficiencies"]["source"] == "calibrated on 40 llama-bench run(s) of this host"
    assert f"cpu_efficiency {record['efficiencies']['cpu_efficiency']:.3g}" in rows["efficiencies"]["value"]


@needs_models
def test_half_the_runs_predict_the_other_half_better_than_the_defaults(cpu_host, tmp_path):
    runs = json.loads((BENCH / "qwen3moe_grid.json").read_text())
    half = runs[0::4] + runs[1::4]  # each setting gives a pp run then a tg run: alternate settings
    other = runs[2::4] + runs[3::4]
    (tmp_path / "half.json").write_text(json.dumps(half))
    (tmp_path / "other.json").write_text(json.dumps(other))
    fitted = tmp_path / "fitted.json"
    assert moetools("host", "--profile", cpu_host, "--calibrate", tmp_path / "half.json", "--models", MODELS,
                    "-o", fitted).returncode == 0
    from moetools.devicefit import hostplan
    from moetools.devicefit.speed import calibrate as cal
    from moetools.formats import host_profile
    from moetools.host.calibrate import cases_of

    profile = host_profile.load(fitted)
    cases, _ = cases_of([tmp_path / "other.json"], hostplan.Machine(str(fitted), profile, here=False), [MODELS], lambda _: None)
    efficiencies = profile["calibration"]["efficiencies"]
    for kind in ("tg", "pp"):
        assert cal.summary(cases, efficiencies)[kind]["mean_abs"] < cal.summary(cases)[kind]["mean_abs"]


def test_bench_output_of_another_tool_or_with_no_runs_is_exit_2(cpu_host, tmp_path):
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"results": [{"tokens_per_second": 10}]}))
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    for bench in (other, empty):
        result = moetools("host", "--profile", cpu_host, "--calibrate", bench)
        assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_runs_whose_model_is_not_found_are_named_and_none_left_is_exit_2(cpu_host, tmp_path):
    runs = json.loads((BENCH / "gptoss.jsonl").read_text().splitlines()[0])
    runs["model_filename"] = "/nowhere/missing-model.gguf"
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps([runs]))
    result = moetools("host", "--profile", cpu_host, "--calibrate", bench, "--models", tmp_path)
    assert result.returncode == 2
    assert "missing-model.gguf is not here" in result.stderr and "no llama-bench run could be used" in result.stderr


@needs_models
def test_an_efficiency_outside_its_range_is_exit_2_with_the_figure(cpu_host, tmp_path):
    runs = [run for run in json.loads((BENCH / "qwen3moe_grid.json").read_text()) if run["n_prompt"]]
    for run in runs:
        run["avg_ts"] = run["avg_ts"] * 1000  # a thousand times what the host can compute
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps(runs))
    result = moetools("host", "--profile", cpu_host, "--calibrate", bench, "--models", MODELS)
    assert result.returncode == 2 and "outside (0, 1.2]" in result.stderr and "cpu_compute_efficiency" in result.stderr


def test_profile_and_models_need_calibrate(cpu_host, tmp_path):
    result = moetools("host", "--profile", cpu_host)
    assert result.returncode == 2 and "--calibrate" in result.stderr


def test_a_profile_whose_calibration_holds_a_bad_efficiency_is_refused(cpu_host, tmp_path):
    from tests import factory

    model = factory.write_tiny(tmp_path, "qwen3moe")
    doc = json.loads(cpu_host.read_text())
    doc["calibration"] = {"efficiencies": {"cpu_efficiency": 7.0}, "runs": []}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    result = moetools("device-fit", model, "--host", bad, "--ctx", 4096, "--json")
    assert result.returncode == 2 and "calibration.efficiencies.cpu_efficiency is 7.0" in result.stderr
