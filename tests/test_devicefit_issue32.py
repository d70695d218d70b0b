"""Issue 32: the planner tries what a user would try; the margin on unmeasured compute buffers;
mmap as llama.cpp does it."""

import json

from click.testing import CliRunner

from moetools.cli import cli

GIB = 1024**3
GLM_RPC = ["-fa", "off", "--rpc", "127.0.0.1:50152=2500M", "--rpc", "127.0.0.1:50153=2000M", "--ram", "64G",
           "--runtime", "llama"]


def run_json(*args, code=0):
    result = CliRunner().invoke(cli, ["device-fit", *map(str, args), "--json"], catch_exceptions=False)
    assert result.exit_code == code, result.output
    return json.loads(result.stdout)


def offloaded(doc):
    return [device for device in doc["devices"] if device["kind"] != "cpu" and (device["layers"] or device["output_layer"])]


def test_glm_air_on_two_small_rpc_devices_offloads_what_ngl_1_does(preset_model):
    """The reported case: the search offloaded nothing ('not even the output layer fits'), while -ngl 1
    fits by device-fit's own evaluation. The plan now tries -ngl 1, 2, ... (experts on the devices or on
    the CPU) and answers with the fastest that fits."""
    path = preset_model("glm-4.5-air")
    own = run_json(path, *GLM_RPC, "--ctx", "4096")
    ngl1 = run_json(path, *GLM_RPC, "--ctx", "4096", "-ngl", "1")
    assert ngl1["verdict"] == "fits" and offloaded(ngl1)
    assert own["verdict"] == "fits"
    assert offloaded(own), own["notes"]
    assert all(device["free_bytes"] >= 0 for device in own["devices"] if device["kind"] != "cpu")
    assert own["tok_s"] >= ngl1["tok_s"]
    assert not any("not even the output layer" in note for note in own["notes"])
    assert any("what a user would try" in note for note in own["notes"])
    args = own["launch"]["llama"]["args"]
    assert int(args[args.index("-ngl") + 1]) >= 1 and "--fit" in args
    # the flags it prints give the same plan when typed
    ngl = args[args.index("-ngl") + 1]
    extra = ["--n-cpu-moe", args[args.index("--n-cpu-moe") + 1]] if "--n-cpu-moe" in args else []
    typed = run_json(path, *GLM_RPC, "--ctx", "4096", "-ngl", ngl, *extra)
    assert typed["devices"] == own["devices"] and typed["tok_s"] == own["tok_s"]


def test_a_plan_that_already_fits_is_unchanged_by_the_fallback(preset_model):
    path = preset_model("glm-4.5-air")
    doc = run_json(path, "--vram", "24G,24G", "--ram", "64G", "--runtime", "llama", "--ctx", "4096")
    assert doc["verdict"] == "fits"
    assert not any("what a user would try" in note for note in doc["notes"])
    assert doc["placement"]["ngl"] == 48 and doc["placement"]["ts"] is not None


# --- the margin on unmeasured compute buffers -----------------------------------------------------

def test_measured_table_is_what_the_generator_writes():
    """moetools/arch/measured.json is benchmarks/gen_devicefit_measured.py's output over tests/data."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    written = subprocess.run([sys.executable, str(root / "benchmarks" / "gen_devicefit_measured.py")], capture_output=True,
                             text=True, check=True, cwd=root).stdout
    assert written == (root / "moetools" / "arch" / "measured.json").read_text()


def test_the_margin_rule_by_architecture_and_placement():
    from types import SimpleNamespace

    from moetools.arch.registry import measured_compute, profile
    from moetools.devicefit import upstream
    from moetools.devicefit.placement import CPU

    split, alone = SimpleNamespace(layer_device=[0, 0, 1, 1]), SimpleNamespace(layer_device=[0, 0, 0, 0])
    partial = SimpleNamespace(layer_device=[CPU, 0, 0, 0])
    margin = upstream.UNMEASURED_MARGIN_PCT

    def pct(arch, placement):
        return upstream.unmeasured_margin(SimpleNamespace(architecture=arch), placement)[0]

    assert pct("no-such-arch", alone) == margin  # nothing measured: every placement
    assert pct("deepseek2", alone) == 0 and pct("deepseek2", split) == margin and pct("deepseek2", partial) == margin
    assert pct("qwen3moe", split) == 0 and pct("qwen3moe", alone) == 0  # measured both ways
    # measured off on splits and not yet within 1% (tests/test_devicefit_splits_llama.py's strict xfails)
    assert profile("qwen3next").split_compute_off
    assert pct("qwen3next", split) == margin and pct("qwen3next", alone) == 0
    for arch in ("gemma4", "nemotron_h_moe"):  # measured on splits and within 1% since (devicefit_llama_splits.json)
        assert not profile(arch).split_compute_off and pct(arch, split) == 0
    assert measured_compute("deepseek2") == (True, False)
    assert all(measured_compute(arch)[1] for arch in ("qwen3moe", "kimi-k3", "deepseek4"))


def test_a_split_measured_off_gets_the_margin_in_json_ledger_and_free_bytes(preset_model):
    """qwen3next's split compute is still under llama.cpp's on a partial offload at full width
    (tests/test_devicefit_splits_llama.py's xfails): its splits carry the margin."""
    path = preset_model("qwen3-next-80b-a3b")
    doc = run_json(path, "--runtime", "llama", "--vram", "24G,24G", "--ram", "64G", "--ctx", "8192")
    assert doc["verdict"] == "fits"
    for device in doc["devices"]:
        assert device["compute_margin_pct"] == 15
        assert device["compute_margin_bytes"] == -(-device["compute_bytes"] * 15 // 100)
        used = sum(device[key] for key in ("compute_bytes", "compute_margin_bytes", "resident_bytes", "kv_bytes",
                                           "expert_bytes", "margin_bytes", "draft_bytes"))
        assert device["free_bytes"] == device["capacity_bytes"] - used
        if device["kind"] != "cpu":
            assert device["free_bytes"] >= 0
    assert any(note.startswith("unmeasured: +15%") for note in doc["notes"])
    # the table: a row and the caption
    from moetools.devicefit.render import llama_tables

    ledger = llama_tables(doc)[0]
    assert ledger.rows[3][0] == "unmeasured" and ledger.rows[3][1].startswith("+15% ")
    assert ledger.caption.startswith("unmeasured: +15%")


def test_one_device_and_measured_splits_are_unchanged(preset_model):
    """gemma4 on one GPU (every layer there) and qwen3moe split over two (measured both ways): no margin,
    no key, no row."""
    from moetools.devicefit.render import llama_tables

    for path, vram in ((preset_model("gemma-4-26b-a4b"), "32G"), (preset_model("qwen3-235b"), "24G,24G")):
        doc = run_json(path, "--runtime", "llama", "--vram", vram, "--ram", "512G", "--ctx", "8192")
        assert not any("compute_margin_pct" in device for device in doc["devices"])
        assert not any(note.startswith("unmeasured") for note in doc["notes"])
        assert all(row[0] != "unmeasured" for row in llama_tables(doc)[0].rows)


# --- mmap as llama.cpp 0c1e57098 does it -----------------------------------------------------------

def _file_ranges(path, on_cpu):
    """{shard: (first, end)} of the tensors `on_cpu(name)` selects, read from the GGUF header itself."""
    from moetools.gguf import open_model

    spans = {}
    with open_model(path) as model:
        for tensor in model.tensors:
            if on_cpu(tensor.name):
                first, end = spans.get(tensor.shard, (tensor.offset, tensor.offset + tensor.n_bytes))
                spans[tensor.shard] = (min(first, tensor.offset), max(end, tensor.offset + tensor.n_bytes))
    return spans


def test_cpu_only_span_is_the_whole_tensor_range_of_every_shard(tmp_path):
    from tests import factory

    path = factory.write_tiny(tmp_path, "qwen3moe", shards=2)
    doc = run_json(path, "--runtime", "llama", "--ram", "16G", "--ctx", "4096")
    cpu = doc["devices"][-1]
    assert cpu["kind"] == "cpu"
    spans = _file_ranges(path, lambda name: True)
    assert cpu["mmap_spans"] == [[shard, first, end] for shard, (first, end) in sorted(spans.items())]
    assert len(cpu["mmap_spans"]) == 2
    assert cpu["mmap_span_bytes"] == sum(end - first for first, end in spans.values())


def test_span_runs_from_the_first_to_the_last_cpu_tensor(tmp_path):
    """-ngl 3 offloads the last two blocks and the output layer: the span ends at the last tensor of
    the blocks left on the CPU (whatever offloaded tensors lie between)."""
    from moetools.gguf.model import tensor_block
    from tests import factory

    path = factory.write_tiny(tmp_path, "mixtral")
    doc = run_json(path, "--runtime", "llama", "--ram", "16G", "--vram", "8G", "--ctx", "4096", "-ngl", "3")
    cpu_layers = doc["placement"]["cpu_layers"]
    assert cpu_layers and doc["devices"][0]["output_layer"]

    def on_cpu(name):
        block = tensor_block(name)
        return name.startswith("token_embd") if block is None else block in cpu_layers

    spans = _file_ranges(path, on_cpu)
    assert doc["devices"][-1]["mmap_spans"] == [[shard, first, end] for shard, (first, end) in sorted(spans.items())]
    assert "mmap_span_bytes" not in doc["devices"][0]


def test_tied_embedding_is_mapped_once():
    from types import SimpleNamespace

    from moetools.devicefit import upstream
    from moetools.devicefit.layers import LayerBytes
    from moetools.devicefit.placement import CPU

    layers = LayerBytes(tensors=[("token_embd.weight", "input", None, None, 100, 0),
                                 ("blk.0.attn_q.weight", "dense", 0, None, 50, 0),
                                 ("token_embd.weight", "output", None, None, 100, 0)],
                        offsets={"token_embd.weight": (0, 1000), "blk.0.attn_q.weight": (0, 1100)})
    placement = SimpleNamespace(layer_device=[CPU, CPU], expert_device={})
    assert upstream.mapped_spans(layers, placement) == [(0, 1000, 1150)]
    placement = SimpleNamespace(layer_device=[0, 0], expert_device={})  # all offloaded: the embeddings alone
    assert upstream.mapped_spans(layers, placement) == [(0, 1000, 1100)]


def test_warns_when_the_mapped_file_exceeds_free_ram(preset_model):
    path = preset_model("glm-4.5-air")
    result = CliRunner().invoke(cli, ["device-fit", str(path), *GLM_RPC, "--ctx", "4096", "--json"])
    assert "exceeds free RAM (60.00 GiB: --ram less --os-reserve)" in result.stderr
    assert "MAP_POPULATE" in result.stderr
    result = CliRunner().invoke(cli, ["device-fit", str(path), "--runtime", "llama", "--vram", "24G", "--ram", "512G",
                                      "--ctx", "4096", "--json"])
    assert "exceeds free RAM" not in result.stderr


def test_no_mmap_in_a_checked_line_drops_the_warning_and_the_span(preset_model):
    path = str(preset_model("glm-4.5-air"))
    line = ["llama-server", "-m", path, "--rpc", "127.0.0.1:50152,127.0.0.1:50153", "-fa", "off", "-c", "4096", "-ngl", "1"]
    devices = ["--rpc", "127.0.0.1:50152=2500M", "--rpc", "127.0.0.1:50153=2000M", "--ram", "64G", "--json"]
    mapped = CliRunner().invoke(cli, ["device-fit", *devices, "--check", "--", *line])
    read = CliRunner().invoke(cli, ["device-fit", *devices, "--check", "--", *line, "--no-mmap"])
    assert "MAP_POPULATE" in mapped.stderr and "mmap_span_bytes" in json.loads(mapped.stdout)["devices"][-1]
    assert "MAP_POPULATE" not in read.stderr and "mmap_span_bytes" not in json.loads(read.stdout)["devices"][-1]
