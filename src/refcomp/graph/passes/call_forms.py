"""Call forms of the script: shapes, scalars and strings passed positionally, made canonical.

TVMScript users write `R.reshape(x, (n * k,))`, `R.permute_dims(x, [1, 0])`, `R.sum(x, 1)`; the
parser keeps such arguments as ShapeExpr, PrimValue and StringImm.  `canonical_call` hands them
to the operator's constructor as Python values, and the constructor decides which become
attributes, so the canonical call is the one `refcomp.graph.op` builds.
"""
from __future__ import annotations

from ...ast import expr as tir
from ...ast.graph import Call, PrimValue, ShapeExpr, StringImm, Tuple, Var
from ...ast.graph_struct_info import PrimStructInfo, ShapeStructInfo
from ...errors import IRError

_SCRIPT_ARGS = (ShapeExpr, PrimValue, StringImm)


def canonical_call(call: Call) -> Call:
    """A call written with shapes, scalars or strings as positional arguments, rebuilt by its constructor.

    `R.reshape(x, R.shape([n * k]))` becomes `R.reshape(x, shape=(n * k,))`: each ShapeExpr is
    passed as a tuple of dims, each PrimValue as its number (or symbolic value), each string as
    str, so the operator's own constructor decides which of them are attributes.
    """
    from .. import op as ops

    name = call.op.name
    make = getattr(ops, name, None)
    if make is None or not callable(make):
        raise IRError(f"R.{name}: unknown graph operator", ir=call)
    args = [_python_value(a) for a in call.args]
    if len(args) == 1 and isinstance(args[0], Tuple) and _variadic(make):
        args = list(args[0].fields)  # R.concat((a, b), axis=0): the constructor takes the tensors
    attrs = {k: _plain_attr(v) for k, v in call.attrs.items()}
    try:
        result = make(*args, **attrs)
    except (TypeError, ValueError) as exc:
        raise IRError(f"R.{name}: cannot take these arguments: {exc}", ir=call) from None
    if not isinstance(result, Call):
        raise IRError(f"R.{name}: the constructor did not make a call", ir=call)
    return result


def canonical_attrs(call: Call) -> Call:
    """call with each attribute in the form its constructor gives it (`axis=0` -> `axis=(0,)` for sum).

    Attributes the call does not have are not added, and a call the constructor refuses is
    returned as it is (its shape rule then judges it), so canonical IR passes through unchanged.
    """
    from .. import op as ops
    from ...errors import RefcompError

    make = getattr(ops, call.op.name, None)
    if make is None or not call.attrs:
        return call
    try:
        result = make(*call.args, **{k: _plain_attr(v) for k, v in call.attrs.items()})
    except (TypeError, ValueError, RefcompError):
        return call
    if not isinstance(result, Call):
        return call
    merged = {k: result.attrs.get(k, v) for k, v in call.attrs.items()}
    if all(_same(merged[k], v) for k, v in call.attrs.items()):
        return call
    return call.with_(attrs=merged)


def _same(a, b) -> bool:
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and (a is b or str(a) == str(b))


def _variadic(make) -> bool:
    import inspect

    params = list(inspect.signature(make).parameters.values())
    return bool(params) and params[0].kind is inspect.Parameter.VAR_POSITIONAL


def is_script_arg(arg) -> bool:
    """A shape, scalar, string or tuple of values (inline, or a var bound to a known shape or scalar)."""
    if isinstance(arg, _SCRIPT_ARGS + (Tuple,)):
        return True
    info = arg.struct_info if isinstance(arg, Var) else None
    return (isinstance(info, ShapeStructInfo) and info.values is not None
            or isinstance(info, PrimStructInfo) and info.value is not None)


def _python_value(arg):
    if isinstance(arg, Var) and is_script_arg(arg):
        info = arg.struct_info
        return tuple(_python_dim(v) for v in info.values) if isinstance(info, ShapeStructInfo) \
            else _python_dim(info.value)
    if isinstance(arg, ShapeExpr):
        return tuple(_python_dim(v) for v in arg.values)
    if isinstance(arg, PrimValue):
        return _python_dim(arg.value)
    if isinstance(arg, StringImm):
        return arg.value
    return arg


def _python_dim(value):
    if isinstance(value, tir.IntImm) and not value.dtype.is_bool:
        return value.value
    if isinstance(value, tir.FloatImm):
        return value.value
    return value


def _plain_attr(value):
    if isinstance(value, list):
        return tuple(_plain_attr(v) for v in value)
    return value


