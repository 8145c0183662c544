"""Struct-info inference support: the context a shape rule asks, and the lattice operations.

A shape rule never decides a symbolic relation itself; it asks the `InferContext`:

- proved: fine, nothing recorded;
- disproved: a `ShapeError` naming the op, the relation and the counterexample;
- unknown: a `RuntimeCheck` is recorded and the VM evaluates it once the size vars are bound.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from ..ast import expr as tir
from ..ast.graph import Call, Expr
from ..ast.graph_script import format_prim_expr
from ..ast.graph_struct_info import (
    FuncStructInfo, ObjectStructInfo, PrimStructInfo, ShapeStructInfo, StructInfo, TensorStructInfo,
    TupleStructInfo, as_dim,
)
from ..errors import IRError, ShapeError
from .shape_facts import Decision, const_value, decide_equal, is_const, prove


@dataclass(frozen=True)
class RuntimeCheck:
    """A shape relation the prover could not decide, checked by the VM when its vars are bound."""

    condition: tir.PrimExpr
    message: str


@dataclass
class InferContext:
    """What a shape rule may ask while inferring one call; collects runtime checks."""

    call: Call | None = None
    ir: Any = None
    assumptions: tuple = ()
    runtime_checks: list[RuntimeCheck] = field(default_factory=list)

    @property
    def op_name(self) -> str:
        return self.call.op_name if self.call is not None and self.call.op_name else "call"

    def fail(self, message: str, *, counterexample: dict | None = None, hint: str | None = None,
             kind: type = ShapeError):
        """Raise a typed error about the current call (its IR shown with the call marked)."""
        from ..ast.graph_script import format_expr

        where = f"\n  in: {format_expr(self.call)}" if self.call is not None else ""
        raise kind(f"R.{self.op_name}: {message}{where}", counterexample=counterexample, hint=hint,
                   ir=self.ir if self.ir is not None else self.call, spot=self.call)

    def require(self, condition: tir.PrimExpr, what: str, hint: str | None = None, strict: bool = False) -> bool:
        """Ask that condition hold; True when proved, False when deferred to a runtime check.

        strict: any counterexample is an error (used for equalities between dims, which the user
        must state with one size var or a match_cast).  Otherwise only a condition that can never
        hold is an error, and one that holds for some sizes becomes a runtime check.
        """
        decision: Decision = prove(condition, self.assumptions)
        if decision.proved:
            return True
        if decision.disproved:
            if strict:
                self.fail(f"{what} does not hold", counterexample=decision.counterexample, hint=hint)
            never = prove(tir.Not(condition), self.assumptions)
            if never.proved:
                self.fail(f"{what} never holds", counterexample=decision.counterexample, hint=hint)
        self.runtime_checks.append(RuntimeCheck(condition, f"R.{self.op_name}: {what}"))
        return False

    def require_equal(self, a: tir.PrimExpr, b: tir.PrimExpr, what: str, hint: str | None = None) -> bool:
        """Ask that a == b; raise on a refutation, defer when undecided, True when proved."""
        decision = decide_equal(a, b, self.assumptions)
        if decision.proved:
            return True
        relation = f"{what}: {format_prim_expr(a)} == {format_prim_expr(b)}"
        if decision.disproved:
            self.fail(f"{relation} does not hold", counterexample=decision.counterexample,
                      hint=hint or "if they are equal at run time, say so with R.match_cast")
        self.runtime_checks.append(RuntimeCheck(tir.EQ(*_int64(a, b)), f"R.{self.op_name}: {relation}"))
        return False

    def equal(self, a: tir.PrimExpr, b: tir.PrimExpr) -> bool:
        """True only when a == b is proved (no error, no check): for choosing between rules."""
        return decide_equal(a, b, self.assumptions).proved

    def tensor(self, index: int, what: str | None = None) -> TensorStructInfo:
        """The struct info of argument `index`, which must be a tensor."""
        call = self.call
        if index >= len(call.args):
            self.fail(f"expects at least {index + 1} arguments, got {len(call.args)}", kind=IRError)
        info = call.args[index].struct_info
        if not isinstance(info, TensorStructInfo):
            self.fail(f"argument {index}{' (' + what + ')' if what else ''} must be a tensor, got {info}",
                      kind=IRError)
        return info

    def attr(self, key: str, default: Any = ...) -> Any:
        """An attribute of the current call (an IRError when missing and no default is given)."""
        if key in self.call.attrs:
            return self.call.attrs[key]
        if default is ...:
            self.fail(f"missing attribute {key!r}", kind=IRError)
        return default

    def axis(self, axis: int, ndim: int, what: str = "axis") -> int:
        """A possibly negative axis normalized into [0, ndim)."""
        if not isinstance(axis, int) or not -ndim <= axis < max(ndim, 1):
            self.fail(f"{what} {axis!r} is out of range for a {ndim}-d tensor", kind=IRError)
        return axis % ndim if ndim else 0


def _int64(a: tir.PrimExpr, b: tir.PrimExpr):
    return as_dim(a), as_dim(b)


def dim(value: Any) -> tir.PrimExpr:
    """A dim as an int64 expression."""
    return as_dim(value)


def broadcast_shapes(ctx: InferContext, shapes: Sequence[tuple[tir.PrimExpr, ...]]) -> tuple:
    """Numpy broadcasting of symbolic shapes; every pair of dims must be equal or one of them 1."""
    ndim = max(len(s) for s in shapes)
    out = []
    for k in range(ndim):
        dims = [s[len(s) - ndim + k] for s in shapes if len(s) - ndim + k >= 0]
        result = None
        for d in dims:
            if result is None or is_const(result, 1):
                result = d
            elif is_const(d, 1) or ctx.equal(result, d):
                continue
            else:
                cond = tir.Or(tir.EQ(*_int64(result, d)), tir.Or(tir.EQ(as_dim(result), as_dim(1)),
                                                                 tir.EQ(as_dim(d), as_dim(1))))
                ctx.require(cond, f"dims {format_prim_expr(result)} and {format_prim_expr(d)} broadcast "
                                  f"(axis {k - ndim}: equal, or one of them 1)",
                            hint="if they are equal at run time, say so with R.match_cast", strict=True)
                result = tir.Max(as_dim(result), as_dim(d))
        out.append(result)
    return tuple(out)


# ----------------------------------------------------------------------------- lattice

def lca(a: StructInfo, b: StructInfo) -> StructInfo:
    """The most precise info that both a and b satisfy (the join, for If branches)."""
    if a is b:
        return a
    if isinstance(a, TensorStructInfo) and isinstance(b, TensorStructInfo):
        dtype = a.dtype if a.dtype == b.dtype else None
        ndim = a.ndim if a.ndim == b.ndim else -1
        shape = None
        if a.shape is not None and b.shape is not None and len(a.shape) == len(b.shape):
            if all(decide_equal(x, y).proved for x, y in zip(a.shape, b.shape)):
                shape = a.shape
        return TensorStructInfo(shape, dtype, ndim)
    if isinstance(a, ShapeStructInfo) and isinstance(b, ShapeStructInfo):
        if a.values is not None and b.values is not None and len(a.values) == len(b.values) and all(
                decide_equal(x, y).proved for x, y in zip(a.values, b.values)):
            return a
        return ShapeStructInfo(None, a.ndim if a.ndim == b.ndim else -1)
    if isinstance(a, PrimStructInfo) and isinstance(b, PrimStructInfo) and a.dtype == b.dtype:
        if a.value is not None and b.value is not None and decide_equal(a.value, b.value).proved:
            return a
        return PrimStructInfo(a.dtype)
    if isinstance(a, TupleStructInfo) and isinstance(b, TupleStructInfo) and len(a.fields) == len(b.fields):
        return TupleStructInfo(tuple(lca(x, y) for x, y in zip(a.fields, b.fields)))
    if isinstance(a, FuncStructInfo) and isinstance(b, FuncStructInfo):
        return FuncStructInfo(None, lca(a.ret, b.ret), a.purity and b.purity)
    return ObjectStructInfo()


def base_check(base: StructInfo, derived: StructInfo) -> str:
    """How `derived` relates to `base`: "pass", "runtime" (needs a symbolic check) or "fail" (static)."""
    if isinstance(base, ObjectStructInfo):
        return "pass"
    if isinstance(base, TensorStructInfo):
        if not isinstance(derived, TensorStructInfo):
            return "fail"
        if base.dtype is not None and derived.dtype is not None and base.dtype != derived.dtype:
            return "fail"
        if base.ndim != -1 and derived.ndim != -1 and base.ndim != derived.ndim:
            return "fail"
        if base.shape is None:
            return "pass" if (base.dtype is None or derived.dtype is not None) and (
                base.ndim == -1 or derived.ndim != -1) else "runtime"
        if derived.shape is None or derived.dtype is None and base.dtype is not None:
            return "runtime"
        verdict = "pass"
        for x, y in zip(base.shape, derived.shape):
            d = decide_equal(x, y)
            if d.disproved and const_value(x) is not None and const_value(y) is not None:
                return "fail"
            if not d.proved:
                verdict = "runtime"
        return verdict
    if isinstance(base, TupleStructInfo):
        if not isinstance(derived, TupleStructInfo) or len(base.fields) != len(derived.fields):
            return "fail"
        results = [base_check(x, y) for x, y in zip(base.fields, derived.fields)]
        return "fail" if "fail" in results else "runtime" if "runtime" in results else "pass"
    if isinstance(base, ShapeStructInfo):
        if not isinstance(derived, ShapeStructInfo):
            return "fail"
        if base.ndim != -1 and derived.ndim != -1 and base.ndim != derived.ndim:
            return "fail"
        return "pass" if base.values is None else "runtime"
    if isinstance(base, PrimStructInfo):
        if not isinstance(derived, PrimStructInfo):
            return "fail"
        return "pass" if base.dtype == derived.dtype else "fail"
    return "pass" if type(base) is type(derived) else "fail"


def expr_is_tensor(e: Expr) -> bool:
    return isinstance(e.struct_info, TensorStructInfo)
