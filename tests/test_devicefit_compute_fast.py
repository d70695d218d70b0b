"""The compiled replay (compute.Program, graphs built once with symbolic cell counts) against the plain
replay it replaces (compute._build at the context's cells + Graph.peak, and the scheduler's graph + peaks):
equal to the byte on every preset family, context, ubatch, flash-attention, cache-type and placement tried."""

import pytest

import moetools.devicefit.ggml.compiled as ggml_compiled
from moetools.devicefit import compute, core, kv, placement
from moetools.devicefit.kv import KVSettings
from moetools.gguf import open_model


def facts_of(path):
    with open_model(path) as model:
        return core.model_facts(model)


def plain_peak(facts, ctx, settings, alignment, layers=None, output=True):
    """The reference: the graph built for this context's concrete cells, replayed by Graph.replay."""
    caches = kv.kv_caches(facts.shape, ctx, settings)
    tokens, streams = compute.reserve_tokens(settings, ctx)
    graph = compute._build(facts.graph, facts.shape, caches, settings, tokens, streams, layers, output,
                           outputs=compute.output_rows(settings, ctx))
    return graph.peak(alignment)


def plain_placement(facts, chosen, kinds, settings, ctx, outputs=None):
    caches = kv.kv_caches(facts.shape, ctx, settings)
    tokens, streams = compute.reserve_tokens(settings, ctx)
    homes = compute.homes_of(facts, chosen)
    graph = compute._build(facts.graph, facts.shape, caches, settings, tokens, streams, None, True, homes,
                           compute.output_rows(settings, ctx, outputs))
    backends = [key for key in kinds if key != compute.HOST] + [compute.HOST]
    offload_to = next((key for key in backends if kinds[key] == "gpu"), None)
    copies = compute.PIPELINE_COPIES if compute.pipeline_parallel(chosen, len(kinds) - 1) else 1
    leafs, nodes = compute.schedule(graph, backends, offload_to, tokens, copies)
    return compute.peaks(graph, leafs, nodes, {key: compute.ALIGNMENT[kinds[key]] for key in backends})


def compiled(facts):
    """The programs the fast path built (None where it fell back to the plain replay)."""
    return [program for _, regimes in facts.graph.__dict__.get("_programs", {}).values() for _, program in regimes]


SETTINGS = [
    KVSettings(),
    KVSettings(flash_attn=False),
    KVSettings(ubatch=128),
    KVSettings(ubatch=2048, flash_attn=False),
    KVSettings(ctk="q8_0", ctv="q8_0"),
    KVSettings(n_seq=2),
    KVSettings(n_seq=3, unified=True, flash_attn=False),
]
CONTEXTS = (300, 4096, 20000, 65536)  # 300: fewer tokens than the ubatch

PRESETS = ("kimi-k3", "deepseek-v3", "qwen3-235b", "gpt-oss-120b", "qwen3-next-80b-a3b", "nemotron-3-nano-30b-a3b",
           "gemma-4-26b-a4b", "deepseek-v3.2", "minimax-m2", "gemma-3n-e4b")


@pytest.mark.parametrize("preset", PRESETS)
def test_compiled_replay_equals_the_plain_replay(preset_model, preset):
    facts = facts_of(preset_model(preset))
    checked = 0
    for index, settings in enumerate(SETTINGS):
        if facts.shape.mla and settings.ctk != settings.ctv:
            continue
        for ctx in CONTEXTS if index == 0 else CONTEXTS[1 + index % 3:][:1]:
            alignment = (compute.CUDA_ALIGNMENT, compute.CPU_ALIGNMENT)[(index + ctx) % 2]
            fast = compute.compute_buffers(facts.graph, facts.shape, ctx, settings, alignment=alignment).device_bytes
            assert fast == plain_peak(facts, ctx, settings, alignment), (preset, settings.as_tuple(), ctx, alignment)
            checked += 1
    assert checked >= 9
    programs = compiled(facts)
    assert programs and all(program is not None for program in programs)  # the fast path ran, not the fallback


def test_compiled_replay_of_a_device_share(preset_model):
    """Some blocks without the head (a device of a -ts split) and the head alone."""
    facts = facts_of(preset_model("kimi-k3"))
    for layers, output in ((range(0, 40), False), (range(40, 93), True), ((), True)):
        for ctx in (4096, 131072):
            fast = compute.compute_buffers(facts.graph, facts.shape, ctx, KVSettings(), layers=layers, output=output,
                                           alignment=compute.CUDA_ALIGNMENT).device_bytes
            assert fast == plain_peak(facts, ctx, KVSettings(), compute.CUDA_ALIGNMENT, layers, output)


@pytest.mark.parametrize("preset", ("kimi-k3", "deepseek-v3.2"))
def test_every_layer_without_the_head_is_the_shared_graphs_walk_before_it(preset_model, preset):
    """A device holding every block but not the output layer (the llama planner's first estimate for
    all devices but the last): with placements to follow, its program is the placements' shared
    graph's walk up to the head's input (no graph of its own): equal to the plain replay of the graph
    built without the head."""
    facts = facts_of(preset_model(preset))
    blocks = range(len(facts.graph.layers))
    checked = 0
    for index, settings in enumerate(SETTINGS):
        if facts.shape.mla and settings.ctk != settings.ctv:
            continue
        for ctx in (300, 4096, 65536) if index == 0 else (CONTEXTS[1 + index % 3],):
            alignment = (compute.CUDA_ALIGNMENT, compute.CPU_ALIGNMENT)[(index + ctx) % 2]
            fast = compute.compute_buffers(facts.graph, facts.shape, ctx, settings, layers=blocks, output=False,
                                           alignment=alignment, placements_follow=True).device_bytes
            assert fast == plain_peak(facts, ctx, settings, alignment, blocks, output=False), (preset, settings.as_tuple(), ctx)
            checked += 1
    assert checked >= 6
    entries = [entry for entries in facts.graph._split_graphs.values() for entry in entries]
    assert entries and all(compute._headless_program(entry, memo=True) is not None for entry in entries)


@pytest.mark.parametrize("preset", ("kimi-k3", "gpt-oss-120b", "qwen3-next-80b-a3b"))
def test_layers_replayed_for_another_context_are_reused_exactly(preset_model, preset):
    """A layer replayed from a state equivalent to one seen at another context (the same free blocks
    and tensors, moved by the larger mask below them) is not replayed again; in any order of
    contexts every figure stays the plain replay's."""
    facts = facts_of(preset_model(preset))
    contexts = (65536, 4096, 4352, 131072, 8192)
    for ctx in contexts:
        fast = compute.compute_buffers(facts.graph, facts.shape, ctx, KVSettings(), alignment=compute.CUDA_ALIGNMENT)
        assert fast.device_bytes == plain_peak(facts, ctx, KVSettings(), compute.CUDA_ALIGNMENT), (preset, ctx)
    (program,) = compiled(facts)
    assert program.replayed < len(program.segments) // 2  # the last context came mostly from the memo


def test_a_program_whose_layers_never_repeat_stops_memoising_and_stays_exact(preset_model):
    """DeepSeek-V3.2's DSA graph: no layer starts from a state seen at another context, so after its
    third context (the first that could take layers from the memo) the program replays plainly."""
    facts = facts_of(preset_model("deepseek-v3.2"))
    contexts = (8192, 16384, 32768, 65536, 24576)
    for ctx in contexts:
        fast = compute.compute_buffers(facts.graph, facts.shape, ctx, KVSettings(), alignment=compute.CUDA_ALIGNMENT)
        assert fast.device_bytes == plain_peak(facts, ctx, KVSettings(), compute.CUDA_ALIGNMENT), ctx
    (program,) = compiled(facts)
    assert program.calls == len(contexts) and program._memo is None and program.replayed is None


@pytest.mark.parametrize("preset", ("kimi-k3", "deepseek-v3", "gpt-oss-120b", "deepseek-v3.2"))
def test_compiled_placement_replay_equals_the_plain_one(preset_model, preset):
    """The scheduler's split graph: CPU experts (op offload on CUDA, none on RPC), a -ts split, and a
    full offload over two devices (pipeline parallelism, 4 copies of every input)."""
    facts = facts_of(preset_model(preset))
    layers = facts.layers
    n_layer = layers.n_layer
    placements = [
        placement.user_placement(layers, 2, n_cpu_moe=n_layer // 2, capacities=[24, 24]),
        placement.user_placement(layers, 2, ts=[3, 1], ngl=n_layer - 3, capacities=[24, 24]),
        placement.user_placement(layers, 2, capacities=[24, 24]),
    ]
    assert compute.pipeline_parallel(placements[2], 2)
    cuda, rpc = {0: "gpu", 1: "gpu", placement.CPU: "cpu"}, {0: "rpc", 1: "gpu", placement.CPU: "cpu"}
    # one graph serves every placement of the same settings (rebound each time): a pipeline-parallel
    # placement first, whose input copies must not leak into the next
    cases = [(placements[2], cuda, KVSettings(), 8192), (placements[0], cuda, KVSettings(), 8192),
             (placements[0], rpc, KVSettings(flash_attn=False), 16384), (placements[1], cuda, KVSettings(), 65536),
             (placements[2], rpc, KVSettings(ubatch=128), 65536), (placements[1], rpc, KVSettings(ubatch=128), 4096)]
    for chosen, kinds, settings, ctx in cases:
        fast = compute.placement_compute(facts, chosen, kinds, settings, ctx)
        assert fast == plain_placement(facts, chosen, kinds, settings, ctx), (preset, kinds, ctx)
    assert all(program is not None for program in compiled(facts))


def test_affine_sizes_refuse_what_they_cannot_follow():
    cells = compute.Affine.cells("full")
    size = 4 * cells * 512 + 64
    assert size.at({"full": 1024}) == 4 * 1024 * 512 + 64
    assert ((size - 64) // 512 * 3).at({"full": 7}) == 84
    assert bool(size) and (size - size) == 0
    for refused in (lambda: size < 10, lambda: min(size, 10), lambda: size * cells, lambda: size // 3,
                    lambda: range(cells), lambda: size == 5, lambda: bool(-cells), lambda: float(size)):
        with pytest.raises(compute.NotAffine):
            refused()


def test_a_breakpoint_in_the_cells_gets_one_program_per_side(preset_model):
    """DeepSeek-V3.2's indexer keeps min(n_kv, top_k) cells per token (top_k 2048): the build decides
    that comparison at the context asked and the program serves only contexts on the same side."""
    facts = facts_of(preset_model("deepseek-v3.2"))
    for ctx in (65536, 1024, 4096, 1536, 300, 131072, 2048, 2304):
        fast = compute.compute_buffers(facts.graph, facts.shape, ctx, KVSettings(), alignment=compute.CUDA_ALIGNMENT)
        assert fast.device_bytes == plain_peak(facts, ctx, KVSettings(), compute.CUDA_ALIGNMENT), ctx
    keys = list(facts.graph._programs.values())  # the 300-token context has a graph of its own
    sides = [{tuple(outcome for _, outcome in conditions) for conditions, _ in regimes} for _, regimes in keys]
    assert sorted(map(len, sides)) == [1, 2] and all(program is not None for program in compiled(facts))
    with pytest.raises(compute.NotAffine):  # outside a build a comparison has no context to be decided at
        compute.Affine.cells("full") < 10


def test_a_placement_graph_serves_only_the_contexts_on_its_side_of_a_breakpoint(preset_model):
    """The split graph shared by a model's placements is built symbolically too: one built for a context
    below DeepSeek-V3.2's indexer top-k (min(n_kv, top_k) is n_kv there) must not serve a context above
    it (where it is top_k), nor the other way round — each side gets its graph, in either order."""
    for order in ((1024, 8192, 1536, 65536), (8192, 1024, 65536, 1536)):
        facts = facts_of(preset_model("deepseek-v3.2"))
        chosen = placement.user_placement(facts.layers, 1, n_cpu_moe=30, capacities=[24])
        kinds = {0: "gpu", placement.CPU: "cpu"}
        for ctx in order:
            fast = compute.placement_compute(facts, chosen, kinds, KVSettings(), ctx)
            assert fast == plain_placement(facts, chosen, kinds, KVSettings(), ctx), (order, ctx)
        (graphs,) = facts.graph._split_graphs.values()
        assert len(graphs) == 2


def test_a_builder_needing_a_number_falls_back_to_the_plain_replay(preset_model):
    facts = facts_of(preset_model("llama3-8b"))

    def counts(caches):
        return range(caches[0].cells)  # a loop over the cells: no symbolic answer

    caches = kv.kv_caches(facts.shape, 8192, KVSettings())
    assert compute._program(facts.graph, facts.shape, caches, ("test",), counts) is None


def both_programs(facts, chosen, kinds, settings, ctx):
    """A placement's split program by the integer form (compute._SplitGraph) and by schedule() +
    Program() over the graph's tensors, from the same bound graph (None, None: not symbolic); on the
    way, the integer form's one-device program against Program() over the graph as built."""
    caches = kv.kv_caches(facts.shape, ctx, settings)
    tokens, streams = compute.reserve_tokens(settings, ctx)
    homes = compute.homes_of(facts, chosen)
    backends = [key for key in kinds if key != compute.HOST] + [compute.HOST]
    offload_to = next((key for key in backends if kinds[key] == "gpu"), None)
    copies = compute.PIPELINE_COPIES if compute.pipeline_parallel(chosen, len(kinds) - 1) else 1
    positions = {key: index for index, key in enumerate(backends)}
    ggml_compiled._REGIME = compute._Regime(compute._cells(caches))
    try:
        entry = compute._shared_entry(facts.graph, facts.shape, [compute._CellsOnly(cache.kind) for cache in caches],
                                      settings, tokens, streams, homes, compute.output_rows(settings, ctx))
        split = compute._SplitGraph(entry.graph, entry.slots)
        fast = split.program(backends, offload_to, tokens, copies, positions, homes.full_offload)
        one = split.one_device_program(memo=True)
        built = compute.Program(entry.graph.leafs, entry.graph.nodes, boundaries=entry.graph.boundaries)
        assert (one.steps, one.prologue, one.buffers, one.fixed, one._cuts) == \
            (built.steps, built.prologue, built.buffers, built.fixed, built._cuts)
        assert [(i, a.const, a.terms) for i, a in one.sized] == [(i, a.const, a.terms) for i, a in built.sized]
        compute._reset(entry.graph, entry.slots, entry.srcs, entry.outputs)
        entry.slots.bind(homes)
        entry.dirty = True
        leafs, nodes = compute.schedule(entry.graph, backends, offload_to, tokens, copies)
        walked = compute.Program(leafs, nodes, positions, entry.graph.boundaries, memo=False)
    except compute.NotAffine:
        return None, None
    finally:
        ggml_compiled._REGIME = None
    return fast, walked


def program_fields(program):
    """A program's events with its tensor slots renamed in allocation order (graph inputs, then each
    step's target): what its replay depends on, whatever numbering it was compiled with."""
    order = list(program.prologue) + [target for target, _, _ in program.steps if target >= 0]
    rank = {index: position for position, index in enumerate(order)}
    assert len(rank) == len(order)  # every tensor allocated once
    steps = [(rank[target] if target >= 0 else -1, tuple(rank[index] for index in candidates),
              tuple(rank[index] for index in freed)) for target, candidates, freed in program.steps]
    sizes = {index: size for index, size in enumerate(program.fixed)}
    sizes.update({index: (size.const, size.terms) for index, size in program.sized})  # (Affine's == is symbolic)
    return (steps, [rank[index] for index in program.prologue], [program.buffers[index] for index in order],
            [sizes[index] for index in order])


@pytest.mark.parametrize("preset", ("kimi-k3", "deepseek-v3", "gpt-oss-120b", "deepseek-v3.2", "qwen3-next-80b-a3b",
                                    "gemma-4-26b-a4b", "nemotron-3-nano-30b-a3b"))
def test_the_integer_split_program_is_the_tensor_walks_program(preset_model, preset):
    """The scheduled, compiled program's events (steps, graph inputs, buffers, sizes, slots renamed in
    allocation order) equal on CPU layers, CPU experts (op offload on CUDA, none on RPC), a -ts split, a full offload with
    pipeline parallelism, a small ubatch (no op offload) and one the output rows cut."""
    facts = facts_of(preset_model(preset))
    layers = facts.layers
    n_layer = layers.n_layer
    placements = [
        placement.user_placement(layers, 1, ngl=n_layer - 2, capacities=[24]),
        placement.user_placement(layers, 2, n_cpu_moe=n_layer // 2, capacities=[24, 24]),
        placement.user_placement(layers, 2, ts=[3, 1], ngl=n_layer - 3, capacities=[24, 24]),
        placement.user_placement(layers, 2, capacities=[24, 24]),
        placement.user_placement(layers, 1, ngl=n_layer // 3, n_cpu_moe=n_layer // 4, capacities=[24]),
    ]
    one = {0: "gpu", placement.CPU: "cpu"}
    cuda, rpc = {0: "gpu", 1: "gpu", placement.CPU: "cpu"}, {0: "rpc", 1: "gpu", placement.CPU: "cpu"}
    cases = [(placements[0], one, KVSettings(), 8192), (placements[1], cuda, KVSettings(), 8192),
             (placements[1], rpc, KVSettings(flash_attn=False), 16384), (placements[2], cuda, KVSettings(), 65536),
             (placements[3], cuda, KVSettings(), 4096), (placements[3], rpc, KVSettings(ubatch=16), 4096),
             (placements[4], one, KVSettings(n_seq=2, outputs=2), 32768), (placements[0], one, KVSettings(ubatch=128), 300)]
    compared = 0
    for chosen, kinds, settings, ctx in cases:
        fast, walked = both_programs(facts, chosen, kinds, settings, ctx)
        if walked is None:
            continue
        assert fast is not None, (preset, ctx)
        assert program_fields(fast) == program_fields(walked), (preset, kinds, settings.as_tuple(), ctx)
        compared += 1
    assert compared >= 6


def test_a_graph_the_integer_form_cannot_schedule_is_left_to_the_tensor_walk():
    """No op with a device of its own (schedule()'s pass 3 decides) and a leaf missing from the graph's
    leafs (ggml-alloc claims it at its first use): _SplitGraph declines, _split_program walks the tensors."""
    homes = compute.Homes(layer_device=[0, 0])
    for stray in (False, True):
        graph = compute.Graph()
        token = graph.input(64)
        loose = compute._Tensor(128, has_op=False)
        first = graph.op(256, token, loose) if stray else graph.op(256, token)
        graph.expand(graph.op(256, first, inplace=(0,)))
        slots = compute._Slots(homes)
        entry = compute._SharedEntry(None, graph, slots, ())
        assert compute._SplitGraph(graph, slots).program([0, compute.HOST], 0, 512, 1, {0: 0, compute.HOST: 1},
                                                         True) is None
        program = compute._split_program(entry, homes, [0, compute.HOST], 0, 512, 1)
        assert entry.dirty and program.peaks({}, [128, 32]) == [0, 448 if stray else 320]  # (the second op in place)


def test_a_copied_tensor_viewed_elsewhere_is_freed_where_the_tensor_walk_frees_it():
    """r (on the GPU) is read by a view consumed on the GPU and directly by a CPU op, which gets a copy:
    r is then freed at the copy's dependency node, which only a patch that re-walks the view's consumer
    too gets right (the built graph frees it at the CPU op)."""
    def graph_of():
        graph = compute.Graph()
        on_gpu, on_cpu = graph.external(0, weight=True), graph.external(compute.HOST, weight=True)
        x = graph.input(1024)
        r = graph.op(4096, on_gpu, x)
        a = graph.op(4096, on_gpu, graph.view(r))
        b = graph.op(4096, on_cpu, r)
        graph.expand(graph.op(4096, on_gpu, a, b))
        return graph

    homes = compute.Homes(layer_device=[0, 0])
    backends, positions = [0, compute.HOST], {0: 0, compute.HOST: 1}
    graph = graph_of()
    fast = compute._SplitGraph(graph, compute._Slots(homes)).program(backends, None, 512, 1, positions, True)
    leafs, nodes = compute.schedule(graph_of(), backends, None, 512)
    walked = compute.Program(leafs, nodes, positions, memo=False)
    assert program_fields(fast) == program_fields(walked)
    assert fast.peaks({}, [128, 32]) == walked.peaks({}, [128, 32])
