"""trace-tail's options in groups: each decorator adds a run of options (in --help's order) and hands the
command one record of them (a namedtuple), so the command takes a few records, not 28 parameters."""

import functools
from collections import namedtuple

import click

LayerOptions = namedtuple('LayerOptions', ['model', 'synth_layers', 'experts', 'top_k', 'fmt'])
LayerOptions.__doc__ = 'How trace keys map to layers and experts (a model or their counts), and the input format.'

ReplayOptions = namedtuple('ReplayOptions', ['once', 'prefill', 'budget_slots', 'budget_bytes', 'expert_bytes', 'window'])
ReplayOptions.__doc__ = 'How the trace is replayed: once or followed, prefill, the cache budget.'

CurveOptions = namedtuple('CurveOptions', ['curve', 'plot', 'write_trace', 'plan_path', 'pin_tier', 'default_tier', 'container'])
CurveOptions.__doc__ = "The curve, its plot, a re-written trace and the plan file kept current, with its tiers."

PolicyOptions = namedtuple('PolicyOptions', ['policies_text', 'instruments', 'threads', 'pin_policy'])
PolicyOptions.__doc__ = 'Which policies and instruments run, on how many threads, and which ranks the pins.'

ExtraOutputs = namedtuple('ExtraOutputs', ['table_path', 'daemon_probe', 'output_path'])
ExtraOutputs.__doc__ = "The tkey table, the daemon's own figures and a copy of the JSON document."

FollowOptions = namedtuple('FollowOptions', ['poll', 'max_idle', 'max_tokens'])
FollowOptions.__doc__ = "--follow's polling and stopping rules."

DaemonOptions = namedtuple('DaemonOptions', ['port'])
DaemonOptions.__doc__ = "The serving daemon's lane whose trace is read (its per-port files)."


def layers_options(command):
    """How trace keys map to layers and experts (a model or their counts), and the input format: the command receives them as `layers`, a LayerOptions."""

    @click.option("--model", metavar="GGUF", help="Map tensor keys to layers from this model's expert tensors (any shard).")
    @click.option("--synth-layers", type=click.IntRange(min=1), metavar="N", help="No model: keys of blk.0..N-1 expert tensors.")
    @click.option("--experts", type=click.IntRange(min=1), help="Experts per layer when there is no model (budget checks, split rule).")
    @click.option("--top-k", type=click.IntRange(min=1), help="Experts used per token per layer when there is no model.")
    @click.option("--format", "fmt", type=click.Choice(["auto", "trace", "csv", "jsonl", "npy"]), default="auto", show_default=True,
                  help="Input format: 12-byte trace, route_trace v1 CSV, JSON lines or numpy [tokens, layers, top_k].")
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        return command(*args, layers=LayerOptions(*(kwargs.pop(name) for name in LayerOptions._fields)), **kwargs)

    return wrapper


def replay_options(command):
    """How the trace is replayed: once or followed, prefill, the cache budget: the command receives them as `replay`, a ReplayOptions."""

    @click.option("--once/--follow", default=None,
                  help="Stop at end of file with a summary (the default), or keep reading as the file grows (the default with --port).")
    @click.option("--prefill", type=click.IntRange(min=0), metavar="N", help="The first N tokens are prefill (default: the size rule).")
    @click.option("--budget-slots", type=int, metavar="N",
                  help="Cache budget in slots (one slot = one (layer, expert)). Default: a quarter of the model's slots "
                       "(layers x experts), or of the trace's distinct experts without a model.")
    @click.option("--budget-bytes", metavar="SIZE", help="Cache budget in bytes (32G, 32GB, 32GiB or raw bytes).")
    @click.option("--expert-bytes", metavar="SIZE", help="Bytes of one (layer, expert) when there is no model.")
    @click.option("--window", type=click.IntRange(min=1), default=8, show_default=True, help="Tokens of the recency policy and instrument.")
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        return command(*args, replay=ReplayOptions(*(kwargs.pop(name) for name in ReplayOptions._fields)), **kwargs)

    return wrapper


def curves_options(command):
    """The curve, its plot, a re-written trace and the plan file kept current: the command receives them as `curves`, a CurveOptions."""

    @click.option("--curve", "curve", is_flag=False, flag_value="auto", default=None, metavar="[SLOTS,...]",
                  help="Hit ratio of every policy across budgets (default: a log-spaced sweep up to the distinct experts).")
    @click.option("--plot", metavar="FILE.svg", help="Draw the curves as SVG (Belady as the ceiling). Implies --curve.")
    @click.option("--write-trace", metavar="OUT", help="Also write the input as a 12-byte trace (the fork's format).")
    @click.option("--plan", "plan_path", metavar="FILE", help="Keep a plan file's pin_list current (see README: Plan file).")
    @click.option("--pin-tier", metavar="TIER",
                  help="--plan: every pin's \"tier\": the container ladder's index (0 = sharpest) the hot pins are "
                       "served from, or its name (q8_0, Q4_K_M) with --container. Without it each pin keeps its tier.")
    @click.option("--default-tier", metavar="TIER",
                  help="--plan: the plan's \"default_tier\", the ladder index (or name, with --container) the unpinned "
                       "experts are fetched at.")
    @click.option("--container", type=click.Path(file_okay=False), metavar="DIR",
                  help="--plan: the expert container whose ladder the tiers index (names resolved, indices checked).")
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        return command(*args, curves=CurveOptions(*(kwargs.pop(name) for name in CurveOptions._fields)), **kwargs)

    return wrapper


def policies_options(command):
    """Which policies and instruments run, on how many threads, and which ranks the pins: the command receives them as `policies`, a PolicyOptions."""

    @click.option("--policies", "policies_text", metavar="NAME[,NAME...]",
                  help="Replay only these demand policies (lru, lfu, decay_bandit, prefill_pin, predictive; LRU, the baseline, "
                       "and Belady, the ceiling, always run). Default: every one, with the instruments.")
    @click.option("--instruments/--no-instruments", default=None,
                  help="The per-token instruments and the top-S sets (default: on, off when --policies is given).")
    @click.option("--threads", type=click.IntRange(min=1), help="Worker threads of --once's replays (default: every core).")
    @click.option("--pin-policy", default="predictive", show_default=True, metavar="POLICY",
                  help="Whose scores rank the plan's pins: predictive, decay_bandit, lfu or lru.")
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        return command(*args, policies=PolicyOptions(*(kwargs.pop(name) for name in PolicyOptions._fields)), **kwargs)

    return wrapper


def extras_options(command):
    """The tkey table, the daemon's own figures and a copy of the JSON document: the command receives them as `extras`, a ExtraOutputs."""

    @click.option("--write-table", "table_path", metavar="FILE",
                  help="Write the tkey-to-layer-matrix.json the fork's pager driver reads, for --model or --synth-layers.")
    @click.option("--daemon-probe", is_flag=True,
                  help="Also the figures the serving daemon's trace tail computes (its segments, budget rule, tie-break, predictor, integer percents).")
    @click.option("-o", "--output", "output_path", metavar="FILE", help="Also write the JSON document (summary or curve) to FILE.")
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        return command(*args, extras=ExtraOutputs(*(kwargs.pop(name) for name in ExtraOutputs._fields)), **kwargs)

    return wrapper


def follow_options(command):
    """--follow's polling and stopping rules: the command receives them as `follow`, a FollowOptions."""

    @click.option("--poll", type=click.FloatRange(min=0.01, max=5), default=0.2, show_default=True, help="--follow: seconds between polls.")
    @click.option("--max-idle", type=click.FloatRange(min=0), metavar="SECONDS", help="--follow: stop after this long without new records.")
    @click.option("--max-tokens", type=click.IntRange(min=1), metavar="N", help="--follow: stop after N decode tokens.")
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        return command(*args, follow=FollowOptions(*(kwargs.pop(name) for name in FollowOptions._fields)), **kwargs)

    return wrapper


def daemon_options(command):
    """The serving daemon's lane whose trace is read: the command receives it as `daemon`, a DaemonOptions."""

    @click.option("--port", type=click.IntRange(1, 65535), metavar="N",
                  help="Read the serving daemon's trace for its lane on port N (~/.continuum/logs/moe-trace-N.bin) instead "
                       "of TRACE; followed unless --once. A --plan that is the daemon's moe-plan-N.json goes to moetools-plan-N.json.")
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        return command(*args, daemon=DaemonOptions(*(kwargs.pop(name) for name in DaemonOptions._fields)), **kwargs)

    return wrapper
