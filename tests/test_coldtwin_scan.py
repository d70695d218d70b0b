"""cold-twin structural scan: which files make an artifact, and what the cold index holds."""

import json
import os
import shutil

import pytest

from moetools.coldtwin.scan import FileStat, folder_artifacts, index_cold, scan_hot, walk_files
from tests import factory
from tests.coldtwin_util import MIB, payload, write, write_shards


@pytest.fixture(scope="module")
def split_model(tmp_path_factory):
    """A real 3-shard qwen3moe GGUF (the factory's writer): list of shard paths."""
    folder = tmp_path_factory.mktemp("split")
    first = factory.write_tiny(folder, "qwen3moe", shards=3, name="q3")
    return sorted(first.parent.glob("q3-*.gguf"))


def names(artifacts):
    return {os.path.basename(artifact.path): [member.name for member in artifact.files] for artifact in artifacts}


def test_gguf_shard_set_is_one_artifact_named_by_first_shard(tmp_path, split_model):
    hot = tmp_path / "hot models"
    hot.mkdir()
    for shard in split_model:
        shutil.copy(shard, hot / shard.name)
    artifacts, problems = scan_hot(str(hot), 2, MIB)
    assert problems == []
    assert names(artifacts) == {"q3-00001-of-00003.gguf": [s.name for s in split_model]}
    (artifact,) = artifacts
    assert artifact.kind == "gguf-split"
    assert artifact.path == os.path.join(str(hot), "q3-00001-of-00003.gguf")
    assert artifact.bytes == sum(s.stat().st_size for s in split_model)
    assert artifact.warnings == [] and artifact.missing == []


def test_shard_count_in_names_is_checked_against_header(tmp_path, split_model):
    # The real header says split.count = 3; renamed as a 4-shard set it must be flagged.
    hot = tmp_path / "hot"
    hot.mkdir()
    for k, shard in enumerate(split_model, start=1):
        shutil.copy(shard, hot / f"q3-{k:05d}-of-00004.gguf")
    write(hot / "q3-00004-of-00004.gguf", payload(1000, 1))
    (artifact,) = scan_hot(str(hot), 0, MIB)[0]
    assert len(artifact.files) == 4
    assert artifact.warnings[0].startswith("header of q3-00004-of-00004.gguf does not parse (")
    write(hot / "q3-00004-of-00004.gguf", split_model[2].read_bytes())  # a real shard: it says 3
    (artifact,) = scan_hot(str(hot), 0, MIB)[0]
    assert artifact.warnings == ["split.count in q3-00004-of-00004.gguf is 3 but the names say 4 shards"]


def test_missing_shard_is_listed(tmp_path, split_model):
    hot = tmp_path / "hot"
    hot.mkdir()
    shutil.copy(split_model[0], hot / split_model[0].name)
    shutil.copy(split_model[2], hot / split_model[2].name)
    (artifact,) = scan_hot(str(hot), 0, MIB)[0]
    assert artifact.missing == ["q3-00002-of-00003.gguf"]
    assert [member.name for member in artifact.files] == ["q3-00001-of-00003.gguf", "q3-00003-of-00003.gguf"]


def test_gguf_that_does_not_parse_is_a_plain_artifact(tmp_path):
    write(tmp_path / "broken.gguf", b"NOTAGGUF" + payload(5000, 2))
    write(tmp_path / "bad-00001-of-00002.gguf", payload(100, 3))
    write(tmp_path / "bad-00002-of-00002.gguf", b"GGUF\x03\x00\x00\x00" + payload(100, 4))
    artifacts, _ = scan_hot(str(tmp_path), 0, MIB)
    kinds = {os.path.basename(a.path): a.kind for a in artifacts}
    assert kinds == {"broken.gguf": "gguf", "bad-00001-of-00002.gguf": "gguf-split"}
    split = [a for a in artifacts if a.kind == "gguf-split"][0]
    assert len(split.warnings) == 1 and split.warnings[0].startswith("header of bad-00002-of-00002.gguf does not parse (")
    assert split.warnings[0].endswith("); shard count taken from the names")
    assert str(tmp_path) not in split.warnings[0]  # the artifact's path is said once, by whoever shows it


@pytest.mark.parametrize("suffix", [".part", ".incomplete", ".tmp", ".downloading", ".PART"])
def test_incomplete_downloads_are_never_artifacts_nor_twins(tmp_path, suffix):
    write(tmp_path / "hot" / f"model.gguf{suffix}", payload(3000, 5))
    write(tmp_path / "hot" / f"big.bin{suffix}", payload(3000, 5))
    write(tmp_path / "cold" / f"model.gguf{suffix}", payload(3000, 5))
    assert scan_hot(str(tmp_path / "hot"), 2, 1)[0] == []
    index, _ = index_cold([str(tmp_path / "cold")], 2)
    assert index.by_name == {}


def test_safetensors_set_with_index_is_one_artifact(tmp_path):
    shards = write_shards(tmp_path, "model", [3000, 2000, 1000], ext="safetensors")
    weight_map = {f"t{k}": shard.name for k, shard in enumerate(shards)}
    write(tmp_path / "model.safetensors.index.json", json.dumps({"weight_map": weight_map}).encode())
    write(tmp_path / "config.json", b"{}")
    (artifact,) = scan_hot(str(tmp_path), 0, MIB)[0]
    assert artifact.kind == "safetensors"
    assert artifact.path == str(shards[0])
    assert artifact.names == [s.name for s in shards] + ["model.safetensors.index.json"]


def test_safetensors_without_index_and_single_file(tmp_path):
    write_shards(tmp_path, "w", [300, 200], ext="safetensors")
    write(tmp_path / "adapter.safetensors", payload(100, 9))
    got = names(scan_hot(str(tmp_path), 0, MIB)[0])
    assert got == {"w-00001-of-00002.safetensors": ["w-00001-of-00002.safetensors", "w-00002-of-00002.safetensors"],
                   "adapter.safetensors": ["adapter.safetensors"]}


def test_other_files_count_from_min_size(tmp_path):
    write(tmp_path / "consolidated.pth", payload(4096, 1))
    write(tmp_path / "README.md", payload(100, 2))
    assert names(scan_hot(str(tmp_path), 0, 4096)[0]) == {"consolidated.pth": ["consolidated.pth"]}
    assert scan_hot(str(tmp_path), 0, 4097)[0] == []


def test_depth_limits_hot_and_cold(tmp_path):
    write(tmp_path / "a" / "b" / "c" / "deep.gguf", payload(100, 1))
    write(tmp_path / "a" / "b" / "shallow.gguf", payload(100, 2))
    assert sorted(names(scan_hot(str(tmp_path), 2, MIB)[0])) == ["shallow.gguf"]
    assert sorted(names(scan_hot(str(tmp_path), 3, MIB)[0])) == ["deep.gguf", "shallow.gguf"]
    index, _ = index_cold([str(tmp_path)], 1)
    assert index.by_name == {}


def test_hot_may_be_one_model_file(tmp_path, split_model):
    for shard in split_model:
        shutil.copy(shard, tmp_path / shard.name)
    write(tmp_path / "other.gguf", payload(100, 1))
    (artifact,) = scan_hot(str(tmp_path / split_model[1].name), 2, MIB)[0]
    assert len(artifact.files) == 3


def test_dangling_symlink_and_fifo_are_reported_not_opened(tmp_path):
    # Runs as root here, where chmod cannot make a file unreadable: a FIFO (opening it would block)
    # and a dangling link stand in for files that cannot be read.
    os.symlink(tmp_path / "nowhere.gguf", tmp_path / "gone.gguf")
    os.mkfifo(tmp_path / "pipe.gguf")
    artifacts, problems = scan_hot(str(tmp_path), 0, MIB)
    assert artifacts == []
    assert sorted(problems) == [
        f"{tmp_path / 'gone.gguf'}: cannot follow symbolic link: No such file or directory",
        f"{tmp_path / 'pipe.gguf'}: not a regular file (a pipe, socket or device); skipped",
    ]


def test_unreadable_folder_is_reported(tmp_path, monkeypatch):
    # As root, chmod 000 does not stop reads: os.scandir is made to refuse one folder instead.
    write(tmp_path / "locked" / "m.gguf", payload(100, 1))
    write(tmp_path / "open" / "n.gguf", payload(100, 2))
    real_scandir = os.scandir

    def scandir(path):
        if os.path.basename(path) == "locked":
            raise PermissionError(13, "Permission denied", path)
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    artifacts, problems = scan_hot(str(tmp_path), 2, MIB)
    assert names(artifacts) == {"n.gguf": ["n.gguf"]}
    assert problems == [f"{tmp_path / 'locked'}: cannot read folder: Permission denied"]


def test_symlinked_file_carries_target_identity(tmp_path):
    target = write(tmp_path / "real.gguf", payload(100, 1))
    os.symlink(target, tmp_path / "link.gguf")
    (_, files), = list(walk_files(str(tmp_path), 0))
    by = {member.name: member for member in files}
    assert by["link.gguf"].identity == by["real.gguf"].identity == (target.stat().st_dev, target.stat().st_ino)


def test_folder_artifacts_from_plain_filestats():
    # The grouping is pure: FileStats in, artifacts out (no disk access for non-split names).
    files = [FileStat(os.path.join("C:/models dir", name), name, size, 1, ino, 0, 0)
             for ino, (name, size) in enumerate([("a.gguf", 10), ("b.bin", 5), ("x-00001-of-00002.safetensors", 4),
                                                 ("x-00002-of-00002.safetensors", 4)])]
    got = folder_artifacts("C:/models dir", files, 5, read_headers=False)
    assert [(a.kind, a.names) for a in got] == [
        ("gguf", ["a.gguf"]), ("file", ["b.bin"]),
        ("safetensors", ["x-00001-of-00002.safetensors", "x-00002-of-00002.safetensors"])]
    assert got[0].path == os.path.join("C:/models dir", "a.gguf")


def test_safetensors_index_that_does_not_parse(tmp_path):
    write_shards(tmp_path, "model", [300, 200], ext="safetensors")
    write(tmp_path / "model.safetensors.index.json", b"{broken")
    (artifact,) = scan_hot(str(tmp_path), 0, MIB)[0]
    assert artifact.names == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    assert len(artifact.warnings) == 1
    assert artifact.warnings[0].startswith("index model.safetensors.index.json does not parse (")
