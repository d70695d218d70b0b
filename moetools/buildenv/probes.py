"""Probes for everything around the toolkit: host compilers, MSVC through vswhere, cmake, Ninja,
the Windows SDK tools and the GPUs. Each goes through the injected `System`."""

import json
import re
from dataclasses import dataclass, field

from moetools.buildenv.facts import msvc_ver_from_toolset, version_tuple

VSWHERE = r"C:\Program Files (x86)\Microsoft Visual Studio\Installer\vswhere.exe"
WINDOWS_KITS_BIN = r"C:\Program Files (x86)\Windows Kits\10\bin"
NVIDIA_SMI_WINDOWS = (r"C:\Windows\System32\nvidia-smi.exe",
                      r"C:\Program Files\NVIDIA Corporation\NVSMI\nvidia-smi.exe")
GPU_QUERY = ["--query-gpu=name,compute_cap,driver_version", "--format=csv,noheader"]
VS_BUNDLED_NINJA = r"Common7\IDE\CommonExtensions\Microsoft\CMake\Ninja\ninja.exe"
VS_BUNDLED_CMAKE = r"Common7\IDE\CommonExtensions\Microsoft\CMake\CMake\bin\cmake.exe"


@dataclass
class Tool:
    """A program found (path virtual, version string) or not (path None, why says what happened)."""

    name: str
    path: str = None
    version: str = None
    why: str = ""

    def to_json(self):
        return {"path": self.path, "version": self.version}


@dataclass
class Compiler:
    """A C++ host compiler: kind "gcc" | "clang" | "msvc"; for msvc, version is the toolset
    ("14.40.33807") and msc_ver its _MSC_VER (1940)."""

    path: str
    kind: str
    version: str
    msc_ver: int = None
    vs: dict = None  # Visual Studio install this toolset belongs to (msvc)

    @property
    def check_version(self):
        return (self.msc_ver,) if self.kind == "msvc" else version_tuple(self.version)

    @property
    def label(self):
        if self.kind == "msvc":
            return f"MSVC {self.version} (_MSC_VER {self.msc_ver})"
        return f"{self.kind} {self.version}"

    def to_json(self):
        return {"path": self.path, "kind": self.kind, "version": self.version, "msc_ver": self.msc_ver}


@dataclass
class Gpu:
    name: str
    compute_cap: str  # "8.6", or None when the driver cannot say
    driver: str = None


@dataclass
class GpuProbe:
    gpus: list = field(default_factory=list)
    driver: str = None
    problem: str = None  # why there are no GPUs, when there are none
    tool: str = None


def _first_line(result):
    text = (result.stdout or result.stderr or "").strip()
    return text.splitlines()[0].strip() if text else ""


def tool_version(system, name, path):
    """Tool(name, path, version) from `<path> --version` (cmake, ninja)."""
    answer = system.call([path, "--version"], timeout=20)
    if answer is None:
        return Tool(name, None, None, f"{path} cannot be run")
    if answer.returncode != 0:
        return Tool(name, path, None, f"{path} --version failed: {_first_line(answer)}")
    match = re.search(r"(\d+\.\d+(?:\.\d+)?)", answer.stdout + answer.stderr)
    return Tool(name, path, match.group(1) if match else None)


def find_tool(system, name, extra=()):
    """A program on PATH, else at one of `extra` virtual paths (a Visual Studio bundled copy)."""
    path = system.which(name) or next((p for p in extra if system.is_file(p)), None)
    if path is None:
        return Tool(name, None, None, "not found")
    return tool_version(system, name, path)


def compiler_version(system, path):
    """Compiler(kind, version) from `<path> --version`; None when it does not answer."""
    answer = system.call([path, "--version"], timeout=20)
    if answer is None or answer.returncode != 0:
        return None
    line = _first_line(answer)
    if "clang" in line.lower():
        match = re.search(r"clang version (\d+(?:\.\d+)*)", line)
        return Compiler(path, "clang", match.group(1)) if match else None
    # "g++ (Debian 12.2.0-14+deb12u1) 12.2.0": the last free-standing version on the line.
    matches = re.findall(r"(?<![\w.+~-])(\d+\.\d+(?:\.\d+)?)(?![\w.+~-])", line)
    return Compiler(path, "gcc", matches[-1]) if matches else None


def unix_compilers(system):
    """(default, every g++/clang++ on PATH): nvcc's default host compiler is CUDAHOSTCXX (as CMake
    passes it) or the first `g++` on PATH; versioned ones (g++-12, clang++-17) are alternatives."""
    seen = {}
    for folder in system.path_dirs():
        for name in system.listdir(folder):
            if re.fullmatch(r"(g\+\+|clang\+\+)(-\d+(\.\d+)?)?", name) and name not in seen:
                path = system.which(name, [folder])
                if path:
                    seen[name] = path
    compilers = []
    resolved = set()
    for name, path in sorted(seen.items()):
        key = system.resolve(path)
        if key in resolved:
            continue
        resolved.add(key)
        compiler = compiler_version(system, path)
        if compiler:
            compilers.append(compiler)
    host = system.getenv("CUDAHOSTCXX")
    default = None
    if host:
        path = host if system.pathmod.isabs(host) else system.which(host)
        default = compiler_version(system, path) if path else None
        if default and all(c.path != default.path for c in compilers):
            compilers.append(default)
    elif "g++" in seen:
        default = next((c for c in compilers if c.path == seen["g++"]), None)
        if default is None:  # g++ is a link to a versioned one listed under that name
            target = system.resolve(seen["g++"])
            default = next((c for c in compilers if system.resolve(c.path) == target), None)
    return default, compilers


def vs_installs(system):
    """Visual Studio installs with the x64 C++ tools, from vswhere's JSON; [] when absent."""
    if not system.is_file(VSWHERE):
        return [], "vswhere.exe not found (no Visual Studio 2017+ installer)"
    answer = system.call([VSWHERE, "-products", "*", "-requires",
                          "Microsoft.VisualStudio.Component.VC.Tools.x86.x64", "-format", "json", "-utf8"])
    if answer is None or answer.returncode != 0:
        return [], f"vswhere failed: {_first_line(answer) if answer else 'cannot run'}"
    try:
        installs = json.loads(answer.stdout or "[]")
        if not isinstance(installs, list):
            raise ValueError("not a list")
    except ValueError as err:
        return [], f"vswhere answered something that is not its JSON list ({err})"
    installs = [i for i in installs if isinstance(i, dict) and i.get("installationPath")]
    if not installs:
        return [], "no Visual Studio install with the C++ x64 build tools (workload 'Desktop development with C++')"
    installs.sort(key=lambda i: version_tuple(i.get("installationVersion", "")) or (), reverse=True)
    return installs, None


def msvc_toolsets(system, install):
    """Compilers for every MSVC toolset of one VS install; the default toolset first."""
    j = system.join
    base = install["installationPath"]
    default = (system.read_text(j(base, "VC", "Auxiliary", "Build", "Microsoft.VCToolsVersion.default.txt")) or "").strip()
    names = [n for n in system.listdir(j(base, "VC", "Tools", "MSVC")) if version_tuple(n)]
    names.sort(key=lambda n: (n != default, tuple(-x for x in version_tuple(n))))
    if default and default not in names:
        names.insert(0, default)
    result = []
    for name in names:
        cl = j(base, "VC", "Tools", "MSVC", name, "bin", "Hostx64", "x64", "cl.exe")
        msc = msvc_ver_from_toolset(name)
        if msc and system.is_file(cl):
            result.append(Compiler(cl, "msvc", name, msc_ver=msc, vs=install))
    return result


def vcvars_environment(system, install, toolset=None):
    """(env changes, problem): INCLUDE, LIB, LIBPATH, the PATH entries vcvars64.bat adds, and the
    SDK variables, by running it in cmd and reading `set`. `toolset` selects -vcvars_ver=14.xx."""
    vcvars = system.join(install["installationPath"], "VC", "Auxiliary", "Build", "vcvars64.bat")
    if not system.is_file(vcvars):
        return {}, f"{vcvars} not found"
    arg = f" -vcvars_ver={toolset}" if toolset else ""
    # cmd's /s rule: strip the outer quotes only, so a path with spaces and parentheses survives.
    command = f'cmd.exe /d /s /c ""{vcvars}"{arg} >nul && set"'
    answer = system.call(command, timeout=120)
    if answer is None or answer.returncode != 0:
        return {}, f"{vcvars} failed: {_first_line(answer) if answer else 'cmd.exe cannot run'}"
    values = {}
    for line in answer.stdout.splitlines():
        name, sep, value = line.partition("=")
        if sep and name:
            values[name.upper()] = value
    before = {p.rstrip("\\").lower() for p in system.path_dirs()}
    added = [p for p in values.get("PATH", "").split(";") if p and p.rstrip("\\").lower() not in before]
    changes = {k: values[k] for k in ("INCLUDE", "LIB", "LIBPATH", "WINDOWSSDKVERBINPATH",
                                      "WINDOWSSDKVERSION", "VCTOOLSVERSION") if k in values}
    changes["PATH_ADDED"] = added
    if "INCLUDE" not in values or "LIB" not in values:
        return changes, f"{vcvars} did not set INCLUDE and LIB"
    return changes, None


def windows_sdk_bin(system, vcvars_env=None):
    """(x64 bin folder holding rc.exe and mt.exe, version) or (None, why)."""
    j = system.join
    candidates = []
    if vcvars_env and vcvars_env.get("WINDOWSSDKVERBINPATH"):
        candidates.append(j(vcvars_env["WINDOWSSDKVERBINPATH"].rstrip("\\"), "x64"))
    versions = [n for n in system.listdir(WINDOWS_KITS_BIN) if re.fullmatch(r"10\.[\d.]+", n)]
    versions.sort(key=version_tuple, reverse=True)
    candidates += [j(WINDOWS_KITS_BIN, v, "x64") for v in versions]
    for folder in candidates:
        if system.is_file(j(folder, "rc.exe")) and system.is_file(j(folder, "mt.exe")):
            return folder, None
    if candidates:
        return None, f"no Windows SDK bin folder with both rc.exe and mt.exe (looked in {len(candidates)})"
    return None, f"no Windows 10/11 SDK under {WINDOWS_KITS_BIN}"


def _parse_gpus(text):
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = [p.strip() for p in line.rsplit(",", 2)]
        if len(parts) == 3:
            name, cap, driver = parts
        else:
            name, cap, driver = parts[0], None, (parts[1] if len(parts) > 1 else None)
        if cap is not None and not re.fullmatch(r"\d+\.\d+", cap):
            cap = None
        gpus.append(Gpu(name, cap, driver))
    return gpus


def probe_gpus(system):
    """GPUs and driver from nvidia-smi; a problem line when it is missing or fails (no GPU)."""
    extra = NVIDIA_SMI_WINDOWS if system.windows else ()
    smi = system.which("nvidia-smi") or next((p for p in extra if system.is_file(p)), None)
    if smi is None:
        return GpuProbe(problem="nvidia-smi not found: no NVIDIA driver on this machine (or not on PATH)")
    answer = system.call([smi] + GPU_QUERY, timeout=30)
    if answer is not None and answer.returncode != 0 and "compute_cap" in (answer.stdout + answer.stderr):
        # Drivers before ~510 do not know the compute_cap field: ask without it.
        answer = system.call([smi, "--query-gpu=name,driver_version", "--format=csv,noheader"], timeout=30)
        if answer is not None and answer.returncode == 0:
            gpus = []
            for line in answer.stdout.splitlines():
                if line.strip():
                    name, _, driver = line.rpartition(",")
                    gpus.append(Gpu(name.strip(), None, driver.strip()))
            return GpuProbe(gpus=gpus, driver=gpus[0].driver if gpus else None, tool=smi)
    if answer is None:
        return GpuProbe(problem=f"{smi} cannot be run", tool=smi)
    if answer.returncode != 0:
        return GpuProbe(problem=f"nvidia-smi failed (exit {answer.returncode}): {_first_line(answer)}", tool=smi)
    gpus = _parse_gpus(answer.stdout)
    if not gpus:
        return GpuProbe(problem="nvidia-smi lists no GPU", tool=smi)
    return GpuProbe(gpus=gpus, driver=gpus[0].driver, tool=smi)
