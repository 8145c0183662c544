"""Throughput of refcomp's simplifier and prover on the index expressions of refcomp's own kernels.

Kernels (all with symbolic sizes): matmul, padded 3x3 conv, softmax, tiled matmul (split 32x32 +
reorder, so predicates appear), split elementwise, and the lowered (flattened) forms of these.
From each kernel we take every buffer access's in-bounds claim with the facts in scope, and every
index expression.  Cases:

  simplify  index expressions simplified per second (caches cleared each round)
            baseline: Z3's own `simplify` on the same expressions (encoding included)
  prove     in-bounds claims answered per second by refcomp.shape.prove (fast path, then Z3)
            baseline: plain Z3 on every claim (prove(..., use_fast_path=False))
  verify    whole kernels verified per second by check_accesses (fast path first)
            baseline: every obligation sent to Z3

Also printed (and in the JSON, as "fast_path_share"): the share of claims settled without Z3.  `--json` puts a machine-
readable summary on the last line.  Run: python benchmarks/prover.py [--json] [--rounds N]
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import z3

import refcomp
from refcomp import te
from refcomp.ast import BufferLoad, Range, collect
from refcomp.ast.stmt import BufferStore, For
from refcomp.shape import Analyzer, check_accesses, collect_obligations, prove
from refcomp.shape.prove import clear_cache, reset_stats, stats
from refcomp.shape.z3_bridge import Encoder


# ----------------------------------------------------------------------------- kernels

def matmul():
    n, m, k = te.size_var("n"), te.size_var("m"), te.size_var("k")
    A = te.placeholder((n, k), "float32", "A")
    B = te.placeholder((k, m), "float32", "B")
    r = te.reduce_axis(k, "r")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return te.create_prim_func([A, B, C], name="matmul")


def conv_padded():
    n, m = te.size_var("n"), te.size_var("m")
    A = te.placeholder((n, m), "float32", "A")
    W = te.placeholder((3, 3), "float32", "W")
    ki, kj = te.reduce_axis(3, "ki"), te.reduce_axis(3, "kj")

    def padded(i, j):
        return te.if_then_else(te.all(i >= 0, i < n, j >= 0, j < m), A[i, j], te.const(0.0))

    C = te.compute((n, m), lambda i, j: te.sum(padded(i + ki - 1, j + kj - 1) * W[ki, kj], axis=[ki, kj]),
                   name="C")
    return te.create_prim_func([A, W, C], name="conv")


def softmax():
    n, m = te.size_var("n"), te.size_var("m")
    X = te.placeholder((n, m), "float32", "X")
    k1, k2 = te.reduce_axis(m, "k1"), te.reduce_axis(m, "k2")
    row_max = te.compute((n,), lambda i: te.max(X[i, k1], axis=k1), name="row_max")
    e = te.compute((n, m), lambda i, j: te.exp(X[i, j] - row_max[i]), name="e")
    total = te.compute((n,), lambda i: te.sum(e[i, k2], axis=k2), name="total")
    Y = te.compute((n, m), lambda i, j: e[i, j] / total[i], name="Y")
    return te.create_prim_func([X, Y], name="softmax")


def tiled_matmul():
    sch = refcomp.Schedule(matmul())
    block = sch.get_block("C")
    i, j, r = sch.get_loops(block)
    i0, i1 = sch.split(i, [None, 32])
    j0, j1 = sch.split(j, [None, 32])
    sch.reorder(i0, j0, i1, j1)
    return sch.func


def split_elementwise():
    n = te.size_var("n")
    A = te.placeholder((n,), "float32", "A")
    B = te.compute((n,), lambda i: A[i] * 2 + 1, name="B")
    sch = refcomp.Schedule(te.create_prim_func([A, B], name="scale"))
    (loop,) = sch.get_loops(sch.get_block("B"))
    sch.split(loop, [None, 8, 16])
    return sch.func


def kernels():
    out = {}
    for make in (matmul, conv_padded, softmax, tiled_matmul, split_elementwise):
        func = make()
        out[make.__name__] = func
        try:
            from refcomp.loops.lower import lower

            out[make.__name__ + "_lowered"] = lower(func)
        except Exception as exc:  # lowering is another engineer's, still moving; measure what we can
            print(f"(lowering {make.__name__} failed: {type(exc).__name__}: {exc})", file=sys.stderr)
    return out


# ----------------------------------------------------------------------------- queries

def index_queries(func):
    """(index expression, loop ranges) for every access, loops bound as in the kernel."""
    ranges = {loop.loop_var: Range(loop.min, loop.extent) for loop in collect(func.body, For)}
    queries = []
    for node in collect(func.body, BufferLoad) + collect(func.body, BufferStore):
        for index in node.indices:
            if index.dtype.lanes == 1:
                queries.append(index)
    return queries, ranges


def timed(fn, rounds):
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    funcs = kernels()

    index_sets = [index_queries(f) for f in funcs.values()]
    n_index = sum(len(q) for q, _ in index_sets)

    def run_simplify():
        for queries, ranges in index_sets:
            ana = Analyzer()
            for var, rng in ranges.items():
                ana.bind(var, rng)
            for q in queries:
                ana.simplify(q)

    def run_z3_simplify():
        for queries, _ in index_sets:
            enc = Encoder()
            for q in queries:
                z3.simplify(enc.encode(q))

    obligations = [ob for f in funcs.values() for ob in collect_obligations(f) if ob.claim is not None]
    n_claims = len(obligations)

    def run_prove(fast):
        clear_cache()
        for ob in obligations:
            prove(ob.claim, ob.assumptions, use_fast_path=fast)

    def run_verify(fast):
        clear_cache()
        for f in funcs.values():
            if fast:
                check_accesses(f)
            else:
                for ob in collect_obligations(f):
                    if ob.claim is not None:
                        prove(ob.claim, ob.assumptions, use_fast_path=False)

    t_simplify = timed(run_simplify, args.rounds)
    t_z3_simplify = timed(run_z3_simplify, args.rounds)
    reset_stats()
    t_prove = timed(lambda: run_prove(True), args.rounds)
    counts = stats()
    fast_share = counts["fast"] / max(counts["fast"] + counts["z3"], 1)
    t_prove_z3 = timed(lambda: run_prove(False), args.rounds)
    reset_stats()
    t_verify = timed(lambda: run_verify(True), args.rounds)
    counts = stats()
    verify_share = counts["fast"] / max(counts["fast"] + counts["z3"], 1)
    t_verify_z3 = timed(lambda: run_verify(False), args.rounds)

    proved_fast = sum(1 for ob in obligations if prove(ob.claim, ob.assumptions).proved)
    cases = {
        "simplify": {"refcomp": n_index / t_simplify, "baseline": n_index / t_z3_simplify, "unit": "exprs/s"},
        "prove": {"refcomp": n_claims / t_prove, "baseline": n_claims / t_prove_z3, "unit": "claims/s"},
        "verify": {"refcomp": len(funcs) / t_verify, "baseline": len(funcs) / t_verify_z3, "unit": "kernels/s"},
    }
    for case in cases.values():
        case["ratio"] = case["refcomp"] / case["baseline"]
    cases["prove"]["fast_path_share"] = fast_share
    cases["verify"]["fast_path_share"] = verify_share
    print(f"{len(funcs)} kernels ({', '.join(funcs)}), {n_index} index expressions, {n_claims} in-bounds claims"
          f" ({proved_fast} proved)")
    print(f"{'case':10} {'refcomp':>14} {'baseline':>14} {'unit':>10} {'ratio':>8}")
    for name, case in cases.items():
        print(f"{name:10} {case['refcomp']:14.1f} {case['baseline']:14.1f} {case['unit']:>10} {case['ratio']:8.2f}")
    print(f"fast path settled {fast_share:.1%} of prove() claims and {verify_share:.1%} of the in-bounds"
          " checker's obligations without Z3")
    if args.json:
        print(json.dumps({"cases": cases}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
