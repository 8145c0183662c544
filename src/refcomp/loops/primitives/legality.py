"""Named legality checks shared by the schedule primitives.  Each raises ScheduleError or returns.

A condition over variables with small constant ranges is decided exactly by evaluating it at
every point at once (refcomp.shape.evaluate over numpy arrays); anything else goes to
`refcomp.shape.prove`.  "unknown" fails closed.
"""
from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import numpy as np

from ...ast import (
    And, Block, BlockRealize, Buffer, EQ, FloorDiv, FloorMod, For, IntImm, Mul, Not, Or, PrimExpr, PrimFunc,
    SizeVar, Var, collect, free_vars, substitute,
)
from ...ast.functor import uses_var
from ...ast.functor import Mutator
from ...ast.structural import structural_equal
from ...errors import ScheduleError
from ...shape import prove as shape_prove
from ...shape.canonical import Sum
from ...shape.evaluate import EvaluationError, evaluate
from .affine import linear, relax
from .lookup import BlockLocation, child_block_realizes_of_stmt
from .tree import block_realizes, walk

ENUMERATION_LIMIT = 1 << 16


# ----------------------------------------------------------------------------- proving

def prove(condition: PrimExpr, ranges: Mapping[Var, tuple[int, int]]) -> tuple[str, dict | None]:
    """("proved" | "disproved" | "unknown", counterexample) for condition over the var ranges."""
    variables = free_vars(condition)
    if all(v in ranges for v in variables):
        total = 1
        for v in variables:
            lo, hi = ranges[v]
            total *= max(hi - lo + 1, 0)
        if total <= ENUMERATION_LIMIT:
            return _enumerate(condition, variables, ranges)
    assumptions = []
    for v in variables:
        if v in ranges:
            lo, hi = ranges[v]
            assumptions += [v >= lo, v <= hi]
    result = shape_prove(condition, assumptions=tuple(assumptions))
    return result.status, result.counterexample


def prove_over_loops(condition: PrimExpr, loops: Iterable[For]) -> tuple[str, dict | None]:
    """prove() with each loop var ranging over its loop (symbolic extents go to the solver)."""
    loops = list(loops)
    ranges = loop_ranges(loops)
    variables = free_vars(condition)
    if all(v in ranges for v in variables):
        return prove(condition, ranges)
    assumptions = []
    for loop in loops:
        assumptions += [loop.loop_var >= loop.min, loop.loop_var < loop.min + loop.extent]
    result = shape_prove(condition, assumptions=tuple(assumptions))
    return result.status, result.counterexample


def prove_determines(values: Sequence[PrimExpr], determined: Sequence[PrimExpr], copied: Sequence[Var],
                     facts: Sequence[PrimExpr]) -> tuple[str, dict | None]:
    """Whether any two points that agree on `values` also agree on `determined` (an injectivity
    claim such as "the bindings determine the loop var").

    The claim is over two copies of the `copied` vars (the other vars are shared by both points),
    each copy satisfying `facts`; it goes to `refcomp.shape.prove` (simplifier, then Z3), which is
    exact for the floor div/mod by constants of fused and split indices.  Unknown stays unknown."""
    twin = {v: Var(f"{v.name}_other", v.dtype) for v in copied}
    same = [EQ(a, substitute(a, twin)) for a in values]
    goal = [EQ(d, substitute(d, twin)) for d in determined]
    claim = Or(Not(_conjunction(same)), _conjunction(goal)) if same else _conjunction(goal)
    assumptions = tuple(facts) + tuple(substitute(f, twin) for f in facts)
    result = shape_prove(claim, assumptions=assumptions)
    return result.status, (dict(result.counterexample) if result.counterexample is not None else None)


def loop_facts(loops: Iterable[For]) -> list[PrimExpr]:
    """`min <= v < min + extent` for each loop (symbolic bounds kept symbolic)."""
    facts: list[PrimExpr] = []
    for loop in loops:
        facts += [loop.loop_var >= loop.min, loop.loop_var < loop.min + loop.extent]
    return facts


def _conjunction(conditions: Sequence[PrimExpr]) -> PrimExpr:
    if not conditions:
        return IntImm(1, "bool")
    result = conditions[0]
    for c in conditions[1:]:
        result = And(result, c)
    return result


def _enumerate(condition: PrimExpr, variables: Sequence[Var], ranges: Mapping[Var, tuple[int, int]]):
    if not variables:
        value = evaluate(condition, {})
        return ("proved", None) if bool(np.all(value)) else ("disproved", {})
    axes = [np.arange(ranges[v][0], ranges[v][1] + 1, dtype=np.int64) for v in variables]
    grids = np.meshgrid(*axes, indexing="ij")
    env = {v: g.ravel() for v, g in zip(variables, grids)}
    try:
        value = np.broadcast_to(evaluate(condition, env), env[variables[0]].shape)
    except EvaluationError:
        return "unknown", None
    if bool(np.all(value)):
        return "proved", None
    bad = int(np.argmin(value))
    return "disproved", {v.name: int(env[v][bad]) for v in variables}


def require_proved(condition: PrimExpr, ranges: Mapping[Var, tuple[int, int]], primitive: str, what: str,
                   func: PrimFunc, spot=None) -> None:
    """Raise ScheduleError unless condition is proved ("unknown" fails too, with its own message)."""
    status, counterexample = prove(condition, ranges)
    if status == "proved":
        return
    if status == "disproved":
        raise ScheduleError(f"{primitive}: {what} does not hold", ir=func, spot=spot,
                            counterexample=counterexample)
    raise ScheduleError(f"{primitive}: could not prove that {what} (the prover answered unknown)",
                        ir=func, spot=spot)


# ----------------------------------------------------------------------------- loop facts

def const_int(expr: PrimExpr) -> int | None:
    """The value of a constant integer expression (folding arithmetic on constants), else None."""
    if isinstance(expr, IntImm):
        return expr.value
    if isinstance(expr, int) and not isinstance(expr, bool):
        return expr
    from .affine import int_bounds

    bounds = int_bounds(expr, {}) if isinstance(expr, PrimExpr) else None
    return bounds[0] if bounds is not None and bounds[0] == bounds[1] else None


def loop_ranges(loops: Iterable[For]) -> dict[Var, tuple[int, int]]:
    """Constant [lo, hi] of each loop with constant bounds."""
    ranges = {}
    for loop in loops:
        lo, extent = const_int(loop.min), const_int(loop.extent)
        if lo is not None and extent is not None:
            ranges[loop.loop_var] = (lo, lo + extent - 1)
    return ranges


def check_loop_is_plain(func: PrimFunc, loop: For, primitive: str) -> None:
    """The loop starts at 0, is serial and carries no annotation (split, fuse need this)."""
    if const_int(loop.min) != 0:
        raise ScheduleError(f"{primitive}: loop {loop.loop_var.name} must start at 0", ir=func, spot=loop)
    if loop.kind != "serial":
        raise ScheduleError(f"{primitive}: loop {loop.loop_var.name} is {loop.kind}; only serial loops can be "
                            "transformed", ir=func, spot=loop)
    if loop.annotations:
        raise ScheduleError(f"{primitive}: loop {loop.loop_var.name} has annotations "
                            f"{sorted(loop.annotations)}", ir=func, spot=loop)


def blocks_under(stmt) -> list[BlockRealize]:
    """Block realizes below stmt that are not nested inside another block below it."""
    return child_block_realizes_of_stmt(stmt)


def loops_above_in(stmt, realize: BlockRealize) -> list[For]:
    """The For nodes between stmt (included when a For) and realize."""
    from .tree import path_to

    path = path_to(stmt, realize) or []
    return [s for s in path if isinstance(s, For)]


def check_affine_binding(func: PrimFunc, realize: BlockRealize, primitive: str) -> None:
    """Every iter value is affine in loop vars: floor div/mod by positive constants allowed, and
    by a divisor free of loop vars (a symbolic extent, as `fuse` of a loop over `n` gives:
    `f // n`, `f % n`)."""
    loop_vars = {id(s.loop_var) for s in walk(func.body) if isinstance(s, For)}
    for iv, value in zip(realize.block.iter_vars, realize.iter_values):
        if not _is_quasi_affine(value, loop_vars):
            raise ScheduleError(f"{primitive}: block {realize.block.name}: the binding of {iv.var.name} is not "
                                "affine in the loop variables", ir=func, spot=realize)


def _is_quasi_affine(expr: PrimExpr, loop_vars: set[int]) -> bool:
    for atom, _ in linear(expr).linear_terms():
        if isinstance(atom, Var):
            continue
        if isinstance(atom, (FloorDiv, FloorMod)) and _is_invariant_divisor(atom.b, loop_vars):
            if _is_quasi_affine(atom.a, loop_vars):
                continue
        return False
    return True


def _is_invariant_divisor(divisor: PrimExpr, loop_vars: set[int]) -> bool:
    """A positive constant, or an expression in size vars only (symbolic extents, no loop var
    among them): a fused loop's `f // n` is as regular as `f // 8`, the same for every
    iteration."""
    value = const_int(divisor)
    if value is not None:
        return value > 0
    variables = free_vars(divisor)
    return all(isinstance(v, SizeVar) and id(v) not in loop_vars for v in variables)


def check_iter_kinds(func: PrimFunc, realize: BlockRealize, primitive: str) -> None:
    """Only spatial and reduce iter vars (an opaque iter hides dependences)."""
    for iv in realize.block.iter_vars:
        if iv.kind not in ("spatial", "reduce"):
            raise ScheduleError(f"{primitive}: block {realize.block.name} has the {iv.kind} iter var "
                                f"{iv.var.name}", ir=func, spot=realize)


def is_reduction_block(block: Block) -> bool:
    """The block has an init or a reduce iter var."""
    return block.init is not None or any(iv.kind == "reduce" for iv in block.iter_vars)


def check_complete_or_reduction(func: PrimFunc, realize: BlockRealize, primitive: str,
                                allow_update: bool = False) -> None:
    """A complete block (spatial iters only, no init, writes not read) or a reduction block.

    allow_update also accepts a reduction's update block (reduce iters, no init, as left by
    decompose_reduction) that reads of its outputs exactly the elements it writes: for the
    independence of loop iterations, that is as good as a reduction with an init."""
    block = realize.block
    check_iter_kinds(func, realize, primitive)
    written = {r.buffer for r in block.writes}
    if not is_reduction_block(block):
        if written & {r.buffer for r in block.reads}:
            raise ScheduleError(f"{primitive}: block {block.name} reads the buffer it writes but is not a "
                                "reduction block", ir=func, spot=realize)
        return
    if block.init is None and not allow_update:
        raise ScheduleError(f"{primitive}: block {block.name} has reduce iters but no init", ir=func, spot=realize)
    if block.init is None:
        _check_update_reads_its_writes(func, realize, primitive)
    reduce_vars = {iv.var for iv in block.iter_vars if iv.kind == "reduce"}
    for region in block.writes:
        for r in region.region:
            if set(free_vars(r.min)) & reduce_vars:
                raise ScheduleError(f"{primitive}: block {block.name}: a reduce iter indexes the output "
                                    f"{region.buffer.name}", ir=func, spot=realize)


def _check_update_reads_its_writes(func: PrimFunc, realize: BlockRealize, primitive: str) -> None:
    """Each read of a buffer the block writes is one of its write regions (`C[vi, vj]` both ways)."""
    from ...shape.keys import expr_key

    def key(region):
        return tuple((expr_key(r.min), expr_key(r.extent)) for r in region.region)

    block = realize.block
    for read in block.reads:
        writes = [w for w in block.writes if w.buffer is read.buffer]
        if writes and key(read) not in {key(w) for w in writes}:
            raise ScheduleError(f"{primitive}: block {block.name} reads elements of {read.buffer.name} that it does "
                                "not write", ir=func, spot=realize)


def loop_var_uses(realize: BlockRealize, var: Var) -> tuple[bool, bool]:
    """(used by a spatial iter binding, used by a reduce iter binding) for loop var."""
    spatial = reduce = False
    for iv, value in zip(realize.block.iter_vars, realize.iter_values):
        if var in free_vars(value):
            if iv.kind == "spatial":
                spatial = True
            else:
                reduce = True
    return spatial, reduce


def check_no_loop_carried_dependence(func: PrimFunc, loop: For, primitive: str) -> None:
    """Iterations of loop are independent: it binds only spatial iters of every block below it,
    every such block depends on it, and a block below it reads only what is written below it in the
    same iteration."""
    top = blocks_under(loop)
    for realize in top:
        check_complete_or_reduction(func, realize, primitive, allow_update=True)
        check_affine_binding(func, realize, primitive)
        spatial, reduce = loop_var_uses(realize, loop.loop_var)
        if reduce:
            raise ScheduleError(f"{primitive}: loop {loop.loop_var.name} carries the reduction of block "
                                f"{realize.block.name}", ir=func, spot=loop)
        if all(private_to_iteration(func, loop, w.buffer) for w in realize.block.writes):
            continue  # each iteration has its own copy of what the block writes
        if not spatial and const_int(loop.extent) != 1:  # one iteration cannot race with itself
            raise ScheduleError(f"{primitive}: block {realize.block.name} does not depend on loop "
                                f"{loop.loop_var.name}: every iteration would write the same elements",
                                ir=func, spot=loop)
    for realize in top:
        if not all(private_to_iteration(func, loop, w.buffer) for w in realize.block.writes):
            check_disjoint_iterations(func, loop, realize, primitive)
    for consumer in top:
        for producer in top:
            if producer is consumer:
                continue
            shared = {r.buffer for r in producer.block.writes} & {r.buffer for r in consumer.block.reads}
            for buffer in shared:
                check_same_iteration_cover(func, loop, producer, consumer, buffer, primitive)


# Memory scopes that give each GPU block (resp. each thread) its own copy of a buffer.
_PER_GPU_BLOCK = ("shared", "shared.dyn", "local", "warp", "wmma.matrix_a", "wmma.matrix_b", "wmma.accumulator")
_PER_GPU_THREAD = ("local",)


def private_to_iteration(func: PrimFunc, loop: For, buffer: Buffer) -> bool:
    """Each iteration of loop sees its own copy of buffer: it is allocated by a block below the
    loop, or the loop is bound to GPU blocks (threads) and the buffer's scope is per block (thread)."""
    for realize in walk(loop.body):
        if isinstance(realize, BlockRealize) and any(b is buffer for b in realize.block.alloc_buffers):
            return True
    tag = loop.thread_binding or ""
    if tag.startswith("blockIdx"):
        return buffer.scope in _PER_GPU_BLOCK
    if tag.startswith("threadIdx"):
        return buffer.scope in _PER_GPU_THREAD
    return False


def check_disjoint_iterations(func: PrimFunc, loop: For, realize: BlockRealize, primitive: str) -> None:
    """Different iterations of loop run different instances of the block (no recomputed halo).

    First by relaxing the spatial bindings over the loops below: some binding must move with the
    loop var by more than its per-iteration spread.  Failing that (non-affine bindings), exactly,
    by enumerating the block's loop nest when it is constant and small.  Else fail closed."""
    from .affine import constant_difference

    block = realize.block
    spatial = [v for iv, v in zip(block.iter_vars, realize.iter_values) if iv.kind == "spatial"]
    inner_loops = loops_above_in(loop.body, realize)
    inner = loop_ranges(inner_loops)
    if len(inner) == len(inner_loops):
        for value in spatial:
            relaxed = relax(value, inner)
            if relaxed is None:
                continue
            low, high = relaxed
            spread = constant_difference(high, low)
            step = low.coefficient(loop.loop_var)
            if spread is not None and step and abs(step) > spread:
                return
    verdict = _distinct_by_proof(func, loop, realize, spatial)
    if verdict is None:
        verdict = _distinct_by_enumeration(func, loop, realize, spatial)
    if verdict is True:
        return
    if verdict is None:
        raise ScheduleError(f"{primitive}: cannot show that iterations of loop {loop.loop_var.name} run different "
                            f"instances of block {block.name}", ir=func, spot=loop)
    raise ScheduleError(f"{primitive}: block {block.name} writes overlapping parts of its output in different "
                        f"iterations of loop {loop.loop_var.name} (a recomputed halo); those iterations cannot run "
                        "at the same time", ir=func, spot=loop)


def _distinct_by_proof(func: PrimFunc, loop: For, realize: BlockRealize, spatial) -> bool | None:
    """Symbolically: two executed instances of the block with the same spatial bindings (and the
    same outer loop values) come from the same iteration of loop.  This is what makes a fused
    loop (`vi = f // n`, `vj = f % n`) parallel: the bindings are injective in f.  None: unknown."""
    from .tree import path_to

    path = path_to(func.body, realize) or []
    nest = [s for s in path if isinstance(s, For)]
    position = next((k for k, s in enumerate(nest) if s is loop), None)
    if position is None:
        return None
    below = nest[position:]
    facts = loop_facts(nest)
    if not _is_true_expr(realize.predicate):
        facts.append(realize.predicate)
    positive = _positive_extent_factors(nest)
    status, _ = prove_determines([nested_fused_form(v, positive) for v in spatial], [loop.loop_var],
                                 [l.loop_var for l in below], facts)
    if status == "proved":
        return True
    return False if status == "disproved" else None


class _NestedFusedForm(Mutator):
    """See nested_fused_form."""

    def __init__(self, positive: Sequence[PrimExpr] = ()) -> None:
        super().__init__()
        self.positive = list(positive)

    def visit_FloorDiv(self, node: FloorDiv) -> PrimExpr:
        new = self.generic_visit(node)
        nested = self._nest(new.a, new.b)
        return new if nested is None else nested

    def _nest(self, a: PrimExpr, b: PrimExpr) -> PrimExpr | None:
        """a // b in nested form, None when there is nothing to rewrite."""
        factors = _extent_factors(b, self.positive)
        if factors is None:
            return None
        if len(factors) >= 2:  # x // (a * b) -> x // b // a
            inner = _or(self._nest(a, factors[-1]), FloorDiv(a, factors[-1]))
            rest = _product(factors[:-1])
            return _or(self._nest(inner, rest), FloorDiv(inner, rest))
        if isinstance(a, FloorMod):
            outer = _extent_factors(a.b, self.positive)
            rest = _without(outer, factors) if outer is not None else None
            if rest:  # (x % (a * b)) // b -> (x // b) % a
                return FloorMod(FloorDiv(a.a, b), _product(rest))
        return None


def nested_fused_form(expr: PrimExpr, positive: Sequence[PrimExpr] = ()) -> PrimExpr:
    """expr with fused-loop bindings over symbolic extents put in nested form, `x // (a * b)` as
    `x // b // a` and `(x % (a * b)) // b` as `(x // b) % a`, for a prover that reasons
    linearly about one division at a time.  Both are identities when a, b >= 1; the divisors
    rewritten are products of positive constants and expressions over size vars shown >= 0
    (`_extent_factors`), or among `positive`: factors known >= 1 wherever expr is evaluated (those
    of the extent of a loop around it, `_positive_extent_factors`), so they hold wherever the
    expression is defined (no division by zero)."""
    return _NestedFusedForm(positive).visit(expr)


def _or(expr: PrimExpr | None, default: PrimExpr) -> PrimExpr:
    return default if expr is None else expr


def _extent_factors(expr: PrimExpr, positive: Sequence[PrimExpr] = ()) -> list[PrimExpr] | None:
    """The factors of a product of positive constants, expressions over size vars alone that are
    never negative (a size var, an output length such as `(h + 1) // 2`) and expressions among
    `positive`, else None."""
    if isinstance(expr, Mul):
        left, right = _extent_factors(expr.a, positive), _extent_factors(expr.b, positive)
        return None if left is None or right is None else left + right
    value = const_int(expr)
    if value is not None:
        return [IntImm(value, expr.dtype)] if value > 0 else None
    if isinstance(expr, SizeVar) or _nonnegative_over_size_vars(expr):
        return [expr]
    return [expr] if any(structural_equal(expr, p, map_free_vars=False) for p in positive) else None


def _product_terms(expr: PrimExpr) -> list[PrimExpr]:
    return _product_terms(expr.a) + _product_terms(expr.b) if isinstance(expr, Mul) else [expr]


def _positive_extent_factors(loops: Sequence[For]) -> list[PrimExpr]:
    """Factors >= 1 wherever the body of every loop runs: a loop runs only when its extent is >= 1,
    so when the extent is a product whose factors but (at most) one are shown >= 0 (positive
    constants, expressions over size vars, `_extent_factors`), each factor is >= 1; the others
    (`(h + 1) // 2 - 1`, an output length that is negative for a too small input) are listed."""
    positive: list[PrimExpr] = []
    for loop in loops:
        if not _is_zero(loop.min):
            continue
        terms = _product_terms(loop.extent)
        unknown = [t for t in terms if _extent_factors(t) is None]
        if len(unknown) == 1 and all(not free_vars(t) or all(isinstance(v, SizeVar) for v in free_vars(t))
                                     for t in terms):
            positive.append(unknown[0])
    return positive


def _is_zero(expr: PrimExpr) -> bool:
    return const_int(expr) == 0


def _nonnegative_over_size_vars(expr: PrimExpr) -> bool:
    """Whether expr uses size vars only and interval analysis (each size var >= 0) shows it >= 0."""
    from ...shape.bounds import Intervals

    used = free_vars(expr)
    if not used or not all(isinstance(v, SizeVar) for v in used) or not expr.dtype.is_integer:
        return False
    bounds = Intervals().of(expr)
    return bounds is not None and bounds[0] >= 0


def _without(factors: list[PrimExpr], remove: list[PrimExpr]) -> list[PrimExpr] | None:
    """factors with each of `remove` taken out once (structurally), None when one is missing."""
    rest = list(factors)
    for r in remove:
        k = next((k for k, f in enumerate(rest) if structural_equal(f, r, map_free_vars=False)), None)
        if k is None:
            return None
        del rest[k]
    return rest


def _product(factors: list[PrimExpr]) -> PrimExpr:
    result = factors[0]
    for f in factors[1:]:
        result = result * f
    return result


def _distinct_by_enumeration(func: PrimFunc, loop: For, realize: BlockRealize, spatial) -> bool | None:
    from .tree import path_to

    path = path_to(func.body, realize) or []
    nest = [s for s in path if isinstance(s, For)]
    ranges = loop_ranges(nest)
    if len(ranges) != len(nest) or product(hi - lo + 1 for lo, hi in ranges.values()) > (1 << 20):
        return None
    variables = [l.loop_var for l in nest]
    grids = np.meshgrid(*[np.arange(ranges[v][0], ranges[v][1] + 1, dtype=np.int64) for v in variables],
                        indexing="ij")
    env = {v: g.ravel() for v, g in zip(variables, grids)}
    size = env[variables[0]].shape if variables else (1,)
    try:
        columns = [np.broadcast_to(evaluate(value, env), size) for value in spatial]
        if not _is_true_expr(realize.predicate):
            mask = np.broadcast_to(evaluate(realize.predicate, env), size).astype(bool)
        else:
            mask = np.ones(size, dtype=bool)
    except EvaluationError:
        return None
    outer = [env[l.loop_var] for l in nest[:nest.index(loop)]] if loop in nest else []
    keys = np.stack(outer + columns, axis=1)[mask] if (outer or columns) else np.zeros((int(mask.sum()), 0))
    owner = env[loop.loop_var][mask]
    if keys.shape[1] == 0:
        return len(np.unique(owner)) <= 1
    order = np.lexsort(keys.T[::-1])
    keys, owner = keys[order], owner[order]
    same = np.all(keys[1:] == keys[:-1], axis=1)
    return not bool(np.any(same & (owner[1:] != owner[:-1])))


def _is_true_expr(expr: PrimExpr) -> bool:
    return isinstance(expr, IntImm) and expr.dtype.is_bool and expr.value == 1


CONCURRENT_KINDS = ("parallel", "vectorized", "thread_binding")


def recheck_concurrent_loops(func: PrimFunc, primitive: str) -> None:
    """Every parallel, vectorized or thread-bound loop of func still has independent iterations
    (for primitives that move blocks under existing loops)."""
    for stmt in walk(func.body):
        if isinstance(stmt, For) and stmt.kind in CONCURRENT_KINDS:
            from .cross_thread import cross_thread_reduction, is_cross_thread

            if is_cross_thread(stmt):
                cross_thread_reduction(func, stmt, primitive)
            else:
                check_no_loop_carried_dependence(func, stmt, primitive)


def access_region(loop: For, realize: BlockRealize, region, cover: bool = False):
    """[min, max] Linear forms of each dim of region (of realize's block) with the loops strictly
    below `loop` relaxed; None when they cannot be bounded.  cover: the bounds may exceed the
    accessed indices (see affine.relax); only for regions that are read."""
    binding = dict(zip((iv.var for iv in realize.block.iter_vars), realize.iter_values))
    starts = _divisions_resolved([substitute(r.min, binding) for r in region.region], loop, realize)
    used = {id(v) for index in starts for v in free_vars(index)}
    # only the loops the indices use need constant ranges (a symbolic row length below a row
    # loop does not keep the per-row results it never indexes from being bounded)
    inner_loops = [l for l in loops_above_in(loop.body, realize) if id(l.loop_var) in used]
    inner = loop_ranges(inner_loops)
    unbounded = {l.loop_var for l in inner_loops if l.loop_var not in inner}
    result = []
    indices = []
    for dim, (r, index) in enumerate(zip(region.region, starts)):
        extent = const_int(r.extent)
        if extent is None:
            return None
        moving = [l for l in inner_loops if l.loop_var in unbounded and uses_var(index, l.loop_var)]
        if moving:
            bounds = _relax_through_symbolic_loops(index, moving, inner, cover)
            if bounds is None:
                # a read lies in the buffer (accesses are in bounds), so it is covered by the
                # whole dim when that is constant (a row's lane partials read at `t` under
                # `t < lanes`, t ranging over lanes + n % lanes)
                size = const_int(region.buffer.shape[dim])
                if not cover or size is None:
                    return None
                bounds = (Sum(index.dtype, 0), Sum(index.dtype, size - 1))
            low, high = bounds
            result.append((low, high.shifted(extent - 1)))
            continue
        relaxed = relax(index, inner, cover)
        if relaxed is None:
            return None
        low, high = relaxed
        result.append((low, high.shifted(extent - 1)))
        indices.append((index, extent))
    if not cover and any(_mixed_division(index, inner) for index, _ in indices):
        if not _fills_its_box(realize, inner_loops, indices, result):
            return None
    return result


def _divisions_resolved(starts: list, loop: For, realize: BlockRealize) -> list:
    """starts with each floor div or mod that the ranges of `loop` and the constant loops below it
    decide simplified away: a blockized tile's region at `(t + 16 * io) // 16` (t < 16) is at
    `io`, one block per iteration of io, where relaxing the division as it stands would mix t
    and io."""
    if not any(collect(index, (FloorDiv, FloorMod)) for index in starts):
        return starts
    from ...shape.bounds import Bounds
    from ...shape.simplify import simplify_expr

    bounds = Bounds()
    bounds.ranges.update(loop_ranges([loop, *loops_above_in(loop.body, realize)]))
    return [simplify_expr(index, bounds) if collect(index, (FloorDiv, FloorMod)) else index for index in starts]


def _relax_through_symbolic_loops(index: PrimExpr, moving: Sequence[For], inner, cover: bool):
    """[min, max] of index over the loops below, where `moving` (of symbolic extent) enter it as
    plain terms `c * v` (v over [min, min + extent - 1]: both ends reached); None otherwise."""
    form = linear(index)
    coefficients = [(loop, form.pop(loop.loop_var)) for loop in moving]
    if any(c == 0 for _, c in coefficients):
        return None
    if any(uses_var(atom, loop.loop_var) for atom, _ in form.linear_terms() for loop in moving) or \
            any(len(mono) != 1 or mono[0][2] != 1 for _, mono in form.items()):
        return None
    from .affine import form_expr

    rest = form_expr(form, index.dtype)
    if not cover and _mixed_division(rest, inner):
        return None
    relaxed = relax(rest, inner, cover)
    if relaxed is None:
        return None
    low, high = relaxed
    for loop, c in coefficients:
        first, last = linear(loop.min), linear(loop.min + loop.extent - 1)
        low.add(first if c > 0 else last, c)
        high.add(last if c > 0 else first, c)
    return low, high


def _mixed_division(expr: PrimExpr, inner: Mapping[Var, tuple[int, int]]) -> bool:
    """expr has a floor div or mod of both relaxed and other vars (`(io * 16 + ii) // 8`)."""
    for node in collect(expr, (FloorDiv, FloorMod)):
        used = set(free_vars(node.a))
        if used & set(inner) and used - set(inner):
            return True
    return False


def _fills_its_box(realize: BlockRealize, inner_loops: Sequence[For], indices, box) -> bool:
    """The points indexed in one iteration are all of the box relaxation gave, not just inside it.

    Relaxing each dim on its own can claim a box that is not written, when split/fused
    bindings couple the dims (`(16o + t) // 8, (16o + t) % 8` for t < 12 writes 12 of a 2 x 8
    box).  The box is filled when the indices are one-to-one in the inner loops they use (a
    proof) and those loops have exactly as many points as the box."""
    from .affine import constant_difference

    if not _is_true_expr(realize.predicate) or any(extent != 1 for _, extent in indices):
        return False
    used = set()
    for index, _ in indices:
        used |= set(free_vars(index))
    loops = [l for l in inner_loops if l.loop_var in used]
    points = product(const_int(l.extent) for l in loops)
    size = 1
    for low, high in box:
        spread = constant_difference(high, low)
        if spread is None:
            return False
        size *= spread + 1
    if points != size:
        return False
    status, _ = prove_determines([index for index, _ in indices], [l.loop_var for l in loops],
                                 [l.loop_var for l in loops], loop_facts(inner_loops))
    return status == "proved"


def check_same_iteration_cover(func: PrimFunc, loop: For, producer: BlockRealize, consumer: BlockRealize,
                               buffer: Buffer, primitive: str) -> None:
    """What consumer reads of buffer in one iteration of loop was written in that iteration."""
    from .affine import constant_difference

    writes = [access_region(loop, producer, r) for r in producer.block.writes if r.buffer is buffer]
    reads = [access_region(loop, consumer, r, cover=True) for r in consumer.block.reads if r.buffer is buffer]
    for read in reads:
        covered = False
        for write in writes:
            if read is None or write is None:
                continue
            ok = True
            for (rlo, rhi), (wlo, whi) in zip(read, write):
                lo_gap, hi_gap = constant_difference(rlo, wlo), constant_difference(whi, rhi)
                if lo_gap is None or hi_gap is None or lo_gap < 0 or hi_gap < 0:
                    ok = False
                    break
            covered = covered or ok
        if not covered:
            raise ScheduleError(
                f"{primitive}: block {consumer.block.name} reads {buffer.name} written by block "
                f"{producer.block.name} in other iterations of loop {loop.loop_var.name}",
                ir=func, spot=loop)


def check_not_output_block(func: PrimFunc, location: BlockLocation, primitive: str) -> None:
    """The block writes only buffers allocated inside the function (not parameters)."""
    params = set(func.buffers)
    for region in location.block.writes:
        if region.buffer in params:
            raise ScheduleError(f"{primitive}: block {location.block.name} is an output block (it writes the "
                                f"parameter {region.buffer.name})", ir=func, spot=location.realize)


def check_not_viewed(func: PrimFunc, buffer: Buffer, primitive: str) -> None:
    """No block views buffer through a match_buffer (the view's layout would silently change)."""
    for realize in block_realizes(func.body):
        for match in realize.block.match_buffers:
            if match.source.buffer is buffer:
                raise ScheduleError(f"{primitive}: block {realize.block.name} views {buffer.name} through "
                                    f"match_buffer {match.buffer.name}; change the layout before tensorizing",
                                    ir=func, spot=realize)


def product(values: Iterable[int]) -> int:
    """The product of ints (1 for none)."""
    result = 1
    for v in values:
        result *= v
    return result
