"""The intrinsic calls the IR knows: name, arity, purity, and how their result dtype is found.

Every backend (interpreter, C, CUDA) implements exactly this table; spec/ir.md gives the semantics.
"""
from __future__ import annotations

from dataclasses import dataclass

# float -> float math, applied element-wise, result dtype == argument dtype
FLOAT_UNARY = ("exp", "exp2", "log", "log2", "log10", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos",
               "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh",
               "sigmoid", "erf", "floor", "ceil", "round", "trunc", "nearbyint")
FLOAT_BINARY = ("pow", "atan2", "fmod", "hypot", "copysign")
# defined on ints and floats, result dtype == argument dtype
ANY_UNARY = ("abs",)
PREDICATES = ("isnan", "isinf", "isfinite")  # float -> bool


@dataclass(frozen=True)
class IntrinsicInfo:
    """What the IR knows about one intrinsic."""

    name: str
    arity: int  # -1: variadic
    pure: bool = True


INTRINSICS: dict[str, IntrinsicInfo] = {}
for _name in FLOAT_UNARY + ANY_UNARY + PREDICATES:
    INTRINSICS[_name] = IntrinsicInfo(_name, 1)
for _name in FLOAT_BINARY:
    INTRINSICS[_name] = IntrinsicInfo(_name, 2)
# if_then_else(cond, a, b) evaluates only the taken branch (unlike Select).
INTRINSICS["if_then_else"] = IntrinsicInfo("if_then_else", 3)
# assume(cond): a fact the prover may use; no effect at run time.
INTRINSICS["assume"] = IntrinsicInfo("assume", 1, pure=False)
# reinterpret(x): the same bits as another type of equal width.
INTRINSICS["reinterpret"] = IntrinsicInfo("reinterpret", 1)
# Opaque effects used by lowered code and tensor intrinsics.
INTRINSICS["tvm_storage_sync"] = IntrinsicInfo("tvm_storage_sync", 1, pure=False)
# call_extern("c_function_name", args...): a call into C (tensor intrinsic micro-kernels).
INTRINSICS["call_extern"] = IntrinsicInfo("call_extern", -1, pure=False)
# warp_reduce("sum" | "max" | "min", value, width): the reduction of value over the `width` (a
# power of two, 2 to 32) threads of the calling thread's warp, returned to every one of them; like
# a barrier, every one of those threads must reach it.
INTRINSICS["warp_reduce"] = IntrinsicInfo("warp_reduce", 3, pure=False)
# address_of(BufferLoad): the address of that element, for passing to call_extern.
INTRINSICS["address_of"] = IntrinsicInfo("address_of", 1)
# prefetch(BufferLoad): a hint that the element will be read soon (its cache line is fetched ahead);
# a statement (Evaluate) only, no effect on any value; the element must be in bounds like a load's.
INTRINSICS["prefetch"] = IntrinsicInfo("prefetch", 1, pure=False)


def is_pure_call(op: str) -> bool:
    info = INTRINSICS.get(op)
    return info.pure if info is not None else False


