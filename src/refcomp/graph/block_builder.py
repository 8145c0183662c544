"""BlockBuilder: builds graph functions in normal form, inferring struct info as it goes.

    bb = BlockBuilder()
    n = SizeVar("n", "int64")
    x = Var("x", tensor((n, 4), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(op.exp(x))
            out = bb.emit_output(op.add(y, x))
        bb.emit_func_output(out)
    mod = bb.get()

Every emitted call gets its struct info from its operator's rule; nested calls are bound to
fresh vars first (A-normal form); size vars defined by parameters and `match_cast` are tracked, so
a shape naming an undefined var is an error where it is made, and the function's return info is
coarsened to what its caller can name.
"""
from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any, Iterator, Sequence

from ..ast import expr as tir
from ..ast.function import IRModule, PrimFunc
from ..ast.functor import free_vars, substitute
from ..ast.graph import (
    BindingBlock, Call, Constant, DataflowBlock, DataflowVar, Expr, ExternFunc, Function, GlobalVar, If,
    MatchCast, Op, PrimValue, SeqExpr, ShapeExpr, StringImm, Tuple, TupleGetItem, Var, VarBinding,
)
from ..ast.graph_struct_info import (
    FuncStructInfo, ObjectStructInfo, StructInfo, TensorStructInfo, TupleStructInfo, definable_vars,
    erase_to_well_defined, shape_vars,
)
from ..errors import IRError, RefcompError
from .infer import InferContext, RuntimeCheck, lca

LEAVES = (Var, Constant, ShapeExpr, PrimValue, StringImm, GlobalVar, ExternFunc, Op)


class _FunctionFrame:
    def __init__(self, name: str, params: Sequence[Var], attrs: dict) -> None:
        self.name = name
        self.params = tuple(params)
        self.attrs = dict(attrs)
        self.blocks: list[BindingBlock] = []
        self.bindings: list = []
        self.in_dataflow = False
        self.defined_vars: dict[tir.Var, None] = {}
        self.runtime_checks: list[RuntimeCheck] = []
        self.output: Expr | None = None
        for p in self.params:
            for v in definable_vars(p.struct_info):
                self.defined_vars.setdefault(v, None)


class BlockBuilder:
    """Builds graph functions binding by binding, normalizing and inferring as it goes."""

    def __init__(self, mod: IRModule | None = None) -> None:
        self._functions: dict[str, Any] = dict(mod.functions) if mod is not None else {}
        self._module_attrs = dict(mod.attrs) if mod is not None else {}
        self._frames: list[_FunctionFrame] = []
        self._counter: dict[str, int] = {}

    # ------------------------------------------------------------------ scopes

    @contextlib.contextmanager
    def function(self, name: str, params: Sequence[Var], attrs: dict | None = None,
                 pure: bool = True) -> Iterator[None]:
        """Open a graph function; close it with `emit_func_output` inside the with."""
        for p in params:
            if not isinstance(p, Var) or p.struct_info is None:
                raise IRError(f"function {name}: parameter {p!r} must be a graph Var with struct info")
        frame = _FunctionFrame(name, params, attrs or {})
        frame.attrs.setdefault("global_symbol", name)
        frame.pure = pure
        self._frames.append(frame)
        try:
            yield
        finally:
            self._frames.pop()
        if frame.output is None:
            raise IRError(f"function {name}: emit_func_output was never called")

    @contextlib.contextmanager
    def dataflow(self) -> Iterator[None]:
        """A dataflow block: pure bindings to DataflowVars; results leave through emit_output."""
        frame = self._frame()
        if frame.in_dataflow:
            raise IRError("dataflow blocks do not nest")
        self._end_block()
        frame.in_dataflow = True
        try:
            yield
        finally:
            self._end_block()
            frame.in_dataflow = False

    def _frame(self) -> _FunctionFrame:
        if not self._frames:
            raise IRError("BlockBuilder: no open function; use `with bb.function(name, params):`")
        return self._frames[-1]

    def _end_block(self) -> None:
        frame = self._frame()
        if frame.bindings:
            kind = DataflowBlock if frame.in_dataflow else BindingBlock
            frame.blocks.append(kind(tuple(frame.bindings)))
            frame.bindings = []

    # ------------------------------------------------------------------ emitting

    def _fresh_name(self, hint: str) -> str:
        count = self._counter.get(hint, 0)
        self._counter[hint] = count + 1
        return f"{hint}{count}"

    def emit(self, expr: Expr, name_hint: str = "") -> Var:
        """Bind expr (normalized) to a new var: a DataflowVar inside a dataflow block."""
        frame = self._frame()
        value = self.normalize(expr)
        cls = DataflowVar if frame.in_dataflow else Var
        var = cls(name_hint or self._fresh_name("lv" if frame.in_dataflow else "gv"), value.struct_info)
        frame.bindings.append(VarBinding(var, value))
        return var

    def emit_output(self, expr: Expr, name_hint: str = "") -> Var:
        """Bind expr to a plain Var that stays visible after the dataflow block."""
        frame = self._frame()
        if not frame.in_dataflow:
            raise IRError("emit_output is only allowed inside a dataflow block")
        value = self.normalize(expr)
        var = Var(name_hint or self._fresh_name("gv"), value.struct_info)
        frame.bindings.append(VarBinding(var, value))
        return var

    def match_cast(self, value: Expr, struct_info: StructInfo, name_hint: str = "") -> Var:
        """Bind value, checked at run time against struct_info; bare size vars in it become defined."""
        frame = self._frame()
        value = self.normalize(value)
        for v in shape_vars(struct_info):
            if v not in frame.defined_vars and v not in definable_vars(struct_info):
                raise IRError(f"match_cast: {v.name} is used in {struct_info} but never defined; "
                              "a new size var must appear as a bare dimension")
        for v in definable_vars(struct_info):
            frame.defined_vars.setdefault(v, None)
        cls = DataflowVar if frame.in_dataflow else Var
        var = cls(name_hint or self._fresh_name("lv" if frame.in_dataflow else "gv"), struct_info)
        frame.bindings.append(MatchCast(var, value, struct_info))
        return var

    def emit_func_output(self, output: Expr | Sequence[Expr]) -> GlobalVar:
        """Finish the current function with `output` as its result; returns its GlobalVar."""
        frame = self._frame()
        if frame.in_dataflow:
            raise IRError("emit_func_output must come after the dataflow block is closed")
        if isinstance(output, (list, tuple)):
            output = Tuple(tuple(self.normalize(o) for o in output))
        output = self.normalize(output)
        if isinstance(output, DataflowVar):
            raise IRError(f"function {frame.name}: result {output.name} is a DataflowVar; emit_output it")
        self._end_block()
        frame.output = output
        param_vars = [v for p in frame.params for v in definable_vars(p.struct_info)]
        ret = erase_to_well_defined(output.struct_info, param_vars)
        attrs = dict(frame.attrs)
        checks = tuple(frame.runtime_checks)
        if checks:
            attrs["runtime_checks"] = tuple((c.condition, c.message) for c in checks)
        body = SeqExpr(tuple(frame.blocks), output)
        func = Function(frame.params, body, ret, getattr(frame, "pure", True), attrs)
        self._functions[frame.name] = func
        return GlobalVar(frame.name, func.struct_info)

    def add_func(self, func: PrimFunc | Function, name_hint: str) -> GlobalVar:
        """Add a function to the module under a fresh name (reusing a structurally equal PrimFunc)."""
        if isinstance(func, PrimFunc):
            from ..ast.structural import structural_equal

            for existing_name, existing in self._functions.items():
                if isinstance(existing, PrimFunc) and structural_equal(existing, func):
                    return GlobalVar(existing_name)
        name = name_hint
        k = 0
        while name in self._functions:
            k += 1
            name = f"{name_hint}{k}"
        if isinstance(func, PrimFunc) and func.name != name:
            func = func.with_(name=name)
        self._functions[name] = func
        return GlobalVar(name, func.struct_info if isinstance(func, Function) else None)

    def get(self) -> IRModule:
        """The module built so far."""
        if self._frames:
            raise IRError("BlockBuilder.get: a function is still open")
        return IRModule(dict(self._functions), self._module_attrs)

    @property
    def defined_vars(self) -> list[tir.Var]:
        """Size vars defined so far in the open function."""
        return list(self._frame().defined_vars)

    # ------------------------------------------------------------------ normalization

    def normalize(self, expr: Expr) -> Expr:
        """expr with struct info filled in; nested non-leaf arguments are bound to vars first."""
        if isinstance(expr, (list, tuple)):
            expr = Tuple(tuple(expr))
        if isinstance(expr, Var):
            if expr.struct_info is None:
                raise IRError(f"var {expr.name} has no struct info")
            return expr
        if isinstance(expr, LEAVES):
            return expr
        if isinstance(expr, Tuple):
            fields = tuple(self._as_leaf(f) for f in expr.fields)
            return Tuple(fields)
        if isinstance(expr, TupleGetItem):
            value = self._as_leaf(expr.tuple_value)
            info = value.struct_info
            if not isinstance(info, TupleStructInfo):
                raise IRError(f"indexing {value} of non-tuple type {info}")
            if not 0 <= expr.index < len(info.fields):
                raise IRError(f"tuple index {expr.index} out of range for {info}")
            return TupleGetItem(value, expr.index, info.fields[expr.index])
        if isinstance(expr, Call):
            return self._normalize_call(expr)
        if isinstance(expr, (If, SeqExpr, Function)):
            if expr.struct_info is None:
                raise IRError(f"{type(expr).__name__} must be built with struct info")
            return expr
        raise IRError(f"cannot normalize {type(expr).__name__}")

    def _as_leaf(self, expr: Expr) -> Expr:
        if isinstance(expr, LEAVES):
            return self.normalize(expr)
        if isinstance(expr, Tuple):
            return self.normalize(expr)
        return self.emit(expr)

    def _normalize_call(self, call: Call) -> Call:
        args = tuple(self._as_leaf(a) for a in call.args)
        call = call.with_(args=args) if args != call.args else call
        info = self.infer_call(call)
        return call.with_(struct_info=info)

    def infer_call(self, call: Call) -> StructInfo:
        """The struct info of a call, recording runtime checks in the open function.

        An error shows the open function up to the call, the call marked.
        """
        frame = self._frames[-1] if self._frames else None
        try:
            return self._infer_call(call, frame)
        except RefcompError as error:
            if frame is not None:
                error.locate(self._function_so_far(frame, call))
            raise

    def _function_so_far(self, frame: _FunctionFrame, call: Call) -> Function | None:
        """The open function's bindings, then call bound to the name it would get (for errors)."""
        try:
            hint = "lv" if frame.in_dataflow else "gv"
            var = (DataflowVar if frame.in_dataflow else Var)(f"{hint}{self._counter.get(hint, 0)}")
            kind = DataflowBlock if frame.in_dataflow else BindingBlock
            blocks = tuple(frame.blocks) + (kind(tuple(frame.bindings) + (VarBinding(var, call),)),)
            return Function(frame.params, SeqExpr(blocks, var), None, getattr(frame, "pure", True), frame.attrs)
        except Exception:  # a half-built function that cannot be shown: the error shows the call alone
            return None

    def _infer_call(self, call: Call, frame: _FunctionFrame | None) -> StructInfo:
        ctx = InferContext(call, call)
        if isinstance(call.op, Op):
            from .op.registry import get

            info = get(call.op.name).infer(call, ctx)
        elif isinstance(call.op, GlobalVar):
            info = self._infer_global_call(call, ctx)
        elif isinstance(call.op, ExternFunc):
            info = call.sinfo_args[0] if call.sinfo_args else ObjectStructInfo()
        else:
            callee_info = call.op.struct_info
            info = callee_info.ret if isinstance(callee_info, FuncStructInfo) else ObjectStructInfo()
        if frame is not None:
            frame.runtime_checks.extend(ctx.runtime_checks)
            undefined = [v for v in shape_vars(info) if v not in frame.defined_vars]
            if undefined:
                names = ", ".join(v.name for v in undefined)
                raise IRError(f"R.{call.op_name or call.op}: result {info} names size var(s) {names} that "
                              "no parameter or match_cast defines", ir=call,
                              hint="bind them with R.match_cast first")
        return info

    def _infer_global_call(self, call: Call, ctx: InferContext) -> StructInfo:
        callee = self._functions.get(call.op.name)
        if isinstance(callee, PrimFunc):
            raise IRError(f"{call.op.name} is a PrimFunc: call it through R.call_tir", ir=call)
        if not isinstance(callee, Function):
            info = call.op.struct_info
            return info.ret if isinstance(info, FuncStructInfo) else ObjectStructInfo()
        return derive_call_ret(callee, call, ctx)


def derive_call_ret(callee: Function, call: Call, ctx: InferContext) -> StructInfo:
    """The return info of calling callee with call's arguments: param size vars bound to arg dims."""
    if len(call.args) != len(callee.params):
        ctx.fail(f"{call.op.name} takes {len(callee.params)} arguments, got {len(call.args)}", kind=IRError)
    mapping: dict[tir.Var, tir.PrimExpr] = {}
    for param, arg in zip(callee.params, call.args):
        _bind_dims(param.struct_info, arg.struct_info, mapping, ctx, param.name)
    ret = substitute(callee.ret_struct_info, mapping) if mapping else callee.ret_struct_info
    return erase_to_well_defined(ret, [v for v in shape_vars(ret) if v not in _callee_vars(callee)])


def _callee_vars(callee: Function) -> set:
    return {v for p in callee.params for v in definable_vars(p.struct_info)}


def _bind_dims(pattern: StructInfo, actual: StructInfo, mapping: dict, ctx: InferContext, what: str) -> None:
    from .infer import base_check

    if base_check(erase_to_well_defined(pattern, []), actual) == "fail":
        ctx.fail(f"argument {what}: expected {pattern}, got {actual}", kind=IRError)
    if isinstance(pattern, TensorStructInfo) and isinstance(actual, TensorStructInfo):
        if pattern.shape is None or actual.shape is None:
            return
        for p, a in zip(pattern.shape, actual.shape):
            if isinstance(p, tir.Var) and p not in mapping:
                mapping[p] = a
            else:
                ctx.require_equal(substitute(p, mapping), a, f"argument {what}")
    elif isinstance(pattern, TupleStructInfo) and isinstance(actual, TupleStructInfo):
        for p, a in zip(pattern.fields, actual.fields):
            _bind_dims(p, a, mapping, ctx, what)


def make_if(bb_or_none: Any, cond: Expr, true_branch: SeqExpr, false_branch: SeqExpr,
            defined: Sequence[tir.Var]) -> If:
    """An If whose info is the join of its branches, coarsened to the vars defined outside."""
    info = lca(erase_to_well_defined(true_branch.struct_info, defined),
               erase_to_well_defined(false_branch.struct_info, defined))
    return If(cond, true_branch, false_branch, info)


# ----------------------------------------------------------------------------- te legalization

def call_te(bb: BlockBuilder, compute, *args: Expr, primfunc_name_hint: str = "te_func", **attrs: Any) -> Call:
    """Run a te computation on placeholders shaped like args; add its PrimFunc; return the call_tir.

    Tensor args become placeholders with the args' symbolic shapes (the same size vars), so the
    PrimFunc's buffers are shaped in the graph's own variables.  Size vars that no buffer has as a
    bare dimension are passed to the kernel as trailing scalar parameters (`tir_vars`).
    """
    from .. import te
    from .op.base import call_tir

    placeholders = []
    for k, arg in enumerate(args):
        info = arg.struct_info
        if not isinstance(info, TensorStructInfo) or info.shape is None or info.dtype is None:
            raise IRError(f"{primfunc_name_hint}: argument {k} needs a known shape and dtype to be legalized, "
                          f"got {info}", hint="bind the shape first with R.match_cast")
        name = arg.name if isinstance(arg, Var) else f"arg{k}"
        placeholders.append(te.placeholder(info.shape, _kernel_dtype(info.dtype, primfunc_name_hint, k),
                                           _c_name(name)))
    result = compute(*placeholders, **attrs)
    outs = list(result) if isinstance(result, (list, tuple)) else [result]
    tensors = placeholders + outs
    bare = {d for t in tensors for d in t.shape if isinstance(d, tir.Var)}
    extra: dict[tir.Var, None] = {}
    for t in tensors:
        for d in t.shape:
            for v in free_vars(d):
                if v not in bare:
                    extra.setdefault(v, None)
    for v in _attr_vars(attrs):  # a symbolic attribute (arange's start) reaches the kernel as a scalar
        if v not in bare:
            extra.setdefault(v, None)
    func = te.create_prim_func(tensors + list(extra), name=primfunc_name_hint)
    gvar = bb.add_func(func, primfunc_name_hint)
    out_sinfo = [TensorStructInfo(tuple(t.shape), t.dtype) for t in outs]
    call = call_tir(gvar, list(args), out_sinfo if len(out_sinfo) > 1 else out_sinfo[0], tuple(extra) or None)
    info = out_sinfo[0] if len(out_sinfo) == 1 else TupleStructInfo(tuple(out_sinfo))
    return call.with_(struct_info=info)


# ops that only move elements (or convert them bit by bit) take tensors of storage-only element
# types: their kernels copy the storage (int8/uint8) values unchanged
# (not pad, full_like, tril or scatter: they write values of their own, which would land in the
# storage type unconverted)
STORAGE_OPS = frozenset({
    "reshape", "permute_dims", "expand_dims", "squeeze", "flatten", "concat", "split", "strided_slice",
    "broadcast_to", "tile", "repeat", "flip", "take", "embedding", "gather_elements", "gather_nd",
    "where", "astype", "minifloat_encode", "minifloat_decode",
})


def moves_strings(op_name: str, args) -> bool:
    """Whether a call moves the elements of a string tensor (reshape, concat, take ...): the VM runs
    it on the host through the op's numpy reference, as no kernel takes strings."""
    if op_name not in STORAGE_OPS:
        return False
    for arg in args:
        info = getattr(arg, "struct_info", None)
        if isinstance(info, TensorStructInfo) and info.dtype is not None and info.dtype.is_string:
            return True
    return False


def _kernel_dtype(dtype, op_name: str, index: int):
    """The element type a kernel sees for a graph tensor of dtype (storage-only types: their storage);
    an IRError for an op that would compute on a storage-only type."""
    if not dtype.is_storage_only:
        return dtype
    if dtype.is_string or op_name not in STORAGE_OPS:
        what = "strings" if dtype.is_string else dtype
        raise IRError(f"{op_name}: argument {index} has element type {dtype}, which this operator does not take "
                      f"(nothing computes in {what})",
                      hint="convert it first (astype to float32 or int32)" if not dtype.is_string else None)
    return dtype.storage


def _attr_vars(value: Any) -> list[tir.Var]:
    """The size vars in the integer expressions of attribute values, in first-seen order."""
    found: list[tir.Var] = []
    if isinstance(value, tir.PrimExpr):
        return list(free_vars(value))
    items = value.values() if isinstance(value, Mapping) else value if isinstance(value, (list, tuple)) else ()
    for item in items:
        for v in _attr_vars(item):
            if v not in found:
                found.append(v)
    return found


def _c_name(name: str) -> str:
    import re

    text = re.sub(r"[^A-Za-z0-9_]", "_", name) or "arg"
    return "_" + text if text[0].isdigit() else text


def emit_te(bb: BlockBuilder, compute, *args: Expr, primfunc_name_hint: str = "te_func", **attrs: Any) -> Var:
    """call_te, then bind the call."""
    args = tuple(bb.normalize(a) for a in args)
    return bb.emit(call_te(bb, compute, *args, primfunc_name_hint=primfunc_name_hint, **attrs))


BlockBuilder.call_te = call_te  # type: ignore[attr-defined]
BlockBuilder.emit_te = emit_te  # type: ignore[attr-defined]
