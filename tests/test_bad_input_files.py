"""Bad input that is not a broken header byte (issue 32): special files, non-finite numbers, control
characters in names, huge strings, slow servers, a lying tensor count. Every file is damaged for real by
the test and every command answers in one line with exit 2, or in valid JSON."""

import json
import math
import os
import struct
import subprocess
import time
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from moetools.cli import cli
from moetools.errors import printable_line, shown_name
from moetools.output import json_text
from tests import factory

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    return factory.write_tiny(tmp_path_factory.mktemp("good"), "qwen3moe", alignment=64)


def moetools(*args, timeout=60, env=None):
    """Run the real CLI in a child process (a hang fails the test at `timeout` instead of hanging it)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="100", **(env or {}))
    return subprocess.run([sys.executable, "-m", "moetools", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env, stdin=subprocess.DEVNULL)


def _as_completed(result):
    """A CliRunner result as the (returncode, stderr) pair one_line_error reads."""
    return subprocess.CompletedProcess([], result.exit_code, result.stdout, result.stderr)


def one_line_error(result, *names):
    assert result.returncode == 2, (result.returncode, result.stderr)
    # (progress lines such as quantize's estimate may come before the error; the error is one line)
    lines = [line for line in result.stderr.strip().splitlines() if not line.startswith("quantize: ")]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "internal error" not in lines[0], result.stderr
    for name in names:
        assert str(name) in lines[0]
    return lines[0]


# --- 1. a FIFO, device or socket is refused before it is opened ------------------------------------------

needs_mkfifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="os.mkfifo is POSIX-only (Windows has no FIFOs in the file system)")


@needs_mkfifo
@pytest.mark.parametrize("command", [
    ["inspect", "--json"],
    ["device-fit", "--vram", "8G"],
    ["quantize", "--type", "q8_0", "-o", "{out}"],
    ["container-encode", "-o", "{out}"],
])
def test_a_fifo_model_is_refused_not_read(tmp_path, command):
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    args = [command[0], fifo] + [part.replace("{out}", str(tmp_path / "out")) for part in command[1:]]
    line = one_line_error(moetools(*args, timeout=60), fifo)
    assert "FIFO" in line and "not a regular file" in line


@needs_mkfifo
def test_a_fifo_shard_of_a_split_model_is_refused(good, tmp_path):
    first = tmp_path / "m-00001-of-00002.gguf"
    first.write_bytes(good.read_bytes())
    second = tmp_path / "m-00002-of-00002.gguf"
    os.mkfifo(second)
    line = one_line_error(moetools("inspect", first, "--json"), second)
    assert "not a regular file" in line


@pytest.mark.skipif(not os.path.exists("/dev/null") or sys.platform == "win32", reason="needs the POSIX character device /dev/null")
def test_a_character_device_is_refused():
    one_line_error(moetools("inspect", "/dev/null", "--json"), "/dev/null")


# --- 2. a string length of 2^32 (or any length past the end) anywhere in the header walk -----------------

def string_length_at(data, key_or_name, element=None):
    """Offset of the u64 length of: the value of metadata key `key_or_name` (element `element` of a
    string array), or the tensor name `key_or_name` itself when `element` is "name"."""
    encoded = key_or_name.encode()
    at = bytes(data).index(struct.pack("<Q", len(encoded)) + encoded)
    if element == "name":
        return at
    at += 8 + len(encoded) + 4  # the key, the value type
    if element is None:
        return at
    at += 4 + 8  # element type, count
    for _ in range(element):
        at += 8 + struct.unpack_from("<Q", data, at)[0]
    return at


@pytest.mark.parametrize("length", [2 ** 32, 2 ** 32 + 7, 2 ** 63, 2 ** 64 - 16])
@pytest.mark.parametrize("where, element, named", [
    ("general.name", None, "general.name"),
    ("general.architecture", "name", "metadata key"),
    ("output_norm.weight", "name", "name of tensor"),
    ("tokenizer.ggml.tokens", 0, "string 0 of"),
    ("tokenizer.ggml.tokens", 3, "string 3 of"),  # the fast walk's group of four ends past it
    ("tokenizer.ggml.tokens", 901, "string 901 of"),
])
def test_a_string_length_past_the_end_names_the_key_and_its_offset(good, tmp_path, length, where, element, named):
    data = bytearray(good.read_bytes())
    at = string_length_at(data, where, element)
    struct.pack_into("<Q", data, at, length)
    path = tmp_path / "bad.gguf"
    path.write_bytes(bytes(data))
    for args in (["inspect", path, "--json"], ["device-fit", path, "--vram", "8G", "--json"]):
        result = CliRunner().invoke(cli, list(map(str, args)))
        line = one_line_error(_as_completed(result), path, named, f"at offset {at}:", str(length))
        assert "runs past the end of the file" in line
        if where == "tokenizer.ggml.tokens":
            assert "array tokenizer.ggml.tokens" in line


# --- 3. NaN and infinities reach the JSON as strings, never as invalid JSON or a crash -------------------

def strict_json(text):
    """Parse `text` as strict JSON (NaN, Infinity and -Infinity are not JSON numbers)."""
    def refuse(constant):
        raise AssertionError(f"invalid JSON: bare {constant}")
    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("value, written", [(math.nan, "NaN"), (math.inf, "Infinity"), (-math.inf, "-Infinity")])
def test_a_non_finite_metadata_float_is_a_string_in_valid_json(good, tmp_path, value, written):
    key = "qwen3moe.rope.freq_base"
    data = bytearray(good.read_bytes())
    at = string_length_at(data, key)  # the value's offset (a float32: value type 6)
    assert struct.unpack_from("<I", data, at - 4)[0] == 6
    struct.pack_into("<f", data, at, value)
    path = tmp_path / "nan.gguf"
    path.write_bytes(bytes(data))
    result = CliRunner().invoke(cli, ["inspect", str(path), "--json", "--metadata"])
    assert result.exit_code == 0, result.stderr
    metadata = {item["key"]: item.get("value") for item in strict_json(result.stdout)["metadata"]}
    assert metadata[key] == written
    table = CliRunner().invoke(cli, ["inspect", str(path), "--metadata"], env={"COLUMNS": "100"})
    assert table.exit_code == 0 and "internal error" not in table.stderr


def test_json_text_writes_every_non_finite_float_as_its_string():
    doc = {"a": [1.5, math.nan, {"b": (math.inf, -math.inf)}], "c": 2}
    assert strict_json(json_text(doc)) == {"a": [1.5, "NaN", {"b": ["Infinity", "-Infinity"]}], "c": 2}
    assert json_text({"x": 0.25}) == json.dumps({"x": 0.25})


@pytest.mark.parametrize("scale", [math.nan, math.inf])
def test_a_q8_0_block_scale_that_is_not_finite(good, tmp_path, scale):
    """Copied as it is into a q8_0 tier (valid JSON report); refused in one line where it would be
    quantized again."""
    from moetools.gguf import read_header

    tensor = next(t for t in read_header(good).tensors if t.name == "blk.0.attn_q.weight")
    assert tensor.type_name == "q8_0"
    data = bytearray(good.read_bytes())
    struct.pack_into("<e", data, tensor.offset, scale)  # the first block's f16 scale
    path = tmp_path / "scale.gguf"
    path.write_bytes(bytes(data))
    kept = CliRunner().invoke(cli, ["quantize", str(path), "--type", "q8_0", "-o", str(tmp_path / "q8"), "--json"])
    assert kept.exit_code == 0, kept.stderr
    strict_json(kept.stdout)
    requantized = CliRunner().invoke(cli, ["quantize", str(path), "--type", "q4_k", "-o", str(tmp_path / "q4"), "--json"])
    line = one_line_error(_as_completed(requantized), path, "'blk.0.attn_q.weight'")
    assert "NaN or infinite" in line


# --- 4. names with control characters are quoted as repr quotes them, in one line ------------------------

def renamed(good, tmp_path, old, new, edit=None):
    """A copy of `good` with the tensor name or key `old` replaced by `new` (same length), then `edit`."""
    assert len(old) == len(new)
    data = bytearray(good.read_bytes())
    at = bytes(data).index(struct.pack("<Q", len(old)) + old.encode()) + 8
    data[at:at + len(old)] = new.encode()
    if edit is not None:
        edit(data, at + len(new))
    path = tmp_path / "names.gguf"
    path.write_bytes(bytes(data))
    return path


def test_a_tensor_name_with_a_newline_is_quoted_in_the_header_error(good, tmp_path):
    name = "output_norm\nweight"
    path = renamed(good, tmp_path, "output_norm.weight", name, lambda data, end: data.__delitem__(slice(end + 2, None)))
    line = one_line_error(_as_completed(CliRunner().invoke(cli, ["inspect", str(path), "--json"])), path)
    assert f"dimension count of {name!r}" in line


def test_a_metadata_key_with_control_characters_is_quoted(good, tmp_path):
    key = "general.\x1b[31mname"[:len("general.architecture")].ljust(len("general.architecture"), "\t")
    path = renamed(good, tmp_path, "general.architecture", key,
                   lambda data, end: struct.pack_into("<I", data, end, 99))  # an unknown value type
    line = one_line_error(_as_completed(CliRunner().invoke(cli, ["inspect", str(path), "--json"])), path)
    assert f"(key {key!r})" in line and "\x1b" not in line


def test_an_expert_tensor_name_with_a_newline_in_quantize_and_container_encode(good, tmp_path):
    path = renamed(good, tmp_path, "blk.0.ffn_gate_exps.weight", "blk\n0.ffn_gate_exps.weight")
    result = CliRunner().invoke(cli, ["quantize", str(path), "--type", "q4_k", "-o", str(tmp_path / "q"), "--json"])
    line = one_line_error(_as_completed(result), path)
    # quantize runs the shared validation too (issue 32): the real block tensor is missing, named first
    assert "\n" not in line and (repr("blk\n0.ffn_gate_exps.weight") in line
                                  or "tensor blk.0.ffn_gate_exps.weight is missing" in line)
    path = renamed(good, tmp_path, "blk.0.ffn_gate_exps.weight", "blk.0.ffn_gate_exps.weigh\n")
    result = CliRunner().invoke(cli, ["container-encode", str(path), "-o", str(tmp_path / "c")])
    line = one_line_error(_as_completed(result), path)
    # the shared validation (gguf/validate.py) refuses first: the real block tensor is missing; either way
    # the renamed name never reaches the line raw
    assert "\n" not in line and (repr("blk.0.ffn_gate_exps.weigh\n") in line
                                  or "tensor blk.0.ffn_gate_exps.weight is missing" in line)


def test_every_error_line_is_printable_whatever_its_message_quoted():
    assert printable_line("a\nb\x1b[0m\tc") == "a\\nb\\x1b[0m\\tc"
    assert printable_line("ordinary: naïve ok") == "ordinary: naïve ok"
    assert shown_name("general.name") == "general.name" and shown_name("a\nb") == "'a\\nb'"


# --- 5. a megabytes-long general.name: valid JSON holding it whole, a bounded table line -----------------

@pytest.fixture(scope="module")
def huge_name(good, tmp_path_factory):
    """`good` with 4 MiB more of general.name (quotes, backslashes, a newline, non-ASCII included): a
    multiple of the alignment, so every tensor keeps its data offset."""
    data = bytearray(good.read_bytes())
    at = string_length_at(data, "general.name")
    length = struct.unpack_from("<Q", data, at)[0]
    extra = ('"\\\n€ name ' * 4).encode()
    extra = (extra * (4 * 1024 * 1024 // len(extra) + 1))[:4 * 1024 * 1024]
    extra = extra[:len(extra.decode("utf-8", "ignore").encode())]  # whole characters only
    extra += b"x" * (-len(extra) % 64)
    data[at + 8 + length:at + 8 + length] = extra
    struct.pack_into("<Q", data, at, length + len(extra))
    path = tmp_path_factory.mktemp("huge") / "huge-name.gguf"
    path.write_bytes(bytes(data))
    return path, (data[at + 8:at + 8 + length + len(extra)]).decode()


def test_a_huge_general_name_is_valid_json_and_whole(huge_name):
    path, name = huge_name
    result = moetools("inspect", path, "--json", "--metadata")
    assert result.returncode == 0, result.stderr
    doc = strict_json(result.stdout)
    assert doc["name"] == name and len(name.encode()) > 4_000_000
    assert {item["key"]: item.get("value") for item in doc["metadata"]}["general.name"] == name


@pytest.mark.skipif(os.name == "nt", reason="draws the table on a POSIX pseudo-terminal")
def test_a_huge_general_name_is_cut_short_on_a_terminal(huge_name):
    from moetools.inspect_cmd import CELL_CHARS
    from tests.terminal import run_on_terminal

    path, name = huge_name
    code, text = run_on_terminal(["inspect", path, "--metadata"], columns=100, stdout_too=True)
    assert code == 0
    assert len(text) < 20_000 and "…" in text and "--json" in text  # (the cell wraps between words)
    assert f"({len(name):,}" in text
    assert max(len(line) for line in strip_ansi(text).splitlines()) <= 100
    assert CELL_CHARS < 200


def strip_ansi(text):
    import re

    return re.sub(r"\x1b\[[0-9;]*m", "", text)


# --- 6. --timeout bounds the whole request: a slow-drip server fails within about --timeout --------------

@pytest.mark.parametrize("drip_head", [False, True], ids=["body", "headers"])
def test_a_slow_drip_server_fails_within_the_timeout(drip_head):
    from tests.httpfixture import DripServer

    with DripServer(0.5, drip_head=drip_head) as server:
        url = server.url("drip.gguf")
        started = time.monotonic()
        result = moetools("inspect", url, "--json", "--timeout", "2", timeout=60)
        elapsed = time.monotonic() - started
    line = one_line_error(result, url, "--timeout")
    assert "within 2 s" in line
    assert elapsed < 2 + 4, elapsed  # (the child's start-up included; without the deadline it took 50 s)


def test_a_slow_drip_hub_listing_fails_within_the_timeout():
    """hf://ORG/REPO lists the repo through huggingface_hub, whose timeout bounds each read: the
    listing call as a whole is bounded by --timeout too."""
    from tests.httpfixture import DripServer

    with DripServer(0.5, size=400) as server:
        endpoint = server.url("").rstrip("/")
        started = time.monotonic()
        result = moetools("device-fit", "hf://org/repo", "--vram", "24G", "--timeout", "2", timeout=120,
                          env={"HF_ENDPOINT": endpoint})
        elapsed = time.monotonic() - started
    line = one_line_error(result, "hf://org/repo", "--timeout")
    assert "within 2 s" in line
    assert elapsed < 2 + 8, elapsed  # (the child's start-up and the Hub library's import included)


# --- 7. a tensor count that lies (n-1, n/2, 0): the data left over is refused, not a smaller model -------

@pytest.mark.parametrize("count", [lambda n: n - 1, lambda n: n // 2, lambda n: 1, lambda n: 0],
                         ids=["n-1", "n/2", "1", "0"])
def test_a_tensor_count_lower_than_the_data_is_refused(good, tmp_path, count):
    data = bytearray(good.read_bytes())
    n_tensors = struct.unpack_from("<Q", data, 8)[0]
    struct.pack_into("<Q", data, 8, count(n_tensors))
    path = tmp_path / "lying.gguf"
    path.write_bytes(bytes(data))
    for args in (["inspect", path, "--json"], ["device-fit", path, "--vram", "8G", "--json"],
                 ["quantize", path, "--type", "q8_0", "-o", tmp_path / "q", "--json"]):
        result = CliRunner().invoke(cli, list(map(str, args)))
        line = one_line_error(_as_completed(result), path, "at offset 8:")
        assert f"tensor count {count(n_tensors)} does not match the data" in line


def test_a_file_holding_only_its_listed_tensors_and_their_padding_reads(good, tmp_path):
    """The last tensor's padding to the alignment is part of the data section; a byte more is not."""
    from moetools.gguf import read_header

    header = read_header(good)
    last = header.tensors[-1]
    padded_end = header.data_offset + sum(-(-t.n_bytes // header.alignment) * header.alignment for t in header.tensors)
    assert last.offset + last.n_bytes <= padded_end == header.file_size
    path = tmp_path / "one-more.gguf"
    path.write_bytes(good.read_bytes() + b"\0")
    line = one_line_error(_as_completed(CliRunner().invoke(cli, ["inspect", str(path), "--json"])), path)
    assert f"1 bytes from offset {padded_end}" in line
    shorter = tmp_path / "unpadded.gguf"
    shorter.write_bytes(good.read_bytes()[:last.offset + last.n_bytes])
    assert CliRunner().invoke(cli, ["inspect", str(shorter), "--json"]).exit_code == 0


@pytest.fixture(scope="module")
def big_sparse(tmp_path_factory):
    """A header-only (sparse) 18 GB qwen3-30b-a3b: a string length of 2^32 lies inside it."""
    return factory.write_preset(tmp_path_factory.mktemp("sparse"), "qwen3-30b-a3b")


@pytest.mark.parametrize("where, element, named", [
    ("general.name", None, "value of general.name length"),
    ("general.architecture", "name", "metadata key"),
    ("blk.0.attn_q.weight", "name", "name of tensor"),
    ("tokenizer.ggml.tokens", 7, "string 7 of"),
])
def test_a_string_length_of_2_32_inside_a_big_file_is_refused_not_allocated(big_sparse, tmp_path, where, element, named):
    """On a file bigger than 4 GiB the length lies inside the file: it was read into memory (4 GiB, or a
    MemoryError reported as an internal error). No string may be longer than a whole header (256 MiB)."""
    with open(big_sparse, "rb") as handle:
        head = bytearray(handle.read(64 * 1024 * 1024))
    at = string_length_at(head, where, element)
    struct.pack_into("<Q", head, at, 2 ** 32)
    path = tmp_path / "big.gguf"
    with open(path, "wb") as handle:
        handle.write(head)
        handle.truncate(os.path.getsize(big_sparse))
    started = time.monotonic()
    result = CliRunner().invoke(cli, ["inspect", str(path), "--json"])
    line = one_line_error(_as_completed(result), path, named, f"at offset {at}:", str(2 ** 32))
    assert "more than a whole GGUF header holds (256 MiB)" in line
    assert time.monotonic() - started < 10


def test_a_warning_naming_a_name_with_a_newline_stays_one_line(capsys):
    from moetools.output import warn

    warn("tensor 'a\nb' is odd")
    assert capsys.readouterr().err == "warning: tensor 'a\\nb' is odd\n"
