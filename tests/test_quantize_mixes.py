"""llama-quantize's type mixes and importance matrices: rules, imatrix files, golden tiers, bad input.

tests/data/quantize_llama_quantize_mixes.json holds, per tensor of the whole output (routed experts
included), the type and a digest of the bytes llama-quantize (llama.cpp 0c1e57098) wrote for the
mixes Q4_K_M, Q5_K_M, Q3_K_M and IQ4_XS of the shared Q8_0 models (--allow-requantize: both tools
quantize the Q8_0 weights dequantized to float32), and Q4_K_M with the imatrix files beside it (made
by llama-imatrix on a small text: GGUF imatrices for qwen3moe and mixtral, legacy .dat for
deepseekv3 and gptoss).
"""

import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from moetools import synth
from moetools.cli import cli
from moetools.errors import InputError
from moetools.formats.imatrix import read_imatrix
from moetools.gguf import open_model
from moetools.quantize import rules
from tests import factory
from tests.llama_tools import llama_tool

DATA = Path(__file__).parent / "data"
GOLDEN = DATA / "quantize_llama_quantize_mixes.json"


def invoke(*args):
    return CliRunner().invoke(cli, ["quantize", *map(str, args)])


def small(folder, **params):
    return factory.write_tiny(folder, "qwen3moe", types=synth.Types(resident=synth.F16, embed=synth.F16, output=synth.F16),
                              **({"n_layer": 2, "vocab": 256} | params))


# --- the mix rules on a synthetic tensor list ----------------------------------------------------

def moe_tensors(n_layer=8, tied=False, ne0=256):
    tensors = [("token_embd.weight", (ne0, 1024))]
    if not tied:
        tensors.append(("output.weight", (ne0, 1024)))
    for layer in range(n_layer):
        prefix = f"blk.{layer}."
        tensors += [(prefix + "attn_norm.weight", (ne0,)), (prefix + "attn_q.weight", (ne0, ne0)),
                    (prefix + "attn_k.weight", (ne0, 64)), (prefix + "attn_v.weight", (ne0, 64)),
                    (prefix + "attn_output.weight", (ne0, ne0)), (prefix + "ffn_gate_inp.weight", (ne0, 16)),
                    (prefix + "ffn_down_exps.weight", (128, ne0, 16)), (prefix + "ffn_up_exps.weight", (ne0, 128, 16))]
    return tensors


def types_of(mix, facts, tensors):
    return {name: choice.type for name, choice in rules.choose_types(mix, facts, tensors).items()}


QWEN_LIKE = rules.ModelFacts("qwen3moe", n_expert=16, n_layer=8, n_head=8, n_head_kv=2)


def test_q4_k_m_gives_more_bits_to_output_attn_v_and_ffn_down_by_layer():
    types = types_of(rules.Mix("Q4_K_M"), QWEN_LIKE, moe_tensors(ne0=512))
    assert types["output.weight"] == "q6_K" and types["token_embd.weight"] == "q4_K"
    # use_more_bits(i, 8): the first eighth, the last eighth, and every third layer between
    assert [types[f"blk.{i}.attn_v.weight"] for i in range(8)] == ["q6_K", "q4_K", "q4_K", "q6_K", "q4_K", "q4_K", "q6_K", "q6_K"]
    assert [types[f"blk.{i}.ffn_down_exps.weight"] for i in range(8)] == [
        "q8_0", "q5_0", "q5_0", "q8_0", "q5_0", "q5_0", "q8_0", "q8_0"]  # rows of 128: q6_K -> q8_0, q4_K -> q5_0
    assert types["blk.0.attn_norm.weight"] is None and types["blk.0.ffn_gate_inp.weight"] is None
    assert {types[f"blk.{i}.attn_q.weight"] for i in range(8)} == {"q4_K"}


def test_q3_k_m_and_eight_experts_and_tied_embeddings():
    types = types_of(rules.Mix("Q3_K_M"), QWEN_LIKE, moe_tensors())
    assert [types[f"blk.{i}.attn_v.weight"] for i in range(4)] == ["q5_K", "q5_K", "q4_K", "q4_K"]
    assert {types[f"blk.{i}.attn_output.weight"] for i in range(8)} == {"q4_K"}
    mixtral = rules.ModelFacts("llama", n_expert=8, n_layer=8, n_head=8, n_head_kv=2)
    types = types_of(rules.Mix("Q4_K_M"), mixtral, moe_tensors(tied=True))
    assert {types[f"blk.{i}.attn_v.weight"] for i in range(8)} == {"q8_0"}
    assert {types[f"blk.{i}.attn_k.weight"] for i in range(8)} == {"q8_0"}
    assert {types[f"blk.{i}.attn_output.weight"] for i in range(8)} == {"q5_K"}
    assert types["token_embd.weight"] == "q6_K"  # no output.weight: the embeddings are the output's


def test_dense_70b_and_iq4_without_imatrix():
    llama70 = rules.ModelFacts("llama", n_expert=0, n_layer=80, n_head=64, n_head_kv=8)
    tensors = [(f"blk.{i}.attn_v.weight", (256, 64)) for i in range(80)] + [(f"blk.{i}.ffn_down.weight", (512, 256)) for i in range(80)]
    types = types_of(rules.Mix("Q4_K_S"), llama70, tensors)
    assert types["blk.0.attn_v.weight"] == "q5_K" and types["blk.10.attn_v.weight"] == "q5_K"  # 70B: q4_K attn_v -> q5_K
    assert types["blk.9.ffn_down.weight"] == "q5_K" and types["blk.10.ffn_down.weight"] == "q4_K"  # first eighth
    for has_imatrix, first in ((False, "q5_K"), (True, "iq4_xs")):
        types = types_of(rules.Mix("IQ4_XS", has_imatrix=has_imatrix), llama70, tensors)
        assert types["blk.0.ffn_down.weight"] == first and types["blk.20.ffn_down.weight"] == "iq4_xs"
        assert types["blk.0.attn_v.weight"] == "q5_K"  # n_gqa 8


def test_pure_and_overrides():
    tensors = moe_tensors(ne0=512)
    pure = types_of(rules.Mix("Q4_K_M", pure=True), QWEN_LIKE, tensors)
    assert {t for t in pure.values() if t} == {"q4_K", "q5_0"}  # ffn_down_exps rows of 128 fall back
    mix = rules.Mix("Q4_K_M", output_type="q8_0", token_embd_type="q5_0", tensor_types=(("attn_(q|k)", "q8_0"), ("attn", "q5_1")))
    types = types_of(mix, QWEN_LIKE, tensors)
    assert types["output.weight"] == "q8_0" and types["token_embd.weight"] == "q5_0"
    assert types["blk.0.attn_q.weight"] == "q8_0" and types["blk.0.attn_k.weight"] == "q8_0"  # first match wins
    assert types["blk.0.attn_v.weight"] == "q5_1" and types["blk.0.attn_output.weight"] == "q5_1"
    # a manual type still falls back when the rows do not divide
    assert types_of(rules.Mix("Q4_K_M", tensor_types=(("ffn_down", "q6_K"),)), QWEN_LIKE, tensors)["blk.0.ffn_down_exps.weight"] == "q8_0"


def test_q2_k_s_requires_an_imatrix_except_embeddings_and_output():
    choices = rules.choose_types(rules.Mix("Q2_K_S"), QWEN_LIKE, moe_tensors())
    assert choices["blk.5.attn_q.weight"].requires_imatrix and choices["blk.5.attn_q.weight"].type == "q2_K"
    assert not choices["blk.0.ffn_down_exps.weight"].requires_imatrix  # q4_K in the first eighth (then q4_0: rows of 128)
    assert not choices["output.weight"].requires_imatrix and not choices["token_embd.weight"].requires_imatrix
    assert not any(choice.requires_imatrix for choice in rules.choose_types(rules.Mix("Q2_K"), QWEN_LIKE, moe_tensors()).values())


def test_llama_quantize_order_and_bad_layer():
    assert rules.weights_order(["blk.10.a", "output.weight", "blk.2.b", "blk.2.a", "token_embd.weight"]) == [
        "output.weight", "token_embd.weight", "blk.2.a", "blk.2.b", "blk.10.a"]
    with pytest.raises(ValueError, match=r"Bad layer 8 for tensor .blk.8.ffn_down_exps.weight.. Must be in \[0, 8\)"):
        rules.choose_types(rules.Mix("Q4_K_M"), QWEN_LIKE, moe_tensors(n_layer=10))


# --- imatrix files ---------------------------------------------------------------------------------

def write_dat(path, entries, trailer=(5, "some-text.txt")):
    """A legacy imatrix: {name: (ncall, float32 values)} plus the optional chunk-count/dataset trailer."""
    with open(path, "wb") as handle:
        handle.write(struct.pack("<i", len(entries)))
        for name, (ncall, values) in entries.items():
            raw = name.encode()
            handle.write(struct.pack("<i", len(raw)) + raw + struct.pack("<ii", ncall, len(values)))
            handle.write(np.asarray(values, dtype="<f4").tobytes())
        if trailer:
            handle.write(struct.pack("<i", trailer[0]) + struct.pack("<i", len(trailer[1])) + trailer[1].encode())
    return path


def write_gguf_imatrix(path, entries, metadata=True):
    """A GGUF imatrix: {name: (sums (n_mat, ne0), counts (n_mat,))}, as llama-imatrix writes it."""
    from gguf import GGUFWriter

    writer = GGUFWriter(str(path), "")
    writer.add_string("general.type", "imatrix")
    if metadata:
        writer.add_array("imatrix.datasets", ["some-text.txt"])
        writer.add_uint32("imatrix.chunk_count", 8)
        writer.add_uint32("imatrix.chunk_size", 128)
    for name, (sums, counts) in entries.items():
        writer.add_tensor(name + ".in_sum2", np.asarray(sums, dtype=np.float32))
        writer.add_tensor(name + ".counts", np.asarray(counts, dtype=np.float32).reshape(-1, 1))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_legacy_imatrix_is_divided_by_its_call_count(tmp_path):
    values = np.array([3.0, 1.0, 0.5, 7.0], dtype=np.float32)
    imatrix = read_imatrix(write_dat(tmp_path / "i.dat", {"blk.0.attn_q.weight": (3, values), "blk.0.attn_k.weight": (0, values)}))
    assert imatrix.legacy and imatrix.chunk_count == 5 and imatrix.datasets == ["some-text.txt"]
    assert imatrix.entries["blk.0.attn_q.weight"].tobytes() == (values / np.float32(3)).tobytes()
    assert imatrix.entries["blk.0.attn_k.weight"].tobytes() == values.tobytes()  # ncall 0: as stored
    assert read_imatrix(write_dat(tmp_path / "j.dat", {"a.weight": (1, values)}, trailer=None)).chunk_count == 0


def test_gguf_imatrix_is_divided_by_each_matrix_count(tmp_path):
    sums = np.array([[2.0, 4.0, 6.0], [1.0, 1.0, 1.0], [5.0, 5.0, 5.0]], dtype=np.float32)
    path = write_gguf_imatrix(tmp_path / "i.gguf", {"blk.0.ffn_down_exps.weight": (sums, [2.0, 0.0, 4.6])})
    imatrix = read_imatrix(path)
    assert not imatrix.legacy and imatrix.datasets == ["some-text.txt"] and imatrix.chunk_count == 8
    expected = np.concatenate([sums[0] / np.float32(2), np.ones(3, np.float32), sums[2] / np.float32(5)])  # lround(4.6) = 5
    assert imatrix.entries["blk.0.ffn_down_exps.weight"].tobytes() == expected.astype(np.float32).tobytes()


def test_real_imatrix_files_of_both_formats(tmp_path):
    gguf_file = read_imatrix(DATA / "quantize_imatrix_tiny-qwen3moe.gguf")
    dat_file = read_imatrix(DATA / "quantize_imatrix_tiny-deepseekv3.dat")
    assert gguf_file.format == "gguf" and dat_file.format == "dat"
    assert gguf_file.entries["blk.0.ffn_down_exps.weight"].size == 128 * 16  # one slice per expert
    assert all(np.all(values >= 0) for values in gguf_file.entries.values())


@pytest.mark.parametrize("cut", [3, 4, 6, 40, -1])
def test_truncated_legacy_imatrix(tmp_path, cut):
    whole = write_dat(tmp_path / "i.dat", {"blk.0.attn_q.weight": (1, np.ones(64, np.float32))}, trailer=None).read_bytes()
    (tmp_path / "cut.dat").write_bytes(whole[:cut])
    with pytest.raises(InputError, match="truncated|not an imatrix"):
        read_imatrix(tmp_path / "cut.dat")


def test_truncated_gguf_imatrix(tmp_path):
    whole = (DATA / "quantize_imatrix_tiny-qwen3moe.gguf").read_bytes()
    (tmp_path / "cut.gguf").write_bytes(whole[: len(whole) - 1000])
    with pytest.raises(InputError, match="truncated"):
        read_imatrix(tmp_path / "cut.gguf")


def test_gguf_imatrix_without_metadata_or_counts_or_with_nan(tmp_path):
    entry = {"a.weight": (np.ones((1, 32)), [1.0])}
    with pytest.raises(InputError, match="lacks imatrix.datasets, imatrix.chunk_count, imatrix.chunk_size"):
        read_imatrix(write_gguf_imatrix(tmp_path / "a.gguf", entry, metadata=False))
    from gguf import GGUFWriter

    writer = GGUFWriter(str(tmp_path / "b.gguf"), "")
    writer.add_array("imatrix.datasets", ["t"])
    writer.add_uint32("imatrix.chunk_count", 1)
    writer.add_uint32("imatrix.chunk_size", 1)
    writer.add_tensor("a.weight.in_sum2", np.ones((1, 32), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(InputError, match="'a.weight' has no counts"):
        read_imatrix(tmp_path / "b.gguf")
    with pytest.raises(InputError, match="non-finite"):
        read_imatrix(write_dat(tmp_path / "c.dat", {"a.weight": (1, np.array([1, np.nan], np.float32))}))
    (tmp_path / "d.dat").write_bytes(b"\x00\x00\x00\x00")
    with pytest.raises(InputError, match="not an imatrix"):
        read_imatrix(tmp_path / "d.dat")


# --- the command with mixes and imatrices ----------------------------------------------------------

def imatrix_for(model_path, tmp_path, size_of=lambda tensor: tensor.shape[0] * (tensor.shape[2] if len(tensor.shape) > 2 else 1)):
    """A legacy imatrix with an entry for every 2-D/3-D weight of the model (as llama-imatrix would)."""
    rng = np.random.default_rng(4)
    with open_model(model_path) as model:
        entries = {t.name: (2, rng.uniform(0.1, 5, size_of(t)).astype(np.float32))
                   for t in model.tensors if len(t.shape) > 1 and t.name.endswith("weight") and "token_embd" not in t.name}
    return write_dat(tmp_path / "model.imatrix.dat", entries)


def test_mix_tier_label_names_and_types(tmp_path):
    source = small(tmp_path)
    result = invoke(source, "--type", "q4_k,Q3_K_M", "--json")
    assert result.exit_code == 0, result.output
    tiers = {tier["tier"]: tier for tier in json.loads(result.stdout)["tiers"]}
    assert set(tiers) == {"Q4_K_M", "Q3_K_M"}
    assert tiers["Q4_K_M"]["gguf"].endswith("qwen3moe-Q4_K_M.gguf")
    with open_model(tiers["Q4_K_M"]["gguf"]) as out:
        assert out.headers[0].metadata["general.file_type"] == 15 and out.headers[0].metadata["moetools.tier"] == "Q4_K_M"
        assert out.tensor_by_name["output.weight"].type_name == "q6_K"
        # use_more_bits(i, 2): the last eighth (layer 1) gets q6_K
        assert [out.tensor_by_name[f"blk.{i}.attn_v.weight"].type_name for i in range(2)] == ["q4_K", "q6_K"]
    manifest = json.loads(Path(tiers["Q3_K_M"]["manifest"]).read_text())
    assert manifest["tier_label"] == "Q3_K_M" and manifest["file_type"] == 12


def test_imatrix_changes_the_tier_and_is_recorded(tmp_path):
    source = small(tmp_path)
    imatrix = imatrix_for(source, tmp_path)
    plain = json.loads(invoke(source, "--type", "Q4_K_M", "-o", tmp_path / "a", "--json").stdout)["tiers"][0]
    weighted = invoke(source, "--type", "Q4_K_M", "-o", tmp_path / "b", "--imatrix", imatrix, "--json")
    assert weighted.exit_code == 0, weighted.output
    weighted = json.loads(weighted.stdout)["tiers"][0]
    with open_model(plain["gguf"]) as a, open_model(weighted["gguf"]) as b:
        assert b.headers[0].metadata["quantize.imatrix.file"] == str(imatrix)
        assert b.headers[0].metadata["quantize.imatrix.entries_count"] > 0
        name = "blk.1.attn_q.weight"
        assert a.tensor_by_name[name].type_name == b.tensor_by_name[name].type_name == "q4_K"
        assert a.read_tensor_bytes(a.tensor_by_name[name]) != b.read_tensor_bytes(b.tensor_by_name[name])


def test_low_bit_mix_needs_an_imatrix(tmp_path):
    source = small(tmp_path)
    result = invoke(source, "--type", "Q2_K_S")
    assert result.exit_code == 2
    assert "Q2_K_S requires an importance matrix (tensor 'blk.0.attn_k.weight' is q2_K" in result.output
    assert invoke(source, "--type", "Q2_K_S", "--imatrix", imatrix_for(source, tmp_path), "--json").exit_code == 0
    assert invoke(source, "--type", "Q2_K", "-o", tmp_path / "plain", "--json").exit_code == 0  # Q2_K needs none


def test_imatrix_of_another_model_is_refused(tmp_path):
    source = small(tmp_path / "a")
    other = factory.write_tiny(tmp_path / "b", "mixtral", n_layer=3, vocab=256)
    result = invoke(source, "--type", "Q4_K_M", "--imatrix", imatrix_for(other, tmp_path / "b"))
    assert result.exit_code == 2
    assert "is not a tensor of qwen3moe.gguf" in result.output and "an importance matrix of another model" in result.output
    wrong_size = imatrix_for(source, tmp_path / "a", size_of=lambda tensor: tensor.shape[0] // 2)
    result = invoke(source, "--type", "Q4_K_M", "--imatrix", wrong_size)
    assert result.exit_code == 2
    assert "imatrix entry 'output.weight' holds 128 values, the tensor needs 256" in result.output and "another model" in result.output
    assert not (tmp_path / "a" / "device-fit").exists()


def test_truncated_imatrix_and_options_on_the_command_line(tmp_path):
    source = small(tmp_path)
    whole = imatrix_for(source, tmp_path).read_bytes()
    (tmp_path / "cut.dat").write_bytes(whole[:100])
    result = invoke(source, "--type", "Q4_K_M", "--imatrix", tmp_path / "cut.dat")
    assert result.exit_code == 2 and "truncated" in result.output
    result = invoke(source, "--type", "Q4_K_M", "--output-tensor-type", "q8_0", "--token-embedding-type", "q4_0",
                    "--tensor-type", "attn_q=q5_0", "--json")
    assert result.exit_code == 0, result.output
    with open_model(json.loads(result.stdout)["tiers"][0]["gguf"]) as out:
        assert [out.tensor_by_name[n].type_name for n in ("output.weight", "token_embd.weight", "blk.0.attn_q.weight")] == [
            "q8_0", "q4_0", "q5_0"]
    assert invoke(source, "--type", "Q4_K_M", "--tensor-type", "attn_q").exit_code == 2


# --- golden tiers: llama-quantize on the shared models --------------------------------------------

GOLDEN_MODELS = ["tiny-deepseekv3-Q8_0.gguf", "tiny-gptoss-Q8_0.gguf", "tiny-mixtral-Q8_0.gguf", "tiny-qwen3moe-Q8_0.gguf"]


def tensor_digests(path):
    import hashlib

    with open_model(path) as model:
        return {t.name: [t.type_name, hashlib.sha256(model.read_tensor_bytes(t)).hexdigest()[:16]] for t in model.tensors}


@pytest.mark.parametrize("model_name", GOLDEN_MODELS)
def test_mixes_equal_llama_quantize(tmp_path, shared_models, model_name):
    """Every tensor (type and bytes) of each --full mix, the routed experts included, equals what
    llama-quantize wrote for it, the imatrix-weighted Q4_K included; a resident-only tier holds
    exactly llama-quantize's resident tensors."""
    golden = json.loads(GOLDEN.read_text())["models"][model_name]
    path = next(path for path in shared_models if path.name == model_name)
    mixes = [label for label in golden if label not in ("imatrix", "Q4_K_M+imatrix")]
    result = invoke(path, "--full", "--no-error", "--type", ",".join(mixes), "-o", tmp_path / "mix", "--json")
    assert result.exit_code == 0, result.output
    runs = [(tier["tier"], tier["gguf"]) for tier in json.loads(result.stdout)["tiers"]]
    result = invoke(path, "--full", "--type", "Q4_K", "--imatrix", DATA / golden["imatrix"], "-o", tmp_path / "imatrix", "--json")
    assert result.exit_code == 0, result.output
    runs.append(("Q4_K_M+imatrix", json.loads(result.stdout)["tiers"][0]["gguf"]))
    assert len(runs) == 5
    for label, gguf in runs:
        mine = tensor_digests(gguf)
        assert set(mine) == set(golden[label]), label
        differ = [name for name in mine if mine[name] != golden[label][name]]
        assert not differ, f"{model_name} {label}: {len(differ)} tensors differ from llama-quantize, e.g. {differ[:3]}"
    with open_model(path) as model:
        experts = {tensor.name for tensor in model.expert_tensors}
    assert experts and any(golden["Q4_K_M"][name][0] != "q8_0" for name in experts)  # the experts were re-quantized
    result = invoke(path, "--type", "Q4_K_M", "-o", tmp_path / "resident", "--json")
    assert result.exit_code == 0, result.output
    mine = tensor_digests(json.loads(result.stdout)["tiers"][0]["gguf"])
    assert mine == {name: digest for name, digest in golden["Q4_K_M"].items() if name not in experts}


@pytest.mark.parametrize("model_name", GOLDEN_MODELS)
def test_llama_cpp_runs_a_full_mix(tmp_path, shared_models, model_name):
    """llama.cpp loads a --full Q3_K_M (experts re-quantized) and generates with it; its loader
    counts the tensor types llama-quantize's own Q3_K_M holds."""
    import re
    import subprocess
    from collections import Counter

    completion = llama_tool("llama-completion")
    path = next(path for path in shared_models if path.name == model_name)
    result = invoke(path, "--full", "--no-error", "--type", "Q3_K_M", "-o", tmp_path, "--json")
    assert result.exit_code == 0, result.output
    gguf = json.loads(result.stdout)["tiers"][0]["gguf"]
    proc = subprocess.run([completion, "-m", gguf, "-p", "The meaning of life", "-n", "8", "-no-cnv", "-nr", "--temp", "0",
                           "-s", "1", "-c", "256", "--no-warmup", "-t", "1", "-lv", "4"], capture_output=True, text=True, errors="replace", timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "The meaning of life" in proc.stdout and len(proc.stdout.strip()) > len("The meaning of life")  # generated text
    loaded = {kind: int(count) for kind, count in re.findall(r"llama_model_loader: - type +(\w+): +(\d+) tensors", proc.stderr)}
    golden = json.loads(GOLDEN.read_text())["models"][model_name]["Q3_K_M"]
    assert loaded == dict(Counter(kind for kind, _ in golden.values()))


def test_estimate_and_type_counts(tmp_path):
    source = small(tmp_path)
    doc = json.loads(invoke(source, "--type", "Q4_K_M,Q8_0", "--dry-run", "--json").stdout)
    q4, q8 = doc["tiers"]
    assert q4["types"]["q4_K"] > 0 and q4["types"]["q6_K"] > 0 and set(q8["types"]) == {"q8_0"}
    assert q4["estimated_seconds"] >= q8["estimated_seconds"] >= 0  # (rounded to 0.1 s: this model takes less)
    from moetools.quantize import kernels

    # K-quant searches cost more than Q8_0's rounding, and an imatrix search more than a plain one
    q4_k, q8_0 = kernels.GGML_TYPE_IDS["q4_K"], kernels.GGML_TYPE_IDS["q8_0"]
    assert kernels.estimated_seconds(q4_k, 10**9) > kernels.estimated_seconds(q8_0, 10**9) > 0
    assert kernels.estimated_seconds(q4_k, 10**9, imatrix=True) > kernels.estimated_seconds(q4_k, 10**9)
    assert kernels.estimated_seconds(q4_k, 10**9, threads=2) == kernels.estimated_seconds(q4_k, 10**9) / 2
    result = invoke(source, "--type", "Q4_K_M", "--json")
    assert result.exit_code == 0 and "quantize: about 1 s for 1 tier" in result.stderr


def test_numpy_engine_mixes_equal_llama_quantize(tmp_path, shared_models, monkeypatch):
    """With MOETOOLS_NO_JIT=1 (the numpy kernels, quantize's fallback without numba) a --full IQ4_XS
    and an imatrix-weighted Q4_K tier of a shared model still equal llama-quantize's, tensor for
    tensor: the numpy engine covers IQ4 and every imatrix kernel."""
    from moetools.quantize import kernels

    monkeypatch.setenv(kernels.NO_JIT_ENV, "1")
    monkeypatch.setattr(kernels, "_compiled", {})
    assert kernels.engine() == "numpy"
    model_name = "tiny-qwen3moe-Q8_0.gguf"
    golden = json.loads(GOLDEN.read_text())["models"][model_name]
    path = next(path for path in shared_models if path.name == model_name)
    runs = []
    for label, extra in (("IQ4_XS", ["--type", "IQ4_XS"]), ("Q4_K_M+imatrix", ["--type", "Q4_K", "--imatrix", DATA / golden["imatrix"]])):
        result = invoke(path, "--full", "--no-error", *extra, "-o", tmp_path / label, "--json")
        assert result.exit_code == 0, result.output
        runs.append((label, json.loads(result.stdout)["tiers"][0]["gguf"]))
    for label, gguf in runs:
        mine = tensor_digests(gguf)
        differ = [name for name in golden[label] if mine.get(name) != golden[label][name]]
        assert set(mine) == set(golden[label]) and not differ, f"{label}: {len(differ)} tensors differ, e.g. {differ[:3]}"
