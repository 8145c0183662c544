"""GPU kernels built by refcomp against torch on the same device.

    python benchmarks/cuda.py [--json] [--quick]

Cases: `elementwise` (exp(x) * 2 on 64 Mi floats, target >= 0.9x torch), `softmax` (rows of 4096,
>= 0.8x), `fp32_4096` (shared-memory tiled matmul vs cuBLAS through torch, >= 0.5x), `fp16_4096`
(float16 inputs, float32 accumulation on tensor cores through the wmma intrinsic, >= 0.6x), and the
sparse kernels on benchmarks/sparse.py's R-MAT graph (2^18 nodes, ~3.8M edges; 2^14 with --quick) at
width 128: `spmm_rmat_f128` (`sparse.spmm_csr_gpu`: a block per row, a thread per column) vs torch's
CSR product, `sddmm_rmat_f128` (`sparse.sddmm_gpu`: a thread per stored entry) vs
`torch.sparse.sampled_addmm` (which does not multiply by A's values; refcomp's kernel does),
`spmm_rmat_f128_hyb` (`format_decompose(max_width=32, split_long_rows=True)` run as
`sparse.hyb_gpu_launches`: the long rows cut into chunks) vs torch's CSR product, and
`spmm_rmat_f128_hyb_vs_csr` (the same hyb vs refcomp's GPU CSR kernel), all checked against scipy /
numpy on the CPU first. Times are taken
with CUDA events after warm-up; the ratio is torch's time / refcomp's time (> 1: refcomp is faster).
Without a GPU (or without torch built for CUDA) the kernels are still generated and compiled by
nvcc, and the table says so instead of printing times.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

import refcomp
from refcomp import te, workloads
from refcomp.loops import gpu_recipes


def elementwise_func(n):
    sch = refcomp.Schedule(workloads.exp_scale(n))
    gpu_recipes.schedule_elementwise(sch, "B", threads=256)
    return sch.func


def softmax_func(rows, cols):
    sch = refcomp.Schedule(workloads.softmax(rows, cols))
    gpu_recipes.schedule_softmax(sch, threads=128)
    return sch.func


def matmul_func(n):
    sch = refcomp.Schedule(workloads.matmul(n, n, n))
    gpu_recipes.schedule_matmul(sch, tile=(64, 64, 16), thread_tile=(4, 4))
    return sch.func


def fp16_matmul_func(n):
    A = te.placeholder((n, n), "float16", name="A")
    B = te.placeholder((n, n), "float16", name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k].astype("float32") * B[k, j].astype("float32"), axis=k),
                   name="C")
    sch = refcomp.Schedule(te.create_prim_func([A, B, C]))
    gpu_recipes.schedule_matmul_tensor_core(sch)
    return sch.func


def time_cuda(torch, fn, repeat=20):
    """The best of `repeat` calls in milliseconds, by CUDA events, after three warm-up calls."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(repeat):
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end))
    return best


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true", help="small sizes")
    args = parser.parse_args(argv)
    size = 1 << (20 if args.quick else 26)
    rows, cols = (256, 4096) if args.quick else (8192, 4096)
    n = 1024 if args.quick else 4096
    cases = {
        "elementwise": (elementwise_func(size), lambda torch, a: torch.exp(a) * 2, [(size,)], 2 * 4 * size),
        "softmax": (softmax_func(rows, cols), lambda torch, a: torch.softmax(a, dim=1), [(rows, cols)],
                    2 * 4 * rows * cols),
        "fp32_4096": (matmul_func(n), lambda torch, a, b: a @ b, [(n, n), (n, n)], 2 * n ** 3),
        "fp16_4096": (fp16_matmul_func(n), lambda torch, a, b: (a @ b).float(), [(n, n), (n, n)], 2 * n ** 3),
    }
    libs = {}
    for name, (func, _, _, _) in cases.items():
        start = time.perf_counter()
        libs[name] = refcomp.build(func, target="cuda")
        print(f"built {name}: {len(libs[name].source.splitlines())} lines of CUDA in "
              f"{time.perf_counter() - start:.1f} s", file=sys.stderr)
    try:
        import torch

        have_gpu = torch.cuda.is_available() and next(iter(libs.values())).device_available()
    except ImportError:
        torch, have_gpu = None, False
    results = {}
    print(f"{'case':26} {'refcomp ms':>11} {'torch ms':>10} {'ratio':>7}  note")
    for name, (func, reference, shapes, work) in cases.items():
        if not have_gpu:
            print(f"{name:26} {'-':>11} {'-':>10} {'-':>7}  built by nvcc; no GPU to run it")
            continue
        dtype = torch.float16 if name.startswith("fp16") else torch.float32
        inputs = [torch.randn(*s, device="cuda", dtype=dtype) for s in shapes]
        out_shape = [int(d) for d in func.buffers[-1].shape]
        out = torch.empty(*out_shape, device="cuda")
        lib = libs[name]
        ours = time_cuda(torch, lambda: lib(*inputs, out))
        theirs = time_cuda(torch, lambda: reference(torch, *inputs))
        expected = reference(torch, *inputs)
        error = float((out - expected).abs().max())
        unit = "GFLOP/s" if name.startswith("fp") else "GB/s"
        rate = work / ours / 1e6
        results[name] = {"refcomp": ours, "baseline": theirs, "unit": "ms", "ratio": theirs / ours}
        print(f"{name:26} {ours:11.3f} {theirs:10.3f} {theirs / ours:7.2f}  {rate:.0f} {unit}, max err {error:.2e}")
    if have_gpu:
        results.update(sparse_cases(torch, args.quick))
    else:
        for name in ("spmm_rmat_f128", "spmm_rmat_f128_hyb", "spmm_rmat_f128_hyb_vs_csr", "sddmm_rmat_f128"):
            print(f"{name:26} {'-':>11} {'-':>10} {'-':>7}  no GPU to run it")
    if args.json:
        print(json.dumps({"cases": results}))
    return 0


def sparse_cases(torch, quick: bool) -> dict:
    """SpMM (CSR and hyb) and SDDMM at width 128 on the R-MAT graph of benchmarks/sparse.py,
    refcomp's GPU kernels vs torch's (and hyb vs refcomp's CSR), each result checked against scipy
    / numpy on the CPU before it is timed."""
    import os
    import warnings

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import sparse as sparse_bench  # benchmarks/sparse.py: the graph generators and the SpMM check

    from refcomp import sparse

    width = 128
    rng = np.random.default_rng(2024)
    A = sparse_bench.rmat(14, 60_000, rng) if quick else sparse_bench.rmat(18, 4_000_000, rng)
    m, k = A.shape
    B = rng.uniform(-1.0, 1.0, (k, width)).astype(np.float32)
    X = rng.uniform(-1.0, 1.0, (m, width)).astype(np.float32)
    Y = rng.uniform(-1.0, 1.0, (k, width)).astype(np.float32)
    spmm_lib = refcomp.build(sparse.spmm_csr_gpu("float32", width), target="cuda")
    sddmm_lib = refcomp.build(sparse.sddmm_gpu("float32", width), target="cuda")
    dev = {name: torch.from_numpy(np.ascontiguousarray(a)).cuda() for name, a in (
        ("indptr", A.indptr.astype(np.int32)), ("indices", A.indices.astype(np.int32)), ("data", A.data),
        ("B", B), ("X", X), ("Y", Y))}
    out = torch.empty((m, width), device="cuda")
    values = torch.empty(A.nnz, device="cuda")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch's sparse CSR support is in beta
        tA = torch.sparse_csr_tensor(dev["indptr"].long(), dev["indices"].long(), dev["data"], size=A.shape)
    Yt = dev["Y"].t().contiguous()

    def ours_spmm():
        spmm_lib(dev["indptr"], dev["indices"], dev["data"], dev["B"], out)

    def ours_sddmm():
        sddmm_lib(dev["indptr"], dev["indices"], dev["data"], dev["X"], dev["Y"], values)

    ours_spmm()
    torch.cuda.synchronize()
    expected = A.astype(np.float64) @ B.astype(np.float64)
    bound = abs(A).astype(np.float64) @ np.abs(B).astype(np.float64)
    sparse_bench.check_spmm(out.cpu().numpy(), expected, bound, "refcomp gpu spmm")
    sparse_bench.check_spmm((tA @ dev["B"]).cpu().numpy(), expected, bound, "torch gpu csr spmm")
    ours_sddmm()
    torch.cuda.synchronize()
    rows = np.repeat(np.arange(m), np.diff(A.indptr))
    reference = A.data * np.einsum("pf,pf->p", X[rows].astype(np.float64), Y[A.indices].astype(np.float64))
    np.testing.assert_allclose(values.cpu().numpy(), reference, rtol=1e-4, atol=1e-4)
    theirs_values = torch.sparse.sampled_addmm(tA, dev["X"], Yt, beta=0.0).values().cpu().numpy()
    np.testing.assert_allclose(A.data * theirs_values, reference, rtol=1e-4, atol=1e-4)
    # hyb with long rows split (chunks of 32 entries, ELL buckets up to 32): its launches with
    # every array on the device once (the same host array, the same device copy)
    H = sparse.format_decompose(sparse.from_scipy(A), max_width=32, split_long_rows=True)
    hyb_out = np.empty((m, width), np.float32)
    on_device = {}

    def device_copy(array):
        if id(array) not in on_device:
            on_device[id(array)] = (array, torch.from_numpy(np.array(array)).cuda())
        return on_device[id(array)][1]

    add_lib = refcomp.build(sparse.spmm_csr_gpu("float32", width, accumulate=True), target="cuda")
    hyb_launches = [(add_lib if accumulate else spmm_lib, [device_copy(a) for a in arrays])
                    for accumulate, arrays in sparse.hyb_gpu_launches(H, B, hyb_out)]

    def ours_hyb():
        for lib, arrays in hyb_launches:
            lib(*arrays)

    ours_hyb()
    torch.cuda.synchronize()
    sparse_bench.check_spmm(device_copy(hyb_out).cpu().numpy(), expected, bound, "refcomp gpu hyb spmm")
    results = {}
    flops = 2.0 * A.nnz * width
    for name, ours_fn, theirs_fn in (
            ("spmm_rmat_f128", ours_spmm, lambda: tA @ dev["B"]),
            ("spmm_rmat_f128_hyb", ours_hyb, lambda: tA @ dev["B"]),
            ("spmm_rmat_f128_hyb_vs_csr", ours_hyb, ours_spmm),
            ("sddmm_rmat_f128", ours_sddmm, lambda: torch.sparse.sampled_addmm(tA, dev["X"], Yt, beta=0.0))):
        ours, theirs = time_cuda(torch, ours_fn), time_cuda(torch, theirs_fn)
        results[name] = {"refcomp": ours, "baseline": theirs, "unit": "ms", "ratio": theirs / ours}
        print(f"{name:26} {ours:11.3f} {theirs:10.3f} {theirs / ours:7.2f}  {flops / ours / 1e6:.0f} GFLOP/s "
              f"({A.nnz} entries, checked)")
    return results


if __name__ == "__main__":
    sys.exit(main())
