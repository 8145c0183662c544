"""refcomp's auto-tuner: fp32 matmul from the plain te definition (no recipe) vs numpy (OpenBLAS),
and other operators and two graph models tuned vs their default schedules and vs numpy / torch;
TVM's MetaSchedule side by side when apache-tvm is installed.

    python benchmarks/tune.py [--json] [--size 1024] [--trials 64,256] [--op-trials 32]
                              [--ops conv2d,softmax,layer_norm,bmm_bt] [--small] [--tvm-trials 64,256]
                              [--no-models] [--model-trials 32]
    python benchmarks/tune.py --dask 32 [--json]     # tuning throughput on a local Dask cluster
    python benchmarks/tune.py --gpu [--gpu-trials 32] [--small] [--json]   # the GPU design space vs torch
    python benchmarks/tune.py --tiles [--size 1024] [--single-thread-cpu]  # each fp32 tile's kernel vs numpy

Matmul: one tuning run, one database; the search measures the first budget's trials, the tuned
kernel is timed against numpy, then the search goes on to the next budget.  Cases
`matmul_{size}_t{trials}`: ratio = numpy time / tuned kernel time, with `tuning_s`, the wall time
of the search so far.  Each other operator is tuned with `--op-trials` trials; cases
`{op}_vs_default` (ratio = default schedule time / tuned time) and `{op}_vs_numpy` (or
`_vs_torch`; ratio = their time / tuned time).

With apache-tvm importable, TVM's MetaSchedule tunes the same matmul once for each budget of
`--tvm-trials` (default: every budget of --trials), each a fresh run with its own work directory:
case `vs_tvm_matmul_{size}_t{trials}`, ratio = TVM's tuned time / refcomp's at that budget.  TVM
runs in a separate process (tvm_matmul_isolated), where its kernel is checked and timed as
refcomp's are here (best call of --rounds x --repeat).  Case
`vs_tvm_matmul_{size}_walltime` gives refcomp the wall time TVM spent on its first budget: from
the tuning curves (trial, seconds, best time) of refcomp's search, the best kernel measured by
then is looked up in the database, rebuilt and timed against TVM's kernel of that budget (ratio =
TVM's time / refcomp's).  Without apache-tvm these cases are skipped with a message.

Models (`--models`, on unless `--no-models` or `--model-trials 0`): the MLP and the transformer
block of benchmarks/graph.py, built there with a constant batch / sequence length (the tuner
takes kernels with constant shapes only), are tuned with `refcomp.tune.tune_model` and
`--model-trials` trials, then built with `refcomp.graph.build(mod)` and with
`tuning_database=db`; both are checked against graph.py's numpy versions on fresh random data and
timed in alternating rounds: cases `model_mlp_tuned_vs_default` and
`model_transformer_tuned_vs_default`, ratio = default time / tuned time, with `tuning_s`.

Every search ends with its final comparison (refcomp.tune.final): the best few candidates and the
default schedule re-timed side by side in this process; its line says which won, and the winner is
the kernel timed here.  Every candidate the search measures is checked against the reference on random data in its
worker process; every kernel timed here is checked again against numpy first.  Tuning and
running kernels may interleave in this process: the tuner's children come from a fork server (a
fresh interpreter that never runs a kernel, refcomp.tune.isolate), never from a fork of a
process whose OpenMP threads have started, so the model cases are tuned after the kernels above
have run.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (before numpy: it sets up OpenBLAS, OpenMP and malloc for the timings)

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import refcomp  # noqa: E402
from refcomp import tune, workloads  # noqa: E402
from refcomp.graph.passes.default_schedule import prepare_kernel, schedule_kernel  # noqa: E402
from refcomp.loops import intrin  # noqa: E402
from cuda import time_cuda  # noqa: E402
from matmul import blas_description, cpu_name  # noqa: E402
import graph as graph_benchmark  # noqa: E402  (the models of benchmarks/graph.py)


def _uniform(rng, n: int) -> np.ndarray:
    """An n x n float32 matrix, uniform in [-1, 1), starting on a cache line as the tuner's arrays
    do (tune.runner.ALIGNMENT): where numpy puts an array, 16 bytes apart at random, changed a
    kernel's time by up to 40%."""
    return tune.runner.aligned_copy(rng.uniform(-1, 1, (n, n)).astype("float32"))


def _matmul_reference(arrays):
    arrays[2][...] = arrays[0] @ arrays[1]


def _noop() -> None:
    return None


def _reference_from(baseline):
    """A tuning reference (outputs written in place) from a baseline returning the output."""
    def reference(arrays):
        arrays[-1][...] = np.asarray(baseline(*arrays[:-1]), dtype=arrays[-1].dtype)
    return reference


def dask_scaling(trials: int, as_json: bool) -> None:
    """Trials per minute tuning a 64x64x64 matmul: the local pool, then a LocalCluster of 1, 2 and 4
    worker processes (non-daemonic, as spec/tune_distributed.md advises, so each worker forks its
    candidates from a fork server); the overhead per trial is the 1-worker cluster's extra time over
    a 1-process local pool, and a Dask round trip is one empty task.  Each configuration runs in a
    fresh process with an empty build cache of its own, so none reuses another's compiled
    candidates.  The cores are shared by the search, the builds and the measurements, so on a small
    machine more workers add little."""
    import distributed

    print(f"machine: {intrin.cpu.describe()}, {os.cpu_count()} CPUs; dask distributed {distributed.__version__}")

    def run(config: str) -> dict:
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, REFCOMP_CACHE_DIR=cache)
            done = subprocess.run([sys.executable, os.path.abspath(__file__), "--dask", str(trials),
                                   "--dask-run", config], env=env, capture_output=True, text=True, timeout=3600)
        if done.returncode != 0:
            raise SystemExit(f"the {config} run failed:\n{done.stdout}\n{done.stderr}")
        return json.loads(done.stdout.strip().splitlines()[-1])

    local = run("local")["minutes"]
    local_serial = run("local1")["minutes"]
    print(f"local pool (2 build processes): {trials / local:7.1f} trials/min; "
          f"1 build process: {trials / local_serial:7.1f} trials/min")
    cases = {}
    for workers in (1, 2, 4):
        outcome = run(str(workers))
        spent, round_trip_ms = outcome["minutes"], outcome["round_trip_ms"]
        rate = trials / spent
        case = {"refcomp": round(rate, 1), "baseline": round(trials / local, 1), "unit": "trials/min",
                "ratio": round(local / spent, 3), "round_trip_ms": round(round_trip_ms, 1)}
        line = f"dask, {workers} worker(s): {rate:7.1f} trials/min  ratio to local {local / spent:5.2f}"
        if workers == 1:
            overhead = (spent - local_serial) * 60e3 / trials
            case["overhead_ms_per_trial"] = round(overhead, 1)
            line += f"  overhead {overhead:7.1f} ms/trial over a 1-process local pool"
        print(line + f"  (Dask round trip {round_trip_ms:.1f} ms)", flush=True)
        cases[f"dask_{workers}_workers"] = case
    if as_json:
        print(json.dumps({"cases": cases}))


def dask_run(trials: int, config: str) -> None:
    """One configuration of dask_scaling in this process: "local" (the pool), "local1" (one build
    process) or a number of Dask workers; prints {"minutes": ..., "round_trip_ms": ...}."""
    func = workloads.matmul(64, 64, 64)
    settings = dict(trials=trials, batch=8, population=16, generations=1, seed=0, reference=_matmul_reference)

    def minutes(runner) -> float:
        # a warm-up on another workload first: process pools, fork servers and imports start there
        tune.tune(workloads.matmul(16, 16, 16), "c", runner=runner, trials=2, batch=2, population=4,
                  reference=_matmul_reference)
        start = time.monotonic()
        result = tune.tune(func, "c", runner=runner, **settings)
        assert result.schedule is not None, "no candidate passed the check"
        return (time.monotonic() - start) / 60.0

    if config in ("local", "local1"):
        print(json.dumps({"minutes": minutes(tune.Runner(workers=1) if config == "local1" else tune.Runner()),
                          "round_trip_ms": 0.0}))
        return
    import dask
    import distributed

    with dask.config.set({"distributed.worker.daemon": False}), \
            distributed.LocalCluster(n_workers=int(config), processes=True, threads_per_worker=1,
                                     dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        spent = minutes(client)
        start = time.monotonic()
        for _ in range(20):
            client.submit(_noop, pure=False).result()
        round_trip_ms = (time.monotonic() - start) / 20 * 1e3
    print(json.dumps({"minutes": spent, "round_trip_ms": round_trip_ms}))


def _softmax(a):
    e = np.exp(a - a.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _layer_norm(a, eps=1e-5):
    mean = a.mean(axis=1, keepdims=True)
    return (a - mean) / np.sqrt(((a - mean) ** 2).mean(axis=1, keepdims=True) + eps)


def _conv_torch():
    try:
        import torch
    except ImportError:
        return None, "numpy"
    torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", os.cpu_count() or 1))))
    return (lambda x, w: torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1).numpy()), \
        "torch"


def _conv_numpy(x, w):
    n, c, h, _ = x.shape
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, w.shape[0], h, h), dtype=x.dtype)
    for ky in range(3):
        for kx in range(3):
            out += np.einsum("nchw,fc->nfhw", padded[:, :, ky:ky + h, kx:kx + h], w[:, :, ky, kx], optimize=True)
    return out


def operator_cases(small: bool):
    """(name, PrimFunc, numpy-or-torch function of the inputs, its label) for the operator cases."""
    conv, conv_label = _conv_torch()
    size = 256 if small else 1024
    cases = {
        "conv2d": (workloads.conv2d_nchw(1, 16, 14, 16) if small else workloads.conv2d_nchw(1, 64, 56, 64),
                   conv or _conv_numpy, conv_label),
        "softmax": (workloads.softmax(size, size), _softmax, "numpy"),
        "layer_norm": (workloads.layer_norm(size, size), _layer_norm, "numpy"),
        "bmm_bt": (workloads.batch_matmul_bt(4, 64, 64, 32) if small else workloads.batch_matmul_bt(12, 384, 384, 64),
                   lambda a, b: a @ b.transpose(0, 2, 1), "numpy"),
    }
    return cases


def _inputs(func, rng):
    arrays = tune.runner.random_arguments(func, int(rng.integers(2**31)))
    return arrays


def _llvm_cpu(tvm) -> str:
    """LLVM's name for this CPU (what -mcpu=native would pick)."""
    for name in ("tvm.codegen.llvm.GetHostCPUName", "codegen.llvm.GetHostCPUName"):  # TVM 0.27; older
        try:
            return str(tvm.get_global_func(name)())
        except Exception:
            continue
    return "native"


def tvm_matmul_isolated(n: int, trials: int, repeat: int, rounds: int):
    """tvm_matmul in a fresh interpreter with a fresh work directory, so that TVM's thread pool
    (its threads pinned to cores by default) never shares a process with numpy's OpenBLAS and
    refcomp's OpenMP pools: in one check, numpy's 128 x 128 matmul took 8 ms instead of 30 us
    after a TVM kernel had run in the same process.  TVM_NUM_THREADS defaults to the core count."""
    import concurrent.futures
    import multiprocessing

    os.environ.setdefault("TVM_NUM_THREADS", str(os.cpu_count() or 1))  # the child reads it when TVM loads
    try:
        with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            return pool.submit(tvm_matmul, n, trials, repeat, rounds).result()
    except Exception as error:  # TVM failed, or its process died: the case is skipped, the rest goes on
        return None, f"TVM's run failed ({type(error).__name__}: {str(error).strip().splitlines()[-1:]})"


def tvm_matmul(n: int, trials: int, repeat: int, rounds: int):
    """TVM MetaSchedule's tuned time for the n x n x n fp32 matmul (checked against numpy, then
    the best call of `rounds` x `repeat`, as refcomp's kernels are timed) and its tuning wall time,
    or None and the reason when apache-tvm is not importable."""
    import tempfile

    try:
        import tvm
        from tvm import te as tvm_te
        try:
            from tvm.s_tir import meta_schedule as ms  # TVM 0.27 and later
        except ImportError:
            from tvm import meta_schedule as ms
    except Exception as error:  # not installed, or a broken install
        return None, f"apache-tvm is not importable ({type(error).__name__}: {error})"
    a = tvm_te.placeholder((n, n), "float32", name="A")
    b = tvm_te.placeholder((n, n), "float32", name="B")
    k = tvm_te.reduce_axis((0, n), name="k")
    c = tvm_te.compute((n, n), lambda i, j: tvm_te.sum(a[i, k] * b[k, j], axis=k), name="C")
    mod = tvm.IRModule({"main": tvm_te.create_prim_func([a, b, c])})
    threads = int(os.environ.get("TVM_NUM_THREADS", os.cpu_count() or 1))
    try:  # TVM 0.27 takes a target as a dict; older ones as a command-line string
        target = tvm.target.Target({"kind": "llvm", "mcpu": _llvm_cpu(tvm), "num-cores": threads})
    except Exception:
        target = tvm.target.Target(f"llvm -mcpu=native -num-cores {threads}")
    start = time.monotonic()
    # builds get more than the default 30 s: on a busy machine TVM's builder processes start slowly
    with tempfile.TemporaryDirectory(prefix="refcomp-tvm-") as work_dir:  # a fresh search per budget
        database = ms.tune_tir(mod, target, work_dir=work_dir, max_trials_global=trials,
                               num_trials_per_iter=min(16, trials), builder=ms.builder.LocalBuilder(timeout_sec=300))
        sch = ms.tir_integration.compile_tir(database, mod, target)
    spent = time.monotonic() - start
    if sch is None:
        return None, "TVM found no valid schedule"
    lib = tvm.compile(sch.mod, target=target) if hasattr(tvm, "compile") else tvm.build(sch.mod, target=target)
    dev = tvm.cpu()
    array = tvm.runtime.tensor if hasattr(tvm.runtime, "tensor") else tvm.nd.array
    rng = np.random.default_rng()
    an, bn = rng.uniform(-1, 1, (n, n)).astype("float32"), rng.uniform(-1, 1, (n, n)).astype("float32")
    at, bt, ct = array(an, dev), array(bn, dev), array(np.zeros((n, n), "float32"), dev)
    lib["main"](at, bt, ct)
    np.testing.assert_allclose(ct.numpy(), an @ bn, rtol=1e-3, atol=1e-3 * np.sqrt(n))
    main = lib["main"]
    (best,) = harness.best_times([lambda: main(at, bt, ct)], repeat, rounds)
    return (best, spent), ""


def model_cases(small: bool) -> dict:
    """(graph module, weight shapes, input shape, numpy version) of graph.py's two models, with a
    constant batch / sequence length; graph.py's default sizes, or small ones."""
    g = graph_benchmark
    hidden, heads, batch, seq = (64, 4, 32, 16) if small else (1024, 16, 256, 512)
    mlp, mlp_shapes = g.mlp(hidden, 4 * hidden, 2, batch=batch)
    block, block_shapes = g.transformer_block(hidden, heads, seq=seq)
    return {"mlp": (mlp, mlp_shapes, (batch, hidden), g.mlp_numpy),
            "transformer": (block, block_shapes, (seq, hidden), lambda x, *w: g.transformer_numpy(heads, x, *w))}


def _model_runner(ex, arrays):
    """A call of the executable's main: the compiled graph function where there is one, else the VM."""
    compiled = ex.compiled.get("main")
    if compiled is not None:
        return lambda: compiled(*arrays)
    vm = refcomp.runtime.VirtualMachine(ex)
    return lambda: vm["main"](*arrays)


def run_models(args, rng) -> dict:
    """The model cases: tune_model with --model-trials, graph.build with and without the records,
    both checked against numpy on fresh random data, then timed in alternating rounds."""
    from refcomp.runtime.blas import register_blas

    blas = register_blas()  # what graph.build(mod) does by default on the C target
    results = {}
    for name, (mod, weight_shapes, input_shape, reference) in model_cases(args.small).items():
        case = f"model_{name}_tuned_vs_default"
        database = tune.Database()
        tasks = tune.extract_tasks(mod, blas=blas)
        print(f"{case}: {len(tasks)} tasks: " + ", ".join(f"{t.name} (x{t.weight})" for t in tasks[:6])
              + (", ..." if len(tasks) > 6 else ""), flush=True)
        bar = tune.ProgressBar(stream=sys.stdout, label=f"model_{name}", in_place=False)
        start = time.monotonic()
        # rounds small enough that every task gets one before the budget runs out
        batch = max(2, min(16, args.model_trials // max(1, len(tasks))))
        report = tune.tune_model(mod, trials=args.model_trials, database=database, blas=blas, tasks=tasks,
                                 batch=batch, seed=int(rng.integers(2**20)),
                                 progress=lambda done, total, task, gflops, seconds: bar(done, total, gflops, seconds),
                                 log=bar.note)
        spent = time.monotonic() - start
        default_ex = refcomp.graph.build(mod)
        tuned_ex = refcomp.graph.build(mod, tuning_database=database)
        x = rng.uniform(-1, 1, input_shape).astype("float32")
        weights = [(rng.uniform(-1, 1, s) / np.sqrt(s[-1])).astype("float32") for s in weight_shapes]
        want = reference(x, *weights)
        runs = {}
        for which, ex in (("tuned", tuned_ex), ("default", default_ex)):
            run = _model_runner(ex, [x] + weights)
            got = np.asarray(run())
            error = float(np.max(np.abs(got - want)) / (np.max(np.abs(want)) + 1e-30))
            if not error < 1e-3:
                raise SystemExit(f"{case}: the {which} build disagrees with numpy (max relative error {error:.2e})")
            runs[which] = run
        # call by call, in alternating order: a model call lasts 0.1-0.3 s, and blocks of calls let a
        # burst of other jobs fall on one side (0.8x one run, 1.2x the next, with equal kernels)
        t_tuned, t_default = harness.interleaved_best_times([runs["tuned"], runs["default"]],
                                                            2 * args.repeat * args.rounds, args.clock)
        failures = sum(r.failures for r in report.tasks)
        results[case] = {"refcomp": round(t_tuned * 1e3, 4), "baseline": round(t_default * 1e3, 4), "unit": "ms",
                         "ratio": round(t_default / t_tuned, 3), "tuning_s": round(spent, 1),
                         "trials": report.trials, "tasks": len(tasks),
                         "tuned_kernels": tuned_ex.stats["tuned_kernels"], "failures": failures}
        print(f"{case:<36} tuned {t_tuned * 1e3:9.3f} ms  default {t_default * 1e3:9.3f} ms  "
              f"ratio {t_default / t_tuned:5.2f}  ({report.trials} trials over {len(tasks)} tasks, "
              f"{tuned_ex.stats['tuned_kernels']} tuned kernels, {spent:5.1f} s, rejected {failures})", flush=True)
    return results


def refcomp_at(seconds: float, tuned: list) -> tuple[float, int, float]:
    """The best time refcomp's matmul search had measured `seconds` into its wall time, its trials
    and its wall time at that measurement, from the tuning curves of its successive budgets:
    `tuned` holds (budget, TuneResult, tuning seconds so far) per budget; a curve's seconds count
    from its own call's start, offset here by the wall time of the calls before it.  When the
    search ended sooner, its last point; (inf, 0, 0.0) when nothing was measured by then."""
    best, trials_at, seconds_at, offset, done = float("inf"), 0, 0.0, 0.0, 0
    for budget, result, spent in tuned:
        for trial, at, best_time in result.curve:
            if offset + at > seconds:
                return best, trials_at, seconds_at
            best, trials_at, seconds_at = best_time, done + trial, offset + at
        offset, done = spent, budget
    return best, trials_at, seconds_at


def equal_wall_time_case(func, database, tuned, tvm_trials: int, tvm_outcome, a, b, rng, args) -> dict | None:
    """Case vs_tvm_matmul_{n}_walltime: refcomp's best kernel measured within the wall time TVM spent
    on `tvm_trials` trials (looked up in the database by its time), checked and timed here, vs TVM's
    kernel of that budget."""
    n = a.shape[0]
    name = f"vs_tvm_matmul_{n}_walltime"
    tvm_time, tvm_spent = tvm_outcome
    best, trials_at, seconds_at = refcomp_at(tvm_spent, tuned)
    records = database.query(tuned[0][1].workload, tuned[0][1].target)
    if best == float("inf") or not records:
        print(f"{name}: skipped: refcomp had no checked kernel within TVM's {tvm_spent:.1f} s")
        return None
    record = min(records, key=lambda r: abs(r.mean_time - best))
    kernel = refcomp.build(tune.replay(func, record).func)
    c = _uniform(rng, n)
    kernel(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-3, atol=1e-3 * np.sqrt(n))
    (ours,) = harness.best_times([lambda: kernel(a, b, c)], args.repeat, args.rounds)
    flops = 2.0 * n ** 3
    print(f"{name:<24} refcomp {flops / ours / 1e9:8.1f} GFLOP/s  TVM {flops / tvm_time / 1e9:8.1f} GFLOP/s  "
          f"ratio {tvm_time / ours:5.2f}  within TVM's {tvm_spent:.1f} s ({tvm_trials} trials): refcomp's best "
          f"after {trials_at} trials, {seconds_at:.1f} s", flush=True)
    return {"refcomp": round(flops / ours / 1e9, 2), "baseline": round(flops / tvm_time / 1e9, 2), "unit": "GFLOP/s",
            "ratio": round(tvm_time / ours, 3), "wall_s": round(tvm_spent, 1), "trials": trials_at,
            "tuning_s": round(seconds_at, 1), "baseline_trials": tvm_trials}


def _gpu_matmul_reference(arrays):
    arrays[2][...] = arrays[0].astype("float32") @ arrays[1].astype("float32")


def _gpu_softmax_reference(arrays):
    a = arrays[0].astype("float64")
    e = np.exp(a - a.max(1, keepdims=True))
    arrays[1][...] = e / e.sum(1, keepdims=True)


def _fp16_matmul(n):
    A = refcomp.te.placeholder((n, n), "float16", name="A")
    B = refcomp.te.placeholder((n, n), "float16", name="B")
    k = refcomp.te.reduce_axis((0, n), name="k")
    C = refcomp.te.compute((n, n), lambda i, j: refcomp.te.sum(
        A[i, k].astype("float32") * B[k, j].astype("float32"), axis=k), name="C")
    return refcomp.te.create_prim_func([A, B, C])


def gpu_cases(args) -> None:
    """The CUDA design space on the GPU at hand: fp32 matmul, fp16 matmul (float32 accumulation)
    and row softmax, each tuned from its plain te definition with `--gpu-trials` trials, then timed
    with CUDA events against torch (cuBLAS / cuDNN) on the same device.  Cases `gpu_{op}`: ratio =
    torch time / tuned time, with `tuning_s`.  Without a CUDA device, nvcc or torch built for CUDA
    it prints why and skips (the JSON line then has no cases and a `skipped` reason)."""
    from refcomp.runtime.cuda_library import cuda_device_count

    n, rows, cols = (256, 256, 1024) if args.small else (args.size, 4096, 1024)
    print(f"host: {cpu_name()}, ISA {intrin.cpu.describe()}")
    reason = ""
    if cuda_device_count() == 0:
        reason = "no CUDA device on this machine"
    else:
        try:
            from refcomp.emit_cuda.toolchain import nvcc

            nvcc()
            import torch

            if not torch.cuda.is_available():
                reason = "torch has no CUDA device"
        except (refcomp.BuildError, ImportError) as err:
            reason = f"{type(err).__name__}: {err}"
    if reason:
        print(f"GPU tuning cases skipped: {reason}")
        if args.json:
            print(json.dumps({"cases": {}, "skipped": reason}))
        return
    print(f"refcomp {refcomp.__version__} GPU tuning benchmark on {torch.cuda.get_device_name(0)}; "
          f"host ISA {intrin.cpu.describe()}")
    cases = {
        f"gpu_matmul_fp32_{n}": (workloads.matmul(n, n, n), _gpu_matmul_reference, 2.0 * n ** 3,
                                 lambda a, b: a @ b),
        f"gpu_matmul_fp16_{n}": (_fp16_matmul(n), _gpu_matmul_reference, 2.0 * n ** 3,
                                 lambda a, b: (a @ b).float()),
        f"gpu_softmax_{rows}x{cols}": (workloads.softmax(rows, cols), _gpu_softmax_reference, 8.0 * rows * cols,
                                       lambda a: torch.softmax(a, dim=1)),
    }
    tuned = {}
    for name, (func, reference, _, _) in cases.items():  # every search before any kernel runs here
        bar = tune.ProgressBar(stream=sys.stdout, label=name, in_place=False)
        start = time.monotonic()
        result = tune.tune(func, "cuda", trials=args.gpu_trials, reference=reference, seed=1, progress=bar,
                           batch=min(16, args.gpu_trials), population=16)
        tuned[name] = (result, time.monotonic() - start)
        for failure in result.failures[:3]:
            print(f"  rejected ({failure.result.status}): {failure.result.message.strip().splitlines()[-1:]}")
    results = {}
    for name, (func, _, work, baseline) in cases.items():
        result, spent = tuned[name]
        if result.schedule is None:
            print(f"{name}: no candidate passed the check")
            continue
        lib = refcomp.build(result.schedule.func, target="cuda")
        dtype = torch.float16 if "fp16" in name else torch.float32
        inputs = [torch.rand(*[int(d) for d in p.shape], device="cuda", dtype=dtype) * 2 - 1
                  for p in func.buffers[:-1]]
        out = torch.full([int(d) for d in func.buffers[-1].shape], 7.0, device="cuda")
        lib(*inputs, out)
        want = baseline(*inputs).float()
        scale = float(want.abs().max())
        assert torch.allclose(out, want, rtol=2e-3, atol=2e-3 * max(scale, 1.0)), f"{name}: wrong result"
        ours = time_cuda(torch, lambda: lib(*inputs, out))
        theirs = time_cuda(torch, lambda: baseline(*inputs))
        results[name] = {"refcomp": round(work / ours / 1e6, 2), "baseline": round(work / theirs / 1e6, 2),
                         "unit": "GFLOP/s" if "matmul" in name else "GB/s",
                         "ratio": round(theirs / ours, 3), "tuning_s": round(spent, 1), "trials": result.trials}
        print(f"{name:<26} refcomp {ours:8.3f} ms  torch {theirs:8.3f} ms  ratio {theirs / ours:5.2f}  "
              f"({result.trials} trials, {spent:5.1f} s)", flush=True)
    if args.json:
        print(json.dumps({"cases": results}))


def tile_cases(n: int, args) -> dict:
    """Each fp32 tile intrinsic TensorizeTiling offers for an n x n x n matmul, in the rule's
    default structure (the recipe's MC, NC and KC for that tile, B packed per thread block, A in
    place; a tile with an unrolled form in both forms), against numpy: the kernel alone, every
    side checked first, timed call by call in alternation (`interleaved_best_times`). Cases
    `tile_{intrinsic run}_{n}`, ratio = numpy time / kernel time."""
    func = workloads.matmul(n, n, n)
    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    a = _uniform(rng, n)
    b = _uniform(rng, n)
    want = a @ b
    from refcomp.ast import Block, collect
    from refcomp.loops.recipes.common import matmul_shape
    from refcomp.loops.schedule import Schedule
    from refcomp.tune.rules import tile_intrinsics

    sch = Schedule(func)
    block = sch.get(sch.get_block("C"))
    names = tile_intrinsics(block, matmul_shape(block, "tile_cases"))
    fns, labels = [lambda: np.matmul(a, b)], ["numpy"]
    # a tile with an unrolled form (the AVX-512 6 x 64 one) twice: the rule's default takes the
    # unrolled form, unrolled_forms=False the tile as named (its k loop prefetching B)
    rules = [tune.TensorizeTiling(intrinsics=(name,), unrolled_forms=unrolled) for name in names
             for unrolled in ((True, False) if intrin.x86.unrolled_form(name) else (True,))]
    for rule in rules:
        sch = tune.DesignSpace([rule]).default_sample(func)
        name = next(iter({blk.annotations["tensorized"] for blk in collect(sch.func.body, Block)
                          if "tensorized" in blk.annotations}))
        kernel = refcomp.build(sch.func)
        c = _uniform(rng, n)
        kernel(a, b, c)
        np.testing.assert_allclose(c, want, rtol=1e-3, atol=1e-3 * np.sqrt(n))
        fns.append(lambda kernel=kernel, c=c: kernel(a, b, c))
        labels.append(name)
    times = harness.interleaved_best_times(fns, 2 * args.repeat * args.rounds, args.clock)
    flops, results = 2.0 * n ** 3, {}
    for name, t in zip(labels[1:], times[1:]):
        results[f"tile_{name}_{n}"] = {"refcomp": round(flops / t / 1e9, 2), "baseline": round(flops / times[0] / 1e9, 2),
                                       "unit": "GFLOP/s", "ratio": round(times[0] / t, 3)}
        print(f"tile {name:<28} {flops / t / 1e9:8.1f} GFLOP/s  numpy {flops / times[0] / 1e9:8.1f} GFLOP/s  "
              f"ratio {times[0] / t:5.3f}", flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print a JSON summary as the last line")
    parser.add_argument("--size", type=int, default=1024, help="matmul size n (n x n times n x n)")
    parser.add_argument("--trials", default="64,256", help="comma-separated cumulative trial budgets")
    parser.add_argument("--op-trials", type=int, default=32, help="trials for each other operator (0: none)")
    parser.add_argument("--ops", default="conv2d,softmax,layer_norm,bmm_bt", help="the other operators")
    parser.add_argument("--small", action="store_true", help="small operator sizes (a quick check that it runs)")
    parser.add_argument("--tvm-trials", default=None,
                        help="comma-separated budgets TVM tunes, each among --trials (default: all of them; 0: no TVM)")
    parser.add_argument("--models", action=argparse.BooleanOptionalAction, default=True,
                        help="tune graph.py's MLP and transformer block (default: on)")
    parser.add_argument("--model-trials", type=int, default=32, help="trials for each model (0: no model cases)")
    parser.add_argument("--single-thread-cpu", action="store_true",
                        help="one thread (kernels, OpenBLAS, the tuner's workers), timed by process CPU time: "
                             "steady on a busy machine")
    parser.add_argument("--repeat", type=int, default=5, help="calls per timing round")
    parser.add_argument("--rounds", type=int, default=3, help="alternating timing rounds")
    parser.add_argument("--database", default=None, help="JSON-lines file for the records (default: memory)")
    parser.add_argument("--dask-run", default=None, help=argparse.SUPPRESS)  # one configuration of --dask
    parser.add_argument("--dask", type=int, default=0, metavar="N",
                        help="instead: trials per minute of N trials on 1, 2 and 4 local Dask workers")
    parser.add_argument("--tiles", action="store_true",
                        help="only: each fp32 tile intrinsic's default TensorizeTiling schedule vs numpy")
    parser.add_argument("--gpu", action="store_true",
                        help="instead: the CUDA design space on this machine's GPU vs torch (skips without one)")
    parser.add_argument("--gpu-trials", type=int, default=32, help="trials for each GPU case")
    args = parser.parse_args()
    args.clock = time.perf_counter
    if args.single_thread_cpu:
        # before the first kernel library loads (libgomp reads OMP_NUM_THREADS when it starts) and
        # before the tuner's fork server starts, so its workers measure one thread too
        os.environ["OMP_NUM_THREADS"] = "1"
        os.environ["REFCOMP_TUNE_CLOCK"] = "cpu"  # the tuner's workers and final comparison: CPU time too
        args.clock = time.process_time
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)
    if args.gpu:
        return gpu_cases(args)
    if args.dask and args.dask_run:
        return dask_run(args.dask, args.dask_run)
    if args.dask:
        return dask_scaling(args.dask, args.json)
    budgets = sorted(int(t) for t in args.trials.split(",") if int(t) > 0)  # --trials 0: no matmul cases
    if args.tvm_trials is None:
        tvm_budgets = budgets
    else:
        tvm_budgets = sorted({int(t) for t in args.tvm_trials.split(",") if int(t) > 0})
        if any(t not in budgets for t in tvm_budgets):
            parser.error(f"--tvm-trials {args.tvm_trials}: each TVM budget must be one of --trials {args.trials}")
    n = args.size
    print(f"refcomp {refcomp.__version__} tuning benchmark, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"machine: {cpu_name()}, {os.cpu_count()} CPUs, ISA {intrin.cpu.describe()}; intrinsics this CPU runs: "
          f"{', '.join(intrin.names(available_only=True))}")
    print("timing: " + ("1 thread, process CPU time" if args.single_thread_cpu else
                        f"{os.cpu_count()} threads, wall time"))
    print(f"numpy {np.__version__}: {blas_description()}; cost model: "
          f"{'xgboost' if tune.xgboost_available() else 'ridge regression (xgboost not installed)'}")
    if args.tiles:
        results = tile_cases(n, args)
        if args.json:
            print(json.dumps({"cases": results}))
        return
    func = workloads.matmul(n, n, n)
    database = tune.Database(args.database)
    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    a = _uniform(rng, n)
    b = _uniform(rng, n)
    tuned, tuning_s, done = [], 0.0, 0
    # from the plain definition: without the graph's own default schedule, which is the matmul recipe
    no_recipe = tune.DesignSpace([rule for rule in tune.default_rules("c") if not isinstance(rule, tune.GraphDefault)])
    for budget in budgets:
        start = time.monotonic()
        bar = tune.ProgressBar(stream=sys.stdout, label=f"matmul_{n}", in_place=False)
        progress = lambda trials, total, gflops, elapsed: bar(done + trials, budget, gflops, elapsed)  # noqa: E731
        result = tune.tune(func, "c", trials=budget - done, database=database, reference=_matmul_reference,
                           seed=budget, progress=progress, space=no_recipe, log=bar.note)
        tuning_s += time.monotonic() - start
        done = budget
        for failure in result.failures[:3]:
            print(f"  rejected ({failure.result.status}): {failure.result.message.strip().splitlines()[-1:]}")
        tuned.append((budget, result, tuning_s))
    ops = {}
    wanted = [o for o in args.ops.split(",") if o] if args.op_trials > 0 else []
    for name, (op_func, baseline, label) in operator_cases(args.small).items():
        if name not in wanted:
            continue
        bar = tune.ProgressBar(stream=sys.stdout, label=name, in_place=False)
        start = time.monotonic()
        # the design space starts from graph.build's default schedule (tune.GraphDefault); the
        # baseline computes the reference outputs (the interpreter took minutes on bmm_bt)
        op_result = tune.tune(prepare_kernel(op_func), "c", trials=args.op_trials, database=database, seed=7,
                              progress=bar, log=bar.note, reference=_reference_from(baseline))
        ops[name] = (op_func, baseline, label, op_result, time.monotonic() - start)
    tvm, tvm_skipped = {}, []  # budget -> (TVM's kernel time, its tuning time); (budget, why) skipped
    for trials in tvm_budgets:
        outcome, reason = tvm_matmul_isolated(n, trials, args.repeat, args.rounds)
        if outcome is None:
            tvm_skipped.append((trials, reason))
        else:
            tvm[trials] = outcome
    results = {}
    flops = 2.0 * n ** 3
    for budget, result, spent in tuned:
        name = f"matmul_{n}_t{budget}"
        if result.schedule is None:
            print(f"{name}: no candidate passed the check")
            continue
        kernel = refcomp.build(result.schedule.func)
        c = _uniform(rng, n)
        kernel(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-3, atol=1e-3 * np.sqrt(n))
        ours, theirs = harness.best_times([lambda: kernel(a, b, c), lambda: a @ b], args.repeat, args.rounds,
                                          args.clock)
        results[name] = {"refcomp": round(flops / ours / 1e9, 2), "baseline": round(flops / theirs / 1e9, 2),
                         "unit": "GFLOP/s", "ratio": round(theirs / ours, 3), "tuning_s": round(spent, 1),
                         "failures": len(result.failures)}
        print(f"{name:<24} refcomp {flops / ours / 1e9:8.1f} GFLOP/s  numpy {flops / theirs / 1e9:8.1f} GFLOP/s  "
              f"ratio {theirs / ours:5.2f}  tuning {spent:6.1f} s  rejected {len(result.failures)}", flush=True)
        if budget in tvm:
            tvm_time, tvm_spent = tvm[budget]
            results[f"vs_tvm_matmul_{n}_t{budget}"] = {
                "refcomp": round(flops / ours / 1e9, 2), "baseline": round(flops / tvm_time / 1e9, 2),
                "unit": "GFLOP/s", "ratio": round(tvm_time / ours, 3), "tuning_s": round(spent, 1),
                "baseline_tuning_s": round(tvm_spent, 1)}
            print(f"{'vs_tvm_matmul_' + str(n) + '_t' + str(budget):<24} refcomp {flops / ours / 1e9:8.1f} GFLOP/s  "
                  f"TVM {flops / tvm_time / 1e9:8.1f} GFLOP/s  ratio {tvm_time / ours:5.2f}  "
                  f"tuning {spent:6.1f} s vs {tvm_spent:6.1f} s", flush=True)
    for trials, reason in tvm_skipped:
        print(f"vs_tvm_matmul_{n}_t{trials}: skipped: {reason} "
              f"(pip install 'apache-tvm==0.27.*' apache-tvm-ffi==0.1.14.post0; TVM_NUM_THREADS={os.cpu_count()})")
    if tvm_budgets and tvm_budgets[0] in tvm:
        walltime = equal_wall_time_case(func, database, tuned, tvm_budgets[0], tvm[tvm_budgets[0]], a, b, rng, args)
        if walltime is not None:
            results[f"vs_tvm_matmul_{n}_walltime"] = walltime
    elif tvm_budgets:
        print(f"vs_tvm_matmul_{n}_walltime: skipped: TVM did not tune its first budget ({tvm_budgets[0]} trials)")
    for name, (op_func, baseline, label, op_result, spent) in ops.items():
        if op_result.schedule is None:
            print(f"{name}: no candidate passed the check")
            continue
        arrays = _inputs(op_func, rng)
        want = baseline(*arrays[:-1])
        tuned_kernel = refcomp.build(op_result.schedule.func)
        default_kernel = refcomp.build(schedule_kernel(op_func))
        outs = {}
        for which, kernel in (("tuned", tuned_kernel), ("default", default_kernel)):
            out = tune.runner.aligned_copy(np.full_like(arrays[-1], 7.0))  # on a cache line, as the tuner's
            kernel(*arrays[:-1], out)
            np.testing.assert_allclose(out, want, rtol=1e-3, atol=1e-3 * max(1.0, float(np.abs(want).max())))
            outs[which] = out
        ins = arrays[:-1]
        t_tuned, t_default, t_base = harness.interleaved_best_times(
            [lambda: tuned_kernel(*ins, outs["tuned"]), lambda: default_kernel(*ins, outs["default"]),
             lambda: baseline(*ins)], 2 * args.repeat * args.rounds, args.clock)
        results[f"{name}_vs_default"] = {"refcomp": round(t_tuned * 1e3, 4), "baseline": round(t_default * 1e3, 4),
                                         "unit": "ms", "ratio": round(t_default / t_tuned, 3),
                                         "tuning_s": round(spent, 1), "trials": op_result.trials}
        results[f"{name}_vs_{label}"] = {"refcomp": round(t_tuned * 1e3, 4), "baseline": round(t_base * 1e3, 4),
                                         "unit": "ms", "ratio": round(t_base / t_tuned, 3)}
        print(f"{name:<24} tuned {t_tuned * 1e3:9.3f} ms  default {t_default * 1e3:9.3f} ms  {label} "
              f"{t_base * 1e3:9.3f} ms  vs default {t_default / t_tuned:5.2f}  vs {label} {t_base / t_tuned:5.2f}  "
              f"({op_result.trials} trials, {spent:5.1f} s)", flush=True)
    if args.models and args.model_trials > 0:
        results.update(run_models(args, rng))
    if args.json:
        print(json.dumps({"cases": results}))


if __name__ == "__main__":
    main()
