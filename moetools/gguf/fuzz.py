"""Mutation fuzzing of the header reader: the only acceptable failure is a clean GGUFError.

Used by the quick fuzz test in the suite and by `benchmarks/fuzz_reader.py` for long runs.
"""

import os
import random
import struct

from moetools.errors import GGUFError
from moetools.gguf.header import read_header
from moetools.gguf.model import open_model

_INTERESTING_U64 = (0, 1, 2**31, 2**32 - 1, 2**32, 2**63, 2**64 - 1)


def mutate(header_bytes, rng):
    """One random mutation of a header: byte flips, a truncation, or an extreme length/count."""
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
        data[at:at + 4] = struct.pack("<I", rng.choice((0, 3, 9, 13, 42, 2**31, 2**32 - 1)))
    return bytes(data), kind == 1


def _exercise(path):
    """Everything `inspect` does with a model: header, split checks, classes, summary."""
    from moetools.inspect_cmd import describe

    with open_model(path) as model:
        describe(model, with_tensors=True)


def fuzz_file(source_path, work_path, iterations, seed=0):
    """Mutate `source_path`'s header `iterations` times; returns (parsed, clean_errors) counts.

    Each mutant keeps the original file size (sparse tail) unless it was a truncation, so tensor
    data checks see a realistic file. Any exception other than GGUFError propagates.
    A mutant that parses is also opened as a model and summarised, as `inspect` would.
    """
    rng = random.Random(seed)
    original = read_header(source_path)
    with open(source_path, "rb") as handle:
        header_bytes = handle.read(original.data_offset)
    parsed = errors = 0
    for _ in range(iterations):
        mutant, truncated = mutate(header_bytes, rng)
        with open(work_path, "wb") as handle:
            handle.write(mutant)
            if not truncated:
                handle.truncate(original.file_size)
        try:
            _exercise(work_path)
            parsed += 1
        except GGUFError:
            errors += 1
    os.unlink(work_path)
    return parsed, errors
