"""device-fit's upstream speed model against published llama.cpp decode figures.

    .venv/bin/python benchmarks/calibrate_devicefit_speed.py

Each point is a published run (source, hardware, flags, tok/s); the script rebuilds the model's header
(moetools.synth, header-only), evaluates the same placement with `upstream.plan` and the defaults of
`speed.SpeedSettings`, and prints prediction, measurement, the error of each point and the mean and
worst absolute error. The README's Speed model section states these figures. Assumptions (where a
source leaves a figure out) are written next to the point.
"""

import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from moetools import synth  # noqa: E402
from moetools.devicefit import core, devices, speed, upstream  # noqa: E402
from moetools.devicefit.kv import KVSettings  # noqa: E402
from moetools.gguf import open_model  # noqa: E402

GIB = 1024**3


def gpt_oss_bf16():
    """gpt-oss-120b as ggml-org ships it: MXFP4 experts, everything else 16-bit."""
    return synth.BUILDERS["gpt-oss"](synth.Types(expert=synth.MXFP4, resident=synth.F16, embed=synth.F16, output=synth.F16),
                         name="gpt-oss-120b", n_layer=36, n_embd=2880, n_head=64, n_head_kv=8, head=64, n_ff_exp=2880,
                         n_expert=128, top_k=4, swa=128, vocab=201088, ctx=131072)


# (label, spec builder, GPU bandwidth, VRAM, RAM bandwidth, threads, user placement, context, depth, tok/s, source)
POINTS = [
    ("Qwen3-30B-A3B Q4_K_M, RTX 2080 + i9-10900X quad DDR4 (measured ~102 GB/s), --n-cpu-moe 36",
     lambda: synth.preset("qwen3-30b-a3b"), 448e9, 8 * GIB, 102e9, 10, {"n_cpu_moe": 36}, 4096, 256, 36.7,
     "github.com/AlexsJones/llmfit/pull/755 (llama-server generation speed)"),
    ("gpt-oss-120b MXFP4, i9-14900K dual DDR5 (assumed 5600: 89.6 GB/s) + GPU (assumed RTX 3090), --n-cpu-moe 36, ~3.4k ctx",
     gpt_oss_bf16, 936e9, 24 * GIB, 89.6e9, 24, {"n_cpu_moe": 36}, 16384, 3440, 18.04,
     "gokawiil.com/article/74814 (a llama-server log: 98 tokens at 18.04 t/s after a 3,440-token prompt)"),
    ("gpt-oss-120b MXFP4, same host, --n-cpu-moe 36, ~12.7k ctx",
     gpt_oss_bf16, 936e9, 24 * GIB, 89.6e9, 24, {"n_cpu_moe": 36}, 16384, 12717, 25.62,
     "gokawiil.com/article/74814 (1,966 tokens at 25.62 t/s after a 12,717-token prompt)"),
]
# Dense, every layer on one GPU (the GPU efficiency alone): GLM-Z1-32B IQ4_XS on an RTX 3090 Ti
# (1008 GB/s), mainline llama.cpp's llama-sweep-bench, -fa -c 32768; its log gives the CUDA0 model
# buffer (16303.48 MiB) and the f16 KV per token (61 layers x 2 KV heads x 128 x (K+V) x 2 bytes).
# (label, weight bytes, KV bytes per token, bandwidth, depth, tok/s, source)
DENSE_POINTS = [
    ("GLM-Z1-32B IQ4_XS, RTX 3090 Ti, depth 0", 16303.48 * 2**20, 61 * 2 * 128 * 2 * 2, 1008e9, 0, 38.32,
     "github.com/ikawrakow/ik_llama.cpp/pull/370 (mainline llama.cpp sweep-bench)"),
    ("GLM-Z1-32B IQ4_XS, RTX 3090 Ti, depth 32256", 16303.48 * 2**20, 61 * 2 * 128 * 2 * 2, 1008e9, 32256, 31.30,
     "github.com/ikawrakow/ik_llama.cpp/pull/370 (mainline llama.cpp sweep-bench)"),
]
# Left out: hardware-corner.net's gpt-oss-120b on an RTX 3090 + EPYC 7343 (64 GB DDR4-3200,
# --n-cpu-moe 27, 1.6 t/s) is 10x below every other published CPU-expert run on comparable hardware
# and gives no memory-channel count; the dual-3090 llmgarage.ai run uses --split-mode row (not modelled).


def predict(point):
    label, build, gpu_bw, vram, ram_bw, threads, user, ctx, depth, _, _ = point
    with tempfile.TemporaryDirectory(prefix="calibrate-") as folder:
        path = synth.write_model(build(), os.path.join(folder, "m.gguf"), sparse=True)[0]
        with open_model(path) as model:
            facts = core.model_facts(model)
    settings = speed.SpeedSettings(ram_bw=ram_bw, threads=threads)
    gpu = devices.Device("CUDA0", "gpu", vram, gpu_bw)
    cpu = devices.cpu_device(256 * GIB, ram_bw, "published")
    options = upstream.UpstreamOptions(ctx=ctx, kv=KVSettings(), speed=settings, depth=depth, **user)
    plan = upstream.plan(facts, [gpu], cpu, options).alternatives[0]
    return plan.tok_s, plan.breakdown


def main():
    errors = []
    for point in POINTS:
        predicted, breakdown = predict(point)
        published = point[9]
        error = predicted / published - 1
        errors.append(abs(error))
        parts = ", ".join(f"{name} {seconds * 1000:.1f} ms" for name, seconds in breakdown.items())
        print(f"{point[0]}\n  published {published:.2f} tok/s, predicted {predicted:.2f} tok/s ({error:+.0%}); {parts}\n  source: {point[10]}")
    defaults = speed.SpeedSettings()
    for label, weights, kv_per_token, bandwidth, depth, published, source in DENSE_POINTS:
        seconds = (weights + kv_per_token * depth) / (bandwidth * defaults.gpu_efficiency) + defaults.floor_s
        predicted = 1 / seconds
        error = predicted / published - 1
        errors.append(abs(error))
        print(f"{label}\n  published {published:.2f} tok/s, predicted {predicted:.2f} tok/s ({error:+.0%})\n  source: {source}")
    print(f"defaults: gpu_efficiency {defaults.gpu_efficiency}, cpu_efficiency {defaults.cpu_efficiency}, "
          f"floor {defaults.floor_s * 1000:.0f} ms, hops {defaults.hop_local_s * 1e6:.0f} us")
    print(f"mean absolute error {sum(errors) / len(errors):.0%}, worst {max(errors):.0%} over {len(errors)} points")
    return 0


if __name__ == "__main__":
    sys.exit(main())
