"""Mutation fuzzing of the GGUF reader through whole commands (inspect and device-fit).

The only acceptable outcomes of a mutant are exit 0, 1 or a clean one-line error (exit 2); an
`internal error` (what cli.py turns an unexpected exception into) or any exception out of the command
is a bug. Used by tests/test_reader_fuzz.py (a quick run) and benchmarks/fuzz_reader.py (10,000
mutants with time and memory limits). It lives outside moetools/gguf: the reader knows no command line.

Two mutators: `mutate` (blind: byte flips, truncations, extreme lengths and counts anywhere) and
`StructuredMutator` (knows where each field of this header is: counts, string and array lengths,
value and tensor type ids, dimensions, data offsets, the alignment, split keys, block counts and the
block numbers in tensor names, and sets one of them to a value that matters).

A third, `SpecMutator`, mutates the model itself (issue 32): a synth spec's keys, tensors, types and
shapes, written as a real GGUF; `fuzz_models` runs each mutant through all four MODEL commands
(inspect --strict, device-fit, quantize, container-encode) as subprocesses with a timeout
(tests/test_validate_fuzz.py; `benchmarks/fuzz_reader.py --models`).
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


# --- model-level mutation through every command, each a subprocess with a timeout (issue 32) ------

# what every command is run with; OUT is a fresh output folder per run
ALL_COMMANDS = (
    ("inspect", "--json", "--strict"),
    ("device-fit", "--vram", "24G", "--json"),
    ("quantize", "--pure", "--type", "q8_0", "-o", "OUT", "--json"),
    ("container-encode", "-o", "OUT", "--json"),
)

_KEY_VALUES = (
    (0, "u32"), (1, "u32"), (2**31, "u32"), (2**32 - 1, "u32"), (2**32, "u64"), (2**64 - 1, "u64"),
    (8.0, "f32"), (float("nan"), "f32"), ("8", "str"), ([8, 8], "u32[]"), ([], "u32[]"), (True, "bool"), (-1, "i32"),
)


class SpecMutator:
    """Structure-aware mutation of a synth model spec: a key's value or type (counts set to 0, 2^31,
    2^64-1, an f32, a string, an array), a key dropped, a tensor dropped, renamed to another block,
    given another ggml type, or reshaped (a dimension doubled, halved, zeroed or folded into the next,
    a dimension added). Returns the mutated spec and a line saying what changed."""

    def __init__(self, builder):
        from moetools import synth

        self.builder = builder
        self.synth = synth

    def mutate(self, rng):
        import copy

        spec = self.synth.tiny(self.builder)
        spec = copy.deepcopy(spec)
        what = []
        for _ in range(1 if rng.random() < 0.75 else 2):
            what.append(self._one(spec, rng))
        return spec, "; ".join(what)

    def _one(self, spec, rng):
        kind = rng.randrange(6)
        arch_keys = [index for index, (key, _, _) in enumerate(spec.metadata) if key.startswith(spec.architecture + ".")]
        if kind <= 1 and arch_keys:
            index = rng.choice(arch_keys)
            key = spec.metadata[index][0]
            if kind == 1 and rng.random() < 0.3:
                del spec.metadata[index]
                return f"dropped {key}"
            value, value_kind = rng.choice(_KEY_VALUES)
            spec.metadata[index] = (key, value, value_kind)
            return f"{key} = {value!r} ({value_kind})"
        index = rng.randrange(len(spec.tensors))
        tensor = spec.tensors[index]
        if kind == 2:
            del spec.tensors[index]
            return f"dropped {tensor.name}"
        if kind == 3 and tensor.name.startswith("blk."):
            rest = tensor.name.split(".", 2)[2]
            block = rng.choice([0, 1, 2, 3, 9, 511, 512])
            name = f"blk.{block}.{rest}"
            if any(other.name == name for other in spec.tensors):
                return f"kept {tensor.name} (blk.{block} has it)"
            tensor.name = name
            return f"moved {tensor.name} to block {block}"
        if kind == 4:
            tensor.type_id = rng.choice([0, 1, 8, 12, 14, 30])
            return f"{tensor.name} type {tensor.type_id}"
        shape = list(tensor.shape)
        axis = rng.randrange(len(shape))
        change = rng.randrange(5)
        if change == 0:
            shape[axis] *= 2
        elif change == 1:
            shape[axis] = max(1, shape[axis] // 2)
        elif change == 2 and len(shape) > 1:
            shape[0:2] = [shape[0] * shape[1]]  # folded
        elif change == 3:
            shape.append(rng.choice([1, 2]))
        else:
            shape[axis] = rng.choice([1, 3, 7])
        # keep the row a whole number of the type's blocks (the writer and the reader check it)
        block = {8: 32, 12: 256, 14: 256, 30: 1, 0: 1, 1: 1}.get(tensor.type_id, 32)
        if shape[0] % block:
            shape[0] = max(block, shape[0] - shape[0] % block)
        tensor.shape = tuple(int(d) for d in shape)
        return f"{tensor.name} shape {list(tensor.shape)}"


class CommandRun:
    __slots__ = ("command", "code", "stderr", "seconds", "problem")

    def __init__(self, command, code, stderr, seconds, problem):
        self.command, self.code, self.stderr, self.seconds, self.problem = command, code, stderr, seconds, problem


def judge(code, stderr):
    """None when an outcome is clean (exit 0 or 1; or 2 with one `error:` line and no traceback), else
    what is wrong with it."""
    if code not in (0, 1, 2):
        return f"exit {code}"
    if "Traceback" in stderr or "internal error" in stderr:
        return "traceback or internal error"
    if code == 2:
        errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
        lines = [line for line in stderr.strip().splitlines() if line.strip()]
        if len(errors) != 1 or lines[-1] != errors[0]:
            return "exit 2 without exactly one closing `error:` line"
    return None


def run_command_subprocess(path, workdir, command, timeout):
    """Run `python -m moetools COMMAND path ...` in a subprocess; a run past `timeout` is a hang."""
    import os
    import shutil
    import subprocess
    import sys

    out = os.path.join(workdir, "out")
    shutil.rmtree(out, ignore_errors=True)
    name, *options = command
    argv = [sys.executable, "-m", "moetools", name, str(path), *[out if o == "OUT" else o for o in options]]
    env = dict(os.environ, COLUMNS="100", PYTHONPATH=os.pathsep.join(filter(None, [
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), os.environ.get("PYTHONPATH")])))
    start = time.perf_counter()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return CommandRun(name, None, "", time.perf_counter() - start, f"no answer in {timeout} s (a hang)")
    seconds = time.perf_counter() - start
    return CommandRun(name, done.returncode, done.stderr, seconds, judge(done.returncode, done.stderr))


def fuzz_models(builders, mutants_each, workdir, seed=0, timeout=30, commands=ALL_COMMANDS, header_share=0.25):
    """Seeded model-level fuzz: for each builder, `mutants_each` mutants (SpecMutator, or for
    `header_share` of them StructuredMutator's header edits), each run through every command of
    `commands` in a subprocess. Returns (runs [CommandRun], crashes [(description, CommandRun)])."""
    import os

    from moetools import synth

    rng = random.Random(seed)
    runs, crashes = [], []
    path = os.path.join(workdir, "mutant.gguf")
    for builder in builders:
        mutator = SpecMutator(builder)
        source = synth.write_model(synth.tiny(builder), os.path.join(workdir, f"{builder}.gguf"), sparse=True)[0]
        header = read_header(source)
        with open(source, "rb") as handle:
            structured = StructuredMutator(handle.read(header.data_offset))
        for _ in range(mutants_each):
            if rng.random() < header_share:
                mutant, _ = structured.mutate(rng)
                with open(path, "wb") as handle:
                    handle.write(mutant)
                    handle.truncate(header.file_size)
                what = f"{builder}: a header field"
            else:
                spec, what = mutator.mutate(rng)
                what = f"{builder}: {what}"
                try:
                    synth.write_model(spec, path, sparse=True)
                except Exception:  # noqa: BLE001 -- gguf-py refuses to write this one: not a file to test
                    continue
            for command in commands:
                run = run_command_subprocess(path, workdir, command, timeout)
                runs.append(run)
                if run.problem:
                    crashes.append((what, run))
    return runs, crashes
