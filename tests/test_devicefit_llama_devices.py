"""device-fit --runtime llama against what llama.cpp itself logged (tests/data/devicefit_llama_check.json,
recorded by benchmarks/check_devicefit_llama.py with llama.cpp 0c1e57098: two ggml-rpc-server devices on
loopback and the CPU). No llama.cpp needed here: the fixture's header is rewritten and planned again."""

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from moetools import synth
from tests import factory
from moetools.cli import cli
from tests import devicefit_llama_case as case

RECORD = json.loads((Path(__file__).parent / "data" / "devicefit_llama_check.json").read_text())
MiB = 1024 * 1024


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    path = synth.write_model(case.fixture_spec(), tmp_path_factory.mktemp("llama-case") / "fixture.gguf", sparse=True)[0]
    result = CliRunner().invoke(cli, ["device-fit", *factory.as_measured(case.device_fit_args(path)), "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def mib(n_bytes):
    return f"{n_bytes / MiB:.2f}"


def test_the_record_is_of_this_case():
    assert RECORD["llama_cpp_commit"] == "0c1e57098"
    assert RECORD["device_fit_args"] == case.device_fit_args("MODEL")[1:]


def test_emitted_flags_are_the_ones_llama_cpp_ran(plan):
    args = plan["launch"]["llama"]["args"]
    assert args[:2] == ["-m", args[1]] and factory.without_threads(args[2:]) == RECORD["emitted_args"]


def test_model_and_kv_buffers_are_exact(plan):
    logged = RECORD["logged"]
    assert {device["name"] for device in plan["devices"]} == set(logged)
    for device in plan["devices"]:
        name = device["name"]
        assert mib(device["resident_bytes"] + device["expert_bytes"]) == logged[name]["model"], name
        assert mib(device["kv_bytes"]) == logged[name].get("kv", "0.00"), name


def test_every_devices_compute_buffer_within_10_percent_of_llama_cpp(plan):
    # the CPU's too: it holds the graph inputs and the matmuls of the experts -ot keeps on it
    for device in plan["devices"]:
        logged = float(RECORD["logged"][device["name"]]["compute"]) * MiB
        assert abs(device["compute_bytes"] - logged) <= 0.10 * logged, (device["name"], device["compute_bytes"] / MiB)


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


@pytest.fixture(scope="module")
def facts(tmp_path_factory):
    from moetools.devicefit import core
    from moetools.gguf import open_model

    path = synth.write_model(case.fixture_spec(), tmp_path_factory.mktemp("llama-facts") / "fixture.gguf", sparse=True)[0]
    with open_model(path) as model:
        return core.model_facts(model)


NAMES = [f"RPC0[127.0.0.1:{port}]" for port in case.RPC_PORTS]


def placement_of(facts, args):
    """The placement llama.cpp makes of recorded flags: -ngl/-ts layers, then each expert matrix to the
    first -ot pattern that regex-searches its name (as llama.cpp matches overrides)."""
    from moetools.devicefit import placement

    ngl = int(args[args.index("-ngl") + 1])
    ts = [float(w) for w in args[args.index("-ts") + 1].split(",")]
    result = placement.user_placement(facts.layers, len(NAMES), ngl=ngl, ts=ts)
    overrides = []
    if "-ot" in args:
        for entry in args[args.index("-ot") + 1].split(","):
            pattern, target = entry.rsplit("=", 1)
            overrides.append((re.compile(pattern), placement.CPU if target == "CPU" else NAMES.index(target)))
    for block, homes in result.expert_device.items():
        for part in homes:
            name = f"blk.{block}.ffn_{part}_exps.weight"
            homes[part] = next((home for pattern, home in overrides if pattern.search(name)), homes[part])
    return result


@pytest.mark.parametrize("args_key, logged_key", [
    ("emitted_args", "logged"),  # device-fit's placement: experts of blocks 0, 4, 5 (partly) on the CPU
    ("fit_params_args", "fit_params_logged"),  # --fit's: one block's experts moved to the other device
    ("full_offload_args", "full_offload_logged"),  # no override: pipeline parallelism, 4 copies of inputs
])
def test_compute_model_within_10_percent_on_every_device(facts, args_key, logged_key):
    """The scheduler replay (compute.placement_compute) against the compute buffers llama.cpp reserved
    for three placements of the same model on the same devices, the CPU included."""
    from moetools.devicefit import compute, placement
    from moetools.devicefit.kv import KVSettings

    if args_key == "full_offload_args":
        assert RECORD["full_offload_pipeline"]
    chosen = placement_of(facts, RECORD[args_key])
    kinds = {0: "rpc", 1: "rpc", placement.CPU: "cpu"}
    ours = compute.placement_compute(facts, chosen, kinds, KVSettings(), case.CONTEXT)
    for key, name in [*enumerate(NAMES), (placement.CPU, "CPU")]:
        logged = float(RECORD[logged_key][name]["compute"]) * MiB
        assert abs(ours[key] - logged) <= 0.10 * logged, (args_key, name, ours[key] / MiB, logged / MiB)


def test_on_cuda_the_first_gpu_runs_and_copies_the_cpu_experts(facts):
    """ggml-cuda offloads the batch matmul of a host-resident weight (op offload, 32 tokens and more):
    the first GPU then holds a copy of the expert matrix it multiplies, and the CPU's buffer loses
    those matmuls; the RPC backend offloads nothing (the recorded case). From llama.cpp's source."""
    from moetools.devicefit import compute, placement
    from moetools.devicefit.kv import KVSettings

    chosen = placement_of(facts, RECORD["emitted_args"])
    rpc = compute.placement_compute(facts, chosen, {0: "rpc", 1: "rpc", placement.CPU: "cpu"}, KVSettings(), case.CONTEXT)
    cuda = compute.placement_compute(facts, chosen, {0: "gpu", 1: "gpu", placement.CPU: "cpu"}, KVSettings(), case.CONTEXT)
    largest = max(facts.layers.blocks[block].experts[part] for block, homes in chosen.expert_device.items()
                  for part, home in homes.items() if home == placement.CPU)
    assert cuda[0] > max(rpc[0], largest)  # the copy is alive beside the split's activations
    assert cuda[1] < rpc[1] + largest // 2  # only the first GPU offloads: no copy on the second
    assert cuda[placement.CPU] < rpc[placement.CPU]
