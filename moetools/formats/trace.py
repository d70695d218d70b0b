"""Expert trace (`GGML_MOE_TRACE_FILE`): flat 12-byte little-endian records `u64 tkey, u32 expert`.

No header and no token markers; the serving fork appends while it runs and a new serve truncates
the file. `tkey` is the 64-bit FNV-1a hash (prime 1099511628211) of the expert tensor's name
`blk.{L}.ffn_{gate|up|down}_exps.weight`; a name holding `#` (`CUDA0#blk.3.ffn_up_exps.weight#0`)
hashes only its middle segment. The fork seeds the hash with 1469598103934665603 rather than the
textbook 14695981039346656037, so readers accept both and report which one the keys match.

This module is the only place that reads or writes those bytes.
"""

from moetools import atomic

RECORD_BYTES = 12
FNV_PRIME = 1099511628211
FORK_OFFSET_BASIS = 1469598103934665603  # what the serving fork uses
STANDARD_OFFSET_BASIS = 14695981039346656037  # textbook FNV-1a 64
BASES = {"fork": FORK_OFFSET_BASIS, "standard": STANDARD_OFFSET_BASIS}
MATRICES = ("gate", "up", "down")
_MASK = (1 << 64) - 1


def record_dtype():
    import numpy as np

    return np.dtype([("tkey", "<u8"), ("expert", "<u4")])


def key_name(name):
    """The part of a tensor name the fork hashes (ggml-moe-residency.hpp `canonical_name_key`): no
    `#`, the whole name; else from after the first `#` to the last `#` after it, or to the end
    when there is only one (`CUDA0#blk.3.ffn_up_exps.weight#0` -> `blk.3.ffn_up_exps.weight`,
    `a#b` -> `b`, `a#b#c#d` -> `b#c`)."""
    first = name.find("#")
    if first < 0:
        return name
    rest = name[first + 1:]
    last = rest.rfind("#")
    return rest[:last] if last >= 0 else rest


def fnv1a64(name, basis=FORK_OFFSET_BASIS):
    """64-bit FNV-1a of `name` (UTF-8) seeded with `basis`."""
    value = basis
    for byte in key_name(name).encode("utf-8"):
        value = ((value ^ byte) * FNV_PRIME) & _MASK
    return value


def expert_tensor_name(layer, matrix):
    """The tensor name the fork hashes for one expert matrix of block `layer`."""
    return f"blk.{layer}.ffn_{matrix}_exps.weight"


def synth_tensor_names(n_layers):
    """Expert tensor names of a model with `n_layers` MoE blocks numbered 0..n_layers-1."""
    return [expert_tensor_name(layer, matrix) for layer in range(n_layers) for matrix in MATRICES]


def key_table(names_by_layer):
    """{tkey: (layer, basis name)} for every name under both offset bases.

    `names_by_layer` is an iterable of (tensor name, layer)."""
    table = {}
    for name, layer in names_by_layer:
        for basis_name, basis in BASES.items():
            table[fnv1a64(name, basis)] = (layer, basis_name)
    return table


def tkey_table_doc(names):
    """The `tkey-to-layer-matrix.json` the fork's pager driver reads (expert-pager-policy
    segment.rs `TkeyTable::from_json`): `{"<tkey as decimal string>": {"layer": L, "matrix": M}}`
    for [(tensor name, layer, matrix)], keys under the fork's offset basis."""
    return {str(fnv1a64(name)): {"layer": int(layer), "matrix": matrix} for name, layer, matrix in names}


def decode_records(buffer):
    """Split raw bytes into whole records and the torn tail.

    Returns (tkeys uint64 (n,), experts uint32 (n,), tail bytes) where `tail` is the 0..11 bytes
    of an incomplete final record, to be prepended to the next read."""
    import numpy as np

    whole = len(buffer) - len(buffer) % RECORD_BYTES
    records = np.frombuffer(buffer, dtype=record_dtype(), count=whole // RECORD_BYTES)
    return records["tkey"].copy(), records["expert"].copy(), bytes(buffer[whole:])


def encode_records(tkeys, experts):
    """Bytes of the records (tkeys, experts), in order."""
    import numpy as np

    records = np.empty(len(tkeys), dtype=record_dtype())
    records["tkey"] = tkeys
    records["expert"] = experts
    return records.tobytes()


def write_trace(path, tkeys, experts):
    """Write a whole trace atomically (temp name, fsync, rename)."""
    atomic.write_bytes(path, encode_records(tkeys, experts))
