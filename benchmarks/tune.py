"""refcomp's auto-tuner on fp32 matmul from the plain te definition (no recipe) vs numpy (OpenBLAS).

    python benchmarks/tune.py [--json] [--size 1024] [--trials 64,256] [--repeat 5] [--rounds 3]
    python benchmarks/tune.py --dask 32 [--json]     # tuning throughput on a local Dask cluster

One tuning run, one database: the search measures the first budget's trials, the tuned kernel
is timed against numpy, then the search goes on to the next budget.  Every candidate the search
measures is checked against numpy on random data in its worker process; the tuned kernel is
checked again here before it is timed.  Cases: `matmul_{size}_t{trials}` with ratio = numpy time
/ tuned kernel time (> 1: refcomp faster) and `tuning_s`, the wall time of the search so far.
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

import refcomp  # noqa: E402
from refcomp import tune, workloads  # noqa: E402
from refcomp.loops import intrin  # noqa: E402
from matmul import blas_description, cpu_name  # noqa: E402


def _reference(arrays):
    arrays[2][...] = arrays[0] @ arrays[1]


def _noop() -> None:
    return None


def dask_scaling(trials: int, as_json: bool) -> None:
    """Trials per minute tuning a 64x64x64 matmul: the local pool, then a LocalCluster of 1, 2 and 4
    worker processes (non-daemonic, as spec/tune_distributed.md advises, so each worker forks its
    candidates from a fork server); the overhead per trial is the 1-worker cluster's extra time over
    a 1-process local pool, and a Dask round trip is one empty task.  The cores are shared by the
    search, the builds and the measurements, so on a small machine more workers add little."""
    import dask
    import distributed

    print(f"machine: {intrin.cpu.describe()}, {os.cpu_count()} CPUs; dask distributed {distributed.__version__}")
    func = workloads.matmul(64, 64, 64)
    settings = dict(trials=trials, batch=8, population=16, generations=1, seed=0, reference=_reference)

    def minutes(runner) -> float:
        start = time.monotonic()
        result = tune.tune(func, "c", runner=runner, **settings)
        assert result.schedule is not None, "no candidate passed the check"
        return (time.monotonic() - start) / 60.0

    local = minutes(tune.Runner())
    local_serial = minutes(tune.Runner(workers=1))
    print(f"local pool (2 build processes): {trials / local:7.1f} trials/min")
    cases = {}
    for workers in (1, 2, 4):
        with dask.config.set({"distributed.worker.daemon": False}), \
                distributed.LocalCluster(n_workers=workers, processes=True, threads_per_worker=1,
                                         dashboard_address=None) as cluster, distributed.Client(cluster) as client:
            spent = minutes(client)
            start = time.monotonic()
            for _ in range(20):
                client.submit(_noop, pure=False).result()
            round_trip_ms = (time.monotonic() - start) / 20 * 1e3
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print a JSON summary as the last line")
    parser.add_argument("--size", type=int, default=1024, help="matmul size n (n x n times n x n)")
    parser.add_argument("--trials", default="64,256", help="comma-separated cumulative trial budgets")
    parser.add_argument("--repeat", type=int, default=5, help="calls per timing round")
    parser.add_argument("--rounds", type=int, default=3, help="alternating timing rounds")
    parser.add_argument("--database", default=None, help="JSON-lines file for the records (default: memory)")
    parser.add_argument("--dask", type=int, default=0, metavar="N",
                        help="instead: trials per minute of N trials on 1, 2 and 4 local Dask workers")
    args = parser.parse_args()
    if args.dask:
        return dask_scaling(args.dask, args.json)
    budgets = sorted(int(t) for t in args.trials.split(","))
    n = args.size
    print(f"refcomp {refcomp.__version__} tuning benchmark, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"machine: {cpu_name()}, {os.cpu_count()} CPUs; intrinsics this CPU runs: "
          f"{', '.join(intrin.names(available_only=True))}")
    print(f"numpy {np.__version__}: {blas_description()}; cost model: "
          f"{'xgboost' if tune.xgboost_available() else 'ridge regression (xgboost not installed)'}")
    func = workloads.matmul(n, n, n)
    database = tune.Database(args.database)
    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    a = rng.uniform(-1, 1, (n, n)).astype("float32")
    b = rng.uniform(-1, 1, (n, n)).astype("float32")
    tuned, tuning_s, done = [], 0.0, 0
    for budget in budgets:
        start = time.monotonic()
        progress = lambda trials, total, gflops, elapsed: print(  # noqa: E731
            f"  trials {done + trials:>4}/{budget}  best {gflops:7.1f} GFLOP/s  {elapsed:6.1f} s", flush=True)
        result = tune.tune(func, "c", trials=budget - done, database=database, reference=_reference,
                           seed=budget, progress=progress)
        tuning_s += time.monotonic() - start
        done = budget
        for failure in result.failures[:3]:
            print(f"  rejected ({failure.result.status}): {failure.result.message.strip().splitlines()[-1:]}")
        tuned.append((budget, result, tuning_s))
    # Kernels run in this process only after the search: the runner forks its workers, and a
    # process that has started OpenMP threads cannot fork safely.
    results = {}
    for budget, result, spent in tuned:
        name = f"matmul_{n}_t{budget}"
        if result.schedule is None:
            print(f"{name}: no candidate passed the check")
            continue
        kernel = refcomp.build(result.schedule.func)
        c = rng.uniform(-1, 1, (n, n)).astype("float32")
        kernel(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-3, atol=1e-3 * np.sqrt(n))
        ours, theirs = harness.best_times([lambda: kernel(a, b, c), lambda: a @ b], args.repeat, args.rounds)
        flops = 2.0 * n ** 3
        results[name] = {"refcomp": round(flops / ours / 1e9, 2), "baseline": round(flops / theirs / 1e9, 2),
                         "unit": "GFLOP/s", "ratio": round(theirs / ours, 3), "tuning_s": round(spent, 1),
                         "failures": len(result.failures)}
        print(f"{name:<22} refcomp {flops / ours / 1e9:8.1f} GFLOP/s  numpy {flops / theirs / 1e9:8.1f} GFLOP/s  "
              f"ratio {theirs / ours:5.2f}  tuning {spent:6.1f} s  rejected {len(result.failures)}", flush=True)
    if args.json:
        print(json.dumps({"cases": results}))


if __name__ == "__main__":
    main()
