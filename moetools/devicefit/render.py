"""device-fit's tables and launch text: the ledger, the divisions and contexts, llama.cpp's per-device
tables, the repo listing, and --emit's text and JSON."""

import os
import shlex


import moetools.devicefit.launch as launchmod
from moetools.output import Table
from moetools.sizes import format_size


def _cell_summary(doc):
    parts = []
    for cache in doc["kv"]:
        if cache["kind"] == "recurrent":
            parts.append(f"recurrent {cache['layers']} layers x {cache['cells']} seq")
        elif cache["kind"].endswith("-state"):  # DeepSeek-V4's compressor states
            parts.append(f"{cache['kind']} {cache['layers']} layers x {cache['cells']} rows")
        else:
            parts.append(f"{cache['kind']} {cache['layers']} layers x {cache['cells']} cells")
    return "; ".join(parts) or "-"


def pool_notes(cache):
    """Why the fork's slots hold less than its budget: ResidencyCache gives each of its six possible
    pools a sixth of the budget, whatever the number of expert sizes the model has."""
    if not cache or not cache["pools"] or cache["pooled_bytes"] >= 0.9 * cache["budget_bytes"]:
        return []
    from moetools.devicefit.fork_cache import MAX_POOLS

    count = len(cache["pools"])
    return [f"the fork's cache gives each of its {MAX_POOLS} possible pools 1/{MAX_POOLS} of the "
            f"{format_size(cache['budget_bytes'])} budget (ggml-moe-residency.hpp ResidencyCache::ensure_pool); this model's "
            f"{count} expert matri{'x size uses' if count == 1 else 'x sizes use'} {format_size(cache['pooled_bytes'])} of it: "
            f"{cache['expert_slots']} slots"]


def footnoted(rows):
    """Rows whose last cell (a note sentence) becomes a letter, and the caption that spells the letters
    out: a sentence in the ninth column of a table folded it into a letter per line at 80 columns."""
    letters, out = {}, []
    for row in rows:
        note = row[-1]
        if note and note not in letters:
            letters[note] = chr(ord("a") + len(letters)) if len(letters) < 26 else str(len(letters) + 1)
        out.append(row[:-1] + [letters.get(note, "")])
    return out, "; ".join(f"{letter}: {note}" for note, letter in letters.items())


def tables(doc):
    """The terminal view of a device-fit document."""
    gib = format_size
    rows = [
        ["VRAM", gib(doc["vram_bytes"]), f"--vram {doc['vram_asked']}: decimal units" if doc.get("vram_asked") else ""],
        ["compute reserve", gib(doc["reserve_bytes"]),
         (f"compute buffer {gib(doc['compute_bytes'])} + margin {gib(doc['margin_bytes'])}"
          if doc["reserve_source"] == "compute+margin" else "--reserve")],
        ["resident weights", gib(doc["resident_bytes"]), doc["resident_source"]],
        ["KV cache", gib(doc["kv_bytes"]), f"context {doc['context']}: {_cell_summary(doc)} ({doc['ctk']}/{doc['ctv']})"],
    ]
    if doc["verdict"] == "unfittable":
        rows.append(["shortfall", gib(doc["shortfall_bytes"]), "short for the smallest division"])
    elif doc["experts_per_token"]:
        rows.append(["hot-expert budget", gib(doc["expert_budget_bytes"]),
                     f"{doc['slots']} of {doc['total_slots']} slots x {gib(doc['expert_bytes'])}"])
    else:
        rows.append(["unused", gib(doc["free_bytes"]), "dense model: no expert budget"])
    # the answer first: a long model name wraps the title's end, never the speed
    answer = ("unfittable" if doc["verdict"] == "unfittable"
              else f"context {doc['context']}, {doc['tok_s']:.2f} tok/s, verdict {doc['verdict']}")
    ledger = Table(f"device-fit (fork): {answer} — {os.path.basename(doc['model'])} on {gib(doc['vram_bytes'])}",
                   ["", "bytes", "detail"], rows, right_align=(1,))
    if doc["verdict"] != "unfittable":
        ledger.caption = (f"coverage {doc['coverage']:.3f} ({doc['coverage_source']}), {doc['experts_per_token']} experts/token "
                          f"-> {doc['tok_s']:.2f} tok/s" + (f"; assumes {doc['speed_assumes']}" if doc.get("speed_assumes") else ""))
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
    division_rows, footnotes = footnoted(division_rows)
    divisions = Table("Divisions (* = chosen)", ["tier", "resident", "context", "KV", "expert budget", "slots", "coverage", "tok/s", "note"],
                      division_rows, right_align=(1, 2, 3, 4, 5, 6, 7), caption=footnotes)
    result = [ledger, divisions]
    if doc.get("contexts"):
        result.append(Table("Contexts (* = chosen: the largest within 5% of the best speed)",
                            ["context", "fits as", "tier", "slots", "coverage", "tok/s"], [
            [("* " if row.get("chosen") else "  ") + str(row["context_asked"]), row["context"] if row["feasible"] else "-",
             row["tier"] or "-", row["slots"], f"{row['coverage']:.3f}", f"{row['tok_s']:.2f}"]
            for row in doc["contexts"]], right_align=(1, 3, 4, 5)))
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
    fork = launch["fork"]
    if not fork["command"]:
        return "# unfittable: no division of this card holds the model\n"
    # a runnable block (`sh`, or `eval` in the shell that should run the server): the exports, why a
    # variable is unset, then the server itself
    for name, value in fork["env"].items():
        lines.append(f"unset {name}" if value is None else f"export {name}={shlex.quote(str(value))}")
    lines += [f"# {note}" for note in fork["notes"]]
    lines.append(shlex.join(fork["command"]))
    return "\n".join(lines) + "\n"


def fork_line(launch):
    """The fork's launch as one runnable line for the default screen: `env -u ... A=1 ... llama-server ...`."""
    fork = launch["fork"]
    if not fork["command"]:
        return ""
    return "fork launch: env " + shlex.join(launchmod.shell_assignments(fork["env"]) + fork["command"])


def emit_doc(kind, doc, launch, settings):
    """The launch settings as JSON (`--emit llama|env --json`): the command as an argv list, so a script can
    run it without re-parsing shell text; `env` adds the fork's variables (null = unset), its -ot value
    and the notes on any variable left unset."""
    upstream = launch["llama"]
    if kind == "llama":
        return {"command": ["llama-server"] + list(upstream["args"]) if upstream["args"] else [],
                "override_tensor": upstream.get("override_tensor") or "", "note": upstream.get("note") or ""}
    fork = launch["fork"]
    if not fork["command"]:
        return {"env": {}, "command": [], "override_tensor": "", "notes": [],
                "note": "unfittable: no division of this card holds the model"}
    return {"env": dict(fork["env"]), "command": list(fork["command"]), "override_tensor": fork["override_tensor"],
            "notes": list(fork["notes"]), "note": ""}


def llama_tables(doc):
    """The terminal view of a --runtime llama document."""
    gib = format_size
    # one column per device, one row per buffer: ten columns of sizes never fit 80 characters, while a
    # column per device does for the usual one to four GPUs (and reads as llama.cpp's per-device log)
    fields = [
        ("kind", lambda device: device["kind"]),
        ("capacity", lambda device: gib(device["capacity_bytes"])),
        ("compute", lambda device: gib(device["compute_bytes"])),
        # the margin on a compute buffer llama.cpp has not measured for this architecture and placement
        *([("unmeasured", lambda device: (f"+{device['compute_margin_pct']}% {gib(device['compute_margin_bytes'])}"
                                          if device.get("compute_margin_pct") else "-"))]
          if any(device.get("compute_margin_pct") for device in doc["devices"]) else []),
        ("resident", lambda device: gib(device["resident_bytes"])),
        ("KV", lambda device: gib(device["kv_bytes"])),
        ("experts", lambda device: gib(device["expert_bytes"])),
        # under mmap the CPU's model buffer is the file span from its first to its last tensor
        *([("mmap span", lambda device: gib(device["mmap_span_bytes"]) if "mmap_span_bytes" in device else "-")]
          if any("mmap_span_bytes" in device for device in doc["devices"]) else []),
        ("margin", lambda device: gib(device["margin_bytes"])),
        *([("draft", lambda device: gib(device["draft_bytes"]))] if "draft" in doc else []),
        ("free", lambda device: gib(device["free_bytes"]) if device["free_bytes"] >= 0 else "-" + gib(-device["free_bytes"])),
        ("layers", lambda device: device["layers"] + (" +out" if device["output_layer"] else "")),
    ]
    rows = [[label] + [cell(device) for device in doc["devices"]] for label, cell in fields]
    # the answer first: a long model name wraps the title's end, never the speed
    title = "device-fit (llama.cpp): "
    title += ("unfittable" if doc["verdict"] == "unfittable" else
              f"context {doc['context']}, {doc['tok_s']:.2f} tok/s decode, {doc.get('pp_tok_s', 0):.0f} prompt")
    title += f" — {os.path.basename(doc['model'])}"
    ledger = Table(title, [""] + [device["name"] for device in doc["devices"]], rows,
                   right_align=tuple(range(1, len(doc["devices"]) + 1)))
    pct = max((device.get("compute_margin_pct", 0) for device in doc["devices"]), default=0)
    if pct:
        ledger.caption = (f"unmeasured: +{pct}% on each device's compute buffer ({doc.get('architecture', 'this architecture')}: no llama.cpp "
                          "measurement of this kind of placement; docs/device-fit.md)")
    alternatives = Table("Contexts (* = chosen)", ["context", "fits", "-ngl", "-ts", "CPU-expert layers", "GPU bytes", "tok/s",
                                                   "prompt"], [
        [("* " if alt["context"] == doc["context"] and doc["verdict"] != "unfittable" else "  ") + str(alt["context"]),
         "yes" if alt["fits"] else "no", alt["ngl"], ",".join(str(w) for w in alt["ts"] or []) or "-",
         len(alt["cpu_expert_layers"]), gib(alt["gpu_bytes"]), f"{alt['tok_s']:.2f}", f"{alt.get('pp_tok_s', 0):.0f}"]
        for alt in doc["alternatives"]], right_align=(2, 4, 5, 6, 7))
    if doc.get("batches"):
        alternatives.caption = "each context at -ub 512 -b 2048; the chosen one at the chosen -ub (Batch sizes)"
    return [ledger, alternatives, *batch_tables(doc), *placement_tables(doc), assumptions_table(doc)]


def placement_tables(doc):
    """Which layers' experts leave the GPUs: device-fit's two sides and llama.cpp --fit's choice."""
    rows = doc.get("placements") or []
    if not rows:
        return []
    body = [[("* " if row["chosen"] else "  ") + row["who"], row["cpu_expert_layers"] or "-", "yes" if row["fits"] else "no",
             f"{row['tok_s']:.2f}" if row["tok_s"] else "-", f"{row['pp_tok_s']:.0f}" if row["pp_tok_s"] else "-"]
            for row in rows]
    return [Table("Experts on the CPU (* = chosen)", ["placement", "CPU-expert layers", "fits", "tok/s", "prompt"], body,
                  right_align=(3, 4))]


def batch_tables(doc):
    """The -ub trade-off at the chosen context, when device-fit chose -ub (one row per -ub tried)."""
    rows = doc.get("batches") or []
    if not rows:
        return []
    body = [[("* " if row["chosen"] else "  ") + str(row["ubatch"]), row["batch"], "yes" if row["fits"] else "no",
             format_size(row["gpu_compute_bytes"]), row["cpu_expert_layers"], f"{row['tok_s']:.2f}", f"{row['pp_tok_s']:.0f}",
             f"{row['request_s']:.1f}"]
            for row in rows]
    return [Table(f"Batch sizes at context {doc['context']} (* = chosen, --prefer {doc.get('prefer', 'balanced')})",
                  ["-ub", "-b", "fits", "GPU compute", "CPU-expert layers", "tok/s", "prompt", "request s"], body,
                  right_align=(0, 1, 3, 4, 5, 6, 7),
                  caption=f"prompt: tok/s over a {doc.get('prompt_tokens', 0)}-token prompt; request: seconds for "
                          "4096 prompt + 512 generated tokens")]


def assumptions_table(doc):
    """What the tok/s figures rest on, each with where it came from."""
    rows = [[row["figure"], row["value"], row["source"]] for row in doc.get("speed_assumptions") or []]
    return Table("Speed rests on", ["figure", "value", "from"], rows)


def repo_tables(text, listing, rows):
    gib = format_size
    body = []
    for row in rows:
        if row["verdict"] == "unreadable":
            body.append([row["set"], "-", gib(row["file_bytes"]), "-", "-", "unreadable", "-", "-", "-"])
            continue
        if row["verdict"] == "unfittable":
            experts = "-"
        elif row["cpu_moe_layers"] and row["verdict"] == "native":
            experts = f"{row['slots']} slots; upstream: {row['cpu_moe_layers']} CPU-expert layers"
        else:
            experts = f"{row['slots']} of {row['total_slots']} slots"
        body.append([row["set"], row["file_type"] or "-", gib(row["file_bytes"]), gib(row["resident_bytes"]),
                     gib(row["expert_bytes"]), row["verdict"], row["context"] if row["verdict"] != "unfittable" else "-",
                     experts, f"{row['tok_s']:.2f}" if row["verdict"] != "unfittable" else "-"])
    table = Table(f"device-fit: every GGUF set in {text} (commit {listing.commit[:12]})",
                  ["set", "type", "size", "resident", "experts", "verdict", "context", "hot-expert slots / CPU experts", "tok/s"],
                  body, right_align=(2, 3, 4, 6, 8))
    table.caption = (f"headers read: {gib(sum(row.get('fetched_bytes', 0) for row in rows))} in "
                     f"{sum(row.get('requests', 0) for row in rows)} requests")
    return [table]


RUNTIME_NAMES = {"llama": "llama.cpp", "fork": "the streaming fork"}


def runtimes_table(rows, model):
    """auto: one line per runtime for the same model and card, the faster marked *; the title is the
    answer (which runtime, its tok/s and context)."""
    best = next((row for row in rows if row["best"]), None)
    answer = ("neither runtime fits" if best is None else
              f"{RUNTIME_NAMES[best['runtime']]} is faster here, {best['tok_s']:.2f} tok/s at context {best['context']}")
    body = [[("* " if row["best"] else "  ") + row["runtime"], "yes" if row["fits"] else "no",
             row["context"] if row["fits"] else "-", f"{row['tok_s']:.2f}" if row["fits"] else "-", row["why"]]
            for row in rows]
    return Table(f"device-fit: {answer} — {os.path.basename(model)}", ["runtime", "fits", "context", "tok/s", "why"],
                 body, right_align=(2, 3), caption="* = faster here; --runtime llama or fork plans that one alone")


def llama_repo_tables(text, listing, rows):
    """Every GGUF set of a repo planned with upstream llama.cpp: one row per quant, the fastest that fits
    first."""
    gib = format_size
    body = []
    for row in rows:
        if row["verdict"] == "unreadable":
            body.append([row["set"], "-", gib(row["file_bytes"]), "unreadable", "-", "-", "-", "-"])
            continue
        fits = row["verdict"] == "fits"
        placement = "-" if not fits else f"-ngl {row['ngl']}" + (f" --n-cpu-moe {row['n_cpu_moe']}" if row["n_cpu_moe"] else "")
        body.append([row["set"], row["file_type"] or "-", gib(row["file_bytes"]), row["verdict"],
                     row["context"] if fits else "-", placement, f"{row['tok_s']:.2f}" if fits else "-",
                     f"{row['pp_tok_s']:.0f}" if fits else "-"])
    table = Table(f"device-fit (llama.cpp): every GGUF set in {text} (commit {listing.commit[:12]})",
                  ["set", "type", "size", "verdict", "context", "placement", "tok/s", "prompt"], body, right_align=(2, 4, 6, 7))
    table.caption = (f"headers read: {gib(sum(row.get('fetched_bytes', 0) for row in rows))} in "
                     f"{sum(row.get('requests', 0) for row in rows)} requests")
    return [table]
