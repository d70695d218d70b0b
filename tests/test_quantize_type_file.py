"""`quantize --tensor-type-file FILE`, read as llama-quantize reads it: CambrianTech/llama.cpp (and upstream
llama.cpp, identical here) tools/quantize/quantize.cpp `parse_tensor_type_file` -- `while (file >> arg)`
over whitespace-separated words, each handed to `parse_tensor_type` (split at the first `=`, name
lower-cased, type a ggml type name in any case); no comment syntax. Restated in
`fork_rules.parse_tensor_type_file`. The overrides are the same `--tensor-type` ones, appended in
command-line order (quantize.cpp's `tensor_type_opts`; first match wins in src/llama-quant.cpp)."""

import hashlib
import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from moetools import synth
from moetools.cli import cli
from moetools.errors import InputError
from moetools.gguf import open_model
from moetools.quantize.inputs import parse_tensor_types, read_tensor_type_file
from tests import factory, fork_rules


def invoke(*args, stdin=None):
    return CliRunner().invoke(cli, ["quantize", *map(str, args)], input=stdin)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    folder = tmp_path_factory.mktemp("typefile")
    return factory.write_tiny(folder, "qwen3moe", types=synth.Types(resident=synth.F16, embed=synth.F16, output=synth.F16),
                              n_layer=2, vocab=256)


TEXTS = [
    "attn_q=q5_0\n",
    "attn_q=q5_0 attn_k=Q8_0\tffn_down=q4_1\n",  # several words a line, tab or space
    "\n\n  ATTN_Q=q5_0  \r\n\r\n\tattn_k=q8_0\n",  # blank lines, CRLF, upper-case name
    "blk\\.0\\.attn_v=q8_0 blk\\.1\\..*=q4_0",  # regular expressions, no final newline
    "\x0battn_q=q5_0\x0c",  # vertical tab and form feed are whitespace to >>
]


@pytest.mark.parametrize("text", TEXTS)
def test_words_are_read_as_llama_quantize_reads_them(tmp_path, text):
    path = tmp_path / "types.txt"
    path.write_bytes(text.encode())
    expected = fork_rules.parse_tensor_type_file(text)
    assert isinstance(expected, list)
    got = read_tensor_type_file(path)
    assert [name for name, _ in got] == [name for name, _ in expected]
    # each word means what the same --tensor-type NAME=TYPE means
    assert got == parse_tensor_types([f"{name}={kind}" for name, kind in expected])


@pytest.mark.parametrize("text,line,reason", [
    ("attn_q=q5_0\n# a comment\n", 2, "expected NAME=TYPE"),  # llama-quantize: "malformed tensor type '#'"
    ("attn_q=q5_0\n\nattn_k\n", 3, "expected NAME=TYPE"),
    ("attn_q=q5_0 =q8_0\n", 1, "expected NAME=TYPE"),  # "missing tensor name"
    ("\n\n\nattn_q=\n", 4, "missing quantization type"),
    ("attn_q=q5_0\r\nattn_k=q9_9\r\n", 2, "unsupported type 'q9_9'"),
    ("a=b=q8_0\n", 1, "unsupported type 'b=q8_0'"),  # split at the FIRST '=', as strchr does
    ("(=q8_0\n", 1, "bad pattern"),
])
def test_a_word_that_does_not_parse_names_its_line(tmp_path, source, text, line, reason):
    path = tmp_path / "bad.txt"
    path.write_bytes(text.encode())
    verdict = fork_rules.parse_tensor_type_file(text)
    if reason.startswith(("expected", "missing")):
        assert isinstance(verdict, tuple)  # llama-quantize refuses this word too
    with pytest.raises(InputError, match=f"line {line}: .*{reason}"):
        read_tensor_type_file(path)
    result = invoke(source, "--type", "Q4_K_M", "--tensor-type-file", path, "-o", tmp_path / "out")
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and f"{path}: line {line}:" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def digests(doc):
    out = {}
    for tier in doc["tiers"]:
        with open(tier["gguf"], "rb") as handle:
            out[tier["tier"]] = hashlib.sha256(handle.read()).hexdigest()
    return out


def test_the_file_gives_the_tier_its_words_give_as_tensor_type(tmp_path, source):
    (tmp_path / "types.txt").write_text("attn_q=q5_0 ffn_down=q8_0\n\n\tATTN_K=q4_1\r\n")
    by_file = invoke(source, "--type", "Q4_K_M", "--tensor-type-file", tmp_path / "types.txt", "-o", tmp_path / "a", "--json")
    by_option = invoke(source, "--type", "Q4_K_M", "--tensor-type", "attn_q=q5_0", "--tensor-type", "ffn_down=q8_0",
                       "--tensor-type", "attn_k=q4_1", "-o", tmp_path / "b", "--json")
    assert by_file.exit_code == 0, by_file.output
    assert by_option.exit_code == 0, by_option.output
    assert digests(json.loads(by_file.stdout)) == digests(json.loads(by_option.stdout))
    with open_model(json.loads(by_file.stdout)["tiers"][0]["gguf"]) as out:
        assert [out.tensor_by_name[n].type_name for n in ("blk.0.attn_q.weight", "blk.1.attn_k.weight")] == ["q5_0", "q4_1"]


@pytest.mark.parametrize("file_first", [True, False])
def test_command_line_order_decides_which_override_matches_first(tmp_path, source, file_first):
    """quantize.cpp appends --tensor-type and --tensor-type-file overrides to one list in argv order;
    llama-quant.cpp takes the first pattern that matches."""
    (tmp_path / "types.txt").write_text("attn_q=q5_0\n")
    file_args = ["--tensor-type-file", tmp_path / "types.txt"]
    option_args = ["--tensor-type", "attn_q=q8_0"]
    args = file_args + option_args if file_first else option_args + file_args
    result = invoke(source, "--type", "Q4_K_M", *args, "-o", tmp_path / "out", "--json")
    assert result.exit_code == 0, result.output
    with open_model(json.loads(result.stdout)["tiers"][0]["gguf"]) as out:
        assert out.tensor_by_name["blk.0.attn_q.weight"].type_name == ("q5_0" if file_first else "q8_0")


def test_stdin_and_a_missing_file(tmp_path, source):
    root = str(factory.Path(__file__).resolve().parent.parent)
    done = subprocess.run([sys.executable, "-m", "moetools", "quantize", str(source), "--type", "Q4_K_M", "--tensor-type-file", "-",
                           "-o", str(tmp_path / "out"), "--json"], input="attn_q=q5_0\n", capture_output=True, text=True,
                          cwd=root, timeout=300)
    assert done.returncode == 0, done.stderr
    with open_model(json.loads(done.stdout)["tiers"][0]["gguf"]) as out:
        assert out.tensor_by_name["blk.0.attn_q.weight"].type_name == "q5_0"
    missing = invoke(source, "--type", "Q4_K_M", "--tensor-type-file", tmp_path / "nope.txt")
    assert missing.exit_code == 2 and "nope.txt" in missing.output and missing.output.count("\n") == 1
