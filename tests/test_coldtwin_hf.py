"""cold-twin on Hugging Face caches: revisions as units, blobs once, migrations huggingface_hub can
use, evictions that keep shared blobs, and bad caches refused."""

import os
from pathlib import Path

from tests.coldtwin_util import payload, run, write
from tests.coldtwin_util import cache_folder, trees  # noqa: F401 (fixtures used by name)
from tests.hf_util import (
    COMMIT_A,
    COMMIT_B,
    blobs_intact,
    build_repo,
    cache_contents,
    expected_contents,
    two_revisions,
)

REPO = "acme/tiny-moe"


def hub_trees(tmp_path):
    """HOT is ~/.cache/huggingface (hub one level down), COLD an empty drive folder."""
    hot, cold = tmp_path / "hf home", tmp_path / "cold drive"
    (hot / "hub").mkdir(parents=True)
    cold.mkdir()
    return hot, cold


def test_revisions_are_units_and_shared_blobs_count_once(tmp_path):
    hot, cold = hub_trees(tmp_path)
    revisions, refs = two_revisions()
    repo = build_repo(hot / "hub", REPO, revisions, refs)
    code, doc, _ = run(hot, cold)
    assert code == 1
    entries = {entry["hf"]["commit"]: entry for entry in doc["artifacts"]}
    assert set(entries) == {COMMIT_A, COMMIT_B}
    assert all(entry["kind"] == "hf-revision" and entry["status"] == "none" for entry in entries.values())
    weights = len(revisions[COMMIT_A]["model.safetensors"])
    per_revision = weights + 8 + 5000
    assert entries[COMMIT_A]["bytes"] == entries[COMMIT_B]["bytes"] == per_revision  # hf's revision size
    assert doc["summary"]["bytes"] == weights + 8 + 8 + 5000  # each blob once
    (row,) = doc["hf_repos"]
    assert row["repo_id"] == REPO and row["size_on_disk_bytes"] == doc["summary"]["bytes"]
    assert row["twin_status"] == "2/2 none" and row["path"] == str(repo)
    assert sorted(revision["refs"] for revision in row["revisions"]) == [["main"], ["v1"]]
    # No blob is an artifact of its own.
    assert not any("/blobs/" in entry["hot"] for entry in doc["artifacts"])


def test_migrate_then_both_sides_are_valid_caches(tmp_path):
    from huggingface_hub import try_to_load_from_cache

    hot, cold = hub_trees(tmp_path)
    revisions, refs = two_revisions()
    build_repo(hot / "hub", REPO, revisions, refs)
    before, _ = cache_contents(hot / "hub")
    code, doc, result = run(hot, "--migrate", cold, "--yes")
    assert code == 0, result.output
    assert all(entry["action"]["done"] for entry in doc["artifacts"])
    # The weights blob is copied once and freed once.
    assert doc["summary"]["freed_bytes"] == doc["summary"]["bytes"]
    after, info = cache_contents(cold / "hub")
    assert after == before == expected_contents(REPO, revisions)
    (repo,) = info.repos
    assert {revision.commit_hash: set(revision.refs) for revision in repo.revisions} == {COMMIT_A: {"v1"}, COMMIT_B: {"main"}}
    assert repo.size_on_disk == doc["summary"]["bytes"]
    blobs_intact(cold)
    # huggingface_hub resolves a branch in the cold cache.
    path = try_to_load_from_cache(REPO, "config.json", cache_dir=cold / "hub", revision="main")
    assert path and Path(path).read_bytes() == b'{"v": 2}'
    # The hot cache lost the repo (and the folders that emptied); hub itself held only it.
    assert not (hot / "hub").exists() or list((hot / "hub").iterdir()) == []
    assert hot.is_dir()


def test_evicting_one_revision_keeps_the_blobs_the_other_uses(tmp_path):
    hot, cold = hub_trees(tmp_path)
    revisions, refs = two_revisions()
    build_repo(hot / "hub", REPO, revisions, refs)
    build_repo(cold / "hub", REPO, revisions, refs)
    code, doc, result = run(hot, cold, "--evict", "--yes", "--keep", f"{REPO}@main")
    assert code == 0, result.output
    done = {entry["hf"]["commit"]: entry["action"] for entry in doc["artifacts"] if entry["action"]}
    assert set(done) == {COMMIT_A} and done[COMMIT_A]["done"] is True
    assert done[COMMIT_A]["freed_bytes"] == 8  # only A's own config.json: weights and tokenizer are B's too
    hot_left, info = cache_contents(hot / "hub")
    assert hot_left == expected_contents(REPO, {COMMIT_B: revisions[COMMIT_B]})
    assert {tuple(revision.refs) for repo in info.repos for revision in repo.revisions} == {("main",)}
    assert cache_contents(cold / "hub")[0] == expected_contents(REPO, revisions)
    blobs_intact(hot)
    # Dry-run accounting agrees: evicting both now frees the rest, counted once.
    code, doc, _ = run(hot, cold, "--evict")
    (entry,) = doc["artifacts"]
    assert entry["action"]["freed_bytes"] == entry["bytes"]


def test_hot_given_as_one_snapshot_folder_is_that_revision(tmp_path):
    hot, cold = hub_trees(tmp_path)
    revisions, refs = two_revisions()
    repo = build_repo(hot / "hub", REPO, revisions, refs)
    build_repo(cold / "hub", REPO, revisions, refs)
    code, doc, result = run(repo / "snapshots" / COMMIT_A, cold, "--evict", "--yes")
    assert code == 0, result.output
    assert [entry["hf"]["commit"] for entry in doc["artifacts"]] == [COMMIT_A]
    assert cache_contents(hot / "hub")[0] == expected_contents(REPO, {COMMIT_B: revisions[COMMIT_B]})
    assert not (repo / "snapshots" / COMMIT_A).exists()


def test_quick_default_and_table_name_revisions(tmp_path):
    from moetools.coldtwin.command import _tables

    hot, cold = hub_trees(tmp_path)
    revisions, refs = two_revisions()
    build_repo(hot / "hub", REPO, revisions, refs)
    build_repo(cold / "hub", REPO, revisions, refs)
    code, doc, _ = run(hot, cold)
    assert code == 0 and {entry["status"] for entry in doc["artifacts"]} == {"quick-match"}
    main_table, hf_table = _tables(doc, str(hot), width=120)
    assert [row[0] for row in main_table.rows] == [f"{REPO}@aaaaaaaa (v1)", f"{REPO}@bbbbbbbb (main)"]
    assert _tables(doc, str(hot), width=80)[0].rows[0][0] == "…y-moe@aaaaaaaa (v1)"  # the commit stays whole
    assert hf_table.columns == ["repo", "on disk", "twins", "revisions"]
    assert hf_table.rows[0][0] == REPO and hf_table.rows[0][2] == "2/2 quick-match"


# --- bad input: reported, nothing deleted -------------------------------------------------------

def test_snapshot_link_pointing_outside_the_cache_is_refused(tmp_path):
    hot, cold = hub_trees(tmp_path)
    revisions, refs = two_revisions()
    repo = build_repo(hot / "hub", REPO, revisions, refs)
    build_repo(cold / "hub", REPO, revisions, refs)
    outside = write(tmp_path / "elsewhere" / "secret.bin", payload(1000, 1))
    link = repo / "snapshots" / COMMIT_A / "extra.bin"
    os.symlink(os.path.relpath(outside, link.parent), link)
    code, doc, result = run(hot, cold, "--evict", "--yes")
    assert code == 1
    entry = {e["hf"]["commit"]: e for e in doc["artifacts"]}[COMMIT_A]
    assert entry["action"]["done"] is False and entry["action"]["error"].startswith("refused: ")
    assert "link points outside the cache's blobs" in entry["action"]["error"]
    assert "link points outside the cache's blobs" in result.stderr
    assert outside.read_bytes() == payload(1000, 1) and link.is_symlink()
    assert (repo / "snapshots" / COMMIT_A / "config.json").exists()


def test_blob_missing_under_a_link_without_a_twin_is_reported_and_not_migrated(tmp_path):
    hot, cold = hub_trees(tmp_path)
    revisions, refs = two_revisions()
    repo = build_repo(hot / "hub", REPO, revisions, refs)
    config_a = os.path.realpath(repo / "snapshots" / COMMIT_A / "config.json")
    os.unlink(config_a)
    code, doc, result = run(hot, "--migrate", cold, "--yes")
    assert code == 1
    entry = {e["hf"]["commit"]: e for e in doc["artifacts"]}[COMMIT_A]
    assert entry["status"] == "incomplete" and entry["action"] is None
    assert "blob missing under the snapshot link" in result.stderr
    assert (repo / "snapshots" / COMMIT_A / "model.safetensors").resolve().is_file()  # nothing of A removed


def test_ref_naming_an_unknown_commit_is_refused(tmp_path):
    hot, cold = hub_trees(tmp_path)
    revisions, refs = two_revisions()
    repo = build_repo(hot / "hub", REPO, revisions, dict(refs, stale="c" * 40))
    build_repo(cold / "hub", REPO, revisions, refs)
    code, doc, result = run(hot, cold, "--evict", "--yes")
    assert code == 1
    assert all(entry["action"]["error"].startswith("refused: refs/stale names commit cccccccc")
               for entry in doc["artifacts"])
    assert sorted(os.listdir(repo / "snapshots")) == [COMMIT_A, COMMIT_B]


def test_cold_folder_inside_the_hot_one_is_refused_for_actions(tmp_path):
    hot, _ = hub_trees(tmp_path)
    revisions, refs = two_revisions()
    build_repo(hot / "hub", REPO, revisions, refs)
    inner = hot / "backup"
    build_repo(inner / "hub", REPO, revisions, refs)
    _, _, result = run(hot, inner, "--evict", "--yes", ok_codes=(2,))
    assert "lies inside" in result.stderr and "nothing is evicted or migrated" in result.stderr
    assert cache_contents(hot / "hub")[0] == expected_contents(REPO, revisions)


def test_a_link_outside_a_cache_is_never_followed_into_deletion(trees):
    hot, cold = trees
    target = write(hot.parent / "precious" / "m.gguf", payload(3000, 4))
    os.symlink(target, hot / "m.gguf")
    write(cold / "m.gguf", payload(3000, 4))
    code, doc, _ = run(hot, cold, "--evict", "--yes")
    assert code == 0 and doc["artifacts"][0]["action"]["freed_bytes"] == 0
    assert target.read_bytes() == payload(3000, 4) and not (hot / "m.gguf").exists()


# --- depth ---------------------------------------------------------------------------------------

def test_default_depth_sees_snapshots_below_a_hub_folder(tmp_path):
    hot, cold = hub_trees(tmp_path)
    revisions, refs = two_revisions()
    build_repo(hot / "huggingface" / "hub", REPO, revisions, refs)  # the repo at level 3 below HOT
    code, doc, _ = run(hot, cold)
    assert len(doc["artifacts"]) == 2


def test_models_below_depth_are_reported_with_the_depth_to_use(trees):
    hot, cold = trees
    deep = hot / "a" / "b" / "c" / "d"
    write(deep / "m.gguf", payload(1000, 1))
    write(hot / "n.gguf", payload(1000, 2))
    write(cold / "x" / "y" / "z" / "w" / "n.gguf", payload(1000, 2))
    code, doc, result = run(hot, cold)
    assert f"{deep / 'm.gguf'}: found at depth 4; use --depth 4" in result.stderr
    assert doc["deeper"] == [{"path": str(deep / "m.gguf"), "depth": 4}]
    (entry,) = doc["artifacts"]
    assert entry["reason"] == f"{cold / 'x' / 'y' / 'z' / 'w' / 'n.gguf'} found at depth 4; use --depth 4"
    code, doc, _ = run(hot, cold, "--depth", "4")
    assert by_status(doc) == {"m.gguf": "none", "n.gguf": "quick-match"}


def by_status(doc):
    return {os.path.basename(entry["hot"]): entry["status"] for entry in doc["artifacts"]}


def test_blobs_linked_into_the_shared_store_count_as_their_payload_and_it_is_kept(tmp_path):
    import hashlib

    hot, cold = hub_trees(tmp_path)
    revisions, refs = two_revisions()
    repo = build_repo(hot / "hub", REPO, revisions, refs)
    build_repo(cold / "hub", REPO, revisions, refs)
    # Move the weights into a cache-wide store the way newer huggingface_hub lays it out.
    weights = revisions[COMMIT_A]["model.safetensors"]
    etag = hashlib.sha256(weights).hexdigest()
    from huggingface_hub.utils._shared_blobs import _ensure_shared_blobs_dir, shared_blob_path

    assert _ensure_shared_blobs_dir(hot / "hub")  # huggingface_hub makes and marks the store
    payload_path = shared_blob_path(hot / "hub", "f" * 64)
    payload_path.parent.mkdir()
    os.rename(repo / "blobs" / etag, payload_path)
    os.symlink(os.path.relpath(payload_path, repo / "blobs"), repo / "blobs" / etag)
    assert cache_contents(hot / "hub")[0] == expected_contents(REPO, revisions)  # huggingface_hub agrees
    code, doc, _ = run(hot, cold)
    assert code == 0 and len(doc["artifacts"]) == 2  # the store is no artifact of its own
    assert doc["summary"]["bytes"] == len(weights) + 8 + 8 + 5000
    code, doc, result = run(hot, cold, "--evict", "--yes")
    assert code == 0, result.output
    assert payload_path.read_bytes() == weights  # the shared file stays; only the repo's link went
    assert not (hot / "hub" / "models--acme--tiny-moe").exists()
    assert doc["summary"]["freed_bytes"] == 8 + 8 + 5000
