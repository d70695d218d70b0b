"""Atomic file writes: temporary name in the destination folder, flush, fsync, rename, fsync folder.

An interrupted run never leaves a half-written file under the final name. `durable=False` skips
both fsyncs (the rename stays atomic): for caches, whose entries are verified when read and only
cost a re-fetch when a crash loses them.
"""

import contextlib
import json
import os
import tempfile
import time

from moetools.errors import OutputError


def place_new(temp_path, final_path):
    """Rename `temp_path` to `final_path` only if nothing is there: link (fails on an existing name,
    atomically) then unlink; a plain rename would silently replace a file that appeared meanwhile."""
    try:
        os.link(temp_path, final_path)
    except FileExistsError:
        raise OutputError(f"{final_path}: already exists; not overwritten") from None
    except OSError:  # a file system without hard links: check, then rename (a small race remains)
        if os.path.lexists(final_path):
            raise OutputError(f"{final_path}: already exists; not overwritten") from None
        os.rename(temp_path, final_path)
        return
    os.unlink(temp_path)


REPLACE_ATTEMPTS = 8


def replace(source, target):
    """os.replace, retried for a few seconds on PermissionError: on Windows a file another process
    has open (a server, a virus scanner, an indexer) cannot be replaced until it is closed."""
    delay = 0.05
    for attempt in range(REPLACE_ATTEMPTS):
        try:
            os.replace(source, target)
            return
        except PermissionError:
            if attempt == REPLACE_ATTEMPTS - 1:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 1.0)


def fsync_dir(folder):
    """fsync a folder so a rename in it survives a crash (a no-op where folders cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _usual_mode():
    """0666 & ~umask: what open() would give a new file (mkstemp gives 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _remove_own_temps(folder, prefix):
    """Remove this process's temporaries named `prefix*.tmp` in `folder` (best effort)."""
    with contextlib.suppress(OSError):
        for name in os.listdir(folder):
            if name.startswith(prefix) and name.endswith(".tmp"):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(folder, name))


def remove_dead_twins(folder, name):
    """Remove the temporaries of `name` (`.NAME.PID-XXXX.tmp`) that killed processes of this host left
    in `folder`: every tool's next write of the same file cleans up after the run that died writing it,
    in any folder (a `-o` file, a curve, a table), not only in the folders a tool locks."""
    from moetools.locking import pid_alive, temp_owner

    prefix = f".{name}."
    try:
        names = [entry for entry in os.listdir(folder) if entry.startswith(prefix)]
    except OSError:
        return
    for entry in names:
        pid = temp_owner(entry)
        if pid is None or pid == os.getpid() or pid_alive(pid) or not entry[len(prefix):].startswith(f"{pid}-"):
            continue
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(folder, entry))


def check_output_folder(path, option):
    """Refuse an output file (or output folder) whose parent folder does not exist, before any work:
    one line, exit 2, naming the folder, as every other missing path is; a typo in `--plan
    /srv/plnas/k3.json` must not create a folder tree. `-`, '' and None (no output) pass."""
    from moetools.errors import UsageError

    if path is None or os.fspath(path) in ("", "-"):
        return
    folder = os.path.dirname(os.path.abspath(os.fspath(path)))
    if not os.path.isdir(folder):
        problem = "not a folder" if os.path.exists(folder) else "no such folder"
        raise UsageError(f"{folder}: {problem} ({option} {os.fspath(path)})")


@contextlib.contextmanager
def atomic_write(path, mode="wb", overwrite=True, durable=True):
    """Yield a file object for `path`'s temporary twin; rename it into place on success.

    The file gets the mode a plain open() would give it, not mkstemp's 0600: outputs such as a
    container or a plan file are read by a server that may run as another user.
    With `overwrite=False` an existing `path` is an OutputError (checked before writing and again,
    atomically, when the file is put in place).
    On any exception the temporary file is removed and the exception propagates.
    `durable=False`: no fsync of the file or the folder (a cache entry: atomic, not crash-durable).
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    if not overwrite and os.path.exists(path):
        raise OutputError(f"{path}: already exists (use --force to replace it)")
    remove_dead_twins(folder, os.path.basename(path))
    # the pid in the name lets a later run remove it once its owner is dead (locking.remove_stale_temps)
    prefix = f".{os.path.basename(path)}.{os.getpid()}-"
    tmp_path = None
    try:  # one try from the temporary's creation on: a Ctrl-C at any point leaves no temporary behind
        try:
            fd, tmp_path = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=folder)
        except OSError as err:
            raise OutputError(f"{folder}: cannot write here: {err.strerror or err}") from None
        os.chmod(tmp_path, _usual_mode())  # by path: os.fchmod is absent on Windows before Python 3.13
        encoding = None if "b" in mode else "utf-8"
        with os.fdopen(fd, mode, encoding=encoding) as handle:
            yield handle
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        if overwrite:
            replace(tmp_path, path)
        else:
            place_new(tmp_path, path)
    except BaseException as err:
        if tmp_path is None:  # interrupted inside mkstemp, after it created the file: find it by our prefix
            _remove_own_temps(folder, prefix)
        else:
            with contextlib.suppress(OSError):
                os.unlink(tmp_path)
        if isinstance(err, OSError):
            raise OutputError(f"{path}: write failed: {err.strerror or err}") from None
        raise
    if durable:
        fsync_dir(folder)


def write_bytes(path, data, overwrite=True, durable=True):
    with atomic_write(path, "wb", overwrite=overwrite, durable=durable) as handle:
        handle.write(data)


def write_text(path, text, overwrite=True):
    with atomic_write(path, "w", overwrite=overwrite) as handle:
        handle.write(text)


def write_json(path, doc, overwrite=True):
    write_text(path, json.dumps(doc, indent=2) + "\n", overwrite=overwrite)
