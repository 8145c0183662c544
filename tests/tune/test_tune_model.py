"""Whole-model tuning: tasks extracted from a graph module, one budget shared, records applied by graph.build."""
import random

import numpy as np
import pytest

import refcomp
from refcomp.ast.structural import structural_equal
from refcomp.errors import BuildError, RefcompError
from refcomp.graph import BlockBuilder, Var, op, tensor
from refcomp.tune import Database, Runner, extract_tasks, replay, structural_hash, tune_model


def two_layer_mlp():
    """relu(x @ w1) -> relu(. @ w2) -> relu(. @ w2): the second and third layers are one kernel."""
    x = Var("x", tensor((12, 8)))
    w1 = Var("w1", tensor((8, 16)))
    w2 = Var("w2", tensor((16, 16)))
    bb = BlockBuilder()
    with bb.function("main", [x, w1, w2]):
        with bb.dataflow():
            h = bb.emit(op.relu(op.matmul(x, w1)))
            g = bb.emit(op.relu(op.matmul(h, w2)))
            out = bb.emit_output(op.relu(op.matmul(g, w2)))
        bb.emit_func_output(out)
    return bb.get()


def mlp_reference(x, w1, w2):
    h = np.maximum(x @ w1, 0)
    return np.maximum(np.maximum(h @ w2, 0) @ w2, 0)


def test_tasks_are_the_distinct_kernels_weighted_by_calls():
    tasks = extract_tasks(two_layer_mlp(), blas=False)
    hashes = [t.workload for t in tasks]
    assert len(hashes) == len(set(hashes))
    assert sum(t.weight for t in tasks) == 3
    assert sorted(t.weight for t in tasks) == [1, 2]  # the repeated layer is one task, called twice
    assert all(structural_hash(t.func) == t.workload and t.flops > 0 for t in tasks)


def test_tune_model_shares_the_budget_and_build_applies_the_records(tmp_path, monkeypatch):
    import refcomp.tune.model as model_module

    made = []
    real_checker = model_module.Checker

    def counting_checker(func, *args, **kwargs):  # gives a plain Checker: it pickles without cloudpickle
        made.append(structural_hash(func))
        return real_checker(func, *args, **kwargs)

    monkeypatch.setattr(model_module, "Checker", counting_checker)
    mod = two_layer_mlp()
    db = Database(tmp_path / "model.jsonl")
    rounds = []
    result = tune_model(mod, trials=8, database=db, batch=2, population=4, seed=random.randrange(2**20), blas=False,
                        runner=Runner(workers=2, timeout_s=300), progress=lambda *a: rounds.append(a))
    assert result.trials == 8 and sum(r.trials for r in result.tasks) == 8
    # the reference ran once per task, for all of its rounds and its final comparison
    assert sorted(made) == sorted(r.task.workload for r in result.tasks) and len(rounds) > len(made)
    assert all(r.trials >= 2 for r in result.tasks)  # every task had a round before any got a second
    done = [r[0] for r in rounds]  # a task whose small space runs out mid-round measures fewer
    assert done == sorted(set(done)) and done[0] == 2 and done[-1] == 8
    assert all(r.best_time < float("inf") for r in result.tasks)
    assert result.weighted_time > 0
    for report in result.tasks:
        assert report.best_time == min(r.mean_time for r in db.query(report.task.workload, "c"))
        best = db.best(report.task.workload, "c")  # the winner of the task's final comparison
        assert best is not None and best is report.final.record and best.final["contestants"] >= 1
        assert structural_equal(db.schedule_for(report.task.func, "c"), replay(report.task.func, best).func)

    def build_and_run(seed):
        rng = np.random.default_rng(seed)
        x, w1, w2 = (rng.uniform(-1, 1, s).astype("float32") for s in ((12, 8), (8, 16), (16, 16)))
        ex = refcomp.graph.build(mod, blas=False, tuning_database=Database(tmp_path / "model.jsonl"))
        got = refcomp.runtime.VirtualMachine(ex)["main"](x, w1, w2)
        return ex.stats["tuned_kernels"], np.asarray(got), mlp_reference(x, w1, w2)

    # in this process: the tuner's candidates come from a fork server, so OpenMP here is harmless
    tuned, got, want = build_and_run(random.randrange(2**20))
    # two kernels: the first layer and the one kernel the identical second and third layers share
    assert tuned == sum(len(r.task.names) for r in result.tasks) == 2
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_bad_tuning_database_and_budget_are_refused():
    with pytest.raises(BuildError, match="schedule_for"):
        refcomp.graph.build(two_layer_mlp(), blas=False, tuning_database=object())
    with pytest.raises(RefcompError, match="trials"):
        tune_model(two_layer_mlp(), trials=0, database=Database())


def test_a_module_with_nothing_to_tune_is_a_clear_error():
    from refcomp.ast import SizeVar

    n = SizeVar("batch", "int64")
    x = Var("x", tensor((n, 8)))
    w = Var("w", tensor((8, 16)))
    bb = BlockBuilder()
    with bb.function("main", [x, w], attrs={"tir_var_upper_bound": {"batch": 64}}):
        with bb.dataflow():
            out = bb.emit_output(op.relu(op.matmul(x, w)))
        bb.emit_func_output(out)
    with pytest.raises(RefcompError, match="no kernel with constant shapes"):
        tune_model(bb.get(), trials=4, database=Database())


def test_tuning_and_building_with_their_defaults_meet_on_the_same_kernels():
    """tune_model and graph.build both take blas=None by default, meaning the same thing, so every
    task tuned with the defaults is a kernel graph.build(mod, tuning_database=db) then runs."""
    from refcomp.graph.pipeline import resolve_blas

    x = Var("x", tensor((16, 32)))
    w = Var("w", tensor((32, 64)))
    bb = BlockBuilder()
    with bb.function("main", [x, w]):
        with bb.dataflow():
            out = bb.emit_output(op.relu(op.matmul(x, w)))
        bb.emit_func_output(out)
    mod = bb.get()
    as_build_decides = extract_tasks(mod, blas=resolve_blas(None, "c"))
    assert [t.workload for t in extract_tasks(mod)] == [t.workload for t in as_build_decides]
    db = Database()
    result = tune_model(mod, trials=2, database=db, batch=2, population=4, seed=random.randrange(2**20), final=0)
    ex = refcomp.graph.build(mod, tuning_database=db)
    assert ex.stats["tuned_kernels"] == sum(len(r.task.names) for r in result.tasks if r.best_time < float("inf")) >= 1
    rng = np.random.default_rng()
    xv, wv = rng.uniform(-1, 1, (16, 32)).astype("float32"), rng.uniform(-1, 1, (32, 64)).astype("float32")
    got = refcomp.runtime.VirtualMachine(ex)["main"](xv, wv)
    np.testing.assert_allclose(np.asarray(got), np.maximum(xv @ wv, 0), rtol=1e-4, atol=1e-4)
