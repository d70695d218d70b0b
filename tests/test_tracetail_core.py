"""trace-tail cores: trace format, tokeniser, split rule, one-pass curves, policies, instruments."""

import os

import numpy as np
import pytest

from moetools.errors import InputError
from moetools.formats import trace as trace_format
from moetools.tracetail import curves
from moetools.tracetail.core import Engine, Settings, analyse, follow_session, model_space
from moetools.tracetail.importers import tokens_to_records
from moetools.tracetail.instruments import Instruments
from moetools.tracetail.policies import ScoredPolicies
from moetools.tracetail.reader import FollowEvent, LayerMap, PhaseSplitter, Tokeniser, follow, make_ids, split_ids

# --- format ------------------------------------------------------------------------------------


def test_fnv_fork_basis_matches_design():
    assert trace_format.FORK_OFFSET_BASIS == 1469598103934665603
    assert trace_format.fnv1a64("blk.5.ffn_up_exps.weight") == 16542725649459479844


def test_fnv_standard_basis_is_textbook():
    # FNV-1a 64 of "a" with the textbook basis (published test vector)
    assert trace_format.fnv1a64("a", trace_format.STANDARD_OFFSET_BASIS) == 0xAF63DC4C8601EC8C
    assert trace_format.fnv1a64("blk.5.ffn_up_exps.weight", trace_format.STANDARD_OFFSET_BASIS) != 16542725649459479844


def test_hash_uses_middle_segment_of_hashed_names():
    assert trace_format.fnv1a64("CUDA0#blk.5.ffn_up_exps.weight#0") == 16542725649459479844


def test_records_round_trip_and_torn_tail():
    data = trace_format.encode_records([1, 2**64 - 1], [7, 2**32 - 1])
    assert len(data) == 24
    tkeys, experts, tail = trace_format.decode_records(data + b"\x01\x02\x03")
    assert tkeys.tolist() == [1, 2**64 - 1] and experts.tolist() == [7, 2**32 - 1] and tail == b"\x01\x02\x03"


# --- helpers ------------------------------------------------------------------------------------


def token(pairs):
    layers, experts = zip(*pairs)
    return np.unique(make_ids(layers, experts))


def decode_tokens(n_layers, sets):
    """Tokens where every layer uses `experts` of the given per-token list."""
    return [token([(layer, e) for layer in range(n_layers) for e in experts]) for experts in sets]


def trace_bytes(tokens, phases=None):
    tkeys, experts = tokens_to_records(tokens, phases or ["decode"] * len(tokens))
    return trace_format.encode_records(tkeys, experts)


# --- tokeniser ------------------------------------------------------------------------------------


def test_tokeniser_rebuilds_tokens_and_dedupes_matrices():
    tokens = decode_tokens(3, [[1, 4], [1, 5], [2, 3]])
    tok = Tokeniser(LayerMap.synth(3))
    got = tok.feed(trace_bytes(tokens))
    got.append(tok.flush())
    assert [t.tolist() for t in got] == [t.tolist() for t in tokens]
    assert tok.records == 3 * 3 * 3 * 2 and tok.unknown == 0 and tok.basis == "fork"


def test_tokeniser_keeps_torn_tail_across_reads():
    tokens = decode_tokens(2, [[0, 1], [2, 3], [0, 3]])
    data = trace_bytes(tokens)
    tok = Tokeniser(LayerMap.synth(2))
    got = []
    for cut in range(0, len(data), 7):  # 7-byte reads tear almost every record
        got += tok.feed(data[cut:cut + 7])
    got.append(tok.flush())
    assert [t.tolist() for t in got] == [t.tolist() for t in tokens]
    assert tok.tail == b""


def test_tokeniser_accepts_standard_basis_and_counts_unknown_keys():
    names = trace_format.synth_tensor_names(2)
    keys = [trace_format.fnv1a64(n, trace_format.STANDARD_OFFSET_BASIS) for n in names]
    tkeys = [keys[0], keys[0], 12345, keys[3], keys[0]]
    data = trace_format.encode_records(tkeys, [1, 2, 9, 3, 1])
    tok = Tokeniser(LayerMap.synth(2))
    got = tok.feed(data)
    assert tok.basis == "standard" and tok.unknown == 1 and tok.unknown_keys == {12345}
    assert [split_ids(t)[1].tolist() for t in got] == [[1, 2, 3]]


def test_boundary_needs_a_repeated_key_after_another_key():
    names = trace_format.synth_tensor_names(2)
    k = [trace_format.fnv1a64(n) for n in names]
    # gate0 gate0 (one group) up0 down0 gate1 ... then gate0 again: new token
    data = trace_format.encode_records([k[0], k[0], k[1], k[2], k[3], k[0], k[1]], [1, 2, 1, 1, 5, 3, 3])
    tok = Tokeniser(LayerMap.synth(2))
    got = tok.feed(data)
    assert len(got) == 1 and got[0].tolist() == token([(0, 1), (0, 2), (1, 5)]).tolist()
    assert tok.flush().tolist() == token([(0, 3)]).tolist()


def test_tokeniser_boundaries_the_same_compiled_and_interpreted_in_any_pieces(monkeypatch):
    """The boundary loop (reader.token_cuts) gives the same tokens compiled and interpreted, whole or
    read in pieces that split tokens and runs (keys of the open token carried from read to read),
    unknown keys included (they move boundaries)."""
    rng = np.random.default_rng(8)
    names = trace_format.synth_tensor_names(3)
    keys = [trace_format.fnv1a64(n) for n in names] + [777]
    tkeys, experts = [], []
    for _ in range(40):  # tokens of random layers, matrices and repeats, with a stray unknown key
        for _ in range(int(rng.integers(1, 8))):
            key = keys[int(rng.integers(len(keys)))]
            for _ in range(int(rng.integers(1, 3))):
                tkeys.append(key)
                experts.append(int(rng.integers(8)))
    data = trace_format.encode_records(tkeys, experts)

    def tokens(piece):
        tok = Tokeniser(LayerMap.synth(3))
        got = []
        for cut in range(0, len(data), piece):
            got += tok.feed(data[cut:cut + piece])
        last = tok.flush()
        return [t.tolist() for t in got + ([last] if last is not None else [])]

    compiled = [tokens(piece) for piece in (len(data), 12 * 5, 12 * 7, 12)]
    assert all(got == compiled[0] for got in compiled) and len(compiled[0]) > 20
    monkeypatch.setitem(curves._compiled, "module", None)
    assert [tokens(piece) for piece in (len(data), 12 * 5)] == compiled[:2]


def test_keys_of_blocks_past_synth_layers_are_a_clear_error():
    """--synth-layers is the block count (the daemon's TkeyTable::for_layers): keys of block 2 with
    --synth-layers 2 are not "another model" but a too-small count, and the message says so."""
    data = trace_bytes(decode_tokens(8, [[1], [2]]))
    tok = Tokeniser(LayerMap.synth(2))
    with pytest.raises(InputError, match=r"keys of block 2 appear.*give at least 3"):
        tok.feed(data)


def test_different_model_is_an_input_error():
    tkeys = np.arange(1000, 1040, dtype=np.uint64).repeat(3)  # keys of no blk.N expert tensor
    data = trace_format.encode_records(tkeys, np.zeros(len(tkeys), dtype=np.uint32))
    tok = Tokeniser(LayerMap.synth(2))
    tok.feed(data)
    with pytest.raises(InputError, match="different model"):
        tok.check_model("x.trace")


def test_layer_map_from_model_uses_expert_tensor_names(tiny_models):
    layer_map = LayerMap.from_model(tiny_models["qwen3moe"])
    assert layer_map.moe_layers == 4 and layer_map.n_expert == 16 and layer_map.top_k == 4
    assert layer_map.table[trace_format.fnv1a64("blk.3.ffn_down_exps.weight")] == (3, "fork")
    assert layer_map.expert_bytes > 0


# --- split rule ------------------------------------------------------------------------------------


def test_split_rule_finds_decode_after_prefill_batches():
    big = token([(layer, e) for layer in range(4) for e in range(10)])
    mid = token([(layer, e) for layer in range(4) for e in range(9)])
    small = token([(layer, e) for layer in range(4) for e in range(2)])
    splitter = PhaseSplitter(top_k=2, moe_layers=4, n_expert=16)
    assert [splitter.classify(t) for t in (big, mid, small, small, big)] == ["prefill", "prefill", "decode", "decode", "prefill"]


def test_split_rule_decode_only_trace_starts_at_token_zero():
    small = token([(layer, e) for layer in range(4) for e in (1, 2)])
    assert PhaseSplitter(top_k=2, moe_layers=4).classify(small) == "decode"
    # top-k unknown: the same count in every layer and far below the expert count
    assert PhaseSplitter().classify(token([(layer, e) for layer in range(4) for e in (1, 9)])) == "decode"
    assert PhaseSplitter().classify(token([(0, 1), (0, 2), (1, 3)])) == "prefill"


def test_prefill_override():
    small = token([(0, 1)])
    splitter = PhaseSplitter(prefill=2)
    assert [splitter.classify(small) for _ in range(3)] == ["prefill", "prefill", "decode"]


# --- one-pass curves vs per-budget replays ----------------------------------------------------------


@pytest.fixture(params=["numba", "numpy"])
def stack_engine(request, monkeypatch):
    """Runs a test with each priority-stack engine: the numba-compiled walk and the numpy loop."""
    if request.param == "numpy":
        monkeypatch.setitem(curves._compiled, "module", None)
    elif curves.compiled_stack() is None:
        pytest.skip(f"numba is not importable here (or ${curves.NO_JIT_ENV} is set): only the numpy engine runs")
    assert curves.stack_engine() == request.param
    return request.param


@pytest.mark.parametrize("value", ["1", "0", ""])
def test_no_jit_switch_and_no_silent_fallback(monkeypatch, value):
    # numba is a declared dependency: when it imports and the switch is off, it must serve
    import importlib.util

    monkeypatch.setenv(curves.NO_JIT_ENV, value)
    monkeypatch.setattr(curves, "_compiled", {})
    numba_installed = importlib.util.find_spec("numba") is not None
    assert curves.stack_engine() == ("numba" if numba_installed and value != "1" else "numpy")


def test_engines_agree_on_a_decode_shaped_trace(monkeypatch):
    # 300 tokens x 8 layers x top-4 over 8 x 32 skewed experts: deep stacks, long record chains
    pytest.importorskip("moetools.tracetail.stackjit", reason="numba not installed")
    rng = np.random.default_rng(21)
    layers = np.arange(8)[None, :, None] * 32
    picks = np.sort(np.argsort(rng.random((300, 8, 32)) ** 3 * rng.zipf(1.4, (1, 8, 32)), axis=2)[:, :, :4], axis=2)
    ids, _ = curves.dense_ids((layers + picks).reshape(-1))
    compiled = (curves.opt_stack_distances(ids), curves.lfu_stack_distances(ids))
    monkeypatch.setitem(curves._compiled, "module", None)
    assert curves.opt_stack_distances(ids).tolist() == compiled[0].tolist()
    assert curves.lfu_stack_distances(ids).tolist() == compiled[1].tolist()


def test_compiled_engine_reports_progress_per_chunk():
    stackjit = pytest.importorskip("moetools.tracetail.stackjit", reason="numba not installed")
    ids, distinct = curves.dense_ids(np.random.default_rng(5).integers(0, 40, 1000))
    rank = np.empty(len(ids), dtype=np.int64)
    rank[np.argsort(curves.next_use(ids), kind="stable")] = np.arange(len(ids))
    ticks = []
    dist = stackjit.priority_stack_distances(ids, rank, distinct, curves.COLD, ticks.append, chunk=300)
    assert ticks == [300, 300, 300, 100]
    assert dist.tolist() == _mattson_reference(ids, curves.next_use(ids)).tolist()


@pytest.mark.parametrize("seed", range(6))
def test_stack_distance_curves_match_per_budget_replays(seed, stack_engine):
    rng = np.random.default_rng(seed)
    for _ in range(25):
        n, d = int(rng.integers(1, 90)), int(rng.integers(1, 14))
        ids, distinct = curves.dense_ids(rng.integers(0, d, n))
        caps = list(range(1, distinct + 2))
        assert curves.hits_at(curves.lru_stack_distances(ids), caps).tolist() == [curves.lru_replay(ids, c) for c in caps]
        assert curves.hits_at(curves.opt_stack_distances(ids), caps).tolist() == [curves.belady_replay(ids, c) for c in caps]
        assert curves.hits_at(curves.lfu_stack_distances(ids), caps).tolist() == [curves.lfu_replay(ids, c) for c in caps]


def test_lru_and_min_match_replay_on_skewed_tokens(stack_engine):
    rng = np.random.default_rng(7)
    tokens = [np.unique(rng.zipf(1.3, 40) % 300) for _ in range(60)]
    seq = np.concatenate(tokens)
    ids, distinct = curves.dense_ids(seq)
    caps = [1, 5, 20, 50, 120, distinct]
    assert curves.hits_at(curves.lru_stack_distances(ids), caps).tolist() == [curves.lru_replay(ids, c) for c in caps]
    assert curves.hits_at(curves.opt_stack_distances(ids), caps).tolist() == [curves.belady_replay(ids, c) for c in caps]


def test_belady_is_the_ceiling_of_demand_policies(stack_engine):
    rng = np.random.default_rng(11)
    tokens = [np.unique(rng.zipf(1.5, 30) % 200) for _ in range(80)]
    ids, distinct = curves.dense_ids(np.concatenate(tokens))
    caps = np.arange(1, distinct + 1)
    opt = curves.hits_at(curves.opt_stack_distances(ids), caps)
    assert (opt >= curves.hits_at(curves.lru_stack_distances(ids), caps)).all()
    assert (opt >= curves.hits_at(curves.lfu_stack_distances(ids), caps)).all()
    assert (np.diff(opt) >= 0).all()



def _belady_hit_flags(seq, capacity):
    """Per-request hits of MIN at one capacity (every miss admitted, farthest next use evicted)."""
    nxt = curves.next_use(seq).tolist()
    cache = {}
    flags = []
    for t, x in enumerate(np.asarray(seq).tolist()):
        flags.append(x in cache)
        if x not in cache and len(cache) >= capacity:
            del cache[max(cache, key=cache.get)]
        cache[x] = nxt[t]
    return np.asarray(flags)


def _mattson_reference(seq, keys):
    """Mattson's priority stack step by step on a Python list: the slow, obvious reference."""
    stack = []  # [(key, item)], top first
    dist = []
    for x, key in zip(np.asarray(seq).tolist(), np.asarray(keys).tolist()):
        depth = next((i for i, (_, y) in enumerate(stack) if y == x), None)
        dist.append(curves.COLD if depth is None else depth + 1)
        if depth is None:
            stack.append(None)
            depth = len(stack) - 1
        if depth > 0:
            carry = stack[0]
            for i in range(1, depth):
                if stack[i][0] > carry[0]:  # the larger key (evicted sooner) travels down
                    carry, stack[i] = stack[i], carry
            stack[depth] = carry
        stack[0] = (key, x)
    return np.asarray(dist, dtype=np.int64)


def _skewed_tokens(rng, n_tokens, items, per_token, zipf, repeats):
    """Requests grouped in tokens of Zipf-drawn items; `repeats` keeps repeated items inside a token."""
    out = []
    for _ in range(n_tokens):
        draw = (rng.zipf(zipf, per_token) - 1) % items
        out.append(draw if repeats else np.unique(draw))
    return np.concatenate(out)


@pytest.mark.parametrize("seed", range(4))
def test_min_distances_match_belady_per_request(seed, stack_engine):
    # the fast priority stack against per-request MIN hits: dist <= C exactly where MIN hits at C
    rng = np.random.default_rng(100 + seed)
    cases = [rng.integers(0, int(rng.integers(1, 50)), int(rng.integers(1, 300))) for _ in range(6)]
    cases += [_skewed_tokens(rng, int(rng.integers(5, 40)), int(rng.integers(3, 120)), int(rng.integers(1, 12)),
                             float(rng.uniform(1.05, 2.5)), repeats) for repeats in (True, False)]
    for raw in cases:
        ids, distinct = curves.dense_ids(raw)
        dist = curves.opt_stack_distances(ids)
        assert dist.tolist() == _mattson_reference(ids, curves.next_use(ids)).tolist()
        for cap in sorted({1, 2, 3, distinct // 3 + 1, distinct // 2 + 1, distinct, distinct + 1}):
            assert ((dist <= cap) == _belady_hit_flags(ids, cap)).all(), cap
            assert int((dist <= cap).sum()) == curves.belady_replay(ids, cap)


def test_lfu_distances_match_the_stack_reference(stack_engine):
    rng = np.random.default_rng(9)
    for _ in range(20):
        ids, _ = curves.dense_ids(_skewed_tokens(rng, 30, 80, 10, 1.3, True))
        keys = curves.lfu_evict_keys(ids)
        assert curves.lfu_stack_distances(ids).tolist() == _mattson_reference(ids, keys).tolist()


def test_min_distances_on_a_deep_stack_take_the_many_records_path(stack_engine):
    # cold misses deep in a stack of increasing keys: long record chains (the fancy-indexing path)
    rng = np.random.default_rng(4)
    raw = np.concatenate([np.arange(200), rng.permutation(200), rng.integers(0, 200, 400), np.arange(200)[::-1]])
    ids, distinct = curves.dense_ids(raw)
    dist = curves.opt_stack_distances(ids)
    assert dist.tolist() == _mattson_reference(ids, curves.next_use(ids)).tolist()
    caps = [1, 2, 7, 50, 150, 199, 200]
    assert curves.hits_at(dist, caps).tolist() == [curves.belady_replay(ids, c) for c in caps]


@pytest.mark.parametrize("few", [1, 3, 10**9])
def test_priority_stack_move_paths_agree(monkeypatch, few):
    # the numpy engine's scalar-write moves and fancy-indexing moves must give the same stack
    monkeypatch.setitem(curves._compiled, "module", None)
    monkeypatch.setattr(curves, "_FEW_RECORDS", few)
    rng = np.random.default_rng(12)
    for _ in range(15):
        ids, _ = curves.dense_ids(_skewed_tokens(rng, 25, 150, 14, 1.2, True))
        assert curves.opt_stack_distances(ids).tolist() == _mattson_reference(ids, curves.next_use(ids)).tolist()

# --- scored policies -------------------------------------------------------------------------------


def test_bandit_learns_a_repeating_set():
    policies = ScoredPolicies([2, 4])
    hot = token([(0, 1), (0, 2)])
    first = policies.decode(hot)
    assert first["decay_bandit"].tolist() == [0, 0]  # cold: nothing resident yet
    for _ in range(5):
        out = policies.decode(hot)
    assert out["decay_bandit"].tolist() == [2, 2] and out["recency"].tolist() == [2, 2]


def test_prefill_pin_holds_prefill_experts_by_frequency():
    policies = ScoredPolicies([1, 2])
    policies.observe_prefill(token([(0, 1), (0, 2)]))
    policies.observe_prefill(token([(0, 2)]))
    out = policies.decode(token([(0, 1), (0, 2), (0, 3)]))
    assert out["prefill_pin"].tolist() == [1, 2]  # budget 1 pins expert 2 (two batches)


def test_recency_window_forgets_old_tokens():
    policies = ScoredPolicies([8], window=1)
    policies.decode(token([(0, 1)]))
    policies.decode(token([(0, 2)]))
    policies.decode(token([(0, 3)]))
    assert policies.decode(token([(0, 1)]))["recency"].tolist() == [0]


def test_compiled_top_s_sets_equal_the_numpy_ones(monkeypatch):
    """The compiled top-S step (stackjit.topk_step, item orders kept between tokens) and the numpy
    method (a sort per token) give the same hits, served arms, scores and item order, with prefill
    between decode tokens, ties of score (decay 0, unused experts), budgets from 1 to every item,
    and experts left unused for 700 tokens, whose decayed scores round to equal values and then to
    0 (where the kept order must be repaired by last use)."""
    if curves.compiled_stack() is None:
        pytest.skip(f"numba is not importable here (or ${curves.NO_JIT_ENV} is set): only the numpy engine runs")
    rng = np.random.default_rng(4)
    budgets = [1, 2, 5, 9, 17, 40, 64]
    stream = []
    for t in range(760):
        if t in (0, 25):
            stream.append(("prefill", token([(layer, int(e)) for layer in range(4) for e in rng.choice(16, 6, replace=False)])))
        pool = 16 if t < 40 or t >= 740 else 10  # experts 0-5 unused for 700 tokens, then back
        experts = [rng.choice(pool, 3, replace=False, p=_zipf(pool)) + (16 - pool) for _ in range(4)]
        stream.append(("decode", token([(layer, int(e)) for layer in range(4) for e in experts[layer]])))

    def run():
        policies = ScoredPolicies(budgets, window=3)
        hits = []
        for phase, ids in stream:
            if phase == "prefill":
                policies.observe_prefill(ids)
            else:
                out = policies.decode(ids)
                hits.append({name: value.tolist() for name, value in out.items()} | {"served": policies.served_arm.tolist()})
        n = len(policies.items)
        return hits, policies.scores[:, :n].tolist(), policies.rewards.tolist(), policies.items.ids.tolist()

    compiled = run()
    monkeypatch.setitem(curves._compiled, "module", None)
    assert run() == compiled
    assert any(h["decay_bandit"][3] for h in compiled[0]) and any(h["prefill_pin"][2] for h in compiled[0])


def _zipf(n):
    weights = 1.0 / np.arange(1, n + 1) ** 1.2
    return weights / weights.sum()


# --- instruments: the honesty checks of the issue --------------------------------------------------


def test_repeating_stream_scores_full_repeat_and_no_delta():
    inst = Instruments()
    same = token([(layer, e) for layer in range(3) for e in (1, 5)])
    first = inst.decode(same)
    assert first["repeat"] is None and first["delta_recall"] is None and first["schedulable"] is None  # first scores nothing
    for _ in range(10):
        out = inst.decode(same)
        assert out["repeat"] == 1.0 and out["new_experts"] == 0 and out["delta_recall"] == 0.0
    summary = inst.summary()
    assert summary["repeat"] == 1.0 and summary["new_share"] == 0.0 and summary["delta_recall"] == 0.0
    assert summary["schedulable"] == 1.0


def test_alternating_disjoint_stream_zero_repeat_and_delta_recall_learns():
    inst = Instruments()
    a = token([(layer, e) for layer in range(3) for e in (1, 2)])
    b = token([(layer, e) for layer in range(3) for e in (7, 8)])
    recalls = []
    for i in range(20):
        out = inst.decode(a if i % 2 == 0 else b)
        if i:
            assert out["repeat"] == 0.0
            recalls.append(out["delta_recall"])
    assert recalls[0] == 0.0  # nothing learned yet
    assert recalls[-1] == 1.0
    summary = inst.summary()
    assert summary["repeat"] == 0.0 and summary["delta_recall"] >= 0.5
    assert summary["schedulable"] == summary["delta_recall"]


def test_single_token_scores_nothing():
    inst = Instruments()
    inst.decode(token([(0, 1)]))
    assert all(value is None for value in inst.summary().values())


def test_adjacent_layer_cooccurrence_learns_fixed_routing():
    inst = Instruments()
    t = token([(0, 1), (1, 4), (2, 6)])
    for _ in range(4):
        out = inst.decode(t)
    assert out["adjacent_layer"] == 1.0 and out["same_layer_recency"] == 1.0


# --- engine / analyse -------------------------------------------------------------------------------


def test_analyse_counts_decode_only_and_checks_budgets():
    prefill = token([(layer, e) for layer in range(2) for e in range(8)])
    decode = decode_tokens(2, [[1, 2], [2, 3], [1, 2], [3, 4]])
    settings = Settings(budget=3, curve_budgets="auto", top_k=2, moe_layers=2, n_expert=8)
    result = analyse([prefill] + decode, [None] * 5, settings)
    s = result.summary
    assert (s["tokens"], s["prefill_tokens"], s["decode_tokens"], s["requests"], s["distinct"]) == (5, 1, 4, 16, 8)
    assert result.curve["slots"][-1] == 8 and set(result.curve["hit"]) >= {"lru", "lfu", "belady", "decay_bandit"}
    ids, _ = curves.dense_ids(np.concatenate(decode))
    assert s["hit"]["belady"] == curves.belady_replay(ids, 3) / 16
    assert s["hit"]["lru"] == curves.lru_replay(ids, 3) / 16
    from moetools.errors import UsageError

    with pytest.raises(UsageError, match="at least 1 slot"):
        analyse(decode, [None] * 4, Settings(budget=0))
    with pytest.raises(UsageError, match="larger than the 16 slots"):
        analyse(decode, [None] * 4, Settings(budget=17, moe_layers=2, n_expert=8))


class RecordedBar:
    """A progress bar that keeps what it was told (the command passes tqdm's; these are its calls)."""

    def __init__(self, log, desc, total, unit):
        self.log, self.desc, self.total, self.unit, self.n = log, desc, total, unit, 0

    def update(self, amount=1):
        self.n += amount

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.log.append((self.desc, self.total, self.unit, self.n))
        return False


@pytest.mark.parametrize("budgets", [None, "auto"])
def test_analyse_opens_each_long_pass_with_its_total_and_fills_it(budgets):
    """Every long pass of the offline analysis has a total up front (a terminal shows an ETA) and
    ends full, whether Belady runs as the stack (many budgets) or as per-budget replays."""
    decode = decode_tokens(2, [[1, 2], [2, 3], [1, 2], [3, 4]] * 100)
    log = []
    analyse(decode, [None] * len(decode), Settings(budget=3, curve_budgets=budgets, top_k=2, moe_layers=2, n_expert=8),
            progress=lambda desc, total, unit: RecordedBar(log, desc, total, unit))
    assert log == [("policy replay", 400, "token", 400), ("Belady pass", 1600, "req", 1600)]


# --- follow ---------------------------------------------------------------------------------------


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_follow_handles_growth_truncation_and_deletion(tmp_path):
    path = tmp_path / "live.trace"
    path.write_bytes(b"abc")
    clock = FakeClock()
    events = follow(str(path), poll=0.2, max_idle=1.0, sleep=clock.sleep, clock=clock)
    assert next(events) == FollowEvent("data", b"abc")
    assert next(events).kind == "idle"
    with open(path, "ab") as handle:
        handle.write(b"defg")
    assert next(events) == FollowEvent("data", b"defg")
    path.write_bytes(b"xy")  # shrank: a new serve
    assert [next(events).kind, next(events)] == ["truncated", FollowEvent("data", b"xy")]
    os.unlink(path)
    assert next(events).kind == "deleted"
    assert next(events).kind == "idle"
    path.write_bytes(b"new serve")
    assert [next(events).kind, next(events)] == ["reappeared", FollowEvent("data", b"new serve")]
    rest = list(events)  # stops after max_idle seconds of fake time without data
    assert rest and all(e.kind == "idle" for e in rest)
    assert clock.now >= 1.0


def test_follow_missing_file_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        next(follow(str(tmp_path / "none.trace")))


def test_follow_session_resets_on_truncation():
    tokens = decode_tokens(2, [[1, 2], [2, 3], [1, 2]])
    data = trace_bytes(tokens)
    events = [FollowEvent("data", data[:50]), FollowEvent("data", data[50:]), FollowEvent("truncated"), FollowEvent("data", data)]
    engine = Engine(Settings(budget=2, top_k=2, moe_layers=2, n_expert=4), model_space(LayerMap.synth(2), 4), keep_decode=False)
    out = list(follow_session(iter(events), Tokeniser(LayerMap.synth(2)), engine, "t", check_after=1))
    records = [p for k, p in out if k == "token"]
    notices = [p for k, p in out if k == "notice"]
    # the 3rd token of each serve stays open (no next token began): the daemon never counts it
    assert [r["serve"] for r in records] == [0, 0, 1, 1]
    assert len(notices) == 2 and "new serve" in notices[0] and "still open" in notices[1]
    assert records[2]["decode_token"] == 0 and records[0]["repeat"] is None


def test_compiled_instruments_equal_the_numpy_engine(monkeypatch):
    """instruments.instruments_step (compiled) gives the numpy method's figures and counts, token by
    token, on tokens whose layers appear late and out of order, skip layers, and use growing expert
    ids (the numpy engine's _sum_rows runs and fancy-index updates are the tricky part)."""
    from moetools.tracetail import instruments

    if curves.compiled_stack() is None:
        pytest.skip(f"numba is not importable here (or ${curves.NO_JIT_ENV} is set): only the numpy engine runs")
    rng = np.random.default_rng(1)
    tokens = []
    for t in range(150):
        layers = sorted(rng.choice(12, rng.integers(1, 6), replace=False).tolist()) if t > 3 else [7, 9]
        tokens.append(np.unique(np.concatenate([make_ids([layer] * 3, rng.choice(min(64, 8 + t), 3, replace=False))
                                                for layer in layers])))
    tokens += [tokens[-1]] * 3 + tokens[:20]  # repeats and a return to early routing
    runs = []
    for engine in ("numba", "numpy"):
        if engine == "numpy":
            monkeypatch.setattr(instruments, "_compiled_step", lambda: None)
        inst = Instruments(window=4)
        records = [inst.decode(ids) for ids in tokens]
        runs.append((records, inst.totals, inst.transition.copy(), inst.cooccur.copy(), inst.last_used.copy()))
    (records, totals, *arrays), (want_records, want_totals, *want_arrays) = runs
    assert records == want_records and totals == want_totals
    assert all(np.array_equal(a, b) for a, b in zip(arrays, want_arrays))
    assert totals["adjacent_hit"] > 0 and totals["delta_hit"] > 0  # the check can fail: predictions happened
