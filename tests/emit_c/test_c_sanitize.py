"""Kernels built with -fsanitize=address,undefined run clean (in a subprocess with libasan preloaded)."""
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.sanitize

_PROGRAMS = textwrap.dedent("""
    import sys
    import numpy as np
    import refcomp
    from refcomp import te
    from refcomp.ast import Buffer, BufferStore, For, IntImm, PrimFunc, Ramp, SizeVar, Var
    sys.path.insert(0, {here!r})
    from emitc_programs import binary_kernel, unary_kernel
    from refcomp.ast import floordiv, floormod, max_
    target = "c -sanitize -O1"
    rng = np.random.default_rng(0)
    mode = sys.argv[1]
    if mode == "clean":
        for lanes in (1, 16, 3):
            lib = refcomp.build(unary_kernel("exp", lanes=lanes, kind="parallel"), target=target, bounds="off")
            a = rng.standard_normal(lanes * 7).astype(np.float32)
            b = np.zeros_like(a)
            lib(a, b)
            assert np.allclose(b, np.exp(a), rtol=1e-5)
        lib = refcomp.build(binary_kernel(lambda x, y: floordiv(x, y) + floormod(x, y) + x * y, "int32"),
                            target=target, bounds="off")
        a = rng.integers(-2**31, 2**31 - 1, 64, dtype=np.int32)
        b = rng.integers(-5, 5, 64, dtype=np.int32)
        b[b == 0] = 3
        b[:4] = [-1, -1, 1, -1]
        a[:4] = [-2**31, -2**31, 5, 7]
        lib(a, b, np.zeros(64, np.int32))
        b[7] = 0  # a zero divisor is reported, never undefined behaviour
        try:
            lib(a, b, np.zeros(64, np.int32))
            raise AssertionError("a division by zero was not reported")
        except refcomp.RuntimeFailure as failure:
            assert "integer division by zero" in str(failure)
        for dtype in ("float16", "bfloat16", "int8", "uint16"):
            lib = refcomp.build(binary_kernel(lambda x, y: max_(x * y, x - y), dtype, lanes=8),
                                target=target, bounds="off")
            store = "uint16" if dtype == "bfloat16" else dtype
            a = rng.integers(0, 200, 32).astype(store)
            lib(a, a.copy(), np.zeros(32, store))
        n = te.var("n")
        A = te.placeholder((n, 8), "float32", "A")
        k = te.reduce_axis(8, "k")
        R = te.compute((n,), lambda i: te.sum(A[i, k] * A[i, k], axis=k), name="R")
        lib = refcomp.build(te.create_prim_func([A, R]), target=target)
        x = rng.standard_normal((5, 8)).astype(np.float32)
        r = np.zeros(5, np.float32)
        lib(x, r)
        assert np.allclose(r, (x * x).sum(1), rtol=1e-5)
        for lanes in (4, 8, 16):  # stride-2 loads (two loads and a shuffle) end at the last element read
            m = SizeVar("m", "int32")
            A2, B2, j = Buffer("A", (m * (2 * lanes) - 1,), "float32"), Buffer("B", (m * lanes,), "float32"), Var("j", "int32")
            body = For(j, 0, m, "serial", BufferStore(B2, A2[Ramp(j * (2 * lanes), IntImm(2), lanes)],
                                                      (Ramp(j * lanes, IntImm(1), lanes),)))
            lib = refcomp.build(PrimFunc((A2, B2), body, name="stride2_%d" % lanes), target=target, bounds="off")
            a = rng.standard_normal(3 * 2 * lanes - 1).astype(np.float32)
            b = np.zeros(3 * lanes, np.float32)
            lib(a, b)
            assert np.array_equal(b, a[::2])
        from refcomp.graph.op.nn import _conv_te, _np_conv
        from refcomp.loops import recipes
        for h, o in ((6, 32), (24, 16)):  # the conv tile written back through its transpose (AVX-512)
            X, W = te.placeholder((2, 16, h, h), "float32", "X"), te.placeholder((o, 16, 1, 1), "float32", "W")
            Y = _conv_te(2)(X, W, (1, 1), (0,) * 4, (1, 1), 1)
            lib = refcomp.build(recipes.conv_fp32(te.create_prim_func([X, W, Y])).func, target=target)
            x, w = rng.standard_normal((2, 16, h, h)).astype(np.float32), rng.standard_normal((o, 16, 1, 1)).astype(np.float32)
            y = np.zeros((2, o, h, h), np.float32)
            lib(x, w, y)
            assert np.allclose(y, _np_conv(x, w, (1, 1), (0,) * 4, (1, 1), 1), rtol=1e-4, atol=1e-4)
        print("clean")
    else:
        n = SizeVar("n", "int32")
        A = Buffer("A", (n,), "float32")
        i = Var("i", "int32")
        bad = PrimFunc((A,), For(i, 0, n + 64, "serial", BufferStore(A, A[i] + 1.0, (i,))), "overrun")
        lib = refcomp.build(bad, target=target, bounds="off")
        lib(np.zeros(4, np.float32))
        print("not caught")
""")


def _asan_env():
    lib = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    if not os.path.isabs(lib) or not os.path.exists(lib):
        pytest.skip("gcc has no libasan.so")
    return dict(os.environ, LD_PRELOAD=lib, ASAN_OPTIONS="detect_leaks=0:abort_on_error=0",
                UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1")


def _run(mode):
    script = _PROGRAMS.format(here=os.path.dirname(__file__))
    return subprocess.run([sys.executable, "-c", script, mode], env=_asan_env(), capture_output=True,
                          text=True, timeout=600)


def test_kernels_run_clean_under_sanitizers():
    out = _run("clean")
    assert out.returncode == 0 and "clean" in out.stdout, out.stderr[-4000:]


def test_sanitizer_catches_an_overrun():
    out = _run("overrun")
    assert out.returncode != 0 and "not caught" not in out.stdout
    assert "AddressSanitizer" in out.stderr
