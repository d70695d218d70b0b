"""Hit ratios of demand-paged caches for every capacity at once (stack-distance methods).

A request sequence is a 1-D int array of dense item ids (0..D-1), one entry per request. The
*stack distance* of a request is the smallest cache capacity (in slots) at which it hits; both LRU
and Belady's MIN are stack algorithms (Mattson et al. 1970), so one pass over the trace gives the
hit count of every capacity: hits(C) = #{requests with distance <= C}.

- LRU: distance = 1 + distinct items since the previous request of the same item.
- MIN (demand paging without bypass, as libCacheSim computes Belady): the OPT priority stack,
  where priority is the time of next use.

The priority stack (MIN and LFU) runs compiled by numba (`stackjit.py`) when numba imports, and as
the numpy loop below otherwise or when $MOETOOLS_NO_JIT is set; both give the same distances.

The `*_replay` functions are the obvious per-capacity simulations, kept as references for tests
and the benchmark.
"""

import heapq
import os
from collections import OrderedDict

import numpy as np

COLD = np.iinfo(np.int64).max  # distance of a first request: a miss at every capacity
_FEW_RECORDS = 8  # below this many records a priority-stack move is cheaper as scalar writes


def dense_ids(values):
    """(ids int64 (n,), distinct count): `values` renumbered 0..D-1 in order of first appearance."""
    values = np.asarray(values)
    if values.size == 0:
        return np.zeros(0, dtype=np.int64), 0
    uniq, first, inverse = np.unique(values, return_index=True, return_inverse=True)
    rank = np.empty(len(uniq), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(uniq))
    return rank[inverse.reshape(-1)], len(uniq)


def previous_use(seq):
    """prev[t] = index of the previous request of seq[t], or -1. int64 (n,)."""
    seq = np.asarray(seq)
    prev = np.empty(len(seq), dtype=np.int64)
    if len(seq) == 0:
        return prev
    narrow = _narrow(seq)
    order = np.argsort(narrow, kind="stable")
    ordered = narrow[order]
    # arithmetic rather than np.where / boolean masks: these are the slow numpy calls here
    before = order[:-1] + 1
    before *= ordered[1:] == ordered[:-1]
    before -= 1
    prev[order[0]] = -1
    prev[order[1:]] = before
    return prev


def _narrow(seq):
    """`seq` (non-negative ids) in the narrowest unsigned dtype: a stable argsort of 16-bit keys is
    a radix sort, several times faster than the merge sort numpy uses for wider ones."""
    if len(seq) == 0 or not np.issubdtype(seq.dtype, np.integer) or seq.min() < 0:
        return seq
    top = int(seq.max())
    for dtype in (np.uint8, np.uint16, np.uint32):
        if top <= np.iinfo(dtype).max:
            return seq.astype(dtype)
    return seq


def next_use(seq):
    """nxt[t] = index of the next request of seq[t], or n + seq[t] when there is none (unique, > n-1)."""
    seq = np.asarray(seq)
    n = len(seq)
    order = np.argsort(seq, kind="stable")
    nxt = n + seq.astype(np.int64)
    same = seq[order[1:]] == seq[order[:-1]]
    nxt[order[:-1][same]] = order[1:][same]
    return nxt


def _earlier_greater(values, bits):
    """out[i] = #{j < i in the same aligned block of 2**bits : values[j] > values[i]}. int32 (n,).

    `values`: int64 (n,), >= -1; ties never count. Each block is sorted by value once (one row
    sort), then the requests, in that order, are split by the bits of their position in the block
    from the top down, as an MSD radix sort does: at each level every group of equal higher
    position bits is stably split into its earlier half then its later half, and a later-half
    request gains the number of earlier-half requests after it in value order (larger values,
    earlier position). A pair is counted exactly once, at the highest bit where their positions
    differ. Groups are aligned and exactly half full on each side (the positions of a block are
    a permutation), so a level is a few whole-array numpy passes with no per-group work, and the
    last level leaves every request at its own position: O(n * bits), no scatter."""
    size = 1 << bits
    n = len(values)
    padded = -(-n // size) * size
    # (value + 1, position in block) packed in one int64; padding sorts last, after every request
    packed = np.empty(padded, dtype=np.int64)
    np.add(values, 1, out=packed[:n])
    packed[n:] = n + 1
    packed <<= bits
    packed.reshape(-1, size)[...] |= np.arange(size, dtype=np.int64)
    packed.reshape(-1, size).sort(axis=1)
    # one int32 per request: position in block << 16 | count so far; one move carries both
    cur = packed.astype(np.int32)
    cur &= size - 1
    cur <<= 16
    out = np.empty_like(cur)
    for level in range(bits - 1, -1, -1):
        half = 1 << level
        later = (cur & (1 << (16 + level))).astype(bool)
        later_at = np.flatnonzero(later)
        # the k-th later-half request of a group, at offset q in it, has q - k earlier-half
        # requests before it, so half - (q - k) after it
        moved = cur[later_at].reshape(-1, half)
        offset = later_at.astype(np.int32).reshape(-1, half)  # mixed-dtype arithmetic is slower
        offset &= 2 * half - 1
        moved -= offset
        moved += np.arange(half, 2 * half, dtype=np.int32)
        split = out.reshape(-1, 2, half)
        split[:, 1, :] = moved
        split[:, 0, :] = np.compress(~later, cur).reshape(-1, half)  # 5x faster than cur[~later]
        cur, out = out, cur
    cur &= 0xFFFF
    return cur[:n]


# Blocks of 2**bits requests: `bits` split levels per request, and the live set (one entry per
# distinct item) is rebuilt once per block, so blocks grow with the distinct count: about as many
# requests as distinct items, at least 8,192, at most 32,768 (positions << 16 must fit an int32).
_MIN_BLOCK_BITS = 13
_MAX_BLOCK_BITS = 15


def lru_stack_distances(seq):
    """LRU stack distance of every request (1 = hits in a 1-slot cache; COLD for first requests).

    `seq`: dense ids int (n,). With p = prev[t] the previous request of the same item, the distance is 1 + the
    distinct items requested in (p, t). Each of them is requested there first at some j with
    prev[j] < p and every other j in (p, t) has prev[j] > p (prev[j] = p only at t), and no
    j <= p has prev[j] > p, so distance = (t - p) - #{j < t : prev[j] > p}. The trace is cut
    into aligned blocks; for t in the block starting at s the count splits into j >= s, counted
    inside blocks for every request at once (`_earlier_greater`), and j < s, which (for p < s)
    is (s - 1 - p) - #{last-use times as of s that are > p}, read off the sorted live last-use
    times kept from block to block. Together:
        distance = t - max(p, s - 1) + (live times after p, as of s) - #{s <= j < t : prev[j] > p}.
    Cost O(n * bits) whole-array numpy work plus O(D) per block of 2**bits requests."""
    seq = np.asarray(seq, dtype=np.int64)
    n = len(seq)
    if n == 0:
        return np.full(0, COLD, dtype=np.int64)
    prev = previous_use(seq)
    distinct = n - int(np.count_nonzero(prev >= 0))
    bits = min(max(_MIN_BLOCK_BITS, distinct.bit_length()), _MAX_BLOCK_BITS)
    bits = min(bits, max(1, (n - 1).bit_length()))  # a short trace is one block
    size = 1 << bits
    distance = np.arange(n, dtype=np.int64)
    block_start = distance & ~(size - 1)
    inside = prev >= block_start  # previous use in the same block
    distance -= np.maximum(prev, block_start - 1)
    del block_start
    distance -= _earlier_greater(prev, bits)
    last_in_block = np.ones(n, dtype=bool)  # no later request of the item in the same block
    last_in_block[np.compress(inside, prev)] = False
    fresh = np.flatnonzero(last_in_block)  # the live times each block adds
    cross = np.flatnonzero((prev >= 0) & ~inside)  # previous use before the block: live as of s
    cross_prev = prev[cross]
    bounds = np.arange(0, n + size, size)
    cross_at = np.searchsorted(cross, bounds).tolist()
    fresh_at = np.searchsorted(fresh, bounds).tolist()
    after = np.empty(len(cross), dtype=np.int64)
    live = np.zeros(0, dtype=np.int64)  # sorted last-use times of every item seen before the block
    rank = np.zeros(n, dtype=np.int64)  # rank[time] = index of `time` in `live` (for live times)
    count = np.arange(distinct, dtype=np.int64)
    for k in range(len(bounds) - 1):
        lo, hi = cross_at[k], cross_at[k + 1]
        index = rank[cross_prev[lo:hi]]
        after[lo:hi] = len(live) - 1 - index  # live times after p
        keep = np.ones(len(live), dtype=bool)
        keep[index] = False  # these items' last use moves into this block
        live = np.concatenate((np.compress(keep, live), fresh[fresh_at[k] : fresh_at[k + 1]]))
        rank[live] = count[: len(live)]
    distance[cross] += after
    np.putmask(distance, prev < 0, COLD)
    return distance


NO_JIT_ENV = "MOETOOLS_NO_JIT"
_compiled = {}  # "module": the stackjit module, or None when numba is missing or switched off


def compiled_stack():
    """The numba-compiled priority stack module, or None (numba not importable, or $MOETOOLS_NO_JIT
    set to anything but "" or "0"). Looked up once per process."""
    if "module" not in _compiled:
        module = None
        if os.environ.get(NO_JIT_ENV, "") in ("", "0"):
            try:
                from moetools.tracetail import stackjit as module
            except Exception:  # numba absent, unusable with this numpy, or no cache folder it can
                module = None  # use: the numpy loop serves, with the same results
        _compiled["module"] = module
    return _compiled["module"]


def stack_engine():
    """'numba' or 'numpy': which priority stack `priority_stack_distances` runs."""
    return "numpy" if compiled_stack() is None else "numba"


def priority_stack_distances(seq, evict_key, tick=None):
    """Stack distances of a demand-paged priority policy (Mattson's priority stack, one pass).

    `seq`: dense ids int (n,). `evict_key[t]`: the rank of seq[t]'s item right after request t,
    larger = evicted sooner; keys must be distinct and an item's key may change only when it is
    requested (true for MIN, keyed by next use, and for perfect LFU, keyed by (count, last use)).
    Returns int64 (n,): 1 = hits in a 1-slot cache, COLD for first requests.

    On a request at depth k the item goes to the top and the items above k move down along the
    chain of prefix maxima ("records") of the key: each record takes the place of the next
    record, the last takes depth k. O(k) per request, run by the compiled engine when there is
    one (`stack_engine()`), else by the numpy loop. `tick(n)`, if given, is called as requests
    are done (progress)."""
    seq = np.ascontiguousarray(seq, dtype=np.int64)
    n = len(seq)
    if n == 0:
        return np.full(0, COLD, dtype=np.int64)
    n_items = int(seq.max()) + 1
    rank = np.empty(n, dtype=np.int64)
    rank[np.argsort(np.asarray(evict_key), kind="stable")] = np.arange(n)
    compiled = compiled_stack()
    if compiled is not None:
        return compiled.priority_stack_distances(seq, rank, n_items, COLD, tick)
    return _numpy_priority_stack(seq, rank, n_items, tick)


def _numpy_priority_stack(seq, rank, n_items, tick):
    """The priority stack as a Python loop of numpy calls (the engine without numba).

    Few numpy calls per request: key ranks are packed with the item id into one int64 per stack
    slot (rank << shift | item), so one array moves both; the last record is the argmax of the
    slots above k (a vectorised scan, several times cheaper than a prefix-maximum pass); when it
    is the top slot (the top is the only record, about 4 requests in 10 on decode traces) the
    move is two scalar writes, otherwise the records above it come from one prefix-maximum pass
    over that shorter prefix, moved by scalar writes when there are few and by fancy indexing
    when there are many. Ticks every 65,536 requests."""
    n = len(seq)
    shift = max(1, (n_items - 1).bit_length())
    if shift + max(1, (n - 1).bit_length()) > 62:
        raise ValueError(f"trace too large to pack: {n} requests x {n_items} items")
    mask = (1 << shift) - 1
    packed = ((rank << shift) | seq).tolist()
    slot = np.zeros(n_items, dtype=np.int64)  # packed (key rank, item) at each stack depth
    pos = np.full(n_items, -1, dtype=np.int64)  # depth of each item, -1 = never seen
    dist = [COLD] * n
    # preallocated scratch: numpy call overhead, not arithmetic, is the cost at these sizes
    acc = np.zeros(n_items, dtype=np.int64)
    flag = np.zeros(n_items, dtype=bool)
    chain = np.zeros(n_items + 2, dtype=np.int64)  # 0, record depths, last record, k
    items = np.zeros(n_items + 2, dtype=np.int64)
    maximum = np.maximum.accumulate
    differ = np.not_equal
    bit_and = np.bitwise_and
    size = 0
    top = top_item = 0  # packed value and item at depth 0 (slot[0], kept as Python ints)
    for t, (x, packed_x) in enumerate(zip(seq.tolist(), packed)):
        if tick is not None and t & 0xFFFF == 0xFFFF:
            tick(0x10000)
        k = pos.item(x)
        if k < 0:
            k = size
            size += 1
        else:
            dist[t] = k + 1
        if k > 1:
            last = slot[:k].argmax()  # the deepest record above k
            if last == 0:
                slot[k] = top
                pos[top_item] = k
            else:
                m = 0
                if last > 1:
                    run = maximum(slot[:last], out=acc[:last])
                    differ(run[1:], run[:-1], out=flag[: last - 1])
                    rec = flag[: last - 1].nonzero()[0]  # record depths - 1, between 0 and last
                    m = len(rec)
                if m < _FEW_RECORDS:
                    carry, carry_item = top, top_item
                    for d in (rec + 1).tolist() + [last] if m else (last,):
                        here = slot.item(d)
                        slot[d] = carry
                        pos[carry_item] = d
                        carry, carry_item = here, here & mask
                    slot[k] = carry
                    pos[carry_item] = k
                else:
                    chain[1 : m + 1] = rec
                    chain[1 : m + 1] += 1
                    chain[m + 1] = last
                    chain[m + 2] = k
                    dst = chain[1 : m + 3]
                    moved = slot[chain[: m + 2]]
                    slot[dst] = moved
                    pos[bit_and(moved, mask, out=items[: m + 2])] = dst
        elif k == 1:
            slot[1] = top
            pos[top_item] = 1
        slot[0] = top = packed_x
        pos[x] = 0
        top_item = x
    return np.asarray(dist, dtype=np.int64)


def opt_stack_distances(seq, tick=None):
    """MIN/OPT stack distances (demand paging without bypass; COLD for a first request): the
    priority stack keyed by next use. Items never used again get distinct keys past the end;
    their order cannot change a hit count."""
    return priority_stack_distances(seq, next_use(seq), tick)


def lfu_evict_keys(seq):
    """Perfect-LFU evict keys: fewer requests so far first, then least recently used."""
    seq = np.asarray(seq, dtype=np.int64)
    n = len(seq)
    order = np.argsort(seq, kind="stable")
    sorted_items = seq[order]
    group_start = np.concatenate([[0], np.flatnonzero(sorted_items[1:] != sorted_items[:-1]) + 1])
    count = np.ones(n, dtype=np.int64)
    run = np.arange(n) - np.repeat(group_start, np.diff(np.append(group_start, n)))
    count[order] = run + 1
    return -(count * (n + 1) + np.arange(n))


def lfu_stack_distances(seq, tick=None):
    """Perfect-LFU stack distances (counts survive eviction; ties: least recently used)."""
    return priority_stack_distances(seq, lfu_evict_keys(seq), tick)


def hits_at(distances, capacities):
    """Hit counts (int64, one per capacity) from stack distances: #{distance <= C}."""
    ordered = np.sort(np.asarray(distances))
    return np.searchsorted(ordered, np.asarray(capacities, dtype=np.int64), side="right").astype(np.int64)


# --- references: one straightforward simulation per capacity ---------------------------------


def lru_replay(seq, capacity):
    """Hits of a `capacity`-slot LRU cache over `seq` (OrderedDict simulation)."""
    cache = OrderedDict()
    hits = 0
    for x in np.asarray(seq).tolist():
        if x in cache:
            hits += 1
            cache.move_to_end(x)
        else:
            cache[x] = None
            if len(cache) > capacity:
                cache.popitem(last=False)
    return hits


def lfu_replay(seq, capacity):
    """Hits of a `capacity`-slot perfect-LFU cache (least requests evicted, ties least recent)."""
    count = {}
    cached = {}
    heap = []
    hits = 0
    for t, x in enumerate(np.asarray(seq).tolist()):
        c = count.get(x, 0) + 1
        count[x] = c
        if x in cached:
            hits += 1
        elif len(cached) >= capacity:
            while True:
                c_old, t_old, y = heapq.heappop(heap)
                if cached.get(y) == t_old:
                    del cached[y]
                    break
        cached[x] = t
        heapq.heappush(heap, (c, t, x))
    return hits


def belady_replay(seq, capacity):
    """Hits of Belady's MIN with `capacity` slots: every miss admitted, farthest next use evicted."""
    nxt = next_use(seq).tolist()
    cache = {}
    heap = []
    hits = 0
    for t, x in enumerate(np.asarray(seq).tolist()):
        if x in cache:
            hits += 1
        elif len(cache) >= capacity:
            while True:
                far, y = heapq.heappop(heap)
                if cache.get(y) == -far:
                    del cache[y]
                    break
        cache[x] = nxt[t]
        heapq.heappush(heap, (-nxt[t], x))
    return hits
