"""refcomp: a correctness-focused tensor compiler.

The public surface is small; names are loaded on first use so `import refcomp` stays cheap.
"""
from __future__ import annotations

import importlib
from typing import Any

from .errors import (
    ArgumentError, BuildError, InternalError, IRError, ParseError, RefcompError, RuntimeFailure,
    ScheduleError, ShapeError,
)

__version__ = "0.1.0"

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


def __getattr__(name: str) -> Any:
    try:
        module_name, attribute = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'refcomp' has no attribute {name!r}") from None
    module = importlib.import_module(module_name)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_LAZY))


__all__ = [
    "ArgumentError", "BuildError", "InternalError", "IRError", "ParseError", "RefcompError",
    "RuntimeFailure", "ScheduleError", "ShapeError", *_LAZY,
]
