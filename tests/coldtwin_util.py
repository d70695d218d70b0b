"""Helpers shared by the cold-twin tests: small trees of model files with known bytes."""

import json
import os
import random
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from moetools.cli import cli

MIB = 1024 * 1024


def payload(size, seed):
    """`size` random bytes (never an all-zero tail) from `seed`."""
    return random.Random(seed).randbytes(size)


def write(path, data):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def write_shards(folder, prefix, sizes, seed=0, ext="gguf"):
    """Write NAME-0000k-of-0000N.<ext> shards of random bytes; returns their paths."""
    count = len(sizes)
    return [write(Path(folder) / f"{prefix}-{k:05d}-of-{count:05d}.{ext}", payload(size, seed * 100 + k))
            for k, size in enumerate(sizes, start=1)]


def copy_tree(src, dst):
    """Copy the files of folder `src` into `dst` (a cold twin), keeping times."""
    dst = Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    for item in Path(src).iterdir():
        if item.is_file():
            shutil.copy2(item, dst / item.name)
    return dst


def run(*args, ok_codes=(0, 1)):
    """Invoke `moetools cold-twin ARGS --json`; returns (exit code, parsed JSON or None, result)."""
    result = CliRunner().invoke(cli, ["cold-twin", *map(str, args), "--json"], catch_exceptions=False)
    doc = json.loads(result.stdout) if result.stdout.strip() else None
    assert result.exit_code in ok_codes, (result.exit_code, result.output)
    return result.exit_code, doc, result


def by_name(doc):
    """{basename of the hot path: artifact entry}."""
    return {os.path.basename(entry["hot"]): entry for entry in doc["artifacts"]}


@pytest.fixture(autouse=True)
def cache_folder(tmp_path, monkeypatch):
    """Every test gets its own cache folder (hash cache, action log), never the user's."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("MOETOOLS_CACHE_DIR", str(folder))
    return folder


@pytest.fixture
def trees(tmp_path):
    """(hot, cold) folders with spaces in their names; cold is one level below a parent folder."""
    hot, cold = tmp_path / "nvme models", tmp_path / "hdd cold" / "models"
    hot.mkdir()
    cold.mkdir(parents=True)
    return hot, cold
