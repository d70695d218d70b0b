"""`--runtime llama`: plan upstream llama.cpp on several devices — layers and experts per device
(placement.py), the ledger of each device, the decode speed (speed.py), the context trade-off, the
answer with numbers when nothing fits, and the llama-server command.

Pure functions over ModelFacts (with its LayerBytes), Devices and UpstreamOptions.
"""

from moetools.arch.registry import measured_compute, profile
from moetools.devicefit.bisect import smallest
from moetools.devicefit import batching as batchmod
from moetools.devicefit import compute as computemod
from moetools.devicefit import context
from moetools.devicefit import draft as draftmod
from moetools.devicefit import kv as kvmod
from moetools.devicefit import placement as placemod
from moetools.devicefit import speed as speedmod
from moetools.devicefit.speed import prompt as promptmod
from moetools.devicefit.devices import GPU_TABLE, Device
from moetools.devicefit.placement import CPU
from moetools.devicefit.record import REQUIRED, Record
from moetools.errors import UsageError
from moetools.gguf.locator import llama_model_args
from moetools.sizes import format_size

GIB = 1024**3
REPLAN_ROUNDS = 4  # placements chosen again when their own compute buffers exceed the estimate


def device_compute_bytes(facts, layers, holds_output, settings, ctx, kind, capacity=0):
    """The compute buffer of one device: llama.cpp's worst-case graph over the blocks it computes
    (and the logits if it holds the output layer), replayed through ggml-alloc (devicefit/compute.py).
    The host (CPU) buffer also holds the token-embedding lookup."""
    return computemod.compute_bytes(facts, layers, holds_output, settings, ctx, kind)


class UpstreamOptions(Record):

    FIELDS = (
        ("ctx", None),  # None: choose by the trade-off
        ("kv", kvmod.KVSettings),
        ("speed", speedmod.SpeedSettings),
        ("depth", None),  # tokens of context decode is measured at (default half the context)
        ("margin", GIB),  # bytes kept free on each GPU/RPC device beyond its compute buffer (--margin)
        ("os_reserve", 4 * GIB),  # RAM kept for the OS (the CPU device's margin)
        ("ngl", None),  # a user's own placement: -ngl, -ts, --n-cpu-moe, --main-gpu
        ("ts", None),
        ("n_cpu_moe", None),
        ("main_gpu", None),
        ("reserve", None),  # --reserve: a fixed compute buffer per GPU
        ("draft", None),  # draft.Draft: a speculative-decoding draft model beside the target (--draft)
        # the user's overrides in command-line order: [("-ot", TEXT) | ("--cpu-moe", None) |
        # ("--n-cpu-moe", N)] (overrides.py); plan() resolves them into tensor_homes
        ("overrides", None),
        ("tensor_homes", None),
        ("prefer", "balanced"),  # --prefer: what the -ub search maximises (batching.py)
        ("batch_search", False),  # neither -ub nor -b given: choose -ub (and -b) by --prefer
        ("spill", "auto"),  # --spill: the experts of the first or last layers of a range leave it, or auto (the faster)
    )

    @property
    def user_placement(self):
        return any(value is not None for value in (self.ngl, self.ts, self.n_cpu_moe, self.main_gpu, self.overrides))

    def without_placement(self):
        """A copy with the user's placement flags dropped (what device-fit would choose)."""
        return self.replace(ngl=None, ts=None, n_cpu_moe=None, main_gpu=None, overrides=None, tensor_homes=None)


class DevicePlan(Record):
    """One context's plan: placement, ledger (devices then CPU), fits, speed."""

    FIELDS = (
        ("context", REQUIRED),
        ("depth", REQUIRED),
        ("placement", REQUIRED),
        ("shares", REQUIRED),
        ("seconds", REQUIRED),
        ("breakdown", REQUIRED),
        ("notes", list),
        ("draft_shares", None),  # {device key: Share} of the draft model (--draft)
        ("pp_tok_s", 0.0),  # prompt tokens per second (speed/prompt.py) for a prompt of prompt_tokens
        ("pp_breakdown", dict),  # {name: seconds} of that prompt
        ("prompt_tokens", 0),
        ("n_ubatch", 0),
    )

    @property
    def tok_s(self):
        return 1.0 / self.seconds

    @property
    def overfull(self):
        """Offload devices whose ledger exceeds their capacity: [(share, excess bytes)]."""
        return [(share, -share.free_bytes) for share in self.shares[:-1] if share.free_bytes < 0]

    @property
    def fits(self):
        return not self.overfull

    @property
    def gpu_bytes(self):
        return sum(share.model_bytes + share.kv_bytes for share in self.shares[:-1])


def _compute_fn(facts, devices, options, ctx):
    """Compute buffers before a placement exists (the chooser's budgets): each device alone, at the
    GPU alignment whatever its kind (one replay serves every device; the ledger replays the placement)."""
    def compute(key, layers, holds_output):
        if key == CPU:
            return device_compute_bytes(facts, layers, holds_output, options.kv, ctx, "cpu", 0)
        device = devices[key]
        if options.reserve is not None:
            return options.reserve
        return device_compute_bytes(facts, layers, holds_output, options.kv, ctx, "gpu", device.capacity_bytes)
    return compute


def placement_compute_fn(facts, devices, options, ctx, placement):
    """Compute buffers of a placement: llama.cpp's worst-case graph split across its devices by the
    scheduler (compute.placement_compute) — the CPU's holds the inputs and the matmuls of its experts,
    each device the copies of what it reads from another. --reserve overrides the offload devices'."""
    kinds = {index: device.kind for index, device in enumerate(devices)}
    kinds[CPU] = "cpu"
    buffers = computemod.placement_compute(facts, placement, kinds, options.kv, ctx)

    def compute(key, layers, holds_output):
        if key != CPU and options.reserve is not None:
            return options.reserve
        return buffers[key]
    return compute


UNMEASURED_MARGIN_PCT = 15  # the worst under-estimate measured on an unmeasured-like split: gemma4 0.87x (+15% covers it)


def unmeasured_margin(facts, placement):
    """(percent, why) added to each device's compute buffer where this architecture's buffers for this
    kind of placement have no llama.cpp measurement (moetools.arch.registry.measured_compute, from
    tests/data/devicefit_llama_*.json): an architecture with no measured case at all, on any placement;
    one with no measured split case (or measured off on splits at real widths: its profile's
    split_compute_off), when its layers (blocks and output layer) sit on more than one device, the CPU
    included. (0, "") where measured."""
    arch = facts.architecture
    one_device, split = measured_compute(arch)
    if not one_device and not split:
        return UNMEASURED_MARGIN_PCT, f"{arch} has no llama.cpp-measured compute buffer"
    if len(set(placement.layer_device)) > 1:
        off = profile(arch).split_compute_off
        if off:
            return UNMEASURED_MARGIN_PCT, f"{arch}'s split compute buffers were measured {off} llama.cpp's (issue 32)"
        if not split:
            return UNMEASURED_MARGIN_PCT, f"{arch} has no llama.cpp-measured split over several devices"
    return 0, ""


def margin_bytes(compute_bytes, pct, options, key):
    """The unmeasured margin on one device's compute buffer (none on an offload device under --reserve,
    the user's own figure)."""
    if not pct or (key != CPU and options.reserve is not None):
        return 0
    return -(-compute_bytes * pct // 100)


FOOTPRINTS_MAX = 256  # draft_footprint's memo entries per draft


def draft_footprint(draft, devices, cpu, placement, ctx, with_compute=True):
    """{device key: Share} of a draft model loaded beside the target's placement (None: before one is
    chosen, split by capacity), as llama.cpp loads it: on the target's devices or the -devd ones (in
    that order), the target's -ts split by position in that list (and split mode none on the target's
    main GPU unless one device is named: then layer), the draft's own -ngld, no overrides, its KV with
    its layers at the draft cache types, its compute buffers with one output row per sequence. Devices
    the draft is not on get no Share. A draft-mtp Draft: mtp_footprint. with_compute False: the compute
    buffers counted as 0 (weights and KV only, no graph replayed).

    Of the target's placement only its main GPU and -ts count: memoised on the draft by those, the
    devices' and the CPU's fields, the context and with_compute (every round of a plan and every probe
    of the unfittable search asks again; the Shares are read, never changed)."""
    if draft.spec_type == "draft-mtp":
        return mtp_footprint(draft, devices, cpu, placement, ctx, with_compute)
    main_gpu = placement.main_gpu if placement is not None else None
    ts = placement.ts if placement is not None and main_gpu is None else None
    key = (tuple(device.as_tuple() for device in devices), cpu.as_tuple(), main_gpu, None if ts is None else tuple(ts),
           ctx, with_compute)
    memo = draft.__dict__.setdefault("_footprints", {})
    if key not in memo:
        if len(memo) >= FOOTPRINTS_MAX:
            memo.clear()
        memo[key] = _draft_footprint(draft, devices, cpu, main_gpu, ts, ctx, with_compute)
    return memo[key]


def _draft_footprint(draft, devices, cpu, main_gpu, ts, ctx, with_compute):
    layers = draft.facts.layers
    homes = list(range(len(devices))) if draft.devices is None else list(draft.devices)
    mine = [devices[index] for index in homes]
    if draft.devices is not None:
        ts = list(ts[:len(mine)]) if ts else None
        if len(mine) == 1:
            main_gpu = None  # common_base_params_to_speculative: one draft device means split mode layer
        elif main_gpu is not None and main_gpu >= len(mine):
            raise UsageError(f"--main-gpu {main_gpu} with --device-draft of {len(mine)} devices: llama.cpp refuses "
                             f"the draft (invalid value for main_gpu: {main_gpu})")
    dplacement = placemod.user_placement(layers, len(mine), ngl=draft.ngl, ts=ts,
                                         capacities=[d.capacity_bytes for d in mine], main_gpu=main_gpu)
    kinds = {index: device.kind for index, device in enumerate(mine)}
    kinds[CPU] = "cpu"
    buffers = {}
    if with_compute:
        buffers = computemod.placement_compute(draft.facts, dplacement, kinds, draft.kv, ctx, outputs=draft.kv.n_seq)
    kv_layers = kvmod.per_layer(draft.facts.shape, ctx, draft.kv)
    shares = placemod.ledger(layers, dplacement, mine, cpu, kv_layers, lambda key, mine, out: buffers.get(key, 0), {})
    shares[-1].compute_bytes += draft.host_bytes  # the host output-buffer rows a DFlash draft adds (plan_block_draft)
    return dict(zip([*homes, CPU], shares))


def mtp_footprint(draft, devices, cpu, placement, ctx, with_compute=True):
    """{device key: Share} of the MTP context on the target's placement (None: before one is chosen,
    split by capacity): no weights of its own (the NextN tensors are in the target's layers), the
    NextN blocks' KV with their layers, graph_mtp's compute buffers per device."""
    facts = draft.facts
    if placement is None:
        placement = placemod.user_placement(facts.layers, len(devices), capacities=[d.capacity_bytes for d in devices])
    kinds = {index: device.kind for index, device in enumerate(devices)}
    kinds[CPU] = "cpu"
    buffers = {}
    if with_compute:
        buffers = computemod.mtp_placement_compute(facts, placement, kinds, draft.kv, ctx, outputs=draft.kv.n_seq)
    kv_layers = kvmod.per_layer(computemod.mtp_kv_shape(facts.shape, set(facts.graph.mtp_layers)), ctx, draft.kv)
    shares = {}
    for key, device in zip([*range(len(devices)), CPU], [*devices, cpu]):
        mine = [il for il, home in enumerate(placement.layer_device[:-1]) if home == key and kv_layers[il]]
        shares[key] = placemod.Share(device=device, layers=mine, kv_bytes=sum(kv_layers[il] for il in mine),
                                     compute_bytes=buffers.get(key, 0))
    return shares


def _draft_bytes(footprint, key):
    share = footprint.get(key) if footprint else None
    return share.used_bytes if share else 0


def _experts_must_spill(layers, devices):
    """Whether the weights alone exceed the offload devices: some experts then stay on the CPU."""
    weights = layers.input_bytes + layers.output_bytes + sum(block.total_bytes for block in layers.blocks)
    return weights > sum(device.capacity_bytes for device in devices)


def _budget_ceilings(devices, options, footprint):
    """The most each offload device's budget can be in any round of plan_at's chooser: its capacity less
    the margin, the draft's share (`footprint`) and the least its compute buffer can be (0, or --reserve)."""
    least = options.reserve if options.reserve is not None else 0
    return [device.capacity_bytes - options.margin - least - _draft_bytes(footprint, index)
            for index, device in enumerate(devices)]


def _room_for_every_layer(costs, devices, cpu, options, ctx):
    """Whether the offload devices could hold the dense weights and KV of every block and the output
    layer beside the draft's weights and KV, each device's compute buffer counted at its least. When
    not, choose() leaves a layer on the CPU whatever the buffers (the first step fits dense weights into
    the budgets, and what the devices take never exceeds their positive budgets: each at most its
    ceiling), and no graph need be replayed to say so."""
    footprint = None
    if options.draft is not None:
        footprint = draft_footprint(options.draft, devices, cpu, None, ctx, with_compute=False)
    room = sum(max(ceiling, 0) for ceiling in _budget_ceilings(devices, options, footprint))
    return sum(costs.dense) + costs.output <= room


def plan_at(facts, devices, cpu, options, ctx, whole_model=False, spill=None):
    """The DevicePlan for a context of `ctx` tokens (the user's placement when given, else chosen, its
    CPU experts those of the first or the last layers of each device's range: placement.choose's spill).

    whole_model: None as soon as the chosen placement leaves a layer on the CPU (what _fits_with asks
    for), before its compute buffers are replayed. Exact: each round's budgets are at most the round
    before's (the assumed buffers only grow), and choose()'s first step (the smallest first layer
    whose dense weights fit) only moves up as budgets shrink, so no later round offloads every layer."""
    layers = facts.layers
    shape = facts.shape
    kv_layers = kvmod.per_layer(shape, ctx, options.kv)
    compute = _compute_fn(facts, devices, options, ctx)
    margins = {index: options.margin for index in range(len(devices))}
    margins[CPU] = options.os_reserve
    notes = []
    draft = options.draft
    footprint = None
    if options.user_placement:
        placement = placemod.user_placement(layers, len(devices), ngl=options.ngl, ts=options.ts,
                                            n_cpu_moe=options.n_cpu_moe,
                                            capacities=[d.capacity_bytes for d in devices], main_gpu=options.main_gpu,
                                            sources=options.overrides, homes=options.tensor_homes)
        compute = placement_compute_fn(facts, devices, options, ctx, placement)
        if draft is not None:
            footprint = draft_footprint(draft, devices, cpu, placement, ctx)
    else:
        costs = placemod.layer_costs(layers, kv_layers)
        if whole_model and not _room_for_every_layer(costs, devices, cpu, options, ctx):
            return None
        if draft is not None:  # first guess: the draft split by capacity
            footprint = draft_footprint(draft, devices, cpu, None, ctx)
        if devices and _budget_ceilings(devices, options, footprint)[-1] < costs.output:
            # the last device cannot hold even the output layer beside the draft, whatever its compute
            # buffer: every round chooses the all-CPU placement (choose()'s first step fits nothing), so
            # the device-alone graphs are not replayed; the rounds then settle on that placement's buffers
            assumed = [0] * len(devices)
        else:
            all_blocks = list(range(layers.n_layer))
            assumed = [compute(index, all_blocks, index == len(devices) - 1) for index in range(len(devices))]
            offload = next((index for index, device in enumerate(devices) if device.kind == "gpu"), None)
            if offload is not None and options.reserve is None and _experts_must_spill(layers, devices):
                # the first CUDA device runs the batch matmuls of the CPU's experts and holds a copy of the
                # matrix being multiplied: assume the largest from the start (saves a second round)
                assumed[offload] += max((size for block in layers.blocks for size in block.experts.values()), default=0)
        assumed = [need + _draft_bytes(footprint, index) for index, need in enumerate(assumed)]
        for _ in range(REPLAN_ROUNDS):
            budgets = [device.capacity_bytes - assumed[index] - options.margin for index, device in enumerate(devices)]
            placement, notes = placemod.choose(layers, costs, budgets, spill or ("last" if options.spill == "last" else "first"))
            if whole_model and CPU in placement.layer_device:
                return None
            placement.n_cpu_moe = placemod.cpu_moe_count(placement, layers)
            compute = placement_compute_fn(facts, devices, options, ctx, placement)
            if draft is not None:
                footprint = draft_footprint(draft, devices, cpu, placement, ctx)
            # the placement's own buffers can exceed the estimate (a GPU holds the copy of a CPU expert
            # matrix it runs the batch's matmul of; the draft follows the chosen -ts): choose again with
            # the bytes it really needs
            pct = unmeasured_margin(facts, placement)[0]
            real = [compute(index, None, None) + margin_bytes(compute(index, None, None), pct, options, index)
                    + _draft_bytes(footprint, index) for index in range(len(devices))]
            if all(need <= have for need, have in zip(real, assumed)):
                break
            assumed = [max(need, have) for need, have in zip(real, assumed)]
    shares = placemod.ledger(layers, placement, devices, cpu, kv_layers, compute, margins)
    pct, why = unmeasured_margin(facts, placement)
    if pct:
        for key, share in zip([*range(len(devices)), CPU], shares):
            share.compute_margin_bytes = margin_bytes(share.compute_bytes, pct, options, key)
            share.compute_margin_pct = pct if share.compute_margin_bytes else 0
        notes = [*notes, f"unmeasured: +{pct}% on each device's compute buffer: {why}"]
    if footprint:
        for key, share in zip([*range(len(devices)), CPU], shares):
            share.draft_bytes = _draft_bytes(footprint, key)
    depth = options.depth if options.depth is not None else max(1, ctx // 2)
    kv_read = kvmod.read_per_token(shape, min(depth, ctx), options.kv)
    cpu_share = shares[-1]
    room = None
    if cpu.capacity_bytes:
        room = cpu.capacity_bytes - options.os_reserve - cpu_share.kv_bytes - cpu_share.compute_bytes
    seconds, breakdown = speedmod.decode_time(shares, placement, devices, kv_read, options.speed, room)
    result = DevicePlan(ctx, depth, placement, shares, seconds, breakdown, notes, footprint)
    result.n_ubatch = kvmod.n_ubatch(options.kv, ctx)
    result.prompt_tokens = min(options.speed.prompt_tokens, ctx)
    result.pp_tok_s, result.pp_breakdown = promptmod.prompt_time(facts, placement, devices, options.speed,
                                                                 result.prompt_tokens, result.n_ubatch)
    if not whole_model and not options.user_placement and devices and (not result.fits or all(home == CPU for home in placement.layer_device)):
        result = _what_a_user_would_try(facts, devices, cpu, options, ctx, result)
    return result


FALLBACK_NGL_MAX = 64  # the largest -ngl the fallback tries (each try replays the placement's graphs)


def _what_a_user_would_try(facts, devices, cpu, options, ctx, searched):
    """When the placement search offloads nothing (or what it found does not fit), try what a user would
    type before concluding: the output layer alone (-ngl 1), then small partial offloads -ngl 2, 3, ...
    with their experts on their devices and with every expert on the CPU (--n-cpu-moe N), each evaluated
    as device-fit evaluates a user's placement (plan_at). The fastest that fits replaces the search's
    answer (a tie keeps fewer layers); none fitting keeps it. -ngl k stops being tried once neither
    variant fits (a larger -ngl only adds to the devices)."""
    n_layer = facts.layers.n_layer
    variants = [None] if facts.dense else [None, facts.block_count]
    best = None
    for ngl in range(1, min(n_layer + 1, FALLBACK_NGL_MAX) + 1):
        fitted = False
        for n_cpu_moe in variants:
            trial = plan_at(facts, devices, cpu, options.replace(ngl=ngl, n_cpu_moe=n_cpu_moe), ctx)
            if trial.fits:
                fitted = True
                if best is None or trial.tok_s > best.tok_s:
                    best = trial
        if not fitted:
            break
    if best is None or (searched.fits and best.tok_s <= searched.tok_s):
        return searched
    flags = placement_flags(options.replace(ngl=best.placement.ngl, n_cpu_moe=best.placement.n_cpu_moe))
    best.notes = [f"the placement search offloaded nothing that fits; {flags} (what a user would try, evaluated "
                  f"as device-fit evaluates a user's placement) fits: {best.tok_s:.2f} tok/s"]
    return best


class UpstreamResult(Record):

    FIELDS = (
        ("chosen", None),  # DevicePlan, or None when nothing fits
        ("alternatives", list),  # DevicePlan per context tried (the trade-off), or [chosen]
        ("devices", REQUIRED),
        ("cpu", REQUIRED),
        ("notes", list),
        ("warnings", list),
        ("unfittable", None),  # {shortfall per device, suggestions} when nothing fits
        ("draft", None),  # the draft.Draft planned beside the target
        ("mmap", True),  # llama.cpp maps the model (no --no-mmap): the CPU's model buffer is a file span
        ("tensor_homes", None),  # the user's overrides resolved: {tensor name: device key}
        ("kv", None),  # the chosen plan's KVSettings (its -ub/-b, where the search chose them)
        ("batches", list),  # [(ubatch, batch, DevicePlan)] the -ub trade-off at the chosen context
        ("threads", None),  # -t of the launch line
        ("speed", None),  # the SpeedSettings the tok/s rest on
        ("prefer", "balanced"),
        ("placements", list),  # compare.py rows: device-fit's first/last-layer spills and llama.cpp --fit's choice
    )


def check_fixed_reserve(devices, options):
    """Raise UsageError when --reserve (the whole compute reserve) or --margin (kept beyond the modelled
    compute buffer) takes an offload device's whole memory: the flags contradict the device, so no
    placement is an answer (exit 2, as the fork's plan does; core.fit)."""
    if options.margin < 0:
        raise UsageError("--margin must not be negative")
    for device in devices:
        if not device.capacity_bytes:
            continue
        if options.reserve is not None and device.capacity_bytes <= options.reserve:
            raise UsageError(f"--reserve {format_size(options.reserve)} leaves nothing of {device.name}'s "
                             f"{format_size(device.capacity_bytes)}")
        if options.reserve is None and device.capacity_bytes <= options.margin:
            raise UsageError(f"--margin {format_size(options.margin)} leaves nothing of {device.name}'s "
                             f"{format_size(device.capacity_bytes)}")


def plan(facts, devices, cpu, options):
    """Plan upstream llama.cpp on these devices. Raises UsageError for a bad user placement."""
    if options.ts is not None and len(options.ts) != len(devices):
        raise UsageError(f"-ts gives {len(options.ts)} weights for {len(devices)} device(s) "
                         f"({', '.join(d.name for d in devices) or 'none'}); give one per device, RPC devices first")
    if options.ts is not None and (any(w < 0 for w in options.ts) or not any(options.ts)):
        raise UsageError("-ts weights must be non-negative and not all 0")
    if options.main_gpu is not None and not 0 <= options.main_gpu < len(devices):
        raise UsageError(f"--main-gpu {options.main_gpu} is not a device index (0..{len(devices) - 1})")
    check_fixed_reserve(devices, options)
    kvmod.check_settings(facts.shape, options.kv)
    notes, warnings = [], []
    if options.overrides:
        _resolve_overrides(facts, devices, options, notes, warnings)
    train = facts.shape.context_train
    if options.ctx is not None:
        if options.ctx < 1:
            raise UsageError("the context must be at least 1 token")
        candidates = [plan_at(facts, devices, cpu, options, options.ctx)]
    else:
        if train < 1:
            raise UsageError("the model's training context is 0; give --ctx")
        candidates = [plan_at(facts, devices, cpu, options, ctx) for ctx in context.contexts_to_try(train)]
    feasible = [candidate for candidate in candidates if candidate.fits]
    result = UpstreamResult(alternatives=candidates, devices=devices, cpu=cpu, notes=notes, warnings=warnings,
                            draft=options.draft, mmap=options.speed.mmap, tensor_homes=options.tensor_homes,
                            speed=options.speed, prefer=options.prefer)
    free_ram = cpu.capacity_bytes - options.os_reserve
    if options.speed.mmap and cpu.capacity_bytes and facts.file_bytes > free_ram:
        warnings.append(f"the model file ({facts.file_bytes / GIB:.2f} GiB) exceeds free RAM ({free_ram / GIB:.2f} GiB: --ram "
                        f"less --os-reserve) and llama.cpp maps it (no --no-mmap): llama.cpp 0c1e57098 maps every "
                        "file with MAP_POPULATE and POSIX_MADV_WILLNEED over the whole file (src/llama-mmap.cpp), so "
                        "loading reads every page of it, evicting what it read first")
    if options.draft is not None:
        if options.draft.spec_type == "draft-mtp":
            blocks = ", ".join(map(str, facts.mtp_blocks))
            notes.append(f"--spec-type draft-mtp: the NextN/MTP block(s) {blocks} are loaded with the model (in its layers); "
                         "the MTP context's KV and compute buffers are in each device's draft_bytes; tok/s is the "
                         "target's alone (speculative decoding's gain is not predicted)")
        else:
            notes.append(f"draft model {options.draft.path}: its weights, KV and compute buffers are in each device's "
                         "draft_bytes; tok/s is the target's alone (speculative decoding's gain is not predicted)")
    if not feasible:
        result.unfittable = unfittable(facts, devices, cpu, options, candidates[0])
        notes.append("unfittable: " + result.unfittable["summary"])
        return result
    if options.ctx is not None:
        chosen = feasible[0]
    else:
        picked, best = context.choose([(c.context, c.tok_s) for c in feasible])
        chosen = next(c for c in feasible if c.context == picked)
        notes.append(f"context {chosen.context}: the largest of {', '.join(str(c.context) for c in candidates)} "
                     f"costing at most 5% of the best speed ({chosen.tok_s:.2f} vs {best:.2f} tok/s); give --ctx to choose")
    result.kv = options.kv
    if options.batch_search and not options.user_placement and options.draft is None:
        chosen = _choose_batch(facts, devices, cpu, options, result, chosen, notes)
    result.chosen = chosen
    result.threads = options.speed.threads
    threads = batchmod.threads_note(options.speed, chosen.shares[-1].active_bytes)
    if threads:
        notes.append(threads)
    notes += chosen.notes
    cpu_share = chosen.shares[-1]
    if cpu.capacity_bytes and cpu_share.free_bytes < 0:
        warnings.append(f"the CPU's share ({cpu_share.used_bytes / GIB:.2f} GiB with the OS reserve) exceeds RAM "
                        f"({cpu.capacity_bytes / GIB:.2f} GiB): llama.cpp memory-maps the weights, so the missing "
                        f"part is read from the drive (--disk-bw) and the speed counts those misses")
    return result


def _choose_batch(facts, devices, cpu, options, result, chosen, notes):
    """The -ub trade-off at the chosen context (batching.py): the best plan for --prefer replaces the
    chosen one (and its row among the contexts)."""
    best, rows = batchmod.choose_ubatch(
        lambda kv: plan_at(facts, devices, cpu, options.replace(kv=kv), chosen.context), chosen, options.kv, options.prefer)
    result.batches = rows
    if best is not chosen:
        ubatch, batch = next((ub, b) for ub, b, plan_ in rows if plan_ is best)
        result.kv = options.kv.replace(ubatch=ubatch, batch=batch)
        result.alternatives = [best if candidate is chosen else candidate for candidate in result.alternatives]
        notes.append(f"-ub {ubatch} -b {batch} (--prefer {options.prefer}): {best.tok_s:.2f} tok/s decode, "
                     f"{best.pp_tok_s:.0f} tok/s prompt, against {chosen.tok_s:.2f} and {chosen.pp_tok_s:.0f} at "
                     f"-ub {options.kv.ubatch} -b {options.kv.batch}")
    return best


def _resolve_overrides(facts, devices, options, notes, warnings):
    """Set options.tensor_homes from the user's overrides on these devices (UsageError for a bad regex
    or device), with the notes and warnings of what they match."""
    from moetools.devicefit import overrides as overridesmod

    options.overrides, renamed = overridesmod.canonical(options.overrides, devices)
    warnings += renamed
    resolved = overridesmod.resolve(options.overrides, devices)
    options.tensor_homes, counts, contests = overridesmod.tensor_homes(resolved, facts.layers.tensors)
    names = {CPU: "CPU", **{index: device.name for index, device in enumerate(devices)}}
    more_notes, more_warnings = overridesmod.report(resolved, counts, contests, names)
    notes += more_notes
    warnings += more_warnings
    if any(kind == "-ot" for kind, _ in options.overrides):
        counts = {}
        for name, role, *_ in facts.layers.tensors:
            if name in options.tensor_homes:
                key = (options.tensor_homes[name], "expert" if role == "expert" else "other")
                counts[key] = counts.get(key, 0) + 1
        text = ", ".join(f"{count} {kind} tensor(s) to {names[key]}" for (key, kind), count in sorted(counts.items()))
        notes.append(f"overrides: {text or 'no tensor matched'} (the first match wins: llama_model_loader::create_tensor)"
                     + ("; a non-expert tensor moved off its layer's device is counted in that device's weights "
                        "and reads, its compute still modelled on the layer's device"
                        if any(kind == "other" for _, kind in counts) else ""))


def unfittable(facts, devices, cpu, options, attempt):
    """Numbers for a plan that does not fit: shortfall per device, the smallest VRAM (same count) and
    the extra GPU that would fit, and the CPU-expert fallback."""
    shortfall = {share.device.name: excess for share, excess in attempt.overfull}
    summary = "; ".join(f"{name} short by {excess / GIB:.2f} GiB" for name, excess in shortfall.items())
    suggestions = {}
    if devices and options.user_placement:
        fallback = options.without_placement()
        chosen = plan_at(facts, devices, cpu, fallback, attempt.context)
        if chosen.fits:
            suggestions["chosen_placement_fits"] = True
        suggestions.update(user_placement_fixes(facts, devices, cpu, options, attempt.context))
    gpus = [d for d in devices if d.kind == "gpu"]
    if gpus:
        low, high = max(d.capacity_bytes for d in gpus), 4096 * GIB
        if not _fits_with(facts, devices, cpu, options, attempt.context, high, None):
            suggestions["smallest_vram_bytes"] = None
        else:
            while high - low > 256 * 1024 * 1024:
                middle = (low + high) // 2
                if _fits_with(facts, devices, cpu, options, attempt.context, middle, None):
                    high = middle
                else:
                    low = middle
            suggestions["smallest_vram_bytes"] = high
        for key in ("rtx3090", "rtx4090", "rtx5090", "a6000", "a100-80g"):
            label, size, bw = GPU_TABLE[key]
            if _fits_with(facts, devices, cpu, options, attempt.context, None, Device(f"CUDA{len(gpus)}", "gpu", size, bw, "GPU table", key)):
                suggestions["extra_gpu"] = key
                break
    summary = summary or "nothing fits"
    parts = [summary]
    if options.user_placement:
        asked = placement_flags(options)
        if suggestions.get("placement_fits_from_vram_bytes"):
            parts.append(f"{asked} fits from {suggestions['placement_fits_from_vram_bytes'] / GIB:.1f} GiB per GPU")
        elif gpus:
            parts.append(f"{asked} fits no GPU size (its CPU share is what does not fit)")
        if suggestions.get("nearest"):
            nearest = suggestions["nearest"]
            parts.append(f"on these devices {nearest['flags']} fits: {nearest['tok_s']:.2f} tok/s at context {attempt.context}")
    elif suggestions.get("smallest_vram_bytes"):
        parts.append(f"fits with {len(gpus)} GPU(s) of {suggestions['smallest_vram_bytes'] / GIB:.1f} GiB each")
    if suggestions.get("extra_gpu"):
        parts.append(f"or with one more {GPU_TABLE[suggestions['extra_gpu']][0]}")
    if suggestions.get("chosen_placement_fits"):
        parts.append("device-fit's own placement (drop -ngl/-ts/-ot/--n-cpu-moe) fits")
    parts.append("or with the streaming fork and a resident tier (--runtime fork --tiers)")
    return {"shortfall_bytes": shortfall, "summary": ", ".join(parts), **suggestions}


def mapped_spans(layers, placement, homes=None):
    """[(shard, first, end)]: per shard, the file range from the first to the end of the last tensor on
    the CPU. Under mmap llama.cpp's CPU model buffer is that range of the mapped file, not an allocation
    (src/llama-model.cpp load_tensors: ggml_backend_dev_buffer_from_host_ptr over
    llama_model_loader::get_mapping_range's [first, last)): tensors of other devices between them count,
    a tied embedding counts once."""
    homes = homes or {}
    spans = {}
    for name, role, block, part, n_bytes, _ in layers.tensors:
        if name in homes:
            home = homes[name]
        elif role == "input":
            home = CPU
        elif role == "output":
            home = placement.layer_device[-1]
        elif role == "dense":
            home = placement.layer_device[block]
        else:
            home = placement.expert_device[block][part]
        if home != CPU or name not in layers.offsets:
            continue
        shard, offset = layers.offsets[name]
        first, end = spans.get(shard, (offset, offset + n_bytes))
        spans[shard] = (min(first, offset), max(end, offset + n_bytes))
    return [(shard, first, end) for shard, (first, end) in sorted(spans.items())]


def placement_flags(options):
    """The user's placement as the llama.cpp flags they gave."""
    flags = []
    if options.ngl is not None:
        flags += ["-ngl", str(options.ngl)]
    if options.ts is not None:
        flags += ["-ts", ",".join(f"{w:g}" for w in options.ts)]
    if options.n_cpu_moe is not None:
        flags += ["--n-cpu-moe", str(options.n_cpu_moe)]
    if options.main_gpu is not None:
        flags += ["-mg", str(options.main_gpu)]
    return " ".join(flags)


def user_placement_fixes(facts, devices, cpu, options, ctx):
    """For a user placement that does not fit: the smallest VRAM per GPU at which THAT placement fits
    (to 256 MiB), and the nearest placement that fits the devices given -- more experts on the CPU
    (`--n-cpu-moe` from the user's value up), else fewer layers offloaded (`-ngl` down) -- with its
    speed. Both searches are binary: a placement's GPU bytes only fall as --n-cpu-moe rises or -ngl
    falls, and only rise with the card."""
    fixes = {}
    gpus = [d for d in devices if d.kind == "gpu"]
    if gpus:
        step = 256 * 1024 * 1024
        low = max(d.capacity_bytes for d in gpus) // step
        high = low + (facts.file_bytes + 64 * GIB) // step

        def fits_at(units):
            sized = [Device(d.name, d.kind, units * step, d.bandwidth, d.bandwidth_source, d.model) if d.kind == "gpu" else d
                     for d in devices]
            return plan_at(facts, sized, cpu, options, ctx).fits

        found = smallest(fits_at, low, high)
        if found is not None:
            fixes["placement_fits_from_vram_bytes"] = found * step
    nearest = None
    if not facts.dense:
        start = options.n_cpu_moe if options.n_cpu_moe is not None else 0
        found = smallest(lambda n: plan_at(facts, devices, cpu, options.replace(n_cpu_moe=n), ctx).fits,
                          start, facts.block_count)
        if found is not None:
            nearest = options.replace(n_cpu_moe=found)
    if nearest is None and options.ngl is not None and options.ngl > 0:
        # fewer layers offloaded: the largest -ngl below the user's that fits (fits falls as ngl rises)
        found = smallest(lambda k: plan_at(facts, devices, cpu, options.replace(ngl=options.ngl - k), ctx).fits,
                          0, options.ngl)
        if found is not None:
            nearest = options.replace(ngl=options.ngl - found)
    if nearest is not None:
        trial = plan_at(facts, devices, cpu, nearest, ctx)
        fixes["nearest"] = {"flags": placement_flags(nearest), "ngl": nearest.ngl, "n_cpu_moe": nearest.n_cpu_moe,
                            "tok_s": round(trial.tok_s, 4)}
    return fixes


def _fits_with(facts, devices, cpu, options, ctx, vram, extra):
    trial = []
    for device in devices:
        if vram is not None and device.kind == "gpu":
            device = Device(device.name, device.kind, vram, device.bandwidth, device.bandwidth_source, device.model)
        trial.append(device)
    if extra is not None:
        trial.append(extra)
    fallback = options.without_placement()
    attempt = plan_at(facts, trial, cpu, fallback, ctx, whole_model=True)
    return attempt is not None and attempt.fits and all(home != CPU for home in attempt.placement.layer_device)


# --- the command line ---------------------------------------------------------------------------

def server_args(model_path, result, kv_flags):
    """The llama-server arguments of the chosen plan: RPC servers, -ngl, -ts, -ot per device (or
    --n-cpu-moe where that is exact), -c, the KV and batch flags, --fit off."""
    chosen = result.chosen
    placement = chosen.placement
    devices = result.devices
    args = llama_model_args(model_path)
    rpc = [device.endpoint for device in devices if device.kind == "rpc"]
    if rpc:
        args += ["--rpc", ",".join(rpc)]  # before -ot: RPC buffer types exist once the servers are added
    args += ["-c", str(chosen.context), "-ngl", str(placement.ngl)]
    if len(devices) > 1 and placement.ts is not None and placement.main_gpu is None:
        args += ["-ts", ",".join(_weight_text(w) for w in placement.ts)]
    if placement.source == "user":
        if placement.main_gpu is not None:
            args += ["-sm", "none", "-mg", str(placement.main_gpu)]
        if placement.sources is not None:  # the user's overrides in their order (the order decides)
            for kind, value in placement.sources:
                args += [kind] if value is None else [kind, str(value)]
        elif placement.n_cpu_moe is not None:
            args += ["--n-cpu-moe", str(placement.n_cpu_moe)]
    elif placement.n_cpu_moe is not None and len(devices) <= 1:
        if placement.n_cpu_moe:
            args += ["--n-cpu-moe", str(placement.n_cpu_moe)]
        partial = placemod.partial_patterns(placement, devices)
        if partial:
            args += ["-ot", ",".join(f"{pattern}={target}" for pattern, target in partial)]
    else:
        entries = placemod.override_patterns(placement, devices)
        if entries:
            args += ["-ot", ",".join(f"{pattern}={target}" for pattern, target in entries)]
    threads = ["-t", str(result.threads)] if result.threads else []
    return args + kv_flags + threads + draft_args(result.draft, devices) + ["--fit", "off"]


def draft_args(draft, devices):
    """llama-server's flags for the draft model: -md, -ngld, -devd when given, its cache types
    (llama.cpp's draft cache defaults to f16 whatever -ctk says, so they are always spelled out) and
    `--spec-type draft-simple` (`draft-dflash` for a DFlash draft): without a type llama-server loads the
    draft (its memory is taken) but common_speculative_init finds no implementation and never drafts with it."""
    if draft is None:
        return []
    n_max = ["--spec-draft-n-max", str(draft.n_max)] if draft.n_max != 3 else []
    if draft.spec_type == "draft-mtp":  # the model's own NextN blocks: no second model, its cache types
        return ["--spec-type", "draft-mtp", *n_max, "-ctkd", draft.kv.ctk, "-ctvd", draft.kv.ctv]
    args = ["-md", draft.path, "-ngld", "all" if draft.ngl is None else str(draft.ngl)]
    if draft.devices is not None:
        names = draftmod.llama_device_names(devices)
        args += ["-devd", ",".join(names[index] for index in draft.devices) if draft.devices else "none"]
    # a DFlash draft is llama.cpp's block draft type (common/speculative.cpp "draft-dflash"); a Gemma 4
    # assistant drafts through the MTP implementation (its context reads the target's KV)
    spec_type = "draft-simple"
    if draft.facts.architecture in draftmod.BLOCK_DRAFT_ARCHES:
        spec_type = "draft-dflash"
    elif draft.facts.shape.borrowed:
        spec_type = "draft-mtp"
    return args + ["-ctkd", draft.kv.ctk, "-ctvd", draft.kv.ctv, "--spec-type", spec_type, *n_max]


def _weight_text(weight):
    return str(int(weight)) if float(weight).is_integer() else f"{weight:g}"
