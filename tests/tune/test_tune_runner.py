"""The runner: every candidate in its own process, with a time limit, checked against the reference.

Faults are planted through the runner's build hook: a kernel that kills its process (as a bad
intrinsic's segfault would), one that never returns, one that writes a wrong answer.  Each is
reported with its status while the candidates after it are measured normally.
"""
import json
import os
import random
import time

import numpy as np
import pytest

from refcomp import workloads
from refcomp.errors import RefcompError
from refcomp.tune import Candidate, Checker, DesignSpace, Runner, structural_hash
from refcomp.tune.runner import default_build, random_arguments


def _matmul_reference(arrays):
    arrays[2][...] = arrays[0] @ arrays[1]


def _candidates(func, count, seed):
    schedules = DesignSpace().sample_many(func, count, random.Random(seed))
    assert len(schedules) == count
    return schedules, [Candidate(json.loads(s.trace.to_json())) for s in schedules]


def _planted_build(plan):
    """A build hook that gives the scheduled function with hash h the behaviour plan[h]."""
    def build(func, target):
        behaviour = plan.get(structural_hash(func), "good")
        kernel = default_build(func, target)
        if behaviour == "crash":
            return lambda *arrays: os.abort()
        if behaviour == "hang":
            return lambda *arrays: time.sleep(3600)
        if behaviour == "wrong":
            def wrong(*arrays):
                kernel(*arrays)
                arrays[-1][0, 0] += 1.0
            return wrong
        if behaviour == "raise":
            raise RuntimeError("planted build failure")
        return kernel
    return build


def test_crashing_hanging_and_wrong_candidates_are_reported_and_the_rest_measured():
    func = workloads.matmul(16, 16, 8)
    schedules, candidates = _candidates(func, 5, seed=random.randrange(2**20))
    behaviours = ["crash", "hang", "wrong", "raise", "good"]
    plan = {structural_hash(s.func): b for s, b in zip(schedules, behaviours)}
    if len(plan) < 5:
        pytest.skip("two sampled schedules coincide")
    runner = Runner(workers=2, timeout_s=20, build=_planted_build(plan))
    runner_fast = Runner(workers=2, timeout_s=6, build=_planted_build(plan))
    checker = Checker(func, _matmul_reference, seed=3)
    results = runner.measure(func, candidates[:1] + candidates[2:], checker)
    results.insert(1, runner_fast.measure(func, [candidates[1]], checker)[0])
    assert [r.status for r in results] == ["crash", "timeout", "wrong", "build_error", "ok"]
    assert "exit code" in results[0].message
    assert "time limit" in results[1].message
    assert "wrong result in C" in results[2].message
    assert "planted build failure" in results[3].message
    assert results[4].ok and len(results[4].run_times) == runner.repeats
    assert all(not r.run_times for r in results[:4])


def test_correct_candidates_pass_the_interpreter_reference():
    func = workloads.matmul(8, 8, 4)
    _, candidates = _candidates(func, 3, seed=random.randrange(2**20))
    results = Runner(workers=2, timeout_s=60).measure(func, candidates, Checker(func))
    assert [r.status for r in results] == ["ok"] * 3


def test_a_kernel_that_writes_nothing_is_wrong():
    func = workloads.matmul(8, 8, 4)
    _, candidates = _candidates(func, 1, seed=1)
    runner = Runner(timeout_s=60, build=lambda f, t: (lambda *arrays: None))
    [result] = runner.measure(func, candidates, Checker(func, _matmul_reference))
    assert result.status == "wrong"


def test_runner_settings_are_checked():
    with pytest.raises(RefcompError, match="workers"):
        Runner(workers=0)
    with pytest.raises(RefcompError, match="timeout_s"):
        Runner(timeout_s=-1)


def test_random_arguments_are_fresh_and_nonzero():
    func = workloads.matmul(8, 8, 4)
    first, second = random_arguments(func, 1), random_arguments(func, 2)
    assert all(np.count_nonzero(a) == a.size for a in first)
    assert not np.array_equal(first[0], second[0])


def test_symbolic_shapes_are_refused_with_a_clear_error():
    from refcomp import te

    with pytest.raises(RefcompError, match="symbolic shape"):
        random_arguments(workloads.exp_scale(te.var("n")), 0)
