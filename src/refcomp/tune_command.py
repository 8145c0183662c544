"""`refcomp tune WHAT`: search schedules for a named workload, a script or Python file, or an ONNX model.

    refcomp tune matmul --shape 512,512,512 --trials 64 --database tune.jsonl --plot curve.png
    refcomp tune kernels.py --trials 32            # every PrimFunc / graph module the file defines
    refcomp tune model.onnx --input x=1,3,224,224 --trials 256 --database model.jsonl

A PrimFunc is tuned on its own; a graph module (a script file's or an ONNX model's) is tuned as
a whole: its distinct kernels share the trial budget (refcomp.tune.tune_model), and
`refcomp.graph.build(mod, tuning_database=Database(FILE))` builds it with the best records.
A progress bar shows trials, the best GFLOP/s and the time left; `--plot` writes the tuning
curve (needs matplotlib).  Exit status: 0 when some candidate passed, 1 when none did, 2 for
bad arguments or input.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from .errors import RefcompError


def _ints(text: str) -> list[int]:
    from .frontend.arguments import positive_ints

    try:
        return positive_ints(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _named_workloads() -> dict[str, Any]:
    import inspect

    from . import workloads

    return {name: fn for name, fn in vars(workloads).items()
            if inspect.isfunction(fn) and fn.__module__ == workloads.__name__ and not name.startswith("_")}


def _load(args: argparse.Namespace) -> list[tuple[str, Any]]:
    """(label, PrimFunc or graph module) for what to tune."""
    what = args.what
    if what.endswith(".onnx"):
        if not os.path.isfile(what):
            raise RefcompError(f"no such file: {what}")
        from .frontend import from_onnx
        from .frontend.arguments import input_shapes

        shapes = input_shapes(args.input or [])
        return [(os.path.basename(what), from_onnx(what, shapes or None))]
    if os.path.isfile(what):
        from .shape.check import LoadError, load_targets

        try:
            return load_targets(what, purpose="tune")
        except LoadError as error:
            raise RefcompError(f"{error}") from None
    named = _named_workloads()
    if what not in named:
        raise RefcompError(f"{what!r} is neither a file nor a named workload; workloads: "
                           f"{', '.join(sorted(named))} (give their sizes with --shape)")
    if not args.shape:
        raise RefcompError(f"the workload {what} needs its sizes: --shape N,M,...")
    try:
        return [(what, named[what](*args.shape))]
    except TypeError as error:
        raise RefcompError(f"--shape does not fit {what}: {error}") from None


def _tune_one(label: str, func: Any, args: argparse.Namespace, database: Any) -> bool:
    from .tune import ProgressBar, Runner, plot_curve, tune

    bar = ProgressBar(label=label) if not args.quiet else None
    result = tune(func, args.target, trials=args.trials, database=database, seed=args.seed,
                  runner=Runner(target=args.target, workers=args.workers, timeout_s=args.timeout),
                  max_seconds=args.max_seconds, progress=bar, log=bar.note if bar else None)
    print(f"{label}: {result.trials} trial{'s' if result.trials != 1 else ''}, best {result.best_gflops:.2f} GFLOP/s "
          f"({result.best_time * 1e3:.3f} ms), {len(result.failures)} rejected")
    if result.final is not None:  # what is kept: the final comparison's winner, timed in this process
        final = result.final
        kept = final.times.get(final.winner.label, float("inf"))
        default = final.default_time
        print(f"  kept: {final.winner.label}, {kept * 1e3:.3f} ms in this process"
              + (f" (the default schedule {default * 1e3:.3f} ms)" if default is not None and default < float("inf")
                 else ""))
    for failure in result.failures[:5]:
        last = failure.result.message.strip().splitlines()[-1:] or [""]
        print(f"  rejected ({failure.result.status}): {last[0][:160]}")
    if args.plot and result.curve:
        _plot(lambda path: plot_curve(result.curve, result.flops, path, title=label), args.plot, label)
    return result.schedule is not None


def _tune_model(label: str, mod: Any, args: argparse.Namespace, database: Any) -> bool:
    from .tune import ProgressBar, Runner, extract_tasks, plot_curve, tune_model

    tasks = extract_tasks(mod, target=args.target)
    if not tasks:
        how = ("give the inputs' shapes with --input NAME=D0,D1,..." if label.endswith(".onnx")
               else "give the graph function's inputs constant shapes")
        print(f"{label}: no kernel with constant shapes to tune; {how}")
        return False
    print(f"{label}: {len(tasks)} tasks: " + ", ".join(f"{t.name} (x{t.weight})" for t in tasks[:8])
          + (", ..." if len(tasks) > 8 else ""))
    bar = ProgressBar(label=label) if not args.quiet else None
    progress = (lambda done, total, task, gflops, seconds: bar(done, total, gflops, seconds)) if bar else None
    result = tune_model(mod, args.target, trials=args.trials, database=database, seed=args.seed,
                        runner=Runner(target=args.target, workers=args.workers, timeout_s=args.timeout),
                        progress=progress, log=bar.note if bar else None)
    for report in result.tasks:
        gflops = report.task.flops / report.best_time / 1e9 if report.best_time < float("inf") else 0.0
        print(f"  {report.task.name:<40} x{report.task.weight}  {report.trials:4} trials  {gflops:8.2f} GFLOP/s")
    if args.plot and result.curve:
        _plot(lambda path: plot_curve(result.curve, result.flops, path, title=label), args.plot, label)
    return any(r.best_time < float("inf") for r in result.tasks)


def _plot(draw: Any, path: str, label: str) -> None:
    try:
        print(f"tuning curve written to {draw(path)}")
    except RefcompError as error:
        print(f"{label}: no plot: {error}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="refcomp tune", description=__doc__.split("\n\n")[0],
                                     epilog=f"named workloads: {', '.join(sorted(_named_workloads()))}")
    parser.add_argument("what", help="a named workload, a .py or script-format file, or an .onnx model")
    parser.add_argument("--shape", type=_ints, help="sizes of a named workload, e.g. 1024,1024,1024")
    parser.add_argument("--input", action="append", metavar="NAME=D0,D1,...",
                        help="an ONNX input's shape (repeatable)")
    parser.add_argument("--trials", type=int, default=64, help="candidates to measure (default 64)")
    parser.add_argument("--target", default="c", help="the build target (default c)")
    parser.add_argument("--database", default=None, help="JSON-lines file of records (default: kept in memory)")
    parser.add_argument("--plot", default=None, metavar="FILE.png", help="write the tuning curve (needs matplotlib)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2, help="parallel build processes (default 2)")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per candidate before it is killed")
    parser.add_argument("--max-seconds", type=float, default=None, help="stop the search after this long")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    if args.trials < 1:
        print("refcomp tune: --trials must be positive", file=sys.stderr)
        return 2
    if args.max_seconds is not None and not args.max_seconds > 0:
        print(f"refcomp tune: --max-seconds must be a positive number of seconds, got {args.max_seconds}",
              file=sys.stderr)
        return 2
    from .ast.function import PrimFunc
    from .tune import Database

    try:
        targets = _load(args)
        database = Database(args.database)
        passed = []
        for label, item in targets:
            if isinstance(item, PrimFunc):
                passed.append(_tune_one(label, item, args, database))
            else:
                passed.append(_tune_model(label, item, args, database))
    except RefcompError as error:
        print(f"refcomp tune: {error}", file=sys.stderr)
        return 2
    if args.database:
        print(f"records in {args.database} ({len(database)} in all)")
    return 0 if passed and all(passed) else 1
