"""Lane-dependent branches of a loop body that can be decided once per chunk of lanes.

An `if c:` or `if_then_else(c, a, b)` whose condition depends on the vectorised loop var but is
convex in it (`vector_expr.lane_condition_is_convex`: e.g. an imperfect-split predicate, or the
`1 <= x < w + 1` test of a padded convolution) holds for every lane of a chunk exactly when it
holds at the chunk's ends.  `vectorize` tests that once, runs the body with those branches taken
as vector code, and otherwise runs the chunk's lanes one by one as scalar code.
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
    return _TakeTrueBranch({expr_key(c) for c in conditions}).visit(body)


class _TakeTrueBranch(Mutator):
    def __init__(self, keys: set) -> None:
        super().__init__()
        self.keys = keys

    def visit_IfThenElse(self, stmt: IfThenElse) -> Stmt:
        if expr_key(stmt.condition) in self.keys:
            return self.visit(stmt.then_case)
        return self.generic_visit(stmt)

    def visit_Call(self, call: Call) -> PrimExpr:
        if call.op == "if_then_else" and len(call.args) == 3 and expr_key(call.args[0]) in self.keys:
            return self.visit(call.args[1])
        return self.generic_visit(call)
