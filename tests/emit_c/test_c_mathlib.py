"""Math intrinsics in C (scalar libm and vector libmvec paths) against numpy, in ulps, with
inf/nan/denormal inputs: no -ffast-math, so IEEE special values must come out right."""
import math

import numpy as np
import pytest

import refcomp
from refcomp.ast import Buffer, BufferStore, Call, For, IntImm, PrimFunc, Ramp, SizeVar, Var, seq

UNARY = {
    "exp": np.exp, "exp2": np.exp2, "expm1": np.expm1, "log": np.log, "log2": np.log2,
    "log10": np.log10, "log1p": np.log1p, "sqrt": np.sqrt, "sin": np.sin, "cos": np.cos,
    "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh,
    "cosh": np.cosh, "tanh": np.tanh, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
    "erf": np.vectorize(math.erf, otypes=[float]), "floor": np.floor, "ceil": np.ceil,
    "trunc": np.trunc, "nearbyint": np.rint, "abs": np.abs, "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "sigmoid": lambda x: np.where(x >= 0, 1.0 / (1.0 + np.exp(-np.abs(x))),
                                  np.exp(-np.abs(x)) / (1.0 + np.exp(-np.abs(x)))),
}
# Trigonometric reductions of huge arguments are the hardest case: keep their inputs moderate.
MODERATE = {"sin", "cos", "tan"}
ULP_BOUND = {"float32": 4.0, "float64": 4.0}
LANES = 8


def many_unary_kernel(dtype: str, lanes: int) -> PrimFunc:
    n = SizeVar("n", "int32")
    size = n * lanes if lanes > 1 else n
    A = Buffer("A", (size,), dtype)
    outs = [Buffer(f"out_{op}", (size,), dtype) for op in UNARY]
    i = Var("i", "int32")
    index = Ramp(i * lanes, IntImm(1), lanes) if lanes > 1 else i
    vtype = f"{dtype}x{lanes}" if lanes > 1 else dtype
    stores = [BufferStore(out, Call(op, (A[index],), vtype), (index,)) for op, out in zip(UNARY, outs)]
    return PrimFunc((A, *outs), For(i, 0, n, "serial", seq(*stores)), f"math_{dtype}_{lanes}")


def inputs(dtype: str, rng) -> np.ndarray:
    info = np.finfo(dtype)
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -0.5, 2.5, -2.5,
               float(info.tiny), float(info.tiny) / 8, -float(info.tiny) / 16, float(info.max),
               -float(info.max), 88.0, 89.0, -104.0, 710.0, -745.5, 1e-8, 0.999999, -0.999999]
    wide = np.exp(rng.uniform(np.log(float(info.tiny)), np.log(float(info.max)), 400)) * rng.choice([-1, 1], 400)
    near = rng.uniform(-12, 12, 400)
    unit = rng.uniform(-1.2, 1.2, 200)
    values = np.concatenate([special, wide, near, unit]).astype(dtype)
    pad = (-len(values)) % LANES
    return np.concatenate([values, rng.uniform(-3, 3, pad).astype(dtype)])


def ulp_error(got: np.ndarray, ref64: np.ndarray, dtype: str) -> np.ndarray:
    with np.errstate(over="ignore"):
        ref = ref64.astype(dtype)
    both_nan = np.isnan(got) & np.isnan(ref)
    same = (got == ref) | both_nan
    with np.errstate(over="ignore", invalid="ignore"):
        spacing = np.spacing(np.abs(ref).astype(dtype)).astype(np.float64)
    spacing = np.where(spacing == 0, np.finfo(dtype).smallest_subnormal, spacing)
    with np.errstate(invalid="ignore"):
        err = np.abs(got.astype(np.float64) - ref64) / spacing
    err = np.where(same, 0.0, err)
    return np.where(np.isfinite(err), err, np.inf)


_LIBS = {}


@pytest.mark.parametrize("target", ["c", "c -std=c99"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("lanes", [1, 4, LANES])  # 4 x float64 / 8 x float32: AVX2 variants on AVX-512
def test_math_functions_ulp_and_specials(dtype, lanes, target, rng):
    key = (dtype, lanes, target)
    if key not in _LIBS:
        _LIBS[key] = refcomp.build(many_unary_kernel(dtype, lanes), target=target, bounds="off")
    lib = _LIBS[key]
    x = inputs(dtype, rng)
    outs = [np.full_like(x, 12345.0) for _ in UNARY]
    lib(x, *outs)
    failures = []
    for (op, ref_fn), got in zip(UNARY.items(), outs):
        arg = x.astype(np.float64)
        if op in MODERATE:
            keep = np.abs(arg) < 1e5
        else:
            keep = np.ones(len(arg), bool)
        with np.errstate(all="ignore"):
            ref = ref_fn(arg)
        err = ulp_error(got[keep], ref[keep], dtype)
        bound = ULP_BOUND[dtype] + (2 if op in ("sigmoid", "rsqrt") else 0)
        if err.max() > bound:
            worst = int(np.argmax(err))
            failures.append(f"{op}: {err.max():.1f} ulp at x={arg[keep][worst]!r}: got {got[keep][worst]!r}, "
                            f"want {ref[keep][worst]!r}")
    assert not failures, "\n".join(failures)


def test_round_is_half_away_from_zero():
    n = SizeVar("n", "int32")
    A, B = Buffer("A", (n * 4,), "float32"), Buffer("B", (n * 4,), "float32")
    i = Var("i", "int32")
    ramp = Ramp(i * 4, IntImm(1), 4)
    lib = refcomp.build(PrimFunc((A, B), For(i, 0, n, "serial",
                                             BufferStore(B, Call("round", (A[ramp],), "float32x4"), (ramp,))), "rnd"),
                        bounds="off")
    a = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 3.4, -3.6, 0.0], np.float32)
    b = np.zeros_like(a)
    lib(a, b)
    np.testing.assert_array_equal(b, [1, 2, 3, -1, -3, 3, -4, 0])


def test_vector_log_uses_libmvec_when_available():
    from refcomp.emit_c.toolchain import mvec_functions
    if "log" not in mvec_functions():
        pytest.skip("no libmvec on this system")
    source = refcomp.build(many_unary_kernel("float32", LANES), bounds="off").source
    assert "RC_MVEC1_F32(log)" in source and "__FAST_MATH__" not in source
    assert "RC_MVEC1_F32(exp)" not in source  # float32 exp is inline (test below)
    assert "RC_MVEC1_F64(exp)" in refcomp.build(many_unary_kernel("float64", 4), bounds="off").source


def test_half_width_vectors_use_the_avx2_variants_on_avx512():
    from refcomp.emit_c.toolchain import mvec_functions
    from refcomp.loops.intrin import cpu

    if "log" not in mvec_functions() or not cpu.has("avx512f"):
        pytest.skip("needs libmvec and an AVX-512 CPU (32-byte vectors are native elsewhere)")
    source = refcomp.build(many_unary_kernel("float32", 8), bounds="off").source
    assert "RC_MVECH1_F32(log)" in source and "_ZGVdN8v_##name##f" in source


def _exp_kernel(lanes: int, op: str = "exp") -> PrimFunc:
    n = SizeVar("n", "int32")
    A, B = Buffer("A", (n * lanes,), "float32"), Buffer("B", (n * lanes,), "float32")
    i = Var("i", "int32")
    ramp = Ramp(i * lanes, IntImm(1), lanes)
    body = For(i, 0, n, "serial", BufferStore(B, Call(op, (A[ramp],), f"float32x{lanes}"), (ramp,)))
    return PrimFunc((A, B), body, f"{op}_{lanes}")


@pytest.mark.parametrize("lanes", [4, 8, 16])
def test_inline_float32_exp_over_a_sweep_of_all_floats(lanes, vector_isa, rng):
    """The inline float32 exp (its AVX-512 branch at 16 lanes, the generic one else) against
    float64 exp on every 4099th float32 bit pattern and specials: within 1.5 ulp where the
    result is normal, within one subnormal step below, inf/0/NaN where exp gives them."""
    lib = refcomp.build(_exp_kernel(lanes), target="c -Werror", bounds="off")
    assert "RC_MVEC1_F32(exp)" not in lib.source
    sweep = np.arange(int(rng.integers(0, 4099)), 1 << 32, 4099, dtype=np.uint64).astype(np.uint32).view(np.float32)
    special = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 88.72283, 88.72284, 89.0, 1e30, -1e30, -87.33655,
                        -103.27893, -103.97208, -104.0, -200.0, 1e-30, -1e-30], np.float32)
    x = np.concatenate([special, sweep])
    x = np.concatenate([x, np.zeros((-len(x)) % lanes, np.float32)])
    y = np.full_like(x, 12345.0)
    lib(x, y)
    with np.errstate(all="ignore"):
        ref = np.exp(x.astype(np.float64))
        want = ref.astype(np.float32)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(want))
    np.testing.assert_array_equal(y[np.isinf(want)], want[np.isinf(want)])
    normal = np.isfinite(want) & (want >= np.finfo(np.float32).tiny)
    ulps = np.abs(y[normal].astype(np.float64) - ref[normal]) / np.spacing(want[normal]).astype(np.float64)
    assert ulps.max() <= 1.5, f"{ulps.max():.2f} ulp at x={x[normal][np.argmax(ulps)]!r}"
    small = np.isfinite(want) & ~normal
    step = float(np.finfo(np.float32).smallest_subnormal)
    assert np.abs(y[small].astype(np.float64) - ref[small]).max() <= step


@pytest.mark.parametrize("lanes", [4, 8, 16])
def test_inline_float32_tanh_over_a_sweep_of_all_floats(lanes, vector_isa, rng):
    """The inline float32 tanh against float64 tanh on every 4099th float32 bit pattern and
    specials (the branch point 0.625 and its neighbours, subnormals, -0, inf, NaN): within
    1.5 ulp, the sign bit of x's (tanh(-0) is -0), +-1 past 9, NaN for NaN."""
    lib = refcomp.build(_exp_kernel(lanes, "tanh"), target="c -Werror", bounds="off")
    assert "RC_MVEC1_F32(tanh)" not in lib.source
    sweep = np.arange(int(rng.integers(0, 4099)), 1 << 32, 4099, dtype=np.uint64).astype(np.uint32).view(np.float32)
    special = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 0.625, -0.625, np.nextafter(np.float32(0.625), 0),
                        np.nextafter(np.float32(0.625), 1), 9.0, -9.0, 44.0, 1e-45, -1e-45, 1e-30, 88.0, 1e30],
                       np.float32)
    x = np.concatenate([special, sweep])
    x = np.concatenate([x, np.zeros((-len(x)) % lanes, np.float32)])
    y = np.full_like(x, 12345.0)
    lib(x, y)
    ref = np.tanh(x.astype(np.float64))
    np.testing.assert_array_equal(np.isnan(y), np.isnan(x))
    finite = ~np.isnan(x)
    np.testing.assert_array_equal(np.signbit(y[finite]), np.signbit(x[finite]))
    want = ref[finite].astype(np.float32)
    spacing = np.spacing(np.abs(want)).astype(np.float64)
    ulps = np.abs(y[finite].astype(np.float64) - ref[finite]) / spacing
    assert ulps.max() <= 1.5, f"{ulps.max():.2f} ulp at x={x[finite][np.argmax(ulps)]!r}"
