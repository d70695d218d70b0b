"""cold-twin actions: evict, migrate, --free and --keep, the action log, and their safety checks."""

import json
import os
import shutil
from collections import namedtuple

import pytest

from moetools.coldtwin import actions, fsops
from moetools.coldtwin.actions import ActionFailed, ActionLog, evict, interrupted_actions
from moetools.coldtwin.core import Twin
from moetools.coldtwin.hashing import HashCache, Hasher
from moetools.coldtwin.scan import scan_hot, index_cold
from tests.coldtwin_util import MIB, by_name, copy_tree, payload, run, write, write_shards
from tests.coldtwin_util import cache_folder, trees  # noqa: F401 (fixtures used by name)


def log_events(path):
    return [json.loads(line)["event"] for line in open(path)]


def files_in(folder):
    return sorted(os.path.relpath(os.path.join(root, name), folder)
                  for root, _, names in os.walk(folder) for name in names)


# --- evict -------------------------------------------------------------------------------------

def test_evict_is_a_dry_run_without_yes(trees, cache_folder):
    hot, cold = trees
    write_shards(hot, "m", [3000, 2000])
    copy_tree(hot, cold)
    code, doc, _ = run(hot, cold, "--evict")
    assert code == 0
    entry = doc["artifacts"][0]
    assert entry["verify"] == "full" and entry["status"] == "verified"
    assert entry["action"] == {"kind": "evict", "dry_run": True, "done": False, "error": None,
                               "freed_bytes": 5000, "twin": str(cold / "m-00001-of-00002.gguf")}
    assert doc["dry_run"] is True and doc["log"] is None
    assert files_in(hot) == ["m-00001-of-00002.gguf", "m-00002-of-00002.gguf"]
    assert not (cache_folder / "coldtwin-actions.jsonl").exists()


def test_evict_yes_removes_only_verified_full(trees, cache_folder):
    hot, cold = trees
    write_shards(hot, "good", [3000, 2000], seed=1)
    copy_tree(hot, cold)
    data = bytearray(payload(3 * MIB, 9))
    write(hot / "bad.gguf", bytes(data))
    data[MIB + 5] ^= 1  # passes quick, fails full
    write(cold / "bad.gguf", bytes(data))
    write(hot / "alone.gguf", payload(100, 3))
    code, doc, _ = run(hot, cold, "--evict", "--yes")
    assert code == 1  # bad.gguf and alone.gguf still have no verified twin
    got = by_name(doc)
    assert got["good-00001-of-00002.gguf"]["action"]["done"] is True
    assert got["bad.gguf"]["status"] == "mismatch" and got["bad.gguf"]["action"] is None
    assert files_in(hot) == ["alone.gguf", "bad.gguf"]
    assert doc["summary"]["freed_bytes"] == 5000
    log = cache_folder / "coldtwin-actions.jsonl"
    assert doc["log"] == str(log)
    assert log_events(log) == ["evict-start", "unlink", "unlink", "evict-done"]


def test_evict_needs_full(trees):
    hot, cold = trees
    _, _, result = run(hot, cold, "--evict", "--verify", "quick", ok_codes=(2,))
    assert result.stderr == ("error: --evict needs --verify full (an eviction trusts only a full-content twin), "
                             "not --verify quick\n")


def fresh_hasher():
    return Hasher(HashCache(None))


def scanned(hot, cold):
    (artifact,) = scan_hot(str(hot), 2, MIB)[0]
    index, _ = index_cold([str(cold)], 2)
    folder = next(iter(index.folders))
    return artifact, Twin(folder, [index.folders[folder][name] for name in artifact.names])


def test_evict_rechecks_each_hot_file_before_unlink(trees, tmp_path):
    hot, cold = trees
    shards = write_shards(hot, "m", [3000, 2000])
    copy_tree(hot, cold)
    artifact, twin = scanned(hot, cold)
    os.utime(shards[1], ns=(5, 5))  # touched after the scan and verification
    log = ActionLog(str(tmp_path / "log.jsonl"))
    with pytest.raises(ActionFailed, match="hot copy: .* since it was verified"):
        evict(artifact, twin, log, fresh_hasher())
    assert files_in(hot) == ["m-00001-of-00002.gguf", "m-00002-of-00002.gguf"]


def test_evict_refuses_when_the_twin_changed(trees, tmp_path):
    hot, cold = trees
    write(hot / "m.gguf", payload(3000, 1))
    copy_tree(hot, cold)
    artifact, twin = scanned(hot, cold)
    with open(cold / "m.gguf", "ab") as handle:
        handle.write(b"x")
    with pytest.raises(ActionFailed, match="cold twin: .* since it was verified"):
        evict(artifact, twin, ActionLog(str(tmp_path / "log.jsonl")), fresh_hasher())
    (cold / "m.gguf").unlink()
    with pytest.raises(ActionFailed, match="cold twin is gone"):
        evict(artifact, twin, ActionLog(str(tmp_path / "log.jsonl")), fresh_hasher())
    assert files_in(hot) == ["m.gguf"]


def test_evict_change_between_checks_is_caught(trees, tmp_path, monkeypatch):
    # The file changes after the up-front checks: the re-stat right before its unlink catches it.
    hot, cold = trees
    shards = write_shards(hot, "m", [3000, 2000])
    copy_tree(hot, cold)
    artifact, twin = scanned(hot, cold)
    log = ActionLog(str(tmp_path / "log.jsonl"))
    real_write = log.write

    def write_then_touch(event, **fields):
        real_write(event, **fields)
        if event == "unlink":
            os.utime(shards[1], ns=(7, 7))

    monkeypatch.setattr(log, "write", write_then_touch)
    with pytest.raises(ActionFailed):
        evict(artifact, twin, log, fresh_hasher())
    assert files_in(hot) == ["m-00002-of-00002.gguf"]
    assert log_events(tmp_path / "log.jsonl")[-1] == "evict-failed"


# --- migrate -----------------------------------------------------------------------------------

def test_migrate_copies_verifies_renames_then_evicts(trees, tmp_path):
    hot, cold = trees
    shards = write_shards(hot / "kimi k2", "k2", [300000, 200000])
    data = [shard.read_bytes() for shard in shards]
    mtimes = [shard.stat().st_mtime_ns for shard in shards]
    log = tmp_path / "my log.jsonl"
    code, doc, _ = run(hot, "--migrate", cold, "--yes", "--log", log)
    assert code == 0
    entry = doc["artifacts"][0]
    assert entry["status"] == "verified" and entry["verify"] == "full"
    assert entry["twin"] == str(cold / "kimi k2" / "k2-00001-of-00002.gguf")
    assert entry["action"]["done"] is True and entry["action"]["freed_bytes"] == 500000
    assert files_in(hot) == []
    assert files_in(cold) == [os.path.join("kimi k2", s.name) for s in shards]
    for shard, content, mtime in zip(shards, data, mtimes):
        copy = cold / "kimi k2" / shard.name
        assert copy.read_bytes() == content and copy.stat().st_mtime_ns == mtime
    assert log_events(log) == ["migrate-start", "copy-start", "copy-verified", "renamed", "copy-start",
                               "copy-verified", "renamed", "migrate-copied", "evict-start", "unlink", "unlink",
                               "rmdir", "evict-done", "migrate-done"]
    assert os.listdir(hot) == []  # the emptied "kimi k2" folder is gone; HOT_DIR itself stays
    # The cache learned the copies' digests: a full check now reads nothing.
    code, doc, _ = run(hot, cold, "--verify", "full")
    assert code == 0 and doc["artifacts"] == []


def test_migrate_dry_run_touches_nothing(trees):
    hot, cold = trees
    write(hot / "m.gguf", payload(1000, 1))
    code, doc, _ = run(hot, cold, "--migrate", cold)
    assert code == 1  # nothing has a twin yet
    assert doc["artifacts"][0]["action"]["kind"] == "migrate" and doc["artifacts"][0]["action"]["dry_run"] is True
    assert files_in(cold) == [] and files_in(hot) == ["m.gguf"]


def test_no_space_is_checked_before_copying(trees, monkeypatch):
    hot, cold = trees
    write(hot / "m.gguf", payload(100000, 1))
    Usage = namedtuple("Usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(10**9, 10**9 - 5 * MIB, 5 * MIB))
    for extra in ([], ["--yes"]):
        code, doc, _ = run(hot, "--migrate", cold, *extra)
        assert code == 1
        error = doc["artifacts"][0]["action"]["error"]
        assert error.startswith(f"{cold}: no space for the migration: needs 97.7 KiB (+16.0 MiB margin), 5.0 MiB free")
        assert files_in(cold) == [] and files_in(hot) == ["m.gguf"]


def test_migrate_resumes_with_a_matching_member_and_removes_stale_temps(trees, tmp_path):
    hot, cold = trees
    shards = write_shards(hot, "m", [3000, 2000])
    shutil.copy2(shards[0], cold / shards[0].name)  # a run killed after the first rename
    write(cold / f".{shards[1].name}.moetools-999999999.tmp", b"partial")  # and in the second copy
    log = tmp_path / "log.jsonl"
    code, doc, _ = run(hot, "--migrate", cold, "--yes", "--log", log)
    assert code == 0
    assert files_in(cold) == [s.name for s in write_shards(tmp_path / "ref", "m", [3000, 2000])]
    events = log_events(log)
    assert "stale-temp-removed" in events and "reuse" in events and events.count("copy-start") == 1


def test_migrate_never_overwrites_a_different_file(trees):
    hot, cold = trees
    write(hot / "m.gguf", payload(3000, 1))
    write(cold / "m.gguf", payload(3001, 2))  # same name, other bytes: not a twin, not to be replaced
    code, doc, _ = run(hot, "--migrate", cold, "--yes")
    assert code == 1
    assert doc["artifacts"][0]["action"]["error"] == f"{cold / 'm.gguf'}: already exists with 3001 bytes (hot: 3000); not overwritten"
    assert (cold / "m.gguf").read_bytes() == payload(3001, 2) and files_in(hot) == ["m.gguf"]


def test_migrate_copy_is_rejected_when_it_reads_back_different(trees, monkeypatch):
    hot, cold = trees
    write(hot / "m.gguf", payload(3000, 1))
    monkeypatch.setattr(fsops, "read_digest", lambda *a, **k: "0" * 32)
    code, doc, _ = run(hot, "--migrate", cold, "--yes")
    assert code == 1
    assert "the copy read back from disk differs" in doc["artifacts"][0]["action"]["error"]
    assert files_in(cold) == [] and files_in(hot) == ["m.gguf"]


def test_migrate_into_a_folder_holding_hot_is_refused(tmp_path):
    hot = tmp_path / "all" / "hot"
    write(hot / "m.gguf", payload(100, 1))
    _, _, result = run(hot, "--migrate", tmp_path / "all", ok_codes=(2,))
    assert "contains the hot folder" in result.stderr


def test_mismatch_is_neither_migrated_nor_evicted(trees):
    hot, cold = trees
    write(hot / "m.gguf", payload(3000, 1))
    write(cold / "m.gguf", payload(3000, 2))
    code, doc, _ = run(hot, cold, "--migrate", cold, "--evict", "--yes")
    assert code == 1 and doc["artifacts"][0]["status"] == "mismatch" and doc["artifacts"][0]["action"] is None
    assert files_in(hot) == ["m.gguf"]


# --- --free and --keep -------------------------------------------------------------------------

def lru_tree(hot, cold):
    """Three artifacts with twins, used at days 1 (oldest), 2 and 3; each 1000 bytes."""
    for day, name in ((3, "new"), (1, "old"), (2, "mid")):
        path = write(hot / f"{name}.gguf", payload(1000, day))
        shutil.copy(path, cold / path.name)
        os.utime(path, ns=(day * 86400 * 10**9, day * 86400 * 10**9))


def test_free_evicts_least_recently_used_first(trees):
    hot, cold = trees
    lru_tree(hot, cold)
    code, doc, _ = run(hot, cold, "--free", "1500", "--yes")
    assert code == 0 and doc["summary"]["freed_bytes"] == 2000
    assert files_in(hot) == ["new.gguf"]
    got = by_name(doc)
    assert got["new.gguf"]["status"] == "structural" and got["new.gguf"]["action"] is None
    assert got["old.gguf"]["verify"] == "full" and got["old.gguf"]["action"]["done"] is True


def test_free_skips_kept_and_reports_shortfall(trees):
    hot, cold = trees
    lru_tree(hot, cold)
    code, doc, _ = run(hot, cold, "--free", "1000", "--keep", "ol?", "--yes")
    assert code == 0 and files_in(hot) == ["new.gguf", "old.gguf"]
    code, doc, _ = run(hot, cold, "--free", "5000", "--keep", "new.gguf", "--yes")
    assert code == 1 and doc["summary"]["freed_bytes"] == 1000  # mid went in the first run; new is kept
    assert files_in(hot) == ["new.gguf"]


def test_free_migrates_when_no_twin(trees):
    hot, cold = trees
    write(hot / "a.gguf", payload(1000, 1))
    write(hot / "b.gguf", payload(1000, 2))
    os.utime(hot / "b.gguf", ns=(10**9, 10**9))
    code, doc, _ = run(hot, cold, "--free", "1", "--migrate", cold, "--yes")
    assert code == 0 and files_in(hot) == ["a.gguf"] and files_in(cold) == ["b.gguf"]


def test_free_dry_run(trees):
    hot, cold = trees
    lru_tree(hot, cold)
    code, doc, _ = run(hot, cold, "--free", "1000")
    assert code == 0 and doc["summary"]["freed_bytes"] == 1000 and len(files_in(hot)) == 3
    assert by_name(doc)["old.gguf"]["action"]["dry_run"] is True


# --- the log -----------------------------------------------------------------------------------

def test_interrupted_actions_from_log(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text("\n".join([
        json.dumps({"run": "r1", "event": "migrate-start", "hot": "/h/a.gguf"}),
        json.dumps({"run": "r1", "event": "migrate-done", "hot": "/h/a.gguf"}),
        json.dumps({"run": "r1", "event": "evict-start", "hot": "/h/b.gguf"}),
        '{"run": "r1", "event": "unl',  # torn by the kill
    ]))
    assert [(r["event"], r["hot"]) for r in interrupted_actions(str(log))] == [("evict-start", "/h/b.gguf")]
    assert interrupted_actions(str(tmp_path / "none.jsonl")) == []


def test_interrupted_run_is_announced(trees, tmp_path):
    hot, cold = trees
    write(hot / "m.gguf", payload(100, 1))
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps({"run": "r0", "event": "migrate-start", "hot": str(hot / "m.gguf")}) + "\n")
    code, _, result = run(hot, "--migrate", cold, "--yes", "--log", log)
    assert code == 0
    assert f"run r0 was interrupted during migrate of {hot / 'm.gguf'}; this run resumes it" in result.stderr
    assert interrupted_actions(str(log)) == []


def test_broken_downloads_are_not_migrated(trees):
    hot, cold = trees
    write(hot / "empty.gguf", b"")
    shards = write_shards(hot, "m", [100, 200, 300])
    shards[2].unlink()
    code, doc, _ = run(hot, "--migrate", cold, "--yes")
    assert code == 1
    assert [(e["status"], e["action"]) for e in doc["artifacts"]] == [("none", None), ("incomplete", None)]
    assert files_in(cold) == []


def test_missing_hot_folder_is_exit_2(tmp_path):
    _, _, result = run(tmp_path / "no such", tmp_path, ok_codes=(2,))
    assert result.stderr == f"error: {tmp_path / 'no such'}: no such file or folder\n"


def test_migrate_creates_the_cold_folder(trees, tmp_path):
    hot, _ = trees
    write(hot / "deep dir" / "m.gguf", payload(1000, 1))
    target = tmp_path / "new cold" / "tier 2"
    code, doc, _ = run(hot, "--migrate", target, "--yes")
    assert code == 0 and files_in(target) == [os.path.join("deep dir", "m.gguf")] and files_in(hot) == []
    assert (target / "deep dir" / "m.gguf").read_bytes() == payload(1000, 1)


def test_disk_full_during_copy_leaves_no_partial_file(trees, monkeypatch):
    hot, cold = trees
    write(hot / "m.gguf", payload(5000, 1))
    real_fsync = os.fsync

    def full_disk(fd):
        if os.path.basename(os.readlink(f"/proc/self/fd/{fd}")).endswith(".tmp"):
            raise OSError(28, "No space left on device")
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", full_disk)
    code, doc, _ = run(hot, "--migrate", cold, "--yes")
    assert code == 1
    assert doc["artifacts"][0]["action"]["error"].endswith("copy failed: No space left on device")
    assert os.listdir(cold) == [] and files_in(hot) == ["m.gguf"]


def test_source_changing_during_copy_stops_the_migration(trees, monkeypatch):
    hot, cold = trees
    write(hot / "m.gguf", payload(64 * 1024, 1))
    monkeypatch.setenv("MOETOOLS_COLDTWIN_TEST_CHUNK", "4096")
    grown = []

    def grow():
        if not grown:
            grown.append(1)
            with open(hot / "m.gguf", "ab") as handle:
                handle.write(b"late bytes")

    monkeypatch.setattr(fsops, "test_pause", grow)
    code, doc, _ = run(hot, "--migrate", cold, "--yes")
    assert code == 1
    assert "changed while being read" in doc["artifacts"][0]["action"]["error"]
    assert os.listdir(cold) == [] and files_in(hot) == ["m.gguf"]


def test_keep_patterns_match_stem_relative_path_and_names(tmp_path):
    from moetools.coldtwin.actions import is_kept

    shards = write_shards(tmp_path / "vendor a", "Kimi-K2-Q4", [10, 20])
    (artifact,) = scan_hot(str(tmp_path), 2, MIB)[0]
    for pattern, expected in [("Kimi-K2*", True), ("Kimi-K2-Q4", True), ("vendor a/*", True),
                              ("*-00002-of-00002.gguf", True), (str(shards[0]), True), ("Qwen*", False),
                              ("vendor b/*", False)]:
        assert is_kept(artifact, (pattern,), str(tmp_path)) is expected, pattern


def test_evicting_a_symlink_frees_nothing_and_keeps_the_target(trees, tmp_path):
    hot, cold = trees
    target = write(tmp_path / "elsewhere" / "m.gguf", payload(3000, 1))
    os.symlink(target, hot / "m.gguf")
    shutil.copy(target, cold / "m.gguf")
    code, doc, _ = run(hot, cold, "--evict", "--yes")
    assert code == 0 and doc["summary"]["freed_bytes"] == 0
    assert not os.path.lexists(hot / "m.gguf") and target.read_bytes() == payload(3000, 1)


def test_interrupted_run_elsewhere_is_not_claimed(trees, tmp_path):
    hot, cold = trees
    write(hot / "m.gguf", payload(100, 1))
    log = tmp_path / "log.jsonl"
    other = tmp_path / "other hot" / "x.gguf"
    log.write_text(json.dumps({"run": "r9", "event": "evict-start", "hot": str(other)}) + "\n")
    _, _, result = run(hot, "--migrate", cold, "--yes", "--log", log)
    assert f"run r9 was interrupted during evict of {other}; it is not below HOT_DIR" in result.stderr


def test_rerunning_migrate_finishes_a_migration_killed_before_the_eviction(trees, tmp_path):
    """The copies are all in place (a kill after migrate-copied): `--migrate` alone must evict."""
    hot, cold = trees
    shards = write_shards(hot, "m", [3000, 2000])
    for shard in shards:
        shutil.copy2(shard, cold / shard.name)
    code, doc, _ = run(hot, "--migrate", cold, "--yes")
    assert code == 0
    assert doc["artifacts"][0]["action"]["kind"] == "evict" and doc["artifacts"][0]["action"]["done"] is True
    assert files_in(hot) == [] and files_in(cold) == [s.name for s in shards]


def test_rerunning_migrate_finishes_a_half_done_eviction(trees):
    hot, cold = trees
    shards = write_shards(hot, "m", [3000, 2000])
    for shard in shards:
        shutil.copy2(shard, cold / shard.name)
    os.unlink(shards[0])  # killed after the first unlink
    code, doc, _ = run(hot, "--migrate", cold, "--yes")
    assert code == 0 and files_in(hot) == [] and files_in(cold) == [s.name for s in shards]


def test_evict_refuses_a_cold_folder_that_is_the_hot_one_reached_another_way(tmp_path):
    hot = tmp_path / "hot"
    hot.mkdir()
    other_path = tmp_path / "mounted"
    other_path.symlink_to(hot)  # stands in for a bind or network mount with other device numbers
    with pytest.raises(ActionFailed, match="seen through another path"):
        actions._refuse_same_folder(str(hot), str(other_path))
    assert os.listdir(hot) == []  # the marker is gone
    elsewhere = tmp_path / "cold"
    elsewhere.mkdir()
    actions._refuse_same_folder(str(hot), str(elsewhere))
