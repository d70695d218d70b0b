"""placement.choose's spill: which experts of each device's range leave for the CPU -- "first" (device-fit's
default, one GPU is --n-cpu-moe N) or "last" (as llama.cpp's --fit: common/fit.cpp)."""

import pytest

from moetools.devicefit import devices, kv, overrides, placement, upstream
from moetools.devicefit.core import model_facts
from moetools.devicefit.placement import CPU
from moetools.gguf import open_model

GIB = 1024**3


def facts_of(path):
    with open_model(path) as model:
        return model_facts(model)


def chosen(facts, budgets_gib, spill):
    layers = facts.layers
    costs = placement.layer_costs(layers, kv.per_layer(facts.shape, 4096, kv.KVSettings()))
    return placement.choose(layers, costs, [int(gib * GIB) for gib in budgets_gib], spill)[0]


def cpu_blocks_by_device(facts, chosen_placement):
    """{device: (blocks of its range with experts, [blocks whose experts are all on the CPU], [partly])}."""
    result = {}
    for block, homes in sorted(chosen_placement.expert_device.items()):
        device = chosen_placement.layer_device[block]
        if device == CPU:
            continue
        entry = result.setdefault(device, ([], [], []))
        entry[0].append(block)
        where = set(homes.values())
        if where == {CPU}:
            entry[1].append(block)
        elif CPU in where:
            entry[2].append(block)
    return result


BUDGETS = [[24], [10, 14], [6, 8, 10]]


@pytest.mark.parametrize("budgets", BUDGETS)
@pytest.mark.parametrize("preset", ["gpt-oss-120b", "qwen3-235b"])
def test_last_spills_the_back_of_each_range_first_the_front(preset_model, preset, budgets):
    facts = facts_of(preset_model(preset))
    first, last = chosen(facts, budgets, "first"), chosen(facts, budgets, "last")
    assert first.layer_device == last.layer_device and first.ngl == last.ngl and first.ts == last.ts
    spilled = 0
    for device, (blocks, whole, partial) in cpu_blocks_by_device(facts, last).items():
        assert len(partial) <= 1
        moved = partial + whole
        assert moved == blocks[len(blocks) - len(moved):]  # a suffix of the range, the boundary first
        spilled += len(moved)
    for device, (blocks, whole, partial) in cpu_blocks_by_device(facts, first).items():
        moved = whole + partial
        assert moved == blocks[:len(moved)]  # a prefix, the boundary last
    assert spilled > 0  # these budgets force experts off the GPUs


@pytest.mark.parametrize("budgets", BUDGETS)
def test_both_spills_keep_the_same_expert_bytes_per_device(preset_model, budgets):
    # gpt-oss-120b's blocks are all alike: the same budget holds the same experts at either end
    facts = facts_of(preset_model("gpt-oss-120b"))
    first, last = chosen(facts, budgets, "first"), chosen(facts, budgets, "last")

    def held(p):
        sizes = {}
        for block, homes in p.expert_device.items():
            for part, home in homes.items():
                sizes[home] = sizes.get(home, 0) + facts.layers.blocks[block].experts[part]
        return sizes
    assert held(first) == held(last)


def test_a_last_spill_reproduces_from_its_own_flags(preset_model):
    facts = facts_of(preset_model("gpt-oss-120b"))
    gpus = [devices.Device(f"CUDA{i}", "gpu", int(gib * GIB), 900e9) for i, gib in enumerate([10, 14])]
    last = chosen(facts, [10, 14], "last")
    assert placement.cpu_moe_count(last, facts.layers) is None  # not --n-cpu-moe: -ot patterns
    text = ",".join(f"{pattern}={target}" for pattern, target in placement.override_patterns(last, gpus))
    homes = overrides.tensor_homes(overrides.resolve([("-ot", text)], gpus), facts.layers.tensors)[0]
    again = placement.user_placement(facts.layers, len(gpus), ngl=last.ngl, ts=last.ts, sources=[("-ot", text)], homes=homes)
    assert again.layer_device == last.layer_device and again.expert_device == last.expert_device


def test_plan_at_takes_the_spill_and_defaults_to_first(preset_model):
    facts = facts_of(preset_model("gpt-oss-120b"))
    gpus = [devices.Device("CUDA0", "gpu", 24 * GIB, 900e9)]
    cpu = devices.cpu_device(512 * GIB, 60e9, "test")
    options = upstream.UpstreamOptions(ctx=4096, reserve=0)
    default = upstream.plan_at(facts, gpus, cpu, options, 4096)
    first = upstream.plan_at(facts, gpus, cpu, options, 4096, spill="first")
    last = upstream.plan_at(facts, gpus, cpu, options, 4096, spill="last")
    assert default.placement.expert_device == first.placement.expert_device
    assert first.placement.n_cpu_moe and last.placement.n_cpu_moe is None
    assert last.fits and first.fits
    blocks, whole, partial = cpu_blocks_by_device(facts, last.placement)[0]
    assert (partial + whole) == blocks[len(blocks) - len(partial + whole):]


def test_an_unknown_spill_is_refused(preset_model):
    facts = facts_of(preset_model("gpt-oss-120b"))
    with pytest.raises(ValueError, match="spill"):
        chosen(facts, [24], "middle")
