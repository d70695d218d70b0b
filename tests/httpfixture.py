"""A real threaded HTTP server on loopback for the remote-source tests and benchmark.

It serves files from a folder with Range (206 + Content-Range), ETag / If-None-Match, HTTP/1.1
keep-alive, and, for the bad-input tests, switchable misbehaviour (ignore Range, redirect loops,
slow answers, short bodies, a changing ETag, fixed status codes). It also emulates the Hugging Face
Hub routes huggingface_hub and moetools use, so HF_ENDPOINT can point at it:

    GET /api/models/ORG/REPO[/revision/REV][?blobs=true]   model_info (sha, siblings with sizes)
    GET /ORG/REPO/resolve/REV/PATH    302 to /cdn/COMMIT/ORG/REPO/PATH with X-Repo-Commit,
                                      X-Linked-Etag, X-Linked-Size (as the Hub redirects LFS files)
    GET /cdn/COMMIT/ORG/REPO/PATH     the file, with Range

Errors carry the X-Error-Code header huggingface_hub maps to its exceptions (RepoNotFound,
RevisionNotFound, GatedRepo). The server binds 127.0.0.1 only and stops when its `with` ends.
"""

import hashlib
import json
import os
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

_RANGE_RE = re.compile(r"^bytes=(\d+)-(\d*)$")


class Repo:
    """An emulated Hub repo: `files` {path in repo: local file}, `commits` {revision: sha}."""

    def __init__(self, files, commit="a" * 40, branches=("main",), gated=False):
        self.files = dict(files)
        self.commit = commit
        self.branches = set(branches)
        self.gated = gated


class Behaviour:
    """Switches the tests flip to make the server misbehave."""

    def __init__(self):
        self.ignore_range = False
        self.status = None  # answer every file request with this status
        self.redirect_loop = False
        self.delay = 0.0  # seconds before answering a file request
        self.short_by = 0  # send this many bytes fewer than Content-Length says, then close
        self.long_by = 0  # a 206 body this many bytes longer than the range (Content-Length counts them)
        self.flip_etag_after = None  # after this many file requests the ETag changes
        self.commit_override = None  # X-Repo-Commit to send instead of the repo's
        self.no_etag = False


class Server:
    """`with Server(folder) as server:` -> server.url(name), server.hub_endpoint, counters."""

    def __init__(self, folder=None, repos=None):
        self.folder = folder
        self.repos = repos or {}
        self.behaviour = Behaviour()
        self.lock = threading.Lock()
        self.requests = 0
        self.file_requests = 0
        self.bytes_served = 0
        self.served_by_path = {}
        self.log = []

    # --- lifecycle ---------------------------------------------------------------------------

    def __enter__(self):
        server = self

        class Handler(_Handler):
            owner = server

        self.httpd = _QuietServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        return False

    @property
    def base(self):
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    @property
    def hub_endpoint(self):
        return self.base

    def url(self, name):
        return f"{self.base}/files/{name}"

    def reset_counters(self):
        with self.lock:
            self.requests = self.file_requests = self.bytes_served = 0
            self.served_by_path = {}
            self.log = []

    def count(self, path, sent):
        with self.lock:
            self.bytes_served += sent
            self.served_by_path[path] = self.served_by_path.get(path, 0) + sent


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        pass  # a client that hangs up mid-answer (as moetools does on a refused 200) is expected


def etag_of(path):
    stat = os.stat(path)
    return '"' + hashlib.sha256(f"{os.path.basename(path)}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:32] + '"'


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    owner = None

    def log_message(self, *args):
        pass

    head_only = False  # a HEAD request: the GET's status and headers, no body (llama.cpp's -mu asks first)

    def do_HEAD(self):  # noqa: N802 - http.server's name
        self.head_only = True
        try:
            self.do_GET()
        finally:
            self.head_only = False

    def do_GET(self):  # noqa: N802 - http.server's name
        owner = self.owner
        with owner.lock:
            owner.requests += 1
            owner.log.append(self.path)
        parts = urlsplit(self.path)
        path = unquote(parts.path)
        if path.startswith("/files/"):
            return self.serve_file(os.path.join(owner.folder, path[len("/files/"):]), path)
        if path.startswith("/loop/"):
            return self.redirect(f"/loop/{int(path.rsplit('/', 1)[1]) % 3 + 1}")
        if path.startswith("/api/models/"):
            return self.model_info(path[len("/api/models/"):])
        if path.startswith("/cdn/"):
            _, _, commit, org, name, rest = path.split("/", 5)
            repo = owner.repos.get(f"{org}/{name}")
            if repo is None or commit != repo.commit or rest not in repo.files:
                return self.plain(404, "no such object")
            return self.serve_file(repo.files[rest], path)
        match = re.match(r"^/([^/]+)/([^/]+)/resolve/([^/]+)/(.+)$", path)
        if match:
            return self.resolve(f"{match[1]}/{match[2]}", match[3], match[4])
        return self.plain(404, "no route")

    # --- Hub routes ----------------------------------------------------------------------------

    def repo_or_error(self, repo_id, revision):
        repo = self.owner.repos.get(repo_id)
        if repo is None:
            self.plain(404, "Repository not found", {"X-Error-Code": "RepoNotFound"})
            return None
        if repo.gated and "Authorization" not in self.headers:
            self.plain(401, "Access to model is restricted", {"X-Error-Code": "GatedRepo"})
            return None
        if revision is not None and revision not in repo.branches and revision != repo.commit:
            self.plain(404, "Invalid rev id", {"X-Error-Code": "RevisionNotFound"})
            return None
        return repo

    def model_info(self, rest):
        parts = rest.split("/")
        repo_id = "/".join(parts[:2])
        if len(parts) >= 3 and parts[2] in ("refs", "tree"):
            return self.llama_routes(repo_id, parts[2:])
        revision = unquote(parts[3]) if len(parts) >= 4 and parts[2] == "revision" else None
        repo = self.repo_or_error(repo_id, revision)
        if repo is None:
            return
        siblings = []
        for name, local in sorted(repo.files.items()):
            size = os.path.getsize(local)
            siblings.append({"rfilename": name, "size": size, "blobId": "b" * 40,
                             "lfs": {"size": size, "sha256": "c" * 64, "pointerSize": 135}})
        body = json.dumps({"id": repo_id, "modelId": repo_id, "sha": repo.commit, "private": False,
                           "gated": repo.gated, "siblings": siblings}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def llama_routes(self, repo_id, parts):
        """The two API routes llama.cpp's `-hf` reads (common/hf-cache.cpp): the branches with their
        commits (`refs`), and a commit's file list (`tree/COMMIT?recursive=true`)."""
        repo = self.repo_or_error(repo_id, parts[1] if parts[0] == "tree" and len(parts) > 1 else None)
        if repo is None:
            return
        if parts[0] == "refs":
            doc = {"branches": [{"name": name, "targetCommit": repo.commit} for name in repo.branches], "tags": []}
        else:
            doc = [{"type": "file", "path": name, "size": os.path.getsize(local)} for name, local in sorted(repo.files.items())]
        body = json.dumps(doc).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def resolve(self, repo_id, revision, name):
        repo = self.repo_or_error(repo_id, revision)
        if repo is None:
            return
        if name not in repo.files:
            return self.plain(404, "Entry not found", {"X-Error-Code": "EntryNotFound"})
        local = repo.files[name]
        commit = self.owner.behaviour.commit_override or repo.commit
        if self.headers.get("User-Agent", "").startswith("llama-cpp/"):
            # llama.cpp's HTTP client (cpp-httplib) fails now and then (status -1, in about 1.5 ms)
            # to follow this server's same-host redirect on its HEAD; its -hf check needs the Hub's
            # routes and files, not the redirect, so the resolve route serves it the file directly
            return self.serve_file(local, f"/cdn/{repo.commit}/{repo_id}/{name}")
        self.redirect(f"/cdn/{repo.commit}/{repo_id}/{name}", {
            "X-Repo-Commit": commit, "X-Linked-Etag": etag_of(local), "X-Linked-Size": str(os.path.getsize(local)),
            "ETag": etag_of(local)})

    # --- files -----------------------------------------------------------------------------

    def serve_file(self, local, path):
        owner, behaviour = self.owner, self.owner.behaviour
        with owner.lock:
            owner.file_requests += 1
            file_requests = owner.file_requests
        if behaviour.delay:
            time.sleep(behaviour.delay)
        if behaviour.redirect_loop:
            return self.redirect("/loop/1")
        if behaviour.status:
            return self.plain(behaviour.status, "configured failure")
        if not os.path.isfile(local):
            return self.plain(404, "not found")
        size = os.path.getsize(local)
        etag = etag_of(local)
        if behaviour.flip_etag_after is not None and file_requests > behaviour.flip_etag_after:
            etag = '"changed"'
        match = _RANGE_RE.match(self.headers.get("Range", ""))
        if self.headers.get("If-None-Match") == etag and not behaviour.no_etag:
            self.send_response(304)
            self.send_header("ETag", etag)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if behaviour.ignore_range or not match:
            start, end, status = 0, size, 200
        else:
            start = int(match[1])
            end = min(size, int(match[2]) + 1) if match[2] else size
            if start >= size:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            status = 206
        self.send_response(status)
        self.send_header("Accept-Ranges", "bytes")
        if not behaviour.no_etag:
            self.send_header("ETag", etag)
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
        extra = behaviour.long_by if status == 206 else 0
        self.send_header("Content-Length", str(end - start + extra))
        self.end_headers()
        if self.head_only:
            return
        send = end - start - behaviour.short_by if status == 206 else end - start
        with open(local, "rb") as handle:
            handle.seek(start)
            remaining = max(0, send)
            try:
                while remaining:
                    block = handle.read(min(remaining, 1 << 20))
                    self.wfile.write(block)
                    owner.count(path, len(block))
                    remaining -= len(block)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True
                return
        if extra:
            try:
                self.wfile.write(b"\0" * extra)
                owner.count(path, extra)
            except (BrokenPipeError, ConnectionResetError):
                pass
            self.close_connection = True
        if behaviour.short_by:
            self.close_connection = True

    # --- helpers ----------------------------------------------------------------------------

    def redirect(self, location, headers=None):
        self.send_response(302)
        self.send_header("Location", location)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def plain(self, status, text, headers=None):
        body = text.encode()
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not self.head_only:
            self.wfile.write(body)



class _RawServer:
    """A loopback TCP server that answers each connection with `_answer(connection)` on its own thread
    (no HTTP library: the misbehaviour is byte by byte). `with Server() as server: server.url(name)`."""

    def __init__(self):
        import socket

        self.listener = socket.create_server(("127.0.0.1", 0))
        self.connections = []
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self):
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:  # closed by __exit__
                return
            self.connections.append(connection)
            threading.Thread(target=self._guarded, args=(connection,), daemon=True).start()

    def _guarded(self, connection):
        try:
            self._answer(connection)
        except OSError:  # the client gave up, or __exit__ closed the connection
            pass

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stopped.set()
        self.listener.close()
        for connection in self.connections:
            connection.close()
        return False

    def url(self, name):
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}/{name}"


class SilentServer(_RawServer):
    """Takes each connection and its request and never answers: a stalled remote MODEL (what a FIFO
    stood for before moetools refused FIFOs). `asked` is set once a request has arrived, so a test knows
    the client is waiting."""

    def __init__(self):
        super().__init__()
        self.asked = threading.Event()

    def _answer(self, connection):
        if connection.recv(65536):
            self.asked.set()


class DripServer(_RawServer):
    """Answers every request with a 206 for the first `size` bytes of a file of `size` bytes, sending
    its status line and headers (with `drip_head`) and its body one byte every `interval` seconds: a
    slow-drip server whose every read is quick, so only a deadline on the whole request stops a client."""

    def __init__(self, interval, size=100, drip_head=False):
        super().__init__()
        self.interval, self.size, self.drip_head = interval, size, drip_head

    def _answer(self, connection):
        head = (f"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-{self.size - 1}/{self.size}\r\n"
                f"Content-Length: {self.size}\r\nETag: \"drip\"\r\n\r\n").encode()
        connection.recv(65536)
        if not self.drip_head:
            connection.sendall(head)
            head = b""
        for byte in head + b"G" * self.size:
            if self.stopped.wait(self.interval):
                return
            connection.sendall(bytes([byte]))
