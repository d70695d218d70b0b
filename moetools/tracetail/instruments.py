"""Per-decode-token instruments: how predictable is the next token's expert set?

For decode token t with expert set E (one entry per (layer, expert)) and the previous decode
token's set P:
- repeat recall: |E & P| / |E|, the share a keep-what-you-used cache would already hold;
- predicted-delta recall: of the new experts N = E - P, the share a one-token-ahead transition
  predictor called. The predictor learns, per layer, counts a -> b for a in P and b in N, and
  for each layer predicts as many experts as P used there, highest summed count first (never one
  P already holds, never one with count 0). A token with nothing new scores 0 here, not 1;
- schedulable coverage: |E & (P | predicted)| / |E|, what can be fetched before the token runs;
- same-layer recency hit: share of E used by the same layer within the last `window` tokens;
- adjacent-layer co-occurrence hit: share of E (in every layer but the token's first) called from
  the token's previous layer by co-occurrence counts learned on earlier tokens, as many as the
  layer uses.
The first decode token has no previous token and scores nothing: its instruments are None and it
is left out of the totals (a first token counted as a 100% repeat would flatter every figure).

State is dense numpy: counts are (layers, experts, experts) int32, grown as layers and experts
appear, so a token costs a few array operations, not Python loops over experts.
"""

import numpy as np

import moetools.tracetail.curves as curves
from moetools.tracetail.reader import split_ids

FIELDS = ("repeat", "delta_recall", "schedulable", "same_layer_recency", "adjacent_layer")
COUNTS = ("experts", "repeat", "new", "delta_hit", "recency_hit", "adjacent_hit", "adjacent_den")  # per token, summed


def _compiled_step():
    """instruments_step (kernels/instruments.py) compiled (stackjit), or None: the numpy engine runs."""
    compiled = curves.compiled_stack()
    return None if compiled is None else compiled.instruments_step


def _predict(scores, count):
    """(rows, E) bool: per row, the `count[row]` highest positive scores (ties: lower expert)."""
    order = np.argsort(-scores, axis=1, kind="stable")
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(scores.shape[1])[None, :].repeat(len(scores), 0), axis=1)
    return (rank < count[:, None]) & (scores > 0)


def _sum_rows(shape, row_of, values):
    """out[r] = sum of values[i] with row_of[i] == r (row_of ascending). (rows, E) int64."""
    out = np.zeros(shape, dtype=np.int64)
    if len(row_of):
        starts = np.concatenate([[0], np.flatnonzero(row_of[1:] != row_of[:-1]) + 1])
        out[row_of[starts]] = np.add.reduceat(values.astype(np.int64), starts, axis=0)
    return out


class Instruments:
    def __init__(self, window=8):
        self.window = int(window)
        self.layer_index = {}
        self.n_layers = 0
        self.n_experts = 0
        self.transition = np.zeros((0, 0, 0), dtype=np.int32)  # [layer, a in P, b new]
        self.cooccur = np.zeros((0, 0, 0), dtype=np.int32)  # [layer, a, b in the next layer]
        self.last_used = np.zeros((0, 0), dtype=np.int64)
        self.prev = None  # (layers, experts) bool of the previous decode token
        self.time = 0
        self.totals = dict.fromkeys(("experts", "repeat", "new", "delta_hit", "recency_hit", "adjacent_hit", "adjacent_den", "tokens"), 0)

    def _grow(self, n_layers, n_experts):
        if n_layers <= self.transition.shape[0] and n_experts <= self.transition.shape[1]:
            return
        new_l = max(n_layers, self.transition.shape[0])
        new_e = max(n_experts, self.transition.shape[1], 8)
        if n_experts > self.transition.shape[1]:
            new_e = max(new_e, 2 * self.transition.shape[1])

        def grow3(a):
            b = np.zeros((new_l, new_e, new_e), dtype=a.dtype)
            b[: a.shape[0], : a.shape[1], : a.shape[2]] = a
            return b

        self.transition = grow3(self.transition)
        self.cooccur = grow3(self.cooccur)
        last = np.full((new_l, new_e), -(1 << 40), dtype=np.int64)
        last[: self.last_used.shape[0], : self.last_used.shape[1]] = self.last_used
        self.last_used = last
        if self.prev is not None:
            prev = np.zeros((new_l, new_e), dtype=bool)
            prev[: self.prev.shape[0], : self.prev.shape[1]] = self.prev
            self.prev = prev

    def decode(self, ids):
        """Instruments of one decode token: {field: ratio or None, "new_experts": n or None}."""
        layers, experts = split_ids(ids)
        present = np.unique(layers)  # the token's layers by number
        for layer in present.tolist():
            if layer not in self.layer_index:
                self.layer_index[layer] = len(self.layer_index)
        ordinals = np.asarray([self.layer_index[layer] for layer in present.tolist()], dtype=np.int64)
        li = ordinals[np.searchsorted(present, layers)]
        self._grow(len(self.layer_index), int(experts.max()) + 1 if len(experts) else 0)
        # consecutive layers of this token (by layer number) for the co-occurrence instrument
        below = ordinals[:-1]
        above = ordinals[1:]
        step = _compiled_step()
        if step is None:
            counts, cur = self._step(li, experts, below, above)
        else:
            has_prev = self.prev is not None
            pl, pe = self.prev_index if has_prev else (np.zeros(0, dtype=np.int64),) * 2
            counts = np.zeros(7, dtype=np.int64)
            cur = step(li, experts, below, above, has_prev, self.time, self.window, self.transition, self.cooccur,
                       self.last_used, self.prev if has_prev else np.zeros((1, 1), dtype=bool), pl, pe, counts)
            counts = counts.tolist() if has_prev else None
        result = dict.fromkeys(FIELDS)
        result["new_experts"] = None
        if counts is not None:
            n, repeat, new_total, new_hit, recency_hit, adjacent_hit, adjacent_den = counts
            result.update(
                repeat=repeat / n,
                delta_recall=new_hit / new_total if new_total else 0.0,
                schedulable=(repeat + new_hit) / n,
                same_layer_recency=recency_hit / n,
                adjacent_layer=adjacent_hit / adjacent_den if adjacent_den else 0.0,
                new_experts=new_total,
            )
            for key, value in zip(COUNTS, counts):
                self.totals[key] += value
            self.totals["tokens"] += 1
        self.time += 1
        self.prev = cur
        self.prev_index = (li, experts)
        return result

    def _step(self, li, experts, below, above):
        """The numpy engine of one token: (the COUNTS, or None for the first token; the token's set);
        updates the transition and co-occurrence counts and last_used."""
        shape = self.last_used.shape
        cur = np.zeros(shape, dtype=bool)
        cur[li, experts] = True
        counts = None
        if self.prev is not None:
            prev = self.prev
            n = int(cur.sum())
            repeat = int((cur & prev).sum())
            pl, pe = self.prev_index
            scores = _sum_rows(shape, pl, self.transition[pl, pe])
            scores[prev] = 0
            predicted = _predict(scores, prev.sum(axis=1))
            new = cur & ~prev
            new_total = int(new.sum())
            new_hit = int((new & predicted).sum())
            recency_hit = int((cur & (self.last_used >= self.time - self.window)).sum())
            adjacent_hit = adjacent_den = 0
            if len(below):
                next_of = np.full(shape[0], -1, dtype=np.int64)
                next_of[below] = np.arange(len(below))
                rows = next_of[li]
                has_next = rows >= 0
                co_scores = _sum_rows((len(below), shape[1]), rows[has_next], self.cooccur[li[has_next], experts[has_next]])
                wanted = cur[above]
                adjacent_hit = int((_predict(co_scores, wanted.sum(axis=1)) & wanted).sum())
                adjacent_den = int(wanted.sum())
            counts = [n, repeat, new_total, new_hit, recency_hit, adjacent_hit, adjacent_den]
            # transitions a -> b within a layer, a in the previous token, b new in this one
            nl, ne = np.nonzero(new)
            same = pl[:, None] == nl[None, :]
            i, j = np.nonzero(same)
            self.transition[pl[i], pe[i], ne[j]] += 1  # (layer, a, b) triples are distinct
        if len(below):
            # co-occurrence a (layer) -> b (the token's next layer): below[k] holds the token's k-th layer
            rank = np.full(shape[0], -1, dtype=np.int64)
            rank[np.concatenate([below, above[-1:]])] = np.arange(len(below) + 1)
            r = rank[li]
            i, j = np.nonzero(r[:, None] + 1 == r[None, :])
            self.cooccur[li[i], experts[i], experts[j]] += 1  # distinct triples
        self.last_used[cur] = self.time
        return counts, cur

    def summary(self):
        """Request-weighted totals over decode tokens after the first; None before a second token."""
        t = self.totals
        if not t["tokens"]:
            return dict.fromkeys(FIELDS + ("new_share",))
        n = t["experts"]
        return {
            "repeat": t["repeat"] / n,
            "delta_recall": t["delta_hit"] / t["new"] if t["new"] else 0.0,
            "schedulable": (t["repeat"] + t["delta_hit"]) / n,
            "same_layer_recency": t["recency_hit"] / n,
            "adjacent_layer": t["adjacent_hit"] / t["adjacent_den"] if t["adjacent_den"] else 0.0,
            "new_share": t["new"] / n,
        }
