"""Pass `lower_blocks`: replace every block by the plain statements it stands for.

Requires: a PrimFunc whose blocks are well formed (each iter var bound by its BlockRealize, match
buffers viewing regions of buffers in scope).
Guarantees: no Block, BlockRealize or MatchBufferRegion remains; a block's iter vars are replaced by
their bindings (a binding that reads memory is bound once by a LetStmt instead, as the block
evaluated it on entry); a predicate other than `true` becomes an IfThenElse around the block's body; `init`
runs, before the body, exactly when every reduce iter var's *binding* equals its domain minimum (so
it is correct after split/reorder of reduction loops); `alloc_buffers` become Allocate statements at
the block's position (the first buffer outermost); accesses to a match buffer become accesses to its
source buffer, offset by the region's start.  Loops, loop kinds, thread bindings, buffer scopes,
AssertStmt and intrinsic calls are left as they are.
"""
from __future__ import annotations

from ...ast import (
    Allocate, And, Block, BlockRealize, BufferLoad, BufferStore, EQ, IfThenElse, IntImm, LetStmt, Mutator,
    PrimExpr, PrimFunc, Stmt, Var, seq, substitute,
)
from ...ast.buffer import Buffer
from ...errors import IRError
from ...shape.simplify import is_true, simplify_expr
from .simplify import reads_memory


def lower_blocks(func: PrimFunc) -> PrimFunc:
    """func with its blocks turned into loops-and-statements code (see the module docstring)."""
    body = _BlockLowerer(func).visit(func.body)
    return func.with_(body=body)


class _BlockLowerer(Mutator):
    def __init__(self, func: PrimFunc) -> None:
        super().__init__()
        self.func = func

    def visit_BlockRealize(self, realize: BlockRealize) -> Stmt:
        block = realize.block
        pairs = list(zip(block.iter_vars, realize.iter_values))
        # A binding that reads memory is evaluated once, on entry, as the block did: a LetStmt.
        # Every other binding is substituted into the body.
        let_bound = [(iv, value) for iv, value in pairs if reads_memory(value)]
        bindings = {iv.var: value for iv, value in pairs if not reads_memory(value)}
        body = self._resolve_match_buffers(block, self.visit(block.body))
        if block.init is not None:
            init = self._resolve_match_buffers(block, self.visit(block.init))
            body = seq(IfThenElse(_first_reduction_iteration(block, realize), init), body)
        body = substitute(body, bindings)
        for iv, value in reversed(let_bound):
            body = LetStmt(iv.var, value, body)
        if not is_true(realize.predicate):
            body = IfThenElse(realize.predicate, body)
        for buffer in reversed(block.alloc_buffers):
            body = Allocate(buffer, body)
        return body

    def visit_Block(self, block: Block) -> Stmt:
        # A block outside any BlockRealize (an opaque block with no iteration domain).
        if block.iter_vars:
            raise IRError(
                f"lower_blocks: block {block.name!r} has iter vars but no BlockRealize binding them",
                ir=self.func, spot=block,
            )
        return self.visit_BlockRealize(BlockRealize((), IntImm(1, "bool"), block))

    def _resolve_match_buffers(self, block: Block, stmt: Stmt) -> Stmt:
        if not block.match_buffers:
            return stmt
        rewriter = _MatchBufferResolver(self.func, block)
        return rewriter.visit(stmt)


def _first_reduction_iteration(block: Block, realize: BlockRealize) -> PrimExpr:
    """The condition "every reduce iter var's binding is at its domain minimum" (true if none)."""
    condition: PrimExpr | None = None
    for iv, value in zip(block.iter_vars, realize.iter_values):
        if iv.kind != "reduce":
            continue
        if reads_memory(value):
            value = iv.var  # let-bound to its binding (see visit_BlockRealize)
        minimum = iv.dom.min if iv.dom.min.dtype == value.dtype else iv.dom.min.astype(value.dtype)
        term = EQ(value, minimum)
        condition = term if condition is None else And(condition, term)
    return condition if condition is not None else IntImm(1, "bool")


class _MatchBufferResolver(Mutator):
    """Rewrites accesses to a block's match buffers into accesses of their source buffers."""

    def __init__(self, func: PrimFunc, block: Block) -> None:
        super().__init__()
        self.views: dict[Buffer, tuple[Buffer, tuple[PrimExpr, ...], int]] = {}
        symbols: dict[Var, PrimExpr] = {}
        for match in block.match_buffers:
            view, source = match.buffer, match.source
            starts = tuple(r.min for r in source.region)
            leading = len(source.region) - len(view.shape)
            if leading < 0:
                raise IRError(
                    f"lower_blocks: match buffer {view.name} has {len(view.shape)} dims but views a "
                    f"{len(source.region)}-d region of {source.buffer.name}", ir=func, spot=block,
                )
            self.views[view] = (source.buffer, starts, leading)
            # Symbolic shape, strides and offset of the view take the region's values.
            for dim, region in zip(view.shape, source.region[leading:]):
                if isinstance(dim, Var):
                    symbols.setdefault(dim, region.extent)
            source_strides = _strides_of(source.buffer)
            for stride, actual in zip(view.strides, source_strides[leading:]):
                if isinstance(stride, Var):
                    symbols.setdefault(stride, actual)
            if isinstance(view.elem_offset, Var):
                offset = source.buffer.elem_offset
                for start, stride in zip(starts, source_strides):
                    offset = offset + start * stride
                symbols.setdefault(view.elem_offset, simplify_expr(offset))
        self.symbols = symbols

    def _indices(self, buffer: Buffer, indices: tuple[PrimExpr, ...]) -> tuple[Buffer, tuple[PrimExpr, ...]]:
        source, starts, leading = self.views[buffer]
        inner = tuple(start + index for start, index in zip(starts[leading:], indices))
        return source, tuple(starts[:leading]) + inner

    def visit_BufferLoad(self, load: BufferLoad) -> PrimExpr:
        indices = self.visit(load.indices)
        if load.buffer in self.views:
            source, new_indices = self._indices(load.buffer, indices)
            return BufferLoad(source, new_indices)
        return load.with_(indices=indices)

    def visit_BufferStore(self, store: BufferStore) -> Stmt:
        value, indices = self.visit(store.value), self.visit(store.indices)
        if store.buffer in self.views:
            source, new_indices = self._indices(store.buffer, indices)
            return BufferStore(source, value, new_indices)
        return store.with_(value=value, indices=indices)

    def visit_Var(self, var: Var) -> PrimExpr:
        return self.symbols.get(var, var)

    visit_SizeVar = visit_Var


def _strides_of(buffer: Buffer) -> tuple[PrimExpr, ...]:
    """The element strides of buffer: explicit ones, else those of compact row-major layout."""
    if buffer.strides:
        return buffer.strides
    strides: list[PrimExpr] = []
    running: PrimExpr = IntImm(1, buffer.shape[0].dtype if buffer.shape else "int32")
    for dim in reversed(buffer.shape):
        strides.append(running)
        running = running * dim if running.dtype == dim.dtype else running * dim.astype(running.dtype)
    return tuple(simplify_expr(s) for s in reversed(strides))
