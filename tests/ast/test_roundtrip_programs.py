"""Real programs (te-built, scheduled, lowered) survive the script round trip and compute the same.

Each program is printed, parsed back, compared structurally, checked well-formed, and both the
original and the parsed function are run by the interpreter on the same fresh random data.
"""
import numpy as np
import pytest

import refcomp
from refcomp import te
from refcomp.ast.parser import from_source
from refcomp.ast.wellformed import verify_well_formed
from script_helpers import roundtrip


def elementwise():
    n = te.size_var("n")
    A = te.placeholder((n, 8), "float32", "A")
    B = te.compute((n, 8), lambda i, j: te.exp(A[i, j]) * 2.0 + 1.0, name="B")
    return te.create_prim_func([A, B]), {"n": 5}


def softmax():
    A = te.placeholder((3, 16), "float32", "A")
    k1, k2 = te.reduce_axis(16, "k1"), te.reduce_axis(16, "k2")
    M = te.compute((3,), lambda i: te.max(A[i, k1], axis=k1), name="M")
    E = te.compute((3, 16), lambda i, j: te.exp(A[i, j] - M[i]), name="E")
    S = te.compute((3,), lambda i: te.sum(E[i, k2], axis=k2), name="S")
    O = te.compute((3, 16), lambda i, j: E[i, j] / S[i], name="O")
    return te.create_prim_func([A, O]), {}


def matmul():
    A = te.placeholder((8, 6), "float32", "A")
    B = te.placeholder((6, 4), "float32", "B")
    k = te.reduce_axis(6, "k")
    C = te.compute((8, 4), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return te.create_prim_func([A, B, C]), {}


def conv2d_padded():
    X = te.placeholder((1, 2, 6, 6), "float32", "X")
    W = te.placeholder((3, 2, 3, 3), "float32", "W")
    P = te.compute((1, 2, 8, 8), lambda n, c, h, w: te.if_then_else(
        te.all(h >= 1, h < 7, w >= 1, w < 7), X[n, c, h - 1, w - 1], 0.0), name="P")
    rc, rh, rw = te.reduce_axis(2, "rc"), te.reduce_axis(3, "rh"), te.reduce_axis(3, "rw")
    Y = te.compute((1, 3, 6, 6), lambda n, f, h, w: te.sum(
        P[n, rc, h + rh, w + rw] * W[f, rc, rh, rw], axis=[rc, rh, rw]), name="Y")
    return te.create_prim_func([X, W, Y]), {}


def int_index_maps():
    A = te.placeholder((4, 6), "int32", "A")
    T = te.compute((6, 4), lambda i, j: A[j, i] // 3 - te.truncmod(A[j, i], 4), name="T")
    R = te.compute((24,), lambda i: T[i // 4, i % 4].astype("int8").astype("int32"), name="R")
    return te.create_prim_func([A, R]), {}


def scheduled_matmul():
    func, sizes = matmul()
    sch = refcomp.Schedule(func)
    i, j, k = sch.get_loops(sch.get_block("C"))
    io, ii = sch.split(i, [None, 4])
    sch.reorder(io, j, ii, k)
    sch.parallel(io)
    return sch.func, sizes


def scheduled_softmax():
    func, sizes = softmax()
    sch = refcomp.Schedule(func)
    for name in ("E", "O"):
        _, j = sch.get_loops(sch.get_block(name))
        jo, ji = sch.split(j, [None, 8])
        sch.vectorize(ji)
    return sch.func, sizes


PROGRAMS = [elementwise, softmax, matmul, conv2d_padded, int_index_maps, scheduled_matmul, scheduled_softmax]


def random_arrays(func, sizes, rng):
    from refcomp.ast import Buffer, Var

    arrays = []
    for param in func.params:
        if not isinstance(param, Buffer):
            continue
        shape = tuple(int(refcomp.ast.substitute(d, {v: sizes[v.name] for v in refcomp.ast.free_vars(d)}).value)
                      if not isinstance(d, refcomp.ast.IntImm) else d.value for d in param.shape)
        dt = param.dtype.numpy()
        if dt.kind == "f":
            arrays.append(rng.standard_normal(shape).astype(dt))
        else:
            arrays.append(rng.integers(-50, 50, shape).astype(dt))
    return arrays


@pytest.mark.parametrize("build", PROGRAMS, ids=[p.__name__ for p in PROGRAMS])
def test_program_round_trips_and_computes_the_same(build, rng):
    func, sizes = build()
    verify_well_formed(func)
    roundtrip(func)
    parsed = from_source(func.script())
    verify_well_formed(parsed)
    inputs = random_arrays(func, sizes, rng)
    expected = [a.copy() for a in inputs]
    actual = [a.copy() for a in inputs]
    refcomp.interpret(func, *expected)
    refcomp.interpret(parsed, *actual)
    for e, a in zip(expected, actual):
        np.testing.assert_array_equal(e, a)


@pytest.mark.parametrize("build", [matmul, scheduled_softmax, conv2d_padded], ids=["matmul", "softmax", "conv"])
def test_lowered_program_round_trips(build):
    from refcomp.loops.lower import lower

    func, _ = build()
    lowered = lower(func)
    roundtrip(lowered)
