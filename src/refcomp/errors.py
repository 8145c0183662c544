"""refcomp's errors.  Each says what is wrong and, where IR is involved, shows it with the spot marked.

User errors (IRError, ShapeError, ScheduleError, BuildError, ArgumentError) tell the user what to fix;
InternalError means refcomp itself is wrong and asks for a report.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

# How errors show IR: set by refcomp.ast (the printer) when it is imported, so this module, the
# ground floor, imports nothing of refcomp.  render(ir, mark) -> text; contains(outer, inner) -> bool.
_ir_render: Callable[[Any, Any], str] | None = None
_ir_contains: Callable[[Any, Any], bool] | None = None


def set_ir_printer(render: Callable[[Any, Any], str], contains: Callable[[Any, Any], bool]) -> None:
    """Show the IR of errors with render(ir, mark) and find nodes with contains(outer, inner)."""
    global _ir_render, _ir_contains
    _ir_render, _ir_contains = render, contains


class RefcompError(Exception):
    """Base of every error refcomp raises on purpose."""

    kind = "error"

    def __init__(self, message: str, *, ir: Any = None, spot: Any = None,
                 counterexample: Mapping[str, int] | None = None, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.ir = ir
        self.spot = spot
        self.counterexample = dict(counterexample) if counterexample else None
        self.hint = hint

    def __str__(self) -> str:
        parts = [self.message]
        if self.counterexample:
            values = ", ".join(f"{k} = {v}" for k, v in self.counterexample.items())
            if values not in self.message:
                parts.append(f"counterexample: {values}")
        if self.hint:
            parts.append(f"hint: {self.hint}")
        rendered = self.render_ir()
        if rendered:
            parts.append(rendered)
        return "\n".join(parts)

    def locate(self, ir: Any, spot: Any = None) -> "RefcompError":
        """Show this error inside `ir`, a larger piece of IR (e.g. the function holding the call
        a shape rule rejected); returns self, to be re-raised.

        The node the error showed so far (its spot, else its IR) becomes the spot when it lies
        inside `ir`; otherwise `spot` is.  An error already showing IR that `ir` does not hold
        (say, a PrimFunc while the caller knows only the graph function) keeps what it shows.
        """
        contains = _ir_contains or (lambda outer, inner: outer is inner)
        if self.ir is not None and self.ir is not ir and not contains(ir, self.ir):
            return self
        shown = self.spot if self.spot is not None else self.ir
        if shown is not None and shown is not ir and contains(ir, shown):
            spot = shown
        self.ir, self.spot = ir, spot
        return self

    def render_ir(self) -> str:
        """The IR the error is about, with the offending node marked (empty if none given)."""
        if self.ir is None:
            return ""
        if _ir_render is None:
            return f"(IR not shown: no printer is registered for {type(self.ir).__name__})"
        try:
            return _ir_render(self.ir, self.spot)
        except Exception as exc:  # rendering must never hide the real error
            return f"(IR could not be printed: {type(exc).__name__}: {exc})"


class IRError(RefcompError, ValueError):
    """Malformed IR: the program itself is not valid."""

    kind = "ir"


class ParseError(IRError):
    """Script text that cannot be read; says line and column."""

    kind = "parse"


class ShapeError(RefcompError, ValueError):
    """A shape relation or buffer access that cannot be proved; carries a counterexample when one exists."""

    kind = "shape"


class ScheduleError(RefcompError, ValueError):
    """An illegal schedule step; the schedule is unchanged."""

    kind = "schedule"


class BuildError(RefcompError, RuntimeError):
    """Code generation or the toolchain failed."""

    kind = "build"


class ArgumentError(RefcompError, ValueError):
    """An array passed at run time does not match the function's signature."""

    kind = "argument"


class RuntimeFailure(RefcompError, RuntimeError):
    """A compiled kernel reported a failure (runtime bounds check, assertion)."""

    kind = "runtime"


class InternalError(RefcompError, AssertionError):
    """A refcomp bug: please report it with the IR shown."""

    kind = "internal"

    def __str__(self) -> str:
        return "internal error (this is a refcomp bug; please report it): " + super().__str__()
