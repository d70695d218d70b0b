"""trace-tail's compiled kernels (numba): Mattson's priority stack (the one-pass MIN and LFU curves),
the demand-cache replay, the bandit's token loop, the predictor's feature pass and the per-token
instruments (the last four are plain loops of kernels/, compiled here).

Every request reorders the stack above it and the next request reads that order; no exact form
that batches a token's requests into whole-array numpy calls was found, so in numpy each request
costs a few array calls (about 6 us on a decode trace, 170k requests/s); compiled, the same walk
costs about half a microsecond. Imported lazily (numba's own import takes a few hundred ms) through
`curves.compiled_stack`, on trace-tail's path only; the machine code is cached beside this file (or in
numba's user cache when that is read-only), so the compile (about a second) happens once per
install.
"""

import types

import numba
import numpy as np

from moetools.jitcache import best_effort, make_cache_writes_best_effort


@numba.njit(cache=True, nogil=True)
def priority_stack_run(seq, rank, start, stop, stack_key, stack_item, depth_of, size, dist, cold):
    """Requests start..stop-1 on the stack; returns the new stack size.

    `stack_key[d]`, `stack_item[d]`: the key rank and item at depth d (0 = top); `depth_of[item]`:
    its depth, -1 = never seen. A request at depth k puts its item on top; walking down from the
    top, a carried entry swaps with every deeper entry whose key is larger (evicted sooner), and
    the last carried entry takes depth k. `dist[t]` = k + 1, or `cold` for a first request."""
    for t in range(start, stop):
        item = seq[t]
        k = depth_of[item]
        if k < 0:
            k = size
            size += 1
            dist[t] = cold
        else:
            dist[t] = k + 1
        if k > 0:
            carry_key = stack_key[0]
            carry_item = stack_item[0]
            for d in range(1, k):
                if stack_key[d] > carry_key:
                    next_key = stack_key[d]
                    next_item = stack_item[d]
                    stack_key[d] = carry_key
                    stack_item[d] = carry_item
                    depth_of[carry_item] = d
                    carry_key = next_key
                    carry_item = next_item
            stack_key[k] = carry_key
            stack_item[k] = carry_item
            depth_of[carry_item] = k
        stack_key[0] = rank[t]
        stack_item[0] = item
        depth_of[item] = 0
    return size


def priority_stack_distances(seq, rank, n_items, cold, tick=None, chunk=1 << 18):
    """Stack distances of `seq` (dense int64 ids) under key ranks `rank` (int64, distinct), in
    chunks of `chunk` requests so that `tick(count)` can report progress between them."""
    n = len(seq)
    stack_key = np.zeros(n_items, dtype=np.int64)
    stack_item = np.zeros(n_items, dtype=np.int64)
    depth_of = np.full(n_items, -1, dtype=np.int64)
    dist = np.empty(n, dtype=np.int64)
    size = 0
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        size = priority_stack_run(seq, rank, start, stop, stack_key, stack_item, depth_of, size, dist, cold)
        if tick is not None:
            tick(stop - start)
    return dist


# The demand-cache replay, the bandit loop and the predictor's feature pass: the plain loops of
# kernels/demand.py, compiled (the same source is the numpy-path engine when numba is absent).
import moetools.tracetail.kernels.demand as _kernels  # noqa: E402


def _calling(function, **compiled):
    """`function` (same code) with the names `compiled` bound to compiled kernels: numba can call
    a compiled function, not a plain one, and the interpreter keeps calling the plain ones."""
    return types.FunctionType(function.__code__, {**function.__globals__, **compiled}, function.__name__,
                              function.__defaults__, function.__closure__)


_njit = numba.njit(cache=True, nogil=True, error_model="numpy")


def _jit(function):
    """`function` compiled, its cache written best effort (moetools.jitcache: a full drive does not fail the run)."""
    return best_effort(_njit(function))


replay = _jit(_kernels.replay)
predict = _jit(_kernels.predict)
best_arm = _jit(_kernels.best_arm)
bandit = _jit(_calling(_kernels.bandit, replay=replay, best_arm=best_arm))

import moetools.tracetail.kernels.instruments as _instruments  # noqa: E402

instruments_step = _jit(_calling(_instruments.instruments_step, _row_rank=_jit(_instruments._row_rank)))

import moetools.tracetail.kernels.policies as _policies  # noqa: E402

_before = _jit(_policies._before)
topk_step = _jit(_calling(_policies.topk_step, best_arm=best_arm, _count_below=_jit(_policies._count_below),
                          _resort_arm=_jit(_calling(_policies._resort_arm, _before=_before))))

import moetools.tracetail.kernels.tokens as _tokens  # noqa: E402

token_cuts = _jit(_tokens.token_cuts)

make_cache_writes_best_effort(globals())  # priority_stack_run and anything decorated directly
