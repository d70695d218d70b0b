"""The daemon's own figures for a trace, computed as its instruments compute them.

Restated (not copied) from CambrianTech/continuum:
- core/continuum-core/src/capacity/trace_tail.rs `MoeTraceTail::drain`: EVERY segmented token is
  folded -- prefill segments included; the first token sets the bandit's budget to 1.5 x its expert
  count (`experts.len() * 3 / 2`); repeat recall, predicted-delta recall and schedulable coverage
  are integer percents (`hits * 100 / total`, floored), None before two tokens.
- core/expert-pager-policy/src/decay.rs `DecayBandit`: arms decay {0, .3, .6, .85, .95, .99}; each
  token every arm predicts its top-budget experts by EMA score, is rewarded with its hit fraction
  (EMA 0.3), then every scoreboard decays and adds 1 per activation; the serving arm is the argmax
  reward, ties to the LAST arm (Rust's `Iterator::max_by`).
- core/continuum-core/src/capacity/expert_predictor.rs `CrossLayerExpertPredictor`: transitions
  prev-token-set -> next-token-set (self-transitions skipped); a candidate's confidence is the
  noisy-OR 1 - prod(1 - P(n|p)) over the fired experts (f32); the delta prediction is the top
  |token| candidates.

- trace_tail.rs `MoeTraceTail::drain` reads at most `MAX_DRAIN_BYTES` (4 MiB) per tick: when more
  is waiting past its offset it jumps to `len - 4 MiB`, rounded down to a whole record from the
  file's start, and restarts the segmenter there (`drain_window`); the backlog before it is never
  folded. A whole trace read once is one such drain from offset 0 (the daemon's first tick on it).
- trace_tail.rs `pin_ceiling(budget_bytes, expert_bytes_total, n_layers, n_experts_per_layer)`:
  (budget / 2) / (expert_bytes_total / (n_layers x n_experts_per_layer)), integer divisions, 0 for
  degenerate geometry; the serving daemon passes n_layers = the model's BLOCK count
  (core/continuum-core/src/capacity/moe_serving.rs `moe_serving_context`: `gguf_keys::block_count`)
  while expert_bytes_total sums the MoE layers only, so leading dense blocks shrink its per-expert
  bytes and raise its ceiling (`daemon_pin_ceiling`).

Where the daemon leaves an order unspecified (HashMap iteration + `select_nth_unstable` on score
ties, `sort_by` on equal confidences) moetools breaks the tie by request id ascending.
"""

import numpy as np

DECAY_ARMS = (0.0, 0.3, 0.6, 0.85, 0.95, 0.99)
REWARD_ALPHA = 0.3
MAX_DRAIN_BYTES = 4 * 1024 * 1024  # trace_tail.rs MAX_DRAIN_BYTES: one drain's read ceiling
RECORD_BYTES = 12  # expert_pager_policy::segment::RECORD_BYTES


def drain_window(length, offset=0):
    """trace_tail.rs `MoeTraceTail::drain` over a file of `length` bytes read up to `offset`:
    (start, jumped) -- the drain reads bytes [start, length); `jumped` when the backlog was over
    MAX_DRAIN_BYTES and the tail skipped to the recent window (segmenter restarted, carry cleared).
    Nothing to read when length <= offset (a shorter file is a new serve: the caller resets)."""
    if length <= offset or length - offset <= MAX_DRAIN_BYTES:
        return offset, False
    target = length - MAX_DRAIN_BYTES
    return target - target % RECORD_BYTES, True


def daemon_pin_ceiling(budget_bytes, expert_bytes_total, n_layers, n_experts_per_layer):
    """trace_tail.rs `pin_ceiling`: how many experts the daemon pins for a lease of `budget_bytes`:
    half the lease over one expert's bytes, where one expert = expert_bytes_total / (n_layers x
    n_experts_per_layer) -- n_layers the BLOCK count, as moe_serving.rs passes it. 0 when the
    geometry is degenerate, never a division by zero."""
    count = int(n_layers) * int(n_experts_per_layer)
    if count == 0 or expert_bytes_total == 0:
        return 0
    per_expert = int(expert_bytes_total) // count
    if per_expert == 0:
        return 0
    return (int(budget_bytes) // 2) // per_expert


def _top(scores, seen, budget):
    """Indices of the top-`budget` seen entries by score (ties: lower index first)."""
    candidates = np.flatnonzero(seen)
    if budget <= 0 or not len(candidates):
        return candidates[:0]
    order = np.lexsort((candidates, -scores[candidates]))
    return candidates[order[:budget]]


def pin_ceiling_doc(budget_bytes, budget_from, expert_bytes_total, blocks, experts_per_layer):
    """{"pin_ceiling", "pin_ceiling_inputs"}: the daemon's ceiling for this lease and geometry (None
    when the geometry is unknown: a 0 there is moetools not knowing, not the daemon's degenerate case)."""
    known = bool(blocks and experts_per_layer and expert_bytes_total)
    return {"pin_ceiling": daemon_pin_ceiling(budget_bytes, expert_bytes_total, blocks, experts_per_layer) if known else None,
            "pin_ceiling_inputs": {"budget_bytes": int(budget_bytes), "budget_from": budget_from,
                                   "expert_bytes_total": int(expert_bytes_total), "blocks": int(blocks),
                                   "experts_per_layer": int(experts_per_layer)}}


def daemon_probe(tokens):
    """Figures of the daemon's MoeTraceTail over `tokens` (int64 id arrays, in trace order, every
    segment the daemon would fold). Returns a dict of plain numbers."""
    tokens = [np.asarray(t, dtype=np.int64) for t in tokens if len(t)]
    if not tokens:
        return {"tokens_observed": 0}
    universe, inverse = np.unique(np.concatenate(tokens), return_inverse=True)
    n = len(universe)
    cuts = np.cumsum([len(t) for t in tokens])[:-1]
    sets = np.split(inverse, cuts)
    budget = len(sets[0]) * 3 // 2
    scores = np.zeros((len(DECAY_ARMS), n))
    seen = np.zeros(n, dtype=bool)
    rewards = np.zeros(len(DECAY_ARMS))
    decays = np.asarray(DECAY_ARMS)[:, None]
    cooccur = np.zeros((n, n), dtype=np.int32)
    pred_seen = np.zeros(n, dtype=np.int64)
    repeat_hits = repeat_total = delta_hits = delta_total = 0
    serving_hits = []
    prev = predicted = None
    for current in sets:
        # predictive-scheduling instrument (trace_tail.rs drain, before the bandit)
        if prev is not None:
            in_prev = np.isin(current, prev)
            repeats = int(in_prev.sum())
            repeat_hits += repeats
            repeat_total += len(current)
            if predicted is not None:
                delta_total += len(current) - repeats
                delta_hits += int(np.isin(current[~in_prev], predicted).sum())
            _observe_transition(cooccur, pred_seen, prev, current)
        predicted = _predict_delta(cooccur, pred_seen, current)
        prev = current
        # the bandit step (decay.rs DecayBandit::step)
        chosen = len(rewards) - 1 - int(np.argmax(rewards[::-1]))  # max_by: ties to the last arm
        hit = np.zeros(len(DECAY_ARMS))
        for arm in range(len(DECAY_ARMS)):
            resident = _top(scores[arm], seen, budget)
            hit[arm] = np.isin(current, resident).sum() / len(current)
        rewards = (1 - REWARD_ALPHA) * rewards + REWARD_ALPHA * hit
        serving_hits.append(float(hit[chosen]))
        scores *= decays
        scores[:, current] += 1.0
        seen[current] = True
    chosen = len(rewards) - 1 - int(np.argmax(rewards[::-1]))
    return {
        "tokens_observed": len(sets),
        "bandit_budget_slots": budget,
        "serving_hit": float(np.mean(serving_hits)),
        "chosen_decay": DECAY_ARMS[chosen],
        "per_arm_reward": [round(float(r), 6) for r in rewards],
        "repeat_recall_x100": repeat_hits * 100 // repeat_total if repeat_total else None,
        "predicted_delta_recall_x100": delta_hits * 100 // delta_total if delta_total else None,
        "schedulable_coverage_x100": (repeat_hits + delta_hits) * 100 // repeat_total if repeat_total else None,
    }


def _observe_transition(cooccur, pred_seen, prev, nxt):
    """expert_predictor.rs observe_transition: every next expert followed every prev expert, self
    excluded; a predecessor counts once when it gained at least one distinct successor."""
    cooccur[np.ix_(prev, nxt)] += 1
    both = np.intersect1d(prev, nxt)
    cooccur[both, both] -= 1
    gained = np.ones(len(prev), dtype=bool)
    if len(nxt) == 1:
        gained = prev != nxt[0]
    pred_seen[prev[gained]] += 1


def _predict_delta(cooccur, pred_seen, fired):
    """Top-|fired| candidates by noisy-OR confidence (> 0), fired experts excluded."""
    rows = cooccur[fired].astype(np.float32)
    denominators = np.maximum(pred_seen[fired], 1).astype(np.float32)[:, None]
    miss = np.prod(np.float32(1) - rows / denominators, axis=0, dtype=np.float32)
    confidence = np.float32(1) - miss
    confidence[fired] = 0
    candidates = np.flatnonzero(confidence > 0)
    order = np.lexsort((candidates, -confidence[candidates]))
    return candidates[order[: len(fired)]]
