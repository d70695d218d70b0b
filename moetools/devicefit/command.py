"""`moetools device-fit MODEL --vram 32G`: how one GPU's memory divides between compute reserve,
resident weights, KV cache and the hot-expert cache, how fast it will decode, and how to launch it.

    moetools device-fit k3-00001-of-00014.gguf --vram 32G
    moetools device-fit k3.gguf --vram 32G --tiers device-fit/k3 --coverage curve.json --plan k3.plan.json
    moetools trace-tail run.trace --curve --json | moetools device-fit k3.gguf --vram 32G --coverage -
    eval "$(moetools device-fit k3.gguf --vram 32G --emit env --plan k3.plan.json)"
"""

import os
import re
import shlex

import click

from moetools.devicefit import core
from moetools.devicefit.kv import CACHE_TYPES, KVSettings
from moetools.errors import UsageError
from moetools.output import Table, render, warn
from moetools.sizes import format_size, parse_size

_FLOOR_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(ms|s|us)?\s*$", re.IGNORECASE)


def parse_rate(text):
    """`25GB/s` (decimal), `25G` (GiB), raw bytes per second -> bytes/s (> 0)."""
    value = parse_size(re.sub(r"/s\s*$", "", str(text), flags=re.IGNORECASE))
    if value <= 0:
        raise UsageError(f"--h2d {text!r} must be a positive rate")
    return float(value)


def parse_floor(text):
    """`10ms`, `0.01s`, `10` (milliseconds) -> seconds (>= 0)."""
    match = _FLOOR_RE.match(str(text))
    if not match:
        raise UsageError(f"cannot parse time {text!r} (examples: 10ms, 0.01s, 10)")
    number, unit = float(match[1]), (match[2] or "ms").lower()
    return number * {"ms": 1e-3, "s": 1.0, "us": 1e-6}[unit]


def _size_option(name, text):
    if text is None:
        return None
    try:
        return parse_size(text)
    except UsageError as err:
        raise UsageError(f"{name}: {err}") from None


def _cell_summary(doc):
    parts = []
    for cache in doc["kv"]:
        if cache["kind"] == "recurrent":
            parts.append(f"recurrent {cache['layers']} layers x {cache['cells']} seq")
        else:
            parts.append(f"{cache['kind']} {cache['layers']} layers x {cache['cells']} cells")
    return "; ".join(parts) or "-"


def tables(doc):
    """The terminal view of a device-fit document."""
    gib = format_size
    rows = [
        ["VRAM", gib(doc["vram_bytes"]), ""],
        ["compute reserve", gib(doc["reserve_bytes"]), ""],
        ["resident weights", gib(doc["resident_bytes"]), doc["resident_source"]],
        ["KV cache", gib(doc["kv_bytes"]), f"context {doc['context']}: {_cell_summary(doc)} ({doc['ctk']}/{doc['ctv']})"],
    ]
    if doc["verdict"] == "unfittable":
        rows.append(["shortfall", gib(doc["shortfall_bytes"]), f"{doc['shortfall_bytes']} bytes short for the smallest division"])
    elif doc["experts_per_token"]:
        rows.append(["hot-expert budget", gib(doc["expert_budget_bytes"]),
                     f"{doc['slots']} of {doc['total_slots']} slots x {gib(doc['expert_bytes'])}"])
    else:
        rows.append(["unused", gib(doc["free_bytes"]), "dense model: no expert budget"])
    ledger = Table(f"device-fit: {os.path.basename(doc['model'])} on {gib(doc['vram_bytes'])} — verdict {doc['verdict']}",
                   ["", "bytes", "detail"], rows, right_align=(1,))
    if doc["verdict"] != "unfittable":
        ledger.caption = (f"coverage {doc['coverage']:.3f} ({doc['coverage_source']}), {doc['experts_per_token']} experts/token "
                          f"-> {doc['tok_s']:.2f} tok/s")
    division_rows = []
    for division in doc["divisions"]:
        chosen = division["tier"] == doc["resident_source"] and doc["verdict"] != "unfittable"
        division_rows.append([
            ("* " if chosen else "  ") + division["tier"], gib(division["resident_bytes"]),
            division["context"] if division["feasible"] else "-",
            gib(division["kv_bytes"]) if division["feasible"] else "-",
            gib(division["expert_budget_bytes"]) if division["feasible"] else "-",
            division["slots"] if division["feasible"] else "-",
            f"{division['coverage']:.3f}" if division["feasible"] else "-",
            (f"{division['tok_s']:.2f}" + (" (measured)" if division["observations"] else "")) if division["feasible"] else "-",
            division["note"] or ("short by " + gib(division["shortfall_bytes"]) if not division["feasible"] else ""),
        ])
    divisions = Table("Divisions (* = chosen)", ["tier", "resident", "context", "KV", "expert budget", "slots", "coverage", "tok/s", "note"],
                      division_rows, right_align=(1, 2, 3, 4, 5, 6, 7))
    result = [ledger, divisions]
    if doc.get("host"):
        host = doc["host"]
        result.append(Table("Host RAM", ["", "bytes"], [
            ["RAM", gib(host["ram_bytes"])], ["OS reserve", gib(host["os_reserve_bytes"])],
            ["mapped model", gib(host["mmap_bytes"])], ["host expert cache", f"{gib(host['host_cache_bytes'])} ({host['host_slots']} slots)"],
        ], right_align=(1,)))
    return result


def emit_text(kind, doc, launch, settings):
    """Launch settings as shell text: upstream flags (`llama`) or the fork's exports (`env`)."""
    lines = []
    upstream = launch["llama"]
    if kind == "llama":
        if not upstream["args"]:
            return f"# {upstream['note']}\n"
        if upstream["note"]:
            lines.append(f"# {upstream['note']}")
        lines.append("llama-server " + shlex.join(upstream["args"]))
        if upstream.get("override_tensor"):
            lines.append("# the same placement with -ot:")
            lines.append("#   -ot " + shlex.quote(upstream["override_tensor"]))
        return "\n".join(lines) + "\n"
    env = launch["env"]
    if not env:
        return "# unfittable: no division of this card holds the model\n"
    for name, value in env.items():
        lines.append(f"unset {name}" if value is None else f"export {name}={shlex.quote(str(value))}")
    lines.append("# then: llama-server " + shlex.join(core.server_args(doc["model"], doc["context"], settings)))
    return "\n".join(lines) + "\n"


@click.command("device-fit")
@click.argument("model_path", metavar="MODEL", type=click.Path(dir_okay=False))
@click.option("--vram", required=True, metavar="SIZE", help="The card's memory: 32G (GiB), 32GB (decimal), 32GiB, or bytes.")
@click.option("--reserve", metavar="SIZE", help="Compute reserve (default max(2 GiB, VRAM/10)).")
@click.option("--ctx", type=int, metavar="N", help="Context wanted (default: the training context); squeezed in steps of 256 to fit.")
@click.option("--min-ctx", type=int, default=4096, show_default=True, metavar="N", help="Never squeeze the context below this.")
@click.option("--ctk", type=click.Choice(CACHE_TYPES), default="f16", show_default=True, help="K cache type.")
@click.option("--ctv", type=click.Choice(CACHE_TYPES), default="f16", show_default=True, help="V cache type.")
@click.option("--ubatch", type=int, default=512, show_default=True, help="Physical batch (-ub).")
@click.option("--batch", type=int, default=2048, show_default=True, help="Logical batch (-b).")
@click.option("--parallel", type=int, default=1, show_default=True, metavar="N", help="Sequences (-np).")
@click.option("--kv-unified", is_flag=True, help="One KV stream shared by all sequences (-kvu).")
@click.option("--swa-full", is_flag=True, help="Full-size cache for sliding-window layers (--swa-full).")
@click.option("--flash-attn/--no-flash-attn", default=True, show_default=True, help="Flash attention (-fa); off pads and transposes V.")
@click.option("--tiers", "tiers_dir", type=click.Path(file_okay=False),
              help="Folder of *.resident.json tiers, searched first; the daemon's <storage root>/device-fit/<slug>/, "
                   "device-fit/<stem>/ beside the model and the model's folder are searched too.")
@click.option("--storage-root", metavar="DIR", type=click.Path(file_okay=False),
              help="The serving daemon's storage root for tier discovery (default: $CONTINUUM_STORAGE_PATH, else ~/.continuum).")
@click.option("--model-id", metavar="ID", help="The model id the daemon serves this model as (default: the file name's stem).")
@click.option("--coverage", "coverage_path", metavar="FILE", help="Coverage curve from `trace-tail --curve` (- for stdin).")
@click.option("--coverage-policy", default="decay_bandit", show_default=True, help="Which policy's curve predicts the hit ratio.")
@click.option("--observations", "observations_path", metavar="FILE", help='Measured runs, JSON lines {"tier", "tok_s", "tokens"} (- for stdin).')
@click.option("--h2d", default="25GB/s", show_default=True, help="Host-to-device bandwidth (25GB/s decimal, 25G GiB).")
@click.option("--floor", "floor_text", default="10ms", show_default=True, help="Per-token time that no cache removes (10ms, 0.01s).")
@click.option("--ram", metavar="SIZE", help="Host RAM: also size the host expert cache net of the mmap footprint.")
@click.option("--os-reserve", default="4G", show_default=True, metavar="SIZE", help="RAM kept for the OS with --ram.")
@click.option("--container", type=click.Path(file_okay=False), help="Expert container folder (GGML_MOE_CONTAINER) the fork streams from.")
@click.option("--plan", "plan_path", type=click.Path(dir_okay=False), help="Write the plan file (GGML_MOE_PLAN_FILE) here.")
@click.option("--emit", type=click.Choice(["llama", "env"]), help="Print launch settings instead of the ledger: upstream flags or the fork's exports.")
@click.option("--json", "json_flag", is_flag=True, help="Print JSON (the default when stdout is not a terminal).")
def device_fit_command(model_path, vram, reserve, ctx, min_ctx, ctk, ctv, ubatch, batch, parallel, kv_unified, swa_full,
                       flash_attn, tiers_dir, storage_root, model_id, coverage_path, coverage_policy, observations_path, h2d, floor_text, ram,
                       os_reserve, container, plan_path, emit, json_flag):
    """Divide one GPU between compute reserve, resident weights, KV cache and hot experts.

    MODEL is a .gguf file or any shard of a split model. Exit 0 when a division fits, 1 when the model is
    unfittable on this card (the shortfall is reported), 2 for bad input.
    """
    if coverage_path == "-" and observations_path == "-":
        raise UsageError("--coverage and --observations cannot both read stdin")
    options = core.FitOptions(
        vram=_size_option("--vram", vram),
        reserve=_size_option("--reserve", reserve),
        ctx=ctx,
        min_ctx=min_ctx,
        kv=KVSettings(ctk=ctk, ctv=ctv, ubatch=ubatch, batch=batch, n_seq=parallel, unified=kv_unified,
                      swa_full=swa_full, flash_attn=flash_attn),
        h2d_bytes_per_s=parse_rate(h2d),
        floor_s=parse_floor(floor_text),
        ram=_size_option("--ram", ram),
        os_reserve=_size_option("--os-reserve", os_reserve),
        container=container or "",
    )
    from moetools.gguf import open_model

    with open_model(model_path) as model:
        facts = core.model_facts(model)
    warnings = []
    from moetools.devicefit.discovery import discover_tiers
    from moetools.formats.storage import device_fit_dir

    storage_dir = device_fit_dir(model_id or core.model_stem(model_path), storage_root)
    tiers, tier_warnings = discover_tiers(model_path, facts, tiers_dir, storage_dir)
    warnings += tier_warnings
    curve = None
    if coverage_path:
        from moetools.formats.curve import read_curve

        curve = read_curve(coverage_path)
    coverage, coverage_warnings = core.coverage_model(curve, coverage_policy, facts, coverage_path or "<curve>")
    warnings += coverage_warnings
    observations = []
    if observations_path:
        from moetools.formats.jsonio import display_name, read_text

        observations = core.parse_observations(read_text(observations_path, "observations"), display_name(observations_path))
    result = core.fit(facts, tiers, options, coverage, observations)
    launch = {"llama": core.llama_launch(result), "env": core.env_launch(result, plan_path or "")}
    doc = core.to_doc(result, launch)
    doc["warnings"] = warnings + doc["warnings"]
    for message in doc["warnings"]:
        warn(message)
    if plan_path:
        if result.chosen is None:
            warn(f"unfittable: no plan written to {plan_path}")
        else:
            from moetools.formats.plan import update_plan

            host, device, tier = core.plan_budget(result)
            if not result.host:
                warn("no --ram: the plan's host budget_bytes is 0 (no pins)")
            # device-fit owns the budgets and the tier; an existing pin_list (trace-tail's) and any
            # other key are kept. A new plan starts with an empty pin list.
            update_plan(plan_path, "device-fit", {"budget_bytes": host, "device_budget_bytes": device, "resident_tier": tier})
            doc["plan"] = os.path.abspath(plan_path)
    if emit:
        click.echo(emit_text(emit, doc, launch, options.kv), nl=False)
    else:
        render(doc, lambda: tables(doc), json_flag, notes=doc["notes"])
    if result.chosen is None:
        click.get_current_context().exit(1)
