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

Whole process: the shared Qwen3-30B-A3B routing trace (../shared/traces/qwen.route.csv) repeated until
it holds at least 1,000,000 requests, written as the fork's 12-byte records, then `moetools trace-tail
TRACE --synth-layers 48 --once --curve -o CURVE` timed as a process (`python -m moetools` from this
checkout, so the figure is this code's), in requests/s, with its CPU time; as a
ratio against the LRU demand curve alone (in-process) over the same decode tokens at the curve's
budgets, and the predictive curve beside LRU's on that trace too. Every figure comes with the load
average: this machine is shared.

Before/after: `--against DIR` (another checkout, e.g. `git worktree add /tmp/main-before main`) runs
the demand curves (or, with --whole-only, the whole process) of DIR's moetools and of this checkout
one after the other, `--rounds` times alternately, in subprocesses, and prints each one's CPU and
wall seconds (the least of the rounds), the predictive curve in requests per CPU second and per
second beside LRU's for both, and this checkout's ratio to DIR's; the curves (hits, or the curve
JSON's sha256) must be equal. The demand curves run on `--threads` threads (default: every core;
a checkout without threads runs on one). With --whole-only, both the default `--curve` and
`--curve --policies P` (default predictive,lru; a checkout without the option runs the default, whose
curves of P must be the same) are timed, with the load average over the run.

    .venv/bin/python benchmarks/bench_tracetail.py [--requests N] [--lru-only] [--no-demand] [--no-whole] [--whole-only]
                                                   [--against DIR [--rounds N] [--policies P]] [--threads N]
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

if "--code" in sys.argv:  # import moetools from another checkout (a subprocess of --against)
    sys.path.insert(0, os.path.abspath(sys.argv[sys.argv.index("--code") + 1]))
else:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import scratch  # noqa: E402

from moetools.formats.trace import write_trace  # noqa: E402
from moetools.tracetail import curves, demand, importers  # noqa: E402
from moetools.tracetail.reader import make_ids  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SHARED_TRACES = ROOT.parent / "shared" / "traces"  # where tests/factory.py finds them

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


def policies_of(space, budgets, names, threads):
    """demand.DemandPolicies on `threads` threads (a checkout without the option runs on one)."""
    import inspect

    if "threads" in inspect.signature(demand.DemandPolicies).parameters:
        return demand.DemandPolicies(space, budgets, names=names, threads=threads)
    return demand.DemandPolicies(space, budgets, names=names)


def demand_curves(tokens, budgets, quiet=False, threads=1):
    """{policy: (seconds, hits per budget, CPU seconds)} of the demand-cache curves, predictive and LRU apart."""
    space = demand.ItemSpace(range(LAYERS), EXPERTS)
    warm = policies_of(space, budgets[:2], ("lru", "predictive"), threads)
    _, warm_up = timed(warm.decode, tokens[:8])  # numba import and compile or cache load, once per process
    if not quiet:
        print(f"demand-cache kernels: {curves.stack_engine()} (import and compile or cache load: {warm_up:.2f} s, once per process)")
    out = {}
    for name in ("lru", "predictive"):
        policies = policies_of(space, budgets, (name,), threads)
        start_cpu = time.process_time()
        hits, seconds = timed(policies.decode, tokens)
        out[name] = (seconds, hits[name].sum(axis=0), time.process_time() - start_cpu)
    return out


def repeated_shared_trace(path, min_requests):
    """Writes the shared Qwen trace repeated until >= min_requests requests as 12-byte records to
    `path`; returns (requests, its decode tokens, experts per layer)."""
    source = SHARED_TRACES / "qwen.route.csv"
    imported = importers.import_trace("csv", source.read_bytes(), str(source))
    per_copy = sum(len(ids) for ids in imported.tokens)
    copies = -(-min_requests // per_copy)
    tokens, phases = imported.tokens * copies, imported.phases * copies
    write_trace(str(path), *importers.tokens_to_records(tokens, phases))
    return per_copy * copies, [ids for ids, phase in zip(tokens, phases) if phase == "decode"], imported.n_expert


def cpu_of_children():
    """CPU seconds (user + system) of finished child processes (0 where `resource` is missing)."""
    try:
        import resource
    except ImportError:  # Windows
        return 0.0
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def whole_process(min_requests):
    """`trace-tail --once --curve` on the repeated shared trace as a process, against the LRU demand
    curve alone over its decode tokens at the curve's budgets (and the predictive curve beside it)."""
    if not (SHARED_TRACES / "qwen.route.csv").exists():
        print(f"whole process: skipped, {SHARED_TRACES / 'qwen.route.csv'} is not here")
        return
    with scratch("bench-tracetail-") as folder:
        trace = os.path.join(folder, "qwen-repeated.trace")
        curve_path = os.path.join(folder, "curve.json")
        requests, decode_tokens, n_expert = repeated_shared_trace(trace, min_requests)
        argv = [sys.executable, "-m", "moetools", "trace-tail", trace, "--synth-layers", "48", "--experts", str(n_expert), "--once", "--curve",
                "-o", curve_path]
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        cpu = cpu_of_children()
        start = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
        wall = time.perf_counter() - start
        cpu = cpu_of_children() - cpu
        with open(curve_path) as handle:
            doc = json.load(handle)
    budgets = sorted(set(doc["slots"]) | {doc["summary"]["budget_slots"]})
    decode_requests = sum(len(ids) for ids in decode_tokens)
    print(f"whole process: {requests:,} requests ({decode_requests:,} decode, {len(decode_tokens):,} decode tokens), "
          f"{len(budgets)} budgets; load average {load:.1f}")
    space = demand.ItemSpace(range(LAYERS), n_expert)
    runs = {}
    for name in ("lru", "predictive"):
        demand.DemandPolicies(space, budgets[:2], names=(name,)).decode(decode_tokens[:4])  # compile or cache load
        policies = demand.DemandPolicies(space, budgets, names=(name,))
        start_cpu = time.process_time()
        _, seconds = timed(policies.decode, decode_tokens)
        runs[name] = (seconds, time.process_time() - start_cpu)
    (lru_wall, lru_cpu), (pred_wall, pred_cpu) = runs["lru"], runs["predictive"]
    # under load a process gets a share of a core: CPU seconds compare better than wall seconds
    print(f"trace-tail --once --curve: {wall:.2f} s wall ({requests / wall:,.0f} requests/s), {cpu:.2f} s CPU "
          f"({requests / cpu:,.0f} requests per CPU second); {cpu / lru_cpu:.1f}x the CPU of the LRU demand curve alone "
          f"({lru_cpu:.2f} s CPU, {lru_wall:.2f} s wall) on its decode tokens")
    print(f"demand curves on this trace: lru {lru_cpu:.2f} s CPU, predictive {pred_cpu:.2f} s CPU "
          f"({pred_cpu / lru_cpu:.2f}x LRU's; wall {pred_wall / lru_wall:.2f}x)")


def demand_json(n_requests, n_budgets, threads=1):
    """The demand curves (lru, predictive) of the imported moetools on the synthetic trace, as JSON on
    stdout (for --against)."""
    _, _, distinct, routing = synthetic_trace(n_requests)
    budgets = np.unique(np.round(np.geomspace(LAYERS, distinct, n_budgets)).astype(np.int64))
    tokens = token_ids(routing)
    runs = demand_curves(tokens, budgets, quiet=True, threads=threads)
    print(json.dumps({name: {"cpu": cpu, "wall": wall, "hits": hits.tolist()} for name, (wall, hits, cpu) in runs.items()}
                     | {"requests": int(sum(len(t) for t in tokens)), "budgets": len(budgets)}))


def whole_json(trace, code, extra=()):
    """CPU and wall seconds, the curve JSON's sha256 and its curves of `trace-tail TRACE --once --curve
    [extra]` run from `code`."""
    with scratch("bench-tracetail-") as folder:
        curve_path = os.path.join(folder, "curve.json")
        argv = [sys.executable, "-m", "moetools", "trace-tail", trace, "--synth-layers", "48", "--experts", "128", "--top-k", "6",
                "--once", "--curve", "-o", curve_path, *extra]
        cpu = cpu_of_children()
        start = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, cwd=code)
        wall = time.perf_counter() - start
        cpu = cpu_of_children() - cpu
        with open(curve_path, "rb") as handle:
            data = handle.read()
    doc = json.loads(data)
    return {"cpu": cpu, "wall": wall, "sha256": hashlib.sha256(data).hexdigest(), "slots": doc["slots"], "hit": doc["hit"]}


def knows_option(code, option):
    """Whether `code`'s trace-tail has `option` (an older checkout may not)."""
    done = subprocess.run([sys.executable, "-m", "moetools", "trace-tail", "--help"], capture_output=True, text=True, cwd=code)
    return option in done.stdout


def load_average():
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def against_whole(codes, args):
    """The whole trace-tail --once --curve of each checkout alternately: the default (every policy and
    instrument) and `--policies P` (what a user who wants those curves runs; a checkout without the
    option runs the default, which holds them). The same curve JSON (sha256) for the default, the same
    curves of the named policies for --policies."""
    runs = {(mode, name): [] for mode in ("full", "policies") for name in codes}
    loads = []
    with scratch("bench-tracetail-") as folder:
        trace = os.path.join(folder, "qwen-repeated.trace")
        requests, _, _ = repeated_shared_trace(trace, args.requests)
        extras = {}
        small = str(SHARED_TRACES / "qwen.route.csv")
        for name, code in codes.items():
            has = knows_option(code, "--policies")
            extras[("full", name)] = ()
            extras[("policies", name)] = ("--policies", args.policies) if has else ()
            # compile each one's kernels (if a first run) on a small trace, untimed
            subprocess.run([sys.executable, "-m", "moetools", "trace-tail", small, "--curve"], check=True,
                           stdout=subprocess.DEVNULL, cwd=code)
        for _ in range(args.rounds):
            for mode in ("full", "policies"):
                for name, code in codes.items():
                    if mode == "policies" and not extras[(mode, name)]:
                        continue  # no --policies there: its default run (timed above) is what gives those curves
                    loads.append(load_average())
                    runs[(mode, name)].append(whole_json(trace, code, extras[(mode, name)]))
        loads.append(load_average())
        for name in codes:
            if not runs[("policies", name)]:
                runs[("policies", name)] = runs[("full", name)]
    full = {run["sha256"] for name in codes for run in runs[("full", name)]}
    assert len(full) == 1, f"the default curve JSON differs between the checkouts: {full}"
    reference = runs[("full", "before")][0]
    named = [name for name in runs[("policies", "after")][0]["hit"]]
    for name in codes:
        for run in runs[("policies", name)]:
            assert run["slots"] == reference["slots"] and all(run["hit"][p] == reference["hit"][p] for p in named), \
                f"--policies {args.policies}: curves differ from the default's ({name})"
    print(f"whole trace-tail --once --curve, {requests:,} requests (the shared Qwen trace repeated), {args.rounds} rounds "
          f"alternately, load average {min(loads):.1f}-{max(loads):.1f}; same default curve JSON (sha256 {full.pop()[:16]}), "
          f"same {', '.join(named)} curves with --policies")
    best = {key: (min(r["wall"] for r in value), min(r["cpu"] for r in value)) for key, value in runs.items()}
    for mode in ("full", "policies"):
        for name in codes:
            wall, cpu = best[(mode, name)]
            what = "default" if mode == "full" else (f"--policies {args.policies}" if extras[(mode, name)] else "default (no --policies)")
            print(f"  {mode:8} {name:6} {what:34}: {wall:6.2f} s wall, {cpu:6.2f} s CPU ({requests / wall:,.0f} requests/s wall)")
        wall = best[(mode, "after")][0] / best[(mode, "before")][0]
        cpu = best[(mode, "after")][1] / best[(mode, "before")][1]
        print(f"  {mode:8} after / before: {wall:.2f}x the wall, {cpu:.2f}x the CPU")


def against(other, args):
    """This checkout against `other` (its moetools), alternately, `args.rounds` times."""
    other = os.path.abspath(other)
    codes = {"before": other, "after": str(ROOT)}
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    runs = {name: [] for name in codes}
    if args.whole_only:
        against_whole(codes, args)
        return
    for _ in range(args.rounds):
        for name, code in codes.items():
            argv = [sys.executable, os.path.abspath(__file__), "--demand-json", "--code", code, "--requests", str(args.requests),
                    "--budgets", str(args.budgets), "--threads", str(args.threads)]
            out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
            runs[name].append(json.loads(out.strip().splitlines()[-1]))
    first = runs["before"][0]
    for name in runs:
        for run in runs[name]:
            for policy in ("lru", "predictive"):
                assert run[policy]["hits"] == first[policy]["hits"], f"{policy}'s curve differs ({name})"
    requests = first["requests"]
    cpu = {name: {policy: min(run[policy]["cpu"] for run in runs[name]) for policy in ("lru", "predictive")} for name in runs}
    wall = {name: {policy: min(run[policy]["wall"] for run in runs[name]) for policy in ("lru", "predictive")} for name in runs}
    print(f"demand curves over {first['budgets']} budgets, {requests:,} requests, {args.rounds} rounds alternately, load "
          f"average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end; the same hits")
    for name in codes:
        lru, pred = cpu[name]["lru"], cpu[name]["predictive"]
        print(f"  {name:6} ({codes[name]}): lru {lru:.2f} s CPU ({requests / lru:,.0f} req per CPU s), predictive {pred:.2f} s CPU "
              f"({requests / pred:,.0f} req per CPU s): {pred / lru:.2f}x LRU's")
        lru, pred = wall[name]["lru"], wall[name]["predictive"]
        print(f"  {'':6} wall: lru {lru:.2f} s ({requests / lru:,.0f} req/s), predictive {pred:.2f} s ({requests / pred:,.0f} req/s)")
    for policy in ("lru", "predictive"):
        print(f"  {policy}: after / before {cpu['after'][policy] / cpu['before'][policy]:.2f}x the CPU, "
              f"{wall['after'][policy] / wall['before'][policy]:.2f}x the wall (threads: {args.threads} after, 1 before)")


def demand_threads():
    return max(1, os.cpu_count() or 1)


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
    parser.add_argument("--no-whole", action="store_true", help="skip the whole-process trace-tail run")
    parser.add_argument("--whole-only", action="store_true", help="only the whole-process trace-tail run")
    parser.add_argument("--against", metavar="DIR", help="another checkout to compare with (before/after), alternately")
    parser.add_argument("--rounds", type=int, default=2, help="alternate rounds of --against")
    parser.add_argument("--policies", default="predictive,lru", help="--whole-only --against: the --policies run beside the default")
    parser.add_argument("--threads", type=int, default=demand_threads(), help="threads of the demand curves (default: every core)")
    parser.add_argument("--demand-json", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--code", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.demand_json:
        demand_json(args.requests, args.budgets, args.threads)
        return
    if args.against:
        against(args.against, args)
        return
    if args.whole_only:
        whole_process(args.requests)
        return
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
        if not args.no_whole:
            whole_process(args.requests)
        return
    tokens = token_ids(routing)
    runs = demand_curves(tokens, budgets, threads=args.threads)
    assert runs["lru"][1].tolist() == lru_curve.tolist(), "LRU demand replay disagrees with the one-pass curve"
    lru_s, pred_s = runs["lru"][0], runs["predictive"][0]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lru_cpu, pred_cpu = runs["lru"][2], runs["predictive"][2]
    print(f"demand curves over {len(budgets)} budgets (load average {load:.1f}): lru {lru_s:.2f} s ({n / lru_s:,.0f} req/s), "
          f"predictive {pred_s:.2f} s ({n / pred_s:,.0f} req/s): predictive costs {pred_s / lru_s:.2f}x LRU's demand replay "
          f"(CPU: {pred_cpu:.2f} s vs {lru_cpu:.2f} s, {pred_cpu / lru_cpu:.2f}x)")
    pred = runs["predictive"][1]
    print(f"hit @ {budgets[middle]} slots: predictive {pred[middle] / n:.4f} (lru {lru_curve[middle] / n:.4f})")
    if not args.no_whole:
        whole_process(args.requests)


if __name__ == "__main__":
    main()
