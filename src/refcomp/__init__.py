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

if TYPE_CHECKING:  # for type checkers only; at run time these names load lazily (_LAZY)
    from . import ast, emit_cuda, export, frontend, graph, llm, loops, runtime, shape, sparse, te, tune  # noqa: F401
    from .ast.function import IRModule, PrimFunc  # noqa: F401
    from .ast.parser import from_source  # noqa: F401
    from .driver import build  # noqa: F401
    from .loops.interpreter import interpret  # noqa: F401
    from .loops.schedule import Schedule  # noqa: F401
    from .shape.check import check  # noqa: F401

# public name -> (module, attribute)
_LAZY = {
    "te": ("refcomp.te", None),
    "ast": ("refcomp.ast", None),
    "shape": ("refcomp.shape", None),
    "loops": ("refcomp.loops", None),
    "graph": ("refcomp.graph", None),
    "runtime": ("refcomp.runtime", None),
    "frontend": ("refcomp.frontend", None),
    "tune": ("refcomp.tune", None),
    "sparse": ("refcomp.sparse", None),
    "llm": ("refcomp.llm", None),
    "export": ("refcomp.export", None),
    "emit_cuda": ("refcomp.emit_cuda", None),
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
