"""Fixture factory: GGUF files in llama.cpp's real layouts, written with gguf.GGUFWriter.

Tiny models carry real (random) data; full-size K2/K3-class models are header-only sparse files.
The layouts themselves live in `moetools.synth` (the quick start uses them too); this module only
decides where files go and caches them per test session.
"""

import os
from pathlib import Path

from moetools import synth

SHARED = Path(__file__).resolve().parent.parent.parent / "shared"
SHARED_MODELS = SHARED / "models"
SHARED_TRACES = SHARED / "traces"

TINY_ARCHES = ("mixtral", "qwen3moe", "deepseek2", "gpt-oss", "kimi-k3", "dense")


def write_tiny(folder, arch, *, shards=1, sparse=False, name=None, types=None, seed=0, alignment=None, **params):
    """Write a tiny `arch` model into `folder`; returns the path of its first (or only) file."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    spec = synth.tiny(arch, types or synth.Types(), **params)
    paths = synth.write_model(spec, folder / f"{name or arch}.gguf", sparse=sparse, shards=shards, seed=seed,
                             alignment=alignment)
    return Path(paths[0])


def write_preset(folder, preset, *, shards=1):
    """Write a full-size preset header-only (sparse); returns the first shard's path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = synth.write_model(synth.preset(preset), folder / f"{preset}.gguf", sparse=True, shards=shards)
    return Path(paths[0])


def shared_model(name):
    """Path of a real converter-written GGUF in ../shared/models, or None when absent."""
    path = SHARED_MODELS / name
    return path if path.exists() else None


def all_shared_models():
    return sorted(SHARED_MODELS.glob("*.gguf")) if SHARED_MODELS.is_dir() else []


def sparse_bytes_on_disk(path):
    return os.stat(path).st_blocks * 512


BATCH_FLAGS = ("-ub", "--ubatch", "-b", "--batch")


def as_measured(args):
    """A device-fit command line of a case measured against llama.cpp at its -ub/-b: without either flag
    device-fit would choose -ub by --prefer (batching.py), planning another graph than the one measured,
    so -b 2048 (llama.cpp's default, which device-fit does not emit) pins it; and --spill first keeps the
    side of each range whose experts leave it as measured (auto may take the last layers' instead)."""
    args = [str(arg) for arg in args]
    if "--spill" not in args:  # the first layers' experts on the CPU, as the measured plans had them
        args += ["--spill", "first"]
    return args if any(arg in BATCH_FLAGS for arg in args) else [*args, "-b", "2048"]


def without_threads(argv):
    """An emitted launch line without its `-t N` (the threads do not change any buffer llama.cpp logs)."""
    argv = list(argv)
    if "-t" in argv:
        index = argv.index("-t")
        del argv[index:index + 2]
    return argv
