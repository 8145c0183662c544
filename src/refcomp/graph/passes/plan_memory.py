"""plan_memory: static storage planning for the intermediate tensors of each graph function.

Each call_tir / call_dps_packed output that is used only as a kernel argument (never returned,
put in a tuple, or passed to another function) gets a storage token; a token is reused once every
tensor in it is dead (its last reader has run).  A token's size is the largest byte count of the
tensors it holds, bounded using the function's `tir_var_upper_bound` attribute ({size var name:
max value}); a tensor whose size has no finite bound is left to fresh allocation (never guessed).

A view of a tensor (R.view, from passes.reshape_views) shares its storage: the view gets no token
of its own, and the source's token stays busy until the view's last reader has run.

The plan is recorded in the function's attrs: `memory_plan` maps binding position (block,
binding) to token, `storage_bytes` holds each token's size expression and `storage_limits` its
value at the upper bounds.  `arena_size(func)` reports the total.
"""
from __future__ import annotations

from ...ast import expr as tir
from ...ast.function import IRModule
from ...ast.functor import free_vars, substitute
from ...ast.graph import Call, Function, Var
from ...ast.graph_struct_info import TensorStructInfo
from ..shape_facts import product, simplify
from .common import graph_functions, used_vars


def tensor_bytes(info: TensorStructInfo) -> tir.PrimExpr:
    """Bytes of a tensor with that (full) struct info, as an int64 expression."""
    count = product(info.shape) if info.shape else tir.IntImm(1, "int64")
    return simplify(count * tir.IntImm(info.dtype.bytes, "int64"))


def upper_bound(expr: tir.PrimExpr, bounds: dict[str, int]) -> int | None:
    """A proven upper bound of expr when each size var v lies in [0, bounds[v.name]]; None if unbounded."""
    names = {v.name: v for v in free_vars(expr)}
    if any(n not in bounds for n in names):
        return None
    from ...shape import Analyzer

    analyzer = Analyzer()
    for n, v in names.items():
        analyzer.bind(v, tir.Range(tir.IntImm(0, v.dtype), tir.IntImm(bounds[n] + 1, v.dtype)))
    hi = analyzer.const_int_bound(expr)[1]
    if hi is not None:
        return int(hi)
    from ..shape_facts import const_value

    # No bound from the analyzer: shapes are monotone in their size vars (products and sums of them).
    return const_value(substitute(expr, {v: tir.IntImm(bounds[n], v.dtype) for n, v in names.items()}))


def _plan(func: Function) -> Function:
    bounds = dict(func.attrs.get("tir_var_upper_bound", {}))
    positions = []  # (block index, binding index, binding)
    for bi, block in enumerate(func.body.blocks):
        for k, b in enumerate(block.bindings):
            positions.append((bi, k, b))
    # A view (R.view) reads its source's storage: its readers count as readers of the source.
    source_of: dict[Var, Var] = {}
    for _, _, b in positions:
        value = b.value
        if isinstance(value, Call) and value.op_name == "view" and isinstance(value.args[0], Var):
            source_of[b.var] = source_of.get(value.args[0], value.args[0])
    kernel_uses: dict[Var, list[int]] = {}
    other_uses: set[Var] = {source_of.get(v, v) for v in used_vars(func.body.body)}
    for step, (_, _, b) in enumerate(positions):
        value = b.value
        if isinstance(value, Call) and value.op_name in ("call_tir", "call_dps_packed"):
            for a in value.args[1:]:
                if isinstance(a, Var):
                    kernel_uses.setdefault(source_of.get(a, a), []).append(step)
        elif b.var not in source_of:
            other_uses.update(source_of.get(v, v) for v in used_vars(value))
    candidates = {}
    for step, (bi, k, b) in enumerate(positions):
        value = b.value
        if not (isinstance(value, Call) and value.op_name in ("call_tir", "call_dps_packed")):
            continue
        info = b.var.struct_info
        if b.var in other_uses or not isinstance(info, TensorStructInfo) or info.shape is None:
            continue
        size = tensor_bytes(info)
        limit = upper_bound(size, bounds)
        if limit is None:
            continue
        last = max(kernel_uses.get(b.var, [step]))
        candidates[step] = (bi, k, size, limit, last)
    tokens: list[dict] = []
    plan = {}
    for step in sorted(candidates):
        bi, k, size, limit, last = candidates[step]
        free = [t for t in tokens if t["busy_until"] < step]
        fitting = [t for t in free if t["limit"] >= limit]
        if fitting:
            token = min(fitting, key=lambda t: t["limit"])
        elif free:
            token = max(free, key=lambda t: t["limit"])
        else:
            token = {"id": len(tokens), "size": size, "limit": limit, "busy_until": -1}
            tokens.append(token)
        if token["limit"] < limit:
            token["size"] = simplify(tir.Max(token["size"], size))
            token["limit"] = limit
        token["busy_until"] = last
        plan[(bi, k)] = token["id"]
    if not plan:
        return func
    return (func.with_attr("memory_plan", plan)
            .with_attr("storage_bytes", tuple(t["size"] for t in tokens))
            .with_attr("storage_limits", tuple(t["limit"] for t in tokens)))


def plan_memory(mod: IRModule) -> IRModule:
    """The module with a storage plan attached to every graph function."""
    for name, func in graph_functions(mod):
        if not func.attrs.get("primitive"):
            mod = mod.with_function(name, _plan(func))
    return mod


def arena_size(func: Function) -> int:
    """Total bytes of the planned storage of func at its declared upper bounds."""
    return int(sum(func.attrs.get("storage_limits", ())))


def arena_expression(func: Function):
    """The planned storage as a symbolic byte count (sum of token sizes; Max where tokens are shared)."""
    total = None
    for size in func.attrs.get("storage_bytes", ()):
        total = size if total is None else total + size
    return simplify(total) if total is not None else tir.IntImm(0, "int64")
