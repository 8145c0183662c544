"""legalize_ops: every operator call becomes a call_tir of a PrimFunc built from the op's te rule.

Before: `lv = R.add(x, y)`; after: `lv = R.call_tir(cls.add, (x, y), out_sinfo=...)` with the
PrimFunc `add` added to the module (structurally equal kernels are shared).  Calls of ops without
a legalization (call_tir, call_dps_packed) are left alone.  Pure: the input module is unchanged.
"""
from __future__ import annotations

from ...ast.function import IRModule
from ...ast.graph import Call, If, Op, SeqExpr
from ...errors import IRError
from ..block_builder import BlockBuilder, call_te
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
                if info.legalize is not None:
                    try:
                        return call_te(bb, info.legalize, *value.args, primfunc_name_hint=value.op.name,
                                       **dict(value.attrs))
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
