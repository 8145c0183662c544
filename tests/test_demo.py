"""`refcomp demo`'s scheduling helpers: legal steps applied, illegal ones skipped, numbers unchanged."""
import numpy as np

from refcomp import demo, interpret, te, workloads


def test_elementwise_kernels_get_parallel_and_simd_loops(rng):
    A = te.placeholder((4, 64), "float32", "A")
    func = te.create_prim_func([A, te.compute((4, 64), lambda i, j: te.exp(A[i, j]) * 2.0, name="B")])
    scheduled, how = demo._schedule(func, ["B"])
    assert how == "parallel+simd"
    a = rng.standard_normal((4, 64)).astype("float32")
    want, got = np.full((4, 64), np.nan, "float32"), np.full((4, 64), np.nan, "float32")
    interpret(func, a, want)
    interpret(scheduled, a, got)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_a_step_the_schedule_refuses_is_skipped(rng):
    func = workloads.matmul(8, 12, 5)
    scheduled, how = demo._schedule(func, ["C"])
    assert "parallel" in how
    a = rng.standard_normal((8, 5)).astype("float32")
    b = rng.standard_normal((5, 12)).astype("float32")
    out = np.full((8, 12), np.nan, "float32")
    interpret(scheduled, a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)


def test_the_matmul_recipe_declines_a_shape_it_cannot_tile():
    assert demo._matmul_recipe(workloads.matmul(7, 13, 5), "C") == (None, "")


def test_the_demo_model_runs_compiled_and_matches_numpy(rng, capsys):
    error = demo.model_section(rng, {"batch": 5, "hidden": 16, "ffn": 24})
    assert error < 1e-5
    out = capsys.readouterr().out
    assert "refcomp (compiled)" in out and "numpy" in out
