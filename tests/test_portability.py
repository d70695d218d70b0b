"""Windows: every command works without the POSIX-only calls (real subprocesses under tests/winsim).

The whole suite also runs under the simulated Windows Python in `.ci/run`; these tests keep the main
paths covered in every ordinary `make test`.
"""

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from moetools import fileio
from moetools.gguf import open_model

ROOT = Path(__file__).resolve().parent.parent
WINSIM = ROOT / "tests" / "winsim"


def winsim_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(WINSIM), str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def run_winsim(*args, code=None):
    command = [sys.executable, "-c", code, *args] if code else [sys.executable, "-m", "moetools", *args]
    return subprocess.run(command, cwd=ROOT, env=winsim_env(), capture_output=True, text=True, timeout=300)


def test_the_simulation_removes_what_windows_lacks():
    result = run_winsim(code="import os; print(sorted(n for n in ('fchmod', 'pread', 'preadv', 'posix_fadvise', "
                             "'O_DIRECT') if hasattr(os, n)))")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_atomic_writes_without_fchmod(tmp_path):
    target = tmp_path / "doc.json"
    result = run_winsim(str(target), code="import sys; from moetools import atomic; atomic.write_json(sys.argv[1], {'a': 1})")
    assert result.returncode == 0, result.stderr
    assert json.loads(target.read_text()) == {"a": 1}
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask
    assert [p.name for p in tmp_path.iterdir()] == ["doc.json"]


def test_positioned_reads_without_pread_match(tiny_models, tmp_path):
    """The seek+read fallback returns the bytes os.pread and os.preadv return."""
    source = tiny_models["qwen3moe"]
    with open_model(source) as model:
        tensor = model.tensors[3]
        expected = model.read_tensor_bytes(tensor).hex()
    code = ("import sys; from moetools.gguf import open_model\n"
            "with open_model(sys.argv[1]) as m:\n"
            "    t = m.tensors[3]; whole = m.read_tensor_bytes(t)\n"
            "    a, b = bytearray(5), bytearray(t.n_bytes - 5); m.read_tensor_into(t, 0, [memoryview(a), memoryview(b)])\n"
            "    assert bytes(a + b) == whole\n"
            "    print(whole.hex())")
    result = run_winsim(str(source), code=code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == expected


def test_fallback_stops_at_the_end_of_the_file(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(bytes(range(100)))
    code = ("import sys; from moetools import fileio\n"
            "fd = fileio.open_read(sys.argv[1]); buf = bytearray(30)\n"
            "print(fileio.pread(fd, 50, 80).hex(), fileio.preadinto(fd, [buf], 90), bytes(buf[:10]).hex())")
    result = run_winsim(str(path), code=code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [bytes(range(80, 100)).hex(), "10", bytes(range(90, 100)).hex()]
    fd = fileio.open_read(path)
    try:
        assert fileio.pread(fd, 50, 80) == bytes(range(80, 100))
    finally:
        os.close(fd)


def test_container_commands_under_windows(tiny_models, tmp_path):
    out = tmp_path / "container"
    encode = run_winsim("container-encode", str(tiny_models["qwen3moe"]), "-o", str(out))
    assert encode.returncode == 0, encode.stderr
    verify = run_winsim("container-verify", str(out))
    assert verify.returncode == 0, verify.stderr
    read = run_winsim("container-read", str(out), "--layer", "0", "--expert", "1", "--json")
    assert read.returncode == 0, read.stderr


def test_quantize_under_windows(tiny_models, tmp_path):
    result = run_winsim("quantize", str(tiny_models["qwen3moe"]), "--type", "q8_0", "-o", str(tmp_path / "tiers"),
                        "--json")
    assert result.returncode == 0, result.stderr
    assert any(name.endswith(".gguf") for name in os.listdir(tmp_path / "tiers"))


@pytest.mark.skipif(os.environ.get("MOETOOLS_WINSIM") == "1", reason="already simulated")
def test_a_folder_cannot_be_opened_under_the_simulation(tmp_path):
    result = run_winsim(str(tmp_path), code="import os, sys\ntry:\n    os.open(sys.argv[1], os.O_RDONLY)\n"
                                            "except PermissionError:\n    print('refused')")
    assert result.stdout.strip() == "refused", result.stderr
