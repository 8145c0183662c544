"""Reduction primitives: decompose_reduction, rfactor."""
from __future__ import annotations

from ...ast import (
    Add, Block, BlockRealize, Buffer, BufferLoad, BufferRegion, BufferStore, For, IterVar, Max, Min, Mul,
    PrimExpr, PrimFunc, Range, Stmt, Var, collect, const, free_vars, seq, substitute,
)
from ...ast.structural import structural_equal
from ...errors import ScheduleError
from .legality import (
    check_complete_or_reduction, const_int, is_reduction_block, loop_var_uses, recheck_concurrent_loops,
)
from .lookup import locate_block, locate_loop
from .tree import block_realizes, fresh_block_name, replace_in_func, walk


def decompose_reduction(func: PrimFunc, block: Block, loop: For) -> tuple[PrimFunc, Block]:
    """Move a reduction block's init into its own block `<name>_init`, placed just before loop.

    Requires: a reduction block with an init; loop is one of its ancestors in its scope; no loop
    above `loop` binds a reduce iter; each loop from `loop` down binds only spatial or only reduce
    iters; the predicate uses no reduce loop.  The init block gets fresh copies of the spatial
    loops from `loop` down.

    Before: `for i: for k: C[vi] (init 0) += A[vi, vk]`; `decompose_reduction(C, k)` after:
    `for i: (C_init[vi] = 0); (for k: C[vi] += A[vi, vk])`.
    """
    location = locate_block(func, block, "decompose_reduction")
    realize = location.realize
    if block.init is None:
        raise ScheduleError(f"decompose_reduction: block {block.name} is not a reduction block (it has no init)",
                            ir=func, spot=realize)
    check_complete_or_reduction(func, realize, "decompose_reduction")
    loops = location.loops
    if not any(l is loop for l in loops):
        raise ScheduleError(f"decompose_reduction: loop {getattr(loop, 'loop_var', loop).name if isinstance(loop, For) else loop} "
                            f"is not an ancestor of block {block.name}", ir=func, spot=loop)
    position = next(k for k, l in enumerate(loops) if l is loop)
    for above in loops[:position]:
        if loop_var_uses(realize, above.loop_var)[1]:
            raise ScheduleError(f"decompose_reduction: loop {above.loop_var.name} above loop {loop.loop_var.name} "
                                f"binds a reduce iter of block {block.name}", ir=func, spot=above)
    below = loops[position:]
    reduce_loops = set()
    copies: list[tuple[For, Var]] = []
    for l in below:
        spatial, reduce = loop_var_uses(realize, l.loop_var)
        if spatial and reduce:
            raise ScheduleError(f"decompose_reduction: loop {l.loop_var.name} binds both spatial and reduce iters",
                                ir=func, spot=l)
        if reduce:
            reduce_loops.add(l.loop_var)
        else:
            copies.append((l, Var(f"{l.loop_var.name}_init", l.loop_var.dtype)))
    if set(free_vars(realize.predicate)) & reduce_loops:
        raise ScheduleError(f"decompose_reduction: the predicate of block {block.name} uses a reduce loop",
                            ir=func, spot=realize)
    renaming = {l.loop_var: v for l, v in copies}
    spatial_pairs = [(iv, value) for iv, value in zip(block.iter_vars, realize.iter_values) if iv.kind == "spatial"]
    init_vars = [IterVar(Var(iv.var.name + "_init", iv.var.dtype), iv.dom, "spatial") for iv, _ in spatial_pairs]
    var_map = {iv.var: new.var for (iv, _), new in zip(spatial_pairs, init_vars)}
    init_body = substitute(block.init, var_map)
    writes = tuple(substitute(w, var_map) for w in block.writes)
    name = fresh_block_name(func.body, f"{block.name}_init")
    init_block = Block(name, tuple(init_vars), (), writes, init_body)
    init_stmt: Stmt = BlockRealize(tuple(substitute(v, renaming) for _, v in spatial_pairs),
                                   substitute(realize.predicate, renaming), init_block)
    for l, var in reversed(copies):
        init_stmt = For(var, l.min, l.extent, "serial", init_stmt)
    updated = realize.with_(block=block.with_(init=None))
    new_loop = _replace_below(loop, realize, updated)
    new_func = replace_in_func(func, {id(loop): seq(init_stmt, new_loop)})
    recheck_concurrent_loops(new_func, "decompose_reduction")
    return new_func, init_block


def _replace_below(root: Stmt, old: Stmt, new: Stmt) -> Stmt:
    from .tree import replace

    return replace(root, {id(old): new})


# ----------------------------------------------------------------------------- rfactor

_COMBINERS = (Add, Mul, Max, Min)


def _reducer(func: PrimFunc, block: Block):
    """(combine class, output store, the other operand, init value) of a reduction update."""
    body, init = block.body, block.init
    if not isinstance(body, BufferStore) or not isinstance(init, BufferStore) or init.buffer is not body.buffer:
        raise ScheduleError(f"rfactor: block {block.name} must be one store with an init store to the same buffer",
                            ir=func, spot=block)
    value = body.value
    if not isinstance(value, _COMBINERS):
        raise ScheduleError(f"rfactor: block {block.name}: the update is not out = out + x (or *, max, min)",
                            ir=func, spot=block)
    for own, other in ((value.a, value.b), (value.b, value.a)):
        if isinstance(own, BufferLoad) and own.buffer is body.buffer and all(
            structural_equal(a, b, map_free_vars=False) for a, b in zip(own.indices, body.indices)
        ):
            if any(l.buffer is body.buffer for l in collect(other, BufferLoad)):
                break
            return type(value), body, other, init.value
    raise ScheduleError(f"rfactor: block {block.name}: the update is not out = out + x (or *, max, min)",
                        ir=func, spot=block)


def rfactor(func: PrimFunc, loop: For, factor_axis: int) -> tuple[PrimFunc, Block]:
    """Factor a reduction: partial results per iteration of `loop` go to a new buffer, reduced after.

    Requires: loop is serial and binds only reduce iters of the single block below it, a reduction
    `out = out (+ * max min) x` with an init; no loop binds both spatial and reduce iters; the block
    is the only block of its top-level loop nest; -(ndim + 1) <= factor_axis <= ndim.

    Creates `<out>_rf` with the loop's extent inserted at factor_axis, the block `<name>_rf`
    (that loop spatial, writing the partials) and the write-back block, which keeps the original
    name and reduces the partials into out.  Returns the rf block.
    """
    locate_loop(func, loop, "rfactor")
    if loop.kind != "serial":
        raise ScheduleError(f"rfactor: loop {loop.loop_var.name} must be serial, it is {loop.kind}", ir=func, spot=loop)
    realizes = [s for s in walk(loop) if isinstance(s, BlockRealize)]
    if len(realizes) != 1:
        raise ScheduleError(f"rfactor: loop {loop.loop_var.name} must hold exactly one block, it holds "
                            f"{len(realizes)}", ir=func, spot=loop)
    realize = realizes[0]
    block = realize.block
    if not is_reduction_block(block):
        raise ScheduleError(f"rfactor: block {block.name} is not a reduction block", ir=func, spot=realize)
    check_complete_or_reduction(func, realize, "rfactor")
    location = locate_block(func, block, "rfactor")
    spatial, reduce = loop_var_uses(realize, loop.loop_var)
    if spatial or not reduce:
        raise ScheduleError(f"rfactor: loop {loop.loop_var.name} must bind only reduce iters of block {block.name}",
                            ir=func, spot=loop)
    loops = location.loops
    for l in loops:
        s, r = loop_var_uses(realize, l.loop_var)
        if s and r:
            raise ScheduleError(f"rfactor: loop {l.loop_var.name} binds both spatial and reduce iters",
                                ir=func, spot=l)
        # the factored loop's extent sizes the partials' buffer; the others may be symbolic (the
        # rows of a row reduction: partials and write-back run over the same rows)
        if (l is loop and const_int(l.extent) is None) or const_int(l.min) != 0:
            raise ScheduleError(f"rfactor: loop {l.loop_var.name} needs "
                                f"{'a constant extent and ' if l is loop else ''}a zero start", ir=func, spot=l)
    outermost = loops[0]
    if len([s for s in walk(outermost) if isinstance(s, BlockRealize)]) != 1:
        raise ScheduleError(f"rfactor: block {block.name} must be the only block of its loop nest", ir=func,
                            spot=outermost)
    combine, store, operand, init_value = _reducer(func, block)
    identity = _identity(combine, store.buffer.dtype)
    out = store.buffer
    ndim = out.ndim
    if isinstance(factor_axis, bool) or not isinstance(factor_axis, int) or not -(ndim + 1) <= factor_axis <= ndim:
        raise ScheduleError(f"rfactor: factor_axis: expected an int in [{-(ndim + 1)}, {ndim}], got {factor_axis!r}",
                            ir=func, spot=loop)
    axis = factor_axis + ndim + 1 if factor_axis < 0 else factor_axis
    extent = const_int(loop.extent)
    rf_buffer = Buffer(f"{out.name}_rf", out.shape[:axis] + (const(extent, out.shape[0].dtype if ndim else "int32"),)
                       + out.shape[axis:], out.dtype, out.scope)

    # The rf block: one iter var per reduce-related loop (the rf loop spatial), old reduce iters
    # expressed through them.
    reduce_loops = [l for l in loops if loop_var_uses(realize, l.loop_var)[1]]
    loop_iter = {l.loop_var: IterVar(Var(f"v{l.loop_var.name}", l.loop_var.dtype), Range(0, l.extent),
                                     "spatial" if l is loop else "reduce") for l in reduce_loops}
    to_iters = {lv: iv.var for lv, iv in loop_iter.items()}
    spatial_ivs = [(iv, v) for iv, v in zip(block.iter_vars, realize.iter_values) if iv.kind == "spatial"]
    reduce_map = {iv.var: substitute(v, to_iters) for iv, v in zip(block.iter_vars, realize.iter_values)
                  if iv.kind == "reduce"}
    rf_var = loop_iter[loop.loop_var].var
    # A predicate on reduce loops (an imperfect split) moves into the value: every partial must
    # still be initialised, and the init only runs where the block runs.
    keep, move = [], []
    reduce_loop_vars = {l.loop_var for l in reduce_loops}
    spatial_loop_vars = {l.loop_var for l in loops} - reduce_loop_vars
    for conjunct in _conjuncts(realize.predicate):
        used = set(free_vars(conjunct))
        if not used & reduce_loop_vars:
            keep.append(conjunct)
        elif used & spatial_loop_vars:
            raise ScheduleError(f"rfactor: the predicate of block {block.name} mixes spatial and reduce loops",
                                ir=func, spot=realize)
        else:
            move.append(substitute(conjunct, to_iters))
    rf_index = store.indices[:axis] + (rf_var,) + store.indices[axis:]
    rf_operand = substitute(operand, reduce_map)
    if move:
        from ...ast import Call, all_

        rf_operand = Call("if_then_else", (all_(*move), rf_operand, identity), rf_operand.dtype)
    rf_point = BufferRegion(rf_buffer, tuple(Range(i, 1) for i in rf_index))
    if len(reduce_loops) > 1:
        rf_body = BufferStore(rf_buffer, combine(rf_buffer.vload(rf_index), rf_operand), rf_index)
        rf_init = BufferStore(rf_buffer, identity, rf_index)
        own_reads: tuple = (rf_point,)
    else:  # the rf loop was the whole reduction: each partial is a single term
        rf_body, rf_init, own_reads = BufferStore(rf_buffer, rf_operand, rf_index), None, ()
    rf_iter_vars = tuple(iv for iv, _ in spatial_ivs) + tuple(loop_iter[l.loop_var] for l in reduce_loops)
    rf_values = tuple(v for _, v in spatial_ivs) + tuple(l.loop_var for l in reduce_loops)
    rf_reads = own_reads + tuple(BufferRegion(r.buffer, tuple(Range(substitute(x.min, reduce_map), x.extent)
                                                                for x in r.region))
                                   for r in block.reads if r.buffer is not out)
    rf_name = fresh_block_name(func.body, f"{block.name}_rf")
    rf_block = Block(rf_name, rf_iter_vars, rf_reads, (rf_point,), rf_body, init=rf_init)
    rf_predicate = all_conjuncts(keep)
    rf_realize = BlockRealize(rf_values, rf_predicate, rf_block)

    # The write-back block: the spatial iters plus the rf axis as a reduce iter.
    wb_spatial = [IterVar(Var(iv.var.name, iv.var.dtype), iv.dom, "spatial") for iv, _ in spatial_ivs]
    wb_map = {iv.var: new.var for (iv, _), new in zip(spatial_ivs, wb_spatial)}
    wb_rf = IterVar(Var(f"v{loop.loop_var.name}", loop.loop_var.dtype), Range(0, loop.extent), "reduce")
    wb_out_index = tuple(substitute(i, wb_map) for i in store.indices)
    wb_rf_index = wb_out_index[:axis] + (wb_rf.var,) + wb_out_index[axis:]
    wb_body = BufferStore(out, combine(out.vload(wb_out_index), rf_buffer.vload(wb_rf_index)), wb_out_index)
    wb_init = BufferStore(out, init_value, wb_out_index)
    wb_out_point = BufferRegion(out, tuple(Range(i, 1) for i in wb_out_index))
    wb_block = Block(block.name, tuple(wb_spatial) + (wb_rf,),
                     (wb_out_point, BufferRegion(rf_buffer, tuple(Range(i, 1) for i in wb_rf_index))),
                     (wb_out_point,), wb_body, init=wb_init, annotations=block.annotations)
    wb_doms = [iv.dom for iv in wb_spatial] + [wb_rf.dom]
    wb_loop_vars = [Var(f"ax{k}", dom.extent.dtype) for k, dom in enumerate(wb_doms)]
    wb_stmt: Stmt = BlockRealize(tuple(wb_loop_vars), realize.predicate if False else _true(), wb_block)
    for var, dom in reversed(list(zip(wb_loop_vars, wb_doms))):
        wb_stmt = For(var, dom.min, dom.extent, "serial", wb_stmt)

    from .tree import replace

    rf_nest = replace(outermost, {id(realize): rf_realize})
    mapping = {id(outermost): seq(rf_nest, wb_stmt)}
    scope_realize = location.path[location.scope_index - 1] if location.scope_index >= 1 else None
    if not isinstance(scope_realize, BlockRealize):
        raise ScheduleError(f"rfactor: block {block.name} is not inside a root block", ir=func)
    new_func = replace_in_func(func, mapping)
    for r in block_realizes(new_func.body):
        if r.block.name == scope_realize.block.name:
            scope = r.block
            new_func = replace_in_func(new_func, {id(r): r.with_(
                block=scope.with_(alloc_buffers=scope.alloc_buffers + (rf_buffer,)))})
            break
    return new_func, rf_block


def _true() -> PrimExpr:
    from ...ast.stmt import true

    return true()


def reduction_identity(combine, dtype) -> PrimExpr:
    """The value x with combine(x, y) == y for every y (combine: Add, Mul, Max or Min)."""
    return _identity(combine, dtype)


def _identity(combine, dtype) -> PrimExpr:
    """The value x with combine(x, y) == y for every y."""
    if combine is Add:
        return const(0, dtype)
    if combine is Mul:
        return const(1, dtype)
    if combine is Max:
        return const(dtype.min_value(), dtype)
    return const(dtype.max_value(), dtype)


def _conjuncts(expr: PrimExpr) -> list[PrimExpr]:
    from ...ast import And, IntImm

    if isinstance(expr, And):
        return _conjuncts(expr.a) + _conjuncts(expr.b)
    if isinstance(expr, IntImm) and expr.value == 1:
        return []
    return [expr]


def all_conjuncts(parts: list[PrimExpr]) -> PrimExpr:
    """The conjunction of parts (true for none)."""
    from ...ast import all_

    return all_(*parts) if parts else _true()
