"""device-fit --check's answer: the llama.cpp command line's placement evaluated on device-fit's devices,
device-fit's own plan beside it on the same devices and context, what it would change and what that buys
(the line itself is parsed in devicefit/check.py; device_fit_check in run.py maps it onto the option
records)."""

import shlex

import click

from moetools.devicefit import devices as devicesmod
from moetools.devicefit import compare as comparemod
from moetools.devicefit import upstream, upstream_doc
import moetools.devicefit.launch as launchmod
from moetools.devicefit.render import llama_tables
from moetools.errors import UsageError
from moetools.output import render, warn
from moetools.sizes import format_size


def run_check(model_path, facts, offload, ram_bytes, options, line, shrink, json_flag, notes=(), warnings=(), machine=None):
    """--check: evaluate the command line's placement (options), plan device-fit's own on the same
    devices and context, print both, exit 1 when the line does not fit. shrink: (least context, step)
    when --fit on may shrink a training context that does not fit (common/fit.cpp), else None.
    machine: the document's `machine` entry (hostplan.machine_doc), or None."""
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
    doc = upstream_doc.result_doc(result, facts, model_path, kv_flags)
    doc["notes"] = list(notes) + doc["notes"]
    doc["warnings"] = list(warnings) + doc["warnings"]
    if machine is not None:
        doc["machine"] = machine
    if ram_bytes is None:
        doc["warnings"].append("no --ram: the CPU's capacity is unknown (0 in the ledger); page-cache misses are not counted")
    own_options = options.without_placement()
    own_options.ctx = (result.chosen or result.alternatives[0]).context
    try:
        # as a plan without --check chooses it
        own = comparemod.refine(upstream.plan(facts, offload, cpu, own_options), facts, offload, cpu, own_options) \
            if options.user_placement else result
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
