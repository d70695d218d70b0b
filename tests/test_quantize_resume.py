"""quantize is all or nothing and resumable: real processes ended abruptly (os._exit, as kill -9
leaves them: no clean-up runs) at chosen points, then a rerun in the same folder.

The stopping points come from $MOETOOLS_QUANTIZE_FAULT (moetools/quantize/staged.py):
`piece:N` after the Nth finished output file, `commit` after the publish journal, `publish:N`
after the Nth rename into the output folder. benchmarks/fault_quantize.py kills runs with SIGKILL
at random moments instead.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from moetools import synth
from moetools.formats import quantize_staging
from moetools.formats.resident_manifest import find_manifests
from tests import factory

ROOT = Path(__file__).resolve().parents[1]
KILLED = 137


def moetools(*args, fault=""):
    env = dict(os.environ)
    env.pop("MOETOOLS_QUANTIZE_FAULT", None)
    if fault:
        env["MOETOOLS_QUANTIZE_FAULT"] = fault
    return subprocess.run([sys.executable, "-m", "moetools", "quantize", *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sources")
    types = synth.Types(resident=synth.F16, embed=synth.BF16, output=synth.F32)
    one = factory.write_tiny(folder / "one", "qwen3moe", types=types, n_layer=2, vocab=256)
    split = factory.write_tiny(folder / "split", "qwen3moe", types=types, n_layer=3, vocab=256, shards=3)
    return {"one": one, "split": split}


def kill_then_rerun(source, args, out, fault, *rerun_args):
    """Run quantize ended at `fault`; check nothing is visible yet; rerun it (plus `rerun_args`)."""
    killed = moetools(source, *args, "-o", out, fault=fault)
    assert killed.returncode == KILLED, killed.stderr
    assert visible(out) == []
    rerun = moetools(source, *args, "-o", out, *rerun_args)
    assert rerun.returncode == 0, rerun.stderr
    return rerun


def visible(folder):
    """The outputs a reader of `folder` sees: its files, without the staging folder and the lock."""
    return sorted(p.name for p in Path(folder).iterdir() if not p.name.startswith("."))


def contents(folder):
    return {name: (Path(folder) / name).read_bytes() for name in visible(folder)}


RESIDENT = ["--pure", "--type", "q8_0,q4_0"]
SPLIT = ["--full", "--keep-split", "--pure", "--type", "q4_K"]


@pytest.fixture(scope="module")
def reference(sources, tmp_path_factory):
    """Uninterrupted runs, to compare every byte against."""
    refs = {}
    for name, args in (("one", RESIDENT), ("split", SPLIT)):
        out = tmp_path_factory.mktemp(f"ref-{name}")
        result = moetools(sources[name], *args, "-o", out, "--json")
        assert result.returncode == 0, result.stderr
        refs[name] = (contents(out), json.loads(result.stdout))
    return refs


@pytest.mark.parametrize("renames", [1, 3])
def test_killed_while_publishing_shows_nothing_and_the_rerun_finishes(sources, reference, tmp_path, renames):
    """Two tiers = 4 files (2 GGUFs, then 2 manifests). Killed after some renames, the folder shows
    no tier to a reader; the rerun completes the publish without re-quantizing, byte for byte."""
    out = tmp_path / "tiers"
    killed = moetools(sources["one"], *RESIDENT, "-o", out, fault=f"publish:{renames}")
    assert killed.returncode == KILLED, killed.stderr
    assert len(visible(out)) == renames  # some files already have their final names ...
    assert find_manifests(out) == []  # ... but a reader of the tier folder sees none of them
    assert quantize_staging.pending_names(out)
    rerun = moetools(sources["one"], *RESIDENT, "-o", out, "--json")
    assert rerun.returncode == 0, rerun.stderr
    assert "finished a run that was killed while publishing" in rerun.stderr
    assert contents(out) == reference["one"][0]
    assert not (out / quantize_staging.STAGING_NAME).exists()
    tiers = json.loads(rerun.stdout)["tiers"]
    assert [(t["tier"], t["rmse"], t["resident_bytes"]) for t in tiers] == [
        (t["tier"], t["rmse"], t["resident_bytes"]) for t in reference["one"][1]["tiers"]]
    assert [os.path.basename(t["gguf"]) for t in tiers] == [os.path.basename(t["gguf"]) for t in reference["one"][1]["tiers"]]
    assert len(find_manifests(out)) == 2


def test_killed_at_the_commit_point(sources, reference, tmp_path):
    out = tmp_path / "tiers"
    again = kill_then_rerun(sources["one"], RESIDENT, out, "commit", "--json")
    assert "finished a run that was killed while publishing" in again.stderr
    assert contents(out) == reference["one"][0]


def test_killed_after_a_shard_keeps_none_visible_and_the_rerun_reuses_it(sources, reference, tmp_path):
    """--keep-split: each shard file is finished as soon as its last tensor is written; a run killed
    after the first leaves no shard under a final name, and the rerun reuses the finished one."""
    out = tmp_path / "full"
    rerun = kill_then_rerun(sources["split"], SPLIT, out, "piece:1", "--json")
    assert "reusing 1 file an interrupted run of the same plan finished" in rerun.stderr
    assert "qwen3moe-q4_K-full-00001-of-00003.gguf" in rerun.stderr
    assert contents(out) == reference["split"][0]
    assert len(visible(out)) == 3
    got, want = json.loads(rerun.stdout)["tiers"][0], reference["split"][1]["tiers"][0]
    assert (got["rmse"], got["file_bytes"], got["quantized"]) == (want["rmse"], want["file_bytes"], want["quantized"])


def test_a_tampered_staged_file_is_not_reused(sources, reference, tmp_path):
    out = tmp_path / "full"
    assert moetools(sources["split"], *SPLIT, "-o", out, fault="piece:2").returncode == KILLED
    staged = out / quantize_staging.STAGING_NAME / "qwen3moe-q4_K-full-00002-of-00003.gguf"
    data = bytearray(staged.read_bytes())
    data[-1] ^= 0xFF
    staged.write_bytes(bytes(data))
    rerun = moetools(sources["split"], *SPLIT, "-o", out)
    assert rerun.returncode == 0, rerun.stderr
    assert "reusing 1 file" in rerun.stderr and "00001-of-00003" in rerun.stderr  # only the intact one
    assert contents(out) == reference["split"][0]


def test_force_replaces_an_interrupted_run_and_another_plan_discards_it(sources, reference, tmp_path):
    out = tmp_path / "full"
    assert moetools(sources["split"], *SPLIT, "-o", out, fault="piece:1").returncode == KILLED
    forced = moetools(sources["split"], *SPLIT, "-o", out, "--force")
    assert forced.returncode == 0, forced.stderr
    assert "reusing" not in forced.stderr
    assert contents(out) == reference["split"][0]
    other = tmp_path / "other"
    assert moetools(sources["split"], *SPLIT, "-o", other, fault="piece:1").returncode == KILLED
    q6 = moetools(sources["split"], "--full", "--keep-split", "--pure", "--type", "q6_K", "-o", other)
    assert q6.returncode == 0, q6.stderr
    assert "reusing" not in q6.stderr
    assert visible(other) == [f"qwen3moe-q6_K-full-0000{k}-of-00003.gguf" for k in (1, 2, 3)]
    assert not (other / quantize_staging.STAGING_NAME).exists()


def test_a_finished_run_keeps_its_tiers_and_another_command_still_needs_force(sources, reference, tmp_path):
    out = tmp_path / "tiers"
    assert moetools(sources["one"], *RESIDENT, "-o", out).returncode == 0
    inodes = {name: (out / name).stat().st_ino for name in visible(out)}
    again = moetools(sources["one"], *RESIDENT, "-o", out, "--json")
    assert again.returncode == 0, again.stderr
    assert "keeping 2 tiers" in again.stderr and "quantize: about" not in again.stderr  # nothing re-quantized
    assert contents(out) == reference["one"][0]
    assert {name: (out / name).stat().st_ino for name in visible(out)} == inodes  # kept, not rewritten
    assert without_paths(json.loads(again.stdout)) == without_paths(reference["one"][1])
    # another command over the same file names needs --force: another mix (output.weight in q8_0), or
    # another list of tiers (q4_0 alone: the q4_0 tier's bytes are the same, but this command did not write it)
    other = moetools(sources["one"], *RESIDENT, "--output-tensor-type", "q8_0", "-o", out)
    assert other.returncode == 2 and "qwen3moe-q8_0.gguf: already exists (use --force to replace it)" in other.stderr
    alone = moetools(sources["one"], "--pure", "--type", "q4_0", "-o", out)
    assert alone.returncode == 2 and "qwen3moe-q4_0.gguf: already exists (use --force to replace it)" in alone.stderr
    assert contents(out) == reference["one"][0]
    # a manifest without this command's record (an older moetools, another tool) is not taken as this run's
    manifest = out / "qwen3moe-q8_0.gguf.resident.json"
    doc = json.loads(manifest.read_text())
    del doc["run_key"]
    manifest.write_text(json.dumps(doc))
    again = moetools(sources["one"], *RESIDENT, "-o", out)
    assert again.returncode == 2 and "qwen3moe-q8_0.gguf: already exists (use --force" in again.stderr


def without_paths(doc):
    """A quantize JSON document without what names its folder (two runs in two folders compare equal)."""
    doc = json.loads(json.dumps(doc))
    doc.pop("output_dir", None)
    for tier in doc["tiers"]:
        for key in ("gguf", "gguf_files", "manifest"):
            tier.pop(key, None)
    if "install" in doc:
        doc["install"] = {key: value for key, value in doc["install"].items()
                          if key in ("model_id", "slug", "override_resident_bytes")}
    return doc


INSTALL = ["--type", "q8_0,q4_K", "--install", "--model-id", "tiny-moe"]


def install(source, root, *extra, fault=""):
    return moetools(source, *INSTALL, "--storage-root", root, *extra, "--json", fault=fault)


@pytest.fixture(scope="module")
def installed_reference(sources, tmp_path_factory):
    """An uninterrupted `quantize -t q8_0,q4_K --install`: its folder's bytes and its JSON."""
    from moetools.formats.storage import device_fit_dir

    root = tmp_path_factory.mktemp("installed-ref")
    result = install(sources["one"], root)
    assert result.returncode == 0, result.stderr
    folder = Path(device_fit_dir("tiny-moe", str(root)))
    assert "resident-bytes" in visible(folder)
    return contents(folder), json.loads(result.stdout)


def install_folder(root):
    from moetools.formats.storage import device_fit_dir

    return Path(device_fit_dir("tiny-moe", str(root)))


def test_a_killed_install_is_finished_by_rerunning_the_same_command(sources, installed_reference, tmp_path):
    """Killed (os._exit, as kill -9) after its tiers were published and before the daemon's override
    was made: the rerun verifies both tiers (manifest, size, xxh3), keeps them and installs."""
    root = tmp_path / "root"
    killed = install(sources["one"], root, fault="install")
    assert killed.returncode == KILLED, killed.stderr
    folder = install_folder(root)
    assert "resident-bytes" not in visible(folder) and len([n for n in visible(folder) if n.endswith(".gguf")]) == 2
    inodes = {name: (folder / name).stat().st_ino for name in visible(folder)}
    rerun = install(sources["one"], root)
    assert rerun.returncode == 0, rerun.stderr
    assert "keeping 2 tiers" in rerun.stderr and "already exists" not in rerun.stderr
    assert contents(folder) == installed_reference[0]  # every byte of an uninterrupted run's folder
    assert all((folder / name).stat().st_ino == inode for name, inode in inodes.items())  # kept, not rewritten
    assert without_paths(json.loads(rerun.stdout)) == without_paths(installed_reference[1])


def test_a_tier_that_does_not_verify_is_written_again(sources, installed_reference, tmp_path):
    root = tmp_path / "root"
    assert install(sources["one"], root, fault="install").returncode == KILLED
    folder = install_folder(root)
    damaged = next(folder / name for name in visible(folder) if name.endswith("-Q4_K_M.gguf"))
    data = bytearray(damaged.read_bytes())
    data[-100] ^= 0xFF  # same size, other bytes: only the digest tells
    damaged.write_bytes(bytes(data))
    kept = next(folder / name for name in visible(folder) if name.endswith("-Q8_0.gguf"))
    inode = kept.stat().st_ino
    rerun = install(sources["one"], root)
    assert rerun.returncode == 0, rerun.stderr
    assert "keeping 1 tier" in rerun.stderr and "writing tier Q4_K_M again" in rerun.stderr
    assert contents(folder) == installed_reference[0]
    assert kept.stat().st_ino == inode


def test_a_sigkilled_install_at_its_first_tier_is_finished_by_rerunning_it(sources, installed_reference, tmp_path):
    """A real SIGKILL as soon as the first tier's GGUF shows in the daemon's folder (wherever the run
    then is: publishing, making the override, printing); the rerun gives an uninterrupted run's bytes."""
    import signal
    import time

    root = tmp_path / "root"
    folder = install_folder(root)
    env = dict(os.environ)
    env.pop("MOETOOLS_QUANTIZE_FAULT", None)
    process = subprocess.Popen([sys.executable, "-m", "moetools", "quantize", str(sources["one"]), *INSTALL,
                                "--storage-root", str(root), "--json"], cwd=ROOT, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while process.poll() is None and time.monotonic() < deadline:
        if folder.is_dir() and any(name.endswith(".gguf") for name in visible(folder)):
            process.send_signal(signal.SIGKILL)
            break
        time.sleep(0.0005)
    process.wait(timeout=60)
    rerun = install(sources["one"], root)
    assert rerun.returncode == 0, rerun.stderr
    assert contents(folder) == installed_reference[0]


def test_a_replaced_tier_never_shows_its_old_manifest_with_the_new_gguf(sources, tmp_path):
    """--force over an existing tier: killed after the new GGUF's rename, the tier is invisible
    (its old manifest went first); the rerun publishes the new manifest."""
    out = tmp_path / "tiers"
    assert moetools(sources["one"], "--pure", "--type", "q4_0", "-o", out).returncode == 0
    killed = moetools(sources["one"], "--pure", "--type", "q4_0", "--force", "-o", out,
                      "--output-tensor-type", "q8_0", fault="publish:1")
    assert killed.returncode == KILLED, killed.stderr
    assert find_manifests(out) == []
    assert not (out / "qwen3moe-q4_0.gguf.resident.json").exists()
    rerun = moetools(sources["one"], "--pure", "--type", "q4_0", "-o", out, "--output-tensor-type", "q8_0", "--json")
    assert rerun.returncode == 0, rerun.stderr
    assert len(find_manifests(out)) == 1
