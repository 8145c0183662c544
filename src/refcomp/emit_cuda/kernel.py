"""Kernel extraction: a lowered GPU PrimFunc put into *kernel normal form*.

In normal form every kernel is one nest of thread-bound loops, at most one per thread axis,
`blockIdx.*` loops outside `threadIdx.*` loops, with a body that is the program *one thread* runs:

    for bx in blockIdx.x(grid_x):          # launch dimensions, computed on the host
      for tx in threadIdx.x(block_x):
        <per-thread body: no thread-bound loops inside>

Thread-bound loops deeper in the original body are folded into the launch: the loop variable
becomes the thread index (offset by the loop's min) and, where its extent is smaller than the
launch extent, the loop body is guarded by `thread index < extent`.  Everything outside kernels is
host code; host code may loop and allocate global buffers, but may not touch buffer elements
(that work would have to run on the GPU: the error says which loop must be bound).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ast import (
    Allocate, BufferLoad, BufferStore, For, IfThenElse, IntImm, LetStmt, Mutator,
    PrimExpr, PrimFunc, SeqStmt, Stmt, Var, collect, substitute,
)
from ..ast.expr import LT, as_int
from ..ast.stmt import AssertStmt
from ..errors import BuildError

BLOCK_AXES = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
THREAD_AXES = ("threadIdx.x", "threadIdx.y", "threadIdx.z")
LAUNCH_ORDER = BLOCK_AXES + THREAD_AXES
MAX_THREADS_PER_BLOCK = 1024
ON_CHIP_PREFIXES = ("shared", "local", "warp", "wmma.")


def is_on_chip(scope: str) -> bool:
    """Whether buffers of this scope live in a kernel's on-chip memory (shared, registers)."""
    return scope.startswith(ON_CHIP_PREFIXES)


@dataclass(frozen=True)
class KernelShape:
    """The launch of one kernel in normal form: extents per axis and the per-thread body."""

    axes: tuple[tuple[str, Var, PrimExpr], ...]  # (axis tag, index var, extent), launch order
    body: Stmt

    def extent(self, tag: str) -> PrimExpr:
        for axis, _, extent in self.axes:
            if axis == tag:
                return extent
        return IntImm(1, "int32")

    @property
    def thread_vars(self) -> tuple[Var, ...]:
        return tuple(var for tag, var, _ in self.axes if tag.startswith("threadIdx"))

    @property
    def block_vars(self) -> tuple[Var, ...]:
        return tuple(var for tag, var, _ in self.axes if tag.startswith("blockIdx"))


def is_kernel_root(stmt: Stmt) -> bool:
    return isinstance(stmt, For) and stmt.kind == "thread_binding"


def kernel_shape(root: For) -> KernelShape:
    """The launch axes and per-thread body of a kernel already in normal form."""
    axes = []
    stmt: Stmt = root
    while is_kernel_root(stmt):
        axes.append((stmt.thread_binding, stmt.loop_var, stmt.extent))
        stmt = stmt.body
    return KernelShape(tuple(axes), stmt)


def rebuild_kernel(shape: KernelShape, body: Stmt) -> Stmt:
    """The kernel with launch `shape.axes` around a new per-thread body."""
    for tag, var, extent in reversed(shape.axes):
        body = For(var, IntImm(0, var.dtype), extent, "thread_binding", body, thread_binding=tag)
    return body


def normalize_kernels(func: PrimFunc) -> PrimFunc:
    """func with every kernel in normal form (module docstring); host code checked."""
    body = _HostWalker(func).visit(func.body)
    return func.with_(body=body)


class _HostWalker(Mutator):
    """Visits host code; each outermost thread-bound loop starts a kernel."""

    def __init__(self, func: PrimFunc) -> None:
        super().__init__()
        self.func = func
        self.kernel_count = 0

    def visit_For(self, loop: For) -> Stmt:
        if loop.kind == "thread_binding":
            self.kernel_count += 1
            return _normalize_kernel(self.func, loop)
        return self.generic_visit(loop)

    def visit_BufferStore(self, store: BufferStore) -> Stmt:
        raise BuildError(
            f"cuda: a store to {store.buffer.name} runs on the host: every loop that touches buffer "
            "elements must be inside a loop bound to blockIdx.* / threadIdx.* (use Schedule.bind)",
            ir=self.func, spot=store,
        )

    def visit_BufferLoad(self, load: BufferLoad) -> PrimExpr:
        raise BuildError(
            f"cuda: a load from {load.buffer.name} runs on the host: bind the loops around it to "
            "blockIdx.* / threadIdx.* (use Schedule.bind)",
            ir=self.func, spot=load,
        )


def _normalize_kernel(func: PrimFunc, root: For) -> Stmt:
    extents: dict[str, PrimExpr] = {}
    for loop in collect(root, For):
        if loop.kind != "thread_binding":
            continue
        tag = loop.thread_binding
        if tag.startswith("vthread"):
            raise BuildError(f"cuda: virtual threads ({tag}) are not supported yet", ir=func, spot=loop)
        extents[tag] = _wider_extent(func, loop, extents.get(tag), loop.extent)
    axis_vars = {tag: Var(tag.replace("Idx.", "_"), extents[tag].dtype) for tag in extents}
    _check_block_size(func, root, extents)
    body = _FoldThreadLoops(func, axis_vars, extents).visit(root)
    for tag in reversed([t for t in LAUNCH_ORDER if t in extents]):
        body = For(axis_vars[tag], IntImm(0, extents[tag].dtype), extents[tag], "thread_binding", body,
                   thread_binding=tag)
    return body


def _wider_extent(func: PrimFunc, loop: For, known: PrimExpr | None, extent: PrimExpr) -> PrimExpr:
    if known is None:
        return extent
    a, b = as_int(known), as_int(extent)
    if a is not None and b is not None:
        return known if a >= b else extent
    if known is extent:
        return known
    from ..ast.structural import structural_equal

    if structural_equal(known, extent, map_free_vars=False):
        return known
    raise BuildError(
        f"cuda: loops bound to {loop.thread_binding} have different symbolic extents; "
        "give them one extent (split by a constant factor) so the launch size is known",
        ir=func, spot=loop,
    )


def _check_block_size(func: PrimFunc, root: For, extents: dict[str, PrimExpr]) -> None:
    threads = 1
    for tag in THREAD_AXES:
        if tag in extents:
            value = as_int(extents[tag])
            if value is None:
                raise BuildError(
                    f"cuda: the extent of {tag} must be a constant (threads per block are fixed at "
                    f"launch); split the loop by a constant before binding it",
                    ir=func, spot=root,
                )
            threads *= value
    if threads > MAX_THREADS_PER_BLOCK:
        raise BuildError(f"cuda: {threads} threads per block exceed the limit of {MAX_THREADS_PER_BLOCK}",
                         ir=func, spot=root)


class _FoldThreadLoops(Mutator):
    def __init__(self, func: PrimFunc, axis_vars: dict[str, Var], extents: dict[str, PrimExpr]) -> None:
        super().__init__()
        self.func = func
        self.axis_vars = axis_vars
        self.extents = extents
        self.active: set[str] = set()

    def visit_For(self, loop: For) -> Stmt:
        if loop.kind != "thread_binding":
            return self.generic_visit(loop)
        tag = loop.thread_binding
        if tag in self.active:
            raise BuildError(f"cuda: a loop bound to {tag} is nested inside another loop bound to {tag}",
                             ir=self.func, spot=loop)
        index = self.axis_vars[tag]
        value = index if _is_zero(loop.min) else loop.min + index
        self.active.add(tag)
        try:
            body = self.visit(substitute(loop.body, {loop.loop_var: value}))
        finally:
            self.active.discard(tag)
        launch = self.extents[tag]
        if launch is loop.extent or as_int(launch) is not None and as_int(launch) == as_int(loop.extent):
            return body
        return IfThenElse(LT(index, loop.extent.astype(index.dtype)), body)


def _is_zero(expr: PrimExpr) -> bool:
    return as_int(expr) == 0


def kernels_of(func: PrimFunc) -> list[For]:
    """The kernel roots of a function in normal form, in program order."""
    roots: list[For] = []

    def walk(stmt: Stmt) -> None:
        if is_kernel_root(stmt):
            roots.append(stmt)
        elif isinstance(stmt, SeqStmt):
            for s in stmt.stmts:
                walk(s)
        elif isinstance(stmt, (For, LetStmt, Allocate, AssertStmt)):
            walk(stmt.body)
        elif isinstance(stmt, IfThenElse):
            walk(stmt.then_case)
            if stmt.else_case is not None:
                walk(stmt.else_case)

    walk(func.body)
    return roots


__all__ = ["KernelShape", "kernel_shape", "kernels_of", "normalize_kernels", "is_kernel_root",
           "rebuild_kernel", "BLOCK_AXES", "THREAD_AXES"]


def hoist_shared_allocations(body: Stmt) -> tuple[Stmt, list[Allocate]]:
    """body without its shared-memory Allocate statements, and those statements."""
    found: list[Allocate] = []

    class _Hoist(Mutator):
        def visit_Allocate(self, alloc: Allocate) -> Stmt:
            inner = self.visit(alloc.body)
            if alloc.buffer.scope.startswith("shared"):
                found.append(alloc)
                return inner
            return alloc.with_(body=inner)

    return _Hoist().visit(body), found
