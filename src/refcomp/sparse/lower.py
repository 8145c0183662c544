"""Stage I -> stage II (position space) -> stage III (the ordinary loop IR).

Stage II is a PrimFunc whose loops run over the *positions* of the iterated axes:

    dense_fixed      for c in range(length)                    position parent*length + c, coordinate c
    sparse_fixed     for s in range(per_row)                   position parent*per_row + s, coordinate indices[pos]
    sparse_variable  for p in range(indptr[q], indptr[q+1])    position p, coordinate indices[p]
    dense_variable   the same range                            position p, coordinate p - indptr[q]

A fused loop runs over the positions of its innermost axis and recovers each parent position by a
binary search of the child's indptr (or a division, for fixed axes).  An access whose coordinate
is not the position the loops stand on (a sparse buffer read at another axis's coordinate) finds
its position by a binary search of the sorted indices of the parent's range; where the coordinate
is absent the element reads 0.  Every search reads its array at clamped indices inside a guard
that the range is not empty, so the prover sees each read in bounds without knowing the loop.

Stage III is stage II plus the format invariants as `assume(...)` (exactly what `validate.py`
checks once per input array), with the outermost loop parallel when it is spatial: the loop IR
that refcomp proves, schedules, interprets and compiles.
"""
from __future__ import annotations

from typing import Any, Callable

from ..ast import (
    Allocate, Buffer, BufferLoad, BufferStore, Call, Evaluate, FloatImm, For, IfThenElse,
    IntImm, LetStmt, Mul, Mutator, SeqStmt, floordiv, PrimExpr, PrimFunc, Stmt, Var, While, collect, max_, min_, seq, substitute,
)
from ..emit_c.codegen import OMP_SCHEDULE
from .iteration import IterAxis, SparseIteration, SparseIterationError, SpAxis, SpBuffer, arrays_of, check_iteration

ROWS_DYNAMIC = {OMP_SCHEDULE: "dynamic"}
LANES = 8  # partial sums of a constant-length innermost reduction (one AVX2 float32 vector)


def _assume(condition: PrimExpr) -> Stmt:
    return Evaluate(Call("assume", (condition,), "bool"))


def _if(condition: PrimExpr, then: Stmt, otherwise: Stmt) -> Stmt:
    """if/else, without an else that does nothing."""
    empty = isinstance(otherwise, SeqStmt) and not otherwise.stmts
    return IfThenElse(condition, then, None if empty else otherwise)


def _clamp(x: PrimExpr, lo: PrimExpr, hi: PrimExpr) -> PrimExpr:
    return max_(min_(x, hi), lo)


class _Lowering:
    def __init__(self, it: SparseIteration, stage: int, row_tile: int | None = None) -> None:
        check_iteration(it)
        self.it, self.facts = it, stage >= 3
        self.row_tile = row_tile
        self.params = arrays_of(it)
        self.array = {(role, owner): buf for role, owner, buf in self.params}
        self.counter = 0
        # sizes the parameters' shapes define (a fact may only mention those)
        self.defined = {v for _, _, buf in self.params for dim in buf.shape for v in collect(dim, Var)}
        self.loads: list[BufferLoad] = []
        for load in collect(it.value, BufferLoad):
            if load not in self.loads:
                self.loads.append(load)
        self.holes = {load: Var(f"_v{k}", load.dtype) for k, load in enumerate(self.loads)}
        self.template = _Holes(self.holes).visit(it.value)
        self.by_logical = {b.logical: b for b in it.buffers}

    # -- names and facts
    def fresh(self, name: str) -> Var:
        self.counter += 1
        return Var(name, "int32")

    def indptr(self, axis: SpAxis) -> Buffer:
        return self.array[("indptr", axis)]

    def indices(self, axis: SpAxis) -> Buffer:
        return self.array[("indices", axis)]

    def row_range(self, axis: SpAxis, parent: PrimExpr) -> tuple[PrimExpr, PrimExpr, list[Stmt]]:
        """[lo, hi) of a variable axis at one parent position, with the indptr facts."""
        ptr = self.indptr(axis)
        lo, hi = ptr[parent], ptr[parent + 1]
        facts = [_assume((lo >= 0) & (lo <= hi) & (hi <= axis.nnz))] if self.facts else []
        if self.facts and axis.kind == "dense_variable":
            facts.append(_assume(hi - lo <= axis.length))
        return lo, hi, facts

    def coord_facts(self, axis: SpAxis, coord: PrimExpr) -> list[Stmt]:
        if not (self.facts and axis.has_indices) or not set(collect(axis.length, Var)) <= self.defined:
            return []  # a dimension no parameter shows: no access can depend on it
        return [_assume((coord >= 0) & (coord < axis.length))]

    # -- loops
    def loop(self, loop: tuple[IterAxis, ...], env: dict, inner: Callable[[dict], Stmt], top: bool) -> Stmt:
        pos = env["pos"]
        if len(loop) == 1:
            ia = loop[0]
            axis, var = ia.axis, Var(ia.var.name, "int32")
            parent = pos[axis.parent] if axis.parent is not None else None
            before: list[Stmt] = []
            if axis.kind == "dense_fixed":
                lo, extent = IntImm(0), axis.length
                p, c = (var if parent is None else parent * axis.length + var), var
            elif axis.kind == "sparse_fixed":
                lo, extent = IntImm(0), axis.per_row
                p = var if parent is None else parent * axis.per_row + var
                c = self.indices(axis)[p]
            else:
                start, end, before = self.row_range(axis, parent if parent is not None else IntImm(0))
                lo, extent, p = start, end - start, var
                c = self.indices(axis)[p] if axis.has_indices else var - start
            new = _scope(env, {axis: p}, {axis: c})
            body = seq(*self.coord_facts(axis, c), inner(new))
            return seq(*before, self.for_(var, lo, extent, body, top and self.parallel(loop)))
        # a fused loop: positions of the innermost axis, parents recovered outward
        last = loop[-1].axis
        var = Var("_".join(ia.var.name for ia in loop), "int32")

        def recover(t: int, found: dict) -> Stmt:
            if t < 0:
                coords = {}
                for ia in loop:
                    a = ia.axis
                    par = found.get(a.parent, pos.get(a.parent)) if a.parent is not None else None
                    coords[a] = self.coordinate(a, found[a], par)
                new = _scope(env, found, coords)
                return seq(*[f for ia in loop if ia.axis.has_indices
                             for f in self.coord_facts(ia.axis, coords[ia.axis])], inner(new))
            child = loop[t + 1].axis
            cp = found[child]
            if child.kind == "dense_fixed":
                return recover(t - 1, {**found, loop[t].axis: floordiv(cp, child.length)})
            if child.kind == "sparse_fixed":
                return recover(t - 1, {**found, loop[t].axis: floordiv(cp, child.per_row)})
            return self.search_row(child, cp, lambda r: recover(t - 1, {**found, loop[t].axis: r}))

        body = recover(len(loop) - 2, {last: var})
        out = self.for_(var, IntImm(0), last.positions, body, top and self.parallel(loop))
        return IfThenElse(loop[-2].axis.positions > 0, out)

    def parallel(self, loop: tuple[IterAxis, ...]) -> bool:
        return self.facts and all(ia.kind == "S" and (not ia.axis.has_indices or ia.axis.sorted) for ia in loop)

    def for_(self, var: Var, lo: PrimExpr, extent: PrimExpr, body: Stmt, parallel: bool) -> Stmt:
        if parallel:
            return For(var, lo, extent, "parallel", body, annotations=ROWS_DYNAMIC)
        return For(var, lo, extent, "serial", body)

    def coordinate(self, axis: SpAxis, p: PrimExpr, parent: PrimExpr | None) -> PrimExpr:
        if axis.kind == "dense_fixed":
            return p if parent is None else p - parent * axis.length
        if axis.has_indices:
            return self.indices(axis)[p]
        return p - self.indptr(axis)[parent if parent is not None else IntImm(0)]

    # -- binary searches
    def _scratch(self, name: str) -> Buffer:
        return Buffer(name, (1,), "int32", scope="local")

    def search_row(self, child: SpAxis, p: PrimExpr, found: Callable[[PrimExpr], Stmt]) -> Stmt:
        """The parent position r with indptr[r] <= p < indptr[r + 1] (the largest such r)."""
        ptr, count = self.indptr(child), child.parents
        lo, hi = self._scratch("lo"), self._scratch("hi")
        mid, r = self.fresh("mid"), self.fresh("row")
        step = LetStmt(mid, floordiv(lo[0] + hi[0] + 1, 2), IfThenElse(
            ptr[_clamp(mid, IntImm(0), count)] <= p,
            BufferStore(lo, mid, (0,)), BufferStore(hi, mid - 1, (0,))))
        body = seq(BufferStore(lo, IntImm(0), (0,)), BufferStore(hi, count - 1, (0,)),
                   While(lo[0] < hi[0], step),
                   LetStmt(r, _clamp(lo[0], IntImm(0), count - 1), found(r)))
        return Allocate(lo, Allocate(hi, body))

    def search_coord(self, axis: SpAxis, parent: PrimExpr, c: PrimExpr,
                     found: Callable[[PrimExpr], Stmt], absent: Callable[[], Stmt]) -> Stmt:
        """The position of coordinate c among the sorted indices of one parent position."""
        if not axis.sorted:
            raise SparseIterationError(f"{self.it.name}: axis {axis.name} is unsorted, so a coordinate cannot be "
                                       f"found in it by binary search")
        if axis.kind == "sparse_fixed":
            start, end, facts = parent * axis.per_row, (parent + 1) * axis.per_row, []
        else:
            start, end, facts = self.row_range(axis, parent)
        ind = self.indices(axis)
        lo, hi = self._scratch("lo"), self._scratch("hi")
        mid, q = self.fresh("mid"), self.fresh("q")
        step = LetStmt(mid, floordiv(lo[0] + hi[0], 2), IfThenElse(
            ind[_clamp(mid, start, end - 1)] < c, BufferStore(lo, mid + 1, (0,)), BufferStore(hi, mid, (0,))))
        hit = LetStmt(q, _clamp(lo[0], start, end - 1), _if(ind[q] == c, found(q), absent()))
        search = seq(BufferStore(hi, end, (0,)), While(lo[0] < hi[0], step), hit)
        body = seq(BufferStore(lo, start, (0,)), _if(start < end, search, absent()))
        return seq(*facts, Allocate(lo, Allocate(hi, body)))

    # -- accesses
    def locate(self, buffer: SpBuffer, indices: tuple[PrimExpr, ...], env: dict,
               found: Callable[[tuple[PrimExpr, ...]], Stmt], absent: Callable[[], Stmt]) -> Stmt:
        """The storage index of buffer[indices] (coordinates), searching where it must."""
        pos, coord, var_axis = env["pos"], env["vars"], env["var_axis"]

        def step(t: int, parent: PrimExpr | None, exact: bool, coords: list) -> Stmt:
            if t == len(buffer.axes):
                cut = buffer.sparse_depth
                if cut < 0:
                    return found(tuple(coords))
                return found((here[cut],) + tuple(coords[cut + 1:]))
            axis, index = buffer.axes[t], indices[t]
            c = substitute(index, coord)
            if exact and isinstance(index, Var) and var_axis.get(index) is axis:
                here[t] = pos[axis]
                return step(t + 1, pos[axis], True, coords + [c])
            if axis.kind == "dense_fixed":
                here[t] = c if parent is None or axis.parent is None else parent * axis.length + c
                return step(t + 1, here[t], exact and axis.parent is None, coords + [c])
            base = parent if parent is not None else IntImm(0)
            if axis.kind == "dense_variable":
                lo, hi, facts = self.row_range(axis, base)

                def inside() -> Stmt:
                    here[t] = lo + c
                    return step(t + 1, here[t], False, coords + [c])
                return seq(*facts, _if((c >= 0) & (c < hi - lo), inside(), absent()))

            def hit(q: PrimExpr) -> Stmt:
                here[t] = q
                return step(t + 1, q, False, coords + [c])
            return self.search_coord(axis, base, c, hit, absent)

        here: dict[int, PrimExpr] = {}
        return step(0, None, True, [])

    def store(self, env: dict) -> Stmt:
        """The statement at the innermost point: resolve the loads not yet found, then store."""
        it = self.it
        out = it.output.storage
        coord = env["vars"]

        def emit(index: tuple[PrimExpr, ...], values: dict) -> Stmt:
            value = substitute(self.template, {self.holes[load]: v for load, v in values.items()})
            value = substitute(value, coord)
            if env.get("lane_acc") is not None:
                acc, lane = env["lane_acc"]
                return BufferStore(acc, acc[lane] + value, (lane,))
            if env.get("acc") is not None:
                return BufferStore(env["acc"], env["acc"][0] + value, (0,))
            if it.reduces:
                value = BufferLoad(out, index) + value
            return BufferStore(out, value, index)

        def finish(e: dict) -> Stmt:
            return self.locate(it.output, it.out_indices, e, lambda idx: emit(idx, e["resolved"]), lambda: seq())
        return self.resolve(env, [load for load in self.loads if load not in env["resolved"]], True, finish)

    def hoist(self, env: dict, may_skip: bool, cont: Callable[[dict], Stmt]) -> Stmt:
        """Find, before the next loop, every load whose indices the loops so far bind."""
        bound = set(env["vars"])
        ready = [load for load in self.loads if load not in env["resolved"]
                 and all(set(collect(i, Var)) <= bound for i in load.indices)]
        return self.resolve(env, ready, may_skip, cont)

    def resolve(self, env: dict, loads: list, may_skip: bool, cont: Callable[[dict], Stmt]) -> Stmt:
        """cont(env with each load's value: its element, or 0 where a search finds it absent).  A
        reduction whose value the absent element multiplies skips the rest (may_skip: the output
        was set already)."""
        if not loads:
            return cont(env)
        load, rest = loads[0], loads[1:]
        buffer = self.by_logical[load.buffer]

        def known(value: PrimExpr) -> dict:
            return {**env, "resolved": {**env["resolved"], load: value}}

        def absent() -> Stmt:
            if may_skip and self.it.reduces and _is_factor(load, self.it.value):
                return seq()  # adds 0
            return self.resolve(known(FloatImm(0.0, buffer.dtype)), rest, may_skip, cont)
        return self.locate(buffer, load.indices, env,
                           lambda idx: self.resolve(known(BufferLoad(buffer.storage, idx)), rest, may_skip, cont),
                           absent)

    def init(self, loops: tuple[tuple[IterAxis, ...], ...], env: dict) -> Stmt:
        """out = 0 at every point the reduction writes (the spatial axes from the first reduce loop on)."""
        spatial = [ia for loop in loops for ia in loop if ia.kind == "S"]

        def nest(k: int, env: dict) -> Stmt:
            if k == len(spatial):
                out = self.it.output
                return self.locate(out, self.it.out_indices, env,
                                   lambda idx: BufferStore(out.storage, FloatImm(0.0, out.dtype), idx), lambda: seq())
            ia = spatial[k]
            if ia.axis.parent is not None and ia.axis.parent not in env["pos"]:
                raise SparseIterationError(f"{self.it.name}: spatial axis {ia.axis.name} sits below reduce axis "
                                           f"{ia.axis.parent.name}: its output cannot be initialised")
            renamed = IterAxis(Var(ia.var.name + "0", "int32"), ia.axis, "S")
            return self.loop((renamed,), env, lambda e: nest(k + 1, _alias_loop(e, (ia,))), False)

        return nest(0, env)

    def body(self, k: int, env: dict) -> Stmt:
        loops = self.it.loops
        if k == len(loops):
            return self.store(env)
        first = any(ia.kind == "R" for ia in loops[k]) and not any(ia.kind == "R" for loop in loops[:k] for ia in loop)
        if first and all(ia.kind == "R" for loop in loops[k:] for ia in loop):
            return self.in_register(k, env)
        tile = self.tile(k) if first else 0
        if tile:
            return self.in_row_tile(k, env, tile)
        pre = self.init(loops[k:], env) if self.it.init and first else None
        ready = not self.it.init or any(ia.kind == "R" for loop in loops[:k + 1] for ia in loop)
        run = self.hoist(env, ready, lambda e: self.loop(
            loops[k], e, lambda inner: self.body(k + 1, _alias_loop(inner, loops[k])), k == 0))
        return seq(pre, run) if pre is not None else run

    def in_register(self, k: int, env: dict) -> Stmt:
        """Every loop from k on reduces into one output element: sum in a local scalar, store once."""
        out = self.it.output
        acc = Buffer("acc", (1,), out.dtype, scope="local")

        lanes = self.lanes(k)
        if lanes:
            return self.in_lanes(k, env, lanes)

        def around(index: tuple[PrimExpr, ...]) -> Stmt:
            start = FloatImm(0.0, out.dtype) if self.it.init else BufferLoad(out.storage, index)
            run = self.hoist({**env, "acc": acc}, True, lambda e: self.loop(
                self.it.loops[k], e, lambda inner: self.body(k + 1, _alias_loop(inner, self.it.loops[k])), k == 0))
            return Allocate(acc, seq(BufferStore(acc, start, (0,)), run,
                                     BufferStore(out.storage, acc[0], index)))
        return self.locate(out, self.it.out_indices, env, around, lambda: seq())

    def lanes(self, k: int) -> int:
        """LANES when the reduction from loop k is one root dense_fixed axis of a constant length
        that LANES divides (summed in LANES independent partial sums, which gcc vectorises)."""
        if not self.facts or len(self.it.loops) != k + 1 or len(self.it.loops[k]) != 1:
            return 0
        axis = self.it.loops[k][0].axis
        length = axis.length.value if isinstance(axis.length, IntImm) else 0
        return LANES if axis.kind == "dense_fixed" and axis.parent is None and length and length % LANES == 0 else 0

    def in_lanes(self, k: int, env: dict, lanes: int) -> Stmt:
        out, ia = self.it.output, self.it.loops[k][0]
        acc = Buffer("acc", (lanes,), out.dtype, scope="local")
        outer, lane, l0, l1 = Var(ia.var.name + "_o", "int32"), Var(ia.var.name + "_l", "int32"), Var("l0"), Var("l1")
        c = outer * lanes + lane
        inner = _alias_loop(_scope({**env, "acc": None}, {ia.axis: c}, {ia.axis: c}), (ia,))

        def around(index: tuple[PrimExpr, ...]) -> Stmt:
            step = self.store({**inner, "acc": None, "lane_acc": (acc, lane)})
            total = FloatImm(0.0, out.dtype) if self.it.init else BufferLoad(out.storage, index)
            sums = Allocate(acc, seq(
                For(l0, IntImm(0), IntImm(lanes), "serial", BufferStore(acc, FloatImm(0.0, out.dtype), (l0,))),
                For(outer, IntImm(0), IntImm(ia.axis.length.value // lanes), "serial",
                    For(lane, IntImm(0), IntImm(lanes), "serial", step)),
                BufferStore(out.storage, total, index),
                For(l1, IntImm(0), IntImm(lanes), "serial",
                    BufferStore(out.storage, BufferLoad(out.storage, index) + acc[l1], index))))
            return sums
        return self.locate(out, self.it.out_indices, env, around, lambda: seq())

    def tile(self, k: int) -> int:
        """The tile width when the loops from k are reduce loops and then one root dense_fixed
        spatial axis of a constant length L, the output's last index (SpMM's "SRS"): min(L,
        row_tile) when that divides L, else 0 (stage III with a row_tile only)."""
        loops = self.it.loops
        if not (self.facts and self.row_tile) or len(loops[-1]) != 1 or k == len(loops) - 1:
            return 0
        if not all(ia.kind == "R" for loop in loops[k:-1] for ia in loop):
            return 0
        last = loops[-1][0]
        length = last.axis.length.value if isinstance(last.axis.length, IntImm) else 0
        if last.kind != "S" or last.axis.kind != "dense_fixed" or last.axis.parent is not None or not length:
            return 0
        if not self.it.out_indices or self.it.out_indices[-1] is not last.var:
            return 0
        tile = min(length, self.row_tile)
        return tile if length % tile == 0 else 0

    def in_row_tile(self, k: int, env: dict, tile: int) -> Stmt:
        """The output row in registers: for each tile of the last (spatial) axis, the tile's sums
        live in a local buffer `acc[tile]` through all the reduce loops from k, and are stored once.

            for f_o in range(L // tile):
                acc[f_i] = 0                      (C[.., f] where the iteration accumulates)
                for j in ...: acc[f_i] += value   (f = f_o * tile + f_i)
                C[.., f] = acc[f_i]
        """
        loops, out = self.it.loops, self.it.output
        ia = loops[-1][0]
        length = ia.axis.length.value
        acc = Buffer("acc", (tile,), out.dtype, scope="local")
        outer = Var(ia.var.name + "_o", "int32") if length > tile else None

        def at(e: dict, lane: Var) -> dict:
            c = lane if outer is None else outer * tile + lane
            return _alias_loop(_scope(e, {ia.axis: c}, {ia.axis: c}), (ia,))

        def tile_loop(name: str, make: Callable[[Var, dict], Stmt], e: dict) -> Stmt:
            lane = Var(f"{ia.var.name}_{name}", "int32")
            return For(lane, IntImm(0), IntImm(tile), "serial", make(lane, at(e, lane)))

        def start(lane: Var, e: dict) -> Stmt:
            return self.locate(out, self.it.out_indices, e, lambda idx: BufferStore(
                acc, FloatImm(0.0, out.dtype) if self.it.init else BufferLoad(out.storage, idx), (lane,)), lambda: seq())

        def finish(lane: Var, e: dict) -> Stmt:
            return self.locate(out, self.it.out_indices, e,
                               lambda idx: BufferStore(out.storage, acc[lane], idx), lambda: seq())

        def update(lane: Var, e: dict) -> Stmt:
            return self.store({**e, "acc": None, "lane_acc": (acc, lane)})

        def reduce(t: int, e: dict) -> Stmt:
            if t == len(loops) - 1:
                return self.hoist(e, True, lambda e1: tile_loop("u", update, e1))
            return self.hoist(e, True, lambda e1: self.loop(
                loops[t], e1, lambda inner: reduce(t + 1, _alias_loop(inner, loops[t])), False))

        body = Allocate(acc, seq(tile_loop("z", start, env), reduce(k, env), tile_loop("w", finish, env)))
        return body if outer is None else For(outer, IntImm(0), IntImm(length // tile), "serial", body)

    def func(self) -> PrimFunc:
        env: dict = {"pos": {}, "coord": {}, "vars": {}, "var_axis": {}, "resolved": {}}
        body = self.body(0, env)
        return PrimFunc(tuple(buf for _, _, buf in self.params), body, self.it.name)


def _scope(env: dict, pos: dict, coord: dict) -> dict:
    return {**env, "pos": {**env["pos"], **pos}, "coord": {**env["coord"], **coord}}


def _alias_loop(env: dict, loop: tuple[IterAxis, ...]) -> dict:
    """Inside the loop, each iteration variable means the coordinate of its axis."""
    names = {ia.var: env["coord"][ia.axis] for ia in loop}
    return {**env, "vars": {**env["vars"], **names},
            "var_axis": {**env["var_axis"], **{ia.var: ia.axis for ia in loop}}}


class _Holes(Mutator):
    """Each buffer load of the value replaced by its placeholder variable."""

    def __init__(self, holes: dict) -> None:
        super().__init__()
        self.holes = holes

    def visit_BufferLoad(self, node: BufferLoad) -> Any:
        return self.holes.get(node, node)


def _is_factor(load: BufferLoad, value: PrimExpr) -> bool:
    if value is load:
        return True
    return isinstance(value, Mul) and (_is_factor(load, value.a) or _is_factor(load, value.b))


def lower_stage2(it: SparseIteration) -> PrimFunc:
    """The iteration in position space (binary searches explicit, no facts): printable with
    `script`, runnable with the interpreter."""
    return _Lowering(it, 2).func()


def lower_stage3(it: SparseIteration, row_tile: int | None = None) -> PrimFunc:
    """Stage II with the format invariants as assumptions and the outer spatial loop parallel: the
    loop IR that `refcomp.build(..., bounds="prove")` proves and compiles.

    row_tile: where the reduce loops are followed by one constant-length dense spatial axis that
    is the output's last index (SpMM), keep the output row in a local buffer of row_tile elements
    (a tile loop around the reduce loops when the axis is longer), so that the schedule can hold
    it in vector registers (`in_row_tile`)."""
    if row_tile is not None and (isinstance(row_tile, bool) or not isinstance(row_tile, int) or row_tile < 1):
        raise SparseIterationError(f"lower_stage3: row_tile must be a positive int or None, got {row_tile!r}")
    return _Lowering(it, 3, row_tile).func()
