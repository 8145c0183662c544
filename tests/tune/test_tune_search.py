"""tune(): the search loop, the database it fills, replay of the best trace, the cost models, features."""
import os
import random

import numpy as np
import pytest

from refcomp import workloads
from refcomp.ast.structural import structural_equal
from refcomp.errors import RefcompError
from refcomp.loops.interpreter import interpret
from refcomp.tune import (FEATURE_NAMES, Database, DesignSpace, MultiLevelTiling, ParallelVectorizeUnroll,
                          RidgeModel, Runner, XGBModel, apply_best, count_flops,
                          features_of, replay, structural_hash, tune, xgboost_available)
from refcomp.tune.runner import default_build


# The plain tiling rules, whose schedules the interpreter runs (the default rules tensorize).
TILING = DesignSpace([MultiLevelTiling(), ParallelVectorizeUnroll()])


def _matmul_reference(arrays):
    arrays[2][...] = arrays[0] @ arrays[1]


def test_tune_fills_the_database_and_its_best_trace_replays(tmp_path):
    func = workloads.matmul(16, 16, 8)
    db = Database(tmp_path / "db.jsonl")
    calls = []
    result = tune(func, "c", trials=6, database=db, batch=3, population=8, seed=random.randrange(2**20),
                  reference=_matmul_reference, runner=Runner(workers=2, timeout_s=60), space=TILING,
                  progress=lambda *args: calls.append(args))
    assert result.trials == 6 and not result.failures
    assert len(Database(tmp_path / "db.jsonl").records) == 6
    assert [c[0] for c in calls] == [3, 6] and all(c[1] == 6 for c in calls)
    assert result.best_time == min(r.mean_time for r in db.records)  # the search's best, as its workers timed it
    best = db.best(structural_hash(func), "c")  # the final comparison's winner, timed in this process
    assert best.final is not None and best is result.final.record and len(db.finals) == 1
    assert best.final["worker_time"] == next(r.mean_time for r in db.records if r.trace == best.trace)
    assert structural_equal(replay(func, best).func, result.schedule.func)
    assert structural_equal(apply_best(func, Database(tmp_path / "db.jsonl")), result.schedule.func)
    assert [t for t, _, _ in result.curve] == list(range(1, 7))
    assert all(b1 >= b2 for (_, _, b1), (_, _, b2) in zip(result.curve, result.curve[1:]))
    assert result.flops == 2 * 16 * 16 * 8 and result.best_gflops > 0
    rng = np.random.default_rng()
    a, b = rng.uniform(-1, 1, (16, 8)).astype("float32"), rng.uniform(-1, 1, (8, 16)).astype("float32")
    c = rng.uniform(-1, 1, (16, 16)).astype("float32")
    interpret(result.schedule.func, a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def _flaky(scheduled, target):
    """A build hook (module level, so it pickles): a third of the schedules wrong, a third crashing."""
    kernel = default_build(scheduled, target)
    kind = int(structural_hash(scheduled), 16) % 3
    if kind == 0:
        def wrong(*arrays):
            kernel(*arrays)
            arrays[-1][...] *= 2.0
        return wrong
    if kind == 1:
        return lambda *arrays: os.abort()
    return kernel


def test_the_search_goes_on_past_failing_candidates():
    func = workloads.matmul(16, 16, 8)

    result = tune(func, "c", trials=6, batch=6, population=12, seed=random.randrange(2**20),
                  reference=_matmul_reference, runner=Runner(workers=2, timeout_s=120, build=_flaky))
    assert result.trials == 6
    statuses = {f.result.status for f in result.failures}
    assert statuses <= {"wrong", "crash"}
    assert len(result.failures) <= 6
    if result.schedule is not None:
        assert int(structural_hash(result.schedule.func), 16) % 3 == 2


def test_a_later_run_starts_from_the_database(tmp_path):
    func = workloads.matmul(16, 16, 8)  # 6 distinct schedules: the second run measures 2 new ones
    db = Database(tmp_path / "db.jsonl")
    first = tune(func, "c", trials=2, database=db, batch=2, population=4, reference=_matmul_reference)
    second = tune(func, "c", trials=2, database=Database(tmp_path / "db.jsonl"), batch=2, population=4,
                  seed=1, reference=_matmul_reference)
    assert second.best_time <= first.best_time
    assert len(Database(tmp_path / "db.jsonl").records) == 4


def test_bad_arguments_are_refused():
    with pytest.raises(RefcompError, match="trials"):
        tune(workloads.matmul(8, 8, 8), "c", trials=0)
    with pytest.raises(RefcompError, match="PrimFunc"):
        tune("matmul", "c")
    from refcomp.runtime.cuda_library import cuda_device_count

    if cuda_device_count() == 0:  # the CUDA design space exists; measuring it needs a GPU
        with pytest.raises(RefcompError, match="no CUDA device"):
            tune(workloads.matmul(8, 8, 8), "cuda", trials=1)


def test_features_describe_the_lowered_loops():
    func = workloads.matmul(16, 16, 8)
    plain = dict(zip(FEATURE_NAMES, features_of(func)))
    assert len(features_of(func)) == len(FEATURE_NAMES)
    assert plain["parallel"] == 1 and plain["lanes"] == 1  # no parallel loop, no vector: log2(1 + 1)
    assert plain["iterations"] == pytest.approx(np.log2(1 + 16 * 16 * 8))
    assert count_flops(func) == 2 * 16 * 16 * 8


@pytest.mark.parametrize("model_class", [RidgeModel, XGBModel])
def test_cost_models_learn_a_ranking(model_class):
    if model_class is XGBModel and not xgboost_available():
        pytest.skip("xgboost is not installed")
    rng = np.random.default_rng()
    x = rng.uniform(0, 4, (80, 5))
    y = 2.0 * x[:, 0] - x[:, 1]
    model = model_class()
    assert np.all(model.predict(x[:3]) == 0)
    model.update(x, y)
    test = rng.uniform(0.5, 3.5, (30, 5))
    want = 2.0 * test[:, 0] - test[:, 1]
    got = model.predict(test)
    assert np.corrcoef(got, want)[0, 1] > 0.9


def _row_softmax_reference(arrays):
    x = arrays[0].astype("float64")
    e = np.exp(x - x.max(axis=1, keepdims=True))
    arrays[1][...] = e / e.sum(axis=1, keepdims=True)


def test_the_first_batch_measures_the_schedule_graph_build_gives():
    from refcomp.graph.passes.default_schedule import prepare_kernel, schedule_kernel

    func = prepare_kernel(workloads.softmax(8, 64))
    db = Database()
    result = tune(func, "c", trials=3, database=db, batch=3, population=6, seed=random.randrange(2**20),
                  reference=_row_softmax_reference, runner=Runner(workers=2, timeout_s=60))
    assert result.trials == 3 and not result.failures
    graph_default = schedule_kernel(func, prepared=True)
    replayed = [replay(func, record).func.with_attr("scheduled", True) for record in db.records]
    assert any(structural_equal(f, graph_default) for f in replayed)
    # so the best the search returns is at most the default's own measured time
    default_time = next(r.mean_time for r, f in zip(db.records, replayed) if structural_equal(f, graph_default))
    assert result.best_time <= default_time
