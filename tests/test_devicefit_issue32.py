"""Issue 32: the planner tries what a user would try; the margin on unmeasured compute buffers;
mmap as llama.cpp does it."""

import json

from click.testing import CliRunner

from moetools.cli import cli

GIB = 1024**3
GLM_RPC = ["-fa", "off", "--rpc", "127.0.0.1:50152=2500M", "--rpc", "127.0.0.1:50153=2000M", "--ram", "64G",
           "--runtime", "llama"]


def run_json(*args, code=0):
    result = CliRunner().invoke(cli, ["device-fit", *map(str, args), "--json"], catch_exceptions=False)
    assert result.exit_code == code, result.output
    return json.loads(result.stdout)


def offloaded(doc):
    return [device for device in doc["devices"] if device["kind"] != "cpu" and (device["layers"] or device["output_layer"])]


def test_glm_air_on_two_small_rpc_devices_offloads_what_ngl_1_does(preset_model):
    """The reported case: the search offloaded nothing ('not even the output layer fits'), while -ngl 1
    fits by device-fit's own evaluation. The plan now tries -ngl 1, 2, ... (experts on the devices or on
    the CPU) and answers with the fastest that fits."""
    path = preset_model("glm-4.5-air")
    own = run_json(path, *GLM_RPC, "--ctx", "4096")
    ngl1 = run_json(path, *GLM_RPC, "--ctx", "4096", "-ngl", "1")
    assert ngl1["verdict"] == "fits" and offloaded(ngl1)
    assert own["verdict"] == "fits"
    assert offloaded(own), own["notes"]
    assert all(device["free_bytes"] >= 0 for device in own["devices"] if device["kind"] != "cpu")
    assert own["tok_s"] >= ngl1["tok_s"]
    assert not any("not even the output layer" in note for note in own["notes"])
    assert any("what a user would try" in note for note in own["notes"])
    args = own["launch"]["llama"]["args"]
    assert int(args[args.index("-ngl") + 1]) >= 1 and "--fit" in args
    # the flags it prints give the same plan when typed
    ngl = args[args.index("-ngl") + 1]
    extra = ["--n-cpu-moe", args[args.index("--n-cpu-moe") + 1]] if "--n-cpu-moe" in args else []
    typed = run_json(path, *GLM_RPC, "--ctx", "4096", "-ngl", ngl, *extra)
    assert typed["devices"] == own["devices"] and typed["tok_s"] == own["tok_s"]


def test_a_plan_that_already_fits_is_unchanged_by_the_fallback(preset_model):
    path = preset_model("glm-4.5-air")
    doc = run_json(path, "--vram", "24G,24G", "--ram", "64G", "--runtime", "llama", "--ctx", "4096")
    assert doc["verdict"] == "fits"
    assert not any("what a user would try" in note for note in doc["notes"])
    assert doc["placement"]["ngl"] == 48 and doc["placement"]["ts"] is not None
