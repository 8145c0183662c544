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
`namer` (optional) maps a loop-level Var to its printed name so both levels agree.
"""
from __future__ import annotations

from typing import Any, Callable

from . import expr as tir
from .graph_struct_info import (
    FuncStructInfo, ObjectStructInfo, PrimStructInfo, ShapeStructInfo, StructInfo, TensorStructInfo,
    TupleStructInfo, definable_vars,
)

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
        if info.value is not None and not isinstance(info.value, (tir.IntImm, tir.FloatImm)):
            return f"R.Prim(value={format_prim_expr(info.value, namer)})"
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


def format_expr(e, names: _Names | None = None, namer=None) -> str:
    """One graph expression on one line (bindings and blocks are printed by print_function)."""
    from . import graph as g

    names = names or _Names(namer)
    sub = lambda x: format_expr(x, names, namer)  # noqa: E731
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
    from . import graph as g

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
    params = ", ".join(f"{names(p)}: {format_struct_info(p.struct_info, namer, quote)}" for p in func.params)
    ret = format_struct_info(func.ret_struct_info, namer)
    lines = ["@R.function" + ("(pure=False)" if not func.is_pure else ""), f"def {name}({params}) -> {ret}:"]
    for key, value in func.attrs.items():
        if key != "global_symbol":
            lines.append(f"    R.func_attr({{{key!r}: {_format_attr(value, namer)}}})")
    size_vars: dict = {}
    for v in defined:
        size_vars.setdefault(v, None)
    for v in size_vars:
        lines.append(f"    {namer(v) if namer else v.name} = T.int64()")
    _print_seq(func.body, names, namer, lines, "    ", mark)
    return "\n".join(lines)


def _print_seq(seq, names, namer, lines, indent, mark, target: str | None = None) -> None:
    from . import graph as g

    for block in seq.blocks:
        inner = indent
        if isinstance(block, g.DataflowBlock):
            lines.append(f"{indent}with R.dataflow():")
            inner = indent + "    "
        for binding in block.bindings:
            _print_binding(binding, names, namer, lines, inner, mark)
        if isinstance(block, g.DataflowBlock):
            outputs = [names(b.var) for b in block.bindings if not isinstance(b.var, g.DataflowVar)]
            lines.append(f"{inner}R.output({', '.join(outputs)})")
    result = format_expr(seq.body, names, namer)
    lines.append(f"{indent}{target} = {result}" if target else f"{indent}return {result}")


def _print_binding(binding, names, namer, lines, indent, mark) -> None:
    from . import graph as g

    target = names(binding.var)
    if isinstance(binding, g.MatchCast):
        info = format_struct_info(binding.struct_info, namer)
        lines.append(f"{indent}{target} = R.match_cast({format_expr(binding.value, names, namer)}, {info})")
    elif isinstance(binding.value, g.If):
        branch = binding.value
        lines.append(f"{indent}if {format_expr(branch.cond, names, namer)}:")
        _print_seq(branch.true_branch, names, namer, lines, indent + "    ", mark, target)
        lines.append(f"{indent}else:")
        _print_seq(branch.false_branch, names, namer, lines, indent + "    ", mark, target)
    elif isinstance(binding.value, g.Function):
        lines.append(f"{indent}{target} = <nested function>")
    else:
        info = binding.var.struct_info
        annot = f": {format_struct_info(info, namer)}" if info is not None else ""
        lines.append(f"{indent}{target}{annot} = {format_expr(binding.value, names, namer)}")
    if mark is not None and (binding is mark or binding.value is mark or binding.var is mark):
        lines.append(indent + "^" * max(1, len(lines[-1]) - len(indent)))


def _loop_namer(namer):
    """A callable view of the loop printer's Namer object (so both levels share one namespace)."""
    return lambda var: namer.name(var)


def print_module(mod) -> str:
    """Every graph function of a module (PrimFuncs by name only when no loop printer is present)."""
    from . import graph as g

    parts = []
    for name, func in mod.functions.items():
        if isinstance(func, g.Function):
            parts.append(print_function(func, name=name))
        else:
            try:
                from .printer import script

                parts.append(script(func))
            except Exception:
                parts.append(f"# PrimFunc {name}")
    return "\n\n".join(parts)
