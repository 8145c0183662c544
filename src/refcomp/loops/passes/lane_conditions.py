"""Lane-dependent branches of a loop body that can be decided once per chunk of lanes.

An `if c:` or `if_then_else(c, a, b)` whose condition depends on the vectorised loop var but is
convex in it (`vector_expr.lane_condition_is_convex`: e.g. an imperfect-split predicate, or the
`1 <= x < w + 1` test of a padded convolution) holds for every lane of a chunk exactly when it
holds at the chunk's ends.  `vectorize` tests that once, runs the body with those branches taken
as vector code, and otherwise runs the chunk's lanes one by one as scalar code.  A single
comparison is also tested the other way (no lane takes the branch: a concat's second part, read
where the lane index is past the first), the body then run with the other branches as vector code.
"""
from __future__ import annotations

from typing import Any

from ...ast import Call, For, IfThenElse, Let, LetStmt, Mutator, PrimExpr, Stmt, Var, post_order_visit
from ...ast.functor import free_vars
from ...shape.keys import expr_key
from .simplify import reads_memory
from .vector_expr import lane_condition_is_convex


def hoistable_conditions(body: Stmt, var: Var) -> list[PrimExpr]:
    """The lane-dependent convex conditions of ifs and if_then_else calls in body, each once.

    A condition that uses a variable bound inside body (an inner loop var, a let) cannot be
    decided before the body runs and is not listed.
    """
    bound: set[Var] = set()
    found: dict[Any, PrimExpr] = {}

    def look(node: Any) -> None:
        if isinstance(node, For):
            bound.add(node.loop_var)
        elif isinstance(node, (LetStmt, Let)):
            bound.add(node.var)
        condition = None
        if isinstance(node, IfThenElse):
            condition = node.condition
        elif isinstance(node, Call) and node.op == "if_then_else" and len(node.args) == 3:
            condition = node.args[0]
        if condition is not None:
            found.setdefault(expr_key(condition), condition)

    post_order_visit(body, look)
    out = []
    for condition in found.values():
        names = set(free_vars(condition))
        # a condition that reads memory could change as the body runs: it is not decided up front
        if var in names and not names & bound and not reads_memory(condition) and \
                lane_condition_is_convex(condition, var):
            out.append(condition)
    return out


def assume_true(body: Stmt, conditions: list[PrimExpr]) -> Stmt:
    """body with every if / if_then_else on one of conditions replaced by its true branch."""
    return _TakeBranch({expr_key(c) for c in conditions}).visit(body)


def assume_false(body: Stmt, conditions: list[PrimExpr]) -> Stmt | None:
    """body with every if / if_then_else on one of conditions replaced by its false branch; None
    when an `if` on one of them has no else (nothing to run in its place)."""
    taker = _TakeBranch({expr_key(c) for c in conditions}, branch=False)
    result = taker.visit(body)
    return None if taker.missing else result


def negated_comparison(condition: PrimExpr) -> PrimExpr | None:
    """`not condition` as one comparison (a < b -> a >= b, ...); None for any other form."""
    from ...ast import GE, GT, LE, LT

    flipped = {LT: GE, LE: GT, GT: LE, GE: LT}.get(type(condition))
    return flipped(condition.a, condition.b) if flipped is not None else None


class _TakeBranch(Mutator):
    """Each if / if_then_else on a condition of `keys` replaced by its then (branch True) or else
    branch; `missing` records an `if` without an else met when taking else branches."""

    def __init__(self, keys: set, branch: bool = True) -> None:
        super().__init__()
        self.keys = keys
        self.branch = branch
        self.missing = False

    def visit_IfThenElse(self, stmt: IfThenElse) -> Stmt:
        if expr_key(stmt.condition) in self.keys:
            if not self.branch and stmt.else_case is None:
                self.missing = True
                return stmt
            return self.visit(stmt.then_case if self.branch else stmt.else_case)
        return self.generic_visit(stmt)

    def visit_Call(self, call: Call) -> PrimExpr:
        if call.op == "if_then_else" and len(call.args) == 3 and expr_key(call.args[0]) in self.keys:
            return self.visit(call.args[1] if self.branch else call.args[2])
        return self.generic_visit(call)
