"""Importance matrices as llama-imatrix writes them, read as llama-quantize loads them.

Two formats (llama.cpp common/imatrix-loader.cpp, tools/quantize/quantize.cpp load_imatrix):
- GGUF (`general.type` = imatrix): per weight `NAME.in_sum2` (F32, ne0 x n_mat: summed squared
  activations per column, one row per expert matrix) and `NAME.counts` (F32, 1 x n_mat: tokens
  seen per matrix), with `imatrix.datasets`, `imatrix.chunk_count`, `imatrix.chunk_size`, which
  llama-quantize requires. Weight = sum / round(count), or 1 where a matrix saw no token.
- legacy `.dat`: i32 entry count; per entry i32 name length, name, i32 ncall, i32 value count,
  f32 values (already mean-normalised and scaled by ncall); then optionally i32 chunk count,
  i32 dataset name length, dataset name. Weight = value / ncall (the value itself when ncall is 0).

`read_imatrix(path)` returns the weights llama-quantize hands to ggml, float32 per entry, computed
with its float32 operations. A file that is neither, or cut short, or holding a NaN/inf weight is an
InputError (exit 2).
"""

import os
import struct

from moetools.errors import InputError

GGUF_MAGIC = b"GGUF"
DATASETS_KEY = "imatrix.datasets"
CHUNK_COUNT_KEY = "imatrix.chunk_count"
CHUNK_SIZE_KEY = "imatrix.chunk_size"


class Imatrix:
    """Per-weight importance vectors: `entries[name]` float32 (ne0 * n_mat,), matrix j at [j*ne0:(j+1)*ne0]."""

    def __init__(self, path, entries, datasets, chunk_count, legacy):
        self.path = path
        self.entries = entries
        self.datasets = datasets
        self.chunk_count = chunk_count
        self.legacy = legacy

    @property
    def format(self):
        return "dat" if self.legacy else "gguf"


def read_imatrix(path):
    """Read an imatrix file of either format; InputError for anything llama-quantize would refuse."""
    try:
        with open(path, "rb") as handle:
            magic = handle.read(4)
    except OSError as err:
        raise InputError(path, f"cannot read the imatrix: {err.strerror or err}") from None
    imatrix = _read_gguf(path) if magic == GGUF_MAGIC else _read_legacy(path)
    _check_finite(imatrix)
    return imatrix


def _check_finite(imatrix):
    import numpy as np

    for name, values in imatrix.entries.items():
        if not np.isfinite(values).all():
            raise InputError(imatrix.path, f"imatrix entry {name!r} holds a non-finite value", key=name)


def _read_legacy(path):
    import numpy as np

    with open(path, "rb") as handle:
        data = handle.read()
    position = 0

    def take(count, what):
        nonlocal position
        if position + count > len(data):
            raise InputError(path, f"legacy imatrix is truncated: {what} needs {count} bytes at offset {position}, "
                             f"the file ends at {len(data)}", offset=position)
        chunk = data[position:position + count]
        position += count
        return chunk

    def i32(what):
        return struct.unpack("<i", take(4, what))[0]

    n_entries = i32("the entry count")
    if n_entries < 1:
        raise InputError(path, f"not an imatrix: no GGUF magic, and as a legacy .dat it holds {n_entries} entries", offset=0)
    entries = {}
    for index in range(n_entries):
        length = i32(f"entry {index + 1}'s name length")
        if length < 1 or length > 4096:
            raise InputError(path, f"not an imatrix (legacy .dat entry {index + 1} has a name of {length} bytes)",
                             offset=position - 4)
        raw_name = take(length, f"entry {index + 1}'s name")
        try:
            name = raw_name.decode("utf-8")
        except UnicodeDecodeError:
            raise InputError(path, f"not an imatrix (legacy .dat entry {index + 1}'s name is not text)",
                             offset=position - length) from None
        ncall = i32(f"{name}'s call count")
        n_values = i32(f"{name}'s value count")
        if n_values < 1:
            raise InputError(path, f"legacy imatrix entry {name!r} has {n_values} values", offset=position - 4, key=name)
        sums = np.frombuffer(take(4 * n_values, f"{name}'s {n_values} values"), dtype="<f4").astype(np.float32)
        # llama-quantize: e[i] = sums[i] / ncall in float32 (the raw values when ncall is 0)
        entries[name] = sums / np.float32(ncall) if ncall > 0 else sums.copy()
    chunk_count, datasets = 0, []
    if position < len(data):  # optional trailer: chunk count and dataset name
        if position + 4 <= len(data):
            chunk_count = struct.unpack_from("<i", data, position)[0]
            position += 4
            if position + 4 <= len(data):
                length = struct.unpack_from("<i", data, position)[0]
                position += 4
                if 0 < length <= len(data) - position:
                    datasets.append(data[position:position + length].decode("utf-8", "replace"))
    return Imatrix(path, entries, datasets, chunk_count, legacy=True)


def _read_gguf(path):
    import numpy as np

    from moetools.gguf.header import read_header

    header = read_header(path)
    missing = [key for key in (DATASETS_KEY, CHUNK_COUNT_KEY, CHUNK_SIZE_KEY) if key not in header.metadata]
    if missing:
        raise InputError(path, f"GGUF imatrix lacks {', '.join(missing)} (llama-quantize refuses it: missing imatrix metadata)")
    if not header.tensors:
        raise InputError(path, "GGUF imatrix holds no tensors")
    pairs = {}
    for tensor in header.tensors:
        for suffix, slot in ((".in_sum2", 0), (".counts", 1)):
            if tensor.name.endswith(suffix):
                pairs.setdefault(tensor.name[: -len(suffix)], [None, None])[slot] = tensor
    file_size = os.path.getsize(path)
    entries = {}
    with open(path, "rb") as handle:
        def values(tensor):
            if tensor.type_id != 0:
                raise InputError(path, f"imatrix tensor {tensor.name!r} is {tensor.type_name}, not F32", key=tensor.name)
            if tensor.offset + tensor.n_bytes > file_size:
                raise InputError(path, f"GGUF imatrix is truncated: {tensor.name!r} ends at byte "
                                 f"{tensor.offset + tensor.n_bytes}, the file at {file_size}", offset=tensor.offset)
            handle.seek(tensor.offset)
            return np.frombuffer(handle.read(tensor.n_bytes), dtype="<f4").astype(np.float32)

        for name in sorted(pairs):
            sums_info, counts_info = pairs[name]
            if sums_info is None or counts_info is None:
                raise InputError(path, f"imatrix entry {name!r} has {'no sums' if sums_info is None else 'no counts'} "
                                 "(mismatched sums and counts)", key=name)
            sums, counts = values(sums_info), values(counts_info)
            if not counts.size or sums.size % counts.size:
                raise InputError(path, f"imatrix entry {name!r}: {sums.size} sums do not divide into {counts.size} matrices",
                                 key=name)
            # counts: std::lround to int64, back to float; weight = sum / count, or 1 without tokens
            rounded = (np.sign(counts) * np.floor(np.abs(counts.astype(np.float64)) + 0.5)).astype(np.float32)
            ne0 = sums.size // counts.size
            per_matrix = sums.reshape(counts.size, ne0)
            with np.errstate(divide="ignore", invalid="ignore"):
                weights = per_matrix / rounded[:, None]
            weights[rounded <= 0] = np.float32(1)
            entries[name] = weights.reshape(-1).astype(np.float32)
    datasets = header.metadata.get(DATASETS_KEY)
    if hasattr(datasets, "load"):
        datasets = datasets.load()
    return Imatrix(path, entries, list(datasets or []), int(header.metadata.get(CHUNK_COUNT_KEY) or 0), legacy=False)
