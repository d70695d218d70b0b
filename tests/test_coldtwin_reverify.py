"""cold-twin removes nothing on the cache's word: bit rot after a cached full verify, --trust-cache,
a reused cold copy, and the folders an eviction empties."""

import os

from click.testing import CliRunner

from moetools.cli import cli
from tests.coldtwin_util import MIB, by_name, payload, run, write, write_shards
from tests.coldtwin_util import cache_folder, trees  # noqa: F401 (fixtures used by name)


def rot(path, offset):
    """Flip one byte of `path` in place and put its mtime back, as bit rot leaves a file."""
    st = os.stat(path)
    with open(path, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0x40]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(path).st_size == st.st_size and os.stat(path).st_mtime_ns == st.st_mtime_ns


def test_bit_rot_after_a_cached_full_verify_stops_the_eviction(trees):
    hot, cold = trees
    data = payload(8 * MIB, 1)
    write(hot / "m.gguf", data)
    write(cold / "m.gguf", data)
    code, doc, _ = run(hot, cold, "--verify", "full")
    assert code == 0 and doc["artifacts"][0]["status"] == "verified"
    rot(cold / "m.gguf", 4_000_000)  # cmp would say: differ at byte 4,000,001
    # The cache still says "verified (full)" (size and mtime are the same)...
    code, doc, _ = run(hot, cold, "--verify", "full")
    assert doc["artifacts"][0]["status"] == "verified"
    # ...but an eviction reads the cold copy again first, and refuses, naming the file.
    code, doc, _ = run(hot, cold, "--evict", "--yes")
    assert code == 1
    action = doc["artifacts"][0]["action"]
    assert action["done"] is False
    assert action["error"] == (f"{cold / 'm.gguf'}: the cold copy no longer matches the hot one (read just now, "
                               "xxh3-128 differs: bit rot or an edit?); nothing removed")
    assert (hot / "m.gguf").read_bytes() == data
    # What the re-read found is remembered: the next quick run reports the mismatch, not a quick match.
    code, doc, _ = run(hot, cold)
    assert code == 1 and (doc["artifacts"][0]["status"], doc["artifacts"][0]["verify"]) == ("mismatch", "full")


def test_trust_cache_skips_the_re_read_and_help_names_the_risk(trees):
    hot, cold = trees
    data = payload(3 * MIB, 2)
    write(hot / "m.gguf", data)
    write(cold / "m.gguf", data)
    run(hot, cold, "--verify", "full")
    rot(cold / "m.gguf", MIB + 7)
    code, doc, _ = run(hot, cold, "--evict", "--yes", "--trust-cache")
    assert code == 0 and doc["artifacts"][0]["action"]["done"] is True  # the risk, as documented
    assert not (hot / "m.gguf").exists()
    help_text = CliRunner().invoke(cli, ["cold-twin", "--help"], terminal_width=200).output
    assert "--trust-cache" in help_text and "RISK" in help_text and "bit rot" in help_text


def test_an_eviction_in_the_run_that_read_the_cold_copy_reads_it_once(trees, monkeypatch):
    from moetools.coldtwin import hashing

    hot, cold = trees
    data = payload(2 * MIB + 5, 3)
    write(hot / "m.gguf", data)
    write(cold / "m.gguf", data)
    reads = []
    monkeypatch.setattr(hashing, "chunk_hook", lambda path, total: reads.append(path))
    code, doc, _ = run(hot, cold, "--evict", "--yes")
    assert code == 0 and doc["artifacts"][0]["action"]["done"] is True
    cold_reads = [path for path in reads if path == str(cold / "m.gguf")]
    assert len(cold_reads) == 3  # one pass of 1 MiB chunks over 2 MiB + 5 bytes, not two


def test_a_second_run_evicts_only_after_reading_the_cold_copy_again(trees, monkeypatch):
    from moetools.coldtwin import hashing

    hot, cold = trees
    data = payload(MIB + 1, 4)
    write(hot / "m.gguf", data)
    write(cold / "m.gguf", data)
    run(hot, cold, "--verify", "full")
    reads = []
    monkeypatch.setattr(hashing, "chunk_hook", lambda path, total: reads.append(path))
    code, doc, _ = run(hot, cold, "--evict", "--yes")
    assert code == 0
    assert reads == [str(cold / "m.gguf")] * 2  # the cold copy again, in full; the hot one from the cache


def test_migration_reusing_a_rotten_cold_copy_refuses(trees):
    hot, cold = trees
    shards = write_shards(hot, "k", [2 * MIB, 2 * MIB])
    write(cold / shards[0].name, shards[0].read_bytes())  # an interrupted migration's first shard
    run(hot / shards[0].name, cold, "--verify", "full")  # cached: the two copies are equal
    rot(cold / shards[0].name, MIB)
    code, doc, _ = run(hot, "--migrate", cold, "--yes")
    assert code == 1
    error = doc["artifacts"][0]["action"]["error"]
    assert error == f"{cold / shards[0].name}: already exists with different content (xxh3-128); not overwritten"
    assert sorted(os.listdir(hot)) == [shards[0].name, shards[1].name]


def test_eviction_removes_the_folders_it_emptied_and_no_others(trees):
    hot, cold = trees
    write(hot / "a" / "b" / "m.gguf", payload(1000, 5))
    write(hot / "a" / "notes.txt", b"keep me")
    write(hot / "c" / "n.gguf", payload(1000, 6))
    (hot / "empty before").mkdir()
    (hot / "c" / "empty inside").mkdir()
    write(cold / "a" / "b" / "m.gguf", payload(1000, 5))
    write(cold / "c" / "n.gguf", payload(1000, 6))
    code, doc, _ = run(hot, cold, "--evict", "--yes")
    assert code == 0 and all(entry["action"]["done"] for entry in doc["artifacts"])
    assert sorted(os.listdir(hot)) == ["a", "c", "empty before"]
    assert os.listdir(hot / "a") == ["notes.txt"]  # b is gone, a still holds a file
    assert os.listdir(hot / "c") == ["empty inside"]  # not emptied by the eviction: kept


def test_evicting_a_file_below_hot_given_as_a_file_keeps_its_folder(trees):
    hot, cold = trees
    write(hot / "m.gguf", payload(1000, 7))
    write(cold / "m.gguf", payload(1000, 7))
    code, _, _ = run(hot / "m.gguf", cold, "--evict", "--yes")
    assert code == 0 and hot.is_dir() and os.listdir(hot) == []
    assert by_name(run(hot, cold)[1]) == {}


def test_progress_bars_say_what_they_do_with_byte_totals(trees, monkeypatch):
    from moetools.coldtwin import command
    from moetools.progress import progress as real_progress

    bars = []

    def recording(total=None, desc="", **kwargs):
        bar = real_progress(total=total, desc=desc, enabled=False)
        bars.append([desc, total, bar])
        return bar

    monkeypatch.setattr(command, "progress", recording)
    hot, cold = trees
    write(hot / "twinned.gguf", payload(3000, 1))
    write(cold / "twinned.gguf", payload(3000, 1))
    write(hot / "sub" / "alone.gguf", payload(5000, 2))
    run(hot, cold, "--verify", "full")  # digests cached: the eviction below reads the cold copy again
    bars.clear()
    code, _, _ = run(hot, cold, "--migrate", cold, "--evict", "--yes")
    assert code == 0
    seen = [(desc, total, bar.n) for desc, total, bar in bars]
    assert seen == [
        ("verify full: reading hot and cold", 6000, 6000),
        ("migrate alone.gguf: copy, read back", 10000, 10000),
        ("evict twinned.gguf: re-reading the cold copy", 3000, 3000),
    ]  # each bar reaches its total (tqdm derives the ETA from it); the migrated copy is not read a third time
