"""device-fit: the division, tiers, context squeeze, speed, observations, host RAM, plan, launch
settings and the CLI's bad-input handling."""

import json
import os
import random

import pytest
from click.testing import CliRunner

from moetools.cli import cli
from moetools.devicefit import compute, core, kv
from moetools.devicefit.kv import KVSettings
from moetools.devicefit.launch import SWITCHES_NOTE
from moetools.errors import UsageError
from moetools.formats.curve import Curve, write_curve
from moetools.formats.plan import read_plan
from moetools.formats.resident_manifest import ResidentManifest, write_manifest
from moetools.gguf import open_model
from tests import fork_rules

GIB = 1024**3
K3_RESIDENT = 27_708_950_272
K3_EXPERT = 8_060_928
K3_EPT = 16 * 92
K3_SLOTS = 896 * 92
K3_PER_TOKEN = 23 * 576 * 2
K3_STATE = 70 * (3 * 3 * 32 * 128 + 128 * 128 * 32) * 4


def run(*args, input=None):
    """device-fit with the fork runtime (this file's subject) unless the test names one."""
    runtime = [] if "--runtime" in args else ["--runtime", "fork"]
    return CliRunner().invoke(cli, ["device-fit", *map(str, args), *runtime], input=input, catch_exceptions=False)


def run_json(*args, input=None, code=0):
    result = run(*args, "--json", input=input)
    assert result.exit_code == code, result.output
    return json.loads(result.stdout)


def facts_of(path):
    with open_model(path) as model:
        return core.model_facts(model)


@pytest.fixture(scope="module")
def k3(preset_model):
    return preset_model("kimi-k3", 2)


def k3_fork_slots(budget):
    """(layer, expert) slots of the fork's cache for K3 by hand (ggml-moe-residency.hpp
    ResidencyCache::ensure_pool): K3's gate and up slices are 2,424,832 bytes, down 3,211,264; each
    asks need = size + 512 (copy pad), rounded up to 256; each pool gets budget / 6 (MAX_POOLS);
    an expert needs two slots of the first pool (gate, up) and one of the second (down)."""
    share = budget // 6
    return min(share // 2_425_344 // 2, share // 3_211_776)


def compute_at(path, ctx, settings=None):
    """The compute buffer device-fit must plan for: the graph replay at that context (CUDA alignment),
    with the output rows the fork's server gives its target context (unless `settings` name them)."""
    facts = facts_of(path)
    settings = settings or KVSettings()
    if not settings.outputs:
        settings.outputs = fork_rules.fork_server_output_rows(settings.batch, settings.n_seq)
    return compute.compute_buffers(facts.graph, facts.shape, ctx, settings,
                                   alignment=compute.CUDA_ALIGNMENT).device_bytes


def tok_s(coverage, ept=K3_EPT, expert=K3_EXPERT, h2d=25e9, floor=0.010):
    return 1 / ((1 - coverage) * ept * expert / h2d + floor)


def test_k3_facts(k3):
    facts = facts_of(k3)
    assert facts.resident_bytes == K3_RESIDENT
    assert facts.expert_bytes == K3_EXPERT
    assert facts.experts_per_token == K3_EPT
    assert facts.total_slots == K3_SLOTS


def test_k3_on_32g_by_hand(k3):
    doc = run_json(k3, "--vram", "32G", "--ctx", 32768)
    vram = 32 * GIB
    reserve = GIB + compute_at(k3, 32768)  # the compute buffer plus the default 1 GiB margin
    kv_bytes = 32768 * K3_PER_TOKEN + K3_STATE
    budget = vram - reserve - K3_RESIDENT - kv_bytes
    slots = k3_fork_slots(budget)
    assert doc["verdict"] == "native" and doc["resident_source"] == "native"
    assert (doc["vram_bytes"], doc["reserve_bytes"], doc["resident_bytes"]) == (vram, reserve, K3_RESIDENT)
    assert doc["compute_bytes"] == reserve - GIB and doc["margin_bytes"] == GIB and doc["reserve_source"] == "compute+margin"
    assert doc["context"] == 32768 and doc["kv_bytes"] == kv_bytes
    assert doc["expert_budget_bytes"] == budget and doc["slots"] == slots
    assert doc["fork_cache"]["device"] == "vram"
    assert doc["coverage"] == pytest.approx(slots / K3_SLOTS, abs=1e-6)
    assert doc["tok_s"] == pytest.approx(tok_s(slots / K3_SLOTS), rel=1e-4)
    assert doc["experts_per_token"] == K3_EPT and doc["expert_bytes"] == K3_EXPERT
    kinds = {cache["kind"]: cache for cache in doc["kv"]}
    assert kinds["full"] == {"kind": "full", "cells": 32768, "cells_per_stream": 32768, "streams": 1, "layers": 23,
                             "k_bytes": 32768 * K3_PER_TOKEN, "v_bytes": 0, "bytes": 32768 * K3_PER_TOKEN}
    assert kinds["recurrent"]["bytes"] == K3_STATE
    assert len(doc["divisions"]) == 1 and doc["divisions"][0]["tier"] == "native"
    division = doc["divisions"][0]
    for key in ("resident_source", "resident_bytes", "context", "kv_bytes", "kv", "expert_budget_bytes", "slots",
                "expert_bytes", "experts_per_token", "coverage", "tok_s"):
        assert division[key] == doc[key], key


def test_context_is_squeezed_in_steps_of_256(k3):
    doc = run_json(k3, "--vram", "32G", "--ctx", 262144)
    # squeezed against the compute buffer of the wanted context (an upper bound for smaller ones)
    room = 32 * GIB - GIB - compute_at(k3, 262144) - K3_RESIDENT - K3_STATE
    context = doc["context"]
    assert context % 256 == 0 and context < 262144
    assert context * K3_PER_TOKEN <= room < (context + 256) * K3_PER_TOKEN
    assert doc["compute_bytes"] == compute_at(k3, context) <= compute_at(k3, 262144)
    assert doc["divisions"][0]["note"] == "context squeezed from 262144"


def test_fit_context_matches_a_linear_scan(tiny_models, preset_model):
    """The binary search equals the obvious scan over every multiple of 256."""
    rng = random.Random(3)
    for path in (preset_model("gpt-oss-120b"), tiny_models["kimi-k3"], preset_model("llama3-8b")):
        shape = facts_of(path).shape
        for _ in range(30):
            settings = KVSettings(n_seq=rng.choice([1, 2, 3]), unified=rng.random() < 0.5, ubatch=rng.choice([64, 512]))
            wanted = rng.randrange(300, 40000)
            floor = rng.randrange(1, wanted + 1)
            room = rng.randrange(0, kv.kv_bytes(shape, wanted, settings) * 2)
            got, _ = core.fit_context(shape, settings, wanted, floor, room)
            candidates = [wanted] + [c for c in range((wanted - 1) // 256 * 256, 0, -256) if c >= floor]
            expected = next((c for c in candidates if kv.kv_bytes(shape, c, settings) <= room), None)
            assert got == expected


def test_unfittable_exits_1_with_the_shortfall(k3):
    result = run(k3, "--vram", "24G", "--json")
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    usable = 24 * GIB - GIB
    assert doc["verdict"] == "unfittable" and doc["context"] == 0 and doc["expert_budget_bytes"] == 0
    assert doc["shortfall_bytes"] == K3_RESIDENT + 4096 * K3_PER_TOKEN + K3_STATE + compute_at(k3, 4096) - usable
    assert "unfittable" in doc["notes"][0]


def test_min_ctx_bounds_the_squeeze(k3):
    # 29.5 GiB: the resident weights fit but not with 200k tokens of KV
    vram = int(29.5 * GIB)
    usable = vram - 2 * GIB - 1  # explicit reserve
    doc = run_json(k3, "--vram", vram, "--reserve", 2 * GIB + 1, "--min-ctx", 200000, code=1)
    assert doc["verdict"] == "unfittable"
    assert doc["shortfall_bytes"] == K3_RESIDENT + pad(200000) * K3_PER_TOKEN + K3_STATE - usable
    doc = run_json(k3, "--vram", vram, "--reserve", 2 * GIB + 1)
    assert doc["context"] >= 4096


def pad(n):
    return -(-n // 256) * 256


def _tier(folder, label, resident, facts, source=None, gguf=True, fingerprint=None):
    folder.mkdir(parents=True, exist_ok=True)
    name = f"k3.{label}.resident.gguf"
    if gguf:
        (folder / name).write_bytes(b"GGUF")
    manifest = ResidentManifest(tier_label=label, resident_bytes=resident, gguf=name,
                                source_model=source if source is not None else os.path.basename(facts.path),
                                source_fingerprint=facts.fingerprint if fingerprint is None else fingerprint)
    write_manifest(folder / f"k3.{label}.resident.json", manifest)


def test_tiers_override_when_native_does_not_fit(k3, tmp_path):
    facts = facts_of(k3)
    tiers = tmp_path / "tiers"
    _tier(tiers, "q4_0", 14 * GIB, facts)
    _tier(tiers, "q8_0", 25 * GIB, facts)
    doc = run_json(k3, "--vram", "24G", "--ctx", 16384, "--tiers", tiers)
    assert doc["verdict"] == "override" and doc["resident_source"] == "q4_0"
    assert [d["tier"] for d in doc["divisions"]] == ["native", "q8_0", "q4_0"]
    assert [d["feasible"] for d in doc["divisions"]] == [False, False, True]
    budget = 24 * GIB - GIB - compute_at(k3, 16384) - 14 * GIB - 16384 * K3_PER_TOKEN - K3_STATE
    assert doc["expert_budget_bytes"] == budget and doc["slots"] == k3_fork_slots(budget)
    assert doc["resident_gguf"].endswith("k3.q4_0.resident.gguf")


@pytest.mark.parametrize("labels", [("q4_0", "q4_K"), ("q4_K", "q4_0")])
def test_equal_sized_tiers_go_to_the_lower_error(k3, tmp_path, labels):
    """Two tiers of the same bytes divide the card the same way and run at the same speed: the one
    of lower quantization error (q4_K before q4_0 in ERROR_ORDER) is chosen, whichever is listed first."""
    facts = facts_of(k3)
    tiers = tmp_path / "tiers"
    for label in labels:
        _tier(tiers, label, 14 * GIB, facts)
    doc = run_json(k3, "--vram", "24G", "--ctx", 16384, "--tiers", tiers)
    by_tier = {d["tier"]: d for d in doc["divisions"]}
    assert by_tier["q4_0"]["tok_s"] == by_tier["q4_K"]["tok_s"] and by_tier["q4_0"]["feasible"]
    assert doc["verdict"] == "override" and doc["resident_source"] == "q4_K"
    assert doc["resident_gguf"].endswith("k3.q4_K.resident.gguf")


def test_old_curve_without_demand_policies_predicts_from_its_best_demand_cache(k3, tmp_path):
    """Before demand_policies, decay_bandit was a top-S set that bypasses the cache: device-fit uses
    the better of the old file's demand caches (LRU, LFU) and says so."""
    curve = tmp_path / "old.json"
    curve.write_text(json.dumps({"slots": [500, 1000], "hit": {"decay_bandit": [0.5, 0.6], "lru": [0.1, 0.2],
                                                              "lfu": [0.15, 0.25], "belady": [0.9, 0.95]}}))
    result = run(k3, "--vram", "32G", "--ctx", 32768, "--coverage", curve, "--json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["coverage_source"] == "curve (lfu)"
    assert "older moetools (no demand_policies): predicting from lfu" in result.stderr
    asked = run_json(k3, "--vram", "32G", "--ctx", 32768, "--coverage", curve, "--coverage-policy", "decay_bandit")
    assert asked["coverage_source"] == "curve (decay_bandit)"  # an explicit choice is honoured


def test_fastest_division_wins_with_a_curve(k3, tmp_path):
    facts = facts_of(k3)
    tiers = tmp_path / "tiers"
    _tier(tiers, "q4_0", 20 * GIB, facts)
    curve = tmp_path / "curve.json"
    write_curve(curve, Curve(slots=[100, 200], hit={"predictive": [0.5, 0.6], "lru": [0.1, 0.2], "belady": [0.9, 0.95]},
                             extra={"demand_policies": ["lru", "predictive"], "ceiling_policies": ["belady"]}))
    doc = run_json(k3, "--vram", "32G", "--ctx", 32768, "--tiers", tiers, "--coverage", curve)
    native, q4 = doc["divisions"]
    native_slots = k3_fork_slots(32 * GIB - GIB - compute_at(k3, 32768) - K3_RESIDENT - 32768 * K3_PER_TOKEN - K3_STATE)
    assert native["slots"] == native_slots and 100 < native_slots < 200
    assert native["coverage"] == pytest.approx(0.5 + 0.1 * (native_slots - 100) / 100, abs=1e-6)
    q4_budget = 32 * GIB - GIB - compute_at(k3, 32768) - 20 * GIB - 32768 * K3_PER_TOKEN - K3_STATE
    assert q4["slots"] == k3_fork_slots(q4_budget) > 200  # flat past the last point
    assert q4["coverage"] == pytest.approx(0.6)
    assert q4["tok_s"] == pytest.approx(tok_s(0.6), rel=1e-4)
    # the default is the best online demand policy of the curve (highest mean hit ratio)
    assert doc["resident_source"] == "q4_0" and doc["coverage_source"] == "curve (predictive)"
    assert not any("older moetools" in w for w in doc["warnings"])
    lru = run_json(k3, "--vram", "32G", "--ctx", 32768, "--tiers", tiers, "--coverage", curve, "--coverage-policy", "lru")
    assert lru["divisions"][1]["coverage"] == pytest.approx(0.2)
    piped = run_json(k3, "--vram", "32G", "--ctx", 32768, "--tiers", tiers, "--coverage", "-", input=curve.read_text())
    assert piped["tok_s"] == doc["tok_s"]


def test_observations_refine_the_choice(k3, tmp_path):
    facts = facts_of(k3)
    tiers = tmp_path / "tiers"
    _tier(tiers, "q4_0", 20 * GIB, facts)
    obs = tmp_path / "obs.jsonl"
    obs.write_text("\n".join(json.dumps(o) for o in [
        {"tier": "q4_0", "tok_s": 1.0, "tokens": 500},
        {"tier": "q4_0", "tok_s": 2.0, "tokens": 500},
        {"tier": "native", "tok_s": 99.0, "tokens": 10},  # under 64 tokens: ignored
        {"tier": "native", "tok_s": 5.0, "tokens": 64},
    ]) + "\n")
    doc = run_json(k3, "--vram", "32G", "--ctx", 32768, "--tiers", tiers, "--observations", obs)
    native, q4 = doc["divisions"]
    assert q4["tok_s"] == pytest.approx(0.6 * 1.0 + 0.4 * 2.0) and q4["observations"] == 2
    assert native["tok_s"] == pytest.approx(5.0) and native["tok_s_source"] == "measured"
    assert doc["resident_source"] == "native"


def test_refine_rules():
    estimate, runs, ignored = core.refine({"a": 3.0, "b": 1.0}, [("a", 1.0, 63), ("b", 4.0, 64), ("b", 2.0, 100), ("c", 9.0, 100)])
    assert estimate == {"a": 3.0, "b": pytest.approx(0.6 * 4 + 0.4 * 2)}
    assert runs == {"a": 0, "b": 2} and len(ignored) == 1


def test_bad_tier_manifests_are_skipped_with_warnings(k3, tmp_path):
    facts = facts_of(k3)
    tiers = tmp_path / "tiers"
    _tier(tiers, "q4_0", 14 * GIB, facts)
    _tier(tiers, "q6_K", 15 * GIB, facts, gguf=False)
    _tier(tiers, "q5_0", 15 * GIB, facts, fingerprint="0123456789abcdef")
    _tier(tiers, "bf16", 15 * GIB, facts, source="other-model.gguf", fingerprint="")
    (tiers / "broken.resident.json").write_text("{not json")
    (tiers / "wrong.resident.json").write_text(json.dumps({"resident_only": 1, "tier_label": "q2_K"}))
    result = run(k3, "--vram", "24G", "--ctx", 16384, "--tiers", tiers, "--json")
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    assert [d["tier"] for d in doc["divisions"]] == ["native", "q4_0"]
    stderr = result.stderr
    assert "k3.q6_K.resident.gguf is missing" in stderr
    assert "made from another model (source_fingerprint 0123456789abcdef" in stderr
    assert "made from another model ('other-model.gguf')" in stderr
    assert "broken.resident.json" in stderr and "wrong.resident.json" in stderr
    assert len(doc["warnings"]) == 5


def test_default_tier_folder_beside_the_model(tmp_path):
    from tests import factory

    path = factory.write_tiny(tmp_path, "qwen3moe", sparse=True, name="q3")
    facts = facts_of(path)
    _tier(tmp_path / "device-fit" / "q3", "q4_0", 1000, facts)
    assert core.default_tier_folder(path) == str(tmp_path / "device-fit" / "q3")
    doc = run_json(path, "--vram", "4G")
    assert [d["tier"] for d in doc["divisions"]] == ["native", "q4_0"]


def test_dense_model_has_no_expert_budget(preset_model):
    doc = run_json(preset_model("llama3-8b"), "--vram", "24G")
    assert doc["verdict"] == "native" and doc["context"] == 8192
    assert doc["expert_budget_bytes"] == 0 and doc["slots"] == 0 and doc["experts_per_token"] == 0
    llama = preset_model("llama3-8b")
    assert doc["free_bytes"] == 24 * GIB - GIB - compute_at(llama, 8192) - doc["resident_bytes"] - 8192 * 131072
    assert any("dense model" in note for note in doc["notes"])
    assert doc["tok_s"] == pytest.approx(100.0)


def test_context_above_training_is_sized_as_asked(preset_model):
    result = run(preset_model("llama3-8b"), "--vram", "80G", "--ctx", 20000, "--json")
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    assert doc["context"] == 20000 and doc["kv_bytes"] == pad(20000) * 131072
    assert "above the training context 8192" in result.stderr


def test_ram_budget_and_warning(k3, tmp_path):
    facts = facts_of(k3)
    doc = run_json(k3, "--vram", "32G", "--ctx", 32768, "--ram", "2T", "--os-reserve", "8G")
    host = doc["host"]
    assert host["mmap_bytes"] == facts.file_bytes
    assert host["host_cache_bytes"] == 2 * 1024 * GIB - 8 * GIB - facts.file_bytes
    assert host["host_slots"] == k3_fork_slots(host["host_cache_bytes"])
    result = run(k3, "--vram", "32G", "--ctx", 32768, "--ram", "256G", "--json")
    assert json.loads(result.stdout)["host"]["host_cache_bytes"] == 0
    assert "exceed RAM" in result.stderr
    container = run_json(k3, "--vram", "32G", "--ctx", 32768, "--ram", "256G", "--container", tmp_path)
    assert container["host"]["mmap_bytes"] == K3_RESIDENT
    assert container["host"]["host_cache_bytes"] == 256 * GIB - 4 * GIB - K3_RESIDENT


def test_plan_file(k3, tmp_path):
    plan_path = tmp_path / "k3.plan.json"
    doc = run_json(k3, "--vram", "32G", "--ctx", 32768, "--ram", "1T", "--plan", plan_path)
    plan = read_plan(plan_path)
    assert plan.budget_bytes == doc["host"]["host_cache_bytes"]
    assert plan.device_budget_bytes == doc["expert_budget_bytes"] and plan.resident_tier == "native"
    assert plan.pin_list == [] and plan.window_k == 8


def test_emit_llama_and_env(k3, preset_model, tmp_path):
    result = run(k3, "--vram", "32G", "--ctx", 32768, "--emit", "llama")
    assert result.exit_code == 0
    budget = 32 * GIB - GIB - compute_at(k3, 32768) - K3_RESIDENT - 32768 * K3_PER_TOKEN - K3_STATE
    # one K3 layer's experts (896 x 7.7 MiB) are more than the budget: every expert stays on the CPU
    assert result.stdout.splitlines()[0] == (f"llama-server -m {k3} -c 32768 -ngl 999 -ctk f16 -ctv f16 -fa on "
                                             "-np 1 --no-kv-unified --fit off --cpu-moe")
    qwen = preset_model("qwen3-235b")
    facts = facts_of(qwen)
    flags = ["--ctx", 8192, "--ctk", "q8_0", "--ctv", "q8_0", "--parallel", 2]
    doc = run_json(qwen, "--vram", "48G", *flags)
    layer = facts.layer_expert_bytes[93]
    first_gpu = 94 - doc["expert_budget_bytes"] // layer  # every layer's experts hold the same bytes
    result = run(qwen, "--vram", "48G", *flags, "--emit", "llama")
    lines = result.stdout.splitlines()
    assert lines[0] == (f"llama-server -m {qwen} -c 8192 -ngl 999 -ctk q8_0 -ctv q8_0 -fa on -np 2 --no-kv-unified --fit off "
                        f"--n-cpu-moe {first_gpu}")
    assert 0 < first_gpu < 94
    assert lines[2] == "#   -ot 'blk\\.(" + "|".join(map(str, range(first_gpu))) + ")\\.ffn_(up|down|gate_up|gate)_(ch|)exps=CPU'"
    plan = tmp_path / "p.json"
    env = run(k3, "--vram", "32G", "--ctx", 32768, "--emit", "env", "--plan", plan, "--container", tmp_path)
    lines = env.stdout.splitlines()
    assert lines[0] == "unset LLAMA_RESIDENT_OVERRIDE"
    assert lines[1] == f"export GGML_MOE_VRAM_CACHE_GB={int(budget / GIB * 100) / 100:.2f}"
    assert lines[2] == f"export GGML_MOE_PLAN_FILE={plan}"
    assert lines[3] == f"export GGML_MOE_CONTAINER={tmp_path}"
    assert lines[4:6] == ["unset GGML_MOE_HOST_CACHE_GB", "unset GGML_MOE_CAPTURE_FILE"]
    # the trace beside the plan, the paging flags, then the server itself as a runnable line (issue 31)
    assert lines[6:8] == [f"export GGML_MOE_TRACE_FILE={tmp_path / 'p.trace'}", "export GGML_OP_OFFLOAD_MIN_BATCH=1"]
    assert lines[8] == "# " + SWITCHES_NOTE  # the fork's speed switches, left at their defaults
    assert lines[9] == (f"llama-server -m {k3} -c 32768 -ngl 999 -ctk f16 -ctv f16 -fa on -np 1 --no-kv-unified --fit off "
                        "-ot '\\.ffn_.*_exps\\.=CPU' --no-repack")


def test_emit_llama_when_every_expert_fits_after_a_dense_block(tiny_models):
    """deepseek2's block 0 is dense: all MoE layers on the GPU means no --n-cpu-moe and no -ot."""
    result = run(tiny_models["deepseek2"], "--vram", "8G", "--emit", "llama")
    assert result.exit_code == 0
    first = result.stdout.splitlines()[0]
    assert first.endswith("--fit off") and "--n-cpu-moe" not in first and "-ot" not in result.stdout


def test_emit_env_for_an_override(k3, tmp_path):
    facts = facts_of(k3)
    tiers = tmp_path / "tiers"
    _tier(tiers, "q4_0", 14 * GIB, facts)
    env = run(k3, "--vram", "24G", "--ctx", 16384, "--tiers", tiers, "--emit", "env")
    assert env.stdout.splitlines()[0] == f"export LLAMA_RESIDENT_OVERRIDE={tiers / 'k3.q4_0.resident.gguf'}"
    llama = run(k3, "--vram", "24G", "--ctx", 16384, "--tiers", tiers, "--emit", "llama")
    assert llama.stdout.startswith("# upstream llama.cpp cannot fit")


def test_table_output(k3):
    result = run(k3, "--vram", "32G", "--ctx", 32768)  # CliRunner's stdout is not a TTY: JSON
    assert json.loads(result.stdout)["verdict"] == "native"
    from moetools.devicefit.render import tables

    doc = run_json(k3, "--vram", "32G", "--ctx", 32768)
    ledger, divisions = tables(doc)
    assert [row[0] for row in ledger.rows] == ["VRAM", "compute reserve", "resident weights", "KV cache", "hot-expert budget"]
    assert divisions.rows[0][0] == "* native"


# --- bad input --------------------------------------------------------------------------------

def test_the_fork_plans_its_servers_output_rows(preset_model):
    """The fork's server gives its target context llama-server's n_outputs_max (fork_rules
    fork_server_output_rows: server_output_limits in CambrianTech/llama.cpp's server_context_impl::
    load_model), not -b rows: one logits row per slot. gpt-oss-120b's 201k-token vocabulary makes the
    difference plain; --n-outputs 0 plans every batch row (llama-cli's context)."""
    path = preset_model("gpt-oss-120b")
    base = ["--vram", "80G", "--ctx", 8192]
    server = run_json(path, *base)["compute_bytes"]
    assert server == compute_at(path, 8192, KVSettings(outputs=fork_rules.fork_server_output_rows(2048, 1)))
    every_row = run_json(path, *base, "--n-outputs", 0)["compute_bytes"]
    assert every_row == compute_at(path, 8192, KVSettings(outputs=2048)) and server < 0.4 * every_row
    slots = run_json(path, *base, "--parallel", 4)["compute_bytes"]
    assert slots == compute_at(path, 8192, KVSettings(n_seq=4, outputs=fork_rules.fork_server_output_rows(2048, 4)))
    assert fork_rules.fork_server_output_rows(2048, 4) == 4 and fork_rules.fork_server_output_rows(2048, 1, 3) == 4
    assert fork_rules.fork_server_output_rows(8, 4, 3) == 8 and fork_rules.fork_server_output_rows(2048, 1, embedding=True) == 2048


def test_margin_and_compute_that_leave_nothing_exit_2(k3):
    vram = GIB + compute_at(k3, 4096)
    result = run(k3, "--vram", vram)
    assert result.exit_code == 2 and "compute buffer of a 4096-token context leave nothing" in result.stderr
    assert run(k3, "--vram", vram, "--margin", 0, "--json").exit_code == 1  # room now, but not for the weights


def test_compute_follows_the_settings(k3, preset_model):
    """The reserve follows flash attention, ubatch, context, parallel and the unified cache."""
    qwen = preset_model("qwen3-235b")
    base = run_json(qwen, "--vram", "200G", "--ctx", 32768)["compute_bytes"]
    no_fa = run_json(qwen, "--vram", "200G", "--ctx", 32768, "--no-flash-attn")["compute_bytes"]
    assert no_fa > 10 * base  # scores of 64 heads x 32k cells x 512 tokens f32: 4 GiB
    assert no_fa == compute_at(qwen, 32768, KVSettings(flash_attn=False))
    assert run_json(qwen, "--vram", "200G", "--ctx", 32768, "--ubatch", 2048)["compute_bytes"] > 3 * base
    parallel = run_json(qwen, "--vram", "200G", "--ctx", 32768, "--no-flash-attn", "--parallel", 4)["compute_bytes"]
    unified = run_json(qwen, "--vram", "200G", "--ctx", 32768, "--no-flash-attn", "--parallel", 4, "--kv-unified")
    assert parallel < no_fa / 3 and unified["compute_bytes"] == no_fa  # 4 streams of 8k cells vs one of 32k
    reserved = run_json(qwen, "--vram", "200G", "--ctx", 32768, "--reserve", "3G")
    assert reserved["reserve_bytes"] == 3 * GIB and reserved["reserve_source"] == "--reserve"
    assert reserved["compute_bytes"] == 0 and reserved["margin_bytes"] == 0


@pytest.mark.parametrize("args,message", [
    (["--vram", "1G"], "--margin 1.00 GiB leaves nothing of VRAM 1.00 GiB"),
    (["--vram", "32G", "--margin", "32G"], "--margin 32.00 GiB leaves nothing"),
    (["--vram", "32G", "--margin", "lots"], "cannot parse size"),
    (["--vram", "8G", "--reserve", "8G"], "--reserve 8.00 GiB leaves nothing of VRAM 8.00 GiB"),
    (["--vram", "32Q"], "cannot parse size"),
    (["--vram", "32G", "--reserve", "lots"], "cannot parse size"),
    (["--vram", "32G", "--ctx", "0"], "context must be at least 1"),
    (["--vram", "32G", "--h2d", "fast"], "cannot parse size"),
    (["--vram", "32G", "--floor", "soon"], "cannot parse time"),
    (["--vram", "32G", "--ram", "much"], "cannot parse size"),
])
def test_bad_options_exit_2(tiny_models, args, message):
    result = run(tiny_models["qwen3moe"], *args)
    assert result.exit_code == 2
    assert message in result.stderr


@pytest.mark.parametrize("args,message", [
    (["--vram", "1G"], "--margin 1.00 GiB leaves nothing of CUDA0's 1.00 GiB"),
    (["--vram", "24G", "--margin", "24G"], "--margin 24.00 GiB leaves nothing of CUDA0's 24.00 GiB"),
    (["--vram", "24G,8G", "--margin", "8G"], "--margin 8.00 GiB leaves nothing of CUDA1's 8.00 GiB"),
    (["--vram", "24G", "--rpc", "10.0.0.2:50052=1G"], "--margin 1.00 GiB leaves nothing of RPC0[10.0.0.2:50052]'s 1.00 GiB"),
    (["--vram", "24G", "--reserve", "30G"], "--reserve 30.00 GiB leaves nothing of CUDA0's 24.00 GiB"),
    (["--vram", "24G,8G", "--reserve", "8G"], "--reserve 8.00 GiB leaves nothing of CUDA1's 8.00 GiB"),
])
def test_llama_margin_or_reserve_that_leaves_nothing_exits_2(tiny_models, args, message):
    """--runtime llama refuses a fixed reserve that takes a whole offload device, as the fork's plan does
    (before, the plan came out "unfittable", exit 1, as if the model were the problem)."""
    result = run(tiny_models["qwen3moe"], "--runtime", "llama", *args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_llama_margin_just_below_the_device_still_plans(tiny_models):
    result = run(tiny_models["qwen3moe"], "--runtime", "llama", "--vram", "8G", "--margin", "7G", "--json")
    assert result.exit_code in (0, 1) and "leaves nothing" not in result.stderr


def test_bad_kv_type_for_the_model_exits_2(tiny_models):
    result = run(tiny_models["deepseek2"], "--vram", "8G", "--ctk", "q4_0", "--ctv", "q4_0")
    assert result.exit_code == 2 and "does not divide the key head width 80" in result.stderr


@pytest.mark.parametrize("content,message", [
    ("{", "not valid JSON"),
    ('{"slots": [10, 5], "hit": {"decay_bandit": [0.1, 0.2]}}', "slots must increase"),
    ('{"slots": [10], "hit": {"decay_bandit": [1.5]}}', "not a ratio"),
    ('{"slots": [10], "hit": {"belady": [0.5]}}', "only the Belady ceiling"),
])
def test_bad_coverage_files_exit_2(tiny_models, tmp_path, content, message):
    path = tmp_path / "curve.json"
    path.write_text(content)
    result = run(tiny_models["qwen3moe"], "--vram", "8G", "--coverage", path)
    assert result.exit_code == 2 and message in result.stderr


def test_belady_is_never_a_prediction(tiny_models, tmp_path):
    path = tmp_path / "curve.json"
    write_curve(path, Curve(slots=[4], hit={"belady": [0.9]}))
    result = run(tiny_models["qwen3moe"], "--vram", "8G", "--coverage", path, "--coverage-policy", "belady")
    assert result.exit_code == 2 and "ceiling" in result.stderr


def test_bad_observations_exit_2(tiny_models, tmp_path):
    path = tmp_path / "obs.jsonl"
    path.write_text('{"tier": "native", "tok_s": 3, "tokens": 100}\n{"tier": "native", "tok_s": -1, "tokens": 100}\n')
    result = run(tiny_models["qwen3moe"], "--vram", "8G", "--observations", path)
    assert result.exit_code == 2 and "line 2" in result.stderr and "offset 46" in result.stderr


def test_missing_tier_folder_and_model_exit_2(tiny_models, tmp_path):
    result = run(tiny_models["qwen3moe"], "--vram", "8G", "--tiers", tmp_path / "nope")
    assert result.exit_code == 2 and "tier folder does not exist" in result.stderr
    assert run(tmp_path / "absent.gguf", "--vram", "8G").exit_code == 2


def test_missing_expert_used_count_is_named(tmp_path):
    from moetools import synth

    spec = synth.tiny("qwen3moe")
    spec.metadata = [entry for entry in spec.metadata if entry[0] != "qwen3moe.expert_used_count"]
    path = synth.write_model(spec, tmp_path / "m.gguf", sparse=True)[0]
    result = run(path, "--vram", "8G")
    assert result.exit_code == 2 and "qwen3moe.expert_used_count" in result.stderr


def _damaged(tmp_path, builder, params=None, **changes):
    """A tiny model of synth's `builder` whose header has `changes` (key suffix -> value; None drops the key)."""
    from moetools import synth

    spec = synth.tiny(builder, **(params or {}))
    keys = {f"{spec.architecture}.{suffix}": value for suffix, value in changes.items()}
    spec.metadata = [(key, keys[key], kind) if key in keys else (key, value, kind)
                     for key, value, kind in spec.metadata if not (key in keys and keys[key] is None)]
    return synth.write_model(spec, tmp_path / f"{spec.architecture}.gguf", sparse=True)[0]


@pytest.mark.parametrize("runtime", ["fork", "llama"])
@pytest.mark.parametrize("arch,changes,message", [
    # llama.cpp reads n_expert from the key alone; its expert tensors then fail to load
    ("qwen3moe", {"expert_count": 0}, "the file has expert tensors but expert_count is missing or 0"),
    ("qwen3moe", {"expert_count": None}, "the file has expert tensors but expert_count is missing or 0"),
    # llama.cpp makes a 0-wide K projection and refuses the file's
    ("qwen3moe", {"attention.head_count_kv": 0}, "layer 0 has attention weights (blk.0.attn_k.weight) but head_count_kv 0"),
    # the loaders assert nextn_predict_layers < n_layer
    ("deepseek32", {"nextn_predict_layers": 999}, "nextn_predict_layers 999 is more than the 5 blocks"),
])
def test_damaged_headers_llama_cpp_refuses_exit_2(tmp_path, runtime, arch, changes, message):
    """Headers llama.cpp would not load are refused, one line, exit 2 — not planned with 0 experts or 0 KV."""
    path = _damaged(tmp_path, arch, **changes)
    extra = ["--ram", "64G"] if runtime == "llama" else []
    result = run(path, "--runtime", runtime, "--vram", "8G", *extra)
    assert result.exit_code == 2, result.output
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("builder,params", [("jamba", None), ("nemotron_h_moe", None), ("granitehybrid", None),
                                            ("kimi-k3", None)])
def test_recurrent_layers_with_head_count_kv_0_still_plan(tmp_path, builder, params):
    """head_count_kv 0 is how hybrids mark their recurrent layers: the keyless-attention refusal leaves
    them alone."""
    path = _damaged(tmp_path, builder, params)
    with open_model(path) as model:
        assert 0 in model.layer_values("{arch}.attention.head_count_kv", None)
    assert run_json(path, "--vram", "4G")["verdict"] == "native"


@pytest.mark.parametrize("args,message", [
    (["-np", "257"], "--parallel 257 is more than llama.cpp's 256 sequences"),
    (["--min-ctx", "0"], "--min-ctx must be at least 1 token"),
    (["--min-ctx", "-5"], "--min-ctx must be at least 1 token"),
    (["--h2d", "0"], "--h2d '0' must be a positive rate"),
])
@pytest.mark.parametrize("runtime", ["fork", "llama"])
def test_settings_llama_cpp_or_the_plan_cannot_take_exit_2_on_both_runtimes(tiny_models, runtime, args, message):
    """-np above LLAMA_MAX_SEQ (llama_context: "n_seq_max must be <= 256"), and --min-ctx / --h2d that
    mean nothing, are refused whichever runtime plans (--runtime llama took them before)."""
    result = run(tiny_models["qwen3moe"], "--runtime", runtime, "--vram", "8G", *args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_np_256_is_llama_cpps_most_and_plans(tiny_models):
    doc = run_json(tiny_models["qwen3moe"], "--runtime", "llama", "--vram", "8G", "--ram", "64G", "-np", 256, "-c", 65536)
    assert doc["verdict"] == "fits" and "256" in doc["launch"]["llama"]["args"]


def test_llama_cpp_spellings_of_the_cache_and_attention_flags(tiny_models):
    """-kvu / --no-kv-unified (which --emit llama itself writes) and -fa auto are taken as llama.cpp spells
    them: -fa auto plans as on, and the launch says -fa on."""
    path = tiny_models["qwen3moe"]
    base = ["--runtime", "llama", "--vram", "8G", "--ram", "64G", "-np", 4, "-c", 8192, "--no-flash-attn"]
    unified = run_json(path, *base, "-kvu")
    assert unified == run_json(path, *base, "--kv-unified") and "-kvu" in unified["launch"]["llama"]["args"]
    split = run_json(path, *base, "--no-kv-unified")
    assert split == run_json(path, *base) and "--no-kv-unified" in split["launch"]["llama"]["args"]
    assert unified["devices"][0]["compute_bytes"] != split["devices"][0]["compute_bytes"]
    auto = run_json(path, *base[:-1], "-fa", "auto")
    assert auto == run_json(path, *base[:-1], "-fa", "on") == run_json(path, *base[:-1])
    assert auto != run_json(path, *base)


def test_the_forks_upstream_fallback_holds_back_the_cards_margin_and_reserve(preset_model):
    """The fork's unfittable card names what --runtime llama does on it with the same --margin/--reserve
    (before, the fallback planned llama.cpp with the default 1 GiB margin: 190 tok/s all on the GPU
    where --runtime llama, holding back 23.5 GiB, puts every expert on the CPU)."""
    path = preset_model("qwen3-30b-a3b")
    for held in (["--margin", "23.5G"], ["--reserve", "23.5G"]):
        fork = run_json(path, "--vram", "24G", "--ctx", 4096, *held, code=1)["unfittable"]
        llama = run_json(path, "--runtime", "llama", "--vram", "24G", "--ctx", 4096, *held)
        assert fork["upstream_tok_s"] == llama["tok_s"], held
        assert "-ngl" in fork["upstream_args"] and "with CPU experts" in fork["summary"]
    default = run_json(path, "--vram", "2G", "--ctx", 4096, code=1)["unfittable"]
    assert default["upstream_tok_s"] == run_json(path, "--runtime", "llama", "--vram", "2G", "--ctx", 4096)["tok_s"]


def test_llama_document_says_where_its_reserve_comes_from(tiny_models):
    path = tiny_models["qwen3moe"]
    base = ["--runtime", "llama", "--vram", "8G", "--ram", "64G", "-c", 4096]
    modelled = run_json(path, *base)
    reserved = run_json(path, *base, "--reserve", "2G")
    assert modelled["reserve_source"] == "compute+margin" and reserved["reserve_source"] == "--reserve"
    assert reserved["devices"][0]["compute_bytes"] == 2 * GIB and reserved["devices"][0]["margin_bytes"] == 0


def test_every_tiny_architecture_fits(tiny_models):
    for arch, path in tiny_models.items():
        doc = run_json(path, "--vram", "4G")
        assert doc["verdict"] == "native", arch
        assert doc["context"] == doc["context_train"]
        assert doc["kv_bytes"] == sum(cache["bytes"] for cache in doc["kv"])
        assert doc["vram_bytes"] == doc["reserve_bytes"] + doc["resident_bytes"] + doc["kv_bytes"] + doc["free_bytes"]


def test_real_converter_models_fit(shared_models):
    for path in shared_models:
        doc = run_json(path, "--vram", "4G", "--ctx", 4096)
        assert doc["verdict"] == "native", path.name
        assert doc["slots"] == doc["total_slots"]  # tiny models: every expert fits
        assert doc["coverage"] == 1.0


def test_usage_error_core():
    with pytest.raises(UsageError):
        core.fit(None, [], core.FitOptions(vram=1, reserve=2))


def test_header_path_imports_no_heavy_modules(tiny_models, tmp_path):
    """device-fit --json imports neither numpy, gguf nor rich, and its own modules not dataclasses."""
    import subprocess
    import sys

    code = ("import sys\nimport moetools.gguf, click\nbefore = set(sys.modules)\n"
            "sys.argv = ['moetools', 'device-fit', %r, '--vram', '8G', '--json', '--runtime', '%s']\n"
            "from moetools.cli import cli\n"
            "try:\n    cli()\nexcept SystemExit:\n    pass\n"
            "heavy = [m for m in ('numpy', 'gguf', 'rich') if m in sys.modules]\n"
            "heavy += [m for m in ('dataclasses',) if m in set(sys.modules) - before]\n"
            "sys.stderr.write('HEAVY=' + ','.join(heavy))")
    for runtime, verdict in (("fork", "native"), ("auto", "fits"), ("llama", "fits")):
        proc = subprocess.run([sys.executable, "-c", code % (str(tiny_models["kimi-k3"]), runtime)], capture_output=True, text=True)
        assert proc.stderr.endswith("HEAVY="), (runtime, proc.stderr)
        assert json.loads(proc.stdout)["verdict"] == verdict


def test_record_fields():
    tier = core.Tier("q4_0", 10, "x.gguf")
    assert tier == core.Tier(label="q4_0", resident_bytes=10, gguf="x.gguf", manifest="")
    assert core.Division(tier).kv == [] and core.Division(tier).kv is not core.Division(tier).kv
    with pytest.raises(TypeError):
        core.Tier("q4_0")
    with pytest.raises(TypeError):
        core.Tier("q4_0", 1, "g", nope=1)


def test_observations_of_unknown_or_unfitting_tiers_warn(k3, tmp_path):
    obs = tmp_path / "obs.jsonl"
    obs.write_text('{"tier": "q3_K", "tok_s": 4, "tokens": 100}\n')
    result = run(k3, "--vram", "32G", "--ctx", 32768, "--observations", "-", "--json", input=obs.read_text())
    assert result.exit_code == 0 and "observation of unknown tier 'q3_K'" in result.stderr
    result = run(k3, "--vram", "24G", "--observations", obs, "--json")
    assert result.exit_code == 1


def test_context_below_min_ctx_is_said(tiny_models):
    doc = run_json(tiny_models["qwen3moe"], "--vram", "4G", "--ctx", 1000)
    assert doc["context"] == 1000 and doc["kv"][0]["cells"] == 1024
    assert "context 1000 (as asked) is below --min-ctx 4096" in doc["notes"]


def test_manifest_fields_of_the_wrong_type_are_skipped_with_a_warning(tiny_models, tmp_path):
    """A hand-edited manifest with a number where a file name belongs is skipped, never a traceback."""
    import shutil

    model = tmp_path / "m.gguf"
    shutil.copy(tiny_models["qwen3moe"], model)
    tiers = tmp_path / "tiers"
    tiers.mkdir()
    (tiers / "m-q4_0.resident.json").write_text('{"resident_only": 1, "tier_label": "q4_0", "resident_bytes": 1000, "gguf": 5}')
    result = run(model, "--vram", "8G", "--tiers", tiers)
    assert result.exit_code == 0 and "skipping tier manifest" in result.stderr and "gguf" in result.stderr


def test_non_finite_observations_are_refused(tiny_models):
    line = '{"tier": "native", "tok_s": Infinity, "tokens": 100}\n'
    result = run(tiny_models["qwen3moe"], "--vram", "8G", "--observations", "-", input=line)
    assert result.exit_code == 2 and "Infinity is not a JSON number" in result.stderr and "Traceback" not in result.stderr


def test_fork_context_trade_off_with_the_k3_curve(k3):
    curve = os.path.join(os.path.dirname(__file__), "..", "examples", "k3-coverage.json")
    doc = run_json(k3, "--vram", "32G", "--coverage", curve)
    rows = doc["contexts"]
    assert [row["context_asked"] for row in rows] == [4096, 8192, 16384, 32768, 65536, 131072, 262144]
    fitting = [row for row in rows if row["feasible"]]
    best = max(row["tok_s"] for row in fitting)
    chosen = max(row["context_asked"] for row in fitting if row["tok_s"] >= 0.95 * best)
    assert [row["context_asked"] for row in rows if row.get("chosen")] == [chosen] and doc["context"] == chosen
    assert any("at most 5% of the best speed" in note for note in doc["notes"])
    assert "the serving fork's authors" in doc["coverage_source"]
    # the curve the fork's authors measured, as shipped
    shipped = json.loads(open(curve).read())
    assert shipped["slots"] == [250, 2000, 4024] and shipped["hit"]["decay_bandit"] == [0.138, 0.513, 0.657]


def test_fork_unfittable_answers_with_numbers(k3):
    doc = run_json(k3, "--vram", "24G", "--ram", "1T", "--ctx", 8192, code=1)
    answer = doc["unfittable"]
    assert answer["shortfall_bytes"]["CUDA0"] == doc["shortfall_bytes"] > 0
    smallest = answer["smallest_vram_bytes"]
    assert smallest > 24 * GIB
    assert run_json(k3, "--vram", smallest, "--ram", "1T", "--ctx", 8192)["verdict"] == "native"
    assert run_json(k3, "--vram", smallest - 64 * 1024 * 1024, "--ram", "1T", "--ctx", 8192, code=1)["verdict"] == "unfittable"
    assert answer["upstream_tok_s"] > 0 and "--fit" in answer["upstream_args"]
    assert "upstream llama.cpp fits this card" in answer["summary"] and answer["summary"] in doc["notes"]
