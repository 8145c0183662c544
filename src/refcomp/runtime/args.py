"""Checking the arguments of a compiled kernel before the call, and binding symbolic dims.

Every array is checked for type, dtype, ndim, shape (against the symbolic bindings: a size var
seen twice must agree, expression dims such as `n*2` are evaluated), layout (C-contiguous or the
declared strides), alignment when promised, writeability of outputs and overlap with other
buffers (the C parameters are `restrict`).  Scalars are checked for type and range.  A wrong
argument raises ArgumentError naming the parameter, the expectation and what was given.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..ast import expr as E
from ..ast import stmt as S
from ..ast.buffer import Buffer
from ..ast.dtype import DataType
from ..ast.function import PrimFunc
from ..ast.functor import collect, free_vars
from ..errors import ArgumentError


def show(expr: E.PrimExpr) -> str:
    """A short Python-like rendering of an index expression (for messages)."""
    if isinstance(expr, E.IntImm):
        return str(expr.value)
    if isinstance(expr, E.Var):
        return expr.name
    symbols = {E.Add: "+", E.Sub: "-", E.Mul: "*", E.FloorDiv: "//", E.FloorMod: "%"}
    for cls, symbol in symbols.items():
        if isinstance(expr, cls):
            return f"{_paren(expr.a)} {symbol} {_paren(expr.b)}"
    if isinstance(expr, (E.Min, E.Max)):
        return f"{type(expr).__name__.lower()}({show(expr.a)}, {show(expr.b)})"
    if isinstance(expr, E.Cast):
        return show(expr.value)
    return type(expr).__name__


def _paren(expr: E.PrimExpr) -> str:
    text = show(expr)
    return text if isinstance(expr, (E.IntImm, E.Var, E.Cast)) else f"({text})"


def evaluate(expr: E.PrimExpr, env: dict) -> int:
    """The integer value of a shape expression under env (Var -> int); KeyError if a var is unbound."""
    if isinstance(expr, E.IntImm):
        return expr.value
    if isinstance(expr, E.Var):
        return env[expr]
    if isinstance(expr, E.Cast):
        return evaluate(expr.value, env)
    if isinstance(expr, E.BinaryOp):
        a, b = evaluate(expr.a, env), evaluate(expr.b, env)
        if isinstance(expr, E.Add):
            return a + b
        if isinstance(expr, E.Sub):
            return a - b
        if isinstance(expr, E.Mul):
            return a * b
        if isinstance(expr, E.FloorDiv):
            return a // b if b else 0
        if isinstance(expr, E.FloorMod):
            return a % b if b else 0
        if isinstance(expr, (E.TruncDiv, E.TruncMod)):
            if not b:
                return 0
            quotient = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
            return quotient if isinstance(expr, E.TruncDiv) else a - b * quotient
        if isinstance(expr, E.Min):
            return min(a, b)
        if isinstance(expr, E.Max):
            return max(a, b)
    if isinstance(expr, E.Select):
        return evaluate(expr.true_value if _truth(expr.condition, env) else expr.false_value, env)
    raise ArgumentError(f"cannot evaluate the shape expression {show(expr)} at call time")


def _truth(expr: E.PrimExpr, env: dict) -> bool:
    ops = {E.LT: lambda a, b: a < b, E.LE: lambda a, b: a <= b, E.GT: lambda a, b: a > b,
           E.GE: lambda a, b: a >= b, E.EQ: lambda a, b: a == b, E.NE: lambda a, b: a != b}
    for cls, fn in ops.items():
        if isinstance(expr, cls):
            return fn(evaluate(expr.a, env), evaluate(expr.b, env))
    raise ArgumentError(f"cannot evaluate the condition {type(expr).__name__} at call time")


def written_buffers(func: PrimFunc) -> set[Buffer]:
    """Parameter buffers the function may write (stores, and any buffer whose address escapes)."""
    written = {s.buffer for s in collect(func.body, S.BufferStore)}
    for call in collect(func.body, E.Call):
        if call.op == "address_of":
            for load in call.args:
                if isinstance(load, E.BufferLoad):
                    written.add(load.buffer)
    for block in collect(func.body, S.Block):
        written.update(region.buffer for region in block.writes)
    return written


@dataclass
class BoundCall:
    """The checked arguments of one call: the arrays in buffer order, every var's value."""

    arrays: list
    env: dict


class Signature:
    """The Python-side view of a kernel's parameters, built from the function before lowering."""

    def __init__(self, func: PrimFunc, size_vars: Sequence[E.Var]) -> None:
        self.func = func
        self.params = func.params
        self.buffers = func.buffers
        self.scalars = func.scalar_params
        self.size_vars = list(size_vars)
        self.written = written_buffers(func)
        self.names = [p.name for p in func.params]
        # Per buffer, computed once: (axis, dim, free vars of dim), and the vars of the shape.
        self.dims = {b: [(axis, dim, tuple(free_vars(dim))) for axis, dim in enumerate(b.shape)]
                     for b in self.buffers}
        self.shape_vars = {b: tuple(free_vars(tuple(b.shape))) for b in self.buffers}
        self.all_shape_vars = tuple(dict.fromkeys(v for b in self.buffers for v in self.shape_vars[b]))
        self.size_ranges = [(v, v.dtype.min_value(), v.dtype.max_value()) for v in self.size_vars]
        self.preconditions = _preconditions(func)

    def describe(self) -> str:
        parts = []
        for p in self.params:
            if isinstance(p, Buffer):
                parts.append(f"{p.name}: {p.dtype}[{', '.join(show(d) for d in p.shape)}]")
            else:
                parts.append(f"{p.name}: {p.dtype}")
        return f"{self.func.name}({', '.join(parts)})"

    def bind(self, args: Sequence[Any], kwargs: dict[str, Any]) -> BoundCall:
        """Check args against the signature; return the C argument values."""
        values = self._match(args, kwargs)
        env: dict = {}
        origin: dict = {}
        for param, value in zip(self.params, values):
            if isinstance(param, E.Var):
                env[param] = check_scalar(param, value)
                origin[param] = param.name
        for param, value in zip(self.params, values):
            if isinstance(param, Buffer):
                self._check_array_basics(param, value)
        for param, value in zip(self.params, values):
            if isinstance(param, Buffer):
                for axis, dim in enumerate(param.shape):
                    if isinstance(dim, E.Var) and dim not in env:
                        env[dim] = int(value.shape[axis])
                        origin[dim] = (param.name, axis)  # formatted only for a message
        if any(v not in env for v in self.all_shape_vars):
            self._solve_remaining(values, env, origin)
        for param, value in zip(self.params, values):
            if isinstance(param, Buffer):
                self._check_shape(param, value, env, origin)
                self._check_layout(param, value, env)
        self._check_overlap(values)
        arrays = [value for param, value in zip(self.params, values) if isinstance(param, Buffer)]
        for var, low, high in self.size_ranges:
            if var not in env:
                raise ArgumentError(f"{self.func.name}: cannot bind size variable {var.name} from the "
                                    f"arguments; signature {self.describe()}")
            value = env[var]
            if value < 0:
                raise ArgumentError(f"{self.func.name}: size variable {var.name} = {value} is negative")
            if not low <= value <= high:
                raise ArgumentError(f"{self.func.name}: size variable {var.name} = {value} does not fit "
                                    f"in {var.dtype}")
        for condition, message in self.preconditions:
            # The relations the function states (attrs["assumptions"]), which its proofs rely on.
            if not _truth(condition, env):
                values = ", ".join(f"{v.name} = {env[v]}" for v in free_vars(condition) if v in env)
                raise ArgumentError(f"{message} ({values})")
        return BoundCall(arrays, env)

    # ------------------------------------------------------------------ pieces
    def _match(self, args: Sequence[Any], kwargs: dict[str, Any]) -> list:
        if len(args) > len(self.params):
            raise ArgumentError(f"{self.func.name}: expected {len(self.params)} arguments "
                                f"({', '.join(self.names)}), got {len(args) + len(kwargs)}")
        values = list(args) + [None] * (len(self.params) - len(args))
        given = [True] * len(args) + [False] * (len(self.params) - len(args))
        for key, value in kwargs.items():
            if key not in self.names:
                raise ArgumentError(f"{self.func.name}: unexpected argument {key!r}; parameters are "
                                    f"{', '.join(self.names)}")
            index = self.names.index(key)
            if given[index]:
                raise ArgumentError(f"{self.func.name}: argument {key} given twice")
            values[index], given[index] = value, True
        if not all(given):
            missing = [n for n, g in zip(self.names, given) if not g]
            raise ArgumentError(f"{self.func.name}: expected {len(self.params)} arguments "
                                f"({', '.join(self.names)}), got {sum(given)}; missing {', '.join(missing)}")
        return values

    def _check_array_basics(self, param: Buffer, value: Any) -> None:
        if not isinstance(value, np.ndarray):
            raise ArgumentError(f"{param.name}: expected a numpy array of {param.dtype} with shape "
                                f"({', '.join(show(d) for d in param.shape)}), got {type(value).__name__}")
        expected = param.dtype.numpy()
        if value.dtype != expected:
            note = " (bfloat16 arrays are passed as their uint16 bit patterns)" if param.dtype.name == "bfloat16" else ""
            raise ArgumentError(f"{param.name}: expected dtype {param.dtype}{note}, got {value.dtype}")
        if value.ndim != len(param.shape):
            raise ArgumentError(f"{param.name}: expected {len(param.shape)} dimensions "
                                f"({', '.join(show(d) for d in param.shape)}), got {value.ndim} "
                                f"with shape {tuple(value.shape)}")
        if not value.flags.aligned:
            raise ArgumentError(f"{param.name}: the array's data is not aligned to its {value.itemsize}-byte "
                                "elements (a view into a byte buffer at an odd offset?); pass a copy")
        if param in self.written and not value.flags.writeable:
            raise ArgumentError(f"{param.name}: the kernel writes this buffer, but the array is read-only")

    def _solve_remaining(self, values: list, env: dict, origin: dict) -> None:
        """Bind vars that only occur inside expression dims (like n*2) when the dim is affine in one var."""
        for param, value in zip(self.params, values):
            if not isinstance(param, Buffer):
                continue
            for axis, dim, dim_vars in self.dims[param]:
                unknown = [v for v in dim_vars if v not in env]
                if len(unknown) != 1:
                    continue
                var = unknown[0]
                try:
                    at0 = evaluate(dim, {**env, var: 0})
                    slope = evaluate(dim, {**env, var: 1}) - at0
                except ArgumentError:
                    continue
                actual = int(value.shape[axis])
                if slope != 0 and (actual - at0) % slope == 0:
                    env[var] = (actual - at0) // slope
                    origin[var] = (param.name, axis)

    def _check_shape(self, param: Buffer, value: np.ndarray, env: dict, origin: dict) -> None:
        try:
            expected = tuple(evaluate(d, env) for d in param.shape)
        except KeyError as exc:
            var = exc.args[0]
            raise ArgumentError(f"{param.name}: cannot bind {var.name} in shape "
                                f"({', '.join(show(d) for d in param.shape)}) from the arrays, "
                                f"got shape {tuple(value.shape)}") from None
        if expected != tuple(value.shape):
            symbolic = ", ".join(show(d) for d in param.shape)
            if len(param.shape) == 1:
                symbolic += ","
            concrete = ", ".join(str(d) for d in expected) + ("," if len(expected) == 1 else "")
            used = []
            for var in self.shape_vars[param]:
                if var in env:
                    used.append(f"{var.name} = {env[var]} bound from {_origin_text(origin.get(var))}")
            binding = f" with {', '.join(used)}" if used else ""
            form = f"({symbolic}) = ({concrete})" if symbolic.replace(",", "") != concrete.replace(",", "") \
                else f"({concrete})"
            raise ArgumentError(f"{param.name}: expected shape {form}{binding}, got {tuple(value.shape)}")

    def _check_layout(self, param: Buffer, value: np.ndarray, env: dict) -> None:
        itemsize = value.itemsize
        if param.strides:
            for axis, stride in enumerate(param.strides):
                want = evaluate(stride, env)
                if value.shape[axis] > 1 and value.strides[axis] != want * itemsize:
                    raise ArgumentError(f"{param.name}: expected stride {show(stride)} = {want} elements "
                                        f"on axis {axis}, got {value.strides[axis] // itemsize}")
        elif not value.flags.c_contiguous:
            raise ArgumentError(f"{param.name}: expected a C-contiguous array, got strides "
                                f"{value.strides} (bytes); pass np.ascontiguousarray(...)")
        if param.align > 0 and value.size > 0:
            address = value.__array_interface__["data"][0]
            if address % param.align != 0:
                raise ArgumentError(f"{param.name}: the buffer promises {param.align}-byte alignment, but "
                                    f"the array's data is at address {address:#x}")

    def _check_overlap(self, values: list) -> None:
        buffers = [(p, v) for p, v in zip(self.params, values) if isinstance(p, Buffer)]
        for i, (p, a) in enumerate(buffers):
            for q, b in buffers[i + 1:]:
                if (p in self.written or q in self.written) and a.size and b.size and _overlap(a, b):
                    raise ArgumentError(f"{p.name} and {q.name} overlap in memory, but the kernel "
                                        f"writes {p.name if p in self.written else q.name} and its "
                                        "buffers must not alias; pass separate arrays")


def _origin_text(origin) -> str:
    if isinstance(origin, tuple):
        return f"{origin[0]}.shape[{origin[1]}]"
    return f"the argument {origin}" if origin else "the arguments"


def _overlap(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two arrays' memory may overlap (exact extents for contiguous arrays)."""
    if a.flags.c_contiguous and b.flags.c_contiguous:
        start_a, start_b = a.__array_interface__["data"][0], b.__array_interface__["data"][0]
        return start_a < start_b + b.nbytes and start_b < start_a + a.nbytes
    return bool(np.may_share_memory(a, b))


def _preconditions(func: PrimFunc) -> list:
    """(condition, message) pairs the shape layer derives from the function's stated assumptions."""
    try:
        from ..shape import runtime_preconditions
    except ImportError:  # pragma: no cover - the shape layer is part of every installation
        return []
    from ..ast.functor import substitute

    # A condition may name a size variable by an equal-named Var (te builds the function's own
    # SizeVars from the user's vars): resolve such names to the function's variables.
    by_name = {v.name: v for b in func.buffers for v in free_vars(tuple(b.shape) + tuple(b.strides))}
    by_name.update({p.name: p for p in func.scalar_params})
    out = []
    for condition, message in runtime_preconditions(func):
        mapping = {v: by_name[v.name] for v in free_vars(condition) if v.name in by_name and by_name[v.name] is not v}
        out.append((substitute(condition, mapping) if mapping else condition, message))
    return out


def check_scalar(param: E.Var, value: Any):
    """The Python value of a scalar argument, checked against the parameter's dtype."""
    dtype: DataType = param.dtype
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if dtype.is_bool:
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
        raise ArgumentError(f"{param.name}: expected a bool, got {type(value).__name__} {value!r}")
    if dtype.is_integer:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
            raise ArgumentError(f"{param.name}: expected an integer ({dtype}), got "
                                f"{type(value).__name__} {value!r}")
        value = int(value)
        if not dtype.min_value() <= value <= dtype.max_value():
            raise ArgumentError(f"{param.name}: {value} does not fit in {dtype}")
        return value
    if dtype.is_float:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
            raise ArgumentError(f"{param.name}: expected a number ({dtype}), got {type(value).__name__} {value!r}")
        return float(value)
    raise ArgumentError(f"{param.name}: parameters of type {dtype} cannot be passed from Python")
