"""Combining per-thread partial results with warp shuffles instead of one thread's loop.

The row-reduction recipes leave, after rfactor, a combine step that thread 0 runs alone:

    for k in range(32):                       # one iteration per partial result (W in general)
        if thread_x < 1:                      # thread 0 only
            if k == 0: X[i] = init            # (the reduction's init, when present)
            X[i] = op(X[i], P[base + k])      # op: sum, max or min

When the block is exactly one warp along threadIdx.x (extent 32, no other thread axis) -- or W
threads, W a power of two below 32, and a loop of W iterations: the first W lanes of a warp --
this is replaced by

    let r = warp_reduce(op, P[base + thread_x], W)   # every thread: a shuffle butterfly
    if thread_x < 1:
        if True: X[i] = init                      # as before
        X[i] = op(X[i], r)

which gives the same value up to the reassociation of op (exact for max/min; for floating-point
sums the rounding of a tree instead of a chain, as on every GPU reduction).
"""
from __future__ import annotations

from ..ast import (
    EQ, LT, Add, Buffer, BufferLoad, BufferStore, Call, For, IfThenElse, IntImm, LetStmt, Max, Min,
    Mutator, PrimExpr, SeqStmt, Stmt, StringImm, Var, free_vars, substitute,
)
from ..ast.expr import as_int
from ..ast.structural import structural_equal

WARP_SIZE = 32
_OPS = {Add: "sum", Max: "max", Min: "min"}


WIDTHS = (2, 4, 8, 16, 32)


def use_warp_reductions(body: Stmt, thread_x: Var | None, extents: dict[Var, int]) -> Stmt:
    """body (one kernel's per-thread program) with single-thread combine loops turned into shuffles."""
    width = extents.get(thread_x) if thread_x is not None else None
    if width not in WIDTHS:
        return body
    if any(extent != 1 for var, extent in extents.items() if var is not thread_x):
        return body
    return _Rewriter(thread_x, width).visit(body)


class _Rewriter(Mutator):
    def __init__(self, thread_x: Var, width: int = WARP_SIZE) -> None:
        super().__init__()
        self.thread_x = thread_x
        self.width = width

    def visit_For(self, loop: For) -> Stmt:
        rewritten = self.match(loop)
        return rewritten if rewritten is not None else self.generic_visit(loop)

    def match(self, loop: For) -> Stmt | None:
        if loop.kind not in ("serial", "unrolled") or as_int(loop.min) != 0 or as_int(loop.extent) != self.width:
            return None
        guard = loop.body
        if not (isinstance(guard, IfThenElse) and guard.else_case is None and _is_thread_zero(guard.condition,
                                                                                            self.thread_x)):
            return None
        inner = guard.then_case.stmts if isinstance(guard.then_case, SeqStmt) else (guard.then_case,)
        init: Stmt | None = None
        if len(inner) == 2:
            first = inner[0]
            if not (isinstance(first, IfThenElse) and first.else_case is None
                    and isinstance(first.condition, EQ) and first.condition.a is loop.loop_var
                    and as_int(first.condition.b) == 0 and isinstance(first.then_case, BufferStore)):
                return None
            init = first.then_case
            update = inner[1]
        elif len(inner) == 1:
            update = inner[0]
        else:
            return None
        if not isinstance(update, BufferStore) or type(update.value) not in _OPS:
            return None
        k = loop.loop_var
        target = BufferLoad(update.buffer, update.indices)
        value = update.value
        if _same(value.a, target):
            partial = value.b
        elif _same(value.b, target) and isinstance(value, Add):
            partial = value.a
        else:
            return None
        if any(k in free_vars(i) for i in update.indices) or k not in free_vars(partial):
            return None
        if init is not None and (init.buffer is not update.buffer or not all(
                _same(a, b) for a, b in zip(init.indices, update.indices)) or k in free_vars(init.value)):
            return None
        if update.value.dtype.name not in ("float32", "float64", "int32", "int64"):
            return None
        lane_value = substitute(partial, {k: self.thread_x.astype(k.dtype)})
        reduced = Var(update.buffer.name + "_warp", update.value.dtype)
        call = Call("warp_reduce", (StringImm(_OPS[type(value)]), lane_value, IntImm(self.width, "int32")),
                    update.value.dtype)
        combined = type(value)(target, reduced)
        steps = ([init] if init is not None else []) + [BufferStore(update.buffer, combined, update.indices)]
        body = IfThenElse(guard.condition, steps[0] if len(steps) == 1 else SeqStmt(tuple(steps)))
        return LetStmt(reduced, call, body)


def _same(a: PrimExpr, b: PrimExpr) -> bool:
    return structural_equal(a, b, map_free_vars=False)


def _is_thread_zero(condition: PrimExpr, thread_x: Var) -> bool:
    if isinstance(condition, LT):
        return condition.a is thread_x and as_int(condition.b) == 1
    if isinstance(condition, EQ):
        return condition.a is thread_x and as_int(condition.b) == 0
    return False


def is_warp_reduce(node) -> bool:
    return isinstance(node, Call) and node.op == "warp_reduce"


__all__ = ["use_warp_reductions", "is_warp_reduce", "WARP_SIZE", "IntImm", "Buffer"]
