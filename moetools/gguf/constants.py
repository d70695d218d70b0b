"""The few GGUF constants the header path needs, mirrored so that it never imports gguf.

`import gguf` costs about 0.3 s on a 2-core machine, which would be most of `inspect`'s budget.
These tables are kept equal to gguf's own (`GGMLQuantizationType`, `GGML_QUANT_SIZES`,
`GGUFValueType`, `Keys`) by tests/test_constants.py; code that processes tensor data imports gguf.
"""

GGUF_MAGIC = b"GGUF"
GGUF_DEFAULT_ALIGNMENT = 32
GGUF_SUPPORTED_VERSIONS = (2, 3)
GGML_MAX_DIMS = 4
# llama.cpp's model limits (src/llama-hparams.h at commit 0c1e57098; llama-model.cpp asserts
# 0 < block_count <= LLAMA_MAX_LAYERS and expert_count <= LLAMA_MAX_EXPERTS while loading).
LLAMA_MAX_LAYERS = 512
LLAMA_MAX_EXPERTS = 1024

# ggml type id -> (ggml type name, values per block, bytes per block)
GGML_TYPES = {
    0: ("f32", 1, 4),
    1: ("f16", 1, 2),
    2: ("q4_0", 32, 18),
    3: ("q4_1", 32, 20),
    6: ("q5_0", 32, 22),
    7: ("q5_1", 32, 24),
    8: ("q8_0", 32, 34),
    9: ("q8_1", 32, 40),
    10: ("q2_K", 256, 84),
    11: ("q3_K", 256, 110),
    12: ("q4_K", 256, 144),
    13: ("q5_K", 256, 176),
    14: ("q6_K", 256, 210),
    15: ("q8_K", 256, 292),
    16: ("iq2_xxs", 256, 66),
    17: ("iq2_xs", 256, 74),
    18: ("iq3_xxs", 256, 98),
    19: ("iq1_s", 256, 50),
    20: ("iq4_nl", 32, 18),
    21: ("iq3_s", 256, 110),
    22: ("iq2_s", 256, 82),
    23: ("iq4_xs", 256, 136),
    24: ("i8", 1, 1),
    25: ("i16", 1, 2),
    26: ("i32", 1, 4),
    27: ("i64", 1, 8),
    28: ("f64", 1, 8),
    29: ("iq1_m", 256, 56),
    30: ("bf16", 1, 2),
    34: ("tq1_0", 256, 54),
    35: ("tq2_0", 256, 66),
    39: ("mxfp4", 32, 17),
    40: ("nvfp4", 64, 36),
    41: ("q1_0", 128, 18),
}

GGML_TYPE_IDS = {name: type_id for type_id, (name, _, _) in GGML_TYPES.items()}

# GGUF metadata value type id -> (name, struct format or None for string/array)
GGUF_VALUE_TYPES = {
    0: ("UINT8", "B"),
    1: ("INT8", "b"),
    2: ("UINT16", "H"),
    3: ("INT16", "h"),
    4: ("UINT32", "I"),
    5: ("INT32", "i"),
    6: ("FLOAT32", "f"),
    7: ("BOOL", "?"),
    8: ("STRING", None),
    9: ("ARRAY", None),
    10: ("UINT64", "Q"),
    11: ("INT64", "q"),
    12: ("FLOAT64", "d"),
}
VALUE_STRING = 8
VALUE_ARRAY = 9


class Keys:
    """Metadata key names, spelled as gguf.Keys spells them (`{arch}` is the architecture)."""

    ARCHITECTURE = "general.architecture"
    ALIGNMENT = "general.alignment"
    NAME = "general.name"
    FILE_TYPE = "general.file_type"

    SPLIT_NO = "split.no"
    SPLIT_COUNT = "split.count"
    SPLIT_TENSORS_COUNT = "split.tensors.count"

    VOCAB_SIZE = "{arch}.vocab_size"
    CONTEXT_LENGTH = "{arch}.context_length"
    EMBEDDING_LENGTH = "{arch}.embedding_length"
    BLOCK_COUNT = "{arch}.block_count"
    LEADING_DENSE_BLOCK_COUNT = "{arch}.leading_dense_block_count"
    FEED_FORWARD_LENGTH = "{arch}.feed_forward_length"
    EXPERT_FEED_FORWARD_LENGTH = "{arch}.expert_feed_forward_length"
    EXPERT_SHARED_FEED_FORWARD_LENGTH = "{arch}.expert_shared_feed_forward_length"
    EXPERT_COUNT = "{arch}.expert_count"
    EXPERT_USED_COUNT = "{arch}.expert_used_count"
    EXPERT_SHARED_COUNT = "{arch}.expert_shared_count"
    NEXTN_PREDICT_LAYERS = "{arch}.nextn_predict_layers"

    HEAD_COUNT = "{arch}.attention.head_count"
    HEAD_COUNT_KV = "{arch}.attention.head_count_kv"
    KEY_LENGTH = "{arch}.attention.key_length"
    VALUE_LENGTH = "{arch}.attention.value_length"
    KEY_LENGTH_MLA = "{arch}.attention.key_length_mla"
    VALUE_LENGTH_MLA = "{arch}.attention.value_length_mla"
    KEY_LENGTH_SWA = "{arch}.attention.key_length_swa"
    VALUE_LENGTH_SWA = "{arch}.attention.value_length_swa"
    Q_LORA_RANK = "{arch}.attention.q_lora_rank"
    KV_LORA_RANK = "{arch}.attention.kv_lora_rank"
    SLIDING_WINDOW = "{arch}.attention.sliding_window"
    SLIDING_WINDOW_PATTERN = "{arch}.attention.sliding_window_pattern"
    ROPE_DIMENSION_COUNT = "{arch}.rope.dimension_count"

    SSM_CONV_KERNEL = "{arch}.ssm.conv_kernel"
    SSM_INNER_SIZE = "{arch}.ssm.inner_size"
    SSM_STATE_SIZE = "{arch}.ssm.state_size"
    SSM_TIME_STEP_RANK = "{arch}.ssm.time_step_rank"
    SSM_GROUP_COUNT = "{arch}.ssm.group_count"
    KDA_HEAD_DIM = "{arch}.kda.head_dim"

    # Not in gguf 0.19.0 on PyPI (llama.cpp's kimi-k3 writes it): not checked against gguf.
    EXPERT_LATENT_LENGTH = "{arch}.expert_latent_length"


# Keys whose gguf.Keys spelling the test compares: (our attribute, gguf attribute path)
GGUF_KEY_MIRROR = {
    "ARCHITECTURE": "General.ARCHITECTURE",
    "ALIGNMENT": "General.ALIGNMENT",
    "NAME": "General.NAME",
    "FILE_TYPE": "General.FILE_TYPE",
    "SPLIT_NO": "Split.LLM_KV_SPLIT_NO",
    "SPLIT_COUNT": "Split.LLM_KV_SPLIT_COUNT",
    "SPLIT_TENSORS_COUNT": "Split.LLM_KV_SPLIT_TENSORS_COUNT",
    "VOCAB_SIZE": "LLM.VOCAB_SIZE",
    "CONTEXT_LENGTH": "LLM.CONTEXT_LENGTH",
    "EMBEDDING_LENGTH": "LLM.EMBEDDING_LENGTH",
    "BLOCK_COUNT": "LLM.BLOCK_COUNT",
    "LEADING_DENSE_BLOCK_COUNT": "LLM.LEADING_DENSE_BLOCK_COUNT",
    "FEED_FORWARD_LENGTH": "LLM.FEED_FORWARD_LENGTH",
    "EXPERT_FEED_FORWARD_LENGTH": "LLM.EXPERT_FEED_FORWARD_LENGTH",
    "EXPERT_SHARED_FEED_FORWARD_LENGTH": "LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH",
    "EXPERT_COUNT": "LLM.EXPERT_COUNT",
    "EXPERT_USED_COUNT": "LLM.EXPERT_USED_COUNT",
    "EXPERT_SHARED_COUNT": "LLM.EXPERT_SHARED_COUNT",
    "NEXTN_PREDICT_LAYERS": "LLM.NEXTN_PREDICT_LAYERS",
    "HEAD_COUNT": "Attention.HEAD_COUNT",
    "HEAD_COUNT_KV": "Attention.HEAD_COUNT_KV",
    "KEY_LENGTH": "Attention.KEY_LENGTH",
    "VALUE_LENGTH": "Attention.VALUE_LENGTH",
    "KEY_LENGTH_MLA": "Attention.KEY_LENGTH_MLA",
    "VALUE_LENGTH_MLA": "Attention.VALUE_LENGTH_MLA",
    "KEY_LENGTH_SWA": "Attention.KEY_LENGTH_SWA",
    "VALUE_LENGTH_SWA": "Attention.VALUE_LENGTH_SWA",
    "Q_LORA_RANK": "Attention.Q_LORA_RANK",
    "KV_LORA_RANK": "Attention.KV_LORA_RANK",
    "SLIDING_WINDOW": "Attention.SLIDING_WINDOW",
    "SLIDING_WINDOW_PATTERN": "Attention.SLIDING_WINDOW_PATTERN",
    "ROPE_DIMENSION_COUNT": "Rope.DIMENSION_COUNT",
    "SSM_CONV_KERNEL": "SSM.CONV_KERNEL",
    "SSM_INNER_SIZE": "SSM.INNER_SIZE",
    "SSM_STATE_SIZE": "SSM.STATE_SIZE",
    "SSM_TIME_STEP_RANK": "SSM.TIME_STEP_RANK",
    "SSM_GROUP_COUNT": "SSM.GROUP_COUNT",
    "KDA_HEAD_DIM": "KDA.HEAD_DIM",
}


def type_name(type_id):
    """ggml's name for a type id (`q4_K`), or `type42` for one this table does not know."""
    entry = GGML_TYPES.get(type_id)
    return entry[0] if entry else f"type{type_id}"


def tensor_nbytes(type_id, shape):
    """Bytes of a tensor of ggml `type_id` and ggml-order `shape` (ne[0] must divide into blocks)."""
    _, block_size, block_bytes = GGML_TYPES[type_id]
    count = 1
    for dim in shape:
        count *= dim
    return count // block_size * block_bytes

# general.file_type -> llama.cpp's name for it (enum llama_ftype in include/llama.h at commit
# 0c1e57098, without the LLAMA_FTYPE_MOSTLY_ prefix; equal to gguf.LlamaFileType, checked by a test).
LLAMA_FILE_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S",
    12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K",
    19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL",
    26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16",
    36: "TQ1_0", 37: "TQ2_0", 38: "MXFP4_MOE", 39: "NVFP4", 40: "Q1_0", 41: "Q2_0", 1024: "GUESSED",
}


def file_type_name(file_type):
    """`15` -> `Q4_K_M`; None when the key is absent; `unknown (N)` for an id llama.cpp does not name."""
    if file_type is None:
        return None
    if isinstance(file_type, bool) or not isinstance(file_type, int):
        return f"unknown ({file_type!r})"
    return LLAMA_FILE_TYPES.get(file_type, f"unknown ({file_type})")
