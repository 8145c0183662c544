"""One generator of the inline float32 exponential, its polynomial degree a parameter.

e^x = 2^n e^r with n = round(x / ln 2) and r = x - n ln 2 in [-ln 2 / 2, ln 2 / 2]:
- n by the rounding add: t = x log2(e) + 1.5 * 2^23 holds round(x / ln 2) in its low mantissa
  bits (|x / ln 2| < 2^22), n = t - 1.5 * 2^23; one multiply-add and one subtract, no rounding
  instruction;
- ln 2 in two parts, the first exact in 9 bits, so n * LN2_HI is exact for |n| < 2^15;
- e^r by a polynomial in Horner form whose degree is the caller's: 6, coefficients fitted on that
  interval (relative error 2e-9, the constant and linear terms 1), or 7, the Taylor polynomial
  (truncation below 1e-8 relative);
- 2^n applied by the renderer: from t's bits as one factor (the IR form, for n in the normal
  range [-126, 127], which its caller guarantees), or as the C emitter's full-range scaling.

The caller clamps x first (to the range its scaling takes); the steps themselves are the same
float operations in every renderer.  `exp_steps` writes them through a renderer: `ExprRenderer`
builds a loop-IR expression (a chain of `Let`s), the C emitter's vector helper renders the same
steps as C statements.  Both take x, constants and intermediates as values supporting `+ - *`.
"""
from __future__ import annotations

import math
from typing import Any, Protocol

LOG2E = 1.4426950408889634
LN2_HI = 0.693359375
LN2_LO = -2.1219444005469057e-4
ROUND = 12582912.0  # 1.5 * 2^23: x + ROUND - ROUND rounds x to an integer (|x| < 2^22)
ROUND_BITS = 0x4B400000  # its bits as int32

# the degree of refcomp's float32 exponentials (the C vector helper's, the graph operators' inline one)
FLOAT32_DEGREE = 6

# coefficients of e^r on |r| <= ln 2 / 2, constant term first, by degree
COEFFICIENTS: dict[int, tuple[float, ...]] = {
    6: (1.0, 1.0, 0.49999994, 0.166664317, 0.0416680016, 0.00837416295, 0.00138436444),
    7: tuple(1.0 / math.factorial(k) for k in range(8)),
}


class Renderer(Protocol):
    def const(self, value: float) -> Any:
        """A float32 constant."""

    def bind(self, name: str, value: Any) -> Any:
        """value named: later steps use the result, computed once."""

    def scale(self, p: Any, n: Any, t: Any) -> Any:
        """p * 2^n (t: the rounding add whose low bits hold n)."""


def exp_steps(x: Any, degree: int, out: Renderer) -> Any:
    """e^x for x in the range out's scaling takes, through out: the steps of the module docstring
    with the polynomial of `degree` (a key of COEFFICIENTS); returns out.scale's result."""
    if degree not in COEFFICIENTS:
        from ..errors import InternalError

        raise InternalError(f"exp_steps: degree {degree} has no coefficients; known: {sorted(COEFFICIENTS)}")
    c = out.const
    t = out.bind("et", x * c(LOG2E) + c(ROUND))
    n = out.bind("en", t - c(ROUND))
    r = out.bind("er", (x - n * c(LN2_HI)) - n * c(LN2_LO))
    coefficients = COEFFICIENTS[degree]
    poly = c(coefficients[-1])
    for coefficient in reversed(coefficients[:-1]):
        poly = poly * r + c(coefficient)
    p = out.bind("ep", poly)
    return out.scale(p, n, t)


class ExprRenderer:
    """The steps as one loop-IR float32 expression: each bound step a `Let`, 2^n one factor made
    from t's bits, (bits(t) - ROUND_BITS + 127) << 23 (n in [-126, 127])."""

    def __init__(self) -> None:
        self.lets: list[tuple[Any, Any]] = []

    def const(self, value: float) -> Any:
        from .expr import FloatImm

        return FloatImm(value, "float32")

    def bind(self, name: str, value: Any) -> Any:
        from .expr import Var

        var = Var(name, "float32")
        self.lets.append((var, value))
        return var

    def scale(self, p: Any, n: Any, t: Any) -> Any:
        from .expr import Call, IntImm, Let

        bits = (Call("reinterpret", (t,), "int32") - IntImm(ROUND_BITS - 127, "int32")) * IntImm(1 << 23, "int32")
        result = p * Call("reinterpret", (bits,), "float32")
        for var, value in reversed(self.lets):
            result = Let(var, value, result)
        return result


def exp_expr(x: Any, degree: int) -> Any:
    """e^x as a loop-IR float32 expression of the float32 expression x (n in [-126, 127]: x in
    about [-87, 88]; the caller clamps), the polynomial of `degree`."""
    return exp_steps(x, degree, ExprRenderer())
