"""Small file-access helpers shared by the tools that stream big files."""

import os


def advise(fd, offset, length, advice):
    """posix_fadvise(`advice`: "WILLNEED", "DONTNEED", "SEQUENTIAL", ...) where the platform has it.
    A hint: failures and platforms without it are ignored."""
    flag = getattr(os, f"POSIX_FADV_{advice}", None)
    if flag is None or not hasattr(os, "posix_fadvise"):
        return
    try:
        os.posix_fadvise(fd, offset, length, flag)
    except OSError:
        pass
