"""xxh3-128 digests of files, and the cache that makes a second run nearly free.

Digests are keyed by the file's identity and state, (device, inode, size, mtime_ns): a file that is
rewritten, truncated, or replaced under the same name gets a new key and is hashed again.

`quick` = xxh3-128 of the first and the last MiB (the whole file when it is at most 2 MiB), plus
whether the last MiB is all zeros (a preallocated download that was interrupted, or a sparse file)
and whether it is a hole (no data allocated there, where the file system says so). `full` = xxh3-128
of every byte. A file whose size or mtime changes while it is read raises FileChanged.
"""

import contextlib
import errno
import json
import os
import sys
import threading
import time

from moetools.fileio import advise, pread

QUICK_SPAN = 1024 * 1024
# Read size for hashing and copying. The kernel's readahead (POSIX_FADV_SEQUENTIAL) keeps the drive
# streaming, so a chunk need not be large for disk throughput; one that fits in the L2 cache lets
# xxh3 hash the bytes the read just copied without fetching them from RAM again. Measured here:
# page-cache reads hashed at 0.58x plain-read speed with 16 MiB chunks, 0.89x with 1 MiB; reads from
# disk the same either way.
CHUNK_BYTES = 1024 * 1024
CACHE_VERSION = 1
CACHE_NAME = "coldtwin-hashes.json"
# Test-only hooks (the fault-injection test): a pause after each chunk copied or hashed and after
# each rename or unlink, and a smaller chunk, so that a kill lands inside an action.
TEST_DELAY_ENV = "MOETOOLS_COLDTWIN_TEST_DELAY"
TEST_CHUNK_ENV = "MOETOOLS_COLDTWIN_TEST_CHUNK"


class FileChanged(Exception):
    """A file's size, mtime or identity changed between the scan and (or during) reading it."""


class Stopped(Exception):
    """Hashing was called off (the other tree's file differed, or failed, or the user interrupted)."""


def test_pause():
    delay = os.environ.get(TEST_DELAY_ENV)
    if delay:
        time.sleep(float(delay))


def chunk_bytes():
    return int(os.environ.get(TEST_CHUNK_ENV) or CHUNK_BYTES)


def cache_dir():
    """The user's cache folder for moetools: $MOETOOLS_CACHE_DIR, else the platform's cache folder."""
    override = os.environ.get("MOETOOLS_CACHE_DIR")
    if override:
        return override
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or os.path.join(os.path.expanduser("~"), "AppData", "Local")
        return os.path.join(base, "moetools", "cache")
    if sys.platform == "darwin":
        return os.path.join(os.path.expanduser("~"), "Library", "Caches", "moetools")
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "moetools")


def new_xxh3():
    import xxhash

    return xxhash.xxh3_128()


def check_unchanged(path, member, st, when="while being read"):
    """Raise FileChanged unless the stat result `st` still describes the scanned file `member`."""
    if (st.st_dev, st.st_ino) != (member.dev, member.ino):
        raise FileChanged(f"{path}: replaced by another file since the scan")
    if st.st_size != member.size:
        raise FileChanged(f"{path}: changed {when} (size {member.size} -> {st.st_size})")
    if st.st_mtime_ns != member.mtime_ns:
        raise FileChanged(f"{path}: modified {when} (mtime changed, same size)")


# Called after every chunk read by full_digest with (path, bytes so far); tests use it to change a
# file in the middle of a read.
chunk_hook = None


def _drop_cache(fd):
    """Ask the kernel to forget a file's cached pages, so the next read comes from the disk."""
    try:
        os.fdatasync(fd)
    except (OSError, AttributeError):  # no fdatasync on Windows
        pass
    advise(fd, 0, 0, "DONTNEED")


@contextlib.contextmanager
def naming(path):
    """Reads on a descriptor raise OSErrors that carry no file name (or the descriptor's number):
    give them `path`, so the line the user sees says which file could not be read."""
    try:
        yield
    except OSError as err:
        if isinstance(err.filename, (str, bytes)):
            raise
        raise OSError(err.errno, err.strerror or str(err), path) from None


def read_digest(path, member, on_bytes=None, from_disk=False, stop=None):
    with naming(path):
        return _read_digest(path, member, on_bytes, from_disk, stop)


def _read_digest(path, member, on_bytes=None, from_disk=False, stop=None):
    """xxh3-128 hex digest of every byte of `path`, which must still match `member` (a FileStat).

    Reads in CHUNK_BYTES pieces into one reused buffer (xxhash releases the GIL on large buffers,
    so two threads hash two files at once). `on_bytes(n)` is called after each chunk.
    `from_disk` drops the page cache first (re-reading a copy that was just written). When the
    threading.Event `stop` is set, the read ends at the next chunk with Stopped.
    """
    hasher = new_xxh3()
    buffer = bytearray(chunk_bytes())
    view = memoryview(buffer)
    total = 0
    fd = open_for_reading(path)
    try:
        check_unchanged(path, member, os.fstat(fd), "since the scan")
        if from_disk:
            _drop_cache(fd)
        advise(fd, 0, 0, "SEQUENTIAL")
        with os.fdopen(os.dup(fd), "rb", buffering=0) as handle:
            while True:
                count = handle.readinto(buffer)
                if not count:
                    break
                hasher.update(view[:count])
                total += count
                if on_bytes is not None:
                    on_bytes(count)
                if chunk_hook is not None:
                    chunk_hook(path, total)
                test_pause()
                if stop is not None and stop.is_set():
                    raise Stopped(path)
                if total > member.size:
                    break
        st = os.fstat(fd)
    finally:
        os.close(fd)
    check_unchanged(path, member, st)
    if total != member.size:
        raise FileChanged(f"{path}: read {total} bytes but the file has {member.size} (changed while being read)")
    return hasher.hexdigest()


def open_for_reading(path):
    """A read-only descriptor that leaves the file's atime alone where the OS allows (O_NOATIME).

    --free picks the least recently used models by atime: reading them to verify them must not
    make them all look used just now. O_NOATIME needs the file's owner (or CAP_FOWNER); without
    it the file is opened plainly.
    """
    flags = os.O_RDONLY | getattr(os, "O_BINARY", 0)
    noatime = getattr(os, "O_NOATIME", 0)
    if noatime:
        try:
            return os.open(path, flags | noatime)
        except PermissionError:
            pass
    return os.open(path, flags)


def tail_is_hole(fd, size):
    """True when the file system reports no data in the last MiB of the file (a sparse tail).

    Uses SEEK_DATA where the OS has it (Linux, macOS, FreeBSD); elsewhere (Windows) it says False and
    the caller knows only that the tail reads as zeros.
    """
    seek_data = getattr(os, "SEEK_DATA", None)
    if seek_data is None or size == 0:
        return False
    try:
        next_data = os.lseek(fd, max(0, size - QUICK_SPAN), seek_data)
    except OSError as err:
        return err.errno == errno.ENXIO  # no data from there to the end
    return next_data >= size


def quick_digest(path, member):
    """(xxh3-128 hex of the first and last MiB, whether the last MiB is all zeros, whether it is a
    hole) of `path`."""
    with naming(path):
        return _quick_digest(path, member)


def _quick_digest(path, member):
    hasher = new_xxh3()
    fd = open_for_reading(path)
    try:
        check_unchanged(path, member, os.fstat(fd), "since the scan")
        size = member.size
        if size <= 2 * QUICK_SPAN:
            head, tail_offset = pread(fd, size, 0), max(0, size - QUICK_SPAN)
            tail = head[tail_offset:]
            hasher.update(head)
        else:
            head = pread(fd, QUICK_SPAN, 0)
            tail = pread(fd, QUICK_SPAN, size - QUICK_SPAN)
            hasher.update(head)
            hasher.update(tail)
        st = os.fstat(fd)
        tail_zero = len(tail) > 0 and tail.count(0) == len(tail)
        tail_hole = tail_zero and tail_is_hole(fd, size)
    finally:
        os.close(fd)
    check_unchanged(path, member, st)
    expected = min(size, 2 * QUICK_SPAN)
    if len(head) + (len(tail) if size > 2 * QUICK_SPAN else 0) != expected:
        raise FileChanged(f"{path}: shorter than its size {size} (changed while being read)")
    return hasher.hexdigest(), tail_zero, tail_hole


class HashCache:
    """Digests on disk, keyed by "dev:ino" and valid while (size, mtime_ns) still match.

    A missing file is an empty cache; a corrupt one is ignored (and rewritten on save) with a line
    in `warnings`. Thread-safe: the verifier hashes hot and cold files in parallel.
    """

    def __init__(self, path=None):
        self.path = path
        self.entries = {}
        self.dirty = False
        self.warnings = []  # lines for the user (the command prints them)
        self.saved_at = float("-inf")
        self.lock = threading.Lock()
        if path:
            self._load()

    def _load(self):
        try:
            with open(self.path, "rb") as handle:
                doc = json.loads(handle.read())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as err:
            self.warnings.append(f"{self.path}: hash cache unreadable ({err}); ignoring it")
            return
        if not isinstance(doc, dict) or doc.get("version") != CACHE_VERSION or not isinstance(doc.get("entries"), dict):
            self.warnings.append(f"{self.path}: hash cache has an unknown layout; ignoring it")
            return
        self.entries = {key: value for key, value in doc["entries"].items() if isinstance(value, dict)}

    @staticmethod
    def _key(member):
        dev, rest = member.identity  # (device, inode), or (device, real path) without inode numbers
        return f"{dev}:{rest}" if member.ino else f"{dev}:path:{rest}"

    def get(self, member, kind):
        with self.lock:
            entry = self.entries.get(self._key(member))
        if entry and entry.get("size") == member.size and entry.get("mtime_ns") == member.mtime_ns:
            return entry.get(kind)
        return None

    def prune(self, roots):
        """Forget files that were below one of the scanned folders `roots` and are gone now.

        Entries of folders not scanned this time (an unplugged cold drive) are kept.
        """
        prefixes = [os.path.join(os.path.abspath(root), "") for root in roots]
        with self.lock:
            gone = [key for key, entry in self.entries.items()
                    if isinstance(entry.get("path"), str)
                    and any(os.path.abspath(entry["path"]).startswith(prefix) for prefix in prefixes)
                    and not os.path.lexists(entry["path"])]
            for key in gone:
                del self.entries[key]
            self.dirty = self.dirty or bool(gone)
        return len(gone)

    def put(self, member, **values):
        key = self._key(member)
        with self.lock:
            entry = self.entries.get(key)
            if not entry or entry.get("size") != member.size or entry.get("mtime_ns") != member.mtime_ns:
                entry = {"size": member.size, "mtime_ns": member.mtime_ns}
            entry.update(values)
            entry["path"] = member.path
            self.entries[key] = entry
            self.dirty = True

    def save(self, min_interval=0.0):
        """Write the cache atomically; a failure is a warning (the cache only saves time).

        With `min_interval` (seconds), skip the write when the last one is more recent: a long run
        saves its digests as it goes (a kill loses little) without rewriting a large file per model.
        """
        if not self.path or not self.dirty:
            return
        if min_interval and time.monotonic() - self.saved_at < min_interval:
            return
        self.saved_at = time.monotonic()
        from moetools.atomic import write_text
        from moetools.errors import OutputError

        with self.lock:
            text = json.dumps({"version": CACHE_VERSION, "entries": self.entries}, separators=(",", ":"))
            self.dirty = False
        try:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            write_text(self.path, text)
        except (OSError, OutputError) as err:
            self.warnings.append(f"{self.path}: cannot save the hash cache ({err})")


class Hasher:
    """Digests through the cache: `quick(member)` -> (hex, tail_zero, tail_hole), `full(member)` -> hex.

    `read_now` holds the states (identity, size, mtime_ns) whose full digest this process computed by
    reading the file (not taken from the cache): an eviction may rely on those without a second read.
    """

    def __init__(self, cache, bar=None):
        self.cache = cache
        self.bar = bar
        self.bar_lock = threading.Lock()
        self.read_now = set()

    def advance(self, count):
        """Move the progress bar on by `count` bytes (called from both hashing threads)."""
        if self.bar is not None:
            with self.bar_lock:
                self.bar.update(count)

    def quick(self, member):
        digest = self.cache.get(member, "quick")
        tail_zero, tail_hole = self.cache.get(member, "tail_zero"), self.cache.get(member, "tail_hole")
        if digest is None or tail_zero is None or tail_hole is None:
            digest, tail_zero, tail_hole = quick_digest(member.path, member)
            self.cache.put(member, quick=digest, tail_zero=tail_zero, tail_hole=tail_hole)
        return digest, tail_zero, tail_hole

    def full(self, member, stop=None):
        digest = self.cache.get(member, "full")
        if digest is None:
            digest = read_digest(member.path, member, self.advance, stop=stop)
            self.record_full(member, digest)
        else:
            self.advance(member.size)
        return digest

    def cached_full(self, member):
        """The full digest the cache holds for `member` in its current state, or None (no read)."""
        return self.cache.get(member, "full")

    def reread(self, member, stop=None):
        """Read every byte of `member` again from the disk (page cache dropped first), whatever the
        cache holds; the new digest replaces the cached one."""
        digest = read_digest(member.path, member, self.advance, from_disk=True, stop=stop)
        self.record_full(member, digest)
        return digest

    def record_full(self, member, digest):
        """Remember a digest this process computed from the file's bytes."""
        self.cache.put(member, full=digest)
        self.read_now.add(state_of(member))


def state_of(member):
    """What a digest is valid for: the file's identity, size and mtime."""
    return (member.identity, member.size, member.mtime_ns)
