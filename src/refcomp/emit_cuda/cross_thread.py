"""Lowering of cross-thread reductions (a reduction loop bound to threadIdx; spec/cuda.md).

A block `out[w] = out[w] op x` whose reduction nest holds a loop bound to threadIdx.x of extent T
(`loops.primitives.cross_thread` says which shapes `bind` accepts) becomes, in place of the nest
(before blocks are lowered, so later passes see ordinary GPU code):

    allocate red[Y.., T] (shared)                   # Y..: the enclosing threadIdx loops
    for t in threadIdx.x(T):                        # 1. each thread's partial result
        red[.., t] = identity(op)
        for <the other loops of the nest>: if predicate: red[.., t] = op(red[.., t], x)
    for t in threadIdx.x(T - P): red[.., t] = op(red[.., t], red[.., t + P])   # P: largest power of 2 <= T
    for t in threadIdx.x(h): red[.., t] = op(red[.., t], red[.., t + h])       # h = P/2, ..., 1
    for t in threadIdx.x(1): out[w] = op(init, red[.., 0])                      # 3. write-back

Each tree step is its own bound loop, so the barrier planner separates the steps with
`__syncthreads()` and the simulator runs them as phases.  An output in `local` scope (one copy
per thread) is written back by every thread: the result in red[.., 0] is an all-reduce.

When T is a power of two up to 32 and the output is not local, the tree is replaced by the
combine loop of the row-reduction recipes (`for k in range(T): thread 0: out[w] = op(out[w],
red[.., k])`), which the backend turns into one warp shuffle (`warp_reduce`) when the block is
exactly T threads (one warp, or its first T lanes); in a wider block it stays thread 0's loop.
Without an init the write-back is `out[w] = op(out[w], red[.., 0])`.
"""
from __future__ import annotations

from ..ast import (
    EQ, Allocate, BufferLoad, BufferStore, For, IfThenElse, PrimFunc, Stmt, Var, seq, substitute,
)
from ..ast.buffer import Buffer
from ..ast.expr import as_int, const
from ..loops.primitives.cross_thread import cross_thread_reduction, is_cross_thread
from ..loops.primitives.reduction import reduction_identity
from ..loops.primitives.tree import path_to, replace, walk
from ..shape.simplify import is_true
from .warp_reduce import WIDTHS


def lower_cross_thread_reductions(func: PrimFunc) -> PrimFunc:
    """func with every cross-thread reduction rewritten as above (the CUDA before_blocks hook)."""
    counts: dict[str, int] = {}  # one <out>_red buffer per reduction into out: <out>_red, <out>_red1, ...
    while True:
        loop = next((s for s in walk(func.body) if isinstance(s, For) and is_cross_thread(s)), None)
        if loop is None:
            return func
        info = cross_thread_reduction(func, loop, "cuda")
        path = path_to(func.body, info.chain[0]) or []
        count = counts.get(info.update.buffer.name, 0)
        counts[info.update.buffer.name] = count + 1
        func = func.with_(body=replace(func.body, {id(info.chain[0]): _rewrite(info, path, count)}))


def _rewrite(info, path, count: int) -> Stmt:
    realize, update, loop = info.realize, info.update, info.loop
    block = realize.block
    tag = loop.thread_binding
    extent = info.extent
    dtype = update.buffer.dtype
    enclosing = [s for s in path[:-1] if isinstance(s, For)]
    outer_threads = [s for s in enclosing if (s.thread_binding or "").startswith("threadIdx")
                     and s.thread_binding != tag]
    red = Buffer(f"{update.buffer.name}_red{count if count else ''}", tuple(as_int(s.extent) for s in outer_threads)
                 + (extent,), dtype, scope="shared")
    prefix = tuple(s.loop_var for s in outer_threads)
    bindings = {iv.var: value for iv, value in zip(block.iter_vars, realize.iter_values)}
    out_index = tuple(substitute(i, bindings) for i in update.indices)
    operand = substitute(info.operand, bindings)
    combine = info.combine

    def at(t):
        return BufferLoad(red, prefix + (t,))

    def put(t, value) -> Stmt:
        return BufferStore(red, value, prefix + (t,))

    def bound(var_name: str, n: int, body_of) -> For:
        t = Var(var_name, loop.loop_var.dtype)
        return For(t, 0, n, "thread_binding", body_of(t), thread_binding=tag)

    # 1. partial results
    tx = loop.loop_var
    accumulate: Stmt = put(tx, combine(at(tx), operand))
    if not is_true(realize.predicate):
        accumulate = IfThenElse(realize.predicate, accumulate)
    for member in reversed(info.chain):
        if member is not loop:
            accumulate = member.with_(body=accumulate)
    start = put(tx, reduction_identity(combine, dtype))
    steps: list[Stmt] = [For(tx, 0, extent, "thread_binding", seq(start, accumulate),
                             thread_binding=tag)]
    out = BufferLoad(update.buffer, out_index)
    if extent in WIDTHS and update.buffer.scope != "local":
        # 2'. thread 0 folds the T partials (one warp shuffle where the block is T threads)
        k = Var("k", loop.loop_var.dtype)
        fold = BufferStore(update.buffer, combine(out, at(k)), out_index)
        if info.init is not None:
            fold = seq(IfThenElse(EQ(k, const(0, k.dtype)), BufferStore(update.buffer, info.init, out_index)), fold)
        steps.append(For(k, 0, extent, "serial", bound(f"{tx.name}_0", 1, lambda t: fold)))
    else:
        # 2. the tree
        power = 1
        while power * 2 <= extent:
            power *= 2
        stages = ([(power, extent - power)] if extent > power else []) + [
            (h, h) for h in (power >> s for s in range(1, power.bit_length())) if h >= 1]
        for half, width in stages:
            steps.append(bound(f"{tx.name}_{half}", width,
                               lambda t, half=half: put(t, combine(at(t), at(t + half)))))
        # 3. write-back
        result = at(const(0, tx.dtype))
        value = combine(info.init, result) if info.init is not None else combine(out, result)
        write = BufferStore(update.buffer, value, out_index)
        steps.append(write if update.buffer.scope == "local" else bound(f"{tx.name}_0", 1, lambda t: write))
    body: Stmt = Allocate(red, seq(*steps))
    if not any(s.kind == "thread_binding" for s in enclosing):  # a kernel of one block
        body = For(Var("b_" + tx.name, tx.dtype), 0, 1, "thread_binding", body, thread_binding="blockIdx.x")
    return body


__all__ = ["lower_cross_thread_reductions"]
