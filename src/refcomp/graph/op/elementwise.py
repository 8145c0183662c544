"""Element-wise operators: unary math and activations, broadcasting binary ops, comparisons, where, clip, astype."""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ...ast import expr as tir
from ...ast.dtype import dtype as to_dtype
from ...ast.graph_struct_info import TensorStructInfo
from ...errors import IRError
from ._common import broadcast_index, call_intrin, erf_np, fconst, infer_broadcast, make_call, same_dtype, te
from .registry import register

# ----------------------------------------------------------------------------- unary

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _softplus(v):
    zero = fconst(0.0, v)
    return tir.Max(v, zero) + call_intrin("log1p", call_intrin("exp", -call_intrin("abs", v)))


def _np_softplus(x):
    return (np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))).astype(x.dtype)


def _gelu(v):
    half = fconst(0.5, v)
    return half * v * (fconst(1.0, v) + call_intrin("erf", v * fconst(1 / math.sqrt(2.0), v)))


def _np_gelu(x):
    return (0.5 * x * (1.0 + erf_np(x / np.sqrt(2.0).astype(x.dtype)))).astype(x.dtype)


def _gelu_tanh(v):
    inner = fconst(_SQRT_2_OVER_PI, v) * (v + fconst(0.044715, v) * v * v * v)
    return fconst(0.5, v) * v * (fconst(1.0, v) + call_intrin("tanh", inner))


def _np_gelu_tanh(x):
    return (0.5 * x * (1.0 + np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x ** 3)))).astype(x.dtype)


def _np_sigmoid(x):
    return (1.0 / (1.0 + np.exp(-x))).astype(x.dtype)


def _sign(v):
    zero, one = tir.const(0, v.dtype), tir.const(1, v.dtype)
    return tir.Select(tir.GT(v, zero), one, tir.Select(tir.LT(v, zero), -one, zero))


# name -> (te scalar function, numpy function, float only, result dtype override)
UNARY: dict[str, tuple[Callable, Callable, bool, str | None]] = {
    "exp": (lambda v: call_intrin("exp", v), np.exp, True, None),
    "exp2": (lambda v: call_intrin("exp2", v), np.exp2, True, None),
    "expm1": (lambda v: call_intrin("expm1", v), np.expm1, True, None),
    "log": (lambda v: call_intrin("log", v), np.log, True, None),
    "log2": (lambda v: call_intrin("log2", v), np.log2, True, None),
    "log10": (lambda v: call_intrin("log10", v), np.log10, True, None),
    "log1p": (lambda v: call_intrin("log1p", v), np.log1p, True, None),
    "sqrt": (lambda v: call_intrin("sqrt", v), np.sqrt, True, None),
    "rsqrt": (lambda v: call_intrin("rsqrt", v), lambda x: (1 / np.sqrt(x)).astype(x.dtype), True, None),
    "sin": (lambda v: call_intrin("sin", v), np.sin, True, None),
    "cos": (lambda v: call_intrin("cos", v), np.cos, True, None),
    "tan": (lambda v: call_intrin("tan", v), np.tan, True, None),
    "asin": (lambda v: call_intrin("asin", v), np.arcsin, True, None),
    "acos": (lambda v: call_intrin("acos", v), np.arccos, True, None),
    "atan": (lambda v: call_intrin("atan", v), np.arctan, True, None),
    "sinh": (lambda v: call_intrin("sinh", v), np.sinh, True, None),
    "cosh": (lambda v: call_intrin("cosh", v), np.cosh, True, None),
    "tanh": (lambda v: call_intrin("tanh", v), np.tanh, True, None),
    "asinh": (lambda v: call_intrin("asinh", v), np.arcsinh, True, None),
    "acosh": (lambda v: call_intrin("acosh", v), np.arccosh, True, None),
    "atanh": (lambda v: call_intrin("atanh", v), np.arctanh, True, None),
    "erf": (lambda v: call_intrin("erf", v), erf_np, True, None),
    "sigmoid": (lambda v: call_intrin("sigmoid", v), _np_sigmoid, True, None),
    "floor": (lambda v: call_intrin("floor", v), np.floor, True, None),
    "ceil": (lambda v: call_intrin("ceil", v), np.ceil, True, None),
    "round": (lambda v: call_intrin("nearbyint", v), np.round, True, None),
    "trunc": (lambda v: call_intrin("trunc", v), np.trunc, True, None),
    "abs": (lambda v: call_intrin("abs", v), np.abs, False, None),
    "negative": (lambda v: -v, np.negative, False, None),
    "square": (lambda v: v * v, np.square, False, None),
    "sign": (_sign, lambda x: np.sign(x).astype(x.dtype), False, None),
    "reciprocal": (lambda v: fconst(1.0, v) / v, lambda x: (1 / x).astype(x.dtype), True, None),
    "relu": (lambda v: tir.Max(v, tir.const(0, v.dtype)), lambda x: np.maximum(x, 0).astype(x.dtype), False, None),
    "gelu": (_gelu, _np_gelu, True, None),
    "gelu_tanh": (_gelu_tanh, _np_gelu_tanh, True, None),
    "silu": (lambda v: v * call_intrin("sigmoid", v), lambda x: (x * _np_sigmoid(x)).astype(x.dtype), True, None),
    "softplus": (_softplus, _np_softplus, True, None),
    "softsign": (lambda v: v / (fconst(1.0, v) + call_intrin("abs", v)),
                 lambda x: (x / (1 + np.abs(x))).astype(x.dtype), True, None),
    "mish": (lambda v: v * call_intrin("tanh", _softplus(v)),
             lambda x: (x * np.tanh(_np_softplus(x))).astype(x.dtype), True, None),
    "logical_not": (lambda v: tir.Not(v), np.logical_not, False, "bool"),
    "isnan": (lambda v: call_intrin_bool("isnan", v), np.isnan, True, "bool"),
    "isinf": (lambda v: call_intrin_bool("isinf", v), np.isinf, True, "bool"),
    "isfinite": (lambda v: call_intrin_bool("isfinite", v), np.isfinite, True, "bool"),
}


def call_intrin_bool(name: str, v: tir.PrimExpr) -> tir.PrimExpr:
    return tir.Call(name, (v,), "bool")


def _unary_infer(name: str, float_only: bool, out_dtype: str | None):
    def infer(call, ctx):
        x = ctx.tensor(0)
        if float_only and x.dtype is not None and not x.dtype.is_float:
            ctx.fail(f"expects a float tensor, got {x.dtype}", kind=IRError, hint="cast it with R.astype")
        if name == "logical_not" and x.dtype is not None and not x.dtype.is_bool:
            ctx.fail(f"expects a bool tensor, got {x.dtype}", kind=IRError)
        dtype = to_dtype(out_dtype) if out_dtype else x.dtype
        return TensorStructInfo(x.shape, dtype, x.ndim)

    return infer


def _unary_te(scalar: Callable):
    def compute(x):
        return te().compute(x.shape, lambda *i: scalar(x[i]), name="compute")

    return compute


def _unary_reference(fn: Callable):
    def reference(x):
        with np.errstate(all="ignore"):
            return np.asarray(fn(x))

    return reference


def _make_unary(name: str):
    def build(x):
        return make_call(name, x)

    build.__name__ = name
    build.__doc__ = f"Element-wise {name}."
    return build


for _name, (_scalar, _np_fn, _float_only, _out) in UNARY.items():
    register(_name, infer=_unary_infer(_name, _float_only, _out), reference=_unary_reference(_np_fn),
             legalize=_unary_te(_scalar), pattern="elementwise", doc=f"element-wise {_name}")
    globals()[_name] = _make_unary(_name)


# ----------------------------------------------------------------------------- parametrized unary

def _param_unary(name: str, scalar: Callable, reference: Callable, params: dict[str, float]):
    def infer(call, ctx):
        x = ctx.tensor(0)
        if x.dtype is not None and not x.dtype.is_float:
            ctx.fail(f"expects a float tensor, got {x.dtype}", kind=IRError)
        return x

    def compute(x, **attrs):
        values = {k: attrs.get(k, v) for k, v in params.items()}
        return te().compute(x.shape, lambda *i: scalar(x[i], **values), name="compute")

    def ref(x, **attrs):
        values = {k: attrs.get(k, v) for k, v in params.items()}
        with np.errstate(all="ignore"):
            return np.asarray(reference(x, **values)).astype(x.dtype)

    register(name, infer=infer, reference=ref, legalize=compute, pattern="elementwise", doc=name)

    def build(x, **attrs):
        return make_call(name, x, **{k: float(attrs.get(k, v)) for k, v in params.items()})

    build.__name__ = name
    build.__doc__ = f"Element-wise {name} with parameters {', '.join(params)}."
    globals()[name] = build


_param_unary("leaky_relu", lambda v, alpha: tir.Select(tir.GE(v, fconst(0, v)), v, v * fconst(alpha, v)),
             lambda x, alpha: np.where(x >= 0, x, x * alpha), {"alpha": 0.01})
_param_unary("elu", lambda v, alpha: tir.Select(tir.GT(v, fconst(0, v)), v,
                                                fconst(alpha, v) * call_intrin("expm1", v)),
             lambda x, alpha: np.where(x > 0, x, alpha * np.expm1(x)), {"alpha": 1.0})
_param_unary("selu", lambda v, alpha, gamma: fconst(gamma, v) * tir.Select(
    tir.GT(v, fconst(0, v)), v, fconst(alpha, v) * call_intrin("expm1", v)),
    lambda x, alpha, gamma: gamma * np.where(x > 0, x, alpha * np.expm1(x)),
    {"alpha": 1.6732632423543772, "gamma": 1.0507009873554805})
_param_unary("hard_sigmoid", lambda v, alpha, beta: tir.Max(fconst(0, v), tir.Min(
    fconst(1, v), fconst(alpha, v) * v + fconst(beta, v))),
    lambda x, alpha, beta: np.clip(alpha * x + beta, 0, 1), {"alpha": 0.2, "beta": 0.5})
_param_unary("hard_swish", lambda v: v * tir.Max(fconst(0, v), tir.Min(
    fconst(1, v), v * fconst(1 / 6, v) + fconst(0.5, v))),
    lambda x: x * np.clip(x / 6 + 0.5, 0, 1), {})
_param_unary("celu", lambda v, alpha: tir.Max(fconst(0, v), v) + tir.Min(
    fconst(0, v), fconst(alpha, v) * call_intrin("expm1", v / fconst(alpha, v))),
    lambda x, alpha: np.maximum(0, x) + np.minimum(0, alpha * np.expm1(x / alpha)), {"alpha": 1.0})
_param_unary("thresholded_relu", lambda v, alpha: tir.Select(tir.GT(v, fconst(alpha, v)), v, fconst(0, v)),
             lambda x, alpha: np.where(x > alpha, x, 0), {"alpha": 1.0})


# ----------------------------------------------------------------------------- binary

def _div_floor(a, b):
    if a.dtype.is_float:
        return call_intrin("floor", a / b)
    return tir.FloorDiv(a, b)


def _mod_floor(a, b):
    if a.dtype.is_float:
        return a - b * call_intrin("floor", a / b)
    return tir.FloorMod(a, b)


def _np_floor_divide(a, b):
    with np.errstate(all="ignore"):
        return np.floor_divide(a, b)


def _logical(cls):
    return lambda a, b: cls(a, b)


# name -> (te scalar fn, numpy fn, kind): kind "arith" (same dtype out), "float", "int", "compare", "logic"
BINARY: dict[str, tuple[Callable, Callable, str]] = {
    "add": (lambda a, b: a + b, np.add, "arith"),
    "subtract": (lambda a, b: a - b, np.subtract, "arith"),
    "multiply": (lambda a, b: a * b, np.multiply, "arith"),
    "divide": (lambda a, b: a / b, np.divide, "float"),
    "floor_divide": (_div_floor, _np_floor_divide, "arith"),
    "floor_mod": (_mod_floor, lambda a, b: np.mod(a, b), "arith"),
    "power": (lambda a, b: call_intrin("pow", a, b), np.power, "float"),
    "atan2": (lambda a, b: call_intrin("atan2", a, b), np.arctan2, "float"),
    "fmod": (lambda a, b: call_intrin("fmod", a, b), np.fmod, "float"),
    "maximum": (lambda a, b: tir.Max(a, b), np.maximum, "arith"),
    "minimum": (lambda a, b: tir.Min(a, b), np.minimum, "arith"),
    "equal": (lambda a, b: tir.EQ(a, b), np.equal, "compare"),
    "not_equal": (lambda a, b: tir.NE(a, b), np.not_equal, "compare"),
    "less": (lambda a, b: tir.LT(a, b), np.less, "compare"),
    "less_equal": (lambda a, b: tir.LE(a, b), np.less_equal, "compare"),
    "greater": (lambda a, b: tir.GT(a, b), np.greater, "compare"),
    "greater_equal": (lambda a, b: tir.GE(a, b), np.greater_equal, "compare"),
    "logical_and": (_logical(tir.And), np.logical_and, "logic"),
    "logical_or": (_logical(tir.Or), np.logical_or, "logic"),
    "logical_xor": (lambda a, b: tir.NE(a, b), np.logical_xor, "logic"),
}


def _binary_infer(kind: str):
    def infer(call, ctx):
        a, b = ctx.tensor(0), ctx.tensor(1)
        dtype = same_dtype(ctx, a, b)
        if dtype is not None:
            if kind == "float" and not dtype.is_float:
                ctx.fail(f"expects float operands, got {dtype}", kind=IRError,
                         hint="use R.floor_divide for integers" if ctx.op_name == "divide" else None)
            if kind == "logic" and not dtype.is_bool:
                ctx.fail(f"expects bool operands, got {dtype}", kind=IRError)
        out_dtype = to_dtype("bool") if kind in ("compare", "logic") else dtype
        return infer_broadcast(ctx, (a, b), out_dtype)

    return infer


def broadcast_compute(scalar: Callable, tensors, out_shape=None, name: str = "compute"):
    """A te compute applying scalar to broadcast operands (numpy broadcasting)."""
    shape = out_shape if out_shape is not None else _broadcast_te_shape([t.shape for t in tensors])
    ndim = len(shape)

    def body(*i):
        return scalar(*(t[broadcast_index(i, ndim, t.shape)] if len(t.shape) else t[()] for t in tensors))

    return te().compute(shape, body, name=name)


def _broadcast_te_shape(shapes):
    ndim = max(len(s) for s in shapes)
    out = []
    for k in range(ndim):
        chosen = None
        for s in shapes:
            j = len(s) - ndim + k
            if j < 0:
                continue
            d = s[j]
            if chosen is None or (isinstance(chosen, tir.IntImm) and chosen.value == 1):
                chosen = d
        out.append(chosen)
    return tuple(out)


def _binary_te(scalar: Callable):
    def compute(a, b):
        return broadcast_compute(scalar, (a, b))

    return compute


def _binary_reference(fn: Callable, kind: str):
    def reference(a, b):
        with np.errstate(all="ignore"):
            out = np.asarray(fn(a, b))
        return out if kind in ("compare", "logic") else out.astype(np.result_type(a, b))

    return reference


def _make_binary(name: str):
    def build(a, b):
        return make_call(name, a, b)

    build.__name__ = name
    build.__doc__ = f"Element-wise {name} with numpy broadcasting."
    return build


for _name, (_scalar, _np_fn, _kind) in BINARY.items():
    _pattern = "broadcast"
    register(_name, infer=_binary_infer(_kind), reference=_binary_reference(_np_fn, _kind),
             legalize=_binary_te(_scalar), pattern=_pattern, doc=f"broadcasting {_name}")
    globals()[_name] = _make_binary(_name)


# ----------------------------------------------------------------------------- where, clip, astype

def where(condition, a, b):
    """condition ? a : b element-wise, all three broadcast."""
    return make_call("where", condition, a, b)


def _where_infer(call, ctx):
    c, a, b = ctx.tensor(0, "condition"), ctx.tensor(1), ctx.tensor(2)
    if c.dtype is not None and not c.dtype.is_bool:
        ctx.fail(f"condition must be bool, got {c.dtype}", kind=IRError)
    return infer_broadcast(ctx, (c, a, b), same_dtype(ctx, a, b))


register("where", infer=_where_infer, reference=lambda c, a, b: np.where(c, a, b),
         legalize=lambda c, a, b: broadcast_compute(lambda x, y, z: tir.Select(x, y, z), (c, a, b)),
         pattern="broadcast", doc="select by a bool condition")


def clip(x, min: float, max: float):
    """Clamp x into [min, max]."""
    return make_call("clip", x, min=float(min), max=float(max))


def _clip_scalar(v, lo, hi):
    lo_c, hi_c = tir.const(lo if v.dtype.is_float else int(lo), v.dtype), tir.const(
        hi if v.dtype.is_float else int(hi), v.dtype)
    return tir.Min(tir.Max(v, lo_c), hi_c)


register("clip", infer=lambda call, ctx: ctx.tensor(0),
         reference=lambda x, min, max: np.clip(x, min, max).astype(x.dtype),
         legalize=lambda x, min, max: te().compute(x.shape, lambda *i: _clip_scalar(x[i], min, max), name="clip"),
         pattern="elementwise", doc="clamp into [min, max]")


def astype(x, dtype):
    """Convert element type (C conversion semantics; float to int truncates)."""
    return make_call("astype", x, dtype=str(to_dtype(dtype)))


def _astype_infer(call, ctx):
    x = ctx.tensor(0)
    target = to_dtype(ctx.attr("dtype"))
    for t in (x.dtype, target):
        if t is not None and (t.is_minifloat or t.is_string):
            ctx.fail(f"cannot convert {x.dtype} to {target} element by element in C",
                     kind=IRError, hint="minifloats convert with R.minifloat_encode / R.minifloat_decode"
                     if t.is_minifloat else "strings convert with the string ops")
    return TensorStructInfo(x.shape, target, x.ndim)


def _astype_scalar(v, dtype):
    target = to_dtype(dtype)
    if target.is_bool:
        return tir.NE(v, tir.const(0, v.dtype)) if not v.dtype.is_bool else v
    if target.is_sub_byte_int:  # the integer value wrapped to the narrow width, kept in int8/uint8
        wide = v.astype("int64")
        span, low = 1 << target.bits, -target.min_value() if target.is_int else 0
        return (tir.floormod(wide + low, tir.const(span, "int64")) - low).astype(target.storage)
    return v.astype(target)


def _astype_reference(x, dtype):
    from ...ast.dtype import storage_array, typed_array

    target = to_dtype(dtype)
    x = storage_array(np.asarray(x))
    with np.errstate(all="ignore"):
        if target.is_sub_byte_int:
            span, low = 1 << target.bits, -target.min_value() if target.is_int else 0
            wide = x.astype(np.int64) if x.dtype.kind != "f" else np.trunc(np.nan_to_num(x)).astype(np.int64)
            return typed_array(((wide + low) % span - low).astype(target.numpy()), target.name)
        return x.astype(target.numpy())


register("astype", infer=_astype_infer, reference=_astype_reference,
         legalize=lambda x, dtype: te().compute(x.shape, lambda *i: _astype_scalar(x[i], dtype), name="astype"),
         pattern="elementwise", doc="element type conversion")

UNARY_NAMES = tuple(UNARY) + ("leaky_relu", "elu", "selu", "hard_sigmoid", "hard_swish", "celu",
                              "thresholded_relu")
BINARY_NAMES = tuple(BINARY)
