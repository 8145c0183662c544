"""Runtime guards for the accesses the prover could not prove, and the checks a caller owes a kernel.

    insert_runtime_guards(func)   # wraps each statement holding an unproved access in AssertStmt
    runtime_preconditions(func)   # [(condition, message)]: the function's stated assumptions
    shape_relations(func)         # how each buffer dim relates to the size variables

`build(..., bounds="runtime")` uses the first: an AssertStmt makes the compiled kernel return an
error code (with the message) instead of touching memory outside a buffer.  The guard of an access
inside a lazy `if_then_else` branch holds only when that branch is taken.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..ast.buffer import Buffer
from ..ast.expr import Call, IntImm, PrimExpr, Var
from ..ast.function import PrimFunc
from ..ast.functor import Mutator, free_vars
from ..ast.stmt import AssertStmt, BufferStore, Stmt
from ..errors import ShapeError
from .facts import function_assumptions
from .in_bounds import Obligation, check_accesses
from .render import render


def insert_runtime_guards(func: PrimFunc, *, timeout_ms: int | None = None) -> PrimFunc:
    """func with every access not proved in bounds checked at run time (func itself if none)."""
    pending: dict[Stmt, list[Obligation]] = {}
    for ob in check_accesses(func, timeout_ms=timeout_ms):
        if ob.proved or ob.kind == "binding":
            continue
        if ob.kind == "match" or ob.claim is None or ob.stmt is None:
            raise ShapeError(f"cannot guard at run time: {ob.message}", ir=func, spot=ob.node)
        pending.setdefault(ob.stmt, []).append(ob)
    if not pending:
        return func
    return func.with_(body=_Guarder(pending, func).visit(func.body))


class _Guarder(Mutator):
    def __init__(self, pending: dict[Stmt, list[Obligation]], func: PrimFunc) -> None:
        super().__init__()
        self.pending = pending
        self.func = func
        self.in_scope: set[Var] = set(free_vars(func))

    def visit(self, node: Any) -> Any:
        """Rebuild node, wrapping it in guards if it holds unproved accesses."""
        new = super().visit(node)
        obligations = self.pending.get(node) if isinstance(node, Stmt) else None
        if not obligations:
            return new
        # the first access evaluated is checked first (an index may itself load from a buffer)
        for ob in reversed(_unique(obligations)):
            new = AssertStmt(self._condition(ob), _message(ob), new)
        return new

    def _condition(self, ob: Obligation) -> PrimExpr:
        claim = ob.claim
        for condition in reversed(ob.path):
            # lazy: the index is only evaluated (and only must be valid) when the branch is taken
            claim = Call("if_then_else", (condition, claim, IntImm(1, "bool")), "bool")
        return claim


def _unique(obligations: list[Obligation]) -> list[Obligation]:
    from .keys import expr_key

    seen, out = set(), []
    for ob in obligations:
        key = (expr_key(ob.claim), tuple(expr_key(c) for c in ob.path))
        if key not in seen:
            seen.add(key)
            out.append(ob)
    return out


def _message(ob: Obligation) -> str:
    verb = "store to" if isinstance(ob.node, BufferStore) else "load from"
    shape = ", ".join(render(d) for d in ob.buffer.shape)
    return (f"{verb} {ob.access_text()} out of bounds in dim {ob.dim} of {ob.buffer.name} "
            f"(shape ({shape}{',' if len(ob.buffer.shape) == 1 else ''})) in {ob.func}")


def runtime_preconditions(func: PrimFunc) -> list[tuple[PrimExpr, str]]:
    """The function's stated assumptions, each to be checked with the bound sizes before a call."""
    return [(cond, f"{func.name}: precondition {render(cond)} does not hold")
            for cond in function_assumptions(func)]


@dataclass(frozen=True)
class DimRelation:
    """What one buffer dimension says about the size variables.

    binds: the variable this dim defines (its first appearance as a whole dim), else None and
    the array's dim must equal `expr` evaluated with the variables bound so far.
    """

    buffer: Buffer
    dim: int
    expr: PrimExpr
    binds: Var | None

    def describe(self) -> str:
        """`n = A.shape[0]` or `B.shape[1] must equal n`."""
        where = f"{self.buffer.name}.shape[{self.dim}]"
        if self.binds is not None:
            return f"{self.binds.name} = {where}"
        return f"{where} must equal {render(self.expr)}"


def shape_relations(func: PrimFunc) -> tuple[list[DimRelation], list[Var]]:
    """(relations in parameter order, size variables no dim binds directly: pass them as scalars)."""
    bound: set[Var] = {p for p in func.params if isinstance(p, Var)}
    relations: list[DimRelation] = []
    for buffer in func.buffers:
        for dim, extent in enumerate(buffer.shape):
            if isinstance(extent, Var) and extent not in bound:
                bound.add(extent)
                relations.append(DimRelation(buffer, dim, extent, extent))
            else:
                relations.append(DimRelation(buffer, dim, extent, None))
    unbound = []
    for relation in relations:
        for var in free_vars(relation.expr):
            if var not in bound and var not in unbound:
                unbound.append(var)
    return relations, unbound
