"""device-fit's runtimes as a llama.cpp user meets them (issue 29): with no --runtime it plans upstream
llama.cpp on every device and shows the streaming fork's division beside it only where the fork applies;
each runtime's flags are refused (placement under the fork) or warned about (the fork's inputs under
llama), never dropped in silence."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from moetools.cli import cli

GIB = 1024**3
ROOT = Path(__file__).resolve().parent.parent


def run(*args, input=None):
    return CliRunner().invoke(cli, ["device-fit", *map(str, args)], input=input)


def run_json(*args, code=0):
    result = run(*args, "--json")
    assert result.exit_code == code, result.output
    return json.loads(result.stdout)


def test_experts_that_fit_in_ram_and_no_fork_inputs_plan_llama_cpp_alone(preset_model):
    doc = run_json(preset_model("qwen3-235b"), "--vram", "24G", "--ram", "256G", "--ctx", 8192)
    assert doc["runtime"] == "llama" and doc["verdict"] == "fits"
    assert "fork" not in doc and "runtimes" not in doc
    assert doc["launch"]["llama"]["args"][:1] == ["-m"]


def test_experts_past_ram_show_the_fork_beside_with_why(preset_model):
    """K3 on one 32 GiB card with 128 GiB of RAM: upstream would read most experts from the drive, so
    both rows belong on the screen; each says what it rests on, and the faster is marked."""
    doc = run_json(preset_model("kimi-k3", shards=14), "--vram", "32G", "--ram", "128G", "--ctx", 16384)
    rows = {row["runtime"]: row for row in doc["runtimes"]}
    assert set(rows) == {"llama", "fork"} and sum(row["best"] for row in rows.values()) == 1
    assert "do not fit in --ram" in doc["fork"]["applies_because"]
    assert rows["fork"]["tok_s"] == doc["fork"]["tok_s"] and rows["llama"]["tok_s"] == doc["tok_s"]
    assert rows["fork"]["context"] == doc["fork"]["context"] and "cached in VRAM" in rows["fork"]["why"]
    assert doc["fork"]["runtime"] == "fork" and doc["runtime"] == "llama"


def test_exit_1_only_when_neither_runtime_fits(preset_model):
    k3 = preset_model("kimi-k3", shards=14)
    doc = run_json(k3, "--vram", "32G", "--ram", "16G", "--ctx", 16384)
    rows = {row["runtime"]: row for row in doc["runtimes"]}
    # upstream reads ~600 GiB of experts from the drive per pass; the fork streams only the misses
    assert rows["llama"]["fits"] and rows["fork"]["fits"] and rows["fork"]["best"]
    assert rows["fork"]["tok_s"] > rows["llama"]["tok_s"]
    none = run(k3, "--vram", "4G", "--ram", "64G", "--ctx", 16384, "--json")
    assert none.exit_code == 1, none.output
    assert not any(row["fits"] for row in json.loads(none.stdout)["runtimes"])


def test_fork_inputs_make_the_fork_apply_and_name_themselves(preset_model):
    """make run's plan: K3 with the example coverage curve; RAM holds the experts here, the curve alone
    makes the fork apply."""
    curve = ROOT / "examples" / "k3-coverage.json"
    doc = run_json(preset_model("kimi-k3", shards=14), "--vram", "32G", "--ram", "2T", "--coverage", curve)
    assert doc["fork"]["applies_because"] == "the fork's inputs are given (--coverage)"
    assert doc["fork"]["coverage_source"] != "none" and {row["runtime"] for row in doc["runtimes"]} == {"llama", "fork"}


def test_installed_tiers_make_the_fork_apply(tiny_models, tmp_path):
    from moetools import synth

    model = tmp_path / "qwen3moe.gguf"
    synth.write_model(synth.tiny("qwen3moe"), model)
    quantized = CliRunner().invoke(cli, ["quantize", str(model), "--resident-only", "--type", "q8_0", "--json"])
    assert quantized.exit_code == 0, quantized.output
    doc = run_json(model, "--vram", "8G", "--ram", "64G")
    assert "resident tiers were found" in doc["fork"]["applies_because"], doc.get("fork", {}).get("applies_because")


@pytest.mark.parametrize("flag", [["-ngl", "10"], ["-ts", "1,2"], ["--n-cpu-moe", "5"], ["-mg", "0"], ["--depth", "100"]])
def test_llama_placement_flags_under_the_fork_are_refused(tiny_models, flag):
    result = run(tiny_models["qwen3moe"], "--vram", "8G", "--runtime", "fork", *flag)
    assert result.exit_code == 2, result.output
    message = result.stderr.strip()
    assert len(message.splitlines()) == 1 and flag[0] in message and "--runtime llama" in message


def test_fork_inputs_under_llama_are_warned_about(tiny_models, tmp_path):
    result = run(tiny_models["qwen3moe"], "--vram", "8G", "--ram", "64G", "--runtime", "llama", "--tiers", tmp_path,
                 "--plan", tmp_path / "p.json", "--json")
    assert result.exit_code == 0, result.output
    assert "--tiers is the streaming fork's and changes nothing under --runtime llama" in result.stderr
    assert "--plan is the streaming fork's" in result.stderr
    assert not (tmp_path / "p.json").exists()


def test_llama_speed_flags_under_the_fork_are_warned_about(tiny_models):
    result = run(tiny_models["qwen3moe"], "--vram", "8G", "--runtime", "fork", "--ram-bw", "100GB/s", "--json")
    assert result.exit_code == 0, result.output
    assert "--ram-bw is upstream llama.cpp's" in result.stderr


def test_emit_env_needs_the_fork_to_apply(preset_model):
    """--emit env asks for the fork's exports: the fork applies, unless it cannot (RPC devices)."""
    refused = run(preset_model("qwen3-235b"), "--vram", "24G", "--ram", "256G", "--rpc", "10.0.0.2:50052=24G", "--emit", "env")
    assert refused.exit_code == 2 and "RPC" in refused.stderr, refused.output
    exports = run(preset_model("kimi-k3", shards=14), "--vram", "32G", "--ram", "128G", "--emit", "env")
    assert exports.exit_code == 0, exports.output
    assert "GGML_MOE_VRAM_CACHE_GB" in exports.stdout or "GGML_MOE_HOST_CACHE_GB" in exports.stdout


def test_plan_file_in_auto_is_the_forks(preset_model, tmp_path):
    plan = tmp_path / "k3.plan.json"
    doc = run_json(preset_model("kimi-k3", shards=14), "--vram", "32G", "--ram", "1T", "--ctx", 16384, "--plan", plan)
    assert "--plan" in doc["fork"]["applies_because"]
    written = json.loads(plan.read_text())
    assert written["device_budget_bytes"] == doc["fork"]["expert_budget_bytes"]


def test_several_gpus_with_the_fork_beside_say_what_the_fork_supports(preset_model):
    doc = run_json(preset_model("kimi-k3", shards=14), "--vram", "32G,24G", "--ram", "128G", "--ctx", 8192)
    assert [d["name"] for d in doc["devices"]][:2] == ["CUDA0", "CUDA1"]
    assert any("one expert cache" in note for note in doc["fork"]["notes"])


# --- the fork's tok/s follows its cache ---------------------------------------------------------------

def test_fork_speed_falls_when_ram_cannot_hold_the_experts(preset_model):
    """A Kimi-K2-class model at --ram 64G: the page cache holds a few percent of the experts, so most
    misses are drive reads; at 1024G every miss comes from RAM. The figure says which it assumes."""
    k2 = preset_model("kimi-k2", shards=8)
    small = run_json(k2, "--vram", "24G", "--ram", "64G", "--ctx", 16384, "--runtime", "fork")
    large = run_json(k2, "--vram", "24G", "--ram", "1024G", "--ctx", 16384, "--runtime", "fork")
    assert small["tok_s"] < large["tok_s"] / 2
    assert "read from the drive at 3 GB/s (--disk-bw)" in small["speed_assumes"]
    assert "the page cache holds every expert" in large["speed_assumes"]
    faster_drive = run_json(k2, "--vram", "24G", "--ram", "64G", "--ctx", 16384, "--runtime", "fork", "--disk-bw", "12GB/s")
    assert small["tok_s"] < faster_drive["tok_s"] < large["tok_s"]


def test_fork_speed_of_a_host_cache_is_the_host_caches(preset_model):
    """With --ram large enough, the emitted settings put the one cache in host RAM
    (GGML_MOE_HOST_CACHE_GB): the tok/s is that cache's (its coverage, its hits over PCIe), not the
    VRAM budget's."""
    from moetools.devicefit.speed import fork_tok_s

    doc = run_json(preset_model("qwen3-30b-a3b"), "--vram", "8G", "--ram", "64G", "--ctx", 8192, "--runtime", "fork")
    assert doc["fork_cache"]["device"] == "host"
    assert doc["speed_assumes"].startswith("a host-RAM cache whose hits still cross PCIe")
    read = doc["experts_per_token"] * doc["expert_bytes"]
    expected = fork_tok_s(doc["coverage"], doc["experts_per_token"], doc["expert_bytes"], 25e9, 0.010, cache_on_host=True)
    assert doc["tok_s"] == round(expected, 4) and doc["tok_s"] <= round(1 / (read / 25e9 + 0.010), 4) + 1e-4


def test_fork_speed_without_ram_says_it_assumes_the_page_cache_holds_the_experts(tiny_models):
    doc = run_json(tiny_models["qwen3moe"], "--vram", "8G", "--runtime", "fork")
    assert "assuming the page cache holds every expert (no --ram)" in doc["speed_assumes"]


# --- a user placement that does not fit, said right ---------------------------------------------------

def test_an_unfitting_placement_names_its_own_vram_and_the_nearest_that_fits(preset_model):
    """-ngl 99 --n-cpu-moe 80 of Qwen3-235B on a 24G card: the answer is the VRAM at which THAT placement
    fits (not the whole model's), and the --n-cpu-moe that fits the card the user has, with its speed;
    each held to device-fit's own evaluation of the placement it names."""
    model = preset_model("qwen3-235b")
    base = ["--runtime", "llama", "--ram", "256G", "--ctx", 4096, "-ngl", 99]
    doc = run_json(model, "--vram", "24G", *base, "--n-cpu-moe", 80, code=1)
    fixes = doc["unfittable"]
    vram = fixes["placement_fits_from_vram_bytes"]
    step = 256 * 1024 * 1024
    assert run(model, "--vram", vram, *base, "--n-cpu-moe", 80, "--json").exit_code == 0
    assert run(model, "--vram", vram - step, *base, "--n-cpu-moe", 80, "--json").exit_code == 1
    nearest = fixes["nearest"]
    assert nearest["ngl"] == 99 and nearest["n_cpu_moe"] > 80
    fitting = run_json(model, "--vram", "24G", *base, "--n-cpu-moe", nearest["n_cpu_moe"])
    assert fitting["verdict"] == "fits" and fitting["tok_s"] == nearest["tok_s"]
    assert run(model, "--vram", "24G", *base, "--n-cpu-moe", nearest["n_cpu_moe"] - 1, "--json").exit_code == 1
    summary = fixes["summary"]
    assert f"-ngl 99 --n-cpu-moe 80 fits from {vram / GIB:.1f} GiB per GPU" in summary
    assert f"on these devices -ngl 99 --n-cpu-moe {nearest['n_cpu_moe']} fits" in summary


def test_an_unfitting_ngl_alone_gets_the_n_cpu_moe_that_fits(preset_model):
    model = preset_model("qwen3-235b")
    doc = run_json(model, "--vram", "24G", "--runtime", "llama", "--ram", "256G", "--ctx", 4096, "-ngl", 99, code=1)
    nearest = doc["unfittable"]["nearest"]
    assert nearest["flags"].startswith("-ngl 99 --n-cpu-moe ")
