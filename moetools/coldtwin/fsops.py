"""cold-twin's file primitives: where a path lies (inside a folder, below a root), which names are
unfinished downloads, and the one safe way a migration puts a hot file on the cold tier (copy to a
temporary name, fsync, read back from disk, compare xxh3-128, rename into place, fsync the folder;
or keep a file already there only when its bytes are the same). Used by scan, hfcache, actions and
hfactions; imports none of them.
"""

import os

from moetools.atomic import fsync_dir, place_new
from moetools.coldtwin.hashing import (
    FileChanged,
    check_unchanged,
    chunk_bytes,
    naming,
    new_xxh3,
    open_for_reading,
    read_digest,
    test_pause,
)
from moetools.coldtwin.types import ActionFailed, FileStat, LogWriteError
from moetools.errors import OutputError
from moetools.locking import pid_alive

# --- paths and names ------------------------------------------------------------------------------

# Names a download tool gives a file it has not finished; never an artifact, never a twin.
INCOMPLETE_SUFFIXES = (".part", ".incomplete", ".tmp", ".downloading")


def is_incomplete(name):
    return name.lower().endswith(INCOMPLETE_SUFFIXES)


def real_folder(path):
    return os.path.normcase(os.path.realpath(path))


def is_inside(inner, outer):
    """True when folder `inner` is `outer` or lies below it (both real, normalised paths)."""
    if inner == outer:
        return True
    try:
        return os.path.commonpath([inner, outer]) == outer
    except ValueError:  # different drives on Windows
        return False


# --- placing a file on the cold tier (migrations) -------------------------------------------------

TEMP_MARK = ".moetools-"


def is_below(path, root):
    """True when `path` is `root` or lies below it (both as absolute paths)."""
    if not isinstance(path, str):
        return False
    return is_inside(os.path.normcase(os.path.abspath(path)), os.path.normcase(os.path.abspath(root)))


def temp_name(dest_folder, name):
    return os.path.join(dest_folder, f".{name}{TEMP_MARK}{os.getpid()}.tmp")


def remove_stale_temps(dest_folder, names, log):
    """Remove the temporary copies a killed run left for `names` in `dest_folder` (ours only)."""
    try:
        entries = os.listdir(dest_folder)
    except OSError:
        return
    for entry in entries:
        for name in names:
            prefix = f".{name}{TEMP_MARK}"
            if entry.startswith(prefix) and entry.endswith(".tmp"):
                pid = entry[len(prefix):-len(".tmp")]
                if pid.isdigit() and int(pid) != os.getpid() and pid_alive(int(pid)):
                    raise ActionFailed(f"{os.path.join(dest_folder, entry)}: another moetools run (pid {pid}) is copying here")
                path = os.path.join(dest_folder, entry)
                os.unlink(path)
                log.write("stale-temp-removed", path=path)


def _copy_member(member, dest_folder, log, hasher, name=None):
    """Copy one hot member into `dest_folder` (as `name`, default its own) safely; returns the
    FileStat of the copy in place."""
    name = name or member.name
    final = os.path.join(dest_folder, name)
    temp = temp_name(dest_folder, name)
    log.write("copy-start", src=member.path, temp=temp, dest=final, bytes=member.size)
    source_hash = new_xxh3()
    buffer = bytearray(chunk_bytes())
    view = memoryview(buffer)
    copied = 0
    try:
        with os.fdopen(open_for_reading(member.path), "rb", buffering=0) as source, open(temp, "xb") as out:
            check_unchanged(member.path, member, os.fstat(source.fileno()), "since the scan")
            while True:
                with naming(member.path):  # a failed read names the source; a failed write, the temporary
                    count = source.readinto(buffer)
                if not count:
                    break
                source_hash.update(view[:count])
                out.write(view[:count])
                copied += count
                hasher.advance(count)
                test_pause()
            check_unchanged(member.path, member, os.fstat(source.fileno()))
            if copied != member.size:
                raise FileChanged(f"{member.path}: read {copied} bytes, expected {member.size} (changed while being read)")
            out.flush()
            os.utime(out.fileno() if os.utime in os.supports_fd else temp, ns=(member.atime_ns, member.mtime_ns))
            os.fsync(out.fileno())
        written = FileStat.from_stat(temp, os.stat(temp))
        copy_digest = read_digest(temp, written, hasher.advance, from_disk=True)
        if copy_digest != source_hash.hexdigest():
            raise ActionFailed(f"{temp}: the copy read back from disk differs from {member.path} (xxh3-128)")
        log.write("copy-verified", src=member.path, temp=temp, xxh3_128=copy_digest)
        place_new(temp, final)
    except BaseException as err:
        if os.path.lexists(temp):
            try:
                os.unlink(temp)
            except OSError:
                pass
        if isinstance(err, LogWriteError):
            raise
        if isinstance(err, (FileChanged, OutputError)):
            raise ActionFailed(str(err)) from None
        if isinstance(err, OSError):
            raise ActionFailed(f"{err.filename or temp}: copy failed: {err.strerror or err}") from None
        raise
    fsync_dir(dest_folder)
    placed = FileStat.from_stat(final, os.stat(final))
    hasher.record_full(member, copy_digest)
    hasher.record_full(placed, copy_digest)
    log.write("renamed", src=member.path, temp=temp, dest=final)
    test_pause()
    return placed


def _make_folder(folder):
    missing = []
    probe = os.path.abspath(folder)
    while not os.path.isdir(probe):
        missing.append(probe)
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    os.makedirs(folder, exist_ok=True)
    for created in reversed(missing):
        fsync_dir(os.path.dirname(created))


def place_member(member, final, log, hasher, trust_cache):
    """Put hot `member` at `final` for a migration (plain folders and Hugging Face blobs alike):
    copy it when nothing is there, else keep what is there if it is the same content. Returns the
    FileStat of the cold copy."""
    folder = os.path.dirname(final)
    _make_folder(folder)
    remove_stale_temps(folder, [os.path.basename(final)], log)
    if not os.path.lexists(final):
        return _copy_member(member, folder, log, hasher, name=os.path.basename(final))
    try:
        cold = FileStat.from_stat(final, os.stat(final))
    except OSError as err:
        raise ActionFailed(f"{final}: cannot read the file already there ({err.strerror or err})") from None
    return reuse_existing(member, cold, log, hasher, trust_cache)


def reuse_existing(member, cold, log, hasher, trust_cache):
    """Keep the file `cold` already at a migration's destination as the copy of hot `member` when its
    bytes, read again now from the disk (unless `trust_cache`), have the hot member's digest; a
    different file under the same name is never overwritten. Returns `cold`."""
    if cold.identity == member.identity:
        raise ActionFailed(f"{cold.path}: is the hot file itself (same device and inode)")
    if cold.size != member.size:
        raise ActionFailed(f"{cold.path}: already exists with {cold.size} bytes (hot: {member.size}); not overwritten")
    try:
        same = (hasher.full(cold) if trust_cache else hasher.reread(cold)) == hasher.full(member)
    except (OSError, FileChanged) as err:
        raise ActionFailed(f"cannot compare with the existing {cold.path}: {err}") from None
    if not same:
        raise ActionFailed(f"{cold.path}: already exists with different content (xxh3-128); not overwritten")
    log.write("reuse", src=member.path, dest=cold.path)
    return cold
