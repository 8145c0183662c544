"""Storage primitives: cache_read, cache_write, set_scope, storage_align, transform_layout."""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from ...ast import (
    Block, BlockRealize, Buffer, BufferLoad, BufferRegion, BufferStore, FloorDiv, FloorMod, For, IntImm, IterVar,
    Mutator, Or, PrimFunc, Range, Stmt, Var, collect, const, free_vars, seq,
)
from ...ast.buffer import SCOPES
from ...ast.stmt import true
from ...errors import ScheduleError
from ...shape.evaluate import EvaluationError, evaluate
from .affine import int_bounds
from .index_map import IndexMap
from .legality import check_not_viewed, const_int, product
from .lookup import BlockLocation, locate_block, scope_siblings
from .tree import block_realizes, fresh_block_name, replace, replace_in_func, stmt_children


def _check_scope(func: PrimFunc, scope: str, primitive: str) -> None:
    if scope not in SCOPES:
        raise ScheduleError(f"{primitive}: storage_scope: expected one of {', '.join(SCOPES)}, got {scope!r}", ir=func)


def _region_buffer(func: PrimFunc, block: Block, regions, index, primitive: str, what: str) -> Buffer:
    if isinstance(index, bool) or not isinstance(index, int) or not -len(regions) <= index < len(regions):
        raise ScheduleError(f"{primitive}: {what}: block {block.name} has {len(regions)} {what.split('_')[0]} "
                            f"regions, got index {index!r}", ir=func, spot=block)
    return regions[index].buffer


class _BufferSwap(Mutator):
    """Uses `new` wherever `old` appears."""

    def __init__(self, old: Buffer, new: Buffer) -> None:
        super().__init__()
        self.buffer_map[old] = new


def copy_nest(name: str, source: Buffer, target: Buffer) -> Stmt:
    """A loop nest and block copying all of source into target (same shape)."""
    # loop and iter vars take the dtype of their dim (int64 shapes give int64 indices)
    loop_vars = [Var(f"ax{d}", dim.dtype) for d, dim in enumerate(source.shape)]
    iter_vars = [IterVar(Var(f"v{d}", dim.dtype), Range(const(0, dim.dtype), dim), "spatial")
                 for d, dim in enumerate(source.shape)]
    index = tuple(iv.var for iv in iter_vars)
    block = Block(name, tuple(iter_vars),
                  (BufferRegion(source, tuple(Range(i, 1) for i in index)),),
                  (BufferRegion(target, tuple(Range(i, 1) for i in index)),),
                  BufferStore(target, source.vload(index), index))
    stmt: Stmt = BlockRealize(tuple(loop_vars), true(), block)
    for var, dim in reversed(list(zip(loop_vars, source.shape))):
        stmt = For(var, const(0, dim.dtype), dim, "serial", stmt)
    return stmt


def _scope_parts(func: PrimFunc, location: BlockLocation, primitive: str):
    scope = location.scope
    if scope is None:
        raise ScheduleError(f"{primitive}: block {location.block.name} is not inside a root block", ir=func)
    scope_realize = location.path[location.scope_index - 1] if location.scope_index >= 1 else None
    if not isinstance(scope_realize, BlockRealize):
        raise ScheduleError(f"{primitive}: the scope of block {location.block.name} is not a block", ir=func)
    body = scope.body
    items = list(body.stmts) if type(body).__name__ == "SeqStmt" else [body]
    return scope_realize, items


def _item_index(items: list[Stmt], realize: BlockRealize) -> int:
    from .tree import path_to

    for k, item in enumerate(items):
        if path_to(item, realize) is not None:
            return k
    raise ScheduleError("internal: block not found in its scope")


def _cache_name(buffer: Buffer, scope: str) -> str:
    return f"{buffer.name}_{scope.replace('.', '_')}"


def cache_read(func: PrimFunc, block: Block, read_buffer_index: int, storage_scope: str,
               consumer_blocks: Sequence[Block] | None = None) -> tuple[PrimFunc, Block]:
    """Copy a buffer the block reads into a new buffer of storage_scope, and read from the copy.

    Requires: a valid scope and read index; at most one block of the scope writes the buffer; the
    consumers (default: every block of the scope reading it) come after that writer.  The copy
    block `<buffer>_<scope>` goes right after the writer (or first in the scope for an input).

    Before: `C[vi] = A[vi] + 1`; `cache_read(C, 0, "global")` after:
    `A_global[v0] = A[v0]` then `C[vi] = A_global[vi] + 1`.
    """
    location = locate_block(func, block, "cache_read")
    _check_scope(func, storage_scope, "cache_read")
    buffer = _region_buffer(func, block, block.reads, read_buffer_index, "cache_read", "read_buffer_index")
    siblings = scope_siblings(func, location)
    writers = [r for r in siblings if any(w.buffer is buffer for w in r.block.writes)]
    if len(writers) > 1:
        raise ScheduleError(f"cache_read: {len(writers)} blocks write {buffer.name}; at most one may",
                            ir=func, spot=location.realize)
    readers = [r for r in siblings if any(x.buffer is buffer for x in r.block.reads) and r not in writers]
    if consumer_blocks is not None:
        wanted = {id(b) for b in consumer_blocks}
        readers = [r for r in readers if id(r.block) in wanted]
        if len(readers) != len(wanted):
            raise ScheduleError(f"cache_read: every consumer block must read {buffer.name}", ir=func)
    cache = Buffer(_cache_name(buffer, storage_scope), buffer.shape, buffer.dtype, storage_scope)
    scope_realize, items = _scope_parts(func, location, "cache_read")
    position = 0
    if writers:
        position = _item_index(items, writers[0]) + 1
        for reader in readers:
            if _item_index(items, reader) < position:
                raise ScheduleError(f"cache_read: block {reader.block.name} reads {buffer.name} before it is written",
                                    ir=func, spot=reader)
    name = fresh_block_name(func.body, _cache_name(buffer, storage_scope))
    nest = copy_nest(name, buffer, cache)
    swap = _BufferSwap(buffer, cache)
    mapping = {id(r): swap.visit(r) for r in readers}
    new_items = [replace(item, mapping) for item in items]
    new_items.insert(position, nest)
    scope = scope_realize.block
    new_scope = scope.with_(body=seq(*new_items), alloc_buffers=scope.alloc_buffers + (cache,))
    new_func = replace_in_func(func, {id(scope_realize): scope_realize.with_(block=new_scope)})
    return new_func, nest_block(nest)


def nest_block(stmt: Stmt) -> Block:
    """The block at the bottom of a single-path loop nest."""
    while not isinstance(stmt, BlockRealize):
        stmt = next(iter(stmt_children(stmt)))
    return stmt.block


def cache_write(func: PrimFunc, block: Block, write_buffer_index: int, storage_scope: str) -> tuple[PrimFunc, Block]:
    """Make the block write a new buffer of storage_scope, copied back to the original after it.

    Requires: a valid scope and write index; the block is the only writer of the buffer in the
    scope; no other block in the same top-level loop nest reads the buffer.  The copy-back block
    `<buffer>_<scope>` goes right after the block's top-level loop nest.

    Before: `C[vi] = A[vi] + 1`; `cache_write(C, 0, "local")` after:
    `C_local[vi] = A[vi] + 1` then `C[v0] = C_local[v0]`.
    """
    location = locate_block(func, block, "cache_write")
    _check_scope(func, storage_scope, "cache_write")
    buffer = _region_buffer(func, block, block.writes, write_buffer_index, "cache_write", "write_buffer_index")
    siblings = scope_siblings(func, location)
    writers = [r for r in siblings if any(w.buffer is buffer for w in r.block.writes)]
    if len(writers) != 1:
        raise ScheduleError(f"cache_write: {len(writers)} blocks write {buffer.name}; exactly one may",
                            ir=func, spot=location.realize)
    scope_realize, items = _scope_parts(func, location, "cache_write")
    position = _item_index(items, location.realize)
    for realize in block_realizes(items[position]):
        if realize is not location.realize and any(r.buffer is buffer for r in realize.block.reads):
            raise ScheduleError(f"cache_write: block {realize.block.name} reads {buffer.name} in the same loop nest",
                                ir=func, spot=realize)
    cache = Buffer(_cache_name(buffer, storage_scope), buffer.shape, buffer.dtype, storage_scope)
    swapped = _BufferSwap(buffer, cache).visit(location.realize)
    new_items = [replace(item, {id(location.realize): swapped}) for item in items]
    name = fresh_block_name(func.body, _cache_name(buffer, storage_scope))
    nest = copy_nest(name, cache, buffer)
    new_items.insert(position + 1, nest)
    scope = scope_realize.block
    new_scope = scope.with_(body=seq(*new_items), alloc_buffers=scope.alloc_buffers + (cache,))
    new_func = replace_in_func(func, {id(scope_realize): scope_realize.with_(block=new_scope)})
    return new_func, nest_block(nest)


def _allocated(func: PrimFunc, buffer: Buffer, primitive: str, spot) -> None:
    for realize in block_realizes(func.body):
        if any(b is buffer for b in realize.block.alloc_buffers):
            return
    raise ScheduleError(f"{primitive}: {buffer.name} is not allocated in a block (parameters keep their layout)",
                        ir=func, spot=spot)


def _swap_everywhere(func: PrimFunc, old: Buffer, new: Buffer) -> PrimFunc:
    swap = _BufferSwap(old, new)
    return func.with_(body=swap.visit(func.body), params=tuple(swap.visit(p) if isinstance(p, Buffer) else p
                                                              for p in func.params))


def set_scope(func: PrimFunc, block: Block, buffer_index: int, storage_scope: str) -> tuple[PrimFunc, None]:
    """Change the memory scope of a buffer the block writes.  Requires an allocated buffer and a valid scope."""
    location = locate_block(func, block, "set_scope")
    _check_scope(func, storage_scope, "set_scope")
    buffer = _region_buffer(func, block, block.writes, buffer_index, "set_scope", "buffer_index")
    _allocated(func, buffer, "set_scope", location.realize)
    return _swap_everywhere(func, buffer, buffer.with_(scope=storage_scope)), None


def storage_align(func: PrimFunc, block: Block, buffer_index: int, axis: int, factor: int,
                  offset: int) -> tuple[PrimFunc, None]:
    """Pad the stride of `axis` of a written buffer to k * factor + offset elements.

    Requires: the buffer is allocated in a block and has a constant shape; axis is not the last
    (-ndim <= axis < ndim - 1 after normalising); factor > 0; 0 <= offset < factor.  Outer strides
    grow so that rows never overlap.
    """
    location = locate_block(func, block, "storage_align")
    buffer = _region_buffer(func, block, block.writes, buffer_index, "storage_align", "buffer_index")
    _allocated(func, buffer, "storage_align", location.realize)
    check_not_viewed(func, buffer, "storage_align")
    ndim = buffer.ndim
    if isinstance(axis, bool) or not isinstance(axis, int) or not -ndim <= axis < ndim:
        raise ScheduleError(f"storage_align: axis: expected an int in [{-ndim}, {ndim}), got {axis!r}", ir=func)
    axis = axis + ndim if axis < 0 else axis
    if axis == ndim - 1:
        raise ScheduleError("storage_align: axis: the last axis has stride 1 and cannot be aligned", ir=func)
    if isinstance(factor, bool) or not isinstance(factor, int) or factor <= 0:
        raise ScheduleError(f"storage_align: factor: expected a positive int, got {factor!r}", ir=func)
    if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset < factor:
        raise ScheduleError(f"storage_align: offset: expected an int in [0, {factor}), got {offset!r}", ir=func)
    shape = [const_int(d) for d in buffer.shape]
    if any(d is None for d in shape):
        raise ScheduleError(f"storage_align: {buffer.name} needs a constant shape", ir=func)
    old = [const_int(s) for s in buffer.strides] if buffer.strides else None
    strides = [1] * ndim
    for d in range(ndim - 2, -1, -1):
        needed = strides[d + 1] * shape[d + 1]
        if old is not None:
            needed = max(needed, old[d])
        if d == axis:
            needed += (offset - needed) % factor
        strides[d] = needed
    new = buffer.with_(strides=tuple(const(s, buffer.shape[0].dtype) for s in strides))
    return _swap_everywhere(func, buffer, new), None


# ----------------------------------------------------------------------------- transform_layout

def resolve_buffer(func: PrimFunc, block: Block, spec: Any, primitive: str) -> Buffer:
    """A buffer given as ("read", i), ("write", i), a name, or a Buffer accessed by block."""
    if isinstance(spec, Buffer):
        return spec
    if isinstance(spec, (tuple, list)) and len(spec) == 2 and spec[0] in ("read", "write"):
        regions = block.reads if spec[0] == "read" else block.writes
        return _region_buffer(func, block, regions, spec[1], primitive, f"{spec[0]}_index")
    if isinstance(spec, str):
        for region in block.reads + block.writes:
            if region.buffer.name == spec:
                return region.buffer
        raise ScheduleError(f"{primitive}: block {block.name} accesses no buffer named {spec!r}", ir=func)
    raise ScheduleError(f"{primitive}: buffer: expected ('read', i), ('write', i) or a name, got {spec!r}", ir=func)


class _Relayout(Mutator):
    """Rewrites every access to old through index_map into new."""

    def __init__(self, old: Buffer, new: Buffer, index_map: IndexMap) -> None:
        super().__init__()
        self.old, self.new, self.index_map = old, new, index_map
        self.buffer_map[old] = new

    def visit_BufferLoad(self, load: BufferLoad):
        if load.buffer is not self.old:
            return self.generic_visit(load)
        return BufferLoad(self.new, self.index_map.apply(self.visit(load.indices)))

    def visit_BufferStore(self, store: BufferStore):
        if store.buffer is not self.old:
            return self.generic_visit(store)
        return BufferStore(self.new, self.visit(store.value), self.index_map.apply(self.visit(store.indices)))

    def visit_BufferRegion(self, region: BufferRegion):
        if region.buffer is not self.old:
            return self.generic_visit(region)
        if all(const_int(r.extent) == 1 for r in region.region):
            point = self.index_map.apply([r.min for r in region.region])
            return BufferRegion(self.new, tuple(Range(p, 1) for p in point))
        return self._box(region)

    def _box(self, region: BufferRegion) -> BufferRegion:
        """A box holding the image of a region with ranges: each new dim that is one of the old
        dims itself keeps that dim's range, one that uses only dims of extent 1 is a point, any
        other spans the whole dim (`(n, c, 0:6, 0:6)` through `(n, c // 16, y, x, c % 16)` stays
        one point of channels by the plane, not the whole buffer)."""
        spans = {}
        args = []
        for k, r in enumerate(region.region):
            if const_int(r.extent) == 1:
                args.append(r.min)
            else:
                var = Var(f"d{k}", r.min.dtype)
                spans[var] = r
                args.append(var)
        box = []
        for k, expr in enumerate(self.index_map.apply(args)):
            if isinstance(expr, Var) and expr in spans:
                box.append(spans[expr])
            elif not set(free_vars(expr)) & set(spans):
                box.append(Range(expr, 1))
            else:
                box.append(Range(0, self.new.shape[k]))
        return BufferRegion(self.new, tuple(box))


def transform_layout(func: PrimFunc, block: Block, buffer: Any, index_map: IndexMap,
                     pad_value: Any = None) -> tuple[PrimFunc, None]:
    """Store a buffer in a new layout: element `idx` moves to `index_map(idx)`; every access follows.

    Requires: a constant shape, except dims the map keeps whole (a symbolic batch dim sent
    unchanged to one new index and used by no other); the map sends the index space one-to-one
    into a box starting at 0 (proved, or checked point by point).  A box with more elements than the buffer (padding)
    needs pad_value, a buffer written in the function, and a map whose padding can be listed
    (see _padding_domain); a fill block then stores pad_value into every padding element.  On a
    parameter the function's signature changes.

    Before: `B[vi, vj]` with B (64, 64); `transform_layout(blk, ("read", 0), lambda i, j: (j // 16, i, j % 16))`
    after: B (4, 64, 16) accessed as `B[vj // 16, vi, vj % 16]`.
    """
    location = locate_block(func, block, "transform_layout")
    target = resolve_buffer(func, block, buffer, "transform_layout")
    index_map = IndexMap.from_callable(index_map, target.ndim)
    check_not_viewed(func, target, "transform_layout")
    if len(index_map.initial) != target.ndim:
        raise ScheduleError(f"transform_layout: the map takes {len(index_map.initial)} indices, {target.name} has "
                            f"{target.ndim} dims", ir=func)
    if pad_value is not None and (isinstance(pad_value, bool) or not isinstance(pad_value, (int, float))):
        raise ScheduleError(f"transform_layout: pad_value: expected an int or a float, got {pad_value!r}", ir=func)
    shape = [const_int(d) for d in target.shape]
    split = _split_symbolic_dim(func, target, index_map, shape)
    kept = _kept_symbolic_dims(func, target, index_map, [split[k][2] if k in split else d for k, d in enumerate(shape)])
    if split and kept:
        raise ScheduleError(f"transform_layout: the map {index_map.as_lambda()} splits a symbolic dim of "
                            f"{target.name} and keeps another; only one symbolic dim can be split, the others "
                            "constant", ir=func)
    # a kept symbolic dim is checked at extent 1: the map moves the other dims only; a split one
    # at extent c (v // c and v % c take any extent one-to-one onto (ceildiv(n, c), c))
    shape = [split[k][2] if k in split else 1 if d is None else d for k, d in enumerate(shape)]
    ranges = {v: (0, d - 1) for v, d in zip(index_map.initial, shape)}
    new_shape = []
    for position, expr in enumerate(index_map.final):
        if position in kept:
            new_shape.append(1)
            continue
        bounds = int_bounds(expr, ranges)
        if bounds is None or bounds[0] < 0:
            raise ScheduleError(f"transform_layout: cannot bound the new index {index_map.as_lambda()} at or above 0",
                                ir=func)
        new_shape.append(bounds[1] + 1)
    if product(new_shape) < product(shape):
        raise ScheduleError(f"transform_layout: the map {index_map.as_lambda()} sends two elements to one place "
                            f"({product(shape)} elements into {tuple(new_shape)})", ir=func, spot=location.realize)
    padded = product(new_shape) > product(shape)
    if padded and kept:
        raise ScheduleError(f"transform_layout: the map {index_map.as_lambda()} adds padding to {target.name}, whose "
                            f"shape is not constant", ir=func, spot=location.realize)
    if padded and split:
        raise ScheduleError(f"transform_layout: the map {index_map.as_lambda()} splits a symbolic dim of "
                            f"{target.name} and pads a constant one; only the split dim may be padded", ir=func,
                            spot=location.realize)
    if split and pad_value is None:
        (dim, (_, _, c)), = split.items()
        raise ScheduleError(f"transform_layout: the map {index_map.as_lambda()} splits the symbolic dim {dim} "
                            f"({target.shape[dim]}) of {target.name} by {c}, which pads it unless {c} divides it; "
                            "give pad_value", ir=func, spot=location.realize)
    if padded and pad_value is None:
        raise ScheduleError(f"transform_layout: the map {index_map.as_lambda()} takes shape {tuple(shape)} to "
                            f"{tuple(new_shape)}, which adds padding; give pad_value", ir=func, spot=location.realize)
    check_one_to_one(func, index_map, shape, new_shape)
    index_dtype = target.shape[0].dtype
    extents = [target.shape[kept[k]] if k in kept else const(d, index_dtype) for k, d in enumerate(new_shape)]
    for dim, (div_at, _, c) in split.items():  # ceildiv(n, c) panels of c
        extents[div_at] = FloorDiv(target.shape[dim] + const(c - 1, index_dtype), const(c, index_dtype))
    new = Buffer(target.name, tuple(extents), target.dtype, target.scope)
    if split:
        fill = _split_padding_fill(func, target, new, index_map, shape, split, pad_value)
    else:
        fill = _padding_fill(func, target, new, index_map, shape, new_shape, pad_value) if padded else None
    relayout = _Relayout(target, new, index_map)
    params = tuple(relayout.visit(p) if isinstance(p, Buffer) else p for p in func.params)
    new_func = func.with_(body=relayout.visit(func.body), params=params)
    if fill is not None:
        new_func = _insert_fill(new_func, new, fill)
    return new_func, None


def _split_symbolic_dim(func: PrimFunc, target: Buffer, index_map: IndexMap, shape: list) -> dict[int, tuple]:
    """{old dim: (position of v // c, position of v % c, c)} for a symbolic dim whose index var v
    the map splits by a constant c > 1 and uses nowhere else (`lambda i, k: (i // 12, k, i % 12)`
    packs rows of a symbolic count into 12-row panels); {} when no symbolic dim is split so.  At
    most one: a second split, or a split var used in any other way, is left to
    _kept_symbolic_dims, which refuses it."""
    found: dict[int, tuple] = {}
    for dim, extent in enumerate(shape):
        if extent is not None:
            continue
        var = index_map.initial[dim]
        users = [k for k, expr in enumerate(index_map.final) if var in free_vars(expr)]
        if len(users) != 2:
            continue
        first, second = (index_map.final[k] for k in users)
        if not (isinstance(first, FloorDiv) and isinstance(second, FloorMod) and first.a is var
                and second.a is var and isinstance(first.b, IntImm) and isinstance(second.b, IntImm)
                and first.b.value == second.b.value and first.b.value > 1):
            continue
        found[dim] = (users[0], users[1], first.b.value)
    if len(found) > 1:
        raise ScheduleError(f"transform_layout: the map {index_map.as_lambda()} splits {len(found)} symbolic dims "
                            f"of {target.name}; at most one can be split", ir=func)
    return found


def _split_padding_fill(func: PrimFunc, old: Buffer, new: Buffer, index_map: IndexMap, shape: list[int],
                        split: dict[int, tuple], pad_value: Any) -> Stmt:
    """The fill of a split symbolic dim n (by c): pad_value at the images of indices n ..
    ceildiv(n, c) * c - 1 of that dim (at most c - 1 of them, none when c divides n), every
    other dim whole."""
    _check_fill_writer(func, old, new, pad_value)
    (dim, (_, _, c)), = split.items()
    dtype = new.shape[0].dtype
    n = old.shape[dim]
    rounded = FloorDiv(n + const(c - 1, dtype), const(c, dtype)) * const(c, dtype)
    loop_vars = [Var(f"ax{d}", dtype) for d in range(len(shape))]
    iter_vars = [IterVar(Var(f"v{d}", dtype), Range(const(0, dtype), rounded if d == dim else const(e, dtype)),
                         "spatial") for d, e in enumerate(shape)]
    index = index_map.apply([iv.var for iv in iter_vars])
    name = fresh_block_name(func.body, f"{old.name}_pad")
    block = Block(name, tuple(iter_vars), (), (BufferRegion(new, tuple(Range(i, 1) for i in index)),),
                  BufferStore(new, const(pad_value, new.dtype), index))
    bindings = [v + n if d == dim else v for d, v in enumerate(loop_vars)]
    stmt: Stmt = BlockRealize(tuple(bindings), IntImm(1, "bool"), block)
    for d in reversed(range(len(shape))):
        extent = rounded - n if d == dim else const(shape[d], dtype)
        stmt = For(loop_vars[d], const(0, dtype), extent, "serial", stmt)
    return stmt


def _kept_symbolic_dims(func: PrimFunc, target: Buffer, index_map: IndexMap, shape: list) -> dict[int, int]:
    """{new position: old dim} of the dims with a symbolic extent: each must be sent unchanged to
    one new position (`lambda n, c, x: (n, c // 8, x, c % 8)` keeps a symbolic n) and appear in
    no other new index, so the map is one-to-one exactly when it is on the constant dims."""
    kept: dict[int, int] = {}
    for dim, extent in enumerate(shape):
        if extent is not None:
            continue
        var = index_map.initial[dim]
        users = [k for k, expr in enumerate(index_map.final) if var in free_vars(expr)]
        if len(users) != 1 or index_map.final[users[0]] is not var:
            raise ScheduleError(f"transform_layout: {target.name} has a symbolic dim {dim} "
                                f"({target.shape[dim]}) that the map {index_map.as_lambda()} does not keep as a "
                                f"whole index; only constant dims can be moved", ir=func)
        kept[users[0]] = dim
    return kept


def check_one_to_one(func: PrimFunc, index_map: IndexMap, shape: list[int], new_shape: list[int]) -> None:
    """No two elements of the box `shape` go to one place.

    First symbolically (refcomp.shape.prove: equal images imply equal indices), which settles the
    split and pack maps of any size at once; when the prover answers unknown, point by point in
    O(points) with a mark per element of the new box (at most 2^22 points)."""
    from .legality import prove_determines

    box = [c for v, d in zip(index_map.initial, shape) for c in (v >= 0, v < d)]
    status, counterexample = prove_determines(index_map.final, index_map.initial, index_map.initial, box)
    if status == "proved":
        return
    if status == "disproved":
        raise ScheduleError(f"transform_layout: the map {index_map.as_lambda()} sends two elements to one place",
                            ir=func, counterexample=counterexample)
    total = product(shape)
    if total > (1 << 22) or product(new_shape) > (1 << 24):
        raise ScheduleError(f"transform_layout: could not prove the map {index_map.as_lambda()} one-to-one, and "
                            f"{total} points are too many to check one by one", ir=func)
    grids = np.meshgrid(*[np.arange(d, dtype=np.int64) for d in shape], indexing="ij")
    env = {v: g.ravel() for v, g in zip(index_map.initial, grids)}
    flat = np.zeros(total, dtype=np.int64)
    try:
        for expr, extent in zip(index_map.final, new_shape):
            flat = flat * extent + np.broadcast_to(evaluate(expr, env), (total,))
    except EvaluationError as exc:
        raise ScheduleError(f"transform_layout: cannot evaluate the map: {exc}", ir=func) from None
    if int(np.bincount(flat, minlength=product(new_shape)).max(initial=0)) > 1:
        raise ScheduleError(f"transform_layout: the map {index_map.as_lambda()} sends two elements to one place",
                            ir=func)


def _padding_domain(func: PrimFunc, index_map: IndexMap, shape: list[int], new_shape: list[int]) -> list[int]:
    """A box containing `shape` that the map sends one-to-one onto all of `new_shape`.

    Its points outside `shape` are exactly the padding, which is how the fill block lists them
    without inverting the map.  Each dim is either kept or rounded up to a multiple of the
    divisors (of // and %) applied to it, as for `lambda i: (i // 32, i % 32)` (100 -> 128)."""
    from itertools import product as combinations

    options = []
    for var, extent in zip(index_map.initial, shape):
        step = 1
        for node in collect(index_map.final, (FloorDiv, FloorMod)):
            if var in free_vars(node.a) and isinstance(node.b, IntImm) and node.b.value > 0:
                step = math.lcm(step, node.b.value)
        rounded = -(-extent // step) * step
        options.append(sorted({extent, rounded}))
    for candidate in combinations(*options):
        if product(candidate) != product(new_shape):
            continue
        ranges = {v: (0, d - 1) for v, d in zip(index_map.initial, candidate)}
        if any(int_bounds(e, ranges) != (0, d - 1) for e, d in zip(index_map.final, new_shape)):
            continue
        try:
            check_one_to_one(func, index_map, list(candidate), new_shape)
        except ScheduleError:
            continue
        return list(candidate)
    raise ScheduleError(f"transform_layout: cannot list the padding of the map {index_map.as_lambda()} from shape "
                        f"{tuple(shape)} to {tuple(new_shape)} (no larger index box maps onto the new shape)",
                        ir=func)


def _check_fill_writer(func: PrimFunc, old: Buffer, new: Buffer, pad_value: Any) -> None:
    """What a padding fill needs: the buffer written in the function, its last writer at the top
    level, and a pad_value of the buffer's kind."""
    writers = [r for r in block_realizes(func.body) if any(w.buffer is old for w in r.block.writes)]
    if not writers:
        raise ScheduleError(f"transform_layout: {old.name} is not written in the function, so its padding would hold "
                            "whatever the caller passes; cache_read it and pad the copy", ir=func)
    last = locate_block(func, writers[-1].block, "transform_layout")
    if _scope_parts(func, last, "transform_layout")[0] is not func.body:
        # inside a nested block the fill would run once per instance of that block, perhaps in
        # parallel iterations writing the same padding
        raise ScheduleError(f"transform_layout: block {last.block.name} writes {old.name} inside a nested block; "
                            "pad the buffer before blockize or tensorize", ir=func, spot=last.realize)
    if isinstance(pad_value, float) and not new.dtype.is_float:
        raise ScheduleError(f"transform_layout: pad_value {pad_value!r} is not a {new.dtype} value", ir=func)


def _padding_fill(func: PrimFunc, old: Buffer, new: Buffer, index_map: IndexMap, shape: list[int],
                  new_shape: list[int], pad_value: Any) -> Stmt:
    """A loop nest and block storing pad_value at the image of every index outside `shape`."""
    _check_fill_writer(func, old, new, pad_value)
    domain = _padding_domain(func, index_map, shape, new_shape)
    dtype = new.shape[0].dtype
    loop_vars = [Var(f"ax{d}", dtype) for d in range(len(domain))]
    iter_vars = [IterVar(Var(f"v{d}", dtype), Range(const(0, dtype), const(e, dtype)), "spatial")
                 for d, e in enumerate(domain)]
    index = index_map.apply([iv.var for iv in iter_vars])
    padded = [d for d, (extent, full) in enumerate(zip(shape, domain)) if extent < full]
    name = fresh_block_name(func.body, f"{old.name}_pad")
    block = Block(name, tuple(iter_vars), (), (BufferRegion(new, tuple(Range(i, 1) for i in index)),),
                  BufferStore(new, const(pad_value, new.dtype), index))
    extents = list(domain)
    bindings: list = list(loop_vars)
    outside = None
    if len(padded) == 1:
        # one padded dimension: its loop runs over the padding alone (rows M..M' of A's last
        # panel, not all of A behind a test)
        d = padded[0]
        extents[d] = domain[d] - shape[d]
        bindings[d] = loop_vars[d] + const(shape[d], dtype)
    else:
        for d in padded:
            beyond = loop_vars[d] >= const(shape[d], dtype)
            outside = beyond if outside is None else Or(outside, beyond)
    stmt: Stmt = BlockRealize(tuple(bindings), outside if outside is not None else IntImm(1, "bool"), block)
    for var, extent in reversed(list(zip(loop_vars, extents))):
        stmt = For(var, const(0, dtype), const(extent, dtype), "serial", stmt)
    return stmt


def _insert_fill(func: PrimFunc, buffer: Buffer, fill: Stmt) -> PrimFunc:
    """func with the fill nest placed right after the top-level statement holding the last writer
    of buffer, in that writer's scope."""
    writers = [r for r in block_realizes(func.body) if any(w.buffer is buffer for w in r.block.writes)]
    location = locate_block(func, writers[-1].block, "transform_layout")
    scope_realize, items = _scope_parts(func, location, "transform_layout")
    items.insert(_item_index(items, writers[-1]) + 1, fill)
    scope = scope_realize.block
    return replace_in_func(func, {id(scope_realize): scope_realize.with_(block=scope.with_(body=seq(*items)))})


# ----------------------------------------------------------------------------- pad_einsum

def pad_einsum(func: PrimFunc, block: Block, padding: Sequence[int]) -> tuple[PrimFunc, None]:
    """Pad the iteration domain of an einsum block up to multiples of `padding` (one per iter var).

    Inputs indexed by a padded iter var are copied into zero-padded buffers `<name>_pad` first; the
    block writes a padded output `<out>_pad`, copied back to the output after it.

    Requires: the block is alone in its loop nest, with trivial bindings (loop k binds iter var k,
    domains start at 0 with constant extents); every access index is an iter var or a constant (the
    einsum pattern); one output; padding a reduce iter needs `out = out + (product of loads)`, so
    the zero padding adds nothing.

    Before: `for i in range(127): C[vi] = A[vi] * 2`; `pad_einsum(C, [16])` after:
    `A_pad[v0] = if_then_else(v0 < 127, A[v0], 0)` (128 long), `for i in range(128): C_pad[vi] =
    A_pad[vi] * 2`, then `C[v0] = C_pad[v0]` over 127.
    """
    from ...ast import collect

    location = locate_block(func, block, "pad_einsum")
    realize = location.realize
    ivs = block.iter_vars
    if not isinstance(padding, (list, tuple)) or len(padding) != len(ivs) or any(
        isinstance(p, bool) or not isinstance(p, int) or p <= 0 for p in padding
    ):
        raise ScheduleError(f"pad_einsum: padding: expected {len(ivs)} positive ints (one per iter var), got "
                            f"{padding!r}", ir=func, spot=realize)
    loops = location.loops
    if len(loops) != len(ivs) or any(value is not loop.loop_var for value, loop in zip(realize.iter_values, loops)):
        raise ScheduleError(f"pad_einsum: block {block.name} needs trivial bindings (loop k binds iter var k)",
                            ir=func, spot=realize)
    scope_realize, items = _scope_parts(func, location, "pad_einsum")
    position = _item_index(items, realize)
    nest = list(loops) + [realize]
    if loops and items[position] is not loops[0] or any(outer.body is not inner for outer, inner in zip(nest, nest[1:])):
        raise ScheduleError(f"pad_einsum: block {block.name} must be alone in its loop nest", ir=func, spot=realize)
    extents = []
    for iv, loop in zip(ivs, loops):
        lo, ext = const_int(iv.dom.min), const_int(iv.dom.extent)
        if lo != 0 or ext is None or const_int(loop.extent) != ext:
            raise ScheduleError(f"pad_einsum: iter var {iv.var.name} needs a constant domain starting at 0",
                                ir=func, spot=realize)
        extents.append(ext)
    padded = [-(-e // p) * p for e, p in zip(extents, padding)]
    store = block.body
    if not isinstance(store, BufferStore) or len(block.writes) != 1:
        raise ScheduleError(f"pad_einsum: block {block.name} must be one store to one output", ir=func, spot=realize)
    own = {iv.var: k for k, iv in enumerate(ivs)}
    accesses = collect(block.body, BufferLoad) + ([] if block.init is None else collect(block.init, BufferLoad))
    index_lists = [load.indices for load in accesses] + [store.indices]
    for indices in index_lists:
        for index in indices:
            if not (isinstance(index, Var) and index in own) and const_int(index) is None:
                raise ScheduleError(f"pad_einsum: block {block.name} is not an einsum: index {index.script()} is "
                                    "neither an iter var nor a constant", ir=func, spot=realize)
    grows = [p != e for p, e in zip(padded, extents)]
    if not any(grows):
        return func, None
    out = store.buffer
    reduce_grows = any(g and iv.kind == "reduce" for g, iv in zip(grows, ivs))
    if reduce_grows:
        value = store.value
        ok = (type(value).__name__ == "Add" and isinstance(value.a, BufferLoad) and value.a.buffer is out
              and _is_product_of_loads(value.b))
        if not ok:
            raise ScheduleError(f"pad_einsum: padding a reduce iter of block {block.name} needs out = out + a product "
                                "of loads", ir=func, spot=realize)

    def padded_shape(buffer: Buffer, indices) -> tuple:
        dims = []
        for index, dim in zip(indices, buffer.shape):
            dims.append(const(padded[own[index]], dim.dtype) if isinstance(index, Var) else dim)
        return tuple(dims)

    replacements: dict = {}
    new_items = list(items)
    allocs = []
    inserts = []
    for load in accesses:
        buffer = load.buffer
        if buffer is out or buffer in replacements:
            continue
        if not any(isinstance(i, Var) and grows[own[i]] for i in load.indices):
            continue
        shape = padded_shape(buffer, load.indices)
        pad = Buffer(f"{buffer.name}_pad", shape, buffer.dtype, buffer.scope)
        replacements[buffer] = pad
        allocs.append(pad)
        inserts.append(_pad_nest(fresh_block_name(func.body, f"{buffer.name}_pad"), buffer, pad))
    out_pad = Buffer(f"{out.name}_pad", padded_shape(out, store.indices), out.dtype, out.scope)
    replacements[out] = out_pad
    allocs.append(out_pad)
    swap = Mutator()
    swap.buffer_map.update(replacements)
    new_ivs = tuple(iv.with_(dom=Range(const(0, iv.dom.extent.dtype), const(p, iv.dom.extent.dtype)))
                    for iv, p in zip(ivs, padded))
    new_block = swap.visit(block).with_(iter_vars=new_ivs)
    stmt: Stmt = realize.with_(block=new_block)
    for loop, p in reversed(list(zip(loops, padded))):
        stmt = loop.with_(extent=const(p, loop.extent.dtype), body=stmt)
    copy_back = copy_nest(fresh_block_name(func.body, f"{out.name}_pad_back"), out_pad, out)
    copy_back = _shrink_copy(copy_back, out)
    new_items[position] = stmt
    new_items.insert(position + 1, copy_back)
    for nest in reversed(inserts):
        new_items.insert(position, nest)
    scope = scope_realize.block
    new_scope = scope.with_(body=seq(*new_items), alloc_buffers=scope.alloc_buffers + tuple(allocs))
    return replace_in_func(func, {id(scope_realize): scope_realize.with_(block=new_scope)}), None


def _is_product_of_loads(expr) -> bool:
    from ...ast import Cast, Mul

    if isinstance(expr, BufferLoad):
        return True
    if isinstance(expr, Cast):
        return _is_product_of_loads(expr.value)
    if isinstance(expr, Mul):
        return _is_product_of_loads(expr.a) or _is_product_of_loads(expr.b)
    return False


def _pad_nest(name: str, source: Buffer, target: Buffer) -> Stmt:
    """target[v] = source[v] inside source's shape, else 0, over target's (larger) shape."""
    from ...ast import Call, all_

    loop_vars = [Var(f"ax{d}", dim.dtype) for d, dim in enumerate(target.shape)]
    iter_vars = [IterVar(Var(f"v{d}", dim.dtype), Range(const(0, dim.dtype), dim), "spatial")
                 for d, dim in enumerate(target.shape)]
    index = tuple(iv.var for iv in iter_vars)
    inside = all_(*(i < dim for i, dim, padded in zip(index, source.shape, target.shape)
                    if const_int(dim) != const_int(padded)))
    zero = const(0, source.dtype)
    value = Call("if_then_else", (inside, source.vload(index), zero), source.dtype)
    block = Block(name, tuple(iter_vars), (BufferRegion(source, tuple(Range(i, 1) for i in index)),),
                  (BufferRegion(target, tuple(Range(i, 1) for i in index)),), BufferStore(target, value, index))
    stmt: Stmt = BlockRealize(tuple(loop_vars), true(), block)
    for var, dim in reversed(list(zip(loop_vars, target.shape))):
        stmt = For(var, const(0, dim.dtype), dim, "serial", stmt)
    return stmt


def _shrink_copy(stmt: Stmt, out: Buffer) -> Stmt:
    """The copy-back nest over out's (smaller) shape."""
    loops = []
    node = stmt
    while isinstance(node, For):
        loops.append(node)
        node = node.body
    realize = node
    block = realize.block
    ivs = tuple(iv.with_(dom=Range(iv.dom.min, dim)) for iv, dim in zip(block.iter_vars, out.shape))
    new: Stmt = realize.with_(block=block.with_(iter_vars=ivs))
    for loop, dim in reversed(list(zip(loops, out.shape))):
        new = loop.with_(extent=dim, body=new)
    return new
