"""A whole model: one GGUF file or a validated shard set, its tensor table and its summary.

This is the one way moetools opens a GGUF. It reads headers only; a tool that needs a tensor's data
asks for it (`read_tensor_bytes`, `view_tensor_bytes`, `tensor_memmap`).
"""

import glob
import os
import re
from functools import cached_property, lru_cache

from moetools.errors import GGUFError
from moetools.fileio import map_read, open_read, pread, preadinto
from moetools.gguf.constants import LLAMA_MAX_EXPERTS, LLAMA_MAX_LAYERS, Keys
from moetools.gguf.header import LazyArray, read_header

_IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") and "SC_IOV_MAX" in os.sysconf_names else 1024
SPLIT_NAME_RE = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")
EXPERT_TENSOR_RE = re.compile(r"^blk\.(\d+)\.ffn_(gate|up|down|gate_up)_exps\.")
BLOCK_RE = re.compile(r"^blk\.(\d+)\.")


def split_name(path):
    """(prefix, shard number 1-based, shard count) for `NAME-0000k-of-0000N.gguf`, else None."""
    match = SPLIT_NAME_RE.match(os.path.basename(path))
    if not match:
        return None
    prefix = os.path.join(os.path.dirname(path), match["prefix"])
    return prefix, int(match["no"]), int(match["count"])


def model_stem(path):
    """A model's name without folder, `.gguf` or split suffix: `k3-00001-of-00014.gguf` -> `k3`."""
    parsed = split_name(path)
    if parsed:
        return os.path.basename(parsed[0])
    name = os.path.basename(path)
    return name[: -len(".gguf")] if name.endswith(".gguf") else name


def shard_path(prefix, number, count):
    return f"{prefix}-{number:05d}-of-{count:05d}.gguf"


# A model's tensor names are classified several times over (expert or not, by block, by matrix) on the
# header path: each name's regex match is made once (on a 93-block, 2,300-tensor model ~10 ms of CPU).
_NAMES_CACHED = 1 << 16


@lru_cache(maxsize=_NAMES_CACHED)
def expert_tensor_kind(name):
    """`(block, matrix)` for a routed-expert tensor (`gate`, `up`, `down`, `gate_up`), else None."""
    match = EXPERT_TENSOR_RE.match(name)
    return (int(match[1]), match[2]) if match else None


@lru_cache(maxsize=_NAMES_CACHED)
def tensor_block(name):
    """The block number of a `blk.N.*` tensor, else None."""
    match = BLOCK_RE.match(name)
    return int(match[1]) if match else None


class ModelSummary:
    """What a tool needs to know about a model's shape. Per-layer values are lists of block_count.

    Fields: architecture, name, block_count, context_length, embedding_length, vocab_size,
    expert_count, expert_used_count, expert_shared_count, leading_dense_block_count, moe_layers
    (blocks holding routed experts), head_count and head_count_kv (per layer), key_length,
    value_length, key_length_mla, value_length_mla, kv_lora_rank, q_lora_rank, rope_dimension_count,
    sliding_window, sliding_window_pattern (the raw key: a period, per-layer flags, or None),
    feed_forward_length (per layer), expert_feed_forward_length, expert_latent_length,
    nextn_predict_layers, file_type. (A plain class: the header path does not import dataclasses.)
    """

    FIELDS = (
        "architecture", "name", "block_count", "context_length", "embedding_length", "vocab_size",
        "expert_count", "expert_used_count", "expert_shared_count", "leading_dense_block_count",
        "moe_layers", "head_count", "head_count_kv", "key_length", "value_length", "key_length_mla",
        "value_length_mla", "kv_lora_rank", "q_lora_rank", "rope_dimension_count", "sliding_window",
        "sliding_window_pattern", "feed_forward_length", "expert_feed_forward_length",
        "expert_latent_length", "nextn_predict_layers", "file_type",
    )

    def __init__(self, **values):
        missing = set(self.FIELDS) - set(values)
        unknown = set(values) - set(self.FIELDS)
        if missing or unknown:
            raise TypeError(f"ModelSummary fields: missing {sorted(missing)}, unknown {sorted(unknown)}")
        self.__dict__.update(values)

    def as_dict(self):
        return {name: getattr(self, name) for name in self.FIELDS}

    def __eq__(self, other):
        return isinstance(other, ModelSummary) and self.as_dict() == other.as_dict()

    def __repr__(self):
        return "ModelSummary(" + ", ".join(f"{name}={getattr(self, name)!r}" for name in self.FIELDS) + ")"


class Model:
    """A GGUF model, single file or split. Open with `open_model(path)`.

    `remote` is True for a model whose headers were fetched (URL or hf:// name): its tensor data is
    not here, and the data methods refuse. `fetch_stats` then holds fetched_bytes, requests and
    cached_shards."""

    remote = False
    fetch_stats = None

    def __init__(self, headers, warnings=()):
        self.headers = headers
        self.shards = [header.path for header in headers]
        self.path = self.shards[0]
        self.metadata = headers[0].metadata
        self.architecture = self.metadata.get(Keys.ARCHITECTURE)
        if not isinstance(self.architecture, str) or not self.architecture:
            raise GGUFError(self.path, "no architecture in the metadata", key=Keys.ARCHITECTURE)
        self.tensors = [tensor for header in headers for tensor in header.tensors]
        self.tensor_by_name = {}
        for tensor in self.tensors:
            if tensor.name in self.tensor_by_name:
                raise GGUFError(self.shards[tensor.shard], f"duplicate tensor name {tensor.name!r} across shards")
            self.tensor_by_name[tensor.name] = tensor
        self.warnings = list(warnings)
        self._fds = {}
        self._check_blocks()

    def _check_blocks(self):
        """llama.cpp creates tensors for blocks 0..block_count-1 only: a `blk.N` tensor beyond them is
        one it refuses ("wrong number of tensors"), and a block_count over its limit is an assertion
        there. Checked only when the key is a whole number (its absence is reported where needed)."""
        key = self.key(Keys.BLOCK_COUNT)
        block_count = self.metadata.get(key)
        if isinstance(block_count, bool) or not isinstance(block_count, int):
            return
        if not 0 < block_count <= LLAMA_MAX_LAYERS:
            raise GGUFError(self.path, f"block_count {block_count} is outside llama.cpp's 1 to {LLAMA_MAX_LAYERS}", key=key)
        for tensor in self.tensors:
            block = tensor_block(tensor.name)
            if block is not None and block >= block_count:
                raise GGUFError(
                    self.shards[tensor.shard],
                    f"tensor {tensor.name!r} belongs to block {block} but block_count is {block_count}",
                    key=key,
                )

    # --- metadata -------------------------------------------------------------------------

    def key(self, template):
        """The full key name: `{arch}.block_count` -> `deepseek2.block_count`."""
        return template.format(arch=self.architecture)

    def get(self, template, default=None):
        return self.metadata.get(self.key(template), default)

    def _need(self, key, required_for):
        if required_for and key not in self.metadata:
            raise GGUFError(self.path, f"missing metadata key needed for {required_for}", key=key)

    def get_int(self, template, default=0, required_for=None):
        """A whole-number key (default when absent); any other type is a GGUFError naming the key.
        With `required_for`, a missing key is a GGUFError saying what needed it."""
        key = self.key(template)
        self._need(key, required_for)
        if key not in self.metadata:
            return default
        value = self.metadata[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise GGUFError(self.path, f"expected a non-negative whole number, found {value!r}", key=key)
        return value

    def layer_values(self, template, default=None, required_for=None):
        """A per-layer whole-number key as a list of block_count values: a scalar repeats, an array is
        checked for length. Missing: `default` for every layer (or a GGUFError with `required_for`)."""
        key = self.key(template)
        self._need(key, required_for)
        value = self.metadata.get(key)
        n_layers = self.block_count
        if value is None:
            return [default] * n_layers
        if isinstance(value, LazyArray):
            value = value.load()
        values = value if isinstance(value, list) else [value] * n_layers
        if len(values) != n_layers:
            raise GGUFError(self.path, f"per-layer array has {len(values)} entries for {n_layers} blocks", key=key)
        for item in values:
            if isinstance(item, bool) or not isinstance(item, int) or item < 0:
                raise GGUFError(self.path, f"expected non-negative whole numbers, found {item!r}", key=key)
        return list(values)

    @cached_property
    def block_count(self):
        return self.get_int(Keys.BLOCK_COUNT, required_for="the layer count")

    # --- tensor classes ---------------------------------------------------------------------

    def is_expert(self, tensor):
        return expert_tensor_kind(tensor.name) is not None

    @cached_property
    def expert_tensors(self):
        return [tensor for tensor in self.tensors if self.is_expert(tensor)]

    @cached_property
    def resident_tensors(self):
        return [tensor for tensor in self.tensors if not self.is_expert(tensor)]

    @cached_property
    def expert_bytes_by_layer(self):
        """{block: bytes of one (layer, expert)}: each expert tensor's bytes / its expert count."""
        per_layer = {}
        for tensor in self.expert_tensors:
            block, _ = expert_tensor_kind(tensor.name)
            n_expert = tensor.shape[-1]
            if len(tensor.shape) < 2 or n_expert == 0 or tensor.n_bytes == 0 or tensor.n_bytes % n_expert:
                raise GGUFError(self.shards[tensor.shard], f"expert tensor {tensor.name!r} has shape {list(tensor.shape)}")
            if self.expert_count and n_expert != self.expert_count:
                raise GGUFError(
                    self.shards[tensor.shard],
                    f"expert tensor {tensor.name!r} holds {n_expert} experts but expert_count is {self.expert_count}",
                    key=self.key(Keys.EXPERT_COUNT),
                )
            per_layer[block] = per_layer.get(block, 0) + tensor.n_bytes // n_expert
        return dict(sorted(per_layer.items()))

    @cached_property
    def expert_count(self):
        """Routed experts per MoE layer: the metadata key, else the expert tensors' last dimension."""
        value = self.get_int(Keys.EXPERT_COUNT, 0)
        if not value and self.expert_tensors:
            value = self.expert_tensors[0].shape[-1]
        if value > LLAMA_MAX_EXPERTS:
            raise GGUFError(self.path, f"expert_count {value} is over llama.cpp's limit of {LLAMA_MAX_EXPERTS}",
                            key=self.key(Keys.EXPERT_COUNT))
        return value

    def _expert_used_count(self, value):
        """llama.cpp asserts n_expert_used <= n_expert (llama-model.cpp load_hparams): refuse more, so
        that no tool plans a top-k of millions from a damaged header."""
        if value > max(self.expert_count, 0):
            raise GGUFError(self.path, f"expert_used_count {value} is more than expert_count {self.expert_count} "
                                       "(llama.cpp refuses it)", key=self.key(Keys.EXPERT_USED_COUNT))
        return value

    @property
    def resident_bytes(self):
        return sum(tensor.n_bytes for tensor in self.resident_tensors)

    @property
    def expert_bytes(self):
        return sum(tensor.n_bytes for tensor in self.expert_tensors)

    @property
    def total_bytes(self):
        return sum(tensor.n_bytes for tensor in self.tensors)

    @cached_property
    def fingerprint(self):
        """A short stable id of the tensor table (names, types, shapes): same model, same id."""
        import hashlib

        digest = hashlib.blake2b(digest_size=8)
        digest.update(self.architecture.encode())
        for tensor in self.tensors:
            digest.update(f"{tensor.name}:{tensor.type_id}:{tensor.shape}".encode())
        return digest.hexdigest()

    # --- summary ----------------------------------------------------------------------------

    @cached_property
    def summary(self):
        get_int = self.get_int
        head_count = self.layer_values(Keys.HEAD_COUNT, 0)
        # llama.cpp: a missing head_count_kv means as many KV heads as query heads.
        head_count_kv = self.layer_values(Keys.HEAD_COUNT_KV, None)
        head_count_kv = [head_count[il] if value is None else value for il, value in enumerate(head_count_kv)]
        n_embd = get_int(Keys.EMBEDDING_LENGTH, 0)
        first_heads = head_count[0] if head_count else 0
        # llama.cpp's default head width is n_embd / n_head when the key is absent
        default_head = n_embd // first_heads if first_heads else 0
        vocab_size = get_int(Keys.VOCAB_SIZE, None)
        if vocab_size is None:
            tokens = self.metadata.get("tokenizer.ggml.tokens")
            vocab_size = len(tokens) if isinstance(tokens, (list, LazyArray)) else 0
        return ModelSummary(
            architecture=self.architecture,
            name=str(self.metadata.get(Keys.NAME, "")),
            block_count=self.block_count,
            context_length=get_int(Keys.CONTEXT_LENGTH),
            embedding_length=n_embd,
            vocab_size=vocab_size,
            expert_count=self.expert_count,
            expert_used_count=self._expert_used_count(get_int(Keys.EXPERT_USED_COUNT)),
            expert_shared_count=get_int(Keys.EXPERT_SHARED_COUNT),
            leading_dense_block_count=get_int(Keys.LEADING_DENSE_BLOCK_COUNT),
            moe_layers=list(self.expert_bytes_by_layer),
            head_count=head_count,
            head_count_kv=head_count_kv,
            key_length=get_int(Keys.KEY_LENGTH, default_head),
            value_length=get_int(Keys.VALUE_LENGTH, default_head),
            key_length_mla=get_int(Keys.KEY_LENGTH_MLA),
            value_length_mla=get_int(Keys.VALUE_LENGTH_MLA),
            kv_lora_rank=get_int(Keys.KV_LORA_RANK),
            q_lora_rank=get_int(Keys.Q_LORA_RANK),
            rope_dimension_count=get_int(Keys.ROPE_DIMENSION_COUNT),
            sliding_window=get_int(Keys.SLIDING_WINDOW),
            sliding_window_pattern=self._raw(Keys.SLIDING_WINDOW_PATTERN),
            feed_forward_length=self.layer_values(Keys.FEED_FORWARD_LENGTH, 0),
            expert_feed_forward_length=get_int(Keys.EXPERT_FEED_FORWARD_LENGTH),
            expert_latent_length=get_int(Keys.EXPERT_LATENT_LENGTH),
            nextn_predict_layers=get_int(Keys.NEXTN_PREDICT_LAYERS),
            file_type=self.metadata.get(Keys.FILE_TYPE),
        )

    def _raw(self, template):
        value = self.get(template)
        return value.load() if isinstance(value, LazyArray) else value

    # --- tensor data ------------------------------------------------------------------------

    def _tensor_slice(self, tensor, start, length):
        """(TensorInfo, length) of `tensor` (or its name) from `start`; ValueError outside it."""
        if isinstance(tensor, str):
            tensor = self.tensor_by_name[tensor]
        if length is None:
            length = tensor.n_bytes - start
        if start < 0 or length < 0 or start + length > tensor.n_bytes:
            raise ValueError(f"slice {start}+{length} outside tensor {tensor.name} ({tensor.n_bytes} bytes)")
        return tensor, length

    def read_tensor_bytes(self, tensor, start=0, length=None):
        """Bytes of one tensor (or a slice of it, `start` relative to the tensor) with a positioned read."""
        tensor, length = self._tensor_slice(tensor, start, length)
        fd = self._fd(tensor.shard)
        data = pread(fd, length, tensor.offset + start)
        if len(data) != length:
            raise GGUFError(self.shards[tensor.shard], f"short read of tensor {tensor.name!r}", offset=tensor.offset + start)
        return data

    def view_tensor_bytes(self, tensor, start=0, length=None):
        """Bytes of one tensor (or a slice of it) without copying them: a read-only memoryview of a
        memory map of just that range, released with the view; where the file cannot be mapped, the
        bytes `read_tensor_bytes` reads. For a consumer that only reads them (quantize's tasks)."""
        tensor, length = self._tensor_slice(tensor, start, length)
        view = map_read(self._fd(tensor.shard), tensor.offset + start, length)
        return view if view is not None else self.read_tensor_bytes(tensor, start, length)

    def read_tensor_into(self, tensor, start, buffers):
        """Scatter-read `tensor`'s bytes from `start` (relative to the tensor) into `buffers` (writable
        memoryviews, filled in order) with one positioned scatter read: no intermediate bytes object."""
        fd = self._fd(tensor.shard)
        position = tensor.offset + start
        for first in range(0, len(buffers), _IOV_MAX):
            chunk = buffers[first:first + _IOV_MAX]
            want = sum(len(buffer) for buffer in chunk)
            got = preadinto(fd, chunk, position)
            if got != want:
                raise GGUFError(self.shards[tensor.shard], f"short read of tensor {tensor.name!r} (file truncated?)",
                                offset=position + got)
            position += want

    def advise_tensor(self, tensor, start, length, advice):
        """A read-ahead hint (`advice` as moetools.fileio.advise takes it) for part of a tensor."""
        from moetools.fileio import advise

        advise(self._fd(tensor.shard), tensor.offset + start, length, advice)

    def tensor_memmap(self, tensor):
        """A read-only numpy uint8 memmap of one tensor's bytes (imports numpy on first use)."""
        self._refuse_remote()
        import numpy as np

        if isinstance(tensor, str):
            tensor = self.tensor_by_name[tensor]
        return np.memmap(self.shards[tensor.shard], dtype=np.uint8, mode="r", offset=tensor.offset, shape=(tensor.n_bytes,))

    def _refuse_remote(self):
        if self.remote:
            raise GGUFError(self.path, "a remote model's tensor data is not downloaded; download the model and use the local file")

    def _fd(self, shard):
        self._refuse_remote()
        fd = self._fds.get(shard)
        if fd is None:
            fd = self._fds[shard] = open_read(self.shards[shard])
        return fd

    def close(self):
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def discover_shards(path):
    """The shard paths of the model `path` belongs to, in order; validates the set is complete.

    Returns (paths, warnings). Raises GGUFError for a missing shard.
    """
    parsed = split_name(path)
    if parsed is None:
        return [path], []
    prefix, number, count = parsed
    if count == 0 or number == 0 or number > count:
        raise GGUFError(path, f"shard name says {number} of {count}")
    expected = [shard_path(prefix, index, count) for index in range(1, count + 1)]
    missing = [os.path.basename(candidate) for candidate in expected if not os.path.exists(candidate)]
    if missing:
        shown = ", ".join(missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
        raise GGUFError(path, f"split model is missing {len(missing)} of {count} shards: {shown}")
    warnings = []
    extra = sorted(set(glob.glob(glob.escape(prefix) + "-[0-9][0-9][0-9][0-9][0-9]-of-[0-9][0-9][0-9][0-9][0-9].gguf")) - set(expected))
    if extra:
        warnings.append(f"ignoring {len(extra)} shard(s) of another split beside this one: " + ", ".join(os.path.basename(e) for e in extra[:4]))
    return expected, warnings


def _validate_split(headers):
    count = len(headers)
    first = headers[0]
    total_tensors = sum(len(header.tensors) for header in headers)
    first_arch = first.get(Keys.ARCHITECTURE)
    declared_total = first.get(Keys.SPLIT_TENSORS_COUNT)
    for index, header in enumerate(headers):
        split_count = header.get(Keys.SPLIT_COUNT)
        split_no = header.get(Keys.SPLIT_NO)
        if count > 1 or split_count not in (None, 1):
            if split_count is None:
                raise GGUFError(header.path, f"shard {index + 1} of {count} has no split.count", key=Keys.SPLIT_COUNT)
            if split_count != count:
                raise GGUFError(header.path, f"split.count is {split_count} but the set has {count} shards", key=Keys.SPLIT_COUNT)
            if split_no is not None and split_no != index:
                raise GGUFError(header.path, f"split.no is {split_no} but the file name says shard {index + 1} (split.no {index})", key=Keys.SPLIT_NO)
            tensors_count = header.get(Keys.SPLIT_TENSORS_COUNT)
            if tensors_count is not None and declared_total is not None and tensors_count != declared_total:
                raise GGUFError(
                    header.path,
                    f"split.tensors.count {tensors_count} differs from the first shard's {declared_total}: a shard from another model",
                    key=Keys.SPLIT_TENSORS_COUNT,
                )
        arch = header.get(Keys.ARCHITECTURE)
        if index and arch is not None and arch != first_arch:
            raise GGUFError(header.path, f"architecture {arch!r} differs from the first shard's {first_arch!r}: a shard from another model", key=Keys.ARCHITECTURE)
    if declared_total is not None and count > 1 and declared_total != total_tensors:
        raise GGUFError(first.path, f"split.tensors.count says {declared_total} tensors but the shards hold {total_tensors}", key=Keys.SPLIT_TENSORS_COUNT)


def model_from_headers(path, headers, warnings=()):
    """A Model from the parsed headers of a shard set in order, validated as one set."""
    if len(headers) == 1:
        split_count = headers[0].get(Keys.SPLIT_COUNT)
        if isinstance(split_count, int) and split_count > 1:
            raise GGUFError(
                path,
                f"this is one shard of {split_count} (split.count) but its name does not follow NAME-0000k-of-0000N.gguf",
                key=Keys.SPLIT_COUNT,
            )
    _validate_split(headers)
    return Model(headers, warnings)
