"""fold_packed_weights: a kernel's packing of a constant argument done once, at build time.

The default schedules copy some inputs into the layout their register tiles read: a convolution's
weights W[o, c, r0, r1] become Wp[o // L, c, r0, r1, o % L] (`cache_read` + `transform_layout`),
a stage that runs on every call.  When the graph passes a Constant for such an input, that stage is
constant folding waiting to happen.  This pass, run after default_schedule, finds in each called
PrimFunc the *packing stages*:

    a block of spatial iters only, with no predicate and no init, whose body is one store
    Q[f(v)] = P[g(v)] of a parameter P into a buffer Q allocated by the function (root level),
    where no other block reads P and no other block writes Q, in a loop nest of its own, and no
    call is handed Q's address to write through (a tensor intrinsic's operand declared read is not)

and, for a call whose argument for P is a Constant, evaluates the copy with numpy over the
block's whole domain (the one evaluator, on arrays of index points), passes the packed array in
P's place, and calls a copy of the function in which Q is the parameter and the stage is gone
(`<name>_packed`; calls with a non-constant argument keep the original).  Elements of Q the stage
does not write are zero (the kernel never reads them: they were uninitialised before).  Arrays
larger than `max_elements` are left to the kernel.
"""
from __future__ import annotations

import logging

import numpy as np

from ...ast import BlockRealize, BufferLoad, BufferStore, SeqStmt, as_int, collect
from ...ast.function import IRModule, PrimFunc
from ...ast.graph import Call, Constant, GlobalVar
from .common import graph_functions, map_blocks, with_bindings

log = logging.getLogger("refcomp.graph.fold_packed_weights")


def fold_packed_weights(mod: IRModule, max_elements: int = 1 << 24) -> IRModule:
    """mod with the packing stages of constant call_tir arguments evaluated (module doc)."""
    packed_funcs: dict[tuple[str, int], tuple[str, PrimFunc, object]] = {}
    new_functions: dict[str, PrimFunc] = {}

    for fname, func in graph_functions(mod):
        def block_fn(block):
            out = []
            for b in block.bindings:
                value = b.value
                if isinstance(value, Call) and getattr(value.op, "name", None) == "call_tir":
                    value = _fold_call(mod, value, packed_funcs, new_functions, max_elements)
                out.append(b if value is b.value else b.with_(value=value))
            return with_bindings(block, out)

        new = map_blocks(func, block_fn)
        if new is not func:
            mod = mod.with_function(fname, new)
    for name, prim in new_functions.items():
        mod = mod.with_function(name, prim)
    return mod


def mark_constant_params(mod: IRModule) -> IRModule:
    """mod with each PrimFunc that only call_tir calls use marked attrs["constant_params"]: the
    positions of the parameters every such call passes a Constant for (run before
    default_schedule: the matmul recipe then packs such a weight in a stage of its own, which
    fold_packed_weights folds; spec/graph.md 5.1)."""
    from ...ast import post_order_visit

    constant: dict[str, set[int] | None] = {}
    references: dict[str, int] = {}
    calls: dict[str, int] = {}
    for _, func in graph_functions(mod):
        # every place counts (collect would merge one shared GlobalVar or Call node into one)
        found: list = []
        post_order_visit(func, lambda node: found.append(node) if isinstance(node, (GlobalVar, Call)) else None)
        for gvar in (node for node in found if isinstance(node, GlobalVar)):
            references[gvar.name] = references.get(gvar.name, 0) + 1
        for call in (node for node in found if isinstance(node, Call)):
            if getattr(call.op, "name", None) != "call_tir" or not call.args or not isinstance(call.args[0], GlobalVar):
                continue
            name = call.args[0].name
            calls[name] = calls.get(name, 0) + 1
            here = {index for index, arg in enumerate(call.args[1:]) if isinstance(arg, Constant)}
            constant[name] = here if name not in constant else constant[name] & here
    for name, indices in constant.items():
        prim = mod.functions.get(name)
        if not isinstance(prim, PrimFunc) or not indices or references.get(name) != calls.get(name):
            continue
        indices = tuple(sorted(i for i in indices if i < len(prim.params)))
        if indices and prim.attrs.get("constant_params") != indices:
            mod = mod.with_function(name, prim.with_(attrs={**prim.attrs, "constant_params": indices}))
    return mod


def _fold_call(mod: IRModule, call: Call, packed_funcs: dict, new_functions: dict, max_elements: int) -> Call:
    gvar, *args = call.args
    prim = mod.functions.get(gvar.name) if isinstance(gvar, GlobalVar) else None
    if not isinstance(prim, PrimFunc):
        return call
    for _ in range(len(prim.params)):  # one packing stage at a time, each a new function
        folded = False
        for index, arg in enumerate(args):
            if not isinstance(arg, Constant) or index >= len(prim.params):
                continue
            key = (gvar.name, index)
            if key not in packed_funcs:
                stage = find_packing_stage(prim, index)
                if stage is None:
                    packed_funcs[key] = None
                else:
                    name = _fresh_name(mod, new_functions, f"{prim.name}_packed")
                    packed_funcs[key] = (name, without_stage(prim, index, stage).with_(name=name), stage)
                    new_functions[name] = packed_funcs[key][1]
            entry = packed_funcs[key]
            if entry is None:
                continue
            name, new_prim, stage = entry
            array = pack(stage, prim.params[index], np.asarray(arg.array), max_elements)
            if array is None:
                continue
            args = list(args)
            args[index] = Constant(array)
            gvar, prim, folded = GlobalVar(name), new_prim, True
            log.debug("fold_packed_weights: %s: argument %d packed at build time", name, index)
            break
        if not folded:
            break
    if gvar is call.args[0]:
        return call
    return call.with_(args=(gvar, *args))


def find_packing_stage(func: PrimFunc, index: int) -> BlockRealize | None:
    """The packing stage of parameter `index` of func (module doc), or None."""
    param = func.params[index]
    root = func.body.block if isinstance(func.body, BlockRealize) else None
    if root is None or not isinstance(root.body, SeqStmt):
        return None
    realizes = [r for r in collect(func.body, BlockRealize) if r.block is not root]
    readers = [r for r in realizes if any(region.buffer is param for region in r.block.reads)]
    if len(readers) != 1:
        return None
    realize = readers[0]
    block = realize.block
    store = block.body
    if block.init is not None or any(iv.kind != "spatial" for iv in block.iter_vars) \
            or as_int(realize.predicate) != 1 or not isinstance(store, BufferStore) \
            or not isinstance(store.value, BufferLoad) or store.value.buffer is not param \
            or store.buffer not in root.alloc_buffers or len(block.reads) != 1 or len(block.writes) != 1 \
            or any(as_int(iv.dom.extent) is None or as_int(iv.dom.min) is None for iv in block.iter_vars) \
            or str(store.buffer.dtype) != str(param.dtype):
        return None
    if any(r is not realize and any(w.buffer is store.buffer for w in r.block.writes) for r in realizes):
        return None
    if _own_nest(root.body, realize) is None or _escapes(func, store.buffer):
        return None
    return realize


def _escapes(func: PrimFunc, buffer) -> bool:
    """Whether the function hands buffer's address to a call that may write through it (every
    address but a tensor intrinsic's operand declared read, refcomp.ast.intrinsics): the argument
    checks then count it as written, and a Constant, read-only, could not be passed."""
    from ...ast.intrinsics import addressed_writes

    return buffer in addressed_writes(func.body, func.attrs)


def _own_nest(seq: SeqStmt, realize: BlockRealize) -> int | None:
    """The position in the root's statements of the loop nest that holds realize and nothing else."""
    for position, stmt in enumerate(seq.stmts):
        inner = collect(stmt, BlockRealize)
        if len(inner) == 1 and inner[0] is realize:
            return position
    return None


def without_stage(func: PrimFunc, index: int, realize: BlockRealize) -> PrimFunc:
    """func with its packed buffer as parameter `index` and the packing stage removed."""
    root_realize = func.body
    root = root_realize.block
    packed = realize.block.body.buffer
    position = _own_nest(root.body, realize)
    stmts = root.body.stmts[:position] + root.body.stmts[position + 1:]
    body = stmts[0] if len(stmts) == 1 else SeqStmt(stmts)
    root = root.with_(body=body, alloc_buffers=tuple(b for b in root.alloc_buffers if b is not packed))
    params = tuple(packed if k == index else p for k, p in enumerate(func.params))
    return func.with_(params=params, body=root_realize.with_(block=root))


def pack(realize: BlockRealize, param, array: np.ndarray, max_elements: int) -> np.ndarray | None:
    """The packed buffer's contents: the stage's copy evaluated over its whole domain."""
    from ...shape import EvaluationError, evaluate

    block = realize.block
    store = block.body
    shape = [as_int(d) for d in store.buffer.shape]
    if None in shape or int(np.prod(shape)) > max_elements or tuple(array.shape) != tuple(as_int(d) for d in param.shape):
        return None
    axes = [np.arange(as_int(iv.dom.min), as_int(iv.dom.min) + as_int(iv.dom.extent), dtype=np.int64)
            for iv in block.iter_vars]
    grids = np.meshgrid(*axes, indexing="ij") if axes else []
    env = {iv.var: grid for iv, grid in zip(block.iter_vars, grids)}
    try:
        target = [np.broadcast_to(np.asarray(evaluate(i, env), dtype=np.int64), grids[0].shape) for i in store.indices]
        source = [np.broadcast_to(np.asarray(evaluate(i, env), dtype=np.int64), grids[0].shape)
                  for i in store.value.indices]
    except EvaluationError:
        return None
    for idx, extent in zip(target, shape):
        if idx.size and (idx.min() < 0 or idx.max() >= extent):
            return None
    for idx, extent in zip(source, array.shape):
        if idx.size and (idx.min() < 0 or idx.max() >= extent):
            return None
    out = np.zeros(shape, dtype=array.dtype)
    out[tuple(target)] = array[tuple(source)]
    return out


def _fresh_name(mod: IRModule, new_functions: dict, base: str) -> str:
    name, k = base, 1
    while name in mod.functions or name in new_functions:
        name, k = f"{base}_{k}", k + 1
    return name

