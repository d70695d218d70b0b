"""What llama.cpp refuses in a model's metadata and tensor table, checked once for every command.

Two levels (issue 32):

* `check_metadata(model)`: the hyperparameters llama.cpp's `load_hparams` reads and asserts on
  (src/llama-model.cpp, src/llama-model-loader.cpp at 0c1e57098): every count a non-negative whole
  number that fits llama.cpp's 32-bit field, embedding_length present and positive, expert_count
  present when the file holds routed experts and equal to their expert dimension, expert_used_count
  between 1 and expert_count. A GGUFError naming the key; inspect, device-fit, quantize and
  container-encode all stop on it.
* `load_refusals(model)`: what `load_tensors` / `create_tensor` refuses ("missing tensor", "tensor
  has wrong shape") for the architectures whose layout is written out here (llama and Mixtral,
  qwen3moe, deepseek2, gpt-oss, glm4moe): every required tensor of each trunk block present, with
  the shape the hyperparameters give. Other architectures get no tensor check (never refuse a file
  llama.cpp loads). device-fit and container-encode stop on the first refusal; inspect lists them
  (and `inspect --strict` exits 2 on them).

This module reads the parsed header only: it is no part of the reader's low-level walk (header.py).
"""

from moetools.errors import GGUFError
from moetools.gguf.constants import Keys
from moetools.gguf.header import LazyArray
from moetools.gguf.model import expert_tensor_kind, tensor_block

U32_MAX = 2**32 - 1

# llama.cpp reads these as uint32 (get_key / get_key_or_arr into uint32_t fields)
U32_KEYS = (
    Keys.CONTEXT_LENGTH, Keys.EMBEDDING_LENGTH, Keys.BLOCK_COUNT, Keys.EXPERT_COUNT, Keys.EXPERT_USED_COUNT,
    Keys.EXPERT_SHARED_COUNT, Keys.LEADING_DENSE_BLOCK_COUNT, Keys.HEAD_COUNT, Keys.HEAD_COUNT_KV,
    Keys.FEED_FORWARD_LENGTH, Keys.EXPERT_FEED_FORWARD_LENGTH, Keys.KEY_LENGTH, Keys.VALUE_LENGTH,
    Keys.NEXTN_PREDICT_LAYERS,
)


def _short(key):
    """`qwen3moe.attention.head_count_kv` -> `head_count_kv`: how messages name a hyperparameter."""
    return key.rsplit(".", 1)[-1]


def _error(model, problem, template=None):
    return GGUFError(model.path, problem, key=model.key(template) if template else None)


def _whole_numbers(model, template):
    """The key's value(s) as a list, each checked to be a whole number fitting 32 bits; [] if absent."""
    key = model.key(template)
    if key not in model.metadata:
        return []
    value = model.metadata[key]
    if isinstance(value, LazyArray):
        value = value.load()
    values = value if isinstance(value, list) else [value]
    for item in values:
        if isinstance(item, bool) or not isinstance(item, int) or item < 0:
            raise _error(model, f"{_short(key)} must be a non-negative whole number, found {item!r}", template)
        if item > U32_MAX:
            raise _error(model, f"{_short(key)} {item} does not fit llama.cpp's 32-bit field (at most {U32_MAX})",
                         template)
    return values


def check_metadata(model):
    """Raise a GGUFError naming the key for metadata llama.cpp refuses (see the module's doc)."""
    for template in U32_KEYS:
        _whole_numbers(model, template)
    n_embd = _whole_numbers(model, Keys.EMBEDDING_LENGTH)
    # (a file without `blk.N` tensors -- a vision projector, whose keys are clip.vision.* -- is no
    # model llama.cpp's load_hparams reads: its missing key is not refused)
    if not n_embd and any(tensor_block(tensor.name) is not None for tensor in model.tensors):
        raise _error(model, "missing metadata key embedding_length (llama.cpp requires it)", Keys.EMBEDDING_LENGTH)
    if n_embd and n_embd[0] == 0:
        raise _error(model, "embedding_length is 0: a model needs a positive hidden size", Keys.EMBEDDING_LENGTH)
    summary = model.summary  # the reader's own checks: key types, expert tensors against expert_count
    has_experts = bool(summary.moe_layers)
    key_count = model.get_int(Keys.EXPERT_COUNT, 0)
    if has_experts and not key_count:
        raise _error(model, "the file has expert tensors but expert_count is missing or 0 (llama.cpp refuses it)",
                     Keys.EXPERT_COUNT)
    if has_experts or key_count:
        used = _whole_numbers(model, Keys.EXPERT_USED_COUNT)
        if not used or max(used) == 0:
            raise _error(model, f"expert_used_count is {'missing' if not used else 0} with expert_count "
                                f"{summary.expert_count} (llama.cpp asserts 0 < expert_used_count <= expert_count)",
                         Keys.EXPERT_USED_COUNT)
        if max(used) > summary.expert_count:
            raise _error(model, f"expert_used_count {max(used)} is more than expert_count {summary.expert_count} "
                                "(llama.cpp refuses it)", Keys.EXPERT_USED_COUNT)
    return summary


# --- load_tensors: required tensors and their shapes -------------------------------------------

ARCHITECTURES = ("llama", "qwen3moe", "deepseek2", "gpt-oss", "glm4moe")


class _Dim:
    """One expected dimension: its value and how the hyperparameters give it (`key_length × head_count`)."""

    __slots__ = ("value", "how")

    def __init__(self, value, how):
        self.value, self.how = value, how


def _strip(shape):
    dims = list(shape)
    while len(dims) > 1 and dims[-1] == 1:
        dims.pop()
    return dims


class _Rules:
    """The hyperparameters of one model as llama.cpp's load_tensors reads them, and the checks."""

    def __init__(self, model):
        self.model = model
        self.arch = model.architecture
        self.refusals = []
        meta = model.metadata
        self.present = {key: model.key(key) in meta for key in (Keys.FEED_FORWARD_LENGTH,
                                                                Keys.EXPERT_FEED_FORWARD_LENGTH)}
        self.n_layer = model.block_count
        self.trunk = self.n_layer - model.get_int(Keys.NEXTN_PREDICT_LAYERS, 0)
        self.n_embd = model.get_int(Keys.EMBEDDING_LENGTH, 0)
        self.n_head = model.layer_values(Keys.HEAD_COUNT, 0)
        kv = model.layer_values(Keys.HEAD_COUNT_KV, None)
        self.n_head_kv = [self.n_head[il] if value is None else value for il, value in enumerate(kv)]
        first = self.n_head[0] if self.n_head else 0
        self.head_k = model.get_int(Keys.KEY_LENGTH, self.n_embd // first if first else 0)
        self.head_v = model.get_int(Keys.VALUE_LENGTH, self.n_embd // first if first else 0)
        self.n_rot = model.get_int(Keys.ROPE_DIMENSION_COUNT, self.head_k)
        self.n_ff = model.layer_values(Keys.FEED_FORWARD_LENGTH, 0)
        self.n_ff_exp = model.layer_values(Keys.EXPERT_FEED_FORWARD_LENGTH, 0)  # per layer in deepseek2
        self.n_expert = model.get_int(Keys.EXPERT_COUNT, 0)
        used = model.layer_values(Keys.EXPERT_USED_COUNT, 0)
        self.n_expert_used = max(used) if used else 0
        self.n_shared = model.get_int(Keys.EXPERT_SHARED_COUNT, 0)
        self.dense_lead = model.get_int(Keys.LEADING_DENSE_BLOCK_COUNT, 0)
        self.q_lora_rank = model.get_int(Keys.Q_LORA_RANK, 0)
        self.last_block = max((b for b in (tensor_block(t.name) for t in model.tensors) if b is not None), default=-1)

    # the words of a dimension
    def embd(self):
        return _Dim(self.n_embd, "embedding_length")

    def ff(self, il):
        how = "feed_forward_length" + ("" if self.present[Keys.FEED_FORWARD_LENGTH] else " (missing, so 0)")
        return _Dim(self.n_ff[il], how)

    def ff_exp(self, il):
        if self.arch == "llama":
            return self.ff(il)
        if self.n_ff_exp[il]:
            return _Dim(self.n_ff_exp[il], "expert_feed_forward_length")
        if self.arch in ("qwen3moe", "glm4moe") and self.n_expert_used:
            return _Dim(self.n_ff[il] // self.n_expert_used, "feed_forward_length / expert_used_count")
        return None  # not derivable here: that dimension is not checked

    def expert(self):
        return _Dim(self.n_expert, "expert_count")

    def tensor(self, name):
        return self.model.tensor_by_name.get(name)

    def need(self, name, dims, required=True):
        """`name` must exist (when required) and have the shape `dims` (a None entry is not checked)."""
        tensor = self.tensor(name)
        if tensor is None:
            if required:
                self._missing(name)
            return None
        expected = [dim.value if dim is not None else None for dim in dims]
        got = list(tensor.shape)
        padded = got + [1] * (len(expected) - len(got))
        ok = len(_strip(got)) <= len(expected) and all(
            want is None or want == have for want, have in zip(expected, padded))
        if not ok:
            shown = ", ".join("?" if dim is None else str(dim.value) for dim in dims)
            how = " × ".join("?" if dim is None else dim.how for dim in dims)  # noqa: RUF001
            self.refusals.append((name, f"tensor {name} has shape [{', '.join(map(str, got))}] but llama.cpp "
                                        f"expects [{shown}] ({how}): it refuses the model (wrong shape)"))
        return tensor

    def _missing(self, name):
        block = tensor_block(name)
        if block is not None and block > self.last_block:
            self.refusals.append((name, f"tensor {name} is missing: block_count is {self.n_layer} but the file's "
                                        f"tensors end at block {self.last_block} (llama.cpp refuses it: missing "
                                        "tensor)"))
        else:
            self.refusals.append((name, f"tensor {name} is missing (llama.cpp's {self.arch} loader requires it in "
                                        "every block: missing tensor)"))

    def run(self):
        embd = self.embd()
        self.need("token_embd.weight", [embd, None])
        self.need("output_norm.weight", [embd])
        self.need("output.weight", [embd, None], required=self.arch == "gpt-oss")
        for il in range(min(self.trunk, self.n_layer)):
            blk = f"blk.{il}."
            self.need(blk + "attn_norm.weight", [embd])
            if self.arch == "deepseek2":
                self._mla(il, blk)
            else:
                self._attention(il, blk)
            norm = "post_attention_norm" if self.arch in ("gpt-oss", "glm4moe") else "ffn_norm"
            self.need(blk + norm + ".weight", [embd])
            moe = self._moe_layer(il)
            if moe:
                self._experts(il, blk)
            else:
                ff = self.ff(il)
                self.need(blk + "ffn_gate.weight", [embd, ff])
                self.need(blk + "ffn_up.weight", [embd, ff])
                self.need(blk + "ffn_down.weight", [ff, embd])
            if len(self.refusals) > 20:
                break
        return self.refusals

    def _moe_layer(self, il):
        if self.arch in ("qwen3moe", "gpt-oss"):
            return True
        if self.arch == "llama":
            return self.n_expert > 0
        return il >= self.dense_lead

    def _attention(self, il, blk):
        embd = self.embd()
        heads = self.n_head[il]
        kv = self.n_head_kv[il]
        width = self.n_rot if self.arch == "gpt-oss" else self.head_k
        what = "rope.dimension_count" if self.arch == "gpt-oss" else "key_length"
        q = _Dim(width * heads, f"{what}·head_count")
        k = _Dim(width * kv, f"{what}·head_count_kv")
        v_width, v_what = (width, what) if self.arch == "gpt-oss" else (self.head_v, "value_length")
        v = _Dim(v_width * kv, f"{v_what}·head_count_kv")
        if self.tensor(blk + "attn_qkv.weight") is not None:
            self.need(blk + "attn_qkv.weight", [embd, _Dim(q.value + k.value + v.value, "q + k + v widths")])
        else:
            self.need(blk + "attn_q.weight", [embd, q])
            self.need(blk + "attn_k.weight", [embd, k])
            self.need(blk + "attn_v.weight", [embd, v])
        self.need(blk + "attn_output.weight", [q, embd])

    def _mla(self, il, blk):
        embd = self.embd()
        if self.q_lora_rank:
            self.need(blk + "attn_q_a.weight", [embd, _Dim(self.q_lora_rank, "q_lora_rank")])
            self.need(blk + "attn_q_b.weight", [_Dim(self.q_lora_rank, "q_lora_rank"), None])
        else:
            self.need(blk + "attn_q.weight", [embd, None])
        self.need(blk + "attn_kv_a_mqa.weight", [embd, None])
        self.need(blk + "attn_output.weight", [None, embd])

    def _experts(self, il, blk):
        embd, n_expert = self.embd(), self.expert()
        self.need(blk + "ffn_gate_inp.weight", [embd, n_expert])
        ff = self.ff_exp(il)
        self.need(blk + "ffn_down_exps.weight", [ff, embd, n_expert])
        # create_tensor_gate_up_exps: a fused gate_up tensor replaces gate and up
        fused = self.tensor(blk + "ffn_gate_up_exps.weight")
        if fused is not None:
            self.need(blk + "ffn_gate_up_exps.weight",
                      [embd, _Dim(2 * ff.value, "2·" + ff.how) if ff else None, n_expert])
        else:
            self.need(blk + "ffn_up_exps.weight", [embd, ff, n_expert])
            self.need(blk + "ffn_gate_exps.weight", [embd, ff, n_expert], required=self.arch != "llama")
        if self.arch in ("deepseek2", "glm4moe") and (self.n_shared or self.arch == "deepseek2"):
            shared = _Dim(ff.value * self.n_shared, ff.how + " × expert_shared_count") if ff else None  # noqa: RUF001
            self.need(blk + "ffn_gate_shexp.weight", [embd, shared])
            self.need(blk + "ffn_up_shexp.weight", [embd, shared])
            self.need(blk + "ffn_down_shexp.weight", [shared, embd])


def load_refusals(model):
    """[(tensor name, one-line reason)] of what llama.cpp's load_tensors refuses in `model` (empty for
    an architecture without written-out rules, and for a resident-only tier, which holds no experts)."""
    from moetools.formats.tier_gguf import tier_identity

    if model.architecture not in ARCHITECTURES or tier_identity(model.metadata):
        return []
    return _Rules(model).run()


def check_model(model, tensors=True):
    """check_metadata, then (with `tensors`) the first of load_refusals as a GGUFError."""
    check_metadata(model)
    if tensors:
        refusals = load_refusals(model)
        if refusals:
            raise GGUFError(model.path, refusals[0][1])
