"""Headers llama.cpp's loader refuses are refused here too, by every command, naming the offset or key.

The rules (llama.cpp commit 0c1e57098): ggml/src/gguf.cpp wants tensor data in header order, each
tensor where the one before it ends padded to the alignment ("tensor 'X' has offset N, expected M");
src/llama-model.cpp asserts 0 < block_count <= 512 and expert_count <= 1024; the model loader creates
tensors for blocks below block_count only.
"""

import struct

import pytest
from click.testing import CliRunner

from moetools.cli import cli
from moetools.gguf import open_model, read_header
from tests import factory
from tests.test_reader_bad_input import after_key, after_tensor_name


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    return factory.write_tiny(tmp_path_factory.mktemp("strict"), "qwen3moe", alignment=64)


def offset_field(data, tensor):
    """File offset of `tensor`'s data-offset field (after name, n_dims, dims and type)."""
    return after_tensor_name(data, tensor.name) + 4 + 8 * len(tensor.shape) + 4


def patched(good, tmp_path, edits, name="bad.gguf"):
    """A copy of `good` with `edits` [(offset, struct format, value)] written in."""
    data = bytearray(good.read_bytes())
    for at, fmt, value in edits:
        struct.pack_into(fmt, data, at, value)
    path = tmp_path / name
    path.write_bytes(bytes(data))
    return path


def fails(command, path, *extra):
    result = CliRunner().invoke(cli, [command, str(path), *extra])
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.stderr, result.stderr
    assert str(path) in lines[0]
    return lines[0]


def relative_offset(header, tensor):
    return tensor.offset - header.data_offset



def test_swapped_offsets_are_refused(good, tmp_path):
    header = read_header(good)
    data = good.read_bytes()
    first, second = header.tensors[1], header.tensors[2]
    bad = patched(good, tmp_path, [
        (offset_field(data, first), "<Q", relative_offset(header, second)),
        (offset_field(data, second), "<Q", relative_offset(header, first)),
    ])
    line = fails("inspect", bad, "--json")
    assert f"tensor {first.name!r} has data offset {relative_offset(header, second)}" in line
    assert f"expected {relative_offset(header, first)}" in line
    assert f"at offset {offset_field(data, first)}" in line


@pytest.mark.parametrize("command", ["inspect", "device-fit"])
def test_overlapping_offsets_are_refused(good, tmp_path, command):
    header = read_header(good)
    data = good.read_bytes()
    second = header.tensors[2]
    bad = patched(good, tmp_path, [(offset_field(data, second), "<Q", relative_offset(header, header.tensors[1]))])
    extra = ["--vram", "1G"] if command == "device-fit" else []
    line = fails(command, bad, *extra)
    assert "overlapping" in line and second.name in line


def test_container_encode_refuses_overlapping_experts(tiny_models, tmp_path):
    source = tiny_models["qwen3moe"]
    header = read_header(source)
    data = source.read_bytes()
    experts = [tensor for tensor in header.tensors if "_exps." in tensor.name]
    later = experts[1]
    bad = patched(source, tmp_path, [(offset_field(data, later), "<Q", relative_offset(header, experts[0]))])
    fails("container-encode", bad, "-o", str(tmp_path / "out"))
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_gap_between_tensors_is_refused(good, tmp_path):
    header = read_header(good)
    data = good.read_bytes()
    last = header.tensors[-1]
    bad = patched(good, tmp_path, [(offset_field(data, last), "<Q", relative_offset(header, last) + 64)])
    # keep the file long enough that only the layout is wrong
    with open(bad, "ab") as handle:
        handle.write(b"\0" * 64)
    assert "gap" in fails("inspect", bad)


def block_count_at(data):
    return after_key(data, "qwen3moe.block_count") + 4


def test_expert_tensor_beyond_block_count_is_refused(good, tmp_path):
    data = bytearray(good.read_bytes())
    n_blocks = struct.unpack_from("<I", data, block_count_at(data))[0]
    assert n_blocks >= 2
    bad = patched(good, tmp_path, [(block_count_at(data), "<I", n_blocks - 1)])
    line = fails("device-fit", bad, "--vram", "1G")
    assert f"block {n_blocks - 1} but block_count is {n_blocks - 1}" in line and "qwen3moe.block_count" in line
    fails("inspect", bad)


@pytest.mark.parametrize("count", [0, 513, 100_000_000, 4_294_967_295])
@pytest.mark.parametrize("command", ["inspect", "device-fit"])
def test_block_count_beyond_llama_cpp_limit_is_refused(good, tmp_path, count, command):
    data = bytearray(good.read_bytes())
    bad = patched(good, tmp_path, [(block_count_at(data), "<I", count)])
    extra = ["--vram", "1G"] if command == "device-fit" else []
    line = fails(command, bad, *extra)
    assert "qwen3moe.block_count" in line and "512" in line


def test_expert_count_beyond_llama_cpp_limit_is_refused(good, tmp_path):
    data = bytearray(good.read_bytes())
    at = after_key(data, "qwen3moe.expert_count") + 4
    bad = patched(good, tmp_path, [(at, "<I", 4_000_000_000)])
    line = fails("device-fit", bad, "--vram", "1G")
    assert "qwen3moe.expert_count" in line and "1024" in line


def test_converter_written_models_still_read(shared_models):
    for path in shared_models:
        with open_model(path) as model:
            assert model.summary.block_count > 0


def test_an_expert_tensor_without_bytes_is_refused(good, tmp_path):
    """Found by the structured fuzz: a zero dimension on the last (expert) tensor made device-fit divide by zero."""
    header = read_header(good)
    last = header.tensors[-1]
    assert "_exps." in last.name
    data = good.read_bytes()
    first_dim = after_tensor_name(data, last.name) + 4
    bad = patched(good, tmp_path, [(first_dim, "<Q", 0)])
    line = fails("device-fit", bad, "--vram", "1G")
    assert last.name in line
