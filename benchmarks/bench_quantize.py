"""Quantizer throughput: the compiled kernels per type on one core and on all, against the numpy
kernels and gguf-py (baselines run in this same script) and, when $LLAMA_QUANTIZE names a
llama-quantize binary, against ggml's C on the same machine.

    .venv/bin/python benchmarks/bench_quantize.py [--mib 32] [--types q6_K,q4_K,...]
    LLAMA_QUANTIZE=/path/to/llama-quantize .venv/bin/python benchmarks/bench_quantize.py

1. Kernels: a float32 slab (rows of 4096), a table per imatrix mode (none, then random positive
   weights), one line per type, MB/s of float32 input: with $LLAMA_QUANTIZE ggml's C reference
   itself (`ggml_quantize_chunk` of the libggml-base beside that binary, through ctypes, on the same
   rows, spans of rows on a thread pool for several cores as llama-quantize splits a tensor),
   the compiled kernels ("ours") and the numpy kernels, on one core (CPU time of the calling
   thread, where both C and the one-thread kernel run: steady under load) and on every core (wall
   time); the ratios are C's time over ours (above 1: moetools is faster) and numpy's over ours.
   Bytes are checked identical between C, the compiled and the numpy kernels, and Q8_0/Q4_0 also
   against gguf.quants.quantize.
2. Whole tiers (with $LLAMA_QUANTIZE): one F32 GGUF (a dense llama of 2 blocks, 1024 wide, 76 MB;
   `--tier-layers N` for a larger one) quantized
   by `llama-quantize --pure IN OUT TYPE THREADS` and by `moetools quantize IN --pure --type TYPE
   --full --threads THREADS` (this checkout's code: `python -m moetools` from the repository's
   root), same input, same thread count, wall time of the whole process; the
   figure is llama-quantize's time over moetools' (above 1: moetools is faster), per core (1 thread)
   and on every core. moetools' tier also measures its error against the source (a dequantize pass
   llama-quantize does not do): timed with it and with `--no-error`, which skips it. Each time is
   given as wall time and as the child's CPU time (user + system), the steadier figure under load,
   beside moetools' fixed costs: the same command with `--dry-run` (imports, header, plan), and a
   whole tier of a model of one small block (`fixed`: imports, the kernels' first call, the writer;
   almost no quantizing).
The load average is printed with the figures: on a shared machine every figure is a ratio against a
baseline timed in the same run.
"""

import argparse
import os
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from gguf import GGMLQuantizationType, quants  # noqa: E402

from benchmarks.common import scratch  # noqa: E402
from moetools.quantize import kernels  # noqa: E402

# The tiers run this checkout's code (not an installed moetools), so the figures measure what is
# being changed: `python -m moetools` from the repository's root, its modules byte-compiled first
# (as pip compiles an install; with PYTHONDONTWRITEBYTECODE set every run would compile them again).
CHECKOUT = [sys.executable, "-m", "moetools"]

TYPES = ("q6_K", "q5_K", "q4_K", "q3_K", "q2_K", "iq4_xs", "iq4_nl", "q8_0", "q4_0")


def with_engine(name):
    """Switch kernels.quantize to the compiled ("numba") or the numpy engine."""
    kernels._compiled.clear()
    if name == "numpy":
        kernels._compiled["module"] = None
    return kernels.compiled_kernels()


def ggml_reference(binary):
    """ggml_quantize_chunk(type, src, dst, start, nrows, n_per_row, imatrix) of the libggml-base
    beside `binary`, through ctypes; None when it is not there."""
    import ctypes

    folder = os.path.dirname(os.path.abspath(binary))
    for name in ("libggml-base.so", "libggml-base.dylib", "ggml-base.dll"):
        path = os.path.join(folder, name)
        if os.path.exists(path):
            lib = ctypes.CDLL(path)
            function = lib.ggml_quantize_chunk
            function.restype = ctypes.c_size_t
            function.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                                 ctypes.c_int64, ctypes.c_void_p]
            return function
    return None


def c_quantize(function, values, type_id, imatrix, threads):
    """ggml's C over `values` on `threads` threads (spans of rows; ctypes releases the GIL, and
    llama-quantize also splits a tensor's rows over its threads): the bytes."""
    from concurrent.futures import ThreadPoolExecutor

    n_rows, n_per_row = values.shape
    row_bytes = kernels.quantize(values[:1], type_id, threads=1, imatrix=imatrix).nbytes
    out = np.zeros(n_rows * row_bytes, dtype=np.uint8)
    qw = None if imatrix is None else imatrix.ctypes.data

    def span(first, last):
        function(type_id, values.ctypes.data, out.ctypes.data, first * n_per_row, last - first, n_per_row, qw)

    spans = kernels._spans(n_rows, threads)
    if len(spans) == 1:
        span(*spans[0])
    else:
        with ThreadPoolExecutor(max_workers=len(spans)) as pool:
            for future in [pool.submit(span, a, b) for a, b in spans]:
                future.result()
    return out


def best_time(function, clock, repeat):
    """(the shortest of `repeat` runs by `clock`, the result)."""
    best = float("inf")
    result = None
    for _ in range(repeat):
        start = clock()
        result = function()
        best = min(best, clock() - start)
    return best, result


def kernel_table(values, names, threads, reference, imatrix):
    """One line per type: MB/s of float32 input of ggml's C (when `reference`), the compiled kernels
    ("ours") and the numpy kernels, on one core (CPU time of this thread: C through ctypes and the
    compiled kernel on one thread both run in it, steadier than wall time on a shared machine) and
    on `threads` cores (wall time), with the ratios (above 1: moetools is faster); bytes checked
    identical between all of them."""
    mb = values.nbytes / 1e6
    label = "with an imatrix" if imatrix is not None else "no imatrix"
    print(f"kernels ({label}): {values.shape[0]} x {values.shape[1]} float32 = {mb:.0f} MB; MB/s of float32 input; "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"{'type':7s} {'C 1 core':>9s} {'ours 1':>9s} {'xC':>6s} {'C ' + str(threads):>9s} {'ours ' + str(threads):>9s} "
          f"{'xC':>6s} {'numpy ' + str(threads):>9s} {'xnumpy':>7s}")
    for name in names:
        type_id = kernels.GGML_TYPE_IDS[name]
        if imatrix is not None and type_id in kernels.IGNORES_IMATRIX:
            continue
        with_engine("numba")
        kernels.quantize(values[:2], type_id, imatrix=imatrix)  # compile (or load the cached machine code)

        def ours(count):
            return lambda: kernels.quantize(values, type_id, threads=count, imatrix=imatrix)

        ours_1, compiled = best_time(ours(1), time.thread_time, 3)
        ours_n, compiled_n = best_time(ours(threads), time.perf_counter, 2)
        if compiled.tobytes() != compiled_n.tobytes():
            sys.exit(f"{name}: the compiled kernel's bytes depend on the thread count")
        if reference is not None:
            c_1, c_bytes = best_time(lambda: c_quantize(reference, values, type_id, imatrix, 1), time.thread_time, 3)
            c_n, c_bytes_n = best_time(lambda: c_quantize(reference, values, type_id, imatrix, threads), time.perf_counter, 2)
            if c_bytes.tobytes() != compiled.tobytes() or c_bytes_n.tobytes() != c_bytes.tobytes():
                sys.exit(f"{name}: the compiled kernel's bytes differ from ggml's")
            cells = [f"{mb / c_1:9.1f}", f"{mb / ours_1:9.1f}", f"{c_1 / ours_1:6.2f}", f"{mb / c_n:9.1f}",
                     f"{mb / ours_n:9.1f}", f"{c_n / ours_n:6.2f}"]
        else:
            cells = [f"{'-':>9s}", f"{mb / ours_1:9.1f}", f"{'-':>6s}", f"{'-':>9s}", f"{mb / ours_n:9.1f}", f"{'-':>6s}"]
        with_engine("numpy")
        numpy_n, numpy_bytes = best_time(ours(threads), time.perf_counter, 1)
        with_engine("numba")
        if numpy_bytes.tobytes() != compiled.tobytes():
            sys.exit(f"{name}: the numpy kernels' bytes differ from the compiled ones")
        line = f"{name:7s} " + " ".join(cells) + f" {mb / numpy_n:9.1f} {numpy_n / ours_n:7.1f}"
        if imatrix is None and name in ("q8_0", "q4_0"):
            qtype = GGMLQuantizationType[name.upper()]
            gguf_s, gguf_bytes = best_time(lambda: quants.quantize(values, qtype), time.perf_counter, 1)
            assert gguf_bytes.tobytes() == compiled.tobytes()
            line += f"   gguf.quants {mb / gguf_s:7.1f} -> ours x{gguf_s / ours_n:.1f}"
        print(line, flush=True)


def timed_process(argv):
    """(wall seconds, CPU seconds (user + system) of the child) of running `argv`; exits on failure.
    On a shared machine the CPU time is the steadier figure: wall time counts the time the
    scheduler gave other users' processes."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    run = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if run.returncode:
        sys.exit(f"{' '.join(map(str, argv))} failed: {run.stderr.strip()}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def tier_figures(binary, names, threads, n_layer=2):
    import compileall

    from moetools import synth

    compileall.compile_dir(os.path.join(ROOT, "moetools"), quiet=1)

    with scratch("bench-quantize-") as folder:
        source = os.path.join(folder, "dense-f32.gguf")
        types = synth.Types(resident=synth.F32, embed=synth.F32, output=synth.F32)
        synth.write_model(synth.tiny("dense", types, n_layer=n_layer, n_embd=1024, n_head=16, n_head_kv=4, n_ff=2048,
                                     vocab=1024), source)
        size_mb = os.path.getsize(source) / 1e6
        small = os.path.join(folder, "small-f32.gguf")
        synth.write_model(synth.tiny("dense", types, n_layer=1, n_embd=256, n_head=4, n_head_kv=4, n_ff=256, vocab=256),
                          small)
        print(f"tiers: {source} ({size_mb:.0f} MB F32); load average {os.getloadavg()[0]:.1f}")
        for name in names:
            figures = []
            # once untimed: numba compiles (or loads) this type's kernels on a process's first use
            subprocess.run([*CHECKOUT, "quantize", source, "--pure", "--type", name, "--full", "-o", folder, "--force",
                            "--json"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
            # moetools' fixed cost: the same command planning only (Python, numpy, gguf, numba's import)
            dry_s, dry_cpu = timed_process([*CHECKOUT, "quantize", source, "--pure", "--type", name, "--full", "-o", folder,
                                            "--force", "--json", "--dry-run"])
            figures.append(f"start-up (--dry-run) {dry_s:5.2f} s ({dry_cpu:.2f} s CPU)")
            fixed_s, fixed_cpu = timed_process([*CHECKOUT, "quantize", small, "--pure", "--type", name, "--full", "-o", folder,
                                                "--force", "--json", "--threads", "1"])
            figures.append(f"fixed (a tier of {os.path.getsize(small) / 1e6:.1f} MB) {fixed_s:5.2f} s ({fixed_cpu:.2f} s CPU)")
            for count in sorted({1, threads}):
                out = os.path.join(folder, f"llama-{name}.gguf")
                c_s, c_cpu = timed_process([binary, "--pure", source, out, name.upper(), str(count)])
                times = [timed_process([*CHECKOUT, "quantize", source, "--pure", "--type", name, "--full", "-o", folder,
                                        "--force", "--threads", str(count), "--json", *extra])
                         for extra in ([], ["--no-error"])]
                (ours_s, ours_cpu), (bare_s, bare_cpu) = times
                figures.append(f"{count} thread{'s' if count > 1 else ''}: llama-quantize {c_s:6.2f} s ({c_cpu:.2f} s CPU), "
                               f"moetools {ours_s:6.2f} s ({ours_cpu:.2f} s CPU) -> x{c_s / ours_s:.2f} wall, "
                               f"x{c_cpu / ours_cpu:.2f} CPU; --no-error {bare_s:6.2f} s ({bare_cpu:.2f} s CPU) -> "
                               f"x{c_s / bare_s:.2f} wall, x{c_cpu / bare_cpu:.2f} CPU")
            print(f"{name:7s} " + "   ".join(figures), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=32, help="size of the float32 slab for the kernels (MiB)")
    parser.add_argument("--types", default=",".join(TYPES), help="comma-separated ggml types")
    parser.add_argument("--skip", default="", help="comma-separated parts to leave out: kernels, c (its columns), tiers")
    parser.add_argument("--tier-layers", type=int, default=2,
                        help="blocks of the tiers' F32 model (2: 80 MB; each block adds about 29 MB)")
    args = parser.parse_args()
    skip = set(args.skip.split(","))
    names = [name.strip() for name in args.types.split(",") if name.strip()]
    threads = kernels.default_threads()
    rows = args.mib * (1 << 20) // 4 // 4096
    values = (np.random.default_rng(0).standard_normal((rows, 4096), dtype=np.float32) * 0.02).astype(np.float32)
    if kernels.compiled_kernels() is None:
        sys.exit("numba is not importable here (or MOETOOLS_NO_JIT is set): nothing compiled to measure")
    binary = os.environ.get("LLAMA_QUANTIZE")
    reference = ggml_reference(binary) if binary and "c" not in skip else None
    if "kernels" not in skip:
        weights = (np.random.default_rng(1).random(values.shape[1], dtype=np.float32) + np.float32(0.1)).astype(np.float32)
        for imatrix in (None, weights):
            kernel_table(values, names, threads, reference, imatrix)
    if binary and "tiers" not in skip:
        tier_figures(binary, names, threads, args.tier_layers)
    elif not binary:
        print("tiers: set LLAMA_QUANTIZE to a llama-quantize binary to time whole tiers against ggml's C")


if __name__ == "__main__":
    main()
