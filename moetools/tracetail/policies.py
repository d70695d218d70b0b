"""Top-S residency sets: instruments, not demand caches (those are in demand.py).

A budget is a number of slots; a slot holds one (layer, expert). Every set here is *online* (it
decides from the past only) and starts cold at the first decode token. Each holds the top-B of a
ranking rebuilt before every token; a miss is streamed without being admitted and a new ranking
reloads the set for free, so these figures are optimistic and device-fit never predicts from them.

- `ScoredPolicies`: sets that hold the top-B items of a ranking, evaluated for many budgets
  at once (one sort per token gives the rank of every needed item, and a budget B hits the items
  ranked below B):
  - `decay_bandit`: per-expert EMA score per arm (decay in DECAY_ARMS; score <- d * score + used),
    ties broken by recency; reward = realised hit fraction, reward EMA 0.3; each token is served
    by the arm with the best reward so far, separately per budget; every arm is scored every token
    (full feedback: each arm's cache is known).
  - `recency`: experts used in the last `window` decode tokens, most recent first.
  - `prefill_pin`: experts the prefill used, most prefill batches first; fixed during decode.
"""

import numpy as np

from moetools.tracetail.curves import COLD, hits_at

DECAY_ARMS = (0.0, 0.3, 0.6, 0.85, 0.95, 0.99)
REWARD_EMA = 0.3  # reward <- (1 - 0.3) * reward + 0.3 * hit fraction
NEVER = COLD  # rank of an item a policy does not hold: outside every budget


class ItemIndex:
    """Request ids -> dense 0..n-1 indices, growing as new experts appear."""

    def __init__(self):
        self.index = {}

    def __call__(self, ids):
        index = self.index
        out = np.empty(len(ids), dtype=np.int64)
        for i, x in enumerate(ids.tolist()):
            j = index.get(x)
            if j is None:
                j = index[x] = len(index)
            out[i] = j
        return out

    def __len__(self):
        return len(self.index)


def _grow(array, size, fill):
    if array.shape[-1] >= size:
        return array
    extra = max(size - array.shape[-1], array.shape[-1])
    pad = np.full(array.shape[:-1] + (extra,), fill, dtype=array.dtype)
    return np.concatenate([array, pad], axis=-1)


def ranks_of(keys_desc, needed, n):
    """Rank (0 = best) of items `needed` when items 0..n-1 are ordered by the key tuple, highest
    first. `keys_desc` is a list of arrays, primary key last (np.lexsort order)."""
    order = np.lexsort([-k[:n] for k in keys_desc])
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    return rank[needed]


def hit_counts(ranks, budgets):
    """For each budget B: how many of `ranks` (0-based) are < B, i.e. items a B-slot cache holds."""
    return hits_at(ranks, np.asarray(budgets) - 1)


class ScoredPolicies:
    """decay_bandit, recency and prefill_pin for every budget in `budgets` at once."""

    NAMES = ("decay_bandit", "recency", "prefill_pin")

    def __init__(self, budgets, window=8, items=None):
        self.budgets = np.asarray(budgets, dtype=np.int64)
        self.window = int(window)
        self.items = items or ItemIndex()
        self.decays = np.asarray(DECAY_ARMS)
        self.scores = np.zeros((len(DECAY_ARMS), 0))
        self.last_seen = np.zeros(0, dtype=np.int64)
        self.prefill_count = np.zeros(0, dtype=np.int64)
        self.rewards = np.zeros((len(DECAY_ARMS), len(self.budgets)))
        self.time = 0
        self.served_arm = np.zeros(len(self.budgets), dtype=np.int64)

    def _fit(self):
        n = len(self.items)
        self.scores = _grow(self.scores, n, 0.0)
        self.last_seen = _grow(self.last_seen, n, -1)
        self.prefill_count = _grow(self.prefill_count, n, 0)
        return n

    def observe_prefill(self, ids):
        """A prefill token (or batch): counts toward prefill pinning only."""
        idx = self.items(ids)
        self._fit()
        self.prefill_count[idx] += 1

    def decode(self, ids):
        """One decode token. Returns {policy: hit counts per budget (int64 array)}.

        Rankings use what was known before this token; then scores, recency and rewards learn it."""
        idx = self.items(ids)
        n = self._fit()
        out = {}
        seen = self.last_seen[:n]
        was_seen = seen[idx] >= 0  # experts new to decode cannot be resident in any policy
        # One tie-break order shared by every ranking: most recently seen first, then first seen
        # first. Each arm's order is a stable sort of it by score, so it is sorted once per token.
        tie = np.lexsort([np.arange(n), -seen])
        rank = np.empty(n, dtype=np.int64)
        # decay bandit: every arm's hits, served by the best arm so far (per budget)
        arm_hits = np.empty((len(self.decays), len(self.budgets)), dtype=np.int64)
        for arm in range(len(self.decays)):
            order = tie[np.argsort(-self.scores[arm, :n][tie], kind="stable")]
            rank[order] = np.arange(n)
            arm_hits[arm] = hit_counts(np.where(was_seen, rank[idx], NEVER), self.budgets)
        served = np.argmax(self.rewards, axis=0)
        self.served_arm = served
        out["decay_bandit"] = arm_hits[served, np.arange(len(self.budgets))]
        fraction = arm_hits / max(len(ids), 1)
        self.rewards = (1 - REWARD_EMA) * self.rewards + REWARD_EMA * fraction
        # last-N-token recency
        in_window = seen >= self.time - self.window
        rank[tie] = np.arange(n)
        out["recency"] = hit_counts(np.where(in_window[idx] & was_seen, rank[idx], NEVER), self.budgets)
        # prefill-union pinning (static during decode)
        pinned = self.prefill_count[:n]
        pin_rank = ranks_of([-np.arange(n, dtype=np.int64), pinned], idx, n)
        out["prefill_pin"] = hit_counts(np.where(pinned[idx] > 0, pin_rank, NEVER), self.budgets)
        # learn this token
        self.scores[:, :n] *= self.decays[:, None]
        self.scores[:, idx] += 1.0
        self.last_seen[idx] = self.time
        self.time += 1
        return out

    def served_decay(self, budget_index=0):
        return float(self.decays[self.served_arm[budget_index]])

    def top_items(self, count, budget_index=0):
        """The best `count` items (dense indices) of the arm the bandit serves now."""
        n = len(self.items)
        if n == 0 or count <= 0:
            return np.zeros(0, dtype=np.int64)
        arm = int(np.argmax(self.rewards[:, budget_index]))
        score = self.scores[arm, :n]
        order = np.lexsort([np.arange(n), -self.last_seen[:n], -score])
        order = order[score[order] > 0]
        return order[:count]

    def ids_of(self, dense):
        ids = np.fromiter(self.items.index.keys(), dtype=np.int64, count=len(self.items))
        return ids[dense]
