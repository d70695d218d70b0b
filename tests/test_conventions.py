"""The conventions every command shares: sizes, errors, atomic writes, output, help and README."""

import errno
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from moetools import __version__, atomic
from moetools.cli import COMMANDS, cli, error_line
from moetools.errors import AnswerNo, InputError, OutputError, UsageError
from moetools.sizes import format_size, parse_size

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("text,expected", [
    ("32G", 32 * 2**30), ("32GiB", 32 * 2**30), ("32GB", 32 * 10**9), ("32g", 32 * 2**30),
    ("1.5T", int(1.5 * 2**40)), ("512M", 512 * 2**20), ("512MB", 512 * 10**6), ("1073741824", 2**30),
    ("4k", 4096), ("100B", 100), (" 24 GiB ", 24 * 2**30), (7, 7),
])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "G", "32X", "-1G", "32 GG", "1e9", "abc", "0x10"])
def test_parse_size_rejects(text):
    with pytest.raises(UsageError):
        parse_size(text)


def test_format_size():
    assert [format_size(n) for n in (17, 4096, 3 * 2**20, 31.5 * 2**30, 2**41)] == [
        "17 B", "4.0 KiB", "3.0 MiB", "31.50 GiB", "2.00 TiB"]


def test_error_lines():
    assert error_line(InputError("m.gguf", "bad", offset=12, key="k")) == ("m.gguf at offset 12 (key k): bad", 2)
    assert error_line(AnswerNo("no twin"))[1] == 1
    assert error_line(FileNotFoundError(errno.ENOENT, "x", "/a/b")) == ("/a/b: no such file or folder", 2)
    assert error_line(ValueError("x")) == (None, None)


def test_atomic_write_replaces_whole_or_not_at_all(tmp_path):
    target = tmp_path / "out.json"
    atomic.write_json(target, {"a": 1})
    with pytest.raises(RuntimeError):
        with atomic.atomic_write(target, "w") as handle:
            handle.write("half")
            raise RuntimeError("interrupted")
    assert target.read_text() == '{\n  "a": 1\n}\n'
    assert os.listdir(tmp_path) == ["out.json"]
    with pytest.raises(OutputError, match="already exists"):
        atomic.write_text(target, "x", overwrite=False)


def test_atomic_write_disk_full_leaves_nothing(tmp_path, monkeypatch):
    real_fsync = os.fsync

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OutputError, match="No space left"):
        atomic.write_bytes(tmp_path / "big.bin", b"x" * 1000)
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert os.listdir(tmp_path) == []


def test_atomic_write_unwritable_folder():
    with pytest.raises(OutputError, match="cannot write here"):
        atomic.write_text("/proc/moetools-test.json", "{}")


def test_version_and_help():
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0 and result.stdout == f"moetools, version {__version__}\n"
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0 and "inspect" in result.stdout


def test_every_command_has_help_and_a_readme_entry():
    readme = (ROOT / "README.md").read_text()
    listed = cli.list_commands(None)
    assert "inspect" in listed
    for name in listed:
        command = cli.get_command(None, name)
        assert command.help and len(command.help.strip()) > 20, name
        assert f"moetools {name}" in readme, f"README has no `moetools {name}`"
        result = CliRunner().invoke(cli, [name, "--help"])
        assert result.exit_code == 0, name
    assert set(listed) <= set(COMMANDS)


def test_wrong_flag_is_a_usage_error(tiny_models):
    result = CliRunner().invoke(cli, ["inspect", str(tiny_models["qwen3moe"]), "--no-such-flag"])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == ["error: no such option --no-such-flag (see moetools inspect --help)"]


def test_broken_pipe_is_quiet(tiny_models):
    """`moetools inspect --tensors | head -1` exits quietly, no traceback."""
    proc = subprocess.run(
        f"{sys.executable} -m moetools inspect {tiny_models['kimi-k3']} --json --tensors | head -c 10",
        shell=True, capture_output=True, text=True, cwd=ROOT)
    assert proc.stdout == '{\n  "path"' and "Traceback" not in proc.stderr and "Error" not in proc.stderr


def test_header_path_imports_neither_numpy_nor_gguf(tiny_models):
    code = ("import sys, runpy; sys.argv = ['moetools', 'inspect', %r, '--json'];"
            "from moetools.cli import cli\n"
            "try:\n    cli()\nexcept SystemExit:\n    pass\n"
            "heavy = [m for m in ('numpy', 'gguf', 'rich', 'dataclasses') if m in sys.modules]\n"
            "sys.stderr.write('HEAVY=' + ','.join(heavy))") % str(tiny_models["qwen3moe"])
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert re.search(r"HEAVY=$", proc.stderr), proc.stderr


def test_python_dash_m_runs(tiny_models):
    proc = subprocess.run([sys.executable, "-m", "moetools", "--version"], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0 and proc.stdout.startswith("moetools, version")


def test_atomic_write_gives_the_usual_mode(tmp_path):
    umask = os.umask(0o022)
    try:
        atomic.write_text(tmp_path / "plan.json", "{}")
    finally:
        os.umask(umask)
    assert (tmp_path / "plan.json").stat().st_mode & 0o777 == 0o644


def test_no_overwrite_write_refuses_a_file_that_appears_meanwhile(tmp_path):
    target = tmp_path / "out.bin"
    with pytest.raises(OutputError, match="already exists"):
        with atomic.atomic_write(target, "wb", overwrite=False) as handle:
            handle.write(b"new")
            target.write_bytes(b"someone else's")
    assert target.read_bytes() == b"someone else's" and os.listdir(tmp_path) == ["out.bin"]
