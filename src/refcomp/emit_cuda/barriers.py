"""Barrier placement for kernels in normal form (see kernel.py).

A `__syncthreads()` is needed between a write to a shared buffer and a later read or write of it,
and between a read and a later write (the next loop iteration overwriting a tile still being
read).  Barriers are placed only where every thread of the block reaches them: between statements
at the *uniform* level of the per-thread body (sequences, serial loops and ifs whose bounds and
conditions don't depend on the thread index or on per-thread data).  A divergent statement is
treated as one unit: a barrier goes before or after it, never inside.  A barrier the schedule put
inside divergent control flow is an error.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ast import (
    Allocate, Buffer, BufferLoad, BufferStore, Call, Evaluate, For, IfThenElse, LetStmt, PrimExpr,
    PrimFunc, SeqStmt, Stmt, StringImm, Var, collect, free_vars, seq,
)
from ..ast.stmt import AssertStmt
from ..errors import BuildError

SYNC_OP = "tvm_storage_sync"
SYNCED_SCOPES = ("shared", "shared.dyn")


def barrier() -> Stmt:
    """The statement every thread of a block waits at (`__syncthreads()`)."""
    return Evaluate(Call(SYNC_OP, (StringImm("shared"),), "int32"))


def is_barrier(stmt: Stmt) -> bool:
    return (isinstance(stmt, Evaluate) and isinstance(stmt.value, Call)
            and stmt.value.op == SYNC_OP)


def contains_barrier(stmt: Stmt) -> bool:
    return any(call.op == SYNC_OP for call in collect(stmt, Call))


@dataclass
class _State:
    written: set[Buffer] = field(default_factory=set)
    read: set[Buffer] = field(default_factory=set)

    def copy(self) -> "_State":
        return _State(set(self.written), set(self.read))

    def conflicts(self, reads: set[Buffer], writes: set[Buffer]) -> bool:
        return bool(reads & self.written or writes & self.read or writes & self.written)

    def add(self, reads: set[Buffer], writes: set[Buffer]) -> None:
        self.read |= reads
        self.written |= writes

    def merge(self, other: "_State") -> None:
        self.add(other.read, other.written)


def shared_accesses(stmt: Stmt) -> tuple[set[Buffer], set[Buffer]]:
    """Shared buffers stmt reads, and those it writes."""
    reads = {load.buffer for load in collect(stmt, BufferLoad) if load.buffer.scope in SYNCED_SCOPES}
    writes = {store.buffer for store in collect(stmt, BufferStore) if store.buffer.scope in SYNCED_SCOPES}
    return reads, writes


class BarrierPlanner:
    """Inserts the barriers one kernel's per-thread body needs."""

    def __init__(self, func: PrimFunc, thread_vars: tuple[Var, ...]) -> None:
        self.func = func
        self.varying: set[Var] = set(thread_vars)

    def plan(self, body: Stmt) -> Stmt:
        new, _ = self.visit(body, _State())
        return new

    # -- uniformity
    def uniform(self, expr: PrimExpr) -> bool:
        if collect(expr, BufferLoad):
            return False
        return not any(v in self.varying for v in free_vars(expr))

    # -- walk: returns (new statement, state after it)
    def visit(self, stmt: Stmt, state: _State) -> tuple[Stmt, _State]:
        if is_barrier(stmt):
            return stmt, _State()
        if isinstance(stmt, SeqStmt):
            out = []
            for s in stmt.stmts:
                new, state = self.visit(s, state)
                out.append(new)
            return seq(*out), state
        if isinstance(stmt, For) and stmt.kind != "thread_binding" and self.uniform(stmt.min) \
                and self.uniform(stmt.extent) and contains_shared(stmt.body):
            return self.visit_loop(stmt, state)
        if isinstance(stmt, IfThenElse) and self.uniform(stmt.condition) and contains_shared(stmt):
            then_case, then_state = self.visit(stmt.then_case, state.copy())
            if stmt.else_case is not None:
                else_case, else_state = self.visit(stmt.else_case, state.copy())
            else:
                else_case, else_state = None, state
            then_state.merge(else_state)
            return stmt.with_(then_case=then_case, else_case=else_case), then_state
        if isinstance(stmt, LetStmt) and contains_shared(stmt.body):
            if not self.uniform(stmt.value):
                self.varying.add(stmt.var)
            body, state = self.visit(stmt.body, state)
            return stmt.with_(body=body), state
        if isinstance(stmt, (Allocate, AssertStmt)) and contains_shared(stmt.body):
            body, state = self.visit(stmt.body, state)
            return stmt.with_(body=body), state
        return self.visit_unit(stmt, state)

    def visit_unit(self, stmt: Stmt, state: _State) -> tuple[Stmt, _State]:
        """A statement treated as a whole: a barrier may go before it, never inside."""
        if contains_barrier(stmt):
            spot = next(c for c in collect(stmt, Call) if c.op == SYNC_OP)
            raise BuildError(
                "cuda: a barrier inside divergent control flow (a loop bound or condition that "
                "depends on the thread index or on loaded data): threads that skip it would deadlock",
                ir=self.func, spot=spot,
            )
        reads, writes = shared_accesses(stmt)
        if state.conflicts(reads, writes):
            state = _State()
            state.add(reads, writes)
            return seq(barrier(), stmt), state
        state = state.copy()
        state.add(reads, writes)
        return stmt, state

    def visit_loop(self, loop: For, state: _State) -> tuple[Stmt, _State]:
        entry = state.copy()
        body, end = self.visit(loop.body, state)
        # The next iteration starts in state `end`: if its first accesses conflict with what the
        # previous iteration left, the body must end with a barrier.
        second, _ = BarrierPlanner(self.func, tuple(self.varying)).visit(body, end.copy())
        if _barrier_count(second) > _barrier_count(body):
            body = seq(body, barrier())
            end = _State()
        after = entry
        after.merge(end)  # zero iterations leave the entry state
        return loop.with_(body=body), after


def _barrier_count(stmt: Stmt) -> int:
    return sum(1 for call in collect(stmt, Call) if call.op == SYNC_OP)


def contains_shared(stmt: Stmt) -> bool:
    reads, writes = shared_accesses(stmt)
    return bool(reads or writes) or contains_barrier(stmt)


def plan_barriers(func: PrimFunc, thread_vars: tuple[Var, ...], body: Stmt) -> Stmt:
    """body of one kernel (per-thread program) with the barriers it needs."""
    return BarrierPlanner(func, thread_vars).plan(body)


__all__ = ["barrier", "is_barrier", "contains_barrier", "plan_barriers", "shared_accesses"]
