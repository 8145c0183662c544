"""refcomp: a correctness-focused tensor compiler.

The public surface is small; names are loaded on first use so `import refcomp` stays cheap.
Type checkers read the imports under TYPE_CHECKING below, so they see each name's real signature.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import (
    ArgumentError, BuildError, InternalError, IRError, ParseError, RefcompError, RuntimeFailure,
    ScheduleError, ShapeError,
)
from .lazy import lazy_exports
from .version import __version__ as __version__

if TYPE_CHECKING:
    from . import ast, frontend, graph, loops, runtime, shape, te
    from .ast.function import IRModule, PrimFunc
    from .ast.parser import from_source
    from .driver import build
    from .loops.interpreter import interpret
    from .loops.schedule import Schedule
    from .shape.check import check

# public name -> (module, attribute)
_LAZY = {
    "te": ("refcomp.te", None),
    "ast": ("refcomp.ast", None),
    "shape": ("refcomp.shape", None),
    "loops": ("refcomp.loops", None),
    "graph": ("refcomp.graph", None),
    "runtime": ("refcomp.runtime", None),
    "frontend": ("refcomp.frontend", None),
    "build": ("refcomp.driver", "build"),
    "interpret": ("refcomp.loops.interpreter", "interpret"),
    "from_source": ("refcomp.ast.parser", "from_source"),
    "Schedule": ("refcomp.loops.schedule", "Schedule"),
    "check": ("refcomp.shape.check", "check"),
    "IRModule": ("refcomp.ast.function", "IRModule"),
    "PrimFunc": ("refcomp.ast.function", "PrimFunc"),
}


def _connect_graph_checker() -> None:
    """Let refcomp.shape.check prove graph functions with the graph layer's checker (a floor above it)."""
    from .graph.check import check_module
    from .shape.check import register_graph_checker

    register_graph_checker(check_module)


_lazy_getattr, __dir__ = lazy_exports(__name__, _LAZY)


def __getattr__(name: str) -> Any:
    value = _lazy_getattr(name)
    if name == "check":
        _connect_graph_checker()
    return value


__all__ = [
    "ArgumentError", "BuildError", "InternalError", "IRError", "ParseError", "RefcompError",
    "RuntimeFailure", "ScheduleError", "ShapeError", *_LAZY,
]
