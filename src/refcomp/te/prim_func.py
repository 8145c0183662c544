"""create_prim_func: te tensors -> a PrimFunc in TVM's TensorIR layout.

For `C = te.compute((n, m), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")` it makes

    for i, j, k in grid(n, m, 4):
        with block("C"):
            v_i, v_j, v_k = axis.remap("SSR", [i, j, k])
            reads(A[v_i, v_k], B[v_k, v_j])
            writes(C[v_i, v_j])
            with init():
                C[v_i, v_j] = 0.0
            C[v_i, v_j] = C[v_i, v_j] + A[v_i, v_k] * B[v_k, v_j]

inside a root block "root" that allocates the intermediate tensors.
"""
from __future__ import annotations

from typing import Any

from ..ast import (
    Add, Block, BlockRealize, Buffer, BufferLoad, BufferRegion, BufferStore, Call, For, IfThenElse,
    IntImm, IterVar, Mutator, PrimExpr, PrimFunc, Range, SizeVar, Sub, Var, collect, const, seq,
)
from ..ast.functor import free_vars
from ..ast.node import Node
from ..ast.stmt import true
from ..ast.structural import structural_equal
from ..errors import IRError
from .tensor import Axis, ComputeOp, PlaceholderOp, Reduce, Tensor


class _Rebind(Mutator):
    """Replaces te's vars and buffers by the function's own (fresh block vars, size vars, buffers)."""

    def __init__(self, var_map: dict[Var, PrimExpr], buffer_map: dict[Buffer, Buffer]) -> None:
        super().__init__()
        self.var_map = var_map
        self.buffer_map.update(buffer_map)

    def visit_Var(self, var: Var) -> PrimExpr:
        return self.var_map.get(var, var)

    visit_SizeVar = visit_Var


def build_prim_func(items: list[Any], name: str) -> PrimFunc:
    """See refcomp.te.create_prim_func."""
    tensors: list[Tensor] = []
    scalar_params: list[Var] = []
    for item in items:
        if isinstance(item, Tensor):
            if item in tensors:
                raise IRError(f"create_prim_func: tensor {item.name} is listed twice")
            tensors.append(item)
        elif isinstance(item, Var):
            scalar_params.append(item)
        else:
            raise TypeError(f"create_prim_func: expected te tensors or te vars, got {item!r}")
    stages = _stages_in_order(tensors)

    # Vars in the shapes of parameters are bound from the arrays: make them size vars (>= 0).
    var_map: dict[Var, PrimExpr] = {}
    for tensor in tensors:
        for dim in tensor.shape:
            for v in free_vars(dim):
                if v not in scalar_params and v not in var_map:
                    var_map[v] = v if isinstance(v, SizeVar) else SizeVar(v.name, v.dtype)

    names = _Namer({"root"})
    shape_rebind = _Rebind(var_map, {})
    buffer_map: dict[Buffer, Buffer] = {}
    for tensor in tensors + [t for t in stages if t not in tensors]:
        shape = tuple(shape_rebind.visit(d) for d in tensor.shape)
        buffer_map[tensor.buffer] = Buffer(names.fresh(tensor.name), shape, tensor.dtype)

    stage_stmts = [_stage(tensor, var_map, buffer_map) for tensor in stages]
    intermediates = tuple(buffer_map[t.buffer] for t in stages if t not in tensors)
    root = Block("root", (), (), (), seq(*stage_stmts), alloc_buffers=intermediates)
    body = BlockRealize((), true(), root)
    params = tuple(buffer_map[item.buffer] if isinstance(item, Tensor) else item for item in items)
    func = PrimFunc(params, body, name)
    bound = set(scalar_params) | set(var_map.values())
    for v in free_vars(func.body):
        if v not in bound:
            raise IRError(
                f"create_prim_func: variable {v.name} is used but cannot be bound",
                hint=f"use {v.name} in the shape of a parameter tensor, or list it in create_prim_func's arguments",
            )
    return func


class _Namer:
    """Unique names in first-come order: B, B_1, B_2."""

    def __init__(self, taken: set[str]) -> None:
        self.taken = set(taken)

    def fresh(self, base: str) -> str:
        candidate, n = base, 0
        while candidate in self.taken:
            n += 1
            candidate = f"{base}_{n}"
        self.taken.add(candidate)
        return candidate


def _stages_in_order(outputs: list[Tensor]) -> list[Tensor]:
    """Computed tensors reachable from outputs, producers before consumers; checks placeholders are listed."""
    order: list[Tensor] = []
    state: dict[Tensor, str] = {}

    def visit(tensor: Tensor, consumer: Tensor | None) -> None:
        if isinstance(tensor.op, PlaceholderOp):
            if tensor not in outputs:
                raise IRError(
                    f"create_prim_func: placeholder {tensor.name} is read by {consumer.name if consumer else '?'} "
                    "but is not in the argument list",
                    hint=f"add {tensor.name} to the tensors given to create_prim_func",
                )
            return
        if state.get(tensor) == "done":
            return
        state[tensor] = "visiting"
        for producer in tensor.op.inputs:
            visit(producer, tensor)
        state[tensor] = "done"
        order.append(tensor)

    for tensor in outputs:
        visit(tensor, None)
    return order


def _stage(tensor: Tensor, shape_vars: dict[Var, PrimExpr], buffer_map: dict[Buffer, Buffer]) -> For | BlockRealize:
    """The loop nest and block computing one tensor."""
    op: ComputeOp = tensor.op
    body = op.body
    axes: list[Axis] = list(op.axis) + list(op.reduce_axis)
    var_map: dict[Var, PrimExpr] = dict(shape_vars)
    rebind = _Rebind(var_map, buffer_map)
    loop_vars, block_vars, doms = [], [], []
    for axis in axes:
        dom = Range(rebind.visit(axis.dom.min), rebind.visit(axis.dom.extent))
        loop_vars.append(Var(axis.var.name, axis.var.dtype))
        block_vars.append(Var("v_" + axis.var.name, axis.var.dtype))
        doms.append(dom)
    for axis, block_var in zip(axes, block_vars):
        var_map[axis.var] = block_var
    rebind = _Rebind(var_map, buffer_map)  # fresh mutator: the mapping grew
    domains = dict(zip(block_vars, doms))

    out = buffer_map[tensor.buffer]
    indices = tuple(block_vars[: len(op.axis)])
    init = None
    if isinstance(body, Reduce):
        source = rebind.visit(body.source)
        update: Any = BufferStore(out, body.combine(BufferLoad(out, indices), source), indices)
        if body.condition is not None:
            condition = rebind.visit(body.condition)
            update = IfThenElse(condition, update)
            reads = _read_regions([condition], [source], exclude=out, domains=domains)
        else:
            reads = _read_regions([source], [], exclude=out, domains=domains)
        init = BufferStore(out, body.identity(), indices)
    else:
        value = rebind.visit(body)
        update = BufferStore(out, value, indices)
        reads = _read_regions([value], [], exclude=None, domains=domains)
    iter_vars = tuple(IterVar(bv, dom, axis.kind) for bv, dom, axis in zip(block_vars, doms, axes))
    writes = (BufferRegion(out, tuple(Range(v, const(1, v.dtype)) for v in indices)),)
    block = Block(out.name, iter_vars, reads, writes, update, init, annotations=op.attrs)
    stmt: Any = BlockRealize(tuple(loop_vars), true(), block)
    for loop_var, dom in reversed(list(zip(loop_vars, doms))):
        stmt = For(loop_var, dom.min, dom.extent, "serial", stmt)
    return stmt


# ----------------------------------------------------------------------------- read regions

def _read_regions(unguarded: list[PrimExpr], guarded: list[PrimExpr], exclude: Buffer | None,
                  domains: dict[Var, Range] | None = None) -> tuple[BufferRegion, ...]:
    """The region of each buffer one block instance reads: exact points where the access is plain;
    where it sits under a condition (if_then_else, where=) or is data dependent, the whole dim,
    except in a dim whose index is an iter var whose domain is that dim (it stays in bounds
    whether or not the condition holds: `partial[i, t]` under `t < 16` reads row i only)."""
    accesses: dict[Buffer, list[tuple[tuple[PrimExpr, ...], bool]]] = {}
    for root in unguarded:
        _walk(root, False, accesses)
    for root in guarded:
        _walk(root, True, accesses)
    regions = []
    for buffer, uses in accesses.items():
        if buffer is exclude:
            continue
        ranges = []
        for dim, extent in enumerate(buffer.shape):
            exact = all(not imprecise or _spans_dim(indices[dim], extent, domains or {})
                        for indices, imprecise in uses)
            if exact:
                ranges.append(_merge([indices[dim] for indices, _ in uses], extent))
            else:
                ranges.append(Range(IntImm(0, extent.dtype), extent))
        regions.append(BufferRegion(buffer, tuple(ranges)))
    return tuple(regions)


def _spans_dim(index: PrimExpr, extent: PrimExpr, domains: dict[Var, Range]) -> bool:
    """index is an iter var ranging over [0, extent): in bounds of that dim for every instance."""
    dom = domains.get(index) if isinstance(index, Var) else None
    return dom is not None and isinstance(dom.min, IntImm) and dom.min.value == 0 and \
        structural_equal(dom.extent, extent, map_free_vars=False)


def _walk(expr: Any, guarded: bool, out: dict) -> None:
    if isinstance(expr, BufferLoad):
        data_dependent = any(_has_load(i) for i in expr.indices)
        out.setdefault(expr.buffer, []).append((expr.indices, guarded or data_dependent))
        for index in expr.indices:
            _walk(index, guarded, out)
        return
    if isinstance(expr, Call) and expr.op == "if_then_else":
        _walk(expr.args[0], guarded, out)
        _walk(expr.args[1], True, out)
        _walk(expr.args[2], True, out)
        return
    if isinstance(expr, Node) and not isinstance(expr, Buffer):
        for field in expr.fields():
            value = getattr(expr, field)
            for item in value if isinstance(value, tuple) else (value,):
                if isinstance(item, Node):
                    _walk(item, guarded, out)


def _has_load(expr: PrimExpr) -> bool:
    return bool(collect(expr, BufferLoad))


def _split_offset(expr: PrimExpr) -> tuple[PrimExpr | None, int]:
    """expr as base + constant offset (base None for a constant)."""
    if isinstance(expr, IntImm):
        return None, expr.value
    if isinstance(expr, Add) and isinstance(expr.b, IntImm):
        return expr.a, expr.b.value
    if isinstance(expr, Sub) and isinstance(expr.b, IntImm):
        return expr.a, -expr.b.value
    return expr, 0


def _merge(indices: list[PrimExpr], extent: PrimExpr) -> Range:
    parts = [_split_offset(i) for i in indices]
    base = parts[0][0]
    for other, _ in parts[1:]:
        same = (other is None and base is None) or (
            other is not None and base is not None and structural_equal(other, base, map_free_vars=False))
        if not same:
            return Range(IntImm(0, extent.dtype), extent)
    low = min(offset for _, offset in parts)
    high = max(offset for _, offset in parts)
    dtype = indices[0].dtype
    if base is None:
        start: PrimExpr = const(low, dtype)
    elif low == 0:
        start = base
    else:
        start = base + low
    return Range(start, const(high - low + 1, dtype))
