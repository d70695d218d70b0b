"""`trace-tail --port N` and `device-fit --port N`: the serving daemon's per-port files, found as the
daemon finds them, and its plan never written.

Held to CambrianTech/continuum core/continuum-core/src/inference/llama_server.rs
`moe_glass_box_paths(port)` (`dirs::home_dir()/.continuum/logs/{moe-capture-N.jsonl, moe-plan-N.json,
moe-trace-N.bin}`, restated as `fork_rules.moe_glass_box_paths`; the storage root does not move it)
and core/continuum-core/src/modules/serving_daemon.rs `publish_moe_host_cache_lease` (a fresh
`PlanFileDocument` written whole every tick that moves an axis: no read, merge or lock -- so
moetools writes its own plan, moetools-plan-N.json, beside it). Real files and subprocesses with
HOME pointed at a temporary folder; no mocks.
"""

import json
import os
import subprocess
import sys

import pytest

from moetools.formats import daemon_files
from moetools.formats import trace as trace_format
from tests import fork_rules

PORT = 58057
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(home, *args, timeout=120):
    env = dict(os.environ, HOME=str(home), PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-m", "moetools", *map(str, args)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def token_records(n_tokens, layers=2, experts_per_layer=4, n_expert=16, seed=3):
    """Records of `n_tokens` decode tokens over blk.0..layers-1 gate matrices (keys as the fork hashes them)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    keys = [trace_format.fnv1a64(f"blk.{layer}.ffn_gate_exps.weight") for layer in range(layers)]
    tkeys, experts = [], []
    for _ in range(n_tokens):
        for layer in range(layers):
            chosen = rng.choice(n_expert, experts_per_layer, replace=False)
            tkeys += [keys[layer]] * experts_per_layer
            experts += chosen.tolist()
    return tkeys, experts


@pytest.fixture
def home(tmp_path):
    """A home folder with the daemon's logs folder and a 40-token trace for PORT."""
    folder = tmp_path / "home"
    logs = folder / ".continuum" / "logs"
    logs.mkdir(parents=True)
    import numpy as np

    tkeys, experts = token_records(40)
    trace_format.write_trace(str(logs / f"moe-trace-{PORT}.bin"), np.array(tkeys, dtype=np.uint64), np.array(experts, dtype=np.uint32))
    return folder


def test_the_files_are_where_the_daemon_puts_them(tmp_path):
    """moe_glass_box_paths: home/.continuum/logs, whatever CONTINUUM_STORAGE_PATH says (the daemon
    does not read it for these files)."""
    env = {"HOME": str(tmp_path), "CONTINUUM_STORAGE_PATH": str(tmp_path / "elsewhere")}
    files = daemon_files.port_files(PORT, env)
    expected = fork_rules.moe_glass_box_paths(PORT, str(tmp_path))
    assert (files.capture, files.plan, files.trace) == (expected["capture"], expected["plan"], expected["trace"])
    assert files.own_plan not in expected.values() and os.path.dirname(files.own_plan) == os.path.dirname(expected["plan"])


def test_trace_tail_port_reads_the_daemons_trace_as_the_file_would(home):
    trace = home / ".continuum" / "logs" / f"moe-trace-{PORT}.bin"
    common = ["--synth-layers", 2, "--experts", 16, "--budget-slots", 8, "--policies", "lru", "--once", "--json"]
    by_port = run(home, "trace-tail", "--port", PORT, *common)
    by_path = run(home, "trace-tail", trace, *common)
    assert by_port.returncode == 0, by_port.stderr
    doc = json.loads(by_port.stdout)
    assert doc["trace"] == str(trace)
    assert doc == json.loads(by_path.stdout)


def test_trace_tail_port_follows_by_default(home):
    done = run(home, "trace-tail", "--port", PORT, "--synth-layers", 2, "--experts", 16, "--budget-slots", 8,
               "--max-idle", "0.3", timeout=60)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    # one line per decode token; the open last token is not emitted while following (no next token began)
    assert lines and all("hit" in line for line in lines) and "decode tokens" in done.stderr


@pytest.mark.parametrize("command", ["trace-tail", "device-fit"])
def test_port_without_daemon_files_exits_2_saying_where_it_looked(tmp_path, command, preset_model):
    (tmp_path / ".continuum" / "logs").mkdir(parents=True)
    args = ["--synth-layers", 2] if command == "trace-tail" else [preset_model("qwen3-30b-a3b"), "--vram", "24G"]
    done = run(tmp_path, command, *args, "--port", 1234)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert str(tmp_path / ".continuum" / "logs") in done.stderr and "1234" in done.stderr


def test_trace_tail_needs_trace_or_port_not_both(home):
    assert run(home, "trace-tail", "--synth-layers", 2).returncode == 2
    both = run(home, "trace-tail", home / "x.bin", "--port", PORT, "--synth-layers", 2)
    assert both.returncode == 2 and "not both" in both.stderr


def daemon_plan(home):
    path = home / ".continuum" / "logs" / f"moe-plan-{PORT}.json"
    # what the daemon writes (PlanFileDocument: version, budget_bytes, window_k, pin_list)
    path.write_text('{"version":1,"budget_bytes":1048576,"window_k":8,"pin_list":[]}')
    os.utime(path, (1_000_000_000, 1_000_000_000))
    return path


def assert_untouched(path):
    assert path.read_text() == '{"version":1,"budget_bytes":1048576,"window_k":8,"pin_list":[]}'
    assert os.stat(path).st_mtime == 1_000_000_000


def test_trace_tail_never_writes_the_daemons_plan(home):
    plan = daemon_plan(home)
    done = run(home, "trace-tail", "--port", PORT, "--once", "--synth-layers", 2, "--experts", 16, "--expert-bytes", 4096,
               "--budget-slots", 8, "--policies", "lru", "--pin-policy", "lru", "--plan", plan, "--json")
    assert done.returncode == 0, done.stderr
    assert_untouched(plan)
    own = home / ".continuum" / "logs" / f"moetools-plan-{PORT}.json"
    assert json.loads(own.read_text())["pin_list"]
    warning = [line for line in done.stderr.splitlines() if str(plan) in line]
    assert len(warning) == 1 and daemon_files.WHY_NOT_DAEMON_PLAN in warning[0] and str(own) in warning[0]


def test_device_fit_port_and_the_daemons_plan(home, preset_model):
    """--port: the daemon's capture file is GGML_MOE_CAPTURE_FILE; a --plan naming the daemon's plan (by
    any path, with or without --port) goes to moetools-plan-N.json, which the launch then names."""
    plan = daemon_plan(home)
    model = preset_model("qwen3-30b-a3b")
    logs = home / ".continuum" / "logs"
    done = run(home, "device-fit", model, "--vram", "24G", "--port", PORT, "--plan", plan, "--emit", "env", "--json")
    assert done.returncode == 0, done.stderr
    assert_untouched(plan)
    env = json.loads(done.stdout)["env"]
    assert env["GGML_MOE_CAPTURE_FILE"] == str(logs / f"moe-capture-{PORT}.jsonl")
    assert env["GGML_MOE_PLAN_FILE"] == str(logs / f"moetools-plan-{PORT}.json")
    assert json.loads((logs / f"moetools-plan-{PORT}.json").read_text())["device_budget_bytes"] > 0
    assert sum(daemon_files.WHY_NOT_DAEMON_PLAN in line for line in done.stderr.splitlines()) == 1
    # the same file reached through a link to the folder, without --port
    link = home / "logs-link"
    link.symlink_to(logs)
    again = run(home, "device-fit", model, "--vram", "24G", "--plan", link / f"moe-plan-{PORT}.json", "--json")
    assert again.returncode == 0, again.stderr
    assert_untouched(plan)
    assert daemon_files.WHY_NOT_DAEMON_PLAN in again.stderr


def test_device_fit_port_reports_the_daemons_files(home, preset_model):
    done = run(home, "device-fit", preset_model("qwen3-30b-a3b"), "--vram", "24G", "--port", PORT, "--runtime", "fork", "--json")
    assert done.returncode == 0, done.stderr
    daemon = json.loads(done.stdout)["daemon"]
    auto = run(home, "device-fit", preset_model("qwen3-30b-a3b"), "--vram", "24G", "--port", PORT, "--json")
    assert auto.returncode == 0, auto.stderr
    assert json.loads(auto.stdout)["fork"]["daemon"] == daemon  # --port makes the fork apply beside llama.cpp
    logs = str(home / ".continuum" / "logs")
    assert daemon["port"] == PORT and daemon["folder"] == logs and daemon["found"] == [f"moe-trace-{PORT}.bin"]
    assert daemon["trace"] == fork_rules.moe_glass_box_paths(PORT, str(home))["trace"]


def test_daemon_probe_takes_the_lease_from_the_daemons_plan(home):
    """serving_daemon.rs halves the lease it publishes as budget_bytes (trace_tail.rs pin_ceiling): with
    --port and no budget option, --daemon-probe reads it from moe-plan-N.json (read, never written)."""
    plan = daemon_plan(home)
    done = run(home, "trace-tail", "--port", PORT, "--once", "--synth-layers", 2, "--experts", 16, "--expert-bytes", 4096,
               "--policies", "lru", "--daemon-probe", "--json")
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)["daemon_probe"]
    assert got["pin_ceiling_inputs"]["budget_from"] == "daemon plan" and got["pin_ceiling_inputs"]["budget_bytes"] == 1048576
    assert got["pin_ceiling"] == fork_rules.daemon_pin_ceiling(1048576, 4096 * 2 * 16, 2, 16)
    assert_untouched(plan)
