"""The reference interpreter's compiler: a PrimFunc becomes the source of one Python function.

Each buffer is a flat Python list (row-major, logical indices); each IR variable a Python local.
Loads and stores check every index against the buffer's shape (skipped only where a loop's range
already proves it), integer arithmetic wraps in the dtype's width and float arithmetic is rounded
to the dtype after every operation (see interpreter_values for the rules).  Vector expressions
(Ramp, Broadcast, lanes > 1) are evaluated lane by lane.  Every loop kind runs sequentially.
"""
from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from ..ast import (
    Allocate, AssertStmt, Block, BlockRealize, Buffer, BufferLoad, BufferStore, Evaluate, For,
    IfThenElse, IntImm, LetStmt, PrimExpr, PrimFunc, SeqStmt, Stmt, Var, While, collect, free_vars,
)
from ..ast.dtype import DataType
from ..ast.expr import Add, Div, FloatImm, Mul, Sub
from ..ast.intrinsics import FLOAT_BINARY, FLOAT_UNARY
from ..ast.structural import structural_equal
from ..errors import IRError, RuntimeFailure
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
# A loop nest deeper than this is continued in a nested Python function (CPython allows 20
# statically nested blocks per function).
_MAX_LOOP_DEPTH = 16


@dataclass
class Kernel:
    """A PrimFunc compiled for the interpreter: call `run(buffers, scalars)`."""

    run: Callable[[list, list], None]
    buffer_params: list[Buffer]
    scalar_inputs: list[Var]  # order of the `scalars` list: scalar params, then shape vars
    written: set[Buffer]  # buffer parameters the function may store to
    source: str


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


def garbage(t: DataType) -> Any:
    """The value fresh allocations are filled with: NaN for floats, 0x5A.. bytes for ints, True."""
    if t.is_float:
        return math.nan
    if t.is_bool:
        return True
    pattern = int("5A" * t.bytes, 16)
    return values.wrapper(t)(pattern)


class Compiler:
    """Turns one PrimFunc into Python source and compiles it."""

    def __init__(self, func: PrimFunc) -> None:
        self.func = func
        self.lines: list[str] = []
        self.names: dict[Var, Any] = {}  # Var -> identifier (or list of lane identifiers)
        self.bufs: dict[Buffer, _BufInfo] = {}
        self.ranges: dict[Var, _Range] = {}
        self.sites: list[Any] = []
        self.consts: dict[str, Any] = {}
        self.counter = 0
        self.loop_depth = 0
        self.written: set[Buffer] = set()
        self.alias_of: dict[Buffer, Buffer] = {}  # undeclared buffer -> parameter it views
        self.depth = 0  # nesting of the expression being generated
        self.helpers: list[str] = []  # module-level helper functions (hoisted deep expressions)

    # ------------------------------------------------------------------ naming

    def fresh(self, hint: str, prefix: str = "x") -> str:
        self.counter += 1
        clean = re.sub(r"\W", "_", hint)[:24]
        return f"{prefix}{self.counter}_{clean}"

    def site(self, node: Any) -> int:
        self.sites.append(node)
        return len(self.sites) - 1

    def emit(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)

    def bind_var(self, var: Var) -> str:
        if var.dtype.lanes > 1:
            lanes = [self.fresh(f"{var.name}_l{k}") for k in range(var.dtype.lanes)]
            self.names[var] = lanes
            return lanes[0]
        name = self.fresh(var.name)
        self.names[var] = name
        return name

    # ------------------------------------------------------------------ entry

    def compile(self) -> Kernel:
        func = self.func
        scalar_inputs: list[Var] = [p for p in func.params if isinstance(p, Var)]
        for p in func.params:
            if isinstance(p, Buffer):
                for dim in p.shape:
                    for v in free_vars(dim):
                        if v not in scalar_inputs:
                            scalar_inputs.append(v)
        self.emit(0, "def _kernel(_bufs, _scalars):")
        for k, var in enumerate(scalar_inputs):
            self.emit(1, f"{self.bind_var(var)} = _scalars[{k}]")
        buffer_params = [p for p in func.params if isinstance(p, Buffer)]
        for k, buf in enumerate(buffer_params):
            if buf in self.bufs:
                raise IRError(f"buffer {buf.name} is a parameter twice", ir=func, spot=buf)
            data = self.fresh(buf.name, "B")
            self.emit(1, f"{data} = _bufs[{k}]")
            self.register(buf, data, 1)
        self.declare_name_aliases(1)
        self.stmt(func.body, 1)
        self.emit(1, "return None")
        source = "".join(self.helpers) + "\n".join(self.lines) + "\n"
        namespace = self.namespace()
        try:
            code = compile(source, f"<refcomp interpreter: {func.name}>", "exec")
        except (SyntaxError, RecursionError, MemoryError) as exc:
            raise IRError(f"the interpreter cannot run {func.name}: the program nests too deeply ({exc})",
                          ir=func) from None
        exec(code, namespace)
        written = {b for b in self.written if b in buffer_params}
        return Kernel(namespace["_kernel"], buffer_params, scalar_inputs, written, source)

    def register(self, buf: Buffer, data: str, indent: int) -> None:
        """Make buf known: its list is `data`; its dims and strides are computed here."""
        dims = []
        for d, dim in enumerate(buf.shape):
            if isinstance(dim, IntImm):
                dims.append(str(dim.value))
            elif isinstance(dim, Var) and dim in self.names:
                dims.append(self.names[dim])
            else:
                name = self.fresh(f"{buf.name}_d{d}", "d")
                self.emit(indent, f"{name} = {self.ex(dim)}")
                dims.append(name)
        strides = ["1"] * len(dims)
        for d in range(len(dims) - 2, -1, -1):
            inner, size = strides[d + 1], dims[d + 1]
            if inner.isdigit() and size.isdigit():
                strides[d] = str(int(inner) * int(size))
            else:
                name = self.fresh(f"{buf.name}_s{d}", "s")
                self.emit(indent, f"{name} = {size} * {inner}")
                strides[d] = name
        self.bufs[buf] = _BufInfo(data, dims, strides, buf.shape)

    def declare_name_aliases(self, indent: int) -> None:
        """A buffer used but never declared, with a parameter's name, views that parameter's data.

        Flattening passes may re-declare a parameter with its flat shape; this lets the interpreter
        run their output.  Any other undeclared buffer is an error.
        """
        declared = set(self.bufs)
        for block in collect(self.func.body, Block):
            declared.update(block.alloc_buffers)
            declared.update(m.buffer for m in block.match_buffers)
        declared.update(a.buffer for a in collect(self.func.body, Allocate))
        used = [n.buffer for n in collect(self.func.body, BufferLoad)]
        used += [n.buffer for n in collect(self.func.body, BufferStore)]
        by_name = {b.name: b for b in self.bufs}
        for buf in dict.fromkeys(used):
            if buf in declared:
                continue
            param = by_name.get(buf.name)
            if param is None:
                raise IRError(f"buffer {buf.name} is used but never declared (not a parameter, "
                              "alloc_buffer, Allocate or match_buffer)", ir=self.func, spot=buf)
            self.register(buf, self.bufs[param].data, indent)
            self.alias_of[buf] = param
            declared.add(buf)

    def namespace(self) -> dict[str, Any]:
        func, sites = self.func, self.sites

        def oob(site: int, indices: tuple, dims: tuple) -> Any:
            node = sites[site]
            kind = "store to" if isinstance(node, BufferStore) else "load from"
            raise RuntimeFailure(
                f"{kind} {node.buffer.name}[{', '.join(map(str, indices))}] is out of bounds of shape "
                f"{tuple(dims)}", ir=func, spot=node)

        def zero_division(site: int) -> Any:
            raise RuntimeFailure("integer division by zero", ir=func, spot=sites[site])

        def floordiv(a: int, b: int, site: int) -> int:
            return a // b if b else zero_division(site)

        def floormod(a: int, b: int, site: int) -> int:
            return a % b if b else zero_division(site)

        def truncdiv(a: int, b: int, site: int) -> int:
            q = values.truncdiv(a, b)
            return zero_division(site) if q is None else q

        def truncmod(a: int, b: int, site: int) -> int:
            r = values.truncmod(a, b)
            return zero_division(site) if r is None else r

        def assert_failed(site: int) -> Any:
            node = sites[site]
            raise RuntimeFailure(f"assertion failed: {node.message}", ir=func, spot=node)

        def bad_alloc(site: int, size: int) -> Any:
            raise RuntimeFailure(f"allocation of {sites[site].name} has negative size {size}", ir=func,
                                 spot=sites[site])

        def f2i(x: float, low: int, high: int) -> int:
            return values.float_to_int(x, low, high)

        ns: dict[str, Any] = {
            "_oob": oob, "_floordiv": floordiv, "_floormod": floormod, "_truncdiv": truncdiv,
            "_truncmod": truncmod, "_assert_failed": assert_failed, "_bad_alloc": bad_alloc,
            "_fdiv": values.float_div, "_fmin": values.float_min, "_fmax": values.float_max,
            "_p32": values._F32.pack, "_u32": values._F32.unpack, "_r16": values.round_f16,
            "_rbf": values.round_bf16, "_r32": values.round_f32_outside, "_f2i": f2i, "_i2f": values.int_to_float,
            "_isnan": math.isnan, "_isinf": math.isinf, "_isfinite": math.isfinite,
            "_inf": math.inf, "_nan": math.nan, "_reinterpret": _reinterpret,
        }
        for name, fn in values.MATH_DOUBLE.items():
            ns["_m_" + name] = fn
        ns.update(self.consts)
        return ns

    # ------------------------------------------------------------------ expressions

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
        if op == "tvm_storage_sync":
            return "None"
        raise IRError(f"the interpreter cannot run the intrinsic {op!r}", ir=self.func, spot=e)

    # ------------------------------------------------------------------ statements

    def stmt(self, s: Stmt, indent: int) -> None:
        method = getattr(self, "st_" + type(s).__name__, None)
        if method is None:
            raise IRError(f"the interpreter does not know the statement {type(s).__name__}",
                          ir=self.func, spot=s)
        method(s, indent)

    def st_SeqStmt(self, s: SeqStmt, indent: int) -> None:
        if not s.stmts:
            self.emit(indent, "pass")
        for part in s.stmts:
            self.stmt(part, indent)

    def st_BufferStore(self, s: BufferStore, indent: int) -> None:
        info = self.buf_info(s.buffer, s)
        self.written.add(self.alias_of.get(s.buffer, s.buffer))
        if info.view_of is not None:
            self.written.add(info.view_of[0])
        lanes = max([s.value.dtype.lanes] + [i.dtype.lanes for i in s.indices])
        if lanes == 1:
            self.emit(indent, f"{info.data}[{self.flat_index(s, info, s.indices, 0)}] = {self.stored_value(s)}")
            return
        temp = self.fresh("vec", "_v")
        self.emit(indent, f"{temp} = ({', '.join(self.ex(s.value, k) for k in range(lanes))},)")
        for k in range(lanes):
            self.emit(indent, f"{info.data}[{self.flat_index(s, info, s.indices, k)}] = {temp}[{k}]")

    def stored_value(self, s: BufferStore) -> str:
        """Code of a scalar store's value; a float32 array rounds on store, so the last + - * / need not."""
        value = s.value
        if (s.buffer.dtype.name == "float32" and "float32" in values.TYPECODES and value.dtype.lanes == 1
                and isinstance(value, (Add, Sub, Mul, Div))):
            a, b = self.ex(value.a), self.ex(value.b)
            if isinstance(value, Div):
                return f"_fdiv({a}, {b})"
            return f"{a} {value.symbol} {b}"
        return self.ex(value)

    def st_Evaluate(self, s: Evaluate, indent: int) -> None:
        self.emit(indent, self.ex(s.value))

    def st_IfThenElse(self, s: IfThenElse, indent: int) -> None:
        self.emit(indent, f"if {self.ex(s.condition)}:")
        self.stmt(s.then_case, indent + 1)
        if s.else_case is not None:
            self.emit(indent, "else:")
            self.stmt(s.else_case, indent + 1)

    def nested(self, indent: int, emit_loop: Callable[[int], None]) -> None:
        """Run emit_loop here, or inside a fresh nested function when loops nest too deeply."""
        if self.loop_depth < _MAX_LOOP_DEPTH:
            self.loop_depth += 1
            emit_loop(indent)
            self.loop_depth -= 1
            return
        name = self.fresh("deeper", "_f")
        saved = self.loop_depth
        self.emit(indent, f"def {name}():")
        self.loop_depth = 1
        emit_loop(indent + 1)
        self.emit(indent + 1, "return None")
        self.loop_depth = saved
        self.emit(indent, f"{name}()")

    def st_For(self, s: For, indent: int) -> None:
        low, extent = self.ex(s.min), self.ex(s.extent)
        name = self.bind_var(s.loop_var)
        if isinstance(s.min, IntImm):
            high = s.extent if s.min.value == 0 else (
                IntImm(s.min.value + s.extent.value, s.extent.dtype) if isinstance(s.extent, IntImm) else None)
            if high is not None:
                self.ranges[s.loop_var] = _Range(s.min.value, high)
        bound = extent if low == "0" else f"{low}, {low} + {extent}"

        def loop(at: int) -> None:
            self.emit(at, f"for {name} in range({bound}):")
            self.stmt(s.body, at + 1)

        self.nested(indent, loop)

    def st_While(self, s: While, indent: int) -> None:
        def loop(at: int) -> None:
            self.emit(at, f"while {self.ex(s.condition)}:")
            self.stmt(s.body, at + 1)

        self.nested(indent, loop)

    def st_LetStmt(self, s: LetStmt, indent: int) -> None:
        value_codes = [self.ex(s.value, k) for k in range(s.var.dtype.lanes)]
        self.bind_var(s.var)
        for k, code in enumerate(value_codes):
            self.emit(indent, f"{self.ex(s.var, k)} = {code}")
        if isinstance(s.value, Var) and s.value in self.ranges:
            self.ranges[s.var] = self.ranges[s.value]
        self.stmt(s.body, indent)

    def allocate(self, buf: Buffer, indent: int) -> None:
        data = self.fresh(buf.name, "B")
        self.register(buf, data, indent)
        size = " * ".join(self.bufs[buf].dims) or "1"
        count = self.fresh("n", "_n")
        self.emit(indent, f"{count} = {size}")
        self.emit(indent, f"if {count} < 0: _bad_alloc({self.site(buf)}, {count})")
        key = self.fresh("alloc", "_A")
        self.consts[key] = functools.partial(values.new_storage, buf.dtype, fill=garbage(buf.dtype))
        self.emit(indent, f"{data} = {key}({count})")

    def st_Allocate(self, s: Allocate, indent: int) -> None:
        self.allocate(s.buffer, indent)
        self.stmt(s.body, indent)

    def st_AssertStmt(self, s: AssertStmt, indent: int) -> None:
        self.emit(indent, f"if not {self.ex(s.condition)}: _assert_failed({self.site(s)})")
        self.stmt(s.body, indent)

    def st_BlockRealize(self, s: BlockRealize, indent: int) -> None:
        block = s.block
        pred = s.predicate
        if not (isinstance(pred, IntImm) and pred.value == 1):
            self.emit(indent, f"if {self.ex(pred)}:")
            indent += 1
        values_code = [self.ex(v) for v in s.iter_values]
        for iv, value, code in zip(block.iter_vars, s.iter_values, values_code):
            if isinstance(value, Var) and iv.var.dtype.lanes == 1:
                self.names[iv.var] = code  # bound to a variable: use that variable's local directly
            else:
                self.emit(indent, f"{self.bind_var(iv.var)} = {code}")
            if isinstance(value, Var) and value in self.ranges:
                self.ranges[iv.var] = self.ranges[value]
        self.block_body(block, indent)

    def st_Block(self, s: Block, indent: int) -> None:
        if s.iter_vars:
            raise IRError(f"block {s.name} has iteration variables but no BlockRealize binding them",
                          ir=self.func, spot=s)
        self.block_body(s, indent)

    def block_body(self, block: Block, indent: int) -> None:
        for buf in block.alloc_buffers:
            self.allocate(buf, indent)
        for match in block.match_buffers:
            self.match_buffer(match, indent)
        if block.init is not None:
            reduce_vars = [iv for iv in block.iter_vars if iv.kind == "reduce"]
            if reduce_vars:
                first = " and ".join(f"{self.ex(iv.var)} == {self.ex(iv.dom.min)}" for iv in reduce_vars)
                self.emit(indent, f"if {first}:")
                self.stmt(block.init, indent + 1)
            else:
                self.stmt(block.init, indent)
        self.stmt(block.body, indent)

    def match_buffer(self, match: Any, indent: int) -> None:
        """A match buffer views the source region: its index j is source index min + j (trailing dims)."""
        view, source = match.buffer, match.source
        source_info = self.buf_info(source.buffer, match)
        if source_info.view_of is not None:
            raise IRError("a match buffer of a match buffer is not supported by the interpreter",
                          ir=self.func, spot=match)
        if len(view.shape) > len(source.region):
            raise IRError(f"match buffer {view.name} has more dims than its source region",
                          ir=self.func, spot=match)
        lead = len(source.region) - len(view.shape)
        for dim, rng in zip(view.shape, source.region[lead:]):
            if isinstance(dim, Var) and dim not in self.names:
                self.emit(indent, f"{self.bind_var(dim)} = {self.ex(rng.extent)}")
        mins = []
        for rng in source.region:
            name = self.fresh(f"{view.name}_min", "m")
            self.emit(indent, f"{name} = {self.ex(rng.min)}")
            mins.append(name)
        self.register(view, source_info.data, indent)
        self.bufs[view].view_of = (source.buffer, mins)


def _reinterpret(x: Any, src: str, dst: str) -> Any:
    import struct

    if src == "bfloat16":
        x = values.bf16_bits(x)
    raw = struct.pack("<" + _STRUCT_CODES[src], x)
    out = struct.unpack("<" + _STRUCT_CODES[dst], raw)[0]
    return values.bf16_value(out) if dst == "bfloat16" else out
