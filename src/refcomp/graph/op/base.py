"""Cross-level calls: call_tir (a PrimFunc of the module) and call_dps_packed (an external function).

Both use destination passing: the callee receives the inputs, then preallocated outputs whose
struct info the call declares (`sinfo_args`), then any trailing symbolic scalars (`tir_vars`).

`view(x, shape)` is the lowered form of a reshape: x's storage read under another shape with the
same elements in row-major order, no kernel and no copy (passes.reshape_views makes it from a
call_tir whose PrimFunc is a pure reshape; the VM and the compiled graph function alias x).
"""
from __future__ import annotations

from typing import Any, Sequence

from ...ast import expr as tir
from ...ast.graph import Call, ExternFunc, GlobalVar, Op
from ...ast.graph_struct_info import StructInfo, TensorStructInfo, TupleStructInfo, as_dim
from ...errors import IRError
from ..shape_facts import product
from ._common import as_expr, make_call
from .registry import register


def call_tir(func: GlobalVar, args: Sequence[Any], out_sinfo: StructInfo | Sequence[StructInfo],
             tir_vars: Sequence[tir.PrimExpr] | None = None) -> Call:
    """Call PrimFunc `func` on args, writing into fresh outputs described by out_sinfo."""
    outs = tuple(out_sinfo) if isinstance(out_sinfo, (list, tuple)) else (out_sinfo,)
    attrs = {"tir_vars": tuple(tir_vars)} if tir_vars else {}
    return Call(Op("call_tir"), (func,) + tuple(as_expr(a) for a in args), attrs, outs)


def call_dps_packed(func: str | ExternFunc, args: Sequence[Any], out_sinfo: StructInfo | Sequence[StructInfo]) -> Call:
    """Call a registered external function in destination-passing style."""
    callee = ExternFunc(func) if isinstance(func, str) else func
    outs = tuple(out_sinfo) if isinstance(out_sinfo, (list, tuple)) else (out_sinfo,)
    return Call(Op("call_dps_packed"), (callee,) + tuple(as_expr(a) for a in args), {}, outs)


def _dps_infer(call, ctx):
    if not call.sinfo_args:
        ctx.fail("needs out_sinfo (the struct info of its outputs)", kind=IRError)
    for info in call.sinfo_args:
        if not isinstance(info, TensorStructInfo) or info.shape is None or info.dtype is None:
            ctx.fail(f"every output needs a full shape and dtype, got {info}", kind=IRError,
                     hint="outputs are allocated before the call, so their size must be computable")
    callee = call.args[0] if call.args else None
    wanted = GlobalVar if call.op_name == "call_tir" else ExternFunc
    if not isinstance(callee, wanted):
        ctx.fail(f"first argument must be a {wanted.__name__}, got {callee}", kind=IRError)
    return call.sinfo_args[0] if len(call.sinfo_args) == 1 else TupleStructInfo(call.sinfo_args)


def _no_reference(*_: Any, **__: Any):
    raise IRError("call_tir/call_dps_packed have no numpy reference; run them through the VM")


register("call_tir", infer=_dps_infer, reference=_no_reference, pattern="opaque", doc="call a module PrimFunc")
register("call_dps_packed", infer=_dps_infer, reference=_no_reference, pattern="opaque",
         doc="call an external function")


def view(x, shape: Sequence[Any]) -> Call:
    """x's storage under `shape` (the same element count, row-major): a reshape without a copy."""
    return make_call("view", x, shape=tuple(shape))


def _view_infer(call, ctx):
    x = ctx.tensor(0)
    target = tuple(as_dim(d) for d in ctx.attr("shape"))
    if x.shape is None:
        ctx.fail(f"needs a tensor of known shape, got {x}", kind=IRError)
    ctx.require_equal(product(x.shape), product(target), f"view of {x} as {target}: element counts")
    return TensorStructInfo(target, x.dtype)


register("view", infer=_view_infer, reference=lambda x, shape: x.reshape(tuple(int(d) for d in shape)),
         pattern="injective", doc="x's storage under another shape of the same size (no copy)")
