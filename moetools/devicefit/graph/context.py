"""llm_graph_context: the state one graph build carries, and its shared inputs.

Mirrors src/llama-graph.h / llama-graph.cpp's llm_graph_context (the ggml context, ubatch sizes, the
current layer's device) and the build_inp_* inputs (KQ masks, positions). _Slots stands in for a
placement's devices when one graph is shared by every placement.
"""

from moetools.devicefit import kv as kvmod
from moetools.devicefit.ggml.allocator import F16_BYTES, F32_BYTES, Graph, HOST, I64_BYTES


# --- the graph builders -----------------------------------------------------------------------

class _Build:
    """State shared by the layer builders: the graph, token counts, masks and index inputs."""

    def __init__(self, graph_shape, kvshape, caches, settings, tokens, streams, homes=None):
        self.g = Graph()
        self.shape = graph_shape
        self.kv = kvshape
        self.settings = settings
        self.fa = settings.flash_attn
        self.T = tokens
        self.streams = streams
        self.cells = {cache.kind: cache.cells for cache in caches}
        self.homes = homes  # Homes: which device holds each layer and expert matrix (None: one device)
        self._externals = {}
        self.move(0, -1)
        self.masks = {}
        self.k_idxs = {}
        self.v_idxs = {}
        self.pos = None
        self.k_rot = self.v_rot = None
        self.rot_swa = (None, None)  # the sliding-window cache's own k/v rotation inputs (gemma3n reads them)
        self.s_copy = None
        self.s_views = None  # (s_copy_main, s_copy_extra): build_rs
        self.msa = None  # minimax-m3's MSA inputs (_msa_inputs) when its sparse attention runs
        self.iswa = False  # the attention reads llama_kv_cache_iswa's inputs (even with no sliding-window layer)

    def _external(self, key, device, weight, nbytes=0):
        tensor = self._externals.get(key)
        if tensor is None:
            tensor = self._externals[key] = self.g.external(device, weight, nbytes)
        return tensor

    def move(self, dev, il):
        """Build layer il (-1: the input or output layer) on device `dev`: `weights` and `cache` are
        its weights and KV cache there (one external per device — only where they live matters — and
        per CPU layer, whose largest weight sizes the copy a GPU makes when it offloads the layer's ops)."""
        self.dev, self.il = dev, il
        if isinstance(self.homes, _Slots):
            self.weights, self.cache = self.homes.layer_externals(self, dev, il)
            return
        key = il if dev == HOST and self.homes is not None else None
        self.weights = self._external(("w", dev, key), dev, True, self._dense_copy_bytes())
        self.cache = self._external(("kv", dev), dev, False)

    def layer_cache(self, il):
        """The KV-cache external of layer il (on its device), as `move` would make it there."""
        if self.homes is None:
            return self.cache
        if isinstance(self.homes, _Slots):
            return self.homes.layer_externals(self, ("layer", il), il)[1]
        device = self.homes.layer_device[il]
        return self._external(("kv", device), device, False)

    def expert_weights(self, il, part):
        """An expert matrix of block il: on the device its -ot override (or its layer) puts it."""
        if self.homes is None:
            return self.weights
        if isinstance(self.homes, _Slots):
            return self.homes.expert_external(self, il, part)
        device = self.homes.expert_device.get(il, {}).get(part, self.dev)
        return self._external(("x", il, part), device, True, self.homes.expert_bytes.get(il, {}).get(part, 0))

    def _dense_copy_bytes(self):
        """What offloading one of this layer's CPU weights to a GPU copies: its largest dense tensor."""
        if self.homes is None or self.dev != HOST:
            return 0
        return self.homes.dense_max_bytes.get(self.il, 0)

    def f32(self, *dims):
        n = F32_BYTES
        for dim in dims:
            n *= dim
        return n

    def mm(self, rows, x, cols=None):
        return self.g.op(self.f32(rows, cols or self.T), self.weights, x)

    def norm(self, x, width, weight=True, pinned=True):
        """An RMS norm (times the layer's weight): pinned, it is build_norm's "norm", which graph_get_cb
        pins to the layer's device with full offload; a bare ggml_rms_norm (kimi-k3's residual scores)
        has no name and the scheduler places it."""
        cur = self.g.op(self.f32(width, self.T), x, inplace=(0,))
        pinned = pinned and weight and self.il >= 0
        if pinned and isinstance(self.homes, _Slots):
            self.homes.pins.append((cur, self.il))
        elif pinned and self.homes is not None and self.homes.full_offload:
            # llama_context::graph_get_cb pins a layer's "norm" to the layer's device when every layer is
            # offloaded (else the scheduler would run it on the previous layer's device)
            cur.device = self.dev
        if weight:
            cur = self.g.op(self.f32(width, self.T), cur, self.weights, inplace=(0,))
        return cur

    def unary(self, x, nbytes):
        return self.g.op(nbytes, x, inplace=(0,))


class _Slots:
    """The homes of a graph built once for every placement of a model (placement_buffers): each layer
    gets its own weight, KV-cache and expert-matrix externals and every pinnable norm is noted, so a
    placement only binds their devices and bytes (`bind`) instead of rebuilding 13,000 tensors. Sharing
    one external between a device's layers (the plain build) changes nothing the scheduler or the
    allocator sees: a node runs where its weight lives, so only host weights are ever copied, and those
    are per layer in both; tests/test_devicefit_compute_fast.py checks the figures equal."""

    def __init__(self, homes):
        self.real = homes  # the placement the build was asked for (its skipped layers)
        self.n_layer = len(homes.layer_device) - 1
        self.layer_device = [("layer", il) for il in range(self.n_layer)] + [("layer", -1)]
        self.full_offload = True
        self.input_weights = None
        self.dense = []  # (external, layer key): the layer's weights (-1: the output layer)
        self.caches = []  # (external, layer key)
        self.experts = []  # (external, block, part)
        self.pins = []  # (norm node, block)
        self.placed = []  # (tensor, layer key): put on its layer's device by the builder

    def layer_externals(self, b, dev, il):
        if not isinstance(dev, tuple):  # the input layer (HOST: its token embeddings stay on the CPU)
            weights = b._external(("w", dev, -1), dev, True)
            if dev == HOST:
                self.input_weights = weights
            return weights, b._external(("kv", dev), dev, False)
        key = dev[1]
        weights = b._externals.get(("w", key))
        if weights is None:
            weights = b._external(("w", key), None, True)
            cache = b._external(("kv", key), None, False)
            self.dense.append((weights, key))
            self.caches.append((cache, key))
        return weights, b._externals[("kv", key)]

    def expert_external(self, b, il, part):
        tensor = b._externals.get(("x", il, part))
        if tensor is None:
            tensor = b._external(("x", il, part), None, True)
            self.experts.append((tensor, il, part))
        return tensor

    def bind(self, homes):
        """Give every external and pinned norm the device (and copy bytes) `homes` puts it on."""
        where = lambda key: homes.layer_device[key]  # noqa: E731  (key -1: the output layer)
        for tensor, key in self.dense:
            tensor.device = where(key)
            tensor.nbytes = homes.dense_max_bytes.get(key, 0) if tensor.device == HOST else 0
        input_weights = self.input_weights
        if input_weights is not None:
            input_weights.nbytes = homes.dense_max_bytes.get(-1, 0)
        for tensor, key in self.caches:
            tensor.device = where(key)
        for tensor, il, part in self.experts:
            tensor.device = homes.expert_device.get(il, {}).get(part, homes.layer_device[il])
            tensor.nbytes = homes.expert_bytes.get(il, {}).get(part, 0)
        pin = homes.full_offload
        for node, il in self.pins:
            node.device = homes.layer_device[il] if pin else None
        for tensor, key in self.placed:
            tensor.device = homes.layer_device[key]


def build_attn_inp(b, kinds):
    g, T = b.g, b.T
    mask_type = F16_BYTES if b.fa else F32_BYTES
    v_trans = not b.fa
    v_max = max((hkv * width for hkv, width in zip(b.kv.head_count_kv, b.kv.v_width)), default=0)
    for kind in kinds:
        b.k_idxs[kind] = g.input(I64_BYTES * T)
        if not b.kv.mla:
            b.v_idxs[kind] = g.input(I64_BYTES * T * (v_max if v_trans else 1))
        b.masks[kind] = g.input(mask_type * b.cells[kind] * T)
    quantized = lambda name: kvmod.cache_type(name)[0] > 1  # noqa: E731
    head_k = max(b.kv.k_width[: b.kv.trunk_layers] or [0])
    if quantized(b.settings.ctk) and head_k and head_k % 64 == 0:
        nrot = 64
        while head_k % (nrot * 2) == 0:
            nrot *= 2
        b.k_rot = g.input(b.f32(nrot, nrot))
    head_v = max(b.kv.v_width[: b.kv.trunk_layers] or [0])
    if quantized(b.settings.ctv) and head_v and head_v % 64 == 0 and not b.kv.mla:
        b.v_rot = g.input(b.f32(64, 64))
    if "swa" in kinds:  # llama_kv_cache_iswa: each cache builds its own (of the same widths here)
        b.rot_swa = tuple(g.input(rot.nbytes) if rot is not None else None for rot in (b.k_rot, b.v_rot))
