"""lower_to_vm: graph functions to VM code (registers, allocations, kernel calls).

Requires a legalized module: every call is call_tir, call_dps_packed or a call of another graph
function.  Parameters are matched (binding their size vars) on entry; each call_tir output is
allocated from its declared struct info (in its planned storage token when plan_memory ran).
"""
from __future__ import annotations

from ...ast.function import IRModule
from ...ast.dtype import storage_array
from ...ast.graph import (
    Call, Constant, ExternFunc, Function, GlobalVar, If, MatchCast, Op, PrimValue, SeqExpr, ShapeExpr, StringImm,
    Tuple, TupleGetItem, Var,
)
from ...ast.graph_struct_info import PrimStructInfo, ShapeStructInfo, TensorStructInfo, TupleStructInfo
from ...errors import BuildError
from ...runtime import vm as V
from ...runtime.graph_function import aligned_constant
from ..block_builder import moves_strings
from ..op.registry import get as get_op
from .common import graph_functions


class _Lowering:
    def __init__(self, name: str, func: Function) -> None:
        self.name = name
        self.func = func
        self.regs: dict = {}
        self.count = 0
        self.plan = dict(func.attrs.get("memory_plan", {}))

    def reg(self) -> int:
        self.count += 1
        return self.count - 1

    def lower(self) -> V.VMFunction:
        code: list = []
        for p in self.func.params:
            self.regs[p] = self.reg()
        for p in self.func.params:
            self.match(self.regs[p], p.struct_info, f"{self.name}: argument {p.name}", code)
        for bi, block in enumerate(self.func.body.blocks):
            for k, b in enumerate(block.bindings):
                self.binding(b, code, self.plan.get((bi, k)))
        result = self.value(self.func.body.body, code)
        code.append(V.Return(result))
        checks = tuple(V.Check(c, m) for c, m in self.func.attrs.get("runtime_checks", ()))
        return V.VMFunction(self.name, len(self.func.params), self.count, tuple(code),
                            tuple(p.name for p in self.func.params), checks,
                            tuple(self.func.attrs.get("storage_bytes", ())),
                            tuple(self.func.attrs.get("storage_limits", ())))

    def match(self, reg: int, info, what: str, code: list) -> None:
        if isinstance(info, TensorStructInfo):
            code.append(V.MatchShape(reg, info.shape, info.ndim, None if info.dtype is None else str(info.dtype), what))
        elif isinstance(info, ShapeStructInfo):
            code.append(V.MatchShapeValue(reg, info.values, info.ndim, what))
        elif isinstance(info, TupleStructInfo):
            for k, f in enumerate(info.fields):
                sub = self.reg()
                code.append(V.GetItem(sub, reg, k))
                self.match(sub, f, f"{what}[{k}]", code)

    def binding(self, b, code: list, token) -> None:
        dst = self.value(b.value, code, token=token)
        if isinstance(b, MatchCast):
            new = self.reg()
            code.append(V.Move(new, dst))
            self.match(new, b.struct_info, f"{self.name}: match_cast to {b.var.name}", code)
            dst = new
        self.regs[b.var] = dst

    def value(self, e, code: list, token=None) -> int:
        if isinstance(e, Var):
            if e not in self.regs:
                raise BuildError(f"lower_to_vm: {self.name}: {e.name} is used before it is defined")
            return self.regs[e]
        dst = self.reg()
        if isinstance(e, Constant):
            code.append(V.LoadConst(dst, aligned_constant(storage_array(e.array))))  # as the compiled function's
        elif isinstance(e, (ShapeExpr, PrimValue)):
            values = e.values if isinstance(e, ShapeExpr) else (e.value,)
            code.append(V.MakeShape(dst, tuple(values), scalar=isinstance(e, PrimValue)))
        elif isinstance(e, StringImm):
            code.append(V.LoadConst(dst, e.value))
        elif isinstance(e, Tuple):
            code.append(V.MakeTuple(dst, tuple(self.value(f, code) for f in e.fields)))
        elif isinstance(e, TupleGetItem):
            code.append(V.GetItem(dst, self.value(e.tuple_value, code), e.index))
        elif isinstance(e, Call):
            self.call(e, dst, code, token)
        elif isinstance(e, If):
            cond = self.value(e.cond, code)
            then_code, else_code = [], []
            then_result = self.seq(e.true_branch, then_code)
            else_result = self.seq(e.false_branch, else_code)
            code.append(V.Branch(dst, cond, tuple(then_code), then_result, tuple(else_code), else_result))
        else:
            raise BuildError(f"lower_to_vm: {self.name}: cannot lower {type(e).__name__}")
        return dst

    def seq(self, seq: SeqExpr, code: list) -> int:
        for block in seq.blocks:
            for b in block.bindings:
                self.binding(b, code, None)
        return self.value(seq.body, code)

    def call(self, call: Call, dst: int, code: list, token) -> None:
        name = call.op_name
        if name in ("call_tir", "call_dps_packed"):
            callee, *args = call.args
            arg_regs = tuple(self.value(a, code) for a in args)
            outs = []
            for info in call.sinfo_args:
                out = self.reg()
                code.append(V.Alloc(out, info.shape, str(info.dtype), token if len(call.sinfo_args) == 1 else None))
                outs.append(out)
            if name == "call_tir":
                code.append(V.CallKernel(callee.name, arg_regs, tuple(outs), tuple(call.attrs.get("tir_vars", ()))))
            else:
                code.append(V.CallPacked(callee.symbol, arg_regs, tuple(outs)))
            code.append(V.Move(dst, outs[0]) if len(outs) == 1 else V.MakeTuple(dst, tuple(outs)))
        elif name == "view":
            code.append(V.View(dst, self.value(call.args[0], code), tuple(call.struct_info.shape)))
        elif name == "tensor_to_shape":
            code.append(V.TensorToShape(dst, self.value(call.args[0], code)))
        elif isinstance(call.op, Op) and (get_op(name).host or moves_strings(name, call.args)):
            code.append(V.CallHost(dst, get_op(name).evaluate, tuple(self.value(a, code) for a in call.args),
                                   f"{self.name}: R.{name}", dict(call.attrs)))
        elif isinstance(call.op, GlobalVar):
            code.append(V.CallFunction(dst, call.op.name, tuple(self.value(a, code) for a in call.args)))
        elif isinstance(call.op, ExternFunc):
            raise BuildError(f"lower_to_vm: direct calls of {call.op.symbol} are not supported; "
                             "use R.call_dps_packed")
        else:
            raise BuildError(f"lower_to_vm: {self.name}: R.{name} was not legalized",
                             hint="run refcomp.graph.passes.legalize_ops first (graph.build does)")


def lower_to_vm(mod: IRModule) -> dict[str, V.VMFunction]:
    """VM code for every graph function of a legalized module."""
    return {name: _Lowering(name, func).lower() for name, func in graph_functions(mod)
            if not func.attrs.get("primitive")}


_ = PrimStructInfo
