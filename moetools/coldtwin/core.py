"""Twin search and verification: for each hot artifact, a cold twin that is the same bytes.

Structural twin: one cold folder holding every member name of the artifact, each with the same
size, none of them zero bytes, and none of them the very file on the hot tier (same device and
inode, reached through a hard link, a symlink or the same folder given twice). Then, by level:
`none` stops there (status "structural"), `quick` compares xxh3-128 of the first and last MiB of
every member and rejects an all-zero tail, `full` compares xxh3-128 of every byte, hot and cold
read in parallel.
"""

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from moetools.coldtwin.hashing import FileChanged, Stopped

LEVELS = ("none", "quick", "full")
SAVE_INTERVAL = 10.0  # seconds between hash-cache writes during a run (and one at the end)
# Statuses: the twin passed the level; a structural twin (--verify none); the twin's bytes differ;
# no twin; the hot set lacks shards and no cold set completes it; a file could not be read.
VERIFIED, STRUCTURAL, MISMATCH, NONE, INCOMPLETE, ERROR = "verified", "structural", "mismatch", "none", "incomplete", "error"


@dataclass
class Twin:
    """A cold folder holding the artifact's members: `files` pairs with the artifact's, in order."""

    folder: str
    files: list
    extra: list = field(default_factory=list)  # cold members the hot set lacks (a resumed eviction)

    @property
    def path(self):
        return self.files[0].path if self.files else os.path.join(self.folder, self.extra[0])


@dataclass
class Result:
    """One artifact's answer. `level` is the verification the status refers to."""

    artifact: object
    status: str
    level: str
    twin: Twin = None
    reason: str = ""

    @property
    def reclaimable(self):
        return self.artifact.bytes if self.status in (VERIFIED, STRUCTURAL) and self.twin else 0


def structural_twins(artifact, index):
    """Cold folders that structurally match `artifact`: (list of Twin, reason when there is none).

    A hot set that lacks shards (an eviction killed halfway) still matches a cold folder that holds
    every present member with its size and also every missing name (non-empty).
    """
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
    return [], reasons[0] if reasons else "no cold folder holds " + first.name


def _verify_quick(artifact, twin, hasher):
    for hot, cold in zip(artifact.files, twin.files):
        hot_digest, hot_zero = hasher.quick(hot)
        cold_digest, cold_zero = hasher.quick(cold)
        if hot_zero and cold_zero and hot_digest == cold_digest:
            return (f"{cold.name}: both copies' last MiB is all zeros (a preallocated, interrupted download?); "
                    "--verify full compares every byte instead")
        if cold_zero or hot_zero:
            zero = cold if cold_zero else hot
            return f"{zero.path}: its last MiB is all zeros (a preallocated, interrupted download?)"
        if hot_digest != cold_digest:
            return f"{cold.name}: first/last MiB differ from the hot copy"
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
    """The Result for one artifact: the first structural twin that passes `level` wins."""
    twins, reason = structural_twins(artifact, index)
    if not twins:
        status = INCOMPLETE if artifact.missing else NONE
        if artifact.missing:
            reason = f"the set lacks {len(artifact.missing)} member(s) ({artifact.missing[0]}...) and no cold folder completes it; {reason}"
        return Result(artifact, status, level, None, reason)
    first_failure = None
    for twin in twins:
        try:
            why = verify(artifact, twin, level, hasher, pool)
        except (OSError, FileChanged) as err:
            why, status = _fault_line(err), ERROR
        else:
            status = MISMATCH
        if why is None:
            note = f"cold holds the {len(twin.extra)} member(s) the hot set lacks" if twin.extra else ""
            return Result(artifact, STRUCTURAL if level == "none" else VERIFIED, level, twin, note)
        if first_failure is None:
            first_failure = Result(artifact, status, level, twin, why)
    return first_failure


def check_all(artifacts, index, level, hasher):
    """Results for every artifact, in order; hashing runs on two threads (hot and cold)."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        results = []
        for artifact in artifacts:
            results.append(check_artifact(artifact, index, level, hasher, pool))
            hasher.cache.save(min_interval=SAVE_INTERVAL)
    return results
