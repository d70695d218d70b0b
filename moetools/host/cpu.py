"""The CPU of this machine: model, physical cores, logical CPUs, sockets, NUMA nodes, and the threads
llama.cpp uses when no -t is given.

Every reader takes `root` (the file system root, "/" for real) so tests build a small sysfs and /proc
tree in a folder instead of mocking; where a file is absent the figure falls back, and the source
string says which way it was found.
"""

import os
import platform
import re
import sys


def _read(root, path):
    """The text of root/path, or None when it cannot be read."""
    try:
        with open(os.path.join(root, path.lstrip("/")), encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def _cpu_indexes(root):
    """The online CPUs' numbers from /sys/devices/system/cpu/online (`0-7,16-23`), or None."""
    text = _read(root, "/sys/devices/system/cpu/online")
    if not text or not text.strip():
        return None
    return parse_cpu_list(text)


def parse_cpu_list(text):
    """A kernel CPU list (`0-3,8,10-11`) -> sorted [int]. Raises ValueError on a malformed list."""
    cpus = set()
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return sorted(cpus)


def logical_cpus(root="/"):
    """Logical CPUs online: sysfs's online list, else os.cpu_count()."""
    try:
        listed = _cpu_indexes(root)
    except ValueError:
        listed = None
    return len(listed) if listed else (os.cpu_count() or 1)


def _topology(root, name):
    """Each CPU's /sys/devices/system/cpu/cpuN/topology/NAME (stripped), N from 0 up to the first CPU
    without one."""
    cpu = 0
    while True:
        text = _read(root, f"/sys/devices/system/cpu/cpu{cpu}/topology/{name}")
        if text is None:
            return
        yield text.strip()
        cpu += 1


def physical_cores(root="/", logical=None):
    """(cores, how found) as llama.cpp's common_cpu_get_num_physical_cores (common/common.cpp at
    0c1e57098) counts them on Linux: the distinct /sys/devices/system/cpu/cpuN/topology/thread_siblings
    masks, N from 0 up to the first CPU without one; elsewhere (and when sysfs says nothing) its fallback,
    the logical CPUs if 4 or fewer, else half of them (std::thread::hardware_concurrency rule)."""
    siblings = set(_topology(root, "thread_siblings"))
    if siblings:
        return len(siblings), "thread_siblings in sysfs"
    if sys.platform == "darwin" and root == "/":
        for key in ("hw.perflevel0.physicalcpu", "hw.physicalcpu"):  # llama.cpp's sysctlbyname order
            found = _sysctl(key)
            if found:
                return found, f"sysctl {key}"
    logical = logical or logical_cpus(root)
    return (logical if logical <= 4 else logical // 2), f"half of {logical} logical CPUs (llama.cpp's fallback rule)"


def _sysctl(key):
    """An integer sysctl of macOS, or None."""
    import subprocess

    try:
        done = subprocess.run(["sysctl", "-n", key], capture_output=True, timeout=10, check=False)
        return int(done.stdout.strip()) if done.returncode == 0 else None
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


def efficiency_cpus(root="/"):
    """The Intel hybrid E-cores' CPU numbers (the cpu_atom PMU's cpus list in sysfs, present only on a
    hybrid part), or an empty list."""
    text = _read(root, "/sys/devices/cpu_atom/cpus")
    try:
        return parse_cpu_list(text) if text and text.strip() else []
    except ValueError:
        return []


def math_threads(root="/", machine=None):
    """(threads, how found): the -t llama.cpp uses when none is given, as common_cpu_get_num_math
    (common/common.cpp at 0c1e57098) chooses it: on Linux x86-64 with a hybrid Intel CPU it pins itself to
    each CPU in turn and counts the non-E-cores, stepping over the next CPU after each counted one
    (cpu_count_math_cpus: "hyperthreading isn't useful for linear algebra"); llama.cpp asks cpuid, this
    reads the E-cores from sysfs's cpu_atom PMU. On POWER, physical cores x min(SMT, 2). Everywhere else,
    and when that count is 0, the physical cores (common_cpu_get_num_physical_cores)."""
    machine = (machine or platform.machine()).lower()
    cores, how = physical_cores(root)
    if sys.platform.startswith("linux") and machine in ("x86_64", "amd64"):
        atoms = set(efficiency_cpus(root))
        if atoms:
            online = logical_cpus(root)
            count = 0
            cpu = 0
            while cpu < online:
                if cpu not in atoms:
                    count += 1
                    cpu += 1  # the loop's ++cpu: the hyperthread sibling is skipped
                cpu += 1
            if count > 0:
                return count, "performance cores, one thread each, llama.cpp's default (a hybrid CPU: E-cores excluded)"
    if machine.startswith(("ppc64", "powerpc")):
        online = logical_cpus(root)
        smt = online // cores if cores and online > cores else 1
        return cores * min(smt, 2), "physical cores x min(SMT, 2), llama.cpp's default on POWER"
    return cores, f"physical cores, llama.cpp's default ({how})"


def sockets(root="/"):
    """CPU packages: distinct physical_package_id in sysfs, else distinct `physical id` in /proc/cpuinfo, else 1."""
    ids = set(_topology(root, "physical_package_id"))
    if not ids:
        ids = set(re.findall(r"^physical id\s*:\s*(\S+)", _read(root, "/proc/cpuinfo") or "", re.MULTILINE))
    return max(1, len(ids))


def numa_nodes(root="/"):
    """NUMA nodes: the /sys/devices/system/node/nodeN folders, else 1."""
    try:
        names = os.listdir(os.path.join(root, "sys/devices/system/node"))
    except OSError:
        return 1
    return max(1, sum(1 for name in names if re.fullmatch(r"node\d+", name)))


def cpu_model(root="/"):
    """The CPU's name: /proc/cpuinfo's `model name` (x86), `Model`, `Hardware` or `cpu model` (ARM,
    MIPS), else platform.processor(), else platform.machine()."""
    text = _read(root, "/proc/cpuinfo") or ""
    for key in ("model name", "Model", "Hardware", "cpu model", "cpu"):
        match = re.search(rf"^{key}\s*:\s*(.+?)\s*$", text, re.MULTILINE)
        if match and match[1]:
            return " ".join(match[1].split())
    return platform.processor() or platform.machine() or "unknown"


def cpu_info(root="/"):
    """The profile's `cpu` object (formats/host_profile.py)."""
    threads, how = math_threads(root)
    cores, _ = physical_cores(root)
    return {"model": cpu_model(root), "physical_cores": cores, "logical_cpus": logical_cpus(root), "threads": threads,
            "threads_source": how, "numa_nodes": numa_nodes(root), "sockets": sockets(root)}
