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
    Allocate, AssertStmt, Buffer, BufferLoad, BufferStore, Call, For, IfThenElse, IntImm, LetStmt, Mutator,
    PrimExpr, PrimFunc, Select, SeqStmt, Stmt, Var, collect, seq, substitute,
)
from ..ast.expr import as_int, max_, min_
from ..errors import BuildError, RuntimeFailure
from .barriers import contains_barrier, is_barrier, is_collective_extern, is_uniform
from .kernel import hoist_shared_allocations, is_kernel_root, kernel_shape
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
    try:
        simulate(func, *first, **scalars)
        simulate(func, *second, reverse_threads=True, reverse_blocks=True, **scalars)
    except RuntimeFailure as failure:
        if "race:" in str(failure):
            raise RaceDetected(f"cuda simulation: {failure.message.removeprefix('assertion failed: ')}",
                               ir=failure.ir, spot=failure.spot) from None
        raise
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
        phases = _Phases(self.func, threads, self.reverse_threads)
        body = phases.phases(per_thread)
        for shadow in phases.races.allocations():
            body = Allocate(shadow, body)
        for alloc in reversed(shared):  # one copy per block, alive for all of its threads
            body = alloc.with_(body=body)
        for var, extent in reversed(blocks):
            body = _serial_loop(var, extent, body, self.reverse_blocks)
        return body


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
        self.races = RaceShadows()
        self.count = 1
        for _, extent in threads:
            self.count *= as_int(extent)

    def linear_thread(self) -> PrimExpr:
        index: PrimExpr | None = None
        for var, extent in reversed(self.threads):  # threadIdx.z outermost
            index = var if index is None else index * extent.astype(var.dtype) + var
        return index if index is not None else IntImm(0, "int32")

    def wrap(self, stmt: Stmt) -> Stmt:
        """One phase: stmt run by every thread in turn, with its accesses checked for races."""
        checked, reset = self.races.instrument(stmt, self.linear_thread())
        for var, extent in self.threads:  # threadIdx.x innermost
            checked = _serial_loop(var, extent, checked, self.reverse)
        return seq(reset, checked) if reset is not None else checked

    def phases(self, stmt: Stmt) -> Stmt:
        if not contains_barrier(stmt):
            return self.wrap(stmt)
        if is_barrier(stmt):
            return seq()  # the boundary itself
        if is_collective_extern(stmt):
            # One warp computes the tile once, between two phases.
            from ..loops.intrin.cuda_wmma import WARP_COLLECTIVE

            if len(self.threads) != 1 or as_int(self.threads[0][1]) != 32:
                raise BuildError("cuda: a warp-collective tile needs a block of exactly one warp along "
                                 "threadIdx.x", ir=self.func, spot=stmt)
            return WARP_COLLECTIVE[stmt.value.args[0].value](stmt.value)
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
        return is_uniform(expr, self.varying)

    def require_uniform(self, expr: PrimExpr, stmt: Stmt) -> None:
        if not self.uniform(expr):
            raise BuildError("cuda: a barrier inside divergent control flow", ir=self.func, spot=stmt)

    def let(self, stmt: LetStmt) -> Stmt:
        if isinstance(stmt.value, Call) and stmt.value.op == "warp_reduce":
            return self.warp_reduce(stmt)
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

    def warp_reduce(self, stmt: LetStmt) -> Stmt:
        """let r = warp_reduce(op, v): every thread's v in one phase, their reduction, then the body."""
        op, value, width = stmt.value.args
        count = as_int(width)
        if len(self.threads) != 1 or as_int(self.threads[0][1]) != count:
            raise BuildError(f"cuda simulation: warp_reduce over {width} lanes needs a block of exactly {width} "
                             "threads along threadIdx.x", ir=self.func, spot=stmt)
        lanes = Buffer(stmt.var.name + "_lanes", (count,), value.dtype, scope="shared")
        total = Buffer(stmt.var.name + "_total", (1,), value.dtype, scope="shared")
        lane = self.threads[0][0]
        gather = self.wrap(BufferStore(lanes, value, (lane.astype("int32"),)))
        k = Var("lane", "int32")
        combine = {"sum": lambda a, b: a + b, "max": max_, "min": min_}[op.value]
        fold = seq(BufferStore(total, BufferLoad(lanes, (IntImm(0, "int32"),)), (IntImm(0, "int32"),)),
                   For(k, IntImm(1, "int32"), IntImm(count - 1, "int32"), "serial",
                       BufferStore(total, combine(BufferLoad(total, (IntImm(0, "int32"),)),
                                                  BufferLoad(lanes, (k,))), (IntImm(0, "int32"),))))
        body = substitute(stmt.body, {stmt.var: BufferLoad(total, (IntImm(0, "int32"),))})
        return Allocate(lanes, Allocate(total, seq(gather, fold, self.phases(body))))

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


class RaceShadows:
    """Shadow memory that makes the simulation detect data races inside one phase.

    For every buffer written in a phase, `<name>_writer[i]` holds the thread that wrote element i
    in this phase (-1: nobody) and `<name>_reader[i]` the thread that read it (-2: several).  Each
    store first asserts that no *other* thread wrote or read the element in the phase, each load
    (in a stored value or index) that no other thread wrote it; the shadows are reset when a phase
    starts.  A failed assertion names the buffer: RaceDetected.
    """

    def __init__(self) -> None:
        self.shadows: dict[Buffer, tuple[Buffer, Buffer]] = {}

    def allocations(self) -> list[Buffer]:
        return [b for pair in self.shadows.values() for b in pair]

    def shadow(self, buffer: Buffer) -> tuple[Buffer, Buffer]:
        if buffer not in self.shadows:
            size = buffer.shape[0]
            self.shadows[buffer] = (Buffer(buffer.name + "_writer", (size,), "int32", scope="local"),
                                    Buffer(buffer.name + "_reader", (size,), "int32", scope="local"))
        return self.shadows[buffer]

    def instrument(self, stmt: Stmt, thread: PrimExpr) -> tuple[Stmt, Stmt | None]:
        stores = [st for st in collect(stmt, BufferStore)
                  if st.indices[0].dtype.lanes == 1 and st.value.dtype.lanes == 1 and len(st.indices) == 1]
        written = {st.buffer for st in stores if not st.buffer.scope.startswith("local")}
        if not written:
            return stmt, None
        thread = thread.astype("int32")
        resets = []
        for buffer in written:
            writer, reader = self.shadow(buffer)
            slot = Var("slot", buffer.shape[0].dtype)
            resets.append(For(slot, IntImm(0, slot.dtype), buffer.shape[0], "serial",
                              seq(BufferStore(writer, IntImm(-1, "int32"), (slot,)),
                                  BufferStore(reader, IntImm(-1, "int32"), (slot,)))))
        return _RaceChecks(self, written, thread).visit(stmt), seq(*resets)


class _RaceChecks(Mutator):
    def __init__(self, shadows: RaceShadows, written: set[Buffer], thread: PrimExpr) -> None:
        super().__init__()
        self.shadows, self.written, self.thread = shadows, written, thread

    def free(self, shadow: Buffer, index: PrimExpr) -> PrimExpr:
        owner = BufferLoad(shadow, (index,))
        return (owner == -1) | (owner == self.thread)

    def visit_BufferStore(self, store: BufferStore) -> Stmt:
        if store.buffer not in self.written or store.indices[0].dtype.lanes != 1 or store.value.dtype.lanes != 1:
            return store
        checks: list[Stmt] = []
        loads = [load for load in collect(store.value, BufferLoad) + collect(store.indices[0], BufferLoad)
                 if load.buffer in self.written and load.dtype.lanes == 1 and len(load.indices) == 1
                 and not _under_lazy_branch(store, load)]
        for load in loads:
            writer, reader = self.shadows.shadow(load.buffer)
            index = load.indices[0]
            checks.append(AssertStmt(self.free(writer, index),
                                     f"race: a thread reads {load.buffer.name} where another thread wrote in "
                                     "the same phase (a barrier is missing)", SeqStmt(())))
            old = BufferLoad(reader, (index,))
            mark = Select((old == -1) | (old == self.thread), self.thread, IntImm(-2, "int32"))
            checks.append(BufferStore(reader, mark, (index,)))
        writer, reader = self.shadows.shadow(store.buffer)
        index = store.indices[0]
        checks.append(AssertStmt(self.free(writer, index),
                                 f"race: two threads write one element of {store.buffer.name} in the same phase",
                                 SeqStmt(())))
        checks.append(AssertStmt(self.free(reader, index),
                                 f"race: a thread writes {store.buffer.name} where another thread read in the "
                                 "same phase (a barrier is missing)", SeqStmt(())))
        checks.append(BufferStore(writer, self.thread, (index,)))
        return seq(*checks, store)


def _under_lazy_branch(store: BufferStore, load: BufferLoad) -> bool:
    """Whether load sits inside a branch of if_then_else (evaluated only sometimes)."""
    from ..ast import Call

    for call in collect(store.value, Call):
        if call.op == "if_then_else" and any(l is load for arm in call.args[1:] for l in collect(arm, BufferLoad)):
            return True
    return False


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
