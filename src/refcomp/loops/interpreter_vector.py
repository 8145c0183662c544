"""The interpreter's numpy fast path for innermost loops whose iterations are independent.

An innermost loop whose body is one store (or one block with one store, optionally an init and a
predicate) is run as numpy array operations over all its iterations at once, when that gives
bit for bit the scalar semantics:

* only operations whose numpy form is exact are accepted (integer + - * wrap in numpy too;
  float16/32/64 + - * / are correctly rounded by numpy; casts only where numpy's conversion is
  the IR's); anything else keeps the scalar loop;
* the store's flat indices must be distinct, and every load of the stored buffer must use the
  store's own indices, so no iteration reads what another writes;
* every check is made before anything is stored: an index out of bounds, a zero divisor or
  INT_MIN // -1 anywhere sends the whole loop back to the scalar path, which then reports the
  exact iteration (or computes the wrap-around);
* if_then_else evaluates each branch only on the iterations that take it.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..ast import (
    EQ, GE, GT, LE, LT, NE, Add, And, BlockRealize, BufferLoad, BufferStore, Call, Cast, FloorDiv,
    FloorMod, For, IntImm, Max, Min, Mul, Not, Or, PrimExpr, Select, Sub, Var, collect, substitute,
)
from ..ast.dtype import DataType
from ..ast.expr import Div, FloatImm
from ..ast.structural import structural_equal
from . import interpreter_values as values

MIN_EXTENT = 128  # shorter loops are not worth numpy's per-call overhead


class _Fallback(Exception):
    """Raised inside the fast path: run the scalar loop instead (nothing was stored yet)."""


def _numpy_ok(t: DataType) -> bool:
    """Dtypes whose buffers are array.array storage and whose arithmetic numpy does exactly."""
    return t.lanes == 1 and t.name in values.TYPECODES and t.name != "bfloat16"


_EXACT_CAST_BITS = {"float64": 53, "float32": 24, "float16": 11}


class _Plan:
    """What the generated code must pass to the fast path, in order."""

    def __init__(self) -> None:
        self.vars: list[Var] = []
        self.buffers: list[Any] = []

    def var_slot(self, var: Var) -> int:
        if var not in self.vars:
            self.vars.append(var)
        return self.vars.index(var)

    def buffer_slot(self, buffer: Any) -> int:
        if buffer not in self.buffers:
            self.buffers.append(buffer)
        return self.buffers.index(buffer)


def plan_loop(loop: For) -> "tuple[Callable, _Plan] | None":
    """A fast-path runner for loop, or None when the loop does not qualify."""
    body = loop.body
    init = None
    predicate = None
    if isinstance(body, BlockRealize):
        block = body.block
        if block.alloc_buffers or block.match_buffers or not isinstance(block.body, BufferStore):
            return None
        mapping = {iv.var: value for iv, value in zip(block.iter_vars, body.iter_values)}
        if any(iv.var.dtype.lanes != 1 for iv in block.iter_vars):
            return None
        store = substitute(block.body, mapping)
        if not (isinstance(body.predicate, IntImm) and body.predicate.value == 1):
            predicate = substitute(body.predicate, mapping)
        if block.init is not None:
            reduce_vars = [iv for iv in block.iter_vars if iv.kind == "reduce"]
            init = substitute(block.init, mapping)
            first = [EQ(mapping[iv.var], substitute(iv.dom.min, mapping)) for iv in reduce_vars]
            if not isinstance(init, BufferStore) or init.buffer is not store.buffer or not all(
                    structural_equal(a, b, map_free_vars=False) for a, b in zip(init.indices, store.indices)):
                return None
            init = (init, first)
    elif isinstance(body, BufferStore):
        store = body
    else:
        return None
    if not _numpy_ok(store.buffer.dtype) or store.value.dtype.lanes != 1:
        return None
    if not any(loop.loop_var in collect(i, Var) for i in store.indices):
        return None  # every iteration stores to one element (a reduction loop): keep it scalar
    # Every load of the stored buffer reads the store's own element.
    parts = [store.value, *store.indices] + ([predicate] if predicate is not None else [])
    if init is not None:
        parts += [init[0].value, *init[1]]
    for part in parts:
        for load in collect(part, BufferLoad):
            if load.buffer is store.buffer and not all(
                    structural_equal(a, b, map_free_vars=False) for a, b in zip(load.indices, store.indices)):
                return None
    plan = _Plan()
    try:
        value_fn = _compile(store.value, loop.loop_var, plan)
        index_fns = [_compile(i, loop.loop_var, plan) for i in store.indices]
        pred_fn = _compile(predicate, loop.loop_var, plan) if predicate is not None else None
        init_fns = None
        if init is not None:
            init_fns = (_compile(init[0].value, loop.loop_var, plan),
                        [_compile(c, loop.loop_var, plan) for c in init[1]])
    except _Unsupported:
        return None
    store_slot = plan.buffer_slot(store.buffer)
    np_dtype = store.buffer.dtype.numpy()

    misses = [0]

    def run(low: int, extent: int, scalars: tuple, storages: tuple, dims: tuple) -> bool:
        if misses[0] >= 4:
            return False  # this loop keeps needing the scalar path: stop trying
        if not attempt(low, extent, scalars, storages, dims):
            misses[0] += 1
            return False
        misses[0] = 0
        return True

    def attempt(low: int, extent: int, scalars: tuple, storages: tuple, dims: tuple) -> bool:
        target_storage = storages[store_slot]
        if any(other is target_storage for k, other in enumerate(storages) if k != store_slot):
            return False  # the stored buffer shares its data with another (an array passed twice)
        lanes = np.arange(low, low + extent, dtype=np.int64)
        ctx = _Context(scalars, storages, dims, plan)
        try:
            with np.errstate(all="ignore"):
                if pred_fn is not None:
                    active = np.broadcast_to(pred_fn(ctx, lanes), lanes.shape)
                    lanes = lanes[active]
                    if lanes.size == 0:
                        return True
                flat = ctx.flat(store_slot, [f(ctx, lanes) for f in index_fns], lanes.size)
                if flat.size > 1:
                    steps = np.diff(flat)
                    if not ((steps > 0).all() or (steps < 0).all()) and np.unique(flat).size != flat.size:
                        return False  # two iterations store to one element: not independent
                target = ctx.view(store_slot)
                if init_fns is not None:
                    init_value, conditions = init_fns
                    first = np.ones(lanes.shape, bool)
                    for c in conditions:
                        first &= np.broadcast_to(c(ctx, lanes), lanes.shape)
                    if first.any():
                        # the init's value is held back for the lanes that start the reduction
                        current = target[flat].copy()
                        current[first] = np.broadcast_to(init_value(ctx, lanes), lanes.shape)[first]
                        ctx.pending = (store_slot, flat, current)
                result = np.broadcast_to(np.asarray(value_fn(ctx, lanes)).astype(np_dtype, copy=False), lanes.shape)
        except _Fallback:
            return False
        target[flat] = result
        return True

    return run, plan


class _Context:
    """Values one run of the fast path sees: invariant scalars, buffer views, dims."""

    def __init__(self, scalars: tuple, storages: tuple, dims: tuple, plan: _Plan) -> None:
        self.scalars = scalars
        self.storages = storages
        self.dims = dims
        self.plan = plan
        self.views: dict[int, np.ndarray] = {}
        self.pending: tuple | None = None

    def view(self, slot: int) -> np.ndarray:
        view = self.views.get(slot)
        if view is None:
            buffer = self.plan.buffers[slot]
            view = np.frombuffer(self.storages[slot], buffer.dtype.numpy())
            self.views[slot] = view
        return view

    def flat(self, slot: int, indices: list, count: int) -> np.ndarray:
        """Flat positions of the lanes' indices; any index out of bounds sends us to the scalar path."""
        dims = self.dims[slot]
        flat: Any = 0
        for index, dim in zip(indices, dims):
            if isinstance(index, np.ndarray) and index.ndim:
                if index.size and (index.min() < 0 or index.max() >= dim):
                    raise _Fallback()
                index = index.astype(np.int64, copy=False)
            else:
                index = int(index)
                if not 0 <= index < dim:
                    raise _Fallback()
            flat = flat * dim + index
        if not isinstance(flat, np.ndarray):
            flat = np.full(count, flat, np.int64)
        return flat


class _Unsupported(Exception):
    """The expression has a node the fast path does not do exactly."""


def _compile(e: PrimExpr, loop_var: Var, plan: _Plan) -> Callable[[_Context, np.ndarray], Any]:
    """A function (ctx, lanes) -> value (a numpy array over the lanes, or a scalar)."""
    t = e.dtype
    if t.lanes != 1:
        raise _Unsupported()
    if isinstance(e, IntImm):
        value = bool(e.value) if t.is_bool else np.array(e.value, t.numpy())[()]
        return lambda ctx, lanes: value
    if isinstance(e, FloatImm):
        if not _numpy_ok(t):
            raise _Unsupported()
        value = np.array(e.value, t.numpy())[()]
        return lambda ctx, lanes: value
    if isinstance(e, Var):
        if e is loop_var:
            dtype = t.numpy()
            return lambda ctx, lanes: lanes.astype(dtype)
        slot = plan.var_slot(e)
        if t.is_bool:
            return lambda ctx, lanes: ctx.scalars[slot]
        dtype = t.numpy() if _numpy_ok(t) else None
        if dtype is None:
            raise _Unsupported()
        return lambda ctx, lanes: np.array(ctx.scalars[slot], dtype)[()]
    if isinstance(e, BufferLoad):
        if not _numpy_ok(e.buffer.dtype):
            raise _Unsupported()
        slot = plan.buffer_slot(e.buffer)
        index_fns = [_compile(i, loop_var, plan) for i in e.indices]

        def load(ctx: _Context, lanes: np.ndarray) -> np.ndarray:
            pending = ctx.pending
            flat = ctx.flat(slot, [f(ctx, lanes) for f in index_fns], lanes.size)
            if pending is not None and pending[0] == slot:
                return pending[2] if flat.shape == pending[1].shape else _Fallback.throw()
            return ctx.view(slot)[flat]

        return load
    if isinstance(e, (Add, Sub, Mul)) and _numpy_ok(t):
        a, b = _compile(e.a, loop_var, plan), _compile(e.b, loop_var, plan)
        op = {Add: np.add, Sub: np.subtract, Mul: np.multiply}[type(e)]
        dtype = t.numpy()
        return lambda ctx, lanes: op(a(ctx, lanes), b(ctx, lanes), dtype=dtype)
    if isinstance(e, Div) and _numpy_ok(t):
        a, b = _compile(e.a, loop_var, plan), _compile(e.b, loop_var, plan)
        dtype = t.numpy()
        return lambda ctx, lanes: np.true_divide(a(ctx, lanes), b(ctx, lanes), dtype=dtype)
    if isinstance(e, (FloorDiv, FloorMod)) and _numpy_ok(t) and t.is_integer:
        a, b = _compile(e.a, loop_var, plan), _compile(e.b, loop_var, plan)
        op = np.floor_divide if isinstance(e, FloorDiv) else np.mod
        low = values.int_range(t)[0]
        signed = t.kind == "int"
        dtype = t.numpy()

        def divide(ctx: _Context, lanes: np.ndarray) -> np.ndarray:
            x, y = np.asarray(a(ctx, lanes), dtype), np.asarray(b(ctx, lanes), dtype)
            if (y == 0).any() or (signed and ((x == low) & (y == -1)).any()):
                raise _Fallback()
            return op(x, y, dtype=dtype)

        return divide
    if isinstance(e, (Min, Max)) and t.is_integer and _numpy_ok(t):
        a, b = _compile(e.a, loop_var, plan), _compile(e.b, loop_var, plan)
        op = np.minimum if isinstance(e, Min) else np.maximum
        return lambda ctx, lanes: op(a(ctx, lanes), b(ctx, lanes))
    if isinstance(e, (EQ, NE, LT, LE, GT, GE)) and _numpy_ok(e.a.dtype):
        a, b = _compile(e.a, loop_var, plan), _compile(e.b, loop_var, plan)
        op = {EQ: np.equal, NE: np.not_equal, LT: np.less, LE: np.less_equal, GT: np.greater,
              GE: np.greater_equal}[type(e)]
        return lambda ctx, lanes: op(a(ctx, lanes), b(ctx, lanes))
    if isinstance(e, (And, Or)):
        a, b = _compile(e.a, loop_var, plan), _compile(e.b, loop_var, plan)
        op = np.logical_and if isinstance(e, And) else np.logical_or
        return lambda ctx, lanes: op(a(ctx, lanes), b(ctx, lanes))
    if isinstance(e, Not):
        a = _compile(e.a, loop_var, plan)
        return lambda ctx, lanes: np.logical_not(a(ctx, lanes))
    if isinstance(e, Select) and _numpy_ok(t):
        c = _compile(e.condition, loop_var, plan)
        x, y = _compile(e.true_value, loop_var, plan), _compile(e.false_value, loop_var, plan)
        dtype = t.numpy()
        return lambda ctx, lanes: np.where(c(ctx, lanes), x(ctx, lanes), y(ctx, lanes)).astype(dtype, copy=False)
    if isinstance(e, Cast):
        return _compile_cast(e, loop_var, plan)
    if isinstance(e, Call) and e.op == "if_then_else" and _numpy_ok(t):
        c = _compile(e.args[0], loop_var, plan)
        x, y = _compile(e.args[1], loop_var, plan), _compile(e.args[2], loop_var, plan)
        dtype = t.numpy()

        def lazy(ctx: _Context, lanes: np.ndarray) -> np.ndarray:
            if ctx.pending is not None:
                raise _Fallback()  # lane subsets and a held-back init do not mix; keep it simple
            cond = np.broadcast_to(c(ctx, lanes), lanes.shape)
            out = np.empty(lanes.shape, dtype)
            taken, other = lanes[cond], lanes[~cond]
            if taken.size:
                out[cond] = x(ctx, taken)
            if other.size:
                out[~cond] = y(ctx, other)
            return out

        return lazy
    raise _Unsupported()


def _compile_cast(e: Cast, loop_var: Var, plan: _Plan) -> Callable:
    src, dst = e.value.dtype, e.dtype
    inner = _compile(e.value, loop_var, plan)
    if dst.is_bool:
        return lambda ctx, lanes: np.not_equal(inner(ctx, lanes), 0)
    if not _numpy_ok(dst) or not (_numpy_ok(src) or src.is_bool):
        raise _Unsupported()
    dtype = dst.numpy()
    if src.is_bool or (src.is_integer and dst.is_integer):
        return lambda ctx, lanes: np.asarray(inner(ctx, lanes)).astype(dtype)  # wraps, as the IR does
    if src.is_integer and dst.is_float:
        magnitude = src.bits - (1 if src.kind == "int" else 0)
        if magnitude > _EXACT_CAST_BITS[dst.name]:
            raise _Unsupported()  # rounding int -> float is left to the scalar path
        return lambda ctx, lanes: np.asarray(inner(ctx, lanes)).astype(dtype)
    if src.is_float and dst.is_float:
        return lambda ctx, lanes: np.asarray(inner(ctx, lanes)).astype(dtype)  # round to nearest even
    if dst.bits >= 64:
        raise _Unsupported()
    low, high = values.int_range(dst)

    def saturate(ctx: _Context, lanes: np.ndarray) -> np.ndarray:
        x = np.trunc(np.asarray(inner(ctx, lanes), np.float64))
        x = np.where(np.isnan(x), 0.0, np.clip(x, float(low), float(high)))
        return x.astype(dtype)

    return saturate


def _throw() -> Any:
    raise _Fallback()


_Fallback.throw = staticmethod(_throw)  # type: ignore[attr-defined]
