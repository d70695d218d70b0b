"""trace-tail --daemon-probe: the daemon's trace-tail figures, by its rules (CambrianTech/continuum
core/continuum-core/src/capacity/trace_tail.rs `MoeTraceTail::drain` (and its `MAX_DRAIN_BYTES`,
4 MiB per drain) and `pin_ceiling`, core/expert-pager-policy/src/decay.rs `DecayBandit::step`/
`chosen_arm`, core/continuum-core/src/capacity/expert_predictor.rs `CrossLayerExpertPredictor`;
the pin ceiling's geometry as core/continuum-core/src/capacity/moe_serving.rs `moe_serving_context`
gives it to core/continuum-core/src/modules/serving_daemon.rs `publish_moe_host_cache_lease`:
n_layers = the GGUF's block count, expert bytes summed over the MoE layers)."""

import json
import os

import numpy as np
import pytest
from click.testing import CliRunner

from moetools.cli import cli
from moetools.tracetail import daemon_probe as probe
from moetools.tracetail.reader import make_ids
from moetools.formats import trace as trace_format
from tests import factory, fork_rules


def ids(*pairs):
    return np.unique(make_ids([p[0] for p in pairs], [p[1] for p in pairs]))


def test_budget_is_one_and_a_half_first_segments_and_ties_go_to_the_last_arm():
    first = ids((0, 1), (0, 2), (1, 3))  # 3 experts -> budget 3 * 3 // 2 = 4
    doc = probe.daemon_probe([first, ids((0, 1)), ids((0, 1), (1, 3))])
    assert doc["bandit_budget_slots"] == 4 and doc["tokens_observed"] == 3
    # every arm holds the same top-4 here, so every reward ties: max_by picks the LAST arm
    assert len(set(doc["per_arm_reward"])) == 1 and doc["chosen_decay"] == 0.99


def test_integer_percents_are_floored_and_void_before_two_tokens():
    assert probe.daemon_probe([ids((0, 1))])["repeat_recall_x100"] is None
    doc = probe.daemon_probe([ids((0, 1), (0, 2), (0, 3)), ids((0, 1), (0, 4), (0, 5))])
    assert doc["repeat_recall_x100"] == 33  # 1 of 3, floored (not 33.3 or 34)


def test_predictor_is_the_noisy_or_conditional():
    """expert_predictor.rs's own example: A->{X, Y} then A->{X}: P(X|A) = 1, P(Y|A) = 0.5; with a
    budget of one candidate the delta prediction is X."""
    n = 4  # A=0, X=1, Y=2, B=3
    cooccur, seen = np.zeros((n, n), dtype=np.int32), np.zeros(n, dtype=np.int64)
    probe._observe_transition(cooccur, seen, np.array([0]), np.array([1, 2]))
    probe._observe_transition(cooccur, seen, np.array([0]), np.array([1]))
    assert seen[0] == 2 and cooccur[0, 1] == 2 and cooccur[0, 2] == 1
    assert probe._predict_delta(cooccur, seen, np.array([0])).tolist() == [1]
    probe._observe_transition(cooccur, seen, np.array([0]), np.array([0]))  # self only: not a transition
    assert seen[0] == 2


@pytest.mark.parametrize("name,expected", [
    ("qwen", {"tokens_observed": 156, "bandit_budget_slots": 423, "chosen_decay": 0.85,
              "repeat_recall_x100": 36, "predicted_delta_recall_x100": 15, "schedulable_coverage_x100": 46}),
    ("gptoss", {"tokens_observed": 149, "bandit_budget_slots": 105, "chosen_decay": 0.95,
                "repeat_recall_x100": 19, "predicted_delta_recall_x100": 11, "schedulable_coverage_x100": 28}),
])
def test_daemon_probe_on_the_real_traces(name, expected):
    path = factory.SHARED_TRACES / f"{name}.route.csv"
    if not path.exists():
        pytest.skip(f"real routing traces not present in {factory.SHARED_TRACES}")
    result = CliRunner().invoke(cli, ["trace-tail", str(path), "--daemon-probe", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    got = doc["daemon_probe"]
    # the daemon folds every segment, prefill included (moetools' own figures are decode-only)
    assert got["tokens_observed"] == doc["tokens"] == doc["prefill_tokens"] + doc["decode_tokens"]
    assert {key: got[key] for key in expected} == expected
    assert all(isinstance(got[key], int) for key in expected if key.endswith("_x100"))


MIB4 = 4 * 1024 * 1024


@pytest.mark.parametrize("length,offset", [(0, 0), (12, 0), (MIB4, 0), (MIB4 + 1, 0), (MIB4 + 12, 0), (MIB4 + 13, 0),
                                           (10 * MIB4 + 5, 0), (MIB4 + 120, 120), (MIB4 + 121, 120), (50, 120)])
def test_drain_window_is_trace_tails(length, offset):
    """trace_tail.rs MoeTraceTail::drain: more than MAX_DRAIN_BYTES (4 MiB) past the offset jumps to
    len - 4 MiB, rounded down to a whole record from the file's start (fork_rules.daemon_drain_offset)."""
    assert probe.MAX_DRAIN_BYTES == fork_rules.DAEMON_MAX_DRAIN_BYTES == MIB4
    assert probe.drain_window(length, offset) == fork_rules.daemon_drain_offset(length, offset)


def test_pin_ceiling_is_trace_tails():
    """trace_tail.rs pin_ceiling, with its own test's figures (pin_ceiling_is_half_lease_and_degenerates_to_zero:
    1000 experts of 10 MB, a 4 GB lease -> 200 pins; 0 for degenerate geometry), then random inputs."""
    mb = 1024 * 1024
    assert probe.daemon_pin_ceiling(4000 * mb, 10_000 * mb, 10, 100) == 200
    assert probe.daemon_pin_ceiling(4000 * mb, 0, 10, 100) == 0
    assert probe.daemon_pin_ceiling(4000 * mb, 10_000 * mb, 0, 0) == 0
    assert probe.daemon_pin_ceiling(4000 * mb, 5, 10, 100) == 0  # per-expert bytes floor to 0
    rng = np.random.default_rng(5)
    for _ in range(200):
        args = [int(rng.integers(0, 1 << 40)), int(rng.integers(0, 1 << 36)), int(rng.integers(0, 100)), int(rng.integers(0, 400))]
        assert probe.daemon_pin_ceiling(*args) == fork_rules.daemon_pin_ceiling(*args)


def write_records(path, records):
    tkeys = np.array([r[0] for r in records], dtype=np.uint64)
    experts = np.array([r[1] for r in records], dtype=np.uint32)
    trace_format.write_trace(str(path), tkeys, experts)


def random_tokens(n_tokens, layers, per_layer, n_expert, seed, names=None):
    """Records of n_tokens tokens, one gate-matrix group per layer (the fork's key hash)."""
    rng = np.random.default_rng(seed)
    names = names or [f"blk.{layer}.ffn_gate_exps.weight" for layer in range(layers)]
    keys = [(trace_format.fnv1a64(name), int(name.split(".")[1])) for name in names]
    records = []
    for _ in range(n_tokens):
        for key, _layer in keys:
            records += [(key, int(e)) for e in rng.choice(n_expert, per_layer, replace=False)]
    return records, {key: layer for key, layer in keys}


def test_probe_folds_only_the_daemons_last_4_mib(tmp_path):
    """A trace over 4 MiB: the daemon's one drain (its first tick on the file) starts at the record
    boundary below len - 4 MiB with a fresh segmenter, so the backlog before it is never folded and
    the first token there may be a partial one; the open last token is not folded."""
    records, layer_of = random_tokens(6000, 8, 8, 16, seed=11)  # 64 records = 768 bytes a token: ~4.4 MiB
    records = records[:-5]  # end in the middle of a token
    path = tmp_path / "big.trace"
    write_records(path, records)
    length = os.path.getsize(path)
    assert length > MIB4
    start, jumped = fork_rules.daemon_drain_offset(length)
    assert jumped and start % 12 == 0 and start > 0
    expected_tokens = fork_rules.segment(records[start // 12:], layer_of)
    result = CliRunner().invoke(cli, ["trace-tail", str(path), "--synth-layers", 8, "--experts", 16, "--policies", "lru",
                                      "--daemon-probe", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    got = json.loads(result.stdout)["daemon_probe"]
    assert got["drain_skipped_bytes"] == got["drain_start"] == start and got["drain_bytes"] == length - start
    assert got["tokens_observed"] == len(expected_tokens) < 6000
    expected = probe.daemon_probe([ids(*token) for token in expected_tokens])
    assert {key: got[key] for key in expected} == expected


def test_pin_ceiling_over_the_block_count_of_a_model_with_a_dense_block(tmp_path):
    """moe_serving.rs passes the GGUF's block count as n_layers and the MoE layers' expert bytes as the
    total: a leading dense block shrinks the per-expert bytes the daemon divides the lease by. The
    model's figures are read here with gguf-py's own reader, not moetools'."""
    import gguf

    model = factory.write_tiny(tmp_path, "deepseek2")
    reader = gguf.GGUFReader(str(model))
    blocks = int(reader.fields["deepseek2.block_count"].parts[-1][0])
    n_expert = int(reader.fields["deepseek2.expert_count"].parts[-1][0])
    exps = [t for t in reader.tensors if t.name.split(".")[-2].endswith("_exps")]
    total = sum(int(t.n_bytes) for t in exps)
    moe_layers = len({t.name.split(".")[1] for t in exps})
    assert moe_layers < blocks  # a leading dense block
    names = sorted({t.name for t in exps if "_gate_exps" in t.name})
    records, _ = random_tokens(30, 0, 4, n_expert, seed=2, names=names)
    write_records(tmp_path / "ds.trace", records)
    budget = 3 * 1024 * 1024
    result = CliRunner().invoke(cli, ["trace-tail", str(tmp_path / "ds.trace"), "--model", str(model), "--budget-bytes", budget,
                                      "--policies", "lru", "--daemon-probe", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    got = json.loads(result.stdout)["daemon_probe"]
    assert got["pin_ceiling_inputs"] == {"budget_bytes": budget, "budget_from": "option", "expert_bytes_total": total,
                                         "blocks": blocks, "experts_per_layer": n_expert}
    assert got["pin_ceiling"] == fork_rules.daemon_pin_ceiling(budget, total, blocks, n_expert)
    # over the MoE layers alone the ceiling would be lower: the block count is what the daemon uses
    assert got["pin_ceiling"] > fork_rules.daemon_pin_ceiling(budget, total, moe_layers, n_expert)
