"""The C emitter on hand-built lowered IR: golden fragments, names, numerics against numpy."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

import refcomp
from refcomp.ast import (
    AssertStmt, Broadcast, Buffer, BufferStore, Call, Cast, FloatImm, For, IntImm, LetStmt, PrimFunc, Ramp, Select,
    SizeVar, StringImm, Var, const, floordiv, floormod, max_, min_, seq,
)
from refcomp.emit_c import EmitOptions, emit
from emitc_programs import binary_kernel, unary_kernel

NATIVE = EmitOptions(vectors=True, openmp=True)
STRICT = EmitOptions(vectors=False, openmp=False, label="c -std=c99")


def test_signature_buffers_then_scalars_then_size_vars():
    n, m = SizeVar("n", "int64"), SizeVar("m", "int32")
    A = Buffer("A", (n, 4), "float32")
    B = Buffer("B", (m,), "float16")
    alpha = Var("alpha", "float32")
    i = Var("i", "int32")
    body = For(i, 0, m, "serial", BufferStore(B, Cast("float16", alpha), (i,)))
    module = emit(PrimFunc((A, alpha, B), body, name="sig"), NATIVE)
    assert "int32_t refcomp_sig(float* restrict A, uint16_t* restrict B, float alpha, int64_t n, " \
           "int64_t rc_arg_m)" in module.source
    assert "const int32_t m = (int32_t)rc_arg_m;" in module.source
    assert [p.kind for p in module.params] == ["buffer", "buffer", "scalar", "size", "size"]


def test_names_are_unique_and_deterministic():
    n = SizeVar("n", "int32")
    A = Buffer("A", (n,), "float32")
    i1, i2 = Var("i", "int32"), Var("i", "int32")
    body = seq(For(i1, 0, n, "serial", BufferStore(A, FloatImm(1.0), (i1,))),
               For(i2, 0, n, "serial", BufferStore(A, FloatImm(2.0), (i2,))))
    func = PrimFunc((A,), body, name="twice")
    first, second = emit(func, NATIVE).source, emit(func, NATIVE).source
    assert first == second
    assert "for (int32_t i = 0; i < n; ++i)" in first
    assert "for (int32_t i_1 = 0; i_1 < n; ++i_1)" in first


def _code_only(source):
    """The source without comments and string literals."""
    import re
    source = re.sub(r"/\*.*?\*/", " ", source, flags=re.S)
    return re.sub(r'"(\\.|[^"\\])*"', '""', source)


@pytest.mark.parametrize("where", ["buffer", "function", "var"])
def test_user_names_cannot_inject_c(where):
    evil = "a; exit(1); /* */ #include"
    n = SizeVar("n" if where != "var" else evil, "int32")
    A = Buffer(evil if where == "buffer" else "A", (n,), "float32")
    i = Var("i", "int32")
    func = PrimFunc((A,), For(i, 0, n, "serial", BufferStore(A, FloatImm(1.0), (i,))),
                    name=evil if where == "function" else "f")
    code = _code_only(emit(func, NATIVE).source)
    assert "exit(1)" not in code
    assert all(line.startswith(("#include <", "#define RC_", "#if", "#endif", "#else", "#elif", "#pragma"))
               for line in code.splitlines() if line.startswith("#"))
    lib = refcomp.build(func, target="c -std=c99", bounds="off")
    a = np.zeros(3, np.float32)
    lib(a)
    np.testing.assert_array_equal(a, 1.0)


def test_comment_text_is_escaped():
    func = unary_kernel("exp", name="x */ int evil; /*")
    assert "int evil" not in _code_only(emit(func, NATIVE).source)


def test_floor_division_uses_helpers():
    func = binary_kernel(lambda a, b: floordiv(a, b) + floormod(a, 7), dtype="int32")
    source = emit(func, NATIVE).source
    # a divisor that may be zero goes through the checked helper, a nonzero constant does not
    assert "rc_floordiv_checked_i32(A[i], B[i], &rc_zero)" in source and "rc_floormod_i32(A[i], 7)" in source


@given(st.lists(st.integers(-2**31, 2**31 - 1), min_size=1, max_size=12),
       st.lists(st.integers(-2**31, 2**31 - 1).filter(lambda v: v != 0), min_size=12, max_size=12))
def test_integer_semantics_match_python(avals, bvals):
    n = len(avals)
    a = np.array(avals, np.int32)
    b = np.array(bvals[:n], np.int32)
    lib = _lib_int_ops()
    out = np.zeros((4, n), np.int32)
    lib(a, b, out[0], out[1], out[2], out[3])
    wrap = lambda v: ((v + 2**31) % 2**32) - 2**31  # noqa: E731
    for k in range(n):
        x, y = int(a[k]), int(b[k])
        assert out[0, k] == wrap(x // y)
        assert out[1, k] == wrap(x % y)
        assert out[2, k] == wrap(x * y + x)
        assert out[3, k] == wrap(max(x, y) - min(x, y))


_CACHE = {}


def _lib_int_ops():
    if "int" not in _CACHE:
        n = SizeVar("n", "int32")
        A, B = Buffer("A", (n,), "int32"), Buffer("B", (n,), "int32")
        outs = [Buffer(f"O{k}", (n,), "int32") for k in range(4)]
        i = Var("i", "int32")
        a, b = A[i], B[i]
        body = seq(BufferStore(outs[0], floordiv(a, b), (i,)), BufferStore(outs[1], floormod(a, b), (i,)),
                   BufferStore(outs[2], a * b + a, (i,)), BufferStore(outs[3], max_(a, b) - min_(a, b), (i,)))
        func = PrimFunc((A, B, *outs), For(i, 0, n, "serial", body), "intops")
        _CACHE["int"] = refcomp.build(func, target="c -std=c99", bounds="off")
    return _CACHE["int"]


def test_int_min_divided_by_minus_one_wraps_and_division_by_zero_is_reported():
    lib = _lib_int_ops()
    a = np.array([7, -7, -2**31, 5], np.int32)
    b = np.array([2, -2, -1, -1], np.int32)
    out = np.zeros((4, 4), np.int32)
    lib(a, b, *out)
    assert list(out[0]) == [3, 3, -2**31, -5]
    assert list(out[1]) == [1, -1, 0, 0]
    b[1] = 0
    with pytest.raises(refcomp.RuntimeFailure, match="integer division by zero"):
        lib(a, b, *np.zeros((4, 4), np.int32))


@pytest.mark.parametrize("target", ["c", "c -std=c99"])
@pytest.mark.parametrize("lanes", [1, 8, 3])
def test_vector_and_scalarised_exp_agree_with_numpy(target, lanes, rng):
    lib = refcomp.build(unary_kernel("exp", lanes=lanes, kind="serial"), target=target, bounds="off")
    a = rng.standard_normal(lanes * 5).astype(np.float32) * 4
    b = np.full_like(a, np.nan)
    lib(a, b)
    np.testing.assert_allclose(b, np.exp(a.astype(np.float64)), rtol=4e-7 * 8)


def test_assert_gives_distinct_codes_and_messages():
    n = SizeVar("n", "int32")
    A = Buffer("A", (n,), "float32")
    i = Var("i", "int32")
    store = BufferStore(A, FloatImm(1.0), (i,))
    body = AssertStmt(n > 2, "n must exceed 2", AssertStmt(n < 100, "n must stay below 100",
                                                             For(i, 0, n, "parallel", store)))
    lib = refcomp.build(PrimFunc((A,), body, name="guarded"), bounds="off")
    lib(np.zeros(5, np.float32))
    with pytest.raises(refcomp.RuntimeFailure, match="n must exceed 2"):
        lib(np.zeros(2, np.float32))
    with pytest.raises(refcomp.RuntimeFailure, match="n must stay below 100"):
        lib(np.zeros(200, np.float32))


def test_assert_inside_parallel_loop_with_heap_allocation():
    n = SizeVar("n", "int32")
    A = Buffer("A", (n,), "float32")
    T = Buffer("T", (n,), "float32")
    i, j = Var("i", "int32"), Var("j", "int32")
    inner = seq(BufferStore(T, A[j] * 2.0, (j,)),
                AssertStmt(T[j] < FloatImm(100.0), "value too large", BufferStore(A, T[j], (j,))))
    from refcomp.ast import Allocate
    body = For(i, 0, 1, "serial", Allocate(T, For(j, 0, n, "parallel", inner)))
    lib = refcomp.build(PrimFunc((A,), body, name="alloc_guard"), bounds="off")
    a = np.arange(6, dtype=np.float32)
    lib(a)
    np.testing.assert_array_equal(a, np.arange(6) * 2.0)
    with pytest.raises(refcomp.RuntimeFailure, match="value too large"):
        lib(np.full(4, 60.0, np.float32))


def test_call_extern_rejects_non_identifiers():
    n = SizeVar("n", "int32")
    A = Buffer("A", (n,), "float32")
    i = Var("i", "int32")
    value = Call("call_extern", (StringImm("exit(1); f"), A[i]), "float32")
    func = PrimFunc((A,), For(i, 0, n, "serial", BufferStore(A, value, (i,))), "ext")
    with pytest.raises(refcomp.BuildError, match="not a plain C identifier"):
        emit(func, NATIVE)


def test_c_helpers_and_extern_calls():
    helper = "static float twice_plus(float x, float y) { return 2.0f * x + y; }"
    n = SizeVar("n", "int32")
    A = Buffer("A", (n,), "float32")
    i = Var("i", "int32")
    value = Call("call_extern", (StringImm("twice_plus"), A[i], FloatImm(1.0)), "float32")
    func = PrimFunc((A,), For(i, 0, n, "serial", BufferStore(A, value, (i,))), "ext",
                    attrs={"c_helpers": (helper, helper)})
    lib = refcomp.build(func, bounds="off")
    assert lib.source.count("twice_plus(float x") == 1
    a = np.arange(4, dtype=np.float32)
    lib(a)
    np.testing.assert_array_equal(a, np.arange(4) * 2.0 + 1.0)


def test_let_stmt_and_unrolled_loop():
    n = SizeVar("n", "int32")
    A = Buffer("A", (n * 4,), "float32")
    i, j, t = Var("i", "int32"), Var("j", "int32"), Var("t", "int32")
    body = For(i, 0, n, "serial", LetStmt(t, i * 4, For(j, 0, 4, "unrolled",
                                                       BufferStore(A, Cast("float32", t + j), (t + j,)))))
    lib = refcomp.build(PrimFunc((A,), body, name="unroll"), bounds="off")
    assert "#pragma GCC unroll 4" in lib.source
    a = np.zeros(12, np.float32)
    lib(a)
    np.testing.assert_array_equal(a, np.arange(12))


def test_gather_with_strided_ramp(rng):
    n = SizeVar("n", "int32")
    A = Buffer("A", (n * 16,), "float32")
    B = Buffer("B", (n * 8,), "float32")
    i = Var("i", "int32")
    body = For(i, 0, n, "serial", BufferStore(B, A[Ramp(i * 16, IntImm(2), 8)], (Ramp(i * 8, IntImm(1), 8),)))
    for target in ("c", "c -std=c99"):
        lib = refcomp.build(PrimFunc((A, B), body, name="gather"), target=target, bounds="off")
        a = rng.standard_normal(48).astype(np.float32)
        b = np.zeros(24, np.float32)
        lib(a, b)
        np.testing.assert_array_equal(b, a[::2])


@pytest.mark.parametrize("index", ["int32", "int64"])
@pytest.mark.parametrize("lanes", [4, 8, 16])
@pytest.mark.parametrize("dtype", ["float32", "int32", "float64"])
def test_gather_at_a_large_stride_matches_numpy(rng, lanes, dtype, index):
    """A[Ramp(base, K, lanes)], a column of a row-major (rows, K) matrix (a linear layer's W read
    into k-major panels): 32-bit elements in 8 or 16 lanes gather with the CPU's instruction
    where the build has it (the lane loop otherwise); every row count, negative values and both
    C targets agree with numpy."""
    stride = 1024
    n = SizeVar("n", index)
    A = Buffer("A", (n * stride * lanes,), dtype)
    B = Buffer("B", (n * stride * lanes,), dtype)
    i, k = Var("i", index), Var("k", index)
    body = For(i, 0, n, "serial", For(k, 0, stride, "serial", BufferStore(
        B, A[Ramp(i * (stride * lanes) + k, IntImm(stride, index), lanes)],
        (Ramp((i * stride + k) * lanes, IntImm(1, index), lanes),))))
    func = PrimFunc((A, B), body, name=f"gather_{dtype}_{lanes}_{index}")
    source = emit(func).source
    form = {"float32": "gather_ps", "int32": "gather_epi32"}.get(dtype) if lanes in (8, 16) else None
    if index == "int64" and lanes == 8:
        form = None if form is None else "_mm512_i64" + form  # AVX2 keeps the lane loop for int64
    elif form is not None:
        form = ("_i32" if index == "int32" else "_i64") + form
    assert form is None or form in source
    for target in ("c -Werror", "c -std=c99"):
        lib = refcomp.build(func, target=target, bounds="off")
        for rows in (1, 3):
            a = (rng.standard_normal(rows * stride * lanes) * 1000).astype(dtype)
            b = np.zeros_like(a)
            lib(a, b)
            want = a.reshape(rows, lanes, stride).transpose(0, 2, 1).reshape(-1)
            np.testing.assert_array_equal(b, want)


@pytest.mark.parametrize("lanes", [2, 4, 8, 16])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
def test_stride_two_ramp_is_two_loads_and_a_shuffle(rng, lanes, dtype):
    """A[Ramp(base, 2, lanes)] (a stride-2 convolution's input) is read as two contiguous loads
    and one shuffle, not element by element; the last row ends at A's last element, so the loads
    read nothing outside the span the ramp covers."""
    n = SizeVar("n", "int32")
    A = Buffer("A", (n * (2 * lanes) - 1,), dtype)
    B = Buffer("B", (n * lanes,), dtype)
    i = Var("i", "int32")
    body = For(i, 0, n, "parallel",
               BufferStore(B, A[Ramp(i * (2 * lanes), IntImm(2), lanes)], (Ramp(i * lanes, IntImm(1), lanes),)))
    func = PrimFunc((A, B), body, name=f"stride2_{dtype}_{lanes}")
    source = emit(func).source
    assert f"rc_vload2_{dtype}x{lanes}(&A[" in source and "rc_gather" not in source
    for rows in (1, 5):
        lib = refcomp.build(func, target="c -Werror", bounds="off")
        a = (rng.standard_normal(rows * 2 * lanes - 1) * 100).astype(dtype)
        b = np.zeros(rows * lanes, dtype)
        lib(a, b)
        np.testing.assert_array_equal(b, a[::2])


@pytest.mark.parametrize("lanes", [2, 8, 16])
@pytest.mark.parametrize("offset", [0, 1])
def test_stride_two_bfloat16_ramp_is_a_word_load_and_a_shift(rng, lanes, offset, vector_isa):
    """A bfloat16 A[Ramp(base, 2, lanes)] as float32 (either half of bfloat16 pairs, e.g. a key of
    value pages stored in pairs along the keys) is one vector read of 32-bit words and a shift
    left by 16 (even base) or an AND with 0xFFFF0000 (odd base) per lane, not a gather; every bit pattern comes through exactly, and the last row ends
    at A's last element, so nothing outside the span is read."""
    n = SizeVar("n", "int32")
    A = Buffer("A", (n * (2 * lanes) - 1 + offset,), "bfloat16")
    B = Buffer("B", (n * lanes,), "float32")
    i = Var("i", "int32")
    body = For(i, 0, n, "parallel", BufferStore(
        B, Cast(f"float32x{lanes}", A[Ramp(i * (2 * lanes) + offset, IntImm(2), lanes)]), (Ramp(i * lanes, IntImm(1), lanes),)))
    func = PrimFunc((A, B), body, name=f"stride2_bf16_{lanes}_{offset}")
    source = emit(func).source
    # an odd index (the second of pairs) reads the words from the element before, an AND each
    assert f"rc_vload2{'odd' if offset else ''}_bfloat16x{lanes}(&A[" in source and "rc_gather" not in source
    for target in ("c -Werror", "c -std=c99"):
        lib = refcomp.build(func, target=target, bounds="off")
        for rows in (1, 5):
            a = rng.integers(0, 1 << 16, rows * 2 * lanes - 1 + offset, dtype=np.uint16)
            b = np.zeros(rows * lanes, np.float32)
            lib(a, b)
            np.testing.assert_array_equal(b.view(np.uint32), a[offset::2].astype(np.uint32) << 16)


def test_float_constants_are_exact():
    n = SizeVar("n", "int32")
    A = Buffer("A", (n,), "float64")
    values = [0.1, -0.0, float("inf"), float("-inf"), 1e-310, 2.0**60]
    body = seq(*[BufferStore(A, FloatImm(v, "float64"), (IntImm(k),)) for k, v in enumerate(values)])
    lib = refcomp.build(PrimFunc((A,), body, name="consts"), bounds="off")
    a = np.zeros(len(values))
    lib(a)
    assert list(a) == values and np.signbit(a[1])


def test_blocks_are_rejected_before_emission():
    from refcomp.ast import Block, BlockRealize
    n = SizeVar("n", "int32")
    A = Buffer("A", (n,), "float32")
    block = Block("b", (), (), (), BufferStore(A, FloatImm(1.0), (IntImm(0),)))
    func = PrimFunc((A,), BlockRealize((), const(True), block), "blocky")
    with pytest.raises(refcomp.BuildError, match="blocks"):
        emit(func, NATIVE)


def _streaming_kernel(align, hint=True):
    from refcomp.emit_c.codegen import NONTEMPORAL
    n = SizeVar("n", "int32")
    A = Buffer("A", (n * 8,), "float32")
    B = Buffer("B", (n * 8,), "float32", align=align)
    i = Var("i", "int32")
    ramp = Ramp(i * 8, IntImm(1), 8)
    body = For(i, 0, n, "parallel", BufferStore(B, A[ramp] * 3.0, (ramp,)), annotations={NONTEMPORAL: hint})
    return PrimFunc((A, B), body, f"stream_{align}")


def test_nontemporal_stores_need_alignment_and_are_fenced(rng):
    aligned = emit(_streaming_kernel(64), NATIVE).source
    assert "rc_vstream_float32x8(&B[" in aligned and "__builtin_ia32_sfence();" in aligned
    # no alignment promised: under True (every buffer) ordinary stores; the buffer named, checked ones
    everything = emit(_streaming_kernel(0), NATIVE).source
    assert "rc_vstreamc_float32x8(&B[" not in everything and "rc_vstream_float32x8(&B[" not in everything
    unaligned = emit(_streaming_kernel(0, "B"), NATIVE).source
    assert "rc_vstreamc_float32x8(&B[" in unaligned and "rc_vstream_float32x8(&B[" not in unaligned
    assert unaligned.count("__builtin_ia32_sfence();") >= 1
    a = rng.standard_normal(64).astype(np.float32)
    raw = np.zeros(64 + 32, np.float32)
    for align, shift in ((64, 0), (0, 0), (0, 1), (0, 4), (0, 8), (0, 3)):
        # shift elements past a line: aligned to 4, 16 or 32 bytes, every path of the checked store
        lib = refcomp.build(_streaming_kernel(align, "B"), bounds="off")
        offset = (-raw.ctypes.data % 64) // 4 + shift
        b = raw[offset:offset + 64]
        b[:] = np.nan
        lib(a, b)
        np.testing.assert_array_equal(b, a * np.float32(3.0))


def test_nontemporal_store_names_one_buffer():
    """Annotated with a buffer's name, the loop streams the stores to that buffer only."""
    from refcomp.emit_c.codegen import NONTEMPORAL
    n = SizeVar("n", "int32")
    A = Buffer("A", (n * 8,), "float32")
    B = Buffer("B", (n * 8,), "float32")
    C = Buffer("C", (n * 8,), "float32")
    i = Var("i", "int32")
    ramp = Ramp(i * 8, IntImm(1), 8)
    body = For(i, 0, n, "parallel", seq(BufferStore(B, A[ramp] * 3.0, (ramp,)), BufferStore(C, A[ramp], (ramp,))),
               annotations={NONTEMPORAL: "B"})
    source = emit(PrimFunc((A, B, C), body, "stream_named"), NATIVE).source
    assert "rc_vstreamc_float32x8(&B[" in source and "rc_vstore_float32x8(&C[" in source
    assert "#pragma omp for schedule(static) nowait" in source  # each thread fences its own stores


def test_unsplittable_wide_vector_compiles_with_werror():
    """A 16-lane store that reads what it writes stays whole; -Werror must still accept it."""
    n = SizeVar("n", "int32")
    A = Buffer("A", (n * 16 + 1,), "float32")
    i = Var("i", "int32")
    value = Call("exp", (A[Ramp(i * 16, IntImm(1), 16)],), "float32x16")
    body = For(i, 0, n, "serial", BufferStore(A, value, (Ramp(i * 16 + 1, IntImm(1), 16),)))
    lib = refcomp.build(PrimFunc((A,), body, "shift_exp"), target="c -Werror", bounds="off")
    a = np.arange(17, dtype=np.float32) / 10
    want = a.copy()
    want[1:] = np.exp(a[:16])
    lib(a)
    np.testing.assert_allclose(a, want, rtol=1e-6)


def test_vector_element_buffers_are_rejected():
    from refcomp.ast import Allocate
    n = SizeVar("n", "int32")
    A = Buffer("A", (n,), "float32")
    V = Buffer("V", (4,), "float32x4")
    i = Var("i", "int32")
    body = Allocate(V, For(i, 0, n, "serial", BufferStore(A, A[i], (i,))))
    with pytest.raises(refcomp.BuildError, match="scalar elements only"):
        emit(PrimFunc((A,), body, "vecbuf"), NATIVE)


@pytest.mark.parametrize("name", ["NAN", "expf", "exp", "int32_t", "INFINITY", "size_t", "memcpy",
                                  "omp_get_thread_num", "free", "rc_status", "return", "rc_l", "bool"])
def test_names_that_clash_with_c_are_prefixed(name, rng):
    n = SizeVar("n", "int32")
    A = Buffer(name, (n,), "float32")
    i = Var(name, "int32")
    func = PrimFunc((A,), For(i, 0, n, "parallel", BufferStore(A, Call("exp", (A[i],), "float32"), (i,))),
                    name)
    for target in ("c", "c -std=c99"):
        lib = refcomp.build(func, target=target, bounds="off")
        a = rng.standard_normal(5).astype(np.float32)
        want = np.exp(a)
        lib(a)
        np.testing.assert_allclose(a, want, rtol=1e-6)


def test_dynamic_schedule_annotation(rng):
    from refcomp.emit_c.codegen import OMP_SCHEDULE
    n = SizeVar("n", "int32")
    A = Buffer("A", (n,), "float32")
    i = Var("i", "int32")
    body = For(i, 0, n, "parallel", BufferStore(A, A[i] * 2.0, (i,)), annotations={OMP_SCHEDULE: "dynamic"})
    lib = refcomp.build(PrimFunc((A,), body, "dyn"), bounds="off")
    assert "schedule(dynamic," in lib.source and "#include <omp.h>" in lib.source
    a = rng.standard_normal(1000).astype(np.float32)
    want = a * 2
    lib(a)
    np.testing.assert_array_equal(a, want)


@pytest.mark.parametrize("dtype", ["int8", "int32", "uint16", "int64"])
@pytest.mark.parametrize("lanes", [8, 16])
def test_vector_integer_ops_wrap_like_the_interpreter(dtype, lanes, rng):
    func = binary_kernel(lambda a, b: max_(a * b + a - b, floordiv(a, b)) + floormod(a, b), dtype=dtype,
                         lanes=lanes, name=f"vint_{dtype}_{lanes}")
    lib = refcomp.build(func, bounds="off")
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max, lanes * 4, endpoint=True, dtype=dtype)
    b = rng.integers(info.min, info.max, lanes * 4, endpoint=True, dtype=dtype)
    b[b == 0] = 3
    a[a == info.min] = 1  # INT_MIN // -1 is an interpreter error case; keep it out
    out, want = np.zeros_like(a), np.zeros_like(a)
    lib(a, b, out)
    refcomp.interpret(func, a, b, want, n=4)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("source, target", [("float32", "int32"), ("float32", "int8"), ("int32", "float32"),
                                            ("float64", "uint16"), ("int16", "int64"), ("float32", "bool")])
@pytest.mark.parametrize("build_target", ["c", "c -std=c99"])
def test_vector_casts_match_interpreter(source, target, build_target, rng):
    n = SizeVar("n", "int32")
    A, B = Buffer("A", (n * 8,), source), Buffer("B", (n * 8,), target)
    i = Var("i", "int32")
    ramp = Ramp(i * 8, IntImm(1), 8)
    func = PrimFunc((A, B), For(i, 0, n, "serial", BufferStore(B, Cast(f"{target}x8", A[ramp]), (ramp,))),
                    f"vcast_{source}_{target}")
    lib = refcomp.build(func, target=build_target, bounds="off")
    if np.dtype(source).kind == "f":
        a = (rng.standard_normal(32) * 300).astype(source)
        a[:6] = [np.nan, np.inf, -np.inf, 1e10, -1e10, -0.0]
    else:
        info = np.iinfo(source)
        a = rng.integers(info.min, info.max, 32, endpoint=True, dtype=source)
    out, want = np.zeros(32, target), np.zeros(32, target)
    lib(a, out)
    refcomp.interpret(func, a, want, n=4)
    np.testing.assert_array_equal(out, want)


def test_decidable_comparisons_and_unused_lets_compile_under_werror():
    """gcc -Wextra -Werror rejects `x < x`, `unsigned >= 0` and unused locals; programs may have them."""
    n = SizeVar("n", "int32")
    A = Buffer("A", (n,), "uint8")
    B = Buffer("B", (n,), "int32")
    i, unused = Var("i", "int32"), Var("unused", "int32")
    a = A[i]
    value = Select(a >= IntImm(0, "uint8"), IntImm(1), IntImm(2)) + Select(B[i] < B[i], IntImm(10), IntImm(20)) \
        + Select(a <= IntImm(255, "uint8"), IntImm(100), IntImm(200)) + Select(B[i] == B[i], IntImm(0), IntImm(5))
    body = For(i, 0, n, "serial", LetStmt(unused, i * 2, BufferStore(B, value, (i,))))
    func = PrimFunc((A, B), body, "tautologies")
    lib = refcomp.build(func, target="c -std=c99", bounds="off")
    a = np.arange(4, dtype=np.uint8)
    b = np.arange(4, dtype=np.int32)
    lib(a, b)
    np.testing.assert_array_equal(b, 121)


@pytest.mark.parametrize("seed", range(4))
def test_select_over_loads_in_a_short_inner_loop(seed):
    """out = x < 0 ? x * s : x over 12 x 5 (an ONNX PRelu kernel): gcc 12 -O3 with AVX-512 turned
    the load of s under C's ?: into a masked vector load and read chosen lanes as 0; the Select is
    emitted through rc_select_f32, whose operands are all evaluated."""
    X, S, O = (Buffer(name, (60,), "float32") for name in ("x", "s", "out"))
    i, j = Var("i", "int64"), Var("j", "int64")
    k = i * 5 + j
    value = Select(X[k] < FloatImm(0.0), X[k] * S[k], X[k])
    body = For(i, 0, 12, "parallel", For(j, 0, 5, "serial", BufferStore(O, value, (k,))))
    lib = refcomp.build(PrimFunc((X, S, O), body, name="prelu_rows"), bounds="off")
    assert "rc_select_f32(" in lib.source
    rng = np.random.default_rng(seed)
    x, s = rng.standard_normal(60).astype(np.float32), rng.standard_normal(60).astype(np.float32)
    out = np.zeros(60, np.float32)
    lib(x, s, out)
    np.testing.assert_array_equal(out, np.where(x < 0, x * s, x))


@pytest.mark.parametrize("seed", range(3))
def test_a_bool_broadcast_next_to_an_int32_broadcast_is_a_full_mask(seed):
    """Both vectors have the type rc_i32x8; the bool one must broadcast true as -1 (every bit set,
    as the bitwise select needs), not as the int32 1 of its neighbour."""
    n = SizeVar("n", "int32")
    A, C = Buffer("A", (n * 8,), "int32"), Buffer("C", (n * 8,), "int32")
    i, flag = Var("i", "int32"), Var("flag", "int32")
    ramp = Ramp(i * 8, IntImm(1), 8)
    mask = (A[ramp] > Broadcast(IntImm(0, "int32"), 8)) & Broadcast(flag > IntImm(0, "int32"), 8)
    value = Select(mask, A[ramp] + Broadcast(IntImm(1, "int32"), 8), Broadcast(IntImm(0, "int32"), 8))
    func = PrimFunc((A, flag, C), For(i, 0, n, "serial", BufferStore(C, value, (ramp,))), "masked")
    lib = refcomp.build(func, bounds="off")
    assert "rc_bcast_mask_i32x8(" in lib.source
    a = np.random.default_rng(seed).integers(-5, 5, 32).astype(np.int32)
    for f in (0, 1):
        c = np.zeros(32, np.int32)
        lib(a, np.int32(f), c)
        np.testing.assert_array_equal(c, np.where((a > 0) & bool(f), a + 1, 0))


def test_a_broadcast_keeps_negative_zero():
    """A scalar broadcast into a vector is x - 0, exact for -0.0 too (0 + x would make it +0.0)."""
    from refcomp import te

    A = te.placeholder((2,), "float32", "A")
    B = te.compute((2, 16), lambda i, j: A[i], name="B")
    sch = refcomp.Schedule(te.create_prim_func([A, B]))
    _, j = sch.get_loops(sch.get_block("B"))
    sch.vectorize(j)
    out = np.ones((2, 16), np.float32)
    refcomp.build(sch.func)(np.array([-0.0, 1.5], np.float32), out)
    assert np.all(np.signbit(out[0])) and np.all(out[1] == 1.5)


@pytest.mark.parametrize("lanes", [4, 8, 16])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("op", ["max", "min"])
def test_vector_min_max_keep_nan_and_zero_semantics(rng, lanes, dtype, op):
    """Vector max / min (one register: MAXPS / MINPS and a blend where available) give
    `a > b or isnan(a) ? a : b` (min: `<`) bit for bit: NaN from either side, b for equal zeros."""
    from refcomp.ast import max_, min_

    fn = max_ if op == "max" else min_
    lib = refcomp.build(binary_kernel(fn, dtype, lanes=lanes, name=f"v{op}_{dtype}_{lanes}"), target="c -Werror",
                        bounds="off")
    size = lanes * 8
    a, b = rng.standard_normal(size).astype(dtype), rng.standard_normal(size).astype(dtype)
    special = np.array([np.nan, 0.0, -0.0, 0.0, -0.0, 1.0, np.nan, np.inf], dtype)
    other = np.array([1.0, -0.0, 0.0, 0.0, -0.0, np.nan, np.nan, -np.inf], dtype)
    a[:8], b[:8] = special, other
    b[8:16], a[8:16] = special, other
    c = np.zeros(size, dtype)
    lib(a, b, c)
    with np.errstate(invalid="ignore"):
        pick = (a > b) if op == "max" else (a < b)
    expected = np.where(pick | np.isnan(a), a, b)
    np.testing.assert_array_equal(c.view(f"u{c.itemsize}"), expected.view(f"u{c.itemsize}"))


@pytest.mark.parametrize("lanes", [4, 8, 16])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("constant, first", [(-87.0, False), (-87.0, True), (2.5, False), (0.0, True),
                                             (-0.0, True), (0.0, False), (-0.0, False), (np.inf, False)])
def test_vector_min_max_with_a_constant_keep_the_generic_semantics(rng, lanes, dtype, op, constant, first):
    """A min / max with a constant operand (a clamp) takes the one-instruction form where that is
    exact: a constant first operand (never NaN), or a second one that is neither NaN nor zero; the
    result is the generic form's bit for bit (NaN from the variable side, b for equal zeros)."""
    from refcomp.ast import max_, min_

    fn = max_ if op == "max" else min_
    c = Broadcast(FloatImm(constant, dtype), lanes)
    func = binary_kernel(lambda a, b: fn(c, a) if first else fn(a, c), dtype, lanes=lanes,
                         name=f"vc{op}_{dtype}_{lanes}")
    lib = refcomp.build(func, target="c -Werror", bounds="off")
    assert (f"rc_v{op}o_" in lib.source) == (first or constant != 0.0)
    size = lanes * 8
    a = rng.standard_normal(size).astype(dtype)
    a[:8] = np.array([np.nan, 0.0, -0.0, constant, -np.inf, np.inf, -constant, 1e30], dtype)
    out = np.zeros(size, dtype)
    lib(a, np.zeros(size, dtype), out)
    x, y = (np.full(size, constant, dtype), a) if first else (a, np.full(size, constant, dtype))
    with np.errstate(invalid="ignore"):
        pick = (x > y) if op == "max" else (x < y)
    expected = np.where(pick | np.isnan(x), x, y)
    np.testing.assert_array_equal(out.view(f"u{out.itemsize}"), expected.view(f"u{out.itemsize}"))
