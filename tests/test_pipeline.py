"""examples/pipeline.sh end to end on the fork's 12-byte trace (a real subprocess, POSIX sh)."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from moetools.formats import trace as trace_format
from moetools.tracetail.importers import tokens_to_records
from moetools.tracetail.reader import LayerMap, make_ids

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "examples", "pipeline.sh")


def run_pipeline(model, trace, out):
    if shutil.which("sh") is None:
        pytest.skip("no POSIX sh here (the example is a shell script)")
    moetools = f"{sys.executable} -m moetools"
    env = {**os.environ, "MOETOOLS": moetools, "VRAM": "8G", "OUT": str(out)}
    return subprocess.run(["sh", SCRIPT, str(model), str(trace)], capture_output=True, text=True, env=env)


def fork_trace(model, path, n_tokens=20, seed=1):
    layer_map = LayerMap.from_model(model)
    layers = sorted({layer for layer, _ in layer_map.table.values()})
    rng = np.random.default_rng(seed)
    tokens = [np.unique(np.concatenate([make_ids([layer] * 2, rng.choice(layer_map.n_expert, 2, replace=False))
                                        for layer in layers])) for _ in range(n_tokens)]
    path.write_bytes(trace_format.encode_records(*tokens_to_records(tokens, ["decode"] * n_tokens)))
    return path


def test_pipeline_runs_on_the_forks_12_byte_trace(tiny_models, tmp_path):
    model = tmp_path / "qwen3moe.gguf"
    shutil.copy(tiny_models["qwen3moe"], model)
    trace = fork_trace(model, tmp_path / "run.trace")
    result = run_pipeline(model, trace, tmp_path)
    assert result.returncode == 0, result.stderr
    curve = json.loads((tmp_path / "qwen3moe.curve.json").read_text())
    assert curve["slots"] and curve["hit"]
    assert "export GGML_MOE_PLAN_FILE=" in result.stdout
    assert json.loads((tmp_path / "qwen3moe.plan.json").read_text())["version"] == 1


def test_a_failing_step_leaves_no_curve_file(tiny_models, tmp_path):
    model = tmp_path / "qwen3moe.gguf"
    shutil.copy(tiny_models["qwen3moe"], model)
    trace = tmp_path / "other.trace"
    trace.write_bytes(trace_format.encode_records(np.arange(1, 301, dtype=np.uint64), np.zeros(300, dtype=np.uint32)))
    result = run_pipeline(model, trace, tmp_path)
    assert result.returncode == 2 and "different model" in result.stderr
    assert not (tmp_path / "qwen3moe.curve.json").exists()
    assert not [name for name in os.listdir(tmp_path) if name.endswith(".tmp")]


def test_pipeline_runs_end_to_end_on_the_real_qwen_trace(tmp_path):
    """The real routing of Qwen3-30B-A3B (../shared/traces) on the header-only preset of that model:
    curve, division, plan and both launch texts. TIER_TYPES=none skips step 1: quantizing the preset's
    945 MiB of resident holes takes about a minute of CPU, which the suite does not spend."""
    from tests import factory

    trace = factory.SHARED_TRACES / "qwen.route.csv"
    if not trace.exists():
        pytest.skip(f"real trace absent: {trace}")
    model = factory.write_preset(tmp_path, "qwen3-30b-a3b")
    if shutil.which("sh") is None:
        pytest.skip("no POSIX sh here (the example is a shell script)")
    env = {**os.environ, "MOETOOLS": f"{sys.executable} -m moetools", "VRAM": "16G", "OUT": str(tmp_path),
           "TIER_TYPES": "none"}
    result = subprocess.run(["sh", SCRIPT, str(model), str(trace)], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    curve = json.loads((tmp_path / "qwen3-30b-a3b.curve.json").read_text())
    assert curve["slots"][-1] == 3059  # the real trace's distinct (layer, expert) pairs
    plan = json.loads((tmp_path / "qwen3-30b-a3b.plan.json").read_text())
    assert plan["version"] == 1 and plan["device_budget_bytes"] > 0
    assert "export GGML_MOE_PLAN_FILE=" in result.stdout and "llama-server" in result.stdout
