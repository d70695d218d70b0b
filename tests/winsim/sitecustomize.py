"""A simulated Windows Python: put this folder first on PYTHONPATH and every process (the test runner
and every `moetools` subprocess it starts) behaves, for the calls moetools makes, as on Windows.

- POSIX-only calls are removed from `os` (os.fchmod before Python 3.13, os.pread, os.preadv,
  os.posix_fadvise, ...), as is what Windows lacks among flags and constants (O_DIRECT, O_NOATIME,
  SEEK_DATA).
- A folder cannot be opened with os.open (Windows: PermissionError).
- os.rename onto an existing path fails (Windows: FileExistsError); os.replace still replaces.

It runs before any test module is imported, so the standard library sees the same `os` as a Windows
Python would (shutil, for one, falls back to its path-based rmtree). `.ci/run` runs the whole suite a
second time with it. Not simulated: text-mode os.open without O_BINARY, files that cannot be deleted
or replaced while open, drive letters and backslashes.
"""

import errno
import os
import stat

REMOVED = (
    "fchmod", "fchown", "lchown", "chown", "lchmod",
    "pread", "preadv", "pwrite", "pwritev",
    "posix_fadvise", "posix_fallocate", "fdatasync",
    "sendfile", "copy_file_range", "splice",
    "O_DIRECT", "O_NOATIME", "O_NOFOLLOW", "SEEK_DATA", "SEEK_HOLE",
)
for _name in REMOVED + tuple(name for name in dir(os) if name.startswith("POSIX_FADV_")):
    if hasattr(os, _name):
        delattr(os, _name)

_posix_open = os.open
_posix_rename = os.rename


def _is_folder(path, dir_fd=None):
    if isinstance(path, int):
        return False
    try:
        return stat.S_ISDIR(os.stat(path, dir_fd=dir_fd).st_mode)
    except (OSError, NotImplementedError, TypeError):
        return False


def open(path, flags, mode=0o777, *, dir_fd=None):  # noqa: A001 - replaces os.open
    if _is_folder(path, dir_fd):
        raise PermissionError(errno.EACCES, "Permission denied (simulated Windows: a folder cannot be opened)", path)
    if dir_fd is None:
        return _posix_open(path, flags, mode)
    return _posix_open(path, flags, mode, dir_fd=dir_fd)


def rename(src, dst, *, src_dir_fd=None, dst_dir_fd=None):
    if os.path.lexists(dst):
        raise FileExistsError(errno.EEXIST, "Cannot create a file when that file already exists (simulated Windows)",
                              src, None, dst)
    return _posix_rename(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)


os.open = open
os.rename = rename
os.environ["MOETOOLS_WINSIM"] = "1"
