"""`moetools cold-twin HOT_DIR COLD_DIR...`: is each hot model safely duplicated on cold storage?

    moetools cold-twin /nvme/models /hdd/models                  # quick check (first/last MiB)
    moetools cold-twin C:/models "D:/cold models" --verify full   # every byte, both drives in parallel
    moetools cold-twin /nvme/models /hdd/models --evict --yes     # drop NVMe copies with a verified twin
    moetools cold-twin /nvme/models --migrate /hdd/models --free 600G --keep 'Kimi-K2*' --yes

Exit 0 when every hot artifact has a verified twin (or the requested action succeeded), 1
otherwise, 2 for bad input. Dry run unless --yes.
"""

import os
import re
import shutil

import click

from moetools import helptext
from moetools.coldtwin import actions as act
from moetools.coldtwin.core import LEVELS, MISMATCH, QUICK_MATCH, VERIFIED, check_all, structural_twins
from moetools.coldtwin.hashing import CACHE_NAME, HashCache, Hasher, cache_dir
from moetools.coldtwin.hfcache import repo_summaries
from moetools.coldtwin.report import build_report
from moetools.coldtwin.scan import check_folders, index_cold, scan_hot
from moetools.errors import UsageError
from moetools.locking import folder_locks, remove_stale_temps
from moetools.output import Table, render, warn
from moetools.progress import progress
from moetools.sizes import format_size, parse_size

DEFAULT_MIN_SIZE = "64MiB"


class _quiet:
    """No progress bar (nothing long to show)."""

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _relative(path, root):
    if root and os.path.isdir(root):
        try:
            return os.path.relpath(path, root)
        except ValueError:
            return path
    return path


def _status_cell(entry):
    if entry["status"] == VERIFIED:
        return f"verified ({entry['verify']})"
    if entry["status"] == QUICK_MATCH:
        return "quick match (first/last MiB only)"
    if entry["status"] == MISMATCH and entry["verify"] == "full":
        return "mismatch (full)"
    return entry["status"]


def _action_cell(entry):
    action = entry["action"]
    if not action:
        return "; ".join(([entry["reason"]] if entry["reason"] else []) + entry["warnings"])
    verb = {"evict": ("would evict", "evicted"), "migrate": ("would migrate", "migrated")}[action["kind"]]
    if action["error"]:
        return f"{action['kind']} failed: {action['error']}"
    return verb[1] if action["done"] else verb[0]


def fold_left(text, width):
    """`text` cut to `width` characters from the left ("…" + its end): the end of a path (file name,
    quant type, shard number) is what tells two models apart."""
    if width < 2 or len(text) <= width:
        return text
    return "…" + text[-(width - 1):]


def _twin_cell(twin, cold_dirs):
    """The twin's path below the COLD_DIR holding it (the title names the COLD_DIRs)."""
    if not twin:
        return "-"
    for root in cold_dirs:
        relative = _relative(twin, root)
        if not relative.startswith(os.pardir) and not os.path.isabs(relative):
            return relative if len(cold_dirs) == 1 else os.path.join(root, relative)
    return twin


SET_NAME_RE = re.compile(r"-\d{5}-of-\d{5}(?=\.(gguf|safetensors)$)")


def _label(entry, hot):
    """What the table calls an artifact: a Hugging Face revision by repo@commit, a shard set by its
    path without the shard number, with its file count."""
    if entry.get("hf"):
        return entry["hf"]["label"]
    label = _relative(entry["hot"], hot)
    for suffix in (".gguf", ".safetensors"):
        if entry["kind"] != "file" and label.endswith(suffix):
            label = SET_NAME_RE.sub("", label)[: -len(suffix)]
    if entry["files"] > 1 or entry["missing"]:
        label += f" ×{entry['files'] + len(entry['missing'])}"
    return label


def _folded_label(entry, hot, width):
    """The label within `width`: a revision keeps its @commit (refs) whole and folds the repo id."""
    if entry.get("hf"):
        repo_id = entry["hf"]["repo_id"]
        suffix = entry["hf"]["label"][len(repo_id):]
        return fold_left(repo_id, max(6, width - len(suffix))) + suffix
    return fold_left(_label(entry, hot), width)


def column_widths(width):
    """(artifact, twin) widths that keep a 4-column table inside `width` terminal columns: the
    table's borders and padding take 13, the size 9 and the status 21; the rest is shared."""
    rest = max(20, width - 13 - 9 - 21)
    return max(12, rest * 11 // 20), max(8, rest - rest * 11 // 20)


def _terminal_width():
    return shutil.get_terminal_size((80, 24)).columns


def _tables(doc, hot, width=None):
    """The terminal tables: one row per artifact, folded to `width` columns (the terminal's); JSON
    keeps every path whole."""
    name_width, note_width = column_widths(width or _terminal_width())
    rows = []
    for entry in doc["artifacts"]:
        note = _action_cell(entry) or ""
        own_name = os.path.basename(entry["hot"]) + ": "
        if entry["files"] == 1 and note.startswith(own_name):  # the row already names the file
            note = note[len(own_name):]
        twin = _twin_cell(entry["twin"], doc["cold"])
        if twin != "-":
            same = twin == _relative(entry["hot"], hot)
            twin_words = "twin at the same path" if same else f"twin {fold_left(twin, note_width - 5)}"
            note = twin_words + (f"; {note}" if note else "")
        rows.append([
            _folded_label(entry, hot, name_width),
            format_size(entry["bytes"]),
            _status_cell(entry),
            note,
        ])
    summary = doc["summary"]
    caption = (f"{summary['twinned']} of {summary['artifacts']} have a twin ({summary['verified_full']} verified in full); "
               f"{format_size(summary['reclaimable_bytes'])} reclaimable")
    if summary["freed_bytes"]:
        caption += f"; {format_size(summary['freed_bytes'])} {'would be ' if doc['dry_run'] else ''}freed"
    tables = [Table(f"cold twins of {hot} in {', '.join(doc['cold'])} (verify {doc['verify']})",
                    ["artifact", "size", "status", "twin / reason"], rows, right_align=(1,), caption=caption)]
    if doc.get("hf_repos"):
        tables.append(_hf_table(doc, name_width))
    return tables


def _hf_table(doc, name_width):
    """Like `hf cache scan`: one row per repo, its revisions, size on disk (blobs once) and twins."""
    rows = []
    for repo in doc["hf_repos"]:
        revisions = ", ".join(revision["label"] for revision in repo["revisions"])
        rows.append([fold_left(repo["repo_id"], name_width), format_size(repo["size_on_disk_bytes"]),
                     repo["twin_status"], revisions])
    return Table("Hugging Face repos (size on disk counts each blob once)",
                 ["repo", "on disk", "twins", "revisions"], rows, right_align=(1,))


@click.command("cold-twin", epilog=helptext.COLD_TWIN)
@click.argument("hot", metavar="HOT_DIR", type=click.Path(path_type=str))
@click.argument("cold_dirs", metavar="COLD_DIR...", nargs=-1, type=click.Path(path_type=str))
@click.option("--verify", "level", type=click.Choice(LEVELS), default=None,
              help="quick (default): xxh3-128 of the first and last MiB of every file and an all-zero tail check; "
                   "full: every byte, hot and cold read in parallel; none: names and sizes only.")
@click.option("--depth", type=click.IntRange(0), default=2, show_default=True,
              help="Folder levels searched below HOT_DIR and each COLD_DIR.")
@click.option("--min-size", default=DEFAULT_MIN_SIZE, show_default=True,
              help="Files other than .gguf/.safetensors count as artifacts from this size up.")
@click.option("--evict", is_flag=True, help="Remove the hot copy of artifacts whose twin passed --verify full.")
@click.option("--migrate", "migrate_to", metavar="COLD_DIR", type=click.Path(path_type=str),
              help="Copy artifacts with no twin into COLD_DIR (same folders as below HOT_DIR), verify, then evict them.")
@click.option("--free", "free", metavar="SIZE", help="Evict or migrate, least recently used first, until SIZE is freed.")
@click.option("--keep", multiple=True, metavar="PATTERN",
              help="Never evict or migrate an artifact whose name, path or model stem matches this glob (repeatable).")
@click.option("--yes", is_flag=True, help="Act; without it --evict/--migrate/--free are a dry run.")
@click.option("--log", "log_path", metavar="FILE", type=click.Path(path_type=str),
              help=f"JSON-lines action log (default: {os.path.join('<cache folder>', act.LOG_NAME)}).")
@click.option("--no-cache", is_flag=True, help="Hash every file again instead of trusting the hash cache.")
@click.option("--trust-cache", is_flag=True,
              help="RISK: evict on the hash cache's word. Without it an eviction (and a migration reusing a cold "
                   "copy) reads the cold copy again in full first; with it, a cold copy damaged since it was "
                   "hashed (bit rot keeps size and mtime) passes, and the hot copy, the only good one, is deleted.")
@click.option("--wait", is_flag=True,
              help="If another run is acting on the same cold folder or log, wait for it instead of stopping.")
@click.option("--json", "json_flag", is_flag=True, help="JSON output (the default when stdout is not a terminal).")
def cold_twin_command(hot, cold_dirs, level, depth, min_size, evict, migrate_to, free, keep, yes, log_path, no_cache,
                      trust_cache, wait, json_flag):
    """Is each model in HOT_DIR safely duplicated in a COLD_DIR, and can the hot copy go?

    A twin is a folder below a COLD_DIR holding every file of the model (all GGUF shards, or a
    safetensors set with its index) under the same names and sizes, verified by xxh3-128. Hashes are
    cached by (device, inode, size, mtime) in the cache folder ($MOETOOLS_CACHE_DIR to move it).
    Exit 0 when every artifact has a verified twin (or the action succeeded), 1 otherwise.
    With --yes an action holds a lock on the --migrate folder and the log's folder: a second run on
    the same folders stops ("in use by pid N since ...") or, with --wait, waits.
    """
    if not cold_dirs and not migrate_to:
        raise UsageError("give at least one COLD_DIR (or --migrate COLD_DIR)")
    free_bytes = parse_size(free) if free is not None else None
    if evict and level not in (None, "full"):
        raise UsageError(f"--evict needs --verify full (an eviction trusts only a full-content twin), not --verify {level}")
    if level is None:
        level = "full" if evict else ("none" if free_bytes is not None else "quick")
    acting = evict or migrate_to or free_bytes is not None
    if yes and not acting:
        warn("--yes does nothing without --evict, --migrate or --free")
    min_bytes = parse_size(min_size)
    cold, hot_exclude, cold_exclude, notes = check_folders(hot, cold_dirs, migrate_to)
    if migrate_to and os.path.isdir(hot) and os.path.isdir(migrate_to):
        if os.stat(migrate_to).st_dev == os.stat(hot).st_dev:
            notes.append(f"{migrate_to} is on the same device as {hot}: migrating frees no space on that device")
    for note in notes:
        warn(note)
    if acting and hot_exclude:
        raise UsageError(f"a COLD_DIR lies inside {hot}: a copy on the same drive is no cold twin; "
                         "nothing is evicted or migrated (check without --evict/--migrate/--free)")

    if acting and yes:
        log_path = log_path or os.path.join(cache_dir(), act.LOG_NAME)
    with _action_locks(log_path if acting and yes else None, migrate_to if yes else None, wait):
        _check_and_act(hot, cold, hot_exclude, cold_exclude, level, depth, min_bytes, evict, migrate_to, free_bytes,
                       keep, yes, acting, log_path, no_cache, trust_cache, json_flag)


def _action_locks(log_path, migrate_to, wait):
    """The locks a run that acts holds: the --migrate folder (written into) and the log's folder
    (the log and its resume records); none for a check or a dry run."""
    folders = [os.path.dirname(os.path.abspath(log_path))] if log_path else []
    if migrate_to:
        folders.append(migrate_to)
    if not folders:
        return _quiet()
    return folder_locks(folders, tool="cold-twin", wait=wait, on_wait=warn)


def _check_and_act(hot, cold, hot_exclude, cold_exclude, level, depth, min_bytes, evict, migrate_to, free_bytes, keep,
                   yes, acting, log_path, no_cache, trust_cache, json_flag):
    deeper = {}
    artifacts, hot_problems = scan_hot(hot, depth, min_bytes, hot_exclude, deeper=deeper)
    for path, found_depth in sorted(deeper.values()):
        warn(f"{path}: found at depth {found_depth}; use --depth {found_depth} (not checked)")
    index, cold_problems = index_cold([folder for folder in cold if os.path.isdir(folder)], depth, cold_exclude)
    index.hot_ids = {member.identity for artifact in artifacts for member in artifact.files}
    for problem in hot_problems + cold_problems:
        warn(problem)
    for artifact in artifacts:
        for line in artifact.warnings:
            warn(f"{artifact.path}: {line}")

    cache = HashCache(None if no_cache else os.path.join(cache_dir(), CACHE_NAME))
    remove_stale_temps(cache_dir())  # a cache save (or log folder write) a killed run left half-done
    for line in cache.warnings:
        warn(line)
    shown = len(cache.warnings)  # later lines (a save that failed during the run) are shown at the end
    to_hash = 0
    if level == "full":  # what the progress bar counts: both sides of every artifact with a candidate twin
        to_hash = sum(2 * artifact.bytes for artifact in artifacts if structural_twins(artifact, index)[0])
    log = act.NullLog()
    if acting and yes:
        for record in act.interrupted_actions(log_path):
            ours = act.is_below(record.get("hot"), hot)
            warn(f"run {record.get('run')} was interrupted during {record.get('event', '').split('-')[0]} of "
                 f"{record.get('hot')}; " + (f"this run resumes it (see {log_path})" if ours else
                                             "it is not below HOT_DIR: rerun that run's command to finish it"))
        log = act.ActionLog(log_path)
    plan = act.Plan(evict=evict, migrate_to=migrate_to, free_bytes=free_bytes, keep=tuple(keep),
                    dry_run=not yes, hot_root=hot, trust_cache=trust_cache,
                    progress=lambda desc, total: progress(total=total, desc=desc))
    try:
        hasher = Hasher(cache)
        if to_hash:
            with progress(total=to_hash, desc="verify full: reading hot and cold") as bar:
                hasher.bar = bar
                results = check_all(artifacts, index, level, hasher)
        elif level == "quick" and artifacts:
            with progress(total=len(artifacts), desc="quick check: first/last MiB", unit="model") as bar:
                results = check_all(artifacts, index, level, hasher, on_checked=bar.update)
        else:
            results = check_all(artifacts, index, level, hasher)
        hasher.bar = None
        actions, freed = {}, 0
        if acting:
            actions, freed = act.apply(results, plan, index, hasher, log, disk_usage=shutil.disk_usage)
    finally:
        cache.prune([hot] + [folder for folder in cold if os.path.isdir(folder)])
        cache.save()
        log.close()
        for line in dict.fromkeys(cache.warnings[shown:]):  # each failure once, however often it recurred
            warn(line)

    doc = build_report(hot, cold, level, plan, results, actions, freed, hot_problems + cold_problems,
                       hot_ok=not hot_problems, log_path=log.path, hf_repos=repo_summaries(results))
    doc["deeper"] = [{"path": path, "depth": found_depth} for path, found_depth in sorted(deeper.values())]
    render(doc, lambda: _tables(doc, hot), json_flag)
    if not doc["ok"]:
        click.get_current_context().exit(1)
