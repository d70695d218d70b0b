"""device-fit's orchestration: from the parsed option records to a plan, for one model (fork or upstream
llama.cpp, with drafts) or every GGUF set of a repo; rendering through devicefit/render.py."""

import os
import re
import shlex

import click

from moetools.devicefit import core, upstream
from moetools.devicefit import devices as devicesmod  # `devices` is device_fit's option record
from moetools.devicefit import draft as draftmod
import moetools.devicefit.launch as launchmod
from moetools.devicefit.options import overrides_of
from moetools.devicefit.speed import SpeedSettings
from moetools.devicefit.upstream import UpstreamOptions
from moetools.devicefit.kv import BORROWED_KV_ARCHES, RS_ROLLBACK_ARCHES, KVSettings, force_flash_attn_off, server_outputs
from moetools.errors import GGUFError, RemoteError, UsageError
from moetools.devicefit.render import emit_doc, emit_text, llama_tables, pool_notes, repo_tables, tables
from moetools.gguf.locator import is_repo
from moetools.output import print_json, render, warn
from moetools.sizes import format_size, parse_size

_FLOOR_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(ms|s|us)?\s*$", re.IGNORECASE)


def parse_rate(text):
    """`25GB/s` (decimal), `25G` (GiB), raw bytes per second -> bytes/s (> 0; a bare number under
    1 MiB/s is a missing unit)."""
    return float(devicesmod.parse_rate(text, "--h2d"))


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


def decimal_vram_notes(vram):
    """A note per --vram part given in a decimal unit (`32GB`): its GiB value, since GPU memory is
    sold and reported in GiB and `32GB` is 2.2 GiB less than `32G`."""
    from moetools.sizes import DECIMAL_UNIT, describe_size

    if vram is None or vram.strip().lower() == "auto":
        return []
    notes = []
    for part in (piece.strip() for piece in vram.split(",")):
        if DECIMAL_UNIT.search(part):
            notes.append(f"--vram {describe_size(part, parse_size(part))}: {part} is decimal (10^9 bytes per GB); "
                         f"{part[:-1]} would mean {format_size(parse_size(part[:-1]))}")
    return notes


def _offload_devices(vram, gpu_text, vram_bw, rpc_specs, rpc_bw):
    """(local GPUs, RPC devices) from the device options."""
    names = devicesmod.parse_gpu_list(gpu_text) if gpu_text else None
    bandwidths = devicesmod.parse_rate_list(vram_bw, "--vram-bw") if vram_bw else None
    detected = sizes = None
    if vram is not None and vram.strip().lower() == "auto":
        detected = devicesmod.detect_gpus()
    elif vram is not None:
        sizes = devicesmod.parse_size_list(vram, "--vram")
    gpus = devicesmod.build_gpus(sizes, names, bandwidths, detected)
    rpcs = devicesmod.build_rpc(list(rpc_specs), devicesmod.parse_rate_list(rpc_bw, "--rpc-bw") if rpc_bw else None)
    return gpus, rpcs


def _refuse_a_tier(model_path, metadata):
    """A resident-only tier holds no routed experts: planning it as a dense model would be wrong."""
    from moetools.formats.tier_gguf import tier_identity

    tier = tier_identity(metadata)
    if tier:
        raise UsageError(f"{model_path}: a resident-only tier ({tier['tier']}) of {tier['source_model']} written by "
                         f"moetools quantize, not a model to plan: plan {tier['source_model']} (device-fit finds its "
                         f"tiers beside it, or give --tiers {os.path.dirname(os.path.abspath(model_path))})")


def _ram_option(text):
    if text is None:
        return None
    if text.strip().lower() == "auto":
        found = devicesmod.host_ram_bytes()
        if not found:
            raise UsageError("--ram auto: this machine's RAM cannot be read; give --ram SIZE")
        return found
    from moetools.sizes import parse_capacity

    return parse_capacity(text, "--ram")


def _llama_speed(floor_text=None, ram_bw=None, disk_bw="3GB/s", threads=None):
    """--runtime llama's speed settings from its options (the defaults when none are given)."""
    speed = SpeedSettings()
    if ram_bw is not None and ram_bw.strip().lower() == "auto":
        speed.ram_bw = devicesmod.measure_copy_bandwidth()
        speed.ram_bw_source = "measured copy bandwidth of this host (--ram-bw auto)"
    elif ram_bw is not None:
        speed.ram_bw = devicesmod.parse_rate(ram_bw, "--ram-bw")
        speed.ram_bw_source = "--ram-bw"
    speed.disk_bw = devicesmod.parse_rate(disk_bw, "--disk-bw")
    if floor_text is not None:
        speed.floor_s = parse_floor(floor_text)
    if threads is not None and threads < 1:
        raise UsageError("--threads must be at least 1")
    speed.threads = threads or os.cpu_count() or 1
    return speed


def _llama_options(settings, *, ctx, reserve, margin, ngl, ts_text, n_cpu_moe, main_gpu, depth, floor_text, ram_bw, disk_bw,
                   threads, os_reserve, overrides=None):
    speed = _llama_speed(floor_text, ram_bw, disk_bw, threads)
    ts = None
    if ts_text is not None:
        try:
            ts = [float(part) for part in ts_text.split(",")]
        except ValueError:
            raise UsageError(f"-ts {ts_text!r}: expected comma-separated numbers such as 3,1") from None
    if ngl is not None and ngl < 0:
        raise UsageError("-ngl must be 0 or more")
    if n_cpu_moe is not None and n_cpu_moe < 0:
        raise UsageError("--n-cpu-moe must be 0 or more")
    if depth is not None and depth < 0:
        raise UsageError("--depth must be 0 or more")
    return UpstreamOptions(ctx=ctx, kv=settings, speed=speed, depth=depth, os_reserve=_size_option("--os-reserve", os_reserve),
                           ngl=ngl, ts=ts, n_cpu_moe=n_cpu_moe, main_gpu=main_gpu, overrides=overrides,
                           reserve=_size_option("--reserve", reserve),
                           margin=0 if reserve is not None else _size_option("--margin", margin))


def _run_llama(model_path, facts, offload, ram_bytes, options, emit, json_flag, notes=(), warnings=()):
    """--runtime llama: plan, print, exit 1 when a device does not fit. `notes` and `warnings` join the
    document's."""
    if emit == "env":
        raise UsageError("--emit env is the fork's launch; use --emit llama with --runtime llama")
    if facts.layers is None:
        raise UsageError("this model's per-layer bytes are unknown")
    cpu = devicesmod.cpu_device(ram_bytes or 0, options.speed.ram_bw, options.speed.ram_bw_source)
    result = upstream.plan(facts, offload, cpu, options)
    doc = upstream.result_doc(result, facts, model_path, launchmod.kv_flags(options.kv))
    # as the fork's document says it: under --reserve each GPU/RPC device's compute_bytes is that fixed
    # reserve (margin 0), not the modelled buffer
    doc["reserve_source"] = "compute+margin" if options.reserve is None else "--reserve"
    doc["notes"] = list(notes) + doc["notes"]
    doc["warnings"] = list(warnings) + doc["warnings"]
    if ram_bytes is None:
        doc["warnings"].append("no --ram: the CPU's capacity is unknown (0 in the ledger); page-cache misses are not counted")
    for message in doc["warnings"]:
        warn(message)
    if emit and json_flag:
        command = ["llama-server"] + list(doc["launch"]["llama"]["args"]) if result.chosen is not None else []
        print_json({"command": command, "note": "" if command else "unfittable: " + result.unfittable["summary"]})
    elif emit:
        if result.chosen is None:
            click.echo("# unfittable: " + result.unfittable["summary"])
        else:
            click.echo("llama-server " + shlex.join(doc["launch"]["llama"]["args"]))
    else:
        launch_line = ["llama-server " + shlex.join(doc["launch"]["llama"]["args"])] if doc.get("launch") else []
        # the launch line is a note, one line for the terminal to wrap: a caption would break it mid-word
        render(doc, lambda: llama_tables(doc), json_flag, notes=launch_line + doc["notes"])
    if result.chosen is None:
        click.get_current_context().exit(1)


def _run_check(model_path, facts, offload, ram_bytes, options, line, shrink, json_flag, notes=(), warnings=()):
    """--check: evaluate the command line's placement (options), plan device-fit's own on the same
    devices and context, print both, exit 1 when the line does not fit. shrink: (least context, step)
    when --fit on may shrink a training context that does not fit (common/fit.cpp), else None."""
    cpu = devicesmod.cpu_device(ram_bytes or 0, options.speed.ram_bw, options.speed.ram_bw_source)
    kv_flags = launchmod.kv_flags(options.kv)
    result = upstream.plan(facts, offload, cpu, options)
    if shrink is not None and result.chosen is None:
        fitted = _fit_context(facts, offload, cpu, options, *shrink)
        if fitted is not None:
            notes = list(notes) + [f"--check: --fit on shrinks the context from {options.ctx} to about {fitted} "
                                   "(common/fit.cpp reduces an unset context until the model fits; device-fit takes "
                                   f"the largest multiple of {shrink[1]} that fits)"]
            options.ctx = fitted
            result = upstream.plan(facts, offload, cpu, options)
    doc = upstream.result_doc(result, facts, model_path, kv_flags)
    doc["notes"] = list(notes) + doc["notes"]
    doc["warnings"] = list(warnings) + doc["warnings"]
    if ram_bytes is None:
        doc["warnings"].append("no --ram: the CPU's capacity is unknown (0 in the ledger); page-cache misses are not counted")
    own_options = options.without_placement()
    own_options.ctx = (result.chosen or result.alternatives[0]).context
    try:
        own = upstream.plan(facts, offload, cpu, own_options) if options.user_placement else result
    except UsageError:
        own = None
    doc["check"] = check_doc(line, result, own, model_path, kv_flags, facts.layers.n_layer + 1,
                             resident_cpu=not options.speed.mmap and ram_bytes is not None)
    for message in doc["warnings"]:
        warn(message)
    render(doc, lambda: llama_tables(doc), json_flag, notes=doc["check"]["summary"] + doc["notes"])
    if not doc["check"]["fits"]:
        click.get_current_context().exit(1)


def _fit_context(facts, offload, cpu, options, least, step):
    """The largest context, a multiple of `step` from `least` up to options.ctx, at which the plan fits
    (None: not even `least`). plan_at over the options plan() resolved (its tensor homes)."""
    def fits(ctx):
        return upstream.plan_at(facts, offload, cpu, options, ctx).fits

    if least >= options.ctx or not fits(least):
        return None
    low, high = least, options.ctx  # fits at low, not at high
    while high - low > step:
        middle = low + (high - low) // 2 // step * step
        if middle <= low:
            break
        if fits(middle):
            low = middle
        else:
            high = middle
    return low


def check_doc(line, result, own, model_path, kv_flags, all_layers, resident_cpu=False):
    """The answer of --check: does the line fit (each device's shortfall), its speed, and device-fit's
    own plan on the same devices and context with what it changes and buys. resident_cpu: the weights
    are read into RAM (--no-mmap, -lm none|mlock), so the CPU's share must fit --ram too."""
    plan_ = result.chosen or result.alternatives[0]
    fits = result.chosen is not None
    shortfall = {share.device.name: excess for share, excess in plan_.overfull}
    cpu = plan_.shares[-1]
    if resident_cpu and cpu.free_bytes < 0:  # no page cache to fall back on: the CPU is short too
        shortfall[cpu.device.name] = -cpu.free_bytes
        fits = False
    answer = {"command": [line.program, *line.argv], "fits": fits, "shortfall_bytes": shortfall,
              "tok_s": round(plan_.tok_s, 4), "context": plan_.context,
              "ignored_flags": line.ignored, "not_modelled_flags": line.not_modelled, "unknown_flags": line.unknown}
    summary = []
    if fits:
        summary.append(f"--check: the line fits every device; it decodes {plan_.tok_s:.2f} tok/s at context "
                       f"{plan_.context} (depth {plan_.depth})")
    else:
        short = "; ".join(f"{name} short by {format_size(excess)}" for name, excess in shortfall.items())
        summary.append(f"--check: the line does NOT fit: {short or 'nothing fits'} (it would decode "
                       f"{plan_.tok_s:.2f} tok/s if it did)")
    if own is not None and own.chosen is not None and not (resident_cpu and own.chosen.shares[-1].free_bytes < 0):
        own_args = upstream.server_args(model_path, own, kv_flags)
        changes = flag_changes(upstream.server_args(model_path, result, kv_flags) if fits else None, own_args, line,
                               all_layers)
        gain = own.chosen.tok_s / plan_.tok_s - 1 if fits else None
        answer["device_fit"] = {"args": own_args, "tok_s": round(own.chosen.tok_s, 4), "changes": changes,
                                "gain": None if gain is None else round(gain, 4)}
        if not changes:
            summary.append("device-fit would launch the same placement")
        else:
            buys = (f"{own.chosen.tok_s:.2f} tok/s ({gain:+.0%})" if gain is not None
                    else f"a plan that fits, {own.chosen.tok_s:.2f} tok/s")
            summary.append(f"device-fit would change {'; '.join(changes)}: {buys}")
            summary.append("device-fit's line: llama-server " + shlex.join(own_args))
    else:
        answer["device_fit"] = None
        summary.append("device-fit finds no placement that fits these devices at this context either")
    if line.not_modelled:
        summary.append("not modelled (they change memory or speed): " + ", ".join(line.not_modelled))
    if line.ignored:
        summary.append("ignored (no effect on memory or speed): " + ", ".join(line.ignored))
    answer["summary"] = summary
    return answer


PLACEMENT_FLAGS = ("-c", "-ngl", "-ts", "-sm", "-mg", "-ot", "--n-cpu-moe", "--cpu-moe")


def flag_changes(user_args, own_args, line, all_layers):
    """What device-fit's placement flags change in the line's: ["-ngl 30 -> 49", "drop -ot ...", ...];
    an -ngl of every layer or more is every layer (all_layers: the model's layers + 1)."""
    def pairs(args):
        found, index = {}, 0
        while index < len(args):
            flag = args[index]
            if flag in PLACEMENT_FLAGS:
                takes = flag != "--cpu-moe"
                value = args[index + 1] if takes and index + 1 < len(args) else ""
                found[flag] = f"{found[flag]},{value}" if flag == "-ot" and flag in found else value
                index += 2 if takes else 1
            else:
                index += 1
        return found
    mine = pairs(user_args) if user_args is not None else pairs(["-c", "", *_line_placement(line)])
    theirs = pairs(own_args)
    changes = []
    for flag in PLACEMENT_FLAGS:
        if flag == "-c":
            continue
        before, after = mine.get(flag), theirs.get(flag)
        if flag == "-ngl":
            before, after = (_layers_text(value, all_layers) for value in (before, after))
        if before == after:
            continue
        if before is None:
            changes.append(f"add {flag} {after}".rstrip())
        elif after is None:
            changes.append(f"drop {flag} {before}".rstrip())
        else:
            changes.append(f"{flag} {before} -> {after}")
    return changes


def _layers_text(value, all_layers):
    try:
        return str(min(int(value), all_layers))
    except (TypeError, ValueError):
        return value


def _line_placement(line):
    args = []
    for flag in ("ngl", "ts"):
        if flag in line.values:
            args += [f"-{flag}", str(line.values[flag])]
    for kind, value in line.overrides:
        args += [kind] if value is None else [kind, str(value)]
    return args


def _fork_unfittable(facts, tiers, options, coverage, gpus, ram_bytes):
    """Numbers for a card no division fits: the shortfall, the smallest VRAM that fits, and what
    upstream llama.cpp (CPU experts, no streaming) would do on the same card."""
    shortfall = core.Fit.shortfall_bytes.fget(core.fit(facts, tiers, options, coverage))
    answer = {"shortfall_bytes": {gpus[0].name: shortfall}, "smallest_vram_bytes": core.smallest_vram(facts, tiers, options, coverage)}
    parts = [f"{gpus[0].name} short by {shortfall / 1024**3:.2f} GiB"]
    if answer["smallest_vram_bytes"]:
        parts.append(f"the fork fits from {answer['smallest_vram_bytes'] / 1024**3:.2f} GiB of VRAM")
    if not tiers:
        parts.append("a smaller resident tier (quantize --resident-only, --tiers) would lower the resident weights")
    speed = _llama_speed()  # --runtime llama's defaults
    cpu = devicesmod.cpu_device(ram_bytes or 0, speed.ram_bw, speed.ram_bw_source)
    try:
        # the card's own --margin / --reserve, as --runtime llama would hold them back
        held = (dict(reserve=options.reserve, margin=0) if options.reserve is not None else dict(margin=options.margin))
        fallback = upstream.plan(facts, gpus[:1], cpu, UpstreamOptions(kv=options.kv, ctx=options.ctx, speed=speed,
                                                                   os_reserve=options.os_reserve, **held))
    except UsageError:
        fallback = None
    if fallback is not None and fallback.chosen is not None:
        chosen = fallback.chosen
        answer["upstream_tok_s"] = round(chosen.tok_s, 4)
        answer["upstream_args"] = upstream.server_args(facts.path, fallback, launchmod.kv_flags(options.kv))
        experts_on_cpu = any(device == upstream.CPU for parts in chosen.placement.expert_device.values()
                             for device in parts.values())
        parts.append(f"upstream llama.cpp fits this card{' with CPU experts' if experts_on_cpu else ''} (-ngl {chosen.placement.ngl}"
                     + (f" --n-cpu-moe {chosen.placement.n_cpu_moe}" if chosen.placement.n_cpu_moe else "")
                     + f", context {chosen.context}): {chosen.tok_s:.2f} tok/s with --runtime llama"
                     + ("" if ram_bytes else " (give --ram: RAM was not checked)"))
    answer["summary"] = "unfittable: " + "; ".join(parts)
    return answer


class FitInputs:
    """What every model of one device-fit run is fitted with (the options and the inputs read once)."""

    def __init__(self, options, tiers_dir, curve, coverage_policy, coverage_label, observations, plan_path="",
                 capture_path="", storage_root=None, model_id=None, gpus=(), ram_bytes=None, fork_notes=(), warnings=()):
        self.options = options
        self.tiers_dir = tiers_dir
        self.curve = curve
        self.coverage_policy = coverage_policy
        self.coverage_label = coverage_label
        self.observations = observations
        self.plan_path = plan_path
        self.capture_path = capture_path
        self.storage_root = storage_root
        self.model_id = model_id
        self.gpus = list(gpus)
        self.ram_bytes = ram_bytes
        self.fork_notes = list(fork_notes)
        self.warnings = list(warnings)  # found while reading the inputs (e.g. the curve's default policy)


def fit_model(facts, fetch_stats, model_path, inputs):
    """The fork's division of one model (its facts): (doc, result, launch). The one path both a single
    MODEL and each set of a repo go through; `fetch_stats` (None for a local file) joins the doc.
    A URL or hf:// name maps to no existing local folder: its tiers come from --tiers or the daemon's
    storage."""
    warnings = []
    from moetools.devicefit.discovery import discover_tiers
    from moetools.formats.storage import device_fit_dir

    storage_dir = device_fit_dir(inputs.model_id or core.model_stem(model_path), inputs.storage_root)
    tiers, tier_warnings = discover_tiers(model_path, facts, inputs.tiers_dir, storage_dir)
    warnings += tier_warnings
    warnings += inputs.warnings
    coverage, coverage_warnings = core.coverage_model(inputs.curve, inputs.coverage_policy, facts, inputs.coverage_label)
    warnings += coverage_warnings
    result, context_rows = core.fit_trade_off(facts, tiers, inputs.options, coverage, inputs.observations)
    launch = {"llama": launchmod.llama_launch(result), "env": launchmod.env_launch(result, inputs.plan_path, inputs.capture_path)}
    doc = core.to_doc(result, launch)
    doc["runtime"] = "fork"
    doc["contexts"] = context_rows
    doc["devices"] = core.fork_ledger(result, inputs.gpus[0].name)
    doc["warnings"] = warnings + doc["warnings"]
    doc["notes"] = doc["notes"] + inputs.fork_notes + pool_notes(doc.get("fork_cache"))
    if result.chosen is None:
        doc["unfittable"] = _fork_unfittable(facts, tiers, inputs.options, coverage, inputs.gpus, inputs.ram_bytes)
        doc["notes"].append(doc["unfittable"]["summary"])
    if fetch_stats is not None:
        doc.update(fetch_stats)
    return doc, result, launch


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


def fit_repo(text, fetch, inputs, json_flag):
    """device-fit for every GGUF set of hf://ORG/REPO: one row per set (JSON: a list)."""
    from moetools.gguf import hub

    listing, sets = hub.repo_sets(text, fetch)
    rows = []
    for gguf_set in sets:
        try:
            with hub.open_set(listing, gguf_set, fetch) as model:
                doc, _, _ = fit_model(core.model_facts(model), model.fetch_stats, model.path, inputs)
                rows.append(repo_row(gguf_set, model, doc))
        except RemoteError:
            raise
        except GGUFError as err:  # e.g. a vision projector beside the quants: reported, not fatal
            rows.append({"set": gguf_set.name, "verdict": "unreadable", "error": str(err), "shards": len(gguf_set.paths),
                         "file_bytes": gguf_set.total_bytes})
            warn(str(err))
    render(rows, lambda: repo_tables(text, listing, rows), json_flag)
    if not any(row["verdict"] not in ("unfittable", "unreadable") for row in rows):
        click.get_current_context().exit(1)


ALL_LAYERS = 999  # -ngl for "every layer" (llama.cpp clamps it to the model's layers + 1)


def device_fit_check(words, devices, context, placement, drafting, fork, machine, outputs, fetch):
    """--check: the llama.cpp command line in `words` (or a FILE / - holding it) evaluated on device-fit's
    devices (--vram/--gpu/--rpc/--ram): its flags replace device-fit's context, placement and draft
    options. Exit 1 when it does not fit."""
    from moetools.devicefit import check as checkmod
    from moetools.devicefit.memory.cells import CACHE_TYPES
    from moetools.devicefit.options import ContextOptions, DraftOptions, PlacementOptions
    from moetools.formats.jsonio import read_text

    if outputs.emit:
        raise UsageError("--check answers for a command line; --emit prints device-fit's own (drop one)")
    line = checkmod.parse(checkmod.command_tokens(words, lambda path: read_text(path, "command line")))
    values = line.values
    notes, warnings = [], list(line.warnings)
    path = checkmod.model_path(line)
    for key, flag in (("ctk", "-ctk"), ("ctv", "-ctv"), ("ctkd", "-ctkd"), ("ctvd", "-ctvd")):
        if key in values and values[key] not in CACHE_TYPES:
            raise UsageError(f"--check: {flag} {values[key]!r}: not a cache type ({', '.join(CACHE_TYPES)})")
    # the devices: llama.cpp's --rpc servers must be the ones device-fit was given (with their memory)
    given = [spec.rsplit("=", 1)[0] for spec in devices.rpc_specs]
    used = [endpoint for endpoint in (values.get("rpc") or "").split(",") if endpoint]
    if used != given:
        raise UsageError(f"--check: the line's --rpc ({','.join(used) or 'none'}) is not device-fit's --rpc "
                         f"({','.join(given) or 'none'}): give device-fit --rpc HOST:PORT=SIZE for each server the line "
                         "uses, in its order")
    n_seq, unified = checkmod.parallel(line)
    ctx = values.get("ctx")
    if not ctx and values.get("per_slot") and line.program == "llama-server":
        ctx = n_seq * values["per_slot"]  # tools/server/server.cpp: the KV pool sized from --kv-unified-per-slot
    fit = checkmod.switch("--fit", values["fit"]) != "off" if "fit" in values else True
    shrink = None
    if not ctx:
        from moetools.devicefit import kv as kvmod
        from moetools.gguf import open_model

        with open_model(path, fetch) as model:
            ctx = kvmod.kv_shape(model).context_train
        # common/fit.cpp: with --fit on and no -c, a context that does not fit is shrunk (to a multiple
        # of 256 per KV stream, not below --fit-ctx); -c 0 asks for the whole training context
        if fit and "ctx" not in values:
            shrink = (values.get("fit_ctx", 4096), 256 * (1 if unified else n_seq))
        notes.append(f"--check: {'-c 0' if 'ctx' in values else 'no -c'}: llama.cpp allocates the training context, "
                     f"{ctx} tokens" + (" (--fit on shrinks it when it does not fit)" if shrink else ""))
    fa = checkmod.switch("-fa", values["fa"]) if "fa" in values else "auto"
    context = ContextOptions(ctx, context.min_ctx, values.get("ctk", "f16"), values.get("ctv", "f16"), values.get("ubatch", 512),
                             values.get("batch", 2048), n_seq, unified, bool(values.get("swa_full")), fa != "off", fa)
    split = values.get("split_mode", "layer")
    if split not in ("none", "layer", "row", "tensor"):
        raise UsageError(f"--check: -sm {split!r}: expected none, layer, row or tensor")
    main_gpu = None
    if split == "none":
        main_gpu = values.get("main_gpu", 0)
    elif split in ("row", "tensor"):
        warnings.append(f"--check: -sm {split} is planned as -sm layer (device-fit models llama.cpp's layer split)")
    ngl = checkmod.layers_value("-ngl", values.get("ngl"))
    ts_text = values["ts"].replace("/", ",") if "ts" in values else None
    sources = line.overrides or None
    if not line.placement_given and split != "none":
        if fit:
            notes.append("--check: no -ngl, -ts or override with --fit on (llama.cpp's default): llama.cpp fits the "
                         "placement itself (common/fit.cpp); device-fit's own placement stands for it")
            ngl = None
        else:  # llama_model_default_params: every layer offloaded
            ngl = ALL_LAYERS
    elif fit:
        notes.append("--check: --fit on leaves the placement as given (common/fit.cpp: -ngl, -ts or an override set by "
                     "the user), so it is evaluated as written")
    n_cpu_moe = next((value for kind, value in reversed(line.overrides) if kind == "--n-cpu-moe"), None)
    if sources is not None and all(kind == "--n-cpu-moe" for kind, _ in sources):
        sources = None  # --n-cpu-moe alone: the plain flag (its overrides are the same)
    placement = PlacementOptions(ngl, ts_text, n_cpu_moe, main_gpu, placement.depth, tuple(sources or ()))
    spec_types = [item for item in (values.get("spec_type") or "").split(",") if item]
    spec_type = "draft-mtp" if "draft-mtp" in spec_types and not values.get("draft") else None
    if values.get("draft") and "draft-simple" in spec_types:
        spec_type = "draft-simple"
    others = [item for item in spec_types if item not in ("draft-simple", "draft-mtp", "draft-dflash")]
    if others:
        warnings.append(f"--check: --spec-type {','.join(others)}: drafts without a model; not modelled")
    drafting = DraftOptions(values.get("draft"), checkmod.layers_value("-ngld", values.get("ngld")), values.get("ctkd", "f16"),
                            spec_type, values.get("n_max", 3), 0 if line.program != "llama-server" else None,
                            values.get("devd"), values.get("ctvd", "f16"))
    if "threads" in values and values["threads"] > 0:
        machine = machine._replace(threads=values["threads"])
    # mmap: the CPU's weights are a page cache the drive refills; read into RAM (--no-mmap, -lm none|dio)
    # or locked there (mlock), they must fit it
    mmap = not (values.get("no_mmap") or values.get("load_mode") in ("none", "mlock", "dio", "mmap+mlock")
                or values.get("mlock"))
    if devices.runtime != "llama":
        devices = devices._replace(runtime="llama")
    for message in line.unknown:
        warnings.append(f"--check: {message}: not a llama.cpp flag (common/arg.cpp at 0c1e57098); ignored "
                        "(llama.cpp itself stops with 'invalid argument')")
    return device_fit(path, devices, context, placement, drafting, fork, machine, outputs, fetch,
                      check=(line, mmap, shrink, notes, warnings))


def device_fit(model_path, devices, context, placement, drafting, fork, machine, outputs, fetch, check=None):
    """device-fit's whole run after parsing: the option records (devicefit/options.py) in, the plan
    rendered or emitted, the exit code set (1 when no plan fits). Tests call it without CliRunner.
    check: (Line, mmap, notes, warnings) of `--check` (device_fit_check): evaluate and compare."""
    coverage_policy = fork.coverage_policy
    flash_attn = context.flash_attn
    n_outputs = drafting.n_outputs
    if coverage_policy is not None and not fork.coverage_path:
        raise UsageError(f"--coverage-policy {coverage_policy} needs --coverage FILE (a curve from trace-tail --curve)")
    if fork.coverage_path == "-" and fork.observations_path == "-":
        raise UsageError("--coverage and --observations cannot both read stdin")
    if context.fa_text is not None:
        flash_attn = context.fa_text != "off"
    if context.min_ctx < 1:
        raise UsageError("--min-ctx must be at least 1 token")
    h2d_bytes_per_s = parse_rate(fork.h2d)  # refused on either runtime, though only the fork's streaming uses it
    if n_outputs is not None and n_outputs < 0:
        raise UsageError("--n-outputs must be 0 (the batch, -b) or more")
    if n_outputs is None:  # the target context's rows as the server sets them: llama-server's rule, which
        # the fork's server applies too (CambrianTech/llama.cpp tools/server/server-context.cpp load_model)
        speculative = bool(drafting.draft_path) or drafting.spec_type == "draft-mtp"
        n_outputs = server_outputs(context.batch, context.parallel, max(0, drafting.draft_n_max) if speculative else 0)
    settings = KVSettings(ctk=context.ctk, ctv=context.ctv, ubatch=context.ubatch, batch=context.batch, n_seq=context.parallel, unified=context.kv_unified,
                          swa_full=context.swa_full, flash_attn=flash_attn, outputs=n_outputs)
    gpus, rpcs = _offload_devices(devices.vram, devices.gpu_text, devices.vram_bw, devices.rpc_specs, devices.rpc_bw)
    ram_bytes = _ram_option(machine.ram)
    from moetools.gguf import open_model

    repo = is_repo(model_path)
    if drafting.draft_path and devices.runtime != "llama":
        raise UsageError("--draft is planned with --runtime llama (the fork's division of one GPU has no draft model)")
    if drafting.draft_ngl is not None and drafting.draft_ngl < 0:
        raise UsageError("--draft-ngl must be 0 or more")
    mtp = drafting.spec_type == "draft-mtp"
    if drafting.draft_n_max < 0:
        raise UsageError("--spec-draft-n-max must be 0 or more")
    if mtp and drafting.draft_path:
        with open_model(drafting.draft_path, fetch) as model:
            borrowing = model.architecture in BORROWED_KV_ARCHES
        if not borrowing:
            raise UsageError("--spec-type draft-mtp drafts with the model's own NextN/MTP blocks: give no --draft "
                             "(a separate MTP head GGUF as --draft is not planned; a gemma4-assistant is)")
        mtp = False  # a Gemma 4 assistant: a second model (its -md context is llama.cpp's MTP type)
    if drafting.spec_type == "draft-simple" and not drafting.draft_path:
        raise UsageError("--spec-type draft-simple needs a draft model: give --draft MODEL")
    if mtp and devices.runtime != "llama":
        raise UsageError("--spec-type draft-mtp is planned with --runtime llama")
    if mtp and (drafting.draft_ngl is not None or drafting.draft_device is not None):
        raise UsageError("--draft-ngl/--device-draft place a separate draft model; the MTP context runs on the "
                         "target's own layers and devices")
    if drafting.draft_device is not None and not drafting.draft_path:
        raise UsageError("--device-draft places a draft model: give --draft MODEL")
    facts = fetch_stats = target_vocab = forced = None
    if not repo:
        with open_model(model_path, fetch) as model:
            _refuse_a_tier(model_path, model.metadata)
            facts = core.model_facts(model, load_mtp=mtp)
            if facts.shape.borrowed:
                raise UsageError(f"{model_path}: a {facts.architecture} holds no KV and runs only as a gemma4 "
                                 "model's draft (its layers read the target context's cache): give it as --draft "
                                 "of a gemma4 model")
            fetch_stats = model.fetch_stats
            forced = force_flash_attn_off(facts.architecture, settings)
            if forced:
                facts.warnings.append(forced)
            if drafting.draft_path:
                target_vocab = draftmod.vocab_of(model, decode=True)
    if devices.runtime == "llama":
        if repo:
            raise UsageError("--runtime llama plans one model; give hf://ORG/REPO/PATH.gguf rather than a whole repo")
        if mtp and facts.architecture in RS_ROLLBACK_ARCHES:
            # common_params_speculative::need_n_rs_seq: the target's recurrent state keeps n_max snapshots
            settings.rs_seq = drafting.draft_n_max
        options = _llama_options(settings, ctx=context.ctx, reserve=devices.reserve, margin=devices.margin, ngl=placement.ngl, ts_text=placement.ts_text, n_cpu_moe=placement.n_cpu_moe,
                                 main_gpu=placement.main_gpu, depth=placement.depth, floor_text=machine.floor_text, ram_bw=machine.ram_bw, disk_bw=machine.disk_bw,
                                 threads=machine.threads, os_reserve=machine.os_reserve, overrides=overrides_of(placement))
        if mtp:
            draftmod.check_mtp(model_path, facts)
            options.draft = draftmod.Draft(facts, model_path, draftmod.draft_kv(settings, drafting.draft_ctk, drafting.draft_ctv),
                                           spec_type="draft-mtp", n_max=drafting.draft_n_max)
        if drafting.draft_path:
            with open_model(drafting.draft_path, fetch) as model:
                draftmod.check_compatible(model_path, target_vocab, drafting.draft_path, draftmod.vocab_of(model, decode=True))
                draft_facts = core.model_facts(model)
                if draft_facts.shape.borrowed and facts.architecture != "gemma4":
                    raise UsageError(f"--draft {drafting.draft_path}: a {draft_facts.architecture} reads a gemma4 target's KV "
                                     f"(create_memory shares its layers with the target's last ones), not a "
                                     f"{facts.architecture}'s")
                placed_on = None if drafting.draft_device is None else draftmod.draft_devices(drafting.draft_device, rpcs + gpus)
                options.draft = draftmod.Draft(draft_facts, drafting.draft_path, draftmod.draft_kv(settings, drafting.draft_ctk, drafting.draft_ctv),
                                               ngl=drafting.draft_ngl, devices=placed_on, n_max=drafting.draft_n_max)
                draftmod.plan_block_draft(options.draft, model, facts, settings)
            block_draft = draftmod.block_draft_warning(drafting.draft_path, draft_facts, facts)
            if block_draft:
                forced = [forced, block_draft] if forced else [block_draft]
        if options.draft is not None:
            draftmod.check_draft_cache(options.draft)
        if check is not None:
            line, options.speed.mmap, shrink, check_notes, check_warnings = check
            _run_check(model_path, facts, rpcs + gpus, ram_bytes, options, line, shrink, outputs.json_flag,
                       decimal_vram_notes(devices.vram) + check_notes,
                       check_warnings + ((forced if isinstance(forced, list) else [forced]) if forced else []))
            return
        _run_llama(model_path, facts, rpcs + gpus, ram_bytes, options, outputs.emit, outputs.json_flag, decimal_vram_notes(devices.vram),
                   (forced if isinstance(forced, list) else [forced]) if forced else [])
        return
    if overrides_of(placement):
        raise UsageError("-ot/--cpu-moe are llama.cpp's placement: evaluate them with --runtime llama")
    if rpcs:
        raise UsageError("--rpc needs --runtime llama: the fork streams experts into one local GPU")
    if not gpus:
        raise UsageError("--runtime fork needs the GPU it streams to: give --vram SIZE (or --gpu NAME)")
    fork_notes = decimal_vram_notes(devices.vram)
    if len(gpus) > 1:
        fork_notes.append(f"the fork keeps one expert cache (per expert size, process-wide, on the CUDA device current "
                          f"when it is allocated: CambrianTech/llama.cpp batch_cache_get): this division is of {gpus[0].name}; "
                          f"the other {len(gpus) - 1} GPU(s) hold only what llama.cpp's layer split gives them. "
                          "Use --runtime llama to plan every GPU")
    options = core.FitOptions(
        vram=gpus[0].capacity_bytes,
        reserve=_size_option("--reserve", devices.reserve),
        margin=_size_option("--margin", devices.margin),
        ctx=context.ctx,
        min_ctx=context.min_ctx,
        kv=settings,
        h2d_bytes_per_s=h2d_bytes_per_s,
        floor_s=parse_floor(machine.floor_text or "10ms"),
        ram=ram_bytes,
        os_reserve=_size_option("--os-reserve", machine.os_reserve),
        container=outputs.container or "",
    )
    input_warnings = []
    curve = None
    if fork.coverage_path:
        from moetools.formats.curve import read_curve

        curve = read_curve(fork.coverage_path)
        if coverage_policy is None:
            from moetools.formats.curve import default_coverage_policy

            coverage_policy, note = default_coverage_policy(curve, fork.coverage_path)
            if note:
                input_warnings.append(note)
    observations = []
    if fork.observations_path:
        from moetools.formats.jsonio import display_name, read_text

        observations = core.parse_observations(read_text(fork.observations_path, "observations"), display_name(fork.observations_path))
    inputs = FitInputs(options, fork.tiers_dir, curve, coverage_policy, fork.coverage_path or "<curve>", observations,
                       outputs.plan_path or "", fork.capture_path or "", fork.storage_root, fork.model_id, gpus, ram_bytes, fork_notes, input_warnings)
    if repo:
        if outputs.plan_path or outputs.emit:
            raise UsageError("--plan and --emit take one model; give hf://ORG/REPO/PATH.gguf rather than a whole repo")
        return fit_repo(model_path, fetch, inputs, outputs.json_flag)
    doc, result, launch = fit_model(facts, fetch_stats, model_path, inputs)
    first_vram = devices.vram.split(",")[0].strip() if devices.vram else ""
    if decimal_vram_notes(first_vram):  # the first GPU's size was decimal: say so in its row
        doc["vram_asked"] = first_vram
    for message in doc["warnings"]:
        warn(message)
    if outputs.plan_path:
        if result.chosen is None:
            warn(f"unfittable: no plan written to {outputs.plan_path}")
        else:
            from moetools.formats.plan import update_plan_locked

            host, device, tier = launchmod.plan_budget(result)
            if not result.host:
                warn("no --ram: the plan's host budget_bytes is 0 (no pins)")
            # device-fit owns the budgets and the tier; an existing pin_list (trace-tail's) and any
            # other key are kept. A new plan starts with an empty pin list. Under the plan folder's
            # lock: trace-tail --follow may be rewriting the pins at this moment.
            update_plan_locked(outputs.plan_path, "device-fit", on_wait=warn,
                               changes={"budget_bytes": host, "device_budget_bytes": device, "resident_tier": tier,
                                        "cache_device": launchmod.plan_cache_device(result)})
            doc["plan"] = os.path.abspath(outputs.plan_path)
    if outputs.emit and outputs.json_flag:
        print_json(emit_doc(outputs.emit, doc, launch, options.kv))
    elif outputs.emit:
        click.echo(emit_text(outputs.emit, doc, launch, options.kv), nl=False)
    else:
        render(doc, lambda: tables(doc), outputs.json_flag, notes=doc["notes"])
    if result.chosen is None:
        click.get_current_context().exit(1)
