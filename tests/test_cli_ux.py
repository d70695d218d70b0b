"""The command line as a llama.cpp user meets it (issue 16): sizes, help, exit codes."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from moetools.cli import cli
from moetools.errors import UsageError
from moetools.sizes import describe_size, parse_capacity, parse_rate
from tests.buildenv_trees import ALL_PARTS, linux_basics, linux_system, linux_toolkit

ROOT = Path(__file__).resolve().parent.parent


# --- sizes ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("text,expected", [("32G", 32 * 2**30), ("32GB", 32 * 10**9), ("1048576", 2**20),
                                           ("0.5G", 2**29), (24 * 2**30, 24 * 2**30)])
def test_capacity_accepts_units_and_large_bare_numbers(text, expected):
    assert parse_capacity(text, "--vram") == expected


@pytest.mark.parametrize("text", ["32", "24", "1000", "1048575"])
def test_capacity_refuses_a_bare_number_that_is_surely_missing_its_unit(text):
    with pytest.raises(UsageError, match=rf"--vram {text} means {text} bytes: did you mean {text}G\?"):
        parse_capacity(text, "--vram")


@pytest.mark.parametrize("text,expected", [("25GB/s", 25 * 10**9), ("25G", 25 * 2**30), ("900GB/s", 9 * 10**11),
                                           ("25000000000", 25 * 10**9), ("64 GiB/s", 64 * 2**30)])
def test_rate_parses(text, expected):
    assert parse_rate(text, "--h2d") == expected


def test_rate_refuses_zero_and_a_missing_unit():
    with pytest.raises(UsageError, match=r"--h2d must be more than 0 bytes/s, not '0' \(a bandwidth of 0 moves nothing\)"):
        parse_rate("0", "--h2d")
    with pytest.raises(UsageError, match=r"--h2d 25 means 25 bytes/s: did you mean 25GB/s\?"):
        parse_rate("25", "--h2d")


def test_a_decimal_unit_is_shown_with_its_binary_value():
    assert describe_size("32GB", 32 * 10**9) == "32GB (29.80 GiB)"
    assert describe_size("32G", 32 * 2**30) == "32.00 GiB"


# --- help ----------------------------------------------------------------------------------------

def test_root_help_gives_every_summary_whole_at_80_columns():
    result = CliRunner().invoke(cli, ["--help"], terminal_width=80, catch_exceptions=False)
    assert result.exit_code == 0
    commands = result.output.split("Commands:")[1]
    assert "..." not in commands
    assert max(len(line) for line in result.output.splitlines()) <= 80
    # the summary of inspect ends with its own words, not a cut
    assert "bytes by" in commands and "bytes by..." not in commands


def test_container_encode_help_names_only_arguments_that_exist():
    result = CliRunner().invoke(cli, ["container-encode", "--help"], terminal_width=80, catch_exceptions=False)
    assert "FOLDER" not in result.output
    assert "-o" in result.output


# --- exit codes ----------------------------------------------------------------------------------

def _broken_toolkit(tmp_path):
    system, runner = linux_system(tmp_path)
    linux_basics(system, runner, smi="NVIDIA GeForce RTX 3090, 8.6, 550.54.15\n")
    linux_toolkit(system, "/tk/cuda-12.6", "12.6.0", parts=set(ALL_PARTS) - {"cublas", "cublasLt", "stub"})
    return system


@pytest.mark.skipif(shutil.which("sh") is None, reason="no sh on this machine")
def test_eval_of_a_broken_toolkit_script_fails_with_the_reason(tmp_path):
    system = _broken_toolkit(tmp_path)
    result = CliRunner().invoke(cli, ["build-env", "--no-default-search", "--search-path", "/tk"], obj=system,
                                catch_exceptions=False)
    assert result.exit_code == 1
    done = subprocess.run(["sh", "-c", 'eval "$1" && echo REACHED', "sh", result.stdout],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 1
    assert "REACHED" not in done.stdout
    assert "moetools build-env: the build would fail: CUDA toolkit: no complete CUDA toolkit" in done.stderr


@pytest.mark.parametrize("shell,last", [("cmd", "exit /b 1"), ("ps1", "throw 'moetools build-env: the build"),
                                        ("cmake", 'message(FATAL_ERROR "moetools build-env: the build')])
def test_every_script_of_a_broken_toolkit_fails(tmp_path, shell, last):
    system = _broken_toolkit(tmp_path)
    result = CliRunner().invoke(cli, ["build-env", "--no-default-search", "--search-path", "/tk", "--shell", shell],
                                obj=system, catch_exceptions=False)
    assert result.stdout.rstrip().splitlines()[-1].startswith(last)


def test_a_healthy_toolkit_script_ends_without_a_failure(tmp_path):
    system, runner = linux_system(tmp_path)
    linux_toolkit(system, "/usr/local/cuda-12.4", "12.4.1")
    linux_basics(system, runner, smi="NVIDIA GeForce RTX 3090, 8.6, 550.54.15\n")
    result = CliRunner().invoke(cli, ["build-env"], obj=system, catch_exceptions=False)
    assert result.exit_code == 0
    assert "false" not in result.stdout.splitlines()


def test_container_read_of_a_damaged_record_answers_no(tmp_path, tiny_models):
    """A record whose bytes differ from the xxh3 sidecar was read, and the answer is "not intact": exit 1."""
    import json

    folder = tmp_path / "c"
    result = CliRunner().invoke(cli, ["container-encode", str(tiny_models["qwen3moe"]), "-o", str(folder), "--json"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    bank = sorted(folder.glob("experts-L*.bin"))[0]
    layer = int(bank.stem.split("-L")[1])
    with open(bank, "r+b") as handle:  # one byte inside expert 0's gate slice, past the 32-byte header
        handle.seek(40)
        byte = handle.read(1)
        handle.seek(40)
        handle.write(bytes([byte[0] ^ 0xFF]))
    args = ["container-read", str(folder), "--layer", str(layer), "--expert", "0", "--json"]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 1, result.output
    assert json.loads(result.output)["checksum_ok"] is False
    intact = CliRunner().invoke(cli, args[:-2] + ["1", "--json"], catch_exceptions=False)
    assert intact.exit_code == 0 and json.loads(intact.output)["checksum_ok"] is True


# --- a preset with a shared trace's shape --------------------------------------------------------

def _preamble_expert_bytes(trace_path):
    import re

    found = {}
    with open(trace_path) as handle:
        for line in handle:
            if not line.startswith("#"):
                break
            match = re.match(r"# layer=(\d+) expert_bytes=(\d+)", line)
            if match:
                found[int(match[1])] = int(match[2])
    return found


def test_qwen3_30b_preset_has_the_real_trace_models_expert_bytes(tmp_path):
    from tests import factory
    from moetools.gguf import open_model

    trace = factory.SHARED_TRACES / "qwen.route.csv"
    if not trace.exists():
        pytest.skip(f"real trace absent: {trace}")
    model = open_model(str(factory.write_preset(tmp_path, "qwen3-30b-a3b")))
    assert (model.architecture, model.block_count, model.expert_count) == ("qwen3moe", 48, 128)
    assert model.expert_bytes_by_layer == _preamble_expert_bytes(trace)


def test_real_qwen_trace_runs_on_its_models_preset(tmp_path):
    """`trace-tail --model` on a model of the trace's shape (128 experts), then device-fit on the curve."""
    import json

    from tests import factory

    trace = factory.SHARED_TRACES / "qwen.route.csv"
    if not trace.exists():
        pytest.skip(f"real trace absent: {trace}")
    model = factory.write_preset(tmp_path, "qwen3-30b-a3b")
    result = CliRunner().invoke(cli, ["trace-tail", str(trace), "--model", str(model), "--curve", "--json"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    curve = json.loads(result.output)
    assert curve["slots"][-1] == 3059  # the trace's distinct (layer, expert) pairs
    (tmp_path / "curve.json").write_text(result.output)
    result = CliRunner().invoke(cli, ["device-fit", str(model), "--vram", "16G", "--runtime", "fork", "--coverage",
                                      str(tmp_path / "curve.json"), "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["verdict"] == "native"


# --- one-line errors for every bad path ----------------------------------------------------------

@pytest.mark.parametrize("command", [["inspect"], ["device-fit", "--vram", "24G"], ["quantize", "--type", "q8_0"],
                                     ["container-encode", "-o", "OUT"]])
def test_a_folder_given_as_model_is_one_line(tmp_path, command):
    args = [command[0], str(tmp_path)] + [str(tmp_path / "out") if a == "OUT" else a for a in command[1:]]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [f"error: {tmp_path}: is a folder, not a file (MODEL)"]


def test_a_file_given_as_folder_is_one_line(tmp_path):
    (tmp_path / "f").write_text("x")
    result = CliRunner().invoke(cli, ["container-verify", str(tmp_path / "f")])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [f"error: {tmp_path / 'f'}: is a file, not a folder (FOLDER)"]


@pytest.mark.parametrize("command", [["inspect"], ["device-fit", "--vram", "24G"]])
def test_stdin_as_model_is_refused_in_one_line(command):
    result = CliRunner().invoke(cli, [command[0], "-"] + command[1:], input=b"GGUF")
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "error: -: a model is read from a file, not from stdin: its shards are found beside it and its tensors "
        "by offset (give the .gguf path)"]


# --- usage errors: one line, exit 2 (issue 29) --------------------------------------------------

@pytest.mark.parametrize("args,line", [
    (["device-fit"], "error: missing argument MODEL (see moetools device-fit --help)"),
    (["inspect"], "error: missing argument MODEL (see moetools inspect --help)"),
    (["quantize"], "error: missing argument MODEL (see moetools quantize --help)"),
    (["container-verify"], "error: missing argument FOLDER (see moetools container-verify --help)"),
    (["device-fit", "m.gguf", "--foo"], "error: no such option --foo (did you mean --floor? see moetools device-fit --help)"),
    (["device-fit", "m.gguf", "--flor", "1"], "error: no such option --flor (did you mean --floor, --port? see moetools device-fit --help)"),
    (["inspect", "m.gguf", "--foo"], "error: no such option --foo (see moetools inspect --help)"),
    (["device-fit", "m.gguf", "--runtime", "vllm"],
     "error: invalid value for '--runtime': 'vllm' is not one of 'auto', 'llama', 'fork' (see moetools device-fit --help)"),
    (["build-env", "--shell", "fish"], "error: invalid value for '--shell': 'fish' is not one of 'sh', 'cmd', 'ps1', "
                                       "'json', 'cmake' (see moetools build-env --help)"),
    (["device-fit", "m.gguf", "--vram"], "error: option '--vram' requires an argument (see moetools device-fit --help)"),
    (["device-fit", "a.gguf", "b.gguf"], "error: got unexpected extra argument (b.gguf); a llama.cpp command line goes after --check -- (see moetools device-fit --help)"),
    (["bogus"], "error: no such command 'bogus' (see moetools --help)"),
    (["--foo"], "error: no such option --foo (see moetools --help)"),
    (["device-fit", ""], "error: MODEL: the path is empty"),
    (["container-verify", ""], "error: FOLDER: the path is empty"),
])
def test_a_usage_error_is_one_line_with_exit_2(args, line):
    """In a real process, as a user meets it: no `Usage:` block, no blank line, no `Error:` line."""
    process = subprocess.run([sys.executable, "-m", "moetools", *args], capture_output=True, text=True, cwd=ROOT)
    assert process.returncode == 2 and process.stdout == ""
    assert process.stderr.splitlines() == [line]


@pytest.mark.parametrize("name", ["device-fit", "trace-tail --plan", "trace-tail -o", "container-read -o",
                                  "container-encode -o", "quantize -o"])
def test_an_output_in_a_missing_folder_is_refused_and_no_folder_is_made(name, tmp_path, tiny_models):
    model = str(tiny_models["qwen3moe"])
    missing = tmp_path / "no" / "such"
    args = {
        "device-fit": ["device-fit", model, "--vram", "4G", "--plan", missing / "p.json"],
        "trace-tail --plan": ["trace-tail", tmp_path / "t.trace", "--synth-layers", "2", "--plan", missing / "p.json"],
        "trace-tail -o": ["trace-tail", tmp_path / "t.trace", "--synth-layers", "2", "-o", missing / "o.json"],
        "container-read -o": ["container-read", tmp_path, "--layer", "0", "--expert", "0", "--matrix", "up", "-o", missing / "x"],
        "container-encode -o": ["container-encode", model, "-o", missing / "c"],
        "quantize -o": ["quantize", model, "--resident-only", "--type", "q8_0", "-o", missing / "q"],
    }[name]
    option = str(args[-2])
    result = CliRunner().invoke(cli, [str(arg) for arg in args])
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [f"error: {missing}: no such folder ({option} {args[-1]})"]
    assert not (tmp_path / "no").exists()



# --- every command's tables at 80 columns --------------------------------------------------------

def _table_text(monkeypatch, args, width):
    from moetools import output

    monkeypatch.setattr(output, "want_json", lambda json_flag: False)
    result = CliRunner().invoke(cli, [str(a) for a in args], env={"COLUMNS": str(width)}, catch_exceptions=False)
    return result


def unbroken(text):
    """`text` with every shell line continuation (` \\` + newline + indent) joined back."""
    import re

    return re.sub(r" \\\n\s*", " ", text)


def is_one_long_argument(line):
    """A line that is one shell argument (and its ` \\`): the only line allowed past the terminal's width."""
    from moetools.output import shell_words

    return len(shell_words(line.strip().removesuffix(" \\"))) == 1


def _content(text):
    """The characters a table shows, without its rules, padding and line breaks."""
    from collections import Counter

    return Counter(ch for ch in text if not ch.isspace() and not 0x2500 <= ord(ch) <= 0x257F)


def _words(text):
    """Counter of the words (at most 16 characters, between spaces and rules) a rendering shows."""
    import re
    from collections import Counter

    return Counter(word for word in re.split(r"[\s\u2500-\u257F]+", text) if 0 < len(word) <= 16)


def _table_commands(tmp_path, tiny_models):
    import json

    from tests import factory

    model = tiny_models["qwen3moe"]
    container = tmp_path / "c"
    assert CliRunner().invoke(cli, ["container-encode", str(model), "-o", str(container), "--json"]).exit_code == 0
    trace = tmp_path / "run.csv"
    lines = ["# route_trace v1", "# model=m arch=qwen3moe n_layer=4 n_expert=16 n_expert_used=4",
             "turn,phase,step,layer,slot,expert,weight,residency,expert_bytes"]
    for step in range(40):
        for layer in range(4):
            for slot in range(4):
                lines.append(f"0,1,{step},{layer},{slot},{(step * 3 + layer * 5 + slot * 7) % 16},0.25,0,1000")
    trace.write_text("\n".join(lines) + "\n")
    hot, cold = tmp_path / "hot", tmp_path / "cold"
    for folder in (hot, cold):
        factory.write_tiny(folder / "a-long-folder-name-for-the-model", "gpt-oss", name="tiny-gptoss-Q8_0")
    k3 = factory.write_preset(tmp_path / "k3", "kimi-k2")
    return {
        "inspect": ["inspect", k3],
        "device-fit": ["device-fit", k3, "--vram", "24G", "--ram", "512G"],
        "device-fit-llama": ["device-fit", k3, "--vram", "24G,24G", "--ram", "512G", "--runtime", "llama"],
        "quantize": ["quantize", model, "--resident-only", "--type", "q4_0,q8_0", "--dry-run", "-o", tmp_path / "q"],
        "container-verify": ["container-verify", container, "--model", model],
        "container-read": ["container-read", container, "--layer", 1, "--expert", 3],
        "cold-twin": ["cold-twin", hot, cold],
        "trace-tail": ["trace-tail", trace, "--model", model, "--curve"],
        "build-env": ["build-env", "--check", "--no-default-search", "--search-path", tmp_path],
    }


@pytest.fixture(scope="module")
def table_commands(tmp_path_factory, tiny_models):
    return _table_commands(tmp_path_factory.mktemp("tables"), tiny_models)


@pytest.mark.parametrize("name", ["inspect", "device-fit", "device-fit-llama", "quantize", "container-verify",
                                  "container-read", "cold-twin", "trace-tail", "build-env"])
def test_every_table_fits_80_columns_with_the_same_content_as_at_200(name, table_commands, monkeypatch):
    narrow = _table_text(monkeypatch, table_commands[name], 80)
    wide = _table_text(monkeypatch, table_commands[name], 200)
    assert narrow.exit_code == wide.exit_code and narrow.exit_code in (0, 1), narrow.output
    # every line fits, notes and captions wrapped too; only a launch command's argument longer than the
    # terminal (a quoted -ot regex) stands whole on a line of its own
    too_long = [line for line in narrow.stdout.splitlines() if len(line) > 80 and not is_one_long_argument(line)]
    assert not too_long, "\n" + "\n".join(too_long)
    import re

    # a launch command broken between arguments (` \` + newline) at either width reads the same joined
    narrow_text, wide_text = (unbroken(result.stdout) for result in (narrow, wide))
    # nothing cut to `resid…`; a name folded from the left on purpose (`…/tiny-gptoss.gguf`) keeps its end
    assert not re.search(r"\S\u2026", narrow_text), narrow_text
    if "\u2026" not in narrow_text + wide_text:
        assert _content(narrow_text) == _content(wide_text), narrow_text
        # and no word broken across lines (`nativ` / `e`, `25.81` / `GiB` is fine, `25.8` / `1` is not):
        # cells wrap between words; only a word longer than a text column's 16-character floor may fold
        broken = _words(wide_text) - _words(narrow_text)
        assert not broken, f"words broken at 80 columns: {sorted(broken)}\n{narrow_text}"


# --- sizes in messages ---------------------------------------------------------------------------

RAW_BYTES = r"\d{5,} bytes"  # `4781777049 bytes short`: a size a person must count digits of


def test_device_fit_messages_give_sizes_not_raw_byte_counts(tmp_path):
    import json
    import re

    from tests import factory

    k2 = factory.write_preset(tmp_path, "kimi-k2")
    unfittable = CliRunner().invoke(cli, ["device-fit", str(k2), "--vram", "8G", "--runtime", "fork", "--json"])
    assert unfittable.exit_code == 1, unfittable.output
    notes = " ".join(json.loads(unfittable.stdout)["notes"])
    assert "short for the smallest division" in notes and not re.search(RAW_BYTES, notes), notes
    below = CliRunner().invoke(cli, ["device-fit", str(k2), "--vram", "1G", "--reserve", "2G", "--runtime", "fork", "--json"])
    assert below.exit_code == 2
    assert "--reserve 2.00 GiB leaves nothing of VRAM 1.00 GiB" in below.output and not re.search(RAW_BYTES, below.output), below.output


def test_min_ctx_note_does_not_claim_the_user_asked(tiny_models):
    import json

    result = CliRunner().invoke(cli, ["device-fit", str(tiny_models["qwen3moe"]), "--vram", "4G", "--runtime", "fork",
                                      "--json"], catch_exceptions=False)
    notes = json.loads(result.stdout)["notes"]
    assert "context 2048 (the model's training context) is below --min-ctx 4096" in notes, notes
    assert not any("as asked" in note for note in notes)


@pytest.mark.parametrize("runtime", ["fork", "llama"])
def test_emit_llama_with_json_gives_the_command_as_a_list(tiny_models, runtime):
    import json
    import shlex

    model = str(tiny_models["qwen3moe"])
    base = ["device-fit", model, "--vram", "4G", "--ram", "16G", "--runtime", runtime, "--emit", "llama"]
    text = CliRunner().invoke(cli, base, catch_exceptions=False)
    doc = CliRunner().invoke(cli, base + ["--json"], catch_exceptions=False)
    assert doc.exit_code == 0, doc.output
    command = json.loads(doc.stdout)["command"]
    assert command[:3] == ["llama-server", "-m", model]
    shell_line = [line for line in text.stdout.splitlines() if line.startswith("llama-server ")][0]
    assert shlex.split(shell_line) == command


def test_emit_env_with_json_gives_the_variables_and_the_command(tiny_models):
    import json

    model = str(tiny_models["qwen3moe"])
    doc = CliRunner().invoke(cli, ["device-fit", model, "--vram", "4G", "--emit", "env", "--json"],
                             catch_exceptions=False)
    env_doc = json.loads(doc.stdout)
    assert "GGML_MOE_VRAM_CACHE_GB" in env_doc["env"] and env_doc["command"][:3] == ["llama-server", "-m", model]


# --- what a file is ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tier_file(tmp_path_factory, tiny_models):
    import json

    out = tmp_path_factory.mktemp("tier")
    result = CliRunner().invoke(cli, ["quantize", str(tiny_models["qwen3moe"]), "--resident-only", "--type", "q8_0",
                                      "--pure", "-o", str(out), "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["tiers"][0]["gguf"]


def test_inspect_says_a_tier_file_is_a_tier_of_its_model(tier_file, monkeypatch):
    import json

    doc = json.loads(CliRunner().invoke(cli, ["inspect", tier_file, "--json"], catch_exceptions=False).stdout)
    assert doc["resident_tier"]["source_model"] == "qwen3moe.gguf" and doc["resident_tier"]["tier"]
    table = _table_text(monkeypatch, ["inspect", tier_file], 200).stdout
    assert "resident-only tier" in table and "of qwen3moe.gguf" in table and "dense (no routed experts)" not in table


def test_inspect_of_a_model_has_no_tier(tiny_models):
    import json

    doc = json.loads(CliRunner().invoke(cli, ["inspect", str(tiny_models["qwen3moe"]), "--json"]).stdout)
    assert doc["resident_tier"] is None


def test_device_fit_refuses_to_plan_a_tier_file_and_names_its_model(tier_file):
    result = CliRunner().invoke(cli, ["device-fit", tier_file, "--vram", "4G"])
    assert result.exit_code == 2
    assert "a resident-only tier" in result.output and "plan qwen3moe.gguf" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_sliding_window_row_has_no_raw_none(tmp_path, monkeypatch):
    from tests import factory

    model = factory.write_tiny(tmp_path, "gpt-oss")
    table = _table_text(monkeypatch, ["inspect", model], 200).stdout
    assert "None" not in table


# --- signals -------------------------------------------------------------------------------------

@pytest.mark.skipif(not hasattr(__import__("signal"), "SIGTERM") or __import__("os").name == "nt",
                    reason="POSIX signals to a child process")
@pytest.mark.parametrize("signame,code,word", [("SIGINT", 130, "interrupted"), ("SIGTERM", 143, "terminated")])
def test_follow_stops_on_a_signal_with_its_summary_and_a_valid_plan(tmp_path, signame, code, word):
    """A real `trace-tail --follow --plan` process, stopped mid-run: it prints its summary, leaves the plan
    file whole (read back as JSON with its pins) and exits 128 + the signal's number."""
    import json
    import os
    import signal
    import sys
    import time

    import numpy as np

    from moetools.formats import trace as trace_format
    from moetools.formats.plan import read_plan
    from moetools.tracetail.importers import tokens_to_records
    from moetools.tracetail.reader import make_ids

    rng = np.random.default_rng(7)
    tokens = [np.unique(np.concatenate([make_ids([layer] * 3, rng.choice(16, 3, replace=False)) for layer in range(4)]))
              for _ in range(30)]
    path = tmp_path / "live.trace"
    path.write_bytes(trace_format.encode_records(*tokens_to_records(tokens, ["decode"] * len(tokens))))
    plan = tmp_path / "plan.json"
    process = subprocess.Popen([sys.executable, "-m", "moetools", "trace-tail", str(path), "--follow", "--synth-layers",
                                "4", "--experts", "16", "--budget-slots", "12", "--expert-bytes", "1000", "--plan",
                                str(plan), "--poll", "0.05", "--max-idle", "120"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = process.stdout.readline()  # the follower is running and has written a token
    assert json.loads(first)["decode_token"] == 0
    deadline = time.monotonic() + 60
    while not plan.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(getattr(signal, signame))
    rest, stderr = process.communicate(timeout=60)
    assert process.returncode == code, stderr
    lines = stderr.strip().splitlines()
    assert lines[-1] == word and lines[-2].endswith("decode tokens"), stderr
    assert int(lines[-2].split()[0]) >= 1
    written = read_plan(str(plan))
    assert written.budget_bytes == 12000 and written.pin_list
    assert not [name for name in os.listdir(tmp_path) if name.endswith(".tmp")]


def test_coverage_policy_without_a_curve_is_refused(tiny_models):
    result = CliRunner().invoke(cli, ["device-fit", str(tiny_models["qwen3moe"]), "--vram", "4G",
                                      "--coverage-policy", "foo"])
    assert result.exit_code == 2
    assert "--coverage-policy foo needs --coverage FILE" in result.output


def test_help_names_the_defaults_users_ask_about():
    trace_help = CliRunner().invoke(cli, ["trace-tail", "--help"], terminal_width=200).output
    assert "Default: a quarter of the model's slots" in trace_help
    fit_help = CliRunner().invoke(cli, ["device-fit", "--help"], terminal_width=200).output
    assert "belady is a ceiling" in fit_help and "decay_bandit" in fit_help


# --- decimal VRAM, footnoted divisions -----------------------------------------------------------

@pytest.mark.parametrize("runtime", ["fork", "llama"])
def test_a_decimal_vram_is_shown_with_its_gib_value(tiny_models, runtime):
    import json

    args = ["device-fit", str(tiny_models["qwen3moe"]), "--vram", "8GB", "--ram", "64G", "--runtime", runtime, "--json"]
    doc = json.loads(CliRunner().invoke(cli, args).stdout)
    assert "--vram 8GB (7.45 GiB): 8GB is decimal (10^9 bytes per GB); 8G would mean 8.00 GiB" in doc["notes"]
    if runtime == "fork":
        from moetools.devicefit.render import tables

        assert doc["vram_asked"] == "8GB"
        assert tables(doc)[0].rows[0] == ["VRAM", "7.45 GiB", "--vram 8GB: decimal units"]


def test_a_binary_vram_gets_no_note(tiny_models):
    import json

    doc = json.loads(CliRunner().invoke(cli, ["device-fit", str(tiny_models["qwen3moe"]), "--vram", "8G", "--json"]).stdout)
    assert not any("decimal" in note for note in doc["notes"]) and "vram_asked" not in doc


def test_division_notes_are_letters_spelled_out_in_the_caption():
    from moetools.devicefit.render import footnoted

    rows, caption = footnoted([["a", "x"], ["b", ""], ["c", "x"], ["d", "y"]])
    assert rows == [["a", "a"], ["b", ""], ["c", "a"], ["d", "b"]]
    assert caption == "a: x; b: y"
