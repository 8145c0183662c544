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
    # 1. Pure aliases (`lv1 = lv0`, or `gv1 = gv0`): later uses read the source, transitively.
    mapping: dict = {}
    for block in func.body.blocks:
        for b in block.bindings:
            if isinstance(b, VarBinding) and isinstance(b.value, Var):
                source = mapping.get(b.value, b.value)
                if isinstance(b.var, DataflowVar) or not isinstance(source, DataflowVar):
                    mapping[b.var] = source
    # 2. An output `gv = lv` (lv computed in the same block) re-targets lv's binding to gv.
    retarget: dict = {}
    for block in func.body.blocks:
        defined_here = {b.var for b in block.bindings if b.var not in mapping}
        for b in block.bindings:
            if isinstance(b, VarBinding) and isinstance(b.value, Var) and b.var not in mapping:
                source = mapping.get(b.value, b.value)
                if isinstance(source, DataflowVar) and source in defined_here and source not in retarget:
                    retarget[source] = b.var
    for source, target in retarget.items():
        mapping[source] = target
    for key in list(mapping):  # resolve chains: lv1 -> lv0 -> gv0
        seen, value = {key}, mapping[key]
        while value in mapping and value not in seen and mapping[value] is not value:
            seen.add(value)
            value = mapping[value]
        mapping[key] = value
    tuples: dict = {}
    blocks = []
    for block in func.body.blocks:
        out = []
        for b in block.bindings:
            if b.var in mapping and not (b.var in retarget):
                continue  # an alias: its uses now read the source
            value = replace_vars(b.value, mapping)
            if isinstance(b, VarBinding) and isinstance(value, Var) and value is retarget.get(b.value, None):
                continue
            if isinstance(b, VarBinding) and value is b.var:
                continue  # `gv = lv` whose lv binding now binds gv
            if isinstance(b, VarBinding) and isinstance(value, TupleGetItem) and value.tuple_value in tuples:
                field = tuples[value.tuple_value].fields[value.index]
                if isinstance(field, Var) and (isinstance(b.var, DataflowVar) or not isinstance(field, DataflowVar)):
                    mapping[b.var] = field
                    continue
            if isinstance(value, Tuple):
                tuples[retarget.get(b.var, b.var)] = value
            var = retarget.get(b.var, b.var)
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
