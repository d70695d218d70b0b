"""device-fit --spec-type draft-mtp (the model's own NextN/MTP block drafts) against what llama.cpp
itself logged (tests/data/devicefit_llama_mtp.json, recorded by `benchmarks/check_devicefit_draft.py
--mtp` with llama.cpp 0c1e57098's llama-speculative-simple: two ggml-rpc-server devices on loopback and
the CPU, the flags device-fit emitted). No llama.cpp needed here: the models are written header-only."""

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from moetools import synth
from moetools.cli import cli
from tests import devicefit_draft_case as case

RECORD = json.loads((Path(__file__).parent / "data" / "devicefit_llama_mtp.json").read_text())
MiB = 1024 * 1024
CASES = [(target, setting) for target in case.mtp_specs() for setting in case.MTP_SETTINGS]


@pytest.fixture(scope="module")
def targets(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mtp-llama")
    return {name: str(synth.write_model(spec, folder / f"{name}.gguf", sparse=True)[0])
            for name, spec in case.mtp_specs().items()}


def run(*args):
    return CliRunner().invoke(cli, ["device-fit", *map(str, args)])


def mib(n_bytes):
    return f"{n_bytes / MiB:.2f}"


def _listed(value):
    return [] if value is None else value if isinstance(value, list) else [value]


def same_as_logged(n_bytes, logged):
    """Equal to llama.cpp's logged figure ("2.50"), or to the sum of the buffers it logged for one
    device (["2.50", "2.00"]: the DSA cache's MLA and indexer KV) within their rounding."""
    if not isinstance(logged, list):
        return mib(n_bytes) == logged
    return abs(n_bytes / MiB - sum(float(value) for value in logged)) <= 0.005 * len(logged)


def test_the_record_is_of_this_case():
    assert RECORD["llama_cpp_commit"] == "0c1e57098"
    assert {target: list(settings) for target, settings in RECORD["settings"].items()} == \
        {target: list(case.MTP_SETTINGS) for target in case.mtp_specs()}


@pytest.mark.parametrize("target,setting", CASES)
def test_mtp_context_and_nextn_weights_per_device_are_llama_cpps(targets, target, setting):
    record = RECORD["settings"][target][setting]
    result = run(*case.mtp_device_fit_args(targets[target], setting), "--json")
    if "device_fit_refused" in record:  # llama.cpp refused to create the MTP context: so do we
        assert record["llama_cpp_errors"] and result.exit_code == 2
        assert result.output.strip() == record["device_fit_refused"]
        return
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    args = [os.path.basename(arg) if arg == targets[target] else arg for arg in doc["launch"]["llama"]["args"]]
    assert [arg for arg in args if arg != "--no-kv-unified"] == record["emitted_args"]
    # the target's model buffers hold the NextN tensors (load_mtp), its KV is the trunk's
    for device in doc["devices"]:
        theirs = record["target_logged"].get(device["name"], {})
        assert same_as_logged(device["resident_bytes"] + device["expert_bytes"], theirs.get("model", "0.00")), device["name"]
        # its KV, and for a hybrid the recurrent state ("RS" buffer) with n_max snapshots per sequence
        state = [value for kind in ("kv", "rs") for value in _listed(theirs.get(kind))]
        assert same_as_logged(device["kv_bytes"], state if len(state) > 1 else (state or ["0.00"])[0]), device["name"]
        # and its compute: a hybrid target's output device holds the every-row output norm (t_h_nextn)
        # and, with pipeline parallelism, 4 copies of the rows crossing to it (2.54 MiB, not 0.05)
        compute = float(theirs.get("compute", 0)) * MiB
        assert abs(device["compute_bytes"] - compute) <= max(0.03 * compute, 0.006 * MiB), (device["name"], device["compute_bytes"] / MiB)
    # the MTP context: its NextN KV and its graph's compute buffer on each device
    logged = record["mtp_logged"]
    for device in doc["draft"]["devices"]:
        theirs = logged.get(device["name"], {})
        assert device["resident_bytes"] == device["expert_bytes"] == 0
        assert same_as_logged(device["kv_bytes"], theirs.get("kv", "0.00")), device["name"]
        compute = float(theirs.get("compute", 0)) * MiB
        assert abs(device["compute_bytes"] - compute) <= max(0.10 * compute, 0.005 * MiB), (device["name"], device["compute_bytes"] / MiB)
    for device in doc["devices"]:
        mine = next(d for d in doc["draft"]["devices"] if d["name"] == device["name"])
        assert device["draft_bytes"] == mine["kv_bytes"] + mine["compute_bytes"]


def test_without_draft_mtp_the_nextn_tensors_are_not_loaded(targets):
    args = case.mtp_device_fit_args(targets["glm4moe"], "base")
    position = args.index("--spec-type")
    alone = json.loads(run(*args[:position], *args[position + 2:], "--json").stdout)
    with_mtp = json.loads(run(*args, "--json").stdout)
    weights = lambda doc: sum(d["resident_bytes"] + d["expert_bytes"] for d in doc["devices"])  # noqa: E731
    assert weights(with_mtp) > weights(alone) and "draft" not in alone
    from moetools.devicefit import core
    from moetools.gguf import open_model

    with open_model(targets["glm4moe"]) as model:
        skipping, loading = core.model_facts(model), core.model_facts(model, load_mtp=True)
    assert any("--spec-type draft-mtp" in warning for warning in skipping.warnings) and not skipping.mtp_loaded
    assert not any("--spec-type draft-mtp" in warning for warning in loading.warnings) and loading.mtp_loaded
    assert loading.layers.blocks[-1].total_bytes > skipping.layers.blocks[-1].total_bytes


def test_a_model_without_nextn_blocks_is_refused(tmp_path):
    path = synth.write_model(synth.tiny("qwen3moe"), tmp_path / "plain.gguf", sparse=True)[0]
    result = run(path, "--runtime", "llama", "--ram", "16G", "--spec-type", "draft-mtp")
    assert result.exit_code == 2 and "no NextN/MTP blocks" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_an_architecture_llama_cpp_has_no_mtp_graph_for_is_refused_saying_so(tmp_path):
    """qwen3moe.cpp builds no LLM_GRAPH_TYPE_DECODER_MTP graph: llama.cpp does not draft with NextN
    blocks a qwen3moe GGUF might carry, so device-fit refuses and says llama.cpp does not support it."""
    spec = synth.tiny("qwen3moe", n_layer=4)
    spec.meta("{arch}.nextn_predict_layers", 1)  # its last block declared a NextN block
    path = synth.write_model(spec, tmp_path / "nextn.gguf", sparse=True)[0]
    result = run(path, "--runtime", "llama", "--ram", "16G", "--spec-type", "draft-mtp")
    assert result.exit_code == 2 and "llama.cpp does not support MTP drafting for qwen3moe" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_nextn_blocks_without_the_mtp_attention_are_refused(tmp_path):
    """A nemotron_h_moe whose NextN block is a plain MoE block (no attention, no nextn.eh_proj): llama.cpp
    fails to load it for MTP (missing tensors), device-fit refuses it naming what is missing."""
    spec = synth.tiny("nemotron_h_moe", pattern="ME*EE")
    spec.meta("{arch}.nextn_predict_layers", 1)
    path = synth.write_model(spec, tmp_path / "hybrid.gguf", sparse=True)[0]
    result = run(path, "--runtime", "llama", "--ram", "16G", "--spec-type", "draft-mtp")
    assert result.exit_code == 2 and "lack an attention block with nextn.eh_proj" in result.output


@pytest.mark.parametrize("extra,message", [
    (["--draft", "DRAFT"], "give no --draft"),
    (["-ngld", "2"], "target's own layers"),
    (["--runtime", "fork", "--vram", "24G"], "--runtime llama"),
])
def test_draft_mtp_with_flags_it_cannot_honour_is_refused(targets, extra, message):
    args = case.mtp_device_fit_args(targets["glm4moe"], "base")
    if "--runtime" in extra:
        args = [targets["glm4moe"], "--spec-type", "draft-mtp"]
    extra = [targets["glm4moe"] if item == "DRAFT" else item for item in extra]
    result = run(*args, *extra)
    assert result.exit_code == 2 and message in result.output, result.output


def test_draft_simple_needs_a_draft(targets):
    result = run(targets["glm4moe"], "--runtime", "llama", "--ram", "16G", "--spec-type", "draft-simple")
    assert result.exit_code == 2 and "--draft MODEL" in result.output
