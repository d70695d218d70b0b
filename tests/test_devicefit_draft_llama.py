"""device-fit --draft against what llama.cpp itself logged for the draft model (tests/data/
devicefit_llama_draft.json, recorded by benchmarks/check_devicefit_draft.py with llama.cpp 0c1e57098's
llama-speculative-simple: two ggml-rpc-server devices on loopback and the CPU, the flags device-fit
emitted). No llama.cpp needed here: the case's models are written header-only and planned again."""

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from moetools import synth
from tests import factory
from moetools.cli import cli
from tests import devicefit_draft_case as case

RECORD = json.loads((Path(__file__).parent / "data" / "devicefit_llama_draft.json").read_text())
MiB = 1024 * 1024


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("draft-llama")
    target = synth.write_model(case.target_spec(), folder / "target.gguf", sparse=True)[0]
    draft = synth.write_model(case.draft_spec(), folder / "draft.gguf", sparse=True)[0]
    return str(target), str(draft)


def plan(models, setting):
    result = CliRunner().invoke(cli, ["device-fit", *factory.as_measured(case.device_fit_args(*models, setting)), "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def mib(n_bytes):
    return f"{n_bytes / MiB:.2f}"


def test_the_record_is_of_this_case():
    assert RECORD["llama_cpp_commit"] == "0c1e57098"
    assert list(RECORD["settings"]) == list(case.SETTINGS)


@pytest.mark.parametrize("setting", list(case.SETTINGS))
def test_draft_buffers_per_device_are_llama_cpps(models, setting):
    record = RECORD["settings"][setting]
    doc = plan(models, setting)
    # the flags llama.cpp ran are the ones device-fit emits now (llama-server's --no-kv-unified aside)
    args = [os.path.basename(arg) if arg in models else arg for arg in doc["launch"]["llama"]["args"]]
    assert [arg for arg in factory.without_threads(args) if arg != "--no-kv-unified"] == record["emitted_args"]
    logged = record["draft_logged"]
    ours = {device["name"]: device for device in doc["draft"]["devices"]}
    assert {name for name, device in ours.items() if any(device[key] for key in ("resident_bytes", "kv_bytes"))} == set(logged)
    for name, device in ours.items():
        theirs = logged.get(name, {})
        assert mib(device["resident_bytes"] + device["expert_bytes"]) == theirs.get("model", "0.00"), (setting, name)
        assert mib(device["kv_bytes"]) == theirs.get("kv", "0.00"), (setting, name)
        compute = float(theirs.get("compute", 0)) * MiB
        # within 10%, or within the log's rounding to 0.01 MiB for a buffer of a few KiB
        assert abs(device["compute_bytes"] - compute) <= max(0.10 * compute, 0.005 * MiB), (setting, name, device["compute_bytes"] / MiB)
    # every device's draft_bytes in the ledger is that device's draft share
    for device in doc["devices"]:
        mine = ours.get(device["name"])
        expected = sum(mine[key] for key in ("resident_bytes", "expert_bytes", "kv_bytes", "compute_bytes")) if mine else 0
        assert device["draft_bytes"] == expected, (setting, device["name"])


def test_device_draft_names_llama_cpps_devices(models):
    doc = plan(models, "devd-second")
    assert doc["draft"]["placed_on"] == ["RPC0[127.0.0.1:50163]"]
    args = doc["launch"]["llama"]["args"]
    assert args[args.index("-devd") + 1] == "RPC1"
    # the draft is nowhere else: the first RPC device holds none of it
    first = next(device for device in doc["devices"] if device["name"] == "RPC0[127.0.0.1:50162]")
    assert first["draft_bytes"] == 0
    # device-fit's buffer name of a device is taken too, and emitted as llama.cpp's name
    by_buffer = CliRunner().invoke(cli, ["device-fit", *case.device_fit_args(*models, "base"), "--json",
                                         "-devd", "RPC0[127.0.0.1:50163]"], catch_exceptions=False)
    assert json.loads(by_buffer.stdout)["draft"]["devices"] == doc["draft"]["devices"]


@pytest.mark.parametrize("bad", ["CUDA0", "RPC2", "RPC0,CUDA1", ""])
def test_an_unknown_draft_device_is_refused_in_one_line(models, bad):
    result = CliRunner().invoke(cli, ["device-fit", *case.device_fit_args(*models, "base"), "-devd", bad])
    assert result.exit_code == 2
    assert "--device-draft" in result.output and "RPC0, RPC1" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_device_draft_without_a_draft_is_refused(models):
    result = CliRunner().invoke(cli, ["device-fit", models[0], "--runtime", "llama", "--rpc", "127.0.0.1:1=1G", "-devd", "RPC0"])
    assert result.exit_code == 2 and "--draft" in result.output
