"""Tiered (version-2) containers: `container-encode --tiers Q8_0,Q4_K,...`, their verify, and the
check of a plan's tier indices against a container's ladder.

The readers this writes for (restated in tests/fork_rules.py):
- CambrianTech/continuum core/continuum-core/src/capacity/expert_container.rs `ExpertContainer::open`
  (version <= KNOWN_VERSION 2, `tiers[i].id == i`, every tier's record_bytes a positive multiple of
  4096), `bank_path` (v2: every bank `experts-L{n}-T{t}.bin`, a single tier too) and `ExpertBank::open`
  / `verify_identity` (bank size == tier record_bytes x experts_per_layer; each record's header says
  WEXP, its bank's layer and its expert).
- CambrianTech/llama.cpp ggml/src/ggml-moe-container-fetcher.h `TieredContainerFetcher::read`: the
  record of (layer, expert, tier) at expert * that tier's record_bytes in `experts-L{layer}-T{tier}.bin`.

Each tier's records are the v1 record (32-byte header, gate | up | down back to back, zero padding)
with every matrix in the tier's ggml type: byte-copied where the source already has that type, else
dequantized and re-quantized by moetools.quantize (one import line, in `_kernels`). Encoding is
resumable and atomic as v1's is (moetools.container.core.encode_container): each bank is written to a
temporary name, fsynced and renamed, its xxh3 sidecar after it, the manifest last; a rerun keeps a
bank whose records check out against its sidecar while its source tensors are unchanged.
"""

import dataclasses
import os
import time
from dataclasses import dataclass

from moetools import atomic
from moetools.container.core import (DEFAULT_BATCH_BYTES, EncodeResult, Problem, Problems, VerifyResult, _batch_records,
                                     _matching_sidecar, _prepare_folder, _write_all, plan_container, scan_bank,
                                     verify_container)
from moetools.errors import FormatError, InputError, UsageError
from moetools.fileio import advise
from moetools.formats import container as fmt
from moetools.gguf.constants import GGML_TYPE_IDS, GGML_TYPES, tensor_nbytes
from moetools.progress import progress


def _kernels():
    """moetools.quantize's array-level quantizer and dequantizer (numpy: imported only when a tier
    needs re-quantizing) and the types it can write."""
    from moetools.quantize.kernels import KERNELS, can_dequantize, dequantize, quantize

    writable = set(KERNELS) | {GGML_TYPE_IDS["f16"], GGML_TYPE_IDS["bf16"]}
    return quantize, dequantize, can_dequantize, writable


def parse_tiers(text):
    """`"Q8_0,Q4_K"` -> [(label, ggml type id)], labels upper case (the daemon's TierSpec.quant)."""
    lowered = {name.lower(): type_id for name, type_id in GGML_TYPE_IDS.items()}
    tiers = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        type_id = lowered.get(item.lower())
        if type_id is None:
            raise UsageError(f"--tiers: {item!r} is not a ggml type (e.g. Q8_0, Q6_K, Q4_K, IQ4_XS, F16)")
        label = item.upper()
        if label in [seen for seen, _ in tiers]:
            raise UsageError(f"--tiers: {label} is listed twice")
        tiers.append((label, type_id))
    if not tiers:
        raise UsageError("--tiers: name at least one ggml type, sharpest first (e.g. Q8_0,Q4_K)")
    return tiers


@dataclass
class TieredPlan:
    manifest: fmt.ContainerManifest  # version 2, the tier-0 view
    banks: list  # core.BankPlan per MoE layer (the sources; layouts are the source's own)
    tier_types: list  # ggml type id per tier
    notes: list


def _slice_geometry(source):
    """(columns, rows) of one expert's slice of `source` (ggml row length ne[0], rows in the slice)."""
    tensor = source.tensor
    columns = tensor.shape[0]
    row_bytes = tensor_nbytes(tensor.type_id, [columns])
    return columns, source.n_bytes // row_bytes


def plan_tiered(model, tiers, banks_numbering=fmt.DEFAULT_BANK_NUMBERING):
    """The v2 container `model` encodes to with `tiers` ([(label, type id)], sharpest first).

    Raises UsageError for a tier moetools cannot write (naming it), InputError for a matrix whose
    rows do not divide into the tier type's blocks."""
    base = plan_container(model, banks_numbering)
    writable = None
    specs = []
    for index, (label, type_id) in enumerate(tiers):
        type_name, block, block_bytes = GGML_TYPES[type_id]
        layouts = []
        for bank in base.banks:
            pieces = []
            for source in bank.sources:
                if source.tensor.type_id == type_id:
                    pieces.append((source.name, type_name, source.n_bytes))
                    continue
                if writable is None:
                    _, _, can_dequantize, writable = _kernels()
                if type_id not in writable:
                    names = ", ".join(sorted(GGML_TYPES[t][0].upper() for t in writable))
                    raise UsageError(f"--tiers: moetools cannot write {label} tiers (it quantizes to {names}; a tier may "
                                     f"also be the source's own type, byte-copied)")
                if not can_dequantize(source.tensor.type_id):
                    raise UsageError(f"--tiers: tier {index} {label} needs {source.tensor.name} "
                                     f"({source.tensor.type_name}) re-quantized, and moetools cannot dequantize "
                                     f"{source.tensor.type_name}")
                columns, rows = _slice_geometry(source)
                if columns % block:
                    raise InputError(model.path, f"tier {index} {label}: {source.tensor.name} has rows of {columns} "
                                                 f"values, which do not divide into {label} blocks of {block}")
                pieces.append((source.name, type_name, rows * columns // block * block_bytes))
            layouts.append(fmt.layout_slices(bank.layout.layer, pieces, block=bank.layout.block))
        widest = sum(max(layout.slice(name).n_bytes for layout in layouts) for name in fmt.MATRICES)
        record_bytes = fmt.align_up(fmt.HEADER_BYTES + widest, fmt.RECORD_ALIGN)
        specs.append(fmt.TierSpec(index, label, record_bytes, layouts, type_name))
    manifest = dataclasses.replace(base.manifest, version=fmt.TIERED_VERSION, tiers=specs, tier=0,
                                   record_bytes=specs[0].record_bytes, fmt=specs[0].fmt, banks=specs[0].banks,
                                   matrix_types=None)
    return TieredPlan(manifest, base.banks, [type_id for _, type_id in tiers], base.notes)


def bytes_to_write(folder, plan):
    """Bytes of the tier banks `folder` does not hold yet at their full size."""
    missing = 0
    for tier in range(len(plan.manifest.tiers)):
        view = plan.manifest.tier_view(tier)
        for layer in view.layers:
            try:
                size = os.path.getsize(os.path.join(os.fspath(folder), view.bank_file(layer)))
            except OSError:
                size = -1
            missing += view.bank_bytes if size != view.bank_bytes else 0
    return missing


def total_bytes(manifest):
    return sum(manifest.tier_view(tier).bank_bytes * manifest.n_layers for tier in range(manifest.n_tiers))


# --- encode ------------------------------------------------------------------------------------


@dataclass
class TieredEncodeResult(EncodeResult):
    @property
    def container_bytes(self):
        return total_bytes(self.manifest)


def _slices_for(model, bank, layout, type_id, first, count):
    """[(piece, [bytes per expert])] of records first..first+count-1 at the tier's type."""
    import numpy as np

    runs, out = {}, []
    for piece, source in zip(layout.slices, bank.sources):
        tensor = source.tensor
        if tensor.name not in runs:
            data = model.read_tensor_bytes(tensor, first * source.stride, count * source.stride)
            runs[tensor.name] = np.frombuffer(data, dtype=np.uint8).reshape(count, source.stride)
        chunk = runs[tensor.name][:, source.start:source.start + source.n_bytes]
        if tensor.type_id != type_id:
            quantize, dequantize, _, _ = _kernels()
            columns, rows = _slice_geometry(source)
            values = dequantize(np.ascontiguousarray(chunk).reshape(-1), tensor.type_id, (count * rows, columns))
            chunk = quantize(values, type_id).reshape(count, -1)
        out.append((piece, [chunk[index].tobytes() for index in range(count)]))
    return out


def _tier_batches(model, view, bank, layout, type_id, batch_bytes):
    """Build the records of one (layer, tier) bank in batches: yields (first, count, records view,
    source bytes read), the view reused from batch to batch."""
    record_bytes, n_expert = view.record_bytes, view.experts_per_layer
    batch = _batch_records(record_bytes, batch_bytes, n_expert)
    buffer = bytearray(batch * record_bytes)
    stride = sum(source.stride for source in {s.tensor.name: s for s in bank.sources}.values())
    for first in range(0, n_expert, batch):
        count = min(batch, n_expert - first)
        records = memoryview(buffer)[:count * record_bytes]
        records[:] = bytes(len(records))
        for piece, parts in _slices_for(model, bank, layout, type_id, first, count):
            for index, part in enumerate(parts):
                base = index * record_bytes + piece.offset
                records[base:base + len(part)] = part
        for index in range(count):
            layout.header(first + index, record_bytes).pack_into(records, index * record_bytes)
        yield first, count, records, stride * count


def _source_matches_sidecar(model, view, bank, layout, type_id, batch_bytes, digests):
    """True when the records built from the source now hash to the sidecar's `digests` (the bank on
    disk holds what the source encodes to). Returns (match, bytes read)."""
    import xxhash

    read = 0
    for first, count, records, bank_read in _tier_batches(model, view, bank, layout, type_id, batch_bytes):
        read += bank_read
        for index in range(count):
            record = records[index * view.record_bytes:(index + 1) * view.record_bytes]
            if xxhash.xxh3_64_intdigest(record) != digests[first + index]:
                return False, read
    return True, read


def _write_tier_bank(model, folder, view, bank, layout, type_id, batch_bytes, bar):
    """Write one (layer, tier) bank atomically (temporary name, fsync, rename), then its sidecar.
    Returns (bytes read, bytes written)."""
    import xxhash

    record_bytes = view.record_bytes
    digests, read, written = [], 0, 0
    with atomic.atomic_write(os.path.join(folder, view.bank_file(layout.layer)), "wb") as handle:
        fd = handle.fileno()
        for _, count, records, bank_read in _tier_batches(model, view, bank, layout, type_id, batch_bytes):
            digests += [xxhash.xxh3_64_intdigest(records[index * record_bytes:(index + 1) * record_bytes])
                        for index in range(count)]
            _write_all(fd, records)
            advise(fd, written, count * record_bytes, "DONTNEED")
            read += bank_read
            written += count * record_bytes
            bar.update(count * record_bytes)
        os.fsync(fd)
    # a bank under its final name without a sidecar is simply rewritten by the next run
    sums = fmt.Checksums(layout.layer, record_bytes, view.fingerprint, digests)
    atomic.write_bytes(os.path.join(folder, view.checksum_file(layout.layer)), sums.pack())
    return read, written


def encode_tiered(model, folder, plan, *, force=False, batch_bytes=DEFAULT_BATCH_BYTES, bar=None):
    """Encode `plan` (plan_tiered) into `folder`: every (layer, tier) bank, then the v2 manifest.
    Resumable as core.encode_container: a bank is kept when its records check out against its sidecar
    and its source is unchanged: the manifest there records the same ladder and source tensors, or
    else (no manifest yet: an interrupted first run) the records built from the source hash to the
    sidecar's digests. Otherwise it is rewritten."""
    started = time.monotonic()
    manifest = plan.manifest
    folder = os.fspath(folder)
    existing = _prepare_folder(folder, manifest, force)
    same_ladder = existing is not None and [(t.quant, t.record_bytes) for t in existing.tiers] == \
        [(t.quant, t.record_bytes) for t in manifest.tiers]
    recorded = existing.bank_sources if same_ladder else {}
    bar = bar or progress(enabled=False)
    written_banks, skipped, read, written = [], [], 0, 0
    for tier, type_id in enumerate(plan.tier_types):
        view = manifest.tier_view(tier)
        for bank, layout in zip(plan.banks, view.banks):
            name = f"L{layout.layer}-T{tier}"
            sums = _matching_sidecar(folder, view, layout)
            keep = sums is not None
            if keep and recorded.get(layout.layer) != manifest.bank_sources.get(layout.layer):
                keep, bank_read = _source_matches_sidecar(model, view, bank, layout, type_id, batch_bytes, sums.digests)
                read += bank_read
            if keep and scan_bank(folder, view, layout, checksums=sums, batch_bytes=batch_bytes, limit=1).count == 0:
                skipped.append(name)
                bar.update(view.bank_bytes)
                continue
            bank_read, bank_written = _write_tier_bank(model, folder, view, bank, layout, type_id, batch_bytes, bar)
            read += bank_read
            written += bank_written
            written_banks.append(name)
    fmt.write_manifest(folder, manifest)
    _remove_orphans(folder, manifest)
    return TieredEncodeResult(folder, manifest, written_banks, skipped, read, written, time.monotonic() - started, plan.notes)


def _remove_orphans(folder, manifest):
    """Remove the bank and sidecar files the new manifest no longer lists (a previous encode's v1
    banks, or tiers of a longer ladder): once the manifest is replaced nothing reads them, and a
    stale experts-L{N}.bin beside a v2 container would still be opened by a v1-only reader."""
    listed = {fmt.MANIFEST_NAME}
    for tier in range(len(manifest.tiers)):
        view = manifest.tier_view(tier)
        listed |= {name for layer in view.layers for name in (view.bank_file(layer), view.checksum_file(layer))}
    for name in os.listdir(folder):
        if fmt.is_container_file(name) and not name.startswith(".") and name not in listed:
            os.unlink(os.path.join(folder, name))


# --- verify ------------------------------------------------------------------------------------


def require_tier_banks(manifest, folder):
    """FormatError naming the first bank file a v2 manifest lists that is not there (exit 2)."""
    missing = fmt.missing_tier_banks(os.fspath(folder), manifest)
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise FormatError(missing[0], f"bank missing{more}: the version-2 manifest {manifest.path} lists it")


def verify_tiered(folder, model=None, *, batch_bytes=DEFAULT_BATCH_BYTES, bar=None, keep=100, manifest=None):
    """container-verify for a v2 container: every tier's banks as v1's are checked (sizes, headers,
    padding, that tier's xxh3 sidecars); with `model`, a tier whose every matrix has the source's type
    is also compared byte for byte, the others by the source fingerprint. Each problem's field names
    its tier. Raises FormatError when a bank the manifest lists is missing."""
    started = time.monotonic()
    folder = os.fspath(folder)
    manifest = manifest or fmt.read_manifest(folder)
    require_tier_banks(manifest, folder)
    problems = Problems(keep=keep)
    notes, records, checked = [], 0, 0
    source_layouts = None
    if model is not None:
        source_layouts = [bank.layout for bank in plan_container(model, manifest.bank_numbering).banks]
        if model.fingerprint != manifest.fingerprint:
            problems.add(Problem(None, None, "model", f"the container was encoded from {manifest.source.get('file')} "
                                 f"(fingerprint {manifest.fingerprint or 'unknown'}), not from this model "
                                 f"(fingerprint {model.fingerprint})"))
    for tier in range(len(manifest.tiers)):
        view = manifest.tier_view(tier)
        copied = source_layouts is not None and not problems.count and \
            [(b.layer, b.slices) for b in view.banks] == [(b.layer, b.slices) for b in source_layouts]
        result = verify_container(folder, model if copied else None, batch_bytes=batch_bytes, bar=bar, keep=keep,
                                  manifest=view)
        for problem in result.problems.items:
            problems.add(dataclasses.replace(problem, field=f"tier {tier} {problem.field}"))
        problems.count += result.problems.count - len(result.problems.items)
        notes += [f"tier {tier}: {note}" for note in result.notes]
        records += result.records_checked
        checked += result.bytes_checked
    return VerifyResult(folder, manifest, problems, manifest.n_layers * len(manifest.tiers), records, checked,
                        model.path if model is not None else "", time.monotonic() - started, notes)


# --- plans against the ladder ------------------------------------------------------------------


def check_plan_tiers(plan_path, manifest):
    """FormatError (exit 2) naming the first pin of the plan at `plan_path` whose `tier`, or its
    `default_tier`, is outside the container's ladder (a v1 container's ladder is its one tier 0), or
    is not a tier at all (formats.plan.plan_tiers; a label is matched by moetools.tierlabels).
    Returns (pins with a tier, default_tier or None)."""
    from moetools.formats.plan import read_plan

    plan = read_plan(plan_path, manifest.tier_labels)
    return sum(tier is not None for tier in plan.pin_tiers), plan.default_tier
