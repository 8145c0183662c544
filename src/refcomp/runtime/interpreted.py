"""The kernel of an "interpret" target: the PrimFunc run by the reference interpreter."""
from __future__ import annotations

import time as _time
from typing import Any

from ..ast.function import PrimFunc
from ..loops.interpreter import interpret
from ..target import Target


class InterpretedKernel:
    """Call with numpy arrays (and scalars) like a compiled kernel; the interpreter runs it.

    `func` is the PrimFunc as given, `lowered` the one that runs (with bounds="runtime", the
    guarded form), `target` the Target.  Slow; for tests and for checking compiled kernels.
    """

    def __init__(self, func: PrimFunc, runs: PrimFunc, target: Target) -> None:
        self.func = func
        self.lowered = runs
        self.target = target

    def __repr__(self) -> str:
        return f"<refcomp.InterpretedKernel {self.func.name} target={str(self.target)!r}>"

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        interpret(self.lowered, *args, **kwargs)

    def time(self, *args: Any, number: int = 1, repeat: int = 1, **kwargs: Any) -> float:
        """The best mean seconds per call over `repeat` rounds of `number` calls."""
        best = float("inf")
        for _ in range(max(1, repeat)):
            start = _time.perf_counter()
            for _ in range(max(1, number)):
                interpret(self.lowered, *args, **kwargs)
            best = min(best, (_time.perf_counter() - start) / max(1, number))
        return best
