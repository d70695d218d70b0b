"""ggml-backend's scheduler: which backend runs each node, and the copies between backends.

Mirrors ggml/src/ggml-backend.cpp (ggml_backend_sched_split_graph's five passes: weights' backends,
expansion up and down, the remaining nodes, then the splits and their input copies; pipeline-parallel
copies) and ggml-cuda's op offload rule (ggml/src/ggml-cuda/ggml-cuda.cu, ggml_backend_cuda_device_offload_op).
Works on allocator.Graph tensors; `peaks` runs the reference allocator per backend. Names no architecture.
"""

from moetools.devicefit.ggml.allocator import HOST, _Blocks, _Tensor


# --- ggml-backend's scheduler: which backend runs each node, and the copies between them ---------

OFFLOAD_MIN_BATCH = 32  # ggml-cuda's op_offload_min_batch_size (default): smaller batches stay on the CPU


def _device_of(tensor):
    if tensor.device is None and tensor.view_src is not None:
        return tensor.view_src.device
    return tensor.device


def _expand(ops, skip_host):
    """One expansion pass of pass 2: unassigned nodes take the backend of the previous assigned node
    (`skip_host`: the CPU does not expand, so GPU ranges grow first)."""
    current = None
    for node in ops:
        if node.device is not None:
            current = None if (skip_host and node.device == HOST) else node.device
        elif current is not None:
            node.device = current


def schedule(graph, backends, offload_to, tokens, n_copies=1):
    """Assign every node a backend and insert the split inputs' copies, as ggml_backend_sched_split_graph
    and the graph copy it hands to ggml-alloc do. backends: device keys in the scheduler's priority order
    (the offload devices, then HOST); n_copies: the scheduler's copies (4 with pipeline parallelism: every
    graph input and split input then exists 4 times, as inputs and outputs that are never freed).
    Returns the graph copy's (leafs, nodes) in order."""
    nodes = graph.nodes
    for leaf in graph.leafs:
        if leaf.device is None:
            leaf.device = HOST  # graph inputs live on the last (CPU) backend
    ops = []
    offloads = offload_to is not None and tokens >= OFFLOAD_MIN_BATCH
    # pass 1 of ggml_backend_sched_split_graph: a view of a pre-allocated tensor (a KV cache) runs where
    # it lives; an op with a weight runs where the weight lives — unless the weight is in host memory
    # and a GPU backend offloads the op (ggml-cuda: a batch of 32 tokens and more)
    for node in nodes:
        root = node.view_src
        if root is None or node.writes:  # a cache write (SET_ROWS) is an op to the expansions, not a view
            ops.append(node)
        if node.device is not None:
            continue
        if root is not None:
            if root.external:
                node.device = root.device
                continue
        for src in node.srcs:
            if src.external and src.weight:
                node.device = offload_to if src.device == HOST and offloads and node.offloadable else src.device
                break
    _expand(ops, True)
    _expand(reversed(ops), True)
    _expand(ops, False)
    _expand(reversed(ops), False)
    for node in ops:  # pass 3: what is still unassigned goes where most of its sources are
        if node.device is None:
            counts = [sum(1 for src in node.srcs if _device_of(src) == key) for key in backends]
            node.device = backends[counts.index(max(counts))]
    # pass 4 (views where their source is, the rest's unassigned sources where their first consumer is)
    # fused into pass 5 (splits, and a copy in the split's backend of every source that lives
    # elsewhere): pass 4 at a node changes only the node and its sources, which precede it
    copies, result, pending, extra_leafs = {}, [], [], []
    current, n_inputs = None, 0
    split_nodes = []
    first_backend = backends[0]
    for node in nodes:
        root = node.view_src
        if root is not None and not node.writes:
            if node.device is None:
                node.device = root.device
            for src in node.srcs:
                if src.device is None:
                    src.device = src.view_src.device if src.view_src is not None else node.device
            if node.device is None:
                node.device = first_backend
            split_nodes.append(node)
            continue
        device = node.device
        for src in node.srcs:
            if src.device is None:
                src.device = src.view_src.device if src.view_src is not None else device
        if device is None:
            device = node.device = first_backend
        new_split = current is None or node.device != current
        if not new_split and n_inputs:
            for src in node.srcs:
                if src.external and src.weight and src.device != current:
                    new_split = True
                    break
        if new_split:
            result.extend(pending)
            result.extend(split_nodes)
            pending.clear()
            split_nodes = []
            current, n_inputs = node.device, 0
        srcs = node.srcs
        for index, src in enumerate(node.srcs):
            home = src.device
            if home is None and src.view_src is not None:
                home = src.view_src.device  # _device_of, inlined: this loop runs for every source
            if home == current:
                continue
            if type(srcs) is tuple:
                srcs = list(srcs)
            key = (id(src), current)
            copy = copies.get(key)
            if copy is None:
                size = src.nbytes or (src.view_src.nbytes if src.view_src is not None else 0)
                copy = copies[key] = _Tensor(size, ())
                copy.device = current
                if n_copies > 1:
                    copy.is_input = copy.is_output = True
                    extra_leafs.append(copy)
                    extra_leafs.extend(_pinned(size, current) for _ in range(n_copies - 1))
                dep = _Tensor(0, (src,), view_src=src.view_src or src)
                dep.dep = True
                dep.device = _device_of(src)
                pending.extend((dep, copy))  # allocated at the start of the split
                n_inputs += 1
            srcs[index] = copy
        if type(srcs) is list:
            node.srcs = tuple(srcs)
        split_nodes.append(node)
    result.extend(pending)
    result.extend(split_nodes)
    leafs = list(graph.leafs)
    if n_copies > 1:
        inputs = [leaf for leaf in leafs if leaf.is_input]
        for leaf in inputs:
            leaf.is_output = True
        graph_inputs = [copy for leaf in inputs for copy in [leaf] + [_pinned(leaf.nbytes, leaf.device)
                                                                      for _ in range(n_copies - 1)]]
        leafs = graph_inputs + extra_leafs + leafs
    return leafs, result


def _pinned(nbytes, device):
    """One of the pipeline copies of an input: allocated first, never freed."""
    tensor = _Tensor(nbytes, has_op=False, is_input=True)
    tensor.is_output = True
    tensor.device = device
    return tensor


def peaks(graph, leafs, nodes, alignments):
    """ggml_gallocr_reserve over a scheduled graph: the high-water mark of each backend's buffer."""
    blocks = {key: _Blocks(alignment) for key, alignment in alignments.items()}
    graph.replay(leafs, nodes, lambda tensor: blocks[tensor.device])
    return {key: block.max_size for key, block in blocks.items()}
