"""prefetch(load, write): a statement that fetches the element's cache line ahead of its use.

It changes no value: the interpreter skips it, C emits GCC's `__builtin_prefetch` (also in the
strict C99 target, whose warnings are errors), and the element
must be in bounds like a load's (bounds="prove" refuses one that may not be).
"""
import numpy as np
import pytest

import refcomp
from refcomp.ast import Buffer, BufferStore, Call, Evaluate, For, IntImm, PrimFunc, SizeVar, Var, min_, seq
from refcomp.errors import BuildError, ShapeError
from refcomp.loops.interpreter import interpret

AHEAD = 16


def doubling(ahead_index) -> PrimFunc:
    """B[i] = 2 A[i], prefetching A[ahead_index(i, n)] before each element."""
    n = SizeVar("n", "int64")
    a, b = Buffer("A", (n,), "float32"), Buffer("B", (n,), "float32")
    i = Var("i", "int64")
    body = seq(Evaluate(Call("prefetch", (a[ahead_index(i, n)], IntImm(0, "int32")), "int32")),
               BufferStore(b, a[i] * 2.0, (i,)))
    return PrimFunc((a, b), For(i, IntImm(0, "int64"), n, "serial", body), "doubling")


def clamped(i, n):
    return min_(i + AHEAD, n - 1)


@pytest.mark.parametrize("target", ["c", "c -std=c99"])
@pytest.mark.parametrize("n", [1, 7, 100, 1000])
def test_prefetch_changes_no_value_in_c_and_in_the_interpreter(n, target, rng):
    func = doubling(clamped)
    lib = refcomp.build(func, target=target, bounds="prove")
    assert "__builtin_prefetch(&A[" in lib.source
    a = rng.standard_normal(n).astype("float32")
    out, ref = np.zeros(n, "float32"), np.zeros(n, "float32")
    lib(a, out)
    interpret(func, a, ref)
    np.testing.assert_array_equal(out, a * 2)
    np.testing.assert_array_equal(ref, a * 2)


def test_prefetch_out_of_bounds_is_refused_by_the_prover():
    with pytest.raises(ShapeError, match=r"A\[i \+ 16\]"):
        refcomp.build(doubling(lambda i, n: i + AHEAD), bounds="prove")


def test_prefetch_as_a_value_is_a_build_error():
    n = SizeVar("n", "int64")
    a, b = Buffer("A", (n,), "int32"), Buffer("B", (n,), "int32")
    i = Var("i", "int64")
    body = BufferStore(b, Call("prefetch", (a[i], IntImm(0, "int32")), "int32"), (i,))
    with pytest.raises(BuildError, match="prefetch is a statement"):
        refcomp.build(PrimFunc((a, b), For(i, IntImm(0, "int64"), n, "serial", body), "bad"))
