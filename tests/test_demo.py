"""`refcomp demo`: its kernels under the default schedule (numbers unchanged), and its model section."""
import numpy as np

import refcomp
from refcomp import demo, interpret, te, workloads


def test_elementwise_kernels_get_parallel_and_simd_loops(rng):
    A = te.placeholder((4, 64), "float32", "A")
    func = te.create_prim_func([A, te.compute((4, 64), lambda i, j: te.exp(A[i, j]) * 2.0, name="B")])
    scheduled, how = demo._schedule(func)
    assert how == "parallel+simd"
    a = rng.standard_normal((4, 64)).astype("float32")
    want, got = np.full((4, 64), np.nan, "float32"), np.full((4, 64), np.nan, "float32")
    interpret(func, a, want)
    interpret(scheduled, a, got)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_an_odd_matmul_gets_a_default_schedule_with_the_same_numbers(rng):
    func = workloads.matmul(8, 12, 5)
    scheduled, how = demo._schedule(func)
    assert how in ("parallel", "simd", "parallel+simd", "serial")
    a = rng.standard_normal((8, 5)).astype("float32")
    b = rng.standard_normal((5, 12)).astype("float32")
    out = np.full((8, 12), np.nan, "float32")
    interpret(scheduled, a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)


def test_every_demo_kernel_is_scheduled_and_matches_numpy(rng):
    for name, func, inputs, out, reference in demo._kernels(rng):
        scheduled, _how = demo._schedule(func)
        refcomp.build(scheduled)(*inputs, out)
        want = reference(*inputs)
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()), err_msg=name)


def test_the_demo_model_runs_compiled_and_matches_numpy(rng, capsys):
    error = demo.model_section(rng, {"batch": 5, "hidden": 16, "ffn": 24})
    assert error < 1e-5
    out = capsys.readouterr().out
    assert "refcomp (compiled)" in out and "numpy" in out


def test_the_header_names_the_isa_and_the_thread_count(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    line = demo.header()
    assert line.startswith(f"refcomp demo on {demo.isa()}: ") and ", 3 threads, checked against numpy" in line
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert ", 1 thread, " in demo.header()
    monkeypatch.setenv("OMP_NUM_THREADS", "nonsense")
    assert demo.openmp_threads() >= 1


def test_main_prints_the_header_the_table_and_the_note_on_busy_cores(monkeypatch, capsys):
    monkeypatch.setattr(demo, "MODEL_SIZES", {"batch": 4, "hidden": 16, "ffn": 24})
    monkeypatch.setattr(demo, "SETTLE_SECONDS", 0.0)
    every = demo._kernels
    monkeypatch.setattr(demo, "_kernels", lambda rng: iter([next(every(rng))]))
    assert demo.main() == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == demo.header() and any(line.startswith("elementwise silu") for line in out)
    assert out[-1].endswith("OMP_NUM_THREADS=1 refcomp demo then compares one core with one core.")
