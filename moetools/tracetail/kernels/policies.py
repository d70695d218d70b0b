"""One decode token of the top-S residency sets as plain loops (policies.ScoredPolicies.decode's
numpy method is the engine without numba; tests check that both agree). Compiled by stackjit.py."""

import numpy as np

from moetools.tracetail.kernels.demand import best_arm


def _before(scores, last_seen, a, b):
    """Whether item a ranks before item b in an arm's order: higher score, then more recently seen,
    then first seen (the lower index)."""
    if scores[a] != scores[b]:
        return scores[a] > scores[b]
    if last_seen[a] != last_seen[b]:
        return last_seen[a] > last_seen[b]
    return a < b


def _resort_arm(scores, last_seen, order, position, n, used, m, mark, rest, fresh):
    """Restores an arm's order after a token's learning. Unused items keep their order (a decay
    multiplies every score by the same factor, which keeps it, except where two scores round to
    the same value: an insertion pass repairs those few); the token's items (`used[:m]`, now all
    seen last) are sorted by score then index and merged in. Exact: the result is the order of
    the keys, whatever the input."""
    stamp = mark[n]  # mark[item] == stamp: used by this token
    stamp += 1
    mark[n] = stamp
    for i in range(m):
        mark[used[i]] = stamp
    r = 0
    for p in range(n):
        y = order[p]
        if mark[y] != stamp:
            rest[r] = y
            r += 1
    for i in range(1, r):  # insertion pass: O(r) when nothing moved
        x = rest[i]
        j = i - 1
        while j >= 0 and _before(scores, last_seen, x, rest[j]):
            rest[j + 1] = rest[j]
            j -= 1
        rest[j + 1] = x
    by_index = np.sort(used[:m])  # all seen last: by score, then the lower index
    minus = np.empty(m)
    for i in range(m):
        minus[i] = -scores[by_index[i]]
    by_score = np.argsort(minus, kind="mergesort")
    for i in range(m):
        fresh[i] = by_index[by_score[i]]
    i = 0
    j = 0
    for p in range(n):
        if j >= m or (i < r and _before(scores, last_seen, rest[i], fresh[j])):
            y = rest[i]
            i += 1
        else:
            y = fresh[j]
            j += 1
        order[p] = y
        position[y] = p


def _count_below(rank_of, need, k, budgets, out):
    """out[b] = how many of need[:k] have rank_of[item] < budgets[b]."""
    for b in range(len(budgets)):
        count = 0
        limit = budgets[b]
        for q in range(k):
            if rank_of[need[q]] < limit:
                count += 1
        out[b] = count


def topk_step(idx, n, scores, last_seen, prefill_count, rewards, decays, budgets, time, window, keep, ema, served, out,
              order, position, state):
    """One decode token of ScoredPolicies.decode as plain loops, compiled by stackjit: out[0] the
    bandit's top-S hits per budget (served by the arm with the best reward so far, the first on a
    tie), out[1] recency's, out[2] prefill_pin's; then the rewards, scores and last_seen learn the
    token. `idx`: the token's dense items (distinct); n: items known.

    Instead of a sort per arm and token, the item orders are kept between tokens (`order[row, :n]`,
    `position[row, item]`; rows: the arms, recency, prefill_pin; state = [items in them, prefill
    order out of date]): an item new since the last token ranks last everywhere (score 0, never
    seen, the highest index), a token's learning is merged into each arm's order (_resort_arm) and
    moves its items to the front of recency's, and prefill_pin's is rebuilt after a prefill."""
    n_arms = len(decays)
    n_budgets = len(budgets)
    m = len(idx)
    recency_row = n_arms
    prefill_row = n_arms + 1
    known = state[0]
    for row in range(n_arms + 2):
        for y in range(known, n):
            order[row, y] = y
            position[row, y] = y
    state[0] = n
    if state[1] != 0:  # prefill counts changed: most prefill batches first, then the lower index
        minus = np.empty(n)
        for j in range(n):
            minus[j] = -prefill_count[j]
        by_count = np.argsort(minus, kind="mergesort")
        for p in range(n):
            order[prefill_row, p] = by_count[p]
            position[prefill_row, by_count[p]] = p
        state[1] = 0
    need = np.empty(m, dtype=np.int64)
    k = 0
    for i in range(m):
        if last_seen[idx[i]] >= 0:  # experts new to decode cannot be resident in any policy
            need[k] = idx[i]
            k += 1
    arm_hits = np.zeros((n_arms, n_budgets), dtype=np.int64)
    row_out = np.zeros(n_budgets, dtype=np.int64)
    for arm in range(n_arms):
        _count_below(position[arm], need, k, budgets, row_out)
        for b in range(n_budgets):
            arm_hits[arm, b] = row_out[b]
    for b in range(n_budgets):
        best = best_arm(rewards, b)
        served[b] = best
        out[0, b] = arm_hits[best, b]
    for arm in range(n_arms):
        for b in range(n_budgets):
            rewards[arm, b] = keep * rewards[arm, b] + ema * (arm_hits[arm, b] / max(m, 1))
    k2 = 0
    for i in range(m):
        y = idx[i]
        if last_seen[y] >= 0 and last_seen[y] >= time - window:
            need[k2] = y
            k2 += 1
    _count_below(position[recency_row], need, k2, budgets, row_out)
    for b in range(n_budgets):
        out[1, b] = row_out[b]
    k3 = 0
    for i in range(m):
        if prefill_count[idx[i]] > 0:
            need[k3] = idx[i]
            k3 += 1
    _count_below(position[prefill_row], need, k3, budgets, row_out)
    for b in range(n_budgets):
        out[2, b] = row_out[b]
    # learn the token
    for arm in range(n_arms):
        d = decays[arm]
        for j in range(n):
            scores[arm, j] *= d
        for i in range(m):
            scores[arm, idx[i]] += 1.0
    for i in range(m):
        last_seen[idx[i]] = time
    mark = np.zeros(n + 1, dtype=np.int64)
    rest = np.empty(n, dtype=np.int64)
    fresh = np.empty(m, dtype=np.int64)
    for arm in range(n_arms):
        _resort_arm(scores[arm], last_seen, order[arm], position[arm], n, idx, m, mark, rest, fresh)
    # recency: the token's items first (by index), the others keep their order
    stamp = mark[n] + 1
    mark[n] = stamp
    for i in range(m):
        mark[idx[i]] = stamp
        fresh[i] = idx[i]
    fresh.sort()
    r = 0
    for q in range(n):
        y = order[recency_row, q]
        if mark[y] != stamp:
            rest[r] = y
            r += 1
    for i in range(m):
        order[recency_row, i] = fresh[i]
        position[recency_row, fresh[i]] = i
    for q in range(r):
        order[recency_row, m + q] = rest[q]
        position[recency_row, rest[q]] = m + q
