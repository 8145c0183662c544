"""fold_constant: calls whose every argument is a Constant are evaluated at compile time.

Operator calls use the op's numpy reference; call_tir calls run the PrimFunc in the reference
interpreter.  Results larger than `max_elements` are left alone so constants don't bloat modules.
"""
from __future__ import annotations

import numpy as np

from ...ast.dtype import storage_array, typed_array
from ...ast.function import IRModule
from ...ast.graph import Call, Constant, GlobalVar, Op, Tuple, TupleGetItem, Var
from ...ast.graph_struct_info import TensorStructInfo
from .common import graph_functions, map_blocks, replace_vars, with_bindings


def _evaluate(call: Call, mod: IRModule):
    name = call.op.name
    if name == "call_tir":
        gvar, *args = call.args
        if not all(isinstance(a, Constant) for a in args) or len(call.sinfo_args) != 1:
            return None
        info = call.sinfo_args[0]
        shape = info.static_shape
        if shape is None or call.attrs.get("tir_vars"):
            return None
        from ...loops.interpreter import interpret

        out = np.empty(shape, dtype=info.dtype.numpy())
        interpret(mod[gvar.name], *[storage_array(np.array(a.array)) for a in args], out)
        return out
    if name == "call_dps_packed":
        return None
    if not all(isinstance(a, Constant) for a in call.args):
        return None
    from ..op.registry import get

    info = get(name)
    if not info.pure:
        return None
    result = info.evaluate([np.array(a.array) for a in call.args], call.attrs)
    return result if isinstance(result, np.ndarray) or isinstance(result, tuple) else np.asarray(result)


def _typed_constant(result: np.ndarray, info) -> Constant | None:
    """The Constant of a call's result, of the call's element type (a storage-only type kept as its
    ml_dtypes array: a Constant's type is its array's); None where that type cannot be kept."""
    if not isinstance(info, TensorStructInfo) or info.dtype is None:
        return None
    dtype = info.dtype
    if dtype.is_storage_only:
        array = storage_array(result)
        constant = Constant(array if dtype.is_string else typed_array(array, dtype.name))
    else:
        constant = Constant(result.astype(dtype.numpy()) if result.dtype.name != dtype.name else result)
    return constant if constant.struct_info.dtype == dtype else None


def fold_constant(mod: IRModule, max_elements: int = 1 << 20) -> IRModule:
    """The module with constant calls replaced by their values."""
    for fname, func in graph_functions(mod):
        mapping: dict = {}

        def block_fn(block):
            out = []
            for b in block.bindings:
                value = replace_vars(b.value, mapping)
                if isinstance(value, Call) and isinstance(value.op, Op):
                    result = _evaluate(value, mod)
                    folded = _typed_constant(result, value.struct_info) if isinstance(result, np.ndarray) \
                        and result.size <= max_elements else None
                    if folded is not None:
                        value = folded
                        mapping[b.var] = value
                    elif isinstance(result, tuple) and all(isinstance(r, np.ndarray) for r in result):
                        value = Tuple(tuple(Constant(r) for r in result))
                        mapping[b.var] = value
                elif isinstance(value, TupleGetItem) and isinstance(value.tuple_value, Tuple):
                    value = value.tuple_value.fields[value.index]
                    mapping[b.var] = value
                out.append(b if value is b.value else b.with_(value=value))
            return with_bindings(block, out)

        new = map_blocks(func, block_fn)
        body = replace_vars(new.body.body, mapping)
        if body is not new.body.body:
            new = new.with_(body=new.body.with_(body=body))
        mod = mod.with_function(fname, new)
    return mod


_ = (GlobalVar, Var)
