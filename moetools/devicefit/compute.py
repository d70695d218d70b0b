"""Old import path of the compute-buffer model, kept for one release: re-exports only.

The code moved in the restructure of issue 28: the public API to moetools.devicefit.buffers, ggml's
allocator and scheduler replays to moetools.devicefit.ggml, the graph builders to
moetools.devicefit.graph. Import from there; this module goes in 0.3.
"""

# re-exported for the old import path (tests, benchmarks, core, upstream, draft), one release
from moetools.devicefit.buffers import (ALIGNMENT, Homes, PIPELINE_COPIES, _SharedEntry, _headless_program,
    _shared_entry, _split_form, _split_program, compute_buffers, compute_bytes, homes_of, host_bytes, output_rows,
    pipeline_parallel, placement_buffers, placement_compute, reserve_tokens)
from moetools.devicefit.ggml.allocator import CPU_ALIGNMENT, CUDA_ALIGNMENT, Graph, HOST, _Blocks, _FREE_END, _Tensor
from moetools.devicefit.ggml.compiled import Affine, NotAffine, Program, _CellsOnly, _Regime, _cells, _program
from moetools.devicefit.ggml.scheduler import peaks, schedule
from moetools.devicefit.ggml.split import _SplitGraph, _reset
from moetools.devicefit.graph.archsets import LLAMA_MTP_ARCHES, MTP_GRAPH_ARCHES
from moetools.devicefit.graph.context import _Slots
from moetools.devicefit.graph.mtp import mtp_block_missing, mtp_kv_shape, mtp_placement_compute
from moetools.devicefit.graph.shape import graph_shape
from moetools.devicefit.graph.trunk import _build
