"""Running GPU-scheduled functions on the CPU, with the semantics of a real launch.

The kernels are first prepared exactly as for code generation (normal form + barriers), then each
one is rewritten into sequential code the reference interpreter runs:

* blocks run one after another, in the order asked for (forward, reverse);
* the threads of a block run in *lock-step phases*: the per-thread body is cut at every barrier, and
  each piece runs for all threads before the next piece starts (loops and ifs whose bounds don't
  depend on the thread stay around the pieces, as they do on the GPU);
* `local` buffers and per-thread `let` values that live across a barrier get one copy per thread;
  `shared` buffers one copy per block; the interpreter fills fresh buffers with garbage, so reading
  shared data before it is written shows up as a wrong answer.

A missing barrier therefore gives the result of a real race in at least one thread order, and
`run_checked` runs two orders (threads and blocks forward, then reversed) and reports a race when
they disagree.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..ast import (
    Allocate, Buffer, BufferLoad, BufferStore, For, IfThenElse, IntImm, LetStmt, Mutator, PrimExpr,
    PrimFunc, SeqStmt, Stmt, Var, collect, free_vars, seq, substitute,
)
from ..ast.expr import as_int
from ..errors import BuildError, RuntimeFailure
from .barriers import contains_barrier, is_barrier
from .kernel import kernel_shape, is_kernel_root
from .prepare import prepare


class RaceDetected(RuntimeFailure):
    """Two legal execution orders of a GPU kernel gave different results."""


def sequentialize(func: PrimFunc, *, reverse_threads: bool = False, reverse_blocks: bool = False) -> PrimFunc:
    """func (prepared: normal form with barriers) as sequential code with lock-step semantics."""
    return func.with_(body=_Sequentializer(func, reverse_threads, reverse_blocks).visit(func.body))


def simulate(func: PrimFunc, *arrays: Any, reverse_threads: bool = False, reverse_blocks: bool = False,
             **scalars: Any) -> None:
    """Run a GPU-scheduled PrimFunc on numpy arrays in place, simulating the launch (module doc)."""
    from ..loops.interpreter import interpret

    program = sequentialize(prepare(func), reverse_threads=reverse_threads, reverse_blocks=reverse_blocks)
    interpret(program, *arrays, **scalars)


def run_checked(func: PrimFunc, *arrays: np.ndarray, **scalars: Any) -> None:
    """simulate in two thread/block orders; raise RaceDetected if the results differ."""
    first = [np.array(a, copy=True) for a in arrays]
    second = [np.array(a, copy=True) for a in arrays]
    simulate(func, *first, **scalars)
    simulate(func, *second, reverse_threads=True, reverse_blocks=True, **scalars)
    names = [p.name for p in func.buffers]
    differing = [names[i] if i < len(names) else str(i)
                 for i, (a, b) in enumerate(zip(first, second))
                 if not np.array_equal(a, b, equal_nan=True)]
    if differing:
        raise RaceDetected(
            f"cuda simulation: buffer(s) {', '.join(differing)} differ between thread orders: the kernel "
            "has a race (a missing barrier, or threads writing the same element)"
        )
    for target, result in zip(arrays, first):
        target[...] = result


class _Sequentializer(Mutator):
    def __init__(self, func: PrimFunc, reverse_threads: bool, reverse_blocks: bool) -> None:
        super().__init__()
        self.func = func
        self.reverse_threads = reverse_threads
        self.reverse_blocks = reverse_blocks

    def visit_For(self, loop: For) -> Stmt:
        if not is_kernel_root(loop):
            return self.generic_visit(loop)
        shape = kernel_shape(loop)
        threads = [(var, extent) for tag, var, extent in shape.axes if tag.startswith("threadIdx")]
        blocks = [(var, extent) for tag, var, extent in shape.axes if tag.startswith("blockIdx")]
        per_thread, shared = hoist_shared_allocations(shape.body)
        body = _Phases(self.func, threads, self.reverse_threads).phases(per_thread)
        for alloc in reversed(shared):  # one copy per block, alive for all of its threads
            body = alloc.with_(body=body)
        for var, extent in reversed(blocks):
            body = _serial_loop(var, extent, body, self.reverse_blocks)
        return body


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


def _serial_loop(var: Var, extent: PrimExpr, body: Stmt, reverse: bool) -> Stmt:
    if reverse:
        index = Var(var.name + "_r", var.dtype)
        body = substitute(body, {var: extent.astype(var.dtype) - 1 - index})
        var = index
    return For(var, IntImm(0, var.dtype), extent.astype(var.dtype), "serial", body)


class _Phases:
    """Cuts a per-thread body at its barriers into pieces run for all threads in turn."""

    def __init__(self, func: PrimFunc, threads: list[tuple[Var, PrimExpr]], reverse: bool) -> None:
        self.func = func
        self.threads = threads
        self.reverse = reverse
        self.varying = {var for var, _ in threads}
        self.count = 1
        for _, extent in threads:
            self.count *= as_int(extent)

    def linear_thread(self) -> PrimExpr:
        index: PrimExpr | None = None
        for var, extent in reversed(self.threads):  # threadIdx.z outermost
            index = var if index is None else index * extent.astype(var.dtype) + var
        return index if index is not None else IntImm(0, "int32")

    def wrap(self, stmt: Stmt) -> Stmt:
        for var, extent in self.threads:  # threadIdx.x innermost
            stmt = _serial_loop(var, extent, stmt, self.reverse)
        return stmt

    def phases(self, stmt: Stmt) -> Stmt:
        if not contains_barrier(stmt):
            return self.wrap(stmt)
        if is_barrier(stmt):
            return seq()  # the boundary itself
        if isinstance(stmt, SeqStmt):
            out: list[Stmt] = []
            group: list[Stmt] = []
            for s in stmt.stmts:
                if contains_barrier(s):
                    if group:
                        out.append(self.wrap(seq(*group)))
                        group = []
                    if not is_barrier(s):
                        out.append(self.phases(s))
                else:
                    group.append(s)
            if group:
                out.append(self.wrap(seq(*group)))
            return seq(*out) if out else SeqStmt(())
        if isinstance(stmt, For):
            self.require_uniform(stmt.min, stmt)
            self.require_uniform(stmt.extent, stmt)
            return stmt.with_(body=self.phases(stmt.body))
        if isinstance(stmt, IfThenElse):
            self.require_uniform(stmt.condition, stmt)
            else_case = self.phases(stmt.else_case) if stmt.else_case is not None else None
            return stmt.with_(then_case=self.phases(stmt.then_case), else_case=else_case)
        if isinstance(stmt, LetStmt):
            return self.let(stmt)
        if isinstance(stmt, Allocate):
            return self.allocate(stmt)
        raise BuildError(f"cuda simulation: a barrier inside a {type(stmt).__name__} is not supported",
                         ir=self.func, spot=stmt)

    def uniform(self, expr: PrimExpr) -> bool:
        return not collect(expr, BufferLoad) and not any(v in self.varying for v in free_vars(expr))

    def require_uniform(self, expr: PrimExpr, stmt: Stmt) -> None:
        if not self.uniform(expr):
            raise BuildError("cuda: a barrier inside divergent control flow", ir=self.func, spot=stmt)

    def let(self, stmt: LetStmt) -> Stmt:
        if self.uniform(stmt.value):
            return stmt.with_(body=self.phases(stmt.body))
        if not collect(stmt.value, BufferLoad):
            # A pure function of the thread index: recompute it in every phase.
            return self.phases(substitute(stmt.body, {stmt.var: stmt.value}))
        private = Buffer(stmt.var.name + "_per_thread", (self.count,), stmt.var.dtype, scope="local")
        slot = self.linear_thread()
        store = BufferStore(private, stmt.value, (slot,))
        body = substitute(stmt.body, {stmt.var: BufferLoad(private, (slot,))})
        return Allocate(private, seq(self.wrap(store), self.phases(body)))

    def allocate(self, stmt: Allocate) -> Stmt:
        buffer = stmt.buffer
        if buffer.scope.startswith("shared"):
            return stmt.with_(body=self.phases(stmt.body))
        # A per-thread buffer alive across a barrier: one copy per thread, side by side.
        size = buffer.shape[0]
        private = buffer.with_(shape=(size * self.count,), name=buffer.name + "_per_thread")
        base = self.linear_thread().astype(size.dtype) * size
        body = _Rebase(buffer, private, base).visit(stmt.body)
        return Allocate(private, self.phases(body))


class _Rebase(Mutator):
    """Accesses to `old[i]` become `new[base + i]`."""

    def __init__(self, old: Buffer, new: Buffer, base: PrimExpr) -> None:
        super().__init__()
        self.old, self.new, self.base = old, new, base

    def visit_BufferLoad(self, load: BufferLoad) -> PrimExpr:
        load = self.generic_visit(load)
        if load.buffer is not self.old:
            return load
        return BufferLoad(self.new, (self.base.astype(load.indices[0].dtype) + load.indices[0],))

    def visit_BufferStore(self, store: BufferStore) -> Stmt:
        store = self.generic_visit(store)
        if store.buffer is not self.old:
            return store
        return BufferStore(self.new, store.value, (self.base.astype(store.indices[0].dtype) + store.indices[0],))
