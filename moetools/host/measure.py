"""Measured rates for the host profile: RAM read bandwidth (numpy reductions over per-thread chunks,
in threads, which numpy runs without the GIL) and a drive's sequential read rate (a file read after
its pages are dropped from the page cache). numpy is imported here only, when a measurement runs."""

import os
import sys
import threading
import time

MIB = 1024**2
GIB = 1024**3


def ram_read(threads, total_bytes=GIB, seconds=0.6, min_passes=3, max_passes=30):
    """(bytes/s, how measured): the best of several passes in which `threads` threads each reduce
    (numpy max over uint64) their own chunk of `total_bytes` in all, at the same time. Each thread
    allocates and fills its chunk itself, so on a NUMA machine the pages lie on its own node (first
    touch). Passes run until `seconds` have gone (at least min_passes)."""
    import numpy as np

    threads = max(1, int(threads))
    chunk = max(MIB, total_bytes // threads // 8 * 8)
    arrays = [None] * threads
    start_barrier = threading.Barrier(threads + 1)
    done_barrier = threading.Barrier(threads + 1)
    stop = []

    failed = []

    def worker(index):
        try:
            arrays[index] = np.ones(chunk // 8, dtype=np.uint64)  # written once: every page is real
            start_barrier.wait()
            while True:
                start_barrier.wait()
                if stop:
                    return
                arrays[index].max()
                done_barrier.wait()
        except threading.BrokenBarrierError:
            return
        except Exception as err:  # MemoryError above all: the others must not wait for this one forever
            failed.append(err)
            start_barrier.abort()
            done_barrier.abort()

    workers = [threading.Thread(target=worker, args=(index,), daemon=True) for index in range(threads)]
    for thread in workers:
        thread.start()
    best = 0.0
    passes = 0
    try:
        start_barrier.wait()  # every chunk allocated
        began = time.perf_counter()
        while passes < max_passes and (passes < min_passes or time.perf_counter() - began < seconds):
            tick = time.perf_counter()
            start_barrier.wait()
            done_barrier.wait()
            elapsed = time.perf_counter() - tick
            passes += 1
            if elapsed > 0:
                best = max(best, chunk * threads / elapsed)
    except threading.BrokenBarrierError:
        pass
    finally:
        stop.append(True)
        start_barrier.abort()  # every worker waiting at a barrier leaves
        done_barrier.abort()
        for thread in workers:
            thread.join()
    if failed:
        from moetools.errors import UsageError

        raise UsageError(f"the RAM read test could not run ({type(failed[0]).__name__}: "
                         f"{failed[0] or 'no memory'}; it needs {chunk * threads / MIB:.0f} MiB)")
    how = (f"measured: {chunk * threads / GIB:.2f} GiB read by {threads} thread{'s' if threads > 1 else ''} at once (numpy max over "
           f"per-thread uint64 chunks), best of {passes} passes")
    return best, how


def ram_test_bytes(available_bytes):
    """How much RAM the read test uses: 1 GiB (past any CPU cache, even a 1 GiB L3) when at least 8 GiB
    is available, else 256 MiB."""
    return GIB if (available_bytes or 0) >= 8 * GIB else 256 * MIB


def _drop_cached(handle):
    """Ask the kernel to drop the file's pages from the page cache; True when it could be asked
    (os.posix_fadvise exists on Linux and most Unixes, not on Windows or macOS)."""
    if not hasattr(os, "posix_fadvise"):
        return False
    try:
        os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        return True
    except OSError:
        return False


def _timed_read(path, limit_bytes, seconds):
    """(bytes read, seconds, cache dropped): a sequential read of `path` from its start in 8 MiB
    blocks, stopping at limit_bytes, the end, or `seconds`."""
    block = bytearray(8 * MIB)
    view = memoryview(block)
    done = 0
    with open(path, "rb", buffering=0) as handle:
        dropped = _drop_cached(handle)
        began = time.perf_counter()
        while done < limit_bytes and time.perf_counter() - began < seconds:
            got = handle.readinto(view[:min(len(block), limit_bytes - done)])
            if not got:
                break
            done += got
        elapsed = time.perf_counter() - began
    return done, elapsed, dropped


def _write_probe(folder, limit_bytes, seconds):
    """A temporary file of up to limit_bytes (written for at most `seconds`, fsynced) in `folder`; its path."""
    import tempfile

    fd, path = tempfile.mkstemp(prefix=".moetools-host-disk-", suffix=".tmp", dir=folder)
    try:
        block = os.urandom(MIB) * 8  # not zeros: a compressing file system would store nothing
        began = time.perf_counter()
        written = 0
        with os.fdopen(fd, "wb") as handle:
            while written < limit_bytes and time.perf_counter() - began < seconds:
                handle.write(block)
                written += len(block)
            handle.flush()
            os.fsync(handle.fileno())  # clean pages: only clean pages can be dropped from the cache
    except BaseException:
        os.unlink(path)
        raise
    return path


def disk_read(path, limit_bytes=GIB, seconds=3.0, min_file_bytes=256 * MIB):
    """(bytes/s, how measured) of the drive holding `path`: a file of at least min_file_bytes is read
    as it is; a folder (or a smaller file's folder) gets a temporary file written, read back and
    deleted. Reads stop at limit_bytes or `seconds`. Where the page cache cannot be dropped (Windows,
    macOS) the source says the rate may be the cache's."""
    path = os.path.abspath(path)
    own = None
    target = path
    if not (os.path.isfile(path) and os.path.getsize(path) >= min_file_bytes):
        folder = path if os.path.isdir(path) else os.path.dirname(path)
        own = target = _write_probe(folder, limit_bytes, seconds)
    try:
        done, elapsed, dropped = _timed_read(target, limit_bytes, seconds)
    finally:
        if own is not None:
            os.unlink(own)
    if done == 0 or elapsed <= 0:
        return None, f"nothing could be read from {path}"
    what = f"a {done / MIB:.0f} MiB temporary file written there and deleted" if own else f"{done / MIB:.0f} MiB of {path}"
    cache = ("after dropping its pages from the page cache (posix_fadvise DONTNEED)" if dropped else
             f"without dropping the page cache ({sys.platform} has no posix_fadvise): the rate may be the cache's")
    return done / elapsed, f"measured: sequential read of {what}, {cache}"
