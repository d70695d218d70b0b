"""device-fit's speed model against published llama.cpp measurements: the fit of its default efficiencies
and the error on points kept out of the fit.

    .venv/bin/python benchmarks/calibrate_devicefit_speed.py [--markdown]

Every point of tests/data/devicefit_published_speeds.json that device-fit can rebuild (published_speeds.py
says why the others cannot) is evaluated with the placement its flags give. Every third usable point (in id
order) is held out; the efficiencies are fitted on the rest (speed/calibrate.py fit), starting from the
current defaults. Printed: the fitted efficiencies, the errors of the defaults and of the fit on the
training and held-out points, and one line per figure. --markdown prints the table docs/devicefit-speed.md
holds. The GPU's decode efficiency is not fitted here: these points are CPU-bound; it keeps the dense
all-GPU figure of GLM-Z1-32B on an RTX 3090 Ti (ik_llama.cpp PR #370, mainline sweep-bench), checked below.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import published_speeds as ps  # noqa: E402

from moetools.devicefit.speed import SpeedSettings  # noqa: E402
from moetools.devicefit.speed import calibrate as cal  # noqa: E402

FITTED = ["cpu_efficiency", "gpu_compute_efficiency", "pcie_efficiency", "floor_s"]
# dense, every layer on one GPU: GLM-Z1-32B IQ4_XS on an RTX 3090 Ti (1008 GB/s), llama-sweep-bench -fa -c 32768;
# the log's CUDA0 model buffer (16303.48 MiB) and the f16 KV per token (61 layers x 2 KV heads x 128 x (K+V) x 2)
DENSE_POINTS = [("GLM-Z1-32B IQ4_XS, RTX 3090 Ti, depth 0", 16303.48 * 2**20, 61 * 2 * 128 * 2 * 2, 1008e9, 0, 38.32),
                ("GLM-Z1-32B IQ4_XS, RTX 3090 Ti, depth 32256", 16303.48 * 2**20, 61 * 2 * 128 * 2 * 2, 1008e9, 32256, 31.30)]
DENSE_SOURCE = "https://github.com/ikawrakow/ik_llama.cpp/pull/370 (mainline llama.cpp rows)"


def split(points, cases):
    held = ps.held_out_ids(points)
    return [c for c in cases if c.label not in held], [c for c in cases if c.label in held], held


def _line(name, stats):
    parts = [f"{kind} n={s['n']} mean {s['mean_abs']:.1%} worst {s['worst_abs']:.1%}" for kind, s in stats.items()]
    return f"{name:28} " + "; ".join(parts)


def markdown(points, cases, held, efficiencies=None):
    by_id = {point["id"]: point for point in points}
    rows = ["| point | set | model, quant | GPUs | CPU, RAM | flags | measured | predicted | error | source |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for case, kind, error in cal.errors(cases, efficiencies):
        point = by_id[case.label]
        flags = " ".join(f"{key} {value}" for key, value in point["flags"].items()
                         if value not in (None, False, "") and key in ("ngl", "n_cpu_moe", "ot", "ub", "t"))
        measured = case.tg if kind == "tg" else case.pp
        ram = point["ram"]
        rows.append(f"| {case.label} | {'held out' if case.label in held else 'fit'} | {point['model']['name']}, "
                    f"{point['model']['quant']} | {' + '.join(g['name'] for g in point['gpus'])} | {point['cpu']['name']}, "
                    f"{ram.get('type')}-{ram.get('mts') or '?'} x{ram.get('channels') or '?'} | {flags} | {kind} {measured:g} | "
                    f"{measured * (1 + error):.3g} | {error:+.0%} | {point['source']} |")
    return "\n".join(rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="print the per-point table for docs/devicefit-speed.md")
    args = parser.parse_args()
    points = ps.load_points()
    cases, skipped = ps.build_cases(points)
    train, test, held = split(points, cases)
    defaults = SpeedSettings()
    fitted, loss = cal.fit(train, {name: getattr(defaults, name) for name in FITTED}, FITTED)
    if args.markdown:
        print(markdown(points, cases, held))
        return
    print(f"{len(cases)} usable points ({len(train)} fit, {len(test)} held out), {len(skipped)} skipped")
    print("fitted from the defaults: " + ", ".join(f"{name} {value:.4g}" for name, value in fitted.items()))
    print(_line("defaults, fit points", cal.summary(train)))
    print(_line("defaults, held out", cal.summary(test)))
    print(_line("refit, fit points", cal.summary(train, fitted)))
    print(_line("refit, held out", cal.summary(test, fitted)))
    for case, kind, error in cal.errors(cases):
        print(f"  {'held' if case.label in held else 'fit '} {case.label:55} {kind} {error:+.1%}")
    for point_id, reason in skipped:
        print(f"  skipped {point_id}: {reason}")
    for point_id, kind, reason in ps.exclusions(points):
        print(f"  excluded {point_id} {kind}: {reason}")
    for label, weights, kv, bw, depth, published in DENSE_POINTS:
        predicted = 1.0 / ((weights + kv * depth) / (bw * defaults.gpu_efficiency) + defaults.floor_s)
        print(f"  dense check {label}: {predicted:.2f} vs {published} tok/s ({predicted / published - 1:+.1%}; {DENSE_SOURCE})")


if __name__ == "__main__":
    main()
