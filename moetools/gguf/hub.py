"""hf:// sources through huggingface_hub, the Hub's own client: the token (HF_TOKEN or the login
cache), the endpoint (HF_ENDPOINT mirrors), offline mode (HF_HUB_OFFLINE), revisions and the repo's
file listing with sizes (`HfApi.model_info(files_metadata=True)`). Headers are then read with
range requests on the Hub's resolve URLs pinned to the listed commit (moetools.gguf.remote).

Imported only for an hf:// MODEL: huggingface_hub is not on a local file's start-up path.
"""

import fnmatch
import posixpath
import re
from urllib.parse import quote, urlsplit

from moetools.errors import RemoteError, UsageError
from moetools.gguf.headercache import HeaderCache
from moetools.gguf.model import SPLIT_NAME_RE
from moetools.gguf.remote import RangeClient, ShardRef, fetch_headers, open_shards
from moetools.gguf.locator import parse_hf

_COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")


class Listing:
    """A repo's files at one commit: {path: size in bytes or None}."""

    def __init__(self, endpoint, repo_id, revision, commit, files, cache_key=None):
        self.cache_key = cache_key  # set when the listing came from the Hub and is not cached yet
        self.endpoint = endpoint
        self.repo_id = repo_id
        self.revision = revision
        self.commit = commit
        self.files = files

    def store(self, settings):
        """Cache this listing (for --offline) once a read through it has succeeded."""
        if self.cache_key:
            HeaderCache(settings.cache_dir).put_json(self.cache_key, self.to_doc())

    def to_doc(self):
        return {"endpoint": self.endpoint, "repo_id": self.repo_id, "revision": self.revision, "commit": self.commit,
                "files": self.files}


class GGUFSet:
    """One model in a repo: `name` (folder/prefix), its shard `paths` in order and their `sizes`."""

    def __init__(self, name, paths, sizes):
        self.name = name
        self.paths = paths
        self.sizes = sizes

    @property
    def total_bytes(self):
        return sum(size or 0 for size in self.sizes)


def _display(repo_id, revision, path=None):
    text = f"hf://{repo_id}" + (f"@{revision}" if revision else "")
    return text + (f"/{path}" if path else "")


def _offline(settings):
    from huggingface_hub import constants

    return settings.offline or constants.HF_HUB_OFFLINE


def _endpoint():
    from huggingface_hub import constants

    return constants.ENDPOINT


def _hub_problem(err, revision):
    """One line for an exception huggingface_hub raised."""
    from huggingface_hub import errors

    if isinstance(err, errors.GatedRepoError):
        return "gated repo: accept its terms on the Hub and set HF_TOKEN (or log in with `hf auth login`)"
    if isinstance(err, errors.RevisionNotFoundError):
        return f"unknown revision {revision!r}"
    if isinstance(err, errors.RepositoryNotFoundError):
        return "repository not found (a private or gated repo needs a token: set HF_TOKEN or log in with `hf auth login`)"
    if isinstance(err, errors.HfHubHTTPError):
        status = getattr(getattr(err, "response", None), "status_code", None)
        if status in (401, 403):
            return f"access denied (HTTP {status}): set HF_TOKEN (or log in with `hf auth login`)"
        return f"the Hub answered HTTP {status}" if status else str(err).splitlines()[0]
    name = type(err).__name__
    if "Timeout" in name:
        return "no answer from the Hub within the --timeout"
    if isinstance(err, (OSError, ConnectionError)) or "Connect" in name or "Network" in name:
        return f"cannot reach the Hub at {_endpoint()}: {str(err).splitlines()[0] if str(err) else name}"
    return f"{name}: {str(err).splitlines()[0] if str(err) else 'Hub request failed'}"


class _Deadline(Exception):
    pass


def _within(seconds, call):
    """call()'s result, or _Deadline once `seconds` have passed. huggingface_hub's timeout bounds each
    socket read, so a server that drips a byte at a time would hold it for ever: the call runs in a
    daemon thread, abandoned at the deadline (the process exits with it)."""
    import threading

    outcome = {}

    def run():
        try:
            outcome["value"] = call()
        except BaseException as err:  # noqa: BLE001 - handed to the caller's thread
            outcome["error"] = err

    worker = threading.Thread(target=run, name="hub-listing", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise _Deadline()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def repo_listing(repo_id, revision, settings):
    """The repo's files at `revision` (None: the default branch). Offline, the cached listing."""
    endpoint = _endpoint()
    cache = HeaderCache(settings.cache_dir)
    key = f"hf-list:{endpoint}/{repo_id}@{revision or ''}"
    display = _display(repo_id, revision)
    if _offline(settings):
        doc = cache.get_json(key)
        if doc is None:
            raise RemoteError(display, "offline, and its file listing is not in the header cache (run once online first)")
        return Listing(endpoint, repo_id, revision, doc["commit"], doc["files"])
    if revision and _COMMIT_RE.match(revision):
        doc = cache.get_json(key)  # a commit never changes: no need to ask again
        if doc is not None:
            return Listing(endpoint, repo_id, revision, doc["commit"], doc["files"])
    from huggingface_hub import HfApi

    try:
        info = _within(settings.timeout, lambda: HfApi(endpoint=endpoint).model_info(
            repo_id, revision=revision, files_metadata=True, timeout=settings.timeout))
    except _Deadline:
        raise RemoteError(display, f"no answer within {settings.timeout:g} s (--timeout bounds the whole listing)") from None
    except Exception as err:  # noqa: BLE001 - every Hub failure becomes one line
        raise RemoteError(display, _hub_problem(err, revision)) from None
    if not info.sha:
        raise RemoteError(display, "the Hub's answer names no commit")
    files = {sibling.rfilename: sibling.size for sibling in (info.siblings or [])}
    return Listing(endpoint, repo_id, revision, info.sha, files, cache_key=key)


def gguf_sets(listing, include=None):
    """The GGUF sets in a listing, by name: split shards grouped from their -0000k-of-0000N names."""
    groups = {}
    for path in sorted(listing.files):
        if not path.endswith(".gguf") or (include and not fnmatch.fnmatch(path, include)):
            continue
        folder, base = posixpath.split(path)
        match = SPLIT_NAME_RE.match(base)
        if match:
            name = posixpath.join(folder, match["prefix"])
            groups.setdefault((name, int(match["count"])), {})[int(match["no"])] = path
        else:
            groups[(path[: -len(".gguf")], 1)] = {1: path}
    sets = []
    for (name, count), members in sorted(groups.items()):
        if sorted(members) != list(range(1, count + 1)):
            missing = [number for number in range(1, count + 1) if number not in members]
            raise RemoteError(_display(listing.repo_id, listing.revision, name),
                              f"the repo lacks {len(missing)} of its {count} shards (first missing: {missing[0]})")
        paths = [members[number] for number in range(1, count + 1)]
        sets.append(GGUFSet(name, paths, [listing.files[path] for path in paths]))
    return sets


def _client(listing, settings):
    from huggingface_hub import get_token

    token = None if _offline(settings) else get_token()
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return RangeClient(settings.timeout, urlsplit(listing.endpoint).netloc, headers)


def _shard_refs(listing, gguf_set):
    refs = []
    for path in gguf_set.paths:
        url = f"{listing.endpoint}/{listing.repo_id}/resolve/{listing.commit}/{quote(path)}"
        refs.append(ShardRef(_display(listing.repo_id, listing.revision, path), url,
                             f"hf:{listing.endpoint}/{listing.repo_id}@{listing.commit}/{path}", immutable=True,
                             expect_size=listing.files.get(path), expect_commit=listing.commit))
    return refs


def open_set(listing, gguf_set, settings, client=None):
    """The Model of one set of a listing (headers only)."""
    display = _display(listing.repo_id, listing.revision, gguf_set.paths[0])
    model = open_shards(display, _shard_refs(listing, gguf_set), settings, client or _client(listing, settings))
    listing.store(settings)
    return model


def open_hf(text, settings):
    """Open hf://ORG/REPO[@REVISION]/PATH.gguf (any shard of a split set)."""
    repo_id, revision, path = parse_hf(text)
    if path is None:
        raise UsageError(f"{text} names a whole repo; this command takes one model: add /PATH.gguf "
                         "(`moetools inspect {text}` lists the sets)".replace("{text}", text))
    if not path.endswith(".gguf"):
        raise UsageError(f"{text}: the path inside the repo must name a .gguf file")
    listing = repo_listing(repo_id, revision, settings)
    if path not in listing.files:
        raise RemoteError(text, f"no such file in the repo at {revision or 'its default branch'} (commit {listing.commit[:12]})")
    folder, base = posixpath.split(path)
    match = SPLIT_NAME_RE.match(base)
    wanted = posixpath.join(folder, match["prefix"]) if match else path[: -len(".gguf")]
    for gguf_set in gguf_sets(listing):
        if gguf_set.name == wanted and path in gguf_set.paths:
            return open_set(listing, gguf_set, settings)
    raise RemoteError(text, "its shard set is incomplete in the repo listing")


def repo_sets(text, settings):
    """(listing, sets) for hf://ORG/REPO[@REVISION]; a repo without GGUF files is a RemoteError."""
    repo_id, revision, path = parse_hf(text)
    if path is not None:
        raise UsageError(f"{text} names a file, not a repo")
    listing = repo_listing(repo_id, revision, settings)
    sets = gguf_sets(listing, settings.include)
    if not sets:
        scope = f" matching {settings.include!r}" if settings.include else ""
        raise RemoteError(text, f"no GGUF files{scope} in the repo at {revision or 'its default branch'}")
    return listing, sets


def first_headers(listing, sets, settings):
    """The first shard's header of every set (file type and the like), read in parallel, cached."""
    client = _client(listing, settings)
    refs = [_shard_refs(listing, gguf_set)[0] for gguf_set in sets]
    fetched = fetch_headers(refs, settings, client)
    from moetools.gguf.remote import store_headers

    store_headers(refs, fetched, settings)
    listing.store(settings)
    return [item.header for item in fetched], client
