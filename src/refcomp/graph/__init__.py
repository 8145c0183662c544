"""The graph level: BlockBuilder, operators (`refcomp.graph.op`), passes, and `build` to a VM executable.

    from refcomp.graph import BlockBuilder, op, build
"""
from __future__ import annotations

import importlib
from typing import Any

from ..ast.graph import (  # noqa: F401
    BindingBlock, Call, Constant, DataflowBlock, DataflowVar, Expr, ExternFunc, Function, GlobalVar, If,
    MatchCast, Op, PrimValue, SeqExpr, ShapeExpr, StringImm, Tuple, TupleGetItem, Var, VarBinding, const,
)
from ..ast.graph_struct_info import (  # noqa: F401
    FuncStructInfo, ObjectStructInfo, PrimStructInfo, ShapeStructInfo, StructInfo, TensorStructInfo,
    TupleStructInfo, tensor,
)
from .block_builder import BlockBuilder  # noqa: F401
from . import op  # noqa: F401

# `build` lives in graph.pipeline: a submodule named `build` would replace this attribute on import.
_LAZY = {"build": ("refcomp.graph.pipeline", "build"), "optimize": ("refcomp.graph.pipeline", "optimize"),
         "passes": ("refcomp.graph.passes", None)}


def __getattr__(name: str) -> Any:
    try:
        module_name, attribute = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'refcomp.graph' has no attribute {name!r}") from None
    module = importlib.import_module(module_name)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value
    return value
