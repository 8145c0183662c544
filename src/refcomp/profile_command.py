"""`refcomp profile MODEL.onnx`: where a model's call spends its time, kernel by kernel.

The model is imported (`--input NAME=D0,D1,...` gives an input's symbolic dims values), built
the default way, and its compiled graph function's profile (CompiledGraphFunction.profile,
spec/graph_c.md) is printed for random inputs: each kernel's share of a call, slowest first.
Where onnxruntime is installed (and unless `--no-peer`), the same model runs there on the same
inputs with as many intra-op threads as refcomp's OpenMP uses: its time per call, the ratio, and
the largest difference of the outputs are printed beside refcomp's.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import numpy as np

from .errors import RefcompError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="refcomp profile",
        description="build an ONNX model, run it on random inputs and print where a call spends its time "
                    "(the compiled graph function's profile, kernel by kernel), beside onnxruntime where installed")
    parser.add_argument("model", help="an .onnx file")
    parser.add_argument("--input", action="append", default=[], metavar="NAME=D0,D1,...",
                        help="the shape of an input with symbolic dims (repeatable)")
    parser.add_argument("--repeat", type=int, default=20, help="calls averaged (default 20)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    parser.add_argument("--no-peer", action="store_true", help="do not run onnxruntime beside refcomp")
    return parser


def random_inputs(func: Any, seed: int) -> list[np.ndarray]:
    """Random arrays for the parameters of graph function `func`, whose shapes must be constant:
    floats in [-2, 2), integers 0 or 1 (valid token ids and masks), bools 50/50."""
    from .ast import as_int
    from .testing import random_array

    rng = np.random.default_rng(seed)
    arrays = []
    for param in func.params:
        info = param.struct_info
        shape = getattr(info, "shape", None)
        dims = [as_int(d) for d in shape] if shape is not None else None
        if dims is None:
            raise RefcompError(f"input {param.name} is not a tensor of known rank; refcomp profile takes "
                               f"tensor inputs")
        if any(d is None for d in dims):
            raise RefcompError(f"input {param.name} has the shape {tuple(shape)} with symbolic dims; give them "
                               f"values with --input {param.name}=D0,D1,...")
        dtype = str(info.dtype)
        arrays.append(random_array(rng, dims, dtype, low=0, high=1) if _is_integer(dtype)
                      else random_array(rng, dims, dtype))
    return arrays


def _is_integer(dtype: str) -> bool:
    try:
        return np.dtype(dtype).kind in "iu"
    except TypeError:
        return False  # bfloat16 and the other types numpy lacks are floats


def _peer(path: str, names: list[str], arrays: list[np.ndarray], repeat: int):
    """(mean seconds per call, outputs) of onnxruntime on the same inputs, or None without it."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    from .loops.intrin.cpu import openmp_threads
    from .runtime.graph_function import WARM_UP_CALLS

    options = ort.SessionOptions()
    options.intra_op_num_threads = openmp_threads()
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    feed = dict(zip(names, arrays))
    for _ in range(WARM_UP_CALLS):  # as many as the profile's
        outputs = session.run(None, feed)
    start = time.perf_counter()
    for _ in range(repeat):
        session.run(None, feed)
    return (time.perf_counter() - start) / repeat, outputs


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.repeat < 1:
        raise RefcompError(f"--repeat must be at least 1, got {args.repeat}")
    if not os.path.isfile(args.model):
        raise RefcompError(f"no such file: {args.model}")
    import refcomp
    from .frontend import from_onnx
    from .frontend.arguments import input_shapes

    mod = from_onnx(args.model, input_shapes(args.input) or None)
    arrays = random_inputs(mod["main"], args.seed)
    start = time.perf_counter()
    ex = refcomp.graph.build(mod, target="c")
    built = time.perf_counter() - start
    if "main" not in ex.compiled:
        raise RefcompError(f"main is not compiled to one C function ({ex.executor}); the profile times the "
                           f"compiled graph function")
    fn = ex.compiled["main"]
    print(f"{os.path.basename(args.model)}: built in {built:.1f} s, {len(fn.call_sites)} calls "
          f"({fn.kernel_calls} kernels); inputs " + ", ".join(f"{p.name} {a.shape} {a.dtype}"
                                                           for p, a in zip(mod["main"].params, arrays)))
    report = fn.profile(*arrays, repeat=args.repeat)
    print(report)
    if not args.no_peer:
        peer = _peer(args.model, [p.name for p in mod["main"].params], arrays, args.repeat)
        if peer is None:
            print("onnxruntime is not installed: no peer timing", file=sys.stderr)
        else:
            seconds, theirs = peer
            ours = fn(*arrays)
            ours = list(ours) if isinstance(ours, tuple) else [ours]
            differences = [float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
                           for a, b in zip(ours, theirs) if np.size(a) and np.shape(a) == np.shape(b)]
            print(f"onnxruntime: {seconds * 1e3:.3f} ms a call (mean of {args.repeat}); onnxruntime's time / "
                  f"refcomp's {seconds / report.total:.2f}; largest output difference "
                  f"{max(differences) if differences else float('nan'):.3g}")
    return 0
