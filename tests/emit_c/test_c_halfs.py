"""float16 / bfloat16 conversions in C (software and native paths) against numpy and the interpreter."""
import numpy as np
import pytest

import refcomp
from refcomp.ast import Buffer, BufferStore, Cast, For, IntImm, PrimFunc, Ramp, SizeVar, Var
from refcomp.emit_c import emit

TARGETS = ["c", "c -std=c99"]


def cast_kernel(source: str, target: str, lanes: int = 1) -> PrimFunc:
    n = SizeVar("n", "int32")
    size = n * lanes if lanes > 1 else n
    A, B = Buffer("A", (size,), source), Buffer("B", (size,), target)
    i = Var("i", "int32")
    index = Ramp(i * lanes, IntImm(1), lanes) if lanes > 1 else i
    dtype = f"{target}x{lanes}" if lanes > 1 else target
    return PrimFunc((A, B), For(i, 0, n, "serial", BufferStore(B, Cast(dtype, A[index]), (index,))),
                    f"cast_{source}_{target}_{lanes}")


def random_float32_bits(rng, count):
    bits = rng.integers(0, 2**32, count, dtype=np.uint64).astype(np.uint32)
    # ties and near-ties of float16 rounding, subnormal float16 range, overflow edge
    half_ties = (np.arange(0, 2**16, 7, dtype=np.uint32) << 13) | 0x1000
    edges = np.array([0x477FE000, 0x477FEFFF, 0x477FF000, 0x477FF001, 0x33000000, 0x33000001,
                      0x387FC000, 0x7F800000, 0xFF800000, 0x7FC00001, 0xFFFFFFFF, 0], np.uint32)
    return np.concatenate([bits, half_ties, edges]).view(np.float32)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("lanes", [1, 8])
def test_float32_to_float16_matches_numpy(target, lanes, rng):
    lib = refcomp.build(cast_kernel("float32", "float16", lanes), target=target, bounds="off")
    x = random_float32_bits(rng, 20000)
    x = x[: len(x) - len(x) % lanes]
    out = np.zeros(len(x), np.float16)
    lib(x, out)
    with np.errstate(all="ignore"):
        want = x.astype(np.float16)
    same = (out.view(np.uint16) == want.view(np.uint16)) | (np.isnan(out) & np.isnan(want))
    assert same.all(), f"first mismatch at {x[~same][:3]}: got {out[~same][:3]}, want {want[~same][:3]}"


@pytest.mark.parametrize("target", TARGETS)
def test_every_float16_widens_exactly(target):
    lib = refcomp.build(cast_kernel("float16", "float32"), target=target, bounds="off")
    x = np.arange(2**16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    out = np.zeros(len(x), np.float32)
    lib(x, out)
    want = x.astype(np.float32)
    assert ((out == want) | (np.isnan(out) & np.isnan(want))).all()


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("lanes", [1, 4, 8, 16])
def test_every_bfloat16_widens_exactly(target, lanes):
    """A bfloat16 vector load (a zero-extension and a shift of the vector, in registers) gives
    every bit pattern's float32, NaNs included, as the scalar conversion does."""
    func = cast_kernel("bfloat16", "float32", lanes)
    if lanes > 1:
        source = emit(func).source
        helper = source[source.index(f"rc_vload_bfloat16x{lanes}("):]
        assert "__builtin_convertvector" in helper[:helper.index("\n}")]
    lib = refcomp.build(func, target=target, bounds="off")
    x = np.arange(2**16, dtype=np.uint32).astype(np.uint16)
    out = np.zeros(len(x), np.float32)
    lib(x, out)
    assert (out.view(np.uint32) == x.astype(np.uint32) << 16).all()


@pytest.mark.parametrize("target", TARGETS)
def test_float64_to_float16_rounds_once(target, rng):
    lib = refcomp.build(cast_kernel("float64", "float16"), target=target, bounds="off")
    # a double just above a float16 tie: rounding through float32 first would land on the tie
    tie_plus = np.float64(1.0) + np.float64(2.0**-11) + np.float64(2.0**-40)
    x = np.concatenate([rng.standard_normal(4000) * 10.0 ** rng.integers(-8, 6, 4000),
                        [tie_plus, -tie_plus, 65519.99, 65520.0, 2.0**-25, 2.0**-25 * 1.0000001, np.nan, -np.inf]])
    out = np.zeros(len(x), np.float16)
    lib(x, out)
    with np.errstate(all="ignore"):
        want = x.astype(np.float16)
    assert ((out.view(np.uint16) == want.view(np.uint16)) | (np.isnan(out) & np.isnan(want))).all()


@pytest.mark.parametrize("target", TARGETS)
def test_bfloat16_matches_interpreter(target, rng):
    func = cast_kernel("float32", "bfloat16")
    lib = refcomp.build(func, target=target, bounds="off")
    x = random_float32_bits(rng, 5000)
    out = np.zeros(len(x), np.uint16)
    lib(x, out)
    want = np.zeros(len(x), np.uint16)
    refcomp.interpret(func, x, want)
    nan = np.isnan((out.astype(np.uint32) << 16).view(np.float32))
    assert ((out == want) | nan).all()


@pytest.mark.parametrize("target", TARGETS)
def test_float16_arithmetic_rounds_each_step(target, rng):
    n = SizeVar("n", "int32")
    A, B, C = (Buffer(name, (n,), "float16") for name in "ABC")
    i = Var("i", "int32")
    func = PrimFunc((A, B, C), For(i, 0, n, "serial", BufferStore(C, A[i] * B[i] + A[i], (i,))), "h")
    lib = refcomp.build(func, target=target, bounds="off")
    a = (rng.standard_normal(500) * 30).astype(np.float16)
    b = (rng.standard_normal(500) * 30).astype(np.float16)
    c = np.zeros(500, np.float16)
    lib(a, b, c)
    want = a * b + a  # numpy rounds float16 after each operation too
    expected = np.zeros_like(c)
    refcomp.interpret(func, a, b, expected)
    np.testing.assert_array_equal(c, want)
    np.testing.assert_array_equal(c, expected)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_vector_half_arithmetic_matches_interpreter(target, dtype, rng):
    from refcomp.ast import Call, max_
    n = SizeVar("n", "int32")
    A, B, C = (Buffer(name, (n * 8,), dtype) for name in "ABC")
    i = Var("i", "int32")
    ramp = Ramp(i * 8, IntImm(1), 8)
    a, b = A[ramp], B[ramp]
    value = max_(a * b + a, Call("exp", (b,), f"{dtype}x8") - a)
    func = PrimFunc((A, B, C), For(i, 0, n, "serial", BufferStore(C, value, (ramp,))), f"vh_{dtype}")
    lib = refcomp.build(func, target=target, bounds="off")
    store = np.float16 if dtype == "float16" else np.uint16
    def sample():
        x = (rng.standard_normal(64) * 3).astype(np.float32)
        if dtype == "float16":
            return x.astype(np.float16)
        return (x.view(np.uint32) >> 16).astype(np.uint16)
    a_arr, b_arr = sample(), sample()
    out, want = np.zeros(64, store), np.zeros(64, store)
    lib(a_arr, b_arr, out)
    refcomp.interpret(func, a_arr, b_arr, want, n=8)
    to_float = (lambda v: v.astype(np.float32)) if dtype == "float16" else \
        (lambda v: (v.astype(np.uint32) << 16).view(np.float32))
    # exp is computed in float and then rounded to 16 bits (the interpreter: in double, rounded once),
    # so the two may differ by one 16-bit ulp of exp(b), where the double value lies just off a
    # half-way point.  That difference passes through "- a" and max unchanged in absolute terms
    # (relative to the result it can be several ulps: cancellation, or a result one binade below
    # exp(b)); the last rounding adds one ulp of the result (rtol).
    mantissa = 7 if dtype == "bfloat16" else 10
    e = np.minimum(np.exp(to_float(b_arr).astype(np.float64)), float(np.finfo(np.float32).max))
    with np.errstate(divide="ignore"):
        exp_ulp = np.maximum(2.0 ** (np.floor(np.log2(e)) - mantissa), 2.0 ** (-133 if dtype == "bfloat16" else -24))
    got, ref = to_float(out), to_float(want)
    with np.errstate(invalid="ignore"):  # inf - inf where both overflowed: equal, caught by got == ref
        ok = (got == ref) | (np.abs(got - ref) <= 2.0 ** -mantissa * np.abs(ref) + exp_ulp)
    assert ok.all(), f"a={to_float(a_arr)[~ok]} b={to_float(b_arr)[~ok]}: got {got[~ok]}, want {ref[~ok]}"
