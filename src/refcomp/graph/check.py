"""The graph-module checker: every call_tir agrees with its PrimFunc, and what is left to run time.

`check_module(mod)` proves, for every `call_tir(f, args, out_sinfo)`, that binding f's size vars
from the argument shapes makes f's output buffers exactly the declared out_sinfo (and the argument
ranks/dtypes match f's inputs).  It returns a report of every relation it proved, every one it
could not decide, and the runtime checks shape inference recorded in each function; a refuted
relation is a ShapeError with a counterexample.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ast import expr as tir
from ..ast.function import IRModule, PrimFunc
from ..ast.functor import substitute
from ..ast.graph import Call, Function
from ..ast.graph_script import format_expr, format_prim_expr
from ..errors import IRError, RefcompError, ShapeError
from .shape_facts import decide_equal


@dataclass
class GraphCheckReport:
    """What check_module found: proved relations, undecided ones, recorded runtime checks."""

    proved: list[str] = field(default_factory=list)
    undecided: list[str] = field(default_factory=list)
    runtime_checks: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when nothing is left to run time."""
        return not self.undecided and not self.runtime_checks

    def __str__(self) -> str:
        lines = [f"proved {len(self.proved)} call_tir shape relations"]
        lines += [f"undecided: {u}" for u in self.undecided]
        lines += [f"runtime check: {c}" for c in self.runtime_checks]
        return "\n".join(lines)


def check_module(mod: IRModule) -> GraphCheckReport:
    """Check every graph function of mod (see module docstring)."""
    report = GraphCheckReport()
    for name, func in sorted(mod.functions.items()):
        if not isinstance(func, Function):
            continue
        for condition, message in func.attrs.get("runtime_checks", ()):
            report.runtime_checks.append(f"{name}: {message} [{format_prim_expr(condition)}]")
        for block in func.body.blocks:
            for b in block.bindings:
                if isinstance(b.value, Call) and b.value.op_name == "call_tir":
                    try:
                        _check_call(mod, name, b.value, report)
                    except RefcompError as error:
                        raise error.locate(func, spot=b.value)
    return report


def _check_call(mod: IRModule, fname: str, call: Call, report: GraphCheckReport) -> None:
    gvar, *args = call.args
    callee = mod.functions.get(gvar.name)
    where = f"{fname}: {format_expr(call)}"
    if not isinstance(callee, PrimFunc):
        raise IRError(f"{where}: {gvar.name} is not a PrimFunc of the module")
    buffers = callee.buffers
    if len(buffers) != len(args) + len(call.sinfo_args):
        raise IRError(f"{where}: {gvar.name} takes {len(buffers)} buffers, the call gives "
                      f"{len(args)} inputs and {len(call.sinfo_args)} outputs")
    binding: dict = {}
    actual = [a.struct_info for a in args] + list(call.sinfo_args)
    for buf, info in zip(buffers, actual):
        if info.shape is None or len(info.shape) != len(buf.shape):
            raise IRError(f"{where}: buffer {buf.name} is {len(buf.shape)}-d, the value is {info}")
        if info.dtype is not None and info.dtype != buf.dtype:
            raise IRError(f"{where}: buffer {buf.name} holds {buf.dtype}, the value is {info}")
        for d, a in zip(buf.shape, info.shape):
            if isinstance(d, tir.Var) and d not in binding:
                binding[d] = a if a.dtype == d.dtype else a.astype(d.dtype)
    for scalar, value in zip(callee.scalar_params, call.attrs.get("tir_vars", ())):
        binding.setdefault(scalar, value)
    for buf, info in zip(buffers, actual):
        for axis, (d, a) in enumerate(zip(buf.shape, info.shape)):
            expected = substitute(d, binding)
            relation = f"{where}: {buf.name} dim {axis}: {format_prim_expr(expected)} == {format_prim_expr(a)}"
            decision = decide_equal(expected, a)
            if decision.proved:
                report.proved.append(relation)
            elif decision.disproved:
                raise ShapeError(f"{relation} does not hold", counterexample=decision.counterexample)
            else:
                report.undecided.append(relation)
