"""Each table GPU's dense fp16 tensor throughput, what prompt processing's matmuls run at.

FLOP/s from the vendors' architecture whitepapers and product pages (NVIDIA Ampere GA102, Ada AD102,
Blackwell GB202 whitepapers: dense fp16 tensor with fp16 accumulate; data-center parts: dense fp16;
Tesla P40 has no tensor cores: its fp32 rate; AMD RDNA3 whitepaper: fp16 matrix). llama.cpp runs
quantized matmuls on int8 tensor cores (MMQ) at a comparable rate; the compute efficiency the speed
model fits absorbs the difference. Keys are devices.GPU_TABLE's.
"""

from moetools.devicefit.devices import GPU_TABLE, table_match

T = 1e12
FP16_TENSOR_FLOPS = {
    "rtx3060": 51 * T, "rtx3070": 81 * T, "rtx3080": 119 * T, "rtx3090": 142 * T, "rtx3090ti": 160 * T,
    "rtx4060ti": 88 * T, "rtx4070": 117 * T, "rtx4070ti": 160 * T, "rtx4070tisuper": 176 * T,
    "rtx4080": 195 * T, "rtx4090": 330 * T, "rtx5060ti": 95 * T, "rtx5070ti": 176 * T, "rtx5080": 225 * T,
    "rtx5090": 419 * T, "a6000": 155 * T, "rtx6000ada": 364 * T, "rtxpro6000": 503 * T, "p40": 12 * T,
    "l40s": 362 * T, "a100-80g": 312 * T, "h100-pcie": 756 * T, "h100-sxm": 989 * T, "rx7900xtx": 123 * T,
}
assert set(FP16_TENSOR_FLOPS) == set(GPU_TABLE)
# a device the table does not name: FLOP/s in proportion to its bandwidth, at the RTX 3090's ratio
FLOPS_PER_BYTE_OF_BANDWIDTH = FP16_TENSOR_FLOPS["rtx3090"] / GPU_TABLE["rtx3090"][2]


def peak_flops(device):
    """Dense fp16 tensor FLOP/s of a plan's GPU or RPC device (its table entry, else by bandwidth)."""
    for name in (device.model, device.name):
        key = table_match(name) if name else None
        if key:
            return FP16_TENSOR_FLOPS[key]
    return device.bandwidth * FLOPS_PER_BYTE_OF_BANDWIDTH
