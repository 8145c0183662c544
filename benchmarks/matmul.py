"""refcomp matmul recipes vs numpy (OpenBLAS) and, when installed, torch: one table from one run.

    python benchmarks/matmul.py [--json] [--repeat 5] [--rounds 3] [--only fp32_1024,...]
                                [--single-thread-cpu] [--isa avx2]

Every case is an ordinary refcomp schedule from `refcomp.loops.recipes` (packing, tiling, a
parallel block loop, a tensorized micro-kernel), built with `refcomp.build` (bounds proved) and
checked against numpy on fresh random data before it is timed.  refcomp and its baseline are
timed in alternating rounds in the same process and the best time of each is kept, so a busy
machine slows both alike.  GFLOP/s counts 2*M*N*K (int8: integer operations).

Cases:
  fp32_512/1024/2048   fp32 matmul vs numpy's float32 matmul
  bf16_2048            bf16 inputs, fp32 accumulation (AMX / AVX512-BF16 / AVX2) vs numpy fp32
  int8_2048            int8 inputs, int32 accumulation (AMX / VNNI / AVX2) vs numpy fp32
  fused_1024           gelu(A @ B + bias) in one kernel vs numpy's three steps
  linear_256x4096x1024 X @ W^T with W (N, K) as a `linear` layer stores it, vs numpy's x @ w.T
  linear_gelu_256x4096x1024, linear_res_256x1024x4096
                       the graph benchmark's mlp layers with their epilogues in the tile, rows
                       symbolic (as the graph builds them): gelu(X @ W^T + b) vs numpy's three
                       steps, and X @ W^T + b + R vs numpy's three steps
  bf16_2048_torch      same kernel vs torch.matmul in bf16 (torch installed only)
  int8_2048_torch      same kernel vs torch._int_mm (torch installed only)

Results are recorded in benchmarks/README.md ("matmul" section) with the date and machine.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
if "--isa" in sys.argv and sys.argv[sys.argv.index("--isa") + 1:][:1] == ["avx2"]:
    # Before refcomp and numpy load: refcomp sees a CPU without AVX-512 / AMX (its AVX2 tiles),
    # OpenBLAS runs its Haswell (AVX2) kernel.
    with open("/proc/cpuinfo", encoding="ascii", errors="replace") as _info:
        _flags = next((line.split(":", 1)[1].split() for line in _info if line.startswith("flags")), [])
    os.environ["REFCOMP_CPU_FEATURES"] = ",".join(f for f in _flags if not f.startswith(("avx512", "amx")))
    os.environ["REFCOMP_BENCH_OPENBLAS_CORETYPE"] = "Haswell"
import harness  # noqa: E402  (before numpy: it sets up OpenBLAS, OpenMP and malloc for the timings)

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import refcomp  # noqa: E402
from refcomp import te  # noqa: E402
from refcomp.loops import intrin, recipes  # noqa: E402
from refcomp.loops.primitives.tree import walk  # noqa: E402

GELU_C = 0.7978845608028654


# ----------------------------------------------------------------------------- programs

def matmul_func(n: int, in_dtype: str, acc: str):
    a = te.placeholder((n, n), in_dtype, "A")
    b = te.placeholder((n, n), in_dtype, "B")
    r = te.reduce_axis((0, n), "k")
    if in_dtype == acc:
        c = te.compute((n, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    else:
        c = te.compute((n, n), lambda i, j: te.sum(a[i, r].astype(acc) * b[r, j].astype(acc), axis=r), name="C")
    return te.create_prim_func([a, b, c], name=f"matmul_{in_dtype}_{n}")


def fused_func(n: int):
    a = te.placeholder((n, n), "float32", "A")
    b = te.placeholder((n, n), "float32", "B")
    bias = te.placeholder((n,), "float32", "bias")
    r = te.reduce_axis((0, n), "k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")

    def gelu(x):
        return 0.5 * x * (1.0 + te.tanh(GELU_C * (x + 0.044715 * x * x * x)))

    d = te.compute((n, n), lambda i, j: gelu(c[i, j] + bias[j]), name="D")
    return te.create_prim_func([a, b, bias, d], name=f"matmul_bias_gelu_{n}")


def numpy_gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(GELU_C * (x + 0.044715 * x * x * x)))


def to_bf16(x: np.ndarray) -> np.ndarray:
    bits = x.astype(np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def from_bf16(x: np.ndarray) -> np.ndarray:
    return (x.astype(np.uint32) << 16).view(np.float32)


def tensorized_with(func) -> str:
    names = sorted({s.annotations["tensorized"] for s in walk(func.body)
                    if hasattr(s, "annotations") and "tensorized" in getattr(s, "annotations", {})})
    return ",".join(names) or "none"


def linear_func(m, n: int, k: int, epilogue: str):
    """X @ W^T (W stored (N, K)), then nothing, gelu(. + bias), or . + bias + residual."""
    x = te.placeholder((m, k), "float32", "X")
    w = te.placeholder((n, k), "float32", "W")
    r = te.reduce_axis((0, k), "k")
    c = te.compute((m, n), lambda i, j: te.sum(x[i, r] * w[j, r], axis=r), name="C")
    if epilogue == "none":
        return te.create_prim_func([x, w, c], name=f"linear_{n}_{k}")
    bias = te.placeholder((n,), "float32", "bias")
    if epilogue == "gelu":
        def gelu(v):
            return 0.5 * v * (1.0 + te.tanh(GELU_C * (v + 0.044715 * v * v * v)))

        d = te.compute((m, n), lambda i, j: gelu(c[i, j] + bias[j]), name="D")
        return te.create_prim_func([x, w, bias, d], name=f"linear_gelu_{n}_{k}")
    res = te.placeholder((m, n), "float32", "R")
    d = te.compute((m, n), lambda i, j: c[i, j] + bias[j] + res[i, j], name="D")
    return te.create_prim_func([x, w, bias, res, d], name=f"linear_res_{n}_{k}")


# ----------------------------------------------------------------------------- timing

class Case:
    """One row of the table: a refcomp kernel and its baseline on the same inputs."""

    def __init__(self, name, flops, refcomp_fn, baseline_fn, baseline_name, kernel, check):
        self.name, self.flops = name, flops
        self.refcomp_fn, self.baseline_fn = refcomp_fn, baseline_fn
        self.baseline_name, self.kernel, self.check = baseline_name, kernel, check


def fp32_case(n: int, rng) -> Case:
    sch = recipes.matmul_fp32(matmul_func(n, "float32", "float32"))
    lib = refcomp.build(sch.func)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    c, ref = np.empty((n, n), np.float32), np.empty((n, n), np.float32)

    def check():
        lib(a, b, c)
        np.matmul(a, b, out=ref)
        np.testing.assert_allclose(c, ref, rtol=1e-3, atol=1e-3 * np.sqrt(n))

    return Case(f"fp32_{n}", 2.0 * n ** 3, lambda: lib(a, b, c), lambda: np.matmul(a, b, out=ref),
                "numpy fp32", tensorized_with(sch.func), check)


def bf16_case(n: int, rng, peer: str) -> Case:
    sch = recipes.matmul_bf16(matmul_func(n, "bfloat16", "float32"))
    lib = refcomp.build(sch.func)
    a, b = to_bf16(rng.standard_normal((n, n))), to_bf16(rng.standard_normal((n, n)))
    c = np.empty((n, n), np.float32)
    af, bf = from_bf16(a), from_bf16(b)
    ref = np.empty((n, n), np.float32)
    baseline, label = (lambda: np.matmul(af, bf, out=ref)), "numpy fp32"
    if peer == "torch":
        import torch

        ta = torch.from_numpy(af).to(torch.bfloat16)
        tb = torch.from_numpy(bf).to(torch.bfloat16)
        baseline, label = (lambda: torch.matmul(ta, tb)), "torch bf16"

    def check():
        lib(a, b, c)
        np.testing.assert_allclose(c, af @ bf, rtol=1e-2, atol=1e-2 * np.sqrt(n))

    name = f"bf16_{n}" + ("_torch" if peer == "torch" else "")
    return Case(name, 2.0 * n ** 3, lambda: lib(a, b, c), baseline, label, tensorized_with(sch.func), check)


def int8_case(n: int, rng, peer: str) -> Case:
    sch = recipes.matmul_int8(matmul_func(n, "int8", "int32"))
    lib = refcomp.build(sch.func)
    a = rng.integers(-128, 128, (n, n), dtype=np.int8)
    b = rng.integers(-128, 128, (n, n), dtype=np.int8)
    c = np.empty((n, n), np.int32)
    af, bf = a.astype(np.float32), b.astype(np.float32)
    ref = np.empty((n, n), np.float32)
    baseline, label = (lambda: np.matmul(af, bf, out=ref)), "numpy fp32"
    if peer == "torch":
        import torch

        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        baseline, label = (lambda: torch._int_mm(ta, tb)), "torch._int_mm"

    def check():
        lib(a, b, c)
        np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32))  # exact

    name = f"int8_{n}" + ("_torch" if peer == "torch" else "")
    return Case(name, 2.0 * n ** 3, lambda: lib(a, b, c), baseline, label, tensorized_with(sch.func), check)


def fused_case(n: int, rng) -> Case:
    sch = recipes.matmul_bias_gelu(fused_func(n))
    lib = refcomp.build(sch.func)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    d = np.empty((n, n), np.float32)

    def numpy_steps():
        return numpy_gelu(a @ b + bias)

    def check():
        lib(a, b, bias, d)
        np.testing.assert_allclose(d, numpy_steps(), rtol=1e-3, atol=1e-3 * np.sqrt(n))

    return Case(f"fused_{n}", 2.0 * n ** 3, lambda: lib(a, b, bias, d), numpy_steps, "numpy 3 calls",
                tensorized_with(sch.func), check)


def linear_case(m: int, n: int, k: int, epilogue: str, rng) -> Case:
    if epilogue == "none":
        sch = recipes.matmul_fp32(linear_func(m, n, k, epilogue))
    else:
        sch = recipes.matmul_bias_gelu(linear_func(te.size_var("m"), n, k, epilogue))
    lib = refcomp.build(sch.func)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    res = rng.standard_normal((m, n)).astype(np.float32)
    out = np.empty((m, n), np.float32)
    args = {"none": (x, w, out), "gelu": (x, w, bias, out), "res": (x, w, bias, res, out)}[epilogue]
    steps = {"none": lambda: x @ w.T, "gelu": lambda: numpy_gelu(x @ w.T + bias),
             "res": lambda: x @ w.T + bias + res}[epilogue]

    def check():
        lib(*args)
        np.testing.assert_allclose(out, steps(), rtol=1e-3, atol=1e-3 * np.sqrt(k))

    label = {"none": "linear", "gelu": "linear_gelu", "res": "linear_res"}[epilogue]
    return Case(f"{label}_{m}x{n}x{k}", 2.0 * m * n * k, lambda: lib(*args), steps,
                "numpy x @ w.T" if epilogue == "none" else "numpy 3 calls", tensorized_with(sch.func), check)


def make_cases(only: set[str] | None, rng) -> list:
    """(name, factory) for each selected case; a factory builds and returns its Case."""
    try:
        import torch  # noqa: F401

        have_torch = True
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "0")) or os.cpu_count() or 1)
    except Exception:  # not installed, or an install that does not load: the peer rows are optional
        have_torch = False
    factories = {
        "fp32_512": lambda: fp32_case(512, rng),
        "fp32_1024": lambda: fp32_case(1024, rng),
        "fp32_2048": lambda: fp32_case(2048, rng),
        "bf16_2048": lambda: bf16_case(2048, rng, "numpy"),
        "int8_2048": lambda: int8_case(2048, rng, "numpy"),
        "fused_1024": lambda: fused_case(1024, rng),
        "linear_256x4096x1024": lambda: linear_case(256, 4096, 1024, "none", rng),
        "linear_gelu_256x4096x1024": lambda: linear_case(256, 4096, 1024, "gelu", rng),
        "linear_res_256x1024x4096": lambda: linear_case(256, 1024, 4096, "res", rng),
    }
    if have_torch:
        factories["bf16_2048_torch"] = lambda: bf16_case(2048, rng, "torch")
        factories["int8_2048_torch"] = lambda: int8_case(2048, rng, "torch")
    return [(name, make) for name, make in factories.items() if only is None or name in only]


# ----------------------------------------------------------------------------- report

def blas_description() -> str:
    try:
        from threadpoolctl import threadpool_info

        parts = [f"{i.get('internal_api')} {i.get('version')} kernel {i.get('architecture')} "
                 f"{i.get('num_threads')} threads" for i in threadpool_info() if i.get("user_api") == "blas"]
        return "; ".join(parts) or "no BLAS pool found"
    except ImportError:
        return "threadpoolctl not installed"


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print a JSON summary as the last line")
    parser.add_argument("--repeat", type=int, default=5, help="calls per round")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    parser.add_argument("--only", default=None, help="comma-separated case names")
    parser.add_argument("--isa", choices=["native", "avx2"], default="native",
                        help="avx2: refcomp's AVX2 tiles against OpenBLAS's Haswell kernel on an AVX-512 CPU")
    parser.add_argument("--single-thread-cpu", action="store_true",
                        help="time one thread of each side by process CPU time (steady on a busy machine)")
    args = parser.parse_args()
    clock = time.perf_counter
    if args.single_thread_cpu:
        # Set before the first kernel loads: libgomp reads OMP_NUM_THREADS when it starts.
        os.environ["OMP_NUM_THREADS"] = "1"
        clock = time.process_time
        try:
            from threadpoolctl import threadpool_limits

            threadpool_limits(1)
        except ImportError:
            pass
    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    only = set(args.only.split(",")) if args.only else None

    print(f"refcomp {refcomp.__version__} matmul benchmark, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"machine: {cpu_name()}, {os.cpu_count()} CPUs; intrinsics this CPU runs: "
          f"{', '.join(intrin.names(available_only=True))}")
    print(f"numpy {np.__version__}: {blas_description()}")
    mode = "1 thread each, process CPU time" if args.single_thread_cpu else f"{os.cpu_count()} threads, wall time"
    print(f"timing: {mode}, best of {args.rounds} alternating rounds x {args.repeat} calls")
    cases = make_cases(only, rng)
    results = {}
    header = f"{'case':<26} {'refcomp GFLOP/s':>15} {'baseline':>14} {'GFLOP/s':>9} {'ratio':>7}  refcomp kernel"
    print(header)
    print("-" * len(header))
    for _, make in cases:
        case = make()
        case.check()
        ours, theirs = harness.best_times([case.refcomp_fn, case.baseline_fn], args.repeat, args.rounds, clock)
        mine, base = case.flops / ours / 1e9, case.flops / theirs / 1e9
        results[case.name] = {"refcomp": round(mine, 2), "baseline": round(base, 2), "unit": "GFLOP/s",
                              "ratio": round(mine / base, 3), "baseline_name": case.baseline_name,
                              "kernel": case.kernel}
        print(f"{case.name:<26} {mine:>15.1f} {case.baseline_name:>14} {base:>9.1f} {mine / base:>7.2f}  {case.kernel}",
              flush=True)
    if args.json:
        print(json.dumps({"cases": results}))


if __name__ == "__main__":
    main()
