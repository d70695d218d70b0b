"""device-fit's KV sizing against what llama.cpp itself allocates.

Opt-in: set MOETOOLS_LLAMA_PROBE to tests/llama_probe/probe.cpp compiled against a libllama you
already have (moetools ships no llama.cpp code and no recipe to build it). The probe loads each model on the
CPU and creates a context; llama.cpp logs every KV and recurrent-state buffer it allocates, in MiB with
two decimals, which must equal device-fit's bytes formatted the same way — and where llama.cpp refuses a
setting, device-fit must refuse it too.
"""

import os
import re
import subprocess

import pytest

from moetools import synth
from moetools.devicefit import kv
from moetools.devicefit.kv import KVSettings
from moetools.errors import UsageError
from moetools.gguf import open_model
from tests import factory

PROBE = os.environ.get("MOETOOLS_LLAMA_PROBE", "")
pytestmark = pytest.mark.skipif(not (PROBE and os.access(PROBE, os.X_OK)),
                                reason="opt-in: set MOETOOLS_LLAMA_PROBE to tests/llama_probe/probe.cpp linked against libllama")

KV_LINE = re.compile(r"llama_kv_cache: size = +([\d.]+) MiB \( *(\d+) cells, +(\d+) layers, +(\d+)/(\d+) seqs\), "
                     r"K \(\w+\): +([\d.]+) MiB, V \(\w+\): +([\d.]+) MiB")
RS_LINE = re.compile(r"llama_memory_recurrent: size = +[\d.]+ MiB \( *(\d+) cells.*R \(f32\): +([\d.]+) MiB, S \(f32\): +([\d.]+) MiB")

SETTINGS = [
    (4096, KVSettings()),
    (5000, KVSettings(ctk="q8_0", ctv="q8_0", n_seq=3)),
    (3000, KVSettings(n_seq=2, unified=True, ubatch=256)),
    (4096, KVSettings(ctk="q4_0", ctv="q4_0", swa_full=True)),
    (2048, KVSettings(flash_attn=False, ubatch=64)),
    (1000, KVSettings(ctk="bf16", ctv="q8_0", n_seq=2)),
]


@pytest.fixture(scope="module")
def probe_models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("llama-probe")
    models = {}
    for arch in factory.TINY_ARCHES:
        spec = synth.tiny(arch)
        spec.merges = 16  # llama.cpp's BPE loader wants merges
        key = spec.architecture + ".attn_res.block_size"
        if arch == "kimi-k3" and all(entry[0] != key for entry in spec.metadata):
            spec.meta("{arch}.attn_res.block_size", 8)
        models[arch] = synth.write_model(spec, folder / f"{arch}.gguf")[0]
    for path in factory.all_shared_models():
        models[path.name] = str(path)
    return models


def mib(n_bytes):
    return f"{n_bytes / 1024 / 1024:.2f}"


def run_probe(path, ctx, settings):
    args = [PROBE, str(path), str(ctx), str(settings.n_seq), settings.ctk, settings.ctv, str(int(settings.flash_attn)),
            str(int(settings.swa_full)), str(int(settings.unified)), str(settings.ubatch)]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stderr


@pytest.mark.parametrize("index", range(len(SETTINGS)))
def test_device_fit_matches_llama_cpp(probe_models, index):
    ctx, settings = SETTINGS[index]
    for name, path in probe_models.items():
        with open_model(path) as model:
            shape = kv.kv_shape(model)
        try:
            kv.check_settings(shape, settings)
            caches = kv.kv_caches(shape, ctx, settings)
        except UsageError:
            caches = None
        code, log = run_probe(path, ctx, settings)
        if caches is None:
            assert code != 0 and "PROBE: context failed" in log, (name, "llama.cpp accepted what device-fit refused")
            continue
        assert code == 0 and "PROBE: ok" in log, (name, log[-2000:])
        logged = [(int(m[2]), int(m[3]), m[6], m[7]) for m in KV_LINE.finditer(log)]
        ours = [(c.cells, c.layers, mib(c.k_bytes), mib(c.v_bytes)) for c in caches if c.kind != "recurrent"]
        assert logged == ours, (name, ctx, settings)
        recurrent = [c for c in caches if c.kind == "recurrent"]
        logged_rs = [(int(m[1]), m[2], m[3]) for m in RS_LINE.finditer(log)]
        assert logged_rs == [(c.cells, mib(c.r_bytes), mib(c.s_bytes)) for c in recurrent], (name, ctx, settings)
