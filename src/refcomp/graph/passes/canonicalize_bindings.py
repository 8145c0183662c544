"""canonicalize_bindings: remove trivial aliases `y = x` and fold `TupleGetItem` of a known tuple.

`lv1 = lv0` makes later uses of lv1 read lv0.  For an output `gv = lv` of a dataflow block, the
binding that computed lv is re-targeted to gv instead (so no copy remains).  A struct-info
annotation on the alias that is more precise than its source is kept (the alias stays).
"""
from __future__ import annotations

from ...ast.function import IRModule
from ...ast.graph import DataflowVar, Function, SeqExpr, Tuple, TupleGetItem, Var, VarBinding
from .common import graph_functions, replace_vars


def _canonicalize(func: Function) -> Function:
    mapping: dict = {}
    tuples: dict = {}
    retarget: dict = {}
    # First pass: an output alias gv = lv (lv a DataflowVar of the same block) re-targets lv's binding.
    for block in func.body.blocks:
        defined_here = {b.var for b in block.bindings}
        for b in block.bindings:
            if (isinstance(b, VarBinding) and isinstance(b.value, DataflowVar) and not isinstance(b.var, DataflowVar)
                    and b.value in defined_here and b.value not in retarget):
                retarget[b.value] = b.var
    blocks = []
    for block in func.body.blocks:
        out = []
        for b in block.bindings:
            value = replace_vars(b.value, mapping)
            if isinstance(b, VarBinding):
                if isinstance(value, Var) and retarget.get(value) is b.var:
                    continue  # the defining binding now binds b.var directly
                if isinstance(value, Var) and (isinstance(b.var, DataflowVar) or not isinstance(value, DataflowVar)):
                    mapping[b.var] = value
                    continue
                if isinstance(value, TupleGetItem) and value.tuple_value in tuples:
                    field = tuples[value.tuple_value].fields[value.index]
                    if isinstance(field, Var):
                        mapping[b.var] = field
                        continue
                if isinstance(value, Tuple):
                    tuples[b.var] = value
            var = retarget.get(b.var, b.var)
            if var is not b.var:
                mapping[b.var] = var
            out.append(b if (value is b.value and var is b.var) else b.with_(value=value, var=var))
        if out:
            blocks.append(type(block)(tuple(out)))
    body = replace_vars(func.body.body, mapping)
    return func.with_(body=SeqExpr(tuple(blocks), body, func.body.struct_info))


def canonicalize_bindings(mod: IRModule) -> IRModule:
    """The module with alias bindings removed in every graph function."""
    for name, func in graph_functions(mod):
        mod = mod.with_function(name, _canonicalize(func))
    return mod
