"""Traversal helpers shared by the graph passes: var uses, var replacement, rebuilding functions."""
from __future__ import annotations

from typing import Callable, Iterable, Iterator

from ...ast.function import IRModule
from ...errors import RefcompError
from ...ast.graph import (
    Binding, BindingBlock, Call, DataflowBlock, Expr, Function, If, MatchCast, SeqExpr, Tuple, TupleGetItem, Var,
    VarBinding,
)


def graph_functions(mod: IRModule) -> Iterator[tuple[str, Function]]:
    """The graph functions of a module, in name order."""
    for name in sorted(mod.functions):
        func = mod.functions[name]
        if isinstance(func, Function):
            yield name, func


def used_vars(expr: Expr) -> list[Var]:
    """Graph vars read by expr (for If, also inside its branches), in first-use order."""
    seen: dict[Var, None] = {}

    def walk(e) -> None:
        if isinstance(e, Var):
            seen.setdefault(e, None)
        elif isinstance(e, Call):
            if isinstance(e.op, Var):
                seen.setdefault(e.op, None)
            for a in e.args:
                walk(a)
        elif isinstance(e, Tuple):
            for f in e.fields:
                walk(f)
        elif isinstance(e, TupleGetItem):
            walk(e.tuple_value)
        elif isinstance(e, If):
            walk(e.cond)
            for branch in (e.true_branch, e.false_branch):
                walk_seq(branch)
        elif isinstance(e, SeqExpr):
            walk_seq(e)

    def walk_seq(seq: SeqExpr) -> None:
        for block in seq.blocks:
            for b in block.bindings:
                walk(b.value)
        walk(seq.body)

    walk(expr)
    return list(seen)


def replace_vars(expr: Expr, mapping: dict) -> Expr:
    """expr with graph vars replaced per mapping (sharing unchanged subtrees)."""
    if not mapping:
        return expr
    if isinstance(expr, Var):
        return mapping.get(expr, expr)
    if isinstance(expr, Call):
        args = tuple(replace_vars(a, mapping) for a in expr.args)
        op = mapping.get(expr.op, expr.op) if isinstance(expr.op, Var) else expr.op
        if op is expr.op and all(a is b for a, b in zip(args, expr.args)):
            return expr
        return expr.with_(op=op, args=args)
    if isinstance(expr, Tuple):
        fields = tuple(replace_vars(f, mapping) for f in expr.fields)
        return expr if all(a is b for a, b in zip(fields, expr.fields)) else Tuple(fields, expr.struct_info)
    if isinstance(expr, TupleGetItem):
        value = replace_vars(expr.tuple_value, mapping)
        return expr if value is expr.tuple_value else expr.with_(tuple_value=value)
    if isinstance(expr, If):
        return expr.with_(cond=replace_vars(expr.cond, mapping),
                          true_branch=replace_in_seq(expr.true_branch, mapping),
                          false_branch=replace_in_seq(expr.false_branch, mapping))
    if isinstance(expr, SeqExpr):
        return replace_in_seq(expr, mapping)
    return expr


def replace_in_seq(seq: SeqExpr, mapping: dict) -> SeqExpr:
    blocks = tuple(type(block)(tuple(replace_in_binding(b, mapping) for b in block.bindings)) for block in seq.blocks)
    body = replace_vars(seq.body, mapping)
    return SeqExpr(blocks, body, seq.struct_info)


def replace_in_binding(binding: Binding, mapping: dict) -> Binding:
    value = replace_vars(binding.value, mapping)
    var = mapping.get(binding.var, binding.var) if binding.var in mapping and isinstance(
        mapping[binding.var], Var) else binding.var
    if value is binding.value and var is binding.var:
        return binding
    return binding.with_(value=value, var=var)


def map_blocks(func: Function, fn: Callable[[BindingBlock], BindingBlock | None]) -> Function:
    """func with every top-level block replaced by fn(block) (None drops the block)."""
    blocks = []
    changed = False
    for block in func.body.blocks:
        try:
            new = fn(block)
        except RefcompError as error:
            if error.ir is not None or error.spot is not None:
                error.locate(func)  # show the node it is about inside its function
            raise
        changed |= new is not block
        if new is not None and new.bindings:
            blocks.append(new)
        elif new is not None or block.bindings:
            changed = True
    if not changed:
        return func
    return func.with_(body=SeqExpr(tuple(blocks), func.body.body, func.body.struct_info))


def rewrite_blocks(mod: IRModule, rewrite_block: Callable[[BindingBlock, dict], BindingBlock]) -> IRModule:
    """mod with each graph function's blocks through rewrite_block(block, mapping), the function's
    own mapping: a rewrite that drops a binding maps its var to what its uses read now, and the
    later blocks (rewrite_block applies mapping to them) and the function's result follow it."""
    for name, func in graph_functions(mod):
        mapping: dict = {}
        blocks = [rewrite_block(block, mapping) for block in func.body.blocks]
        if any(new is not old for new, old in zip(blocks, func.body.blocks)):
            body = func.body.with_(blocks=tuple(blocks), body=replace_vars(func.body.body, mapping))
            mod = mod.with_function(name, func.with_(body=body))
    return mod


def with_bindings(block: BindingBlock, bindings: Iterable[Binding]) -> BindingBlock:
    bindings = tuple(bindings)
    if len(bindings) == len(block.bindings) and all(a is b for a, b in zip(bindings, block.bindings)):
        return block
    return type(block)(bindings)


def is_dataflow(block: BindingBlock) -> bool:
    return isinstance(block, DataflowBlock)


__all__ = ["graph_functions", "used_vars", "replace_vars", "replace_in_seq", "replace_in_binding", "map_blocks",
           "rewrite_blocks", "with_bindings", "is_dataflow", "VarBinding", "MatchCast"]
