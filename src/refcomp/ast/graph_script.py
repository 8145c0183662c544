"""The script format of graph functions (the Relax subset of TVMScript).

    @R.function
    def main(x: R.Tensor(("n", 4), "float32")) -> R.Tensor(("n", 4), "float32"):
        n = T.int64()
        with R.dataflow():
            lv = R.call_tir(cls.add, (x, x), out_sinfo=R.Tensor((n, 4), "float32"))
            gv = R.exp(lv)
            R.output(gv)
        return gv

`print_function(func, namer)` is called by the module printer for every non-PrimFunc function;
`namer` (optional) maps a loop-level Var to its printed name so both levels agree.  With `mark=`,
the text of the marked node is wrapped in the printer's mark sentinels, which
`refcomp.ast.printer.script` turns into a `-->` gutter and a `^^^` underline (how errors on
graph functions show where); `print_fragment` prints a piece of a function the same way.
"""
from __future__ import annotations

from typing import Any, Callable

from . import expr as tir
from .printer_expr import CLOSE_MARK, OPEN_MARK
from .graph_struct_info import (
    FuncStructInfo, ObjectStructInfo, PrimStructInfo, ShapeStructInfo, StructInfo, TensorStructInfo,
    TupleStructInfo, definable_vars,
)

# TVMScript groups some operators in namespaces (R.nn.softmax, R.image.resize2d); refcomp's
# operator names are flat, so the parser drops the namespace.
_OP_NAMESPACES = ("nn", "image")

_TIR_SCALARS = tuple(f"T.{t}" for t in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                                          "float16", "float32", "float64"))

_PRECEDENCE = {"or": 1, "and": 2, "==": 3, "!=": 3, "<": 3, "<=": 3, ">": 3, ">=": 3,
               "+": 4, "-": 4, "*": 5, "//": 5, "%": 5, "/": 5}


def format_prim_expr(e: Any, namer: Callable[[tir.Var], str] | None = None, parent: int = 0) -> str:
    """A loop-level scalar expression in Python syntax (shape dims, PrimValues)."""
    if isinstance(e, tir.Var):
        return namer(e) if namer is not None else e.name
    if isinstance(e, tir.IntImm):
        return "True" if (e.dtype.is_bool and e.value) else "False" if e.dtype.is_bool else str(e.value)
    if isinstance(e, tir.FloatImm):
        return repr(e.value)
    if isinstance(e, tir.Cast):
        return f"T.Cast({e.dtype.name!r}, {format_prim_expr(e.value, namer)})"
    if isinstance(e, (tir.Min, tir.Max)):
        return f"T.{e.symbol}({format_prim_expr(e.a, namer)}, {format_prim_expr(e.b, namer)})"
    if isinstance(e, (tir.TruncDiv, tir.TruncMod)):
        return f"T.{e.symbol}({format_prim_expr(e.a, namer)}, {format_prim_expr(e.b, namer)})"
    if isinstance(e, tir.BinaryOp):
        level = _PRECEDENCE.get(e.symbol, 6)
        text = (f"{format_prim_expr(e.a, namer, level)} {e.symbol} "
                f"{format_prim_expr(e.b, namer, level + 1)}")
        return f"({text})" if level < parent else text
    if isinstance(e, tir.Not):
        return f"not {format_prim_expr(e.a, namer, 6)}"
    if isinstance(e, tir.Select):
        return (f"T.Select({format_prim_expr(e.condition, namer)}, {format_prim_expr(e.true_value, namer)}, "
                f"{format_prim_expr(e.false_value, namer)})")
    if isinstance(e, tir.Call):
        return f"T.{e.op}({', '.join(format_prim_expr(a, namer) for a in e.args)})"
    return type(e).__name__


def _shape_text(values: tuple, namer, quote: set | None) -> str:
    parts = []
    for d in values:
        if quote is not None and isinstance(d, tir.Var) and d in quote:
            parts.append(repr(namer(d) if namer else d.name).replace("'", '"'))
        else:
            parts.append(format_prim_expr(d, namer))
    return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"


def format_struct_info(info: StructInfo, namer=None, quote: set | None = None) -> str:
    """StructInfo in script syntax: R.Tensor((n, 4), "float32"), R.Tuple(...), R.Shape([n]) ..."""
    if isinstance(info, TensorStructInfo):
        args = []
        if info.shape is not None:
            args.append(_shape_text(info.shape, namer, quote))
        if info.dtype is not None:
            args.append(f'"{info.dtype}"')
        if info.shape is None and info.ndim != -1:
            args.append(f"ndim={info.ndim}")
        return f"R.Tensor({', '.join(args)})" if args else "R.Tensor"
    if isinstance(info, ShapeStructInfo):
        if info.values is not None:
            return f"R.Shape({_shape_text(info.values, namer, quote)})"
        return f"R.Shape(ndim={info.ndim})" if info.ndim != -1 else "R.Shape"
    if isinstance(info, PrimStructInfo):
        if info.value is not None and (not isinstance(info.value, (tir.IntImm, tir.FloatImm))
                                       or str(info.value.dtype) in ("int64", "float64")):
            return f"R.Prim(value={format_prim_expr(info.value, namer)})"  # the parser's literal types
        return f'R.Prim("{info.dtype}")'
    if isinstance(info, TupleStructInfo):
        return "R.Tuple(" + ", ".join(format_struct_info(f, namer, quote) for f in info.fields) + ")"
    if isinstance(info, FuncStructInfo):
        if info.params is None:
            return "R.Callable"
        params = ", ".join(format_struct_info(p, namer) for p in info.params)
        return f"R.Callable(({params}), {format_struct_info(info.ret, namer)})"
    if isinstance(info, ObjectStructInfo):
        return "R.Object"
    return type(info).__name__


# ----------------------------------------------------------------------------- expressions

class _Names:
    """Unique printed names for graph vars (x, x_1, ...), stable in order of first sight."""

    def __init__(self, namer=None) -> None:
        self.names: dict[int, str] = {}
        self.used: set[str] = set()
        self.namer = namer
        self.shared = None  # the loop printer's Namer, when printing inside a module

    def __call__(self, var) -> str:
        if self.shared is not None:
            return self.shared.name(var)
        key = id(var)
        if key not in self.names:
            base = var.name
            name, k = base, 0
            while name in self.used:
                k += 1
                name = f"{base}_{k}"
            self.used.add(name)
            self.names[key] = name
        return self.names[key]


def _marked(text: str, node: Any, mark: Any) -> str:
    return OPEN_MARK + text + CLOSE_MARK if mark is not None and node is mark else text


def format_expr(e, names: _Names | None = None, namer=None, mark: Any = None) -> str:
    """One graph expression on one line (bindings and blocks are printed by print_function)."""
    names = names or _Names(namer)
    return _marked(_expr_text(e, names, namer, mark), e, mark)


def _expr_text(e, names: _Names, namer, mark: Any) -> str:
    from . import graph as g

    sub = lambda x: format_expr(x, names, namer, mark)  # noqa: E731
    if isinstance(e, g.Var):
        return names(e)
    if isinstance(e, g.Constant):
        a = e.array
        if a.size <= 8:
            return f"R.const({a.tolist()!r}, \"{a.dtype}\")"
        return f"R.const(<{a.dtype}{list(a.shape)}>)"
    if isinstance(e, g.ShapeExpr):
        return "R.shape([" + ", ".join(format_prim_expr(v, namer) for v in e.values) + "])"
    if isinstance(e, g.PrimValue):
        return f"R.prim_value({format_prim_expr(e.value, namer)})"
    if isinstance(e, g.StringImm):
        return f"R.str({e.value!r})"
    if isinstance(e, g.GlobalVar):
        return f"cls.{e.name}"
    if isinstance(e, g.ExternFunc):
        return f"R.ExternFunc({e.symbol!r})"
    if isinstance(e, g.Tuple):
        return "(" + ", ".join(sub(f) for f in e.fields) + ("," if len(e.fields) == 1 else "") + ")"
    if isinstance(e, g.TupleGetItem):
        return f"{sub(e.tuple_value)}[{e.index}]"
    if isinstance(e, g.Call):
        return _format_call(e, sub, namer)
    if isinstance(e, g.Function):
        return "<function>"
    if isinstance(e, g.SeqExpr):
        return "<seq>"
    if isinstance(e, g.If):
        return f"<if {sub(e.cond)}>"
    return type(e).__name__


def _format_attr(value: Any, namer) -> str:
    if isinstance(value, tir.PrimExpr):
        return format_prim_expr(value, namer)
    if isinstance(value, StructInfo):
        return format_struct_info(value, namer)
    if isinstance(value, tuple):
        return "(" + ", ".join(_format_attr(v, namer) for v in value) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, str):
        return f'"{value}"'
    return repr(value)


def _format_call(call, sub, namer) -> str:
    from . import graph as g

    name = call.op_name
    if name in ("call_tir", "call_dps_packed"):
        callee, *rest = call.args
        out = call.sinfo_args[0] if len(call.sinfo_args) == 1 else g.TupleStructInfo(call.sinfo_args)
        args = ", ".join(sub(a) for a in rest)
        text = f"R.{name}({sub(callee)}, ({args}{',' if len(rest) == 1 else ''}), " \
               f"out_sinfo={format_struct_info(out, namer)}"
        extra = "".join(f", {k}={_format_attr(v, namer)}" for k, v in call.attrs.items())
        return text + extra + ")"
    callee = f"R.{name}" if name is not None else sub(call.op)
    parts = [sub(a) for a in call.args]
    parts += [f"{k}={_format_attr(v, namer)}" for k, v in call.attrs.items()]
    if call.sinfo_args and name is None:
        parts.append("sinfo_args=" + _format_attr(tuple(call.sinfo_args), namer))
    return f"{callee}({', '.join(parts)})"


# ----------------------------------------------------------------------------- functions

def print_function(func, namer: Callable[[tir.Var], str] | None = None, name: str | None = None,
                   mark: Any = None) -> str:
    """A graph Function as `@R.function def ...` text (marking the binding `mark` with ^^^)."""
    if namer is not None and hasattr(namer, "name") and not callable(namer):
        name = name or getattr(namer, "function_name", None)
    names = _Names(namer)
    if namer is not None and hasattr(namer, "name"):
        names.shared = namer
        namer = _loop_namer(namer)
        names.namer = namer
    name = name or func.attrs.get("global_symbol", "main")
    defined = [v for p in func.params for v in definable_vars(p.struct_info)]
    quote = set(defined)
    params = ", ".join(_marked(f"{names(p)}: {format_struct_info(p.struct_info, namer, quote)}", p, mark)
                       for p in func.params)
    ret = format_struct_info(func.ret_struct_info, namer)
    lines = ["@R.function" + ("(pure=False)" if not func.is_pure else ""),
             _marked(f"def {name}({params}) -> {ret}:", func, mark)]
    for key, value in func.attrs.items():
        if key != "global_symbol":
            lines.append(f"    R.func_attr({{{key!r}: {_format_attr(value, namer)}}})")
    size_vars: dict = {}
    for v in defined:
        size_vars.setdefault(v, None)
    for v in size_vars:  # a marked size var points at its declaration
        lines.append("    " + _marked(f"{namer(v) if namer else v.name} = T.int64()", v, mark))
    _print_seq(func.body, names, namer, lines, "    ", mark)
    return "\n".join(lines)


def print_fragment(node, namer=None, mark: Any = None) -> str:
    """A piece of a graph function (an expression, binding, block or SeqExpr) as script lines."""
    from . import graph as g

    if isinstance(node, g.Function):
        return print_function(node, namer, mark=mark)
    names = _Names(namer)
    lines: list[str] = []
    if isinstance(node, g.SeqExpr):
        _print_seq(node, names, namer, lines, "", mark)
    elif isinstance(node, g.BindingBlock):
        _print_block(node, names, namer, lines, "", mark)
    elif isinstance(node, g.Binding):
        _print_binding(node, names, namer, lines, "", mark)
    else:
        lines.append(format_expr(node, names, namer, mark))
    return "\n".join(lines)


def _print_seq(seq, names, namer, lines, indent, mark, target: str | None = None) -> None:
    for block in seq.blocks:
        _print_block(block, names, namer, lines, indent, mark)
    result = format_expr(seq.body, names, namer, mark)
    line = f"{target} = {result}" if target else f"return {result}"
    lines.append(indent + _marked(line, seq, mark))


def _print_block(block, names, namer, lines, indent, mark) -> None:
    from . import graph as g

    inner = indent
    if isinstance(block, g.DataflowBlock):
        lines.append(indent + _marked("with R.dataflow():", block, mark))
        inner = indent + "    "
    elif block is mark and block.bindings:  # a plain block has no line of its own: mark its first
        mark = block.bindings[0]
    for binding in block.bindings:
        _print_binding(binding, names, namer, lines, inner, mark)
    if isinstance(block, g.DataflowBlock):
        outputs = [names(b.var) for b in block.bindings if not isinstance(b.var, g.DataflowVar)]
        lines.append(f"{inner}R.output({', '.join(outputs)})")


def _print_binding(binding, names, namer, lines, indent, mark) -> None:
    from . import graph as g

    target = _marked(names(binding.var), binding.var, mark)
    expr = lambda e: format_expr(e, names, namer, mark)  # noqa: E731
    if isinstance(binding, g.MatchCast):
        info = format_struct_info(binding.struct_info, namer)
        line = f"{target} = R.match_cast({expr(binding.value)}, {info})"
    elif isinstance(binding.value, g.If):
        branch = binding.value
        line = _marked(f"if {expr(branch.cond)}:", branch, mark)
    elif isinstance(binding.value, g.Function):
        line = f"{target} = " + _marked("<nested function>", binding.value, mark)
    else:
        info = binding.var.struct_info
        annot = f": {format_struct_info(info, namer)}" if info is not None else ""
        line = f"{target}{annot} = {expr(binding.value)}"
    lines.append(indent + _marked(line, binding, mark))
    if isinstance(binding.value, g.If):
        branch = binding.value
        _print_seq(branch.true_branch, names, namer, lines, indent + "    ", mark, target)
        lines.append(f"{indent}else:")
        _print_seq(branch.false_branch, names, namer, lines, indent + "    ", mark, target)


def _loop_namer(namer):
    """A callable view of the loop printer's Namer object (so both levels share one namespace)."""
    return lambda var: namer.name(var)


# ----------------------------------------------------------------------------- parsing

def parse_function(node, context):
    """Read an `@R.function` def (a Python ast.FunctionDef) printed by print_function.

    `context` is the module parser's ParseContext (`context.error(node, message)` makes a
    ParseError at the node).  Size vars are declared by `n = T.int64()` (or quoted in parameter
    shapes); module functions are referred to as `cls.name`.  The reader records what is written:
    unannotated bindings keep no struct info and inline shapes, numbers and strings stay call
    arguments until the graph normalizer (refcomp.graph.passes.normalize) completes them.
    """
    return _GraphReader(context).function(node)


class _GraphReader:
    def __init__(self, context) -> None:
        self.context = context
        self.size_vars: dict[str, tir.Var] = {}
        self.values: dict[str, object] = {}

    def error(self, node, message):
        return self.context.error(node, message)

    # ------------------------------------------------------------------ function structure
    def function(self, node):
        import ast

        from . import graph as g

        for stmt in node.body:  # size vars first, so parameter annotations can use them
            if (isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call)
                    and self.dotted(stmt.value.func) == "T.int64"):
                name = stmt.targets[0].id
                self.size_vars.setdefault(name, tir.SizeVar(name, "int64"))
        params = []
        for arg in node.args.args:
            if arg.annotation is None:
                raise self.error(arg, f"graph parameter {arg.arg} needs a struct-info annotation")
            var = g.Var(arg.arg, self.struct_info(arg.annotation, quoted=True))
            self.values[arg.arg] = var
            params.append(var)
        ret = self.struct_info(node.returns) if node.returns is not None else None
        attrs: dict = {}
        pure = True
        for deco in node.decorator_list:
            if isinstance(deco, ast.Call):
                for kw in deco.keywords:
                    if kw.arg == "pure":
                        pure = bool(self.literal(kw.value))
        blocks, result = self.body(node.body, attrs)
        body = g.SeqExpr(tuple(blocks), result)
        attrs.setdefault("global_symbol", node.name)
        return g.Function(tuple(params), body, ret, pure, attrs)

    def body(self, stmts, attrs):
        import ast

        from . import graph as g

        blocks, loose = [], []
        result = None
        for stmt in stmts:
            if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call) and \
                    self.dotted(stmt.value.func) == "T.int64":
                continue
            if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Name) and \
                    self.dotted(stmt.targets[0]) == "cls":
                continue  # `cls = Module`: module functions are named cls.name anyway
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and \
                    self.dotted(stmt.value.func) == "R.func_attr":
                attrs.update(self.attr(stmt.value.args[0]))
                continue
            if isinstance(stmt, ast.With):
                if loose:
                    blocks.append(g.BindingBlock(tuple(loose)))
                    loose = []
                outputs: set = set()
                for inner in stmt.body:  # R.output names the block's plain Vars; the rest are DataflowVars
                    if isinstance(inner, ast.Expr) and isinstance(inner.value, ast.Call) and \
                            self.dotted(inner.value.func) == "R.output":
                        outputs |= {a.id for a in inner.value.args}
                bindings = []
                for inner in stmt.body:
                    if isinstance(inner, ast.Expr) and isinstance(inner.value, ast.Call) and \
                            self.dotted(inner.value.func) == "R.output":
                        continue
                    bindings.append(self.binding(inner, dataflow=True, outputs=outputs))
                blocks.append(g.DataflowBlock(tuple(bindings)))
                continue
            if isinstance(stmt, ast.Return):
                result = self.expr(stmt.value)
                continue
            if isinstance(stmt, ast.If):
                loose.append(self.if_binding(stmt))
                continue
            loose.append(self.binding(stmt, dataflow=False))
        if loose:
            blocks.append(g.BindingBlock(tuple(loose)))
        if result is None:
            raise self.error(stmts[-1] if stmts else None, "a graph function must end with return")
        return blocks, result

    def binding(self, stmt, dataflow, outputs=frozenset()):
        import ast

        from . import graph as g

        if isinstance(stmt, ast.AnnAssign):
            target, annotation, value_node = stmt.target.id, stmt.annotation, stmt.value
        elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            target, annotation, value_node = stmt.targets[0].id, None, stmt.value
        else:
            raise self.error(stmt, "expected a binding `name: info = value`")
        if isinstance(value_node, ast.Call) and self.dotted(value_node.func) == "R.match_cast":
            value = self.expr(value_node.args[0])
            info = self.struct_info(value_node.args[1], define=True)
            var = (g.DataflowVar if dataflow and target not in outputs else g.Var)(target, info)
            self.values[target] = var
            return g.MatchCast(var, value, info)
        value = self.expr(value_node)
        info = self.struct_info(annotation) if annotation is not None else value.struct_info
        if isinstance(value, g.Call) and value.struct_info is None:
            value = value.with_(struct_info=info)
        var = (g.DataflowVar if dataflow and target not in outputs else g.Var)(target, info)
        self.values[target] = var
        return g.VarBinding(var, value)

    def if_binding(self, stmt):
        """`if cond: ... y = a else: ... y = b` as the binding `y = If(cond, ..., ...)`."""
        import ast

        from . import graph as g

        cond = self.expr(stmt.test)
        branches, targets = [], []
        for stmts in (stmt.body, stmt.orelse):
            last = stmts[-1] if stmts else stmt
            target = last.target if isinstance(last, ast.AnnAssign) else (
                last.targets[0] if isinstance(last, ast.Assign) and len(last.targets) == 1 else None)
            if not isinstance(target, ast.Name):
                raise self.error(last, "each branch of an if must end by assigning its result to a name")
            result = ast.copy_location(ast.Return(value=last.value), last)
            blocks, body = self.body(list(stmts[:-1]) + [result], {})
            branches.append(g.SeqExpr(tuple(blocks), body))
            targets.append(target.id)
        if targets[0] != targets[1]:
            raise self.error(stmt, f"the branches of an if assign different names: {targets[0]}, {targets[1]}")
        var = g.Var(targets[0])
        self.values[targets[0]] = var
        return g.VarBinding(var, g.If(cond, *branches))

    # ------------------------------------------------------------------ expressions
    def dotted(self, node) -> str:
        import ast

        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Attribute):
            return f"{self.dotted(node.value)}.{node.attr}"
        return ""

    def expr(self, node):
        import ast

        import numpy as np

        from . import graph as g

        if isinstance(node, ast.Name):
            if node.id not in self.values:
                raise self.error(node, f"{node.id} is not defined")
            return self.values[node.id]
        if isinstance(node, ast.Tuple):
            return g.Tuple(tuple(self.expr(e) for e in node.elts))
        if isinstance(node, ast.Subscript):
            value, index = self.expr(node.value), self.literal(node.slice)
            info = value.struct_info
            field = info.fields[index] if isinstance(info, TupleStructInfo) and index < len(info.fields) else None
            return g.TupleGetItem(value, index, field)
        if isinstance(node, ast.Attribute) and self.dotted(node.value) == "cls":
            return g.GlobalVar(node.attr)
        if not isinstance(node, ast.Call):
            raise self.error(node, "unsupported graph expression")
        name = self.dotted(node.func)
        namespace, _, rest = name[2:].partition(".")
        if name.startswith("R.") and namespace in _OP_NAMESPACES and rest:
            name = "R." + rest  # R.nn.softmax names the operator softmax
        if name == "R.const":
            value = self.literal(node.args[0])
            dtype = self.literal(node.args[1]) if len(node.args) > 1 else None
            return g.Constant(np.asarray(value, dtype=dtype))
        if name == "R.shape":
            return g.ShapeExpr(tuple(self.prim(e) for e in node.args[0].elts))
        if name == "R.prim_value":
            return g.PrimValue(self.prim(node.args[0]))
        if name == "R.str":
            return g.StringImm(self.literal(node.args[0]))
        if name == "R.ExternFunc":
            return g.ExternFunc(self.literal(node.args[0]))
        if name in ("R.call_tir", "R.call_dps_packed"):
            callee = self.expr(node.args[0])
            args = tuple(self.expr(e) for e in node.args[1].elts)
            kwargs = {kw.arg: kw.value for kw in node.keywords}
            out = self.struct_info(kwargs.pop("out_sinfo"))
            outs = out.fields if isinstance(out, TupleStructInfo) else (out,)
            attrs = {k: self.attr(v) for k, v in kwargs.items()}
            # the call's own info is what it declares (a binding's annotation may say less)
            return g.Call(g.Op(name[2:]), (callee,) + args, attrs, outs,
                          outs[0] if len(outs) == 1 else TupleStructInfo(outs))
        if name.startswith("R."):
            args = tuple(self.call_arg(a) for a in node.args)
            attrs = {kw.arg: self.attr(kw.value) for kw in node.keywords if kw.arg != "sinfo_args"}
            return g.Call(g.Op(name[2:]), args, attrs)
        if name.startswith("cls."):
            return g.Call(g.GlobalVar(name[4:]), tuple(self.expr(a) for a in node.args))
        raise self.error(node, f"unknown graph call {name}")

    def call_arg(self, node):
        """A positional operator argument: a graph value, or a shape, number or string written inline.

        `(n * k, 4)` of dims becomes a ShapeExpr, a number a PrimValue, a string a StringImm; the
        graph normalizer hands them to the operator's constructor, which makes them attributes.
        """
        import ast

        from . import graph as g

        if isinstance(node, (ast.Tuple, ast.List)) and node.elts and all(
                self.is_dim(e, undeclared=True) for e in node.elts):  # so its error says to declare them
            return g.ShapeExpr(tuple(self.prim(e) for e in node.elts))
        if isinstance(node, ast.List):
            return g.Tuple(tuple(self.expr(e) for e in node.elts))
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return g.StringImm(node.value)
        if isinstance(node, ast.Constant) and isinstance(node.value, float):
            return g.PrimValue(tir.FloatImm(node.value, "float64"))
        if self.is_dim(node):
            return g.PrimValue(self.prim(node))
        return self.expr(node)

    def is_dim(self, node, undeclared: bool = False) -> bool:
        """Whether node is an integer shape expression (literals, size vars, arithmetic).

        undeclared: a name that is neither a graph value nor a size var counts as a size var.
        """
        import ast

        if isinstance(node, ast.Constant):
            return isinstance(node.value, int) and not isinstance(node.value, bool)
        if isinstance(node, ast.Name):
            return node.id in self.size_vars and node.id not in self.values or (
                undeclared and node.id not in self.values)
        if isinstance(node, ast.UnaryOp):
            return isinstance(node.op, ast.USub) and self.is_dim(node.operand, undeclared)
        if isinstance(node, ast.BinOp):
            return self.is_dim(node.left, undeclared) and self.is_dim(node.right, undeclared)
        return False

    def attr(self, node):
        import ast

        if isinstance(node, ast.Dict):
            return {self.literal(k): self.attr(v) for k, v in zip(node.keys, node.values)}
        if isinstance(node, (ast.Compare, ast.BoolOp)):
            return self.prim(node)
        if isinstance(node, (ast.Tuple, ast.List)):
            return tuple(self.attr(e) for e in node.elts)
        if isinstance(node, ast.Name) and node.id in self.size_vars or isinstance(node, ast.BinOp):
            return self.prim(node)
        if isinstance(node, ast.Call) and self.dotted(node.func) == "R.shape":
            return tuple(self.prim(e) for e in node.args[0].elts)  # tir_vars=R.shape([n])
        if isinstance(node, ast.Call) and self.dotted(node.func).startswith("R."):
            return self.struct_info(node)
        return self.literal(node)

    def literal(self, node):
        import ast

        try:
            return ast.literal_eval(node)
        except ValueError:
            raise self.error(node, "expected a literal") from None

    def prim(self, node, define: bool = False):
        import ast

        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return self.size_vars.setdefault(node.value, tir.SizeVar(node.value, "int64"))
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            return tir.IntImm(node.value, "int64")
        if isinstance(node, ast.Constant) and isinstance(node.value, float):
            return tir.FloatImm(node.value, "float64")
        if isinstance(node, ast.Name):
            if node.id not in self.size_vars:
                if not define:
                    raise self.error(node, f"size var {node.id} is not declared (write {node.id} = T.int64())")
                self.size_vars[node.id] = tir.SizeVar(node.id, "int64")
            return self.size_vars[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            if isinstance(node.operand, ast.Constant) and isinstance(node.operand.value, int):
                return tir.IntImm(-node.operand.value, "int64")
            return tir.Sub(tir.IntImm(0, "int64"), self.prim(node.operand))
        if isinstance(node, ast.BinOp):
            a, b = self.prim(node.left), self.prim(node.right)
            ops = {ast.Add: tir.Add, ast.Sub: tir.Sub, ast.Mult: tir.Mul, ast.FloorDiv: tir.FloorDiv,
                   ast.Mod: tir.FloorMod}
            cls = ops.get(type(node.op))
            if cls is None:
                raise self.error(node, "unsupported operator in a shape expression")
            return cls(a, b)
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            a, b = self.prim(node.left), self.prim(node.comparators[0])
            ops = {ast.Eq: tir.EQ, ast.NotEq: tir.NE, ast.Lt: tir.LT, ast.LtE: tir.LE, ast.Gt: tir.GT,
                   ast.GtE: tir.GE}
            return ops[type(node.ops[0])](a, b)
        if isinstance(node, ast.BoolOp):
            parts = [self.prim(v) for v in node.values]
            result = parts[0]
            for p in parts[1:]:
                result = tir.And(result, p) if isinstance(node.op, ast.And) else tir.Or(result, p)
            return result
        if isinstance(node, ast.Call) and self.dotted(node.func) in _TIR_SCALARS and len(node.args) == 1:
            value = self.literal(node.args[0])  # T.int64(3), T.float32(0.5): a typed literal
            dtype = self.dotted(node.func)[2:]
            return tir.FloatImm(float(value), dtype) if dtype.startswith("float") else tir.IntImm(int(value), dtype)
        if isinstance(node, ast.Call) and self.dotted(node.func) == "T.Cast":
            return self.prim(node.args[1]).astype(self.literal(node.args[0]))
        if isinstance(node, ast.Call) and self.dotted(node.func) in ("T.max", "T.min"):
            a, b = (self.prim(x) for x in node.args)
            return tir.Max(a, b) if self.dotted(node.func) == "T.max" else tir.Min(a, b)
        raise self.error(node, "unsupported shape expression")

    def struct_info(self, node, quoted: bool = False, define: bool = False):
        import ast

        name = self.dotted(node.func) if isinstance(node, ast.Call) else self.dotted(node)
        args = node.args if isinstance(node, ast.Call) else []
        kwargs = {kw.arg: kw.value for kw in node.keywords} if isinstance(node, ast.Call) else {}
        if name == "R.Tensor":
            shape, dtype = None, None
            args = list(args) + [kwargs[k] for k in ("shape", "dtype") if k in kwargs]
            for a in args:
                if isinstance(a, (ast.Tuple, ast.List)):
                    shape = tuple(self.prim(e, define=define) for e in a.elts)
                elif isinstance(a, ast.Constant) and isinstance(a.value, str):
                    dtype = a.value
            ndim = self.literal(kwargs["ndim"]) if "ndim" in kwargs else -1
            return TensorStructInfo(shape, dtype, ndim)
        if name == "R.Shape":
            if args:
                return ShapeStructInfo(tuple(self.prim(e, define=define) for e in args[0].elts))
            return ShapeStructInfo(None, self.literal(kwargs["ndim"]) if "ndim" in kwargs else -1)
        if name == "R.Prim":
            if "value" in kwargs:
                value = self.prim(kwargs["value"], define=define)
                return PrimStructInfo(value.dtype, value)
            return PrimStructInfo(self.literal(args[0]))
        if name == "R.Tuple":
            return TupleStructInfo(tuple(self.struct_info(a, quoted, define) for a in args))
        if name == "R.Object":
            return ObjectStructInfo()
        if name == "R.Callable":
            return FuncStructInfo(None, ObjectStructInfo())
        raise self.error(node, f"unknown struct info {name or type(node).__name__}")
