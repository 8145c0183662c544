"""The C emitter: lowered loop IR (no blocks) -> one standalone C99 translation unit.

The calling convention is spec/c_abi.md.  Expressions become C expressions; vector expressions
become GCC vector code in the native target and per-lane loops in strict C99 (or when the lane
count is not a power of two).  Every failure path (a failed AssertStmt, out of memory) sets a
status code and jumps to the cleanup label of the innermost scope that owns heap memory or
parallel work, so a kernel never leaks and never returns from inside an OpenMP region.
Integer division by zero is one of these failures (emit_c/zero_checks).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..version import __version__
from ..ast import expr as E
from ..ast import stmt as S
from ..ast.buffer import Buffer
from ..ast.dtype import int64
from ..ast.function import PrimFunc
from ..ast.functor import collect, free_vars
from ..errors import BuildError
from . import mathlib
from .codegen_expr import ExprEmitter, _is_zero, unit_ramp_base, cast_scalar
from .ctype import storage_type, value_type
from .legalize import split_wide_vectors
from .names import NameTable, c_string, comment_safe, mangle, symbol_suffix
from .prelude import HEADER_INCLUDES, scalar_prelude
from .vector import VectorLib
from .zero_checks import ZeroChecks, divides_by_variable

OUT_OF_MEMORY = 1
FIRST_ASSERT_CODE = 2
STACK_LIMIT_BYTES = 16 * 1024
# For annotation: contiguous vector stores in the loop may bypass the cache (write-once output).
NONTEMPORAL = S.NONTEMPORAL_STORE
# For annotation on parallel loops: "static" (the default) or "dynamic" (coarse chunks, about 32
# per thread: better when other processes compete for the cores; measured neither clearly better
# nor worse here, so static, which is predictable, stays the default).
OMP_SCHEDULE = "omp_schedule"
DEFAULT_OMP_SCHEDULE = "static"
_HEADER = re.compile(r"[A-Za-z0-9_./+-]+\Z")


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
    return CFamilyEmitter(func, options, size_vars).run()


class FailureScope:
    """A failure target: a label the emitter jumps to, created only if something jumps there."""

    def __init__(self, label: str, parallel: bool) -> None:
        self.label = label
        self.parallel = parallel
        self.used = False


class CFamilyEmitter(ZeroChecks, ExprEmitter):
    """The C-family emitter base: C expressions, statements, failure scopes and the exported function.

    `run()` gives the C99 module.  Another C-family backend (emit_cuda) subclasses it and overrides
    the statement visitors it prints differently; the expression, cast, NaN, half-precision and
    integer-division rules stay the ones of this class, so every C-family target agrees on them.
    """

    def __init__(self, func: PrimFunc, options: EmitOptions, size_vars: list[E.Var]) -> None:
        self.func = func
        self.options = options
        self.size_vars = size_vars
        self.names = NameTable()
        self.vec = VectorLib(options.mvec_functions)
        self.lines: list[str] = []
        self.depth = 1
        self.messages: dict[int, str] = {OUT_OF_MEMORY: "out of memory"}
        self.scopes: list[FailureScope] = []
        self.buffers: dict[Buffer, str] = {}
        self.array_vars: set[E.Var] = set()  # vector vars held as C arrays (lane mode)
        self.in_parallel = False
        self.status_used = False
        self.index_depth = 0  # > 0 while emitting an index, loop bound or allocation size
        self.nontemporal = 0  # > 0 inside a loop annotated NONTEMPORAL
        self.nontemporal_names: list[str | None] = []  # each such loop's buffer name (None: every buffer)
        self.uses_omp_api = False
        self.streamed = False
        ZeroChecks.__init__(self)

    # ================================================================== driver
    def run(self) -> CModule:
        func = self.func
        if collect(func.body, S.Block) or collect(func.body, S.BlockRealize):
            raise BuildError(f"build: function {func.name!r} still has blocks; lower it first "
                             "(refcomp.loops.lower.lower)", ir=func)
        symbol = f"refcomp_{symbol_suffix(func.name)}"
        self.names.reserve(symbol)
        for buffer in list(func.buffers) + [a.buffer for a in collect(func.body, S.Allocate)]:
            if buffer.dtype.lanes != 1 or buffer.dtype.name == "handle":
                raise BuildError(f"build: buffer {buffer.name!r} has element type {buffer.dtype}; the C "
                                 "backend stores scalar elements only (use vector loads of a scalar buffer)",
                                 ir=func, spot=buffer)
        params, size_locals = self._parameters("restrict")

        root = FailureScope("rc_exit", parallel=False)
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
        for var in self.size_vars:  # a size only the assumptions mention (stage III's facts) is unused
            name = self.names.name_of(var, var.name)
            if var.dtype != int64 and not any(re.search(rf"\b{re.escape(name)}\b", line) for line in body):
                out.append(f"    (void){name};")
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
        if self.uses_omp_api:
            head.append("#include <omp.h>")
        includes = func.attrs.get("c_includes", ())
        if isinstance(includes, str):
            includes = (includes,)
        for header in dict.fromkeys(includes):
            if not isinstance(header, str) or not _HEADER.match(header):
                raise BuildError(f"build: attr c_includes: {header!r} is not a plain header name", ir=func)
            head.append(f"#include <{header}>")
        if opts.vectors and (self.vec.mvec_used or self.vec.needs_intrinsics):
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

    def _parameters(self, restrict: str) -> tuple[list[CParam], list[str]]:
        """The exported function's parameters (spec/c_abi.md): buffers as `T* <restrict>`, then
        scalars, then the size vars as int64_t; and the locals that narrow a size var of another
        integer type from its int64_t argument.  Checks that the body uses no other free var."""
        func = self.func
        params: list[CParam] = []
        for p in func.params:
            if isinstance(p, Buffer):
                name = self.names.name_of(p, p.name)
                self.buffers[p] = name
                params.append(CParam("buffer", name, f"{storage_type(p.dtype)}* {restrict}", p))
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
        return params, size_locals

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
        self.with_zero_check(lambda: method(s))

    def stmt_SeqStmt(self, s: S.SeqStmt) -> None:
        for item in s.stmts:
            self.stmt(item)

    def stmt_Evaluate(self, s: S.Evaluate) -> None:
        value = s.value
        if isinstance(value, E.Call) and value.op in ("assume", "tvm_storage_sync"):
            return
        if isinstance(value, E.Call) and value.op == "prefetch":
            self.prefetch(value)
            return
        if isinstance(value, (E.IntImm, E.FloatImm)):
            return
        self.line(f"(void)({self.expr(value)});")

    def prefetch(self, call: E.Call) -> None:
        """A software prefetch of the element's cache line (the `prefetch` schedule primitive):
        for reading (rw 0) or writing (rw 1), kept in every cache level (locality 3).  Its index
        is computed only where the builtin is: a hint must cost nothing where it does nothing."""
        load, write = call.args
        index = self.flat_index(load.buffer, load.indices)
        self.pragma("#if defined(__GNUC__)")  # a GNU builtin (gcc, clang); other compilers skip the hint
        self.line(f"__builtin_prefetch(&{self.buffer_name(load.buffer)}[{self.index(index)}], "
                  f"{1 if E.as_int(write) else 0}, 3);")
        self.pragma("#endif")

    def stmt_IfThenElse(self, s: S.IfThenElse) -> None:
        condition = self.checked_value("bool", self.expr(s.condition), "rc_cond")
        self.test_zero_flag()
        self.line(f"if ({condition}) {{")
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
        condition = self.expr(s.condition)
        if self.statement_flag is None:
            self.line(f"while ({condition}) {{")
            self.nested(s.body)
            self.line("}")
            return
        self.line("while (1) {")  # the condition is computed and tested on every iteration
        self.depth += 1
        holds = self.checked_value("bool", condition, "rc_cond")
        self.test_zero_flag()
        self.line(f"if (!{holds}) break;")
        self.stmt(s.body)
        self.depth -= 1
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
            self.line(f"(void){name};  /* the body may not use it: no unused-variable warning */")
        self.test_zero_flag()
        self.stmt(s.body)
        self.depth -= 1
        self.line("}")

    def failure_code(self, message: str) -> int:
        """A new status code (after those used so far) for a failure with this message."""
        code = FIRST_ASSERT_CODE + len(self.messages) - 1
        self.messages[code] = message
        return code

    def stmt_AssertStmt(self, s: S.AssertStmt) -> None:
        code = self.failure_code(str(s.message))
        condition = self.checked_value("bool", self.expr(s.condition), "rc_cond")
        self.test_zero_flag()
        self.line(f"if (!({condition})) {{")
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
            size = self.checked_value("size_t", size, "rc_size")
            self.test_zero_flag()
            if self.options.vectors:
                # C11 aligned_alloc needs a size that is a multiple of the alignment.
                align = max(buffer.align, 64)
                self.line(f"{st}* {name} = ({st}*)aligned_alloc({align}, "
                          f"(sizeof({st}) * ({size}) + {align}) / {align} * {align});")
            else:
                self.line(f"{st}* {name} = ({st}*)malloc(sizeof({st}) * ({size}) + 1);")
            self.heap_scope(name, f"{name} == NULL", f"free({name});", s.body)
        self.depth -= 1
        self.line("}")

    def heap_scope(self, name: str, failed: str, release: str, body: S.Stmt) -> None:
        """After an allocation: fail if `failed` holds, emit body, then `release` on the normal path
        and on every failure path out of body (which then continues to the enclosing target)."""
        self.line(f"if ({failed}) {{")
        self.depth += 1
        self.fail(OUT_OF_MEMORY)
        self.depth -= 1
        self.line("}")
        scope = FailureScope(self.names.fresh(f"rc_free_{name}"), parallel=False)
        outer = self.scopes[-1]
        self.scopes.append(scope)
        self.stmt(body)
        self.scopes.pop()
        self.line(release)
        if scope.used:
            done = self.names.fresh(f"rc_done_{name}")
            self.line(f"goto {done};")
            self.lines.append(f"{scope.label}:")
            self.line(release)
            outer.used = True
            self.line(f"goto {outer.label};")
            self.lines.append(f"{done}: ;")

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
        low = self.checked_value(value_type(s.min.dtype), low, "rc_low")
        end = self.checked_value(value_type(s.extent.dtype), end, "rc_end")
        self.test_zero_flag()
        header = f"for ({ctype} {var} = {low}; {var} < {end}; ++{var}) {{"
        if s.kind == "thread_binding":
            raise BuildError(f"build: loop {s.loop_var.name} is bound to {s.thread_binding}; "
                             "GPU thread bindings need the CUDA target", ir=self.func, spot=s)
        hint = s.annotations.get(NONTEMPORAL)
        streaming = bool(hint) and self.options.vectors
        if not streaming:
            self.emit_loop(s, header)
            return
        self.nontemporal += 1
        self.nontemporal_names.append(hint if isinstance(hint, str) else None)
        outer_streamed, self.streamed = self.streamed, False
        try:
            self.emit_loop(s, header)
        finally:
            self.nontemporal -= 1
            self.nontemporal_names.pop()
        streamed, self.streamed = self.streamed, outer_streamed or self.streamed
        if streamed:
            # Streaming stores are weakly ordered: fence them before anyone reads the data.
            self.pragma("#if defined(__x86_64__)")
            self.line("__builtin_ia32_sfence();")
            self.pragma("#endif")

    def streams_to(self, buffer: Buffer) -> bool:
        """Whether stores to buffer here are streaming stores: inside a loop annotated
        NONTEMPORAL with True (every buffer) or with buffer's name."""
        return any(name is None or name == buffer.name for name in self.nontemporal_names)

    def emit_loop(self, s: S.For, header: str) -> None:
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
        scope = FailureScope(self.names.fresh("rc_next"), parallel=True)
        outer = self.scopes[-1]
        self.scopes.append(scope)
        self.in_parallel = True
        schedule = s.annotations.get(OMP_SCHEDULE, DEFAULT_OMP_SCHEDULE)
        # Streaming stores are fenced by the thread that made them: a streaming parallel loop is
        # a parallel region whose threads share the loop (`for nowait`) and then each run an sfence.
        fenced = bool(s.annotations.get(NONTEMPORAL)) and self.options.vectors

        def open_loop(clause: str) -> None:
            if not fenced:
                self.pragma(f"#pragma omp parallel for {clause}")
                return
            self.pragma("#pragma omp parallel")
            self.line("{")
            self.pragma(f"#pragma omp for {clause} nowait")

        if schedule == "static":
            open_loop("schedule(static)")
        else:
            # Coarse dynamic chunks: a thread that the OS deschedules on a shared machine no
            # longer holds up the others, at a few atomic operations per chunk.
            extent = self.index(s.extent)
            chunk = self.names.fresh("rc_chunk")
            self.line(f"const int64_t {chunk} = ((int64_t)({extent}) + 32 * (int64_t)omp_get_max_threads() - 1) "
                      f"/ (32 * (int64_t)omp_get_max_threads());")
            open_loop(f"schedule(dynamic, {chunk} > 0 ? {chunk} : 1)")
            self.uses_omp_api = True
        self.line(header)
        self.nested(s.body)
        if scope.used:
            self.lines.append(f"{scope.label}: ;")
        self.line("}")
        if fenced:
            self.pragma("#if defined(__x86_64__)")
            self.line("__builtin_ia32_sfence();")
            self.pragma("#endif")
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
            where = self.index(index)
            value = self.to_storage(buffer.dtype, self.expr(s.value))
            where = self.checked_value(value_type(index.dtype), where, "rc_at")
            value = self.checked_value(storage_type(buffer.dtype), value, "rc_value")
            self.test_zero_flag()
            self.line(f"{self.buffer_name(buffer)}[{where}] = {value};")
            return
        if dtype.lanes == 1:  # scalar value stored to many lanes
            value = E.Broadcast(s.value, lanes)
        else:
            value = s.value
        vtype = buffer.dtype.with_lanes(lanes)
        # A store that may divide by zero goes lane by lane, so it can test before storing.
        if self.vector_ok(vtype) and (index.dtype.lanes == 1 or self.vector_ok(index.dtype)) \
                and not divides_by_variable(s):
            name = self.buffer_name(buffer)
            base = unit_ramp_base(index)
            if base is not None:
                store = self.vec.store(vtype)
                if self.streams_to(buffer) and _multiple_of(base, lanes):
                    if buffer.align >= self.vec.element_width(vtype) * lanes:
                        store = self.vec.stream(vtype) or store
                    elif buffer.name in self.nontemporal_names:
                        # no alignment promised, the buffer named: the helper tests the address.
                        # (A loop streaming every buffer keeps to promised alignment: the run-time
                        # form's 16-byte pieces, interleaved with a sparse kernel's gathers, left
                        # partial lines in the write-combining buffers: RGCN ran 13x slower.)
                        store = self.vec.stream_checked(vtype) or store
                    self.streamed = self.streamed or store.startswith("rc_vstream")
                self.line(f"{store}(&{name}[{self.index(base)}], {self.expr(value)});")
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
        if divides_by_variable(s):  # every lane's index too, then the test, then the stores
            at = self.names.fresh("rc_at")
            self.line(f"{value_type(index.dtype.element)} {at}[{lanes}];")
            self.lane_loop(lambda lane: f"{at}[{lane}] = {self.index(index, lane)};", lanes)
            self.test_zero_flag()
            self.lane_loop(lambda lane: f"{name}[{at}[{lane}]] = "
                                        f"{self.to_storage(buffer.dtype, f'{tmp}[{lane}]')};", lanes)
        else:
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

def _multiple_of(e: E.PrimExpr, k: int) -> bool:
    """Whether the integer expression e is provably a multiple of k (products and sums only)."""
    if isinstance(e, E.IntImm):
        return e.value % k == 0
    if isinstance(e, E.Mul):
        return _multiple_of(e.a, k) or _multiple_of(e.b, k)
    if isinstance(e, (E.Add, E.Sub)):
        return _multiple_of(e.a, k) and _multiple_of(e.b, k)
    if isinstance(e, E.Cast) and e.dtype.is_integer:
        return _multiple_of(e.value, k)
    return False


def _simd_safe(body: S.Stmt) -> bool:
    """`omp simd` forbids jumps out of the loop and calls with effects; only plain bodies get it."""
    if collect(body, S.AssertStmt) or collect(body, S.Allocate) or collect(body, S.While):
        return False
    if divides_by_variable(body):  # its zero test jumps out
        return False
    for call in collect(body, E.Call):
        if call.op == "call_extern":
            return False
    return True


__all__ = ["CModule", "CParam", "EmitOptions", "emit", "size_vars_of", "cast_scalar"]
