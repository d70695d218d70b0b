"""The shared GGUF reader: header-only, lazy, split-aware. Every tool opens models through it.

    from moetools.gguf import open_model
    model = open_model("k3-00001-of-00014.gguf")
    model.summary.expert_count, model.expert_bytes_by_layer, model.tensor_by_name["output.weight"]

Modules, bottom up (no module imports one above it): constants, header, headercache, locator (what a
MODEL name means: local | url | hf://), model (one file or shard set), remote (range reads), hub
(hf:// listings), open (the one dispatcher: open_model). `sources` re-exports locator until 0.3.
"""

from moetools.gguf.constants import GGML_TYPE_IDS, GGML_TYPES, Keys, tensor_nbytes, type_name
from moetools.gguf.header import GGUFHeader, LazyArray, TensorInfo, read_header
from moetools.gguf.model import (
    Model,
    ModelSummary,
    discover_shards,
    expert_tensor_kind,
    model_stem,
    shard_path,
    split_name,
    tensor_block,
)
from moetools.gguf.open import open_model

__all__ = [
    "GGML_TYPES",
    "GGML_TYPE_IDS",
    "GGUFHeader",
    "Keys",
    "LazyArray",
    "Model",
    "ModelSummary",
    "TensorInfo",
    "discover_shards",
    "expert_tensor_kind",
    "model_stem",
    "open_model",
    "read_header",
    "shard_path",
    "split_name",
    "tensor_block",
    "tensor_nbytes",
    "type_name",
]
