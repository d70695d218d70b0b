"""device-fit --runtime llama against what llama.cpp itself logged (tests/data/devicefit_llama_check.json,
recorded by benchmarks/check_devicefit_llama.py with llama.cpp 0c1e57098: two ggml-rpc-server devices on
loopback and the CPU). No llama.cpp needed here: the fixture's header is rewritten and planned again."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from moetools import synth
from moetools.cli import cli
from tests import devicefit_llama_case as case

RECORD = json.loads((Path(__file__).parent / "data" / "devicefit_llama_check.json").read_text())
MiB = 1024 * 1024


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    path = synth.write_model(case.fixture_spec(), tmp_path_factory.mktemp("llama-case") / "fixture.gguf", sparse=True)[0]
    result = CliRunner().invoke(cli, ["device-fit", *case.device_fit_args(path), "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def mib(n_bytes):
    return f"{n_bytes / MiB:.2f}"


def test_the_record_is_of_this_case():
    assert RECORD["llama_cpp_commit"] == "0c1e57098"
    assert RECORD["device_fit_args"] == case.device_fit_args("MODEL")[1:]


def test_emitted_flags_are_the_ones_llama_cpp_ran(plan):
    args = plan["launch"]["llama"]["args"]
    # since the record was taken device-fit also spells out `-np 1 --no-kv-unified` (llama-completion's
    # own defaults, which llama.cpp ran with; llama-server's differ, hence the explicit flags)
    position = args.index("-np")
    assert args[position:position + 3] == ["-np", "1", "--no-kv-unified"]
    args = args[:position] + args[position + 3:]
    assert args[:2] == ["-m", args[1]] and args[2:] == RECORD["emitted_args"]


def test_model_and_kv_buffers_are_exact(plan):
    logged = RECORD["logged"]
    assert {device["name"] for device in plan["devices"]} == set(logged)
    for device in plan["devices"]:
        name = device["name"]
        assert mib(device["resident_bytes"] + device["expert_bytes"]) == logged[name]["model"], name
        assert mib(device["kv_bytes"]) == logged[name].get("kv", "0.00"), name


def test_compute_reserve_covers_what_llama_cpp_reserved(plan):
    # the RPC devices' compute buffers; the CPU's (17.01 MiB here) waits for the per-device compute model
    for device in plan["devices"]:
        if device["kind"] == "rpc":
            assert device["compute_bytes"] >= float(RECORD["logged"][device["name"]]["compute"]) * MiB


def test_what_llama_cpp_allocated_fits_each_device(plan):
    for device in plan["devices"]:
        if device["kind"] == "cpu":
            continue
        logged = RECORD["logged"][device["name"]]
        total = sum(float(logged[kind]) for kind in ("model", "kv", "compute")) * MiB
        assert total <= device["capacity_bytes"], device["name"]


def test_at_least_as_many_bytes_on_the_rpc_devices_as_llama_fit_params(plan):
    def on_devices(logged):
        return sum(float(v["model"]) + float(v.get("kv", 0)) for name, v in logged.items() if name != "CPU")

    assert on_devices(RECORD["logged"]) >= on_devices(RECORD["fit_params_logged"])
    # same layer split as --fit found (-ngl and -ts), different expert placement
    fit = RECORD["fit_params_args"]
    assert fit[fit.index("-ngl") + 1] == RECORD["emitted_args"][RECORD["emitted_args"].index("-ngl") + 1]


def test_compute_buffers_within_10_percent_of_llama_cpp(tmp_path):
    """The per-device compute model against the compute buffers llama.cpp reserved in the recorded run
    (the same layers per device as the emitted -ngl/-ts)."""
    from moetools.devicefit import core, placement, upstream
    from moetools.devicefit.kv import KVSettings
    from moetools.gguf import open_model

    path = synth.write_model(case.fixture_spec(), tmp_path / "fixture.gguf", sparse=True)[0]
    with open_model(path) as model:
        facts = core.model_facts(model)
    args = RECORD["emitted_args"]
    ngl = int(args[args.index("-ngl") + 1])
    ts = [float(w) for w in args[args.index("-ts") + 1].split(",")]
    homes = placement.assign_layers(facts.layers.n_layer, ngl, ts)
    names = [f"RPC0[127.0.0.1:{port}]" for port in case.RPC_PORTS]
    settings = KVSettings()
    # the RPC devices; the CPU's buffer (17.01 MiB here) also holds its experts' intermediates: not modelled yet
    for index, name in enumerate(names):
        layers = [il for il, home in enumerate(homes[:-1]) if home == index]
        ours = upstream.device_compute_bytes(facts, layers, homes[-1] == index, settings, case.CONTEXT, "rpc", 0)
        logged = float(RECORD["logged"][name]["compute"]) * MiB
        assert abs(ours - logged) <= 0.10 * logged, (name, ours / MiB, logged / MiB)
