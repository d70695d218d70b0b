"""Fit the predictive policy's logistic weights on one real trace (how predictive.WEIGHTS was made).

Features come from the predictor itself (demandkernels.predict, so they are exactly what the policy
sees); the label of (token t, expert) is "token t + 1 uses it". L2-regularised logistic regression
by Newton steps. The constants in moetools/tracetail/predictive.py were fitted on the gpt-oss
trace (`gptoss`) and are checked, held out, on the qwen trace; `--check` prints the share of the
LRU -> Belady gap the weights close on both traces at 0.25x/0.5x/1x/2x the working set.

    .venv/bin/python benchmarks/fit_predictive.py ../shared/traces/gptoss.route.csv [--check DIR]
"""

import argparse
import os

import numpy as np

from moetools.tracetail import demand, importers, predictive
from moetools.tracetail.core import item_space, working_set_gaps


def decode_tokens(path):
    with open(path, "rb") as handle:
        imported = importers.import_trace("csv", handle.read(), path)
    tokens = [ids for ids, phase in zip(imported.tokens, imported.phases) if phase == "decode"]
    return imported, tokens


def dataset(path):
    imported, tokens = decode_tokens(path)
    space = item_space(tokens, imported.n_expert)
    _, _, features = predictive.Predictor(space).run(demand.Batch(space, tokens, 0, 0), features=True)
    used = np.zeros((len(tokens), space.size), dtype=bool)
    for t, ids in enumerate(tokens):
        used[t, space.items(ids)] = True
    return features[:-1].reshape(-1, features.shape[-1]), used[1:].reshape(-1).astype(float)


def fit(x, y, lam=1.0, steps=30):
    w = np.zeros(x.shape[1])
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-np.clip(x @ w, -30, 30)))
        gradient = x.T @ (p - y) + lam * w
        hessian = (x * (p * (1 - p))[:, None]).T @ x + lam * np.eye(len(w))
        w -= np.linalg.solve(hessian, gradient)
    return w


def gap_closed(path):
    imported, _ = decode_tokens(path)
    return working_set_gaps(imported)[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", help="route_trace v1 CSV to fit on")
    parser.add_argument("--check", metavar="DIR", help="folder of qwen/gptoss .route.csv to report gap closed on")
    args = parser.parse_args()
    x, y = dataset(args.trace)
    w = fit(x, y)
    print(f"{len(y):,} rows, {y.mean():.4f} positive; weights:")
    print(np.array2string(np.round(w, 3), separator=", "))
    if args.check:
        for name in ("qwen", "gptoss"):
            path = os.path.join(args.check, f"{name}.route.csv")
            closed = gap_closed(path)
            print(name, {k: [float(round(100 * v, 1)) for v in vs] for k, vs in closed.items()})


if __name__ == "__main__":
    main()
