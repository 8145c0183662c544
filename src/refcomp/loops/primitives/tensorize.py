"""Primitive `tensorize(block_or_loop, intrin)`: replace a tile of computation by a tensor intrinsic.

Requires: the target is a loop (it is blockized first) or an outer block whose body is a loop nest
around one block, as `blockize` makes; and that nest matches the intrinsic's description:
* the same number of loops, each binding of the inner block `offset + loop` with a unit-step loop
  whose extent equals the description's (description size vars such as K are bound here);
* the inner block has the same iter kinds, a true predicate, and an init only if the description
  has one;
* the computations are the same up to renaming of loops and buffers (alpha-equivalence), with
  commuted operands of + and * accepted, and every access to a buffer equal to the description's
  access plus one offset per dimension that does not move inside the tile (the tile's origin);
* each buffer's strides, over the dimensions the description has, equal the description's (a
  stride var such as `ldb` is bound to the actual stride), and extra leading dimensions are fixed;
  when an index before the last dimensions moves in the tile, the description's dimensions are the
  ones whose indices move, in order, and the others (between them too) are fixed;
* inner-block iter vars bound to no tile loop are fixed for the tile (a convolution's window
  position around a GEMM tile over channels); the others match the description's one by one.

Effect: the outer block's body becomes the intrinsic's implementation with its buffers bound to
the program's buffers at the tile origin and its size vars to the matched values; the block is
annotated `tensorized = <name>`; the function gains the intrinsic's `c_helpers`, `c_includes`,
function attributes (e.g. `needs_amx`) and `cpu_features`.
"""
from __future__ import annotations

from typing import Any

from ...ast import (
    EQ, Add, And, Block, BlockRealize, Buffer, BufferLoad, BufferStore, Cast, Evaluate, FloatImm, For, IfThenElse,
    IntImm, Mul, Mutator, PrimExpr, PrimFunc, SizeVar, Stmt, StringImm, Var, as_int, const, free_vars, substitute,
)
from ...ast.structural import structural_equal
from ...ast.intrinsics import EXTERN_ACCESS, merge_extern_access
from ...ast.node import Node
from ...errors import ScheduleError
from ..intrin.registry import TensorIntrin, get
from .blockize import blockize
from .lookup import locate_block
from .tensorize_affine import Affine, normalize
from .tree import replace_in_func


def tensorize(func: PrimFunc, block_or_loop: Block | For, intrin: str | TensorIntrin,
              preserve_unit_iters: bool = True) -> tuple[PrimFunc, None]:
    """The function with the tile at block_or_loop computed by the intrinsic (see module doc)."""
    intrinsic = intrin if isinstance(intrin, TensorIntrin) else get(intrin)
    if isinstance(block_or_loop, For):
        func, block = blockize(func, block_or_loop, preserve_unit_iters)
    elif isinstance(block_or_loop, Block):
        block = block_or_loop
    else:
        raise ScheduleError(f"tensorize: expected a block or a loop, got {type(block_or_loop).__name__}", ir=func)
    location = locate_block(func, block, "tensorize")
    match = match_tile(func, block, intrinsic)
    body = instantiate(intrinsic, match)
    init = block.init
    if intrinsic.init_impl is not None and init_zeroes_tile(block):
        # Init folding: the tile's first reduction step writes C = A * B instead of zeroing C
        # and then adding to it (spec/tensorize.md)
        body = IfThenElse(_first_reduction_step(block), instantiate(intrinsic, match, intrinsic.init_impl), body)
        init = None
    annotations = dict(block.annotations)
    annotations["tensorized"] = intrinsic.name
    new_block = block.with_(body=body, init=init, annotations=annotations)
    new_func = replace_in_func(func, {id(location.realize): location.realize.with_(block=new_block)})
    return _with_requirements(new_func, intrinsic), None


# ----------------------------------------------------------------------------- matching

class Match:
    """What a successful match found: desc buffer -> (program buffer, tile origin), desc var -> value."""

    def __init__(self) -> None:
        self.buffers: dict[Buffer, Buffer] = {}
        self.origins: dict[Buffer, tuple[Affine, ...]] = {}
        self.dims: dict[Buffer, tuple[int, ...]] = {}  # desc buffer -> the program buffer's dims it spans
        self.values: dict[Var, PrimExpr] = {}


def match_tile(func: PrimFunc, block: Block, intrinsic: TensorIntrin) -> Match:
    """Match the outer block's nest against the intrinsic's description, or raise ScheduleError."""
    return _Matcher(func, block, intrinsic).run()


class _Mismatch(Exception):
    def __init__(self, message: str, spot: Any = None) -> None:
        super().__init__(message)
        self.spot = spot


def _nest(stmt: Stmt) -> tuple[list[For], BlockRealize | None]:
    loops = []
    while isinstance(stmt, For):
        loops.append(stmt)
        stmt = stmt.body
    return loops, stmt if isinstance(stmt, BlockRealize) else None


def _desc_nest(desc: PrimFunc) -> tuple[list[For], BlockRealize | None]:
    body = desc.body
    # A description may wrap its nest in a root block without iter vars, as te-built functions do.
    if isinstance(body, BlockRealize) and not body.block.iter_vars and isinstance(body.block.body, (For, BlockRealize)):
        body = body.block.body
    return _nest(body)


def init_zeroes_tile(block: Block) -> bool:
    """Whether the outer block's init sets to zero exactly the elements its tile's update writes
    (what blockize makes of a reduction's `init` of 0): a loop nest over the tile's spatial loops
    (those the update's store index uses, same order and ranges) around one block storing a zero
    constant to the update's buffer at the same index, under the same predicate, which uses no
    other tile loop."""
    if block.init is None:
        return False
    loops, realize = _nest(block.body)
    init_loops, init_realize = _nest(block.init)
    if realize is None or init_realize is None or init_realize.block.init is not None:
        return False
    store, zero = realize.block.body, init_realize.block.body
    if not (isinstance(store, BufferStore) and isinstance(zero, BufferStore) and store.buffer is zero.buffer):
        return False
    if not isinstance(zero.value, (FloatImm, IntImm)) or zero.value.value != 0:
        return False

    def index(r: BlockRealize, st: BufferStore) -> list[PrimExpr]:
        bound = dict(zip((iv.var for iv in r.block.iter_vars), r.iter_values))
        return [substitute(i, bound) for i in st.indices]

    stored = index(realize, store)
    used = {v for i in stored for v in free_vars(i)}
    spatial = [l for l in loops if l.loop_var in used]
    if len(spatial) != len(init_loops) or set(free_vars(realize.predicate)) & ({l.loop_var for l in loops} - used):
        return False
    rename = {}
    for tile_loop, init_loop in zip(spatial, init_loops):
        if as_int(tile_loop.min) != 0 or as_int(init_loop.min) != 0 or as_int(tile_loop.extent) is None \
                or as_int(tile_loop.extent) != as_int(init_loop.extent):
            return False
        rename[init_loop.loop_var] = tile_loop.loop_var
    zeroed = [substitute(i, rename) for i in index(init_realize, zero)]
    return (len(zeroed) == len(stored)
            and all(structural_equal(a, b, map_free_vars=False) for a, b in zip(zeroed, stored))
            and structural_equal(substitute(init_realize.predicate, rename), realize.predicate, map_free_vars=False))


def _first_reduction_step(block: Block) -> PrimExpr:
    """`every reduce iter var of block is at the minimum of its domain` (true if none)."""
    condition: PrimExpr = IntImm(1, "bool")
    for iv in block.iter_vars:
        if iv.kind == "reduce":
            at_min = EQ(iv.var, iv.dom.min)
            condition = at_min if isinstance(condition, IntImm) else And(condition, at_min)
    return condition


class _Matcher:
    def __init__(self, func: PrimFunc, block: Block, intrinsic: TensorIntrin) -> None:
        self.func, self.block, self.intrin = func, block, intrinsic
        self.desc = intrinsic.desc
        self.result = Match()
        self.desc_size_vars = set(free_vars(self.desc.body)) | {
            v for b in self.desc.buffers for e in (*b.shape, *b.strides) for v in free_vars(e)}
        self.loop_map: dict[Var, Var] = {}  # desc loop var -> program loop var
        self.inner: set[Var] = set()
        self.bounds: dict[Var, tuple[int, int]] = {}

    def fail(self, message: str, spot: Any = None, hint: str | None = None) -> ScheduleError:
        return ScheduleError(f"tensorize: {self.intrin.name}: {message}", ir=self.func,
                             spot=spot if spot is not None else self.block, hint=hint)

    def run(self) -> Match:
        loops, realize = _nest(self.block.body)
        d_loops, d_realize = _desc_nest(self.desc)
        if realize is None:
            raise self.fail(f"block {self.block.name!r} is not a loop nest around one block; tensorize a "
                            "loop, or blockize one first")
        if d_realize is None:
            raise self.fail("the description is not a loop nest around one block")
        if len(loops) != len(d_loops):
            raise self.fail(f"the tile has {len(loops)} loops, the description {len(d_loops)}",
                            hint=f"split the loops so that the tile is {self._desc_shape(d_loops)}")
        inner, d_inner = realize.block, d_realize.block
        self.inner = {l.loop_var for l in loops}
        moving = self._moving_iters(realize)
        if len(moving) != len(d_inner.iter_vars):
            raise self.fail(f"block {inner.name!r} has {len(moving)} iter vars that move in the tile, the "
                            f"description {len(d_inner.iter_vars)}", spot=inner)
        self.bounds = {l.loop_var: (0, as_int(l.extent) - 1) for l in loops
                       if as_int(l.extent) is not None and as_int(l.min) == 0}
        self._match_loops(loops, d_loops, realize, d_realize, moving)
        self._match_predicate(realize, d_realize)
        if (inner.init is None) != (d_inner.init is None):
            has = "has" if inner.init is not None else "has no"
            raise self.fail(f"block {inner.name!r} {has} init, the description does not agree",
                            spot=inner, hint="decompose_reduction the block first" if inner.init else None)
        body = substitute(inner.body, dict(zip((iv.var for iv in inner.iter_vars), realize.iter_values)))
        d_body = substitute(d_inner.body, dict(zip((iv.var for iv in d_inner.iter_vars), d_realize.iter_values)))
        d_body = self._in_program(d_body)
        try:
            self._stmt(body, d_body)
            if inner.init is not None:
                init = substitute(inner.init, dict(zip((iv.var for iv in inner.iter_vars), realize.iter_values)))
                d_init = substitute(d_inner.init, dict(zip((iv.var for iv in d_inner.iter_vars),
                                                           d_realize.iter_values)))
                self._stmt(init, self._in_program(d_init))
        except _Mismatch as exc:
            raise self.fail(f"the computation differs from the description: {exc}",
                            spot=exc.spot if exc.spot is not None else inner,
                            hint="the description computes:\n" + _show(d_inner.body)) from None
        for d_buffer in self.desc.buffers:
            if d_buffer not in self.result.buffers:
                raise self.fail(f"the description's buffer {d_buffer.name} is not used by the tile")
            self._match_layout(d_buffer)
        return self.result

    def _match_predicate(self, realize: BlockRealize, d_realize: BlockRealize) -> None:
        """A description guarded by `x < P` (P a size var) matches a tile guarded by `x + offset < 0`
        (P = -offset) or an unguarded tile (P = max of x + 1)."""
        predicate, d_predicate = realize.predicate, d_realize.predicate
        imperfect = self.fail(f"block {realize.block.name!r} is guarded by a predicate (an imperfect tile) "
                              "that the description does not have", spot=predicate,
                              hint="use tile sizes that divide the extents, or an intrinsic for partial tiles")
        if _is_true(d_predicate):
            if not _is_true(predicate):
                raise imperfect
            return
        d_form = _lt_form(self._in_program(d_predicate))
        if d_form is None:
            raise self.fail("the description's predicate is not of the form `x < P`")
        moving = Affine.make({t: c for t, c in d_form.terms if _term_vars(t) & self.inner}, 0)
        rest = d_form - moving
        unknown = [(t, c) for t, c in rest.terms if isinstance(t, Var) and t in self.desc_size_vars]
        if len(unknown) != 1 or unknown[0][1] != -1 or len(rest.terms) != 1:
            raise self.fail("the description's predicate is not of the form `x < P`")
        var = unknown[0][0]
        if _is_true(predicate):
            bounds = moving.bounds(self.bounds)
            if bounds is None:
                raise self.fail("the tile's loop extents are not constant", spot=realize)
            self.result.values[var] = const(bounds[1] + 1 + rest.const, var.dtype)
            return
        form = _lt_form(predicate)
        bound = None
        if form is None:
            # `x + offset < b` with b not affine but over size vars only (a row count
            # batch * seq): P = b - offset, b taken as it is
            split = _lt_parts(predicate)
            if split is None or not all(isinstance(v, SizeVar) for v in free_vars(split[1])):
                raise imperfect
            form, bound = split
        offset = form - moving
        if offset.vars() & self.inner:
            raise self.fail(f"the tile's predicate {_show(predicate)} does not have the description's form "
                            f"{_show(d_predicate)}", spot=predicate)
        value = (Affine((), rest.const) - offset).to_expr(var.dtype)
        if bound is not None:
            value = (bound if bound.dtype == var.dtype else Cast(var.dtype, bound)) + value
        self.result.values[var] = value

    def _in_program(self, node):
        """A description statement or expression over the program's loop vars.  A description is
        written in int32; a program loop of another index dtype (int64 shapes from the graph
        level) enters through a cast, which the affine matching looks through."""
        mapping = {d: (p if p.dtype == d.dtype else Cast(d.dtype, p)) for d, p in self.loop_map.items()}
        return substitute(node, mapping)

    @staticmethod
    def _desc_shape(d_loops: list[For]) -> str:
        return " x ".join(_show(l.extent) for l in d_loops)

    def _moving_iters(self, realize: BlockRealize) -> list[int]:
        """Positions of the inner block's iter vars bound to a tile loop.  The others are fixed
        for the whole tile (a convolution's window position outside a GEMM tile over channels):
        their values enter the accesses as part of the tile's origin."""
        return [i for i, value in enumerate(realize.iter_values) if set(free_vars(value)) & self.inner]

    def _match_loops(self, loops, d_loops, realize, d_realize, moving: list[int]) -> None:
        # Each moving iter var is bound to offset + one loop; the loops correspond through them.
        for d_index, (index, d_iv) in enumerate(zip(moving, d_realize.block.iter_vars)):
            iv = realize.block.iter_vars[index]
            if iv.kind != d_iv.kind:
                raise self.fail(f"iter var {iv.var.name} is {iv.kind}, the description's "
                                f"{d_iv.var.name} is {d_iv.kind}", spot=realize.block)
            loop = self._single_loop(realize.iter_values[index], set(l.loop_var for l in loops), realize)
            d_loop = self._single_loop(d_realize.iter_values[d_index], set(l.loop_var for l in d_loops), d_realize)
            if d_loop in self.loop_map or loop in self.loop_map.values():
                raise self.fail(f"loop {loop.name} binds two iter vars", spot=realize)
            self.loop_map[d_loop] = loop
        if len(self.loop_map) != len(loops):
            raise self.fail("some loops of the tile bind no iter var", spot=realize)
        by_var = {l.loop_var: l for l in loops}
        for d_l in d_loops:
            loop = by_var[self.loop_map[d_l.loop_var]]
            if as_int(loop.min) != 0:
                raise self.fail(f"loop {loop.loop_var.name} does not start at 0", spot=loop)
            self._bind(d_l.extent, loop.extent, f"extent of loop {loop.loop_var.name}", loop)

    def _single_loop(self, value: PrimExpr, loop_vars: set[Var], realize: BlockRealize) -> Var:
        form = normalize(value)
        moving = [(t, c) for t, c in (form.terms if form else ()) if isinstance(t, Var) and t in loop_vars]
        others = [t for t, _ in (form.terms if form else ()) if not isinstance(t, Var) and t.form.vars() & loop_vars]
        if form is None or len(moving) != 1 or moving[0][1] != 1 or others:
            raise self.fail(f"binding {_show(value)} of block {realize.block.name!r} is not `offset + loop` "
                            "for a single loop of the tile", spot=value,
                            hint="split the tile loops so that each one walks one iter var")
        return moving[0][0]

    # -- binding description variables ------------------------------------------------------

    def _bind(self, d_expr: PrimExpr, expr: PrimExpr, what: str, spot: Any) -> None:
        """Make d_expr (over description size vars) equal expr, binding at most one new var."""
        d_expr = substitute(d_expr, lambda v: self.result.values.get(v))
        d_form, form = normalize(d_expr), normalize(expr)
        if d_form is None or form is None:
            if not _same_expr(d_expr, expr):
                raise self.fail(f"{what} is {_show(expr)}, the description needs {_show(d_expr)}", spot=spot)
            return
        unknown = [(t, c) for t, c in d_form.terms if isinstance(t, Var) and t in self.desc_size_vars]
        unknown_ids = {id(t) for t, _ in unknown}
        known = Affine.make({t: c for t, c in d_form.terms if id(t) not in unknown_ids}, d_form.const)
        if not unknown:
            if (form - known).key() != Affine((), 0).key():
                raise self.fail(f"{what} is {_show(expr)}, the description needs {_show(d_expr)}", spot=spot)
            return
        if len(unknown) > 1:
            raise self.fail(f"{what}: the description expression {_show(d_expr)} has several unknowns", spot=spot)
        var, coef = unknown[0]
        rest = form - known
        if rest.const % coef or any(c % coef for _, c in rest.terms):
            raise self.fail(f"{what} is {_show(expr)}, which is not {_show(d_expr)} for any "
                            f"{var.name} (it must be a multiple of {coef})", spot=spot)
        value = Affine.make({t: c // coef for t, c in rest.terms}, rest.const // coef)
        if value.is_const() and value.const < 0:
            raise self.fail(f"{what} is {_show(expr)}, which makes {var.name} negative", spot=spot)
        self.result.values[var] = value.to_expr(var.dtype)

    # -- structural comparison ----------------------------------------------------------------

    def _stmt(self, stmt: Stmt, d_stmt: Stmt) -> None:
        if type(stmt) is not type(d_stmt):
            raise _Mismatch(f"{type(stmt).__name__} where the description has {type(d_stmt).__name__}", stmt)
        if isinstance(stmt, BufferStore):
            self._access(stmt.buffer, stmt.indices, d_stmt.buffer, d_stmt.indices, stmt)
            self._expr(stmt.value, d_stmt.value)
            return
        self._fields(stmt, d_stmt)

    def _fields(self, node: Node, d_node: Node) -> None:
        for name in node.fields():
            a, b = getattr(node, name), getattr(d_node, name)
            if isinstance(a, PrimExpr):
                self._expr(a, b)
            elif isinstance(a, Stmt):
                self._stmt(a, b)
            elif isinstance(a, tuple):
                if len(a) != len(b):
                    raise _Mismatch(f"{type(node).__name__}.{name} has {len(a)} items, the description {len(b)}", node)
                for x, y in zip(a, b):
                    if isinstance(x, PrimExpr):
                        self._expr(x, y)
                    elif isinstance(x, Stmt):
                        self._stmt(x, y)
                    elif x != y:
                        raise _Mismatch(f"{type(node).__name__}.{name} differs", node)
            elif isinstance(a, Node):
                raise _Mismatch(f"cannot compare {type(a).__name__}", node)
            elif a != b:
                raise _Mismatch(f"{type(node).__name__}.{name} is {a!r}, the description has {b!r}", node)

    def _expr(self, expr: PrimExpr, d_expr: PrimExpr) -> None:
        if isinstance(d_expr, Var) and d_expr in self.desc_size_vars:
            if free_vars(expr) and set(free_vars(expr)) & self.inner:
                raise _Mismatch(f"{_show(expr)} moves inside the tile where the description has "
                                f"the parameter {d_expr.name}", expr)
            bound = self.result.values.get(d_expr)
            if bound is not None and not _same_expr(bound, expr):
                raise _Mismatch(f"{d_expr.name} would be both {_show(bound)} and {_show(expr)}", expr)
            self.result.values[d_expr] = expr
            return
        if type(expr) is not type(d_expr):
            raise _Mismatch(f"{_show(expr)} where the description has {_show(d_expr)}", expr)
        if expr.dtype != d_expr.dtype:
            raise _Mismatch(f"{_show(expr)} is {expr.dtype}, the description's {_show(d_expr)} is "
                            f"{d_expr.dtype}", expr)
        if isinstance(expr, Var):
            if expr is not d_expr:
                raise _Mismatch(f"variable {expr.name} where the description has {d_expr.name}", expr)
            return
        if isinstance(expr, (IntImm, FloatImm, StringImm)):
            if expr.value != d_expr.value:
                raise _Mismatch(f"constant {expr.value} where the description has {d_expr.value}", expr)
            return
        if isinstance(expr, BufferLoad):
            self._access(expr.buffer, expr.indices, d_expr.buffer, d_expr.indices, expr)
            return
        if isinstance(expr, (Add, Mul)):
            # x + y matches y + x: te and hand-written descriptions order operands differently.
            saved = self._snapshot()
            try:
                self._expr(expr.a, d_expr.a)
                self._expr(expr.b, d_expr.b)
            except _Mismatch:
                self._restore(saved)
                try:
                    self._expr(expr.a, d_expr.b)
                    self._expr(expr.b, d_expr.a)
                except _Mismatch:
                    self._restore(saved)
                    raise _Mismatch(f"{_show(expr)} where the description has {_show(d_expr)}", expr) from None
            return
        self._fields(expr, d_expr)

    def _snapshot(self):
        r = self.result
        return dict(r.buffers), dict(r.origins), dict(r.values), dict(r.dims)

    def _restore(self, saved) -> None:
        self.result.buffers, self.result.origins, self.result.values, self.result.dims = (dict(s) for s in saved)

    def _access(self, buffer: Buffer, indices, d_buffer: Buffer, d_indices, spot: Any) -> None:
        mapped = self.result.buffers.get(d_buffer)
        if mapped is None:
            if buffer in self.result.buffers.values():
                raise _Mismatch(f"buffer {buffer.name} plays two roles of the description", spot)
            if buffer.dtype != d_buffer.dtype:
                raise _Mismatch(f"buffer {buffer.name} is {buffer.dtype}, the description's {d_buffer.name} "
                                f"is {d_buffer.dtype}", spot)
            if buffer.ndim < d_buffer.ndim:
                raise _Mismatch(f"buffer {buffer.name} has {buffer.ndim} dims, the description's "
                                f"{d_buffer.name} needs {d_buffer.ndim}", spot)
            self.result.buffers[d_buffer] = buffer
        elif mapped is not buffer:
            raise _Mismatch(f"{buffer.name} is accessed where the description accesses {d_buffer.name}, "
                            f"which is already {mapped.name}", spot)
        dims = self.result.dims.get(d_buffer)
        if dims is None:
            dims = self.result.dims[d_buffer] = self._tile_dims(buffer, indices, d_buffer, spot)
        origin = []
        d_of = dict(zip(dims, d_indices))
        for axis, index in enumerate(indices):
            form = normalize(index, self.bounds)
            if axis not in d_of:
                if form is None or form.vars() & self.inner:
                    raise _Mismatch(f"index {_show(index)} of {buffer.name} moves inside the tile in a "
                                    f"dimension the description does not have", spot)
                origin.append(form)
                continue
            d_form = normalize(d_of[axis], self.bounds)
            if form is None or d_form is None:
                raise _Mismatch(f"index {_show(index)} of {buffer.name} is not affine", spot)
            offset = form - d_form
            if offset.vars() & self.inner:
                raise _Mismatch(f"index {_show(index)} of {buffer.name} does not follow the description's "
                                f"{_show(d_of[axis])} (they differ by {_show(offset.to_expr())}, which moves "
                                "inside the tile)", spot)
            origin.append(offset)
        known = self.result.origins.get(d_buffer)
        if known is None:
            self.result.origins[d_buffer] = tuple(origin)
        elif any(a.key() != b.key() for a, b in zip(known, origin)):
            raise _Mismatch(f"two accesses of {buffer.name} are at different offsets from the description's", spot)

    def _tile_dims(self, buffer: Buffer, indices, d_buffer: Buffer, spot: Any) -> tuple[int, ...]:
        """The dims of `buffer` that play the description's dims: its last ones, unless an index
        before them moves in the tile; then exactly the dims whose indices move (a convolution's
        output [n, o, y, x] is a C[o, x] tile with y fixed between its dims)."""
        lead = buffer.ndim - d_buffer.ndim
        trailing = tuple(range(lead, buffer.ndim))
        moving = []
        for axis, index in enumerate(indices):
            form = normalize(index, self.bounds)
            if form is None or form.vars() & self.inner:
                moving.append(axis)
        if all(axis >= lead for axis in moving) or len(moving) != d_buffer.ndim:
            return trailing
        return tuple(moving)

    def _match_layout(self, d_buffer: Buffer) -> None:
        buffer = self.result.buffers[d_buffer]
        dims = self.result.dims[d_buffer]
        lead = buffer.ndim - d_buffer.ndim
        strides = [strides_of(buffer)[axis] for axis in dims]
        if d_buffer.strides:
            for axis, stride, d_stride in zip(dims, strides, d_buffer.strides):
                self._bind(d_stride, stride, f"stride {axis} of {buffer.name}", buffer)
        elif dims != tuple(range(lead, buffer.ndim)) or not _compact_tail(buffer, d_buffer, lead):
            raise self.fail(f"buffer {buffer.name} is not laid out as the description's compact "
                            f"{d_buffer.name}", spot=buffer)
        if buffer.scope not in ("global", "local", "global.packed"):
            raise self.fail(f"buffer {buffer.name} is in scope {buffer.scope!r}, which a C micro-kernel "
                            "cannot address", spot=buffer)


def strides_of(buffer: Buffer) -> tuple[PrimExpr, ...]:
    """Element strides: explicit ones, else those of compact row-major layout (constants folded)."""
    if buffer.strides:
        return buffer.strides
    strides: list[PrimExpr] = []
    running: PrimExpr = const(1, "int32")
    for dim in reversed(buffer.shape):
        strides.append(running)
        if as_int(running) is not None and as_int(dim) is not None:
            running = const(as_int(running) * as_int(dim), "int32")
        elif as_int(running) == 1:
            running = dim
        else:
            running = running * dim
    return tuple(reversed(strides))


def _compact_tail(buffer: Buffer, d_buffer: Buffer, lead: int) -> bool:
    # A description buffer without strides is compact: every dim but the first must match exactly.
    return all(_same_expr(a, b) for a, b in zip(buffer.shape[lead + 1:], d_buffer.shape[1:]))


# ----------------------------------------------------------------------------- instantiation

def instantiate(intrinsic: TensorIntrin, match: Match, impl: PrimFunc | None = None) -> Stmt:
    """The implementation's body (or that of `impl`, its init form) with its buffers and size
    vars bound as the match says."""
    impl, desc = impl or intrinsic.impl, intrinsic.desc
    var_map: dict[Var, PrimExpr] = dict(match.values)
    buffer_map: dict[Buffer, Buffer] = {}
    for i_buf, d_buf in zip(impl.buffers, desc.buffers):
        buffer_map[i_buf] = d_buf
        for i_part, d_part in zip((*i_buf.shape, *i_buf.strides), (*d_buf.shape, *d_buf.strides)):
            if isinstance(i_part, Var) and i_part is not d_part and isinstance(d_part, Var) and d_part in match.values:
                var_map[i_part] = match.values[d_part]
    for i_var, d_var in zip(impl.scalar_params, desc.scalar_params):
        if d_var in match.values:
            var_map[i_var] = match.values[d_var]
    body = _Instantiator(buffer_map, match, var_map).visit(impl.body)
    return _guard_first_iteration(desc, match, body)


def _guard_first_iteration(desc: PrimFunc, match: Match, body: Stmt) -> Stmt:
    """body under `if <the description's predicate at the tile origin>` when it has a predicate.

    A partial-tile description matches every tile of an imperfect split, including tiles that lie
    wholly past the edge (nothing to do); the guard skips those, so no pointer is formed to
    memory outside the buffers.
    """
    from ...ast import IfThenElse

    _, d_realize = _desc_nest(desc)
    if d_realize is None or _is_true(d_realize.predicate):
        return body
    loops, _ = _desc_nest(desc)
    at_origin = {l.loop_var: const(0, l.loop_var.dtype) for l in loops}
    condition = substitute(substitute(d_realize.predicate, at_origin), dict(match.values))
    form = _lt_form(condition)
    if form is not None and form.is_const():
        return body if form.const < 0 else Evaluate(const(0))
    if form is not None:  # print it as `terms < constant`: `vi_o * 6 < 10`
        from ...ast import LT

        dtype = condition.a.dtype
        condition = LT(Affine(form.terms, 0).to_expr(dtype), const(-form.const, dtype))
    return IfThenElse(condition, body)


class _Instantiator(Mutator):
    def __init__(self, buffer_map, match: Match, var_map) -> None:
        super().__init__()
        self.to_desc, self.match, self.var_map = buffer_map, match, var_map

    def _target(self, buffer: Buffer, indices) -> tuple[Buffer, tuple[PrimExpr, ...]]:
        d_buffer = self.to_desc.get(buffer, buffer)
        if d_buffer not in self.match.buffers:
            return buffer, indices
        target = self.match.buffers[d_buffer]
        origin = self.match.origins[d_buffer]
        index_of = dict(zip(self.match.dims[d_buffer], indices))
        out = []
        for axis, o in enumerate(origin):
            # each index in the dtype of the dimension it indexes (an int64 dim of the program's
            # buffer indexed by an int32 expression of the description would be cast, and its
            # offsets hidden from the analyses that follow, such as the compaction of a stack tile)
            dim_dtype = target.shape[axis].dtype if target.shape[axis].dtype.is_integer else None
            index = index_of.get(axis)
            if index is None:
                out.append(o.to_expr(dim_dtype) if dim_dtype is not None else o.to_expr())
                continue
            dtype = dim_dtype or index.dtype
            form = normalize(index)
            out.append((o + form).to_expr(dtype) if form is not None else o.to_expr(dtype) + Cast(dtype, index))
        return target, tuple(out)

    def visit_BufferLoad(self, load: BufferLoad) -> PrimExpr:
        indices = self.visit(load.indices)
        buffer, indices = self._target(load.buffer, indices)
        return BufferLoad(buffer, indices)

    def visit_BufferStore(self, store: BufferStore) -> Stmt:
        value, indices = self.visit(store.value), self.visit(store.indices)
        buffer, indices = self._target(store.buffer, indices)
        return BufferStore(buffer, value, indices)

    def visit_Var(self, var: Var) -> PrimExpr:
        value = self.var_map.get(var)
        if value is None:
            return var
        return value if value.dtype == var.dtype else Cast(var.dtype, value)

    visit_SizeVar = visit_Var

    def visit_Mul(self, node):
        return _fold(self.generic_visit(node))

    visit_Add = visit_Mul


def _fold(expr: PrimExpr) -> PrimExpr:
    # Size vars bound to constants leave products like 2 * 32 in call arguments; fold them.
    if expr.dtype.is_integer and as_int(getattr(expr, "a", None)) is not None and as_int(getattr(expr, "b", None)) is not None:
        form = normalize(expr)
        if form is not None and form.is_const():
            return const(form.const, expr.dtype)
    return expr


def _with_requirements(func: PrimFunc, intrinsic: TensorIntrin) -> PrimFunc:
    attrs = dict(func.attrs)
    for key, values in (("c_helpers", intrinsic.c_helpers), ("c_includes", intrinsic.c_includes),
                        ("cpu_features", intrinsic.cpu_features)):
        current = tuple(attrs.get(key, ()))
        attrs[key] = current + tuple(v for v in values if v not in current)
    for key, value in intrinsic.func_attrs.items():
        if key == "relocatable_calls":  # a union: two intrinsics in one function keep both
            current = tuple(attrs.get(key, ()))
            value = current + tuple(v for v in value if v not in current)
        attrs[key] = value
    for name, accesses in intrinsic.extern_access().items():  # the operands' declared access
        attrs[EXTERN_ACCESS] = merge_extern_access(attrs.get(EXTERN_ACCESS), name, accesses)
    return func.with_(attrs=attrs)


# ----------------------------------------------------------------------------- small helpers

def _lt_form(predicate: PrimExpr) -> Affine | None:
    """The affine form of a - b for a predicate a < b (integers), else None."""
    from ...ast import LT

    if not isinstance(predicate, LT) or not predicate.a.dtype.is_integer:
        return None
    a, b = normalize(predicate.a), normalize(predicate.b)
    return None if a is None or b is None else a - b


def _lt_parts(predicate: PrimExpr) -> tuple[Affine, PrimExpr] | None:
    """(the affine form of a, b) for a predicate a < b (integers) whose a is affine, else None."""
    from ...ast import LT

    if not isinstance(predicate, LT) or not predicate.a.dtype.is_integer:
        return None
    a = normalize(predicate.a)
    return None if a is None else (a, predicate.b)


def _term_vars(term) -> set[Var]:
    return {term} if isinstance(term, Var) else term.form.vars()


def _is_true(expr: PrimExpr) -> bool:
    return isinstance(expr, IntImm) and expr.value == 1 and expr.dtype.is_bool


def _same_expr(a: PrimExpr, b: PrimExpr) -> bool:
    from ...ast import structural_equal

    fa, fb = normalize(a), normalize(b)
    if fa is not None and fb is not None:
        return fa.key() == fb.key()
    return structural_equal(a, b, map_free_vars=False)


def _show(node: Any) -> str:
    try:
        return node.script()
    except Exception:
        return repr(node)
