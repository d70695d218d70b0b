"""Property test of compute._SplitGraph (the integer scheduler/compiler of split placements) against the
tensor walk it stands for: over every tiny architecture the factory writes (the layouts measured in
tests/data/devicefit_llama_archs.json) and seeded random placements of each — layers over two GPUs and/or
RPC servers and the CPU, routed experts on the CPU (--n-cpu-moe, or any blocks' expert parts as
device-fit's -ot places them), the output layer on either side, pipeline parallelism on and off, op
offload on and off, flash attention on and off, -np 2 with and without -kvu, several ubatches and
contexts — the per-device compute buffers equal those of the graph built at the context's concrete cells,
scheduled by schedule() and walked by peaks() (ggml_backend_sched + ggml-alloc as the rest of the suite
checks them against llama.cpp). The factory's other architectures (qwen3moe, deepseek2, gpt-oss, kimi-k3,
...) join at their default tiny layouts."""

import json
import random
from pathlib import Path

import pytest

from moetools import synth
import moetools.devicefit.ggml.compiled as ggml_compiled
from moetools.devicefit import compute, core, kv, placement
from moetools.devicefit.kv import KVSettings
from moetools.gguf import open_model

DATA = json.loads((Path(__file__).parent / "data" / "devicefit_llama_archs.json").read_text())
# drafts planned only beside their target (test_devicefit_archs covers them there)
DRAFT_ONLY = {"gemma4-assistant"}
# layouts whose measured widths make writing the header slow (a 150k-250k vocabulary's tokenizer):
# the architecture's default tiny layout stands in for them
WIDE = {"dflash", "minimax-m3", "lfm2-swa", "bailingmoe3", "minimax-01", "exaone4", "qwen35", "arctic"}


def _layouts():
    layouts = []
    for case in DATA["tiny_cases"]:
        arch = case["tiny"]
        if arch in DRAFT_ONLY:
            continue
        params = {} if arch in WIDE else case["params"]
        if (arch, params) not in layouts:
            layouts.append((arch, params))
    measured = {arch for arch, _ in layouts}
    # every other architecture the factory writes, at its default tiny layout (qwen3moe, deepseek2, gpt-oss, ...)
    layouts += [(arch, {}) for arch in synth.BUILDERS if arch not in measured and arch not in DRAFT_ONLY]
    return layouts


LAYOUTS = _layouts()
KINDS = (
    {0: "gpu", 1: "gpu", placement.CPU: "cpu"},
    {0: "rpc", 1: "rpc", placement.CPU: "cpu"},
    {0: "rpc", 1: "gpu", placement.CPU: "cpu"},
    {0: "gpu", placement.CPU: "cpu"},
)
PLACEMENTS_PER_LAYOUT = 5


def random_case(rng, layers):
    """One seeded placement: devices, -ngl (the output layer offloaded or not), -ts, --n-cpu-moe,
    settings, context, pipeline parallelism and op offload."""
    kinds = rng.choice(KINDS)
    n_devices = len(kinds) - 1
    n_layer = layers.n_layer
    ngl = rng.choice([n_layer + 1, n_layer + 1, n_layer, rng.randint(0, n_layer)])
    has_experts = any(block.experts for block in layers.blocks)
    n_cpu_moe = rng.choice([None, rng.randint(1, n_layer)]) if has_experts else None
    ts = [rng.randint(1, 4) for _ in range(n_devices)] if n_devices > 1 and rng.random() < 0.5 else None
    chosen = placement.user_placement(layers, n_devices, ngl=ngl, ts=ts, n_cpu_moe=n_cpu_moe,
                                      capacities=[24] * n_devices)
    if has_experts and n_cpu_moe is None and rng.random() < 0.5:
        # device-fit's own -ot placements: any blocks' experts (or some of their parts) on the CPU
        for homes in chosen.expert_device.values():
            for part in homes:
                if rng.random() < 0.4:
                    homes[part] = placement.CPU
    n_seq = rng.choice([1, 2, 2])
    settings = KVSettings(flash_attn=rng.random() < 0.5, n_seq=n_seq, unified=n_seq > 1 and rng.random() < 0.5,
                          ubatch=rng.choice([512, 512, 128, 32]))
    ctx = rng.choice([300, 4096, 9000])
    pipeline = rng.random() < 0.5
    op_offload = rng.random() < 0.8
    return chosen, kinds, settings, ctx, pipeline, op_offload


def tensor_walk(facts, homes, kinds, settings, ctx, pipeline, op_offload):
    """{device: bytes} of the graph built at this context's cells, schedule()d and walked by peaks()."""
    caches = kv.kv_caches(facts.shape, ctx, settings)
    tokens, streams = compute.reserve_tokens(settings, ctx)
    graph = compute._build(facts.graph, facts.shape, caches, settings, tokens, streams, None, True, homes,
                           compute.output_rows(settings, ctx))
    backends = [key for key in kinds if key != compute.HOST] + [compute.HOST]
    offload_to = next((key for key in backends if kinds[key] == "gpu"), None) if op_offload else None
    copies = compute.PIPELINE_COPIES if pipeline else 1
    leafs, nodes = compute.schedule(graph, backends, offload_to, tokens, copies)
    return compute.peaks(graph, leafs, nodes, {key: compute.ALIGNMENT[kinds[key]] for key in backends})


def plain_peak(facts, ctx, settings):
    """One device's buffer by Graph.replay of the whole graph built at this context's cells."""
    caches = kv.kv_caches(facts.shape, ctx, settings)
    tokens, streams = compute.reserve_tokens(settings, ctx)
    graph = compute._build(facts.graph, facts.shape, caches, settings, tokens, streams, None, True,
                           outputs=compute.output_rows(settings, ctx))
    return graph.peak(compute.CPU_ALIGNMENT)


NOT_SYMBOLIC = "not symbolic"


def integer_form(facts, homes, kinds, settings, ctx, pipeline, op_offload):
    """{device: bytes} of the shared graph's integer form (the one _split_program keeps: made at an
    earlier placement and reused); None where it declines, NOT_SYMBOLIC where a builder needs the
    concrete cells (device-fit replays those plainly, no integer form involved)."""
    caches = kv.kv_caches(facts.shape, ctx, settings)
    tokens, streams = compute.reserve_tokens(settings, ctx)
    backends = [key for key in kinds if key != compute.HOST] + [compute.HOST]
    offload_to = next((key for key in backends if kinds[key] == "gpu"), None) if op_offload else None
    copies = compute.PIPELINE_COPIES if pipeline else 1
    positions = {key: index for index, key in enumerate(backends)}
    cells = compute._cells(caches)
    ggml_compiled._REGIME = compute._Regime(cells)
    try:
        entry = compute._shared_entry(facts.graph, facts.shape, [compute._CellsOnly(cache.kind) for cache in caches],
                                      settings, tokens, streams, homes, compute.output_rows(settings, ctx))
        program = compute._split_form(entry).program(backends, offload_to, tokens, copies, positions,
                                                     homes.full_offload)
    except compute.NotAffine:
        return NOT_SYMBOLIC
    finally:
        ggml_compiled._REGIME = None
    if program is None:
        return None
    return dict(zip(backends, program.peaks(cells, [compute.ALIGNMENT[kinds[key]] for key in backends])))


@pytest.mark.parametrize("arch,params", LAYOUTS, ids=[f"{arch}-{index}" for index, (arch, _) in enumerate(LAYOUTS)])
def test_the_integer_split_form_equals_the_tensor_walk(tmp_path, arch, params):
    path = synth.write_model(synth.tiny(arch, **params), tmp_path / f"{arch}.gguf", sparse=True)[0]
    with open_model(path) as model:
        facts = core.model_facts(model)
    rng = random.Random(f"{arch}{sorted(params.items())}")
    applied = symbolic = 0
    for round_ in range(PLACEMENTS_PER_LAYOUT):
        chosen, kinds, settings, ctx, pipeline, op_offload = random_case(rng, facts.layers)
        kv.force_flash_attn_off(arch, settings)  # (grok: in place)
        homes = compute.homes_of(facts, chosen)
        walked = tensor_walk(facts, homes, kinds, settings, ctx, pipeline, op_offload)
        described = (arch, params, list(chosen.layer_device), chosen.expert_device, kinds, settings.as_tuple(), ctx,
                     pipeline, op_offload)
        # what device-fit asks first (its program cache; at a graph's first placement the tensor walk
        # over the shared graph, which the integer form below is then made from, reset)
        planned = compute.placement_buffers(facts.graph, facts.shape, ctx, settings, homes, kinds,
                                            op_offload=op_offload, pipeline=pipeline)
        assert planned == walked, described
        fast = integer_form(facts, homes, kinds, settings, ctx, pipeline, op_offload)
        symbolic += fast is not NOT_SYMBOLIC
        if fast is not None and fast is not NOT_SYMBOLIC:
            applied += 1
            assert fast == walked, described
        if round_ == 1:  # one device, whole model (once a layout): the integer form's one-device walk where made
            alone = compute.compute_buffers(facts.graph, facts.shape, ctx, settings).device_bytes
            assert alone == plain_peak(facts, ctx, settings), described
    assert applied or not symbolic, f"{arch}: the integer form declined every symbolic placement"
