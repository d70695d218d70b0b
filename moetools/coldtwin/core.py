"""Twin search and verification: for each hot artifact, a cold twin that is the same bytes.

Structural twin: one cold folder holding every member name of the artifact, each with the same
size, none of them zero bytes, and none of them the very file on the hot tier (same device and
inode, reached through a hard link, a symlink or the same folder given twice). Then, by level:
`none` stops there (status "structural"), `quick` compares xxh3-128 of the first and last MiB of
every member (status "quick-match": a hint, never a reason to delete), `full` compares xxh3-128 of
every byte, hot and cold read in parallel (status "verified").

A full result the hash cache still holds for both files of every pair outranks a cheaper level: a
twin an earlier `--verify full` found different stays a mismatch on the next quick run (bit rot
and a copy edited in place leave size and mtime alone, so only a full read can clear it).
"""

import threading
from concurrent.futures import ThreadPoolExecutor
import moetools.coldtwin.hfcache as hfcache
from moetools.coldtwin.hashing import FileChanged, Stopped
from moetools.coldtwin.types import (  # noqa: F401 (LEVELS, STRUCTURAL, Twin: imported from here by command, report, tests)
    ERROR,
    INCOMPLETE,
    LEVELS,
    MISMATCH,
    NONE,
    PASSED,
    QUICK_MATCH,
    STRUCTURAL,
    VERIFIED,
    Result,
    Twin,
)

SAVE_INTERVAL = 10.0  # seconds between hash-cache writes during a run (and one at the end)


def structural_twins(artifact, index):
    """Cold folders that structurally match `artifact`: (list of Twin, reason when there is none).

    A hot set that lacks shards (an eviction killed halfway) still matches a cold folder that holds
    every present member with its size and also every missing name (non-empty).
    """
    if artifact.hf is not None:
        if not artifact.files and not artifact.missing:
            return [], "the revision has no files"
        return hfcache.twins(artifact, index.hf_repos, index.hot_ids)
    if not artifact.files:
        return [], "the set is empty"
    empty = [member.name for member in artifact.files if member.size == 0]
    if empty:
        return [], f"{empty[0]} is empty (0 bytes); an empty file never matches"
    first = artifact.files[0]
    twins, reasons = [], []
    for folder in index.by_name.get(first.name, []):
        members = index.folders[folder]
        files, why = [], None
        for member in artifact.files:
            cold = members.get(member.name)
            if cold is None:
                why = f"{folder} lacks {member.name}"
                break
            if cold.identity == member.identity:
                why = f"{cold.path} is the hot file itself (same device and inode: a link or the same folder twice)"
                break
            if cold.identity in index.hot_ids:
                why = f"{cold.path} is a file of the hot tier (same device and inode as another hot file)"
                break
            if cold.size != member.size:
                why = f"{cold.path} has {cold.size} bytes, the hot file {member.size}"
                break
            files.append(cold)
        if why is None:
            absent = [name for name in artifact.missing if name not in members or members[name].size == 0]
            if absent:
                why = f"{folder} lacks {absent[0]}, which the hot set lacks too"
        if why is None:
            twins.append(Twin(folder, files, list(artifact.missing)))
        else:
            reasons.append(why)
    if twins:
        return twins, ""
    if not reasons and first.name in index.deeper:
        path, depth = index.deeper[first.name]
        return [], f"{path} found at depth {depth}; use --depth {depth}"
    return [], reasons[0] if reasons else "no cold folder holds " + first.name


def _verify_quick(artifact, twin, hasher):
    """None when the first and last MiB of every pair agree, else the reason."""
    for hot, cold in zip(artifact.files, twin.files):
        hot_digest, hot_zero, _ = hasher.quick(hot)
        cold_digest, cold_zero, _ = hasher.quick(cold)
        if hot_digest == cold_digest:
            continue
        if cold_zero != hot_zero:
            zero = cold if cold_zero else hot
            return f"{zero.path}: its last MiB is all zeros (a preallocated, interrupted download?)"
        return f"{cold.name}: first/last MiB differ from the hot copy"
    return None


def quick_notes(artifact, twin, hasher):
    """What a quick match could not see: pairs whose tails are zeros (or holes) on both sides."""
    holes, zeros = [], []
    for hot, cold in zip(artifact.files, twin.files):
        _, hot_zero, hot_hole = hasher.quick(hot)
        _, cold_zero, cold_hole = hasher.quick(cold)
        if hot_zero and cold_zero:
            (holes if hot_hole and cold_hole else zeros).append(cold.name)
    notes = []
    if holes:
        notes.append(f"{holes[0]}{' and others' if len(holes) > 1 else ''}: both tails are holes (sparse files); "
                     "the bytes there compare equal as zeros, --verify full reads every byte")
    if zeros:
        notes.append(f"{zeros[0]}{' and others' if len(zeros) > 1 else ''}: the last MiB is all zeros in both copies "
                     "(a preallocated download?); --verify full reads every byte")
    return "; ".join(notes)


def remembered_full(artifact, twin, hasher):
    """(status, reason) from full digests the cache holds for both files of every pair, or None.

    A pair with differing digests is a MISMATCH whatever the other pairs say; every pair cached
    and equal is VERIFIED; anything else is not known without reading.
    """
    known = True
    for hot, cold in zip(artifact.files, twin.files):
        hot_digest, cold_digest = hasher.cached_full(hot), hasher.cached_full(cold)
        if hot_digest is not None and cold_digest is not None and hot_digest != cold_digest:
            return MISMATCH, (f"{cold.name}: content differs from the hot copy (xxh3-128, found by an earlier "
                              "--verify full and kept until either file changes)")
        known = known and hot_digest is not None and hot_digest == cold_digest
    if known and twin.files:
        return VERIFIED, "every byte compared by an earlier --verify full (hash cache)"
    return None


def _verify_full(artifact, twin, hasher, pool):
    """Hash the hot files on one thread and the cold files on another, each tree read in order.

    One thread per tree keeps each drive reading one file at a time, front to back (an HDD
    read by two threads at once seeks between them). Both stop within a chunk once a pair of
    digests differs or the other thread failed.
    """
    count = len(artifact.files)
    digests = {"hot": [None] * count, "cold": [None] * count}
    stop = threading.Event()

    def side(files, mine, other):
        try:
            for position, member in enumerate(files):
                if stop.is_set():
                    return
                digests[mine][position] = hasher.full(member, stop)
                theirs = digests[other][position]
                if theirs is not None and theirs != digests[mine][position]:
                    stop.set()
        except Stopped:
            return
        except BaseException:
            stop.set()
            raise

    # The cold side on the pool's thread, the hot side on this one: always two threads at once.
    cold_side = pool.submit(side, twin.files, "cold", "hot")
    try:
        side(artifact.files, "hot", "cold")
    finally:
        cold_side.exception()  # never leave the other thread reading after an error here
    cold_side.result()
    for position, cold in enumerate(twin.files):
        hot_digest, cold_digest = digests["hot"][position], digests["cold"][position]
        if hot_digest is not None and cold_digest is not None and hot_digest != cold_digest:
            return f"{cold.name}: content differs from the hot copy (xxh3-128)"
    return None


def verify(artifact, twin, level, hasher, pool=None):
    """None when `twin` passes `level`, else the reason. Raises OSError or FileChanged on read faults."""
    if level == "none":
        return None
    if level == "quick":
        return _verify_quick(artifact, twin, hasher)
    if pool is None:
        with ThreadPoolExecutor(max_workers=1) as own:
            return _verify_full(artifact, twin, hasher, own)
    return _verify_full(artifact, twin, hasher, pool)


def _fault_line(err):
    if isinstance(err, FileChanged):
        return str(err)
    target = getattr(err, "filename", None)
    words = err.strerror or str(err)
    return f"{target}: cannot read: {words}" if target else f"cannot read: {words}"


def check_artifact(artifact, index, level, hasher, pool=None):
    """The Result for one artifact: the first structural twin that passes `level` wins.

    Below `full`, a full result the cache remembers for a twin decides instead (see the module
    docstring); a remembered mismatch never lets a cheaper check pass that twin.
    """
    twins, reason = structural_twins(artifact, index)
    if not twins:
        status = INCOMPLETE if artifact.missing else NONE
        if artifact.missing:
            reason = f"the set lacks {len(artifact.missing)} member(s) ({artifact.missing[0]}...) and no cold folder completes it; {reason}"
        return Result(artifact, status, level, None, reason)
    first_failure = None
    for twin in twins:
        remembered = remembered_full(artifact, twin, hasher) if level != "full" else None
        if remembered is not None:
            status, why = remembered
            if status == VERIFIED:
                return Result(artifact, VERIFIED, "full", twin, why)
            if first_failure is None:
                first_failure = Result(artifact, MISMATCH, "full", twin, why)
            continue
        try:
            why = verify(artifact, twin, level, hasher, pool)
        except (OSError, FileChanged) as err:
            why, status = _fault_line(err), ERROR
        else:
            status = MISMATCH
        if why is None:
            notes = [f"cold holds the {len(twin.extra)} member(s) the hot set lacks"] if twin.extra else []
            if level == "quick":
                notes.append(quick_notes(artifact, twin, hasher))
            return Result(artifact, PASSED[level], level, twin, "; ".join(note for note in notes if note))
        if first_failure is None:
            first_failure = Result(artifact, status, level, twin, why)
    return first_failure


def check_all(artifacts, index, level, hasher, on_checked=None):
    """Results for every artifact, in order; hashing runs on two threads (hot and cold).
    `on_checked(1)` is called after each artifact (a progress bar counting artifacts)."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        results = []
        for artifact in artifacts:
            results.append(check_artifact(artifact, index, level, hasher, pool))
            hasher.cache.save(min_interval=SAVE_INTERVAL)
            if on_checked is not None:
                on_checked(1)
    return results
