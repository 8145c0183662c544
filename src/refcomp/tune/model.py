"""Whole-model tuning: the kernels of a graph module as tasks sharing one trial budget.

    tasks = extract_tasks(mod)                       # one per distinct fused kernel
    report = tune_model(mod, trials=256, database=db)
    ex = refcomp.graph.build(mod, tuning_database=db)

`extract_tasks` runs the graph pipeline up to (not including) the default schedule, so the
kernels are exactly the ones `graph.build` schedules; kernels with equal structural hashes are
one task, weighted by how many call sites use them.  Kernels the tuner cannot take (symbolic
shapes, scalar parameters) are left out and keep the default schedule.

`tune_model` gives every task one round first, then hands each further round to the task with
the largest expected gain: weight x best time x its last relative improvement (at least a
floor, so a task that stalled once is not starved), the gradient idea of MetaSchedule's task
scheduler in its simplest form.  When the budget is spent, each task that was tuned gets the
final comparison (refcomp.tune.final): its best few candidates and its default schedule re-timed
side by side in this process, the winner committed as its final record, which graph.build uses.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ..ast.function import IRModule, PrimFunc
from ..ast.functor import collect
from ..ast.graph import Call, Function
from ..errors import RefcompError
from ..loops.primitives.legality import const_int
from ..target import parse_target
from .database import Database
from .final import FinalComparison, final_comparison
from .runner import Checker
from .search import TuneResult, count_flops, tune
from .workload import structural_hash


@dataclass
class Task:
    """One distinct kernel of a model: its function, hash, call count and the kernel names sharing it."""

    func: PrimFunc
    workload: str
    weight: int
    names: tuple[str, ...]
    flops: float = 0.0

    @property
    def name(self) -> str:
        return self.names[0]


def _tunable(func: PrimFunc) -> bool:
    from ..ast import Buffer

    return all(isinstance(p, Buffer) and all(const_int(d) is not None for d in p.shape) for p in func.params)


def unscheduled_kernels(mod: IRModule | Function, *, fuse: bool = True, fold: bool = True,
                        blas: bool | str | None = None, target: str = "c") -> IRModule:
    """mod after the graph pipeline's passes that come before the default schedule (its kernels
    prepared as graph.build prepares them before it looks up tuning records).  blas is graph.build's
    (None, the default: as graph.build decides for target)."""
    from ..graph.passes.default_schedule import prepare_kernels
    from ..graph.pipeline import default_pipeline, resolve_blas

    if isinstance(mod, Function):
        mod = IRModule({"main": mod})
    if not isinstance(mod, IRModule):
        raise RefcompError(f"extract_tasks: expected an IRModule or a graph Function, got {type(mod).__name__}")
    blas = resolve_blas(blas, parse_target(target).kind)
    for name, run in default_pipeline(fuse=fuse, schedule=False, fold=fold, blas=blas):
        if name == "plan_memory":
            break
        mod = run(mod)
    return prepare_kernels(mod)


def extract_tasks(mod: IRModule | Function, *, fuse: bool = True, fold: bool = True,
                  blas: bool | str | None = None, target: str = "c") -> list[Task]:
    """The tuning tasks of a graph module: one per distinct unscheduled kernel with constant
    shapes, weighted by its call sites, heaviest (weight x flops) first.  fuse, fold and blas are
    graph.build's, with its defaults: tune with the arguments the model will be built with."""
    optimized = unscheduled_kernels(mod, fuse=fuse, fold=fold, blas=blas, target=target)
    calls: dict[str, int] = {}
    for func in optimized.functions.values():
        if isinstance(func, Function):
            for call in collect(func, Call):
                if call.op_name == "call_tir":
                    calls[call.args[0].name] = calls.get(call.args[0].name, 0) + 1
    tasks: dict[str, Task] = {}
    for name, func in optimized.functions.items():
        if not isinstance(func, PrimFunc) or func.attrs.get("scheduled") or name not in calls:
            continue
        if not _tunable(func):
            continue
        workload = structural_hash(func)
        if workload in tasks:
            task = tasks[workload]
            task.weight += calls[name]
            task.names += (name,)
        else:
            tasks[workload] = Task(func, workload, calls[name], (name,), count_flops(func))
    return sorted(tasks.values(), key=lambda t: -(t.weight * max(t.flops, 1.0)))


@dataclass
class TaskReport:
    """What tuning did for one task: trials spent and its best time (seconds, inf: none passed)."""

    task: Task
    trials: int = 0
    best_time: float = float("inf")
    failures: int = 0
    history: list[float] = field(default_factory=list)  # best time after each round
    final: FinalComparison | None = None  # the final comparison that chose the task's schedule


@dataclass
class ModelTuneResult:
    """The tasks of a model, what each got, and the total trials measured."""

    tasks: list[TaskReport]
    trials: int
    curve: list[tuple[int, float, float]] = field(default_factory=list)  # (trials, seconds, weighted time)

    @property
    def flops(self) -> float:
        """The work of one model call in the tuned kernels (call count x flops of each task)."""
        return sum(r.task.weight * r.task.flops for r in self.tasks)

    @property
    def weighted_time(self) -> float:
        """The sum over tasks of call count x best time: the tuned kernels' time per model call."""
        return sum(r.task.weight * r.best_time for r in self.tasks if r.best_time < float("inf"))


def _expected_gain(report: TaskReport, floor: float) -> float:
    if report.trials == 0:
        return float("inf")
    if report.best_time == float("inf"):
        return 0.0  # nothing passed so far: other tasks first
    history = report.history
    improvement = (history[-2] - history[-1]) / history[-2] if len(history) >= 2 and history[-2] < float("inf") \
        else 1.0
    return report.task.weight * report.best_time * max(improvement, floor)


def tune_model(mod: IRModule | Function, target: str = "c", trials: int = 256, *, database: Database,
               batch: int = 16, seed: int = 0, floor: float = 0.05, fuse: bool = True, fold: bool = True,
               blas: bool | str | None = None, tasks: list[Task] | None = None,
               progress: Callable[[int, int, str, float, float], None] | None = None,
               final: int = 4, log: Callable[[str], None] | None = None,
               **tune_options: Any) -> ModelTuneResult:
    """Tune the kernels of a graph module for target with one shared budget of `trials`.

    Records go to `database`; build the model with `graph.build(mod, tuning_database=database)`.
    progress(trials_done, trials, task_name, task_best_gflops, elapsed_seconds) follows each round
    that measured something.  final: as for `tune`, once per tuned task at the end (0: none);
    log(text) receives each task's final comparison line, prefixed by the task's name.
    """
    import time

    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise RefcompError(f"tune_model: trials: expected a positive int, got {trials!r}")
    if not isinstance(database, Database):
        raise RefcompError(f"tune_model: database: expected a refcomp.tune.Database, got {type(database).__name__}")
    target = str(parse_target(target))
    if tasks is None:
        tasks = extract_tasks(mod, fuse=fuse, fold=fold, blas=blas, target=target)
        if not tasks:
            raise RefcompError(
                "tune_model: the module has no kernel with constant shapes to tune (kernels over a symbolic "
                "dim such as a batch size are left to the default schedules); give the graph function's "
                "inputs constant shapes to tune them")
    reports = [TaskReport(task) for task in tasks]
    # one checker per task for all its rounds and its final comparison: the reference runs once
    checkers: dict[int, Checker] = {}

    def checker_of(report: TaskReport) -> Checker:
        if id(report) not in checkers:
            checkers[id(report)] = Checker(report.task.func, tune_options.get("reference"), seed=seed)
        return checkers[id(report)]

    active = list(reports)
    done, start, round_index = 0, time.monotonic(), 0
    curve: list[tuple[int, float, float]] = []
    while done < trials and active:
        report = max(active, key=lambda r: _expected_gain(r, floor))
        if _expected_gain(report, floor) <= 0.0:
            break
        count = min(batch, trials - done)
        result: TuneResult = tune(report.task.func, target, trials=count, database=database, batch=count,
                                  seed=seed + round_index, final=0, checker=checker_of(report), **tune_options)
        round_index += 1
        done += result.trials
        report.trials += result.trials
        report.failures += len(result.failures)
        report.best_time = min(report.best_time, result.best_time)
        report.history.append(report.best_time)
        if result.trials == 0:
            active.remove(report)  # the design space has nothing new to offer
        elapsed = time.monotonic() - start
        if all(r.best_time < float("inf") for r in reports):
            curve.append((done, elapsed, sum(r.task.weight * r.best_time for r in reports)))
        if progress is not None and result.trials:
            gflops = report.task.flops / report.best_time / 1e9 if report.best_time < float("inf") else 0.0
            progress(done, trials, report.task.name, gflops, elapsed)
    if final > 0:
        for report in reports:
            if report.trials == 0 or report.best_time == float("inf"):
                continue
            name = report.task.name
            report.final = final_comparison(
                report.task.func, target, database, runner=tune_options.get("runner"),
                checker=checker_of(report), space=tune_options.get("space"), seed=seed, top=final,
                log=(lambda text, name=name: log(f"{name}: {text}")) if log is not None else None)
    return ModelTuneResult(reports, done, curve)
