"""build-env through the CLI (CliRunner with an injected System) and the scripts it prints, run
by a real `sh` where the shell is available here."""

import json
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner

from moetools.buildenv.render import cmake_quote, cmd_escape, ps_quote, sh_quote
from moetools.buildenv.system import RunResult, System
from moetools.cli import cli
from tests.buildenv_trees import (
    ALL_PARTS, FakeRunner, linux_basics, linux_system, linux_toolkit, vcvars_answer, windows_system,
    windows_toolkit,
)

SMI_3090 = "NVIDIA GeForce RTX 3090, 8.6, 550.54.15\n"


def invoke(system, args):
    return CliRunner().invoke(cli, ["build-env"] + args, obj=system, catch_exceptions=False)


def good_linux(tmp_path, **basics):
    system, runner = linux_system(tmp_path)
    linux_toolkit(system, "/usr/local/cuda-12.4", "12.4.1")
    basics.setdefault("smi", SMI_3090)
    linux_basics(system, runner, **basics)
    return system


SH_EXPECTED = """\
# moetools build-env: CUDA 12.4.1 at /usr/local/cuda-12.4
# architectures from nvidia-smi
export CUDA_PATH='/usr/local/cuda-12.4'
export CUDA_HOME='/usr/local/cuda-12.4'
export CUDA_ROOT='/usr/local/cuda-12.4'
export CUDAToolkit_ROOT='/usr/local/cuda-12.4'
export CUDACXX='/usr/local/cuda-12.4/bin/nvcc'
export CMAKE_GENERATOR='Ninja'
export CMAKE_CUDA_ARCHITECTURES='86'
export CMAKE_ARGS='-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=86 -DCUDAToolkit_ROOT=/usr/local/cuda-12.4 \
-DCMAKE_CUDA_COMPILER=/usr/local/cuda-12.4/bin/nvcc'
export RUSTFLAGS='-L native=/usr/local/cuda-12.4/lib64 -L native=/usr/local/cuda-12.4/lib64/stubs'
export PATH='/usr/local/cuda-12.4/bin'"${PATH:+:$PATH}"
"""


def test_sh_output_exact(tmp_path):
    result = invoke(good_linux(tmp_path), ["--no-default-search", "--search-path", "/usr/local"])
    assert result.exit_code == 0, result.output
    assert result.stdout == SH_EXPECTED


def test_cmake_initial_cache_output(tmp_path):
    result = invoke(good_linux(tmp_path), ["--no-default-search", "--search-path", "/usr/local",
                                           "--shell", "cmake"])
    assert result.exit_code == 0
    assert result.stdout.splitlines()[3:] == [
        'set(GGML_CUDA "ON" CACHE BOOL "set by moetools build-env")',
        'set(CMAKE_CUDA_ARCHITECTURES "86" CACHE STRING "set by moetools build-env")',
        'set(CUDAToolkit_ROOT "/usr/local/cuda-12.4" CACHE PATH "set by moetools build-env")',
        'set(CMAKE_CUDA_COMPILER "/usr/local/cuda-12.4/bin/nvcc" CACHE FILEPATH "set by moetools build-env")',
    ]


def test_json_output_keys(tmp_path):
    result = invoke(good_linux(tmp_path), ["--no-default-search", "--search-path", "/usr/local", "--shell", "json"])
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    assert doc["cuda_path"] == "/usr/local/cuda-12.4" and doc["ok"] is True
    assert doc["toolkits"] == [{
        "path": "/usr/local/cuda-12.4", "version": "12.4.1", "complete": True, "missing": [],
        "found_via": ["--search-path /usr/local"], "nvcc": "/usr/local/cuda-12.4/bin/nvcc",
        "lib_dir": "/usr/local/cuda-12.4/lib64",
        "host_compilers": {"gcc_max": 13, "clang_min": 3, "clang_max": 17, "msvc_min": 1910, "msvc_max": 1939}}]
    assert doc["env"]["PATH"] == "/usr/local/cuda-12.4/bin:/usr/bin"
    assert doc["env"]["CMAKE_CUDA_ARCHITECTURES"] == "86"
    assert doc["gpus"] == [{"name": "NVIDIA GeForce RTX 3090", "compute_cap": "8.6", "driver": "550.54.15"}]
    assert doc["problems"] == []
    assert doc["host_compiler"]["version"] == "12.2.0"
    again = invoke(good_linux(tmp_path / "b"), ["--no-default-search", "--search-path", "/usr/local", "--json"])
    assert json.loads(again.stdout) == doc


def test_check_ready_and_failing(tmp_path):
    result = invoke(good_linux(tmp_path), ["--no-default-search", "--search-path", "/usr/local", "--check"])
    assert result.exit_code == 0
    doc = json.loads(result.stdout)  # CliRunner's stdout is not a terminal: JSON
    assert [f["item"] for f in doc["findings"]] == [
        "toolkit /usr/local/cuda-12.4", "chosen toolkit", "host compiler", "cmake", "ninja", "GPU 0",
        "architectures", "driver"]
    assert {f["status"] for f in doc["findings"]} == {"ok"}
    failing = good_linux(tmp_path / "b", cmake="3.16.3")
    result = invoke(failing, ["--no-default-search", "--search-path", "/usr/local", "--check"])
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc["problems"] == [{
        "item": "cmake", "status": "fail",
        "detail": "cmake 3.16.3 (/usr/bin/cmake) is older than 3.18, which llama.cpp's CUDA backend requires",
        "fix": "install cmake >= 3.18 (pip install cmake)"}]


def test_check_table_on_a_terminal(tmp_path, monkeypatch):
    from moetools import output

    monkeypatch.setattr(output, "want_json", lambda flag: bool(flag))
    result = invoke(good_linux(tmp_path, ninja=None), ["--no-default-search", "--search-path", "/usr/local", "--check"])
    assert result.exit_code == 0
    assert "build-env check: ready to build" in result.stdout
    assert "WARN" in result.stdout and "pip install ninja" in result.stdout
    result = invoke(good_linux(tmp_path / "b"), ["--no-default-search", "--search-path", "/usr/local", "--check",
                                                 "--shell", "json"])
    assert json.loads(result.stdout)["ok"] is True


def test_script_names_cmake_own_pick_when_it_differs(tmp_path):
    system = good_linux(tmp_path)
    linux_toolkit(system, "/usr/local/cuda-12.6", "12.6.0", parts=set(ALL_PARTS) - {"cublas"})
    import os

    os.symlink("cuda-12.6", system.real("/usr/local/cuda"))
    result = invoke(system, [])
    assert result.exit_code == 0
    assert result.stdout.splitlines()[:3] == [
        "# moetools build-env: CUDA 12.4.1 at /usr/local/cuda-12.4",
        "# CMake alone would pick /usr/local/cuda-12.6 (default location /usr/local/cuda)",
        "# architectures from nvidia-smi",
    ]
    assert ("warning: CMake's own pick: CMake alone would use /usr/local/cuda-12.6 (default location "
            "/usr/local/cuda), incomplete: missing cublas (fix: use the printed environment: it sets "
            "CUDAToolkit_ROOT and CUDACXX to /usr/local/cuda-12.4)") in result.stderr


def test_problems_go_to_stderr_and_exit_1(tmp_path):
    system, runner = linux_system(tmp_path)
    linux_basics(system, runner, smi=SMI_3090)
    linux_toolkit(system, "/tk/cuda-12.6", "12.6.0", parts=set(ALL_PARTS) - {"cublas", "cublasLt", "stub"})
    result = invoke(system, ["--no-default-search", "--search-path", "/tk"])
    assert result.exit_code == 1
    assert result.stdout.splitlines()[:2] == [
        "# moetools build-env: no complete CUDA toolkit",
        "# architectures from nvidia-smi",
    ]
    assert "CUDA_PATH" not in result.stdout
    assert ("warning: CUDA toolkit: no complete CUDA toolkit: /tk/cuda-12.6 lacks cublas, cublasLt, "
            "driver stub") in result.stderr


def test_no_gpu_and_explicit_arch(tmp_path):
    system = good_linux(tmp_path, smi=RunResult(6, "No devices were found\n"))
    result = invoke(system, ["--no-default-search", "--search-path", "/usr/local", "--shell", "json"])
    doc = json.loads(result.stdout)
    assert doc["gpu_problem"] == "nvidia-smi failed (exit 6): No devices were found"
    assert doc["architectures_source"] == "llama.cpp default list"
    result = invoke(system, ["--no-default-search", "--search-path", "/usr/local", "--shell", "json",
                             "--arch", "8.9", "--arch", "86-real"])
    assert json.loads(result.stdout)["env"]["CMAKE_CUDA_ARCHITECTURES"] == "89;86-real"


@pytest.mark.parametrize("args,message", [
    (["--search-path", "/nope"], "error: --search-path /nope: not a folder"),
    (["--no-default-search"], "error: --no-default-search needs at least one --search-path"),
    (["--arch", "ampere"], "error: --arch ampere: not a CUDA architecture (use 8.6, 86, 86-real, 120a, "
                         "native, all or all-major)"),
])
def test_bad_options(tmp_path, args, message):
    result = invoke(good_linux(tmp_path), args)
    assert result.exit_code == 2
    assert result.stderr.strip() == message


def test_bad_shell_choice(tmp_path):
    result = invoke(good_linux(tmp_path), ["--shell", "fish"])
    assert result.exit_code == 2 and result.stderr.splitlines() == [
        "error: invalid value for '--shell': 'fish' is not one of 'sh', 'cmd', 'ps1', 'json', 'cmake' "
        "(see moetools build-env --help)"]


# --- quoting ---------------------------------------------------------------------------------------

def test_quoting_helpers():
    assert sh_quote("/opt/it's here") == "'/opt/it'\\''s here'"
    assert ps_quote("C:\\it's") == "'C:\\it''s'"
    assert cmd_escape("C:\\a%b (x86)") == "C:\\a%%b (x86)"
    assert cmd_escape('-DX="C:/a & b" -DY=1') == '-DX="C:/a ^& b" -DY=1'
    assert cmake_quote('C:/x "y" ${z}\\') == '"C:/x \\"y\\" \\${z}\\\\"'


WINDOWS_CMD = """\
@echo off
rem moetools build-env: CUDA 12.4.1 at C:\\Program Files\\NVIDIA GPU Computing Toolkit\\CUDA\\v12.4
rem architectures from --arch
set "CUDA_PATH=C:\\Program Files\\NVIDIA GPU Computing Toolkit\\CUDA\\v12.4"
set "CUDA_HOME=C:\\Program Files\\NVIDIA GPU Computing Toolkit\\CUDA\\v12.4"
set "CUDA_ROOT=C:\\Program Files\\NVIDIA GPU Computing Toolkit\\CUDA\\v12.4"
set "CUDAToolkit_ROOT=C:\\Program Files\\NVIDIA GPU Computing Toolkit\\CUDA\\v12.4"
set "CUDACXX=C:\\Program Files\\NVIDIA GPU Computing Toolkit\\CUDA\\v12.4\\bin\\nvcc.exe"
"""


def windows_machine(tmp_path):
    system, runner = windows_system(tmp_path, toolsets=("14.38.33130",))
    windows_toolkit(system, "12.4")
    runner.add("vcvars64.bat", vcvars_answer("14.38.33130"))
    return system


def test_windows_cmd_output(tmp_path):
    result = invoke(windows_machine(tmp_path), ["--arch", "8.9"])  # cmd is the default on Windows
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith(WINDOWS_CMD)
    lines = result.stdout.split("\n")
    assert 'set "CMAKE_ARGS=-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=89 -DCUDAToolkit_ROOT="C:/Program Files/' \
           'NVIDIA GPU Computing Toolkit/CUDA/v12.4" -DCMAKE_CUDA_COMPILER="C:/Program Files/NVIDIA GPU ' \
           'Computing Toolkit/CUDA/v12.4/bin/nvcc.exe""' in lines
    assert lines[-2].startswith('set "PATH=C:\\Program Files\\NVIDIA GPU Computing Toolkit\\CUDA\\v12.4\\bin;')
    assert lines[-2].endswith(";%PATH%\"")
    assert any(line.startswith('set "INCLUDE=C:\\Program Files\\Microsoft Visual Studio') for line in lines)


def test_windows_ps1_output(tmp_path):
    result = invoke(windows_machine(tmp_path), ["--arch", "8.9", "--shell", "ps1"])
    lines = result.stdout.splitlines()
    assert "$env:CUDA_PATH = 'C:\\Program Files\\NVIDIA GPU Computing Toolkit\\CUDA\\v12.4'" in lines
    assert "$env:CMAKE_GENERATOR = 'Ninja'" in lines
    assert lines[-1].startswith("$env:PATH = 'C:\\Program Files\\NVIDIA GPU Computing Toolkit\\CUDA\\v12.4\\bin;")
    assert lines[-1].endswith(";' + $env:PATH")


def test_windows_cmake_cache_uses_forward_slashes(tmp_path):
    result = invoke(windows_machine(tmp_path), ["--arch", "8.9", "--shell", "cmake"])
    assert 'set(CUDAToolkit_ROOT "C:/Program Files/NVIDIA GPU Computing Toolkit/CUDA/v12.4" CACHE PATH ' \
           '"set by moetools build-env")' in result.stdout.splitlines()


# --- real shells -----------------------------------------------------------------------------------

def done_path():
    """PATH as `sh -c` inherits it from this test process."""
    import os

    return os.environ.get("PATH", "")


@pytest.mark.skipif(shutil.which("sh") is None, reason="no sh on this machine")
def test_eval_in_sh_with_spaces_and_quotes(tmp_path):
    """`eval "$(moetools build-env)"` in a real sh, toolkit under a folder with a space and a quote."""
    folder = tmp_path / "my tools's"
    runner = FakeRunner()
    system = System(env={"PATH": "/usr/bin:/bin"}, root=None, run=runner, platform="linux")
    linux_toolkit(system, str(folder / "cuda-12.4"), "12.4.1")
    runner.add("/usr/bin/g++", RunResult(0, "g++ (GCC) 12.2.0\n"))
    result = invoke(system, ["--no-default-search", "--search-path", str(folder), "--arch", "8.6"])
    script = result.stdout
    probe = ('eval "$1"; printf "%s\\n" "$CUDA_PATH" "$CUDACXX" "$CMAKE_ARGS" "$PATH" '
             '"$CMAKE_CUDA_ARCHITECTURES"; printf "%s" "$CARGO_ENCODED_RUSTFLAGS" | od -An -c | tr -s " "')
    done = subprocess.run(["sh", "-c", probe, "sh", script], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    tk = str(folder / "cuda-12.4")
    lines = done.stdout.splitlines()
    assert lines[:5] == [
        tk, tk + "/bin/nvcc",
        f'-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=86 -DCUDAToolkit_ROOT="{tk}" -DCMAKE_CUDA_COMPILER="{tk}/bin/nvcc"',
        tk + "/bin:" + done_path(), "86"]
    assert "037" in " ".join(lines[5:])  # 0x1f separators survive the eval


@pytest.mark.skipif(shutil.which("sh") is None, reason="no sh on this machine")
def test_eval_of_the_real_command(tmp_path):
    """The installed command on this machine, searching only a fake toolkit: eval sets CUDA_PATH."""
    folder = tmp_path / "with space"
    system = System(env={}, root=None, platform="linux")
    linux_toolkit(system, str(folder / "cuda-12.4"), "12.4.1")
    command = (f'eval "$("{sys.executable}" -m moetools build-env --no-default-search '
               f'--search-path "$1" --arch 8.6 2>/dev/null)"; printf "%s" "$CUDA_PATH"')
    done = subprocess.run(["sh", "-c", command, "sh", str(folder)], capture_output=True, text=True, timeout=60)
    assert done.stdout == str(folder / "cuda-12.4")
