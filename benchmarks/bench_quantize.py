"""Quantizer throughput: the compiled kernels per type on one core and on all, against the numpy
kernels and gguf-py (baselines run in this same script) and, when $LLAMA_QUANTIZE names a
llama-quantize binary, against ggml's C on the same machine.

    .venv/bin/python benchmarks/bench_quantize.py [--mib 32] [--types q6_K,q4_K,...]
    LLAMA_QUANTIZE=/path/to/llama-quantize .venv/bin/python benchmarks/bench_quantize.py

1. Kernels: a float32 slab (rows of 4096), each type in MB/s of float32 input, compiled on 1 thread
   and on every core, the numpy engine on every core (its previous speed), bytes checked identical
   between the engines; Q8_0/Q4_0 also against gguf.quants.quantize. With $LLAMA_QUANTIZE, ggml's
   C reference itself on one core: `ggml_quantize_chunk` of the libggml-base beside that binary,
   called through ctypes on the same rows (bytes checked identical), without and with an importance
   matrix (`--imatrix`: random positive weights): the figure is C's time over the compiled kernel's
   (above 1: moetools is faster per core).
2. Whole tiers (with $LLAMA_QUANTIZE): one F32 GGUF (a dense llama of 2 blocks, 1024 wide, 76 MB;
   `--tier-layers N` for a larger one) quantized
   by `llama-quantize --pure IN OUT TYPE THREADS` and by `moetools quantize IN --pure --type TYPE
   --full --threads THREADS`, same input, same thread count, wall time of the whole process; the
   figure is llama-quantize's time over moetools' (above 1: moetools is faster), per core (1 thread)
   and on every core. moetools' tier also measures its error against the source (a dequantize pass
   llama-quantize does not do): timed with it and with `--no-error`, which skips it. Each time is
   given as wall time and as the child's CPU time (user + system), the steadier figure under load,
   beside moetools' fixed start-up: the same command with `--dry-run` (imports, header, plan).
The load average is printed with the figures: on a shared machine every figure is a ratio against a
baseline timed in the same run.
"""

import argparse
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from gguf import GGMLQuantizationType, quants  # noqa: E402

from benchmarks.common import MOETOOLS, scratch  # noqa: E402
from moetools.quantize import kernels  # noqa: E402

TYPES = ("q6_K", "q5_K", "q4_K", "q3_K", "q2_K", "iq4_xs", "iq4_nl", "q8_0", "q4_0")


def timed(function, repeat=1):
    best = float("inf")
    result = None
    for _ in range(repeat):
        start = time.perf_counter()
        result = function()
        best = min(best, time.perf_counter() - start)
    return best, result


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


def c_figures(function, values, names, imatrix, repeat=3):
    """Per-core ratio of ggml's C (ctypes) to the compiled kernels, timed alternately on the same rows."""
    mb = values.nbytes / 1e6
    label = "with an imatrix" if imatrix is not None else "no imatrix"
    print(f"ggml C reference ({label}), 1 core each: load average {os.getloadavg()[0]:.1f}")
    for name in names:
        type_id = kernels.GGML_TYPE_IDS[name]
        with_engine("numba")
        ours = kernels.quantize(values[:2], type_id, threads=1, imatrix=imatrix)
        out = np.zeros(values.shape[0] * ours.shape[-1], dtype=np.uint8)
        qw = None if imatrix is None else imatrix.ctypes.data
        c_best = ours_best = float("inf")
        for _ in range(repeat):
            # CPU time of this thread (both run in it: ctypes' call and the compiled kernel on one
            # thread), steadier than wall time on a shared machine
            start = time.thread_time()
            function(type_id, values.ctypes.data, out.ctypes.data, 0, values.shape[0], values.shape[1], qw)
            c_best = min(c_best, time.thread_time() - start)
            start = time.thread_time()
            ours = kernels.quantize(values, type_id, threads=1, imatrix=imatrix)
            ours_best = min(ours_best, time.thread_time() - start)
        if ours.tobytes() != out.tobytes():
            sys.exit(f"{name}: the compiled kernel's bytes differ from ggml's")
        print(f"{name:7s} C {mb / c_best:7.1f} MB/s, compiled {mb / ours_best:7.1f} MB/s -> x{c_best / ours_best:.2f}",
              flush=True)


def kernel_figures(values, names, threads):
    mb = values.nbytes / 1e6
    print(f"kernels: {values.shape[0]} x {values.shape[1]} float32 = {mb:.0f} MB; threads {threads}; "
          f"load average {os.getloadavg()[0]:.1f}")
    for name in names:
        type_id = kernels.GGML_TYPE_IDS[name]
        with_engine("numba")
        kernels.quantize(values[:2], type_id)  # compile (or load the cached machine code)
        one_s, compiled = timed(lambda: kernels.quantize(values, type_id, threads=1), repeat=2)
        all_s, compiled_all = timed(lambda: kernels.quantize(values, type_id, threads=threads), repeat=2)
        line = (f"{name:7s} compiled: {mb / one_s:7.1f} MB/s on 1 core, {mb / all_s:7.1f} MB/s on {threads} "
                f"(x{one_s / all_s:.2f})")
        assert compiled.tobytes() == compiled_all.tobytes()
        if type_id in kernels.KERNELS:
            with_engine("numpy")
            numpy_s, numpy_bytes = timed(lambda: kernels.quantize(values, type_id, threads=threads))
            if numpy_bytes.tobytes() != compiled.tobytes():
                sys.exit(f"{name}: the engines' bytes differ")
            line += f"   numpy engine {mb / numpy_s:7.1f} MB/s on {threads} -> compiled x{numpy_s / all_s:.1f}"
        if name in ("q8_0", "q4_0"):
            qtype = GGMLQuantizationType[name.upper()]
            gguf_s, gguf_bytes = timed(lambda: quants.quantize(values, qtype))
            assert gguf_bytes.tobytes() == compiled.tobytes()
            line += f"   gguf.quants {mb / gguf_s:7.1f} MB/s -> x{gguf_s / all_s:.1f}"
        print(line, flush=True)
    with_engine("numba")


def timed_process(argv):
    """(wall seconds, CPU seconds (user + system) of the child) of running `argv`; exits on failure.
    On a shared machine the CPU time is the steadier figure: wall time counts the time the
    scheduler gave other users' processes."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    run = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if run.returncode:
        sys.exit(f"{' '.join(map(str, argv))} failed: {run.stderr.strip()}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def tier_figures(binary, names, threads, n_layer=2):
    from moetools import synth

    with scratch("bench-quantize-") as folder:
        source = os.path.join(folder, "dense-f32.gguf")
        types = synth.Types(resident=synth.F32, embed=synth.F32, output=synth.F32)
        synth.write_model(synth.tiny("dense", types, n_layer=n_layer, n_embd=1024, n_head=16, n_head_kv=4, n_ff=2048,
                                     vocab=1024), source)
        size_mb = os.path.getsize(source) / 1e6
        print(f"tiers: {source} ({size_mb:.0f} MB F32); load average {os.getloadavg()[0]:.1f}")
        for name in names:
            figures = []
            # once untimed: numba compiles (or loads) this type's kernels on a process's first use
            subprocess.run([*MOETOOLS, "quantize", source, "--pure", "--type", name, "--full", "-o", folder, "--force",
                            "--json"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            # moetools' fixed cost: the same command planning only (Python, numpy, gguf, numba's import)
            dry_s, dry_cpu = timed_process([*MOETOOLS, "quantize", source, "--pure", "--type", name, "--full", "-o", folder,
                                            "--force", "--json", "--dry-run"])
            figures.append(f"start-up (--dry-run) {dry_s:5.2f} s ({dry_cpu:.2f} s CPU)")
            for count in sorted({1, threads}):
                out = os.path.join(folder, f"llama-{name}.gguf")
                c_s, c_cpu = timed_process([binary, "--pure", source, out, name.upper(), str(count)])
                times = [timed_process([*MOETOOLS, "quantize", source, "--pure", "--type", name, "--full", "-o", folder,
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
    parser.add_argument("--skip", default="", help="comma-separated parts to leave out: kernels, c, tiers")
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
    if "kernels" not in skip:
        kernel_figures(values, names, threads)
    binary = os.environ.get("LLAMA_QUANTIZE")
    reference = ggml_reference(binary) if binary else None
    if reference is not None and "c" not in skip:
        c_rows = values[: max(64, values.shape[0] // 4)]
        weights = (np.random.default_rng(1).random(values.shape[1], dtype=np.float32) + np.float32(0.1)).astype(np.float32)
        c_figures(reference, c_rows, names, None)
        c_figures(reference, c_rows, [name for name in names if name not in ("q8_0",)], weights)
    if binary and "tiers" not in skip:
        tier_figures(binary, names, threads, args.tier_layers)
    else:
        print("tiers: set LLAMA_QUANTIZE to a llama-quantize binary to time whole tiers against ggml's C")


if __name__ == "__main__":
    main()
