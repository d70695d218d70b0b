"""Fake machines for build-env tests: CUDA toolkit trees (Linux and Windows layouts, complete,
incomplete, broken), compilers, Visual Studio and a runner that answers like nvcc, nvidia-smi,
vswhere, cmake and ninja would. No real CUDA needed."""

import json
import os
from pathlib import Path

from moetools.buildenv.system import RunResult, System

ALL_PARTS = ("nvcc", "cuda.h", "host_config", "version.json", "cudart", "cublas", "cublasLt", "stub")


def host_config_text(gcc_max=13, clang_max=17, msvc_below=1940):
    """A crt/host_config.h shaped like NVIDIA's (the checks as CUDA 12.x/13.0 write them)."""
    return f"""/* host_config.h */
#if !defined(__HOST_CONFIG_H__)
#define __HOST_CONFIG_H__
#if defined(__CUDACC__)
/* check host compiler version  */
#if !__NV_NO_HOST_COMPILER_CHECK
#if defined(__GNUC__)

#if __GNUC__ > {gcc_max}

#error -- unsupported GNU version! gcc versions later than {gcc_max} are not supported! The nvcc flag '-allow-unsupported-compiler' can be used to override this version check; however, using an unsupported host compiler may cause compilation failure or incorrect run time execution. Use at your own risk.

#endif /* __GNUC__ > {gcc_max} */

#if defined(__clang__) && !defined(__ibmxl_vrm__) && !defined(__ICC) && !defined(__HORIZON__) && !defined(__APPLE__)

#if (__clang_major__ >= {clang_max + 1}) || (__clang_major__ < 3) || ((__clang_major__ == 3) &&  (__clang_minor__ < 3))
#error -- unsupported clang version! clang version must be less than {clang_max + 1} and greater than 3.2 . The nvcc flag '-allow-unsupported-compiler' can be used to override this version check.

#endif
#endif /* __GNUC__ */
#endif
#if defined(_WIN32)

#if _MSC_VER < 1910 || _MSC_VER >= {msvc_below}

#error -- unsupported Microsoft Visual Studio version! Only the versions between 2017 and 2022 (inclusive) are supported! The nvcc flag '-allow-unsupported-compiler' can be used to override this version check.

#endif
#endif /* _WIN32 */
#endif
#endif
#endif
"""


def _write(path, text="", executable=False):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if executable:
        path.chmod(0o755)
    return path


def linux_toolkit(system, vpath, version="12.4.1", parts=ALL_PARTS, gcc_max=13, clang_max=17,
                  version_json=None, runtime_only=()):
    """A Linux toolkit at virtual `vpath` holding `parts` (see ALL_PARTS), laid out like NVIDIA's
    installer: lib64 -> targets/x86_64-linux/lib, include -> targets/x86_64-linux/include."""
    root = system.real(vpath)
    target = root / "targets" / "x86_64-linux"
    (target / "lib").mkdir(parents=True, exist_ok=True)
    (target / "include").mkdir(parents=True, exist_ok=True)
    if not (root / "lib64").exists():
        os.symlink("targets/x86_64-linux/lib", root / "lib64")
    if not (root / "include").exists():
        os.symlink("targets/x86_64-linux/include", root / "include")
    major, minor = (int(x) for x in version.split(".")[:2])
    if "nvcc" in parts:
        _write(root / "bin" / "nvcc", "#!/bin/sh\n", executable=True)
    if "cuda.h" in parts:
        _write(target / "include" / "cuda.h", f"#define CUDA_VERSION {major * 1000 + minor * 10}\n")
    if "host_config" in parts:
        _write(target / "include" / "crt" / "host_config.h", host_config_text(gcc_max, clang_max))
    if "version.json" in parts:
        text = version_json if version_json is not None else json.dumps(
            {"cuda": {"name": "CUDA SDK", "version": version},
             "cuda_cudart": {"name": "CUDA Runtime (cudart)", "version": version}})
        _write(root / "version.json", text)
    for part, base in (("cudart", "cudart"), ("cublas", "cublas"), ("cublasLt", "cublasLt")):
        if part in parts:
            _write(target / "lib" / f"lib{base}.so.{major}", "")
            os.symlink(f"lib{base}.so.{major}", target / "lib" / f"lib{base}.so")
        elif part in runtime_only:
            _write(target / "lib" / f"lib{base}.so.{major}", "")
    if "stub" in parts:
        _write(target / "lib" / "stubs" / "libcuda.so", "")
    return vpath


def windows_toolkit(system, version="12.4", parts=ALL_PARTS, msvc_below=1940, vpath=None):
    """A Windows toolkit in Program Files (or `vpath`): bin\\nvcc.exe, include, lib\\x64\\*.lib."""
    vpath = vpath or rf"C:\Program Files\NVIDIA GPU Computing Toolkit\CUDA\v{version}"
    root = system.real(vpath)
    major, minor = (int(x) for x in version.split(".")[:2])
    if "nvcc" in parts:
        _write(root / "bin" / "nvcc.exe")
    if "cuda.h" in parts:
        _write(root / "include" / "cuda.h", f"#define CUDA_VERSION {major * 1000 + minor * 10}\n")
    if "host_config" in parts:
        _write(root / "include" / "crt" / "host_config.h", host_config_text(msvc_below=msvc_below))
    if "version.json" in parts:
        _write(root / "version.json", json.dumps({"cuda": {"name": "CUDA SDK", "version": version + ".1"}}))
    for part, base in (("cudart", "cudart"), ("cublas", "cublas"), ("cublasLt", "cublasLt"), ("stub", "cuda")):
        if part in parts:
            _write(root / "lib" / "x64" / f"{base}.lib")
    return vpath


class FakeRunner:
    """Answers programs by virtual path (argv[0]) and arguments; unknown programs cannot start."""

    def __init__(self):
        self.answers = {}
        self.calls = []

    def add(self, program, result, args=None):
        self.answers[(program, None if args is None else tuple(args))] = result

    def __call__(self, argv, timeout):
        self.calls.append(argv)
        if isinstance(argv, str):  # a cmd.exe command line (vcvars): the longest key it contains
            matches = [(len(program), result) for (program, _), result in self.answers.items() if program in argv]
            return max(matches, key=lambda m: m[0])[1] if matches else None
        key = (argv[0], tuple(argv[1:]))
        if key in self.answers:
            return self.answers[key]
        return self.answers.get((argv[0], None))


def linux_system(tmp_path, env=None):
    runner = FakeRunner()
    system = System(env=dict(env or {}), root=tmp_path / "root", run=runner, platform="linux")
    system.real("/").mkdir(parents=True, exist_ok=True)
    return system, runner


def add_tool(system, runner, vpath, answer):
    """An executable at virtual `vpath` answering `answer` (stdout) to any arguments."""
    _write(system.real(vpath), "#!/bin/sh\n", executable=True)
    runner.add(vpath, RunResult(0, answer) if isinstance(answer, str) else answer)
    return vpath


def linux_basics(system, runner, gxx="12.2.0", cmake="3.28.3", ninja="1.11.1", smi=None):
    """g++, cmake, ninja (and nvidia-smi when `smi` is given) in /usr/bin."""
    system.env.setdefault("PATH", "/usr/bin")
    if gxx:
        add_tool(system, runner, "/usr/bin/g++", f"g++ (Debian {gxx}-14) {gxx}\nCopyright\n")
    if cmake:
        add_tool(system, runner, "/usr/bin/cmake", f"cmake version {cmake}\n\nCMake suite\n")
    if ninja:
        add_tool(system, runner, "/usr/bin/ninja", f"{ninja}\n")
    if smi is not None:
        add_tool(system, runner, "/usr/bin/nvidia-smi", smi)


VS_PATH = r"C:\Program Files\Microsoft Visual Studio\2022\Community"


def windows_system(tmp_path, toolsets=("14.40.33807", "14.39.33519"), default_toolset=None,
                   sdk=True, ninja_bundled=True, env=None):
    """A Windows machine: VS 2022 with MSVC toolsets, vswhere, vcvars64.bat answered by the
    runner, a Windows SDK with rc.exe/mt.exe, and cmake/ninja bundled with VS."""
    from moetools.buildenv import probes

    runner = FakeRunner()
    system = System(env=dict(env or {"PATH": r"C:\Windows\system32;C:\Windows"}), root=tmp_path / "root",
                    run=runner, platform="windows")
    _write(system.real(probes.VSWHERE))
    runner.add(probes.VSWHERE, RunResult(0, json.dumps([{
        "installationPath": VS_PATH, "installationVersion": "17.10.35004.147",
        "displayName": "Visual Studio Community 2022"}])))
    build = system.real(VS_PATH + r"\VC\Auxiliary\Build")
    _write(build / "vcvars64.bat", "@echo off\n")
    _write(build / "Microsoft.VCToolsVersion.default.txt", (default_toolset or toolsets[0]) + "\n")
    for toolset in toolsets:
        _write(system.real(VS_PATH + rf"\VC\Tools\MSVC\{toolset}\bin\Hostx64\x64\cl.exe"))
    sdk_ver = r"C:\Program Files (x86)\Windows Kits\10\bin\10.0.22621.0"
    if sdk:
        _write(system.real(sdk_ver + r"\x64\rc.exe"))
        _write(system.real(sdk_ver + r"\x64\mt.exe"))
    cmake = VS_PATH + "\\" + probes.VS_BUNDLED_CMAKE
    _write(system.real(cmake))
    runner.add(cmake, RunResult(0, "cmake version 3.28.0-msvc1\n"))
    if ninja_bundled:
        ninja = VS_PATH + "\\" + probes.VS_BUNDLED_NINJA
        _write(system.real(ninja))
        runner.add(ninja, RunResult(0, "1.11.0\n"))
    return system, runner


def vcvars_answer(toolset, path_before=r"C:\Windows\system32;C:\Windows"):
    """What `vcvars64.bat ... && set` prints for one toolset."""
    msvc_bin = VS_PATH + rf"\VC\Tools\MSVC\{toolset}\bin\HostX64\x64"
    lines = [
        f"INCLUDE={VS_PATH}\\VC\\Tools\\MSVC\\{toolset}\\include;C:\\Program Files (x86)\\Windows Kits\\10\\include\\10.0.22621.0\\ucrt",
        f"LIB={VS_PATH}\\VC\\Tools\\MSVC\\{toolset}\\lib\\x64;C:\\Program Files (x86)\\Windows Kits\\10\\lib\\10.0.22621.0\\ucrt\\x64",
        f"LIBPATH={VS_PATH}\\VC\\Tools\\MSVC\\{toolset}\\lib\\x64",
        f"Path={msvc_bin};C:\\Program Files (x86)\\Windows Kits\\10\\bin\\10.0.22621.0\\x64;{path_before}",
        "WindowsSdkVerBinPath=C:\\Program Files (x86)\\Windows Kits\\10\\bin\\10.0.22621.0\\",
        f"VCToolsVersion={toolset}",
    ]
    return RunResult(0, "\r\n".join(lines) + "\r\n")
