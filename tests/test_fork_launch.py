"""device-fit's launch for the serving fork (`--emit env`, `--emit env --json`, the default screen's
fork line) held to the fork's own conditions for paging, restated in tests/fork_rules.py:

- CambrianTech/llama.cpp ggml/src/ggml-backend.cpp `ggml_backend_sched_compute_splits`: an expert is
  paged (and written to GGML_MOE_TRACE_FILE) only when its weight is a host-buffer input of a MUL_MAT_ID
  that runs on the GPU; its "[MOE-PAGER] ... Paging is currently doing NOTHING" warning names the three
  ways that fails: CPU repack (--no-repack), the op-offload min batch (GGML_OP_OFFLOAD_MIN_BATCH), a
  CPU-only model (-ngl).
- ggml/src/ggml-cuda/ggml-cuda.cu `ggml_backend_cuda_device_offload_op` / `get_op_batch_size` /
  `ggml_backend_cuda_reg`: a MUL_MAT_ID offloads when its tokens (ne[2]) reach the min batch, 32 unless
  GGML_OP_OFFLOAD_MIN_BATCH says otherwise; a decode token is a batch of 1.
- ggml/src/ggml-moe-residency.hpp `MoeServingConfig::from_env` (atof(value) x 2^30: "0.00" is 0 bytes,
  the cache off), `ResidencyCache::enable_device` / `reload_plan_locked` (with a plan file the VRAM
  cache's budget is the plan's device_budget_bytes, 0 without it).
- CambrianTech/continuum core/continuum-core/src/inference/engine_install.rs
  `EngineInstallReceipt::read` (absolute GGML_MOE_*_FILE and LLAMA_RESIDENT_OVERRIDE),
  inference/llama_server.rs `cold_expert_offload_ot`, capacity/device_fit.rs
  `default_compute_reserve_bytes` (the fork's default reserve, max(2 GiB, 10% of VRAM)).
"""

import json
import os
import shlex

import pytest
from click.testing import CliRunner

from moetools.cli import cli
from moetools.devicefit import launch as launchmod
from moetools.devicefit.render import fork_line
from moetools.formats import trace as trace_format
from moetools.gguf import open_model
from moetools.tracetail.importers import tokens_to_records
from tests import fork_rules
from tests.test_devicefit import _tier, facts_of
from tests.test_tracetail_cli import skewed_tokens

GIB = 1 << 30


def run(*args):
    return CliRunner().invoke(cli, [*map(str, args)], catch_exceptions=False)


def fit(*args):
    """device-fit with the fork runtime (this file's subject) unless the test names one."""
    runtime = [] if "--runtime" in args else ["--runtime", "fork"]
    return run("device-fit", *args, *runtime)


def fit_json(*args):
    result = fit(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def run_block(text):
    """What `sh` makes of an --emit env block: (the environment it sets, the llama-server argv).
    Comment lines are skipped; `unset NAME` drops a name; the last line is the command."""
    env, argv = {}, None
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        words = shlex.split(line)
        if words[0] == "unset":
            env.pop(words[1], None)
        elif words[0] == "export":
            name, _, value = words[1].partition("=")
            env[name] = value
        else:
            assert argv is None, "one command, last"
            argv = words
    return env, argv


def run_env_line(line):
    """The same for the default screen's `fork launch: env -u A B=1 ... llama-server ...` line."""
    words = shlex.split(line)
    assert words[:3] == ["fork", "launch:", "env"]
    words, env = words[3:], {}
    while words[0] == "-u":
        env.pop(words[1], None)
        words = words[2:]
    while "=" in words[0] and words[0] != "llama-server":
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    return env, words


def tensor_names(path):
    with open_model(path) as model:
        return [t.name for t in model.expert_tensors], [t.name for t in model.resident_tensors]


@pytest.fixture(scope="module")
def k3(preset_model):
    return preset_model("kimi-k3", 2)


# --- the launch pages ------------------------------------------------------------------------------

@pytest.mark.parametrize("arch", ["qwen3moe", "deepseek2", "gpt-oss", "mixtral"])
def test_every_routed_expert_is_paged_and_nothing_else_leaves_the_gpu(tiny_models, tmp_path, arch):
    """Real llama.cpp-converted layouts: under the emitted block every `blk.N.ffn_*_exps.weight` meets
    all of ggml_backend_sched_compute_splits' conditions at a decode batch of 1, and no resident tensor
    (attention, router, shared experts `_shexp`) leaves the GPU. gpt-oss's `_exps.bias` go to the CPU with
    their weights, as upstream's `-ot exps=CPU` puts them: the scheduler copies those small ADD_ID inputs
    whole (ggml-backend.cpp leaves ADD_ID out of the per-expert path)."""
    model = tiny_models[arch]
    text = fit(model, "--vram", "8G", "--plan", tmp_path / "p.json", "--emit", "env").stdout
    env, argv = run_block(text)
    experts, resident = tensor_names(model)
    weights = [name for name in experts if name.endswith(".weight")]
    assert weights and all(fork_rules.fork_pages(name, argv, env) for name in weights)
    assert not any(fork_rules.tensor_override(name, argv) for name in resident)
    assert fork_rules.offload_min_batch({}) == 32 and not fork_rules.mul_mat_id_offloads({}, 1)  # why the variable
    assert env["GGML_OP_OFFLOAD_MIN_BATCH"] == "1" and "--no-repack" in argv and argv[argv.index("-ngl") + 1] == "999"
    assert env["GGML_MOE_TRACE_FILE"] == str(tmp_path / "p.trace")
    assert fork_rules.device_cache_budget(env, (tmp_path / "p.json").read_text()) > 0  # the plan's VRAM budget


def test_the_three_json_and_text_forms_are_one_launch(k3, tmp_path):
    """--emit env, --emit env --json and the default screen's line give the same environment and argv."""
    args = (k3, "--vram", "32G", "--ctx", 32768, "--plan", tmp_path / "k3.plan.json")
    env, argv = run_block(fit(*args, "--emit", "env").stdout)
    doc = fit_json(*args, "--emit", "env")
    assert {k: v for k, v in doc["env"].items() if v is not None} == env and doc["command"] == argv
    assert doc["override_tensor"] == "\\.ffn_.*_exps\\.=CPU" and doc["notes"] == [launchmod.SWITCHES_NOTE]
    screen = fit_json(*args)
    assert run_env_line(fork_line(screen["launch"])) == (env, argv)
    assert screen["launch"]["env"] == doc["env"] and screen["launch"]["fork"]["command"] == argv
    experts, _ = tensor_names(k3)
    assert all(fork_rules.fork_pages(name, argv, env) for name in experts if name.endswith(".weight"))


def test_the_override_is_the_daemons_cold_layer_rule(k3):
    """cold_expert_override puts the same expert tensors on the CPU as the daemon's
    cold_expert_offload_ot for any hot set: all of them with none hot, none (no -ot at all) with all hot."""
    experts, resident = tensor_names(k3)
    blocks = 93
    for hot in [(), (0, 1, 2), tuple(range(1, 93, 2)), (92, 500), tuple(range(93))]:
        ours = launchmod.cold_expert_override(hot, blocks)
        daemon = fork_rules.cold_expert_offload_ot(hot, blocks)
        if daemon is None:
            assert ours == ""
            continue
        mine = {name for name in experts + resident if fork_rules.tensor_override(name, ["-ot", ours]) == "CPU"}
        theirs = {name for name in experts + resident if fork_rules.tensor_override(name, ["-ot", daemon]) == "CPU"}
        assert mine == theirs and mine <= set(experts)
    assert launchmod.cold_expert_override((), blocks) == launchmod.FORK_EXPERT_OVERRIDE


def test_a_dense_model_gets_no_paging_flags_and_no_cache(tiny_models):
    """Nothing to page: no -ot, no min batch, no trace, and no expert cache (it used to export
    GGML_MOE_VRAM_CACHE_GB=0.00)."""
    text = fit(tiny_models["dense"], "--vram", "8G", "--emit", "env").stdout
    env, argv = run_block(text)
    assert "-ot" not in argv and "--no-repack" not in argv
    assert not {"GGML_OP_OFFLOAD_MIN_BATCH", "GGML_MOE_TRACE_FILE", "GGML_MOE_VRAM_CACHE_GB"} & set(env)
    assert "#" not in text


# --- every path absolute ---------------------------------------------------------------------------

def test_relative_tiers_plan_capture_trace_and_container_are_exported_absolute(k3, tmp_path, monkeypatch):
    """A relative --tiers used to leave LLAMA_RESIDENT_OVERRIDE relative: the daemon refuses that
    (EngineInstallReceipt::read) and runs the server from another folder."""
    _tier(tmp_path / "tiers", "q4_0", 14 * GIB, facts_of(k3))
    (tmp_path / "container").mkdir()
    monkeypatch.chdir(tmp_path)
    text = fit(k3, "--vram", "24G", "--ctx", 16384, "--tiers", "tiers", "--plan", "p.json", "--capture", "cap.jsonl",
               "--trace", "run.trace", "--container", "container", "--emit", "env").stdout
    env, argv = run_block(text)
    assert env["LLAMA_RESIDENT_OVERRIDE"] == str(tmp_path / "tiers" / "k3.q4_0.resident.gguf")
    assert env["GGML_MOE_PLAN_FILE"] == str(tmp_path / "p.json")
    assert env["GGML_MOE_CAPTURE_FILE"] == str(tmp_path / "cap.jsonl")
    assert env["GGML_MOE_TRACE_FILE"] == str(tmp_path / "run.trace")
    assert env["GGML_MOE_CONTAINER"] == str(tmp_path / "container")
    assert fork_rules.daemon_launch_path_errors(env) == [] and os.path.isabs(argv[argv.index("-m") + 1])


def test_a_relative_model_path_is_made_absolute(tiny_models, tmp_path, monkeypatch):
    monkeypatch.chdir(os.path.dirname(tiny_models["qwen3moe"]))
    env, argv = run_block(fit(os.path.basename(tiny_models["qwen3moe"]), "--vram", "8G", "--emit", "env").stdout)
    assert argv[argv.index("-m") + 1] == str(tiny_models["qwen3moe"])
    # without --plan the trace goes to MODEL-STEM.trace in the current folder
    assert env["GGML_MOE_TRACE_FILE"] == os.path.join(os.path.dirname(tiny_models["qwen3moe"]), "qwen3moe.trace")


def test_the_daemons_path_rule_itself():
    assert fork_rules.daemon_launch_path_errors({"GGML_MOE_TRACE_FILE": "t.trace", "GGML_MOE_PLAN_FILE": None}) == [
        "receipted engine requires absolute GGML_MOE_TRACE_FILE"]


# --- the fork's speed switches ---------------------------------------------------------------------

@pytest.mark.parametrize("container", [False, True])
def test_the_forks_speed_switches_are_named_and_left_at_their_defaults(k3, tmp_path, container):
    """GGML_MOE_GATHER, GGML_MOE_DIRECT_READ and GGML_MOE_PREFETCH: one `#` line in the block (and the
    same note in JSON and the ledger) names all three, their default (off) and that the speed figure
    assumes it, citing MoeServingConfig::from_env; none is exported, since any value turns one on. With a
    container the cache fills from the container whatever GGML_MOE_DIRECT_READ says, so a direct read
    is never the plan's; without one, from the mmap on every platform (the misses the speed model reads
    through the page cache). The OS prefetch and the gather stay off on Windows and elsewhere."""
    args = [k3, "--vram", "32G", "--ctx", 32768, "--plan", tmp_path / "k3.plan.json"]
    if container:
        args += ["--container", tmp_path]
    text = fit(*args, "--emit", "env").stdout
    env, _ = run_block(text)
    notes = [line[2:] for line in text.splitlines() if line.startswith("# fork switches")]
    assert notes == [launchmod.SWITCHES_NOTE]
    note = notes[0]
    assert launchmod.FORK_SWITCHES == fork_rules.FORK_SWITCHES
    assert all(name in note for name in fork_rules.FORK_SWITCHES)
    assert "off by default" in note and "not exported" in note and "speed figure assumes all three unset" in note
    assert "MoeServingConfig::from_env" in note and "moe_pick_base_fetcher" in note
    assert "ggml_backend_sched_compute_splits" in note
    doc = fit_json(*args, "--emit", "env")
    assert launchmod.SWITCHES_NOTE in doc["notes"] and not set(fork_rules.FORK_SWITCHES) & set(doc["env"])
    assert launchmod.SWITCHES_NOTE in fit_json(*args)["notes"]
    for windows in (False, True):
        assert not any(fork_rules.fork_switch_on(env, name) for name in fork_rules.FORK_SWITCHES)
        assert fork_rules.fork_base_fetcher(env, windows) == ("container-dir" if container else "mmap-prefetch")
        assert not fork_rules.fork_os_prefetch(env, windows)
        assert not fork_rules.fork_gathers(env, cache_on=True, backend_has_gather_entry=True)


def test_the_switch_rules_themselves():
    """A presence flag: "0" is on. DIRECT_READ picks the unbuffered fetcher on Windows only and never
    over a container; PREFETCH acts on Windows only; GATHER needs the cache and the backend's proc."""
    on = {"GGML_MOE_DIRECT_READ": "0", "GGML_MOE_PREFETCH": "", "GGML_MOE_GATHER": "0"}
    assert all(fork_rules.fork_switch_on(on, name) for name in fork_rules.FORK_SWITCHES)
    assert fork_rules.fork_base_fetcher(on, windows=True) == "direct-read-unbuffered"
    assert fork_rules.fork_base_fetcher(on, windows=False) == "mmap-prefetch"
    assert fork_rules.fork_base_fetcher({**on, "GGML_MOE_CONTAINER": "/c"}, windows=True) == "container-dir"
    assert fork_rules.fork_os_prefetch(on, windows=True) and not fork_rules.fork_os_prefetch(on, windows=False)
    assert fork_rules.fork_gathers(on, True, True)
    assert not fork_rules.fork_gathers(on, False, True) and not fork_rules.fork_gathers(on, True, False)


# --- no silent off ---------------------------------------------------------------------------------

def test_a_budget_that_floors_to_zero_is_left_unset_with_a_note(tiny_models, tmp_path):
    """3.6 MiB of VRAM for experts is "0.00" GiB: exported, the fork would read a cache of 0 bytes, off.
    device-fit leaves the variable unset and says why (text, JSON and the ledger's notes); exit 0."""
    model = tiny_models["qwen3moe"]
    args = (model, "--vram", "1G", "--reserve", "1015M")
    doc = fit_json(*args)
    assert 0 < doc["expert_budget_bytes"] < GIB // 100
    assert fork_rules.fork_cache_bytes("0.00") == 0
    result = fit(*args, "--emit", "env")
    assert result.exit_code == 0
    env, argv = run_block(result.stdout)
    assert "GGML_MOE_VRAM_CACHE_GB" not in env and "unset GGML_MOE_VRAM_CACHE_GB" in result.stdout
    note = [line for line in result.stdout.splitlines() if line.startswith("# GGML_MOE_VRAM_CACHE_GB left unset")]
    assert len(note) == 1 and "floors to 0.00 GiB" in note[0]
    emitted = fit_json(*args, "--emit", "env")
    assert emitted["env"]["GGML_MOE_VRAM_CACHE_GB"] is None
    assert emitted["notes"] == [note[0][2:], launchmod.SWITCHES_NOTE]
    assert note[0][2:] in doc["notes"]


@pytest.mark.parametrize("reserve", ["1000M", "1005M", "1008M", "1009M", "1010M", "1012M"])
def test_an_exported_cache_size_is_never_zero_to_the_fork(tiny_models, reserve):
    env, _ = run_block(fit(tiny_models["qwen3moe"], "--vram", "1G", "--reserve", reserve, "--emit", "env").stdout)
    if "GGML_MOE_VRAM_CACHE_GB" in env:
        assert fork_rules.fork_cache_bytes(env["GGML_MOE_VRAM_CACHE_GB"]) > 0


def test_a_host_budget_that_floors_to_zero_is_left_unset_too():
    notes = []
    assert launchmod._cache_variable("GGML_MOE_HOST_CACHE_GB", 5 << 20, notes) is None
    assert notes and notes[0].startswith("GGML_MOE_HOST_CACHE_GB left unset: the 5.0 MiB")
    assert launchmod._cache_variable("GGML_MOE_HOST_CACHE_GB", GIB // 100 + 1, []) == "0.01"


def _trace(tmp_path):
    trace = tmp_path / "t.trace"
    trace.write_bytes(trace_format.encode_records(*tokens_to_records(skewed_tokens(20), ["decode"] * 20)))
    return trace


def test_trace_tail_warns_when_its_plan_leaves_the_vram_cache_off(k3, tmp_path):
    """trace-tail creating a plan writes no device_budget_bytes: under it the fork's VRAM cache stays at
    0 bytes (enable_device + reload_plan_locked). It says so on stderr; after device-fit --plan it does not."""
    plan = tmp_path / "plan.json"
    trace_args = ("trace-tail", _trace(tmp_path), "--synth-layers", "4", "--experts", "16", "--expert-bytes", "1000",
                  "--plan", plan, "--json")
    result = run(*trace_args)
    assert result.exit_code == 0, result.output
    assert "plan.json has no device_budget_bytes: the fork's VRAM expert cache will be off" in result.stderr
    doc = json.loads(plan.read_text())
    assert "device_budget_bytes" not in doc
    assert fork_rules.device_cache_budget({"GGML_MOE_VRAM_CACHE_GB": "8.00", "GGML_MOE_PLAN_FILE": str(plan)},
                                          plan.read_text()) == 0
    fit(k3, "--vram", "32G", "--ctx", 32768, "--plan", plan, "--json")
    result = run(*trace_args)
    assert result.exit_code == 0 and "device_budget_bytes" not in result.stderr
    assert fork_rules.device_cache_budget({"GGML_MOE_VRAM_CACHE_GB": "8.00", "GGML_MOE_PLAN_FILE": str(plan)},
                                          plan.read_text()) == json.loads(plan.read_text())["device_budget_bytes"] > 0


@pytest.mark.parametrize("value, words", [(0, "has device_budget_bytes 0"), (-5, "has device_budget_bytes -5"), ("8G", 'not a whole number ("8G")'),
                                          (True, "not a whole number (true)")])
def test_trace_tail_warns_on_a_zero_or_unusable_device_budget(tmp_path, value, words):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "budget_bytes": 0, "device_budget_bytes": value, "window_k": 8,
                                "pin_list": []}))
    result = run("trace-tail", _trace(tmp_path), "--synth-layers", "4", "--experts", "16", "--expert-bytes", "1000",
                 "--plan", plan, "--json")
    assert result.exit_code == 0 and words in result.stderr and "VRAM expert cache will be off" in result.stderr


# --- the fork's own reserve ------------------------------------------------------------------------

@pytest.mark.parametrize("vram, expected", [("8G", 2 * GIB), ("20G", 2 * GIB), ("32G", 32 * GIB // 10),
                                             ("48G", 48 * GIB // 10)])
def test_the_forks_default_reserve_is_shown_beside_device_fits(tiny_models, vram, expected):
    doc = fit_json(tiny_models["qwen3moe"], "--vram", vram)
    assert doc["fork_fit_device_reserve_bytes"] == expected == fork_rules.daemon_default_reserve(doc["vram_bytes"])
    note = [n for n in doc["notes"] if n.startswith("reserve: device-fit holds back")]
    assert len(note) == 1 and "max(2 GiB, 10% of VRAM)" in note[0] and "--margin 1.00 GiB" in note[0]
    fixed = fit_json(tiny_models["qwen3moe"], "--vram", vram, "--reserve", "3G")
    assert any(n.startswith("reserve: device-fit holds back 3.00 GiB (--reserve)") for n in fixed["notes"])


# --- bad input ---------------------------------------------------------------------------------------

def test_trace_into_a_folder_is_refused(tiny_models, tmp_path):
    result = fit(tiny_models["qwen3moe"], "--vram", "8G", "--trace", tmp_path, "--emit", "env")
    assert result.exit_code == 2 and "--trace" in result.stderr and "folder" in result.stderr
    assert "Traceback" not in result.output


def test_trace_in_a_missing_folder_is_refused(tiny_models, tmp_path):
    result = fit(tiny_models["qwen3moe"], "--vram", "8G", "--trace", tmp_path / "no" / "run.trace", "--emit", "env")
    assert result.exit_code == 2 and "does not exist" in result.stderr and "Traceback" not in result.output


@pytest.mark.parametrize("other", ["--plan", "--capture"])
def test_trace_on_the_plan_or_capture_file_is_refused(tiny_models, tmp_path, other):
    same = tmp_path / "same.json"
    result = fit(tiny_models["qwen3moe"], "--vram", "8G", other, same, "--trace", same, "--emit", "env")
    assert result.exit_code == 2 and f"the same file as {other}" in result.stderr
    assert not same.exists()


def test_trace_beside_a_plan_named_dot_trace_never_is_the_plan(tmp_path):
    assert launchmod.default_trace_path("m.gguf", str(tmp_path / "x.trace")) == str(tmp_path / "x.trace.trace")
    assert launchmod.default_trace_path("m.gguf", str(tmp_path / "k3.plan.json")) == str(tmp_path / "k3.plan.trace")
