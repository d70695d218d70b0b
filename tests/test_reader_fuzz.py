"""A quick mutation fuzz of the reader through inspect and device-fit (the long run, 10,000 mutants
with time and memory limits, is benchmarks/fuzz_reader.py)."""

import random
import tracemalloc

import pytest

from moetools.errors import GGUFError
from moetools.gguf.header import read_header
from tests.fuzzing import StructuredMutator, fuzz_file, header_fields, mutate


@pytest.mark.parametrize("arch", ["qwen3moe", "kimi-k3", "gpt-oss"])
def test_mutated_headers_fail_cleanly_in_inspect_and_device_fit(tiny_models, tmp_path, arch):
    outcome = fuzz_file(tiny_models[arch], tmp_path / "mutant.gguf", iterations=50, seed=len(arch))
    assert outcome.crashes == []
    assert outcome.runs == 100
    assert outcome.clean_errors > 15  # the mutations do reach the checks
    assert outcome.accepted > 0  # and some mutants are still models


def test_the_structured_mutator_knows_every_field_kind(tiny_models):
    source = tiny_models["kimi-k3"]
    header = read_header(source)
    kinds = {field.kind for field in header_fields(source.read_bytes()[: header.data_offset])}
    assert {"tensor_count", "kv_count", "key_length", "value_type", "string_length", "array_type", "array_length",
            "count_value", "name_length", "block_number", "n_dims", "dimension", "tensor_type", "data_offset"} <= kinds


def test_structured_mutants_reach_the_layout_and_block_checks(tiny_models, tmp_path):
    source = tiny_models["qwen3moe"]
    header = read_header(source)
    mutator = StructuredMutator(source.read_bytes()[: header.data_offset])
    rng = random.Random(3)
    problems = set()
    work = tmp_path / "m.gguf"
    for _ in range(300):
        mutant, _ = mutator.mutate(rng)
        with open(work, "wb") as handle:
            handle.write(mutant)
            handle.truncate(header.file_size)
        try:
            from moetools.gguf import open_model

            with open_model(work) as model:
                model.summary
        except GGUFError as err:
            problems.add(err.problem.split(" ")[0] + (" offset" if "expected" in err.problem else ""))
            if "block_count" in str(err):
                problems.add("block_count")
    assert "tensor offset" in problems and "block_count" in problems


def test_no_allocation_bigger_than_the_file(tiny_models, tmp_path):
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


def test_an_mla_attention_layer_without_its_kv_tensor_is_refused_by_device_fit(tiny_models, tmp_path):
    # Found by benchmarks/fuzz_reader.py: a block number mutated so that kimi-k3's layer 7 (an MLA
    # layer; the others are linear attention) lost attn_kv_a_mqa to layer 1 crashed the compute
    # model with KeyError 'full'. llama.cpp refuses it at load ("missing tensor").
    from click.testing import CliRunner

    from moetools.cli import cli

    data = bytearray(tiny_models["kimi-k3"].read_bytes())
    at = data.index(b"blk.7.attn_kv_a_mqa.weight")
    data[at + 4:at + 5] = b"1"
    mutant = tmp_path / "moved.gguf"
    mutant.write_bytes(bytes(data))
    result = CliRunner().invoke(cli, ["device-fit", str(mutant), "--vram", "24G", "--json"])
    assert result.exit_code == 2
    assert result.stderr.strip() == (f"error: {mutant}: tensor blk.7.attn_kv_a_mqa.weight is missing: layer 7 is an "
                                     "MLA attention layer (its KV cache is sized from kv_lora_rank)")
