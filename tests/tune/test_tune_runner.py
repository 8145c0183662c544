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
from refcomp.tune.runner import default_build, machine_description, random_arguments


def _matmul_reference(arrays):
    arrays[2][...] = arrays[0] @ arrays[1]


def _candidates(func, count, seed):
    schedules = DesignSpace().sample_many(func, count, random.Random(seed))
    assert len(schedules) == count
    return schedules, [Candidate(json.loads(s.trace.to_json())) for s in schedules]


class PlantedBuild:
    """A build hook that gives the scheduled function with hash h the behaviour plan[h] (a module-level
    class, so the hook pickles into the worker processes)."""

    def __init__(self, plan):
        self.plan = plan

    def __call__(self, func, target):
        behaviour = self.plan.get(structural_hash(func), "good")
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


def _build_nothing(func, target):
    return lambda *arrays: None


def test_crashing_hanging_and_wrong_candidates_are_reported_and_the_rest_measured():
    func = workloads.matmul(16, 16, 8)
    schedules, candidates = _candidates(func, 5, seed=random.randrange(2**20))
    behaviours = ["crash", "hang", "wrong", "raise", "good"]
    plan = {structural_hash(s.func): b for s, b in zip(schedules, behaviours)}
    if len(plan) < 5:
        pytest.skip("two sampled schedules coincide")
    runner = Runner(workers=2, timeout_s=20, build=PlantedBuild(plan))
    runner_fast = Runner(workers=2, timeout_s=6, build=PlantedBuild(plan))
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


def test_a_workload_too_large_for_the_interpreter_is_checked_against_its_compiled_loop_nest(monkeypatch):
    import refcomp.tune.runner as runner_module

    rng = random.Random()
    m, n, k = rng.randint(5, 40), rng.randint(5, 40), rng.randint(3, 24)
    func = workloads.matmul(m, n, k)
    monkeypatch.setattr(runner_module, "INTERPRETER_MAX_OPS", 2 * m * n * k - 1)

    def no_interpreter(*args, **kwargs):
        raise AssertionError("the interpreter ran for a workload above INTERPRETER_MAX_OPS")

    monkeypatch.setattr(runner_module, "interpret", no_interpreter)
    checker = Checker(func, seed=rng.randrange(2**20))
    a, b, _ = checker.inputs
    assert np.abs(a).max() > 0 and np.abs(b).max() > 0
    np.testing.assert_allclose(checker.expected[2], a.astype(np.float64) @ b, rtol=1e-4, atol=1e-5)
    schedules, candidates = _candidates(func, 1, seed=rng.randrange(2**20))
    planted = Runner(workers=1, timeout_s=60, build=PlantedBuild({structural_hash(schedules[0].func): "wrong"}))
    assert planted.measure(func, candidates, checker)[0].status == "wrong"
    assert Runner(workers=1, timeout_s=60).measure(func, candidates, checker)[0].ok


def test_a_small_workload_is_checked_against_the_interpreter(monkeypatch):
    import refcomp.tune.runner as runner_module

    func = workloads.matmul(6, 5, 4)
    assert runner_module.count_flops(func) <= runner_module.INTERPRETER_MAX_OPS
    calls = []
    real = runner_module.interpret
    monkeypatch.setattr(runner_module, "interpret", lambda *args: calls.append(1) or real(*args))
    checker = Checker(func, seed=random.randrange(2**20))
    a, b, c = checker.expected
    assert calls == [1]
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-6)


def test_a_candidate_far_slower_than_the_best_is_checked_and_timed_once():
    func = workloads.matmul(16, 16, 8)
    _, candidates = _candidates(func, 1, seed=random.randrange(2**20))
    runner = Runner(workers=1, timeout_s=60)
    checker = Checker(func, _matmul_reference, seed=random.randrange(2**20))
    [first] = runner.measure(func, candidates, checker)
    assert first.ok and len(first.run_times) == runner.repeats and checker.best_time == first.mean_time
    checker.best_time = 1e-12  # as if a candidate 10**-12 s fast had been measured: this one is hopeless
    [slow] = runner.measure(func, candidates, checker)
    assert slow.ok and len(slow.run_times) == 1 and checker.best_time == 1e-12
    planted = Runner(workers=1, timeout_s=60, build=_build_nothing)
    assert planted.measure(func, candidates, checker)[0].status == "wrong"  # the check still comes first


def test_a_kernel_that_writes_nothing_is_wrong():
    func = workloads.matmul(8, 8, 4)
    _, candidates = _candidates(func, 1, seed=1)
    runner = Runner(timeout_s=60, build=_build_nothing)
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


def test_tuning_works_in_a_process_that_has_run_openmp_kernels():
    import refcomp

    func = workloads.matmul(32, 32, 16)
    schedules, candidates = _candidates(func, 2, seed=random.randrange(2**20))
    rng = np.random.default_rng()
    a, b = rng.uniform(-1, 1, (32, 16)).astype("float32"), rng.uniform(-1, 1, (16, 32)).astype("float32")
    c = np.full((32, 32), 3.0, dtype="float32")
    for sch in schedules:  # sampled schedules run their outer loops in parallel: OpenMP starts here
        refcomp.build(sch.func)(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    results = Runner(workers=2, timeout_s=60).measure(func, candidates, Checker(func, _matmul_reference))
    assert [r.status for r in results] == ["ok", "ok"]
    assert all(r.machine == machine_description() for r in results)


def test_a_daemonic_process_measures_in_fresh_interpreters(monkeypatch):
    from refcomp.tune import isolate

    monkeypatch.setattr(isolate, "_daemonic", lambda: True)
    assert isolate.method() == "exec"
    func = workloads.matmul(8, 8, 4)
    schedules, candidates = _candidates(func, 2, seed=random.randrange(2**20))
    plan = {structural_hash(schedules[0].func): "crash"}
    if len({structural_hash(s.func) for s in schedules}) < 2:
        pytest.skip("the two sampled schedules coincide")
    results = Runner(workers=1, timeout_s=60, build=PlantedBuild(plan)).measure(
        func, candidates, Checker(func, _matmul_reference))
    assert [r.status for r in results] == ["crash", "ok"]


def test_a_script_that_tunes_at_its_top_level_runs_once_and_measures(tmp_path):
    """A script without an `if __name__ == "__main__":` guard (as README's snippets are written):
    the children do not run it again, so its candidates are measured, not all failed."""
    import subprocess
    import sys

    script = tmp_path / "tune_at_top_level.py"
    script.write_text(
        "import json, random\n"
        "from refcomp import workloads\n"
        "from refcomp.tune import Candidate, Checker, DesignSpace, Runner\n"
        "print('top level ran', flush=True)\n"
        "func = workloads.matmul(8, 8, 4)\n"
        f"schedule = DesignSpace().sample_many(func, 1, random.Random({random.randrange(2**20)}))[0]\n"
        "candidates = [Candidate(json.loads(schedule.trace.to_json()))]\n"
        "results = Runner(workers=1, timeout_s=120).measure(func, candidates, Checker(func))\n"
        "print('statuses', [r.status for r in results])\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("top level ran") == 1, done.stdout
    assert "statuses ['ok']" in done.stdout, done.stdout + done.stderr[-2000:]


class _Unpicklable:
    def __init__(self):
        import threading

        self.lock = threading.Lock()

    def __call__(self, func, target):
        return default_build(func, target)


def test_a_build_hook_that_cannot_reach_the_workers_is_a_clear_error():
    func = workloads.matmul(8, 8, 4)
    _, candidates = _candidates(func, 1, seed=1)
    with pytest.raises(RefcompError, match="cannot be sent to a worker process"):
        Runner(build=_Unpicklable()).measure(func, candidates, Checker(func, _matmul_reference))


def test_the_dask_runner_without_dask_names_the_extra_to_install(monkeypatch):
    import sys

    from refcomp.tune.dask_runner import resolve_runner

    monkeypatch.setitem(sys.modules, "distributed", None)  # makes `import distributed` fail as if not installed
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'refcomp\[distributed\]'"):
        resolve_runner("dask://scheduler:8786", "c")
    with pytest.raises(RefcompError, match="dask://HOST:PORT"):
        resolve_runner("scheduler:8786", "c")


def test_the_build_process_sends_the_kernel_so_the_run_process_need_not_replay():
    import pickle

    func = workloads.matmul(16, 32, 8)
    _, candidates = _candidates(func, 1, random.randrange(2**20))
    runner = Runner(workers=1, timeout_s=120)
    (result, built), = runner._build_all(func, candidates)
    assert result.ok and isinstance(built, bytes)  # the IR's mapping attributes pickle too
    kernel = pickle.loads(built)
    arrays = random_arguments(func, random.randrange(2**20))
    want = arrays[0] @ arrays[1]
    kernel(*arrays)
    np.testing.assert_allclose(arrays[2], want, rtol=1e-5, atol=1e-5)
    checker = Checker(func, _matmul_reference, seed=random.randrange(2**20))
    assert runner.run_one(func, candidates[0], checker, built).ok


def test_a_checker_writes_its_files_once_and_removes_them_with_itself():
    import gc
    import pickle

    from refcomp.tune.isolate import dumps

    func = workloads.matmul(256, 256, 256)
    checker = Checker(func, _matmul_reference, seed=random.randrange(2**20))
    with checker.in_files():
        first = pickle.loads(dumps(checker))
        paths = checker._paths
    stamps = [os.stat(p).st_mtime_ns for p in paths[0] + paths[1]]
    with checker.in_files():  # the next round of measurements: the same files, not written again
        assert checker._paths == paths
        second = pickle.loads(dumps(checker))
    assert [os.stat(p).st_mtime_ns for p in paths[0] + paths[1]] == stamps
    for a, b, want in zip(first.expected, second.expected, checker.expected):
        np.testing.assert_array_equal(a, want)
        np.testing.assert_array_equal(b, want)
    del checker, first, second
    gc.collect()
    assert not any(os.path.exists(p) for p in paths[0] + paths[1])


def test_a_large_checker_travels_as_files_while_the_runner_measures():
    import pickle

    from refcomp.tune.isolate import dumps

    func = workloads.matmul(256, 256, 256)  # inputs and expected outputs: 1.5 MB
    checker = Checker(func, _matmul_reference, seed=random.randrange(2**20))
    whole = len(dumps(checker))  # (the pickler of the tuner's processes: IR mappings included)
    with checker.in_files():
        small = dumps(checker)
        copy = pickle.loads(small)
    assert len(small) < whole // 10 and "_paths" not in checker.__dict__
    assert len(dumps(checker)) == whole  # after the context: the arrays themselves again
    for got, want in zip(copy.inputs + copy.expected, checker.inputs + checker.expected):
        np.testing.assert_array_equal(got, want)
    arrays = copy.fresh_arguments()
    assert all(a.flags.writeable for a in arrays)
    arrays[2][...] = arrays[0] @ arrays[1]
    assert copy.mismatch(arrays) is None
    _, candidates = _candidates(func, 1, random.randrange(2**20))
    assert Runner(workers=1, timeout_s=300).measure(func, candidates, checker)[0].ok


def test_the_tuning_clock_is_wall_time_or_cpu_time_as_the_environment_says(monkeypatch):
    """REFCOMP_TUNE_CLOCK=cpu times by process CPU time (a kernel waiting on nothing but the clock
    costs none), wall (or unset) by wall time; another value is a named error."""
    from refcomp.tune.final import _timer
    from refcomp.tune.runner import tune_clock

    def sleepy(*arrays):
        time.sleep(0.05)

    monkeypatch.delenv("REFCOMP_TUNE_CLOCK", raising=False)
    assert tune_clock() is time.perf_counter
    assert _timer(sleepy, [])() >= 0.05
    monkeypatch.setenv("REFCOMP_TUNE_CLOCK", "cpu")
    assert tune_clock() is time.process_time
    assert _timer(sleepy, [])() < 0.05
    monkeypatch.setenv("REFCOMP_TUNE_CLOCK", "fast")
    with pytest.raises(RefcompError, match="REFCOMP_TUNE_CLOCK='fast'"):
        tune_clock()


@pytest.mark.parametrize("dtype, shape", [("float32", (3, 5)), ("float64", (7,)), ("int8", (2, 3, 5)),
                                          ("bool", (4, 1)), ("float32", (0, 3))])
def test_candidates_run_on_arrays_that_start_on_a_cache_line(dtype, shape):
    """random_arguments, a checker's fresh arguments and aligned_copy give C-contiguous arrays on a
    64-byte boundary with the values of the original (an empty one: its shape and type)."""
    from refcomp.tune.runner import ALIGNMENT, aligned_copy

    rng = np.random.default_rng(random.randrange(2**20))
    source = (rng.uniform(-1, 1, shape) * 10).astype(dtype)[..., ::1]
    for offset in range(0, 64, 4):  # wherever the original starts
        base = np.empty(source.nbytes + 64, np.uint8)[offset:offset + source.nbytes].view(dtype).reshape(shape)
        base[...] = source
        copy = aligned_copy(base)
        assert copy.flags.c_contiguous and copy.dtype == source.dtype
        assert copy.size == 0 or copy.ctypes.data % ALIGNMENT == 0  # (an empty array has no data)
        np.testing.assert_array_equal(copy, source)
    func = workloads.matmul(5, 3, 7)
    arrays = random_arguments(func, random.randrange(2**20))
    assert all(a.ctypes.data % ALIGNMENT == 0 for a in arrays)
    assert all(a.ctypes.data % ALIGNMENT == 0 for a in Checker(func, _matmul_reference).fresh_arguments())
