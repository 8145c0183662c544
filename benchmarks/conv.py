"""Convolution and pooling kernels vs onnxruntime: ResNet-18 and MobileNetV2 layer shapes, one node each.

    python benchmarks/conv.py [--json] [--small] [--repeat N] [--rounds N] [--only a,b]
                                 [--single-thread-cpu] [--constant-weights]

Each case is one conv2d built the default way (graph.build: legalize, default schedule) and run in
the VM, against onnxruntime running the same one-node ONNX Conv model with as many intra-op
threads as the machine has CPUs (one with --single-thread-cpu).  The weights are inputs of both
(each engine lays them out on every call), or with --constant-weights a graph constant and an ONNX
initializer (laid out once, when the model is built).  Both results are checked against
numpy (float64) before anything is timed.  The script first measures this machine's fp32 FMA
peak with a small C loop (independent vector FMA chains on every thread, built with refcomp's
toolchain) and prints each refcomp convolution's GFLOP/s as a fraction of it.  The max pooling
cases (ResNet-18's 3 x 3 stride 2 pool after the stem) run the same way against a one-node
MaxPool, checked against the operator's numpy reference.
"""
from __future__ import annotations

import harness  # noqa: F401  (first: it sets the environment numpy and libgomp read)

import argparse
import ctypes
import json
import os
import time
from dataclasses import dataclass

import numpy as np

import refcomp
from refcomp.ast.graph_struct_info import TensorStructInfo
from refcomp.graph import BlockBuilder, Var
from refcomp.graph.op.nn import _np_conv, conv2d, max_pool2d
from refcomp.graph.op.registry import get as get_op
from refcomp.loops.intrin import cpu


@dataclass(frozen=True)
class Conv:
    name: str
    batch: int
    channels: int
    size: int
    out_channels: int
    kernel: int
    stride: int = 1
    groups: int = 1

    @property
    def pad(self) -> int:
        return self.kernel // 2

    @property
    def out_size(self) -> int:
        return (self.size + 2 * self.pad - self.kernel) // self.stride + 1

    @property
    def flops(self) -> int:
        per_output = 2 * (self.channels // self.groups) * self.kernel * self.kernel
        return self.batch * self.out_channels * self.out_size ** 2 * per_output


def cases(small: bool) -> list[Conv]:
    """ResNet-18's 3x3 and 1x1 (downsampling) convolutions and MobileNetV2's depthwise ones, at
    batch 2; --small divides channels and sizes so the whole run takes seconds."""
    full = [
        Conv("resnet_3x3_64_56", 2, 64, 56, 64, 3),
        Conv("resnet_3x3_128_28", 2, 128, 28, 128, 3),
        Conv("resnet_3x3_256_14", 2, 256, 14, 256, 3),
        Conv("resnet_3x3_512_7", 2, 512, 7, 512, 3),
        Conv("resnet_3x3_64_48", 2, 64, 48, 64, 3),        # the half-width (96 x 96) model's first stage
        Conv("resnet_1x1_64_128_s2", 2, 64, 56, 128, 1, stride=2),
        Conv("resnet_stem_7x7_3_96_s2", 2, 3, 96, 32, 7, stride=2),  # the half-width model's stem
        Conv("mobilenet_dw_32_112", 2, 32, 112, 32, 3, groups=32),
        Conv("mobilenet_dw_144_56", 2, 144, 56, 144, 3, groups=144),
        Conv("mobilenet_dw_192_28_s2", 2, 192, 28, 192, 3, stride=2, groups=192),
        Conv("mobilenet_dw_576_14", 2, 576, 14, 576, 3, groups=576),
    ]
    if not small:
        return full
    shrink = []
    for c in full:
        factor = 8
        channels = max(c.channels // factor, 1)
        out = max(c.out_channels // factor, 1)
        shrink.append(Conv(c.name, 1, channels, max(c.size // 4, 4), out, c.kernel, c.stride,
                           channels if c.groups > 1 else 1))
    return shrink


@dataclass(frozen=True)
class Pool:
    name: str
    batch: int
    channels: int
    size: int
    kernel: int = 3
    stride: int = 2
    pad: int = 1

    @property
    def out_size(self) -> int:
        return (self.size + 2 * self.pad - self.kernel) // self.stride + 1


def pool_cases(small: bool) -> list[Pool]:
    """ResNet-18's max pool after the stem, at full and half width (batch 2)."""
    if small:
        return [Pool("resnet_maxpool_8_12", 1, 8, 12)]
    return [Pool("resnet_maxpool_64_112", 2, 64, 112), Pool("resnet_maxpool_32_48", 2, 32, 48)]


def refcomp_pool(case: Pool):
    """The one-pool graph built the default way."""
    x = Var("x", TensorStructInfo((case.batch, case.channels, case.size, case.size), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(max_pool2d(x, pool_size=case.kernel, strides=case.stride, padding=case.pad))
        bb.emit_func_output(out)
    return refcomp.runtime.VirtualMachine(refcomp.graph.build(bb.get(), target="c", blas=False))["main"]


def onnxruntime_pool(case: Pool, threads: int):
    """The one-node ONNX MaxPool in onnxruntime."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [case.batch, case.channels, case.size, case.size])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                      [case.batch, case.channels, case.out_size, case.out_size])
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[case.kernel] * 2, strides=[case.stride] * 2,
                            pads=[case.pad] * 4)
    model = helper.make_model(helper.make_graph([node], "pool", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return lambda xv: session.run(None, {"x": xv})[0]


def run_pools(args, threads: int, clock, rng, only) -> dict:
    """Each max pooling case checked against the operator's reference, then timed as the convolutions are."""
    results = {}
    reference = get_op("max_pool2d").evaluate
    for case in pool_cases(args.small):
        if only and case.name not in only:
            continue
        x = rng.standard_normal((case.batch, case.channels, case.size, case.size)).astype(np.float32)
        mine, theirs = refcomp_pool(case), onnxruntime_pool(case, threads)
        attrs = {"pool_size": (case.kernel,) * 2, "strides": (case.stride,) * 2, "padding": (case.pad,) * 4,
                 "dilation": (1, 1), "ceil_mode": False, "count_include_pad": False}
        expected = reference([x], attrs)
        for side, fn in (("refcomp", mine), ("onnxruntime", theirs)):
            if not np.array_equal(np.asarray(fn(x)), expected):
                raise SystemExit(f"{case.name}: {side} disagrees with numpy")
        best_mine, best_theirs = harness.best_times([lambda: mine(x), lambda: theirs(x)], args.repeat, args.rounds,
                                                    clock)
        results[case.name] = {"refcomp": best_mine * 1e3, "baseline": best_theirs * 1e3, "unit": "ms",
                              "ratio": best_theirs / best_mine}
        print(f"{case.name:<26} {best_mine * 1e3:>11.3f} {best_theirs * 1e3:>9.3f} {best_theirs / best_mine:>7.2f} "
              f"{'-':>9} {'-':>8}", flush=True)
    return results


def refcomp_conv(case: Conv, weights: np.ndarray | None = None):
    """The one-conv graph built the default way; with `weights`, they are a graph constant (packed
    at build time) and the function takes x alone."""
    from refcomp.ast.graph import Constant

    x = Var("x", TensorStructInfo((case.batch, case.channels, case.size, case.size), "float32"))
    w = Var("w", TensorStructInfo((case.out_channels, case.channels // case.groups, case.kernel, case.kernel),
                                  "float32"))
    params = [x] if weights is not None else [x, w]
    bb = BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(conv2d(x, Constant(weights) if weights is not None else w, strides=case.stride,
                                        padding=case.pad, groups=case.groups))
        bb.emit_func_output(out)
    fn = refcomp.runtime.VirtualMachine(refcomp.graph.build(bb.get(), target="c", blas=False))["main"]
    return (lambda xv, wv: fn(xv)) if weights is not None else fn


def onnxruntime_conv(case: Conv, threads: int, weights: np.ndarray | None = None):
    """The one-node ONNX Conv in onnxruntime; with `weights`, they are an initializer (onnxruntime
    may then pre-pack them for its blocked kernels) and the session takes x alone."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [case.batch, case.channels, case.size, case.size])
    w = helper.make_tensor_value_info("w", TensorProto.FLOAT,
                                      [case.out_channels, case.channels // case.groups, case.kernel, case.kernel])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                      [case.batch, case.out_channels, case.out_size, case.out_size])
    node = helper.make_node("Conv", ["x", "w"], ["y"], strides=[case.stride] * 2, pads=[case.pad] * 4,
                            group=case.groups, kernel_shape=[case.kernel] * 2)
    if weights is not None:
        graph = helper.make_graph([node], "conv", [x], [y], initializer=[numpy_helper.from_array(weights, "w")])
    else:
        graph = helper.make_graph([node], "conv", [x, w], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    onnx.checker.check_model(model)
    if weights is not None:
        return lambda xv, wv: session.run(None, {"x": xv})[0]
    return lambda xv, wv: session.run(None, {"x": xv, "w": wv})[0]


_PEAK_SOURCE = r"""
#include <immintrin.h>
#include <stdint.h>
/* chains independent FMA chains of one full vector each, `iterations` rounds on every thread */
float refcomp_fma_peak(int64_t iterations) {
    float total = 0.0f;
    #pragma omp parallel reduction(+:total)
    {
        VEC acc[CHAINS];
        VEC a = SET1(1.0000001f), b = SET1(0.9999999f);
        for (int i = 0; i < CHAINS; ++i) acc[i] = SET1((float)i);
        for (int64_t it = 0; it < iterations; ++it) {
            #pragma GCC unroll 16
            for (int i = 0; i < CHAINS; ++i) acc[i] = FMA(acc[i], a, b);
        }
        float lanes[LANES];
        for (int i = 1; i < CHAINS; ++i) acc[0] = ADD(acc[0], acc[i]);
        STORE(lanes, acc[0]);
        for (int i = 0; i < LANES; ++i) total += lanes[i];
    }
    return total;
}
"""


def fma_peak(threads: int, clock=time.perf_counter) -> tuple[float, int]:
    """(GFLOP/s, lanes) of independent fp32 FMA chains on `threads` threads, best of a few runs."""
    from refcomp.emit_c import compile_shared

    wide = cpu.has("avx512f")
    lanes = 16 if wide else 8
    macros = ("#define VEC __m512\n#define SET1 _mm512_set1_ps\n#define FMA _mm512_fmadd_ps\n"
              "#define ADD _mm512_add_ps\n#define STORE _mm512_storeu_ps\n" if wide else
              "#define VEC __m256\n#define SET1 _mm256_set1_ps\n#define FMA _mm256_fmadd_ps\n"
              "#define ADD _mm256_add_ps\n#define STORE _mm256_storeu_ps\n")
    source = f"#define CHAINS {16 if wide else 12}\n#define LANES {lanes}\n" + macros + _PEAK_SOURCE
    library = ctypes.CDLL(str(compile_shared(source, "c", name="fma_peak")))
    library.refcomp_fma_peak.restype = ctypes.c_float
    library.refcomp_fma_peak.argtypes = [ctypes.c_int64]
    iterations = 2_000_000
    chains = 16 if wide else 12
    best = float("inf")
    for _ in range(5):
        start = clock()
        library.refcomp_fma_peak(iterations)
        best = min(best, clock() - start)
    return 2 * lanes * chains * iterations * threads / best / 1e9, lanes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print a JSON summary as the last line")
    parser.add_argument("--small", action="store_true", help="small shapes: checks that everything runs")
    parser.add_argument("--repeat", type=int, default=5, help="calls per round")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    parser.add_argument("--only", default=None, help="comma-separated case names")
    parser.add_argument("--constant-weights", action="store_true",
                        help="weights as graph constants / ONNX initializers (packed once, at build time)")
    parser.add_argument("--single-thread-cpu", action="store_true",
                        help="one thread each side, timed by process CPU time (steady on a busy machine)")
    args = parser.parse_args()
    clock = time.perf_counter
    threads = os.cpu_count() or 1
    if args.single_thread_cpu:
        os.environ["OMP_NUM_THREADS"] = "1"  # before the first kernel loads libgomp
        clock, threads = time.process_time, 1
    else:
        threads = int(os.environ.get("OMP_NUM_THREADS", "0") or 0) or threads
    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    only = set(args.only.split(",")) if args.only else None

    isa = "AVX-512" if cpu.has("avx512f") else ("AVX2 + FMA" if cpu.has("avx2") else "no AVX2")
    print(f"refcomp {refcomp.__version__} kernels benchmark, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"ISA: {isa}; {os.cpu_count()} CPUs, {threads} threads each side")
    peak, lanes = fma_peak(threads, clock)
    print(f"measured fp32 FMA peak: {peak:.1f} GFLOP/s ({lanes} lanes, {threads} threads)")
    header = (f"{'case':<26} {'refcomp ms':>11} {'ort ms':>9} {'ratio':>7} {'GFLOP/s':>9} {'of peak':>8}")
    print(header)
    print("-" * len(header))
    results = {}
    for case in cases(args.small):
        if only and case.name not in only:
            continue
        x = rng.standard_normal((case.batch, case.channels, case.size, case.size)).astype(np.float32)
        w = rng.standard_normal((case.out_channels, case.channels // case.groups, case.kernel,
                                 case.kernel)).astype(np.float32)
        constant = w if args.constant_weights else None
        mine, theirs = refcomp_conv(case, constant), onnxruntime_conv(case, threads, constant)
        expected = _np_conv(x.astype(np.float64), w.astype(np.float64), (case.stride,) * 2, (case.pad,) * 4,
                            (1, 1), case.groups)
        scale = float(np.abs(expected).max()) or 1.0
        for side, fn in (("refcomp", mine), ("onnxruntime", theirs)):
            got = np.asarray(fn(x, w))
            if got.shape != expected.shape or not np.allclose(got, expected, rtol=1e-4, atol=1e-5 * scale):
                raise SystemExit(f"{case.name}: {side} disagrees with numpy")
        best_mine, best_theirs = harness.best_times([lambda: mine(x, w), lambda: theirs(x, w)],
                                                    args.repeat, args.rounds, clock)
        gflops = case.flops / best_mine / 1e9
        results[case.name] = {"refcomp": best_mine * 1e3, "baseline": best_theirs * 1e3, "unit": "ms",
                              "ratio": best_theirs / best_mine, "gflops": gflops, "peak_fraction": gflops / peak}
        print(f"{case.name:<26} {best_mine * 1e3:>11.3f} {best_theirs * 1e3:>9.3f} {best_theirs / best_mine:>7.2f} "
              f"{gflops:>9.1f} {gflops / peak:>8.1%}", flush=True)
    results.update(run_pools(args, threads, clock, rng, only))
    if args.json:
        print(json.dumps({"cases": results, "fma_peak_gflops": peak}))


if __name__ == "__main__":
    main()
