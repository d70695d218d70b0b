"""All-or-nothing, resumable quantize runs (the staging folder of formats/quantize_staging.py).

    key = run_key(model, plans)
    pieces = reusable_pieces(out_dir, key)         # verified files a killed run of this plan finished
    ... write each missing file into staging_path(out_dir, name), record_piece(...) after each ...
    publish(out_dir, key, files, remove, results)   # commit point, then the renames

Nothing a run writes is under a final name in OUT before every file of the run is complete; a run
killed at any point leaves either nothing visible (a later run reuses what was finished) or a
committed journal that the next run in OUT completes (`finish_committed`).
"""

import contextlib
import json
import os

from moetools import atomic
from moetools.errors import OutputError
from moetools.formats import quantize_staging as staging

FAULT_ENV = "MOETOOLS_QUANTIZE_FAULT"  # tests: "piece:N" / "publish:N" / "commit" / "install" end the process there
HASH_CHUNK = 16 << 20


def fault_point(kind, count=None):
    """End the process abruptly (os._exit: no clean-up runs, as under kill -9, on every platform)
    at the point the test environment names: `piece:N` after the Nth finished file, `publish:N`
    after the Nth rename into the output folder, `commit` right after the journal is written, `install` after
    the publish of an `--install` run, before its override is made."""
    wanted = os.environ.get(FAULT_ENV, "")
    if not wanted:
        return
    name, _, number = wanted.partition(":")
    if name == kind and (count is None or number == str(count)):
        os._exit(137)


def staging_path(out_dir, name):
    return os.path.join(staging.staging_dir(out_dir), name)


def run_key(model, plans):
    """A digest of everything that decides the bytes of a run's outputs: the source's identity,
    each tier's label, file type and file names, every tensor's type, action and file, and the
    importance weights used. A staged piece is reused only by a run with the same key."""
    import xxhash

    digest = xxhash.xxh3_128()
    doc = {"source": os.path.basename(model.path), "fingerprint": model.fingerprint, "tiers": []}
    for plan in plans:
        doc["tiers"].append({
            "tier": plan.tier, "file_type": plan.file_type, "files": [os.path.basename(path) for path in plan.gguf_paths],
            "manifest": os.path.basename(plan.manifest_path) if plan.manifest_path else "", "full": plan.full,
            "measure": plan.measure,
            "imatrix": None if plan.imatrix is None else [str(plan.imatrix.path), list(plan.imatrix.datasets),
                                                           len(plan.imatrix.entries), plan.imatrix.chunk_count],
            "tensors": [[p.tensor.name, p.out_type, p.action, p.out_shard] for p in plan.tensors]})
        for tensor_plan in plan.tensors:
            if tensor_plan.imatrix is not None:
                digest.update(tensor_plan.imatrix.tobytes())
    digest.update(json.dumps(doc, sort_keys=True).encode())
    return digest.hexdigest()


def file_digest(path):
    import xxhash

    digest = xxhash.xxh3_128()
    with open(path, "rb") as handle:
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


class HashingWriter:
    """A write-only file wrapper that hashes what goes through it (so a finished piece's digest
    costs no second read) and counts its position."""

    def __init__(self, handle, path):
        import xxhash

        self.handle = handle
        self.path = path  # the output's final path, for messages
        self.digest = xxhash.xxh3_128()
        self.position = 0

    def write(self, data):
        try:
            self.handle.write(data)
        except OSError as err:
            raise OutputError(f"{self.path}: write failed: {err.strerror or err}") from None
        self.digest.update(data)
        self.position += data.nbytes if hasattr(data, "nbytes") else len(data)

    def tell(self):
        return self.position


def reusable_pieces(out_dir, key):
    """{name: piece doc} of the staged files a killed run with this `key` finished and whose bytes
    still hash to what it recorded. A staging folder of another plan (or none) is cleared."""
    state = staging.read_state(out_dir)
    if state is None or state["key"] != key:
        staging.clear(out_dir)
        return {}
    pieces = {}
    for name, piece in state["pieces"].items():
        path = staging_path(out_dir, name)
        try:
            if (isinstance(piece, dict) and os.path.getsize(path) == piece.get("bytes")
                    and file_digest(path) == piece.get("xxh3")):
                pieces[name] = piece
        except OSError:
            continue
    return pieces


def finish_committed(out_dir):
    """Complete the publish of a run that was killed after its commit point: the renames it had
    not done yet, then the staging folder's removal. Returns its journal (None when there was none)."""
    journal = staging.read_journal(out_dir)
    if journal is None:
        return None
    _apply(out_dir, journal)
    return journal


def _apply(out_dir, journal):
    for name in journal["remove"]:
        if os.path.exists(staging_path(out_dir, name)):  # its replacement is not published yet
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(out_dir, name))
    for count, name in enumerate(journal["files"], 1):
        source = staging_path(out_dir, name)
        if os.path.exists(source):  # already moved by the run that was killed, else move it now
            atomic.replace(source, os.path.join(out_dir, name))
            atomic.fsync_dir(out_dir)
        fault_point("publish", count)
    staging.clear(out_dir)
    atomic.fsync_dir(out_dir)


def publish(out_dir, key, files, remove, results):
    """Commit the staged run (its journal), then move its files into `out_dir` in order."""
    staging.write_journal(out_dir, key, files, remove, results)
    fault_point("commit")
    _apply(out_dir, staging.read_journal(out_dir))


def publish_order(plans):
    """The files of a run in the order they become visible: every tier's GGUFs (of a split set the
    first shard, the one a user opens, last), then the manifests; and the older manifests of
    these tiers, removed before anything is renamed (a reader never pairs one with a new GGUF)."""
    ggufs, manifests = [], []
    for plan in plans:
        names = [os.path.basename(path) for path in plan.gguf_paths]
        ggufs.extend(names[1:] + names[:1])
        if plan.manifest_path:
            manifests.append(os.path.basename(plan.manifest_path))
    return ggufs + manifests, manifests
