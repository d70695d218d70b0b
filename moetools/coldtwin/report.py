"""The cold-twin report: one plain document (JSON as printed) from the results and the actions.

Sizes are counted once per file identity (device, inode): two Hugging Face revisions that share a
blob, or a file reached by two names, add its bytes to the totals once. An artifact's own `bytes`
is its size on disk, shared files included (what `hf cache scan` calls a revision's size).
"""

from moetools.coldtwin.core import QUICK_MATCH, STRUCTURAL, VERIFIED


def artifact_entry(result, action, reclaimable):
    """One artifact of the JSON report: a Result, its Action (or None) and the bytes its eviction
    would free that no other artifact's does, in bytes."""
    artifact = result.artifact
    entry = {
        "hot": artifact.path,
        "bytes": artifact.bytes,
        "status": result.status,
        "verify": result.level,
        "twin": result.twin.path if result.twin else None,
        "reason": result.reason,
        "reclaimable_bytes": 0 if action and action.done else reclaimable,
        "kind": artifact.kind,
        "files": len(artifact.files),
        "missing": list(artifact.missing),
        "last_used_ns": artifact.last_used_ns,
        "warnings": list(artifact.warnings),
        "action": action.as_dict() if action else None,
    }
    if artifact.hf is not None:
        entry["hf"] = artifact.hf.as_dict()
    return entry


def reclaimable_bytes(results):
    """[bytes] per result: each hot file counts once, for the first result holding it, and only when
    every result holding it has a twin verified in full (a blob another revision still needs without
    such a twin cannot be freed)."""
    holders = {}
    for position, result in enumerate(results):
        for member in result.artifact.files:
            holders.setdefault(member.identity, []).append(position)
    per_result = [0] * len(results)
    sizes = {member.identity: member.size for result in results for member in result.artifact.files}
    for identity, positions in holders.items():
        if all(results[position].reclaimable for position in positions):
            per_result[positions[0]] += sizes[identity]
    return per_result


def unique_bytes(results):
    """Bytes of the distinct hot files (by identity) of `results`."""
    sizes = {member.identity: member.size for result in results for member in result.artifact.files}
    return sum(sizes.values())


def build_report(hot, cold, level, plan, results, actions, freed, problems, hot_ok=True, log_path=None, hf_repos=()):
    """The report document and its verdict `ok` (exit 0 when true).

    ok: with --free, SIZE was freed (or would be, in a dry run) and no action failed; otherwise every
    artifact has a twin that passed `level` (or a stronger one) and no action failed. An unreadable
    hot folder makes it false: an artifact in it could not be checked.
    """
    shares = reclaimable_bytes(results)
    entries = [artifact_entry(result, actions.get(id(result)), share) for result, share in zip(results, shares)]
    failed = any(entry["action"] and entry["action"]["error"] for entry in entries)
    passing = {"none": (STRUCTURAL, QUICK_MATCH, VERIFIED), "quick": (QUICK_MATCH, VERIFIED), "full": (VERIFIED,)}[level]
    if plan.free_bytes is not None:
        ok = freed >= plan.free_bytes and not failed
    else:
        ok = all(entry["status"] in passing for entry in entries) and not failed
    return {
        "hot": hot,
        "cold": list(cold),
        "verify": level,
        "dry_run": plan.dry_run or not (plan.evict or plan.migrate_to or plan.free_bytes is not None),
        "artifacts": entries,
        "hf_repos": list(hf_repos),
        "summary": {
            "artifacts": len(entries),
            "bytes": unique_bytes(results),
            "twinned": sum(entry["status"] in passing for entry in entries),
            "verified_full": sum(entry["status"] == VERIFIED for entry in entries),
            "quick_match": sum(entry["status"] == QUICK_MATCH for entry in entries),
            "structural": sum(entry["status"] == STRUCTURAL for entry in entries),
            "reclaimable_bytes": sum(entry["reclaimable_bytes"] for entry in entries),
            "freed_bytes": freed,
            "free_target_bytes": plan.free_bytes,
        },
        "problems": list(problems),
        "log": log_path,
        "ok": ok and hot_ok,
    }

