"""Which layers' experts leave each GPU: device-fit's choice beside the alternatives a user meets.

At the chosen context and batch sizes, three placements of the same devices are evaluated as device-fit
evaluates any placement (its ledger, whether it fits, decode and prompt speed):
- device-fit's own (the experts of the first layers of each device's range go to the CPU);
- the same budgets with the experts of the LAST layers of each range on the CPU (placement.choose's
  spill="last", the side llama.cpp's --fit takes);
- what llama.cpp's `--fit` itself would choose (fit_emulation.fit_choice: common/fit.cpp's search).
The faster of device-fit's two (by --prefer) is the plan; --fit's is shown beside it with its speed.
"""

from moetools.devicefit import batching, fit_emulation, upstream
from moetools.devicefit.placement import cpu_expert_layers, ranges_text


def row(who, plan_, flags=None):
    """One line of the comparison (a dict for the JSON and the table)."""
    if plan_ is None:
        return {"who": who, "fits": False, "tok_s": 0.0, "pp_tok_s": 0.0, "cpu_expert_layers": "", "flags": flags or []}
    return {"who": who, "fits": plan_.fits, "tok_s": round(plan_.tok_s, 4), "pp_tok_s": round(plan_.pp_tok_s, 2),
            "cpu_expert_layers": ranges_text(cpu_expert_layers(plan_.placement)), "flags": flags or []}


def compare(evaluate_spill, fit_plan, chosen, prefer):
    """(best plan, rows, note). evaluate_spill("last") -> DevicePlan of the last-layers spill at the
    chosen context and settings (None: --spill first or last fixed the side); fit_plan() -> (FitChoice,
    DevicePlan or None) of llama.cpp's --fit."""
    rows = [row("device-fit", chosen)]
    best = chosen
    last = evaluate_spill("last") if evaluate_spill and cpu_expert_layers(chosen.placement) else None
    if last is not None:
        rows[0]["who"] = "device-fit, first layers' experts"
        rows.append(row("device-fit, last layers' experts", last))
        if last.fits and batching.score(last, prefer) > batching.score(chosen, prefer):
            best = last
    choice, fitted = fit_plan()
    rows.append(row("llama.cpp --fit (common/fit.cpp)", fitted, choice.flags() if fitted is not None else []))
    for entry in rows:
        entry["chosen"] = False
    rows[1 if best is not chosen else 0]["chosen"] = True
    note = None
    if best is not chosen:
        note = (f"the experts of the last layers of each device's range on the CPU (as llama.cpp's --fit does): "
                f"{best.tok_s:.2f} tok/s decode, {best.pp_tok_s:.0f} prompt, against {chosen.tok_s:.2f} and "
                f"{chosen.pp_tok_s:.0f} with the first layers'")
    return best, rows, note


def refine(result, facts, devices, cpu, options):
    """compare() on upstream.plan's result at its chosen context and batch sizes (a user's placement, a
    draft or no offload device: nothing to compare): the last layers' experts on the CPU replace the first
    layers' where faster (by --prefer, with --spill auto); llama.cpp --fit's choice is evaluated beside
    them. Updates `result` in place."""
    chosen = result.chosen
    if chosen is None or options.user_placement or options.draft is not None or not devices:
        return result
    options = options.replace(kv=result.kv or options.kv)
    spill = (lambda side: upstream.plan_at(facts, devices, cpu, options, chosen.context, spill=side)) if options.spill == "auto" else None
    best, rows, note = compare(spill, lambda: fit_emulation.fit_plan(facts, devices, cpu, options, chosen.context),
                               chosen, options.prefer)
    result.placements = rows
    if best is not chosen:
        result.chosen = best
        result.alternatives = [best if candidate is chosen else candidate for candidate in result.alternatives]
        result.batches = [(ub, b, best if plan_ is chosen else plan_) for ub, b, plan_ in result.batches]
        result.notes.append(note)
    return result
