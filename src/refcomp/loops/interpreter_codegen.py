"""The reference interpreter's compiler: a PrimFunc becomes the source of one Python function.

Each buffer is flat storage (an array.array or a list, row-major, logical indices); each IR
variable a Python local.  Statements are generated here, expressions in interpreter_expr.
Loads and stores check every index against the buffer's shape (skipped only where a loop's range
already proves it), integer arithmetic wraps in the dtype's width and float arithmetic is rounded
to the dtype after every operation (see interpreter_values for the rules).  Vector expressions
(Ramp, Broadcast, lanes > 1) are evaluated lane by lane.  Every loop kind runs sequentially.
"""
from __future__ import annotations

import ast
import builtins
import functools
import math
import re
from dataclasses import dataclass
from typing import Any, Callable

from ..ast import (
    Allocate, AssertStmt, Block, BlockRealize, Buffer, BufferLoad, BufferStore, Evaluate, For,
    IfThenElse, IntImm, LetStmt, PrimFunc, SeqStmt, Stmt, Var, While, collect, free_vars,
)
from ..ast.dtype import DataType
from ..ast.expr import Add, Call, Div, Mul, Sub
from ..errors import InternalError, IRError, RuntimeFailure
from ..shape.evaluate import ZeroDivisionFailure, float_div, floordiv, floormod, truncdiv, truncmod
from . import interpreter_values as values
from .interpreter_expr import ExprCodegen, _BufInfo, _Range, _reinterpret
from .interpreter_vector import MIN_EXTENT, plan_loop

# CPython allows 20 statically nested loops per function and 100 levels of indentation per file:
# a loop nest deeper than _MAX_LOOP_DEPTH, or a statement indented deeper than _MAX_INDENT, is
# continued in a module-level function that takes the locals it reads as arguments.  One
# statement adds at most a few levels before the next check, so the file stays under 100.
_MAX_LOOP_DEPTH = 16
_MAX_INDENT = 64


@dataclass
class Kernel:
    """A PrimFunc compiled for the interpreter: call `run(buffers, scalars)`."""

    run: Callable[[list, list], None]
    buffer_params: list[Buffer]
    scalar_inputs: list[Var]  # order of the `scalars` list: scalar params, then shape vars
    written: set[Buffer]  # buffer parameters the function may store to
    source: str


def garbage(t: DataType) -> Any:
    """The value fresh allocations are filled with: NaN for floats, 0x5A.. bytes for ints, True."""
    if t.is_float:
        return math.nan
    if t.is_bool:
        return True
    pattern = int("5A" * t.bytes, 16)
    return values.wrapper(t)(pattern)


class Compiler(ExprCodegen):
    """Turns one PrimFunc into Python source and compiles it."""

    def __init__(self, func: PrimFunc, vectorize: bool = True) -> None:
        self.func = func
        self.vectorize = vectorize  # use the numpy fast path for qualifying innermost loops
        self.fast_args = ""
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
        self.parts: set[str] = set()  # names of the module-level functions continuing deep statements

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
        try:
            self.declare_name_aliases(1)
            self.stmt(func.body, 1)
        except RecursionError:
            raise IRError(f"the interpreter cannot run {func.name}: its statements nest too deeply "
                          "to compile (Python's recursion limit)", ir=func) from None
        self.emit(1, "return None")
        source = "".join(self.helpers) + "\n".join(self.lines) + "\n"
        namespace = self.namespace()
        try:
            code = compile(source, f"<refcomp interpreter: {func.name}>", "exec")
        except (RecursionError, MemoryError) as exc:
            raise IRError(f"the interpreter cannot run {func.name}: the program nests too deeply ({exc})",
                          ir=func) from None
        except SyntaxError as exc:
            raise InternalError(f"interpreter generated invalid Python for {func.name}: {exc}\n{source}",
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

        def division(rule: Callable[[int, int], int]) -> Callable[[int, int, int], int]:
            """The shape evaluator's rule, its ZeroDivisionFailure reported at the dividing node."""
            def divide(a: int, b: int, site: int) -> int:
                try:
                    return rule(a, b)
                except ZeroDivisionFailure as exc:
                    raise RuntimeFailure(str(exc), ir=func, spot=sites[site]) from None
            return divide

        def assert_failed(site: int) -> Any:
            node = sites[site]
            raise RuntimeFailure(f"assertion failed: {node.message}", ir=func, spot=node)

        def bad_alloc(site: int, size: int) -> Any:
            raise RuntimeFailure(f"allocation of {sites[site].name} has negative size {size}", ir=func,
                                 spot=sites[site])

        def f2i(x: float, low: int, high: int) -> int:
            return values.float_to_int(x, low, high)

        ns: dict[str, Any] = {
            "_oob": oob, "_floordiv": division(floordiv), "_floormod": division(floormod),
            "_truncdiv": division(truncdiv), "_truncmod": division(truncmod),
            "_assert_failed": assert_failed, "_bad_alloc": bad_alloc,
            "_fdiv": float_div, "_fmin": values.float_min, "_fmax": values.float_max,
            "_p32": values._F32.pack, "_u32": values._F32.unpack, "_r16": values.round_f16,
            "_rbf": values.round_bf16, "_r32": values.round_f32_outside, "_f2i": f2i, "_i2f": values.int_to_float,
            "_isnan": math.isnan, "_isinf": math.isinf, "_isfinite": math.isfinite,
            "_inf": math.inf, "_nan": math.nan, "_reinterpret": _reinterpret,
        }
        for name, fn in values.MATH_DOUBLE.items():
            ns["_m_" + name] = fn
        ns.update(self.consts)
        return ns

    # ------------------------------------------------------------------ statements

    def stmt(self, s: Stmt, indent: int) -> None:
        method = getattr(self, "st_" + type(s).__name__, None)
        if method is None:
            raise IRError(f"the interpreter does not know the statement {type(s).__name__}",
                          ir=self.func, spot=s)
        if indent > _MAX_INDENT:
            self.continue_in_part(indent, lambda at: method(s, at))
        else:
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
        if isinstance(s.value, Call) and s.value.op == "prefetch":
            self.emit(indent, "pass")  # a cache hint: no effect on the values
            return
        self.emit(indent, self.ex(s.value))

    def st_IfThenElse(self, s: IfThenElse, indent: int) -> None:
        self.emit(indent, f"if {self.ex(s.condition)}:")
        self.stmt(s.then_case, indent + 1)
        if s.else_case is not None:
            self.emit(indent, "else:")
            self.stmt(s.else_case, indent + 1)

    def nested(self, indent: int, emit_loop: Callable[[int], None]) -> None:
        """Run emit_loop here, or in a fresh module-level function when loops nest too deeply."""
        if self.loop_depth >= _MAX_LOOP_DEPTH:
            self.continue_in_part(indent, emit_loop)
            return
        self.loop_depth += 1
        emit_loop(indent)
        self.loop_depth -= 1

    def continue_in_part(self, indent: int, emit: Callable[[int], None]) -> None:
        """Generate emit's code as a module-level function and call it here.

        The function takes as arguments the locals its code reads (found from the code itself:
        every name it loads but never assigns that is neither a global of the generated module
        nor a builtin).  Generated names are unique and IR scoping keeps a statement's bindings to
        itself, so the code assigns nothing the caller reads afterwards: passing the values in is
        the same as running the code in place.
        """
        saved_lines, saved_depth = self.lines, self.loop_depth
        self.lines, self.loop_depth = [], 0
        try:
            emit(1)
            body = self.lines
        finally:
            self.lines, self.loop_depth = saved_lines, saved_depth
        name = self.fresh("part", "_f")
        params = ", ".join(self.free_locals(body))
        self.parts.add(name)
        self.helpers.append(f"def {name}({params}):\n" + "\n".join(body) + "\n    return None\n")
        self.emit(indent, f"{name}({params})")

    def free_locals(self, body: list[str]) -> list[str]:
        """The caller's locals that the function body (lines indented one level) reads."""
        tree = ast.parse("def _part():\n" + "\n".join(body) + "\n")
        loaded: dict[str, None] = {}
        stored: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                if isinstance(node.ctx, ast.Load):
                    loaded.setdefault(node.id)
                else:
                    stored.add(node.id)
        known = set(self.namespace()) | self.parts | {h.split("(", 1)[0][4:] for h in self.helpers}
        return [n for n in loaded if n not in stored and n not in known and not hasattr(builtins, n)]

    def st_For(self, s: For, indent: int) -> None:
        low, extent = self.ex(s.min), self.ex(s.extent)
        name = self.bind_var(s.loop_var)
        if isinstance(s.min, IntImm):
            high = s.extent if s.min.value == 0 else (
                IntImm(s.min.value + s.extent.value, s.extent.dtype) if isinstance(s.extent, IntImm) else None)
            if high is not None:
                self.ranges[s.loop_var] = _Range(s.min.value, high)
        fast = self.fast_path(s) if self.vectorize else None
        if fast is not None:
            low_name, extent_name = self.fresh("lo", "_lo"), self.fresh("ext", "_ext")
            self.emit(indent, f"{low_name} = {low}")
            self.emit(indent, f"{extent_name} = {extent}")
            low, extent = low_name, extent_name
        bound = extent if low == "0" else f"{low}, {low} + {extent}"

        def loop(at: int) -> None:
            if fast is not None:  # numpy over all iterations when exact; else the scalar loop
                self.emit(at, f"if not ({extent} >= {MIN_EXTENT} and {fast}({low}, {extent}, {self.fast_args}):")
                at += 1
            self.emit(at, f"for {name} in range({bound}):")
            self.stmt(s.body, at + 1)

        self.nested(indent, loop)

    def fast_path(self, s: For) -> str | None:
        """The name of a numpy runner for this innermost loop (None when it does not qualify)."""
        planned = plan_loop(s)
        if planned is None:
            return None
        run, plan = planned
        infos = [self.bufs.get(b) for b in plan.buffers]
        if any(info is None or info.view_of is not None for info in infos):
            return None
        if any(v not in self.names or isinstance(self.names[v], list) for v in plan.vars):
            return None
        scalars = ", ".join(self.names[v] for v in plan.vars)
        storages = ", ".join(info.data for info in infos)
        dims = ", ".join("(" + "".join(d + ", " for d in info.dims) + ")" for info in infos)
        self.fast_args = f"({scalars}{',' if plan.vars else ''}), ({storages},), ({dims},))"
        key = self.fresh("vector", "_V")
        self.consts[key] = run
        return key

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
