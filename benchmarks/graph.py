"""Graph-level benchmark: an MLP and a transformer block built with the BlockBuilder.

For each case it prints the kernel count with and without fusion, checks the results of both
executors (the graph function compiled to C, graph.build's default, and the VM interpreting the
same kernels) against numpy on the same random inputs, and compares their run times with numpy
doing the same computation (numpy's matmul uses the same OpenBLAS that refcomp's BLAS dispatch
calls).  The CPU's ISA is printed first.

    python benchmarks/graph.py                 # both cases
    python benchmarks/graph.py mlp --repeat 5
    python benchmarks/graph.py transformer_block --hidden 1024 --seq 512
    python benchmarks/graph.py --single-thread-cpu      # 1 thread each, CPU time (steady under load)
    python benchmarks/graph.py mlp --single-thread-cpu --profile   # each kernel's time and GFLOP/s

The compiled function, the VM and numpy are timed in alternating rounds and the best call of each
is kept.  With --json the last line holds the compiled function's time as "refcomp".
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (before numpy: it sets up OpenBLAS, OpenMP and malloc for the timings)

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import refcomp  # noqa: E402
from refcomp.ast import SizeVar  # noqa: E402
from refcomp.ast.graph import Constant  # noqa: E402
from refcomp.graph import BlockBuilder, Var, const, op, tensor  # noqa: E402
from refcomp.loops.intrin.cpu import describe  # noqa: E402


# ----------------------------------------------------------------------------- models

def mlp(hidden: int, ffn: int, layers: int, batch: int | None = None, weights: list | None = None):
    """x (batch, hidden) -> [linear(ffn) -> gelu_tanh -> linear(hidden) + residual -> layer_norm] * layers.
    batch is symbolic unless given (a constant batch gives kernels with constant shapes, which the
    tuner takes).  With `weights` (arrays in the order of the shapes returned) they are Constants of
    the model, known at build time, and main takes x alone."""
    symbolic = batch is None
    batch = SizeVar("batch", "int64") if symbolic else batch
    x = Var("x", tensor((batch, hidden)))
    params, names = [x], []
    for k in range(layers):
        for name, shape in ((f"w1_{k}", (ffn, hidden)), (f"b1_{k}", (ffn,)), (f"w2_{k}", (hidden, ffn)),
                            (f"b2_{k}", (hidden,)), (f"g_{k}", (hidden,)), (f"be_{k}", (hidden,))):
            params.append(Var(name, tensor(shape)))
            names.append(shape)
    shapes = [tuple(p.struct_info.static_shape or ()) for p in params[1:]]
    if weights is not None:
        params = [x] + [Constant(w) for w in weights]
    bb = BlockBuilder()
    with bb.function("main", params[:1] if weights is not None else params, attrs={"tir_var_upper_bound": {"batch": 4096}} if symbolic else None):
        with bb.dataflow():
            h = x
            for k in range(layers):
                w1, b1, w2, b2, g, be = params[1 + 6 * k: 7 + 6 * k]
                u = bb.emit(op.gelu_tanh(op.linear(h, w1, b1)))
                r = bb.emit(op.add(op.linear(u, w2, b2), h))
                h = bb.emit(op.layer_norm(r, g, be, axes=(-1,)))
            out = bb.emit_output(h)
        bb.emit_func_output(out)
    return bb.get(), shapes


def mlp_numpy(x, *weights):
    h = x
    for k in range(len(weights) // 6):
        w1, b1, w2, b2, g, be = weights[6 * k: 6 * k + 6]
        u = _gelu_tanh(h @ w1.T + b1)
        r = u @ w2.T + b2 + h
        h = _layer_norm(r, g, be)
    return h


def transformer_block(hidden: int, heads: int, seq: int | None = None, weights: list | None = None):
    """Pre-norm block: x + attn(ln1(x)); then + mlp(ln2(.)), with a causal mask; seq is symbolic
    unless given; weights as in mlp."""
    symbolic = seq is None
    seq = SizeVar("seq", "int64") if symbolic else seq
    d = hidden // heads
    x = Var("x", tensor((seq, hidden)))
    shapes = [("g1", (hidden,)), ("b1", (hidden,)), ("wqkv", (3 * hidden, hidden)), ("bqkv", (3 * hidden,)),
              ("wo", (hidden, hidden)), ("bo", (hidden,)), ("g2", (hidden,)), ("b2", (hidden,)),
              ("w1", (4 * hidden, hidden)), ("bf1", (4 * hidden,)), ("w2", (hidden, 4 * hidden)), ("bf2", (hidden,))]
    params = [x] + ([Var(n, tensor(s)) for n, s in shapes] if weights is None else [Constant(w) for w in weights])
    g1, b1, wqkv, bqkv, wo, bo, g2, b2, w1, bf1, w2, bf2 = params[1:]
    bb = BlockBuilder()
    with bb.function("main", params if weights is None else params[:1], attrs={"tir_var_upper_bound": {"seq": 2048}} if symbolic else None):
        with bb.dataflow():
            h = bb.emit(op.layer_norm(x, g1, b1, axes=(-1,)))
            qkv = bb.emit(op.linear(h, wqkv, bqkv))
            qkv = bb.emit(op.reshape(qkv, (seq, 3, heads, d)))
            qkv = bb.emit(op.permute_dims(qkv, (1, 2, 0, 3)))  # (3, heads, seq, d)
            parts = bb.emit(op.split(qkv, 3, axis=0))
            q = bb.emit(op.squeeze(refcomp.graph.TupleGetItem(parts, 0), axis=(0,)))
            k = bb.emit(op.squeeze(refcomp.graph.TupleGetItem(parts, 1), axis=(0,)))
            v = bb.emit(op.squeeze(refcomp.graph.TupleGetItem(parts, 2), axis=(0,)))
            kt = bb.emit(op.permute_dims(k, (0, 2, 1)))
            scores = bb.emit(op.matmul(q, kt))
            scores = bb.emit(op.multiply(scores, const(np.float32(1.0 / math.sqrt(d)))))
            mask = bb.emit(op.tril(op.full_like(scores, 1.0)))
            scores = bb.emit(op.where(op.greater(mask, const(np.float32(0.5))), scores,
                                      const(np.float32(-1e9))))
            p = bb.emit(op.softmax(scores, axis=-1))
            ctx = bb.emit(op.matmul(p, v))  # (heads, seq, d)
            ctx = bb.emit(op.permute_dims(ctx, (1, 0, 2)))
            ctx = bb.emit(op.reshape(ctx, (seq, hidden)))
            x1 = bb.emit(op.add(op.linear(ctx, wo, bo), x))
            h2 = bb.emit(op.layer_norm(x1, g2, b2, axes=(-1,)))
            f = bb.emit(op.gelu_tanh(op.linear(h2, w1, bf1)))
            out = bb.emit_output(op.add(op.linear(f, w2, bf2), x1))
        bb.emit_func_output(out)
    return bb.get(), [s for _, s in shapes]


def transformer_numpy(heads, x, g1, b1, wqkv, bqkv, wo, bo, g2, b2, w1, bf1, w2, bf2):
    seq, hidden = x.shape
    d = hidden // heads
    h = _layer_norm(x, g1, b1)
    qkv = (h @ wqkv.T + bqkv).reshape(seq, 3, heads, d).transpose(1, 2, 0, 3)
    q, k, v = qkv[0], qkv[1], qkv[2]
    scores = q @ k.transpose(0, 2, 1) * np.float32(1.0 / math.sqrt(d))
    mask = np.tril(np.ones_like(scores))
    scores = np.where(mask > 0.5, scores, np.float32(-1e9))
    e = np.exp(scores - scores.max(-1, keepdims=True))
    p = e / e.sum(-1, keepdims=True)
    ctx = (p @ v).transpose(1, 0, 2).reshape(seq, hidden)
    x1 = ctx @ wo.T + bo + x
    f = _gelu_tanh(_layer_norm(x1, g2, b2) @ w1.T + bf1)
    return f @ w2.T + bf2 + x1


def _gelu_tanh(x):
    return np.float32(0.5) * x * (np.float32(1) + np.tanh(np.float32(math.sqrt(2 / math.pi))
                                                          * (x + np.float32(0.044715) * x * x * x)))


def _layer_norm(x, g, b, eps=1e-5):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + np.float32(eps)) * g + b


# ----------------------------------------------------------------------------- measuring

def isa() -> str:
    """The machine and the vector extensions the kernels can use on it."""
    return describe()


# A pause before each side's round, so the other side's idle pool threads stop spinning first.
def _inputs(weight_shapes, input_shape):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(input_shape).astype("float32")
    weights = [(rng.standard_normal(s) * (1.0 / math.sqrt(s[-1]))).astype("float32") for s in weight_shapes]
    return x, weights


def run_case(name: str, mod, weight_shapes, input_shape, reference, repeat: int, rounds: int = 3,
             clock=time.perf_counter, blas=True, constant_model=None) -> dict:
    """constant_model: weights -> the same model with them as Constants (then main takes x alone)."""
    x, weights = _inputs(weight_shapes, input_shape)
    if constant_model is not None:
        mod = constant_model(weights)
    args = (x,) if constant_model is not None else (x, *weights)
    start = time.perf_counter()
    fused = refcomp.graph.build(mod, target="c", blas=blas)
    compile_s = time.perf_counter() - start
    unfused = refcomp.graph.build(mod, target="c", fuse=False)
    vm = refcomp.runtime.VirtualMachine(fused, executor="vm")
    compiled = fused.compiled.get("main")
    run_c = (lambda: compiled(*args)) if compiled is not None else (lambda: vm["main"](*args))
    want = reference(x, *weights)
    error = max(float(np.max(np.abs(out - want)) / (np.max(np.abs(want)) + 1e-30))
                for out in (vm["main"](*args), run_c()))
    c_s, vm_s, np_s = harness.best_times([run_c, lambda: vm["main"](*args), lambda: reference(x, *weights)],
                                         repeat, rounds, clock)
    calls = lambda ex: ex.stats["kernel_calls_static"] + sum(  # noqa: E731
        1 for i in ex.functions["main"].code if type(i).__name__ == "CallPacked")
    from refcomp.ast.graph_script import format_prim_expr
    from refcomp.graph.passes import arena_expression

    main = fused.module["main"]
    return {"case": name, "kernels_unfused": calls(unfused), "kernels_fused": calls(fused), "max_rel_err": error,
            "executor": fused.executor, "c_ms": c_s * 1e3, "c_speedup": np_s / c_s,
            "vm_ms": vm_s * 1e3, "numpy_ms": np_s * 1e3, "speedup": np_s / vm_s, "compile_s": compile_s,
            "arena_mib": fused.arena_bytes() / 2 ** 20,
            "arena_expr": format_prim_expr(arena_expression(main)),
            "bounds": dict(main.attrs.get("tir_var_upper_bound", {}))}


def kernel_rates(func, sizes: dict, seconds: float) -> tuple[float | None, float]:
    """(GFLOP/s, GB/s) of an unscheduled kernel taking `seconds`, its size variables at `sizes`
    (name -> value).  FLOPs: 2 x the iterations of its reduction blocks, given only where that is
    a contraction (at least 32 per element written: a matmul, not a row sum); bytes: its
    parameters' sizes (each read or written once, the least traffic the kernel can have)."""
    from refcomp.ast import Block, collect, free_vars
    from refcomp.shape.evaluate import evaluate

    def value(expr):
        return int(evaluate(expr, {v: sizes[v.name] for v in free_vars(expr) if v.name in sizes}))

    flops = written = 0
    for block in collect(func.body, Block):
        if any(iv.kind == "reduce" for iv in block.iter_vars):
            flops += 2 * math.prod(value(iv.dom.extent) for iv in block.iter_vars)
            written += math.prod(value(iv.dom.extent) for iv in block.iter_vars if iv.kind != "reduce")
    nbytes = sum(math.prod(value(d) for d in buf.shape) * buf.dtype.bits // 8 for buf in func.buffers)
    gflops = flops / seconds / 1e9 if written and flops >= 64 * written else None
    return gflops, nbytes / seconds / 1e9


def profile_case(name: str, mod, weight_shapes, input_shape, repeat: int, rounds: int, clock, blas,
                 sizes: dict, constant_model=None) -> list[dict]:
    """Each kernel's best time per call of the model (its calls in one run summed, and counted), by `clock`,
    run through the VM with every kernel wrapped by a timer; GFLOP/s for the kernels with a
    reduction (kernel_flops)."""
    x, weights = _inputs(weight_shapes, input_shape)
    if constant_model is not None:
        mod = constant_model(weights)
        weights = []
    ex = refcomp.graph.build(mod, target="c", blas=blas)
    vm = refcomp.runtime.VirtualMachine(ex, executor="vm")
    from refcomp.graph.pipeline import optimize
    from refcomp.runtime.vm import _EXTERNS

    unscheduled = optimize(mod, schedule=False, blas=blas)
    spent: dict[str, float] = {}
    calls: dict[str, int] = {}
    order: list[str] = []

    def timed(kernel_name, kernel):
        def call(*args, **kwargs):
            start = clock()
            result = kernel(*args, **kwargs)
            spent[kernel_name] = spent.get(kernel_name, 0.0) + clock() - start
            calls[kernel_name] = calls.get(kernel_name, 0) + 1
            if kernel_name not in order:
                order.append(kernel_name)
            return result
        return call

    for kernel_name, kernel in list(ex.kernels.items()):
        ex.kernels[kernel_name] = timed(kernel_name, kernel)
    symbols = {inst.symbol for inst in ex.functions["main"].code if type(inst).__name__ == "CallPacked"}
    for symbol in sorted(symbols):  # BLAS externs (numpy's OpenBLAS), each wrapped once
        ex.externs[symbol] = timed(symbol, ex.externs.get(symbol) or _EXTERNS[symbol])
    vm["main"](x, *weights)  # warm up
    best: dict[str, float] = {}
    for _ in range(rounds * repeat):
        spent.clear()
        calls.clear()
        vm["main"](x, *weights)
        for kernel_name, t in spent.items():
            best[kernel_name] = min(best.get(kernel_name, float("inf")), t)
    rows = []
    for kernel_name in order:
        t = best[kernel_name]
        func = unscheduled.functions.get(kernel_name) or unscheduled.functions.get(kernel_name.removesuffix("_packed"))
        gflops, gbs = kernel_rates(func, sizes, t) if func is not None else (None, None)
        rows.append({"case": name, "kernel": kernel_name, "calls": calls[kernel_name], "ms": t * 1e3,
                     "gflops": gflops, "gbs": gbs})
    return rows


def print_profile(rows: list[dict]) -> None:
    total = sum(r["ms"] for r in rows)
    print(f"{'case':<18} {'kernel':<48} {'calls':>5} {'ms':>8} {'share':>7} {'GFLOP/s':>8} {'GB/s':>6}")
    for r in rows:
        rate = f"{r['gflops']:8.1f}" if r["gflops"] else f"{'-':>8}"
        gbs = f"{r['gbs']:6.1f}" if r["gbs"] is not None else f"{'-':>6}"
        print(f"{r['case']:<18} {r['kernel'][:48]:<48} {r['calls']:>5} {r['ms']:8.2f} {r['ms'] / total:6.1%} "
              f"{rate} {gbs}")
    print(f"{'':<18} {'sum of kernels':<48} {total:8.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("cases", nargs="*", help="mlp and/or transformer_block (default: both)")
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=5, help="calls per round")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of VM and numpy")
    parser.add_argument("--single-thread-cpu", action="store_true",
                        help="one thread each (kernels, OpenBLAS), timed by process CPU time: steady on a busy "
                             "machine")
    parser.add_argument("--json", action="store_true", help="print the results as JSON on the last line")
    parser.add_argument("--profile", action="store_true",
                        help="time each kernel of the graph (through the VM, best call of rounds x repeat) and "
                             "print its share and, for the GEMMs, its GFLOP/s; no comparison with numpy")
    parser.add_argument("--parameter-weights", action="store_true",
                        help="pass the weights as inputs of main on every call (default: Constants of the "
                             "model, known at build time, as an imported model has them)")
    parser.add_argument("--blas", choices=("auto", "always"), default="auto",
                        help="graph.build's BLAS dispatch: auto keeps the linears refcomp's GEMM runs faster")
    args = parser.parse_args(argv)
    blas = True if args.blas == "auto" else "always"
    clock = time.perf_counter
    if args.single_thread_cpu:
        # before the first kernel library loads: libgomp reads OMP_NUM_THREADS when it starts
        os.environ["OMP_NUM_THREADS"] = "1"
        clock = time.process_time
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)
    args.cases = args.cases or ["mlp", "transformer_block"]
    unknown = [c for c in args.cases if c not in ("mlp", "transformer_block")]
    if unknown:
        parser.error(f"unknown case(s) {unknown}; choose mlp and/or transformer_block")
    def constant(build):  # the model with its weights as Constants, unless --parameter-weights
        return None if args.parameter_weights else (lambda weights: build(weights)[0])

    mlp_of = lambda weights=None: mlp(args.hidden, 4 * args.hidden, args.layers, weights=weights)  # noqa: E731
    block_of = lambda weights=None: transformer_block(args.hidden, args.heads, weights=weights)  # noqa: E731
    if args.profile:
        print(f"ISA: {isa()}")
        for case in args.cases:
            if case == "mlp":
                mod, shapes = mlp_of()
                rows = profile_case("mlp", mod, shapes, (args.batch, args.hidden), args.repeat, args.rounds,
                                    clock, blas, {"batch": args.batch}, constant(mlp_of))
            else:
                mod, shapes = block_of()
                rows = profile_case("transformer_block", mod, shapes, (args.seq, args.hidden), args.repeat,
                                    args.rounds, clock, blas, {"seq": args.seq}, constant(block_of))
            print_profile(rows)
        return 0
    rows = []
    for case in args.cases:
        if case == "mlp":
            mod, shapes = mlp_of()
            rows.append(run_case("mlp", mod, shapes, (args.batch, args.hidden), mlp_numpy, args.repeat,
                                 args.rounds, clock, blas, constant(mlp_of)))
        else:
            mod, shapes = block_of()
            rows.append(run_case("transformer_block", mod, shapes, (args.seq, args.hidden),
                                 lambda x, *w: transformer_numpy(args.heads, x, *w), args.repeat, args.rounds,
                                 clock, blas, constant(block_of)))
    mode = "1 thread each, process CPU time" if args.single_thread_cpu else f"{os.cpu_count()} threads, wall time"
    mode += "; weights passed on each call" if args.parameter_weights else "; weights Constants of the model"
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; timing: {mode}, best of {args.rounds} "
          f"alternating rounds x {args.repeat} calls; freed memory kept in the heap: {harness.KEEPS_FREED_MEMORY}")
    print(f"ISA: {isa()}")
    header = f"{'case':<18} {'kernels':>15} {'max rel err':>12} {'C ms':>9} {'VM ms':>9} {'numpy ms':>9} " \
             f"{'numpy/C':>9} {'numpy/VM':>9} {'arena MiB':>10} {'compile s':>10}"
    print(header)
    print("-" * len(header))
    for r in rows:
        kernels = f"{r['kernels_unfused']} -> {r['kernels_fused']}"
        print(f"{r['case']:<18} {kernels:>15} {r['max_rel_err']:>12.2e} {r['c_ms']:>9.2f} {r['vm_ms']:>9.2f} "
              f"{r['numpy_ms']:>9.2f} {r['c_speedup']:>8.2f}x {r['speedup']:>8.2f}x {r['arena_mib']:>10.1f} "
              f"{r['compile_s']:>10.1f}")
    for r in rows:
        if r["executor"] != "compiled":
            print(f"{r['case']}: the C column is the VM ({r['executor']})")
    for r in rows:
        print(f"{r['case']}: planned arena = {r['arena_expr']} bytes, {r['arena_mib']:.1f} MiB at the upper "
              f"bound {r['bounds']}")
    ok = all(r["max_rel_err"] < 1e-3 for r in rows)
    if not ok:
        print("RESULT MISMATCH: refcomp disagrees with numpy", file=sys.stderr)
    if args.json:
        print(json.dumps({"cases": {r["case"]: {"refcomp": round(r["c_ms"], 3), "baseline": round(r["numpy_ms"], 3),
                                                "unit": "ms", "ratio": round(r["c_speedup"], 3),
                                                "vm": round(r["vm_ms"], 3), "vm_ratio": round(r["speedup"], 3)}
                                    for r in rows}}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
