"""KV cache and recurrent-state sizing, following llama.cpp's allocation rules (read, not copied, from
src/llama-context.cpp, llama-kv-cache.cpp, llama-kv-cache-iswa.cpp, llama-memory-recurrent.cpp,
llama-memory-hybrid.cpp, llama-hparams.cpp and the per-architecture loaders in src/models/).

The rules, in short:
- cells: n_ctx = pad256(ctx). One stream per sequence (`--parallel`) of pad256(n_ctx / n_seq) cells,
  or one unified stream of n_ctx cells (`--kv-unified`).
- a layer's K row is n_head_kv(il) x k_width(il) values, its V row n_head_kv(il) x v_width(il), each
  costing ggml's row size for the cache type (q8_0: 34 bytes per 32 values). MLA models (key_length_mla
  and value_length_mla set) cache K only, whose width is `attention.key_length` (kv_lora_rank + rope).
- sliding-window layers go to a second cache of pad256(min(cells, n_swa x (n_seq if unified else 1)
  + n_ubatch)) cells per stream, unless swa_full.
- recurrent layers (Kimi KDA: head_count_kv 0) hold f32 state rows, max(1, n_seq) of them:
  n_embd_r = 3 x (d_conv - 1) x n_head x kda_head_dim, n_embd_s = kda_head_dim^2 x n_head.
- without flash attention the V cache is transposed and every layer's V row is padded to the widest.
"""


from moetools.devicefit.record import REQUIRED, Record
from moetools.errors import GGUFError, UsageError
from moetools.gguf.constants import GGML_TYPE_IDS, GGML_TYPES, Keys
from moetools.gguf.header import LazyArray

CACHE_TYPES = ("f16", "bf16", "q8_0", "q5_1", "q5_0", "q4_1", "q4_0", "f32")
PAD = 256  # llama.cpp pads n_ctx and the SWA cache to 256 cells
F32_BYTES = 4

# Architectures whose loader sets a sliding window (src/models/*.cpp, load_arch_hparams):
# arch -> (when, built-in period, dense_first, n_swa default or None if the key is required, type).
#   when: "always"; "key>0" (only if attention.sliding_window is present and > 0);
#         "key!=0" (unless the key is present and 0); "array" (the per-layer pattern key is required).
#   a fixed n_swa (llama4, smallthinker) overrides the key, as those loaders do.
SWA_RULES = {
    "gpt-oss": ("always", 2, False, None, "standard"),
    "gemma2": ("always", 2, False, 4096, "standard"),
    "gemma3": ("key>0", 6, False, None, "standard"),
    "cohere2": ("always", 4, False, None, "standard"),
    "cohere2moe": ("always", 4, True, None, "standard"),
    "exaone-moe": ("always", 4, False, None, "standard"),
    "muse-glimmer": ("always", 4, False, None, "standard"),
    "olmo2": ("key>0", 4, False, None, "standard"),
    "afmoe": ("key>0", 4, False, None, "standard"),
    "mellum": ("key>0", 4, False, None, "standard"),
    "laguna": ("key>0", 4, True, None, "standard"),
    "plamo3": ("key>0", 8, False, None, "standard"),
    "llama4": ("key!=0", 4, False, 8192, "chunked"),
    "smallthinker": ("key>0", 4, True, 4096, "standard"),
    "mimo2": ("array", 0, False, None, "standard"),
    "maple": ("array", 0, False, None, "standard"),
    "granite-swa": ("array", 0, False, None, "standard"),
    "step35": ("array", 0, False, None, "standard"),
    "spark2-5": ("array", 0, False, None, "standard"),
}
FIXED_SWA = {"llama4": 8192, "smallthinker": 4096}

# Hybrid models whose recurrent layers are the Kimi Delta Attention ones (head_count_kv 0).
KDA_ARCHES = ("kimi-k3", "kimi-linear")
# Hybrid models whose recurrent layers are gated delta nets: `attention.recurrent_layers`, else every
# layer but each `full_attention_interval`-th (default 4) of the trunk (src/models/qwen3next.cpp, qwen35moe.cpp).
GDN_ARCHES = ("qwen3next", "qwen35moe")
HYBRID_ARCHES = KDA_ARCHES + GDN_ARCHES
# Architectures with recurrent state or KV layouts this module does not model: refuse, never guess.
UNSUPPORTED = {
    "mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7", "jamba", "falcon-h1", "plamo2",
    "granitehybrid", "lfm2", "lfm2moe", "nemotron_h", "nemotron_h_moe", "bailingmoe3",
    "glm5-next", "qwen35", "qwen4exp", "deepseek4", "minimax-01", "minimax-m3",
    "deepseek32", "glm-dsa", "dots3note", "hy-v4", "gemma3n", "gemma4", "gemma4-assistant",
    "gemma-embedding", "modern-bert", "exaone4",
}


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


class KVShape(Record):
    """What llama.cpp's KV allocation depends on, per layer (lists of block_count)."""

    FIELDS = (
        ("architecture", REQUIRED),
        ("block_count", REQUIRED),
        ("trunk_layers", REQUIRED),  # block_count minus NextN/MTP layers (the ones llama.cpp checks and marks)
        ("kv_layers", REQUIRED),  # layers that may get KV: the trunk, or every block in a hybrid (its filter keeps NextN)
        ("context_train", REQUIRED),
        ("head_count_kv", REQUIRED),
        ("k_width", REQUIRED),  # per-head key width of each layer (SWA layers may differ)
        ("v_width", REQUIRED),
        ("is_swa", REQUIRED),
        ("is_recurrent", REQUIRED),
        ("n_swa", 0),
        ("swa_type", "none"),
        ("mla", False),
        ("state_r", 0),  # f32 values per recurrent row (conv state)
        ("state_s", 0),  # f32 values per recurrent row (recurrent matrix state)
        ("notes", list),
    )


def _swa_layers(model, arch, trunk, n_layer):
    """(is_swa per layer, n_swa, swa type) as the architecture's llama.cpp loader sets them."""
    none = ([False] * n_layer, 0, "none")
    rule = SWA_RULES.get(arch)
    window_key = model.key(Keys.SLIDING_WINDOW)
    pattern_key = model.key(Keys.SLIDING_WINDOW_PATTERN)
    window = model.get_int(Keys.SLIDING_WINDOW, None)
    if rule is None:
        return none
    when, period, dense_first, default_window, swa_type = rule
    if when == "key>0" and not window:
        return none
    if when == "key!=0" and window == 0:
        return none
    if arch in FIXED_SWA:
        window = FIXED_SWA[arch]
    elif window is None:
        window = default_window
    if window is None:
        raise GGUFError(model.path, f"missing metadata key needed for the sliding-window cache of {arch}", key=window_key)
    raw = model.metadata.get(pattern_key)
    if isinstance(raw, LazyArray):
        raw = raw.load()
    if isinstance(raw, list):
        if len(raw) < trunk:
            raise GGUFError(model.path, f"sliding-window pattern has {len(raw)} entries for {trunk} layers", key=pattern_key)
        flags = [bool(value) for value in raw[:trunk]]
    else:
        if when == "array":
            raise GGUFError(model.path, f"missing metadata key needed for the sliding-window layers of {arch}", key=pattern_key)
        if raw is not None:
            if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
                raise GGUFError(model.path, f"{raw!r} is not a layer period", key=pattern_key)
            period = raw
        # llama_hparams::set_swa_pattern: period 0 means every layer slides; otherwise one full layer
        # per period, first (dense_first) or last.
        if period == 0:
            flags = [True] * trunk
        elif dense_first:
            flags = [il % period != 0 for il in range(trunk)]
        else:
            flags = [il % period < period - 1 for il in range(trunk)]
    flags += [False] * (n_layer - trunk)
    if not any(flags):
        return none
    return flags, window, swa_type


def _gdn_layers(model, trunk, n_layer):
    key = model.key("{arch}.attention.recurrent_layers")
    raw = model.metadata.get(key)
    if isinstance(raw, LazyArray):
        raw = raw.load()
    if isinstance(raw, list):
        if len(raw) != n_layer:
            raise GGUFError(model.path, f"recurrent-layer array has {len(raw)} entries for {n_layer} blocks", key=key)
        return [bool(value) for value in raw]
    interval = model.get_int("{arch}.full_attention_interval", 4)
    if interval == 0:
        raise GGUFError(model.path, "full_attention_interval 0 is not a layer period", key=model.key("{arch}.full_attention_interval"))
    return [il < trunk and (il + 1) % interval != 0 for il in range(n_layer)]


def kv_shape(model):
    """The KVShape of an open moetools.gguf.Model. Raises GGUFError naming a missing key."""
    arch = model.architecture
    if arch in UNSUPPORTED:
        raise GGUFError(model.path, f"device-fit does not size the KV/recurrent memory of architecture {arch!r} yet",
                        key=Keys.ARCHITECTURE)
    n_layer = model.block_count
    if n_layer == 0:
        raise GGUFError(model.path, "block count is 0", key=model.key(Keys.BLOCK_COUNT))
    context_train = model.get_int(Keys.CONTEXT_LENGTH, None, required_for="the default context")
    n_embd = model.get_int(Keys.EMBEDDING_LENGTH, None, required_for="the attention head width")
    head_count = [value or 0 for value in model.layer_values(Keys.HEAD_COUNT, 0, required_for="the KV cache")]
    head_count_kv = model.layer_values(Keys.HEAD_COUNT_KV, None)
    # llama.cpp: head_count_kv defaults to head_count, and a head width to n_embd / head_count(0).
    head_count_kv = [head_count[il] if value is None else value for il, value in enumerate(head_count_kv)]
    nextn = model.get_int(Keys.NEXTN_PREDICT_LAYERS, 0)
    trunk = n_layer - nextn if 0 < nextn < n_layer else n_layer
    notes = []
    if trunk < n_layer and arch not in HYBRID_ARCHES:
        notes.append(f"{n_layer - trunk} NextN/MTP layer(s) hold no KV in the main context")

    k_key_length_mla = model.get_int(Keys.KEY_LENGTH_MLA, 0)
    v_key_length_mla = model.get_int(Keys.VALUE_LENGTH_MLA, 0)
    mla = bool(k_key_length_mla and v_key_length_mla)
    if head_count[0] > 0:
        default_width = n_embd // head_count[0]
        if mla and model.key(Keys.KEY_LENGTH) not in model.metadata:
            # llama.cpp would fall back to n_embd / n_head, which is not the latent width: refuse.
            raise GGUFError(model.path, "missing metadata key needed for the MLA cache width", key=model.key(Keys.KEY_LENGTH))
        k_full = model.get_int(Keys.KEY_LENGTH, default_width)
        v_full = model.get_int(Keys.VALUE_LENGTH, default_width)
    else:
        k_full = v_full = 0
    if mla:
        kv_lora = model.get_int(Keys.KV_LORA_RANK, None, required_for="the MLA cache")
        if arch in KDA_ARCHES:
            v_full = kv_lora  # the kimi loaders set the V head width to the latent rank
    k_swa = model.get_int(Keys.KEY_LENGTH_SWA, k_full)
    v_swa = model.get_int(Keys.VALUE_LENGTH_SWA, v_full)
    is_swa, n_swa, swa_type = _swa_layers(model, arch, trunk, n_layer)
    if swa_type == "none" and arch not in SWA_RULES and model.get_int(Keys.SLIDING_WINDOW, None):
        notes.append(f"{arch}: llama.cpp's loader ignores attention.sliding_window; every layer sized as full attention")
    is_recurrent = [False] * n_layer
    state_r = state_s = 0
    if arch in KDA_ARCHES:
        is_recurrent = [il < trunk and head_count_kv[il] == 0 for il in range(n_layer)]
        d_conv = model.get_int(Keys.SSM_CONV_KERNEL, required_for="the KDA conv state")
        kda = model.get_int(Keys.KDA_HEAD_DIM, required_for="the KDA recurrent state")
        d_inner = head_count[0] * kda
        state_r = 3 * (d_conv - 1 if d_conv > 0 else 3) * d_inner
        state_s = kda * kda * head_count[0]
    if arch in GDN_ARCHES:
        is_recurrent = _gdn_layers(model, trunk, n_layer)
        d_conv = model.get_int(Keys.SSM_CONV_KERNEL, required_for="the gated delta net conv state")
        d_inner = model.get_int(Keys.SSM_INNER_SIZE, required_for="the gated delta net state")
        d_state = model.get_int(Keys.SSM_STATE_SIZE, required_for="the gated delta net state")
        n_group = model.get_int(Keys.SSM_GROUP_COUNT, required_for="the gated delta net conv state")
        # llama_hparams::n_embd_r / n_embd_s (the Mamba formulas the delta net shares)
        state_r = (d_conv - 1 if d_conv > 0 else 0) * (d_inner + 2 * n_group * d_state)
        state_s = d_state * d_inner
    if any(head_count_kv[il] and not (k_full if not is_swa[il] else k_swa) for il in range(trunk)):
        raise GGUFError(model.path, "attention layers without a key width", key=model.key(Keys.KEY_LENGTH))
    # The hybrid memory's attention filter is only "not recurrent", so NextN blocks keep their KV there.
    kv_layers = n_layer if arch in HYBRID_ARCHES else trunk
    return KVShape(
        architecture=arch,
        block_count=n_layer,
        trunk_layers=trunk,
        kv_layers=kv_layers,
        context_train=context_train,
        head_count_kv=head_count_kv,
        k_width=[k_swa if is_swa[il] else k_full for il in range(n_layer)],
        v_width=[v_swa if is_swa[il] else v_full for il in range(n_layer)],
        is_swa=is_swa,
        is_recurrent=is_recurrent,
        n_swa=n_swa,
        swa_type=swa_type,
        mla=mla,
        state_r=state_r,
        state_s=state_s,
        notes=notes,
    )


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
    )

    @property
    def total(self):
        return self.k_bytes + self.v_bytes + self.r_bytes + self.s_bytes

    def to_doc(self):
        doc = {"kind": self.kind, "cells": self.cells * self.streams, "cells_per_stream": self.cells,
               "streams": self.streams, "layers": self.layers, "k_bytes": self.k_bytes, "v_bytes": self.v_bytes}
        if self.kind == "recurrent":
            doc.update(r_bytes=self.r_bytes, s_bytes=self.s_bytes)
        doc["bytes"] = self.total
        return doc


def check_settings(shape, settings):
    """Refuse cache settings llama.cpp refuses (llama_init_from_model). Raises UsageError."""
    for option, name in (("--ctk", settings.ctk), ("--ctv", settings.ctv)):
        cache_type(name, option)
    if settings.ubatch < 1 or settings.batch < 1 or settings.n_seq < 1:
        raise UsageError("--ubatch, --batch and --parallel must be at least 1")
    if shape.mla and settings.ctk != settings.ctv:
        raise UsageError(f"MLA models need the same K and V cache type (llama.cpp refuses --ctk {settings.ctk} --ctv {settings.ctv})")
    quantized_v = cache_type(settings.ctv)[0] > 1
    if quantized_v and not settings.flash_attn:
        raise UsageError(f"a quantized V cache (--ctv {settings.ctv}) needs flash attention (llama.cpp refuses it with -fa off)")
    for option, name, widths, what in (("--ctk", settings.ctk, shape.k_width, "key"), ("--ctv", settings.ctv, shape.v_width, "value")):
        block = cache_type(name, option)[0]
        if block == 1:
            continue
        for il in range(shape.trunk_layers):
            if widths[il] % block:
                raise UsageError(f"{option} {name}: its block of {block} values does not divide the {what} head width "
                                 f"{widths[il]} of layer {il} (llama.cpp refuses this cache type for this model)")


def n_ubatch(settings, ctx):
    """llama.cpp: n_batch = min(ctx, batch) for causal models, n_ubatch = min(n_batch, ubatch)."""
    return min(settings.ubatch, settings.batch, ctx)


def kv_caches(shape, ctx, settings):
    """The caches llama.cpp allocates for a context of `ctx` tokens: a list of KVCache (full first,
    then swa, then recurrent; empty kinds left out). `ctx` >= 1; call check_settings first."""
    if ctx < 1:
        raise UsageError("the context must be at least 1 token")
    n_ctx = pad(ctx)
    if settings.unified:
        streams, cells = 1, n_ctx
    else:
        streams = settings.n_seq
        if n_ctx // streams == 0:
            raise UsageError(f"--parallel {streams} leaves no cells per sequence in a context of {ctx}")
        cells = pad(n_ctx // streams)
    ubatch = n_ubatch(settings, ctx)
    swa_cells = cells if settings.swa_full else pad(min(cells, shape.n_swa * (settings.n_seq if settings.unified else 1) + ubatch))
    mla = shape.mla
    v_widest = max(hkv * width for hkv, width in zip(shape.head_count_kv, shape.v_width)) if not settings.flash_attn else 0
    caches = {"full": KVCache("full", cells, streams, 0), "swa": KVCache("swa", swa_cells, streams, 0)}
    for il in range(shape.kv_layers):
        if shape.is_recurrent[il]:
            continue
        hkv = shape.head_count_kv[il]
        cache = caches["swa" if shape.is_swa[il] else "full"]
        if hkv == 0:
            continue  # zero-width K/V rows: the layer holds no cells
        cache.layers += 1
        cache.k_bytes += row_bytes(settings.ctk, hkv * shape.k_width[il]) * cache.cells * streams
        if not mla:
            width = v_widest if not settings.flash_attn else hkv * shape.v_width[il]
            cache.v_bytes += row_bytes(settings.ctv, width) * cache.cells * streams
    result = [cache for cache in caches.values() if cache.layers]
    recurrent_layers = sum(shape.is_recurrent[: shape.trunk_layers])
    if recurrent_layers:
        rows = max(1, settings.n_seq)
        result.append(KVCache("recurrent", rows, 1, recurrent_layers,
                              r_bytes=recurrent_layers * shape.state_r * rows * F32_BYTES,
                              s_bytes=recurrent_layers * shape.state_s * rows * F32_BYTES))
    return result


def total(caches):
    """Bytes of a list of caches (KV and recurrent state)."""
    return sum(cache.total for cache in caches)


def kv_bytes(shape, ctx, settings):
    return total(kv_caches(shape, ctx, settings))


def bytes_per_token(shape, settings):
    """K + V bytes one token adds to the full-attention cache (the published per-token figure)."""
    total = 0
    for il in range(shape.kv_layers):
        hkv = shape.head_count_kv[il]
        if shape.is_recurrent[il] or shape.is_swa[il] or not hkv:
            continue
        total += row_bytes(settings.ctk, hkv * shape.k_width[il])
        if not shape.mla:
            total += row_bytes(settings.ctv, hkv * shape.v_width[il])
    return total


def per_layer(shape, ctx, settings):
    """Bytes of each block's KV cache (or recurrent state), a list of block_count: the KV of a layer
    lives on that layer's device. Sums to total(kv_caches(shape, ctx, settings))."""
    result = [0] * shape.block_count
    caches = kv_caches(shape, ctx, settings)
    by_kind = {cache.kind: cache for cache in caches}
    mla = shape.mla
    v_widest = max(hkv * width for hkv, width in zip(shape.head_count_kv, shape.v_width)) if not settings.flash_attn else 0
    for il in range(shape.kv_layers):
        if shape.is_recurrent[il]:
            continue
        hkv = shape.head_count_kv[il]
        if not hkv:
            continue
        cache = by_kind["swa" if shape.is_swa[il] else "full"]
        size = row_bytes(settings.ctk, hkv * shape.k_width[il])
        if not mla:
            size += row_bytes(settings.ctv, v_widest if not settings.flash_attn else hkv * shape.v_width[il])
        result[il] = size * cache.cells * cache.streams
    recurrent = by_kind.get("recurrent")
    if recurrent:
        for il in range(shape.trunk_layers):
            if shape.is_recurrent[il]:
                result[il] = (shape.state_r + shape.state_s) * recurrent.cells * F32_BYTES
    return result


def read_per_token(shape, depth, settings):
    """Bytes of each block's cache one decoded token reads at `depth` tokens of context: the K (and V)
    rows of min(depth, window) cells, or a recurrent layer's whole state."""
    result = [0.0] * shape.block_count
    for il in range(shape.kv_layers):
        hkv = shape.head_count_kv[il]
        if shape.is_recurrent[il] and il < shape.trunk_layers:
            result[il] = float((shape.state_r + shape.state_s) * F32_BYTES)
            continue
        if not hkv or shape.is_recurrent[il]:
            continue
        cells = min(depth, shape.n_swa) if shape.is_swa[il] and shape.n_swa else depth
        size = row_bytes(settings.ctk, hkv * shape.k_width[il])
        if not shape.mla:
            size += row_bytes(settings.ctv, hkv * shape.v_width[il])
        result[il] = float(size * cells)
    return result
