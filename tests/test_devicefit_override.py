"""device-fit --runtime llama evaluates the user's `-ot PATTERN=DEVICE` (and --cpu-moe) as llama.cpp applies
them: std::regex_search over every tensor name, the first override that matches wins, -ot and
--n-cpu-moe/--cpu-moe in command-line order (common/arg.cpp, llama_model_loader::create_tensor).

Checked against llama.cpp itself (the model buffers it logged for two -ot lines, one of them --fit's,
whose `.*` patterns also move routers) and against a hand computation over the tensor list."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from moetools import synth
from moetools.devicefit import overrides
from moetools.devicefit.layers import cuda_pad
from moetools.errors import UsageError
from moetools.gguf import open_model
from tests import devicefit_llama_case as case

RECORD = json.loads((Path(__file__).parent / "data" / "devicefit_llama_check.json").read_text())
MiB = 1024 * 1024
ONE_GPU = ["--runtime", "llama", "--vram", "24G", "--ram", "64G", "-c", "8192"]


def moetools(*args, code=0):
    """`python -m moetools device-fit ...` as a real process: (stdout, stderr)."""
    result = subprocess.run([sys.executable, "-m", "moetools", "device-fit", *map(str, args)], capture_output=True, text=True)
    assert result.returncode in (code if isinstance(code, tuple) else (code,)), (result.returncode, result.stdout[-2000:], result.stderr[-2000:])
    return result.stdout, result.stderr


def plan(*args, code=0):
    stdout, stderr = moetools(*args, "--json", code=code)
    return json.loads(stdout), stderr


def weights(doc):
    return {device["name"]: device["resident_bytes"] + device["expert_bytes"] for device in doc["devices"]}


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
    """qwen3-30b-a3b's header (48 blocks, 128 experts), written sparse."""
    return synth.write_model(synth.preset("qwen3-30b-a3b"), tmp_path_factory.mktemp("ot") / "q30.gguf", sparse=True)[0]


@pytest.fixture(scope="module")
def fixture(tmp_path_factory):
    return synth.write_model(case.fixture_spec(), tmp_path_factory.mktemp("ot-case") / "fixture.gguf", sparse=True)[0]


def placement_flags(args):
    """-ngl ... up to the cache flags of a recorded llama.cpp line."""
    tail = args[args.index("-ngl"):]
    return tail[:tail.index("-ctk")] if "-ctk" in tail else tail


@pytest.mark.parametrize("args_key, logged_key", [("emitted_args", "logged"), ("fit_params_args", "fit_params_logged")])
def test_model_buffers_are_what_llama_cpp_logged(fixture, args_key, logged_key):
    """The recorded launches' -ngl/-ts/-ot evaluated as the user's: each device's model buffer is the
    one llama.cpp logged, to 0.01 MiB. --fit's patterns (`blk\\.3\\.ffn_(gate|gate_up|down).*`) also
    match the block's router ffn_gate_inp, a dense tensor, which moves with them."""
    doc, stderr = plan(*case.device_fit_args(fixture), *placement_flags(RECORD[args_key]))
    for name, n_bytes in weights(doc).items():
        assert f"{n_bytes / MiB:.2f}" == RECORD[logged_key][name]["model"], name
    for device in doc["devices"]:  # the compute buffers as the scheduler replay gives them (10%)
        logged = float(RECORD[logged_key][device["name"]]["compute"]) * MiB
        assert abs(device["compute_bytes"] - logged) <= 0.10 * logged
    if args_key == "fit_params_args":  # --fit wrote blk.8's experts for a model of blocks 0..7
        assert "blk\\.8\\.ffn_(up|down|gate_up|gate)_(ch|)exps=CPU: the pattern matches no tensor" in stderr


def hand_weights(path, entries, ngl_all=True):
    """Per-device model bytes from the tensor list: each tensor on the device of the first (pattern,
    device) whose regex searches its name, else its layer's (one GPU: CUDA0 for blocks and output with
    every layer offloaded, the CPU with -ngl 0; the embeddings on the CPU), in buffers aligned as
    ggml's (CUDA 128 bytes with its row padding, CPU 32)."""
    totals = {"CUDA0": 0, "CPU": 0}
    with open_model(path) as model:
        for tensor in model.tensors:
            home = "CPU" if tensor.name.startswith("token_embd") or not ngl_all else "CUDA0"
            home = next((device for pattern, device in entries if re.search(pattern, tensor.name)), home)
            if home == "CUDA0":
                totals[home] += -(-(tensor.n_bytes + cuda_pad(tensor.type_id, tensor.shape)) // 128) * 128
            else:
                totals[home] += -(-tensor.n_bytes // 32) * 32
    return totals


@pytest.mark.parametrize("flags, entries, ngl_all", [
    (["-ot", "exps=CPU"], [("exps", "CPU")], True),
    (["-ot", r"blk\.(1[0-9])\.ffn_.*_exps=CPU"], [(r"blk\.(1[0-9])\.ffn_.*_exps", "CPU")], True),
    (["-ngl", "0", "-ot", r"blk\.0\.=CUDA0"], [(r"blk\.0\.", "CUDA0")], False),
    # two entries in one value and a repeated -ot: the first match wins (blk.1's experts stay on CUDA0)
    (["-ot", r"blk\.1\.ffn_.*_exps=CUDA0,exps=CPU", "-ot", r"blk\.2\.=CPU"],
     [(r"blk\.1\.ffn_.*_exps", "CUDA0"), ("exps", "CPU"), (r"blk\.2\.", "CPU")], True),
])
def test_llama_cpps_own_patterns_place_what_its_regex_would(qwen3, flags, entries, ngl_all):
    doc, stderr = plan(qwen3, *ONE_GPU, *flags)
    assert weights(doc) == hand_weights(qwen3, entries, ngl_all)
    assert "matches no tensor" not in stderr


def test_ot_exps_cpu_is_cpu_moe(qwen3):
    with_ot, _ = plan(qwen3, *ONE_GPU, "-ot", "exps=CPU")
    with_flag, _ = plan(qwen3, *ONE_GPU, "--cpu-moe")
    for key in ("devices", "tok_s", "context"):
        assert with_ot[key] == with_flag[key], key
    assert with_ot["placement"]["seconds_per_token"] == with_flag["placement"]["seconds_per_token"]
    # and -ot blk\.i\.ffn_..._exps=CPU for i < 10 is --n-cpu-moe 10, llama.cpp's own expansion
    ten = ",".join(rf"blk\.{i}\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU" for i in range(10))
    with_ten, _ = plan(qwen3, *ONE_GPU, "-ot", ten)
    with_n, _ = plan(qwen3, *ONE_GPU, "--n-cpu-moe", "10")
    assert with_ten["devices"] == with_n["devices"] and with_ten["tok_s"] == with_n["tok_s"]


def test_ot_and_n_cpu_moe_take_llama_cpps_order(qwen3):
    """--n-cpu-moe 10 then -ot blk\\.5\\.=CUDA0: block 5's experts are --n-cpu-moe's (CPU); the other
    way round they stay on CUDA0. A note says which won, and the launch keeps the order."""
    cpu_first, _ = plan(qwen3, *ONE_GPU, "--n-cpu-moe", "10", "-ot", r"blk\.5\.=CUDA0")
    gpu_first, _ = plan(qwen3, *ONE_GPU, "-ot", r"blk\.5\.=CUDA0", "--n-cpu-moe", "10")
    with open_model(qwen3) as model:
        block5 = sum(t.n_bytes for t in model.tensors if re.match(r"blk\.5\.ffn_.*_exps", t.name))
    assert weights(cpu_first)["CPU"] - weights(gpu_first)["CPU"] == block5
    assert any("the CPU of --n-cpu-moe 10 is planned, not the CUDA0" in note for note in cpu_first["notes"])
    assert any("the CUDA0 of -ot blk\\.5\\.=CUDA0 is planned, not the CPU" in note for note in gpu_first["notes"])
    args = gpu_first["launch"]["llama"]["args"]
    assert args.index("-ot") < args.index("--n-cpu-moe")
    args = cpu_first["launch"]["llama"]["args"]
    assert args.index("--n-cpu-moe") < args.index("-ot")


def test_rpc_buffer_names_and_device_alias(fixture):
    """llama.cpp's -ot takes an RPC server's buffer type name RPC0[host:port]; device-fit also takes the
    device name --list-devices prints (RPC1: numbered across the servers) and the registry's
    RPC[host:port], warns that llama.cpp refuses them, and writes the buffer name in the launch."""
    second = f"RPC0[127.0.0.1:{case.RPC_PORTS[1]}]"
    # every expert on the 90 MiB server does not fit it (exit 1), but it is evaluated
    by_buffer, quiet = plan(*case.device_fit_args(fixture), "-ot", f"exps={second}", code=1)
    assert "buffer name" not in quiet
    for alias in ("RPC1", f"RPC[127.0.0.1:{case.RPC_PORTS[1]}]"):
        by_alias, stderr = plan(*case.device_fit_args(fixture), "-ot", f"exps={alias}", code=1)
        assert weights(by_buffer) == weights(by_alias)
        assert f"llama.cpp's -ot takes the buffer name {second} (it stops on {alias}" in stderr
    assert by_buffer["devices"][0]["expert_bytes"] == 0 and by_buffer["devices"][1]["expert_bytes"] > 0
    # the launch line of a plan that fits names the buffer (the recorded placement, with block 7's up
    # matrix sent to the server its layer is on already)
    fits, _ = plan(*case.device_fit_args(fixture), *placement_flags(RECORD["emitted_args"]), "-ot", r"blk\.7\.ffn_up_exps=RPC1")
    args = fits["launch"]["llama"]["args"]
    assert args[len(args) - 1 - args[::-1].index("-ot") + 1] == rf"blk\.7\.ffn_up_exps={second}"


def test_any_override_turns_pipeline_parallelism_off(fixture):
    """llama_model::has_tensor_overrides: an -ot that moves nothing still disables the 4 scheduler
    copies, so the RPC devices' compute buffers shrink to the single-copy graph."""
    full = placement_flags(RECORD["full_offload_args"])[:4]
    piped, _ = plan(*case.device_fit_args(fixture), *full, code=(0, 1))  # the 4 copies do not fit under --margin 0
    plain, stderr = plan(*case.device_fit_args(fixture), *full, "-ot", "no_such_tensor=CPU", code=(0, 1))
    assert weights(piped) == weights(plain)
    assert plain["devices"][0]["compute_bytes"] < piped["devices"][0]["compute_bytes"]
    assert "-ot no_such_tensor=CPU: the pattern matches no tensor" in stderr


@pytest.mark.parametrize("flags, message", [
    (["-ot", r"blk\.(1[0-9]=CPU"], r"-ot 'blk\\.(1[0-9]': not a valid regular expression"),
    (["-ot", "exps=CUDA1"], "no device 'CUDA1' in this plan (llama.cpp: unknown buffer type); its devices: CPU, CUDA0"),
    (["-ot", "exps=cpu"], "its devices: CPU, CUDA0"),  # llama.cpp's names are case-sensitive
    (["-ot", "exps"], "'exps' is not PATTERN=DEVICE"),
    (["-ot", "(?P<x>exps)=CPU"], "a named group (?P...) is Python syntax that llama.cpp's std::regex (ECMAScript) refuses"),
    (["-ot", "(?<!attn_)norm=CPU"], "a look-behind"),
    # split at the first `=` as llama.cpp does: the pattern is `(?<`, invalid in both grammars
    (["-ot", "(?<=ffn_)up=CPU"], "-ot '(?<': not a valid regular expression"),
])
def test_bad_overrides_exit_2_with_one_line(qwen3, flags, message):
    _, stderr = moetools(qwen3, *ONE_GPU, *flags, code=2)
    assert message in stderr and "Traceback" not in stderr


def test_ot_is_llama_cpps_placement_not_the_forks(qwen3):
    _, stderr = moetools(qwen3, "--vram", "24G", "-ot", "exps=CPU", "--runtime", "fork", code=2)
    assert "--runtime llama" in stderr
    # the default runtime plans llama.cpp, with the user's override
    stdout, _ = moetools(qwen3, "--vram", "24G", "-ot", "exps=CPU", "--json")
    doc = json.loads(stdout)
    assert doc["runtime"] == "llama" and doc["placement"]["overrides"]


def test_ecmascript_forms_python_spells_otherwise():
    assert overrides.to_python("blk\\.[[:digit:]]+\\.ffn").search("blk.12.ffn_up_exps.weight")
    assert not overrides.to_python("blk\\.[[:digit:]]\\.").search("blk.12.ffn")
    # a comma always separates entries (string_split), as in llama.cpp
    entries = overrides.parse_sources([("-ot", "a=CPU,b=CUDA0"), ("--n-cpu-moe", 2), ("--cpu-moe", None)])
    assert [(pattern, target) for pattern, target, _ in entries] == [
        ("a", "CPU"), ("b", "CUDA0"), (r"blk\.0\.ffn_(up|down|gate|gate_up)_(ch|)exps", "CPU"),
        (r"blk\.1\.ffn_(up|down|gate|gate_up)_(ch|)exps", "CPU"), (r"\.ffn_(up|down|gate|gate_up)_(ch|)exps", "CPU")]
    with pytest.raises(UsageError):
        overrides.parse_sources([("-ot", "blk\\.{1,2}=CPU")])  # '2}=CPU' splits off without '='
