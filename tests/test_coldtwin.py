"""cold-twin: twin rules, verification levels, the hash cache and the report (CLI)."""

import os
import random
import shutil

import pytest
import xxhash

from moetools.coldtwin import hashing
from moetools.coldtwin.core import structural_twins
from moetools.coldtwin.hashing import HashCache, quick_digest, read_digest
from moetools.coldtwin.scan import Artifact, ColdIndex, FileStat
from tests import factory
from tests.coldtwin_util import MIB, by_name, copy_tree, payload, run, write, write_shards
from tests.coldtwin_util import cache_folder, trees  # noqa: F401 (fixtures used by name)


def stat_of(path):
    return FileStat.from_stat(str(path), os.stat(path))


# --- digests against a plain reference ---------------------------------------------------------

@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 4097, 3 * 4096 + 17])
def test_full_digest_equals_one_shot_xxh3(tmp_path, monkeypatch, size):
    monkeypatch.setenv(hashing.TEST_CHUNK_ENV, "4096")  # many chunks, boundaries on and off
    data = payload(size, size)
    path = write(tmp_path / "f", data)
    assert read_digest(str(path), stat_of(path)) == xxhash.xxh3_128(data).hexdigest()


@pytest.mark.parametrize("size", [10, MIB, 2 * MIB, 2 * MIB + 1, 3 * MIB + 5])
def test_quick_digest_is_first_and_last_mib(tmp_path, size):
    data = payload(size, size)
    path = write(tmp_path / "f", data)
    expected = data if size <= 2 * MIB else data[:MIB] + data[-MIB:]
    assert quick_digest(str(path), stat_of(path)) == (xxhash.xxh3_128(expected).hexdigest(), False, False)


def test_quick_digest_sees_a_zero_tail(tmp_path):
    path = write(tmp_path / "f", payload(MIB, 1) + bytes(2 * MIB))
    assert quick_digest(str(path), stat_of(path))[1] is True


# --- structural rules --------------------------------------------------------------------------

def test_verified_twin_quick_default(trees):
    hot, cold = trees
    write_shards(hot, "k3", [5000, 3000, 4000])
    copy_tree(hot, cold / "k3")
    code, doc, _ = run(hot, cold)
    assert code == 0
    (entry,) = doc["artifacts"]
    # A quick match is a hint: nothing is reclaimable on its word.
    assert (entry["status"], entry["verify"], entry["twin"], entry["bytes"], entry["reclaimable_bytes"]) == (
        "quick-match", "quick", str(cold / "k3" / "k3-00001-of-00003.gguf"), 12000, 0)
    assert doc["ok"] is True and doc["summary"]["twinned"] == 1 and doc["summary"]["verified_full"] == 0


def test_real_gguf_split_twin_full(trees):
    hot, cold = trees
    factory.write_tiny(hot, "qwen3moe", shards=2, name="q3")
    copy_tree(hot, cold)
    code, doc, _ = run(hot, cold, "--verify", "full")
    assert code == 0 and doc["artifacts"][0]["status"] == "verified" and doc["artifacts"][0]["kind"] == "gguf-split"


def test_no_twin_and_size_mismatch(trees):
    hot, cold = trees
    write(hot / "a.gguf", payload(1000, 1))
    write(hot / "b.gguf", payload(1000, 2))
    write(cold / "b.gguf", payload(999, 2))
    code, doc, _ = run(hot, cold)
    assert code == 1
    got = by_name(doc)
    assert got["a.gguf"]["status"] == "none" and got["a.gguf"]["twin"] is None
    assert got["a.gguf"]["reason"] == "no cold folder holds a.gguf"
    assert got["b.gguf"]["status"] == "none"
    assert got["b.gguf"]["reason"] == f"{cold / 'b.gguf'} has 999 bytes, the hot file 1000"


def test_shard_set_twin_needs_every_shard_in_one_folder(trees):
    hot, cold = trees
    shards = write_shards(hot, "m", [100, 200])
    write(cold / "x" / shards[0].name, shards[0].read_bytes())
    write(cold / "y" / shards[1].name, shards[1].read_bytes())
    _, doc, _ = run(hot, cold)
    assert doc["artifacts"][0]["status"] == "none"
    assert doc["artifacts"][0]["reason"] == f"{cold / 'x'} lacks m-00002-of-00002.gguf"


def test_zero_byte_shards_never_match(trees):
    hot, cold = trees
    write(hot / "empty.gguf", b"")
    write(cold / "empty.gguf", b"")
    code, doc, _ = run(hot, cold)
    assert code == 1
    entry = doc["artifacts"][0]
    assert entry["status"] == "none" and entry["reason"] == "empty.gguf is empty (0 bytes); an empty file never matches"


def test_empty_set_never_matches():
    index = ColdIndex()
    assert structural_twins(Artifact("x", "gguf-split", "f", []), index) == ([], "the set is empty")


def test_hard_link_is_not_its_own_twin(trees):
    hot, cold = trees
    write(hot / "m.gguf", payload(5000, 1))
    os.link(hot / "m.gguf", cold / "m.gguf")
    code, doc, _ = run(hot, cold)
    assert code == 1
    entry = doc["artifacts"][0]
    assert entry["status"] == "none" and "is the hot file itself (same device and inode" in entry["reason"]


def test_symlink_is_not_its_own_twin_but_a_real_copy_elsewhere_is(trees):
    hot, cold = trees
    write(hot / "m.gguf", payload(5000, 1))
    os.symlink(hot / "m.gguf", cold / "m.gguf")
    _, doc, _ = run(hot, cold)
    assert doc["artifacts"][0]["status"] == "none"
    shutil.copy(hot / "m.gguf", cold.parent / "m.gguf")
    code, doc, _ = run(hot, cold, cold.parent)
    assert code == 0 and doc["artifacts"][0]["twin"] == str(cold.parent / "m.gguf")


def test_same_folder_is_a_usage_error(trees):
    hot, _ = trees
    write(hot / "m.gguf", payload(100, 1))
    code, doc, result = run(hot, hot, ok_codes=(2,))
    assert result.stderr == f"error: {hot}: is the hot folder itself; a twin must be in another folder\n"
    os.symlink(hot, hot.parent / "alias")
    code, doc, result = run(hot, hot.parent / "alias", ok_codes=(2,))
    assert "is the hot folder itself" in result.stderr


def test_cold_given_twice_is_searched_once(trees):
    hot, cold = trees
    write(hot / "m.gguf", payload(100, 1))
    copy_tree(hot, cold)
    code, doc, _ = run(hot, cold, cold, str(cold) + os.sep)
    assert code == 0 and doc["cold"] == [str(cold)]


def test_hot_inside_cold_is_skipped_in_the_twin_search(tmp_path):
    cold = tmp_path / "all models"
    hot = cold / "nvme"
    write(hot / "m.gguf", payload(2000, 1))
    code, doc, result = run(hot, cold)
    assert code == 1 and doc["artifacts"][0]["status"] == "none"
    assert "the hot folder lies inside" in result.stderr
    write(cold / "archive" / "m.gguf", payload(2000, 1))
    code, doc, _ = run(hot, cold)
    assert code == 0 and doc["artifacts"][0]["twin"] == str(cold / "archive" / "m.gguf")


def test_cold_inside_hot_is_not_scanned_as_hot(tmp_path):
    hot = tmp_path / "models"
    cold = hot / "cold archive"
    write(hot / "m.gguf", payload(2000, 1))
    write(cold / "m.gguf", payload(2000, 1))
    code, doc, result = run(hot, cold)
    assert code == 0 and [e["hot"] for e in doc["artifacts"]] == [str(hot / "m.gguf")]
    assert "lies inside the hot folder" in result.stderr


def test_missing_folder_is_exit_2(trees):
    hot, cold = trees
    _, _, result = run(hot, cold / "nope", ok_codes=(2,))
    assert result.stderr == f"error: {cold / 'nope'}: no such folder\n"
    _, _, result = run(hot, ok_codes=(2,))
    assert "give at least one COLD_DIR" in result.stderr


def test_incomplete_hot_set_without_twin(trees):
    hot, cold = trees
    shards = write_shards(hot, "m", [100, 200, 300])
    shards[1].unlink()
    code, doc, _ = run(hot, cold)
    assert code == 1
    entry = doc["artifacts"][0]
    assert entry["status"] == "incomplete" and entry["missing"] == ["m-00002-of-00003.gguf"]


def test_incomplete_hot_set_whose_twin_holds_everything(trees):
    # What an eviction killed halfway leaves: the rerun still sees the cold set as the twin.
    hot, cold = trees
    shards = write_shards(hot, "m", [100, 200, 300])
    copy_tree(hot, cold)
    shards[0].unlink()
    code, doc, _ = run(hot, cold)
    assert code == 0
    entry = doc["artifacts"][0]
    assert entry["status"] == "quick-match" and entry["reason"] == "cold holds the 1 member(s) the hot set lacks"


# --- verification levels -----------------------------------------------------------------------

def test_quick_catches_tail_difference_full_catches_middle(trees):
    hot, cold = trees
    data = bytearray(payload(3 * MIB, 7))
    write(hot / "tail.gguf", bytes(data))
    write(hot / "middle.gguf", bytes(data))
    tail, middle = bytearray(data), bytearray(data)
    tail[-10] ^= 1
    middle[MIB + MIB // 2] ^= 1
    write(cold / "tail.gguf", bytes(tail))
    write(cold / "middle.gguf", bytes(middle))
    _, doc, _ = run(hot, cold)
    got = by_name(doc)
    assert got["tail.gguf"]["status"] == "mismatch"
    assert got["tail.gguf"]["reason"] == "tail.gguf: first/last MiB differ from the hot copy"
    assert got["middle.gguf"]["status"] == "quick-match"  # quick cannot see the middle, by design
    assert got["middle.gguf"]["reclaimable_bytes"] == 0
    code, doc, _ = run(hot, cold, "--verify", "full")
    got = by_name(doc)
    assert code == 1
    assert got["middle.gguf"]["status"] == "mismatch"
    assert got["middle.gguf"]["reason"] == "middle.gguf: content differs from the hot copy (xxh3-128)"
    # The full verdict is remembered: a later quick run does not let the quick hint override it.
    code, doc, _ = run(hot, cold)
    got = by_name(doc)
    assert code == 1 and (got["middle.gguf"]["status"], got["middle.gguf"]["verify"]) == ("mismatch", "full")
    assert "found by an earlier --verify full" in got["middle.gguf"]["reason"]
    # ...until either file changes (a new mtime is a new state: the quick check counts again).
    os.utime(cold / "middle.gguf", ns=(1, 10**18))
    _, doc, _ = run(hot, cold)
    assert by_name(doc)["middle.gguf"]["status"] == "quick-match"


def test_preallocated_zero_tail_is_a_mismatch(trees):
    hot, cold = trees
    data = payload(3 * MIB, 3)
    write(hot / "m.gguf", data)
    with open(cold / "m.gguf", "wb") as handle:  # a download that preallocated, then stopped
        handle.write(data[:MIB])
        handle.truncate(len(data))
    _, doc, _ = run(hot, cold)
    entry = doc["artifacts"][0]
    assert entry["status"] == "mismatch"
    assert entry["reason"] == f"{cold / 'm.gguf'}: its last MiB is all zeros (a preallocated, interrupted download?)"


def test_verify_none_is_structural(trees):
    hot, cold = trees
    write(hot / "m.gguf", payload(100, 1))
    write(cold / "m.gguf", payload(100, 2))
    code, doc, _ = run(hot, cold, "--verify", "none")
    assert code == 0 and doc["artifacts"][0]["status"] == "structural" and doc["verify"] == "none"


def test_second_candidate_can_be_the_twin(trees):
    hot, cold = trees
    write(hot / "m.gguf", payload(3000, 1))
    write(cold / "a" / "m.gguf", payload(3000, 2))
    write(cold / "b" / "m.gguf", payload(3000, 1))
    code, doc, _ = run(hot, cold)
    assert code == 0 and doc["artifacts"][0]["twin"] == str(cold / "b" / "m.gguf")


def test_unreadable_cold_file_is_an_error_not_a_match(trees, monkeypatch):
    # Root ignores file modes here, so opening the twin is made to fail the way EACCES would.
    hot, cold = trees
    write(hot / "m.gguf", payload(3000, 1))
    write(cold / "m.gguf", payload(3000, 1))
    real_open = os.open

    def refusing_open(path, flags, *args, **kwargs):
        if str(path).startswith(str(cold)):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refusing_open)
    for level in ("quick", "full"):
        code, doc, _ = run(hot, cold, "--verify", level, "--no-cache")
        assert code == 1
        entry = doc["artifacts"][0]
        assert (entry["status"], entry["reason"]) == ("error", f"{cold / 'm.gguf'}: cannot read: Permission denied")


def test_file_changing_size_during_hashing(trees, monkeypatch):
    hot, cold = trees
    write(hot / "m.gguf", payload(64 * 1024, 1))
    write(cold / "m.gguf", payload(64 * 1024, 1))
    monkeypatch.setenv(hashing.TEST_CHUNK_ENV, "4096")

    def grow(path, done):
        if path.startswith(str(cold)) and done == 8192:
            with open(path, "ab") as handle:
                handle.write(b"more")

    monkeypatch.setattr(hashing, "chunk_hook", grow)
    code, doc, _ = run(hot, cold, "--verify", "full")
    assert code == 1
    entry = doc["artifacts"][0]
    assert entry["status"] == "error"
    assert entry["reason"].startswith(f"{cold / 'm.gguf'}: changed while being read (size 65536 -> 65540)")


# --- the hash cache ----------------------------------------------------------------------------

def test_second_run_reads_nothing(trees, monkeypatch, cache_folder):
    hot, cold = trees
    write_shards(hot, "m", [300000, 200000])
    copy_tree(hot, cold)
    assert run(hot, cold, "--verify", "full")[0] == 0
    assert (cache_folder / "coldtwin-hashes.json").exists()
    calls = []
    real = hashing.read_digest
    monkeypatch.setattr(hashing, "read_digest", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    assert run(hot, cold, "--verify", "full")[0] == 0
    assert calls == []
    # A rewritten file (new mtime) is hashed again; its unchanged twin is not.
    data = (cold / "m-00002-of-00002.gguf").read_bytes()
    os.utime(cold / "m-00002-of-00002.gguf", ns=(1, 1))
    (cold / "m-00002-of-00002.gguf").write_bytes(data)
    assert run(hot, cold, "--verify", "full")[0] == 0
    assert calls == [str(cold / "m-00002-of-00002.gguf")]


def test_quick_digests_are_cached_too(trees, monkeypatch):
    hot, cold = trees
    write(hot / "m.gguf", payload(3 * MIB, 1))
    copy_tree(hot, cold)
    assert run(hot, cold)[0] == 0
    calls = []
    real = hashing.quick_digest
    monkeypatch.setattr(hashing, "quick_digest", lambda *a: calls.append(a[0]) or real(*a))
    assert run(hot, cold)[0] == 0
    assert calls == []


def test_corrupt_cache_is_ignored_with_a_warning(trees, cache_folder):
    hot, cold = trees
    write(hot / "m.gguf", payload(1000, 1))
    copy_tree(hot, cold)
    cache_folder.mkdir()
    (cache_folder / "coldtwin-hashes.json").write_bytes(b"{not json")
    code, _, result = run(hot, cold)
    assert code == 0
    assert "hash cache unreadable" in result.stderr
    assert HashCache(str(cache_folder / "coldtwin-hashes.json")).entries  # rewritten, valid again


def test_cache_folder_follows_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("MOETOOLS_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert hashing.cache_dir() == os.path.join(str(tmp_path / "xdg"), "moetools")
    monkeypatch.setenv("MOETOOLS_CACHE_DIR", str(tmp_path / "mine"))
    assert hashing.cache_dir() == str(tmp_path / "mine")


# --- randomized: structural twins against a brute-force reference --------------------------------

def test_structural_twins_match_brute_force(tmp_path):
    rng = random.Random(5)
    for case in range(30):
        sizes = [rng.choice([0, 10, 20]) for _ in range(rng.randint(1, 3))]
        hot = [FileStat(f"h/{k}", f"s{k}", size, 1, 100 + k, 0, 0) for k, size in enumerate(sizes)]
        index = ColdIndex()
        for folder in ("c1", "c2", "c3"):
            for k, size in enumerate(sizes):
                if rng.random() < 0.8:
                    same_inode = rng.random() < 0.1
                    cold_size = size if rng.random() < 0.8 else size + 1
                    index.add(folder, FileStat(f"{folder}/s{k}", f"s{k}", cold_size, 1, 100 + k if same_inode else 1000 + k, 0, 0))
        twins, _ = structural_twins(Artifact("h/0", "gguf-split", "h", hot), index)
        expected = [folder for folder in ("c1", "c2", "c3")
                    if all(size > 0 for size in sizes)
                    and all(f"s{k}" in index.folders.get(folder, {})
                            and index.folders[folder][f"s{k}"].size == size
                            and index.folders[folder][f"s{k}"].ino != 100 + k for k, size in enumerate(sizes))]
        assert sorted(twin.folder for twin in twins) == expected, case


def test_cache_forgets_deleted_files_below_scanned_folders_only(tmp_path):
    cache = HashCache(str(tmp_path / "c.json"))
    kept = write(tmp_path / "scanned" / "a.gguf", b"abc")
    gone = write(tmp_path / "scanned" / "b.gguf", b"abcd")
    elsewhere = FileStat(str(tmp_path / "unplugged drive" / "c.gguf"), "c.gguf", 5, 1, 3, 0, 0)
    for member in (stat_of(kept), stat_of(gone), elsewhere):
        cache.put(member, full="f")
    gone.unlink()
    assert cache.prune([str(tmp_path / "scanned")]) == 1
    assert sorted(entry["path"] for entry in cache.entries.values()) == [str(kept), str(elsewhere.path)]


def test_file_systems_without_inode_numbers(tmp_path):
    # Some file systems report inode 0 for every file: identity and cache key fall back to the path.
    one, two = (FileStat(str(tmp_path / name), name, 10, 1, 0, 5, 5) for name in ("one", "two"))
    assert one.identity != two.identity
    cache = HashCache(None)
    cache.put(one, full="1")
    assert cache.get(two, "full") is None and cache.get(one, "full") == "1"


# --- the report, exactly ----------------------------------------------------------------------

def test_json_report_exactly(trees):
    hot, cold = trees
    shards = write_shards(hot / "k2", "k2", [3000, 2000], ext="safetensors")
    copy_tree(hot / "k2", cold / "k2")
    lone = write(hot / "lone.gguf", payload(100, 3))
    code, doc, result = run(hot, cold)
    assert code == 1 and result.stderr == ""
    assert doc == {
        "hot": str(hot),
        "cold": [str(cold)],
        "verify": "quick",
        "dry_run": True,
        "artifacts": [
            {"hot": str(shards[0]), "bytes": 5000, "status": "quick-match", "verify": "quick",
             "twin": str(cold / "k2" / shards[0].name), "reason": "", "reclaimable_bytes": 0,
             "kind": "safetensors", "files": 2, "missing": [],
             "last_used_ns": max(max(s.stat().st_atime_ns, s.stat().st_mtime_ns) for s in shards),
             "warnings": [], "action": None},
            {"hot": str(lone), "bytes": 100, "status": "none", "verify": "quick", "twin": None,
             "reason": "no cold folder holds lone.gguf", "reclaimable_bytes": 0, "kind": "gguf", "files": 1,
             "missing": [], "last_used_ns": max(lone.stat().st_atime_ns, lone.stat().st_mtime_ns),
             "warnings": [], "action": None},
        ],
        "hf_repos": [],
        "summary": {"artifacts": 2, "bytes": 5100, "twinned": 1, "verified_full": 0, "quick_match": 1,
                    "structural": 0, "reclaimable_bytes": 0, "freed_bytes": 0, "free_target_bytes": None},
        "problems": [],
        "log": None,
        "ok": False,
        "deeper": [],
    }


def test_table_rows(trees):
    from moetools.coldtwin.command import _tables

    hot, cold = trees
    write(hot / "sub" / "a.gguf", payload(3 * MIB, 1))
    copy_tree(hot / "sub", cold / "x")
    write_shards(hot / "sub", "k2", [100, 100], ext="safetensors")
    copy_tree(hot / "sub", cold / "sub")
    write(hot / "b.gguf", payload(100, 2))
    _, doc, _ = run(hot, cold, "--verify", "full")
    (table,) = _tables(doc, str(hot), width=80)
    assert table.title == f"cold twins of {hot} in {cold} (verify full)"
    assert table.columns == ["artifact", "size", "status", "twin / reason"]
    assert table.rows == [
        ["b", "100 B", "none", "no cold folder holds b.gguf"],
        [os.path.join("sub", "a"), "3.0 MiB", "verified (full)", f"twin {os.path.join('x', 'a.gguf')}"],
        [os.path.join("sub", "k2") + " ×2", "200 B", "verified (full)", "twin at the same path"],
    ]
    assert table.caption == "2 of 3 have a twin (2 verified in full); 3.0 MiB reclaimable"


def test_tables_fold_long_names_from_the_left_at_80_columns(trees):
    from moetools.coldtwin.command import _tables, fold_left
    from moetools.output import print_tables

    assert fold_left("models/DeepSeek-V3-Q2_K", 12) == "…eek-V3-Q2_K"
    assert fold_left("short", 12) == "short"
    hot, cold = trees
    deep = "a very long folder name" + os.sep + "another long folder"
    write(hot / deep / "tiny-gpt-oss-20b-Q4_K_M-imatrix.gguf", payload(100, 1))
    code, doc, _ = run(hot, cold)
    table = _tables(doc, str(hot), width=80)[0]
    assert table.rows[0][0] == "…-20b-Q4_K_M-imatrix"  # the end (size, quant, variant) is kept
    assert doc["artifacts"][0]["hot"] == str(hot / deep / "tiny-gpt-oss-20b-Q4_K_M-imatrix.gguf")  # JSON: whole
    import io

    out = io.StringIO()
    print_tables([table], stream=out)
    assert max(len(line) for line in out.getvalue().splitlines()) <= 80  # rich: 80 columns off a terminal
    assert "…-20b-Q4_K_M-imatrix" in out.getvalue()


def test_real_converter_gguf_twins(tmp_path, shared_models):
    hot, cold = tmp_path / "hot", tmp_path / "cold"
    hot.mkdir()
    for model in shared_models:
        shutil.copy(model, hot / model.name)
    copy_tree(hot, cold)
    code, doc, _ = run(hot, cold, "--verify", "full")
    assert code == 0 and sorted(os.path.basename(e["hot"]) for e in doc["artifacts"]) == [m.name for m in shared_models]


def test_full_reads_each_tree_on_its_own_thread_in_order(trees):
    import threading

    from moetools.coldtwin.core import structural_twins, verify
    from moetools.coldtwin.hashing import Hasher
    from moetools.coldtwin.scan import index_cold, scan_hot

    hot, cold = trees
    write_shards(hot, "m", [3000, 2000, 1000, 500])
    copy_tree(hot, cold)
    (artifact,), _ = scan_hot(str(hot), 0, MIB)
    index, _ = index_cold([str(cold)], 0)
    (twin,), _ = structural_twins(artifact, index)
    seen = []
    hasher = Hasher(HashCache(None))
    real_full = hasher.full
    hasher.full = lambda member, stop=None: seen.append((threading.get_ident(), member.path)) or real_full(member, stop)
    assert verify(artifact, twin, "full", hasher) is None
    threads = {}
    for ident, path in seen:
        threads.setdefault(ident, []).append(path)
    assert sorted(threads.values()) == sorted([[m.path for m in artifact.files], [m.path for m in twin.files]])
    # A difference in the first file stops both threads before the last file.
    data = bytearray((cold / "m-00001-of-00004.gguf").read_bytes())
    data[1500] ^= 1
    (cold / "m-00001-of-00004.gguf").write_bytes(bytes(data))
    index, _ = index_cold([str(cold)], 0)
    (twin,), _ = structural_twins(artifact, index)
    assert verify(artifact, twin, "full", Hasher(HashCache(None))) == "m-00001-of-00004.gguf: content differs from the hot copy (xxh3-128)"


def test_stop_event_ends_a_read_within_a_chunk(tmp_path, monkeypatch):
    import threading

    monkeypatch.setenv(hashing.TEST_CHUNK_ENV, "4096")
    path = write(tmp_path / "f", payload(64 * 1024, 1))
    stop = threading.Event()
    reads = []
    monkeypatch.setattr(hashing, "chunk_hook", lambda p, done: reads.append(done) or (done == 8192 and stop.set()))
    with pytest.raises(hashing.Stopped):
        read_digest(str(path), stat_of(path), stop=stop)
    assert reads == [4096, 8192]


def test_zero_tail_on_both_sides_is_a_quick_match_that_says_so(trees):
    hot, cold = trees
    data = payload(MIB, 4) + bytes(2 * MIB)  # the last MiB is written zeros in both copies
    write(hot / "m.gguf", data)
    write(cold / "m.gguf", data)
    _, doc, _ = run(hot, cold)
    entry = doc["artifacts"][0]
    assert entry["status"] == "quick-match" and entry["reclaimable_bytes"] == 0
    assert entry["reason"] == ("m.gguf: the last MiB is all zeros in both copies (a preallocated download?); "
                               "--verify full reads every byte")
    code, doc, _ = run(hot, cold, "--verify", "full")
    assert code == 0 and doc["artifacts"][0]["status"] == "verified"


def _has_holes(path):
    seek_data = getattr(os, "SEEK_DATA", None)
    if seek_data is None:
        return False
    with open(path, "rb") as handle:
        try:
            return os.lseek(handle.fileno(), os.path.getsize(path) - MIB, seek_data) >= os.path.getsize(path)
        except OSError:
            return True


def test_identical_sparse_copies_are_a_quick_match_and_verify_in_full(trees):
    hot, cold = trees
    head = payload(MIB // 2, 9)
    for folder in (hot, cold):
        with open(folder / "sparse.gguf", "wb") as handle:
            handle.write(head)
            handle.truncate(5 * MIB)  # a hole of 4.5 MiB at the end
    _, doc, _ = run(hot, cold)
    entry = doc["artifacts"][0]
    assert entry["status"] == "quick-match"
    if _has_holes(hot / "sparse.gguf") and _has_holes(cold / "sparse.gguf"):
        assert "both tails are holes (sparse files)" in entry["reason"]
    else:  # a file system that allocates every block (or cannot say): zeros are all it can tell
        assert "the last MiB is all zeros in both copies" in entry["reason"]
    code, doc, _ = run(hot, cold, "--verify", "full")
    assert code == 0 and doc["artifacts"][0]["status"] == "verified"


def test_cold_link_into_another_hot_file_is_not_a_twin(trees):
    # Two identical hot copies; the cold "twin" of one is a link to the other: not cold storage.
    hot, cold = trees
    write(hot / "a" / "m.gguf", payload(3000, 1))
    write(hot / "b" / "m.gguf", payload(3000, 1))
    os.link(hot / "b" / "m.gguf", cold / "m.gguf")
    code, doc, _ = run(hot, cold, "--evict", "--yes")
    assert code == 1
    reasons = sorted(entry["reason"] for entry in doc["artifacts"])
    assert reasons == [f"{cold / 'm.gguf'} is a file of the hot tier (same device and inode as another hot file)",
                       f"{cold / 'm.gguf'} is the hot file itself (same device and inode: a link or the same folder twice)"]
    assert (hot / "a" / "m.gguf").exists() and (hot / "b" / "m.gguf").exists()


@pytest.mark.skipif(not hasattr(os, "O_NOATIME"), reason="no O_NOATIME here (Windows, macOS): reading updates atime")
def test_verifying_leaves_atime_alone(trees):
    # --free ranks models by atime; hashing them must not make them look just used.
    hot, cold = trees
    path = write(hot / "m.gguf", payload(3 * MIB, 1))
    copy_tree(hot, cold)
    os.utime(path, ns=(10**18, 10**18))
    os.utime(cold / "m.gguf", ns=(10**18, 10**18))
    assert run(hot, cold, "--verify", "full")[0] == 0
    assert path.stat().st_atime_ns == 10**18 and (cold / "m.gguf").stat().st_atime_ns == 10**18


def test_quick_digest_sees_a_file_changing_while_read(tmp_path, monkeypatch):
    path = write(tmp_path / "f", payload(3 * MIB, 1))
    member = stat_of(path)
    real = hashing.pread

    def pread_then_truncate(fd, length, offset):
        data = real(fd, length, offset)
        os.truncate(path, MIB)
        return data

    monkeypatch.setattr(hashing, "pread", pread_then_truncate)
    with pytest.raises(hashing.FileChanged, match=r"changed while being read \(size 3145728 -> 1048576\)"):
        quick_digest(str(path), member)


@pytest.mark.parametrize("digest", ["read_digest", "quick_digest"])
def test_a_read_error_names_the_file(tmp_path, digest):
    # A read on a descriptor fails with an OSError that names no file (or the descriptor's number):
    # here a folder opened for reading, which reads as EISDIR on Linux.
    folder = tmp_path / "not a file"
    folder.mkdir()
    member = stat_of(folder)
    with pytest.raises(OSError) as raised:
        getattr(hashing, digest)(str(folder), member)
    assert raised.value.filename == str(folder)


def test_a_dead_runs_temporaries_in_the_cache_folder_are_removed(trees, cache_folder):
    import subprocess
    import sys

    hot, cold = trees
    write(hot / "m.gguf", payload(3000, 1))
    write(cold / "m.gguf", payload(3000, 1))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    cache_folder.mkdir(parents=True, exist_ok=True)
    stale = write(cache_folder / f".coldtwin-hashes.json.{dead.pid}-abcd1234.tmp", b"{")
    alive = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        live = write(cache_folder / f".coldtwin-hashes.json.{alive.pid}-abcd1234.tmp", b"{")
        assert run(hot, cold)[0] == 0
        assert not stale.exists() and live.exists()  # a running process's temporary is its own business
    finally:
        alive.communicate(b"")
