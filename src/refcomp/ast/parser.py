"""The script parser: `from_source(text)` reads refcomp's script format and the TIR subset of TVMScript.

The text is read with Python's `ast` module and interpreted construct by construct; nothing in it
is ever executed.  What the printer writes parses back to a structurally equal IR.  Hand-written
TVMScript works where it stays in the subset: `@T.prim_func`, `T.Buffer` and `T.match_buffer`
parameters, `T.grid` and the loop kinds, `T.block`/`T.sblock`, `T.axis.*`, `T.reads`/`T.writes`
(inferred when left out), `T.init`, `T.alloc_buffer`, `T.func_attr`, augmented stores.  As in
TVMScript, a function whose body holds blocks gets an implicit root block unless it has one.

Errors are `refcomp.ParseError` with the line, column and source line.

Graph-level functions in an `@I.ir_module` class (any decorator other than `@T.prim_func`) are
read by `refcomp.ast.graph_script.parse_function(pyast_node, context)`, where `context` is the
`ParseContext` below (`context.error(node, message)`, `context.text`, `context.function_names`).
"""
from __future__ import annotations

import ast
import textwrap
import warnings
from dataclasses import dataclass, field
from typing import Any

from ..errors import ParseError
from .function import IRModule, PrimFunc
from .node import Node
from .parser_expr import ExprReader
from .parser_stmt import FunctionReader

_TIR_MODULES = ("tir", "tirx")


def from_source(text: str) -> PrimFunc | IRModule:
    """Parse script text: one `@T.prim_func` gives a PrimFunc; an `@I.ir_module` class or several
    functions give an IRModule."""
    if not isinstance(text, str):
        raise TypeError(f"from_source expects the script text as a str, got {type(text).__name__}")
    context = ParseContext(textwrap.dedent(text))
    try:
        return context.parse()
    except RecursionError:
        raise ParseError("the text is nested too deeply to parse (Python's recursion limit)") from None


@dataclass
class ParseContext:
    """The text being parsed, its namespace aliases, and error reporting with line and column."""

    text: str
    tir_names: set[str] = field(default_factory=lambda: {"T"})
    ir_names: set[str] = field(default_factory=lambda: {"I"})
    function_names: tuple[str, ...] = ()

    def error(self, node: ast.AST | None, message: str) -> ParseError:
        """A ParseError at node, showing its source line with the span underlined."""
        line = getattr(node, "lineno", None)
        column = getattr(node, "col_offset", None)
        return make_error(self.text, message, line, column, getattr(node, "end_lineno", None),
                          getattr(node, "end_col_offset", None))

    def parse(self) -> PrimFunc | IRModule:
        try:
            tree = _python_parse(self.text)
        except SyntaxError as exc:
            raise make_error(self.text, f"invalid syntax: {exc.msg}", exc.lineno, (exc.offset or 1) - 1,
                             None, None) from None
        functions: dict[str, Node] = {}
        module: IRModule | None = None
        for stmt in tree.body:
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                self.note_import(stmt)
            elif isinstance(stmt, ast.ClassDef):
                if module is not None or functions:
                    raise self.error(stmt, "the text holds more than one module")
                module = self.module(stmt)
            elif isinstance(stmt, ast.FunctionDef):
                if module is not None:
                    raise self.error(stmt, "a function next to an @I.ir_module class")
                key, func = self.function(stmt)
                if key in functions:
                    raise self.error(stmt, f"two functions named {key!r}")
                functions[key] = func
            elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str):
                continue  # a docstring
            else:
                raise self.error(stmt, "expected @T.prim_func functions or an @I.ir_module class at the top level")
        if module is not None:
            return module
        if not functions:
            raise self.error(None, "no @T.prim_func function or @I.ir_module class in the text")
        if len(functions) == 1:
            return next(iter(functions.values()))  # type: ignore[return-value]
        return IRModule(functions)

    def note_import(self, stmt: ast.Import | ast.ImportFrom) -> None:
        if isinstance(stmt, ast.ImportFrom):
            for alias in stmt.names:
                if alias.name in _TIR_MODULES:
                    self.tir_names.add(alias.asname or alias.name)
                elif alias.name == "ir":
                    self.ir_names.add(alias.asname or alias.name)

    def decorator(self, func: ast.FunctionDef | ast.ClassDef) -> tuple[str | None, dict[str, Any]]:
        """The decorator's kind ("prim_func", "ir_module" or another name) and its keyword options."""
        if not func.decorator_list:
            return None, {}
        if len(func.decorator_list) > 1:
            raise self.error(func.decorator_list[1], "only one decorator is allowed")
        node = func.decorator_list[0]
        options: dict[str, Any] = {}
        if isinstance(node, ast.Call):
            if node.args:
                raise self.error(node, "decorator options are given by keyword")
            for keyword in node.keywords:
                if not isinstance(keyword.value, ast.Constant):
                    raise self.error(keyword.value, "decorator options must be constants")
                options[keyword.arg] = keyword.value.value
            node = node.func
        reader = ExprReader(self.error, self.tir_names)
        name = reader.dotted(node)
        if name is None:
            raise self.error(node, "unknown decorator")
        head, _, last = name.rpartition(".")
        if last == "prim_func" and head == "T":
            return "prim_func", options
        if last == "ir_module" and (head in self.ir_names or head in ("tvm.script", "tvm.script.ir")):
            return "ir_module", options
        return name, options

    def module(self, cls: ast.ClassDef) -> IRModule:
        kind, _ = self.decorator(cls)
        if kind != "ir_module":
            raise self.error(cls, "a class must be decorated with @I.ir_module")
        self.function_names = tuple(f.name for f in cls.body if isinstance(f, ast.FunctionDef))
        functions: dict[str, Node] = {}
        attrs: dict[str, Any] = {}
        for stmt in cls.body:
            if isinstance(stmt, ast.FunctionDef):
                key, func = self.function(stmt)
                if key in functions:
                    raise self.error(stmt, f"two functions named {key!r}")
                functions[key] = func
            elif (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
                  and ExprReader(self.error, self.tir_names).dotted(stmt.value.func) in
                  {f"{n}.module_attrs" for n in self.ir_names}):
                attrs.update(ExprReader(self.error, self.tir_names).literal(stmt.value.args[0]))
            elif isinstance(stmt, ast.Pass) or (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)):
                continue
            else:
                raise self.error(stmt, "an @I.ir_module class holds only functions and I.module_attrs")
        return IRModule(functions, attrs)

    def function(self, node: ast.FunctionDef) -> tuple[str, Node]:
        kind, options = self.decorator(node)
        if kind == "prim_func":
            func = FunctionReader(self, options).function(node)
            return options.get("module_key", node.name), func
        if kind is None:
            raise self.error(node, "a function needs a decorator such as @T.prim_func")
        from .graph_script import parse_function

        return node.name, parse_function(node, self)


def _python_parse(text: str) -> ast.Module:
    """ast.parse, working around CPython < 3.11.8 failing ("AST constructor recursion depth
    mismatch", gh-106905) when called from a deep Python stack: retry on a fresh thread's stack."""
    try:
        with warnings.catch_warnings():  # e.g. "'int' object is not callable": our errors say more
            warnings.simplefilter("ignore")
            return ast.parse(text, mode="exec")
    except SystemError:
        import threading

        result: list[Any] = []

        def run() -> None:
            try:
                result.append(ast.parse(text, mode="exec"))
            except BaseException as exc:  # handed back to the caller's thread
                result.append(exc)

        worker = threading.Thread(target=run)
        worker.start()
        worker.join()
        if isinstance(result[0], BaseException):
            raise result[0]
        return result[0]


def make_error(text: str, message: str, line: int | None, column: int | None,
               end_line: int | None, end_column: int | None) -> ParseError:
    """A ParseError whose text shows `line N, column C` and the source line underlined."""
    if line is None:
        error = ParseError(message)
    else:
        lines = text.split("\n")
        source = lines[line - 1] if 0 < line <= len(lines) else ""
        column = column or 0
        stop = end_column if end_line == line and end_column is not None else len(source.rstrip())
        width = max(1, stop - column)
        shown = f"{source}\n{' ' * column}{'^' * width}"
        error = ParseError(f"line {line}, column {column + 1}: {message}\n{textwrap.indent(shown, '    ')}")
    error.line = line  # type: ignore[attr-defined]
    error.column = None if column is None else column + 1  # type: ignore[attr-defined]
    return error


__all__ = ["from_source", "ParseContext", "ParseError"]
