"""The demand-cache replay, the bandit's token loop and the predictor's feature pass, as plain Python
loops over numpy arrays.

These functions are the numpy-path engine (run by the interpreter when numba is absent or
$MOETOOLS_NO_JIT is set) and, wrapped by `numba.njit` in `stackjit.py`, the compiled one: the same
source runs both ways, so both give the same decisions. A function that calls another one here is
compiled with its callees' compiled versions bound to the same names (`stackjit._calling`); the
interpreter calls the plain ones. Each kernel is resumable: every piece of state lives in the
arrays passed in, so a trace fed in prefixes makes the same decisions as the whole trace.

Items are layer-major: item = layer ordinal x experts per layer + expert. A *visit* is one layer of
one token (visit number = decode token x layers + layer ordinal, non-decreasing over requests).
"""

import math

import numpy as np

# replay key modes
KEYS_PER_REQUEST = 0  # an item's key is set when it is requested (LRU, LFU, prefill_pin)
KEYS_PER_TOKEN = 1  # every cached key is refreshed from the token's table row when a token starts (bandit)
KEYS_PER_VISIT = 2  # a layer's cached keys are refreshed from the table row when its visit ends (predictive)

# misc[] slots of a replay's state
SIZE, LAST_VISIT, LAST_ROW, LAST_LAYER, N_HELD, N_TOUCHED = 0, 1, 2, 3, 4, 5
NO_ITEM = -1
NEVER = -1 << 62


def replay(items, visits, rows, capacity, n_layers, n_experts, mode, req_a, req_b, tab_a, tab_b, distance_weight,
           in_cache, pos, key_a, key_b, prot, members, count, heap, hpos, hcount, touched, tree, stack, held, misc, hit):
    """A demand cache of `capacity` slots over requests 0..len(items)-1; hit[r] = 1 for a hit.

    Every miss is admitted; when the cache is full the victim is the cached item with the lowest
    key (key_a - distance_weight x layers until its layer comes up again, then key_b), among
    those the current visit has not requested (a token's experts already requested in the
    current layer are not evicted for that layer); only when every cached item is protected (a
    cache smaller than one layer's requests) is the lowest-keyed protected one evicted. key_b is
    distinct per item in every mode, so the victim is unique: any exact search finds the same.

    Data: `members[layer, :count[layer]]` the cached items of each layer (`pos`: index there).
    The unprotected ones are also in a binary min-heap per layer on (key_a, key_b)
    (`heap[layer, :hcount[layer]]`, `hpos`: index there, -1 = not in it): a request takes its item
    out of the heap (`held[:misc[N_HELD]]` lists the visit's requests) and the visit's end puts
    them back with their new keys, or rebuilds the layer's heap when its keys were refreshed. With
    no distance term a tournament tree over the layers' heap tops (`tree[node]`: the layer whose
    top is smallest below it, -1 none; leaves at len(tree) // 2 + layer; layers whose top may
    have changed are listed in `touched` and replayed up the tree before a victim is chosen) gives
    the victim; with one, a branch and bound over the same tree visits only the subtrees whose
    lowest key less the largest distance of their layers could beat the best top found (`stack`:
    its scratch). A miss costs O(log) heap and tree steps.
    The heap moves are written out where they happen: as compiled helper functions (tried) they
    made the replay 2-3x slower.

    Keys: KEYS_PER_REQUEST sets (req_a[r], req_b[r]) on request r; the table modes read
    tab_a/tab_b[rows[r], item] (rows[r] = the table row of request r's token). A call holds whole
    tokens (its last visit ends with it)."""
    size = misc[SIZE]
    last_visit = misc[LAST_VISIT]
    last_row = misc[LAST_ROW]
    cur_layer = misc[LAST_LAYER]
    n_held = misc[N_HELD]
    n_touched = misc[N_TOUCHED]
    leaves = len(tree) // 2
    n = len(items)
    for r in range(n + 1):
        if r < n:
            x = items[r]
            v = visits[r]
            row = rows[r]
            layer = x // n_experts
        else:  # calls hold whole tokens: the last visit ends here
            x = NO_ITEM
            v = -2
            row = -2
            layer = cur_layer
        if v != last_visit:
            lo_l = 0
            hi_l = 0  # layers whose heaps are rebuilt
            refresh_all = mode == KEYS_PER_TOKEN and row != last_row and r < n
            if last_visit >= 0:
                # the visit last_visit of layer cur_layer ended: its requests are no longer protected
                if mode == KEYS_PER_VISIT:  # its keys are refreshed: the layer's heap is rebuilt
                    for j in range(count[cur_layer]):
                        y = members[cur_layer, j]
                        key_a[y] = tab_a[last_row, y]
                        key_b[y] = tab_b[last_row, y]
                    lo_l = cur_layer
                    hi_l = cur_layer + 1
                elif not refresh_all:
                    for k in range(n_held):  # put the visit's cached requests back, with their new keys
                        y = held[k]
                        if in_cache[y] == 0 or hpos[y] >= 0:
                            continue
                        i = hcount[cur_layer]
                        hcount[cur_layer] = i + 1
                        ya = key_a[y]
                        yb = key_b[y]
                        while i > 0:  # sift up
                            p = (i - 1) >> 1
                            z = heap[cur_layer, p]
                            if ya < key_a[z] or (ya == key_a[z] and yb < key_b[z]):
                                heap[cur_layer, i] = z
                                hpos[z] = i
                                i = p
                            else:
                                break
                        heap[cur_layer, i] = y
                        hpos[y] = i
                    if n_held > 0 and touched[cur_layer] == 0:
                        touched[cur_layer] = 1
                        touched[n_layers + n_touched] = cur_layer
                        n_touched += 1
            if refresh_all:  # a new token: every cached key is refreshed, every heap rebuilt
                for lay in range(n_layers):
                    for j in range(count[lay]):
                        y = members[lay, j]
                        key_a[y] = tab_a[row, y]
                        key_b[y] = tab_b[row, y]
                lo_l = 0
                hi_l = n_layers
            n_held = 0
            for lay in range(lo_l, hi_l):
                m = count[lay]
                for j in range(m):
                    y = members[lay, j]
                    heap[lay, j] = y
                    hpos[y] = j
                hcount[lay] = m
                for start in range(m // 2 - 1, -1, -1):  # heapify: sift each parent down
                    i = start
                    y = heap[lay, i]
                    ya = key_a[y]
                    yb = key_b[y]
                    while True:
                        c = 2 * i + 1
                        if c >= m:
                            break
                        z = heap[lay, c]
                        if c + 1 < m:
                            z2 = heap[lay, c + 1]
                            if key_a[z2] < key_a[z] or (key_a[z2] == key_a[z] and key_b[z2] < key_b[z]):
                                c += 1
                                z = z2
                        if key_a[z] < ya or (key_a[z] == ya and key_b[z] < yb):
                            heap[lay, i] = z
                            hpos[z] = i
                            i = c
                        else:
                            break
                    heap[lay, i] = y
                    hpos[y] = i
                if touched[lay] == 0:
                    touched[lay] = 1
                    touched[n_layers + n_touched] = lay
                    n_touched += 1
            if r == n:
                break
            last_visit = v
            last_row = row
            cur_layer = layer
        if in_cache[x]:
            hit[r] = 1
            i = hpos[x]
            if i >= 0:  # protected from now on: out of its layer's heap
                hpos[x] = -1
                m = hcount[layer] - 1
                hcount[layer] = m
                if i < m:
                    y = heap[layer, m]
                    ya = key_a[y]
                    yb = key_b[y]
                    while i > 0:  # sift the moved entry up, then down
                        p = (i - 1) >> 1
                        z = heap[layer, p]
                        if ya < key_a[z] or (ya == key_a[z] and yb < key_b[z]):
                            heap[layer, i] = z
                            hpos[z] = i
                            i = p
                        else:
                            break
                    while True:
                        c = 2 * i + 1
                        if c >= m:
                            break
                        z = heap[layer, c]
                        if c + 1 < m:
                            z2 = heap[layer, c + 1]
                            if key_a[z2] < key_a[z] or (key_a[z2] == key_a[z] and key_b[z2] < key_b[z]):
                                c += 1
                                z = z2
                        if key_a[z] < ya or (key_a[z] == ya and key_b[z] < yb):
                            heap[layer, i] = z
                            hpos[z] = i
                            i = c
                        else:
                            break
                    heap[layer, i] = y
                    hpos[y] = i
                if touched[layer] == 0:
                    touched[layer] = 1
                    touched[n_layers + n_touched] = layer
                    n_touched += 1
        else:
            hit[r] = 0
            if size >= capacity:
                victim = NO_ITEM
                best_a = math.inf
                best_b = 0
                if n_touched * 4 > n_layers:  # many changed: rebuild the whole tree bottom up
                    for k in range(n_touched):
                        touched[touched[n_layers + k]] = 0
                    for lay in range(leaves):
                        tree[leaves + lay] = lay if lay < n_layers and hcount[lay] > 0 else NO_ITEM
                    first_node = leaves - 1
                    n_touched = 0
                else:
                    first_node = 0
                for node in range(first_node, 0, -1):
                    wl = tree[2 * node]
                    wr = tree[2 * node + 1]
                    if wl == NO_ITEM or (wr != NO_ITEM and (key_a[heap[wr, 0]] < key_a[heap[wl, 0]] or (
                            key_a[heap[wr, 0]] == key_a[heap[wl, 0]] and key_b[heap[wr, 0]] < key_b[heap[wl, 0]]))):
                        tree[node] = wr
                    else:
                        tree[node] = wl
                for k in range(n_touched):  # replay the few changed layers up the tree
                    lay = touched[n_layers + k]
                    touched[lay] = 0
                    node = leaves + lay
                    tree[node] = lay if hcount[lay] > 0 else NO_ITEM
                    node >>= 1
                    while node >= 1:
                        wl = tree[2 * node]
                        wr = tree[2 * node + 1]
                        if wl == NO_ITEM or (wr != NO_ITEM and (key_a[heap[wr, 0]] < key_a[heap[wl, 0]] or (
                                key_a[heap[wr, 0]] == key_a[heap[wl, 0]] and key_b[heap[wr, 0]] < key_b[heap[wl, 0]]))):
                            tree[node] = wr
                        else:
                            tree[node] = wl
                        node >>= 1
                n_touched = 0
                if distance_weight == 0.0:
                    if tree[1] != NO_ITEM:
                        victim = heap[tree[1], 0]
                elif tree[1] != NO_ITEM:
                    # branch and bound over the tree: a subtree's lowest key less the largest distance of
                    # its layers bounds every key in it from below (fl(a - b) is monotone in a and in b),
                    # so a subtree is skipped when that bound is above the best found; the child whose
                    # key is the lowest is searched first. stack: (node, first layer, layers under it)
                    stack[0] = 1
                    stack[1] = 0
                    stack[2] = leaves
                    depth = 1
                    while depth > 0:
                        depth -= 1
                        node = stack[3 * depth]
                        lo = stack[3 * depth + 1]
                        span = stack[3 * depth + 2]
                        w = tree[node]
                        if w == NO_ITEM:
                            continue
                        y = heap[w, 0]
                        if span == 1:
                            ahead = lo - cur_layer  # layers until it comes up again (no modulo: cheaper)
                            if ahead < 0:
                                ahead += n_layers
                            a = key_a[y] - distance_weight * ahead
                            if victim == NO_ITEM or a < best_a or (a == best_a and key_b[y] < best_b):
                                best_a = a
                                best_b = key_b[y]
                                victim = y
                            continue
                        hi = min(lo + span, n_layers) - 1
                        if cur_layer <= lo:
                            far = hi - cur_layer
                        elif cur_layer > hi:
                            far = hi - cur_layer + n_layers
                        else:
                            far = n_layers - 1
                        if victim != NO_ITEM and key_a[y] - distance_weight * far > best_a:
                            continue
                        half = span >> 1
                        if tree[2 * node] == w:  # the left child holds the lowest key: pushed last, searched first
                            stack[3 * depth] = 2 * node + 1
                            stack[3 * depth + 1] = lo + half
                            stack[3 * depth + 3] = 2 * node
                            stack[3 * depth + 4] = lo
                        else:
                            stack[3 * depth] = 2 * node
                            stack[3 * depth + 1] = lo
                            stack[3 * depth + 3] = 2 * node + 1
                            stack[3 * depth + 4] = lo + half
                        stack[3 * depth + 2] = half
                        stack[3 * depth + 5] = half
                        depth += 2
                if victim == NO_ITEM:  # everything cached is protected: the lowest key of the layer goes
                    for j in range(count[cur_layer]):
                        y = members[cur_layer, j]
                        if victim == NO_ITEM or key_a[y] < best_a or (key_a[y] == best_a and key_b[y] < best_b):
                            best_a = key_a[y]
                            best_b = key_b[y]
                            victim = y
                vl = victim // n_experts
                if hpos[victim] >= 0:  # the top of its layer's heap: popped
                    hpos[victim] = -1
                    m = hcount[vl] - 1
                    hcount[vl] = m
                    if m > 0:
                        y = heap[vl, m]
                        ya = key_a[y]
                        yb = key_b[y]
                        i = 0
                        while True:
                            c = 2 * i + 1
                            if c >= m:
                                break
                            z = heap[vl, c]
                            if c + 1 < m:
                                z2 = heap[vl, c + 1]
                                if key_a[z2] < key_a[z] or (key_a[z2] == key_a[z] and key_b[z2] < key_b[z]):
                                    c += 1
                                    z = z2
                            if key_a[z] < ya or (key_a[z] == ya and key_b[z] < yb):
                                heap[vl, i] = z
                                hpos[z] = i
                                i = c
                            else:
                                break
                        heap[vl, i] = y
                        hpos[y] = i
                    if touched[vl] == 0:
                        touched[vl] = 1
                        touched[n_layers + n_touched] = vl
                        n_touched += 1
                last = members[vl, count[vl] - 1]
                members[vl, pos[victim]] = last
                pos[last] = pos[victim]
                count[vl] -= 1
                in_cache[victim] = 0
                size -= 1
            members[layer, count[layer]] = x
            pos[x] = count[layer]
            count[layer] += 1
            in_cache[x] = 1
            size += 1
            if mode != KEYS_PER_REQUEST:
                key_a[x] = tab_a[row, x]
                key_b[x] = tab_b[row, x]
        if prot[x] != v:  # first request of x in this visit: held out of the heap until it ends
            prot[x] = v
            held[n_held] = x
            n_held += 1
        if mode == KEYS_PER_REQUEST:
            key_a[x] = req_a[r]
            key_b[x] = req_b[r]
    misc[SIZE] = size
    misc[LAST_VISIT] = -1
    misc[LAST_ROW] = -1
    misc[LAST_LAYER] = cur_layer
    misc[N_HELD] = 0
    misc[N_TOUCHED] = n_touched


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
                if sim[s] == 0.0 and gamma > 0.0:  # a weight of 0 ** gamma = 0: no vote (pow not needed)
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


def best_arm(rewards, b):
    """The arm with the best reward at budget b (the first of equal ones, as np.argmax)."""
    best = 0
    for arm in range(1, rewards.shape[0]):
        if rewards[arm, b] > rewards[best, b]:
            best = arm
    return best


def bandit(items, visits, rows, starts, first_token, n_layers, n_experts, capacities, decays, keep, ema, scores,
           last_seen, rewards, served, block, tab, seen, block_rows, hit, in_cache, pos, key_a, key_b, prot, members,
           count, heap, hpos, hcount, touched, tree, stack, held, misc, out):
    """The decayed-frequency bandit as demand caches, for every budget at once.

    Cache arm x B + b is arm `arm`'s shadow cache at budget b (capacities[b]), cache n_arms x B + b
    the served cache at budget b, each replayed with KEYS_PER_TOKEN (`replay`) and the keys known
    before each token: the arm's scores (score <- decay x score + used, once per token) and, for
    ties, the last token each item was seen (last_seen x items + item: least recently seen first,
    then the lowest item). Each token the served cache of budget b follows the arm with the best
    reward so far (the first on a tie); then every arm's reward takes its shadow's hit fraction
    (reward <- keep x reward + ema x fraction), and the scores and last_seen learn the token.
    out[t, b] = the served cache's hits on token t. The state (scores, last_seen, rewards,
    served, the caches) carries over between calls.

    Tokens go in blocks of `block`: the block's key tables (`tab[arm, row]`, `seen[row]`) are
    filled first, then each shadow cache replays the whole block (its state and its arm's rows
    stay in the processor's cache for the block, which a token at a time across every cache
    would not), then the served caches follow the rewards token by token."""
    n_arms = len(decays)
    n_budgets = len(capacities)
    size = scores.shape[1]
    n_tokens = len(starts) - 1
    fraction = np.zeros((n_arms, block, n_budgets))
    no_a = np.zeros(1)
    no_b = np.zeros(1, dtype=np.int64)
    item_ids = np.arange(size)
    for first in range(0, n_tokens, block):
        stop = min(n_tokens, first + block)
        lo = starts[first]
        hi = starts[stop]
        for t in range(first, stop):  # the keys before each token of the block, then learn the token
            tab[:, t - first, :] = scores
            seen[t - first, :] = last_seen * size + item_ids
            for arm in range(n_arms):
                scores[arm, :] *= decays[arm]
            token = first_token + t
            for k in range(starts[t], starts[t + 1]):
                y = items[k]
                if last_seen[y] != token:  # once per token, however often it is requested
                    for arm in range(n_arms):
                        scores[arm, y] += 1.0
                    last_seen[y] = token
        for k in range(lo, hi):
            block_rows[k] = rows[k] - rows[lo]
        for arm in range(n_arms):
            for b in range(n_budgets):
                c = arm * n_budgets + b
                replay(items[lo:hi], visits[lo:hi], block_rows[lo:hi], capacities[b], n_layers, n_experts, KEYS_PER_TOKEN,
                       no_a, no_b, tab[arm], seen, 0.0, in_cache[c], pos[c], key_a[c], key_b[c], prot[c], members[c],
                       count[c], heap[c], hpos[c], hcount[c], touched[c], tree[c], stack[c], held[c], misc[c], hit[lo:hi])
                for t in range(first, stop):
                    hits = 0
                    for k in range(starts[t], starts[t + 1]):
                        hits += hit[k]
                    fraction[arm, t - first, b] = hits / max(starts[t + 1] - starts[t], 1)
        for t in range(first, stop):
            a = starts[t]
            z = starts[t + 1]
            for b in range(n_budgets):
                scored = best_arm(rewards, b)
                served[b] = scored
                c = n_arms * n_budgets + b
                replay(items[a:z], visits[a:z], block_rows[a:z], capacities[b], n_layers, n_experts, KEYS_PER_TOKEN,
                       no_a, no_b, tab[scored], seen, 0.0, in_cache[c], pos[c], key_a[c], key_b[c], prot[c], members[c],
                       count[c], heap[c], hpos[c], hcount[c], touched[c], tree[c], stack[c], held[c], misc[c], hit[a:z])
                hits = 0
                for k in range(a, z):
                    hits += hit[k]
                out[t, b] = hits
            for arm in range(n_arms):
                for b in range(n_budgets):
                    rewards[arm, b] = keep * rewards[arm, b] + ema * fraction[arm, t - first, b]
    for b in range(n_budgets):
        served[b] = best_arm(rewards, b)
