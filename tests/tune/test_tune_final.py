"""The final comparison: the search's best candidates and the default re-timed in this process, the
winner committed as the workload's final record, which Database.best and graph.build prefer."""
import dataclasses
import json
import random

import numpy as np
import pytest

from refcomp import workloads
from refcomp.errors import RefcompError
from refcomp.tune import (Candidate, Checker, Database, DesignSpace, Runner, TuningRecord,
                          final_comparison, structural_hash, tune)
from refcomp.tune.runner import default_build


class ReversedRunner(Runner):
    """A real runner (isolated, checked builds and runs) that reports every run time inverted: the
    slowest candidate looks the fastest to the search."""

    def measure(self, func, candidates, checker):
        results = super().measure(func, candidates, checker)
        return [dataclasses.replace(r, run_times=tuple(1e-9 / t for t in r.run_times)) if r.ok else r
                for r in results]


def _matmul_reference(arrays):
    arrays[2][...] = arrays[0] @ arrays[1]


class RowsOrColumns:
    """A function rule with one sampled decision: the loops of a matmul reordered (i, k, j) with j in
    vectors of 16 (rows of B and C streamed; the default), or the plain nest (i, j, k: B read down its
    columns, one element at a time), tens of times slower.  Neither runs in parallel, so other jobs on
    the machine slow both alike."""

    complete = True

    def apply_function(self, sch, default=False):
        trial = sch.copy()
        if not int(trial.sample_categorical([1, 0], [0.5, 0.5], decision=0 if default else None)):
            return trial, False
        block = trial.get_block("C")
        i, j, k = trial.get_loops(block)
        trial.reorder(i, k, j)
        trial.vectorize(trial.split(j, [None, 16])[1])
        return trial, True


def _two_schedules():
    """A 256 x 256 x 256 matmul and a design space of its two schedules (RowsOrColumns)."""
    return workloads.matmul(256, 256, 256), DesignSpace([RowsOrColumns()])


def _trace(sch):
    return json.loads(sch.trace.to_json())


def test_a_search_misled_by_its_worker_times_still_returns_the_faster_schedule(tmp_path):
    func, space = _two_schedules()
    default = space.default_sample(func)
    db = Database(tmp_path / "db.jsonl")
    lines = []
    result = tune(func, "c", trials=4, database=db, batch=2, population=4, seed=random.randrange(2**20),
                  reference=_matmul_reference, runner=ReversedRunner(workers=2, timeout_s=120), space=space,
                  log=lines.append)
    assert not result.failures and len(db.records) == 2
    # the search was misled: by its workers' reports the plain loop nest is the faster one
    assert db.query(result.workload, "c")[0].trace != _trace(default)
    # the final comparison timed both here and chose the default
    comparison = result.final
    assert {c.label for c in comparison.contestants} == {"default", "search 1"}
    assert comparison.winner.label == "default" and comparison.times["default"] < comparison.times["search 1"]
    assert _trace(result.schedule) == _trace(default)
    assert len(lines) == 1 and lines[0].endswith("default won") and "worker" in lines[0]
    # committed: a final record, with the search's time of the winner and the default's time here
    reloaded = Database(tmp_path / "db.jsonl")
    best = reloaded.best(result.workload, "c")
    assert best.final is not None and best.trace == _trace(default)
    assert best.final["default_time"] == comparison.times["default"] and best.final["contestants"] == 2
    assert best.final["worker_time"] == next(r.mean_time for r in reloaded.records if r.trace == best.trace)
    assert reloaded.schedule_for(func, "c") is not None
    kernel = default_build(reloaded.schedule_for(func, "c"), "c")
    rng = np.random.default_rng(random.randrange(2**20))
    a, b = (rng.uniform(-1, 1, (256, 256)).astype("float32") for _ in range(2))
    c = np.full((256, 256), 7.0, dtype="float32")
    kernel(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_the_default_is_measured_first_when_the_database_lacks_it():
    func, space = _two_schedules()
    default = space.default_sample(func)
    plain = next(s for s in space.sample_many(func, 8, random.Random(0)) if _trace(s) != _trace(default))
    db = Database()
    runner = Runner(workers=1, timeout_s=120)
    checker_seed = random.randrange(2**20)
    outcome = runner.measure(func, [Candidate(_trace(plain))], Checker(func, _matmul_reference, checker_seed))[0]
    assert outcome.ok
    db.commit(TuningRecord(structural_hash(func), "c", _trace(plain), outcome.run_times, outcome.machine))
    comparison = final_comparison(func, "c", db, runner=runner, reference=_matmul_reference, space=space,
                                  seed=checker_seed)
    assert len(db.records) == 2  # the default's own isolated measurement, committed
    assert comparison.winner.label == "default" and db.best(structural_hash(func), "c") is comparison.record


def test_a_later_final_comparison_takes_the_previous_winner_and_the_newest_is_used(tmp_path):
    func, space = _two_schedules()
    db = Database(tmp_path / "db.jsonl")
    tune(func, "c", trials=2, database=db, batch=2, population=4, reference=_matmul_reference, space=space,
         runner=Runner(workers=2, timeout_s=120))
    first = db.final_choice(structural_hash(func), "c")
    again = final_comparison(func, "c", db, reference=_matmul_reference, space=space, default=None, top=1)
    # no default this time: the fastest search record and the previous final record (when they differ)
    assert again.contestants[0].label == "search 1"
    assert len(Database(tmp_path / "db.jsonl").finals) == 2
    assert Database(tmp_path / "db.jsonl").best(structural_hash(func), "c").final == again.record.final
    assert again.record.chosen_at >= first.chosen_at


def test_no_final_comparison_when_asked_for_none_or_bad_arguments():
    func, space = _two_schedules()
    db = Database()
    result = tune(func, "c", trials=1, database=db, batch=1, population=2, reference=_matmul_reference,
                  space=space, final=0)
    assert result.final is None and db.finals == [] and result.schedule is not None
    with pytest.raises(RefcompError, match="final"):
        tune(func, "c", trials=1, final=-1)
    with pytest.raises(RefcompError, match="rounds"):
        final_comparison(func, "c", db, rounds=0)
    with pytest.raises(RefcompError, match="margin"):
        final_comparison(func, "c", db, margin=1.5)
    assert final_comparison(func, "c", Database(), space=space, default=None) is None  # nothing measured
