"""Turning a loop body into vector IR, one chunk of lanes at a time (the core of `vectorize`).

`LaneVectorizer(var, base, lanes).stmt(body)` rewrites body as if it ran for var = base, base + 1,
..., base + lanes - 1 all at once: var becomes `Ramp(base, 1, lanes)`, lane-dependent values get
vector dtypes, lane-invariant ones stay scalar (broadcast where they meet a vector).  It raises
`CannotVectorize` when that would not be the same program; the rules are in `stmt`'s docstring.
"""
from __future__ import annotations

from typing import Any

from ...ast import (
    Add, AssertStmt, Broadcast, BufferLoad, BufferStore, Call, Cast, CompareOp, Evaluate, FloorDiv,
    FloorMod, For, IfThenElse, IntImm, Let, LetStmt, Mul, Not, PrimExpr, Ramp, Select, SeqStmt, Stmt,
    Sub, TruncDiv, TruncMod, Var,
)
from ...ast.expr import BinaryOp, FloatImm, StringImm, as_int
from ...ast.functor import free_vars, is_pure, post_order_visit
from ...ast.intrinsics import ANY_UNARY, FLOAT_BINARY, FLOAT_UNARY, PREDICATES
from ...shape.canonical import inner_span, linear_form
from ...shape.keys import expr_key
from ...shape.simplify import simplify_expr

# Intrinsics that apply lane by lane and have no effects: they vectorise as calls on vectors.
ELEMENTWISE_CALLS = frozenset(FLOAT_UNARY + FLOAT_BINARY + ANY_UNARY + PREDICATES + ("reinterpret",))


class CannotVectorize(Exception):
    """The body cannot be run as straight-line vector code; the reason is the message."""


def is_vector(expr: PrimExpr) -> bool:
    return expr.dtype.lanes > 1


def broadcast(expr: PrimExpr, lanes: int) -> PrimExpr:
    """expr as a vector of `lanes` lanes (a scalar is repeated)."""
    return expr if expr.dtype.lanes == lanes else Broadcast(expr, lanes)


class LaneVectorizer:
    """Rewrites statements and expressions for `lanes` consecutive values of `var` starting at base."""

    def __init__(self, var: Var, base: PrimExpr, lanes: int) -> None:
        self.var, self.lanes = var, lanes
        self.ramp = Ramp(base, IntImm(1, var.dtype), lanes)
        self.vector_vars: dict[Var, Var] = {}
        self.inner_vars: set[Var] = set()  # vars bound inside the vectorised body
        self.inner_extents: dict[Var, int | None] = {}  # their constant extents (None: unknown)
        self.stores: dict[Any, tuple[Any, PrimExpr]] = {}  # buffer key -> (index key, index)
        self.loads: list[tuple[Any, Any, PrimExpr]] = []  # (buffer key, index key, load)

    # ------------------------------------------------------------------ statements

    def body(self, stmt: Stmt) -> Stmt:
        """stmt for all lanes at once, after checking that lanes cannot interfere through memory.

        Rules: every buffer the body stores to is stored to and loaded from at one and the same
        vector index, a Ramp with a non-zero constant stride whose base moves, over all the inner
        loops, by less than that stride, so each lane owns its own elements of it; other buffers
        are only read (gathers allowed).  Inner loops must have lane-invariant bounds; `if` conditions must be
        lane-invariant; there is no Allocate, While or evaluated call (their effects would run once
        instead of once per lane).
        """
        result = self.stmt(stmt)
        for buffer_key, index_key, load in self.loads:
            if buffer_key in self.stores and self.stores[buffer_key][0] != index_key:
                raise CannotVectorize(
                    f"{load.buffer.name} is stored to and also loaded at another index in the loop"
                )
        return result

    def stmt(self, stmt: Stmt) -> Stmt:
        if isinstance(stmt, BufferStore):
            return self._store(stmt)
        if isinstance(stmt, SeqStmt):
            return SeqStmt(tuple(self.stmt(s) for s in stmt.stmts))
        if isinstance(stmt, IfThenElse):
            condition = self.expr(stmt.condition)
            if is_vector(condition):
                raise CannotVectorize("an if inside the loop depends on the lane")
            then_case = self.stmt(stmt.then_case)
            else_case = self.stmt(stmt.else_case) if stmt.else_case is not None else None
            return IfThenElse(condition, then_case, else_case)
        if isinstance(stmt, For):
            minimum, extent = self.expr(stmt.min), self.expr(stmt.extent)
            if is_vector(minimum) or is_vector(extent):
                raise CannotVectorize(f"inner loop {stmt.loop_var.name} has lane-dependent bounds")
            if stmt.kind == "thread_binding":
                raise CannotVectorize(f"inner loop {stmt.loop_var.name} is bound to a thread axis")
            self.inner_vars.add(stmt.loop_var)
            self.inner_extents[stmt.loop_var] = as_int(extent)
            return stmt.with_(min=minimum, extent=extent, body=self.stmt(stmt.body))
        if isinstance(stmt, LetStmt):
            value = self.expr(stmt.value)
            self.inner_vars.add(stmt.var)
            self.inner_extents[stmt.var] = None
            if is_vector(value):
                vector_var = Var(stmt.var.name, value.dtype)
                self.vector_vars[stmt.var] = vector_var
                self.inner_vars.add(vector_var)
                return LetStmt(vector_var, value, self.stmt(stmt.body))
            return stmt.with_(value=value, body=self.stmt(stmt.body))
        if isinstance(stmt, AssertStmt):
            condition = self.expr(stmt.condition)
            if is_vector(condition):
                raise CannotVectorize("an assertion depends on the lane")
            return stmt.with_(condition=condition, body=self.stmt(stmt.body))
        if isinstance(stmt, Evaluate) and isinstance(stmt.value, IntImm):
            return stmt
        raise CannotVectorize(f"{type(stmt).__name__} inside the loop")

    def _store(self, store: BufferStore) -> Stmt:
        if len(store.indices) != 1:
            raise CannotVectorize(f"store to {store.buffer.name} is not flattened")
        index = simplify_expr(self.expr(store.indices[0]))
        if not (isinstance(index, Ramp) and isinstance(index.stride, IntImm) and index.stride.value != 0):
            raise CannotVectorize(f"store to {store.buffer.name} is not at distinct addresses per lane")
        if any(v in self.inner_vars for v in free_vars(index)):
            # lanes stay apart if the inner loops move the index by less than one lane's stride
            span = inner_span(index.base, self.inner_extents)
            if span is None or span >= abs(index.stride.value):
                raise CannotVectorize(f"store to {store.buffer.name} moves with an inner loop")
        key = expr_key(index)
        buffer_key = id(store.buffer)
        if buffer_key in self.stores and self.stores[buffer_key][0] != key:
            raise CannotVectorize(f"{store.buffer.name} is stored to at two different indices")
        self.stores[buffer_key] = (key, index)
        value = broadcast(self.expr(store.value), self.lanes)
        return BufferStore(store.buffer, value, (index,))

    # ------------------------------------------------------------------ expressions

    def expr(self, e: PrimExpr) -> PrimExpr:
        """e for all lanes: a vector when it depends on the lane, else the scalar itself."""
        if isinstance(e, Var):
            if e is self.var:
                return self.ramp
            return self.vector_vars.get(e, e)
        if isinstance(e, (IntImm, FloatImm, StringImm)):
            return e
        if isinstance(e, (Ramp, Broadcast)) or e.dtype.lanes > 1:
            raise CannotVectorize("the loop already contains vector code")
        if isinstance(e, BinaryOp):
            return self._binary(e)
        if isinstance(e, Not):
            return Not(self.expr(e.a))
        if isinstance(e, Select):
            parts = [self.expr(e.condition), self.expr(e.true_value), self.expr(e.false_value)]
            if not any(is_vector(p) for p in parts):
                return e.with_(condition=parts[0], true_value=parts[1], false_value=parts[2])
            return Select(*(broadcast(p, self.lanes) for p in parts))
        if isinstance(e, Cast):
            value = self.expr(e.value)
            if isinstance(value, Ramp) and _widening_int(value.dtype.element, e.dtype.element):
                # each lane is an index the scalar loop computes in the narrow type (where C has no
                # wrap-around for signed ints), so the widened lanes are a Ramp of the widened parts
                wide = e.dtype.element
                return Ramp(Cast(wide, value.base), Cast(wide, value.stride), value.lanes)
            return Cast(e.dtype.with_lanes(value.dtype.lanes), value) if is_vector(value) else e.with_(value=value)
        if isinstance(e, BufferLoad):
            indices = tuple(self.expr(i) for i in e.indices)
            if len(indices) == 1 and is_vector(indices[0]):
                indices = (simplify_expr(indices[0]),)
            load = BufferLoad(e.buffer, indices) if any(a is not b for a, b in zip(indices, e.indices)) else e
            self.loads.append((id(e.buffer), expr_key(indices[0]) if len(indices) == 1 else None, load))
            return load
        if isinstance(e, Let):
            value = self.expr(e.value)
            if is_vector(value):
                vector_var = Var(e.var.name, value.dtype)
                self.vector_vars[e.var] = vector_var
                return Let(vector_var, value, self.expr(e.body))
            return e.with_(value=value, body=self.expr(e.body))
        if isinstance(e, Call):
            return self._call(e)
        raise CannotVectorize(f"no vector form for {type(e).__name__}")

    def _binary(self, e: BinaryOp) -> PrimExpr:
        a, b = self.expr(e.a), self.expr(e.b)
        if not is_vector(a) and not is_vector(b):
            return e.with_(a=a, b=b)
        if isinstance(e, (Add, Sub, Mul)) and e.dtype.is_integer:
            ramp = _ramp_arith(type(e), a, b)
            if ramp is not None:
                return ramp
        if isinstance(e, (FloorDiv, FloorMod, TruncDiv, TruncMod)) and is_vector(b):
            raise CannotVectorize("integer division by a lane-dependent divisor")
        return type(e)(broadcast(a, self.lanes), broadcast(b, self.lanes))

    def _call(self, call: Call) -> PrimExpr:
        args = [self.expr(a) for a in call.args]
        vector = any(is_vector(a) for a in args)
        if call.op == "if_then_else" and len(args) == 3:
            condition, then_value, else_value = args
            if not vector:
                return call.with_(args=tuple(args))
            if not is_vector(condition):
                # every lane takes the same branch: keep the lazy form
                lanes_args = (condition, broadcast(then_value, self.lanes), broadcast(else_value, self.lanes))
                return Call("if_then_else", lanes_args, call.dtype.with_lanes(self.lanes))
            # loads the condition itself makes are made for every lane anyway: the arms may repeat them
            made = {_load_key(load) for load in _loads_in(condition)}
            if _safe_to_speculate(args[1], made) and _safe_to_speculate(args[2], made):
                return Select(*(broadcast(a, self.lanes) for a in args))
            raise CannotVectorize("if_then_else with a lane-dependent condition guards a load")
        if not is_pure(call):
            raise CannotVectorize(f"call to {call.op} has effects")
        if not vector:
            return call.with_(args=tuple(args))
        if call.op not in ELEMENTWISE_CALLS:
            raise CannotVectorize(f"no vector form of {call.op}")
        return Call(call.op, tuple(broadcast(a, self.lanes) for a in args), call.dtype.with_lanes(self.lanes))


def _widening_int(source: Any, target: Any) -> bool:
    """A cast from a signed integer type to a wider signed one (exact on every value)."""
    return source.is_int and target.is_int and target.bits > source.bits


def _ramp_arith(op: type, a: PrimExpr, b: PrimExpr) -> PrimExpr | None:
    """Ramp +/- scalar, Ramp +/- Ramp, Ramp * scalar as a Ramp again (None when not of that form)."""
    if op is Mul:
        if isinstance(a, Ramp) and not is_vector(b):
            return Ramp(a.base * b, a.stride * b, a.lanes)
        if isinstance(b, Ramp) and not is_vector(a):
            return Ramp(a * b.base, a * b.stride, b.lanes)
        return None
    sign = 1 if op is Add else -1
    if isinstance(a, Ramp) and not is_vector(b):
        return Ramp(op(a.base, b), a.stride, a.lanes)
    if isinstance(b, Ramp) and not is_vector(a):
        stride = b.stride if sign == 1 else Sub(IntImm(0, b.stride.dtype), b.stride)
        return Ramp(op(a, b.base), stride, b.lanes)
    if isinstance(a, Ramp) and isinstance(b, Ramp) and a.lanes == b.lanes:
        return Ramp(op(a.base, b.base), op(a.stride, b.stride), a.lanes)
    return None


def _load_key(load: BufferLoad) -> Any:
    return id(load.buffer), expr_key(load.indices)


def _loads_in(expr: PrimExpr) -> list[BufferLoad]:
    found: list[BufferLoad] = []
    post_order_visit(expr, lambda node: found.append(node) if isinstance(node, BufferLoad) else None)
    return found


def _safe_to_speculate(expr: PrimExpr, made_loads: set) -> bool:
    """Evaluating expr in a lane that did not ask for it cannot fault.

    No calls other than elementwise math, no integer division by a non-constant, and no loads
    except ones already made unconditionally (made_loads: keys of vectorised loads).
    """
    safe = True

    def check(node: Any) -> None:
        nonlocal safe
        if isinstance(node, BufferLoad):
            if _load_key(node) not in made_loads:
                safe = False
        elif isinstance(node, Call) and node.op not in ELEMENTWISE_CALLS:
            safe = False
        elif isinstance(node, (FloorDiv, FloorMod, TruncDiv, TruncMod)) and not (
                isinstance(node.b, IntImm) and node.b.value != 0):
            safe = False

    post_order_visit(expr, check)
    return safe


def lane_condition_is_convex(condition: PrimExpr, var: Var) -> bool:
    """condition is a conjunction of comparisons whose sides are linear in var (or free of it).

    For such a condition the lanes where it holds form one interval, so it holds for every lane of
    a chunk exactly when it holds for the first and the last (assuming no index overflow, as
    spec/shapes.md does).
    """
    from ...ast import And

    if isinstance(condition, And):
        return lane_condition_is_convex(condition.a, var) and lane_condition_is_convex(condition.b, var)
    if var not in free_vars(condition):
        return True
    if not isinstance(condition, CompareOp) or type(condition).__name__ == "NE":
        return False
    if not condition.a.dtype.is_integer:
        return False
    return _linear_in(condition.a, var) and _linear_in(condition.b, var)


def every_lane_condition(condition: PrimExpr, var: Var, first: PrimExpr, last: PrimExpr) -> PrimExpr:
    """A scalar condition that holds exactly when condition holds for every var in [first, last].

    condition must pass `lane_condition_is_convex`.  Each comparison is tested at the one end of the
    range where it is tightest (both ends for an equality).
    """
    from ...ast import And, EQ, GE, GT, LE, LT, substitute

    if isinstance(condition, And):
        return And(every_lane_condition(condition.a, var, first, last),
                   every_lane_condition(condition.b, var, first, last))
    if var not in free_vars(condition):
        return condition
    at_first = substitute(condition, {var: first})
    at_last = substitute(condition, {var: last})
    slope = linear_form(condition.a).add(linear_form(condition.b), -1).coefficient(var)
    kind = type(condition)
    if kind is EQ or slope == 0:
        return And(at_first, at_last)
    grows = slope > 0
    if kind in (LT, LE):  # a - b must stay small: test where it is largest
        return at_last if grows else at_first
    if kind in (GT, GE):  # a - b must stay large: test where it is smallest
        return at_first if grows else at_last
    return And(at_first, at_last)


def _linear_in(expr: PrimExpr, var: Var) -> bool:
    if expr is var or var not in free_vars(expr):
        return True
    if isinstance(expr, (Add, Sub)):
        return _linear_in(expr.a, var) and _linear_in(expr.b, var)
    if isinstance(expr, Mul):
        if var not in free_vars(expr.b):
            return _linear_in(expr.a, var)
        if var not in free_vars(expr.a):
            return _linear_in(expr.b, var)
    return False
