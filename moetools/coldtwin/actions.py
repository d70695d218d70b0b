"""Evict, migrate and --free: the only code in moetools that deletes a user's model files.

Safety rules, in the order they apply:
- evict removes hot members only for a twin that passed `full` verification, and right before the
  first unlink it reads every cold member again in full, from the disk, and compares it with the hot
  member's digest (the hot one may come from the hash cache, whose key is the file's identity, size
  and mtime; the cold one never does: bit rot keeps size and mtime). Only `--trust-cache` skips that
  read; a cold file this process itself read or wrote and read back is not read twice. Right before
  each unlink it re-stats the hot member (size, mtime, device, inode) and, before the first, every
  twin member, so a file that changed since it was hashed is never the reason another is deleted.
  Folders the eviction emptied are removed (never HOT_DIR itself, never a folder that was empty
  already);
- migrate copies each member to a temporary name in the cold folder, fsyncs it, re-reads it from
  disk (page cache dropped where the OS allows) and compares xxh3-128 with the bytes read from the
  source, renames it into place and fsyncs the folder; only when every member is in place does it
  evict the hot copy. Free space is checked before the first byte is copied;
- every step is appended to a JSON-lines log (fsynced per line) before the next begins, so after a
  kill the log says what was done, and a rerun of the same command picks up where it stopped: at
  every point of a migration or an eviction each artifact is complete in at least one place.
"""

import fnmatch
import json
import os
import shutil
import time
from dataclasses import dataclass

from moetools.atomic import fsync_dir
from moetools.coldtwin.core import NONE, SAVE_INTERVAL, VERIFIED, Twin, check_artifact
from moetools.coldtwin.fsops import (  # noqa: F401 (TEMP_MARK, place_member, temp_name: imported from here until 0.3)
    TEMP_MARK,
    _copy_member,
    _make_folder,
    is_below,
    is_inside,
    place_member,
    remove_stale_temps,
    reuse_existing,
    temp_name,
)
from moetools.coldtwin.hashing import (
    FileChanged,
    Stopped,
    check_unchanged,
    state_of,
    test_pause,
)
from moetools.coldtwin.hfactions import migrate_revision, remove_revision, revision_destination, revision_needs
from moetools.coldtwin.types import ActionFailed, FileStat, LogWriteError  # noqa: F401 (tests import ActionFailed from here)
from moetools.errors import OutputError
from moetools.locking import pid_alive

# Left free on the cold tier beyond the bytes copied (file system metadata, the folder entries).
LOG_NAME = "coldtwin-actions.jsonl"
_PATH_FIELDS = ("hot", "twin", "src", "temp", "dest", "path")


@dataclass
class Action:
    """What was done (or, in a dry run, would be done) to one artifact."""

    kind: str  # "evict" or "migrate"
    dry_run: bool
    done: bool = False
    error: str = None
    freed: int = 0
    twin: str = None

    def as_dict(self):
        return {"kind": self.kind, "dry_run": self.dry_run, "done": self.done, "error": self.error,
                "freed_bytes": self.freed, "twin": self.twin}


class ActionLog:
    """Append-only JSON lines; each line is flushed and fsynced before the action it announces.

    A line that cannot be written (a full disk, a file size limit) stops the run with an OutputError
    naming the log: an action must never go on unrecorded."""

    def __init__(self, path):
        self.path = path
        self.run = f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{os.getpid()}"
        refuse_irregular_log(path)
        folder = os.path.dirname(os.path.abspath(path))
        try:
            os.makedirs(folder, exist_ok=True)
            self.handle = open(path, "a", encoding="utf-8")
        except OSError as err:
            raise OutputError(f"{path}: cannot open the action log: {err.strerror or err}") from None

    def write(self, event, **fields):
        record = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "run": self.run, "event": event}
        # Absolute paths: the log outlives the working folder of the run that wrote it.
        record.update({key: os.path.abspath(value) if key in _PATH_FIELDS and isinstance(value, str) else value
                       for key, value in fields.items()})
        try:
            self.handle.write(json.dumps(record, separators=(",", ":")) + "\n")
            self.handle.flush()
            os.fsync(self.handle.fileno())
        except OSError as err:
            raise LogWriteError(f"{self.path}: cannot write the action log ({err.strerror or err}); "
                              f"stopped before the next step of {event.split('-')[0]}") from None

    def close(self):
        try:
            self.handle.close()
        except OSError:  # the line that failed is still buffered: write() has reported it already
            pass


def refuse_irregular_log(path):
    """OutputError when `path` exists and is not a regular file (a device such as /dev/full would be
    read for ever when the log is searched for interrupted runs)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return
    except OSError as err:
        raise OutputError(f"{path}: cannot use as the action log: {err.strerror or err}") from None
    import stat

    if not stat.S_ISREG(st.st_mode):
        raise OutputError(f"{path}: the action log must be a regular file")


class NullLog:
    """The log of a dry run: nothing is done, so nothing is written."""

    path = None

    def write(self, event, **fields):
        pass

    def close(self):
        pass


def interrupted_actions(path):
    """Actions a previous run started and never finished, from the log at `path`: [record]."""
    refuse_irregular_log(path)
    open_actions = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue  # a line torn by a kill
                if not isinstance(record, dict):
                    continue
                event, hot = record.get("event", ""), record.get("hot")
                if event in ("migrate-start", "evict-start"):
                    open_actions[(event.split("-")[0], hot)] = record
                elif event in ("migrate-done", "migrate-failed", "evict-done", "evict-failed"):
                    open_actions.pop((event.split("-")[0], hot), None)
    except OSError:
        return []
    return list(open_actions.values())


def _recheck(member, what):
    """Raise ActionFailed unless `member` (a FileStat) is still the file that was verified."""
    try:
        st = os.stat(member.path)
    except OSError as err:
        raise ActionFailed(f"{member.path}: {what} is gone or unreadable ({err.strerror or err})") from None
    try:
        check_unchanged(member.path, member, st, "since it was verified")
    except FileChanged as err:
        raise ActionFailed(f"{what}: {err}; nothing more is removed") from None


MARKER_PREFIX = ".moetools-evict-check-"


def _remove_stale_markers(folder):
    """Remove the marker files of runs killed inside `_refuse_same_folder` (their pid is gone)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        if not name.startswith(MARKER_PREFIX):
            continue
        pid = name[len(MARKER_PREFIX):].split("-")[0]
        if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
            try:
                os.unlink(os.path.join(folder, name))
            except OSError:
                pass


def _refuse_same_folder(hot_folder, cold_folder):
    """Raise ActionFailed when the cold folder is the hot one reached another way (a network or bind
    mount shows other device numbers, so inode checks cannot tell): a marker created in the hot
    folder must not appear in the cold one."""
    _remove_stale_markers(hot_folder)
    marker = os.path.join(hot_folder, f"{MARKER_PREFIX}{os.getpid()}-{os.urandom(4).hex()}")
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except OSError as err:
        raise ActionFailed(f"{hot_folder}: cannot write here to check the twin is elsewhere ({err.strerror or err})") from None
    try:
        if os.path.lexists(os.path.join(cold_folder, os.path.basename(marker))):
            raise ActionFailed(f"{cold_folder}: is the hot folder {hot_folder} seen through another path; not evicted")
    finally:
        os.unlink(marker)


def reverify_twin(artifact, twin, hasher, trust_cache=False):
    """Raise ActionFailed unless every cold member's bytes, read now, equal its hot member's digest.

    The hot digest may come from the cache (valid only for the same identity, size and mtime, which
    `_recheck` has just confirmed); the cold one is read from the disk unless this process computed
    it itself from the file's bytes, or `trust_cache` says to take the cache's word (the old speed,
    and the risk the help text names).
    """
    for hot, cold in zip(artifact.files, twin.files):
        try:
            hot_digest = hasher.cached_full(hot) or hasher.full(hot)
            if trust_cache or state_of(cold) in hasher.read_now:
                cold_digest = hasher.cached_full(cold)
            else:
                cold_digest = None
            if cold_digest is None:
                cold_digest = hasher.reread(cold)
        except (OSError, FileChanged, Stopped) as err:
            raise ActionFailed(f"cannot re-read the cold twin before removing anything: {err}") from None
        if cold_digest != hot_digest:
            raise ActionFailed(f"{cold.path}: the cold copy no longer matches the hot one (read just now, xxh3-128 "
                               "differs: bit rot or an edit?); nothing removed")


def remove_emptied_folders(folders, stop_at, log):
    """Remove each of `folders` (ones the caller removed something from) that is empty now, and then
    each parent that this emptied, up to but never including `stop_at`."""
    stop = os.path.normcase(os.path.abspath(stop_at)) if stop_at else None
    for folder in sorted(set(folders), key=len, reverse=True):
        current = os.path.abspath(folder)
        while stop and is_inside(os.path.normcase(current), stop) and os.path.normcase(current) != stop:
            try:
                os.rmdir(current)  # fails unless empty: a folder holding anything stays
            except OSError:
                break
            log.write("rmdir", path=current)
            current = os.path.dirname(current)


def evict(artifact, twin, log, hasher, trust_cache=False, stop_at=None):
    """Remove the hot members of `artifact`, whose `twin` passed full verification, after reading the
    twin again (see `reverify_twin`). Returns bytes freed."""
    for cold in twin.files:
        _recheck(cold, "cold twin")
    for name in twin.extra:
        path = twin_member_path(twin, name)
        if not os.path.isfile(path) or os.path.getsize(path) == 0:
            raise ActionFailed(f"{path}: cold twin member is gone")
    for member in artifact.files:
        _recheck(member, "hot copy")
    _refuse_same_folder(artifact.folder, twin.folder)
    reverify_twin(artifact, twin, hasher, trust_cache)
    for cold in twin.files:  # nothing changed while it was read
        _recheck(cold, "cold twin")
    log.write("evict-start", hot=artifact.path, twin=twin.path, bytes=artifact.bytes)
    try:
        if artifact.hf is not None:
            freed, touched = remove_revision(artifact, twin, log, _recheck, _check_twin_present)
        else:
            freed, touched = _remove_members(artifact, twin, log)
    except (ActionFailed, OSError) as err:
        log.write("evict-failed", hot=artifact.path, reason=str(err))
        raise
    for folder in touched:
        fsync_dir(folder)
    remove_emptied_folders(touched, stop_at, log)
    log.write("evict-done", hot=artifact.path, twin=twin.path, bytes=freed)
    return freed


def twin_member_path(twin, name):
    """The path of a cold member the hot set lacks: `name` relative to the twin's folder ("/"-separated)."""
    return os.path.join(twin.folder, *name.split("/"))


def _check_twin_present(twin):
    for cold in twin.files:  # the twin must outlive every unlink, whatever path reached it
        if not os.path.exists(cold.path):
            raise ActionFailed(f"{cold.path}: the cold twin vanished during the eviction; nothing more is removed")


def _remove_members(artifact, twin, log):
    """Unlink the hot members one by one; returns (bytes freed, [folders touched])."""
    freed = 0
    for member in artifact.files:
        _recheck(member, "hot copy")  # immediately before its unlink
        link = os.path.islink(member.path)  # removing a symlink frees no data (its target is left alone)
        os.unlink(member.path)
        freed += 0 if link else member.size
        log.write("unlink", hot=artifact.path, path=member.path, bytes=member.size)
        _check_twin_present(twin)
        test_pause()
    return freed, [artifact.folder]


def migration_needs(artifact, dest_folder):
    """(bytes still to copy, {name: FileStat} of members already in `dest_folder`)."""
    needed, existing = 0, {}
    for member in artifact.files:
        final = os.path.join(dest_folder, member.name)
        try:
            existing[member.name] = FileStat.from_stat(final, os.stat(final))
        except FileNotFoundError:
            needed += member.size
    return needed, existing


def check_space(artifact, dest_folder, disk_usage=shutil.disk_usage, needed=None):
    """Raise ActionFailed when the cold folder has no room for the members not copied yet
    (`needed` bytes, computed here when not given)."""
    if needed is None:
        needed, _ = migration_needs(artifact, dest_folder)
    check_space_for(dest_folder, needed, disk_usage)


def migrate(artifact, dest_folder, log, hasher, disk_usage=shutil.disk_usage, trust_cache=False):
    """Copy every member of `artifact` into `dest_folder`, verified from disk. Returns the new Twin.

    Members already there (from an interrupted run, or put there by hand) are kept only if their
    bytes, read again now from the disk (unless `trust_cache`), equal the hot member's digest; a
    different file under the same name is never overwritten.
    """
    needed, existing = migration_needs(artifact, dest_folder)
    check_space(artifact, dest_folder, disk_usage, needed)
    _make_folder(dest_folder)
    remove_stale_temps(dest_folder, artifact.names, log)
    log.write("migrate-start", hot=artifact.path, dest=dest_folder, bytes=artifact.bytes)
    placed = []
    for member in artifact.files:
        cold = existing.get(member.name)
        if cold is None:
            placed.append(_copy_member(member, dest_folder, log, hasher))
        else:
            placed.append(reuse_existing(member, cold, log, hasher, trust_cache))
    log.write("migrate-copied", hot=artifact.path, dest=dest_folder)
    return Twin(dest_folder, placed)


def is_kept(artifact, patterns, hot_root):
    """True when a --keep pattern matches the artifact's path, path below HOT_DIR, or a member name."""
    if not patterns:
        return False
    candidates = {artifact.path, *artifact.names}
    if hot_root and os.path.isdir(hot_root):
        relative = os.path.relpath(artifact.path, hot_root)
        candidates.add(relative)
        candidates.add(relative.replace(os.sep, "/"))
    from moetools.gguf import model_stem

    candidates.add(model_stem(artifact.path))
    if artifact.hf is not None:
        candidates.update(artifact.hf.keep_names)
    return any(fnmatch.fnmatch(candidate, pattern) for pattern in patterns for candidate in candidates)


def destination(artifact, hot_root, cold_root):
    """The cold folder a migration writes to: the artifact's folder below HOT_DIR, under COLD_DIR."""
    if hot_root and os.path.isdir(hot_root):
        relative = os.path.relpath(artifact.folder, hot_root)
        return cold_root if relative == os.curdir else os.path.join(cold_root, relative)
    return cold_root


@dataclass
class Plan:
    """What the user asked for: which actions, where, how much, and whether for real.

    `progress(desc, total)` returns a progress bar (a context manager with update(n)); None: no bar.
    """

    evict: bool = False
    migrate_to: str = None
    free_bytes: int = None
    keep: tuple = ()
    dry_run: bool = True
    hot_root: str = None
    trust_cache: bool = False
    progress: object = None

    @property
    def stop_at(self):
        """The folder eviction never removes nor goes above: HOT_DIR (the folder of HOT when a file)."""
        if self.hot_root and not os.path.isdir(self.hot_root):
            return os.path.dirname(os.path.abspath(self.hot_root))
        return self.hot_root


class _NoBar:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _bar(plan, hasher, desc, total):
    """A progress bar for one action, installed as the hasher's bar while it runs."""
    if plan.progress is None or not total:
        return _NoBar()
    outer = plan.progress(desc, total)

    class _Installed:
        def __enter__(self):
            self.previous, bar = hasher.bar, outer.__enter__()
            hasher.bar = bar
            return bar

        def __exit__(self, *exc):
            hasher.bar = self.previous
            return outer.__exit__(*exc)

    return _Installed()


def reread_bytes(artifact, twin, hasher, trust_cache):
    """Bytes an eviction reads: the cold members this process has not read itself (none with
    `trust_cache`, unless uncached), and hot members the cache does not hold."""
    hot = sum(member.size for member in artifact.files if hasher.cached_full(member) is None)
    cold = sum(member.size for member in twin.files
               if (not trust_cache and state_of(member) not in hasher.read_now) or hasher.cached_full(member) is None)
    return hot + cold


def _short(artifact):
    return artifact.hf.label if artifact.hf is not None else os.path.basename(artifact.path)


def _evict_now(result, plan, log, hasher):
    artifact, twin = result.artifact, result.twin
    stop_at = plan.stop_at
    if artifact.hf is not None and stop_at and is_below(stop_at, artifact.folder):
        stop_at = os.path.dirname(os.path.abspath(artifact.folder))  # HOT inside the repo: the repo is the unit
    total = reread_bytes(artifact, twin, hasher, plan.trust_cache)
    with _bar(plan, hasher, f"evict {_short(artifact)}: re-reading the cold copy", total):
        return evict(artifact, twin, log, hasher, plan.trust_cache, stop_at)


def _migrate_now(result, plan, log, hasher, disk_usage, dest):
    artifact = result.artifact
    if artifact.hf is not None:
        needed, reused = revision_needs(artifact, dest)
        with _bar(plan, hasher, f"migrate {_short(artifact)}: copy, read back", 2 * needed + reused):
            return migrate_revision(artifact, dest, log, hasher, disk_usage, plan.trust_cache, check_space_for)
    needed, existing = migration_needs(artifact, dest)
    reused = sum(member.size for member in existing.values())
    with _bar(plan, hasher, f"migrate {_short(artifact)}: copy, read back", 2 * needed + reused):
        return migrate(artifact, dest, log, hasher, disk_usage, plan.trust_cache)


def migration_target(artifact, plan):
    """(destination folder, the path the report names as the twin) of migrating `artifact`."""
    if artifact.hf is not None:
        return revision_destination(artifact, plan.hot_root, plan.migrate_to)
    dest = destination(artifact, plan.hot_root, plan.migrate_to)
    return dest, os.path.join(dest, artifact.files[0].name)


def _do(kind, result, plan, log, hasher, disk_usage, would_free):
    artifact = result.artifact
    action = Action(kind, plan.dry_run)
    try:
        if kind == "evict":
            action.twin = result.twin.path
            if plan.dry_run:
                for member in list(artifact.files) + list(result.twin.files):
                    _recheck(member, "file")
            else:
                action.freed = _evict_now(result, plan, log, hasher)
                action.done = True
        else:
            dest, action.twin = migration_target(artifact, plan)
            if plan.dry_run:
                if artifact.hf is not None:
                    check_space_for(dest, revision_needs(artifact, dest)[0], disk_usage)
                else:
                    check_space(artifact, dest, disk_usage)
            else:
                try:
                    twin = _migrate_now(result, plan, log, hasher, disk_usage, dest)
                    result.twin = twin
                    action.freed = _evict_now(result, plan, log, hasher)
                except (ActionFailed, OSError) as err:
                    log.write("migrate-failed", hot=artifact.path, reason=str(err))
                    raise
                log.write("migrate-done", hot=artifact.path, dest=dest)
                action.done = True
                # The copy was read back from disk and compared byte for byte (xxh3-128): a full check.
                result.status, result.level, result.reason = VERIFIED, "full", f"migrated to {dest}"
    except ActionFailed as err:
        action.error = str(err)
    except OSError as err:  # evict() and migrate() have logged the failure already
        action.error = f"{err.filename or artifact.path}: {err.strerror or err}"
    finally:
        hasher.cache.save(min_interval=SAVE_INTERVAL)
    if plan.dry_run and action.error is None:
        action.freed = would_free
    return action


def check_space_for(dest_folder, needed, disk_usage=shutil.disk_usage):
    """Raise ActionFailed when the drive of `dest_folder` has less than `needed` bytes + the margin."""
    from moetools.diskspace import check_room

    try:
        check_room(dest_folder, needed, "the migration", disk_usage)
    except OutputError as err:
        raise ActionFailed(str(err)) from None


def _resumes_migration(result, plan):
    """True when the twin found is the copy an earlier `--migrate` run made (and was killed before
    or during the eviction): rerunning the migration must finish it."""
    return (plan.migrate_to is not None and result.twin is not None
            and os.path.abspath(result.twin.folder) == os.path.abspath(migration_target(result.artifact, plan)[0]))


def _wanted(result, plan):
    """The action one result calls for under `plan` (None when none)."""
    if result.status == VERIFIED and result.level == "full" and (
            plan.evict or plan.free_bytes is not None or _resumes_migration(result, plan)):
        return "evict"
    artifact = result.artifact
    # An incomplete set or an empty file is a broken download: copying it would only move the problem.
    if result.status == NONE and plan.migrate_to and not artifact.missing and all(m.size for m in artifact.files):
        return "migrate"
    return None


def _freed_if_removed(result, results, removed):
    """Bytes removing `result`'s hot files frees: each file not also held by another result that is
    still in place (a blob two revisions share is freed with the last of them)."""
    others = {member.identity for other in results if other is not result and id(other) not in removed
              for member in other.artifact.files}
    return sum(member.size for member in result.artifact.files if member.identity not in others)


def apply(results, plan, index, hasher, log, pool=None, disk_usage=shutil.disk_usage):
    """Run the plan over `results` (updated in place). Returns ({id(result): Action}, bytes freed).

    With `free_bytes`, artifacts are taken least recently used first (newest atime/mtime of their
    members), never one matched by `keep`, each verified `full` when it is reached, until the bytes
    freed (or, in a dry run, that would be freed) reach the target.
    """
    actions, freed, removed = {}, 0, set()
    order = results
    if plan.free_bytes is not None:
        order = sorted(results, key=lambda result: (result.artifact.last_used_ns, result.artifact.path))
    for result in order:
        if plan.free_bytes is not None and freed >= plan.free_bytes:
            break
        if is_kept(result.artifact, plan.keep, plan.hot_root):
            continue
        if (plan.free_bytes is not None or _resumes_migration(result, plan)) and result.twin is not None and result.level != "full":
            with _bar(plan, hasher, f"verify full {_short(result.artifact)}: reading hot and cold", 2 * result.artifact.bytes):
                fresh = check_artifact(result.artifact, index, "full", hasher, pool)
            result.status, result.level, result.twin, result.reason = fresh.status, fresh.level, fresh.twin, fresh.reason
        kind = _wanted(result, plan)
        if kind is None:
            continue
        if result.artifact.hf is not None and result.artifact.hf.blocked:
            action = Action(kind, plan.dry_run, error=f"refused: {result.artifact.hf.blocked}; nothing removed or copied")
            actions[id(result)] = action
            continue
        action = _do(kind, result, plan, log, hasher, disk_usage, _freed_if_removed(result, results, removed))
        actions[id(result)] = action
        if action.error is None:
            freed += action.freed
            removed.add(id(result))
    return actions, freed
