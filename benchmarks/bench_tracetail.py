"""Benchmark: one-pass LRU and Belady (MIN) curves vs a straightforward per-budget replay, and the
demand-cache curves (predictive beside LRU) on the same trace.

A synthetic decode trace shaped like Qwen3-30B-A3B routing (48 MoE layers x 128 experts, top-6,
so 288 requests per token), with Zipf-skewed expert popularity per layer and token-to-token
persistence, of at least 1,000,000 requests. The one-pass curves give the hit count of every
budget (1..distinct); the baseline replays an OrderedDict LRU and a heap-based MIN once per
budget for 20 log-spaced budgets. Both must agree at those budgets. Prints each figure as a
ratio against the baseline measured in the same run. The MIN pass runs on the numba-compiled
priority stack when numba imports (MOETOOLS_NO_JIT=1 times the numpy engine instead).

Demand curves: the token-granular demand caches of trace-tail's curve (demand.DemandPolicies) at the
same budgets, `predictive` (its budget-independent feature pass once, then one cache per budget) and
`lru` run alone, each in requests/s of trace (every budget's curve point included), with the
predictive curve as a ratio against LRU's demand replay in the same run, and both hit ratios.

    .venv/bin/python benchmarks/bench_tracetail.py [--requests N] [--lru-only] [--no-demand]
"""

import argparse
import time

import numpy as np

from moetools.tracetail import curves, demand
from moetools.tracetail.reader import make_ids

LAYERS, EXPERTS, TOP_K = 48, 128, 6


def synthetic_trace(n_requests, seed=0, zipf=1.1, persist=0.35):
    """(dense request ids, token start offsets) of >= n_requests decode requests."""
    rng = np.random.default_rng(seed)
    n_tokens = -(-n_requests // (LAYERS * TOP_K))
    popularity = 1.0 / np.arange(1, EXPERTS + 1) ** zipf
    probs = np.stack([popularity[rng.permutation(EXPERTS)] for _ in range(LAYERS)])
    probs /= probs.sum(axis=1, keepdims=True)
    cdf = np.cumsum(probs, axis=1)
    tokens = np.empty((n_tokens, LAYERS, TOP_K), dtype=np.int64)
    prev = None
    for t in range(n_tokens):
        # oversample, keep the first TOP_K distinct experts per layer
        draws = (rng.random((LAYERS, 4 * TOP_K))[:, :, None] > cdf[:, None, :]).sum(axis=2)
        if prev is not None:
            keep = rng.random((LAYERS, TOP_K)) < persist
            draws[:, :TOP_K] = np.where(keep, prev, draws[:, :TOP_K])
        for layer in range(LAYERS):
            row = draws[layer]
            _, first = np.unique(row, return_index=True)
            chosen = row[np.sort(first)][:TOP_K]
            while len(chosen) < TOP_K:  # rare: too few distinct draws
                extra = rng.integers(0, EXPERTS)
                if extra not in chosen:
                    chosen = np.append(chosen, extra)
            tokens[t, layer] = np.sort(chosen)
        prev = tokens[t]
    seq = (np.arange(LAYERS)[None, :, None] * EXPERTS + tokens).reshape(-1)
    ids, distinct = curves.dense_ids(seq)
    return ids, np.arange(n_tokens, dtype=np.int64) * LAYERS * TOP_K, distinct, tokens


def token_ids(tokens):
    """The routing array [tokens, layers, top_k] as trace-tail's sorted request-id arrays."""
    layers = np.repeat(np.arange(LAYERS), TOP_K)
    return [np.sort(make_ids(layers, token.reshape(-1))) for token in tokens]


def demand_curves(tokens, budgets):
    """{policy: (seconds, hits per budget)} of the demand-cache curves, predictive and LRU apart."""
    space = demand.ItemSpace(range(LAYERS), EXPERTS)
    warm = demand.DemandPolicies(space, budgets[:2], names=("lru", "predictive"))
    _, warm_up = timed(warm.decode, tokens[:8])  # numba import and compile or cache load, once per process
    print(f"demand-cache kernels: {curves.stack_engine()} (import and compile or cache load: {warm_up:.2f} s, once per process)")
    out = {}
    for name in ("lru", "predictive"):
        policies = demand.DemandPolicies(space, budgets, names=(name,))
        hits, seconds = timed(policies.decode, tokens)
        out[name] = (seconds, hits[name].sum(axis=0))
    return out


def timed(function, *args):
    start = time.perf_counter()
    value = function(*args)
    return value, time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--budgets", type=int, default=20)
    parser.add_argument("--lru-only", action="store_true", help="skip Belady (a quicker run)")
    parser.add_argument("--no-demand", action="store_true", help="skip the demand-cache curves")
    args = parser.parse_args()
    ids, starts, distinct, routing = synthetic_trace(args.requests)
    n = len(ids)
    budgets = np.unique(np.round(np.geomspace(LAYERS, distinct, args.budgets)).astype(np.int64))
    print(f"trace: {n:,} requests, {len(starts):,} tokens, {distinct:,} distinct experts; {len(budgets)} replay budgets")

    lru_dist, lru_one = timed(curves.lru_stack_distances, ids)
    lru_curve = curves.hits_at(lru_dist, budgets)
    lru_replay, lru_base = timed(lambda: [curves.lru_replay(ids, int(b)) for b in budgets])
    assert lru_curve.tolist() == lru_replay, "LRU one-pass curve disagrees with the replay"
    rows = [("lru", lru_one, lru_base)]
    if not args.lru_only:
        # the compiled engine's one-off cost (numba import, and the compile on the first run after
        # an install, cached after that) is measured apart and printed; it is not per trace
        _, warm_up = timed(curves.opt_stack_distances, ids[:1000])
        print(f"priority stack engine: {curves.stack_engine()} (import and compile or cache load: {warm_up:.2f} s, once per process)")
        opt_dist, opt_one = timed(curves.opt_stack_distances, ids)
        opt_curve = curves.hits_at(opt_dist, budgets)
        opt_replay, opt_base = timed(lambda: [curves.belady_replay(ids, int(b)) for b in budgets])
        assert opt_curve.tolist() == opt_replay, "Belady one-pass curve disagrees with the replay"
        rows.append(("belady", opt_one, opt_base))

    print(f"{'curve':8} {'one pass s':>10} {'req/s':>12} {'replay s':>9} {'speed-up':>9} {'every budget':>13}")
    for name, one, base in rows:
        # the one pass yields every budget 1..distinct; replaying each of them would cost about
        # distinct / len(budgets) times the measured replay (extrapolated, not measured)
        every = base / len(budgets) * distinct / one
        print(f"{name:8} {one:10.2f} {n / one:12,.0f} {base:9.2f} {base / one:8.1f}x {every:12,.0f}x")
    print(f"speed-up: one pass (all {distinct:,} budgets) vs replaying {len(budgets)} budgets, measured; "
          f"'every budget': vs replaying all {distinct:,}, extrapolated from the measured replays")
    middle = len(budgets) // 2
    belady = "" if args.lru_only else f", belady {opt_curve[middle] / n:.4f}"
    print(f"hit @ {budgets[middle]} slots: lru {lru_curve[middle] / n:.4f}{belady}")
    if args.no_demand:
        return
    tokens = token_ids(routing)
    runs = demand_curves(tokens, budgets)
    assert runs["lru"][1].tolist() == lru_curve.tolist(), "LRU demand replay disagrees with the one-pass curve"
    lru_s, pred_s = runs["lru"][0], runs["predictive"][0]
    print(f"demand curves over {len(budgets)} budgets: lru {lru_s:.2f} s ({n / lru_s:,.0f} req/s), "
          f"predictive {pred_s:.2f} s ({n / pred_s:,.0f} req/s): predictive costs {pred_s / lru_s:.2f}x LRU's demand replay")
    pred = runs["predictive"][1]
    print(f"hit @ {budgets[middle]} slots: predictive {pred[middle] / n:.4f} (lru {lru_curve[middle] / n:.4f})")


if __name__ == "__main__":
    main()
