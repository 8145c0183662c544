"""May the iterations of a loop run as SIMD lanes?  (What `#pragma omp simd` promises the compiler.)

`lanes_independent(loop)` is True when no iteration of loop can see or overwrite memory another
iteration touches, judged on the lowered, flattened body: every buffer stored to in the body
(except buffers allocated inside it, which are private to an iteration) is stored to and loaded
from at one and the same index, that index is linear in the loop var with a non-zero
coefficient (so different iterations touch different elements) and uses no variable bound
inside the body; and the body makes no call with effects.  A loop that fails this test must not
be emitted as a SIMD loop: `vectorize` turns it into a serial loop.
"""
from __future__ import annotations

from typing import Any

from ...ast import (
    Allocate, BufferLoad, BufferStore, Call, For, Let, LetStmt, PrimExpr, Var, post_order_visit,
)
from ...ast.functor import free_vars, is_pure
from .fold import simplify_expr
from .linear import expr_key, linear_form


def lanes_independent(loop: For) -> bool:
    """True when loop's iterations touch disjoint memory and have no effects (see module docstring)."""
    var = loop.loop_var
    inner_vars: set[Var] = set()
    private: set[int] = set()
    accesses: dict[int, list[PrimExpr]] = {}
    written: set[int] = set()
    effects = False

    def look(node: Any) -> None:
        nonlocal effects
        if isinstance(node, For):
            inner_vars.add(node.loop_var)
        elif isinstance(node, (LetStmt, Let)):
            inner_vars.add(node.var)
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
        if any(v in inner_vars for v in free_vars(first)) or not _moves_with(first, var):
            return False
    return True


def _moves_with(index: PrimExpr, var: Var) -> bool:
    """index is linear in var with a non-zero coefficient (distinct var values, distinct indices)."""
    from .vector_expr import _linear_in

    if not _linear_in(index, var):
        return False
    entry = linear_form(index).terms.get(expr_key(var))
    return entry is not None and entry[1] != 0
