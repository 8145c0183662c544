"""The graph level: BlockBuilder, operators (`refcomp.graph.op`), passes, and `build` to a VM executable.

    from refcomp.graph import BlockBuilder, op, build
"""
from __future__ import annotations

from ..ast.graph import (  # noqa: F401
    BindingBlock, Call, Constant, DataflowBlock, DataflowVar, Expr, ExternFunc, Function, GlobalVar, If,
    MatchCast, Op, PrimValue, SeqExpr, ShapeExpr, StringImm, Tuple, TupleGetItem, Var, VarBinding, const,
)
from ..ast.graph_struct_info import (  # noqa: F401
    FuncStructInfo, ObjectStructInfo, PrimStructInfo, ShapeStructInfo, StructInfo, TensorStructInfo,
    TupleStructInfo, tensor,
)
from ..lazy import lazy_exports
from .block_builder import BlockBuilder  # noqa: F401
from . import op  # noqa: F401

# `build` lives in graph.pipeline: a submodule named `build` would replace this attribute on import.
_LAZY = {"build": ("refcomp.graph.pipeline", "build"), "optimize": ("refcomp.graph.pipeline", "optimize"),
         "passes": ("refcomp.graph.passes", None)}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
