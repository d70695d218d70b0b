"""Hugging Face cache trees in the layout huggingface_hub writes, made with its own link helper.

`blobs/<sha256>` holds the bytes, `snapshots/<commit>/<path>` is the relative symlink
huggingface_hub's `file_download._create_symlink` makes, `refs/<name>` holds the bare commit hash
(as `_cache_commit_hash_for_specific_revision` writes it). Checked with `scan_cache_dir`.
"""

import hashlib
import os
from pathlib import Path

import pytest

hf = pytest.importorskip("huggingface_hub", reason="huggingface_hub is needed to build and check HF caches")

COMMIT_A = "a" * 8 + "1" * 32
COMMIT_B = "b" * 8 + "2" * 32


def build_repo(cache, repo_id, revisions, refs=None):
    """Write a repo into `cache`: `revisions` {commit: {path: bytes}}, `refs` {name: commit}.
    Returns the repo folder."""
    from huggingface_hub.file_download import _create_symlink

    repo = Path(cache) / ("models--" + repo_id.replace("/", "--"))
    for commit, files in revisions.items():
        for relative, data in files.items():
            blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
            blob.parent.mkdir(parents=True, exist_ok=True)
            if not blob.exists():
                blob.write_bytes(data)
            pointer = repo / "snapshots" / commit / relative
            pointer.parent.mkdir(parents=True, exist_ok=True)
            _create_symlink(str(blob), str(pointer), new_blob=False)
    for name, commit in (refs or {}).items():
        (repo / "refs" / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / "refs" / name).write_text(commit)
    return repo


def two_revisions(seed=0, big=3 * 1024 * 1024):
    """Two revisions sharing the weights blob: main (A) and a newer one (B) with another config."""
    import random

    weights = random.Random(seed).randbytes(big)
    shared_tok = random.Random(seed + 1).randbytes(5000)
    revisions = {
        COMMIT_A: {"model.safetensors": weights, "config.json": b'{"v": 1}', "sub/tokenizer.json": shared_tok},
        COMMIT_B: {"model.safetensors": weights, "config.json": b'{"v": 2}', "sub/tokenizer.json": shared_tok},
    }
    return revisions, {"main": COMMIT_B, "v1": COMMIT_A}


def cache_contents(cache):
    """{(repo_id, commit, path): bytes} through huggingface_hub's own scan; asserts the cache is valid:
    no warnings (no dangling link, no unknown ref), every link relative and inside the cache."""
    from huggingface_hub import scan_cache_dir

    info = scan_cache_dir(cache)
    assert list(info.warnings) == [], info.warnings
    found = {}
    for repo in info.repos:
        for revision in repo.revisions:
            for cached in revision.files:
                path = Path(cached.file_path)
                if path.is_symlink():
                    assert not os.path.isabs(os.readlink(path)), f"{path}: absolute link"
                    assert Path(os.path.realpath(path)).is_relative_to(os.path.realpath(cache)), f"{path}: leaves the cache"
                found[(repo.repo_id, revision.commit_hash, path.relative_to(revision.snapshot_path).as_posix())] = path.read_bytes()
    return found, info


def expected_contents(repo_id, revisions):
    return {(repo_id, commit, relative): data for commit, files in revisions.items() for relative, data in files.items()}


def blobs_intact(cache):
    """Every blob's bytes still hash to its sha256 name."""
    for blob in Path(cache).rglob("blobs/*"):
        if blob.is_file() and not blob.is_symlink() and len(blob.name) == 64:
            assert hashlib.sha256(blob.read_bytes()).hexdigest() == blob.name, blob
