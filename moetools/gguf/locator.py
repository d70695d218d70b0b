"""Where a MODEL comes from: a local path, an http(s) URL of any shard, or a Hugging Face name.

    hf://ORG/REPO[@REVISION]/PATH.gguf   one model (any shard of a split set)
    hf://ORG/REPO[@REVISION]             every GGUF set in the repo (`--include GLOB` to narrow)
    https://host/path/NAME-00001-of-00014.gguf

Parsing only (the bottom layer of moetools.gguf): nothing here opens a model, which is
moetools.gguf.open's job. This module is stdlib-only and cheap to import: the local path never loads
the HTTP client (moetools.gguf.remote) or huggingface_hub (moetools.gguf.hub), which are imported
only for a remote source.
"""

import os
import re

from moetools.errors import UsageError

REMOTE_PREFIXES = ("http://", "https://", "hf://")
_HF_RE = re.compile(r"^hf://(?P<org>[^/@]+)/(?P<repo>[^/@]+)(?:@(?P<revision>[^/]+))?(?:/(?P<path>.+))?$")

DEFAULT_TIMEOUT = 30.0
# The first range read of every shard. A split model's later shards have headers of a few KiB; the
# first holds the vocabulary (several MiB on a 160k-token model) and grows from there.
DEFAULT_CHUNK = 2 * 1024 * 1024
DEFAULT_PARALLEL = 8


class FetchSettings:
    """How remote headers are read: `timeout` seconds per request, `offline` (header cache only),
    `cache_dir` (None: the user cache folder), `chunk` (first range read per shard, bytes),
    `parallel` (shards read at once). A plain class: the local path does not import dataclasses."""

    def __init__(self, timeout=DEFAULT_TIMEOUT, offline=False, cache_dir=None, chunk=DEFAULT_CHUNK,
                 parallel=DEFAULT_PARALLEL, include=None):
        if not timeout or timeout <= 0:
            raise UsageError(f"--timeout {timeout!r} must be a positive number of seconds")
        self.timeout = float(timeout)
        self.offline = bool(offline)
        self.cache_dir = cache_dir
        self.chunk = int(os.environ.get("MOETOOLS_FETCH_CHUNK") or chunk)
        self.parallel = max(1, int(parallel))
        self.include = include


def is_remote(text):
    """True for an http(s):// URL or an hf:// name."""
    return isinstance(text, str) and text.startswith(REMOTE_PREFIXES)


def parse_hf(text):
    """`hf://ORG/REPO[@REVISION][/PATH]` -> (repo_id, revision or None, path or None)."""
    match = _HF_RE.match(text)
    if not match:
        raise UsageError(f"{text}: not a Hugging Face name (hf://ORG/REPO[@REVISION][/PATH.gguf])")
    path = match["path"]
    return f"{match['org']}/{match['repo']}", match["revision"], (path.strip("/") or None) if path else None


def is_repo(text):
    """True for `hf://ORG/REPO[@REVISION]` naming a whole repo (no file path)."""
    return isinstance(text, str) and text.startswith("hf://") and parse_hf(text)[2] is None


def llama_model_args(text):
    """How llama.cpp's tools (common/arg.cpp) are told to load MODEL: `-m PATH` for a local file;
    `-mu URL` for an http(s) URL (llama.cpp downloads every shard of a split name, then loads it);
    `-hf ORG/REPO -hff PATH` for an hf:// file on the default branch (llama.cpp resolves it through
    the Hub, HF_ENDPOINT and HF_TOKEN included, with its split siblings); an hf:// file at another
    revision is a `-mu` resolve URL, since `-hf` reads the default branch only. `-m` takes no URL."""
    if isinstance(text, str) and text.startswith("hf://"):
        repo_id, revision, path = parse_hf(text)
        if path is None:
            raise UsageError(f"{text}: llama.cpp loads one GGUF set; name its file (hf://ORG/REPO/PATH.gguf)")
        if revision in (None, "main"):
            return ["-hf", repo_id, "-hff", path]
        from urllib.parse import quote

        endpoint = (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")
        return ["-mu", f"{endpoint}/{repo_id}/resolve/{quote(revision, safe='')}/{quote(path)}"]
    if is_remote(text):
        return ["-mu", text]
    return ["-m", text]


def refuse_remote(text, command):
    """Commands that read tensor data cannot take a remote source: one line, exit 2."""
    if is_remote(text):
        raise UsageError(f"{text}: {command} reads tensor data, and a remote MODEL gives only its header; "
                         "download the model and pass the local file")

