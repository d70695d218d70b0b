"""build-env's core: find the toolchain, pick what works, explain what does not, compute the env.

`analyse(system, ...)` returns a `Report`: every toolkit found and scored, the chosen one and the
one CMake would pick alone, the host compiler, cmake, Ninja, the GPUs and their architectures, on
Windows the MSVC environment and SDK tools, the findings (each with a fix) and the environment to
print. Pure: all probing goes through the injected `System`; nothing here prints.
"""

import re
from dataclasses import dataclass, field

from moetools.buildenv import probes
from moetools.buildenv.facts import (
    ALLOW_UNSUPPORTED, ARCH_FIRST_CUDA, ARCH_SPECIFIC, CMAKE_MIN_CUDA, OLDEST_ARCH_FOR_MAJOR,
    driver_minimum, version_tuple,
)
from moetools.buildenv.toolkit import cmake_pick, discover, nvcc_root
from moetools.errors import UsageError

OK, INFO, WARN, FAIL = "ok", "info", "warn", "fail"


@dataclass
class Finding:
    """One line of the check: what was looked at, its status, what was found, how to fix it."""

    item: str
    status: str  # ok | info | warn | fail
    detail: str
    fix: str = ""

    def to_json(self):
        return {"item": self.item, "status": self.status, "detail": self.detail, "fix": self.fix}


@dataclass
class Report:
    """Everything build-env found. `env` is ordered name -> value (PATH excluded), `path_prepend`
    the folders to put in front of PATH; `fails` is True when the build would fail."""

    platform: str
    allow_unsupported: bool = False
    toolkits: list = field(default_factory=list)
    chosen: object = None
    cmake_pick: str = None
    cmake_pick_reason: str = ""
    compiler: object = None
    host_override: str = None  # host compiler to name through CUDAHOSTCXX (not nvcc's default g++)
    compilers: list = field(default_factory=list)
    cmake: object = None
    ninja: object = None
    gpus: object = None
    architectures: list = field(default_factory=list)
    architectures_source: str = ""
    sdk_bin: str = None
    findings: list = field(default_factory=list)
    env: dict = field(default_factory=dict)
    path_prepend: list = field(default_factory=list)

    @property
    def fails(self):
        return any(f.status == FAIL for f in self.findings)

    @property
    def problems(self):
        return [f for f in self.findings if f.status in (WARN, FAIL)]

    def add(self, item, status, detail, fix=""):
        self.findings.append(Finding(item, status, detail, fix))


# --- architectures ---------------------------------------------------------------------------------

_ARCH_RE = re.compile(r"(\d+)\.(\d+)|(\d{2,3})([af]?)(-real|-virtual)?")
# CMake's special values: all / all-major need CMake 3.23, native 3.24 (and a GPU at build time).
ARCH_KEYWORDS = {"all": (3, 23), "all-major": (3, 23), "native": (3, 24)}


def parse_arch_list(values):
    """`--arch` values ("8.6", "86", "89-real", "120a", comma or semicolon separated) -> CMake
    CUDA_ARCHITECTURES entries. Raises UsageError naming a value that is not an architecture."""
    result = []
    for value in values:
        for token in re.split(r"[,;\s]+", value.strip()):
            if not token:
                continue
            if token in ARCH_KEYWORDS:
                if token not in result:
                    result.append(token)
                continue
            match = _ARCH_RE.fullmatch(token)
            if not match:
                raise UsageError(f"--arch {token}: not a CUDA architecture (use 8.6, 86, 86-real, 120a, "
                                 "native, all or all-major)")
            if match.group(1):
                number = int(match.group(1)) * 10 + int(match.group(2))
                entry = f"{number}a-real" if number in ARCH_SPECIFIC else str(number)
            else:
                entry = token
            if entry not in result:
                result.append(entry)
    return result


def arch_number(entry):
    match = re.match(r"(\d+)", entry)
    return int(match.group(1)) if match else None


def architectures_for(caps):
    """CMAKE_CUDA_ARCHITECTURES for GPUs of compute capabilities `caps` ("8.6", ...).

    Follows llama.cpp's conventions: real (SASS) code for every GPU; the newest one without a
    suffix so PTX is also embedded and a future GPU or driver can JIT it; Blackwell 12.x as the
    arch-specific `120a-real` its FP4 kernels need (llama.cpp lists it so).
    """
    numbers = sorted({int(c.split(".")[0]) * 10 + int(c.split(".")[1]) for c in caps})
    entries = []
    plain = max((n for n in numbers if n not in ARCH_SPECIFIC), default=None)
    for number in numbers:
        if number in ARCH_SPECIFIC:
            entries.append(f"{number}a-real")
        elif number == plain:
            entries.append(str(number))
        else:
            entries.append(f"{number}-real")
    return entries


def llama_default_architectures(cuda_version):
    """llama.cpp's own portable list when it cannot build for the GPUs present (GGML_NATIVE off),
    as its ggml-cuda CMakeLists.txt builds it for a toolkit version."""
    version = tuple(cuda_version[:2])
    entries = []
    if version < (13,):
        entries += ["50-virtual", "61-virtual", "70-virtual"]
    entries += ["75-virtual", "80-virtual", "86-real"]
    if version >= (11, 8):
        entries += ["89-real", "90-virtual"]
    if version >= (12, 8):
        entries.append("120a-real")
    if version >= (12, 9):
        entries.append("121a-real")
    return entries


def arch_supported(number, cuda_version):
    """False when the toolkit cannot compile for architecture `number` (86, 120); None = unknown."""
    if not cuda_version:
        return None
    oldest = OLDEST_ARCH_FOR_MAJOR.get(cuda_version[0])
    if oldest is not None and number < oldest:
        return False
    first = ARCH_FIRST_CUDA.get(number)
    if first is not None:
        return tuple(cuda_version[:2]) >= first
    return None


# --- the analysis ----------------------------------------------------------------------------------

def _fix_for_missing(tk, system):
    """Install hints for the parts a toolkit lacks."""
    version = version_tuple(tk.version) or ()
    suffix = f"-{version[0]}-{version[1]}" if len(version) >= 2 else ""
    if system.windows:
        return ("rerun the CUDA installer and select the missing components (CUDA Runtime, cuBLAS "
                "Development, Compiler)")
    packages = {"nvcc": f"cuda-nvcc{suffix}", "include/cuda.h": f"cuda-driver-dev{suffix}",
                "cudart": f"cuda-cudart-dev{suffix}", "cublas": f"libcublas-dev{suffix}",
                "cublasLt": f"libcublas-dev{suffix}", "driver stub": f"cuda-driver-dev{suffix}",
                "version": f"cuda-toolkit{suffix} (reinstall: neither version.json nor cuda.h says the version)"}
    wanted = []
    for item in tk.missing:
        package = packages.get(item)
        if package and package not in wanted:
            wanted.append(package)
    return ("install " + ", ".join(wanted) + " (NVIDIA apt/dnf repo names; conda: cuda-toolkit "
            "from the nvidia channel)") if wanted else ""


def _check_toolkits(report, system, toolkits, search_paths, default_search):
    for tk in toolkits:
        label = f"toolkit {tk.path}"
        version = tk.version or "version unknown"
        if tk.complete:
            report.add(label, OK, f"CUDA {version}, complete")
        else:
            kind = "incomplete" if tk.usable else "not usable (none of the libraries llama.cpp links)"
            report.add(label, INFO, f"CUDA {version}, {kind}: missing {', '.join(tk.missing)}",
                       _fix_for_missing(tk, system))
        for severity, text, fix in tk.notes:
            report.add(label, WARN if severity == "warn" else INFO, text, fix)
    if not toolkits:
        where = ", ".join(search_paths) if not default_search else \
            "CUDA_PATH, CUDA_PATH_V*, CUDA_HOME, nvcc on PATH, CONDA_PREFIX and the standard folders" + \
            (f", {', '.join(search_paths)}" if search_paths else "")
        report.add("CUDA toolkit", FAIL, f"no CUDA toolkit found (searched {where})",
                   "install the CUDA toolkit (developer.nvidia.com/cuda-downloads, or conda install -c "
                   "nvidia cuda-toolkit), or point --search-path at its folder")
    elif report.chosen is None:
        lacking = "; ".join(f"{tk.path} lacks {', '.join(tk.missing)}" for tk in toolkits)
        report.add("CUDA toolkit", FAIL, f"no complete CUDA toolkit: {lacking}",
                   "install the missing parts (see each toolkit's fix) or a full CUDA toolkit")


def _check_variables(report, system):
    """Toolkit variables already set that point nowhere: CMake follows some of them blindly."""
    for name in ("CUDAToolkit_ROOT", "CUDA_PATH", "CUDA_HOME", "CUDACXX"):
        value = system.getenv(name)
        if value and not system.exists(value):
            report.add(name, WARN, f"{name}={value} does not exist",
                       f"unset {name} or point it at a toolkit (the printed environment replaces it)")


def _choose(toolkits, caps):
    """Newest complete toolkit that compiles for every GPU present; else the newest complete one."""
    complete = sorted((tk for tk in toolkits if tk.complete), key=lambda tk: tk.version_key, reverse=True)
    if not complete:
        return None
    numbers = [int(c.split(".")[0]) * 10 + int(c.split(".")[1]) for c in caps]
    for tk in complete:
        if all(arch_supported(n, tk.version_key) is not False for n in numbers):
            return tk
    return complete[0]


def _check_cmake_pick(report, system, toolkits, default_search):
    if not default_search:
        return
    pick, reason = cmake_pick(system, toolkits)
    report.cmake_pick, report.cmake_pick_reason = pick, reason
    cudacxx = system.getenv("CUDACXX")
    if cudacxx and pick and system.exists(cudacxx) and nvcc_root(system, cudacxx) != pick:
        # enable_language(CUDA) takes nvcc from CUDACXX, find_package(CUDAToolkit) the libraries.
        report.add("CUDACXX", WARN,
                   f"CUDACXX={cudacxx} belongs to another toolkit than find_package(CUDAToolkit) picks "
                   f"({pick}): nvcc and the libraries would come from different toolkits",
                   "use the printed environment, which points both at one toolkit")
    chosen = report.chosen
    if chosen is None:
        if pick:
            report.add("CMake's own pick", INFO, f"{pick} ({reason})")
        return
    if pick == chosen.path:
        report.add("CMake's own pick", OK, f"{pick} ({reason}), the same toolkit")
        return
    picked = next((tk for tk in toolkits if tk.path == pick), None)
    if pick is None:
        why = reason
    elif picked is None:
        why = f"{pick} ({reason})"
    elif not picked.complete:
        why = f"{pick} ({reason}), incomplete: missing {', '.join(picked.missing)}"
    else:
        why = f"{pick} ({reason}), CUDA {picked.version} instead of {chosen.version}"
    report.add("CMake's own pick", WARN, f"CMake alone would use {why}",
               f"use the printed environment: it sets CUDAToolkit_ROOT and CUDACXX to {chosen.path}")


def _accepting_toolkit(toolkits, compiler, exclude):
    """'; CUDA X at P accepts it' for another toolkit found whose host_config.h accepts `compiler`
    (complete ones first), or ''."""
    others = [tk for tk in toolkits if tk is not exclude and tk.host_limits
              and tk.host_limits.accepts(compiler.kind, compiler.check_version)]
    if not others:
        return ""
    others.sort(key=lambda tk: (tk.complete, tk.version_key), reverse=True)
    best = others[0]
    state = "" if best.complete else f" (once complete: it lacks {', '.join(best.missing)})"
    return f"; CUDA {best.version} at {best.path} accepts it{state}"


def _check_unix_compiler(report, system, toolkits, allow_unsupported):
    default, compilers = probes.unix_compilers(system)
    report.compilers = compilers
    # Without a complete toolkit, still check against the newest one that says what it accepts.
    tk = report.chosen or next((t for t in toolkits if t.host_limits), None)
    if default is None and not compilers:
        report.add("host compiler", FAIL, "no g++ or clang++ on PATH",
                   "install a C++ compiler the toolkit accepts (apt install g++ / dnf install gcc-c++)")
        return
    if system.getenv("CUDAHOSTCXX") and default is not None:
        report.host_override = default.path
    if default is None:
        default = compilers[0]
        report.host_override = default.path
        report.add("host compiler", WARN, "no g++ on PATH (nvcc's default host compiler), or CUDAHOSTCXX "
                   "names none", f"the environment names {default.path} through CUDAHOSTCXX")
    if tk is None:
        report.compiler = default
        report.add("host compiler", INFO, f"{default.label} ({default.path}); no toolkit to check it against")
        return
    limits = tk.host_limits
    if limits is None:
        report.compiler = default
        report.add("host compiler", WARN,
                   f"{default.label}: cannot check, {tk.path} has no include/crt/host_config.h",
                   "reinstall the toolkit's headers (cuda-crt / cuda-nvcc)")
        return
    if limits.accepts(default.kind, default.check_version) is not False:
        report.compiler = default
        report.add("host compiler", OK, f"{default.label} ({default.path}); CUDA {tk.version} accepts "
                   f"{limits.describe(default.kind)}")
        return
    accepted = [c for c in compilers if limits.accepts(c.kind, c.check_version)]
    accepted.sort(key=lambda c: (c.kind == default.kind, version_tuple(c.version)), reverse=True)
    if accepted:
        report.compiler = accepted[0]
        report.host_override = accepted[0].path
        report.add("host compiler", WARN,
                   f"default {default.label} ({default.path}) is newer than CUDA {tk.version} accepts "
                   f"({limits.describe(default.kind)}); {accepted[0].label} ({accepted[0].path}) is",
                   f"the environment sets CUDAHOSTCXX={accepted[0].path}")
        return
    report.compiler = default
    alternatives = _accepting_toolkit(toolkits, default, tk)
    detail = (f"{default.label} ({default.path}) is not accepted by CUDA {tk.version} "
              f"({limits.describe(default.kind)}){alternatives}")
    risk = (f"or pass {ALLOW_UNSUPPORTED} (--allow-unsupported-compiler), at the risk of compile "
            "errors or wrong code")
    fix = (f"install a compiler in that range (e.g. g++-{limits.gcc_max} when gcc) and rerun, "
           f"{risk}" if default.kind == "gcc" and limits.gcc_max else f"install a compiler in that range, {risk}")
    if allow_unsupported:
        report.add("host compiler", WARN, detail + f"; {ALLOW_UNSUPPORTED} given", fix)
    else:
        report.add("host compiler", FAIL, detail, fix)


def _check_msvc(report, system, toolkits, allow_unsupported):
    installs, problem = probes.vs_installs(system)
    if problem:
        report.add("MSVC", FAIL, problem,
                   "install Visual Studio 2022 or its Build Tools with 'Desktop development with C++'")
        return None
    toolsets = [c for install in installs for c in probes.msvc_toolsets(system, install)]
    report.compilers = toolsets
    if not toolsets:
        report.add("MSVC", FAIL, "Visual Studio found, but no MSVC x64 toolset (cl.exe) in it",
                   "add the 'MSVC v143 - VS 2022 C++ x64/x86 build tools' component")
        return None
    tk = report.chosen or next((t for t in toolkits if t.host_limits), None)
    limits = tk.host_limits if tk else None
    default = toolsets[0]
    chosen = default
    if limits is not None and limits.accepts("msvc", default.check_version) is False:
        accepted = [c for c in toolsets if limits.accepts("msvc", c.check_version)]
        if accepted:
            chosen = accepted[0]
            report.add("MSVC", WARN,
                       f"default {default.label} is newer than CUDA {tk.version} accepts "
                       f"({limits.describe('msvc')}); toolset {chosen.version} is installed and accepted",
                       f"the environment runs vcvars64.bat -vcvars_ver={chosen.version}")
        else:
            also = _accepting_toolkit(toolkits, default, tk)
            detail = (f"{default.label} is not accepted by CUDA {tk.version} "
                      f"({limits.describe('msvc')}){also}")
            fix = ("install an older MSVC toolset side by side (Visual Studio Installer, Individual "
                   f"components, e.g. MSVC v143 14.{(limits.msvc_max or 1900) - 1900}), a newer CUDA, "
                   f"or pass {ALLOW_UNSUPPORTED} at the risk of compile errors")
            report.add("MSVC", WARN if allow_unsupported else FAIL, detail, fix)
    elif limits is None and tk is not None:
        report.add("MSVC", WARN, f"{default.label}: cannot check, no include/crt/host_config.h in {tk.path}")
    else:
        where = default.vs.get("displayName") or default.vs["installationPath"]
        if tk is None:
            report.add("MSVC", INFO, f"{default.label} in {where}; no toolkit to check it against")
        else:
            report.add("MSVC", OK, f"{default.label} in {where}; CUDA {tk.version} accepts {limits.describe('msvc')}")
    report.compiler = chosen
    toolset = chosen.version if chosen is not default else None
    vcvars, problem = probes.vcvars_environment(system, chosen.vs, toolset)
    if problem:
        report.add("vcvars64.bat", FAIL, problem, "repair the Visual Studio install (C++ x64 tools)")
    return vcvars, chosen.vs


def _check_cmake(report, system, vs):
    extra = [system.join(vs["installationPath"], probes.VS_BUNDLED_CMAKE)] if vs else []
    cmake = probes.find_tool(system, "cmake", extra)
    report.cmake = cmake
    need = ".".join(map(str, CMAKE_MIN_CUDA))
    if cmake.path is None:
        report.add("cmake", FAIL, "cmake not found", f"install cmake >= {need} (pip install cmake)")
    elif not cmake.version:
        report.add("cmake", FAIL, f"{cmake.path}: {cmake.why or 'no version'}", f"reinstall cmake >= {need}")
    elif version_tuple(cmake.version)[:2] < CMAKE_MIN_CUDA:
        report.add("cmake", FAIL, f"cmake {cmake.version} ({cmake.path}) is older than {need}, which "
                   "llama.cpp's CUDA backend requires", f"install cmake >= {need} (pip install cmake)")
    else:
        report.add("cmake", OK, f"cmake {cmake.version} ({cmake.path}); CUDA backend needs >= {need}")


def _check_ninja(report, system, vs):
    extra = [system.join(vs["installationPath"], probes.VS_BUNDLED_NINJA)] if vs else []
    ninja = probes.find_tool(system, "ninja", extra)
    report.ninja = ninja
    if ninja.path is None:
        if system.windows:
            detail = ("ninja not found (neither on PATH nor bundled with Visual Studio): CMake falls back "
                      "to the Visual Studio generator, which needs CUDA's MSBuild integration")
            fix = "install the 'C++ CMake tools for Windows' VS component, or pip install ninja"
        else:
            detail = "ninja not found: CMake falls back to Unix Makefiles (slower builds)"
            fix = "pip install ninja (or apt install ninja-build)"
        report.add("ninja", WARN, detail, fix)
    else:
        bundled = " (bundled with Visual Studio)" if ninja.path in extra else ""
        report.add("ninja", OK, f"ninja {ninja.version or '?'} ({ninja.path}){bundled}")


def _check_gpus(report, system, probe, arch_values):
    report.gpus = probe
    tk = report.chosen
    if probe.problem:
        fix = "" if arch_values else "give --arch for the GPUs the build is for (e.g. --arch 8.6)"
        report.add("GPU", WARN if not arch_values else INFO, f"no GPU: {probe.problem}", fix)
    else:
        for index, gpu in enumerate(probe.gpus):
            cap = gpu.compute_cap or "unknown (driver too old to report compute_cap)"
            report.add(f"GPU {index}", OK if gpu.compute_cap else WARN, f"{gpu.name}, compute capability {cap}",
                       "" if gpu.compute_cap else "give --arch")
    caps = [g.compute_cap for g in probe.gpus if g.compute_cap]
    if arch_values:
        report.architectures = parse_arch_list(arch_values)
        report.architectures_source = "--arch"
    elif caps:
        report.architectures = architectures_for(caps)
        report.architectures_source = "nvidia-smi"
    elif tk is not None:
        report.architectures = llama_default_architectures(tk.version_key)
        report.architectures_source = "llama.cpp default list"
        report.add("architectures", WARN,
                   f"no GPU compute capability known: llama.cpp's portable list for CUDA {tk.version} is used "
                   f"({';'.join(report.architectures)})",
                   "give --arch for a smaller, faster build")
    failures = len([f for f in report.findings if f.status == FAIL])
    if tk is not None:
        for entry in report.architectures:
            number = arch_number(entry)
            if number is not None and arch_supported(number, tk.version_key) is False:
                others = [o for o in report.toolkits if o.complete and arch_supported(number, o.version_key)]
                also = f"; CUDA {others[0].version} at {others[0].path} can" if others else ""
                report.add("architectures", FAIL,
                           f"CUDA {tk.version} cannot compile for sm_{number}{also}",
                           "install a CUDA release that supports it (12.8+ for Blackwell 12.x, 12.x for "
                           "Maxwell/Pascal/Volta) or drop it from --arch")
    cmake_version = version_tuple(report.cmake.version) if report.cmake and report.cmake.version else None
    for entry in report.architectures:
        needed = ARCH_KEYWORDS.get(entry)
        if needed and cmake_version and cmake_version[:2] < needed:
            report.add("architectures", FAIL, f"CMAKE_CUDA_ARCHITECTURES={entry} needs cmake >= "
                       f"{needed[0]}.{needed[1]}, this is {report.cmake.version}",
                       "give explicit architectures (--arch 8.6) or update cmake")
        if entry == "native" and not caps:
            report.add("architectures", FAIL, "CMAKE_CUDA_ARCHITECTURES=native needs a GPU at build time",
                       "give explicit architectures, e.g. --arch 8.6")
    arch_failed = len([f for f in report.findings if f.status == FAIL]) > failures
    if report.architectures and report.architectures_source != "llama.cpp default list" and not arch_failed:
        report.add("architectures", OK, f"CMAKE_CUDA_ARCHITECTURES={';'.join(report.architectures)} "
                   f"(from {report.architectures_source})")
    _check_driver(report, system, probe, tk)


def _check_driver(report, system, probe, tk):
    if tk is None or not probe.driver or not tk.version_key:
        return
    hard, shipped = driver_minimum(tk.version_key, system.windows)
    driver = version_tuple(probe.driver)
    if driver is None:  # nvidia-smi answered e.g. "[N/A]"
        report.add("driver", INFO, f"driver version {probe.driver!r} is unreadable; not checked against CUDA {tk.version}")
    elif hard is None:
        report.add("driver", INFO, f"driver {probe.driver}; no minimum known for CUDA {tk.version}")
    elif driver < version_tuple(hard):
        report.add("driver", FAIL,
                   f"driver {probe.driver} is older than {hard}, the minimum for CUDA {tk.version_key[0]}.x: "
                   "programs built with it will not start",
                   f"update the NVIDIA driver to >= {shipped or hard}, or use an older CUDA toolkit")
    elif shipped and driver < version_tuple(shipped):
        report.add("driver", WARN,
                   f"driver {probe.driver} is older than CUDA {tk.version}'s own ({shipped}): it runs the "
                   "real (SASS) code built for your GPU, but cannot JIT this toolkit's PTX",
                   f"update the driver to >= {shipped}, or keep a -real/plain entry for every GPU")
    else:
        report.add("driver", OK, f"driver {probe.driver} (CUDA {tk.version} needs >= {shipped or hard})")


def _check_sdk(report, system, vcvars):
    folder, problem = probes.windows_sdk_bin(system, vcvars)
    report.sdk_bin = folder
    if problem:
        report.add("Windows SDK", FAIL, problem,
                   "install a Windows 10/11 SDK (Visual Studio Installer, Individual components)")
    else:
        report.add("Windows SDK", OK, f"rc.exe and mt.exe in {folder}")


def analyse(system, search_paths=(), default_search=True, arch=(), allow_unsupported=False):
    """Find and check everything a CUDA build of llama.cpp needs on `system`.

    search_paths: extra folders (virtual paths), each a toolkit or a folder of toolkits;
    default_search False restricts toolkit discovery to them. arch: `--arch` values overriding the
    GPUs' compute capabilities. Returns a Report (findings, env); never raises for what it finds.
    """
    report = Report(platform=system.platform, allow_unsupported=allow_unsupported)
    toolkits = discover(system, search_paths, default_search)
    report.toolkits = toolkits
    # GPUs first: the toolkit choice avoids one that cannot compile for the GPUs present.
    gpu_probe = probes.probe_gpus(system)
    caps = [g.compute_cap for g in gpu_probe.gpus if g.compute_cap] if not arch else \
        [f"{arch_number(e) // 10}.{arch_number(e) % 10}" for e in parse_arch_list(arch) if arch_number(e)]
    report.chosen = _choose(toolkits, caps)
    _check_toolkits(report, system, toolkits, search_paths, default_search)
    if report.chosen:
        report.add("chosen toolkit", OK, f"CUDA {report.chosen.version} at {report.chosen.path}")
    if default_search:
        _check_variables(report, system)
    _check_cmake_pick(report, system, toolkits, default_search)
    vcvars, vs = None, None
    if system.windows:
        answer = _check_msvc(report, system, toolkits, allow_unsupported)
        if answer:
            vcvars, vs = answer
    else:
        _check_unix_compiler(report, system, toolkits, allow_unsupported)
    _check_cmake(report, system, vs)
    _check_ninja(report, system, vs)
    if system.windows:
        _check_sdk(report, system, vcvars)
    _check_gpus(report, system, gpu_probe, arch)
    build_environment(report, system, vcvars)
    return report


# --- the environment -------------------------------------------------------------------------------

def _cmake_value(system, value):
    """A path as a -D value: forward slashes on Windows (CMake's own form, and no backslash escapes
    for shlex-splitting consumers such as pip's CMAKE_ARGS), quoted when it holds a space."""
    if system.windows:
        value = value.replace("\\", "/")
    return f'"{value}"' if re.search(r"\s", value) else value


def cmake_definitions(report, system):
    """[(name, type, value)] for the cmake cache: the -D options of CMAKE_ARGS and --shell cmake."""
    tk = report.chosen
    if tk is None:
        return []
    defs = [("GGML_CUDA", "BOOL", "ON")]
    if report.architectures:
        defs.append(("CMAKE_CUDA_ARCHITECTURES", "STRING", ";".join(report.architectures)))
    defs.append(("CUDAToolkit_ROOT", "PATH", tk.path))
    defs.append(("CMAKE_CUDA_COMPILER", "FILEPATH", tk.nvcc))
    if report.host_override:
        defs.append(("CMAKE_CUDA_HOST_COMPILER", "FILEPATH", report.host_override))
    if report.allow_unsupported:
        defs.append(("CMAKE_CUDA_FLAGS", "STRING", ALLOW_UNSUPPORTED))
    return defs


def build_environment(report, system, vcvars=None):
    """Fill report.env and report.path_prepend from what was chosen."""
    tk = report.chosen
    env = {}
    prepend = []
    if tk is not None:
        for name in ("CUDA_PATH", "CUDA_HOME", "CUDA_ROOT", "CUDAToolkit_ROOT"):
            env[name] = tk.path
        env["CUDACXX"] = tk.nvcc
        prepend.append(tk.bin_dir)
        if report.host_override:
            env["CUDAHOSTCXX"] = report.host_override
    if vcvars:
        prepend += vcvars.get("PATH_ADDED", [])
        for name in ("INCLUDE", "LIB", "LIBPATH"):
            if name in vcvars:
                env[name] = vcvars[name]
    if system.windows and report.sdk_bin and report.sdk_bin not in prepend:
        prepend.append(report.sdk_bin)
    ninja = report.ninja
    if ninja is not None and ninja.path:
        env["CMAKE_GENERATOR"] = "Ninja"
        folder = system.pathmod.dirname(ninja.path)
        if folder not in system.path_dirs() and folder not in prepend:
            prepend.append(folder)
    if report.architectures:
        env["CMAKE_CUDA_ARCHITECTURES"] = ";".join(report.architectures)
    if report.allow_unsupported and tk is not None:
        env["CUDAFLAGS"] = ALLOW_UNSUPPORTED  # CMake's initial CMAKE_CUDA_FLAGS
    defs = cmake_definitions(report, system)
    if defs:
        env["CMAKE_ARGS"] = " ".join(f"-D{name}={_cmake_value(system, value)}" for name, _, value in defs)
    if tk is not None and tk.lib_dir:
        dirs = [tk.lib_dir]
        stub = tk.libraries.get("driver stub")
        if stub and system.pathmod.dirname(stub) != tk.lib_dir:
            dirs.append(system.pathmod.dirname(stub))
        flags = []
        for folder in dirs:
            flags += ["-L", f"native={folder}"]
        if any(re.search(r"\s", d) for d in dirs):
            # cargo splits RUSTFLAGS on spaces; its encoded form separates flags with 0x1f instead.
            env["CARGO_ENCODED_RUSTFLAGS"] = "\x1f".join(flags)
        else:
            env["RUSTFLAGS"] = " ".join(flags)
    report.env = env
    report.path_prepend = prepend
    return report
