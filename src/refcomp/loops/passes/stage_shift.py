"""Pass `shift_stages`: software pipelining across the iterations of a loop (a stage shift).

Requires: flat buffers (after `flatten_buffers`), blocks lowered.
Guarantees: the same behaviour; every For annotated {STAGE_SHIFT: True} rewritten as below (the
annotation dropped), or a ScheduleError naming the loop and the precondition it fails; every For
annotated {STAGE_SHIFT: STAGE_SHIFT_ADVISORY} rewritten the same where it meets the preconditions,
else left as it is, the annotation dropped either way.

A loop whose body is a sequence of stages S_0 .. S_k (under the Allocates of its per-iteration
buffers), the last stage S_k and an earlier one S_j both loops over the same range, runs S_k of
iteration r - 1 inside S_j's loop of iteration r (one loop body holds both; spec/schedule.md):

    for r in [m, m + n):                 S_0..S_k-1 (r = m)
        S_0 .. S_j-1 (r)          ->     for r in [m + 1, m + n):
        for c: A(r, c)                       S_0 .. S_j-1 (r)
        S_j+1 .. S_k-1 (r)                   for c: A(r, c); B(r - 1, c)
        for c: B(r, c)                       S_j+1 .. S_k-1 (r)
                                         S_k (r = m + n - 1)

so what S_k does (a row's streaming stores) overlaps with what S_j does (the next row's
arithmetic).  In the fused loop S_k's step comes first: B(r - 1, c) reads before A(r, c) writes;
where both steps are one store, A's loads (of buffers B does not write) are bound before B's store
(`loads_first`: a load that follows a store to the same offset in another page waits for it).
The Allocates move out of the loop (their contents now live from one iteration to the next).  A
buffer that S_0 .. S_j write and S_k reads (softmax's row of exponentials) stays one buffer when
its reuse is proved in place (`in_place`: only S_j writes it, and no write of A(r, c') reaches an
element that B(r - 1, c) reads for c' < c: each step of the fused loop reads its part of row r - 1
before overwriting it with row r's); otherwise it gets two versions, the one of iteration r at
offset ((r - m) mod 2) * size.  S_j is the last stage before S_k that loops over the same range
(the same min and extent).

Preconditions (each a named check):
  - `check_serial`: the loop is serial (a parallel loop's iterations have no order to shift);
  - `check_stages`: its body (under Allocates) is a sequence whose last stage is a For, with an
    earlier For of the same min and extent, and no Allocate's size depends on the loop var;
  - `check_no_opaque_calls`: no stage involved evaluates a call other than `prefetch` (an opaque
    call may touch any memory; a prefetch hint reads and writes nothing);
  - `check_shift_dependences`: S_k writes no buffer that S_0 .. S_j read or write, and every
    buffer that S_0 .. S_j write and S_k reads is allocated in the loop body, and is reused in
    place or is one-dimensional of constant size (two versions).
Together these make S_k(r - 1) independent of S_0 .. S_j(r), the only statements it moves past.

The two forms of the mark: a user's (True, through `Schedule.annotate`) is a demand, so a loop
that fails a precondition is an error the user sees; a default schedule's (STAGE_SHIFT_ADVISORY,
the row-reduction rule's) is a request, so the rule need not know the lowering's preconditions
(nor lower the function to find out) and the loop it marks is shifted where they hold.
"""
from __future__ import annotations

import dataclasses

from ...ast import (
    EQ, LT, Allocate, And, BufferLoad, BufferStore, Call, Evaluate, For, IfThenElse, IntImm, Let, LetStmt, Mutator,
    Not, PrimExpr, PrimFunc, SeqStmt, Stmt, Var, collect, substitute,
)
from ...ast.functor import uses_var
from ...ast.expr import as_int, floormod
from ...ast.stmt import STAGE_SHIFT, STAGE_SHIFT_ADVISORY
from ...ast.structural import structural_equal
from ...errors import ScheduleError


def shift_stages(func: PrimFunc) -> PrimFunc:
    """func with every For annotated STAGE_SHIFT pipelined (see the module docstring); an advisory
    mark on a loop that fails a precondition is dropped, the loop left unshifted."""
    body = _Shifter().visit(func.body)
    return func if body is func.body else func.with_(body=body)


class _Shifter(Mutator):
    def visit_For(self, loop: For) -> Stmt:
        loop = self.generic_visit(loop)
        mark = (loop.annotations or {}).get(STAGE_SHIFT)
        if not mark:
            return loop
        if mark != STAGE_SHIFT_ADVISORY:
            return shift_loop(loop)
        try:
            return shift_loop(loop)
        except ScheduleError:
            return _unmarked(loop)


def _unmarked(loop: For) -> For:
    """loop without its STAGE_SHIFT annotation (other annotations kept)."""
    annotations = {key: value for key, value in loop.annotations.items() if key != STAGE_SHIFT}
    return loop.with_(annotations=annotations or None)


def _fail(loop: For, why: str) -> ScheduleError:
    return ScheduleError(f"stage_shift: loop {loop.loop_var.name}: {why}")


def check_serial(loop: For) -> None:
    if loop.kind != "serial":
        raise _fail(loop, f"is {loop.kind}; only a serial loop's iterations can be shifted")


def check_stages(loop: For) -> tuple[list, list[Stmt], int]:
    """(the Allocates around the stages, outermost first; the stages; the index j of S_j)."""
    allocs, body = [], loop.body
    while isinstance(body, Allocate):
        allocs.append(body)
        body = body.body
    if not isinstance(body, SeqStmt) or len(body.stmts) < 2:
        raise _fail(loop, "its body is not a sequence of stages")
    stages = list(body.stmts)
    last = stages[-1]
    if not isinstance(last, For) or last.kind != "serial":
        raise _fail(loop, "its last stage is not a serial loop")
    j = next((k for k in range(len(stages) - 2, -1, -1) if isinstance(stages[k], For)
              and stages[k].kind == "serial" and structural_equal(stages[k].extent, last.extent)
              and structural_equal(stages[k].min, last.min)), None)
    if j is None:
        raise _fail(loop, f"no earlier stage is a serial loop over the last stage's range "
                          f"[{last.min}, {last.min} + {last.extent})")
    for alloc in allocs:
        if any(uses_var(d, loop.loop_var) for d in alloc.buffer.shape):
            raise _fail(loop, f"the size of {alloc.buffer.name} depends on {loop.loop_var.name}")
    return allocs, stages, j


def check_no_opaque_calls(loop: For, stages: list[Stmt]) -> None:
    for stage in stages:
        for ev in collect(stage, Evaluate):
            if not (isinstance(ev.value, Call) and ev.value.op == "prefetch") and not isinstance(ev.value, IntImm):
                raise _fail(loop, f"a stage evaluates {ev.value}, which may touch any memory")


class _NoHints(Mutator):
    """The statement without its `prefetch` hints: a hint reads and writes nothing."""

    def visit_Evaluate(self, ev: Evaluate):
        if isinstance(ev.value, Call) and ev.value.op == "prefetch":
            return Evaluate(IntImm(0, "int32"))
        return ev


def _reads(stmt) -> set:
    return {load.buffer for load in collect(_NoHints().visit(stmt), BufferLoad)}


def _writes(stmt) -> set:
    return {store.buffer for store in collect(stmt, BufferStore)}


def check_shift_dependences(loop: For, allocs: list, stages: list[Stmt], j: int) -> set:
    """The buffers to give two versions (S_0 .. S_j write them, S_k reads them, no in-place reuse)."""
    early = SeqStmt(tuple(stages[:j + 1]))
    last = stages[-1]
    clash = _writes(last) & (_reads(early) | _writes(early))
    if clash:
        raise _fail(loop, f"the last stage writes {_names(clash)}, which the stages it would run beside "
                          f"read or write")
    shared = _writes(early) & _reads(last)
    local = {alloc.buffer for alloc in allocs}
    outside = shared - local
    if outside:
        raise _fail(loop, f"{_names(outside)} written before and read by the last stage is not allocated "
                          f"in the loop body, so it cannot be given a version per iteration")
    before = _writes(SeqStmt(tuple(stages[:j]))) if j else set()
    versioned = {b for b in shared if b in before or not in_place(loop, stages[j], last, b)}
    flat = {b for b in versioned if len(b.shape) != 1 or as_int(b.shape[0]) is None}
    if flat:
        raise _fail(loop, f"{_names(flat)} is not a one-dimensional buffer of constant size")
    return versioned


def _names(buffers) -> str:
    return ", ".join(sorted(b.name for b in buffers))


def _accesses(stmt, kind, buffer, loops=()) -> list:
    """(indices, enclosing loops inside stmt) of each `kind` (BufferStore or BufferLoad) of buffer
    in stmt, prefetch hints left out."""
    found = []
    if isinstance(stmt, For):
        return _accesses(stmt.body, kind, buffer, loops + (stmt,))
    if isinstance(stmt, SeqStmt):
        for item in stmt.stmts:
            found += _accesses(item, kind, buffer, loops)
        return found
    if isinstance(stmt, IfThenElse):
        found = _accesses(stmt.then_case, kind, buffer, loops)
        return found + (_accesses(stmt.else_case, kind, buffer, loops) if stmt.else_case is not None else [])
    if isinstance(stmt, Allocate):
        return _accesses(stmt.body, kind, buffer, loops)
    if kind is BufferStore and isinstance(stmt, BufferStore):
        return [(stmt.indices, loops)] if stmt.buffer is buffer else []
    if kind is BufferLoad:
        return [(load.indices, loops) for load in collect(_NoHints().visit(stmt), BufferLoad) if load.buffer is buffer]
    return [(None, loops)] if collect(stmt, BufferStore) else []  # a store under another statement: unknown


def in_place(loop: For, a: For, b: For, buffer) -> bool:
    """True when the fused loop may keep one `buffer` that A (S_j's loop) writes and B (S_k's loop,
    one iteration of `loop` late) reads: proved that no store of A at step c' reaches an element
    that B loads at a later step c (c' < c), so every step reads its elements of the previous
    iteration before any step overwrites them.  Unknown is False (two versions instead)."""
    from ...shape import prove

    r = loop.loop_var
    late = Var(b.loop_var.name + "_late", b.loop_var.dtype)
    stores = _accesses(a, BufferStore, buffer)
    loads = _accesses(b, BufferLoad, buffer)
    if not stores or any(indices is None for indices, _ in stores):
        return False
    one = IntImm(1, r.dtype)
    for store, store_loops in stores:
        for load, load_loops in loads:
            if len(store) != len(load):
                return False
            shifted = [substitute(i, {b.loop_var: late, r: r - one}) for i in load]
            same = EQ(store[0], shifted[0])
            for x, y in zip(store[1:], shifted[1:]):
                same = And(same, EQ(x, y))
            facts = [r >= loop.min + one, r < loop.min + loop.extent, late >= b.min, late < b.min + b.extent]
            for inner in store_loops + tuple(load_loops[1:]):
                facts += [inner.loop_var >= inner.min, inner.loop_var < inner.min + inner.extent]
            if not prove(Not(And(LT(a.loop_var, late), same)), assumptions=facts):
                return False
    return True


class _Version(Mutator):
    """Accesses of each buffer in `versions` redirected to its doubled buffer at offset `offset`."""

    def __init__(self, versions: dict, offset) -> None:
        super().__init__()
        self.versions, self.offset = versions, offset

    def _index(self, buffer, indices):
        size = buffer.shape[0]
        return (self.visit(indices[0]) + self.offset * size,)

    def visit_BufferLoad(self, load: BufferLoad):
        if load.buffer not in self.versions:
            return self.generic_visit(load)
        return load.with_(buffer=self.versions[load.buffer], indices=self._index(load.buffer, load.indices))

    def visit_BufferStore(self, store: BufferStore):
        if store.buffer not in self.versions:
            return self.generic_visit(store)
        return store.with_(buffer=self.versions[store.buffer], value=self.visit(store.value),
                           indices=self._index(store.buffer, store.indices))


def _plus(a, b):
    """a + b, folded when both are constants."""
    x, y = as_int(a), as_int(b)
    if x is not None and y is not None:
        return IntImm(x + y, a.dtype)
    return a + b


def loads_first(late: Stmt, early: Stmt) -> Stmt:
    """SeqStmt((late, early)) -- one step of the fused loop: S_k's step of iteration r - 1, then
    S_j's of iteration r -- with early's loads issued before late's store where both are one
    store (under the same loops, after early's hints): those loads bound by LetStmts first.

    Same values: late writes no buffer early reads (check_shift_dependences), so a load gives the
    same value before late's store as after it; loads under a Let or an `if_then_else` (a guarded
    load that may not be in bounds when its guard fails) stay where they are.  The order is for the
    CPU: a row kernel's output row r - 1 and input row r lie a row apart, and where the output and
    input arrays start at the same offset in their pages (numpy's large arrays do) a store and the
    next load share their address's low 12 bits; a load that follows such a store waits for it
    (4K aliasing), one that precedes it does not."""
    if isinstance(early, SeqStmt) and len(early.stmts) > 1 and all(_is_hint(st) for st in early.stmts[:-1]):
        return SeqStmt(tuple(early.stmts[:-1]) + (loads_first(late, early.stmts[-1]),))
    if (isinstance(early, For) and isinstance(late, For) and early.kind == late.kind
            and structural_equal(early.min, late.min) and structural_equal(early.extent, late.extent)
            and early.annotations == late.annotations):
        late_body = substitute(late.body, {late.loop_var: early.loop_var})
        if _steps_interleave(late_body, early.body, early.loop_var):
            inner = loads_first(late_body, early.body)
            if not (isinstance(inner, SeqStmt) and len(inner.stmts) == 2 and inner.stmts[1] is early.body):
                return early.with_(body=inner)
    if isinstance(early, BufferStore) and isinstance(late, BufferStore):
        loads = _hoistable_loads(early.value, {late.buffer})
        if loads:
            bound = [(Var(f"{load.buffer.name}_next", load.dtype), load) for load in loads]
            value = _Replace([(load, var) for var, load in bound]).visit(early.value)
            body: Stmt = SeqStmt((late, early.with_(value=value)))
            for var, load in reversed(bound):
                body = LetStmt(var, load, body)
            return body
    return SeqStmt((late, early))


def _steps_interleave(late: Stmt, early: Stmt, var: Var) -> bool:
    """Whether `for v: late(v)` then `for v: early(v)` may run as `for v: {late(v); early(v)}`:
    both one store, and every load of late from the buffer early writes reads the element early
    writes at the same v, at an index that moves by a non-zero constant per step of v (so no
    other step of early writes it).  Late writes nothing early touches (check_shift_dependences)."""
    from ...shape.simplify import simplify_expr

    if not (isinstance(late, BufferStore) and isinstance(early, BufferStore)):
        return False
    for load in collect(late.value, BufferLoad):
        if load.buffer is not early.buffer:
            continue
        if len(load.indices) != len(early.indices) or not all(
                structural_equal(a, b) for a, b in zip(load.indices, early.indices)):
            return False
        steps = [as_int(simplify_expr(substitute(i, {var: var + IntImm(1, var.dtype)}) - i)) for i in load.indices]
        if not any(step for step in steps):
            return False
    return True


def _is_hint(stmt: Stmt) -> bool:
    return isinstance(stmt, Evaluate) and isinstance(stmt.value, Call) and stmt.value.op == "prefetch"


def _hoistable_loads(value, written: set) -> list:
    """The distinct loads of value (structurally) outside Lets and `if_then_else` calls, of buffers
    not in `written`, in the order they are met."""
    found: list = []

    def walk(node) -> None:
        if isinstance(node, Let) or (isinstance(node, Call) and node.op == "if_then_else"):
            return
        if isinstance(node, BufferLoad):
            if node.buffer not in written and not any(structural_equal(node, seen) for seen in found):
                found.append(node)
            return
        for field in dataclasses.fields(node):
            child = getattr(node, field.name)
            for item in (child if isinstance(child, tuple) else (child,)):
                if isinstance(item, PrimExpr):
                    walk(item)

    walk(value)
    return found


class _Replace(Mutator):
    """Each load structurally equal to one of `pairs` replaced by its var."""

    def __init__(self, pairs: list) -> None:
        super().__init__()
        self.pairs = pairs

    def visit_BufferLoad(self, load: BufferLoad):
        for old, var in self.pairs:
            if structural_equal(load, old):
                return var
        return self.generic_visit(load)


def shift_loop(loop: For) -> Stmt:
    """The rewrite of one annotated loop (see the module docstring); checks first."""
    check_serial(loop)
    allocs, stages, j = check_stages(loop)
    check_no_opaque_calls(loop, stages[:j + 1] + stages[-1:])
    versioned = check_shift_dependences(loop, allocs, stages, j)
    r, first, count = loop.loop_var, loop.min, loop.extent
    one = IntImm(1, r.dtype)
    versions = {b: b.with_(shape=(IntImm(2 * as_int(b.shape[0]), b.shape[0].dtype),)) for b in versioned}
    stages = [_Version(versions, floormod(r - first, IntImm(2, r.dtype))).visit(s) for s in stages]
    k = len(stages) - 1
    at = lambda stmt, value: substitute(stmt, {r: value})  # noqa: E731
    prologue = [at(s, first) for s in stages[:k]]
    a, b = stages[j], stages[k]
    late = substitute(b.body, {r: r - one, b.loop_var: a.loop_var})
    fused = a.with_(body=loads_first(late, a.body))
    steady_body = SeqStmt(tuple(stages[:j] + [fused] + stages[j + 1:k]))
    steady = For(r, _plus(first, 1), _plus(count, -1), "serial", steady_body,
                 annotations=_unmarked(loop).annotations or None)
    epilogue = at(b, _plus(_plus(first, count), -1))
    body: Stmt = SeqStmt(tuple(prologue + [steady, epilogue]))
    if as_int(count) is None or as_int(count) < 1:
        body = IfThenElse(count >= one, body)
    for alloc in reversed(allocs):
        body = alloc.with_(buffer=versions.get(alloc.buffer, alloc.buffer), body=body)
    return body
