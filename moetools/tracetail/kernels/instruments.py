"""One decode token of the per-token instruments as plain loops (instruments.Instruments.decode's
numpy method `_step` is the engine without numba; tests check that both agree). Compiled by
stackjit.py."""

import numpy as np


def _row_rank(scores, r, e):
    """Rank of column e in row r of `scores`, highest first, ties to the lower column (_predict's
    order)."""
    rank = 0
    s = scores[r, e]
    for f in range(scores.shape[1]):
        if scores[r, f] > s or (scores[r, f] == s and f < e):
            rank += 1
    return rank


def instruments_step(li, experts, below, above, has_prev, time, window, transition, cooccur, last_used, prev, pl,
                     pe, out):
    """One decode token of `Instruments.decode` as plain loops, compiled by stackjit (the numpy
    method is the engine without numba; tests check that both agree).

    li, experts: the token's requests (layer ordinals, experts); below/above: ordinals of the token's
    consecutive layers by layer number; prev: the previous token's (layer, expert) set, pl/pe its
    requests. Updates transition, cooccur and last_used (each distinct triple once, as numpy's
    fancy `+=` does) and writes out = [experts, repeat, new, delta_hit, recency_hit, adjacent_hit,
    adjacent_den]. Sums over a previous token's requests follow _sum_rows: a row is the sum over
    its last run of equal rows."""
    n_rows, n_cols = last_used.shape
    cur = np.zeros((n_rows, n_cols), dtype=np.bool_)
    for k in range(len(li)):
        cur[li[k], experts[k]] = True
    for k in range(7):
        out[k] = 0
    if has_prev:
        scores = np.zeros((n_rows, n_cols), dtype=np.int64)
        for k in range(len(pl)):
            if k == 0 or pl[k - 1] != pl[k]:
                scores[pl[k], :] = 0
            for e in range(n_cols):
                scores[pl[k], e] += transition[pl[k], pe[k], e]
        for r in range(n_rows):
            count = 0
            for e in range(n_cols):
                if prev[r, e]:
                    scores[r, e] = 0
                    count += 1
            for e in range(n_cols):
                if not cur[r, e]:
                    continue
                out[0] += 1
                if last_used[r, e] >= time - window:
                    out[4] += 1
                if prev[r, e]:
                    out[1] += 1
                    continue
                out[2] += 1
                if scores[r, e] > 0 and _row_rank(scores, r, e) < count:
                    out[3] += 1
        for r in range(n_rows):  # transitions a -> b within a layer, a in the previous token, b new in this one
            for a in range(n_cols):
                if prev[r, a]:
                    for b in range(n_cols):
                        if cur[r, b] and not prev[r, b]:
                            transition[r, a, b] += 1
        if len(below):
            next_of = np.full(n_rows, -1, dtype=np.int64)
            for k in range(len(below)):
                next_of[below[k]] = k
            co_scores = np.zeros((len(below), n_cols), dtype=np.int64)
            last_row = -1
            for k in range(len(li)):
                row = next_of[li[k]]
                if row < 0:
                    continue
                if row != last_row:
                    co_scores[row, :] = 0
                    last_row = row
                for e in range(n_cols):
                    co_scores[row, e] += cooccur[li[k], experts[k], e]
            for k in range(len(below)):
                wanted = 0
                for e in range(n_cols):
                    if cur[above[k], e]:
                        wanted += 1
                out[6] += wanted
                for e in range(n_cols):
                    if cur[above[k], e] and co_scores[k, e] > 0 and _row_rank(co_scores, k, e) < wanted:
                        out[5] += 1
    for k in range(len(below)):  # co-occurrence a (layer) -> b (the token's next layer)
        for a in range(n_cols):
            if cur[below[k], a]:
                for b in range(n_cols):
                    if cur[above[k], b]:
                        cooccur[below[k], a, b] += 1
    for r in range(n_rows):
        for e in range(n_cols):
            if cur[r, e]:
                last_used[r, e] = time
    return cur
