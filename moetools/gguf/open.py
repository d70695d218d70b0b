"""The one dispatcher that opens a MODEL, wherever it is (moetools.gguf.locator parses the name).

    local path                          -> moetools.gguf.model (headers read from the file)
    https://host/NAME-00001-of-0000N.gguf -> moetools.gguf.remote (header-only range reads)
    hf://ORG/REPO[@REVISION]/PATH.gguf  -> moetools.gguf.hub (the Hub's listing, then range reads)

It sits above model, remote and hub, which never import it, so the reader has no import circle. The
remote modules are imported inside the functions that need them: a local file's start-up never loads
http.client, concurrent.futures or huggingface_hub (tests/test_remote.py checks the import set).
"""

import os

from moetools.errors import GGUFError
from moetools.gguf.header import read_header
from moetools.gguf.locator import FetchSettings, is_remote
from moetools.gguf.model import discover_shards, model_from_headers


def open_model(path, fetch=None):
    """Open a GGUF model from any of its shards. Raises GGUFError for bad input.

    `path` may also be a remote source (an http(s) URL or hf://ORG/REPO[@REV]/PATH.gguf): its headers
    are fetched with `fetch` (moetools.gguf.locator.FetchSettings; defaults when None)."""
    if is_remote(path):
        return open_remote(path, fetch)
    path = os.fspath(path)
    if path == "-":
        raise GGUFError(path, "a model is read from a file, not from stdin: its shards are found beside it and "
                              "its tensors by offset (give the .gguf path)")
    if os.path.isdir(path):
        raise GGUFError(path, "is a folder; give a .gguf file (any shard of a split model)")
    paths, warnings = discover_shards(path)
    headers = [read_header(shard, shard=index) for index, shard in enumerate(paths)]
    return model_from_headers(path, headers, warnings)


def open_remote(text, settings=None):
    """Open a remote MODEL: an http(s) URL or hf://ORG/REPO[@REVISION]/PATH.gguf."""
    settings = settings or FetchSettings()
    if text.startswith("hf://"):
        from moetools.gguf.hub import open_hf

        return open_hf(text, settings)
    from moetools.gguf.remote import open_url

    return open_url(text, settings)


def open_source(text, settings=None):
    """Open MODEL from wherever it is (a moetools.gguf.Model). A repo name is a UsageError here: list
    its sets with `list_sets`."""
    return open_model(text, settings)


def list_sets(text, settings=None):
    """The GGUF sets of `hf://ORG/REPO[@REVISION]`: a list of moetools.gguf.hub.GGUFSet."""
    from moetools.gguf.hub import repo_sets

    return repo_sets(text, settings or FetchSettings())
