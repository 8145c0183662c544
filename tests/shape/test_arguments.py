"""The one argument checker: the interpreter and a compiled kernel refuse the same calls with the
same message; only what raw pointers need (layout, aliasing) differs."""
import re

import numpy as np
import pytest

import refcomp
from refcomp import ArgumentError, te
from refcomp.ast import Buffer, BufferStore, For, PrimFunc, SizeVar, Var
from refcomp.shape.arguments import Signature

_LIBS = {}


def scaled():
    """B[i, j] = A[i, j] * alpha + k, A and B (n, 4); stated: n % 2 == 0."""
    if "func" not in _LIBS:
        n = te.var("n")
        A = te.placeholder((n, 4), "float32", "A")
        alpha, k = te.var("alpha", "float32"), te.var("k", "int16")
        B = te.compute((n, 4), lambda i, j: A[i, j] * alpha + k.astype("float32"), name="B")
        func = te.create_prim_func([A, alpha, k, B]).with_attr("assumptions", (n % 2 == 0,))
        _LIBS["func"] = func
        _LIBS["lib"] = refcomp.build(func)
    return _LIBS["func"], _LIBS["lib"]


def _message(call) -> str:
    with pytest.raises(ArgumentError) as info:
        call()
    return str(info.value)


BAD_CALLS = {
    "dtype": (lambda a, b: ((a.astype(np.float64), 1.0, 1, b), {}), r"A: expected dtype float32, got float64"),
    "ndim": (lambda a, b: ((a[:, :, None], 1.0, 1, b), {}), r"A: expected 2 dimensions \(n, 4\), got 3"),
    "shape": (lambda a, b: ((a, 1.0, 1, b[:, :3]), {}),
              r"B: expected shape \(n, 4\) = \(6, 4\) with n = 6 bound from A.shape\[0\], got \(6, 3\)"),
    "not an array": (lambda a, b: ((a.tolist(), 1.0, 1, b), {}), r"A: expected a numpy array of float32"),
    "too many": (lambda a, b: ((a, 1.0, 1, b, b), {}), r"expected 4 arguments \(A, alpha, k, B\), got 5"),
    "missing": (lambda a, b: ((a, 1.0), {}), r"got 2; missing k, B"),
    "unexpected": (lambda a, b: ((a, 1.0, 1, b), {"C": b}), r"unexpected argument 'C'; parameters are A, alpha, k, B"),
    "twice": (lambda a, b: ((a, 1.0, 1, b), {"k": 2}), r"argument k given twice"),
    "float for int": (lambda a, b: ((a, 1.0, 1.5, b), {}), r"k: expected an integer \(int16\), got float 1.5"),
    "bool for int": (lambda a, b: ((a, 1.0, True, b), {}), r"k: expected an integer"),
    "range": (lambda a, b: ((a, 1.0, 40000, b), {}), r"k: 40000 does not fit in int16"),
    "text for float": (lambda a, b: ((a, "x", 1, b), {}), r"alpha: expected a number \(float32\)"),
    "size var": (lambda a, b: ((a, 1.0, 1, b), {"n": 4}), r"A: expected shape \(n, 4\) = \(4, 4\)"),
    "precondition": (lambda a, b: ((a[:5], 1.0, 1, b[:5]), {}), r"precondition n % 2 == 0 does not hold \(n = 5\)"),
}


@pytest.mark.parametrize("case", BAD_CALLS)
def test_interpreter_and_compiled_kernel_refuse_alike(case, rng):
    func, lib = scaled()
    make, pattern = BAD_CALLS[case]
    a = rng.standard_normal((6, 4)).astype(np.float32)
    b = rng.standard_normal((6, 4)).astype(np.float32)
    args, kwargs = make(a, b)
    interpreted = _message(lambda: refcomp.interpret(func, *args, **kwargs))
    compiled = _message(lambda: lib(*args, **kwargs))
    assert interpreted == compiled
    assert interpreted.startswith(f"{func.name}: ") or "precondition" in interpreted
    assert re.search(pattern, interpreted), interpreted


def test_good_calls_agree(rng):
    func, lib = scaled()
    a = rng.standard_normal((6, 4)).astype(np.float32)
    want, got = np.zeros_like(a), np.zeros_like(a)
    refcomp.interpret(func, a, 2.0, -3, want)
    lib(a, 2.0, -3, got)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    refcomp.interpret(func, a, want, alpha=1.0, k=2)  # buffers by position, scalars by name
    np.testing.assert_allclose(want, a + 2, rtol=1e-6)


def _copy():
    n = SizeVar("n", "int32")
    A, B = Buffer("A", (n,), "float32"), Buffer("B", (n,), "float32")
    i = Var("i", "int32")
    return PrimFunc((A, B), For(i, 0, n, "serial", BufferStore(B, A[i] + 1.0, (i,))), "copy")


def test_raw_pointers_need_contiguous_separate_arrays_and_copies_do_not(rng):
    func = _copy()
    pointers, copies = Signature(func), Signature(func, raw_pointers=False)
    storage = rng.standard_normal(16).astype(np.float32)
    strided, out = storage[::2], np.zeros(8, np.float32)
    with pytest.raises(ArgumentError, match=r"copy: A: expected a C-contiguous array"):
        pointers.bind((strided, out), {})
    assert copies.bind((strided, out), {}).env == {func.buffers[0].shape[0]: 8}
    with pytest.raises(ArgumentError, match=r"copy: A and B overlap in memory, but the kernel writes B"):
        pointers.bind((storage, storage), {})
    copies.bind((storage, storage), {})  # one buffer, updated in place
    with pytest.raises(ArgumentError, match=r"copy: A and B overlap in memory; pass separate arrays"):
        copies.bind((storage[:8], storage[4:12]), {})
    read_only = np.zeros(8, np.float32)
    read_only.flags.writeable = False
    for signature in (pointers, copies):
        with pytest.raises(ArgumentError, match=r"copy: B: the kernel writes this buffer, but the array is read-only"):
            signature.bind((out, read_only), {})


def test_size_variables_solved_from_affine_dims_or_given_by_name():
    n = SizeVar("n", "int32")
    A = Buffer("A", (n * 3 + 1,), "float32")
    i = Var("i", "int32")
    func = PrimFunc((A,), For(i, 0, n, "serial", BufferStore(A, A[i] * 2.0, (i,))), "affine")
    signature = Signature(func)
    assert signature.bind((np.zeros(13, np.float32),), {}).env == {n: 4}
    assert signature.bind((np.zeros(13, np.float32),), {"n": 4}).env == {n: 4}
    with pytest.raises(ArgumentError, match=r"affine: A: cannot bind n in shape \(\(n \* 3\) \+ 1\) from the arrays"):
        signature.bind((np.zeros(12, np.float32),), {})
    with pytest.raises(ArgumentError, match=r"affine: A: expected shape \(\(n \* 3\) \+ 1,\) = \(10,\) with n = 3 "
                                            r"bound from the argument n, got \(13,\)"):
        signature.bind((np.zeros(13, np.float32),), {"n": 3})
    with pytest.raises(ArgumentError, match=r"affine: size variable n = -1 is negative"):
        signature.bind((np.zeros(13, np.float32),), {"n": -1})
