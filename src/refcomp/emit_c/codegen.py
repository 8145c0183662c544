"""The C emitter: lowered loop IR (no blocks) -> one standalone C99 translation unit.

The calling convention is spec/c_abi.md.  Expressions become C expressions; vector expressions
become GCC vector code in the native target and per-lane loops in strict C99 (or when the lane
count is not a power of two).  Every failure path (a failed AssertStmt, out of memory) sets a
status code and jumps to the cleanup label of the innermost scope that owns heap memory or
parallel work, so a kernel never leaks and never returns from inside an OpenMP region.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from .. import __version__
from ..ast import expr as E
from ..ast import stmt as S
from ..ast.buffer import Buffer
from ..ast.dtype import DataType, int64
from ..ast.function import PrimFunc
from ..ast.functor import collect, free_vars, substitute
from ..errors import BuildError
from . import mathlib
from .ctype import (
    float_literal, int_literal, is_half, short_name, storage_type, value_type,
)
from .legalize import split_wide_vectors
from .names import NameTable, c_string, comment_safe, mangle, symbol_suffix
from .prelude import HEADER_INCLUDES, scalar_prelude
from .vector import VectorLib

OUT_OF_MEMORY = 1
FIRST_ASSERT_CODE = 2
STACK_LIMIT_BYTES = 16 * 1024
_C_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_HEADER = re.compile(r"[A-Za-z0-9_./+-]+\Z")
_ARITH = {E.Add: "+", E.Sub: "-", E.Mul: "*"}
_COMPARE = {E.EQ: "==", E.NE: "!=", E.LT: "<", E.LE: "<=", E.GT: ">", E.GE: ">="}
_INT_HELPER = {E.FloorDiv: "floordiv", E.FloorMod: "floormod", E.TruncDiv: "truncdiv",
               E.TruncMod: "truncmod"}


@dataclass(frozen=True)
class EmitOptions:
    """What the target allows: GCC vector extensions, OpenMP pragmas, libmvec functions."""

    vectors: bool = True
    openmp: bool = True
    mvec_functions: frozenset = frozenset()
    label: str = "c"
    vector_bytes: int = 0  # the machine's vector register size; wider vector code is split


@dataclass(frozen=True)
class CParam:
    """One parameter of the exported C function."""

    kind: str  # "buffer", "scalar" or "size"
    c_name: str
    c_type: str
    obj: object  # the Buffer or Var of the IR


@dataclass
class CModule:
    """An emitted kernel: the C text and what the loader needs to call it."""

    source: str
    func_name: str
    symbol: str
    message_symbol: str
    params: tuple[CParam, ...]
    messages: dict[int, str] = field(default_factory=dict)
    needs_amx: bool = False

    def cdef(self) -> str:
        """The C declarations of the exported functions (for the cffi loader)."""
        args = ", ".join(f"{p.c_type} {p.c_name}".replace(" restrict", "") for p in self.params)
        return (f"int32_t {self.symbol}({args or 'void'});\n"
                f"const char* {self.message_symbol}(int32_t code);\n")


def size_vars_of(func: PrimFunc) -> list[E.Var]:
    """Variables in buffer shapes (and strides) that are not parameters, in first-appearance order."""
    params = set(func.scalar_params)
    out: dict[E.Var, None] = {}
    for buffer in func.buffers:
        for dim in tuple(buffer.shape) + tuple(buffer.strides) + (buffer.elem_offset,):
            for var in free_vars(dim):
                if var not in params:
                    out.setdefault(var, None)
    return list(out)


def emit(func: PrimFunc, options: EmitOptions = EmitOptions(), size_vars: list[E.Var] | None = None) -> CModule:
    """Emit the C source of a lowered PrimFunc (see spec/c_abi.md for the exported signature)."""
    if not isinstance(func, PrimFunc):
        raise BuildError(f"build: expected a PrimFunc, got {type(func).__name__}")
    size_vars = size_vars_of(func) if size_vars is None else size_vars
    if options.vectors and options.vector_bytes:
        func = split_wide_vectors(func, options.vector_bytes)
    return _Emitter(func, options, size_vars).run()


class _Scope:
    """A failure target: a label the emitter jumps to, created only if something jumps there."""

    def __init__(self, label: str, parallel: bool) -> None:
        self.label = label
        self.parallel = parallel
        self.used = False


class _Emitter:
    def __init__(self, func: PrimFunc, options: EmitOptions, size_vars: list[E.Var]) -> None:
        self.func = func
        self.options = options
        self.size_vars = size_vars
        self.names = NameTable()
        self.vec = VectorLib(options.mvec_functions)
        self.lines: list[str] = []
        self.depth = 1
        self.messages: dict[int, str] = {OUT_OF_MEMORY: "out of memory"}
        self.scopes: list[_Scope] = []
        self.buffers: dict[Buffer, str] = {}
        self.array_vars: set[E.Var] = set()  # vector vars held as C arrays (lane mode)
        self.in_parallel = False
        self.status_used = False
        self.index_depth = 0  # > 0 while emitting an index, loop bound or allocation size

    # ================================================================== driver
    def run(self) -> CModule:
        func = self.func
        if collect(func.body, S.Block) or collect(func.body, S.BlockRealize):
            raise BuildError(f"build: function {func.name!r} still has blocks; lower it first "
                             "(refcomp.loops.lower.lower)", ir=func)
        symbol = f"refcomp_{symbol_suffix(func.name)}"
        self.names.reserve(symbol)
        params: list[CParam] = []
        for p in func.params:
            if isinstance(p, Buffer):
                name = self.names.name_of(p, p.name)
                self.buffers[p] = name
                params.append(CParam("buffer", name, f"{storage_type(p.dtype)}* restrict", p))
        for p in func.scalar_params:
            params.append(CParam("scalar", self.names.name_of(p, p.name), value_type(p.dtype), p))
        size_locals = []
        for var in self.size_vars:
            if var.dtype == int64:
                params.append(CParam("size", self.names.name_of(var, var.name), "int64_t", var))
            else:
                arg = self.names.fresh("rc_arg_" + mangle(var.name))  # mangled: a safe suffix
                params.append(CParam("size", arg, "int64_t", var))
                size_locals.append(f"const {value_type(var.dtype)} {self.names.name_of(var, var.name)} = "
                                   f"({value_type(var.dtype)}){arg};")
        self._check_free_vars(set(func.scalar_params) | set(self.size_vars))

        root = _Scope("rc_exit", parallel=False)
        self.scopes.append(root)
        self.stmt(func.body)
        body = self.lines
        self.lines = []

        out: list[str] = []
        signature = ", ".join(f"{p.c_type} {p.c_name}" for p in params) or "void"
        out.append(f"/* {comment_safe(func.name)}: {len(params)} parameters, see spec/c_abi.md */")
        out.append(f"int32_t {symbol}({signature}) {{")
        for p in params:
            out.append(f"    (void){p.c_name};")
        out.extend("    " + line for line in size_locals)
        if self.options.vectors:
            for p in params:
                if p.kind == "buffer" and p.obj.align > 0:
                    out.append(f"    {p.c_name} = ({p.c_type.replace(' restrict', '')})"
                               f"__builtin_assume_aligned({p.c_name}, {p.obj.align});")
        if self.status_used or root.used:
            out.append("    int32_t rc_status = 0;")
        out.extend(body)
        if root.used:
            out.append("rc_exit:")
            out.append("    return rc_status;")
        else:
            out.append("    return 0;")
        out.append("}")
        message_symbol = f"{symbol}_message"
        out.append("")
        out.append(f"const char* {message_symbol}(int32_t code) {{")
        out.append("    switch (code) {")
        out.append('    case 0: return "ok";')
        for code, message in sorted(self.messages.items()):
            out.append(f"    case {code}: return {c_string(message)};")
        out.append('    default: return "unknown error code";')
        out.append("    }")
        out.append("}")
        source = self._assemble(out)
        return CModule(source=source, func_name=func.name, symbol=symbol, message_symbol=message_symbol,
                       params=tuple(params), messages=dict(self.messages),
                       needs_amx=bool(func.attrs.get("needs_amx", False)))

    def _assemble(self, kernel: list[str]) -> str:
        func, opts = self.func, self.options
        head = [f"/* Generated by refcomp {__version__} from PrimFunc {comment_safe(repr(func.name))} "
                f"for target '{comment_safe(opts.label)}'. */",
                "/* Standalone C: the calling convention is described in refcomp's spec/c_abi.md. */"]
        if opts.vectors:
            head.append("#define RC_NATIVE 1")
        head.extend(f"#include <{h}>" for h in HEADER_INCLUDES)
        includes = func.attrs.get("c_includes", ())
        if isinstance(includes, str):
            includes = (includes,)
        for header in dict.fromkeys(includes):
            if not isinstance(header, str) or not _HEADER.match(header):
                raise BuildError(f"build: attr c_includes: {header!r} is not a plain header name", ir=func)
            head.append(f"#include <{header}>")
        if opts.vectors and self.vec.mvec_used:
            head.append("#if defined(__x86_64__)\n#include <immintrin.h>\n#endif")
        parts = ["\n".join(head), scalar_prelude()]
        if opts.vectors and self.vec.mvec_used:
            parts.append(mathlib.MVEC_SELECT.strip("\n"))
        vector_text = self.vec.text()
        if vector_text:
            parts.append(vector_text.rstrip("\n"))
        helpers = func.attrs.get("c_helpers", ())
        if isinstance(helpers, str):
            helpers = (helpers,)
        for helper in dict.fromkeys(helpers):
            if not isinstance(helper, str):
                raise BuildError(f"build: attr c_helpers must hold C source strings, got {helper!r}", ir=func)
            parts.append(helper.strip("\n"))
        parts.append("\n".join(kernel))
        return "\n\n".join(parts) + "\n"

    def _check_free_vars(self, allowed: set) -> None:
        for var in free_vars(self.func.body):
            if var not in allowed:
                raise BuildError(f"build: variable {var.name!r} is used but never defined "
                                 "(not a parameter, loop variable, let or buffer dimension)",
                                 ir=self.func, spot=var)

    # ================================================================== output helpers
    def line(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    def pragma(self, text: str) -> None:
        self.lines.append(text)

    def fail(self, code: int) -> None:
        """Record failure `code` and jump to the innermost failure target."""
        scope = self.scopes[-1]
        scope.used = True
        self.status_used = True
        if self.in_parallel:
            self.pragma("#pragma omp atomic write")
        self.line(f"rc_status = {code};")
        self.line(f"goto {scope.label};")

    # ================================================================== statements
    def stmt(self, s: S.Stmt) -> None:
        method = getattr(self, "stmt_" + type(s).__name__, None)
        if method is None:
            raise BuildError(f"build: the C backend cannot emit {type(s).__name__} statements",
                             ir=self.func, spot=s)
        method(s)

    def stmt_SeqStmt(self, s: S.SeqStmt) -> None:
        for item in s.stmts:
            self.stmt(item)

    def stmt_Evaluate(self, s: S.Evaluate) -> None:
        value = s.value
        if isinstance(value, E.Call) and value.op in ("assume", "tvm_storage_sync"):
            return
        if isinstance(value, (E.IntImm, E.FloatImm)):
            return
        self.line(f"(void)({self.expr(value)});")

    def stmt_IfThenElse(self, s: S.IfThenElse) -> None:
        self.line(f"if ({self.expr(s.condition)}) {{")
        self.nested(s.then_case)
        if s.else_case is not None:
            self.line("} else {")
            self.nested(s.else_case)
        self.line("}")

    def nested(self, s: S.Stmt) -> None:
        self.depth += 1
        self.stmt(s)
        self.depth -= 1

    def stmt_While(self, s: S.While) -> None:
        self.line(f"while ({self.expr(s.condition)}) {{")
        self.nested(s.body)
        self.line("}")

    def stmt_LetStmt(self, s: S.LetStmt) -> None:
        name = self.names.name_of(s.var, s.var.name)
        dtype = s.var.dtype
        self.line("{")
        self.depth += 1
        if dtype.lanes > 1 and not self.vector_ok(dtype):
            self.array_vars.add(s.var)
            self.line(f"{value_type(dtype.element)} {name}[{dtype.lanes}];")
            self.lane_loop(lambda lane: f"{name}[{lane}] = {self.expr(s.value, lane)};", dtype.lanes)
        else:
            self.line(f"const {self.ctype(dtype)} {name} = {self.expr(s.value)};")
        self.stmt(s.body)
        self.depth -= 1
        self.line("}")

    def stmt_AssertStmt(self, s: S.AssertStmt) -> None:
        code = FIRST_ASSERT_CODE + len(self.messages) - 1
        self.messages[code] = str(s.message)
        self.line(f"if (!({self.expr(s.condition)})) {{")
        self.depth += 1
        self.fail(code)
        self.depth -= 1
        self.line("}")
        self.stmt(s.body)

    def stmt_Allocate(self, s: S.Allocate) -> None:
        buffer = s.buffer
        name = self.names.name_of(buffer, buffer.name)
        self.buffers[buffer] = name
        st = storage_type(buffer.dtype)
        count = 1
        constant = True
        for dim in buffer.shape:
            value = E.as_int(dim)
            if value is None:
                constant = False
                break
            count *= max(value, 0)
        self.line("{")
        self.depth += 1
        if constant and count * buffer.dtype.bytes <= STACK_LIMIT_BYTES:
            align = f" __attribute__((aligned({max(buffer.align, 64)})))" if self.options.vectors else ""
            self.line(f"{st} {name}[{max(count, 1)}]{align};")
            self.stmt(s.body)
        else:
            size = " * ".join(f"(size_t)({self.index(d)})" for d in buffer.shape) or "1"
            self.line(f"{st}* {name} = ({st}*)malloc(sizeof({st}) * ({size}) + 1);")
            self.line(f"if ({name} == NULL) {{")
            self.depth += 1
            self.fail(OUT_OF_MEMORY)
            self.depth -= 1
            self.line("}")
            scope = _Scope(self.names.fresh(f"rc_free_{name}"), parallel=False)
            outer = self.scopes[-1]
            self.scopes.append(scope)
            self.stmt(s.body)
            self.scopes.pop()
            self.line(f"free({name});")
            if scope.used:
                done = self.names.fresh(f"rc_done_{name}")
                self.line(f"goto {done};")
                self.lines.append(f"{scope.label}:")
                self.line(f"free({name});")
                outer.used = True
                self.line(f"goto {outer.label};")
                self.lines.append(f"{done}: ;")
        self.depth -= 1
        self.line("}")

    def stmt_For(self, s: S.For) -> None:
        var = self.names.name_of(s.loop_var, s.loop_var.name)
        ctype = value_type(s.loop_var.dtype)
        low = self.index(s.min)
        if _is_zero(s.min):
            end = self.index(s.extent)
        elif s.min.dtype == s.extent.dtype:
            end = self.index(E.Add(s.min, s.extent))
        else:
            end = f"({low} + {self.index(s.extent)})"
        header = f"for ({ctype} {var} = {low}; {var} < {end}; ++{var}) {{"
        if s.kind == "thread_binding":
            raise BuildError(f"build: loop {s.loop_var.name} is bound to {s.thread_binding}; "
                             "GPU thread bindings need the CUDA target", ir=self.func, spot=s)
        if s.kind == "parallel" and self.options.openmp and not self.in_parallel:
            self.emit_parallel(s, header)
            return
        if s.kind == "unrolled":
            extent = E.as_int(s.extent)
            if extent is not None and 0 < extent <= 1024:
                self.pragma(f"#pragma GCC unroll {extent}")
        if s.kind == "vectorized" and self.options.openmp and _simd_safe(s.body):
            self.pragma("#pragma omp simd")
        self.line(header)
        self.nested(s.body)
        self.line("}")

    def emit_parallel(self, s: S.For, header: str) -> None:
        scope = _Scope(self.names.fresh("rc_next"), parallel=True)
        outer = self.scopes[-1]
        self.scopes.append(scope)
        self.in_parallel = True
        self.pragma("#pragma omp parallel for schedule(static)")
        self.line(header)
        self.nested(s.body)
        if scope.used:
            self.lines.append(f"{scope.label}: ;")
        self.line("}")
        self.in_parallel = False
        self.scopes.pop()
        if scope.used:
            outer.used = True
            self.line(f"if (rc_status != 0) goto {outer.label};")

    def stmt_BufferStore(self, s: S.BufferStore) -> None:
        buffer = s.buffer
        index = self.flat_index(buffer, s.indices)
        dtype = s.value.dtype
        lanes = max(dtype.lanes, index.dtype.lanes)
        if lanes == 1:
            self.line(f"{self.buffer_name(buffer)}[{self.index(index)}] = "
                      f"{self.to_storage(buffer.dtype, self.expr(s.value))};")
            return
        if dtype.lanes == 1:  # scalar value stored to many lanes
            value = E.Broadcast(s.value, lanes)
        else:
            value = s.value
        vtype = buffer.dtype.with_lanes(lanes)
        if self.vector_ok(vtype) and (index.dtype.lanes == 1 or self.vector_ok(index.dtype)):
            name = self.buffer_name(buffer)
            base = _unit_ramp_base(index)
            if base is not None:
                self.line(f"{self.vec.store(vtype)}(&{name}[{self.index(base)}], {self.expr(value)});")
            elif index.dtype.lanes == 1:
                self.line(f"{name}[{self.index(index)}] = {self.to_storage(buffer.dtype, self.expr(value))}; "
                          "/* all lanes hit one element: the last lane wins */")
            else:
                helper = self.vec.scatter(vtype, index.dtype)
                self.line(f"{helper}({name}, {self.index(index)}, {self.expr(value)});")
            return
        # Lane mode: every lane's value is computed before any is stored (vector semantics).
        self.line("{")
        self.depth += 1
        tmp = self.names.fresh("rc_lanes")
        self.line(f"{value_type(buffer.dtype)} {tmp}[{lanes}];")
        self.lane_loop(lambda lane: f"{tmp}[{lane}] = {self.expr(value, lane)};", lanes)
        name = self.buffer_name(buffer)
        self.lane_loop(lambda lane: f"{name}[{self.index(index, lane)}] = "
                                    f"{self.to_storage(buffer.dtype, f'{tmp}[{lane}]')};", lanes)
        self.depth -= 1
        self.line("}")

    def lane_loop(self, body, lanes: int) -> None:
        lane = self.names.fresh("rc_l")
        self.line(f"for (int32_t {lane} = 0; {lane} < {lanes}; ++{lane}) {{")
        self.depth += 1
        self.line(body(lane))
        self.depth -= 1
        self.line("}")

    def stmt_Block(self, s: S.Stmt) -> None:
        raise BuildError("build: blocks must be lowered before C emission", ir=self.func, spot=s)

    stmt_BlockRealize = stmt_Block

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
            term = E.Mul(widen(index), stride)
            total = term if total is None else E.Add(total, term)
        return total

    def load(self, load: E.BufferLoad, lane: str | None) -> str:
        buffer = load.buffer
        index = self.flat_index(buffer, load.indices)
        name = self.buffer_name(buffer)
        lanes = load.dtype.lanes
        if lanes == 1 or lane is not None:
            return self.from_storage(buffer.dtype, f"{name}[{self.index(index, lane)}]")
        base = _unit_ramp_base(index)
        if base is not None:
            return f"{self.vec.load(load.dtype)}(&{name}[{self.index(base)}])"
        if isinstance(index, E.Broadcast):
            return f"{self.vec.broadcast(load.dtype)}({self.from_storage(buffer.dtype, f'{name}[{self.index(index.value)}]')})"
        return f"{self.vec.gather(load.dtype, index.dtype)}({name}, {self.index(index)})"

    def from_storage(self, dtype: DataType, text: str) -> str:
        if dtype.is_bool:
            return f"({text} != 0)"
        if dtype.name == "float16":
            return f"rc_f16_to_float({text})"
        if dtype.name == "bfloat16":
            return f"rc_bf16_to_float({text})"
        return text

    def to_storage(self, dtype: DataType, text: str) -> str:
        if dtype.is_bool:
            return f"(uint8_t)({text})"
        if dtype.name == "float16":
            return f"rc_float_to_f16({text})"
        if dtype.name == "bfloat16":
            return f"rc_float_to_bf16({text})"
        return text

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

    def expr_Let(self, e: E.Let, lane) -> str:
        if self.options.vectors and lane is None:
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
        if self.vector_mode(e, lane):
            return f"{self.vec.lanewise(op, e.dtype)}({a}, {b})"
        return f"rc_{op}_{short_name(e.dtype.element)}({a}, {b})"

    expr_FloorDiv = expr_FloorMod = expr_TruncDiv = expr_TruncMod = int_division

    def minmax(self, e: E.BinaryOp, lane) -> str:
        a, b = self.binary(e, lane)
        op = "min" if isinstance(e, E.Min) else "max"
        if self.vector_mode(e, lane):
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
        if self.vector_mode(e, lane):
            cond = self.expr(e.condition) if e.condition.dtype.lanes > 1 else \
                self.expr(E.Broadcast(e.condition, e.dtype.lanes))
            return (f"{self.vec.select(e.dtype)}({cond}, {self.expr(e.true_value)}, "
                    f"{self.expr(e.false_value)})")
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
        if source.bits != target.bits or self.vector_mode(e, lane):
            raise BuildError(f"build: reinterpret from {arg.dtype} to {e.dtype} is not supported",
                             ir=self.func, spot=e)
        value = self.expr(arg, lane)
        if is_half(source):
            value = self.to_storage(source, value)
            source = DataType("uint16")
        if is_half(target):
            return self.from_storage(target, f"rc_bitcast_{short_name(source)}_u16({value})"
                                     if source.name != "uint16" else value)
        helper = f"rc_bitcast_{short_name(source)}_{short_name(target)}"
        s_t, t_t = value_type(source), value_type(target)
        self.vec._add(helper, f"static inline {t_t} {helper}({s_t} x) {{ {t_t} y; memcpy(&y, &x, sizeof y); return y; }}")
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


def _is_zero(e: E.PrimExpr) -> bool:
    return isinstance(e, E.IntImm) and e.value == 0


def _unit_ramp_base(index: E.PrimExpr) -> E.PrimExpr | None:
    """The base of index if it is Ramp(base, 1, lanes) (a contiguous access), else None."""
    if isinstance(index, E.Ramp) and isinstance(index.stride, E.IntImm) and index.stride.value == 1:
        return index.base
    return None


def _simd_safe(body: S.Stmt) -> bool:
    """`omp simd` forbids jumps out of the loop and calls with effects; only plain bodies get it."""
    if collect(body, S.AssertStmt) or collect(body, S.Allocate) or collect(body, S.While):
        return False
    for call in collect(body, E.Call):
        if call.op == "call_extern":
            return False
    return True


__all__ = ["CModule", "CParam", "EmitOptions", "emit", "size_vars_of", "cast_scalar"]
