"""`moetools quantize`: tensor rules, tier files and manifests, --full, split sources, bad input."""

import errno
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from gguf import GGMLQuantizationType, GGUFReader, quants

from moetools import synth
from moetools.cli import cli
from moetools.errors import OutputError, UsageError
from moetools.formats.resident_manifest import find_manifests, read_manifest
from moetools.gguf import model_stem, open_model
from moetools.quantize import command, core, kernels, rules
import moetools.synth.writer as synth_writer
from tests import factory

# Small enough that a test writes its tiers in well under a second.
SMALL = {"n_layer": 2, "vocab": 256}


def small(folder, arch="qwen3moe", types=None, **params):
    return factory.write_tiny(folder, arch, types=types or synth.Types(resident=synth.F16, embed=synth.BF16, output=synth.F32),
                              **(SMALL | params))


def invoke(*args):
    return CliRunner().invoke(cli, ["quantize", *map(str, args)])


def tensor_bytes(model, name):
    return model.read_tensor_bytes(model.tensor_by_name[name])


def dequantized(model, name):
    tensor = model.tensor_by_name[name]
    return kernels.dequantize(np.frombuffer(tensor_bytes(model, name), dtype=np.uint8), tensor.type_id, tuple(reversed(tensor.shape)))


# --- rules ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "shape", "reason"), [
    ("blk.0.attn_norm.weight", (256,), "1-D"),
    ("blk.0.attn_q.weight", (256, 256), None),
    ("blk.0.attn_q.bias", (256, 4), "not a weight"),
    ("blk.3.exp_probs_b.bias", (16,), "1-D"),
    ("blk.1.ffn_gate_inp.weight", (256, 16), "router"),
    ("blk.1.attn_q_a_norm.weight", (64, 2), "norm"),
    ("blk.2.ssm_conv1d_q.weight", (4, 1, 256), "small conv1d weight"),
    ("blk.2.ssm_a", (4, 4), "not a weight"),
    ("output.weight", (256, 1024), None),
    ("token_embd.weight", (256, 1024), None),
    ("blk.0.attn_k_b.weight", (32, 64, 4), None),
    ("blk.0.ffn_up.weight", (256, 1), "1-D"),  # ggml_n_dims ignores trailing 1s
])
def test_keep_reason(name, shape, reason):
    assert rules.keep_reason(name, shape) == reason


def test_keep_rules_by_architecture():
    assert rules.keep_reason("blk.0.attn_k_b.weight", (32, 64, 4), "glm5-next") == "kept in glm5-next"
    assert rules.keep_reason("blk.0.attn_k_b.weight", (32, 64, 4), "deepseek2") is None
    assert rules.keep_reason("blk.0.hc_proj.weight", (256, 256), "glm5-next") == "kept in glm5-next"


def test_keep_rules_agree_with_llama_quantize(shared_models):
    """The shared models were quantized to Q8_0 by llama-quantize: it quantized exactly the tensors
    we would, and kept the rest in F32."""
    for path in shared_models:
        with open_model(path) as model:
            for tensor in model.tensors:
                quantized = tensor.type_name == "q8_0"
                assert (rules.keep_reason(tensor.name, tensor.shape, model.architecture) is None) == quantized, (path.name, tensor.name)


@pytest.mark.parametrize(("row", "target", "expected"), [
    (256, "q4_K", ("q4_K", None)),
    (64, "q4_K", ("q5_0", "row of 64 not divisible by 256 (q4_K)")),
    (96, "q5_K", ("q5_1", "row of 96 not divisible by 256 (q5_K)")),
    (128, "q6_K", ("q8_0", "row of 128 not divisible by 256 (q6_K)")),
    (32, "q3_K", ("q4_0", "row of 32 not divisible by 256 (q3_K)")),
    (32, "q2_K", ("q4_0", "row of 32 not divisible by 256 (q2_K)")),
    (48, "q4_K", ("f16", "row of 48 not divisible by 256 (q4_K); unusual shape, must use f16")),
    (48, "q8_0", ("f16", "row of 48 not divisible by 32 (q8_0); unusual shape, must use f16")),
    (48, "bf16", ("bf16", None)),
])
def test_fallback(row, target, expected):
    assert rules.target_for(row, target) == expected


def test_parse_types():
    assert core.parse_types("Q8_0,q4_k, q6_K,q8_0") == ["q8_0", "q4_K", "q6_K"]
    assert core.parse_types("Q4_K_M,q4_K_S") == ["q4_K"]  # --pure: a mix name means its main type
    with pytest.raises(UsageError, match=r"unknown --type 'q7_0'; llama-quantize's names moetools writes: Q4_0, Q4_1,"):
        core.parse_types("q8_0,q7_0")
    with pytest.raises(UsageError, match="empty"):
        core.parse_types(" , ")


def test_parse_mixes():
    mixes = core.parse_mixes("q4_k,Q4_K_M,Q5_K,q3_k_s,iq4_xs,Q8_0")
    assert [mix.label for mix in mixes] == ["Q4_K_M", "Q5_K_M", "Q3_K_S", "IQ4_XS", "Q8_0"]  # Q4_K is Q4_K_M
    assert [mix.ftype for mix in mixes] == [15, 17, 11, 30, 7]
    assert [mix.label for mix in core.parse_mixes("Q4_K_M,q4_K", pure=True)] == ["q4_K"]
    with pytest.raises(UsageError, match=r"unsupported --type 'IQ2_XS': llama-quantize's IQ2_XS needs quantizers"):
        core.parse_mixes("IQ2_XS")
    with pytest.raises(UsageError, match=r"unknown --type 'Q4_K_X'; llama-quantize's names moetools writes: .*Q4_K_M.*"
                                         r"Q4_K \(= Q4_K_M\)"):
        core.parse_mixes("Q4_K_X")
    assert core.parse_tensor_types(["ATTN_V=Q8_0", "ffn_down_exps=q4_k"]) == (("attn_v", "q8_0"), ("ffn_down_exps", "q4_K"))
    for bad, message in (("attn_v", "expected NAME=TYPE"), ("attn_v=", "missing quantization type"),
                         ("attn_v=q9_9", "unsupported type 'q9_9'"), ("(=q8_0", "bad pattern")):
        with pytest.raises(UsageError, match=message):
            core.parse_tensor_types([bad])


# --- resident-only tiers ----------------------------------------------------------------------

def test_resident_tiers_with_manifests(tmp_path):
    source = small(tmp_path)
    result = invoke(source, "--pure", "--type", "q8_0,q4_K", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    folder = tmp_path / "device-fit" / "qwen3moe"
    assert doc["output_dir"] == str(folder)
    assert sorted(os.listdir(folder)) == ["qwen3moe-q4_K.gguf", "qwen3moe-q4_K.gguf.resident.json",
                                          "qwen3moe-q8_0.gguf", "qwen3moe-q8_0.gguf.resident.json"]
    assert [os.path.basename(path) for path in find_manifests(folder)] == ["qwen3moe-q4_K.gguf.resident.json", "qwen3moe-q8_0.gguf.resident.json"]
    with open_model(source) as src:
        for tier in doc["tiers"]:
            manifest = read_manifest(tier["manifest"])
            assert manifest.tier_label == tier["tier"]
            assert manifest.gguf == f"qwen3moe-{tier['tier']}.gguf"
            assert manifest.source_model == "qwen3moe.gguf"
            assert manifest.source_fingerprint == src.fingerprint
            assert manifest.rmse == tier["rmse"] > 0 and manifest.max_rel_error == tier["max_rel_error"] > 0
            with open_model(manifest.gguf_path) as out:
                assert [t.name for t in out.tensors] == [t.name for t in src.resident_tensors]
                assert not out.expert_tensors
                assert manifest.resident_bytes == out.total_bytes == tier["resident_bytes"]
                assert manifest.tensor_count == len(out.tensors)
                assert manifest.bits_per_weight == pytest.approx(out.total_bytes * 8 / sum(t.n_elements for t in out.tensors))
                assert out.metadata["general.file_type"] == rules.TARGETS[tier["tier"]]
                assert out.metadata["moetools.tier"] == tier["tier"]
                assert out.metadata["moetools.resident_only"] is True
                # the rest of the metadata is the source's, arrays included
                for key, value in src.metadata.items():
                    if key not in ("general.file_type",):
                        got, want = out.metadata[key], value
                        got, want = (got.load() if hasattr(got, "load") else got), (want.load() if hasattr(want, "load") else want)
                        assert got == want, key
                types = {t.name: t.type_name for t in out.tensors}
                assert types["blk.0.attn_norm.weight"] == "f32"  # 1-D: kept
                assert types["blk.0.ffn_gate_inp.weight"] == "f32"  # router: kept
                assert types["blk.0.attn_q.weight"] == tier["tier"]
                assert types["token_embd.weight"] == tier["tier"]
                # every kept tensor is byte for byte the source's; re-quantized bytes are ggml's
                for tensor in out.tensors:
                    if rules.keep_reason(tensor.name, tensor.shape):
                        assert tensor_bytes(out, tensor.name) == tensor_bytes(src, tensor.name)
                    else:
                        expected = kernels.quantize(dequantized(src, tensor.name), tensor.type_id)
                        assert tensor_bytes(out, tensor.name) == expected.tobytes(), tensor.name
            # gguf's own reader accepts the file and reads the same tensors
            reader = GGUFReader(manifest.gguf_path)
            assert [t.name for t in reader.tensors] == [t.name for t in src.resident_tensors]


def test_q8_0_tier_equals_gguf_quantize_and_error_is_measured(tmp_path):
    source = small(tmp_path)
    result = invoke(source, "--pure", "--type", "q8_0", "-o", tmp_path / "tiers", "--json", "--worst", "100")
    assert result.exit_code == 0, result.output
    tier = json.loads(result.stdout)["tiers"][0]
    sse = count = 0
    with open_model(source) as src, open_model(tier["gguf"]) as out:
        for entry in tier["worst_tensors"]:
            name = entry["tensor"]
            values = dequantized(src, name)
            assert tensor_bytes(out, name) == quants.quantize(values, GGMLQuantizationType.Q8_0).tobytes()
            error = dequantized(out, name) - values
            assert entry["rmse"] == pytest.approx(float(np.sqrt(np.mean(error.astype(np.float64) ** 2))), rel=1e-6)
            assert entry["max_rel_error"] == pytest.approx(float(np.abs(error).max()) / float(np.abs(values).max()), rel=1e-6)
            sse += float(np.sum(error.astype(np.float64) ** 2))
            count += values.size
    assert len(tier["worst_tensors"]) == tier["quantized"]
    assert tier["rmse"] == pytest.approx(np.sqrt(sse / count), rel=1e-6)
    rel = [entry["rel_rmse"] for entry in tier["worst_tensors"]]
    assert rel == sorted(rel, reverse=True)


def test_tensor_already_in_the_tier_is_copied(tmp_path):
    source = small(tmp_path, types=synth.Types())  # resident tensors already Q8_0
    result = invoke(source, "--pure", "--type", "q8_0", "--json")
    tier = json.loads(result.stdout)["tiers"][0]
    assert tier["quantized"] == 0 and tier["copied"] > 0 and tier["rmse"] == 0
    with open_model(source) as src, open_model(tier["gguf"]) as out:
        for tensor in out.tensors:
            assert tensor_bytes(out, tensor.name) == tensor_bytes(src, tensor.name)


def test_fallbacks_are_reported(tmp_path):
    source = small(tmp_path, "deepseek2")  # MLA: rows of 32, 64 and 128 values
    result = invoke(source, "--pure", "--type", "q4_K", "--json")
    tier = json.loads(result.stdout)["tiers"][0]
    fallbacks = {entry["tensor"]: entry for entry in tier["fallbacks"]}
    assert fallbacks["blk.0.attn_k_b.weight"] == {"tensor": "blk.0.attn_k_b.weight", "type": "q5_0",
                                                  "reason": "row of 32 not divisible by 256 (q4_K)"}
    assert read_manifest(tier["manifest"]).fallbacks == tier["fallbacks"]
    with open_model(tier["gguf"]) as out:
        assert out.tensor_by_name["blk.0.attn_k_b.weight"].type_name == "q5_0"
        assert out.tensor_by_name["blk.0.attn_kv_a_mqa.weight"].type_name == "q4_K"


def test_split_source(tmp_path):
    source = small(tmp_path, shards=3)
    assert source.name == "qwen3moe-00001-of-00003.gguf"
    result = invoke(tmp_path / "qwen3moe-00002-of-00003.gguf", "--pure", "--type", "q4_0", "--json")
    assert result.exit_code == 0, result.output
    tier = json.loads(result.stdout)["tiers"][0]
    assert tier["gguf"] == str(tmp_path / "device-fit" / "qwen3moe" / "qwen3moe-q4_0.gguf")
    with open_model(source) as src, open_model(tier["gguf"]) as out:
        assert len(src.shards) == 3 and len(out.shards) == 1
        assert "split.count" not in out.metadata
        assert [t.name for t in out.tensors] == [t.name for t in src.resident_tensors]


def test_dense_model_is_all_resident(tmp_path):
    source = small(tmp_path, "dense")
    result = invoke(source, "--pure", "--type", "q8_0", "--json")
    assert result.exit_code == 0, result.output
    assert "note: the model has no routed experts: every tensor is resident" in result.stderr
    doc = json.loads(result.stdout)
    assert doc["notes"] == ["the model has no routed experts: every tensor is resident"]
    with open_model(source) as src:
        assert doc["tiers"][0]["tensor_count"] == len(src.tensors)


def test_full_model(tmp_path):
    source = small(tmp_path, "gpt-oss", types=synth.Types(expert=synth.MXFP4, resident=synth.BF16, embed=synth.F16, output=synth.F16))
    result = invoke(source, "--full", "--pure", "--type", "q5_K", "--json")
    assert result.exit_code == 0, result.output
    tier = json.loads(result.stdout)["tiers"][0]
    assert tier["gguf"] == str(tmp_path / "gpt-oss-q5_K-full.gguf") and tier["manifest"] is None
    assert not list(tmp_path.glob("**/*.resident.json"))
    with open_model(source) as src, open_model(tier["gguf"]) as out:
        assert [t.name for t in out.tensors] == [t.name for t in src.tensors]
        assert out.metadata["moetools.resident_only"] is False
        assert out.metadata["general.file_type"] == 17
        for tensor in src.expert_tensors:  # re-quantized from MXFP4 as llama-quantize --pure does; biases kept
            if tensor.name.endswith(".weight"):
                written = out.tensor_by_name[tensor.name]
                assert written.type_name == ("q5_K" if tensor.shape[0] % 256 == 0 else "q5_1")  # rows of 128 fall back
                assert tensor_bytes(out, tensor.name) == kernels.quantize(dequantized(src, tensor.name).reshape(
                    -1, tensor.shape[0]), written.type_id).tobytes()
            else:
                assert out.tensor_by_name[tensor.name].type_name == "f32"
                assert tensor_bytes(out, tensor.name) == tensor_bytes(src, tensor.name)
        assert out.tensor_by_name["blk.0.attn_q.weight"].type_name == "q5_K"
        assert tier["resident_bytes"] == out.resident_bytes
        assert tier["total_tensor_bytes"] == out.total_bytes
        # the counts cover every tensor written, the re-quantized experts included
        changed = [t.name for t in src.tensors if out.tensor_by_name[t.name].type_id != t.type_id]
        assert tier["quantized"] == len(changed) > len([name for name in changed if "_exps" not in name])
        assert sum(tier["types"].values()) == tier["quantized"] + tier["copied"]
    reader = GGUFReader(tier["gguf"])
    assert len(reader.tensors) == len(src.tensors)


def test_table_output(tmp_path):
    source = small(tmp_path)
    doc = json.loads(invoke(source, "--pure", "--type", "q6_K", "--json").stdout)
    tables = command._tables(doc)
    assert tables[0].columns == ["tier", "resident", "bits/w", "RMSE", "rel RMSE", "max rel err", "requant", "fallbacks"]
    assert tables[0].rows[0][0] == "q6_K" and "written in " in tables[0].caption
    assert "qwen3moe-q6_K.gguf;" in tables[0].caption  # file names in the caption, where they wrap as text


def test_fallback_rows_differing_only_in_block_are_one_row(tmp_path):
    source = small(tmp_path, "deepseek2", n_layer=4)
    doc = json.loads(invoke(source, "--pure", "--type", "q4_K", "--dry-run", "--json").stdout)
    assert len(doc["tiers"][0]["fallbacks"]) > 4  # JSON keeps one entry per tensor
    fallbacks = command._tables(doc)[-1]
    assert fallbacks.columns == ["tier", "tensors", "written as", "reason"]
    names = [row[1] for row in fallbacks.rows]
    assert "blk.{0-3}.attn_k_b.weight (4)" in names
    assert len(names) == len(set(names)) < len(doc["tiers"][0]["fallbacks"])


@pytest.mark.parametrize("blocks,shown", [([0, 1, 2, 3], "0-3"), ([5], "5"), ([0, 2, 3, 4, 9, 11, 12], "0,2-4,9,11-12")])
def test_block_ranges(blocks, shown):
    assert command.block_ranges(blocks) == shown


def test_a_tier_larger_than_the_source_is_said_so(tmp_path):
    """A Q8_0 tier of a Q4_0 model re-quantizes 4-bit weights into 8 bits: bytes, no precision."""
    source = small(tmp_path, types=synth.Types(resident=synth.Q4_0, embed=synth.Q4_0, output=synth.Q4_0))
    doc = json.loads(invoke(source, "--pure", "--type", "q8_0,q4_0", "--dry-run", "--json").stdout)
    larger = [note for note in doc["notes"] if "larger than the source" in note]
    assert len(larger) == 1 and larger[0].startswith("q8_0 is ") and "adds bytes, not precision" in larger[0]


# --- bad input --------------------------------------------------------------------------------

def test_unknown_type(tmp_path):
    source = small(tmp_path)
    result = invoke(source, "--type", "Q4_0,Q4_K_Q")
    assert result.exit_code == 2
    assert result.output.startswith("error: unknown --type 'Q4_K_Q'; llama-quantize's names moetools writes: Q4_0, Q4_1, Q5_0, "
                                    "Q5_1, Q2_K, Q2_K_S, Q3_K_S, Q3_K_M, Q3_K_L, IQ4_NL, IQ4_XS, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M, "
                                    "Q6_K, Q8_0, F16, BF16, Q3_K (= Q3_K_M), Q4_K (= Q4_K_M), Q5_K (= Q5_K_M)")
    pure = invoke(source, "--pure", "--type", "q4_0,iq2_xs")
    assert pure.exit_code == 2
    assert "with --pure also the ggml types bf16, f16, q8_0, q6_K, q5_K, q5_1, q5_0, q4_K, q4_1, q4_0, iq4_nl, iq4_xs, q3_K, q2_K" \
        in pure.output
    assert not (tmp_path / "device-fit").exists()


def test_source_type_that_cannot_be_dequantized(tmp_path):
    source = small(tmp_path, types=synth.Types(resident=15))  # q8_K: gguf has no dequantizer
    result = invoke(source, "--pure", "--type", "q4_0")
    assert result.exit_code == 2
    assert "tensor 'blk.0.attn_q.weight' is q8_K, which cannot be dequantized to re-quantize it to q4_0" in result.output
    assert not (tmp_path / "device-fit").exists()


def test_non_finite_source_values(tmp_path):
    source = small(tmp_path, types=synth.Types(resident=synth.F32))
    with open_model(source) as model:
        tensor = model.tensor_by_name["blk.1.attn_k.weight"]
    with open(source, "r+b") as handle:
        handle.seek(tensor.offset + 4 * 256 * 3)
        handle.write(np.array([np.nan], dtype=np.float32).tobytes())
    result = invoke(source, "--pure", "--type", "q8_0")
    assert result.exit_code == 2
    assert "tensor 'blk.1.attn_k.weight' holds NaN or infinite values (row 3)" in result.output
    assert not (tmp_path / "device-fit").exists()  # nothing left behind, not even the folder the run created


def test_output_folder_not_writable(tmp_path):
    source = small(tmp_path)
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    result = invoke(source, "--pure", "--type", "q8_0", "-o", blocker / "tiers")
    assert result.exit_code == 2
    # refused before any work: the folder that should hold it is a file
    assert result.output == f"error: {blocker}: not a folder (-o {blocker / 'tiers'})\n"


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root can write into a read-only folder")
def test_output_folder_read_only(tmp_path):
    source = small(tmp_path)
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        result = invoke(source, "--pure", "--type", "q8_0", "-o", folder)
    finally:
        folder.chmod(0o755)
    assert result.exit_code == 2 and "not writable" in result.output


def test_disk_full_leaves_no_files(tmp_path, monkeypatch):
    source = small(tmp_path)
    calls = []
    real_write = core._write

    def failing_write(handle, data):
        calls.append(len(data))
        if len(calls) > 10:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_write(handle, data)

    monkeypatch.setattr(core, "_write", failing_write)
    result = invoke(source, "--pure", "--type", "q8_0,q4_K")
    assert result.exit_code == 2
    assert "No space left on device" in result.output and "qwen3moe-q" in result.output
    assert not (tmp_path / "device-fit").exists()  # nothing left behind, not even the folder the run created


def test_manifest_write_failure_removes_the_tier(tmp_path, monkeypatch):
    source = small(tmp_path)
    from moetools.formats import resident_manifest

    def failing(path, manifest, overwrite=True):
        raise OutputError(f"{path}: write failed: No space left on device")

    monkeypatch.setattr(resident_manifest, "write_manifest", failing)
    result = invoke(source, "--pure", "--type", "q8_0")
    assert result.exit_code == 2
    assert not (tmp_path / "device-fit").exists()  # nothing left behind, not even the folder the run created


def test_existing_output_needs_force(tmp_path):
    source = small(tmp_path)
    assert invoke(source, "--pure", "--type", "q4_0").exit_code == 0
    manifest = tmp_path / "device-fit" / "qwen3moe" / "qwen3moe-q4_0.gguf.resident.json"
    before = manifest.stat().st_mtime_ns
    result = invoke(source, "--pure", "--type", "q8_0,q4_0")
    assert result.exit_code == 2
    gguf_path = tmp_path / "device-fit" / "qwen3moe" / "qwen3moe-q4_0.gguf"
    assert result.output == f"error: {gguf_path}: already exists (use --force to replace it)\n"
    assert not (tmp_path / "device-fit" / "qwen3moe" / "qwen3moe-q8_0.gguf").exists()  # refused before writing anything
    assert invoke(source, "--pure", "--type", "q8_0,q4_0", "--force").exit_code == 0
    assert manifest.stat().st_mtime_ns >= before
    assert sorted(p.name for p in (tmp_path / "device-fit" / "qwen3moe").iterdir()) == [
        "qwen3moe-q4_0.gguf", "qwen3moe-q4_0.gguf.resident.json", "qwen3moe-q8_0.gguf", "qwen3moe-q8_0.gguf.resident.json"]


def test_missing_model(tmp_path):
    result = invoke(tmp_path / "nope.gguf", "--pure", "--type", "q8_0")
    assert result.exit_code == 2 and "nope.gguf" in result.output


def test_model_stem_naming(tmp_path):
    assert core.output_names("/m/k3-00001-of-00014.gguf", "q4_K") == (["k3-q4_K.gguf"], "k3-q4_K.gguf.resident.json")
    assert core.output_names("/m/k3.gguf", "q8_0", full=True) == (["k3-q8_0-full.gguf"], None)
    assert core.output_names("/m/k3-00002-of-00003.gguf", "q8_0", full=True, shards=3) == (
        ["k3-q8_0-full-00001-of-00003.gguf", "k3-q8_0-full-00002-of-00003.gguf", "k3-q8_0-full-00003-of-00003.gguf"], None)
    assert core.default_output_dir("/m/k3-00003-of-00014.gguf") == os.path.join("/m", "device-fit", model_stem("/m/k3.gguf"))
    assert core.default_output_dir("/m/k3.gguf", full=True) == "/m"


def test_shared_models_requantize(tmp_path, shared_models):
    """Real converter-written Q8_0 files: a q8_0 tier copies every tensor, a q4_0 tier re-quantizes."""
    for path in shared_models:
        out = tmp_path / path.stem
        result = invoke(path, "--pure", "--type", "q8_0,q4_0", "-o", out, "--json")
        assert result.exit_code == 0, result.output
        q8, q4 = json.loads(result.stdout)["tiers"]
        assert q8["quantized"] == 0 and q8["rmse"] == 0
        with open_model(path) as src, open_model(q4["gguf"]) as tier:
            assert tier.total_bytes == q4["resident_bytes"]
            for tensor in tier.tensors:
                source_type = src.tensor_by_name[tensor.name].type_name
                assert tensor.type_name == ("q4_0" if source_type == "q8_0" else source_type)
            assert Path(q8["gguf"]).stat().st_size == q8["file_bytes"]
            # every metadata key, value and value type of the source is carried over
            changed = {"general.file_type", "general.quantization_version", *core.TIER_KEYS}
            src_header, out_header = src.headers[0], tier.headers[0]
            for key, value in src_header.metadata.items():
                if key in changed:
                    continue
                assert out_header.value_types[key] == src_header.value_types[key], key
                got = out_header.metadata[key]
                got, value = (got.load() if hasattr(got, "load") else got), (value.load() if hasattr(value, "load") else value)
                assert got == value, key
            assert tier.metadata["general.quantization_version"] == 2


def test_quantized_sources_and_thread_counts(tmp_path):
    """K-quant and legacy sources are dequantized with gguf; the thread count never changes a byte."""
    source = small(tmp_path)
    first = json.loads(invoke(source, "--pure", "--type", "q4_K,q5_1", "-o", tmp_path / "a", "--threads", "1", "--json").stdout)["tiers"]
    again = json.loads(invoke(source, "--pure", "--type", "q4_K,q5_1", "-o", tmp_path / "b", "--threads", "2", "--json").stdout)["tiers"]
    for one, two in zip(first, again):
        assert Path(one["gguf"]).read_bytes() == Path(two["gguf"]).read_bytes()
    # a resident-only q4_K tier is itself a model (no experts): re-quantize it to q8_0
    result = invoke(first[0]["gguf"], "--pure", "--type", "q8_0", "-o", tmp_path / "c", "--json")
    assert result.exit_code == 0, result.output
    tier = json.loads(result.stdout)["tiers"][0]
    assert tier["quantized"] > 0
    with open_model(first[0]["gguf"]) as src, open_model(tier["gguf"]) as out:
        values = dequantized(src, "blk.0.attn_q.weight")
        assert tensor_bytes(out, "blk.0.attn_q.weight") == quants.quantize(values, GGMLQuantizationType.Q8_0).tobytes()


def test_custom_alignment_is_kept(tmp_path):
    spec = synth.tiny("qwen3moe", synth.Types(resident=synth.F16), **SMALL)
    source = synth.write_model(spec, tmp_path / "aligned.gguf", alignment=256)[0]
    result = invoke(source, "--pure", "--type", "q4_0", "--json")
    assert result.exit_code == 0, result.output
    tier = json.loads(result.stdout)["tiers"][0]
    with open_model(source) as src, open_model(tier["gguf"]) as out:
        assert out.headers[0].alignment == 256 == out.metadata["general.alignment"]
        assert all(tensor.offset % 256 == 0 for tensor in out.tensors)
        assert tensor_bytes(out, "blk.0.attn_norm.weight") == tensor_bytes(src, "blk.0.attn_norm.weight")
    assert len(GGUFReader(tier["gguf"]).tensors) == tier["tensor_count"]


def test_help_imports_neither_numpy_nor_gguf():
    import subprocess
    import sys

    code = ("import sys; from click.testing import CliRunner; from moetools.cli import cli; "
            "r = CliRunner().invoke(cli, ['quantize', '--help']); assert r.exit_code == 0, r.output; "
            "assert 'q4_K' in r.output; print(sorted(m for m in ('numpy', 'gguf') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


LLAMA_QUANTIZE_MODELS = ["tiny-deepseekv3-Q8_0.gguf", "tiny-gptoss-Q8_0.gguf", "tiny-mixtral-Q8_0.gguf", "tiny-qwen3moe-Q8_0.gguf"]


@pytest.mark.parametrize("model_name", LLAMA_QUANTIZE_MODELS)
def test_tiers_equal_llama_quantize(tmp_path, shared_models, model_name):
    """Every resident tensor (type and bytes) equals what llama-quantize --pure writes for that type,
    from a real converter-written model: keep rules, fallbacks and quantizers end to end."""
    import hashlib

    digests = json.loads((Path(__file__).parent / "data" / "quantize_llama_quantize_sha256.json").read_text())["models"][model_name]
    path = next(path for path in shared_models if path.name == model_name)
    result = invoke(path, "--pure", "--type", ",".join(digests), "-o", tmp_path, "--json")
    assert result.exit_code == 0, result.output
    for tier in json.loads(result.stdout)["tiers"]:
        with open_model(tier["gguf"]) as out:
            digest = hashlib.sha256()
            for name in sorted(tensor.name for tensor in out.tensors):
                tensor = out.tensor_by_name[name]
                digest.update(name.encode())
                digest.update(tensor.type_name.encode())
                digest.update(out.read_tensor_bytes(tensor))
        assert digest.hexdigest() == digests[tier["tier"]], f"{model_name} {tier['tier']} differs from llama-quantize"


def test_mxfp4_and_bf16_sources(tmp_path):
    source = small(tmp_path, types=synth.Types(resident=synth.MXFP4, embed=synth.BF16, output=synth.F16))
    result = invoke(source, "--pure", "--type", "q6_K", "--json")
    assert result.exit_code == 0, result.output
    tier = json.loads(result.stdout)["tiers"][0]
    with open_model(source) as src, open_model(tier["gguf"]) as out:
        assert src.tensor_by_name["blk.0.attn_q.weight"].type_name == "mxfp4"
        for name in ("blk.0.attn_q.weight", "token_embd.weight", "output.weight"):
            assert out.tensor_by_name[name].type_name == "q6_K"
            assert tensor_bytes(out, name) == kernels.quantize(dequantized(src, name), 14).tobytes()


def test_full_keep_split(tmp_path):
    source = small(tmp_path, "deepseek2", shards=3)
    result = invoke(source, "--full", "--keep-split", "--pure", "--type", "q4_K", "--json")
    assert result.exit_code == 0, result.output
    tier = json.loads(result.stdout)["tiers"][0]
    names = [os.path.basename(path) for path in tier["gguf_files"]]
    assert names == [f"deepseek2-q4_K-full-0000{k}-of-00003.gguf" for k in (1, 2, 3)]
    assert tier["file_bytes"] == sum(os.path.getsize(path) for path in tier["gguf_files"])
    with open_model(source) as src, open_model(tier["gguf_files"][1]) as out:  # any shard opens the set
        assert out.shards == tier["gguf_files"]
        assert [t.name for t in out.tensors] == [t.name for t in src.tensors]
        assert [t.shard for t in out.tensors] == [t.shard for t in src.tensors]
        assert out.metadata["general.file_type"] == 15 and out.metadata["split.count"] == 3
        assert "general.file_type" not in out.headers[1].metadata
        for tensor in src.expert_tensors:
            written = out.tensor_by_name[tensor.name]
            assert written.type_name == ("q4_K" if tensor.shape[0] % 256 == 0 else "q5_0")  # rows of 128 fall back
            assert tensor_bytes(out, tensor.name) == kernels.quantize(dequantized(src, tensor.name).reshape(
                -1, tensor.shape[0]), written.type_id).tobytes()
    for path in tier["gguf_files"]:
        assert len(GGUFReader(path).tensors) > 0
    usage = invoke(source, "--keep-split", "--pure", "--type", "q4_K")
    assert usage.exit_code == 2 and usage.output == "error: --keep-split applies to --full (a resident-only tier is always one file)\n"


def test_dry_run_writes_nothing(tmp_path):
    source = small(tmp_path, "deepseek2")
    dry = invoke(source, "--pure", "--type", "q8_0,q4_K", "--dry-run", "--json")
    assert dry.exit_code == 0, dry.output
    assert not (tmp_path / "device-fit").exists()
    planned = json.loads(dry.stdout)
    assert planned["notes"] == ["dry run: nothing written; error figures need a real run"]
    assert all(t["rmse"] is None and t["file_bytes"] is None and t["worst_tensors"] == [] for t in planned["tiers"])
    real = json.loads(invoke(source, "--pure", "--type", "q8_0,q4_K", "--json").stdout)
    for guess, done in zip(planned["tiers"], real["tiers"]):
        for key in ("resident_bytes", "bits_per_weight", "tensor_count", "fallbacks", "quantized", "kept", "copied", "gguf"):
            assert guess[key] == done[key], key
    # a dry run does not mind existing outputs
    assert invoke(source, "--pure", "--type", "q8_0", "--dry-run", "--json").exit_code == 0
    assert command._tables(planned)[0].rows[0][3:6] == ["-", "-", "-"]


def test_no_error_skips_the_measurement_and_writes_the_same_bytes(tmp_path):
    source = small(tmp_path)
    measured = invoke(source, "--full", "--pure", "--type", "q4_K", "-o", tmp_path / "a", "--json")
    skipped = invoke(source, "--full", "--pure", "--type", "q4_K", "-o", tmp_path / "b", "--json", "--no-error")
    assert measured.exit_code == 0 and skipped.exit_code == 0, skipped.output
    a, b = json.loads(measured.stdout)["tiers"][0], json.loads(skipped.stdout)["tiers"][0]
    assert a["rmse"] > 0 and a["worst_tensors"]
    assert (b["rmse"], b["rel_rmse"], b["max_rel_error"], b["worst_tensors"]) == (None, None, None, [])
    assert Path(a["gguf"]).read_bytes() == Path(b["gguf"]).read_bytes()
    refused = invoke(source, "--pure", "--type", "q4_K", "--no-error")
    assert refused.exit_code == 2 and "--no-error applies to --full" in refused.output


def test_row_tasks_keep_every_thread_busy_and_stay_bounded(tmp_path, monkeypatch):
    """A tensor smaller than a task is still split across the threads; a large one is cut into tasks
    of at most WORK_VALUES values; the ranges cover every row once, in order."""
    from moetools.quantize import core

    with open_model(small(tmp_path)) as model:
        tensor = model.tensor_by_name["blk.0.attn_q.weight"]
        n_rows = tensor.n_elements // tensor.shape[0]
        for threads in (1, 2, 3):
            tasks = core._row_tasks(tensor, threads)
            assert len(tasks) == min(threads, n_rows)
            assert [first for first, _ in tasks] == list(np.cumsum([0] + [n for _, n in tasks])[:-1])
            assert sum(n for _, n in tasks) == n_rows
        big = next(t for t in model.tensors if t.name == "token_embd.weight")
        monkeypatch.setattr(core, "WORK_VALUES", big.shape[0] * 3)  # three rows per task
        tasks = core._row_tasks(big, 2)
        assert all(n <= 3 for _, n in tasks) and sum(n for _, n in tasks) == big.n_elements // big.shape[0]


@pytest.mark.parametrize("figures", ["numpy", "source_figures"])
def test_squares_and_peak_match_float64_and_see_nan(figures):
    from moetools.quantize import kernels

    function = kernels.squares_and_peak if figures == "numpy" else kernels.source_figures  # compiled when numba is there
    rng = np.random.default_rng(3)
    values = (rng.standard_normal((64, 512)) * 0.05).astype(np.float32)
    total, peak = function(values)
    assert total == pytest.approx(float(np.sum(values.astype(np.float64) ** 2)), rel=1e-6)
    assert peak == float(np.abs(values).max())
    huge = np.array([[3e20, 1.0]], dtype=np.float32)  # a float32 row sum overflows: float64 then
    assert function(huge)[0] == pytest.approx(9e40, rel=1e-6)
    values[5, 7] = np.nan
    assert all(math.isnan(x) for x in function(values))
    assert function(np.zeros((0, 4), np.float32)) == (0.0, 0.0)


def test_a_vocabulary_is_copied_byte_for_byte_once_for_every_tier(tmp_path, monkeypatch):
    """A long string array (the tokens, the merges) goes to every tier as the bytes stored, a token
    that is not UTF-8 included (llama-quantize copies it so; decoding it replaced its bytes), and
    the source's metadata is gathered once for all the tiers of a run."""
    real_vocab = synth._vocab_arrays

    def vocab_with_raw_bytes(n_tokens, n_merges):
        tokens, token_types, merges = real_vocab(n_tokens, n_merges)
        tokens[5] = b"\xff\xfe raw"  # not UTF-8
        return tokens, token_types, merges

    monkeypatch.setattr(synth_writer, "_vocab_arrays", vocab_with_raw_bytes)  # where write_model looks it up
    source = small(tmp_path, merges=100)  # more than 64 strings: read lazily, as a real vocabulary's are
    gathered = []
    real_items = core._metadata_items
    monkeypatch.setattr(core, "_metadata_items", lambda model: gathered.append(model.path) or real_items(model))
    result = invoke(source, "--pure", "--type", "q8_0,q4_0", "-o", tmp_path / "tiers", "--json")
    assert result.exit_code == 0, result.output
    assert len(gathered) == 1
    with open_model(source) as model:
        stored = {key: model.headers[0].metadata[key].encoded() for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges")}
    assert b"\xff\xfe raw" in stored["tokenizer.ggml.tokens"]
    for tier in ("q8_0", "q4_0"):
        with open_model(tmp_path / "tiers" / f"{model_stem(source)}-{tier}.gguf") as out:
            assert {key: out.headers[0].metadata[key].encoded() for key in stored} == stored
