"""device-fit's prompt-processing speed and the -ub/-b/-t choice (issue 30): the per-ubatch copy of
CPU-held experts (ggml-backend's op offload at n_ubatch >= 32), the CPU's own work below that, the -ub
search by --prefer, llama.cpp's clamp of -ub to -b, and the launch line carrying -ub, -b and -t."""

import json

import pytest
from click.testing import CliRunner

from moetools.cli import cli
from moetools.devicefit import batching, core, devices, upstream
from moetools.devicefit.kv import KVSettings
from moetools.devicefit.speed import SpeedSettings
from moetools.devicefit.speed import prompt as promptmod
from moetools.gguf import open_model

GIB = 1024**3


def run_json(*args, code=0):
    result = CliRunner().invoke(cli, ["device-fit", *map(str, args), "--json"])
    assert result.exit_code == code, result.output
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def oss(preset_model):
    path = preset_model("gpt-oss-120b")
    with open_model(path) as model:
        return path, core.model_facts(model)


def plan_with(facts, ub, settings=None, n_cpu_moe=30):
    options = upstream.UpstreamOptions(ctx=8192, kv=KVSettings(ubatch=ub, batch=max(ub, 2048)), speed=settings or SpeedSettings(),
                                       n_cpu_moe=n_cpu_moe, ngl=99)
    gpu = devices.Device("CUDA0", "gpu", 24 * GIB, 936e9, "table", "rtx3090")
    return upstream.plan_at(facts, [gpu], devices.cpu_device(128 * GIB, 60e9, "default"), options, 8192), gpu


def test_routed_share_is_the_uniform_routing_expectation():
    assert promptmod.routed_share(1, 4, 128) == pytest.approx(4 / 128)
    assert promptmod.routed_share(512, 4, 128) == pytest.approx(1 - (1 - 4 / 128) ** 512)
    assert promptmod.routed_share(512, 0, 0) == 0.0


def test_cpu_experts_cross_pcie_once_per_ubatch_so_prompt_speed_grows_with_ub(oss):
    _, facts = oss
    small, _ = plan_with(facts, 512)
    large, _ = plan_with(facts, 4096)
    assert "PCIe copy" in small.pp_breakdown and "CPU" not in small.pp_breakdown
    # the same CPU-held experts: the copy per prompt shrinks with the number of ubatches
    assert large.pp_breakdown["PCIe copy"] == pytest.approx(small.pp_breakdown["PCIe copy"] / 8, rel=0.02)
    assert large.pp_tok_s > small.pp_tok_s


def test_below_32_tokens_the_cpu_computes_its_experts(oss):
    _, facts = oss
    plan_, _ = plan_with(facts, 16)
    assert "PCIe copy" not in plan_.pp_breakdown and plan_.pp_breakdown["CPU"] > 0
    # no op offload (-nopo): the CPU computes them at any ubatch
    no_offload, _ = plan_with(facts, 512, SpeedSettings(op_offload=False))
    assert "PCIe copy" not in no_offload.pp_breakdown and no_offload.pp_breakdown["CPU"] > 0


def test_pcie_rate_and_efficiency_scale_the_copy(oss):
    _, facts = oss
    base, _ = plan_with(facts, 512)
    faster, _ = plan_with(facts, 512, SpeedSettings(pcie_bw=50e9))
    assert faster.pp_breakdown["PCIe copy"] == pytest.approx(base.pp_breakdown["PCIe copy"] * base.n_ubatch / faster.n_ubatch
                                                             * SpeedSettings().pcie_bw / 50e9)


def test_the_json_and_the_table_show_decode_and_prompt_side_by_side(oss):
    path, _ = oss
    doc = run_json(path, "--runtime", "llama", "--gpu", "rtx3090", "--ram", "128G", "-c", 8192)
    assert doc["pp_tok_s"] > 0 and doc["placement"]["pp_tok_s"] == doc["pp_tok_s"]
    assert all("pp_tok_s" in alt and "tok_s" in alt for alt in doc["alternatives"])
    assert doc["prompt_tokens"] == 4096 and doc["placement"]["prompt_seconds"]
    figures = {row["figure"]: row for row in doc["speed_assumptions"]}
    assert {"CUDA0 bandwidth", "RAM bandwidth", "threads", "PCIe", "efficiencies"} <= set(figures)
    assert all(row["source"] for row in doc["speed_assumptions"])


def test_ub_search_and_the_launch_line(oss):
    path, _ = oss
    doc = run_json(path, "--runtime", "llama", "--gpu", "rtx3090", "--ram", "128G", "-c", 8192, "-t", 8)
    rows = doc["batches"]
    assert rows[0]["ubatch"] == 512 and sum(row["chosen"] for row in rows) == 1
    chosen = next(row for row in rows if row["chosen"])
    args = doc["launch"]["llama"]["args"]
    assert args[args.index("-t") + 1] == "8"
    if chosen["ubatch"] != 512:
        assert args[args.index("-ub") + 1] == str(chosen["ubatch"]) and args[args.index("-b") + 1] == str(chosen["batch"])
        assert doc["pp_tok_s"] == pytest.approx(chosen["pp_tok_s"], rel=1e-3)
    # balanced: the chosen row has the shortest request time among those evaluated that fit, or is the default
    assert chosen["request_s"] <= rows[0]["request_s"]


def test_prefer_decode_keeps_the_default_ub_and_prompt_takes_the_largest_that_fits(oss):
    path, _ = oss
    decode = run_json(path, "--runtime", "llama", "--gpu", "rtx3090", "--ram", "128G", "-c", 8192, "--prefer", "decode")
    assert [row["ubatch"] for row in decode["batches"]] == [512] and "-ub" not in decode["launch"]["llama"]["args"]
    prompt = run_json(path, "--runtime", "llama", "--gpu", "rtx3090", "--ram", "128G", "-c", 8192, "--prefer", "prompt")
    chosen = next(row for row in prompt["batches"] if row["chosen"])
    assert chosen["ubatch"] == max(row["ubatch"] for row in prompt["batches"] if row["fits"])
    assert prompt["pp_tok_s"] >= decode["pp_tok_s"]


def test_given_ub_or_b_is_planned_as_given(oss):
    path, _ = oss
    doc = run_json(path, "--runtime", "llama", "--gpu", "rtx3090", "--ram", "128G", "-c", 8192, "-ub", 1024, "-b", 1024)
    assert "batches" not in doc and doc["placement"]["ubatch"] == 1024


def test_ub_above_b_is_clamped_as_llama_cpp_does_and_said(oss):
    path, _ = oss
    doc = run_json(path, "--runtime", "llama", "--gpu", "rtx3090", "--ram", "128G", "-c", 8192, "-ub", 4096, "-b", 2048)
    assert doc["placement"]["ubatch"] == 2048
    assert any("clamps the ubatch to the batch" in note for note in doc["notes"])
    args = doc["launch"]["llama"]["args"]
    assert args[args.index("-ub") + 1] == "2048"


@pytest.mark.parametrize("bad", ["fastest", "DECODE", ""])
def test_unknown_prefer_is_a_usage_error(oss, bad):
    path, _ = oss
    result = CliRunner().invoke(cli, ["device-fit", str(path), "--gpu", "rtx3090", "--prefer", bad])
    assert result.exit_code == 2 and "--prefer" in result.output


def test_batch_score_orders_by_preference():
    class Plan:
        def __init__(self, tok_s, pp_tok_s):
            self.tok_s, self.pp_tok_s = tok_s, pp_tok_s

    slow_prompt, fast_prompt = Plan(10.0, 100.0), Plan(9.5, 900.0)
    assert batching.score(fast_prompt, "prompt") > batching.score(slow_prompt, "prompt")
    assert batching.score(slow_prompt, "decode") > batching.score(fast_prompt, "decode")
    # balanced: 4096/900 + 512/9.5 = 58.4 s against 4096/100 + 512/10 = 92.2 s
    assert batching.score(fast_prompt, "balanced") > batching.score(slow_prompt, "balanced")
    assert batching.request_seconds(10.0, 100.0) == pytest.approx(4096 / 100 + 512 / 10)


def test_too_few_threads_for_the_ram_is_said(oss):
    path, _ = oss
    doc = run_json(path, "--runtime", "llama", "--gpu", "rtx3090", "--ram", "128G", "-c", 8192, "-t", 1)
    assert any(note.startswith("-t 1: decode's CPU reads are thread-bound") for note in doc["notes"])
    enough = run_json(path, "--runtime", "llama", "--gpu", "rtx3090", "--ram", "128G", "-c", 8192, "-t", 16)
    assert not any("thread-bound" in note for note in enough["notes"])


def test_prefer_and_spill_change_nothing_under_the_fork_and_say_so(oss):
    path, _ = oss
    result = CliRunner().invoke(cli, ["device-fit", str(path), "--runtime", "fork", "--vram", "24G", "--prefer", "prompt",
                                      "--spill", "last", "--json"])
    assert result.exit_code in (0, 1), result.output
    assert "--prefer chooses upstream llama.cpp's placement and changes nothing under --runtime fork" in result.stderr
    assert "--spill chooses" in result.stderr
