"""The script printer: any IR node as Python-like text in the TVMScript TIR style.

`script(node, mark=None)` is the one entry point (also `node.script()`).  The text parses back with
`refcomp.ast.parser.from_source` to a structurally equal IR, and printing that again gives the same
text.  With `mark=`, the lines holding that node get a `-->` gutter and a `^^^` underline, which is
how errors show *where*: importing this module makes it the printer of `RefcompError.render_ir`.

Graph-level functions of an IRModule are printed by `refcomp.ast.graph_script.print_function(func,
namer) -> str`; `namer` is a `script_common.Namer` whose attribute
`function_name` holds the function's name in the module.  Graph nodes on their own (a function, a
call, a binding) print the same way, marks included, so errors on graph IR show where too.
"""
from __future__ import annotations

from typing import Any, Mapping

from ..errors import set_ir_printer
from . import expr as E
from .buffer import Buffer, BufferRegion
from .function import IRModule, PrimFunc
from .node import Node
from .functor import free_vars
from .printer_expr import CLOSE_MARK, OPEN_MARK, ExprPrinter, quote
from .script_common import LOOP_FUNCTIONS, Namer, TreeFacts, sanitize
from .stmt import (
    Allocate, AssertStmt, Block, BlockRealize, BufferStore, Evaluate, For, IfThenElse, IterVar,
    LetStmt, MatchBufferRegion, SeqStmt, Stmt, While,
)
from .structural import structural_equal

INDENT = "    "


def script(node: Any, mark: Any = None) -> str:
    """Print node (expression, statement, Buffer, PrimFunc, IRModule) as script text.

    `mark` is a node inside `node` to point at: its lines get a `-->` gutter and an underline.
    """
    lines = _print_lines(node, mark)
    if mark is not None and not any(OPEN_MARK in line for line in lines):
        # The spot itself is not written out (an implicit loop min, a domain shown by remap, an
        # unused loop var): point at the nearest enclosing node that is.
        for ancestor in reversed(_path_to(node, mark)[:-1]):
            candidate = _print_lines(node, ancestor)
            if any(OPEN_MARK in line for line in candidate):
                return _render_marks(candidate, ancestor, node)
    return _render_marks(lines, mark, node)


def _print_lines(node: Any, mark: Any) -> list[str]:
    printer = _StmtPrinter(Namer(), mark)
    if isinstance(node, IRModule):
        printer.module(node)
    elif isinstance(node, PrimFunc):
        printer.function(node)
    elif isinstance(node, Stmt):
        printer.body(node)
    elif isinstance(node, Buffer):
        printer.emit(printer.buffer_param(node))
    elif isinstance(node, IterVar):
        printer.emit(printer.axis_line(node, None))
    elif isinstance(node, MatchBufferRegion):
        printer.emit(printer.match_buffer_line(node))
    elif _is_graph_function(node):
        printer.lines.extend(_graph_function_lines(node, node.attrs.get("global_symbol", "main"), printer.namer,
                                                   mark))
    elif _is_graph_node(node):
        printer.lines.extend(_graph_fragment_lines(node, printer.namer, mark))
    else:
        printer.emit(printer.expr(node))
    return printer.lines


def contains(root: Any, node: Any) -> bool:
    """Whether node (by identity) is root or lies inside it."""
    return root is node or bool(_path_to(root, node))


def _path_to(root: Any, target: Any) -> list[Any]:
    """The nodes from root down to target (both included), or [] when target is not inside root."""
    seen: set[int] = set()

    def walk(value: Any, path: list[Any]) -> list[Any] | None:
        if value is target:
            return path + [value]
        if isinstance(value, (tuple, list)):
            children = value
        elif isinstance(value, Mapping):
            children = tuple(value.values())
        elif isinstance(value, Node) and id(value) not in seen:
            seen.add(id(value))
            children = tuple(getattr(value, f) for f in Node.fields(value))
            path = path + [value]
        else:
            return None
        for child in children:
            found = walk(child, path)
            if found is not None:
                return found
        return None

    return walk(root, []) or []


def _is_graph_node(node: Any) -> bool:
    """A graph-level node (refcomp.ast.graph, graph_struct_info), printed by refcomp.ast.graph_script."""
    return type(node).__module__ in ("refcomp.ast.graph", "refcomp.ast.graph_struct_info")


def _is_graph_function(node: Any) -> bool:
    return _is_graph_node(node) and type(node).__name__ == "Function"


class _StmtPrinter(ExprPrinter):
    """Accumulates indented lines for statements, functions and modules."""

    def __init__(self, namer: Namer, mark: Any) -> None:
        super().__init__(namer, mark)
        self.lines: list[str] = []
        self.depth = 0
        self.loops: dict[E.Var, For] = {}  # enclosing loops, to spot T.axis.remap bindings

    # ------------------------------------------------------------------ output helpers
    def emit(self, line: str, node: Any = None) -> None:
        if node is not None and node is self.mark:
            line = OPEN_MARK + line + CLOSE_MARK
        self.lines.append(INDENT * self.depth + line)

    def nested(self, header: str, node: Any, body: Stmt) -> None:
        self.emit(header, node)
        self.depth += 1
        self.body(body)
        self.depth -= 1

    # ------------------------------------------------------------------ modules and functions
    def module(self, module: IRModule) -> None:
        self.emit("@I.ir_module")
        self.emit("class Module:", module)
        self.depth += 1
        if module.attrs:
            self.emit(f"I.module_attrs({self.value(dict(module.attrs))})")
        for index, key in enumerate(sorted(module.functions)):
            func = module.functions[key]
            if index or module.attrs:
                self.lines.append("")
            inner = _StmtPrinter(Namer(), self.mark)
            if isinstance(func, PrimFunc):
                inner.function(func, key)
                text_lines = inner.lines
            else:
                text_lines = _graph_function_lines(func, key, inner.namer, self.mark)
            self.lines.extend(INDENT * self.depth + line if line else line for line in text_lines)
        if not module.functions:
            self.emit("pass")
        self.depth -= 1

    def function(self, func: PrimFunc, key: str | None = None) -> None:
        for param in func.params:
            self.namer.name(param)
        declared = {p for p in func.params if isinstance(p, E.Var)}
        facts = TreeFacts(func)
        params = set(func.params)
        loose_buffers = [b for b in facts.buffers if b not in facts.declared and b not in params]
        in_attrs = _nodes_in(func.attrs)  # e.g. lowering's original buffers, upper bounds of vars
        extra = [b for b in in_attrs if isinstance(b, Buffer) and b not in facts.buffers]
        loose_buffers += extra
        others = tuple(n for n in in_attrs if not isinstance(n, Buffer))
        free = dict(facts.free_vars)
        for var in TreeFacts((tuple(extra), others)).free_vars:
            free.setdefault(var, None)
        loose_vars = [v for v in free if v not in declared]
        for var in loose_vars:
            self.namer.name(var)
        for buffer in loose_buffers:
            self.namer.name(buffer)
        def_name = sanitize(key if key is not None else func.name)
        options = []
        if func.name != def_name:
            options.append(f"name={quote(func.name)}")
        if key is not None and key != def_name:
            options.append(f"module_key={quote(key)}")
        if facts.has_block and not _is_root_realize(func.body):
            options.append("implicit_root=False")
        self.emit("@T.prim_func" + (f"({', '.join(options)})" if options else ""))
        params = ", ".join(self.param(p) for p in func.params)
        self.emit(f"def {def_name}({params}):", func)
        self.depth += 1
        for var in loose_vars:
            self.emit(f"{self.namer.name(var)} = {self.var_type(var, call=True)}", var)
        for buffer in loose_buffers:
            self.emit(f"{self.namer.name(buffer)} = T.Buffer({self.buffer_args(buffer)})", buffer)
        if func.attrs:
            self.emit(f"T.func_attr({self.value(dict(func.attrs))})")
        self.body(func.body)
        self.depth -= 1

    def param(self, param: Any) -> str:
        if isinstance(param, Buffer):
            return self.buffer_param(param)
        text = f"{self.namer.name(param)}: {self.var_type(param, call=False)}"
        return OPEN_MARK + text + CLOSE_MARK if param is self.mark else text

    def buffer_param(self, buffer: Buffer) -> str:
        text = f"{self.namer.name(buffer)}: T.Buffer({self.buffer_args(buffer)})"
        return OPEN_MARK + text + CLOSE_MARK if buffer is self.mark else text

    def var_type(self, var: E.Var, call: bool) -> str:
        """`T.int32` (a parameter's annotation) or `T.int32()` (a declaration), options included."""
        options = []
        if isinstance(var, E.SizeVar):
            options.append("is_size_var=True")
        if var.name != self.namer.name(var):
            options.append(f"name={quote(var.name)}")
        if options or call:
            return f"T.{var.dtype}({', '.join(options)})"
        return f"T.{var.dtype}"

    def shape(self, dims: tuple) -> str:
        if len(dims) == 1:
            return f"({self.expr(dims[0])},)"
        return "(" + ", ".join(self.expr(d) for d in dims) + ")"

    def buffer_args(self, buffer: Buffer, scope_positional: bool = False) -> str:
        parts = [self.shape(buffer.shape), f'"{buffer.dtype}"']
        if scope_positional:
            parts.append(quote(buffer.scope))
        elif buffer.scope != "global":
            parts.append(f"scope={quote(buffer.scope)}")
        if buffer.strides:
            parts.append(f"strides={self.shape(buffer.strides)}")
        offset = buffer.elem_offset
        if not (isinstance(offset, E.IntImm) and offset.value == 0 and offset.dtype.name == "int32"):
            parts.append(f"elem_offset={self.expr(offset)}")
        if buffer.align:
            parts.append(f"align={buffer.align}")
        if buffer.name != self.namer.name(buffer):
            parts.append(f"name={quote(buffer.name)}")
        return ", ".join(parts)

    # ------------------------------------------------------------------ statements
    def body(self, stmt: Stmt) -> None:
        """Print stmt as the statements of a body: a plain sequence is written flat."""
        if isinstance(stmt, SeqStmt) and _is_flat_sequence(stmt) and stmt is not self.mark:
            for index, item in enumerate(stmt.stmts):
                self.stmt(item, tail=index == len(stmt.stmts) - 1)
        else:
            self.stmt(stmt, tail=True)

    def stmt(self, s: Stmt, tail: bool) -> None:
        """Print one statement; `tail` says nothing follows it in its body (binders may be flat)."""
        if isinstance(s, BufferStore):
            target = f"{self.buffer_name(s.buffer)}[{self.indices(s.indices)}]"
            self.emit(f"{target} = {self.expr(s.value)}", s)
        elif isinstance(s, Evaluate):
            self.emit(f"T.evaluate({self.expr(s.value)})", s)
        elif isinstance(s, SeqStmt):
            self.emit("with T.seq():", s)
            self.depth += 1
            for index, item in enumerate(s.stmts):
                self.stmt(item, tail=index == len(s.stmts) - 1)
            if not s.stmts:
                self.emit("pass")
            self.depth -= 1
        elif isinstance(s, For):
            self.loop(s)
        elif isinstance(s, BlockRealize):
            self.block(s.block, s)
        elif isinstance(s, Block):
            self.block(s, None)
        elif isinstance(s, IfThenElse):
            self.if_then_else(s, "if")
        elif isinstance(s, While):
            self.nested(f"while {self.expr(s.condition)}:", s, s.body)
        elif isinstance(s, LetStmt):
            value = self.expr(s.value)
            name = self.namer.name(s.var)
            if tail:
                self.emit(f"{name}: T.{s.var.dtype} = {value}", s)
                self.body(s.body)
            else:
                self.nested(f"with T.LetStmt({value}) as {name}:", s, s.body)
        elif isinstance(s, Allocate):
            args = self.buffer_args(s.buffer, scope_positional=True)
            name = self.buffer_name(s.buffer)
            if tail:
                self.emit(f"{name} = T.allocate({args})", s)
                self.body(s.body)
            else:
                self.nested(f"with T.allocate({args}) as {name}:", s, s.body)
        elif isinstance(s, AssertStmt):
            condition = self.expr(s.condition)
            if tail:
                self.emit(f"assert {condition}, {quote(s.message)}", s)
                self.body(s.body)
            else:
                self.nested(f"with T.Assert({condition}, {quote(s.message)}):", s, s.body)
        else:
            raise TypeError(f"the script printer cannot print a {type(s).__name__} statement")

    def if_then_else(self, s: IfThenElse, keyword: str) -> None:
        self.nested(f"{keyword} {self.expr(s.condition)}:", s, s.then_case)
        other = s.else_case
        if other is None:
            return
        if isinstance(other, IfThenElse) and other is not self.mark:
            self.if_then_else(other, "elif")
        else:
            self.nested("else:", None, other)

    def loop(self, loop: For) -> None:
        chain = [loop]
        while _is_grid_loop(chain[-1]) and _is_grid_loop(chain[-1].body) and chain[-1].body is not self.mark:
            inner = chain[-1].body
            outer_vars = {c.loop_var for c in chain}
            if any(v in outer_vars for v in free_vars(inner.extent)):
                break
            chain.append(inner)
        if len(chain) > 1 and _is_grid_loop(loop):
            extents = ", ".join(self.expr(c.extent) for c in chain)
            names = ", ".join(self.namer.name(c.loop_var) for c in chain)
            header = f"for {names} in T.grid({extents}):"
        else:
            chain = [loop]
            header = f"for {self.loop_range(loop)}:"
        for c in chain:
            self.loops[c.loop_var] = c
        self.nested(header, loop, chain[-1].body)
        for c in chain:
            self.loops.pop(c.loop_var, None)

    def loop_range(self, loop: For) -> str:
        bounds = self.begin_end(loop.min, loop.extent)
        name = self.namer.name(loop.loop_var)
        if loop.kind == "serial" and not loop.annotations:
            return f"{name} in range({bounds})"
        options = ""
        if loop.thread_binding is not None:
            options += f", thread={quote(loop.thread_binding)}"
        if loop.annotations:
            options += f", annotations={self.value(dict(loop.annotations))}"
        return f"{name} in T.{LOOP_FUNCTIONS[loop.kind]}({bounds}{options})"

    # ------------------------------------------------------------------ blocks
    def block(self, block: Block, realize: BlockRealize | None) -> None:
        anchor = realize if realize is not None and realize is self.mark else block
        option = "" if realize is not None else ", no_realize=True"
        self.emit(f"with T.block({quote(block.name)}{option}):", anchor)
        self.depth += 1
        values = realize.iter_values if realize is not None else (None,) * len(block.iter_vars)
        self.axes(block.iter_vars, values)
        if realize is not None and not _is_true(realize.predicate):
            self.emit(f"T.where({self.expr(realize.predicate)})")
        self.emit(f"T.reads({', '.join(self.region(r) for r in block.reads)})")
        self.emit(f"T.writes({', '.join(self.region(r) for r in block.writes)})")
        if block.annotations:
            self.emit(f"T.block_attr({self.value(dict(block.annotations))})")
        for buffer in block.alloc_buffers:
            self.emit(f"{self.buffer_name(buffer)} = T.alloc_buffer({self.buffer_args(buffer)})", buffer)
        for match in block.match_buffers:
            self.emit(self.match_buffer_line(match), match)
        if block.init is not None:
            self.nested("with T.init():", block.init, block.init)
        self.body(block.body)
        self.depth -= 1

    def axes(self, iter_vars: tuple[IterVar, ...], values: tuple) -> None:
        index = 0
        while index < len(iter_vars):
            run = index
            while run < len(iter_vars) and self.remappable(iter_vars[run], values[run]):
                run += 1
            if run - index >= 2:
                group = iter_vars[index:run]
                names = ", ".join(self.namer.name(iv.var) for iv in group)
                kinds = "".join("S" if iv.kind == "spatial" else "R" for iv in group)
                bound = ", ".join(self.expr(v) for v in values[index:run])
                self.emit(f'{names} = T.axis.remap("{kinds}", [{bound}])',
                          self.mark if any(self.mark is iv or self.mark is iv.dom for iv in group) else None)
                index = run
            else:
                self.emit(self.axis_line(iter_vars[index], values[index]), iter_vars[index])
                index += 1

    def remappable(self, iv: IterVar, value: Any) -> bool:
        loop = self.loops.get(value) if isinstance(value, E.Var) else None
        if loop is None or iv.kind not in ("spatial", "reduce") or iv.var.dtype != value.dtype:
            return False
        return (_zero_of_own_type(loop.min, loop.extent) and _zero_of_own_type(iv.dom.min, iv.dom.extent)
                and loop.min.dtype == iv.dom.min.dtype
                and structural_equal(loop.extent, iv.dom.extent, map_free_vars=False))

    def axis_line(self, iv: IterVar, value: Any) -> str:
        dom = iv.dom
        if _zero_of_own_type(dom.min, dom.extent):
            dom_text = self.expr(dom.extent)
        else:
            dom_text = f"({self.expr(dom.min)}, {self.end(dom.min, dom.extent)})"
        if dom is self.mark:
            dom_text = OPEN_MARK + dom_text + CLOSE_MARK
        args = [dom_text]
        implied = dom.extent.dtype
        if value is not None:
            args.append(self.expr(value))
            implied = value.dtype
        if iv.var.dtype != implied:
            args.append(f'dtype="{iv.var.dtype}"')
        return f"{self.namer.name(iv.var)} = T.axis.{iv.kind}({', '.join(args)})"

    def match_buffer_line(self, match: MatchBufferRegion) -> str:
        source = self.region(match.source)
        return f"{self.buffer_name(match.buffer)} = T.match_buffer({source}, {self.buffer_args(match.buffer)})"


# ---------------------------------------------------------------------- helpers

def _is_flat_sequence(stmt: SeqStmt) -> bool:
    """A sequence the text can write as consecutive lines: two or more statements, none a sequence."""
    return len(stmt.stmts) >= 2 and not any(isinstance(s, SeqStmt) for s in stmt.stmts)


def _is_true(expr: E.PrimExpr) -> bool:
    return isinstance(expr, E.IntImm) and expr.dtype.name == "bool" and expr.dtype.lanes == 1 and expr.value == 1


def _zero_of_own_type(begin: E.PrimExpr, extent: E.PrimExpr) -> bool:
    return isinstance(begin, E.IntImm) and begin.value == 0 and begin.dtype == extent.dtype


def _is_grid_loop(stmt: Any) -> bool:
    return (isinstance(stmt, For) and stmt.kind == "serial" and not stmt.annotations
            and _zero_of_own_type(stmt.min, stmt.extent) and stmt.loop_var.dtype == stmt.extent.dtype)


def _is_root_realize(stmt: Stmt) -> bool:
    """The body the parser produces around blocks: one realize of a block "root" with no iter vars."""
    return (isinstance(stmt, BlockRealize) and stmt.block.name == "root" and not stmt.block.iter_vars
            and _is_true(stmt.predicate))


def _nodes_in(value: Any) -> list[Any]:
    """IR nodes inside an attribute value (mappings, sequences), in order, without repeats."""
    found: dict[Any, None] = {}

    def walk(item: Any) -> None:
        if isinstance(item, Node):
            found.setdefault(item, None)
        elif isinstance(item, Mapping):
            for key, inner in item.items():
                walk(key)
                walk(inner)
        elif isinstance(item, (tuple, list)):
            for inner in item:
                walk(inner)

    walk(value)
    return list(found)


def _graph_function_lines(func: Any, key: str, namer: Namer, mark: Any = None) -> list[str]:
    from .graph_script import print_function

    namer.function_name = key  # type: ignore[attr-defined]
    text = print_function(func, namer, mark=mark) if mark is not None else print_function(func, namer)
    return text.rstrip("\n").split("\n")


def _graph_fragment_lines(node: Any, namer: Namer, mark: Any) -> list[str]:
    """A piece of a graph function (expression, binding, block, struct info), marks included."""
    from . import graph_script
    from .graph_struct_info import StructInfo

    loop_names = lambda var: namer.name(var)  # noqa: E731  (shape vars named as the loop level does)
    if isinstance(node, StructInfo):
        text = graph_script.format_struct_info(node, loop_names)
        return [OPEN_MARK + text + CLOSE_MARK if node is mark else text]
    return graph_script.print_fragment(node, loop_names, mark=mark).split("\n")


def _render_marks(lines: list[str], mark: Any, root: Any) -> str:
    """Turn the mark sentinels into a `-->` gutter and `^^^` underlines (or drop them if no mark)."""
    if mark is None:
        return "\n".join(line.replace(OPEN_MARK, "").replace(CLOSE_MARK, "") for line in lines)
    out: list[str] = []
    inside = found = False
    for line in lines:
        clean: list[str] = []
        spans: list[list[int]] = [[0, -1]] if inside else []
        marked = inside
        for ch in line:
            if ch == OPEN_MARK:
                inside = marked = found = True
                spans.append([len(clean), -1])
            elif ch == CLOSE_MARK:
                inside = False
                if spans:
                    spans[-1][1] = len(clean)
            else:
                clean.append(ch)
        text = "".join(clean)
        out.append(("--> " if marked else "    ") + text)
        if spans:
            indent = len(text) - len(text.lstrip())
            carets = [" "] * len(text)
            for lo, hi in spans:
                hi = len(text) if hi < 0 else hi
                for col in range(max(lo, indent), max(hi, lo + 1)):
                    if col < len(carets):
                        carets[col] = "^"
            out.append("    " + "".join(carets).rstrip())
    if not found:
        out.append(f"    (the marked {type(mark).__name__} is not part of this {type(root).__name__}: "
                   f"{_short(mark)})")
    return "\n".join(out)


def _short(node: Any) -> str:
    try:
        text = script(node)
    except Exception:  # a half-built node: say what it is, do not fail
        return type(node).__name__
    first = text.split("\n", 1)[0]
    return first if len(first) < 100 else first[:97] + "..."


set_ir_printer(lambda ir, mark: script(ir, mark=mark), contains)
