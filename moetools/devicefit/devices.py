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


def _parse_nvidia(text):
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = [part.strip() for part in line.split(",")]
        if len(parts) < 4:
            return None
        try:
            free_mib = int(float(parts[-2]))
        except ValueError:
            return None
        gpus.append((", ".join(parts[1:-2]), free_mib * 1024 * 1024))
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
            gpus.append((card, int(total) - int(used)))
        except (TypeError, ValueError):
            return None
    return gpus


def detect_gpus(which=default_which, run=default_run):
    """[(name, free bytes)] of this machine's GPUs from nvidia-smi, else rocm-smi.

    Raises UsageError naming the tools tried when neither is on the PATH or neither answers."""
    tried = []
    for tool, query, parse in (("nvidia-smi", NVIDIA_QUERY, _parse_nvidia), ("rocm-smi", ROCM_QUERY, _parse_rocm)):
        path = which(tool)
        if not path:
            tried.append(f"{tool} (not on the PATH)")
            continue
        answer = run([path, *query], 30.0)
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
        return gpus
    raise UsageError("--vram auto: no GPU found; tried " + ", ".join(tried) + "; give --vram SIZE[,SIZE...]")


def host_ram_bytes():
    """This machine's physical RAM in bytes, or None when it cannot be read."""
    if sys.platform.startswith("win"):
        import ctypes

        class MemoryStatus(ctypes.Structure):
            _fields_ = [("length", ctypes.c_ulong), ("load", ctypes.c_ulong), ("total_phys", ctypes.c_ulonglong),
                        ("avail_phys", ctypes.c_ulonglong), ("total_page", ctypes.c_ulonglong),
                        ("avail_page", ctypes.c_ulonglong), ("total_virtual", ctypes.c_ulonglong),
                        ("avail_virtual", ctypes.c_ulonglong), ("avail_ext", ctypes.c_ulonglong)]

        status = MemoryStatus()
        status.length = ctypes.sizeof(MemoryStatus)
        if ctypes.windll.kernel32.GlobalMemoryStatusEx(ctypes.byref(status)):
            return int(status.total_phys)
        return None
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
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
            guess = _table_match(reported[index])
            if guess:
                bw, source = GPU_TABLE[guess][2], f"GPU table ({GPU_TABLE[guess][0]}, matched {reported[index]!r})"
            else:
                bw, source = DEFAULT_GPU_BW, "default (an RTX 3090's 936 GB/s; give --gpu or --vram-bw)"
        model = names[index] if names else reported[index]
        devices.append(Device(f"CUDA{index}", "gpu", sizes[index], bw, source, model))
    return devices


def _table_match(reported):
    """A table key whose compact name appears in a tool's GPU name (`NVIDIA GeForce RTX 4090`)."""
    compact = re.sub(r"[^a-z0-9]", "", reported.lower())
    for key in sorted(GPU_TABLE, key=len, reverse=True):
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
