"""Evicting and migrating one Hugging Face cache revision, keeping both caches usable by huggingface_hub.

Eviction order (each step logged before the next): the refs naming the commit, then the revision's
blobs that no other revision of the repo references now (the repo is read again first), then the
snapshot's links, then its `.no_exist` markers; the folders this emptied go last (actions.py). A kill
between steps leaves a revision whose snapshot links name blobs already removed: its cold twin holds
them, so a rerun finds the twin complete and finishes (the same rule as a half-evicted shard set).
Links are unlinked, never followed: a blob that is a link into the cache's shared store loses its
link, the shared file stays.

Migration copies each blob (verified from disk, as every migration) into the cold repo's `blobs/`,
then creates the snapshot's relative symlinks and finally the refs, so the cold repo is a valid cache
at every point; where symlinks cannot be made (Windows without the privilege) a hard link to the blob
stands in, and where neither works the migration stops before anything is removed.
"""

import os

from moetools.atomic import fsync_dir, write_text
from moetools.coldtwin.fsops import _make_folder, is_below, place_member
from moetools.coldtwin.types import ActionFailed, Twin
from moetools.coldtwin.hashing import test_pause
from moetools.coldtwin.hfcache import BLOB_KEY, parse_repo
from moetools.errors import OutputError


def _path(repo_folder, key):
    return os.path.join(repo_folder, *key.split("/"))


def revision_destination(artifact, hot_root, cold_root):
    """(cold repo folder, cold snapshot folder): the repo's place below HOT_DIR, under COLD_DIR."""
    repo_folder = artifact.folder
    if hot_root and os.path.isdir(hot_root) and not is_below(hot_root, repo_folder):
        relative = os.path.relpath(repo_folder, hot_root)
    else:  # HOT_DIR is the repo or lies inside it
        relative = os.path.basename(os.path.normpath(repo_folder))
    dest = os.path.join(cold_root, relative)
    return dest, os.path.join(dest, "snapshots", artifact.hf.commit)


def revision_needs(artifact, dest_repo):
    """(bytes still to copy, bytes already at the destination that must be read again)."""
    needed = reused = 0
    for member, key in zip(artifact.files, artifact.hf.member_keys):
        if os.path.lexists(_path(dest_repo, key)):
            reused += member.size
        else:
            needed += member.size
    return needed, reused


def _place_link(link, target, log):
    """Make `link` name `target` (a relative symlink, else a hard link); an existing entry is kept
    only when it already reaches the same file."""
    if os.path.lexists(link):
        try:
            if os.path.samefile(link, target):
                return
        except OSError:
            pass
        raise ActionFailed(f"{link}: already exists and does not lead to {os.path.basename(target)}; not replaced")
    os.makedirs(os.path.dirname(link), exist_ok=True)
    relative = os.path.relpath(target, os.path.dirname(link))
    try:
        os.symlink(relative, link)
        log.write("symlink", path=link, target=relative)
        return
    except (OSError, NotImplementedError) as err:
        symlink_error = err
    try:
        os.link(target, link)
    except OSError as err:
        raise ActionFailed(f"{link}: cannot create a symbolic link ({getattr(symlink_error, 'strerror', None) or symlink_error}) "
                           f"nor a hard link ({err.strerror or err}); the snapshot is incomplete, nothing removed") from None
    log.write("hardlink", path=link, target=target)


def _place_ref(dest_repo, ref, commit, log):
    path = os.path.join(dest_repo, "refs", *ref.split("/"))
    if os.path.exists(path):
        with open(path, encoding="utf-8", errors="replace") as handle:
            current = handle.read(256).strip()
        if current != commit:
            log.write("ref-kept", path=path, commit=current, hot_commit=commit)
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        write_text(path, commit, overwrite=False)  # huggingface_hub writes the bare hash, no newline
    except OutputError as err:
        raise ActionFailed(str(err)) from None
    log.write("ref", path=path, commit=commit)


def migrate_revision(artifact, dest_repo, log, hasher, disk_usage, trust_cache, check_space_for):
    """Copy one revision into the cold repo `dest_repo` (blobs, snapshot links, refs). Returns its Twin."""
    revision = artifact.hf
    needed, _ = revision_needs(artifact, dest_repo)
    check_space_for(dest_repo, needed, disk_usage)
    _make_folder(dest_repo)
    log.write("migrate-start", hot=artifact.path, dest=dest_repo, bytes=artifact.bytes)
    placed = []
    for member, key in zip(artifact.files, revision.member_keys):
        placed.append(place_member(member, _path(dest_repo, key), log, hasher, trust_cache))
    snapshot = os.path.join(dest_repo, "snapshots", revision.commit)
    for relative, key in sorted(revision.entries.items()):
        if key.startswith(BLOB_KEY):
            _place_link(os.path.join(snapshot, *relative.split("/")), _path(dest_repo, key), log)
            test_pause()
    for root, _, _ in os.walk(snapshot):
        fsync_dir(root)
    for ref in sorted(revision.refs):
        _place_ref(dest_repo, ref, revision.commit, log)
    log.write("migrate-copied", hot=artifact.path, dest=dest_repo)
    return Twin(dest_repo, placed, shown=snapshot)


def remove_revision(artifact, twin, log, recheck, check_twin_present):
    """Remove one hot revision (see the module docstring). Returns (bytes freed, [folders touched])."""
    revision = artifact.hf
    repo_folder = artifact.folder
    now = parse_repo(repo_folder)  # what the other revisions reference at this moment
    still_used = {key for commit, other in now.revisions.items() if commit != revision.commit
                  for key in other.entries.values()}
    touched, freed = [], 0
    for ref, commit in sorted(now.refs.items()):
        if commit == revision.commit:
            path = os.path.join(repo_folder, "refs", *ref.split("/"))
            os.unlink(path)
            log.write("unlink", hot=artifact.path, path=path, bytes=0)
            touched.append(os.path.dirname(path))
    for member, key in zip(artifact.files, revision.member_keys):
        path = _path(repo_folder, key)
        if key in still_used:
            log.write("kept", hot=artifact.path, path=path, reason="another revision uses it")
            continue
        recheck(member, "hot copy")  # immediately before its unlink
        is_link = os.path.islink(path)  # a link into the shared store: the link goes, the shared file stays
        os.unlink(path)
        freed += 0 if is_link else member.size
        log.write("unlink", hot=artifact.path, path=path, bytes=0 if is_link else member.size)
        touched.append(os.path.dirname(path))
        check_twin_present(twin)
        test_pause()
    known = {os.path.join(revision.snapshot, *relative.split("/")) for relative in revision.entries}
    for root, _, names in os.walk(revision.snapshot, topdown=False):
        for name in names:
            path = os.path.join(root, name)
            # Only what the scan saw: a link, or a file whose bytes were a verified member (gone
            # already) or a hard link to a blob. Anything added since stays, and so does its folder.
            if path in known and (os.path.islink(path) or os.path.isfile(path)):
                os.unlink(path)
                log.write("unlink", hot=artifact.path, path=path, bytes=0)
        touched.append(root)
    no_exist = os.path.join(repo_folder, ".no_exist", revision.commit)
    for root, _, names in os.walk(no_exist, topdown=False):
        for name in names:
            path = os.path.join(root, name)
            if os.path.isfile(path) and not os.path.islink(path) and os.path.getsize(path) == 0:
                os.unlink(path)  # huggingface_hub's empty "this file does not exist" markers
        touched.append(root)
    return freed, touched
