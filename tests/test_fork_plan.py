"""The plan file against its consumers: the fork's `parse_pager_plan` / `reload_plan_locked`
(CambrianTech/llama.cpp ggml/src/ggml-moe-residency.hpp) and the daemon's `PlanFileDocument`
(CambrianTech/continuum core/continuum-core/src/capacity/plan_file.rs: version, budget_bytes,
window_k, pin_list required). One writer (formats.plan.update_plan) for device-fit and trace-tail."""

import json
import os

import pytest
from click.testing import CliRunner

from moetools.cli import cli
from moetools.errors import FormatError
from moetools.formats import trace as trace_format
from moetools.formats.plan import update_plan
from moetools.tracetail.importers import tokens_to_records
from tests import fork_rules
from tests.test_tracetail_cli import skewed_tokens

DAEMON_REQUIRED = ("version", "budget_bytes", "window_k", "pin_list")  # plan_file.rs PlanFileDocument


def invoke(*args):
    return CliRunner().invoke(cli, [*map(str, args)], catch_exceptions=False)


def read_doc(path):
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def k3(preset_model):
    return preset_model("kimi-k3", 2)


def test_new_plan_has_every_field_the_daemon_requires_and_the_fork_reads_it(tmp_path):
    path = tmp_path / "plan.json"
    update_plan(path, "trace-tail", {"pin_list": [(3, 1), (0, 7), (3, 1)], "budget_bytes": 5000})
    doc = read_doc(path)
    assert all(key in doc for key in DAEMON_REQUIRED) and doc["version"] == 1
    fork = fork_rules.parse_pager_plan(path.read_text())
    assert fork == {"budget_bytes": 5000, "device_budget_bytes": 0, "window_k": 8, "pins": [(0, 7), (3, 1)]}


def test_update_keeps_every_other_key_and_unknown_keys_cannot_shadow_known_ones(tmp_path):
    """parse_pager_plan takes the FIRST "budget_bytes" anywhere in the text: an unknown key holding
    one (kept from another writer) must come after the real one."""
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"governor": {"budget_bytes": 1, "device_budget_bytes": 2, "window_k": 3,
                                             "pin_list": [{"layer": 9, "expert": 9}]},
                                "version": 1, "budget_bytes": 0, "window_k": 24, "pin_list": [],
                                "device_budget_bytes": 77, "resident_tier": "q4_K"}))
    update_plan(path, "device-fit", {"budget_bytes": 403_000_000_000, "resident_tier": "q8_0"})
    doc = read_doc(path)
    assert doc["governor"]["budget_bytes"] == 1 and doc["window_k"] == 24 and doc["device_budget_bytes"] == 77
    fork = fork_rules.parse_pager_plan(path.read_text())
    assert fork == {"budget_bytes": 403_000_000_000, "device_budget_bytes": 77, "window_k": 24, "pins": []}
    update_plan(path, "trace-tail", {"pin_list": [(1, 2)]})
    fork = fork_rules.parse_pager_plan(path.read_text())
    assert fork["pins"] == [(1, 2)] and fork["budget_bytes"] == 403_000_000_000
    assert read_doc(path)["resident_tier"] == "q8_0" and read_doc(path)["governor"]["window_k"] == 3


def test_a_tool_cannot_write_keys_it_does_not_own(tmp_path):
    with pytest.raises(ValueError):
        update_plan(tmp_path / "p.json", "device-fit", {"pin_list": []})


def test_two_writes_in_one_second_are_two_reloads_for_the_fork(tmp_path):
    """reload_plan_locked compares (int64_t) st_mtime: the writer moves it a whole second on."""
    path = tmp_path / "plan.json"
    update_plan(path, "trace-tail", {"pin_list": [(0, 1)], "budget_bytes": 10})
    stats = [os.stat(path)]
    for pins in ([(0, 2)], [(0, 3)], [(0, 4)]):
        update_plan(path, "trace-tail", {"pin_list": pins})
        stats.append(os.stat(path))
    assert all(fork_rules.fork_reloads(a, b) for a, b in zip(stats, stats[1:]))
    assert fork_rules.parse_pager_plan(path.read_text())["pins"] == [(0, 4)]
    assert not [name for name in os.listdir(tmp_path) if name != "plan.json"]  # no temp left behind


@pytest.mark.parametrize("body,words", [
    ("not json at all", "not valid JSON"),
    ("", "empty"),
    ("[1, 2]", "not a JSON object"),
    ('{"version": 2, "budget_bytes": 1, "window_k": 8, "pin_list": []}', "version 2"),
    ('{"budget_bytes": 1}', "version null"),
])
def test_plan_of_another_kind_is_never_overwritten(tmp_path, body, words):
    path = tmp_path / "plan.json"
    path.write_text(body)
    with pytest.raises(FormatError, match=words):
        update_plan(path, "trace-tail", {"pin_list": []})
    assert path.read_text() == body


def test_device_fit_and_trace_tail_refuse_a_foreign_plan_with_exit_2(k3, tmp_path):
    path = tmp_path / "plan.json"
    path.write_text('{"version": 2}')
    result = invoke("device-fit", "--runtime", "fork", k3, "--vram", "32G", "--ctx", 32768, "--ram", "1T", "--plan", path, "--json")
    assert result.exit_code == 2 and "refusing to overwrite" in result.stderr
    trace = tmp_path / "t.trace"
    trace.write_bytes(trace_format.encode_records(*tokens_to_records(skewed_tokens(5), ["decode"] * 5)))
    result = invoke("trace-tail", trace, "--synth-layers", "4", "--experts", "16", "--expert-bytes", "1000", "--plan", path)
    assert result.exit_code == 2 and "version 2" in result.stderr
    assert path.read_text() == '{"version": 2}'


def test_round_trip_device_fit_trace_tail_device_fit_keeps_every_key(k3, tmp_path):
    """The reported failure: trace-tail --plan after device-fit --plan dropped device_budget_bytes
    and resident_tier and replaced the 403 GB budget by its own. Now each tool changes its keys only."""
    plan = tmp_path / "plan.json"
    fit = json.loads(invoke("device-fit", "--runtime", "fork", k3, "--vram", "32G", "--ctx", 32768, "--ram", "1T", "--plan", plan, "--json").stdout)
    first = read_doc(plan)
    assert first["device_budget_bytes"] == fit["expert_budget_bytes"] and first["resident_tier"] == "native"
    doc = read_doc(plan)
    doc["operator_note"] = {"keep": True}  # another writer's key
    plan.write_text(json.dumps(doc))
    trace = tmp_path / "t.trace"
    trace.write_bytes(trace_format.encode_records(*tokens_to_records(skewed_tokens(30), ["decode"] * 30)))
    result = invoke("trace-tail", trace, "--synth-layers", "4", "--experts", "16", "--expert-bytes", "1000",
                    "--plan", plan, "--json")
    assert result.exit_code == 0, result.output
    second = read_doc(plan)
    assert second["pin_list"], "trace-tail wrote no pins"
    for key in ("budget_bytes", "device_budget_bytes", "resident_tier", "window_k", "operator_note"):
        assert second[key] == doc[key], key
    invoke("device-fit", "--runtime", "fork", k3, "--vram", "32G", "--ctx", 32768, "--ram", "1T", "--plan", plan, "--json")
    third = read_doc(plan)
    assert third["pin_list"] == second["pin_list"] and third["operator_note"] == {"keep": True}
    assert {key: third[key] for key in first} == {**first, "pin_list": second["pin_list"]}
    fork = fork_rules.parse_pager_plan(plan.read_text())
    assert fork["budget_bytes"] == first["budget_bytes"] and fork["device_budget_bytes"] == first["device_budget_bytes"]
    assert fork["pins"] == [(p["layer"], p["expert"]) for p in second["pin_list"]]


def test_trace_tail_explicit_budget_is_its_own_to_write(tmp_path):
    plan = tmp_path / "plan.json"
    update_plan(plan, "device-fit", {"budget_bytes": 10**12, "device_budget_bytes": 5, "resident_tier": "native"})
    trace = tmp_path / "t.trace"
    trace.write_bytes(trace_format.encode_records(*tokens_to_records(skewed_tokens(10), ["decode"] * 10)))
    result = invoke("trace-tail", trace, "--synth-layers", "4", "--experts", "16", "--expert-bytes", "1000",
                    "--budget-slots", "10", "--plan", plan, "--json")
    assert result.exit_code == 0, result.output
    doc = read_doc(plan)
    assert doc["budget_bytes"] == 10_000 and doc["device_budget_bytes"] == 5 and len(doc["pin_list"]) <= 5


def test_follow_after_device_fit_keeps_device_fits_keys(tmp_path):
    plan = tmp_path / "plan.json"
    update_plan(plan, "device-fit", {"budget_bytes": 40_000, "device_budget_bytes": 123_456, "resident_tier": "q4_K"})
    trace = tmp_path / "live.trace"
    trace.write_bytes(trace_format.encode_records(*tokens_to_records(skewed_tokens(12, seed=4), ["decode"] * 12)))
    result = invoke("trace-tail", trace, "--follow", "--synth-layers", "4", "--experts", "16", "--expert-bytes", "1000",
                    "--plan", plan, "--poll", "0.02", "--max-idle", "0.3")
    assert result.exit_code == 0, result.output
    doc = read_doc(plan)
    assert (doc["budget_bytes"], doc["device_budget_bytes"], doc["resident_tier"]) == (40_000, 123_456, "q4_K")
    assert 0 < len(doc["pin_list"]) <= 20  # pin ceiling: half of the plan's 40 slots
    assert "budget from" in result.stderr


def test_device_fit_waits_for_the_plan_folder_lock_trace_tail_holds(k3, tmp_path):
    """device-fit's plan write is a read-modify-write of the file trace-tail --follow rewrites: it
    takes the plan folder's lock (formats.plan.update_plan_locked) and waits while another run holds it."""
    import subprocess
    import sys

    from tests.test_locking import ROOT, hold

    plan = tmp_path / "plan.json"
    holder = hold(tmp_path)
    try:
        fit = subprocess.Popen([sys.executable, "-m", "moetools", "device-fit", "--runtime", "fork", str(k3), "--vram", "32G", "--ctx", "32768",
                                "--ram", "1T", "--plan", str(plan), "--json"], cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        assert f"in use by pid {holder.pid}" in fit.stderr.readline()
        assert not plan.exists()
    finally:
        holder.communicate("")
    _, stderr = fit.communicate(timeout=120)
    assert fit.returncode == 0, stderr
    assert read_doc(plan)["resident_tier"] == "native"
