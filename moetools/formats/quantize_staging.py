"""quantize's staging folder: how a run's tiers become visible all together, and how a killed run
is finished by the next one.

A quantize run writes every output into `OUT/.moetools-quantize.staging/` (same folder, so the
final moves are renames), never into OUT itself:

- `state.json` — `{"version": 1, "key": RUN_KEY, "pieces": {NAME: {"bytes": N, "xxh3": HEX,
  "errors": [[tensor, source_type, type, values, sse, ss_source, max_abs_error, max_abs_source], ...]}}}`:
  the finished output files (GGUFs, shards) of the run whose plan hashes to RUN_KEY, each with the
  xxh3-128 of its bytes (checked again before a later run reuses it) and the error figures of its
  tensors. Rewritten atomically after each finished file.
- `publish.json` — `{"version": 1, "key": RUN_KEY, "files": [NAME, ...], "remove": [NAME, ...],
  "results": [...]}`: written (atomically) once every file of the run is complete in the staging
  folder; it is the commit point. Then `remove` (older manifests of the tiers being replaced) are
  deleted from OUT and `files` renamed from the staging folder into OUT in that order (the GGUFs,
  of a split set the first shard last, then the manifests), and the staging folder is removed.

Readers skip the names a `publish.json` lists while it exists (`pending_names`): a reader never
sees part of a run. A later run in OUT finishes a `publish.json` it finds (the renames are
idempotent) before anything else, and reuses the verified pieces of a `state.json` whose key is its
own plan's.
"""

import contextlib
import json
import os

STAGING_NAME = ".moetools-quantize.staging"
STATE_NAME = "state.json"
JOURNAL_NAME = "publish.json"
VERSION = 1


def staging_dir(out_dir):
    return os.path.join(out_dir, STAGING_NAME)


def _read(path):
    """A JSON object of ours, or None when missing or unreadable (a torn or foreign file is ignored:
    the staging folder is only ever a cache of a run that can be redone)."""
    try:
        with open(path, encoding="utf-8") as handle:
            doc = json.load(handle)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("version") == VERSION else None


def read_state(out_dir):
    """{"key", "pieces"} of the staged run in `out_dir`, or None."""
    doc = _read(os.path.join(staging_dir(out_dir), STATE_NAME))
    if doc is None or not isinstance(doc.get("key"), str) or not isinstance(doc.get("pieces"), dict):
        return None
    return doc


def read_journal(out_dir):
    """The committed run's publish.json in `out_dir`, or None."""
    doc = _read(os.path.join(staging_dir(out_dir), JOURNAL_NAME))
    if doc is None or not isinstance(doc.get("files"), list) or not all(isinstance(n, str) for n in doc["files"]):
        return None
    doc.setdefault("remove", [])
    return doc


def pending_names(folder):
    """Names in `folder` that a run is publishing right now (or was, when it was killed): readers
    of tier folders leave them out until the run's last rename."""
    journal = read_journal(folder)
    if journal is None:
        return frozenset()
    return frozenset(name for name in (*journal["files"], *journal["remove"]) if isinstance(name, str))


def write_state(out_dir, key, pieces):
    from moetools import atomic

    atomic.write_json(os.path.join(staging_dir(out_dir), STATE_NAME), {"version": VERSION, "key": key, "pieces": pieces})


def write_journal(out_dir, key, files, remove, results):
    from moetools import atomic

    atomic.write_json(os.path.join(staging_dir(out_dir), JOURNAL_NAME),
                      {"version": VERSION, "key": key, "files": list(files), "remove": list(remove), "results": results})


def clear(out_dir):
    """Remove the staging folder and everything in it (files only: it holds no sub-folders)."""
    folder = staging_dir(out_dir)
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return
    # the journal last: while it exists the folder is a commit that a later run completes
    for name in sorted(names, key=lambda name: name == JOURNAL_NAME):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(folder, name))
    with contextlib.suppress(OSError):
        os.rmdir(folder)
