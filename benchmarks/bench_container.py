"""Benchmark container-encode and random expert fetch, as ratios against baselines in the same run.

    .venv/bin/python benchmarks/bench_container.py [--experts 48] [--layers 4] [--fetches 300] [--dir DIR]

1. Encode throughput: `moetools container-encode` (a subprocess) against `cp` of the model file plus
   fsync, on the same disk, both from a cold page cache (posix_fadvise DONTNEED on the source).
   Rates are source expert bytes per second; the ratio is encode / cp (target >= 0.8). Peak RSS of
   the encoder (its /proc VmHWM) for this model and for a tiny one (target < 300 MiB, size-independent).
2. Resume: a rerun into the finished container, its source unchanged (the manifest's source identity
   matches: banks verified against their sidecars only) and touched (mtime moved, bytes the same: each
   bank's records rebuilt from the source and hashed against the sidecar), each as a ratio of the
   full encode of the same run (cold source for all three).
3. Random expert fetch: the same random sequence of (layer, expert), one aligned read per expert
   from the container against three reads (gate, up, down) per expert from the GGUF. O_DIRECT when
   the file system allows it (GGUF slices are then widened to 4 KiB boundaries, as an O_DIRECT reader
   of a raw GGUF must), else buffered reads after dropping both files from the page cache.

The test model is real (non-sparse): a qwen3moe-layout GGUF written header-only by moetools.synth,
then every tensor's data filled with random bytes. It lives in a temporary folder removed at the end.
"""

import argparse
import json
import mmap
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from common import drop_cache  # noqa: E402

from moetools import synth  # noqa: E402
from moetools.container.reader import ContainerReader  # noqa: E402
from moetools.gguf import open_model  # noqa: E402

PAGE = 4096
MiB = 1024 * 1024


def build_model(folder, n_layer, n_expert, n_embd=2048, n_ff_exp=768):
    """A real GGUF of a few hundred MB: synth header, tensor data filled with random bytes."""
    os.makedirs(folder, exist_ok=True)
    spec = synth.tiny("qwen3moe", synth.Types(expert=synth.Q4_K), n_layer=n_layer, n_embd=n_embd, n_ff_exp=n_ff_exp,
                      n_expert=n_expert, n_head=16, n_head_kv=4, head=128, vocab=4096)
    path = synth.write_model(spec, os.path.join(folder, "bench-moe.gguf"), sparse=True)[0]
    fill_random(path, seed=0)
    return path


def fill_random(path, seed):
    """Overwrite every tensor's bytes in place with random bytes from `seed` (same layout: a
    re-quantized model as far as the container's identity checks can tell)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    model = open_model(path)
    with open(path, "r+b") as handle:
        for tensor in model.tensors:
            done = 0
            while done < tensor.n_bytes:
                chunk = min(32 * MiB, tensor.n_bytes - done)
                handle.seek(tensor.offset + done)
                handle.write(rng.bytes(chunk))
                done += chunk
        handle.flush()
        os.fsync(handle.fileno())
    model.close()




# Runs `moetools ARGS...` and, at exit, reports the process's own peak RSS (VmHWM). getrusage's
# ru_maxrss would not do: a forked child inherits the parent's high-water mark across exec.
CHILD = """
import atexit, sys
def report():
    with open("/proc/self/status") as status:
        peak = next(line.split()[1] for line in status if line.startswith("VmHWM"))
    sys.stderr.write(f"\\nVmHWM_KB {peak}\\n")
atexit.register(report)
sys.argv = ["moetools", *sys.argv[1:]]
from moetools.cli import main
main()
"""


def run_moetools(args):
    """Run `moetools ARGS`; (wall seconds, stdout, peak RSS bytes of that process)."""
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CHILD, *args], capture_output=True)
    wall = time.perf_counter() - started
    if proc.returncode:
        raise SystemExit(f"moetools {args[0]} failed ({proc.returncode}): {proc.stderr.decode(errors='replace')}")
    peak_kb = int(proc.stderr.decode().rsplit("VmHWM_KB", 1)[1].split()[0])
    return wall, proc.stdout, peak_kb * 1024


def time_cp(src, dst):
    drop_cache(src)
    started = time.perf_counter()
    subprocess.run(["cp", src, dst], check=True)
    fd = os.open(dst, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    seconds = time.perf_counter() - started
    os.unlink(dst)
    return seconds


def time_encode(model_path, out_dir):
    drop_cache(model_path)
    shutil.rmtree(out_dir, ignore_errors=True)
    wall, out, rss = run_moetools(["container-encode", model_path, "-o", out_dir, "--json"])
    doc = json.loads(out)
    return wall, doc, rss


def resume_scenario(model_path, out_dir, full_seconds, rounds):
    """Rerun container-encode into the complete `out_dir`: unchanged source, then touched source."""
    unchanged, touched = [], []
    for _ in range(rounds):
        drop_cache(model_path)
        _, out, _ = run_moetools(["container-encode", model_path, "-o", out_dir, "--json"])
        doc = json.loads(out)
        assert doc["banks_written"] == [] and doc["bytes_read"] == 0, doc
        unchanged.append(doc["seconds"])
        stat = os.stat(model_path)
        os.utime(model_path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
        drop_cache(model_path)
        _, out, _ = run_moetools(["container-encode", model_path, "-o", out_dir, "--json"])
        doc = json.loads(out)
        assert doc["banks_written"] == [] and doc["bytes_read"] > 0, doc
        touched.append(doc["seconds"])
    requantized = []
    for round_index in range(rounds):
        fill_random(model_path, seed=100 + round_index)
        drop_cache(model_path)
        _, out, _ = run_moetools(["container-encode", model_path, "-o", out_dir, "--json"])
        doc = json.loads(out)
        assert doc["banks_skipped"] == [], doc
        requantized.append(doc["seconds"])
    print(f"resume (best of {rounds}, in-process): unchanged source {min(unchanged):.2f} s = "
          f"{min(unchanged) / full_seconds:.2f}x the full encode ({full_seconds:.2f} s); touched source (rehash) "
          f"{min(touched):.2f} s = {min(touched) / full_seconds:.2f}x; re-quantized source (every bank rewritten) "
          f"{min(requantized):.2f} s = {min(requantized) / full_seconds:.2f}x")


def o_direct_works(path):
    if not hasattr(os, "O_DIRECT"):
        return False
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    except OSError:
        return False
    buf = mmap.mmap(-1, PAGE)
    try:
        os.preadv(fd, [buf], 0)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
        buf.close()


class GGUFFetcher:
    """Three reads per expert from the raw GGUF: the gate, up and down slices, each in its own tensor."""

    def __init__(self, model, direct):
        self.direct = direct
        self.by_layer = {}
        for tensor in model.expert_tensors:
            if tensor.name.endswith(".weight"):
                self.by_layer.setdefault(int(tensor.name.split(".")[1]), []).append(tensor)
        self.fds = [os.open(shard, os.O_RDONLY | (os.O_DIRECT if direct else 0)) for shard in model.shards]
        biggest = max(t.n_bytes // t.shape[-1] for t in model.expert_tensors)
        self.buf = mmap.mmap(-1, biggest + 2 * PAGE)
        self.view = memoryview(self.buf)
        self.bytes_read = 0

    def fetch(self, layer, expert):
        for tensor in self.by_layer[layer]:
            stride = tensor.n_bytes // tensor.shape[-1]
            start = tensor.offset + expert * stride
            if self.direct:  # O_DIRECT needs aligned offsets and lengths: widen to 4 KiB pages
                begin = start // PAGE * PAGE
                end = -(-(start + stride) // PAGE) * PAGE
                self.bytes_read += os.preadv(self.fds[tensor.shard], [self.view[:end - begin]], begin)
            else:
                self.bytes_read += os.preadv(self.fds[tensor.shard], [self.view[:stride]], start)

    def close(self):
        for fd in self.fds:
            os.close(fd)
        self.view.release()
        self.buf.close()


def fetch_both(folder, model, sequence, direct):
    """Fetch every (layer, expert) of `sequence` from both sources, interleaved expert by expert
    (alternating which goes first) so both see the same disk conditions on this shared machine.
    Returns (container seconds, GGUF seconds, container bytes read, GGUF bytes read, O_DIRECT used)."""
    container_s = gguf_s = 0.0
    with ContainerReader(folder, direct=direct) as reader:
        gguf = GGUFFetcher(model, reader.direct if direct else False)
        try:
            for index, (layer, expert) in enumerate(sequence):
                order = (0, 1) if index % 2 == 0 else (1, 0)
                for which in order:
                    started = time.perf_counter()
                    if which == 0:
                        reader.read_record(layer, expert)
                        container_s += time.perf_counter() - started
                    else:
                        gguf.fetch(layer, expert)
                        gguf_s += time.perf_counter() - started
            used_direct = reader.direct
        finally:
            gguf.close()
    return container_s, gguf_s, len(sequence) * reader.manifest.record_bytes, gguf.bytes_read, used_direct


def fetch_scenario(model, out_dir, fetches):
    layers = sorted(model.expert_bytes_by_layer)
    rng = random.Random(1234)
    sequence = [(rng.choice(layers), rng.randrange(model.expert_count)) for _ in range(fetches)]
    direct = o_direct_works(os.path.join(out_dir, f"experts-L{layers[0]}.bin")) and o_direct_works(model.path)
    mode = "O_DIRECT" if direct else "buffered reads, page cache dropped with posix_fadvise(DONTNEED)"
    banks = [os.path.join(out_dir, f"experts-L{layer}.bin") for layer in layers]
    for path in [*model.shards, *banks]:
        drop_cache(path)
    c_s, g_s, c_bytes, g_bytes, used_direct = fetch_both(out_dir, model, sequence, direct)
    if direct and not used_direct:
        mode = "buffered reads (O_DIRECT refused), page cache dropped with posix_fadvise(DONTNEED)"
    one = model.expert_bytes_by_layer[layers[0]]
    payload = sum(model.expert_bytes_by_layer[layer] for layer, _ in sequence)
    print(f"fetch, experts of {one / 1024:.0f} KiB ({mode}; {fetches} random experts, {payload / MiB:.0f} MiB; "
          f"interleaved expert by expert):")
    print(f"  container, 1 read/expert:  {fetches / c_s:8.1f} experts/s, {payload / c_s / 1e9:.3f} GB/s of experts "
          f"({c_bytes / MiB:.0f} MiB transferred)")
    print(f"  raw GGUF, 3 reads/expert:  {fetches / g_s:8.1f} experts/s, {payload / g_s / 1e9:.3f} GB/s of experts "
          f"({g_bytes / MiB:.0f} MiB transferred)")
    print(f"  ratio container/GGUF: {g_s / c_s:.2f}x experts/s")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--experts", type=int, default=48)
    parser.add_argument("--fetches", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", default=None, help="scratch folder on the disk to measure (default: system temp)")
    args = parser.parse_args()
    scratch = tempfile.mkdtemp(prefix="bench-container-", dir=args.dir)
    try:
        t0 = time.perf_counter()
        model_path = build_model(scratch, args.layers, args.experts)
        model = open_model(model_path)
        expert_bytes = model.expert_bytes
        print(f"model: {model_path}: {os.path.getsize(model_path) / MiB:.0f} MiB on disk, "
              f"{expert_bytes / MiB:.0f} MiB of experts, {len(model.expert_bytes_by_layer)} MoE layers x "
              f"{model.expert_count} experts of {next(iter(model.expert_bytes_by_layer.values())) / MiB:.2f} MiB "
              f"(built in {time.perf_counter() - t0:.1f} s)")

        # 1. encode throughput vs cp, best of `rounds`, alternating so disk noise hits both
        out_dir = os.path.join(scratch, "container")
        cp_times, encode_walls, encode_inner, rss = [], [], [], 0
        file_bytes = os.path.getsize(model_path)
        for _ in range(args.rounds):
            cp_times.append(time_cp(model_path, os.path.join(scratch, "copy.gguf")))
            wall, doc, peak = time_encode(model_path, out_dir)
            encode_walls.append(wall)
            encode_inner.append(doc["seconds"])
            rss = max(rss, peak)
        cp_rate = file_bytes / min(cp_times)
        wall_rate = expert_bytes / min(encode_walls)
        inner_rate = expert_bytes / min(encode_inner)
        median_ratio = statistics.median(file_bytes / c for c in cp_times)
        median_ratio = statistics.median(expert_bytes / e for e in encode_inner) / median_ratio
        print(f"encode (best of {args.rounds} alternating rounds, cold source): cp {cp_rate / 1e9:.3f} GB/s "
              f"({file_bytes / MiB:.0f} MiB in {min(cp_times):.2f} s, cp + fsync); container-encode "
              f"{inner_rate / 1e9:.3f} GB/s in-process ({min(encode_inner):.2f} s), {wall_rate / 1e9:.3f} GB/s "
              f"wall-clock incl. interpreter start and model open ({min(encode_walls):.2f} s)")
        print(f"  ratio encode/cp: {inner_rate / cp_rate:.2f}x in-process (median of rounds {median_ratio:.2f}x), "
              f"{wall_rate / cp_rate:.2f}x wall-clock (target >= 0.8x)")
        tiny = synth.write_model(synth.tiny("qwen3moe"), os.path.join(scratch, "tiny.gguf"))[0]
        _, _, tiny_rss = time_encode(tiny, os.path.join(scratch, "tiny-container"))
        print(f"  peak RSS of container-encode: {rss / MiB:.0f} MiB on this {file_bytes / MiB:.0f} MiB model, "
              f"{tiny_rss / MiB:.0f} MiB on a {os.path.getsize(tiny) / MiB:.0f} MiB model (target < 300 MiB)")

        # 2. resume into the finished container (the last encode's)
        resume_scenario(model_path, out_dir, min(encode_inner), args.rounds)

        # 3. random fetch: same (layer, expert) sequence from both, on these experts and on small ones
        fetch_scenario(model, out_dir, args.fetches)
        model.close()
        small_path = build_model(os.path.join(scratch, "small"), 4, 128, n_embd=1024, n_ff_exp=256)
        small = open_model(small_path)
        from moetools.container import core

        core.encode_container(small, os.path.join(scratch, "small-container"))
        fetch_scenario(small, os.path.join(scratch, "small-container"), args.fetches * 4)
        small.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
