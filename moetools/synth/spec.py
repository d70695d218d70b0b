"""The spec records of a synthetic model (ModelSpec, TensorSpec, Types) and the ggml type ids they use."""

from dataclasses import dataclass, field


# ggml type ids used below (equal to gguf.GGMLQuantizationType, checked by the constants test)
F32, F16, Q4_0, Q8_0, Q4_K, Q6_K, IQ2_XS, IQ3_XXS, BF16, MXFP4 = 0, 1, 2, 8, 12, 14, 17, 18, 30, 39


@dataclass
class TensorSpec:
    name: str
    shape: tuple  # ggml order: ne[0] is the row length
    type_id: int


@dataclass
class ModelSpec:
    architecture: str
    metadata: list  # (key, value, kind) with kind in "u32", "u64", "i32", "f32", "bool", "str", "u32[]", "i32[]", "u64[]", "str[]"
    tensors: list = field(default_factory=list)
    vocab_size: int = 0
    merges: int = 0  # number of BPE merges to write (0: none)

    def add(self, name, shape, type_id):
        self.tensors.append(TensorSpec(name, tuple(int(d) for d in shape), type_id))

    def meta(self, key, value, kind="u32"):
        self.metadata.append((key.format(arch=self.architecture), value, kind))


@dataclass
class Types:
    """Which ggml type each class of tensor gets."""

    expert: int = Q8_0
    expert_down: int = None  # defaults to `expert`
    # When set, only these blocks' ffn_down_exps get `expert_down` (the others `expert`): llama-quantize's
    # *_K_M mixes give ffn_down more bits in the layers its use_more_bits rule picks.
    expert_down_blocks: tuple = None
    resident: int = Q8_0  # 2-D resident matrices
    embed: int = Q8_0
    output: int = Q8_0
    norm: int = F32  # 1-D tensors, router, biases

def more_bits_blocks(n_layer):
    """The blocks llama-quantize's use_more_bits(i, n) picks: the first and last eighth, and every
    third block in between (src/llama-quant.cpp)."""
    return tuple(i for i in range(n_layer)
                 if i < n_layer // 8 or i >= 7 * n_layer // 8 or (i - n_layer // 8) % 3 == 2)
