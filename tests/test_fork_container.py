"""Container banks in both conventions, checked with the readers' rules: the daemon's
CambrianTech/continuum core/continuum-core/src/capacity/expert_container.rs (`ContainerManifest`:
`top_k_per_layer`, `activated_per_token` total; `ExpertBank::open`: experts-L{n}.bin for the MoE-layer
ordinal n, size = record_bytes x experts_per_layer; `verify_identity`: magic WEXP, header layer == n,
expert == record index) and the fork's server, which opens experts-L{block}."""

import json
import os
import struct

from click.testing import CliRunner

from moetools.cli import cli
from moetools.gguf import open_model


def run(*args):
    return CliRunner().invoke(cli, [str(arg) for arg in args], catch_exceptions=False)


def daemon_reads(folder):
    """expert_container.rs open + every bank's ExpertBank::open + verify_identity of every record.
    Returns None when the daemon accepts the container, else the first error it would raise."""
    doc = json.loads(open(os.path.join(folder, "manifest.json")).read())
    if doc["record_bytes"] % 4096:
        return "RecordMisaligned"
    if doc.get("top_k_per_layer") is not None and doc["top_k_per_layer"] * doc["n_layers"] != doc["activated_per_token"]:
        return "top_k_per_layer x MoE layers != activated_per_token"
    for n in range(doc["n_layers"]):
        path = os.path.join(folder, f"experts-L{n}.bin")
        if not os.path.exists(path):
            return f"BankIo {path}"
        if os.path.getsize(path) != doc["record_bytes"] * doc["experts_per_layer"]:
            return "BankGeometry"
        with open(path, "rb") as handle:
            for expert in range(doc["experts_per_layer"]):
                handle.seek(expert * doc["record_bytes"])
                magic, layer, found = struct.unpack("<4sHH", handle.read(8))
                if (magic, layer, found) != (b"WEXP", n, expert):
                    return f"RecordIdentity layer {layer} != {n}"
    return None


def server_opens(folder, model):
    """The fork's server: experts-L{block} for every routed block, header layer = block."""
    with open_model(model) as source:
        blocks = sorted({int(t.name.split(".")[1]) for t in source.expert_tensors})
    doc = json.loads(open(os.path.join(folder, "manifest.json")).read())
    for block in blocks:
        path = os.path.join(folder, f"experts-L{block}.bin")
        if not os.path.exists(path):
            return f"missing {path}"
        with open(path, "rb") as handle:
            handle.seek(doc["record_bytes"])
            if struct.unpack("<4sHH", handle.read(8)) != (b"WEXP", block, 1):
                return "header layer is not the block"
    return None


def test_default_is_the_servers_block_numbering_and_ordinal_is_the_daemons(tiny_models, tmp_path):
    model = tiny_models["deepseek2"]  # block 0 is dense: block and ordinal differ
    block_dir, ordinal_dir = tmp_path / "block", tmp_path / "ordinal"
    assert run("container-encode", model, "-o", block_dir, "--json").exit_code == 0
    assert run("container-encode", model, "-o", ordinal_dir, "--banks", "ordinal", "--json").exit_code == 0
    assert server_opens(block_dir, model) is None
    assert daemon_reads(block_dir).startswith("BankIo")  # the daemon cannot read the server's numbering
    assert daemon_reads(ordinal_dir) is None
    for folder, numbering in ((block_dir, "block"), (ordinal_dir, "ordinal")):
        doc = json.loads((folder / "manifest.json").read_text())
        assert doc["bank_numbering"] == numbering and doc["blocks"][0] == 1
        assert doc["top_k_per_layer"] * doc["n_layers"] == doc["activated_per_token"]
        result = run("container-verify", folder, "--model", model, "--json")
        assert result.exit_code == 0, result.output
    read = run("container-read", ordinal_dir, "--layer", 0, "--expert", 1, "--json")
    assert read.exit_code == 0, read.output


def test_banks_of_the_other_convention_are_named_with_the_flag(tiny_models, tmp_path):
    model = tiny_models["deepseek2"]
    folder = tmp_path / "c"
    run("container-encode", model, "-o", folder, "--banks", "ordinal", "--json")
    doc = json.loads((folder / "manifest.json").read_text())
    doc["bank_numbering"], doc["layers"] = "block", doc["blocks"]  # a manifest claiming the server's numbering
    for bank, block in zip(doc["banks"], doc["blocks"]):
        bank["layer"], bank["file"] = block, f"experts-L{block}.bin"
    (folder / "manifest.json").write_text(json.dumps(doc))
    result = run("container-verify", folder, "--json")
    assert result.exit_code != 0
    assert "other convention (ordinal" in result.output and "--banks" in result.output


def test_the_fork_finds_the_record_stride_in_the_manifest(tiny_models, tmp_path):
    """ggml-moe-container-fetcher.h dir_container_record_bytes scans only the first 4 KiB of
    manifest.json for the first "record_bytes": moetools must write it there, once, at top level."""
    from tests import fork_rules

    for arch in ("deepseek2", "gpt-oss"):
        folder = tmp_path / arch
        assert run("container-encode", tiny_models[arch], "-o", folder, "--json").exit_code == 0
        doc = json.loads((folder / "manifest.json").read_text())
        assert fork_rules.dir_container_record_bytes(folder) == doc["record_bytes"] > 0


def test_container_verify_and_read_take_the_fork_packers_own_containers(tiny_models, tmp_path):
    """A container as the fork's packer writes it (fork_rules.moe_pack_dir: numeric fmt, no banks,
    no sidecars, banks numbered 0.. from layer_base) is read: verify checks headers and geometry,
    with --model every slice and the padding; read takes the layout from the record header."""
    from tests import fork_rules

    model = tiny_models["deepseek2"]  # block 0 dense: the packer's --layer-base 1
    with open_model(model) as source:
        blocks = sorted({int(t.name.split(".")[1]) for t in source.expert_tensors})
        experts, top_k = source.summary.expert_count, source.summary.expert_used_count
    folder = tmp_path / "packed"
    # moe-pack --fmt 0: this q8_0 model has no code in the fork's space (its default, 2, says IQ2)
    fork_rules.moe_pack_dir(model, folder, len(blocks), experts, top_k, layer_base=blocks[0], fmt=fork_rules.MOEC_Q_UNKNOWN)
    assert daemon_reads(folder) is None  # the daemon's bank rules hold for the fork's own packer
    alone = run("container-verify", folder, "--json")
    assert alone.exit_code == 0, alone.output
    doc = json.loads(alone.stdout)
    assert doc["packer"] == "fork" and "no checksum sidecars" in doc["notes"][0]
    from moetools.container.command import verify_notes
    assert "(headers, bank sizes)" in verify_notes(doc)[0] and "checksums)" not in verify_notes(doc)[0]
    full = run("container-verify", folder, "--model", model, "--json")
    assert full.exit_code == 0, full.output
    read = run("container-read", folder, "--layer", 1, "--expert", 2, "--json")
    assert read.exit_code == 0, read.output
    header = json.loads(read.stdout)["header"]
    assert (header["fmt"], header["fmt_name"], header["layer"]) == (fork_rules.MOEC_Q_UNKNOWN, "UNKNOWN", 1)
    ours = tmp_path / "ours"
    assert run("container-encode", model, "-o", ours, "--banks", "ordinal", "--json").exit_code == 0
    gate = run("container-read", folder, "--layer", 1, "--expert", 2, "--matrix", "gate", "-o", tmp_path / "a")
    mine = run("container-read", ours, "--layer", 1, "--expert", 2, "--matrix", "gate", "-o", tmp_path / "b")
    assert gate.exit_code == mine.exit_code == 0
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes()
    # a flipped byte in a fork-packed bank: no sidecar to catch it, the source does
    with open(folder / "experts-L2.bin", "r+b") as handle:
        handle.seek(3 * json.loads((folder / "manifest.json").read_text())["record_bytes"] + 100)
        handle.write(b"\x5a")
    broken = run("container-verify", folder, "--model", model, "--json")
    assert broken.exit_code == 1
    assert [(p["layer"], p["expert"], p["field"]) for p in json.loads(broken.stdout)["problems"]] == [(2, 3, "gate")]
    # the packer's default fmt (IQ2) on q8_0 experts: verify names the mislabel per bank
    labelled = tmp_path / "labelled"
    fork_rules.moe_pack_dir(model, labelled, len(blocks), experts, top_k, layer_base=blocks[0])
    problems = json.loads(run("container-verify", labelled, "--model", model, "--json").stdout)["problems"]
    assert {(p["layer"], p["field"]) for p in problems} == {(0, "fmt"), (1, "fmt"), (2, "fmt")}


def test_the_daemon_parses_moetools_manifests_and_refuses_the_fork_packers_numeric_fmt(tiny_models, tmp_path):
    """expert_container.rs ContainerManifest.fmt is a String: moetools writes the type name; the fork's
    own moec_pack_dir writes a number, which the daemon's serde refuses (a fork-side gap, FORK.md)."""
    from tests import fork_rules

    for arch in ("deepseek2", "gpt-oss", "kimi-k3"):
        folder = tmp_path / arch
        assert run("container-encode", tiny_models[arch], "-o", folder, "--json").exit_code == 0
        assert fork_rules.daemon_manifest_error(json.loads((folder / "manifest.json").read_text())) is None
    packed = tmp_path / "packed"
    fork_rules.moe_pack_dir(tiny_models["qwen3moe"], packed, 4, 16, 4, layer_base=0)
    assert fork_rules.daemon_manifest_error(json.loads((packed / "manifest.json").read_text())) == "ManifestParse fmt"
