"""trace-tail core: tokens in, policy hit ratios, instruments and coverage curves out.

`Engine` takes tokens one at a time (from a followed file or a whole trace), splits prefill from
decode, replays every online policy at the chosen budgets and runs the instruments. `analyse`
does a whole trace and adds the offline parts: Belady's MIN and the one-pass LRU/MIN curves.
No printing, no click.
"""

from dataclasses import dataclass, field

import numpy as np

from moetools.errors import UsageError
from moetools.tracetail import curves, demand
from moetools.tracetail.instruments import Instruments
from moetools.tracetail.policies import ScoredPolicies
from moetools.tracetail.reader import MAX_EXPERTS, PhaseSplitter, split_ids

DEMAND_POLICIES = demand.DEMAND_POLICIES  # online demand caches: what device-fit may predict from
CEILING_POLICIES = ("belady",)  # offline optimum: a ceiling, never a prediction
TOPK_INSTRUMENTS = ScoredPolicies.NAMES  # top-S residency sets that bypass the cache: instruments only
CURVE_POLICIES = DEMAND_POLICIES + CEILING_POLICIES
PIN_POLICIES = ("predictive", "decay_bandit", "lfu", "lru")  # demand policies whose scores can rank pins
DEFAULT_PIN_POLICY = "predictive"
DEFAULT_CURVE_POINTS = 20
ALWAYS_RUN = ("lru",)  # the baseline of every gap-closed figure: run whatever --policies names (Belady too)


@dataclass
class Settings:
    budget: int  # slots for the summary and per-token lines
    curve_budgets: list = None  # slots for --curve (None: no curve)
    window: int = 8
    prefill: int = None
    top_k: int = 0
    moe_layers: int = 0
    n_expert: int = 0
    policies: tuple = DEMAND_POLICIES  # the demand caches replayed (select_policies), in DEMAND_POLICIES order
    instruments: bool = True  # the per-token instruments and the top-S sets
    threads: int = 0  # worker threads of a whole trace's replays (0: every core); a followed trace uses one


def select_policies(names):
    """The demand policies to replay for `names` (what --policies lists): those named plus LRU (the
    gap-closed baseline), in DEMAND_POLICIES order; "belady" is accepted and needs nothing here (the
    ceiling is always computed). UsageError naming the valid names for anything else."""
    names = [name.strip() for name in names if name.strip()]
    valid = DEMAND_POLICIES + CEILING_POLICIES
    unknown = [name for name in names if name not in valid]
    if unknown or not names:
        what = f"{unknown[0]!r} is not a policy" if unknown else "no policy named"
        raise UsageError(f"--policies: {what} (choose from {', '.join(valid)})")
    wanted = set(names) | set(ALWAYS_RUN)
    return tuple(name for name in DEMAND_POLICIES if name in wanted)


class Engine:
    """Online replay of one trace, token by token. `add` returns a per-token record for decode
    tokens (None for prefill, and for decode tokens when `lazy`). Budgets: the summary budget plus
    any curve budgets; every demand policy (demand.py) runs at all of them, and the top-S
    instruments rank once per token for all of them.

    `space` (demand.ItemSpace) declares the layers and experts per layer. `lazy` (whole-trace
    analysis) collects decode tokens and replays them in batches (`flush`), which the compiled
    kernels run much faster than one call per token; the figures are the same."""

    def __init__(self, settings, space, keep_decode=True, lazy=False):
        self.settings = settings
        self.space = space
        budgets = {settings.budget} | set(settings.curve_budgets or ())
        self.budgets = np.asarray(sorted(budgets), dtype=np.int64)
        self.main = int(np.searchsorted(self.budgets, settings.budget))
        self.keep_decode = keep_decode
        self.lazy = lazy
        self.reset()

    def reset(self):
        s = self.settings
        self.splitter = PhaseSplitter(s.prefill, s.top_k, s.moe_layers, s.n_expert)
        self.policies = tuple(s.policies)
        threads = (s.threads or demand.default_threads()) if self.lazy else 1
        # a whole trace's LRU comes from one stack-distance pass at the end (`finish`): request-level
        # LRU is the demand LRU (tests), at every budget at once; a followed trace replays it per token
        self.lru_by_stack = self.lazy and self.keep_decode and "lru" in self.policies
        replayed = tuple(name for name in self.policies if not (self.lru_by_stack and name == "lru"))
        self.demand = demand.DemandPolicies(self.space, self.budgets, names=replayed, threads=threads, ranked=self.policies)
        self.scored = ScoredPolicies(self.budgets, s.window) if s.instruments else None
        self.instruments = Instruments(s.window) if s.instruments else None
        self.tokens = 0
        self.prefill_tokens = 0
        self.decode = []  # decode tokens (id arrays) for the offline curves
        self.pending = []  # lazy: decode tokens not replayed yet
        self.decode_tokens = 0
        self.requests = 0
        self.hits = {name: np.zeros(len(self.budgets), dtype=np.int64) for name in self.policies}
        self.topk_hits = {name: np.zeros(len(self.budgets), dtype=np.int64) for name in TOPK_INSTRUMENTS} if self.scored else None

    def add(self, ids, phase=None):
        """One token (sorted request ids). `phase` from the input format, else the split rule."""
        index = self.tokens
        self.tokens += 1
        if phase is None:
            phase = self.splitter.classify(ids)
        else:
            self.splitter.index += 1
        if phase != "decode":
            self.flush()
            self.prefill_tokens += 1
            if self.scored is not None:
                self.scored.observe_prefill(ids)
            self.demand.observe_prefill(ids)
            return None
        n = len(ids)
        decode_index = self.decode_tokens
        self.decode_tokens += 1
        self.requests += n
        if self.keep_decode:
            self.decode.append(ids)
        if self.lazy:  # the instruments run at flush, beside the replays
            self.pending.append(ids)
            return None
        topk = instruments = None
        if self.scored is not None:
            topk = self._instrument([ids])
            instruments = self.last_instruments
        hits = self._replay([ids])
        record = {
            "token": index,
            "decode_token": decode_index,
            "experts": n,
            "hit": {name: int(hits[name][0, self.main]) / n if n else 0.0 for name in self.policies},
        }
        if topk is not None:
            record["topk_hit"] = {name: int(value[self.main]) / n if n else 0.0 for name, value in topk.items()}
        record["bandit_decay"] = self.demand.served_decay(self.main)
        if instruments is not None:
            record.update(instruments)
        return record

    def _instrument(self, tokens):
        """The top-S sets and instruments of decode `tokens`; returns the last token's top-S hits."""
        topk = None
        for ids in tokens:
            topk = self.scored.decode(ids)
            for name, value in topk.items():
                self.topk_hits[name] += value
            self.last_instruments = self.instruments.decode(ids)
        return topk

    def _replay(self, tokens):
        hits = self.demand.decode(tokens)
        for name, value in hits.items():
            self.hits[name] += value.sum(axis=0)
        return hits

    def flush(self):
        """Replays the decode tokens a lazy engine has collected."""
        if self.pending:
            pending, self.pending = self.pending, []
            beside = None
            if self.scored is not None:  # on the pool with the replays (its own state only)
                beside = demand.start(lambda: self._instrument(pending), self.demand.threads)
            self._replay(pending)
            if beside is not None:
                beside.result()

    def finish(self):
        """End of a whole trace: the replays flushed and LRU's hits from its stack distances."""
        self.flush()
        if self.lru_by_stack and self.decode_tokens:
            ids, _ = curves.dense_ids(self.decode_sequence())
            self.hits["lru"] = curves.hits_at(curves.lru_stack_distances(ids), self.budgets)

    def pins(self, count, policy=DEFAULT_PIN_POLICY):
        """The `count` experts `policy` values most (see demand.DemandPolicies.ranking), as sorted
        [(layer, expert)]."""
        self.flush()
        dense = self.demand.ranking(policy, self.main)[:count]
        if len(dense) == 0:
            return []
        layers, experts = split_ids(self.space.ids(dense))
        return sorted(zip(layers.tolist(), experts.tolist()))

    def decode_sequence(self):
        """Request ids of every decode token kept so far, in order (int64)."""
        if not self.decode:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate(self.decode)


def item_space(tokens, n_expert=0):
    """The demand caches' item space for a whole trace: its layers, `n_expert` experts per layer
    (else the largest expert id seen + 1)."""
    if not tokens:
        return demand.ItemSpace([0], max(1, n_expert))
    layers, experts = split_ids(np.concatenate(tokens))
    return demand.ItemSpace(np.unique(layers), max(int(n_expert or 0), int(experts.max()) + 1))


def model_space(layer_map, n_expert=0):
    """The item space of a followed trace: the layer map's MoE layers, the model's experts per layer
    (else the most a layer may have)."""
    layers = sorted({layer for layer, _ in layer_map.table.values()})
    return demand.ItemSpace(layers or [0], n_expert or layer_map.n_expert or MAX_EXPERTS)


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


def no_progress(desc, total, unit):
    """The default `progress` of analyse(): a bar that shows nothing."""
    from moetools.progress import progress

    return progress(total=total, desc=desc, unit=unit, enabled=False)


def belady_hits(sequence, budgets, tick=None):
    """Belady's MIN hits per budget over a decode request sequence: the OPT stack when it runs
    compiled (every budget in one pass), else one MIN replay per budget (cheaper than the numpy
    stack for a few budgets)."""
    ids, _ = curves.dense_ids(sequence)
    if curves.stack_engine() == "numba" or len(budgets) > 4:
        return curves.hits_at(curves.opt_stack_distances(ids, tick), budgets)
    return np.asarray([curves.belady_replay(ids, int(b)) for b in budgets], dtype=np.int64)


def gap_closed(hit, lru, belady):
    """Share of the LRU -> Belady gap a policy's hit ratio closes (None when there is no gap)."""
    if belady - lru <= 1e-12:
        return None
    return (hit - lru) / (belady - lru)


WORKING_SET_MULTIPLES = (0.25, 0.5, 1, 2)  # the policy table's budgets, in tokens' working sets


def working_set_gaps(imported, multiples=WORKING_SET_MULTIPLES):
    """(budgets, {demand policy: share of the LRU -> Belady gap it closes at each budget}) of an
    imported trace (importers.import_trace) at `multiples` of a token's working set (top-k x MoE
    layers): the figures of the README's policy table, checked by the tests and printed by
    benchmarks/fit_predictive.py."""
    working_set = imported.top_k * imported.n_layers
    budgets = [max(1, int(working_set * multiple)) for multiple in multiples]
    settings = Settings(budget=working_set, curve_budgets=budgets, top_k=imported.top_k, moe_layers=imported.n_layers,
                        n_expert=imported.n_expert)
    curve = analyse(imported.tokens, imported.phases, settings).curve
    lru, belady = np.array(curve["hit"]["lru"]), np.array(curve["hit"]["belady"])
    return budgets, {name: (np.array(curve["hit"][name]) - lru) / (belady - lru) for name in curve["demand_policies"]}


def summarise(engine, belady=None):
    """The summary document of an engine after a trace (policy hit ratios at the main budget).
    `belady`: MIN hits per budget (adds the ceiling, the gaps and the share of the LRU -> Belady
    gap each policy closes)."""
    engine.flush()
    requests = engine.requests
    main = engine.main

    def ratio(value):
        return float(value) / requests if requests else 0.0

    names = engine.policies
    hit = {name: ratio(engine.hits[name][main]) for name in names}
    if belady is not None:
        hit["belady"] = ratio(belady[main])
    doc = {
        "tokens": engine.tokens,
        "prefill_tokens": engine.prefill_tokens,
        "decode_tokens": engine.decode_tokens,
        "requests": requests,
        "experts_per_token": requests / engine.decode_tokens if engine.decode_tokens else 0.0,
        "budget_slots": int(engine.settings.budget),
        "hit": hit,
        "demand_policies": list(names),
        "gap_to_belady": {name: hit["belady"] - hit[name] for name in names} if "belady" in hit else {},
        "gap_closed": {name: gap_closed(hit[name], hit["lru"], hit["belady"]) for name in names} if "belady" in hit else {},
    }
    if engine.scored is not None:
        doc["topk_hit"] = {name: ratio(engine.topk_hits[name][main]) for name in TOPK_INSTRUMENTS}
    doc["bandit_decay"] = engine.demand.served_decay(main) if engine.decode_tokens else None
    if engine.instruments is not None:
        doc["instruments"] = engine.instruments.summary()
    return doc


def resolve_phases(tokens, phases, settings):
    """Phases for every token: the format's own where given, else the split rule."""
    splitter = PhaseSplitter(settings.prefill, settings.top_k, settings.moe_layers, settings.n_expert)
    out = []
    for ids, phase in zip(tokens, phases):
        guess = splitter.classify(ids)
        out.append(phase if phase is not None and settings.prefill is None else guess)
    return out


REPLAY_TICK_TOKENS = 256  # tokens between progress updates of the policy replay


def analyse(tokens, phases, settings, progress=no_progress):
    """Whole-trace analysis. `tokens`: list of sorted request-id arrays; `phases`: list of
    "prefill"/"decode"/None (None = split rule). `settings.budget` None means a quarter of the
    slots (the model's, else the distinct experts seen); `settings.curve_budgets` "auto" means a
    log-spaced sweep up to the distinct decode experts. Budgets are checked against the model's
    slots when known, else against the distinct experts seen.

    Returns an Analysis with hit ratios over decode requests (cache cold at the first decode
    token, like the reference replays). `progress(desc, total, unit)` opens a bar (a context
    manager with update(n)) for each long pass, with its total known up front so a terminal shows
    an ETA: the policy replay counts tokens, Belady's pass counts decode requests."""
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
    engine = Engine(settings, item_space(tokens, settings.n_expert), lazy=True)
    sequence = np.concatenate(decode_ids) if decode_ids else np.zeros(0, dtype=np.int64)
    threads = engine.demand.threads
    # Belady's pass needs only the decode requests: on the pool beside the replays (ticks when serial)
    belady_job = demand.start(lambda: belady_hits(sequence, engine.budgets), threads) if threads > 1 else None
    with progress("policy replay", len(tokens), "token") as bar:
        for index, (ids, phase) in enumerate(zip(tokens, phases), 1):
            engine.add(ids, phase)
            if index % REPLAY_TICK_TOKENS == 0:
                bar.update(REPLAY_TICK_TOKENS)
        engine.finish()
        bar.update(len(tokens) % REPLAY_TICK_TOKENS)
    with progress("Belady pass", len(sequence), "req") as bar:
        if belady_job is not None:
            belady = belady_job.result()
        else:
            belady = belady_hits(sequence, engine.budgets, tick=bar.update)
        bar.update(len(sequence) - bar.n)  # the per-budget replays and the last partial chunk do not tick
    summary = summarise(engine, belady)
    summary["distinct"] = distinct
    summary["total_slots"] = total
    curve = None
    if settings.curve_budgets:
        index = np.searchsorted(engine.budgets, np.asarray(settings.curve_budgets, dtype=np.int64))
        requests = engine.requests

        def ratios(values):
            return [float(v) / requests if requests else 0.0 for v in values[index]]

        hit = {name: ratios(engine.hits[name]) for name in engine.policies}
        hit["belady"] = ratios(belady)
        curve = {"slots": [int(b) for b in settings.curve_budgets], "hit": hit,
                 "demand_policies": list(engine.policies), "ceiling_policies": list(CEILING_POLICIES)}
        if engine.scored is not None:
            curve["topk_instruments"] = {name: ratios(engine.topk_hits[name]) for name in TOPK_INSTRUMENTS}
    return Analysis(summary, curve, distinct, {"engine": engine})


def follow_session(events, tokeniser, engine, path, max_tokens=None, check_after=256, close_last=False):
    """Follow a live trace: yields ("token", record) per decode token and ("notice", text).

    `events`: FollowEvents (reader.follow). A truncated or replaced file is a new serve: every
    statistic restarts and records carry the serve number. Once `check_after` records are in,
    a trace whose keys mostly match no expert tensor stops with an InputError. The trace has no
    end-of-token marker, so a token is emitted when the next one begins; at the end of the events
    the open token is NOT counted, as the daemon's segmenter (expert-pager-policy segment.rs
    `TokenSegmenter::push`) never completes it either -- unless `close_last`."""
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
    if not close_last:
        if tokeniser.has_open_token:
            yield "notice", f"{path}: the last token is still open (no next token began): not counted, as the daemon does not"
        return
    ids = tokeniser.flush()
    if ids is not None:
        record = emit(ids)
        if record is not None:
            yield "token", record


def plan_pins(engine, budget_bytes, expert_bytes, policy=DEFAULT_PIN_POLICY):
    """The pin list a plan should hold now: `policy`'s top experts up to the pin ceiling."""
    from moetools.formats.plan import pin_ceiling

    return engine.pins(pin_ceiling(budget_bytes, expert_bytes), policy)


def check_pin_policy(policy, policies=DEMAND_POLICIES):
    """UsageError unless `policy` is one whose scores can rank pins (a demand policy trace-tail runs)
    and is among `policies`, the demand policies this run replays."""
    if policy not in PIN_POLICIES:
        runs = ", ".join(PIN_POLICIES)
        raise UsageError(f"--pin-policy {policy}: not a policy trace-tail runs with scores to rank pins by (choose from {runs})")
    if policy not in policies:
        runs = ", ".join(name for name in PIN_POLICIES if name in policies)
        raise UsageError(f"--pin-policy {policy}: not run (--policies replays {', '.join(policies)}): add it to --policies "
                         f"or choose from {runs}")
