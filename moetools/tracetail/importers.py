"""Other routing-trace formats -> tokens, and tokens -> the fork's 12-byte records.

- `route_trace v1` CSV (BigMoeOnEdge): `#` preamble, header, one row per routed expert
  `turn,phase,step,layer,slot,expert,weight,residency,expert_bytes` (phase 0 prefill, 1 decode).
- JSON lines: `{"token": t, "layer": l, "experts": [...]}` (optional `"phase"`: "prefill"/"decode"
  or 0/1).
- numpy `.npy`: an integer array `[tokens, layers, top_k]` of expert ids (negative = none).

Each importer returns an `Imported`: tokens as sorted request-id arrays (see reader.make_ids), a
phase per token when the format says it (else None), and what the file says about the model.
"""

import io
import json
import re
from dataclasses import dataclass, field

import numpy as np

from moetools.errors import FormatError, UsageError
from moetools.formats import trace as trace_format
from moetools.tracetail.reader import make_ids, split_ids

CSV_REQUIRED = ("turn", "phase", "step", "layer", "expert")
_PREAMBLE_RE = re.compile(r"(\w+)=(\S+)")


@dataclass
class Imported:
    tokens: list  # [int64 ids array]
    phases: list  # ["prefill" | "decode" | None] per token
    n_layers: int = 0
    n_expert: int = 0
    top_k: int = 0
    expert_bytes_by_layer: dict = field(default_factory=dict)
    architecture: str = ""  # from a route_trace preamble's arch=


def detect_format(name, head):
    """Format of a trace from its name and first bytes."""
    lower = str(name).lower()
    for suffix, fmt in ((".csv", "csv"), (".jsonl", "jsonl"), (".ndjson", "jsonl"), (".npy", "npy")):
        if lower.endswith(suffix):
            return fmt
    if head.startswith(b"\x93NUMPY"):
        return "npy"
    text = head[:64].lstrip()
    if text.startswith(b"# route_trace") or text.startswith(b"turn,"):
        return "csv"
    if text.startswith(b"{"):
        return "jsonl"
    return "trace"


def _int(value, path, line, column):
    try:
        return int(value)
    except (TypeError, ValueError):
        raise FormatError(path, f"line {line}: column {column!r} = {value!r} is not a whole number") from None


def read_csv(data, path):
    """route_trace v1 CSV bytes -> Imported (tokens in (turn, step) order)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise FormatError(path, "CSV trace is not UTF-8 text") from None
    meta = {}
    expert_bytes = {}
    header = None
    rows = []
    for number, line in enumerate(io.StringIO(text), start=1):
        line = line.strip()
        if not line:
            continue
        if line.startswith("#"):
            pairs = dict(_PREAMBLE_RE.findall(line))
            if "layer" in pairs and "expert_bytes" in pairs:
                expert_bytes[_int(pairs["layer"], path, number, "layer")] = _int(pairs["expert_bytes"], path, number, "expert_bytes")
            else:
                meta.update(pairs)
            continue
        cells = line.split(",")
        if header is None:
            header = [cell.strip() for cell in cells]
            missing = [name for name in CSV_REQUIRED if name not in header]
            if missing:
                raise FormatError(path, f"line {number}: CSV header lacks column(s) {', '.join(missing)} (route_trace v1 needs {','.join(CSV_REQUIRED)})")
            columns = [header.index(name) for name in CSV_REQUIRED]
            continue
        if len(cells) != len(header):
            raise FormatError(path, f"line {number}: {len(cells)} cells, header has {len(header)}")
        rows.append((number, [cells[c] for c in columns]))
    if header is None:
        raise FormatError(path, "empty CSV trace: no header line")
    if not rows:
        raise FormatError(path, "CSV trace has a header but no rows")
    try:
        table = np.asarray([cells for _, cells in rows]).astype(np.int64)
    except ValueError:
        for number, cells in rows:  # find the bad cell for the message
            for value, name in zip(cells, CSV_REQUIRED):
                _int(value, path, number, name)
        raise
    turn, phase, step, layer, expert = table.T
    if (layer < 0).any() or (expert < 0).any():
        raise FormatError(path, "negative layer or expert number")
    order = np.lexsort((expert, layer, step, turn))
    table = table[order]
    keys = table[:, [0, 2]]
    cuts = np.concatenate([[0], np.flatnonzero((keys[1:] != keys[:-1]).any(axis=1)) + 1, [len(table)]])
    tokens, phases = [], []
    for a, b in zip(cuts[:-1], cuts[1:]):
        part = table[a:b]
        tokens.append(np.unique(make_ids(part[:, 3], part[:, 4])))
        phases.append("decode" if part[0, 1] == 1 else "prefill")
    return Imported(
        tokens,
        phases,
        n_layers=int(meta.get("n_layer", 0) or 0),
        n_expert=int(meta.get("n_expert", 0) or 0),
        top_k=int(meta.get("n_expert_used", 0) or 0),
        expert_bytes_by_layer=expert_bytes,
        architecture=str(meta.get("arch", "")),
    )


def read_jsonl(data, path):
    """JSON lines `{"token", "layer", "experts"}` -> Imported (tokens in token-number order)."""
    by_token = {}
    phase_of = {}
    for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
        except json.JSONDecodeError as err:
            raise FormatError(path, f"line {number}: not JSON ({err.msg})") from None
        if not isinstance(doc, dict):
            raise FormatError(path, f"line {number}: expected an object")
        for key in ("token", "layer", "experts"):
            if key not in doc:
                raise FormatError(path, f"line {number}: no {key!r}", key=key)
        token, layer, experts = doc["token"], doc["layer"], doc["experts"]
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (token, layer)):
            raise FormatError(path, f"line {number}: token and layer must be whole numbers >= 0")
        if not isinstance(experts, list) or not all(isinstance(e, int) and not isinstance(e, bool) and e >= 0 for e in experts):
            raise FormatError(path, f"line {number}: experts must be a list of whole numbers >= 0", key="experts")
        by_token.setdefault(token, []).append(make_ids(np.full(len(experts), layer), experts))
        if "phase" in doc:
            phase = doc["phase"]
            phase_of[token] = "decode" if phase in (1, "decode") else "prefill"
    if not by_token:
        raise FormatError(path, "empty JSON-lines trace")
    tokens = [np.unique(np.concatenate(by_token[t])) for t in sorted(by_token)]
    phases = [phase_of.get(t) for t in sorted(by_token)]
    return Imported(tokens, phases)


def read_npy(data, path):
    """`.npy` integer array [tokens, layers, top_k] -> Imported."""
    try:
        array = np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, OSError, EOFError) as err:
        raise FormatError(path, f"not a readable .npy array ({err})") from None
    if array.ndim != 3:
        raise FormatError(path, f"array shape {list(array.shape)}: expected [tokens, layers, top_k]")
    if not np.issubdtype(array.dtype, np.integer):
        raise FormatError(path, f"array dtype {array.dtype}: expected integer expert ids")
    n_tokens, n_layers, top_k = array.shape
    layer_grid = np.broadcast_to(np.arange(n_layers)[:, None], (n_layers, top_k))
    tokens = []
    for t in range(n_tokens):
        experts = array[t].astype(np.int64)
        valid = experts >= 0
        tokens.append(np.unique(make_ids(layer_grid[valid], experts[valid])))
    return Imported(tokens, [None] * n_tokens, n_layers=n_layers, top_k=top_k)


READERS = {"csv": read_csv, "jsonl": read_jsonl, "npy": read_npy}


def import_trace(fmt, data, path):
    try:
        reader = READERS[fmt]
    except KeyError:
        raise UsageError(f"unknown trace format {fmt!r}") from None
    return reader(data, path)


def tokens_to_records(tokens, phases):
    """12-byte records (tkeys, experts) for tokens, as the fork would write them.

    Per token: layers ascending, and in each layer the gate, up and down matrices in turn, each a
    group of the token's experts ascending (the fork hashes with its own offset basis). Runs of
    consecutive prefill tokens are merged into one batch, as the fork records a prompt's ubatch:
    the reader's size rule then finds the prefill again. A following token always starts with a
    key the previous one used, so token boundaries survive the round trip."""
    keys = {}

    def key(layer, matrix):
        name = trace_format.expert_tensor_name(layer, matrix)
        if name not in keys:
            keys[name] = trace_format.fnv1a64(name)
        return keys[name]

    merged = []
    for ids, phase in zip(tokens, phases):
        if phase == "prefill" and merged and merged[-1][1] == "prefill":
            merged[-1] = (np.union1d(merged[-1][0], ids), "prefill")
        else:
            merged.append((ids, phase))
    tkey_parts, expert_parts = [], []
    for ids, _ in merged:
        layers, experts = split_ids(ids)
        bounds = np.concatenate([[0], np.flatnonzero(layers[1:] != layers[:-1]) + 1, [len(ids)]])
        for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            layer = int(layers[a])
            for matrix in trace_format.MATRICES:
                tkey_parts.append(np.full(b - a, key(layer, matrix), dtype=np.uint64))
                expert_parts.append(experts[a:b].astype(np.uint32))
    if not tkey_parts:
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.uint32)
    return np.concatenate(tkey_parts), np.concatenate(expert_parts)
