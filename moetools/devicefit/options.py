"""device-fit's options in groups, as sqlite-utils' `output_options`: each decorator adds a run of
options (in the order --help shows them) and hands the command ONE record of them, so the command
takes seven records, not fifty parameters. Records are namedtuples: the device-fit start-up path does
not import dataclasses."""

import functools
from collections import namedtuple

import click

from moetools.devicefit.batching import PREFERENCES
from moetools.devicefit.memory.cells import CACHE_TYPES


DeviceOptions = namedtuple('DeviceOptions', ['vram', 'gpu_text', 'vram_bw', 'rpc_specs', 'rpc_bw', 'runtime', 'reserve', 'margin'])
DeviceOptions.__doc__ = 'The devices planned and their memory.'

ContextOptions = namedtuple('ContextOptions', ['ctx', 'min_ctx', 'ctk', 'ctv', 'ubatch', 'batch', 'parallel', 'kv_unified', 'swa_full', 'flash_attn', 'fa_text'])
ContextOptions.__doc__ = "The context and llama.cpp's cache and batch settings."

PlacementOptions = namedtuple('PlacementOptions', ['ngl', 'ts_text', 'n_cpu_moe', 'main_gpu', 'depth', 'override_tensor', 'cpu_moe',
                                                   'check', 'prefer', 'spill'], defaults=((), False, False, None, None))
PlacementOptions.__doc__ = ("The user's own llama.cpp placement, evaluated instead of chosen. override_tensor: the -ot values, "
                            "or (as the command hands it over) the overrides in command-line order (override_sources).")

DraftOptions = namedtuple('DraftOptions', ['draft_path', 'draft_ngl', 'draft_ctk', 'spec_type', 'draft_n_max', 'n_outputs', 'draft_device', 'draft_ctv'])
DraftOptions.__doc__ = "Speculative decoding: a draft model or the model's own MTP blocks."

ForkOptions = namedtuple('ForkOptions', ['tiers_dir', 'storage_root', 'capture_path', 'trace_path', 'model_id', 'coverage_path', 'coverage_policy', 'observations_path', 'h2d',
                                         'pin_tier', 'default_tier', 'port'])
ForkOptions.__doc__ = "The streaming fork's artifacts, the cache's speed inputs, the plan's container tiers and the daemon's port."

MachineOptions = namedtuple('MachineOptions', ['floor_text', 'ram', 'ram_bw', 'disk_bw', 'threads', 'os_reserve', 'host_path'],
                            defaults=(None,))
MachineOptions.__doc__ = 'The host: speed floor, RAM, its bandwidth, the drive, threads, and a host profile describing it all.'

OutputOptions = namedtuple('OutputOptions', ['container', 'plan_path', 'emit', 'json_flag'])
OutputOptions.__doc__ = 'What is written and printed.'


def devices_options(command):
    """The devices planned and their memory: the command receives them as `devices`, a DeviceOptions."""

    @click.option("--vram", metavar="SIZE[,SIZE...]|auto", help="Each GPU's memory: 24G,24G (GiB; 24GB decimal), or auto (free memory from nvidia-smi/rocm-smi).")
    @click.option("--gpu", "gpu_text", metavar="NAME[,NAME...]", help="GPUs from the table (VRAM and bandwidth): rtx4090,rtx3090.")
    @click.option("--vram-bw", metavar="RATE[,RATE...]", help="GPU memory bandwidth (1008GB/s), one for all or one per GPU.")
    @click.option("--rpc", "rpc_specs", multiple=True, metavar="HOST:PORT=SIZE", help="A llama.cpp RPC server and the memory it offers (repeatable).")
    @click.option("--rpc-bw", metavar="RATE[,RATE...]", help="Memory bandwidth of the RPC servers' devices.")
    @click.option("--runtime", type=click.Choice(["auto", "llama", "fork"]), default="auto", show_default=True,
                  help="auto: upstream llama.cpp on every device, with the streaming fork's division of the first GPU "
                       "beside it where the fork applies (its tiers, container or curve are given or found, or the "
                       "experts do not fit in RAM); llama or fork: that runtime only.")
    @click.option("--reserve", metavar="SIZE", help="Compute reserve per GPU as a whole, instead of the modelled compute buffer + --margin.")
    @click.option("--margin", default="1G", show_default=True, metavar="SIZE",
                  help="Added to the modelled compute buffer: CUDA context, cuBLAS workspace, fragmentation.")
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        return command(*args, devices=DeviceOptions(*(kwargs.pop(name) for name in DeviceOptions._fields)), **kwargs)

    return wrapper


def context_options(command):
    """The context and llama.cpp's cache and batch settings: the command receives them as `context`, a ContextOptions."""

    @click.option("--ctx", "-c", type=int, metavar="N", help="Context wanted (fork default: the training context, squeezed; llama default: the trade-off).")
    @click.option("--min-ctx", type=int, default=4096, show_default=True, metavar="N", help="Never squeeze the context below this.")
    @click.option("--ctk", "-ctk", type=click.Choice(CACHE_TYPES), default="f16", show_default=True, help="K cache type.")
    @click.option("--ctv", "-ctv", type=click.Choice(CACHE_TYPES), default="f16", show_default=True, help="V cache type.")
    @click.option("--ubatch", "-ub", type=int, help="Physical batch (-ub; default: llama: chosen by --prefer, fork: 512).")
    @click.option("--batch", "-b", type=int, help="Logical batch (-b; default 2048, or -ub where the search chooses more).")
    @click.option("--parallel", "-np", type=int, default=1, show_default=True, metavar="N", help="Sequences (-np).")
    @click.option("--kv-unified/--no-kv-unified", "-kvu/-no-kvu", default=False, show_default=True,
                  help="One KV stream shared by all sequences (llama.cpp's -kvu / --no-kv-unified).")
    @click.option("--swa-full", is_flag=True, help="Full-size cache for sliding-window layers (--swa-full).")
    @click.option("--flash-attn/--no-flash-attn", default=True, show_default=True, help="Flash attention (-fa); off pads and transposes V.")
    @click.option("-fa", "fa_text", type=click.Choice(["on", "off", "auto"]),
                  help="llama.cpp's spelling of --flash-attn/--no-flash-attn; auto is planned as on (llama.cpp's "
                       "auto enables it where every layer's attention runs it; the architectures it turns off are "
                       "planned off either way), and --emit llama passes -fa on.")
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        return command(*args, context=ContextOptions(*(kwargs.pop(name) for name in ContextOptions._fields)), **kwargs)

    return wrapper


def placement_options(command):
    """The user's own llama.cpp placement, evaluated instead of chosen: the command receives them as `placement`, a PlacementOptions."""

    @click.option("--ngl", "-ngl", type=int, metavar="N", help="llama: evaluate your own -ngl (layers offloaded, output layer included).")
    @click.option("--tensor-split", "-ts", "ts_text", metavar="A,B,...", help="llama: evaluate your own -ts (one weight per device, RPC first).")
    @click.option("--n-cpu-moe", "-ncmoe", type=int, metavar="N", help="llama: evaluate your own --n-cpu-moe (experts of blocks < N on the CPU).")
    @click.option("--override-tensor", "-ot", "override_tensor", multiple=True, metavar="PATTERN=DEV[,...]",
                  help="llama: evaluate your own -ot (repeatable): tensors whose name the regex PATTERN "
                       "matches go to DEV (CPU, CUDA0, RPC0[host:port]); first match wins, in command-line "
                       "order with --cpu-moe/--n-cpu-moe, as llama.cpp.")
    @click.option("--cpu-moe", "-cmoe", "cpu_moe", is_flag=True, help="llama: evaluate your own --cpu-moe (every expert on the CPU).")
    @click.option("--main-gpu", "-mg", type=int, metavar="I", help="llama: evaluate split mode none on device I.")
    @click.option("--depth", type=int, metavar="N", help="llama: tokens of context decode speed is measured at (default half the context).")
    @click.option("--prefer", type=click.Choice(PREFERENCES),
                  help="llama: what the -ub search maximises: decode tok/s, prompt tok/s, or balanced (the default: the "
                       "shortest time for a 4096-token prompt and 512 generated tokens).")
    @click.option("--spill", type=click.Choice(["auto", "first", "last"]),
                  help="llama: whose experts leave a GPU for the CPU: the first layers of its range, the last "
                       "(as llama.cpp's --fit), or auto (the default): the faster by --prefer.")
    @click.option("--check", is_flag=True,
                  help="Evaluate a llama-server/llama-cli command line given after -- (or in a FILE, or -): "
                       "whether it fits each device, its speed, and what device-fit's own plan changes (exit 1 "
                       "when it does not fit). Its flags replace the context, placement and draft options; the "
                       "devices still come from --vram/--gpu/--rpc/--ram.")
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        kwargs["override_tensor"] = override_sources(kwargs["override_tensor"], kwargs["cpu_moe"], kwargs["n_cpu_moe"]) or ()
        return command(*args, placement=PlacementOptions(*(kwargs.pop(name) for name in PlacementOptions._fields)), **kwargs)

    return wrapper


ORDER_KEY = "moetools.option_order"  # ctx.meta: the parameter name of each option given, in command-line order


def override_sources(ot_values, cpu_moe, n_cpu_moe, order=None):
    """The user's overrides in llama.cpp's order ([("-ot", TEXT) | ("--cpu-moe", None) | ("--n-cpu-moe",
    N)]: common/arg.cpp appends each flag's overrides as it reads the command line), or None without
    -ot and --cpu-moe (--n-cpu-moe alone needs no order). order: the options' names as given (the
    command's OrderedCommand records them); without it -ot, then --cpu-moe, then --n-cpu-moe."""
    if not ot_values and not cpu_moe:
        return None
    if order is None:
        context = click.get_current_context(silent=True)
        order = context.meta.get(ORDER_KEY) if context is not None else None
    if order is None:
        order = ["override_tensor"] * len(ot_values) + ["cpu_moe", "n_cpu_moe"]
    values = iter(ot_values)
    sources = []
    last_n = max((i for i, name in enumerate(order) if name == "n_cpu_moe"), default=None)
    for position, name in enumerate(order):
        if name == "override_tensor":
            sources.append(("-ot", next(values)))
        elif name == "cpu_moe" and cpu_moe and ("--cpu-moe", None) not in sources:
            sources.append(("--cpu-moe", None))
        elif name == "n_cpu_moe" and n_cpu_moe is not None and position == last_n:
            sources.append(("--n-cpu-moe", n_cpu_moe))
    return sources


def overrides_of(placement):
    """The overrides of a PlacementOptions in command-line order (None: none), whether it holds the -ot
    values (a direct call) or the ordered overrides (from the command)."""
    value = tuple(placement.override_tensor or ())
    if value and isinstance(value[0], tuple):
        return list(value)
    return override_sources(value, placement.cpu_moe, placement.n_cpu_moe)


class OrderedCommand(click.Command):
    """A click command that records, in ctx.meta[ORDER_KEY], the names of the options given in
    command-line order (click hands a multiple option's values over as one tuple, losing how they
    interleave with other options; llama.cpp's overrides depend on it)."""

    def parse_args(self, ctx, args):
        try:
            _, _, order = self.make_parser(ctx).parse_args(args=list(args))
            ctx.meta[ORDER_KEY] = [param.name for param in order]
        except click.ClickException:
            pass  # the real parse below reports it
        return super().parse_args(ctx, args)


def drafting_options(command):
    """Speculative decoding: a draft model or the model's own MTP blocks: the command receives them as `drafting`, a DraftOptions."""

    @click.option("--draft", "-md", "draft_path", metavar="MODEL", help="llama: a draft model for speculative decoding (-md), planned beside the target.")
    @click.option("--draft-ngl", "-ngld", type=int, metavar="N", help="llama: the draft's -ngld (default all layers).")
    @click.option("--draft-ctk", "-ctkd", type=click.Choice(CACHE_TYPES), default="f16", show_default=True, help="llama: the draft's K cache type (-ctkd).")
    @click.option("--spec-type", "spec_type", type=click.Choice(["draft-simple", "draft-mtp"]),
                  help="llama: the speculative type (--spec-type): draft-simple with --draft (the default then); "
                       "draft-mtp drafts with the model's own NextN/MTP blocks (loaded, plus an MTP context's KV and compute).")
    @click.option("--spec-draft-n-max", "draft_n_max", type=int, default=3, show_default=True, metavar="N",
                  help="llama: tokens drafted per step (--spec-draft-n-max); with draft-mtp a hybrid target keeps N "
                       "recurrent-state snapshots per sequence.")
    @click.option("--n-outputs", "n_outputs", type=int, metavar="N",
                  help="Output rows of the target's context (its n_outputs_max: the logits' rows in the compute "
                       "buffer). Default the server's (llama-server's and the fork's): min(-b, -np x (1 + "
                       "--spec-draft-n-max with a speculative type)); 0 = -b, as llama-cli and llama-completion reserve.")
    @click.option("--device-draft", "-devd", "draft_device", metavar="DEV[,DEV...]|none",
                  help="llama: the devices the draft is offloaded to (-devd, llama.cpp's device names: CUDA0, RPC0 (the first --rpc); none = CPU only; default the target's).")
    @click.option("--draft-ctv", "-ctvd", type=click.Choice(CACHE_TYPES), default="f16", show_default=True, help="llama: the draft's V cache type (-ctvd).")
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        return command(*args, drafting=DraftOptions(*(kwargs.pop(name) for name in DraftOptions._fields)), **kwargs)

    return wrapper


def fork_options(command):
    """The streaming fork's artifacts and the cache's speed inputs: the command receives them as `fork`, a ForkOptions."""

    @click.option("--tiers", "tiers_dir", type=click.Path(file_okay=False),
                  help="Folder of *.resident.json tiers, searched first; the daemon's <storage root>/device-fit/<slug>/, "
                       "device-fit/<stem>/ beside the model and the model's folder are searched too.")
    @click.option("--storage-root", metavar="DIR", type=click.Path(file_okay=False),
                  help="The serving daemon's storage root for tier discovery (default: $CONTINUUM_STORAGE_PATH, else ~/.continuum).")
    @click.option("--capture", "capture_path", metavar="FILE", help="--emit env: GGML_MOE_CAPTURE_FILE, where the fork writes its per-token JSONL capture.")
    @click.option("--trace", "trace_path", metavar="FILE",
                  help="--emit env: GGML_MOE_TRACE_FILE, where the fork writes its 12-byte expert trace for trace-tail "
                       "(truncated at each start). Default: beside --plan (k3.plan.json -> k3.plan.trace), else "
                       "MODEL-STEM.trace in the current folder; always exported as an absolute path.")
    @click.option("--model-id", metavar="ID", help="The model id the daemon serves this model as (default: the file name's stem).")
    @click.option("--coverage", "coverage_path", metavar="FILE", help="Coverage curve from `trace-tail --curve` (- for stdin).")
    @click.option("--coverage-policy", default=None, metavar="POLICY",
                  help="Which policy's curve in --coverage predicts the hit ratio: one the curve holds (trace-tail "
                       "writes lru, lfu, decay_bandit, predictive, ...; belady is a ceiling, refused). "
                       "Default: the curve's best online demand policy.")
    @click.option("--observations", "observations_path", metavar="FILE", help='Measured runs, JSON lines {"tier", "tok_s", "tokens"} (- for stdin).')
    @click.option("--h2d", metavar="RATE", help="Host-to-device bandwidth (25GB/s decimal, 25G GiB; default: the first GPU's PCIe "
                                                "link in --host, else 25GB/s).")
    @click.option("--pin-tier", metavar="TIER",
                  help="The container ladder's tier the plan's hot pins are served from (each pin's \"tier\"): its "
                       "index (0 = sharpest) or, with --container, its name (q8_0, Q4_K_M). Priced in tok/s with --container.")
    @click.option("--default-tier", metavar="TIER",
                  help="The ladder tier every unpinned expert is fetched at (the plan's \"default_tier\"): index or name.")
    @click.option("--port", type=click.IntRange(1, 65535), metavar="N",
                  help="The serving daemon's lane on port N: its files in ~/.continuum/logs (moe-capture-N.jsonl for --capture). "
                       "Its moe-plan-N.json is never written: a --plan there goes to moetools-plan-N.json.")
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        return command(*args, fork=ForkOptions(*(kwargs.pop(name) for name in ForkOptions._fields)), **kwargs)

    return wrapper


def machine_options(command):
    """The host: speed floor, RAM, its bandwidth, the drive, threads: the command receives them as `machine`, a MachineOptions."""

    @click.option("--floor", "floor_text", help="Per-token time that no cache removes (fork default 10ms, llama default 3.7ms).")
    @click.option("--ram", metavar="SIZE|auto", help="Host RAM: the CPU device's capacity (fork: also sizes the host expert cache).")
    @click.option("--ram-bw", metavar="RATE|auto", help="llama: host RAM bandwidth (default: --host's measured read, else "
                                                          "60GB/s; auto measures a short copy here).")
    @click.option("--disk-bw", metavar="RATE",
                  help="Drive read rate for the experts the page cache cannot hold (llama: mapped CPU experts; fork: its "
                       "misses). Default: --host's measured drive, else 3GB/s.")
    @click.option("--threads", "-t", type=int,
                  help="llama: CPU threads for the CPU experts (default: --host's; else llama.cpp's default on this machine, "
                       "its physical cores, when the plan is of this machine; else 8).")
    @click.option("--os-reserve", default="4G", show_default=True, metavar="SIZE", help="RAM kept for the OS.")
    @click.option("--host", "host_path", metavar="FILE",
                  help="Plan for the machine a host profile describes (`moetools host -o FILE` on it): its GPUs, RAM, "
                       "RAM and drive read rates, PCIe link and threads. Flags given beside it win.")
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        return command(*args, machine=MachineOptions(*(kwargs.pop(name) for name in MachineOptions._fields)), **kwargs)

    return wrapper


def outputs_options(command):
    """What is written and printed: the command receives them as `outputs`, a OutputOptions."""

    @click.option("--container", type=click.Path(file_okay=False), help="Expert container folder (GGML_MOE_CONTAINER) the fork streams from.")
    @click.option("--plan", "plan_path", type=click.Path(dir_okay=False), help="Write the plan file (GGML_MOE_PLAN_FILE) here.")
    @click.option("--emit", type=click.Choice(["llama", "env"]), help="Print launch settings instead of the ledger: upstream flags, or the fork's launch as a runnable block (exports, then the llama-server line that pages experts); with --json: the command as an argv list.")
    @click.option("--json", "json_flag", is_flag=True, help="Print JSON (the default when stdout is not a terminal).")
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        return command(*args, outputs=OutputOptions(*(kwargs.pop(name) for name in OutputOptions._fields)), **kwargs)

    return wrapper


# the records device_fit_command receives, by the parameter name it receives each as
GROUPS = {"devices": DeviceOptions, "context": ContextOptions, "placement": PlacementOptions, "drafting": DraftOptions,
          "fork": ForkOptions, "machine": MachineOptions, "outputs": OutputOptions}
