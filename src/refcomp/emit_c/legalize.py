"""Split vector statements wider than the machine's registers into register-wide pieces.

gcc handles GCC vector types wider than the hardware badly (element-wise extracts, stack round
trips), so before emission a store of a float32x16 value on an AVX2 machine (32-byte registers)
becomes two stores of float32x8 values, each computing its half of every operand:

    B[ramp(i*16, 1, 16)] = exp(A[ramp(i*16, 1, 16)])
    ->  B[ramp(i*16, 1, 8)] = exp(A[ramp(i*16, 1, 8)]);  B[ramp(i*16 + 8, 1, 8)] = exp(A[ramp(i*16 + 8, 1, 8)])

Vector lets are split the same way.  A store whose value reads the buffer it writes stays whole
(the pieces would see each other's writes) unless it is a lane-by-lane update in place, as does
anything this pass does not know how to split; those are still correct, only slower.  A store
that divides by a value that may be zero stays whole too: a vector store either stores every lane
or, when some lane divides by zero, none (spec/ir.md), whatever the register width.
"""
from __future__ import annotations

from ..ast import expr as E
from ..ast import stmt as S
from ..ast.dtype import DataType
from ..ast.function import PrimFunc
from ..ast.functor import Mutator, collect, uses_var
from ..ast.structural import structural_equal
from .zero_checks import divides_by_variable


class _CannotSplit(Exception):
    pass


def split_wide_vectors(func: PrimFunc, max_bytes: int) -> PrimFunc:
    """func with vector stores and lets cut to at most max_bytes per value (0: unchanged)."""
    if max_bytes <= 0:
        return func
    body = _Splitter(max_bytes).visit(func.body)
    return func if body is func.body else func.with_(body=body)


def _element_bytes(dtype: DataType) -> int:
    # float16/bfloat16 compute as float and bool vectors as int32 masks (see ctype.py)
    if dtype.is_bool or dtype.name in ("float16", "bfloat16"):
        return 4
    return dtype.element.bytes


def _value_width(expr: E.PrimExpr) -> int:
    """The widest lane (in bytes) among the vector values of expr, not counting index arithmetic."""
    widest = _element_bytes(expr.dtype) if expr.dtype.lanes > 1 else 0
    if isinstance(expr, E.BufferLoad):
        return widest
    for name in expr.fields():
        child = getattr(expr, name)
        children = child if isinstance(child, tuple) else (child,)
        for item in children:
            if isinstance(item, E.PrimExpr):
                widest = max(widest, _value_width(item))
    return widest


def _same_lanes(load_indices: tuple, store_indices: tuple) -> bool:
    """An in-place update lane by lane (acc[r] = acc[r] + x with r a ramp of nonzero constant
    stride): each piece then reads only the addresses it writes itself."""
    (load_index,), (store_index,) = load_indices, store_indices
    return (isinstance(store_index, E.Ramp) and isinstance(store_index.stride, E.IntImm)
            and store_index.stride.value != 0 and structural_equal(load_index, store_index, map_free_vars=False))


class _Splitter(Mutator):
    def __init__(self, max_bytes: int) -> None:
        super().__init__()
        self.max_bytes = max_bytes
        self.pieces: dict[E.Var, tuple[int, list[E.Var] | dict[int, E.Var]]] = {}

    def chunk_lanes(self, lanes: int, width: int) -> int | None:
        if lanes * width <= self.max_bytes:
            return None
        piece = self.max_bytes // width
        return piece if piece >= 2 and lanes % piece == 0 else None

    # ------------------------------------------------------------------ statements
    def visit_BufferStore(self, s: S.BufferStore) -> S.Stmt:
        value = self.visit(s.value)
        lanes = value.dtype.lanes
        if lanes == 1 or len(s.indices) != 1:
            return s.with_(value=value)
        width = max(_value_width(value), _element_bytes(s.buffer.dtype))
        piece = self.chunk_lanes(lanes, width)
        reads_target = any(load.buffer is s.buffer and not _same_lanes(load.indices, s.indices)
                           for load in collect(value, E.BufferLoad))
        if piece is None or reads_target or s.indices[0].dtype.lanes != lanes or divides_by_variable(s):
            return s.with_(value=value)
        try:
            stores = [S.BufferStore(s.buffer, self.chunk(value, k, piece), (self.chunk(s.indices[0], k, piece),))
                      for k in range(lanes // piece)]
        except _CannotSplit:
            return s.with_(value=value)
        return S.SeqStmt(tuple(stores))

    def visit_LetStmt(self, s: S.LetStmt) -> S.Stmt:
        var = s.var
        value = self.visit(s.value)
        lanes = var.dtype.lanes
        piece = self.chunk_lanes(lanes, _value_width(value)) if lanes > 1 else None
        if piece is None:
            return s.with_(value=value, body=self.visit(s.body))
        try:
            parts = [self.chunk(value, k, piece) for k in range(lanes // piece)]
        except _CannotSplit:
            return s.with_(value=value, body=self.visit(s.body))
        names = [E.Var(f"{var.name}_{k}", var.dtype.with_lanes(piece)) for k in range(len(parts))]
        self.pieces[var] = (piece, names)
        body = self.visit(s.body)
        del self.pieces[var]
        if uses_var(body, var):  # some use could not be split: keep the whole vector
            return s.with_(value=value, body=self.visit(s.body))
        for name, part in reversed(list(zip(names, parts))):
            body = S.LetStmt(name, part, body)
        return body

    # ------------------------------------------------------------------ expressions
    def chunk(self, e: E.PrimExpr, k: int, piece: int) -> E.PrimExpr:
        """Lanes [k*piece, (k+1)*piece) of the vector expression e."""
        if e.dtype.lanes == 1:
            return e
        if isinstance(e, E.Ramp):
            if k == 0:
                return E.Ramp(e.base, e.stride, piece)
            offset = E.Mul(e.stride, E.IntImm(k * piece, e.stride.dtype)) if e.stride.dtype == e.base.dtype \
                else None
            if offset is None:
                raise _CannotSplit
            return E.Ramp(E.Add(e.base, offset), e.stride, piece)
        if isinstance(e, E.Broadcast):
            return E.Broadcast(e.value, piece)
        if isinstance(e, E.Var):
            if e in self.pieces and self.pieces[e][0] == piece:
                return self.pieces[e][1][k]
            raise _CannotSplit
        if isinstance(e, E.BufferLoad):
            return E.BufferLoad(e.buffer, tuple(self.chunk(i, k, piece) for i in e.indices))
        if isinstance(e, E.Not):
            return E.Not(self.chunk(e.a, k, piece))
        if isinstance(e, E.BinaryOp):
            return type(e)(self.chunk(e.a, k, piece), self.chunk(e.b, k, piece))
        if isinstance(e, E.Select):
            return E.Select(self.chunk(e.condition, k, piece), self.chunk(e.true_value, k, piece),
                            self.chunk(e.false_value, k, piece))
        if isinstance(e, E.Cast):
            return E.Cast(e.dtype.with_lanes(piece), self.chunk(e.value, k, piece))
        if isinstance(e, E.Call) and e.op not in ("call_extern", "address_of") and \
                (e.op != "reinterpret" or e.args[0].dtype.lanes == e.dtype.lanes):  # lane for lane
            return E.Call(e.op, tuple(self.chunk(a, k, piece) for a in e.args), e.dtype.with_lanes(piece))
        if isinstance(e, E.Let):
            # the binding stays a binding (substituted, a value used n times is computed n times:
            # the inline exponential's steps grow the source by 2^steps)
            if e.var.dtype.lanes == 1:
                return E.Let(e.var, e.value, self.chunk(e.body, k, piece))
            if e.var.dtype.lanes != e.value.dtype.lanes:
                raise _CannotSplit
            var = E.Var(f"{e.var.name}_{k}", e.var.dtype.with_lanes(piece))
            value = self.chunk(e.value, k, piece)
            outer = self.pieces.get(e.var)
            self.pieces[e.var] = (piece, {k: var})
            try:
                body = self.chunk(e.body, k, piece)
            finally:
                if outer is None:
                    del self.pieces[e.var]
                else:
                    self.pieces[e.var] = outer
            return E.Let(var, value, body)
        raise _CannotSplit
