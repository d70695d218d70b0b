"""trace-tail core: tokens in, policy hit ratios, instruments and coverage curves out.

`Engine` takes tokens one at a time (from a followed file or a whole trace), splits prefill from
decode, replays every online policy at the chosen budgets and runs the instruments. `analyse`
does a whole trace and adds the offline parts: Belady's MIN and the one-pass LRU/MIN curves.
No printing, no click.
"""

from dataclasses import dataclass, field

import numpy as np

from moetools.errors import UsageError
from moetools.tracetail import curves
from moetools.tracetail.instruments import Instruments
from moetools.tracetail.policies import LFUCache, LRUCache, ScoredPolicies
from moetools.tracetail.reader import PhaseSplitter, split_ids

ONLINE_POLICIES = ("lru", "lfu", "decay_bandit", "recency", "prefill_pin")
CURVE_POLICIES = ("lru", "lfu", "belady", "decay_bandit", "recency", "prefill_pin")
DEFAULT_CURVE_POINTS = 20


@dataclass
class Settings:
    budget: int  # slots for the summary and per-token lines
    curve_budgets: list = None  # slots for --curve (None: no curve)
    window: int = 8
    prefill: int = None
    top_k: int = 0
    moe_layers: int = 0
    n_expert: int = 0


class Engine:
    """Online replay of one trace, token by token. `add` returns a per-token record for decode
    tokens (None for prefill). Budgets: the summary budget plus any curve budgets; LRU and LFU
    run as demand caches at the summary budget (the curves get them from stack distances), the
    scored policies rank once per token for all budgets."""

    def __init__(self, settings, keep_decode=True, demand=("lru", "lfu")):
        self.settings = settings
        budgets = {settings.budget} | set(settings.curve_budgets or ())
        self.budgets = np.asarray(sorted(budgets), dtype=np.int64)
        self.main = int(np.searchsorted(self.budgets, settings.budget))
        self.keep_decode = keep_decode
        # which demand caches to replay online: a whole-trace analysis takes LRU (and, with a
        # curve, LFU) from one stack-distance pass instead, so replaying them would be wasted
        self.demand = tuple(demand)
        self.reset()

    def reset(self):
        s = self.settings
        self.splitter = PhaseSplitter(s.prefill, s.top_k, s.moe_layers, s.n_expert)
        self.lru = LRUCache(s.budget) if "lru" in self.demand else None
        self.lfu = LFUCache(s.budget) if "lfu" in self.demand else None
        self.scored = ScoredPolicies(self.budgets, s.window)
        self.instruments = Instruments(s.window)
        self.tokens = 0
        self.prefill_tokens = 0
        self.decode = []  # decode tokens (id arrays) for the offline curves
        self.decode_tokens = 0
        self.requests = 0
        self.hits = {name: np.zeros(len(self.budgets), dtype=np.int64) for name in ONLINE_POLICIES}

    def add(self, ids, phase=None):
        """One token (sorted request ids). `phase` from the input format, else the split rule."""
        index = self.tokens
        self.tokens += 1
        if phase is None:
            phase = self.splitter.classify(ids)
        else:
            self.splitter.index += 1
        if phase != "decode":
            self.prefill_tokens += 1
            self.scored.observe_prefill(ids)
            return None
        n = len(ids)
        decode_index = self.decode_tokens
        self.decode_tokens += 1
        self.requests += n
        if self.keep_decode:
            self.decode.append(ids)
        lru_hits = self.lru.access(ids) if self.lru is not None else 0
        lfu_hits = self.lfu.access(ids) if self.lfu is not None else 0
        self.hits["lru"][self.main] += lru_hits
        self.hits["lfu"][self.main] += lfu_hits
        scored = self.scored.decode(ids)
        for name, value in scored.items():
            self.hits[name] += value
        hit = {"lru": lru_hits, "lfu": lfu_hits, **{name: int(value[self.main]) for name, value in scored.items()}}
        record = {
            "token": index,
            "decode_token": decode_index,
            "experts": n,
            "hit": {name: value / n if n else 0.0 for name, value in hit.items()},
            "bandit_decay": self.scored.served_decay(self.main),
        }
        record.update(self.instruments.decode(ids))
        return record

    def pins(self, count):
        """The bandit's top `count` experts as sorted [(layer, expert)]."""
        dense = self.scored.top_items(count, self.main)
        if len(dense) == 0:
            return []
        layers, experts = split_ids(self.scored.ids_of(dense))
        return sorted(zip(layers.tolist(), experts.tolist()))

    def decode_sequence(self):
        """Request ids of every decode token kept so far, in order (int64)."""
        if not self.decode:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate(self.decode)


@dataclass
class Analysis:
    summary: dict
    curve: dict = None  # {"slots": [...], "hit": {policy: [...]}} when asked
    distinct: int = 0
    extra: dict = field(default_factory=dict)


def default_curve_budgets(distinct, points=DEFAULT_CURVE_POINTS):
    """Log-spaced slot counts from 1 to `distinct` (inclusive), without duplicates."""
    if distinct <= 0:
        return []
    sweep = np.unique(np.round(np.geomspace(1, distinct, points)).astype(np.int64))
    return [int(x) for x in sweep if x >= 1]


def check_budgets(budgets, limit, what):
    """Reject budgets of 0 (or less) and budgets larger than `limit` slots."""
    for budget in budgets:
        if budget <= 0:
            raise UsageError(f"budget of {budget} slots: a cache needs at least 1 slot")
        if limit and budget > limit:
            raise UsageError(f"budget of {budget} slots is larger than the {limit} {what}")


def offline_hits(sequence, budgets, curve=True, tick=None):
    """{lru, lfu, belady: hits per budget} over a decode request sequence.

    With `curve`, one stack-distance pass per policy gives every budget at once. Without it only
    the summary's budgets are wanted and LFU comes from the engine's online cache; Belady is still
    the OPT stack when it runs compiled (cheaper than one replay), else one MIN replay per budget
    (cheaper than the numpy stack)."""
    ids, _ = curves.dense_ids(sequence)
    out = {"lru": curves.hits_at(curves.lru_stack_distances(ids), budgets)}
    if curve:
        out["lfu"] = curves.hits_at(curves.lfu_stack_distances(ids, tick), budgets)
    if curve or curves.stack_engine() == "numba":
        out["belady"] = curves.hits_at(curves.opt_stack_distances(ids, tick), budgets)
    else:
        out["belady"] = np.asarray([curves.belady_replay(ids, int(b)) for b in budgets], dtype=np.int64)
    return out


def summarise(engine, offline=None):
    """The summary document of an engine after a trace (policy hit ratios at the main budget).
    `offline`: hits per budget from `offline_hits` (adds Belady)."""
    requests = engine.requests
    main = engine.main

    def ratio(value):
        return float(value) / requests if requests else 0.0

    hit = {name: ratio(engine.hits[name][main]) for name in ONLINE_POLICIES}
    for name, values in (offline or {}).items():
        hit[name] = ratio(values[main])
    doc = {
        "tokens": engine.tokens,
        "prefill_tokens": engine.prefill_tokens,
        "decode_tokens": engine.decode_tokens,
        "requests": requests,
        "experts_per_token": requests / engine.decode_tokens if engine.decode_tokens else 0.0,
        "budget_slots": int(engine.settings.budget),
        "hit": hit,
        "gap_to_belady": {name: hit["belady"] - value for name, value in hit.items() if name != "belady"} if "belady" in hit else {},
        "bandit_decay": engine.scored.served_decay(main) if engine.decode_tokens else None,
        "instruments": engine.instruments.summary(),
    }
    return doc


def resolve_phases(tokens, phases, settings):
    """Phases for every token: the format's own where given, else the split rule."""
    splitter = PhaseSplitter(settings.prefill, settings.top_k, settings.moe_layers, settings.n_expert)
    out = []
    for ids, phase in zip(tokens, phases):
        guess = splitter.classify(ids)
        out.append(phase if phase is not None and settings.prefill is None else guess)
    return out


def analyse(tokens, phases, settings, tick=None):
    """Whole-trace analysis. `tokens`: list of sorted request-id arrays; `phases`: list of
    "prefill"/"decode"/None (None = split rule). `settings.budget` None means a quarter of the
    slots (the model's, else the distinct experts seen); `settings.curve_budgets` "auto" means a
    log-spaced sweep up to the distinct decode experts. Budgets are checked against the model's
    slots when known, else against the distinct experts seen.

    Returns an Analysis with hit ratios over decode requests (cache cold at the first decode
    token, like the reference replays). `tick(n)` reports progress of the long curve passes."""
    phases = resolve_phases(tokens, phases, settings)
    decode_ids = [ids for ids, phase in zip(tokens, phases) if phase == "decode"]
    distinct = int(len(np.unique(np.concatenate(decode_ids)))) if decode_ids else 0
    total = settings.moe_layers * settings.n_expert
    limit, what = (total, "slots of the model (layers x experts)") if total else (distinct, "distinct experts the trace's decode uses (give --model or --experts for the model's count)")
    if settings.budget is None:
        settings.budget = max(1, (total or distinct) // 4)
    if settings.curve_budgets == "auto":
        settings.curve_budgets = default_curve_budgets(distinct)
    check_budgets([settings.budget, *(settings.curve_budgets or ())], limit, what)
    engine = Engine(settings, demand=() if settings.curve_budgets else ("lfu",))
    for ids, phase in zip(tokens, phases):
        engine.add(ids, phase)
    sequence = engine.decode_sequence()
    offline = offline_hits(sequence, engine.budgets, curve=bool(settings.curve_budgets), tick=tick)
    summary = summarise(engine, offline)
    summary["distinct"] = distinct
    summary["total_slots"] = total
    curve = None
    if settings.curve_budgets:
        index = np.searchsorted(engine.budgets, np.asarray(settings.curve_budgets, dtype=np.int64))
        hit = {name: values[index] for name, values in offline.items()}
        for name in ("decay_bandit", "recency", "prefill_pin"):
            hit[name] = engine.hits[name][index]
        requests = engine.requests
        curve = {"slots": [int(b) for b in settings.curve_budgets],
                 "hit": {name: [float(v) / requests if requests else 0.0 for v in hit[name]] for name in CURVE_POLICIES}}
    return Analysis(summary, curve, distinct, {"engine": engine})


def follow_session(events, tokeniser, engine, path, max_tokens=None, check_after=256):
    """Follow a live trace: yields ("token", record) per decode token and ("notice", text).

    `events`: FollowEvents (reader.follow). A truncated or replaced file is a new serve: every
    statistic restarts and records carry the serve number. Once `check_after` records are in,
    a trace whose keys mostly match no expert tensor stops with an InputError. At the end of the
    events the open token is complete (the trace has no end-of-token marker, so a token is
    otherwise emitted when the next one begins)."""
    serve = 0
    decoded = 0
    checked = False

    def emit(ids):
        record = engine.add(ids)
        if record is not None:
            record["serve"] = serve
        return record

    for event in events:
        if event.kind in ("truncated", "reappeared"):
            what = "shrank" if event.kind == "truncated" else "was replaced"
            yield "notice", f"{path}: trace {what}: a new serve; statistics start over"
            tokeniser.reset()
            engine.reset()
            serve += 1
            checked = False
            continue
        if event.kind == "deleted":
            yield "notice", f"{path}: trace deleted; waiting for it to come back"
            continue
        if event.kind != "data":
            continue
        tokens = tokeniser.feed(event.data)
        if not checked and tokeniser.records >= check_after:
            tokeniser.check_model(path)
            checked = True
        for ids in tokens:
            record = emit(ids)
            if record is None:
                continue
            yield "token", record
            decoded += 1
            if max_tokens and decoded >= max_tokens:
                return
    tokeniser.check_model(path)
    ids = tokeniser.flush()
    if ids is not None:
        record = emit(ids)
        if record is not None:
            yield "token", record


def plan_pins(engine, budget_bytes, expert_bytes):
    """The pin list a plan should hold now: the bandit's top experts up to the pin ceiling."""
    from moetools.formats.plan import pin_ceiling

    return engine.pins(pin_ceiling(budget_bytes, expert_bytes))
