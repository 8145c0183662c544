"""fuse_tir: each primitive graph function (a fused group) becomes one PrimFunc.

The member kernels run in sequence in one PrimFunc; the tensors passed between them become
buffers of the root block, and every spatial producer stage is then inlined into its consumers
(`compute_inline`) when the schedule primitive proves that legal, so element-wise chains and
epilogues are computed in one pass without the intermediate in memory.  The call of the group is
replaced by a call_tir of the merged kernel (size vars no buffer carries become tir_vars).
"""
from __future__ import annotations

from ...ast import expr as tir
from ...ast.buffer import Buffer
from ...ast.function import IRModule, PrimFunc
from ...ast.functor import Mutator, free_vars, substitute
from ...ast.graph import Call, Constant, Function, GlobalVar, Var
from ...ast.stmt import Block, BlockRealize, seq, true
from ...ast.structural import structural_equal
from ...errors import RefcompError
from ...loops.passes.bind_repeated_math import has_costly_math
from ..op.base import call_tir
from .common import graph_functions, map_blocks, with_bindings


class _Rewrite(Mutator):
    def __init__(self, buffer_map: dict, names: set) -> None:
        super().__init__()
        self.buffer_map.update(buffer_map)
        self.names = names

    def visit_Block(self, block: Block) -> Block:
        new = self.generic_visit(block)
        if new.name == "root":
            return new
        name, k = new.name, 0
        while name in self.names:
            k += 1
            name = f"{new.name}_{k}"
        self.names.add(name)
        return new.with_(name=name)


def _buffer(name: str, info) -> Buffer:
    """A buffer for a graph tensor (a storage-only element type as the type kernels see)."""
    return Buffer(name, tuple(info.shape), info.dtype.storage if info.dtype is not None else info.dtype)


def merge_group(fn: Function, mod: IRModule, name: str) -> tuple[PrimFunc, tuple]:
    """One PrimFunc computing the primitive function fn; returns it and its trailing scalar args."""
    value_buffer: dict = {}
    params = []
    for p in fn.params:
        buf = _buffer(p.name, p.struct_info)
        value_buffer[p] = buf
        params.append(buf)
    bindings = [b for block in fn.body.blocks for b in block.bindings]
    names: set = set()
    temps: set = set()  # the member kernels' own root buffers met so far
    stages, allocs, intermediates = [], [], []
    for k, b in enumerate(bindings):
        call = b.value
        callee: PrimFunc = mod[call.args[0].name]
        args = call.args[1:]
        actual_shapes = [a.struct_info.shape for a in args] + [call.sinfo_args[0].shape]
        var_map: dict = {}
        for buf, shape in zip(callee.buffers, actual_shapes):
            for d, a in zip(buf.shape, shape):
                if isinstance(d, tir.Var) and d not in var_map and d is not a:
                    var_map[d] = a if a.dtype == d.dtype else a.astype(d.dtype)
        for scalar, value in zip(callee.scalar_params, call.attrs.get("tir_vars", ())):
            var_map.setdefault(scalar, value)
        member = substitute(callee, var_map) if var_map else callee
        last = k == len(bindings) - 1
        out = _buffer(b.var.name if not last else "out", call.sinfo_args[0])
        value_buffer[b.var] = out
        if not last:
            intermediates.append(out)
        mapping = {}
        for buf, arg in zip(member.buffers, list(args) + [None]):
            mapping[buf] = value_buffer[arg] if arg is not None else out
        root = member.body
        if not (isinstance(root, BlockRealize) and root.block.name == "root"):
            raise RefcompError(f"fuse_tir: kernel {callee.name} has no root block")
        for temp in root.block.alloc_buffers:
            # a kernel called twice in the group: each call gets temporaries of its own
            if temp in temps:
                mapping[temp] = temp.with_(name=f"{temp.name}_{len(temps)}")
            temps.add(temp)
        rewriter = _Rewrite(mapping, names)
        stages.append(rewriter.visit(root.block.body))
        allocs.extend(rewriter.visit(a) for a in root.block.alloc_buffers)
    params.append(value_buffer[bindings[-1].var])
    body = seq(*stages)
    root = Block("root", (), (), (), body, alloc_buffers=tuple(allocs) + tuple(intermediates))
    bare = {d for p in params for d in p.shape if isinstance(d, tir.Var)}
    scalars = []
    for v in free_vars(BlockRealize((), true(), root)) + [v for p in params for d in p.shape for v in free_vars(d)]:
        if v not in bare and v not in scalars:
            scalars.append(v)
    func = PrimFunc(tuple(params) + tuple(scalars), BlockRealize((), true(), root), name)
    return _inline_producers(func, intermediates), tuple(scalars)


def _inline_producers(func: PrimFunc, intermediates: list) -> PrimFunc:
    """Inline every spatial stage writing an intermediate (or one of its own temporaries)."""
    from ...loops.schedule import Schedule

    sch = Schedule(func)
    inline_spatial_stages(sch)
    return sch.func


# Costly math (has_costly_math: an intrinsic of COSTLY_MATH, or the inline exponential's Lets) costs
# far more than a load: a stage computing it is kept in memory when a reduction reads it, since a
# reduction loop runs scalar (its value would be recomputed there one lane at a time, where the
# stage itself runs in vector loops).


def inline_spatial_stages(sch) -> None:
    """Inline (checked `compute_inline`) each spatial stage writing a buffer other than the
    kernel's outputs, except a stage with costly math (has_costly_math) that a reduction reads and
    a stage a convolution or a pooling window reads (its padded input)."""
    from ...ast.functor import collect
    from ...loops.defaults.pool import is_window_block

    func = sch.func
    outputs = {id(b) for b in func.buffers}
    for block in [b for b in collect(func.body, Block) if b.name != "root"]:
        if any(iv.kind != "spatial" for iv in block.iter_vars):
            continue
        if any(id(w.buffer) in outputs for w in block.writes):
            continue
        try:
            rv = sch.get_block(block.name)
            consumers = [sch.get(c) for c in sch.get_consumers(rv)]
            if has_costly_math(block.body) and any(any(iv.kind != "spatial" for iv in c.iter_vars) for c in consumers):
                continue
            if any(_is_convolution(c) or is_window_block(c) for c in consumers):
                continue  # the padded input keeps its own pass: inlined, its bounds test runs per multiply-add
            sch.compute_inline(rv)
        except RefcompError:
            continue


def _is_convolution(block: Block) -> bool:
    from ...loops.recipes import blocked_conv_shape, conv_shape

    for recognise in (conv_shape, blocked_conv_shape):
        try:
            recognise(block)
        except RefcompError:
            continue
        return True
    return False


class _BindScalars(Mutator):
    """Loads of 0-d buffers replaced by their constant values (and dropped from block reads)."""

    def __init__(self, values: dict) -> None:
        super().__init__()
        self.values = values  # Buffer -> PrimExpr

    def visit_BufferLoad(self, load):
        if load.buffer in self.values and not load.indices:
            return self.values[load.buffer]
        return self.generic_visit(load)

    def visit_Block(self, block: Block) -> Block:
        new = self.generic_visit(block)
        reads = tuple(r for r in new.reads if r.buffer not in self.values)
        return new if len(reads) == len(new.reads) else new.with_(reads=reads)


def _scalar_constant(value):
    """The PrimExpr of a 0-d int/float graph Constant, else None."""
    if not isinstance(value, Constant):
        return None
    array = value.data.array
    if array.ndim != 0 or array.dtype.kind not in "fiu" or array.dtype.itemsize > 8:
        return None
    if array.dtype.kind == "f":
        return tir.FloatImm(float(array), str(array.dtype))
    return tir.IntImm(int(array), str(array.dtype))


def bind_scalar_constants(func: PrimFunc, args: tuple) -> tuple[PrimFunc, tuple]:
    """func without the 0-d buffer params that args bind to scalar Constants: their values go into
    the code as immediates (the simplifier can then fold `select(c, 1, 0) > 0.5`), and the call
    passes the remaining args."""
    values, keep_params, keep_args = {}, [], []
    buffers = list(func.buffers)
    for k, param in enumerate(func.params):
        index = next((i for i, b in enumerate(buffers) if b is param), None)
        value = _scalar_constant(args[index]) if index is not None and index < len(args) else None
        if value is not None and str(value.dtype) == str(param.dtype):
            values[param] = value
            continue
        keep_params.append(param)
        if index is not None and index < len(args):
            keep_args.append(args[index])
    if not values:
        return func, args
    body = _BindScalars(values).visit(func.body)
    return func.with_(params=tuple(keep_params), body=body), tuple(keep_args)


def _single_call_args(mod: IRModule) -> dict[str, tuple]:
    """The args of each primitive function called exactly once in the module."""
    seen: dict[str, list] = {}
    for _, func in graph_functions(mod):
        if func.attrs.get("primitive"):
            continue

        def block_fn(block):
            for b in block.bindings:
                value = b.value
                if isinstance(value, Call) and isinstance(value.op, GlobalVar):
                    seen.setdefault(value.op.name, []).append(value.args)
            return block

        map_blocks(func, block_fn)
    return {name: calls[0] for name, calls in seen.items() if len(calls) == 1}


def fuse_tir(mod: IRModule) -> IRModule:
    """The module with every call of a primitive function replaced by a call_tir of a merged kernel."""
    merged: dict[str, tuple] = {}
    call_args = _single_call_args(mod)
    kept_args: dict[str, tuple] = {}  # primitive function -> the args its merged kernel still takes
    for fname, fn in list(mod.functions.items()):
        if isinstance(fn, Function) and fn.attrs.get("primitive"):
            func, scalars = merge_group(fn, mod, fname)
            if fname in call_args:
                func, kept_args[fname] = bind_scalar_constants(func, call_args[fname])
            func = func.with_attr("op_pattern", fn.attrs.get("op_pattern", "opaque"))
            for other_name, (other, other_scalars) in merged.items():
                # one kernel for groups that merge to the same PrimFunc but for its name (the same
                # layer's ops repeated with other weights); a str `other` already points elsewhere
                if isinstance(other, PrimFunc) and len(other_scalars) == len(scalars) and \
                        structural_equal(other, func.with_(name=other.name)):
                    func = None
                    merged[fname] = (other_name, scalars)
                    break
            if func is not None:
                merged[fname] = (func, scalars)
    if not merged:
        return mod
    for name, func in graph_functions(mod):
        if func.attrs.get("primitive"):
            continue

        def block_fn(block):
            out = []
            for b in block.bindings:
                value = b.value
                if isinstance(value, Call) and isinstance(value.op, GlobalVar) and value.op.name in merged:
                    target, scalars = merged[value.op.name]
                    target_name = target if isinstance(target, str) else value.op.name
                    args = kept_args.get(value.op.name, value.args)
                    value = call_tir(GlobalVar(target_name), args, value.struct_info, scalars or None)
                    value = value.with_(struct_info=b.var.struct_info)
                out.append(b if value is b.value else b.with_(value=value))
            return with_bindings(block, out)

        mod = mod.with_function(name, map_blocks(func, block_fn))
    for fname, (target, _) in merged.items():
        mod = mod.without_function(fname)
        if not isinstance(target, str):
            mod = mod.with_function(fname, target)
    return mod


_ = Var
