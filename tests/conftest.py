import contextlib
import os

import pytest

from tests import factory


@contextlib.contextmanager
def session_env(name, value):
    """Set environment variable `name` to `value` (subprocesses inherit it), restoring it after."""
    old = os.environ.get(name)
    os.environ[name] = str(value)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory):
    """{arch: path} of one tiny model with real data per architecture, written once per session."""
    folder = tmp_path_factory.mktemp("tiny")
    return {arch: factory.write_tiny(folder, arch) for arch in factory.TINY_ARCHES}


@pytest.fixture(scope="session")
def preset_model(tmp_path_factory):
    """preset_model(name, shards=1) -> first shard path of a full-size header-only model (cached)."""
    cache = {}

    def make(name, shards=1):
        key = (name, shards)
        if key not in cache:
            cache[key] = factory.write_preset(tmp_path_factory.mktemp(name), name, shards=shards)
        return cache[key]

    return make


@pytest.fixture
def shared_models():
    """The real converter-written GGUFs in ../shared/models; skips the test when they are absent."""
    models = factory.all_shared_models()
    if not models:
        pytest.skip(f"real GGUFs not present in {factory.SHARED_MODELS} (CI has them; a fresh clone may not)")
    return models


@pytest.fixture(autouse=True, scope="session")
def hermetic_storage_root(tmp_path_factory):
    """The serving daemon's storage root (CONTINUUM_STORAGE_PATH, else ~/.continuum) points at an
    empty folder for the whole run: device-fit and quantize --install read and write there, and a
    test must never see (or touch) this machine's real ~/.continuum."""
    with session_env("CONTINUUM_STORAGE_PATH", tmp_path_factory.mktemp("continuum-storage")):
        yield


@pytest.fixture(autouse=True, scope="session")
def hermetic_cache_dir(tmp_path_factory):
    """moetools' cache folder (MOETOOLS_CACHE_DIR: cold-twin's hash cache and action log, header
    caches) is a fresh folder for the whole run, never this machine's ~/.cache/moetools: two suites
    running at once would otherwise share one action log (and its lock) and see each other's runs.
    Tests that need their own folder still set it per test."""
    with session_env("MOETOOLS_CACHE_DIR", tmp_path_factory.mktemp("moetools-cache")):
        yield
