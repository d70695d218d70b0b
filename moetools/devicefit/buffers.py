"""The compute (graph) buffer llama.cpp's scheduler reserves, by replaying its allocator.

llama.cpp sizes the compute buffer once, at context creation (llama_context::sched_reserve): it builds
the worst-case graph — n_ubatch tokens (rounded up to a multiple of --parallel) against every KV cell,
every token an output — and lets ggml-alloc lay out the graph's intermediate tensors in one buffer,
reusing the memory of tensors whose last consumer has run. The buffer is the high-water mark of that
layout. It reserves the one-token graph too and keeps the larger, which is always the batch one.

This module rebuilds that graph from the header — the same tensors in the same order (src/llama-graph.cpp
build_attn / build_attn_mha / build_moe_ffn / build_ffn / build_inp_*, src/models/*.cpp for the layer
bodies) — and runs a pure-Python replay of ggml-alloc (ggml/src/ggml-alloc.c: best-fit free blocks with
merging, parents freed after their last child, in-place reuse for the ops ggml_op_can_inplace lists when
the parent is the node's last consumer). Read, not copied: the code is moetools' own.

What is modelled exactly: the attention scores without flash attention (n_kv x tokens x heads f32 per
stream), the KQ masks (f16 with flash attention, f32 without) and index inputs, MLA's absorbed query
and latent outputs, the router/top-k/weights and the selected experts' activations, dense and shared
FFNs, logits (n_vocab x n_ubatch f32, an output, never freed), the DSA lightning indexer (scores,
top-k, the rebuilt KQ mask) and Mamba-2 layers op by op. The KDA and gated delta net layers are
replayed by their projections, conv inputs and scan outputs; their chunked scan's own scratch (a few
MiB at 512 tokens) is below the 10% the tests allow and is not modelled op by op.
A view's memory is never reused in place: ggml-alloc's reserve sees a view's data unallocated and
takes it for external memory (so an in-place op on a reshape is a new tensor).

Per device: `layers` says which blocks a device computes and `output` whether it computes the output
head. Tensors that live on the host (the token-embedding lookup, whose weights llama.cpp keeps on the
CPU) are counted in `host_bytes`.

The public compute-buffer API. The allocator and scheduler replays live in moetools/devicefit/ggml/,
the graph builders in moetools/devicefit/graph/.
"""

import moetools.devicefit.ggml.compiled as compiled
from moetools.devicefit import kv as kvmod
from moetools.devicefit.ggml.allocator import CPU_ALIGNMENT, CUDA_ALIGNMENT, F32_BYTES, HOST
from moetools.devicefit.ggml.compiled import Program, _REGIMES_MAX, _cells, _holds, _program
from moetools.devicefit.ggml.fold import fold_inplace_chains
from moetools.devicefit.ggml.scheduler import peaks, schedule
from moetools.devicefit.ggml.split import _SplitGraph, _reset
from moetools.devicefit.graph.context import _Slots
from moetools.devicefit.graph.trunk import _build, _repeats
from moetools.devicefit.record import REQUIRED, Record


class ComputeBuffers(Record):
    """Compute buffer bytes: on the device that runs the layers, and on the host."""

    FIELDS = (
        ("device_bytes", REQUIRED),
        ("host_bytes", REQUIRED),
        ("tokens", REQUIRED),  # tokens of the worst-case graph
        ("streams", REQUIRED),
        ("logits_bytes", 0),
    )

    def to_doc(self):
        return {"device_bytes": self.device_bytes, "host_bytes": self.host_bytes, "tokens": self.tokens,
                "streams": self.streams, "logits_bytes": self.logits_bytes}


def reserve_tokens(settings, ctx):
    """Tokens and streams of llama.cpp's worst-case graph: min(n_ctx, n_ubatch) rounded up to a
    multiple of the sequences, one stream per sequence unless the cache is unified."""
    n_seq = settings.n_seq
    tokens = min(kvmod.pad(ctx), kvmod.n_ubatch(settings, ctx))
    tokens = -(-tokens // n_seq) * n_seq
    return tokens, (1 if settings.unified else n_seq)


def output_rows(settings, ctx, outputs=None):
    """The rows the worst-case graph outputs: llama_context::sched_reserve's min(n_tokens, n_outputs_max)
    with n_tokens = min(n_ctx, n_ubatch) *before* graph_reserve rounds it up to a multiple of the
    sequences (so 512 rows of a 513-token graph at -np 3). outputs: n_outputs_max (None/0: the settings'
    `outputs`, whose 0 means the batch)."""
    asked = min(kvmod.pad(ctx), kvmod.n_ubatch(settings, ctx))
    return min(outputs or settings.outputs or asked, asked)


def compute_buffers(graph_shape, kvshape, ctx, settings, *, layers=None, output=True, alignment=CPU_ALIGNMENT,
                    outputs=None, placements_follow=False):
    """The compute buffers llama.cpp reserves for a context of `ctx` tokens (ComputeBuffers).

    layers: block indices this device computes (None: all); output: whether it computes the head;
    outputs: the rows the graph outputs (None: every token). The host share is the token-embedding
    lookup (its weights stay on the CPU in llama.cpp). placements_follow: the caller goes on to replay
    placements of the model (llama's planner), so a whole-model graph that is the placements' shared
    graph gets its integer form now and its one-device program from it (the same program; no tensor
    walk to undo before the first placement)."""
    caches = kvmod.kv_caches(kvshape, ctx, settings)
    tokens, streams = reserve_tokens(settings, ctx)
    outputs = output_rows(settings, ctx, outputs)
    layers = None if layers is None else tuple(sorted(set(layers)))
    key = ("one", settings.as_tuple(), tokens, streams, _kinds(caches), layers, bool(output), outputs)
    def compile_symbolic(symbolic):
        every_layer = layers is None or set(range(len(graph_shape.layers))) <= set(layers)  # (NextN blocks are not in it)
        if every_layer and (output or placements_follow) and _shares_placement_graph(graph_shape):
            # the placements' graph (no layer left out either way): its tensors are the same, only
            # their devices differ, and one buffer ignores those; without the head, the steps before it
            homes = Homes(layer_device=[0] * (kvshape.block_count + 1))
            entry = _shared_entry(graph_shape, kvshape, symbolic, settings, tokens, streams, homes, outputs)
            if placements_follow and not entry.dirty:
                _split_form(entry)
            if output:
                return _one_device_program(entry, memo=not graph_shape.indexer_heads)
            program = _headless_program(entry, memo=not graph_shape.indexer_heads)
            if program is not None:
                return program
        return _one_program(_build(graph_shape, kvshape, symbolic, settings, tokens, streams, layers, output,
                                   outputs=outputs), memo=not graph_shape.indexer_heads)

    program = _program(graph_shape, kvshape, caches, key, compile_symbolic)
    if program is not None:
        total = program.peaks(_cells(caches), [alignment])[0]
    else:  # a builder needs the concrete cells: the plain replay at this context
        total = _build(graph_shape, kvshape, caches, settings, tokens, streams, layers, output,
                       outputs=outputs).peak(alignment)
    host = -(-(graph_shape.n_embd * tokens * F32_BYTES) // alignment) * alignment
    return ComputeBuffers(device_bytes=total, host_bytes=host, tokens=tokens, streams=streams,
                          logits_bytes=graph_shape.n_vocab * outputs * F32_BYTES if output else 0)


ALIGNMENT = {"gpu": CUDA_ALIGNMENT, "rpc": CUDA_ALIGNMENT, "cpu": CPU_ALIGNMENT}


def _kinds(caches):
    return tuple(cache.kind for cache in caches)


def _shares_placement_graph(graph_shape):
    """Whether a whole-model graph on one device is the placements' shared graph: both replay every
    layer (_repeats leaves none out of a residual-stack or DSA graph whatever the homes), and the
    builders' homes decide only which device a tensor is on."""
    return bool(graph_shape.attn_res_block or graph_shape.indexer_heads) and not graph_shape.altup


def _one_program(graph, memo=True):
    fold_inplace_chains(graph)
    return Program(graph.leafs, graph.nodes, boundaries=graph.boundaries, memo=memo)



_MEMO_MAX = 256


def compute_bytes(facts, layers, holds_output, settings, ctx, kind="gpu", outputs=None):
    """One device's compute buffer (bytes): the blocks in `layers`, the logits if `holds_output`.

    facts: core.ModelFacts (its .graph and .shape); kind "gpu"/"rpc" (128-byte alignment) or "cpu".
    Memoised: a placement search asks for the same device many times."""
    layers = None if layers is None else tuple(sorted(layers))
    memo = facts.graph.__dict__.setdefault("_compute_memo", {})
    key = (layers, bool(holds_output), settings.as_tuple(), ctx, kind, outputs)
    if key not in memo:
        if len(memo) >= _MEMO_MAX:
            memo.clear()
        memo[key] = compute_buffers(facts.graph, facts.shape, ctx, settings, layers=layers, output=holds_output,
                                    alignment=ALIGNMENT[kind], outputs=outputs, placements_follow=True).device_bytes
    return memo[key]


def host_bytes(facts, settings, ctx):
    """The host-side compute buffer of a fully offloaded model: the token-embedding lookup."""
    tokens, _ = reserve_tokens(settings, ctx)
    return -(-(facts.graph.n_embd * tokens * F32_BYTES) // CPU_ALIGNMENT) * CPU_ALIGNMENT


class Homes(Record):
    """Where a placement puts the weights, for the multi-device replay. layer_device: n_layer + 1 device
    keys (the last the output layer; HOST for the CPU); expert_device {block: {part: key}}; expert_bytes
    {block: {part: bytes}} and dense_max_bytes {block: bytes} size the copies of CPU weights a GPU makes
    when it offloads their ops."""

    FIELDS = (
        ("layer_device", REQUIRED),
        ("expert_device", dict),
        ("expert_bytes", dict),
        ("dense_max_bytes", dict),
    )

    @property
    def full_offload(self):
        """llama.cpp's full_offload: -ngl above n_layer (every block and the output layer offloaded)."""
        return HOST not in self.layer_device


def homes_of(facts, placement):
    """The Homes of a placement.Placement over core.ModelFacts (its LayerBytes size the weight copies)."""
    blocks = facts.layers.blocks
    return Homes(layer_device=list(placement.layer_device), expert_device=placement.expert_device,
                 expert_bytes={block.index: dict(block.experts) for block in blocks if block.experts},
                 dense_max_bytes={block.index: max((n for n, _ in block.dense_tensors), default=0) for block in blocks})


def placement_buffers(graph_shape, kvshape, ctx, settings, homes, kinds, op_offload=True, pipeline=False, outputs=None):
    """{device key: compute buffer bytes} of llama.cpp's worst-case graph split across the devices of a
    placement, as ggml_backend_sched reserves it: every node on the backend its weights (or KV cache)
    live on, the rest expanded around them, a copy of each tensor a split reads from another backend
    allocated in the split's buffer, one ggml-alloc buffer per backend.

    kinds: {key: "gpu" | "rpc" | "cpu"} for every device key and HOST, in the scheduler's priority
    order (offload devices in order, then HOST). With op_offload (llama.cpp's default) the first "gpu"
    (CUDA) device runs the ops of host-resident weights at the worst-case batch and holds a copy of
    each such weight (the RPC backend offloads nothing). pipeline: llama.cpp enables pipeline
    parallelism (4 scheduler copies) when more than one device holds every layer and no -ot override
    is given (llama_context's constructor)."""
    caches = kvmod.kv_caches(kvshape, ctx, settings)
    tokens, streams = reserve_tokens(settings, ctx)
    outputs = output_rows(settings, ctx, outputs)
    backends = [key for key in kinds if key != HOST] + [HOST]
    offload_to = next((key for key in backends if kinds[key] == "gpu"), None) if op_offload else None
    n_copies = PIPELINE_COPIES if pipeline else 1

    def scheduled(cache_list):
        graph = _build(graph_shape, kvshape, cache_list, settings, tokens, streams, None, True, homes, outputs)
        return graph, schedule(graph, backends, offload_to, tokens, n_copies)

    def compile_symbolic(symbolic):
        entry = _shared_entry(graph_shape, kvshape, symbolic, settings, tokens, streams, homes, outputs)
        return _split_program(entry, homes, backends, offload_to, tokens, n_copies,
                              eager=_shares_placement_graph(graph_shape))

    key = ("split", settings.as_tuple(), tokens, streams, _homes_key(homes), tuple(kinds.items()), bool(op_offload),
           n_copies, outputs, _kinds(caches))
    program = _program(graph_shape, kvshape, caches, key, compile_symbolic)
    if program is None:  # a builder needs the concrete cells: the plain replay at this context
        graph, (leafs, nodes) = scheduled(caches)
        return peaks(graph, leafs, nodes, {key: ALIGNMENT[kinds[key]] for key in backends})
    return dict(zip(backends, program.peaks(_cells(caches), [ALIGNMENT[kinds[key]] for key in backends])))


_GRAPHS_MAX = 4  # placement graphs kept per model: one per ubatch/settings in use


class _SharedEntry:
    """One placements' graph (_shared_entry) with what rebinding it needs: its _Slots, the nodes' built
    sources and the leafs' built output flags (_reset), the breakpoints its build decided, its integer
    form (_SplitGraph, made at the first placement that schedules it) and whether a tensor walk
    (schedule(), Program()) has left marks on its tensors since the last _reset."""

    __slots__ = ("kvshape", "graph", "slots", "srcs", "outputs", "conditions", "split", "dirty", "placements")

    def __init__(self, kvshape, graph, slots, conditions):
        self.kvshape, self.graph, self.slots, self.conditions = kvshape, graph, slots, conditions
        self.srcs = [node.srcs for node in graph.nodes]
        self.outputs = [leaf.is_output for leaf in graph.leafs]
        self.split = None
        self.dirty = False
        self.placements = 0  # placements scheduled on it so far


def _shared_entry(graph_shape, kvshape, symbolic, settings, tokens, streams, homes, outputs):
    """The _SharedEntry of `homes`' split graph: built once per model, settings and skipped layers with
    per-layer externals (_Slots), then reset (when a tensor walk marked it) and bound to each placement
    in turn. Called inside _program's symbolic build: a graph whose build decided a comparison with the
    cell count (the DSA indexer's min(n_kv, top_k)) serves only the contexts on the same side (its
    decisions are handed on to the program being compiled), the other side gets a graph of its own."""
    layer_set = set(range(len(graph_shape.layers)))
    skipped = frozenset(_repeats(graph_shape, kvshape, layer_set, homes, settings.layer_inputs))
    graphs = graph_shape.__dict__.setdefault("_split_graphs", {})
    key = (id(kvshape), settings.as_tuple(), tokens, streams, outputs, skipped, tuple(cache.kind for cache in symbolic),
           len(homes.layer_device))
    regime = compiled._REGIME
    entries = graphs.get(key)
    if not entries or entries[0].kvshape is not kvshape:  # (empty: a build that raised NotAffine)
        if len(graphs) >= _GRAPHS_MAX:
            graphs.pop(next(iter(graphs)))
        entries = graphs[key] = []
    entry = next((entry for entry in entries if regime is None or _holds(entry.conditions, regime.cells)), None)
    if entry is None:
        slots = _Slots(homes)
        graph = _build(graph_shape, kvshape, symbolic, settings, tokens, streams, None, True, slots, outputs)
        # tensors a builder put on "its layer's device" directly (b.dev): bound like the externals
        slots.placed = [(tensor, tensor.device[1]) for tensor in (*graph.leafs, *graph.nodes)
                        if isinstance(tensor.device, tuple)]
        fold_inplace_chains(graph, [node for node, _ in slots.pins] + [tensor for tensor, _ in slots.placed])
        if len(entries) >= _REGIMES_MAX:
            entries.pop(0)
        entry = _SharedEntry(kvshape, graph, slots, tuple(regime.conditions.items()) if regime is not None else ())
        entries.append(entry)
    else:
        if entry.dirty:
            _reset(entry.graph, entry.slots, entry.srcs, entry.outputs)
            entry.dirty = False
        if regime is not None:
            regime.conditions.update(entry.conditions)  # the program inherits the graph's breakpoints
    entry.slots.bind(homes)
    return entry


def _split_form(entry):
    """The entry's _SplitGraph, made at its first use (the graph is clean and bound then)."""
    if entry.split is None:
        entry.split = _SplitGraph(entry.graph, entry.slots)
    return entry.split


def _one_device_program(entry, memo):
    """Program(graph.leafs, graph.nodes) of a _SharedEntry's graph on one device: the integer form's
    walk where a placement made it already, else the tensor walk (cheaper than making the integer form
    for a plan that may never split: a fork plan)."""
    program = entry.split.one_device_program(memo) if entry.split is not None else None
    if program is None:
        entry.dirty = True
        graph = entry.graph
        program = Program(graph.leafs, graph.nodes, boundaries=graph.boundaries, memo=memo)
    return program


def _headless_program(entry, memo):
    """The one-device program of a _SharedEntry's graph without its output layer (the graph built with
    output=False): its integer form's steps up to the output layer's input (None: no integer form, or
    a builder that does not mark where the head starts)."""
    if entry.split is None:
        return None
    return entry.split.headless_program(memo)


def _split_program(entry, homes, backends, offload_to, tokens, n_copies, eager=True):
    """The Program of a _SharedEntry's graph bound to `homes`, scheduled over `backends`: by its integer form
    (_SplitGraph) where that applies, else by schedule() and Program() over its tensors. The integer form
    costs about two tensor walks to make: it is made at a graph's first placement when every placement
    shares that graph (`eager`: a residual-stack or DSA model, whose graph replays every layer), else at
    the graph's second (where placements leave different layers out, each set has its own graph, often
    scheduled once)."""
    positions = {key: index for index, key in enumerate(backends)}
    entry.placements += 1
    program = None
    if eager or entry.split is not None or entry.placements > 1:
        program = _split_form(entry).program(backends, offload_to, tokens, n_copies, positions, homes.full_offload)
    if program is None:
        entry.dirty = True
        leafs, nodes = schedule(entry.graph, backends, offload_to, tokens, n_copies)
        program = Program(leafs, nodes, positions, entry.graph.boundaries, memo=False)
    return program


def _homes_key(homes):
    nested = lambda table: tuple(sorted((block, tuple(sorted(parts.items()))) for block, parts in table.items()))  # noqa: E731
    return (tuple(homes.layer_device), nested(homes.expert_device), nested(homes.expert_bytes),
            tuple(sorted(homes.dense_max_bytes.items())))


PIPELINE_COPIES = 4  # GGML_SCHED_MAX_COPIES


def pipeline_parallel(placement, n_devices):
    """Whether llama.cpp runs this placement with pipeline parallelism: several devices, every layer
    and the output offloaded, split by layer, no tensor override (the emitted -ot, --n-cpu-moe; a user's
    -ot that moves nothing still counts: llama_model's has_tensor_overrides)."""
    if n_devices < 2 or placement.main_gpu is not None or HOST in placement.layer_device:
        return False
    if any(kind != "--n-cpu-moe" or value for kind, value in placement.sources or ()):
        return False
    return all(home == placement.layer_device[block] for block, homes in placement.expert_device.items()
               for home in homes.values())


def _placement_key(placement, kinds, settings, ctx, outputs):
    """A hashable key of what a placement's compute buffers depend on (the memos' key)."""
    experts = tuple(sorted((block, tuple(sorted(homes.items()))) for block, homes in placement.expert_device.items()))
    overridden = any(kind != "--n-cpu-moe" or value for kind, value in placement.sources or ())
    return tuple(placement.layer_device), experts, tuple(kinds.items()), settings.as_tuple(), ctx, outputs, overridden


def placement_compute(facts, placement, kinds, settings, ctx, outputs=None):
    """placement_buffers for a placement.Placement over core.ModelFacts, memoised on the facts.
    outputs: the context's output rows (None: every token; a draft model's: one per sequence)."""
    memo = facts.graph.__dict__.setdefault("_placement_memo", {})
    key = _placement_key(placement, kinds, settings, ctx, outputs)
    if key not in memo:
        if len(memo) >= _MEMO_MAX:
            memo.clear()
        pipeline = pipeline_parallel(placement, len(kinds) - 1)
        memo[key] = placement_buffers(facts.graph, facts.shape, ctx, settings, homes_of(facts, placement), kinds,
                                      pipeline=pipeline, outputs=outputs)
    return memo[key]
