"""May the iterations of a loop run as SIMD lanes?  (What `#pragma omp simd` promises the compiler.)

`lanes_independent(loop)` is True when no iteration of loop can see or overwrite memory another
iteration touches, judged on the lowered, flattened body: every buffer stored to in the body
(except buffers allocated inside it, which are private to an iteration) is stored to and loaded
from at one and the same index, that index is linear in the loop var with a non-zero
coefficient c, and the loops inside move the rest of it by less than |c| (so different
iterations touch different elements; indices are assumed not to wrap, as spec/shapes.md does);
and the body makes no call with effects.  A loop that fails this test must not
be emitted as a SIMD loop: `vectorize` turns it into a serial loop.
"""
from __future__ import annotations

from typing import Any

from ...ast import (
    Allocate, BufferLoad, BufferStore, Call, For, Let, LetStmt, PrimExpr, Var, post_order_visit,
)
from ...ast.expr import as_int
from ...ast.functor import free_vars, is_pure
from ...shape.keys import expr_key
from ...shape.simplify import simplify_expr
from ...shape.canonical import inner_span, linear_form


def lanes_independent(loop: For) -> bool:
    """True when loop's iterations touch disjoint memory and have no effects (see module docstring)."""
    var = loop.loop_var
    inner_vars: dict[Var, int | None] = {}  # var -> constant extent (None: unknown)
    private: set[int] = set()
    accesses: dict[int, list[PrimExpr]] = {}
    written: set[int] = set()
    effects = False

    def look(node: Any) -> None:
        nonlocal effects
        if isinstance(node, For):
            inner_vars[node.loop_var] = as_int(node.extent)
        elif isinstance(node, (LetStmt, Let)):
            inner_vars[node.var] = None
        elif isinstance(node, Allocate):
            private.add(id(node.buffer))
        elif isinstance(node, (BufferLoad, BufferStore)):
            index = node.indices[0] if len(node.indices) == 1 else None
            accesses.setdefault(id(node.buffer), []).append(index)
            if isinstance(node, BufferStore):
                written.add(id(node.buffer))
        elif isinstance(node, Call) and not is_pure(node) and node.op != "assume":
            effects = True

    post_order_visit(loop.body, look)
    if effects:
        return False
    for buffer in written - private:
        indices = accesses[buffer]
        if any(index is None for index in indices):
            return False
        first = simplify_expr(indices[0])
        key = expr_key(first)
        if any(expr_key(simplify_expr(index)) != key for index in indices[1:]):
            return False
        if not _lanes_apart(first, var, inner_vars):
            return False
    return True


def _lanes_apart(index: PrimExpr, var: Var, inner_vars: dict[Var, int | None]) -> bool:
    """index = c * var + rest, c != 0, and the inner loops move rest by less than |c|."""
    from .vector_expr import _linear_in

    if not _linear_in(index, var):
        return False
    form = linear_form(index)
    coefficient = form.pop(var)
    if coefficient == 0:
        return False
    if not any(v in inner_vars for v in free_vars(index)):
        return True
    span = inner_span(form.to_expr(wrap=True), inner_vars)
    return span is not None and span < abs(coefficient)
