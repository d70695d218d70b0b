"""device-fit's compute buffer: the ggml-alloc replay against llama.cpp's own figures (committed test
data measured with tests/llama_probe/probe.cpp at llama.cpp 0c1e57098), and the allocator's rules."""

import json
from pathlib import Path

import pytest

from moetools.devicefit import compute, core, kv
from moetools.devicefit.compute import Graph, _Blocks
from moetools.devicefit.kv import KVSettings
from moetools.gguf import open_model

DATA = json.loads((Path(__file__).parent / "data" / "devicefit_llama_compute.json").read_text())
# graphs replayed tensor for tensor: equal to llama.cpp's logged figure
EXACT = ("deepseek-v3", "gpt-oss-120b", "kimi-k2", "llama3-8b", "qwen3-235b")
# gated delta net hybrids (the delta net op by op, the gated query's cont): equal too, and their
# KV cache and recurrent state are checked as well
HYBRID = ("qwen3-next-80b-a3b", "qwen3.5-35b-a3b")


def shapes(path):
    with open_model(path) as model:
        shape = kv.kv_shape(model)
        return compute.graph_shape(model, shape), shape


def settings_of(case):
    return KVSettings(ubatch=case["ubatch"], batch=case["batch"], flash_attn=case["flash_attn"], n_seq=case["parallel"],
                      unified=case["kv_unified"], ctk=case["ctk"], ctv=case["ctv"])


def test_every_measured_preset_is_checked():
    assert {case["preset"] for case in DATA["cases"]} == set(EXACT + HYBRID)


@pytest.mark.parametrize("preset", EXACT)
def test_compute_buffer_equals_llama_cpp(preset_model, preset):
    """Every measured configuration (context 4k-64k, ubatch 128-2048, flash attention on and off,
    parallel, unified, q8_0 caches) to the logged 0.01 MiB; the issue asks for 10%."""
    graph, shape = shapes(preset_model(preset))
    cases = [case for case in DATA["cases"] if case["preset"] == preset]
    assert len(cases) >= 20
    for case in cases:
        ours = compute.compute_buffers(graph, shape, case["ctx"], settings_of(case)).device_bytes / 2**20
        assert abs(ours - case["compute_mib"]) < 0.006, case


@pytest.mark.parametrize("preset", HYBRID)
def test_hybrid_compute_and_state_match_llama_cpp(preset_model, preset):
    """Gated delta net hybrids: the compute buffer, the KV cache and the recurrent state equal to
    llama.cpp's to the logged 0.01 MiB (the compute was within 2.6% while the delta net was replayed
    by its main tensors only, 5.3% over with the server's output rows)."""
    graph, shape = shapes(preset_model(preset))
    cases = [case for case in DATA["cases"] if case["preset"] == preset]
    assert len(cases) >= 20
    for case in cases:
        settings = settings_of(case)
        ours = compute.compute_buffers(graph, shape, case["ctx"], settings).device_bytes / 2**20
        assert abs(ours - case["compute_mib"]) < 0.006, case
        caches = kv.kv_caches(shape, case["ctx"], settings)
        attention = [[c.cells, round(c.k_bytes / 2**20, 2), round(c.v_bytes / 2**20, 2)] for c in caches if c.kind != "recurrent"]
        state = [[c.cells, round(c.r_bytes / 2**20, 2), round(c.s_bytes / 2**20, 2)] for c in caches if c.kind == "recurrent"]
        assert attention == case["kv_mib"] and state == case["state_mib"], case


@pytest.mark.parametrize("preset", EXACT + ("qwen3.5-35b-a3b",))
def test_compute_buffer_with_llama_servers_outputs(preset_model, preset):
    """llama-server's target context outputs one row per sequence (and per drafted token with a
    speculative type), not every token of the batch: its logits and the last layer's rows shrink
    (gpt-oss-120b at ubatch 512: 97 MiB instead of 414). Checked against llama.cpp with n_outputs_max
    set as the server sets it (the gated delta net hybrid too: its layers then set the peak)."""
    graph, shape = shapes(preset_model(preset))
    cases = [case for case in DATA["server_cases"] if case["preset"] == preset]
    assert len(cases) >= 7
    for case in cases:
        settings = settings_of(case)
        settings.outputs = case["outputs"]
        ours = compute.compute_buffers(graph, shape, case["ctx"], settings)
        assert abs(ours.device_bytes / 2**20 - case["compute_mib"]) < 0.006, case
        assert ours.logits_bytes == graph.n_vocab * case["outputs"] * 4


def test_kimi_linear_kda_equals_llama_cpp(tmp_path):
    """kimi-linear (KDA layers op by op, NoPE MLA, sigmoid-routed MoE with normalised weights) on the
    fixture factory's layout: KV, recurrent state and compute equal to llama.cpp's over 4k-64k, ubatch
    128-2048, flash attention on and off, -np 1, 2 (unified) and 4."""
    from moetools import synth

    cases = DATA["kda_cases"]
    assert {c["ctx"] for c in cases} >= {4096, 16384, 65536} and {c["parallel"] for c in cases} >= {1, 4}
    spec = synth.tiny("kimi-linear", **cases[0]["params"])
    path = synth.write_model(spec, tmp_path / "kimi-linear.gguf", sparse=True)[0]
    graph, shape = shapes(path)
    assert shape.recurrent_kind == "kda" and not graph.rope
    for case in cases:
        settings = settings_of(case)
        caches = kv.kv_caches(shape, case["ctx"], settings)
        attention = [[c.cells, c.layers, round(c.k_bytes / 2**20, 2), round(c.v_bytes / 2**20, 2)] for c in caches if c.kind != "recurrent"]
        state = [[c.cells, round(c.r_bytes / 2**20, 2), round(c.s_bytes / 2**20, 2)] for c in caches if c.kind == "recurrent"]
        assert attention == case["kv_mib"] and state == case["state_mib"], case
        ours = compute.compute_buffers(graph, shape, case["ctx"], settings).device_bytes / 2**20
        assert abs(ours - case["compute_mib"]) < 0.006, (case, ours)


def test_llama_servers_output_rows():
    assert kv.server_outputs(2048, 1) == 1 and kv.server_outputs(2048, 4) == 4
    assert kv.server_outputs(2048, 4, kv.SERVER_DRAFT_MAX) == 16  # -np 4 with a draft: 1 + 3 rows each
    assert kv.server_outputs(8, 4, 3) == 8  # never more than the batch


def test_data_spans_the_checked_grid():
    cases = DATA["cases"]
    assert DATA["llama_cpp_commit"] == "0c1e57098"
    assert {c["ctx"] for c in cases} >= {4096, 16384, 65536} and {c["ubatch"] for c in cases} >= {128, 512, 2048}
    assert {c["flash_attn"] for c in cases} == {True, False}


def test_layers_and_output_split_the_buffer(preset_model):
    graph, shape = shapes(preset_model("qwen3-235b"))
    settings = KVSettings()
    whole = compute.compute_buffers(graph, shape, 8192, settings)
    assert whole.logits_bytes == 151936 * 512 * 4 and whole.device_bytes > whole.logits_bytes
    no_head = compute.compute_buffers(graph, shape, 8192, settings, output=False)
    assert no_head.device_bytes < whole.logits_bytes  # FA on: the logits are the peak
    some = compute.compute_buffers(graph, shape, 8192, KVSettings(flash_attn=False), layers=range(10), output=False)
    assert 0 < some.device_bytes <= compute.compute_buffers(graph, shape, 8192, KVSettings(flash_attn=False)).device_bytes


def test_i18_interface(preset_model):
    path = preset_model("deepseek-v3")
    with open_model(path) as model:
        facts = core.model_facts(model)
    gpu = compute.compute_bytes(facts, range(61), True, KVSettings(), 16384, "gpu")
    cpu = compute.compute_bytes(facts, range(61), True, KVSettings(), 16384, "cpu")
    assert gpu >= cpu > 0 and gpu % 128 == 0
    assert compute.host_bytes(facts, KVSettings(), 16384) == 7168 * 512 * 4


def test_reserve_tokens_round_to_sequences():
    assert compute.reserve_tokens(KVSettings(ubatch=300, n_seq=4), 8192) == (300, 4)
    assert compute.reserve_tokens(KVSettings(ubatch=301, n_seq=4), 8192) == (304, 4)
    assert compute.reserve_tokens(KVSettings(n_seq=4, unified=True), 8192) == (512, 1)
    assert compute.reserve_tokens(KVSettings(), 100) == (100, 1)  # n_ubatch = min(ubatch, batch, unpadded ctx)


def test_output_rows_are_the_tokens_before_rounding(preset_model):
    """llama_context::sched_reserve outputs min(n_ubatch, n_outputs_max) rows; graph_reserve rounds only
    the tokens up to the sequences: 513 tokens but 512 logits rows at -np 3 (measured: Qwen3-235B at
    ubatch 512, -np 3 reserves 312.77 MiB, one row less than 513 would give)."""
    assert compute.output_rows(KVSettings(n_seq=3), 8192) == 512
    assert compute.reserve_tokens(KVSettings(n_seq=3), 8192) == (513, 3)
    assert compute.output_rows(KVSettings(n_seq=3, outputs=6), 8192) == 6
    assert compute.output_rows(KVSettings(n_seq=3), 100) == 100  # n_ubatch = min(ubatch, batch, ctx)
    graph, shape = shapes(preset_model("qwen3-235b"))
    buffers = compute.compute_buffers(graph, shape, 8192, KVSettings(n_seq=3))
    assert buffers.tokens == 513 and buffers.logits_bytes == graph.n_vocab * 512 * 4
    assert round(buffers.device_bytes / 2**20, 2) == 312.77


# --- the allocator replay ---------------------------------------------------------------------

def test_blocks_best_fit_and_merge():
    blocks = _Blocks(32)
    a, b, c = blocks.alloc(100), blocks.alloc(64), blocks.alloc(200)
    assert (a, b, c) == (0, 128, 192) and blocks.max_size == 416
    blocks.release(a, 100)
    blocks.release(c, 200)  # merges into the unbounded tail
    assert blocks.alloc(96) == 0  # best fit: the freed 128-byte hole, not the tail
    blocks.release(0, 96)
    blocks.release(b, 64)  # both neighbours merge: one free block from 0
    assert blocks.free == [[0, compute._FREE_END]]


def test_graph_frees_after_last_use_and_reuses_in_place():
    g = Graph()
    w = g.external()
    x = g.input(1000)
    y = g.op(4000, w, x)
    z = g.op(4000, y, inplace=(0,))  # y's only consumer: takes y's memory
    out = g.op(2000, w, z)
    g.expand(out)
    assert g.peak() == 1024 + 4000 + 2016
    g2 = Graph()
    x2 = g2.input(1000)
    y2 = g2.op(4000, x2)
    keep = g2.op(8, y2)  # a second consumer of y2: no in-place reuse
    z2 = g2.op(4000, y2, inplace=(0,))
    g2.expand(z2)
    g2.expand(keep)
    assert g2.peak() == 1024 + 4000 + 4000  # `keep` lands in the input's freed block


def test_views_keep_their_source_alive():
    g = Graph()
    x = g.input(64)
    big = g.op(6400, x)
    view = g.view(big)
    small = g.op(64, x)
    last = g.op(64, view, small)
    g.expand(last)
    # big stays allocated until its view's consumer runs, so `small` cannot take big's place (that would
    # peak at 6464); `last` then takes the input's freed block
    assert g.peak() == 64 + 6400 + 64


def _graph_with_a_leaf_left_out():
    """A graph whose leaf list lacks one leaf (ggml-alloc then allocates it at its first use)."""
    g = Graph()
    x = g.input(640)
    first = g.op(2048, x)
    late = g.input(96)  # fed in later, and not in the leafs handed to the replay
    late.is_input = False
    mixed = g.op(512, first, late)
    g.expand(mixed)
    assert late in g.leafs
    return g, [leaf for leaf in g.leafs if leaf is not late]


def test_a_leaf_outside_the_leaf_list_is_allocated_at_its_first_use_by_both_replays():
    g, leafs = _graph_with_a_leaf_left_out()
    blocks = compute._Blocks(compute.CPU_ALIGNMENT)
    g.replay(leafs, g.nodes, lambda tensor: blocks)
    plain = blocks.max_size
    g, leafs = _graph_with_a_leaf_left_out()
    program = compute.Program(leafs, g.nodes)
    # the input's 640 bytes, freed after `first`, take the late leaf and `mixed` (96 + 512 fit in them)
    assert program.peaks({}, [compute.CPU_ALIGNMENT]) == [plain] and plain == 640 + 2048
    assert program.steps == [(1, (), (0,)), (2, (), ()), (3, (), (1, 2))]  # the late leaf's claim is a step


K3 = json.loads((Path(__file__).parent / "data" / "devicefit_llama_k3.json").read_text())


def test_kimi_k3_compute_within_10_percent_of_llama_cpp(preset_model):
    """kimi-k3 (KDA and MLA layers, latent MoE of 896 experts, situ activation, the attention-residual
    checkpoint stack) against llama-fit-params' Host compute (whole MiB) at 4k-64k, ubatch 128-2048,
    flash attention on and off: equal to its rounding (the KDA layer op by op, the NoPE MLA, the
    residual-first adds and no expansion at a layer's end; the ratios were 0.92-1.10 before)."""
    assert K3["llama_cpp_commit"] == "0c1e57098" and len(K3["cases"]) >= 6
    graph, shape = shapes(preset_model("kimi-k3"))
    assert graph.attn_res_block == 8 and graph.situ
    for case in K3["cases"]:
        ours = compute.compute_buffers(graph, shape, case["ctx"], settings_of(case)).device_bytes / 2**20
        assert abs(ours - case["host_compute_mib"]) <= 0.5, (case, ours)
