"""Place scratch allocations where they are used and shrink them to the part used there.

A `cache_write` (or `cache_read`) stage allocates a buffer the size of the whole tensor, but when
it is computed at a loop each iteration only uses a tile of it: `acc[y, x0 * 14 + t, c]` for
`0 <= t < 14`.  `BufferCompactor` first moves each allocation it is asked to (by scope) down to the
innermost statement that holds every access of its buffer (through any loop but a GPU thread
binding: one buffer per iteration), then splits every index of the buffer, dimension by dimension,
into a *base* fixed where the allocation now stands (the loops around it, a GPU block's thread
indices) and an *offset* over the loops inside it.  When all accesses share one base and the
offsets have constant bounds [lo, hi], the dimension becomes `hi - lo + 1` long and each index
`offset - lo`; other dimensions keep their extent.

Moving below a loop gives each iteration its own buffer: right for a tile that each iteration
writes before it reads it (a cache stage under compute_at or reverse_compute_at, the only way such
buffers arise from schedules).

A buffer whose address escapes (`address_of(P[...])` handed to a tensorized micro-kernel) is
read or written by the callee over a region the accesses here do not show, with strides fixed
when the tile was tensorized.  Such a buffer is shrunk only in a leading run of dimensions that
every access, plain or by address, indexes at the one base (`P[j0, k0, ...]` with j0, k0 fixed
where the buffer is allocated): those become 1 long, which changes no stride the callee uses, and
the callee's region, filled by the plain stores of the copy that writes the buffer, has extent 1
there, or where a relocatable call (below) is handed its address: such a tensor intrinsic
reaches only the tile its tensorized block declared, whose leading indices are those of the
addresses it is given.  Without either (another callee writes the buffer) it keeps its shape.  A call
the function lists in its `relocatable_calls` attribute (a tensor intrinsic that takes every
operand by address and its strides as distances between addresses: the tile transposes) does not
count as an escape for a buffer that also has plain accesses; those show the region it works on.  The C target runs it on "local" buffers
(`compact_local_buffers`): a tile under a parallel loop becomes a per-thread stack array the C
compiler keeps in registers; the CUDA target on its on-chip scopes, per kernel.
"""
from __future__ import annotations

from typing import Callable

from ...ast import (
    EQ, LT, Allocate, Buffer, BufferLoad, BufferStore, Call, For, IfThenElse, IntImm, LetStmt, Mutator, PrimExpr,
    PrimFunc, SeqStmt, Stmt, Var, collect, free_vars,
)
from ...ast.expr import as_int
from ...ast.intrinsics import address_accesses
from ...ast.structural import structural_equal
from ...shape.canonical import linear_form


def compact_local_buffers(func: PrimFunc) -> PrimFunc:
    """func with each "local" allocation placed where its buffer is used and shrunk to the part
    used there (module doc).  A lowering pass of the C target: runs after lower_blocks."""
    relocatable = frozenset(func.attrs.get("relocatable_calls", ()))
    return func.with_(body=BufferCompactor({}, set(), lambda scope: scope == "local", relocatable,
                                             func.attrs).visit(func.body))


class BufferCompactor(Mutator):
    """Places and shrinks the allocations whose scope `movable` accepts (module doc); `ranges` are
    the (min, extent) of variables bound outside the visited statement, `threads` the variables
    fixed for one thread (part of the base of a per-thread buffer)."""

    def __init__(self, ranges: dict[Var, tuple[int, int | None]], threads: set[Var],
                 movable: Callable[[str], bool], relocatable: frozenset = frozenset(), attrs=None) -> None:
        super().__init__()
        self.attrs = attrs  # the function's, for the declared access of tensor intrinsic operands
        self.movable = movable
        self.relocatable = relocatable  # C functions whose address arguments do not pin a shape
        self.ranges = dict(ranges)  # var -> (min, extent) with constant ints where known
        self.threads = threads  # fixed for one thread: part of the base of a per-thread buffer
        self.placed: set[Buffer] = set()  # allocations already moved to their final place
        self.access_ranges: dict[int, dict] = {}  # id(access) -> the ranges in force where it stands

    def visit_For(self, loop: For) -> Stmt:
        self.ranges[loop.loop_var] = (as_int(loop.min), as_int(loop.extent))
        return self.generic_visit(loop)

    def visit_BufferLoad(self, load: BufferLoad) -> PrimExpr:
        self.access_ranges[id(load)] = dict(self.ranges)
        return self.generic_visit(load)

    def visit_BufferStore(self, store: BufferStore) -> Stmt:
        self.access_ranges[id(store)] = dict(self.ranges)
        return self.generic_visit(store)

    def visit_IfThenElse(self, stmt: IfThenElse) -> Stmt:
        """Inside `if v < c` (v a loop or thread var), v's range ends at c: tiles loaded by a subset
        of the threads are not sized by the whole block."""
        narrowed = []
        condition = stmt.condition
        if stmt.else_case is None and isinstance(condition, LT) and isinstance(condition.a, Var) \
                and as_int(condition.b) is not None and condition.a in self.ranges:
            var, bound = condition.a, as_int(condition.b)
            low, extent = self.ranges[var]
            if low is not None and extent is not None and bound - low < extent:
                narrowed.append((var, self.ranges[var]))
                self.ranges[var] = (low, max(bound - low, 0))
        try:
            return self.generic_visit(stmt)
        finally:
            for var, old in narrowed:
                self.ranges[var] = old

    def visit_Allocate(self, alloc: Allocate) -> Stmt:
        if alloc.buffer in self.placed:
            return self.compact(alloc)
        chain: list[Allocate] = []
        core: Stmt = alloc
        while isinstance(core, Allocate):
            chain.append(core)
            core = core.body
        placed = core
        for outer in reversed(chain):  # innermost first; each moves down as far as it can
            self.placed.add(outer.buffer)
            placed = _place_fully(outer.with_(body=placed)) if self.movable(outer.buffer.scope) \
                else outer.with_(body=placed)
        return self.visit(placed)

    def compact(self, alloc: Allocate) -> Stmt:
        body = self.visit(alloc.body)
        alloc = alloc.with_(body=body)
        if not self.movable(alloc.buffer.scope):
            return alloc
        # What varies over the buffer's lifetime: loops and lets inside the allocation, and (for a
        # shared buffer) the threads of the block.  Loops around the allocation are fixed.
        inner = {loop.loop_var for loop in collect(body, For)} | {let.var for let in collect(body, LetStmt)}
        if alloc.buffer.scope.startswith("shared"):
            inner |= self.threads
        plans = [self.plan(alloc.buffer, body, dim, inner) for dim in range(len(alloc.buffer.shape))]
        if _address_taken(body, alloc.buffer, self.relocatable):
            plans = _leading_unit_plans(plans, body, alloc.buffer, self.relocatable, self.attrs)
        shape, bases, lows = [], [], []
        for dim, plan in zip(alloc.buffer.shape, plans):
            old = as_int(dim)
            if plan is None or (old is not None and plan[2] >= old):
                shape.append(dim)  # keep this dimension as it is
                bases.append(None)
                lows.append(0)
            else:
                shape.append(IntImm(plan[2], dim.dtype))
                bases.append(plan[0])
                lows.append(plan[1])
        if all(b is None for b in bases):
            return alloc
        new = alloc.buffer.with_(shape=tuple(shape))
        return Allocate(new, _Rebase(alloc.buffer, new, bases, lows, self.access_ranges).visit(body))

    def plan(self, buffer: Buffer, body: Stmt, dim: int, inner: set[Var]) -> tuple[PrimExpr, int, int] | None:
        """(base, low, size) of dimension dim of buffer's accesses, or None if not compactable."""
        accesses = [n for n in collect(body, BufferLoad) + collect(body, BufferStore) if n.buffer is buffer]
        base_expr: PrimExpr | None = None
        low, high = None, None
        for access in accesses:
            index = access.indices[dim]
            if index.dtype.lanes != 1:
                return None
            split = self.split(index, self.access_ranges.get(id(access), self.ranges), inner)
            if split is None:
                return None
            base, offset_bounds = split
            if base_expr is None:
                base_expr = base
            elif not structural_equal(base_expr, base, map_free_vars=False):
                return None
            lo, hi = offset_bounds
            low = lo if low is None else min(low, lo)
            high = hi if high is None else max(high, hi)
        if base_expr is None or low is None:
            return None
        return base_expr, low, high - low + 1

    def split(self, index: PrimExpr, ranges: dict, inner: set[Var]) -> tuple[PrimExpr, tuple[int, int]] | None:
        form = linear_form(_simplified(index, ranges))
        base_terms = []
        lo = hi = form.const
        for atom, coefficient in form.linear_terms():
            variables = free_vars(atom)
            if not any(v in inner for v in variables):
                base_terms.append((atom, coefficient))
                continue
            bounds = self.atom_bounds(atom, ranges, inner)
            if bounds is None:
                return None
            a, b = bounds[0] * coefficient, bounds[1] * coefficient
            lo += min(a, b)
            hi += max(a, b)
        base = _sum(base_terms, index.dtype)
        return base, (lo, hi)

    def atom_bounds(self, atom: PrimExpr, ranges: dict, inner: set[Var]) -> tuple[int, int] | None:
        from ...shape import Analyzer

        analyzer = Analyzer()
        for var in free_vars(atom):
            low, extent = ranges.get(var, (None, None))
            if var in inner:
                if low is None or extent is None or extent <= 0:
                    return None
                analyzer.bind(var, (low, extent))
            else:
                return None  # mixes block-fixed and varying values: no constant offset
        lo, hi = analyzer.const_int_bound(atom)
        if lo is None or hi is None:
            return None
        return lo, hi


def _address_taken(stmt: Stmt, buffer: Buffer, relocatable: frozenset = frozenset()) -> bool:
    """Whether `address_of(buffer[...])` occurs in stmt (the buffer escapes into a call), not
    counting the addresses handed to a relocatable call (a C function in `relocatable`: it takes
    its operands by address only, strides as distances between addresses, so they follow the
    shrunk layout) when plain loads or stores of the buffer show the region it works on."""
    calls = collect(stmt, Call)
    moved = {id(arg) for call in calls if call.op == "call_extern" and call.args
             and getattr(call.args[0], "value", None) in relocatable for arg in call.args}
    addressed = {id(load) for call in calls if call.op == "address_of" for load in call.args}
    has_plain = any(s.buffer is buffer for s in collect(stmt, BufferStore)) or any(
        load.buffer is buffer and id(load) not in addressed for load in collect(stmt, BufferLoad))
    return any(call.op == "address_of" and any(isinstance(a, BufferLoad) and a.buffer is buffer for a in call.args)
               and not (id(call) in moved and has_plain) for call in calls)


def _leading_unit_plans(plans: list, body: Stmt, buffer: Buffer, relocatable: frozenset = frozenset(),
                        attrs=None) -> list:
    """The plans of an address-taken buffer that keep its strides (module doc): the leading run of
    dimensions indexed at one base by every access becomes 1 long; every later one keeps its
    extent; nothing shrinks unless a plain store or a relocatable call fills the buffer (such a
    call reaches only the tile its tensorized block declared, whose leading indices are those of
    the addresses it is handed: at the one base)."""
    if not any(s.buffer is buffer for s in collect(body, BufferStore)) and not _handed_to(body, buffer, relocatable, attrs):
        return [None] * len(plans)
    kept: list = []
    for plan in plans:
        if plan is None or plan[2] != 1:
            break
        kept.append(plan)
    return kept + [None] * (len(plans) - len(kept))


def _handed_to(stmt: Stmt, buffer: Buffer, relocatable: frozenset, attrs=None) -> bool:
    """Whether an address of buffer is handed to a relocatable call (a function in `relocatable`)
    that may write through it (an operand declared read does not fill the buffer)."""
    writing = {id(load) for load, access in address_accesses(stmt, attrs) if access != "read"}
    for call in collect(stmt, Call):
        if call.op == "call_extern" and call.args and getattr(call.args[0], "value", None) in relocatable:
            for arg in call.args[1:]:
                if isinstance(arg, Call) and arg.op == "address_of" and any(
                        isinstance(a, BufferLoad) and a.buffer is buffer and id(a) in writing for a in arg.args):
                    return True
    return False


def _uses(stmt: Stmt, buffer: Buffer) -> bool:
    return any(n.buffer is buffer for n in collect(stmt, BufferLoad) + collect(stmt, BufferStore))


def _accumulates_over(loop: For, buffer: Buffer) -> bool:
    """Whether `buffer` is the target of a reduction that runs over `loop`: a store to it in the
    loop's body guarded by a reduction's init condition (lower_blocks: `binding == min` for every
    reduce iter var, `_first_reduction_iteration`) that depends on the loop's variable.  The init
    then runs in some iterations only, and the others read what an earlier iteration left (a
    cache_write stage moved under a reduction loop by reverse_compute_at, then fused: the
    accumulator of row i is written at r == 0 and read in the six iterations after it)."""
    dependent = {loop.loop_var}
    lets = collect(loop.body, LetStmt)
    grown = True
    while grown:  # let-bound values (a binding that reads memory) carry the dependence on
        grown = False
        for let in lets:
            if let.var not in dependent and any(v in dependent for v in free_vars(let.value)):
                dependent.add(let.var)
                grown = True
    for branch in collect(loop.body, IfThenElse):
        if not any(store.buffer is buffer for store in collect(branch.then_case, BufferStore)):
            continue
        if any(any(v in dependent for v in free_vars(eq)) for eq in collect(branch.condition, EQ)):
            return True
    return False


def _place_at_lca(alloc: Allocate) -> Stmt:
    """The allocation moved down to the innermost statement holding every access of its buffer.

    Going down through a serial loop means one buffer per iteration: right for a tile that each
    iteration loads and then reads (a cache_read under compute_at), which is how such buffers
    arise.  A buffer that accumulates a reduction over the loop keeps its contents from one
    iteration to the next, so the allocation does not go below a loop that is a reduction loop of
    the buffer (`_accumulates_over`).
    """
    buffer = alloc.buffer
    stmt = alloc.body
    if isinstance(stmt, For) and stmt.kind != "thread_binding" and _uses(stmt.body, buffer) \
            and not _accumulates_over(stmt, buffer):
        return stmt.with_(body=Allocate(buffer, stmt.body))
    if isinstance(stmt, SeqStmt):
        users = [k for k, s in enumerate(stmt.stmts) if _uses(s, buffer)]
        if len(users) == 1:
            k = users[0]
            inner = Allocate(buffer, stmt.stmts[k])
            return stmt.with_(stmts=stmt.stmts[:k] + (inner,) + stmt.stmts[k + 1:])
    if isinstance(stmt, Allocate) and _uses(stmt.body, buffer):
        return stmt.with_(body=Allocate(buffer, stmt.body))
    return alloc


def _place_fully(alloc: Allocate) -> Stmt:
    """_place_at_lca repeated until the allocation stands at the innermost common statement."""
    path: list = []
    current: Stmt = alloc
    while True:
        moved = _place_at_lca(current)
        if moved is current:
            break
        # moved wraps the allocation one level down: remember the wrapper, continue inside it
        if isinstance(moved, (For, Allocate)):
            path.append(("for", moved))
            current = moved.body
        else:
            index = next(k for k, s in enumerate(moved.stmts) if isinstance(s, Allocate) and s.buffer is alloc.buffer)
            path.append(("seq", moved, index))
            current = moved.stmts[index]
    result: Stmt = current
    for entry in reversed(path):
        if entry[0] == "for":
            result = entry[1].with_(body=result)
        else:
            _, seq_stmt, index = entry
            result = seq_stmt.with_(stmts=seq_stmt.stmts[:index] + (result,) + seq_stmt.stmts[index + 1:])
    return result


def _sum(terms: list[tuple[PrimExpr, int]], dtype) -> PrimExpr:
    total: PrimExpr = IntImm(0, dtype)
    for atom, coefficient in terms:
        total = total + (atom if coefficient == 1 else atom * coefficient)
    return total


class _Rebase(Mutator):
    """Accesses to old become accesses to new, each index shifted by its dimension's base + low."""

    def __init__(self, old: Buffer, new: Buffer, bases: list, lows: list[int], access_ranges: dict) -> None:
        super().__init__()
        self.old, self.new, self.bases, self.lows = old, new, bases, lows
        self.access_ranges = access_ranges

    def indices(self, indices: tuple[PrimExpr, ...], ranges: dict) -> tuple[PrimExpr, ...]:
        return tuple(index if base is None else _simplified(index - base - low, ranges)
                     for index, base, low in zip(indices, self.bases, self.lows))

    def visit_BufferLoad(self, load: BufferLoad) -> PrimExpr:
        ranges = self.access_ranges.get(id(load), {})
        load = self.generic_visit(load)
        if load.buffer is not self.old:
            return load
        return BufferLoad(self.new, self.indices(load.indices, ranges))

    def visit_BufferStore(self, store: BufferStore) -> Stmt:
        ranges = self.access_ranges.get(id(store), {})
        store = self.generic_visit(store)
        if store.buffer is not self.old:
            return store
        return BufferStore(self.new, store.value, self.indices(store.indices, ranges))


def _simplified(index: PrimExpr, ranges: dict) -> PrimExpr:
    """index simplified knowing the ranges of the loops around its access: floordiv(o0 * 16 + o1, 16)
    is o0 where 0 <= o1 < 16, so its dimension splits into a base and a bounded offset."""
    from ...shape import Analyzer

    analyzer = Analyzer()
    for var, (low, extent) in ranges.items():
        if low is not None and extent is not None and extent > 0 and var in free_vars(index):
            analyzer.bind(var, (low, extent))
    return analyzer.simplify(index)


__all__ = ["BufferCompactor", "compact_local_buffers"]
