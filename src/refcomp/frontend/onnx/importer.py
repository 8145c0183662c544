"""The ONNX graph walker: inputs and initializers, node conversion, import-time constant folding."""
from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Callable

import numpy as np

from ...ast import SizeVar
from ...ast.graph import Constant, Expr, PrimValue, ShapeExpr, Tuple, TupleGetItem, Var
from ...ast.graph_struct_info import TensorStructInfo, TupleStructInfo
from ...errors import IRError, RefcompError, ShapeError
from ...graph import BlockBuilder
from ...graph.op.registry import get as get_op

MAX_CONSTANT_ELEMENTS = 1 << 28  # a constant tensor larger than this is refused before it is allocated
MAX_FOLD_ELEMENTS = 1 << 22  # a call on constants with a larger result is left to run time, not folded

CONVERTERS: dict[str, Callable] = {}
CONVERTER_DOMAINS: dict[str, str] = {}  # op type -> its domain, where that is not the default one
SHAPE_AWARE: set[str] = set()  # op types whose converters take shape values (ShapeExpr, PrimValue) as they are


def converter(*op_types: str, domain: str = "", shape_values: bool = False):
    """Register a converter fn(ctx, node, inputs, attrs) -> Expr | list[Expr] for ONNX op types.

    A converter registered with shape_values=True receives symbolic shape values unchanged and
    computes on their entries where it can; every other converter receives them as int64 tensors.
    """
    def add(fn):
        for t in op_types:
            CONVERTERS[t] = fn
            if domain:
                CONVERTER_DOMAINS[t] = domain
            if shape_values:
                SHAPE_AWARE.add(t)
            else:
                SHAPE_AWARE.discard(t)
        return fn

    return add


def supported_ops() -> list[str]:
    """ONNX op types the importer converts."""
    return sorted(CONVERTERS)


class ImportError_(IRError):
    """An ONNX node that cannot be imported (unsupported op, attribute or input)."""


class ImportShapeError(ImportError_, ShapeError):
    """An ONNX node whose operand shapes contradict each other or a declared dim."""


class Context:
    """What a converter may use: the builder, constant folding, and the node for error messages."""

    def __init__(self, bb: BlockBuilder, opset: int, opsets: dict | None = None) -> None:
        self.bb = bb
        self.opset = opset
        self.opsets = dict(opsets or {"": opset})  # domain -> version
        self.node = None
        self.env: dict | None = None  # the ONNX names in scope (subgraphs see the enclosing ones)
        self.expanding: list = []  # the nodes whose function bodies are being imported, outermost first

    def fail(self, message: str, kind: type | None = None) -> None:
        node = self.node
        where = f"node {node.name or '(unnamed)'} ({node.op_type})" if node is not None else "model"
        within = "".join(f" in the expansion of node {n.name or '(unnamed)'} ({n.op_type})"
                         for n in reversed(self.expanding))
        text = f"onnx import: {where}{within}: {message}"
        raise (ImportShapeError if kind is not None and issubclass(kind, ShapeError) else ImportError_)(text)

    def tensor(self, value: Expr) -> Expr:
        """A shape value as the int64 tensor holding its entries (other values unchanged)."""
        from . import shape_values

        return shape_values.as_tensor(self, value)

    def import_nodes(self, nodes, env: dict) -> None:
        """Convert `nodes` in order, binding their outputs in env (ONNX name -> Expr)."""
        outer, self.env = self.env, env
        try:
            self._import_nodes(nodes, env)
        finally:
            self.env = outer

    def _import_nodes(self, nodes, env: dict) -> None:
        for node in nodes:
            self.node = node
            domain = "" if node.domain == "ai.onnx" else node.domain
            inputs = [env.get(i) if i else None for i in node.input]
            for i, value in zip(node.input, inputs):
                if i and value is None:
                    self.fail(f"input {i} is not defined")
            convert = CONVERTERS.get(node.op_type)
            if convert is not None and CONVERTER_DOMAINS.get(node.op_type, "") == domain:
                if node.op_type not in SHAPE_AWARE:
                    inputs = [self.tensor(v) if v is not None else None for v in inputs]
                try:
                    result = convert(self, node, inputs, attributes(node))
                except ImportError_:
                    raise
                except RefcompError as exc:  # a shape rule refuted by the node's operands: name the node
                    self.fail(f"{type(exc).__name__}: {exc}", kind=type(exc))
                except (ValueError, TypeError, KeyError, IndexError, ArithmeticError) as exc:
                    # a malformed node (missing attribute, unsupported element type...): name it
                    self.fail(f"{type(exc).__name__}: {exc}")
                self._bind(node, result, env)
                continue
            self._expand(node, domain, inputs, env)

    def _expand(self, node, domain: str, inputs: list, env: dict) -> None:
        from .functions import function_body

        version = self.opsets.get(domain)
        if version is None:
            self.fail(f"domain {node.domain!r} is not supported")
        body = function_body(node, version, [None if v is None else v.struct_info for v in inputs])
        if body is None:
            of = f" of domain {node.domain!r}" if domain else ""
            self.fail(f"op type {node.op_type}{of} is not supported by the importer")
        nodes, body_opset = body
        saved = self.opset, dict(self.opsets)
        self.expanding.append(node)
        self.opset = self.opsets[""] = body_opset
        try:
            self.import_nodes(nodes, env)
        finally:
            self.expanding.pop()
            self.opset, self.opsets = saved
            self.node = node

    def _bind(self, node, result, env: dict) -> None:
        results = result if isinstance(result, (list, tuple)) else [result]
        if isinstance(result, Expr) and isinstance(result.struct_info, TupleStructInfo) and len(node.output) > 1:
            results = [self.emit(TupleGetItem(result, k)) if not isinstance(result, Tuple) else result.fields[k]
                       for k in range(len(node.output))]
        for out_name, value in zip(node.output, results):
            if out_name:
                env[out_name] = value

    def emit(self, call: Expr) -> Expr:
        """Normalize and bind a call; calls on constants are evaluated now (shape arithmetic)."""
        from ...ast.graph import Call

        if isinstance(call, Call) and any(isinstance(a, (ShapeExpr, PrimValue)) for a in call.args) \
                and getattr(call, "op_name", None) not in ("call_tir", "call_dps_packed"):
            call = call.with_(args=tuple(self.tensor(a) for a in call.args))
        if isinstance(call, Call) and any(isinstance(a, Call) for a in call.args):
            # nested calls first, through emit, so constant sub-expressions fold too
            call = call.with_(args=tuple(self.emit(a) if isinstance(a, Call) else a for a in call.args))
        value = self.bb.normalize(call)
        name = getattr(value, "op_name", None)
        if name:
            self._check_element_types(name, value.args)
        if name and all(isinstance(a, Constant) for a in value.args) and name not in ("call_tir", "call_dps_packed") \
                and _static_result(value.struct_info) and not _symbolic_attrs(value.attrs) \
                and _elements(value.struct_info) <= MAX_FOLD_ELEMENTS:
            info = get_op(name)
            result = info.evaluate([np.array(a.array) for a in value.args], value.attrs)
            if isinstance(result, tuple):
                return Tuple(tuple(Constant(np.asarray(r)) for r in result))
            expected = value.struct_info
            array = np.asarray(result)
            if isinstance(expected, TensorStructInfo) and expected.dtype is not None:
                array = _typed_constant(array, expected.dtype)
            return Constant(array)
        return self.bb.emit(value)

    def _check_element_types(self, name: str, args) -> None:
        """An op given a tensor of a storage-only element type it does not take fails here,
        naming the node (kernels never compute on minifloats, sub-byte integers or strings)."""
        from ...graph.block_builder import STORAGE_OPS

        for arg in args:
            info = getattr(arg, "struct_info", None)
            dtype = info.dtype if isinstance(info, TensorStructInfo) else None
            if dtype is None or not dtype.is_storage_only:
                continue
            info_op = get_op(name)
            if info_op.host or name in ("call_tir", "call_dps_packed") or name in STORAGE_OPS:
                continue
            self.fail(f"{name} does not take tensors of element type {dtype}"
                      + (" (string tensors go through the string ops only)" if dtype.is_string else
                         "; convert it first (Cast to float32 or int32)"))

    def constant(self, value: Expr | None, what: str) -> np.ndarray:
        """The value of an input that must be known at import time (shapes, axes, pads)."""
        if isinstance(value, Constant):
            return np.array(value.array)
        self.fail(f"{what} must be a constant known at import time")

    def info(self, value: Expr) -> TensorStructInfo:
        info = value.struct_info
        if not isinstance(info, TensorStructInfo):
            self.fail(f"expected a tensor input, got {info}")
        return info

    def static_shape(self, value: Expr) -> tuple:
        shape = self.info(value).shape
        if shape is None:
            self.fail("the input shape must be known")
        return shape


def _static_result(info) -> bool:
    """Whether a call's result has only literal dims (a call without tensor arguments, like `full`
    over a symbolic shape, is not an import-time constant)."""
    from ...graph.shape_facts import const_value

    if isinstance(info, TensorStructInfo):
        return info.shape is not None and all(const_value(d) is not None for d in info.shape)
    if isinstance(info, TupleStructInfo):
        return all(_static_result(f) for f in info.fields)
    return True


def _elements(info) -> int:
    """The element count of a static tensor (or the largest tuple field)."""
    from ...graph.shape_facts import const_value

    if isinstance(info, TensorStructInfo):
        return int(np.prod([const_value(d) for d in info.shape], dtype=object)) if info.shape else 1
    if isinstance(info, TupleStructInfo):
        return max((_elements(f) for f in info.fields), default=0)
    return 0


def tensor_array(proto, fail: Callable[[str], None]) -> np.ndarray:
    """The array of a TensorProto; `fail(message)` (which raises) when it claims more than
    MAX_CONSTANT_ELEMENTS elements or its data cannot be read as its dims say."""
    from onnx import numpy_helper

    dims = [int(d) for d in proto.dims]
    count = int(np.prod(dims, dtype=object)) if dims else 1
    if any(d < 0 for d in dims) or count > MAX_CONSTANT_ELEMENTS:
        fail(f"a constant of shape {tuple(dims)} ({count} elements) is larger than the "
             f"{MAX_CONSTANT_ELEMENTS} elements allowed")
    try:
        return np.asarray(numpy_helper.to_array(proto))
    except Exception as exc:  # data that does not fill the dims, unknown element types, missing external files
        fail(f"cannot read its data: {type(exc).__name__}: {exc}")


def _initializer_failure(name: str) -> Callable[[str], None]:
    def fail(message: str) -> None:
        raise ImportError_(f"onnx import: initializer {name}: {message}")

    return fail


def _symbolic_attrs(value) -> bool:
    """Whether an attribute value mentions a size var (an `arange` up to `seq` is not a constant)."""
    from ...ast import expr as tir
    from ...ast.functor import free_vars

    if isinstance(value, tir.PrimExpr):
        return bool(free_vars(value))
    if isinstance(value, Mapping):
        return any(_symbolic_attrs(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_symbolic_attrs(v) for v in value)
    return False


def _storage_dtype(dtype) -> np.dtype:
    """The numpy dtype of a folded constant: bfloat16 keeps its own (ml_dtypes) type, since a
    constant's type is read off its array and its bytes are the bit patterns kernels expect."""
    if dtype.name == "bfloat16":
        from onnx import helper, TensorProto

        return np.dtype(helper.tensor_dtype_to_np_dtype(TensorProto.BFLOAT16))
    return dtype.numpy()


def _typed_constant(array: np.ndarray, dtype) -> np.ndarray:
    """A folded array in the form whose element type is `dtype` (minifloats and sub-byte integers
    as ml_dtypes arrays, strings as object arrays), as a Constant reads its type off its array."""
    from ...ast.dtype import storage_array, typed_array

    if dtype.is_storage_only:
        return typed_array(storage_array(array), dtype.name) if not dtype.is_string else storage_array(array)
    return array.astype(_storage_dtype(dtype))


def _onnx_dtype(elem_type: int) -> np.dtype:
    from onnx import helper

    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))


def _check_shape_dict(graph, shape_dict: dict | None) -> None:
    """ImportError_ unless every shape_dict entry names a graph input and agrees with what the model
    declares of it: its rank, and its fixed dims (a symbolic dim may be given any size or name)."""
    if not shape_dict:
        return
    initializers = {t.name for t in graph.initializer}
    inputs = {vi.name: vi for vi in graph.input if vi.name not in initializers}
    for name, dims in shape_dict.items():
        if name not in inputs:
            raise ImportError_(f"onnx import: shape_dict names {name!r}, which is no input of the model "
                               f"(inputs: {', '.join(inputs) or 'none'})")
        if not isinstance(dims, (list, tuple)) or not all(isinstance(d, (int, str)) for d in dims):
            raise ImportError_(f"onnx import: shape_dict[{name!r}] must be a tuple of ints and dim names, "
                               f"got {dims!r}")
        ttype = inputs[name].type.tensor_type
        if not ttype.HasField("shape"):
            continue
        declared = [int(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in ttype.shape.dim]
        given = tuple(dims)
        wrong_rank = len(given) != len(declared)
        if wrong_rank or any(isinstance(d, int) and isinstance(g, int) and g != d for g, d in zip(given, declared)):
            shown = "(" + ", ".join(str(d) for d in declared) + ")"
            raise ImportError_(f"onnx import: shape_dict gives input {name} the shape {given}, but the model declares "
                               f"{shown}" + (f": {len(declared)} dims, not {len(given)}" if wrong_rank else ""))


def _input_info(value_info, shape_dict, size_vars) -> TensorStructInfo:
    ttype = value_info.type.tensor_type
    name = value_info.name
    from ...ast.dtype import dtype as to_dtype

    dtype = to_dtype(_onnx_dtype(ttype.elem_type))
    if shape_dict and name in shape_dict:
        dims = [d if isinstance(d, int) else size_vars.setdefault(d, SizeVar(d, "int64")) for d in shape_dict[name]]
        return TensorStructInfo(tuple(dims), dtype)
    if not ttype.HasField("shape"):
        raise ImportError_(f"onnx import: input {name} has no shape; pass it in shape_dict")
    dims = []
    for k, d in enumerate(ttype.shape.dim):
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        else:
            label = d.dim_param or f"{name}_dim{k}"
            label = "".join(c if c.isalnum() or c == "_" else "_" for c in label)
            dims.append(size_vars.setdefault(label, SizeVar(label, "int64")))
    return TensorStructInfo(tuple(dims), dtype)


def attributes(node) -> dict[str, Any]:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def from_onnx(model, shape_dict: dict | None = None, name: str = "main", const_inputs: dict | None = None):
    """Import an ONNX model into an IRModule whose `name` function computes the graph outputs.

    const_inputs ({input name: array}) specializes graph inputs to fixed values: they become
    constants (needed where an input feeds a shape, axes or pads operand) and are not parameters.
    """
    try:
        import onnx
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError("refcomp.frontend.onnx needs the onnx package: pip install 'refcomp[onnx]'",
                                  name="onnx") from exc

    source = f" {os.fspath(model)!r}" if isinstance(model, (str, os.PathLike)) else ""
    if isinstance(model, (str, os.PathLike)):
        try:
            model = onnx.load(os.fspath(model))
        except Exception as exc:  # protobuf decode errors, missing files
            raise ImportError_(f"onnx import: cannot read model {os.fspath(model)!r}: {type(exc).__name__}: {exc}") \
                from None
    elif isinstance(model, bytes):
        try:
            model = onnx.load_from_string(model)
        except Exception as exc:
            raise ImportError_(f"onnx import: the bytes are not an ONNX model: {type(exc).__name__}: {exc}") from None
    if not isinstance(model, onnx.ModelProto):
        raise ImportError_(f"onnx import: expected a ModelProto or a path, got {type(model).__name__}")
    graph = model.graph
    if not graph.output:
        # protobuf reads an empty file (and some other bytes) as an empty ModelProto without complaint
        raise ImportError_(f"onnx import: the model{source} has no graph outputs: an empty file, or not an "
                           f"ONNX model")
    _check_shape_dict(graph, shape_dict)
    opsets = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
    opset = opsets.get("", 13)
    initializers = {t.name: tensor_array(t, _initializer_failure(t.name)) for t in graph.initializer}
    size_vars: dict[str, SizeVar] = {}
    params = []
    env: dict[str, Expr] = {}
    const_inputs = dict(const_inputs or {})
    for vi in graph.input:
        if vi.name in initializers:
            continue
        if vi.name in const_inputs:
            env[vi.name] = Constant(np.asarray(const_inputs[vi.name]))
            continue
        if not vi.type.HasField("tensor_type"):
            raise ImportError_(f"onnx import: input {vi.name} is not a tensor (sequences/optionals are unsupported)")
        try:
            info = _input_info(vi, shape_dict, size_vars)
        except ValueError as exc:  # an element type refcomp does not have
            raise ImportError_(f"onnx import: input {vi.name}: {exc}") from None
        var = Var(_safe(vi.name), info)
        params.append(var)
        env[vi.name] = var
    for key, array in initializers.items():
        env[key] = Constant(np.asarray(array))
    bb = BlockBuilder()
    ctx = Context(bb, opset, opsets)
    with bb.function(name, params):
        with bb.dataflow():
            ctx.import_nodes(graph.node, env)
            outputs = []
            for vi in graph.output:
                if vi.name not in env:
                    raise ImportError_(f"onnx import: graph output {vi.name} is never computed")
                value = env[vi.name]
                outputs.append(bb.emit_output(value))
        bb.emit_func_output(outputs[0] if len(outputs) == 1 else Tuple(tuple(outputs)))
    return bb.get()


def _safe(name: str) -> str:
    text = "".join(c if c.isalnum() or c == "_" else "_" for c in name) or "input"
    return "_" + text if text[0].isdigit() else text
