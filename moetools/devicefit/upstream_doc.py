"""The document of an upstream (--runtime llama) plan: what `device-fit --json` prints for it, each
alternative's ledger, speeds (decode and prompt) and the assumptions they rest on."""

from moetools.devicefit import launch as launchmod
from moetools.devicefit import placement as placemod
from moetools.devicefit import speed as speedmod
from moetools.devicefit.placement import CPU
from moetools.devicefit.upstream import mapped_spans, server_args

def plan_doc(plan_):
    placement = plan_.placement
    doc = _plan_doc(plan_, placement)
    if placement.sources is not None:  # the user's overrides, in llama.cpp's (command-line) order
        doc["overrides"] = [kind if value is None else f"{kind} {value}" for kind, value in placement.sources]
    return doc


def _plan_doc(plan_, placement):
    return {
        "context": plan_.context,
        "depth": plan_.depth,
        "fits": plan_.fits,
        "tok_s": round(plan_.tok_s, 4),
        "pp_tok_s": round(plan_.pp_tok_s, 2),
        "prompt_tokens": plan_.prompt_tokens,
        "ubatch": plan_.n_ubatch,
        "ngl": placement.ngl,
        "ts": placement.ts,
        "n_cpu_moe": placement.n_cpu_moe,
        "gpu_bytes": plan_.gpu_bytes,
        "devices": [share.to_doc() for share in plan_.shares],
        "seconds_per_token": {name: round(value, 6) for name, value in plan_.breakdown.items()},
        "prompt_seconds": {name: round(value, 6) for name, value in plan_.pp_breakdown.items()},
        "cpu_expert_layers": placemod.cpu_expert_layers(placement),
        "partial_layers": {str(block): sorted(part for part, home in homes.items() if home == CPU)
                           for block, homes in placement.expert_device.items()
                           if CPU in homes.values() and len(set(homes.values())) > 1},
        "cpu_layers": [il for il, home in enumerate(placement.layer_device[:-1]) if home == CPU],
    }


def _devices_doc(facts, result):
    """The ledger's devices; under mmap the CPU's also carries the file span llama.cpp maps as its model
    buffer (`mmap_span_bytes`, and `mmap_spans` [shard, first, end] per shard) beside its tensor bytes."""
    plan_ = result.chosen or result.alternatives[0]
    devices = [share.to_doc() for share in plan_.shares]
    if result.mmap:
        spans = mapped_spans(facts.layers, plan_.placement, result.tensor_homes)
        devices[-1]["mmap_span_bytes"] = sum(end - first for _, first, end in spans)
        devices[-1]["mmap_spans"] = [list(span) for span in spans]
    return devices


def _batch_row(ubatch, batch, plan_, chosen):
    from moetools.devicefit.batching import request_seconds

    return {"ubatch": ubatch, "batch": batch, "fits": plan_.fits, "chosen": chosen,
            "gpu_compute_bytes": sum(share.compute_bytes for share in plan_.shares if share.device.kind != "cpu"),
            "cpu_expert_layers": len(placemod.cpu_expert_layers(plan_.placement)),
            "tok_s": round(plan_.tok_s, 4), "pp_tok_s": round(plan_.pp_tok_s, 2),
            "request_s": round(request_seconds(plan_.tok_s, plan_.pp_tok_s), 3)}


def result_doc(result, facts, model_path, kv_flags):
    chosen = result.chosen
    doc = {
        "runtime": "llama",
        "model": model_path,
        "architecture": facts.architecture,
        "verdict": "unfittable" if chosen is None else "fits",
        "context": chosen.context if chosen else 0,
        "context_train": facts.shape.context_train,
        "tok_s": round(chosen.tok_s, 4) if chosen else 0.0,
        "pp_tok_s": round(chosen.pp_tok_s, 2) if chosen else 0.0,
        "devices": _devices_doc(facts, result),
        "placement": plan_doc(chosen) if chosen else None,
        "alternatives": [plan_doc(candidate) for candidate in result.alternatives],
        "unfittable": result.unfittable,
        "prompt_tokens": (chosen or result.alternatives[0]).prompt_tokens,
        "speed_assumptions": speedmod.assumptions(result.speed, [share.device for share in (chosen or result.alternatives[0]).shares]),
        "notes": list(result.notes),
        "warnings": list(result.warnings),
    }
    if result.placements:
        doc["placements"] = result.placements
    if result.batches:
        doc["prefer"] = result.prefer
        kv = result.kv
        doc["batches"] = [_batch_row(ubatch, batch, plan_, chosen is not None and (ubatch, batch) == (kv.ubatch, kv.batch))
                          for ubatch, batch, plan_ in result.batches]
    if chosen:
        # the first shard, whichever the user named (as the fork's launch line): llama.cpp finds the others
        flags = launchmod.kv_flags(result.kv) if result.kv is not None else kv_flags
        doc["launch"] = {"llama": {"args": server_args(facts.path or model_path, result, flags)}}
    if result.draft is not None:
        draft = result.draft
        shares = (chosen or result.alternatives[0]).draft_shares or {}
        doc["draft"] = {"spec_type": draft.spec_type, "model": draft.path, "architecture": draft.facts.architecture,
                        "ngl": draft.ngl,
                        "ctk": draft.kv.ctk, "ctv": draft.kv.ctv,
                        "placed_on": None if draft.devices is None else [result.devices[i].name for i in draft.devices],
                        "devices": [{"name": share.device.name, "resident_bytes": share.resident_bytes,
                                     "expert_bytes": share.expert_bytes, "kv_bytes": share.kv_bytes,
                                     "compute_bytes": share.compute_bytes, "layers": placemod.ranges_text(share.layers)}
                                    for share in shares.values()]}
        if draft.host_bytes:  # a DFlash draft: output-buffer rows in host memory (in the CPU entry's compute_bytes)
            doc["draft"]["host_bytes"] = draft.host_bytes
            doc["draft"]["target_layers"] = list(draft.target_layers)
    return doc
