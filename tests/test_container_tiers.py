"""Version-2 tiered containers (`container-encode --tiers`), held to their readers' rules as restated
in tests/fork_rules.py: continuum expert_container.rs (`ExpertContainer::open` v2 checks,
`bank_path`, `ExpertBank::open`, `verify_identity`), the fork's ggml-moe-container-fetcher.h
`TieredContainerFetcher::read`, its packer's `moec_pack_dir_tiered` manifest, and the daemon's
tiered plan (plan-tiered.json: per-pin "tier", "default_tier")."""

import json
import os
import shutil

import numpy as np
import pytest
from click.testing import CliRunner

from moetools.cli import cli
from moetools.container import tiered
from moetools.errors import OutputError
from moetools.formats import container as fmt
from moetools.gguf import expert_tensor_kind, open_model
from tests import factory, fork_rules

# Q8_0 is the tiny models' own type (byte-copied); Q4_0 and F16 are re-quantized (fast kernels)
LADDER = "Q8_0,Q4_0,F16"


def run(*args):
    return CliRunner().invoke(cli, [str(arg) for arg in args], catch_exceptions=False)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return os.fspath(factory.write_tiny(tmp_path_factory.mktemp("tiers-model"), "qwen3moe"))


@pytest.fixture(scope="module")
def encoded(model, tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiers") / "c"
    result = run("container-encode", model, "-o", folder, "--tiers", LADDER, "--banks", "ordinal", "--json")
    assert result.exit_code == 0, result.output
    return folder, json.loads(result.stdout)


def copy_of(encoded, tmp_path):
    target = tmp_path / "copy"
    shutil.copytree(encoded[0], target)
    return target


def manifest_doc(folder):
    return json.loads((folder / "manifest.json").read_text())


def test_manifest_passes_the_daemons_v2_checks(encoded):
    folder, doc = encoded
    manifest = manifest_doc(folder)
    assert manifest["version"] == 2
    assert [(t["id"], t["quant"]) for t in manifest["tiers"]] == [(0, "Q8_0"), (1, "Q4_0"), (2, "F16")]
    assert fork_rules.daemon_manifest_error(manifest) is None
    assert fork_rules.daemon_tier_error(manifest) is None
    # the top-level record_bytes (what the daemon's serde needs, and the fork's dir_container_record_bytes
    # scan finds first) is tier 0's
    assert manifest["record_bytes"] == manifest["tiers"][0]["record_bytes"]
    assert fork_rules.dir_container_record_bytes(folder) == manifest["tiers"][0]["record_bytes"]
    assert fork_rules.daemon_reads_tiered(folder) is None
    assert doc["container_bytes"] == sum(t["record_bytes"] for t in manifest["tiers"]) * 16 * manifest["n_layers"]
    names = {name for name in os.listdir(folder) if name.endswith(".bin")}
    assert names == {fork_rules.daemon_bank_name(manifest, n, t) for n in range(manifest["n_layers"]) for t in range(3)}


def test_tiered_fetcher_reads_each_record_at_its_tier_stride(encoded):
    folder, _ = encoded
    manifest = manifest_doc(folder)
    for tier in manifest["tiers"]:
        for layer in range(manifest["n_layers"]):
            for expert in (0, 7, 15):
                record = fork_rules.tiered_fetcher_read(folder, layer, expert, tier["id"], tier["record_bytes"])
                assert record is not None and record[:4] == b"WEXP"
                assert int.from_bytes(record[4:6], "little") == layer
                assert int.from_bytes(record[6:8], "little") == expert
                result = CliRunner().invoke(cli, ["container-read", str(folder), "--layer", str(layer), "--expert",
                                                  str(expert), "--tier", str(tier["id"]), "--matrix", "record"])
                assert result.exit_code == 0 and result.stdout_bytes == record


def test_tier0_is_the_v1_record_byte_for_byte(model, encoded, tmp_path):
    """A tier in the source's own type is the v1 container's bank, only renamed."""
    folder, _ = encoded
    assert run("container-encode", model, "-o", tmp_path / "v1", "--banks", "ordinal").exit_code == 0
    for layer in range(4):
        assert (folder / f"experts-L{layer}-T0.bin").read_bytes() == (tmp_path / "v1" / f"experts-L{layer}.bin").read_bytes()


def test_requantized_tiers_hold_the_source_values(model, encoded):
    """Each re-quantized slice dequantizes (gguf's own dequantizer) to the source's values within the
    tier type's error, at the offsets the record header gives."""
    import gguf

    folder, _ = encoded
    manifest = manifest_doc(folder)
    source = {t.name: t for t in gguf.GGUFReader(model).tensors}
    for tier, qtype, tolerance in ((1, gguf.GGMLQuantizationType.Q4_0, 0.2), (2, gguf.GGMLQuantizationType.F16, 0.01)):
        bank = manifest["tiers"][tier]["banks"][1]
        record_bytes = manifest["tiers"][tier]["record_bytes"]
        record = fork_rules.tiered_fetcher_read(folder, 1, 5, tier, record_bytes)
        for name in ("gate", "up", "down"):
            tensor = source[f"blk.{bank['layer']}.ffn_{name}_exps.weight"]
            want = gguf.quants.dequantize(tensor.data[5], tensor.tensor_type)
            piece = bank[name]
            data = np.frombuffer(record[piece["offset"]:piece["offset"] + piece["bytes"]], dtype=np.uint8)
            got = gguf.quants.dequantize(data.reshape(want.shape[0], -1), qtype)
            assert got.shape == want.shape
            assert np.abs(got - want).max() <= tolerance * np.abs(want).max() + 1e-6, (tier, name)


def test_verify_checks_every_tier_and_its_checksums(encoded, tmp_path):
    folder = copy_of(encoded, tmp_path)
    result = run("container-verify", folder, "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["banks_checked"] == 12 and doc["ok"]
    bank = folder / "experts-L2-T1.bin"
    data = bytearray(bank.read_bytes())
    data[65536 * 3 + 100] ^= 0xFF  # inside record 3's gate slice
    bank.write_bytes(bytes(data))
    result = run("container-verify", folder, "--json")
    assert result.exit_code == 1
    problems = json.loads(result.stdout)["problems"]
    assert {(p["layer"], p["expert"], p["field"]) for p in problems} >= {(2, 3, "tier 1 checksum")}


def test_rerun_keeps_every_bank_and_rewrites_a_damaged_one(model, encoded, tmp_path):
    folder = copy_of(encoded, tmp_path)
    doc = json.loads(run("container-encode", model, "-o", folder, "--tiers", LADDER, "--banks", "ordinal", "--json").stdout)
    assert doc["banks_written"] == [] and len(doc["banks_skipped"]) == 12
    before = (folder / "experts-L1-T2.bin").read_bytes()
    with open(folder / "experts-L1-T2.bin", "r+b") as handle:
        handle.truncate(len(before) // 2)
    doc = json.loads(run("container-encode", model, "-o", folder, "--tiers", LADDER, "--banks", "ordinal", "--json").stdout)
    assert doc["banks_written"] == ["L1-T2"]
    assert (folder / "experts-L1-T2.bin").read_bytes() == before


def test_another_ladder_rewrites_what_changed_and_drops_the_rest(model, encoded, tmp_path):
    folder = copy_of(encoded, tmp_path)
    doc = json.loads(run("container-encode", model, "-o", folder, "--tiers", "Q8_0,Q4_1", "--banks", "ordinal", "--json").stdout)
    assert sorted(doc["banks_written"]) == sorted(f"L{n}-T1" for n in range(4))  # tier 0 is unchanged: kept
    assert len(doc["banks_skipped"]) == 4
    assert [t["quant"] for t in manifest_doc(folder)["tiers"]] == ["Q8_0", "Q4_1"]
    assert not [name for name in os.listdir(folder) if "-T2." in name]  # the dropped tier's banks are gone
    assert run("container-verify", folder).exit_code == 0
    assert fork_rules.daemon_reads_tiered(folder) is None
    # the same model encoded as v1 into it: the v1 banks, the v2 ones gone only when v2 is written again
    assert run("container-encode", model, "-o", folder, "--banks", "ordinal").exit_code == 0
    assert manifest_doc(folder)["version"] == 1 and run("container-verify", folder).exit_code == 0


def test_an_interrupted_encode_leaves_no_partial_bank(model, tmp_path, monkeypatch):
    folder = tmp_path / "c"
    calls = []

    def failing_write(fd, view):
        calls.append(1)
        if len(calls) == 6:
            raise OSError(28, "No space left on device")
        os.write(fd, view)

    monkeypatch.setattr(tiered, "_write_all", failing_write)
    with pytest.raises(OutputError, match="experts-L1-T1.bin: write failed"):
        tiered.encode_tiered(open_model(model), folder, tiered.plan_tiered(open_model(model), tiered.parse_tiers(LADDER)))
    assert not (folder / "manifest.json").exists()
    assert not [name for name in os.listdir(folder) if name.endswith(".tmp")]
    assert not (folder / "experts-L1-T1.bin").exists()  # the bank being written when the disk filled
    monkeypatch.undo()
    doc = json.loads(run("container-encode", model, "-o", folder, "--tiers", LADDER, "--json").stdout)
    assert len(doc["banks_skipped"]) == 5 and len(doc["banks_written"]) == 7
    assert run("container-verify", folder).exit_code == 0


def test_single_tier_v2_names_its_banks_with_T0(model, tmp_path):
    assert run("container-encode", model, "-o", tmp_path, "--tiers", "Q8_0").exit_code == 0
    manifest = manifest_doc(tmp_path)
    assert manifest["version"] == 2 and len(manifest["tiers"]) == 1
    assert fork_rules.daemon_reads_tiered(tmp_path) is None
    assert not (tmp_path / "experts-L0.bin").exists() and (tmp_path / "experts-L0-T0.bin").exists()


def test_a_container_the_fork_packer_tiered_is_read(model, tmp_path):
    """moec_pack_dir_tiered: numeric fmt and quants, no top-level record_bytes, no banks, no sidecars."""
    layers, experts, top_k = 4, 16, 4
    stride = fork_rules.moe_pack_dir(model, tmp_path, layers, experts, top_k, 0, fork_rules.MOEC_Q_UNKNOWN)
    for layer in range(layers):
        os.replace(tmp_path / f"experts-L{layer}.bin", tmp_path / f"experts-L{layer}-T0.bin")
    (tmp_path / "manifest.json").write_text(fork_rules.moec_pack_dir_tiered_manifest(
        "tiny", fork_rules.MOEC_Q_UNKNOWN, layers, experts, top_k, [(fork_rules.MOEC_Q_UNKNOWN, stride)]))
    manifest = fmt.read_manifest(tmp_path)
    assert manifest.packer == "fork" and manifest.record_bytes == stride and manifest.tier_labels == ["UNKNOWN"]
    result = run("container-verify", tmp_path, "--json")
    assert result.exit_code == 0, result.output
    assert run("container-read", tmp_path, "--layer", 2, "--expert", 3, "--tier", 0, "--json").exit_code == 0


# --- bad input: one line, exit 2, naming the file -------------------------------------------------


def test_tier_ids_that_are_not_their_indices(encoded, tmp_path):
    folder = copy_of(encoded, tmp_path)
    doc = manifest_doc(folder)
    doc["tiers"][0], doc["tiers"][1] = doc["tiers"][1], doc["tiers"][0]
    (folder / "manifest.json").write_text(json.dumps(doc))
    assert fork_rules.daemon_tier_error(doc) == "TierIdMismatch"
    result = run("container-verify", folder)
    assert result.exit_code == 2
    assert "manifest.json" in result.output and "tiers[0] has id 1" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_a_missing_bank(encoded, tmp_path):
    folder = copy_of(encoded, tmp_path)
    os.unlink(folder / "experts-L3-T2.bin")
    for command in (["container-verify", folder], ["container-read", folder, "--layer", 0, "--expert", 0]):
        result = run(*command)
        assert result.exit_code == 2, result.output
        assert "experts-L3-T2.bin" in result.output and len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize("ladder, said", [("Q8_0,Q9_9", "'Q9_9' is not a ggml type"),
                                          ("Q8_0,IQ2_XS", "cannot write IQ2_XS"),
                                          ("Q8_0,Q8_0", "Q8_0 is listed twice")])
def test_a_tier_moetools_cannot_write(model, tmp_path, ladder, said):
    result = run("container-encode", model, "-o", tmp_path / "c", "--tiers", ladder)
    assert result.exit_code == 2
    assert said in result.output and len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "c" / "manifest.json").exists()


def write_plan(path, pins, **extra):
    doc = {"version": 1, "budget_bytes": 1 << 30, "window_k": 8, "pin_list": pins, **extra}
    path.write_text(json.dumps(doc))
    return doc


def test_plan_tiers_inside_the_ladder(encoded, tmp_path):
    folder, _ = encoded
    doc = write_plan(tmp_path / "plan.json", [{"layer": 1, "expert": 10, "tier": 0}, {"layer": 2, "expert": 3, "tier": 2}],
                     default_tier=1)
    assert fork_rules.plan_tier_error(doc, 3) is None
    result = run("container-verify", folder, "--plan", tmp_path / "plan.json", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["plan"]["pins_with_tier"] == 2


@pytest.mark.parametrize("pins, extra, named", [
    ([{"layer": 1, "expert": 10, "tier": 0}, {"layer": 2, "expert": 20, "tier": 3}], {}, "pin_list[1] (layer 2, expert 20) has tier 3"),
    ([{"layer": 1, "expert": 10}], {"default_tier": 7}, "default_tier 7"),
])
def test_plan_tiers_outside_the_ladder(encoded, tmp_path, pins, extra, named):
    folder, _ = encoded
    doc = write_plan(tmp_path / "plan.json", pins, **extra)
    assert fork_rules.plan_tier_error(doc, 3) is not None
    result = run("container-verify", folder, "--plan", tmp_path / "plan.json")
    assert result.exit_code == 2
    assert named in result.output and "plan.json" in result.output and "0 Q8_0, 1 Q4_0, 2 F16" in result.output


def test_a_v1_container_has_one_tier(model, tmp_path):
    assert run("container-encode", model, "-o", tmp_path / "c").exit_code == 0
    assert manifest_doc(tmp_path / "c")["version"] == 1 and "tiers" not in manifest_doc(tmp_path / "c")
    result = run("container-read", tmp_path / "c", "--layer", 0, "--expert", 0, "--tier", 1)
    assert result.exit_code == 2 and "tier 1 is not in" in result.output
    assert run("container-read", tmp_path / "c", "--layer", 0, "--expert", 0, "--tier", 0, "--json").exit_code == 0
    write_plan(tmp_path / "plan.json", [{"layer": 0, "expert": 1, "tier": 1}])
    assert run("container-verify", tmp_path / "c", "--plan", tmp_path / "plan.json").exit_code == 2


@pytest.mark.parametrize("change, said", [
    (lambda doc: doc.update(tiers="Q8_0"), '"tiers" of a version-2 container manifest must be a list'),
    (lambda doc: doc["tiers"][1].update(record_bytes=65536 + 512), "tiers[1] record_bytes 66048 is not a multiple of 4096"),
    (lambda doc: doc.update(version=3), "container version 3 is newer than this moetools reads (2)"),
])
def test_other_manifests_the_daemon_refuses(encoded, tmp_path, change, said):
    """expert_container.rs ExpertContainer::open refuses these too (RecordMisaligned, ManifestVersion)."""
    folder = copy_of(encoded, tmp_path)
    doc = manifest_doc(folder)
    change(doc)
    (folder / "manifest.json").write_text(json.dumps(doc))
    result = run("container-verify", folder)
    assert result.exit_code == 2
    assert said in result.output and "manifest.json" in result.output and len(result.output.strip().splitlines()) == 1


def test_a_v2_manifest_without_tiers_is_one_tier(encoded, tmp_path):
    """expert_container.rs effective_tiers(): an empty or absent `tiers` is one tier {0, fmt,
    record_bytes}, and a version-2 reader still names its banks experts-L{n}-T0.bin."""
    folder = copy_of(encoded, tmp_path)
    doc = manifest_doc(folder)
    del doc["tiers"]
    (folder / "manifest.json").write_text(json.dumps(doc))
    assert fork_rules.daemon_reads_tiered(folder) is None
    manifest = fmt.read_manifest(folder)
    assert manifest.tier_labels == ["q8_0"] and manifest.bank_file(1) == "experts-L1-T0.bin"
    result = run("container-verify", folder, "--json")
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("name", ["tiny-deepseekv3-Q8_0.gguf", "tiny-gptoss-Q8_0.gguf"])
def test_converter_written_models(name, tmp_path):
    """Real converter-written GGUFs (../shared/models): a leading dense block (DeepSeek) and expert
    biases (gpt-oss); ordinal banks, as the daemon opens them."""
    path = factory.shared_model(name)
    if path is None:
        pytest.skip(f"{name} is not in ../shared/models")
    result = run("container-encode", path, "-o", tmp_path, "--tiers", "Q8_0,Q4_0", "--banks", "ordinal", "--json")
    assert result.exit_code == 0, result.output
    assert fork_rules.daemon_reads_tiered(tmp_path) is None
    doc = json.loads(run("container-verify", tmp_path, "--json").stdout)
    assert doc["ok"] and doc["checked_against"] == os.path.abspath(path)
