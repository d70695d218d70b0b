"""The host profile of this machine (formats/host_profile.py), from cpu.py, gpus.py and measure.py."""

import os
import platform
import socket

from moetools import __version__
from moetools.devicefit import devices as devicesmod
from moetools.errors import UsageError
from moetools.formats import host_profile
from moetools.host import cpu as cpumod
from moetools.host import gpus as gpusmod
from moetools.host import measure


def ram_info(threads):
    """The profile's `ram` object: total and available bytes, and the measured read rate with `threads` threads."""
    total = devicesmod.host_ram_bytes()
    available = devicesmod.host_ram_available_bytes()
    if not total:
        raise UsageError("this machine's RAM size cannot be read (os.sysconf / GlobalMemoryStatusEx)")
    rate, how = measure.ram_read(threads, measure.ram_test_bytes(available))
    return {"total_bytes": int(total), "available_bytes": int(available if available is not None else total),
            "read_bytes_per_s": rate, "read_source": how}


def disk_info(path):
    """The profile's `disk` object for the drive holding `path` (a file or a folder that exists)."""
    if not os.path.exists(path):
        raise UsageError(f"--disk {path}: no such file or folder")
    rate, how = measure.disk_read(path)
    if rate is None:
        raise UsageError(f"--disk {path}: {how}")
    return {"path": os.path.abspath(path), "read_bytes_per_s": rate, "source": how}


def probe(disk_path=None, which=devicesmod.default_which, run=devicesmod.default_run, root="/"):
    """(profile dict, notes): this machine described. disk_path: measure that drive too (None: no
    disk entry). which/run: how GPU tools are found and run (devicefit.devices' contract)."""
    gpus, gpu_note = gpusmod.gpu_entries(which, run, root)
    cpu = cpumod.cpu_info(root)
    # the RAM test reads with every logical CPU: the most bandwidth the machine gives, which device-fit
    # scales by its CPU efficiency and caps by its threads
    ram = ram_info(cpu["logical_cpus"])
    profile = {"format": host_profile.FORMAT, "version": host_profile.VERSION, "written_by": f"moetools {__version__}",
               "hostname": socket.gethostname(), "os": f"{platform.system()} {platform.release()}".strip(),
               "gpus": gpus, "cpu": cpu, "ram": ram, "disk": disk_info(disk_path) if disk_path else None,
               "calibration": None}
    return profile, [gpu_note] if gpu_note else []
