"""Pass `flatten_buffers`: every buffer becomes one-dimensional, every access a single linear index.

Requires: no blocks (run `lower_blocks` first), so buffers appear only in parameters, Allocate,
BufferLoad and BufferStore.
Guarantees: every buffer in the result has exactly one dimension, no explicit strides and element
offset 0; one flat buffer stands for each original buffer everywhere (identity kept), with the same
name, dtype, scope and alignment.  An access `B[i0, ..., ik]` becomes `B_flat[sum(i_d * stride_d) +
elem_offset]`, the strides being B's explicit ones or those of compact row-major layout; in a
compact buffer, a pair `(x // d, x % d)` at consecutive dims (., d), d being that dim, counts as
the one index x (see _merged_div_mod).  The flat
length is `prod(shape)` for a compact buffer, else the furthest element reached plus one.
`func.attrs["original_buffers"]` maps each flat parameter buffer to the parameter it replaced (the
emitter and argument checks report and check the original shapes from it); the helper
`original_buffer(func, buffer)` looks one up.
"""
from __future__ import annotations

from types import MappingProxyType

from ...ast import Allocate, BufferLoad, BufferStore, IntImm, Mutator, PrimExpr, PrimFunc, Stmt
from ...ast.buffer import Buffer
from ...ast.expr import as_int
from ...shape.simplify import simplify_expr

ORIGINAL_BUFFERS = "original_buffers"


def flatten_buffers(func: PrimFunc) -> PrimFunc:
    """func with every buffer flattened to one dimension (see the module docstring)."""
    flattener = _Flattener()
    params = tuple(flattener.flat(p) if isinstance(p, Buffer) else p for p in func.params)
    body = flattener.visit(func.body)
    originals = dict(func.attrs.get(ORIGINAL_BUFFERS, {}))
    mapping = {}
    for old, new in zip(func.params, params):
        if isinstance(old, Buffer):
            mapping[new] = originals.get(old, old)
    func = func.with_(params=params, body=body)
    return func.with_attr(ORIGINAL_BUFFERS, MappingProxyType(mapping))


def original_buffer(func: PrimFunc, buffer: Buffer) -> Buffer:
    """The buffer a (flattened) parameter of func stood for before lowering (itself if none)."""
    return func.attrs.get(ORIGINAL_BUFFERS, {}).get(buffer, buffer)


def is_flat(buffer: Buffer) -> bool:
    """buffer is already in flattened form: one dimension, compact, offset 0."""
    return (len(buffer.shape) == 1 and not buffer.strides
            and as_int(buffer.elem_offset) == 0)


def flat_length(buffer: Buffer) -> PrimExpr:
    """The number of elements the flattened form of buffer spans."""
    index_type = _index_dtype(buffer)
    if not buffer.strides:
        length: PrimExpr = IntImm(1, index_type)
        for dim in buffer.shape:
            length = length * _as(dim, index_type)
        length = length + _as(buffer.elem_offset, index_type)
    else:
        # the furthest element reached, plus one
        length = _as(buffer.elem_offset, index_type) + IntImm(1, index_type)
        for dim, stride in zip(buffer.shape, buffer.strides):
            length = length + (_as(dim, index_type) - 1) * _as(stride, index_type)
    return simplify_expr(length)


def flat_index(buffer: Buffer, indices: tuple[PrimExpr, ...]) -> PrimExpr:
    """The linear element index of buffer[indices] in its flattened form."""
    index_type = _index_dtype(buffer, indices)
    offset = _as(buffer.elem_offset, index_type)
    if buffer.strides:
        index: PrimExpr | None = None
        for i, stride in zip(indices, buffer.strides):
            term = _as(i, index_type) * _as(stride, index_type)
            index = term if index is None else index + term
    else:
        index = None
        indices, shape = _merged_div_mod(indices, buffer.shape)
        for i, dim in zip(indices, shape):  # Horner form: ((i0 * d1 + i1) * d2 + i2) ...
            i = _as(i, index_type)
            index = i if index is None else index * _as(dim, index_type) + i
    if index is None:
        return offset
    return simplify_expr(index if as_int(offset) == 0 else index + offset)


def _merged_div_mod(indices: tuple[PrimExpr, ...], shape: tuple[PrimExpr, ...]) -> tuple[tuple, tuple]:
    """Indices and dims with each pair `(x // d, x % d)` over consecutive dims (., d) read as the
    one index x over their product, when d is that very dim: a reshape's index into a symbolic
    (batch, seq, ...) buffer.  Their flat offset `(x // d) * d + x % d` is x for every d > 0, and
    an access to a buffer with a zero dim never runs (it would be out of bounds); so the offset
    needs no division, which with a symbolic d would be a checked call the vectorizer stops at."""
    from ...ast.expr import FloorDiv, FloorMod
    from ...ast.structural import structural_equal

    merged_indices, merged_shape = list(indices[:1]), list(shape[:1])
    for i, dim in zip(indices[1:], shape[1:]):
        last = merged_indices[-1]
        if (isinstance(i, FloorMod) and isinstance(last, FloorDiv) and structural_equal(i.a, last.a)
                and structural_equal(i.b, last.b) and structural_equal(i.b, dim)
                and i.a.dtype == i.b.dtype == dim.dtype):
            merged_indices[-1] = i.a
            merged_shape[-1] = merged_shape[-1] * dim
            continue
        merged_indices.append(i)
        merged_shape.append(dim)
    return tuple(merged_indices), tuple(merged_shape)


def _index_dtype(buffer: Buffer, indices: tuple[PrimExpr, ...] = ()):
    """The widest integer type among the buffer's shape and the indices (lanes dropped)."""
    candidates = [d.dtype.element for d in buffer.shape] + [i.dtype.element for i in indices]
    candidates += [s.dtype.element for s in buffer.strides]
    widest = max(candidates, key=lambda t: t.bits, default=buffer.elem_offset.dtype)
    return widest if widest.is_int else buffer.elem_offset.dtype


def _as(expr: PrimExpr, element) -> PrimExpr:
    target = element.with_lanes(expr.dtype.lanes)
    return expr if expr.dtype == target else expr.astype(target)


class _Flattener(Mutator):
    def __init__(self) -> None:
        super().__init__()
        self.table: dict[Buffer, Buffer] = {}

    def flat(self, buffer: Buffer) -> Buffer:
        if buffer in self.table:
            return self.table[buffer]
        if is_flat(buffer):
            new = buffer
        else:
            new = Buffer(buffer.name, (flat_length(buffer),), buffer.dtype, buffer.scope, align=buffer.align)
        self.table[buffer] = new
        return new

    def visit_Buffer(self, buffer: Buffer) -> Buffer:
        return self.flat(buffer)

    def visit_BufferLoad(self, load: BufferLoad) -> PrimExpr:
        indices = self.visit(load.indices)
        if is_flat(load.buffer):
            return load.with_(indices=indices)
        return BufferLoad(self.flat(load.buffer), (flat_index(load.buffer, indices),))

    def visit_BufferStore(self, store: BufferStore) -> Stmt:
        value, indices = self.visit(store.value), self.visit(store.indices)
        if is_flat(store.buffer):
            return store.with_(value=value, indices=indices)
        return BufferStore(self.flat(store.buffer), value, (flat_index(store.buffer, indices),))

    def visit_Allocate(self, allocate: Allocate) -> Stmt:
        return allocate.with_(buffer=self.flat(allocate.buffer), body=self.visit(allocate.body))
