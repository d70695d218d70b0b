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


def layer_bytes(model, top_k_per_block=None):
    """LayerBytes of an open moetools.gguf.Model. `top_k_per_block`: {block: top-k} of the MoE blocks."""
    from moetools.gguf.model import expert_tensor_kind, tensor_block

    blocks = [Block(il) for il in range(model.block_count)]
    result = LayerBytes(blocks=blocks)
    has_output = False
    embeddings = []
    for tensor in model.tensors:
        entry = (tensor.n_bytes, cuda_pad(tensor.type_id, tensor.shape))
        kind = expert_tensor_kind(tensor.name)
        block = kind[0] if kind else tensor_block(tensor.name)
        if block is not None and block < len(blocks):
            target = blocks[block]
            if kind:
                part = kind[1]
                target.experts[part] = target.experts.get(part, 0) + tensor.n_bytes
                target.expert_tensors.setdefault(part, []).append(entry)
            else:
                target.dense_bytes += tensor.n_bytes
                target.dense_tensors.append(entry)
        elif tensor.name.startswith(INPUT_PREFIXES):
            result.input_bytes += tensor.n_bytes
            result.input_tensors.append(entry)
            if tensor.name.startswith("token_embd.weight"):
                embeddings.append(entry)
        else:
            has_output = has_output or tensor.name == "output.weight"
            result.output_bytes += tensor.n_bytes
            result.output_tensors.append(entry)
    if not has_output and embeddings:
        # tied embeddings: the output matrix is token_embd again, allocated on the output device
        result.output_tied = True
        result.output_bytes += sum(n for n, _ in embeddings)
        result.output_tensors += embeddings
    top_k = top_k_per_block or {}
    for block in blocks:
        if block.experts:
            block.top_k = top_k.get(block.index, 0)
            block.expert_count = model.expert_count
    return result
