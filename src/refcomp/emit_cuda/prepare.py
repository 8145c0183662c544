"""The GPU-specific lowering steps, declared as `CUDA_LOWERING` hooks of `refcomp.loops.lower`.

    prepared = prepare(func)          # lower(func, hooks=CUDA_LOWERING)

The CUDA emitter and the CPU simulation both start from the prepared form:

0. (before_blocks hook) rewrite cross-thread reductions -- reduction loops bound to threadIdx --
   as per-thread partials combined in shared memory (`cross_thread.lower_cross_thread_reductions`);
1. turn blocks into loops (`lower_blocks`, the first pass of `refcomp.loops.lower`);
2. (after_blocks hooks) put every kernel in normal form (`kernel.normalize_kernels`);
3. move `shared` / `local` allocations that lowering left in host code into the kernels that use
   them (a block-scoped buffer lives in on-chip memory of one kernel: it can't outlive it);
4. place each on-chip buffer at the innermost statement holding all its accesses and shrink it,
   dimension by dimension, to the tile it uses there (`compact.compact_on_chip_buffers`);
5. the rest of the lowering pipeline (flatten, simplify, vectorize);
6. (after_lowering hooks) combine single-thread reduction loops with warp shuffles where the
   block is one warp (`warp_reduce.use_warp_reductions`);
7. insert the barriers each kernel needs (`barriers.plan_barriers`).
"""
from __future__ import annotations

from ..ast import Allocate, BufferLoad, BufferStore, For, Mutator, PrimFunc, Stmt, collect
from ..errors import BuildError
from ..loops.lower import LoweringHooks, lower
from .barriers import plan_barriers
from .cross_thread import lower_cross_thread_reductions
from .compact import compact_on_chip_buffers
from .warp_reduce import use_warp_reductions
from .kernel import is_kernel_root, is_on_chip, kernel_shape, normalize_kernels, rebuild_kernel


def sink_on_chip_allocations(func: PrimFunc) -> PrimFunc:
    """Move shared/local allocations that lowering left in host code into the kernels using them."""
    return func.with_(body=_SinkAllocations(func).visit(func.body))


def plan_kernels(func: PrimFunc) -> PrimFunc:
    """Each kernel with warp-shuffle reductions where it is one warp, and the barriers it needs."""
    return func.with_(body=_PlanKernels(func).visit(func.body))


CUDA_LOWERING = LoweringHooks(
    before_blocks=(lower_cross_thread_reductions,),
    after_blocks=(normalize_kernels, sink_on_chip_allocations,
                  compact_on_chip_buffers),  # per dimension, before buffers are flattened
    after_lowering=(plan_kernels,),
)


def prepare(func: PrimFunc) -> PrimFunc:
    """func lowered and in kernel normal form with barriers (module docstring)."""
    return lower(func, hooks=CUDA_LOWERING)


def _uses(stmt: Stmt, buffer) -> bool:
    return any(n.buffer is buffer for n in collect(stmt, BufferLoad) + collect(stmt, BufferStore))


class _SinkAllocations(Mutator):
    def __init__(self, func: PrimFunc) -> None:
        super().__init__()
        self.func = func

    def visit_Allocate(self, alloc: Allocate) -> Stmt:
        if not is_on_chip(alloc.buffer.scope):
            return self.generic_visit(alloc)
        return self.visit(_Sinker(self.func, alloc).visit(alloc.body))

    def visit_For(self, loop: For) -> Stmt:
        return loop if is_kernel_root(loop) else self.generic_visit(loop)


class _Sinker(Mutator):
    """Wraps the per-thread body of every kernel that uses alloc.buffer in the allocation."""

    def __init__(self, func: PrimFunc, alloc: Allocate) -> None:
        super().__init__()
        self.func = func
        self.alloc = alloc

    def visit_For(self, loop: For) -> Stmt:
        if not is_kernel_root(loop):
            return self.generic_visit(loop)
        if not _uses(loop, self.alloc.buffer):
            return loop
        shape = kernel_shape(loop)
        return rebuild_kernel(shape, self.alloc.with_(body=shape.body))

    def visit_BufferStore(self, store: BufferStore) -> Stmt:
        if store.buffer is self.alloc.buffer:
            raise BuildError(f"cuda: {store.buffer.name} ({store.buffer.scope}) is written outside any kernel",
                             ir=self.func, spot=store)
        return store


class _PlanKernels(Mutator):
    def __init__(self, func: PrimFunc) -> None:
        super().__init__()
        self.func = func

    def visit_For(self, loop: For) -> Stmt:
        if not is_kernel_root(loop):
            return self.generic_visit(loop)
        shape = kernel_shape(loop)
        from ..ast.expr import as_int

        extents = {var: as_int(extent) for tag, var, extent in shape.axes if tag.startswith("threadIdx")}
        thread_x = next((var for tag, var, _ in shape.axes if tag == "threadIdx.x"), None)
        body = use_warp_reductions(shape.body, thread_x, extents)
        return rebuild_kernel(shape, plan_barriers(self.func, shape.thread_vars, body, extents))
