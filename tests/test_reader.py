"""The shared reader against gguf's own reader, on factory files and llama.cpp-written files."""

import os

import gguf
import numpy as np
import pytest

from moetools.gguf import LazyArray, expert_tensor_kind, model_stem, open_model, read_header, split_name
from tests import factory


def reference(path):
    """gguf.GGUFReader's view: {name: (type id, ggml shape, bytes, absolute offset)} and scalar metadata."""
    reader = gguf.GGUFReader(path)
    tensors = {t.name: (int(t.tensor_type), tuple(int(d) for d in t.shape), int(t.n_bytes), int(t.data_offset))
               for t in reader.tensors}
    scalars, arrays = {}, {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        if field.types[0] == gguf.GGUFValueType.ARRAY:
            arrays[key] = len(field.data)
        else:
            scalars[key] = field.contents()
    return tensors, scalars, arrays


def assert_matches_reference(path):
    header = read_header(path)
    tensors, scalars, arrays = reference(path)
    ours = {t.name: (t.type_id, t.shape, t.n_bytes, t.offset) for t in header.tensors}
    assert ours == tensors
    for key, value in scalars.items():
        if isinstance(value, float):
            assert header.metadata[key] == pytest.approx(value)
        else:
            assert header.metadata[key] == value, key
    for key, length in arrays.items():
        assert len(header.metadata[key]) == length, key


@pytest.mark.parametrize("arch", factory.TINY_ARCHES)
def test_header_equals_gguf_reader_on_factory_files(tiny_models, arch):
    assert_matches_reference(tiny_models[arch])


def test_header_equals_gguf_reader_on_llama_cpp_files(shared_models):
    for path in shared_models:
        assert_matches_reference(path)


def test_tensor_bytes_equal_gguf_reader(tiny_models):
    path = tiny_models["deepseek2"]
    reader = gguf.GGUFReader(path)
    with open_model(path) as model:
        for tensor in reader.tensors:
            assert model.read_tensor_bytes(tensor.name) == bytes(np.asarray(tensor.data).view(np.uint8).reshape(-1))
            assert np.array_equal(model.tensor_memmap(tensor.name), np.asarray(tensor.data).view(np.uint8).reshape(-1))


def test_mapped_tensor_bytes_equal_the_read_ones(tiny_models):
    """view_tensor_bytes (a memory map of just the range, no copy) gives the bytes read_tensor_bytes
    reads, read-only, for whole tensors and for slices at any offset (the map starts at an
    allocation-granularity boundary below it)."""
    with open_model(tiny_models["deepseek2"]) as model:
        for tensor in model.tensors:
            view = model.view_tensor_bytes(tensor)
            assert isinstance(view, memoryview) and view.readonly
            assert bytes(view) == model.read_tensor_bytes(tensor), tensor.name
            start = min(7, tensor.n_bytes - 1)
            length = min(1001, tensor.n_bytes - start)
            assert bytes(model.view_tensor_bytes(tensor, start, length)) == model.read_tensor_bytes(tensor, start, length)
        with pytest.raises(ValueError, match="outside tensor"):
            model.view_tensor_bytes(model.tensors[0], 1, model.tensors[0].n_bytes)


def test_a_range_that_cannot_be_mapped_is_read_and_a_cut_file_reported(tmp_path, tiny_models):
    """Past the end of the file (cut after it was opened) a range cannot be mapped: the view falls
    back to the positioned read, which reports the short read (no crash, no partial bytes)."""
    from moetools import fileio
    from moetools.errors import GGUFError

    path = tmp_path / "cut.gguf"
    path.write_bytes(open(tiny_models["qwen3moe"], "rb").read())
    with open_model(path) as model:
        last = max(model.tensors, key=lambda tensor: tensor.offset)
        whole = model.view_tensor_bytes(last)
        assert bytes(whole) == model.read_tensor_bytes(last)
        del whole
        os.truncate(path, last.offset + last.n_bytes // 2)
        fd = fileio.open_read(path)
        try:
            assert fileio.map_read(fd, last.offset, last.n_bytes) is None
            assert fileio.map_read(fd, 0, 0) is None
            assert bytes(fileio.map_read(fd, 3, 10)) == path.read_bytes()[3:13]
        finally:
            os.close(fd)
        with pytest.raises(GGUFError, match="short read"):
            model.view_tensor_bytes(last)


def test_large_arrays_stay_lazy_and_load_on_demand(tiny_models):
    header = read_header(tiny_models["qwen3moe"])
    tokens = header.metadata["tokenizer.ggml.tokens"]
    assert isinstance(tokens, LazyArray) and len(tokens) == 1024
    assert tokens.load()[:3] == ["tok0", "tok1", "tok2"]
    merges = header.metadata["tokenizer.ggml.merges"]  # 64 by default, so llama.cpp's BPE loader accepts it
    assert len(merges) == 64 and merges[0] == "t0 k0"  # small arrays are read eagerly


def test_split_model_reads_as_one(tmp_path):
    single = factory.write_tiny(tmp_path / "one", "deepseek2")
    split = factory.write_tiny(tmp_path / "split", "deepseek2", shards=3)
    whole, parts = open_model(single), open_model(split.parent / "deepseek2-00002-of-00003.gguf")
    assert len(parts.shards) == 3 and parts.path.endswith("deepseek2-00001-of-00003.gguf")
    assert [(t.name, t.type_id, t.shape, t.n_bytes) for t in whole.tensors] == [
        (t.name, t.type_id, t.shape, t.n_bytes) for t in parts.tensors]
    assert {t.shard for t in parts.tensors} == {0, 1, 2}
    assert whole.fingerprint == parts.fingerprint
    for tensor in whole.tensors:
        assert whole.read_tensor_bytes(tensor.name) == parts.read_tensor_bytes(tensor.name)


def test_tensor_classes_follow_design(tiny_models):
    model = open_model(tiny_models["deepseek2"])
    resident = {t.name for t in model.resident_tensors}
    assert {"blk.1.ffn_gate_inp.weight", "blk.1.exp_probs_b.bias", "blk.1.ffn_up_shexp.weight",
            "blk.0.ffn_up.weight", "token_embd.weight"} <= resident
    assert {t.name for t in model.expert_tensors} == {
        f"blk.{il}.ffn_{m}_exps.weight" for il in (1, 2, 3) for m in ("gate", "up", "down")}
    gptoss = open_model(tiny_models["gpt-oss"])
    assert "blk.0.ffn_gate_exps.bias" in {t.name for t in gptoss.expert_tensors}
    # one expert = each expert tensor's bytes / its expert count, summed over the layer
    per_layer = {il: sum(t.n_bytes // 16 for t in gptoss.expert_tensors if t.name.startswith(f"blk.{il}.")) for il in range(4)}
    assert gptoss.expert_bytes_by_layer == per_layer
    assert model.resident_bytes + model.expert_bytes == model.total_bytes


def test_summary_of_llama_cpp_deepseek(shared_models):
    path = factory.shared_model("tiny-deepseekv3-Q8_0.gguf")
    if path is None:
        pytest.skip("tiny-deepseekv3-Q8_0.gguf not in ../shared/models")
    summary = open_model(path).summary
    assert (summary.architecture, summary.block_count, summary.expert_count, summary.expert_used_count) == ("deepseek2", 4, 16, 4)
    assert summary.leading_dense_block_count == 1 and summary.moe_layers == [1, 2, 3]
    assert (summary.kv_lora_rank, summary.rope_dimension_count, summary.key_length, summary.value_length) == (64, 16, 80, 64)
    assert summary.head_count_kv == [1] * 4 and summary.expert_shared_count == 1


def test_summary_of_full_size_k3(preset_model):
    model = open_model(preset_model("kimi-k3", shards=14))
    summary = model.summary
    assert (summary.architecture, summary.block_count, summary.expert_count, summary.expert_used_count) == ("kimi-k3", 93, 896, 16)
    assert summary.leading_dense_block_count == 1 and len(summary.moe_layers) == 92
    assert summary.expert_used_count * len(summary.moe_layers) == 1472
    assert summary.head_count_kv == [1 if (il + 1) % 4 == 0 else 0 for il in range(93)]
    assert set(model.expert_bytes_by_layer.values()) == {8_060_928}
    assert abs(8_060_928 - 8_093_696) / 8_093_696 < 0.005
    assert summary.vocab_size == 163840 and summary.kv_lora_rank == 512
    assert sum(h.file_size for h in model.headers) > 600e9
    assert sum(factory.sparse_bytes_on_disk(p) for p in model.shards) < 64e6


def test_names():
    assert split_name("/m/k3-00002-of-00014.gguf") == ("/m/k3", 2, 14)
    assert split_name("/m/k3.gguf") is None
    assert model_stem("/m/My Model-Q4_K-00001-of-00003.gguf") == "My Model-Q4_K"
    assert expert_tensor_kind("blk.12.ffn_gate_up_exps.weight") == (12, "gate_up")
    assert expert_tensor_kind("blk.12.ffn_gate_shexp.weight") is None
    assert expert_tensor_kind("blk.12.ffn_gate_inp.weight") is None
