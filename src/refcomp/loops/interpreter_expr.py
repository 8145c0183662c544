"""The reference interpreter's compiler, expression half: IR expressions become Python expressions.

`ExprCodegen` is mixed into `interpreter_codegen.Compiler`, which owns the naming state it uses
(`names`, `bufs`, `ranges`, `consts`, `helpers`, `fresh`, `site`).  Integer results are wrapped into
their dtype, float results rounded to theirs, loads check their indices (see interpreter_values
for the value rules).  A vector expression is generated one lane at a time (`lane`).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from ..ast import BufferLoad, Buffer, IntImm, PrimExpr, Var
from ..ast.dtype import DataType
from ..ast.expr import FloatImm
from ..ast.intrinsics import FLOAT_BINARY, FLOAT_UNARY
from ..ast.structural import structural_equal
from ..errors import IRError
from . import interpreter_values as values

_STRUCT_CODES = {"int8": "b", "uint8": "B", "int16": "h", "uint16": "H", "float16": "e",
                 "int32": "i", "uint32": "I", "float32": "f", "int64": "q", "uint64": "Q",
                 "float64": "d", "bfloat16": "H"}
# How many bits of integer magnitude each float type holds exactly.
_EXACT_INT_BITS = {"float64": 53, "float32": 24, "float16": 11, "bfloat16": 8}
# Expressions nested deeper than this are split into helper functions.
_MAX_EXPR_DEPTH = 24
# Identifiers of locals in generated code (vars, buffers, dims, strides, match mins, temps).
_LOCAL_NAME = re.compile(r"\b(?:[xBdsm]\d+_\w*|_[ir]\d+_\w+)")


@dataclass
class _BufInfo:
    data: str  # name of the Python list
    dims: list[str]  # code of each dim
    strides: list[str]  # code of each row-major stride
    shape: tuple[PrimExpr, ...]
    # for a match buffer: (target buffer, code of the min of each target dim)
    view_of: tuple[Buffer, list[str]] | None = None


@dataclass
class _Range:
    """A loop var's values lie in [low, high) (low an int, high an expression)."""

    low: int
    high: PrimExpr


class ExprCodegen:
    """Python source for IR expressions (a mixin of the interpreter's Compiler)."""

    def ex(self, e: PrimExpr, lane: int = 0) -> str:
        method = getattr(self, "ex_" + type(e).__name__, None)
        if method is None:
            raise IRError(f"the interpreter does not know the expression {type(e).__name__}",
                          ir=self.func, spot=e)
        if self.depth >= _MAX_EXPR_DEPTH:
            return self.hoist(e, lane)
        self.depth += 1
        try:
            return method(e, lane)
        finally:
            self.depth -= 1

    def hoist(self, e: PrimExpr, lane: int) -> str:
        """A deep subexpression becomes a module-level helper (Python limits nesting in one line).

        The helper takes the locals its code reads; it is called where the subexpression stood, so
        evaluation order and the laziness of if_then_else are unchanged.
        """
        saved, self.depth = self.depth, 0
        code = self.ex(e, lane)
        self.depth = saved
        assigned = set(re.findall(r"(\w+) :=", code))
        params = sorted(set(_LOCAL_NAME.findall(code)) - assigned)
        name = self.fresh("deep", "_h")
        self.helpers.append(f"def {name}({', '.join(params)}):\n    return {code}\n")
        return f"{name}({', '.join(params)})"

    def ex_IntImm(self, e: IntImm, lane: int) -> str:
        if e.dtype.is_bool:
            return "True" if e.value else "False"
        return str(e.value) if e.value >= 0 else f"({e.value})"

    def ex_FloatImm(self, e: FloatImm, lane: int) -> str:
        v = e.value
        rounder = values.float_rounder(e.dtype.element)
        if rounder is not None:
            v = rounder(v)
        if math.isnan(v):
            return "_nan"
        if math.isinf(v):
            return "_inf" if v > 0 else "(-_inf)"
        return repr(v) if v >= 0 and not (v == 0 and math.copysign(1, v) < 0) else f"({v!r})"

    def ex_StringImm(self, e: Any, lane: int) -> str:
        return repr(e.value)

    def ex_Var(self, e: Var, lane: int) -> str:
        name = self.names.get(e)
        if name is None:
            raise IRError(f"variable {e.name} is used where it is not defined", ir=self.func, spot=e)
        return name[lane] if isinstance(name, list) else name

    ex_SizeVar = ex_Var

    def round(self, code: str, t: DataType) -> str:
        """Code bringing an unbounded result back into dtype t (wrap for ints, rounding for floats)."""
        t = t.element
        if t.is_integer:
            low, high = values.int_range(t)
            mask = (1 << t.bits) - 1
            if t.kind == "uint":
                return f"(({code}) & {mask})"
            half = 1 << (t.bits - 1)
            return f"(((({code}) + {half}) & {mask}) - {half})"
        if t.name == "float64":
            return f"({code})"
        if t.name == "float32":
            temp = self.fresh("f", "_r")
            return (f"(_u32(_p32({temp}))[0] if -{values.FLOAT32_MAX!r} <= ({temp} := {code}) <= "
                    f"{values.FLOAT32_MAX!r} else _r32({temp}))")
        if t.name == "float16":
            return f"_r16({code})"
        if t.name == "bfloat16":
            return f"_rbf({code})"
        raise IRError(f"arithmetic on {t} is not defined", ir=self.func)

    def arith(self, e: Any, lane: int, symbol: str) -> str:
        if e.dtype.element.is_bool:
            raise IRError(f"arithmetic '{symbol}' on bool values is not defined", ir=self.func, spot=e)
        return self.round(f"{self.ex(e.a, lane)} {symbol} {self.ex(e.b, lane)}", e.dtype)

    def ex_Add(self, e: Any, lane: int) -> str:
        return self.arith(e, lane, "+")

    def ex_Sub(self, e: Any, lane: int) -> str:
        return self.arith(e, lane, "-")

    def ex_Mul(self, e: Any, lane: int) -> str:
        return self.arith(e, lane, "*")

    def ex_Div(self, e: Any, lane: int) -> str:
        return self.round(f"_fdiv({self.ex(e.a, lane)}, {self.ex(e.b, lane)})", e.dtype)

    def _positive_const(self, e: PrimExpr) -> bool:
        return isinstance(e, IntImm) and e.value > 0

    def ex_FloorDiv(self, e: Any, lane: int) -> str:
        a, b = self.ex(e.a, lane), self.ex(e.b, lane)
        if self._positive_const(e.b):
            return f"({a} // {b})"
        return self.round(f"_floordiv({a}, {b}, {self.site(e)})", e.dtype)

    def ex_FloorMod(self, e: Any, lane: int) -> str:
        a, b = self.ex(e.a, lane), self.ex(e.b, lane)
        if self._positive_const(e.b):
            return f"({a} % {b})"
        return f"_floormod({a}, {b}, {self.site(e)})"

    def ex_TruncDiv(self, e: Any, lane: int) -> str:
        return self.round(f"_truncdiv({self.ex(e.a, lane)}, {self.ex(e.b, lane)}, {self.site(e)})", e.dtype)

    def ex_TruncMod(self, e: Any, lane: int) -> str:
        return f"_truncmod({self.ex(e.a, lane)}, {self.ex(e.b, lane)}, {self.site(e)})"

    def ex_Min(self, e: Any, lane: int) -> str:
        fn = "_fmin" if e.dtype.element.is_float else "min"
        return f"{fn}({self.ex(e.a, lane)}, {self.ex(e.b, lane)})"

    def ex_Max(self, e: Any, lane: int) -> str:
        fn = "_fmax" if e.dtype.element.is_float else "max"
        return f"{fn}({self.ex(e.a, lane)}, {self.ex(e.b, lane)})"

    def compare(self, e: Any, lane: int) -> str:
        return f"({self.ex(e.a, lane)} {e.symbol} {self.ex(e.b, lane)})"

    ex_EQ = ex_NE = ex_LT = ex_LE = ex_GT = ex_GE = compare

    def ex_And(self, e: Any, lane: int) -> str:
        return f"({self.ex(e.a, lane)} & {self.ex(e.b, lane)})"  # both sides evaluated, as specified

    def ex_Or(self, e: Any, lane: int) -> str:
        return f"({self.ex(e.a, lane)} | {self.ex(e.b, lane)})"

    def ex_Not(self, e: Any, lane: int) -> str:
        return f"(not {self.ex(e.a, lane)})"

    def ex_Select(self, e: Any, lane: int) -> str:
        # A tuple evaluates both values, as Select requires; the bool picks one.
        return f"(({self.ex(e.false_value, lane)}, {self.ex(e.true_value, lane)})[{self.ex(e.condition, lane)}])"

    def ex_Cast(self, e: Any, lane: int) -> str:
        return self.cast(self.ex(e.value, lane), e.value.dtype.element, e.dtype.element)

    def cast(self, code: str, src: DataType, dst: DataType) -> str:
        if src == dst:
            return code
        if dst.is_bool:
            return f"({code} != 0)"
        if src.is_bool:
            return f"(1.0 if {code} else 0.0)" if dst.is_float else f"(1 if {code} else 0)"
        if dst.is_integer:
            if src.is_integer:
                low, high = values.int_range(dst)
                if values.int_range(src)[0] >= low and values.int_range(src)[1] <= high:
                    return code
                return self.round(code, dst)
            low, high = values.int_range(dst)
            return f"_f2i({code}, {low}, {high})"
        # to a float type
        if src.is_integer:
            magnitude_bits = src.bits - (1 if src.kind == "int" else 0)
            if magnitude_bits <= _EXACT_INT_BITS[dst.name]:
                return f"float({code})"  # every value of src is exact in dst
            key = self.fresh(str(dst), "_T")
            self.consts[key] = dst
            return f"_i2f({code}, {key})"
        if dst.bits > src.bits:
            return code  # widening float conversions are exact
        return self.round(code, dst)

    def ex_BufferLoad(self, e: BufferLoad, lane: int) -> str:
        info = self.buf_info(e.buffer, e)
        return f"{info.data}[{self.flat_index(e, info, e.indices, lane)}]"

    def buf_info(self, buf: Buffer, node: Any) -> _BufInfo:
        info = self.bufs.get(buf)
        if info is None:
            raise IRError(f"buffer {buf.name} is used outside the scope that declares it", ir=self.func, spot=node)
        return info

    def flat_index(self, node: Any, info: _BufInfo, indices: tuple[PrimExpr, ...], lane: int) -> str:
        """Code of the flat list position of indices, checking each index against its dim."""
        if info.view_of is not None:
            target, mins = info.view_of
            lead = len(target.shape) - len(indices)
            codes = list(mins[:lead]) + [f"({m} + {self.ex(i, lane)})" for m, i in zip(mins[lead:], indices)]
            target_info = self.bufs[target]
            return self.checked_flat(node, target_info, codes, [None] * len(codes), lane)
        codes = [self.ex(i, lane) for i in indices]
        return self.checked_flat(node, info, codes, list(indices), lane)

    def checked_flat(self, node: Any, info: _BufInfo, codes: list[str], indices: list, lane: int) -> str:
        if not codes:
            return "0"
        terms, checks, shown = [], [], []
        for d, code in enumerate(codes):
            index = indices[d]
            if index is not None and self.provably_in_bounds(index, info.shape[d]):
                term = code
            else:
                temp = self.fresh("t", "_i")
                checks.append(f"0 <= ({temp} := {code}) < {info.dims[d]}")
                term = temp
            shown.append(code)
            terms.append(term if info.strides[d] == "1" else f"{term} * {info.strides[d]}")
        flat = " + ".join(terms)
        if not checks:
            return flat
        dims = ", ".join(info.dims) + ("," if len(info.dims) == 1 else "")
        return (f"(({flat}) if ({' and '.join(checks)}) else "
                f"_oob({self.site(node)}, ({', '.join(shown)},), ({dims})))")

    def provably_in_bounds(self, index: PrimExpr, dim: PrimExpr) -> bool:
        if isinstance(index, IntImm):
            return index.value >= 0 and isinstance(dim, IntImm) and index.value < dim.value
        rng = self.ranges.get(index) if isinstance(index, Var) else None
        if rng is None or rng.low < 0:
            return False
        if isinstance(rng.high, IntImm) and isinstance(dim, IntImm):
            return rng.high.value <= dim.value
        return structural_equal(rng.high, dim, map_free_vars=False)

    def ex_Ramp(self, e: Any, lane: int) -> str:
        base, stride = self.ex(e.base, 0), self.ex(e.stride, 0)
        if lane == 0:
            return base
        return self.round(f"{base} + {lane} * {stride}", e.dtype)

    def ex_Broadcast(self, e: Any, lane: int) -> str:
        return self.ex(e.value, 0)

    def ex_Let(self, e: Any, lane: int) -> str:
        if e.var not in self.names:
            self.bind_var(e.var)
        target = self.ex(e.var, lane)
        return f"(({target} := {self.ex(e.value, lane)}), {self.ex(e.body, lane)})[1]"

    def ex_Call(self, e: Any, lane: int) -> str:
        op, args = e.op, e.args
        if op == "if_then_else":
            c, t, f = args
            return f"({self.ex(t, lane)} if {self.ex(c, lane)} else {self.ex(f, lane)})"
        if op in FLOAT_UNARY or op in FLOAT_BINARY:
            inner = ", ".join(self.ex(a, lane) for a in args)
            return self.round(f"_m_{op}({inner})", e.dtype)
        if op == "abs":
            x = self.ex(args[0], lane)
            return self.round(f"abs({x})", e.dtype) if e.dtype.element.is_integer else f"abs({x})"
        if op in ("isnan", "isinf", "isfinite"):
            arg = args[0]
            if not arg.dtype.element.is_float:
                return "True" if op == "isfinite" else "False"
            return f"_{op}({self.ex(arg, lane)})"
        if op == "reinterpret":
            src, dst = args[0].dtype.element, e.dtype.element
            return f"_reinterpret({self.ex(args[0], lane)}, {str(src)!r}, {str(dst)!r})"
        if op == "assume":
            return "True"
        if op in ("tvm_storage_sync", "prefetch"):
            return "None"
        raise IRError(f"the interpreter cannot run the intrinsic {op!r}", ir=self.func, spot=e)


def _reinterpret(x: Any, src: str, dst: str) -> Any:
    import struct

    if src == "bfloat16":
        x = values.bf16_bits(x)
    raw = struct.pack("<" + _STRUCT_CODES[src], x)
    out = struct.unpack("<" + _STRUCT_CODES[dst], raw)[0]
    return values.bf16_value(out) if dst == "bfloat16" else out
