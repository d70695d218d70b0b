"""What llama.cpp's `--fit` (llama-fit-params, and llama-server/-cli with fit on) would choose for these
devices: the same search as common/fit.cpp common_params_fit_impl at llama.cpp 0c1e57098, each trial
measured with device-fit's own memory model (the user-placement evaluation of upstream.plan_at)
instead of loading the model with no_alloc.

llama.cpp's algorithm (common/fit.cpp, 0c1e57098):

- Targets. Each device's target is its free memory (ggml_backend_dev_memory) less its margin
  (`-fitt/--fit-target` MiB, one value broadcast, default 1024 MiB; common.h fit_params_target). A
  device's measured use is model + context + compute (llama_memory_breakdown_data::total()). System
  memory is taken as unlimited.
- Step 1 (common_params_fit_impl "step 1"). The default parameters are measured: every layer offloaded
  (-ngl -1), split by free memory, no overrides. With one device, nothing changes when its free memory
  less the use is at least its margin; with several, when that holds on every device.
- Step 2 (context). Only when the context is 0 (no -c: the training context; `-c 0` asks for it too but
  also sets n_ctx_min to UINT32_MAX, so nothing is reduced, unless a later `-fitc` sets it) and the sum of the
  projected free memory is below the sum of the margins: the model is measured again at
  n_ctx_min (`-fitc/--fit-ctx`, default 4096) and the context interpolated linearly between that and
  the training context to meet the summed targets (with several devices less (nd+1) times a sixth of
  a layer's weights for a MoE, half for a dense model), rounded down to a multiple of 256, at least
  n_ctx_min. One device: done (only -c changes). Several: the search below runs at that context.
  A context the user set is never changed; -ngl, -ts or -ot the user set stop the fit.
- Step 3 ("fill the back to front with dense layers"). Layers are the n_layer repeating blocks and
  the output layer (n_layer + 1). Per device a slot {n_layer, n_part, overflow}: its range holds
  n_layer consecutive layers, the devices in order and the last device ending at the output layer
  (set_ngl_tensor_split_tbo: -ngl is the sum, -ts the counts); of a range the first n_layer - n_part
  layers are whole, the LAST n_part are partial: their experts go to the CPU (pattern
  `blk\\.N\\.ffn_(up|down|gate_up|gate)_(ch|)exps`), except the first partial layer, which sends only its
  `overflow` fraction (ATTN `ffn_(gate|up|gate_up|down).*`, UP `ffn_(gate|gate_up|down).*`, GATE
  `ffn_down.*` -- regex_search, so dense FFN, shared-expert and router tensors of that block move too)
  to its overflow buffer (the CPU, or the next device's buffer in step 4). For a MoE every layer of
  step 3 is partial (dense-only), but the last device's first layer stays whole
  (n_part = n_layer - 1). From the last device to the first, each device takes as many of the
  unassigned layers as fit its target, by the method of false position between "none" and "all
  unassigned" (get_memory_for_layers measures every guess; the step is delta * (target - mem_low) /
  (mem_high - mem_low), at least 1, at most delta - 1; stop at delta 1 and keep the lower bound).
  A dense model, or a MoE whose dense weights alone (every expert on the CPU, default split) leave no
  surplus summed over the devices, stops here.
- Step 4 ("convert the dense-only layers in the back to full layers in the front"). id_dense_start is
  the first of the trailing devices that hold layers. For each device from the first to
  id_dense_start, front to back: the "high" guess gives it every layer of the devices from
  id_dense_start on (the last keeps one), as whole layers; if that exceeds its target, false position
  on its count of whole layers, each guess converting the first partial layers of the devices from
  id_dense_start on (one partial layer fewer there, one whole layer more here). Then one more layer
  is tried: taken from id_dense_start's device and made this device's last, partial layer with
  overflow UP (its gate and down matrices -- and the other matches -- to the next device's buffer,
  or the CPU for the last device); if both this device and the next stay strictly under target,
  GATE (only down leaves) is tried next and kept if it fits too; if UP did not fit, ATTN (the whole
  FFN leaves) is tried instead.
- Output (tools/fit-params/fit-params.cpp): `-c N -ngl N`, `-ts` the per-device layer counts when
  more than one device has a non-zero count at the end, `-ot "PATTERN=BUFT,..."` the partial layers'
  overrides, devices in order, within a device the layers in order.

So, per GPU, the experts that leave are those of the LAST layers of its range (the first of them, in
step 4, possibly only partly); the layers at the front of every range keep their experts.
"""

from moetools.devicefit import overrides as overridesmod
from moetools.devicefit import upstream
from moetools.devicefit.record import REQUIRED, Record

MIB = 1024 * 1024
FIT_TARGET = 1024 * MIB  # common.h fit_params_target
FIT_CTX = 4096  # common.h fit_params_min_ctx
CTX_ALIGN = 256  # "round down context for CUDA backend"
PATTERNS = {  # get_overflow_pattern: what leaves a partial layer
    "attn": r"blk\.{}\.ffn_(gate|up|gate_up|down).*",
    "up": r"blk\.{}\.ffn_(gate|gate_up|down).*",
    "gate": r"blk\.{}\.ffn_down.*",
    "moe": r"blk\.{}\.ffn_(up|down|gate_up|gate)_(ch|)exps",
}
ALL_MOE = r"blk\.\d+\.ffn_(up|down|gate_up|gate)_(ch|)exps"
U32 = 1 << 32


class FitFailed(Exception):
    """llama.cpp's common_params_fit_exception: the fit gives up (status FAILURE)."""


class FitChoice(Record):
    """What --fit chooses. ctx: the context it sets; ngl None: left at the default (-1, nothing
    changed); ts: per-device layer counts (None: not written); overrides: [(pattern, buffer name)];
    used: the bytes each device is projected to use (device-fit's model); status "unchanged",
    "context", "fitted" or "failed"; why: a failure's reason; trials: configurations measured."""

    FIELDS = (
        ("ctx", REQUIRED),
        ("ngl", None),
        ("ts", None),
        ("overrides", list),
        ("used", list),
        ("status", "fitted"),
        ("why", ""),
        ("trials", 0),
    )

    def printed_ts(self):
        """-ts as fit-params prints it: trailing zero counts dropped, absent with one count left."""
        counts = list(self.ts or [])
        while len(counts) > 1 and counts[-1] == 0:
            counts.pop()
        return counts if len(counts) > 1 else None

    def flags(self):
        """The flags llama-fit-params prints: ["-c", N, "-ngl", N, ("-ts", "a,b"), ("-ot", "P=B,...")]."""
        out = ["-c", str(self.ctx), "-ngl", str(-1 if self.ngl is None else self.ngl)]
        ts = self.printed_ts()
        if ts:
            out += ["-ts", ",".join(str(count) for count in ts)]
        if self.overrides:
            out += ["-ot", ",".join(f"{pattern}={buft}" for pattern, buft in self.overrides)]
        return out

    @property
    def n_cpu_moe(self):
        """N when the overrides are exactly --n-cpu-moe N's blocks 0..N-1 (whole experts to the CPU), else None."""
        blocks = []
        for pattern, buft in self.overrides:
            head, _, tail = pattern.partition(r"\.ffn_(up|down|gate_up|gate)_(ch|)exps")
            if buft != "CPU" or tail or not head.startswith(r"blk\.") or not head[5:].isdigit():
                return None
            blocks.append(int(head[5:]))
        return len(blocks) if blocks == list(range(len(blocks))) else None


def layout(slots, overflow_to, n_total):
    """(ngl, per-device counts, [(pattern, buffer name)]) of slots [(n_layer, n_part, overflow kind)]
    (set_ngl_tensor_split_tbo): ranges in device order ending at layer n_total - 1 (the output); in
    each range the last n_part layers are partial, the first of them sending its overflow kind to
    overflow_to[device], the others their experts to the CPU."""
    ngl = sum(slot[0] for slot in slots)
    il0 = n_total - ngl
    entries = []
    for device, (n_layer, n_part, kind) in enumerate(slots):
        il0 += n_layer - n_part
        for il in range(il0, il0 + n_part):
            first = il == il0
            entries.append((PATTERNS[kind if first else "moe"].format(il), overflow_to[device] if first else "CPU"))
        il0 += n_part
    return ngl, [slot[0] for slot in slots], entries


def trial_options(facts, devices, options, ngl=None, ts=None, entries=()):
    """upstream.UpstreamOptions that evaluate a --fit configuration as a user's placement: -ngl (None:
    -1, every layer), -ts counts (None or all 0: llama.cpp's default split), -ot [(pattern, buffer
    name)] resolved to tensor homes on these devices."""
    options = options.replace(ngl=ngl, ts=list(ts) if ts and any(ts) else None, n_cpu_moe=None, main_gpu=None,
                              overrides=None, tensor_homes=None)
    if entries:
        sources = [("-ot", ",".join(f"{pattern}={buft}" for pattern, buft in entries))]
        resolved = overridesmod.resolve(sources, devices)
        homes = overridesmod.tensor_homes(resolved, facts.layers.tensors)[0]
        return options.replace(overrides=sources, tensor_homes=homes)
    if ngl is None:
        return options.replace(ngl=facts.layers.n_layer + 1)
    return options


def choice_options(choice, facts, devices, options):
    """trial_options of a FitChoice: `upstream.plan_at(facts, devices, cpu, these, choice.ctx)` is what
    device-fit predicts for the placement --fit would choose (its ledger and speed)."""
    return trial_options(facts, devices, options, choice.ngl, choice.ts, choice.overrides)


def fit_plan(facts, devices, cpu, options, ctx, **fit_options):
    """(FitChoice, upstream.DevicePlan of that choice at its context, or None when the fit failed):
    what --fit would choose and what device-fit predicts for it (ledger, fits, tok/s)."""
    choice = fit_choice(facts, devices, cpu, options, ctx, **fit_options)
    if choice.status == "failed":
        return choice, None
    return choice, upstream.plan_at(facts, devices, cpu, choice_options(choice, facts, devices, options), choice.ctx)


class _Measure:
    """device-fit's memory model as fit.cpp's get_memory_for_layers: [bytes per offload device] of a
    configuration (model + KV + compute, and a draft's share), counting the trials."""

    def __init__(self, facts, devices, cpu, options):
        self.facts, self.devices, self.cpu, self.options = facts, devices, cpu, options
        self.trials = 0

    def __call__(self, ctx, ngl=None, ts=None, entries=()):
        self.trials += 1
        options = trial_options(self.facts, self.devices, self.options, ngl, ts, entries)
        plan = upstream.plan_at(self.facts, self.devices, self.cpu, options, ctx)
        return [share.model_bytes + share.kv_bytes + share.compute_bytes + share.draft_bytes
                for share in plan.shares[:-1]]


def _step(delta, target, low, high):
    """fit.cpp's false-position step: uint32(delta * (target - low) / (high - low)) clamped to [1, delta - 1]."""
    num, den = delta * (target - low), high - low
    quotient = abs(num) // abs(den) * (1 if (num >= 0) == (den > 0) else -1)
    return min(max(quotient % U32, 1), delta - 1)


def fit_choice(facts, devices, cpu, options, ctx, margins=None, n_ctx_min=FIT_CTX):
    """What `--fit` chooses for this model (core.ModelFacts) on these offload devices (each
    capacity_bytes taken as the free memory llama.cpp reads) and the CPU, with upstream.UpstreamOptions
    (its kv settings; options.margin is --fit-target unless `margins` gives one per device, bytes).
    ctx: the user's -c (None: the training context -- no -c, or -c 0 -- which the fit may reduce down
    to n_ctx_min; n_ctx_min None: never reduced, as `-c 0` makes it, common/arg.cpp setting
    fit_params_min_ctx to UINT32_MAX unless a later -fitc resets it). Returns a FitChoice. Pure (no
    llama.cpp)."""
    measure = _Measure(facts, devices, cpu, options)
    try:
        return _fit(facts, devices, options, ctx, margins, n_ctx_min, measure)
    except FitFailed as err:
        return FitChoice(ctx=ctx if ctx is not None else facts.shape.context_train, status="failed", why=str(err),
                         trials=measure.trials)


def _fit(facts, devices, options, ctx, margins, n_ctx_min, measure):
    nd = len(devices)
    margins = list(margins) if margins is not None else [options.margin] * nd
    free = [device.capacity_bytes for device in devices]
    # llama_model_n_layer: hparams.n_layer(), without the NextN blocks unless they are loaded, while
    # load_tensors assigns -ngl over all n_layer_all blocks (so -ngl n_layer() + 1 leaves block 0 on the CPU)
    n_layer = facts.layers.n_layer - (0 if facts.mtp_loaded else len(facts.mtp_blocks))
    moe = not facts.dense
    auto = ctx is None
    n_ctx_max = facts.shape.context_train if auto else ctx
    ctx = n_ctx_max
    if nd == 0:  # the CPU alone: memory is taken as unlimited, nothing to fit
        return FitChoice(ctx=ctx, status="unchanged", trials=measure.trials)
    full = measure(ctx)
    if all(f - used >= margin for f, used, margin in zip(free, full, margins)):
        return FitChoice(ctx=ctx, used=full, status="unchanged", trials=measure.trials)
    # step 2: the context, only when it was left at 0
    surplus = sum(free) - sum(full) - sum(margins)
    if surplus < 0 and auto and n_ctx_min is not None and n_ctx_max > n_ctx_min:
        target = sum(free) - sum(margins)
        if nd > 1:
            model = sum(measure_model(measure, ctx))
            target -= (nd + 1) * (model // n_layer) // (6 if moe else 2)
        at_min = sum(measure(n_ctx_min))
        ctx = n_ctx_min
        if target > at_min:
            ctx += (n_ctx_max - n_ctx_min) * (target - at_min) // (sum(full) - at_min)
            ctx = max(ctx - ctx % CTX_ALIGN, n_ctx_min)
            if nd == 1:
                return FitChoice(ctx=ctx, status="context", trials=measure.trials)
    targets = [f - margin for f, margin in zip(free, margins)]
    slots, overflow = _search(n_layer + 1, nd, moe, targets, ctx, devices, measure)
    ngl, counts, entries = layout(slots, overflow, n_layer + 1)
    used = measure(ctx, ngl, counts, entries)
    return FitChoice(ctx=ctx, ngl=ngl, ts=counts if nd > 1 else None, overrides=entries, used=used,
                     trials=measure.trials)


def measure_model(measure, ctx):
    """The model bytes per device of the default parameters (step 2's per-layer weight)."""
    options = trial_options(measure.facts, measure.devices, measure.options)
    plan = upstream.plan_at(measure.facts, measure.devices, measure.cpu, options, ctx)
    return [share.model_bytes for share in plan.shares[:-1]]


def _search(n_total, nd, moe, targets, ctx, devices, measure):
    """Steps 3 and 4: ([(n_layer, n_part, overflow kind)] per device, [overflow buffer per device])."""
    overflow = ["CPU"] * nd
    names = [device.name for device in devices]

    def mem(slots, where):
        ngl, counts, entries = layout(slots, where, n_total)
        return measure(ctx, ngl, counts, entries)

    surplus_cpu_moe = 0
    if moe:
        dense_only = measure(ctx, None, None, [(ALL_MOE, "CPU")])
        surplus_cpu_moe = sum(t - used for t, used in zip(targets, dense_only))
    slots = [(0, 0, "moe") for _ in range(nd)]
    used = mem(slots, overflow)
    # step 3: back to front, dense-only layers (a MoE's experts on the CPU)
    for k in range(nd - 1, -1, -1):
        unassigned = n_total - sum(slot[0] for slot in slots[k + 1:])
        high = list(slots)
        high[k] = (unassigned, (unassigned if k < nd - 1 else unassigned - 1) if moe else 0, "moe")
        if unassigned == 0:
            continue
        used_high = mem(high, overflow)
        if used_high[k] <= targets[k]:
            slots, used = high, used_high
            continue
        delta = high[k][0] - slots[k][0]
        while delta > 1:
            step = _step(delta, targets[k], used[k], used_high[k])
            n, p, kind = slots[k]
            if moe:
                p += step - 1 if k == nd - 1 and p == 0 else step  # the last device's first layer stays whole
            test = list(slots)
            test[k] = (n + step, p, kind)
            used_test = mem(test, overflow)
            if used_test[k] <= targets[k]:
                slots, used = test, used_test
            else:
                high, used_high = test, used_test
            delta = high[k][0] - slots[k][0]
    if not moe or surplus_cpu_moe <= 0:
        return slots, overflow
    # step 4: dense-only layers at the back become whole layers at the front
    start = nd
    for k in range(nd - 1, -1, -1):
        if slots[k][0] == 0:
            break
        start = k
    k = 0
    while k <= start < nd:
        high = [list(slot) for slot in slots]
        for j in range(start, nd):
            move = high[j][0] if j < nd - 1 else high[j][0] - 1
            high[k][0] += move
            high[j][0] -= move
            high[j][1] = 0
        high = [tuple(slot) for slot in high]
        start_high = nd - 1
        used_high = mem(high, overflow)
        if used_high[k] > targets[k]:
            delta = (high[k][0] - high[k][1]) - (slots[k][0] - slots[k][1])
            while delta > 1:
                step = _step(delta, targets[k], used[k], used_high[k])
                test = [list(slot) for slot in slots]
                start_test, converted = start, 0
                while start_test < nd:
                    convert = min(step - converted, test[start_test][1])
                    test[start_test][0] -= convert
                    test[start_test][1] -= convert
                    test[k][0] += convert
                    converted += convert
                    if test[start_test][1] > 0:
                        break
                    start_test += 1
                test = [tuple(slot) for slot in test]
                used_test = mem(test, overflow)
                if used_test[k] <= targets[k]:
                    slots, used, start = test, used_test, start_test
                else:
                    high, used_high, start_high = test, used_test, start_test
                delta = (high[k][0] - high[k][1]) - (slots[k][0] - slots[k][1])
        else:
            slots, used, start = high, used_high, start_high
        slots, overflow, used, start = _one_more_layer(slots, overflow, used, start, k, nd, targets, names, mem)
        k += 1
    return slots, overflow


def _one_more_layer(slots, overflow, used, start, k, nd, targets, names, mem):
    """Step 4's "try to fit at least part of one more layer" for device k: UP, then GATE; else ATTN."""
    if start >= nd or slots[start][0] <= (0 if k < nd - 1 else 1):
        return slots, overflow, used, start
    test = [list(slot) for slot in slots]
    test[start][0] -= 1
    test[start][1] -= 1
    test[k][0] += 1
    test[k][1] += 1
    if test[start][1] < 0:  # uint32 n_part wraps: set_ngl_tensor_split_tbo then runs out of override slots
        raise FitFailed(f"llama_max_tensor_buft_overrides() is insufficient (device {start}'s n_part wraps)")
    start_test = start + 1 if test[start][1] == 0 else start
    where = list(overflow)
    if k < nd - 1:
        where[k] = names[k + 1]

    def fits(kind):
        test[k][2] = kind
        trial = [tuple(slot) for slot in test]
        used_test = mem(trial, where)
        ok = used_test[k] < targets[k] and (k + 1 == nd or used_test[k + 1] < targets[k + 1])
        return ok, trial, used_test

    ok, trial, used_test = fits("up")
    if ok:
        slots, overflow, used, start = trial, where, used_test, start_test
        ok, trial, used_test = fits("gate")
        if ok:
            slots, overflow, used, start = trial, where, used_test, start_test
    else:
        ok, trial, used_test = fits("attn")
        if ok:
            slots, overflow, used, start = trial, where, used_test, start_test
    return slots, overflow, used, start
