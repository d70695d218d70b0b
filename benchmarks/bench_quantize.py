"""Quantizer throughput: moetools' numpy kernels against gguf.quants.quantize on the same input.

    .venv/bin/python benchmarks/bench_quantize.py [--mib 256] [--kquant-mib 32]

Q8_0 and Q4_0 on a 256 MiB float32 tensor (16384 x 4096), bytes checked identical, speed as a
ratio over gguf-py's quantizer (the baseline, run in this same script). gguf-py has no K-quant
quantizer, so Q6_K, Q5_K, Q4_K, Q3_K and Q2_K are reported in MB/s beside Q8_0's, on a slice.
"""

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from gguf import GGMLQuantizationType, quants  # noqa: E402

from moetools.quantize import kernels  # noqa: E402


def timed(function, repeat=1):
    best = float("inf")
    result = None
    for _ in range(repeat):
        start = time.perf_counter()
        result = function()
        best = min(best, time.perf_counter() - start)
    return best, result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256, help="size of the float32 tensor for Q8_0/Q4_0 (MiB)")
    parser.add_argument("--kquant-mib", type=int, default=32, help="size of the float32 slice for the K-quants (MiB)")
    args = parser.parse_args()
    row = 4096
    rows = args.mib * (1 << 20) // 4 // row
    rng = np.random.default_rng(0)
    values = (rng.standard_normal((rows, row), dtype=np.float32) * 0.02).astype(np.float32)
    mb = values.nbytes / 1e6
    print(f"input: {rows} x {row} float32 = {values.nbytes / (1 << 20):.0f} MiB; threads: {kernels.default_threads()}")
    rates = {}
    for name in ("Q8_0", "Q4_0"):
        qtype = GGMLQuantizationType[name]
        base_s, expected = timed(lambda: quants.quantize(values, qtype), repeat=2)
        ours_s, got = timed(lambda: kernels.quantize(values, int(qtype)), repeat=3)
        identical = got.tobytes() == expected.tobytes()
        rates[name] = mb / ours_s
        print(f"{name}: gguf.quants {base_s:7.2f} s ({mb / base_s:7.1f} MB/s)   moetools {ours_s:6.2f} s ({mb / ours_s:7.1f} MB/s)   "
              f"speed-up x{base_s / ours_s:.2f}   bytes identical: {identical}")
        del expected, got
        if not identical:
            sys.exit("bytes differ")
    k_rows = args.kquant_mib * (1 << 20) // 4 // row
    part = values[:k_rows]
    k_mb = part.nbytes / 1e6
    for name in ("Q6_K", "Q5_K", "Q4_K", "Q3_K", "Q2_K"):
        seconds, _ = timed(lambda: kernels.quantize(part, int(GGMLQuantizationType[name])))
        print(f"{name}: {k_mb / seconds:7.1f} MB/s on {part.nbytes / (1 << 20):.0f} MiB  "
              f"(x{k_mb / seconds / rates['Q8_0']:.3f} of moetools Q8_0)")


if __name__ == "__main__":
    main()
