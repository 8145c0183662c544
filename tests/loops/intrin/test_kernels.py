"""Each shipped micro-kernel, compiled by gcc and called on numpy data, against numpy's matmul.

Kernels whose instructions this CPU lacks are still compiled (gcc checks the C) but only run
where /proc/cpuinfo has the flags (the `amx` marker covers AVX-512, VNNI and AMX).
"""
from __future__ import annotations

import ctypes
import subprocess

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from refcomp.loops import intrin
from refcomp.loops.intrin import x86

AMX_PRELUDE = r"""
#include <sys/syscall.h>
#include <unistd.h>
static int refcomp_test_amx_ok = -1;
static int refcomp_test_request_amx(void) {
  if (refcomp_test_amx_ok < 0) refcomp_test_amx_ok = syscall(SYS_arch_prctl, 0x1023, 18) == 0;
  return refcomp_test_amx_ok;
}
"""

_CALLERS: dict[str, str] = {}


def _wrapper(name: str) -> str:
    """C source exporting `run` that forwards to the intrinsic's C function."""
    info = intrin.get(name)
    call = info.impl.body.value
    function = call.args[0].value
    ctype = {"float32": "float", "bfloat16": "uint16_t", "int8": "int8_t", "int32": "int32_t"}
    a, b, c = (ctype[str(buf.dtype)] for buf in info.desc.buffers)
    full = len(call.args) == 10  # with a_cs and m_rows; AMX kernels take neither
    params = (f"const {a}* A, int64_t a_rs, int64_t a_cs, const {b}* B, int64_t ldb, {c}* C, "
              "int64_t ldc, int64_t K, int64_t m_rows")
    args = "A, a_rs, a_cs, B, ldb, C, ldc, K, m_rows" if full else "A, a_rs, B, ldb, C, ldc, K"
    amx = bool(info.func_attrs.get("needs_amx"))
    guard = "if (!refcomp_test_request_amx()) return -1;" if amx else ""
    return ("\n".join(info.c_helpers) + (AMX_PRELUDE if amx else "") +
            f"\nint run({params}) {{ {guard} {function}({args}); return 0; }}\n")


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    libs = {}

    def get(name: str, text: str | None = None):
        """The library of `name`'s wrapper (or of the C `text` given, cached under `name`)."""
        if name not in libs:
            directory = tmp_path_factory.mktemp(name.replace(".", "_"))
            source = directory / "k.c"
            source.write_text(_wrapper(name) if text is None else text)
            out = directory / "k.so"
            subprocess.run(["gcc", "-O2", "-std=gnu11", "-shared", "-fPIC", str(source), "-o", str(out)],
                           check=True, capture_output=True, text=True)
            libs[name] = ctypes.CDLL(str(out))
        return libs[name]

    return get


@pytest.mark.parametrize("name", sorted(x86._TILES))
def test_every_kernel_compiles(name, tmp_path):
    source = tmp_path / "k.c"
    source.write_text(_wrapper(name))
    result = subprocess.run(["gcc", "-O2", "-std=gnu11", "-Wall", "-Werror", "-c", str(source), "-o",
                             str(tmp_path / "k.o")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def to_bf16(x: np.ndarray) -> np.ndarray:
    """fp32 -> bf16 bit patterns, rounding to nearest even."""
    bits = x.astype(np.float32).view(np.uint32)
    rounded = bits + 0x7FFF + ((bits >> 16) & 1)
    return (rounded >> 16).astype(np.uint16)


def from_bf16(x: np.ndarray) -> np.ndarray:
    return (x.astype(np.uint32) << 16).view(np.float32)


def pack_b(b: np.ndarray, layout: str) -> np.ndarray:
    """B (K, N) in the layout a kernel reads: rows, pairs Bp[k/2, j, k%2], quads Bp[k/4, j, k%4]."""
    k, n = b.shape
    if layout == "rows":
        return np.ascontiguousarray(b)
    group = {"pairs": 2, "quads": 4}[layout]
    return np.ascontiguousarray(b.reshape(k // group, group, n).transpose(0, 2, 1))


def _ptr(array: np.ndarray):
    return ctypes.c_void_p(array.ctypes.data)


def run_kernel(lib, name, a, b_packed, c, *, a_rows_contiguous=True, m_rows=None):
    """Call the kernel on full arrays: A (MR, K), packed B, C (MR, NR) (C updated in place)."""
    k = a.shape[1]
    if a_rows_contiguous:
        a_rs, a_cs, a_mem = a.shape[1], 1, np.ascontiguousarray(a)
    else:  # A stored transposed (packed MR-interleaved): A[r, k] at r + k*MR
        a_mem = np.ascontiguousarray(a.T)
        a_rs, a_cs = 1, a.shape[0]
    ldb = b_packed.strides[0] // b_packed.itemsize
    ldc = c.strides[0] // c.itemsize
    i64 = ctypes.c_int64
    args = [_ptr(a_mem), i64(a_rs), i64(a_cs), _ptr(b_packed), i64(ldb), _ptr(c), i64(ldc), i64(k),
            i64(a.shape[0] if m_rows is None else m_rows)]
    status = lib.run(*args)
    assert status == 0, "the OS refused AMX state"


def _needs(name):
    info = intrin.get(name)
    marks = [pytest.mark.skipif(not info.available(), reason=f"CPU lacks {info.cpu_features}")]
    if any(f.startswith(("avx512", "amx")) for f in info.cpu_features):
        marks.append(pytest.mark.amx)
    return marks


FLOAT_KERNELS = ["x86.avx2.sgemm_6x16", "x86.avx2.sgemm_8x8", "x86.avx512.sgemm_8x32", "x86.avx512.sgemm_12x32",
                 "x86.avx512.sgemm_14x32", "x86.avx512.sgemm_6x64", "x86.avx512.sgemm_6x64_unrolled"]
BF16_KERNELS = ["x86.avx2.bf16gemm_6x16", "x86.avx512bf16.bf16gemm_8x32", "x86.amx.bf16gemm_32x32"]
INT8_KERNELS = ["x86.avx2.i8gemm_6x16", "x86.vnni.i8gemm_8x32", "x86.amx.i8gemm_32x32"]


def _params(names):
    return [pytest.param(n, marks=_needs(n)) for n in names]


@pytest.mark.parametrize("name", _params(FLOAT_KERNELS))
@given(k_units=st.integers(1, 20), packed_a=st.booleans(), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=15)
def test_fp32_kernel_matches_numpy(build, name, k_units, packed_a, seed):
    rng = np.random.default_rng(seed)
    mr, nr, _ = x86.tile_shape(name)
    k = k_units
    a = rng.standard_normal((mr, k)).astype(np.float32)
    b = rng.standard_normal((k, nr)).astype(np.float32)
    c = rng.standard_normal((mr, nr)).astype(np.float32)
    expected = c.astype(np.float64) + a.astype(np.float64) @ b.astype(np.float64)
    run_kernel(build(name), name, a, pack_b(b, "rows"), c, a_rows_contiguous=not packed_a)
    np.testing.assert_allclose(c, expected, rtol=1e-5, atol=1e-5 * k)


@pytest.mark.parametrize("name", _params(BF16_KERNELS))
@given(k_units=st.integers(1, 6), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=10)
def test_bf16_kernel_matches_numpy(build, name, k_units, seed):
    rng = np.random.default_rng(seed)
    mr, nr, k_multiple = x86.tile_shape(name)
    k = k_units * k_multiple
    a = to_bf16(rng.standard_normal((mr, k)))
    b = to_bf16(rng.standard_normal((k, nr)))
    c = rng.standard_normal((mr, nr)).astype(np.float32)
    # Products of bf16 values are exact in fp32; only the fp32 accumulation rounds.
    expected = c.astype(np.float64) + from_bf16(a).astype(np.float64) @ from_bf16(b).astype(np.float64)
    run_kernel(build(name), name, a, pack_b(b, x86.b_layout(name)), c)
    np.testing.assert_allclose(c, expected, rtol=1e-4, atol=1e-5 * k)


@pytest.mark.parametrize("name", _params(INT8_KERNELS))
@given(k_units=st.integers(1, 6), seed=st.integers(0, 2**32 - 1), extremes=st.booleans())
@settings(max_examples=10)
def test_int8_kernel_is_exact(build, name, k_units, seed, extremes):
    rng = np.random.default_rng(seed)
    mr, nr, k_multiple = x86.tile_shape(name)
    k = k_units * k_multiple
    if extremes:  # the corners of the signed range, where a sign mistake shows
        a = rng.choice(np.array([-128, 127, -1, 0, 1], np.int8), size=(mr, k))
        b = rng.choice(np.array([-128, 127, -1, 0, 1], np.int8), size=(k, nr))
    else:
        a = rng.integers(-128, 128, size=(mr, k), dtype=np.int8)
        b = rng.integers(-128, 128, size=(k, nr), dtype=np.int8)
    c = rng.integers(-(2**20), 2**20, size=(mr, nr), dtype=np.int32)
    expected = c + a.astype(np.int32) @ b.astype(np.int32)
    run_kernel(build(name), name, a, pack_b(b, x86.b_layout(name)), c)
    np.testing.assert_array_equal(c, expected)


@pytest.mark.parametrize("name", _params(["x86.avx2.i8gemm_6x16", "x86.vnni.i8gemm_8x32"]))
@pytest.mark.parametrize("k", [64, 148, 1024])
@pytest.mark.parametrize("rows", [None, 3])
def test_int8_kernel_large_k_is_exact(build, name, k, rows, rng):
    """K past one 64-byte row chunk (VNNI sums A's rows 64 bytes at a time, then a masked tail),
    all -128 in a row (the largest row sum), full and partial tiles."""
    mr, nr, _ = x86.tile_shape(name)
    a = rng.integers(-128, 128, size=(mr, k), dtype=np.int8)
    a[1] = -128
    b = rng.integers(-128, 128, size=(k, nr), dtype=np.int8)
    c = rng.integers(-(2**20), 2**20, size=(mr, nr), dtype=np.int32)
    expected = c.copy()
    touched = mr if rows is None else rows
    expected[:touched] += (a.astype(np.int32) @ b.astype(np.int32))[:touched]
    run_kernel(build(name), name, a, pack_b(b, x86.b_layout(name)), c, m_rows=rows)
    np.testing.assert_array_equal(c, expected)


@pytest.mark.parametrize("name", _params(["x86.avx2.i8gemm_6x16", "x86.vnni.i8gemm_8x32"]))
def test_int8_kernel_strided_a(build, name, rng):
    mr, nr, k_multiple = x86.tile_shape(name)
    k = 3 * k_multiple
    a = rng.integers(-128, 128, size=(mr, k), dtype=np.int8)
    b = rng.integers(-128, 128, size=(k, nr), dtype=np.int8)
    c = np.zeros((mr, nr), np.int32)
    run_kernel(build(name), name, a, pack_b(b, x86.b_layout(name)), c, a_rows_contiguous=False)
    np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32))


@pytest.mark.parametrize("name", _params(["x86.avx2.bf16gemm_6x16", "x86.avx512bf16.bf16gemm_8x32"]))
@pytest.mark.parametrize("a_rows_contiguous", [True, False])
def test_bf16_kernel_large_k(build, name, a_rows_contiguous, rng):
    """A long reduction on random normal data, A row-major or packed MR-interleaved (a_cs = MR)."""
    mr, nr, k_multiple = x86.tile_shape(name)
    k = 512
    a = to_bf16(rng.standard_normal((mr, k)))
    b = to_bf16(rng.standard_normal((k, nr)))
    c = rng.standard_normal((mr, nr)).astype(np.float32)
    expected = c.astype(np.float64) + from_bf16(a).astype(np.float64) @ from_bf16(b).astype(np.float64)
    run_kernel(build(name), name, a, pack_b(b, x86.b_layout(name)), c, a_rows_contiguous=a_rows_contiguous)
    # fp32 accumulation of k exact products: error grows like sqrt(k) ulps of the partial sums
    np.testing.assert_allclose(c, expected, rtol=1e-4, atol=1e-5 * np.sqrt(k))


@pytest.mark.parametrize("name", _params(["x86.avx512bf16.bf16gemm_8x32"]))
def test_avx512_bf16_kernel_treats_denormal_inputs_as_zero(build, name, rng):
    """vdpbf16ps reads denormal bf16 inputs as zero (spec/tensorize.md); normal ones it multiplies."""
    mr, nr, _ = x86.tile_shape(name)
    a = np.empty((mr, 2), np.uint16)
    a[:, 0] = 0x0001  # the smallest positive bf16 denormal, 2**-133
    a[:, 1] = to_bf16(rng.standard_normal(mr) * 2.0 ** -40)  # small but normal
    b = to_bf16(rng.standard_normal((2, nr)))
    b[0, :] = to_bf16(np.float32(2.0 ** 100))
    c = np.zeros((mr, nr), np.float32)
    run_kernel(build(name), name, a, pack_b(b, x86.b_layout(name)), c)
    # Were the denormal used, each entry would gain 2**-33, about 100 times the kept product.
    kept = np.outer(from_bf16(a[:, 1]).astype(np.float64), from_bf16(b[1]).astype(np.float64))
    np.testing.assert_allclose(c, kept, rtol=1e-6, atol=0)


@pytest.mark.parametrize("name", _params(["x86.avx2.sgemm_6x16", "x86.avx2.sgemm_8x8", "x86.avx512.sgemm_8x32",
                                          "x86.avx512.sgemm_12x32", "x86.avx512.sgemm_14x32",
                                          "x86.avx512.sgemm_6x64", "x86.avx512.sgemm_6x64_unrolled",
                                          "x86.avx2.bf16gemm_6x16", "x86.avx512bf16.bf16gemm_8x32",
                                          "x86.avx2.i8gemm_6x16",
                                          "x86.vnni.i8gemm_8x32"]))
@given(rows=st.integers(0, 40), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=10)
def test_partial_tile_touches_only_its_rows(build, name, rows, seed):
    """m_rows < MR computes those rows and leaves the rest of C alone; m_rows >= MR is a full tile."""
    rng = np.random.default_rng(seed)
    mr, nr, k_multiple = x86.tile_shape(name)
    k = 2 * k_multiple
    info = intrin.get(name)
    a_type = info.desc.buffers[0].dtype
    if a_type.name == "int8":
        a = rng.integers(-128, 128, size=(mr, k), dtype=np.int8)
        b = rng.integers(-128, 128, size=(k, nr), dtype=np.int8)
        c = rng.integers(-1000, 1000, size=(mr, nr), dtype=np.int32)
        product = a.astype(np.int64) @ b.astype(np.int64)
    elif a_type.name == "bfloat16":
        a, b = to_bf16(rng.standard_normal((mr, k))), to_bf16(rng.standard_normal((k, nr)))
        c = rng.standard_normal((mr, nr)).astype(np.float32)
        product = from_bf16(a).astype(np.float64) @ from_bf16(b).astype(np.float64)
    else:
        a = rng.standard_normal((mr, k)).astype(np.float32)
        b = rng.standard_normal((k, nr)).astype(np.float32)
        c = rng.standard_normal((mr, nr)).astype(np.float32)
        product = a.astype(np.float64) @ b.astype(np.float64)
    expected = c.astype(np.float64).copy()
    touched = min(rows, mr)
    expected[:touched] += product[:touched]
    run_kernel(build(name), name, a, pack_b(b, x86.b_layout(name)), c, m_rows=rows)
    np.testing.assert_allclose(c, expected, rtol=1e-5, atol=1e-4)


def test_sgemm_template_names_and_register_budget():
    """The fp32 tiles come from one template; a tile needing more vector registers than the ISA
    has is refused before any C is written."""
    from refcomp.loops.intrin.kernels_fp32 import sgemm_tile_source

    source = sgemm_tile_source("avx512", 14, 2)
    assert "refcomp_sgemm_avx512_14x32(" in source and "refcomp_sgemm_avx512_14x32_m14(" in source
    assert "_mm_prefetch" not in sgemm_tile_source("avx2", 6, 2, prefetch=0)
    # the unrolled form: its own names, the compiler asked to unroll, no software prefetch
    unrolled = sgemm_tile_source("avx512", 6, 4, prefetch=0, unroll=4, suffix="_unrolled")
    assert "refcomp_sgemm_avx512_6x64_unrolled_init(" in unrolled and "#pragma GCC unroll 4" in unrolled
    assert "_mm_prefetch" not in unrolled and "unroll" not in sgemm_tile_source("avx512", 6, 4)
    assert x86.unrolled_form("x86.avx512.sgemm_6x64_panel") == "x86.avx512.sgemm_6x64_unrolled_panel"
    assert x86.unrolled_form("x86.avx512.sgemm_12x32") is None and x86.stream_form("x86.avx512.sgemm_6x64_unrolled") is None
    # c_early (the AVX2 6 x 16 tile): C's lines named for writing before the K loop, every
    # accumulator starting at zero, C added after the loop in the accumulating form
    early = sgemm_tile_source("avx2", 6, 2, c_early=True)
    assert "__builtin_prefetch(C + 5 * ldc + 15, 1, 3);" in early
    assert "c5_1 = _mm256_add_ps(c5_1, _mm256_loadu_ps(C + 5 * ldc + 8));" in early
    assert "_mm256_loadu_ps(C" not in early.split("for (int64_t k")[1].split("if (accumulate)")[0]
    assert "__builtin_prefetch(C" not in sgemm_tile_source("avx2", 6, 2)
    with pytest.raises(ValueError, match="needs 35 vector registers"):
        sgemm_tile_source("avx512", 16, 2)
    with pytest.raises(ValueError, match="needs 17 vector registers"):
        sgemm_tile_source("avx2", 7, 2)


STREAM_KERNELS = [x86.stream_form(name) for name in FLOAT_KERNELS if x86.stream_form(name)] + [
    x86.stream_form("x86.avx512.sgemm_12x32_panel"), x86.stream_form("x86.avx512.sgemm_6x64_panel")]


@pytest.mark.parametrize("name", _params(STREAM_KERNELS))
@given(k=st.integers(1, 40), panels=st.integers(1, 4), rows=st.integers(1, 40), accumulate=st.booleans(),
       seed=st.integers(0, 2**32 - 1))
@settings(max_examples=10)
def test_fp32_stream_form_over_panels_matches_numpy(build, name, k, panels, rows, accumulate, seed):
    """The stream form (its accumulating entry or its init form) over a C = A @ B whose B is packed
    as consecutive K x NR panels, looping panels outside row tiles as the matmul recipe does: every
    tile computes what numpy does, whatever its hints of the next panel name (the last panel's
    point past B), partial row tiles and K under the hint spacing included."""
    rng = np.random.default_rng(seed)
    mr, nr, _ = x86.tile_shape(name)
    info = intrin.get(name)
    panel_a = x86._TILES[x86.plain_form(name)][-1].get("a_panel", False)
    a = rng.standard_normal((rows, k)).astype(np.float32)
    b = rng.standard_normal((k, panels * nr)).astype(np.float32)
    c = rng.standard_normal((rows, panels * nr)).astype(np.float32)
    expected = (c.astype(np.float64) if accumulate else 0) + a.astype(np.float64) @ b.astype(np.float64)
    packed = np.ascontiguousarray(b.reshape(k, panels, nr).transpose(1, 0, 2))  # Bp[panel, k, j]
    tiles = -(-rows // mr)
    if panel_a:  # Ap[i // MR, k, i % MR], rows past M zero
        a_mem = np.zeros((tiles * mr, k), np.float32)
        a_mem[:rows] = a
        a_mem = np.ascontiguousarray(a_mem.reshape(tiles, mr, k).transpose(0, 2, 1))
        a_rs, a_cs, a_tile = 1, mr, mr * k
    else:
        a_mem, a_rs, a_cs, a_tile = a, k, 1, mr * k
    function = info.impl.body.value.args[0].value + ("" if accumulate else "_init")
    source = "\n".join(info.c_helpers) + (
        "\nint run(const float* A, int64_t a_rs, int64_t a_cs, const float* B, int64_t ldb, float* C, int64_t ldc, "
        f"int64_t K, int64_t m_rows) {{ {function}(A, a_rs, a_cs, B, ldb, C, ldc, K, m_rows); return 0; }}\n")
    lib = build(name + ("" if accumulate else "_init"), source)
    i64 = ctypes.c_int64
    ldc = panels * nr
    for p in range(panels):
        for t in range(tiles):
            lib.run(ctypes.c_void_p(a_mem.ctypes.data + 4 * t * a_tile), i64(a_rs), i64(a_cs),
                    ctypes.c_void_p(packed.ctypes.data + 4 * p * k * nr), i64(nr),
                    ctypes.c_void_p(c.ctypes.data + 4 * (t * mr * ldc + p * nr)), i64(ldc), i64(k),
                    i64(rows - t * mr))
    np.testing.assert_allclose(c, expected, rtol=1e-5, atol=1e-5 * k)
