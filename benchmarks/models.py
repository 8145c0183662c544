"""Whole models vs onnxruntime: Hugging Face architectures exported by torch, imported by refcomp.

    python benchmarks/models.py [--json] [--small] [--only resnet18_half,vit] [--repeat N] [--rounds N]
                                [--threads N] [--single-thread-cpu] [--profile] [--layouts-ab]

Each case is a transformers model definition with random weights (benchmarks/hf_models.py), exported
by torch's ONNX exporter with a dynamic batch, imported with refcomp.frontend.from_onnx and built the
default way (refcomp.graph.build).  Both engines run the same file in this process at batch 2; each
result is checked against onnxruntime (and onnxruntime's against a float64 torch run) before
anything is timed.  Timings are the best call of `--rounds` alternating rounds of `--repeat` calls
(10 in all by default), both engines on --threads threads (2 by default: intra_op_num_threads for
onnxruntime, OMP_NUM_THREADS for refcomp).  ratio = onnxruntime time / refcomp time.

Per model it prints which executor runs main (the compiled graph function, or the VM and why), the
kernel count, and with --profile the time per kernel class (the compiled function's profile:
CompiledGraphFunction.profile, timers between its kernel calls; the VM's timing where it runs).  With
--layouts-ab it also builds each model with graph.build(layouts=False) (every tensor NCHW) and
layouts=True (every convolution chain in the channel-blocked layout, spec/graph.md 5.2; the
default, "auto", converts the chains with a depthwise convolution), checks them, and times them
alternating with the default build in the same rounds (a line each: the ratio to onnxruntime, and
the default build's speed relative to it).
torch, transformers and onnxscript are optional: without them every case is skipped with a message.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (before numpy: it sets up OpenBLAS, OpenMP and malloc for the timings)

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402

import numpy as np  # noqa: E402

import hf_models  # noqa: E402


@dataclass(frozen=True)
class Model:
    name: str
    kind: str
    image_size: int | None = None  # None: a text model
    seq: int = 64
    config: dict = field(default_factory=dict)


def cases(small: bool) -> list[Model]:
    """The models of the issue; --small shrinks images and sequences so a run takes seconds."""
    if small:
        return [Model("resnet18_half", "resnet", 32, config=dict(hf_models.RESNET18_HALF)),
                Model("mobilenet_v2_half", "mobilenet_v2", 32, config=dict(hf_models.MOBILENET_V2_HALF)),
                Model("vit_2layer", "vit", 16, config={**hf_models.VIT_SMALL, "patch_size": 4}),
                Model("bert_small", "bert", seq=8, config=dict(hf_models.BERT_SMALL)),
                Model("gpt2_small", "gpt2", seq=8, config=dict(hf_models.GPT2_SMALL))]
    return [Model("resnet18_half", "resnet", 96, config=dict(hf_models.RESNET18_HALF)),
            Model("mobilenet_v2_half", "mobilenet_v2", 96, config=dict(hf_models.MOBILENET_V2_HALF)),
            Model("vit_2layer", "vit", 64, config=dict(hf_models.VIT_SMALL)),
            Model("bert_small", "bert", seq=64, config=dict(hf_models.BERT_SMALL)),
            Model("gpt2_small", "gpt2", seq=64, config=dict(hf_models.GPT2_SMALL))]


def export(case: Model, folder: str):
    """(onnx path, input, float64 torch output) for case at batch 2."""
    import torch

    path = os.path.join(folder, f"{case.name}.onnx")
    rng = np.random.default_rng(0)
    if case.image_size is None:
        model = hf_models.text_model(case.kind, **case.config)
        hf_models.export(model, path, max_seq=max(32, case.seq))
        x = rng.integers(0, hf_models.VOCAB, (2, case.seq)).astype(np.int64)
        with torch.no_grad():
            expected = model.double()(input_ids=torch.from_numpy(x))[0].numpy()
    else:
        model = hf_models.image_model(case.kind, case.image_size, **case.config)
        hf_models.export(model, path, image_size=case.image_size)
        x = rng.standard_normal((2, 3, case.image_size, case.image_size)).astype(np.float32)
        with torch.no_grad():
            expected = model.double()(pixel_values=torch.from_numpy(x).double())[0].numpy()
    return path, x, expected


def onnxruntime_session(path: str, threads: int):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    return lambda x: session.run(None, {"x": x})[0]


def refcomp_function(path: str, layouts: bool | None = None):
    """(callable, executor description, kernel count, executable) for the default build of path
    (layouts: graph.build's switch of the channel-blocked layout; None: its default)."""
    import refcomp
    from refcomp.frontend import from_onnx

    options = {} if layouts is None else {"layouts": layouts}
    ex = refcomp.graph.build(from_onnx(path), target="c", **options)
    executor = ex.executors.get("main", "vm")
    if "main" in getattr(ex, "compiled", {}):
        fn = ex.compiled["main"]
        kernels = fn.kernel_calls
    else:
        fn = refcomp.runtime.VirtualMachine(ex)["main"]
        kernels = None
    return fn, executor, kernels, ex


def close(got, expected, rtol: float = 1e-3) -> bool:
    scale = float(np.abs(expected).max()) or 1.0
    return got.shape == expected.shape and bool(np.allclose(got, expected, rtol=rtol, atol=rtol * scale))


def kernel_class(name: str) -> str:
    """A kernel's class from its name (for the profile only): the op names legalization gives."""
    for key in ("conv", "matmul", "dense", "linear", "softmax", "layer_norm", "pool", "transpose", "reshape",
                "gelu", "erf", "mean", "reduce", "add", "relu", "clip", "concat", "gather", "take"):
        if key in name:
            return key
    return "other"


def profile(ex, x, calls: int = 20) -> dict[str, float]:
    """Milliseconds per kernel class in a call: the compiled function's own profile (timers
    between its calls, CompiledGraphFunction.profile, mean of `calls`) where main is compiled,
    else the VM's time per kernel, best of `calls` runs (which includes the VM's Python around
    each call)."""
    import refcomp

    if "main" in getattr(ex, "compiled", {}):
        report = ex.compiled["main"].profile(x, repeat=calls)
        split: dict[str, float] = {}
        for kernel, seconds in report.sites:
            cls = "blas" if kernel.startswith("refcomp.blas.") else kernel_class(kernel)
            split[cls] = split.get(cls, 0.0) + seconds * 1e3
        split["outside the calls"] = max(0.0, report.total * 1e3 - sum(split.values()))
        return dict(sorted(split.items(), key=lambda kv: -kv[1]))

    class TimedVM(refcomp.runtime.VirtualMachine):
        def _call_kernel(self, inst, frame):
            start = time.perf_counter()
            super()._call_kernel(inst, frame)
            self.times[kernel_class(inst.kernel)] = self.times.get(kernel_class(inst.kernel), 0.0) + \
                time.perf_counter() - start

        def _call_packed(self, inst, frame):
            start = time.perf_counter()
            super()._call_packed(inst, frame)
            self.times["blas"] = self.times.get("blas", 0.0) + time.perf_counter() - start

    vm = TimedVM(ex, executor="vm")
    best: dict[str, float] = {}
    for _ in range(calls):
        vm.times = {}
        vm["main"](x)
        for cls, seconds in vm.times.items():
            best[cls] = min(best.get(cls, math.inf), seconds * 1e3)
    return dict(sorted(best.items(), key=lambda kv: -kv[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print a JSON summary as the last line")
    parser.add_argument("--small", action="store_true", help="small images and sequences: checks that all runs")
    parser.add_argument("--only", default=None, help="comma-separated case names")
    parser.add_argument("--repeat", type=int, default=5, help="calls per round")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds")
    parser.add_argument("--threads", type=int, default=2, help="threads of each engine")
    parser.add_argument("--single-thread-cpu", action="store_true",
                        help="one thread each side, timed by process CPU time (steady on a busy machine)")
    parser.add_argument("--profile", action="store_true",
                        help="print the time per kernel class (the compiled function's profile)")
    parser.add_argument("--layouts-ab", action="store_true",
                        help="also time the builds with layouts=False (all NCHW) and layouts=True (every "
                             "convolution chain in NCHW{L}c), alternating with the default build in one run")
    args = parser.parse_args()
    clock, threads = time.perf_counter, args.threads
    if args.single_thread_cpu:
        clock, threads = time.process_time, 1
    os.environ["OMP_NUM_THREADS"] = str(threads)  # before the first kernel loads libgomp

    import refcomp
    from refcomp.loops.intrin.cpu import describe

    print(f"refcomp {refcomp.__version__} whole-model benchmark, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"ISA: {describe()}; {os.cpu_count()} CPUs, {threads} threads each side, batch 2")
    absent = hf_models.missing()
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        absent = absent or "onnxruntime"
    results: dict[str, dict] = {}
    if absent is not None:
        print(f"every case skipped: {absent} is not installed (pip install torch transformers onnxscript onnxruntime)")
    else:
        header = f"{'model':<20} {'refcomp ms':>11} {'ort ms':>9} {'ratio':>7} {'kernels':>8}  executor"
        print(header)
        print("-" * len(header))
        only = set(args.only.split(",")) if args.only else None
        with tempfile.TemporaryDirectory() as folder:
            for case in cases(args.small):
                if only and case.name not in only:
                    continue
                results[case.name] = run_case(case, folder, threads, args, clock)
        ratios = [r["ratio"] for r in results.values()]
        if ratios:
            print(f"geometric mean of ratios: {math.exp(sum(map(math.log, ratios)) / len(ratios)):.2f}")
    if args.json:
        print(json.dumps({"cases": results}))


def run_case(case: Model, folder: str, threads: int, args, clock) -> dict:
    path, x, reference = export(case, folder)
    theirs = onnxruntime_session(path, threads)
    start = time.perf_counter()
    mine, executor, kernels, ex = refcomp_function(path)
    build_s = time.perf_counter() - start
    expected = theirs(x)
    if not close(expected, reference):
        raise SystemExit(f"{case.name}: onnxruntime disagrees with torch (float64)")
    got = np.asarray(mine(x))
    if not close(got, expected, 1e-4):
        raise SystemExit(f"{case.name}: refcomp disagrees with onnxruntime "
                         f"(max abs difference {float(np.abs(got - expected).max()):.3g})")
    runs = [lambda: mine(x), lambda: theirs(x)]
    variants = []  # (label, callable, kernels, executable): graph.build's other layout choices
    if args.layouts_ab:
        for layouts in (False, True):
            fn, _, count, built = refcomp_function(path, layouts=layouts)
            if not close(np.asarray(fn(x)), expected, 1e-4):
                raise SystemExit(f"{case.name}: refcomp (layouts={layouts}) disagrees with onnxruntime")
            variants.append((f"layouts={layouts}", fn, count, built))
            runs.append(lambda fn=fn: fn(x))
    best = harness.best_times(runs, args.repeat, args.rounds, clock)
    best_mine, best_theirs = best[0], best[1]
    ratio = best_theirs / best_mine
    print(f"{case.name:<20} {best_mine * 1e3:>11.3f} {best_theirs * 1e3:>9.3f} {ratio:>7.2f} "
          f"{kernels if kernels is not None else '-':>8}  {executor} (built in {build_s:.1f} s)", flush=True)
    for (label, _, count, _), seconds in zip(variants, best[2:]):
        print(f"{'  ' + label:<20} {seconds * 1e3:>11.3f} {best_theirs * 1e3:>9.3f} {best_theirs / seconds:>7.2f} "
              f"{count if count is not None else '-':>8}  (the default build: {seconds / best_mine:.2f}x its speed)",
              flush=True)
    if args.profile:
        for label, built in [("default", ex)] + [(label, built) for label, _, _, built in variants]:
            split = profile(built, x)
            if split:
                print(f"    {label}: " + ", ".join(f"{cls} {ms:.2f} ms" for cls, ms in split.items()))
    return {"refcomp": best_mine * 1e3, "baseline": best_theirs * 1e3, "unit": "ms", "ratio": ratio,
            "executor": executor}


if __name__ == "__main__":
    main()
