"""One validation for every command (issue 32): moetools.gguf.validate.

Each test writes a real damaged GGUF (a synth tiny model with a key changed or a tensor dropped or
reshaped) and runs the commands on it: the metadata llama.cpp's load_hparams refuses stops inspect,
device-fit, quantize and container-encode alike (exit 2, one line, naming the key); what its
load_tensors refuses (a missing block tensor, a wrong or folded shape) stops device-fit and
container-encode naming the tensor, while inspect describes the file, says what llama.cpp will
refuse, and with --strict exits 2. Every converter-written model in ../shared/models and every synth
builder passes.
"""

import json

import pytest
from click.testing import CliRunner

from moetools import synth
from moetools.cli import cli
from moetools.gguf import open_model, validate
from moetools.synth.presets import BUILDERS, PRESETS
from tests import factory

U64_MAX = 2**64 - 1


def damaged(tmp_path, builder, keys=None, drop=(), shapes=None, name="bad"):
    """A sparse tiny `builder` model with `keys` ({suffix: (value, kind)}, None drops the key),
    the tensors in `drop` left out and `shapes` ({tensor: ggml shape}) changed."""
    spec = synth.tiny(builder)
    keys = {f"{spec.architecture}.{suffix}": change for suffix, change in (keys or {}).items()}
    metadata = []
    for key, value, kind in spec.metadata:
        if key in keys:
            change = keys.pop(key)
            if change is None:
                continue
            value, kind = change
        metadata.append((key, value, kind))
    metadata += [(key, change[0], change[1]) for key, change in keys.items() if change is not None]
    spec.metadata = metadata
    spec.tensors = [tensor for tensor in spec.tensors if tensor.name not in drop]
    for tensor in spec.tensors:
        if shapes and tensor.name in shapes:
            tensor.shape = tuple(shapes[tensor.name])
    tmp_path.mkdir(parents=True, exist_ok=True)
    return synth.write_model(spec, tmp_path / f"{name}.gguf", sparse=True)[0]


def invoke(*args):
    return CliRunner().invoke(cli, [str(arg) for arg in args])


COMMANDS = {
    "inspect": lambda path, out: ("inspect", path, "--json"),
    "device-fit": lambda path, out: ("device-fit", path, "--vram", "24G", "--json"),
    "quantize": lambda path, out: ("quantize", path, "--pure", "--type", "q8_0", "-o", out, "--json"),
    "container-encode": lambda path, out: ("container-encode", path, "-o", out, "--json"),
}


def one_line_error(result, path):
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.stderr, result.stderr
    assert "internal error" not in lines[0] and str(path) in lines[0]
    return lines[0]


# --- 1. the metadata checks, in every command ------------------------------------------------

METADATA_DAMAGE = {
    "expert_count f32": ({"expert_count": (16.0, "f32")}, "expert_count"),
    "expert_count string": ({"expert_count": ("16", "str")}, "expert_count"),
    "expert_count array": ({"expert_count": ([16, 16], "u32[]")}, "expert_count"),
    "expert_used_count 0": ({"expert_used_count": (0, "u32")}, "expert_used_count"),
    "expert_used_count over expert_count": ({"expert_used_count": (17, "u32")}, "expert_used_count"),
    "expert_used_count 2^64-1": ({"expert_used_count": (U64_MAX, "u64")}, "expert_used_count"),
    "expert_count disagrees with the tensors": ({"expert_count": (8, "u32"), "expert_used_count": (2, "u32")},
                                                "expert_count"),
}


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("damage", list(METADATA_DAMAGE))
def test_metadata_llama_cpp_refuses_stops_every_command(tmp_path, damage, command):
    keys, key = METADATA_DAMAGE[damage]
    path = damaged(tmp_path, "qwen3moe", keys)
    line = one_line_error(invoke(*COMMANDS[command](path, tmp_path / "out")), path)
    assert f"qwen3moe.{key}" in line, line
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


# --- 2. absurd hyperparameters device-fit used to plan ---------------------------------------

ABSURD = [
    ("qwen3moe", {"embedding_length": (0, "u32")}, "embedding_length"),
    ("qwen3moe", {"embedding_length": None}, "embedding_length"),
    ("qwen3moe", {"context_length": (U64_MAX, "u64")}, "context_length"),
    ("mixtral", {"attention.head_count_kv": (0, "u32")}, "head_count_kv"),
    ("gpt-oss", {"attention.head_count_kv": (0, "u32")}, "head_count_kv"),
    ("qwen3moe", {"block_count": (5, "u32")}, "block_count"),
    ("deepseek2", {"block_count": (40, "u32")}, "block_count"),
    ("qwen3moe", {"feed_forward_length": (512.0, "f32")}, "feed_forward_length"),
    ("qwen3moe", {"feed_forward_length": ("512", "str")}, "feed_forward_length"),
    ("deepseek2", {"feed_forward_length": None}, "feed_forward_length"),
    ("mixtral", {"feed_forward_length": None}, "feed_forward_length"),
    ("dense", {"feed_forward_length": None}, "feed_forward_length"),
]


@pytest.mark.parametrize("builder,keys,key", ABSURD, ids=[f"{b}-{k}" for b, _, k in ABSURD])
def test_device_fit_refuses_absurd_hyperparameters(tmp_path, builder, keys, key):
    path = damaged(tmp_path, builder, keys)
    line = one_line_error(invoke(*COMMANDS["device-fit"](path, None)), path)
    assert key in line, line


def test_context_length_over_32_bits_stops_inspect_too(tmp_path):
    path = damaged(tmp_path, "qwen3moe", {"context_length": (U64_MAX, "u64")})
    line = one_line_error(invoke("inspect", path), path)
    assert "(key qwen3moe.context_length)" in line and "32-bit" in line


# --- 3. what llama.cpp's load_tensors refuses -------------------------------------------------

TENSOR_DAMAGE = [
    ("qwen3moe", {"drop": ["blk.1.attn_k.weight"]}, "blk.1.attn_k.weight", "missing"),
    ("qwen3moe", {"drop": ["blk.2.ffn_norm.weight"]}, "blk.2.ffn_norm.weight", "missing"),
    ("mixtral", {"drop": ["blk.3.ffn_gate_inp.weight"]}, "blk.3.ffn_gate_inp.weight", "missing"),
    ("glm4moe", {"drop": ["blk.2.ffn_up_shexp.weight"]}, "blk.2.ffn_up_shexp.weight", "missing"),
    ("deepseek2", {"drop": ["blk.0.ffn_down.weight"]}, "blk.0.ffn_down.weight", "missing"),
    ("gpt-oss", {"drop": ["blk.1.post_attention_norm.weight"]}, "blk.1.post_attention_norm.weight", "missing"),
    ("qwen3moe", {"shapes": {"blk.2.ffn_up_exps.weight": (256, 64, 16)}}, "blk.2.ffn_up_exps.weight", "wrong shape"),
    ("gpt-oss", {"shapes": {"blk.0.attn_q.weight": (256, 512)}}, "blk.0.attn_q.weight", "wrong shape"),
    # a folded dimension: [n_ff_exp, n_embd, n_expert] stored as [n_ff_exp * n_embd, n_expert]
    ("qwen3moe", {"shapes": {"blk.1.ffn_down_exps.weight": (128 * 256, 16)}}, "blk.1.ffn_down_exps.weight",
     "wrong shape"),
    ("deepseek2", {"keys": {"expert_shared_count": (2**31, "u32")}}, "blk.1.ffn_gate_shexp.weight", "wrong shape"),
]


@pytest.fixture(params=TENSOR_DAMAGE, ids=[f"{b}-{t}" for b, _, t, _ in TENSOR_DAMAGE])
def broken(request, tmp_path):
    builder, damage, tensor, reason = request.param
    return damaged(tmp_path / "model", builder, **damage), tensor, reason


@pytest.mark.parametrize("command", ["device-fit", "container-encode", "quantize"])
def test_device_fit_and_container_encode_refuse_what_llama_cpp_refuses(tmp_path, broken, command):
    path, tensor, reason = broken
    line = one_line_error(invoke(*COMMANDS[command](path, tmp_path / "out")), path)
    assert tensor in line and "llama.cpp" in line, line
    assert not (tmp_path / "out").exists()  # refused before anything is written
    if command == "device-fit" and reason == "missing":
        return  # (device-fit's own KV or graph reason may come first; it names the tensor too)
    assert reason in line, line


def test_inspect_describes_it_and_says_what_llama_cpp_will_refuse(broken):
    path, tensor, reason = broken
    result = invoke("inspect", path, "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["llama_refuses"][0]["tensor"] == tensor and reason in doc["llama_refuses"][0]["reason"]
    assert f"warning: llama.cpp will refuse this model: tensor {tensor}" in result.stderr
    line = one_line_error(invoke("inspect", path, "--json", "--strict"), path)
    assert line.startswith(f"error: {path}: --strict: tensor {tensor}"), line


def test_a_block_count_past_the_tensors_names_block_count(tmp_path):
    path = damaged(tmp_path, "qwen3moe", {"block_count": (40, "u32")})
    result = invoke("inspect", path, "--json")
    doc = json.loads(result.stdout)
    assert len(doc["llama_refuses"]) > 20
    assert doc["llama_refuses"][0]["reason"].startswith("tensor blk.4.attn_norm.weight is missing: block_count is 40 "
                                                        "but the file's tensors end at block 3")


# --- conservative: never refuse what llama.cpp loads -----------------------------------------


@pytest.mark.parametrize("path", factory.all_shared_models(), ids=lambda p: p.name)
def test_converter_models_pass(path):
    with open_model(path) as model:
        validate.check_model(model)
    assert invoke("inspect", path, "--json", "--strict").exit_code == 0


def test_every_synth_builder_and_preset_passes(tmp_path):
    failures = []
    for name in sorted(BUILDERS) + [f"preset:{name}" for name in sorted(PRESETS)]:
        spec = synth.preset(name[7:]) if name.startswith("preset:") else synth.tiny(name)
        path = synth.write_model(spec, tmp_path / f"{name.replace(':', '-')}.gguf", sparse=True)[0]
        try:
            with open_model(path) as model:
                validate.check_model(model)
        except Exception as err:  # noqa: BLE001 -- collected, the assertion lists them
            failures.append(f"{name}: {err}")
    assert failures == []


def test_inspect_strict_passes_a_good_model(tiny_models):
    result = invoke("inspect", tiny_models["deepseek2"], "--json", "--strict")
    assert result.exit_code == 0 and json.loads(result.stdout)["llama_refuses"] == []




def test_inspect_table_says_llama_cpp_will_not_load_it(tmp_path):
    from moetools.inspect_cmd import describe, tables

    path = damaged(tmp_path, "qwen3moe", drop=["blk.1.attn_k.weight"])
    with open_model(path) as model:
        overview = tables(describe(model))[0]
    assert ["llama.cpp loads it", "no: 1 tensor problem(s), first blk.1.attn_k.weight"] in overview.rows
