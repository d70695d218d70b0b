"""Small file-access helpers shared by the tools that stream big files."""

import contextlib
import os
import threading


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


O_BINARY = getattr(os, "O_BINARY", 0)  # Windows: without it os.open files are in text mode
# Without os.pread (Windows) a positioned read is a seek and a read on a shared descriptor: one lock
# keeps two threads' seeks from interleaving.
_SEEK_LOCK = threading.Lock()


def open_read(path, flags=0):
    """os.open for reading bytes, on every platform (O_BINARY where it exists)."""
    return os.open(path, os.O_RDONLY | O_BINARY | flags)


def pread(fd, length, offset):
    """Up to `length` bytes at `offset` without moving other readers: os.pread where present, else
    seek+read under a lock. Short only at the end of the file."""
    if hasattr(os, "pread"):
        pieces, got = [], 0
        while got < length:  # os.pread may return less before the end (network file systems)
            piece = os.pread(fd, length - got, offset + got)
            if not piece:
                break
            pieces.append(piece)
            got += len(piece)
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)
    pieces = []
    with _SEEK_LOCK:
        os.lseek(fd, offset, os.SEEK_SET)
        while length > 0:
            piece = os.read(fd, length)
            if not piece:
                break
            pieces.append(piece)
            length -= len(piece)
    return b"".join(pieces)


def preadinto(fd, buffers, offset):
    """Fill the writable `buffers` in order from `offset`; returns the bytes read (less than their
    total only at the end of the file). os.preadv where present, else seek+read under a lock."""
    if hasattr(os, "preadv"):
        return os.preadv(fd, buffers, offset)
    total = 0
    with _SEEK_LOCK:
        os.lseek(fd, offset, os.SEEK_SET)
        for buffer in buffers:
            view = memoryview(buffer).cast("B")
            filled = 0
            while filled < len(view):
                piece = os.read(fd, min(len(view) - filled, 1 << 24))
                if not piece:
                    return total + filled
                view[filled:filled + len(piece)] = piece
                filled += len(piece)
            total += filled
    return total


def map_read(fd, offset, length):
    """A read-only memoryview of the `length` bytes at `offset` of the file `fd`, mapped (no copy
    into a buffer: the page cache's own pages), or None where that range cannot be mapped (past the
    end of the file, which mmap checks; a file system or platform without mapping): the caller then
    reads with `pread`. The mapping asks the system to read the whole range ahead (MADV_WILLNEED,
    where there is one), as one read call would, instead of page by page as it is touched. It lives
    as long as the view (and anything made from it) does. A file cut shorter while mapped is the one
    case a read would report and a mapping cannot (the process gets SIGBUS): the tools that use this
    read files nobody rewrites in place (models, which llama.cpp maps the same way)."""
    import mmap

    if length <= 0:
        return None
    base = offset - offset % mmap.ALLOCATIONGRANULARITY
    try:
        mapped = mmap.mmap(fd, length + offset - base, access=mmap.ACCESS_READ, offset=base)
    except (OSError, ValueError, OverflowError):  # past the end, or no mapping here
        return None
    if hasattr(mmap, "MADV_WILLNEED"):
        with contextlib.suppress(OSError, ValueError):
            mapped.madvise(mmap.MADV_WILLNEED)
    return memoryview(mapped)[offset - base:]
