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
    EQ, LT, Allocate, And, BufferLoad, BufferStore, Call, Evaluate, For, IfThenElse, LetStmt,
    PrimExpr, PrimFunc, SeqStmt, Stmt, StringImm, Var, as_int, collect, free_vars, seq,
)
from ..ast.stmt import AssertStmt
from ..errors import BuildError

SYNC_OP = "tvm_storage_sync"
SYNCED_SCOPES = ("shared", "shared.dyn")


def barrier() -> Stmt:
    """The statement every thread of a block waits at (`__syncthreads()`)."""
    return Evaluate(Call(SYNC_OP, (StringImm("shared"),), "int32"))


def is_uniform(expr: PrimExpr, varying: set[Var]) -> bool:
    """The same value in every thread: no thread-dependent variable and no memory read."""
    return not collect(expr, BufferLoad) and not any(v in varying for v in free_vars(expr))


def is_barrier(stmt: Stmt) -> bool:
    return (isinstance(stmt, Evaluate) and isinstance(stmt.value, Call)
            and stmt.value.op == SYNC_OP)


COLLECTIVE_OPS = (SYNC_OP, "warp_reduce")  # calls every thread (of the block / warp) must reach


def is_collective(call: Call) -> bool:
    """A call every thread (of the block or warp) must reach: barrier, warp shuffle, tensor-core tile."""
    from ..loops.intrin.cuda_wmma import is_warp_collective

    return call.op in COLLECTIVE_OPS or is_warp_collective(call)


def is_collective_extern(stmt: Stmt) -> bool:
    from ..loops.intrin.cuda_wmma import is_warp_collective

    return isinstance(stmt, Evaluate) and is_warp_collective(stmt.value)


def contains_barrier(stmt: Stmt) -> bool:
    """Whether stmt holds a barrier or another collective call (warp shuffle, tensor-core tile)."""
    return any(is_collective(call) for call in collect(stmt, Call))


# An access key: None (other threads may touch the element), or a *thread signature* (the thread
# coefficients, the span S and the constant offset modulo S of an index that is congruent modulo S
# to an injective function of the thread index plus that offset).  Two accesses with one signature
# can only meet in the same thread.
AccessKey = tuple | None
SINGLE_THREAD = ("thread 0",)
Accesses = dict  # Buffer -> set[AccessKey]


@dataclass
class _State:
    written: Accesses = field(default_factory=dict)
    read: Accesses = field(default_factory=dict)

    def copy(self) -> "_State":
        return _State({b: set(k) for b, k in self.written.items()}, {b: set(k) for b, k in self.read.items()})

    def conflicts(self, reads: Accesses, writes: Accesses) -> bool:
        return (_meet(reads, self.written) or _meet(writes, self.read) or _meet(writes, self.written))

    def add(self, reads: Accesses, writes: Accesses) -> None:
        for mine, new in ((self.read, reads), (self.written, writes)):
            for buffer, keys in new.items():
                mine.setdefault(buffer, set()).update(keys)

    def merge(self, other: "_State") -> None:
        self.add(other.read, other.written)


def _meet(a: Accesses, b: Accesses) -> bool:
    """Whether some element may be touched by two different threads through a and b."""
    for buffer in a.keys() & b.keys():
        keys = a[buffer] | b[buffer]
        if None in keys or len(keys) > 1:
            return True
    return False


def thread_signature(index: PrimExpr, threads: dict[Var, int]) -> AccessKey:
    """The thread signature of a scalar index (see AccessKey), or None when it has none."""
    from ..shape.canonical import linear_form

    if index.dtype.lanes != 1 or not threads:
        return None
    form = linear_form(index)
    coefficients: dict[Var, int] = {}
    others: list[int] = []
    for atom, coefficient in form.linear_terms():
        if isinstance(atom, Var) and atom in threads:
            coefficients[atom] = coefficient
        else:
            others.append(coefficient)
    if set(coefficients) != {v for v, extent in threads.items() if extent > 1}:
        return None
    span, order = 1, sorted(coefficients.items(), key=lambda item: item[1])
    reach = 0
    for var, coefficient in order:  # injective on the thread box: each step clears what came before
        if coefficient <= reach:
            return None
        reach += coefficient * (threads[var] - 1)
    span = reach + 1
    if any(c % span for c in others) or len(coefficients) + len(others) != form.term_count():
        return None  # a term that is not a multiple of the span, or not linear
    # The constant offset modulo the span is part of the signature: t and t + 8 may meet in two threads.
    return tuple((id(var), c) for var, c in order) + (span, form.const % span)


def shared_accesses(stmt: Stmt, threads: dict[Var, int] | None = None) -> tuple[Accesses, Accesses]:
    """Shared buffers stmt reads and writes, each with the access keys of its indices."""
    threads = threads or {}
    reads: Accesses = {}
    writes: Accesses = {}
    for load in collect(stmt, BufferLoad):
        if load.buffer.scope in SYNCED_SCOPES:
            key = thread_signature(load.indices[0], threads) if len(load.indices) == 1 else None
            reads.setdefault(load.buffer, set()).add(key)
    for store in collect(stmt, BufferStore):
        if store.buffer.scope in SYNCED_SCOPES:
            key = thread_signature(store.indices[0], threads) if len(store.indices) == 1 else None
            writes.setdefault(store.buffer, set()).add(key)
    return reads, writes


class BarrierPlanner:
    """Inserts the barriers one kernel's per-thread body needs."""

    def __init__(self, func: PrimFunc, thread_vars: tuple[Var, ...],
                 extents: dict[Var, int] | None = None) -> None:
        self.func = func
        self.varying: set[Var] = set(thread_vars)
        self.extents = dict(extents or {})

    def plan(self, body: Stmt) -> Stmt:
        new, _ = self.visit(body, _State())
        return new

    # -- uniformity
    def uniform(self, expr: PrimExpr) -> bool:
        return is_uniform(expr, self.varying)

    # -- walk: returns (new statement, state after it)
    def visit(self, stmt: Stmt, state: _State) -> tuple[Stmt, _State]:
        if is_barrier(stmt):
            return stmt, _State()
        if is_collective_extern(stmt):
            # A warp-collective tile reads and writes memory other threads wrote and will read
            # (through pointers the access analysis does not follow): synchronise on both sides.
            if not all(self.uniform(arg) or isinstance(arg, Call) for arg in stmt.value.args[1:]):
                raise BuildError("cuda: a warp-collective call whose arguments differ between threads",
                                 ir=self.func, spot=stmt)
            return seq(barrier(), stmt, barrier()), _State()
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
        if isinstance(stmt, LetStmt) and (contains_shared(stmt.body) or contains_barrier(stmt)):
            if not self.uniform(stmt.value):
                self.varying.add(stmt.var)
            # The value is evaluated first: its reads count before the body's accesses.
            reads, _ = shared_accesses(Evaluate(stmt.value), self.extents)
            prefix = None
            if state.conflicts(reads, {}):
                state, prefix = _State(), barrier()
            state = state.copy()
            state.add(reads, {})
            body, state = self.visit(stmt.body, state)
            new = stmt.with_(body=body)
            return (seq(prefix, new) if prefix is not None else new), state
        if isinstance(stmt, (Allocate, AssertStmt)) and contains_shared(stmt.body):
            body, state = self.visit(stmt.body, state)
            return stmt.with_(body=body), state
        return self.visit_unit(stmt, state)

    def visit_unit(self, stmt: Stmt, state: _State) -> tuple[Stmt, _State]:
        """A statement treated as a whole: a barrier may go before it, never inside."""
        if contains_barrier(stmt):
            spot = next(c for c in collect(stmt, Call) if is_collective(c))
            raise BuildError(
                "cuda: a barrier inside divergent control flow (a loop bound or condition that "
                "depends on the thread index or on loaded data): threads that skip it would deadlock",
                ir=self.func, spot=spot,
            )
        reads, writes = shared_accesses(stmt, self.extents)
        if self.single_thread(stmt):
            # Only thread 0 runs it: its accesses never meet another thread's among themselves.
            reads = {b: {SINGLE_THREAD} for b in reads}
            writes = {b: {SINGLE_THREAD} for b in writes}
        if state.conflicts(reads, writes):
            state = _State()
            state.add(reads, writes)
            return seq(barrier(), stmt), state
        state = state.copy()
        state.add(reads, writes)
        return stmt, state

    def single_thread(self, stmt: Stmt) -> bool:
        """stmt is `if thread == 0: ...` for every thread axis wider than one (no else)."""
        if not isinstance(stmt, IfThenElse) or stmt.else_case is not None:
            return False
        pinned: set[Var] = set()
        pending = [stmt.condition]
        while pending:
            condition = pending.pop()
            if isinstance(condition, And):
                pending += [condition.a, condition.b]
            elif isinstance(condition, LT) and isinstance(condition.a, Var) and as_int(condition.b) == 1:
                pinned.add(condition.a)
            elif isinstance(condition, EQ) and isinstance(condition.a, Var) and as_int(condition.b) == 0:
                pinned.add(condition.a)
        wide = {var for var, extent in self.extents.items() if extent is None or extent > 1}
        return bool(wide) and wide <= pinned

    def visit_loop(self, loop: For, state: _State) -> tuple[Stmt, _State]:
        reads, writes = shared_accesses(loop.body, self.extents)
        if state.conflicts(reads, writes):
            # One barrier before the loop settles what came before, instead of one per iteration.
            planned, after = self.visit_loop(loop, _State())
            return seq(barrier(), planned), after
        entry = state.copy()
        body, end = self.visit(loop.body, state)
        # The next iteration starts in state `end`: if its first accesses conflict with what the
        # previous iteration left, the body must end with a barrier.
        second, _ = BarrierPlanner(self.func, tuple(self.varying), self.extents).visit(body, end.copy())
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


def plan_barriers(func: PrimFunc, thread_vars: tuple[Var, ...], body: Stmt,
                  extents: dict[Var, int] | None = None) -> Stmt:
    """body of one kernel (per-thread program) with the barriers it needs.

    extents (thread var -> launch extent) lets accesses that provably stay within one thread
    (see thread_signature) go without a barrier; without it every shared access counts.
    """
    return BarrierPlanner(func, thread_vars, extents).plan(body)


__all__ = ["barrier", "is_barrier", "contains_barrier", "plan_barriers", "shared_accesses"]
