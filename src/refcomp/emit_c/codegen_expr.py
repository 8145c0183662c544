"""Expressions and buffer accesses of the C emitter (mixed into codegen's CFamilyEmitter).

Scalars become C expressions; with `lane` given, one lane of a vector expression (lane mode,
used by strict C99 and odd lane counts); otherwise vector expressions become GCC vector code
through the helpers of VectorLib.  The cast and arithmetic rules are those of spec/c_abi.md.
"""
from __future__ import annotations

import math
import re

import numpy as np

from ..ast import expr as E
from ..ast.buffer import Buffer
from ..ast.dtype import DataType, int64
from ..ast.functor import post_order_visit, substitute
from ..errors import BuildError
from . import mathlib
from .ctype import float_literal, float_to_half, half_to_float, int_literal, is_half, short_name, value_type
from .names import c_string
from .zero_checks import may_divide_by_zero

_C_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_ARITH = {E.Add: "+", E.Sub: "-", E.Mul: "*"}
_COMPARE = {E.EQ: "==", E.NE: "!=", E.LT: "<", E.LE: "<=", E.GT: ">", E.GE: ">="}
_INT_HELPER = {E.FloorDiv: "floordiv", E.FloorMod: "floormod", E.TruncDiv: "truncdiv",
               E.TruncMod: "truncmod"}


class ExprEmitter:
    """The expression half of the emitter; needs self.func, .options, .names, .vec, .buffers,
    .array_vars, .index_depth and .zero_flag() (the name of the current statement's
    division-by-zero flag) from the class it is mixed into."""

    # ================================================================== buffers
    def buffer_name(self, buffer: Buffer) -> str:
        try:
            return self.buffers[buffer]
        except KeyError:
            raise BuildError(f"build: buffer {buffer.name!r} is neither a parameter nor allocated",
                             ir=self.func, spot=buffer) from None

    def flat_index(self, buffer: Buffer, indices: tuple[E.PrimExpr, ...]) -> E.PrimExpr:
        """The element offset of indices (row-major or the declared strides, plus elem_offset)."""
        if len(indices) == 1 and not buffer.strides and _is_zero(buffer.elem_offset):
            return indices[0]
        if not indices:
            return E.IntImm(0, "int64")
        lanes = max(i.dtype.lanes for i in indices)
        wide = DataType("int64", lanes)

        def widen(x: E.PrimExpr) -> E.PrimExpr:
            if isinstance(x, E.IntImm) and lanes == 1:
                return E.IntImm(x.value, "int64")
            x = x if x.dtype.lanes == lanes else E.Broadcast(x, lanes)
            return x if x.dtype.element == int64 else E.Cast(wide, x)

        if buffer.strides:
            strides = [widen(st) for st in buffer.strides]
        else:
            strides, acc = [], None
            for dim in reversed(buffer.shape):
                strides.append(acc if acc is not None else widen(E.IntImm(1, "int64")))
                acc = widen(dim) if acc is None else E.Mul(acc, widen(dim))
            strides.reverse()
        total = widen(buffer.elem_offset) if not _is_zero(buffer.elem_offset) else None
        for index, stride in zip(indices, strides):
            unit = isinstance(stride, E.IntImm) and stride.value == 1
            term = widen(index) if unit else E.Mul(widen(index), stride)
            total = term if total is None else E.Add(total, term)
        return total

    def load(self, load: E.BufferLoad, lane: str | None) -> str:
        buffer = load.buffer
        index = self.flat_index(buffer, load.indices)
        name = self.buffer_name(buffer)
        lanes = load.dtype.lanes
        if lanes == 1 or lane is not None:
            return self.from_storage(buffer.dtype, f"{name}[{self.index(index, lane)}]")
        base = unit_ramp_base(index)
        if base is not None:
            return f"{self.vec.load(load.dtype)}(&{name}[{self.index(base)}])"
        base = ramp_base(index, 2)
        if base is not None:
            helper = self.vec.load_stride2(load.dtype, odd=parity(base) == 1)
            if helper is not None:
                return f"{helper}(&{name}[{self.index(base)}])"
        if isinstance(index, E.Broadcast):
            return f"{self.vec.broadcast(load.dtype)}({self.from_storage(buffer.dtype, f'{name}[{self.index(index.value)}]')})"
        return f"{self.vec.gather(load.dtype, index.dtype)}({name}, {self.index(index)})"

    def from_storage(self, dtype: DataType, text: str) -> str:
        if dtype.is_bool:
            return f"({text} != 0)"
        return half_to_float(dtype, text)

    def to_storage(self, dtype: DataType, text: str) -> str:
        if dtype.is_bool:
            return f"(uint8_t)({text})"
        return float_to_half(dtype, text)

    # ================================================================== expressions
    def vector_ok(self, dtype: DataType) -> bool:
        """Whether values of dtype are GCC vectors here (else they are emitted lane by lane)."""
        lanes = dtype.lanes
        return self.options.vectors and lanes > 1 and lanes & (lanes - 1) == 0 and lanes <= 64

    def ctype(self, dtype: DataType) -> str:
        return value_type(dtype) if dtype.lanes == 1 else self.vec.vtype(dtype)

    def expr(self, e: E.PrimExpr, lane: str | None = None) -> str:
        """C text of e; with lane given, of that lane of a vector e (lane mode)."""
        if e.dtype.lanes == 1:
            lane = None
        elif lane is None and not self.vector_ok(e.dtype):
            raise BuildError(f"build: a {e.dtype} value cannot be emitted here (only stores and lets "
                             "of vectors are scalarised)", ir=self.func, spot=e)
        method = getattr(self, "expr_" + type(e).__name__, None)
        if method is None:
            raise BuildError(f"build: the C backend cannot emit {type(e).__name__} expressions",
                             ir=self.func, spot=e)
        return method(e, lane)

    def index(self, e: E.PrimExpr, lane: str | None = None) -> str:
        """C text of an index expression: plain C arithmetic, which gcc may assume never overflows.

        Indices, loop bounds and allocation sizes are proved in bounds (bounds="prove"); letting
        gcc treat them as non-wrapping keeps its address analysis (and auto-vectoriser) working.
        """
        self.index_depth += 1
        try:
            return self.expr(e, lane)
        finally:
            self.index_depth -= 1

    def vector_mode(self, e: E.PrimExpr, lane: str | None) -> bool:
        return e.dtype.lanes > 1 and lane is None

    def expr_IntImm(self, e: E.IntImm, lane) -> str:
        return int_literal(e.value, e.dtype)

    def expr_FloatImm(self, e: E.FloatImm, lane) -> str:
        value = e.value
        if e.dtype.name == "float16":
            value = float(np.float16(value))
        elif e.dtype.name == "bfloat16":
            value = _round_bfloat16(value)
        return float_literal(value, e.dtype)

    def expr_StringImm(self, e: E.StringImm, lane) -> str:
        return c_string(e.value)

    def expr_Var(self, e: E.Var, lane) -> str:
        if not self.names.has(e):
            raise BuildError(f"build: variable {e.name!r} is used outside its scope", ir=self.func, spot=e)
        name = self.names.name_of(e, e.name)
        if e in self.array_vars:
            if lane is None:
                raise BuildError(f"build: vector variable {e.name!r} used as a whole in lane mode",
                                 ir=self.func, spot=e)
            return f"{name}[{lane}]"
        return name

    expr_SizeVar = expr_Var

    def expr_BufferLoad(self, e: E.BufferLoad, lane) -> str:
        return self.load(e, lane)

    def expr_Ramp(self, e: E.Ramp, lane) -> str:
        if lane is not None:
            dtype = e.base.dtype
            wide = "uint64_t" if dtype.bits == 64 else "uint32_t"
            if self.index_depth:
                return f"({self.expr(e.base)} + {self.expr(e.stride)} * {lane})"
            return (f"(({value_type(dtype)})(({wide}){self.expr(e.base)} + "
                    f"({wide}){self.expr(e.stride)} * ({wide}){lane}))")
        return f"{self.vec.ramp(e.dtype)}({self.expr(e.base)}, {self.expr(e.stride)})"

    def expr_Broadcast(self, e: E.Broadcast, lane) -> str:
        if lane is not None:
            return self.expr(e.value)
        return f"{self.vec.broadcast(e.dtype)}({self.expr(e.value)})"

    # GNU statement expressions: gcc's dialects (the native target emits vectors) and nvcc take
    # them; strict C99 does not
    statement_expressions_always = False

    def expr_Let(self, e: E.Let, lane) -> str:
        if (self.options.vectors or self.statement_expressions_always) and lane is None:
            name = self.names.name_of(e.var, e.var.name)
            return f"({{ const {self.ctype(e.var.dtype)} {name} = {self.expr(e.value)}; {self.expr(e.body)}; }})"
        # Strict C99 has no statement expressions: the (pure) value is substituted.
        return self.expr(substitute(e.body, {e.var: e.value}), lane)

    def binary(self, e: E.BinaryOp, lane) -> tuple[str, str]:
        return self.expr(e.a, lane), self.expr(e.b, lane)

    def arith(self, e: E.BinaryOp, lane) -> str:
        a, b = self.binary(e, lane)
        op = _ARITH.get(type(e), "/")
        dtype = e.dtype
        element = dtype.element
        if self.vector_mode(e, lane):
            if element.is_int and op != "/":
                ut = self.vec.uint_vtype(element.bytes, dtype.lanes)
                return f"(({self.vec.vtype(dtype)})(({ut}){a} {op} ({ut}){b}))"
            text = f"({a} {op} {b})"
            return f"{self.vec.round_half(dtype)}{text}" if is_half(dtype) else text
        if self.index_depth and element.is_integer:
            return f"({a} {op} {b})"
        if element.is_int or element.name in ("uint8", "uint16"):
            wide = "uint64_t" if element.bits == 64 else "uint32_t"
            return f"(({value_type(element)})(({wide}){a} {op} ({wide}){b}))"
        if element.is_bool:
            return f"((bool)({a} {op} {b}))"
        if is_half(element):
            kind = "f16" if element.name == "float16" else "bf16"
            return f"rc_round_{kind}({a} {op} {b})"
        return f"({a} {op} {b})"

    expr_Add = expr_Sub = expr_Mul = expr_Div = arith

    def int_division(self, e: E.BinaryOp, lane) -> str:
        a, b = self.binary(e, lane)
        op = _INT_HELPER[type(e)]
        if not may_divide_by_zero(e.b):  # the common case: no check, no cost
            if self.vector_mode(e, lane):
                return f"{self.vec.lanewise(op, e.dtype)}({a}, {b})"
            shift = _power_of_two(e)
            if shift is not None:  # a shift and a mask the C compiler folds into the index
                tag = short_name(e.dtype.element)
                return (f"rc_floordiv_pow2_{tag}({a}, {shift})" if op == "floordiv"
                        else f"rc_floormod_pow2_{tag}({a}, {(1 << shift) - 1})")
            return f"rc_{op}_{short_name(e.dtype.element)}({a}, {b})"
        flag = self.zero_flag()
        if self.vector_mode(e, lane):
            return f"{self.vec.lanewise_checked(op, e.dtype)}({a}, {b}, &{flag})"
        return f"rc_{op}_checked_{short_name(e.dtype.element)}({a}, {b}, &{flag})"

    expr_FloorDiv = expr_FloorMod = expr_TruncDiv = expr_TruncMod = int_division

    def minmax(self, e: E.BinaryOp, lane) -> str:
        a, b = self.binary(e, lane)
        op = "min" if isinstance(e, E.Min) else "max"
        if self.vector_mode(e, lane):
            if e.dtype.is_float and _ordered_constant(e.a, zero=True):
                return f"{self.vec.minmax_ordered(op, e.dtype)}({a}, {b})"
            if e.dtype.is_float and _ordered_constant(e.b, zero=False):
                # a constant second operand c, not NaN and not zero: max(x, c) is c > x ? c : x
                # (x where x is NaN; where x equals c they are the same bits)
                return f"{self.vec.minmax_ordered(op, e.dtype)}({b}, {a})"
            return f"{self.vec.minmax(op, e.dtype)}({a}, {b})"
        element = e.dtype.element
        tag = "f64" if element.name == "float64" else "f32" if element.is_float else short_name(element)
        return f"rc_{op}_{tag}({a}, {b})"

    expr_Min = expr_Max = minmax

    def compare(self, e: E.CompareOp, lane) -> str:
        a, b = self.binary(e, lane)
        symbol = _COMPARE[type(e)]
        if self.vector_mode(e, lane):
            return self.vec.compare_to_mask(e.a.dtype, f"{self.vec.compare(symbol, e.a.dtype)}({a}, {b})")
        known = _constant_comparison(e, symbol, a == b)
        if known is not None:
            # gcc -Wextra rejects comparisons it can decide (x < x, an unsigned x >= 0); the
            # result is the same for every value, so it is emitted as that constant.
            return "true" if known else "false"
        return f"({a} {symbol} {b})"

    expr_EQ = expr_NE = expr_LT = expr_LE = expr_GT = expr_GE = compare

    def logic(self, e: E.BinaryOp, lane) -> str:
        a, b = self.binary(e, lane)
        if self.vector_mode(e, lane):
            return f"({a} {'&' if isinstance(e, E.And) else '|'} {b})"
        return f"({a} {'&&' if isinstance(e, E.And) else '||'} {b})"

    expr_And = expr_Or = logic

    def expr_Not(self, e: E.Not, lane) -> str:
        a = self.expr(e.a, lane)
        return f"(~{a})" if self.vector_mode(e, lane) else f"(!{a})"

    def expr_Select(self, e: E.Select, lane) -> str:
        if self.vector_mode(e, lane) and _float32x16_compare(e):
            cond = e.condition
            return (f"{self.vec.select_compare(_COMPARE[type(cond)], e.dtype)}({self.expr(cond.a)}, "
                    f"{self.expr(cond.b)}, {self.expr(e.true_value)}, {self.expr(e.false_value)})")
        if self.vector_mode(e, lane):
            cond = self.expr(e.condition) if e.condition.dtype.lanes > 1 else \
                self.expr(E.Broadcast(e.condition, e.dtype.lanes))
            return (f"{self.vec.select(e.dtype)}({cond}, {self.expr(e.true_value)}, "
                    f"{self.expr(e.false_value)})")
        if _loads(e.true_value) or _loads(e.false_value):
            # Both operands as arguments of an inline function: the IR's Select evaluates them all,
            # and a load under C's ?: is one gcc 12 may if-convert into a masked vector load, which
            # it miscompiled at -O3 with AVX-512 (lanes of the chosen load read as 0).
            element = e.dtype.element
            tag = "f64" if element.name == "float64" else "f32" if element.is_float else short_name(element)
            return (f"rc_select_{tag}({self.expr(e.condition, lane)}, {self.expr(e.true_value, lane)}, "
                    f"{self.expr(e.false_value, lane)})")
        return (f"({self.expr(e.condition, lane)} ? {self.expr(e.true_value, lane)} : "
                f"{self.expr(e.false_value, lane)})")

    def expr_Cast(self, e: E.Cast, lane) -> str:
        source, target = e.value.dtype, e.dtype
        value = self.expr(e.value, lane)
        if self.vector_mode(e, lane):
            return f"{self.vec.cast(source, target)}({value})"
        return cast_scalar(source.element, target.element, value)

    def expr_Call(self, e: E.Call, lane) -> str:
        op = e.op
        if op == "if_then_else":
            cond, a, b = e.args
            if self.vector_mode(e, lane):
                same = cond.value if isinstance(cond, E.Broadcast) else cond if cond.dtype.lanes == 1 else None
                if same is not None:  # one test for all lanes: the branch not taken is not evaluated
                    return f"({self.expr(same)} ? {self.expr(a)} : {self.expr(b)})"  # (its loads may be out of bounds)
                return self.expr_Select(E.Select(cond, a, b), None)
            return f"({self.expr(cond, lane)} ? {self.expr(a, lane)} : {self.expr(b, lane)})"
        if op == "call_extern":
            return self.call_extern(e, lane)
        if op == "address_of":
            load = e.args[0] if e.args else None
            if not isinstance(load, E.BufferLoad) or load.dtype.lanes != 1:
                raise BuildError("build: address_of needs one scalar buffer load", ir=self.func, spot=e)
            index = self.flat_index(load.buffer, load.indices)
            return f"(&{self.buffer_name(load.buffer)}[{self.index(index)}])"
        if op == "reinterpret":
            return self.reinterpret(e, lane)
        if op == "prefetch":
            raise BuildError("build: prefetch is a statement (Evaluate), not a value", ir=self.func, spot=e)
        if op == "assume":
            return "((void)0)"
        if op in ("isnan", "isinf", "isfinite"):
            arg = e.args[0]
            if self.vector_mode(e, lane):
                return f"{self.vec.predicate(op, arg.dtype)}({self.expr(arg)})"
            return f"({op}({self.expr(arg, lane)}) != 0)"
        if op == "abs" and e.dtype.element.is_integer:
            if self.vector_mode(e, lane):
                return f"{self.vec.lanewise('abs', e.dtype, 1)}({self.expr(e.args[0])})"
            return f"rc_abs_{short_name(e.dtype.element)}({self.expr(e.args[0], lane)})"
        if op in mathlib.LIBM or op in mathlib.COMPOSED:
            if not e.dtype.element.is_float:
                raise BuildError(f"build: {op} needs float arguments, got {e.dtype}", ir=self.func, spot=e)
            args = [self.expr(a, lane) for a in e.args]
            if self.vector_mode(e, lane):
                text = f"{self.vec.math(op, e.dtype)}({', '.join(args)})"
                return f"{self.vec.round_half(e.dtype)}({text})" if is_half(e.dtype) else text
            text = mathlib.scalar_call(op, e.dtype.element, args)
            if is_half(e.dtype):
                return f"rc_round_{'f16' if e.dtype.element.name == 'float16' else 'bf16'}({text})"
            return text
        raise BuildError(f"build: unknown intrinsic {op!r}", ir=self.func, spot=e)

    def call_extern(self, e: E.Call, lane) -> str:
        if not e.args or not isinstance(e.args[0], E.StringImm):
            raise BuildError("build: call_extern needs the C function name as its first argument",
                             ir=self.func, spot=e)
        fname = e.args[0].value
        if not _C_IDENT.match(fname) or fname.startswith("rc_"):
            raise BuildError(f"build: call_extern: {fname!r} is not a plain C identifier",
                             ir=self.func, spot=e)
        args = ", ".join(self.expr(a, lane) for a in e.args[1:])
        return f"{fname}({args})"

    def reinterpret(self, e: E.Call, lane) -> str:
        (arg,) = e.args
        source, target = arg.dtype.element, e.dtype.element
        if source.bits != target.bits or source.is_bool or target.is_bool or arg.dtype.lanes != e.dtype.lanes:
            raise BuildError(f"build: reinterpret from {arg.dtype} to {e.dtype}: the lanes must be numbers "
                             "of one width", ir=self.func, spot=e)
        if self.vector_mode(e, lane):
            return f"{self.vec.reinterpret(arg.dtype, e.dtype)}({self.expr(arg)})"
        value = self.expr(arg, lane)
        bits16 = DataType("uint16")
        if is_half(source):  # computed as float: reinterpret its 16-bit pattern
            value, source = self.to_storage(source, value), bits16
        if is_half(target):
            return self.from_storage(target, self.scalar_bitcast(source, bits16, value))
        return self.scalar_bitcast(source, target, value)

    def scalar_bitcast(self, source: DataType, target: DataType, value: str) -> str:
        """C text of the scalar value's bits read as target (C types of one size, not halfs)."""
        if source == target:
            return value
        helper = f"rc_bitcast_{short_name(source)}_{short_name(target)}"
        s_t, t_t = value_type(source), value_type(target)
        self.vec._add(helper, f"static inline {t_t} {helper}({s_t} x) {{\n"
                              f"    {t_t} y;\n    memcpy(&y, &x, sizeof y);\n    return y;\n}}")
        return f"{helper}({value})"



def cast_scalar(source: DataType, target: DataType, value: str) -> str:
    """C text converting a scalar with the cast rules of spec/c_abi.md."""
    if source == target:
        return value
    if target.is_bool:
        return f"({value} != 0)"
    tt = value_type(target)
    if is_half(target):
        kind = "f16" if target.name == "float16" else "bf16"
        if source.name == "float64" or source.is_integer:
            return f"rc_round_{kind}_d((double)({value}))"
        if source.is_bool:
            return f"(float)({value})"
        return f"rc_round_{kind}({value})"
    if source.is_float and target.is_integer:
        return f"rc_f64_to_{short_name(target)}((double)({value}))"
    return f"(({tt})({value}))"


def _round_bfloat16(value: float) -> float:
    f32 = np.array([value], dtype=np.float32)
    bits = int(f32.view(np.uint32)[0])
    if (bits & 0x7FFFFFFF) > 0x7F800000:
        return value
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return float(np.array([bits & 0xFFFFFFFF], dtype=np.uint32).view(np.float32)[0])


_RELATIONS = {"==": lambda x, y: x == y, "!=": lambda x, y: x != y, "<": lambda x, y: x < y,
              "<=": lambda x, y: x <= y, ">": lambda x, y: x > y, ">=": lambda x, y: x >= y}


def _constant_comparison(e: E.CompareOp, symbol: str, same_text: bool) -> bool | None:
    """The value of a scalar comparison that is the same for all inputs, if it is (else None)."""
    dtype = e.a.dtype
    if same_text and (dtype.is_integer or dtype.is_bool):
        return symbol in ("==", "<=", ">=")
    if same_text and symbol in ("<", ">"):
        return False  # x < x is false for floats too, NaN included
    if not dtype.is_integer:
        return None
    low, high = dtype.min_value(), dtype.max_value()
    relation = _RELATIONS[symbol]
    a, b = (x.value if isinstance(x, E.Broadcast) else x for x in (e.a, e.b))  # lane mode
    if isinstance(b, E.IntImm) and not isinstance(a, E.IntImm):
        c = b.value
        if c <= low or c >= high:  # the constant sits at an end of the other side's range
            outcomes = {relation(low, c), relation(high, c), relation(min(max(c, low), high), c)}
            return outcomes.pop() if len(outcomes) == 1 else None
    if isinstance(a, E.IntImm) and not isinstance(b, E.IntImm):
        c = a.value
        if c <= low or c >= high:
            outcomes = {relation(c, low), relation(c, high), relation(c, min(max(c, low), high))}
            return outcomes.pop() if len(outcomes) == 1 else None
    return None


def _is_zero(e: E.PrimExpr) -> bool:
    return isinstance(e, E.IntImm) and e.value == 0


def unit_ramp_base(index: E.PrimExpr) -> E.PrimExpr | None:
    """The base of index if it is Ramp(base, 1, lanes) (a contiguous access), else None."""
    return ramp_base(index, 1)


def ramp_base(index: E.PrimExpr, stride: int) -> E.PrimExpr | None:
    """The base of index if it is Ramp(base, stride, lanes) with that constant stride, else None."""
    if isinstance(index, E.Ramp) and isinstance(index.stride, E.IntImm) and index.stride.value == stride:
        return index.base
    return None


def parity(index: E.PrimExpr) -> int | None:
    """index mod 2 where the form shows it (a sum of terms each an integer or a product with an
    integer factor, as a flattened index is), else None."""
    if isinstance(index, E.IntImm):
        return index.value % 2
    if isinstance(index, E.Mul):
        for factor in (index.a, index.b):
            if isinstance(factor, E.IntImm) and factor.value % 2 == 0:
                return 0
        left, right = parity(index.a), parity(index.b)
        return None if left is None or right is None else left * right
    if isinstance(index, (E.Add, E.Sub)):
        left, right = parity(index.a), parity(index.b)
        return None if left is None or right is None else (left + right) % 2
    return None


def _loads(e) -> bool:
    """Whether expression e reads a buffer."""
    found = []
    post_order_visit(e, lambda n: found.append(n) if isinstance(n, E.BufferLoad) else None)
    return bool(found)


def _float32x16_compare(e: E.Select) -> bool:
    """e selects float32x16 lanes by a comparison of float32x16 operands (one AVX-512 register
    each): rc_vselect_<op> compares into a mask register and blends."""
    cond = e.condition
    return (type(cond) in _COMPARE and str(e.dtype) == "float32x16" and str(cond.a.dtype) == "float32x16"
            and str(cond.b.dtype) == "float32x16")


def _power_of_two(e: E.BinaryOp) -> int | None:
    """k where e is a floordiv or floormod of a signed integer by the constant 2^k, 0 < k < its
    width - 1 (a mask of 2^k - 1 and a shift by k that fit the type); else None."""
    if not isinstance(e, (E.FloorDiv, E.FloorMod)) or not isinstance(e.b, E.IntImm):
        return None
    element = e.dtype.element
    if not element.is_int or element.bits not in (8, 16, 32, 64):
        return None
    value = int(e.b.value)
    if value < 2 or value & (value - 1):
        return None
    shift = value.bit_length() - 1
    return shift if shift < element.bits - 1 else None


def _ordered_constant(e: E.PrimExpr, zero: bool) -> bool:
    """True when e is a float constant (or a broadcast of one) that is not NaN, and not zero
    unless `zero`: an operand the cheap min/max forms take (VectorHelpers.minmax_ordered)."""
    if isinstance(e, E.Broadcast):
        e = e.value
    return isinstance(e, E.FloatImm) and not math.isnan(e.value) and (zero or e.value != 0.0)
