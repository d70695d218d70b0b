"""`moetools host --calibrate BENCH.json`: a host's own efficiencies, fitted on its llama-bench runs.

Each run of llama-bench's JSON (formats/llama_bench.py) is rebuilt as device-fit evaluates a user's
placement: the run's model (found where llama-bench wrote it, or by name in --models folders), the
profile's devices, and the run's -ngl/-ts/-ot/--n-cpu-moe/-ub/-b/-t/-fa/cache types at its depth. The
efficiencies (speed/calibrate.py) are then fitted to what the runs measured: decode runs (tg) fit the
GPU's and CPU's read efficiency and the per-token floor, prompt runs (pp) the GPU's and CPU's compute and
the PCIe copy's efficiency. The profile keeps them with the runs they came from; device-fit --host uses
them and says on how many runs its figures are calibrated.

Refused: a run whose model cannot be found or read, a run over RPC devices (a profile describes local
devices), a pp+tg run (-pg: two figures in one), each with a warning naming it; exit 2 when none
remains, or when a fitted efficiency falls outside (0, 1.2] (the figure is named, never clamped).
"""

import os

from moetools.errors import FormatError, UsageError

MIN_TOKENS = 16  # runs shorter than this measure start-up, not speed


def _devices(machine):
    from moetools.devicefit import hostplan

    return hostplan.host_gpus(machine, None, None) if machine.profile["gpus"] else []


def _speed(machine):
    from moetools.devicefit import hostplan
    from moetools.devicefit.speed import SpeedSettings

    speed = hostplan.apply(SpeedSettings(), machine)
    defaults = SpeedSettings()
    for name in speed.EFFICIENCIES:  # calibrate from the published defaults, not an earlier calibration
        setattr(speed, name, getattr(defaults, name))
    speed.calibration = None
    return speed


def run_case(run, path, machine, devices):
    """A speed/calibrate.py Case of one llama-bench run on the profile's devices."""
    from moetools.devicefit import core, devices as devicesmod, upstream
    from moetools.devicefit.kv import KVSettings
    from moetools.devicefit.speed.calibrate import case_from_plan
    from moetools.formats.llama_bench import placement_of
    from moetools.gguf import open_model

    with open_model(path) as model:
        facts = core.model_facts(model)
    placement = placement_of(run)
    speed = _speed(machine)
    speed.threads, speed.threads_source = placement.threads, "the run's -t"
    kv = KVSettings(ubatch=placement.ubatch, batch=max(placement.batch, 1), flash_attn=placement.flash_attn is not False,
                    ctk=placement.ctk, ctv=placement.ctv)
    overrides = list(placement.overrides)
    ot_given = any(kind == "-ot" for kind, _ in overrides)
    ngl = placement.ngl if placement.ngl >= 0 else 999
    options = upstream.UpstreamOptions(ctx=max(placement.context, 256), kv=kv, speed=speed, depth=placement.depth, ngl=ngl,
                                       ts=list(placement.ts) if placement.ts and len(placement.ts) == len(devices) else None,
                                       main_gpu=placement.main_gpu if placement.split_mode == "none" and devices else None,
                                       # -ot (with llama-bench's --n-cpu-moe patterns after it) in order, or the count alone
                                       overrides=overrides if ot_given else None,
                                       n_cpu_moe=None if ot_given else next((n for _, n in overrides), None),
                                       margin=0)
    ram = machine.profile["ram"]["total_bytes"]
    cpu = devicesmod.cpu_device(ram, speed.ram_bw, speed.ram_bw_source)
    if options.overrides:
        upstream._resolve_overrides(facts, devices, options, [], [])
    plan_ = upstream.plan_at(facts, devices, cpu, options, options.ctx)
    tg = run.avg_ts if run.kind == "tg" else None
    pp = run.avg_ts if run.kind == "pp" else None
    label = f"{os.path.basename(path)} {run.kind} p{run.n_prompt} n{run.n_gen} d{run.n_depth} #{run.index}"
    return case_from_plan(label, facts, devices, plan_, options, cpu, tg=tg, pp=pp, n_prompt=run.n_prompt,
                          n_ubatch=min(placement.ubatch, max(placement.batch, 1), max(run.n_prompt, 1)))


def _why_not(run):
    if run.kind == "pg":
        return "a prompt+generation run (-pg) measures both at once"
    if "RPC" in (run.backends or "").upper():
        return "it ran over RPC devices (a host profile describes this machine's own)"
    if (run.n_gen if run.kind == "tg" else run.n_prompt) < MIN_TOKENS:
        return f"under {MIN_TOKENS} tokens"
    return None


def cases_of(bench_paths, machine, model_dirs, warn):
    """(cases, runs used [(file, run, path)]) from the bench files; warn(text) for each run left out."""
    from moetools.formats.llama_bench import read_runs, resolve_model

    devices = _devices(machine)
    cases, used = [], []
    for bench in bench_paths:
        runs, refusals = read_runs(bench)
        for index, reason in refusals:
            warn(f"{bench}: run {index} refused: {reason}")
        folders = [os.path.dirname(os.path.abspath(bench)), *model_dirs]
        for run in runs:
            why = _why_not(run)
            if why:
                warn(f"{bench}: run {run.index} skipped: {why}")
                continue
            path = resolve_model(run, folders)
            if path is None:
                warn(f"{bench}: run {run.index} skipped: its model {run.model_filename} is not here (give --models DIR)")
                continue
            try:
                cases.append(run_case(run, path, machine, devices))
            except (FormatError, UsageError) as error:
                warn(f"{bench}: run {run.index} skipped: {path} cannot be planned: {error}")
                continue
            used.append((bench, run, path))
    if not cases:
        raise UsageError("no llama-bench run could be used for calibration (each is named above)")
    return cases, used


def calibration_record(cases, used, fitted, summary_default, summary_fitted):
    from moetools import __version__
    from moetools.devicefit.speed import calibrate as cal

    runs = []
    for case, (bench, run, path) in zip(cases, used):
        before = cal.predict(case)
        after = cal.predict(case, fitted)
        index = 0 if run.kind == "tg" else 1
        runs.append({"bench_file": os.path.abspath(bench), "index": run.index, "model": path, "kind": run.kind,
                     "n_prompt": run.n_prompt, "n_gen": run.n_gen, "n_depth": run.n_depth, "ngl": run.n_gpu_layers,
                     "n_cpu_moe": run.n_cpu_moe, "overrides": [f"{p}={b}" for p, b in run.tensor_buft_overrides],
                     "ubatch": run.n_ubatch, "threads": run.n_threads, "measured_tok_s": run.avg_ts,
                     "predicted_default_tok_s": round(before[index], 4), "predicted_tok_s": round(after[index], 4),
                     "build_commit": run.build_commit})
    return {"written_by": f"moetools {__version__}", "efficiencies": {name: round(value, 6) for name, value in fitted.items()},
            "runs": runs, "error_default": summary_default, "error_calibrated": summary_fitted}


def calibrate(profile, bench_paths, model_dirs, warn, path="<profile>"):
    """The profile with its calibration (a new dict); exit 2 (UsageError) when nothing can be fitted or a
    fitted efficiency leaves (0, 1.2]."""
    from moetools.devicefit import hostplan
    from moetools.devicefit.speed import SpeedSettings
    from moetools.devicefit.speed import calibrate as cal

    machine = hostplan.Machine(path, profile, here=False)
    cases, used = cases_of(bench_paths, machine, model_dirs, warn)
    defaults = SpeedSettings()
    names = cal.fittable(cases, list(cal.SEARCH_RANGE))
    if not names:
        raise UsageError("the runs measure nothing an efficiency moves (no decode or prompt figure)")
    fitted, _ = cal.fit(cases, {name: getattr(defaults, name) for name in cal.SEARCH_RANGE}, names)
    outside = cal.check_fitted(fitted)
    if outside:
        figures = ", ".join(f"{name} {value:.3g}" for name, value in outside)
        raise UsageError(f"calibration gives {figures}, outside (0, {cal.MAX_EFFICIENCY}]: the runs do not fit this "
                         "host's profile (a run on other hardware, or flags the bench file does not record?)")
    record = calibration_record(cases, used, fitted, _rounded(cal.summary(cases)), _rounded(cal.summary(cases, fitted)))
    return dict(profile, calibration=record)


def _rounded(summary):
    return {kind: {key: round(value, 4) if isinstance(value, float) else value for key, value in stats.items()}
            for kind, stats in summary.items()}
