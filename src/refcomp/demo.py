"""`refcomp demo`: a small model end to end and a few kernels, compared with numpy (error and time).

The model (a two-layer MLP with its weights as constants) is built with the graph API and runs as
one compiled C call (graph.build's default executor); the same model runs in numpy and, when onnx
and onnxruntime are installed, as an ONNX graph in onnxruntime.  Each side is timed as its best
single call of several, after a warm-up call and a pause that lets the other sides' idle thread
pools stop spinning; the printed ISA is what gcc -march=native targets.
"""
from __future__ import annotations

import time
from typing import Callable

import numpy as np

from . import te
from .driver import build
from .loops.intrin.cpu import describe, openmp_threads


# Pause before timing each side: an idle thread pool (refcomp's OpenMP workers, OpenBLAS's, or
# onnxruntime's) spins for a while after its last call and would take a core from the next side.
SETTLE_SECONDS = 0.3


def _best(fn: Callable[[], object], repeat: int = 3) -> float:
    time.sleep(SETTLE_SECONDS)
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _schedule(func):
    """func under the default schedule graph.build gives every kernel (rules chosen by analysing the
    PrimFunc: recipes for matmul and convolution, row reductions, elementwise), and a word for the
    kind of loops it made."""
    from .ast.functor import collect
    from .ast.stmt import For
    from .graph.passes.default_schedule import schedule_kernel

    scheduled = schedule_kernel(func)
    kinds = {loop.kind for loop in collect(scheduled.body, For)}
    words = [w for w, k in (("parallel", "parallel"), ("simd", "vectorized")) if k in kinds]
    return scheduled, "+".join(words) or "serial"


def _kernels(rng):
    n = te.var("n")
    A = te.placeholder((n, 1024), "float32", "A")
    B = te.compute((n, 1024), lambda i, j: te.sigmoid(A[i, j]) * A[i, j], name="B")
    a = rng.standard_normal((512, 1024)).astype(np.float32)
    yield ("elementwise silu (n symbolic)", te.create_prim_func([A, B]), [a],
           np.zeros_like(a), lambda x: x / (1 + np.exp(-x)))

    rows, cols = 256, 1024
    X = te.placeholder((rows, cols), "float32", "X")
    k = te.reduce_axis(cols, "k")
    peak = te.compute((rows,), lambda i: te.max(X[i, k], axis=k), name="peak")
    E = te.compute((rows, cols), lambda i, j: te.exp(X[i, j] - peak[i]), name="E")
    k2 = te.reduce_axis(cols, "k2")
    total = te.compute((rows,), lambda i: te.sum(E[i, k2], axis=k2), name="total")
    S = te.compute((rows, cols), lambda i, j: E[i, j] / total[i], name="S")
    x = rng.standard_normal((256, 1024)).astype(np.float32)

    def softmax(v):
        e = np.exp(v - v.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)
    yield "row softmax", te.create_prim_func([X, S]), [x], np.zeros_like(x), softmax

    M = 128
    P = te.placeholder((M, M), "float32", "P")
    Q = te.placeholder((M, M), "float32", "Q")
    kk = te.reduce_axis(M, "kk")
    R = te.compute((M, M), lambda i, j: te.sum(P[i, kk] * Q[kk, j], axis=kk), name="R")
    p = rng.standard_normal((M, M)).astype(np.float32)
    q = rng.standard_normal((M, M)).astype(np.float32)
    yield "matmul", te.create_prim_func([P, Q, R]), [p, q], np.zeros((M, M), np.float32), np.matmul

    Xc = te.placeholder((1, 8, 34, 34), "float32", "Xc")
    W = te.placeholder((16, 8, 3, 3), "float32", "W")
    c, r, s = te.reduce_axis(8, "c"), te.reduce_axis(3, "r"), te.reduce_axis(3, "s")
    Y = te.compute((1, 16, 32, 32), lambda b, o, h, w: te.sum(Xc[b, c, h + r, w + s] * W[o, c, r, s],
                                                              axis=[c, r, s]), name="Y")
    xc = rng.standard_normal((1, 8, 34, 34)).astype(np.float32)
    wt = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)

    def conv(xv, wv):
        out = np.zeros((1, 16, 32, 32), np.float32)
        for rr in range(3):
            for ss in range(3):
                out += np.einsum("bchw,oc->bohw", xv[:, :, rr:rr + 32, ss:ss + 32], wv[:, :, rr, ss])
        return out
    yield "conv2d 3x3", te.create_prim_func([Xc, W, Y]), [xc, wt], np.zeros((1, 16, 32, 32), np.float32), conv


def isa() -> str:
    """The machine and the vector extensions the kernels can use on it."""
    return describe()


def header() -> str:
    """The demo's first line: the ISA, the compiler flags and the thread count the times are of."""
    threads = openmp_threads()
    return (f"refcomp demo on {isa()}: compiled with gcc -O3 -march=native -fopenmp, {threads} "
            f"thread{'s' if threads != 1 else ''}, checked against numpy")


MODEL_SIZES = {"batch": 64, "hidden": 256, "ffn": 1024}


def mlp_model(rng, batch: int, hidden: int, ffn: int):
    """(graph module, weights, numpy function): y = relu(x @ w1 + b1) @ w2 + b2, weights constant."""
    from . import graph
    from .ast import SizeVar
    from .graph import BlockBuilder, Var, op, tensor

    w1 = (rng.standard_normal((hidden, ffn)) / np.sqrt(hidden)).astype(np.float32)
    b1 = rng.standard_normal(ffn).astype(np.float32)
    w2 = (rng.standard_normal((ffn, hidden)) / np.sqrt(ffn)).astype(np.float32)
    b2 = rng.standard_normal(hidden).astype(np.float32)
    n = SizeVar("batch", "int64")
    x = Var("x", tensor((n, hidden)))
    bb = BlockBuilder()
    with bb.function("main", [x], attrs={"tir_var_upper_bound": {"batch": max(batch, 1024)}}):
        with bb.dataflow():
            h = bb.emit(op.relu(op.add(op.matmul(x, graph.const(w1)), graph.const(b1))))
            y = bb.emit_output(op.add(op.matmul(h, graph.const(w2)), graph.const(b2)))
        bb.emit_func_output(y)

    def reference(v):
        return np.maximum(v @ w1 + b1, 0) @ w2 + b2
    return bb.get(), (w1, b1, w2, b2), reference


def _onnxruntime_session(weights, hidden: int):
    """The same MLP as an ONNX graph in onnxruntime, or None when either package is missing."""
    try:
        import onnxruntime
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        return None
    names = ("w1", "b1", "w2", "b2")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["xw1"]), helper.make_node("Add", ["xw1", "b1"], ["h0"]),
             helper.make_node("Relu", ["h0"], ["h"]), helper.make_node("MatMul", ["h", "w2"], ["hw2"]),
             helper.make_node("Add", ["hw2", "b2"], ["y"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", hidden])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", hidden])],
                              [numpy_helper.from_array(w, name) for w, name in zip(weights, names)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    session = onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return lambda v: session.run(None, {"x": v})[0]


def model_section(rng, sizes: dict | None = None) -> float:
    """Print the model comparison; return the worst relative error of refcomp's result."""
    from . import graph
    from .runtime import VirtualMachine

    sizes = dict(MODEL_SIZES, **(sizes or {}))
    mod, weights, reference = mlp_model(rng, **sizes)
    start = time.perf_counter()
    ex = graph.build(mod, target="c")
    build_s = time.perf_counter() - start
    run = ex.compiled.get("main") or VirtualMachine(ex)["main"]
    x = rng.standard_normal((sizes["batch"], sizes["hidden"])).astype(np.float32)
    want = reference(x)
    scale = max(1.0, float(np.max(np.abs(want))))
    error = float(np.max(np.abs(run(x) - want))) / scale
    sides = [("refcomp (" + ex.executor + ")", run), ("numpy", reference)]
    session = _onnxruntime_session(weights, sizes["hidden"])
    if session is not None:
        ort_error = float(np.max(np.abs(session(x) - want))) / scale
        sides.append(("onnxruntime", session))
    print(f"model: MLP {sizes['batch']}x{sizes['hidden']} -> {sizes['ffn']} -> {sizes['hidden']}, relu, weights "
          f"constant; built in {build_s:.1f} s; max error {error:.1e}"
          + (f" (onnxruntime {ort_error:.1e})" if session is not None else ""))
    times = {name: _best(lambda fn=fn: fn(x), repeat=20) for name, fn in sides}
    base = times["numpy"]
    for name, seconds in times.items():
        print(f"  {name:<34} {seconds * 1e3:9.3f} ms   {base / seconds:6.2f}x numpy")
    if session is None:
        print("  (onnxruntime is not installed: pip install onnx onnxruntime to compare with it)")
    return error


def main() -> int:
    """Run the model comparison, then build, run and compare the demo kernels (one row each)."""
    rng = np.random.default_rng()
    print(header() + "\n")
    worst = model_section(rng)
    print()
    columns = f"{'kernel':<30} {'shape':<18} {'loops':<14} {'max error':>10} {'refcomp ms':>11} {'numpy ms':>9} {'speed-up':>9}"
    print(columns)
    print("-" * len(columns))
    for name, func, inputs, out, reference in _kernels(rng):
        scheduled, how = _schedule(func)
        lib = build(scheduled)
        lib(*inputs, out)
        want = reference(*inputs)
        error = float(np.max(np.abs(out - want)) / max(1.0, float(np.max(np.abs(want)))))
        worst = max(worst, error)
        # best single run of several: robust when other processes compete for the cores
        time.sleep(SETTLE_SECONDS)
        t_ref = lib.time(*inputs, out, number=1, repeat=10)
        t_np = _best(lambda: reference(*inputs), repeat=10)
        shape = "x".join(str(d) for d in out.shape)
        print(f"{name:<30} {shape:<18} {how:<14} {error:10.1e} {t_ref * 1e3:11.3f} {t_np * 1e3:9.3f} "
              f"{t_np / t_ref:8.2f}x")
    print("\nmax error is relative to the largest output magnitude; every kernel is also run by the")
    print("reference interpreter in the test suite (python -m pytest).")
    print("Times are the best of several calls. On a machine whose cores are busy with other work, threads")
    print("wait for cores; OMP_NUM_THREADS=1 refcomp demo then compares one core with one core.")
    return 0 if worst < 1e-3 else 1


if __name__ == "__main__":
    raise SystemExit(main())
