"""Mutation fuzzing of the GGUF reader through whole commands (inspect and device-fit).

The only acceptable outcomes of a mutant are exit 0, 1 or a clean one-line error (exit 2); an
`internal error` (what cli.py turns an unexpected exception into) or any exception out of the command
is a bug. Used by tests/test_reader_fuzz.py (a quick run) and benchmarks/fuzz_reader.py (10,000
mutants with time and memory limits). It lives outside moetools/gguf: the reader knows no command line.

Two mutators: `mutate` (blind: byte flips, truncations, extreme lengths and counts anywhere) and
`StructuredMutator` (knows where each field of this header is: counts, string and array lengths,
value and tensor type ids, dimensions, data offsets, the alignment, split keys, block counts and the
block numbers in tensor names, and sets one of them to a value that matters).
"""

import random
import struct
import time
import tracemalloc

from click.testing import CliRunner

from moetools.cli import cli
from moetools.gguf.header import read_header

_INTERESTING_U64 = (0, 1, 2**31, 2**32 - 1, 2**32, 2**63, 2**64 - 1)
_INTERESTING_U32 = (0, 1, 3, 9, 13, 42, 2**31, 2**32 - 1)


def mutate(header_bytes, rng):
    """One blind mutation of a header: byte flips, a truncation, or an extreme length/count."""
    data = bytearray(header_bytes)
    kind = rng.randrange(4)
    if kind == 0:
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
    elif kind == 1:
        del data[rng.randrange(len(data)):]
    elif kind == 2:
        at = rng.randrange(max(1, len(data) - 8))
        data[at:at + 8] = struct.pack("<Q", rng.choice(_INTERESTING_U64))
    else:
        at = rng.randrange(max(1, len(data) - 4))
        data[at:at + 4] = struct.pack("<I", rng.choice(_INTERESTING_U32))
    return bytes(data), kind == 1


# value type id -> struct format of a scalar (strings and arrays walked separately)
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


class Field:
    """One field of the header: where it is, its struct format and what kind of thing it holds."""

    __slots__ = ("offset", "fmt", "kind", "key")

    def __init__(self, offset, fmt, kind, key=None):
        self.offset, self.fmt, self.kind, self.key = offset, fmt, kind, key


def header_fields(data):
    """Walk a valid GGUF header and list its fields (Field), tensor data offsets included."""
    fields = [Field(8, "<Q", "tensor_count"), Field(16, "<Q", "kv_count")]
    n_tensors, n_kv = struct.unpack_from("<QQ", data, 8)
    at = 24

    def string(kind, key=None):
        nonlocal at
        (length,) = struct.unpack_from("<Q", data, at)
        fields.append(Field(at, "<Q", kind, key))
        at += 8
        text = bytes(data[at:at + length]).decode("utf-8", "replace")
        start = at
        at += length
        return text, start

    for _ in range(n_kv):
        key, _ = string("key_length")
        fields.append(Field(at, "<I", "value_type", key))
        (value_type,) = struct.unpack_from("<I", data, at)
        at += 4
        if value_type == 8:
            string("string_length", key)
        elif value_type == 9:
            fields.append(Field(at, "<I", "array_type", key))
            (elem_type,) = struct.unpack_from("<I", data, at)
            fields.append(Field(at + 4, "<Q", "array_length", key))
            (count,) = struct.unpack_from("<Q", data, at + 4)
            at += 12
            if elem_type == 8:
                for index in range(count):
                    if index < 4:
                        string("string_length", key)
                    else:
                        (length,) = struct.unpack_from("<Q", data, at)
                        at += 8 + length
            else:
                at += count * struct.calcsize("<" + _SCALARS[elem_type])
        else:
            fmt = "<" + _SCALARS[value_type]
            kind = "count_value" if fmt in ("<I", "<Q", "<i", "<q") else "scalar_value"
            if key == "general.alignment":
                kind = "alignment"
            elif key.startswith("split."):
                kind = "split_key"
            fields.append(Field(at, fmt, kind, key))
            at += struct.calcsize(fmt)
    for _ in range(n_tensors):
        name, name_at = string("name_length")
        if name.startswith("blk."):
            digits = name[4:].split(".", 1)[0]
            if digits.isdigit():
                fields.append(Field(name_at + 4, f"{len(digits)}s", "block_number", name))
        fields.append(Field(at, "<I", "n_dims", name))
        (n_dims,) = struct.unpack_from("<I", data, at)
        at += 4
        for _ in range(n_dims):
            fields.append(Field(at, "<Q", "dimension", name))
            at += 8
        fields.append(Field(at, "<I", "tensor_type", name))
        fields.append(Field(at + 4, "<Q", "data_offset", name))
        at += 12
    return fields


class StructuredMutator:
    """Sets one (sometimes two) header fields to values that reach the reader's checks."""

    def __init__(self, header_bytes):
        self.data = bytes(header_bytes)
        self.fields = header_fields(self.data)
        self.offsets = [struct.unpack_from("<Q", self.data, f.offset)[0] for f in self.fields if f.kind == "data_offset"]

    def value_for(self, field, old, rng):
        kind = field.kind
        if kind == "block_number":
            width = int(field.fmt[:-1])
            return str(rng.choice([0, 1, int(old) + 1, int(old) - 1, 10**width - 1])).zfill(width)[-width:].encode()
        if kind in ("tensor_type", "value_type", "array_type"):
            return rng.choice([0, 1, 2, 8, 9, 12, 14, 15, 30, 31, 39, 40, 41, 42, 2**31, 2**32 - 1, rng.randrange(64)])
        if kind == "data_offset":
            return rng.choice([0, old + 32, max(0, old - 32), old + 1, rng.choice(self.offsets), 2**63, 2**64 - 32])
        if kind == "alignment":
            return rng.choice([0, 1, 3, 16, 48, 4096, 2**31, 2**32 - 1])
        if kind == "n_dims":
            return rng.choice([0, 1, 2, 3, 4, 5, 2**32 - 1])
        if kind == "split_key":
            return rng.choice([0, 1, 2, old + 1, max(0, old - 1), 2**16, 2**31])
        small = [0, 1, 2, old + 1, max(0, old - 1), old * 2, 511, 512, 513, 1024, 1025]
        huge = [2**31, 2**32 - 1, 100_000_000] + ([2**32, 2**63, 2**64 - 1] if field.fmt == "<Q" else [])
        return rng.choice(small + huge)

    def mutate(self, rng):
        data = bytearray(self.data)
        for _ in range(1 if rng.random() < 0.8 else 2):
            field = rng.choice(self.fields)
            if field.kind == "block_number":
                old = bytes(data[field.offset:field.offset + int(field.fmt[:-1])]).decode()
                data[field.offset:field.offset + len(old)] = self.value_for(field, old, rng)
                continue
            (old,) = struct.unpack_from(field.fmt, data, field.offset)
            value = self.value_for(field, old if isinstance(old, int) else 0, rng)
            if field.fmt in ("<f", "<d"):
                value = float(rng.choice([0.0, -1.0, float("nan"), float("inf"), 1e300 if field.fmt == "<d" else 1e30]))
            elif field.fmt == "<?":
                value = bool(value & 1)
            else:
                bits = struct.calcsize(field.fmt) * 8
                signed = field.fmt[-1].islower()
                value %= 2**bits
                if signed and value >= 2 ** (bits - 1):
                    value -= 2**bits
            struct.pack_into(field.fmt, data, field.offset, value)
        return bytes(data), False


COMMANDS = (("inspect", "--json", "--tensors"), ("device-fit", "--vram", "24G", "--json"))


class Outcome:
    def __init__(self):
        self.runs = self.clean_errors = self.accepted = 0
        self.crashes = []  # (command, message)
        self.slowest = 0.0
        self.peak_ratio = 0.0  # peak traced allocation / file size


def run_commands(path, outcome, file_size, measure_memory=False):
    """Run every command of COMMANDS on `path` in-process; record crashes, time and memory."""
    runner = CliRunner()
    for command, *options in COMMANDS:
        if measure_memory:
            tracemalloc.reset_peak()
        start = time.perf_counter()
        result = runner.invoke(cli, [command, str(path), *options])
        elapsed = time.perf_counter() - start
        outcome.runs += 1
        outcome.slowest = max(outcome.slowest, elapsed)
        if measure_memory:
            outcome.peak_ratio = max(outcome.peak_ratio, tracemalloc.get_traced_memory()[1] / file_size)
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            outcome.crashes.append((command, f"{type(result.exception).__name__}: {result.exception}"))
        elif "internal error" in result.stderr or "Traceback" in result.stderr:
            outcome.crashes.append((command, result.stderr.strip()))
        elif result.exit_code == 2:
            outcome.clean_errors += 1
        else:
            outcome.accepted += 1


def fuzz_file(source_path, work_path, iterations, seed=0, structured=0.5, measure_memory=False, outcome=None):
    """Mutate `source_path`'s header `iterations` times and run inspect and device-fit on each mutant.

    `structured` is the share of mutants from StructuredMutator (the rest blind). Each mutant keeps
    the original file size (sparse tail) unless it was a truncation. Returns an Outcome.
    """
    rng = random.Random(seed)
    original = read_header(source_path)
    with open(source_path, "rb") as handle:
        header_bytes = handle.read(original.data_offset)
    structured_mutator = StructuredMutator(header_bytes)
    outcome = outcome or Outcome()
    if measure_memory:
        tracemalloc.start()
    try:
        for _ in range(iterations):
            if rng.random() < structured:
                mutant, truncated = structured_mutator.mutate(rng)
            else:
                mutant, truncated = mutate(header_bytes, rng)
            with open(work_path, "wb") as handle:
                handle.write(mutant)
                if not truncated:
                    handle.truncate(original.file_size)
            run_commands(work_path, outcome, original.file_size, measure_memory)
    finally:
        if measure_memory:
            tracemalloc.stop()
    return outcome
