"""device-fit --check: a whole llama-server / llama-cli command line, as its user runs it, evaluated on
device-fit's devices (--vram/--gpu/--rpc/--ram): does it fit each device, how fast it decodes, and what
device-fit's own plan would change. Real processes on real (header-only) GGUFs."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from moetools import synth
from moetools.devicefit import check, llama_args
from tests import devicefit_llama_case as case

ROOT = Path(__file__).resolve().parent.parent
RECORD = json.loads((Path(__file__).parent / "data" / "devicefit_llama_check.json").read_text())
MiB = 1024 * 1024
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_devicefit_cases import LLAMA_FOUR, LLAMA_ONE  # noqa: E402  (the benchmarks' device sets)


def moetools(*args, code=0, stdin=None):
    result = subprocess.run([sys.executable, "-m", "moetools", "device-fit", *map(str, args)], capture_output=True,
                            text=True, input=stdin)
    assert result.returncode == code, (result.returncode, result.stdout[-3000:], result.stderr[-3000:])
    return result.stdout, result.stderr


def checked(devices, *line, code=0, stdin=None):
    """--check's JSON document and stderr for a command line (after --), or a FILE / - (stdin)."""
    words = list(line) if stdin is None else ["-"]
    stdout, stderr = moetools(*devices, "--json", "--check", "--", *words, code=code, stdin=stdin)
    return json.loads(stdout), stderr


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("check")
    return {name: synth.write_model(synth.preset(name), folder / f"{name}.gguf", sparse=True)[0]
            for name in ("qwen3-30b-a3b", "gpt-oss-120b", "glm-4.5-air", "qwen3-235b", "deepseek-v3")}


def ledger(doc):
    keys = ("name", "resident_bytes", "expert_bytes", "kv_bytes", "compute_bytes", "free_bytes", "layers", "output_layer")
    return [{key: device[key] for key in keys} for device in doc["devices"]]


# the benchmarks' presets (benchmarks/bench_devicefit_cases.py) on its device sets: one GPU with CPU
# experts (--n-cpu-moe and a boundary block's -ot), and 2 GPUs + 2 RPC servers (-ts, per-device -ot)
ROUND_TRIPS = [("qwen3-30b-a3b", LLAMA_ONE), ("gpt-oss-120b", LLAMA_ONE), ("glm-4.5-air", LLAMA_ONE),
               ("qwen3-235b", LLAMA_FOUR), ("deepseek-v3", LLAMA_FOUR)]


@pytest.mark.parametrize("name, devices", ROUND_TRIPS, ids=[f"{name}-{len(devices)}" for name, devices in ROUND_TRIPS])
def test_round_trip_of_the_emitted_launch_gives_back_the_plan(models, tmp_path, name, devices):
    """`--emit llama`'s line, checked from a file, is the same plan: every device's ledger and the speed,
    and device-fit has nothing to change."""
    path = models[name]
    planned = json.loads(moetools(path, *devices, "--json")[0])
    line = moetools(path, *devices, "--emit", "llama")[0]
    assert line.startswith("llama-server ")
    saved = tmp_path / "launch.sh"
    saved.write_text(line)
    doc = json.loads(moetools(*devices, "--json", "--check", saved)[0])
    assert doc["check"]["fits"] and doc["verdict"] == "fits"
    assert ledger(doc) == ledger(planned)
    assert doc["tok_s"] == planned["tok_s"] and doc["context"] == planned["context"]
    assert doc["launch"]["llama"]["args"] == planned["launch"]["llama"]["args"]
    assert doc["check"]["device_fit"]["changes"] == []
    assert doc["check"]["device_fit"]["args"] == planned["launch"]["llama"]["args"]


@pytest.mark.parametrize("name, extra", [("qwen3-235b", ["--draft", "qwen3-30b-a3b"]), ("glm-4.5-air", ["--spec-type", "draft-mtp"])],
                         ids=["draft", "draft-mtp"])
def test_round_trip_with_speculative_decoding(models, tmp_path, name, extra):
    """The benchmarks' --draft and draft-mtp cases: -md/-ngld/-ctkd/-ctvd/--spec-type read back."""
    extra = [str(models[word]) if word in models else word for word in extra]
    planned = json.loads(moetools(models[name], *LLAMA_ONE, *extra, "--json")[0])
    saved = tmp_path / "launch.sh"
    saved.write_text(moetools(models[name], *LLAMA_ONE, *extra, "--emit", "llama")[0])
    doc = json.loads(moetools(*LLAMA_ONE[2:], "--json", "--check", saved)[0])
    assert ledger(doc) == ledger(planned) and doc["tok_s"] == planned["tok_s"]
    assert doc["draft"] == planned["draft"] and doc["check"]["device_fit"]["changes"] == []


def test_the_recorded_llama_cpp_line_gives_its_logged_buffers(tmp_path):
    """The line llama.cpp ran with --fit's overrides (tests/data/devicefit_llama_check.json), checked
    on the same two RPC servers: each device's model buffer is what llama.cpp logged."""
    path = synth.write_model(case.fixture_spec(), tmp_path / "fixture.gguf", sparse=True)[0]
    devices = ["--ram", "16G", "--margin", "0"] + [f"--rpc=127.0.0.1:{p}={s}" for p, s in zip(case.RPC_PORTS, case.RPC_SIZES)]
    rpc = ",".join(f"127.0.0.1:{port}" for port in case.RPC_PORTS)
    line = ["llama-completion", "-m", path, "--rpc", rpc, *RECORD["fit_params_args"], "--fit", "off", "-fa", "on",
            "-np", "1", "--no-kv-unified", "-p", "hello", "-n", "16"]
    doc, stderr = checked(devices, *line)
    for device in doc["devices"]:
        assert f"{(device['resident_bytes'] + device['expert_bytes']) / MiB:.2f}" == RECORD["fit_params_logged"][device["name"]]["model"]
    assert "-p hello" in doc["check"]["ignored_flags"] and "-n 16" in doc["check"]["ignored_flags"]


def test_a_line_that_does_not_fit_exits_1_with_the_shortfall_and_the_fix(models):
    doc, _ = checked(["--vram", "8G", "--ram", "64G"], "llama-server", "-m", models["qwen3-30b-a3b"], "-c", "8192",
                     "-ngl", "99", code=1)
    answer = doc["check"]
    assert not answer["fits"] and doc["verdict"] == "unfittable"
    assert answer["shortfall_bytes"]["CUDA0"] > 0
    fix = answer["device_fit"]
    assert fix["args"][fix["args"].index("-c") + 1] == "8192"  # the same context, a placement that fits
    assert any(change.startswith("add --n-cpu-moe") for change in fix["changes"])
    assert any("does NOT fit: CUDA0 short by" in line for line in answer["summary"])


def test_what_device_fit_changes_and_buys(models):
    doc, _ = checked(["--vram", "24G", "--ram", "64G"], "llama-server", "-m", models["qwen3-30b-a3b"], "-c", "8192",
                     "-ngl", "99", "-ot", "exps=CPU", "-np", "1")
    answer = doc["check"]
    assert answer["fits"]
    assert answer["device_fit"]["changes"] == ["drop -ot exps=CPU"]  # -ngl 99 is every layer already
    assert answer["device_fit"]["gain"] > 1 and answer["device_fit"]["tok_s"] > answer["tok_s"]


def test_llama_server_defaults_and_the_flags_of_each_kind(models):
    """llama-server's -np auto is 4 sequences sharing a unified cache; -c absent is the training context;
    flags that change nothing are listed, those not modelled are named, unknown ones warned about."""
    doc, stderr = checked(["--vram", "24G", "--ram", "64G"], "CUDA_VISIBLE_DEVICES=0", "./build/bin/llama-server",
                          "--model", models["qwen3-30b-a3b"], "--n_gpu_layers", "99", "--cpu-moe", "--host", "0.0.0.0",
                          "--port", "8080", "--jinja", "--temp", "0.6", "-nkvo", "--frobnicate", "3")
    args = doc["launch"]["llama"]["args"]
    assert args[args.index("-np") + 1] == "4" and "-kvu" in args
    assert doc["context"] == doc["context_train"]
    assert args[args.index("-ngl") + 1] == "99" and "--cpu-moe" in args
    answer = doc["check"]
    assert answer["ignored_flags"] == ["--host 0.0.0.0", "--port 8080", "--jinja", "--temp 0.6"]
    assert answer["not_modelled_flags"] == ["-nkvo"]
    assert answer["unknown_flags"] == ["--frobnicate 3"]
    assert "--frobnicate 3: not a llama.cpp flag" in stderr


def test_llama_cli_runs_one_sequence(models):
    doc, _ = checked(["--vram", "24G", "--ram", "64G"], "llama-cli", "-m", models["qwen3-30b-a3b"], "-c", "4096", "-ngl", "99",
                     "--n-cpu-moe", "20")
    args = doc["launch"]["llama"]["args"]
    assert args[args.index("-np") + 1] == "1" and "--no-kv-unified" in args


def test_fit_on_without_placement_is_device_fits_own(models):
    """--fit on (llama.cpp's default) with no -ngl/-ts/override: llama.cpp places the model itself;
    device-fit's placement stands for it and nothing changes."""
    doc, _ = checked(["--vram", "24G", "--ram", "64G"], "llama-server", "-m", models["qwen3-30b-a3b"], "-c", "8192")
    assert doc["check"]["device_fit"]["changes"] == []
    assert any("llama.cpp fits the placement itself" in note for note in doc["notes"])


def test_the_line_from_stdin_with_continuations_and_comments(models):
    text = (f"# my launch\nOMP_NUM_THREADS=8 llama-server -m {models['qwen3-30b-a3b']} \\\n"
            "    -c 8192 -ngl 99 \\\n    -ot 'blk\\.(1[0-9])\\.ffn_.*_exps=CPU'  # the middle experts\n")
    doc, _ = checked(["--vram", "24G", "--ram", "64G"], stdin=text)
    args = doc["launch"]["llama"]["args"]
    assert args[args.index("-ot") + 1] == "blk\\.(1[0-9])\\.ffn_.*_exps=CPU"
    assert doc["placement"]["cpu_expert_layers"] == list(range(10, 20))


@pytest.mark.parametrize("devices, line, message", [
    (["--vram", "24G"], ["llama-server", "-c", "4096"], "the command line loads no model"),
    (["--vram", "24G"], ["llama-server", "-m", "MODEL", "-c"], "-c needs 1 value(s)"),
    (["--vram", "24G"], ["llama-server", "-m", "MODEL", "-c", "lots"], "-c 'lots': expected a whole number"),
    (["--vram", "24G"], ["llama-server", "-m", "MODEL", "--rpc", "10.0.0.9:50052"], "the line's --rpc (10.0.0.9:50052) is not device-fit's --rpc (none)"),
    (["--vram", "24G"], ["llama-server", "-m", "MODEL", "-ctk", "q5_9"], "-ctk 'q5_9': not a cache type"),
    (["--vram", "24G"], ["llama-server", "-m", "MODEL", "-ot", "exps=CUDA3"], "no device 'CUDA3' in this plan"),
    (["--vram", "24G"], ["llama-server", "-m", "MODEL", "-ot", "blk\\.(=CPU"], "not a valid regular expression"),
    (["--vram", "24G"], ["llama-server", "-hf", "org/repo:Q4_K_M"], "-hf org/repo:Q4_K_M names no file"),
    (["--vram", "24G", "--emit", "llama"], ["llama-server", "-m", "MODEL"], "--check answers for a command line"),
    (["--vram", "24G"], [], "no command line"),
    (["--vram", "24G"], ["MODEL", "llama-server", "-c", "4096"], "--check reads the model from the command line's -m"),
])
def test_bad_input_exits_2_with_one_line(models, devices, line, message):
    line = [models["qwen3-30b-a3b"] if word == "MODEL" else word for word in line]
    _, stderr = moetools(*devices, "--check", "--", *line, code=2)
    assert message in stderr and "Traceback" not in stderr


def test_model_without_check_still_needs_one_model():
    _, stderr = moetools("--vram", "24G", code=2)
    assert stderr.strip() == "error: missing argument MODEL (see moetools device-fit --help)"
    _, stderr = moetools("a.gguf", "b.gguf", "--vram", "24G", code=2)
    assert "unexpected extra argument" in stderr and "--check --" in stderr


def test_every_spelling_read_is_one_of_llama_cpps():
    """The modelled and not-modelled spellings are flags common/arg.cpp declares (or the older
    --no-mmap/--mlock), so none of them is a guess."""
    for flag in [*check.MODELLED, *check.NOT_MODELLED]:
        assert llama_args.arity(flag) is not None, flag
    assert llama_args.arity("-ot") == 1 and llama_args.arity("--cpu-moe") == 0 and llama_args.arity("-kvu") == 0
    assert llama_args.arity("--control-vector-layer-range") == 2


def test_the_json_launch_and_the_first_command_of_a_script(models, tmp_path):
    """`--emit llama --json`'s {"command": [...]} is read as the line; a script's first command is checked."""
    path = models["qwen3-30b-a3b"]
    devices = ["--vram", "8G", "--ram", "64G"]
    emitted = moetools(path, "--runtime", "llama", *devices, "--emit", "llama", "--json")[0]
    saved = tmp_path / "launch.json"
    saved.write_text(emitted)
    doc = json.loads(moetools(*devices, "--json", "--check", saved)[0])
    assert ["llama-server", *doc["launch"]["llama"]["args"]] == json.loads(emitted)["command"]
    script = tmp_path / "run.sh"
    script.write_text(f"#!/bin/sh\n\nllama-server -m {path} -c 4096 --n-cpu-moe 40\necho done\n")
    doc = json.loads(moetools(*devices, "--json", "--check", script)[0])
    assert doc["check"]["unknown_flags"] == [] and doc["placement"]["n_cpu_moe"] == 40


def test_without_mmap_the_cpus_weights_must_fit_ram(models):
    """--no-mmap (or -lm none): the CPU's weights are read into RAM, no page cache to fall back on, so
    a CPU share above --ram is a shortfall (exit 1); memory-mapped, the same line fits."""
    line = ["llama-server", "-m", models["qwen3-30b-a3b"], "-c", "4096", "-ngl", "99", "--cpu-moe"]
    devices = ["--vram", "24G", "--ram", "16G"]
    mapped, _ = checked(devices, *line)
    assert mapped["check"]["fits"]
    for flags in (["--no-mmap"], ["-lm", "none"], ["--mlock"], ["-lm", "mmap+mlock"]):
        doc, _ = checked(devices, *line, *flags, code=1)
        assert not doc["check"]["fits"] and doc["check"]["shortfall_bytes"]["CPU"] > 0


def test_fit_on_shrinks_an_unset_context_that_does_not_fit(models):
    """common/fit.cpp: with --fit on and no -c, a training context that does not fit is reduced (a
    multiple of 256 per KV stream, not below --fit-ctx); -c 0 (the whole context) and --fit off are
    evaluated as they are."""
    devices = ["--vram", "12G", "--ram", "256G"]
    line = ["llama-server", "-m", models["qwen3-235b"], "-ngl", "99", "--cpu-moe"]
    doc, _ = checked(devices, *line)
    assert 4096 <= doc["context"] < doc["context_train"] and doc["context"] % 256 == 0
    assert any("--fit on shrinks the context from 40960" in note for note in doc["notes"])
    assert checked(devices, *line, "-fitc", str(doc["context"] + 256), code=1)[0]["check"]["shortfall_bytes"]["CUDA0"] > 0
    for flags in (["-c", "0"], ["--fit", "off"]):
        failed, _ = checked(devices, *line, *flags, code=1)
        assert not failed["check"]["fits"]
