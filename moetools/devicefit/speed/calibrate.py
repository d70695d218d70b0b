"""Fitting the speed model's efficiencies to measured runs.

A run (published, or a user's own llama-bench) is rebuilt as a Case: the model's facts, the devices, the
placement the run used and what it measured (decode tok/s at a depth, prompt tok/s over n_prompt tokens
in ubatches). The placement and its ledger are computed once; the efficiencies only scale the time each
device's bytes and FLOPs take, so a fit re-evaluates decode_time and prompt_time, not the plan.

The fit minimises the mean squared log error (a run 20% slow weighs as one 20% fast) by coordinate
descent over each efficiency in turn, on a log grid that narrows, within SEARCH_RANGE. It never clamps
to a plausible range: a fitted efficiency outside (0, MAX_EFFICIENCY] is reported by `check_fitted` so
the caller can refuse it with the figure (a run it misreads, not a machine, would put it there).
"""

import math

from moetools.devicefit import kv as kvmod
from moetools.devicefit.record import REQUIRED, Record
from moetools.devicefit.speed import decode as decodemod
from moetools.devicefit.speed import prompt as promptmod

MAX_EFFICIENCY = 1.2
SEARCH_RANGE = {"gpu_efficiency": (0.02, 3.0), "cpu_efficiency": (0.02, 3.0), "gpu_compute_efficiency": (0.005, 3.0),
                "pcie_efficiency": (0.02, 3.0), "cpu_compute_efficiency": (0.01, 3.0), "floor_s": (1e-5, 0.05)}
# which measured figure each efficiency moves: a fit on decode runs alone leaves the prompt's alone
MOVES = {"gpu_efficiency": ("tg", "pp"), "cpu_efficiency": ("tg", "pp"), "floor_s": ("tg", "pp"),
         "gpu_compute_efficiency": ("pp",), "pcie_efficiency": ("pp",), "cpu_compute_efficiency": ("pp",)}


class Case(Record):
    """One measured run rebuilt: the plan's pieces speed needs, and what was measured."""

    FIELDS = (
        ("label", REQUIRED),
        ("facts", REQUIRED),
        ("devices", REQUIRED),
        ("placement", REQUIRED),
        ("shares", REQUIRED),
        ("kv_read", REQUIRED),  # bytes each block's cache is read per token at the depth
        ("room", None),  # RAM left for the page cache (None: unknown)
        ("depth", 0),
        ("n_prompt", 0),
        ("n_ubatch", 512),
        ("tg", None),  # measured decode tok/s
        ("pp", None),  # measured prompt tok/s
        ("settings", REQUIRED),  # the run's own host figures (RAM, threads, PCIe...) at default efficiencies
    )


def case_from_plan(label, facts, devices, plan_, options, cpu, tg=None, pp=None, n_prompt=0, n_ubatch=512):
    """A Case from upstream.plan_at's DevicePlan for the run's placement and options."""
    kv_read = kvmod.read_per_token(facts.shape, min(plan_.depth, plan_.context), options.kv)
    room = None
    if cpu.capacity_bytes:
        share = plan_.shares[-1]
        room = cpu.capacity_bytes - options.os_reserve - share.kv_bytes - share.compute_bytes
    return Case(label=label, facts=facts, devices=devices, placement=plan_.placement, shares=plan_.shares, kv_read=kv_read,
                room=room, depth=plan_.depth, n_prompt=n_prompt, n_ubatch=n_ubatch, tg=tg, pp=pp, settings=options.speed)


def predict(case, efficiencies=None):
    """(decode tok/s or None, prompt tok/s or None) of a case with these efficiencies ({name: value}
    replacing the case's settings)."""
    settings = case.settings.replace(**efficiencies) if efficiencies else case.settings
    tg = pp = None
    if case.tg is not None:
        seconds, _ = decodemod.decode_time(case.shares, case.placement, case.devices, case.kv_read, settings, case.room)
        tg = 1.0 / seconds
    if case.pp is not None and case.n_prompt:
        pp, _ = promptmod.prompt_time(case.facts, case.placement, case.devices, settings, case.n_prompt, case.n_ubatch, case.depth)
    return tg, pp


def errors(cases, efficiencies=None):
    """[(case, kind, predicted / measured - 1)] for every measured figure."""
    result = []
    for case in cases:
        tg, pp = predict(case, efficiencies)
        if tg is not None:
            result.append((case, "tg", tg / case.tg - 1))
        if pp is not None:
            result.append((case, "pp", pp / case.pp - 1))
    return result


def summary(cases, efficiencies=None):
    """{"tg"|"pp": {"n", "mean_abs", "worst_abs"}} of the relative errors."""
    out = {}
    for kind in ("tg", "pp"):
        values = [abs(error) for _, k, error in errors(cases, efficiencies) if k == kind]
        if values:
            out[kind] = {"n": len(values), "mean_abs": sum(values) / len(values), "worst_abs": max(values)}
    return out


def _loss(cases, efficiencies):
    values = [math.log1p(error) ** 2 for _, _, error in errors(cases, efficiencies)]
    return sum(values) / len(values) if values else 0.0


def fittable(cases, names):
    """The names whose measured figures the cases hold (a decode-only set cannot fit the prompt's)."""
    kinds = {"tg" for case in cases if case.tg is not None} | {"pp" for case in cases if case.pp is not None}
    gpu = any(device.kind == "gpu" for case in cases for device in case.devices)
    wanted = {"pcie_efficiency": _copies(cases), "gpu_efficiency": gpu, "gpu_compute_efficiency": gpu}
    return [name for name in names if set(MOVES[name]) & kinds and wanted.get(name, True)]


def _copies(cases):
    """Whether any prompt case copies host-held weights to a GPU (else PCIe's efficiency is not seen)."""
    return any(case.pp is not None and any(device.kind == "gpu" for device in case.devices)
               and any(home == promptmod.CPU for homes in case.placement.expert_device.values() for home in homes.values())
               for case in cases)


def fit(cases, start, names=None, rounds=4, steps=24):
    """({name: fitted value}, loss) minimising the squared log error from `start` ({name: value})."""
    names = fittable(cases, names or list(SEARCH_RANGE))
    current = dict(start)
    best = _loss(cases, current)
    for round_ in range(rounds):
        for name in names:
            low, high = SEARCH_RANGE[name]
            if round_:  # narrow around the current value
                low, high = max(low, current[name] / 2 ** (2 / round_)), min(high, current[name] * 2 ** (2 / round_))
            for step in range(steps + 1):
                value = low * (high / low) ** (step / steps)
                trial = dict(current, **{name: value})
                loss = _loss(cases, trial)
                if loss < best:
                    best, current = loss, trial
    return {name: current[name] for name in names}, best


def check_fitted(fitted):
    """[(name, value)] of the fitted efficiencies outside (0, MAX_EFFICIENCY] (floor_s is seconds, not checked)."""
    return [(name, value) for name, value in fitted.items() if name != "floor_s" and not 0 < value <= MAX_EFFICIENCY]
