"""Evolutionary search over a design space, guided by a cost model trained online.

`tune(func, target, trials=...)` runs rounds until `trials` candidates were measured (or
`max_seconds` passed):

1. the population: fresh samples of the design space, plus the best measured records of this
   workload and target from the database, replayed (so a later run starts where one stopped);
2. evolution: for a few generations, parents drawn by predicted score are mutated (one decision
   each) and the best predicted schedules are kept;
3. a batch: most candidates are the best predicted ones not measured yet, a fraction `epsilon`
   are fresh random samples (exploration);
4. measurement by the runner, every candidate checked against the reference; correct ones are
   committed to the database, failing ones reported in `TuneResult.failures`; the cost model is
   refitted on everything measured so far.

At the end, the final comparison (`refcomp.tune.final`) re-times the best few candidates and the
default schedule side by side in this process and commits the winner as the workload's final
record: the search's worker times rank candidates, the comparison decides what is used.
The schedule returned is replayed from the winner's trace, so what `tune` returns is what the
record holds.
"""
from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from ..ast import PrimFunc
from ..errors import RefcompError
from ..loops.schedule import Schedule
from ..target import parse_target
from .cost_model import CostModel, default_cost_model, scores_from_times
from .dask_runner import resolve_runner
from .database import Database, TuningRecord
from .features import count_flops, features_of
from .final import FinalComparison, final_comparison
from .runner import Candidate, Checker, MeasureResult, Runner, RunnerBackend, default_build
from .space import DesignSpace, default_mutators, default_rules, mutate_trace, neighbours
from .workload import structural_hash


@dataclass(frozen=True)
class Failure:
    """A candidate that was measured and rejected: its trace and what went wrong."""

    trace: dict
    result: MeasureResult


@dataclass
class TuneResult:
    """The outcome of tune: the schedule to use (the final comparison's winner, else the search's best;
    None when no candidate passed), the best time the search's workers measured, the history."""

    workload: str
    target: str
    schedule: Schedule | None
    best_time: float
    trials: int
    flops: float
    failures: list[Failure] = field(default_factory=list)
    curve: list[tuple[int, float, float]] = field(default_factory=list)  # (trial, seconds, best time)
    final: FinalComparison | None = None  # the final comparison that chose `schedule` (None: none ran)

    @property
    def best_gflops(self) -> float:
        return self.flops / self.best_time / 1e9 if self.best_time < float("inf") else 0.0


def replay(func: PrimFunc, record: TuningRecord | dict) -> Schedule:
    """The schedule a record (or a trace JSON object) describes, replayed onto func."""
    trace = record.trace if isinstance(record, TuningRecord) else record
    return Schedule.from_trace(func, trace)


def apply_best(func: PrimFunc, database: Database, target: str = "c", machine: str | None = None) -> PrimFunc:
    """func scheduled by its best record in database for target (measured on machine, when given), or
    func itself when there is none."""
    scheduled = best_scheduled(func, database, target, machine)
    return func if scheduled is None else scheduled


def best_scheduled(func: PrimFunc, database: Database, target: str = "c",
                   machine: str | None = None) -> PrimFunc | None:
    """func scheduled by its newest final record in database (measured on machine, when given), else by
    the fastest of its search records there, the first that replays; None when none does."""
    workload = structural_hash(func)
    final = database.final_choice(workload, target, machine)
    for record in ([final] if final is not None else []) + database.query(workload, target, machine):
        try:
            return replay(func, record).func
        except RefcompError:
            continue  # a record from another version of a primitive: try the next
    return None


def _key(sch: Schedule) -> str:
    return sch.trace.to_json()


def _default_schedule(space: DesignSpace, func: PrimFunc, seed: int) -> Schedule | None:
    """The design space's rule-based default for func (None when its rules reject it)."""
    try:
        return space.default_sample(func, seed)
    except RefcompError:
        return None


@dataclass
class _Search:
    func: PrimFunc
    target: str
    space: DesignSpace
    mutators: Sequence
    model: CostModel
    rng: random.Random
    measured: dict[str, float] = field(default_factory=dict)
    features: dict[str, np.ndarray] = field(default_factory=dict)
    replayed: dict[str, Schedule | None] = field(default_factory=dict)
    tried: set[str] = field(default_factory=set)  # mutated traces already replayed (replay is costly)
    trained: bool = False  # the cost model has been fitted (before that it ranks nothing)

    def feature(self, sch: Schedule) -> np.ndarray | None:
        key = _key(sch)
        if key not in self.features:
            try:
                self.features[key] = features_of(sch.func)
            except RefcompError:
                return None
        return self.features[key]

    def predict(self, schedules: list[Schedule]) -> list[float]:
        rows = [self.feature(s) for s in schedules]
        good = [i for i, r in enumerate(rows) if r is not None]
        scores = [-float("inf")] * len(schedules)
        if good:
            predicted = self.model.predict(np.stack([rows[i] for i in good]))
            for i, p in zip(good, predicted):
                scores[i] = float(p)
        return scores

    def population(self, previous: list[Schedule], records: list[TuningRecord], size: int) -> list[Schedule]:
        """The next round's population: the best measured records (replayed once each), the
        previous round's survivors, and fresh samples until size members are not measured yet."""
        pool: dict[str, Schedule] = {}
        for record in records:
            key = json.dumps(record.trace, separators=(",", ":"))
            if key not in self.replayed:
                try:
                    self.replayed[key] = replay(self.func, record)
                except RefcompError:
                    self.replayed[key] = None
            if self.replayed[key] is not None:
                sch = self.replayed[key]
                if _key(sch) not in self.measured:  # a database record counts as measured: not run again
                    self.measured[_key(sch)] = record.mean_time
                    self.feature(sch)
                pool.setdefault(_key(sch), sch)
        for sch in previous:
            if len(pool) >= size:
                break
            pool.setdefault(_key(sch), sch)
        # measured members stay as parents; fresh samples keep `size` members still to measure
        missing = size - sum(1 for key in pool if key not in self.measured)
        # fresh samples that are new: a sample already measured or in the pool is drawn again
        # (the rules' preferences repeat samples of a small space: the likeliest schedule of a
        # 32 x 32 x 8 matmul is a third of the draws), within 16 draws per member
        for _ in range(16 * max(missing, 0)):
            if missing <= 0:
                break
            try:
                sch = self.space.sample(self.func, self.rng.randrange(2**31))
            except RefcompError:
                continue
            key = _key(sch)
            if key not in pool and key not in self.measured:
                pool[key] = sch
                missing -= 1
        return list(pool.values())

    def evolve(self, population: list[Schedule], generations: int, size: int, children: int) -> list[Schedule]:
        """Mutate parents drawn by predicted score (`children` per generation); keep the size best."""
        pool = {_key(s): s for s in population}
        for _ in range(generations):
            members = list(pool.values())
            scores = self.predict(members)
            finite = [(s, sc) for s, sc in zip(members, scores) if sc > -float("inf")]
            if not finite:
                break
            low = min(sc for _, sc in finite)
            weights = [sc - low + 1e-3 for _, sc in finite]
            for _ in range(children):
                parent = self.rng.choices([s for s, _ in finite], weights=weights)[0]
                child = mutate_trace(self.func, json.loads(parent.trace.to_json()), self.mutators, self.rng,
                                     tried=self.tried)
                if child is not None:
                    pool.setdefault(_key(child), child)
            members = list(pool.values())
            ranked = sorted(zip(self.predict(members), range(len(members))), reverse=True)[:size]
            pool = {_key(members[i]): members[i] for _, i in ranked}
        return list(pool.values())

    def pick(self, pool: list[Schedule], count: int, epsilon: float) -> list[Schedule]:
        fresh = [s for s in pool if _key(s) not in self.measured]
        chosen: dict[str, Schedule] = {}
        explore = sum(1 for _ in range(count) if self.rng.random() < epsilon)
        for sch in self.space.sample_many(self.func, explore, self.rng):
            if _key(sch) not in self.measured:
                chosen.setdefault(_key(sch), sch)
        # an untrained model predicts nothing: the fresh members in their order (random samples)
        scores = self.predict(fresh) if self.trained else [-float(i) for i in range(len(fresh))]
        for _, index in sorted(zip(scores, range(len(fresh))), reverse=True):
            if len(chosen) >= count:
                break
            chosen.setdefault(_key(fresh[index]), fresh[index])
        return list(chosen.values())[:count]

    def refit(self) -> None:
        keys = [k for k, t in self.measured.items() if k in self.features and t < float("inf")]
        if len(keys) >= 4:
            rows = np.stack([self.features[k] for k in keys])
            self.model.update(rows, scores_from_times(np.array([self.measured[k] for k in keys])))
            self.trained = True


def tune(func: PrimFunc, target: str = "c", trials: int = 64, *, database: Database | None = None,
         space: DesignSpace | None = None, mutators: Sequence | None = None,
         runner: Runner | RunnerBackend | str | object | None = None,
         cost_model: CostModel | None = None, reference: Callable | None = None, seed: int = 0,
         population: int = 32, batch: int = 16, generations: int = 1, children: int | None = None,
         epsilon: float = 0.2,
         max_seconds: float | None = None,
         progress: Callable[[int, int, float, float], None] | None = None,
         final: int = 4, log: Callable[[str], None] | None = None,
         seed_neighbours: bool = True, checker: Checker | None = None) -> TuneResult:
    """Search schedules of func for target; measure `trials` candidates; return the best.

    reference(arrays) computes the expected outputs in place (default: the interpreter on func);
    progress(trials_done, trials, best_gflops, elapsed_seconds) is called after every batch.
    runner: a `Runner` (default: the local process pool), "dask://HOST:PORT" or a `distributed.Client`
    (measure on a Dask cluster's workers), or any `RunnerBackend`. Database records are reused only
    when they were measured on the runner's machine.
    Each round measures `batch` candidates; evolution makes `children` mutants per generation
    (default: batch), each a full replay of its trace.
    final: how many of the best search records the final comparison re-times in this process with
    the default schedule (refcomp.tune.final; 0: none, the search's best is used as measured).
    log(text) receives the final comparison's summary line (which contestant won, the times).
    seed_neighbours: the first batch measures, after the default, its neighbours (`space.neighbours`:
    one tile size a step from the preferred one) in up to half of the batch.
    checker: the random inputs and the reference's outputs every candidate is checked against, when
    the caller made them already for func (`Checker(func, reference)`; tune_model keeps one per
    task across its rounds); else made here from `reference`.
    """
    if not isinstance(func, PrimFunc):
        raise RefcompError(f"tune: expected a PrimFunc, got {type(func).__name__}")
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise RefcompError(f"tune: trials: expected a positive int, got {trials!r}")
    if isinstance(final, bool) or not isinstance(final, int) or final < 0:
        raise RefcompError(f"tune: final: expected an int >= 0, got {final!r}")
    parse_target(target, what="tune")  # an unknown target is refused here, not by every candidate's build
    database = database if database is not None else Database()
    space = space or DesignSpace(default_rules(target))
    runner = resolve_runner(runner, target)
    if runner.target != target:
        raise RefcompError(f"tune: the runner builds for {runner.target!r}, the search is for {target!r}")
    if type(runner) is Runner and str(target).split()[:1] == ["cuda"] and runner.build is default_build:
        from ..runtime.cuda_library import cuda_device_count

        if cuda_device_count() == 0:
            raise RefcompError("tune: the CUDA target measures candidates on a GPU, and this machine has no CUDA "
                               "device; sampled GPU schedules can still be checked on the CPU with "
                               "refcomp.emit_cuda.simulate.run_checked")
    workload = structural_hash(func)
    machine = runner.machine()
    search = _Search(func, target, space, list(mutators or default_mutators()), cost_model or default_cost_model(),
                     random.Random(seed))
    if checker is None:
        checker = Checker(func, reference, seed=seed)
    elif not isinstance(checker, Checker) or checker.func is not func:
        raise RefcompError("tune: checker: expected a Checker made for the function being tuned")
    flops = count_flops(func)
    result = TuneResult(workload, target, None, float("inf"), 0, flops)
    best_trace: dict | None = None
    for record in database.query(workload, target, machine)[:population // 2]:
        if record.mean_time < result.best_time:
            result.best_time, best_trace = record.mean_time, record.trace
    start = time.monotonic()
    default = first = _default_schedule(space, func, seed)
    pool: list[Schedule] = []
    while result.trials < trials:
        if max_seconds is not None and time.monotonic() - start > max_seconds:
            break
        database.refresh()  # records other drivers appended to a shared file
        if not search.trained:
            # until the model is fitted it ranks at random: a population of one batch, no evolution
            # (each member and mutant costs a replay and a lowering, about 0.1-0.3 s for a tiled matmul)
            size = min(population, batch)
        else:
            size = population
        pool = search.population(pool, database.query(workload, target, machine)[:population // 2], size)
        if not pool and first is None:
            raise RefcompError(f"tune: the design space yields no valid schedule of {func.name}")
        if not search.trained:
            search.refit()  # records of earlier runs from the database train it before the first batch
        if search.trained:
            pool = search.evolve(pool, generations, population, children if children is not None else batch)
        chosen = search.pick(pool, min(batch, trials - result.trials), epsilon)
        if first is not None:
            # the rule-based default is measured first, so the search never ends behind it, with
            # its neighbours (one tile size a step away: the region the rules' preferred tilings
            # point to) filling up to half of the first batch
            if _key(first) not in search.measured and database.best(workload, target, machine) is None:
                near = neighbours(func, first, max(0, len(chosen) // 2 - 1)) if seed_neighbours else []
                lead = [first] + [s for s in near if _key(s) not in search.measured]
                keys = {_key(s) for s in lead}
                chosen = (lead + [s for s in chosen if _key(s) not in keys])[:len(chosen)]
            first = None
        if not chosen:
            break
        candidates = [Candidate(json.loads(s.trace.to_json())) for s in chosen]
        outcomes = runner.measure(func, candidates, checker)
        for sch, candidate, outcome in zip(chosen, candidates, outcomes):
            result.trials += 1
            key = _key(sch)
            if outcome.ok:
                search.measured[key] = outcome.mean_time
                search.feature(sch)
                database.commit(TuningRecord(workload, target, candidate.trace, outcome.run_times,
                                             outcome.machine or machine))
                if outcome.mean_time < result.best_time:
                    result.best_time, best_trace = outcome.mean_time, candidate.trace
            else:
                search.measured[key] = float("inf")
                result.failures.append(Failure(candidate.trace, outcome))
            result.curve.append((result.trials, time.monotonic() - start, result.best_time))
        search.refit()
        if progress is not None:
            progress(result.trials, trials, result.best_gflops, time.monotonic() - start)
    if final > 0:
        result.final = final_comparison(func, target, database, runner=runner, checker=checker, space=space,
                                        seed=seed, top=final, log=log, default=default)
        if result.final is not None:
            best_trace = result.final.winner.trace
    if best_trace is not None:
        result.schedule = replay(func, best_trace)
    return result
