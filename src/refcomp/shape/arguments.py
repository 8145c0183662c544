"""The one argument checker for calls into kernels: the interpreter's and the compiled ones'.

`Signature(func).bind(args, kwargs)` matches the call's values to the function's parameters and
checks them before anything runs.  Every array is checked for type, dtype, ndim and shape
against the symbolic bindings (a size var seen twice must agree, an expression dim such as `n*2`
is evaluated by refcomp.shape.evaluate, and a var that only occurs inside one affine dim is
solved from it); every scalar for type and range; written buffers for writeability; size vars
for their dtype's range; the function's stated assumptions (attrs["assumptions"]) hold.  A wrong
argument raises ArgumentError naming the function, the parameter, the expectation and what was
given.

Arguments are given positionally (the first parameters in order, or, when no positional value
is a number, every buffer parameter in order with the scalars by name) and by name (a parameter's name, or a size variable's to state it
explicitly).  A lowered function keeps the shapes its callers use in attrs["original_buffers"];
those are the shapes checked.

Two kinds of caller differ in what they do with the memory:
* `raw_pointers=True` (compiled kernels): the C code gets each array's data pointer, so an array
  must be C-contiguous (or have the buffer's declared strides), aligned to its elements and to
  the buffer's promised alignment, and no written buffer may overlap another (the C parameters
  are `restrict`).
* `raw_pointers=False` (the interpreter, which copies): any layout is read logically; the same
  array passed twice is one buffer (updates in place are seen by both); other overlapping arrays
  are refused.
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
from ..ast.functor import collect, free_vars, substitute
from ..ast.intrinsics import addressed_writes
from ..errors import ArgumentError
from .evaluate import EvaluationError, UnboundVariable, evaluate
from .guards import runtime_preconditions


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


def _shape_text(shape: Sequence[E.PrimExpr]) -> str:
    return ", ".join(show(d) for d in shape)


def written_buffers(func: PrimFunc) -> set[Buffer]:
    """Parameter buffers the function may write (stores, and any buffer whose address is handed
    to a call that may write through it: every address but a tensor intrinsic's operand declared
    read, refcomp.ast.intrinsics.address_accesses)."""
    written = {s.buffer for s in collect(func.body, S.BufferStore)}
    written |= addressed_writes(func.body, func.attrs)
    for block in collect(func.body, S.Block):
        written.update(region.buffer for region in block.writes)
    return written


@dataclass
class BoundCall:
    """The checked arguments of one call: the arrays in buffer order, every var's value."""

    arrays: list
    env: dict


class Signature:
    """The caller's view of a function's parameters: what a call must pass, checked by `bind`."""

    def __init__(self, func: PrimFunc, size_vars: Sequence[E.Var] = (), *, raw_pointers: bool = True) -> None:
        self.func = func
        self.raw_pointers = raw_pointers
        self.params = func.params
        original = func.attrs.get("original_buffers") or {}
        # the buffer whose shape a caller's array must have (a lowered function's original one)
        self.shapes = {b: original.get(b, b) for b in func.buffers}
        self.buffers = func.buffers
        written = written_buffers(func)
        self.written = {b for b in self.buffers if b in written or self.shapes[b] in written}
        self.names = [p.name for p in func.params]
        self.dims = {b: [(axis, dim, tuple(free_vars(dim))) for axis, dim in enumerate(self.shapes[b].shape)]
                     for b in self.buffers}
        self.shape_vars = {b: tuple(free_vars(tuple(self.shapes[b].shape))) for b in self.buffers}
        self.all_shape_vars = tuple(dict.fromkeys(v for b in self.buffers for v in self.shape_vars[b]))
        wanted = [v for v in size_vars if v not in func.scalar_params]
        self.size_vars = list(dict.fromkeys(wanted + list(self.all_shape_vars)))
        self.by_name = {v.name: v for v in self.size_vars}
        self.size_ranges = [(v, v.dtype.min_value(), v.dtype.max_value()) for v in self.size_vars]
        self.preconditions = _preconditions(func, self.shapes)

    def describe(self) -> str:
        parts = []
        for p in self.params:
            if isinstance(p, Buffer):
                parts.append(f"{p.name}: {p.dtype}[{_shape_text(self.shapes[p].shape)}]")
            else:
                parts.append(f"{p.name}: {p.dtype}")
        return f"{self.func.name}({', '.join(parts)})"

    def fail(self, message: str) -> ArgumentError:
        """The ArgumentError for message, prefixed with the function's name."""
        return ArgumentError(f"{self.func.name}: {message}")

    def bind(self, args: Sequence[Any], kwargs: dict[str, Any]) -> BoundCall:
        """Check args against the signature; the arrays in buffer order and every var's value."""
        values, explicit = self._match(args, kwargs)
        env: dict = {}
        origin: dict = {}
        for param, value in zip(self.params, values):
            if isinstance(param, E.Var):
                env[param] = self.check_scalar(param, value)
                origin[param] = param.name
        for var, value in explicit.items():
            env[var] = self.check_scalar(var, value)
            origin[var] = var.name
            if env[var] < 0:
                raise self.fail(f"size variable {var.name} = {env[var]} is negative")
        for param, value in zip(self.params, values):
            if isinstance(param, Buffer):
                self._check_array_basics(param, value)
        for param, value in zip(self.params, values):
            if isinstance(param, Buffer):
                for axis, dim in enumerate(self.shapes[param].shape):
                    if isinstance(dim, E.Var) and dim not in env:
                        env[dim] = int(value.shape[axis])
                        origin[dim] = (param.name, axis)  # formatted only for a message
        if any(v not in env for v in self.all_shape_vars):
            self._solve_remaining(values, env, origin)
        for param, value in zip(self.params, values):
            if isinstance(param, Buffer):
                self._check_shape(param, value, env, origin)
                if self.raw_pointers:
                    self._check_layout(param, value, env)
        self._check_overlap(values)
        arrays = [value for param, value in zip(self.params, values) if isinstance(param, Buffer)]
        for var, low, high in self.size_ranges:
            if var not in env:
                raise self.fail(f"cannot bind size variable {var.name} from the arguments; pass "
                                f"{var.name}=...; signature {self.describe()}")
            value = env[var]
            if value < 0:
                raise self.fail(f"size variable {var.name} = {value} is negative")
            if not low <= value <= high:
                raise self.fail(f"size variable {var.name} = {value} does not fit in {var.dtype}")
        for condition, message in self.preconditions:
            # The relations the function states (attrs["assumptions"]), which its proofs rely on.
            try:
                holds = evaluate(condition, env)
            except EvaluationError as exc:
                raise self.fail(f"cannot check the precondition {show(condition)}: {exc}") from None
            if not holds:
                bound = ", ".join(f"{v.name} = {env[v]}" for v in free_vars(condition) if v in env)
                raise ArgumentError(f"{message} ({bound})")
        return BoundCall(arrays, env)

    # ------------------------------------------------------------------ pieces
    def _match(self, args: Sequence[Any], kwargs: dict[str, Any]) -> tuple[list, dict]:
        params = self.params
        buffer_positions = [k for k, p in enumerate(params) if isinstance(p, Buffer)]
        if len(buffer_positions) == len(args) < len(params) and buffer_positions != list(range(len(args))) \
                and not any(isinstance(value, numbers.Number) for value in args):
            positions = buffer_positions  # every buffer by position, the scalars by name
        elif len(args) <= len(params):
            positions = list(range(len(args)))
        else:
            raise self.fail(f"expected {len(params)} arguments ({', '.join(self.names)}), "
                            f"got {len(args) + len(kwargs)}")
        values: list = [None] * len(params)
        given = [False] * len(params)
        for position, value in zip(positions, args):
            values[position], given[position] = value, True
        explicit: dict = {}
        for key, value in kwargs.items():
            if key in self.names:
                index = self.names.index(key)
                if given[index]:
                    raise self.fail(f"argument {key} given twice")
                values[index], given[index] = value, True
            elif key in self.by_name:
                explicit[self.by_name[key]] = value
            else:
                sizes = f"; size variables are {', '.join(self.by_name)}" if self.by_name else ""
                raise self.fail(f"unexpected argument {key!r}; parameters are {', '.join(self.names)}{sizes}")
        if not all(given):
            missing = [n for n, g in zip(self.names, given) if not g]
            raise self.fail(f"expected {len(params)} arguments ({', '.join(self.names)}), got {sum(given)}; "
                            f"missing {', '.join(missing)}")
        return values, explicit

    def _check_array_basics(self, param: Buffer, value: Any) -> None:
        shape = self.shapes[param].shape
        if not isinstance(value, np.ndarray):
            raise self.fail(f"{param.name}: expected a numpy array of {param.dtype} with shape "
                            f"({_shape_text(shape)}), got {type(value).__name__}")
        expected = param.dtype.numpy()
        if value.dtype != expected:
            note = " (bfloat16 arrays are passed as their uint16 bit patterns)" if param.dtype.name == "bfloat16" else ""
            raise self.fail(f"{param.name}: expected dtype {param.dtype}{note}, got {value.dtype}")
        if value.ndim != len(shape):
            raise self.fail(f"{param.name}: expected {len(shape)} dimensions ({_shape_text(shape)}), got "
                            f"{value.ndim} with shape {tuple(value.shape)}")
        if self.raw_pointers and not value.flags.aligned:
            raise self.fail(f"{param.name}: the array's data is not aligned to its {value.itemsize}-byte "
                            "elements (a view into a byte buffer at an odd offset?); pass a copy")
        if param in self.written and not value.flags.writeable:
            raise self.fail(f"{param.name}: the kernel writes this buffer, but the array is read-only")

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
                except EvaluationError:
                    continue
                actual = int(value.shape[axis])
                if slope != 0 and (actual - at0) % slope == 0:
                    env[var] = (actual - at0) // slope
                    origin[var] = (param.name, axis)

    def _check_shape(self, param: Buffer, value: np.ndarray, env: dict, origin: dict) -> None:
        shape = self.shapes[param].shape
        try:
            expected = tuple(evaluate(d, env) for d in shape)
        except UnboundVariable as exc:
            raise self.fail(f"{param.name}: cannot bind {exc.var.name} in shape ({_shape_text(shape)}) from "
                            f"the arrays, got shape {tuple(value.shape)}; pass {exc.var.name}=...") from None
        except EvaluationError as exc:
            raise self.fail(f"{param.name}: cannot evaluate the shape ({_shape_text(shape)}): {exc}") from None
        if expected != tuple(value.shape):
            symbolic = _shape_text(shape) + ("," if len(shape) == 1 else "")
            concrete = ", ".join(str(d) for d in expected) + ("," if len(expected) == 1 else "")
            used = []
            for var in self.shape_vars[param]:
                if var in env:
                    used.append(f"{var.name} = {env[var]} bound from {_origin_text(origin.get(var))}")
            binding = f" with {', '.join(used)}" if used else ""
            form = f"({symbolic}) = ({concrete})" if symbolic.replace(",", "") != concrete.replace(",", "") \
                else f"({concrete})"
            raise self.fail(f"{param.name}: expected shape {form}{binding}, got {tuple(value.shape)}")

    def _check_layout(self, param: Buffer, value: np.ndarray, env: dict) -> None:
        itemsize = value.itemsize
        declared = self.shapes[param]
        if declared.strides:
            for axis, stride in enumerate(declared.strides):
                want = evaluate(stride, env)
                if value.shape[axis] > 1 and value.strides[axis] != want * itemsize:
                    raise self.fail(f"{param.name}: expected stride {show(stride)} = {want} elements "
                                    f"on axis {axis}, got {value.strides[axis] // itemsize}")
        elif not value.flags.c_contiguous:
            raise self.fail(f"{param.name}: expected a C-contiguous array, got strides "
                            f"{value.strides} (bytes); pass np.ascontiguousarray(...)")
        if param.align > 0 and value.size > 0:
            address = value.__array_interface__["data"][0]
            if address % param.align != 0:
                raise self.fail(f"{param.name}: the buffer promises {param.align}-byte alignment, but "
                                f"the array's data is at address {address:#x}")

    def _check_overlap(self, values: list) -> None:
        buffers = [(p, v) for p, v in zip(self.params, values) if isinstance(p, Buffer)]
        for i, (p, a) in enumerate(buffers):
            for q, b in buffers[i + 1:]:
                if not (a.size and b.size):
                    continue
                if self.raw_pointers:
                    if (p in self.written or q in self.written) and _overlap(a, b):
                        raise self.fail(f"{p.name} and {q.name} overlap in memory, but the kernel writes "
                                        f"{p.name if p in self.written else q.name} and its buffers must "
                                        "not alias; pass separate arrays")
                elif a is not b and np.may_share_memory(a, b):
                    raise self.fail(f"{p.name} and {q.name} overlap in memory; pass separate arrays "
                                    "(or the same array twice)")

    def check_scalar(self, param: E.Var, value: Any):
        """The Python value of a scalar argument, checked against the parameter's dtype."""
        try:
            return check_scalar(param, value)
        except ArgumentError as exc:
            raise self.fail(str(exc)) from None


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


def _preconditions(func: PrimFunc, shapes: dict) -> list:
    """(condition, message) pairs the shape layer derives from the function's stated assumptions."""
    # A condition may name a size variable by an equal-named Var (te builds the function's own
    # SizeVars from the user's vars): resolve such names to the function's variables.
    by_name = {v.name: v for b in shapes.values() for v in free_vars(tuple(b.shape) + tuple(b.strides))}
    by_name.update({p.name: p for p in func.scalar_params})
    out = []
    for condition, message in runtime_preconditions(func):
        mapping = {v: by_name[v.name] for v in free_vars(condition) if v.name in by_name and by_name[v.name] is not v}
        out.append((substitute(condition, mapping) if mapping else condition, message))
    return out


def check_scalar(param: E.Var, value: Any):
    """The Python value of a scalar argument, checked against the parameter's dtype.

    A bool parameter takes a bool (or the integers 0 and 1); an integer one an integer within the
    dtype's range (not a bool); a float one any real number but a bool."""
    dtype: DataType = param.dtype
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if dtype.is_bool:
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
        if isinstance(value, numbers.Integral) and int(value) in (0, 1):
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
