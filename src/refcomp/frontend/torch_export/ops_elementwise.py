"""Element-wise ATen ops: math, activations, arithmetic with torch's type promotion, comparisons, where."""
from __future__ import annotations

import numpy as np

from ...ast.graph import Expr
from ...graph import op
from .importer import converter

UNARY = {
    "abs": "abs", "acos": "acos", "acosh": "acosh", "asin": "asin", "asinh": "asinh", "atan": "atan",
    "atanh": "atanh", "ceil": "ceil", "cos": "cos", "cosh": "cosh", "erf": "erf", "exp": "exp", "exp2": "exp2",
    "expm1": "expm1", "floor": "floor", "log": "log", "log10": "log10", "log1p": "log1p", "log2": "log2",
    "neg": "negative", "reciprocal": "reciprocal", "relu": "relu", "rsqrt": "rsqrt", "sigmoid": "sigmoid",
    "sign": "sign", "sgn": "sign", "sin": "sin", "sinh": "sinh", "sqrt": "sqrt", "tan": "tan", "tanh": "tanh",
    "trunc": "trunc", "silu": "silu", "mish": "mish", "hardswish": "hard_swish", "square": "square",
    "round": "round",
}
PREDICATES = {"isnan": "isnan", "isinf": "isinf", "isfinite": "isfinite"}
COMPARE = {"eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal", "gt": "greater",
           "ge": "greater_equal"}
LOGICAL = {"logical_and": "logical_and", "logical_or": "logical_or", "logical_xor": "logical_xor"}
BITWISE = {"bitwise_and": "bitwise_and", "bitwise_or": "bitwise_or", "bitwise_xor": "bitwise_xor",
           "__and__": "bitwise_and", "__or__": "bitwise_or", "__xor__": "bitwise_xor"}


def float_input(ctx, x):
    """x in the node's result dtype (integer inputs of float functions are converted first)."""
    return ctx.tensor(x, ctx.out_dtype())


def _unary(name):
    def convert(ctx, node, args, kwargs):
        return ctx.emit(getattr(op, name)(float_input(ctx, args[0])))
    return convert


for _aten, _name in UNARY.items():
    converter(f"aten.{_aten}.default")(_unary(_name))


def _predicate(name):
    def convert(ctx, node, args, kwargs):
        x = args[0]
        if not ctx.info(x).dtype.is_float:  # integers are never nan or inf
            is_finite = name == "isfinite"
            return ctx.emit(op.full_like(x, 1.0 if is_finite else 0.0, dtype="bool"))
        return ctx.emit(getattr(op, name)(x))
    return convert


for _aten, _name in PREDICATES.items():
    converter(f"aten.{_aten}.default")(_predicate(_name))


@converter("aten.logical_not.default")
def _logical_not(ctx, node, args, kwargs):
    return ctx.emit(op.logical_not(ctx.tensor(args[0], "bool")))


@converter("aten.bitwise_not.default")
def _bitwise_not(ctx, node, args, kwargs):
    x = args[0]
    if ctx.dtype(x) == "bool":
        return ctx.emit(op.logical_not(x))
    return ctx.emit(op.bitwise_not(x))


# ----------------------------------------------------------------------------- arithmetic

def promoted(ctx, a, b) -> str:
    """torch's result dtype of a binary op on a and b (tensors, numbers or size expressions)."""
    import torch

    def as_torch(v):
        if isinstance(v, Expr):
            return torch.empty((1,) * ctx.ndim(v), dtype=getattr(torch, ctx.dtype(v)))
        return v if isinstance(v, (bool, int, float)) else 1

    from .importer import torch_dtype_name
    return torch_dtype_name(torch.result_type(as_torch(a), as_torch(b)))


def _binary(name, dtype_of=None):
    def convert(ctx, node, args, kwargs):
        a, b = args[0], args[1]
        dtype = promoted(ctx, a, b) if dtype_of == "promote" else ctx.out_dtype()
        return ctx.emit(getattr(op, name)(ctx.tensor(a, dtype), ctx.tensor(b, dtype)))
    return convert


def _alpha(ctx, b, alpha, dtype):
    if alpha is None or alpha == 1:
        return ctx.tensor(b, dtype)
    return ctx.emit(op.multiply(ctx.tensor(b, dtype), ctx.scalar(alpha, dtype)))


@converter("aten.add.Tensor", "aten.add.Scalar")
def _add(ctx, node, args, kwargs):
    dtype = ctx.out_dtype()
    alpha = kwargs.get("alpha", args[2] if len(args) > 2 else None)
    a, b = ctx.tensor(args[0], dtype), _alpha(ctx, args[1], alpha, dtype)
    if dtype == "bool":
        return ctx.emit(op.logical_or(a, b))
    return ctx.emit(op.add(a, b))


@converter("aten.sub.Tensor", "aten.sub.Scalar")
def _sub(ctx, node, args, kwargs):
    dtype = ctx.out_dtype()
    alpha = kwargs.get("alpha", args[2] if len(args) > 2 else None)
    return ctx.emit(op.subtract(ctx.tensor(args[0], dtype), _alpha(ctx, args[1], alpha, dtype)))


@converter("aten.rsub.Scalar", "aten.rsub.Tensor")
def _rsub(ctx, node, args, kwargs):
    dtype = ctx.out_dtype()
    alpha = kwargs.get("alpha", args[2] if len(args) > 2 else None)
    return ctx.emit(op.subtract(ctx.tensor(args[1], dtype), _alpha(ctx, args[0], alpha, dtype)))


@converter("aten.mul.Tensor", "aten.mul.Scalar")
def _mul(ctx, node, args, kwargs):
    dtype = ctx.out_dtype()
    a, b = ctx.tensor(args[0], dtype), ctx.tensor(args[1], dtype)
    return ctx.emit(op.logical_and(a, b) if dtype == "bool" else op.multiply(a, b))


@converter("aten.div.Tensor", "aten.div.Scalar", "aten.true_divide.Tensor")
def _div(ctx, node, args, kwargs):
    dtype = ctx.out_dtype()
    return ctx.emit(op.divide(ctx.tensor(args[0], dtype), ctx.tensor(args[1], dtype)))


@converter("aten.div.Tensor_mode", "aten.div.Scalar_mode")
def _div_mode(ctx, node, args, kwargs):
    mode = kwargs.get("rounding_mode", args[2] if len(args) > 2 else None)
    dtype = ctx.out_dtype()
    a, b = ctx.tensor(args[0], dtype), ctx.tensor(args[1], dtype)
    if mode is None:
        return ctx.emit(op.divide(a, b))
    if np.dtype(dtype).kind == "f":
        q = ctx.emit(op.divide(a, b))
        return ctx.emit(op.floor(q) if mode == "floor" else op.trunc(q))
    if mode == "floor":
        return ctx.emit(op.floor_divide(a, b))
    return _trunc_div_int(ctx, a, b, dtype)


def _trunc_div_int(ctx, a, b, dtype):
    """Integer division rounding toward zero from floor division: add one where the signs differ
    and the remainder is not zero."""
    q = ctx.emit(op.floor_divide(a, b))
    r = ctx.emit(op.floor_mod(a, b))
    zero = ctx.scalar(0, dtype)
    fix = ctx.emit(op.logical_and(op.not_equal(r, zero), op.not_equal(op.less(a, zero), op.less(b, zero))))
    return ctx.emit(op.where(fix, op.add(q, ctx.scalar(1, dtype)), q))


@converter("aten.floor_divide.default", "aten.floor_divide.Scalar")
def _floor_divide(ctx, node, args, kwargs):
    dtype = ctx.out_dtype()
    a, b = ctx.tensor(args[0], dtype), ctx.tensor(args[1], dtype)
    if np.dtype(dtype).kind == "f":
        return ctx.emit(op.floor(op.divide(a, b)))
    return ctx.emit(op.floor_divide(a, b))


@converter("aten.remainder.Tensor", "aten.remainder.Scalar")
def _remainder(ctx, node, args, kwargs):
    dtype = ctx.out_dtype()
    a, b = ctx.tensor(args[0], dtype), ctx.tensor(args[1], dtype)
    if np.dtype(dtype).kind == "f":  # torch's float remainder: fmod, moved into b's sign
        r = ctx.emit(op.fmod(a, b))
        zero = ctx.scalar(0, dtype)
        fix = ctx.emit(op.logical_and(op.not_equal(r, zero), op.not_equal(op.less(r, zero), op.less(b, zero))))
        return ctx.emit(op.where(fix, op.add(r, b), r))
    return ctx.emit(op.floor_mod(a, b))


@converter("aten.fmod.Tensor", "aten.fmod.Scalar")
def _fmod(ctx, node, args, kwargs):
    dtype = ctx.out_dtype()
    a, b = ctx.tensor(args[0], dtype), ctx.tensor(args[1], dtype)
    if np.dtype(dtype).kind == "f":
        return ctx.emit(op.fmod(a, b))
    r = ctx.emit(op.floor_mod(a, b))
    zero = ctx.scalar(0, dtype)
    fix = ctx.emit(op.logical_and(op.not_equal(r, zero), op.not_equal(op.less(a, zero), op.less(b, zero))))
    return ctx.emit(op.where(fix, op.subtract(r, b), r))


@converter("aten.pow.Tensor_Scalar", "aten.pow.Tensor_Tensor", "aten.pow.Scalar")
def _pow(ctx, node, args, kwargs):
    dtype = ctx.out_dtype()
    base, exponent = args[0], args[1]
    if isinstance(exponent, (int, float)) and not isinstance(exponent, bool) and float(exponent) == 2.0:
        return ctx.emit(op.square(ctx.tensor(base, dtype)))
    if isinstance(exponent, (int, float)) and float(exponent) == 0.5 and np.dtype(dtype).kind == "f":
        return ctx.emit(op.sqrt(ctx.tensor(base, dtype)))
    if np.dtype(dtype).kind != "f":  # integer powers: exact in float64 below 2**53
        result = op.power(ctx.tensor(base, "float64"), ctx.tensor(exponent, "float64"))
        return ctx.emit(op.astype(ctx.emit(result), dtype))
    return ctx.emit(op.power(ctx.tensor(base, dtype), ctx.tensor(exponent, dtype)))


for _aten, _name in (("maximum", "maximum"), ("minimum", "minimum"), ("atan2", "atan2")):
    converter(f"aten.{_aten}.default")(_binary(_name))
for _aten, _name in COMPARE.items():
    converter(f"aten.{_aten}.Tensor", f"aten.{_aten}.Scalar")(_binary(_name, "promote"))
for _aten, _name in LOGICAL.items():
    converter(f"aten.{_aten}.default")(
        lambda ctx, node, args, kwargs, _n=_name: ctx.emit(getattr(op, _n)(ctx.tensor(args[0], "bool"),
                                                                           ctx.tensor(args[1], "bool"))))


def _bitwise(name):
    def convert(ctx, node, args, kwargs):
        dtype = ctx.out_dtype()
        a, b = ctx.tensor(args[0], dtype), ctx.tensor(args[1], dtype)
        if dtype == "bool":
            return ctx.emit(getattr(op, name.replace("bitwise", "logical"))(a, b))
        return ctx.emit(getattr(op, name)(a, b))
    return convert


for _aten, _name in BITWISE.items():
    converter(f"aten.{_aten}.Tensor", f"aten.{_aten}.Scalar")(_bitwise(_name))


# ----------------------------------------------------------------------------- where, clamp, masked_fill

@converter("aten.where.self", "aten.where.ScalarSelf", "aten.where.ScalarOther", "aten.where.Scalar")
def _where(ctx, node, args, kwargs):
    dtype = ctx.out_dtype()
    cond = ctx.tensor(args[0], "bool")
    return ctx.emit(op.where(cond, ctx.tensor(args[1], dtype), ctx.tensor(args[2], dtype)))


@converter("aten.masked_fill.Scalar", "aten.masked_fill.Tensor")
def _masked_fill(ctx, node, args, kwargs):
    dtype = ctx.out_dtype()
    x, mask, value = args
    return ctx.emit(op.where(ctx.tensor(mask, "bool"), ctx.tensor(value, dtype), ctx.tensor(x, dtype)))


def _clamp_bounds(ctx, x, lo, hi, dtype):
    result = ctx.tensor(x, dtype)
    if lo is not None:
        result = ctx.emit(op.maximum(result, ctx.tensor(lo, dtype)))
    if hi is not None:
        result = ctx.emit(op.minimum(result, ctx.tensor(hi, dtype)))
    return result


@converter("aten.clamp.default", "aten.clamp.Tensor", "aten.clip.default")
def _clamp(ctx, node, args, kwargs):
    lo = kwargs.get("min", args[1] if len(args) > 1 else None)
    hi = kwargs.get("max", args[2] if len(args) > 2 else None)
    return _clamp_bounds(ctx, args[0], lo, hi, ctx.out_dtype())


@converter("aten.clamp_min.default", "aten.clamp_min.Tensor")
def _clamp_min(ctx, node, args, kwargs):
    return _clamp_bounds(ctx, args[0], args[1], None, ctx.out_dtype())


@converter("aten.clamp_max.default", "aten.clamp_max.Tensor")
def _clamp_max(ctx, node, args, kwargs):
    return _clamp_bounds(ctx, args[0], None, args[1], ctx.out_dtype())


@converter("aten.hardtanh.default")
def _hardtanh(ctx, node, args, kwargs):
    lo = kwargs.get("min_val", args[1] if len(args) > 1 else -1.0)
    hi = kwargs.get("max_val", args[2] if len(args) > 2 else 1.0)
    return _clamp_bounds(ctx, args[0], lo, hi, ctx.out_dtype())


@converter("aten.relu6.default")
def _relu6(ctx, node, args, kwargs):
    return _clamp_bounds(ctx, args[0], 0.0, 6.0, ctx.out_dtype())


# ----------------------------------------------------------------------------- parameterised activations

@converter("aten.gelu.default")
def _gelu(ctx, node, args, kwargs):
    approximate = kwargs.get("approximate", args[1] if len(args) > 1 else "none")
    x = float_input(ctx, args[0])
    return ctx.emit(op.gelu_tanh(x) if approximate == "tanh" else op.gelu(x))


@converter("aten.leaky_relu.default")
def _leaky_relu(ctx, node, args, kwargs):
    slope = kwargs.get("negative_slope", args[1] if len(args) > 1 else 0.01)
    return ctx.emit(op.leaky_relu(float_input(ctx, args[0]), alpha=float(slope)))


@converter("aten.elu.default")
def _elu(ctx, node, args, kwargs):
    alpha = kwargs.get("alpha", args[1] if len(args) > 1 else 1.0)
    scale = kwargs.get("scale", args[2] if len(args) > 2 else 1.0)
    input_scale = kwargs.get("input_scale", args[3] if len(args) > 3 else 1.0)
    x = float_input(ctx, args[0])
    dtype = ctx.dtype(x)
    if input_scale != 1:
        x = ctx.emit(op.multiply(x, ctx.scalar(input_scale, dtype)))
    y = ctx.emit(op.elu(x, alpha=float(alpha)))
    if scale != 1:  # elu's negative branch is alpha*(exp(x*input_scale)-1), its positive one x (unscaled input)
        y = ctx.emit(op.multiply(y, ctx.scalar(scale, dtype)))
    if input_scale != 1:
        positive = ctx.emit(op.greater(x, ctx.scalar(0, dtype)))
        raw = ctx.emit(op.multiply(float_input(ctx, args[0]), ctx.scalar(scale, dtype)))
        y = ctx.emit(op.where(positive, raw, y))
    return y


@converter("aten.celu.default")
def _celu(ctx, node, args, kwargs):
    alpha = kwargs.get("alpha", args[1] if len(args) > 1 else 1.0)
    return ctx.emit(op.celu(float_input(ctx, args[0]), alpha=float(alpha)))


@converter("aten.selu.default")
def _selu(ctx, node, args, kwargs):
    return ctx.emit(op.selu(float_input(ctx, args[0]), alpha=1.6732632423543772848170429916717,
                            gamma=1.0507009873554804934193349852946))


@converter("aten.hardsigmoid.default")
def _hardsigmoid(ctx, node, args, kwargs):
    return ctx.emit(op.hard_sigmoid(float_input(ctx, args[0]), alpha=1.0 / 6.0, beta=0.5))


@converter("aten.softplus.default")
def _softplus(ctx, node, args, kwargs):
    beta = kwargs.get("beta", args[1] if len(args) > 1 else 1.0)
    threshold = kwargs.get("threshold", args[2] if len(args) > 2 else 20.0)
    x = float_input(ctx, args[0])
    dtype = ctx.dtype(x)
    bx = ctx.emit(op.multiply(x, ctx.scalar(beta, dtype))) if beta != 1 else x
    soft = ctx.emit(op.softplus(bx))
    if beta != 1:
        soft = ctx.emit(op.divide(soft, ctx.scalar(beta, dtype)))
    return ctx.emit(op.where(op.greater(bx, ctx.scalar(threshold, dtype)), x, soft))


@converter("aten.logit.default")
def _logit(ctx, node, args, kwargs):
    eps = kwargs.get("eps", args[1] if len(args) > 1 else None)
    x = float_input(ctx, args[0])
    dtype = ctx.dtype(x)
    if eps is not None:
        x = _clamp_bounds(ctx, x, eps, 1.0 - eps, dtype)
    return ctx.emit(op.log(op.divide(x, op.subtract(ctx.scalar(1.0, dtype), x))))


@converter("aten.frac.default")
def _frac(ctx, node, args, kwargs):
    x = args[0]
    return ctx.emit(op.subtract(x, op.trunc(x)))


@converter("aten.erfc.default")
def _erfc(ctx, node, args, kwargs):
    x = float_input(ctx, args[0])
    return ctx.emit(op.subtract(ctx.scalar(1.0, ctx.dtype(x)), op.erf(x)))


@converter("aten.lerp.Scalar", "aten.lerp.Tensor")
def _lerp(ctx, node, args, kwargs):
    dtype = ctx.out_dtype()
    start, end, weight = (ctx.tensor(a, dtype) for a in args[:3])
    return ctx.emit(op.add(start, op.multiply(weight, op.subtract(end, start))))


@converter("aten.addcmul.default", "aten.addcdiv.default")
def _addc(ctx, node, args, kwargs):
    dtype = ctx.out_dtype()
    x, t1, t2 = (ctx.tensor(a, dtype) for a in args[:3])
    value = kwargs.get("value", args[3] if len(args) > 3 else 1)
    fn = op.multiply if "addcmul" in str(node.target) else op.divide
    term = ctx.emit(fn(t1, t2))
    if value != 1:
        term = ctx.emit(op.multiply(term, ctx.scalar(value, dtype)))
    return ctx.emit(op.add(x, term))


@converter("aten.hypot.default")
def _hypot(ctx, node, args, kwargs):
    dtype = ctx.out_dtype()
    a, b = ctx.tensor(args[0], dtype), ctx.tensor(args[1], dtype)
    return ctx.emit(op.sqrt(op.add(op.square(a), op.square(b))))


@converter("aten.xlogy.Tensor")
def _xlogy(ctx, node, args, kwargs):
    dtype = ctx.out_dtype()
    x, y = ctx.tensor(args[0], dtype), ctx.tensor(args[1], dtype)
    zero = ctx.scalar(0.0, dtype)
    product = ctx.emit(op.multiply(x, op.log(y)))
    return ctx.emit(op.where(op.equal(x, zero), op.where(op.isnan(y), y, zero), product))
