"""Random expression trees, compiled scalar and as 8-lane vectors, against the interpreter.

hypothesis draws integer and float32 expression trees over two input buffers; several trees go
into one kernel (one output each) so a draw costs one compile per target.  Integer results must
match exactly in both targets; float32 results exactly in strict C99 (ISO mode: no FMA
contraction, so every operation rounds as the interpreter's does).
"""
import os

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import refcomp
from refcomp.ast import (
    Broadcast, Buffer, BufferStore, Cast, FloatImm, For, IntImm, PrimFunc, Ramp, Select, SizeVar, Var,
    floordiv, floormod, max_, min_, seq, truncdiv, truncmod,
)

LANES = 8
# Draws per test (each costs compiles); raise it to hunt for bugs: REFCOMP_RANDOM_EXPRS=50
EXAMPLES = int(os.environ.get("REFCOMP_RANDOM_EXPRS", "4"))
OUTPUTS = 4
INT_BINARY = ("add", "sub", "mul", "floordiv", "floormod", "truncdiv", "truncmod", "min", "max")
FLOAT_BINARY = ("add", "sub", "mul", "div", "min", "max")


def trees(kind: str):
    if kind == "float":
        constants = st.floats(-100, 100, width=32)
    else:
        info = np.iinfo(kind)
        # powers of two drawn often, and their negatives: the divisors the emitter shifts by
        pow2 = st.integers(1, min(info.bits - 2, 12)).map(lambda k: 1 << k)
        constants = st.one_of(st.integers(max(info.min, -1000), min(info.max, 1000)), pow2,
                              pow2.map(lambda v: -v) if info.min < 0 else pow2)
    leaves = st.one_of(st.sampled_from([("load", "A"), ("load", "B")]), constants.map(lambda v: ("const", v)))
    ops = FLOAT_BINARY if kind == "float" else INT_BINARY

    def extend(children):
        binary = st.tuples(st.sampled_from(ops), children, children)
        select = st.tuples(st.just("select"), children, children, children, children)
        logic = st.tuples(st.just("logic"), children, children, children, children)
        cast = st.tuples(st.just("cast"), children)
        return st.one_of(binary, select, logic, cast)
    return st.recursive(leaves, extend, max_leaves=8)


def build(tree, kind, loads, const):
    """IR of tree; loads maps a buffer name to its load, const makes a constant."""
    tag = tree[0]
    if tag == "load":
        return loads[tree[1]]
    if tag == "const":
        return const(tree[1])
    if tag == "select":
        a, b, c, d = (build(t, kind, loads, const) for t in tree[1:])
        return Select(a < b, c, d)
    if tag == "logic":  # (a <= b and not c == d) or a > d
        a, b, c, d = (build(t, kind, loads, const) for t in tree[1:])
        return Select(((a <= b) & ~(c == d)) | (a > d), a, d)
    if tag == "cast":  # through float64 (saturating back) or through int32 (wrapping back)
        a = build(tree[1], kind, loads, const)
        lanes = a.dtype.lanes
        via = "int32" if kind == "float" else "float64"
        middle = Cast(f"{via}x{lanes}" if lanes > 1 else via, a)
        return Cast(a.dtype, middle)
    a, b = build(tree[1], kind, loads, const), build(tree[2], kind, loads, const)
    if tag in ("floordiv", "floormod", "truncdiv", "truncmod") and not (tree[2][0] == "const" and tree[2][1]):
        zero, one = const(0), const(1)
        b = Select(b == zero, one, b)  # the IR makes x // 0 an error; keep divisors nonzero
        # (a nonzero constant stays one: the emitter's constant-divisor forms, 2^k's shifts too)
    return {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b, "div": lambda: a / b,
            "floordiv": lambda: floordiv(a, b), "floormod": lambda: floormod(a, b),
            "truncdiv": lambda: truncdiv(a, b), "truncmod": lambda: truncmod(a, b),
            "min": lambda: min_(a, b), "max": lambda: max_(a, b)}[tag]()


def kernel(expressions, kind, vector):
    dtype = "float32" if kind == "float" else kind
    n = SizeVar("n", "int32")
    size = n * LANES if vector else n
    A, B = Buffer("A", (size,), dtype), Buffer("B", (size,), dtype)
    outs = [Buffer(f"O{k}", (size,), dtype) for k in range(len(expressions))]
    i = Var("i", "int32")
    index = Ramp(i * LANES, IntImm(1), LANES) if vector else i
    loads = {"A": A[index], "B": B[index]}

    def const(v):
        scalar = FloatImm(float(v), dtype) if kind == "float" else IntImm(int(v), dtype)
        return Broadcast(scalar, LANES) if vector else scalar
    stores = [BufferStore(out, build(t, kind, loads, const), (index,)) for out, t in zip(outs, expressions)]
    return PrimFunc((A, B, *outs), For(i, 0, n, "serial", seq(*stores)), f"rand_{kind}_{int(vector)}")


def check(kind, expressions, data, targets):
    dtype = np.float32 if kind == "float" else np.dtype(kind)
    for vector in (False, True):
        func = kernel(expressions, kind, vector)
        count = 3 * LANES
        if kind != "float":
            info = np.iinfo(kind)
            values = st.lists(st.integers(int(info.min), int(info.max)), min_size=count, max_size=count)
            a = np.array(data.draw(values), dtype)
            b = np.array(data.draw(values), dtype)
        else:
            floats = st.floats(-1e6, 1e6, width=32, allow_subnormal=True)
            a = np.array(data.draw(st.lists(floats, min_size=count, max_size=count)), dtype)
            b = np.array(data.draw(st.lists(floats, min_size=count, max_size=count)), dtype)
        want = [np.zeros(count, dtype) for _ in expressions]
        with np.errstate(all="ignore"):
            refcomp.interpret(func, a, b, *want, n=3 if vector else count)
        for target in targets:
            lib = refcomp.build(func, target=target, bounds="off")
            got = [np.full(count, 7, dtype) for _ in expressions]
            lib(a, b, *got)
            for k, (g, w) in enumerate(zip(got, want)):
                np.testing.assert_array_equal(g, w, err_msg=f"{target} vector={vector} output {k}: {expressions[k]}")


@pytest.mark.parametrize("kind", ["int32", "int8", "uint16"])
def test_random_integer_expressions(kind):
    @settings(max_examples=EXAMPLES)
    @given(expressions=st.lists(trees(kind), min_size=OUTPUTS, max_size=OUTPUTS), data=st.data())
    def run(expressions, data):
        check(kind, expressions, data, ["c", "c -std=c99"])
    run()


@settings(max_examples=EXAMPLES)
@given(expressions=st.lists(trees("float"), min_size=OUTPUTS, max_size=OUTPUTS), data=st.data())
def test_random_float_expressions_exact_in_strict_c99(expressions, data):
    check("float", expressions, data, ["c -std=c99"])
