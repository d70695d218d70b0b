"""This machine's GPUs for the host profile: what nvidia-smi or rocm-smi reports (devicefit.devices.
detect_gpus, the query --vram auto runs, with the PCIe link added), the memory bandwidth from
device-fit's GPU table, and the PCIe link from the tool or, where it says nothing, from sysfs."""

import os
import re

from moetools.devicefit import devices as devicesmod
from moetools.errors import UsageError

# Per-lane payload rate of each PCIe generation, one direction, bytes/s: the transfer rate after line
# coding (8b/10b for 1.x and 2.x, 128b/130b from 3.0, FLIT mode 242/256 for 6.0) over 8 bits.
PCIE_LANE_BYTES = {1: 0.25e9, 2: 0.5e9, 3: 0.985e9, 4: 1.969e9, 5: 3.938e9, 6: 7.563e9}
_GTS_TO_GEN = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}


def pcie_bytes_per_s(gen, width):
    """One direction's payload rate of a PCIe link of generation `gen` and `width` lanes, bytes/s."""
    return PCIE_LANE_BYTES[gen] * width


def _read(root, path):
    try:
        with open(os.path.join(root, path.lstrip("/")), encoding="ascii", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return None


def _link(root, device_dir, which):
    """(gen, width) from sysfs `{which}_link_speed` (`16.0 GT/s PCIe`) and `{which}_link_width`, or None."""
    speed = _read(root, f"{device_dir}/{which}_link_speed")
    width = _read(root, f"{device_dir}/{which}_link_width")
    match = re.match(r"^([0-9.]+)\s*GT/s", speed or "")
    try:
        gen = _GTS_TO_GEN.get(float(match[1])) if match else None
        lanes = int(width) if width else 0
    except ValueError:
        return None
    return (gen, lanes) if gen and lanes > 0 else None


def sysfs_link(bus_id, root="/"):
    """(gen, width, how found) of the PCI device `bus_id` (0000:19:00.0) from sysfs, or None.

    The link a transfer trains to is the lower of the device's and its upstream port's maximum
    (max_link_speed/max_link_width of /sys/bus/pci/devices/ID and of its parent folder); the current
    link is shown beside it, since an idle GPU drops its link generation to save power."""
    device_dir = f"/sys/bus/pci/devices/{bus_id}"
    own = _link(root, device_dir, "max")
    current = _link(root, device_dir, "current")
    if own is None:
        return (*current, f"sysfs {bus_id} current_link_speed/width") if current else None
    parent = None
    real = os.path.realpath(os.path.join(root, device_dir.lstrip("/")))
    parent_dir = os.path.dirname(real)
    if os.path.exists(os.path.join(parent_dir, "max_link_speed")):
        parent = _link("/", parent_dir, "max")
    gen, width = own if parent is None else (min(own[0], parent[0]), min(own[1], parent[1]))
    how = f"sysfs {bus_id} max_link_speed/width" + (" and its upstream port's" if parent else "")
    if current and current != (gen, width):
        how += f"; now gen {current[0]} x{current[1]} (an idle link slows down)"
    return gen, width, how


def _pcie(report, root):
    """The profile's `pcie` object of one GpuReport, or None when neither the tool nor sysfs says."""
    if report.link_max:
        gen, width = report.link_max
        how = "nvidia-smi pcie.link.gen.max/width.max"
        if report.link_current and report.link_current != report.link_max:
            how += f"; now gen {report.link_current[0]} x{report.link_current[1]} (an idle link slows down)"
    elif report.bus_id and sysfs_link(report.bus_id, root):
        gen, width, how = sysfs_link(report.bus_id, root)
    elif report.link_current:
        gen, width = report.link_current
        how = "nvidia-smi pcie.link.gen.current/width.current (may be an idle link's)"
    else:
        return None
    if gen not in PCIE_LANE_BYTES:
        return None
    return {"gen": gen, "width": width, "bytes_per_s": pcie_bytes_per_s(gen, width), "source": how}


def gpu_entries(which=devicesmod.default_which, run=devicesmod.default_run, root="/"):
    """(the profile's `gpus` list, a note): every GPU nvidia-smi or rocm-smi lists, in their order
    (llama.cpp's CUDA0.. order on one vendor's machine); no GPU is an empty list and a note saying
    which tools were tried."""
    try:
        reports = devicesmod.detect_gpus(which, run, details=True)
    except UsageError as err:
        return [], str(err).replace("--vram auto: ", "").split("; give ")[0]
    entries = []
    for report in reports:
        key = devicesmod.table_match(report.name)
        if key:
            bandwidth = devicesmod.GPU_TABLE[key][2]
            source = f"GPU table ({devicesmod.GPU_TABLE[key][0]}, matched {report.name!r})"
        else:
            bandwidth, source = None, f"not in the GPU table ({report.name!r}); give device-fit --vram-bw"
        entries.append({"name": report.name, "backend": report.backend,
                        "vram_bytes": report.total_bytes if report.total_bytes is not None else report.free_bytes,
                        "vram_free_bytes": report.free_bytes, "bandwidth_bytes_per_s": bandwidth,
                        "bandwidth_source": source, "pcie": _pcie(report, root)})
    return entries, ""
