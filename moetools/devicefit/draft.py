"""A draft model for speculative decoding beside the target (`--draft MODEL`, llama.cpp's `-md`).

llama.cpp loads the draft with the target's parameters except what common_base_params_to_speculative
(common/speculative.cpp) replaces: its own `-ngld` (default all layers), `-devd` (default the target's
devices; named devices in the order given, `none` = the CPU only; one device means split mode layer),
no tensor overrides, the draft cache types `-ctkd`/`-ctvd` (default f16, not the target's
`-ctk`/`-ctv`), and one output row per sequence (n_outputs_max = -np, n_outputs_max_per_seq = 1).
Context (common_speculative_init_result sets the draft's n_ctx to the target context's: there is no
draft context size flag at this commit), batch, ubatch, -np, the cache's unification and the `-ts`
split (by position in the draft's own device list) are the target's; n_rs_seq is 0. Threads (-td,
-tbd) change no memory. llama-server (tools/server/server-context.cpp load_model) derives the draft
the same way (common_base_params_to_speculative, common_speculative_init_from_params) as
llama-speculative-simple, where it was measured; the server differs for the TARGET: its
n_outputs_max is min(n_batch, np * (1 + n_max)) (server_output_limits), not n_batch. So its layers go to the devices by the same split,
its KV lives with its layers, and its own compute buffers sit beside the target's on each device.

It refuses a draft whose vocabulary is not the target's, as common_speculative_are_compatible does:
another tokenizer model, more than 128 tokens apart, a token text differing from id 5 on, or a
different BOS/EOS token when it is added.
"""

from moetools.devicefit.record import REQUIRED, Record
from moetools.errors import GGUFError, UsageError
from moetools.gguf.header import decode_encoded_strings, skip_encoded_strings

VOCAB_MAX_SIZE_DIFFERENCE = 128  # SPEC_VOCAB_MAX_SIZE_DIFFERENCE
VOCAB_CHECK_START_TOKEN_ID = 5  # SPEC_VOCAB_CHECK_START_TOKEN_ID


class Vocab(Record):
    """What llama.cpp compares of a vocabulary, from the header (None: the key is absent)."""

    FIELDS = (
        ("kind", ""),  # tokenizer.ggml.model: llama (SPM), gpt2 (BPE), bert (WPM), t5 (UGM), ...
        ("size", 0),
        ("add_bos", None),
        ("bos", None),
        ("add_eos", None),
        ("eos", None),
        ("tokens", None),  # the tokenizer.ggml.tokens array (a LazyArray or a list), decoded on demand
    )


class _Encoded:
    """A token array as the header stores it (each text's u64 length and bytes), read but not decoded:
    two vocabularies are compared on these bytes first, and decoded only when they differ (to name the
    first token that does)."""

    __slots__ = ("data", "count")

    def __init__(self, data, count):
        self.data = data
        self.count = count

    def __len__(self):
        return self.count


def vocab_of(model, decode=False):
    """The Vocab of an open moetools.gguf.Model (decode: read the token texts now, while it is open —
    their stored bytes, decoded only if a comparison needs the texts)."""
    tokens = model.metadata.get("tokenizer.ggml.tokens")
    if decode and tokens is not None:
        tokens = _Encoded(tokens.encoded(), len(tokens)) if hasattr(tokens, "encoded") else _texts(tokens)
    return Vocab(kind=str(model.metadata.get("tokenizer.ggml.model", "")), size=len(tokens) if tokens is not None else 0,
                 add_bos=model.metadata.get("tokenizer.ggml.add_bos_token"),
                 bos=model.metadata.get("tokenizer.ggml.bos_token_id"),
                 add_eos=model.metadata.get("tokenizer.ggml.add_eos_token"),
                 eos=model.metadata.get("tokenizer.ggml.eos_token_id"), tokens=tokens)


def _texts(tokens):
    if tokens is None:
        return []
    if isinstance(tokens, _Encoded):
        texts = decode_encoded_strings(tokens.data, tokens.count)
        if texts is None:
            raise GGUFError("tokenizer.ggml.tokens", "string array changed since its header was read")
        return texts
    return tokens.load() if hasattr(tokens, "load") else list(tokens)


def _same_encoded(ours, theirs):
    """Whether two stored token arrays hold the same texts from VOCAB_CHECK_START_TOKEN_ID to the shorter's
    end: equal length-prefixed bytes are equal texts (False: compare the decoded texts)."""
    count = min(ours.count, theirs.count)
    if count <= VOCAB_CHECK_START_TOKEN_ID:
        return True
    spans = []
    for tokens in (ours, theirs):
        start = skip_encoded_strings(tokens.data, 0, VOCAB_CHECK_START_TOKEN_ID)
        if start is None:
            return False
        end = len(tokens.data) if tokens.count == count else skip_encoded_strings(
            tokens.data, start, count - VOCAB_CHECK_START_TOKEN_ID)
        if end is None:
            return False
        spans.append(tokens.data[start:end])
    return spans[0] == spans[1]


def incompatibility(target, draft):
    """Why llama.cpp would refuse `draft` (Vocab) as a draft for `target` (Vocab), or "" when it would not.

    A BOS/EOS flag or id absent from one header is llama.cpp's per-tokenizer default, not compared."""
    if target.kind != draft.kind:
        return "another tokenizer model"
    if abs(target.size - draft.size) > VOCAB_MAX_SIZE_DIFFERENCE:
        return f"sizes more than {VOCAB_MAX_SIZE_DIFFERENCE} tokens apart"
    for flag, token, name in (("add_bos", "bos", "BOS"), ("add_eos", "eos", "EOS")):
        ours, theirs = getattr(target, flag), getattr(draft, flag)
        if ours is not None and theirs is not None and bool(ours) != bool(theirs):
            return f"one adds a {name} token, the other does not"
        added = ours if ours is not None else theirs
        ours_id, theirs_id = getattr(target, token), getattr(draft, token)
        if added and ours_id is not None and theirs_id is not None and ours_id != theirs_id:
            return f"{name} token {ours_id} vs {theirs_id}"
    if isinstance(target.tokens, _Encoded) and isinstance(draft.tokens, _Encoded) and _same_encoded(target.tokens, draft.tokens):
        return ""
    ours, theirs = _texts(target.tokens), _texts(draft.tokens)
    for index in range(VOCAB_CHECK_START_TOKEN_ID, min(len(ours), len(theirs))):
        if ours[index] != theirs[index]:
            return f"token {index} differs ({ours[index]!r} vs {theirs[index]!r})"
    return ""


def check_compatible(target_path, target, draft_path, draft):
    """Raise UsageError (exit 2, one line naming both vocabularies) when llama.cpp refuses the draft."""
    reason = incompatibility(target, draft)
    if reason:
        raise UsageError(f"--draft {draft_path}: its vocabulary ({draft.size} tokens, {draft.kind or 'no tokenizer model'}) "
                         f"is not the target's ({target.size} tokens, {target.kind or 'no tokenizer model'}) of {target_path}: "
                         f"{reason}; llama.cpp refuses such a draft model for speculative decoding")


class Draft(Record):
    """A draft model to plan beside the target: its ModelFacts, path, KV settings (the draft cache
    types with the target's context settings) and -ngld (None: all layers).

    spec_type "draft-mtp": the target's own NextN/MTP blocks draft (`--spec-type draft-mtp`): facts
    and path are the target's (loaded with load_mtp), and llama.cpp creates an MTP context on the
    target model (common_speculative_init_result): a KV cache of the NextN blocks only at the draft
    cache types, the target's context size and -np, one output row per sequence, and its own compute
    buffers for graph_mtp, on the target's devices (-ngld/-devd do not apply: no second model)."""

    FIELDS = (
        ("facts", REQUIRED),
        ("path", REQUIRED),
        ("kv", REQUIRED),
        ("ngl", None),
        ("devices", None),  # -devd: indices into the offload devices in the order named ((): none); None: the target's
        ("spec_type", "draft-simple"),  # or "draft-mtp"
        ("n_max", 3),  # --spec-draft-n-max (llama.cpp's default 3)
        ("host_bytes", 0),  # host memory beyond its buffers (a DFlash draft's: output-buffer rows, plan_block_draft)
        ("target_layers", ()),  # a DFlash draft's: the target blocks whose inputs it reads
    )


def llama_device_names(devices):
    """llama.cpp's device names (--list-devices, what -devd takes) of device-fit's offload devices:
    CUDA0.. as their buffers are named; an RPC server's device is RPC<n> numbered across every --rpc
    server in order (its buffers are RPC0[host:port], per server)."""
    names, n_rpc = [], 0
    for device in devices:
        if device.kind == "rpc":
            names.append(f"RPC{n_rpc}")
            n_rpc += 1
        else:
            names.append(device.name)
    return names


def draft_devices(text, devices):
    """The offload-device indices `-devd TEXT` names (a comma list of llama.cpp device names — or
    device-fit's buffer names RPC0[host:port] — or `none`: an empty tuple), as parse_device_list reads
    it. Raises UsageError on a name not among the devices."""
    items = [item.strip() for item in text.split(",")]
    if items == ["none"]:
        return ()
    names = llama_device_names(devices)
    indices = []
    for item in items:
        if item in names:
            indices.append(names.index(item))
        elif item in [device.name for device in devices]:
            indices.append([device.name for device in devices].index(item))
        else:
            known = ", ".join(names) if names else "none: give --vram/--gpu/--rpc"
            raise UsageError(f"--device-draft: no device {item!r} (llama.cpp refuses it as an invalid device; "
                             f"the offload devices are: {known})")
    return tuple(indices)


DFLASH_BLOCK_SIZE = 16  # common_speculative_impl_draft_dflash's block size without dflash.block_size

# Per-architecture facts come from moetools.arch (read lazily, on the first draft that asks):
#   block_draft: llama.cpp's block drafts (common_speculative DRAFT_DFLASH / DRAFT_DSPARK);
#   layer_input "graph": target loaders whose graph records each block's input, n_embd wide, as
#     res->t_layer_inp[il] (src/models/*.cpp at 0c1e57098: llama, qwen3, qwen3moe, qwen35, ...), the rows a
#     DFlash draft's target_layers read back (llama_context::extract_layer_inputs); any other target aborts
#     building its graph once they are asked for (llama-graph.cpp: GGML_ASSERT "layer input tensor is null";
#     measured on qwen2moe);
#   layer_input "unplanned": targets that keep them through graph ops device-fit does not replay
#     (deepseek4.cpp: build_hc_mean of the hyper-connection streams, built only when asked): planned
#     without them, with a warning;
#   layer_input "hc_streams": targets recording the hc x n_embd hyper-connection streams (qwen4exp).


def _arch(name):
    from moetools.arch.registry import profile

    return profile(name)


def _layer_input_targets():
    """Targets whose layer inputs a DFlash draft can read: replayed ones, then unplanned ones."""
    from moetools.arch.registry import names_with

    return names_with("layer_input", "graph") + names_with("layer_input", "unplanned")


def __getattr__(name):
    """Old module-level names, for one release (upstream.py reads BLOCK_DRAFT_ARCHES)."""
    from moetools.arch.registry import names_with

    legacy = {"BLOCK_DRAFT_ARCHES": ("block_draft", True), "LAYER_INPUT_ARCHES": ("layer_input", "graph"),
              "LAYER_INPUT_UNPLANNED": ("layer_input", "unplanned")}
    if name in legacy:
        return names_with(*legacy[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def target_layers_of(model, draft_path):
    """The target blocks a DFlash draft reads (`{arch}.target_layers`; dflash.cpp refuses a draft without
    them), as a sorted tuple."""
    raw = model.metadata.get(model.key("{arch}.target_layers"))
    if hasattr(raw, "load"):
        raw = raw.load()
    if not isinstance(raw, list) or not raw or not all(isinstance(v, int) and not isinstance(v, bool) for v in raw):
        raise UsageError(f"--draft {draft_path}: a DFlash draft without target_layers (llama.cpp refuses it: "
                         "'DFlash model requires target_layers in GGUF metadata')")
    return tuple(sorted(set(raw)))


def check_layer_inputs(draft_path, layers, target_facts):
    """Raise UsageError (exit 2) where llama.cpp cannot hand a DFlash draft the target's layer inputs it
    reads: a target whose graph records none (GGML_ASSERT "layer input tensor is null"), qwen4exp
    (it records the hyper-connection streams, hc x n_embd wide: extract_layer_inputs' GGML_ASSERT
    row_floats == n_embd, measured), or a layer past the target's blocks (set_embeddings_layer_inp's
    assert, or a block that records none)."""
    arch = target_facts.architecture
    trunk = target_facts.shape.trunk_layers
    layer_input = _arch(arch).layer_input
    if layer_input == "hc_streams":
        raise UsageError(f"--draft {draft_path}: llama.cpp 0c1e57098 aborts handing a {arch} target's layer inputs "
                         "to a DFlash draft (they are its hc x n_embd hyper-connection streams: extract_layer_inputs' "
                         "GGML_ASSERT row_floats == model.hparams.n_embd)")
    if layer_input not in ("graph", "unplanned"):
        raise UsageError(f"--draft {draft_path}: a DFlash draft reads the target's layer inputs, which llama.cpp "
                         f"0c1e57098's {arch} graph does not record (it aborts: 'layer input tensor is null'); "
                         f"targets that record them: {', '.join(_layer_input_targets())}")
    bad = [il for il in layers if not 0 <= il < trunk + (layer_input == "unplanned")]
    if bad:
        raise UsageError(f"--draft {draft_path}: target_layers {bad} are not blocks of the target (0-{trunk - 1}): "
                         "llama.cpp aborts asking for their inputs")


def plan_block_draft(draft, model, target_facts, settings):
    """What a DFlash draft changes, while its file is open (common_speculative_impl_draft_dflash): check
    its target_layers and keep those layers' inputs in the target's graph (settings.layer_inputs, where
    device-fit replays them), give a hybrid target its n_max state snapshots (settings.rs_seq), count
    the output-buffer rows in draft.host_bytes, and give the draft's graph its backend top-k sampling
    rows (-np x (n_max + 1), n_max clamped to the block size - 1; --spec-draft-backend-sampling is on by
    default), as llama.cpp reserves it again once drafting starts."""
    if not _arch(draft.facts.architecture).block_draft:
        return
    layers = draft.target_layers = target_layers_of(model, draft.path)
    check_layer_inputs(draft.path, layers, target_facts)
    if _arch(target_facts.architecture).layer_input == "graph":
        settings.layer_inputs = layers
    if _arch(target_facts.architecture).rs_rollback:
        # common_params_speculative::need_n_rs_seq (draft-dflash too): the target's recurrent state keeps
        # n_max snapshots per sequence (measured: qwen35moe's RS buffer x4 at n_max 3)
        settings.rs_seq = draft.n_max
    block_size = model.get_int("{arch}.block_size", DFLASH_BLOCK_SIZE) or DFLASH_BLOCK_SIZE
    draft.kv.sampled_rows = max(1, draft.kv.n_seq) * (min(draft.n_max, block_size - 1) + 1)
    draft.host_bytes = (layer_input_rows_bytes(target_facts, settings, layers)
                        + sampling_rows_bytes(draft.facts, draft.kv.sampled_rows))


def layer_input_rows_bytes(target_facts, settings, layers):
    """The target context's output buffer rows for a DFlash draft (llama_context::output_reserve: n_embd x
    n_batch f32 per kept layer input, in host memory, beside the logits)."""
    return len(layers) * target_facts.graph.n_embd * settings.batch * 4


def sampling_rows_bytes(draft_facts, rows):
    """The DFlash draft context's output buffer beyond its logits (llama_context::output_reserve over its
    n_outputs_max = `rows`): the h_nextn rows (n_embd each; llama_set_embeddings_nextn, masked) and the
    backend sampler's logits and probabilities (2 x n_vocab f32) and sampled and candidate tokens
    (1 + n_vocab i32) per row, in host memory."""
    n_vocab, n_embd = draft_facts.graph.n_vocab, draft_facts.graph.n_embd
    return rows * (n_embd + 2 * n_vocab + 1 + n_vocab) * 4


def block_draft_warning(draft_path, facts, target_facts):
    """What a DFlash draft's plan still leaves out (None when nothing): a deepseek4 target keeps the
    inputs of the draft's target_layers through graph ops device-fit does not replay (build_hc_mean of
    its hyper-connection streams). The rest is planned: the target's kept layer inputs
    (settings.layer_inputs) and their output-buffer rows, the draft's backend top-k sampling
    (plan_block_draft)."""
    if not _arch(facts.architecture).block_draft or _arch(target_facts.architecture).layer_input != "unplanned":
        return None
    return (f"--draft {draft_path} is a DFlash draft: the {target_facts.architecture} target's inputs of the layers "
            "it reads (target_layers: build_hc_mean of its streams, kept as graph outputs) are not in its planned "
            "compute buffers; keep --margin headroom")


# From moetools.arch: `mtp` "llama" / "graph" (llama.cpp builds an MTP graph; device-fit replays it) and
# `mtp_fails`: what a loader's MTP branch throws at this commit (glm5-next.cpp build_arch_graph), when
# llama.cpp's MTP context then fails ("failed to create MTP context") and no drafting happens.


def check_mtp(model_path, facts):
    """Raise UsageError (exit 2) when --spec-type draft-mtp cannot be planned for this model: it has no
    NextN/MTP blocks llama.cpp loads for drafting, llama.cpp itself fails or aborts on its MTP graph (with
    what it says), or its MTP graph is not one device-fit replays."""
    from moetools.arch.registry import mtp_names
    from moetools.devicefit.compute import mtp_block_missing

    arch = _arch(facts.architecture)
    declared = facts.shape.block_count > facts.shape.trunk_layers  # nextn_predict_layers in the header
    if not facts.mtp_blocks and not (declared and not arch.mtp_at_least("llama")):
        raise UsageError(f"--spec-type draft-mtp: {model_path} ({facts.architecture}) has no NextN/MTP blocks "
                         "(nextn_predict_layers) that llama.cpp loads for MTP drafting")
    if not arch.mtp_at_least("llama"):
        raise UsageError(f"--spec-type draft-mtp: {model_path}: llama.cpp does not support MTP drafting for "
                         f"{facts.architecture} (its loader builds no MTP graph; llama.cpp 0c1e57098 drafts with "
                         f"NextN blocks for {', '.join(mtp_names('llama'))})")
    if arch.mtp_fails:
        raise UsageError(f"--spec-type draft-mtp: {model_path}: llama.cpp 0c1e57098 cannot create the MTP context of "
                         f"{facts.architecture}: its MTP graph throws \"{arch.mtp_fails}\" "
                         "(failed to create MTP context)")
    reason = _mtp_assert(facts)
    if reason:
        raise UsageError(f"--spec-type draft-mtp: {model_path}: llama.cpp 0c1e57098 aborts building the MTP graph of "
                         f"{facts.architecture}: {reason}")
    if not facts.graph.mtp_layers:
        if arch.mtp_at_least("graph"):
            reason = "its NextN blocks lack an attention block with nextn.eh_proj"
        else:
            reason = (f"llama.cpp runs its MTP head, but the MTP context of {facts.architecture} (its graph_mtp "
                      f"and memory) is not modelled; sized: {', '.join(mtp_names('graph'))}")
        raise UsageError(f"--spec-type draft-mtp: {model_path}: {reason}")
    missing = mtp_block_missing(facts.architecture, facts.graph.mtp_layers)
    if missing:
        raise UsageError(f"--spec-type draft-mtp: {model_path}: its NextN block {missing[0]} lacks {missing[1]}, "
                         f"which {facts.architecture}'s MTP head needs (llama.cpp {missing[2]})")


# graph_mtp's GGML_ASSERTs on the layout (src/models/glm-dsa.cpp, deepseek4.cpp, ...): moetools.arch's
# `mtp_single_block` (the assert's text where one NextN block only is allowed) and `mtp_compressed_assert`


def _mtp_assert(facts):
    """The GGML_ASSERT a NextN layout trips in llama.cpp's graph_mtp ("" when none)."""
    shape = facts.shape
    n_nextn = shape.block_count - shape.trunk_layers
    arch = _arch(facts.architecture)
    if arch.mtp_single_block and n_nextn > 1:
        return (f"{n_nextn} NextN blocks: GGML_ASSERT(hparams.n_layer_nextn == 1 && "
                f"\"{arch.mtp_single_block}\") failed")
    if arch.mtp_compressed_assert and shape.compress_ratios and n_nextn > 0:
        ratio = shape.compress_ratios[shape.trunk_layers]
        if ratio:
            return (f"its NextN block {shape.trunk_layers} has compress ratio {ratio} (the MTP context has no "
                    "compressed cache): GGML_ASSERT(inp_dsv4 || ratio == 0) failed")
    return ""


def check_draft_cache(draft):
    """Refuse draft cache types llama.cpp refuses for the draft (or MTP) context, as for the target's
    (kv.check_settings): the context is not created and llama-server stops."""
    from moetools.devicefit import kv as kvmod

    try:
        kvmod.check_settings(draft.facts.shape, draft.kv)
    except UsageError as err:
        text = str(err).replace("--ctk", "--draft-ctk").replace("--ctv", "--draft-ctv")
        raise UsageError(f"the draft's cache ({draft.spec_type}): {text}") from None


def draft_kv(settings, ctk, ctv):
    """The draft's KVSettings: the target's context settings with the draft cache types (and no
    recurrent-state snapshots: common_speculative_init_result sets the draft context's n_rs_seq to 0)."""
    return settings.replace(ctk=ctk, ctv=ctv, rs_seq=0, layer_inputs=())
