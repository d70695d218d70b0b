"""A quick mutation fuzz of the header reader (the long run is benchmarks/fuzz_reader.py)."""

import tracemalloc

import pytest

from moetools.errors import GGUFError
from moetools.gguf.fuzz import fuzz_file, mutate
from moetools.gguf.header import read_header


@pytest.mark.parametrize("arch", ["qwen3moe", "kimi-k3", "gpt-oss"])
def test_mutated_headers_fail_cleanly(tiny_models, tmp_path, arch):
    parsed, errors = fuzz_file(tiny_models[arch], tmp_path / "mutant.gguf", iterations=300, seed=len(arch))
    assert parsed + errors == 300
    assert errors > 50  # the mutations do reach the checks


def test_no_allocation_bigger_than_the_file(tiny_models, tmp_path):
    import random

    source = tiny_models["deepseek2"]
    header = read_header(source)
    header_bytes = source.read_bytes()[: header.data_offset]
    rng = random.Random(7)
    work = tmp_path / "mutant.gguf"
    tracemalloc.start()
    try:
        for _ in range(100):
            mutant, _ = mutate(header_bytes, rng)
            work.write_bytes(mutant)
            tracemalloc.reset_peak()
            try:
                read_header(work)
            except GGUFError:
                pass
            _, peak = tracemalloc.get_traced_memory()
            assert peak <= max(len(mutant), 1) * 16 + 1_000_000
    finally:
        tracemalloc.stop()
