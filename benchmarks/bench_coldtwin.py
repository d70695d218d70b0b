"""cold-twin benchmark: full verification against a plain read, the hash cache, the structural scan.

    .venv/bin/python benchmarks/bench_coldtwin.py [--gib 1.0] [--files 4] [--dir /tmp]

1. `--verify full` of a hot tree against its cold copy (xxh3-128 of every byte, hot and cold read
   by two threads) against a plain sequential Python read loop over the same files (the fastest of
   128 KiB, 1 MiB and 16 MiB reads). Both with the files dropped from the page cache
   (posix_fadvise DONTNEED after fsync) before each run, then with the files cached; best of 3
   runs each, as the build machine is shared. Target: throughput >= 0.8x the plain read.
2. A first `--verify full` run that writes the hash cache (page cache dropped), then a second one
   that reads it. Target: >= 50x faster.
3. The structural scan (names, sizes, one header per split set, twin search) of 10,000 files
   (5,000 hot, 5,000 cold) against a bare os.walk + stat of the same files. Target: under 1 s.
4. The eviction's re-verify (every cold byte read again from the disk, the hot digests from the hash
   cache) against `cat COLD_FILES > /dev/null` of the same files, page cache dropped before each;
   in-process (the re-read alone) and the whole `cold-twin --evict --yes` (the hot files restored as
   hard links of a stash before each run, so their digests stay cached). Best of 3. Target: ~1x,
   one sequential read of the cold copy.
Files are written to a temporary folder and removed at the end.
"""

import argparse
import os
import shutil
import struct
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import drop_cache  # noqa: E402

from moetools.coldtwin.core import check_all  # noqa: E402
from moetools.coldtwin.hashing import HashCache, Hasher  # noqa: E402
from moetools.coldtwin.scan import index_cold, scan_hot  # noqa: E402

MIB = 1024 * 1024




def write_files(folder, count, size, seed):
    os.makedirs(folder, exist_ok=True)
    block = os.urandom(64 * MIB)
    paths = []
    for k in range(count):
        path = os.path.join(folder, f"bench-{k + 1:05d}-of-{count:05d}.gguf")
        with open(path, "wb") as handle:
            written = 0
            while written < size:
                piece = block[: min(len(block), size - written)]
                handle.write(struct.pack("<QQ", seed, written) + piece[16:])
                written += len(piece)
            handle.flush()
            os.fsync(handle.fileno())
        paths.append(path)
    return paths


def plain_read(paths, chunk=16 * MIB):
    buffer = bytearray(chunk)
    total = 0
    for path in paths:
        with open(path, "rb", buffering=0) as handle:
            while True:
                count = handle.readinto(buffer)
                if not count:
                    break
                total += count
    return total


def verify_full(hot, cold, cache_path):
    artifacts, _ = scan_hot(hot, 2, 64 * MIB)
    index, _ = index_cold([cold], 2)
    cache = HashCache(cache_path)
    results = check_all(artifacts, index, "full", Hasher(cache))
    cache.save()
    assert all(result.status == "verified" for result in results), [(r.status, r.reason) for r in results]
    return sum(result.artifact.bytes for result in results)


def timed(function, *args):
    start = time.perf_counter()
    value = function(*args)
    return time.perf_counter() - start, value


def tiny_gguf_header(count):
    key = b"split.count"
    return b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(key)) + key + struct.pack("<IH", 2, count)


def make_scan_tree(root, files_per_side=5000, shards=8):
    """5,000 hot and 5,000 cold files: GGUF shard sets (real headers with split.count) in folders."""
    for side in ("hot", "cold"):
        for index in range(files_per_side // shards):
            folder = os.path.join(root, side, f"vendor {index % 10}", f"model {index}")
            os.makedirs(folder, exist_ok=True)
            for k in range(1, shards + 1):
                with open(os.path.join(folder, f"m{index}-{k:05d}-of-{shards:05d}.gguf"), "wb") as handle:
                    handle.write(tiny_gguf_header(shards) + bytes(k))


def structural_scan(hot, cold):
    from moetools.coldtwin.core import structural_twins

    artifacts, _ = scan_hot(hot, 2, 64 * MIB)
    index, _ = index_cold([cold], 2)
    matched = sum(1 for artifact in artifacts if structural_twins(artifact, index)[0])
    return len(artifacts), matched


def bare_walk(*roots):
    count = 0
    for root in roots:
        for folder, _, names in os.walk(root):
            for name in names:
                os.stat(os.path.join(folder, name))
                count += 1
    return count


def reverify_once(hot, cold, cache_path):
    """The re-read an eviction does before its first unlink, for every artifact (no unlink)."""
    from moetools.coldtwin.actions import reverify_twin

    artifacts, _ = scan_hot(hot, 2, 64 * MIB)
    index, _ = index_cold([cold], 2)
    hasher = Hasher(HashCache(cache_path))
    results = check_all(artifacts, index, "full", hasher)  # every digest from the hash cache: no read
    hasher.read_now.clear()
    for result in results:
        reverify_twin(result.artifact, result.twin, hasher)
    return sum(result.artifact.bytes for result in results)


def eviction_reverify(root, hot, cold, paths, cold_paths, cache_path):
    import subprocess

    print("\n4. eviction re-verify (cold copy read again in full) vs `cat COLD_FILES > /dev/null`; page cache dropped")
    cold_bytes = sum(os.path.getsize(path) for path in cold_paths)
    t_cat = t_reverify = t_cli = t_check = float("inf")
    stash = os.path.join(root, "stash")
    os.makedirs(stash)
    for path in paths:
        os.link(path, os.path.join(stash, os.path.basename(path)))
    env = dict(os.environ, MOETOOLS_CACHE_DIR=os.path.join(root, "cli cache"))
    subprocess.run([sys.executable, "-m", "moetools", "cold-twin", hot, cold, "--verify", "full", "--json"],
                   env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)  # the hash cache
    for _ in range(3):
        for path in paths:  # the hot copies back (same inodes: their digests are still cached)
            if not os.path.exists(path):
                os.link(os.path.join(stash, os.path.basename(path)), path)
        drop_cache(*cold_paths)
        elapsed, _ = timed(lambda: subprocess.run("cat " + " ".join(f"'{p}'" for p in cold_paths) + " > /dev/null",
                                                  shell=True, check=True))
        t_cat = min(t_cat, elapsed)
        drop_cache(*cold_paths)
        elapsed, got = timed(reverify_once, hot, cold, cache_path)
        assert got == cold_bytes, (got, cold_bytes)
        t_reverify = min(t_reverify, elapsed)
        # The same run without the eviction: start-up, scan, digests from the cache (its fixed cost).
        check = [sys.executable, "-m", "moetools", "cold-twin", hot, cold, "--verify", "full", "--json"]
        elapsed, _ = timed(lambda: subprocess.run(check, env=env, stdout=subprocess.DEVNULL,
                                                  stderr=subprocess.DEVNULL, check=False))
        t_check = min(t_check, elapsed)
        drop_cache(*cold_paths)
        command = [sys.executable, "-m", "moetools", "cold-twin", hot, cold, "--evict", "--yes", "--json",
                   "--log", os.path.join(root, "evict.jsonl")]
        elapsed, done = timed(lambda: subprocess.run(command, env=env, stdout=subprocess.DEVNULL,
                                                     stderr=subprocess.DEVNULL, check=False))
        assert done.returncode == 0 and not any(os.path.exists(path) for path in paths)
        t_cli = min(t_cli, elapsed)
    for path in paths:
        if not os.path.exists(path):
            os.link(os.path.join(stash, os.path.basename(path)), path)
    rate = cold_bytes / t_cat / 1e6
    print(f"   cat {rate:.0f} MB/s ({t_cat:.2f} s); re-verify {cold_bytes / t_reverify / 1e6:.0f} MB/s ({t_reverify:.2f} s): "
          f"{t_reverify / t_cat:.2f}x the time of cat")
    print(f"   whole `--evict --yes` {t_cli:.2f} s, of which {t_check:.2f} s is the same command without the eviction "
          f"(start-up, scan, cached digests): the eviction adds {(t_cli - t_check) / t_cat:.2f}x the time of cat")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.0, help="size of the hot tree (the cold copy doubles it)")
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--dir", default=None, help="where to write the temporary files")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="bench-coldtwin-", dir=args.dir)
    try:
        hot, cold = os.path.join(root, "hot"), os.path.join(root, "cold")
        size = int(args.gib * 1024**3) // args.files
        print(f"writing {args.files} x {size / MIB:.0f} MiB hot files and their cold copies in {root} ...", flush=True)
        paths = write_files(hot, args.files, size, 1)
        cold_paths = []
        os.makedirs(cold)
        for path in paths:
            target = os.path.join(cold, os.path.basename(path))
            shutil.copyfile(path, target)
            cold_paths.append(target)
        drop_cache(*cold_paths)
        everything = paths + cold_paths
        total = 2 * size * args.files
        cache_path = os.path.join(root, "cache", "hashes.json")

        print("\n1. --verify full vs a plain sequential read of the same files (hot + cold); best of 3 each,")
        print("   the plain read's best over chunk sizes 128 KiB (cat), 1 MiB and 16 MiB")
        for label, drop in (("page cache dropped", True), ("page cache warm", False)):
            t_read = t_full = float("inf")
            for _ in range(3):
                for chunk in (128 * 1024, MIB, 16 * MIB):
                    if drop:
                        drop_cache(*everything)
                    elapsed, got = timed(plain_read, everything, chunk)
                    assert got == total
                    t_read = min(t_read, elapsed)
                if drop:
                    drop_cache(*everything)
                elapsed, hashed = timed(verify_full, hot, cold, None)
                assert 2 * hashed == total
                t_full = min(t_full, elapsed)
            read_rate, full_rate = total / t_read, total / t_full
            print(f"   {label:19s}: plain read {read_rate / 1e6:8.0f} MB/s ({t_read:.2f} s), "
                  f"verify full {full_rate / 1e6:8.0f} MB/s ({t_full:.2f} s): ratio {full_rate / read_rate:.2f}x "
                  f"(target >= 0.8x)")

        print("\n2. second --verify full run with the hash cache vs the first")
        drop_cache(*everything)
        t_first, _ = timed(verify_full, hot, cold, cache_path)
        t_cached, _ = timed(verify_full, hot, cold, cache_path)
        print(f"   first {t_first:.3f} s, cached {t_cached * 1e3:.2f} ms: {t_first / t_cached:.0f}x faster (target >= 50x)")
        eviction_reverify(root, hot, cold, paths, cold_paths, cache_path)
        shutil.rmtree(hot)
        shutil.rmtree(cold)

        print("\n3. structural scan of 10,000 files (5,000 hot in 625 shard sets, 5,000 cold)")
        scan_root = os.path.join(root, "scan")
        make_scan_tree(scan_root)
        t_walk, count = timed(bare_walk, os.path.join(scan_root, "hot"), os.path.join(scan_root, "cold"))
        t_scan, (artifacts, matched) = timed(structural_scan, os.path.join(scan_root, "hot"), os.path.join(scan_root, "cold"))
        assert count == 10000 and matched == artifacts == 625, (count, artifacts, matched)
        print(f"   bare os.walk + stat {t_walk * 1e3:.0f} ms; scan + header checks + twin search {t_scan * 1e3:.0f} ms "
              f"({t_scan / t_walk:.2f}x the bare walk; target under 1 s: {'yes' if t_scan < 1 else 'NO'})")
        import subprocess

        command = [sys.executable, "-m", "moetools", "cold-twin", os.path.join(scan_root, "hot"),
                   os.path.join(scan_root, "cold"), "--verify", "none", "--json"]
        env = dict(os.environ, MOETOOLS_CACHE_DIR=os.path.join(root, "cache"))
        t_cli, done = timed(lambda: subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        t_start, _ = timed(subprocess.run, [sys.executable, "-c", "pass"])
        print(f"   the whole CLI (moetools cold-twin --verify none, process start included): {t_cli * 1e3:.0f} ms, "
              f"exit {done.returncode}; a bare `python -c pass` takes {t_start * 1e3:.0f} ms")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
