"""build-env core: discovery, scoring, choice, compiler/cmake/ninja/GPU/driver checks, Windows
MSVC environment, on fake Linux and Windows trees in temporary folders."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from moetools.buildenv import facts
from moetools.buildenv.core import analyse, architectures_for, llama_default_architectures, parse_arch_list
from moetools.buildenv.system import RunResult, System
from moetools.buildenv.toolkit import discover
from moetools.errors import UsageError
from tests.buildenv_trees import (
    ALL_PARTS, VS_PATH, add_tool, host_config_text, linux_basics, linux_system, linux_toolkit,
    vcvars_answer, windows_system, windows_toolkit,
)

SMI = "NVIDIA GeForce RTX 3090, 8.6, 560.35.03\n"
REAL_HOST_CONFIG = Path("/usr/local/cuda/include/crt/host_config.h")


def statuses(report, item):
    return [f.status for f in report.findings if f.item == item]


def finding(report, item):
    return next(f for f in report.findings if f.item == item)


# --- host_config.h ---------------------------------------------------------------------------------

def test_host_config_limits_follow_the_file():
    limits = facts.parse_host_config(host_config_text(gcc_max=13, clang_max=17, msvc_below=1940))
    assert limits == facts.HostLimits(gcc_max=13, clang_min=3, clang_max=17, msvc_min=1910, msvc_max=1939)
    assert limits.accepts("gcc", (13, 2, 0)) is True
    assert limits.accepts("gcc", (14, 1)) is False
    assert limits.accepts("clang", (18, 1)) is False
    assert limits.accepts("clang", (17, 0)) is True
    assert limits.accepts("msvc", (1940,)) is False
    assert limits.accepts("msvc", (1939,)) is True


def test_host_config_without_checks_is_unknown():
    limits = facts.parse_host_config("/* nothing */\n")
    assert limits.accepts("gcc", (99,)) is None
    assert limits.describe("gcc") == "unknown"


@pytest.mark.skipif(not REAL_HOST_CONFIG.is_file(), reason="no real CUDA host_config.h on this machine")
def test_real_host_config_parses():
    limits = facts.parse_host_config(REAL_HOST_CONFIG.read_text(errors="replace"))
    assert limits.gcc_max is not None and limits.gcc_max >= 9
    assert limits.clang_max is not None and limits.clang_min == 3
    assert limits.msvc_min is not None and limits.msvc_max > limits.msvc_min


def test_msvc_toolset_to_msc_ver():
    assert facts.msvc_ver_from_toolset("14.40.33807") == 1940
    assert facts.msvc_ver_from_toolset("14.29.30133") == 1929
    assert facts.msvc_ver_from_toolset("garbage") is None


def test_driver_minimum_table():
    assert facts.driver_minimum((12, 4, 1), windows=False) == ("525.60.13", "550.54.14")
    assert facts.driver_minimum((12, 7), windows=True) == ("527.41", "560.76")  # nearest lower release
    assert facts.driver_minimum((99, 0), windows=False) == (None, None)


# --- architectures ---------------------------------------------------------------------------------

def test_architectures_from_compute_caps():
    assert architectures_for(["8.6"]) == ["86"]
    assert architectures_for(["8.6", "8.9", "8.6"]) == ["86-real", "89"]
    assert architectures_for(["12.0", "8.9"]) == ["89", "120a-real"]


def test_arch_list_parsing():
    assert parse_arch_list(["8.6,89-real", "120a", "8.6"]) == ["86", "89-real", "120a"]
    assert parse_arch_list(["12.0"]) == ["120a-real"]
    with pytest.raises(UsageError, match="--arch sm86"):
        parse_arch_list(["sm86"])


def test_arch_keywords(tmp_path):
    assert parse_arch_list(["native"]) == ["native"]
    system, _ = _good_linux(tmp_path, cmake="3.22.1", smi=None)
    report = analyse(system, ["/usr/local/cuda-12.4"], default_search=False, arch=("native",))
    details = [f.detail for f in report.findings if f.item == "architectures"]
    assert details == ["CMAKE_CUDA_ARCHITECTURES=native needs cmake >= 3.24, this is 3.22.1",
                       "CMAKE_CUDA_ARCHITECTURES=native needs a GPU at build time"]
    system, _ = _good_linux(tmp_path / "b", cmake="3.28.3")
    report = analyse(system, ["/usr/local/cuda-12.4"], default_search=False, arch=("native",))
    assert not report.fails and report.env["CMAKE_CUDA_ARCHITECTURES"] == "native"


def test_llama_default_list_follows_its_cmake():
    assert llama_default_architectures((12, 4)) == [
        "50-virtual", "61-virtual", "70-virtual", "75-virtual", "80-virtual", "86-real", "89-real", "90-virtual"]
    assert llama_default_architectures((13, 0))[:3] == ["75-virtual", "80-virtual", "86-real"]
    assert llama_default_architectures((13, 0))[-2:] == ["120a-real", "121a-real"]


# --- discovery -------------------------------------------------------------------------------------

def test_complete_incomplete_and_unusable_toolkits(tmp_path):
    system, runner = linux_system(tmp_path)
    linux_toolkit(system, "/tk/cuda-12.4", "12.4.1")
    linux_toolkit(system, "/tk/cuda-12.6", "12.6.0", parts=set(ALL_PARTS) - {"cublas", "cublasLt"})
    linux_toolkit(system, "/tk/cuda-12.8", "12.8.0", parts={"nvcc", "cuda.h", "version.json"})
    toolkits = discover(system, ["/tk"], default_search=False)
    by_path = {tk.path: tk for tk in toolkits}
    assert set(by_path) == {"/tk/cuda-12.4", "/tk/cuda-12.6", "/tk/cuda-12.8"}
    assert by_path["/tk/cuda-12.4"].complete and by_path["/tk/cuda-12.4"].version == "12.4.1"
    assert by_path["/tk/cuda-12.6"].missing == ["cublas", "cublasLt"]
    assert by_path["/tk/cuda-12.8"].usable is False
    assert by_path["/tk/cuda-12.8"].missing == ["cudart", "cublas", "cublasLt", "driver stub"]
    assert toolkits[0].path == "/tk/cuda-12.4"  # complete ones first
    assert by_path["/tk/cuda-12.4"].lib_dir == "/tk/cuda-12.4/lib64"
    assert by_path["/tk/cuda-12.4"].host_limits.gcc_max == 13


def test_runtime_only_library_is_missing_with_a_note(tmp_path):
    system, _ = linux_system(tmp_path)
    linux_toolkit(system, "/tk/cuda-12.4", parts=set(ALL_PARTS) - {"cublas"}, runtime_only={"cublas"})
    tk = discover(system, ["/tk/cuda-12.4"], default_search=False)[0]
    assert "cublas" in tk.missing
    assert any("libcublas.so.12 (no libcublas.so development link)" in text for _, text, _ in tk.notes)


def test_default_search_sources_and_dedup(tmp_path):
    system, runner = linux_system(tmp_path, env={"PATH": "/usr/bin:/usr/local/cuda-12.4/bin",
                                                  "CUDA_HOME": "/usr/local/cuda",
                                                  "CONDA_PREFIX": "/home/u/miniforge/envs/build"})
    linux_toolkit(system, "/usr/local/cuda-12.4", "12.4.1")
    os.symlink("cuda-12.4", system.real("/usr/local/cuda"))
    linux_toolkit(system, "/opt/cuda", "11.8.0")
    linux_toolkit(system, "/home/u/miniforge/envs/build", "12.6.2")
    toolkits = discover(system)
    by_path = {tk.path: tk for tk in toolkits}
    assert set(by_path) == {"/usr/local/cuda-12.4", "/opt/cuda", "/home/u/miniforge/envs/build"}
    assert by_path["/usr/local/cuda-12.4"].found_via == [
        "CUDA_HOME=/usr/local/cuda", "nvcc on PATH (/usr/local/cuda-12.4/bin/nvcc)", "standard install folder"]
    assert by_path["/home/u/miniforge/envs/build"].found_via == ["CONDA_PREFIX=/home/u/miniforge/envs/build"]
    assert [tk.version for tk in toolkits] == ["12.6.2", "12.4.1", "11.8.0"]


def test_variables_pointing_nowhere_are_reported(tmp_path):
    system, runner = _good_linux(tmp_path)
    system.env.update({"CUDA_PATH": "/gone/cuda-11.8", "CUDAToolkit_ROOT": "/gone/too"})
    report = analyse(system, ["/usr/local/cuda-12.4"])
    assert finding(report, "CUDA_PATH").detail == "CUDA_PATH=/gone/cuda-11.8 does not exist"
    assert finding(report, "CMake's own pick").detail == \
        "CMake alone would use CUDAToolkit_ROOT=/gone/too holds no bin/nvcc: CMake stops with an error"
    assert report.chosen.path == "/usr/local/cuda-12.4" and not report.fails


def test_no_default_search_ignores_environment(tmp_path):
    system, _ = linux_system(tmp_path, env={"PATH": "/usr/local/cuda-12.4/bin", "CUDA_PATH": "/usr/local/cuda-12.4"})
    linux_toolkit(system, "/usr/local/cuda-12.4")
    linux_toolkit(system, "/mine/cuda-12.6", "12.6.0")
    assert [tk.path for tk in discover(system, ["/mine"], default_search=False)] == ["/mine/cuda-12.6"]


def test_nvcc_wrapper_resolved_through_top_line(tmp_path):
    system, runner = linux_system(tmp_path, env={"PATH": "/usr/local/bin"})
    linux_toolkit(system, "/usr/local/cuda-13.0", "13.0.1")
    add_tool(system, runner, "/usr/local/bin/nvcc",
             RunResult(1, "#$ _HERE_=/usr/local/cuda-13.0/bin\n#$ TOP=/usr/local/cuda-13.0/bin/..\n"))
    tk = discover(system)[0]
    assert tk.path == "/usr/local/cuda-13.0"
    assert tk.found_via[0] == "nvcc on PATH (/usr/local/bin/nvcc)"


def test_search_path_holding_a_wrapper_nvcc_and_toolkits(tmp_path):
    system, runner = linux_system(tmp_path)
    linux_toolkit(system, "/usr/local/cuda-13.0", "13.0.1")
    linux_toolkit(system, "/usr/local/cuda-12.9", "12.9.1")
    add_tool(system, runner, "/usr/local/bin/nvcc", RunResult(0, "#$ TOP=/usr/local/cuda-13.0/bin/..\n"))
    toolkits = discover(system, ["/usr/local"], default_search=False)
    assert [(tk.path, tk.complete) for tk in toolkits] == [("/usr/local/cuda-13.0", True),
                                                           ("/usr/local/cuda-12.9", True)]


def test_distribution_scattered_install(tmp_path):
    """Debian/Ubuntu nvidia-cuda-toolkit: /usr/bin/nvcc, /usr/include, /usr/lib/x86_64-linux-gnu."""
    system, runner = linux_system(tmp_path, env={"PATH": "/usr/bin"})
    add_tool(system, runner, "/usr/bin/nvcc", RunResult(0, "#$ TOP=/usr/lib/nvidia-cuda-toolkit\n"))
    system.real("/usr/lib/nvidia-cuda-toolkit/bin").mkdir(parents=True)
    (system.real("/usr/lib/nvidia-cuda-toolkit/bin") / "nvcc").write_text("")
    include = system.real("/usr/include")
    (include / "crt").mkdir(parents=True)
    (include / "cuda.h").write_text("#define CUDA_VERSION 12000\n")
    (include / "crt" / "host_config.h").write_text(host_config_text(gcc_max=12))
    lib = system.real("/usr/lib/x86_64-linux-gnu")
    lib.mkdir(parents=True)
    for name in ("cudart", "cublas", "cublasLt", "cuda"):
        (lib / f"lib{name}.so").write_text("")
    toolkits = {tk.path: tk for tk in discover(system)}
    assert toolkits["/usr"].complete and toolkits["/usr"].version == "12.0"
    assert toolkits["/usr"].lib_dir == "/usr/lib/x86_64-linux-gnu"
    assert toolkits["/usr/lib/nvidia-cuda-toolkit"].missing[0] == "include/cuda.h"


def test_unparsable_version_json_falls_back_to_cuda_h(tmp_path):
    system, _ = linux_system(tmp_path)
    linux_toolkit(system, "/tk/cuda-12.4", "12.4.1", version_json='{"cuda": {"version": ')
    tk = discover(system, ["/tk"], default_search=False)[0]
    assert tk.version == "12.4" and tk.complete
    assert tk.notes[0][0] == "warn"
    assert tk.notes[0][1].startswith("/tk/cuda-12.4/version.json: not valid JSON (line 1 column")


def test_version_json_without_version_and_no_header_is_missing_version(tmp_path):
    system, _ = linux_system(tmp_path)
    linux_toolkit(system, "/tk/cuda-x", "12.4.1", parts=set(ALL_PARTS) - {"cuda.h"},
                  version_json='{"cuda": {"name": "CUDA SDK"}}')
    tk = discover(system, ["/tk"], default_search=False)[0]
    assert tk.version is None
    assert tk.missing[:2] == ["include/cuda.h", "version"]
    assert "no usable cuda.version" in tk.notes[0][1]


# --- the whole analysis on Linux --------------------------------------------------------------------

def _good_linux(tmp_path, smi="NVIDIA GeForce RTX 3090, 8.6, 550.54.15\n", **basics):
    system, runner = linux_system(tmp_path)
    linux_toolkit(system, "/usr/local/cuda-12.4", "12.4.1")
    linux_basics(system, runner, smi=smi, **basics)
    return system, runner


def test_ready_to_build(tmp_path):
    system, _ = _good_linux(tmp_path)
    report = analyse(system, ["/usr/local/cuda-12.4"], default_search=False)
    assert not report.fails, [f for f in report.findings if f.status == "fail"]
    assert report.architectures == ["86"]
    assert report.env == {
        "CUDA_PATH": "/usr/local/cuda-12.4",
        "CUDA_HOME": "/usr/local/cuda-12.4",
        "CUDA_ROOT": "/usr/local/cuda-12.4",
        "CUDAToolkit_ROOT": "/usr/local/cuda-12.4",
        "CUDACXX": "/usr/local/cuda-12.4/bin/nvcc",
        "CMAKE_GENERATOR": "Ninja",
        "CMAKE_CUDA_ARCHITECTURES": "86",
        "CMAKE_ARGS": "-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=86 -DCUDAToolkit_ROOT=/usr/local/cuda-12.4 "
                      "-DCMAKE_CUDA_COMPILER=/usr/local/cuda-12.4/bin/nvcc",
        "RUSTFLAGS": "-L native=/usr/local/cuda-12.4/lib64 -L native=/usr/local/cuda-12.4/lib64/stubs",
    }
    assert report.path_prepend == ["/usr/local/cuda-12.4/bin"]
    assert statuses(report, "driver") == ["ok"]
    assert statuses(report, "host compiler") == ["ok"]


def test_no_toolkit_at_all(tmp_path):
    system, runner = linux_system(tmp_path)
    linux_basics(system, runner)
    system.real("/empty").mkdir()
    report = analyse(system, ["/empty"], default_search=False)
    assert report.fails and report.chosen is None and report.env.get("CUDA_PATH") is None
    assert finding(report, "CUDA toolkit").detail == "no CUDA toolkit found (searched /empty)"


def test_only_incomplete_toolkits(tmp_path):
    system, runner = linux_system(tmp_path)
    linux_basics(system, runner)
    linux_toolkit(system, "/tk/cuda-12.6", "12.6.0", parts=set(ALL_PARTS) - {"stub"})
    report = analyse(system, ["/tk"], default_search=False)
    assert report.fails
    assert finding(report, "CUDA toolkit").detail == "no complete CUDA toolkit: /tk/cuda-12.6 lacks driver stub"
    assert "cuda-driver-dev-12-6" in finding(report, "toolkit /tk/cuda-12.6").fix
    assert "CUDACXX" not in report.env


def test_mixed_tree_cmake_would_pick_the_incomplete_newer_one(tmp_path):
    system, runner = linux_system(tmp_path, env={"PATH": "/usr/bin"})
    linux_toolkit(system, "/usr/local/cuda-12.4", "12.4.1")
    linux_toolkit(system, "/usr/local/cuda-12.6", "12.6.0", parts=set(ALL_PARTS) - {"cublas", "cublasLt"})
    os.symlink("cuda-12.6", system.real("/usr/local/cuda"))
    linux_basics(system, runner, smi="NVIDIA RTX A6000, 8.6, 560.35.03\n")
    report = analyse(system)
    assert report.chosen.path == "/usr/local/cuda-12.4"
    assert report.cmake_pick == "/usr/local/cuda-12.6"
    pick = finding(report, "CMake's own pick")
    assert pick.status == "warn"
    assert pick.detail == ("CMake alone would use /usr/local/cuda-12.6 (default location /usr/local/cuda), "
                           "incomplete: missing cublas, cublasLt")
    assert report.env["CUDAToolkit_ROOT"] == "/usr/local/cuda-12.4"
    assert not report.fails


def test_cudacxx_from_another_toolkit_is_a_mixed_build(tmp_path):
    system, runner = linux_system(tmp_path, env={"PATH": "/usr/local/cuda-12.4/bin:/usr/bin",
                                                  "CUDACXX": "/usr/local/cuda-11.8/bin/nvcc"})
    linux_toolkit(system, "/usr/local/cuda-12.4", "12.4.1")
    linux_toolkit(system, "/usr/local/cuda-11.8", "11.8.0")
    linux_basics(system, runner, smi=SMI)
    report = analyse(system)
    assert finding(report, "CUDACXX").detail == (
        "CUDACXX=/usr/local/cuda-11.8/bin/nvcc belongs to another toolkit than find_package(CUDAToolkit) "
        "picks (/usr/local/cuda-12.4): nvcc and the libraries would come from different toolkits")
    assert finding(report, "CMake's own pick").status == "ok"


def test_cmake_pick_order_cudatoolkit_root_then_path_then_cuda_path(tmp_path):
    from moetools.buildenv.toolkit import cmake_pick

    system, _ = linux_system(tmp_path, env={"PATH": "/usr/local/cuda-12.4/bin", "CUDA_PATH": "/usr/local/cuda-12.6"})
    linux_toolkit(system, "/usr/local/cuda-12.4", "12.4.1")
    linux_toolkit(system, "/usr/local/cuda-12.6", "12.6.0")
    assert cmake_pick(system, [])[0] == "/usr/local/cuda-12.4"  # find_program searches PATH before CUDA_PATH
    system.env["PATH"] = "/usr/bin"
    assert cmake_pick(system, [])[0] == "/usr/local/cuda-12.6"
    system.env["CUDAToolkit_ROOT"] = "/nowhere"
    assert cmake_pick(system, []) == (None, "CUDAToolkit_ROOT=/nowhere holds no bin/nvcc: CMake stops with an error")
    del system.env["CUDAToolkit_ROOT"], system.env["CUDA_PATH"]
    assert cmake_pick(system, [])[0] == "/usr/local/cuda-12.6"  # newest /usr/local/cuda-X.Y


def test_compiler_too_new_newest_complete_toolkit_accepts_it(tmp_path):
    system, runner = linux_system(tmp_path)
    linux_toolkit(system, "/tk/cuda-12.4", "12.4.1", gcc_max=13)
    linux_toolkit(system, "/tk/cuda-12.8", "12.8.0", gcc_max=14)
    linux_basics(system, runner, gxx="14.2.0", smi="NVIDIA GeForce RTX 3090, 8.6, 570.86.10\n")
    report = analyse(system, ["/tk"], default_search=False)
    assert report.chosen.version == "12.8.0" and statuses(report, "host compiler") == ["ok"]


def test_compiler_too_new_names_the_toolkit_that_would_accept_it(tmp_path):
    system, runner = linux_system(tmp_path)
    linux_toolkit(system, "/tk/cuda-12.4", "12.4.1", gcc_max=13)
    linux_toolkit(system, "/tk/cuda-12.8", "12.8.0", gcc_max=14, parts=set(ALL_PARTS) - {"cublas"})
    linux_basics(system, runner, gxx="14.2.0", smi="NVIDIA GeForce RTX 3090, 8.6, 570.86.10\n")
    report = analyse(system, ["/tk"], default_search=False)
    compiler = finding(report, "host compiler")
    assert compiler.status == "fail" and report.fails
    assert compiler.detail == ("gcc 14.2.0 (/usr/bin/g++) is not accepted by CUDA 12.4.1 (gcc <= 13); "
                               "CUDA 12.8.0 at /tk/cuda-12.8 accepts it (once complete: it lacks cublas)")
    assert compiler.fix == ("install a compiler in that range (e.g. g++-13 when gcc) and rerun, or pass "
                            "-allow-unsupported-compiler (--allow-unsupported-compiler), at the risk of "
                            "compile errors or wrong code")
    report = analyse(system, ["/tk"], default_search=False, allow_unsupported=True)
    assert not report.fails and statuses(report, "host compiler") == ["warn"]
    assert report.env["CMAKE_ARGS"].endswith("-DCMAKE_CUDA_FLAGS=-allow-unsupported-compiler")
    assert report.env["CUDAFLAGS"] == "-allow-unsupported-compiler"


def test_compiler_too_new_without_any_accepting_toolkit(tmp_path):
    system, runner = _good_linux(tmp_path, gxx="16.1.0")
    report = analyse(system, ["/usr/local/cuda-12.4"], default_search=False)
    assert finding(report, "host compiler").detail == \
        "gcc 16.1.0 (/usr/bin/g++) is not accepted by CUDA 12.4.1 (gcc <= 13)"


def test_older_compiler_beside_the_default_is_used(tmp_path):
    system, runner = _good_linux(tmp_path, gxx="14.2.0")
    add_tool(system, runner, "/usr/bin/g++-13", "g++-13 (Debian 13.3.0-1) 13.3.0\n")
    add_tool(system, runner, "/usr/bin/clang++-19", "Debian clang version 19.1.4 (1)\nTarget: x86_64\n")
    report = analyse(system, ["/usr/local/cuda-12.4"], default_search=False)
    assert not report.fails
    assert report.compiler.path == "/usr/bin/g++-13"
    assert finding(report, "host compiler").status == "warn"
    assert report.env["CUDAHOSTCXX"] == "/usr/bin/g++-13"
    assert "-DCMAKE_CUDA_HOST_COMPILER=/usr/bin/g++-13" in report.env["CMAKE_ARGS"]


def test_no_compiler(tmp_path):
    system, _ = _good_linux(tmp_path, gxx=None)
    report = analyse(system, ["/usr/local/cuda-12.4"], default_search=False)
    assert finding(report, "host compiler").status == "fail"


@pytest.mark.parametrize("version,status", [("3.16.3", "fail"), ("3.18.0", "ok"), (None, "fail")])
def test_cmake_version(tmp_path, version, status):
    system, _ = _good_linux(tmp_path, cmake=version)
    report = analyse(system, ["/usr/local/cuda-12.4"], default_search=False)
    assert statuses(report, "cmake") == [status]


def test_no_ninja_is_a_warning_and_no_generator(tmp_path):
    system, _ = _good_linux(tmp_path, ninja=None)
    report = analyse(system, ["/usr/local/cuda-12.4"], default_search=False)
    assert statuses(report, "ninja") == ["warn"] and not report.fails
    assert "CMAKE_GENERATOR" not in report.env


def test_nvidia_smi_missing_uses_llama_default_list(tmp_path):
    system, _ = _good_linux(tmp_path, smi=None)
    report = analyse(system, ["/usr/local/cuda-12.4"], default_search=False)
    assert finding(report, "GPU").detail.startswith("no GPU: nvidia-smi not found")
    assert report.architectures == llama_default_architectures((12, 4))
    assert not report.fails
    report = analyse(system, ["/usr/local/cuda-12.4"], default_search=False, arch=("8.9",))
    assert report.architectures == ["89"] and report.architectures_source == "--arch"


def test_nvidia_smi_failing(tmp_path):
    failing = RunResult(9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                           "Make sure that the latest NVIDIA driver is installed and running.\n")
    system, _ = _good_linux(tmp_path, smi=failing)
    report = analyse(system, ["/usr/local/cuda-12.4"], default_search=False, arch=("86",))
    assert finding(report, "GPU").detail.startswith(
        "no GPU: nvidia-smi failed (exit 9): NVIDIA-SMI has failed because it couldn't communicate")
    assert report.env["CMAKE_CUDA_ARCHITECTURES"] == "86"


def test_old_driver_without_compute_cap_field(tmp_path):
    system, runner = _good_linux(tmp_path, smi=RunResult(2, 'Field "compute_cap" is not a valid field to query.\n'))
    runner.add("/usr/bin/nvidia-smi", RunResult(0, "Tesla T4, 470.82.01\n"),
               args=["--query-gpu=name,driver_version", "--format=csv,noheader"])
    report = analyse(system, ["/usr/local/cuda-12.4"], default_search=False)
    assert report.gpus.gpus[0].compute_cap is None
    assert finding(report, "GPU 0").status == "warn"
    assert finding(report, "driver").status == "fail"  # 470 < 525.60.13 for CUDA 12


def test_two_gpus_and_driver_below_toolkit_own(tmp_path):
    smi = "NVIDIA GeForce RTX 3090, 8.6, 535.183.01\nNVIDIA GeForce RTX 4090, 8.9, 535.183.01\n"
    system, _ = _good_linux(tmp_path, smi=smi)
    report = analyse(system, ["/usr/local/cuda-12.4"], default_search=False)
    assert report.architectures == ["86-real", "89"]
    driver = finding(report, "driver")
    assert driver.status == "warn" and "550.54.14" in driver.detail
    assert not report.fails


def test_gpu_the_toolkit_cannot_compile_for_picks_another(tmp_path):
    system, runner = linux_system(tmp_path)
    linux_toolkit(system, "/tk/cuda-12.9", "12.9.1", gcc_max=14)
    linux_toolkit(system, "/tk/cuda-13.0", "13.0.1", gcc_max=15)
    linux_basics(system, runner, smi="NVIDIA GeForce GTX 1080 Ti, 6.1, 580.82.07\n")
    report = analyse(system, ["/tk"], default_search=False)
    assert report.chosen.version == "12.9.1"  # CUDA 13 dropped sm_61
    report = analyse(system, ["/tk/cuda-13.0"], default_search=False)
    problem = finding(report, "architectures")
    assert problem.status == "fail" and problem.detail == "CUDA 13.0.1 cannot compile for sm_61"


def test_blackwell_needs_cuda_12_8(tmp_path):
    system, _ = _good_linux(tmp_path, smi="NVIDIA GeForce RTX 5090, 12.0, 570.124.04\n")
    report = analyse(system, ["/usr/local/cuda-12.4"], default_search=False)
    assert report.architectures == ["120a-real"]
    assert any(f.detail == "CUDA 12.4.1 cannot compile for sm_120" for f in report.findings)
    assert report.fails


def test_paths_with_spaces_use_encoded_rustflags(tmp_path):
    system, runner = linux_system(tmp_path)
    linux_toolkit(system, "/opt/my tools/cuda-12.4", "12.4.1")
    linux_basics(system, runner, smi="NVIDIA GeForce RTX 3090, 8.6, 550.54.15\n")
    report = analyse(system, ["/opt/my tools"], default_search=False)
    assert report.env["CARGO_ENCODED_RUSTFLAGS"] == (
        "-L\x1fnative=/opt/my tools/cuda-12.4/lib64\x1f-L\x1fnative=/opt/my tools/cuda-12.4/lib64/stubs")
    assert "RUSTFLAGS" not in report.env
    assert '-DCUDAToolkit_ROOT="/opt/my tools/cuda-12.4"' in report.env["CMAKE_ARGS"]


# --- Windows ---------------------------------------------------------------------------------------

def test_windows_complete_and_incomplete_toolkits(tmp_path):
    system, runner = windows_system(tmp_path, toolsets=("14.38.33130",))
    windows_toolkit(system, "12.4")
    windows_toolkit(system, "12.6", parts=set(ALL_PARTS) - {"cublasLt"})
    system.env["CUDA_PATH"] = r"C:\Program Files\NVIDIA GPU Computing Toolkit\CUDA\v12.6"
    system.env["CUDA_PATH_V12_4"] = r"C:\Program Files\NVIDIA GPU Computing Toolkit\CUDA\v12.4"
    runner.add("vcvars64.bat", vcvars_answer("14.38.33130"))
    smi = r"C:\Windows\System32\nvidia-smi.exe"
    system.real(smi).parent.mkdir(parents=True, exist_ok=True)
    system.real(smi).write_text("")
    runner.add(smi, RunResult(0, "NVIDIA GeForce RTX 4090, 8.9, 560.94\n"))
    report = analyse(system)
    by_version = {tk.version: tk for tk in report.toolkits}
    assert by_version["12.6.1"].missing == ["cublasLt"]
    assert report.chosen.version == "12.4.1"
    assert by_version["12.4.1"].libraries["driver stub"].endswith(r"\lib\x64\cuda.lib")
    assert not report.fails, [f for f in report.findings if f.status == "fail"]
    assert report.env["INCLUDE"].startswith(VS_PATH + r"\VC\Tools\MSVC\14.38.33130\include;")
    assert report.env["LIB"].endswith(r"10.0.22621.0\ucrt\x64")
    assert report.path_prepend[:3] == [
        r"C:\Program Files\NVIDIA GPU Computing Toolkit\CUDA\v12.4\bin",
        VS_PATH + r"\VC\Tools\MSVC\14.38.33130\bin\HostX64\x64",
        r"C:\Program Files (x86)\Windows Kits\10\bin\10.0.22621.0\x64",
    ]
    assert report.env["CMAKE_GENERATOR"] == "Ninja"
    assert finding(report, "ninja").detail.endswith("(bundled with Visual Studio)")
    assert report.env["CMAKE_ARGS"] == (
        '-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=89 '
        '-DCUDAToolkit_ROOT="C:/Program Files/NVIDIA GPU Computing Toolkit/CUDA/v12.4" '
        '-DCMAKE_CUDA_COMPILER="C:/Program Files/NVIDIA GPU Computing Toolkit/CUDA/v12.4/bin/nvcc.exe"')
    assert report.env["CARGO_ENCODED_RUSTFLAGS"] == \
        "-L\x1fnative=C:\\Program Files\\NVIDIA GPU Computing Toolkit\\CUDA\\v12.4\\lib\\x64"
    assert report.cmake_pick == r"C:\Program Files\NVIDIA GPU Computing Toolkit\CUDA\v12.6"


def test_windows_msvc_too_new_uses_older_toolset(tmp_path):
    system, runner = windows_system(tmp_path, toolsets=("14.40.33807", "14.39.33519"))
    windows_toolkit(system, "12.4", msvc_below=1940)
    runner.add("vcvars64.bat", vcvars_answer("14.40.33807"))
    runner.add("-vcvars_ver=14.39.33519", vcvars_answer("14.39.33519"))
    report = analyse(system, arch=("8.6",))
    msvc = finding(report, "MSVC")
    assert msvc.status == "warn"
    assert msvc.detail == ("default MSVC 14.40.33807 (_MSC_VER 1940) is newer than CUDA 12.4.1 accepts "
                           "(_MSC_VER 1910..1939); toolset 14.39.33519 is installed and accepted")
    assert report.compiler.version == "14.39.33519"
    assert "14.39.33519" in report.env["INCLUDE"]
    assert any("-vcvars_ver=14.39.33519" in call for call in runner.calls if isinstance(call, str))


def test_windows_msvc_too_new_without_alternative(tmp_path):
    system, runner = windows_system(tmp_path, toolsets=("14.40.33807",))
    windows_toolkit(system, "12.4", msvc_below=1940)
    windows_toolkit(system, "12.6", msvc_below=1950, parts=set(ALL_PARTS))
    runner.add("vcvars64.bat", vcvars_answer("14.40.33807"))
    report = analyse(system, [r"C:\Program Files\NVIDIA GPU Computing Toolkit\CUDA\v12.4"],
                     default_search=False, arch=("8.6",))
    msvc = finding(report, "MSVC")
    assert msvc.status == "fail" and report.fails
    assert msvc.detail == "MSVC 14.40.33807 (_MSC_VER 1940) is not accepted by CUDA 12.4.1 (_MSC_VER 1910..1939)"
    assert "-allow-unsupported-compiler" in msvc.fix and "MSVC v143 14.39" in msvc.fix
    # Searching the 12.6 folder as well: it is newer, complete and accepts 1940, so it is chosen.
    report = analyse(system, arch=("8.6",))
    assert report.chosen.version == "12.6.1" and finding(report, "MSVC").status == "ok"


def test_windows_no_visual_studio_and_no_sdk(tmp_path):
    system, runner = windows_system(tmp_path, sdk=False, ninja_bundled=False)
    windows_toolkit(system, "12.4")
    system.real(r"C:\Program Files (x86)\Microsoft Visual Studio\Installer\vswhere.exe").unlink()
    report = analyse(system, arch=("8.6",))
    assert finding(report, "MSVC").detail == "vswhere.exe not found (no Visual Studio 2017+ installer)"
    assert finding(report, "Windows SDK").status == "fail"
    assert statuses(report, "ninja") == ["warn"]
    assert report.fails


def test_windows_vswhere_garbage(tmp_path):
    system, runner = windows_system(tmp_path)
    windows_toolkit(system, "12.4")
    from moetools.buildenv import probes
    runner.add(probes.VSWHERE, RunResult(0, "<html>"))
    report = analyse(system, arch=("8.6",))
    assert finding(report, "MSVC").detail.startswith("vswhere answered something that is not its JSON list")


# --- the real machine ------------------------------------------------------------------------------

def test_real_machine_default_search_does_not_crash():
    """Whatever this machine holds (an nvcc on PATH or nothing), the analysis completes."""
    report = analyse(System.current(), arch=("8.6",))
    assert isinstance(report.findings, list) and report.findings


def test_startup_imports_no_numpy_or_gguf():
    code = ("import sys; from moetools.cli import cli; import moetools.buildenv.command, moetools.buildenv.core, "
            "moetools.buildenv.render; print(sorted(m for m in ('numpy', 'gguf', 'rich') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_windows_without_toolkit_and_failing_vcvars(tmp_path):
    system, runner = windows_system(tmp_path, toolsets=("14.38.33130",))
    runner.add("vcvars64.bat", RunResult(1, "", "[ERROR:vcvars.bat] Toolset directory for version '14.38' was not found."))
    report = analyse(system, arch=("8.6",))
    assert finding(report, "CUDA toolkit").status == "fail"
    assert finding(report, "MSVC").detail == ("MSVC 14.38.33130 (_MSC_VER 1938) in Visual Studio Community 2022; "
                                              "no toolkit to check it against")
    assert finding(report, "vcvars64.bat").detail.endswith(
        r"vcvars64.bat failed: [ERROR:vcvars.bat] Toolset directory for version '14.38' was not found.")
    assert "INCLUDE" not in report.env


def test_unreadable_driver_version_is_reported_not_a_crash(tmp_path):
    system, _ = _good_linux(tmp_path, smi="NVIDIA GeForce RTX 3090, 8.6, [N/A]\n")
    report = analyse(system, ["/usr/local/cuda-12.4"], default_search=False)
    driver = finding(report, "driver")
    assert driver.status == "info" and "unreadable" in driver.detail
