"""Reading the statements of a `@T.prim_func`: parameters, declarations, loops, binders, stores.

Used by `refcomp.ast.parser.from_source`; blocks and buffers are read by parser_block, expressions
by parser_expr.
"""
from __future__ import annotations

import ast
from typing import Any, Mapping

from ..errors import ParseError
from . import expr as E
from .buffer import Buffer
from .function import PrimFunc
from .parser_block import BlockReader, is_root_realize
from .parser_expr import Scope, as_dtype, binary, promote_pair, to_expr
from .script_common import LOOP_KINDS, extent_of
from .stmt import (
    Allocate, AssertStmt, Block, BlockRealize, BufferStore, Evaluate, For, IfThenElse, LetStmt,
    SeqStmt, Stmt, While,
)

_AUG_OPS = {ast.Add: E.Add, ast.Sub: E.Sub, ast.Mult: E.Mul, ast.Div: E.Div, ast.FloorDiv: E.FloorDiv,
            ast.Mod: E.FloorMod}


class FunctionReader(BlockReader):
    """Reads one @T.prim_func: parameters, declarations, body statements."""

    def __init__(self, context: Any, options: dict[str, Any]) -> None:
        super().__init__(context.error, context.tir_names)
        self.context = context
        self.options = options
        self.loop_ranges: dict[E.Var, tuple[E.PrimExpr, E.PrimExpr]] = {}

    # ------------------------------------------------------------------ functions
    def function(self, node: ast.FunctionDef) -> PrimFunc:
        unknown = set(self.options) - {"name", "module_key", "implicit_root", "private", "check_well_formed", "s_tir"}
        if unknown:
            raise self.fail(node, f"unknown @T.prim_func option {sorted(unknown)[0]!r}")
        arguments = node.args
        if arguments.vararg or arguments.kwarg or arguments.kwonlyargs or arguments.posonlyargs:
            raise self.fail(node, "a prim_func takes plain positional parameters only")
        body = list(node.body)
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]  # docstring
        for stmt in body:
            declared = self.declaration(stmt)
            if declared is not None:
                self.scope.define(*declared)
        for arg in arguments.args:
            if arg.annotation is None:
                raise self.fail(arg, f"parameter {arg.arg} needs a type: T.Buffer(...), T.handle or T.int32")
        # Scalars first, so a buffer's shape may use a scalar parameter listed after it.
        scalars = {arg.arg: self.parameter(arg) for arg in arguments.args if not self.is_buffer_type(arg.annotation)}
        for name, param in scalars.items():
            self.scope.define(name, param)
        params: list[Any] = []
        for arg in arguments.args:
            param = scalars[arg.arg] if arg.arg in scalars else self.parameter(arg)
            self.scope.define(arg.arg, param)
            params.append(param)
        attrs: dict[str, Any] = {}
        root_allocs: list[Buffer] = []
        rest: list[ast.stmt] = []
        for stmt in body:
            if self.declaration(stmt) is not None:
                continue
            call = _call_of(stmt)
            name = self.dotted(call.func) if call is not None else None
            if name == "T.func_attr" and isinstance(stmt, ast.Expr):
                if len(call.args) != 1 or call.keywords:
                    raise self.fail(call, "T.func_attr takes one dict")
                value = self.literal(call.args[0])
                if not isinstance(value, Mapping):
                    raise self.fail(call.args[0], "T.func_attr takes a dict")
                attrs.update(value)
            elif name == "T.match_buffer" and isinstance(stmt, ast.Assign):
                self.match_param(stmt, call, params)
            elif name == "T.Buffer" and isinstance(stmt, ast.Assign):
                target = _single_name(self, stmt)
                self.scope.define(target, self.buffer(call, target, name))
            elif name == "T.alloc_buffer" and isinstance(stmt, ast.Assign):
                target = _single_name(self, stmt)
                buffer = self.buffer(call, target, name)
                self.scope.define(target, buffer)
                root_allocs.append(buffer)
            else:
                rest.append(stmt)
        for index, param in enumerate(params):
            if isinstance(param, _Handle):  # no T.match_buffer describes it: a plain handle
                params[index] = E.Var(param.name, "handle")
                self.scope.define(param.name, params[index])
        func_body = self.body(rest, node)
        implicit_root = self.options.get("implicit_root", True)
        if implicit_root and (root_allocs or (self.saw_block and not is_root_realize(func_body))):
            if is_root_realize(func_body) and root_allocs:
                raise self.fail(node, "T.alloc_buffer at the top of a function that has an explicit root block")
            root = Block("root", (), (), (), func_body, alloc_buffers=tuple(root_allocs))
            func_body = BlockRealize((), E.IntImm(1, "bool"), root)
        elif root_allocs:
            raise self.fail(node, "T.alloc_buffer outside a block (use T.allocate for an Allocate)")
        return PrimFunc(tuple(params), func_body, self.options.get("name", node.name), attrs)

    def declaration(self, stmt: ast.stmt) -> tuple[str, E.Var] | None:
        """`n = T.int32()`, `n = T.int64(is_size_var=True)`, `n = T.var("int32")`: a free variable."""
        if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1 or not isinstance(stmt.targets[0], ast.Name):
            return None
        call = stmt.value
        if not isinstance(call, ast.Call):
            return None
        name = self.dotted(call.func)
        if name == "T.var" and len(call.args) == 1:
            dtype = self.dtype_arg(call.args[0])
            options: dict[str, Any] = {}
        elif name is not None and name.startswith("T.") and as_dtype(name[2:]) is not None and not call.args:
            dtype = as_dtype(name[2:])
            options = self.var_options(call)
        else:
            return None
        if id(stmt) in self.declared:
            return self.declared[id(stmt)]
        target = stmt.targets[0].id
        cls = E.SizeVar if options.get("is_size_var") else E.Var
        result = (target, cls(options.get("name", target), dtype))
        self.declared[id(stmt)] = result
        return result

    def var_options(self, call: ast.Call) -> dict[str, Any]:
        options = {}
        for keyword in call.keywords:
            if keyword.arg not in ("is_size_var", "name") or not isinstance(keyword.value, ast.Constant):
                raise self.fail(keyword.value, f"unknown variable option {keyword.arg!r} (is_size_var=, name=)")
            options[keyword.arg] = keyword.value.value
        return options

    def is_buffer_type(self, annotation: ast.AST) -> bool:
        head = annotation.func if isinstance(annotation, ast.Call) else (
            annotation.value if isinstance(annotation, ast.Subscript) else annotation)
        return self.dotted(head) == "T.Buffer"

    def parameter(self, arg: ast.arg) -> Any:
        annotation = arg.annotation
        name = self.dotted(annotation.func if isinstance(annotation, ast.Call) else annotation)
        if isinstance(annotation, ast.Subscript) and self.dotted(annotation.value) == "T.Buffer":
            items = annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else [annotation.slice]
            shape = self.shape(items[0])
            dtype = self.dtype_arg(items[1]) if len(items) > 1 else "float32"
            return Buffer(arg.arg, shape, dtype)
        if name == "T.Buffer" and isinstance(annotation, ast.Call):
            return self.buffer(annotation, arg.arg, name)
        if name == "T.handle":
            return _Handle(arg.arg)
        if name is not None and name.startswith("T.") and as_dtype(name[2:]) is not None:
            options = self.var_options(annotation) if isinstance(annotation, ast.Call) else {}
            if isinstance(annotation, ast.Call) and annotation.args:
                raise self.fail(annotation, "a scalar parameter's type takes no arguments")
            cls = E.SizeVar if options.get("is_size_var") else E.Var
            return cls(options.get("name", arg.arg), as_dtype(name[2:]))
        raise self.fail(annotation, f"unknown parameter type {ast.unparse(annotation)}")

    def match_param(self, stmt: ast.Assign, call: ast.Call, params: list[Any]) -> None:
        target = _single_name(self, stmt)
        if not call.args:
            raise self.fail(call, "T.match_buffer needs the handle parameter it describes")
        handle = self.value(call.args[0])
        position = next((k for k, p in enumerate(params) if p is handle), None)
        if not isinstance(handle, _Handle) or position is None:
            raise self.fail(call.args[0], "at the top of a function, T.match_buffer describes a T.handle parameter")
        trimmed = ast.Call(func=call.func, args=call.args[1:], keywords=call.keywords)
        ast.copy_location(trimmed, call)
        buffer = self.buffer(trimmed, target, "T.match_buffer")
        params[position] = buffer
        self.scope.define(target, buffer)

    # ------------------------------------------------------------------ statements
    def body(self, stmts: list[ast.stmt], owner: ast.AST) -> Stmt:
        """The statements as one Stmt: one stays itself, several make a SeqStmt."""
        items = self.statements(stmts)
        return items[0] if len(items) == 1 else SeqStmt(tuple(items))

    def statements(self, stmts: list[ast.stmt]) -> list[Stmt]:
        """Each statement in order; a binding line (`x: T.int32 = v`, `assert`, `T.allocate`) takes
        the statements after it as its body."""
        out: list[Stmt] = []
        outer = self.scope
        self.scope = Scope(outer)
        try:
            for index, stmt in enumerate(stmts):
                binder = self.binder(stmt)
                if binder is not None:
                    out.append(binder(stmts[index + 1:]))
                    break
                parsed = self.statement(stmt)
                if parsed is not None:
                    out.append(parsed)
        finally:
            self.scope = outer
        return out

    def statement(self, stmt: ast.stmt) -> Stmt | None:
        try:
            method = getattr(self, "stmt_" + type(stmt).__name__, None)
            if method is None:
                raise self.fail(stmt, f"{type(stmt).__name__} statements are not part of the script format")
            return method(stmt)
        except ParseError:
            raise
        except (TypeError, ValueError) as exc:
            raise self.fail(stmt, str(exc)) from None

    def stmt_Pass(self, stmt: ast.Pass) -> None:
        return None

    def stmt_Expr(self, stmt: ast.Expr) -> Stmt | None:
        call = stmt.value
        if isinstance(call, ast.Constant) and isinstance(call.value, str):
            return None  # a comment-like string
        name = self.dotted(call.func) if isinstance(call, ast.Call) else None
        if name == "T.evaluate":
            (arg,) = self.positional(call, 1, name)
            return Evaluate(self.expr(arg))
        if name in ("T.reads", "T.writes", "T.where", "T.block_attr", "T.func_attr"):
            raise self.fail(call, f"{name} belongs at the top of a {'function' if name == 'T.func_attr' else 'block'}")
        return Evaluate(self.expr(call))

    def stmt_Assign(self, stmt: ast.Assign) -> Stmt | None:
        if len(stmt.targets) != 1:
            raise self.fail(stmt, "chained assignment is not part of the script format")
        target = stmt.targets[0]
        if isinstance(target, ast.Subscript):
            return self.store(target, self.value(stmt.value))
        call = _call_of(stmt)
        name = self.dotted(call.func) if call is not None else None
        if name == "T.Buffer":
            buffer_name = _single_name(self, stmt)
            self.scope.define(buffer_name, self.buffer(call, buffer_name, name))
            return None
        declared = self.declaration(stmt)
        if declared is not None:
            self.scope.define(*declared)
            return None
        if name in ("T.alloc_buffer", "T.match_buffer") or (name or "").startswith("T.axis."):
            raise self.fail(stmt, f"{name} belongs at the top of a block")
        raise self.fail(stmt, "cannot assign here")  # plain `x = value` is handled as a binder

    def store(self, target: ast.Subscript, value: Any) -> Stmt:
        buffer = self.value(target.value)
        if not isinstance(buffer, Buffer):
            raise self.fail(target.value, "only buffers can be stored to")
        items = target.slice.elts if isinstance(target.slice, ast.Tuple) else [target.slice]
        if any(isinstance(i, ast.Slice) for i in items):
            raise self.fail(target, "a store takes one index per dimension, not a slice")
        indices = tuple(self.expr(i) for i in items)
        if len(indices) != buffer.ndim:
            raise self.fail(target, f"{buffer.name} has {buffer.ndim} dimensions, indexed with {len(indices)}")
        lanes = max((i.dtype.lanes for i in indices), default=1)
        expr_value = self.to_typed(value, buffer.dtype.with_lanes(lanes), target)
        return BufferStore(buffer, expr_value, indices)

    def to_typed(self, value: Any, like: Any, node: ast.AST) -> E.PrimExpr:
        try:
            return to_expr(value, like)
        except (TypeError, ValueError) as exc:
            raise self.fail(node, str(exc)) from None

    def stmt_AugAssign(self, stmt: ast.AugAssign) -> Stmt:
        if not isinstance(stmt.target, ast.Subscript):
            raise self.fail(stmt, "augmented assignment is only for buffer elements (C[i] += ...)")
        cls = _AUG_OPS.get(type(stmt.op))
        if cls is None:
            raise self.fail(stmt, f"the operator {type(stmt.op).__name__}= is not part of the script format")
        current = self.value(stmt.target)
        return self.store(stmt.target, binary(cls, current, self.value(stmt.value)))

    def stmt_If(self, stmt: ast.If) -> Stmt:
        condition = self.expr(stmt.test)
        then_case = self.body(stmt.body, stmt)
        else_case = self.body(stmt.orelse, stmt) if stmt.orelse else None
        return IfThenElse(condition, then_case, else_case)

    def stmt_While(self, stmt: ast.While) -> Stmt:
        if stmt.orelse:
            raise self.fail(stmt, "while ... else is not part of the script format")
        return While(self.expr(stmt.test), self.body(stmt.body, stmt))

    def stmt_For(self, stmt: ast.For) -> Stmt:
        if stmt.orelse:
            raise self.fail(stmt, "for ... else is not part of the script format")
        call = stmt.iter
        name = self.dotted(call.func) if isinstance(call, ast.Call) else None
        if name == "T.grid":
            return self.grid(stmt, call)
        targets = [stmt.target]
        if not isinstance(stmt.target, ast.Name):
            raise self.fail(stmt.target, "the loop variable must be one name (use T.grid for several)")
        if name == "range":
            kind = "serial"
        elif name is not None and name.startswith("T.") and name[2:] in LOOP_KINDS:
            kind = LOOP_KINDS[name[2:]]
        else:
            raise self.fail(stmt.iter, "a loop runs over range(...), T.grid, T.serial, T.parallel, "
                                       "T.vectorized, T.unroll or T.thread_binding")
        begin, end, thread, annotations = self.loop_arguments(call, name, kind)
        extent = extent_of(begin, end)
        var = E.Var(targets[0].id, extent.dtype)
        return self.loop_body(stmt, [(var, begin, extent)], kind, thread, annotations)

    def loop_arguments(self, call: ast.Call, name: str, kind: str) -> tuple:
        positional = list(call.args)
        thread = None
        annotations = None
        for keyword in call.keywords:
            if keyword.arg == "thread" and kind == "thread_binding":
                thread = self.string(keyword.value, "thread")
            elif keyword.arg == "annotations" and name != "range":
                annotations = self.literal(keyword.value)
            elif keyword.arg in ("start", "begin", "stop", "end") and name != "range":
                positional.append(keyword.value)
            else:
                raise self.fail(keyword.value, f"{name} has no option {keyword.arg!r}")
        if kind == "thread_binding" and positional and isinstance(positional[-1], ast.Constant) \
                and isinstance(positional[-1].value, str):
            thread = positional.pop().value
        if kind == "thread_binding" and thread is None:
            raise self.fail(call, "T.thread_binding needs thread=\"threadIdx.x\" (or another axis)")
        if not 1 <= len(positional) <= 2:
            raise self.fail(call, f"{name} takes an extent, or a begin and an end")
        if len(positional) == 1:
            end = self.expr(positional[0])
            begin: E.PrimExpr = E.IntImm(0, end.dtype)
        else:
            begin, end = promote_pair(self.value(positional[0]), self.value(positional[1]))
        return begin, end, thread, annotations

    def grid(self, stmt: ast.For, call: ast.Call) -> Stmt:
        targets = stmt.target.elts if isinstance(stmt.target, ast.Tuple) else [stmt.target]
        if call.keywords or len(call.args) != len(targets) or not all(isinstance(t, ast.Name) for t in targets):
            raise self.fail(stmt, f"T.grid gives {len(call.args)} loops for {len(targets)} loop variables")
        loops = []
        for target, extent_node in zip(targets, call.args):
            extent = self.expr(extent_node)
            loops.append((E.Var(target.id, extent.dtype), E.IntImm(0, extent.dtype), extent))
        return self.loop_body(stmt, loops, "serial", None, None)

    def loop_body(self, stmt: ast.For, loops: list, kind: str, thread: str | None, annotations: Any) -> Stmt:
        outer = self.scope
        self.scope = Scope(outer)
        try:
            for var, begin, extent in loops:
                self.scope.define(var.name, var)
                self.loop_ranges[var] = (begin, extent)
            body = self.body(stmt.body, stmt)
        finally:
            self.scope = outer
        for var, begin, extent in reversed(loops):
            body = For(var, begin, extent, kind, body, thread, annotations)
        return body

    def stmt_With(self, stmt: ast.With) -> Stmt:
        if len(stmt.items) != 1 or not isinstance(stmt.items[0].context_expr, ast.Call):
            raise self.fail(stmt, "a with statement takes one T.<...>() item")
        item = stmt.items[0]
        call = item.context_expr
        name = self.dotted(call.func)
        if name in ("T.block", "T.sblock"):
            return self.block(stmt, call)
        if name == "T.seq":
            return SeqStmt(tuple(self.statements(stmt.body)))
        if name == "T.init":
            raise self.fail(stmt, "T.init belongs at the top of a block")
        if name == "T.Assert":
            condition, message = self.positional(call, 2, name)
            return AssertStmt(self.expr(condition), self.string(message, "the message"), self.body(stmt.body, stmt))
        if name in ("T.LetStmt", "T.allocate"):
            if not isinstance(item.optional_vars, ast.Name):
                raise self.fail(stmt, f"with {name}(...) as name: needs the name")
            target = item.optional_vars.id
            if name == "T.LetStmt":
                (value_node,) = self.positional(call, 1, name)
                value = self.expr(value_node)
                return self.scoped(target, E.Var(target, value.dtype),
                                   lambda var: LetStmt(var, value, self.body(stmt.body, stmt)))
            buffer = self.buffer(call, target, name)
            return self.scoped(target, buffer, lambda buf: Allocate(buf, self.body(stmt.body, stmt)))
        raise self.fail(call, f"unknown with-statement {name or ast.unparse(call.func)}")

    def scoped(self, name: str, value: Any, build: Any) -> Stmt:
        outer = self.scope
        self.scope = Scope(outer)
        self.scope.define(name, value)
        try:
            return build(value)
        finally:
            self.scope = outer

    def binder(self, stmt: ast.stmt):
        """For a line that binds a name over the rest of its body, a function building that Stmt."""
        if isinstance(stmt, ast.Assert):
            condition = self.expr(stmt.test)
            message = self.string(stmt.msg, "the assert message") if stmt.msg is not None else ""
            return lambda rest: AssertStmt(condition, message, self.body(rest, stmt))
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            if stmt.value is None:
                raise self.fail(stmt, "a typed name needs a value: x: T.int32 = ...")
            type_name = self.dotted(stmt.annotation)
            dtype = as_dtype(type_name[2:]) if type_name and type_name.startswith("T.") else None
            if dtype is None:
                raise self.fail(stmt.annotation, f"unknown type {ast.unparse(stmt.annotation)}")
            value = self.to_typed(self.value(stmt.value), dtype, stmt.value)
            return self.let_binder(stmt, stmt.target.id, value)
        if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1 or not isinstance(stmt.targets[0], ast.Name):
            return None
        call = _call_of(stmt)
        name = self.dotted(call.func) if call is not None else None
        target = stmt.targets[0].id
        if name in ("T.allocate", "T.decl_buffer"):  # TVM's decl_buffer allocates too
            buffer = self.buffer(call, target, name)
            return lambda rest: self.scoped(target, buffer, lambda buf: Allocate(buf, self.body(rest, stmt)))
        if name is not None and (name in ("T.Buffer", "T.alloc_buffer", "T.match_buffer", "T.var")
                                 or name.startswith("T.axis.") or self.declaration(stmt) is not None):
            return None
        return self.let_binder(stmt, target, self.expr(stmt.value))

    def let_binder(self, stmt: ast.stmt, name: str, value: E.PrimExpr):
        var = E.Var(name, value.dtype)
        return lambda rest: self.scoped(name, var, lambda v: LetStmt(v, value, self.body(rest, stmt)))


class _Handle:
    """A `T.handle` parameter waiting for the T.match_buffer that describes it."""

    def __init__(self, name: str) -> None:
        self.name = name


def _call_of(stmt: ast.stmt) -> ast.Call | None:
    value = getattr(stmt, "value", None)
    return value if isinstance(value, ast.Call) else None


def _single_name(reader: Any, stmt: ast.Assign) -> str:
    if len(stmt.targets) != 1 or not isinstance(stmt.targets[0], ast.Name):
        raise reader.fail(stmt, "expected one name on the left")
    return stmt.targets[0].id
