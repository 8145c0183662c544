"""Loop primitives: split, fuse, reorder, add_unit_loop."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ...ast import (
    And, Block, BlockRealize, Cast, For, IntImm, PrimExpr, PrimFunc, SeqStmt, Stmt, Var, const, free_vars,
    substitute,
)
from ...errors import ScheduleError
from .legality import (
    blocks_under, check_affine_binding, check_iter_kinds, check_loop_is_plain, check_same_iteration_cover,
    const_int, product,
)
from .lookup import locate_block, locate_loop
from .tree import replace_in_func, walk


def _guard_blocks(stmt: Stmt, condition: PrimExpr, func: PrimFunc, primitive: str) -> Stmt:
    """stmt with condition AND-ed onto the predicate of every block directly below it."""
    from .tree import replace, stmt_children

    def check(node: Stmt) -> None:
        if isinstance(node, BlockRealize):
            return
        if not isinstance(node, (For, SeqStmt)):
            raise ScheduleError(f"{primitive}: an imperfect split needs only loops and blocks below the loop, "
                                f"found {type(node).__name__}", ir=func, spot=node)
        for child in stmt_children(node):
            check(child)

    check(stmt)
    mapping = {}
    for realize in blocks_under(stmt) if not isinstance(stmt, BlockRealize) else [stmt]:
        predicate = condition if _is_true(realize.predicate) else And(realize.predicate, condition)
        mapping[id(realize)] = realize.with_(predicate=predicate)
    return replace(stmt, mapping)


def _is_true(expr: PrimExpr) -> bool:
    return isinstance(expr, IntImm) and expr.dtype.is_bool and expr.value == 1


def split(func: PrimFunc, loop: For, factors: Sequence[int | None], preserve_unit_iters: bool = True,
          disable_predication: bool = False) -> tuple[PrimFunc, list[For]]:
    """Split loop into len(factors) nested loops, outermost first.

    Requires: the loop starts at 0, is serial, has no annotations; factors are positive ints with
    at most one None (inferred as ceil(extent / product of the others)); without None, the product
    must be at least the extent.  When the product exceeds the extent, every block below gets the
    predicate `fused index < extent` (unless disable_predication, which requires a product equal to
    the extent).

    Before: `for i in range(128): B[i] = ...`; `split(i, [None, 32])` after:
    `for i_0 in range(4): for i_1 in range(32): B[i_0 * 32 + i_1] = ...`.
    """
    locate_loop(func, loop, "split")
    if not isinstance(factors, (list, tuple)) or not factors or sum(f is None for f in factors) > 1 or any(
        f is not None and (isinstance(f, bool) or not isinstance(f, (int, np.integer)) or f <= 0) for f in factors
    ):
        raise ScheduleError(f"split: factors: expected positive ints with at most one None, got {list(factors) if isinstance(factors, (list, tuple)) else factors!r}",
                            ir=func, spot=loop)
    check_loop_is_plain(func, loop, "split")
    extent = loop.extent
    if const_int(extent) is not None:
        extent = IntImm(const_int(extent), extent.dtype)
    known = product(int(f) for f in factors if f is not None)
    const_extent = const_int(extent)
    if None in factors:
        if const_extent is not None:
            inferred: PrimExpr = IntImm(-(-const_extent // known), extent.dtype)
        else:
            inferred = (extent + (known - 1)) // known if known != 1 else extent
        extents = [inferred if f is None else IntImm(int(f), extent.dtype) for f in factors]
    else:
        extents = [IntImm(int(f), extent.dtype) for f in factors]
        if const_extent is not None and known < const_extent:
            raise ScheduleError(f"split: the factors {list(factors)} multiply to {known}, less than the extent "
                                f"{const_extent} of loop {loop.loop_var.name}", ir=func, spot=loop)
    total = product(const_int(e) for e in extents) if all(const_int(e) is not None for e in extents) else None
    exact = const_extent is not None and total == const_extent
    if disable_predication and not exact:
        raise ScheduleError("split: disable_predication needs factors that multiply to the extent exactly",
                            ir=func, spot=loop)
    if const_extent is None and None not in factors:
        raise ScheduleError(f"split: loop {loop.loop_var.name} has the symbolic extent; give one factor as None",
                            ir=func, spot=loop)
    names = [f"{loop.loop_var.name}_{k}" for k in range(len(extents))]
    new_vars = [Var(name, loop.loop_var.dtype) for name in names]
    fused: PrimExpr | None = None
    for k, (var, ext) in enumerate(zip(new_vars, extents)):
        if not preserve_unit_iters and const_int(ext) == 1:
            continue
        stride = extents[k + 1:]
        term: PrimExpr = var
        for s in stride:
            if const_int(s) != 1:
                term = term * s
        fused = term if fused is None else fused + term
    if fused is None:
        fused = const(0, loop.loop_var.dtype)
    body = substitute(loop.body, {loop.loop_var: fused})
    if not exact:
        body = _guard_blocks(body, fused < extent, func, "split")
    stmt: Stmt = body
    new_loops = []
    for var, ext in reversed(list(zip(new_vars, extents))):
        stmt = For(var, const(0, var.dtype), ext, "serial", stmt)
        new_loops.append(stmt)
    new_loops.reverse()
    return replace_in_func(func, {id(loop): stmt}), new_loops


def fuse(func: PrimFunc, loops: Sequence[For], preserve_unit_iters: bool = True) -> tuple[PrimFunc, For]:
    """Fuse a chain of nested loops (each the only child of the previous) into one loop.

    Requires: at least two loops; each starts at 0, is serial, unannotated; loops[k + 1] is the
    whole body of loops[k]; no extent depends on an outer loop of the chain.

    Before: `for i in range(4): for j in range(8): B[i, j]`; after:
    `for i_j_fused in range(32): B[i_j_fused // 8, i_j_fused % 8]`.
    """
    loops = list(loops)
    if len(loops) < 2:
        raise ScheduleError(f"fuse: expected at least 2 loops, got {len(loops)}", ir=func)
    for loop in loops:
        locate_loop(func, loop, "fuse")
        check_loop_is_plain(func, loop, "fuse")
    if len({id(l) for l in loops}) != len(loops):
        raise ScheduleError("fuse: a loop appears twice", ir=func)
    for outer, inner in zip(loops, loops[1:]):
        if outer.body is not inner:
            raise ScheduleError(f"fuse: loop {inner.loop_var.name} is not the only child of loop "
                                f"{outer.loop_var.name}", ir=func, spot=outer)
    outer_vars = set()
    for loop in loops:
        if set(free_vars(loop.extent)) & outer_vars:
            raise ScheduleError(f"fuse: the extent of loop {loop.loop_var.name} depends on an outer loop",
                                ir=func, spot=loop)
        outer_vars.add(loop.loop_var)
    dtype = loops[0].loop_var.dtype
    name = "_".join(l.loop_var.name for l in loops) + "_fused"
    fused_var = Var(name, dtype)
    extents = [l.extent for l in loops]
    mapping = {}
    for k, loop in enumerate(loops):
        inner = extents[k + 1:]
        inner_product = _mul_all(inner)
        value: PrimExpr = fused_var
        if k > 0:
            modulus = _mul_all(extents[k:])
            value = const(0, dtype) if const_int(modulus) == 1 else value % modulus
        if inner and const_int(inner_product) != 1:
            value = value // inner_product
        if not preserve_unit_iters and const_int(loop.extent) == 1:
            value = const(0, dtype)
        if loop.loop_var.dtype != dtype:  # loops of mixed index types: each keeps its own
            value = Cast(loop.loop_var.dtype, value)
        mapping[loop.loop_var] = value
    body = substitute(loops[-1].body, mapping)
    total = _mul_all(extents)
    new_loop = For(fused_var, const(0, dtype), total, "serial", body)
    return replace_in_func(func, {id(loops[0]): new_loop}), new_loop


def _mul_all(extents: Sequence[PrimExpr]) -> PrimExpr:
    if all(const_int(e) is not None for e in extents):
        return IntImm(product(const_int(e) for e in extents), extents[0].dtype if extents else "int32")
    result = extents[0]
    for e in extents[1:]:
        result = result * e
    return result


def reorder(func: PrimFunc, loops: Sequence[For]) -> tuple[PrimFunc, None]:
    """Put the given loops, which lie on one chain of nested loops, in the given order.

    Requires: no loop twice; the loops lie on one path where each loop between the outermost and
    the innermost given loop has a single child; every block below has affine bindings and only
    spatial/reduce iters; no loop extent depends on a loop that would move inside it.

    Before: `for i: for j: ...`; `reorder(j, i)` after: `for j: for i: ...`.
    """
    loops = list(loops)
    if not loops:
        raise ScheduleError("reorder: expected at least one loop", ir=func)
    if len({id(l) for l in loops}) != len(loops):
        raise ScheduleError("reorder: a loop appears more than once", ir=func)
    paths = [locate_loop(func, l, "reorder") for l in loops]
    deepest = max(paths, key=len)
    for loop, path in zip(loops, paths):
        if deepest[len(path) - 1] is not loop:
            raise ScheduleError(f"reorder: loop {loop.loop_var.name} is not on the same chain as the others",
                                ir=func, spot=loop)
    positions = sorted(len(p) - 1 for p in paths)
    chain = deepest[positions[0]:positions[-1] + 1]
    for outer, inner in zip(chain, chain[1:]):
        if not isinstance(outer, For) or outer.body is not inner:
            raise ScheduleError(f"reorder: the loops are not a chain: "
                                f"{getattr(outer, 'loop_var', outer).name if isinstance(outer, For) else type(outer).__name__}"
                                " has more than one child", ir=func, spot=outer)
    for realize in [s for s in walk(chain[-1]) if isinstance(s, BlockRealize)]:
        check_iter_kinds(func, realize, "reorder")
        check_affine_binding(func, realize, "reorder")
    # Blocks below the chain that feed each other must do so within one iteration of every
    # chain loop, or a new order would change which values they see.
    top = blocks_under(chain[-1].body)
    for consumer in top:
        for producer in top:
            shared = {r.buffer for r in producer.block.writes} & {r.buffer for r in consumer.block.reads}
            if producer is not consumer:
                for buffer in shared:
                    check_same_iteration_cover(func, chain[-1], producer, consumer, buffer, "reorder")
    by_depth = {len(p) - 1: l for l, p in zip(loops, paths)}
    order = iter(loops)
    new_chain = [next(order) if depth in by_depth else chain[depth - positions[0]]
                 for depth in range(positions[0], positions[-1] + 1)]
    seen: set[Var] = set()
    for loop in new_chain:
        inner_vars = {l.loop_var for l in new_chain} - seen - {loop.loop_var}
        if set(free_vars(loop.extent)) & inner_vars or set(free_vars(loop.min)) & inner_vars:
            raise ScheduleError(f"reorder: the range of loop {loop.loop_var.name} depends on a loop that would "
                                "be inside it", ir=func, spot=loop)
        seen.add(loop.loop_var)
    stmt: Stmt = chain[-1].body
    for loop in reversed(new_chain):
        stmt = loop.with_(body=stmt)
    return replace_in_func(func, {id(chain[0]): stmt}), None


def add_unit_loop(func: PrimFunc, block_or_loop: Block | For) -> tuple[PrimFunc, For]:
    """Wrap a block (its realize) or a loop in a new loop of extent 1.  Requires nothing.

    Before: `B[vi] = ...`; after: `for u in range(1): B[vi] = ...`.
    """
    if isinstance(block_or_loop, Block):
        target: Stmt = locate_block(func, block_or_loop, "add_unit_loop").realize
    else:
        locate_loop(func, block_or_loop, "add_unit_loop")
        target = block_or_loop
    loop = For(Var("u"), const(0), const(1), "serial", target)
    return replace_in_func(func, {id(target): loop}), loop
