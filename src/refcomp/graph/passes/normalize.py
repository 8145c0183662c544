"""normalize: give every binding its struct info (inferring what the text left out) and check annotations.

The graph-level counterpart of Relax's normalizer, run first by `graph.build`:

- a call written in script form (`R.reshape(x, (n * k,))`, `R.sum(x, 1)`: shapes, scalars and
  strings passed positionally) is rebuilt through the operator's constructor into its canonical
  form (`R.reshape(x, shape=(n * k,))`, see call_forms); a call nested in another's arguments is
  bound to a fresh var first (A-normal form);
- functions are normalized callees first, so a call of another graph function sees its
  inferred return info;
- every call's struct info is (re)inferred with the operator rules; a var bound without an
  annotation (`h = R.matmul(x, w)`) gets the inferred info (a new Var, substituted in every use);
- a var with an annotation keeps it, checked against the inferred info: a static contradiction
  (rank, dtype, kind) is an IRError, dims the prover refutes for every size are a ShapeError with a
  counterexample, and dims it cannot decide become run-time checks;
- a `match_cast` whose pattern can never match its value (constant dims differ, rank or dtype
  differ) is an error at build time; otherwise the VM checks it when it runs;
- relations the shape rules could not decide are recorded in the function's `runtime_checks`
  attribute, which the VM evaluates as soon as their size vars are bound.
"""
from __future__ import annotations

from typing import Any

from ...ast import expr as tir
from ...ast.function import IRModule
from ...ast.graph import (
    BindingBlock, Call, DataflowBlock, DataflowVar, ExternFunc, Function, GlobalVar, If, MatchCast, Op, SeqExpr,
    Tuple, TupleGetItem, Var, VarBinding,
)
from ...ast.graph_script import format_prim_expr
from ...ast.graph_struct_info import (
    ObjectStructInfo, PrimStructInfo, ShapeStructInfo, StructInfo, TensorStructInfo, TupleStructInfo,
    definable_vars, erase_to_well_defined,
)
from ...errors import IRError, RefcompError, ShapeError
from ..block_builder import BlockBuilder
from ..infer import InferContext, RuntimeCheck, base_check, lca
from ..shape_facts import decide_equal, prove
from .call_forms import canonical_attrs, canonical_call, is_script_arg
from .common import graph_functions, replace_vars


def normalize(mod: IRModule) -> IRModule:
    """The module with every binding's struct info inferred or checked (see the module docstring)."""
    bb = BlockBuilder(mod)
    for name in _callees_first(mod):
        func = mod.functions[name]
        new = _FunctionNormalizer(bb, func).run()
        if new is not func:
            mod = mod.with_function(name, new)
            bb = BlockBuilder(mod)  # later callers see this function's inferred return info
    return mod


def _callees_first(mod: IRModule) -> list[str]:
    """Graph function names, each after the graph functions it calls (so their return info is known)."""
    order: list[str] = []
    state: dict[str, str] = {}

    def visit(name: str) -> None:
        if state.get(name):
            return  # done, or on the current path (recursion: its declared return info is used)
        state[name] = "visiting"
        for callee in _called_functions(mod.functions[name]):
            if isinstance(mod.functions.get(callee), Function):
                visit(callee)
        state[name] = "done"
        order.append(name)

    for name, _ in graph_functions(mod):
        visit(name)
    return order


def _called_functions(func: Function) -> list[str]:
    names: list[str] = []

    def walk_seq(seq: SeqExpr) -> None:
        for block in seq.blocks:
            for b in block.bindings:
                walk(b.value)
        walk(seq.body)

    def walk(e) -> None:
        if isinstance(e, Call):
            if isinstance(e.op, GlobalVar):
                names.append(e.op.name)
            for a in e.args:
                walk(a)
        elif isinstance(e, Tuple):
            for f in e.fields:
                walk(f)
        elif isinstance(e, If):
            walk_seq(e.true_branch)
            walk_seq(e.false_branch)

    walk_seq(func.body)
    return names


class _FunctionNormalizer:
    def __init__(self, bb: BlockBuilder, func: Function) -> None:
        self.bb = bb
        self.func = func
        self.mapping: dict[Var, Var] = {}
        self.checks: list[RuntimeCheck] = []
        self.defined: dict[tir.Var, None] = {}
        self.pending: list[VarBinding] = []  # nested calls bound ahead of the binding in progress
        self.in_dataflow = False
        self.count = 0
        for p in func.params:
            for v in definable_vars(p.struct_info):
                self.defined.setdefault(v, None)

    def run(self) -> Function:
        func = self.func
        body = self.seq(func.body)
        ret = func.ret_struct_info
        param_vars = [v for p in func.params for v in definable_vars(p.struct_info)]
        if isinstance(ret, ObjectStructInfo) and body.struct_info is not None:
            ret = erase_to_well_defined(body.struct_info, param_vars)
        elif body.struct_info is not None:
            if base_check(ret, body.struct_info) == "fail":
                raise IRError(f"normalize: the function returns {ret} but its body has {body.struct_info}",
                              ir=func, spot=func.body)
            self.check_annotation(ret, body.struct_info, "the return value", func)
        attrs = func.attrs
        known = {(str(c), m) for c, m in attrs.get("runtime_checks", ())}
        fresh = [c for c in self.checks if (str(c.condition), c.message) not in known]
        if fresh:
            attrs = dict(attrs)
            attrs["runtime_checks"] = tuple(attrs.get("runtime_checks", ())) + tuple(
                dict.fromkeys((c.condition, c.message) for c in fresh))
        if body is func.body and ret is func.ret_struct_info and attrs is func.attrs:
            return func
        return func.with_(body=body, ret_struct_info=ret, attrs=attrs)

    # ------------------------------------------------------------------ structure
    def seq(self, seq: SeqExpr) -> SeqExpr:
        blocks = tuple(self.block(b) for b in seq.blocks)
        outer = self.pending, self.in_dataflow
        self.pending, self.in_dataflow = [], False
        try:
            result = self.value(seq.body, seq, leaf=True)  # `return R.exp(x)`: the call is bound first
            if self.pending and blocks and type(blocks[-1]) is BindingBlock:
                blocks = blocks[:-1] + (BindingBlock(blocks[-1].bindings + tuple(self.pending)),)
            elif self.pending:
                blocks += (BindingBlock(tuple(self.pending)),)
        finally:
            self.pending, self.in_dataflow = outer
        if result is seq.body and len(blocks) == len(seq.blocks) and all(
                a is b for a, b in zip(blocks, seq.blocks)) and seq.struct_info is not None:
            return seq
        return SeqExpr(blocks, result, result.struct_info)

    def block(self, block: BindingBlock) -> BindingBlock:
        outer = self.pending, self.in_dataflow
        self.pending, self.in_dataflow = [], isinstance(block, DataflowBlock)
        bindings = []
        try:
            for b in block.bindings:
                new = self.binding(b)
                bindings += self.pending
                bindings.append(new)
                self.pending = []
        finally:
            self.pending, self.in_dataflow = outer
        if len(bindings) == len(block.bindings) and all(a is b for a, b in zip(bindings, block.bindings)):
            return block
        return type(block)(tuple(bindings))

    def leaf(self, expr):
        """An argument in A-normal form: a nested call is bound to a fresh var first."""
        return self.bind_nested(expr) if isinstance(expr, Call) else self._value(expr)

    def bind_nested(self, call: Call) -> Var:
        """A call nested in another expression, bound to a fresh var ahead of the binding in progress."""
        value = self._value(call)
        self.count += 1
        var = (DataflowVar if self.in_dataflow else Var)(f"{call.op_name or 'call'}_{self.count}",
                                                          value.struct_info)
        self.pending.append(VarBinding(var, value))
        return var

    def binding(self, b):
        value = self.value(b.value, b)
        info = value.struct_info
        if isinstance(b, MatchCast):
            self.check_match_cast(b, info)
            for v in definable_vars(b.struct_info):
                self.defined.setdefault(v, None)
            return b if value is b.value else b.with_(value=value)
        var = b.var
        if var.struct_info is None:
            if info is None:
                raise IRError(f"normalize: cannot infer the struct info of {var.name}", ir=self.func, spot=b)
            var = var.with_(struct_info=info)
            self.mapping[b.var] = var
        elif info is not None:
            if base_check(var.struct_info, info) == "fail":
                raise IRError(f"normalize: {var.name} is annotated {var.struct_info} but its value has {info}",
                              ir=self.func, spot=b)
            self.check_annotation(var.struct_info, info, var.name, b)
        if var is b.var and value is b.value:
            return b
        return VarBinding(var, value)

    # ------------------------------------------------------------------ values
    def value(self, expr, where, leaf: bool = False):
        """expr with vars renamed and struct info filled in (errors shown at `where` in the function)."""
        expr = replace_vars(expr, self.mapping)
        try:
            return self.leaf(expr) if leaf else self._value(expr)
        except RefcompError as error:
            if error.ir is None or isinstance(error.ir, Call):  # a rewritten call: show the written one
                error.ir, error.spot = None, None
                error.locate(self.func, spot=where.value if hasattr(where, "value") else where)
            raise

    def _value(self, expr):
        if isinstance(expr, Call):
            args = tuple(self.leaf(a) for a in expr.args)
            if any(a is not b for a, b in zip(args, expr.args)):
                expr = expr.with_(args=args)
            if isinstance(expr.op, Op) and expr.op.name not in ("call_tir", "call_dps_packed"):
                script_form = any(is_script_arg(a) for a in expr.args)
                expr = canonical_call(expr) if script_form else canonical_attrs(expr)
            return expr.with_(struct_info=self.infer(expr))
        if isinstance(expr, Tuple):
            fields = tuple(self.leaf(f) for f in expr.fields)
            infos = tuple(f.struct_info for f in fields)
            if any(i is None for i in infos):
                return expr
            return Tuple(fields, TupleStructInfo(infos))
        if isinstance(expr, TupleGetItem):
            value = self.leaf(expr.tuple_value)
            info = value.struct_info
            if not isinstance(info, TupleStructInfo):
                raise IRError(f"indexing {value!s} of non-tuple type {info}", ir=expr)
            if not 0 <= expr.index < len(info.fields):
                raise IRError(f"tuple index {expr.index} out of range for {info}", ir=expr)
            field = info.fields[expr.index]
            if value is expr.tuple_value and expr.struct_info == field:
                return expr
            return TupleGetItem(value, expr.index, field)
        if isinstance(expr, If):
            cond = self._value(expr.cond)
            true_branch, false_branch = self.seq(expr.true_branch), self.seq(expr.false_branch)
            defined = list(self.defined)
            info = lca(erase_to_well_defined(true_branch.struct_info, defined),
                       erase_to_well_defined(false_branch.struct_info, defined))
            return If(cond, true_branch, false_branch, info)
        return expr

    def infer(self, call: Call) -> StructInfo:
        ctx = InferContext(call, call)
        if isinstance(call.op, Op):
            from ..op.registry import get

            info = get(call.op.name).infer(call, ctx)
        elif isinstance(call.op, GlobalVar):
            info = self.bb._infer_global_call(call, ctx)
        elif isinstance(call.op, ExternFunc):
            info = call.sinfo_args[0] if call.sinfo_args else ObjectStructInfo()
        else:
            return self.bb.infer_call(call)
        self.checks.extend(ctx.runtime_checks)
        return info

    # ------------------------------------------------------------------ checks
    def check_annotation(self, declared: StructInfo, inferred: StructInfo, what: str, where: Any) -> None:
        """Dims of an annotation against the inferred ones: refuted -> ShapeError, undecided -> run time."""
        for a, b in _dim_pairs(declared, inferred):
            decision = decide_equal(a, b)
            if decision.proved:
                continue
            relation = f"{format_prim_expr(a)} == {format_prim_expr(b)}"
            if decision.disproved and (decision.counterexample == {} or prove(tir.Not(tir.EQ(a, b))).proved):
                raise ShapeError(f"normalize: {what} is annotated {declared} but its value has {inferred}: "
                                 f"{relation} never holds", counterexample=decision.counterexample or None,
                                 ir=self.func, spot=where,
                                 hint="if the value is only known at run time, use R.match_cast")
            self.checks.append(RuntimeCheck(tir.EQ(a, b), f"{what}: annotated dim {relation}"))

    def check_match_cast(self, b: MatchCast, info: StructInfo | None) -> None:
        if info is None:
            return
        pattern = erase_to_well_defined(b.struct_info, list(self.defined))
        if base_check(pattern, info) == "fail" or any(
                decide_equal(x, y).disproved and decide_equal(x, y).counterexample == {}
                for x, y in _dim_pairs(b.struct_info, info)):
            raise ShapeError(f"R.match_cast: {b.var.name}: the value has {info}, which never matches "
                             f"{b.struct_info}", ir=self.func, spot=b)


def _dim_pairs(a: StructInfo, b: StructInfo):
    """Corresponding dims of two infos of the same kind and rank (nothing where either is unknown)."""
    if isinstance(a, TensorStructInfo) and isinstance(b, TensorStructInfo):
        if a.shape is not None and b.shape is not None and len(a.shape) == len(b.shape):
            yield from zip(a.shape, b.shape)
    elif isinstance(a, ShapeStructInfo) and isinstance(b, ShapeStructInfo):
        if a.values is not None and b.values is not None and len(a.values) == len(b.values):
            yield from zip(a.values, b.values)
    elif isinstance(a, PrimStructInfo) and isinstance(b, PrimStructInfo):
        if a.value is not None and b.value is not None and a.dtype.is_integer and b.dtype.is_integer:
            yield a.value, b.value
    elif isinstance(a, TupleStructInfo) and isinstance(b, TupleStructInfo) and len(a.fields) == len(b.fields):
        for x, y in zip(a.fields, b.fields):
            yield from _dim_pairs(x, y)
