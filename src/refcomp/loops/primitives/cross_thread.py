"""Cross-thread reductions: a reduction loop bound to `threadIdx.*`.

`bind` accepts a loop that carries a reduction when `cross_thread_reduction` finds the shape below;
the CUDA backend (`emit_cuda.cross_thread`) lowers it to per-thread partial results combined in
shared memory.  The analysis lives here so that the primitive and the backend agree on one shape.

Requires (each a named check, a `ScheduleError` naming the loop or block):
  * the loop binds a threadIdx axis, has a constant extent and holds exactly one block;
  * the block is a reduction `out[w] = out[w] op x` with op `+`, `max` or `min` (x does not read out),
    and its init, when it has one, stores a value that uses no reduce iter into the same element
    (the init can be separated: it is combined with the reduced value once, after the reduction);
  * no binding of the block reads memory;
  * the *reduction nest*, the perfect chain of loops directly around the block that bind reduce
    iters only (serial or unrolled, but the bound loop), holds the bound loop and every loop that
    a reduce iter of the block uses.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...ast import Add, BlockRealize, BufferLoad, BufferStore, For, Max, Min, PrimExpr, PrimFunc, collect, free_vars
from ...ast.structural import structural_equal
from ...errors import ScheduleError
from .legality import const_int, loop_var_uses
from .lookup import locate_loop
from .tree import walk

COMBINERS = (Add, Max, Min)


@dataclass(frozen=True)
class CrossThreadReduction:
    """What a cross-thread reduction is made of (all nodes of the function it was found in)."""

    loop: For  # the loop bound to threadIdx
    chain: tuple[For, ...]  # the reduction nest, outermost first (holds loop)
    realize: BlockRealize
    combine: type  # Add, Max or Min
    update: BufferStore  # out[w] = out[w] op operand
    operand: PrimExpr
    init: PrimExpr | None  # the init value, None without init

    @property
    def extent(self) -> int:
        return const_int(self.loop.extent)


def carries_reduction(loop: For) -> bool:
    """Some block below loop uses the loop var in a reduce iter's binding."""
    return any(isinstance(s, BlockRealize) and loop_var_uses(s, loop.loop_var)[1] for s in walk(loop.body))


def is_cross_thread(loop: For) -> bool:
    """loop is bound to a threadIdx axis and carries a reduction."""
    return loop.kind == "thread_binding" and (loop.thread_binding or "").startswith("threadIdx") \
        and carries_reduction(loop)


def cross_thread_reduction(func: PrimFunc, loop: For, primitive: str) -> CrossThreadReduction:
    """The parts of the cross-thread reduction of loop (module docstring), or a ScheduleError."""
    path = locate_loop(func, loop, primitive)
    name = loop.loop_var.name

    def fail(message: str, spot=loop):
        raise ScheduleError(f"{primitive}: cross-thread reduction over loop {name}: {message}", ir=func, spot=spot)

    if const_int(loop.extent) is None:
        fail("the loop needs a constant extent")
    realizes = [s for s in walk(loop.body) if isinstance(s, BlockRealize)]
    if len(realizes) != 1:
        fail(f"the loop must hold exactly one block, it holds {len(realizes)}")
    realize = realizes[0]
    block = realize.block
    combine, update, operand, init = _reducer(func, realize, fail)
    from ..passes.simplify import reads_memory

    if any(reads_memory(v) for v in realize.iter_values):
        fail(f"a binding of block {block.name} reads memory", realize)
    # The perfect chain of reduce-only loops directly around the block.
    chain: list[For] = []
    stmt = loop
    while True:  # down from loop
        chain.append(stmt)
        if stmt.body is realize:
            break
        if not isinstance(stmt.body, For):
            fail(f"the loops between it and block {block.name} must be a perfect nest", stmt)
        stmt = stmt.body
    for above in reversed([s for s in path[:-1] if isinstance(s, For)]):  # up from loop
        if above.body is not chain[0]:
            break
        spatial, reduce = loop_var_uses(realize, above.loop_var)
        if spatial or not reduce or above.kind not in ("serial", "unrolled"):
            break
        chain.insert(0, above)
    for member in chain:
        spatial, reduce = loop_var_uses(realize, member.loop_var)
        if spatial or not reduce:
            fail(f"loop {member.loop_var.name} of the reduction nest must bind reduce iters only", member)
        if member is not loop and member.kind not in ("serial", "unrolled"):
            fail(f"loop {member.loop_var.name} of the reduction nest is {member.kind}; only the bound loop may be "
                 "concurrent", member)
    members = {id(m) for m in chain}
    for above in [s for s in path[:-1] if isinstance(s, For)]:
        if id(above) not in members and loop_var_uses(realize, above.loop_var)[1]:
            fail(f"loop {above.loop_var.name} binds a reduce iter of block {block.name} outside the reduction "
                 "nest directly around the block (it holds other statements)", above)
    if init is not None:
        reduce_vars = {iv.var for iv in block.iter_vars if iv.kind == "reduce"}
        if set(free_vars(init)) & reduce_vars:
            fail(f"the init of block {block.name} uses a reduce iter", realize)
    return CrossThreadReduction(loop, tuple(chain), realize, combine, update, operand, init)


def _reducer(func, realize: BlockRealize, fail):
    block = realize.block
    body = block.body
    if not isinstance(body, BufferStore) or not isinstance(body.value, COMBINERS):
        fail(f"block {block.name} must be one store out = out + x (or max, min)", realize)
    value = body.value
    for own, other in ((value.a, value.b), (value.b, value.a)):
        if isinstance(own, BufferLoad) and own.buffer is body.buffer and all(
                structural_equal(a, b, map_free_vars=False) for a, b in zip(own.indices, body.indices)):
            if any(l.buffer is body.buffer for l in collect(other, BufferLoad)):
                break
            init = block.init
            if init is not None and not (isinstance(init, BufferStore) and init.buffer is body.buffer and all(
                    structural_equal(a, b, map_free_vars=False) for a, b in zip(init.indices, body.indices))):
                fail(f"the init of block {block.name} must be one store to the element the update writes", realize)
            return type(value), body, other, (init.value if init is not None else None)
    fail(f"block {block.name} must be one store out = out + x (or max, min)", realize)


__all__ = ["COMBINERS", "CrossThreadReduction", "carries_reduction", "cross_thread_reduction", "is_cross_thread"]
