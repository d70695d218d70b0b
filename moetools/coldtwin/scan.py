"""Structural scan: which artifacts are on the hot tier, and which files lie on the cold tier.

Only names and `stat` results are used, plus one GGUF header read per split set (to check the shard
count in the names against `split.count`). No numpy, no gguf package: a scan of 10,000 files must
take well under a second.

Paths are built with `os.path.join` from what the user gave, so `C:/models` and folders with
spaces work the same on Windows and POSIX; nothing splits a path on "/".
"""

import json
import os
import re
import stat as stat_mod

import moetools.coldtwin.hfcache as hfcache
from moetools.coldtwin.fsops import INCOMPLETE_SUFFIXES, is_incomplete, is_inside, real_folder  # noqa: F401 (re-exported)
from moetools.coldtwin.types import Artifact, ColdIndex, FileStat  # noqa: F401 (tests import them from here)
from moetools.errors import InputError, UsageError

SAFETENSORS_SPLIT_RE = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.safetensors$")
SAFETENSORS_INDEX_SUFFIX = ".safetensors.index.json"
MODEL_SUFFIXES = (".gguf", ".safetensors")


def walk_files(root, depth, exclude=(), problems=None, special=None, deeper=None):
    """Yield (folder, [FileStat]) for `root` and its subfolders down to `depth` levels below it.

    Hidden names (starting with ".") and incomplete downloads are skipped; symlinked folders are
    not followed (no loops); symlinked files are followed, so a FileStat carries the target's
    device and inode. Folders whose real path is in `exclude` (with everything below them) are
    skipped. Unreadable folders and files, dangling links and special files with a model suffix
    are appended to `problems` as one line each. `special(path)` may claim a folder (a Hugging Face
    repo, parsed whole by the caller whatever its depth below): it is then not walked. Folders one
    level too deep are appended to `deeper` as (path, level) for `find_deeper`.
    """
    problems = problems if problems is not None else []
    if special is not None and special(root):
        return
    stack = [(root, real_folder(root), 0)]
    while stack:
        folder, real, level = stack.pop()
        try:
            with os.scandir(folder) as iterator:
                entries = list(iterator)
        except OSError as err:
            problems.append(f"{folder}: cannot read folder: {err.strerror or err}")
            continue
        files = []
        for entry in sorted(entries, key=lambda item: item.name):
            name = entry.name
            if name.startswith(".") or is_incomplete(name):
                continue
            try:
                if entry.is_dir(follow_symlinks=False):
                    child_real = os.path.join(real, os.path.normcase(name))
                    if any(is_inside(child_real, other) for other in exclude):
                        continue
                    if special is not None and special(entry.path):
                        continue
                    if level < depth:
                        stack.append((entry.path, child_real, level + 1))
                    elif deeper is not None:
                        deeper.append((entry.path, level + 1))
                    continue
                # On Windows DirEntry.stat() leaves st_dev and st_ino at 0; os.stat() fills them in.
                st = os.stat(entry.path) if os.name == "nt" else entry.stat()
            except OSError as err:
                if entry.is_symlink():
                    problems.append(f"{entry.path}: cannot follow symbolic link: {err.strerror or err}")
                else:
                    problems.append(f"{entry.path}: cannot read: {err.strerror or err}")
                continue
            if not stat_mod.S_ISREG(st.st_mode):
                if name.lower().endswith(MODEL_SUFFIXES):
                    problems.append(f"{entry.path}: not a regular file (a pipe, socket or device); skipped")
                continue
            files.append(FileStat.from_stat(entry.path, st))
        yield folder, files


DEEPER_LEVELS = 6  # how far below --depth the search for models the walk missed goes
DEEPER_ENTRIES = 20000  # and how many folder entries it reads at most


def find_deeper(folders, min_size):
    """Model files and Hugging Face repos below `folders` [(path, level)]: {name: (path, depth)}.

    The depth of a file is the level of its folder below the scanned root (what --depth must be to
    see it). Bounded: DEEPER_LEVELS more levels, DEEPER_ENTRIES entries in all.
    """
    found, budget = {}, DEEPER_ENTRIES
    deepest = max(level for _, level in folders) + DEEPER_LEVELS
    stack = list(reversed(folders))
    while stack and budget > 0:
        folder, level = stack.pop()
        if hfcache.is_repo_folder(folder):
            found.setdefault(os.path.basename(folder), (folder, level - 1))
            continue
        try:
            with os.scandir(folder) as iterator:
                entries = sorted(iterator, key=lambda item: item.name)
        except OSError:
            continue
        budget -= len(entries)
        for entry in entries:
            if entry.name.startswith(".") or is_incomplete(entry.name):
                continue
            try:
                if entry.is_dir(follow_symlinks=False):
                    if level < deepest:
                        stack.append((entry.path, level + 1))
                elif entry.name.lower().endswith(MODEL_SUFFIXES) or entry.stat().st_size >= min_size:
                    found.setdefault(entry.name, (entry.path, level))
            except OSError:
                continue
    return found


def _gguf_split_count(path):
    """`split.count` from a GGUF header, or (None, reason) when the header does not parse."""
    from moetools.errors import MoeError
    from moetools.gguf import read_header
    from moetools.gguf.constants import Keys

    try:
        header = read_header(path)
    except (MoeError, OSError, ValueError) as err:
        problem = getattr(err, "problem", None) or getattr(err, "strerror", None) or str(err)
        offset = getattr(err, "offset", None)
        return None, problem if offset is None else f"{problem}, at offset {offset}"
    return header.get(Keys.SPLIT_COUNT), None


def _gguf_artifacts(folder, files, read_headers):
    """Artifacts from the .gguf files of one folder; returns (artifacts, names used)."""
    from moetools.gguf import shard_path, split_name

    artifacts, used, sets = [], set(), {}
    by_name = {member.name: member for member in files}
    for member in files:
        if not member.name.endswith(".gguf"):
            continue
        parsed = split_name(member.path)
        if parsed is None or parsed[2] == 0 or parsed[1] == 0 or parsed[1] > parsed[2]:
            continue
        sets.setdefault((parsed[0], parsed[2]), []).append(member)
    for (prefix, count), members in sets.items():
        present, missing = [], []
        for number in range(1, count + 1):
            name = os.path.basename(shard_path(prefix, number, count))
            (present.append(by_name[name]) if name in by_name else missing.append(name))
        used.update(member.name for member in present)
        artifact = Artifact(present[0].path, "gguf-split", folder, present, missing)
        if read_headers:
            # Every shard carries split.count; the last one has no vocabulary in its header, so it
            # parses in a millisecond where the first can take 100 ms (a 160k-token vocabulary).
            probe = present[-1]
            declared, problem = _gguf_split_count(probe.path)
            if problem is not None:
                artifact.warnings.append(f"header of {probe.name} does not parse ({problem}); shard count taken from the names")
            elif declared is None:
                artifact.warnings.append(f"{probe.name} has no split.count; the names say {count} shards")
            elif declared != count:
                artifact.warnings.append(f"split.count in {probe.name} is {declared} but the names say {count} shards")
        artifacts.append(artifact)
    for member in files:
        if member.name.endswith(".gguf") and member.name not in used:
            used.add(member.name)
            artifacts.append(Artifact(member.path, "gguf", folder, [member]))
    return artifacts, used


def _safetensors_artifacts(folder, files, used):
    """Safetensors sets (named by their index or by NAME-0000k-of-0000N) and single files."""
    artifacts, notes = [], []
    by_name = {member.name: member for member in files}
    for member in files:
        if not member.name.endswith(SAFETENSORS_INDEX_SUFFIX):
            continue
        names = None
        try:
            with open(member.path, "rb") as handle:
                weight_map = json.loads(handle.read(64 * 1024 * 1024)).get("weight_map", {})
            names = sorted({str(value) for value in weight_map.values()})
        except (OSError, ValueError, AttributeError) as err:
            notes.append(f"index {member.name} does not parse ({err}); shards grouped by their names")
        if not names:
            continue
        if any(os.path.basename(name) != name or name in used for name in names):
            continue
        present = [by_name[name] for name in names if name in by_name]
        missing = [name for name in names if name not in by_name]
        if not present:
            continue
        used.update(names)
        used.add(member.name)
        artifacts.append(Artifact(present[0].path, "safetensors", folder, present + [member], missing))
    sets = {}
    for member in files:
        match = SAFETENSORS_SPLIT_RE.match(member.name)
        if match and member.name not in used:
            sets.setdefault((match["prefix"], int(match["count"])), []).append(member)
    for (prefix, count), members in sets.items():
        names = [f"{prefix}-{number:05d}-of-{count:05d}.safetensors" for number in range(1, count + 1)]
        present = [by_name[name] for name in names if name in by_name]
        missing = [name for name in names if name not in by_name]
        used.update(member.name for member in present)
        artifacts.append(Artifact(present[0].path, "safetensors", folder, present, missing))
    for member in files:
        if member.name.endswith(".safetensors") and member.name not in used:
            used.add(member.name)
            artifacts.append(Artifact(member.path, "safetensors", folder, [member]))
    for artifact in artifacts:  # an index that does not parse concerns every set beside it
        artifact.warnings.extend(notes)
    return artifacts


def folder_artifacts(folder, files, min_size, read_headers=True):
    """The artifacts among one folder's files (FileStats): model files, and others >= min_size bytes."""
    artifacts, used = _gguf_artifacts(folder, files, read_headers)
    artifacts += _safetensors_artifacts(folder, files, used)
    for member in files:
        if member.name not in used and not member.name.endswith(SAFETENSORS_INDEX_SUFFIX) and member.size >= min_size:
            artifacts.append(Artifact(member.path, "file", folder, [member]))
    artifacts.sort(key=lambda artifact: artifact.path)
    return artifacts


def scan_hot(hot, depth, min_size, exclude=(), read_headers=True, deeper=None):
    """Artifacts on the hot tier: (list of Artifact sorted by path, problems as lines).

    `hot` is a folder (scanned `depth` levels down) or one file (the artifact it belongs to). A
    Hugging Face repo folder met on the way is one artifact per revision (hfcache); a `hot` inside a
    repo (its snapshot folder, say) is the revisions it holds. Models deeper than `depth` go to
    `deeper` ({name: (path, depth)}) when given.
    """
    problems = []
    repo = hfcache.enclosing_repo(hot)
    if repo is not None:
        _, artifacts = hfcache.repo_artifacts(repo, within=None if os.path.samefile(repo, hot) else hot)
        return artifacts, problems
    if os.path.isfile(hot):
        folder = os.path.dirname(hot) or os.curdir
        target = os.path.basename(hot)
        for _, files in walk_files(folder, 0, problems=problems):
            found = [a for a in folder_artifacts(folder, files, 0, read_headers) if target in a.names]
            return found, problems
        return [], problems
    artifacts, too_deep = [], []

    def special(path):
        if hfcache.is_shared_store(path):
            return True
        if hfcache.is_repo_folder(path):
            artifacts.extend(hfcache.repo_artifacts(path)[1])
            return True
        return False

    for folder, files in walk_files(hot, depth, exclude, problems, special, too_deep):
        artifacts += folder_artifacts(folder, files, min_size, read_headers)
    artifacts.sort(key=lambda artifact: artifact.path)
    if deeper is not None and too_deep:
        deeper.update(find_deeper(too_deep, min_size))
    return artifacts, problems


def index_cold(cold_dirs, depth, exclude=()):
    """Every regular file under the cold folders: (ColdIndex, problems as lines). Hugging Face repos
    are parsed whole into `hf_repos`; model files too deep for `depth` are noted in `deeper`."""
    index, problems = ColdIndex(), []

    def special(path):
        if hfcache.is_shared_store(path):
            return True
        if hfcache.is_repo_folder(path):
            repo = hfcache.parse_repo(path)
            index.hf_repos.setdefault(repo.name, []).append(repo)
            return True
        return False

    too_deep = []
    for cold in cold_dirs:
        for folder, files in walk_files(cold, depth, exclude, problems, special, too_deep):
            for member in files:
                index.add(folder, member)
    if too_deep:
        index.deeper = find_deeper(too_deep, 0)
    return index, problems


def check_folders(hot, cold_dirs, migrate_to):
    """Validate HOT and the cold folders (COLD_DIRs plus the --migrate target, which may not exist yet).

    Returns (cold folders without repeats, real folders to leave out of the hot scan, real folders to
    leave out of the cold scan, notes for the user). Raises InputError for a missing folder and
    UsageError when HOT is a cold folder or lies inside the migration target.
    """
    if not os.path.exists(hot):
        raise InputError(hot, "no such file or folder")
    hot_real = real_folder(hot if os.path.isdir(hot) else os.path.dirname(os.path.abspath(hot)))
    folders = list(cold_dirs) + ([migrate_to] if migrate_to else [])
    unique, seen, notes = [], set(), []
    for folder in folders:
        if folder != migrate_to and not os.path.isdir(folder):
            raise InputError(folder, "no such folder" if not os.path.exists(folder) else "not a folder")
        if migrate_to and folder == migrate_to and os.path.exists(folder) and not os.path.isdir(folder):
            raise InputError(folder, "not a folder")
        real = real_folder(folder)
        if real == hot_real:
            raise UsageError(f"{folder}: is the hot folder itself; a twin must be in another folder")
        if os.path.isdir(hot) and migrate_to and folder == migrate_to and is_inside(hot_real, real):
            raise UsageError(f"{folder}: contains the hot folder; migrating there would copy the models into themselves")
        if real in seen:
            continue
        seen.add(real)
        unique.append(folder)
    hot_exclude, cold_exclude = [], []
    for folder in unique:
        real = real_folder(folder)
        if os.path.isdir(hot) and is_inside(real, hot_real):
            hot_exclude.append(real)
            notes.append(f"{folder} lies inside the hot folder: it is cold storage, not scanned as hot")
        elif is_inside(hot_real, real):
            cold_exclude.append(hot_real)
            notes.append(f"the hot folder lies inside {folder}: it is skipped when searching for twins")
    return unique, hot_exclude, cold_exclude, notes
