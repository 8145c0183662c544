"""Index maps: a function from n indices to m indices, written by users as a Python lambda.

`IndexMap.from_callable(lambda i, j: (j // 16, i, j % 16), ndim=2)` calls the lambda once on fresh
variables and keeps the resulting expressions.  Only integer arithmetic (+, -, *, //, %, min, max)
is allowed, so a map prints back as a lambda and round-trips through JSON.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ...ast import Add, Cast, DataType, FloorDiv, FloorMod, IntImm, Max, Min, Mul, PrimExpr, Sub, Var, convert
from ...errors import ScheduleError

_BINARY = {Add: ("+", "add"), Sub: ("-", "sub"), Mul: ("*", "mul"), FloorDiv: ("//", "floordiv"),
           FloorMod: ("%", "floormod")}
_BY_TAG = {tag: cls for cls, (_, tag) in _BINARY.items()} | {"min": Min, "max": Max}


@dataclass(frozen=True, eq=False)
class IndexMap:
    """indices (initial vars) -> final expressions over them."""

    initial: tuple[Var, ...]
    final: tuple[PrimExpr, ...]

    @staticmethod
    def from_callable(fn: "Callable[..., Any] | IndexMap", ndim: int | None = None) -> "IndexMap":
        """Build a map by calling fn on fresh int32 vars named after its parameters."""
        if isinstance(fn, IndexMap):
            return fn
        if not callable(fn):
            raise ScheduleError(f"index map: expected a callable like `lambda i, j: (j, i)`, got {fn!r}")
        try:
            parameters = list(inspect.signature(fn).parameters.values())
        except (TypeError, ValueError):
            parameters = []
        names = [p.name for p in parameters]
        if ndim is not None and any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in parameters):
            names = [f"i{k}" for k in range(ndim)]  # `lambda *idx: ...` takes whatever the buffer has
        if ndim is not None and len(names) != ndim:
            raise ScheduleError(f"index map: the buffer has {ndim} dims but the map takes {len(names)} indices")
        initial = tuple(Var(name or f"i{k}") for k, name in enumerate(names))
        result = fn(*initial)
        if not isinstance(result, (tuple, list)):
            result = (result,)
        try:
            final = tuple(convert(e) for e in result)
        except TypeError as exc:
            raise ScheduleError(f"index map: result must be integer expressions: {exc}") from None
        for expr in final:
            _check_expr(expr, set(initial))
        return IndexMap(initial, final)

    def apply(self, indices: Sequence[PrimExpr]) -> tuple[PrimExpr, ...]:
        """The final indices with the initial vars replaced by indices.

        The map is recorded over int32 vars, but a buffer may be indexed in int64 (shapes from the
        graph level): the result is rebuilt in the widest dtype of the indices, constants
        included, so no operation mixes dtypes."""
        indices = [convert(i) for i in indices]
        dtype = _widest([i.dtype for i in indices])
        mapping = {v: (i if i.dtype == dtype else Cast(dtype, i)) for v, i in zip(self.initial, indices)}
        return tuple(_rebuild(e, mapping, dtype) for e in self.final)

    def as_lambda(self) -> str:
        """Python text of the map, e.g. `lambda i, j: (j // 16, i, j % 16)`."""
        params = ", ".join(v.name for v in self.initial)
        body = ", ".join(_python(e) for e in self.final)
        if len(self.final) == 1:
            body += ","
        return f"lambda {params}: ({body})"

    def to_json(self) -> dict:
        """{"initial": [names], "final": [expression trees]} (vars by position)."""
        index = {v: k for k, v in enumerate(self.initial)}
        return {"initial": [v.name for v in self.initial], "final": [_to_json(e, index) for e in self.final]}

    @staticmethod
    def from_json(data: dict) -> "IndexMap":
        """The map to_json wrote."""
        initial = tuple(Var(name) for name in data["initial"])
        return IndexMap(initial, tuple(_from_json(e, initial) for e in data["final"]))


def _widest(dtypes: Sequence[DataType]) -> DataType:
    if not dtypes:
        return DataType("int32")
    return max(dtypes, key=lambda d: d.bits)


def _rebuild(expr: PrimExpr, mapping: dict[Var, PrimExpr], dtype: DataType) -> PrimExpr:
    """expr (a checked map expression) over mapping's values, every constant of dtype."""
    if isinstance(expr, Var):
        return mapping[expr]
    if isinstance(expr, IntImm):
        return IntImm(expr.value, dtype)
    return type(expr)(_rebuild(expr.a, mapping, dtype), _rebuild(expr.b, mapping, dtype))


def _check_expr(expr: PrimExpr, allowed: set[Var]) -> None:
    if isinstance(expr, Var):
        if expr not in allowed:
            raise ScheduleError(f"index map: uses the variable {expr.name} that is not one of its indices")
        return
    if isinstance(expr, IntImm):
        return
    if type(expr) in _BINARY or isinstance(expr, (Min, Max)):
        _check_expr(expr.a, allowed)
        _check_expr(expr.b, allowed)
        return
    raise ScheduleError(f"index map: only + - * // % min max of ints are allowed, got {type(expr).__name__}")


def _python(expr: PrimExpr) -> str:
    if isinstance(expr, Var):
        return expr.name
    if isinstance(expr, IntImm):
        return str(expr.value)
    if isinstance(expr, (Min, Max)):
        return f"{type(expr).__name__.lower()}_({_python(expr.a)}, {_python(expr.b)})"
    symbol = _BINARY[type(expr)][0]
    return f"({_python(expr.a)} {symbol} {_python(expr.b)})"


def _to_json(expr: PrimExpr, index: dict[Var, int]) -> Any:
    if isinstance(expr, Var):
        return {"var": index[expr]}
    if isinstance(expr, IntImm):
        return expr.value
    tag = "min" if isinstance(expr, Min) else "max" if isinstance(expr, Max) else _BINARY[type(expr)][1]
    return [tag, _to_json(expr.a, index), _to_json(expr.b, index)]


def _from_json(data: Any, initial: tuple[Var, ...]) -> PrimExpr:
    if isinstance(data, int):
        return IntImm(data)
    if isinstance(data, dict):
        return initial[data["var"]]
    tag, a, b = data
    return _BY_TAG[tag](_from_json(a, initial), _from_json(b, initial))
