"""constant_powers: `pow(x, 2)` and `pow(x, 3)` in a kernel become products.

A power with a constant small integer exponent (GELU's tanh form cubes its input; a variance
squares) is a library call per vector in a vectorized loop, where `x * x * x` is two multiplies.
The products differ from a correctly rounded pow by at most a rounding or two of the last bit.
Only float exponents that are exactly 2 or 3 are rewritten; every other call stays.
"""
from __future__ import annotations

from ...ast import expr as tir
from ...ast.function import PrimFunc
from ...ast.functor import Mutator


class _Powers(Mutator):
    def visit_Call(self, call: tir.Call) -> tir.PrimExpr:
        call = self.generic_visit(call)
        if call.op != "pow" or len(call.args) != 2 or call.dtype.lanes != 1:
            return call
        base, exponent = call.args
        if not isinstance(exponent, tir.FloatImm) or exponent.value not in (2.0, 3.0) or base.dtype != call.dtype:
            return call
        return base * base if exponent.value == 2.0 else base * base * base


def reduce_constant_powers(func: PrimFunc) -> PrimFunc:
    """func with each pow(x, 2.0) / pow(x, 3.0) written as x * x / x * x * x (func itself if none)."""
    body = _Powers().visit(func.body)
    return func if body is func.body else func.with_(body=body)
