"""The cold-twin report: one plain document (JSON as printed) from the results and the actions."""

from moetools.coldtwin.core import STRUCTURAL, VERIFIED


def artifact_entry(result, action):
    """One artifact of the JSON report: a Result and its Action (or None), sizes in bytes."""
    artifact = result.artifact
    return {
        "hot": artifact.path,
        "bytes": artifact.bytes,
        "status": result.status,
        "verify": result.level,
        "twin": result.twin.path if result.twin else None,
        "reason": result.reason,
        "reclaimable_bytes": 0 if action and action.done else result.reclaimable,
        "kind": artifact.kind,
        "files": len(artifact.files),
        "missing": list(artifact.missing),
        "last_used_ns": artifact.last_used_ns,
        "warnings": list(artifact.warnings),
        "action": action.as_dict() if action else None,
    }


def build_report(hot, cold, level, plan, results, actions, freed, problems, hot_ok=True, log_path=None):
    """The report document and its verdict `ok` (exit 0 when true).

    ok: with --free, SIZE was freed (or would be, in a dry run) and no action failed; otherwise every
    artifact has a twin that passed `level` (a structural one with `none`) and no action failed.
    An unreadable hot folder makes it false: an artifact in it could not be checked.
    """
    entries = [artifact_entry(result, actions.get(id(result))) for result in results]
    failed = any(entry["action"] and entry["action"]["error"] for entry in entries)
    ok_status = STRUCTURAL if level == "none" else VERIFIED
    if plan.free_bytes is not None:
        ok = freed >= plan.free_bytes and not failed
    else:
        ok = all(entry["status"] in (ok_status, VERIFIED) for entry in entries) and not failed
    return {
        "hot": hot,
        "cold": list(cold),
        "verify": level,
        "dry_run": plan.dry_run or not (plan.evict or plan.migrate_to or plan.free_bytes is not None),
        "artifacts": entries,
        "summary": {
            "artifacts": len(entries),
            "bytes": sum(entry["bytes"] for entry in entries),
            "verified": sum(entry["status"] in (VERIFIED, STRUCTURAL) for entry in entries),
            "reclaimable_bytes": sum(entry["reclaimable_bytes"] for entry in entries),
            "freed_bytes": freed,
            "free_target_bytes": plan.free_bytes,
        },
        "problems": list(problems),
        "log": log_path,
        "ok": ok and hot_ok,
    }
