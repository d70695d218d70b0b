"""Prompt-processing speed of a placement: what one ubatch of the prompt costs on each device.

llama.cpp evaluates a prompt in ubatches of n_ubatch = min(-ub, -b, context) tokens. Per ubatch:

    t = sum over GPU/RPC devices of max(matmul FLOPs of its layers / (fp16 tensor peak x compute efficiency),
                                        weight bytes the ubatch touches / (bandwidth x gpu efficiency))
      + weights held in host memory: at n_ubatch >= 32 (ggml-cuda's op_offload_min_batch_size) the
        scheduler runs their matmuls on the first CUDA device and copies the weights there first, every
        ubatch: their bytes / (PCIe x pcie efficiency), the FLOPs on that device; below 32, or without a
        CUDA device, or with --no-op-offload, the CPU computes them:
        max(FLOPs / (threads x 100 GFLOP/s x cpu compute efficiency), bytes touched / the CPU's read rate)
      + hops (a sync and the activations, n_ubatch x n_embd f32, per device switch) + a per-ubatch floor

Sources (llama.cpp 0c1e57098): ggml/src/ggml-backend.cpp ggml_backend_sched_backend_id_from_cur (an op
whose weight is in a host buffer goes to the first backend whose offload_op accepts it, "1.off"),
ggml_backend_sched_compute_splits (for MUL_MAT_ID only the experts the ubatch routes to are copied,
grouped in runs); ggml/src/ggml-cuda/ggml-cuda.cu ggml_backend_cuda_device_offload_op and
get_op_batch_size (MUL_MAT: ne[1] tokens, MUL_MAT_ID: ne[2]; GGML_OP_OFFLOAD_MIN_BATCH, default 32).

A ubatch of u tokens routes to 1 - (1 - k/n)^u of a block's n experts with uniform routing (real routing
is skewed: fewer). Attention's FLOPs (2 x heads x (K + V width) x cells attended) count on the device
holding the layer; tensors moved one at a time by -ot count with their layer (their bytes, not FLOPs).
"""

import math

from moetools.devicefit.devices import DEFAULT_RPC_NET_BW
from moetools.devicefit.placement import CPU
from moetools.devicefit.speed.decode import cpu_rate, hops
from moetools.devicefit.speed.gpus import peak_flops
from moetools.devicefit.speed.settings import CPU_FLOPS_PER_THREAD

F32 = 4


def routed_share(tokens, top_k, n_expert):
    """Expected share of a block's experts that `tokens` tokens route to (uniform routing)."""
    if not n_expert or not top_k:
        return 0.0
    return 1.0 - (1.0 - top_k / n_expert) ** tokens


class _Work:
    """What one device key does for a ubatch: matmul FLOPs per token, weight bytes it touches."""

    __slots__ = ("flops_per_token", "bytes_touched", "attention_flops")

    def __init__(self):
        self.flops_per_token = 0.0
        self.bytes_touched = 0.0
        self.attention_flops = 0.0


def _attention_flops(facts, il, tokens, depth):
    """FLOPs of one layer's attention for `tokens` tokens appended after `depth` cells."""
    shape, graph = facts.shape, facts.graph
    if il >= len(shape.k_width) or (shape.is_recurrent and shape.is_recurrent[il]):
        return 0.0
    heads = graph.n_head[il] if il < len(graph.n_head) else 0
    cells = depth + tokens / 2
    if shape.is_swa and shape.is_swa[il] and shape.n_swa:
        cells = min(cells, shape.n_swa)
    return 2.0 * heads * (shape.k_width[il] + shape.v_width[il]) * cells * tokens


def work_by_device(facts, placement, tokens, depth):
    """{device key: _Work} for a ubatch of `tokens` tokens at `depth`."""
    layers = facts.layers
    work = {}

    def at(key):
        return work.setdefault(key, _Work())

    for il, home in enumerate(placement.layer_device[:-1]):
        block = layers.blocks[il]
        here = at(home)
        here.flops_per_token += 2.0 * block.dense_params
        here.bytes_touched += block.dense_bytes
        here.attention_flops += _attention_flops(facts, il, tokens, depth)
    for block_index, homes in placement.expert_device.items():
        block = layers.blocks[block_index]
        share = routed_share(tokens, block.top_k, block.expert_count)
        for part, home in homes.items():
            here = at(home)
            here.flops_per_token += 2.0 * block.expert_params.get(part, 0) * block.active_fraction
            here.bytes_touched += block.experts[part] * share
    return work


def _offload_device(devices, settings):
    """Index of the device llama.cpp runs host-held weights' batch matmuls on: the first CUDA device
    (ggml-rpc has no offload_op), or None."""
    if not settings.op_offload:
        return None
    return next((index for index, device in enumerate(devices) if device.kind == "gpu"), None)


def _offloaded(placement, offload):
    """The route of a ubatch whose CPU-held experts run on the offload device: their activations never
    leave it (the weights travel instead)."""
    experts = {block: {part: offload if home == CPU else home for part, home in homes.items()}
               for block, homes in placement.expert_device.items()}
    return placement.replace(expert_device=experts)


def ubatch_time(facts, placement, devices, settings, tokens, depth=0):
    """(seconds for one ubatch of `tokens` tokens, breakdown {name: seconds})."""
    work = work_by_device(facts, placement, tokens, depth)
    host = work.pop(CPU, _Work())
    offload = _offload_device(devices, settings) if tokens >= settings.offload_min_batch else None
    breakdown = {}
    gpu_flops = {index: 0.0 for index in range(len(devices))}
    for index, done in work.items():
        gpu_flops[index] += done.flops_per_token * tokens + done.attention_flops
    if offload is not None:
        gpu_flops[offload] += host.flops_per_token * tokens
        breakdown["PCIe copy"] = host.bytes_touched / (settings.pcie_bw * settings.pcie_efficiency)
    for index, device in enumerate(devices):
        done = work.get(index, _Work())
        flops = gpu_flops[index]
        if not flops and not done.bytes_touched:
            continue
        compute = flops / (peak_flops(device) * settings.gpu_compute_efficiency)
        reads = done.bytes_touched / (device.bandwidth * settings.gpu_efficiency)
        breakdown[device.name] = max(compute, reads)
    cpu_flops = host.attention_flops + (0.0 if offload is not None else host.flops_per_token * tokens)
    cpu_bytes = 0.0 if offload is not None else host.bytes_touched
    if cpu_flops or cpu_bytes:
        breakdown["CPU"] = max(cpu_flops / (settings.threads * CPU_FLOPS_PER_THREAD * settings.cpu_compute_efficiency),
                               cpu_bytes / cpu_rate(settings))
    local, rpc = hops(_offloaded(placement, offload) if offload is not None else placement, devices)
    activations = tokens * facts.graph.n_embd * F32
    breakdown["hops"] = (local * (settings.hop_local_s + activations / settings.pcie_bw)
                         + rpc * (settings.hop_rpc_s + activations / DEFAULT_RPC_NET_BW))
    breakdown["floor"] = settings.floor_s
    return sum(breakdown.values()), breakdown


def prompt_time(facts, placement, devices, settings, n_prompt, n_ubatch, depth=0):
    """(prompt tokens per second, breakdown {name: seconds for the whole prompt}) for a prompt of
    `n_prompt` tokens evaluated in ubatches of `n_ubatch` after `depth` cells."""
    n_ubatch = max(1, min(n_ubatch, n_prompt))
    full, rest = divmod(n_prompt, n_ubatch)
    total = {}
    done = depth
    for tokens, count in ((n_ubatch, full), (rest, 1)):
        if not tokens or not count:
            continue
        # the `count` ubatches of this size, at the mean depth they are evaluated after
        _, breakdown = ubatch_time(facts, placement, devices, settings, tokens, done + tokens * (count - 1) / 2)
        for name, value in breakdown.items():
            total[name] = total.get(name, 0.0) + value * count
        done += tokens * count
    seconds = sum(total.values())
    return (n_prompt / seconds if seconds > 0 else math.inf), total
