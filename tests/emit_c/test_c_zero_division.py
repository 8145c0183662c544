"""Integer division by zero in compiled C: a RuntimeFailure, as in the interpreter, raised before
the statement that divides stores, branches or allocates; a vector store whose lane divides by
zero stores no lane, whatever the machine's register width; divisors that are nonzero constants
keep the unchecked helpers (and `omp simd`)."""
import numpy as np
import pytest

import refcomp
from refcomp import RuntimeFailure
from refcomp.ast import (
    AssertStmt, Buffer, BufferStore, For, IfThenElse, IntImm, LetStmt, PrimFunc, Ramp, SizeVar, Var,
    floordiv, floormod, seq, truncdiv, truncmod,
)
from refcomp.ast.functor import collect
from refcomp.emit_c import EmitOptions, emit, toolchain
from refcomp.emit_c.legalize import split_wide_vectors
from refcomp.loops.interpreter import scalar_only

TARGETS = ["c -Werror", "c -std=c99"]
OPS = {"floordiv": floordiv, "floormod": floormod, "truncdiv": truncdiv, "truncmod": truncmod}
INT_TYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
REGISTER_BYTES = [16, 32, 64]  # SSE/NEON, AVX2, AVX-512: the widths the emitter splits vectors into


def _elementwise(op, dtype, lanes=1, kind="serial"):
    """O[i] = op(A[i], B[i]) over n (or n vectors of `lanes`)."""
    n = SizeVar("n", "int32")
    size = n if lanes == 1 else n * lanes
    A, B, O = (Buffer(name, (size,), dtype) for name in "ABO")
    i = Var("i", "int32")
    index = i if lanes == 1 else Ramp(i * lanes, IntImm(1), lanes)
    body = BufferStore(O, OPS[op](A[index], B[index]), (index,))
    return PrimFunc((A, B, O), For(i, 0, n, kind, body), f"{op}_{dtype}_{lanes}")


def _both_fail_alike(func, arrays, target, scalars=(), sizes=None):
    """Interpreter and compiled code both raise "integer division by zero" and leave equal outputs."""
    interpreted = [a.copy() for a in arrays]
    with pytest.raises(RuntimeFailure, match="integer division by zero"):
        refcomp.interpret(func, *interpreted, *scalars, **(sizes or {}))
    compiled = [a.copy() for a in arrays]
    lib = refcomp.build(func, target=target, bounds="off")
    with pytest.raises(RuntimeFailure, match="integer division by zero"):
        lib(*compiled, *scalars)
    for got, want in zip(compiled, interpreted):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", INT_TYPES)
@pytest.mark.parametrize("lanes", [1, 8])
def test_a_zero_divisor_fails_like_the_interpreter(rng, target, dtype, lanes):
    info = np.iinfo(dtype)
    count = 4 * lanes
    for op in OPS:
        func = _elementwise(op, dtype, lanes)
        a = rng.integers(info.min, info.max, count, dtype=dtype, endpoint=True)
        b = rng.integers(info.min, info.max, count, dtype=dtype, endpoint=True)
        b[b == 0] = 1
        sentinel = np.full(count, 7, dtype)
        # nonzero divisors: exactly the interpreter's numbers, no failure
        want, got = sentinel.copy(), sentinel.copy()
        refcomp.interpret(func, a, b, want, n=4)
        refcomp.build(func, target=target, bounds="off")(a, b, got)
        np.testing.assert_array_equal(got, want)
        # one zero divisor: both fail at it; the elements (vectors) before it are written, it is not
        b[rng.integers(lanes, count)] = 0
        _both_fail_alike(func, [a, b, sentinel.copy()], target, sizes={"n": 4})


@pytest.mark.parametrize("target", TARGETS)
def test_parallel_loops_report_it_too(target, rng):
    func = _elementwise("floordiv", "int32", kind="parallel")
    a = rng.integers(-1000, 1000, 64, dtype=np.int32)
    b = rng.integers(1, 9, 64, dtype=np.int32)
    b[37] = 0
    out = np.full(64, 7, np.int32)
    with pytest.raises(RuntimeFailure, match="integer division by zero"):
        refcomp.build(func, target=target, bounds="off")(a, b, out)
    assert out[37] == 7  # the failing element is never stored
    done = out != 7
    np.testing.assert_array_equal(out[done], a[done] // b[done])


def _scalar_divisor_program():
    """Divisions by a scalar parameter in a loop bound, a let, a branch, an assertion and an index."""
    n = SizeVar("n", "int32")
    A = Buffer("A", (n,), "int32")
    d = Var("d", "int32")
    i, t = Var("i", "int32"), Var("t", "int32")
    store = BufferStore(A, A[i] + t, (i,))
    body = For(i, 0, floordiv(n * d, d), "serial", LetStmt(t, truncdiv(100, d), seq(
        IfThenElse(floormod(A[i], d) == 0, store),
        AssertStmt(truncmod(A[i], d) < 1000, "small remainder", BufferStore(A, A[floormod(i, d)], (i,))),
    )))
    return PrimFunc((A, d), body, "scalar_divisor")


@pytest.mark.parametrize("target", TARGETS)
def test_divisions_in_bounds_lets_branches_assertions_and_indices(target, rng):
    func = _scalar_divisor_program()
    lib = refcomp.build(func, target=target, bounds="off")
    a = rng.integers(-50, 50, 6, dtype=np.int32)
    want, got = a.copy(), a.copy()
    refcomp.interpret(func, want, d=4)
    lib(got, 4)
    np.testing.assert_array_equal(got, want)
    # d = 0 fails in the loop bound, before any iteration runs
    _both_fail_alike(func, [a.copy()], target, scalars=(0,))
    untouched = a.copy()
    with pytest.raises(RuntimeFailure, match="integer division by zero"):
        lib(untouched, 0)
    np.testing.assert_array_equal(untouched, a)


def test_constant_divisors_stay_unchecked_and_simd():
    n = SizeVar("n", "int32")
    A, B = Buffer("A", (n,), "int32"), Buffer("B", (n,), "int32")
    i = Var("i", "int32")
    options = EmitOptions(vectors=True, openmp=True)
    constant = PrimFunc((A, B), For(i, 0, n, "vectorized", BufferStore(B, floordiv(A[i], 3) + floormod(A[i], -5), (i,))))
    source = emit(constant, options).source
    kernel = source[source.index("int32_t refcomp_main("):]
    assert "checked" not in kernel and "rc_zero" not in kernel and "#pragma omp simd" in kernel
    assert "integer division by zero" not in source
    variable = PrimFunc((A, B), For(i, 0, n, "vectorized", BufferStore(B, floordiv(A[i], B[i]), (i,))))
    kernel = emit(variable, options).source
    kernel = kernel[kernel.index("int32_t refcomp_main("):]
    assert "rc_floordiv_checked_i32" in kernel and "#pragma omp simd" not in kernel  # the test jumps out


@pytest.mark.parametrize("register_bytes", REGISTER_BYTES)
@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint64"])
@pytest.mark.parametrize("lanes", [2, 4, 8, 16, 32])
def test_a_store_that_may_divide_by_zero_is_never_split(register_bytes, dtype, lanes):
    """Splitting into register-wide pieces would store the pieces before a failing one."""
    for op in OPS:
        stores = collect(split_wide_vectors(_elementwise(op, dtype, lanes), register_bytes).body, BufferStore)
        assert [s.value.dtype.lanes for s in stores] == [lanes]
    # the same store by a nonzero constant is split when it is wider than a register
    n = SizeVar("n", "int32")
    A, O = Buffer("A", (n * lanes,), dtype), Buffer("O", (n * lanes,), dtype)
    i = Var("i", "int32")
    index = Ramp(i * lanes, IntImm(1), lanes)
    constant = PrimFunc((A, O), For(i, 0, n, "serial", BufferStore(O, floordiv(A[index], 3), (index,))))
    pieces = collect(split_wide_vectors(constant, register_bytes).body, BufferStore)
    width = np.dtype(dtype).itemsize * lanes
    assert len(pieces) == max(1, width // register_bytes)


@pytest.mark.parametrize("register_bytes", REGISTER_BYTES)
@pytest.mark.parametrize("dtype", ["int16", "int32", "int64", "uint64"])
def test_no_lane_of_a_failing_vector_is_stored_at_any_register_width(monkeypatch, rng, register_bytes, dtype):
    """Interpreter (both paths) and C built for each register width store the same: the vectors
    before the failing one, nothing of it."""
    monkeypatch.setattr(toolchain, "native_vector_bytes", lambda: register_bytes)
    lanes, vectors = 16, 4
    count = lanes * vectors
    info = np.iinfo(dtype)
    func = _elementwise("truncmod", dtype, lanes)
    a = rng.integers(info.min, info.max, count, dtype=dtype, endpoint=True)
    b = rng.integers(1, 100, count, dtype=dtype)
    failing = int(rng.integers(1, vectors))
    b[failing * lanes + int(rng.integers(1, lanes))] = 0  # never the vector's first lane
    sentinel = np.full(count, 7, dtype)
    results = []
    for run in ("vector path", "scalar path", "compiled"):
        out = sentinel.copy()
        with pytest.raises(RuntimeFailure, match="integer division by zero"):
            if run == "compiled":
                refcomp.build(func, target="c -Werror", bounds="off")(a, b, out)
            elif run == "scalar path":
                with scalar_only():
                    refcomp.interpret(func, a, b, out, n=vectors)
            else:
                refcomp.interpret(func, a, b, out, n=vectors)
        results.append(out)
    done = failing * lanes
    want = np.fmod(a[:done], b[:done]) if dtype.startswith("int") else a[:done] % b[:done]
    for out in results:
        np.testing.assert_array_equal(out[:done], want)
        np.testing.assert_array_equal(out[done:], 7)
