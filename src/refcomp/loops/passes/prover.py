"""Deciding branch conditions during lowering with the shape Analyzer's fast path.

The Analyzer's fast path (simplifier and bounds, never Z3) knows symbolic facts that the
wrap-around interval analysis alone does not (`i * 4 + j < n` when `i < n // 4`).  It reads index
arithmetic as mathematical integers, as spec/shapes.md states for the whole project.  A condition
the Analyzer cannot take as a fact, or cannot decide, is "don't know": lowering keeps the branch.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

from ...ast import IntImm, Not, PrimExpr, Range, Var
from ...shape import Analyzer


class ConditionProver:
    """Answers "is this condition always true / always false" under the enclosing loop ranges."""

    def __init__(self) -> None:
        self.analyzer = Analyzer()

    @contextlib.contextmanager
    def loop(self, var: Var, minimum: PrimExpr, extent: PrimExpr) -> Iterator[None]:
        """Within the block, var ranges over [minimum, minimum + extent)."""
        with self.analyzer.bound_scope(var, Range(minimum, extent)):
            yield

    @contextlib.contextmanager
    def assume(self, condition: PrimExpr) -> Iterator[None]:
        """Within the block, condition is known to hold (the branch of an if that it guards)."""
        if condition.dtype.lanes != 1:
            yield
            return
        with self.analyzer.constraint(condition):
            yield

    def decide(self, condition: PrimExpr) -> bool | None:
        """True/False when the Analyzer proves condition or its negation, else None."""
        if condition.dtype.lanes != 1 or isinstance(condition, IntImm):
            return None
        if self.analyzer.can_prove(condition):
            return True
        if self.analyzer.can_prove(Not(condition)):
            return False
        return None
