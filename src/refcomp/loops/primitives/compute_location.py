"""Compute location: compute_at, reverse_compute_at, compute_inline, reverse_compute_inline."""
from __future__ import annotations

from typing import Sequence

from ...ast import (
    And, Block, BlockRealize, Buffer, BufferLoad, BufferRegion, BufferStore, For, IntImm, Mutator,
    PrimExpr, PrimFunc, Range, Stmt, Var, const, seq, substitute,
)
from ...ast.stmt import true
from ...errors import ScheduleError
from ...shape.canonical import Sum
from .affine import constant_difference, form_expr
from .legality import (
    access_region, check_complete_or_reduction, check_not_output_block, check_not_viewed, const_int, prove_over_loops,
    recheck_concurrent_loops,
)
from .lookup import BlockLocation, get_consumers, get_producers, locate_block, locate_loop, scope_siblings
from .tree import block_realizes, replace, replace_in_func, walk


# ----------------------------------------------------------------------------- shared pieces

def _is_true(expr: PrimExpr) -> bool:
    return isinstance(expr, IntImm) and expr.dtype.is_bool and expr.value == 1


def _check_target(func: PrimFunc, location: BlockLocation, loop: For, primitive: str) -> list[Stmt]:
    loop_path = locate_loop(func, loop, primitive)
    block = location.block
    if any(s is loop for s in location.path):
        raise ScheduleError(f"{primitive}: loop {loop.loop_var.name} is an ancestor of block {block.name}",
                            ir=func, spot=loop)
    scope_index = max((i for i, s in enumerate(loop_path) if isinstance(s, Block)), default=-1)
    loop_scope = loop_path[scope_index] if scope_index >= 0 else None
    if loop_scope is not location.scope:
        raise ScheduleError(f"{primitive}: block {block.name} and loop {loop.loop_var.name} are not in the same "
                            "block scope", ir=func, spot=loop)
    if not _is_true(location.realize.predicate):
        raise ScheduleError(f"{primitive}: block {block.name} has a predicate (from an imperfect split); move it "
                            "before splitting its loops", ir=func, spot=location.realize)
    return loop_path


def _check_order_and_interference(func: PrimFunc, location: BlockLocation, loop_path: list[Stmt],
                                  before: bool, primitive: str) -> None:
    """The block's statement is before (or after) the loop's in the scope, and no block between
    them touches what the block reads or writes in a conflicting way."""
    block = location.block
    siblings = scope_siblings(func, location)
    index_of = {id(r): k for k, r in enumerate(siblings)}
    loop_blocks = [r for r in walk(loop_path[-1]) if isinstance(r, BlockRealize)]
    loop_positions = [index_of[id(r)] for r in loop_blocks if id(r) in index_of]
    mine = index_of[id(location.realize)]
    if not loop_positions:
        raise ScheduleError(f"{primitive}: loop {loop_path[-1].loop_var.name} holds no block", ir=func)
    if before and mine > min(loop_positions):
        raise ScheduleError(f"{primitive}: block {block.name} comes after loop {loop_path[-1].loop_var.name}; "
                            "a producer can only move down into its consumers' loop", ir=func, spot=location.realize)
    if not before and mine < max(loop_positions):
        raise ScheduleError(f"{primitive}: block {block.name} comes before loop {loop_path[-1].loop_var.name}; "
                            "a consumer can only move up into its producers' loop", ir=func, spot=location.realize)
    lo, hi = (mine + 1, min(loop_positions)) if before else (max(loop_positions) + 1, mine)
    reads = {r.buffer for r in block.reads}
    writes = {r.buffer for r in block.writes}
    for other in siblings[lo:hi]:
        if any(other is r for r in loop_blocks):
            continue
        other_reads = {r.buffer for r in other.block.reads}
        other_writes = {r.buffer for r in other.block.writes}
        if other_writes & (reads | writes) or other_reads & writes:
            raise ScheduleError(f"{primitive}: block {other.block.name} between block {block.name} and loop "
                                f"{loop_path[-1].loop_var.name} accesses the same buffers", ir=func, spot=other)


def _union_regions(regions: list[list[tuple[Sum, Sum]] | None], primitive: str, what: str,
                   func: PrimFunc) -> list[tuple[Sum, int]]:
    """Per-dim (min, extent) of the union of regions; extents must be constants."""
    result: list[tuple[Sum, Sum]] | None = None
    for region in regions:
        if region is None:
            raise ScheduleError(f"{primitive}: cannot bound the region of {what} (non-affine access, "
                                "symbolic loop extent, or split/fused indices that do not fill a box)", ir=func)
        if result is None:
            result = list(region)
            continue
        merged = []
        for (alo, ahi), (blo, bhi) in zip(result, region):
            dlo, dhi = constant_difference(alo, blo), constant_difference(ahi, bhi)
            if dlo is None or dhi is None:
                raise ScheduleError(f"{primitive}: the regions of {what} do not differ by constants", ir=func)
            merged.append((blo if dlo > 0 else alo, ahi if dhi > 0 else bhi))
        result = merged
    out = []
    for lo, hi in result or []:
        extent = constant_difference(hi, lo)
        if extent is None:
            raise ScheduleError(f"{primitive}: the region of {what} has no constant extent", ir=func)
        out.append((lo, extent + 1))
    return out


def _point_dims(func: PrimFunc, block: Block, regions: Sequence[BufferRegion], primitive: str) -> dict[Var, int]:
    """iter var -> dim for regions indexed by distinct iter vars (`B[vi, vj]`)."""
    own = {iv.var for iv in block.iter_vars}
    dims: dict[Var, int] = {}
    for region in regions:
        for d, r in enumerate(region.region):
            if not isinstance(r.min, Var) or r.min not in own or const_int(r.extent) != 1:
                raise ScheduleError(f"{primitive}: block {block.name} must access {region.buffer.name} at distinct "
                                    "iter vars (like B[vi, vj])", ir=func)
            if dims.get(r.min, d) != d:
                raise ScheduleError(f"{primitive}: block {block.name} uses iter var {r.min.name} for two dims of "
                                    f"{region.buffer.name}", ir=func)
            dims[r.min] = d
    return dims


def _domain_end(iv) -> PrimExpr:
    """dom.min + dom.extent, folded when constant."""
    end = const_int(iv.dom.min + iv.dom.extent)
    if end is not None:
        return const(end, iv.var.dtype)
    return iv.dom.extent if const_int(iv.dom.min) == 0 else iv.dom.min + iv.dom.extent


def _regenerate(func: PrimFunc, location: BlockLocation, ranges: dict[Var, tuple[Sum, int]],
                outer_loops: Sequence[For], preserve_unit_loops: bool) -> Stmt:
    """A new loop nest running the block over ranges (full domain for iters not in ranges)."""
    block = location.block
    values: list[PrimExpr] = []
    loops: list[tuple[Var, int | PrimExpr]] = []
    conditions: list[PrimExpr] = []
    for iv in block.iter_vars:
        if iv.var in ranges:
            lo_form, extent = ranges[iv.var]
            low = form_expr(lo_form, iv.var.dtype)
            # The regenerated range may leave the iter var's domain (a stencil's halo, a partial
            # tile); keep a predicate for each side that cannot be proved to stay inside.
            end = _domain_end(iv)
            need_low = prove_over_loops(low >= iv.dom.min, outer_loops)[0] != "proved"
            need_high = prove_over_loops(low + (extent - 1) < end, outer_loops)[0] != "proved"
        else:
            low, extent = iv.dom.min, iv.dom.extent
            need_low = need_high = False
        if const_int(extent) == 1 and not preserve_unit_loops:
            value = low
        else:
            var = Var(f"ax{len(loops)}", iv.var.dtype)
            loops.append((var, extent))
            value = var if const_int(low) == 0 else low + var
        values.append(value)
        if need_low:
            conditions.append(value >= iv.dom.min)
        if need_high:
            conditions.append(value < _domain_end(iv))
    predicate = true()
    for condition in conditions:
        predicate = condition if _is_true(predicate) else And(predicate, condition)
    stmt: Stmt = BlockRealize(tuple(values), predicate, block)
    for var, extent in reversed(loops):
        # extents from the region union are Python ints: give them the loop var's type (an int64
        # nest from the graph level must not get int32 extents)
        extent = const(extent, var.dtype) if isinstance(extent, int) else extent
        stmt = For(var, const(0, var.dtype), extent, "serial", stmt)
    return stmt


# ----------------------------------------------------------------------------- compute_at

def _blocks_under(func: PrimFunc, loop: For, block: Block, partners: list, role: str,
                  primitive: str) -> dict[int, BlockRealize]:
    """The block realizes under `loop` by block id; every one of `partners` (the block's consumers
    or producers, named by `role`) must be among them."""
    under = {id(r.block): r for r in walk(loop) if isinstance(r, BlockRealize)}
    for partner in partners:
        if id(partner) not in under:
            raise ScheduleError(f"{primitive}: requires all the {role} blocks of {block.name} to be under loop "
                                f"{loop.loop_var.name}; block {partner.name} is not", ir=func, spot=loop)
    return under


def compute_at(func: PrimFunc, block: Block, loop: For, preserve_unit_loops: bool = False) -> tuple[PrimFunc, None]:
    """Move a producer block under loop, computing just the region its consumers there read.

    Requires: the block is complete or a reduction, not an output block, without a predicate; the
    loop is in the same scope and not its ancestor; every consumer of the block is under the
    loop; no block between them touches its buffers, and no block in the loop produces its
    inputs; the consumers' reads are affine with constant-size regions.  The regenerated loops
    are guarded by a predicate when the region may leave the block's domain.

    Before: `for i: for j: B[i, j] = ...` then `for i: for j: C[i, j] = B[i, j] + 1`;
    `compute_at(B, i of C)` after: `for i: (for j: B[i, j] = ...); (for j: C[i, j] = B[i, j] + 1)`.
    """
    location = locate_block(func, block, "compute_at")
    loop_path = _check_target(func, location, loop, "compute_at")
    realize = location.realize
    check_complete_or_reduction(func, realize, "compute_at")
    check_not_output_block(func, location, "compute_at")
    _, consumers = get_consumers(func, block)
    if not consumers:
        raise ScheduleError(f"compute_at: block {block.name} has no consumer", ir=func, spot=realize)
    under = _blocks_under(func, loop, block, consumers, "consumer", "compute_at")
    _check_order_and_interference(func, location, loop_path, before=True, primitive="compute_at")
    reads = {r.buffer for r in block.reads}
    for other in under.values():
        if {r.buffer for r in other.block.writes} & reads:
            raise ScheduleError(f"compute_at: block {other.block.name} under loop {loop.loop_var.name} writes what "
                                f"block {block.name} reads", ir=func, spot=other)
    if len(block.writes) != 1:
        raise ScheduleError(f"compute_at: block {block.name} must write exactly one region", ir=func, spot=realize)
    buffer = block.writes[0].buffer
    required = []
    for consumer in consumers:
        consumer_realize = under[id(consumer)]
        for region in consumer.reads:
            if region.buffer is buffer:
                required.append(access_region(loop, consumer_realize, region, cover=True))
    union = _union_regions(required, "compute_at", f"{buffer.name} read under loop {loop.loop_var.name}", func)
    dims = _point_dims(func, block, block.writes, "compute_at")
    ranges = {var: union[d] for var, d in dims.items()}
    for iv in block.iter_vars:
        if iv.kind == "spatial" and iv.var not in ranges:
            raise ScheduleError(f"compute_at: spatial iter var {iv.var.name} of block {block.name} does not index "
                                "its output", ir=func, spot=realize)
    outer_loops = [s for s in loop_path if isinstance(s, For)]
    nest = _regenerate(func, location, ranges, outer_loops, preserve_unit_loops)
    new_loop = loop.with_(body=seq(nest, loop.body))
    new_func = replace_in_func(func, {id(realize): None, id(loop): new_loop})
    recheck_concurrent_loops(new_func, "compute_at")
    return new_func, None


def reverse_compute_at(func: PrimFunc, block: Block, loop: For,
                       preserve_unit_loops: bool = False) -> tuple[PrimFunc, None]:
    """Move a consumer block under its producers' loop, consuming what one iteration produces.

    Requires: the block is complete or a reduction, without a predicate, and reads the produced
    buffers at distinct iter vars; the loop is in the same scope and not its ancestor; every
    producer of the block is under the loop; no block between them touches its buffers.

    Before: `for i: for j: B[i, j] = ...` then `for i: for j: C[i, j] = B[i, j] + 1`;
    `reverse_compute_at(C, i of B)` after: `for i: (for j: B[i, j] = ...); (for j: C[i, j] = ...)`.
    """
    location = locate_block(func, block, "reverse_compute_at")
    loop_path = _check_target(func, location, loop, "reverse_compute_at")
    realize = location.realize
    check_complete_or_reduction(func, realize, "reverse_compute_at")
    _, producers = get_producers(func, block)
    if not producers:
        raise ScheduleError(f"reverse_compute_at: block {block.name} has no producer", ir=func, spot=realize)
    under = _blocks_under(func, loop, block, producers, "producer", "reverse_compute_at")
    _check_order_and_interference(func, location, loop_path, before=False, primitive="reverse_compute_at")
    writes = {r.buffer for r in block.writes}
    for other in under.values():
        if {r.buffer for r in other.block.reads} & writes:
            raise ScheduleError(f"reverse_compute_at: block {other.block.name} under loop {loop.loop_var.name} reads "
                                f"what block {block.name} writes", ir=func, spot=other)
    ranges: dict[Var, tuple[Sum, int]] = {}
    produced = {r.buffer for p in producers for r in p.writes}
    reduce_vars = {iv.var for iv in block.iter_vars if iv.kind == "reduce"}
    for buffer in produced:
        regions = [access_region(loop, under[id(p)], r) for p in producers for r in p.writes if r.buffer is buffer]
        union = _union_regions(regions, "reverse_compute_at", f"{buffer.name} written under loop "
                               f"{loop.loop_var.name}", func)
        reads = [r for r in block.reads if r.buffer is buffer]
        dims = _point_dims(func, block, reads, "reverse_compute_at")
        for var, d in dims.items():
            if var in ranges:
                old_lo, old_extent = ranges[var]
                if constant_difference(old_lo, union[d][0]) != 0 or old_extent != union[d][1]:
                    raise ScheduleError(f"reverse_compute_at: iter var {var.name} of block {block.name} reads "
                                        "different regions of its producers", ir=func, spot=realize)
            ranges[var] = union[d]
    outer_loops = [s for s in loop_path if isinstance(s, For)]
    nest = _regenerate(func, location, ranges, outer_loops, preserve_unit_loops)
    split_reduce = [v for v in ranges if v in reduce_vars]
    if split_reduce:
        scope_loops = [s for s in loop_path[location.scope_index + 1:] if isinstance(s, For)]
        _check_each_update_runs_once(func, block, scope_loops, nest, split_reduce)
    new_loop = loop.with_(body=seq(loop.body, nest))
    new_func = replace_in_func(func, {id(realize): None, id(loop): new_loop})
    recheck_concurrent_loops(new_func, "reverse_compute_at")
    return new_func, None


def _check_each_update_runs_once(func: PrimFunc, block: Block, scope_loops: Sequence[For], nest: Stmt,
                                 split_reduce: Sequence[Var]) -> None:
    """A consumer whose reduce iters are cut into the producers' tiles still runs every update
    exactly once, starting with the one that runs the init.

    Recomputing a spatial point twice is harmless; adding a reduce term twice is not.  So the
    tiles must partition the block's domain: no predicate is needed (each tile lies inside the
    domain), the iter values are one-to-one in (the loops down to the target, the new loops) --
    a proof -- and those loops have exactly as many points as the domain.  The reduce values
    grow with every loop, so the tile holding the domain minimum (where the init runs) comes first."""
    from .legality import loop_facts, product, prove_determines

    loops, realize = [], nest
    while isinstance(realize, For):
        loops.append(realize)
        realize = realize.body
    names = ", ".join(v.name for v in split_reduce)
    refuse = lambda why: ScheduleError(  # noqa: E731
        f"reverse_compute_at: the reduce iter {names} of block {block.name} would be split across the "
        f"producers' tiles, but {why}", ir=func, spot=block)
    if not _is_true(realize.predicate):
        raise refuse("the tiles leave its domain")
    all_loops = list(scope_loops) + loops
    extents = [const_int(l.extent) for l in all_loops]
    domain = [const_int(iv.dom.extent) for iv in block.iter_vars]
    if None in extents or None in domain:
        raise refuse("the loop extents are not constant")
    if product(extents) != product(domain):
        raise refuse(f"its {product(extents)} tile points do not match its domain of {product(domain)}")
    variables = [l.loop_var for l in all_loops]
    status, _ = prove_determines(realize.iter_values, variables, variables, loop_facts(all_loops))
    if status != "proved":
        raise refuse("the tiles could not be proved to run each update once")
    from .affine import linear

    for iv, value in zip(block.iter_vars, realize.iter_values):
        if iv.var in split_reduce and any(not isinstance(atom, Var) or coeff < 0
                                          for atom, coeff in linear(value).linear_terms()):
            raise refuse(f"its value {value} does not grow with the loops (the init must run first)")


# ----------------------------------------------------------------------------- inlining

class _LoadReplacer(Mutator):
    """Replaces loads of one buffer by an expression of their indices."""

    def __init__(self, buffer: Buffer, make) -> None:
        super().__init__()
        self.buffer = buffer
        self.make = make

    def visit_BufferLoad(self, load: BufferLoad):
        load = self.generic_visit(load)
        return self.make(load.indices) if load.buffer is self.buffer else load


def _single_store(func: PrimFunc, block: Block, primitive: str) -> BufferStore:
    """The block's body as one store indexed by distinct iter vars."""
    body = block.body
    own = [iv.var for iv in block.iter_vars]
    if not isinstance(body, BufferStore):
        raise ScheduleError(f"{primitive}: the body of block {block.name} must be a single store", ir=func, spot=block)
    if len(set(map(id, body.indices))) != len(body.indices) or not all(
        isinstance(i, Var) and i in own for i in body.indices
    ):
        raise ScheduleError(f"{primitive}: block {block.name} must store at distinct iter vars (like B[vi, vj])",
                            ir=func, spot=block)
    return body


def remove_alloc(func: PrimFunc, buffer: Buffer) -> PrimFunc:
    """func with buffer dropped from the alloc_buffers of the block that allocates it."""
    for realize in block_realizes(func.body):
        blk = realize.block
        if any(b is buffer for b in blk.alloc_buffers):
            new = blk.with_(alloc_buffers=tuple(b for b in blk.alloc_buffers if b is not buffer))
            return replace_in_func(func, {id(realize): realize.with_(block=new)})
    return func


def _point_region_of(region: BufferRegion) -> list[PrimExpr] | None:
    if all(const_int(r.extent) == 1 for r in region.region):
        return [r.min for r in region.region]
    return None


def compute_inline(func: PrimFunc, block: Block) -> tuple[PrimFunc, None]:
    """Inline a block's expression into every block that reads its output, and remove it.

    Requires: the block is complete (spatial iters only, no init), writes one intermediate buffer
    (not a parameter) that no other block writes, with a body that is one store at distinct iter
    vars; its readers access that buffer at points.

    Before: `B[vi, vj] = A[vi, vj] * 2` then `C[vi, vj] = B[vi, vj] + 1`; after:
    `C[vi, vj] = A[vi, vj] * 2 + 1`.
    """
    location = locate_block(func, block, "compute_inline")
    realize = location.realize
    if any(iv.kind != "spatial" for iv in block.iter_vars) or block.init is not None:
        raise ScheduleError(f"compute_inline: block {block.name} is not a complete block (it has reduce iters or "
                            "an init)", ir=func, spot=realize)
    check_not_output_block(func, location, "compute_inline")
    store = _single_store(func, block, "compute_inline")
    buffer = store.buffer
    check_not_viewed(func, buffer, "compute_inline")
    if len(block.writes) != 1:
        raise ScheduleError(f"compute_inline: block {block.name} must write one buffer", ir=func, spot=realize)
    if any(r.buffer is buffer for r in block.reads):
        raise ScheduleError(f"compute_inline: block {block.name} reads the buffer it writes", ir=func, spot=realize)
    others = [r for r in block_realizes(func.body) if r is not realize]
    for other in others:
        if any(w.buffer is buffer for w in other.block.writes):
            raise ScheduleError(f"compute_inline: block {other.block.name} also writes {buffer.name}",
                                ir=func, spot=other)
    readers = [r for r in others if any(region.buffer is buffer for region in r.block.reads)]

    def inline_value(indices):
        return substitute(store.value, dict(zip(store.indices, indices)))

    def inline_regions(regions):
        out = []
        for region in regions:
            if region.buffer is not buffer:
                out.append(region)
                continue
            point = _point_region_of(region)
            if point is None:
                raise ScheduleError(f"compute_inline: block reads a non-point region of {buffer.name}", ir=func)
            mapping = dict(zip(store.indices, point))
            for read in block.reads:
                new = BufferRegion(read.buffer, tuple(Range(substitute(r.min, mapping), r.extent) for r in read.region))
                out.append(new)
        return tuple(out)

    mapping: dict = {id(realize): None}
    for reader in readers:
        replacer = _LoadReplacer(buffer, inline_value)
        new_block = reader.block.with_(
            body=replacer.visit(reader.block.body),
            init=replacer.visit(reader.block.init) if reader.block.init is not None else None,
            reads=inline_regions(reader.block.reads),
        )
        mapping[id(reader)] = reader.with_(block=new_block)
    body = replace(func.body, mapping)
    if body is None:
        raise ScheduleError(f"compute_inline: block {block.name} is the only block left", ir=func, spot=realize)
    return remove_alloc(func.with_(body=body), buffer), None


def _spans(iv, dim) -> bool:
    """Whether iter var iv runs over the whole of a buffer dimension: from 0, an extent equal to
    dim (constant, or the same symbolic expression: a symbolic batch)."""
    from .affine import linear

    return const_int(iv.dom.min) == 0 and constant_difference(linear(iv.dom.extent), linear(dim)) == 0


def reverse_compute_inline(func: PrimFunc, block: Block) -> tuple[PrimFunc, None]:
    """Fold a consumer block into its single producer, which then writes the consumer's output.

    Requires: the block is complete, without predicate, one store; it reads one intermediate
    buffer B produced by exactly one block (complete, one store at distinct iter vars, covering B)
    and read by no other block; its loads of B all use the same distinct iter vars, one per iter
    var, each over the whole dimension.  Other buffers it reads may be written by earlier blocks
    that are done before B's producer starts (check_done_before: a residual sum of two
    convolutions folds into the second one's write-back).

    Before: `B[vi] = A[vi] * 2` then `C[vi] = B[vi] + 1`; after: `C[vi] = A[vi] * 2 + 1` in block B.
    """
    location = locate_block(func, block, "reverse_compute_inline")
    realize = location.realize
    if any(iv.kind != "spatial" for iv in block.iter_vars) or block.init is not None:
        raise ScheduleError(f"reverse_compute_inline: block {block.name} is not a complete block",
                            ir=func, spot=realize)
    if not _is_true(realize.predicate):
        raise ScheduleError(f"reverse_compute_inline: block {block.name} has a predicate", ir=func, spot=realize)
    store = block.body
    if not isinstance(store, BufferStore):
        raise ScheduleError(f"reverse_compute_inline: the body of block {block.name} must be a single store",
                            ir=func, spot=realize)
    _, producers = get_producers(func, block)
    # the last producer is the one folded into; any other must be done before it starts
    produced = {r.buffer for r in producers[-1].writes} & {r.buffer for r in block.reads} if producers else set()
    if len(produced) != 1:
        raise ScheduleError(f"reverse_compute_inline: block {block.name} must have exactly one producer of one "
                            f"buffer, it has {len(producers)}", ir=func, spot=realize)
    producer = producers[-1]
    check_done_before(func, producers[:-1], producer, block)
    buffer = produced.pop()
    check_not_viewed(func, buffer, "reverse_compute_inline")
    if buffer in set(func.buffers):
        raise ScheduleError(f"reverse_compute_inline: {buffer.name} is a parameter", ir=func, spot=realize)
    for other in block_realizes(func.body):
        if other.block is not block and other.block is not producer and any(
            r.buffer is buffer for r in other.block.reads + other.block.writes
        ):
            raise ScheduleError(f"reverse_compute_inline: block {other.block.name} also uses {buffer.name}",
                                ir=func, spot=other)
    loads = [l for l in _loads(store.value) if l.buffer is buffer]
    own = [iv.var for iv in block.iter_vars]
    first = loads[0].indices if loads else ()
    if not loads or any(tuple(map(id, l.indices)) != tuple(map(id, first)) for l in loads) or sorted(
        map(id, first)) != sorted(map(id, own)):
        raise ScheduleError(f"reverse_compute_inline: block {block.name} must load {buffer.name} at the same "
                            "distinct iter vars, one per iter var", ir=func, spot=realize)
    for iv, dim in zip((next(i for i in block.iter_vars if i.var is v) for v in first), buffer.shape):
        if not _spans(iv, dim):
            raise ScheduleError(f"reverse_compute_inline: iter var {iv.var.name} of block {block.name} does not span "
                                f"the whole of {buffer.name}", ir=func, spot=realize)
    producer_location = locate_block(func, producer, "reverse_compute_inline")
    if any(iv.kind != "spatial" for iv in producer.iter_vars) or producer.init is not None:
        raise ScheduleError(f"reverse_compute_inline: producer {producer.name} is not a complete block", ir=func)
    if not _is_true(producer_location.realize.predicate):
        raise ScheduleError(f"reverse_compute_inline: producer {producer.name} has a predicate", ir=func)
    producer_store = _single_store(func, producer, "reverse_compute_inline")
    for index, dim in zip(producer_store.indices, buffer.shape):
        iv = next(i for i in producer.iter_vars if i.var is index)
        if not _spans(iv, dim):
            raise ScheduleError(f"reverse_compute_inline: producer {producer.name} does not write all of {buffer.name}",
                                ir=func)
    mapping = dict(zip(first, producer_store.indices))
    value = _LoadReplacer(buffer, lambda idx: producer_store.value).visit(store.value)
    value = substitute(value, mapping)
    new_store = BufferStore(store.buffer, value, tuple(substitute(i, mapping) for i in store.indices))

    def regions(rs):
        return tuple(BufferRegion(r.buffer, tuple(Range(substitute(x.min, mapping), x.extent) for x in r.region))
                     for r in rs)

    new_reads = producer.reads + tuple(r for r in regions(block.reads) if r.buffer is not buffer)
    new_producer = producer.with_(body=new_store, writes=regions(block.writes), reads=new_reads)
    entries: dict = {id(realize): None,
                     id(producer_location.realize): producer_location.realize.with_(block=new_producer)}
    return remove_alloc(replace_in_func(func, entries), buffer), None


def check_done_before(func: PrimFunc, others: Sequence[Block], producer: Block, block: Block) -> None:
    """reverse_compute_inline's check when block reads buffers of other producers besides the one
    it folds into: each of `others` runs to its end before `producer` starts (it comes first in
    program order and no loop holds both), and no block between producer and block touches a
    buffer block writes or writes one it reads; block's store, moved into producer, then reads
    and writes what it did.  A ScheduleError otherwise."""
    if not others:
        return
    realizes = block_realizes(func.body)
    order = {id(r.block): k for k, r in enumerate(realizes)}
    loops = {id(s) for s in locate_block(func, producer, "reverse_compute_inline").path if isinstance(s, For)}
    for other in others:
        path = locate_block(func, other, "reverse_compute_inline").path
        if order[id(other)] > order[id(producer)] or any(id(s) in loops for s in path if isinstance(s, For)):
            raise ScheduleError(f"reverse_compute_inline: block {block.name} also reads what block {other.name} "
                                f"writes, which is not done before producer {producer.name} starts", ir=func)
    writes = {r.buffer for r in block.writes}
    reads = {r.buffer for r in block.reads}
    for between in realizes[order[id(producer)] + 1:order[id(block)]]:
        other = between.block
        touched = {r.buffer for r in other.reads + other.writes}
        if touched & writes or {r.buffer for r in other.writes} & reads:
            raise ScheduleError(f"reverse_compute_inline: block {other.name} runs between producer {producer.name} "
                                f"and block {block.name} and uses what {block.name} writes or reads", ir=func)


def _loads(expr) -> list[BufferLoad]:
    from ...ast import collect

    return collect(expr, BufferLoad)
