"""device-fit's machine figures and where each came from: a host profile (`--host FILE`, written by
`moetools host`), a flag beside it (which wins), this machine (when the plan describes it), or a
stated default. Each figure's source lands in a SpeedSettings *_source field, a Device's
bandwidth_source, and the document's `machine` entry."""

import os

from moetools.devicefit import devices as devicesmod
from moetools.errors import UsageError

DEFAULT_THREADS = 8
DEFAULT_THREADS_SOURCE = f"default ({DEFAULT_THREADS}, a desktop's physical cores; the plan describes another machine: give -t)"
DEFAULT_RAM_BW_SOURCE = "default (dual-channel DDR5; give --ram-bw, --ram-bw auto or --host)"
DEFAULT_DISK_BW = 3e9
DEFAULT_DISK_BW_SOURCE = "default (an NVMe drive; give --disk-bw or a --host profile made with --disk)"
DEFAULT_H2D = 25e9
DEFAULT_H2D_SOURCE = "default (PCIe 4.0 x16 in practice; give --h2d or --host)"


class Machine:
    """Which machine a plan describes. path/profile: the --host profile (None: none given); here: the
    plan is of the machine device-fit runs on (no --host, and --vram, --gpu and --ram each absent or auto)."""

    def __init__(self, path=None, profile=None, here=True):
        self.path, self.profile, self.here = path, profile, here

    @property
    def label(self):
        return f"host profile {self.path}"


def _is_auto(text):
    return text is not None and str(text).strip().lower() == "auto"


def machine_of(host_path, vram, gpu_text, ram):
    """The Machine of device-fit's options: the profile at host_path loaded and checked (exit 2 naming the
    file and field), and --vram/--gpu/--ram auto refused beside it (they read this machine, the profile
    describes another)."""
    if not host_path:
        here = not any(text is not None and not _is_auto(text) for text in (vram, gpu_text, ram))
        return Machine(here=here)
    from moetools.formats import host_profile

    profile = host_profile.load(host_path)
    for flag, text in (("--vram", vram), ("--gpu", gpu_text), ("--ram", ram)):
        if _is_auto(text):
            raise UsageError(f"{flag} auto reads this machine, but --host {host_path} describes {profile['hostname']}: "
                             f"drop {flag} auto (the profile gives it) or give {flag} a value")
    return Machine(host_path, profile, here=False)


def host_gpus(machine, sizes, bandwidths):
    """The profile's GPUs as Devices CUDA0..: each one's memory as `--vram auto` takes it (the free
    memory nvidia-smi/rocm-smi reported: what llama.cpp can allocate), unless --vram gives sizes; the
    bandwidth the profile holds unless --vram-bw gives one."""
    gpus = machine.profile["gpus"]
    sizes = list(sizes) if sizes else [gpu["vram_free_bytes"] for gpu in gpus]
    devices = devicesmod.build_gpus(sizes, None, bandwidths, None)
    for index, device in enumerate(devices):
        if index >= len(gpus):
            break
        device.model = gpus[index]["name"]
        if not bandwidths:
            bandwidth = gpus[index]["bandwidth_bytes_per_s"]
            key = devicesmod.table_match(gpus[index]["name"])
            if bandwidth:
                device.bandwidth, device.bandwidth_source = float(bandwidth), f"{machine.label}: {gpus[index]['bandwidth_source']}"
            elif key:  # the table knows it now
                device.bandwidth = devicesmod.GPU_TABLE[key][2]
                device.bandwidth_source = f"GPU table ({devicesmod.GPU_TABLE[key][0]}, matched {gpus[index]['name']!r})"
    return devices  # --vram naming more GPUs than the profile holds: those beyond keep build_gpus' defaults


def ram_bytes(machine):
    """The CPU device's capacity from the profile (its total RAM, as --ram auto takes this machine's), or None."""
    return machine.profile["ram"]["total_bytes"] if machine.profile else None


def threads_figure(threads, machine):
    """(threads, source) for llama.cpp's CPU experts."""
    if threads is not None:
        if threads < 1:
            raise UsageError("--threads must be at least 1")
        return threads, "--threads"
    if machine.profile:
        cpu = machine.profile["cpu"]
        return cpu["threads"], f"{machine.label}: {cpu['threads_source']}"
    if not machine.here:
        return DEFAULT_THREADS, DEFAULT_THREADS_SOURCE
    from moetools.host.cpu import math_threads

    count, _ = math_threads()
    return count, f"this machine ({count} physical cores, llama.cpp's default)"


def ram_bw_figure(ram_bw, machine):
    """(bytes/s, source) of the host RAM, or (None, None) for SpeedSettings' default."""
    if _is_auto(ram_bw):
        return devicesmod.measure_copy_bandwidth(), "this machine (measured copy bandwidth, --ram-bw auto)"
    if ram_bw is not None:
        return devicesmod.parse_rate(ram_bw, "--ram-bw"), "--ram-bw"
    if machine.profile:
        return float(machine.profile["ram"]["read_bytes_per_s"]), f"{machine.label}: measured read"
    return None, DEFAULT_RAM_BW_SOURCE


def disk_figure(disk_bw, machine):
    """(bytes/s, source) of the drive the page cache refills from."""
    if disk_bw is not None:
        return devicesmod.parse_rate(disk_bw, "--disk-bw"), "--disk-bw"
    disk = machine.profile.get("disk") if machine.profile else None
    if disk:
        return float(disk["read_bytes_per_s"]), f"{machine.label}: measured read of {disk['path']}"
    return DEFAULT_DISK_BW, DEFAULT_DISK_BW_SOURCE


def pcie_figure(h2d, machine):
    """(bytes/s, source) host-to-device: --h2d, else the first GPU's PCIe link in the profile (one
    direction's payload rate of its generation and width), else the default."""
    if h2d is not None:
        return float(devicesmod.parse_rate(h2d, "--h2d")), "--h2d"
    gpus = machine.profile["gpus"] if machine.profile else []
    link = gpus[0]["pcie"] if gpus else None
    if link:
        return float(link["bytes_per_s"]), f"{machine.label}: PCIe {link['gen']}.0 x{link['width']} of CUDA0 ({gpus[0]['name']})"
    return DEFAULT_H2D, DEFAULT_H2D_SOURCE


def apply(speed, machine, ram_bw=None, disk_bw=None, threads=None, h2d=None):
    """SpeedSettings `speed` with the machine's figures and their sources set (in place); returns it."""
    rate, source = ram_bw_figure(ram_bw, machine)
    if rate is not None:
        speed.ram_bw = rate
    speed.ram_bw_source = source
    # a measured read rate (the profile's, --ram-bw auto) counts as a share of the peak the efficiencies are of
    speed.ram_bw_measured = rate is not None and ram_bw is None or (ram_bw or "").strip().lower() == "auto"
    speed.disk_bw, speed.disk_bw_source = disk_figure(disk_bw, machine)
    speed.threads, speed.threads_source = threads_figure(threads, machine)
    pcie_bw, pcie_source = pcie_figure(h2d, machine)
    if pcie_source != DEFAULT_H2D_SOURCE:  # without a flag or a profile the llama default (a link's rate) stays
        speed.pcie_bw, speed.pcie_source = pcie_bw, pcie_source
    if machine.profile:
        # llama.cpp without --numa reads across the sockets' memory: the speed model's NUMA term is per socket
        speed.numa_nodes = machine.profile["cpu"]["sockets"] or 1
        calibration = machine.profile.get("calibration")
        if isinstance(calibration, dict) and "efficiencies" in calibration:
            _check_efficiencies(calibration["efficiencies"], machine)
            fitted = speed.calibrated(calibration)
            for name in speed.EFFICIENCIES:
                setattr(speed, name, getattr(fitted, name))
            speed.calibration = calibration
    return speed


def _check_efficiencies(efficiencies, machine):
    """Exit 2 naming the field when a profile's calibration holds an efficiency that is not a number in
    (0, 1.2] (floor_s: seconds above 0)."""
    if not isinstance(efficiencies, dict):
        raise UsageError(f"{machine.path}: calibration.efficiencies must be an object")
    for name, value in efficiencies.items():
        limit = None if name == "floor_s" else 1.2
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or (limit and value > limit):
            raise UsageError(f"{machine.path}: calibration.efficiencies.{name} is {value!r}: expected a number in "
                             f"(0, {limit}]" if limit else f"{machine.path}: calibration.efficiencies.{name} is {value!r}: "
                             "expected seconds above 0")


def machine_doc(speed, machine):
    """The document's `machine` entry: each host figure the speeds rest on, and where it came from."""
    return {"host_profile": os.path.abspath(machine.path) if machine.path and machine.path != "-" else machine.path,
            "hostname": machine.profile["hostname"] if machine.profile else None,
            "threads": speed.threads, "threads_source": speed.threads_source,
            "ram_bw_bytes_per_s": speed.ram_bw, "ram_bw_source": speed.ram_bw_source,
            "disk_bw_bytes_per_s": speed.disk_bw, "disk_bw_source": speed.disk_bw_source,
            "pcie_bytes_per_s": speed.pcie_bw, "pcie_source": speed.pcie_source,
            "sockets": speed.numa_nodes}


def notes(speed, machine):
    """A note naming the profile a plan is of and the figures taken from it ([] without --host)."""
    if not machine.profile:
        return []
    taken = [f"{len(machine.profile['gpus'])} GPU(s)"]
    if speed.ram_bw_source.startswith(machine.label):
        taken.append(f"RAM read {speed.ram_bw / 1e9:.1f} GB/s")
    if speed.threads_source.startswith(machine.label):
        taken.append(f"{speed.threads} threads")
    if speed.disk_bw_source.startswith(machine.label):
        taken.append(f"drive {speed.disk_bw / 1e9:.1f} GB/s")
    if speed.pcie_source.startswith(machine.label):
        taken.append(f"PCIe {speed.pcie_bw / 1e9:.1f} GB/s")
    return [f"machine: {machine.profile['hostname']} as {machine.path} describes it ({', '.join(taken)}); "
            "flags given beside --host win"]
