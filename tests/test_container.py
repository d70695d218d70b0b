"""container-encode / container-verify / container-read on models in llama.cpp's real layouts.

Every container is checked byte for byte against a reference built independently of moetools:
gguf's own GGUFReader gives each expert tensor as a numpy array (experts first), a record is packed
here with struct from the DESIGN section 3 layout, and the whole bank must equal the records. The
header's `fmt` follows the fork's code space (tests/fork_rules.py `fork_record_fmt`, from
ggml-moe-container.h MoecQuant / ggml-moe-wexp.h WexpFmt); expert biases are not in the records (the
fork reads ADD_ID biases from the GGUF, ggml-backend.cpp), so `corr_off` is 0.
"""

import json
import os
import struct
from pathlib import Path

import pytest
from click.testing import CliRunner

from moetools import synth
from moetools.cli import cli
from moetools.container import core
from moetools.container.reader import ContainerReader
from moetools.errors import InputError, OutputError
from moetools.formats import container as fmt
from moetools.gguf import expert_tensor_kind, open_model
from tests import factory, fork_rules

MOE_ARCHES = ("mixtral", "qwen3moe", "deepseek2", "gpt-oss", "kimi-k3")
HEADER = "<4sHHBBHIIIII"


# --- independent reference ---------------------------------------------------------------------


def align_up(value, alignment):
    return (value + alignment - 1) // alignment * alignment


def gguf_expert_arrays(model_path):
    """{block: {"gate"|"up"|"down"|"gate_bias"|...: [bytes per expert]}} read with gguf.GGUFReader."""
    import gguf

    model = open_model(model_path)
    out = {}
    for shard in model.shards:
        for tensor in gguf.GGUFReader(shard).tensors:
            kind = expert_tensor_kind(tensor.name)
            if kind is None:
                continue
            block, matrix = kind
            suffix = "" if tensor.name.endswith(".weight") else "_bias"
            experts = [tensor.data[e] for e in range(tensor.data.shape[0])]
            if matrix == "gate_up":
                half = experts[0].shape[0] // 2
                out.setdefault(block, {})["gate" + suffix] = [e[:half].tobytes() for e in experts]
                out.setdefault(block, {})["up" + suffix] = [e[half:].tobytes() for e in experts]
            else:
                out.setdefault(block, {})[matrix + suffix] = [e.tobytes() for e in experts]
    model.close()
    return out


def reference_container(model_path):
    """(record_bytes, {block: expected bank bytes}) packed by hand from the GGUF."""
    arrays = gguf_expert_arrays(model_path)
    model = open_model(model_path)
    types = {}
    for tensor in model.tensors:
        kind = expert_tensor_kind(tensor.name)
        if kind and tensor.name.endswith(".weight"):
            types.setdefault(kind[0], {})[kind[1]] = tensor.type_id
    model.close()

    def size(block, name):
        return len(arrays[block][name][0])

    max_sum = sum(max(size(b, name) for b in arrays) for name in ("gate", "up", "down"))
    record_bytes = align_up(32 + max_sum, 16384)  # ggml-moe-gguf-source.h GgufMoeSource: no biases
    banks = {}
    for block, slices in arrays.items():
        n_expert = len(slices["gate"])
        record_fmt = fork_rules.fork_record_fmt(types[block].get("gate", types[block].get("gate_up")))
        records = []
        for e in range(n_expert):
            gate, up, down = slices["gate"][e], slices["up"][e], slices["down"][e]
            gate_off = 32
            up_off = gate_off + len(gate)
            down_off = up_off + len(up)
            header = struct.pack(HEADER, b"WEXP", block, e, record_fmt, 0, 0, gate_off, up_off, down_off, 0,
                                 record_bytes // 4096)
            body = header + gate + up + down
            records.append(body + bytes(record_bytes - len(body)))
        banks[block] = b"".join(records)
    return record_bytes, banks


def assert_matches_reference(folder, model_path):
    record_bytes, banks = reference_container(model_path)
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["record_bytes"] == record_bytes
    assert manifest["layers"] == sorted(banks)
    assert manifest["n_layers"] == len(banks)
    for block, expected in banks.items():
        assert (folder / f"experts-L{block}.bin").read_bytes() == expected, f"bank {block}"
    return manifest


# --- models built here -------------------------------------------------------------------------


def merged_gate_up_spec(arch="gpt-oss"):
    """`arch` with each layer's gate and up expert tensors (and biases) merged into ffn_gate_up_exps."""
    spec = synth.tiny(arch)
    tensors = []
    for tensor in spec.tensors:
        kind = expert_tensor_kind(tensor.name)
        if kind and kind[1] == "up":
            continue
        if kind and kind[1] == "gate":
            shape = list(tensor.shape)
            shape[1 if len(shape) == 3 else 0] *= 2
            suffix = tensor.name.rsplit(".", 1)[1]
            tensor = synth.TensorSpec(f"blk.{kind[0]}.ffn_gate_up_exps.{suffix}", tuple(shape), tensor.type_id)
        tensors.append(tensor)
    spec.tensors = tensors
    return spec


def inconsistent_spec():
    """qwen3moe whose blk.1 up tensor holds 8 experts while gate and down hold 16."""
    spec = synth.tiny("qwen3moe")
    for index, tensor in enumerate(spec.tensors):
        if tensor.name == "blk.1.ffn_up_exps.weight":
            spec.tensors[index] = synth.TensorSpec(tensor.name, tensor.shape[:2] + (8,), tensor.type_id)
    return spec


@pytest.fixture(scope="module")
def models(tmp_path_factory, tiny_models):
    folder = tmp_path_factory.mktemp("container-models")
    out = dict(tiny_models)
    out["merged"] = synth.write_model(merged_gate_up_spec(), folder / "merged.gguf")[0]
    out["mixed"] = factory.write_tiny(folder, "qwen3moe", name="mixed", types=synth.Types(expert=synth.Q4_0, expert_down=synth.Q8_0))
    out["split"] = factory.write_tiny(folder / "split", "qwen3moe", shards=3)
    out["inconsistent"] = synth.write_model(inconsistent_spec(), folder / "inconsistent.gguf")[0]
    return {name: os.fspath(path) for name, path in out.items()}


def run(*args):
    return CliRunner().invoke(cli, [str(arg) for arg in args], catch_exceptions=False)


def encode(model_path, folder, *extra):
    result = run("container-encode", model_path, "-o", folder, "--json", *extra)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# --- round trips -------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", MOE_ARCHES)
def test_every_architecture_matches_the_reference(arch, models, tmp_path):
    doc = encode(models[arch], tmp_path)
    manifest = assert_matches_reference(tmp_path, models[arch])
    model = open_model(models[arch])
    summary = model.summary
    assert manifest["version"] == 1
    assert manifest["model"] == arch
    assert manifest["fmt"] == "q8_0" and "matrix_types" not in manifest
    assert manifest["experts_per_layer"] == summary.expert_count
    assert manifest["layers"] == summary.moe_layers
    assert manifest["activated_per_token"] == summary.expert_used_count * len(summary.moe_layers)
    assert manifest["record_bytes"] % 16384 == 0
    assert manifest["source"]["fingerprint"] == model.fingerprint
    assert doc["banks_written"] == summary.moe_layers and doc["banks_skipped"] == []
    assert doc["container_bytes"] == manifest["record_bytes"] * manifest["experts_per_layer"] * len(summary.moe_layers)
    # a leading dense block has no bank, and bank names are block numbers, not bank indices
    if summary.leading_dense_block_count:
        assert manifest["layers"][0] == summary.leading_dense_block_count
        assert not (tmp_path / "experts-L0.bin").exists()
    model.close()
    verified = run("container-verify", tmp_path, "--model", models[arch], "--json")
    assert verified.exit_code == 0, verified.output
    assert json.loads(verified.output)["records_checked"] == summary.expert_count * len(summary.moe_layers)


def test_gpt_oss_biases_stay_in_the_gguf_and_corr_off_is_zero(models, tmp_path):
    """corr_off is the fork's FP16 corrections (ggml-moe-wexp.h); the fork's server fetches only
    MUL_MAT_ID weights from the container and never the ADD_ID biases (fork_rules.fork_server_fetch)."""
    doc = encode(models["gpt-oss"], tmp_path)
    manifest = fmt.read_manifest(tmp_path)
    bank = manifest.banks[0]
    assert [piece.name for piece in bank.slices] == ["gate", "up", "down"]
    record = (tmp_path / f"experts-L{bank.layer}.bin").read_bytes()[:manifest.record_bytes]
    assert struct.unpack_from("<I", record, 24)[0] == 0
    assert manifest.extra["expert_biases"] == "gguf"
    model = open_model(models["gpt-oss"])
    weights = sum(t.n_bytes for t in model.expert_tensors if t.name.endswith(".weight"))
    model.close()
    assert doc["expert_bytes"] == weights


def test_header_fmt_is_the_forks_code_not_a_ggml_type_id(tmp_path):
    """A q4_0 gate's ggml id is 2, which the fork reads as MOEC_Q_IQ2: the byte is the fork's code."""
    cases = {"q4_0": (synth.Q4_0, fork_rules.MOEC_Q_UNKNOWN), "mxfp4": (synth.MXFP4, fork_rules.MOEC_Q_MXFP4)}
    for name, (type_id, code) in cases.items():
        model = factory.write_tiny(tmp_path / name, "qwen3moe", types=synth.Types(expert=type_id))
        encode(model, tmp_path / f"c-{name}")
        assert (tmp_path / f"c-{name}" / "experts-L0.bin").read_bytes()[8] == code, name
        read = run("container-read", tmp_path / f"c-{name}", "--layer", 0, "--expert", 1, "--json")
        assert json.loads(read.output)["header"]["fmt"] == code


def test_merged_gate_up_is_split_into_halves(models, tmp_path):
    encode(models["merged"], tmp_path)
    manifest = assert_matches_reference(tmp_path, models["merged"])
    bank = manifest["banks"][0]
    assert bank["gate"]["bytes"] == bank["up"]["bytes"]
    assert bank["corr"] == []  # the merged gate_up biases stay in the GGUF
    # same bytes as the unmerged layout: halves of the merged tensor are exactly gate and up
    arrays = gguf_expert_arrays(models["merged"])
    with ContainerReader(tmp_path) as reader:
        expert = reader.read_expert(2, 5)
    assert expert.slices["gate"] == arrays[2]["gate"][5] and expert.slices["up"] == arrays[2]["up"][5]


def test_mixed_expert_types(models, tmp_path):
    doc = encode(models["mixed"], tmp_path)
    assert doc["fmt"] == "mixed"
    assert doc["matrix_types"] == {"gate": "q4_0", "up": "q4_0", "down": "q8_0"}
    manifest = assert_matches_reference(tmp_path, models["mixed"])
    assert manifest["banks"][0]["down"]["type"] == "q8_0"
    record = (tmp_path / "experts-L0.bin").read_bytes()[:32]
    assert record[8] == fork_rules.MOEC_Q_UNKNOWN  # q4_0 + q8_0: no code in the fork's space (not ggml id 2)


def test_split_source_equals_single_file(models, tmp_path):
    encode(models["split"], tmp_path / "split")
    encode(models["qwen3moe"], tmp_path / "single")
    assert_matches_reference(tmp_path / "split", models["split"])
    for name in sorted(os.listdir(tmp_path / "single")):
        if name.endswith(".bin"):
            assert (tmp_path / "split" / name).read_bytes() == (tmp_path / "single" / name).read_bytes()
    assert json.loads((tmp_path / "split" / "manifest.json").read_text())["source"]["shards"] == 3


def test_real_converter_models(shared_models, tmp_path):
    for path in shared_models:
        folder = tmp_path / path.stem
        encode(path, folder)
        assert_matches_reference(folder, path)
        result = run("container-verify", folder, "--model", path, "--json")
        assert result.exit_code == 0, result.output


def test_record_header_fields(models, tmp_path):
    """Each header field at its DESIGN offset, read with struct one field at a time."""
    encode(models["deepseek2"], tmp_path)
    manifest = fmt.read_manifest(tmp_path)
    bank = manifest.bank(2)
    data = (tmp_path / "experts-L2.bin").read_bytes()
    r = manifest.record_bytes
    for expert in (0, 7, manifest.experts_per_layer - 1):
        rec = data[expert * r:(expert + 1) * r]
        assert rec[0:4] == b"WEXP"
        assert struct.unpack_from("<H", rec, 4)[0] == 2
        assert struct.unpack_from("<H", rec, 6)[0] == expert
        assert rec[8] == fork_rules.MOEC_Q_UNKNOWN  # q8_0 has no code in the fork's space
        assert rec[9] == 0  # flags
        assert struct.unpack_from("<H", rec, 10)[0] == 0  # codebook
        assert struct.unpack_from("<I", rec, 12)[0] == 32
        assert struct.unpack_from("<I", rec, 16)[0] == 32 + bank.slice("gate").n_bytes
        assert struct.unpack_from("<I", rec, 20)[0] == 32 + bank.slice("gate").n_bytes + bank.slice("up").n_bytes
        assert struct.unpack_from("<I", rec, 24)[0] == 0  # no biases
        assert struct.unpack_from("<I", rec, 28)[0] == r // 4096
        assert rec[bank.payload_bytes:] == bytes(r - bank.payload_bytes)
    assert len(data) == r * manifest.experts_per_layer


def test_header_pack_unpack_round_trip():
    header = fmt.RecordHeader(layer=0x1234, expert=0x5678, fmt=12, flags=0, codebook=0x9ABC, gate_off=32,
                              up_off=0x10000, down_off=0x20000, corr_off=0x30000, record_4k_blocks=7)
    packed = header.pack()
    assert packed[:12] == b"WEXP\x34\x12\x78\x56\x0c\x00\xbc\x9a"
    assert packed[28:] == struct.pack("<I", 7)
    assert fmt.RecordHeader.unpack(packed) == header
    with pytest.raises(ValueError):
        fmt.RecordHeader.unpack(b"XEXP" + packed[4:])


def test_batch_size_does_not_change_the_bytes(models, tmp_path):
    """One record per batch (the obvious slow path) and large batches write identical banks."""
    model = open_model(models["gpt-oss"])
    core.encode_container(model, tmp_path / "one", batch_bytes=1)
    core.encode_container(model, tmp_path / "many", batch_bytes=3 * 1024 * 1024)
    model.close()
    for name in sorted(os.listdir(tmp_path / "one")):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "many" / name).read_bytes(), name


def test_reader_direct_and_buffered_agree(models, tmp_path):
    encode(models["kimi-k3"], tmp_path)
    arrays = gguf_expert_arrays(models["kimi-k3"])
    with ContainerReader(tmp_path, direct=True) as direct, ContainerReader(tmp_path) as buffered:
        for layer in direct.manifest.layers:
            for expert in (0, 9, 15):
                a, b = direct.read_expert(layer, expert), buffered.read_expert(layer, expert)
                assert a.record == b.record
                assert a.slices["down"] == arrays[layer]["down"][expert]


# --- resume, interruption, full disk -----------------------------------------------------------


def test_rerun_skips_complete_banks(models, tmp_path):
    first = encode(models["qwen3moe"], tmp_path)
    again = encode(models["qwen3moe"], tmp_path)
    assert again["banks_written"] == [] and again["banks_skipped"] == first["banks_written"]
    assert again["bytes_read"] == 0


def test_interrupted_encode_then_rerun_finishes(models, tmp_path, monkeypatch):
    real_write = core._write_all
    calls = {"n": 0}

    def interrupt_in_second_bank(fd, view):
        calls["n"] += 1
        if calls["n"] == 2:
            real_write(fd, view[: len(view) // 2])  # half a batch reaches the temporary file
            raise KeyboardInterrupt
        real_write(fd, view)

    monkeypatch.setattr(core, "_write_all", interrupt_in_second_bank)
    model = open_model(models["qwen3moe"])
    with pytest.raises(KeyboardInterrupt):
        core.encode_container(model, tmp_path, batch_bytes=1 << 40)
    names = sorted(os.listdir(tmp_path))
    assert names == ["experts-L0.bin", "experts-L0.xxh3"]  # nothing half-written under a final name, no manifest
    # a killed process (no cleanup) would leave its temporary twin behind: the rerun discards it
    (tmp_path / ".experts-L1.bin.abcd.tmp").write_bytes(b"half a bank")
    monkeypatch.setattr(core, "_write_all", real_write)
    result = core.encode_container(model, tmp_path)
    model.close()
    assert result.banks_skipped == [0] and result.banks_written == [1, 2, 3]
    assert not [name for name in os.listdir(tmp_path) if name.endswith(".tmp")]
    assert_matches_reference(tmp_path, models["qwen3moe"])


def test_rerun_rewrites_a_corrupted_bank(models, tmp_path):
    encode(models["mixtral"], tmp_path)
    bank = tmp_path / "experts-L2.bin"
    data = bytearray(bank.read_bytes())
    data[5000] ^= 0xFF
    bank.write_bytes(bytes(data))
    doc = encode(models["mixtral"], tmp_path)
    assert doc["banks_written"] == [2] and doc["banks_skipped"] == [0, 1, 3]
    assert_matches_reference(tmp_path, models["mixtral"])


def test_full_disk_is_one_clean_error(models, tmp_path, monkeypatch):
    def no_space(fd, view):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(core, "_write_all", no_space)
    result = CliRunner().invoke(cli, ["container-encode", models["qwen3moe"], "-o", str(tmp_path)])
    assert result.exit_code == 2
    assert "No space left on device" in result.output and "experts-L0.bin" in result.output
    assert "Traceback" not in result.output
    assert os.listdir(tmp_path) == []  # temporary bank removed, nothing under a final name


# --- bad input ---------------------------------------------------------------------------------


def test_model_without_experts(models, tmp_path):
    result = CliRunner().invoke(cli, ["container-encode", models["dense"], "-o", str(tmp_path / "c")])
    assert result.exit_code == 2
    assert "no routed-expert tensors" in result.output
    with pytest.raises(InputError):
        core.plan_container(open_model(models["dense"]))


def test_inconsistent_expert_counts(models, tmp_path):
    result = CliRunner().invoke(cli, ["container-encode", models["inconsistent"], "-o", str(tmp_path / "c")])
    assert result.exit_code == 2
    # the shared validation (moetools.gguf.validate, issue 32) says it as inspect and device-fit do
    assert "(key qwen3moe.expert_count): expert tensor 'blk.1.ffn_up_exps.weight' holds 8 experts but expert_count is 16" \
        in result.output
    assert not (tmp_path / "c").exists() or not os.listdir(tmp_path / "c")


def verify(folder, *extra):
    result = run("container-verify", folder, "--json", *extra)
    return result.exit_code, json.loads(result.output) if result.output.strip().startswith("{") else result.output


def test_verify_names_a_corrupt_slice(models, tmp_path):
    encode(models["qwen3moe"], tmp_path)
    manifest = fmt.read_manifest(tmp_path)
    bank = manifest.bank(1)
    with open(tmp_path / "experts-L1.bin", "r+b") as handle:
        handle.seek(5 * manifest.record_bytes + bank.slice("down").offset + 10)
        handle.write(b"\xAA\xBB")
    code, doc = verify(tmp_path, "--no-source")
    assert code == 1 and not doc["ok"]
    assert [(p["layer"], p["expert"], p["field"]) for p in doc["problems"]] == [(1, 5, "checksum")]
    code, doc = verify(tmp_path, "--model", models["qwen3moe"])
    assert code == 1
    fields = {(p["layer"], p["expert"], p["field"]) for p in doc["problems"]}
    assert fields == {(1, 5, "checksum"), (1, 5, "down")}
    down = next(p for p in doc["problems"] if p["field"] == "down")
    assert "byte 10 of the slice" in down["detail"]


def test_verify_names_a_corrupt_header_field_and_padding(models, tmp_path):
    encode(models["mixtral"], tmp_path)
    manifest = fmt.read_manifest(tmp_path)
    with open(tmp_path / "experts-L3.bin", "r+b") as handle:
        handle.seek(2 * manifest.record_bytes + 6)
        handle.write(struct.pack("<H", 7))  # expert field says 7 in record 2
        handle.seek(4 * manifest.record_bytes - 1)
        handle.write(b"\x01")  # last padding byte of record 3
    code, doc = verify(tmp_path)
    assert code == 1
    fields = [(p["layer"], p["expert"], p["field"]) for p in doc["problems"]]
    assert (3, 2, "expert") in fields and (3, 3, "padding") in fields
    expert_problem = next(p for p in doc["problems"] if p["field"] == "expert")
    assert expert_problem["detail"] == "header says 7, expected 2"


def test_verify_truncated_bank_and_missing_files(models, tmp_path):
    encode(models["qwen3moe"], tmp_path)
    manifest = fmt.read_manifest(tmp_path)
    with open(tmp_path / "experts-L2.bin", "r+b") as handle:
        handle.truncate(manifest.bank_bytes - 100)
    os.unlink(tmp_path / "experts-L3.xxh3")
    os.unlink(tmp_path / "experts-L0.bin")
    code, doc = verify(tmp_path)
    assert code == 1
    fields = {(p["layer"], p["field"]) for p in doc["problems"]}
    assert fields == {(2, "bank size"), (3, "checksums"), (0, "bank")}
    with ContainerReader(tmp_path) as reader:
        reader.read_expert(2, 0)  # a record before the cut is still readable
        with pytest.raises(Exception, match="truncated"):
            reader.read_expert(2, manifest.experts_per_layer - 1)
    result = CliRunner().invoke(cli, ["container-read", str(tmp_path), "--layer", "2", "--expert", "15"])
    assert result.exit_code == 2 and "truncated" in result.output


def test_manifest_of_another_model(models, tmp_path):
    encode(models["qwen3moe"], tmp_path)
    code, doc = verify(tmp_path, "--model", models["mixed"])
    assert code == 1
    assert [p["field"] for p in doc["problems"]] == ["model"]
    assert "not from this model" in doc["problems"][0]["detail"]
    # another model's manifest dropped into this container: the sidecars' fingerprints give it away
    encode(models["mixed"], tmp_path / "other")
    original = (tmp_path / "manifest.json").read_bytes()
    (tmp_path / "manifest.json").write_bytes((tmp_path / "other" / "manifest.json").read_bytes())
    code, doc = verify(tmp_path, "--max-problems", 100000)
    assert code == 1
    assert {p["layer"] for p in doc["problems"] if p["field"] == "checksums"} == {0, 1, 2, 3}
    (tmp_path / "manifest.json").write_bytes(original)
    result = CliRunner().invoke(cli, ["container-encode", models["mixtral"], "-o", str(tmp_path)])
    assert result.exit_code == 2 and "holds the container of another model (qwen3moe" in result.output
    doc = encode(models["mixtral"], tmp_path, "--force")
    assert doc["banks_written"] == [0, 1, 2, 3]
    assert_matches_reference(tmp_path, models["mixtral"])
    assert verify(tmp_path, "--model", models["mixtral"])[0] == 0


def test_unreadable_manifest_is_exit_2(models, tmp_path):
    encode(models["qwen3moe"], tmp_path)
    doc = json.loads((tmp_path / "manifest.json").read_text())
    doc["record_bytes"] = doc["record_bytes"] + 512
    (tmp_path / "manifest.json").write_text(json.dumps(doc))
    result = CliRunner().invoke(cli, ["container-verify", str(tmp_path)])
    assert result.exit_code == 2 and "record_bytes" in result.output and "multiple of 4096" in result.output
    (tmp_path / "manifest.json").write_text("{not json")
    result = CliRunner().invoke(cli, ["container-verify", str(tmp_path)])
    assert result.exit_code == 2 and "manifest.json" in result.output
    result = CliRunner().invoke(cli, ["container-verify", str(tmp_path / "nothing")])
    assert result.exit_code == 2 and "no container manifest" in result.output
    result = CliRunner().invoke(cli, ["container-encode", models["qwen3moe"], "-o", str(tmp_path)])
    assert result.exit_code == 2 and "unreadable container manifest" in result.output


# --- container-read ----------------------------------------------------------------------------


def test_read_command(models, tmp_path):
    encode(models["gpt-oss"], tmp_path / "c")
    arrays = gguf_expert_arrays(models["gpt-oss"])
    result = run("container-read", tmp_path / "c", "--layer", 3, "--expert", 11, "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["header"]["layer"] == 3 and doc["header"]["expert"] == 11 and doc["header"]["fmt_name"] == "UNKNOWN"
    assert doc["checksum_ok"] is True
    assert [s["name"] for s in doc["slices"]] == ["gate", "up", "down"]  # biases stay in the GGUF
    result = run("container-read", tmp_path / "c", "--layer", 3, "--expert", 11, "--matrix", "down_bias", "-o", tmp_path / "x")
    assert result.exit_code == 2 and "layer 3 has no down_bias slice" in result.output
    for matrix in ("gate", "up", "down"):
        out = tmp_path / f"{matrix}.bin"
        result = run("container-read", tmp_path / "c", "--layer", 3, "--expert", 11, "--matrix", matrix, "-o", out)
        assert result.exit_code == 0, result.output
        assert out.read_bytes() == arrays[3][matrix][11]
    result = CliRunner().invoke(cli, ["container-read", str(tmp_path / "c"), "--layer", "3", "--expert", "11", "--matrix", "up"])
    assert result.exit_code == 0 and result.stdout_bytes == arrays[3]["up"][11]
    result = CliRunner().invoke(cli, ["container-read", str(tmp_path / "c"), "--layer", "3", "--expert", "16"])
    assert result.exit_code == 2 and "expert 16 is out of range: 16 experts per layer" in result.output


def test_encode_table_output(models, tmp_path):
    result = run("container-encode", models["mixtral"], "-o", tmp_path)
    # CliRunner's stdout is not a terminal: JSON. The table path is exercised through encode_tables.
    doc = json.loads(result.output)
    from moetools.container.command import encode_tables, verify_notes

    rows = dict(encode_tables(doc)[0].rows)
    assert rows["banks (MoE layers)"] == "4: blocks 0, 1, 2, 3"
    assert rows["record bytes"] == "212,992 (208.0 KiB)"
    notes = verify_notes({"ok": True, "folder": "c", "banks_checked": 4, "records_checked": 32, "bytes_checked": 1 << 20,
                          "checked_against": None, "problems": [], "problem_count": 0})
    assert notes[0] == "OK: c: 4 banks, 32 records, 1.0 MiB (headers, padding, checksums)"


def test_plan_errors_on_missing_matrix(tmp_path):
    spec = synth.tiny("qwen3moe")
    spec.tensors = [t for t in spec.tensors if t.name != "blk.2.ffn_down_exps.weight"]
    path = synth.write_model(spec, tmp_path / "nodown.gguf")[0]
    with pytest.raises(InputError, match="block 2 has expert tensors but no blk.2.ffn_down_exps.weight"):
        core.plan_container(open_model(path))


def test_output_folder_is_a_file(models, tmp_path):
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(OutputError, match="not a folder"):
        core.encode_container(open_model(models["qwen3moe"]), target)


# --- full-size layouts (header-only presets: planning reads no tensor data) ----------------------


def test_kimi_k3_preset_plan(preset_model):
    model = open_model(preset_model("kimi-k3"))
    manifest = core.plan_container(model).manifest
    gate = 4096 * 2048 // 256 * 74  # iq2_xs, latent 4096 x expert width 2048
    down = 2048 * 4096 // 256 * 98  # iq3_xxs
    assert manifest.layers == list(range(1, 93)) and manifest.n_layers == 92  # block 0 is the dense block
    assert manifest.experts_per_layer == 896
    assert manifest.activated_per_token == 16 * 92
    assert manifest.fmt == "mixed"
    assert manifest.matrix_types == {"gate": "iq2_xs", "up": "iq2_xs", "down": "iq3_xxs"}
    assert manifest.record_bytes == align_up(32 + 2 * gate + down, 16384) == 8_077_312
    header = manifest.banks[0].header(3, manifest.record_bytes)
    # IQ2_XS gate: the fork's MOEC_Q_IQ2, what its own packer writes for K3 (not ggml's id 17)
    assert (header.fmt, header.up_off, header.down_off, header.corr_off, header.record_4k_blocks) == (
        fork_rules.MOEC_Q_IQ2, 32 + gate, 32 + 2 * gate, 0, 8_077_312 // 4096)
    model.close()


def test_gpt_oss_120b_preset_plan(preset_model):
    model = open_model(preset_model("gpt-oss-120b"))
    manifest = core.plan_container(model).manifest
    matrix = 2880 * 2880 // 32 * 17  # mxfp4
    assert manifest.fmt == "mxfp4" and manifest.matrix_types is None
    assert manifest.n_layers == 36 and manifest.experts_per_layer == 128 and manifest.activated_per_token == 4 * 36
    assert manifest.record_bytes == align_up(32 + 3 * matrix, 16384)  # the biases stay in the GGUF
    assert manifest.banks[5].corr_off == 0 and manifest.banks[5].fmt_id == fork_rules.MOEC_Q_MXFP4
    model.close()


def test_truncated_source_model(models, tmp_path):
    """A partial download: the header is whole, the expert data is cut short."""
    data = open(models["qwen3moe"], "rb").read()
    short = tmp_path / "short.gguf"
    short.write_bytes(data[: len(data) - 100_000])
    result = CliRunner().invoke(cli, ["container-encode", str(short), "-o", str(tmp_path / "c")])
    assert result.exit_code == 2 and "short.gguf" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "c").exists()  # refused before anything is written


def test_expert_count_metadata_disagrees(tmp_path):
    spec = synth.tiny("mixtral")
    spec.metadata = [(key, 16 if key == "llama.expert_count" else value, kind) for key, value, kind in spec.metadata]
    path = synth.write_model(spec, tmp_path / "meta.gguf")[0]
    with pytest.raises(InputError, match="expert tensors hold 8 experts but the metadata says 16"):
        core.plan_container(open_model(path))


def test_verify_split_source(models, tmp_path):
    encode(models["split"], tmp_path)
    assert verify(tmp_path, "--model", models["split"])[0] == 0


@pytest.mark.parametrize("command", ["container-encode", "container-verify", "container-read"])
def test_every_command_has_help_and_a_readme_entry(command):
    result = run(command, "--help")
    assert result.exit_code == 0 and "Usage:" in result.output and command in result.output
    readme = Path(__file__).resolve().parent.parent / "README.md"
    assert f"moetools {command} " in readme.read_text()


def test_types_that_vary_by_layer(tmp_path):
    """Layer 2's gate and up in q4_0, every other expert matrix q8_0: per-bank types and fmt bytes."""
    spec = synth.tiny("qwen3moe")
    for index, tensor in enumerate(spec.tensors):
        if tensor.name in ("blk.2.ffn_gate_exps.weight", "blk.2.ffn_up_exps.weight"):
            spec.tensors[index] = synth.TensorSpec(tensor.name, tensor.shape, synth.Q4_0)
    path = synth.write_model(spec, tmp_path / "bylayer.gguf")[0]
    doc = encode(path, tmp_path / "c")
    assert doc["fmt"] == "mixed"
    assert doc["matrix_types"] == {"gate": ["q8_0", "q8_0", "q4_0", "q8_0"], "up": ["q8_0", "q8_0", "q4_0", "q8_0"], "down": "q8_0"}
    assert_matches_reference(tmp_path / "c", path)
    # q4_0 (ggml id 2) and q8_0 gates: neither has a code in the fork's space (2 would read as IQ2)
    assert (tmp_path / "c" / "experts-L2.bin").read_bytes()[8] == (tmp_path / "c" / "experts-L1.bin").read_bytes()[8] == 0
    assert verify(tmp_path / "c", "--model", path)[0] == 0
