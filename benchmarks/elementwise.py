"""refcomp vs numpy on bandwidth-bound kernels: a fused elementwise op and a row softmax.

    python benchmarks/elementwise.py [--json] [--rows 4096] [--cols 4096] [--repeat 5]

Both kernels are written directly as loop IR with a parallel outer loop and 16-lane vector
bodies (Ramp/Broadcast), built with refcomp.build(target="c") and checked against numpy before
timing.  numpy runs the natural expression (with its temporaries) in the same process.
`elementwise` is C = A * sigmoid(A) * B (the SiLU-gate product of a gated MLP); `softmax` is a
numerically stable softmax over each row.  The outputs are written once, with streaming
(non-temporal) stores: the loops carry the `nontemporal_store` annotation and the output
buffers promise 64-byte alignment.  GB/s counts compulsory traffic: every input read once and
every output written once.
"""
from __future__ import annotations

import os

# numpy should run its best kernels: drop the user's OpenBLAS overrides in this process only.
for _name in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
    os.environ.pop(_name, None)

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import refcomp  # noqa: E402
from refcomp.emit_c.codegen import NONTEMPORAL  # noqa: E402
from refcomp.ast import (  # noqa: E402
    Allocate, Broadcast, Buffer, BufferStore, Call, FloatImm, For, IntImm, LetStmt, PrimFunc, Ramp,
    Var, max_, seq,
)

LANES = 16
F32 = "float32"
V32 = f"float32x{LANES}"


def _ramp(base) -> Ramp:
    return Ramp(base, IntImm(1, base.dtype), LANES)


def elementwise_ir(size: int) -> PrimFunc:
    """C = A * sigmoid(A) * B over `size` float32 elements (a multiple of 16)."""
    A, B = (Buffer(name, (size,), F32) for name in "AB")
    C = Buffer("C", (size,), F32, align=64)  # written once: streamed past the cache
    i = Var("i", "int64")
    index = _ramp(i * LANES)
    a = A[index]
    value = a * Call("sigmoid", (a,), V32) * B[index]
    body = For(i, IntImm(0, "int64"), IntImm(size // LANES, "int64"), "parallel",
               BufferStore(C, value, (index,)), annotations={NONTEMPORAL: True})
    return PrimFunc((A, B, C), body, name="silu_mul")


def softmax_ir(rows: int, cols: int) -> PrimFunc:
    """B[r, :] = softmax(A[r, :]) on row-major 1-D buffers; cols a multiple of 16.

    One parallel loop over rows; per row: a vector max, a vector exp-and-sum that writes the
    exponentials, and a scaling pass over the (cache-resident) row.
    """
    A = Buffer("A", (rows * cols,), F32)
    B = Buffer("B", (rows * cols,), F32, align=64)
    row_exp = Buffer("row_exp", (cols,), F32, scope="local")  # the row's exponentials, in L1
    acc = Buffer("acc", (LANES,), F32, scope="local")
    red = Buffer("red", (1,), F32, scope="local")
    r, j, l = Var("r", "int64"), Var("j", "int64"), Var("l", "int64")
    chunks = cols // LANES
    zero = IntImm(0, "int64")
    lanes0 = _ramp(zero)
    row = r * cols

    def at(jj):
        return _ramp(row + jj * LANES)

    first = IntImm(0, "int64")
    vmax = seq(
        BufferStore(acc, A[at(first)], (lanes0,)),
        For(j, IntImm(1, "int64"), IntImm(chunks - 1, "int64"), "serial",
            BufferStore(acc, max_(acc[lanes0], A[at(j)]), (lanes0,))),
        BufferStore(red, acc[zero], (zero,)),
        For(l, IntImm(1, "int64"), IntImm(LANES - 1, "int64"), "serial",
            BufferStore(red, max_(red[zero], acc[l]), (zero,))),
    )
    j2, l2, j3 = Var("j", "int64"), Var("l", "int64"), Var("j", "int64")
    e = Var("e", V32)
    peak = Var("peak", F32)
    inv = Var("inv", F32)
    exp_sum = seq(
        BufferStore(acc, Broadcast(FloatImm(0.0), LANES), (lanes0,)),
        For(j2, zero, IntImm(chunks, "int64"), "serial",
            LetStmt(e, Call("exp", (A[at(j2)] - Broadcast(peak, LANES),), V32),
                    seq(BufferStore(row_exp, e, (_ramp(j2 * LANES),)),
                        BufferStore(acc, acc[lanes0] + e, (lanes0,))))),
        BufferStore(red, FloatImm(0.0), (zero,)),
        For(l2, zero, IntImm(LANES, "int64"), "serial",
            BufferStore(red, red[zero] + acc[l2], (zero,))),
    )
    scale = LetStmt(inv, FloatImm(1.0) / red[zero],
                    For(j3, zero, IntImm(chunks, "int64"), "serial",
                        BufferStore(B, row_exp[_ramp(j3 * LANES)] * Broadcast(inv, LANES), (at(j3),)),
                        annotations={NONTEMPORAL: True}))
    per_row = seq(vmax, LetStmt(peak, red[zero], seq(exp_sum, scale)))
    body = For(r, zero, IntImm(rows, "int64"), "parallel",
               Allocate(row_exp, Allocate(acc, Allocate(red, per_row))))
    return PrimFunc((A, B), body, name="row_softmax")


def aligned_empty(shape, dtype=np.float32, align: int = 64) -> np.ndarray:
    """An uninitialised array whose data starts on an `align`-byte boundary."""
    count = int(np.prod(shape))
    raw = np.empty(count * np.dtype(dtype).itemsize + align, np.uint8)
    offset = -raw.ctypes.data % align
    return raw[offset:offset + count * np.dtype(dtype).itemsize].view(dtype).reshape(shape)


def numpy_elementwise(a, b):
    return a / (1.0 + np.exp(-a)) * b


def numpy_softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def best_time(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def threadpool_info() -> str:
    try:
        from threadpoolctl import threadpool_info as info
    except ImportError:
        return "threadpoolctl not installed"
    pools = info()
    return "; ".join(f"{p.get('internal_api')} {p.get('version')} {p.get('architecture', '')} "
                     f"threads={p.get('num_threads')}" for p in pools) or "no native thread pools"


def run(rows: int, cols: int, repeat: int) -> dict:
    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    size = rows * cols
    results = {}

    a = rng.standard_normal(size, dtype=np.float32)
    b = rng.standard_normal(size, dtype=np.float32)
    c = aligned_empty(size)
    lib = refcomp.build(elementwise_ir(size), bounds="off")
    lib(a, b, c)
    expected = numpy_elementwise(a.astype(np.float64), b.astype(np.float64))
    err = float(np.max(np.abs(c - expected)))
    assert err < 1e-4, f"elementwise: max error {err}"
    t_ref = lib.time(a, b, c, number=1, repeat=repeat)
    t_np = best_time(lambda: numpy_elementwise(a, b), repeat)
    results["elementwise"] = (t_ref, t_np, 3 * size * 4, err)
    del a, b, c, expected

    x = (rng.standard_normal((rows, cols), dtype=np.float32) * 3).astype(np.float32)
    y = aligned_empty((rows, cols))
    lib = refcomp.build(softmax_ir(rows, cols), bounds="off")
    lib(x.reshape(-1), y.reshape(-1))
    err = float(np.max(np.abs(y - numpy_softmax(x.astype(np.float64)))))
    assert err < 1e-5, f"softmax: max error {err}"
    t_ref = lib.time(x.reshape(-1), y.reshape(-1), number=1, repeat=repeat)
    t_np = best_time(lambda: numpy_softmax(x), repeat)
    results["softmax"] = (t_ref, t_np, 2 * size * 4, err)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print a JSON summary as the last line")
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--cols", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=10,
                        help="runs per case; the best single run counts, for refcomp and numpy alike")
    args = parser.parse_args()
    if args.cols % LANES or args.cols < 2 * LANES:
        parser.error(f"--cols must be a multiple of {LANES} and at least {2 * LANES}")
    mib = args.rows * args.cols * 4 / 2**20
    print(f"machine: {platform.machine()} {platform.processor() or ''} {os.cpu_count()} cpus; "
          f"numpy {np.__version__}; arrays {args.rows}x{args.cols} float32 = {mib:.0f} MiB each")
    print(f"numpy thread pools: {threadpool_info()}")
    results = run(args.rows, args.cols, args.repeat)
    print(f"{'case':<12} {'refcomp ms':>11} {'numpy ms':>9} {'ratio':>7} {'refcomp GB/s':>13} "
          f"{'numpy GB/s':>11} {'max err':>9}")
    summary = {}
    for name, (t_ref, t_np, traffic, err) in results.items():
        ratio = t_np / t_ref
        print(f"{name:<12} {t_ref * 1e3:11.2f} {t_np * 1e3:9.2f} {ratio:7.2f} {traffic / t_ref / 1e9:13.1f} "
              f"{traffic / t_np / 1e9:11.1f} {err:9.1e}")
        summary[name] = {"refcomp": round(t_ref * 1e3, 3), "baseline": round(t_np * 1e3, 3), "unit": "ms",
                         "ratio": round(ratio, 3)}
    if args.json:
        print(json.dumps({"cases": summary}))


if __name__ == "__main__":
    main()
