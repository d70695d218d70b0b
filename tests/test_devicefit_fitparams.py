"""devicefit/fit_emulation.fit_choice against what llama.cpp's own `--fit` printed
(tests/data/devicefit_llama_fitparams.json, recorded by benchmarks/check_devicefit_fitparams.py with
llama-fit-params on two loopback RPC devices): the same flags for every case, or the case is in the
record's strict "xfail" list with what differs and why."""

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
    ctx = entry["ctx"] or None
    extra = {"n_ctx_min": entry["fitc"]} if entry["fitc"] is not None else {}
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
