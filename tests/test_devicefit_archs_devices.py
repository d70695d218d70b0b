"""device-fit --runtime llama per device for the architectures whose caches and graphs llama.cpp builds
in its own memory types (deepseek4, dots3note, hy_v4, glm5-next, qwen4exp) and the hybrids and sparse
attention added beside them (minimax-01, bailingmoe3, minimax-m3, qwen35, exaone4, lfm2-swa), and qwen4exp
with a PLE module (its conv kernel f32, f16, bf16; the module on either RPC device; experts on the CPU) or
mixed compression ratios (4 and 8, 4, 0 and 16 on the two devices), and kimi-k3 partially offloaded (-ngl 3: the
output layer alone on the second device, whose final residual mix runs there amid the last layer's tail;
-ngl 6 -ts 1,1) or fully offloaded with pipeline parallelism (-ngl 9 -ts 3,1: the residual scores' bare
rms_norms run on the previous device, the last device copies the stack and the stream), against what llama.cpp
0c1e57098 logged on two ggml-rpc-server devices on loopback and the CPU
(tests/data/devicefit_llama_archs_devices.json). No llama.cpp needed: the tiny layouts are rewritten
header-only and planned again."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from moetools import synth
from tests import factory
from moetools.cli import cli

RECORD = json.loads((Path(__file__).parent / "data" / "devicefit_llama_archs_devices.json").read_text())
MiB = 1024 * 1024
# compute per device, ours / llama.cpp's
COMPUTE_TOLERANCE = {"deepseek4": 0.002, "dots3note": 0.002, "glm5-next": 0.005, "qwen4exp": 0.002, "hy_v4": 0.002,
                     "minimax-01": 0.002, "bailingmoe3": 0.002, "minimax-m3": 0.002, "qwen35": 0.002,
                     "exaone4": 0.003, "lfm2-swa": 0.004, "kimi-k3": 0.002}


def test_every_architecture_is_recorded():
    assert RECORD["llama_cpp_commit"] == "0c1e57098"
    assert {case["tiny"] for case in RECORD["cases"]} == set(COMPUTE_TOLERANCE)


@pytest.mark.parametrize("case", RECORD["cases"], ids=lambda case: case.get("id", case["tiny"]))
def test_per_device_buffers_equal_llama_cpp(tmp_path, case):
    """The flags llama.cpp ran, each device's model and KV/state bytes to the logged 0.01 MiB (llama.cpp
    logs each cache and state buffer: 0.02 MiB for their rounding), its compute buffer within the
    tolerance, with layers on both RPC devices (the layer ranges measured, where recorded)."""
    path = synth.write_model(synth.tiny(case["tiny"], **case.get("params", {})), tmp_path / "model.gguf", sparse=True)[0]
    result = CliRunner().invoke(cli, ["device-fit", str(path), *factory.as_measured(case["device_fit_args"]), "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    args = plan["launch"]["llama"]["args"]
    assert [arg for arg in factory.without_threads(args[2:]) if arg != "--no-kv-unified"] == case["emitted_args"]
    logged = case["logged"]
    assert {device["name"] for device in plan["devices"]} == set(logged)
    assert sum(1 for device in plan["devices"] if device["kind"] == "rpc" and device["compute_bytes"]) == 2
    if "layers" in case:
        assert {device["name"]: device["layers"] for device in plan["devices"]} == case["layers"]
    tolerance = COMPUTE_TOLERANCE[case["tiny"]]
    for device in plan["devices"]:
        name, found = device["name"], logged[device["name"]]
        assert f"{(device['resident_bytes'] + device['expert_bytes']) / MiB:.2f}" == found["model"], name
        assert abs(device["kv_bytes"] / MiB - float(found.get("kv", "0"))) <= 0.02, (name, device["kv_bytes"] / MiB)
        theirs = float(found["compute"]) * MiB
        assert abs(device["compute_bytes"] / theirs - 1) <= tolerance, (name, device["compute_bytes"] / MiB)
