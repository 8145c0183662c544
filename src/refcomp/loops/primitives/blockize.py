"""Primitive `blockize(loop)`: wrap the loop nest under a loop in a new outer block.

Requires: the loop's body is a chain of loops around exactly one BlockRealize (a perfect nest),
and every binding of that block divides into an outer part (the loops above `loop`) and an inner
part (the loops from `loop` down) as `binding = outer * E + inner` with `inner` ranging densely
over [0, E).  Bindings that are entirely inner, or entirely outer, always divide.

Effect: `loop` is replaced by a BlockRealize of a new block `<name>_o` whose iter vars are the
outer parts (`v_o` over [0, ceil(extent / E))), whose reads/writes are the inner block's regions
covered over the inner loops, and whose body is the original loop nest; the inner block keeps its
iter vars, body and init, and its bindings become `v_o * E + inner`.

    for i0 in range(8):                          for i0 in range(8):
      for i1 in range(16):          blockize(i1)   block B_o(vi_o: S[8] = i0):
        block B(vi: S[128] = i0*16 + i1)   ->        reads A[vi_o*16 : +16]  writes B[...]
          B[vi] = A[vi] * 2                           for i1 in range(16):
                                                        block B(vi: S[128] = vi_o*16 + i1)
                                                          B[vi] = A[vi] * 2
"""
from __future__ import annotations

from typing import Sequence

from ...ast import (
    Block, BlockRealize, BufferRegion, For, IntImm, IterVar, PrimExpr, PrimFunc, Range, SizeVar, Stmt, Var,
    as_int, const, substitute,
)
from ...errors import ScheduleError
from .lookup import locate_loop
from .tensorize_affine import Affine, normalize
from .tree import fresh_block_name, replace_in_func


def blockize(func: PrimFunc, target: For | Sequence[Block], preserve_unit_iters: bool = True
             ) -> tuple[PrimFunc, Block]:
    """The function with the nest under `target` (a loop) wrapped in a new outer block, and that block."""
    if not isinstance(target, For):
        raise ScheduleError("blockize: only a loop target is supported; pass the loop at the top of "
                            f"the nest to wrap (got {type(target).__name__})", ir=func)
    locate_loop(func, target, "blockize")
    realize, outer = blockize_realize(func, target, preserve_unit_iters)
    new_func = replace_in_func(func, {id(target): outer})
    return new_func, outer.block


def blockize_realize(func: PrimFunc, loop: For, preserve_unit_iters: bool = True
                     ) -> tuple[BlockRealize, BlockRealize]:
    """(the inner realize, the new outer realize replacing `loop`); `func` is used for errors and names."""
    chain, realize = _perfect_nest(func, loop)
    path = locate_loop(func, loop, "blockize")
    enclosing = {s.loop_var: s for s in path[:-1] if isinstance(s, For)}
    inner_vars = {l.loop_var for l in chain}
    bounds = {l.loop_var: (as_int(l.min), as_int(l.min) + as_int(l.extent) - 1)
              for l in chain if as_int(l.min) is not None and as_int(l.extent) is not None}
    block = realize.block
    outer_iters: list[IterVar] = []
    outer_values: list[PrimExpr] = []
    inner_values: list[PrimExpr] = []
    for iv, value in zip(block.iter_vars, realize.iter_values):
        outer_part, inner_part, extent = _divide(func, block, iv, value, inner_vars, bounds)
        if inner_part is None:  # entirely outer: the outer block takes the whole iter var
            outer_var = Var(iv.var.name + "_o", iv.var.dtype)
            outer_iters.append(IterVar(outer_var, iv.dom, iv.kind))
            outer_values.append(value)
            inner_values.append(outer_var)
            continue
        if outer_part is None:  # entirely inner
            inner_values.append(inner_part)
            continue
        outer_var = Var(iv.var.name + "_o", iv.var.dtype)
        # The domain must hold every value the binding takes, including those of a partial
        # last tile that the inner predicate switches off: take the binding's own range when
        # the enclosing loops give it, else ceil(extent / E).
        dom_extent = _binding_extent(outer_part, enclosing)
        if dom_extent is None:
            dom_extent = _ceil_div(iv.dom.extent, extent)
        outer_iters.append(IterVar(outer_var, Range(const(0, iv.dom.extent.dtype), dom_extent), iv.kind))
        outer_values.append(outer_part)
        inner_values.append(outer_var * extent + inner_part)
    # The inner block sits inside the outer one now: its predicate speaks of the outer block's
    # iter vars where an outer loop is bound whole to one of them.
    predicate = _predicate_over_iters(realize.predicate, outer_iters, outer_values, inner_vars)
    inner_realize = realize.with_(iter_values=tuple(inner_values), predicate=predicate)
    # The regions the outer block touches: the inner block's, with its iter vars replaced by
    # their new bindings and then covered over the inner loops.
    binding = {iv.var: v for iv, v in zip(block.iter_vars, inner_values)}
    extents = {l.loop_var: (l.min, l.extent) for l in chain}
    reads = tuple(_cover(region, binding, extents, bounds) for region in block.reads)
    writes = tuple(_cover(region, binding, extents, bounds) for region in block.writes)
    outer_init = None
    if block.init is not None:
        outer_init = _init_nest(func, chain, inner_realize)
    if outer_init is not None:
        # The reduction's start now belongs to the outer block: it zeroes the whole tile once,
        # before its first reduction step, and the inner block is a plain update (what tensor
        # intrinsics describe).  An outer block without a reduce iter gets a unit one, so it is a
        # reduction block whose init runs at every instance (the tile holds the whole reduction).
        inner_realize = inner_realize.with_(block=inner_realize.block.with_(init=None))
        if not any(iv.kind == "reduce" for iv in outer_iters):
            reduce_dtype = next(iv.var.dtype for iv in block.iter_vars if iv.kind == "reduce")
            outer_iters.append(IterVar(Var(f"{block.name}_r_o", reduce_dtype),
                                       Range.from_extent(const(1, reduce_dtype)), "reduce"))
            outer_values.append(const(0, reduce_dtype))
    body = _rebuild_chain(chain, inner_realize)
    name = fresh_block_name(func.body, block.name + "_o")
    outer_block = Block(name, tuple(outer_iters), reads, writes, body, init=outer_init)
    outer = BlockRealize(tuple(outer_values), IntImm(1, "bool"), outer_block)
    return inner_realize, outer


def _init_nest(func: PrimFunc, chain: list[For], realize: BlockRealize) -> Stmt | None:
    """The inner block's init as a loop nest over the tile's spatial loops, or None when the
    loops do not separate into spatial-only and reduce-only ones (then the init stays inside)."""
    block = realize.block
    spatial_loops: set[Var] = set()
    reduce_loops: set[Var] = set()
    chain_vars = {l.loop_var for l in chain}
    for iv, value in zip(block.iter_vars, realize.iter_values):
        used = _vars_of(value) & chain_vars
        (spatial_loops if iv.kind == "spatial" else reduce_loops).update(used)
    if spatial_loops & reduce_loops or _vars_of(realize.predicate) & reduce_loops:
        return None
    fresh = {l.loop_var: Var(l.loop_var.name + "_init", l.loop_var.dtype) for l in chain
             if l.loop_var in spatial_loops}
    iters, values, renamed = [], [], {}
    for iv, value in zip(block.iter_vars, realize.iter_values):
        if iv.kind != "spatial":
            continue
        new_var = Var(iv.var.name + "_init", iv.var.dtype)
        renamed[iv.var] = new_var
        iters.append(IterVar(new_var, iv.dom, "spatial"))
        values.append(substitute(value, fresh))
    writes = []
    for region in block.writes:
        if any(_vars_of(r.min) & {iv.var for iv in block.iter_vars if iv.kind == "reduce"} for r in region.region):
            return None
        writes.append(substitute(region, renamed))
    init_block = Block(fresh_block_name(func.body, block.name + "_init"), tuple(iters), (), tuple(writes),
                       substitute(block.init, renamed))
    nest: Stmt = BlockRealize(tuple(values), substitute(realize.predicate, fresh), init_block)
    for loop in reversed(chain):
        if loop.loop_var in fresh:
            nest = For(fresh[loop.loop_var], loop.min, loop.extent, "serial", nest)
    return nest


def _perfect_nest(func: PrimFunc, loop: For) -> tuple[list[For], BlockRealize]:
    chain = [loop]
    stmt: Stmt = loop.body
    while isinstance(stmt, For):
        chain.append(stmt)
        stmt = stmt.body
    if not isinstance(stmt, BlockRealize):
        raise ScheduleError(
            f"blockize: the nest under loop {loop.loop_var.name} must be loops around exactly one block; "
            f"found {type(stmt).__name__}", ir=func, spot=stmt)
    return chain, stmt


def _divide(func: PrimFunc, block: Block, iv: IterVar, value: PrimExpr, inner_vars: set[Var],
            bounds: dict) -> tuple[PrimExpr | None, PrimExpr | None, PrimExpr | int]:
    """(outer / E, inner, E) for one binding; outer None when entirely inner, inner None when entirely outer."""
    used = _vars_of(value)
    if not used & inner_vars:
        return value, None, 1
    form = normalize(value, bounds)
    fail = lambda why: ScheduleError(  # noqa: E731
        f"blockize: the binding of {block.name}.{iv.var.name} does not divide into outer * E + inner "
        f"over the loops being wrapped: {why}", ir=func, spot=value,
        hint="split the loops so that the wrapped loops form a whole tile of each iter var")
    if form is None:
        if used <= inner_vars:
            return None, value, iv.dom.extent
        raise fail("it is not affine")
    inner_terms = {t: c for t, c in form.terms if _term_vars(t) & inner_vars}
    outer_terms = {t: c for t, c in form.terms if not _term_vars(t) & inner_vars}
    mixed = [t for t in inner_terms if _term_vars(t) - inner_vars]
    if mixed:
        raise fail("a division mixes wrapped and outer loops")
    inner = Affine.make(inner_terms, 0)
    outer = Affine.make(outer_terms, form.const)
    if outer.is_const() and outer.const == 0:
        return None, value, iv.dom.extent
    extent = _dense_extent(inner, bounds)
    if extent is None:
        raise fail("the wrapped loops do not cover a dense range [0, E) of it")
    if outer.const % extent or any(c % extent for _, c in outer.terms):
        raise fail(f"the outer part is not a multiple of the tile extent {extent}")
    outer_quotient = Affine.make({t: c // extent for t, c in outer.terms}, outer.const // extent)
    return outer_quotient.to_expr(value.dtype), inner.to_expr(value.dtype), extent


def _dense_extent(inner: Affine, bounds: dict) -> int | None:
    """E when inner = sum c_t * l_t enumerates [0, E) exactly once (mixed radix), else None."""
    terms = []
    for term, coef in inner.terms:
        if not isinstance(term, Var) or term not in bounds or coef <= 0:
            return None
        lo, hi = bounds[term]
        if lo != 0:
            return None
        terms.append((coef, hi + 1))
    expected = 1
    for coef, extent in sorted(terms):
        if coef != expected:
            return None
        expected *= extent
    return expected


def _predicate_over_iters(predicate: PrimExpr, outer_iters: list[IterVar], outer_values: list[PrimExpr],
                          inner_vars: set[Var]) -> PrimExpr:
    """`a < b` rewritten over the outer block's iter vars where their bindings appear in it whole.

    After blockize the inner block's predicate sits inside the outer block, which should see the
    outer loops only through its iter vars: `i_0 * 96 + i_1 * 6 + i_2 < n` with v_o = i_0 * 16 + i_1
    becomes `v_o * 6 + i_2 < n`.  Anything else is kept as it is (it is still correct).
    """
    from ...ast import LT

    if not isinstance(predicate, LT) or not predicate.a.dtype.is_integer:
        return predicate
    a, b = normalize(predicate.a), normalize(predicate.b)
    if a is None:
        return predicate
    # a bound that is not affine but over size vars only (a row count batch * seq) stays as it is
    opaque = predicate.b if b is None and all(isinstance(v, SizeVar) for v in _vars_of(predicate.b)) else None
    if b is None and opaque is None:
        return predicate
    form = a if opaque is not None else a - b
    for iv, value in zip(outer_iters, outer_values):
        vform = normalize(value)
        if vform is None or not vform.terms:
            continue
        first, coef = vform.terms[0]
        have = form.coef(first)
        if have == 0 or have % coef:
            continue
        ratio = have // coef
        if all(form.coef(t) == ratio * c for t, c in vform.terms):
            form = form - vform.scale(ratio) + Affine(((iv.var, ratio),), 0)
    outer_loops = {v for value in outer_values for v in _vars_of(value)}
    if form.vars() & outer_loops:
        return predicate
    dtype = predicate.a.dtype
    if opaque is not None:
        return LT(form.to_expr(dtype), opaque)
    return LT(Affine(form.terms, 0).to_expr(dtype), const(-form.const, dtype))


def _cover(region: BufferRegion, binding: dict, extents: dict, bounds: dict) -> BufferRegion:
    """region with iter vars replaced by binding, widened to every value of the inner loops.

    A dimension whose start is not affine with nonnegative steps in the inner loops is taken
    whole: a block's regions may over-approximate, never under-approximate.
    """
    inner = set(extents)
    ranges = []
    for dim, rng in zip(region.buffer.shape, region.region):
        lo = substitute(rng.min, binding)
        span = substitute(rng.extent, binding)
        covered = _cover_dim(lo, span, inner, extents, bounds)
        ranges.append(covered if covered is not None else Range(const(0, dim.dtype), dim))
    return BufferRegion(region.buffer, tuple(ranges))


def _cover_dim(lo: PrimExpr, span: PrimExpr, inner: set, extents: dict, bounds: dict) -> Range | None:
    form = normalize(lo, bounds)
    if form is None or _vars_of(span) & inner:
        return None
    new_min = Affine.make({t: c for t, c in form.terms if not _term_vars(t) & inner}, form.const)
    new_extent = span
    for term, coef in form.terms:
        if not _term_vars(term) & inner:
            continue
        if not isinstance(term, Var) or coef < 0:
            return None
        loop_min, loop_extent = extents[term]
        if as_int(loop_min) is None:
            return None
        new_min = new_min + Affine((), coef * as_int(loop_min))
        if as_int(loop_extent) is not None:
            growth = const((as_int(loop_extent) - 1) * coef, span.dtype)
        else:
            growth = (loop_extent - 1) * coef
        new_extent = _add(new_extent, growth)
    return Range(new_min.to_expr(lo.dtype), new_extent)


def _add(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    if as_int(a) is not None and as_int(b) is not None:
        return const(as_int(a) + as_int(b), a.dtype)
    if as_int(b) == 0:
        return a
    return a + b


def _binding_extent(value: PrimExpr, loops: dict) -> PrimExpr | None:
    """1 + the largest value of an affine binding over its loops (None when that is not clear)."""
    form = normalize(value)
    if form is None or form.const < 0:
        return None
    known = {v: (0, as_int(l.extent) - 1) for v, l in loops.items()
             if as_int(l.min) == 0 and as_int(l.extent) is not None}
    rng = form.bounds(known)
    if rng is not None:
        return const(rng[1] + 1, value.dtype) if rng[0] >= 0 else None
    total: PrimExpr = const(form.const + 1, value.dtype)
    for term, coef in form.terms:
        loop = loops.get(term) if isinstance(term, Var) else None
        if loop is None or coef < 0 or as_int(loop.min) != 0:
            return None
        extent = loop.extent if loop.extent.dtype == value.dtype else loop.extent.astype(value.dtype)
        if as_int(extent) is not None:
            total = _add(total, const(coef * (as_int(extent) - 1), value.dtype))
        else:
            total = _add(total, (extent - 1) * coef)
    return total


def _ceil_div(extent: PrimExpr, factor: int) -> PrimExpr:
    value = as_int(extent)
    if value is not None:
        return const(-(-value // factor), extent.dtype)
    return (extent + (factor - 1)) // factor


def _rebuild_chain(chain: list[For], body: Stmt) -> Stmt:
    for loop in reversed(chain):
        body = loop.with_(body=body)
    return body


def _vars_of(expr: PrimExpr) -> set[Var]:
    from ...ast import free_vars

    return set(free_vars(expr))


def _term_vars(term) -> set[Var]:
    return {term} if isinstance(term, Var) else term.form.vars()
