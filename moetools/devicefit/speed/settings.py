"""The figures device-fit's speed model rests on, and where each came from.

Every figure a tok/s depends on carries a source: a host profile (`moetools host`, `--host`), a flag, this
machine, or a stated default. `assumptions()` lists them for the screen and the JSON, so that a reader
sees what a prediction assumes before choosing by it.

The efficiencies are fitted on published llama.cpp measurements (tests/data/devicefit_published_speeds.json,
benchmarks/calibrate_devicefit_speed.py; docs/devicefit-speed.md lists every point). A host profile's
calibration (`moetools host --calibrate`) replaces them with the host's own.
"""

from moetools.devicefit.record import Record

# the measured read rate of a host profile is a stream's achieved rate, not the DIMMs' peak: the efficiencies
# are shares of the peak, so a measured rate counts as this share of the peak it came from
MEASURED_SHARE_OF_PEAK = 0.80
# ggml-cuda's default op_offload_min_batch_size (ggml/src/ggml-cuda/ggml-cuda.cu, GGML_OP_OFFLOAD_MIN_BATCH):
# an op whose weights sit in host memory runs on the first CUDA device once its batch reaches this
OFFLOAD_MIN_BATCH = 32
# one core's nominal matmul rate (AVX-512: two 16-wide fp32 FMA units at 3 GHz); prompt processing on the
# CPU reaches cpu_compute_efficiency of it
CPU_FLOPS_PER_THREAD = 100e9


class SpeedSettings(Record):
    """Defaults fitted on published llama-bench/llama-server figures (docs/devicefit-speed.md)."""

    FIELDS = (
        # fitted by benchmarks/calibrate_devicefit_speed.py on the published points (docs/devicefit-speed.md);
        # gpu_efficiency stays the dense all-GPU figure (GLM-Z1-32B on an RTX 3090 Ti), which those pin
        ("gpu_efficiency", 0.70),  # share of a GPU's peak bandwidth decode reaches
        ("cpu_efficiency", 0.56),  # share of the host's peak RAM bandwidth the CPU experts reach
        ("gpu_compute_efficiency", 0.044),  # share of a GPU's dense fp16 tensor peak MoE prompt processing reaches
        ("pcie_efficiency", 0.86),  # share of the PCIe rate the per-ubatch copy of CPU-held weights reaches
        ("numa_gain", 0.25),  # what each NUMA node past the first adds to the CPU's rate (llama.cpp without --numa)
        ("ram_bw", 60e9),  # bytes/s (dual-channel DDR5-4800 peak is 76.8 GB/s)
        ("ram_bw_source", "default (dual-channel DDR5; give --ram-bw or --ram-bw auto)"),
        ("ram_bw_measured", False),  # ram_bw is a measured read rate (host profile, --ram-bw auto), not a peak
        ("disk_bw", 3e9),  # bytes/s, an NVMe drive's sequential read
        ("disk_bw_source", "default (an NVMe drive; give --disk-bw)"),
        ("threads", 8),
        ("threads_source", "default"),
        ("pcie_bw", 31.5e9),  # bytes/s host-to-device per direction during prompt processing (PCIe 4.0 x16)
        ("pcie_source", "default (PCIe 4.0 x16: 31.5 GB/s per direction)"),
        ("numa_nodes", 1),  # the host's NUMA nodes (a host profile says; llama.cpp reads across them)
        ("calibration", None),  # a host profile's calibration record (efficiencies fitted on llama-bench runs)
        ("thread_bw", 12e9),  # bytes/s one CPU thread streams through a quantized matmul
        ("cpu_compute_efficiency", 0.40),  # share of CPU_FLOPS_PER_THREAD x threads the CPU's prompt matmuls reach
        ("hop_local_s", 30e-6),  # one device switch on this host (a sync and a small copy)
        ("hop_rpc_s", 400e-6),  # one switch to or from an RPC server (a network round trip)
        ("floor_s", 0.0037),  # per token at decode, per ubatch at prompt processing
        ("prompt_tokens", 4096),  # the prompt pp is stated for (capped at the context)
        ("op_offload", True),  # llama.cpp's op offload (-nopo / --no-op-offload turns it off)
        ("offload_min_batch", OFFLOAD_MIN_BATCH),
        ("mmap", True),
    )

    EFFICIENCIES = ("gpu_efficiency", "cpu_efficiency", "gpu_compute_efficiency", "pcie_efficiency", "cpu_compute_efficiency",
                    "floor_s")

    def ram_peak(self):
        """The RAM's peak bandwidth the CPU efficiency is a share of."""
        return self.ram_bw / MEASURED_SHARE_OF_PEAK if self.ram_bw_measured else self.ram_bw

    def calibrated(self, record):
        """A copy with a host calibration's efficiencies (moetools.host.calibrate) in place of the defaults."""
        fitted = {name: float(value) for name, value in (record.get("efficiencies") or {}).items()
                  if name in self.EFFICIENCIES}
        return self.replace(calibration=record, **fitted)


def _rate(value):
    return f"{value / 1e9:.0f} GB/s" if value >= 100e9 else f"{value / 1e9:.1f} GB/s"


def assumptions(settings, devices):
    """[{"figure", "value", "source"}]: what a plan's tok/s rest on (the offload devices, RAM, threads,
    PCIe, the efficiencies), each with where it came from."""
    rows = [{"figure": f"{device.name} bandwidth", "value": _rate(device.bandwidth),
             "source": device.bandwidth_source or "default"} for device in devices if device.kind != "cpu"]
    rows += [
        {"figure": "RAM bandwidth", "value": _rate(settings.ram_bw), "source": settings.ram_bw_source},
        {"figure": "threads", "value": str(settings.threads), "source": settings.threads_source},
    ]
    if any(device.kind == "gpu" for device in devices):
        rows.append({"figure": "PCIe", "value": _rate(settings.pcie_bw), "source": settings.pcie_source})
    if settings.numa_nodes > 1:
        rows.append({"figure": "NUMA nodes", "value": str(settings.numa_nodes), "source": settings.threads_source})
    if settings.calibration:
        runs = settings.calibration.get("runs") or []
        rows.append({"figure": "efficiencies", "value": ", ".join(f"{name} {getattr(settings, name):.3g}"
                                                                  for name in settings.EFFICIENCIES),
                     "source": f"calibrated on {len(runs)} llama-bench run(s) of this host"})
    else:
        rows.append({"figure": "efficiencies", "value": f"GPU {settings.gpu_efficiency:.2f}, CPU {settings.cpu_efficiency:.2f}",
                     "source": "default (fitted on published measurements; calibrate with moetools host --calibrate)"})
    return rows
