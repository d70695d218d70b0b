"""Header-only reads of GGUF files over HTTP range requests, for MODEL given as a URL or hf:// name.

The first shard starts with one range read of `chunk` bytes (2 MiB: it holds the metadata and the
vocabulary); later shards of a split set, whose headers hold only the split keys and their tensor
infos (about 12 KiB on a Kimi-K2 shard), start with LATER_SHARD_CHUNK. While the header continues past the
bytes at hand, the parser says the least the rest of the header can take (HeaderIncomplete), and
the next read grows geometrically (doubling what is held) but ends at most one chunk past that
floor: a shard never costs more than its header plus one chunk, and tensor data is never asked
for beyond that. Shards are read in parallel (bounded), redirects are followed (the Hub's resolve
URLs redirect to a CDN; later reads of the same file go straight to where it was found), kept-alive
connections are reused per thread, and the ETag (or the Hub's X-Linked-Etag) and size must agree
across every read of a file. A server that answers a Range request with the whole file is refused.

Complete headers go to the header cache (moetools.gguf.headercache) only after the whole set has
been read and validated, so nothing partial or inconsistent is ever stored.
"""

import http.client
import posixpath
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urljoin, urlsplit, urlunsplit

from moetools.errors import RemoteError
from moetools.gguf.header import MAX_HEADER_BYTES, HeaderIncomplete, parse_header_bytes
from moetools.gguf.headercache import HeaderCache
from moetools.gguf.model import SPLIT_NAME_RE, model_from_headers

MAX_REDIRECTS = 10
# The first read of shard 2, 3, ... of a split set: room for about 2,500 tensor infos.
LATER_SHARD_CHUNK = 256 * 1024
_REDIRECTS = (301, 302, 303, 307, 308)


class Reply:
    """One answered range read: `data`, the file's `size`, its `etag`, the Hub's `commit`
    (X-Repo-Commit on any hop) and `not_modified` for a 304."""

    def __init__(self, data=b"", size=None, etag=None, commit=None, not_modified=False):
        self.data = data
        self.size = size
        self.etag = etag
        self.commit = commit
        self.not_modified = not_modified


def _content_range(value):
    """`bytes 0-99/1234` -> (0, 99, 1234); None when absent or unparsable."""
    if not value or not value.startswith("bytes "):
        return None
    try:
        span, total = value[6:].split("/", 1)
        first, last = span.split("-", 1)
        return int(first), int(last), int(total)
    except ValueError:
        return None


class RangeClient:
    """Range GETs with redirects, per-thread kept-alive connections, and counters of the requests made
    and the body bytes received (`requests`, `fetched_bytes`)."""

    def __init__(self, timeout, auth_host=None, auth_headers=None):
        self.timeout = timeout
        self.auth_host = auth_host  # host:port that may see the token (the Hub endpoint), never a redirect target
        self.auth_headers = auth_headers or {}
        self.requests = 0
        self.fetched_bytes = 0
        self._lock = threading.Lock()
        self._local = threading.local()
        self._located = {}  # url -> where its redirects ended, for the next read of the same file

    def _pool(self):
        pool = getattr(self._local, "pool", None)
        if pool is None:
            pool = self._local.pool = {}
        return pool

    def _open(self, parts):
        key = (parts.scheme, parts.netloc)
        pool = self._pool()
        connection = pool.get(key)
        if connection is None:
            kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
            connection = pool[key] = kind(parts.netloc, timeout=self.timeout)
        return key, connection

    def _drop(self, key):
        connection = self._pool().pop(key, None)
        if connection is not None:
            connection.close()

    def _request(self, name, url, headers):
        """Send one GET; returns (connection key, response). A kept-alive connection the server has
        closed meanwhile is retried once on a fresh one."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise RemoteError(name, f"cannot fetch {url!r}: not an http(s) URL")
        target = urlunsplit(("", "", parts.path or "/", parts.query, ""))
        expired = getattr(self._local, "expired", None)
        for attempt in (0, 1):
            if expired is not None and expired.is_set():  # (no fresh connection, retry or hop past the deadline)
                raise TimeoutError("the request's deadline passed")
            key, connection = self._open(parts)
            with self._lock:
                self.requests += 1
            try:
                connection.request("GET", target, headers=headers)
                return key, connection.getresponse()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self._drop(key)
                if attempt:
                    raise
            except BaseException:
                self._drop(key)
                raise
        raise AssertionError("unreachable")

    def get_range(self, name, url, start, end, if_none_match=None):
        """Bytes [start, end) of the file at `url` (a Reply). Raises RemoteError, one line, for
        anything but a complete partial-content answer (or a 304 to `if_none_match`).

        `timeout` bounds the whole request, redirects, headers and body included: a socket timeout alone
        bounds each read, and a server dripping a byte every half second never trips it. At the deadline
        a watchdog shuts this thread's sockets down, so the read that waits returns at once (shutdown
        works on every platform's sockets, unlike signals)."""
        pool = self._pool()
        expired = threading.Event()

        def expire():
            expired.set()
            for connection in list(pool.values()):
                if connection.sock is not None:
                    try:
                        connection.sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

        self._local.expired = expired
        watchdog = threading.Timer(self.timeout, expire)
        watchdog.daemon = True
        watchdog.start()
        try:
            return self._get_range(name, url, start, end, if_none_match)
        except RemoteError:
            if expired.is_set():  # (a read cut short by the watchdog reads as a short or broken answer)
                self._drop_all()
                raise self._late(name) from None
            raise
        except BaseException:
            self._drop_all()  # a half-read answer leaves no connection reusable
            if expired.is_set():
                raise self._late(name) from None
            self._raise_one_line(name)
        finally:
            watchdog.cancel()

    def _drop_all(self):
        for key in list(self._pool()):
            self._drop(key)

    def _late(self, name):
        return RemoteError(name, f"no answer within {self.timeout:g} s (--timeout bounds the whole request)")

    def _raise_one_line(self, name):
        try:
            raise
        except TimeoutError:
            raise self._late(name) from None
        except http.client.IncompleteRead as err:
            raise RemoteError(name, f"short response: the server closed after {len(err.partial)} of the bytes asked for") from None
        except http.client.HTTPException as err:
            raise RemoteError(name, f"bad HTTP response: {type(err).__name__} {err}".strip()) from None
        except OSError as err:
            if isinstance(err, socket.timeout):
                raise self._late(name) from None
            raise RemoteError(name, f"cannot connect: {err.strerror or err}") from None

    def _get_range(self, name, url, start, end, if_none_match):
        current = self._located.get(url, url)
        seen = {current}
        commit = None
        for _hop in range(MAX_REDIRECTS + 1):
            parts = urlsplit(current)
            headers = {"Range": f"bytes={start}-{end - 1}", "Accept-Encoding": "identity", "User-Agent": "moetools"}
            if if_none_match:
                headers["If-None-Match"] = if_none_match
            if self.auth_host and parts.netloc == self.auth_host:
                headers.update(self.auth_headers)
            key, response = self._request(name, current, headers)
            commit = response.getheader("X-Repo-Commit") or commit
            status = response.status
            if status in _REDIRECTS:
                location = response.getheader("Location")
                self._discard(key, response)
                if not location:
                    raise RemoteError(name, f"HTTP {status} redirect without a Location")
                current = urljoin(current, location)
                if current in seen:
                    raise RemoteError(name, f"redirect loop: {current} was already visited")
                seen.add(current)
                continue
            if status == 206:
                reply = self._partial(name, key, response, start, end)
                reply.commit = commit
                if current != url:
                    self._located[url] = current
                return reply
            if status == 304:
                self._discard(key, response)
                return Reply(not_modified=True, etag=response.getheader("ETag"), commit=commit)
            self._drop(key)  # never read a body we did not ask for (200 would be the whole file)
            raise RemoteError(name, _status_problem(status, response.reason))
        raise RemoteError(name, f"redirect loop: more than {MAX_REDIRECTS} redirects")

    def _discard(self, key, response):
        """Read a small body so the connection can be reused; drop the connection for a big one."""
        length = response.getheader("Content-Length")
        if length is not None and length.isdigit() and int(length) <= 65536:
            response.read()
        else:
            self._drop(key)

    def _partial(self, name, key, response, start, end):
        extent = _content_range(response.getheader("Content-Range"))
        if extent is None:
            self._drop(key)
            raise RemoteError(name, f"206 answer without a usable Content-Range ({response.getheader('Content-Range')!r})")
        first, last, size = extent
        want = min(end, size) - start
        if first != start or last - first + 1 != want:
            self._drop(key)
            raise RemoteError(name, f"server sent bytes {first}-{last} when asked for {start}-{start + want - 1}")
        length = response.getheader("Content-Length")
        if length is not None and length.strip().isdigit() and int(length) > want:
            self._drop(key)  # never read a body longer than the range asked for
            raise RemoteError(name, _more_than_asked(int(length), want, start))
        data = response.read()
        with self._lock:
            self.fetched_bytes += len(data)
        if len(data) > want:
            self._drop(key)
            raise RemoteError(name, _more_than_asked(len(data), want, start))
        if len(data) != want:
            self._drop(key)
            raise RemoteError(name, f"short response: {len(data)} of {want} bytes at offset {start}")
        if response.will_close:
            self._drop(key)
        etag = response.getheader("ETag") or response.getheader("X-Linked-Etag")
        return Reply(data=data, size=size, etag=etag)


def _more_than_asked(sent, want, start):
    """A 206 body longer than the range asked for (issue 32): not a short response, a server that sends
    more than it was asked; its bytes cannot be trusted to be the range's."""
    return (f"the server sent more than asked: {sent} bytes for the {want} asked at offset {start} "
            "(a 206 body longer than its range; refusing it)")


def _status_problem(status, reason):
    if status == 200:
        return ("the server ignored the Range request and answered with the whole file; "
                "refusing to download it (header-only reads need a server with range support)")
    if status in (401, 403):
        return (f"access denied (HTTP {status}): a gated or private model needs a token; set HF_TOKEN "
                "(or log in with `hf auth login`) and accept the model's terms on the Hub")
    if status == 404:
        return "not found (HTTP 404)"
    if status == 416:
        return "the server says the range is not satisfiable (HTTP 416): an empty file?"
    return f"HTTP {status} {reason}".strip()


class ShardRef:
    """One file to read: `name` shown to users (and in errors), `url` fetched, `cache_key`,
    `immutable` (the key pins the content, e.g. a Hub commit: no request on a cache hit),
    `expect_size` and `expect_commit` (from a Hub listing; None when unknown)."""

    def __init__(self, name, url, cache_key, immutable=False, expect_size=None, expect_commit=None):
        self.name = name
        self.url = url
        self.cache_key = cache_key
        self.immutable = immutable
        self.expect_size = expect_size
        self.expect_commit = expect_commit


class FetchedHeader:
    """A parsed header and what to cache of it."""

    def __init__(self, header, data, etag, from_cache):
        self.header = header
        self.data = data
        self.etag = etag
        self.from_cache = from_cache


def next_read_end(held, needed_floor, size, chunk):
    """Where the next read of a header ends: double what is held, but no more than one chunk past
    the floor the parser gave (the least the header can still take), and never past the file."""
    floor = max(min(needed_floor, size), held + 1)
    return min(size, max(floor, 2 * held), floor + chunk)


def first_read_end(index, chunk):
    """Bytes asked for by the first read of shard `index` (0-based)."""
    return chunk if index == 0 else min(chunk, LATER_SHARD_CHUNK)


def header_bytes(header, data):
    """The part of `data` (a file's first bytes) that the header itself takes: what is cached."""
    return bytes(data[: min(len(data), header.data_offset)])


def _parse_cached(shard, index, meta, data):
    try:
        return parse_header_bytes(shard.name, data, meta["size"], index)
    except (HeaderIncomplete, Exception):  # a stale or foreign entry: read it again
        return None


def fetch_shard(client, cache, shard, index, chunk, offline):
    """Read one shard's header (a FetchedHeader), from the cache where it can be trusted."""
    entry = cache.get(shard.cache_key)
    cached = None
    if entry is not None:
        meta, data = entry
        header = _parse_cached(shard, index, meta, data)
        if header is not None:
            cached = FetchedHeader(header, data, meta.get("etag"), True)
    if offline:
        if cached is None:
            raise RemoteError(shard.name, "offline, and its header is not in the header cache (run once online first)")
        return cached
    if cached is not None and shard.immutable:
        return cached
    reply = client.get_range(shard.name, shard.url, 0, first_read_end(index, chunk), if_none_match=cached.etag if cached and cached.etag else None)
    if reply.not_modified:
        if cached is None:
            raise RemoteError(shard.name, "the server answered 304 Not Modified to a read with nothing cached")
        return cached
    _check_reply(shard, reply, reply)
    data = bytearray(reply.data)
    size, etag = reply.size, reply.etag
    while True:
        try:
            header = parse_header_bytes(shard.name, bytes(data), size, index)
            return FetchedHeader(header, header_bytes(header, data), etag, False)
        except HeaderIncomplete as more:
            end = next_read_end(len(data), more.needed, size, chunk)
            if end > MAX_HEADER_BYTES:
                raise RemoteError(shard.name, f"the header runs past {MAX_HEADER_BYTES >> 20} MiB; refusing to read further (corrupt?)") from None
            follow = client.get_range(shard.name, shard.url, len(data), end)
            if follow.not_modified:
                raise RemoteError(shard.name, "the server answered 304 Not Modified to an unconditional read")
            _check_reply(shard, follow, reply)
            data += follow.data


def _check_reply(shard, reply, first):
    """Every read of one file must see the same file: same size and ETag as the first read, and the
    size and commit a Hub listing gave."""
    if reply.size != first.size:
        raise RemoteError(shard.name, f"the file changed while its header was read (size {first.size} then {reply.size})")
    if reply.etag and first.etag and reply.etag != first.etag:
        raise RemoteError(shard.name, f"the file changed while its header was read (ETag {first.etag} then {reply.etag})")
    if shard.expect_size is not None and reply.size != shard.expect_size:
        raise RemoteError(shard.name, f"the server's file is {reply.size} bytes but the repo listing says {shard.expect_size}")
    if shard.expect_commit and reply.commit and reply.commit != shard.expect_commit:
        raise RemoteError(shard.name, f"served from commit {reply.commit}, not {shard.expect_commit}: the repo changed while it was read")


def fetch_headers(shards, settings, client):
    """Read the headers of `shards` (ShardRefs) in parallel; returns FetchedHeaders in order."""
    cache = HeaderCache(settings.cache_dir)
    if len(shards) == 1:
        return [fetch_shard(client, cache, shards[0], 0, settings.chunk, settings.offline)]
    with ThreadPoolExecutor(max_workers=min(settings.parallel, len(shards))) as pool:
        futures = [pool.submit(fetch_shard, client, cache, shard, index, settings.chunk, settings.offline)
                   for index, shard in enumerate(shards)]
        return [future.result() for future in futures]


def store_headers(shards, fetched, settings, **extra):
    """Put freshly read headers in the cache, once the whole set has been validated."""
    cache = HeaderCache(settings.cache_dir)
    for shard, item in zip(shards, fetched):
        if not item.from_cache:
            cache.put(shard.cache_key, item.data, etag=item.etag, size=item.header.file_size, url=shard.url, **extra)


def open_shards(display, shards, settings, client, warnings=()):
    """A moetools.gguf.Model from remote shards: fetch, validate as a set, then cache."""
    fetched = fetch_headers(shards, settings, client)
    model = model_from_headers(display, [item.header for item in fetched], warnings)
    store_headers(shards, fetched, settings)
    model.remote = True
    model.fetch_stats = {
        "fetched_bytes": client.fetched_bytes,
        "requests": client.requests,
        "cached_shards": sum(item.from_cache for item in fetched),
    }
    return model


def sibling_urls(url):
    """Every shard URL of the set `url` belongs to (from its -0000k-of-0000N name), in order."""
    parts = urlsplit(url)
    folder, base = posixpath.split(parts.path)
    match = SPLIT_NAME_RE.match(base)
    if not match:
        return [url]
    number, count = int(match["no"]), int(match["count"])
    if count == 0 or number == 0 or number > count:
        raise RemoteError(url, f"shard name says {number} of {count}")
    return [urlunsplit(parts._replace(path=posixpath.join(folder, f"{match['prefix']}-{index:05d}-of-{count:05d}.gguf")))
            for index in range(1, count + 1)]


def open_url(url, settings):
    """Open the model a plain http(s) URL names (any shard of a split set)."""
    if not urlsplit(url).path.endswith(".gguf"):
        raise RemoteError(url, "a MODEL URL must name a .gguf file")
    shards = [ShardRef(item, item, "url:" + item) for item in sibling_urls(url)]
    return open_shards(url, shards, settings, RangeClient(settings.timeout))
