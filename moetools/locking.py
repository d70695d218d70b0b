"""An advisory lock per output folder, and the clean-up of temporaries a dead run left there.

Every tool that writes into a folder (a container, a quantize tier folder, cold-twin's cold folder
and its log's folder, trace-tail's plan folder) holds `folder_lock(folder)` while it writes, so a
second run waits (`wait=True`, the commands' `--wait`) or stops with "in use by pid N since ...".

The lock is a file, `.moetools.lock`, created atomically with O_CREAT|O_EXCL and holding JSON
`{"pid", "host", "started", "tool"}`. It is stale when its holder is a dead pid on this host; a
stale lock is broken under a second, short-lived lock (`.moetools.lock.break`) so that two runs
finding the same stale lock cannot both take the folder. A lock held from another host (a shared
network folder) is never broken automatically: the message names the host and the lock file.
"""

import contextlib
import json
import os
import socket
import time

from moetools.errors import OutputError

LOCK_NAME = ".moetools.lock"
BREAK_NAME = ".moetools.lock.break"
TEMP_SUFFIX = ".tmp"
# a lock file still empty (its holder is writing it) or a break lock older than this is abandoned
ABANDONED_SECONDS = 10.0
POLL_SECONDS = 0.1
# trace-tail holds a plan folder's lock only for one read-modify-write; it waits this long for it
PLAN_WAIT_SECONDS = 60.0
_O_BINARY = getattr(os, "O_BINARY", 0)


def this_host():
    return socket.gethostname() or "localhost"


def pid_alive(pid):
    """True when process `pid` exists on this machine (an unknown answer counts as alive)."""
    if pid <= 0:
        return False
    if pid == os.getpid():
        return True
    if os.name == "nt":
        return _windows_pid_alive(pid)
    try:
        os.kill(pid, 0)  # signal 0: existence check only (never on Windows, where it terminates)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return True
    return True


def _windows_pid_alive(pid):
    import ctypes

    kernel32 = ctypes.windll.kernel32
    process_query_limited_information, still_active, access_denied = 0x1000, 259, 5
    handle = kernel32.OpenProcess(process_query_limited_information, False, pid)
    if not handle:
        return kernel32.GetLastError() == access_denied
    try:
        code = ctypes.c_ulong()
        if not kernel32.GetExitCodeProcess(handle, ctypes.byref(code)):
            return True
        return code.value == still_active
    finally:
        kernel32.CloseHandle(handle)


def read_holder(lock_path):
    """The lock file's JSON as a dict, or None when it is missing, empty or unreadable."""
    try:
        with open(lock_path, "rb") as handle:
            doc = json.loads(handle.read().decode("utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _age_seconds(path):
    try:
        return time.time() - os.stat(path).st_mtime
    except OSError:
        return 0.0


def holder_is_stale(holder, lock_path):
    """A lock whose holder died on this host, or a file nobody finished writing long ago."""
    if holder is None:
        return _age_seconds(lock_path) > ABANDONED_SECONDS
    pid = holder.get("pid")
    if holder.get("host") != this_host() or isinstance(pid, bool) or not isinstance(pid, int):
        return False
    return not pid_alive(pid)


def describe_holder(folder, holder, lock_path):
    if holder is None:
        return f"{folder}: in use (lock file {lock_path} is being written)"
    pid, host = holder.get("pid", "?"), holder.get("host", "?")
    since = holder.get("started", "?")
    tool = f" ({holder['tool']})" if holder.get("tool") else ""
    where = "" if host == this_host() else (
        f" on {host} (another machine: remove {lock_path} if it no longer runs moetools there)")
    return f"{folder}: in use by pid {pid}{tool}{where} since {since}"


def _create_exclusive(path, payload):
    """Create `path` with `payload` atomically; False when it already exists."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | _O_BINARY, 0o644)
    except FileExistsError:
        return False
    try:
        os.write(fd, payload)
        os.fsync(fd)
    finally:
        os.close(fd)
    return True


def _break_stale(folder, lock_path, seen):
    """Remove the stale lock `seen` was read from, unless someone else already replaced it."""
    break_path = os.path.join(folder, BREAK_NAME)
    if not _create_exclusive(break_path, str(os.getpid()).encode()):
        if _age_seconds(break_path) > ABANDONED_SECONDS:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(break_path)
        return
    try:
        current = read_holder(lock_path)
        if current == seen and holder_is_stale(current, lock_path):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(lock_path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(break_path)


def _now_text():
    return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime())


class FolderLock:
    """Held lock on one folder; `release()` (or leaving the `with`) removes the lock file."""

    def __init__(self, folder, lock_path, holder, created=()):
        self.folder = folder
        self.path = lock_path
        self.holder = holder
        self.created = created  # folders (deepest first) that taking the lock created

    def release(self):
        """Remove the lock file (if still ours), and the folder if taking the lock created it and
        nothing was written into it (a run that failed early leaves nothing behind)."""
        if read_holder(self.path) == self.holder:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
            for folder in self.created:
                try:
                    os.rmdir(folder)  # fails, as wanted, when anything is inside
                except OSError:
                    break

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()
        return False


def _missing_folders(folder):
    """`folder` and its ancestors that do not exist yet, deepest first."""
    missing = []
    while folder and not os.path.isdir(folder):
        missing.append(folder)
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    return tuple(missing)


def acquire(folder, tool="", wait=False, on_wait=None, timeout=None):
    """Take `folder`'s lock (creating the folder). Raises OutputError "in use by pid N since ..."
    when another live run holds it and `wait` is false; with `wait`, polls until it is free (calling
    `on_wait(message)` once) or `timeout` seconds pass."""
    folder = os.path.abspath(os.fspath(folder))
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise OutputError(f"{folder}: exists and is not a folder")
    created = _missing_folders(folder)
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as err:
        raise OutputError(f"{folder}: cannot create the output folder: {err.strerror or err}") from None
    lock_path = os.path.join(folder, LOCK_NAME)
    holder = {"pid": os.getpid(), "host": this_host(), "started": _now_text(), "tool": tool}
    payload = (json.dumps(holder) + "\n").encode()
    deadline = None if timeout is None else time.monotonic() + timeout
    told = False
    while True:
        try:
            if _create_exclusive(lock_path, payload):
                return FolderLock(folder, lock_path, holder, created)
        except FileNotFoundError:  # the holder we waited for created the folder and removed it, empty
            created = _missing_folders(folder)
            try:
                os.makedirs(folder, exist_ok=True)
            except OSError as err:
                raise OutputError(f"{folder}: cannot create the output folder: {err.strerror or err}") from None
            continue
        except OSError as err:
            raise OutputError(f"{lock_path}: cannot take the folder's lock: {err.strerror or err}") from None
        seen = read_holder(lock_path)
        if holder_is_stale(seen, lock_path):
            _break_stale(folder, lock_path, seen)
            continue
        message = describe_holder(folder, seen, lock_path)
        if not wait or (deadline is not None and time.monotonic() > deadline):
            raise OutputError(message + ("" if wait else "; wait for it to finish or pass --wait"))
        if not told and on_wait is not None:
            on_wait(message + "; waiting")
            told = True
        time.sleep(POLL_SECONDS)


@contextlib.contextmanager
def folder_lock(folder, tool="", wait=False, on_wait=None, timeout=None):
    """`with folder_lock(folder, tool="quantize", wait=args.wait): ...` — see `acquire`."""
    lock = acquire(folder, tool=tool, wait=wait, on_wait=on_wait, timeout=timeout)
    try:
        yield lock
    finally:
        lock.release()


@contextlib.contextmanager
def folder_locks(folders, tool="", wait=False, on_wait=None):
    """Locks on several folders, taken in a fixed (sorted, deduplicated) order so two runs locking
    the same pair cannot deadlock each other."""
    unique = sorted({os.path.normcase(os.path.abspath(os.fspath(folder))) for folder in folders})
    with contextlib.ExitStack() as stack:
        for folder in unique:
            stack.enter_context(folder_lock(folder, tool=tool, wait=wait, on_wait=on_wait))
        yield


def temp_owner(name):
    """The pid in a moetools temporary's name (`.NAME.PID-XXXXXXXX.tmp`, atomic.py's pattern), else None."""
    if not (name.startswith(".") and name.endswith(TEMP_SUFFIX)):
        return None
    stem = name[: -len(TEMP_SUFFIX)]
    owner = stem.rsplit(".", 1)[-1]
    pid, dash, _ = owner.partition("-")
    return int(pid) if dash and pid.isdigit() else None


def remove_stale_temps(folder):
    """Remove the temporaries (atomic.py's `.NAME.PID-XXXX.tmp`) that dead processes of this host left
    in `folder`; returns the names removed. A live owner's temporary is left alone."""
    removed = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in sorted(names):
        pid = temp_owner(name)
        if pid is None or pid == os.getpid() or pid_alive(pid):
            continue
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(folder, name))
            removed.append(name)
    return removed
