"""The final comparison: a search's best few candidates and the default schedule, re-timed side by
side in the caller's process; the winner becomes the workload's final record.

The search ranks candidates by the times its run processes measured, each candidate alone in a
fresh process.  Those times need not carry over to where the kernel is used: a sub-millisecond
kernel's time depends on the OpenMP pool's wake-up, on the process's state and on the timer, so
the search's best can be slower than the default schedule in the caller's process.  So, at the
end of a search (`tune`, and `tune_model` for each task):

1. the contestants: the `top` fastest distinct search records of the workload measured on this
   machine, the design space's default schedule (measured by the runner first, isolated and
   checked, when the database has no record of it), and the previous final record's trace;
2. each is built here, with the runner's build hook, and checked against the reference once more;
3. all are timed interleaved in this process, with the caller's OpenMP settings: warm-up calls
   each, then `rounds` rounds of passes, a pass calling every contestant once (in an order
   rotated every pass), as many passes as last about 10 ms at the contestants' best warm-up times
   (2 to 100), and more rounds for short kernels, so that the whole lasts about 0.5 s (at most 50
   rounds); a contestant's round best is its best call of the round and its time the best of
   its round bests.  Call by call, every contestant meets the same bursts of other jobs; those
   only ever add time, so the best call is the kernel's own speed, what the benchmarks report
   too (the round bests are kept in the record, so their spread can be read there);
4. the default wins unless another contestant is faster by more than `margin`; otherwise the
   fastest wins.  The winner is committed as a final record (its round bests as run times; the
   time of its choice, its worker time and the default's time here in `final`), which
   `Database.best` and `graph.build` prefer to any search record.

Every contestant passed the runner's isolated check first, so running it here runs known-good
kernels only.  The comparison runs only where the runner measures on this machine (a Dask cluster
of another machine kind gets none: its records keep their worker times).
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ..ast import PrimFunc
from ..errors import RefcompError
from ..loops.schedule import Schedule
from .database import Database, TuningRecord
from .dask_runner import resolve_runner
from .runner import Candidate, Checker, default_build, machine_description, tune_clock
from .space import DesignSpace, default_rules
from .workload import structural_hash

# A round is as many passes over the contestants (MIN_PASSES to MAX_PASSES) as last about
# ROUND_SECONDS at their best warm-up times.
ROUND_SECONDS = 10e-3
MIN_PASSES = 2
MAX_PASSES = 100
# Short kernels get more rounds, so that the comparison lasts about MIN_SECONDS (at most MAX_ROUNDS
# rounds): a burst of other jobs over a few milliseconds would otherwise cover all of it.
MIN_SECONDS = 0.5
MAX_ROUNDS = 50
WARMUP_CALLS = 3


@dataclass(frozen=True)
class Contestant:
    """One schedule in the final comparison: a label ("default", "search 1", "previous final"),
    its trace and the time the search's worker measured (inf when none did)."""

    label: str
    trace: dict
    worker_time: float = float("inf")


@dataclass
class FinalComparison:
    """The outcome of a final comparison: every contestant, its time here (best of the round bests,
    seconds; inf for a contestant rejected here, with the reason in `rejected`), and the winner,
    committed to the database as `record`."""

    contestants: list[Contestant]
    times: dict[str, float]
    winner: Contestant
    record: TuningRecord
    rejected: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0  # the wall time of the comparison (builds, checks, timing)

    @property
    def default_time(self) -> float | None:
        return self.times.get("default")

    def summary(self) -> str:
        """One line for a progress display: each contestant's time here (and in its worker), the winner."""
        parts = []
        for c in self.contestants:
            here = self.times.get(c.label, float("inf"))
            text = f"{c.label} {_ms(here)}" if here < float("inf") else f"{c.label} rejected"
            if c.worker_time < float("inf"):
                text += f" (worker {_ms(c.worker_time)})"
            parts.append(text)
        return (f"final comparison in this process ({self.seconds:.1f} s): {', '.join(parts)}; "
                f"{self.winner.label} won")


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.4g} ms"


def _trace_key(trace: dict) -> str:
    return json.dumps(trace, sort_keys=True, separators=(",", ":"))


def _finite(value: float) -> float | None:
    return value if value < float("inf") else None


def _contestants(func: PrimFunc, target: str, database: Database, machine: str, runner: Any,
                 checker: Checker, default: Schedule | None, top: int) -> list[Contestant]:
    workload = structural_hash(func)
    records = database.query(workload, target, machine)
    worker = {}
    for record in reversed(records):  # the fastest record of each trace last, so it counts
        worker[_trace_key(record.trace)] = record.mean_time
    chosen: dict[str, Contestant] = {}
    if default is not None:
        trace = json.loads(default.trace.to_json())
        key = _trace_key(trace)
        if key not in worker:  # never measured on this machine: measure it isolated first
            outcome = runner.measure(func, [Candidate(trace)], checker)[0]
            if outcome.ok:
                database.commit(TuningRecord(workload, target, trace, outcome.run_times, outcome.machine or machine))
                worker[key] = outcome.mean_time
        if key in worker:
            chosen[key] = Contestant("default", trace, worker[key])
    rank = 0
    for record in records:
        key = _trace_key(record.trace)
        if rank >= top:
            break
        if key in chosen:
            continue
        rank += 1
        chosen[key] = Contestant(f"search {rank}", record.trace, worker[key])
    previous = database.final_choice(workload, target, machine)
    if previous is not None and _trace_key(previous.trace) not in chosen:
        key = _trace_key(previous.trace)
        chosen[key] = Contestant("previous final", previous.trace, worker.get(key, float("inf")))
    return list(chosen.values())


def _timer(kernel: Callable, arrays: list) -> Callable[[], float]:
    timed_call = getattr(kernel, "timed_call", None)  # a kernel that times itself (DeviceResident)
    if timed_call is not None:
        return lambda: float(timed_call(*arrays))

    clock = tune_clock()

    def call() -> float:
        start = clock()
        kernel(*arrays)
        return clock() - start
    return call


def final_comparison(func: PrimFunc, target: str, database: Database, *, runner: Any = None,
                     checker: Checker | None = None, reference: Callable | None = None,
                     space: DesignSpace | None = None, default: Any = "sample", seed: int = 0,
                     top: int = 4, rounds: int = 5,
                     margin: float = 0.02, log: Callable[[str], None] | None = None) -> FinalComparison | None:
    """Re-time the `top` best search records of func, its default schedule (from `space`) and the
    previous final record in this process, commit the winner as a final record and return the
    comparison; None when there is nothing to compare (no record passed) or the runner measures on
    another machine than this one (`log` says so).  `default`: the default schedule, when the caller
    made it already (None: there is none), else sampled from `space`."""
    if not isinstance(func, PrimFunc):
        raise RefcompError(f"final_comparison: expected a PrimFunc, got {type(func).__name__}")
    for name, value, low in (("top", top, 0), ("rounds", rounds, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise RefcompError(f"final_comparison: {name}: expected an int >= {low}, got {value!r}")
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not 0 <= margin < 1:
        raise RefcompError(f"final_comparison: margin: expected a fraction in [0, 1), got {margin!r}")
    start = time.monotonic()
    runner = resolve_runner(runner, target)
    machine = machine_description(target)
    if runner.machine() != machine:
        if log is not None:
            log(f"final comparison skipped: the runner measures on {runner.machine()!r}, this process runs on "
                f"{machine!r}")
        return None
    checker = checker if checker is not None else Checker(func, reference, seed=seed)
    if isinstance(default, str) and default == "sample":
        try:
            default = (space or DesignSpace(default_rules(target))).default_sample(func, seed)
        except RefcompError:
            default = None
    if default is not None and not isinstance(default, Schedule):
        raise RefcompError(f"final_comparison: default: expected a Schedule or None, got {type(default).__name__}")
    contestants = _contestants(func, target, database, machine, runner, checker, default, top)
    if not contestants:
        return None
    build = getattr(runner, "build", default_build)
    timers: dict[str, Callable[[], float]] = {}
    rejected: dict[str, str] = {}
    for c in contestants:
        try:
            kernel = build(Schedule.from_trace(func, c.trace).func, target)
            arrays = checker.fresh_arguments()
            kernel(*arrays)
        except Exception as error:  # a build hook may raise anything: that contestant is out
            rejected[c.label] = f"{type(error).__name__}: {error}"
            continue
        problem = checker.mismatch(arrays)
        if problem is not None:
            rejected[c.label] = problem
            continue
        timers[c.label] = _timer(kernel, arrays)
    if not timers:
        if log is not None:
            log("final comparison: every contestant was rejected here: " + "; ".join(
                f"{label}: {why}" for label, why in rejected.items()))
        return None
    labels = list(timers)
    pass_seconds = 0.0
    for label in labels:  # warm-up (first touches, the thread pool), then how long a pass takes
        timers[label]()
        pass_seconds += min(timers[label]() for _ in range(WARMUP_CALLS))
    passes = max(MIN_PASSES, min(MAX_PASSES, int(ROUND_SECONDS / max(pass_seconds, 1e-7))))
    rounds = max(rounds, min(MAX_ROUNDS, int(MIN_SECONDS / max(passes * pass_seconds, 1e-7))))
    bests: dict[str, list[float]] = {label: [] for label in labels}
    turn = 0
    for _ in range(rounds):
        best = {label: float("inf") for label in labels}
        for _ in range(passes):
            shift = turn % len(labels)
            turn += 1
            for label in labels[shift:] + labels[:shift]:
                best[label] = min(best[label], timers[label]())
        for label in labels:
            bests[label].append(best[label])
    times = {c.label: min(bests[c.label]) if c.label in bests else float("inf") for c in contestants}
    fastest = min(labels, key=lambda label: times[label])
    if "default" in timers and times[fastest] >= times["default"] * (1.0 - margin):
        fastest = "default"  # another contestant must beat the default by more than the margin
    winner = next(c for c in contestants if c.label == fastest)
    default_time = times.get("default", float("inf"))
    record = TuningRecord(structural_hash(func), target, winner.trace, tuple(bests[fastest]), machine,
                          {"at": time.time(), "worker_time": _finite(winner.worker_time),
                           "default_time": _finite(default_time), "contestants": len(contestants)})
    database.commit(record)
    comparison = FinalComparison(contestants, times, winner, record, rejected, time.monotonic() - start)
    if log is not None:
        log(comparison.summary())
    return comparison
