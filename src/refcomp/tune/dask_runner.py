"""The Dask backend of the runner: candidates built and measured on the workers of a Dask cluster.

    tune(func, "c", trials=256, runner="dask://scheduler-host:8786", database=Database("shared.jsonl"))
    tune(func, "c", trials=256, runner=distributed.Client(...))

The search, the cost model and the database stay in the tuning process (the driver); each
candidate is one Dask task.  On its worker the task builds and runs the candidate in a fresh
process with the runner's time limit (`Runner.run_one`: build, check against the reference's
outputs, time), so a crashing or hanging candidate never takes its worker down, and it returns a
`MeasureResult` naming the worker's machine.  Results come back in the candidates' order, so the
search does not depend on which worker finished first.

The workload (function, build hook, the checker's inputs and expected outputs) is pickled once
per batch into one task whose result every measuring task reads; it is a task, not scattered
data, so the scheduler can compute it again when the worker holding it dies.  When a worker dies
mid-measurement, the scheduler runs its tasks again on other workers; a candidate whose workers
died more often than the scheduler allows (`distributed.scheduler.allowed-failures`, 3 by
default) is reported as a `crash`, and the run goes on.

Dask is optional (`pip install refcomp[distributed]`); this module imports it only when a
`DaskRunner` is made.
"""
from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..ast import PrimFunc
from ..errors import RefcompError
from . import isolate
from .runner import Candidate, Checker, MeasureResult, Runner, RunnerBackend, default_build, machine_description

_CLIENTS: dict[str, Any] = {}


def _distributed() -> Any:
    try:
        import distributed
    except ImportError as error:
        raise ModuleNotFoundError("refcomp.tune.DaskRunner needs Dask distributed: pip install 'refcomp[distributed]'",
                                  name="distributed") from error
    return distributed


def dask_address(spec: str) -> str:
    """The scheduler address of a runner spec "dask://HOST:PORT" (tcp) or "dask://PROTOCOL://HOST:PORT"."""
    if not isinstance(spec, str) or not spec.startswith("dask://") or len(spec) <= len("dask://"):
        raise RefcompError(f"tune: runner: expected 'dask://HOST:PORT', a distributed.Client or a Runner, "
                           f"got {spec!r}")
    rest = spec[len("dask://"):]
    return rest if "://" in rest else "tcp://" + rest


def _hold(payload: bytes) -> bytes:
    return payload


def _measure_on_worker(payload: bytes, trace: dict, target: str, timeout_s: float, repeats: int) -> MeasureResult:
    """One candidate on a Dask worker: build, check and time it in a fresh process there."""
    func, checker, build = pickle.loads(payload)
    runner = Runner(target=target, workers=1, timeout_s=timeout_s, repeats=repeats, build=build)
    return runner.run_one(func, Candidate(trace), checker)


@dataclass
class DaskRunner:
    """Measures candidates on the workers of a Dask cluster (`client`: a `distributed.Client`).

    timeout_s limits the build and the run of one candidate together, on its worker; repeats is
    the number of timed calls; build is the build hook (it must pickle, see `isolate`)."""

    client: Any
    target: str = "c"
    timeout_s: float = 60.0
    repeats: int = 3
    build: Callable[[PrimFunc, str], Callable[..., None]] = default_build

    def __post_init__(self) -> None:
        distributed = _distributed()
        if not isinstance(self.client, distributed.Client):
            raise RefcompError(f"DaskRunner: client: expected a distributed.Client, got {type(self.client).__name__}")
        if not isinstance(self.timeout_s, (int, float)) or not self.timeout_s > 0:
            raise RefcompError(f"DaskRunner: timeout_s: expected a positive number of seconds, got {self.timeout_s!r}")
        if isinstance(self.repeats, bool) or not isinstance(self.repeats, int) or self.repeats < 1:
            raise RefcompError(f"DaskRunner: repeats: expected a positive int, got {self.repeats!r}")

    @classmethod
    def connect(cls, spec: str, **settings: Any) -> "DaskRunner":
        """A runner on the cluster at spec ("dask://HOST:PORT"); one client per address per process."""
        address = dask_address(spec)
        client = _CLIENTS.get(address)
        if client is None or client.status not in ("running", "connecting"):
            try:
                client = _distributed().Client(address, timeout="30s")
            except OSError as error:
                raise RefcompError(f"tune: cannot reach the Dask scheduler at {address}: {error}") from error
            _CLIENTS[address] = client
        return cls(client, **settings)

    def worker_machines(self) -> dict[str, str]:
        """Each worker's address and the machine it measures on (`machine_description()` there)."""
        return dict(self.client.run(machine_description, self.target))

    def machine(self) -> str:
        """The machine every worker measures on; a RefcompError when there are no workers or they differ."""
        machines = self.worker_machines()
        if not machines:
            raise RefcompError(f"DaskRunner: the cluster at {self.client.scheduler.address} has no workers")
        kinds = sorted(set(machines.values()))
        if len(kinds) > 1:
            listing = "; ".join(f"{address}: {kind}" for address, kind in sorted(machines.items()))
            raise RefcompError(f"DaskRunner: the workers measure on different machines ({listing}); records are "
                               f"only comparable on one target: tune on a cluster of one machine kind")
        return kinds[0]

    def measure(self, func: PrimFunc, candidates: Sequence[Candidate], checker: Checker) -> list[MeasureResult]:
        """A result for every candidate, in order; a candidate lost with its workers is a `crash`."""
        distributed = _distributed()
        if not candidates:
            return []
        payload = isolate.dumps((func, checker, self.build), "the workload with its build hook and checker")
        held = self.client.submit(_hold, payload, pure=False)
        futures = [self.client.submit(_measure_on_worker, held, candidate.trace, self.target, self.timeout_s,
                                      self.repeats, pure=False)
                   for candidate in candidates]
        results = []
        for future in futures:
            try:
                results.append(future.result())
            except distributed.KilledWorker as error:
                results.append(MeasureResult("crash", (), f"the workers measuring it died, more often than the "
                                                          f"scheduler retries a task: {error}"))
            except Exception as error:  # a task that raised on its worker: report it, go on
                results.append(MeasureResult("run_error", (), f"{type(error).__name__}: {error}"))
        for future in futures + [held]:
            future.release()
        return results


def resolve_runner(runner: Any, target: str) -> RunnerBackend:
    """The runner tune uses: a local `Runner` by default, a `DaskRunner` for "dask://ADDRESS" or a
    `distributed.Client`, or any `RunnerBackend` given."""
    if runner is None:
        return Runner(target=target)
    if isinstance(runner, str):
        return DaskRunner.connect(runner, target=target)
    if type(runner).__module__.split(".")[0] == "distributed" and type(runner).__name__ == "Client":
        return DaskRunner(runner, target=target)
    if not isinstance(runner, RunnerBackend):
        raise RefcompError(f"tune: runner: expected a Runner, a runner backend, 'dask://HOST:PORT' or a "
                           f"distributed.Client, got {type(runner).__name__}")
    return runner
