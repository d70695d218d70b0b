"""One-pass LRU stack distances against an explicit LRU stack, request by request."""

import numpy as np
import pytest

from moetools.tracetail import curves


def _lru_stack_reference(seq):
    """Distance of each request in an explicit most-recent-first list (COLD for first requests)."""
    stack = []
    out = []
    for x in np.asarray(seq).tolist():
        if x in stack:
            depth = stack.index(x)
            out.append(depth + 1)
            del stack[depth]
        else:
            out.append(curves.COLD)
        stack.insert(0, x)
    return out


def _earlier_greater_reference(values, bits):
    size = 1 << bits
    values = np.asarray(values).tolist()
    return [sum(values[j] > v for j in range(i - i % size, i)) for i, v in enumerate(values)]


@pytest.mark.parametrize("bits", [1, 2, 3, 5])
def test_earlier_greater_matches_brute_force(bits):
    rng = np.random.default_rng(bits)
    for _ in range(40):
        n = int(rng.integers(1, 80))
        values = rng.integers(-1, 40, n)  # ties (many -1s and repeats) never count
        assert curves._earlier_greater(values, bits).tolist() == _earlier_greater_reference(values, bits)


@pytest.mark.parametrize("bits", [1, 2, 3, 4, 13])
def test_lru_distances_match_an_explicit_stack_across_blocks(monkeypatch, bits):
    # small blocks put reuses inside one block, across neighbours and across many blocks
    monkeypatch.setattr(curves, "_MIN_BLOCK_BITS", bits)
    monkeypatch.setattr(curves, "_MAX_BLOCK_BITS", bits)
    rng = np.random.default_rng(100 + bits)
    for _ in range(30):
        n, d = int(rng.integers(1, 160)), int(rng.integers(1, 25))
        ids, _ = curves.dense_ids(rng.integers(0, d, n))
        assert curves.lru_stack_distances(ids).tolist() == _lru_stack_reference(ids)


def test_lru_distances_on_a_skewed_trace_over_several_default_blocks():
    # > 3 blocks of 8,192 requests at the default size; Zipf-skewed, so short and very long reuses
    rng = np.random.default_rng(9)
    ids, distinct = curves.dense_ids((rng.zipf(1.2, 30_000) - 1) % 400)
    assert len(ids) > 3 * (1 << curves._MIN_BLOCK_BITS)
    dist = curves.lru_stack_distances(ids)
    assert dist.tolist() == _lru_stack_reference(ids)
    caps = [1, 7, 50, 200, distinct]
    assert curves.hits_at(dist, caps).tolist() == [curves.lru_replay(ids, c) for c in caps]


def test_lru_distances_edge_cases():
    assert curves.lru_stack_distances(np.zeros(0, dtype=np.int64)).tolist() == []
    assert curves.lru_stack_distances([0]).tolist() == [curves.COLD]
    assert curves.lru_stack_distances([0, 0, 0]).tolist() == [curves.COLD, 1, 1]
    assert curves.lru_stack_distances([0, 1, 2, 0, 1, 2]).tolist() == [curves.COLD] * 3 + [3, 3, 3]


def test_previous_use_with_wide_and_narrow_ids():
    rng = np.random.default_rng(4)
    for top in (3, 300, 70_000, 5_000_000_000):
        seq = rng.integers(0, top, 500)
        expected = []
        last = {}
        for t, x in enumerate(seq.tolist()):
            expected.append(last.get(x, -1))
            last[x] = t
        assert curves.previous_use(seq).tolist() == expected
