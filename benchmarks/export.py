"""Standalone C export side by side: refcomp export-c against emx-onnx-cgen (and TVM's C runtime path
where it exists) on the same ONNX models, batch pinned: a small CNN, an MLP, and a ResNet-18-layout
CNN at half width.  For each it reports the working memory (refcomp's arena; emx's peak heap of its
malloc'd temporaries; plus each object's .bss), the weight bytes, the code size (`size` text of the
model object without weights) and the host speed (one thread, CPU time, best call), after checking
every output against a numpy forward pass of the same model.  The CPU's ISA is printed first.

    python benchmarks/export.py                        # all models, 224x224 ResNet input
    python benchmarks/export.py --models mlp --repeat 3
    python benchmarks/export.py --resolution 32 --repeat 1 --rounds 1   # a quick check
    python benchmarks/export.py --json                 # last line: {"cases": {...}}

Both generated sources are compiled alike: cc -std=c99 -O3 -march=native -fPIC -shared.  Ratios are
baseline / refcomp, so > 1 means refcomp is better (smaller or faster).
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (before numpy)

import argparse  # noqa: E402
import ctypes  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

CFLAGS = ["-std=c99", "-O3", "-march=native", "-fPIC"]


# ----------------------------------------------------------------------------- models
# A model is a list of layers; the same list gives the ONNX graph and the numpy forward pass.

def _conv(rng, cin, cout, k, stride=1, pad=0):
    w = (rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k))).astype(np.float32)
    b = (rng.standard_normal(cout) * 0.1).astype(np.float32)
    return ("conv", w, b, stride, pad)


def small_cnn(rng, batch=2, resolution=None):
    return [_conv(rng, 3, 16, 3, 1, 1), ("relu",), ("maxpool", 2, 2, 0), _conv(rng, 16, 32, 3, 1, 1), ("relu",),
            ("maxpool", 2, 2, 0), ("gap",), ("dense", (rng.standard_normal((10, 32)) * 0.2).astype(np.float32),
                                               (rng.standard_normal(10) * 0.1).astype(np.float32))], (batch, 3, 32, 32)


def mlp(rng, batch=2, resolution=None):
    layers = []
    for cin, cout in ((256, 512), (512, 512), (512, 10)):
        layers.append(("dense", (rng.standard_normal((cout, cin)) * np.sqrt(1.0 / cin)).astype(np.float32),
                       (rng.standard_normal(cout) * 0.1).astype(np.float32)))
        layers.append(("relu",))
    return layers[:-1], (batch, 256)


def resnet18_half(rng, batch=2, resolution=224):
    """ResNet-18's layout at half width: 32-64-128-256 channels, two basic blocks per stage."""
    layers = [_conv(rng, 3, 32, 7, 2, 3), ("relu",), ("maxpool", 3, 2, 1)]
    cin = 32
    for stage, width in enumerate((32, 64, 128, 256)):
        for block in range(2):
            stride = 2 if stage > 0 and block == 0 else 1
            down = _conv(rng, cin, width, 1, stride, 0) if stride != 1 or cin != width else None
            layers.append(("block", _conv(rng, cin, width, 3, stride, 1), _conv(rng, width, width, 3, 1, 1), down))
            cin = width
    layers += [("gap",), ("dense", (rng.standard_normal((1000, 256)) * 0.06).astype(np.float32),
                          np.zeros(1000, np.float32))]
    return layers, (batch, 3, resolution, resolution)


MODELS = {"small_cnn": small_cnn, "mlp": mlp, "resnet18_half": resnet18_half}


def to_onnx(layers, shape, path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes, inits = [], []
    count = [0]

    def fresh(prefix):
        count[0] += 1
        return f"{prefix}{count[0]}"

    def conv(x, layer):
        _, w, b, stride, pad = layer
        wn, bn, y = fresh("w"), fresh("b"), fresh("t")
        inits.extend([numpy_helper.from_array(w, wn), numpy_helper.from_array(b, bn)])
        k = w.shape[2]
        nodes.append(helper.make_node("Conv", [x, wn, bn], [y], kernel_shape=[k, k], strides=[stride, stride],
                                      pads=[pad] * 4))
        return y

    def simple(op, x, **attrs):
        y = fresh("t")
        nodes.append(helper.make_node(op, [x], [y], **attrs))
        return y

    x = "x"
    for layer in layers:
        kind = layer[0]
        if kind == "conv":
            x = conv(x, layer)
        elif kind == "relu":
            x = simple("Relu", x)
        elif kind == "maxpool":
            _, k, s, p = layer
            x = simple("MaxPool", x, kernel_shape=[k, k], strides=[s, s], pads=[p] * 4)
        elif kind == "gap":
            x = simple("Flatten", simple("GlobalAveragePool", x))
        elif kind == "dense":
            _, w, b = layer
            wn, bn, y = fresh("w"), fresh("b"), fresh("t")
            inits.extend([numpy_helper.from_array(w, wn), numpy_helper.from_array(b, bn)])
            nodes.append(helper.make_node("Gemm", [x, wn, bn], [y], transB=1))
            x = y
        elif kind == "block":
            _, c1, c2, down = layer
            h = conv(simple("Relu", conv(x, c1)), c2)
            skip = conv(x, down) if down is not None else x
            y = fresh("t")
            nodes.append(helper.make_node("Add", [h, skip], [y]))
            x = simple("Relu", y)
    nodes[-1] = helper.make_node(nodes[-1].op_type, list(nodes[-1].input), ["y"],
                                 **{a.name: helper.get_attribute_value(a) for a in nodes[-1].attribute})
    out_shape = [shape[0], forward(layers, np.zeros(shape, np.float32)).shape[1]]
    graph = helper.make_graph(nodes, "model", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def _np_conv(x, layer):
    _, w, b, stride, pad = layer
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    k = w.shape[2]
    windows = np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(2, 3))[:, :, ::stride, ::stride]
    return np.einsum("nchwij,ocij->nohw", windows, w, optimize=True) + b.reshape(1, -1, 1, 1)


def forward(layers, x):
    """The numpy forward pass (float64)."""
    x = x.astype(np.float64)
    for layer in layers:
        kind = layer[0]
        if kind == "conv":
            x = _np_conv(x, layer)
        elif kind == "relu":
            x = np.maximum(x, 0)
        elif kind == "maxpool":
            _, k, s, p = layer
            x = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)), constant_values=-np.inf)
            x = np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(2, 3))[:, :, ::s, ::s].max(axis=(4, 5))
        elif kind == "gap":
            x = x.mean(axis=(2, 3))
        elif kind == "dense":
            x = x @ layer[1].T.astype(np.float64) + layer[2]
        elif kind == "block":
            _, c1, c2, down = layer
            h = _np_conv(np.maximum(_np_conv(x, c1), 0), c2)
            x = np.maximum(h + (_np_conv(x, down) if down is not None else x), 0)
    return x


# ----------------------------------------------------------------------------- building

def _run(cmd, cwd=None):
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return done.stdout


def _size(obj) -> dict:
    text, data, bss = (int(v) for v in _run(["size", str(obj)]).splitlines()[1].split()[:3])
    return {"text": text, "data": data, "bss": bss}


def _compile(cc, sources, out, extra=()):
    objects = []
    for src in sources:
        obj = out / (Path(src).stem + ".o")
        _run([cc, *CFLAGS, *extra, "-c", "-o", str(obj), str(src)])
        objects.append(obj)
    return objects


def build_refcomp(onnx_path, work, cc, schedule=True):
    from refcomp.export import export_c

    out = work / "refcomp"
    export_c(str(onnx_path), out, name="rcmodel", schedule=schedule)
    model_o, weights_o = _compile(cc, [out / "rcmodel.c", out / "rcmodel_weights.c"], out)
    lib = out / "librcmodel.so"
    _run([cc, "-shared", "-o", str(lib), str(model_o), str(weights_o), "-lm"])
    header = (out / "rcmodel.h").read_text()
    arena = int(next(l.split()[2] for l in header.splitlines() if l.startswith("#define RCMODEL_ARENA_BYTES ")))
    code, weights = _size(model_o), _size(weights_o)
    handle = ctypes.CDLL(str(lib))
    handle.rcmodel_run.restype = ctypes.c_int32
    handle.rcmodel_message.restype = ctypes.c_char_p
    arena_buffer = np.zeros(arena + 64, np.uint8)
    arena_pointer = arena_buffer.ctypes.data + (-arena_buffer.ctypes.data) % 64

    def make_call(x, y):
        shapes = np.array(x.shape, np.int64)
        out_shapes = np.zeros(y.ndim, np.int64)
        ins = (ctypes.c_void_p * 1)(x.ctypes.data)
        outs = (ctypes.c_void_p * 1)(y.ctypes.data)
        args = (shapes.ctypes.data_as(ctypes.c_void_p), ins, outs, out_shapes.ctypes.data_as(ctypes.c_void_p),
                ctypes.c_void_p(arena_pointer), ctypes.c_size_t(arena))

        def call():
            code_ = handle.rcmodel_run(*args)
            if code_ != 0:
                raise RuntimeError(f"rcmodel_run: {code_}: {handle.rcmodel_message().decode()}")
        return call

    return {"working": arena + code["bss"], "weights": weights["text"] + weights["data"], "code": code["text"],
            "make_call": make_call, "keep": (handle, arena_buffer)}


_COUNTING = r"""
#include <stddef.h>
#include <stdlib.h>
static size_t bench_now, bench_peak;
void* bench_malloc(size_t n);
void* bench_calloc(size_t n, size_t m);
void bench_free(void* p);
size_t bench_peak_bytes(void);
void bench_reset(void);
void* bench_malloc(size_t n) {
    size_t* p = (size_t*)malloc(n + 16);
    if (!p) return NULL;
    p[0] = n; bench_now += n; if (bench_now > bench_peak) bench_peak = bench_now;
    return (char*)p + 16;
}
void* bench_calloc(size_t n, size_t m) {
    char* p = (char*)bench_malloc(n * m);
    size_t i;
    if (p) for (i = 0; i < n * m; ++i) p[i] = 0;
    return p;
}
void bench_free(void* p) { if (p) { size_t* h = (size_t*)((char*)p - 16); bench_now -= h[0]; free(h); } }
size_t bench_peak_bytes(void) { return bench_peak; }
void bench_reset(void) { bench_peak = bench_now; }
"""
_COUNTING_HEADER = """#include <stddef.h>
void* bench_malloc(size_t n);
void* bench_calloc(size_t n, size_t m);
void bench_free(void* p);
#define malloc(n) bench_malloc(n)
#define calloc(n, m) bench_calloc(n, m)
#define free(p) bench_free(p)
"""


def build_emx(onnx_path, work, cc):
    exe = shutil.which("emx-onnx-cgen")
    if exe is None:
        return "skipped: emx-onnx-cgen is not installed (pip install emx-onnx-cgen)"
    out = work / "emx"
    out.mkdir()
    _run([exe, "compile", str(onnx_path), str(out / "emxmodel.c"), "--model-name", "emxmodel", "--emit-data-file",
          "--large-weight-threshold", "0"])
    (out / "counting.c").write_text(_COUNTING)
    (out / "counting.h").write_text(_COUNTING_HEADER)
    model_o, data_o = _compile(cc, [out / "emxmodel.c", out / "emxmodel_data.c"], out,
                               ["-include", str(out / "counting.h")])
    (counting_o,) = _compile(cc, [out / "counting.c"], out)
    lib = out / "libemxmodel.so"
    _run([cc, "-shared", "-o", str(lib), str(model_o), str(data_o), str(counting_o), "-lm"])
    code, weights = _size(model_o), _size(data_o)
    handle = ctypes.CDLL(str(lib))
    handle.bench_peak_bytes.restype = ctypes.c_size_t

    def make_call(x, y):
        args = (ctypes.c_void_p(x.ctypes.data), ctypes.c_void_p(y.ctypes.data))

        def call():
            handle.emxmodel(*args)
        return call

    return {"working_bss": code["bss"] + weights["bss"], "weights": weights["text"] + weights["data"],
            "code": code["text"], "make_call": make_call, "keep": handle,
            "peak": lambda: int(handle.bench_peak_bytes())}


def tvm_status() -> str:
    try:
        import tvm
    except Exception as exc:  # any import failure means: not available here
        return f"skipped: apache-tvm does not import ({type(exc).__name__}: {exc})"

    if not hasattr(tvm, "micro"):
        return (f"skipped: TVM {tvm.__version__} has no standalone C path (its AOT executor and C runtime "
                "were removed with microTVM; relax.build output needs libtvm_runtime)")
    return "skipped: TVM's microTVM path is not wired into this benchmark"


# ----------------------------------------------------------------------------- main

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--resolution", type=int, default=224, help="ResNet input height and width")
    parser.add_argument("--repeat", type=int, default=5, help="calls per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes-only", action="store_true",
                        help="check and report the sizes; run each model once, time nothing")
    parser.add_argument("--no-schedule", action="store_true", help="export refcomp's kernels unscheduled")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from refcomp.loops.intrin.cpu import describe

    print(f"CPU: {describe()}; compiled alike: cc {' '.join(CFLAGS)}; one thread, CPU time")
    cc = os.environ.get("CC") or shutil.which("cc") or "gcc"
    tvm = tvm_status()
    print(f"TVM: {tvm}")
    rng = np.random.default_rng(0)
    cases = {}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            layers, shape = MODELS[name](rng, args.batch, args.resolution)
            work = Path(tmp) / name
            work.mkdir()
            onnx_path = work / f"{name}.onnx"
            to_onnx(layers, shape, onnx_path)
            x = rng.standard_normal(shape).astype(np.float32)
            want = forward(layers, x)
            sides = {"refcomp": build_refcomp(onnx_path, work, cc, not args.no_schedule), "emx-onnx-cgen": build_emx(onnx_path, work, cc)}
            calls = {}
            for side, built in sides.items():
                if isinstance(built, str):
                    print(f"{name}: emx-onnx-cgen {built}")
                    continue
                y = np.zeros(want.shape, np.float32)
                call = built["make_call"](x, y)
                built["buffers"] = (x, y)  # the call holds raw pointers into them
                call()
                err = float(np.max(np.abs(y - want)) / max(1.0, float(np.max(np.abs(want)))))
                if not err < 1e-3:
                    raise SystemExit(f"{name}: {side} differs from numpy (relative error {err:.2e})")
                calls[side] = call
            emx = sides["emx-onnx-cgen"]
            if isinstance(emx, dict):
                emx["working"] = emx["peak"]() + emx["working_bss"]
            names = list(calls)
            if args.sizes_only:
                times = [float("nan")] * len(names)
            else:
                times = harness.best_times([calls[s] for s in names], args.repeat, args.rounds,
                                           clock=time.process_time)
            for side, t in zip(names, times):
                sides[side]["seconds"] = t
            rc = sides["refcomp"]
            base = sides.get("emx-onnx-cgen")
            metrics = (("working_bytes", "working", "bytes"), ("weight_bytes", "weights", "bytes"),
                       ("code_bytes", "code", "bytes"), ("host_time", "seconds", "s"))
            for metric, key, unit in metrics[:3] if args.sizes_only else metrics:
                b = base[key] if isinstance(base, dict) else None
                ratio = (b / rc[key]) if b is not None and rc[key] else None
                cases[f"{name}/{metric}"] = {"refcomp": rc[key], "baseline": b, "unit": unit,
                                             "ratio": round(ratio, 3) if ratio is not None else None}
                rows.append((name, metric, rc[key], b, ratio, unit))
    print(f"{'model':<14} {'metric':<14} {'refcomp':>14} {'emx-onnx-cgen':>14} {'ratio':>8}")
    for name, metric, r, b, ratio, unit in rows:
        def show(v, unit=unit):
            return f"{v * 1e3:.2f} ms" if unit == "s" else f"{v}"
        print(f"{name:<14} {metric:<14} {show(r):>14} {show(b) if b is not None else '-':>14} "
              f"{f'{ratio:.2f}' if ratio is not None else '-':>8}")
    print("ratio = emx-onnx-cgen / refcomp (> 1: refcomp smaller or faster); working bytes: refcomp's arena, "
          "emx's peak heap, plus .bss; stack not counted")
    if args.json:
        print(json.dumps({"cases": cases}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
