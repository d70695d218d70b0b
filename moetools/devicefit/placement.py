"""Upstream llama.cpp placement: which device holds each layer, and where each block's expert matrices
live; and the per-device ledger of a placement.

Layer assignment follows src/llama-model.cpp load_tensors: `-ngl N` offloads the last N of the n_layer+1
layers (the repeating blocks, then the output layer); `-ts` weights (default: each device's free memory)
are summed and normalised in float32 into split points, and layer il goes to the first device whose split
point exceeds (il - first offloaded) / offloaded. The input layer (token embeddings) stays on the CPU and
the output layer lands on the last device. `-ot PATTERN=BUFT` overrides move single tensors (llama.cpp
matches the first pattern that `regex_search`es the name); `--n-cpu-moe N` is the overrides of blocks < N.

The chooser works on the header's bytes: first every layer's dense part and KV must fit on the GPUs
(else leading layers go to the CPU whole, `-ngl` below all); then devices are filled front to back,
each taking layers while the rest can still be held dense-only by the devices after it; within each
device's range, by default (spill "first"), the experts of the last layers stay on the device and those
of the first go to the CPU (so one GPU is `--n-cpu-moe N`), and the boundary block keeps single matrices
(up, then up and gate) as --fit's LAYER_FRACTION_UP/GATE do. spill "last" sends the experts of the last
layers of each range to the CPU instead, the side llama.cpp's --fit chooses.

llama.cpp's `--fit` (common/fit.cpp common_params_fit_impl, 0c1e57098; emulated step by step in
fit_emulation.py) measures trial loads instead: it fills devices back to front with dense-only layers,
then front to back converts them to whole layers by false position, and set_ngl_tensor_split_tbo lays
each device's range out as its whole layers FIRST and its partial layers LAST: the experts that leave a
GPU are those of the last layers of its range (`blk\\.N\\.ffn_(up|down|gate_up|gate)_(ch|)exps=CPU`),
the first of them, the boundary, sending only its LAYER_FRACTION_UP/GATE/ATTN part (and, on every GPU
but the last, to the next GPU's buffer rather than the CPU). So device-fit's default puts the CPU
experts at the other end of each range from --fit's; the same bytes move either way.
"""

import struct

from moetools.devicefit.layers import EXPERT_PARTS
from moetools.devicefit.record import REQUIRED, Record

CPU = -1
# alignment of a device's buffer (ggml_backend_buft_get_alignment): CUDA 128, the CPU (and an RPC
# server's CPU backend) TENSOR_ALIGNMENT 32
ALIGNMENT = {"gpu": 128, "rpc": 32, "cpu": 32}
FIT_PARTS = {"up": ("up",), "gate": ("up", "gate"), "gate_up": ("gate_up",)}  # a boundary block's partial shares


def f32(value):
    """`value` rounded to float32, as llama.cpp computes the split points."""
    return struct.unpack("f", struct.pack("f", value))[0]


def split_points(weights):
    """Cumulative normalised float32 split points of `-ts` weights."""
    points, total = [], f32(0.0)
    for weight in weights:
        total = f32(total + f32(weight))
        points.append(total)
    return [f32(point / total) for point in points]


def assign_layers(n_layer, ngl, weights):
    """Device index (or CPU) of each of the n_layer + 1 layers (the last is the output layer).

    ngl: llama.cpp's -ngl (clamped as it clamps); weights: one -ts weight per device (not all zero)."""
    n_devices = len(weights)
    first = max(n_layer + 1 - ngl, 0)
    offloaded = min(ngl, n_layer + 1) if n_devices else 0
    if offloaded <= 0:
        return [CPU] * (n_layer + 1)
    points = split_points(weights)
    result = []
    for il in range(n_layer + 1):
        if il < first or il - first >= offloaded:
            result.append(CPU)
            continue
        value = f32((il - first) / offloaded)
        index = next((i for i, point in enumerate(points) if point > value), n_devices)
        result.append(min(index, n_devices - 1))
    return result


class Placement(Record):
    """Where everything goes. layer_device: n_layer + 1 entries (device index or CPU), the last the output
    layer; expert_device: {block: {part: device index or CPU}}; ngl and ts: the flags that give the layer
    assignment; source "chosen" or "user"."""

    FIELDS = (
        ("layer_device", REQUIRED),
        ("expert_device", REQUIRED),
        ("ngl", REQUIRED),
        ("ts", REQUIRED),
        ("source", "chosen"),
        ("n_cpu_moe", None),  # the user's --n-cpu-moe, or the N that reproduces a chosen placement
        ("main_gpu", None),  # the user's --main-gpu (split mode none)
        # the user's overrides in command-line order, [("-ot", TEXT) | ("--cpu-moe", None) |
        # ("--n-cpu-moe", N)] (None: none given), and the tensors they move other than whole expert
        # matrices: [(role, block, part, (n_bytes, pad), from key, to key)] (overrides.py)
        ("sources", None),
        ("moved", list),
    )

    def layers_on(self, index):
        return [il for il, device in enumerate(self.layer_device[:-1]) if device == index]

    def holds_output(self, index):
        return self.layer_device[-1] == index


def user_placement(layers, n_devices, ngl=None, ts=None, n_cpu_moe=None, capacities=None, main_gpu=None,
                   sources=None, homes=None):
    """The placement llama.cpp makes of the user's flags. ngl None: all layers; ts None: by capacity;
    main_gpu: split mode none (everything offloaded on that device). sources and homes: the user's
    overrides (-ot, --cpu-moe, --n-cpu-moe in order) and {tensor name: device key} of the tensors they
    match (overrides.tensor_homes); with them n_cpu_moe is only recorded (its overrides are in homes)."""
    n_layer = layers.n_layer
    ngl = n_layer + 1 if ngl is None else ngl
    if main_gpu is not None:
        weights = [1.0 if index == main_gpu else 0.0 for index in range(n_devices)]
    elif ts is None or not any(ts):
        weights = [float(c) for c in (capacities or [1] * n_devices)]
    else:
        weights = list(ts)
    layer_device = assign_layers(n_layer, ngl if n_devices else 0, weights) if n_devices else [CPU] * (n_layer + 1)
    experts = {}
    for block in layers.blocks:
        if not block.experts:
            continue
        home = CPU if (sources is None and n_cpu_moe is not None and block.index < n_cpu_moe) else layer_device[block.index]
        experts[block.index] = {part: home for part in block.experts}
    moved = _apply_homes(layers, layer_device, experts, homes) if homes else []
    return Placement(layer_device, experts, ngl, weights if ts is not None else None, "user", n_cpu_moe, main_gpu,
                     sources, moved)


def _apply_homes(layers, layer_device, experts, homes):
    """Move the tensors `homes` names ({name: device key}) as llama.cpp's buffer type overrides do:
    an expert matrix whose tensors all go one way moves in `experts` (its compute follows it); every
    other tensor that leaves its layer's device is returned as a moved entry for the ledger."""
    moved = []
    parts = {}
    for name, role, block, part, n_bytes, pad in layers.tensors:
        if role == "expert":
            parts.setdefault((block, part), []).append((name, n_bytes, pad))
            continue
        if name not in homes:
            continue
        origin = CPU if role == "input" else layer_device[-1] if role == "output" else layer_device[block]
        if homes[name] != origin:
            moved.append((role, block, None, (n_bytes, pad), origin, homes[name]))
    for (block, part), tensors in parts.items():
        origin = experts[block][part]
        targets = [homes.get(name, origin) for name, _, _ in tensors]
        # the matrix goes where its largest tensor (the weight, not a bias) goes; a tensor of it sent
        # elsewhere is a moved entry
        largest = max(range(len(tensors)), key=lambda i: tensors[i][1])
        home = experts[block][part] = targets[largest]
        for (name, n_bytes, pad), target in zip(tensors, targets):
            if target != home:
                moved.append(("expert", block, part, (n_bytes, pad), home, target))
    return moved


class Costs(Record):
    """Bytes the chooser adds per layer: dense[il] + kv[il] (il < n_layer) and the output layer."""

    FIELDS = (("dense", REQUIRED), ("experts", REQUIRED), ("output", REQUIRED))


def layer_costs(layers, kv_per_layer):
    dense = [block.dense_bytes + kv_per_layer[block.index] for block in layers.blocks]
    experts = [block.expert_bytes for block in layers.blocks]
    return Costs(dense, experts, layers.output_bytes)


def _dense_rest_fits(costs, start, k, used_k, budgets):
    """Can layers start..n_layer-1 and the output be held dense-only by devices k.. (device k already
    using used_k)? Devices after k are filled back to front, the last taking the output first."""
    n_layer = len(costs.dense)
    top = n_layer  # items start..top-1 remain (plus the output, on the last device)
    output_left = True
    for device in range(len(budgets) - 1, k, -1):
        room = budgets[device]
        if output_left:
            room -= costs.output
            output_left = False
            if room < 0:
                return False
        while top > start and costs.dense[top - 1] <= room:
            room -= costs.dense[top - 1]
            top -= 1
    need = sum(costs.dense[start:top]) + (costs.output if output_left else 0)
    return used_k + need <= budgets[k]


SPILLS = ("first", "last")


def choose(layers, costs, budgets, spill="first"):
    """A Placement for devices with these usable budgets (bytes after compute and margin), in order.

    spill: which experts of a device's range leave for the CPU when not all fit -- "first" (device-fit's
    default: those of the first layers, so one GPU is `--n-cpu-moe N`) or "last" (those of the last
    layers, as llama.cpp's --fit does: common/fit.cpp set_ngl_tensor_split_tbo). The layer ranges are
    the same either way. Returns (placement, notes)."""
    if spill not in SPILLS:
        raise ValueError(f"spill must be one of {SPILLS}, not {spill!r}")
    n_layer = layers.n_layer
    m = len(budgets)
    notes = []
    if m == 0:
        return user_placement(layers, 0, ngl=0), ["no GPU or RPC device: everything on the CPU"]
    # 1. the dense part of every layer on the GPUs, or as many of the last layers as fit
    first_gpu = 0
    if not _dense_rest_fits(costs, 0, 0, 0, budgets):
        low, high = 1, n_layer + 1
        while low < high:  # the smallest start whose layers fit dense-only
            middle = (low + high) // 2
            if middle <= n_layer and _dense_rest_fits(costs, middle, 0, 0, budgets):
                high = middle
            else:
                low = middle + 1
        first_gpu = low
        notes.append(f"the dense weights and KV of all layers do not fit the GPUs: layers 0..{first_gpu - 1} "
                     f"stay on the CPU (-ngl {n_layer + 1 - first_gpu})")
    if first_gpu > n_layer:  # not even the output layer fits
        layer_device = [CPU] * (n_layer + 1)
        notes.append("not even the output layer fits a GPU")
        return Placement(layer_device, _experts_home(layers, layer_device, {}), 0, None), notes
    if first_gpu:
        ranges = _back_to_front(costs, first_gpu, budgets)
    else:
        ranges = _proportional(costs, budgets)
    layer_device = [CPU] * first_gpu
    for k, (start, end) in enumerate(ranges):
        layer_device += [k] * (end - start)
    layer_device.append(m - 1)  # the output layer
    homes = {}
    for k, (start, end) in enumerate(ranges):
        room = budgets[k] - sum(costs.dense[start:end]) - (costs.output if k == m - 1 else 0)
        homes.update(_fill_experts(layers, range(start, end), k, room, spill))
    counts = [end - start for start, end in ranges]
    counts[-1] += 1  # the output layer counts in the last device's share, as --fit writes -ts
    ngl = sum(counts)
    return Placement(layer_device, _experts_home(layers, layer_device, homes), ngl, counts), notes


def _back_to_front(costs, start, budgets):
    """Ranges of layers start..n_layer-1 held dense-only, the last device filled first (with the output)."""
    n_layer = len(costs.dense)
    top = n_layer
    ranges = []
    for device in range(len(budgets) - 1, -1, -1):
        room = budgets[device] - (costs.output if device == len(budgets) - 1 else 0)
        end = top
        while top > start and costs.dense[top - 1] <= room:
            room -= costs.dense[top - 1]
            top -= 1
        ranges.append((top, end))
    ranges.reverse()
    return ranges


def _proportional(costs, budgets):
    """Ranges of all layers when every dense part fits: device k takes layers until its layers' whole
    weight reaches its budget (so no device is left with room its own experts cannot use), never more
    dense weight than it holds, and always enough that the devices after it can hold the rest."""
    n_layer = len(costs.dense)
    m = len(budgets)
    ranges, il = [], 0
    for k in range(m - 1):
        start, dense, whole = il, 0, 0
        later = sum(budgets[k + 1:])
        while il < n_layer:
            full = costs.dense[il] + costs.experts[il]
            if dense + costs.dense[il] > budgets[k]:
                break
            rest_whole = sum(costs.dense[il:]) + sum(costs.experts[il:]) + costs.output
            must = not _dense_rest_fits(costs, il, k + 1, 0, budgets)
            fits_whole = whole + full <= budgets[k]
            overshoot = whole < budgets[k] and rest_whole > later
            if not (must or fits_whole or overshoot):
                break
            dense += costs.dense[il]
            whole += full
            il += 1
        ranges.append((start, il))
    ranges.append((il, n_layer))
    return ranges


def _fill_experts(layers, blocks, device, room, spill="first"):
    """Experts of a device's layers: whole blocks from the back of its range (spill "first"; from the
    front for "last") while they fit, then the boundary block's single matrices (up, then up and gate);
    the rest on the CPU. {block: {part: home}}."""
    homes = {}
    boundary_done = False
    for il in (reversed(list(blocks)) if spill == "first" else list(blocks)):
        block = layers.blocks[il]
        if not block.experts:
            continue
        if not boundary_done and block.expert_bytes <= room:
            room -= block.expert_bytes
            homes[il] = {part: device for part in block.experts}
            continue
        if not boundary_done:
            boundary_done = True
            kept = ()
            for fraction in ("up", "gate") if "gate_up" not in block.experts else ("gate_up",):
                parts = FIT_PARTS[fraction]
                size = sum(block.experts.get(part, 0) for part in parts)
                if all(part in block.experts for part in parts) and size <= room:
                    kept = parts
            room -= sum(block.experts.get(part, 0) for part in kept)
            homes[il] = {part: (device if part in kept else CPU) for part in block.experts}
            continue
        homes[il] = {part: CPU for part in block.experts}
    return homes


def _experts_home(layers, layer_device, homes):
    result = {}
    for block in layers.blocks:
        if block.experts:
            result[block.index] = homes.get(block.index, {part: CPU for part in block.experts})
            if layer_device[block.index] == CPU:
                result[block.index] = {part: CPU for part in block.experts}
    return result


def cpu_moe_count(placement, layers):
    """N when the experts wholly on the CPU are exactly those of the offloaded blocks < N (what
    --n-cpu-moe N does; a boundary block with single matrices on the CPU is left to -ot), else None."""
    cpu_blocks = []
    for block, parts in placement.expert_device.items():
        if set(parts.values()) == {CPU} and placement.layer_device[block] != CPU:
            cpu_blocks.append(block)
    if not cpu_blocks:
        return 0
    n = max(cpu_blocks) + 1
    expected = [block for block in sorted(placement.expert_device) if block < n and placement.layer_device[block] != CPU]
    return n if sorted(cpu_blocks) == expected else None


def cpu_expert_layers(placement):
    """Blocks on an offload device whose experts (any matrix) the CPU holds, ascending."""
    return sorted(block for block, homes in placement.expert_device.items()
                  if CPU in homes.values() and placement.layer_device[block] != CPU)


def partial_patterns(placement, devices):
    """`-ot` entries of the boundary blocks only (single matrices moved off their layer's device)."""
    return [entry for entry in override_patterns(placement, devices) if not entry[0].endswith("(up|down|gate|gate_up)_(ch|)exps")]


# --- the ledger ---------------------------------------------------------------------------------

def _aligned(entries, kind):
    align = ALIGNMENT[kind]
    pad = kind == "gpu"
    return sum(-(-(n + (extra if pad else 0)) // align) * align for n, extra in entries)


class Share(Record):
    """What one device holds (bytes). model = resident + expert, as llama.cpp's model buffer."""

    FIELDS = (
        ("device", REQUIRED),
        ("layers", list),
        ("holds_output", False),
        ("resident_bytes", 0),
        ("expert_bytes", 0),
        ("kv_bytes", 0),
        ("compute_bytes", 0),
        ("margin_bytes", 0),
        ("active_bytes", 0.0),  # weight bytes one token reads here (dense + top-k share of its experts)
        ("expert_parts", dict),  # {block: [parts]} held here
        ("draft_bytes", 0),  # a draft model's weights, KV and compute buffers here (--draft)
        # the margin on an unmeasured compute buffer (upstream.unmeasured_margin): percent and bytes
        ("compute_margin_pct", 0),
        ("compute_margin_bytes", 0),
    )

    @property
    def used_bytes(self):
        return (self.resident_bytes + self.expert_bytes + self.kv_bytes + self.compute_bytes + self.margin_bytes
                + self.draft_bytes + self.compute_margin_bytes)

    @property
    def free_bytes(self):
        return self.device.capacity_bytes - self.used_bytes

    @property
    def model_bytes(self):
        return self.resident_bytes + self.expert_bytes

    def to_doc(self):
        doc = {"name": self.device.name, "kind": self.device.kind, "capacity_bytes": self.device.capacity_bytes,
               "compute_bytes": self.compute_bytes, "resident_bytes": self.resident_bytes, "kv_bytes": self.kv_bytes,
               "expert_bytes": self.expert_bytes, "margin_bytes": self.margin_bytes, "draft_bytes": self.draft_bytes,
               "free_bytes": self.free_bytes,
               "layers": ranges_text(self.layers), "output_layer": self.holds_output,
               "bandwidth_bytes_per_s": self.device.bandwidth, "bandwidth_source": self.device.bandwidth_source}
        if self.compute_margin_pct:  # only where it applies: a measured plan's document is unchanged
            doc["compute_margin_pct"] = self.compute_margin_pct
            doc["compute_margin_bytes"] = self.compute_margin_bytes
        if self.device.endpoint:
            doc["endpoint"] = self.device.endpoint
        return doc


def ranges_text(indices):
    """[0, 1, 2, 5] -> "0-2,5"."""
    parts, start, prev = [], None, None
    for value in indices:
        if start is None:
            start = prev = value
        elif value == prev + 1:
            prev = value
        else:
            parts.append(f"{start}-{prev}" if prev != start else str(start))
            start = prev = value
    if start is not None:
        parts.append(f"{start}-{prev}" if prev != start else str(start))
    return ",".join(parts)


def _block_sizes(block, kind):
    """(aligned dense bytes, {part: aligned bytes}) of a block on a device of `kind`, memoised."""
    memo = block.__dict__.setdefault("_aligned", {})
    if kind not in memo:
        memo[kind] = (_aligned(block.dense_tensors, kind),
                      {part: _aligned(entries, kind) for part, entries in block.expert_tensors.items()})
    return memo[kind]


def ledger(layers, placement, devices, cpu, kv_per_layer, compute, margins):
    """[Share] for each offload device in order, then the CPU.

    kv_per_layer: bytes of each block's KV (and recurrent state); compute: callable(index or CPU,
    layers, holds_output) -> bytes; margins: {index or CPU: bytes}."""
    keys = [*range(len(devices)), CPU]
    kinds = {key: device.kind for key, device in zip(keys, [*devices, cpu])}
    mine = {key: [] for key in keys}
    resident = {key: 0 for key in keys}
    experts = {key: 0 for key in keys}
    active = {key: 0.0 for key in keys}
    parts_here = {key: {} for key in keys}
    for il, home in enumerate(placement.layer_device[:-1]):
        mine[home].append(il)
        block = layers.blocks[il]
        resident[home] += _block_sizes(block, kinds[home])[0]
        active[home] += block.dense_bytes
    out = placement.layer_device[-1]
    resident[out] += _aligned(layers.output_tensors, kinds[out])
    active[out] += layers.output_bytes
    resident[CPU] += _aligned(layers.input_tensors, "cpu")
    for block_index, homes in placement.expert_device.items():
        block = layers.blocks[block_index]
        fraction = block.active_fraction
        for part, home in homes.items():
            experts[home] += _block_sizes(block, kinds[home])[1][part]
            parts_here[home].setdefault(block_index, []).append(part)
            active[home] += block.experts[part] * fraction
    for role, block_index, part, entry, origin, target in placement.moved:
        # a single tensor an override moved: its aligned bytes leave one buffer for another; a token
        # reads a dense or output tensor whole, an expert tensor's top-k share, an embedding row (0)
        table = experts if role == "expert" else resident
        table[origin] -= _aligned([entry], kinds[origin])
        table[target] += _aligned([entry], kinds[target])
        read = entry[0] * layers.blocks[block_index].active_fraction if role == "expert" else 0 if role == "input" else entry[0]
        active[origin] -= read
        active[target] += read
    shares = []
    for key, device in zip(keys, [*devices, cpu]):
        holds_output = out == key
        shares.append(Share(
            device=device, layers=mine[key], holds_output=holds_output, resident_bytes=resident[key],
            expert_bytes=experts[key], kv_bytes=sum(kv_per_layer[il] for il in mine[key]),
            compute_bytes=compute(key, mine[key], holds_output), margin_bytes=margins.get(key, 0),
            active_bytes=active[key], expert_parts=parts_here[key]))
    return shares


# --- flags ----------------------------------------------------------------------------------------

def override_patterns(placement, devices):
    """`-ot` entries (pattern, buffer type) that move experts off their layer's device."""
    by_target = {}
    partial = []
    for block, homes in sorted(placement.expert_device.items()):
        layer_home = placement.layer_device[block]
        moved = {part: home for part, home in homes.items() if home != layer_home}
        if not moved:
            continue
        targets = set(moved.values())
        if len(moved) == len(homes) and len(targets) == 1:
            by_target.setdefault(targets.pop(), []).append(block)
        else:
            for target in sorted(targets):
                parts = sorted(part for part, home in moved.items() if home == target)
                partial.append((block, parts, target))
    entries = []
    name = {CPU: "CPU", **{index: device.name for index, device in enumerate(devices)}}
    for block, parts, target in partial:
        entries.append((f"blk\\.{block}\\.ffn_({'|'.join(parts)})_(ch|)exps", name[target]))
    for target, blocks in sorted(by_target.items()):
        alternatives = "|".join(str(block) for block in blocks)
        group = f"({alternatives})" if len(blocks) > 1 else alternatives
        entries.append((f"blk\\.{group}\\.ffn_(up|down|gate|gate_up)_(ch|)exps", name[target]))
    return entries
