"""Hand-built lowered IR (1-D buffers, no blocks) for the C backend's tests."""
from __future__ import annotations

from refcomp.ast import (
    Broadcast, Buffer, BufferStore, Call, For, IntImm, PrimFunc, Ramp, SizeVar, Var,
)


def unary_kernel(op: str, dtype: str = "float32", lanes: int = 1, kind: str = "serial",
                 name: str = "unary") -> PrimFunc:
    """B[i] = op(A[i]) over n elements (n a multiple of lanes when lanes > 1)."""
    n = SizeVar("n", "int32")
    if lanes == 1:
        A = Buffer("A", (n,), dtype)
        B = Buffer("B", (n,), dtype)
        i = Var("i", "int32")
        return PrimFunc((A, B), For(i, 0, n, kind, BufferStore(B, Call(op, (A[i],), dtype), (i,))), name)
    A = Buffer("A", (n * lanes,), dtype)
    B = Buffer("B", (n * lanes,), dtype)
    i = Var("i", "int32")
    index = Ramp(i * lanes, IntImm(1), lanes)
    value = Call(op, (A[index],), f"{dtype}x{lanes}")
    return PrimFunc((A, B), For(i, 0, n, kind, BufferStore(B, value, (index,))), name)


def binary_kernel(fn, dtype: str = "float32", out_dtype: str | None = None, lanes: int = 1,
                  name: str = "binary") -> PrimFunc:
    """C[i] = fn(A[i], B[i]); with lanes > 1 the same on Ramp vectors."""
    n = SizeVar("n", "int32")
    size = n if lanes == 1 else n * lanes
    A, B = Buffer("A", (size,), dtype), Buffer("B", (size,), dtype)
    C = Buffer("C", (size,), out_dtype or dtype)
    i = Var("i", "int32")
    index = i if lanes == 1 else Ramp(i * lanes, IntImm(1), lanes)
    return PrimFunc((A, B, C), For(i, 0, n, "serial", BufferStore(C, fn(A[index], B[index]), (index,))), name)


def broadcast(value, lanes: int):
    return Broadcast(value, lanes)
