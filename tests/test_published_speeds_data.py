"""The survey of published llama.cpp speeds for MoE models with experts on the CPU
(tests/data/devicefit_published_speeds.json) keeps its schema: every point names a URL source, quotes the
text holding its figures, has positive tok/s and typed hardware fields, and the set is large and varied enough
to calibrate device-fit's decode/prompt speed model."""

import json
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data" / "devicefit_published_speeds.json"
DOC = json.loads(DATA.read_text(encoding="utf-8"))
POINTS = DOC["points"]

RUNTIMES = {"llama.cpp", "ik_llama.cpp"}
TOOLS = {"llama-bench", "llama-sweep-bench", "llama-server", "llama-cli", "other"}
FLAG_KEYS = {"ngl", "n_cpu_moe", "ot", "cpu_moe", "ub", "b", "t", "fa", "ctk", "ctv", "ctx", "other"}


def is_num(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def opt(value, kind):
    return value is None or kind(value)


def opt_int(value):
    return value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0)


def opt_str(value):
    return value is None or isinstance(value, str)


def test_document_shape():
    assert set(DOC) == {"about", "points"}
    assert isinstance(DOC["about"], str) and len(DOC["about"]) > 100
    assert isinstance(POINTS, list)


def test_enough_points_with_spread():
    assert len(POINTS) >= 40
    assert sum(1 for p in POINTS if p["pp"] is not None) >= 18
    assert len({p["source"] for p in POINTS}) >= 20
    assert sum(1 for p in POINTS if p["runtime"] == "llama.cpp") >= 32
    assert sum(1 for p in POINTS if p["tool"] == "llama-bench") >= 2
    assert any(len(p["gpus"]) >= 2 for p in POINTS)
    assert any(p["cpu"]["sockets"] and p["cpu"]["sockets"] >= 2 for p in POINTS)


def test_ids_unique():
    ids = [p["id"] for p in POINTS]
    assert all(isinstance(i, str) and i for i in ids)
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("point", POINTS, ids=[p["id"] for p in POINTS])
def test_point_schema(point):
    assert set(point) == {"id", "source", "quote", "date", "runtime", "build", "tool", "model", "gpus", "cpu",
                          "ram", "pcie", "flags", "tg", "pp", "assumed", "notes"}
    assert isinstance(point["source"], str) and point["source"].startswith(("https://", "http://"))
    assert isinstance(point["quote"], str) and point["quote"].strip()
    assert point["date"] is None or (isinstance(point["date"], str) and len(point["date"]) == 7
                                     and point["date"][4] == "-")
    assert point["runtime"] in RUNTIMES
    assert opt_str(point["build"])
    assert point["tool"] in TOOLS

    model = point["model"]
    assert set(model) == {"name", "arch", "total_params_b", "active_params_b", "quant", "file_gib", "repo"}
    assert isinstance(model["name"], str) and model["name"]
    assert isinstance(model["arch"], str) and model["arch"]
    for key in ("total_params_b", "active_params_b", "file_gib"):
        assert opt(model[key], is_num) and (model[key] is None or model[key] > 0)
    if model["total_params_b"] and model["active_params_b"]:
        assert model["active_params_b"] < model["total_params_b"]
    assert opt_str(model["quant"]) and opt_str(model["repo"])

    assert isinstance(point["gpus"], list) and point["gpus"]
    for gpu in point["gpus"]:
        assert set(gpu) == {"name", "vram_gib"}
        assert isinstance(gpu["name"], str) and gpu["name"]
        assert is_num(gpu["vram_gib"]) and gpu["vram_gib"] > 0

    cpu = point["cpu"]
    assert set(cpu) == {"name", "cores", "sockets", "numa_nodes"}
    assert isinstance(cpu["name"], str) and cpu["name"]
    assert opt_int(cpu["cores"]) and opt_int(cpu["sockets"]) and opt_int(cpu["numa_nodes"])

    ram = point["ram"]
    assert set(ram) == {"gib", "type", "mts", "channels", "measured_gbs"}
    assert isinstance(ram["type"], str) and ram["type"]
    for key in ("gib", "mts", "measured_gbs"):
        assert opt(ram[key], is_num)
    assert opt_int(ram["channels"])

    if point["pcie"] is not None:
        assert set(point["pcie"]) == {"gen", "width"}
        assert opt_int(point["pcie"]["gen"]) and opt_int(point["pcie"]["width"])

    flags = point["flags"]
    assert set(flags) == FLAG_KEYS
    for key in ("ngl", "n_cpu_moe", "ub", "b", "t", "ctx"):
        assert opt_int(flags[key]), key
    assert flags["cpu_moe"] in (True, False, None)
    assert flags["fa"] in (True, False, None)
    for key in ("ot", "ctk", "ctv", "other"):
        assert opt_str(flags[key]), key

    assert point["tg"] is not None or point["pp"] is not None
    if point["tg"] is not None:
        assert set(point["tg"]) == {"tok_s", "depth", "n"}
        assert is_num(point["tg"]["tok_s"]) and point["tg"]["tok_s"] > 0
        assert opt_int(point["tg"]["depth"]) and opt_int(point["tg"]["n"])
    if point["pp"] is not None:
        assert set(point["pp"]) == {"tok_s", "n_prompt"}
        assert is_num(point["pp"]["tok_s"]) and point["pp"]["tok_s"] > 0
        assert opt_int(point["pp"]["n_prompt"])

    assert isinstance(point["assumed"], list) and all(isinstance(a, str) and a for a in point["assumed"])
    assert isinstance(point["notes"], str)


@pytest.mark.parametrize("point", POINTS, ids=[p["id"] for p in POINTS])
def test_figures_appear_in_quote(point):
    """Each tok/s is copied from the source: its digits appear in the quoted text."""
    for part in ("tg", "pp"):
        if point[part] is None:
            continue
        value = point[part]["tok_s"]
        forms = {str(value), f"{value:g}", f"{value:.2f}", f"{value:.1f}"}
        assert any(form in point["quote"] for form in forms), (part, value)
