"""The demand-cache replay and the predictor's feature pass, as plain Python loops over numpy arrays.

These functions are the numpy-path engine (run by the interpreter when numba is absent or
$MOETOOLS_NO_JIT is set) and, wrapped by `numba.njit` in `demandjit.py`, the compiled one: the same
source runs both ways, so both give the same decisions. Each is self-contained (no calls to other
Python functions: numba could not call them) and resumable: every piece of state lives in the
arrays passed in, so a trace fed in prefixes makes the same decisions as the whole trace.

Items are layer-major: item = layer ordinal x experts per layer + expert. A *visit* is one layer of
one token (visit number = decode token x layers + layer ordinal, non-decreasing over requests).
"""

import math

# replay key modes
KEYS_PER_REQUEST = 0  # an item's key is set when it is requested (LRU, LFU, prefill_pin)
KEYS_PER_TOKEN = 1  # every cached key is refreshed from the token's table row when a token starts (bandit)
KEYS_PER_VISIT = 2  # a layer's cached keys are refreshed from the table row when its visit ends (predictive)

# misc[] slots of a replay's state
SIZE, LAST_VISIT, LAST_ROW, LAST_LAYER = 0, 1, 2, 3
NO_ITEM = -1
NEVER = -1 << 62


def replay(items, visits, rows, capacity, n_layers, n_experts, mode, req_a, req_b, tab_a, tab_b, distance_weight,
           in_cache, pos, key_a, key_b, prot, members, count, dirty, lmin_a, lmin_b, lmin_item, misc, hit):
    """A demand cache of `capacity` slots over requests 0..len(items)-1; hit[r] = 1 for a hit.

    Every miss is admitted; when the cache is full the victim is the cached item with the lowest
    key (key_a - distance_weight x layers until its layer comes up again, then key_b), among
    those the current visit has not requested (a token's experts already requested in the
    current layer are not evicted for that layer); only when every cached item is protected (a
    cache smaller than one layer's requests) is the lowest-keyed protected one evicted.
    Per-layer minima are kept and recomputed only for layers whose minimum may have changed (the
    victim's layer, a layer whose minimum got requested, a layer whose visit ended or whose keys
    were refreshed), so a miss costs O(layers + one layer's members), not O(capacity).

    Keys: KEYS_PER_REQUEST sets (req_a[r], req_b[r]) on request r; the table modes read
    tab_a/tab_b[rows[r], item] (rows[r] = the table row of request r's token). A call holds whole
    tokens (its last visit ends with it)."""
    size = misc[SIZE]
    last_visit = misc[LAST_VISIT]
    last_row = misc[LAST_ROW]
    cur_layer = misc[LAST_LAYER]
    for r in range(len(items)):
        x = items[r]
        v = visits[r]
        row = rows[r]
        layer = x // n_experts
        if v != last_visit:
            if last_visit >= 0:
                dirty[cur_layer] = 1  # its requests are no longer protected
                if mode == KEYS_PER_VISIT:
                    for j in range(count[cur_layer]):
                        y = members[cur_layer, j]
                        key_a[y] = tab_a[last_row, y]
                        key_b[y] = tab_b[last_row, y]
            if mode == KEYS_PER_TOKEN and row != last_row:
                for lay in range(n_layers):
                    for j in range(count[lay]):
                        y = members[lay, j]
                        key_a[y] = tab_a[row, y]
                        key_b[y] = tab_b[row, y]
                    dirty[lay] = 1
            last_visit = v
            last_row = row
            cur_layer = layer
        if in_cache[x]:
            hit[r] = 1
        else:
            hit[r] = 0
            if size >= capacity:
                best_a = math.inf
                best_b = 0
                victim = NO_ITEM
                for lay in range(n_layers):
                    if count[lay] == 0:
                        continue
                    if dirty[lay]:
                        ma = math.inf
                        mb = 0
                        mi = NO_ITEM
                        for j in range(count[lay]):
                            y = members[lay, j]
                            if prot[y] == v:
                                continue
                            if mi == NO_ITEM or key_a[y] < ma or (key_a[y] == ma and key_b[y] < mb):
                                ma = key_a[y]
                                mb = key_b[y]
                                mi = y
                        lmin_a[lay] = ma
                        lmin_b[lay] = mb
                        lmin_item[lay] = mi
                        dirty[lay] = 0
                    if lmin_item[lay] == NO_ITEM:
                        continue
                    a = lmin_a[lay]
                    if distance_weight != 0.0:
                        ahead = lay - cur_layer  # layers until it comes up again (no modulo: cheaper)
                        if ahead < 0:
                            ahead += n_layers
                        a -= distance_weight * ahead
                    if victim == NO_ITEM or a < best_a or (a == best_a and lmin_b[lay] < best_b):
                        best_a = a
                        best_b = lmin_b[lay]
                        victim = lmin_item[lay]
                if victim == NO_ITEM:  # everything cached is protected: the lowest key of the layer goes
                    for j in range(count[cur_layer]):
                        y = members[cur_layer, j]
                        if victim == NO_ITEM or key_a[y] < best_a or (key_a[y] == best_a and key_b[y] < best_b):
                            best_a = key_a[y]
                            best_b = key_b[y]
                            victim = y
                vl = victim // n_experts
                last = members[vl, count[vl] - 1]
                members[vl, pos[victim]] = last
                pos[last] = pos[victim]
                count[vl] -= 1
                in_cache[victim] = 0
                dirty[vl] = 1
                size -= 1
            members[layer, count[layer]] = x
            pos[x] = count[layer]
            count[layer] += 1
            in_cache[x] = 1
            size += 1
            if mode != KEYS_PER_REQUEST:
                key_a[x] = tab_a[row, x]
                key_b[x] = tab_b[row, x]
        # x is protected from now on: the layer's minimum changes only if x was it (a new key of a
        # protected item counts once the visit ends, when the layer is marked dirty)
        if lmin_item[layer] == x:
            dirty[layer] = 1
        prot[x] = v
        if mode == KEYS_PER_REQUEST:
            key_a[x] = req_a[r]
            key_b[x] = req_b[r]
    # calls hold whole tokens: the last visit ends here (its keys refreshed from this call's table)
    if last_visit >= 0:
        dirty[cur_layer] = 1
        if mode == KEYS_PER_VISIT:
            for j in range(count[cur_layer]):
                y = members[cur_layer, j]
                key_a[y] = tab_a[last_row, y]
                key_b[y] = tab_b[last_row, y]
    misc[SIZE] = size
    misc[LAST_VISIT] = -1
    misc[LAST_ROW] = -1
    misc[LAST_LAYER] = cur_layer


# predictor state: misc slots
P_SIM_TOKEN, P_SO_FAR, P_LAST_VISIT, P_GROUP = 0, 1, 2, 3
N_FEATURES = 16
HALF_LIVES = (1.0, 4.0, 16.0, 64.0)  # tokens; decayed use counts, one per half-life


def predict(items, visits, rows, n_layers, n_experts, weights, gamma, last_use, prev_use, counts, layer_at, hist,
            hist_count, hist_token, sim, mark, vote, group, misc, out_a, out_b, features):
    """The predictive policy's keys, budget-independent: after each visit (token t, layer l) every
    expert e of layer l gets out_a[rows, l x E + e] = -n_layers x (1 - p) / p, the expected layer
    steps until its next use beyond the one coming up when p is the logistic probability that
    token t + 1 uses it, and out_b = its last use (ties: the older goes first).

    p = 1 / (1 + exp(-weights . f)), f the features of the expert as of the end of the visit
    (only records up to this one are read): recency buckets of the age in tokens (1, 2, 3-4, 5-8,
    9-16, 17-64, older, never), log(1 + use count decayed at each of HALF_LIVES), 1 / the interval
    between its last two uses, whether its age already exceeds that interval, and the sequence
    vote: the past tokens j of the history ring whose routing of layers 0..l overlaps token t's
    (overlap share s_j over the experts so far) vote for the experts token j + 1 used in layer l,
    with weight s_j ** gamma; the vote is the weighted share (and whether it is above 0).
    `features`, when it has rows, receives f (fitting and tests). The history ring keeps each past
    token's experts per layer (hist, hist_count); a layer's counts are decayed together when it is
    visited (layer_at: the token they are decayed to)."""
    ring = hist.shape[0]
    kmax = hist.shape[2]
    n_group = misc[P_GROUP]
    last_visit = misc[P_LAST_VISIT]
    n = len(items)
    for r in range(n + 1):
        v = visits[r] if r < n else -2
        if v != last_visit and last_visit >= 0:
            # --- the visit last_visit ended: token t, layer lay, experts group[:n_group]
            t = last_visit // n_layers
            lay = last_visit % n_layers
            row = rows[r - 1]
            if misc[P_SIM_TOKEN] != t:
                for s in range(ring):
                    sim[s] = 0.0
                misc[P_SIM_TOKEN] = t
                misc[P_SO_FAR] = 0
            slot = t % ring
            kept = min(n_group, kmax)
            for k in range(kept):
                hist[slot, lay, k] = group[k]
            hist_count[slot, lay] = kept
            hist_token[slot] = t
            stamp = last_visit + 1
            for k in range(n_group):
                mark[group[k]] = stamp
            for s in range(ring):
                j = hist_token[s]
                if j < 0 or j >= t or j <= t - ring:
                    continue
                overlap = 0
                for k in range(hist_count[s, lay]):
                    if mark[hist[s, lay, k]] == stamp:
                        overlap += 1
                sim[s] += overlap
            misc[P_SO_FAR] += n_group
            so_far = misc[P_SO_FAR]
            for e in range(n_experts):
                vote[e] = 0.0
            total = 0.0
            for s in range(ring):
                j = hist_token[s]
                if j < 0 or j >= t or j <= t - ring or so_far == 0:
                    continue
                w = (sim[s] / so_far) ** gamma
                if w <= 0.0:
                    continue
                total += w
                nxt = (j + 1) % ring
                for k in range(hist_count[nxt, lay]):
                    vote[hist[nxt, lay, k]] += w
            if total > 0.0:
                for e in range(n_experts):
                    vote[e] /= total
            if layer_at[lay] >= 0 and layer_at[lay] != t:
                for h in range(len(HALF_LIVES)):
                    factor = 0.5 ** ((t - layer_at[lay]) / HALF_LIVES[h])
                    for e in range(n_experts):
                        counts[h, lay * n_experts + e] *= factor
            layer_at[lay] = t
            for k in range(n_group):
                y = lay * n_experts + group[k]
                for h in range(len(HALF_LIVES)):
                    counts[h, y] += 1.0
                prev_use[y] = last_use[y]
                last_use[y] = t
            for e in range(n_experts):
                y = lay * n_experts + e
                z = 0.0
                f = 0
                lu = last_use[y]
                age = t + 1 - lu
                bucket = 7
                if lu >= 0:
                    if age <= 1:
                        bucket = 0
                    elif age <= 2:
                        bucket = 1
                    elif age <= 4:
                        bucket = 2
                    elif age <= 8:
                        bucket = 3
                    elif age <= 16:
                        bucket = 4
                    elif age <= 64:
                        bucket = 5
                    else:
                        bucket = 6
                z += weights[bucket]
                if features.shape[0] > 0:
                    for b in range(8):
                        features[row, y, b] = 1.0 if b == bucket else 0.0
                f = 8
                for h in range(len(HALF_LIVES)):
                    value = math.log1p(counts[h, y])
                    z += weights[f] * value
                    if features.shape[0] > 0:
                        features[row, y, f] = value
                    f += 1
                inv_gap = 0.0
                overdue = 0.0
                if prev_use[y] >= 0:
                    gap = lu - prev_use[y]
                    inv_gap = 1.0 / gap
                    overdue = 1.0 if age > gap else 0.0
                seen_vote = 1.0 if vote[e] > 0.0 else 0.0
                z += weights[f] * inv_gap + weights[f + 1] * overdue + weights[f + 2] * vote[e] + weights[f + 3] * seen_vote
                if features.shape[0] > 0:
                    features[row, y, f] = inv_gap
                    features[row, y, f + 1] = overdue
                    features[row, y, f + 2] = vote[e]
                    features[row, y, f + 3] = seen_vote
                z = min(30.0, max(-30.0, z))
                out_a[row, y] = -n_layers * math.exp(-z)
                out_b[row, y] = lu * n_layers * n_experts + y
            n_group = 0
        if r == n:
            break
        if v != last_visit:
            last_visit = v
        if n_group < len(group):
            group[n_group] = items[r] % n_experts
            n_group += 1
    misc[P_GROUP] = 0
    misc[P_LAST_VISIT] = -1
