"""Decode speed of a placement: what one token costs on each device.

    t = sum over GPU/RPC devices of (weight bytes it reads per token + KV it reads at the depth)
                                    / (its bandwidth x gpu efficiency)
      + (the CPU's dense and top-k expert bytes + its KV reads) / min(RAM bandwidth x cpu efficiency,
                                                                      threads x per-thread rate)
      + page-cache misses: when the CPU-held weights (memory-mapped) exceed the RAM left for the page
        cache, the missing share of the CPU's active expert bytes comes from the drive at --disk-bw
      + hops: each switch between devices along the layers as the scheduler splits them, local or RPC
      + floor (sampling, graph launch and everything per token that does not scale with bytes)

At decode llama.cpp computes CPU-resident experts on the CPU (ggml-cuda offloads them to the GPU only
for batches of 32 tokens and more), so decode is bound by RAM bandwidth and threads; prefill by PCIe.
A token reads its dense weights whole and top-k / n_expert of each block's expert bytes (at their real
types). The RAM bandwidth counts as its peak (a measured read rate as MEASURED_SHARE_OF_PEAK of it) and
across NUMA nodes as numa_factor() says.
"""

from moetools.devicefit.placement import CPU


def numa_factor(settings):
    """The share of the whole machine's RAM bandwidth llama.cpp reaches across its NUMA nodes: one node's
    bandwidth plus `numa_gain` of it for each further node (without --numa, threads read pages that sit
    on the other socket across the interconnect)."""
    nodes = max(1, int(settings.numa_nodes or 1))
    return (1 + (nodes - 1) * settings.numa_gain) / nodes


def cpu_rate(settings):
    """Bytes/s the CPU reads weights at during decode."""
    return min(settings.ram_peak() * settings.cpu_efficiency * numa_factor(settings), settings.threads * settings.thread_bw)


# the expert matrices in the order a block's graph reaches them (build_moe_ffn: the merged gate_up, or
# gate then up through ggml_swiglu_split's sources, then down)
GRAPH_ORDER = ("gate_up", "gate", "up", "down")


def hops(placement, devices):
    """(local switches, RPC switches) one token makes walking the layers as llama.cpp's scheduler splits
    them (ggml-backend.cpp ggml_backend_sched_split_graph): each block's attention on its device, its
    expert matrices in graph order on theirs, and what follows the experts (weighting, sum, residual: no
    weights) on the next block's device ("expand gpu up"), so a block whose experts end away from its
    device goes straight on to the next block's. Checked against the splits llama.cpp logged
    (tests/data/devicefit_llama_fitparams.json sched_splits)."""
    kinds = {CPU: "cpu", **{index: device.kind for index, device in enumerate(devices)}}
    local = rpc = 0
    current = CPU  # the input layer (embeddings) is on the CPU

    def move(target):
        nonlocal current, local, rpc
        if target != current:
            if kinds[target] == "rpc" or kinds[current] == "rpc":
                rpc += 1
            else:
                local += 1
            current = target

    for il, home in enumerate(placement.layer_device[:-1]):
        move(home)
        parts = placement.expert_device.get(il) or {}
        for part in sorted(parts, key=lambda name: GRAPH_ORDER.index(name) if name in GRAPH_ORDER else len(GRAPH_ORDER)):
            move(parts[part])
    move(placement.layer_device[-1])
    return local, rpc


def decode_time(shares, placement, devices, kv_read, settings, cpu_room=None):
    """(seconds per token, breakdown {name: seconds}). shares: placement.ledger() (devices then CPU);
    kv_read: bytes each block's cache is read per token; cpu_room: RAM left for the page cache (None:
    unknown, no misses counted)."""
    breakdown = {}
    total = 0.0
    for share in shares:
        kv_bytes = sum(kv_read[il] for il in share.layers)
        if share.device.kind == "cpu":
            seconds = (share.active_bytes + kv_bytes) / cpu_rate(settings)
        else:
            seconds = (share.active_bytes + kv_bytes) / (share.device.bandwidth * settings.gpu_efficiency)
        breakdown[share.device.name] = seconds
        total += seconds
    cpu = shares[-1]
    if settings.mmap and cpu_room is not None and cpu.model_bytes > cpu_room:
        miss = 1.0 - max(0, cpu_room) / cpu.model_bytes
        seconds = miss * cpu.active_bytes / settings.disk_bw
        breakdown["disk"] = seconds
        total += seconds
    local, rpc = hops(placement, devices)
    breakdown["hops"] = local * settings.hop_local_s + rpc * settings.hop_rpc_s
    breakdown["floor"] = settings.floor_s
    total += breakdown["hops"] + settings.floor_s
    return total, breakdown
