"""The devices a plan may use: GPUs (`--vram 24G,24G`, `--vram auto`, `--gpu rtx4090,rtx3090`), remote
llama.cpp RPC servers (`--rpc HOST:PORT=SIZE`) and the host (`--ram SIZE|auto`, the CPU device).

Devices are listed in llama.cpp's order (src/llama.cpp llama_model_load: RPC servers first, "to minimize
network transfers", then the local GPUs); `-ts` takes one weight per device in that order and the output
layer goes to the last one. Names are llama.cpp's buffer-type names as `-ot` takes them: `CUDA0`, `CUDA1`,
`RPC0[host:port]` (ggml-rpc: RPC<device on that server>[endpoint]) and `CPU`.

GPU detection runs `nvidia-smi` or `rocm-smi` through an injectable `which`/`run` pair (the same
contract as build-env's runner: run(argv, timeout) -> object with returncode/stdout/stderr, or None when
the program cannot start), so tests answer for them without a GPU.
"""

import json
import os
import re
import sys

from moetools.devicefit.record import REQUIRED, Record
from moetools.errors import UsageError
from moetools.sizes import parse_capacity, parse_size
from moetools.sizes import parse_rate as parse_bandwidth

GIB = 1024**3
GB = 1e9

# A small table of common GPUs: memory and peak memory bandwidth from the vendors' spec sheets
# (nvidia.com GeForce/data-center product pages, amd.com Radeon specifications). Decimal GB/s.
GPU_TABLE = {
    "rtx3060": ("GeForce RTX 3060 12GB", 12 * GIB, 360 * GB),
    "rtx3070": ("GeForce RTX 3070", 8 * GIB, 448 * GB),
    "rtx3080": ("GeForce RTX 3080 10GB", 10 * GIB, 760 * GB),
    "rtx3090": ("GeForce RTX 3090", 24 * GIB, 936 * GB),
    "rtx3090ti": ("GeForce RTX 3090 Ti", 24 * GIB, 1008 * GB),
    "rtx4060ti": ("GeForce RTX 4060 Ti 16GB", 16 * GIB, 288 * GB),
    "rtx4070": ("GeForce RTX 4070", 12 * GIB, 504 * GB),
    "rtx4070ti": ("GeForce RTX 4070 Ti", 12 * GIB, 504 * GB),
    "rtx4070tisuper": ("GeForce RTX 4070 Ti SUPER", 16 * GIB, 672 * GB),
    "rtx4080": ("GeForce RTX 4080", 16 * GIB, 717 * GB),
    "rtx4090": ("GeForce RTX 4090", 24 * GIB, 1008 * GB),
    "rtx5060ti": ("GeForce RTX 5060 Ti 16GB", 16 * GIB, 448 * GB),
    "rtx5070ti": ("GeForce RTX 5070 Ti", 16 * GIB, 896 * GB),
    "rtx5080": ("GeForce RTX 5080", 16 * GIB, 960 * GB),
    "rtx5090": ("GeForce RTX 5090", 32 * GIB, 1792 * GB),
    "a6000": ("RTX A6000", 48 * GIB, 768 * GB),
    "rtx6000ada": ("RTX 6000 Ada Generation", 48 * GIB, 960 * GB),
    "rtxpro6000": ("RTX PRO 6000 Blackwell", 96 * GIB, 1792 * GB),
    "p40": ("Tesla P40", 24 * GIB, 347 * GB),
    "l40s": ("L40S", 48 * GIB, 864 * GB),
    "a100-80g": ("A100 80GB PCIe", 80 * GIB, 1935 * GB),
    "h100-pcie": ("H100 PCIe 80GB", 80 * GIB, 2000 * GB),
    "h100-sxm": ("H100 SXM 80GB", 80 * GIB, 3350 * GB),
    "rx7900xtx": ("Radeon RX 7900 XTX", 24 * GIB, 960 * GB),
}
DEFAULT_GPU_BW = 936 * GB  # an RTX 3090, the most common card in the published llama-bench results
DEFAULT_RPC_NET_BW = 1.25 * GB  # 10 GbE; RPC layers are read at the remote device's own bandwidth
GPU_TOOLS = ("nvidia-smi", "rocm-smi")
NVIDIA_QUERY = ["--query-gpu=index,name,memory.free,memory.total", "--format=csv,noheader,nounits"]
ROCM_QUERY = ["--showmeminfo", "vram", "--json"]
_RPC_RE = re.compile(r"^(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(?P<port>\d{1,5})=(?P<size>.+)$")


class Device(Record):
    """One device of a plan. kind: "gpu", "rpc" or "cpu"; bandwidth in bytes/s."""

    FIELDS = (
        ("name", REQUIRED),  # llama.cpp's buffer-type name: CUDA0, RPC0[host:port], CPU
        ("kind", REQUIRED),
        ("capacity_bytes", REQUIRED),
        ("bandwidth", REQUIRED),
        ("bandwidth_source", ""),
        ("model", ""),  # table key or the name a tool reported
        ("endpoint", ""),  # host:port of an RPC device
    )

    def to_doc(self):
        doc = {"name": self.name, "kind": self.kind, "capacity_bytes": self.capacity_bytes,
               "bandwidth_bytes_per_s": self.bandwidth, "bandwidth_source": self.bandwidth_source}
        if self.model:
            doc["model"] = self.model
        if self.endpoint:
            doc["endpoint"] = self.endpoint
        return doc


def gpu_names():
    return ", ".join(sorted(GPU_TABLE))


def parse_gpu_list(text):
    """`rtx4090,rtx3090` -> list of table keys. Raises UsageError naming the known names."""
    names = [part.strip().lower() for part in str(text).split(",")]
    for name in names:
        if name not in GPU_TABLE:
            raise UsageError(f"--gpu {name!r} is not in the GPU table (known: {gpu_names()}); "
                             "give --vram and --vram-bw instead")
    return names


def parse_size_list(text, option):
    """`24G,24G` -> [bytes, bytes] (each > 0). Raises UsageError."""
    sizes = []
    for part in str(text).split(","):
        try:
            value = parse_size(part.strip())
        except UsageError as err:
            raise UsageError(f"{option}: {err}") from None
        if value <= 0:
            raise UsageError(f"{option} {part.strip()!r} must be a positive size")
        value = parse_capacity(part.strip(), option)
        sizes.append(value)
    return sizes


def parse_rate(text, option):
    """`1008GB/s` (decimal), `936G` (GiB per s), raw bytes/s -> bytes/s (> 0). Raises UsageError."""
    try:
        value = parse_size(re.sub(r"/s\s*$", "", str(text).strip(), flags=re.IGNORECASE))
    except UsageError as err:
        raise UsageError(f"{option}: {err}") from None
    if value <= 0:
        raise UsageError(f"{option} {text!r} must be a positive rate (a bandwidth of 0 moves nothing)")
    return float(parse_bandwidth(text, option))


def parse_rate_list(text, option):
    return [parse_rate(part, option) for part in str(text).split(",")]


def parse_rpc(spec):
    """`HOST:PORT=SIZE` (IPv6 hosts in brackets) -> (endpoint "host:port", bytes). Raises UsageError."""
    match = _RPC_RE.match(str(spec).strip())
    if not match:
        raise UsageError(f"--rpc {spec!r} does not parse: expected HOST:PORT=SIZE, e.g. 192.168.1.20:50052=24G")
    port = int(match["port"])
    if not 0 < port < 65536:
        raise UsageError(f"--rpc {spec!r}: port {port} is not in 1..65535")
    try:
        size = parse_capacity(match["size"], "--rpc SIZE")
    except UsageError as err:
        raise UsageError(f"--rpc {spec!r}: {err}") from None
    if size <= 0:
        raise UsageError(f"--rpc {spec!r}: the size must be positive")
    return f"{match['host']}:{port}", size


def default_which(name):
    import shutil  # here: shutil imports bz2, lzma and zlib, 3 ms of every plan's start-up that never probes a GPU

    return shutil.which(name)


def default_run(argv, timeout=30.0):
    """Run a GPU tool for real: an object with returncode/stdout/stderr, or None if it cannot start."""
    import subprocess

    try:
        done = subprocess.run(list(argv), capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False)
    except (OSError, ValueError):
        return None
    except subprocess.TimeoutExpired:
        return None
    return _Answer(done.returncode, done.stdout.decode("utf-8", "replace"), done.stderr.decode("utf-8", "replace"))


class _Answer:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


# --vram auto's query, and the host probe's (moetools host): the same GPUs with the PCI bus id and the
# PCIe link (nvidia-smi --help-query-gpu: pcie.link.gen.max is "the maximum possible with this GPU and
# system configuration"; the current generation drops while the link idles)
NVIDIA_LINK_QUERY = ["--query-gpu=index,name,memory.free,memory.total,pci.bus_id,pcie.link.gen.current,"
                     "pcie.link.width.current,pcie.link.gen.max,pcie.link.width.max", "--format=csv,noheader,nounits"]
ROCM_BUS_QUERY = ["--showbus", "--json"]


class GpuReport:
    """One GPU as nvidia-smi or rocm-smi reports it. Bytes; link: (gen, width) pairs or None where the
    tool did not say; bus_id: the PCI address sysfs names the device by (0000:19:00.0), or ""."""

    def __init__(self, name, backend, free_bytes, total_bytes=None, bus_id="", link_current=None, link_max=None):
        self.name, self.backend = name, backend
        self.free_bytes, self.total_bytes = free_bytes, total_bytes
        self.bus_id, self.link_current, self.link_max = bus_id, link_current, link_max


def _number(text):
    """An nvidia-smi field as an int, or None for `[N/A]`, `[Not Supported]` and the like."""
    try:
        return int(float(text))
    except ValueError:
        return None


def _sysfs_bus_id(text):
    """nvidia-smi's `00000000:19:00.0` (8-digit domain) as sysfs names it: `0000:19:00.0`."""
    match = re.match(r"^([0-9A-Fa-f]+):([0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])$", text.strip())
    return f"{int(match[1], 16):04x}:{match[2].lower()}" if match else ""


def _parse_nvidia(text):
    """[GpuReport] from the CSV of NVIDIA_LINK_QUERY, or of the older four-column query (index, name,
    free, total: what an nvidia-smi that refuses the link fields answers); None when not understood."""
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = [part.strip() for part in line.split(",")]
        if len(parts) < 4:
            return None
        linked = len(parts) >= 9 and bool(_sysfs_bus_id(parts[-5]))
        tail = parts[-7:] if linked else parts[-2:]
        free_mib, total_mib = _number(tail[0]), _number(tail[1])
        if free_mib is None:
            return None
        report = GpuReport(", ".join(parts[1:len(parts) - len(tail)]), "cuda", free_mib * 1024 * 1024,
                           None if total_mib is None else total_mib * 1024 * 1024)
        if linked:
            report.bus_id = _sysfs_bus_id(tail[2])
            gen, width, gen_max, width_max = (_number(value) for value in tail[3:7])
            report.link_current = (gen, width) if gen and width else None
            report.link_max = (gen_max, width_max) if gen_max and width_max else None
        gpus.append(report)
    return gpus


def _parse_rocm(text):
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    gpus = []
    if not isinstance(doc, dict):
        return None
    for card, fields in sorted(doc.items()):
        if not isinstance(fields, dict):
            continue
        total = fields.get("VRAM Total Memory (B)")
        used = fields.get("VRAM Total Used Memory (B)")
        try:
            gpus.append(GpuReport(card, "rocm", int(total) - int(used), int(total)))
        except (TypeError, ValueError):
            return None
    return gpus


def _rocm_buses(path, run, gpus):
    """Each ROCm card's PCI address from `rocm-smi --showbus --json` ({"card0": {"PCI Bus": ...}});
    left "" where it does not answer."""
    answer = run([path, *ROCM_BUS_QUERY], 30.0)
    try:
        doc = json.loads(answer.stdout) if answer is not None and answer.returncode == 0 else {}
    except ValueError:
        doc = {}
    for gpu in gpus:
        fields = doc.get(gpu.name) if isinstance(doc, dict) else None
        if isinstance(fields, dict):
            gpu.bus_id = _sysfs_bus_id(str(fields.get("PCI Bus", "")))


def detect_gpus(which=default_which, run=default_run, details=False):
    """[(name, free bytes)] of this machine's GPUs from nvidia-smi, else rocm-smi; with details=True
    [GpuReport] (total memory, PCI address and PCIe link too: the host probe's query, falling back to
    --vram auto's when nvidia-smi refuses it).

    Raises UsageError naming the tools tried when neither is on the PATH or neither answers."""
    tried = []
    nvidia_queries = [NVIDIA_LINK_QUERY, NVIDIA_QUERY] if details else [NVIDIA_QUERY]
    for tool, queries, parse in (("nvidia-smi", nvidia_queries, _parse_nvidia), ("rocm-smi", [ROCM_QUERY], _parse_rocm)):
        path = which(tool)
        if not path:
            tried.append(f"{tool} (not on the PATH)")
            continue
        for query in queries:
            answer = run([path, *query], 30.0)
            if answer is not None and answer.returncode == 0:
                break
        if answer is None:
            tried.append(f"{tool} (cannot be run)")
            continue
        if answer.returncode != 0:
            first = (answer.stderr or answer.stdout).strip().splitlines()
            tried.append(f"{tool} (exit {answer.returncode}{': ' + first[0] if first else ''})")
            continue
        gpus = parse(answer.stdout)
        if gpus is None:
            tried.append(f"{tool} (answer not understood)")
            continue
        if not gpus:
            tried.append(f"{tool} (lists no GPU)")
            continue
        if not details:
            return [(gpu.name, gpu.free_bytes) for gpu in gpus]
        if tool == "rocm-smi":
            _rocm_buses(path, run, gpus)
        return gpus
    raise UsageError("--vram auto: no GPU found; tried " + ", ".join(tried) + "; give --vram SIZE[,SIZE...]")


def _windows_memory():
    """(total, available) physical bytes from GlobalMemoryStatusEx, or None."""
    import ctypes

    class MemoryStatus(ctypes.Structure):
        _fields_ = [("length", ctypes.c_ulong), ("load", ctypes.c_ulong), ("total_phys", ctypes.c_ulonglong),
                    ("avail_phys", ctypes.c_ulonglong), ("total_page", ctypes.c_ulonglong),
                    ("avail_page", ctypes.c_ulonglong), ("total_virtual", ctypes.c_ulonglong),
                    ("avail_virtual", ctypes.c_ulonglong), ("avail_ext", ctypes.c_ulonglong)]

    status = MemoryStatus()
    status.length = ctypes.sizeof(MemoryStatus)
    if ctypes.windll.kernel32.GlobalMemoryStatusEx(ctypes.byref(status)):
        return int(status.total_phys), int(status.avail_phys)
    return None


def host_ram_bytes():
    """This machine's physical RAM in bytes, or None when it cannot be read."""
    if sys.platform.startswith("win"):
        memory = _windows_memory()
        return memory[0] if memory else None
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def host_ram_available_bytes(meminfo="/proc/meminfo"):
    """The RAM this machine could give a new process without swapping, in bytes (Linux: MemAvailable of
    /proc/meminfo; Windows: GlobalMemoryStatusEx's available physical memory), or None."""
    if sys.platform.startswith("win"):
        memory = _windows_memory()
        return memory[1] if memory else None
    try:
        with open(meminfo, encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def measure_copy_bandwidth(megabytes=64, repeats=3):
    """A short measured copy bandwidth of this host in bytes/s (read + write counted, best of `repeats`)."""
    import time

    source = bytearray(megabytes * 1024 * 1024)
    target = bytearray(len(source))
    view = memoryview(target)
    best = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        view[:] = source
        elapsed = time.perf_counter() - start
        if elapsed > 0:
            best = max(best, 2 * len(source) / elapsed)
    return best


def build_gpus(vram_sizes=None, gpu_names_list=None, vram_bw=None, detected=None):
    """The local GPUs as Devices CUDA0.. in order.

    vram_sizes: [bytes] from --vram (or None); gpu_names_list: table keys from --gpu (or None);
    vram_bw: [bytes/s] from --vram-bw (one for all or one per GPU); detected: [(name, free)] from
    --vram auto. Raises UsageError when the lists disagree in length."""
    names = gpu_names_list or []
    if detected is not None:
        sizes = [free for _, free in detected]
        reported = [name for name, _ in detected]
    else:
        sizes = list(vram_sizes or [])
        reported = [""] * len(sizes)
    if names and sizes and len(names) != len(sizes):
        raise UsageError(f"--gpu names {len(names)} GPU(s) but --vram gives {len(sizes)}")
    if names and not sizes:
        sizes = [GPU_TABLE[name][1] for name in names]
        reported = [""] * len(sizes)
    count = len(sizes)
    bandwidths = list(vram_bw or [])
    if bandwidths and len(bandwidths) not in (1, count):
        raise UsageError(f"--vram-bw gives {len(bandwidths)} bandwidths for {count} GPU(s) (give one, or one per GPU)")
    devices = []
    for index in range(count):
        if bandwidths:
            bw, source = bandwidths[index if len(bandwidths) > 1 else 0], "--vram-bw"
        elif names:
            bw, source = GPU_TABLE[names[index]][2], f"GPU table ({GPU_TABLE[names[index]][0]})"
        else:
            guess = table_match(reported[index])
            if guess:
                bw, source = GPU_TABLE[guess][2], f"GPU table ({GPU_TABLE[guess][0]}, matched {reported[index]!r})"
            else:
                bw, source = DEFAULT_GPU_BW, "default (an RTX 3090's 936 GB/s; give --gpu or --vram-bw)"
        model = names[index] if names else reported[index]
        devices.append(Device(f"CUDA{index}", "gpu", sizes[index], bw, source, model))
    return devices


def table_match(reported, table=None):
    """A key of `table` (default GPU_TABLE) whose compact name appears in a tool's GPU name (`NVIDIA
    GeForce RTX 4090`), the longest first."""
    compact = re.sub(r"[^a-z0-9]", "", reported.lower())
    for key in sorted(GPU_TABLE if table is None else table, key=len, reverse=True):
        if key.replace("-", "") in compact:
            return key
    return None


def build_rpc(specs, rpc_bw=None):
    """RPC devices RPC0[host:port].. from `--rpc` specs, in the order given (one device per server)."""
    devices = []
    bandwidths = list(rpc_bw or [])
    if bandwidths and len(bandwidths) not in (1, len(specs)):
        raise UsageError(f"--rpc-bw gives {len(bandwidths)} bandwidths for {len(specs)} RPC server(s)")
    seen = set()
    for index, spec in enumerate(specs):
        endpoint, size = parse_rpc(spec)
        if endpoint in seen:
            raise UsageError(f"--rpc {endpoint} is given twice")
        seen.add(endpoint)
        if bandwidths:
            bw, source = bandwidths[index if len(bandwidths) > 1 else 0], "--rpc-bw"
        else:
            bw, source = DEFAULT_GPU_BW, "default (a remote RTX 3090; give --rpc-bw)"
        devices.append(Device(f"RPC0[{endpoint}]", "rpc", size, bw, source, endpoint=endpoint))
    return devices


def cpu_device(ram_bytes, ram_bw, source):
    return Device("CPU", "cpu", ram_bytes, ram_bw, source)
