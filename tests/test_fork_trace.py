"""Trace reading held to the daemon's segmenter and the fork's key hashing:
CambrianTech/continuum core/expert-pager-policy/src/segment.rs (`TokenSegmenter::push`,
`TkeyTable::from_json`), core/continuum-core/src/capacity/trace_tail.rs (`MoeTraceTail::drain`:
empty tokens skipped, the open token never counted, `TkeyTable::for_layers(n_layers)` over the
model's blocks) and CambrianTech/llama.cpp ggml/src/ggml-moe-residency.hpp (`canonical_name_key`)."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from moetools.cli import cli
from moetools.errors import InputError
from moetools.formats import trace as trace_format
from moetools.tracetail.reader import LayerMap, Tokeniser, split_ids
from tests import factory, fork_rules


def invoke(*args):
    return CliRunner().invoke(cli, ["trace-tail", *map(str, args)], catch_exceptions=False)


@pytest.mark.parametrize("name", ["blk.5.ffn_up_exps.weight", "CUDA0#blk.5.ffn_up_exps.weight#0", "x#blk.5.ffn_up_exps.weight",
                                  "a#b#c#d", "#", "a##", "CUDA0#blk.5.ffn_up_exps.weight#0#1"])
def test_hash_of_decorated_names_is_the_forks(name):
    assert trace_format.fnv1a64(name) == fork_rules.fnv1a(name)
    if "blk.5" in name and name.count("#") <= 2:
        assert trace_format.fnv1a64(name) == 16542725649459479844


def moetools_tokens(records, layer_map):
    tok = Tokeniser(layer_map)
    tkeys = np.array([r[0] for r in records], dtype=np.uint64)
    experts = np.array([r[1] for r in records], dtype=np.uint32)
    data = trace_format.encode_records(tkeys, experts)
    out = []
    for cut in range(0, len(data), 84):  # fed in pieces, as a follower reads
        out += tok.feed(data[cut:cut + 84])
    return [set(zip(*(a.tolist() for a in split_ids(ids)))) for ids in out]


def test_unknown_keys_move_the_token_boundary_as_in_the_daemon():
    layer_map = LayerMap.synth(2)
    gate0, gate1 = trace_format.fnv1a64("blk.0.ffn_gate_exps.weight"), trace_format.fnv1a64("blk.1.ffn_gate_exps.weight")
    unknown = 12345
    records = [(gate0, 1), (unknown, 0), (gate1, 2), (unknown, 0), (gate1, 3), (unknown, 0), (unknown, 0), (gate0, 4), (gate0, 5)]
    layer_of = {key: layer for key, (layer, basis) in layer_map.table.items() if basis == "fork"}
    expected = fork_rules.segment(records, layer_of)
    # the unknown key's returns closed two tokens; the last one ({(0, 4), (0, 5)}) is still open
    assert expected == [{(0, 1), (1, 2)}, {(1, 3)}]
    assert moetools_tokens(records, layer_map) == expected


def test_random_traces_segment_exactly_as_the_daemon():
    rng = np.random.default_rng(7)
    layer_map = LayerMap.synth(3)
    keys = [trace_format.fnv1a64(name) for name in trace_format.synth_tensor_names(3)] + [11, 22]
    layer_of = {key: layer for key, (layer, basis) in layer_map.table.items() if basis == "fork"}
    for _ in range(20):
        records = [(keys[i], int(e)) for i, e in zip(rng.integers(0, len(keys), 300), rng.integers(0, 8, 300))]
        assert moetools_tokens(records, layer_map) == fork_rules.segment(records, layer_of)


def test_synth_layers_is_the_block_count_of_a_model_with_a_dense_first_block(tiny_models, tmp_path):
    """deepseek2's block 0 is dense: its experts are blocks 1..N-1, and --synth-layers N (the block
    count) reads its trace exactly as --model does."""
    model = tiny_models["deepseek2"]
    from_model = LayerMap.from_model(model)
    assert min(layer for layer, _ in from_model.table.values()) == 1
    blocks = from_model.block_count
    rng = np.random.default_rng(3)
    tokens = [np.unique(((np.arange(1, blocks, dtype=np.int64) << 32)[:, None] | rng.choice(16, (blocks - 1, 2))).ravel())
              for _ in range(6)]
    from moetools.tracetail.importers import tokens_to_records

    path = tmp_path / "ds.trace"
    path.write_bytes(trace_format.encode_records(*tokens_to_records(tokens, ["decode"] * 6)))
    by_model = json.loads(invoke(path, "--model", model, "--budget-slots", 8, "--json").stdout)
    by_synth = json.loads(invoke(path, "--synth-layers", blocks, "--experts", 16, "--budget-slots", 8, "--json").stdout)
    assert by_model["hit"] == by_synth["hit"] and by_model["tokens"] == by_synth["tokens"] == 6
    result = invoke(path, "--synth-layers", blocks - 1, "--budget-slots", 8)
    assert result.exit_code == 2 and f"keys of block {blocks - 1} appear" in result.stderr
    assert f"give at least {blocks}" in result.stderr


def test_write_table_is_what_tkey_table_from_json_loads(tiny_models, tmp_path):
    table = tmp_path / "tkey-to-layer-matrix.json"
    trace = tmp_path / "t.trace"
    trace.write_bytes(trace_format.encode_records(np.array([trace_format.fnv1a64("blk.0.ffn_up_exps.weight")] * 2, dtype=np.uint64),
                                                  np.array([1, 2], dtype=np.uint32)))
    result = invoke(trace, "--synth-layers", 6, "--write-table", table, "--json")
    assert result.exit_code == 0, result.output
    loaded = fork_rules.parse_tkey_table(table.read_text())
    assert loaded[16542725649459479844] == 5 and len(loaded) == 18
    assert json.loads(table.read_text())["16542725649459479844"] == {"layer": 5, "matrix": "up"}
    invoke(trace, "--model", tiny_models["qwen3moe"], "--write-table", table, "--json")
    layer_map = LayerMap.from_model(tiny_models["qwen3moe"])
    assert fork_rules.parse_tkey_table(table.read_text()) == {k: l for k, (l, b) in layer_map.table.items() if b == "fork"}


CSV = """# route_trace v1
# model=/x/{arch}.gguf arch={arch} n_layer={n_layer} n_expert={n_expert} n_expert_used=2
turn,phase,step,layer,slot,expert,weight,residency,expert_bytes
0,1,5,0,0,1,0.5,0,100
0,1,5,1,0,2,0.5,0,100
0,1,6,0,0,1,0.5,0,100
"""


@pytest.mark.parametrize("arch,n_layer,n_expert,words", [
    ("gpt-oss", None, None, "its architecture is gpt-oss"),
    ("qwen3moe", 48, None, "its blocks (n_layer) is 48"),
    ("qwen3moe", None, 128, "its experts per layer (n_expert) is 128"),
])
def test_csv_trace_of_another_model_is_exit_2(tiny_models, tmp_path, arch, n_layer, n_expert, words):
    model = tiny_models["qwen3moe"]
    layer_map = LayerMap.from_model(model)
    path = tmp_path / "t.csv"
    path.write_text(CSV.format(arch=arch, n_layer=n_layer or layer_map.block_count, n_expert=n_expert or layer_map.n_expert))
    result = invoke(path, "--model", model)
    assert result.exit_code == 2 and words in result.stderr and "another model" in result.stderr
    path.write_text(CSV.format(arch="qwen3moe", n_layer=layer_map.block_count, n_expert=layer_map.n_expert))
    assert invoke(path, "--model", model, "--json").exit_code == 0


def test_the_real_qwen_trace_against_a_smaller_qwen_model_is_exit_2(tiny_models):
    path = factory.SHARED_TRACES / "qwen.route.csv"
    if not path.exists():
        pytest.skip(f"real routing traces not present in {factory.SHARED_TRACES}")
    result = invoke(path, "--model", tiny_models["qwen3moe"])
    assert result.exit_code == 2 and "another model" in result.stderr
