"""Shrink on-chip buffers to the part one block (or one thread) actually touches.

A `cache_read` into shared memory allocates a buffer the size of the whole tensor, but each block
only uses a tile of it: `A_shared[bx * 64 + t]` for `0 <= t < 65`.  Every index of such a buffer is
split into a *base* that depends only on values fixed for the whole block (block indices, host
variables) and an *offset* over the kernel's own loops and threads.  When all accesses share one
base and the offsets have constant bounds [lo, hi], the buffer becomes `hi - lo + 1` elements long
and each index `offset - lo` (the engine, shared with the C target:
refcomp.loops.passes.compact_buffers).  Buffers whose accesses don't have that form are left as they are
(the emitter then reports a non-constant or too-large size).
"""
from __future__ import annotations

from ..ast import For, Mutator, PrimFunc, Stmt
from ..ast.expr import as_int
from ..loops.passes.compact_buffers import BufferCompactor
from .kernel import is_kernel_root, is_on_chip, kernel_shape, rebuild_kernel


def compact_on_chip_buffers(func: PrimFunc) -> PrimFunc:
    """func with each kernel's shared/local buffers shrunk to their used extent (module doc)."""
    return func.with_(body=_Kernels().visit(func.body))


class _Kernels(Mutator):
    def visit_For(self, loop: For) -> Stmt:
        if not is_kernel_root(loop):
            return self.generic_visit(loop)
        shape = kernel_shape(loop)
        ranges = {var: (0, as_int(extent)) for _, var, extent in shape.axes
                  if var in shape.thread_vars}
        body = BufferCompactor(ranges, set(shape.thread_vars), is_on_chip).visit(shape.body)
        return rebuild_kernel(shape, body)


__all__ = ["compact_on_chip_buffers"]
