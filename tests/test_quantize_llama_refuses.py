"""quantize refuses what llama.cpp's loader refuses (issue 32), through the shared moetools.gguf.validate,
as device-fit and container-encode do: a missing block tensor or a wrong shape is one line, exit 2, naming
the tensor, before anything is written (not even the --install folder); every synth tiny model and every
real model of ../shared/models still quantizes."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from moetools import synth
from moetools.cli import cli
from moetools.synth.presets import BUILDERS
from tests import factory
from tests.test_validate import damaged

ROOT = Path(__file__).resolve().parent.parent


def moetools(*args, env=None):
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="100", **(env or {}))
    return subprocess.run([sys.executable, "-m", "moetools", *map(str, args)], capture_output=True, text=True,
                          timeout=300, env=env, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("damage,tensor,reason", [
    ({"drop": ["blk.1.attn_k.weight"]}, "blk.1.attn_k.weight", "missing"),
    ({"shapes": {"blk.2.ffn_up_exps.weight": (256, 64, 16)}}, "blk.2.ffn_up_exps.weight", "wrong shape"),
])
def test_quantize_install_refuses_before_writing(tmp_path, damage, tensor, reason):
    path = damaged(tmp_path / "model", "qwen3moe", **damage)
    root = tmp_path / "storage"
    result = moetools("quantize", path, "--pure", "--type", "q8_0,q4_K", "--install", "--storage-root", root, "--json")
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}: "), result.stderr
    assert f"tensor {tensor}" in lines[0] and reason in lines[0] and "llama.cpp" in lines[0], lines[0]
    assert result.stdout == "" and not root.exists()  # nothing written, not even the storage root


def test_every_synth_tiny_model_still_quantizes(tmp_path):
    failures = []
    for name in sorted(BUILDERS):
        path = synth.write_model(synth.tiny(name), tmp_path / f"{name}.gguf")[0]
        result = CliRunner().invoke(cli, ["quantize", str(path), "--pure", "--type", "q8_0",
                                          "-o", str(tmp_path / f"out-{name}"), "--json"])
        if result.exit_code != 0:
            failures.append(f"{name}: {result.stderr.strip()}")
    assert failures == []


@pytest.mark.parametrize("path", factory.all_shared_models(), ids=lambda p: p.name)
def test_the_shared_models_still_quantize(path, tmp_path):
    result = CliRunner().invoke(cli, ["quantize", str(path), "--type", "q4_K", "-o", str(tmp_path / "out"), "--json"])
    assert result.exit_code == 0, result.stderr
