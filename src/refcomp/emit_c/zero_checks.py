"""Integer division by zero in emitted C: reported like the interpreter, before it has any effect.

A division whose divisor is not a nonzero constant calls `rc_<op>_checked_<T>(a, b, &flag)`
(prelude), which sets a flag declared around the statement that divides, so OpenMP and CUDA
threads each have their own.  The statement computes its expressions, tests the flag, and only
then stores, branches, loops or allocates; a set flag fails the call with "integer division by
zero" (spec/c_abi.md §4).  Divisions by nonzero constants are not checked and cost nothing.

`ZeroChecks` is mixed into the C emitter, which provides `line`, `lines`, `depth`, `names`,
`fail` and `failure_code`.
"""
from __future__ import annotations

from typing import Callable

from ..ast import expr as E
from ..ast.functor import collect
from ..shape.evaluate import ZERO_DIVISION

_DIVISIONS = (E.FloorDiv, E.FloorMod, E.TruncDiv, E.TruncMod)
MESSAGE = ZERO_DIVISION  # the interpreter's and the evaluator's message


def may_divide_by_zero(divisor: E.PrimExpr) -> bool:
    """Whether an integer divisor is anything but a nonzero constant (then it is checked)."""
    if isinstance(divisor, E.Broadcast):
        divisor = divisor.value
    return not (isinstance(divisor, E.IntImm) and divisor.value != 0)


def divides_by_variable(node: object) -> bool:
    """Whether node holds an integer division whose divisor is checked."""
    return any(may_divide_by_zero(d.b) for kind in _DIVISIONS for d in collect(node, kind))


class ZeroChecks:
    """The statement side: one flag per statement that divides by a variable, and its test."""

    def __init__(self) -> None:
        self.statement_flag: str | None = None  # the flag of the statement being emitted
        self.flag_tested = False  # whether that statement has emitted its test yet
        self.zero_division_code: int | None = None

    def zero_flag(self) -> str:
        """The current statement's flag (called by the expression emitter for a checked division)."""
        if self.statement_flag is None:
            self.statement_flag = self.names.fresh("rc_zero")
        return self.statement_flag

    def test_zero_flag(self) -> None:
        """Fail if the statement's expressions emitted so far divided by zero."""
        if self.statement_flag is None:
            return
        if self.zero_division_code is None:
            self.zero_division_code = self.failure_code(MESSAGE)
        self.line(f"if ({self.statement_flag}) {{")
        self.depth += 1
        self.fail(self.zero_division_code)
        self.depth -= 1
        self.line("}")
        self.flag_tested = True

    def checked_value(self, ctype: str, text: str, hint: str) -> str:
        """text, computed into a temporary first when the statement has a flag to test before using it."""
        if self.statement_flag is None:
            return text
        name = self.names.fresh(hint)
        self.line(f"const {ctype} {name} = {text};")
        return name

    def with_zero_check(self, emit: Callable[[], None]) -> None:
        """Emit one statement; if its own expressions divide by a variable, declare its flag around
        it (and test the flag after it, for a statement form that did not test earlier)."""
        outer = (self.statement_flag, self.flag_tested)
        self.statement_flag, self.flag_tested = None, False
        start = len(self.lines)
        try:
            emit()
            flag = self.statement_flag
            if flag is not None:
                if not self.flag_tested:
                    self.test_zero_flag()
                indent = "    " * self.depth
                inner = ["    " + line if line and not line.startswith("#") else line for line in self.lines[start:]]
                self.lines[start:] = [indent + "{", f"{indent}    int32_t {flag} = 0;", *inner, indent + "}"]
        finally:
            self.statement_flag, self.flag_tested = outer
