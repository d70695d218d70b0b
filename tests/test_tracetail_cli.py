"""`moetools trace-tail` through the CLI: reference figures, importers, round trip, bad input,
curves for device-fit, SVG, --follow and --plan."""

import json
import threading
import time

import numpy as np
import pytest
from click.testing import CliRunner

from moetools.cli import cli
from moetools.formats import trace as trace_format
from moetools.formats.curve import read_curve
from moetools.formats.plan import read_plan
from moetools.tracetail.importers import tokens_to_records
from moetools.tracetail.reader import make_ids
from tests import factory

# README of ../shared/traces: requests, distinct, LRU hit, Belady hit at the given budget
REFERENCE = {
    "qwen": (48, 768, 36864, 3059, 0.578016, 0.784939),
    "gptoss": (36, 576, 4608, 1292, 0.617405, 0.719618),
}


def run(args, input=None):
    return CliRunner().invoke(cli, ["trace-tail", *args], input=input, catch_exceptions=False)


def ok_json(args, input=None):
    result = run([*args, "--json"], input)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def shared_trace(name):
    path = factory.SHARED_TRACES / f"{name}.route.csv"
    if not path.exists():
        pytest.skip(f"real routing traces not present in {factory.SHARED_TRACES} (CI has them; a fresh clone may not)")
    return path


def write_tokens(path, tokens, phases=None):
    tkeys, experts = tokens_to_records(tokens, phases or ["decode"] * len(tokens))
    path.write_bytes(trace_format.encode_records(tkeys, experts))
    return path


def skewed_tokens(n_tokens, n_layers=4, n_expert=16, top_k=2, seed=0):
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, n_expert + 1) ** 1.2
    weights /= weights.sum()
    out = []
    for _ in range(n_tokens):
        pairs = [(layer, e) for layer in range(n_layers) for e in rng.choice(n_expert, top_k, replace=False, p=weights)]
        layers, experts = zip(*pairs)
        out.append(np.unique(make_ids(layers, experts)))
    return out


# --- reference figures -------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_route_trace_csv_reproduces_reference_figures(name, tmp_path):
    layers, budget, requests, distinct, lru, belady = REFERENCE[name]
    path = shared_trace(name)
    out = tmp_path / f"{name}.trace"
    doc = ok_json([str(path), "--budget-slots", str(budget), "--write-trace", str(out)])
    assert (doc["requests"], doc["distinct"]) == (requests, distinct)
    assert round(doc["hit"]["lru"], 6) == lru and round(doc["hit"]["belady"], 6) == belady
    assert doc["format"] == "csv" and doc["total_slots"] == layers * 128
    # the 12-byte conversion keeps token boundaries and the prefill/decode split
    back = ok_json([str(out), "--synth-layers", str(layers), "--experts", "128", "--budget-slots", str(budget)])
    assert (back["requests"], back["distinct"], back["decode_tokens"]) == (requests, distinct, doc["decode_tokens"])
    assert round(back["hit"]["lru"], 6) == lru and round(back["hit"]["belady"], 6) == belady
    assert back["fnv_basis"] == "fork" and back["unknown_records"] == 0 and back["prefill_tokens"] == 1


def test_reference_curve_is_readable_by_device_fit_and_plots(tmp_path):
    path = shared_trace("gptoss")
    svg = tmp_path / "gptoss.svg"
    result = run([str(path), "--curve", "--plot", str(svg), "--json"])
    assert result.exit_code == 0, result.output
    curve = json.loads(result.stdout)
    (tmp_path / "curve.json").write_text(result.stdout)
    parsed = read_curve(str(tmp_path / "curve.json"))
    assert parsed.slots[-1] == 1292 and parsed.requests == 4608 and parsed.decode_tokens == 64
    assert set(curve["hit"]) >= {"lru", "lfu", "belady", "decay_bandit"}
    belady, lru = np.array(curve["hit"]["belady"]), np.array(curve["hit"]["lru"])
    assert (belady >= lru).all() and (belady >= np.array(curve["hit"]["lfu"])).all()
    text = svg.read_text()
    assert text.startswith("<svg") and "belady (ceiling)" in text and "decay_bandit" in text


# --- importers -----------------------------------------------------------------------------------


def test_jsonl_and_npy_importers_agree_with_the_12_byte_trace(tmp_path):
    tokens = skewed_tokens(30)
    array = np.stack([np.asarray([[e for _, e in sorted(zip(*divmod_ids(t))) if _ == layer] for layer in range(4)]) for t in tokens])
    npy = tmp_path / "t.npy"
    np.save(npy, array)
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text("".join(json.dumps({"token": i, "layer": layer, "experts": array[i, layer].tolist()}) + "\n"
                             for i in range(30) for layer in range(4)))
    binary = write_tokens(tmp_path / "t.trace", tokens)
    common = ["--budget-slots", "10", "--experts", "16", "--top-k", "2"]
    a = ok_json([str(npy), *common])
    b = ok_json([str(jsonl), *common])
    c = ok_json([str(binary), "--synth-layers", "4", *common])
    for doc in (a, b, c):
        assert (doc["decode_tokens"], doc["requests"]) == (30, 240)
    assert a["hit"] == b["hit"] == c["hit"]
    written = tmp_path / "from_npy.trace"
    ok_json([str(npy), *common, "--write-trace", str(written)])
    assert written.read_bytes() == binary.read_bytes()


def divmod_ids(ids):
    return (ids >> 32).tolist(), (ids & 0xFFFFFFFF).tolist()


def test_stdin_trace(tmp_path):
    binary = write_tokens(tmp_path / "t.trace", skewed_tokens(10))
    doc = ok_json(["-", "--synth-layers", "4", "--budget-slots", "8"], input=binary.read_bytes())
    assert doc["decode_tokens"] == 10 and doc["trace"] == "-"


def test_model_layer_map(tiny_models, tmp_path):
    binary = write_tokens(tmp_path / "t.trace", skewed_tokens(12, top_k=4))
    doc = ok_json([str(binary), "--model", str(tiny_models["qwen3moe"]), "--budget-slots", "16"])
    assert doc["layer_map"] == str(tiny_models["qwen3moe"]) and doc["total_slots"] == 64
    assert doc["expert_bytes"] == 104448 and doc["budget_bytes"] == 16 * 104448
    assert doc["decode_tokens"] == 12  # top-k 4 x 4 layers: decode from token 0


# --- bad input -----------------------------------------------------------------------------------


def error_of(args, input=None):
    result = CliRunner().invoke(cli, ["trace-tail", *args], input=input)
    return result.exit_code, result.stderr if hasattr(result, "stderr") else result.output


def test_torn_tail_warns_and_is_ignored(tmp_path):
    binary = write_tokens(tmp_path / "t.trace", skewed_tokens(10))
    whole = ok_json([str(binary), "--synth-layers", "4", "--budget-slots", "8"])
    with open(binary, "ab") as handle:
        handle.write(b"\x01\x02\x03\x04\x05")
    result = run([str(binary), "--synth-layers", "4", "--budget-slots", "8", "--json"])
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    assert doc["torn_bytes"] == 5 and doc["hit"] == whole["hit"]
    assert "torn record" in result.stderr


def test_unknown_keys_are_counted(tmp_path):
    data = write_tokens(tmp_path / "t.trace", skewed_tokens(10)).read_bytes()
    stray = trace_format.encode_records([999, 999], [1, 2])
    path = tmp_path / "stray.trace"
    path.write_bytes(data + stray)
    result = run([str(path), "--synth-layers", "4", "--budget-slots", "8", "--json"])
    assert result.exit_code == 0
    assert json.loads(result.stdout)["unknown_records"] == 2 and "match no expert tensor" in result.stderr


def test_trace_of_a_different_model_exits_2(tiny_models, tmp_path):
    binary = write_tokens(tmp_path / "big.trace", skewed_tokens(5, n_layers=40))
    code, err = error_of([str(binary), "--model", str(tiny_models["qwen3moe"])])
    assert code == 2 and "different model" in err and "(90%)" in err


def test_empty_file_exits_2(tmp_path):
    path = tmp_path / "empty.trace"
    path.write_bytes(b"")
    code, err = error_of([str(path), "--synth-layers", "4"])
    assert code == 2 and "empty trace" in err


def test_csv_with_missing_columns_exits_2(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("turn,phase,step,slot\n0,1,0,0\n")
    code, err = error_of([str(path)])
    assert code == 2 and "lacks column(s) layer, expert" in err


@pytest.mark.parametrize("budget,words", [("0", "at least 1 slot"), ("65", "larger than the 64 slots")])
def test_bad_budgets_exit_2(tmp_path, budget, words):
    binary = write_tokens(tmp_path / "t.trace", skewed_tokens(10))
    code, err = error_of([str(binary), "--synth-layers", "4", "--experts", "16", "--budget-slots", budget])
    assert code == 2 and words in err
    code, err = error_of([str(binary), "--synth-layers", "4", "--experts", "16", "--curve", f"1,{budget}"])
    assert code == 2 and words in err


def test_trace_needs_a_layer_map(tmp_path):
    binary = write_tokens(tmp_path / "t.trace", skewed_tokens(3))
    code, err = error_of([str(binary)])
    assert code == 2 and "--synth-layers" in err


# --- follow --------------------------------------------------------------------------------------


def test_follow_emits_one_line_per_decode_token_and_keeps_the_plan(tmp_path):
    tokens = skewed_tokens(41, seed=3)  # the 41st starts after the 40th: no wait for --max-idle (a hang guard only)
    tkeys, experts = tokens_to_records(tokens, ["decode"] * len(tokens))
    data = trace_format.encode_records(tkeys, experts)
    path = tmp_path / "live.trace"
    path.write_bytes(data[: len(data) // 3 + 5])  # starts mid-record
    plan = tmp_path / "plan.json"

    def writer():
        for cut in (len(data) // 3 + 5, 2 * len(data) // 3, len(data)):
            time.sleep(0.05)
            with open(path, "r+b") as handle:
                handle.seek(0, 2)
                handle.write(data[handle.tell():cut])

    thread = threading.Thread(target=writer)
    thread.start()
    result = run([str(path), "--follow", "--synth-layers", "4", "--experts", "16", "--budget-slots", "12",
                  "--expert-bytes", "1000", "--plan", str(plan), "--poll", "0.02", "--max-tokens", "40", "--max-idle", "60"])
    thread.join()
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["decode_token"] for line in lines] == list(range(40))
    assert lines[0]["repeat"] is None and lines[1]["repeat"] is not None
    assert set(lines[5]["hit"]) == {"lru", "lfu", "decay_bandit", "prefill_pin", "predictive"}
    assert set(lines[5]["topk_hit"]) == {"decay_bandit", "recency", "prefill_pin"}
    written = read_plan(str(plan))
    assert written.budget_bytes == 12000 and 0 < len(written.pin_list) <= 6  # pin ceiling = half of 12 slots
    assert written.pin_list == sorted(written.pin_list)
    # rewritten only on change: the last line that wrote it holds the current pins
    flags = [line["plan_written"] for line in lines]
    assert flags[0] is True and not all(flags)


def test_follow_resets_on_truncation(tmp_path):
    """A real follower process: the file is truncated only after the follower has read the first serve
    (its five closed tokens are on stdout), so the test does not depend on how fast it starts. The
    follower ends at its 10th closed token (5 per serve); --max-idle is only a hang guard, so a test
    process descheduled under load cannot make the follower give up before the regrowth."""
    import subprocess
    import sys

    tokens = skewed_tokens(6, seed=5)
    data = trace_format.encode_records(*tokens_to_records(tokens, ["decode"] * 6))
    path = tmp_path / "live.trace"
    path.write_bytes(data)
    process = subprocess.Popen([sys.executable, "-m", "moetools", "trace-tail", str(path), "--follow", "--synth-layers",
                                "4", "--budget-slots", "8", "--poll", "0.02", "--max-tokens", "10", "--max-idle", "120"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = [json.loads(process.stdout.readline()) for _ in range(5)]
    path.write_bytes(data[:200])  # a new serve: the file shrank
    # grow it again only once the follower has seen the shrink: under load a follower that polls
    # after the regrowth would see the old size and no truncation at all
    notice = ""
    while "new serve" not in notice:
        line = process.stderr.readline()
        if not line:  # the follower ended without seeing it: the assertions below say so
            break
        notice += line
    with open(path, "ab") as handle:
        handle.write(data[200:])
    rest, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, notice + stderr
    serves = [line["serve"] for line in first] + [json.loads(line)["serve"] for line in rest.splitlines()]
    assert "new serve" in notice
    assert serves.count(0) == 5 and serves.count(1) == 5 and serves[-1] == 1  # the 6th token stays open, as in the daemon


def test_follow_rejects_whole_trace_options(tmp_path):
    binary = write_tokens(tmp_path / "t.trace", skewed_tokens(3))
    code, err = error_of([str(binary), "--follow", "--synth-layers", "4", "--budget-slots", "4", "--curve"])
    assert code == 2 and "--once" in err


def test_once_plan_and_output_files(tmp_path):
    binary = write_tokens(tmp_path / "t.trace", skewed_tokens(20))
    plan, out = tmp_path / "plan.json", tmp_path / "curve.json"
    doc = ok_json([str(binary), "--synth-layers", "4", "--experts", "16", "--budget-slots", "10", "--expert-bytes", "2KiB",
                   "--plan", str(plan), "--curve", "2,10,40", "-o", str(out)])
    written = read_plan(str(plan))
    assert written.budget_bytes == 10 * 2048 and len(written.pin_list) <= 5
    curve = read_curve(str(out))
    assert curve.slots == [2, 10, 40] and curve.hit == doc["hit"]
    assert doc["summary"]["budget_bytes"] == 20480


@pytest.mark.parametrize("name,body,words", [
    ("bad.jsonl", '{"token": 0, "layer": 0}\n', "no 'experts'"),
    ("bad2.jsonl", '{"token": 0, "layer": 0, "experts": [1, -2]}\n', "whole numbers >= 0"),
    ("bad3.jsonl", "not json\n", "line 1: not JSON"),
    ("bad.csv", "turn,phase,step,layer,expert\n0,1,x,0,1\n", "line 2: column 'step'"),
])
def test_bad_import_files_exit_2(tmp_path, name, body, words):
    path = tmp_path / name
    path.write_text(body)
    code, err = error_of([str(path)])
    assert code == 2 and words in err


def test_npy_with_wrong_shape_exits_2(tmp_path):
    path = tmp_path / "flat.npy"
    np.save(path, np.arange(12))
    code, err = error_of([str(path)])
    assert code == 2 and "expected [tokens, layers, top_k]" in err


def test_expert_id_out_of_range_exits_2(tmp_path, tiny_models):
    path = tmp_path / "bad.trace"
    key = trace_format.fnv1a64("blk.0.ffn_gate_exps.weight")
    path.write_bytes(trace_format.encode_records([key, key], [3, 16]))
    code, err = error_of([str(path), "--model", str(tiny_models["qwen3moe"])])
    assert code == 2 and "at offset 12" in err and "expert id 16 is out of range (experts per layer: 16)" in err
    jsonl = tmp_path / "bad.jsonl"
    jsonl.write_text('{"token": 0, "layer": 0, "experts": [1, 5000]}\n')
    code, err = error_of([str(jsonl)])
    assert code == 2 and "expert id 5000 is out of range" in err


@pytest.mark.parametrize("policy", ["belady", "recency", "nope"])
def test_pin_policy_not_run_exits_2(tmp_path, policy):
    binary = write_tokens(tmp_path / "t.trace", skewed_tokens(5))
    result = run([str(binary), "--synth-layers", "4", "--experts", "16", "--expert-bytes", "2KiB", "--plan",
                  str(tmp_path / "plan.json"), "--pin-policy", policy])
    assert result.exit_code == 2 and f"--pin-policy {policy}: not a policy" in result.stderr
    assert not (tmp_path / "plan.json").exists()


@pytest.mark.parametrize("policy", ["predictive", "decay_bandit", "lfu", "lru"])
def test_pin_policy_ranks_the_pins(tmp_path, policy):
    """Experts 0 and 1 of every layer are used by every token, the rest in turn. The ceiling is 8 pins.
    predictive and lfu pin the ever-present experts; lru the 8 most recent requests; the bandit the
    top of its served arm, experts the last token used."""
    routing = [[[0, 1, 2 + (t + layer) % 14] for layer in range(4)] for t in range(30)]
    tokens = [np.unique(make_ids(np.repeat(np.arange(4), 3), np.array(token).reshape(-1))) for token in routing]
    binary = write_tokens(tmp_path / "t.trace", tokens)
    plan = tmp_path / "plan.json"
    ok_json([str(binary), "--synth-layers", "4", "--experts", "16", "--budget-slots", "16", "--expert-bytes", "1000",
             "--plan", str(plan), "--pin-policy", policy])
    pins = read_plan(str(plan)).pin_list
    last = [(layer, e) for layer in range(4) for e in routing[-1][layer]]  # request order
    if policy in ("predictive", "lfu"):
        assert pins == sorted((layer, e) for layer in range(4) for e in (0, 1))
    elif policy == "lru":
        assert pins == sorted(last[-8:])
    else:
        assert len(pins) == 8 and set(pins) <= set(last)


def test_compiled_and_interpreted_kernels_write_the_same_curve(tmp_path):
    """The numba kernels and the same loops run by the interpreter ($MOETOOLS_NO_JIT=1) write the
    same curve JSON, bit for bit, on a real layout: the shared Qwen3-30B-A3B trace (48 layers x 128
    experts, top-6), its prefill and first 12 decode tokens (the interpreter is slow)."""
    import os
    import subprocess
    import sys

    pytest.importorskip("numba")
    lines = shared_trace("qwen").read_text().splitlines(keepends=True)
    rows = [line for line in lines if not line.startswith("#") and not line.startswith("turn")]
    first_decode = min(int(line.split(",")[2]) for line in rows if line.split(",")[1] == "1")
    kept = [line for line in lines if line.startswith("#") or line.startswith("turn") or int(line.split(",")[2]) < first_decode + 12]
    small = tmp_path / "qwen12.route.csv"
    small.write_text("".join(kept))
    docs = []
    for no_jit in ("1", ""):
        env = {**os.environ, "MOETOOLS_NO_JIT": no_jit}
        done = subprocess.run([sys.executable, "-m", "moetools", "trace-tail", str(small), "--curve", "3,48,288,1152", "--json"],
                              env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        docs.append(json.loads(done.stdout))
    assert docs[0]["requests"] == 12 * 288 and set(docs[0]["demand_policies"]) >= {"predictive", "decay_bandit"}
    assert docs[0] == docs[1]


# --- --policies ----------------------------------------------------------------------------------


def test_policies_curves_only_the_named_policies_with_the_same_figures(tmp_path):
    """--policies predictive,lru runs those two (and Belady) with the figures of the full run, says so in
    demand_policies, and leaves the instruments out unless --instruments asks for them."""
    binary = write_tokens(tmp_path / "t.trace", skewed_tokens(40))
    common = [str(binary), "--synth-layers", "4", "--experts", "16", "--curve", "2,8,32"]
    full = ok_json(common)
    part = ok_json([*common, "--policies", "predictive,lru"])
    assert part["demand_policies"] == ["lru", "predictive"] and part["ceiling_policies"] == ["belady"]
    assert list(part["hit"]) == ["lru", "predictive", "belady"]
    for name in part["hit"]:
        assert part["hit"][name] == full["hit"][name]
    assert "topk_instruments" not in part and "instruments" not in part["summary"] and "topk_hit" not in part["summary"]
    assert part["summary"]["demand_policies"] == ["lru", "predictive"]
    assert set(part["summary"]["gap_closed"]) == {"lru", "predictive"}
    assert part["summary"]["gap_closed"]["predictive"] == full["summary"]["gap_closed"]["predictive"]
    # LRU (the gap-closed baseline) and Belady (the ceiling) run whatever is named
    only = ok_json([*common, "--policies", "lfu,belady", "--instruments"])
    assert only["demand_policies"] == ["lru", "lfu"] and list(only["hit"]) == ["lru", "lfu", "belady"]
    assert only["topk_instruments"] == full["topk_instruments"] and only["summary"]["instruments"] == full["summary"]["instruments"]
    assert full["demand_policies"] == ["lru", "lfu", "decay_bandit", "prefill_pin", "predictive"]
    # the table output works without the instruments too
    table = run([*common, "--policies", "predictive"])
    assert table.exit_code == 0 and "predictive" in table.stdout and "decay_bandit" not in table.stdout


@pytest.mark.parametrize("text, words", [("predictive,nope", "'nope' is not a policy"), ("recency", "'recency' is not a policy"),
                                         (",", "no policy named")])
def test_policies_bad_names_exit_2_listing_the_valid_ones(tmp_path, text, words):
    binary = write_tokens(tmp_path / "t.trace", skewed_tokens(5))
    result = run([str(binary), "--synth-layers", "4", "--experts", "16", "--curve", "--policies", text])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0]
    assert "choose from lru, lfu, decay_bandit, prefill_pin, predictive, belady" in lines[0]


def test_pin_policy_outside_policies_exits_2(tmp_path):
    binary = write_tokens(tmp_path / "t.trace", skewed_tokens(5))
    result = run([str(binary), "--synth-layers", "4", "--experts", "16", "--expert-bytes", "2KiB", "--plan",
                  str(tmp_path / "plan.json"), "--policies", "lfu", "--pin-policy", "predictive"])
    assert result.exit_code == 2 and "--pin-policy predictive: not run" in result.stderr and "lru, lfu" in result.stderr
    assert not (tmp_path / "plan.json").exists()
    ok_json([str(binary), "--synth-layers", "4", "--experts", "16", "--expert-bytes", "2KiB", "--plan",
             str(tmp_path / "plan.json"), "--policies", "lfu", "--pin-policy", "lfu"])
    assert read_plan(str(tmp_path / "plan.json")).pin_list


def test_follow_with_policies_reports_only_those(tmp_path):
    binary = write_tokens(tmp_path / "t.trace", skewed_tokens(6))
    result = run([str(binary), "--synth-layers", "4", "--experts", "16", "--budget-slots", "8", "--follow", "--max-idle", "0",
                  "--policies", "predictive"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(lines) == 5 and all(set(line["hit"]) == {"lru", "predictive"} for line in lines)
    assert all("topk_hit" not in line and "repeat" not in line for line in lines)


def test_device_fit_predicts_from_the_best_policy_of_a_partial_curve(tmp_path, tiny_models):
    """A curve of --policies lfu,lru names what ran; device-fit's default coverage policy is the best of
    those (no note), never a policy the curve does not hold."""
    from moetools.formats.curve import default_coverage_policy

    binary = write_tokens(tmp_path / "t.trace", skewed_tokens(40))
    curve_path = tmp_path / "curve.json"
    doc = ok_json([str(binary), "--synth-layers", "4", "--experts", "16", "--curve", "2,8,32", "--policies", "lfu",
                   "-o", str(curve_path)])
    curve = read_curve(str(curve_path))
    assert curve.demand_policies() == ["lru", "lfu"]
    best = max(("lru", "lfu"), key=lambda name: sum(doc["hit"][name]))
    assert default_coverage_policy(curve, str(curve_path)) == (best, None)
    fit = CliRunner().invoke(cli, ["device-fit", "--runtime", "fork", str(tiny_models["qwen3moe"]), "--vram", "8G", "--coverage", str(curve_path),
                                   "--json"], catch_exceptions=False)
    assert fit.exit_code == 0, fit.output
    fitted = json.loads(fit.stdout)
    assert fitted["coverage_source"] == f"curve ({best})"
    assert not any("older moetools" in warning for warning in fitted.get("warnings", []))
