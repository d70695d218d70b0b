"""cold-twin's shared records, one layer below the modules that make and read them: the scan's
FileStat, Artifact and ColdIndex, the verification levels and statuses, Twin and Result, and the
actions' two exceptions. Plain data: this module imports nothing of coldtwin, so scan, hfcache,
core, actions and hfactions all build on it without importing one another both ways.
"""

import os
from dataclasses import dataclass, field

from moetools.errors import OutputError

# --- the scan's records (made by scan.py and hfcache.py) ----------------------------------------


@dataclass(frozen=True)
class FileStat:
    """One regular file as seen by the scan: path, size in bytes, identity and times (ns)."""

    path: str
    name: str
    size: int
    dev: int
    ino: int
    mtime_ns: int
    atime_ns: int

    @classmethod
    def from_stat(cls, path, st):
        return cls(path, os.path.basename(path), st.st_size, st.st_dev, st.st_ino, st.st_mtime_ns, st.st_atime_ns)

    @property
    def identity(self):
        """What makes two FileStats the same file: (device, inode), or the real path where a file
        system reports no inode numbers (0), so such files are never all "the same file"."""
        if self.ino:
            return (self.dev, self.ino)
        return (self.dev, os.path.normcase(os.path.realpath(self.path)))


@dataclass
class Artifact:
    """One unit on the hot tier: a GGUF file or shard set, a safetensors set, or another large file.

    `files` are the members present, in shard order (a safetensors index comes last); `missing`
    names members the set should have but the folder lacks. The artifact is named by `path`, its
    first shard's path.
    """

    path: str
    kind: str  # "gguf", "gguf-split", "safetensors", "file"
    folder: str
    files: list
    missing: list = field(default_factory=list)
    warnings: list = field(default_factory=list)
    hf: object = None  # for kind "hf-revision": the HfRevision it stands for (moetools.coldtwin.hfcache)

    @property
    def bytes(self):
        return sum(member.size for member in self.files)

    @property
    def names(self):
        return [member.name for member in self.files]

    @property
    def last_used_ns(self):
        """When the artifact was last read or written (the newest atime/mtime of its members)."""
        return max((max(member.atime_ns, member.mtime_ns) for member in self.files), default=0)


@dataclass
class ColdIndex:
    """Every regular file under the cold folders: {folder: {name: FileStat}} and {name: [folders]}."""

    folders: dict = field(default_factory=dict)
    by_name: dict = field(default_factory=dict)
    # Identities of every hot file: a cold path that reaches one of them (a link into the hot tier)
    # is not cold storage, whichever hot artifact it would pair with.
    hot_ids: set = field(default_factory=set)
    hf_repos: dict = field(default_factory=dict)  # repo folder name -> [HfRepo] (moetools.coldtwin.hfcache)
    deeper: dict = field(default_factory=dict)  # name -> (path, depth) of model files below --depth

    def add(self, folder, entry):
        self.folders.setdefault(folder, {})[entry.name] = entry
        self.by_name.setdefault(entry.name, []).append(folder)


# --- verification levels, statuses and answers (core.py) ----------------------------------------

LEVELS = ("none", "quick", "full")
# Statuses: every byte compared equal; first/last MiB equal (a hint); a structural twin (--verify
# none); the twin's bytes differ; no twin; the hot set lacks files and no cold set completes it; a
# file could not be read.
VERIFIED, QUICK_MATCH, STRUCTURAL = "verified", "quick-match", "structural"
MISMATCH, NONE, INCOMPLETE, ERROR = "mismatch", "none", "incomplete", "error"
PASSED = {"none": STRUCTURAL, "quick": QUICK_MATCH, "full": VERIFIED}


@dataclass
class Twin:
    """A cold folder holding the artifact's members: `files` pairs with the artifact's, in order."""

    folder: str
    files: list
    extra: list = field(default_factory=list)  # cold members the hot set lacks (a resumed eviction)
    shown: str = None  # what the report names as the twin (a Hugging Face snapshot folder)

    @property
    def path(self):
        if self.shown:
            return self.shown
        return self.files[0].path if self.files else os.path.join(self.folder, *self.extra[0].split("/"))


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
        """Bytes an eviction may free: only a twin verified in full counts (quick and structural
        twins are hints)."""
        return self.artifact.bytes if self.status == VERIFIED and self.level == "full" and self.twin else 0


# --- the actions' exceptions (actions.py, hfactions.py, fsops.py) -------------------------------


class LogWriteError(OutputError):
    """The action log could not be written: the run stops (no action goes on unrecorded)."""


class ActionFailed(Exception):
    """An action refused or stopped; str() is the one-line reason. Nothing unsafe was done."""
