"""Queries over the architecture tables: `profile(name)`, `names_with(field, value)`.

The family modules are imported on the first query, not at import time, and hold plain Python only (no
numpy, no gguf), so asking costs a few milliseconds once and nothing on a path that never asks.
"""

import importlib

from moetools.arch.profile import ArchProfile

FAMILIES = ("qwen", "deepseek", "kimi", "glm", "gemma", "minimax", "ssm", "rwkv", "other")
_TABLE = None
_QUERIES = {}


def _table():
    global _TABLE
    if _TABLE is None:
        table = {}
        for family in FAMILIES:
            for entry in importlib.import_module(f"moetools.arch.{family}").PROFILES:
                if entry.name in table:
                    raise ValueError(f"architecture {entry.name!r} has two profiles ({family})")
                table[entry.name] = entry
        _TABLE = table
    return _TABLE


def profile(name):
    """The ArchProfile of architecture `name`; an unknown name gets the defaults with known=False."""
    found = _table().get(name)
    return found if found is not None else ArchProfile(name, known=False)


def profiles():
    """Every profile, by name."""
    return dict(_table())


def is_known(name):
    """True for an architecture name llama.cpp's loader knows (LLM_ARCH_NAMES, less clip)."""
    return profile(name).known


def names_with(field, value=True):
    """The sorted tuple of architecture names whose `field` equals `value` (memoised)."""
    key = (field, value)
    if key not in _QUERIES:
        _QUERIES[key] = tuple(sorted(name for name, entry in _table().items() if getattr(entry, field) == value))
    return _QUERIES[key]


def names_where(test):
    """The sorted tuple of architecture names whose profile passes `test` (not memoised)."""
    return tuple(sorted(name for name, entry in _table().items() if test(entry)))


def mtp_names(level):
    """The sorted names whose MTP handling reaches `level` (moetools.arch.profile.MTP_LEVELS)."""
    key = ("mtp>=", level)
    if key not in _QUERIES:
        _QUERIES[key] = names_where(lambda entry: entry.mtp_at_least(level))
    return _QUERIES[key]


def resolve(path):
    """The function a profile's "module:function" field names (graph_builder, shape_reader, …), imported
    on first use; None for ""."""
    if not path:
        return None
    module, function = path.split(":")
    return getattr(importlib.import_module(module), function)


_MEASURED = None


def measured_compute(name):
    """(measured on one device, measured split over several devices) for architecture `name`: which of
    its compute buffers llama.cpp 0c1e57098 has measured, from measured.json, the index
    benchmarks/gen_devicefit_measured.py writes from the records in tests/data/devicefit_llama_*.json."""
    global _MEASURED
    if _MEASURED is None:
        import json
        import os

        with open(os.path.join(os.path.dirname(__file__), "measured.json"), encoding="utf-8") as handle:
            index = json.load(handle)
        _MEASURED = (frozenset(index["one_device"]), frozenset(index["split"]))
    return name in _MEASURED[0], name in _MEASURED[1]
