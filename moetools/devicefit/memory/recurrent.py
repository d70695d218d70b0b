"""Recurrent state sizing (llama.cpp src/llama-memory-recurrent.cpp, llama-hparams.cpp n_embd_r/n_embd_s,
and the hybrids' loaders in src/models/): which layers of a gated-delta-net hybrid are recurrent, the
r/s state widths of RWKV, short-convolution, KDA, lightning, Mamba and gated-delta-net layers, and the
state rows per layer. Moved whole out of kv.py (issue 28).
"""

from moetools.arch.registry import profile
from moetools.errors import GGUFError
from moetools.gguf.constants import Keys
from moetools.gguf.header import LazyArray


def _gdn_layers(model, trunk, n_layer, default_interval=4):
    key = model.key("{arch}.attention.recurrent_layers")
    raw = model.metadata.get(key)
    if isinstance(raw, LazyArray):
        raw = raw.load()
    if isinstance(raw, list):
        if len(raw) != n_layer:
            raise GGUFError(model.path, f"recurrent-layer array has {len(raw)} entries for {n_layer} blocks", key=key)
        return [bool(value) for value in raw]
    interval = model.get_int("{arch}.full_attention_interval", default_interval)
    if interval == 0:
        raise GGUFError(model.path, "full_attention_interval 0 is not a layer period", key=model.key("{arch}.full_attention_interval"))
    return [il < trunk and (il + 1) % interval != 0 for il in range(n_layer)]


def _recurrent_state(model, kind, n_embd, head_count, k_width=0):
    """(n_embd_r, n_embd_s) of llama_hparams for a recurrent kind, from the keys its loader reads."""
    if kind == "rwkv":
        head_size = model.get_int("{arch}.wkv.head_size", required_for="the RWKV state")
        shift = model.get_int("{arch}.token_shift_count", 2)
        return shift * n_embd, n_embd * head_size
    if kind == "shortconv":
        l_cache = model.get_int("{arch}.shortconv.l_cache", required_for="the short-convolution state")
        return n_embd * max(l_cache - 1, 0), 0
    if kind == "kda":
        d_conv = model.get_int(Keys.SSM_CONV_KERNEL, required_for="the KDA conv state")
        kda = model.get_int(Keys.KDA_HEAD_DIM, required_for="the KDA recurrent state")
        d_inner = head_count[0] * kda
        return 3 * (d_conv - 1 if d_conv > 0 else 3) * d_inner, kda * kda * head_count[0]
    if kind == "lightning":
        return 0, k_width * k_width * head_count[0]
    what = "gated delta net" if kind == "gdn" else "Mamba"
    d_conv = model.get_int(Keys.SSM_CONV_KERNEL, required_for=f"the {what} conv state")
    d_inner = model.get_int(Keys.SSM_INNER_SIZE, required_for=f"the {what} state")
    d_state = model.get_int(Keys.SSM_STATE_SIZE, required_for=f"the {what} state")
    # Mamba-1 has no groups (the profile's ssm_groups_optional); the others' loaders require the key
    group_required = None if profile(model.architecture).ssm_groups_optional else f"the {what} conv state"
    n_group = model.get_int(Keys.SSM_GROUP_COUNT, 0, required_for=group_required)
    return (d_conv - 1 if d_conv > 0 else 0) * (d_inner + 2 * n_group * d_state), d_state * d_inner


def _state_rows(settings):
    """Rows of each recurrent layer's r and s state: one per sequence, times 1 + n_rs_seq snapshots
    (llama_memory_recurrent: mem_size * (1 + n_rs_seq); n_rs_seq is the draft's n_max with MTP drafting)."""
    return max(1, settings.n_seq) * (1 + settings.rs_seq)


def _recurrent_layers(shape):
    return [il for il in range(shape.trunk_layers) if shape.is_recurrent[il]]
