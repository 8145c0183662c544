"""Sparse kernels: SpMM and SDDMM on power-law graphs, block-sparse attention and RGCN, against
scipy, numpy and torch.

    python benchmarks/sparse.py [--json] [--small] [--threads 2] [--repeat 5] [--rounds 3]
                                [--only spmm_ba_f32,sddmm] [--per-thread]

Graphs are generated here with a fixed seed: Barabasi-Albert (100k nodes, 8 edges per new node,
both directions: ~1.6M edges) and R-MAT (2^18 nodes, 4M edge draws with a, b, c, d = .57, .19, .19,
.05, duplicates merged), with float32 values; feature widths 32 and 128.  `--small` shrinks both
graphs for a quick check; `--only` runs the cases whose names start with one of the given
prefixes (comma-separated; a graph no chosen case needs is not generated).  The plain CSR loop is
C compiled here by gcc -O3 -march=native -fopenmp (rows in parallel, the feature loop `omp simd`);
of its four variants (schedule(dynamic, 64) or entry-balanced static chunks; the row's sum in the
output row or in registers) the fastest in this run is the peer.  numpy's OpenBLAS gets
the same thread count as refcomp and torch.  `--per-thread` runs every side on one thread and times it by the thread's CPU time (`time.thread_time`): on a machine
shared with other jobs the waits for a core drop out, though the shared caches and memory still
count.  Cases (ratio > 1: refcomp is faster):

    spmm_{ba,rmat}_f{32,128}            refcomp CSR SpMM vs scipy's csr @ dense (target >= 3x)
    spmm_{ba,rmat}_f{32,128}_vs_torch   the same vs torch.sparse_csr_tensor @ dense (target >= 1.5x)
    spmm_rmat_f128_csr_vs_plain_loop    refcomp CSR vs the plain C/OpenMP CSR loop (above)
    spmm_rmat_f128_hyb_vs_csr           hyb (format_decompose: the 3072 most frequent columns a
                                        partition of their own, first) vs the plain C/OpenMP CSR
                                        loop (the goal's "plain CSR"; target >= 1.2x)
    spmm_rmat_f128_hyb_vs_refcomp_csr   the same hyb vs refcomp's own CSR SpMM, which already has
                                        hyb's locality tricks (hot columns first, prefetch)
    spmm_rmat_f128_hyb_split_vs_refcomp_csr  hyb with long rows split into chunks vs refcomp CSR
    spmm_rmat_f128_tuned_vs_refcomp_csr the format tune_format picks (--format-trials measured) vs
                                        refcomp CSR
    sddmm_{ba,rmat}_f{32,128}           refcomp SDDMM vs numpy (gather rows, multiply, sum)
    sddmm_{ba,rmat}_f{32,128}_vs_torch  the same vs torch.sparse.sampled_addmm (which does not
                                        multiply by A's values: a little less work than ours)
    attention_bsr_L{L}_b{B}             block-sparse attention (BSR, B x B blocks, 90% of them
                                        absent) vs dense masked attention in numpy
    attention_bsr_L{L}_b{B}_vs_torch    the same vs dense masked attention in torch
    rgcn_r{R}_f{F}                      RGCN (R relations, fused) vs a per-relation scipy loop
    rgcn_r{R}_f{F}_vs_torch             the same vs a per-relation torch CSR loop

Every result is checked against scipy or numpy before it is timed.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (before numpy: it sets up OpenBLAS, OpenMP and malloc for the timings)

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402


# The hot-column partition of the hyb case: 3072 rows of B at width 128 (float32) are 1.5 MiB, what
# a 2 MiB L2 holds beside the rest of the kernel's data.
HOT_COLUMNS_F128 = 3072


def cpu_isa() -> str:
    """The CPU's model name and its widest x86 vector extension (from /proc/cpuinfo where present)."""
    name, flags = "unknown CPU", set()
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name") and name == "unknown CPU":
                    name = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and not flags:
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    isa = next((f for f in ("avx512f", "avx2", "avx", "sse4_2") if f in flags), "baseline")
    return f"{name}, ISA {isa}"


def barabasi_albert(nodes: int, per_node: int, rng: np.random.Generator):
    """Preferential attachment: each new node links to per_node earlier ones drawn by degree."""
    ends = np.empty(2 * nodes * per_node, dtype=np.int64)
    ends[: 2 * per_node] = np.repeat(np.arange(per_node), 2)
    filled = 2 * per_node
    src, dst = [], []
    for node in range(per_node, nodes):
        targets = ends[rng.integers(0, filled, per_node)]
        src.append(np.full(per_node, node))
        dst.append(targets)
        ends[filled: filled + per_node] = targets
        ends[filled + per_node: filled + 2 * per_node] = node
        filled += 2 * per_node
    rows, cols = np.concatenate(src + dst), np.concatenate(dst + src)
    return _graph(rows, cols, nodes, rng)


def rmat(scale: int, edges: int, rng: np.random.Generator, probs=(0.57, 0.19, 0.19, 0.05)):
    """R-MAT: each edge picks one quadrant per level with the given probabilities."""
    rows = np.zeros(edges, dtype=np.int64)
    cols = np.zeros(edges, dtype=np.int64)
    cumulative = np.cumsum(probs)
    for _ in range(scale):
        quadrant = np.searchsorted(cumulative, rng.random(edges))
        rows = rows * 2 + (quadrant >= 2)
        cols = cols * 2 + (quadrant % 2)
    return _graph(rows, cols, 1 << scale, rng)


def _graph(rows, cols, nodes, rng):
    import scipy.sparse as sp

    A = sp.csr_matrix((np.ones(rows.size, np.float32), (rows, cols)), shape=(nodes, nodes))
    A.sum_duplicates()
    A.sort_indices()
    A.data = rng.uniform(0.5, 1.5, A.nnz).astype(np.float32)
    return A


# The peer for "hyb >= 1.2x plain CSR": a C/OpenMP CSR SpMM written by hand the plain way (rows in
# parallel, the row's entries in order, the feature loop a simple `omp simd` loop of a compile-time
# width), built with gcc -O3 -march=native -fopenmp.  Two row bodies (the sum in the output row, as
# scipy's loop keeps it, or in a local array gcc holds in registers) and two schedules of the row
# loop (`schedule(dynamic, 64)`, or one static chunk of rows per thread with the chunks' entry
# counts balanced): the benchmark measures all four and keeps the fastest as the peer.
_PLAIN_CSR_SOURCE = r"""
#include <stdint.h>

/* Row i of C: the sum in the output row (as scipy's loop keeps it). */
#define ROW_IN_OUTPUT                                                                   \
    float *restrict c = C + i * WIDTH;                                                  \
    _Pragma("omp simd")                                                                 \
    for (int f = 0; f < WIDTH; ++f) c[f] = 0.0f;                                        \
    for (int32_t p = indptr[i]; p < indptr[i + 1]; ++p) {                               \
        const float a = data[p];                                                        \
        const float *restrict b = B + (int64_t)indices[p] * WIDTH;                      \
        _Pragma("omp simd")                                                             \
        for (int f = 0; f < WIDTH; ++f) c[f] += a * b[f];                               \
    }

/* Row i of C: the sum in a local array gcc keeps in registers, stored once. */
#define ROW_IN_REGISTERS                                                                \
    float acc[WIDTH];                                                                   \
    _Pragma("omp simd")                                                                 \
    for (int f = 0; f < WIDTH; ++f) acc[f] = 0.0f;                                      \
    for (int32_t p = indptr[i]; p < indptr[i + 1]; ++p) {                               \
        const float a = data[p];                                                        \
        const float *restrict b = B + (int64_t)indices[p] * WIDTH;                      \
        _Pragma("omp simd")                                                             \
        for (int f = 0; f < WIDTH; ++f) acc[f] += a * b[f];                             \
    }                                                                                   \
    float *restrict c = C + i * WIDTH;                                                  \
    _Pragma("omp simd")                                                                 \
    for (int f = 0; f < WIDTH; ++f) c[f] = acc[f];

#define PLAIN_CSR(NAME, ROW)                                                                            \
void plain_csr_dynamic_##NAME(int64_t rows, const int64_t *restrict bounds, const int32_t *restrict indptr, \
                              const int32_t *restrict indices, const float *restrict data,              \
                              const float *restrict B, float *restrict C)                               \
{                                                                                                       \
    (void)bounds;                                                                                       \
    _Pragma("omp parallel for schedule(dynamic, 64)")                                                   \
    for (int64_t i = 0; i < rows; ++i) {                                                                \
        ROW                                                                                             \
    }                                                                                                   \
}                                                                                                       \
void plain_csr_balanced_##NAME(int64_t parts, const int64_t *restrict bounds, const int32_t *restrict indptr, \
                               const int32_t *restrict indices, const float *restrict data,             \
                               const float *restrict B, float *restrict C)                              \
{                                                                                                       \
    _Pragma("omp parallel for schedule(static, 1)")                                                     \
    for (int64_t part = 0; part < parts; ++part)                                                        \
        for (int64_t i = bounds[part]; i < bounds[part + 1]; ++i) {                                     \
            ROW                                                                                         \
        }                                                                                               \
}

PLAIN_CSR(row_in_output, ROW_IN_OUTPUT)
PLAIN_CSR(row_in_registers, ROW_IN_REGISTERS)
"""


class PlainCsrLoop:
    """The hand-written C/OpenMP CSR SpMM of float32 A (scipy CSR) at one feature width.  A variant
    is (schedule, body): "dynamic" or "balanced", "output" or "registers" (see _PLAIN_CSR_SOURCE);
    `variant` is the one a call without one runs."""

    VARIANTS = (("dynamic", "output"), ("balanced", "output"), ("dynamic", "registers"), ("balanced", "registers"))

    def __init__(self, A, width: int, threads: int):
        import ctypes

        from refcomp.emit_c import compile_shared

        self.library = ctypes.CDLL(str(compile_shared(f"#define WIDTH {width}\n" + _PLAIN_CSR_SOURCE, "c",
                                                      name=f"plain_csr_{width}")))
        self.width, (self.rows, self.cols) = width, A.shape
        self.indptr = np.ascontiguousarray(A.indptr, dtype=np.int32)
        self.indices = np.ascontiguousarray(A.indices, dtype=np.int32)
        self.data = np.ascontiguousarray(A.data, dtype=np.float32)
        targets = np.arange(threads + 1) * (A.nnz / threads)
        bounds = np.searchsorted(self.indptr, targets, side="left")
        bounds[0], bounds[-1] = 0, self.rows
        self.bounds = np.maximum.accumulate(bounds).astype(np.int64)
        self.parts = threads
        self.variant = self.VARIANTS[0]

    def __call__(self, B, out, variant: tuple[str, str] | None = None):
        import ctypes

        if B.dtype != np.float32 or not B.flags.c_contiguous or B.shape != (self.cols, self.width):
            raise ValueError(f"plain csr loop: B must be C-contiguous float32 of shape {(self.cols, self.width)}")
        if out.dtype != np.float32 or not out.flags.c_contiguous or out.shape != (self.rows, self.width):
            raise ValueError(f"plain csr loop: out must be C-contiguous float32 of shape {(self.rows, self.width)}")
        schedule, body = variant or self.variant
        count = self.rows if schedule == "dynamic" else self.parts
        getattr(self.library, f"plain_csr_{schedule}_row_in_{body}")(
            ctypes.c_int64(count), *[ctypes.c_void_p(a.ctypes.data)
                                     for a in (self.bounds, self.indptr, self.indices, self.data, B, out)])
        return out


def check_spmm(got, expected, bound, what):
    """got within float32 rounding of expected: |got - expected| <= 1e-4 * (|A| @ |B|), the scale
    of the sums (a long row of a power-law graph sums thousands of products in either order)."""
    error = np.abs(np.asarray(got, dtype=np.float64) - expected)
    worst = np.unravel_index(np.argmax(error - 1e-4 * bound), error.shape)
    if error[worst] > 1e-4 * bound[worst] + 1e-6:
        raise AssertionError(f"{what}: element {worst} is {got[worst]}, expected {expected[worst]} "
                             f"(scale {bound[worst]})")


def torch_csr(torch, A):
    """A as a torch CSR tensor (torch warns once that its sparse CSR support is in beta)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(torch.from_numpy(A.indptr.astype(np.int64)),
                                       torch.from_numpy(A.indices.astype(np.int64)),
                                       torch.from_numpy(A.data), size=A.shape)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print a JSON summary as the last line")
    parser.add_argument("--small", action="store_true", help="small graphs, for a quick check")
    parser.add_argument("--threads", type=int, default=2, help="threads for refcomp and torch")
    parser.add_argument("--repeat", type=int, default=5, help="calls per round")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    parser.add_argument("--format-trials", type=int, default=12,
                        help="formats tune_format measures for the R-MAT f128 case (0: skip it)")
    parser.add_argument("--per-thread", action="store_true",
                        help="one thread each, timed by the thread's CPU time (a shared machine)")
    parser.add_argument("--only", default="", help="comma-separated prefixes of the case names to run")
    args = parser.parse_args()
    prefixes = tuple(p for p in args.only.split(",") if p)

    def wanted(*cases: str) -> bool:
        """Whether any of the cases, or a case whose name starts with one of them, is chosen
        (every case without --only)."""
        return not prefixes or any(case.startswith(prefixes) or p.startswith(case) for case in cases for p in prefixes)
    if args.per_thread:
        args.threads = 1
    clock = time.thread_time if args.per_thread else time.perf_counter
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # before the first kernel loads libgomp
    from refcomp.runtime.blas import set_openblas_threads

    set_openblas_threads(args.threads)  # numpy's products (both sides) on as many threads as the rest

    from refcomp import sparse

    try:
        import torch

        torch.set_num_threads(args.threads)
    except ImportError:
        torch = None

    rng = np.random.default_rng(2024)
    if args.small:
        makers = {"ba": lambda: barabasi_albert(5000, 8, rng), "rmat": lambda: rmat(12, 60000, rng)}
    else:
        makers = {"ba": lambda: barabasi_albert(100_000, 8, rng), "rmat": lambda: rmat(18, 4_000_000, rng)}
    graphs = {name: make() for name, make in makers.items() if wanted(f"spmm_{name}", f"sddmm_{name}")}
    print(f"refcomp sparse benchmark, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"machine: {cpu_isa()}, {os.cpu_count()} CPUs; {args.threads} threads for refcomp and torch"
          + ("; timed by thread CPU time" if args.per_thread else ""))
    for name, A in graphs.items():
        lengths = np.diff(A.indptr)
        print(f"graph {name}: {A.shape[0]} nodes, {A.nnz} edges, longest row {lengths.max()}, "
              f"mean {lengths.mean():.1f}")
    header = f"{'case':<40} {'refcomp GFLOP/s':>15} {'baseline':>14} {'GFLOP/s':>9} {'ratio':>7}"
    print(header)
    print("-" * len(header))
    results = {}

    def report(case, ours_fn, base_fn, base_name, flops):
        if prefixes and not case.startswith(prefixes):
            return
        ours, theirs = harness.best_times([ours_fn, base_fn], args.repeat, args.rounds, clock=clock)
        mine, base = flops / ours / 1e9, flops / theirs / 1e9
        results[case] = {"refcomp": round(mine, 3), "baseline": round(base, 3), "unit": "GFLOP/s",
                         "ratio": round(mine / base, 3), "baseline_name": base_name}
        print(f"{case:<40} {mine:>15.2f} {base_name:>14} {base:>9.2f} {mine / base:>7.2f}", flush=True)

    def sddmm_cases(name, A, M, width):
        X = rng.uniform(-1.0, 1.0, (A.shape[0], width)).astype(np.float32)
        Y = rng.uniform(-1.0, 1.0, (A.shape[1], width)).astype(np.float32)
        rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
        cols = A.indices

        def numpy_sddmm():
            return A.data * np.einsum("pf,pf->p", X[rows], Y[cols])

        expected = numpy_sddmm()
        np.testing.assert_allclose(sparse.sddmm(M, X, Y), expected, rtol=1e-4, atol=1e-4)
        flops = 2.0 * A.nnz * width
        case = f"sddmm_{name}_f{width}"
        report(case, lambda: sparse.sddmm(M, X, Y), numpy_sddmm, "numpy", flops)
        if torch is not None:
            tA, tX, tYt = torch_csr(torch, A), torch.from_numpy(X), torch.from_numpy(np.ascontiguousarray(Y.T))
            got = torch.sparse.sampled_addmm(tA, tX, tYt, beta=0.0).values().numpy()
            np.testing.assert_allclose(A.data * got, expected, rtol=1e-4, atol=1e-4)
            report(f"{case}_vs_torch", lambda: sparse.sddmm(M, X, Y),
                   lambda: torch.sparse.sampled_addmm(tA, tX, tYt, beta=0.0), "torch", flops)

    def attention_cases(length, block=32, d=64, keep=0.1):
        import scipy.sparse as sp

        blocks = length // block
        mask = rng.random((blocks, blocks)) < keep
        mask[np.arange(blocks), np.arange(blocks)] = True  # every row attends somewhere
        allowed = np.kron(mask, np.ones((block, block), dtype=bool))
        pattern = sparse.from_scipy(sp.csr_matrix(allowed.astype(np.float32)), "bsr", block=(block, block))
        Q, K, V = (rng.standard_normal((length, d)).astype(np.float32) for _ in range(3))
        bias = np.where(allowed, 0.0, -np.inf).astype(np.float32)

        def numpy_attention():
            s = (Q @ K.T) * np.float32(1.0 / np.sqrt(d)) + bias
            e = np.exp(s - s.max(axis=1, keepdims=True))
            return (e / e.sum(axis=1, keepdims=True)) @ V

        expected = numpy_attention()
        np.testing.assert_allclose(sparse.block_sparse_attention(pattern, Q, K, V), expected, rtol=1e-3, atol=1e-4)
        stored = int(mask.sum()) * block * block
        flops = 4.0 * stored * d  # the sparse work: scores and the weighted sum at the kept blocks
        case = f"attention_bsr_L{length}_b{block}"
        report(case, lambda: sparse.block_sparse_attention(pattern, Q, K, V), numpy_attention,
               "numpy dense", flops)
        if torch is not None:
            tQ, tK, tV, tbias = (torch.from_numpy(a) for a in (Q, K, V, bias))

            def torch_attention():
                return torch.softmax(tQ @ tK.T / np.sqrt(d) + tbias, dim=1) @ tV

            np.testing.assert_allclose(torch_attention().numpy(), expected, rtol=1e-3, atol=1e-4)
            report(f"{case}_vs_torch", lambda: sparse.block_sparse_attention(pattern, Q, K, V),
                   torch_attention, "torch dense", flops)

    def rgcn_cases(nodes, relations=8, per_relation_edges=4, d_in=64, width=64):
        import scipy.sparse as sp

        mats = []
        for _ in range(relations):
            edges = nodes * per_relation_edges
            a = sp.csr_matrix((rng.uniform(0.5, 1.5, edges).astype(np.float32),
                               (rng.integers(0, nodes, edges), rng.integers(0, nodes, edges))), shape=(nodes, nodes))
            a.sum_duplicates()
            mats.append(a)
        graph = sparse.RelationalGraph(mats)
        X = rng.standard_normal((nodes, d_in)).astype(np.float32)
        W = rng.standard_normal((relations, d_in, width)).astype(np.float32) / np.float32(np.sqrt(d_in))

        def scipy_rgcn():
            out = mats[0] @ (X @ W[0])
            for a, w in zip(mats[1:], W[1:]):
                out += a @ (X @ w)
            return out

        expected = scipy_rgcn()
        np.testing.assert_allclose(sparse.rgcn(graph, X, W), expected, rtol=1e-3, atol=1e-3)
        flops = 2.0 * relations * nodes * d_in * width + 2.0 * graph.data.size * width
        case = f"rgcn_r{relations}_f{width}"
        report(case, lambda: sparse.rgcn(graph, X, W), scipy_rgcn, "scipy loop", flops)
        if torch is not None:
            tmats = [torch_csr(torch, a) for a in mats]
            tX, tW = torch.from_numpy(X), torch.from_numpy(W)

            def torch_rgcn():
                out = tmats[0] @ (tX @ tW[0])
                for a, w in zip(tmats[1:], tW[1:]):
                    out += a @ (tX @ w)
                return out

            np.testing.assert_allclose(torch_rgcn().numpy(), expected, rtol=1e-3, atol=1e-3)
            report(f"{case}_vs_torch", lambda: sparse.rgcn(graph, X, W), torch_rgcn, "torch loop", flops)

    for name, A in graphs.items():
        M = sparse.from_scipy(A)
        # hyb: the columns of B that L2 holds (1.5 MiB of 512-byte rows at f128) as a partition of
        # their own, first; the other columns after it; no ELL buckets
        H = sparse.format_decompose(M, max_width=0, hot_columns=HOT_COLUMNS_F128) \
            if name == "rmat" and wanted("spmm_rmat_f128_hyb") else None
        tA = torch_csr(torch, A) if torch else None
        for width in (32, 128):
            if not wanted(f"spmm_{name}_f{width}"):
                continue
            B = rng.uniform(-1.0, 1.0, (A.shape[1], width)).astype(np.float32)
            out = np.empty((A.shape[0], width), np.float32)
            expected = A.astype(np.float64) @ B.astype(np.float64)
            bound = abs(A).astype(np.float64) @ np.abs(B).astype(np.float64)
            check_spmm(sparse.spmm(M, B, out), expected, bound, f"refcomp csr {name} f{width}")
            check_spmm(A @ B, expected, bound, f"scipy {name} f{width}")
            flops = 2.0 * A.nnz * width
            case = f"spmm_{name}_f{width}"
            report(case, lambda: sparse.spmm(M, B, out), lambda: A @ B, "scipy", flops)
            if torch is not None:
                tB = torch.from_numpy(B)
                check_spmm((tA @ tB).numpy(), expected, bound, f"torch csr {name} f{width}")
                report(f"{case}_vs_torch", lambda: sparse.spmm(M, B, out), lambda: tA @ tB, "torch csr", flops)
            plain = None
            if name == "rmat" and width == 128 and (H is not None or wanted(f"{case}_csr_vs_plain_loop")):
                plain = PlainCsrLoop(A, width, args.threads)
                plain_out = np.empty_like(out)
                for variant in plain.VARIANTS:
                    plain_out.fill(np.nan)
                    check_spmm(plain(B, plain_out, variant), expected, bound,
                               f"plain csr loop {variant} {name} f{width}")
                times = harness.best_times([lambda v=v: plain(B, plain_out, v) for v in plain.VARIANTS],
                                           args.repeat, args.rounds, clock=clock)
                plain.variant = plain.VARIANTS[int(np.argmin(times))]
                print("    plain csr loop (schedule, sum in): " + ", ".join(
                    f"{v[0]}/{v[1]} {flops / t / 1e9:.2f}" for v, t in zip(plain.VARIANTS, times))
                    + f" GFLOP/s; the peer: {plain.variant[0]}/{plain.variant[1]}")
                report(f"{case}_csr_vs_plain_loop", lambda: sparse.spmm(M, B, out), lambda: plain(B, plain_out),
                       "plain csr loop", flops)
                if f"{case}_csr_vs_plain_loop" in results:
                    results[f"{case}_csr_vs_plain_loop"]["peer"] = "/".join(plain.variant)
            if H is not None and width == 128:
                hyb_out = np.empty_like(out)
                check_spmm(sparse.spmm_hyb(H, B, hyb_out), expected, bound, f"refcomp hyb {name} f{width}")
                report(f"{case}_hyb_vs_csr", lambda: sparse.spmm_hyb(H, B, hyb_out),
                       lambda: plain(B, plain_out), "plain csr loop", flops)
                if f"{case}_hyb_vs_csr" in results:
                    results[f"{case}_hyb_vs_csr"]["peer"] = "/".join(plain.variant)
                report(f"{case}_hyb_vs_refcomp_csr", lambda: sparse.spmm_hyb(H, B, hyb_out),
                       lambda: sparse.spmm(M, B, out), "refcomp csr", flops)
                S = sparse.format_decompose(M, split_long_rows=True)
                check_spmm(sparse.spmm_hyb(S, B, hyb_out), expected, bound, f"refcomp hyb split {name} f{width}")
                report(f"{case}_hyb_split_vs_refcomp_csr", lambda: sparse.spmm_hyb(S, B, hyb_out),
                       lambda: sparse.spmm(M, B, out), "refcomp csr", flops)
                if args.format_trials > 0 and wanted(f"{case}_tuned"):
                    start = time.monotonic()
                    choice = sparse.tune_format(M, width, trials=args.format_trials, seed=1)
                    spent = time.monotonic() - start
                    check_spmm(choice.spmm(B, hyb_out), expected, bound, f"refcomp tuned format {name} f{width}")
                    report(f"{case}_tuned_vs_refcomp_csr", lambda: choice.spmm(B, hyb_out),
                           lambda: sparse.spmm(M, B, out), "refcomp csr", flops)
                    results[f"{case}_tuned_vs_refcomp_csr"].update(format=choice.params, trials=args.format_trials,
                                                                   tuning_s=round(spent, 1))
                    print(f"    tune_format chose {choice.params or 'CSR'} after {args.format_trials} formats "
                          f"in {spent:.1f} s")
        for width in (32, 128):
            if wanted(f"sddmm_{name}_f{width}"):
                sddmm_cases(name, A, M, width)
    if wanted("attention"):
        attention_cases(1024 if args.small else 4096)
    if wanted("rgcn"):
        rgcn_cases(2000 if args.small else 50_000)
    if args.json:
        print(json.dumps({"cases": results}))



if __name__ == "__main__":
    main()
