"""device-fit's orchestration: from the parsed option records to a plan, for one model (fork or upstream
llama.cpp, with drafts) or every GGUF set of a repo; rendering through devicefit/render.py."""

import os
import re
import shlex

import click

from moetools.arch.registry import profile
from moetools.devicefit import compare as comparemod
from moetools.devicefit import core, upstream, upstream_doc
from moetools.devicefit import devices as devicesmod  # `devices` is device_fit's option record
from moetools.devicefit import hostplan
from moetools.devicefit import draft as draftmod
import moetools.devicefit.launch as launchmod
from moetools.devicefit.options import overrides_of
from moetools.devicefit.speed import SpeedSettings
from moetools.devicefit.upstream import UpstreamOptions
from moetools.devicefit.kv import KVSettings, force_flash_attn_off, server_outputs
from moetools.errors import GGUFError, RemoteError, UsageError
from moetools.devicefit.render import emit_doc, emit_text, llama_tables, pool_notes, repo_tables, runtimes_table, tables
from moetools.devicefit.check_answer import run_check
from moetools.devicefit.repo import fit_repo_llama, repo_row
from moetools.devicefit.runtimes import copy_settings, fork_reason, fork_screen_lines, other_runtime_flags, runtime_rows
from moetools.gguf.locator import is_repo
from moetools.output import ShellLine, echo_shell, print_json, render, warn
from moetools.sizes import format_size, parse_size

_FLOOR_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(ms|s|us)?\s*$", re.IGNORECASE)


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


def _offload_devices(vram, gpu_text, vram_bw, rpc_specs, rpc_bw, machine=None):
    """(local GPUs, RPC devices) from the device options; without --gpu, a --host profile's GPUs
    (hostplan.Machine `machine`), their sizes and bandwidths overridden by --vram and --vram-bw."""
    names = devicesmod.parse_gpu_list(gpu_text) if gpu_text else None
    bandwidths = devicesmod.parse_rate_list(vram_bw, "--vram-bw") if vram_bw else None
    detected = sizes = None
    if vram is not None and vram.strip().lower() == "auto":
        detected = devicesmod.detect_gpus()
    elif vram is not None:
        sizes = devicesmod.parse_size_list(vram, "--vram")
    if machine is not None and machine.profile is not None and not names:
        gpus = hostplan.host_gpus(machine, sizes, bandwidths)
    else:
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


def _ram_option(text, machine=None):
    if text is None:
        return hostplan.ram_bytes(machine) if machine is not None else None
    if text.strip().lower() == "auto":
        found = devicesmod.host_ram_bytes()
        if not found:
            raise UsageError("--ram auto: this machine's RAM cannot be read; give --ram SIZE")
        return found
    from moetools.sizes import parse_capacity

    return parse_capacity(text, "--ram")


def _batch_sizes(context):
    """(context with -ub/-b resolved to llama.cpp's defaults where not given, notes): llama.cpp clamps
    n_ubatch to n_batch (src/llama-context.cpp: n_ubatch = min(n_batch, n_ubatch)); so does the plan."""
    ubatch = 512 if context.ubatch is None else context.ubatch
    batch = 2048 if context.batch is None else context.batch
    if ubatch < 1 or batch < 1:
        raise UsageError("--ubatch and --batch must be at least 1")
    notes = []
    if context.batch is not None and context.ubatch is None and batch < ubatch:
        ubatch = batch
    elif ubatch > batch:
        notes.append(f"-ub {ubatch} is above -b {batch}: llama.cpp clamps the ubatch to the batch; planned with -ub {batch}")
        ubatch = batch
    return context._replace(ubatch=ubatch, batch=batch), notes


def _llama_speed(floor_text=None, ram_bw=None, disk_bw=None, threads=None, machine=None, h2d=None):
    """The speed settings from the machine options (the defaults when none are given), each host figure
    with its source (hostplan): a flag, the --host profile `machine`, this machine, or a stated default."""
    speed = hostplan.apply(SpeedSettings(), machine or hostplan.Machine(), ram_bw, disk_bw, threads, h2d)
    if floor_text is not None:
        speed.floor_s = parse_floor(floor_text)
    return speed


def _llama_options(settings, *, speed, ctx, reserve, margin, ngl, ts_text, n_cpu_moe, main_gpu, depth, os_reserve, overrides=None):
    """UpstreamOptions from the options; `speed` (SpeedSettings) is copied: a plan keeps state in its options."""
    speed = speed.replace()
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


def _run_llama(model_path, facts, offload, ram_bytes, options, emit, json_flag, notes=(), warnings=(), beside=None,
               fetch_stats=None, machine=None):
    """--runtime llama (and auto): plan, print, exit 1 when no runtime fits. `notes` and `warnings` join
    the document's. `beside`: the fork's (doc, result, launch) for the same model, shown beside (auto)."""
    if emit == "env" and beside is None:
        raise UsageError("--emit env is the fork's launch; use --emit llama with --runtime llama")
    if facts.layers is None:
        raise UsageError("this model's per-layer bytes are unknown")
    cpu = devicesmod.cpu_device(ram_bytes or 0, options.speed.ram_bw, options.speed.ram_bw_source)
    result = comparemod.refine(upstream.plan(facts, offload, cpu, options), facts, offload, cpu, options)
    doc = upstream_doc.result_doc(result, facts, model_path, launchmod.kv_flags(options.kv))
    # as the fork's document says it: under --reserve each GPU/RPC device's compute_bytes is that fixed
    # reserve (margin 0), not the modelled buffer
    doc["reserve_source"] = "compute+margin" if options.reserve is None else "--reserve"
    machine = machine or hostplan.Machine()
    doc["machine"] = hostplan.machine_doc(options.speed, machine)
    doc["notes"] = list(notes) + doc["notes"] + hostplan.notes(options.speed, machine)
    doc["warnings"] = list(warnings) + doc["warnings"]
    if ram_bytes is None:
        doc["warnings"].append("no --ram: the CPU's capacity is unknown (0 in the ledger); page-cache misses are not counted")
    if beside is not None:
        doc["runtimes"] = runtime_rows(doc, beside[0])
        doc["fork"] = beside[0]
    if fetch_stats is not None:  # a remote model: what reading its headers cost
        doc.update(fetch_stats)
    for message in doc["warnings"]:
        warn(message)
    if emit == "env":  # auto with the fork beside: its exports
        fork_doc, _, launch = beside
        if json_flag:
            print_json(emit_doc("env", fork_doc, launch, options.kv))
        else:
            click.echo(emit_text("env", fork_doc, launch, options.kv), nl=False)
    elif emit and json_flag:
        command = ["llama-server"] + list(doc["launch"]["llama"]["args"]) if result.chosen is not None else []
        print_json({"command": command, "note": "" if command else "unfittable: " + result.unfittable["summary"]})
    elif emit:
        if result.chosen is None:
            echo_shell("# unfittable: " + result.unfittable["summary"] + "\n")
        else:
            echo_shell("llama-server " + shlex.join(doc["launch"]["llama"]["args"]) + "\n")
    else:
        launch_line = [ShellLine("llama-server " + shlex.join(doc["launch"]["llama"]["args"]))] if doc.get("launch") else []
        if beside is not None and beside[1].chosen is not None:
            launch_line += fork_screen_lines(beside[2])  # the fork's runnable line beside upstream's
        # the launch lines are ShellLine notes: printed on their own, broken between arguments with ` \`
        screen = (lambda: [runtimes_table(doc["runtimes"], doc["model"])] + llama_tables(doc)) if beside is not None else (lambda: llama_tables(doc))
        render(doc, screen, json_flag, notes=launch_line + doc["notes"])
    fork_fits = beside is not None and beside[1].chosen is not None
    if result.chosen is None and not fork_fits:
        click.get_current_context().exit(1)


def _fork_unfittable(facts, tiers, options, coverage, gpus, ram_bytes, speed=None):
    """Numbers for a card no division fits: the shortfall, the smallest VRAM that fits, and what
    upstream llama.cpp (CPU experts, no streaming) would do on the same card."""
    shortfall = core.Fit.shortfall_bytes.fget(core.fit(facts, tiers, options, coverage))
    answer = {"shortfall_bytes": {gpus[0].name: shortfall}, "smallest_vram_bytes": core.smallest_vram(facts, tiers, options, coverage)}
    parts = [f"{gpus[0].name} short by {shortfall / 1024**3:.2f} GiB"]
    if answer["smallest_vram_bytes"]:
        parts.append(f"the fork fits from {answer['smallest_vram_bytes'] / 1024**3:.2f} GiB of VRAM")
    if not tiers:
        parts.append("a smaller resident tier (quantize --resident-only, --tiers) would lower the resident weights")
    speed = speed.replace() if speed is not None else _llama_speed()  # --runtime llama's settings
    cpu = devicesmod.cpu_device(ram_bytes or 0, speed.ram_bw, speed.ram_bw_source)
    try:
        # the card's own --margin / --reserve, as --runtime llama would hold them back
        held = (dict(reserve=options.reserve, margin=0) if options.reserve is not None else dict(margin=options.margin))
        # llama.cpp's default batch sizes: --runtime llama would choose -ub (its --prefer balanced)
        search = options.kv.ubatch == 512 and options.kv.batch == 2048
        fallback = upstream.plan(facts, gpus[:1], cpu, UpstreamOptions(kv=options.kv, ctx=options.ctx, speed=speed,
                                                                   os_reserve=options.os_reserve, batch_search=search, **held))
    except UsageError:
        fallback = None
    if fallback is not None and fallback.chosen is not None:
        chosen = fallback.chosen
        answer["upstream_tok_s"] = round(chosen.tok_s, 4)
        answer["upstream_args"] = upstream.server_args(facts.path, fallback, launchmod.kv_flags(fallback.kv or options.kv))
        experts_on_cpu = any(device == upstream.CPU for parts in chosen.placement.expert_device.values()
                             for device in parts.values())
        parts.append(f"upstream llama.cpp fits this card{' with CPU experts' if experts_on_cpu else ''} (-ngl {chosen.placement.ngl}"
                     + (f" --n-cpu-moe {chosen.placement.n_cpu_moe}" if chosen.placement.n_cpu_moe else "")
                     + f", context {chosen.context}): {chosen.tok_s:.2f} tok/s with --runtime llama"
                     + ("" if ram_bytes else " (give --ram: RAM was not checked)"))
    answer["summary"] = "unfittable: " + "; ".join(parts)
    return answer


def _reserve_note(doc):
    """device-fit's reserve beside the fork's own default for this card (fork_default_reserve)."""
    mine = (f"compute buffer {format_size(doc['compute_bytes'])} + --margin {format_size(doc['margin_bytes'])}"
            if doc["reserve_source"] == "compute+margin" else "--reserve")
    return (f"reserve: device-fit holds back {format_size(doc['reserve_bytes'])} ({mine}); the fork's own default "
            f"is max(2 GiB, 10% of VRAM) = {format_size(doc['fork_fit_device_reserve_bytes'])} "
            "(continuum device_fit.rs default_compute_reserve_bytes, after the fork's fit-device --reserve-gb)")


def _trace_option(trace_path, plan_path, capture_path):
    """--trace checked against what the fork does with it: fopen(path, "wb") at the first compute call
    (ggml-backend.cpp ggml_backend_sched_compute_splits), so a missing folder writes no trace and a path
    shared with the plan or the capture would truncate that file. Returns the path ("" for the default)."""
    if not trace_path:
        return ""
    path = os.path.abspath(trace_path)
    if os.path.isdir(path):
        raise UsageError(f"--trace {trace_path}: is a folder; give the trace FILE the fork writes")
    folder = os.path.dirname(path)
    if not os.path.isdir(folder):
        raise UsageError(f"--trace {trace_path}: folder {folder} does not exist (the fork opens the trace with "
                         "fopen(..., \"wb\") and writes none when that fails)")
    for name, other in (("--plan", plan_path), ("--capture", capture_path)):
        if other and os.path.abspath(other) == path:
            raise UsageError(f"--trace {trace_path}: the same file as {name}; the fork truncates the trace at "
                             "each start, which would destroy it")
    return path


class FitInputs:
    """What every model of one device-fit run is fitted with (the options and the inputs read once)."""

    def __init__(self, options, tiers_dir, curve, coverage_policy, coverage_label, observations, plan_path="",
                 capture_path="", storage_root=None, model_id=None, gpus=(), ram_bytes=None, fork_notes=(), warnings=(),
                 tier_settings=None, trace_path="", speed=None, machine=None):
        self.options = options
        self.tiers_dir = tiers_dir
        self.curve = curve
        self.coverage_policy = coverage_policy
        self.coverage_label = coverage_label
        self.observations = observations
        self.plan_path = plan_path
        self.capture_path = capture_path
        self.trace_path = trace_path
        self.storage_root = storage_root
        self.model_id = model_id
        self.gpus = list(gpus)
        self.ram_bytes = ram_bytes
        self.fork_notes = list(fork_notes)
        self.warnings = list(warnings)  # found while reading the inputs (e.g. the curve's default policy)
        self.tier_settings = tier_settings  # devicefit.tiers.PlanTierSettings: --pin-tier/--default-tier, or None
        self.speed = speed  # SpeedSettings: the machine's figures and their sources (hostplan)
        self.machine = machine or hostplan.Machine()


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
    fork = launchmod.fork_launch(result, inputs.plan_path, inputs.capture_path, inputs.trace_path)
    launch = {"llama": launchmod.llama_launch(result), "env": fork["env"], "fork": fork}
    doc = core.to_doc(result, launch)
    doc["runtime"] = "fork"
    doc["contexts"] = context_rows
    doc["devices"] = core.fork_ledger(result, inputs.gpus[0].name)
    doc["warnings"] = warnings + doc["warnings"]
    doc["fork_fit_device_reserve_bytes"] = core.fork_default_reserve(inputs.options.vram)
    doc["notes"] = doc["notes"] + inputs.fork_notes + pool_notes(doc.get("fork_cache")) + fork["notes"] + [_reserve_note(doc)]
    if inputs.speed is not None:
        doc["machine"] = hostplan.machine_doc(inputs.speed, inputs.machine)
        doc["notes"] += hostplan.notes(inputs.speed, inputs.machine)
    if inputs.tier_settings is not None:
        _tier_doc(doc, inputs.tier_settings, result.chosen)
    if result.chosen is None:
        doc["unfittable"] = _fork_unfittable(facts, tiers, inputs.options, coverage, inputs.gpus, inputs.ram_bytes, inputs.speed)
        doc["notes"].append(doc["unfittable"]["summary"])
    if fetch_stats is not None:
        doc.update(fetch_stats)
    return doc, result, launch


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


def fork_inputs(devices, context, fork, machine, outputs, settings, gpus, ram_bytes, speed, host=None):
    """The fork's FitInputs from the option records: its options, the curve and observations read once.
    speed: the machine's figures (SpeedSettings: PCIe for --h2d, the drive); host: the hostplan.Machine."""
    coverage_policy = fork.coverage_policy
    # the fork's h2d: --h2d, the profile's link, else its own practical default (25 GB/s; the llama speed
    # model's PCIe default is the link's rate, which its fitted efficiency is a share of)
    fork_h2d, h2d_source = hostplan.pcie_figure(fork.h2d, host or hostplan.Machine())
    fork_notes = decimal_vram_notes(devices.vram)
    if len(gpus) > 1:
        fork_notes.append(f"the fork keeps one expert cache (per expert size, process-wide, on the CUDA device current "
                          f"when it is allocated: CambrianTech/llama.cpp batch_cache_get): this division is of {gpus[0].name}; "
                          f"the other {len(gpus) - 1} GPU(s) hold only what llama.cpp's layer split gives them. "
                          "Use --runtime llama to plan every GPU")
    tier_settings = None
    if fork.pin_tier is not None or fork.default_tier is not None or (outputs.container and outputs.plan_path):
        from moetools.devicefit.tiers import plan_tier_settings

        # before any work: a tier outside the container's ladder, or an unknown tier name, is exit 2
        tier_settings = plan_tier_settings(fork.pin_tier, fork.default_tier, outputs.container, outputs.plan_path)
        fork_notes += tier_settings.notes
    options = core.FitOptions(
        vram=gpus[0].capacity_bytes,
        reserve=_size_option("--reserve", devices.reserve),
        margin=_size_option("--margin", devices.margin),
        ctx=context.ctx,
        min_ctx=context.min_ctx,
        kv=settings,
        h2d_bytes_per_s=fork_h2d,
        h2d_label="host profile" if h2d_source.startswith("host profile") else "--h2d",
        floor_s=parse_floor(machine.floor_text or "10ms"),
        ram=ram_bytes,
        os_reserve=_size_option("--os-reserve", machine.os_reserve),
        container=outputs.container or "",
        disk_bytes_per_s=speed.disk_bw,
        disk_label="host profile" if speed.disk_bw_source.startswith("host profile") else "--disk-bw",
        tiers=tier_settings.costs if tier_settings is not None else None,
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
    return FitInputs(options, fork.tiers_dir, curve, coverage_policy, fork.coverage_path or "<curve>", observations,
                     outputs.plan_path or "", fork.capture_path or "", fork.storage_root, fork.model_id, gpus, ram_bytes, fork_notes, input_warnings,
                     tier_settings, trace_path=_trace_option(fork.trace_path, outputs.plan_path, fork.capture_path),
                     speed=speed, machine=host)


def write_fork_plan(plan_path, result, doc, tier_settings=None):
    """The fork's plan file for its chosen division (GGML_MOE_PLAN_FILE); none when unfittable.
    tier_settings: --pin-tier/--default-tier (none given: the plan's tiers are left as they are)."""
    if result.chosen is None:
        warn(f"unfittable: no plan written to {plan_path}")
        return
    from moetools.formats.plan import update_plan_locked

    host, device, tier = launchmod.plan_budget(result)
    if not result.host:
        warn("no --ram: the plan's host budget_bytes is 0 (no pins)")
    # device-fit owns the budgets and the tier; an existing pin_list (trace-tail's) and any other key are
    # kept. A new plan starts with an empty pin list. Under the plan folder's lock: trace-tail --follow may
    # be rewriting the pins at this moment.
    from moetools.devicefit.tiers import PlanTierSettings

    tiers = tier_settings or PlanTierSettings()
    update_plan_locked(plan_path, "device-fit", on_wait=warn, ladder=tiers.labels,
                       changes={"budget_bytes": host, "device_budget_bytes": device, "resident_tier": tier,
                                "cache_device": launchmod.plan_cache_device(result),
                                "pin_tier": tiers.pin_tier, "default_tier": tiers.default_tier})
    doc["plan"] = os.path.abspath(plan_path)


def _tier_doc(doc, settings, chosen):
    """device-fit's JSON `tiers` entry and, when priced, a note saying what the tiers cost."""
    from moetools.devicefit.tiers import tiers_doc

    entry = tiers_doc(settings, chosen)
    if entry is None:
        return
    doc["tiers"] = entry
    costs = settings.costs
    if costs is not None and chosen is not None and chosen.slots:
        doc["notes"].append(f"container tiers: {chosen.pinned} pins at tier {costs.pin_tier} ({costs.pin_bytes:,} bytes a record), "
                            f"the rest at tier {costs.default_tier} ({costs.default_bytes:,} bytes): {chosen.slots} slots")


def _daemon_files(fork, outputs):
    """--port N: the daemon's files for that port (exit 2 when none is there), its capture file as
    --capture's default; and a --plan that is the daemon's own plan goes to moetools' path instead
    (the daemon rewrites its plan every tick without merge or lock: formats/daemon_files.py).
    Returns (fork, outputs, PortFiles or None)."""
    from moetools.formats import daemon_files

    files = None
    if fork.port is not None:
        files = daemon_files.port_files(fork.port)
        if files is None or not files.existing():
            raise UsageError(daemon_files.missing_message(fork.port, files.folder if files else None))
        if not fork.capture_path:
            fork = fork._replace(capture_path=files.capture)
    if outputs.plan_path:
        plan_path, note = daemon_files.own_plan_instead(outputs.plan_path)
        if note:
            warn(note)
            outputs = outputs._replace(plan_path=plan_path)
    return fork, outputs, files


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
    if fork.port is not None and devices.runtime == "llama":
        raise UsageError("--port is the serving daemon's lane of the fork: not with --runtime llama")
    fork, outputs, daemon = _daemon_files(fork, outputs)
    from moetools.atomic import check_output_folder

    check_output_folder(outputs.plan_path, "--plan")
    coverage_policy = fork.coverage_policy
    flash_attn = context.flash_attn
    n_outputs = drafting.n_outputs
    if coverage_policy is not None and not fork.coverage_path:
        raise UsageError(f"--coverage-policy {coverage_policy} needs --coverage FILE (a curve from trace-tail --curve)")
    from_stdin = [flag for flag, path in (("--coverage", fork.coverage_path), ("--observations", fork.observations_path),
                                          ("--host", machine.host_path)) if path == "-"]
    if len(from_stdin) > 1:
        raise UsageError(f"{', '.join(from_stdin[:-1])} and {from_stdin[-1]} cannot {'both' if len(from_stdin) == 2 else 'all'} "
                         "read stdin")
    if context.fa_text is not None:
        flash_attn = context.fa_text != "off"
    if context.min_ctx < 1:
        raise UsageError("--min-ctx must be at least 1 token")
    host = hostplan.machine_of(machine.host_path, devices.vram, devices.gpu_text, machine.ram)
    # every machine figure, checked on either runtime (a bad --h2d is refused though only the fork streams)
    speed = _llama_speed(machine.floor_text, machine.ram_bw, machine.disk_bw, machine.threads, host, fork.h2d)
    if n_outputs is not None and n_outputs < 0:
        raise UsageError("--n-outputs must be 0 (the batch, -b) or more")
    batch_search = context.ubatch is None and context.batch is None
    context, batch_notes = _batch_sizes(context)
    if n_outputs is None:  # the target context's rows as the server sets them: llama-server's rule, which
        # the fork's server applies too (CambrianTech/llama.cpp tools/server/server-context.cpp load_model)
        speculative = bool(drafting.draft_path) or drafting.spec_type == "draft-mtp"
        n_outputs = server_outputs(context.batch, context.parallel, max(0, drafting.draft_n_max) if speculative else 0)
    settings = KVSettings(ctk=context.ctk, ctv=context.ctv, ubatch=context.ubatch, batch=context.batch, n_seq=context.parallel, unified=context.kv_unified,
                          swa_full=context.swa_full, flash_attn=flash_attn, outputs=n_outputs)
    gpus, rpcs = _offload_devices(devices.vram, devices.gpu_text, devices.vram_bw, devices.rpc_specs, devices.rpc_bw, host)
    ram_bytes = _ram_option(machine.ram, host)
    from moetools.gguf import open_model

    repo = is_repo(model_path)
    runtime = devices.runtime
    if drafting.draft_path and runtime == "fork":
        raise UsageError("--draft is planned with --runtime llama (the fork's division of one GPU has no draft model)")
    if drafting.draft_ngl is not None and drafting.draft_ngl < 0:
        raise UsageError("--draft-ngl must be 0 or more")
    mtp = drafting.spec_type == "draft-mtp"
    if drafting.draft_n_max < 0:
        raise UsageError("--spec-draft-n-max must be 0 or more")
    if mtp and drafting.draft_path:
        with open_model(drafting.draft_path, fetch) as model:
            borrowing = profile(model.architecture).borrowed_kv
        if not borrowing:
            raise UsageError("--spec-type draft-mtp drafts with the model's own NextN/MTP blocks: give no --draft "
                             "(a separate MTP head GGUF as --draft is not planned; a gemma4-assistant is)")
        mtp = False  # a Gemma 4 assistant: a second model (its -md context is llama.cpp's MTP type)
    if drafting.spec_type == "draft-simple" and not drafting.draft_path:
        raise UsageError("--spec-type draft-simple needs a draft model: give --draft MODEL")
    if mtp and runtime == "fork":
        raise UsageError("--spec-type draft-mtp is planned with --runtime llama")
    if mtp and (drafting.draft_ngl is not None or drafting.draft_device is not None):
        raise UsageError("--draft-ngl/--device-draft place a separate draft model; the MTP context runs on the "
                         "target's own layers and devices")
    if drafting.draft_device is not None and not drafting.draft_path:
        raise UsageError("--device-draft places a draft model: give --draft MODEL")
    flag_warnings = other_runtime_flags(runtime, placement, fork, outputs, machine)
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
    if runtime == "llama" and (fork.pin_tier is not None or fork.default_tier is not None):
        raise UsageError("--pin-tier and --default-tier are the streaming fork's container tiers (--runtime fork or auto)")
    if runtime in ("llama", "auto"):
        if repo:
            if outputs.plan_path or outputs.emit:
                raise UsageError("--plan and --emit take one model; give hf://ORG/REPO/PATH.gguf rather than a whole repo")
            for message in flag_warnings:
                warn(message)
            llama_options = lambda: _llama_options(  # noqa: E731  (one per set: a plan keeps state in its options)
                copy_settings(settings), speed=speed, ctx=context.ctx, reserve=devices.reserve, margin=devices.margin,
                ngl=placement.ngl, ts_text=placement.ts_text, n_cpu_moe=placement.n_cpu_moe, main_gpu=placement.main_gpu,
                depth=placement.depth, os_reserve=machine.os_reserve, overrides=overrides_of(placement))
            return fit_repo_llama(model_path, fetch, llama_options, rpcs + gpus, ram_bytes, outputs.json_flag)
        if mtp and profile(facts.architecture).rs_rollback:
            # common_params_speculative::need_n_rs_seq: the target's recurrent state keeps n_max snapshots
            settings.rs_seq = drafting.draft_n_max
        options = _llama_options(settings, speed=speed, ctx=context.ctx, reserve=devices.reserve, margin=devices.margin, ngl=placement.ngl,
                                 ts_text=placement.ts_text, n_cpu_moe=placement.n_cpu_moe, main_gpu=placement.main_gpu,
                                 depth=placement.depth, os_reserve=machine.os_reserve, overrides=overrides_of(placement))
        options.prefer = placement.prefer or "balanced"
        options.batch_search = batch_search and check is None
        options.spill = placement.spill or "auto"
        if mtp:
            draftmod.check_mtp(model_path, facts)
            options.draft = draftmod.Draft(facts, model_path, draftmod.draft_kv(settings, drafting.draft_ctk, drafting.draft_ctv),
                                           spec_type="draft-mtp", n_max=drafting.draft_n_max)
        if drafting.draft_path:
            with open_model(drafting.draft_path, fetch) as model:
                draftmod.check_compatible(model_path, target_vocab, drafting.draft_path, draftmod.vocab_of(model, decode=True))
                draft_facts = core.model_facts(model)
                if draft_facts.shape.borrowed and not profile(facts.architecture).assistant_target:
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
            run_check(model_path, facts, rpcs + gpus, ram_bytes, options, line, shrink, outputs.json_flag,
                       decimal_vram_notes(devices.vram) + check_notes + hostplan.notes(options.speed, host),
                       check_warnings + ((forced if isinstance(forced, list) else [forced]) if forced else []),
                       machine=hostplan.machine_doc(options.speed, host))
            return
        beside = None
        if runtime == "auto":
            reason = fork_reason(facts, model_path, fork, outputs, gpus, rpcs, ram_bytes, options.os_reserve,
                                 speculative=bool(drafting.draft_path) or mtp)
            if reason:
                inputs = fork_inputs(devices, context, fork, machine, outputs, copy_settings(settings), gpus, ram_bytes,
                                     speed, host)
                fork_doc, fork_result, fork_launch = fit_model(facts, None, model_path, inputs)
                fork_doc["applies_because"] = reason
                if daemon is not None:
                    fork_doc["daemon"] = daemon.to_doc()
                if outputs.plan_path:
                    write_fork_plan(outputs.plan_path, fork_result, fork_doc, inputs.tier_settings)
                beside = (fork_doc, fork_result, fork_launch)
            elif outputs.emit == "env":
                raise UsageError("--emit env is the streaming fork's launch, and the fork cannot run this plan (it "
                                 "streams into one local GPU: no RPC devices, no draft, not a dense model)")
        _run_llama(model_path, facts, rpcs + gpus, ram_bytes, options, outputs.emit, outputs.json_flag, decimal_vram_notes(devices.vram) + batch_notes,
                   flag_warnings + ((forced if isinstance(forced, list) else [forced]) if forced else []), beside=beside,
                   fetch_stats=fetch_stats, machine=host)
        return
    if overrides_of(placement):
        raise UsageError("-ot/--cpu-moe are llama.cpp's placement: evaluate them with --runtime llama")
    if rpcs:
        raise UsageError("--rpc needs --runtime llama: the fork streams experts into one local GPU")
    if not gpus:
        raise UsageError("--runtime fork needs the GPU it streams to: give --vram SIZE (or --gpu NAME)")
    inputs = fork_inputs(devices, context, fork, machine, outputs, settings, gpus, ram_bytes, speed, host)
    options = inputs.options
    if repo:
        if outputs.plan_path or outputs.emit:
            raise UsageError("--plan and --emit take one model; give hf://ORG/REPO/PATH.gguf rather than a whole repo")
        return fit_repo(model_path, fetch, inputs, outputs.json_flag)
    doc, result, launch = fit_model(facts, fetch_stats, model_path, inputs)
    if daemon is not None:
        doc["daemon"] = daemon.to_doc()
    first_vram = devices.vram.split(",")[0].strip() if devices.vram else ""
    if decimal_vram_notes(first_vram):  # the first GPU's size was decimal: say so in its row
        doc["vram_asked"] = first_vram
    for message in flag_warnings + doc["warnings"]:
        warn(message)
    if outputs.plan_path:
        write_fork_plan(outputs.plan_path, result, doc, inputs.tier_settings)
    if outputs.emit and outputs.json_flag:
        print_json(emit_doc(outputs.emit, doc, launch, options.kv))
    elif outputs.emit:
        echo_shell(emit_text(outputs.emit, doc, launch, options.kv))
    else:
        # the fork's launch as one runnable line, a note (one line for the terminal to wrap) as --runtime
        # llama shows its llama-server line
        launch_line = fork_screen_lines(launch) if result.chosen is not None else []
        render(doc, lambda: tables(doc), outputs.json_flag, notes=launch_line + doc["notes"])
    if result.chosen is None:
        click.get_current_context().exit(1)
