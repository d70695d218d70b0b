"""`moetools trace-tail`: replay or follow an expert trace and measure residency policies.

Examples:

    moetools trace-tail run.trace --model k3.gguf --budget-slots 2048
    moetools trace-tail run.trace --synth-layers 48 --curve --json | moetools device-fit k3.gguf --vram 32G --coverage -
    moetools trace-tail qwen.route.csv --curve --plot qwen.svg --write-trace qwen.trace
    moetools trace-tail /tmp/moe.trace --model k3.gguf --follow --plan plan.json --budget-bytes 64G
    moetools trace-tail --port 58057 --model k3.gguf --plan k3.plan.json
"""

import os
import time

import click

from moetools import helptext
from moetools import output
from moetools.errors import InputError, UsageError
from moetools.sourceopts import source_options
from moetools.tracetail.options import (layers_options, replay_options, curves_options, policies_options, extras_options, follow_options,
                                         daemon_options)

POLICY_ORDER = ("belady", "predictive", "decay_bandit", "lfu", "lru", "prefill_pin")


def _parse_slots(text):
    if text in (None, "", "auto"):
        return "auto"
    budgets = []
    for part in text.split(","):
        part = part.strip()
        try:
            budgets.append(int(part))
        except ValueError:
            raise UsageError(f"--curve: {part!r} is not a whole number of slots") from None
    if sorted(set(budgets)) != budgets:
        budgets = sorted(set(budgets))
    return budgets


class _Inputs:
    """What the command learned about the trace and model before analysing."""

    def __init__(self):
        self.layer_map = None
        self.tokens = None
        self.phases = None
        self.fmt = None
        self.meta = {}
        self.tokeniser = None
        self.n_layers = self.n_expert = self.top_k = 0
        self.expert_bytes_by_layer = {}
        self.open_last = False
        self.daemon_drain = None  # (start, length, tokens the daemon folds) of a 12-byte trace, --daemon-probe


def _layer_map(model, synth_layers, experts, top_k, fetch=None):
    from moetools.tracetail.reader import LayerMap

    if model:
        return LayerMap.from_model(model, fetch)
    if synth_layers:
        return LayerMap.synth(synth_layers, experts or 0, top_k or 0)
    return None


TOKENISE_CHUNK = 16 << 20  # bytes of records fed at a time (a progress step; bounded temporaries)


def _tokenise(tok, data):
    """Tokens of a whole 12-byte trace, fed in chunks under a progress bar (bytes, with a total)."""
    from moetools.progress import progress

    tokens = []
    view = memoryview(data)
    with progress(total=len(data), desc="tokenising") as bar:
        for start in range(0, len(data), TOKENISE_CHUNK):
            chunk = view[start:start + TOKENISE_CHUNK]
            tokens.extend(tok.feed(chunk))
            bar.update(len(chunk))
    return tokens


def _read_inputs(trace, fmt, layer_map, daemon_drain=False):
    """Whole-file read: tokens and phases from any format (with `daemon_drain`, also the tokens of
    the daemon's one drain of a 12-byte trace: daemon_probe.drain_window)."""
    from moetools.tracetail import importers, reader

    data = reader.read_whole(trace)
    name = "<stdin>" if trace == "-" else trace
    if fmt == "auto":
        fmt = importers.detect_format(name, data[:64])
    got = _Inputs()
    got.fmt = fmt
    if fmt == "trace":
        if layer_map is None:
            raise UsageError("a 12-byte trace needs --model GGUF or --synth-layers N to map tensor keys to layers")
        if not data:
            raise InputError(name, "empty trace: no records")
        tok = reader.Tokeniser(layer_map, name)
        tokens = _tokenise(tok, data)
        last = tok.flush()
        if last is not None:
            tokens.append(last)
            got.open_last = True  # the daemon never counts it (no next token began)
        if tok.tail:
            output.warn(f"{name}: the last {len(tok.tail)} bytes are a torn record (size not a multiple of 12); ignored")
        tok.check_model(name)
        if tok.unknown:
            output.warn(f"{name}: {tok.unknown} of {tok.records} records ({len(tok.unknown_keys)} keys) match no expert tensor of {layer_map.source}; skipped")
        got.tokeniser = tok
        got.tokens, got.phases = tokens, [None] * len(tokens)
        if daemon_drain:
            got.daemon_drain = _daemon_drain(data, layer_map, name, tokens[:-1] if got.open_last else tokens)
        got.meta = {"records": tok.records, "unknown_records": tok.unknown, "unknown_keys": len(tok.unknown_keys),
                    "torn_bytes": len(tok.tail), "fnv_basis": tok.basis}
    else:
        imported = importers.import_trace(fmt, data, name)
        if layer_map is not None and layer_map.architecture:
            _check_import_against_model(imported, layer_map, name)
        got.tokens, got.phases = imported.tokens, imported.phases
        got.n_layers, got.n_expert, got.top_k = imported.n_layers, imported.n_expert, imported.top_k
        got.expert_bytes_by_layer = imported.expert_bytes_by_layer
        limit = (layer_map.n_expert if layer_map else 0) or imported.n_expert or reader.MAX_EXPERTS
        for index, ids in enumerate(got.tokens):
            experts = reader.split_ids(ids)[1]
            if len(experts) and int(experts.max()) >= limit:
                raise InputError(name, f"token {index}: expert id {int(experts.max())} is out of range (experts per layer: {limit})")
    if not got.tokens:
        raise InputError(name, "no tokens in the trace (every record had an unknown key?)")
    return got


def _daemon_drain(data, layer_map, name, folded):
    """(start, length, tokens) of the daemon's one drain of the whole file from offset 0: past 4 MiB
    it reads only the last window, from a whole record, with a fresh segmenter (trace_tail.rs
    `MoeTraceTail::drain`); the open last token is never folded."""
    from moetools.tracetail import reader
    from moetools.tracetail.daemon_probe import drain_window

    start, jumped = drain_window(len(data))
    if not jumped:
        return start, len(data), folded
    return start, len(data), reader.Tokeniser(layer_map, name).feed(memoryview(data)[start:])


def _check_import_against_model(imported, layer_map, name):
    """A CSV/JSON trace recorded on another model than --model is an error (exit 2), not a warning:
    its preamble's arch=, n_layer= (blocks) and n_expert= must match, and every layer it routes must
    be a MoE block of the model."""
    from moetools.tracetail import reader

    model = layer_map.source
    checks = [("architecture", imported.architecture, layer_map.architecture),
              ("blocks (n_layer)", imported.n_layers, layer_map.block_count),
              ("experts per layer (n_expert)", imported.n_expert, layer_map.n_expert)]
    for what, theirs, ours in checks:
        if theirs and ours and theirs != ours:
            raise InputError(name, f"a trace of another model: its {what} is {theirs}, {model} has {ours}")
    moe_blocks = {layer for layer, _ in layer_map.table.values()}
    seen = set()
    for ids in imported.tokens:
        seen.update(reader.split_ids(ids)[0].tolist())
    stray = sorted(seen - moe_blocks)
    if stray:
        raise InputError(name, f"a trace of another model: it routes experts in layer {stray[0]}, which is not a MoE "
                         f"block of {model} ({len(stray)} such layers)")


def _settings(got, layer_map, options):
    from moetools.tracetail.core import Settings

    model = layer_map if layer_map is not None and layer_map.n_expert else None
    n_expert = options["experts"] or (model.n_expert if model else 0) or got.n_expert
    top_k = options["top_k"] or (layer_map.top_k if layer_map else 0) or got.top_k
    moe_layers = (layer_map.moe_layers if layer_map else 0) or got.n_layers
    return Settings(budget=None, curve_budgets=None, window=options["window"], prefill=options["prefill"],
                    top_k=top_k, moe_layers=moe_layers if n_expert else 0, n_expert=n_expert,
                    policies=options["policies"], instruments=options["instruments"], threads=options["threads"] or 0)


def _expert_bytes(option, layer_map, got):
    if option:
        return option
    if layer_map is not None and layer_map.expert_bytes:
        return layer_map.expert_bytes
    from moetools.tracetail.reader import mean_expert_bytes

    return mean_expert_bytes(got.expert_bytes_by_layer) if got else 0


def _budget(budget_slots, budget_bytes, expert_bytes):
    if budget_slots is not None and budget_bytes is not None:
        raise UsageError("give --budget-slots or --budget-bytes, not both")
    if budget_bytes is not None:
        if not expert_bytes:
            raise UsageError("--budget-bytes needs the bytes of one expert: give --model or --expert-bytes")
        return int(budget_bytes // expert_bytes)
    return budget_slots


def _summary_tables(doc):
    from moetools.output import Table

    hit = doc["hit"]
    rows = []
    for name in POLICY_ORDER:
        if name in hit:
            gap = doc["gap_to_belady"].get(name)
            closed = doc["gap_closed"].get(name)
            rows.append([name, f"{hit[name]:.6f}", "ceiling" if name == "belady" else f"{-gap:+.6f}" if gap is not None else "",
                         "" if name == "belady" or closed is None else f"{100 * closed:.1f}%"])
    tables = [Table(f"hit ratio at {doc['budget_slots']:,} slots (demand caches)", ["policy", "hit", "vs belady", "LRU->Belady gap closed"],
                    rows, right_align=(1, 2, 3), caption=f"over {doc['requests']:,} decode requests")]
    facts = [["tokens (prefill + decode)", f"{doc['tokens']} ({doc['prefill_tokens']} + {doc['decode_tokens']})"],
             ["experts per decode token", f"{doc['experts_per_token']:.1f}"],
             ["distinct experts (decode)", f"{doc.get('distinct', 0):,}"]]
    for key in ("records", "unknown_records", "torn_bytes", "fnv_basis"):
        if key in doc:
            facts.append([key.replace("_", " "), str(doc[key])])
    probe = doc.get("daemon_probe")
    if probe:
        for key, value in probe.items():
            shown = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in value.items()) if isinstance(value, dict) else value
            facts.append([f"daemon: {key.replace('_', ' ')}", "-" if value is None else str(shown)])
    for key, value in doc.get("instruments", {}).items():
        facts.append([key.replace("_", " "), "-" if value is None else f"{value:.4f}"])
    for key, value in doc.get("topk_hit", {}).items():
        facts.append([f"{key.replace('_', ' ')} top-S set (bypasses the cache)", f"{value:.4f}"])
    tables.append(Table("trace and instruments", ["what", "value"], facts, right_align=(1,)))
    return tables


def _curve_table(curve):
    from moetools.output import Table

    names = [name for name in POLICY_ORDER if name in curve["hit"]]
    rows = [[f"{s:,}"] + [f"{curve['hit'][name][i]:.4f}" for name in names] for i, s in enumerate(curve["slots"])]
    return Table("coverage curve (hit ratio over decode requests)", ["slots"] + names, rows, right_align=tuple(range(len(names) + 1)))


def _plan_budget(plan_path, explicit_budget_bytes, tiers=None):
    """(budget for the pin ceiling, bytes trace-tail writes as budget_bytes or None to keep the
    plan's) -- read BEFORE any work, so a plan that cannot be overwritten fails first (exit 2), as
    does one whose tiers are outside the container's ladder (`tiers`: a PlanTiers).

    An explicit --budget-bytes/--budget-slots is trace-tail's to write; otherwise an existing
    plan's budget (device-fit's division) is kept and sets the pin ceiling."""
    from moetools.formats.plan import active_cache_budget, existing_plan_doc, plan_tiers

    doc = existing_plan_doc(plan_path)
    if doc is not None:
        plan_tiers(doc, plan_path, tiers.ladder if tiers else None)
    if explicit_budget_bytes is not None:
        return int(explicit_budget_bytes), int(explicit_budget_bytes)
    if doc is not None and active_cache_budget(doc) > 0:
        return active_cache_budget(doc), None
    return None, None


def _budget_from_plan(budget_bytes, expert_bytes, total_slots, plan_path):
    """The replay budget in slots when only the plan gives one (at most every slot of the model)."""
    slots = max(1, int(budget_bytes // expert_bytes))
    if total_slots and slots > total_slots:
        slots = total_slots
    output.info(f"budget from {plan_path}: {slots:,} slots")
    return slots


class _Stopped(Exception):
    """--follow was asked to stop by SIGINT or SIGTERM."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


class _StopSignals:
    """While following, SIGINT and SIGTERM stop the loop cleanly (summary printed, plan left valid).

    A signal that arrives while the plan file is being replaced waits until the write is done
    (`with stops.held():`), so the plan is always the old one or the new one, never neither."""

    def __init__(self):
        self.signum = None
        self.holding = False
        self.previous = {}

    def _handle(self, signum, frame):
        self.signum = signum
        if not self.holding:
            raise _Stopped(signum)

    def __enter__(self):
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            for name in ("SIGINT", "SIGTERM"):
                number = getattr(signal, name, None)
                if number is not None:
                    self.previous[number] = signal.signal(number, self._handle)
        return self

    def __exit__(self, *exc):
        import signal

        for number, handler in self.previous.items():
            signal.signal(number, handler)
        return False

    def held(self):
        import contextlib

        @contextlib.contextmanager
        def holding():
            self.holding = True
            try:
                yield
            finally:
                self.holding = False
            if self.signum is not None:
                raise _Stopped(self.signum)

        return holding()


class PlanTiers:
    """--pin-tier / --default-tier as ladder indices (None: not given) and the container's ladder
    labels (None without --container)."""

    def __init__(self, pin_tier=None, default_tier=None, ladder=None):
        self.pin_tier, self.default_tier, self.ladder = pin_tier, default_tier, ladder


def _plan_tiers(curves):
    """The PlanTiers of trace-tail's options; UsageError (exit 2) for a tier option without --plan,
    an unknown tier label, or a tier outside the container's ladder."""
    if not curves.plan_path and (curves.pin_tier is not None or curves.default_tier is not None or curves.container):
        raise UsageError("--pin-tier, --default-tier and --container set a plan's tiers: give --plan FILE")
    from moetools.tierlabels import tier_option

    ladder = None
    if curves.container:
        from moetools.formats.container import read_ladder

        ladder = read_ladder(curves.container).labels
    return PlanTiers(*(tier_option(text, option, ladder) if text is not None else None
                       for text, option in ((curves.pin_tier, "--pin-tier"), (curves.default_tier, "--default-tier"))),
                     ladder=ladder)


_WARNED_PLANS = set()  # plans already warned about in this process (--follow rewrites one many times)


def _write_plan(path, budget_bytes, pins, tiers=None):
    """Update the plan's pin_list (and budget_bytes when trace-tail owns it this run, and the tiers
    given); each pin keeps its tier, every other key is kept. Returns the new mtime in whole seconds.
    A plan left without a device budget (trace-tail creates one when the file does not exist) says once
    on stderr that the fork's VRAM cache is off."""
    from moetools.formats.plan import plan_mtime, update_plan_locked, vram_cache_off_warning

    tiers = tiers or PlanTiers()
    # a read-modify-write of a file device-fit writes too: under the folder's lock, held only for it
    doc = update_plan_locked(path, "trace-tail", {"pin_list": pins, "budget_bytes": budget_bytes, "pin_tier": tiers.pin_tier,
                                                  "default_tier": tiers.default_tier}, ladder=tiers.ladder)
    message = vram_cache_off_warning(path, doc)
    key = os.path.abspath(os.fspath(path))
    if message and key not in _WARNED_PLANS:
        _WARNED_PLANS.add(key)
        output.warn(message)
    return plan_mtime(path)


@click.command("trace-tail", epilog=helptext.TRACE_TAIL)
@click.argument("trace", required=False)
@daemon_options
@layers_options
@replay_options
@curves_options
@policies_options
@extras_options
@follow_options
@click.option("--json", "json_flag", is_flag=True, help="JSON even on a terminal.")
@source_options
def trace_tail_command(trace, daemon, layers, replay, curves, policies, extras, follow, json_flag, fetch):
    """Replay or follow an expert trace (TRACE, `-` for stdin, or the serving daemon's with --port N)
    and measure residency policies.

    Rebuilds tokens from the fork's 12-byte records (or a CSV/JSON-lines/numpy import), splits
    prefill from decode and reports, at --budget-slots, the request hit ratio of LRU, LFU, the
    decayed-frequency bandit, last-N-token recency, prefill pinning and Belady's MIN (the offline
    ceiling), plus repeat recall, predicted-delta recall and schedulable coverage. --curve gives
    the coverage-vs-slots curve that `device-fit --coverage` reads.
    """
    trace, once, port_files = _daemon_trace(trace, daemon.port, replay.once)
    replay = replay._replace(once=once)
    if curves.plan_path:
        curves = curves._replace(plan_path=_own_plan(curves.plan_path))
    from moetools.atomic import check_output_folder

    for path, option in ((curves.plan_path, "--plan"), (extras.output_path, "-o"), (curves.write_trace, "--write-trace"),
                         (extras.table_path, "--write-table"), (curves.plot, "--plot")):
        check_output_folder(path, option)
    budget_bytes = replay.budget_bytes
    curve = curves.curve
    expert_bytes = replay.expert_bytes
    from moetools.sizes import parse_size

    if layers.model and layers.synth_layers:
        raise UsageError("give --model or --synth-layers, not both")
    budget_bytes = parse_size(budget_bytes) if budget_bytes is not None else None
    expert_bytes = parse_size(expert_bytes) if expert_bytes is not None else None
    if replay.budget_slots is not None and replay.budget_slots <= 0:
        raise UsageError(f"--budget-slots {replay.budget_slots}: a cache needs at least 1 slot")
    options = {"experts": layers.experts, "top_k": layers.top_k, "window": replay.window, "prefill": replay.prefill}
    if curves.plot and curve is None:
        curve = "auto"
    from moetools.tracetail.core import DEMAND_POLICIES, check_pin_policy, select_policies

    options["policies"] = DEMAND_POLICIES if policies.policies_text is None else select_policies(policies.policies_text.split(","))
    options["instruments"] = (policies.policies_text is None) if policies.instruments is None else policies.instruments
    options["threads"] = policies.threads
    check_pin_policy(policies.pin_policy, options["policies"] if curves.plan_path else DEMAND_POLICIES)
    options["pin_policy"] = policies.pin_policy
    options["plan_tiers"] = _plan_tiers(curves)
    layer_map = _layer_map(layers.model, layers.synth_layers, layers.experts, layers.top_k, fetch)
    if extras.table_path:
        if layer_map is None:
            raise UsageError("--write-table needs --model GGUF or --synth-layers N")
        from moetools import atomic
        from moetools.formats.trace import tkey_table_doc

        atomic.write_json(extras.table_path, tkey_table_doc(layer_map.names))
        output.info(f"wrote {len(layer_map.names)} tensor keys to {extras.table_path}")
    if not replay.once:
        if curve is not None or curves.write_trace or extras.daemon_probe:
            raise UsageError("--curve, --plot, --write-trace and --daemon-probe work on a whole trace (--once)")
        return _follow(trace, layers.fmt, layer_map, options, replay.budget_slots, budget_bytes, expert_bytes, curves.plan_path, follow.poll, follow.max_idle, follow.max_tokens)
    if follow.max_idle is not None or follow.max_tokens is not None:
        raise UsageError("--max-idle and --max-tokens apply to --follow")
    options["daemon_probe"] = extras.daemon_probe
    options["daemon_files"] = port_files
    _once(trace, layers.fmt, layer_map, options, replay.budget_slots, budget_bytes, expert_bytes, curve, curves.plot, curves.write_trace, curves.plan_path,
          extras.output_path, json_flag)


def _daemon_trace(trace, port, once):
    """(TRACE, once, the daemon's PortFiles or None): with --port N the trace is the daemon's
    moe-trace-N.bin (formats/daemon_files.py), followed unless --once; exit 2 when it is not there."""
    if port is None:
        if trace is None:
            raise UsageError("give TRACE (a trace file, - for stdin) or --port N (the serving daemon's lane on port N)")
        return trace, True if once is None else once, None
    if trace is not None:
        raise UsageError(f"give TRACE or --port {port}, not both (--port reads the serving daemon's trace)")
    from moetools.formats import daemon_files

    files = daemon_files.port_files(port)
    if files is None or not os.path.isfile(files.trace):
        raise UsageError(daemon_files.missing_message(port, files.folder if files else None, [files.trace] if files else None))
    return files.trace, False if once is None else once, files


def _own_plan(plan_path):
    """--plan, unless it is the serving daemon's own plan: then moetools' plan beside it, said once."""
    from moetools.formats.daemon_files import own_plan_instead

    plan_path, note = own_plan_instead(plan_path)
    if note:
        output.warn(note)
    return plan_path


def _daemon_probe_doc(got, layer_map, settings, expert_bytes, explicit_budget, replay_budget, port_files):
    """--daemon-probe: the daemon's figures over the tokens its one drain folds, the drain's window
    and its pin ceiling (daemon_probe.py). The ceiling's lease: --budget-bytes/--budget-slots, else
    with --port the daemon's plan's budget_bytes (read, never written), else the replay's budget."""
    from moetools.tracetail.daemon_probe import MAX_DRAIN_BYTES, daemon_probe, pin_ceiling_doc

    if got.daemon_drain is not None:
        start, length, folded = got.daemon_drain
        drain = {"drain_start": start, "drain_bytes": length - start, "drain_skipped_bytes": start}
    else:  # an import: the daemon reads only 12-byte traces, so every token is folded
        folded = got.tokens[:-1] if got.open_last else got.tokens
        drain = {"drain_start": None, "drain_bytes": None, "drain_skipped_bytes": None}
    doc = daemon_probe(folded)
    doc.update(drain, max_drain_bytes=MAX_DRAIN_BYTES)
    budget, source = explicit_budget, "option"
    if budget is None and port_files is not None:
        budget, source = _daemon_plan_budget(port_files.plan), "daemon plan"
    if budget is None:
        budget, source = replay_budget, "replay budget"
    # the daemon's geometry (moe_serving.rs): the BLOCK count, experts per layer, and the expert bytes
    # summed over the MoE layers -- from the model (or an import's preamble), else the options
    by_layer = (layer_map.expert_bytes_by_layer if layer_map is not None else None) or got.expert_bytes_by_layer
    blocks = (layer_map.block_count if layer_map is not None else 0) or got.n_layers
    n_expert = settings.n_expert
    total = sum(by_layer.values()) * n_expert if by_layer else int(expert_bytes or 0) * settings.moe_layers * n_expert
    doc.update(pin_ceiling_doc(budget, source, total, blocks, n_expert))
    return doc


def _daemon_plan_budget(path):
    """The daemon plan's budget_bytes (the lease its pin ceiling halves), None without one."""
    from moetools.formats.plan import existing_plan_doc

    doc = existing_plan_doc(path)
    budget = doc.get("budget_bytes") if doc else None
    return budget if isinstance(budget, int) and not isinstance(budget, bool) and budget >= 0 else None


def _once(trace, fmt, layer_map, options, budget_slots, budget_bytes, expert_bytes, curve, plot, write_trace, plan_path,
          output_path, json_flag):
    from moetools import atomic
    from moetools.formats.curve import Curve, write_curve
    from moetools.tracetail.core import analyse, resolve_phases

    got = _read_inputs(trace, fmt, layer_map, daemon_drain=bool(options.get("daemon_probe")))
    settings = _settings(got, layer_map, options)
    expert_bytes = _expert_bytes(expert_bytes, layer_map, got)
    settings.budget = _budget(budget_slots, budget_bytes, expert_bytes)
    pin_budget = written_budget = None
    if plan_path:
        if not expert_bytes:
            raise UsageError("--plan needs the bytes of one expert: give --model or --expert-bytes")
        explicit = budget_bytes if budget_bytes is not None else (budget_slots * expert_bytes if budget_slots else None)
        pin_budget, written_budget = _plan_budget(plan_path, explicit, options["plan_tiers"])
        if settings.budget is None and pin_budget:
            settings.budget = _budget_from_plan(pin_budget, expert_bytes, settings.moe_layers * settings.n_expert, plan_path)
    settings.curve_budgets = _parse_slots(curve) if curve is not None else None
    if write_trace:
        from moetools.formats.trace import write_trace as write_records
        from moetools.tracetail.importers import tokens_to_records

        tkeys, experts = tokens_to_records(got.tokens, resolve_phases(got.tokens, got.phases, settings))
        write_records(write_trace, tkeys, experts)
        output.info(f"wrote {len(tkeys):,} records to {write_trace}")
    from moetools.progress import progress

    def stage(desc, total, unit):
        return progress(total=total, desc=desc, unit=unit)

    result = analyse(got.tokens, got.phases, settings, progress=stage)
    summary = {"trace": trace, "format": got.fmt, "layer_map": layer_map.source if layer_map else None, **got.meta, **result.summary}
    summary["expert_bytes"] = int(expert_bytes)
    summary["budget_bytes"] = int(budget_bytes) if budget_bytes is not None else int(settings.budget * expert_bytes)
    if options.get("daemon_probe"):
        explicit = budget_bytes if budget_bytes is not None else (budget_slots * expert_bytes if budget_slots else None)
        summary["daemon_probe"] = _daemon_probe_doc(got, layer_map, settings, expert_bytes, explicit, summary["budget_bytes"],
                                                    options.get("daemon_files"))
    if plan_path:
        from moetools.tracetail.core import plan_pins

        if pin_budget is None:
            pin_budget = written_budget = summary["budget_bytes"]
        engine = result.extra["engine"]
        _write_plan(plan_path, written_budget, plan_pins(engine, pin_budget, expert_bytes, options["pin_policy"]),
                    options["plan_tiers"])
    if curve is not None:
        if not result.curve:
            raise InputError(trace, "no decode tokens: nothing to build a curve from")
        doc_curve = Curve(result.curve["slots"], result.curve["hit"], requests=summary["requests"], tokens=summary["tokens"],
                          decode_tokens=summary["decode_tokens"],
                          extra={"demand_policies": result.curve["demand_policies"],
                                 "ceiling_policies": result.curve["ceiling_policies"],
                                 **({"topk_instruments": result.curve["topk_instruments"]} if "topk_instruments" in result.curve else {}),
                                 "distinct": summary["distinct"], "total_slots": summary["total_slots"],
                                 "expert_bytes": summary["expert_bytes"], "summary": summary})
        doc = doc_curve.to_doc()
        if plot:
            from moetools.tracetail.svg import curve_svg

            atomic.write_text(plot, curve_svg(result.curve["slots"], result.curve["hit"], f"trace-tail: {trace}"))
        if output_path:
            write_curve(output_path, doc_curve)
        output.render(doc, lambda: [_curve_table(result.curve)] + _summary_tables(summary), json_flag)
        return
    if output_path:
        atomic.write_json(output_path, summary)
    output.render(summary, lambda: _summary_tables(summary), json_flag)


def _follow(trace, fmt, layer_map, options, budget_slots, budget_bytes, expert_bytes, plan_path, poll, max_idle, max_tokens):
    from moetools.tracetail import core, reader

    if fmt not in ("auto", "trace"):
        raise UsageError("--follow reads the 12-byte trace format only")
    if layer_map is None:
        raise UsageError("a 12-byte trace needs --model GGUF or --synth-layers N to map tensor keys to layers")
    got = _Inputs()
    settings = _settings(got, layer_map, options)
    expert_bytes = _expert_bytes(expert_bytes, layer_map, None)
    budget = _budget(budget_slots, budget_bytes, expert_bytes)
    total = settings.moe_layers * settings.n_expert
    if plan_path and not expert_bytes:
        raise UsageError("--plan needs the bytes of one expert: give --model or --expert-bytes")
    pin_budget = written_budget = None
    if plan_path:
        explicit = budget_bytes if budget_bytes is not None else (budget_slots * expert_bytes if budget_slots else None)
        pin_budget, written_budget = _plan_budget(plan_path, explicit, options["plan_tiers"])
        if budget is None and pin_budget:
            budget = _budget_from_plan(pin_budget, expert_bytes, total, plan_path)
    if budget is None:
        if not total:
            raise UsageError("--follow needs --budget-slots (or --budget-bytes), or a model / --experts for the default")
        budget = max(1, total // 4)
    core.check_budgets([budget], total, "slots of the model (layers x experts)")
    settings.budget = budget
    if plan_path and pin_budget is None:
        pin_budget = written_budget = budget * expert_bytes
    engine = core.Engine(settings, core.model_space(layer_map, settings.n_expert), keep_decode=False)
    tokeniser = reader.Tokeniser(layer_map, trace)
    events = reader.follow_stdin() if trace == "-" else reader.follow(trace, poll=poll, max_idle=max_idle)
    last_plan = pending = None
    last_mtime = None
    count = 0
    stopped = None
    with _StopSignals() as stops:
        try:
            for kind, payload in core.follow_session(events, tokeniser, engine, trace, max_tokens=max_tokens):
                if kind == "notice":
                    output.info(payload)
                    continue
                if plan_path:
                    pins = tuple(core.plan_pins(engine, pin_budget, expert_bytes, options["pin_policy"]))
                    pending = pins if pins != last_plan else None
                    # The fork reloads on a change of st_mtime's whole seconds: a second write within the
                    # same second would be invisible, so changes are coalesced until the clock moves on.
                    due = pending is not None and (last_mtime is None or int(time.time()) > last_mtime)
                    payload["plan_written"] = due
                    if due:
                        with stops.held():
                            last_mtime = _write_plan(plan_path, written_budget, list(pins), options["plan_tiers"])
                            last_plan, pending = pins, None
                count += 1  # before the line goes out: a signal between the two must not lose a printed token
                output.print_json_line(payload)
        except _Stopped as stop:
            stopped = stop.signum
        stops.holding = True  # the summary and the last plan write are not interrupted again
        if plan_path and pending is not None:
            _write_plan(plan_path, written_budget, list(pending), options["plan_tiers"])
    if tokeniser.unknown:
        output.warn(f"{trace}: {tokeniser.unknown} of {tokeniser.records} records match no expert tensor of {layer_map.source}; skipped")
    if tokeniser.tail:
        output.warn(f"{trace}: {len(tokeniser.tail)} bytes of a torn record were left unread at the end")
    output.info(f"{count} decode tokens")
    if stopped is not None:
        import signal

        output.info("interrupted" if stopped == getattr(signal, "SIGINT", None) else "terminated")
        # 128 + the signal's number, as a shell reports a process stopped by it (130 for Ctrl-C)
        click.get_current_context().exit(128 + int(stopped))
