"""Room on the drive before a large write: what is needed and what is free, said before a byte is
written (a 620 GB container started onto a drive with 75 GB free used to fail hours later)."""

import os
import shutil

from moetools.errors import OutputError

SPACE_MARGIN = 16 * 1024 * 1024  # room left for the file system's own blocks, logs and manifests


def existing_folder(path):
    """`path` or its nearest ancestor that exists (an output folder may not be created yet)."""
    probe = os.path.abspath(path)
    while not os.path.isdir(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    return probe


def free_bytes(folder, disk_usage=shutil.disk_usage):
    """Bytes free to this user on the drive that holds `folder` (shutil.disk_usage: statvfs, or
    GetDiskFreeSpaceExW on Windows)."""
    return disk_usage(existing_folder(folder)).free


def check_room(folder, needed, what, disk_usage=shutil.disk_usage):
    """Raise OutputError naming `folder`, the bytes `what` needs and the bytes free when the drive
    has less than `needed` + SPACE_MARGIN."""
    if needed <= 0:
        return
    free = free_bytes(folder, disk_usage)
    if needed + SPACE_MARGIN > free:
        from moetools.sizes import format_size

        raise OutputError(f"{folder}: no space for {what}: needs {format_size(needed)} "
                          f"(+{format_size(SPACE_MARGIN)} margin), {format_size(free)} free")
