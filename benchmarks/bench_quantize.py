"""Quantizer throughput: the compiled kernels per type on one core and on all, against the numpy
kernels and gguf-py (baselines run in this same script) and, when $LLAMA_QUANTIZE names a
llama-quantize binary, against ggml's C on the same machine.

    .venv/bin/python benchmarks/bench_quantize.py [--mib 32] [--types q6_K,q4_K,...]
    LLAMA_QUANTIZE=/path/to/llama-quantize .venv/bin/python benchmarks/bench_quantize.py

1. Kernels: a float32 slab (rows of 4096), each type in MB/s of float32 input, compiled on 1 thread
   and on every core, the numpy engine on every core (its previous speed), bytes checked identical
   between the engines; Q8_0/Q4_0 also against gguf.quants.quantize.
2. Whole tiers (with $LLAMA_QUANTIZE): one F32 GGUF (a dense llama of 2 blocks, 1024 wide, 76 MB) quantized
   by `llama-quantize --pure IN OUT TYPE THREADS` and by `moetools quantize IN --pure --type TYPE
   --full --threads THREADS`, same input, same thread count, wall time of the whole process; the
   figure is llama-quantize's time over moetools' (above 1: moetools is faster), per core (1 thread)
   and on every core. moetools' tier also measures its error against the source (a dequantize pass
   llama-quantize does not do).
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


def tier_figures(binary, names, threads):
    from moetools import synth

    with scratch("bench-quantize-") as folder:
        source = os.path.join(folder, "dense-f32.gguf")
        types = synth.Types(resident=synth.F32, embed=synth.F32, output=synth.F32)
        synth.write_model(synth.tiny("dense", types, n_layer=2, n_embd=1024, n_head=16, n_head_kv=4, n_ff=2048,
                                     vocab=1024), source)
        size_mb = os.path.getsize(source) / 1e6
        print(f"tiers: {source} ({size_mb:.0f} MB F32); load average {os.getloadavg()[0]:.1f}")
        for name in names:
            figures = []
            # once untimed: numba compiles (or loads) this type's kernels on a process's first use
            subprocess.run([*MOETOOLS, "quantize", source, "--pure", "--type", name, "--full", "-o", folder, "--force",
                            "--json"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for count in sorted({1, threads}):
                out = os.path.join(folder, f"llama-{name}.gguf")
                start = time.perf_counter()
                subprocess.run([binary, "--pure", source, out, name.upper(), str(count)], check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                c_s = time.perf_counter() - start
                start = time.perf_counter()
                subprocess.run([*MOETOOLS, "quantize", source, "--pure", "--type", name, "--full", "-o", folder, "--force",
                                "--threads", str(count), "--json"], check=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
                ours_s = time.perf_counter() - start
                figures.append(f"{count} thread{'s' if count > 1 else ''}: llama-quantize {c_s:6.2f} s, moetools "
                               f"{ours_s:6.2f} s -> x{c_s / ours_s:.2f}")
            print(f"{name:7s} " + "   ".join(figures), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=32, help="size of the float32 slab for the kernels (MiB)")
    parser.add_argument("--types", default=",".join(TYPES), help="comma-separated ggml types")
    args = parser.parse_args()
    names = [name.strip() for name in args.types.split(",") if name.strip()]
    threads = kernels.default_threads()
    rows = args.mib * (1 << 20) // 4 // 4096
    values = (np.random.default_rng(0).standard_normal((rows, 4096), dtype=np.float32) * 0.02).astype(np.float32)
    if kernels.compiled_kernels() is None:
        sys.exit("numba is not importable here (or MOETOOLS_NO_JIT is set): nothing compiled to measure")
    kernel_figures(values, names, threads)
    binary = os.environ.get("LLAMA_QUANTIZE")
    if binary:
        tier_figures(binary, names, threads)
    else:
        print("tiers: set LLAMA_QUANTIZE to a llama-quantize binary to time whole tiers against ggml's C")


if __name__ == "__main__":
    main()
