"""`refcomp demo`: build a few kernels from te, run them, compare with numpy (error and time)."""
from __future__ import annotations

import time
from typing import Callable

import numpy as np

from . import te
from .driver import build
from .errors import ScheduleError
from .loops import recipes
from .loops.schedule import Schedule


def _best(fn: Callable[[], object], repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _schedule(func, block_names):
    """func with each block's outer loop parallel and its inner loop split by 16 and vectorized,
    as far as the schedule allows (an illegal step is refused and leaves the IR unchanged)."""
    sch = Schedule(func)
    done = set()
    for name in block_names:
        try:
            loops = sch.get_loops(sch.get_block(name))
            sch.parallel(loops[0])
            done.add("parallel")
            if len(loops) > 1:
                _outer, inner = sch.split(loops[-1], [None, 16])
                sch.vectorize(inner)
                done.add("simd")
        except ScheduleError:
            continue  # this step is not legal here (a reduction loop, an odd extent): skip it
    return sch.func, "+".join(sorted(done)) or "serial"


def _matmul_recipe(func, block_name: str):
    """The schedule engineer's tiled fp32 matmul recipe, when it applies here (else None)."""
    try:
        return recipes.matmul_fp32(func, block=block_name).func, "recipe"
    except ScheduleError:  # no tile intrinsic of this machine fits the shape
        return None, ""


def _kernels(rng):
    n = te.var("n")
    A = te.placeholder((n, 1024), "float32", "A")
    B = te.compute((n, 1024), lambda i, j: te.sigmoid(A[i, j]) * A[i, j], name="B")
    a = rng.standard_normal((512, 1024)).astype(np.float32)
    yield ("elementwise silu (n symbolic)", te.create_prim_func([A, B]), ["B"], [a],
           np.zeros_like(a), lambda x: x / (1 + np.exp(-x)))

    rows, cols = te.var("rows"), te.var("cols")
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
    yield "row softmax", te.create_prim_func([X, S]), ["peak", "E", "total", "S"], [x], np.zeros_like(x), softmax

    M = 128
    P = te.placeholder((M, M), "float32", "P")
    Q = te.placeholder((M, M), "float32", "Q")
    kk = te.reduce_axis(M, "kk")
    R = te.compute((M, M), lambda i, j: te.sum(P[i, kk] * Q[kk, j], axis=kk), name="R")
    p = rng.standard_normal((M, M)).astype(np.float32)
    q = rng.standard_normal((M, M)).astype(np.float32)
    yield "matmul", te.create_prim_func([P, Q, R]), ["R"], [p, q], np.zeros((M, M), np.float32), np.matmul

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
    yield "conv2d 3x3", te.create_prim_func([Xc, W, Y]), ["Y"], [xc, wt], np.zeros((1, 16, 32, 32), np.float32), conv


def main() -> int:
    """Build, run and compare the demo kernels; print one table row per kernel."""
    rng = np.random.default_rng()
    print("refcomp demo: te kernels compiled to C (gcc -O3 -march=native -fopenmp), checked against numpy\n")
    header = f"{'kernel':<30} {'shape':<18} {'loops':<14} {'max error':>10} {'refcomp ms':>11} {'numpy ms':>9} {'speed-up':>9}"
    print(header)
    print("-" * len(header))
    worst = 0.0
    for name, func, blocks, inputs, out, reference in _kernels(rng):
        scheduled, how = _matmul_recipe(func, blocks[0]) if name == "matmul" else (None, "")
        if scheduled is None:
            scheduled, how = _schedule(func, blocks)
        lib = build(scheduled)
        lib(*inputs, out)
        want = reference(*inputs)
        error = float(np.max(np.abs(out - want)) / max(1.0, float(np.max(np.abs(want)))))
        worst = max(worst, error)
        # best single run of several: robust when other processes compete for the cores
        t_ref = lib.time(*inputs, out, number=1, repeat=10)
        t_np = _best(lambda: reference(*inputs), repeat=10)
        shape = "x".join(str(d) for d in out.shape)
        print(f"{name:<30} {shape:<18} {how:<14} {error:10.1e} {t_ref * 1e3:11.3f} {t_np * 1e3:9.3f} "
              f"{t_np / t_ref:8.2f}x")
    print("\nmax error is relative to the largest output magnitude; every kernel is also run by the")
    print("reference interpreter in the test suite (python -m pytest).")
    return 0 if worst < 1e-3 else 1


if __name__ == "__main__":
    raise SystemExit(main())
