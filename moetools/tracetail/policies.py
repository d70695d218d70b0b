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

import moetools.tracetail.curves as curves
from moetools.tracetail.curves import COLD, hits_at

DECAY_ARMS = (0.0, 0.3, 0.6, 0.85, 0.95, 0.99)
REWARD_EMA = 0.3  # reward <- (1 - 0.3) * reward + 0.3 * hit fraction
NEVER = COLD  # rank of an item a policy does not hold: outside every budget


class ItemIndex:
    """Request ids -> dense 0..n-1 indices in order of first appearance, growing as new experts
    appear (a sorted copy of the ids seen and a binary search per token, no per-id Python)."""

    def __init__(self):
        self.ids = np.zeros(0, dtype=np.int64)  # by dense index
        self.sorted_ids = np.zeros(0, dtype=np.int64)
        self.sorted_index = np.zeros(0, dtype=np.int64)  # dense index of each sorted id

    def __call__(self, ids):
        ids = np.asarray(ids, dtype=np.int64)
        out = np.empty(len(ids), dtype=np.int64)
        count = len(self.ids)
        if count:
            at = np.minimum(np.searchsorted(self.sorted_ids, ids), count - 1)
            found = self.sorted_ids[at] == ids
            out[found] = self.sorted_index[at[found]]
        else:
            found = np.zeros(len(ids), dtype=bool)
        if not found.all():
            new = np.flatnonzero(~found)
            uniq, first, inverse = np.unique(ids[new], return_index=True, return_inverse=True)
            rank = np.empty(len(uniq), dtype=np.int64)
            rank[np.argsort(first, kind="stable")] = np.arange(len(uniq))  # in order of first appearance
            out[new] = count + rank[inverse.reshape(-1)]
            added = np.empty(len(uniq), dtype=np.int64)
            added[rank] = uniq
            self.ids = np.concatenate([self.ids, added])
            order = np.argsort(self.ids, kind="stable")
            self.sorted_ids = self.ids[order]
            self.sorted_index = order
        return out

    def __len__(self):
        return len(self.ids)


def _compiled_topk():
    """topk_step (kernels/policies.py) compiled (stackjit), or None: the numpy method runs."""
    compiled = curves.compiled_stack()
    return None if compiled is None else compiled.topk_step


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
        # the compiled step's item orders: each arm's, recency's and prefill_pin's (rows), the
        # position of each item in them, and [items in the orders, prefill order out of date]
        self.order = np.zeros((len(DECAY_ARMS) + 2, 0), dtype=np.int64)
        self.position = np.zeros((len(DECAY_ARMS) + 2, 0), dtype=np.int64)
        self.order_state = np.zeros(2, dtype=np.int64)

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
        self.order_state[1] = 1

    def decode(self, ids):
        """One decode token. Returns {policy: hit counts per budget (int64 array)}.

        Rankings use what was known before this token; then scores, recency and rewards learn it.
        Run by the compiled `topk_step` when there is one, else by the numpy method below (the
        same figures: tests)."""
        idx = self.items(ids)
        n = self._fit()
        step = _compiled_topk()
        if step is not None:
            out = np.zeros((3, len(self.budgets)), dtype=np.int64)
            self.order = _grow(self.order, n, 0)
            self.position = _grow(self.position, n, 0)
            step(idx, n, self.scores, self.last_seen, self.prefill_count, self.rewards, self.decays, self.budgets, self.time,
                 self.window, 1 - REWARD_EMA, REWARD_EMA, self.served_arm, out, self.order, self.position, self.order_state)
            self.time += 1
            return dict(zip(self.NAMES, out))
        return self._decode_numpy(ids, idx, n)

    def _decode_numpy(self, ids, idx, n):
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
        self.served_arm = served.astype(np.int64)
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
        return self.items.ids[dense]
