"""Content identity of a container's source (issue #15): the manifest records, per source tensor, the
shard's size and mtime; a rerun keeps a bank only when its source bytes are unchanged (stat identity,
else the records rebuilt from the source must hash to the sidecar's digests); container-verify checks
the container against its source wherever the manifest says the source is."""

import json
import os
import subprocess
import sys
from pathlib import Path

from moetools import locking
from tests import factory
from tests.test_container import encode, run

ROOT = Path(__file__).resolve().parent.parent


def requantize_in_place(path, seed):
    """Overwrite `path` with the same architecture and layout but other tensor bytes (a re-quantized
    model: names, types and shapes, hence the structural fingerprint, are unchanged)."""
    before = os.stat(path)
    fresh = factory.write_tiny(Path(path).parent / f"seed{seed}", "qwen3moe", name=Path(path).stem, seed=seed)
    os.replace(fresh, path)
    after = os.stat(path)
    assert after.st_size == before.st_size
    return after


def test_a_requantized_model_with_the_same_layout_rewrites_every_bank(tmp_path):
    model = factory.write_tiny(tmp_path / "m", "qwen3moe", seed=1)
    out = tmp_path / "c"
    first = encode(model, out)
    assert first["banks_written"] == [0, 1, 2, 3]
    requantize_in_place(model, seed=2)
    again = encode(model, out)
    assert again["banks_skipped"] == [] and again["banks_written"] == [0, 1, 2, 3]
    assert run("container-verify", out, "--model", model).exit_code == 0


def test_a_touched_but_identical_source_keeps_its_banks_after_rehashing(tmp_path):
    model = factory.write_tiny(tmp_path / "m", "qwen3moe", seed=1)
    out = tmp_path / "c"
    encode(model, out)
    stat = os.stat(model)
    os.utime(model, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))
    again = encode(model, out)
    assert again["banks_skipped"] == [0, 1, 2, 3] and again["banks_written"] == []
    assert again["bytes_read"] > 0  # the source was read to prove the bytes unchanged
    third = encode(model, out)  # the manifest now holds the new mtime: no source read at all
    assert third["banks_skipped"] == [0, 1, 2, 3] and third["bytes_read"] == 0


def test_the_manifest_records_each_source_tensor_identity(tmp_path):
    model = factory.write_tiny(tmp_path / "m", "qwen3moe", seed=1)
    out = tmp_path / "c"
    encode(model, out)
    doc = json.loads((out / "manifest.json").read_text())
    assert doc["source"]["path"] == os.path.abspath(model)
    stat = os.stat(model)
    for bank in doc["banks"]:
        names = [entry["tensor"] for entry in bank["source"]]
        assert names == [f"blk.{bank['layer']}.ffn_{m}_exps.weight" for m in ("gate", "up", "down")]
        for entry in bank["source"]:
            assert (entry["file"], entry["size"], entry["mtime_ns"]) == (os.path.basename(model), stat.st_size, stat.st_mtime_ns)
            assert entry["bytes"] > 0 and entry["offset"] > 0


def test_verify_without_model_checks_the_source_where_the_manifest_says(tmp_path):
    model = factory.write_tiny(tmp_path / "m", "qwen3moe", seed=1)
    out = tmp_path / "c"
    encode(model, out)
    ok = run("container-verify", out, "--json")
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.output)["checked_against"] == os.path.abspath(model)
    requantize_in_place(model, seed=2)
    stale = run("container-verify", out, "--json")
    assert stale.exit_code == 1, stale.output
    doc = json.loads(stale.output)
    assert doc["checked_against"] == os.path.abspath(model)
    assert {p["field"] for p in doc["problems"]} >= {"gate", "up", "down"}
    # --no-source: the container alone (headers, padding, sidecars) is still intact
    alone = run("container-verify", out, "--json", "--no-source")
    assert alone.exit_code == 0 and json.loads(alone.output)["checked_against"] is None
    # a source that has moved away: the container alone is checked, and the output says so
    os.rename(model, tmp_path / "moved.gguf")
    moved = run("container-verify", out, "--json")
    assert moved.exit_code == 0, moved.output
    doc = json.loads(moved.output)
    assert doc["source_missing"] == os.path.abspath(model) and doc["checked_against"] is None
    from moetools.container.command import verify_notes
    assert f"source not found at {os.path.abspath(model)}" in verify_notes(doc)[0]


def moetools(*args):
    command = [sys.executable, "-m", "moetools", *[str(arg) for arg in args]]
    return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_two_encodes_of_the_same_model_released_at_once_never_delete_each_others_files(tmp_path):
    """Both runs wait on a lock this test holds, so they contend for the folder at the same moment
    when it is released: one encodes, the other then keeps every bank; neither sees its files vanish."""
    model = factory.write_tiny(tmp_path / "m", "qwen3moe", seed=1)
    out = tmp_path / "c"
    out.mkdir()
    lock = locking.acquire(out, tool="test")
    runs = [moetools("container-encode", model, "-o", out, "--wait", "--json") for _ in range(2)]
    for process in runs:  # both are running and waiting before the folder is released
        assert "waiting" in process.stderr.readline()
    lock.release()
    results = []
    for process in runs:
        stdout, stderr = process.communicate(timeout=300)
        results.append((process.returncode, json.loads(stdout) if process.returncode == 0 else stderr))
    assert [code for code, _ in results] == [0, 0], results
    written = sorted((doc["banks_written"], doc["banks_skipped"]) for _, doc in results)
    assert written == [([], [0, 1, 2, 3]), ([0, 1, 2, 3], [])]
    assert not [name for name in os.listdir(out) if name.endswith(".tmp")]
    assert run("container-verify", out, "--model", model).exit_code == 0
