"""12-byte expert trace -> tokens: layer map, tokeniser, prefill/decode split, file follower.

A token is an int64 array of request ids, sorted ascending, one per (layer, expert) it routed to:
`id = layer << 32 | expert`, so the sort order is layers ascending, experts ascending within a
layer (the order the reference replays use).
"""

import os
import time
from dataclasses import dataclass, field

import numpy as np

import moetools.tracetail.curves as curves
from moetools.errors import InputError
from moetools.formats import trace as trace_format
from moetools.tracetail.kernels.tokens import token_cuts

LAYER_SHIFT = 32
EXPERT_MASK = (1 << LAYER_SHIFT) - 1
DECODE_DROP = 0.8  # decode starts below 0.8 x the smallest token seen so far (DESIGN section 3)
NEW_PROMPT_GROWTH = 1.25  # after decode, a token this much bigger than a decode token is a new prompt
UNKNOWN_MAJORITY = 0.5  # more unknown records than this share: a trace of another model
MAX_EXPERTS = 4096  # experts per layer accepted without a model (the largest MoE models have 384)


def make_ids(layers, experts):
    return (np.asarray(layers, dtype=np.int64) << LAYER_SHIFT) | np.asarray(experts, dtype=np.int64)


def split_ids(ids):
    """(layers, experts) int64 arrays of request ids."""
    ids = np.asarray(ids, dtype=np.int64)
    return ids >> LAYER_SHIFT, ids & EXPERT_MASK


@dataclass
class LayerMap:
    """Which tkey is which layer, and what the model says about its experts (0 = unknown)."""

    table: dict  # tkey -> (layer, basis name)
    source: str
    moe_layers: int = 0
    n_expert: int = 0
    top_k: int = 0
    expert_bytes_by_layer: dict = field(default_factory=dict)
    architecture: str = ""
    block_count: int = 0
    later_blocks: dict = field(default_factory=dict)  # synth only: tkey -> block >= block_count
    names: list = field(default_factory=list)  # [(expert tensor name, layer, matrix)]

    SYNTH_LOOKAHEAD = 512  # blocks past --synth-layers whose keys are recognised, to say so

    @classmethod
    def synth(cls, n_layers, n_expert=0, top_k=0):
        """Names blk.{L}.ffn_{gate,up,down}_exps.weight for L in range(n_layers): `n_layers` is the
        model's BLOCK count, as the daemon's `TkeyTable::for_layers(n_layers)` synthesises it
        (leading dense blocks included; their keys simply never appear)."""
        names = trace_format.synth_tensor_names(n_layers)
        pairs = [(name, int(name.split(".")[1])) for name in names]
        later = [(trace_format.expert_tensor_name(layer, matrix), layer)
                 for layer in range(n_layers, n_layers + cls.SYNTH_LOOKAHEAD) for matrix in trace_format.MATRICES]
        return cls(trace_format.key_table(pairs), f"synthesised {n_layers} blocks", n_layers, n_expert, top_k,
                   block_count=n_layers, later_blocks={key: layer for key, (layer, _) in trace_format.key_table(later).items()},
                   names=[(name, layer, name.split("_")[1]) for name, layer in pairs])

    @classmethod
    def from_model(cls, path, fetch=None):
        """Layer map from a GGUF's routed-expert tensor names (opened through moetools.gguf; `fetch`:
        the FetchSettings of a remote MODEL, --timeout and --offline)."""
        from moetools.gguf import expert_tensor_kind, open_model

        with open_model(path, fetch) as model:
            pairs, names = [], []
            for tensor in model.tensors:
                kind = expert_tensor_kind(tensor.name)
                if kind is not None:
                    pairs.append((tensor.name, kind[0]))
                    names.append((tensor.name, kind[0], kind[1]))
            layers = {layer for _, layer in pairs}
            summary = model.summary
            return cls(
                trace_format.key_table(pairs),
                str(path),
                len(layers),
                int(model.expert_count),
                int(summary.expert_used_count or 0),
                dict(model.expert_bytes_by_layer) if pairs else {},
                architecture=model.architecture,
                block_count=int(model.block_count),
                names=names,
            )

    @property
    def total_slots(self):
        return self.moe_layers * self.n_expert

    @property
    def expert_bytes(self):
        """Mean bytes of one (layer, expert) over the MoE layers; 0 when unknown."""
        return mean_expert_bytes(self.expert_bytes_by_layer)


def mean_expert_bytes(by_layer):
    """Mean of {layer: bytes of one expert}, rounded; 0 when empty."""
    values = list(by_layer.values())
    return int(round(sum(values) / len(values))) if values else 0


class Tokeniser:
    """Incremental 12-byte records -> tokens, with the fork's token-boundary rule.

    A tensor key already seen in the current token, reappearing after some other key, starts the
    next token; consecutive records with one key are one group. A torn final record is kept and
    completed by the next `feed`. Keys that match no expert tensor are counted and skipped."""

    def __init__(self, layer_map, path="<trace>"):
        self.layer_map = layer_map
        self.path = path
        self.reset()

    def reset(self):
        self.tail = b""
        self.records = 0
        self.unknown = 0
        self.basis_records = {name: 0 for name in trace_format.BASES}
        self.unknown_keys = set()
        self._keys = set()
        self._last_key = None
        self._parts = []

    def feed(self, data):
        """Consume raw bytes; returns the list of tokens completed by them (id arrays)."""
        tkeys, experts, self.tail = trace_format.decode_records(self.tail + bytes(data))
        if len(tkeys) == 0:
            return []
        limit = self.layer_map.n_expert or MAX_EXPERTS
        bad = np.flatnonzero(experts >= limit)
        if len(bad):
            offset = (self.records + int(bad[0])) * trace_format.RECORD_BYTES
            raise InputError(self.path, f"expert id {int(experts[bad[0]])} is out of range (experts per layer: {limit})", offset=offset)
        first_record = self.records
        self.records += len(tkeys)
        uniq, inverse = np.unique(tkeys, return_inverse=True)
        lut = np.full(len(uniq), -1, dtype=np.int64)
        counts = np.bincount(inverse.reshape(-1), minlength=len(uniq))
        for index, key in enumerate(uniq.tolist()):
            hit = self.layer_map.table.get(key)
            if hit is None:
                later = self.layer_map.later_blocks.get(key)
                if later is not None:
                    at = (first_record + int(np.flatnonzero(tkeys == key)[0])) * trace_format.RECORD_BYTES
                    raise InputError(self.path, f"keys of block {later} appear, but --synth-layers {self.layer_map.block_count} "
                                     f"synthesises blocks 0..{self.layer_map.block_count - 1}: --synth-layers is the "
                                     f"model's block count (give at least {later + 1})", offset=at)
                self.unknown_keys.add(key)
                continue
            lut[index] = hit[0]
            self.basis_records[hit[1]] += int(counts[index])
        layers = lut[inverse.reshape(-1)]
        known = layers >= 0
        self.unknown += int((~known).sum())
        ids = make_ids(np.where(known, layers, 0), experts)
        # The boundary rule runs over EVERY record, known key or not, as the daemon's
        # TokenSegmenter::push does (segment.rs): an unknown key reappearing also starts a token.
        run_starts = np.concatenate([[0], np.flatnonzero(tkeys[1:] != tkeys[:-1]) + 1])
        run_keys = inverse.reshape(-1)[run_starts].astype(np.int64)  # each run's key, as an index into uniq
        # the open token's keys so far (from earlier reads) and the last key, as indices into uniq
        stamp = np.full(len(uniq), -1, dtype=np.int64)
        if self._keys:
            carried = np.fromiter(self._keys, dtype=np.uint64, count=len(self._keys))
            at = np.minimum(np.searchsorted(uniq, carried), len(uniq) - 1)
            stamp[at[uniq[at] == carried]] = 0
        last = -1
        if self._last_key is not None:
            at = int(np.searchsorted(uniq, np.uint64(self._last_key)))
            last = at if at < len(uniq) and int(uniq[at]) == self._last_key else -1
        cuts = np.zeros(len(run_keys), dtype=np.int64)
        n_cuts, open_token = _token_cuts()(run_keys, last, stamp, cuts)
        tokens = []
        cut = 0
        for start in run_starts[cuts[:n_cuts]].tolist():
            self._parts.append(ids[cut:start][known[cut:start]])
            token = self._close()
            if len(token):  # the daemon skips a token with no known expert
                tokens.append(token)
            cut = start
        keys = set(uniq[stamp == open_token].tolist())
        self._keys = keys if n_cuts else self._keys | keys
        self._last_key = int(tkeys[run_starts[-1]])
        self._parts.append(ids[cut:][known[cut:]])
        return tokens

    def _close(self):
        token = np.unique(np.concatenate(self._parts)) if self._parts else np.zeros(0, dtype=np.int64)
        self._parts = []
        self._keys = set()
        self._last_key = None
        return token

    @property
    def has_open_token(self):
        return any(len(part) for part in self._parts)

    def flush(self):
        """End of input: the open token (if any) is complete. Returns it or None."""
        if not self._parts or not any(len(part) for part in self._parts):
            self._parts = []
            return None
        return self._close()

    @property
    def basis(self):
        """Which FNV offset basis the keys match: fork, standard, mixed or None."""
        used = [name for name, count in self.basis_records.items() if count]
        return used[0] if len(used) == 1 else ("mixed" if used else None)

    def check_model(self, path):
        """Raise when most records match no expert tensor: a trace of a different model."""
        if self.records and self.unknown > UNKNOWN_MAJORITY * self.records:
            raise InputError(
                path,
                f"{self.unknown} of {self.records} records ({self.unknown / self.records:.0%}) have keys that match no "
                f"expert tensor of {self.layer_map.source}: a trace of a different model?",
            )


def layer_counts(ids):
    """Experts per layer of one token: (layers, counts)."""
    layers = np.asarray(ids, dtype=np.int64) >> LAYER_SHIFT
    return np.unique(layers, return_counts=True)


class PhaseSplitter:
    """Online prefill/decode rule (DESIGN section 3), token by token.

    - `prefill=N`: the first N tokens are prefill, the rest decode.
    - Otherwise decode starts at the first token whose expert count is below 0.8 x the smallest
      seen so far, or at token 0 when the first token already looks like decode: no more experts
      than top-k x MoE layers (top-k known), or the same count k in every layer with 2k <= experts
      (top-k unknown).
    - After decode starts, a token more than 1.25 x the first decode token's size is the prefill
      batch of a new prompt (it is not a single token's routing)."""

    def __init__(self, prefill=None, top_k=0, moe_layers=0, n_expert=0):
        self.prefill = prefill
        self.top_k = top_k
        self.moe_layers = moe_layers
        self.n_expert = n_expert
        self.reset()

    def reset(self):
        self.index = 0
        self.min_seen = None
        self.decode_size = None

    def looks_like_decode(self, ids):
        layers, counts = layer_counts(ids)
        if len(counts) == 0:
            return False
        if self.top_k:
            return len(ids) <= self.top_k * (self.moe_layers or len(layers))
        k = int(counts[0])
        n_expert = self.n_expert or int((np.asarray(ids) & EXPERT_MASK).max()) + 1
        return bool((counts == k).all()) and 2 * k <= n_expert

    def classify(self, ids):
        """'prefill' or 'decode' for the next token."""
        index = self.index
        self.index += 1
        size = len(ids)
        if self.prefill is not None:
            return "decode" if index >= self.prefill else "prefill"
        if self.decode_size is None:
            if (index == 0 and self.looks_like_decode(ids)) or (
                self.min_seen is not None and size < DECODE_DROP * self.min_seen
            ):
                self.decode_size = size
                return "decode"
            self.min_seen = size if self.min_seen is None else min(self.min_seen, size)
            return "prefill"
        if size > NEW_PROMPT_GROWTH * self.decode_size:
            return "prefill"
        return "decode"


def read_whole(path):
    """All bytes of `path` (`-` = stdin)."""
    if str(path) == "-":
        import sys

        return sys.stdin.buffer.read()
    with open(path, "rb") as handle:
        return handle.read()


@dataclass
class FollowEvent:
    kind: str  # "data", "truncated", "deleted", "reappeared", "idle"
    data: bytes = b""


def follow(path, poll=0.2, max_idle=None, sleep=time.sleep, clock=time.monotonic, chunk=1 << 22):
    """Yield FollowEvents while `path` grows, like `tail -F`.

    A file that shrinks is a new serve ("truncated", then its bytes from offset 0). A deleted file
    yields "deleted" once, and we wait for it to come back (a new inode is a new serve:
    "reappeared"). Stops after `max_idle` seconds without new bytes (None = never). `sleep` and
    `clock` are injectable so tests stop deterministically."""
    offset = 0
    inode = None
    missing = False
    last_data = clock()
    handle = None
    try:
        while True:
            try:
                stat = os.stat(path)
            except FileNotFoundError:
                stat = None
            if stat is None:
                if inode is None:
                    raise FileNotFoundError(2, "No such file or directory", str(path))
                if not missing:
                    missing = True
                    if handle:
                        handle.close()
                        handle = None
                    yield FollowEvent("deleted")
            else:
                if missing or (inode is not None and stat.st_ino != inode):
                    if handle:
                        handle.close()
                        handle = None
                    offset = 0
                    missing = False
                    yield FollowEvent("reappeared")
                if handle is None:
                    handle = open(path, "rb")
                    inode = stat.st_ino
                    missing = False
                if stat.st_size < offset:
                    offset = 0
                    yield FollowEvent("truncated")
                if stat.st_size > offset:
                    handle.seek(offset)
                    data = handle.read(min(chunk, stat.st_size - offset))
                    if data:
                        offset += len(data)
                        last_data = clock()
                        yield FollowEvent("data", data)
                        continue
            if max_idle is not None and clock() - last_data >= max_idle:
                return
            yield FollowEvent("idle")
            sleep(poll)
    finally:
        if handle:
            handle.close()


def follow_stdin(chunk=1 << 16):
    """FollowEvents from stdin until EOF (a pipe has no truncation)."""
    import sys

    fd = sys.stdin.fileno()
    while True:
        data = os.read(fd, chunk)
        if not data:
            return
        yield FollowEvent("data", data)


def _token_cuts():
    """token_cuts (kernels/tokens.py) compiled (stackjit), or the plain function."""
    compiled = curves.compiled_stack()
    return token_cuts if compiled is None else compiled.token_cuts
