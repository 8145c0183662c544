"""Sparse kernels: SpMM and SDDMM on power-law graphs, block-sparse attention and RGCN, against
scipy, numpy and torch.

    python benchmarks/sparse.py [--json] [--small] [--threads 2] [--repeat 5] [--rounds 3]
                                [--only spmm_ba_f32,sddmm] [--per-thread]

Graphs are generated here with a fixed seed: Barabasi-Albert (100k nodes, 8 edges per new node,
both directions: ~1.6M edges) and R-MAT (2^18 nodes, 4M edge draws with a, b, c, d = .57, .19, .19,
.05, duplicates merged), with float32 values; feature widths 32 and 128.  `--small` shrinks both
graphs for a quick check; `--only` runs the cases whose names start with one of the given
prefixes (comma-separated; a graph no chosen case needs is not generated).  numpy's OpenBLAS gets
the same thread count as refcomp and torch.  `--per-thread` runs every side on one thread and times it by the thread's CPU time (`time.thread_time`): on a machine
shared with other jobs the waits for a core drop out, though the shared caches and memory still
count.  Cases (ratio > 1: refcomp is faster):

    spmm_{ba,rmat}_f{32,128}            refcomp CSR SpMM vs scipy's csr @ dense (target >= 3x)
    spmm_{ba,rmat}_f{32,128}_vs_torch   the same vs torch.sparse_csr_tensor @ dense (target >= 1.5x)
    spmm_rmat_f128_hyb_vs_csr           hyb (format_decompose: the 3072 most frequent columns a
                                        partition of their own, first) vs refcomp CSR (target >= 1.2x)
    spmm_rmat_f128_hyb_split_vs_csr     hyb with long rows split into chunks vs refcomp CSR
    spmm_rmat_f128_tuned_vs_csr         the format tune_format picks (--format-trials measured) vs CSR
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
    header = f"{'case':<34} {'refcomp GFLOP/s':>15} {'baseline':>12} {'GFLOP/s':>9} {'ratio':>7}"
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
        print(f"{case:<34} {mine:>15.2f} {base_name:>12} {base:>9.2f} {mine / base:>7.2f}", flush=True)

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
            if H is not None and width == 128:
                hyb_out = np.empty_like(out)
                check_spmm(sparse.spmm_hyb(H, B, hyb_out), expected, bound, f"refcomp hyb {name} f{width}")
                report(f"{case}_hyb_vs_csr", lambda: sparse.spmm_hyb(H, B, hyb_out),
                       lambda: sparse.spmm(M, B, out), "refcomp csr", flops)
                S = sparse.format_decompose(M, split_long_rows=True)
                check_spmm(sparse.spmm_hyb(S, B, hyb_out), expected, bound, f"refcomp hyb split {name} f{width}")
                report(f"{case}_hyb_split_vs_csr", lambda: sparse.spmm_hyb(S, B, hyb_out),
                       lambda: sparse.spmm(M, B, out), "refcomp csr", flops)
                if args.format_trials > 0 and wanted(f"{case}_tuned"):
                    start = time.monotonic()
                    choice = sparse.tune_format(M, width, trials=args.format_trials, seed=1)
                    spent = time.monotonic() - start
                    check_spmm(choice.spmm(B, hyb_out), expected, bound, f"refcomp tuned format {name} f{width}")
                    report(f"{case}_tuned_vs_csr", lambda: choice.spmm(B, hyb_out),
                           lambda: sparse.spmm(M, B, out), "refcomp csr", flops)
                    results[f"{case}_tuned_vs_csr"].update(format=choice.params, trials=args.format_trials,
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
