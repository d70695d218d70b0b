"""trace-tail --daemon-probe: the daemon's trace-tail figures, by its rules (CambrianTech/continuum
core/continuum-core/src/capacity/trace_tail.rs `MoeTraceTail::drain`, core/expert-pager-policy/src/
decay.rs `DecayBandit::step`/`chosen_arm`, core/continuum-core/src/capacity/expert_predictor.rs
`CrossLayerExpertPredictor`)."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from moetools.cli import cli
from moetools.tracetail import daemon_probe as probe
from moetools.tracetail.reader import make_ids
from tests import factory


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
