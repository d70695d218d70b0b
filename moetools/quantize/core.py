"""Precision tiers of a MoE model's resident weights: plan, quantize, write, measure.

    model = open_model("k3-00001-of-00014.gguf")
    plans = plan_tiers(model, ["q8_0", "q4_K"], out_dir, full=False)
    report = run(model, plans, threads=2)

One pass over the source: each tensor is read in row ranges (tasks of at most `WORK_VALUES` values,
run on every core, the next tensors' tasks starting while one is written), dequantized once to
float32, quantized to every requested tier, written to each tier's GGUF in order and compared with
the source to measure the error. Peak memory is the tasks in flight (at most `SLAB_VALUES` float32
values, or one row each), not a tensor or the model. Every output goes to a temporary name and is renamed into place only when all
of them are complete, so an error (disk full, bad tensor) leaves no partial file.
"""

import contextlib
import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from moetools import atomic
from moetools.errors import InputError, OutputError, UsageError
from moetools.formats import resident_manifest
from moetools.gguf.constants import GGML_TYPE_IDS, VALUE_STRING, Keys, tensor_nbytes, type_name
from moetools.quantize import rules
from moetools.quantize.inputs import (  # noqa: F401 (re-exported: command.py and tests call core.parse_*)
    default_output_dir, model_facts, output_names, parse_ggml_type, parse_mixes, parse_tensor_types, parse_types)

SLAB_VALUES = 1 << 24  # float32 values in flight at once (64 MiB), at least WORK_VALUES per thread
COPY_BYTES = 64 << 20  # bytes copied at once for tensors written unchanged
WORK_VALUES = 1 << 20  # values per worker task inside a slab

# Metadata keys not copied from the source: the writer sets them, or they describe the source file.
_SKIPPED_KEYS = {Keys.ARCHITECTURE, Keys.ALIGNMENT, Keys.FILE_TYPE, "general.quantization_version",
                 Keys.SPLIT_NO, Keys.SPLIT_COUNT, Keys.SPLIT_TENSORS_COUNT}
QUANTIZATION_VERSION = 2  # GGML_QNT_VERSION
TIER_KEYS = (resident_manifest.TIER_KEY, resident_manifest.RESIDENT_ONLY_KEY, resident_manifest.SOURCE_MODEL_KEY,
             resident_manifest.SOURCE_FINGERPRINT_KEY)


@dataclass
class TensorPlan:
    """What happens to one tensor in one tier."""

    tensor: object  # moetools.gguf.TensorInfo of the source
    out_type: int  # ggml type id written
    action: str  # "quantize" (re-quantized), "keep" (llama-quantize keeps it), "copy" (already the type)
    reason: str = ""  # why kept, or why the type fell back
    fallback: bool = False
    expert: bool = False  # a routed-expert tensor (only in --full tiers)
    out_shard: int = 0  # index of the output file holding it (--keep-split)
    imatrix: object = None  # float32 importance weights (ne0 * matrices), or None

    @property
    def out_bytes(self):
        return tensor_nbytes(self.out_type, self.tensor.shape)


@dataclass
class TensorError:
    """Error of one re-quantized tensor against its (dequantized) source."""

    name: str
    source_type: str
    type: str
    n_values: int
    sse: float = 0.0  # sum of squared errors
    ss_source: float = 0.0  # sum of squared source values
    max_abs_error: float = 0.0
    max_abs_source: float = 0.0

    def add(self, sse, ss_source, max_abs_error, max_abs_source):
        self.sse += sse
        self.ss_source += ss_source
        self.max_abs_error = max(self.max_abs_error, max_abs_error)
        self.max_abs_source = max(self.max_abs_source, max_abs_source)

    @property
    def rmse(self):
        return math.sqrt(self.sse / self.n_values) if self.n_values else 0.0

    @property
    def rel_rmse(self):
        """RMSE relative to the source's RMS: scale-free, comparable across tensors."""
        return math.sqrt(self.sse / self.ss_source) if self.ss_source else 0.0

    @property
    def max_rel_error(self):
        """Largest absolute error relative to the tensor's largest |value|."""
        return self.max_abs_error / self.max_abs_source if self.max_abs_source else 0.0

    def to_doc(self):
        return {"tensor": self.name, "source_type": self.source_type, "type": self.type, "values": self.n_values,
                "rmse": self.rmse, "rel_rmse": self.rel_rmse, "max_abs_error": self.max_abs_error,
                "max_rel_error": self.max_rel_error}


@dataclass
class TierPlan:
    tier: str  # tier label: the mix name (Q4_K_M), or the ggml type with --pure
    file_type: int  # llama_ftype written as general.file_type
    gguf_paths: list  # one output file, or one per source shard with --keep-split
    manifest_path: str  # "" for --full
    tensors: list  # TensorPlan, in output order
    full: bool = False
    errors: dict = field(default_factory=dict)  # name -> TensorError, filled by run()
    imatrix: object = None  # formats.imatrix.Imatrix used for this tier, or None
    pending: set = None  # indices of the files still to write (core.stage), None before staging
    reused: dict = field(default_factory=dict)  # file name -> staged piece a killed run finished
    run_key: str = ""
    command_key: str = ""  # staged.run_key of every tier of the command (recorded in the manifest)
    measure: bool = True  # measure the error against the source (--no-error: not, --full only)

    @property
    def gguf_path(self):
        return self.gguf_paths[0]

    def fallbacks(self):
        return [{"tensor": p.tensor.name, "type": type_name(p.out_type), "reason": p.reason} for p in self.tensors if p.fallback]


@dataclass
class TierResult:
    """The rate-distortion figures of one written tier."""

    tier: str
    gguf: str  # the first file with --keep-split
    gguf_files: list
    manifest: str  # None for --full
    file_bytes: int  # all files
    resident_bytes: int  # tensor bytes of the resident tensors written
    total_tensor_bytes: int  # all tensor bytes written (differs from resident_bytes with --full)
    tensor_count: int
    resident_values: int
    bits_per_weight: float  # over the resident tensors
    rmse: float  # over every re-quantized value
    rel_rmse: float
    max_rel_error: float
    quantized: int
    kept: int
    copied: int
    fallbacks: list
    tensors: list  # TensorError docs of the re-quantized tensors, worst (rel_rmse) first
    types: dict = field(default_factory=dict)  # ggml type -> tensors written in it (kept ones apart), experts of --full included
    estimated_seconds: float = 0.0  # from the measured kernel speeds (kernels.MEASURED_MB_PER_S)

    def to_doc(self, worst=5):
        doc = {key: value for key, value in self.__dict__.items() if key != "tensors"}
        doc["worst_tensors"] = self.tensors[:worst]
        return doc


def plan_tiers(model, mixes, out_dir, full=False, force=False, keep_split=False, imatrix=None):
    """Plan every tier before anything is written: output paths, per-tensor type and action.

    `mixes`: [rules.Mix] (parse_mixes). Each tensor's type is llama-quantize's choice for the mix
    (rules.choose_types over every tensor of the model, in llama-quantize's order, so the layer
    rules see the same counters); routed experts are left out (resident-only) or, with `full`,
    quantized by the same mix as every other tensor (as llama-quantize writes the whole model).
    `imatrix`: a formats.imatrix.Imatrix whose entries weigh the quantized tensors, or None.
    With `full` and `keep_split`, a tier is written as many files as the source has shards, each
    holding the tensors of its source shard (as llama-quantize --keep-split does).

    Raises OutputError for an existing output without `force`, InputError for a tensor that must be
    re-quantized but whose source type cannot be dequantized, or an imatrix that does not belong to
    the model, UsageError for a mix that needs an imatrix without one."""
    from moetools.quantize import kernels

    expert_names = {tensor.name for tensor in model.expert_tensors}
    n_files = len(model.shards) if full and keep_split else 1
    facts = model_facts(model)
    if imatrix is not None:
        _check_imatrix_names(model, imatrix)
    plans = []
    for mix in mixes:
        try:
            choices = rules.choose_types(mix, facts, [(tensor.name, tensor.shape) for tensor in model.tensors])
        except ValueError as err:
            raise InputError(model.path, f"{mix.label}: {err}") from None
        if imatrix is None:
            for name, choice in choices.items():
                if choice.requires_imatrix:
                    raise UsageError(f"{mix.label} requires an importance matrix (tensor {name!r} is {choice.type} in a "
                                     "very low-bit mix, as llama-quantize refuses it without one): pass --imatrix FILE")
        gguf_names, manifest_name = output_names(model.path, mix.label, full, n_files)
        tensors = []
        for tensor in model.tensors:
            expert = tensor.name in expert_names
            if expert and not full:
                continue
            choice = choices[tensor.name]
            if choice.type is None:
                tensors.append(TensorPlan(tensor, tensor.type_id, "keep", choice.keep_reason, expert=expert))
                continue
            chosen, fallback = choice.type, choice.fallback_reason
            chosen_id = GGML_TYPE_IDS[chosen]
            if chosen_id == tensor.type_id:
                tensors.append(TensorPlan(tensor, chosen_id, "copy", fallback or "already " + chosen, bool(fallback),
                                          expert=expert))
                continue
            weights = _imatrix_for(model, tensor, imatrix, choice) if imatrix is not None else None
            if not kernels.can_dequantize(tensor.type_id):
                raise InputError(model.shards[tensor.shard], f"tensor {tensor.name!r} is {tensor.type_name}, which cannot be "
                                 f"dequantized to re-quantize it to {chosen}", offset=tensor.offset)
            tensors.append(TensorPlan(tensor, chosen_id, "quantize", fallback or "", bool(fallback), expert=expert,
                                      imatrix=weights))
        if n_files > 1:
            for tensor_plan in tensors:
                tensor_plan.out_shard = tensor_plan.tensor.shard
        plans.append(TierPlan(mix.label, mix.ftype, [os.path.join(out_dir, name) for name in gguf_names],
                              os.path.join(out_dir, manifest_name) if manifest_name else "", tensors, full,
                              imatrix=imatrix))
    if not force:
        refuse_existing(plans)
    return plans


def refuse_existing(plans):
    """OutputError naming the first output that already exists (without --force)."""
    for plan in plans:
        for path in (*plan.gguf_paths, plan.manifest_path):
            if path and os.path.lexists(path):
                raise OutputError(f"{path}: already exists (use --force to replace it)")


def _check_imatrix_names(model, imatrix):
    """An imatrix made on another model names tensors this one does not have: refuse it (exit 2)."""
    names = {tensor.name for tensor in model.tensors}
    unknown = sorted(name for name in imatrix.entries if name not in names)
    if unknown:
        raise InputError(imatrix.path, f"imatrix entry {unknown[0]!r} is not a tensor of {os.path.basename(model.path)}"
                         f"{f' (nor are {len(unknown) - 1} more)' if len(unknown) > 1 else ''}: "
                         "an importance matrix of another model", key=unknown[0])
    if not imatrix.entries:
        raise InputError(imatrix.path, "imatrix holds no entries")


def _imatrix_for(model, tensor, imatrix, choice):
    """The imatrix weights llama-quantize uses for `tensor` (ne0 values per matrix), or None where it
    has none; InputError for weights of another size, UsageError where the mix needs them."""
    weights = imatrix.entries.get(tensor.name)
    ne0 = tensor.shape[0]
    matrices = tensor.shape[2] if len(tensor.shape) > 2 else 1
    if weights is not None and weights.size != ne0 * matrices:
        if tensor.name not in ("token_embd.weight", "per_layer_token_embd.weight"):
            raise InputError(imatrix.path, f"imatrix entry {tensor.name!r} holds {weights.size} values, the tensor needs "
                             f"{ne0 * matrices} ({ne0} per row x {matrices}): an importance matrix of another model",
                             key=tensor.name)
        weights = None  # llama-quantize ignores a token embedding's (it is not a matmul weight)
    if weights is None and choice.requires_imatrix:
        raise InputError(imatrix.path, f"imatrix has no entry for {tensor.name!r}, which the mix quantizes to {choice.type} "
                         "(a very low-bit quantization llama-quantize refuses without one)", key=tensor.name)
    return weights


def prepare_output_dir(out_dir):
    """Create the output folder if needed; OutputError when it cannot be created or written."""
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as err:
        raise OutputError(f"{out_dir}: cannot create the output folder: {err.strerror or err}") from None
    if not os.path.isdir(out_dir):
        raise OutputError(f"{out_dir}: not a folder")
    if not os.access(out_dir, os.W_OK | os.X_OK):
        raise OutputError(f"{out_dir}: output folder is not writable")


def _metadata_items(model):
    """[(key, value, gguf value type, array element type or None)] of the source metadata to copy.
    A long string array (a vocabulary's tokens and merges) is given as the bytes stored, not
    decoded: gguf's writer takes bytes for a string as they are, so the tokens are copied exactly
    (decoding replaced any that are not UTF-8) and neither decoded nor encoded again (on a 164k-token
    vocabulary that was a third of the header's 1.3 s of CPU)."""
    from moetools.gguf.header import split_encoded_strings

    header = model.headers[0]
    items = []
    for key, value in header.metadata.items():
        if key in _SKIPPED_KEYS or key in TIER_KEYS:
            continue
        kind = header.value_types[key]
        if isinstance(kind, tuple):
            if hasattr(value, "encoded") and kind[1] == VALUE_STRING:
                value = split_encoded_strings(value.encoded(), value.count)
                if value is None:
                    raise InputError(model.path, f"string array {key!r} changed since its header was read", key=key)
            elif hasattr(value, "load"):
                value = value.load()
            if not value:
                continue  # gguf's writer cannot write an empty array; llama.cpp treats absent as empty
            items.append((key, value, kind[0], kind[1]))
        else:
            items.append((key, value, kind, None))
    return items


IMATRIX_KEYS = ("quantize.imatrix.file", "quantize.imatrix.dataset", "quantize.imatrix.entries_count",
                "quantize.imatrix.chunks_count")


def _open_writer(model, plan, handle, file_index=0, metadata=None):
    """Write the header (metadata and tensor infos) of `plan`'s output file `file_index` into
    `handle`. Split outputs carry the metadata in the first file only, and the split keys in every
    file, as llama.cpp writes them; a tier made with an imatrix carries llama-quantize's
    quantize.imatrix.* keys. The header is made by gguf.GGUFWriter through its public API only
    (it writes to a path: a private temporary folder, whose bytes are copied into `handle`).
    `metadata`: _metadata_items(model), when the caller has it (one list for every tier's file)."""
    import shutil
    import tempfile

    import numpy as np
    from gguf import GGMLQuantizationType, GGUFValueType, GGUFWriter

    with tempfile.TemporaryDirectory(prefix="moetools-header-") as folder:
        header_path = os.path.join(folder, "header.gguf")
        writer = GGUFWriter(header_path, model.architecture)
        alignment = model.headers[0].alignment
        if alignment != writer.data_alignment:
            writer.add_custom_alignment(alignment)
        if file_index == 0:
            for key, value, kind, sub_type in metadata if metadata is not None else _metadata_items(model):
                if key in IMATRIX_KEYS and plan.imatrix is not None:
                    continue
                writer.add_key_value(key, value, GGUFValueType(kind),
                                     sub_type=GGUFValueType(sub_type) if sub_type is not None else None)
            writer.add_uint32(Keys.FILE_TYPE, plan.file_type)
            writer.add_uint32("general.quantization_version", QUANTIZATION_VERSION)
            if plan.imatrix is not None:  # as llama-quantize records it (its kv overrides)
                writer.add_string(IMATRIX_KEYS[0], str(plan.imatrix.path)[:127])
                if plan.imatrix.datasets:
                    writer.add_string(IMATRIX_KEYS[1], plan.imatrix.datasets[0][:127])
                writer.add_uint32(IMATRIX_KEYS[2], len(plan.imatrix.entries))
                if plan.imatrix.chunk_count > 0:
                    writer.add_uint32(IMATRIX_KEYS[3], plan.imatrix.chunk_count)
            writer.add_string(resident_manifest.TIER_KEY, plan.tier)
            writer.add_bool(resident_manifest.RESIDENT_ONLY_KEY, not plan.full)
            writer.add_string(resident_manifest.SOURCE_MODEL_KEY, os.path.basename(model.path))
            writer.add_string(resident_manifest.SOURCE_FINGERPRINT_KEY, model.fingerprint)
        if len(plan.gguf_paths) > 1:
            writer.add_uint16(Keys.SPLIT_NO, file_index)
            writer.add_uint16(Keys.SPLIT_COUNT, len(plan.gguf_paths))
            writer.add_int32(Keys.SPLIT_TENSORS_COUNT, len(plan.tensors))
        for tensor_plan in plan.tensors:
            if tensor_plan.out_shard != file_index:
                continue
            tensor = tensor_plan.tensor
            writer.add_tensor_info(tensor.name, tuple(reversed(tensor.shape)), np.dtype(np.float32), tensor_plan.out_bytes,
                                   raw_dtype=GGMLQuantizationType(tensor_plan.out_type))
        try:
            writer.write_header_to_file()
            writer.write_kv_data_to_file()
            writer.write_ti_data_to_file()
            writer.close()
        except OSError as err:  # gguf's writer names no file: say which output and where its header was built
            raise OutputError(f"{handle.path}: writing its header in {folder} failed: {err.strerror or err}") from None
        with open(header_path, "rb") as header:
            shutil.copyfileobj(header, handle, COPY_BYTES)


def _write(handle, data):
    """Every tensor byte goes through here (tests make it fail to simulate a full disk)."""
    handle.write(data)


def _pad(handle, alignment):
    position = handle.tell()
    padding = -position % alignment
    if padding:
        _write(handle, b"\0" * padding)


def _quantize_rows(source, out_type, first_row, rows_per_matrix, weights):
    """Quantize rows first_row.. of a tensor (source (n, ne0)) with its imatrix `weights` (ne0 per
    matrix of `rows_per_matrix` rows) or none, splitting where a matrix ends, as llama-quantize
    gives each expert matrix its own slice."""
    import numpy as np

    from moetools.quantize import kernels

    if weights is None:
        return kernels.quantize(source, out_type, threads=1)
    ne0 = source.shape[1]
    parts = []
    row = 0
    while row < source.shape[0]:
        matrix = (first_row + row) // rows_per_matrix
        count = min(source.shape[0] - row, (matrix + 1) * rows_per_matrix - (first_row + row))
        parts.append(kernels.quantize(source[row:row + count], out_type, threads=1, imatrix=weights[matrix * ne0:(matrix + 1) * ne0]))
        row += count
    return np.concatenate(parts) if len(parts) > 1 else parts[0]


def rows_per_matrix(tensor):
    """Rows of one matrix of `tensor` (an expert tensor stacks several; llama-quantize gives each its imatrix slice)."""
    return tensor.shape[1] if len(tensor.shape) > 1 else 1


def _quantize_task(model, tensor, first_row, n_rows, out_types, measure=True):
    """Dequantize rows of `tensor`, quantize them to each (type, imatrix weights or None) in
    `out_types`, measure the errors (unless not `measure`: then the figures are 0).

    Returns [(bytes (uint8 array), sse, ss_source, max_abs_error, max_abs_source)] per type."""
    import numpy as np

    from moetools.quantize import kernels

    row_length = tensor.shape[0]
    row_bytes = tensor_nbytes(tensor.type_id, (row_length,))
    # the rows mapped, not copied (a read-only view of the page cache; the reader's pread where the
    # file cannot be mapped), released when the task is done
    raw = np.frombuffer(model.view_tensor_bytes(tensor, first_row * row_bytes, n_rows * row_bytes), dtype=np.uint8)
    source = kernels.dequantize(raw, tensor.type_id, (n_rows, row_length))
    if not measure:
        return [(_quantize_rows(source, out_type, first_row, rows_per_matrix(tensor), weights), 0.0, 0.0, 0.0, 0.0)
                for out_type, weights in out_types]
    ss_source, peak_source = kernels.source_figures(source)
    if not (math.isfinite(ss_source) and math.isfinite(peak_source)):
        bad_row = first_row + int(np.argmin(np.isfinite(source).all(axis=1)))
        raise InputError(model.shards[tensor.shard], f"tensor {tensor.name!r} holds NaN or infinite values (row {bad_row}); "
                         "it cannot be quantized", offset=tensor.offset + bad_row * row_bytes)
    results = []
    for out_type, weights in out_types:
        data = _quantize_rows(source, out_type, first_row, rows_per_matrix(tensor), weights)
        sse, peak_error = kernels.error_figures(data, out_type, source)
        results.append((data, sse, ss_source, peak_error, peak_source))
    return results


def run(model, plans, out_dir, threads=None, progress=None):
    """Write every planned tier in one pass over the source; returns [TierResult] in plan order.

    All or nothing: every file is written into `out_dir`'s staging folder (staged.py) and renamed
    into `out_dir` only once every file and manifest of the run is complete; a file is closed as
    soon as its last tensor is written (with --keep-split, shard by shard), so a run killed midway
    leaves its finished files for the next run of the same plan to reuse. An error (disk full, bad
    tensor) leaves nothing. The caller holds `out_dir`'s lock.
    `progress` is an object with `update(n_bytes)` (source bytes processed)."""
    from moetools.quantize import staged
    from moetools.quantize.kernels import default_threads

    threads = threads or default_threads()
    if any(tier.pending is None for tier in plans):
        stage(model, plans, out_dir)
    key = plans[0].run_key
    pieces = {os.path.basename(path): tier.reused[os.path.basename(path)] for tier in plans for path in tier.gguf_paths
              if os.path.basename(path) in tier.reused}
    committed = False
    try:
        _write_pending(model, plans, out_dir, key, pieces, threads, progress)
        results = [_result(model, tier, threads=threads,
                           paths=[staged.staging_path(out_dir, os.path.basename(p)) for p in tier.gguf_paths])
                   for tier in plans]
        for tier, result in zip(plans, results):
            if tier.manifest_path:
                staged_manifest = staged.staging_path(out_dir, os.path.basename(tier.manifest_path))
                piece = pieces[os.path.basename(tier.gguf_path)]
                resident_manifest.write_manifest(staged_manifest, _manifest(model, tier, result, piece), overwrite=True)
        files, manifests = staged.publish_order(plans)
        remove = [name for name in manifests if os.path.lexists(os.path.join(out_dir, name))]
        committed = True
        staged.publish(out_dir, key, files, remove, [result.__dict__ for result in results])
    except BaseException:
        if not committed or staged.staging.read_journal(out_dir) is None:
            staged.staging.clear(out_dir)  # an error, not a kill: leave nothing behind
        raise
    return results


def stage(model, plans, out_dir):
    """Prepare `plans` for `run` into `out_dir`: the files a killed run of the same plan finished
    (verified by their digests) are reused, everything else is pending. Returns the reused names."""
    from moetools.quantize import staged

    key = staged.run_key(model, plans)
    reused = staged.reusable_pieces(out_dir, key)
    os.makedirs(staged.staging_path(out_dir, ""), exist_ok=True)
    for tier in plans:
        tier.run_key = key
        tier.errors = {}
        tier.reused = {}
        tier.pending = set()
        for index, path in enumerate(tier.gguf_paths):
            name = os.path.basename(path)
            if name in reused:
                tier.reused[name] = reused[name]
                _restore_errors(tier, reused[name])
            else:
                tier.pending.add(index)
    return sorted(reused)


def results_from_journal(journal):
    """The TierResults a committed run recorded (a run that finished what a killed run committed)."""
    return [TierResult(**doc) for doc in journal.get("results", [])]


def _restore_errors(tier, piece):
    for name, source_type, type_text, n_values, sse, ss_source, max_err, max_source in piece.get("errors", []):
        error = TensorError(name, source_type, type_text, n_values)
        error.add(sse, ss_source, max_err, max_source)
        tier.errors[name] = error


def _write_pending(model, plans, out_dir, key, pieces, threads, progress):
    """Write the files of `plans` not yet staged, in one pass over the source; each file is put in
    place in the staging folder (and recorded in its state) right after its last tensor."""
    from moetools.quantize import staged

    alignment = model.headers[0].alignment
    by_name = [{plan.tensor.name: plan for plan in tier.tensors if plan.out_shard in tier.pending} for tier in plans]
    last_tensor = {}  # (tier index, file index) -> name of the file's last tensor
    for index, tier in enumerate(plans):
        for tensor_plan in tier.tensors:
            last_tensor[(index, tensor_plan.out_shard)] = tensor_plan.tensor.name
    finished = 0
    metadata = None  # _metadata_items(model), made for the first file and shared by all
    with contextlib.ExitStack() as stack, ThreadPoolExecutor(max_workers=threads) as pool:
        open_files = {}  # (tier index, file index) -> (context manager, HashingWriter)

        def close(index, file_index):
            nonlocal finished
            writing, handle = open_files.pop((index, file_index))
            _pad(handle, alignment)
            writing.__exit__(None, None, None)
            name = os.path.basename(plans[index].gguf_paths[file_index])
            names = {p.tensor.name for p in plans[index].tensors if p.out_shard == file_index}
            pieces[name] = {"bytes": handle.tell(), "xxh3": handle.digest.hexdigest(), "errors": [
                [e.name, e.source_type, e.type, e.n_values, e.sse, e.ss_source, e.max_abs_error, e.max_abs_source]
                for e in plans[index].errors.values() if e.name in names]}
            staged.staging.write_state(out_dir, key, pieces)
            finished += 1
            staged.fault_point("piece", finished)

        for index, tier in enumerate(plans):
            for file_index in sorted(tier.pending):
                writing = atomic.atomic_write(staged.staging_path(out_dir, os.path.basename(tier.gguf_paths[file_index])),
                                              "wb", overwrite=True)
                handle = staged.HashingWriter(writing.__enter__(), tier.gguf_paths[file_index])
                stack.callback(_abandon, writing, open_files, (index, file_index))
                open_files[(index, file_index)] = (writing, handle)
                if metadata is None and file_index == 0:
                    metadata = _metadata_items(model)
                _open_writer(model, tier, handle, file_index, metadata)
                if (index, file_index) not in last_tensor:
                    close(index, file_index)
        def write_step(job, kind, result):
            if kind == "begin":
                for handle in job.outputs.values():
                    _pad(handle, alignment)
                _start_errors(job, plans)
            elif kind == "copy":
                _copy_tensor(model, job, progress)
            elif kind == "rows":
                _write_rows(job, plans, result, progress)
            else:  # "end": close the files this tensor completes
                for index, plan in job.wanted:
                    if last_tensor[(index, plan.out_shard)] == job.tensor.name:
                        close(index, plan.out_shard)

        def jobs():
            for tensor in model.tensors:
                wanted = [(index, table[tensor.name]) for index, table in enumerate(by_name) if tensor.name in table]
                if wanted:
                    yield _TensorJob(tensor, wanted, {index: open_files[(index, plan.out_shard)][1] for index, plan in wanted},
                                     any(plans[index].measure for index, _ in wanted))

        _run_in_order(pool, _steps(jobs(), threads), model, write_step, max(SLAB_VALUES, threads * WORK_VALUES))


@dataclass
class _TensorJob:
    """One source tensor of the pass and every tier file it goes to."""

    tensor: object
    wanted: list  # [(tier index, TensorPlan)]
    outputs: dict  # tier index -> HashingWriter
    measure: bool  # whether any tier re-quantizing it measures its error

    @property
    def quantize(self):
        return [(index, plan) for index, plan in self.wanted if plan.action == "quantize"]

    @property
    def out_types(self):
        return [(plan.out_type, plan.imatrix) for _, plan in self.quantize]


def _row_tasks(tensor, threads):
    """Row ranges [(first_row, n_rows)] of one tensor's re-quantization tasks: at most WORK_VALUES
    values each (at least one row), and at least `threads` of them when the tensor has the rows,
    so a small tensor keeps every core busy too."""
    row_length = max(1, tensor.shape[0])
    n_rows = tensor.n_elements // row_length
    per_task = max(1, min(WORK_VALUES // row_length, -(-n_rows // max(1, threads))))
    return [(first, min(per_task, n_rows - first)) for first in range(0, n_rows, per_task)]


def _steps(jobs, threads):
    """The pass as steps in output order: per tensor ("begin"), ("copy") for the tiers that take
    it as it is, ("rows", first, n) per re-quantization task, ("end")."""
    for job in jobs:
        yield job, "begin", None
        if len(job.quantize) < len(job.wanted):
            yield job, "copy", None
        if job.quantize:
            for task in _row_tasks(job.tensor, threads):
                yield job, "rows", task
        yield job, "end", None


def _run_in_order(pool, steps, model, write_step, max_values):
    """Run `steps` with their re-quantization tasks in `pool` ahead of the writes (at most
    `max_values` source values in flight: the memory bound, and what lets the next tensors' tasks
    start while this one's are written), writing every step in order with `write_step(job, kind,
    result)`. On an error or interrupt the queued tasks are cancelled."""
    import collections

    window = collections.deque()
    in_flight = 0
    steps = iter(steps)
    exhausted = False
    try:
        while True:
            while not exhausted and (not window or in_flight < max_values):
                step = next(steps, None)
                if step is None:
                    exhausted = True
                    break
                job, kind, task = step
                future = None
                if kind == "rows":
                    future = pool.submit(_quantize_task, model, job.tensor, task[0], task[1], job.out_types, job.measure)
                    in_flight += task[1] * job.tensor.shape[0]
                window.append((job, kind, task, future))
            if not window:
                return
            job, kind, task, future = window.popleft()
            if future is not None:
                in_flight -= task[1] * job.tensor.shape[0]
            try:
                write_step(job, kind, (task, future.result()) if future is not None else None)
            except OSError as err:  # a write failed (a full disk): name the file, as atomic_write would
                raise OutputError(f"{next(iter(job.outputs.values())).path}: write failed: {err.strerror or err}") from None
    except BaseException:
        for _, _, _, future in window:
            if future is not None:
                future.cancel()
        raise


def _start_errors(job, plans):
    for index, plan in job.quantize:
        if plans[index].measure:
            plans[index].errors[job.tensor.name] = TensorError(job.tensor.name, job.tensor.type_name,
                                                               type_name(plan.out_type), job.tensor.n_elements)


def _copy_tensor(model, job, progress):
    """Write one source tensor as it is to every tier that keeps or already has its type."""
    tensor = job.tensor
    unchanged = [index for index, plan in job.wanted if plan.action != "quantize"]
    for start in range(0, tensor.n_bytes, COPY_BYTES):
        chunk = model.read_tensor_bytes(tensor, start, min(COPY_BYTES, tensor.n_bytes - start))
        for index in unchanged:
            _write(job.outputs[index], chunk)
        if not job.quantize and progress is not None:
            progress.update(len(chunk))


def _write_rows(job, plans, result, progress):
    """Write one finished re-quantization task (its rows for every tier) and add up its errors."""
    (_, n_rows), results = result
    for (index, plan), (data, sse, ss_source, max_err, max_source) in zip(job.quantize, results):
        _write(job.outputs[index], data)
        if plans[index].measure:
            plans[index].errors[job.tensor.name].add(sse, ss_source, max_err, max_source)
    if progress is not None:
        progress.update(n_rows * tensor_nbytes(job.tensor.type_id, (job.tensor.shape[0],)))


def _abandon(writing, open_files, file_key):
    """Exit-stack callback: a file still open when the pass ends early is discarded (its temporary removed)."""
    if file_key in open_files:
        open_files.pop(file_key)
        with contextlib.suppress(BaseException):
            writing.__exit__(OSError, OSError("abandoned"), None)


def kernels_to_compile(plans):
    """Type names whose compiled kernels this run needs and numba's cache lacks (kernels.uncompiled_types):
    what a first run compiles before it quantizes."""
    from moetools.quantize import kernels

    requantized = [(tier, plan) for tier in plans for plan in tier.tensors
                   if plan.action == "quantize" and (tier.pending is None or plan.out_shard in tier.pending)]
    dequantized = {plan.tensor.type_id for _, plan in requantized}
    measured = {plan.out_type for tier, plan in requantized if tier.measure}
    return kernels.uncompiled_types({plan.out_type for _, plan in requantized}, dequantized, measured)


def estimate(model, tiers, threads=None):
    """TierResults of planned tiers without writing or measuring anything (a dry run): bytes, bits
    per weight and fallbacks are exact; file sizes and error figures are None."""
    return [_result(model, tier, written=False, threads=threads) for tier in tiers]


def planned_bytes(tier):
    """Tensor bytes the tier's files will hold (their headers add a few MiB at most)."""
    return sum(plan.out_bytes for plan in tier.tensors)


def tier_seconds(tier, threads=None):
    """Estimated seconds to quantize `tier` on `threads` cores, from the measured kernel speeds."""
    from moetools.quantize import kernels

    threads = threads or kernels.default_threads()
    return sum(kernels.estimated_seconds(plan.out_type, plan.tensor.n_elements, threads, plan.imatrix is not None)
               for plan in tier.tensors if plan.action == "quantize")


def _result(model, tier, written=True, threads=None, paths=None):
    files_written = written
    resident = [plan for plan in tier.tensors if not plan.expert]
    resident_bytes = sum(plan.out_bytes for plan in resident)
    resident_values = sum(plan.tensor.n_elements for plan in resident)
    errors = list(tier.errors.values())
    written = written and tier.measure  # error figures only where they were measured (else None)
    n_values = sum(error.n_values for error in errors)
    sse = sum(error.sse for error in errors)
    ss_source = sum(error.ss_source for error in errors)
    errors.sort(key=lambda error: (-error.rel_rmse, error.name))
    return TierResult(
        tier=tier.tier,
        gguf=tier.gguf_path,
        gguf_files=list(tier.gguf_paths),
        manifest=tier.manifest_path or None,
        file_bytes=sum(os.path.getsize(path) for path in (paths or tier.gguf_paths)) if files_written else None,
        resident_bytes=resident_bytes,
        total_tensor_bytes=sum(plan.out_bytes for plan in tier.tensors),
        tensor_count=len(tier.tensors),
        resident_values=resident_values,
        bits_per_weight=resident_bytes * 8 / resident_values if resident_values else 0.0,
        rmse=(math.sqrt(sse / n_values) if n_values else 0.0) if written else None,
        rel_rmse=(math.sqrt(sse / ss_source) if ss_source else 0.0) if written else None,
        max_rel_error=max((error.max_rel_error for error in errors), default=0.0) if written else None,
        # counts over every tensor written (a --full tier's routed experts included)
        quantized=sum(1 for plan in tier.tensors if plan.action == "quantize"),
        kept=sum(1 for plan in tier.tensors if plan.action == "keep"),
        copied=sum(1 for plan in tier.tensors if plan.action == "copy"),
        fallbacks=tier.fallbacks(),
        tensors=[error.to_doc() for error in errors],
        types=_type_counts(tier.tensors),
        estimated_seconds=round(tier_seconds(tier, threads), 1),
    )


def _type_counts(tensor_plans):
    counts = {}
    for plan in tensor_plans:
        if plan.action != "keep":
            counts[type_name(plan.out_type)] = counts.get(type_name(plan.out_type), 0) + 1
    return dict(sorted(counts.items(), key=lambda item: -item[1]))


def _manifest(model, tier, result, piece):
    return resident_manifest.ResidentManifest(
        tier_label=tier.tier,
        resident_bytes=result.resident_bytes,
        gguf=os.path.basename(tier.gguf_path),
        source_model=os.path.basename(model.path),
        source_fingerprint=model.fingerprint,
        tensor_count=result.tensor_count,
        bits_per_weight=result.bits_per_weight,
        rmse=result.rmse,
        max_rel_error=result.max_rel_error,
        fallbacks=result.fallbacks,
        extra={"rel_rmse": result.rel_rmse, "source_shards": len(model.shards), "file_type": tier.file_type,
               # what a rerun of the same command checks before it keeps this tier (resume_finished)
               "run_key": tier.command_key or tier.run_key, "gguf_bytes": piece["bytes"], "gguf_xxh3": piece["xxh3"],
               "tensor_errors": piece["errors"]},
    )


def work_bytes(model, plans):
    """Source bytes `run` reads (for a progress bar): each tensor at most once."""
    names = {plan.tensor.name for tier in plans for plan in tier.tensors if tier.pending is None or plan.out_shard in tier.pending}
    return sum(tensor.n_bytes for tensor in model.tensors if tensor.name in names)
