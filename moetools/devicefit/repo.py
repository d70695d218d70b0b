"""device-fit for every GGUF set of a repo (hf://ORG/REPO): upstream llama.cpp's listing, one row per
quant, the fastest that fits first; the rows of the fork's listing (its divisions are fitted in run.py)."""

import shlex

import click

from moetools.devicefit import core, upstream, upstream_doc
from moetools.devicefit import devices as devicesmod
import moetools.devicefit.launch as launchmod
from moetools.devicefit.kv import force_flash_attn_off
from moetools.devicefit.render import llama_repo_tables
from moetools.errors import GGUFError, RemoteError, UsageError
from moetools.output import ShellLine, render, warn


def repo_row(gguf_set, model, doc):
    """One row of a repo plan: the set and what its fit says."""
    return {
        "set": gguf_set.name,
        "model": doc["model"],
        "file_type": doc_file_type(model),
        "shards": len(gguf_set.paths),
        "file_bytes": sum(header.file_size for header in model.headers),
        "resident_bytes": model.resident_bytes,
        "expert_bytes": model.expert_bytes,
        "verdict": doc["verdict"],
        "context": doc["context"],
        "slots": doc["slots"],
        "total_slots": doc["total_slots"],
        "cpu_moe_layers": doc["launch"]["llama"].get("cpu_moe_layers"),
        "tok_s": doc["tok_s"],
        "fetched_bytes": doc.get("fetched_bytes", 0),
        "requests": doc.get("requests", 0),
        "error": "",
    }


def doc_file_type(model):
    from moetools.gguf.constants import file_type_name

    return file_type_name(model.summary.file_type)


def fit_repo_llama(text, fetch, make_options, offload, ram_bytes, json_flag):
    """Every GGUF set of hf://ORG/REPO planned with upstream llama.cpp on the devices given: one row per
    quant with its size, fit, placement, context and tok/s, the fastest that fits first, and that set's
    launch line (headers only, as the fork's listing)."""
    from moetools.gguf import hub

    listing, sets = hub.repo_sets(text, fetch)
    rows = []
    for gguf_set in sets:
        try:
            with hub.open_set(listing, gguf_set, fetch) as model:
                facts = core.model_facts(model)
                options = make_options()
                forced = force_flash_attn_off(facts.architecture, options.kv)
                cpu = devicesmod.cpu_device(ram_bytes or 0, options.speed.ram_bw, options.speed.ram_bw_source)
                result = upstream.plan(facts, offload, cpu, options)
                doc = upstream_doc.result_doc(result, facts, model.path, launchmod.kv_flags(options.kv))
                placement = doc["placement"] or {}
                rows.append({"set": gguf_set.name, "model": model.path, "file_type": doc_file_type(model),
                             "shards": len(gguf_set.paths), "file_bytes": sum(header.file_size for header in model.headers),
                             "verdict": doc["verdict"], "context": doc["context"], "tok_s": doc["tok_s"],
                             "pp_tok_s": doc["pp_tok_s"],
                             "ngl": placement.get("ngl"), "n_cpu_moe": placement.get("n_cpu_moe"),
                             "args": doc["launch"]["llama"]["args"] if "launch" in doc else [],
                             "notes": ([forced] if forced else []) + doc["notes"],
                             "fetched_bytes": model.fetch_stats.get("fetched_bytes", 0) if model.fetch_stats else 0,
                             "requests": model.fetch_stats.get("requests", 0) if model.fetch_stats else 0, "error": ""})
        except RemoteError:
            raise
        except (GGUFError, UsageError) as err:  # a damaged set, a projector beside the quants: its row says why
            rows.append({"set": gguf_set.name, "verdict": "unreadable", "error": str(err), "shards": len(gguf_set.paths),
                         "file_bytes": gguf_set.total_bytes})
            warn(f"{gguf_set.name}: {err}")
    order = {"fits": 0, "unfittable": 1, "unreadable": 2}
    rows.sort(key=lambda row: (order[row["verdict"]], -row.get("tok_s", 0.0), row["set"]))
    best = rows[0] if rows and rows[0]["verdict"] == "fits" else None
    if best is not None:
        best["chosen"] = True
    launch = [f"the fastest set that fits, {best['set']}, as launched:", ShellLine("llama-server " + shlex.join(best["args"]))] \
        if best is not None else []
    render(rows, lambda: llama_repo_tables(text, listing, rows), json_flag, notes=launch)
    if best is None:
        click.get_current_context().exit(1)
