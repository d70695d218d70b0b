"""What each layer of a model weighs, as llama.cpp places it: the input layer (token embeddings, always
kept on the CPU), the repeating blocks `blk.N.*` and the output layer (`output`, `output_norm`, ...: the
last device of a `-ts` split). Read once from the header; the placement and speed modules work on this.

A block's tensors split into the dense part (attention, norms, router, shared experts: they follow the
block's device) and its routed-expert matrices (`ffn_gate_exps`, `ffn_up_exps`, `ffn_down_exps`,
`ffn_gate_up_exps` with their biases), which `-ot` can send elsewhere one matrix at a time.

Sources: llama.cpp src/llama-arch.cpp LLM_TENSOR_INFOS (which tensors are input/output layers),
src/llama-model.cpp load_tensors (the input layer on the CPU; output tensors tied to the embeddings
are duplicated onto the output device), ggml-cuda's buffer type (quantized rows padded to 512 values).
"""

from moetools.devicefit.record import REQUIRED, Record
from moetools.gguf.constants import GGML_TYPES

INPUT_PREFIXES = ("token_embd.", "pos_embd.", "token_types.", "per_layer_token_embd.")
EXPERT_PARTS = ("up", "gate", "down", "gate_up")  # the order --fit moves the boundary layer's matrices back
CUDA_ROW_PADDING = 512  # ggml-cuda MATRIX_ROW_PADDING: a quantized row's allocation rounds up to this
# Loaders that create the NextN/MTP blocks' tensors with TENSOR_SKIP unless the model is loaded for MTP
# drafting (llama_model_params.load_mtp, set by --spec-type draft-mtp): llama.cpp then allocates none
# of them ("model has unused tensor ... -- ignoring"). src/models/*.cpp load_arch_tensors. They are the
# architectures whose moetools.arch profile has mtp at least "skip"; `mtp_kept` lists the tensors of
# those blocks a loader still creates without the MTP flags (so llama.cpp loads them anyway).


class Block(Record):
    """One repeating block: bytes of its dense tensors and of each expert matrix (all experts)."""

    FIELDS = (
        ("index", REQUIRED),
        ("dense_bytes", 0),
        ("experts", dict),  # {"up"|"gate"|"down"|"gate_up": bytes of that matrix with its bias}
        ("dense_tensors", list),  # [(n_bytes, cuda_pad_bytes)] for per-buffer alignment
        ("expert_tensors", dict),  # {part: [(n_bytes, cuda_pad_bytes)]}
        ("top_k", 0),  # experts used per token in this block (0: dense block)
        ("expert_count", 0),
        ("dense_params", 0),  # weights (elements) of the dense matrices: 2 x this is a token's dense FLOPs
        ("expert_params", dict),  # {part: weights of that matrix over all experts}
    )

    @property
    def expert_bytes(self):
        return sum(self.experts.values())

    @property
    def total_bytes(self):
        return self.dense_bytes + self.expert_bytes

    @property
    def active_fraction(self):
        """Share of the expert bytes a token reads: top-k of the block's experts."""
        return self.top_k / self.expert_count if self.expert_count else 0.0


class LayerBytes(Record):
    """Per-layer weights of a model: `blocks` (list of Block, by index), the input and output layers."""

    FIELDS = (
        ("blocks", list),
        ("input_bytes", 0),
        ("output_bytes", 0),
        ("input_tensors", list),
        ("output_tensors", list),
        ("output_tied", False),  # no output.weight: llama.cpp duplicates token_embd onto the output device
        # every tensor llama.cpp creates, for -ot: (name, role "input" | "output" | "dense" | "expert",
        # block or None, expert part or None, n_bytes, cuda pad bytes); a tied output's token_embd twice
        ("tensors", list),
        ("offsets", dict),  # {name: (shard, absolute file offset)}: the file span llama.cpp maps (upstream.mapped_spans)
    )

    @property
    def n_layer(self):
        return len(self.blocks)


def cuda_pad(type_id, shape):
    """Extra bytes ggml-cuda allocates for a quantized tensor whose rows do not fill 512 values."""
    _, block, block_bytes = GGML_TYPES[type_id]
    if block == 1 or not shape or shape[0] % CUDA_ROW_PADDING == 0:
        return 0
    missing = CUDA_ROW_PADDING - shape[0] % CUDA_ROW_PADDING
    return missing // block * block_bytes


def mtp_blocks(model):
    """The NextN/MTP blocks llama.cpp does not load in a main (non-drafting) context: the last
    `nextn_predict_layers` blocks of the architectures whose profile's mtp is at least "skip", else none."""
    from moetools.arch.registry import profile
    from moetools.gguf.constants import Keys

    nextn = model.get_int(Keys.NEXTN_PREDICT_LAYERS, 0)
    n_layer = model.block_count
    if not profile(model.architecture).mtp_at_least("skip") or not 0 < nextn < n_layer:
        return ()
    return tuple(range(n_layer - nextn, n_layer))


def mtp_skipped_tensors(model):
    """Names of the NextN/MTP blocks' tensors llama.cpp skips in a main context (mtp_blocks less the
    profile's mtp_kept)."""
    blocks = mtp_blocks(model)
    if not blocks:
        return frozenset()
    from moetools.arch.registry import profile
    from moetools.gguf.model import tensor_block

    kept = profile(model.architecture).mtp_kept
    return frozenset(tensor.name for tensor in model.tensors
                     if tensor_block(tensor.name) in blocks and not tensor.name.endswith(kept))


def _matrix_params(shape):
    """Weights a matmul multiplies a token by: the elements of a 2-D (or stacked expert) matrix; 0 for
    norms and biases, whose work does not scale like a matmul's."""
    if len(shape) < 2:
        return 0
    count = 1
    for dim in shape:
        count *= int(dim)
    return count


def layer_bytes(model, top_k_per_block=None, skip_names=frozenset()):
    """LayerBytes of an open moetools.gguf.Model. `top_k_per_block`: {block: top-k} of the MoE blocks;
    `skip_names`: tensors llama.cpp does not allocate (mtp_skipped_tensors), left out."""
    from moetools.gguf.model import expert_tensor_kind, tensor_block

    blocks = [Block(il) for il in range(model.block_count)]
    result = LayerBytes(blocks=blocks)
    has_output = False
    embeddings = []
    for tensor in model.tensors:
        entry = (tensor.n_bytes, cuda_pad(tensor.type_id, tensor.shape))
        kind = expert_tensor_kind(tensor.name)
        if tensor.name in skip_names:
            continue
        result.offsets[tensor.name] = (tensor.shard, tensor.offset)
        block = kind[0] if kind else tensor_block(tensor.name)
        if block is not None and block < len(blocks):
            target = blocks[block]
            params = _matrix_params(tensor.shape)
            result.tensors.append((tensor.name, "expert" if kind else "dense", block, kind[1] if kind else None, *entry))
            if kind:
                part = kind[1]
                target.experts[part] = target.experts.get(part, 0) + tensor.n_bytes
                target.expert_params[part] = target.expert_params.get(part, 0) + params
                target.expert_tensors.setdefault(part, []).append(entry)
            else:
                target.dense_bytes += tensor.n_bytes
                target.dense_params += params
                target.dense_tensors.append(entry)
        elif tensor.name.startswith(INPUT_PREFIXES):
            result.tensors.append((tensor.name, "input", None, None, *entry))
            result.input_bytes += tensor.n_bytes
            result.input_tensors.append(entry)
            if tensor.name.startswith("token_embd.weight"):
                embeddings.append(entry)
        else:
            result.tensors.append((tensor.name, "output", None, None, *entry))
            has_output = has_output or tensor.name == "output.weight"
            result.output_bytes += tensor.n_bytes
            result.output_tensors.append(entry)
    if not has_output and embeddings:
        # tied embeddings: the output matrix is token_embd again, allocated on the output device
        result.output_tied = True
        result.output_bytes += sum(n for n, _ in embeddings)
        result.output_tensors += embeddings
        result.tensors += [("token_embd.weight", "output", None, None, *entry) for entry in embeddings]
    top_k = top_k_per_block or {}
    for block in blocks:
        if block.experts:
            block.top_k = top_k.get(block.index, 0)
            block.expert_count = model.expert_count
    return result
