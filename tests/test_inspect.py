"""`moetools inspect` through the CLI, checked against gguf's reader and hand-computed figures."""

import io
import json

import gguf
from click.testing import CliRunner

from moetools.cli import cli
from moetools.inspect_cmd import describe, layer_runs, tables
from moetools.gguf import open_model
from moetools.output import print_tables


def run_json(*args):
    result = CliRunner().invoke(cli, ["inspect", *map(str, args), "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_json_has_the_promised_keys_and_values(tiny_models):
    doc = run_json(tiny_models["deepseek2"])
    reader = gguf.GGUFReader(tiny_models["deepseek2"])
    assert doc["architecture"] == "deepseek2"
    assert doc["tensor_count"] == len(reader.tensors)
    assert doc["shards"] == [str(tiny_models["deepseek2"])]
    assert (doc["block_count"], doc["expert_count"], doc["expert_used_count"]) == (4, 16, 4)
    assert doc["experts_per_token"] == 4 * 3  # top-4 over three MoE layers (one leading dense block)
    expert = sum(int(t.n_bytes) for t in reader.tensors if "_exps." in t.name)
    total = sum(int(t.n_bytes) for t in reader.tensors)
    assert (doc["expert_bytes"], doc["total_bytes"], doc["resident_bytes"]) == (expert, total, total - expert)
    per_layer = {entry["layer"]: entry["bytes"] for entry in doc["expert_bytes_per_layer"]}
    assert per_layer == {il: 3 * 256 * 128 // 32 * 34 for il in (1, 2, 3)}  # gate+up+down of one Q8_0 expert
    assert sum(entry["count"] for entry in doc["types"]) == len(reader.tensors)
    assert "tensors" not in doc


def test_tensors_listing_matches_gguf_reader(tiny_models):
    path = tiny_models["gpt-oss"]
    doc = run_json(path, "--tensors")
    reader = gguf.GGUFReader(path)
    expected = [
        {"name": t.name, "type": t.tensor_type.name.replace("_K", "_k").lower().replace("_k", "_K"),
         "shape": [int(d) for d in t.shape], "bytes": int(t.n_bytes), "shard": 0, "offset": int(t.data_offset)}
        for t in reader.tensors
    ]
    ours = [{key: t[key] for key in ("name", "type", "shape", "bytes", "shard", "offset")} for t in doc["tensors"]]
    assert ours == expected
    classes = {t["name"]: t["class"] for t in doc["tensors"]}
    assert classes["blk.0.ffn_down_exps.bias"] == "expert" and classes["blk.0.ffn_gate_inp.bias"] == "resident"


def test_split_model_lists_every_shard(tmp_path):
    from tests import factory

    first = factory.write_tiny(tmp_path, "qwen3moe", shards=4)
    doc = run_json(tmp_path / "qwen3moe-00004-of-00004.gguf")
    assert doc["shards"] == [str(tmp_path / f"qwen3moe-{k:05d}-of-00004.gguf") for k in range(1, 5)]
    assert doc["shards"][0] == str(first)


def test_dense_model_has_zero_experts(tiny_models):
    doc = run_json(tiny_models["dense"])
    assert (doc["expert_count"], doc["expert_used_count"], doc["expert_bytes"], doc["experts_per_token"]) == (0, 0, 0, 0)
    assert doc["expert_bytes_per_layer"] == [] and doc["resident_bytes"] == doc["total_bytes"]


def test_kimi_k3_per_layer_head_arrays(tiny_models):
    doc = run_json(tiny_models["kimi-k3"])
    assert doc["head_count_kv"] == [0, 0, 0, 1, 0, 0, 0, 1]  # KDA layers 0, MLA every 4th
    assert doc["head_count"] == 4 and doc["expert_latent_length"] == 128


def test_table_view_renders_every_section(tiny_models):
    with open_model(tiny_models["deepseek2"]) as model:
        doc = describe(model, with_tensors=True)
    stream = io.StringIO()
    print_tables(tables(doc), stream=stream)
    text = stream.getvalue()
    for title in ("Model", "Bytes by class", "Bytes of one expert, per layer", "Tensor types", "Shards", "Tensors"):
        assert title in text
    assert "16 routed, top-4, 1 shared" in text and "1-3" in text


def test_layer_runs_groups_equal_neighbours():
    assert layer_runs({1: 5, 2: 5, 3: 7, 5: 7}) == [(1, 2, 5), (3, 3, 7), (5, 5, 7)]


def test_llama_cpp_files_inspect(shared_models):
    for path in shared_models:
        doc = run_json(path)
        assert doc["expert_count"] in (8, 16) and doc["block_count"] == 4
        assert doc["resident_bytes"] + doc["expert_bytes"] == doc["total_bytes"]


def test_per_layer_cells():
    from moetools.inspect_cmd import describe_per_layer

    assert describe_per_layer(8) == "8"
    assert describe_per_layer([0, 0, 1, 0]) == "0 on 3 layers, 1 on 1 layers"
