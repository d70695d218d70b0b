"""Tiers in plans (issue 31): `device-fit` and `trace-tail` take `--pin-tier` / `--default-tier` and write
them as the daemon reads them, keep each pin's tier across pin_list rewrites, price them in device-fit's
speed model, and refuse tiers outside the container's ladder.

Rules held here, as the consumers' code states them (restated in tests/fork_rules.py):
- CambrianTech/continuum core/expert-pager-policy/src/bin/moe-pager-driver.rs `parse_args`:
  `--pin-tier N` / `--default-tier N` are ladder indices (u32); controller.rs
  `BanditPlanController::write_tiered_plan` stamps every pin with `tier` = the pin tier and sets the
  document's `default_tier`; plan_file.rs `PlanPin.tier: Option<u32>` (serde omits None, so a pin
  without a tier is the v1 pin) -> `fork_rules.daemon_plan_serde_error`; fixture
  fixtures/plan-tiered.json (`{"layer":1,"expert":10,"tier":0}`, top-level `"default_tier":2`).
- expert_container.rs `ExpertContainer::fetch`: a tier >= the ladder's length is TierOutOfRange
  -> `fork_rules.plan_tier_error`; `ExpertFetcher::record_bytes`: a tier's record size is what the
  cache accounts per expert (device-fit's speed model).
- the fork's `parse_pager_plan` (ggml-moe-residency.hpp) still reads budgets and pins from a tiered
  plan -> `fork_rules.parse_pager_plan`.
- tier labels: division_actuation.rs `parse_resident_manifest` trims `tier_label` and its tests name
  tiers by ggml type (`q4_K`); moetools quantize names them by mix (`Q4_K_M`) -> moetools.tierlabels.
"""

import json

import pytest
from moetools.devicefit import core
from moetools.formats import trace as trace_format
from moetools.formats.resident_manifest import read_manifest
from moetools.tierlabels import find_tier, label_for_daemon, same_tier, tier_type
from moetools.tracetail.importers import tokens_to_records
from tests import fork_rules
from tests.test_fork_plan import invoke, k3, read_doc  # noqa: F401 (k3 is a fixture)
from tests.test_tracetail_cli import skewed_tokens

MIB = 1 << 20
LADDER = [("Q8_0", 16 * MIB), ("Q4_K", 8 * MIB), ("Q2_K", 4 * MIB)]
SYNTH = ("--synth-layers", "4", "--experts", "16", "--expert-bytes", "1000")


@pytest.fixture
def container(tmp_path):
    """A v2 container's manifest (device-fit and trace-tail read only the ladder: no bank is opened)."""
    folder = tmp_path / "container"
    folder.mkdir()
    (folder / "manifest.json").write_text(json.dumps({
        "version": 2, "model": "kimi-k3", "fmt": "Q8_0", "record_bytes": LADDER[0][1], "n_layers": 92,
        "experts_per_layer": 384, "activated_per_token": 736,
        "tiers": [{"id": index, "quant": quant, "record_bytes": size} for index, (quant, size) in enumerate(LADDER)]}))
    return folder


@pytest.fixture
def trace(tmp_path):
    path = tmp_path / "t.trace"
    path.write_bytes(trace_format.encode_records(*tokens_to_records(skewed_tokens(30), ["decode"] * 30)))
    return path


def fit(k3, *args):
    result = invoke("device-fit", k3, "--runtime", "fork", "--vram", "32G", "--ctx", 32768, "--ram", "1T", *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# --- labels --------------------------------------------------------------------------------------


def test_labels_match_as_the_fork_the_daemon_and_moetools_write_them():
    """The fork's quantizer names a tier by ggml type (q4_K), moetools' by mix (Q4_K_M), a ladder
    by upper-case type (Q4_K): one tier. Two mixes of one type stay two tiers."""
    for first, second in [("q4_K", "Q4_K_M"), ("Q4_K", "Q4_K_M"), ("q4_K", "Q4_K"), ("q4_k", "Q4_K_S"), ("q8_0", "Q8_0"),
                          (" native", "native"), ("VQ3R", "vq3r")]:
        assert same_tier(first, second) and same_tier(second, first), (first, second)
    for first, second in [("Q4_K_S", "Q4_K_M"), ("q4_K", "q4_0"), ("Q5_K_M", "q4_K"), ("native", "q8_0")]:
        assert not same_tier(first, second), (first, second)
    assert tier_type("Q4_K_M") == tier_type("Q4_K") == "q4_K" and tier_type("VQ3R") is None
    labels = [label for label, _ in LADDER]
    assert [find_tier(label, labels) for label in ("q4_K", "Q4_K_M", "q8_0", "Q2_K_S", "q6_K")] == [1, 1, 0, 2, None]
    # exact first: a catalog holding both mixes of q4_K gives each its own, and q4_K names neither alone
    assert find_tier("Q4_K_S", ["Q4_K_M", "Q4_K_S"]) == 1 and find_tier("q4_K", ["Q4_K_M", "Q4_K_S"]) is None
    assert label_for_daemon(" q4_K\n") == "q4_K"


def test_resident_tier_labels_are_the_daemons_and_match_across_spellings(tmp_path):
    """resident_tier is the catalog label as parse_resident_manifest holds it (trimmed); an
    observation of q4_K refines the Q4_K_M tier, which ranks as q4_K."""
    manifest = tmp_path / "m-Q4_K_M.gguf.resident.json"
    manifest.write_text(json.dumps({"resident_only": 1, "tier_label": " Q4_K_M ", "resident_bytes": 5}))
    assert read_manifest(manifest).tier_label == fork_rules.parse_resident_manifest(manifest.read_text())[0] == "Q4_K_M"
    matched = core.match_observations([("q4_K", 3.0, 100), ("q8_0", 1.0, 100), ("Q4_K_S", 2.0, 100)], ["native", "Q4_K_M"])
    assert matched == [("Q4_K_M", 3.0, 100), ("q8_0", 1.0, 100), ("Q4_K_S", 2.0, 100)]
    rank = core.tier_error_rank(core.Tier("Q4_K_M", 1, ""))
    assert rank == core.ERROR_ORDER.index("q4_K") == core.tier_error_rank(core.Tier("q4_K", 1, ""))


# --- what is written -----------------------------------------------------------------------------


def test_trace_tail_writes_tiers_as_the_daemons_driver_and_keeps_each_pins_tier(tmp_path, trace, container):
    plan = tmp_path / "plan.json"
    result = invoke("trace-tail", trace, *SYNTH, "--budget-slots", 10, "--plan", plan, "--pin-tier", "q8_0",
                    "--default-tier", "Q2_K", "--container", container, "--json")
    assert result.exit_code == 0, result.output
    doc = read_doc(plan)
    assert doc["default_tier"] == 2 and doc["pin_list"] and all(pin["tier"] == 0 for pin in doc["pin_list"])
    assert fork_rules.daemon_plan_serde_error(doc) is None and fork_rules.plan_tier_error(doc, len(LADDER)) is None
    text = plan.read_text()  # the daemon's serde order: layer, expert, tier
    assert '{"layer":%d,"expert":%d,"tier":0}' % (doc["pin_list"][0]["layer"], doc["pin_list"][0]["expert"]) in text
    assert fork_rules.parse_pager_plan(text)["pins"] == [(p["layer"], p["expert"]) for p in doc["pin_list"]]
    # another writer sets one pin's tier and adds a key; a rewrite with a bigger budget keeps both
    first = (doc["pin_list"][0]["layer"], doc["pin_list"][0]["expert"])
    doc["pin_list"][0]["tier"] = 1
    doc["governor"] = {"arm": 3}
    plan.write_text(json.dumps(doc))
    result = invoke("trace-tail", trace, *SYNTH, "--budget-slots", 16, "--plan", plan, "--json")
    assert result.exit_code == 0, result.output
    again = read_doc(plan)
    tiers = {(p["layer"], p["expert"]): p.get("tier") for p in again["pin_list"]}
    assert len(tiers) > len(doc["pin_list"]), "the bigger budget added no pins"
    assert tiers[first] == 1  # a kept pin keeps its own tier
    assert all(tier == 0 for pin, tier in tiers.items() if pin != first)  # new ones get the plan's pin tier
    assert again["default_tier"] == 2 and again["pin_tier"] == 0 and again["governor"] == {"arm": 3}


def test_follow_keeps_the_tiers_too(tmp_path, container):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "budget_bytes": 40_000, "window_k": 8, "default_tier": 2, "pin_tier": 1,
                                "pin_list": [{"layer": 0, "expert": 0, "tier": 0}]}))
    live = tmp_path / "live.trace"
    live.write_bytes(trace_format.encode_records(*tokens_to_records(skewed_tokens(12, seed=4), ["decode"] * 12)))
    result = invoke("trace-tail", live, "--follow", *SYNTH, "--plan", plan, "--poll", "0.02", "--max-idle", "0.3")
    assert result.exit_code == 0, result.output
    doc = read_doc(plan)
    tiers = {(p["layer"], p["expert"]): p.get("tier") for p in doc["pin_list"]}
    # each write keeps a kept pin's tier (0 for (0, 0) while it stays) and gives new pins the plan's pin_tier 1;
    # a pin that leaves and comes back is a new pin
    assert set(tiers.values()) <= {0, 1} and 1 in tiers.values()
    assert doc["default_tier"] == 2 and doc["pin_tier"] == 1 and fork_rules.daemon_plan_serde_error(doc) is None


def test_round_trip_device_fit_trace_tail_pin_tier_device_fit_keeps_every_key_and_tier(k3, tmp_path, trace, container):
    plan = tmp_path / "plan.json"
    fit(k3, "--plan", plan, "--container", container, "--default-tier", "q2_K")
    first = read_doc(plan)
    assert first["default_tier"] == 2 and first["pin_list"] == [] and first["resident_tier"] == "native"
    doc = dict(first, operator_note={"keep": True})
    plan.write_text(json.dumps(doc))
    result = invoke("trace-tail", trace, *SYNTH, "--plan", plan, "--pin-tier", 0, "--json")
    assert result.exit_code == 0, result.output
    second = read_doc(plan)
    assert second["pin_list"] and all(pin["tier"] == 0 for pin in second["pin_list"])
    for key in ("budget_bytes", "device_budget_bytes", "resident_tier", "window_k", "cache_device", "default_tier", "operator_note"):
        assert second[key] == doc[key], key
    fitted = fit(k3, "--plan", plan, "--container", container)
    third = read_doc(plan)
    assert third == second  # device-fit changed nothing it does not own, every pin's tier included
    assert fitted["tiers"]["priced_pin_tier"] == 0 and fitted["tiers"]["priced_default_tier"] == 2
    assert fitted["tiers"]["pins"] == len(second["pin_list"])
    assert fork_rules.daemon_plan_serde_error(third) is None and fork_rules.plan_tier_error(third, len(LADDER)) is None
    fork = fork_rules.parse_pager_plan(plan.read_text())
    assert fork["budget_bytes"] == first["budget_bytes"] and fork["device_budget_bytes"] == first["device_budget_bytes"]
    # device-fit --pin-tier stamps the pins trace-tail chose, and keeps them
    fit(k3, "--plan", plan, "--container", container, "--pin-tier", "Q4_K_M")
    fourth = read_doc(plan)
    assert [(p["layer"], p["expert"]) for p in fourth["pin_list"]] == [(p["layer"], p["expert"]) for p in third["pin_list"]]
    assert {p["tier"] for p in fourth["pin_list"]} == {1} and fourth["pin_tier"] == 1 and fourth["default_tier"] == 2


# --- the speed model -----------------------------------------------------------------------------


def test_a_sharper_pin_tier_costs_speed_and_a_smaller_default_tier_gains_it(k3, container):
    """Pins at a sharper (bigger) tier leave the cache fewer slots: lower tok/s. A smaller default tier
    holds more experts and reads fewer bytes a miss: higher tok/s. Pins at the default tier cost what
    no pin tier does."""
    # --ram 30G: the host cache would hold less than the VRAM budget, so the one cache is in VRAM
    args = ("--container", container, "--default-tier", 2, "--ram", "30G")
    plain, sharp = fit(k3, *args), fit(k3, *args, "--pin-tier", 0)
    same = fit(k3, *args, "--pin-tier", 2)
    assert sharp["slots"] < plain["slots"] and sharp["tok_s"] < plain["tok_s"]
    assert (same["slots"], same["tok_s"]) == (plain["slots"], plain["tok_s"])
    wide = fit(k3, "--container", container, "--default-tier", 1, "--ram", "30G")
    assert wide["slots"] < plain["slots"] and wide["tok_s"] < plain["tok_s"]
    assert plain["tiers"]["default_record_bytes"] == LADDER[2][1] and sharp["tiers"]["pin_record_bytes"] == LADDER[0][1]
    # the figure follows the formula: slots = P + (budget - P x pin) // default, misses at default bytes,
    # read from the container's banks, which the page cache cannot hold at --ram 30G (resident weights fill
    # it), so from the drive (--disk-bw 3GB/s), then over PCIe
    pins = sharp["tiers"]["pins"]
    assert sharp["fork_cache"]["device"] == "vram" and "the container's banks" in sharp["speed_assumes"]
    assert "100% are read from the drive" in sharp["speed_assumes"]
    assert sharp["slots"] == min(sharp["total_slots"], pins + (sharp["expert_budget_bytes"] - pins * LADDER[0][1]) // LADDER[2][1])
    miss = (1 - sharp["coverage"]) * sharp["experts_per_token"] * LADDER[2][1] * (1 / sharp["h2d_bytes_per_s"] + 1 / 3e9)
    assert sharp["tok_s"] == pytest.approx(1 / (miss + sharp["floor_s"]), rel=1e-3)
    # no tiers at all: the model's own experts, as before
    assert "tiers" not in fit(k3)


# --- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize("tool", ["device-fit", "trace-tail"])
def test_a_plan_tier_outside_the_ladder_is_exit_2_naming_it(k3, tmp_path, trace, container, tool):
    plan = tmp_path / "plan.json"
    doc = {"version": 1, "budget_bytes": 10_000, "window_k": 8,
           "pin_list": [{"layer": 1, "expert": 2, "tier": 0}, {"layer": 3, "expert": 4, "tier": 5}]}
    plan.write_text(json.dumps(doc))
    assert fork_rules.plan_tier_error(doc, len(LADDER)) == "pin_list[1] TierOutOfRange"
    args = ([k3, "--runtime", "fork", "--vram", "32G", "--ctx", 32768] if tool == "device-fit" else [trace, *SYNTH])
    result = invoke(tool, *args, "--plan", plan, "--container", container)
    assert result.exit_code == 2
    assert "pin_list[1] (layer 3, expert 4) has tier 5, outside the container's ladder (0 Q8_0, 1 Q4_K, 2 Q2_K)" in result.stderr
    assert "plan.json" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert read_doc(plan) == doc  # untouched
    plan.write_text(json.dumps(dict(doc, pin_list=doc["pin_list"][:1], default_tier=3)))
    result = invoke(tool, *args, "--plan", plan, "--container", container)
    assert result.exit_code == 2 and "default_tier 3 is outside the container's ladder" in result.stderr


@pytest.mark.parametrize("option, value, said", [
    ("--pin-tier", "q9_Z", "--pin-tier: 'q9_Z' is not a tier"),
    ("--default-tier", "fast", "--default-tier: 'fast' is not a tier"),
    ("--pin-tier", "3", "--pin-tier 3: outside the container's ladder (0 Q8_0, 1 Q4_K, 2 Q2_K)"),
    ("--default-tier", "q6_K", "--default-tier q6_K: not in the container's ladder"),
])
@pytest.mark.parametrize("tool", ["device-fit", "trace-tail"])
def test_a_bad_tier_option_is_exit_2_in_one_line(k3, tmp_path, trace, container, tool, option, value, said):
    args = ([k3, "--runtime", "fork", "--vram", "32G", "--ctx", 32768] if tool == "device-fit" else [trace, *SYNTH])
    result = invoke(tool, *args, "--plan", tmp_path / "plan.json", "--container", container, option, value)
    assert result.exit_code == 2, result.output
    assert said in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "plan.json").exists()


def test_a_tier_name_needs_the_ladder_and_a_label_in_a_plan_is_resolved_by_it(k3, tmp_path, trace, container):
    plan = tmp_path / "plan.json"
    result = invoke("trace-tail", trace, *SYNTH, "--plan", plan, "--pin-tier", "q4_K")
    assert result.exit_code == 2 and "a tier name needs --container DIR" in result.stderr
    # another writer's plan naming tiers: refused without the ladder, turned into indices with it
    plan.write_text(json.dumps({"version": 1, "budget_bytes": 10_000, "window_k": 8, "default_tier": "Q2_K",
                                "pin_list": [{"layer": 0, "expert": 0, "tier": "q8_0"}]}))
    result = invoke("trace-tail", trace, *SYNTH, "--plan", plan)
    assert result.exit_code == 2 and "give --container DIR" in result.stderr
    result = invoke("trace-tail", trace, *SYNTH, "--plan", plan, "--container", container, "--json")
    assert result.exit_code == 0, result.output
    doc = read_doc(plan)
    assert doc["default_tier"] == 2 and fork_rules.daemon_plan_serde_error(doc) is None
    assert {p["tier"] for p in doc["pin_list"]} == {0}
    result = invoke("device-fit", k3, "--vram", "32G", "--runtime", "llama", "--pin-tier", 0)
    assert result.exit_code == 2 and "--runtime fork" in result.stderr
