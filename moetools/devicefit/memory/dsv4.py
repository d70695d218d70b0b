"""DeepSeek-V4's memory: llama_kv_cache_dsv4 (src/llama-kv-cache-dsv4.cpp) and its loader's hparams
(src/models/deepseek4.cpp): the raw window cache, the compressed CSA/HCA/indexer caches and the
compressor states. Moved whole out of kv.py (issue 28).
"""

from moetools.devicefit.memory.cells import F32_BYTES, KVCache, holds_kv, n_ubatch, pad, row_bytes
from moetools.errors import GGUFError, UsageError
from moetools.gguf.header import LazyArray

# llama_kv_cache_dsv4 (src/llama-kv-cache-dsv4.cpp): the compression ratios its loader accepts and the
# compressor state each keeps per layer and sequence: (ratio, state rows, state width in K head widths or
# "indexer" widths). CSA and the lightning indexer overlap two blocks of 4 (8 rows, twice the width).
DSV4_CSA, DSV4_HCA = 4, 128
DSV4_STATES = (("csa", DSV4_CSA, 2 * DSV4_CSA, 2, False), ("hca", DSV4_HCA, DSV4_HCA, 1, False),
               ("indexer", DSV4_CSA, 2 * DSV4_CSA, 2, True))
NEXTN_PROBE = "blk.{}.nextn.eh_proj.weight"


def _dsv4_trunk(model, n_layer, nextn):
    """llama_model_deepseek4::load_arch_hparams: NextN layers count only when the first one's eh_proj is in
    the file (a conversion without the MTP tensors keeps the key); the trunk is the rest."""
    if 0 < nextn < n_layer and NEXTN_PROBE.format(n_layer - nextn) in model.tensor_by_name:
        return n_layer - nextn
    return n_layer


def _dsv4_ratios(model, n_layer):
    key = model.key("{arch}.attention.compress_ratios")
    raw = model.metadata.get(key)
    if isinstance(raw, LazyArray):
        raw = raw.load()
    if not isinstance(raw, list):
        raise GGUFError(model.path, "missing metadata key needed for DeepSeek-V4's compressed caches (which layers "
                                    "compress by 4 or 128)", key=key)
    if len(raw) < n_layer:
        raise GGUFError(model.path, f"compress_ratios has {len(raw)} entries for {n_layer} blocks (llama.cpp refuses it)", key=key)
    ratios = [int(value) for value in raw[:n_layer]]
    if any(ratio not in (0, DSV4_CSA, DSV4_HCA) for ratio in ratios):
        raise GGUFError(model.path, "DeepSeek-V4 compression ratios other than 0, 4 and 128 (llama.cpp refuses them)", key=key)
    return ratios


def _dsv4_cells(shape, ctx, settings):
    """(streams, cells per stream of the raw window cache, of each compressed cache kind) of
    llama_kv_cache_dsv4: one stream per sequence even with --kv-unified (then each of n_ctx cells), the
    window cache pad256(min(cells, n_swa + n_ubatch)) (or the whole with swa_full), the compressed ones
    pad256(ceil(cells / ratio))."""
    if ctx < 1:
        raise UsageError("the context must be at least 1 token")
    n_ctx = pad(ctx)
    if settings.unified:
        cells = n_ctx
    else:
        if n_ctx // settings.n_seq == 0:
            raise UsageError(f"--parallel {settings.n_seq} leaves no cells per sequence in a context of {ctx}")
        cells = pad(n_ctx // settings.n_seq)
    raw = cells if settings.swa_full else pad(min(cells, shape.n_swa + n_ubatch(settings, ctx)))
    compressed = {"csa": pad(max(1, -(-cells // DSV4_CSA))), "hca": pad(max(1, -(-cells // DSV4_HCA)))}
    compressed["indexer"] = compressed["csa"]
    return settings.n_seq, raw, compressed


def _dsv4_layers(shape, kind):
    ratio = DSV4_HCA if kind == "hca" else DSV4_CSA
    return [il for il, value in enumerate(shape.compress_ratios) if value == ratio]


def _dsv4_row(shape, kind, settings):
    """Bytes of one cell of a DSV4 K-only cache (the indexer's one head of indexer width)."""
    width = shape.indexer_width if kind == "indexer" else shape.head_count_kv[0] * shape.k_width[0]
    return row_bytes(settings.ctk, width)


def _dsv4_state_tensor(shape, rows, width_heads, indexer, settings):
    """f32 bytes of one layer's compressor kv (or score) tensor over every sequence's planes
    (llama_dsv4_comp_state: n_seq x (1 + n_rs_seq) planes of rows x width)."""
    width = width_heads * (shape.indexer_width if indexer else shape.k_width[0])
    return F32_BYTES * width * rows * settings.n_seq * (1 + settings.rs_seq)


def _dsv4_state_layers(shape, ratio):
    """Layers with a compressor state: the trunk's of that ratio (llama_dsv4_comp_state filters on
    model.hparams.n_layer(), unlike the caches)."""
    return [il for il in _dsv4_layers(shape, "hca" if ratio == DSV4_HCA else "csa") if il < shape.trunk_layers]


def _dsv4_caches(shape, ctx, settings):
    streams, raw_cells, compressed = _dsv4_cells(shape, ctx, settings)
    layers = [il for il in range(shape.block_count) if holds_kv(shape, il)]
    raw = KVCache("swa", raw_cells, streams, len(layers),
                  k_bytes=sum(row_bytes(settings.ctk, shape.head_count_kv[il] * shape.k_width[il]) for il in layers) * raw_cells * streams)
    result = [raw] if layers else []
    for kind in ("csa", "hca", "indexer"):
        compressed_layers = _dsv4_layers(shape, kind)
        if compressed_layers:
            result.append(KVCache(kind, compressed[kind], streams, len(compressed_layers),
                                  k_bytes=len(compressed_layers) * _dsv4_row(shape, kind, settings) * compressed[kind] * streams))
    for name, ratio, rows, width_heads, indexer in DSV4_STATES:
        # the compressor states cover the trunk only (model.hparams.n_layer())
        state_layers = _dsv4_state_layers(shape, ratio)
        if state_layers:
            tensor = _dsv4_state_tensor(shape, rows, width_heads, indexer, settings)
            result.append(KVCache(f"{name}-state", rows * (1 + settings.rs_seq), streams, len(state_layers),
                                  r_bytes=tensor * len(state_layers), s_bytes=tensor * len(state_layers)))
    return result


def _dsv4_per_layer(shape, ctx, settings):
    result = [0] * shape.block_count
    streams, raw_cells, compressed = _dsv4_cells(shape, ctx, settings)
    for il in range(shape.block_count):
        if holds_kv(shape, il):
            result[il] += row_bytes(settings.ctk, shape.head_count_kv[il] * shape.k_width[il]) * raw_cells * streams
    for kind in ("csa", "hca", "indexer"):
        for il in _dsv4_layers(shape, kind):
            result[il] += _dsv4_row(shape, kind, settings) * compressed[kind] * streams
    for _, ratio, rows, width_heads, indexer in DSV4_STATES:
        for il in _dsv4_state_layers(shape, ratio):
            result[il] += 2 * _dsv4_state_tensor(shape, rows, width_heads, indexer, settings)
    return result
