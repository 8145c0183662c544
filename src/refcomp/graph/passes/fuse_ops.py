"""fuse_ops: group call_tir bindings of a dataflow block into primitive functions by op pattern.

The pattern of each kernel is read off its PrimFunc (see op_pattern).  A producer is fused into
its consumer when every reader of the producer's value is in the consumer's group (usually the
consumer is the only one; `where(mask_like(x), x, c)` reads x twice), both are in the same
dataflow block, and the patterns allow it:

- an elementwise / broadcast / injective group fuses into a consumer that is not out_fusable or
  opaque (so a matmul never recomputes an inlined producer per reduction step);
- an out_fusable or reduction group takes element-wise / broadcast consumers (epilogues).

Each group of two or more kernels becomes a graph Function with attrs {"primitive": True,
"op_pattern": ...} called in place of its bindings; fuse_tir then merges it into one PrimFunc.
"""
from __future__ import annotations

from ...ast.function import IRModule, PrimFunc
from ...ast.graph import (
    Call, DataflowBlock, DataflowVar, Function, GlobalVar, SeqExpr, Var, VarBinding, BindingBlock,
)
from ...ast.graph_struct_info import TensorStructInfo, definable_vars, shape_vars
from .common import graph_functions, used_vars
from .op_pattern import analyze_pattern, rank

INJECTIVE = ("elementwise", "broadcast", "injective")
EPILOGUE = ("elementwise", "broadcast")


def _can_fuse(producer_pattern: str, consumer_pattern: str) -> bool:
    if producer_pattern in INJECTIVE:
        return consumer_pattern in INJECTIVE + ("reduction",)
    if producer_pattern in ("out_fusable", "reduction"):
        return consumer_pattern in EPILOGUE
    return False


def _combine(a: str, b: str) -> str:
    if "out_fusable" in (a, b):
        return "out_fusable"
    return a if rank(a) >= rank(b) else b


def _fuse_block(block: DataflowBlock, mod: IRModule, new_funcs: dict, func_name: str, outer_uses: set):
    bindings = list(block.bindings)
    patterns: dict[int, str] = {}
    users: dict[Var, list[int]] = {}  # var -> the bindings reading it
    for k, b in enumerate(bindings):
        for v in used_vars(b.value):
            users.setdefault(v, []).append(k)
    producer_of = {}
    for k, b in enumerate(bindings):
        value = b.value
        if isinstance(b, VarBinding) and isinstance(value, Call) and value.op_name == "call_tir" \
                and len(value.sinfo_args) == 1:
            callee = mod.functions.get(value.args[0].name)
            if isinstance(callee, PrimFunc):
                patterns[k] = analyze_pattern(callee)
                producer_of[b.var] = k
    group = {k: k for k in patterns}  # binding -> group leader
    group_pattern = dict(patterns)
    members: dict[int, list[int]] = {k: [k] for k in patterns}

    def leader(k):
        while group[k] != k:
            k = group[k]
        return k

    # Until nothing changes: a value read by several kernels (a GELU's x read three times) fuses
    # once its readers have joined one group, which is known only after their own fusions.
    changed = True
    while changed:
        changed = False
        for k, b in enumerate(bindings):
            if k not in patterns:
                continue
            for arg in b.value.args[1:]:
                j = producer_of.get(arg)
                if j is None or j >= k:
                    continue
                if arg in outer_uses or not isinstance(arg, DataflowVar):
                    continue
                lj, lk = leader(j), leader(k)
                if lj == lk:
                    continue
                if not set(users.get(arg, ())) <= set(members[lk]):
                    continue  # a kernel outside the consumer's group reads the value too
                if members[lj][-1] != j:
                    continue  # the producer's group must end with the producer
                if not _can_fuse(group_pattern[lj], patterns[k] if lk == k else group_pattern[lk]):
                    continue
                pattern = _combine(group_pattern[lj], group_pattern[lk])
                group[lj] = lk
                members[lk] = sorted(members[lj] + members[lk])
                group_pattern[lk] = pattern
                changed = True
    out = []
    emitted = set()
    for k, b in enumerate(bindings):
        if k not in patterns or len(members[leader(k)]) < 2:
            out.append(b)
            continue
        lead = leader(k)
        if k != max(members[lead]):
            continue  # emitted at the group's last member
        if lead in emitted:
            continue
        emitted.add(lead)
        out.append(_make_group(bindings, members[lead], group_pattern[lead], new_funcs, func_name))
    return DataflowBlock(tuple(out))


def _make_group(bindings, member_ids, pattern, new_funcs, func_name):
    """A primitive function for the members; graph values they read (vars, constants) become params."""
    from ...ast.graph import Constant

    member_bindings = [bindings[k] for k in member_ids]
    defined = {b.var for b in member_bindings}
    inputs: dict = {}  # outer value -> parameter
    inner = []
    for b in member_bindings:
        call = b.value
        args = []
        for a in call.args[1:]:
            if (isinstance(a, Var) and a not in defined) or isinstance(a, Constant):
                if a not in inputs:
                    inputs[a] = Var(a.name if isinstance(a, Var) else f"c{len(inputs)}", a.struct_info)
                args.append(inputs[a])
            else:
                args.append(a)
        inner.append(b.with_(value=call.with_(args=(call.args[0],) + tuple(args))))
    params = list(inputs.values())
    result = member_bindings[-1].var
    name = f"fused_{'_'.join(_kernel_name(b) for b in member_bindings)}"
    name = name[:60]
    base, k = name, 0
    while name in new_funcs:
        k += 1
        name = f"{base}_{k}"
    body = SeqExpr((DataflowBlock(tuple(inner)),), inner[-1].var)
    fn = Function(tuple(params), body, result.struct_info, True, {"primitive": True, "op_pattern": pattern})
    new_funcs[name] = fn
    call = Call(GlobalVar(name, fn.struct_info), tuple(inputs), struct_info=result.struct_info)
    return VarBinding(result, call)


def _kernel_name(b) -> str:
    return b.value.args[0].name


def fuse_ops(mod: IRModule) -> IRModule:
    """The module with fusable call_tir chains grouped into primitive graph functions."""
    new_funcs: dict = {}
    for name, func in graph_functions(mod):
        if func.attrs.get("primitive"):
            continue
        blocks = []
        changed = False
        for bi, block in enumerate(func.body.blocks):
            if isinstance(block, DataflowBlock):
                outer = set(used_vars(func.body.body))
                for other in func.body.blocks[bi + 1:]:
                    for b in other.bindings:
                        outer.update(used_vars(b.value))
                new = _fuse_block(block, mod, new_funcs, name, outer)
                changed |= len(new.bindings) != len(block.bindings)
                blocks.append(new)
            else:
                blocks.append(block)
        if changed:
            mod = mod.with_function(name, func.with_(body=SeqExpr(tuple(blocks), func.body.body,
                                                                  func.body.struct_info)))
    for name, fn in new_funcs.items():
        mod = mod.with_function(name, fn)
    return mod


_ = (BindingBlock, TensorStructInfo, definable_vars, shape_vars)
