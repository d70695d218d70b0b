"""Every kind of broken GGUF gives exit 2 and one line naming the file and the offset or key."""

import os
import shutil
import struct

import pytest
from click.testing import CliRunner

from moetools.cli import cli
from moetools.errors import GGUFError
from moetools.gguf import open_model, read_header
from tests import factory


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    """A tiny qwen3moe with a 64-byte alignment key, so every header field exists to break."""
    return factory.write_tiny(tmp_path_factory.mktemp("good"), "qwen3moe", alignment=64)


def mutated(good, tmp_path, edit):
    """A copy of `good` with `edit(bytearray)` applied; returns its path."""
    data = bytearray(good.read_bytes())
    edit(data)
    path = tmp_path / "bad.gguf"
    path.write_bytes(bytes(data))
    return path


def after_key(data, key):
    """Offset just past the key string `key` (its value type follows)."""
    encoded = key.encode()
    index = bytes(data).index(struct.pack("<Q", len(encoded)) + encoded)
    return index + 8 + len(encoded)


def after_tensor_name(data, name):
    encoded = name.encode()
    index = bytes(data).index(struct.pack("<Q", len(encoded)) + encoded)
    return index + 8 + len(encoded)


def inspect_fails(path, names=None):
    """Run inspect on `path`; assert exit 2 and one line naming `names` (default: path itself)."""
    result = CliRunner().invoke(cli, ["inspect", str(path), "--json"])
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.stderr
    assert str(names or path) in lines[0]
    return lines[0]


def truncate_at(offset):
    def edit(data):
        del data[offset:]
    return edit


def test_truncated_inside_fixed_header(good, tmp_path):
    line = inspect_fails(mutated(good, tmp_path, truncate_at(10)))
    assert "truncated" in line and "offset 8" in line


def test_truncated_inside_a_string(good, tmp_path):
    data = good.read_bytes()
    cut = after_key(bytearray(data), "general.name") + 4 + 8 + 3  # type, length, three characters
    line = inspect_fails(mutated(good, tmp_path, truncate_at(cut)))
    assert "general.name" in line and "runs past the end" in line


def test_truncated_inside_an_array(good, tmp_path):
    cut = after_key(bytearray(good.read_bytes()), "tokenizer.ggml.tokens") + 4 + 4 + 8 + 500
    line = inspect_fails(mutated(good, tmp_path, truncate_at(cut)))
    assert "tokenizer.ggml.tokens" in line


def test_truncated_inside_tensor_infos(good, tmp_path):
    cut = after_tensor_name(bytearray(good.read_bytes()), "output_norm.weight") + 6
    line = inspect_fails(mutated(good, tmp_path, truncate_at(cut)))
    assert "truncated" in line and "output_norm.weight" in line


def test_bad_magic(good, tmp_path):
    def edit(data):
        data[0:4] = b"GGML"
    assert "not a GGUF file" in inspect_fails(mutated(good, tmp_path, edit))


@pytest.mark.parametrize("version", [1, 4, 0x03000000])
def test_unsupported_version(good, tmp_path, version):
    def edit(data):
        data[4:8] = struct.pack("<I", version)
    line = inspect_fails(mutated(good, tmp_path, edit))
    assert "offset 4" in line and ("version" in line)


HUGE = 2**63


def test_string_length_past_end(good, tmp_path):
    def edit(data):
        at = after_key(data, "general.name") + 4
        data[at:at + 8] = struct.pack("<Q", HUGE)
    line = inspect_fails(mutated(good, tmp_path, edit))
    assert "runs past the end of the file" in line


def test_array_length_past_end(good, tmp_path):
    def edit(data):
        at = after_key(data, "tokenizer.ggml.token_type") + 4 + 4
        data[at:at + 8] = struct.pack("<Q", HUGE)
    line = inspect_fails(mutated(good, tmp_path, edit))
    assert "tokenizer.ggml.token_type" in line and "runs past the end" in line


def test_string_array_length_past_end(good, tmp_path):
    def edit(data):
        at = after_key(data, "tokenizer.ggml.tokens") + 4 + 4
        data[at:at + 8] = struct.pack("<Q", HUGE)
    assert "runs past the end" in inspect_fails(mutated(good, tmp_path, edit))


@pytest.mark.parametrize("offset,what", [(8, "tensor count"), (16, "metadata count")])
def test_counts_past_end(good, tmp_path, offset, what):
    def edit(data):
        data[offset:offset + 8] = struct.pack("<Q", HUGE)
    line = inspect_fails(mutated(good, tmp_path, edit))
    assert what in line and "cannot fit" in line and f"offset {offset}" in line


def test_unknown_ggml_type(good, tmp_path):
    def edit(data):
        at = after_tensor_name(data, "output_norm.weight") + 4 + 8  # n_dims, one dim
        data[at:at + 4] = struct.pack("<I", 42)
    line = inspect_fails(mutated(good, tmp_path, edit))
    assert "unknown ggml type id 42" in line


@pytest.mark.parametrize("alignment", [0, 3, 48])
def test_bad_alignment(good, tmp_path, alignment):
    def edit(data):
        at = after_key(data, "general.alignment") + 4
        data[at:at + 4] = struct.pack("<I", alignment)
    line = inspect_fails(mutated(good, tmp_path, edit))
    assert "general.alignment" in line and "power of two" in line


def test_duplicate_tensor_names(good, tmp_path):
    def edit(data):
        at = bytes(data).index(b"blk.1.attn_norm.weight")
        data[at:at + 6] = b"blk.0."
    assert "duplicate tensor name 'blk.0.attn_norm.weight'" in inspect_fails(mutated(good, tmp_path, edit))


def test_tensor_data_beyond_end(good, tmp_path):
    size = good.stat().st_size
    line = inspect_fails(mutated(good, tmp_path, truncate_at(size - 4096)))
    assert "lies beyond the end of the file" in line


def test_empty_file_and_folder_and_missing(tmp_path):
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    assert "empty file" in inspect_fails(empty)
    result = CliRunner().invoke(cli, ["inspect", str(tmp_path / "nope.gguf")])
    assert result.exit_code == 2 and "nope.gguf" in result.stderr and "Traceback" not in result.stderr


@pytest.fixture
def split_set(tmp_path):
    first = factory.write_tiny(tmp_path / "a", "mixtral", shards=3)
    return first.parent


def test_missing_shard(split_set):
    os.unlink(split_set / "mixtral-00002-of-00003.gguf")
    line = inspect_fails(split_set / "mixtral-00001-of-00003.gguf")
    assert "missing 1 of 3 shards: mixtral-00002-of-00003.gguf" in line


def test_shard_from_another_model(split_set, tmp_path):
    other = factory.write_tiny(tmp_path / "b", "qwen3moe", shards=3).parent
    shutil.copy(other / "qwen3moe-00003-of-00003.gguf", split_set / "mixtral-00003-of-00003.gguf")
    line = inspect_fails(split_set / "mixtral-00001-of-00003.gguf", split_set / "mixtral-00003-of-00003.gguf")
    assert "another model" in line


def test_mismatched_split_count(split_set, tmp_path):
    two = factory.write_tiny(tmp_path / "c", "mixtral", shards=2).parent
    shutil.copy(two / "mixtral-00002-of-00002.gguf", split_set / "mixtral-00002-of-00003.gguf")
    line = inspect_fails(split_set / "mixtral-00001-of-00003.gguf", split_set / "mixtral-00002-of-00003.gguf")
    assert "split.count is 2" in line


def test_shard_renamed_out_of_order(split_set):
    a, b = split_set / "mixtral-00001-of-00003.gguf", split_set / "mixtral-00002-of-00003.gguf"
    tmp = split_set / "x"
    a.rename(tmp), b.rename(a), tmp.rename(b)
    line = inspect_fails(split_set / "mixtral-00003-of-00003.gguf", split_set / "mixtral-00001-of-00003.gguf")
    assert "split.no is 1" in line


def test_renamed_single_shard_is_not_taken_for_a_model(split_set):
    lone = split_set / "lone.gguf"
    shutil.copy(split_set / "mixtral-00001-of-00003.gguf", lone)
    assert "one shard of 3" in inspect_fails(lone)


def test_extra_shards_of_another_split_are_reported(split_set):
    shutil.copy(split_set / "mixtral-00001-of-00003.gguf", split_set / "mixtral-00001-of-00004.gguf")
    result = CliRunner().invoke(cli, ["inspect", str(split_set / "mixtral-00001-of-00003.gguf"), "--json"])
    assert result.exit_code == 0
    assert "ignoring 1 shard(s) of another split" in result.stderr


def test_errors_are_gguf_errors_with_offsets(good, tmp_path):
    with pytest.raises(GGUFError) as caught:
        read_header(mutated(good, tmp_path, truncate_at(20)))
    assert caught.value.offset is not None and caught.value.path.endswith("bad.gguf")
    with pytest.raises(GGUFError):
        open_model(tmp_path)


def _tensor_info_edits(data, names):
    """(label, edit) pairs breaking one field of the tensor info of each of `names`."""
    edits = []
    for name in names:
        start = after_tensor_name(data, name)
        length_at = start - len(name) - 8
        n_dims = struct.unpack_from("<I", data, start)[0]
        type_at = start + 4 + 8 * n_dims
        offset = struct.unpack_from("<Q", data, type_at + 4)[0]
        for label, at, value in [
            ("name length past the end", length_at, struct.pack("<Q", 1 << 40)),
            ("name length into the next field", length_at, struct.pack("<Q", len(name) + 3)),
            ("name not UTF-8", length_at + 8, b"\xff"),
            ("no dimensions", start, struct.pack("<I", 0)),
            ("five dimensions", start, struct.pack("<I", 5)),
            ("a row not of whole blocks", start + 4, struct.pack("<Q", 33)),
            ("unknown type", type_at, struct.pack("<I", 999)),
            ("misaligned data", type_at + 4, struct.pack("<Q", offset + 1)),
            ("a gap before the data", type_at + 4, struct.pack("<Q", offset + 64)),
        ]:
            edits.append((f"{name}: {label}", at, value))
    return edits


def test_tensor_infos_read_the_plain_way_fail_exactly_as_the_careful_loop(good, tmp_path, monkeypatch):
    # _plain_tensor_infos reads the infos without per-field bounds calls and hands the first one any check
    # would reject to _parse's careful loop: the error (its text and offset) is the careful loop's own
    from moetools.gguf import header as headermod

    data = bytearray(good.read_bytes())
    names = [info.name for info in read_header(good).tensors]
    careful = lambda buffer, position, count, *rest: (position, 0)  # noqa: E731
    cases = _tensor_info_edits(data, [names[0], names[len(names) // 2], names[-1]])
    for label, at, value in cases:
        broken = bytearray(data)
        broken[at:at + len(value)] = value
        path = tmp_path / "bad.gguf"
        path.write_bytes(bytes(broken))
        errors = []
        for plain in (headermod._plain_tensor_infos, careful):
            monkeypatch.setattr(headermod, "_plain_tensor_infos", plain)
            with pytest.raises(GGUFError) as caught:
                read_header(path)
            errors.append((str(caught.value), caught.value.offset))
        monkeypatch.undo()
        assert errors[0] == errors[1], label
    # a header prefix (a remote read): the plain loop stops where the bytes run out, the careful loop asks for more
    full = read_header(good)
    first_info = after_tensor_name(data, names[0]) - len(names[0]) - 8
    for length in range(first_info, full.data_offset, 7):
        outcomes = []
        for plain in (headermod._plain_tensor_infos, careful):
            monkeypatch.setattr(headermod, "_plain_tensor_infos", plain)
            try:
                outcomes.append(headermod.parse_header_bytes(str(good), bytes(data[:length]), full.file_size).tensors)
            except headermod.HeaderIncomplete as more:
                outcomes.append(more.needed)
        monkeypatch.undo()
        assert outcomes[0] == outcomes[1], length
    assert isinstance(outcomes[0], list) and outcomes[0] == full.tensors
