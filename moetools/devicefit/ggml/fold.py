"""Folding of in-place relabelling chains out of a freshly built graph.

An op that only re-labels its parent's memory in place (ggml-alloc always hands it the parent's block,
ggml_op_can_inplace) changes neither the allocator's layout (ggml/src/ggml-alloc.c) nor the scheduler's
assignment (ggml/src/ggml-backend.cpp); dropping it makes the replays cheaper. Names no architecture.
"""

from collections import Counter
from itertools import chain

from moetools.devicefit.ggml.compiled import Affine


def _same_size(a, b):
    if a is b:
        return True
    if type(a) is int and type(b) is int:
        return a == b
    return type(a) is Affine and type(b) is Affine and a.const == b.const and a.terms == b.terms


def fold_inplace_chains(graph, fixed=()):
    """Drop from a freshly built graph each op that only re-labels its parent's memory: a node whose one
    source is the node just before it, which it may overwrite in place (inplace=(0,)), of the same size,
    that parent read by nothing else and viewed by nothing (an activation, a scale, a soft-max applied
    in place); its consumers read the parent instead. Neither the scheduler nor ggml-alloc can tell:
    - ggml-alloc: the node always takes its parent's memory (the parent's only consumer, same bytes,
      not an output, not viewed), changes no free block, and is freed where the parent now is;
    - the scheduler: neither has a weight or a pinned device (`fixed`: pinned norms, tensors on their
      layer's device), so both are assigned by the expansion passes, and being adjacent they get the
      same backend in every pass (pass 3's majority of the node's one source is the parent's backend):
      the node opens no split and needs no copy, and its consumers' copies are of the same bytes.
    Returns the graph (its nodes and boundaries rewritten)."""
    nodes = graph.nodes
    consumers = Counter(map(id, chain.from_iterable([node.srcs for node in nodes])))
    viewed = {id(node.view_src) for node in nodes if node.view_src is not None}
    fixed = {id(tensor) for tensor in fixed}
    alias = {}  # id(dropped node) -> the kept parent that stands for it
    kept = []
    previous = None  # the node before, as the folded graph has it
    for node in nodes:
        srcs = node.srcs
        if (previous is not None and node.inplace == (0,) and len(srcs) == 1 and node.view_src is None
                and alias.get(id(srcs[0]), srcs[0]) is previous and node.device is None and not node.is_output
                and not node.is_input and not node.host and node.offloadable and not node.dep and id(node) not in fixed
                and consumers.get(id(previous)) == 1 and id(previous) not in viewed
                and _same_size(node.nbytes, previous.nbytes) and _foldable_parent(previous, fixed)):
            alias[id(node)] = previous
            consumers[id(previous)] = consumers.get(id(node), 0)
            if id(node) in viewed:
                viewed.add(id(previous))
            continue
        kept.append(node)
        previous = node
    if alias:
        for node in kept:
            srcs = node.srcs
            for src in srcs:
                if id(src) in alias:
                    node.srcs = tuple(alias.get(id(other), other) for other in srcs)
                    break
            root = node.view_src
            if root is not None and id(root) in alias:
                node.view_src = alias[id(root)]
        graph.nodes = kept
        graph.boundaries = [alias.get(id(tensor), tensor) for tensor in graph.boundaries]
    return graph


def _foldable_parent(node, fixed):
    """Whether an op can take a folded child: not a view, no weight, no device of its own (the
    scheduler assigns it by expansion only), not an input, output or pinned tensor."""
    return (node.view_src is None and node.has_op and node.device is None and not node.is_output and not node.is_input
            and not node.host and node.offloadable and not node.dep and id(node) not in fixed
            and not any(src.external and src.weight for src in node.srcs))
