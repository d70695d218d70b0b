"""CUDA toolkit discovery and scoring.

A toolkit is a folder with `bin/nvcc`, `include/cuda.h`, a version and the libraries llama.cpp's
ggml-cuda links: CUDA::cudart, CUDA::cublas (which pulls in cublasLt) and CUDA::cuda_driver (the
`libcuda.so` stub in `lib64/stubs`, since ggml-cuda uses the driver API for VMM). On Windows those are
the import libraries `lib/x64/{cudart,cublas,cublasLt,cuda}.lib`.
"""

import json
import re
from dataclasses import dataclass, field

from moetools.buildenv.facts import HostLimits, parse_host_config, version_tuple

# (name shown in "missing", library base name)
LIBRARIES = (("cudart", "cudart"), ("cublas", "cublas"), ("cublasLt", "cublasLt"),
             ("driver stub", "cuda"))
WINDOWS_TOOLKITS = r"C:\Program Files\NVIDIA GPU Computing Toolkit\CUDA"


@dataclass
class Toolkit:
    """One CUDA toolkit folder and what it holds. Paths are virtual (see system.py).

    version: "12.4.1" or None; complete: every part llama.cpp needs is there; usable: it has at
    least one of the libraries (a folder with none is an nvcc-only or header-only install).
    """

    path: str
    found_via: list = field(default_factory=list)
    version: str = None
    version_source: str = None
    nvcc: str = None
    bin_dir: str = None
    include_dir: str = None
    lib_dir: str = None
    libraries: dict = field(default_factory=dict)  # name -> virtual path or None
    missing: list = field(default_factory=list)
    notes: list = field(default_factory=list)  # (severity, text, fix)
    host_limits: HostLimits = None

    @property
    def complete(self):
        return not self.missing

    @property
    def usable(self):
        return any(self.libraries.values())

    @property
    def version_key(self):
        return version_tuple(self.version) or ()

    def to_json(self):
        return {
            "path": self.path,
            "version": self.version,
            "complete": self.complete,
            "missing": list(self.missing),
            "found_via": list(self.found_via),
            "nvcc": self.nvcc,
            "lib_dir": self.lib_dir,
            "host_compilers": None if self.host_limits is None else {
                "gcc_max": self.host_limits.gcc_max,
                "clang_min": self.host_limits.clang_min,
                "clang_max": self.host_limits.clang_max,
                "msvc_min": self.host_limits.msvc_min,
                "msvc_max": self.host_limits.msvc_max,
            },
        }


def toolkit_at(system, folder):
    """The toolkit folder `folder` stands for, or None.

    A folder with cuda.h, version.json/txt or a CUDA library is a toolkit. One with only
    `bin/nvcc` (such as /usr/local, whose bin/nvcc may be a wrapper script) stands for the toolkit
    that nvcc belongs to.
    """
    j = system.join
    markers = [j(folder, "include", "cuda.h"), j(folder, "version.json"), j(folder, "version.txt")]
    if system.windows:
        markers += [j(folder, "lib", "x64", "cudart.lib")]
    else:
        markers += [j(folder, "lib64", "libcudart.so"), j(folder, "lib", "libcudart.so")]
    if any(system.exists(m) for m in markers):
        return folder
    nvcc = _find_first(system, [j(folder, "bin", n) for n in system.exe_names("nvcc")])
    return nvcc_root(system, nvcc) if nvcc else None


def nvcc_root(system, nvcc):
    """The toolkit folder an nvcc belongs to.

    A wrapper script (ccache, a distro's /usr/local/bin/nvcc) is not in its toolkit: like CMake, ask
    `nvcc -v __cmake_determine_cuda` for the `#$ TOP=` line; otherwise follow links to bin/.. .
    """
    memo = system.__dict__.setdefault("_nvcc_roots", {})
    if nvcc not in memo:
        memo[nvcc] = _nvcc_root(system, nvcc)
    return memo[nvcc]


def _nvcc_root(system, nvcc):
    answer = system.call([nvcc, "-v", "__cmake_determine_cuda"], timeout=20)
    if answer is not None:
        match = re.search(r"^#\$ TOP=(.*?)\s*$", answer.stdout + "\n" + answer.stderr, re.M)
        if match:
            top = match.group(1)
            pm = system.pathmod
            top = pm.normpath(top if pm.isabs(top) else pm.join(pm.dirname(nvcc), top))
            if system.is_dir(top):
                return system.resolve(top)
    resolved = system.resolve(nvcc)
    pm = system.pathmod
    return pm.dirname(pm.dirname(resolved))


def _windows_version_dirs(system, parent):
    return [system.join(parent, name) for name in system.listdir(parent)
            if re.fullmatch(r"v\d+\.\d+", name, re.I)]


def candidate_folders(system, search_paths=(), default_search=True):
    """[(folder, why)] in discovery order: every place a toolkit may be, before deduplication.

    With default_search False only `search_paths` are looked at (each a toolkit itself or a folder
    holding toolkits), ignoring CUDA_PATH, CUDA_HOME, PATH and the standard install folders.
    """
    found = []
    for folder in search_paths:
        # The folder itself, and its subfolders: it may be a toolkit, hold toolkits, or both.
        for child in [folder] + [system.join(folder, name) for name in system.listdir(folder)]:
            toolkit = toolkit_at(system, child) if system.is_dir(child) else None
            if toolkit:
                found.append((toolkit, f"--search-path {folder}"))
    if not default_search:
        return found
    env = system.env
    for name in ("CUDAToolkit_ROOT", "CUDA_PATH", "CUDA_HOME", "CUDA_ROOT"):
        value = system.getenv(name)
        if value:
            found.append((value, f"{name}={value}"))
    for name in sorted(env):
        if re.fullmatch(r"CUDA_PATH_V\d+_\d+", name, re.I) and env[name]:
            found.append((env[name], f"{name}={env[name]}"))
    cudacxx = system.getenv("CUDACXX")
    if cudacxx:
        found.append((nvcc_root(system, cudacxx), f"CUDACXX={cudacxx}"))
    nvcc = system.which("nvcc")
    if nvcc:
        found.append((nvcc_root(system, nvcc), f"nvcc on PATH ({nvcc})"))
        # A distribution's scattered install: /usr/bin/nvcc, /usr/include/cuda.h, libraries in
        # /usr/lib/<multiarch>; nvcc itself may report its private folder as TOP.
        prefix = system.pathmod.dirname(system.pathmod.dirname(nvcc))
        if prefix and toolkit_at(system, prefix) == prefix:
            found.append((prefix, f"nvcc on PATH ({nvcc})"))
    conda = system.getenv("CONDA_PREFIX")
    if conda:
        found.append((system.join(conda, "Library") if system.windows else conda, f"CONDA_PREFIX={conda}"))
    if system.windows:
        for folder in _windows_version_dirs(system, WINDOWS_TOOLKITS):
            found.append((folder, "standard install folder"))
    else:
        for parent in ("/usr/local", "/opt"):
            for name in system.listdir(parent):
                if re.fullmatch(r"cuda(-[\d.]+)?", name):
                    found.append((f"{parent}/{name}", "standard install folder"))
    return found


def _find_first(system, paths):
    return next((p for p in paths if system.is_file(p)), None)


def _lib_dirs(system, root):
    j = system.join
    if system.windows:
        return [j(root, "lib", "x64"), j(root, "lib")]
    dirs = [j(root, "lib64"), j(root, "lib")]
    targets = j(root, "targets")
    dirs += [j(targets, name, "lib") for name in system.listdir(targets)]
    # A distro's scattered install (/usr/bin/nvcc): libraries in the multiarch folder.
    dirs += [j(root, "lib", name) for name in system.listdir(j(root, "lib")) if name.endswith("-linux-gnu")]
    return dirs


def _library_file(system, folder, base):
    """The linkable file for a library in `folder`, or (None, note) when only a runtime copy exists."""
    j = system.join
    if system.windows:
        path = j(folder, base + ".lib")
        return (path, None) if system.is_file(path) else (None, None)
    candidates = [j(folder, f"lib{base}.so")]
    if base == "cuda":
        candidates = [j(folder, "stubs", "libcuda.so")] + candidates
    path = _find_first(system, candidates)
    if path:
        return path, None
    runtime = [n for n in system.listdir(folder) if n.startswith(f"lib{base}.so.")]
    if runtime:
        return None, f"only {runtime[0]} (no lib{base}.so development link) in {folder}"
    return None, None


def _read_version(system, tk):
    """Version from version.json, else version.txt (CUDA <= 11.0), else cuda.h's CUDA_VERSION."""
    j = system.join
    vjson = j(tk.path, "version.json")
    if system.is_file(vjson):
        text = system.read_text(vjson)
        try:
            data = json.loads(text)
            version = data["cuda"]["version"]
            if not isinstance(version, str) or not version_tuple(version):
                raise ValueError(f"cuda.version is {version!r}")
            return version, vjson
        except json.JSONDecodeError as err:
            tk.notes.append(("warn", f"{vjson}: not valid JSON (line {err.lineno} column {err.colno}: {err.msg})",
                             "reinstall the toolkit or fix the file; the version was taken from elsewhere"))
        except (KeyError, TypeError, ValueError) as err:
            tk.notes.append(("warn", f"{vjson}: no usable cuda.version ({err})",
                             "reinstall the toolkit or fix the file; the version was taken from elsewhere"))
    vtxt = j(tk.path, "version.txt")
    text = system.read_text(vtxt) if system.is_file(vtxt) else None
    match = re.search(r"CUDA Version (\d+\.\d+(?:\.\d+)?)", text or "")
    if match:
        return match.group(1), vtxt
    if tk.include_dir:
        header = j(tk.include_dir, "cuda.h")
        match = re.search(r"^#define\s+CUDA_VERSION\s+(\d+)", system.read_text(header) or "", re.M)
        if match:
            number = int(match.group(1))
            return f"{number // 1000}.{number % 1000 // 10}", header
    return None, None


def inspect_toolkit(system, path, found_via=()):
    """Score the toolkit at `path` (virtual): what it holds, its version and what is missing."""
    j = system.join
    tk = Toolkit(path=path, found_via=list(found_via))
    tk.nvcc = _find_first(system, [j(path, "bin", n) for n in system.exe_names("nvcc")])
    tk.bin_dir = j(path, "bin")
    includes = [j(path, "include")] + [j(path, "targets", n, "include") for n in system.listdir(j(path, "targets"))]
    tk.include_dir = next((d for d in includes if system.is_file(j(d, "cuda.h"))), None)
    tk.version, tk.version_source = _read_version(system, tk)
    lib_dirs = [d for d in _lib_dirs(system, path) if system.is_dir(d)]
    for shown, base in LIBRARIES:
        found, note = None, None
        for folder in lib_dirs:
            found, why = _library_file(system, folder, base)
            note = note or why
            if found:
                break
        tk.libraries[shown] = found
        if not found and note:
            tk.notes.append(("info", f"{shown}: {note}", "install the toolkit's development package"))
    cudart = tk.libraries.get("cudart")
    pm = system.pathmod
    tk.lib_dir = pm.dirname(cudart) if cudart else (lib_dirs[0] if lib_dirs else None)
    if not tk.nvcc:
        tk.missing.append("nvcc")
    if not tk.include_dir:
        tk.missing.append("include/cuda.h")
    if not tk.version:
        tk.missing.append("version")
    tk.missing += [shown for shown, _ in LIBRARIES if not tk.libraries[shown]]
    if tk.include_dir:
        config = j(tk.include_dir, "crt", "host_config.h")
        text = system.read_text(config) if system.is_file(config) else None
        if text is not None:
            tk.host_limits = parse_host_config(text)
    return tk


def discover(system, search_paths=(), default_search=True):
    """Every distinct toolkit reachable, scored, newest first (complete ones before incomplete).

    Folders reached twice (a /usr/local/cuda link and its target, CUDA_PATH and PATH) are one
    toolkit, listed once under its resolved path with every way it was found.
    """
    by_real = {}
    for folder, why in candidate_folders(system, search_paths, default_search):
        folder = system.pathmod.normpath(folder)
        if not system.is_dir(folder):
            continue
        key = system.resolve(folder)
        if key in by_real:
            if why not in by_real[key]:
                by_real[key].append(why)
        else:
            by_real[key] = [why]
    toolkits = [inspect_toolkit(system, path, whys) for path, whys in by_real.items()]
    toolkits = [tk for tk in toolkits if tk.nvcc or tk.usable or tk.include_dir]
    toolkits.sort(key=lambda tk: (not tk.complete, tuple(-n for n in tk.version_key), tk.path))
    return toolkits


def cmake_pick(system, toolkits):
    """(path or None, reason): the toolkit llama.cpp's `find_package(CUDAToolkit)` would pick alone.

    FindCUDAToolkit's order: CUDAToolkit_ROOT (a failure if it holds no nvcc); then nvcc through
    find_program, which searches PATH before its `PATHS ENV CUDA_PATH` hint; then on Unix the
    /usr/local/cuda link, then /usr/local/cuda-X.Y (Windows: ...\\CUDA\\vX.Y), newest first.
    """
    j = system.join
    root = system.getenv("CUDAToolkit_ROOT")
    if root:
        nvcc = _find_first(system, [j(root, "bin", n) for n in system.exe_names("nvcc")])
        if nvcc:
            return system.resolve(root), f"CUDAToolkit_ROOT={root}"
        return None, f"CUDAToolkit_ROOT={root} holds no bin/nvcc: CMake stops with an error"
    nvcc = system.which("nvcc")
    if nvcc:
        return nvcc_root(system, nvcc), f"nvcc on PATH ({nvcc})"
    cuda_path = system.getenv("CUDA_PATH")
    if cuda_path:
        nvcc = _find_first(system, [j(cuda_path, "bin", n) for n in system.exe_names("nvcc")])
        if nvcc:
            return system.resolve(cuda_path), f"CUDA_PATH={cuda_path}"
    if system.windows:
        parent, prefix = WINDOWS_TOOLKITS, "v"
        search = []
    else:
        parent, prefix = "/usr/local", "cuda-"
        search = ["/usr/local/cuda"]
    versions = []
    for name in system.listdir(parent):
        match = re.fullmatch(re.escape(prefix) + r"(\d\d?\.\d)", name)
        if match and system.is_dir(j(parent, name)):
            versions.append((version_tuple(match.group(1)), j(parent, name)))
    search += [path for _, path in sorted(versions, reverse=True)]
    for folder in search:
        if _find_first(system, [j(folder, "bin", n) for n in system.exe_names("nvcc")]):
            return system.resolve(folder), f"default location {folder}"
    return None, "no nvcc found: CMake stops with 'Could not find nvcc'"
