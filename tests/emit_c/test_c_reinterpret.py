"""reinterpret in C (scalar, GCC vectors, and split wide vectors) against numpy's `.view()`.

float16 and bfloat16 compute as float, and a signaling NaN may become quiet on the way (spec/ir.md):
where a half type is the source or the target, its signaling NaN patterns come back exactly or with
the quiet bit set (the software conversions quiet them, gcc may fold the F16C round trip away);
every other pattern comes back exactly.
"""
import numpy as np
import pytest

import refcomp
from refcomp.ast import Broadcast, Buffer, BufferStore, Call, For, IntImm, PrimFunc, Ramp, SizeVar, Var
from refcomp.emit_c import EmitOptions, emit

PAIRS = [("float32", "int32"), ("int32", "float32"), ("float32", "uint32"), ("uint32", "float32"),
         ("float64", "int64"), ("int64", "float64"), ("float64", "uint64"),
         ("float16", "int16"), ("int16", "float16"), ("float16", "uint16"), ("uint16", "float16"),
         ("bfloat16", "int16"), ("int16", "bfloat16"), ("bfloat16", "uint16"), ("uint16", "bfloat16"),
         ("float16", "bfloat16"), ("bfloat16", "float16")]
COUNT = 64
# (exponent mask, mantissa mask, quiet bit) of the 16-bit float types
HALF_NAN_BITS = {"float16": (0x7C00, 0x03FF, 0x0200), "bfloat16": (0x7F80, 0x007F, 0x0040)}


def _numpy(dtype: str) -> np.dtype:
    """The array dtype the runtime takes (bfloat16 travels as its uint16 bits)."""
    return np.dtype("uint16" if dtype == "bfloat16" else dtype)


def reinterpret_kernel(source: str, target: str, lanes: int) -> PrimFunc:
    """B[i] = reinterpret(A[i]) over n * lanes elements, lanes at a time."""
    n = SizeVar("n", "int32")
    A, B = Buffer("A", (n * lanes,), source), Buffer("B", (n * lanes,), target)
    i = Var("i", "int32")
    index = i if lanes == 1 else Ramp(i * lanes, IntImm(1), lanes)
    dtype = target if lanes == 1 else f"{target}x{lanes}"
    body = For(i, 0, n, "serial", BufferStore(B, Call("reinterpret", (A[index],), dtype), (index,)))
    return PrimFunc((A, B), body, f"bits_{source}_{target}_{lanes}")


def _bit_patterns(source: str, rng) -> np.ndarray:
    """Random bits, plus zeros, infinities and the extremes, as the source's array dtype."""
    width = np.dtype(_numpy(source)).itemsize
    unsigned = np.dtype(f"uint{8 * width}")
    bits = rng.integers(0, np.iinfo(unsigned).max, COUNT, dtype=unsigned, endpoint=True)
    sign = unsigned.type(1) << unsigned.type(8 * width - 1)
    exponent = {"float16": 0x7C00, "bfloat16": 0x7F80}.get(source)
    if exponent is None and width >= 4:
        exponent = int(np.array(np.inf, f"float{8 * width}").view(unsigned))
    specials = [0, sign, exponent or 1, (exponent or 1) | sign, np.iinfo(unsigned).max, sign - unsigned.type(1)]
    bits[:len(specials)] = np.array(specials, dtype=unsigned)
    rng.shuffle(bits)
    return bits.view(_numpy(source))


def _quieted(bits: np.ndarray, dtype: str) -> np.ndarray:
    """bits (uint16) with dtype's signaling NaNs made quiet."""
    if dtype not in HALF_NAN_BITS:
        return bits
    exponent, mantissa, quiet = HALF_NAN_BITS[dtype]
    signaling = ((bits & exponent) == exponent) & ((bits & mantissa) != 0) & ((bits & quiet) == 0)
    return np.where(signaling, bits | quiet, bits).astype(bits.dtype)


def assert_same_bits(out: np.ndarray, a: np.ndarray, source: str, target: str) -> None:
    got, bits = out.view(f"uint{8 * out.itemsize}"), a.view(f"uint{8 * a.itemsize}")
    quiet = _quieted(_quieted(bits, source), target)
    wrong = (got != bits) & (got != quiet)
    assert not wrong.any(), f"bits {bits[wrong]} came back as {got[wrong]}"


@pytest.mark.parametrize("source, target", PAIRS)
@pytest.mark.parametrize("lanes", [1, 8, 16])
@pytest.mark.parametrize("build_target", ["c -Werror", "c -std=c99"])
def test_reinterpret_matches_numpy_view(source, target, lanes, build_target, rng):
    func = reinterpret_kernel(source, target, lanes)
    lib = refcomp.build(func, target=build_target, bounds="off")
    a = _bit_patterns(source, rng)
    out = np.zeros(COUNT, _numpy(target))
    lib(a, out)
    assert_same_bits(out, a, source, target)


@pytest.mark.parametrize("lanes", [1, 8])
def test_bit_arithmetic_between_reinterprets(lanes, rng):
    """B = float(bits(A) + 1): the next float away from zero, as numpy computes it on the views."""
    n = SizeVar("n", "int32")
    A, B = Buffer("A", (n * lanes,), "float32"), Buffer("B", (n * lanes,), "float32")
    i = Var("i", "int32")
    index = i if lanes == 1 else Ramp(i * lanes, IntImm(1), lanes)
    suffix = "" if lanes == 1 else f"x{lanes}"
    bits = Call("reinterpret", (A[index],), f"int32{suffix}")
    one = IntImm(1, "int32") if lanes == 1 else Broadcast(IntImm(1, "int32"), lanes)
    value = Call("reinterpret", (bits + one,), f"float32{suffix}")
    lib = refcomp.build(PrimFunc((A, B), For(i, 0, n, "serial", BufferStore(B, value, (index,))), f"next_{lanes}"),
                        bounds="off")
    a = rng.standard_normal(COUNT).astype(np.float32)
    out = np.zeros(COUNT, np.float32)
    lib(a, out)
    np.testing.assert_array_equal(out.view(np.int32), a.view(np.int32) + 1)


def test_wide_vectors_split_into_register_pieces():
    source = emit(reinterpret_kernel("float64", "int64", 16), EmitOptions(vectors=True, vector_bytes=32)).source
    kernel = source[source.index("\nint32_t refcomp_"):]
    assert kernel.count("(rc_i64x4)(rc_vload_float64x4(") == 4


def test_reinterpret_that_changes_lane_count_is_a_build_error():
    n = SizeVar("n", "int32")
    A, B = Buffer("A", (n,), "int64"), Buffer("B", (n * 2,), "int32")
    i = Var("i", "int32")
    value = Call("reinterpret", (A[i],), "int32x2")
    func = PrimFunc((A, B), For(i, 0, n, "serial", BufferStore(B, value, (Ramp(i * 2, IntImm(1), 2),))), "halves")
    with pytest.raises(refcomp.BuildError, match="reinterpret from int64 to int32x2"):
        refcomp.build(func, bounds="off")
