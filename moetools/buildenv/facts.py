"""Facts about CUDA, CMake and llama.cpp that build-env checks against, each with its source.

Where the toolkit itself can answer (its `include/crt/host_config.h` for the host compilers it
accepts, `version.json` for its version) build-env reads the toolkit; the small tables here cover
only what a toolkit folder does not say.
"""

import re
from dataclasses import dataclass

# llama.cpp ggml/src/ggml-cuda/CMakeLists.txt: cmake_minimum_required(VERSION 3.18) "for
# CMAKE_CUDA_ARCHITECTURES" (the top-level CMakeLists asks only for 3.14, the CUDA backend for 3.18).
CMAKE_MIN_CUDA = (3, 18)

# Minimum driver per CUDA major under minor-version compatibility, and the driver each toolkit
# release ships with (below it, PTX built by that toolkit cannot be JIT-compiled by the driver).
# Source: NVIDIA CUDA Toolkit release notes, table "CUDA Toolkit and Corresponding Driver
# Versions" (GA releases), and the CUDA Compatibility guide. (Linux, Windows).
DRIVER_MIN_FOR_MAJOR = {
    11: ("450.80.02", "452.39"),
    12: ("525.60.13", "527.41"),
    13: ("580.65.06", "580.88"),
}
DRIVER_SHIPPED_WITH = {
    (11, 8): ("520.61.05", "520.06"),
    (12, 0): ("525.60.13", "527.41"),
    (12, 1): ("530.30.02", "531.14"),
    (12, 2): ("535.54.03", "536.25"),
    (12, 3): ("545.23.06", "545.84"),
    (12, 4): ("550.54.14", "551.61"),
    (12, 5): ("555.42.02", "555.85"),
    (12, 6): ("560.28.03", "560.76"),
    (12, 8): ("570.26", "570.65"),
    (12, 9): ("575.51.03", "576.02"),
    (13, 0): ("580.65.06", "580.88"),
}

# Compute capability -> first CUDA release that compiles for it; and the oldest capability each
# major still supports. Source: the comments in llama.cpp's ggml-cuda CMakeLists.txt (86 needs
# 11.1, 89/90 need 11.8, 120 needs 12.8, 121 is added from 12.9) and NVIDIA's release notes (CUDA 12
# dropped Kepler 3.x, CUDA 13 dropped Maxwell, Pascal and Volta: below 7.5).
ARCH_FIRST_CUDA = {86: (11, 1), 87: (11, 4), 89: (11, 8), 90: (11, 8), 100: (12, 8), 101: (12, 8),
                   103: (12, 9), 120: (12, 8), 121: (12, 9)}
OLDEST_ARCH_FOR_MAJOR = {11: 35, 12: 50, 13: 75}
# Architectures llama.cpp builds with the arch-specific ("a") feature set: its FP4 tensor-core
# kernels need them, and it lists them as 120a-real / 121a-real.
ARCH_SPECIFIC = {120, 121}

ALLOW_UNSUPPORTED = "-allow-unsupported-compiler"


def version_tuple(text):
    """'12.4.1' -> (12, 4, 1); '580.65.06' -> (580, 65, 6); None when it holds no number."""
    numbers = re.findall(r"\d+", text or "")
    return tuple(int(n) for n in numbers) if numbers else None


def driver_minimum(cuda_version, windows):
    """(hard minimum, shipped-with) driver version strings for a toolkit version tuple; either None
    when the table does not know that release."""
    column = 1 if windows else 0
    hard = DRIVER_MIN_FOR_MAJOR.get(cuda_version[0])
    shipped = None
    known = sorted(k for k in DRIVER_SHIPPED_WITH if k[0] == cuda_version[0] and k <= tuple(cuda_version[:2]))
    if known:
        shipped = DRIVER_SHIPPED_WITH[known[-1]][column]
    return (hard[column] if hard else None), shipped


@dataclass(frozen=True)
class HostLimits:
    """Host compiler versions a toolkit accepts, parsed from its crt/host_config.h.

    gcc_max / clang_max: highest accepted major (None = no upper check found); clang_min: lowest
    accepted major; msvc_min / msvc_max: accepted _MSC_VER range, inclusive.
    """

    gcc_max: int = None
    clang_min: int = None
    clang_max: int = None
    msvc_min: int = None
    msvc_max: int = None

    def accepts(self, kind, version):
        """True/False for a compiler kind ("gcc", "clang", "msvc") and version tuple; None = unknown.

        For msvc the version is the _MSC_VER number as a 1-tuple, e.g. (1940,).
        """
        if not version:
            return None
        if kind == "gcc":
            return None if self.gcc_max is None else version[0] <= self.gcc_max
        if kind == "clang":
            if self.clang_max is None:
                return None
            return (self.clang_min or 0) <= version[0] <= self.clang_max
        if kind == "msvc":
            if self.msvc_max is None:
                return None
            return (self.msvc_min or 0) <= version[0] <= self.msvc_max
        return None

    def describe(self, kind):
        if kind == "gcc" and self.gcc_max is not None:
            return f"gcc <= {self.gcc_max}"
        if kind == "clang" and self.clang_max is not None:
            return f"clang {self.clang_min or 0}..{self.clang_max}"
        if kind == "msvc" and self.msvc_max is not None:
            return f"_MSC_VER {self.msvc_min or 0}..{self.msvc_max}"
        return "unknown"


def _condition_before(lines, index):
    """The `#if` condition governing the `#error` at lines[index] (nearest preceding #if/#elif)."""
    for back in range(index - 1, max(-1, index - 12), -1):
        stripped = lines[back].strip()
        if stripped.startswith(("#if", "#elif")) and not stripped.startswith(("#ifdef", "#ifndef")):
            return stripped
    return ""


def _bound(condition, macro):
    """(lowest accepted, highest accepted) major from a rejecting condition on `macro`."""
    low = high = None
    for op, number in re.findall(re.escape(macro) + r"\s*(>=|>|<=|<)\s*(\d+)", condition):
        number = int(number)
        if op == ">":
            high = number
        elif op == ">=":
            high = number - 1
        elif op == "<" and low is None:
            low = number
        elif op == "<=" and low is None:
            low = number + 1
    return low, high


def parse_host_config(text):
    """HostLimits from the text of a toolkit's include/crt/host_config.h.

    Reads the conditions of the `#error -- unsupported GNU version!`, `... clang version!` and
    `... Microsoft Visual Studio version!` lines, so it follows whatever each release says.
    """
    lines = text.splitlines()
    found = {}
    for index, line in enumerate(lines):
        if "#error" not in line:
            continue
        if "unsupported GNU version" in line:
            found["gcc"] = _bound(_condition_before(lines, index), "__GNUC__")
        elif "unsupported clang version" in line:
            found["clang"] = _bound(_condition_before(lines, index), "__clang_major__")
        elif "unsupported Microsoft Visual Studio version" in line:
            found["msvc"] = _bound(_condition_before(lines, index), "_MSC_VER")
    gcc = found.get("gcc", (None, None))
    clang = found.get("clang", (None, None))
    msvc = found.get("msvc", (None, None))
    return HostLimits(gcc_max=gcc[1], clang_min=clang[0], clang_max=clang[1],
                      msvc_min=msvc[0], msvc_max=msvc[1])


def msvc_ver_from_toolset(toolset):
    """MSVC toolset '14.40.33807' -> _MSC_VER 1940 (19xx where xx is the toolset minor, VS 2017+)."""
    parts = version_tuple(toolset)
    if not parts or len(parts) < 2 or parts[0] != 14 or parts[1] < 10:
        return None
    return 1900 + parts[1]
