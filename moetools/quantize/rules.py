"""Which tensors llama-quantize keeps as they are, and what it falls back to when a row does not fit.

Mirrors `tensor_allows_quantization` and `tensor_type_fallback` in llama.cpp's src/llama-quant.cpp
(read there, not copied), for the uniform (`--pure`) case: every quantizable tensor gets the
requested type. Pure data and names; no numpy or gguf, so the CLI can list types cheaply.
"""

from moetools.gguf.constants import GGML_TYPE_IDS, GGML_TYPES

# Targets, strongest first: ggml type name -> llama_ftype written as general.file_type (the value
# llama-quantize writes for that type; for K-quants the alias llama-quantize maps `Q4_K` etc. to).
TARGETS = {
    "bf16": 32,
    "f16": 1,
    "q8_0": 7,
    "q6_K": 18,
    "q5_K": 17,
    "q5_1": 9,
    "q5_0": 8,
    "q4_K": 15,
    "q4_1": 3,
    "q4_0": 2,
    "iq4_nl": 25,
    "iq4_xs": 30,
    "q3_K": 12,
    "q2_K": 10,
}

# A 256-block type whose rows do not divide falls back to this 32-block type (llama-quant.cpp).
FALLBACK = {"q2_K": "q4_0", "q3_K": "q4_0", "q4_K": "q5_0", "q5_K": "q5_1", "q6_K": "q8_0", "iq4_xs": "iq4_nl"}

# Substrings of tensor names llama-quantize never quantizes (besides norms, routers and 1-D tensors).
_KEEP_SUBSTRINGS = (
    ("ffn_gate_inp.weight", "router"),
    ("ffn_gate_tid2eid.weight", "routing table"),
    ("altup", "tiny altup tensor"),
    ("laurel", "tiny laurel tensor"),
    ("per_layer_model_proj", "kept as is by llama-quantize"),
    ("ssm_conv1d", "small conv1d weight"),
    ("shortconv.conv.weight", "small conv1d weight"),
    ("indexer.k_proj.weight", "tiny indexer projection"),
    ("indexer.q_proj.weight", "tiny indexer projection"),
    ("time_mix_first.weight", "small RWKV weight"),
    ("time_mix_w0.weight", "small RWKV weight"),
    ("time_mix_w1.weight", "small RWKV weight"),
    ("time_mix_w2.weight", "small RWKV weight"),
    ("time_mix_v0.weight", "small RWKV weight"),
    ("time_mix_v1.weight", "small RWKV weight"),
    ("time_mix_v2.weight", "small RWKV weight"),
    ("time_mix_a0.weight", "small RWKV weight"),
    ("time_mix_a1.weight", "small RWKV weight"),
    ("time_mix_a2.weight", "small RWKV weight"),
    ("time_mix_g1.weight", "small RWKV weight"),
    ("time_mix_g2.weight", "small RWKV weight"),
    ("time_mix_decay_w1.weight", "small RWKV weight"),
    ("time_mix_decay_w2.weight", "small RWKV weight"),
    ("time_mix_lerp_fused.weight", "small RWKV weight"),
    ("attn_rel_b.weight", "relative position bias"),
    (".position_embd", "positional embedding"),
    ("sam.pos_embd", "positional embedding"),
    ("sam.neck.", "multimodal tensor"),
    ("sam.net_", "multimodal tensor"),
    (".rel_pos", "multimodal tensor"),
    (".patch_embd", "multimodal tensor"),
    (".patch_merger", "multimodal tensor"),
    ("a.rvq.codebook", "audio codebook"),
    ("mm.a.code_embd", "audio codebook"),
)
_KEEP_EXACT = {"position_embd.weight": "positional embedding", "token_types.weight": "token types"}
# Kept only in one architecture: the `quant_keep` fragments of its moetools.arch profile.


def _arch(name):
    from moetools.arch.registry import profile

    return profile(name)


def canonical_type(text):
    """The ggml spelling of a target type name typed in any case (`Q4_K`, `q4_k` -> `q4_K`), or None."""
    wanted = text.strip().lower()
    for name in TARGETS:
        if name.lower() == wanted:
            return name
    return None


def n_dims(shape):
    """ggml_n_dims: dimensions up to the last one above 1 (at least 1)."""
    count = 1
    for index, dim in enumerate(shape):
        if dim > 1:
            count = index + 1
    return count


def keep_reason(name, shape, architecture=""):
    """Why llama-quantize keeps tensor `name` (ggml `shape`) in its type, or None if it quantizes it."""
    if n_dims(shape) < 2:
        return "1-D"
    if not name.endswith("weight"):
        return "not a weight"
    if "_norm.weight" in name:
        return "norm"
    if name in _KEEP_EXACT:
        return _KEEP_EXACT[name]
    for fragment, reason in _KEEP_SUBSTRINGS:
        if fragment in name:
            return reason
    for fragment in _arch(architecture).quant_keep:
        if fragment in name:
            return f"kept in {architecture}"
    return None


def target_for(row_length, target):
    """(type to write, fallback reason or None) for a quantizable tensor whose rows hold `row_length`
    values, as llama-quant.cpp's tensor_type_fallback picks it."""
    block = GGML_TYPES[GGML_TYPE_IDS[target]][1]
    if row_length % block == 0:
        return target, None
    chosen = FALLBACK.get(target, target)
    reason = f"row of {row_length} not divisible by {block} ({target})"
    if row_length % GGML_TYPES[GGML_TYPE_IDS[chosen]][1]:
        chosen = "f16"
        reason += "; unusual shape, must use f16"
    return chosen, reason


# --- llama-quantize's type mixes (llama_tensor_get_type in src/llama-quant.cpp) -----------------

# llama-quantize's type names moetools writes -> (llama_ftype, default ggml type). The IQ1/IQ2/IQ3,
# TQ and MXFP4 mixes need quantizers moetools does not have (listed as UNSUPPORTED_MIXES).
MIXES = {
    "Q4_0": (2, "q4_0"), "Q4_1": (3, "q4_1"), "Q5_0": (8, "q5_0"), "Q5_1": (9, "q5_1"),
    "Q2_K": (10, "q2_K"), "Q2_K_S": (21, "q2_K"),
    "Q3_K_S": (11, "q3_K"), "Q3_K_M": (12, "q3_K"), "Q3_K_L": (13, "q3_K"),
    "IQ4_NL": (25, "iq4_nl"), "IQ4_XS": (30, "iq4_xs"),
    "Q4_K_S": (14, "q4_K"), "Q4_K_M": (15, "q4_K"),
    "Q5_K_S": (16, "q5_K"), "Q5_K_M": (17, "q5_K"),
    "Q6_K": (18, "q6_K"), "Q8_0": (7, "q8_0"), "F16": (1, "f16"), "BF16": (32, "bf16"),
}
MIX_ALIASES = {"Q3_K": "Q3_K_M", "Q4_K": "Q4_K_M", "Q5_K": "Q5_K_M"}
UNSUPPORTED_MIXES = ("Q1_0", "Q2_0", "MXFP4_MOE", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ1_S", "IQ1_M", "TQ1_0", "TQ2_0",
                     "IQ3_XXS", "IQ3_S", "IQ3_M", "IQ3_XS", "F32", "COPY")
FT = {name: ftype for name, (ftype, _) in MIXES.items()}
# ggml types a mix or an override can name (what the kernels write)
WRITABLE = set(TARGETS)


def canonical_mix(text):
    """llama-quantize's name of a mix typed in any case, aliases resolved (`q4_k` -> `Q4_K_M`), or None."""
    wanted = text.strip().upper()
    wanted = MIX_ALIASES.get(wanted, wanted)
    return wanted if wanted in MIXES else None


def mix_names():
    """Every name --type takes without --pure, aliases included."""
    return list(MIXES) + [f"{alias} (= {name})" for alias, name in MIX_ALIASES.items()]


class Mix:
    """One tier's recipe: a llama-quantize mix (or one type for every tensor with `pure`), with
    llama-quantize's --output-tensor-type, --token-embedding-type and --tensor-type overrides."""

    def __init__(self, name, pure=False, output_type=None, token_embd_type=None, tensor_types=(), has_imatrix=False):
        self.name = name  # llama-quantize name of the mix (ftype)
        self.ftype, self.default_type = MIXES[name]
        self.pure = pure
        self.output_type = output_type
        self.token_embd_type = token_embd_type
        self.tensor_types = tuple(tensor_types)  # ((regex, ggml type), ...) first match wins
        self.has_imatrix = has_imatrix

    @property
    def label(self):
        """Tier label: the mix name, or the ggml type for --pure."""
        return self.default_type if self.pure else self.name


def _layer_of(name):
    """sscanf(name, "blk.%d.") or None."""
    if not name.startswith("blk."):
        return None
    digits = ""
    for char in name[4:]:
        if not char.isdigit():
            break
        digits += char
    if not digits or not name[4 + len(digits):].startswith("."):
        return None
    return int(digits)


def weights_order(names):
    """llama-quantize's tensor order (llama_model_loader's weights_map): by block number (-1 for
    tensors outside blocks), then by name. The mix counters run in this order."""
    return sorted(names, key=lambda name: (-1 if _layer_of(name) is None else _layer_of(name), name))


def category(name):
    """tensor_get_category of llama-quant.cpp."""
    if name == "output.weight":
        return "output"
    if name in ("token_embd.weight", "per_layer_token_embd.weight"):
        return "token_embd"
    for fragment, kind in (("attn_qkv.weight", "attn_qkv"), ("attn_kv_b.weight", "attn_kv_b"), ("attn_v.weight", "attn_v"),
                           ("attn_k.weight", "attn_k"), ("attn_q.weight", "attn_q"), ("attn_output.weight", "attn_output"),
                           ("ffn_up", "ffn_up"), ("ffn_gate", "ffn_gate"), ("ffn_down", "ffn_down")):
        if fragment in name:
            return kind
    return "other"


def is_attn_v(kind):
    return kind in ("attn_v", "attn_qkv", "attn_kv_b")


def _use_more_bits(i_layer, n_layers):
    return i_layer < n_layers // 8 or i_layer >= 7 * n_layers // 8 or (i_layer - n_layers // 8) % 3 == 2


# llama.cpp's LLM_TYPE_70B, the one model size the mixes look at: the profile's quant_70b (block count),
# with quant_70b_gqa where the loader also asks for grouped-query attention (llama).


class ModelFacts:
    """What the mixes read from a model: architecture, expert count, blocks, heads of block 0."""

    def __init__(self, architecture, n_expert, n_layer, n_head, n_head_kv):
        self.architecture = architecture
        self.n_expert = n_expert
        self.n_layer = n_layer
        self.n_head = n_head
        self.n_head_kv = n_head_kv

    @property
    def n_gqa(self):
        return self.n_head // self.n_head_kv if self.n_head_kv else 0

    @property
    def is_70b(self):
        arch = _arch(self.architecture)
        if arch.quant_70b_gqa:
            return self.n_layer == arch.quant_70b and self.n_head != self.n_head_kv
        return arch.quant_70b == self.n_layer


class Choice:
    """The type one tensor gets in one tier and why."""

    def __init__(self, type_name, keep_reason=None, fallback_reason=None, requires_imatrix=False, rule=""):
        self.type = type_name  # None: kept in its source type
        self.keep_reason = keep_reason
        self.fallback_reason = fallback_reason
        self.requires_imatrix = requires_imatrix
        self.rule = rule  # "mix", "pure", "override", "output-tensor-type", ...


class _State:
    def __init__(self, facts, names):
        self.facts = facts
        kinds = [category(name) for name in names]
        self.n_attention_wv = sum(1 for kind in kinds if is_attn_v(kind))
        self.tied_embeddings = "output" not in kinds
        self.n_layer = facts.n_layer
        self.i_attention_wv = self.i_ffn_down = self.i_ffn_gate = self.i_ffn_up = 0


def _layer_info(state, counter, name):
    if max(1, state.facts.n_expert) > 1:
        layer = _layer_of(name)
        if layer is None:
            raise ValueError(f"Failed to determine layer for tensor {name!r}")
        if not 0 <= layer < state.n_layer:
            raise ValueError(f"Bad layer {layer} for tensor {name!r}. Must be in [0, {state.n_layer})")
        return layer, state.n_layer
    return counter, state.n_layer


def _mix_type(state, mix, name, ne0, new_type, kind):
    """llama_tensor_get_type_impl for the mixes in MIXES."""
    facts, ft = state.facts, mix.ftype
    arch = _arch(facts.architecture)
    falcon = arch.quant_falcon
    if arch.quant_q8_0 and any(fragment in name for fragment in arch.quant_q8_0):
        if new_type not in ("f32", "bf16", "f16"):
            return "q8_0"
    if kind == "output" or (state.tied_embeddings and kind == "token_embd"):
        if mix.output_type:
            return mix.output_type
        if falcon or ne0 % GGML_TYPES[GGML_TYPE_IDS[new_type]][1]:
            return "q8_0"
        return "q6_K" if new_type != "q8_0" else new_type
    if kind == "token_embd":
        return mix.token_embd_type or new_type
    if is_attn_v(kind):
        if ft == FT["Q2_K"]:
            new_type = "q4_K" if facts.n_gqa >= 4 else "q3_K"
        elif ft == FT["Q2_K_S"] and facts.n_gqa >= 4:
            new_type = "q4_K"
        elif ft == FT["Q3_K_M"]:
            new_type = "q5_K" if state.i_attention_wv < 2 else "q4_K"
        elif ft == FT["Q3_K_L"]:
            new_type = "q5_K"
        elif ft in (FT["IQ4_NL"], FT["IQ4_XS"]) and facts.n_gqa >= 4:
            new_type = "q5_K"
        elif ft in (FT["Q4_K_M"], FT["Q5_K_M"]) and _use_more_bits(state.i_attention_wv, state.n_attention_wv):
            new_type = "q6_K"
        elif ft == FT["Q4_K_S"] and state.i_attention_wv < 4:
            new_type = "q5_K"
        if facts.is_70b and new_type in ("q3_K", "q4_K"):
            new_type = "q5_K"
        if facts.n_expert == 8:
            new_type = "q8_0"
        state.i_attention_wv += 1
    elif kind == "attn_k":
        if facts.n_expert == 8:
            new_type = "q8_0"
    elif kind == "ffn_down":
        i_layer, n_layer = _layer_info(state, state.i_ffn_down, name)
        if ft == FT["Q2_K"]:
            new_type = "q3_K"
        elif ft == FT["Q2_K_S"]:
            if i_layer < n_layer // 8:
                new_type = "q4_K"
        elif ft == FT["Q3_K_M"]:
            new_type = ("q5_K" if i_layer < n_layer // 16
                        else "q4_K" if not falcon or _use_more_bits(i_layer, n_layer) else "q3_K")
        elif ft == FT["Q3_K_L"]:
            new_type = "q4_K" if falcon else "q5_K"
        elif ft == FT["Q4_K_M"]:
            if falcon:
                new_type = "q6_K" if i_layer < n_layer // 16 else "q5_K" if _use_more_bits(i_layer, n_layer) else "q4_K"
            elif _use_more_bits(i_layer, n_layer):
                new_type = "q6_K"
        elif i_layer < n_layer // 8 and ft in (FT["IQ4_NL"], FT["IQ4_XS"]) and not mix.has_imatrix:
            new_type = "q5_K"
        elif ft == FT["Q5_K_M"] and _use_more_bits(i_layer, n_layer):
            new_type = "q6_K"
        elif ft == FT["Q4_K_S"] and not falcon and i_layer < n_layer // 8:
            new_type = "q5_K"
        elif ft in (FT["Q4_0"], FT["Q5_0"]) and mix.has_imatrix and i_layer < n_layer // 8:
            new_type = "q4_1" if ft == FT["Q4_0"] else "q5_1"
        state.i_ffn_down += 1
    elif kind == "attn_output":
        if not falcon:
            if facts.n_expert == 8:
                if ft in (FT["Q2_K"], FT["Q3_K_S"], FT["Q3_K_M"], FT["IQ4_NL"], FT["Q4_K_S"], FT["Q4_K_M"], FT["IQ4_XS"]):
                    new_type = "q5_K"
            elif ft == FT["Q2_K"]:
                new_type = "q3_K"
            elif ft == FT["Q3_K_M"]:
                new_type = "q4_K"
            elif ft == FT["Q3_K_L"]:
                new_type = "q5_K"
        elif ft == FT["Q3_K_L"]:
            new_type = "q4_K"
    elif kind == "attn_qkv":
        if ft in (FT["Q3_K_M"], FT["Q3_K_L"]):
            new_type = "q4_K"
        elif ft == FT["Q4_K_M"]:
            new_type = "q5_K"
        elif ft == FT["Q5_K_M"]:
            new_type = "q6_K"
    elif kind == "ffn_gate":
        _layer_info(state, state.i_ffn_gate, name)
        state.i_ffn_gate += 1
    elif kind == "ffn_up":
        _layer_info(state, state.i_ffn_up, name)
        state.i_ffn_up += 1
    return new_type


def _fallback(row_length, type_name):
    """tensor_type_fallback: (type, reason or None)."""
    return target_for(row_length, type_name) if type_name in FALLBACK or GGML_TYPES[GGML_TYPE_IDS[type_name]][1] > 1 \
        else (type_name, None)


def requires_imatrix(name, type_name, mix):
    """tensor_requires_imatrix for the types moetools writes: Q2_K tensors of a Q2_K_S file."""
    if name in ("token_embd.weight", "per_layer_token_embd.weight", "output.weight"):
        return False
    return type_name == "q2_K" and mix.ftype == FT["Q2_K_S"]


def choose_types(mix, facts, tensors):
    """{tensor name: Choice} for `tensors` [(name, ggml shape)], in llama-quantize's order and with
    its state (counters over attn_v tensors, ffn_down layers, tied embeddings).

    Raises ValueError (llama-quantize's own message) for a tensor the mix rules cannot place."""
    import re

    names = weights_order([name for name, _ in tensors])
    shapes = dict(tensors)
    state = _State(facts, names)
    patterns = [(re.compile(pattern), type_name) for pattern, type_name in mix.tensor_types]
    quantized_default = GGML_TYPES[GGML_TYPE_IDS[mix.default_type]][1] > 1
    choices = {}
    for name in names:
        shape = shapes[name]
        reason = keep_reason(name, shape, facts.architecture)
        if reason:
            choices[name] = Choice(None, keep_reason=reason)
            continue
        kind = category(name)
        if mix.token_embd_type and kind == "token_embd":
            named = name == "per_layer_token_embd.weight" and any(p.search(name) for p, _ in patterns)
            if not named:
                choices[name] = Choice(mix.token_embd_type, rule="token-embedding-type",
                                       requires_imatrix=requires_imatrix(name, mix.token_embd_type, mix))
                continue
        if mix.output_type and kind == "output":
            choices[name] = Choice(mix.output_type, rule="output-tensor-type")
            continue
        new_type, rule, fallback_reason = mix.default_type, "pure" if mix.pure else "mix", None
        if quantized_default:
            manual = False
            for pattern, type_name in patterns:
                if pattern.search(name):
                    new_type, rule, manual = type_name, "tensor-type", True
                    break
            if not manual and not mix.pure:
                new_type = _mix_type(state, mix, name, shape[0], new_type, kind)
            new_type, fallback_reason = _fallback(shape[0], new_type)
        choices[name] = Choice(new_type, fallback_reason=fallback_reason, rule=rule,
                               requires_imatrix=requires_imatrix(name, new_type, mix))
    return choices
