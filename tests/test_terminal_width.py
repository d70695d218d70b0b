"""device-fit's screens as a user sees them on an 80-column terminal (issue 29): real processes with
stdout and stderr on a pseudo-terminal (tests/terminal.py), no mocks. No line is wider than the terminal,
no row label or value is cut, the answer is on the first line, and the launch command, broken between
arguments, still pastes into a shell as the argv that `--emit llama --json` gives."""

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from moetools.output import shell_words
from moetools.sizes import format_size
from tests import factory
from tests.terminal import run_on_terminal

pytest.importorskip("pty", reason="needs a POSIX pseudo-terminal")

ROOT = Path(__file__).resolve().parent.parent
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
LEDGER_LABELS = ["kind", "capacity", "compute", "resident", "KV", "experts", "margin", "free", "layers"]
RPC = ["--rpc", "192.168.100.201:50052=24G", "--rpc", "192.168.100.202:50052=24G"]


@pytest.fixture(scope="module")
def k2(tmp_path_factory):
    return factory.write_preset(tmp_path_factory.mktemp("k2"), "kimi-k2")


def screen(args, columns=80, env=None):
    """(exit code, the lines a terminal of `columns` shows, colours removed)."""
    code, text = run_on_terminal(args, columns=columns, stdout_too=True, env=env)
    return code, ANSI.sub("", text).splitlines()


def piped_json(args, env=None):
    process = subprocess.run([sys.executable, "-m", "moetools", *map(str, args)], capture_output=True, text=True,
                             cwd=ROOT, env=dict(os.environ, **(env or {})))
    assert process.returncode in (0, 1), process.stderr
    return json.loads(process.stdout)


def too_wide(lines, columns=80):
    """The lines wider than the terminal, but for a launch command's one argument longer than it (a
    quoted -ot regex: cut, it would not paste), which stands alone on its line."""
    return [line for line in lines if len(line) > columns
            and len(shell_words(line.strip().removesuffix(" \\"))) != 1]


def launch_argv(lines):
    """The `llama-server ...` command on the screen, its ` \\` continuations joined, as an argv."""
    start = next(index for index, line in enumerate(lines) if line.startswith("llama-server "))
    end = start
    while lines[end].endswith(" \\"):
        end += 1
    joined = "\n".join(lines[start:end + 1]).replace(" \\\n", " ")
    return shlex.split(joined)


LLAMA_CASES = {
    "1 GPU": ["--vram", "24G"],
    "2 GPUs": ["--vram", "24G,24G"],
    "2 RPC hosts": RPC,
    "2 RPC hosts and a GPU": ["--vram", "24G"] + RPC,
}


@pytest.mark.parametrize("case", list(LLAMA_CASES))
def test_llama_screen_fits_80_columns_whole(case, k2):
    args = ["device-fit", k2, "--runtime", "llama", "--ram", "512G"] + LLAMA_CASES[case]
    code, lines = screen(args)
    assert code == 0, "\n".join(lines)
    assert not too_wide(lines), "\n".join(lines)
    doc = piped_json(args + ["--json"])
    # the answer first: runtime, context and speed on the first line
    assert lines[0].startswith("device-fit (llama.cpp): ") and f"context {doc['context']}, {doc['tok_s']:.2f} tok/s" in lines[0]
    # every row label whole at the start of its line, and every device's value whole on that line
    for label, key in zip(LEDGER_LABELS[1:8], ["capacity_bytes", "compute_bytes", "resident_bytes", "kv_bytes",
                                               "expert_bytes", "margin_bytes", "free_bytes"]):
        row = next(line for line in lines if re.match(rf"{label}\s", line))
        values = row.split()[1:]
        assert len(values) == 2 * len(doc["devices"]), row  # `24.00 GiB` per device: none cut, none wrapped
        for device in doc["devices"]:
            if device[key] >= 0:
                assert format_size(device[key]) in row, (label, device["name"], row)
    # a device is named whole in the header, or (by address, where the columns do not fit) abbreviated
    # with a key below the table that names it whole
    header = next(line for line in lines if line.split() and line.split()[0] == "CPU" or " CPU" in line)
    for device in doc["devices"]:
        assert device["name"] in header.split() or any(line.endswith(f"= {device['name']}") for line in lines), (
            "\n".join(lines))
    if case == "2 RPC hosts and a GPU":
        assert "RPC0[a] = RPC0[192.168.100.201:50052]" in lines, "\n".join(lines)
    # the launch command: broken between arguments, the same argv as --emit llama --json
    emitted = piped_json(args + ["--emit", "llama", "--json"])
    assert launch_argv(lines) == emitted["command"]


def test_llama_screen_has_the_same_words_at_200_columns(k2):
    args = ["device-fit", k2, "--runtime", "llama", "--ram", "512G", "--vram", "24G"] + RPC
    _, narrow = screen(args, 80)
    _, wide = screen(args, 200)
    assert not too_wide(wide, 200)
    assert launch_argv(narrow) == launch_argv(wide)

    def words(lines):  # the key's full device names stand for the abbreviations; rules and ` \` aside
        text = re.sub(r" \\\n\s*", " ", "\n".join(lines))
        return {word for word in re.split(r"[\s\u2500-\u257F]+", text) if word and not re.fullmatch(r"RPC0\[[a-z]\]", word)}

    assert "RPC0[a]" in "\n".join(narrow) and "RPC0[a]" not in "\n".join(wide)
    assert words(narrow) - {"="} == words(wide) - {"="}


def test_fork_screen_and_its_launch_fit_80_columns(k2):
    args = ["device-fit", k2, "--runtime", "fork", "--vram", "24G", "--ram", "512G"]
    code, lines = screen(args)
    assert code == 0 and not too_wide(lines), "\n".join(lines)
    doc = piped_json(args + ["--json"])
    assert lines[0].startswith("device-fit (fork): ") and f"context {doc['context']}, {doc['tok_s']:.2f} tok/s" in lines[0]
    assert any(re.match(rf"KV cache\s+{re.escape(format_size(doc['kv_bytes']))}\s", line) for line in lines)
    # every note is there, wrapped between words with a hanging indent
    text = " ".join(line.strip() for line in lines)
    for note in doc["notes"]:
        assert note in text
    # --emit on a terminal: broken to the width, the same argv as in JSON; in a pipe: one line, as before
    code, emitted = screen(args + ["--emit", "llama"])
    assert code == 0 and not too_wide(emitted), "\n".join(emitted)
    command = piped_json(args + ["--emit", "llama", "--json"])["command"]
    assert launch_argv(emitted) == command
    piped = subprocess.run([sys.executable, "-m", "moetools", *map(str, args), "--emit", "llama"], capture_output=True,
                           text=True, cwd=ROOT).stdout
    assert shlex.split(piped.splitlines()[0]) == command
    code, exports = screen(args + ["--emit", "env"])
    assert code == 0 and not too_wide(exports), "\n".join(exports)
    server = next(index for index, line in enumerate(exports) if line.startswith("llama-server "))
    assert all(line.startswith(("export ", "unset ", "#")) for line in exports[:server])
    assert launch_argv(exports) == piped_json(args + ["--emit", "env", "--json"])["command"]


def repo_screen(tmp_path, preset_model, options):
    """(exit code, screen lines, JSON rows) of `device-fit hf://org/kimi OPTIONS` on an 80-column terminal,
    the repo served by the Hub emulation: a 3-shard K2-class set and a tiny quant."""
    from tests.httpfixture import Repo, Server

    k2 = Path(preset_model("kimi-k2", shards=3))
    tiny = factory.write_tiny(tmp_path, "qwen3moe", name="tiny-Q8_0")
    files = {f"UD-Q2/kimi-k2-0000{i}-of-00003.gguf": str(k2.parent / f"kimi-k2-0000{i}-of-00003.gguf") for i in (1, 2, 3)}
    files["tiny-Q8_0.gguf"] = str(tiny)
    with Server(repos={"org/kimi": Repo(files)}) as server:
        env = {"HF_ENDPOINT": server.hub_endpoint, "MOETOOLS_CACHE_DIR": str(tmp_path / "cache"),
               "HF_HOME": str(tmp_path / "hf")}
        args = ["device-fit", "hf://org/kimi", *options]
        code, lines = screen(args, env=env)
        return code, lines, piped_json(args + ["--json"], env=env)


def test_repo_listing_at_80_columns_keeps_numbers_and_headers_whole(tmp_path, preset_model):
    code, lines, rows = repo_screen(tmp_path, preset_model, ["--vram", "32G", "--runtime", "fork"])
    assert code == 0 and not too_wide(lines), "\n".join(lines)
    headers = " ".join(line for line in lines if line.startswith("set "))
    for header in ["set", "type", "size", "resident", "experts", "verdict", "context", "tok/s"]:
        assert re.search(rf"(^|\s){re.escape(header)}(\s|$)", headers), headers
    for row in rows:
        shown = " ".join(line for line in lines if line.startswith(row["set"] + " "))
        for value in [format_size(row["file_bytes"]), format_size(row["resident_bytes"]), format_size(row["expert_bytes"]),
                      str(row["context"]), f"{row['tok_s']:.2f}", row["verdict"]]:
            assert re.search(rf"(^|\s){re.escape(value)}(\s|$)", shown), (value, shown)


@pytest.mark.parametrize("width", [20, 40, 60, 80, 120, 200])
def test_a_launch_line_breaks_between_arguments_at_any_width(width):
    from moetools.output import shell_lines

    argv = ["llama-server", "-m", "/models/a folder/k2 00001-of-00003.gguf", "-c", "131072", "-ngl", "62", "-ts", "6,56",
            "-ot", "blk\\.(1|6|7|8|9|10|11|12)\\.ffn_(up|down)_exps=CPU", "--rpc", "10.0.0.1:50052,10.0.0.2:50052",
            "-fa", "on", "--no-kv-unified", "--fit", "off"]
    lines = shell_lines(shlex.join(argv), width)
    assert all(line.endswith(" \\") for line in lines[:-1]) and not lines[-1].endswith("\\")
    assert not too_wide(lines, width), "\n".join(lines)
    assert shlex.split("\n".join(lines).replace(" \\\n", " ")) == argv
    # pasted into a real shell, the broken command gives the same argv (printf stands in for llama-server)
    script = "\n".join(lines).replace("llama-server", "printf '%s\\n'", 1)
    printed = subprocess.run(["bash", "-c", script], capture_output=True, text=True)
    assert printed.stdout.splitlines() == argv[1:], script


def test_a_comment_wraps_as_comments_and_a_note_between_words():
    from moetools.output import shell_lines, wrap_text

    lines = shell_lines("# then: llama-server -m /m/k2.gguf -c 131072 -ngl 999 -ctk f16 -ctv f16 -fa on", 40)
    assert all(line.startswith("#") and len(line) <= 40 for line in lines)
    note = wrap_text("the fork's cache gives each of its 6 possible pools 1/6 of the 194.06 GiB budget", 40)
    assert note == ["the fork's cache gives each of its 6", "  possible pools 1/6 of the 194.06 GiB", "  budget"]


@pytest.mark.parametrize("columns", [60, 100, 130])
def test_llama_screen_fits_any_width(columns, k2):
    """Boxed (100 columns and more) or not, a ledger of five devices two of which are named by address."""
    args = ["device-fit", k2, "--runtime", "llama", "--ram", "512G", "--vram", "24G,24G"] + RPC
    code, lines = screen(args, columns)
    assert code == 0 and not too_wide(lines, columns), "\n".join(lines)
    assert launch_argv(lines) == piped_json(args + ["--emit", "llama", "--json"])["command"]
    for label in LEDGER_LABELS:
        assert any(re.match(rf"[│ ]*{label}\s", line) for line in lines), (label, "\n".join(lines))


def test_upstream_repo_listing_at_80_columns_keeps_numbers_and_headers_whole(tmp_path, preset_model):
    """The default runtime's listing (one row per quant, upstream llama.cpp) and its launch line."""
    code, lines, rows = repo_screen(tmp_path, preset_model, ["--vram", "24G", "--ram", "512G"])
    assert code == 0 and not too_wide(lines), "\n".join(lines)
    headers = " ".join(line for line in lines if line.startswith("set "))
    for header in ["set", "type", "size", "verdict", "context", "placement", "tok/s"]:
        assert re.search(rf"(^|\s){re.escape(header)}(\s|$)", headers), headers
    for row in rows:
        shown = " ".join(line for line in lines if line.startswith(row["set"] + " "))
        for value in [format_size(row["file_bytes"]), str(row["context"]), f"{row['tok_s']:.2f}", row["verdict"]]:
            assert re.search(rf"(^|\s){re.escape(value)}(\s|$)", shown), (value, shown)
    assert launch_argv(lines)[1:] == rows[0]["args"]


def test_both_runtimes_at_80_columns_answer_on_the_first_line(tmp_path):
    """K3 on one 32 GiB card with 128 GiB of RAM (the experts do not fit): both runtimes on the screen,
    the answer (the faster runtime, its tok/s and context) on line 1, both launch lines pasteable."""
    k3 = factory.write_preset(tmp_path, "kimi-k3", shards=14)
    args = ["device-fit", k3, "--vram", "32G", "--ram", "128G", "--ctx", "16384"]
    code, lines = screen(args)
    doc = piped_json(args + ["--json"])
    assert code == 0 and not too_wide(lines), "\n".join(lines)
    best = next(row for row in doc["runtimes"] if row["best"])
    name = {"llama": "llama.cpp", "fork": "the streaming fork"}[best["runtime"]]
    # stderr shares the terminal: the warnings (each wrapped with a hanging indent) come first, then line 1
    first = next(index for index, line in enumerate(lines) if not line.startswith(("warning: ", "  ")))
    assert lines[first].startswith(f"device-fit: {name} is faster here, {best['tok_s']:.2f} tok/s at context {best['context']}")
    text = " ".join(line.strip() for line in lines)
    for row in doc["runtimes"]:
        assert re.search(rf"{row['runtime']}\s+yes\s+{row['context']}\s+{row['tok_s']:.2f}", text), text
    assert launch_argv(lines)[1:] == doc["launch"]["llama"]["args"]
    start = next(index for index in range(lines.index("fork launch:"), len(lines)) if lines[index].startswith("env "))
    end = start
    while lines[end].endswith(" \\"):
        end += 1
    fork = shlex.split("\n".join(lines[start:end + 1]).replace(" \\\n", " "))
    assert fork[0] == "env" and fork[fork.index("llama-server"):] == doc["fork"]["launch"]["fork"]["command"]
