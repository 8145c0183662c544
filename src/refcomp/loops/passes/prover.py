"""Deciding branch conditions with the shape engineer's `refcomp.shape.Analyzer`, when it is there.

The Analyzer's fast path (simplifier and bounds, never Z3) knows symbolic facts the built-in folder
does not (`i * 4 + j < n` when `i < n // 4`).  It assumes index arithmetic does not overflow, as
spec/shapes.md states for the whole project.  When the module cannot be imported, or the Analyzer
fails on a condition, the answer is "don't know" and lowering keeps the branch: that is always safe.
"""
from __future__ import annotations

import contextlib
import logging
from typing import Iterator

from ...ast import IntImm, Not, PrimExpr, Range, Var
from .bounds import Bounds

logger = logging.getLogger("refcomp.lower")

try:  # the shape package is written concurrently; lowering works without it
    from ...shape import Analyzer as _Analyzer
except Exception:  # pragma: no cover - depends on what is installed
    _Analyzer = None


class ConditionProver:
    """Answers "is this condition always true / always false" under the enclosing loop ranges."""

    def __init__(self, bounds: Bounds) -> None:
        self.bounds = bounds
        self.analyzer = _Analyzer() if _Analyzer is not None else None

    @property
    def available(self) -> bool:
        return self.analyzer is not None

    @contextlib.contextmanager
    def loop(self, var: Var, minimum: PrimExpr, extent: PrimExpr) -> Iterator[None]:
        """Within the block, var ranges over [minimum, minimum + extent)."""
        if self.analyzer is None:
            yield
            return
        with self.analyzer.bound_scope(var, Range(minimum, extent)):
            yield

    @contextlib.contextmanager
    def assume(self, condition: PrimExpr) -> Iterator[None]:
        """Within the block, condition is known to hold (the branch of an if that it guards)."""
        if self.analyzer is None or condition.dtype.lanes != 1:
            yield
            return
        try:
            scope = self.analyzer.constraint(condition)
            scope.__enter__()
        except Exception as exc:  # a fact the Analyzer cannot take is simply not used
            logger.warning("lowering: Analyzer could not assume a condition (%s: %s)", type(exc).__name__, exc)
            yield
            return
        try:
            yield
        finally:
            scope.__exit__(None, None, None)

    def decide(self, condition: PrimExpr) -> bool | None:
        """True/False when the Analyzer proves condition or its negation, else None."""
        if self.analyzer is None or condition.dtype.lanes != 1 or isinstance(condition, IntImm):
            return None
        try:
            if self.analyzer.can_prove(condition):
                return True
            if self.analyzer.can_prove(Not(condition)):
                return False
        except Exception as exc:  # a gap in the Analyzer must not break lowering: keep the branch
            logger.warning("lowering: Analyzer failed on a condition (%s: %s); branch kept",
                           type(exc).__name__, exc)
        return None
