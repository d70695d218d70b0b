"""The fused split path: one placement's schedule and allocation over a graph in integer form.

The scheduler (scheduler.py, ggml/src/ggml-backend.cpp's ggml_backend_sched_split_graph) and the
compiled allocator (compiled.py, ggml/src/ggml-alloc.c) fused over arrays of node indices, so that a
placement search re-schedules one shared graph per placement without walking its tensors. It must give
the same Program as schedule() followed by Program(); tests/test_devicefit_split_property.py checks that.
Names no architecture.
"""

from itertools import accumulate, compress
from operator import ne

from moetools.devicefit.ggml.allocator import HOST
from moetools.devicefit.ggml.compiled import Affine, Program
from moetools.devicefit.ggml.scheduler import OFFLOAD_MIN_BATCH


def _reset(graph, slots, srcs, outputs):
    """Undo what schedule() and Program() did to a graph's tensors: sources (split inputs' copies),
    devices, the allocator's bookkeeping and the inputs pipeline parallelism marks as outputs."""
    for node, original in zip(graph.nodes, srcs):
        node.srcs = original
        node.device = None
        node.children = node.views = node.offset = 0
        node.allocated = False
    for leaf, output in zip(graph.leafs, outputs):
        if not leaf.external:
            leaf.device = None
        leaf.is_output = output
        leaf.children = leaf.views = leaf.offset = 0
        leaf.allocated = False


class _SplitGraph:
    """A placements' shared graph (_shared_entry) in integer form, scheduled and compiled per placement
    without touching its tensors: schedule() and Program() fused over lists indexed by tensor number,
    giving the Program they give (tests/test_devicefit_compute_fast.py compares every field). It reads
    only what _Slots.bind wrote (the externals' and pinned norms' devices, the weight copies' bytes).
    Where its shortcuts do not hold (a stray leaf, a builder-set device, a source after its consumer,
    an op pass 1 leaves without a device, no op with a device at all) `program` returns None and the
    caller walks the tensors as before."""

    def __init__(self, graph, slots):
        tensors = [*graph.leafs, *graph.nodes]
        number = {id(tensor): index for index, tensor in enumerate(tensors)}
        n_leafs, count = len(graph.leafs), len(tensors)
        bound = {}
        for tensor, _ in (*slots.dense, *slots.caches, *slots.pins, *slots.placed):
            bound[id(tensor)] = tensor
        for tensor, _, _ in slots.experts:
            bound[id(tensor)] = tensor
        if slots.input_weights is not None:
            bound[id(slots.input_weights)] = slots.input_weights
        srcs, view_src = [()] * n_leafs, [-1] * n_leafs
        consumers = [[] for _ in range(count)]
        first, ops, touches, late_views = [], [], [], []
        split_ops = []  # what pass 5 splits at and copies sources into: the ops and the cache writes (Graph.write)
        edge_src, edge_node, edge_pos = [], [], []
        # a node's sources must come before it (leafs, externals, earlier nodes): then every source has
        # its device when its consumer is split; a source that is neither (a stray leaf) or a device
        # set by a builder outside _Slots leaves the placement to the tensor walk
        usable = not any(leaf.device is not None and not leaf.external and id(leaf) not in bound for leaf in graph.leafs)
        for index in range(n_leafs, count):
            node = tensors[index]
            if node.device is not None and id(node) not in bound:
                usable = False
            sources = []
            weights = ()
            touched = node.is_input
            root = node.view_src
            for position, src in enumerate(node.srcs):
                found = number.get(id(src))
                if found is None:
                    usable = usable and src.external
                    found = number[id(src)] = len(tensors)
                    tensors.append(src)
                    consumers.append([])
                elif found >= index:
                    usable = False
                sources.append(found)
                consumers[found].append(index)
                if root is None or node.writes:
                    edge_src.append(found)
                    edge_node.append(index)
                    edge_pos.append(position)
                if src.external and src.weight:
                    weights += (found,)
                if src.is_input:
                    touched = True
            if root is None or node.writes:
                split_ops.append(index)
            if root is None:
                root = -1
                ops.append(index)
                if weights:
                    first.append((index, -1, weights[0], node.offloadable))
            else:
                found = number.get(id(root))
                if found is None:
                    usable = usable and root.external
                    found = number[id(root)] = len(tensors)
                    tensors.append(root)
                    consumers.append([])
                root = found
                if node.writes:  # schedule(): a cache write takes part in the expansions as an op
                    ops.append(index)
                if tensors[root].external:
                    first.append((index, root, -1, node.offloadable))
                elif weights:
                    first.append((index, -1, weights[0], node.offloadable))
                else:
                    late_views.append((index, root))  # pass 5's view branch gives it its root's device
            srcs.append(tuple(sources))
            view_src.append(root)
            if touched:
                touches.append(index)
        extra = len(tensors) - count
        srcs += [()] * extra
        view_src += [-1] * extra
        self.count = count = len(tensors)
        self.leafs = list(range(n_leafs))
        self.nodes = range(n_leafs, n_leafs + len(graph.nodes))
        self.srcs, self.view_src, self.first, self.ops, self.touches = srcs, view_src, first, ops, touches
        self.split_ops = split_ops
        self.late_views, self.consumers = late_views, consumers
        # the ops' sources, flat: which reads cross devices is two list lookups and a compare per read
        self.edge_src, self.edge_node, self.edge_pos = edge_src, edge_node, edge_pos
        self.nbytes = [tensor.nbytes for tensor in tensors]
        self.external = [tensor.external for tensor in tensors]
        self.weight = [tensor.external and tensor.weight for tensor in tensors]
        self.is_input = [tensor.is_input for tensor in tensors]
        self.is_output = [tensor.is_output for tensor in tensors]
        self.inplace = [tensor.inplace for tensor in tensors]
        self.device = [tensor.device if tensor.external else None for tensor in tensors]  # a reset graph's
        self.bound = [(number[key], tensor) for key, tensor in bound.items() if key in number]
        self.pinned = [number[id(node)] for node, _ in slots.pins if id(node) in number]
        self.placed = [number[id(tensor)] for tensor, _ in slots.placed if id(tensor) in number]
        self.externals = list(compress(range(count), self.external))
        self.usable = usable
        self.end_nodes = sorted(number[id(tensor)] for tensor in graph.boundaries if id(tensor) in number)
        head = graph.head_input
        self.head_node = number.get(id(head), -1) if head is not None and head.has_op else -1
        self._runs = {}
        # the allocator's counts over the built sources (a placement's copies adjust them)
        self.children = list(map(len, consumers))
        views = [0] * count
        views_of = {}
        for node, root in zip(self.nodes, view_src[n_leafs:]):
            if root >= 0:
                views[root] += 1
                views_of.setdefault(root, []).append(node)
        self.views, self.views_of = views, views_of
        if usable:
            self._walk_base()

    def _walk_base(self):
        """Program()'s walk over the graph as built (no copies): the one-device program, and the steps a
        placement's program takes for every node its copies do not touch. Tensor slots are numbered in
        allocation order; per node what the patch needs: its step's place, its in-place candidates and
        frees by source position."""
        count, n_leafs = self.count, len(self.leafs)
        srcs, view_src, external, is_input, is_output = self.srcs, self.view_src, self.external, self.is_input, self.is_output
        inplace = self.inplace
        children, views = list(self.children), list(self.views)
        allocated = [False] * count
        slot = [-1] * count
        slot_tensor = []
        prologue = []
        for leaf in self.leafs:
            if not (allocated[leaf] or external[leaf] or view_src[leaf] >= 0):
                allocated[leaf] = True
                slot[leaf] = len(slot_tensor)
                prologue.append(len(slot_tensor))
                slot_tensor.append(leaf)
        self.leaf_prologue = len(prologue)
        for node in self.touches:
            for tensor in (node, *srcs[node]) if is_input[node] else srcs[node]:
                if is_input[tensor] and not (allocated[tensor] or external[tensor] or view_src[tensor] >= 0):
                    allocated[tensor] = True
                    slot[tensor] = len(slot_tensor)
                    prologue.append(len(slot_tensor))
                    slot_tensor.append(tensor)
        steps, step_nodes = [], []
        add, stepped = steps.append, step_nodes.append
        cand_pos, freed_pos = {}, {}
        for node in self.nodes:
            sources = srcs[node]
            if view_src[node] < 0 and not allocated[node] and not external[node]:
                allocated[node] = True
                target = slot[node] = len(slot_tensor)
                slot_tensor.append(node)
                candidates = ()
                for position in inplace[node]:
                    parent = sources[position]
                    if (allocated[parent] and view_src[parent] < 0 and not is_output[parent] and children[parent] == 1
                            and views[parent] == 0):
                        candidates += (slot[parent],)
                        cand_pos[node] = cand_pos.get(node, ()) + (position,)
            else:
                target = -1
            freed = ()
            position = -1
            for parent in sources:
                position += 1
                children[parent] -= 1
                if children[parent] == 0 and views[parent] == 0:
                    victim = view_src[parent]
                    if victim >= 0:
                        views[victim] -= 1
                        if views[victim] or children[victim]:
                            continue
                    else:
                        victim = parent
                    if allocated[victim] and not is_output[victim]:
                        allocated[victim] = False
                        freed += (slot[victim],)
                        freed_pos.setdefault(node, {})[position] = slot[victim]
            if target >= 0:
                add((target, candidates, freed))
                stepped(node)
            elif freed:
                add((-1, (), freed))
                stepped(node)
        has_step = [False] * (count - n_leafs)
        for node in step_nodes:
            has_step[node - n_leafs] = True
        steps_before = list(accumulate(has_step, initial=0))  # by node position: the steps of the nodes before it
        cuts = []
        for node in self.end_nodes:  # Program()'s cuts: the steps up to each layer's end
            after = steps_before[node - n_leafs + 1]
            if not cuts or cuts[-1] != after:
                cuts.append(after)
        self.slot, self.slot_tensor, self.prologue, self.steps, self.cuts = slot, slot_tensor, prologue, steps, cuts
        self.steps_before, self.has_step, self.cand_pos, self.freed_pos = steps_before, has_step, cand_pos, freed_pos
        nbytes = self.nbytes
        self.fixed = [nbytes[tensor] if type(nbytes[tensor]) is not Affine else 0 for tensor in slot_tensor]
        self.sized = [(index, nbytes[tensor]) for index, tensor in enumerate(slot_tensor) if type(nbytes[tensor]) is Affine]

    def one_device_program(self, memo):
        """Program(graph.leafs, graph.nodes, boundaries=...) of the graph as built, one buffer (None: not usable)."""
        if not self.usable:
            return None
        return Program.compiled([0] * len(self.slot_tensor), list(self.prologue), self.steps, list(self.fixed),
                                list(self.cuts), memo, sized=list(self.sized))

    def headless_program(self, memo):
        """one_device_program of the graph built without the output layer: the built graph's walk up to
        the head's input node. The walk before it is the same when the head reads nothing from before
        that node but weights and caches (that node's own readers matter only after it): checked, else
        None (also: not usable, no head marked, a graph input first touched by the head)."""
        head, n_leafs = self.head_node, len(self.leafs)
        if not self.usable or head < n_leafs:
            return None
        n_nodes = len(self.nodes)
        srcs, view_src, external = self.srcs, self.view_src, self.external
        for node in range(head + 1, n_leafs + n_nodes):
            root = view_src[node]
            if any(src < head and not external[src] for src in srcs[node]) or 0 <= root < head and not external[root]:
                return None
        slot_tensor = self.slot_tensor
        if any(slot_tensor[index] > head for index in self.prologue):
            return None
        end = self.steps_before[head - n_leafs + 1]
        return Program.compiled([0] * len(slot_tensor), list(self.prologue), self.steps[:end], list(self.fixed),
                                [cut for cut in self.cuts if cut <= end], memo, sized=list(self.sized))

    def runs(self, full_offload):
        """The expansion passes' unit: maximal runs of ops pass 1 leaves unassigned, each with the
        assigned op before and after it (-1: none), with the pinned norms set (full offload) or not."""
        runs = self._runs.get(full_offload)
        if runs is None:
            assigned = [False] * self.count
            for node, _, _, _ in self.first:
                assigned[node] = True
            for index in (*self.placed, *(self.pinned if full_offload else ())):
                assigned[index] = True
            runs, members, before = [], [], -1
            for node in self.ops:
                if assigned[node]:
                    if members:
                        runs.append((before, node, members))
                        members = []
                    before = node
                else:
                    members.append(node)
            if members:
                runs.append((before, -1, members))
            runs = self._runs[full_offload] = runs
        return runs

    def program(self, backends, offload_to, tokens, n_copies, positions, full_offload):
        """The Program schedule() and Program() give for the placement the graph is bound to, up to
        the slots' names (None: this form does not apply, the caller walks the tensors). Copies are
        few: the walk's steps are the built graph's (_walk_base) except at the nodes that read a
        tensor a copy replaces or one that tensor is a view of or viewed by, which are walked again."""
        if not self.usable:
            return None
        dev = list(self.device)
        nbytes = self.nbytes
        bound_bytes = {}
        for index, tensor in self.bound:
            dev[index] = tensor.device
            if tensor.external:
                bound_bytes[index] = tensor.nbytes
        for index in self.leafs:
            if dev[index] is None:
                dev[index] = HOST
        for index in self.externals:
            if dev[index] is None:
                return None
        # pass 1: the view of a pre-allocated tensor runs where it lives, an op with a weight where the
        # weight does (or on the offload GPU, for a host weight at a batch it offloads)
        offloads = offload_to is not None and tokens >= OFFLOAD_MIN_BATCH
        for node, root, src, offloadable in self.first:
            if dev[node] is not None:
                continue
            if root >= 0:
                dev[node] = dev[root]
            else:
                home = dev[src]
                dev[node] = offload_to if home == HOST and offloads and offloadable else home
            if dev[node] is None:
                return None
        for index in (*self.placed, *(self.pinned if full_offload else ())):
            if dev[index] is None:
                return None
        # pass 2's four expansions, run by run: a run between two assigned ops takes the one before
        # unless that is the host (forward, skipping the host), else the one after unless the host
        # (backward), else the one before, else the one after (both with the host)
        for before, after, members in self.runs(full_offload):
            fill = dev[before] if before >= 0 else None
            if fill is None or fill == HOST:
                last = dev[after] if after >= 0 else None
                if last is not None and last != HOST:
                    fill = last
                elif fill is None:
                    fill = last
            if fill is None:
                return None  # pass 3 (no op has a device): the tensor walk
            for node in members:
                dev[node] = fill
        first_backend = backends[0]
        for node, root in self.late_views:
            if dev[node] is None:
                dev[node] = dev[root] if dev[root] is not None else first_backend
        # passes 4 and 5: every source has its device now (sources come first), so a split starts at
        # an op on another device than the op before, or at one reading a weight from elsewhere once
        # the split has inputs; an op copies each source from another device into its split
        edge_src, edge_node = self.edge_src, self.edge_node
        crossing = list(compress(range(len(edge_src)), map(ne, map(dev.__getitem__, edge_src),
                                                               map(dev.__getitem__, edge_node))))
        ops = self.split_ops
        op_devices = list(map(dev.__getitem__, ops))
        starts = {ops[index] for index in compress(range(len(ops)), map(ne, op_devices, [None, *op_devices[:-1]]))}
        reads = {}  # op -> [(source position, source)] read across devices
        edge_pos = self.edge_pos
        for index in crossing:
            reads.setdefault(edge_node[index], []).append((edge_pos[index], edge_src[index]))
        weight, view_src, count = self.weight, self.view_src, self.count
        slot = self.slot
        n_slots = len(self.slot_tensor)
        children = list(self.children)
        new_dev, new_bytes, new_src = [], [], []  # copies, dependencies and pinned inputs, numbered from count

        def new(device, size, source=-1):
            new_dev.append(device)
            new_bytes.append(size)
            new_src.append(source)
            children.append(0)
            return count + len(new_dev) - 1

        copies, inserted, replaced, extra_leafs = {}, {}, {}, []
        copy_slots = {}
        pending, split_start = [], None
        current, n_inputs = None, 0
        for node in sorted(starts | reads.keys()):
            device = dev[node]
            crossed = reads.get(node, ())
            if node in starts or (n_inputs and any(weight[src] for _, src in crossed)):
                if pending:
                    inserted[split_start] = pending
                pending, split_start = [], node
                current, n_inputs = device, 0
            if not crossed:
                continue
            sources = replaced[node] = list(self.srcs[node])
            for position, src in crossed:
                copy = copies.get((src, current))
                if copy is None:
                    size = (bound_bytes.get(src, nbytes[src]) or
                            (bound_bytes.get(view_src[src], nbytes[view_src[src]]) if view_src[src] >= 0 else 0))
                    copy = copies[(src, current)] = new(current, size)
                    copy_slots[copy] = n_slots + len(copy_slots)
                    if n_copies > 1:
                        extra_leafs.append(copy)
                        for _ in range(n_copies - 1):
                            pinned = new(current, size)
                            copy_slots[pinned] = n_slots + len(copy_slots)
                            extra_leafs.append(pinned)
                    dep = new(dev[src], 0, src)
                    children[src] += 1
                    pending.append((dep, copy))
                    n_inputs += 1
                children[src] -= 1
                children[copy] += 1
                sources[position] = copy
        if pending:
            inserted[split_start] = pending
        return self._patch(dev, bound_bytes, children, copies, inserted, replaced, extra_leafs, copy_slots, new_dev,
                           new_bytes, new_src, n_copies, positions)

    def _patch(self, dev, bound_bytes, children, copies, inserted, replaced, extra_leafs, copy_slots, new_dev,
               new_bytes, new_src, n_copies, positions):
        """The placement's program from the built graph's walk: its steps, with each split's copies
        (and their dependency nodes) walked in before the split's first node and every node near a
        copy walked again; graph inputs in their pipeline order."""
        count, n_leafs = self.count, len(self.leafs)
        srcs, view_src, external, is_output = self.srcs, self.view_src, self.external, self.is_output
        inplace, slot = self.inplace, self.slot
        nbytes = self.nbytes
        outputs = set()  # tensors pipeline parallelism makes outputs (never freed, never taken over)
        leafs = self.leafs
        prologue = self.prologue
        if n_copies > 1:
            outputs.update(extra_leafs)
            graph_inputs = []
            for leaf in leafs:
                if self.is_input[leaf]:
                    outputs.add(leaf)
                    graph_inputs.append(leaf)
                    for _ in range(n_copies - 1):
                        new_dev.append(dev[leaf])
                        new_bytes.append(nbytes[leaf])
                        new_src.append(-1)
                        children.append(0)
                        pinned = count + len(new_dev) - 1
                        copy_slots[pinned] = len(self.slot_tensor) + len(copy_slots)
                        graph_inputs.append(pinned)
            seen = set()
            prologue = []
            for tensor in (*graph_inputs, *extra_leafs, *leafs):
                if tensor >= count:
                    prologue.append(copy_slots[tensor])
                elif not (tensor in seen or external[tensor] or view_src[tensor] >= 0):
                    seen.add(tensor)
                    prologue.append(slot[tensor])
            prologue += [index for index in self.prologue[self.leaf_prologue:]]  # inputs first read by a node
        # the tensors whose walk can differ from the built graph's: each source a copy replaces (its
        # consumers changed), the inputs made outputs, the roots of those that are views and every view
        # of those roots (their releases free the root); the nodes reading one of them are walked again
        live = set()
        for node, sources in replaced.items():
            for old, now in zip(srcs[node], sources):
                if old != now:
                    live.add(old)
        live |= outputs
        live.update([view_src[tensor] for tensor in live if tensor < count and view_src[tensor] >= 0])
        for root in list(live):
            live.update(self.views_of.get(root, ()))
        affected = set()
        consumers = self.consumers
        for tensor in live:
            if tensor < count:
                affected.update(consumers[tensor])
        views = list(self.views)
        freed_live = set()

        def release(parent, freed):
            left = children[parent] = children[parent] - 1
            if left == 0 and (parent >= count or views[parent] == 0):
                victim = view_src[parent] if parent < count else -1
                if victim >= 0:
                    views[victim] -= 1
                    if views[victim] or children[victim]:
                        return freed
                else:
                    victim = parent
                if victim in freed_live or victim in outputs:
                    return freed
                if victim >= count:
                    freed_live.add(victim)
                    return freed + (copy_slots[victim],)
                if not external[victim] and view_src[victim] < 0 and not is_output[victim]:
                    freed_live.add(victim)
                    return freed + (slot[victim],)
            return freed

        base_steps, steps_before, has_step = self.steps, self.steps_before, self.has_step
        cand_pos, freed_pos = self.cand_pos, self.freed_pos
        steps = []
        cursor = 0
        for node in sorted(affected | inserted.keys()):
            before = steps_before[node - n_leafs]
            if before > cursor:
                steps += base_steps[cursor:before]
                cursor = before
            for dep, copy in inserted.get(node, ()):
                freed = release(new_src[dep - count], ())
                if freed:
                    steps.append((-1, (), freed))
                if n_copies == 1:
                    steps.append((copy_slots[copy], (), ()))
            if node not in affected:
                continue
            if has_step[node - n_leafs]:
                cursor = before + 1
            sources = replaced.get(node) or srcs[node]
            target = slot[node] if view_src[node] < 0 and not external[node] else -1
            candidates = ()
            if target >= 0:
                kept = cand_pos.get(node, ())
                for position in inplace[node]:
                    parent = sources[position]
                    if parent >= count:
                        if (parent not in freed_live and parent not in outputs and children[parent] == 1):
                            candidates += (copy_slots[parent],)
                    elif parent in live:
                        if (not external[parent] and view_src[parent] < 0 and parent not in freed_live
                                and parent not in outputs and not is_output[parent] and children[parent] == 1
                                and views[parent] == 0):
                            candidates += (slot[parent],)
                    elif position in kept:
                        candidates += (slot[parent],)
            freed = ()
            by_position = freed_pos.get(node)
            for position, parent in enumerate(sources):
                if parent >= count or parent in live:
                    freed = release(parent, freed)
                elif by_position is not None and position in by_position:
                    freed += (by_position[position],)
            if target >= 0:
                steps.append((target, candidates, freed))
            elif freed:
                steps.append((-1, (), freed))
        steps += base_steps[cursor:]
        slot_tensor = self.slot_tensor
        buffers = [positions[device] for device in map(dev.__getitem__, slot_tensor)]
        fixed = list(self.fixed)
        sized = list(self.sized)
        for tensor, index in copy_slots.items():  # (in slot order: dict order is creation order)
            device, size = new_dev[tensor - count], new_bytes[tensor - count]
            buffers.append(positions[device])
            if type(size) is Affine:
                sized.append((index, size))
                fixed.append(0)
            else:
                fixed.append(size)
        return Program.compiled(buffers, prologue, steps, fixed, [], memo=False, sized=sized)
