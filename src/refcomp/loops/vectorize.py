"""Pass `vectorize`: loops of kind "vectorized" become straight-line vector IR where that is sound.

Requires: flattened buffers (run `lower_blocks` and `flatten_buffers` first; `simplify` before
helps, since it removes unit loops and decided branches).
Guarantees: each `For(kind="vectorized")` whose body passes the checks of
`LaneVectorizer.body` is replaced by vector code: the loop var becomes `Ramp(base, 1, P)`,
lane-dependent values get P-lane dtypes (`float32x16`), loads and stores take a Ramp index
(stride 1: contiguous; other strides or general vector indices: gather on loads; stores are always
Ramps with a non-zero constant stride), invariant values stay scalar and are wrapped in `Broadcast`
where they meet vectors, `Select`, casts and elementwise math calls act on vectors, and an
`if_then_else` with a lane-dependent condition becomes a `Select` when neither branch can fault.
P is a power of two: the extent when that is a power of two no larger than `vector_bytes` / the
widest element size in the body, else that maximum; the iterations that do not fill a whole vector
run in a scalar serial tail loop (for symbolic extents too).  Branches whose condition depends on
the lane but is convex in it (an imperfect-split predicate, a padding test; see
`passes.lane_conditions`) are decided once per chunk: `if <every lane passes>: vector code with
those branches taken, else: the chunk's lanes as scalar code`; a loop of constant bounds is first
cut where such a test, linear in the loop var alone, changes value (`_lane_cuts`), so no chunk
straddles the edge of a padded row.  A loop that cannot be
vectorised (a reduction into one element, lane-dependent control flow, effects, inner loops with
lane-dependent bounds, vector code already inside) is kept as `For(kind="vectorized")` (its body
otherwise lowered) so the emitter can fall back to `#pragma omp simd` -- but only when
`lane_dependence.lanes_independent` shows its iterations touch disjoint memory and have no
effects; otherwise (a reduction into one element, a loop-carried dependence, an extern call) it
becomes a serial loop, since a SIMD loop would compute something else.
"""
from __future__ import annotations

import logging

from ..ast import (
    And, BufferLoad, Cast, For, IfThenElse, IntImm, LetStmt, Max, Mutator, PrimExpr, PrimFunc, Stmt, Var,
    collect, post_order_visit, seq, substitute,
)
from ..ast.functor import free_vars
from ..ast.expr import as_int
from ..shape.simplify import simplify_expr
from .passes.lane_dependence import lanes_independent
from .passes.simplify import reads_memory
from .passes.lane_conditions import assume_false, assume_true, hoistable_conditions, negated_comparison
from .passes.vector_expr import CannotVectorize, LaneVectorizer, every_lane_condition, lane_condition_is_convex

logger = logging.getLogger("refcomp.lower")

DEFAULT_VECTOR_BYTES = 64  # one AVX-512 register
GPU_VECTOR_BYTES = 16  # the widest CUDA vector type (float4, int4)


def vectorize(func: PrimFunc, vector_bytes: int | None = None) -> PrimFunc:
    """func with its vectorized loops turned into vector IR where sound (see the module docstring).

    vector_bytes bounds the size of one vector; by default 16 for a function with GPU thread
    bindings, else 64.
    """
    if vector_bytes is None:
        vector_bytes = GPU_VECTOR_BYTES if has_thread_bindings(func) else DEFAULT_VECTOR_BYTES
    return func.with_(body=_LoopVectorizer(vector_bytes).visit(func.body))


def has_thread_bindings(func: PrimFunc) -> bool:
    """func has a loop bound to a GPU thread axis (it is, or holds, a GPU kernel)."""
    return any(loop.kind == "thread_binding" for loop in collect(func.body, For))


class _LoopVectorizer(Mutator):
    def __init__(self, vector_bytes: int) -> None:
        super().__init__()
        self.vector_bytes = vector_bytes

    def visit_For(self, loop: For) -> Stmt:
        body = self.visit(loop.body)  # inner loops first
        loop = loop.with_(body=body)
        if loop.kind != "vectorized":
            return loop
        try:
            return self._vectorize(loop)
        except CannotVectorize as reason:
            if lanes_independent(loop):
                logger.debug("vectorize: loop %s kept as a vectorized loop: %s", loop.loop_var.name, reason)
                return loop
            logger.debug("vectorize: loop %s made serial (its iterations may depend on each other): %s",
                         loop.loop_var.name, reason)
            return loop.with_(kind="serial")

    def _vectorize(self, loop: For) -> Stmt:
        if reads_memory(loop.min) or reads_memory(loop.extent):
            # bounds read from memory are evaluated once, as the loop did, before the copies use them
            start, count = Var(loop.loop_var.name + "_min", loop.min.dtype), Var(loop.loop_var.name + "_extent",
                                                                                   loop.extent.dtype)
            inner = self._vectorize(loop.with_(min=start, extent=count))
            return LetStmt(start, loop.min, LetStmt(count, loop.extent, inner))
        widest = _widest_element_bytes(loop.body)
        max_lanes = _power_of_two_at_most(max(2, self.vector_bytes // widest))
        count = as_int(loop.extent)
        minimum = loop.min
        if count is not None:
            return self._constant_extent(loop, count, max_lanes)
        lanes = max_lanes
        iterations = simplify_expr(Max(loop.extent, IntImm(0, loop.extent.dtype)))
        chunk_count = simplify_expr(iterations // lanes)
        tail_start = simplify_expr(minimum + chunk_count * lanes)
        tail_count = simplify_expr(iterations % lanes)
        main = self._chunks(loop, loop.min, chunk_count, lanes)
        tail = _scalar_loop(loop, tail_start, tail_count)
        return seq(main, tail) if tail is not None else main

    def _constant_extent(self, loop: For, count: int, max_lanes: int) -> Stmt:
        """count iterations as whole vectors of max_lanes, then ever smaller powers of two, then one
        scalar; first cut at the lanes where a lane-dependent branch changes (`_lane_cuts`: the
        edge of a padded row), so that no chunk straddles the edge."""
        start = as_int(loop.min)
        cuts = _lane_cuts(hoistable_conditions(loop.body, loop.loop_var), loop.loop_var, start, start + count) \
            if start is not None and count > 1 else []
        if cuts:
            dtype = loop.loop_var.dtype
            bounds = [start, *cuts, start + count]
            pieces = []
            for first, stop in zip(bounds, bounds[1:]):
                part = loop.with_(min=IntImm(first, dtype), extent=IntImm(stop - first, dtype))
                pieces.append(_scalar_loop(part, part.min, part.extent) if stop - first == 1 else
                              self._whole_vectors(part, stop - first, max_lanes))
            return seq(*pieces)
        return self._whole_vectors(loop, count, max_lanes)

    def _whole_vectors(self, loop: For, count: int, max_lanes: int) -> Stmt:
        """count iterations as whole vectors of max_lanes, then ever smaller powers of two, then one scalar."""
        if count <= 1:
            raise CannotVectorize("fewer than two iterations")
        dtype = loop.loop_var.dtype
        lanes = _power_of_two_at_most(min(count, max_lanes))
        pieces = [self._chunks(loop, loop.min, IntImm(count // lanes, dtype), lanes)]
        done = count // lanes * lanes
        while lanes > 1:
            lanes //= 2
            if count - done >= lanes:
                start = simplify_expr(loop.min + IntImm(done, dtype))
                if lanes == 1:
                    pieces.append(_scalar_loop(loop, start, IntImm(1, dtype)))
                else:
                    pieces.append(self._chunk(loop, start, lanes))
                done += lanes
        return seq(*pieces)

    def _chunks(self, loop: For, start: PrimExpr, chunk_count: PrimExpr, lanes: int) -> Stmt:
        """The vector part: chunk_count chunks of `lanes` iterations each, from start on."""
        var = loop.loop_var
        if as_int(chunk_count) == 1:
            return self._chunk(loop, start, lanes)
        chunk = Var(var.name + "_chunk", var.dtype)
        base = simplify_expr(start + chunk * lanes)
        return For(chunk, IntImm(0, var.dtype), chunk_count, "serial", self._chunk(loop, base, lanes))

    def _chunk(self, loop: For, base: PrimExpr, lanes: int) -> Stmt:
        """The body for iterations base .. base + lanes - 1 as vector code.

        When the body has lane-dependent branches that are convex in the loop var, the result
        is `if <every lane takes them>: vector code else: the lanes one by one`.
        """
        var = loop.loop_var
        body = fresh_binders(loop.body)
        try:
            return LaneVectorizer(var, base, lanes).body(body)
        except CannotVectorize:
            conditions = hoistable_conditions(body, var)
            if not conditions:
                raise
        vector_body = LaneVectorizer(var, base, lanes).body(assume_true(body, conditions))
        every_lane = _every_lane(conditions, var, base, lanes)
        half = lanes // 2
        if lanes >= _SPLIT_LANES and any(
                str(_every_lane(conditions, var, start, half)) != str(every_lane)
                for start in (base, simplify_expr(base + half))):
            # a chunk some lanes of which may miss the branch (the edge of a padded copy): its two
            # halves are tested again, so only the quarter holding the edge runs lane by lane (not
            # where a half's test is the whole chunk's: a padded row fails for both halves alike)
            fallback = seq(self._chunk(loop, base, half), self._chunk(loop, simplify_expr(base + half), half))
        else:
            fallback = _scalar_loop(loop, base, IntImm(lanes, var.dtype))
        no_lane = self._no_lane_chunk(body, conditions, var, base, lanes)
        if no_lane is not None:
            fallback = IfThenElse(no_lane[0], no_lane[1], fallback)
        return IfThenElse(every_lane, vector_body, fallback)

    def _no_lane_chunk(self, body: Stmt, conditions, var: Var, base: PrimExpr, lanes: int):
        """(test, vector code) for a chunk no lane of which takes the branch, where the one
        condition is a comparison whose negation is convex too (a concat's select: `i < 16` picks
        the first part, so a chunk from 16 on reads the second part alone); None otherwise."""
        if len(conditions) != 1:
            return None
        negated = negated_comparison(conditions[0])
        if negated is None or not lane_condition_is_convex(negated, var):
            return None
        false_body = assume_false(body, conditions)
        if false_body is None:
            return None
        try:
            vector_body = LaneVectorizer(var, base, lanes).body(false_body)
        except CannotVectorize:
            return None
        return _every_lane([negated], var, base, lanes), vector_body


# At most this many cuts per loop: a row is the padding, the image, the padding.
_MAX_CUTS = 2


def _lane_cuts(conditions, var: Var, start: int, stop: int) -> list[int]:
    """The iterations in (start, stop) at which a comparison of the conditions that is linear in
    var alone (`x - 1 >= 0`, `x < 25`: a padded row's edges; other vars or non-linear terms are not
    looked at) changes its value, ascending; none when there are more than _MAX_CUTS."""
    from ..ast import GE, GT, LE, LT
    from ..shape.canonical import linear_form

    compare = {LT: lambda v: v < 0, LE: lambda v: v <= 0, GT: lambda v: v > 0, GE: lambda v: v >= 0}
    cuts: set[int] = set()
    atoms = list(conditions)
    while atoms:
        atom = atoms.pop()
        if isinstance(atom, And):
            atoms += [atom.a, atom.b]
            continue
        test = compare.get(type(atom))
        if test is None or var not in free_vars(atom):
            continue
        form = linear_form(atom.a).add(linear_form(atom.b), -1)  # a - b
        slope = form.pop(var)
        if slope == 0 or not form.is_const():
            continue
        # slope * v + const changes sign between v - 1 and v near v = -const / slope
        near = -form.const // slope
        for v in range(near - 1, near + 3):
            if start < v < stop and test(slope * v + form.const) != test(slope * (v - 1) + form.const):
                cuts.add(v)
    return sorted(cuts) if len(cuts) <= _MAX_CUTS else []


def _every_lane(conditions, var: Var, base: PrimExpr, lanes: int) -> PrimExpr:
    """The test that every lane base .. base + lanes - 1 takes all of conditions, simplified."""
    last = simplify_expr(base + (lanes - 1))
    every_lane = None
    for condition in conditions:
        test = every_lane_condition(condition, var, base, last)
        every_lane = test if every_lane is None else And(every_lane, test)
    return simplify_expr(every_lane)


# A chunk with lane-dependent branches of at least this many lanes falls back to its two halves
# (each tested on its own) rather than to a scalar loop.
_SPLIT_LANES = 8


def _scalar_loop(loop: For, start: PrimExpr, count: PrimExpr) -> Stmt | None:
    """The original body run serially for iterations start .. start + count - 1 (None when empty)."""
    n = as_int(count)
    if n is not None and n <= 0:
        return None
    var = loop.loop_var
    body = fresh_binders(loop.body)
    if n == 1:
        return substitute(body, {var: start})
    fresh = Var(var.name, var.dtype)
    return For(fresh, start, count, "serial", substitute(body, {var: fresh}))


def fresh_binders(stmt: Stmt) -> Stmt:
    """stmt with every variable bound inside it (loops, lets) replaced by a new one of the same name.

    Each copy of a loop body made here gets its own variables, so no variable is bound twice.
    """
    return _FreshBinders().visit(stmt)


class _FreshBinders(Mutator):
    def _renamed(self, node, var_field: str):
        old = getattr(node, var_field)
        new = Var(old.name, old.dtype)
        node = node.with_(**{var_field: new})
        return substitute(self.generic_visit(node), {old: new})

    def visit_For(self, loop: For) -> Stmt:
        return self._renamed(loop, "loop_var")

    def visit_LetStmt(self, stmt) -> Stmt:
        return self._renamed(stmt, "var")

    def visit_Let(self, expr) -> PrimExpr:
        return self._renamed(expr, "var")


def _widest_element_bytes(stmt: Stmt) -> int:
    """The widest data element (loads, stores, casts) in stmt, in bytes; at least 1.  A cast inside
    a load's or store's index does not count: a lane-dependent index is a Ramp (an address), not
    a vector of data, and a 64-bit offset must not halve the lanes of the data around it."""
    widest = 1
    in_index: set[int] = set()

    def mark(node) -> None:
        if isinstance(node, Cast):
            in_index.add(id(node))

    def indices(node) -> None:
        if isinstance(node, BufferLoad) or type(node).__name__ == "BufferStore":
            for index in node.indices:
                post_order_visit(index, mark)

    def look(node) -> None:
        nonlocal widest
        dtype = None
        if isinstance(node, BufferLoad) or type(node).__name__ == "BufferStore":
            dtype = node.buffer.dtype
        elif isinstance(node, Cast) and id(node) not in in_index:
            dtype = node.dtype
        if dtype is not None and dtype.name != "handle":
            widest = max(widest, dtype.bytes)

    post_order_visit(stmt, indices)
    post_order_visit(stmt, look)
    return widest


def _power_of_two_at_most(n: int) -> int:
    p = 1
    while p * 2 <= n:
        p *= 2
    return p
