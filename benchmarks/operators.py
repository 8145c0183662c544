"""refcomp's default schedules vs numpy on single operators, with the machine's stream bandwidth.

    python benchmarks/operators.py [--json] [--only softmax,...] [--rows 4096] [--cols 4096]
                                 [--repeat 5] [--rounds 3] [--single-thread-cpu]

Each case is one graph operator, legalized and given refcomp's default schedule (no hand
schedule), built with `refcomp.build` and checked against the operator's numpy reference on fresh
random data before it is timed; numpy runs the natural expression in the same process, in
alternating rounds.  Bandwidth-bound cases also report GB/s of compulsory traffic (every input
read once, every output written once) and the fraction of the stream bandwidth this benchmark
measures itself first: a copy kernel (out = x over rows x cols float32, parallel, vectorized)
timed the same way.  The copy's GB/s counts its read and its write.  The same copy with
streaming stores is timed too, and each case's fraction of it printed in a last column: the row
kernels write outputs this large with streaming stores, which a copy with ordinary stores
(what numpy.copyto reaches) does not use.

Cases live in a registry: a function decorated with @case("name") that takes the parsed
arguments and returns a Case.  Add a case by adding such a function.

Cases:
  softmax      softmax over the last axis of (rows, cols)
  layer_norm   layer norm over the last axis, with gamma and beta (cols,)
  rms_norm     RMS norm over the last axis, with a weight (cols,)
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (before numpy: it sets up OpenBLAS, OpenMP and malloc for the timings)

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Callable  # noqa: E402

import numpy as np  # noqa: E402

import refcomp  # noqa: E402
from refcomp import te  # noqa: E402
from refcomp.graph.op import registry  # noqa: E402
from refcomp.graph.passes.default_schedule import schedule_kernel  # noqa: E402
from refcomp.loops.intrin import cpu  # noqa: E402


@dataclass
class Case:
    """One timed comparison: refcomp() and baseline() do the same work; check() compares them
    (raising on a mismatch); traffic is the compulsory bytes one call moves (0: not
    bandwidth-bound, no GB/s shown)."""

    name: str
    refcomp: Callable[[], object]
    baseline: Callable[[], object]
    check: Callable[[], None]
    traffic: int = 0
    baseline_name: str = "numpy"


CASES: dict[str, Callable[[argparse.Namespace, np.random.Generator], Case]] = {}


def case(name: str):
    """Register a case builder under `name` (the order of registration is the order of the table)."""
    def register(builder):
        if name in CASES:
            raise ValueError(f"case {name!r} registered twice")
        CASES[name] = builder
        return builder
    return register


# ----------------------------------------------------------------------------- helpers

def default_kernel(op: str, shapes: list[tuple], **attrs):
    """The library of graph operator `op` over float32 inputs of `shapes`, default-scheduled."""
    info = registry.get(op)
    inputs = [te.placeholder(shape, "float32", f"in{k}") for k, shape in enumerate(shapes)]
    out = info.legalize(*inputs, **attrs)
    func = te.create_prim_func([*inputs, out], name=op)
    return refcomp.build(schedule_kernel(func)), info.reference


def op_case(name: str, op: str, args: argparse.Namespace, rng, params: int, **attrs) -> Case:
    """A case for a row operator over x (rows, cols) and `params` per-column vectors."""
    shape = (args.rows, args.cols)
    lib, reference = default_kernel(op, [shape] + [(args.cols,)] * params, **attrs)
    inputs = [rng.standard_normal(shape).astype(np.float32)]
    inputs += [rng.standard_normal((args.cols,)).astype(np.float32) for _ in range(params)]
    out = np.empty(shape, np.float32)

    def check():
        lib(*inputs, out)
        np.testing.assert_allclose(out, reference(*inputs, **attrs), rtol=1e-4, atol=1e-5)

    traffic = sum(a.nbytes for a in inputs) + out.nbytes
    return Case(name, lambda: lib(*inputs, out), lambda: reference(*inputs, **attrs), check, traffic)


def stream_copy(args: argparse.Namespace, rng, clock) -> tuple[float, float]:
    """GB/s of a default-scheduled copy of a (rows, cols) float32 tensor (its read plus its write),
    with ordinary stores (the stream figure: what numpy.copyto / memcpy reach at this size) and
    with streaming stores (`nontemporal_store` on its row loop: no read of each line before it is
    written), the two timed in alternating rounds."""
    from refcomp.ast.stmt import NONTEMPORAL_STORE
    from refcomp.loops.schedule import Schedule

    x = te.placeholder((args.rows, args.cols), "float32", "x")
    y = te.compute(x.shape, lambda i, j: x[i, j], name="copy")
    scheduled = schedule_kernel(te.create_prim_func([x, y], name="stream_copy"))
    lib = refcomp.build(scheduled)
    sch = Schedule(scheduled)
    sch.annotate(sch.get_loops(sch.get_block("copy"))[0], NONTEMPORAL_STORE, "copy")
    streaming = refcomp.build(sch.func)
    a = rng.standard_normal((args.rows, args.cols)).astype(np.float32)
    b = np.empty_like(a)
    for copy in (lib, streaming):
        b[:] = np.nan
        copy(a, b)
        np.testing.assert_array_equal(a, b)
    seconds = harness.best_times([lambda: lib(a, b), lambda: streaming(a, b)], args.repeat, args.rounds, clock)
    return tuple(2 * a.nbytes / t / 1e9 for t in seconds)


# ----------------------------------------------------------------------------- cases

@case("softmax")
def softmax_case(args, rng) -> Case:
    return op_case("softmax", "softmax", args, rng, 0)


@case("layer_norm")
def layer_norm_case(args, rng) -> Case:
    return op_case("layer_norm", "layer_norm", args, rng, 2)


@case("rms_norm")
def rms_norm_case(args, rng) -> Case:
    return op_case("rms_norm", "rms_norm", args, rng, 1)


# ----------------------------------------------------------------------------- main

def isa() -> str:
    """The machine and the vector extensions the kernels can use on it."""
    return cpu.describe()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print a JSON summary as the last line")
    parser.add_argument("--only", default=None, help="comma-separated case names")
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--cols", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=5, help="calls per round")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    parser.add_argument("--single-thread-cpu", action="store_true",
                        help="time one thread of each side by process CPU time (steady on a busy machine)")
    args = parser.parse_args()
    clock = time.perf_counter
    if args.single_thread_cpu:
        os.environ["OMP_NUM_THREADS"] = "1"  # before the first kernel loads: libgomp reads it once
        clock = time.process_time
        try:
            from threadpoolctl import threadpool_limits

            threadpool_limits(1)
        except ImportError:
            pass
    only = set(args.only.split(",")) if args.only else None
    unknown = (only or set()) - set(CASES)
    if unknown:
        parser.error(f"unknown cases {sorted(unknown)}; known: {', '.join(CASES)}")
    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))

    print(f"refcomp {refcomp.__version__} kernel benchmark, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, ISA {isa()}")
    mode = "1 thread each, process CPU time" if args.single_thread_cpu else f"{os.cpu_count()} threads, wall time"
    print(f"timing: {mode}, best of {args.rounds} alternating rounds x {args.repeat} calls; "
          f"shape ({args.rows}, {args.cols}) float32")
    stream, stream_nt = stream_copy(args, rng, clock)
    print(f"stream bandwidth (copy kernel, read + write): {stream:.1f} GB/s; "
          f"with streaming stores {stream_nt:.1f} GB/s (the last column's reference)")
    header = (f"{'case':<14} {'refcomp ms':>11} {'numpy ms':>9} {'ratio':>7} {'GB/s':>7} {'of stream':>10} "
              f"{'of NT copy':>11}")
    print(header)
    print("-" * len(header))
    results = {}
    for name, build in CASES.items():
        if only is not None and name not in only:
            continue
        c = build(args, rng)
        c.check()
        ours, theirs = harness.best_times([c.refcomp, c.baseline], args.repeat, args.rounds, clock)
        row = {"refcomp": round(ours * 1e3, 3), "baseline": round(theirs * 1e3, 3), "unit": "ms",
               "ratio": round(theirs / ours, 3), "baseline_name": c.baseline_name}
        line = f"{name:<14} {ours * 1e3:11.2f} {theirs * 1e3:9.2f} {theirs / ours:7.2f}"
        if c.traffic:
            gbs = c.traffic / ours / 1e9
            row.update(gb_per_s=round(gbs, 2), stream_gb_per_s=round(stream, 2), stream_fraction=round(gbs / stream, 3),
                       stream_nt_gb_per_s=round(stream_nt, 2), stream_nt_fraction=round(gbs / stream_nt, 3))
            line += f" {gbs:7.1f} {gbs / stream:10.2f} {gbs / stream_nt:11.2f}"
        results[name] = row
        print(line, flush=True)
    if args.json:
        print(json.dumps({"cases": results}))


if __name__ == "__main__":
    main()
