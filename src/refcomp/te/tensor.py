"""te tensors: axes, placeholders, computes, reductions and the reducers sum/max/min/prod."""
from __future__ import annotations

import inspect
import math
import weakref
from typing import Any, Callable

from ..ast import BufferLoad, Buffer, IntImm, Max, Min, PrimExpr, Range, Var, collect, const, convert
from ..ast.dtype import DataType, dtype as to_dtype
from ..ast.expr import _promote
from ..errors import IRError

# ----------------------------------------------------------------------------- axes and tensors

class Axis:
    """An iteration axis of a compute (spatial) or a reduction (reduce); usable as an expression."""

    __slots__ = ("var", "dom", "kind")

    def __init__(self, var_: Var, dom: Range, kind: str) -> None:
        self.var, self.dom, self.kind = var_, dom, kind

    def as_expr(self) -> Var:
        return self.var

    @property
    def name(self) -> str:
        return self.var.name

    def __repr__(self) -> str:
        return f"Axis({self.var.name}, {self.kind})"

    # Arithmetic and comparisons act on the axis variable.
    def __add__(self, o): return self.var + o
    def __radd__(self, o): return o + self.var
    def __sub__(self, o): return self.var - o
    def __rsub__(self, o): return o - self.var
    def __mul__(self, o): return self.var * o
    def __rmul__(self, o): return o * self.var
    def __floordiv__(self, o): return self.var // o
    def __rfloordiv__(self, o): return o // self.var
    def __mod__(self, o): return self.var % o
    def __rmod__(self, o): return o % self.var
    def __neg__(self): return -self.var
    def __lt__(self, o): return self.var < o
    def __le__(self, o): return self.var <= o
    def __gt__(self, o): return self.var > o
    def __ge__(self, o): return self.var >= o
    def __eq__(self, o): return self.var == o  # type: ignore[override]
    def __ne__(self, o): return self.var != o  # type: ignore[override]
    __hash__ = object.__hash__

    def astype(self, dtype: "DataType | str") -> PrimExpr:
        return self.var.astype(dtype)


def reduce_axis(dom: Any, name: str = "k") -> Axis:
    """A reduction axis over `dom`: an extent, or a (begin, end) pair (TVM's convention)."""
    if isinstance(dom, Range):
        rng = dom
    elif isinstance(dom, (tuple, list)):
        if len(dom) != 2:
            raise ValueError(f"reduce_axis: expected (begin, end), got {dom!r}")
        begin, end = convert(dom[0]), convert(dom[1])
        begin, end = _promote(begin, end)
        if isinstance(begin, IntImm) and isinstance(end, IntImm):
            rng = Range(begin, IntImm(end.value - begin.value, begin.dtype))
        else:
            rng = Range(begin, end - begin)
    else:
        rng = Range.from_extent(convert(dom))
    return Axis(Var(name, rng.extent.dtype), rng, "reduce")


class PlaceholderOp:
    """The operation of an input tensor."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.inputs: tuple[Tensor, ...] = ()
        self.axis: tuple[Axis, ...] = ()
        self.reduce_axis: tuple[Axis, ...] = ()


class ComputeOp:
    """The operation of a computed tensor: axes, an element formula (or Reduce), attributes."""

    def __init__(self, name: str, axis: tuple[Axis, ...], body: "PrimExpr | Reduce",
                 attrs: dict[str, Any], inputs: tuple["Tensor", ...]) -> None:
        self.name, self.axis, self.body, self.attrs, self.inputs = name, axis, body, attrs, inputs

    @property
    def reduce_axis(self) -> tuple[Axis, ...]:
        return self.body.axis if isinstance(self.body, Reduce) else ()


# Which tensor owns a buffer: id(buffer) -> weak reference to the tensor (the tensor keeps its
# buffer alive, so an id found here with a live tensor whose .buffer is that object is current).
_OWNER: dict[int, "weakref.ref[Tensor]"] = {}


class Tensor:
    """A placeholder or computed tensor: `.shape`, `.dtype`, `.name`, `.ndim`; `T[i, j]` loads."""

    def __init__(self, shape: tuple[PrimExpr, ...], dtype: DataType, name: str, op: Any) -> None:
        self.shape, self.dtype, self.name, self.op = shape, dtype, name, op
        self.buffer = Buffer(name, shape, dtype)
        _OWNER[id(self.buffer)] = weakref.ref(self, lambda _ref, key=id(self.buffer): _forget(key, _ref))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, indices: Any) -> PrimExpr:
        if not isinstance(indices, tuple):
            indices = (indices,)
        if len(indices) != self.ndim:
            raise IndexError(f"tensor {self.name} has {self.ndim} dims, indexed with {len(indices)}")
        for index in indices:
            if isinstance(index, slice):
                raise TypeError(f"tensor {self.name}: slices are not supported, index with expressions")
        return BufferLoad(self.buffer, tuple(convert(i) for i in indices))

    def __repr__(self) -> str:
        dims = ", ".join(_show_dim(d) for d in self.shape)
        return f"Tensor({self.name}, ({dims}), {self.dtype})"


def _forget(key: int, ref: Any) -> None:
    if _OWNER.get(key) is ref:
        del _OWNER[key]


def _show_dim(d: PrimExpr) -> str:
    return str(d.value) if isinstance(d, IntImm) else getattr(d, "name", type(d).__name__)


def _owner_of(buffer: Buffer) -> "Tensor | None":
    ref = _OWNER.get(id(buffer))
    tensor = ref() if ref is not None else None
    return tensor if tensor is not None and tensor.buffer is buffer else None


def _shape(shape: Any, what: str) -> tuple[PrimExpr, ...]:
    if isinstance(shape, (int, PrimExpr)):
        shape = (shape,)
    dims = tuple(convert(d) for d in shape)
    for d in dims:
        if not d.dtype.is_integer:
            raise TypeError(f"{what}: shape dims must be integers, got {d.dtype}")
        if isinstance(d, IntImm) and d.value < 0:
            raise ValueError(f"{what}: negative dimension {d.value}")
    return dims


def placeholder(shape: Any, dtype: "DataType | str" = "float32", name: str = "placeholder") -> Tensor:
    """An input tensor of the given shape (ints or integer expressions of te vars) and dtype."""
    return Tensor(_shape(shape, f"placeholder {name}"), to_dtype(dtype), name, PlaceholderOp(name))


def compute(shape: Any, fcompute: Callable[..., Any], name: str = "compute", tag: str = "",
            attrs: dict[str, Any] | None = None) -> Tensor:
    """A tensor whose element at (i, j, ...) is fcompute(i, j, ...) (an expression or a reduction).

    `attrs` become the block's annotations; `tag` (TVM's operator tag) is kept on `tensor.op.tag`.
    """
    dims = _shape(shape, f"compute {name}")
    names = _axis_names(fcompute, len(dims), name)
    axes = tuple(Axis(Var(n, d.dtype), Range.from_extent(d), "spatial") for n, d in zip(names, dims))
    body = fcompute(*(a.var for a in axes))
    if isinstance(body, Reduce):
        out_dtype = body.dtype
    else:
        if isinstance(body, (list, tuple)):
            raise TypeError(f"compute {name}: multiple outputs are not supported")
        body = convert(body)
        if body.dtype.lanes != 1:
            raise TypeError(f"compute {name}: element formula must be a scalar, got {body.dtype}")
        out_dtype = body.dtype
    inputs: dict[Tensor, None] = {}
    for load in _loads_in(body):
        owner = _owner_of(load.buffer)
        if owner is None:
            raise IRError(f"compute {name}: reads buffer {load.buffer.name}, which is not a te tensor")
        inputs.setdefault(owner, None)
    op = ComputeOp(name, axes, body, dict(attrs or {}), tuple(inputs))
    op.tag = tag
    return Tensor(dims, out_dtype, name, op)


def _axis_names(fcompute: Callable[..., Any], ndim: int, name: str) -> list[str]:
    try:
        params = list(inspect.signature(fcompute).parameters.values())
    except (TypeError, ValueError):
        params = []
    if params and params[0].kind is inspect.Parameter.VAR_POSITIONAL:
        return [f"i{d}" for d in range(ndim)]
    # parameters with defaults (the `f=f` idiom in loops) are not indices
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                  and p.default is inspect.Parameter.empty]
    if params and len(positional) != ndim:
        raise TypeError(f"compute {name}: fcompute takes {len(positional)} indices for a {ndim}-d shape")
    return [p.name for p in positional] if params else [f"i{d}" for d in range(ndim)]


def _loads_in(body: "PrimExpr | Reduce") -> list[BufferLoad]:
    parts: list[Any] = [body.source] if isinstance(body, Reduce) else [body]
    if isinstance(body, Reduce) and body.condition is not None:
        parts.append(body.condition)
    found: list[BufferLoad] = []
    for part in parts:
        found.extend(collect(part, BufferLoad))
    return found


# ----------------------------------------------------------------------------- reductions

class Reduce:
    """combiner over `axis` of source (where condition holds); only valid as a compute's whole body."""

    def __init__(self, reducer: "CommReducer", source: PrimExpr, axis: tuple[Axis, ...],
                 condition: PrimExpr | None) -> None:
        self.reducer, self.source, self.axis, self.condition = reducer, source, axis, condition
        self.dtype = source.dtype

    def identity(self) -> PrimExpr:
        return self.reducer.identity(self.dtype)

    def combine(self, accumulated: PrimExpr, value: PrimExpr) -> PrimExpr:
        result = convert(self.reducer.fcombine(accumulated, value))
        return result if result.dtype == self.dtype else result.astype(self.dtype)

    def as_expr(self) -> PrimExpr:
        raise TypeError(
            f"te.{self.reducer.name}(...) must be the whole body of a compute; "
            "compute the reduction in its own stage and use that tensor"
        )

    def _not_an_operand(self, *_: Any) -> PrimExpr:
        return self.as_expr()

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _not_an_operand
    __truediv__ = __rtruediv__ = __floordiv__ = __mod__ = __neg__ = _not_an_operand
    __lt__ = __le__ = __gt__ = __ge__ = _not_an_operand

    def astype(self, dtype: Any) -> PrimExpr:
        return self.as_expr()


class CommReducer:
    """A commutative reducer: te.sum / te.max / te.min or one made by comm_reducer."""

    def __init__(self, fcombine: Callable[[PrimExpr, PrimExpr], Any],
                 fidentity: Callable[[DataType], Any], name: str) -> None:
        self.fcombine, self.fidentity, self.name = fcombine, fidentity, name

    def identity(self, dtype_: DataType) -> PrimExpr:
        value = self.fidentity(dtype_)
        value = convert(value) if isinstance(value, PrimExpr) else const(value, dtype_)
        return value if value.dtype == dtype_ else value.astype(dtype_)

    def __call__(self, expr: Any, axis: Any = None, where: Any = None, *rest: Any) -> "Reduce | PrimExpr":
        if axis is None or not isinstance(axis, (Axis, list, tuple)):
            # TVM's convention: te.max(a, b) on plain expressions combines them element-wise.
            if axis is None:
                raise TypeError(f"te.{self.name}: give axis= (a reduce_axis or a list of them)")
            values = [expr, axis] + ([where] if where is not None else []) + list(rest)
            result = convert(self.fcombine(*_promote(values[0], values[1])))
            for value in values[2:]:
                result = convert(self.fcombine(*_promote(result, value)))
            return result
        axes = (axis,) if isinstance(axis, Axis) else tuple(axis)
        for a in axes:
            if not isinstance(a, Axis) or a.kind != "reduce":
                raise TypeError(f"te.{self.name}: axis must be reduce axes from te.reduce_axis, got {a!r}")
        source = convert(expr)
        condition = None
        if where is not None:
            condition = convert(where)
            if not condition.dtype.is_bool:
                raise TypeError(f"te.{self.name}: where= must be a bool expression, got {condition.dtype}")
        return Reduce(self, source, axes, condition)


def comm_reducer(fcombine: Callable[[PrimExpr, PrimExpr], Any], fidentity: Callable[[DataType], Any],
                 name: str = "reduce") -> CommReducer:
    """A reducer from a combining function fcombine(x, y) and its identity fidentity(dtype)."""
    return CommReducer(fcombine, fidentity, name)


def _lowest(t: DataType) -> Any:
    return -math.inf if t.is_float else t.min_value()


def _highest(t: DataType) -> Any:
    return math.inf if t.is_float else t.max_value()


# Float max/min start from -inf/+inf (not TVM's finite limits) so all-infinite inputs match numpy.
sum = comm_reducer(lambda x, y: x + y, lambda t: 0, name="sum")  # noqa: A001 - TVM's name
prod = comm_reducer(lambda x, y: x * y, lambda t: 1, name="prod")
max = comm_reducer(lambda x, y: Max(*_promote(x, y)), _lowest, name="max")  # noqa: A001
min = comm_reducer(lambda x, y: Min(*_promote(x, y)), _highest, name="min")  # noqa: A001


