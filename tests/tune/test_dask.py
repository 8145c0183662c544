"""Tuning on a Dask cluster: a real LocalCluster of two worker processes on this machine.

The build hook plants a sleep in every kernel, a fixed function of the schedule, so which
candidate is fastest does not depend on the machine's load; the same seed and budget must then
give the same candidates and the same best trace locally and on the cluster.  A worker killed
with SIGKILL mid-measurement must cost no committed record and no trial.
"""
import os
import random
import signal
import threading
import time

import pytest

from refcomp import workloads
from refcomp.errors import RefcompError
from refcomp.tune import DaskRunner, Database, Runner, TuningRecord, machine_description, structural_hash, tune
from refcomp.tune.dask_runner import dask_address, resolve_runner
from refcomp.tune.runner import default_build

distributed = pytest.importorskip("distributed")


def _matmul_reference(arrays):
    arrays[2][...] = arrays[0] @ arrays[1]


def planted_delay(func) -> float:
    """Seconds every call of the scheduled func sleeps: 1 to 41 ms, a function of its hash."""
    return 0.001 + 0.04 * (int(structural_hash(func), 16) % 2**20) / 2**20


class SleepyBuild:
    """Builds the kernel and adds `scale` times the planted delay to every call."""

    def __init__(self, scale=1.0):
        self.scale = scale

    def __call__(self, func, target):
        kernel = default_build(func, target)
        delay = planted_delay(func) * self.scale

        def call(*arrays):
            kernel(*arrays)
            time.sleep(delay)
        return call


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None) \
            as cluster, distributed.Client(cluster) as client:
        yield client


SETTINGS = dict(trials=4, batch=4, population=4, generations=0, seed=11, reference=_matmul_reference)


def test_a_run_on_the_cluster_reaches_the_local_runs_best_trace(client, tmp_path):
    func = workloads.matmul(32, 32, 8)  # a space of more than 4 distinct schedules
    # planted sleeps of 5 to 205 ms; measurements closer than 40 ms may swap: on a loaded machine a
    # sleeping call wakes late by a scheduler slice or more, and a run time is a mean of few calls
    scale, noise_s = 5.0, 0.04
    build = SleepyBuild(scale)
    local_db = Database(tmp_path / "local.jsonl")
    local = tune(func, "c", database=local_db, runner=Runner(timeout_s=120, repeats=2, build=build), **SETTINGS)
    cluster_db = Database(tmp_path / "cluster.jsonl")
    foreign = TuningRecord(structural_hash(func), "c", local_db.records[0].trace, (1e-9,), machine="another machine")
    cluster_db.commit(foreign)  # measured elsewhere: never reused here
    remote = tune(func, "c", database=cluster_db, runner=DaskRunner(client, timeout_s=120, repeats=2, build=build),
                  **SETTINGS)
    assert local.trials == remote.trials == 4 and not local.failures and not remote.failures
    local_traces = [r.trace for r in local_db.records]
    remote_records = [r for r in cluster_db.records if r is not foreign]
    assert [r.trace for r in remote_records] == local_traces  # the same candidates, in the same order
    assert {r.machine for r in remote_records} == {machine_description()}
    assert remote.best_time > 1e-9
    delays = sorted(scale * planted_delay(replay_func(func, trace)) for trace in local_traces)
    near_best = [d for d in delays if d - delays[0] <= noise_s]
    assert scale * planted_delay(local.schedule.func) in near_best
    assert scale * planted_delay(remote.schedule.func) in near_best
    if len(near_best) == 1:  # the planted sleeps tell the best apart from the rest
        assert remote.schedule.trace.to_json() == local.schedule.trace.to_json()


def replay_func(func, trace):
    from refcomp.tune import replay

    return replay(func, trace).func


def test_runner_specs_are_checked(client, monkeypatch):
    assert dask_address("dask://scheduler:8786") == "tcp://scheduler:8786"
    assert dask_address("dask://tls://scheduler:8786") == "tls://scheduler:8786"
    with pytest.raises(RefcompError, match="dask://HOST:PORT"):
        resolve_runner("tcp://scheduler:8786", "c")
    with pytest.raises(RefcompError, match="runner"):
        resolve_runner(42, "c")
    assert isinstance(resolve_runner(client, "c"), DaskRunner)
    runner = DaskRunner(client)
    assert runner.machine() == machine_description()
    monkeypatch.setattr(DaskRunner, "worker_machines", lambda self: {"tcp://a:1": "x86_64 AVX2", "tcp://b:2": "aarch64"})
    with pytest.raises(RefcompError, match="different machines"):
        runner.machine()
    with pytest.raises(RefcompError, match="distributed.Client"):
        DaskRunner("tcp://scheduler:8786")


def _kill_a_measuring_worker(client, path, killed):
    """Once the first batch is committed, SIGKILL a worker process while it measures a candidate."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().count("\n") >= 4:
            break
        time.sleep(0.2)
    while time.monotonic() < deadline and not killed:
        busy = [address for address, keys in client.processing().items()
                if any("_measure_on_worker" in str(key) for key in keys)]
        if busy:
            pids = client.run(os.getpid)
            killed["committed"] = path.read_bytes()
            os.kill(pids[busy[0]], signal.SIGKILL)
            killed["pid"] = pids[busy[0]]
            return
        time.sleep(0.1)


def test_a_worker_killed_mid_measurement_costs_no_committed_record(client, tmp_path):
    func = workloads.matmul(128, 128, 64)  # enough distinct schedules for two batches of 4 (for every seed)
    path = tmp_path / "db.jsonl"
    killed: dict = {}
    killer = threading.Thread(target=_kill_a_measuring_worker, args=(client, path, killed), daemon=True)
    killer.start()
    runner = DaskRunner(client, timeout_s=120, repeats=1, build=SleepyBuild(scale=5.0))
    result = tune(func, "c", trials=8, batch=4, population=4, generations=0, seed=random.randrange(2**20),
                  database=Database(path), reference=_matmul_reference, runner=runner)
    killer.join(10)
    assert "pid" in killed, "no worker was measuring after the first batch"
    assert result.trials == 8
    assert {f.result.status for f in result.failures} <= {"crash"}
    data = path.read_bytes()
    assert data.startswith(killed["committed"])  # every record committed before the kill, byte for byte
    reloaded = Database(path)
    assert reloaded.skipped == 0 and len(reloaded.records) == 8 - len(result.failures)
    assert len({r.key for r in reloaded.records}) == len(reloaded.records)
