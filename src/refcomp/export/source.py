"""The model to export: a graph module from an ONNX file, a script file or a Python object,
with the upper bound of every symbolic dim of its inputs (declared or given) attached.
"""
from __future__ import annotations

import os
from typing import Any, Mapping

from ..ast.function import IRModule
from ..ast.functor import free_vars
from ..ast.graph import Function
from ..ast.graph_struct_info import TensorStructInfo
from ..errors import BuildError


def load_module(model: Any) -> IRModule:
    """model as an IRModule: an IRModule, a graph Function (named main), or the path of an
    .onnx file or a script file (the printed script format)."""
    if isinstance(model, IRModule):
        return model
    if isinstance(model, Function):
        return IRModule({"main": model})
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if os.path.isdir(path):
            raise BuildError(f"export_c: {path} is a directory; give an .onnx file or a script file")
        if not os.path.isfile(path):
            raise BuildError(f"export_c: no such model file: {path}")
        if path.endswith(".onnx"):
            from ..frontend.onnx import from_onnx

            return from_onnx(path)
        from ..ast.parser import from_source

        with open(path, encoding="utf-8") as handle:
            parsed = from_source(handle.read())
        if not isinstance(parsed, IRModule) or not isinstance(parsed.functions.get("main"), Function):
            raise BuildError(f"export_c: {path} holds no graph function named main")
        return parsed
    raise BuildError(f"export_c: expected an IRModule, a graph Function or a model file path, "
                     f"got {type(model).__name__}")


def with_bounds(mod: IRModule, bounds: Mapping[str, int] | None) -> tuple[IRModule, dict[str, int]]:
    """mod whose main declares an upper bound for every size var of its inputs' shapes.

    bounds ({size var name: max value}) adds to or overrides the declared `tir_var_upper_bound`.
    A size var with no bound, or a bound for a name that is no size var, is a BuildError.
    """
    main = mod.functions.get("main")
    if not isinstance(main, Function):
        raise BuildError("export_c: the module has no graph function named main")
    declared = dict(main.attrs.get("tir_var_upper_bound", {}) or {})
    names: list[str] = []
    for param in main.params:
        info = param.struct_info
        if not isinstance(info, TensorStructInfo):
            raise BuildError(f"export_c: input {param.name} is not a tensor ({type(info).__name__})")
        if info.shape is None:
            raise BuildError(f"export_c: input {param.name} has no known shape; give it one before exporting")
        for axis, dim in enumerate(info.shape):
            for var in free_vars(dim):
                if var.name not in names:
                    names.append(var.name)
    given = dict(bounds or {})
    for name, value in given.items():
        if name not in names:
            known = ", ".join(names) or "none"
            raise BuildError(f"export_c: bound for {name!r}, which is no symbolic dim of the inputs "
                             f"(symbolic dims: {known})")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise BuildError(f"export_c: the bound of {name} must be a positive int, got {value!r}")
    merged = {**declared, **given}
    for param in main.params:
        for axis, dim in enumerate(param.struct_info.shape):
            for var in free_vars(dim):
                if var.name not in merged:
                    raise BuildError(
                        f"export_c: dim {axis} of input {param.name} is {var.name}, which has no upper bound; "
                        f"a standalone export plans its arena at the bounds",
                        hint=f"declare one with --bound {var.name}=N (API: bounds={{{var.name!r}: N}})")
    used = {n: int(merged[n]) for n in names}
    if used != declared:
        mod = mod.with_function("main", main.with_attr("tir_var_upper_bound", {**declared, **used}))
    return mod, used
