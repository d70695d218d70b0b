"""ggml-alloc, the reference replay: a pure-Python walk of a graph's tensors in ggml-alloc's order.

Mirrors ggml/src/ggml-alloc.c (ggml_gallocr_alloc_graph / ggml_dyn_tallocr_alloc / _free_tensor):
best-fit free blocks with merging, parents freed after their last child, in-place reuse for the ops
ggml_op_can_inplace lists when the parent is the node's last consumer. Read, not copied: the code is
moetools' own. This is the reference the compiled form (compiled.py) and the fused split path
(split.py) are checked against; a change to ggml-alloc.c is made here first (see README.md).
Names no architecture.
"""


F32_BYTES, F16_BYTES, I32_BYTES, I64_BYTES = 4, 2, 4, 8
CPU_ALIGNMENT = 32  # ggml-cpu TENSOR_ALIGNMENT
HOST = -1  # the CPU's device key (placement.CPU): llama.cpp's last, lowest-priority backend
CUDA_ALIGNMENT = 128  # ggml-cuda buffer type alignment
_FREE_END = 1 << 62  # the allocator's one chunk is unbounded


# --- ggml-alloc replay ------------------------------------------------------------------------

class _Tensor:
    """One graph tensor: bytes, sources, what it views, and the allocator's bookkeeping."""

    __slots__ = ("nbytes", "srcs", "view_src", "has_op", "is_input", "is_output", "inplace", "external",
                 "children", "views", "allocated", "offset", "visited", "host", "device", "weight", "dep",
                 "offloadable", "writes")

    def __init__(self, nbytes=0, srcs=(), *, view_src=None, has_op=True, is_input=False, external=False, inplace=()):
        self.nbytes = nbytes
        self.srcs = srcs
        self.view_src = view_src
        self.has_op = has_op
        self.is_input = is_input
        self.is_output = False
        self.inplace = inplace  # indices of sources whose memory this op may take over
        self.external = external
        self.children = 0
        self.views = 0
        self.allocated = False
        self.offset = 0
        self.visited = False
        self.host = False
        self.device = None  # the backend the scheduler runs (or keeps) it on; None: not yet assigned
        self.weight = False  # an external that is a model weight (its device decides the op's backend)
        self.dep = False  # ggml-backend's GGML_OP_NONE dependency node (keeps a split input alive)
        self.offloadable = True  # GET_ROWS has batch size 0: never offloaded to a GPU
        self.writes = False  # an op whose result is a view of its destination (SET_ROWS into a cache)


class _Blocks:
    """ggml_dyn_tallocr with one chunk: free blocks sorted by offset, the last one unbounded."""

    def __init__(self, alignment):
        self.alignment = alignment
        self.free = [[0, _FREE_END]]
        self.max_size = 0

    def _pad(self, size):
        return -(-size // self.alignment) * self.alignment

    def alloc(self, size):
        return self.take(self._pad(size))

    def release(self, offset, size):
        self.give(offset, self._pad(size))

    def take(self, size):
        """alloc of a size already padded to the alignment."""
        free = self.free
        last = len(free) - 1
        best, best_size = last, None
        for index in range(last):  # best fit among all but the last block (which takes what none fits)
            block_size = free[index][1]
            if block_size >= size and (best_size is None or block_size <= best_size):
                best, best_size = index, block_size
        block = free[best]
        offset = block[0]
        block[0] += size
        block[1] -= size
        if block[1] == 0:
            del free[best]
        if offset + size > self.max_size:
            self.max_size = offset + size
        return offset

    def give(self, offset, size):
        """release of a size already padded to the alignment."""
        _give(self.free, offset, size)


class Graph:
    """A ggml graph as far as ggml-alloc sees it (sizes, sources, views, inputs, outputs)."""

    def __init__(self):
        self.nodes = []
        self.leafs = []
        self.boundaries = []  # tensors that end a layer: the compiled replay's memo segments
        # the tensor the output layer starts from, where everything before it is the graph built without
        # the output layer (None: a builder that does not say so)
        self.head_input = None

    def external(self, device=0, weight=False, nbytes=0):
        """A weight or a KV-cache tensor: lives in its own buffer (on `device`)."""
        tensor = _Tensor(nbytes, has_op=False, external=True)
        tensor.device = device
        tensor.weight = weight
        return tensor

    def input(self, nbytes):
        return _Tensor(nbytes, has_op=False, is_input=True)

    def op(self, nbytes, *srcs, inplace=()):
        return _Tensor(nbytes, srcs, inplace=inplace)

    def view(self, src, *others):
        """reshape / view / permute / transpose: no memory of its own."""
        root = src.view_src or src
        return _Tensor(0, (src, *others), view_src=root)

    def write(self, dst, *srcs):
        """An op storing into `dst` (SET_ROWS / CPY into a cache): no memory of its own, as a view is
        to ggml-alloc, but an op to the scheduler, which copies its sources (the row indices, an input
        on the CPU) into the split's backend — with pipeline parallelism, n_copies pinned copies."""
        tensor = self.view(dst, *srcs)
        tensor.writes = True
        return tensor

    def expand(self, tensor):
        """ggml_build_forward_expand: post-order walk, sources left to right."""
        stack = [(tensor, False)]
        while stack:
            node, done = stack.pop()
            if done:
                (self.nodes if node.has_op else self.leafs).append(node)
                continue
            if node.visited:
                continue
            node.visited = True
            stack.append((node, True))
            for src in reversed(node.srcs):
                if not src.visited:
                    stack.append((src, False))
        return tensor

    def _allocate(self, blocks, node):
        if node.allocated or node.external or node.view_src is not None:
            return
        node.allocated = True
        for index in node.inplace:
            parent = node.srcs[index]
            if (parent.allocated and parent.view_src is None and not parent.is_output
                    and parent.children == 1 and parent.views == 0 and parent.nbytes >= node.nbytes):
                node.offset = parent.offset
                parent.allocated = False
                if parent.nbytes > node.nbytes:
                    padded = blocks._pad(node.nbytes)
                    extra = blocks._pad(parent.nbytes) - padded
                    if extra:
                        blocks.release(parent.offset + padded, extra)
                return
        node.offset = blocks.alloc(node.nbytes)

    def _free(self, blocks, node):
        if node.is_output:
            return
        blocks.release(node.offset, node.nbytes)
        node.allocated = False

    def peak(self, alignment=CPU_ALIGNMENT):
        """The buffer ggml_gallocr_reserve asks for: the allocator's high-water mark in bytes."""
        blocks = _Blocks(alignment)
        self.replay(self.leafs, self.nodes, lambda tensor: blocks)
        return blocks.max_size

    def replay(self, leafs, nodes, blocks_of):
        """ggml_gallocr_alloc_graph_impl: leafs, then the graph inputs, then every node in order, each
        parent freed after its last consumer. blocks_of(tensor): the _Blocks of the tensor's buffer."""
        allocate = lambda tensor: self._allocate(blocks_of(tensor), tensor)  # noqa: E731
        free = lambda tensor: self._free(blocks_of(tensor), tensor)  # noqa: E731
        for leaf in leafs:
            allocate(leaf)
        for node in nodes:
            if node.view_src is not None and not node.dep:  # a dependency node is not a view to ggml-alloc
                node.view_src.views += 1
            if node.is_input:
                allocate(node)
            for src in node.srcs:
                src.children += 1
                if src.is_input:
                    allocate(src)
        for node in nodes:
            for parent in node.srcs:
                if not (parent.allocated or parent.external or parent.view_src is not None or parent.has_op):
                    allocate(parent)  # only leafs can still be unallocated here
            allocate(node)
            for parent in node.srcs:
                parent.children -= 1
                if parent.children == 0 and parent.views == 0:
                    if parent.view_src is not None:
                        root = parent.view_src
                        root.views -= 1
                        if root.views == 0 and root.children == 0 and root.allocated:
                            free(root)
                    elif parent.allocated:
                        free(parent)


def _give(free, offset, size):
    """_Blocks.give on a free list (the compiled replay's copy, without the method call). A scan, not a
    bisection: a zero-byte tensor's release leaves a zero-size block, so blocks can touch."""
    for index, block in enumerate(free):
        if block[0] + block[1] == offset:
            block[1] += size
            if index + 1 < len(free) and block[0] + block[1] == free[index + 1][0]:
                block[1] += free[index + 1][1]
                del free[index + 1]
            return
        if offset + size == block[0]:
            block[0] = offset
            block[1] += size
            if index > 0 and free[index - 1][0] + free[index - 1][1] == block[0]:
                free[index - 1][1] += block[1]
                del free[index]
            return
    position = 0
    while position < len(free) and free[position][0] < offset:
        position += 1
    free.insert(position, [offset, size])
