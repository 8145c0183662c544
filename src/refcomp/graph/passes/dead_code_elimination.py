"""dead_code_elimination: drop pure bindings whose vars are never used, and unreachable functions.

A binding is kept when its value may have an effect (an impure call in a non-dataflow block) or
its var is read later (or is the result); a match_cast (a run-time check that may define size vars) is
always kept.  Functions not reachable from an entry (`global_symbol`
attribute, or the given entry names) are removed.
"""
from __future__ import annotations

from ...ast.function import IRModule, PrimFunc
from ...ast.graph import Call, ExternFunc, Function, GlobalVar, If, MatchCast, Op, SeqExpr
from .common import graph_functions, used_vars


def _is_pure(value, in_dataflow: bool) -> bool:
    if in_dataflow:
        return True
    if isinstance(value, Call):
        if isinstance(value.op, Op):
            from ..op.registry import get

            return get(value.op.name).pure
        return not isinstance(value.op, ExternFunc) and not isinstance(value.op, GlobalVar)
    return True


def _eliminate(func: Function) -> Function:
    live = set(used_vars(func.body.body))
    blocks = []
    for block in reversed(func.body.blocks):
        dataflow = type(block).__name__ == "DataflowBlock"
        kept = []
        for b in reversed(block.bindings):
            # a match_cast is a run-time check, and may define size vars that later shapes use
            # even when its own var is dead: it stays
            needed = b.var in live or not _is_pure(b.value, dataflow) or isinstance(b, MatchCast)
            if needed:
                kept.append(b)
                live.update(used_vars(b.value))
        kept.reverse()
        if kept:
            blocks.append(type(block)(tuple(kept)) if len(kept) != len(block.bindings) else block)
    blocks.reverse()
    if len(blocks) == len(func.body.blocks) and all(a is b for a, b in zip(blocks, func.body.blocks)):
        return func
    return func.with_(body=SeqExpr(tuple(blocks), func.body.body, func.body.struct_info))


def _callees(func) -> set[str]:
    """Names of module functions func calls (inside If branches too)."""
    names: set[str] = set()

    def walk_value(value) -> None:
        if isinstance(value, Call):
            if isinstance(value.op, GlobalVar):
                names.add(value.op.name)
            for a in value.args:
                if isinstance(a, GlobalVar):
                    names.add(a.name)
        elif isinstance(value, If):
            walk_seq(value.true_branch)
            walk_seq(value.false_branch)

    def walk_seq(seq) -> None:
        for block in seq.blocks:
            for b in block.bindings:
                walk_value(b.value)

    if isinstance(func, Function):
        walk_seq(func.body)
    return names


def dead_code_elimination(mod: IRModule, entry_functions: tuple[str, ...] | None = None) -> IRModule:
    """The module without unused pure bindings and without functions unreachable from the entries."""
    for name, func in graph_functions(mod):
        new = _eliminate(func)
        if new is not func:
            mod = mod.with_function(name, new)
    if entry_functions is None:
        entry_functions = tuple(n for n, f in mod.functions.items()
                                if isinstance(f, Function) and "global_symbol" in f.attrs
                                and not f.attrs.get("primitive"))
    if not entry_functions:
        return mod
    reachable, todo = set(), list(entry_functions)
    while todo:
        name = todo.pop()
        if name in reachable or name not in mod.functions:
            continue
        reachable.add(name)
        todo.extend(_callees(mod.functions[name]))
    for name in list(mod.functions):
        if name not in reachable and isinstance(mod.functions[name], (Function, PrimFunc)):
            mod = mod.without_function(name)
    return mod
