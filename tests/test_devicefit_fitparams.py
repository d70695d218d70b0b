"""devicefit/fit_emulation.fit_choice against what llama.cpp's own `--fit` printed
(tests/data/devicefit_llama_fitparams.json, recorded by benchmarks/check_devicefit_fitparams.py with
llama-fit-params on two loopback RPC devices): the same flags for every case, or the case is in the
record's strict "xfail" list with what differs and why. And speed.hops() + 1 equal to the scheduler splits
llama.cpp logged for every recorded placement (the record's sched_splits)."""

import json
from pathlib import Path

import pytest

from moetools.devicefit import fit_emulation, upstream
from moetools.devicefit.core import model_facts
from moetools.devicefit.devices import Device, cpu_device
from moetools.devicefit.kv import KVSettings
from moetools.gguf import open_model
from tests import factory

RECORD = json.loads((Path(__file__).parent / "data" / "devicefit_llama_fitparams.json").read_text())
MIB = 1024 * 1024


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fitparams")
    cache = {}

    def get(name):
        if name not in cache:
            path = factory.shared_model(name) if name.endswith(".gguf") else factory.write_preset(folder, name)
            if path is None:
                pytest.skip(f"{name} is not in ../shared/models")
            with open_model(str(path)) as model:
                cache[name] = model_facts(model)
        return cache[name]
    return get


def choice_of(facts, entry):
    """fit_choice on the recorded case: each device's free memory as the RPC server reported it, its
    -fitt margin, llama-fit-params' defaults (flash attention on as passed, one sequence, the logits of
    the whole batch as llama.cpp's context reserves them)."""
    free = RECORD["reported_free_bytes"]
    devices = [Device(f"RPC0[127.0.0.1:{port}]", "rpc", free, 1e12) for port in RECORD["ports"][:len(entry["sizes_mib"])]]
    options = upstream.UpstreamOptions(kv=KVSettings(flash_attn=True, outputs=0), margin=0)
    ctx = entry["ctx"] or None  # -c 0 or no -c: the training context
    if entry["fitc"] is not None:  # -fitc after -c
        extra = {"n_ctx_min": entry["fitc"]}
    else:  # -c 0 forbids reducing it (common/arg.cpp); no -c: down to the default -fitc
        extra = {"n_ctx_min": None} if entry["ctx"] == 0 else {}
    return fit_emulation.fit_choice(facts, devices, cpu_device(64 << 30, 50e9, "test"), options, ctx,
                                    margins=[mib * MIB for mib in entry["fitt_mib"]], **extra)


def test_the_record_covers_enough_cases():
    assert RECORD["llama_cpp_commit"] == "0c1e57098"
    assert len(RECORD["cases"]) >= 8
    assert all(entry["exit"] == 0 and entry["printed"] for entry in RECORD["cases"])


@pytest.mark.parametrize("entry", RECORD["cases"], ids=[entry["name"] for entry in RECORD["cases"]])
def test_fit_choice_prints_what_llama_fit_params_printed(models, entry):
    got = choice_of(models(entry["model"]), entry).flags()
    xfail = RECORD.get("xfail", {}).get(entry["name"])
    if xfail:  # strict: only the named flag differs, and as recorded
        assert got != entry["printed"], f"{entry['name']} now matches: drop it from the xfail list"
        at = entry["printed"].index(xfail["flag"]) + 1
        assert got[:at] == entry["printed"][:at] and got[at + 1:] == entry["printed"][at + 1:]
        assert got[at] == xfail["device_fit"], xfail["why"]
        return
    assert got == entry["printed"]


def test_every_xfail_names_a_recorded_case():
    names = {entry["name"] for entry in RECORD["cases"]}
    assert set(RECORD.get("xfail", {})) <= names


# --- the pieces, by hand -------------------------------------------------------------------------

def test_layout_puts_the_partial_layers_last_in_each_range():
    # 9 blocks + output over two devices: device 0 layers 0-3 (2 whole, 2 partial, the first sending
    # gate and down to device 1), device 1 layers 4-9 (3 whole, then 7-9 partial; 9 is the output slot)
    slots = [(4, 2, "up"), (6, 3, "moe")]
    ngl, counts, entries = fit_emulation.layout(slots, ["CUDA1", "CPU"], 10)
    assert (ngl, counts) == (10, [4, 6])
    assert entries == [
        (r"blk\.2\.ffn_(gate|gate_up|down).*", "CUDA1"),
        (r"blk\.3\.ffn_(up|down|gate_up|gate)_(ch|)exps", "CPU"),
        (r"blk\.7\.ffn_(up|down|gate_up|gate)_(ch|)exps", "CPU"),
        (r"blk\.8\.ffn_(up|down|gate_up|gate)_(ch|)exps", "CPU"),
        (r"blk\.9\.ffn_(up|down|gate_up|gate)_(ch|)exps", "CPU"),
    ]
    # -ngl below all: the ranges end at the output, the first layers stay on the CPU
    assert fit_emulation.layout([(0, 0, "moe"), (3, 0, "moe")], ["CPU", "CPU"], 10)[:2] == (3, [0, 3])


def test_flags_as_fit_params_prints_them():
    choice = fit_emulation.FitChoice(ctx=4096, ngl=5, ts=[0, 5], overrides=[("a", "CPU"), ("b", "CPU")])
    assert choice.flags() == ["-c", "4096", "-ngl", "5", "-ts", "0,5", "-ot", "a=CPU,b=CPU"]
    assert fit_emulation.FitChoice(ctx=512, ngl=3, ts=[3, 0]).flags() == ["-c", "512", "-ngl", "3"]
    assert fit_emulation.FitChoice(ctx=512).flags() == ["-c", "512", "-ngl", "-1"]


def test_n_cpu_moe_only_for_the_leading_blocks_whole():
    moe = r"blk\.{}\.ffn_(up|down|gate_up|gate)_(ch|)exps"
    lead = fit_emulation.FitChoice(ctx=1, overrides=[(moe.format(i), "CPU") for i in range(3)])
    assert lead.n_cpu_moe == 3
    assert fit_emulation.FitChoice(ctx=1, overrides=[(moe.format(i), "CPU") for i in (4, 5)]).n_cpu_moe is None
    assert fit_emulation.FitChoice(ctx=1, overrides=[(r"blk\.0\.ffn_down.*", "CPU")]).n_cpu_moe is None


def test_the_choice_evaluates_as_a_user_placement_with_the_experts_of_the_last_layers_on_the_cpu(models):
    entry = next(e for e in RECORD["cases"] if e["name"] == "gpt-oss-120b on 16+20 GiB")
    facts = models(entry["model"])
    free = RECORD["reported_free_bytes"]
    devices = [Device(f"RPC0[127.0.0.1:{port}]", "rpc", free, 1e12) for port in RECORD["ports"]]
    options = upstream.UpstreamOptions(kv=KVSettings(flash_attn=True, outputs=0), margin=0)
    choice, plan = fit_emulation.fit_plan(facts, devices, cpu_device(64 << 30, 50e9, "test"), options, entry["ctx"],
                                          margins=[mib * MIB for mib in entry["fitt_mib"]])
    assert choice.flags() == entry["printed"] and plan.tok_s > 0
    layer_device = plan.placement.layer_device
    assert [layer_device.count(k) for k in (0, 1)] == [10, 27]
    on_cpu = sorted(b for b, homes in plan.placement.expert_device.items() if set(homes.values()) == {-1})
    assert on_cpu == list(range(21, 36))  # the last blocks of device 1's range (20 keeps its up matrix)
    assert plan.placement.expert_device[20]["up"] == 1 and plan.placement.expert_device[20]["down"] == -1
    assert plan.placement.expert_device[9]["up"] == 0 and plan.placement.expert_device[9]["down"] == 1
    for share, target in zip(plan.shares[:-1], (16000, 20000)):
        assert share.model_bytes + share.kv_bytes + share.compute_bytes <= target * MIB


# --- the scheduler's splits beside speed.hops() ---------------------------------------------------

# speed.hops() walks a block's expert matrices in graph order (gate, up, swiglu, down: ggml_swiglu_split's
# sources) and sends what follows the experts (weighting, sum, residual: no weights, pass 2's "expand gpu
# up") to the next block's device, as the scheduler splits them; hops + 1 = the splits llama.cpp logged.


@pytest.mark.parametrize("entry", RECORD["sched_splits"], ids=[entry["name"] for entry in RECORD["sched_splits"]])
def test_hops_beside_the_splits_llama_cpp_logged(models, entry):
    from moetools.devicefit import overrides, placement, speed

    facts = models(RECORD["splits_model"])
    devices = [Device(f"RPC0[127.0.0.1:{port}]", "rpc", 1 << 30, 1e12) for port in RECORD["ports"]]
    sources = [("-ot", entry["ot"])] if entry["ot"] else None
    homes = overrides.tensor_homes(overrides.resolve(sources, devices), facts.layers.tensors)[0] if sources else None
    chosen = placement.user_placement(facts.layers, 2, ngl=99, ts=[1, 1], sources=sources, homes=homes)
    assert sum(speed.hops(chosen, devices)) + 1 == entry["splits"]
