"""Decode speed of a placement: what one token costs on each device.

    t = sum over GPU/RPC devices of (weight bytes it reads per token + KV it reads at the depth)
                                    / (its bandwidth x gpu efficiency)
      + (the CPU's dense and top-k expert bytes + its KV reads) / min(RAM bandwidth x cpu efficiency,
                                                                      threads x per-thread rate)
      + page-cache misses: when the CPU-held weights (memory-mapped) exceed the RAM left for the page
        cache, the missing share of the CPU's active expert bytes comes from the drive at --disk-bw
      + hops: each switch between devices along the layers (a CPU-expert layer is two), local or RPC
      + floor (sampling, graph launch and everything per token that does not scale with bytes)

At decode llama.cpp computes CPU-resident experts on the CPU (ggml-cuda offloads them to the GPU only
for batches of 32 tokens and more), so decode is bound by RAM bandwidth and threads; prefill by PCIe.
A token reads its dense weights whole and top-k / n_expert of each block's expert bytes (at their real
types). The fork's streaming formula (`fork_tok_s`) lives here too.
"""

from moetools.devicefit.placement import CPU
from moetools.devicefit.record import Record


class SpeedSettings(Record):
    """Defaults calibrated against published llama-bench/llama-server figures (README: Speed model)."""

    FIELDS = (
        ("gpu_efficiency", 0.70),  # share of a GPU's peak bandwidth decode reaches
        ("cpu_efficiency", 0.45),  # share of the host's RAM bandwidth the CPU experts reach
        ("ram_bw", 60e9),  # bytes/s (dual-channel DDR5-4800 peak is 76.8 GB/s)
        ("ram_bw_source", "default (dual-channel DDR5; give --ram-bw or --ram-bw auto)"),
        ("disk_bw", 3e9),  # bytes/s, an NVMe drive's sequential read
        ("disk_bw_source", "default (an NVMe drive; give --disk-bw)"),
        ("threads", 8),
        ("threads_source", "default"),
        ("pcie_bw", 25e9),  # bytes/s host-to-device during prompt processing (PCIe 4.0 x16 in practice; --h2d)
        ("pcie_source", "default (PCIe 4.0 x16)"),
        ("numa_nodes", 1),  # the host's NUMA nodes (a host profile says; llama.cpp reads across them)
        ("calibration", None),  # a host profile's calibration record (efficiencies fitted on llama-bench runs)
        ("thread_bw", 12e9),  # bytes/s one CPU thread streams through a quantized matmul
        ("hop_local_s", 30e-6),  # one device switch on this host (a sync and a small copy)
        ("hop_rpc_s", 400e-6),  # one switch to or from an RPC server (a network round trip)
        ("floor_s", 0.002),
        ("mmap", True),
    )


def cpu_rate(settings):
    """Bytes/s the CPU reads weights at during decode."""
    return min(settings.ram_bw * settings.cpu_efficiency, settings.threads * settings.thread_bw)


def hops(placement, devices):
    """(local switches, RPC switches) one token makes walking the layers in order."""
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
        parts = placement.expert_device.get(il)
        if parts:
            for target in sorted(set(parts.values()) - {home}):
                move(target)
            move(home)
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


def fork_tok_s(coverage, experts_per_token, expert_bytes, h2d_bytes_per_s, floor_s, drive_share=0.0,
               disk_bytes_per_s=None, cache_on_host=False):
    """The streaming fork, per token: the expert bytes read (experts_per_token x expert_bytes) that miss
    the cache cross PCIe at h2d, and the share of them the page cache does not hold (drive_share) is read
    from the drive first; with the cache in host RAM its hits cross PCIe too.

        tok/s = 1 / (hits' PCIe + (1 - coverage) x bytes x (1/h2d + drive_share/disk) + floor)

    With the cache in VRAM and every expert in RAM this is 1 / ((1 - coverage) x bytes / h2d + floor)."""
    read = experts_per_token * expert_bytes
    miss_seconds = (1.0 - coverage) * read / h2d_bytes_per_s
    if drive_share > 0 and disk_bytes_per_s:
        miss_seconds += (1.0 - coverage) * read * drive_share / disk_bytes_per_s
    hit_seconds = coverage * read / h2d_bytes_per_s if cache_on_host else 0.0
    return 1.0 / (hit_seconds + miss_seconds + floor_s)
