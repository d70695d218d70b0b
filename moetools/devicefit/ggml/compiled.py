"""The compiled replay: ggml-alloc's events recorded once per graph structure, their sizes per context.

The same allocator as allocator.py (ggml/src/ggml-alloc.c), run once over a graph built with symbolic
cell counts (Affine sizes); a Program then replays the recorded events for any concrete context with
integers only. A comparison that depends on the cell count records a breakpoint (_Regime), so a program
serves only the contexts on its side of it. Pinned against the reference replay by
tests/test_devicefit_compute_fast.py. Names no architecture.
"""

import operator
from itertools import compress

from moetools.devicefit.ggml.allocator import _Blocks, _FREE_END, _give


# --- the compiled replay: the allocator's events once, their sizes per context ----------------

class NotAffine(Exception):
    """A builder used a context-dependent size in a way the compiled replay cannot follow (a
    comparison, min/max, a product of two): the graph is then built again for each context."""


class Affine:
    """A byte count that depends on the KV cells: const + sum(coef x cells[kind]). The graph is built
    once with these in place of the cell counts (which are the only sizes a context changes at a
    fixed ubatch) and every tensor's bytes are evaluated per context. A comparison (min(n_kv, top_k)
    of the DSA indexer) is decided at the cells of the context the build was asked for and recorded
    (_Regime): the program serves only contexts on the same side of every such breakpoint, the others
    get their own. Anything else (a product of two, int(), float()) raises NotAffine, and the
    graph falls back to the per-context build instead of being answered wrongly."""

    __slots__ = ("const", "terms")

    def __init__(self, const=0, terms=()):
        self.const = const
        self.terms = terms  # ((kind, coef), ...) sorted by kind, no zero coefficients

    @classmethod
    def cells(cls, kind):
        return cls(0, ((kind, 1),))

    @staticmethod
    def _split(value):
        if isinstance(value, Affine):
            return value.const, dict(value.terms)
        if isinstance(value, int) and not isinstance(value, bool):
            return value, {}
        raise NotAffine(f"cell-dependent size combined with {type(value).__name__}")

    def _combine(self, other, sign):
        const, terms = self._split(other)
        merged = dict(self.terms)
        for kind, coef in terms.items():
            merged[kind] = merged.get(kind, 0) + sign * coef
        return Affine.of(self.const + sign * const, merged)

    @staticmethod
    def of(const, terms):
        terms = tuple(sorted((kind, coef) for kind, coef in terms.items() if coef))
        return Affine(const, terms) if terms else const

    def __add__(self, other):
        return self._combine(other, 1)

    __radd__ = __add__

    def __sub__(self, other):
        return self._combine(other, -1)

    def __rsub__(self, other):
        return (-self)._combine(other, 1)

    def __neg__(self):
        return Affine(-self.const, tuple((kind, -coef) for kind, coef in self.terms))

    def __mul__(self, other):
        if not isinstance(other, int) or isinstance(other, bool):
            raise NotAffine("a product of two cell-dependent sizes")
        return Affine.of(self.const * other, {kind: coef * other for kind, coef in self.terms})

    __rmul__ = __mul__

    def __floordiv__(self, other):
        if not isinstance(other, int) or other <= 0 or self.const % other or any(coef % other for _, coef in self.terms):
            raise NotAffine("a cell-dependent size divided inexactly")
        return Affine.of(self.const // other, {kind: coef // other for kind, coef in self.terms})

    def __bool__(self):
        if self.const >= 0 and all(coef > 0 for _, coef in self.terms):
            return True  # cells are never 0
        return self._compare(0, operator.ne)

    def _compare(self, other, test):
        regime = _REGIME
        if regime is None:
            raise NotAffine("a comparison of a cell-dependent size outside a symbolic build")
        return regime.decide(self - other, test)

    def _refuse(self, *_):
        raise NotAffine("a cell-dependent size used as a number")

    __lt__ = lambda self, other: self._compare(other, operator.lt)  # noqa: E731
    __le__ = lambda self, other: self._compare(other, operator.le)  # noqa: E731
    __gt__ = lambda self, other: self._compare(other, operator.gt)  # noqa: E731
    __ge__ = lambda self, other: self._compare(other, operator.ge)  # noqa: E731
    __eq__ = lambda self, other: self._compare(other, operator.eq)  # noqa: E731
    __ne__ = lambda self, other: self._compare(other, operator.ne)  # noqa: E731
    __index__ = __int__ = __float__ = _refuse
    __hash__ = None

    def at(self, cells):
        return self.const + sum(coef * cells[kind] for kind, coef in self.terms)


class _Regime:
    """The cell counts a symbolic build decides its comparisons at, and the decisions: (difference,
    test, outcome) meaning test(difference at the cells, 0) was `outcome`."""

    def __init__(self, cells):
        self.cells = cells
        self.conditions = {}

    def decide(self, difference, test):
        value = difference.at(self.cells) if isinstance(difference, Affine) else difference
        outcome = test(value, 0)
        if isinstance(difference, Affine):
            self.conditions[(difference.const, difference.terms, test)] = outcome
        return outcome


def _holds(conditions, cells):
    """Whether a context's cells fall on the same side of every breakpoint a program was built at."""
    return all(test(const + sum(coef * cells[kind] for kind, coef in terms), 0) == outcome
               for (const, terms, test), outcome in conditions)


_REGIME = None  # the _Regime of the symbolic build under way (device-fit builds one graph at a time)
_REGIMES_MAX = 8  # programs kept per structure (one per side of each breakpoint in use)


class _CellsOnly:
    """A stand-in KV cache for the symbolic build: the builders read only its kind and cells."""

    __slots__ = ("kind", "cells")

    def __init__(self, kind):
        self.kind = kind
        self.cells = Affine.cells(kind)


_MEMO_SEGMENTS = 20000  # replayed layers a Program remembers (per alignment set)
# A program whose third context (the first that can take layers from the memo) still replays more than
# this share of its layers stops memoising: measured, a split placement's graph and a DSA graph hit
# almost never (the memo's keys then cost more than the replays they would save)
MEMO_GIVE_UP = 0.75


def _relative(where, bases):
    """An offset as (region, offset in it): regions start at 0 and at each fence's end (sorted)."""
    region = len(bases) - 1
    while bases[region] > where:
        region -= 1
    return region, where - bases[region]


def _relative_blocks(free, bases):
    """Free blocks in region terms; the last, unbounded block's size (which moves with it) as None."""
    last = len(free) - 1
    return tuple((*_relative(block[0], bases), None if index == last else block[1]) for index, block in enumerate(free))


class Program:
    """Graph.replay compiled: what the allocator does, in order, with the sizes left open.

    Which tensor is allocated when, which parents a node may take over in place and which tensors are
    freed after each node depend only on the graph's structure (children and views are counted, not
    sized); the sizes enter only through the allocator's best fit and the in-place test `parent bytes
    >= node bytes`. So the structure is walked once and each context replays only the size-dependent
    part (`peaks`), with the same _Blocks, in the same order, as Graph.replay — tested equal to it."""

    def __init__(self, leafs, nodes, positions=None, boundaries=(), memo=True):
        # The walk uses the tensors' own bookkeeping slots, as Graph.replay does, so the graph must be
        # fresh (or _reset): `allocated` is the static part of ggml-alloc's flag, `offset` the tensor's
        # index in the program plus one, given when the tensor first gets memory. positions: {device:
        # buffer index} (None: one buffer). The claims are inlined (this walk runs once per placement).
        # memo: remember replayed layers across contexts (peaks); False where they never start from an
        # equivalent state (measured: every split placement's and DSA graph's second context replays all).
        tensors = []
        keep = tensors.append
        prologue = []
        mark = prologue.append
        stray = False
        for leaf in leafs:
            if not (leaf.allocated or leaf.external or leaf.view_src is not None):
                leaf.allocated = True
                keep(leaf)
                leaf.offset = len(tensors)
                mark(leaf.offset - 1)
        for node in nodes:
            root = node.view_src
            if root is not None and not node.dep:
                root.views += 1
            if node.is_input and not (node.allocated or node.external or root is not None):
                node.allocated = True
                keep(node)
                node.offset = len(tensors)
                mark(node.offset - 1)
            for src in node.srcs:
                src.children += 1
                if src.is_input:
                    if not (src.allocated or src.external or src.view_src is not None):
                        src.allocated = True
                        keep(src)
                        src.offset = len(tensors)
                        mark(src.offset - 1)
                elif not (src.has_op or src.allocated or src.external or src.view_src is not None):
                    stray = True  # a leaf outside `leafs`: the walk below claims it at its first use
        steps = []  # (tensor to allocate or -1, in-place candidates, tensors freed after it)
        add = steps.append
        ends = {id(tensor) for tensor in boundaries}
        cuts = []  # step indices where a segment (a layer) ends
        for node in nodes:
            srcs = node.srcs
            for parent in srcs if stray else ():
                if not (parent.allocated or parent.external or parent.view_src is not None or parent.has_op):
                    parent.allocated = True  # a leaf first used here
                    keep(parent)
                    parent.offset = len(tensors)
                    add((parent.offset - 1, (), ()))
            target = -1
            if node.view_src is None and not node.allocated and not node.external:
                node.allocated = True
                keep(node)
                target = len(tensors) - 1
                node.offset = target + 1
                candidates = ()
                for index in node.inplace:
                    parent = srcs[index]
                    if (parent.allocated and parent.view_src is None and not parent.is_output and parent.children == 1
                            and parent.views == 0):
                        candidates += (parent.offset - 1,)
            freed = ()
            for parent in srcs:
                parent.children -= 1
                if parent.children == 0 and parent.views == 0:
                    victim = parent.view_src
                    if victim is not None:
                        victim.views -= 1
                        if victim.views or victim.children:
                            continue
                    else:
                        victim = parent
                    if victim.allocated and not victim.is_output:
                        victim.allocated = False
                        freed += (victim.offset - 1,)
            if target >= 0:
                add((target, candidates, freed))
            elif freed:
                add((-1, (), freed))
            if id(node) in ends and (not cuts or cuts[-1] != len(steps)):
                cuts.append(len(steps))
        self._setup([0] * len(tensors) if positions is None else [positions[tensor.device] for tensor in tensors],
                    prologue, steps, [tensor.nbytes for tensor in tensors], cuts, memo)

    @classmethod
    def compiled(cls, buffers, prologue, steps, nbytes, cuts, memo=True, sized=None):
        """A Program from its parts (buffers, prologue, steps, cuts as __init__ makes them; nbytes:
        each program tensor's bytes, ints or Affine — or, with `sized` given, 0 where `sized` has the
        Affine): _SplitGraph's compile."""
        program = cls.__new__(cls)
        program._setup(buffers, prologue, steps, nbytes, cuts, memo, sized)
        return program

    def _setup(self, buffers, prologue, steps, nbytes, cuts, memo, sized=None):
        self.buffers = buffers
        self.prologue = prologue
        self.steps = steps
        self.fixed = nbytes
        if sized is None:
            sized = [(index, size) for index, size in enumerate(nbytes) if type(size) is Affine]
            for index, _ in sized:
                self.fixed[index] = 0
        self.sized = sized
        self._padded = {}
        self._memo = {} if memo else None
        self._cuts = cuts
        self._segments_of = None
        self.replayed = 0
        self.calls = 0

    @property
    def segments(self):
        if self._segments_of is None:
            self._segments_of = self._segments(self._cuts)
        return self._segments_of

    def _segments(self, cuts):
        """The steps cut at the layer ends, each with what its replay depends on besides the free
        blocks: (start, end, context-sized tensors it names, outside tensors it names, its own tensors
        a later segment names, buffers it touches, every tensor it names)."""
        affine = {index for index, _ in self.sized}
        buffers, steps = self.buffers, self.steps
        ranges = [(start, end) for start, end in zip([0, *cuts], [*cuts, len(steps)]) if end > start]
        named_of, own_of = [], []
        for start, end in ranges:
            named, own = set(), []
            for target, candidates, freed in steps[start:end]:
                if target >= 0:
                    own.append(target)
                named.update(candidates)
                named.update(freed)
            named.update(own)
            named_of.append(named)
            own_of.append(own)
        later, segments = set(), []
        for (start, end), named, own in reversed(list(zip(ranges, named_of, own_of))):
            own_set = set(own)
            segments.append((start, end, tuple(tid for tid in named if tid in affine),
                             tuple(tid for tid in named if tid not in own_set), tuple(tid for tid in own if tid in later),
                             tuple(sorted({buffers[tid] for tid in named})), frozenset(named)))
            later |= named
        segments.reverse()
        return segments

    def sizes(self, cells):
        """Every tensor's bytes for a context's cell counts {kind: cells}."""
        sizes = list(self.fixed)
        for index, size in self.sized:
            sizes[index] = size.at(cells)
        return sizes

    def _pad_all(self, sizes, alignments):
        key = tuple(alignments)
        padded = self._padded.get(key)
        if padded is None:
            coarsest = max(alignments)
            if all(coarsest % alignment == 0 for alignment in alignments):
                # a size aligned to the coarsest alignment is aligned to every one: pad only the others
                padded = list(self.fixed)
                buffers = self.buffers
                for index in compress(range(len(padded)), [size % coarsest for size in padded]):
                    alignment = alignments[buffers[index]]
                    padded[index] = -(-padded[index] // alignment) * alignment
            else:
                padded = [-(-size // alignments[buffer]) * alignments[buffer]
                          for size, buffer in zip(self.fixed, self.buffers)]
            self._padded[key] = padded
        padded = list(padded)
        for index, _ in self.sized:
            alignment = alignments[self.buffers[index]]
            padded[index] = -(-sizes[index] // alignment) * alignment
        return padded

    def peaks(self, cells, alignments):
        """The high-water mark of each buffer (alignments: one per buffer index) for these cells."""
        sizes = self.sizes(cells)
        padded = self._pad_all(sizes, alignments)
        pools = [_Blocks(alignment) for alignment in alignments]
        buffers = self.buffers
        offset = [0] * len(sizes)
        alive = [False] * len(sizes)
        for index in self.prologue:
            offset[index] = pools[buffers[index]].take(padded[index])
            alive[index] = True
        self.calls += 1
        if self.calls == 1 or self._memo is None:  # most programs serve one context: no memo for the first
            self._run(self.steps, 0, len(self.steps), sizes, padded, pools, offset, alive)
            self.replayed = None
            return [pool.max_size for pool in pools]
        result = self._peaks_memo(sizes, padded, pools, offset, alive, alignments)
        if self.calls >= 3 and self.replayed > MEMO_GIVE_UP * len(self.segments):
            self._memo = None  # its layers never start from an equivalent state: the memo only costs
        return result

    def _peaks_memo(self, sizes, padded, pools, offset, alive, alignments):
        """peaks' replay layer by layer, each layer taken from the memo when it starts from a state
        equivalent to one it was replayed from at another context."""
        buffers = self.buffers
        memo = self._memo.setdefault(tuple(alignments), {})
        if len(memo) > _MEMO_SEGMENTS:
            memo.clear()
        steps = self.steps
        self.replayed = 0  # segments this call replayed (the rest came from the memo)
        living = [tid for tid, _ in self.sized if alive[tid]]  # live tensors whose size follows the context
        for index, (start, end, affine, outside, own, touched, named) in enumerate(self.segments):
            # Fences: live context-sized tensors this segment neither frees nor takes over. They cut each
            # buffer into regions; the segment's replay depends on the free blocks and its outside
            # tensors only by region and offset within it (best fit compares sizes, merging needs
            # adjacency, which no fence lets cross), so a state equal in those terms replays the same,
            # each region moved by its fence's end — that is what a larger context's mask does.
            bases = {p: [0] for p in touched}
            for tid in living:
                if alive[tid] and tid not in named and buffers[tid] in bases and padded[tid]:
                    bases[buffers[tid]].append(offset[tid] + padded[tid])
            for p in touched:
                bases[p].sort()
            key = (index, tuple(sizes[tid] for tid in affine),
                   tuple(_relative_blocks(pools[p].free, bases[p]) for p in touched),
                   tuple(_relative(offset[tid], bases[buffers[tid]]) if alive[tid] else None for tid in outside))
            done = memo.get(key)
            if done is not None:  # this layer replayed before (another context) from an equivalent state
                free_lists, maxes, own_offsets, own_alive, outside_alive = done
                for p, free, top in zip(touched, free_lists, maxes):
                    base = bases[p]
                    pools[p].free = [[base[region] + where, _FREE_END - base[region] - where if size is None else size]
                                     for region, where, size in free]
                    if top is not None and base[top[0]] + top[1] > pools[p].max_size:
                        pools[p].max_size = base[top[0]] + top[1]
                for tid, where, flag in zip(own, own_offsets, own_alive):
                    offset[tid] = bases[buffers[tid]][where[0]] + where[1]
                    alive[tid] = flag
                for tid, flag in zip(outside, outside_alive):
                    alive[tid] = flag
                continue
            before = [pools[p].max_size for p in touched]
            for p in touched:
                pools[p].max_size = -1
            self._run(steps, start, end, sizes, padded, pools, offset, alive)
            self.replayed += 1
            maxes = [None if pools[p].max_size < 0 else _relative(pools[p].max_size, bases[p]) for p in touched]
            for p, old in zip(touched, before):
                pools[p].max_size = max(pools[p].max_size, old)
            memo[key] = (tuple(_relative_blocks(pools[p].free, bases[p]) for p in touched), maxes,
                         tuple(_relative(offset[tid], bases[buffers[tid]]) for tid in own),
                         tuple(alive[tid] for tid in own), tuple(alive[tid] for tid in outside))
        return [pool.max_size for pool in pools]

    def _run(self, steps, start, end, sizes, padded, pools, offset, alive):
        """Replay steps[start:end]: _Blocks.take/give inlined (the replay's inner loop; tested equal to
        Graph.replay, which calls them)."""
        buffers = self.buffers
        frees = [pool.free for pool in pools]
        tops = [pool.max_size for pool in pools]
        aligns = [pool.alignment for pool in pools]
        give = _give
        for target, candidates, freed in steps if start == 0 and end == len(steps) else steps[start:end]:
            if target >= 0:
                size = sizes[target]
                for parent in candidates:
                    if sizes[parent] >= size:  # ggml-alloc's in-place reuse: the node takes its parent's memory
                        offset[target] = offset[parent]
                        alive[parent] = False
                        if sizes[parent] > size:
                            align = aligns[buffers[target]]
                            kept = -(-size // align) * align
                            extra = -(-sizes[parent] // align) * align - kept
                            if extra:
                                give(frees[buffers[target]], offset[parent] + kept, extra)
                        break
                else:  # _Blocks.take
                    buffer = buffers[target]
                    want = padded[target]
                    free = frees[buffer]
                    last = len(free) - 1
                    best = last  # only the unbounded last block: no scan, and it never empties
                    if last:
                        best_size = None
                        for index in range(last):
                            block_size = free[index][1]
                            if block_size >= want and (best_size is None or block_size <= best_size):
                                best, best_size = index, block_size
                    block = free[best]
                    where = block[0]
                    block[0] = top = where + want
                    block[1] -= want
                    if block[1] == 0:
                        del free[best]
                    if top > tops[buffer]:
                        tops[buffer] = top
                    offset[target] = where
                alive[target] = True
            for index in freed:
                if alive[index]:
                    alive[index] = False
                    # _give, inlined (the replay's most frequent call)
                    free = frees[buffers[index]]
                    where = offset[index]
                    size = padded[index]
                    for position, block in enumerate(free):
                        if block[0] + block[1] == where:
                            block[1] += size
                            if position + 1 < len(free) and block[0] + block[1] == free[position + 1][0]:
                                block[1] += free[position + 1][1]
                                del free[position + 1]
                            break
                        if where + size == block[0]:
                            block[0] = where
                            block[1] += size
                            if position and free[position - 1][0] + free[position - 1][1] == where:
                                free[position - 1][1] += block[1]
                                del free[position]
                            break
                    else:
                        position = 0
                        while position < len(free) and free[position][0] < where:
                            position += 1
                        free.insert(position, [where, size])
        for pool, top in zip(pools, tops):
            pool.max_size = top
_PROGRAMS_MAX = 32  # compiled graphs kept per model (each a few MB for a 90-layer model)


def _cells(caches):
    return {cache.kind: cache.cells for cache in caches}


def _program(graph_shape, kvshape, caches, key, compile_symbolic):
    """The Program of a graph whose structure `key` names (everything but the cell counts), built once
    per model with symbolic cells (compile_symbolic(caches) -> Program); None when a builder needs
    the concrete cells (NotAffine), and the caller replays each context plainly."""
    global _REGIME
    programs = graph_shape.__dict__.setdefault("_programs", {})
    key = (id(kvshape), *key)
    entry = programs.get(key)
    if entry is None or entry[0] is not kvshape:
        if len(programs) >= _PROGRAMS_MAX:
            programs.pop(next(iter(programs)))
        entry = programs[key] = (kvshape, [])
    cells = _cells(caches)
    for conditions, program in entry[1]:
        if _holds(conditions, cells):
            return program
    regime = _REGIME = _Regime(cells)
    try:
        program = compile_symbolic([_CellsOnly(cache.kind) for cache in caches])
    except NotAffine:
        program = None
    finally:
        _REGIME = None
    if len(entry[1]) >= _REGIMES_MAX:
        entry[1].pop(0)
    entry[1].append((tuple(regime.conditions.items()), program))
    return program
