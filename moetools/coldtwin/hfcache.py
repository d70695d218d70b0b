"""Hugging Face cache repos (`models--ORG--NAME/{blobs,snapshots/<commit>,refs}`) as cold-twin units.

The layout is huggingface_hub's (`file_download._create_symlink`, `utils/_cache_manager.py`):
`blobs/<etag>` holds each file's bytes once (named by its git or LFS hash); `snapshots/<commit>/<path>`
is a relative symlink to a blob (on a system without symlinks, the file itself); `refs/<name>`
holds the commit a branch or tag names. Newer versions may make `blobs/<etag>` a relative symlink
into a cache-wide store `<cache>/blobs/<2 hex>/<xet hash>` (marked by `.huggingface-shared-blobs`).

The unit is one revision with its blobs: a revision is twinned when a cold repo of the same name
holds the same commit whose snapshot maps every path to a blob of the same name and size. Blobs are
counted once by identity. Stat and names only: nothing here reads file contents but the refs.
"""

import os
import re
from dataclasses import dataclass, field

from moetools.coldtwin.fsops import is_incomplete, is_inside
from moetools.coldtwin.types import VERIFIED, Artifact, FileStat, Twin

REPO_TYPES = {"models": "model", "datasets": "dataset", "spaces": "space"}
SHARED_STORE_MARKER = ".huggingface-shared-blobs"
IGNORED_NAMES = {".DS_Store", "Thumbs.db", "desktop.ini"}  # huggingface_hub's FILES_TO_IGNORE
BLOB_KEY = "blobs/"


def _norm(path):
    return os.path.normcase(os.path.realpath(path))


def is_repo_folder(path):
    """True for a folder named `models--…`, `datasets--…` or `spaces--…` holding `snapshots` or `blobs`."""
    name = os.path.basename(os.path.normpath(path))
    prefix, _, rest = name.partition("--")
    if prefix not in REPO_TYPES or not rest:
        return False
    return os.path.isdir(os.path.join(path, "snapshots")) or os.path.isdir(os.path.join(path, "blobs"))


def is_shared_store(path):
    """True for a cache-wide blob store (`<cache>/blobs` with huggingface_hub's marker file)."""
    return os.path.basename(os.path.normpath(path)) == "blobs" and os.path.isfile(os.path.join(path, SHARED_STORE_MARKER))


def enclosing_repo(path):
    """The repo folder `path` is (or lies inside), or None."""
    probe = os.path.abspath(path)
    while True:
        if os.path.isdir(probe) and is_repo_folder(probe):
            return probe
        parent = os.path.dirname(probe)
        if parent == probe:
            return None
        probe = parent


@dataclass
class HfRevision:
    """One snapshot of a repo: `entries` maps each file's path ("/"-separated) to a key, the place of
    its bytes relative to the repo folder ("blobs/<etag>", or "snapshots/<commit>/<path>" for a file
    stored in the snapshot itself); `member_keys` pairs with the artifact's files."""

    repo: object
    commit: str
    entries: dict = field(default_factory=dict)
    refs: list = field(default_factory=list)
    missing: list = field(default_factory=list)  # keys of blobs a snapshot link names but that are absent
    problems: list = field(default_factory=list)  # lines that forbid any action: links pointing outside the cache
    notes: list = field(default_factory=list)  # lines about missing blobs (only a complete cold twin allows an action)
    member_keys: list = field(default_factory=list)

    @property
    def snapshot(self):
        return os.path.join(self.repo.folder, "snapshots", self.commit)

    @property
    def label(self):
        refs = f" ({', '.join(sorted(self.refs))})" if self.refs else ""
        return f"{self.repo.repo_id}@{self.commit[:8]}{refs}"

    @property
    def keep_names(self):
        """What a --keep pattern may name: the repo id, its folder name, repo@commit (whole or short), repo@ref."""
        repo_id = self.repo.repo_id
        names = {repo_id, self.repo.name, f"{repo_id}@{self.commit}", f"{repo_id}@{self.commit[:8]}"}
        names.update(f"{repo_id}@{ref}" for ref in self.refs)
        return names

    @property
    def blocked(self):
        """Why nothing of this revision may be removed or copied (bad input), or "" when it may."""
        return "; ".join(self.problems + self.repo.problems)

    def as_dict(self):
        return {"repo_id": self.repo.repo_id, "repo_type": self.repo.repo_type, "repo_folder": self.repo.folder,
                "commit": self.commit, "refs": sorted(self.refs), "files": len(self.entries), "label": self.label,
                "problems": self.problems + self.repo.problems + self.notes}


@dataclass
class HfRepo:
    """A repo folder as found: blobs by name (FileStat of the bytes), revisions by commit, refs."""

    folder: str
    name: str
    repo_id: str
    repo_type: str
    blobs: dict = field(default_factory=dict)
    revisions: dict = field(default_factory=dict)
    refs: dict = field(default_factory=dict)
    problems: list = field(default_factory=list)  # repo-wide lines (refs naming unknown commits)
    files: dict = field(default_factory=dict)  # key -> FileStat for every key a revision uses


def _stat(path):
    return FileStat.from_stat(path, os.stat(path))


def _scan_blobs(repo, problems):
    """repo.blobs from `blobs/`: regular files, or links into the cache's shared store."""
    blobs_dir = os.path.join(repo.folder, "blobs")
    if not os.path.isdir(blobs_dir):
        return
    store = os.path.join(os.path.dirname(repo.folder), "blobs")
    store_real = _norm(store) if is_shared_store(store) else None
    for entry in sorted(os.scandir(blobs_dir), key=lambda item: item.name):
        if entry.name.startswith(".") or entry.name in IGNORED_NAMES or is_incomplete(entry.name):
            continue
        try:
            if entry.is_symlink():
                real = _norm(entry.path)
                if store_real is None or not is_inside(real, store_real):
                    problems.append(f"{entry.path}: blob link points outside the cache ({os.readlink(entry.path)})")
                    continue
            elif not entry.is_file():
                continue
            repo.blobs[entry.name] = _stat(entry.path)
        except OSError as err:
            problems.append(f"{entry.path}: cannot read: {err.strerror or err}")


def _scan_snapshot(repo, revision, blobs_real):
    """Fill `revision.entries` from its snapshot folder; links are resolved one hop, as huggingface_hub does."""
    by_identity = {stat.identity: name for name, stat in repo.blobs.items()}
    for root, dirs, names in os.walk(revision.snapshot):
        for name in list(dirs):
            if os.path.islink(os.path.join(root, name)):
                revision.problems.append(f"{os.path.join(root, name)}: a linked folder in a snapshot; not followed")
                dirs.remove(name)
        for name in sorted(names):
            if name in IGNORED_NAMES:
                continue
            path = os.path.join(root, name)
            relative = os.path.relpath(path, revision.snapshot).replace(os.sep, "/")
            if os.path.islink(path):
                first_hop = os.path.abspath(os.path.join(root, os.readlink(path)))
                if _norm(os.path.dirname(first_hop)) != blobs_real:
                    revision.problems.append(f"{path}: link points outside the cache's blobs ({os.readlink(path)})")
                    continue
                key = BLOB_KEY + os.path.basename(first_hop)
                if os.path.basename(first_hop) not in repo.blobs:
                    revision.missing.append(key)
                    revision.notes.append(f"{path}: blob missing under the snapshot link ({os.path.basename(first_hop)})")
                revision.entries[relative] = key
                continue
            try:
                stat = _stat(path)
            except OSError as err:
                revision.problems.append(f"{path}: cannot read: {err.strerror or err}")
                continue
            blob = by_identity.get(stat.identity)  # a hard link to a blob (moetools' fallback on Windows)
            key = BLOB_KEY + blob if blob else f"snapshots/{revision.commit}/{relative}"
            if not blob:
                repo.files[key] = stat
            revision.entries[relative] = key


def _scan_refs(repo):
    refs_dir = os.path.join(repo.folder, "refs")
    if not os.path.isdir(refs_dir):
        return
    for root, _, names in os.walk(refs_dir):
        for name in sorted(names):
            if name in IGNORED_NAMES:
                continue
            path = os.path.join(root, name)
            ref = os.path.relpath(path, refs_dir).replace(os.sep, "/")
            try:
                with open(path, encoding="utf-8", errors="replace") as handle:
                    repo.refs[ref] = handle.read(256).strip()
            except OSError as err:
                repo.problems.append(f"{path}: cannot read: {err.strerror or err}")


def parse_repo(folder):
    """The HfRepo of one repo folder (missing pieces and bad links become problem lines)."""
    name = os.path.basename(os.path.normpath(folder))
    prefix, _, rest = name.partition("--")
    repo = HfRepo(folder, name, rest.replace("--", "/"), REPO_TYPES.get(prefix, prefix))
    blob_problems = []
    _scan_blobs(repo, blob_problems)
    repo.problems.extend(blob_problems)
    blobs_real = _norm(os.path.join(folder, "blobs"))
    snapshots = os.path.join(folder, "snapshots")
    if os.path.isdir(snapshots):
        for entry in sorted(os.scandir(snapshots), key=lambda item: item.name):
            if entry.name in IGNORED_NAMES or entry.name.startswith("."):
                continue
            if not entry.is_dir(follow_symlinks=False):
                repo.problems.append(f"{entry.path}: not a snapshot folder")
                continue
            revision = HfRevision(repo, entry.name)
            repo.revisions[entry.name] = revision
            _scan_snapshot(repo, revision, blobs_real)
    _scan_refs(repo)
    for ref, commit in sorted(repo.refs.items()):
        if commit in repo.revisions:
            repo.revisions[commit].refs.append(ref)
        else:
            repo.problems.append(f"refs/{ref} names commit {commit[:40] or '(empty)'}, which has no snapshot here")
    for key, stat in repo.blobs.items():
        repo.files[BLOB_KEY + key] = stat
    return repo


def revision_artifact(revision):
    """The Artifact of one revision: its distinct files (blobs once), in key order."""
    repo = revision.repo
    keys = sorted({key for key in revision.entries.values() if key in repo.files})
    revision.member_keys = keys
    artifact = Artifact(revision.snapshot, "hf-revision", repo.folder, [repo.files[key] for key in keys],
                        sorted(set(revision.missing)), list(revision.problems + repo.problems + revision.notes), hf=revision)
    return artifact


def repo_artifacts(folder, within=None):
    """Artifacts of every revision of the repo at `folder` (only those inside `within` when given)."""
    repo = parse_repo(folder)
    artifacts = []
    for revision in repo.revisions.values():
        if within is not None and not is_inside(_norm(revision.snapshot), _norm(within)) \
                and not is_inside(_norm(within), _norm(revision.snapshot)):
            continue
        artifacts.append(revision_artifact(revision))
    return repo, artifacts


def twins(artifact, cold_repos, hot_ids):
    """Cold revisions that structurally match an hf-revision artifact: (list of Twin, reason)."""
    revision = artifact.hf
    hot_members = dict(zip(revision.member_keys, artifact.files))
    found, reasons = [], []
    candidates = cold_repos.get(revision.repo.name, [])
    for cold_repo in candidates:
        cold_revision = cold_repo.revisions.get(revision.commit)
        if cold_revision is None:
            reasons.append(f"{cold_repo.folder} lacks revision {revision.commit[:8]}")
            continue
        if cold_revision.blocked or cold_revision.missing:
            reasons.append(f"{cold_revision.snapshot}: {cold_revision.blocked or 'a blob is missing'}")
            continue
        files, why, seen = {}, None, set()
        for relative, key in sorted(revision.entries.items()):
            cold_key = cold_revision.entries.get(relative)
            if cold_key is None:
                why = f"{cold_revision.snapshot} lacks {relative}"
                break
            if key in seen:
                continue
            seen.add(key)
            cold = cold_repo.files.get(cold_key)
            hot = hot_members.get(key)
            if hot is None:  # the hot blob is missing (a killed eviction): the cold one must be whole
                if cold is None or cold.size == 0:
                    why = f"{cold_revision.snapshot} lacks {relative}, which the hot cache lacks too"
                    break
                continue
            if cold.identity == hot.identity or cold.identity in hot_ids:
                why = f"{cold.path} is a file of the hot cache (same device and inode)"
                break
            if cold.size != hot.size:
                why = f"{cold.path} has {cold.size} bytes, the hot file {hot.size}"
                break
            files[key] = cold
        if why is None and set(files) != set(revision.member_keys):
            why = f"{cold_revision.snapshot} does not hold every file of the revision"
        if why is None:
            extra = sorted(set(revision.missing))
            found.append(Twin(cold_repo.folder, [files[key] for key in revision.member_keys], extra,
                              shown=cold_revision.snapshot))
        else:
            reasons.append(why)
    if found:
        return found, ""
    if reasons:
        return [], reasons[0]
    return [], f"no cold folder holds {revision.repo.name}"


def repo_summaries(results):
    """The `hf cache scan`-like rows: one per hot repo, its revisions, size on disk, twin status."""
    repos = {}
    for result in results:
        revision = result.artifact.hf
        if revision is None:
            continue
        repos.setdefault(revision.repo.folder, (revision.repo, []))[1].append(result)
    rows = []
    for folder, (repo, members) in sorted(repos.items()):
        sizes = {member.identity: member.size for result in members for member in result.artifact.files}
        statuses = {}
        for result in members:
            word = f"{result.status} ({result.level})" if result.status in (VERIFIED, "mismatch") else result.status
            statuses[word] = statuses.get(word, 0) + 1
        twin_status = ", ".join(f"{count}/{len(members)} {word}" for word, count in sorted(statuses.items()))
        rows.append({
            "repo_id": repo.repo_id,
            "repo_type": repo.repo_type,
            "path": folder,
            "revisions": [{"commit": result.artifact.hf.commit, "refs": sorted(result.artifact.hf.refs),
                           "label": result.artifact.hf.label, "bytes": result.artifact.bytes,
                           "status": result.status, "verify": result.level} for result in members],
            "size_on_disk_bytes": sum(sizes.values()),
            "twin_status": twin_status,
            "problems": list(repo.problems),
        })
    return rows
