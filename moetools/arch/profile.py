"""ArchProfile: what moetools knows of one llama.cpp architecture, as data.

Each field replaces a module-level tuple, set or dict of architecture names that device-fit, quantize
and synth kept before (the mapping is in tests/test_arch_registry.py, which checks it both ways). The
defaults are what an architecture named in no such table got: a plain attention cache, softmax gating,
no MTP blocks, nothing special in the graph. Sources are llama.cpp 0c1e57098's src/models/<arch>.cpp
(`llama_cpp`), src/llama-arch.cpp and src/llama-model.cpp.
"""

# Tensors of the NextN blocks that hy-v3.cpp / step35.cpp create TENSOR_NOT_REQUIRED without the MTP
# flags, so llama.cpp loads them in a main context anyway (the FFN, experts and shared head).
MTP_FFN_KEPT = (".ffn_gate.weight", ".ffn_down.weight", ".ffn_up.weight", ".ffn_gate_inp.weight",
                ".ffn_gate_exps.weight", ".ffn_up_exps.weight", ".ffn_down_exps.weight", ".ffn_gate_up_exps.weight",
                "_shexp.weight", ".nextn.embed_tokens.weight", ".nextn.shared_head_head.weight",
                ".nextn.shared_head_norm.weight")

# MTP handling, in increasing order: each level includes the ones before it.
#   "none":  the loader has no NextN branch (NextN blocks, if any, are loaded as ordinary tensors);
#   "skip":  the loader creates the NextN blocks' tensors TENSOR_SKIP unless loaded for MTP drafting
#            (llama_model_params.load_mtp), so a main context allocates none of them;
#   "llama": ... and build_arch_graph builds an LLM_GRAPH_TYPE_DECODER_MTP graph (llama.cpp drafts with it);
#   "graph": ... and device-fit replays that MTP graph (graph_mtp) and its memory.
MTP_LEVELS = ("none", "skip", "llama", "graph")


class ArchProfile:
    """One architecture's facts, frozen. Only `name` is required; the tables set the fields that differ
    (keywords only) and the others read the class defaults below.

    A plain class, not a dataclass: the device-fit header path does not import dataclasses (about 13 ms
    of start-up; tests/test_devicefit.py test_header_path_imports_no_heavy_modules), and this module is
    on it. FIELDS lists the fields in order (from the annotations)."""

    name: str
    known: bool = True  # in llama.cpp's LLM_ARCH_NAMES (less clip): any other name is refused
    llama_cpp: str = ""  # the llama.cpp file it mirrors, src/models/<file>.cpp ("" where none)
    synth_builder: str = ""  # "module:function" building a tiny synthetic model of it (moetools.synth)
    graph_builder: str = ""  # "module:function" of a bespoke device-fit graph; "" = the generic trunk

    # --- memory (llama_model::create_memory; devicefit/kv.py) ---
    memory: str = "cache"  # "cache" (modelled), "none" (no memory: refused), "unsupported" (not modelled)
    unsupported: str = ""  # why device-fit refuses it, where memory == "unsupported"
    recurrent: tuple = None  # (state kind, recurrent layers rule, attention layers rule): kv.RECURRENT_RULES
    recurrent_mixer: str = None  # hybrid recurrent layers: "kda", "gdn" or "lightning"
    sparse_kv: str = None  # the extra cache of sparse attention: "dsa" (indexer K) or "msa"
    swa: tuple = None  # (when, period, dense_first, n_swa default, type): kv.SWA_RULES
    fixed_swa: int = None  # an n_swa the loader sets whatever the key says
    borrowed_kv: bool = False  # every layer reads the target context's KV (a draft)
    flash_attn_off: bool = False  # llama_init_from_model forces flash attention off
    rs_rollback: bool = False  # llm_arch_supports_rs_rollback: keeps n_rs_seq recurrent snapshots
    kv_trunk_only: bool = False  # create_memory's attention filter keeps the trunk only (no NextN KV)
    swa_width_required: bool = False  # the sliding-window head widths are required keys (gemma4.cpp)
    dsv4_cache: bool = False  # llama_kv_cache_dsv4: a window cache of every block plus compressed caches
    # which blocks carry the DSA indexer cache (sparse_kv "dsa"): "trunk" (every trunk block), "glm_dsa"
    # (indexer.types, default by the trained context), "types_kv" (indexer.types over the attention
    # blocks, default all), "types_layer0" (indexer.types, default none; layer 0 must index),
    # "types_required" (indexer.types required)
    indexer_rule: str = None
    indexer_optional: bool = False  # without indexer.top_k the checkpoint is all full attention (no indexer)
    indexer_kpool: bool = False  # the indexer cache row is key, gate and pooled key (indexer.kpool)
    qsa_indexer: bool = False  # llama_memory_hybrid_idx: a QSA key head per attention block, and the PLE state

    # --- the graph (devicefit/compute.py) ---
    gating: str = "softmax"  # expert gating without expert_gating_func: "softmax", "sigmoid", "softmax_weight"
    norm_w: str = "key"  # expert weights normalised: "key" (default false), "default_true", "never", "always"
    no_rope: bool = False  # attention without ggml_rope_ext (NoPE)
    mrope: str = None  # M-RoPE (4 positions per token): "always" or "if_sections"
    gated_q: bool = False  # attn_q gives the query and an output gate side by side
    norm_first: bool = False  # the attention norm expanded before the layer body
    residual_first: bool = False  # ggml_add(residual, layer output)
    normed_residual: bool = False  # residuals are the normed block inputs, scaled (minimax-01.cpp)
    post_norm: bool = False  # no pre-norms: outputs RMS-normed before each residual add (exaone4.cpp)
    parallel_ssm: bool = False  # attention and Mamba-2 side by side in every block
    parallel_ffn: bool = False  # attention and FFN side by side from one norm
    relu_sqr: bool = False  # LLM_FFN_RELU_SQR experts, shared expert and dense FFN
    attn_res: bool = False  # kimi-k3's attention residual streams
    every_row: bool = False  # no inp_out_ids: every row to the logits (dflash.cpp)
    nextn_tail: bool = False  # keeps the trunk's last hidden state (t_h_nextn) and drops rows after the trunk
    nextn_raw_state: bool = False  # ... t_h_nextn taken before the output norm
    # (the fields below replace inline `arch == "..."` tests of compute.py, kv.py and command.py; the
    # coordinator switches those call sites over once the moves land)
    mixer_name: str = None  # the trunk mixer its recurrent layers take where not the kind's generic one
    kda_conv_snapshots: bool = False  # the KDA conv windows keep 1 + n_rs_seq snapshots (kimi-k3.cpp)
    gating_fixed: bool = False  # the loader passes softmax gating whatever expert_gating_func says
    gdn_repeat_groups: bool = False  # q/k repeated to the value heads when ssm groups != heads
    ffn_dense_residual: bool = False  # a dense FFN beside the experts, added first (arctic.cpp)
    ssm_groups_optional: bool = False  # Mamba-1: no ssm.group_count key required
    kv_layers_from_start: object = None  # later layers reuse a cache: "key" (shared_kv_layers) or a count
    swa_skips_recurrent: bool = False  # llama_memory_hybrid_iswa: the recurrent layers do not slide
    assistant_target: bool = False  # the target whose KV a borrowed-KV draft reads (gemma4-assistant)
    mla_swa: bool = False  # the sliding-window layers have MLA widths of their own (dots3note.cpp)
    mla_k_rope_norm: bool = False  # MLA: an RMS norm of the shared rope key before its rope (dots3note.cpp)
    # MLA's output gate (attn_gate): None = sigmoid multiplied in place; "per_head" = one sigmoid per head
    # of a reshape, the output reshaped and made contiguous (bailingmoe3.cpp); "broadcast" = a head-wise
    # gate broadcast over reshapes, a new tensor (dots3note.cpp)
    mla_gate: str = None
    dsa_before_swa: bool = False  # llama_kv_cache_dsa_iswa: the DSA pair is built before the sliding-window cache
    indexer_no_rotate: bool = False  # the DSA indexer without the Hadamard rotation of its keys (hy-v4.cpp)
    shape_reader: str = ""  # "module:function" reading a bespoke graph's widths into the GraphShape
    split_compute_off: str = ""  # how far device-fit's split compute buffers were measured off llama.cpp's
    # at real widths (issue 32's verifier): its splits keep the unmeasured margin (devicefit/upstream.py)

    # --- MTP drafting (one level replaces layers' MTP_SKIP_ARCHES, compute's LLAMA_MTP_ARCHES and
    # MTP_GRAPH_ARCHES; see MTP_LEVELS) ---
    mtp: str = "none"
    mtp_rows: str = None  # where graph_mtp drops non-output rows: "after_attention", "before_head_norm"
    mtp_iswa: bool = False  # the MTP context attends through llama_kv_cache_iswa's inputs
    mtp_head_norm: tuple = None  # the NextN block's own head-norm tensors, else output_norm
    mtp_kept: tuple = ()  # NextN tensor suffixes the loader still creates without the MTP flags
    mtp_builder: str = ""  # "module:function" of a bespoke MTP graph
    mtp_fails: str = ""  # what llama.cpp's MTP branch throws (no drafting)
    mtp_single_block: str = ""  # graph_mtp's GGML_ASSERT text when it allows one NextN block only
    mtp_crop_before_ffn: bool = False  # graph_mtp crops to the output rows before the FFN, routes, then the
    # ungated shared expert, and ends in a LayerNorm shared head norm (nemotron-h-moe.cpp)
    mtp_compressed_assert: bool = False  # graph_mtp asserts the NextN block is uncompressed (deepseek4.cpp)

    # --- drafting (devicefit/draft.py) ---
    block_draft: bool = False  # a block draft (common_speculative DRAFT_DFLASH)
    layer_input: str = ""  # t_layer_inp as a target: "graph" (replayed), "unplanned", "hc_streams" (aborts)

    # --- quantize (quantize/rules.py, llama-quant.cpp) ---
    quant_keep: tuple = ()  # name fragments llama-quantize keeps in their type in this architecture
    quant_q8_0: tuple = ()  # name fragments forced to q8_0 (unless f32/bf16/f16) by the mixes
    quant_70b: int = None  # block count of LLM_TYPE_70B
    quant_70b_gqa: bool = False  # ... only with grouped-query attention (n_head != n_head_kv)
    quant_falcon: bool = False  # the mixes' falcon branches

    def __init__(self, name, **values):
        object.__setattr__(self, "name", name)
        for key, value in values.items():
            if key not in _FIELD_SET or key == "name":
                raise TypeError(f"ArchProfile has no field {key!r}")
            object.__setattr__(self, key, value)

    def __setattr__(self, key, value):
        raise AttributeError(f"ArchProfile is frozen (cannot set {key!r})")

    def __delattr__(self, key):
        raise AttributeError(f"ArchProfile is frozen (cannot delete {key!r})")

    def as_tuple(self):
        return tuple(getattr(self, field) for field in FIELDS)

    def __eq__(self, other):
        return type(other) is type(self) and other.as_tuple() == self.as_tuple()

    def __hash__(self):
        return hash(self.as_tuple())

    def __repr__(self):
        changed = [f"{field}={getattr(self, field)!r}" for field in FIELDS[1:] if field in self.__dict__]
        return f"ArchProfile({', '.join([repr(self.name)] + changed)})"

    @property
    def memory_kind(self):
        """"none", "unsupported", "recurrent", "hybrid" or "attention"."""
        if self.memory != "cache":
            return self.memory
        if self.recurrent_mixer or (self.recurrent and self.recurrent[2] != "none"):
            return "hybrid"
        return "recurrent" if self.recurrent else "attention"

    def mtp_at_least(self, level):
        """True when this architecture's MTP handling reaches `level` (one of MTP_LEVELS)."""
        return MTP_LEVELS.index(self.mtp) >= MTP_LEVELS.index(level)


FIELDS = tuple(ArchProfile.__annotations__)
_FIELD_SET = frozenset(FIELDS)
ArchProfile.FIELDS = FIELDS
