"""reshape_views: a kernel that only reshapes becomes a view of its input (no copy, no call).

After fusion, a reshape that joined no neighbour is a call_tir of a PrimFunc copying its input
to its output in row-major order.  Since every tensor a graph function holds is compact and
row-major, that output is the input's storage read under the new shape:

    lv = R.call_tir(cls.reshape3, (x,), out_sinfo=R.Tensor((b, s, 384), "float32"))
    ->  lv = R.view(x, shape=(b, s, 384))

The PrimFunc is recognized by what it does, not by its name (`is_reshape`): one spatial block
under a plain loop nest, writing each element of the output once from one load of the input,
with the load's row-major flat index proved equal to the store's over the block's domain, and
the two element counts proved equal (the prover, Z3 where the simplifier stops short: a
`(f // d) * d + f % d` over a symbolic d is Z3's).  A view is made only where its result is
read by kernels alone (or by further views): a returned or otherwise escaping result keeps its
copy, so an output never aliases an input or another output.  plan_memory counts a view's
readers as readers of its source (spec/graph.md, "Views").
"""
from __future__ import annotations

from ...ast import expr as tir
from ...ast.function import IRModule, PrimFunc
from ...ast.graph import Call, GlobalVar, Var, VarBinding
from ...ast.graph_struct_info import TensorStructInfo
from ...ast.stmt import Block, BlockRealize, BufferStore, For, Stmt
from ...loops.passes.flatten_buffers import flat_index, flat_length
from ..op.base import view
from ..shape_facts import decide_equal, is_const
from .common import graph_functions, map_blocks, used_vars, with_bindings


def is_reshape(func: PrimFunc) -> bool:
    """Whether func writes its second buffer as its first read in row-major order (see module)."""
    buffers = func.buffers
    if len(buffers) != 2:
        return False
    source, target = buffers
    if source.dtype != target.dtype or source.strides or target.strides or source is target:
        return False
    if not all(_is_zero(b.elem_offset) for b in buffers):
        return False
    nest = _single_block_nest(func.body)
    if nest is None:
        return False
    loops, realize = nest
    block = realize.block
    store = block.body
    if not (isinstance(store, BufferStore) and store.buffer is target
            and isinstance(store.value, tir.BufferLoad) and store.value.buffer is source):
        return False
    spatial = [iv.var for iv in block.iter_vars]
    if list(store.indices) != spatial or len(spatial) != len(target.shape):
        return False
    ranges = []  # each iter var in [0, its extent): the facts the flat index claim holds under
    for iv, loop, value, dim in zip(block.iter_vars, loops, realize.iter_values, target.shape):
        # the loop nest runs the block once for each point of the output's shape
        if value is not loop.loop_var or not _is_zero(loop.min) or not _is_zero(iv.dom.min):
            return False
        if not (_proved(loop.extent, iv.dom.extent) and _proved(iv.dom.extent, dim)):
            return False
        ranges += [tir.LE(tir.IntImm(0, iv.var.dtype), iv.var), tir.LT(iv.var, iv.dom.extent)]
    written = flat_index(target, tuple(store.indices))
    read = flat_index(source, tuple(store.value.indices))
    return _proved(written, read, ranges) and _proved(flat_length(source), flat_length(target))


def _single_block_nest(body: Stmt) -> tuple[list[For], BlockRealize] | None:
    """The loops around the one block of body (inside the root block) and that block's realize."""
    stmt = body
    if isinstance(stmt, BlockRealize) and stmt.block.name == "root":
        root = stmt.block
        if root.init is not None or root.alloc_buffers or root.match_buffers:
            return None
        stmt = root.body
    loops: list[For] = []
    while isinstance(stmt, For):
        loops.append(stmt)
        stmt = stmt.body
    if not isinstance(stmt, BlockRealize) or not _is_true(stmt.predicate):
        return None
    block: Block = stmt.block
    if (block.init is not None or block.alloc_buffers or block.match_buffers
            or any(iv.kind != "spatial" for iv in block.iter_vars) or len(loops) != len(block.iter_vars)):
        return None
    return loops, stmt


def _is_zero(e) -> bool:
    return e is None or is_const(e, 0)


def _is_true(e) -> bool:
    return is_const(e, 1)


def _proved(a, b, assumptions=()) -> bool:
    """a == b proved (Z3 where the simplifier stops), int32 and int64 compared as int64."""
    return decide_equal(a, b, assumptions).status == "proved"


def rewrite_reshape_views(mod: IRModule) -> IRModule:
    """The module with each reshape kernel whose result only kernels read replaced by a view."""
    reshapes: dict[str, bool] = {}
    for name, func in graph_functions(mod):
        if func.attrs.get("primitive"):
            continue
        new = _rewrite(mod, func, reshapes)
        if new is not func:
            mod = mod.with_function(name, new)
    return mod


def _rewrite(mod: IRModule, func, reshapes: dict[str, bool]):
    escaping = _escaping_vars(func)

    def rewrite_block(block):
        bindings = []
        for b in block.bindings:
            value = b.value
            if isinstance(b, VarBinding) and b.var not in escaping and _is_reshape_call(mod, value, reshapes):
                b = b.with_(value=view(value.args[1], value.sinfo_args[0].shape).with_(struct_info=value.struct_info))
            bindings.append(b)
        return with_bindings(block, bindings)

    return map_blocks(func, rewrite_block)


def _is_reshape_call(mod: IRModule, value, reshapes: dict[str, bool]) -> bool:
    if not (isinstance(value, Call) and value.op_name == "call_tir" and isinstance(value.args[0], GlobalVar)
            and len(value.args) == 2 and isinstance(value.args[1], Var) and len(value.sinfo_args) == 1):
        return False
    info, source = value.sinfo_args[0], value.args[1].struct_info
    if not (isinstance(info, TensorStructInfo) and info.shape is not None
            and isinstance(source, TensorStructInfo) and source.shape is not None and source.dtype == info.dtype):
        return False
    name = value.args[0].name
    if name not in reshapes:
        callee = mod.functions.get(name)
        reshapes[name] = isinstance(callee, PrimFunc) and is_reshape(callee)
    return reshapes[name]


def _escaping_vars(func) -> set:
    """Vars read by anything but a kernel call's arguments: the function's result, tuples,
    match_casts, host ops, calls of graph functions (a view of theirs would alias)."""
    out: set = set(used_vars(func.body.body))
    for block in func.body.blocks:
        for b in block.bindings:
            value = b.value
            if not (isinstance(b, VarBinding) and isinstance(value, Call)
                    and value.op_name in ("call_tir", "call_dps_packed")):
                out.update(used_vars(value))
    return out
