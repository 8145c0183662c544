"""ONNX element-wise ops: math, activations, comparisons, logic, Where, Clip, Cast, variadic Max/Min/Sum/Mean."""
from __future__ import annotations

import numpy as np

from ...ast.graph import Constant
from ...graph import op
from . import element_types, shape_values
from .importer import attributes, converter
from .ops_shape import unify_broadcast

UNARY = {
    "Abs": "abs", "Acos": "acos", "Acosh": "acosh", "Asin": "asin", "Asinh": "asinh", "Atan": "atan",
    "Atanh": "atanh", "Ceil": "ceil", "Cos": "cos", "Cosh": "cosh", "Erf": "erf", "Exp": "exp", "Floor": "floor",
    "Log": "log", "Neg": "negative", "Not": "logical_not", "Reciprocal": "reciprocal", "Relu": "relu",
    "Round": "round", "Sigmoid": "sigmoid", "Sign": "sign", "Sin": "sin", "Sinh": "sinh", "Softplus": "softplus",
    "Softsign": "softsign", "Sqrt": "sqrt", "Tan": "tan", "Tanh": "tanh", "Mish": "mish", "HardSwish": "hard_swish",
    "IsNaN": "isnan",
}
BINARY = {
    "Add": "add", "Sub": "subtract", "Mul": "multiply", "Pow": "power", "Equal": "equal", "Less": "less",
    "LessOrEqual": "less_equal", "Greater": "greater", "GreaterOrEqual": "greater_equal", "And": "logical_and",
    "Or": "logical_or", "Xor": "logical_xor",
}


def _unary(ctx, node, inputs, attrs):
    return ctx.emit(getattr(op, UNARY[node.op_type])(inputs[0]))


def _same_dtype(ctx, a, b):
    """ONNX lets a constant operand differ in dtype only by promotion rules; cast constants to match."""
    ia, ib = ctx.info(a), ctx.info(b)
    if ia.dtype is not None and ib.dtype is not None and ia.dtype != ib.dtype:
        if isinstance(b, Constant):
            b = Constant(np.asarray(b.array).astype(ia.dtype.numpy()))
        elif isinstance(a, Constant):
            a = Constant(np.asarray(a.array).astype(ib.dtype.numpy()))
        else:
            b = ctx.emit(op.astype(b, ia.dtype))
    return a, b


def _binary(ctx, node, inputs, attrs):
    a, b = inputs
    if shape_values.is_symbolic(a) or shape_values.is_symbolic(b):
        return _shape_arithmetic(ctx, node, a, b)
    name = BINARY[node.op_type]
    if node.op_type == "Equal" and any(ctx.info(v).dtype is not None and ctx.info(v).dtype.is_string for v in (a, b)):
        from .ops_strings import strings_equal

        return strings_equal(ctx, a, b)
    a, b = unify_broadcast(ctx, [a, b])
    if node.op_type == "Pow":
        ia = ctx.info(a)
        if not ia.dtype.is_float:
            # integer base: exact in float64 for results below 2**53, then back to the base's type
            af = ctx.emit(op.astype(a, "float64"))
            bf = ctx.emit(op.astype(b, "float64"))
            return ctx.emit(op.astype(op.power(af, bf), ia.dtype))
        b = ctx.emit(op.astype(b, ia.dtype)) if ctx.info(b).dtype != ia.dtype else b
        return ctx.emit(op.power(a, b))
    a, b = _same_dtype(ctx, a, b)
    return ctx.emit(getattr(op, name)(a, b))


def _shape_arithmetic(ctx, node, a, b):
    """The op on the entries of shape values where it can be done at import; else on int64 tensors."""
    if node.op_type in shape_values.COMPARE:
        result = shape_values.compare(node.op_type, a, b)
    else:
        result = shape_values.binary(node.op_type, a, b)
    if result is not None:
        return result
    convert = {"Div": _div, "Mod": _mod}.get(node.op_type, _binary)
    return convert(ctx, node, [ctx.tensor(a), ctx.tensor(b)], attributes(node))


for _t in UNARY:
    converter(_t)(_unary)
for _t in BINARY:
    converter(_t, shape_values=True)(_binary)


@converter("Div", shape_values=True)
def _div(ctx, node, inputs, attrs):
    if any(shape_values.is_symbolic(v) for v in inputs):
        return _shape_arithmetic(ctx, node, *inputs)
    a, b = _same_dtype(ctx, *inputs)
    dtype = ctx.info(a).dtype
    if dtype.is_float:
        return ctx.emit(op.divide(a, b))
    # ONNX integer division truncates toward zero: floor(a/b) + (1 where the remainder's sign differs)
    q = ctx.emit(op.floor_divide(a, b))
    r = ctx.emit(op.floor_mod(a, b))
    zero = Constant(np.zeros((), dtype.numpy()))
    fix = ctx.emit(op.logical_and(op.not_equal(r, zero), op.not_equal(op.less(a, zero), op.less(b, zero))))
    return ctx.emit(op.where(fix, op.add(q, Constant(np.ones((), dtype.numpy()))), q))


@converter("Mod", shape_values=True)
def _mod(ctx, node, inputs, attrs):
    if any(shape_values.is_symbolic(v) for v in inputs) and not attrs.get("fmod", 0):
        return _shape_arithmetic(ctx, node, *inputs)
    a, b = _same_dtype(ctx, *inputs)
    dtype = ctx.info(a).dtype
    if attrs.get("fmod", 0):
        if dtype.is_float:
            return ctx.emit(op.fmod(a, b))
        r = ctx.emit(op.floor_mod(a, b))  # C's % from floor mod: subtract b where signs of r and a differ
        zero = Constant(np.zeros((), dtype.numpy()))
        fix = ctx.emit(op.logical_and(op.not_equal(r, zero), op.not_equal(op.less(a, zero), op.less(b, zero))))
        return ctx.emit(op.where(fix, op.subtract(r, b), r))
    return ctx.emit(op.floor_mod(a, b))


@converter("IsInf")
def _isinf(ctx, node, inputs, attrs):
    x = inputs[0]
    pos, neg = attrs.get("detect_positive", 1), attrs.get("detect_negative", 1)
    inf = ctx.emit(op.isinf(x))
    zero = Constant(np.zeros((), ctx.info(x).dtype.numpy()))
    if pos and neg:
        return inf
    if pos:
        return ctx.emit(op.logical_and(inf, op.greater(x, zero)))
    if neg:
        return ctx.emit(op.logical_and(inf, op.less(x, zero)))
    return ctx.emit(op.logical_and(inf, op.logical_not(inf)))


@converter("LeakyRelu")
def _leaky(ctx, node, inputs, attrs):
    return ctx.emit(op.leaky_relu(inputs[0], alpha=attrs.get("alpha", 0.01)))


@converter("Elu")
def _elu(ctx, node, inputs, attrs):
    return ctx.emit(op.elu(inputs[0], alpha=attrs.get("alpha", 1.0)))


@converter("Celu")
def _celu(ctx, node, inputs, attrs):
    return ctx.emit(op.celu(inputs[0], alpha=attrs.get("alpha", 1.0)))


@converter("Selu")
def _selu(ctx, node, inputs, attrs):
    return ctx.emit(op.selu(inputs[0], alpha=attrs.get("alpha", 1.67326319217681884765625),
                            gamma=attrs.get("gamma", 1.05070102214813232421875)))


@converter("HardSigmoid")
def _hard_sigmoid(ctx, node, inputs, attrs):
    return ctx.emit(op.hard_sigmoid(inputs[0], alpha=attrs.get("alpha", 0.2), beta=attrs.get("beta", 0.5)))


@converter("ThresholdedRelu")
def _thresholded(ctx, node, inputs, attrs):
    return ctx.emit(op.thresholded_relu(inputs[0], alpha=attrs.get("alpha", 1.0)))


@converter("Gelu")
def _gelu(ctx, node, inputs, attrs):
    approx = attrs.get("approximate", "none")
    approx = approx.decode() if isinstance(approx, bytes) else approx
    return ctx.emit(op.gelu_tanh(inputs[0]) if approx == "tanh" else op.gelu(inputs[0]))


@converter("PRelu")
def _prelu(ctx, node, inputs, attrs):
    x, slope = _same_dtype(ctx, *inputs)
    zero = Constant(np.zeros((), ctx.info(x).dtype.numpy()))
    return ctx.emit(op.where(op.less(x, zero), op.multiply(x, slope), x))


@converter("Where", shape_values=True)
def _where(ctx, node, inputs, attrs):
    c, a, b = inputs
    if shape_values.is_symbolic(a) or shape_values.is_symbolic(b):
        picked = shape_values.where(c, a, b)
        if picked is not None:
            return picked
    c, a, b = unify_broadcast(ctx, [ctx.tensor(v) for v in (c, a, b)])
    a, b = _same_dtype(ctx, a, b)
    return ctx.emit(op.where(c, a, b))


@converter("Clip")
def _clip(ctx, node, inputs, attrs):
    x = inputs[0]
    dtype = ctx.info(x).dtype.numpy()
    lo = attrs.get("min") if len(inputs) < 2 or inputs[1] is None else None
    hi = attrs.get("max") if len(inputs) < 3 or inputs[2] is None else None
    result = x
    lo_value = inputs[1] if len(inputs) > 1 and inputs[1] is not None else (
        Constant(np.asarray(lo, dtype)) if lo is not None else None)
    hi_value = inputs[2] if len(inputs) > 2 and inputs[2] is not None else (
        Constant(np.asarray(hi, dtype)) if hi is not None else None)
    if lo_value is not None:
        result = ctx.emit(op.maximum(result, lo_value))
    if hi_value is not None:
        result = ctx.emit(op.minimum(result, hi_value))
    return result


@converter("Max", "Min", "Sum", "Mean", shape_values=True)
def _variadic(ctx, node, inputs, attrs):
    if any(shape_values.is_symbolic(v) for v in inputs) and node.op_type != "Mean":
        result = inputs[0]
        for other in inputs[1:]:
            result = None if result is None else shape_values.binary(
                {"Sum": "Add"}.get(node.op_type, node.op_type), result, other)
        if result is not None:
            return result
    inputs = unify_broadcast(ctx, [ctx.tensor(v) for v in inputs])
    fn = {"Max": op.maximum, "Min": op.minimum, "Sum": op.add, "Mean": op.add}[node.op_type]
    result = inputs[0]
    for other in inputs[1:]:
        a, b = _same_dtype(ctx, result, other)
        result = ctx.emit(fn(a, b))
    if node.op_type == "Mean":
        count = Constant(np.asarray(len(inputs), ctx.info(result).dtype.numpy()))
        result = ctx.emit(op.divide(result, count))
    if len(inputs) == 1 and result is inputs[0]:
        return ctx.emit(op.add(result, Constant(np.zeros((), ctx.info(result).dtype.numpy()))))
    return result


@converter("Cast", shape_values=True)
def _cast(ctx, node, inputs, attrs):
    from .importer import _onnx_dtype

    target = _onnx_dtype(attrs["to"])
    if shape_values.is_symbolic(inputs[0]):
        if target == np.int64:
            return inputs[0]
        inputs = [ctx.tensor(inputs[0])]
    return element_types.convert(ctx, inputs[0], target, **_cast_options(ctx, attrs))


@converter("CastLike")
def _cast_like(ctx, node, inputs, attrs):
    return element_types.convert(ctx, inputs[0], ctx.info(inputs[1]).dtype, **_cast_options(ctx, attrs))


def _cast_options(ctx, attrs) -> dict:
    mode = attrs.get("round_mode", "up")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("up", "down", "nearest"):
        ctx.fail(f"round_mode must be up, down or nearest, got {mode!r}")
    return {"saturate": bool(attrs.get("saturate", 1)), "round_mode": mode}


@converter("Identity", shape_values=True)
def _identity_value(ctx, node, inputs, attrs):
    return inputs[0]


@converter("Dropout")
def _identity(ctx, node, inputs, attrs):
    if node.op_type == "Dropout":
        training = inputs[2] if len(inputs) > 2 else None
        if training is not None and (not isinstance(training, Constant) or bool(np.asarray(training.array))):
            return _training_dropout(ctx, node, inputs, attrs)
        if len(node.output) > 1 and node.output[1]:
            mask = ctx.emit(op.full_like(inputs[0], 1.0, dtype="bool"))
            return [inputs[0], mask]
    return inputs[0]


def _training_dropout(ctx, node, inputs, attrs):
    """Dropout whose training_mode is true or read at run time.  The uniform draws are numpy's
    RandomState(seed).uniform(0, 1, x.shape), made at import (a seed attribute fixes them, as in
    ONNX's reference; without one a seed is drawn at import): y = x * (u >= ratio) / (1 - ratio)
    in training mode, else x; the mask is u >= ratio (all true when not training)."""
    from .importer import MAX_CONSTANT_ELEMENTS
    from ...graph.shape_facts import const_value

    x = inputs[0]
    dims = [const_value(d) for d in ctx.static_shape(x)]
    if None in dims:
        ctx.fail("training-mode Dropout needs a static input shape (its random draws are made at import)")
    if int(np.prod(dims, dtype=object)) > MAX_CONSTANT_ELEMENTS:
        ctx.fail(f"training-mode Dropout of shape {tuple(dims)} is larger than the {MAX_CONSTANT_ELEMENTS} "
                 f"elements allowed")
    seed = attrs.get("seed")
    seed = int(seed) if seed is not None else int(np.random.SeedSequence().generate_state(1)[0])
    draws = Constant(np.random.RandomState(seed).uniform(0.0, 1.0, dims))
    dtype = ctx.info(x).dtype.numpy()
    ratio = inputs[1] if len(inputs) > 1 and inputs[1] is not None else Constant(np.asarray(0.5, np.float32))
    rtype = ctx.info(ratio).dtype.numpy()
    mask = ctx.emit(op.greater_equal(draws, op.astype(ratio, "float64")))
    scale = ctx.emit(op.divide(Constant(np.asarray(1.0, rtype)), op.subtract(Constant(np.asarray(1.0, rtype)), ratio)))
    dropped = ctx.emit(op.multiply(op.multiply(x, op.astype(mask, str(dtype))), op.astype(scale, str(dtype))))
    training = inputs[2]
    y = ctx.emit(op.where(training, dropped, x))
    if len(node.output) > 1 and node.output[1]:
        return [y, ctx.emit(op.logical_or(mask, op.logical_not(training)))]
    return y


@converter("Swish")
def _swish(ctx, node, inputs, attrs):
    x = inputs[0]
    alpha = Constant(np.asarray(attrs.get("alpha", 1.0), ctx.info(x).dtype.numpy()))
    return ctx.emit(op.multiply(x, op.sigmoid(op.multiply(x, alpha))))


@converter("Shrink")
def _shrink(ctx, node, inputs, attrs):
    x = inputs[0]
    dtype = ctx.info(x).dtype.numpy()
    lambd, bias = attrs.get("lambd", 0.5), attrs.get("bias", 0.0)
    c = lambda v: Constant(np.asarray(v, dtype))  # noqa: E731
    below = ctx.emit(op.where(op.less(x, c(-lambd)), op.add(x, c(bias)), c(0)))
    return ctx.emit(op.where(op.greater(x, c(lambd)), op.subtract(x, c(bias)), below))


@converter("BitwiseAnd", "BitwiseOr", "BitwiseXor")
def _bitwise(ctx, node, inputs, attrs):
    fn = {"BitwiseAnd": op.bitwise_and, "BitwiseOr": op.bitwise_or, "BitwiseXor": op.bitwise_xor}[node.op_type]
    return ctx.emit(fn(*inputs))


@converter("BitwiseNot")
def _bitwise_not(ctx, node, inputs, attrs):
    return ctx.emit(op.bitwise_not(inputs[0]))


@converter("BitShift")
def _bit_shift(ctx, node, inputs, attrs):
    direction = attrs["direction"]
    direction = direction.decode() if isinstance(direction, bytes) else direction
    if direction not in ("LEFT", "RIGHT"):
        ctx.fail(f"direction must be LEFT or RIGHT, got {direction!r}")
    fn = op.left_shift if direction == "LEFT" else op.right_shift
    return ctx.emit(fn(*inputs))


@converter("BitCast")
def _bit_cast(ctx, node, inputs, attrs):
    from .importer import _onnx_dtype

    source = ctx.info(inputs[0]).dtype
    target = _onnx_dtype(attrs["to"])
    same_width = source.bytes == target.itemsize
    # between integer types (and bool -> 8 bits) of one width, the modular conversion keeps the bits
    if same_width and (source.is_integer or source.is_bool) and target.kind in "iu":
        return ctx.emit(op.astype(inputs[0], str(target)))
    if same_width and not source.is_bool and (target.kind in "iuf" or target.name == "bfloat16"):
        return ctx.emit(op.bitcast(inputs[0], str(target)))
    ctx.fail(f"BitCast from {source} to {target} is not supported (numbers of one width are)")
