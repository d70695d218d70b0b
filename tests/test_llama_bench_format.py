"""moetools/formats/llama_bench.py on real llama-bench outputs (tests/data/llama_bench: llama.cpp
0c1e57098 on the tiny real models; about.json holds the command lines) and on bad files written here."""

import json
import os
import shutil
from pathlib import Path

import pytest

from moetools.errors import FormatError
from moetools.formats import llama_bench as lb

DATA = Path(__file__).parent / "data" / "llama_bench"


def runs_of(name):
    runs, refusals = lb.read_runs(DATA / name)
    assert refusals == []
    return runs


def test_every_committed_output_reads_whole():
    about = json.loads((DATA / "about.json").read_text())
    counts = {name: len(runs_of(name)) for name in about["runs"]}
    # one test per (parameter combination, -p/-n/-pg): llama-bench's own count of its grid
    assert counts == {"qwen3moe_grid.json": 32, "qwen3moe_placement.json": 48, "deepseek_mixtral.json": 8,
                      "gptoss.jsonl": 4, "qwen3moe_rpc.json": 4}


def test_grid_fields_as_llama_bench_printed_them():
    runs = runs_of("qwen3moe_grid.json")
    first = runs[0]
    assert (first.model_filename, first.model_type, first.model_size, first.n_params) == (
        "/work/wt/shared/models/tiny-qwen3moe-Q8_0.gguf", "qwen3moe ?B Q8_0", 8154112, 7621376)
    assert (first.n_prompt, first.n_gen, first.n_depth, first.kind) == (64, 0, 0, "pp")
    assert (first.n_batch, first.n_ubatch, first.n_threads, first.n_gpu_layers) == (2048, 32, 1, 0)
    assert (first.flash_attn, first.type_k, first.type_v, first.split_mode, first.main_gpu) == (False, "f16", "f16", "layer", 0)
    assert (first.tensor_split, first.tensor_buft_overrides, first.n_cpu_moe, first.use_mmap) == ((), (), 0, None)
    assert (first.build_commit, first.cpu_info, first.gpu_info, first.backends) == ("0c1e570", "AMD EPYC", "", "CPU")
    assert first.avg_ts > 0 and first.stddev_ts >= 0 and len(first.samples_ts) == 2
    # the grid: -ngl 0,99 x -ub 32,128 x -t 1,2 x -fa 0,1, each once as pp and once as tg
    grid = {(r.n_gpu_layers, r.n_ubatch, r.n_threads, r.flash_attn, r.kind) for r in runs}
    assert len(grid) == 32
    assert {r.kind for r in runs} == {"pp", "tg"}
    assert all((r.n_prompt, r.n_gen) == ((64, 0) if r.kind == "pp" else (0, 16)) for r in runs)


def test_placement_runs_overrides_ncmoe_depth_and_pg():
    runs = runs_of("qwen3moe_placement.json")
    groups = {r.tensor_buft_overrides for r in runs}
    assert groups == {(("exps", "CPU"),),
                      ((r"blk\.[0-1]\.ffn_.*_exps", "CPU"), (r"blk\.2\.ffn_up_exps", "CPU"))}
    assert {r.n_cpu_moe for r in runs} == {0, 2}
    assert {r.n_depth for r in runs} == {0, 32}
    assert {r.type_k for r in runs} == {"f16", "q8_0"}
    assert {r.kind for r in runs} == {"pp", "tg", "pg"}
    pg = next(r for r in runs if r.kind == "pg")
    assert (pg.n_prompt, pg.n_gen) == (64, 16)


def test_placement_of_follows_llama_bench_order():
    runs = runs_of("qwen3moe_placement.json")
    run = next(r for r in runs if r.n_cpu_moe == 2 and len(r.tensor_buft_overrides) == 2 and r.kind == "pg" and r.n_depth == 32)
    placement = lb.placement_of(run)
    # llama-bench applies its -ot group first, then --n-cpu-moe's patterns (test::to_llama_mparams)
    assert placement.overrides == (("-ot", r"blk\.[0-1]\.ffn_.*_exps=CPU,blk\.2\.ffn_up_exps=CPU"), ("--n-cpu-moe", 2))
    assert (placement.ngl, placement.ts, placement.flash_attn, placement.context, placement.depth) == (99, (), True, 112, 32)
    assert lb.device_fit_args(placement) == [
        "-c", "112", "--depth", "32", "-ngl", "99", "-ot", r"blk\.[0-1]\.ffn_.*_exps=CPU,blk\.2\.ffn_up_exps=CPU", "--n-cpu-moe", "2",
        "-ub", "512", "-b", "2048", "-t", "2", "-ctk", run.type_k, "-ctv", "f16", "-fa", "on"]


def test_rpc_runs_split_and_rpc_buffer_type():
    runs = runs_of("qwen3moe_rpc.json")
    assert {r.backends for r in runs} == {"RPC"}
    assert runs[0].gpu_info == "127.0.0.1:50230, 127.0.0.1:50231"
    assert {r.tensor_split for r in runs} == {(1.0, 1.0)}
    assert runs[2].tensor_buft_overrides == ((r"blk\.0\.", "RPC0[127.0.0.1:50231]"),)
    placement = lb.placement_of(runs[2])
    assert placement.overrides == (("-ot", r"blk\.0\.=RPC0[127.0.0.1:50231]"),)
    assert lb.device_fit_args(placement)[:8] == ["-c", "64", "--depth", "0", "-ngl", "99", "-ts", "1,1"]


def test_jsonl_and_two_models():
    assert [r.n_ubatch for r in runs_of("gptoss.jsonl")] == [32, 32, 128, 128]
    models = {os.path.basename(r.model_filename) for r in runs_of("deepseek_mixtral.json")}
    assert models == {"tiny-deepseekv3-Q8_0.gguf", "tiny-mixtral-Q8_0.gguf"}


def test_device_fit_accepts_the_emitted_flags(tmp_path):
    """The flags device_fit_args gives are ones device-fit's command line takes (a real subprocess)."""
    import subprocess
    import sys

    from moetools import synth

    model = synth.write_model(synth.tiny("qwen3moe", n_layer=4, n_embd=256, n_ff_exp=256, n_expert=16, vocab=1024, ctx=2048),
                              str(tmp_path / "m.gguf"), seed=1)[0]
    run = runs_of("qwen3moe_rpc.json")[2]
    args = lb.device_fit_args(lb.placement_of(run))
    done = subprocess.run([sys.executable, "-m", "moetools", "device-fit", model, "--runtime", "llama", "--margin", "0",
                           "--rpc", "127.0.0.1:50230=100M", "--rpc", "127.0.0.1:50231=100M", "--ram", "16G", *args, "--json"],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["context"] == 64 and doc["tok_s"] > 0


def test_resolve_model(tmp_path):
    run = runs_of("qwen3moe_grid.json")[0]
    elsewhere = tmp_path / "moved"
    elsewhere.mkdir()
    missing = run.__class__(**{**run.__dict__, "model_filename": str(tmp_path / "gone" / "tiny-qwen3moe-Q8_0.gguf")})
    assert lb.resolve_model(missing, [str(elsewhere)]) is None
    shutil.copyfile(Path(__file__).parent / "data" / "llama_bench" / "about.json", elsewhere / "tiny-qwen3moe-Q8_0.gguf")
    assert lb.resolve_model(missing, [str(tmp_path), str(elsewhere)]) == str(elsewhere / "tiny-qwen3moe-Q8_0.gguf")
    here = run.__class__(**{**run.__dict__, "model_filename": str(elsewhere / "tiny-qwen3moe-Q8_0.gguf")})
    assert lb.resolve_model(here, []) == here.model_filename


def one_run(**changes):
    doc = json.loads((DATA / "qwen3moe_grid.json").read_text())[0]
    doc.update(changes)
    return doc


def write(tmp_path, doc, name="bench.json"):
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


@pytest.mark.parametrize("content, message", [
    ("| model | size |\n|---|---|\n", "not JSON or JSON lines"),
    ("", "not JSON: the file is empty"),
    ("[]", "no runs"),
    ({"slots": [1, 2], "hit": {}}, "not llama-bench output"),
    ([{"name": "x", "tok_s": 3}], "not llama-bench output"),
    ([1, 2], "not llama-bench output"),
])
def test_refused_files(tmp_path, content, message):
    path = write(tmp_path, content)
    with pytest.raises(FormatError) as err:
        lb.read_runs(path)
    assert str(path) in str(err.value) and message in str(err.value)


def test_missing_file_names_it(tmp_path):
    with pytest.raises(FormatError, match="nope.json: cannot read"):
        lb.read_runs(tmp_path / "nope.json")


@pytest.mark.parametrize("change, reason", [
    ({"avg_ts": -1.0}, "field 'avg_ts' is -1.0, below 0"),
    ({"avg_ts": "fast"}, "field 'avg_ts' has the wrong type (str)"),
    ({"split_mode": "diagonal"}, "field 'split_mode' is 'diagonal'"),
    ({"n_ubatch": 0}, "field 'n_ubatch' is 0, below 1"),
    ({"n_prompt": True}, "field 'n_prompt' has the wrong type (bool)"),
    ({"flash_attn": 7}, "field 'flash_attn': 7 is not -1, 0, 1, on, off or auto"),
    ({"tensor_buft_overrides": "exps"}, "field 'tensor_buft_overrides': 'exps' is not PATTERN=BUFFER_TYPE"),
    ({"tensor_split": "1.00/x"}, "field 'tensor_split'"),
    ({"n_prompt": 0, "n_gen": 0}, "n_prompt and n_gen are both 0"),
])
def test_a_bad_run_is_refused_the_others_kept(tmp_path, change, reason):
    path = write(tmp_path, [one_run(), one_run(**change), one_run(n_prompt=0, n_gen=16)])
    runs, refusals = lb.read_runs(path)
    assert [r.index for r in runs] == [0, 2] and [r.kind for r in runs] == ["pp", "tg"]
    assert len(refusals) == 1 and refusals[0][0] == 1 and reason in refusals[0][1]
    # alone, the same run leaves nothing: the file is refused, naming the run and the field
    alone = write(tmp_path, [one_run(**change)], "alone.json")
    with pytest.raises(FormatError, match="no run could be read; run 0: ") as err:
        lb.read_runs(alone)
    assert reason in str(err.value)


@pytest.mark.parametrize("value, expected", [(-1, None), (0, False), (1, True), (True, True), ("off", False), ("auto", None)])
def test_flash_attn_spellings(tmp_path, value, expected):
    runs, _ = lb.read_runs(write(tmp_path, [one_run(flash_attn=value)]))
    assert runs[0].flash_attn is expected


def test_older_fields_and_single_object(tmp_path):
    """An older llama-bench printed use_mmap and no n_cpu_moe/n_depth; one jsonl line is one object."""
    doc = one_run(use_mmap=False)
    for key in ("n_cpu_moe", "n_depth", "load_mode"):
        doc.pop(key)
    runs, _ = lb.read_runs(write(tmp_path, doc))
    assert (runs[0].n_cpu_moe, runs[0].n_depth, runs[0].use_mmap) == (0, 0, False)
    runs, _ = lb.read_runs(write(tmp_path, [one_run(load_mode="mmap+mlock")]))
    assert runs[0].use_mmap is True
