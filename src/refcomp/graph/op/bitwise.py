"""Bitwise operators on integer tensors: bitwise_and/or/xor/not, left_shift, right_shift; bitcast.

The loop IR has no bit operators, so these are written in integer arithmetic on the 64-bit
unsigned image of each value (a cast that is modular in C): bit k of u is (u // 2**k) % 2, and
a combination of bits is the sum of its set bits' powers; a shift by s multiplies or divides by
2**s, with 2**s built from the bits of s; the result is cast back (modular again).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ...ast import expr as tir
from ...ast.dtype import dtype as to_dtype
from ...ast.graph_struct_info import TensorStructInfo
from ...errors import IRError
from ._common import infer_broadcast, make_call, same_dtype, te
from .elementwise import broadcast_compute
from .registry import register

U64 = "uint64"


def _u64(v: tir.PrimExpr) -> tir.PrimExpr:
    return v if str(v.dtype) == U64 else tir.Cast(U64, v)


def _k(value: int) -> tir.PrimExpr:
    return tir.const(value, U64)


def _bit(u: tir.PrimExpr, k: int) -> tir.PrimExpr:
    return tir.FloorMod(tir.FloorDiv(u, _k(1 << k)), _k(2))


def _combine(bit_rule: Callable, bits: int) -> Callable:
    """A scalar function applying bit_rule(bit_a, bit_b) -> 0/1 (uint64 terms) to every bit."""
    def scalar(a, b):
        ua, ub = _u64(a), _u64(b)
        total = None
        for k in range(bits):
            term = bit_rule(_bit(ua, k), _bit(ub, k)) * _k(1 << k)
            total = term if total is None else total + term
        return tir.Cast(a.dtype, total)

    return scalar


BIT_RULES = {
    "bitwise_and": (lambda x, y: x * y, np.bitwise_and),
    "bitwise_or": (lambda x, y: x + y - x * y, np.bitwise_or),
    "bitwise_xor": (lambda x, y: tir.FloorMod(x + y, _k(2)), np.bitwise_xor),
}


def _int_infer(call, ctx):
    a, b = ctx.tensor(0), ctx.tensor(1)
    dtype = same_dtype(ctx, a, b)
    if dtype is not None and not dtype.is_integer:
        ctx.fail(f"expects integer operands, got {dtype}", kind=IRError)
    return infer_broadcast(ctx, (a, b), dtype)


def _bits(dtype) -> int:
    return to_dtype(str(dtype)).bits


def _binary_te(name: str):
    rule = BIT_RULES[name][0]

    def compute(a, b):
        return broadcast_compute(_combine(rule, _bits(a.dtype)), (a, b))

    return compute


def _make(name: str):
    def build(a, b):
        return make_call(name, a, b)

    build.__name__ = name
    build.__doc__ = f"Element-wise {name} of integer tensors (numpy broadcasting)."
    return build


for _name, (_rule, _np_fn) in BIT_RULES.items():
    register(_name, infer=_int_infer, reference=_np_fn, legalize=_binary_te(_name), pattern="broadcast",
             doc=f"element-wise {_name} of integers")
    globals()[_name] = _make(_name)


# ----------------------------------------------------------------------------- not

def bitwise_not(x):
    """Element-wise bitwise complement of an integer tensor."""
    return make_call("bitwise_not", x)


def _not_infer(call, ctx):
    x = ctx.tensor(0)
    if x.dtype is not None and not x.dtype.is_integer:
        ctx.fail(f"expects an integer tensor, got {x.dtype}", kind=IRError)
    return x


def _not_te(x):
    # ~v == -1 - v in two's complement, computed in int64 and wrapped back to x's type
    def body(*i):
        wide = tir.Cast("int64", x[i])
        return tir.Cast(x.dtype, tir.const(-1, "int64") - wide)

    return te().compute(x.shape, body, name="bitwise_not")


register("bitwise_not", infer=_not_infer, reference=np.invert, legalize=_not_te, pattern="elementwise",
         doc="element-wise bitwise complement")


# ----------------------------------------------------------------------------- shifts

def left_shift(x, shift):
    """x << shift element-wise on unsigned integers (bits shifted past the width are dropped)."""
    return make_call("left_shift", x, shift)


def right_shift(x, shift):
    """x >> shift element-wise on unsigned integers."""
    return make_call("right_shift", x, shift)


def _shift_infer(call, ctx):
    info = _int_infer(call, ctx)
    if info.dtype is not None and info.dtype.is_int:
        ctx.fail(f"shifts are defined on unsigned integers, got {info.dtype}", kind=IRError)
    return info


def _power_of_two(s: tir.PrimExpr) -> tir.PrimExpr:
    """2**s for 0 <= s < 64 as a uint64 product over the bits of s."""
    result = None
    for j in range(6):
        factor = tir.Select(tir.EQ(_bit(s, j), _k(1)), _k(1 << (1 << j)), _k(1))
        result = factor if result is None else result * factor
    return result


def _shift_te(left: bool):
    def compute(x, s):
        def scalar(a, b):
            ua, ub = _u64(a), _u64(b)
            moved = ua * _power_of_two(ub) if left else tir.FloorDiv(ua, _power_of_two(ub))
            return tir.Cast(a.dtype, tir.Select(tir.LT(ub, _k(64)), moved, _k(0)))

        return broadcast_compute(scalar, (x, s))

    return compute


def _np_shift(fn):
    def reference(x, s):
        width = x.dtype.itemsize * 8
        out = fn(x, np.minimum(s, width - 1).astype(x.dtype))
        return np.where(s >= width, np.zeros_like(out), out).astype(np.result_type(x, s))

    return reference


register("left_shift", infer=_shift_infer, reference=_np_shift(np.left_shift), legalize=_shift_te(True),
         pattern="broadcast", doc="element-wise left shift of unsigned integers")
register("right_shift", infer=_shift_infer, reference=_np_shift(np.right_shift), legalize=_shift_te(False),
         pattern="broadcast", doc="element-wise right shift of unsigned integers")


# ----------------------------------------------------------------------------- bitcast

def bitcast(x, dtype):
    """x's bits read as dtype, element by element (numpy's `.view` of a same-width type)."""
    return make_call("bitcast", x, dtype=str(to_dtype(dtype)))


def _bitcast_infer(call, ctx):
    x = ctx.tensor(0)
    target = to_dtype(ctx.attr("dtype"))
    if x.dtype is not None and (x.dtype.is_bool or target.is_bool or x.dtype.bits != target.bits):
        ctx.fail(f"bitcast needs number types of one width, got {x.dtype} -> {target}", kind=IRError)
    return TensorStructInfo(x.shape, target, x.ndim)


def _bitcast_te(x, dtype):
    return te().compute(x.shape, lambda *i: te().reinterpret(x[i], dtype), name="bitcast")


register("bitcast", infer=_bitcast_infer, reference=lambda x, dtype: x.view(to_dtype(dtype).numpy()),
         legalize=_bitcast_te, pattern="elementwise", doc="element-wise reinterpretation of the bits")
