"""Every online residency policy replayed as a demand cache of S slots, at token granularity.

A demand cache admits every miss and pays a fetch for it; nothing is reloaded for free. Tokens are
replayed in order, layers ascending, experts ascending within a layer; the experts a token has
already requested in the current layer are not evicted for that layer. Policies differ only in
which cached expert they evict (the lowest key; see demandkernels.replay):

- `lru`: least recently requested (equal to request-level LRU: the protected experts are the most
  recent ones, so the rule never changes LRU's choice).
- `lfu`: fewest requests since decode started (counts survive eviction), ties least recent.
- `prefill_pin`: fewest prefill batches that used it, ties least recent: the prefill's experts
  are kept first, the rest is LRU.
- `decay_bandit`: the arms of the decayed-frequency bandit (decay in DECAY_ARMS, score <- d x score
  + used, once per token) each drive a shadow demand cache of the same size; each token the real
  cache evicts by the score of the arm whose shadow cache has the best reward (EMA 0.3 of its hit
  fraction), ties to the least recently seen, then the lowest item. Scores, rewards and the served arm change only
  between tokens.
- `predictive`: see predictive.py; its keys are refreshed when each layer's visit ends and the
  layer's distance from the current one joins the key.

`recency` (experts of the last N tokens, most recent first) is LRU when run as a demand cache, so it
is not replayed twice; its top-S residency set stays as an instrument (policies.ScoredPolicies).
Belady's MIN (curves.py) is the ceiling: no online policy can beat it.
"""

import os

import numpy as np

import moetools.tracetail.kernels.demand as demandkernels
from moetools.tracetail import curves
from moetools.tracetail.policies import DECAY_ARMS, REWARD_EMA
from moetools.tracetail.reader import split_ids

DEMAND_POLICIES = ("lru", "lfu", "decay_bandit", "prefill_pin", "predictive")
_TABLE_BYTES = 32 << 20  # per-chunk key tables stay around this size
BANDIT_BLOCK_TOKENS = 8  # tokens the bandit's caches replay at a time (demandkernels.bandit)


MIN_PARALLEL_TOKENS = 2  # a batch of one decode token replays on the calling thread (pool overhead)
_pools = {}  # threads -> ThreadPoolExecutor, made once per process


def default_threads():
    """Worker threads when none are asked for: every core (as quantize's --threads)."""
    return max(1, os.cpu_count() or 1)


def run_all(jobs, threads=1):
    """Results of the callables `jobs` (independent caches), in order. With threads > 1 they run on a
    pool of that many threads: the compiled kernels release the GIL, so budgets replay on every core.
    Each job touches only its own cache's arrays, so the order they run in cannot change a figure.
    Jobs are run in the order given (put the longest first)."""
    if threads <= 1 or len(jobs) <= 1:
        return [job() for job in jobs]
    pool = _pool(threads)
    futures = [pool.submit(job) for job in jobs]
    return [future.result() for future in futures]


class _Done:
    """The result of a job run at once (start() on one thread)."""

    def __init__(self, value):
        self.value = value

    def result(self):
        return self.value


def start(job, threads=1):
    """Starts `job` on the pool of `threads` threads (at once on the calling thread when 1); returns
    an object whose result() waits for it. For work beside the replays (its own arrays only)."""
    if threads <= 1:
        return _Done(job())
    return _pool(threads).submit(job)


def _pool(threads):
    pool = _pools.get(threads)
    if pool is None:
        from concurrent.futures import ThreadPoolExecutor

        pool = _pools[threads] = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="trace-tail")
    return pool


def split_budgets(budgets, lanes):
    """Budget indices in `lanes` groups of about equal cost (a replay's cost grows with its capacity):
    the largest first, each to the group with the least so far. Deterministic."""
    groups = [[] for _ in range(max(1, min(lanes, len(budgets))))]
    load = [0] * len(groups)
    for index in sorted(range(len(budgets)), key=lambda i: (-int(budgets[i]), i)):
        lane = load.index(min(load))
        groups[lane].append(index)
        load[lane] += int(budgets[index]) + 64
    return [sorted(group) for group in groups if group]


def replay_function():
    """The replay kernel: compiled when numba imports (and $MOETOOLS_NO_JIT is unset), else the
    same loop run by the interpreter."""
    compiled = curves.compiled_stack()
    return demandkernels.replay if compiled is None else compiled.replay


def bandit_function():
    """The bandit's token loop (demandkernels.bandit), compiled like `replay_function`."""
    compiled = curves.compiled_stack()
    return demandkernels.bandit if compiled is None else compiled.bandit


class ItemSpace:
    """Request ids (layer << 32 | expert) -> layer-major items (layer ordinal x n_experts + expert)."""

    def __init__(self, layers, n_experts):
        self.layers = np.asarray(sorted(set(int(x) for x in layers)), dtype=np.int64)
        self.n_layers = max(1, len(self.layers))
        self.n_experts = max(1, int(n_experts))
        self.size = self.n_layers * self.n_experts

    def items(self, ids):
        layers, experts = split_ids(ids)
        ordinal = np.searchsorted(self.layers, layers)
        bad = (ordinal >= len(self.layers)) | (self.layers[np.minimum(ordinal, len(self.layers) - 1)] != layers)
        if len(self.layers) == 0 or bad.any() or (experts >= self.n_experts).any():
            raise ValueError("request outside the item space (layer or expert not declared)")
        return ordinal * self.n_experts + experts

    def ids(self, items):
        items = np.asarray(items, dtype=np.int64)
        return (self.layers[items // self.n_experts] << 32) | (items % self.n_experts)


class CacheStates:
    """The arrays of demand caches of `capacities` slots (one row per cache) between calls (see
    demandkernels.replay, which runs one of them)."""

    def __init__(self, space, capacities):
        d, n_layers, n_experts = space.size, space.n_layers, space.n_experts
        self.capacities = np.asarray(capacities, dtype=np.int64).reshape(-1)
        n = len(self.capacities)
        leaves = 1 << max(0, n_layers - 1).bit_length()  # the layer tree's leaves: a power of two >= layers
        self.in_cache = np.zeros((n, d), dtype=np.int8)
        self.pos = np.zeros((n, d), dtype=np.int64)
        self.key_a = np.zeros((n, d), dtype=np.float64)
        self.key_b = np.zeros((n, d), dtype=np.int64)
        self.prot = np.full((n, d), -1, dtype=np.int64)
        self.members = np.zeros((n, n_layers, n_experts), dtype=np.int64)
        self.count = np.zeros((n, n_layers), dtype=np.int64)
        self.heap = np.zeros((n, n_layers, n_experts), dtype=np.int64)
        self.hpos = np.full((n, d), -1, dtype=np.int64)
        self.hcount = np.zeros((n, n_layers), dtype=np.int64)
        self.touched = np.zeros((n, 2 * n_layers), dtype=np.int64)
        self.tree = np.full((n, 2 * leaves), -1, dtype=np.int64)
        self.stack = np.zeros((n, 6 * (leaves.bit_length() + 2)), dtype=np.int64)  # the tree search's (node, layer, span)s
        self.held = np.zeros((n, n_experts), dtype=np.int64)
        self.misc = np.tile(np.array([0, -1, -1, 0, 0, 0], dtype=np.int64), (n, 1))
        self.space = space

    def arrays(self):
        """The state arrays in demandkernels' argument order (after the keys and tables)."""
        return (self.in_cache, self.pos, self.key_a, self.key_b, self.prot, self.members, self.count, self.heap,
                self.hpos, self.hcount, self.touched, self.tree, self.stack, self.held, self.misc)

    def run_cache(self, index, batch, mode, req_a=None, req_b=None, tab_a=None, tab_b=None, distance_weight=0.0):
        """Replays `batch` (whole tokens) on cache `index`; returns hit flags (int8, one per request)."""
        empty_f = np.zeros(1, dtype=np.float64)
        empty_i = np.zeros(1, dtype=np.int64)
        hit = np.zeros(len(batch.items), dtype=np.int8)
        replay_function()(
            batch.items, batch.visits, batch.rows, int(self.capacities[index]), self.space.n_layers, self.space.n_experts,
            mode, empty_f if req_a is None else req_a, empty_i if req_b is None else req_b,
            np.zeros((1, 1)) if tab_a is None else tab_a, np.zeros((1, 1), dtype=np.int64) if tab_b is None else tab_b,
            float(distance_weight), *(array[index] for array in self.arrays()), hit)
        return hit


class CacheState(CacheStates):
    """One demand cache's arrays."""

    def __init__(self, space, capacity):
        super().__init__(space, [capacity])
        self.capacity = int(capacity)

    def run(self, batch, mode, req_a=None, req_b=None, tab_a=None, tab_b=None, distance_weight=0.0):
        """Replays `batch` (whole tokens); returns hit flags (int8, one per request)."""
        return self.run_cache(0, batch, mode, req_a, req_b, tab_a, tab_b, distance_weight)


class Batch:
    """Decode tokens ready for the kernels: items, visit numbers, table rows, token bounds."""

    def __init__(self, space, tokens, first_token, first_request):
        lengths = np.asarray([len(ids) for ids in tokens], dtype=np.int64)
        self.items = space.items(np.concatenate(tokens)) if tokens else np.zeros(0, dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        self.rows = np.repeat(np.arange(len(tokens), dtype=np.int64), lengths)
        self.tokens = len(tokens)
        self.first_token = first_token
        self.visits = (self.rows + first_token) * space.n_layers + self.items // space.n_experts
        self.request_index = np.arange(len(self.items), dtype=np.int64) + first_request

    def per_token(self, hit):
        """Hits per token (int64) from per-request hit flags."""
        sums = np.concatenate([[0], np.cumsum(hit, dtype=np.int64)])
        return sums[self.starts[1:]] - sums[self.starts[:-1]]

    def slice(self, lo, hi):
        """Tokens lo..hi-1 of this batch as a batch of its own (rows from 0)."""
        part = Batch.__new__(Batch)
        a, b = self.starts[lo], self.starts[hi]
        part.items = self.items[a:b]
        part.starts = self.starts[lo : hi + 1] - a
        part.rows = self.rows[a:b] - lo
        part.tokens = hi - lo
        part.first_token = self.first_token + lo
        part.visits = self.visits[a:b]
        part.request_index = self.request_index[a:b]
        return part


def chunk_rows(space, tables=1):
    """Tokens per chunk so that `tables` key tables of (tokens x items) stay near _TABLE_BYTES."""
    return max(1, min(256, _TABLE_BYTES // (8 * space.size * max(1, tables))))


class BanditLane:
    """The bandit's state for some of the budgets (`indices` into the policies' budgets): each arm's
    shadow cache and the served cache at each, their rewards and served arms, and a copy of the
    scores (the same in every lane: they do not depend on the budget). Lanes are independent, so
    they replay on different threads with the same figures as one lane holding every budget."""

    def __init__(self, space, budgets, indices):
        n_arms = len(DECAY_ARMS)
        self.indices = np.asarray(indices, dtype=np.int64)
        self.budgets = np.asarray(budgets, dtype=np.int64)[self.indices]
        # each arm's shadow cache at every budget of the lane, then the served cache at every budget
        self.caches = CacheStates(space, np.tile(self.budgets, n_arms + 1))
        self.scores = np.zeros((n_arms, space.size))
        self.last_seen = np.full(space.size, -1, dtype=np.int64)
        self.rewards = np.zeros((n_arms, len(self.budgets)))
        self.served = np.zeros(len(self.budgets), dtype=np.int64)


class DemandPolicies:
    """All online demand caches for every budget, fed decode tokens in order (`decode`) and
    prefill tokens between them (`observe_prefill`). Resumable: feeding a trace in pieces gives
    the same hits as feeding it whole. `ranked`: policies to rank pins by besides `names` (LRU's
    ranking needs only the requests, not its cache). `threads` > 1 replays the independent caches (budgets,
    policies, the bandit's lanes of budgets, the predictor's next chunk) on a pool of threads,
    for batches of at least MIN_PARALLEL_TOKENS tokens; the figures are the same."""

    def __init__(self, space, budgets, names=DEMAND_POLICIES, predictor=None, threads=1, ranked=()):
        from moetools.tracetail.predictive import Predictor

        self.space = space
        self.budgets = np.asarray(budgets, dtype=np.int64)
        self.names = tuple(names)
        self.ranked = tuple(dict.fromkeys((*self.names, *(name for name in ranked if name == "lru"))))  # LRU needs no cache
        self.threads = max(1, int(threads))
        self.caches = {name: CacheStates(space, self.budgets) for name in self.names if name != "decay_bandit"}
        self.lanes = []
        if "decay_bandit" in self.names:
            # one lane per thread (each lane repeats the scores' update: more lanes cost more CPU)
            groups = split_budgets(self.budgets, self.threads)
            self.lanes = [BanditLane(space, self.budgets, group) for group in groups]
        self.decays = np.asarray(DECAY_ARMS)
        self.counts = np.zeros(space.size, dtype=np.int64)
        self.prefill_counts = np.zeros(space.size, dtype=np.int64)
        self.last_request = np.full(space.size, -1, dtype=np.int64)
        self.predictor = predictor if predictor is not None else (Predictor(space) if "predictive" in self.names else None)
        self.tokens = 0
        self.requests = 0

    def observe_prefill(self, ids):
        items = self.space.items(ids)
        np.add.at(self.prefill_counts, np.unique(items), 1)

    def decode(self, tokens):
        """Replays decode `tokens` (list of sorted id arrays). Returns {policy: int64 (tokens x budgets)
        hit counts per token}."""
        batch = Batch(self.space, tokens, self.tokens, self.requests)
        out = {name: np.zeros((batch.tokens, len(self.budgets)), dtype=np.int64) for name in self.names}
        step = chunk_rows(self.space, len(DECAY_ARMS) + 1)
        threads = self.threads if batch.tokens >= MIN_PARALLEL_TOKENS else 1
        bounds = [(lo, min(batch.tokens, lo + step)) for lo in range(0, batch.tokens, step)]
        parts = [batch.slice(lo, hi) for lo, hi in bounds]
        tables = None
        if "predictive" in self.caches and parts:
            tables = self.predictor.run(parts[0])
        for index, part in enumerate(parts):
            # the predictor's keys of the next part are computed beside this part's replays
            following = parts[index + 1] if tables is not None and index + 1 < len(parts) else None
            tables = self._decode_part(part, out, bounds[index][0], tables, following, threads)
        self.tokens += batch.tokens
        self.requests += len(batch.items)
        return out

    def _decode_part(self, part, out, lo, tables, following, threads):
        """Replays `part` (its predictor keys `tables`); returns the predictor's keys of `following`."""
        rows = slice(lo, lo + part.tokens)
        items = part.items
        np.maximum.at(self.last_request, items, part.request_index)
        count = self._running_counts(items)
        keys = {"lru": (part.request_index.astype(np.float64), np.zeros(len(items), dtype=np.int64)),
                "lfu": (count, part.request_index),
                "prefill_pin": (self.prefill_counts[items].astype(np.float64), part.request_index)}
        jobs, slots = [], []
        for lane in self.lanes:  # the longest jobs first
            jobs.append(lambda lane=lane: self._bandit(lane, part))
            slots.append(("decay_bandit", lane))
        if following is not None:
            jobs.append(lambda: self.predictor.run(following))
            slots.append(("next tables", None))
        order = np.argsort(-self.budgets, kind="stable").tolist()  # larger caches cost more
        if "predictive" in self.caches:
            tab_a, tab_b = tables
            for b in order:
                jobs.append(lambda b=b: self.caches["predictive"].run_cache(b, part, demandkernels.KEYS_PER_VISIT, tab_a=tab_a, tab_b=tab_b,
                                                                             distance_weight=1.0))
                slots.append(("predictive", b))
        for name, (key_a, key_b) in keys.items():
            if name not in self.caches:
                continue
            for b in order:
                jobs.append(lambda b=b, caches=self.caches[name], key_a=key_a, key_b=key_b:
                            caches.run_cache(b, part, demandkernels.KEYS_PER_REQUEST, key_a, key_b))
                slots.append((name, b))
        following_tables = None
        for (name, b), result in zip(slots, run_all(jobs, threads)):
            if name == "next tables":
                following_tables = result
            elif name == "decay_bandit":
                out[name][rows][:, b.indices] = result
            else:
                out[name][rows, b] = part.per_token(result)
        return following_tables

    def _running_counts(self, items):
        """Request count of each request's item including it (counts since decode started)."""
        order = np.argsort(items, kind="stable")
        ordered = items[order]
        start = np.concatenate([[True], ordered[1:] != ordered[:-1]])
        group = np.cumsum(start) - 1
        first = np.flatnonzero(start)
        within = np.arange(len(items)) - first[group]
        count = np.empty(len(items), dtype=np.int64)
        count[order] = self.counts[ordered] + within + 1
        np.add.at(self.counts, items, 1)
        return count.astype(np.float64)

    def _bandit(self, lane, part):
        """One lane's shadow caches, rewards and served caches over `part` (demandkernels.bandit);
        returns its served caches' hits (tokens x the lane's budgets)."""
        block = min(BANDIT_BLOCK_TOKENS, max(1, part.tokens))
        hits = np.zeros((part.tokens, len(lane.budgets)), dtype=np.int64)
        bandit_function()(
            part.items, part.visits, part.rows, part.starts, part.first_token, self.space.n_layers, self.space.n_experts,
            lane.budgets, self.decays, 1 - REWARD_EMA, REWARD_EMA, lane.scores, lane.last_seen, lane.rewards, lane.served,
            block, np.zeros((len(self.decays), block, self.space.size)), np.zeros((block, self.space.size), dtype=np.int64),
            np.zeros(len(part.items), dtype=np.int64), np.zeros(len(part.items), dtype=np.int64),
            *lane.caches.arrays(), hits)
        return hits

    def _served_arm(self, budget_index):
        for lane in self.lanes:
            where = np.flatnonzero(lane.indices == budget_index)
            if len(where):
                return int(lane.served[where[0]])
        raise IndexError(budget_index)

    def served_decay(self, budget_index=0):
        if "decay_bandit" not in self.names:
            return None
        return float(self.decays[self._served_arm(budget_index)])

    def ranking(self, policy, budget_index=0):
        """Items `policy` values most now, best first (only items decode has used): the order its
        scores give, for pins. predictive: latest key (soonest expected use); decay_bandit: the
        served arm's score, ties most recent; lfu: request count, ties most recent; lru: most
        recent request."""
        if policy not in self.ranked:
            raise ValueError(f"policy {policy!r} is not run (runs: {', '.join(self.ranked)})")
        seen = np.flatnonzero(self.last_request >= 0)
        recent = self.last_request[seen]
        if policy == "predictive":
            keys = [recent, self.predictor.latest[seen]]
        elif policy == "decay_bandit":
            keys = [recent, self.lanes[0].scores[self._served_arm(budget_index), seen]]
        elif policy == "lfu":
            keys = [recent, self.counts[seen]]
        elif policy == "lru":
            keys = [recent]
        else:
            raise ValueError(f"policy {policy!r} has no ranking")
        return seen[np.lexsort([-k for k in keys])]
