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
- recurrent layers hold f32 state rows, max(1, n_seq) of them, each n_embd_r + n_embd_s values
  (llama_hparams::n_embd_r/n_embd_s): RWKV token_shift_count x n_embd and n_embd x wkv_head_size;
  LFM2 short convolutions n_embd x (l_cache - 1); Kimi KDA 3 x (d_conv - 1) x n_head x kda_head_dim and
  kda_head_dim^2 x n_head; Mamba/Mamba-2 and gated delta nets (d_conv - 1) x (d_inner + 2 n_group
  d_state) and d_state x d_inner. Which layers are recurrent and which attend comes from each hybrid's
  loader and llama_model::create_memory's layer filters (each architecture's `recurrent` rule in
  moetools/arch/).
- layers past `n_layer_kv_from_start` (gemma3n, gemma4 `shared_kv_layers`) reuse an earlier layer's
  cache and hold none; NextN/MTP blocks hold none in the main context (except where a hybrid's filter
  keeps them).
- DSA models (deepseek32, glm-dsa) add an indexer K cache: one head of `indexer.key_length` values per
  cell in the K type, in the trunk layers (glm-dsa: those `indexer.types` marks full).
- without flash attention the V cache is transposed and every layer's V row is padded to the widest.
"""


from moetools.devicefit.record import REQUIRED, Record
from moetools.errors import GGUFError, UsageError
from moetools.gguf.constants import GGML_TYPES, Keys
from moetools.gguf.header import LazyArray
from moetools.devicefit.memory.cells import (  # noqa: F401  (re-exported)
    CACHE_TYPES, PAD, F32_BYTES, KVCache, KVSettings, cache_type, holds_kv, n_ubatch, pad, row_bytes,
)
from moetools.devicefit.memory.dsv4 import (  # noqa: F401  (re-exported)
    DSV4_CSA, DSV4_HCA, DSV4_STATES, NEXTN_PROBE, _dsv4_caches, _dsv4_cells, _dsv4_layers, _dsv4_per_layer,
    _dsv4_ratios, _dsv4_row, _dsv4_state_layers, _dsv4_state_tensor, _dsv4_trunk,
)
from moetools.devicefit.memory.recurrent import _gdn_layers, _recurrent_layers, _recurrent_state, _state_rows  # noqa: F401
from moetools.arch.registry import profile


INDEXER_TOP_K = "{arch}.attention.indexer.top_k"
INDEXER_KEY_LENGTH = "{arch}.attention.indexer.key_length"
INDEXER_TYPES = "{arch}.attention.indexer.types"
SHARED_KV_LAYERS = "{arch}.attention.shared_kv_layers"
# glm-dsa's built-in indexer pattern for GLM-5.2 checkpoints (n_ctx_train >= 1M) without indexer.types:
# the first two layers, then every fourth from layer 2, for 78 layers (src/models/glm-dsa.cpp).
GLM_DSA_DEFAULT_LAYERS = 78


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
        ("ple_state", 0),  # qwen4exp's PLE module: f32 values per recurrent row of its conv history (cache_ple_r_l)
        ("ple_layers", list),  # per block: True where that row exists ([] = none)
        ("recurrent_kind", ""),  # "kda" | "gdn" | "lightning" | "mamba" | "rwkv" | "shortconv" ("" without recurrent layers)
        ("has_kv", list),  # per block: False where the layer holds no attention cache (filtered/shared); [] = all
        # llama_hparams::n_layer_kv_from_start where later layers reuse an earlier layer's cache (gemma4's
        # shared_kv_layers); 0 where none does
        ("kv_from_start", 0),
        ("indexer_width", 0),  # DSA: values per cell of the indexer K cache (one head)
        ("indexer_layers", list),  # per block: True where the layer has an indexer cache
        # DeepSeek-V4 (llama_kv_cache_dsv4): per block its compression ratio (0 window only, 4 CSA +
        # lightning indexer, 128 HCA); [] for every other architecture
        ("compress_ratios", list),
        ("indexer_v_width", 0),  # MSA: values per cell of the indexer cache's V (0: K only, DSA)
        ("borrowed", False),  # every layer attends to the target context's KV (the profile's borrowed_kv): no bytes
        ("notes", list),
    )


def _swa_layers(model, arch, trunk, n_layer):
    """(is_swa per layer, n_swa, swa type) as the architecture's llama.cpp loader sets them."""
    none = ([False] * n_layer, 0, "none")
    entry = profile(arch)
    rule = entry.swa
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
    if when == "64 blocks" and trunk != 64:
        return none
    if entry.fixed_swa is not None:
        window = entry.fixed_swa
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
        # get_arr reads the whole array: NextN blocks past the trunk keep their entries (an MTP context's
        # cache of a sliding-window NextN block is a window-sized one, step35); set_swa_pattern clears them
        flags = [bool(value) for value in raw[:n_layer]]
        flags += [False] * (n_layer - len(flags))
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


def _int_array(model, template, n_layer, default):
    """A per-layer key read like llama.cpp's get_key_or_arr: an array (at least n_layer long) or a scalar."""
    key = model.key(template)
    raw = model.metadata.get(key)
    if isinstance(raw, LazyArray):
        raw = raw.load()
    if raw is None:
        return list(default)
    if isinstance(raw, list):
        if len(raw) < n_layer:
            raise GGUFError(model.path, f"{len(raw)} entries for {n_layer} layers", key=key)
        return [int(value) for value in raw[:n_layer]]
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise GGUFError(model.path, f"{raw!r} is not a whole number", key=key)
    return [raw] * n_layer


def _layer_filters(model, arch, trunk, n_layer, head_count_kv):
    """(recurrent kind, is_recurrent per block, has_kv per block) from the loader and create_memory."""
    entry = profile(arch)
    no_kv_from = n_layer  # llama_hparams::n_layer_kv_from_start: later layers reuse an earlier cache
    if entry.kv_layers_from_start == "key":
        shared = model.get_int(SHARED_KV_LAYERS, 0)
        no_kv_from = n_layer - shared
        if shared and no_kv_from < 2:
            raise GGUFError(model.path, f"{shared} shared KV layers leave fewer than 2 layers with a cache "
                                        "(llama.cpp asserts at least 2)", key=model.key(SHARED_KV_LAYERS))
    elif entry.kv_layers_from_start is not None:
        no_kv_from = entry.kv_layers_from_start
    kind, is_recurrent = "", [False] * n_layer
    if entry.kv_trunk_only:
        # llama_model create_memory's filters: KDA (head_count_kv 0) and attention layers of the trunk only
        is_recurrent = [il < trunk and head_count_kv[il] == 0 for il in range(n_layer)]
        return "kda", is_recurrent, [il < trunk and not is_recurrent[il] for il in range(n_layer)]
    if entry.recurrent_mixer == "kda":
        kind = "kda"
        is_recurrent = [il < trunk and head_count_kv[il] == 0 for il in range(n_layer)]
        # the hybrid's default attention filter ("not recurrent") keeps the NextN blocks
        return kind, is_recurrent, [not r for r in is_recurrent]
    if entry.recurrent_mixer in ("gdn", "lightning"):
        lightning = entry.recurrent_mixer == "lightning"
        is_recurrent = _gdn_layers(model, trunk, n_layer, 8 if lightning else 4)
        # create_memory's filters for the Qwen hybrids and minimax-01: trunk layers only
        return ("lightning" if lightning else "gdn"), is_recurrent, [il < trunk and not is_recurrent[il] for il in range(n_layer)]
    rule = entry.recurrent
    if rule is None:
        # a plain KV cache: with NextN layers the filter keeps the trunk only
        return kind, is_recurrent, [il < trunk and il < no_kv_from for il in range(n_layer)]
    kind, recurrent, attention = rule
    n_ff = None
    if "ff0" in recurrent or attention == "ff0":
        n_ff = _int_array(model, "{arch}.feed_forward_length", n_layer, [None] * n_layer)
        if None in n_ff:
            raise GGUFError(model.path, "missing metadata key needed for the Nemotron-H layer pattern "
                                        "(which layers are Mamba, attention or FFN)", key=model.key("{arch}.feed_forward_length"))
    for il in range(trunk):
        if recurrent == "all":
            is_recurrent[il] = True
        elif recurrent == "hkv0":
            is_recurrent[il] = head_count_kv[il] == 0
        else:
            is_recurrent[il] = head_count_kv[il] == 0 and n_ff[il] == 0
    if attention == "none":
        has_kv = [False] * n_layer
    elif attention == "all":
        has_kv = [True] * n_layer
    elif attention == "ff0":
        has_kv = [not is_recurrent[il] and n_ff[il] == 0 for il in range(n_layer)]
    else:
        has_kv = [not r for r in is_recurrent]
    return kind, is_recurrent, has_kv


def _indexer_layers(model, arch, trunk, n_layer):
    """Which blocks carry a DSA indexer cache: the trunk (glm-dsa: the layers indexer.types marks full)."""
    rule = profile(arch).indexer_rule
    if rule == "trunk":
        return [il < trunk for il in range(n_layer)]
    if rule == "types_kv":  # get_key_or_arr over the trunk, default every layer; KDA layers have none
        full = _int_array(model, INDEXER_TYPES, trunk, [1] * trunk)
        n_kv = model.layer_values(Keys.HEAD_COUNT_KV, None)
        return [il < trunk and bool(full[il]) and n_kv[il] != 0 for il in range(n_layer)]
    if rule == "types_layer0":  # get_key_or_arr, default none; llama_model_hy_v4 needs layer 0 to index
        full = _int_array(model, INDEXER_TYPES, trunk, [0] * trunk)
        if not full[0]:
            raise GGUFError(model.path, f"{arch}'s layer 0 has no indexer (llama.cpp refuses it: nothing precedes it to "
                                        "share a top-k)", key=model.key(INDEXER_TYPES))
        return [il < trunk and bool(full[il]) for il in range(n_layer)]
    if rule == "types_required":  # the loader requires the array (get_arr)
        key = model.key(INDEXER_TYPES)
        if model.metadata.get(key) is None:
            raise GGUFError(model.path, "missing metadata key needed for the DSA indexer cache (which layers index)", key=key)
        full = _int_array(model, INDEXER_TYPES, trunk, [])
        return [il < trunk and bool(full[il]) for il in range(n_layer)]
    context_train = model.get_int(Keys.CONTEXT_LENGTH, 0)
    if context_train < 1048576:
        full = [1] * trunk  # GLM-5/5.1: every layer indexes
    else:
        full = [1 if il < 2 or (il - 2) % 4 == 0 else 0 for il in range(min(trunk, GLM_DSA_DEFAULT_LAYERS))]
        full += [0] * (trunk - len(full))
    full = _int_array(model, INDEXER_TYPES, trunk, full)
    return [il < trunk and bool(full[il]) for il in range(n_layer)]


def kv_shape(model):
    """The KVShape of an open moetools.gguf.Model. Raises GGUFError naming a missing key."""
    arch = model.architecture
    entry = profile(arch)
    if not entry.known:
        raise GGUFError(model.path, f"architecture {arch!r} is not one llama.cpp knows (src/llama-arch.cpp at 0c1e570): "
                                    "device-fit cannot size its memory", key=Keys.ARCHITECTURE)
    if entry.memory == "none":
        raise GGUFError(model.path, f"device-fit cannot size architecture {arch!r}: llama.cpp gives it no KV cache "
                                    "(an encoder or diffusion model), and device-fit plans autoregressive serving",
                        key=Keys.ARCHITECTURE)
    if entry.memory == "unsupported":
        raise GGUFError(model.path, f"device-fit cannot size architecture {arch!r}: it has no model of "
                                    f"{entry.unsupported}", key=Keys.ARCHITECTURE)
    n_layer = model.block_count
    if n_layer == 0:
        raise GGUFError(model.path, "block count is 0", key=model.key(Keys.BLOCK_COUNT))
    context_train = model.get_int(Keys.CONTEXT_LENGTH, None, required_for="the default context")
    n_embd = model.get_int(Keys.EMBEDDING_LENGTH, None, required_for="the attention head width")
    head_count = [value or 0 for value in model.layer_values(Keys.HEAD_COUNT, 0, required_for=None if entry.recurrent and entry.recurrent[2] == "none" else "the KV cache")]
    head_count_kv = model.layer_values(Keys.HEAD_COUNT_KV, None)
    # llama.cpp: head_count_kv defaults to head_count, and a head width to n_embd / head_count(0).
    head_count_kv = [head_count[il] if value is None else value for il, value in enumerate(head_count_kv)]
    nextn = model.get_int(Keys.NEXTN_PREDICT_LAYERS, 0)
    if nextn > n_layer:  # llama.cpp's loaders assert nextn_predict_layers < n_layer
        raise GGUFError(model.path, f"nextn_predict_layers {nextn} is more than the {n_layer} blocks "
                                    "(llama.cpp refuses it)", key=model.key(Keys.NEXTN_PREDICT_LAYERS))
    trunk = n_layer - nextn if 0 < nextn < n_layer else n_layer
    if entry.dsv4_cache:
        trunk = _dsv4_trunk(model, n_layer, nextn)
    notes = []

    k_key_length_mla = model.get_int(Keys.KEY_LENGTH_MLA, 0)
    v_key_length_mla = model.get_int(Keys.VALUE_LENGTH_MLA, 0)
    mla = bool(k_key_length_mla and v_key_length_mla)
    if entry.sparse_kv == "dsa" and not mla:
        raise GGUFError(model.path, f"{arch} needs MLA (llama.cpp refuses it without key_length_mla/value_length_mla)",
                        key=model.key(Keys.KEY_LENGTH_MLA))
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
        if entry.recurrent_mixer == "kda":
            v_full = kv_lora  # the kimi loaders set the V head width to the latent rank
    swa_required = f"the sliding-window head width of {arch}" if entry.swa_width_required else None
    k_swa = model.get_int(Keys.KEY_LENGTH_SWA, k_full, required_for=swa_required)
    v_swa = model.get_int(Keys.VALUE_LENGTH_SWA, v_full, required_for=swa_required)
    is_swa, n_swa, swa_type = _swa_layers(model, arch, trunk, n_layer)
    compress_ratios = []
    if entry.dsv4_cache:
        # every block slides (set_swa_pattern(0), the NextN ones too), one K-only head per cell
        mla, is_swa, swa_type = True, [True] * n_layer, "standard"
        n_swa = model.get_int(Keys.SLIDING_WINDOW, None, required_for="DeepSeek-V4's sliding-window cache")
        compress_ratios = _dsv4_ratios(model, n_layer)
    elif swa_type == "none" and entry.swa is None and model.get_int(Keys.SLIDING_WINDOW, None):
        notes.append(f"{arch}: llama.cpp's loader ignores attention.sliding_window; every layer sized as full attention")
    elif swa_type == "none" and entry.swa and entry.swa[0] == "64 blocks" and model.get_int(Keys.SLIDING_WINDOW, None):
        notes.append(f"{arch}: llama.cpp's loader gives only a 64-block model sliding-window layers; these "
                     f"{trunk} are sized as full attention")
    recurrent_kind, is_recurrent, has_kv = _layer_filters(model, arch, trunk, n_layer, head_count_kv)
    _refuse_keyless_attention(model, head_count_kv, is_recurrent)
    if entry.swa_skips_recurrent and swa_type != "none":  # llama_memory_hybrid_iswa: the short convolutions do not slide
        is_swa = [flag and not is_recurrent[il] for il, flag in enumerate(is_swa)]
    if compress_ratios:
        # the raw window cache holds every block (llama_kv_cache_dsv4 clears n_layer_nextn for its caches)
        has_kv = [True] * n_layer
    if trunk < n_layer and not any(has_kv[trunk:]):
        notes.append(f"{n_layer - trunk} NextN/MTP layer(s) hold no KV in the main context")
    if entry.kv_layers_from_start is not None and not all(has_kv[:trunk]):
        notes.append(f"{arch}: {trunk - sum(has_kv[:trunk])} layer(s) reuse an earlier layer's KV cache and hold none")
    state_r = state_s = ple_state = 0
    ple_layers = []
    if any(is_recurrent):
        state_r, state_s = _recurrent_state(model, recurrent_kind, n_embd, head_count, k_full)
    if entry.block_draft and model.get_int("{arch}.hyper_connection.count", 0):
        # dflash.cpp: hyper_connection.count > 0 loads DeepSeek-V4 DSpark stages (MLA-style K in a
        # sliding-window cache, hyper-connections, experts: graph_dsv4), not the GQA blocks sized here
        raise GGUFError(model.path, "device-fit cannot size a DSpark DFlash draft (DeepSeek-V4 stages, "
                                    "hyper_connection.count > 0): it has no model of its window cache and graph",
                        key=model.key("{arch}.hyper_connection.count"))
    if entry.borrowed_kv:
        notes.append(f"{arch}: its layers read the target gemma4 context's KV (the last sliding-window and full "
                     "layers), so it holds none; llama.cpp runs it only as that model's draft (-md with "
                     "--spec-type draft-mtp)")
    indexer_width, indexer_layers, indexer_v_width = 0, [], 0
    if entry.sparse_kv == "dsa" and not (entry.indexer_optional and not model.get_int(INDEXER_TOP_K, 0)):
        # (a hy_v4 checkpoint without indexer.top_k is all full attention: a plain MLA cache)
        indexer_width = model.get_int(INDEXER_KEY_LENGTH, None, required_for="the DSA indexer cache")
        indexer_layers = _indexer_layers(model, arch, trunk, n_layer)
        if entry.indexer_kpool:
            # llama_memory_hybrid_idx caches key, gate and pooled key per token (indexer.kpool > 1 asserted)
            kpool = model.get_int("{arch}.attention.indexer.kpool", None, required_for="GLM5-Next's k-pool indexer cache")
            if kpool < 2:
                raise GGUFError(model.path, f"indexer.kpool {kpool} (llama.cpp asserts more than 1)",
                                key=model.key("{arch}.attention.indexer.kpool"))
            indexer_width *= 3
    elif compress_ratios:
        indexer_width = model.get_int(INDEXER_KEY_LENGTH, None, required_for="DeepSeek-V4's lightning-indexer cache")
    elif entry.qsa_indexer:
        # llama_memory_hybrid_idx: one key head per cell for the QSA, in the trunk's attention layers
        indexer_width = model.get_int(INDEXER_KEY_LENGTH, None, required_for="the QSA indexer cache")
        indexer_layers = [il < trunk and not is_recurrent[il] for il in range(n_layer)]
        ple_state, ple_layers = _ple_module(model, n_layer, is_recurrent)
    elif entry.sparse_kv == "msa":
        indexer_width = model.get_int(INDEXER_KEY_LENGTH, None, required_for="the MSA indexer cache")
        dense_lead = model.get_int("{arch}.leading_dense_block_count", 0)
        indexer_layers = [il >= dense_lead for il in range(n_layer)]
        indexer_v_width = v_full
        notes.append("minimax-m3: llama.cpp reserves its sparse attention's position-axis tensors for an empty "
                     "cache (256 positions); as the context fills they grow (block scores: positions x indexer "
                     "heads x ubatch f32 per stream) and ggml re-allocates the compute buffer past the planned "
                     "figure: keep headroom (--margin) for long contexts")
    if any(head_count_kv[il] and has_kv[il] and not (k_full if not is_swa[il] else k_swa) for il in range(n_layer)):
        raise GGUFError(model.path, "attention layers without a key width", key=model.key(Keys.KEY_LENGTH))
    return KVShape(
        architecture=arch,
        block_count=n_layer,
        trunk_layers=trunk,
        kv_layers=n_layer,
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
        ple_state=ple_state,
        ple_layers=ple_layers,
        recurrent_kind=recurrent_kind,
        has_kv=has_kv,
        kv_from_start=(has_kv.index(False) if entry.kv_layers_from_start is not None and not all(has_kv[:trunk])
                       else 0),
        indexer_width=indexer_width,
        indexer_layers=indexer_layers,
        compress_ratios=compress_ratios,
        indexer_v_width=indexer_v_width,
        borrowed=entry.borrowed_kv,
        notes=notes,
    )


def force_flash_attn_off(architecture, settings):
    """Turn flash attention off in `settings` where llama.cpp forces it off for this architecture;
    returns the warning to show, or None."""
    if not profile(architecture).flash_attn_off or not settings.flash_attn:
        return None
    settings.flash_attn = False
    return (f"llama.cpp runs {architecture} without flash attention whatever -fa says (it forces it off): "
            "planned with -fa off (its KQ scores take n_kv x n_ubatch f32 per head)")


SERVER_DRAFT_MAX = 3  # common_params_speculative_draft::n_max, the tokens a draft proposes per step


def server_outputs(batch, n_seq, n_draft=0):
    """llama-server's n_outputs_max for the target context (tools/server/server-context.cpp
    server_output_limits -> common_speculative_get_output_limits): one row per sequence, plus the
    drafted tokens' rows with a speculative type, at most the batch. The fork's server sets the same
    (CambrianTech/llama.cpp tools/server/server-context.cpp: server_output_limits, applied in
    server_context_impl::load_model; tests/fork_rules.py fork_server_output_rows)."""
    return min(batch, max(1, n_seq) * (1 + max(0, n_draft)))


LLAMA_MAX_SEQ = 256  # src/llama-cparams.h: the most sequences (-np) a llama.cpp context takes


def _refuse_keyless_attention(model, head_count_kv, is_recurrent):
    """A layer with attention weights whose head_count_kv is 0: llama.cpp makes its K projection 0 wide
    and refuses the file's (wrong shape), so a damaged header must not plan as a layer with no KV."""
    keyless = [il for il, hkv in enumerate(head_count_kv) if hkv == 0 and not is_recurrent[il]]
    if not keyless:
        return
    names = {tensor.name for tensor in model.tensors if tensor.name.endswith(".attn_k.weight")}
    for il in keyless:
        if f"blk.{il}.attn_k.weight" in names:
            raise GGUFError(model.path, f"layer {il} has attention weights (blk.{il}.attn_k.weight) but head_count_kv 0 "
                                        "(llama.cpp refuses the K projection's shape)", key=model.key(Keys.HEAD_COUNT_KV))


def check_settings(shape, settings):
    """Refuse cache settings llama.cpp refuses (llama_init_from_model). Raises UsageError."""
    for option, name in (("--ctk", settings.ctk), ("--ctv", settings.ctv)):
        cache_type(name, option)
    if settings.ubatch < 1 or settings.batch < 1 or settings.n_seq < 1:
        raise UsageError("--ubatch, --batch and --parallel must be at least 1")
    if settings.n_seq > LLAMA_MAX_SEQ:
        # llama_context's constructor: "n_seq_max must be <= LLAMA_MAX_SEQ" (src/llama-cparams.h: 256)
        raise UsageError(f"--parallel {settings.n_seq} is more than llama.cpp's {LLAMA_MAX_SEQ} sequences "
                         f"(LLAMA_MAX_SEQ: llama.cpp refuses n_seq_max above it)")
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
    if shape.indexer_width and shape.indexer_width % cache_type(settings.ctk)[0]:
        raise UsageError(f"--ctk {settings.ctk}: its block does not divide the DSA indexer key width {shape.indexer_width} "
                         "(llama.cpp refuses this cache type for this model)")


def _cells(shape, ctx, settings):
    """(streams, cells per stream, SWA cells per stream) of a context, as llama_context and
    llama_kv_cache_iswa size them."""
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
    return streams, cells, swa_cells


def _row_bytes_of(shape, il, settings, v_widest):
    """K (+ V) bytes of one cell of layer il."""
    hkv = shape.head_count_kv[il]
    size = row_bytes(settings.ctk, hkv * shape.k_width[il])
    if not shape.mla:
        size += row_bytes(settings.ctv, v_widest if not settings.flash_attn else hkv * shape.v_width[il])
    return size


def _v_widest(shape, settings):
    # [TAG_V_CACHE_VARIABLE]: a transposed V cache pads every layer to n_embd_v_gqa_max over all blocks
    return max(hkv * width for hkv, width in zip(shape.head_count_kv, shape.v_width)) if not settings.flash_attn else 0


def _ple_module(model, n_layer, is_recurrent):
    """(f32 values per recurrent row of the PLE conv history, True per block holding it) of a qwen4exp
    (llama_model_qwen4exp::load_arch_hparams, llama_hparams::ple_conv_state: (conv_kernel - 1) x
    ngram_size x hyper_connection.count x n_embd; (0, []) without ple.layers)."""
    key = model.key("{arch}.ple.layers")
    raw = model.metadata.get(key)
    if isinstance(raw, LazyArray):
        raw = raw.load()
    if not raw:
        return 0, []
    if not isinstance(raw, list) or len(raw) != 1:
        raise GGUFError(model.path, f"ple.layers lists {len(raw) if isinstance(raw, list) else raw!r}: llama.cpp "
                                    "supports exactly one PLE layer", key=key)
    layer = raw[0]
    if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < n_layer:
        raise GGUFError(model.path, f"PLE layer {layer!r} is out of range", key=key)
    if not is_recurrent[layer]:
        raise GGUFError(model.path, f"PLE layer {layer} is not a linear attention layer (llama.cpp refuses it)", key=key)
    needed = "qwen4exp's PLE conv-history state"
    kernel = model.get_int("{arch}.ple.conv_kernel", None, required_for=needed)
    ngram = model.get_int("{arch}.ple.ngram_size", None, required_for=needed)
    if not kernel or not 2 <= ngram <= 8:  # qwen4exp_require_nonzero; LLAMA_MAX_PLE_NGRAM 8
        raise GGUFError(model.path, f"PLE conv kernel {kernel} / n-gram size {ngram} out of range",
                        key=model.key("{arch}.ple.ngram_size"))
    _check_ple_kernel_type(model, layer)
    hc = model.get_int("{arch}.hyper_connection.count", None, required_for=needed)
    n_embd = model.get_int(Keys.EMBEDDING_LENGTH, None, required_for=needed)
    return (kernel - 1) * ngram * hc * n_embd, [il == layer for il in range(n_layer)]


def _check_ple_kernel_type(model, layer):
    """Refuse a PLE conv kernel of a block type (q8_0, q4_K, ...): build_ple views one column of it per
    tap (ne[0] = 1), which a block type cannot hold, and llama.cpp 0c1e57098 aborts reserving the graph
    (ggml_view's GGML_ASSERT, measured); f32, f16 and bf16 kernels are cast per column and sized."""
    name = f"blk.{layer}.ple_conv1d.weight"
    conv = model.tensor_by_name.get(name)
    entry = GGML_TYPES.get(conv.type_id) if conv is not None else None
    if entry is not None and entry[1] != 1:
        raise GGUFError(model.path, f"{name} is {entry[0]}: llama.cpp aborts building qwen4exp's PLE conv from a "
                                    "block-quantized kernel (one column per tap is not a view of it); store it as "
                                    "f32, f16 or bf16")


def _indexer_row(shape, il, settings):
    """Bytes of one cell of a layer's DSA indexer cache: one head of indexer width (llama_kv_cache_dsa
    overrides only the full-attention head width, so a sliding-window layer marked indexing would get
    its own key width: dots3note)."""
    return row_bytes(settings.ctk, shape.k_width[il] if shape.is_swa[il] else shape.indexer_width)


def _indexer_v_row(shape, settings):
    """Bytes of one cell of an MSA indexer layer's V (0 for DSA, whose indexer caches K only)."""
    return row_bytes(settings.ctv, shape.indexer_v_width) if shape.indexer_v_width else 0


def kv_caches(shape, ctx, settings):
    """The caches llama.cpp allocates for a context of `ctx` tokens: a list of KVCache (full first,
    then swa, then the DSA indexer's, then recurrent; empty kinds left out; DeepSeek-V4: its window
    cache, the csa / hca / indexer compressed caches and their compressor states). `ctx` >= 1; call
    check_settings first."""
    if shape.compress_ratios:
        return _dsv4_caches(shape, ctx, settings)
    streams, cells, swa_cells = _cells(shape, ctx, settings)
    v_widest = _v_widest(shape, settings)
    caches = {"full": KVCache("full", cells, streams, 0), "swa": KVCache("swa", swa_cells, streams, 0),
              "indexer": KVCache("indexer", cells, streams, 0)}
    for il in range(shape.block_count):
        if not holds_kv(shape, il):
            continue
        cache = caches["swa" if shape.is_swa[il] else "full"]
        cache.layers += 1
        if shape.borrowed:
            cache.borrowed = True
            continue
        size = _row_bytes_of(shape, il, settings, v_widest)
        k_size = row_bytes(settings.ctk, shape.head_count_kv[il] * shape.k_width[il])
        cache.k_bytes += k_size * cache.cells * streams
        cache.v_bytes += (size - k_size) * cache.cells * streams
    indexer = caches["indexer"]
    for il, flag in enumerate(shape.indexer_layers):
        if flag:
            indexer.layers += 1
            indexer.k_bytes += _indexer_row(shape, il, settings) * cells * streams
            indexer.v_bytes += _indexer_v_row(shape, settings) * cells * streams
    order = ("full", "indexer", "swa") if profile(shape.architecture).dsa_before_swa else ("full", "swa", "indexer")
    # (llama_kv_cache_dsa_iswa builds its DSA pair before the sliding-window cache)
    result = [caches[kind] for kind in order if caches[kind].layers]
    recurrent_layers = len(_recurrent_layers(shape))
    if recurrent_layers:
        rows = _state_rows(settings)
        result.append(KVCache("recurrent", rows, 1, recurrent_layers,
                              r_bytes=recurrent_layers * shape.state_r * rows * F32_BYTES,
                              s_bytes=recurrent_layers * shape.state_s * rows * F32_BYTES,
                              p_bytes=sum(shape.ple_layers) * shape.ple_state * rows * F32_BYTES))
    return result


def total(caches):
    """Bytes of a list of caches (KV and recurrent state)."""
    return sum(cache.total for cache in caches)


def kv_bytes(shape, ctx, settings):
    return total(kv_caches(shape, ctx, settings))


def bytes_per_token(shape, settings):
    """K + V bytes one token adds to the full-attention caches (with the DSA indexer's: the published
    per-token figure)."""
    total = 0
    for il in range(shape.block_count):
        if holds_kv(shape, il) and not shape.is_swa[il] and not shape.borrowed:
            total += _row_bytes_of(shape, il, settings, 0 if settings.flash_attn else _v_widest(shape, settings))
    total += sum(_indexer_row(shape, il, settings) + _indexer_v_row(shape, settings)
                 for il, flag in enumerate(shape.indexer_layers) if flag)
    if shape.compress_ratios:
        # DeepSeek-V4: the window cache does not grow; a compressed row per `ratio` tokens does
        total = sum(len(_dsv4_layers(shape, kind)) * _dsv4_row(shape, kind, settings) / (DSV4_HCA if kind == "hca" else DSV4_CSA)
                    for kind in ("csa", "hca", "indexer"))
    return total


def per_layer(shape, ctx, settings):
    """Bytes of each block's KV cache (or recurrent state), a list of block_count: the KV of a layer
    lives on that layer's device. Sums to total(kv_caches(shape, ctx, settings))."""
    if shape.compress_ratios:
        return _dsv4_per_layer(shape, ctx, settings)
    result = [0] * shape.block_count
    streams, cells, swa_cells = _cells(shape, ctx, settings)
    v_widest = _v_widest(shape, settings)
    for il in range(shape.block_count):
        if holds_kv(shape, il) and not shape.borrowed:
            result[il] += _row_bytes_of(shape, il, settings, v_widest) * (swa_cells if shape.is_swa[il] else cells) * streams
    for il, flag in enumerate(shape.indexer_layers):
        if flag:
            result[il] += (_indexer_row(shape, il, settings) + _indexer_v_row(shape, settings)) * cells * streams
    rows = _state_rows(settings)
    for il in _recurrent_layers(shape):
        result[il] += (shape.state_r + shape.state_s) * rows * F32_BYTES
    for il, flag in enumerate(shape.ple_layers):
        if flag:
            result[il] += shape.ple_state * rows * F32_BYTES
    return result


def read_per_token(shape, depth, settings):
    """Bytes of each block's cache one decoded token reads at `depth` tokens of context: the K (and V)
    rows of min(depth, window) cells (with the DSA indexer's keys), or a recurrent layer's whole state
    (DeepSeek-V4: its window, the compressed rows of depth / ratio cells and the indexer's keys)."""
    result = [0.0] * shape.block_count
    if shape.compress_ratios:
        for kind in ("csa", "hca", "indexer"):
            ratio = DSV4_HCA if kind == "hca" else DSV4_CSA
            for il in _dsv4_layers(shape, kind):
                result[il] += float(_dsv4_row(shape, kind, settings) * (depth // ratio))
    for il in _recurrent_layers(shape):
        result[il] += float((shape.state_r + shape.state_s) * F32_BYTES)
    for il, flag in enumerate(shape.ple_layers):
        if flag:
            result[il] += float(shape.ple_state * F32_BYTES)
    for il in range(shape.block_count):
        if not holds_kv(shape, il):
            continue
        cells = min(depth, shape.n_swa) if shape.is_swa[il] and shape.n_swa else depth
        hkv = shape.head_count_kv[il]
        size = row_bytes(settings.ctk, hkv * shape.k_width[il])
        if not shape.mla:
            size += row_bytes(settings.ctv, hkv * shape.v_width[il])
        result[il] += float(size * cells)
    for il, flag in enumerate(shape.indexer_layers):
        if flag:
            result[il] += float(_indexer_row(shape, il, settings) * depth)
    return result
