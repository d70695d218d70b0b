"""Small file-access helpers shared by the tools that stream big files."""

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
