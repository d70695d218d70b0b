"""A rerun of a killed `quantize --install` finishes what it started (issue 32): the tiers this very
command already wrote and that still verify are kept, the others written again. Split from core.py."""

import os

from moetools.formats import resident_manifest
from moetools.quantize.core import _restore_errors, _result, refuse_existing


def resume_finished(model, plans, threads=None):
    """Sort a run's tiers against what is already in their folder (issue 32: a killed
    `quantize --install` is finished by rerunning it). Returns (to_write, kept, redone):
    `kept` [(index, TierResult)] are tiers this very command wrote (the manifest's run_key is the key of
    this command's every tier, staged.run_key) whose GGUF still has the size and xxh3 its manifest records: kept as they are, not
    rewritten; `redone` names tiers of this plan that do not verify (written again). Any other existing
    output (a --full tier, another model's or mix's tier, a file moetools did not write) is an
    OutputError unless --force."""
    from moetools.quantize import staged

    command_key = staged.run_key(model, plans)
    to_write, kept, redone = [], [], []
    for index, plan in enumerate(plans):
        plan.command_key = command_key
        present = [path for path in (*plan.gguf_paths, plan.manifest_path) if path and os.path.lexists(path)]
        if not present:
            to_write.append(plan)
            continue
        manifest = _own_manifest(plan)
        if manifest is None:
            refuse_existing([plan])
        extra = manifest.extra
        try:
            verified = (os.path.isfile(plan.gguf_path) and os.path.getsize(plan.gguf_path) == extra.get("gguf_bytes")
                        and staged.file_digest(plan.gguf_path) == extra.get("gguf_xxh3"))
        except OSError:
            verified = False
        if verified:
            kept.append((index, _kept_result(model, plan, extra["tensor_errors"], threads)))
        else:
            redone.append(plan.tier)
            to_write.append(plan)
    return to_write, kept, redone


def _own_manifest(plan):
    """The tier's manifest when this same command wrote it (its run_key), else None."""
    if not plan.manifest_path or not os.path.isfile(plan.manifest_path):
        return None
    try:
        manifest = resident_manifest.read_manifest(plan.manifest_path)
    except Exception:  # noqa: BLE001 -- unreadable: not verifiably ours, so it needs --force
        return None
    if manifest.extra.get("run_key") != plan.command_key or not isinstance(manifest.extra.get("tensor_errors"), list):
        return None
    return manifest


def _kept_result(model, plan, tensor_errors, threads):
    from moetools.quantize.kernels import default_threads

    plan.errors = {}
    _restore_errors(plan, {"errors": tensor_errors})
    return _result(model, plan, threads=threads or default_threads())
