"""The header cache: the first bytes of remote GGUF files (their whole header, nothing more), so a
second plan of the same model needs no download and `--offline` works.

One file per entry under the user cache folder (`$MOETOOLS_CACHE_DIR`, else `$XDG_CACHE_HOME/moetools`,
`~/.cache/moetools`, or `%LOCALAPPDATA%\\moetools\\cache` on Windows), in `headers/`. An entry is a
JSON line (key, ETag, commit, file size, length and BLAKE2b digest of the bytes) then the bytes.
Entries are written atomically (temporary file and rename, without fsync: a crash costs a re-fetch,
never a wrong entry) and only for headers that parsed completely; a reader checks the
key, the length and the digest and treats any mismatch as a miss, so a torn or foreign file is
never used. Keys: `url:URL` (checked against the server's ETag when online), `hf:ENDPOINT/REPO@COMMIT/PATH`
(immutable), and `hf-list:ENDPOINT/REPO@REVISION` for a repo's file listing (used offline).
"""

import hashlib
import json
import os

from moetools.atomic import write_bytes

_MAGIC = b"moetools-header-cache 1\n"


def cache_root(settings_dir=None):
    """The moetools user cache folder."""
    if settings_dir:
        return settings_dir
    explicit = os.environ.get("MOETOOLS_CACHE_DIR")
    if explicit:
        return explicit
    if os.name == "nt":
        base = os.environ.get("LOCALAPPDATA") or os.path.expanduser("~\\AppData\\Local")
        return os.path.join(base, "moetools", "cache")
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "moetools")


class HeaderCache:
    """Get and put header bytes (or a small JSON document) by key."""

    def __init__(self, root=None):
        self.folder = os.path.join(cache_root(root), "headers")

    def _path(self, key):
        return os.path.join(self.folder, hashlib.sha256(key.encode()).hexdigest()[:40] + ".bin")

    def get(self, key):
        """(meta dict, bytes) for a complete, verified entry, else None."""
        try:
            with open(self._path(key), "rb") as handle:
                blob = handle.read()
        except OSError:
            return None
        if not blob.startswith(_MAGIC):
            return None
        line_end = blob.find(b"\n", len(_MAGIC))
        if line_end < 0:
            return None
        try:
            meta = json.loads(blob[len(_MAGIC):line_end])
        except ValueError:
            return None
        data = blob[line_end + 1:]
        if (not isinstance(meta, dict) or meta.get("key") != key or meta.get("length") != len(data)
                or meta.get("blake2b") != hashlib.blake2b(data, digest_size=16).hexdigest()):
            return None
        return meta, data

    def put(self, key, data, **meta):
        """Store `data` under `key` atomically. A cache that cannot be written is skipped silently:
        it only saves time."""
        record = dict(meta, key=key, length=len(data), blake2b=hashlib.blake2b(data, digest_size=16).hexdigest())
        try:
            os.makedirs(self.folder, exist_ok=True)
            write_bytes(self._path(key), _MAGIC + json.dumps(record, sort_keys=True).encode() + b"\n" + bytes(data), durable=False)
        except Exception:  # noqa: BLE001 - OutputError or OSError: the cache is an optimisation
            return False
        return True

    def get_json(self, key):
        entry = self.get(key)
        if entry is None:
            return None
        try:
            return json.loads(entry[1])
        except ValueError:
            return None

    def put_json(self, key, doc):
        return self.put(key, json.dumps(doc, sort_keys=True).encode())
