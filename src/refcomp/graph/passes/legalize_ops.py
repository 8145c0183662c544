"""legalize_ops: every operator call becomes a call_tir of a PrimFunc built from the op's te rule.

Before: `lv = R.add(x, y)`; after: `lv = R.call_tir(cls.add, (x, y), out_sinfo=...)` with the
PrimFunc `add` added to the module (structurally equal kernels are shared); an op registered with
`legalize_call` builds its own PrimFunc and call_tir instead.  Calls of ops without
a legalization (call_tir, call_dps_packed, host ops) are left alone, and so is an op that only
moves the elements of a string tensor (the VM runs it through the op's numpy reference).  Pure:
the input module is unchanged.
"""
from __future__ import annotations

from ...ast.function import IRModule
from ...ast.graph import Call, If, Op, SeqExpr
from ...ast.graph_struct_info import TensorStructInfo, TupleStructInfo
from ...errors import IRError
from ..block_builder import BlockBuilder, call_te, moves_strings
from ..op.registry import get
from .common import graph_functions, map_blocks, with_bindings


def legalize_ops(mod: IRModule) -> IRModule:
    """The module with every legalizable operator call replaced by call_tir (inside If branches too)."""
    bb = BlockBuilder(mod)
    new_functions = {}
    for name, func in graph_functions(mod):
        def legalize_value(value):
            if isinstance(value, Call) and isinstance(value.op, Op):
                info = get(value.op.name)
                if info.legalize_call is not None:
                    try:
                        return info.legalize_call(bb, value)
                    except IRError as exc:
                        raise IRError(f"legalize_ops: cannot legalize {value} in {name}: {exc.message}",
                                      hint=exc.hint, spot=value) from None
                if info.legalize is not None and not moves_strings(value.op.name, value.args):
                    try:
                        legal = call_te(bb, info.legalize, *value.args, primfunc_name_hint=value.op.name,
                                        **dict(value.attrs))
                        return _keep_element_types(legal, value.struct_info)
                    except IRError as exc:
                        raise IRError(f"legalize_ops: cannot legalize {value} in {name}: {exc.message}",
                                      hint=exc.hint, spot=value) from None
            if isinstance(value, If):
                return value.with_(true_branch=legalize_seq(value.true_branch),
                                   false_branch=legalize_seq(value.false_branch))
            return value

        def block_fn(block):
            bindings = []
            for b in block.bindings:
                value = legalize_value(b.value)
                bindings.append(b if value is b.value else b.with_(value=value))
            return with_bindings(block, bindings)

        def legalize_seq(seq: SeqExpr) -> SeqExpr:
            blocks = tuple(block_fn(block) for block in seq.blocks)
            if all(a is b for a, b in zip(blocks, seq.blocks)):
                return seq
            return seq.with_(blocks=blocks)

        new_functions[name] = map_blocks(func, block_fn)
    result = bb.get()
    for name, func in new_functions.items():
        result = result.with_function(name, func)
    return result


def _keep_element_types(call: Call, original) -> Call:
    """The call_tir with its outputs typed as the operator's were: a kernel writes a storage-only
    element type (a minifloat, int4...) as its storage type, and the graph keeps the real one."""
    fields = original.fields if isinstance(original, TupleStructInfo) else (original,)
    if len(fields) != len(call.sinfo_args) or not any(
            isinstance(f, TensorStructInfo) and f.dtype is not None and f.dtype.is_storage_only for f in fields):
        return call
    outs = tuple(out.with_(dtype=f.dtype) if isinstance(f, TensorStructInfo) and f.dtype is not None
                 and f.dtype.is_storage_only and f.dtype.storage == out.dtype else out
                 for f, out in zip(fields, call.sinfo_args))
    info = outs[0] if len(outs) == 1 else TupleStructInfo(outs)
    return call.with_(sinfo_args=outs, struct_info=info)
