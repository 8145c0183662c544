"""Test programs for the lowering passes, and hand-written schedule steps (loop kinds, splits).

The steps here stand in for `refcomp.Schedule` primitives in these tests: they rewrite the loops of
a te-made PrimFunc the way split / parallel / vectorize do, without any legality checks.
"""
from __future__ import annotations

from refcomp import te
from refcomp.ast import (
    And, BlockRealize, For, IntImm, Mutator, PrimFunc, Var, substitute,
)
from refcomp.ast.expr import as_int


class _Rewriter(Mutator):
    def __init__(self, name: str, rewrite, occurrence: int) -> None:
        super().__init__()
        self.name, self.rewrite, self.occurrence, self.count = name, rewrite, occurrence, 0

    def visit_For(self, loop: For):
        mine = loop.loop_var.name == self.name
        if mine:
            self.count += 1
        index = self.count - 1
        body = self.visit(loop.body)
        loop = loop.with_(body=body)
        if mine and index == self.occurrence:
            return self.rewrite(loop)
        return loop


def _apply(func: PrimFunc, name: str, rewrite, occurrence: int = 0) -> PrimFunc:
    """Rewrite the occurrence-th loop (in program order) whose var is called name."""
    rewriter = _Rewriter(name, rewrite, occurrence)
    body = rewriter.visit(func.body)
    assert rewriter.count > occurrence, f"no loop {name} number {occurrence} (found {rewriter.count})"
    return func.with_(body=body)


def with_kind(func: PrimFunc, name: str, kind: str, thread: str | None = None, occurrence: int = 0) -> PrimFunc:
    """func with the loop called name turned into a loop of the given kind."""
    return _apply(func, name, lambda loop: loop.with_(kind=kind, thread_binding=thread), occurrence)


def split(func: PrimFunc, name: str, factor: int, occurrence: int = 0, guard: bool = False) -> PrimFunc:
    """func with loop `name` split into `name_o` * factor + `name_i` (a predicate if imperfect or guard)."""

    def rewrite(loop: For) -> For:
        var = loop.loop_var
        outer, inner = Var(var.name + "_o", var.dtype), Var(var.name + "_i", var.dtype)
        extent = loop.extent
        count = as_int(extent)
        outer_extent = (count + factor - 1) // factor if count is not None else (extent + (factor - 1)) // factor
        fused = outer * factor + inner
        perfect = count is not None and count % factor == 0
        body = substitute(loop.body, {var: fused})
        if guard or not perfect:
            body = _Guard(fused < extent).visit(body)
        return For(outer, IntImm(0, var.dtype), outer_extent, "serial",
                   For(inner, IntImm(0, var.dtype), factor, "serial", body))

    return _apply(func, name, rewrite, occurrence)


class _Guard(Mutator):
    def __init__(self, condition) -> None:
        super().__init__()
        self.condition = condition

    def visit_BlockRealize(self, realize: BlockRealize):
        predicate = realize.predicate
        new = self.condition if as_int(predicate) == 1 else And(predicate, self.condition)
        return realize.with_(predicate=new)


# ----------------------------------------------------------------------------- programs (te)

def elementwise(n=None, dtype="float32"):
    n = te.size_var("n") if n is None else n
    A = te.placeholder((n,), dtype, "A")
    B = te.placeholder((n,), dtype, "B")
    C = te.compute((n,), lambda i: A[i] * B[i] + A[i], name="C")
    return te.create_prim_func([A, B, C])


def row_sum(m=6, n=10, reducer="sum"):
    A = te.placeholder((m, n), "float32", "A")
    k = te.reduce_axis(n, "k")
    fn = getattr(te, reducer)
    B = te.compute((m,), lambda i: fn(A[i, k], axis=k), name="B")
    return te.create_prim_func([A, B])


def matmul(m=8, n=12, k=6):
    A = te.placeholder((m, k), "float32", "A")
    B = te.placeholder((k, n), "float32", "B")
    r = te.reduce_axis(k, "k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return te.create_prim_func([A, B, C])


def softmax(m=4, n=16):
    A = te.placeholder((m, n), "float32", "A")
    k1 = te.reduce_axis(n, "k1")
    k2 = te.reduce_axis(n, "k2")
    M = te.compute((m,), lambda i: te.max(A[i, k1], axis=k1), name="M")
    E = te.compute((m, n), lambda i, j: te.exp(A[i, j] - M[i]), name="E")
    S = te.compute((m,), lambda i: te.sum(E[i, k2], axis=k2), name="S")
    O = te.compute((m, n), lambda i, j: E[i, j] / S[i], name="O")
    return te.create_prim_func([A, O])


def conv2d_padded(h=6, w=7, c=2, f=3, kh=3, kw=3):
    X = te.placeholder((c, h, w), "float32", "X")
    W = te.placeholder((f, c, kh, kw), "float32", "W")
    P = te.compute(
        (c, h + 2, w + 2),
        lambda ci, y, x: te.if_then_else(
            te.all(y >= 1, y < h + 1, x >= 1, x < w + 1), X[ci, y - 1, x - 1], te.const(0.0, "float32")),
        name="P")
    rc, ry, rx = te.reduce_axis(c, "rc"), te.reduce_axis(kh, "ry"), te.reduce_axis(kw, "rx")
    Y = te.compute((f, h, w), lambda fo, y, x: te.sum(P[rc, y + ry, x + rx] * W[fo, rc, ry, rx],
                                                       axis=[rc, ry, rx]), name="Y")
    return te.create_prim_func([X, W, Y])
