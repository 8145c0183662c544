"""The torch.export graph walker: placeholders, size vars with their ranges, node conversion, outputs."""
from __future__ import annotations

import operator
from typing import Any, Callable

import numpy as np

from ...ast import SizeVar
from ...ast.graph import Constant, Expr, Tuple, TupleGetItem, Var
from ...ast.graph_struct_info import TensorStructInfo, TupleStructInfo, as_dim
from ...errors import IRError
from ...graph import BlockBuilder
from . import symbolic

CONVERTERS: dict[str, Callable] = {}

# Nodes that only assert facts torch already checked while tracing; they compute nothing.
IGNORED = frozenset({
    "aten._assert_tensor_metadata.default", "aten._assert_scalar.default", "aten.sym_constrain_range_for_size.default",
    "aten.sym_constrain_range.default", "aten._assert_async.msg", "aten._assert_async.default",
    "aten._check_is_size.default",
})

# Ops whose result shape depends on the data: refcomp's shapes are known before the run.
DATA_DEPENDENT = frozenset({
    "aten.nonzero.default", "aten.masked_select.default", "aten.unique.default", "aten._unique2.default",
    "aten.unique_consecutive.default", "aten.item.default", "aten._local_scalar_dense.default",
})


def converter(*targets: str):
    """Register fn(ctx, node, args, kwargs) -> Expr | list[Expr] for ATen overloads ("aten.add.Tensor")."""
    def add(fn):
        for t in targets:
            if t in CONVERTERS:
                raise ValueError(f"converter for {t} is registered twice")
            CONVERTERS[t] = fn
        return fn

    return add


def supported_ops() -> list[str]:
    """The ATen overloads the importer converts."""
    return sorted(CONVERTERS)


class TorchImportError(IRError):
    """A torch.export node that cannot be imported (unsupported op, argument or construct)."""


def torch_dtype_name(dtype) -> str:
    """refcomp's name for a torch dtype (torch.float32 -> "float32")."""
    name = str(dtype).removeprefix("torch.")
    if name not in ("float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool"):
        raise TypeError(f"dtype {dtype} is not supported")
    return name


class Context:
    """What a converter may use: the builder, argument helpers and the node for error messages."""

    def __init__(self, bb: BlockBuilder, size_vars: dict) -> None:
        self.bb = bb
        self.size_vars = size_vars
        self.node = None

    def fail(self, message: str):
        node = self.node
        where = f"node {node.name} ({node.target})" if node is not None else "program"
        raise TorchImportError(f"torch.export import: {where}: {message}")

    def emit(self, call: Expr) -> Expr:
        return self.bb.emit(call)

    def info(self, value: Expr) -> TensorStructInfo:
        info = getattr(value, "struct_info", None)
        if not isinstance(info, TensorStructInfo):
            self.fail(f"expected a tensor operand, got {value!r}")
        return info

    def dtype(self, value: Expr) -> str:
        return str(self.info(value).dtype)

    def shape(self, value: Expr) -> tuple:
        shape = self.info(value).shape
        if shape is None:
            self.fail("the operand's shape must be known")
        return tuple(shape)

    def ndim(self, value: Expr) -> int:
        return len(self.shape(value))

    def out_meta(self, index: int | None = None):
        val = self.node.meta.get("val")
        if index is not None and isinstance(val, (list, tuple)):
            val = val[index]
        return val

    def out_dtype(self, index: int | None = None) -> str:
        """The dtype torch recorded for the node's (index-th) result."""
        val = self.out_meta(index)
        if val is None or not hasattr(val, "dtype"):
            self.fail("the node carries no tensor metadata (export with torch.export.export)")
        try:
            return torch_dtype_name(val.dtype)
        except TypeError as exc:
            self.fail(str(exc))

    def out_shape(self, index: int | None = None) -> tuple:
        """The node's (index-th) result shape as refcomp dims (ints and size-var expressions)."""
        val = self.out_meta(index)
        return tuple(self.dim(d) for d in val.shape)

    def dim(self, value):
        """An int, SymInt or PrimExpr as a shape dimension (int where literal)."""
        return symbolic.to_dim(value, self.size_vars, self.fail)

    def scalar(self, value, dtype: str) -> Constant:
        """A Python number as a 0-d constant of dtype."""
        if dtype == "bfloat16":
            self.fail("bfloat16 scalars are not supported")
        return Constant(np.asarray(value, dtype=np.dtype(dtype)))

    def cast(self, value: Expr, dtype: str) -> Expr:
        from ...graph import op

        if self.dtype(value) == dtype:
            return value
        if isinstance(value, Constant):
            return Constant(np.asarray(value.array).astype(np.dtype(dtype)))
        return self.emit(op.astype(value, dtype))

    def tensor(self, value, dtype: str) -> Expr:
        """A tensor operand of dtype: tensors are cast, numbers and size expressions become 0-d tensors."""
        if isinstance(value, Expr):
            return self.cast(value, dtype)
        if isinstance(value, (bool, int, float)):
            return self.scalar(value, dtype)
        return self.cast(symbolic.as_tensor(self, value), dtype)


def _user_input(node, size_vars, fail) -> Var:
    import torch

    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        fail(f"input {node.name} is not a tensor ({type(val).__name__}); only tensor inputs are supported")
    dims = []
    for d in val.shape:
        dim = symbolic.to_dim(d, size_vars, fail)
        if not isinstance(dim, (int, SizeVar)):
            fail(f"input {node.name}: dimension {d} is an expression; only plain symbols or ints are supported")
        dims.append(dim)
    try:
        dtype = torch_dtype_name(val.dtype)
    except TypeError as exc:
        fail(f"input {node.name}: {exc}")
    return Var(_safe(node.name), TensorStructInfo(tuple(dims), dtype))


def _constant(tensor, what: str, fail) -> Constant:
    import torch

    tensor = tensor.detach().cpu()
    if tensor.dtype == torch.bfloat16:
        fail(f"{what}: bfloat16 weights are not supported")
    try:
        torch_dtype_name(tensor.dtype)
    except TypeError as exc:
        fail(f"{what}: {exc}")
    return Constant(np.ascontiguousarray(tensor.numpy()))


def from_exported_program(ep, name: str = "main", decompose: bool = False):
    """Import a torch.export ExportedProgram into an IRModule whose `name` function computes its outputs.

    Parameters, buffers and lifted constants become graph constants; each user input becomes a
    parameter.  A dynamic dim's symbol (`s0`) becomes one size var for the whole function, named
    after the torch Dim it was exported with (`Dim("batch")` gives the size var `batch`), and its
    range from `ep.range_constraints` is recorded in the function's `tir_var_lower_bound` and
    `tir_var_upper_bound` attributes (the memory planner sizes buffers from the upper bounds).
    decompose=True first runs `ep.run_decompositions()` (the core ATen opset).
    """
    try:
        from torch.export import ExportedProgram
        from torch.export.graph_signature import OutputKind
    except ImportError:  # pragma: no cover - torch is an optional dependency
        raise TorchImportError("torch.export import needs torch (pip install 'refcomp[torch]')") from None

    def fail(message):
        raise TorchImportError(f"torch.export import: {message}")

    if not isinstance(ep, ExportedProgram):
        fail(f"expected a torch.export.ExportedProgram, got {type(ep).__name__}")
    if decompose:
        ep = ep.run_decompositions()
    size_vars: dict[str, SizeVar] = {sym: SizeVar(name, "int64") for sym, name in symbolic.dim_names(ep).items()}
    env: dict[Any, Any] = {}
    params = _bind_inputs(ep, env, size_vars, fail)
    for spec in ep.graph_signature.output_specs:
        if spec.kind != OutputKind.USER_OUTPUT:
            fail(f"output {spec.arg}: {spec.kind.name} outputs (in-place updates of buffers or inputs) "
                 "are not supported; export the model in eval mode without mutation")
    lower, upper = symbolic.ranges(ep.range_constraints)
    attrs = {}
    used = {sym: var.name for sym, var in size_vars.items()}
    if upper:
        attrs["tir_var_upper_bound"] = {used[k]: v for k, v in upper.items() if k in used}
    if lower:
        attrs["tir_var_lower_bound"] = {used[k]: v for k, v in lower.items() if k in used}
    bb = BlockBuilder()
    ctx = Context(bb, size_vars)
    with bb.function(name, params, attrs={k: v for k, v in attrs.items() if v}):
        with bb.dataflow():
            outputs = None
            for node in ep.graph.nodes:
                if node.op == "placeholder":
                    continue
                ctx.node = node
                if node.op == "output":
                    outputs = [_output(ctx, env, a) for a in node.args[0]]
                    continue
                if node.op != "call_function":
                    ctx.fail(f"{node.op} nodes are not supported")
                env[node] = _convert(ctx, node, env)
            results = [bb.emit_output(v) for v in outputs]
        bb.emit_func_output(results[0] if len(results) == 1 else Tuple(tuple(results)))
    return bb.get()


def _bind_inputs(ep, env: dict, size_vars: dict, fail) -> list[Var]:
    """Bind each placeholder: user inputs become parameters, weights and buffers constants."""
    import torch
    from torch.export.graph_signature import InputKind

    state = dict(ep.state_dict)
    state.update(getattr(ep, "constants", {}) or {})
    params: list[Var] = []
    placeholders = [n for n in ep.graph.nodes if n.op == "placeholder"]
    for spec, node in zip(ep.graph_signature.input_specs, placeholders):
        if spec.kind == InputKind.USER_INPUT:
            var = _user_input(node, size_vars, fail)
            params.append(var)
            env[node] = var
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            if spec.target not in state:
                fail(f"input {node.name}: {spec.kind.name.lower()} {spec.target} has no value in the program")
            value = state[spec.target]
            if not isinstance(value, torch.Tensor):
                fail(f"input {node.name}: constant {spec.target} is a {type(value).__name__}, not a tensor")
            env[node] = _constant(value, f"input {node.name}", fail)
        else:
            fail(f"input {node.name}: inputs of kind {spec.kind.name} are not supported")
    return params


def _output(ctx, env, arg) -> Expr:
    value = env.get(arg) if hasattr(arg, "op") else arg
    if not isinstance(value, Expr):
        ctx.fail(f"output {arg} is not a tensor")
    return value


def _convert(ctx: Context, node, env):
    import torch

    target = node.target
    key = str(target)
    if key in IGNORED:
        return None
    val = node.meta.get("val")
    if isinstance(val, (torch.SymInt, torch.SymBool, torch.SymFloat)) or (
            target in symbolic.SCALAR_FUNCTIONS and not isinstance(val, torch.Tensor)):
        # shape arithmetic (sym_size, mul, floordiv...): torch recorded the result as an expression
        # over the input symbols, which is converted directly
        return symbolic.scalar_value(ctx, val)
    if target is operator.getitem:
        values, index = env[node.args[0]], node.args[1]
        if not isinstance(values, (list, tuple)):
            ctx.fail("getitem of a value that is not a tuple")
        return values[index]
    fn = CONVERTERS.get(key)
    in_place = fn is None and _functional_name(key) in CONVERTERS
    if in_place:  # x.add_(y): the functional op, whose result then stands for x in later nodes
        fn = CONVERTERS[_functional_name(key)]
    if key in DATA_DEPENDENT:
        ctx.fail(f"ATen op {key} has a data-dependent result shape, which refcomp does not support")
    if fn is None:
        ctx.fail(f"ATen op {key} is not supported by the importer")
    args = _resolve(ctx, node.args, env)
    kwargs = {k: _resolve(ctx, v, env) for k, v in node.kwargs.items()}
    try:
        result = fn(ctx, node, args, kwargs)
    except TorchImportError:
        raise
    except IRError as exc:
        raise TorchImportError(f"torch.export import: node {node.name} ({key}): {exc}") from None
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, NotImplementedError) as exc:
        ctx.fail(f"{type(exc).__name__}: {exc}")
    result = _check_result(ctx, node, result)
    if in_place:
        mutated = node.args[0]
        if mutated.op == "placeholder":
            ctx.fail("in-place updates of inputs, parameters or buffers are not supported")
        env[mutated] = result
    return result


def _functional_name(key: str) -> str:
    """aten.add_.Tensor -> aten.add.Tensor (the out-of-place form of an in-place overload)."""
    parts = key.split(".")
    if len(parts) == 3 and parts[1].endswith("_") and not parts[1].startswith("_"):
        return f"{parts[0]}.{parts[1][:-1]}.{parts[2]}"
    return key


def _check_result(ctx, node, result):
    """The converted value has torch's rank and dtype (a converter bug otherwise); where its shape is
    not visibly torch's (`min(s0, 64)` where torch knows `s0 <= 32`), it is cast to torch's shape,
    checked at run time."""
    import torch

    val = node.meta.get("val")
    values = result if isinstance(result, (list, tuple)) else [result]
    metas = val if isinstance(val, (list, tuple)) else [val]
    out = []
    for k, (value, meta) in enumerate(zip(values, metas)):
        if isinstance(meta, torch.Tensor) and isinstance(value, Expr):
            info = ctx.info(value)
            if info.shape is not None and len(info.shape) != meta.dim():
                ctx.fail(f"internal error: converted to rank {len(info.shape)}, torch has {meta.dim()}")
            if str(info.dtype) != torch_dtype_name(meta.dtype):
                ctx.fail(f"internal error: converted to dtype {info.dtype}, torch has {meta.dtype}")
            expected = tuple(as_dim(d) for d in ctx.out_shape(k if isinstance(val, (list, tuple)) else None))
            if info.shape is not None and not all(_same_dim(a, b) for a, b in zip(info.shape, expected)):
                value = ctx.bb.match_cast(value, TensorStructInfo(expected, info.dtype))
        out.append(value)
    return out if isinstance(result, (list, tuple)) else out[0]


def _same_dim(a, b) -> bool:
    from ...graph.shape_facts import const_value, simplify

    return const_value(simplify(as_dim(a) - as_dim(b))) == 0


def _resolve(ctx, value, env):
    if isinstance(value, (list, tuple)):
        return type(value)(_resolve(ctx, v, env) for v in value)
    if hasattr(value, "op") and hasattr(value, "target"):  # an fx Node
        if env.get(value) is None:
            ctx.fail(f"uses {value.name}, a result the importer does not compute "
                     "(pooling indices or normalization statistics)")
        return env[value]
    return value


def _safe(name: str) -> str:
    text = "".join(c if c.isalnum() or c == "_" else "_" for c in name) or "input"
    return "_" + text if text[0].isdigit() else text


def multi(ctx, result: Expr, count: int) -> list:
    """The fields of a tuple-valued call as separate values."""
    if isinstance(result, Tuple):
        return list(result.fields)
    info = result.struct_info
    if not isinstance(info, TupleStructInfo):
        return [result]
    return [ctx.emit(TupleGetItem(result, k)) for k in range(count)]
