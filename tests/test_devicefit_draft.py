"""device-fit --draft: a speculative-decoding draft model planned beside the target (--runtime llama)."""

import json
import struct

import pytest
from click.testing import CliRunner

from moetools import synth
from tests import factory
from moetools.cli import cli
from moetools.devicefit import draft as draftmod
from tests import devicefit_llama_case as case

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("draft")
    target = synth.write_model(case.fixture_spec(), folder / "target.gguf", sparse=True)[0]
    same = synth.write_model(synth.tiny("dense", n_layer=4, n_embd=256, vocab=2048, ctx=8192), folder / "draft.gguf", sparse=True)[0]
    other = synth.write_model(synth.tiny("dense", n_layer=4, n_embd=256, vocab=4096, ctx=8192), folder / "other.gguf", sparse=True)[0]
    return {"target": str(target), "draft": str(same), "other": str(other)}


def run(*args):
    return CliRunner().invoke(cli, ["device-fit", *map(str, args)], catch_exceptions=False)


def plan(models, *extra):
    args = factory.as_measured(case.device_fit_args(models["target"]))  # with and without a draft at one -ub
    result = run(*args, "--json", *extra)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_the_draft_takes_its_share_of_every_device(models):
    alone = plan(models)
    doc = plan(models, "--draft", models["draft"])
    draft_devices = {device["name"]: device for device in doc["draft"]["devices"]}
    for device in doc["devices"]:
        mine = draft_devices[device["name"]]
        assert device["draft_bytes"] == mine["resident_bytes"] + mine["expert_bytes"] + mine["kv_bytes"] + mine["compute_bytes"]
        used = sum(device[key] for key in ("resident_bytes", "expert_bytes", "kv_bytes", "compute_bytes", "margin_bytes", "draft_bytes"))
        assert device["free_bytes"] == device["capacity_bytes"] - used
    rpc = [device for device in doc["draft"]["devices"] if device["name"] != "CPU"]
    # 4 draft layers split by the target's -ts, their KV with them (f16, 4096 cells)
    assert sum(len(range(int(d["layers"].split("-")[0]), int(d["layers"].split("-")[-1]) + 1)) for d in rpc) == 4
    assert all(device["kv_bytes"] > 0 and device["compute_bytes"] > 0 for device in rpc)
    # the target gives way: fewer of its bytes stay on the RPC devices than without a draft
    on_rpc = lambda d: sum(x["resident_bytes"] + x["expert_bytes"] for x in d["devices"] if x["kind"] == "rpc")  # noqa: E731
    assert on_rpc(doc) < on_rpc(alone)
    args = doc["launch"]["llama"]["args"]
    position = args.index("-md")
    assert args[position:position + 10] == ["-md", models["draft"], "-ngld", "all", "-ctkd", "f16", "-ctvd", "f16",
                                            "--spec-type", "draft-simple"]


def test_draft_cache_types_and_layers_follow_their_own_flags(models):
    base = plan(models, "--draft", models["draft"])
    q8 = plan(models, "--draft", models["draft"], "-ctkd", "q8_0", "-ctvd", "q8_0")
    kv = lambda d: sum(x["kv_bytes"] for x in d["draft"]["devices"])  # noqa: E731
    assert kv(q8) < kv(base) and q8["launch"]["llama"]["args"][-6:-2] == ["-ctvd", "q8_0", "--spec-type", "draft-simple"]
    cpu_only = plan(models, "--draft", models["draft"], "-ngld", "0")
    homes = {d["name"]: d for d in cpu_only["draft"]["devices"]}
    assert homes["CPU"]["layers"] == "0-3" and homes["CPU"]["kv_bytes"] > 0
    assert all(d["kv_bytes"] == 0 for name, d in homes.items() if name != "CPU")


def test_a_draft_with_another_vocabulary_is_refused(models):
    result = run(*case.device_fit_args(models["target"]), "--draft", models["other"])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "4096 tokens, gpt2" in lines[0] and "2048 tokens, gpt2" in lines[0]


def test_draft_needs_the_llama_runtime(models):
    result = run(models["target"], "--vram", "24G", "--draft", models["draft"], "--runtime", "fork")
    assert result.exit_code == 2 and "--runtime llama" in result.output


def test_negative_draft_ngl_is_refused(models):
    result = run(*case.device_fit_args(models["target"]), "--draft", models["draft"], "-ngld", "-1")
    assert result.exit_code == 2 and "--draft-ngl" in result.output


def vocab(**values):
    base = {"kind": "gpt2", "size": 10, "add_bos": False, "bos": 1, "add_eos": False, "eos": 2,
            "tokens": [f"t{i}" for i in range(10)]}
    return draftmod.Vocab(**(base | values))


@pytest.mark.parametrize("changes, reason", [
    ({}, ""),
    ({"kind": "llama"}, "another tokenizer model"),
    ({"size": 139, "tokens": [f"t{i}" for i in range(139)]}, "more than 128"),
    ({"size": 138, "tokens": [f"t{i}" for i in range(138)]}, ""),
    ({"tokens": [f"t{i}" for i in range(5)] + ["x"] + [f"t{i}" for i in range(6, 10)]}, "token 5 differs"),
    ({"tokens": ["x"] + [f"t{i}" for i in range(1, 10)]}, ""),  # ids below 5 are not compared
    ({"add_bos": True, "bos": 1}, "adds a BOS"),
    ({"add_eos": True}, "adds a EOS"),
    ({"bos": 7}, ""),  # BOS not added: its id does not matter
])
@pytest.mark.parametrize("stored", [False, True], ids=["texts", "stored-bytes"])
def test_vocabulary_compatibility_is_llama_cpps(changes, reason, stored):
    target, draft = vocab(), vocab(**changes)
    if stored:  # the token arrays as vocab_of(decode=True) reads them from a file: bytes, decoded on a mismatch
        target.tokens, draft.tokens = stored_tokens(target.tokens), stored_tokens(draft.tokens)
    got = draftmod.incompatibility(target, draft)
    assert (reason in got) if reason else got == ""


def stored_tokens(texts):
    data = b"".join(struct.pack("<Q", len(text.encode())) + text.encode() for text in texts)
    return draftmod._Encoded(data, len(texts))


@pytest.mark.parametrize("tokens", [
    ["a"] * 3,  # shorter than the ids never compared
    [f"t{i}" for i in range(5)] + ["\u00e9t5"] + [f"t{i}" for i in range(6, 12)],  # longer, differing at 5
    [f"t{i}" for i in range(9)] + ["t9x"],  # same count, the last text one byte longer
])
def test_stored_bytes_and_texts_give_the_same_answer(tokens):
    target, draft = vocab(), vocab(tokens=tokens, size=len(tokens))
    texts = draftmod.incompatibility(target, draft)
    target.tokens, draft.tokens = stored_tokens(target.tokens), stored_tokens(tokens)
    assert draftmod.incompatibility(target, draft) == texts


def test_a_real_draft_vocabulary_is_compared_by_its_stored_bytes(models):
    from moetools.gguf import open_model

    with open_model(models["target"]) as target, open_model(models["draft"]) as draft:
        ours, theirs = draftmod.vocab_of(target, decode=True), draftmod.vocab_of(draft, decode=True)
    assert isinstance(ours.tokens, draftmod._Encoded) and len(ours.tokens) == ours.size == 2048
    assert draftmod.incompatibility(ours, theirs) == ""
    assert draftmod._texts(ours.tokens)[:3] == ["tok0", "tok1", "tok2"]


def test_added_bos_must_be_the_same_token():
    assert "BOS token 1 vs 3" in draftmod.incompatibility(vocab(add_bos=True), vocab(add_bos=True, bos=3))


def test_the_table_shows_the_draft_column(models):
    from moetools.devicefit.render import llama_tables

    ledger = llama_tables(plan(models, "--draft", models["draft"]))[0]
    labels = [row[0] for row in ledger.rows]
    position = labels.index("draft")
    assert labels[position + 1] == "free" and all(cell.endswith("MiB") for cell in ledger.rows[position][1:])
    assert "draft" not in [row[0] for row in llama_tables(plan(models))[0].rows]


@pytest.mark.parametrize("extra,message", [
    (["-ctkd", "q4_0", "-ctvd", "q4_0", "--no-flash-attn"], "a quantized V cache (--draft-ctv q4_0) needs flash attention"),
    (["-ctkd", "q5_1", "-ctvd", "f16"], None),
])
def test_draft_cache_types_llama_cpp_refuses_are_one_line_exit_2(models, extra, message):
    """The draft context's cache is checked as the target's (draft.check_draft_cache, kv.check_settings):
    what llama.cpp refuses for it is exit 2 naming the draft flag; what it takes plans."""
    result = run(*case.device_fit_args(models["target"]), "--draft", models["draft"], *extra)
    if message is None:
        assert result.exit_code in (0, 1), result.output
        return
    assert result.exit_code == 2 and message in result.stderr, result.output
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_footprint_asked_again_is_the_one_computed_afresh(models):
    """draft_footprint is memoised on the draft (every round and probe of a plan asks again): what it
    returns equals the footprint computed without the memo, for each devices, -ts, context and
    with_compute asked, and a second ask returns the first answer."""
    from moetools.devicefit import core, placement, upstream
    from moetools.devicefit.devices import Device
    from moetools.devicefit.kv import KVSettings
    from moetools.gguf import open_model

    with open_model(models["draft"]) as model:
        facts = core.model_facts(model)
    draft = draftmod.Draft(facts, models["draft"], draftmod.draft_kv(KVSettings(), "f16", "q8_0"))
    cpu = Device("CPU", "cpu", 64 << 30, 80e9)
    target = placement.user_placement(facts.layers, 2, ts=[3, 1], capacities=[8 << 30, 8 << 30])
    for capacities in ([8 << 30, 8 << 30], [8 << 30, 2 << 30]):
        devices = [Device(f"RPC{index}", "rpc", size, 400e9) for index, size in enumerate(capacities)]
        for chosen in (None, target):
            for ctx in (4096, 8192):
                for with_compute in (False, True):
                    first = upstream.draft_footprint(draft, devices, cpu, chosen, ctx, with_compute)
                    ts = chosen.ts if chosen is not None else None
                    fresh = upstream._draft_footprint(draft, devices, cpu, None, ts, ctx, with_compute)
                    assert first == fresh, (capacities, chosen, ctx, with_compute)
                    assert upstream.draft_footprint(draft, devices, cpu, chosen, ctx, with_compute) is first
    assert len(draft._footprints) == 16
