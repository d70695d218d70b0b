"""device-fit --runtime llama: devices, llama.cpp's layer assignment, the chooser, the ledger, the
speed model, the launch command and the bad-input handling."""

import json
import os
import random
import stat
import sys

import pytest
from click.testing import CliRunner

from moetools.cli import cli
from moetools.devicefit import core, devices, kv, placement, speed, upstream, upstream_doc
from moetools.devicefit.kv import KVSettings
from moetools.devicefit.placement import CPU
from moetools.errors import UsageError
from moetools.gguf import open_model

GIB = 1024**3


def run(*args):
    return CliRunner().invoke(cli, ["device-fit", *map(str, args)], catch_exceptions=False)


def run_json(*args, code=0):
    result = run(*args, "--json")
    assert result.exit_code == code, result.output
    return json.loads(result.stdout)


def facts_of(path):
    with open_model(path) as model:
        return core.model_facts(model)


# --- llama.cpp's layer assignment -----------------------------------------------------------------

def test_assign_layers_by_hand():
    # 4 blocks + output; -ts 1,1: il/5 = 0, .2, .4 below the split point .5, then .6, .8
    assert placement.assign_layers(4, 5, [1, 1]) == [0, 0, 0, 1, 1]
    # -ngl 3: the first two blocks stay on the CPU; il - 2 over 3 = 0, .33 (dev 0), .67 (dev 1)
    assert placement.assign_layers(4, 3, [1, 1]) == [CPU, CPU, 0, 0, 1]
    assert placement.assign_layers(4, 0, [1]) == [CPU] * 5
    assert placement.assign_layers(4, 99, [0, 1]) == [1] * 5  # a zero weight holds nothing
    assert placement.assign_layers(60, 61, [6, 5, 50]) == [0] * 6 + [1] * 5 + [2] * 50


@pytest.mark.parametrize("seed", range(20))
def test_counts_as_ts_reproduce_themselves(seed):
    """-ts of per-device layer counts (as --fit writes it) assigns exactly those counts."""
    rng = random.Random(seed)
    n_devices = rng.randint(1, 5)
    counts = [rng.randint(0, 30) for _ in range(n_devices)]
    counts[-1] += 1
    n_layer = sum(counts) - 1 + rng.randint(0, 10)
    ngl = sum(counts)
    got = placement.assign_layers(n_layer, ngl, counts)
    assert [got.count(index) for index in range(n_devices)] == counts
    assert got[-1] == max(i for i, c in enumerate(counts) if c)


# --- the chooser ------------------------------------------------------------------------------------

def _plan(facts, budgets_gib, ctx=4096, **options):
    gpus = [devices.Device(f"CUDA{i}", "gpu", int(b * GIB), 900e9) for i, b in enumerate(budgets_gib)]
    cpu = devices.cpu_device(512 * GIB, 60e9, "test")
    opts = upstream.UpstreamOptions(ctx=ctx, reserve=0, **options)
    return upstream.plan(facts, gpus, cpu, opts), gpus


@pytest.mark.parametrize("budgets", [[1.0], [0.5, 0.5], [0.2, 0.3, 0.6], [0.05], [0.02, 0.02], [3, 3]])
def test_chosen_placement_fits_and_reproduces_with_its_flags(preset_model, budgets):
    facts = facts_of(preset_model("qwen3-235b"))
    scale = facts.layers.blocks[0].total_bytes * len(facts.layers.blocks) / GIB  # the model in GiB
    result, gpus = _plan(facts, [b * scale for b in budgets])
    chosen = result.chosen
    assert chosen is not None and chosen.fits
    for share in chosen.shares[:-1]:
        assert share.free_bytes >= 0, share.device.name
    flags = chosen.placement
    again = placement.assign_layers(facts.layers.n_layer, flags.ngl, flags.ts)
    assert again == flags.layer_device
    # everything is somewhere, once
    total = sum(share.model_bytes for share in chosen.shares)
    layers = facts.layers
    assert total >= sum(b.total_bytes for b in layers.blocks) + layers.output_bytes + layers.input_bytes


def test_more_memory_never_holds_less(preset_model):
    facts = facts_of(preset_model("gpt-oss-120b"))
    held = []
    for gib in (8, 16, 24, 32, 48, 64, 96):
        result, _ = _plan(facts, [gib])
        held.append(result.chosen.gpu_bytes)
    assert held == sorted(held)


def test_single_gpu_is_n_cpu_moe_and_matches_a_user_n_cpu_moe(preset_model):
    facts = facts_of(preset_model("gpt-oss-120b"))
    result, gpus = _plan(facts, [24])
    chosen = result.chosen
    n = chosen.placement.n_cpu_moe
    assert n is not None and n > 0
    args = upstream.server_args("m.gguf", result, [])
    assert args[args.index("--n-cpu-moe") + 1] == str(n)
    # the user's --n-cpu-moe N+1 holds no more on the GPU than the chosen plan (which keeps part of block N)
    user, _ = _plan(facts, [24], n_cpu_moe=n + 1)
    assert user.chosen.gpu_bytes <= chosen.gpu_bytes
    assert user.chosen.placement.layer_device == chosen.placement.layer_device


def test_boundary_block_keeps_single_matrices(preset_model):
    facts = facts_of(preset_model("gpt-oss-120b"))
    result, _ = _plan(facts, [24])
    partial = [homes for homes in result.chosen.placement.expert_device.values() if len(set(homes.values())) > 1]
    assert len(partial) <= 1
    for homes in partial:
        on_gpu = sorted(part for part, home in homes.items() if home != CPU)
        assert on_gpu in (["up"], ["gate", "up"], ["gate_up"])


def test_dense_part_not_fitting_keeps_leading_layers_on_the_cpu(preset_model):
    facts = facts_of(preset_model("kimi-k2"))
    result, _ = _plan(facts, [2])
    chosen = result.chosen
    assert chosen.placement.layer_device[0] == CPU and chosen.placement.layer_device[-1] == 0
    assert chosen.placement.ngl < facts.layers.n_layer + 1
    assert chosen.shares[0].free_bytes >= 0


def test_kv_per_layer_sums_to_the_caches(tiny_models):
    for path in tiny_models.values():
        shape = facts_of(path).shape
        for settings in (KVSettings(), KVSettings(flash_attn=False), KVSettings(ctk="q8_0", ctv="q8_0", n_seq=2)):
            try:
                kv.check_settings(shape, settings)
            except UsageError:
                continue
            assert sum(kv.per_layer(shape, 5000, settings)) == kv.total(kv.kv_caches(shape, 5000, settings))


def test_ledger_puts_each_layer_kv_on_its_device(preset_model):
    facts = facts_of(preset_model("qwen3-235b"))
    result, _ = _plan(facts, [40, 40], ctx=32768)
    shares = result.chosen.shares
    per_layer = kv.per_layer(facts.shape, 32768, KVSettings())
    for share in shares:
        assert share.kv_bytes == sum(per_layer[il] for il in share.layers)
    assert shares[1].holds_output and not shares[0].holds_output


# --- speed ------------------------------------------------------------------------------------------

def test_speed_by_hand_for_cpu_experts(preset_model):
    facts = facts_of(preset_model("gpt-oss-120b"))
    settings = speed.SpeedSettings(ram_bw=50e9, threads=64, hop_local_s=0, floor_s=0)
    result, gpus = _plan(facts, [24], speed=settings, depth=0)
    chosen = result.chosen
    gpu, cpu = chosen.shares
    expected = gpu.active_bytes / (900e9 * settings.gpu_efficiency) + cpu.active_bytes / (50e9 * settings.cpu_efficiency)
    assert chosen.seconds == pytest.approx(expected, rel=1e-9)
    active_cpu = sum(facts.layers.blocks[b].experts[p] * facts.layers.blocks[b].active_fraction
                     for b, parts in chosen.placement.expert_device.items() for p, h in parts.items() if h == CPU)
    assert cpu.active_bytes == pytest.approx(active_cpu)


def test_page_cache_misses_when_ram_is_short(preset_model):
    facts = facts_of(preset_model("kimi-k2"))
    gpus = [devices.Device("CUDA0", "gpu", 24 * GIB, 900e9)]
    fast = upstream.plan(facts, gpus, devices.cpu_device(1024 * GIB, 60e9, ""), upstream.UpstreamOptions(ctx=8192))
    slow = upstream.plan(facts, gpus, devices.cpu_device(128 * GIB, 60e9, ""), upstream.UpstreamOptions(ctx=8192))
    assert "disk" not in fast.chosen.breakdown and slow.chosen.breakdown["disk"] > 0
    assert slow.chosen.tok_s < fast.chosen.tok_s
    assert any("drive" in warning for warning in slow.warnings)


def test_context_trade_off_picks_the_largest_within_5_percent(preset_model):
    facts = facts_of(preset_model("gpt-oss-120b"))
    gpus = [devices.Device("CUDA0", "gpu", 24 * GIB, 900e9)]
    result = upstream.plan(facts, gpus, devices.cpu_device(256 * GIB, 60e9, ""), upstream.UpstreamOptions())
    speeds = {plan.context: plan.tok_s for plan in result.alternatives if plan.fits}
    best = max(speeds.values())
    assert result.chosen.context == max(c for c, s in speeds.items() if s >= 0.95 * best)
    assert sorted(speeds) == [4096, 8192, 16384, 32768, 65536, 131072]
    assert any("5%" in note for note in result.notes)


# --- devices ----------------------------------------------------------------------------------------

class Answer:
    def __init__(self, returncode, stdout="", stderr=""):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def test_detect_nvidia_and_rocm():
    def which(name):
        return "/usr/bin/" + name if name == "nvidia-smi" else None

    smi = "0, NVIDIA GeForce RTX 4090, 23000, 24564\n1, NVIDIA GeForce RTX 3090, 20000, 24576\n"
    gpus = devices.detect_gpus(which, lambda argv, timeout: Answer(0, smi))
    assert gpus == [("NVIDIA GeForce RTX 4090", 23000 * 2**20), ("NVIDIA GeForce RTX 3090", 20000 * 2**20)]
    built = devices.build_gpus(detected=gpus)
    assert [d.bandwidth for d in built] == [1008e9, 936e9] and built[1].name == "CUDA1"
    rocm = json.dumps({"card0": {"VRAM Total Memory (B)": "25753026560", "VRAM Total Used Memory (B)": "753026560"}})
    gpus = devices.detect_gpus(lambda name: "/opt/rocm/bin/rocm-smi" if name == "rocm-smi" else None,
                               lambda argv, timeout: Answer(0, rocm))
    assert gpus == [("card0", 25_000_000_000)]


def test_detect_names_the_tools_tried():
    with pytest.raises(UsageError, match="tried nvidia-smi \\(not on the PATH\\), rocm-smi \\(not on the PATH\\)"):
        devices.detect_gpus(lambda name: None, lambda argv, timeout: None)
    with pytest.raises(UsageError, match="nvidia-smi \\(exit 9: NVIDIA-SMI has failed"):
        devices.detect_gpus(lambda name: "/x/" + name if name == "nvidia-smi" else None,
                            lambda argv, timeout: Answer(9, "", "NVIDIA-SMI has failed\n"))


@pytest.mark.skipif(sys.platform.startswith("win"), reason="a shell script stands in for nvidia-smi")
def test_vram_auto_runs_nvidia_smi_from_the_path(tiny_models, tmp_path, monkeypatch):
    tool = tmp_path / "nvidia-smi"
    tool.write_text("#!/bin/sh\necho '0, NVIDIA GeForce RTX 4090, 20480, 24564'\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(tmp_path))
    doc = run_json(tiny_models["qwen3moe"], "--runtime", "llama", "--vram", "auto", "--ram", "16G", "--ctx", 4096)
    assert doc["devices"][0]["name"] == "CUDA0" and doc["devices"][0]["capacity_bytes"] == 20 * GIB
    assert doc["devices"][0]["bandwidth_bytes_per_s"] == 1008e9
    monkeypatch.setenv("PATH", str(tmp_path / "none"))
    result = run(tiny_models["qwen3moe"], "--runtime", "llama", "--vram", "auto")
    assert result.exit_code == 2 and "nvidia-smi" in result.output and "rocm-smi" in result.output


def test_rpc_specs():
    assert devices.parse_rpc("192.168.1.20:50052=24G") == ("192.168.1.20:50052", 24 * GIB)
    assert devices.parse_rpc("[::1]:50052=8G") == ("[::1]:50052", 8 * GIB)
    for bad in ("host:50052", "host=24G", ":1=2G", "h:0=2G", "h:99999=2G", "h:1=0", "h:1=lots"):
        with pytest.raises(UsageError, match="--rpc"):
            devices.parse_rpc(bad)


def test_devices_are_in_llama_cpp_order(tiny_models):
    doc = run_json(tiny_models["qwen3moe"], "--runtime", "llama", "--gpu", "rtx4090,rtx3090",
                   "--rpc", "127.0.0.1:50052=4G", "--rpc", "127.0.0.1:50053=4G", "--ram", "16G", "--ctx", 4096)
    assert [d["name"] for d in doc["devices"]] == ["RPC0[127.0.0.1:50052]", "RPC0[127.0.0.1:50053]", "CUDA0", "CUDA1", "CPU"]
    assert [d["kind"] for d in doc["devices"]] == ["rpc", "rpc", "gpu", "gpu", "cpu"]
    for device in doc["devices"]:
        assert set(device) >= {"name", "kind", "capacity_bytes", "compute_bytes", "resident_bytes", "kv_bytes",
                               "expert_bytes", "margin_bytes", "free_bytes"}
        assert device["free_bytes"] == device["capacity_bytes"] - sum(
            device[key] for key in ("compute_bytes", "resident_bytes", "kv_bytes", "expert_bytes", "margin_bytes"))
    args = doc["launch"]["llama"]["args"]
    assert args[args.index("--rpc") + 1] == "127.0.0.1:50052,127.0.0.1:50053"
    assert args.index("--rpc") < args.index("-ngl") and args[-2:] == ["--fit", "off"]
    assert doc["tok_s"] > 0


# --- the command line -------------------------------------------------------------------------------

def test_emit_llama_for_two_gpus(preset_model):
    result = run(preset_model("qwen3-235b"), "--runtime", "llama", "--vram", "24G,24G", "--ram", "256G", "-c", 16384,
                 "--emit", "llama")
    assert result.exit_code == 0, result.output
    line = result.output.strip().splitlines()[-1]
    assert line.startswith("llama-server -m ") and " -ts " in line and "=CPU" in line and " -c 16384 " in line


def test_user_placement_that_does_not_fit_exits_1_naming_the_device(preset_model):
    result = run(preset_model("qwen3-235b"), "--runtime", "llama", "--vram", "24G,24G", "--ram", "256G", "-c", 8192,
                 "-ngl", 99, "-ts", "1,1", "--json")
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc["verdict"] == "unfittable"
    assert set(doc["unfittable"]["shortfall_bytes"]) == {"CUDA0", "CUDA1"}
    assert "CUDA0 short by" in doc["unfittable"]["summary"] and doc["unfittable"]["chosen_placement_fits"]


def test_user_placement_that_fits_reports_its_speed(preset_model):
    doc = run_json(preset_model("gpt-oss-120b"), "--runtime", "llama", "--gpu", "rtx3090", "--ram", "64G",
                   "--n-cpu-moe", 30, "-c", 8192, "-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0")
    assert doc["verdict"] == "fits" and doc["placement"]["n_cpu_moe"] == 30 and doc["tok_s"] > 0
    args = doc["launch"]["llama"]["args"]
    assert args[args.index("--n-cpu-moe") + 1] == "30" and args[args.index("-ctk") + 1] == "q8_0"


def test_the_plan_reserves_llama_servers_output_rows(preset_model):
    """The launch is llama-server, whose target context outputs -np rows (x4 with a draft), not -b:
    gpt-oss-120b's full-offload compute buffer on CUDA0 is the server's ~100 MiB, not llama-cli's ~400;
    --n-outputs 0 plans llama-cli/llama-completion's context; the emitted flags do not change."""
    base = ["--runtime", "llama", "--gpu", "a100-80g", "--ram", "64G", "-c", 8192, "-ngl", 99]
    server = run_json(preset_model("gpt-oss-120b"), *base)
    cli_ctx = run_json(preset_model("gpt-oss-120b"), *base, "--n-outputs", 0)
    cuda = lambda doc: next(d for d in doc["devices"] if d["name"] == "CUDA0")["compute_bytes"]  # noqa: E731
    assert cuda(server) < 0.4 * cuda(cli_ctx)
    assert server["launch"]["llama"]["args"] == cli_ctx["launch"]["llama"]["args"]


def test_negative_output_rows_are_refused(preset_model):
    result = run(preset_model("gpt-oss-120b"), "--runtime", "llama", "--vram", "24G", "--n-outputs", -1)
    assert result.exit_code == 2 and "--n-outputs must be 0" in result.output


@pytest.mark.parametrize("n_gpus,with_draft,reserve", [(1, False, None), (1, True, None), (2, True, None), (2, False, 64 * 2**20)])
def test_a_whole_model_probe_gives_up_only_where_the_full_plan_keeps_a_layer_on_the_cpu(tmp_path, n_gpus, with_draft, reserve):
    # unfittable's VRAM search asks only "every layer offloaded and fitting?": plan_at(whole_model=True)
    # answers None without replaying a graph where the full plan leaves a layer on the CPU, else the same plan
    from moetools import synth
    from moetools.devicefit import draft as draftmod
    from tests import devicefit_llama_case as case

    target = facts_of(synth.write_model(case.fixture_spec(), tmp_path / "t.gguf", sparse=True)[0])
    settings = KVSettings(n_seq=1)
    draft = None
    if with_draft:
        small = synth.tiny("dense", n_layer=4, n_embd=256, vocab=2048, ctx=8192)
        draft = draftmod.Draft(facts_of(synth.write_model(small, tmp_path / "d.gguf", sparse=True)[0]), "d.gguf",
                               draftmod.draft_kv(settings, "f16", "f16"))
    weights = sum(b.total_bytes for b in target.layers.blocks) + target.layers.output_bytes
    cpu = devices.cpu_device(16 * GIB, 60e9, "test")
    options = upstream.UpstreamOptions(ctx=4096, kv=settings, margin=0, reserve=reserve, draft=draft)
    gave_up = kept = 0
    for step in range(1, 25):
        size = weights * step // (16 * n_gpus)
        gpus = [devices.Device(f"CUDA{i}", "gpu", size, 900e9) for i in range(n_gpus)]
        full = upstream.plan_at(target, gpus, cpu, options, 4096)
        probe = upstream.plan_at(target, gpus, cpu, options, 4096, whole_model=True)
        if probe is None:
            gave_up += 1
            assert CPU in full.placement.layer_device, size
        else:
            kept += 1
            assert probe.placement.layer_device == full.placement.layer_device
            assert probe.placement.expert_device == full.placement.expert_device and probe.fits == full.fits
    assert gave_up and kept


@pytest.mark.parametrize("room", ["none", "plenty"])
def test_a_draft_leaving_no_room_for_the_output_layer_skips_the_device_alone_replay(tmp_path, monkeypatch, room):
    # a draft bigger than the GPU: every round chooses the all-CPU placement whatever the compute buffers,
    # so plan_at replays no device-alone graph, and its plan is the one the replay would have given
    from moetools import synth
    from moetools.devicefit import draft as draftmod
    from tests import devicefit_llama_case as case

    settings = KVSettings(n_seq=1)
    big = synth.tiny("qwen3moe", n_layer=8, n_embd=512, n_ff_exp=512, n_expert=32, vocab=2048, ctx=8192)
    draft = draftmod.Draft(facts_of(synth.write_model(big, tmp_path / "d.gguf", sparse=True)[0]), "d.gguf",
                           draftmod.draft_kv(settings, "f16", "f16"))
    draft_bytes = sum(b.total_bytes for b in draft.facts.layers.blocks)
    gpu = [devices.Device("CUDA0", "gpu", draft_bytes // 2 if room == "none" else 3 * draft_bytes, 900e9)]
    cpu = devices.cpu_device(16 * GIB, 60e9, "test")
    options = upstream.UpstreamOptions(ctx=4096, kv=settings, margin=0, draft=draft)
    docs = []
    for skip in (True, False):
        target = facts_of(synth.write_model(case.fixture_spec(), tmp_path / f"t{skip}.gguf", sparse=True)[0])
        if not skip:
            monkeypatch.setattr(upstream, "_budget_ceilings", lambda devices, *_: [float("inf")] * len(devices))
        plan = upstream.plan_at(target, gpu, cpu, options, 4096)
        assert all(home == CPU for home in plan.placement.layer_device) is (room == "none")
        replayed = bool(target.graph.__dict__.get("_compute_memo"))  # the device-alone figures
        assert replayed is (not skip or room == "plenty")
        docs.append(json.dumps([upstream_doc.plan_doc(plan), plan.notes], sort_keys=True))
    assert docs[0] == docs[1]


def test_unfittable_says_what_would_fit(preset_model):
    # 8 GiB: the first GPU runs the batch matmuls of the CPU's experts (op offload) and holds a copy of
    # one expert matrix (~1.8 GiB here) beside the 128k graph, so a 4 GiB card cannot even be CUDA0
    doc = run_json(preset_model("kimi-k2"), "--runtime", "llama", "--vram", "8G", "--ram", "1024G", "-c", 131072,
                   "-ngl", 99, "--n-cpu-moe", 99, code=1)
    assert doc["unfittable"]["shortfall_bytes"]["CUDA0"] > 0
    assert doc["unfittable"]["smallest_vram_bytes"] > 8 * GIB
    # the user's own placement: the VRAM at which IT fits, not the whole model's
    fits_from = doc["unfittable"]["placement_fits_from_vram_bytes"]
    assert fits_from > 8 * GIB and f"-ngl 99 --n-cpu-moe 99 fits from {fits_from / GIB:.1f} GiB per GPU" in doc["unfittable"]["summary"]
    assert doc["unfittable"]["extra_gpu"] == "rtx3090"
    assert doc["unfittable"]["chosen_placement_fits"]  # device-fit's own placement keeps leading layers on the CPU


@pytest.mark.parametrize("args, message", [
    (["--vram", "24G,24G", "-ts", "1,2,3"], "-ts gives 3 weights for 2 device"),
    (["--gpu", "rtx9999"], "known: a100-80g"),
    (["--rpc", "nohost=2G"], "does not parse"),
    (["--vram", "24G", "--vram-bw", "0"], "bandwidth of 0"),
    (["--vram", "24G", "--ram-bw", "0GB/s"], "bandwidth of 0"),
    (["--vram", "24G", "--disk-bw", "0"], "bandwidth of 0"),
    (["--vram", "24G", "--main-gpu", "3"], "--main-gpu 3"),
    (["--vram", "24G", "-ts", "a,b"], "-ts 'a,b'"),
    (["--vram", "24G,0"], "must be a positive size"),
    (["--gpu", "rtx4090", "--vram", "24G,24G"], "--gpu names 1 GPU"),
])
def test_bad_input_exits_2(tiny_models, args, message):
    result = run(tiny_models["qwen3moe"], "--runtime", "llama", *args)
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_fork_with_two_gpus_says_what_the_fork_supports(preset_model):
    doc = run_json(preset_model("kimi-k3"), "--vram", "32G,24G", "--ctx", 8192, "--runtime", "fork")
    assert doc["runtime"] == "fork" and doc["devices"][0]["name"] == "CUDA0"
    assert doc["devices"][0]["capacity_bytes"] == 32 * GIB
    assert any("one expert cache" in note for note in doc["notes"])


def test_fork_rejects_rpc(tiny_models):
    result = run(tiny_models["qwen3moe"], "--vram", "8G", "--rpc", "h:1=2G", "--runtime", "fork")
    assert result.exit_code == 2 and "--runtime llama" in result.output


def test_two_gpus_by_default_plan_both_with_llama_cpp(preset_model):
    """The default runtime plans upstream llama.cpp on every GPU given (the fork planned one and dropped
    the second without a word)."""
    doc = run_json(preset_model("qwen3-235b"), "--vram", "24G,24G", "--ram", "256G", "--ctx", 8192)
    assert doc["runtime"] == "llama" and [d["name"] for d in doc["devices"]][:2] == ["CUDA0", "CUDA1"]
    assert all(d["resident_bytes"] > 0 for d in doc["devices"][:2])
    assert doc["launch"]["llama"]["args"][0] == "-m"


def test_llama_table(preset_model):
    from moetools.devicefit.render import llama_tables

    doc = run_json(preset_model("gpt-oss-120b"), "--runtime", "llama", "--gpu", "rtx3090", "--ram", "64G", "-c", 8192)
    ledger, contexts, *speed_tables = llama_tables(doc)
    # the -ub trade-off, which layers' experts leave the GPU (with llama.cpp --fit's choice), the assumptions
    assert [table.title.split(" ")[0] for table in speed_tables] == ["Batch", "Experts", "Speed"]
    assert ledger.columns == ["", "CUDA0", "CPU"]  # a column per device, a row per buffer
    # "mmap span": the CPU's model buffer as llama.cpp maps it (issue 32)
    assert [row[0] for row in ledger.rows] == ["kind", "capacity", "compute", "resident", "KV", "experts", "mmap span",
                                               "margin", "free", "layers"]
    assert ledger.title.startswith("device-fit (llama.cpp)") and not ledger.caption  # the launch line is a note
    assert contexts.rows[0][0] == "* 8192"


def test_ram_and_ram_bw_auto(tiny_models):
    ram = devices.host_ram_bytes()
    if not ram:
        pytest.skip("this machine's RAM cannot be read")
    doc = run_json(tiny_models["qwen3moe"], "--runtime", "llama", "--vram", "8G", "--ram", "auto", "--ram-bw", "auto", "-c", 4096)
    cpu = doc["devices"][-1]
    assert cpu["name"] == "CPU" and cpu["capacity_bytes"] == ram
    assert cpu["bandwidth_bytes_per_s"] > 0 and "measured" in cpu["bandwidth_source"]
