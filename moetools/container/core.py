"""Container encode and verify: a GGUF's routed experts rewritten as one aligned record per expert.

Pure core: a `moetools.gguf.Model` and a folder in, dataclasses out; no click, no printing. The
on-disk layout (manifest, record header, checksum sidecar) belongs to `moetools.formats.container`.

Memory stays constant: a bank is built in batches of whole records in one reused buffer of about
`batch_bytes` (at least one record), filled from the GGUF by one sequential scatter read (preadv)
per source tensor per batch and written straight to the bank's temporary file.
"""

import os
import time
from dataclasses import dataclass, field

from moetools import atomic
from moetools.container.reader import ContainerReader
from moetools.errors import FormatError, InputError, OutputError
from moetools.formats import container as fmt
from moetools.gguf import expert_tensor_kind, model_stem
from moetools.gguf.constants import Keys
from moetools.fileio import advise
from moetools.progress import progress

DEFAULT_BATCH_BYTES = 16 * 1024 * 1024
MAX_U16 = 0xFFFF
MAX_U32 = 0xFFFFFFFF


@dataclass(frozen=True)
class SliceSource:
    """Where one record slice comes from: bytes [start, start + n_bytes) of each expert's
    `stride`-byte slice of `tensor` (start is 0, or half the stride for a merged gate_up tensor)."""

    name: str
    tensor: object  # moetools.gguf.TensorInfo
    stride: int  # bytes of one expert in the tensor (tensor bytes / expert count)
    start: int
    n_bytes: int


@dataclass
class BankPlan:
    layout: fmt.BankLayout
    sources: tuple  # SliceSource per layout slice, same order


@dataclass
class ContainerPlan:
    manifest: fmt.ContainerManifest
    banks: list  # BankPlan, ascending block number
    notes: list = field(default_factory=list)


@dataclass
class Problem:
    """One mismatch found by verify: `layer` and `expert` are None when the problem is not theirs."""

    layer: object
    expert: object
    field: str
    detail: str

    def to_doc(self):
        return {"layer": self.layer, "expert": self.expert, "field": self.field, "detail": self.detail}

    def __str__(self):
        where = "container" if self.layer is None else f"layer {self.layer}"
        if self.expert is not None:
            where += f" expert {self.expert}"
        return f"{where}: {self.field}: {self.detail}"


# --- planning ----------------------------------------------------------------------------------


def _tensor_path(model, tensor):
    return model.shards[tensor.shard]


def _collect_expert_tensors(model):
    """{block: {(matrix, "weight"|"bias"): TensorInfo}} for every routed-expert tensor."""
    groups = {}
    for tensor in model.expert_tensors:
        block, matrix = expert_tensor_kind(tensor.name)
        suffix = tensor.name.split("_exps.", 1)[1]
        if suffix not in ("weight", "bias"):
            raise InputError(_tensor_path(model, tensor),
                             f"expert tensor {tensor.name!r}: a container record holds weights and biases, not {'.' + suffix!r}")
        groups.setdefault(block, {})[(matrix, suffix)] = tensor
    return groups


def _check_counts(model, groups):
    """The one expert count every expert tensor shares; InputError naming two tensors that disagree."""
    first = None
    for block in sorted(groups):
        for (matrix, suffix), tensor in sorted(groups[block].items()):
            dims = 3 if suffix == "weight" else 2
            if len(tensor.shape) != dims or tensor.shape[-1] < 1:
                raise InputError(_tensor_path(model, tensor),
                                 f"expert tensor {tensor.name!r} has shape {list(tensor.shape)}; expected {dims} dimensions, experts last")
            count = tensor.shape[-1]
            if first is None:
                first = tensor
            elif count != first.shape[-1]:
                raise InputError(_tensor_path(model, tensor),
                                 f"inconsistent expert counts: {tensor.name} holds {count} experts but {first.name} holds {first.shape[-1]}")
            if tensor.n_bytes % count:
                raise InputError(_tensor_path(model, tensor),
                                 f"expert tensor {tensor.name!r}: {tensor.n_bytes} bytes do not divide into {count} experts")
    n_expert = first.shape[-1]
    declared = model.get(Keys.EXPERT_COUNT)
    if isinstance(declared, int) and declared and declared != n_expert:
        raise InputError(model.path, f"expert tensors hold {n_expert} experts but the metadata says {declared}",
                         key=model.key(Keys.EXPERT_COUNT))
    if n_expert > MAX_U16:
        raise InputError(model.path, f"{n_expert} experts per layer: the record header's expert field and the "
                                     f"fork's experts_per_layer are 16-bit")
    return n_expert


def _bank_sources(model, block, tensors, n_expert):
    """SliceSources of one block in record order: gate, up, down. Expert biases are not put in the
    record: the fork's server streams only MUL_MAT_ID weights from the container and reads the
    ADD_ID biases from the model (CambrianTech/llama.cpp ggml/src/ggml-backend.cpp
    ggml_backend_sched_compute_splits: "GGML_OP_ADD_ID weights are small and not worth splitting"),
    and the record's corr_off means FP16 corrections there (ggml-moe-wexp.h), not biases."""

    def whole(name, tensor):
        stride = tensor.n_bytes // n_expert
        return SliceSource(name, tensor, stride, 0, stride)

    def halves(names, tensor):
        stride = tensor.n_bytes // n_expert
        rows = tensor.shape[-2] if len(tensor.shape) == 3 else tensor.shape[0]
        if rows % 2 or stride % 2:
            raise InputError(_tensor_path(model, tensor),
                             f"merged tensor {tensor.name!r} has {rows} rows per expert: cannot split into gate and up halves")
        half = stride // 2
        return [SliceSource(names[0], tensor, stride, 0, half), SliceSource(names[1], tensor, stride, half, half)]

    sources = []
    for suffix, prefix in (("weight", ""),):
        merged = tensors.get(("gate_up", suffix))
        separate = [tensors.get((matrix, suffix)) for matrix in ("gate", "up")]
        if merged is not None and any(separate):
            raise InputError(_tensor_path(model, merged),
                             f"block {block} has both {merged.name} and separate gate/up expert tensors")
        if merged is not None:
            sources += halves((f"gate{prefix}", f"up{prefix}"), merged)
        else:
            for matrix, tensor in zip(("gate", "up"), separate):
                if tensor is not None:
                    sources.append(whole(f"{matrix}{prefix}", tensor))
                elif suffix == "weight":
                    raise InputError(model.path, f"block {block} has expert tensors but no blk.{block}.ffn_{matrix}_exps.weight "
                                                 f"(nor a merged ffn_gate_up_exps)")
        down = tensors.get(("down", suffix))
        if down is not None:
            sources.append(whole(f"down{prefix}", down))
        elif suffix == "weight":
            raise InputError(model.path, f"block {block} has expert tensors but no blk.{block}.ffn_down_exps.weight")
    return sources


def _shard_stat(path, cache):
    if path not in cache:
        stat = os.stat(path)
        cache[path] = (stat.st_size, stat.st_mtime_ns)
    return cache[path]


def source_identity(model, sources, _stats=None):
    """Identity of the source tensors one bank's records come from, in record order: tensor name,
    shard file (base name), data offset and bytes, and the shard's size and mtime_ns. While these are
    unchanged a rerun trusts the source bytes to be unchanged (as make does); when they differ the
    bank's records are rebuilt from the source and must hash to the sidecar's digests."""
    stats = {} if _stats is None else _stats
    seen, identity = set(), []
    for source in sources:
        tensor = source.tensor
        if tensor.name in seen:  # a merged gate_up feeds two slices
            continue
        seen.add(tensor.name)
        shard = model.shards[tensor.shard]
        size, mtime_ns = _shard_stat(shard, stats)
        identity.append({"tensor": tensor.name, "file": os.path.basename(shard), "offset": tensor.offset,
                         "bytes": tensor.n_bytes, "size": size, "mtime_ns": mtime_ns})
    return identity


def plan_container(model, banks_numbering=fmt.DEFAULT_BANK_NUMBERING):
    """The container a model encodes to: manifest and, per MoE layer, where each slice comes from.

    record_bytes = align_up(32 + max gate + max up + max down slice over all layers, 16 KiB), the
    fork's GgufMoeSource formula (ggml-moe-gguf-source.h). Expert biases stay in the GGUF (see
    _bank_sources); the manifest says so (`expert_biases`: "gguf"). Raises InputError for a model without routed experts, with
    inconsistent expert counts, or with a layer missing a matrix. `banks_numbering` ("block" or
    "ordinal", formats.container.BANK_NUMBERINGS) numbers the bank files and record headers.
    """
    groups = _collect_expert_tensors(model)
    if not groups:
        raise InputError(model.path, "no routed-expert tensors (blk.N.ffn_{gate,up,down}_exps.weight): "
                                     "a dense model has nothing to put in an expert container")
    n_expert = _check_counts(model, groups)
    banks = []
    numbers = fmt.bank_numbers(sorted(groups), banks_numbering)
    for number, block in zip(numbers, sorted(groups)):
        if block > MAX_U16:
            raise InputError(model.path, f"block {block}: the record header's layer field is 16-bit")
        sources = _bank_sources(model, block, groups[block], n_expert)
        layout = fmt.layout_slices(number, [(s.name, s.tensor.type_name, s.n_bytes) for s in sources], block=block)
        banks.append(BankPlan(layout, tuple(sources)))

    max_of = {name: max(bank.layout.slice(name).n_bytes for bank in banks) for name in fmt.MATRICES}
    record_bytes = fmt.align_up(fmt.HEADER_BYTES + sum(max_of.values()), fmt.RECORD_ALIGN)
    if record_bytes > MAX_U32:
        raise InputError(model.path, f"one expert needs a {record_bytes}-byte record: the header's offsets are 32-bit")

    per_matrix = {name: [bank.layout.slice(name).type_name for bank in banks] for name in fmt.MATRICES}
    all_types = {name for names in per_matrix.values() for name in names}
    matrix_types = None
    if len(all_types) == 1:
        fmt_name = all_types.pop()
    else:
        fmt_name = "mixed"
        matrix_types = {name: names[0] if len(set(names)) == 1 else names for name, names in per_matrix.items()}

    notes, extra = [], {}
    biases = [tensor for block in groups.values() for (_, suffix), tensor in block.items() if suffix == "bias"]
    if biases:
        extra["expert_biases"] = "gguf"
        notes.append(f"{len(biases)} expert bias tensors (e.g. {biases[0].name}) stay in the GGUF: the fork streams only "
                     f"the expert weights from the container and reads the biases from the model")
    top_k = model.get_int(Keys.EXPERT_USED_COUNT, 0)
    if not top_k:
        notes.append(f"{model.key(Keys.EXPERT_USED_COUNT)} is missing: activated_per_token is written as 0")
    manifest = fmt.ContainerManifest(
        bank_sources={bank.layout.layer: source_identity(model, bank.sources) for bank in banks},
        model=model_stem(model.path),
        fmt=fmt_name,
        record_bytes=record_bytes,
        experts_per_layer=n_expert,
        activated_per_token=top_k * len(banks),
        banks=[bank.layout for bank in banks],
        matrix_types=matrix_types,
        top_k=top_k,
        bank_numbering=banks_numbering,
        source={
            "file": os.path.basename(model.path),
            "path": os.path.abspath(model.path),  # container-verify checks the source here when it is still there
            "shards": len(model.shards),
            "architecture": model.architecture,
            "fingerprint": model.fingerprint,
            "expert_bytes": model.expert_bytes - sum(tensor.n_bytes for tensor in biases),  # what the records hold
        },
        extra=extra,
    )
    return ContainerPlan(manifest, banks, notes)


# --- encode ------------------------------------------------------------------------------------


@dataclass
class EncodeResult:
    folder: str
    manifest: fmt.ContainerManifest
    banks_written: list  # block numbers
    banks_skipped: list  # block numbers already complete and verified
    bytes_read: int  # source expert bytes read from the GGUF
    bytes_written: int  # bank bytes written
    seconds: float
    notes: list = field(default_factory=list)

    @property
    def container_bytes(self):
        return self.manifest.bank_bytes * self.manifest.n_layers


def _write_all(fd, view):
    """os.write until every byte of `view` is written (a separate function so tests can fail it)."""
    while len(view):
        written = os.write(fd, view)
        view = view[written:]


class SourceFiles:
    """The source tensors' runs of experts for one bank. Bytes come from the shared reader's scatter
    reads (Model.read_tensor_into), which fill every record's slice in place, with read-ahead hints
    for the next batch while this one is written."""

    def __init__(self, model):
        self.model = model

    def groups(self, bank):
        """[(tensor, stride, [(slice, source) in byte order within one expert's stride])]: the
        slices that one contiguous run of a tensor fills (two for a merged gate_up)."""
        groups = {}
        for piece, source in zip(bank.layout.slices, bank.sources):
            groups.setdefault(source.tensor.name, (source.tensor, source.stride, []))[2].append((piece, source))
        return [(tensor, stride, sorted(pairs, key=lambda pair: pair[1].start)) for tensor, stride, pairs in groups.values()]

    def prefetch(self, bank, first, count):
        for tensor, stride, _ in self.groups(bank):
            self.model.advise_tensor(tensor, first * stride, count * stride, "WILLNEED")

    def read_into(self, tensor, offset, targets):
        """`tensor`'s bytes from `offset` (relative to the tensor) into `targets`, in order."""
        self.model.read_tensor_into(tensor, offset, targets)


def _fill_records(files, bank, view, record_bytes, first, count):
    """Build records first..first+count-1 of `bank` in `view` (headers and slices; the padding is
    left as it is, zero). One preadv per source tensor scatters its contiguous run of experts
    straight into the records. Returns the source bytes read."""
    read = 0
    for tensor, stride, pairs in files.groups(bank):
        targets = []
        for index in range(count):
            base = index * record_bytes
            targets += [view[base + piece.offset:base + piece.end] for piece, _ in pairs]
        files.read_into(tensor, first * stride, targets)
        read += count * stride
    for index in range(count):
        bank.layout.header(first + index, record_bytes).pack_into(view, index * record_bytes)
    return read


def _batch_records(record_bytes, batch_bytes, n_expert):
    """Records per batch: about `batch_bytes` worth, at least one, at most a bank."""
    return max(1, min(n_expert, batch_bytes // record_bytes))


def _zero_padding(view, bank, record_bytes):
    """Zero the padding of every record slot in `view` (another bank's longer payload may have left
    bytes there)."""
    tail = bytes(record_bytes - bank.layout.payload_bytes)
    for index in range(len(view) // record_bytes):
        view[index * record_bytes + bank.layout.payload_bytes:(index + 1) * record_bytes] = tail


def _source_matches_sidecar(files, bank, view, record_bytes, n_expert, digests):
    """True when the records rebuilt from the source (in `view`, no write) hash to the sidecar's
    `digests`: the bank on disk holds exactly what the source encodes to now. Returns (match, bytes read)."""
    import xxhash

    batch = len(view) // record_bytes
    _zero_padding(view, bank, record_bytes)
    read, first = 0, 0
    while first < n_expert:
        # record 0 alone first: a changed source (the common case here) is found after one record
        count = 1 if first == 0 else min(batch, n_expert - first)
        read += _fill_records(files, bank, view, record_bytes, first, count)
        for index in range(count):
            if xxhash.xxh3_64_intdigest(view[index * record_bytes:(index + 1) * record_bytes]) != digests[first + index]:
                return False, read
        first += count
    return True, read


def _write_bank(files, folder, plan, bank, view, bar, next_bank=None):
    """Write one bank to a temporary name, fsync, rename; then its checksum sidecar. `view` is the
    reused batch buffer (whole records); `next_bank`'s first batch is prefetched during the fsync.
    Returns (bytes read, bytes written)."""
    import xxhash

    manifest = plan.manifest
    record_bytes, n_expert = manifest.record_bytes, manifest.experts_per_layer
    batch = len(view) // record_bytes
    _zero_padding(view, bank, record_bytes)
    digests, read, written = [], 0, 0
    path = os.path.join(folder, fmt.bank_name(bank.layout.layer))
    with atomic.atomic_write(path, "wb") as handle:
        fd = handle.fileno()
        files.prefetch(bank, 0, min(batch, n_expert))
        for first in range(0, n_expert, batch):
            count = min(batch, n_expert - first)
            read += _fill_records(files, bank, view, record_bytes, first, count)
            if first + count < n_expert:  # the kernel reads the next batch while this one is written
                files.prefetch(bank, first + count, min(batch, n_expert - first - count))
            for index in range(count):
                digests.append(xxhash.xxh3_64_intdigest(view[index * record_bytes:(index + 1) * record_bytes]))
            _write_all(fd, view[:count * record_bytes])
            # DONTNEED on freshly written pages starts their writeback now, so the fsync below has
            # little left to wait for and a many-GB encode does not fill the page cache.
            advise(fd, written, count * record_bytes, "DONTNEED")
            written += count * record_bytes
            bar.update(count * record_bytes)
        if next_bank is not None:
            files.prefetch(next_bank, 0, min(batch, n_expert))
        os.fsync(fd)
        advise(fd, 0, 0, "DONTNEED")
    # A bank under its final name without a sidecar is simply re-encoded by the next run.
    fmt.write_checksums(folder, fmt.Checksums(bank.layout.layer, record_bytes, manifest.fingerprint, digests))
    return read, written


def _prepare_folder(folder, manifest, force):
    """Create `folder`; refuse another model's container unless `force`; drop stale temporaries.
    Returns the container manifest already there (None when there is none, or with `force`)."""
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise OutputError(f"{folder}: exists and is not a folder")
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as err:
        raise OutputError(f"{folder}: cannot create the output folder: {err.strerror or err}") from None
    existing_path = os.path.join(folder, fmt.MANIFEST_NAME)
    existing = None
    if os.path.exists(existing_path) and not force:
        try:
            existing = fmt.read_manifest(existing_path)
        except FormatError as err:
            raise OutputError(f"{folder}: holds an unreadable container manifest ({err}); pass --force to replace it") from None
        if existing.fingerprint != manifest.fingerprint:
            raise OutputError(
                f"{folder}: holds the container of another model ({existing.model}, fingerprint "
                f"{existing.fingerprint or 'unknown'}; this model is {manifest.model}, fingerprint "
                f"{manifest.fingerprint}): choose another folder or pass --force to replace it")
    removed = []
    for name in sorted(os.listdir(folder)):
        stale_temp = name.startswith(".") and name.endswith(".tmp")
        if fmt.is_container_file(name) and (force or stale_temp):
            os.unlink(os.path.join(folder, name))
            removed.append(name)
    return existing


def _matching_sidecar(folder, manifest, layout):
    """The bank's sidecar when it exists and was written for this geometry and model, else None."""
    try:
        sums = fmt.read_checksums(os.path.join(folder, manifest.checksum_file(layout.layer)))
    except (OSError, FormatError):
        return None
    if (sums.layer, sums.record_bytes, len(sums.digests), sums.fingerprint) != (
            layout.layer, manifest.record_bytes, manifest.experts_per_layer, manifest.fingerprint):
        return None
    return sums


def complete_bank_checksums(folder, manifest, layout, batch_bytes=DEFAULT_BATCH_BYTES):
    """The bank's sidecar when the bank and its sidecar exist, match the manifest and every record
    checks out against it; None otherwise. (This says the bank is intact, not that its source is
    unchanged: see encode_container.)"""
    sums = _matching_sidecar(folder, manifest, layout)
    if sums is None:
        return None
    problems = scan_bank(folder, manifest, layout, checksums=sums, batch_bytes=batch_bytes, limit=1)
    return sums if problems.count == 0 else None


def bank_is_complete(folder, manifest, layout, batch_bytes=DEFAULT_BATCH_BYTES):
    """True when the bank and its sidecar exist, match the manifest and every record checks out."""
    return complete_bank_checksums(folder, manifest, layout, batch_bytes) is not None


def bytes_to_write(folder, plan):
    """Bytes of the banks `folder` does not hold yet at their full size: what an encode still
    writes (a bank already there is kept when verified, or rewritten one at a time)."""
    missing = 0
    for bank in plan.banks:
        path = os.path.join(os.fspath(folder), fmt.bank_name(bank.layout.layer))
        try:
            size = os.path.getsize(path)
        except OSError:
            size = -1
        if size != plan.manifest.bank_bytes:
            missing += plan.manifest.bank_bytes
    return missing


def encode_container(model, folder, *, force=False, batch_bytes=DEFAULT_BATCH_BYTES, bar=None, plan=None):
    """Encode `model`'s routed experts into `folder`; resumable: a bank already there is kept when
    it is intact (its records check out against its sidecar) AND its source is unchanged, i.e. the
    manifest there records the same source tensor identity (shard size, mtime, offset), or else the
    records rebuilt from the source hash to the sidecar's digests. A re-quantized model with the same
    layout therefore rewrites its banks; a copied or touched identical source only reads them.

    Writes one bank per MoE layer (temporary name, fsync, rename), its xxh3 sidecar, and the
    manifest last. Raises InputError for a model that cannot be encoded, OutputError when the folder
    holds another model's container (unless `force`) or a write fails (disk full).
    """
    started = time.monotonic()
    plan = plan or plan_container(model)
    manifest = plan.manifest
    folder = os.fspath(folder)
    existing = _prepare_folder(folder, manifest, force)
    recorded = existing.bank_sources if existing is not None else {}
    bar = bar or progress(enabled=False)
    written_layers, skipped, read, written = [], [], 0, 0
    batch = _batch_records(manifest.record_bytes, batch_bytes, manifest.experts_per_layer)
    buffer = None  # allocated once, on the first bank that needs reading or writing
    files = SourceFiles(model)
    for position, bank in enumerate(plan.banks):
        layer = bank.layout.layer
        sums = _matching_sidecar(folder, manifest, bank.layout)
        keep = sums is not None
        if keep and recorded.get(layer) != manifest.bank_sources.get(layer):
            # the source may have changed: its records must hash to the sidecar (checked first, so a
            # re-quantized model goes straight to rewriting without reading the old bank)
            if buffer is None:
                buffer = bytearray(batch * manifest.record_bytes)
            keep, bank_read = _source_matches_sidecar(files, bank, memoryview(buffer), manifest.record_bytes,
                                                      manifest.experts_per_layer, sums.digests)
            read += bank_read
        if keep:  # the bank itself must be intact
            keep = scan_bank(folder, manifest, bank.layout, checksums=sums, batch_bytes=batch_bytes, limit=1).count == 0
        if keep:
            skipped.append(layer)
            bar.update(manifest.bank_bytes)
            continue
        if buffer is None:
            buffer = bytearray(batch * manifest.record_bytes)
        next_bank = plan.banks[position + 1] if position + 1 < len(plan.banks) else None
        bank_read, bank_written = _write_bank(files, folder, plan, bank, memoryview(buffer), bar, next_bank)
        read += bank_read
        written += bank_written
        written_layers.append(bank.layout.layer)
    fmt.write_manifest(folder, manifest)
    return EncodeResult(folder, manifest, written_layers, skipped, read, written, time.monotonic() - started, plan.notes)


# --- verify ------------------------------------------------------------------------------------


@dataclass
class Problems:
    """Problems found, keeping the first `keep` and counting the rest."""

    keep: int = 100
    items: list = field(default_factory=list)
    count: int = 0

    def add(self, problem):
        self.count += 1
        if len(self.items) < self.keep:
            self.items.append(problem)

    def full(self, limit):
        return limit is not None and self.count >= limit


def _first_difference(actual, expected):
    import numpy as np

    a = np.frombuffer(actual, dtype=np.uint8)
    b = np.frombuffer(expected, dtype=np.uint8)
    return int(np.flatnonzero(a != b)[0])


def _check_record(record, expert, layout, manifest, zero_tail, checksums, expected_slices, problems):
    """Header fields, zero padding, checksum and (when given) source slices of one record."""
    import xxhash

    layer = layout.layer
    try:
        header = fmt.RecordHeader.unpack(record)
    except ValueError as err:
        problems.add(Problem(layer, expert, "magic", str(err)))
        header = None
    if header is not None:
        for name, found, wanted in header.differences(layout.header(expert, manifest.record_bytes)):
            problems.add(Problem(layer, expert, name, f"header says {found}, expected {wanted}"))
    if record[layout.payload_bytes:] != zero_tail:
        at = layout.payload_bytes + _first_difference(record[layout.payload_bytes:], zero_tail)
        problems.add(Problem(layer, expert, "padding", f"non-zero byte at record offset {at}"))
    if checksums is not None and expert < len(checksums.digests):
        digest = xxhash.xxh3_64_intdigest(record)
        if digest != checksums.digests[expert]:
            problems.add(Problem(layer, expert, "checksum", f"xxh3 {digest:016x}, sidecar says {checksums.digests[expert]:016x}"))
    for piece, expected in expected_slices:
        actual = record[piece.offset:piece.end]
        if actual != expected:
            at = _first_difference(actual, expected)
            problems.add(Problem(layer, expert, piece.name,
                                 f"differs from the GGUF at byte {at} of the slice (record offset {piece.offset + at})"))


def scan_bank(folder, manifest, layout, *, checksums=None, model=None, sources=None, batch_bytes=DEFAULT_BATCH_BYTES,
              bar=None, limit=None, problems=None):
    """Check every record of one bank: size, header fields, zero padding, xxh3 against `checksums`,
    and with `model` and `sources` (SliceSources of the bank) the slices against the GGUF bytes.
    Stops after `limit` problems. Returns a Problems."""
    problems = problems or Problems()
    layer, record_bytes, n_expert = layout.layer, manifest.record_bytes, manifest.experts_per_layer
    try:
        reader = ContainerReader(folder, manifest=manifest)
        n_full = reader.bank_records(layer)
    except FileNotFoundError:
        problems.add(Problem(layer, None, "bank", f"{manifest.bank_file(layer)} is missing" + _other_convention_hint(folder, manifest)))
        return problems
    size = os.path.getsize(reader.bank_path(layer))
    if size != manifest.bank_bytes:
        problems.add(Problem(layer, None, "bank size",
                             f"{size} bytes, expected {manifest.bank_bytes} ({n_expert} records of {record_bytes}): truncated or not this container's"))
        if problems.full(limit):
            reader.close()
            return problems
    zero_tail = bytes(record_bytes - layout.payload_bytes)
    batch = _batch_records(record_bytes, batch_bytes, n_expert)
    buffer = bytearray(batch * record_bytes)
    with reader:
        for first in range(0, n_full, batch):
            count = min(batch, n_full - first)
            view = memoryview(buffer)[:count * record_bytes]
            count = reader.read_records(layer, first, view)
            source_data = []
            if model is not None:
                last_name = None
                for piece, source in zip(layout.slices, sources):
                    if source.tensor.name != last_name:
                        data = memoryview(model.read_tensor_bytes(source.tensor, first * source.stride, count * source.stride))
                        last_name = source.tensor.name
                    source_data.append((piece, source, data))
            for index in range(count):
                expert = first + index
                record = view[index * record_bytes:(index + 1) * record_bytes]
                expected = [(piece, data[index * source.stride + source.start:index * source.stride + source.start + source.n_bytes])
                            for piece, source, data in source_data]
                _check_record(record, expert, layout, manifest, zero_tail, checksums, expected, problems)
                if problems.full(limit):
                    return problems
            if bar is not None:
                bar.update(count * record_bytes)
    return problems


@dataclass
class VerifyResult:
    folder: str
    manifest: fmt.ContainerManifest
    problems: Problems
    banks_checked: int
    records_checked: int
    bytes_checked: int
    model_path: str  # "" when not checked against a model
    seconds: float
    notes: list = field(default_factory=list)

    @property
    def ok(self):
        return self.problems.count == 0


def _header_layout_matches(found, want, record_bytes):
    """A fork-packed bank's layout (read from its record header, down's end unknown) against the
    model's: gate and up at the same offsets with the same bytes, down at the same offset and
    ending inside the record."""
    same = all((found.slice(name).offset, found.slice(name).n_bytes) == (want.slice(name).offset, want.slice(name).n_bytes)
               for name in ("gate", "up"))
    return same and found.slice("down").offset == want.slice("down").offset and want.slice("down").end <= record_bytes


def _compare_plan(plan, manifest, problems):
    """Structural differences between what the model encodes to and what the manifest says.
    Returns {bank number: layout to scan} for the banks whose layout matches (their slices can be
    compared byte by byte); for a fork-packed bank that is the model's layout with the header's fmt."""
    fork_packed = manifest.packer == "fork"
    if plan.manifest.fingerprint != manifest.fingerprint and not (fork_packed and not manifest.fingerprint):
        problems.add(Problem(None, None, "model",
                             f"the container was encoded from {manifest.source.get('file') or manifest.model} "
                             f"(fingerprint {manifest.fingerprint or 'unknown'}), not from this model "
                             f"({plan.manifest.source['file']}, fingerprint {plan.manifest.fingerprint})"))
        return {}
    keys = ("record_bytes", "experts_per_layer", "activated_per_token") + (() if fork_packed else ("fmt",))
    for key in keys:
        if getattr(plan.manifest, key) != getattr(manifest, key):
            problems.add(Problem(None, None, key, f"manifest says {getattr(manifest, key)}, the model encodes to {getattr(plan.manifest, key)}"))
    if plan.manifest.layers != manifest.layers:
        problems.add(Problem(None, None, "layers", f"manifest lists {manifest.layers}, the model's MoE layers are {plan.manifest.layers}"))
    matching = {}
    planned = {bank.layout.layer: bank.layout for bank in plan.banks}
    for layout in manifest.banks:
        want = planned.get(layout.layer)
        if want is None:
            continue
        if layout.from_header:
            if _header_layout_matches(layout, want, manifest.record_bytes):
                matching[layout.layer] = fmt.BankLayout(want.layer, want.slices, want.block, layout.fmt_code)
            else:
                problems.add(Problem(layout.layer, None, "layout", f"record header offsets gate {layout.slice('gate').offset}, "
                                     f"up {layout.slice('up').offset}, down {layout.slice('down').offset}; the model's "
                                     f"{want.slice('gate').offset}, {want.slice('up').offset}, {want.slice('down').offset}"))
        elif want != layout:
            problems.add(Problem(layout.layer, None, "layout", f"manifest slices {[s.to_doc() | {'name': s.name} for s in layout.slices]}, "
                                                               f"the model's {[s.to_doc() | {'name': s.name} for s in want.slices]}"))
        else:
            matching[layout.layer] = layout
    return matching


def _other_convention_hint(folder, manifest):
    """When the bank files follow the other numbering than the manifest states, say which and the flag."""
    blocks = [bank.block for bank in manifest.banks]
    other = fmt.other_numbering(manifest.bank_numbering)
    names = [manifest.bank_file(number) for number in fmt.bank_numbers(blocks, other)]
    if names and all(os.path.exists(os.path.join(folder, name)) for name in names):
        return (f"; the folder's banks follow the other convention ({other}: {names[0]}..{names[-1]}), the manifest "
                f"says {manifest.bank_numbering!r}: re-encode with --banks {manifest.bank_numbering} (or {other} to keep them)")
    return ""


def recorded_source(manifest):
    """(path, None) for the source GGUF the manifest was encoded from when a file is still at the
    recorded path, else (None, that path), or (None, None) when the manifest records none (an older
    moetools, or the fork's own packer)."""
    path = manifest.source.get("path") if isinstance(manifest.source, dict) else None
    if not isinstance(path, str) or not path:
        return None, None
    return (path, None) if os.path.isfile(path) else (None, path)


def verify_container(folder, model=None, *, batch_bytes=DEFAULT_BATCH_BYTES, bar=None, keep=100, manifest=None):
    """Check a container: manifest geometry, bank sizes, every record header, the xxh3 sidecars and,
    given the source `model`, every slice against the GGUF bytes. Raises FormatError when the
    manifest itself is unreadable; every other mismatch is a Problem in the result."""
    started = time.monotonic()
    folder = os.fspath(folder)
    manifest = manifest or fmt.read_manifest(folder)
    problems = Problems(keep=keep)
    comparable, plan_banks, notes = {}, {}, []
    if manifest.packer == "fork":
        notes.append("written by the fork's packer (moec_pack_dir): no checksum sidecars, bank layouts from the "
                     "record headers" + ("" if model is not None else "; pass --model to check the slices and padding"))
    if model is not None:
        plan = plan_container(model, manifest.bank_numbering)
        comparable = _compare_plan(plan, manifest, problems)
        plan_banks = {bank.layout.layer: bank for bank in plan.banks}
    records = checked_bytes = 0
    for layout in manifest.banks:
        layer = layout.layer
        checksums = None
        try:
            if manifest.packer != "fork":  # the fork's packer writes none
                checksums = fmt.read_checksums(os.path.join(folder, manifest.checksum_file(layer)))
        except FileNotFoundError:
            problems.add(Problem(layer, None, "checksums", f"{manifest.checksum_file(layer)} is missing"))
        except (OSError, FormatError) as err:
            problems.add(Problem(layer, None, "checksums", str(err)))
        if checksums is not None:
            for name, found, wanted in (("layer", checksums.layer, layer),
                                        ("record count", len(checksums.digests), manifest.experts_per_layer),
                                        ("record_bytes", checksums.record_bytes, manifest.record_bytes),
                                        ("fingerprint", checksums.fingerprint, manifest.fingerprint)):
                if found != wanted:
                    problems.add(Problem(layer, None, "checksums", f"sidecar {name} is {found}, expected {wanted}"))
                    if name != "fingerprint":  # digests of another geometry say nothing about these records
                        checksums = None
                        break
        with_model = model if layer in comparable else None
        sources = plan_banks[layer].sources if with_model is not None else None
        if with_model is not None:
            if comparable[layer].fmt_id != plan_banks[layer].layout.fmt_id:
                problems.add(Problem(layer, None, "fmt", f"records say {fmt.fork_fmt_name(comparable[layer].fmt_id)} "
                                     f"({comparable[layer].fmt_id}), the model's matrices are "
                                     f"{fmt.fork_fmt_name(plan_banks[layer].layout.fmt_id)} ({plan_banks[layer].layout.fmt_id})"))
            layout = comparable[layer]
        scan_bank(folder, manifest, layout, checksums=checksums, model=with_model, sources=sources,
                  batch_bytes=batch_bytes, bar=bar, problems=problems)
        try:
            size = os.path.getsize(os.path.join(folder, manifest.bank_file(layer)))
        except OSError:
            size = 0
        records += min(manifest.experts_per_layer, size // manifest.record_bytes)
        checked_bytes += min(size, manifest.bank_bytes)
    return VerifyResult(folder, manifest, problems, manifest.n_layers, records, checked_bytes,
                        model.path if model is not None else "", time.monotonic() - started, notes)
