"""The attention KV cache's cells and rows (llama.cpp src/llama-kv-cache.cpp, llama-kv-cache-iswa.cpp,
llama-context.cpp): the cache types, pad256, ggml's row size, which blocks hold a cache, the context
parameters that size it (KVSettings) and one allocation (KVCache). Moved whole out of kv.py (issue 28).
"""

from moetools.devicefit.record import REQUIRED, Record
from moetools.errors import UsageError
from moetools.gguf.constants import GGML_TYPE_IDS, GGML_TYPES

CACHE_TYPES = ("f16", "bf16", "q8_0", "q5_1", "q5_0", "q4_1", "q4_0", "f32")
PAD = 256  # llama.cpp pads n_ctx and the SWA cache to 256 cells
F32_BYTES = 4


def pad(value, to=PAD):
    return -(-value // to) * to


def cache_type(name, option="--ctk"):
    """(values per block, bytes per block) of a KV cache type name. Raises UsageError."""
    if name not in CACHE_TYPES:
        raise UsageError(f"{option} {name!r} is not a KV cache type (one of {', '.join(CACHE_TYPES)})")
    _, block, block_bytes = GGML_TYPES[GGML_TYPE_IDS[name]]
    return block, block_bytes


def row_bytes(type_name, width):
    """ggml's row size: bytes of `width` values of a cache type (width must divide into blocks)."""
    block, block_bytes = cache_type(type_name)
    return width // block * block_bytes


def holds_kv(shape, il):
    """Whether block `il` has its own attention cache (not recurrent, not filtered, not shared, rows > 0)."""
    if not shape.head_count_kv[il]:
        return False
    if shape.has_kv:
        return shape.has_kv[il]  # Falcon-H1 layers are recurrent and attend
    return il < shape.kv_layers and not shape.is_recurrent[il]


class KVSettings(Record):
    """The llama.cpp context parameters that size the KV cache."""

    FIELDS = (
        ("ctk", "f16"),
        ("ctv", "f16"),
        ("ubatch", 512),
        ("batch", 2048),
        ("n_seq", 1),  # --parallel
        ("unified", False),  # --kv-unified
        ("swa_full", False),
        ("flash_attn", True),
        ("rs_seq", 0),  # n_rs_seq: recurrent-state snapshots per row for rollback (-spec-draft-n-max with draft-mtp)
        # n_outputs_max: rows the context outputs (sizes its logits; 0: the batch, llama.cpp's default for a
        # bare context as llama-cli/llama-completion make it; llama-server's: server_outputs)
        ("outputs", 0),
        # blocks whose input llama_context keeps as a graph output (cparams.embeddings_layer_inp: the
        # target_layers of a DFlash draft, llama_set_embeddings_layer_inp): never freed by ggml-alloc
        ("layer_inputs", ()),
        # rows the context samples on the backend with a top-k(10) chain per sequence (a DFlash draft's:
        # common_speculative_impl_draft_dflash's llama_set_sampler, -np x (n_max + 1) rows at reserve)
        ("sampled_rows", 0),
    )


class KVCache(Record):
    """One allocation: `kind` full, swa or recurrent; bytes over all streams and layers."""

    FIELDS = (
        ("kind", REQUIRED),
        ("cells", REQUIRED),  # cells (recurrent: state rows) per stream
        ("streams", REQUIRED),
        ("layers", REQUIRED),
        ("k_bytes", 0),
        ("v_bytes", 0),
        ("r_bytes", 0),
        ("s_bytes", 0),
        ("p_bytes", 0),  # qwen4exp's PLE conv history (llama_memory_recurrent's P tensors), in the same buffer
        ("borrowed", False),  # the layers read another context's cache (KVShape.borrowed): no bytes here
    )

    @property
    def total(self):
        return self.k_bytes + self.v_bytes + self.r_bytes + self.s_bytes + self.p_bytes

    def to_doc(self):
        doc = {"kind": self.kind, "cells": self.cells * self.streams, "cells_per_stream": self.cells,
               "streams": self.streams, "layers": self.layers, "k_bytes": self.k_bytes, "v_bytes": self.v_bytes}
        if self.kind == "recurrent" or self.kind.endswith("-state"):
            doc.update(r_bytes=self.r_bytes, s_bytes=self.s_bytes)
            if self.p_bytes:
                doc["p_bytes"] = self.p_bytes
        if self.borrowed:
            doc["borrowed"] = True
        doc["bytes"] = self.total
        return doc


def n_ubatch(settings, ctx):
    """llama.cpp: n_batch = min(ctx, batch) for causal models, n_ubatch = min(n_batch, ubatch)."""
    return min(settings.ubatch, settings.batch, ctx)
