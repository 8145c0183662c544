"""Builder and runner: every candidate is built and run in its own worker process, with a time
limit, and checked against the reference on random data before its time counts.

Building runs in parallel (`workers` processes at a time; the compiled library lands in the
content-hashed build cache); running is one process at a time so candidates do not disturb each
other's timings.  A candidate whose process dies (a crashing kernel), does not finish within
`timeout_s` (a hanging kernel), raises, or produces a result that differs from the reference is
reported with its status and message and given no time; the search goes on.

Worker processes are forked: the parent never runs kernels itself, so no OpenMP thread pool is
inherited, and the function, the inputs and the expected outputs reach the child without pickling.
A process that has already run an OpenMP kernel (GNU libgomp keeps its thread pool across fork
but not its threads) must not tune: its forked children would wait forever for pool threads and
be reported as timeouts. Tune in a fresh process (`refcomp tune`, `benchmarks/tune.py`).
"""
from __future__ import annotations

import faulthandler
import multiprocessing
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from ..ast import Buffer, PrimFunc
from ..errors import RefcompError
from ..loops.interpreter import interpret
from ..loops.schedule import Schedule
from ..loops.primitives.legality import const_int

STATUSES = ("ok", "build_error", "run_error", "crash", "timeout", "wrong")


@dataclass(frozen=True)
class MeasureResult:
    """What became of one candidate: status (one of STATUSES), run times (seconds) when ok, a message."""

    status: str
    run_times: tuple[float, ...] = ()
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def mean_time(self) -> float:
        return sum(self.run_times) / len(self.run_times) if self.run_times else float("inf")


def default_build(func: PrimFunc, target: str) -> Callable[..., None]:
    """refcomp.build as the tuner uses it: the kernel as a callable on numpy arrays."""
    from ..driver import build

    return build(func, target=target)


def random_arguments(func: PrimFunc, seed: int) -> list[np.ndarray]:
    """Fresh random arrays (uniform in [-1, 1), never all zeros) for every buffer parameter."""
    rng = np.random.default_rng(seed)
    arrays = []
    for param in func.params:
        if not isinstance(param, Buffer):
            raise RefcompError(f"tune: {func.name} takes a scalar parameter {param.name}; only buffer "
                               f"parameters with constant shapes can be tuned")
        shape = [const_int(d) for d in param.shape]
        if any(d is None for d in shape):
            raise RefcompError(f"tune: buffer {param.name} of {func.name} has a symbolic shape "
                               f"{param.shape}; tune a function with constant shapes")
        dtype = np.dtype(str(param.dtype))
        if dtype.kind == "f":
            arrays.append(rng.uniform(-1.0, 1.0, size=shape).astype(dtype))
        elif dtype.kind in "iu":
            arrays.append(rng.integers(1, 8, size=shape).astype(dtype))
        elif dtype.kind == "b":
            arrays.append(rng.integers(0, 2, size=shape).astype(dtype))
        else:
            raise RefcompError(f"tune: buffer {param.name} has element type {param.dtype}, which the "
                               f"tuner cannot fill with random data")
    return arrays


def interpreter_reference(func: PrimFunc) -> Callable[[list[np.ndarray]], None]:
    """The reference that runs the unscheduled function in the interpreter, in place."""
    return lambda arrays: interpret(func, *arrays)


@dataclass
class Checker:
    """Random inputs for a workload and the outputs the reference computes from them."""

    func: PrimFunc
    reference: Callable[[list[np.ndarray]], None] | None = None
    seed: int = 0
    rtol: float = 1e-3
    atol: float = 1e-4
    inputs: list[np.ndarray] = field(init=False)
    expected: list[np.ndarray] = field(init=False)

    def __post_init__(self) -> None:
        reference = self.reference or interpreter_reference(self.func)
        self.inputs = random_arguments(self.func, self.seed)
        self.expected = [a.copy() for a in self.inputs]
        reference(self.expected)

    def fresh_arguments(self) -> list[np.ndarray]:
        """Copies of the inputs; the output buffers are overwritten with garbage so a kernel that
        writes nothing cannot pass by leaving the reference's answer in place."""
        arrays = [a.copy() for a in self.inputs]
        for array, want, given in zip(arrays, self.expected, self.inputs):
            if not np.array_equal(want, given):
                array[...] = np.asarray(np.full(array.shape, 7), dtype=array.dtype)
        return arrays

    def mismatch(self, arrays: Sequence[np.ndarray]) -> str | None:
        """None when every array matches the reference's, else a message naming the first that does not."""
        for index, (got, want) in enumerate(zip(arrays, self.expected)):
            if got.dtype.kind == "f":
                scale = float(np.max(np.abs(want))) if want.size else 0.0
                close = np.allclose(got, want, rtol=self.rtol, atol=self.atol * max(1.0, scale))
            else:
                close = np.array_equal(got, want)
            if not close:
                param = self.func.params[index]
                worst = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))))
                return f"wrong result in {param.name}: max abs difference {worst:.3g} from the reference"
        return None


@dataclass(frozen=True)
class Candidate:
    """One schedule to measure: the trace (JSON object) replayed onto the workload's function."""

    trace: dict


def _scheduled(func: PrimFunc, trace: dict) -> PrimFunc:
    return Schedule.from_trace(func, trace).func


def _build_child(conn: Any, func: PrimFunc, trace: dict, target: str, build: Callable) -> None:
    try:
        build(_scheduled(func, trace), target)
        conn.send(("ok", (), ""))
    except RefcompError as error:
        conn.send(("build_error", (), f"{type(error).__name__}: {error}"))
    except BaseException:  # a child reports everything; the parent decides
        conn.send(("build_error", (), traceback.format_exc(limit=3)))


def _run_child(conn: Any, func: PrimFunc, trace: dict, target: str, build: Callable,
               checker: Checker, repeats: int) -> None:
    faulthandler.disable()  # a crashing candidate is reported by its exit code, without a dump
    try:
        kernel = build(_scheduled(func, trace), target)
    except BaseException:
        conn.send(("build_error", (), traceback.format_exc(limit=3)))
        return
    try:
        arrays = checker.fresh_arguments()
        kernel(*arrays)
        problem = checker.mismatch(arrays)
        if problem is not None:
            conn.send(("wrong", (), problem))
            return
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            kernel(*arrays)
            times.append(time.perf_counter() - start)
        conn.send(("ok", tuple(times), ""))
    except BaseException:
        conn.send(("run_error", (), traceback.format_exc(limit=3)))


def _context():
    return multiprocessing.get_context("fork")


def _finish(process: Any, conn: Any, deadline: float, what: str) -> MeasureResult:
    """Wait for one worker until deadline; its report, or crash/timeout when it gave none."""
    remaining = max(0.0, deadline - time.monotonic())
    if conn.poll(remaining):
        try:
            status, times, message = conn.recv()
        except (EOFError, OSError):
            status, times, message = None, (), ""
        process.join(5)
        if process.is_alive():
            process.kill()
            process.join()
        if status is not None:
            return MeasureResult(status, tuple(times), message)
    if process.is_alive():
        process.kill()
        process.join()
        return MeasureResult("timeout", (), f"{what} did not finish within the time limit")
    process.join()
    return MeasureResult("crash", (), f"{what} process died with exit code {process.exitcode}")


@dataclass
class Runner:
    """Builds candidates in parallel processes, then runs each in its own process, checked."""

    target: str = "c"
    workers: int = 2
    timeout_s: float = 30.0
    repeats: int = 3
    build: Callable[[PrimFunc, str], Callable[..., None]] = default_build

    def __post_init__(self) -> None:
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 1:
            raise RefcompError(f"Runner: workers: expected a positive int, got {self.workers!r}")
        if not isinstance(self.timeout_s, (int, float)) or not self.timeout_s > 0:
            raise RefcompError(f"Runner: timeout_s: expected a positive number of seconds, got {self.timeout_s!r}")
        if isinstance(self.repeats, bool) or not isinstance(self.repeats, int) or self.repeats < 1:
            raise RefcompError(f"Runner: repeats: expected a positive int, got {self.repeats!r}")

    def measure(self, func: PrimFunc, candidates: Sequence[Candidate], checker: Checker) -> list[MeasureResult]:
        """A result for every candidate, in order; never raises for a candidate's failure."""
        built = self._build_all(func, candidates)
        results = []
        for candidate, build_result in zip(candidates, built):
            if not build_result.ok:
                results.append(build_result)
                continue
            results.append(self._run_one(func, candidate, checker))
        return results

    def _build_all(self, func: PrimFunc, candidates: Sequence[Candidate]) -> list[MeasureResult]:
        ctx = _context()
        results: list[MeasureResult | None] = [None] * len(candidates)
        pending = list(enumerate(candidates))
        active: list[tuple[int, Any, Any, float]] = []
        while pending or active:
            while pending and len(active) < self.workers:
                index, candidate = pending.pop(0)
                receive, send = ctx.Pipe(duplex=False)
                process = ctx.Process(target=_build_child, args=(send, func, candidate.trace, self.target, self.build),
                                      daemon=True)
                process.start()
                send.close()
                active.append((index, process, receive, time.monotonic() + self.timeout_s))
            index, process, receive, deadline = active.pop(0)
            results[index] = _finish(process, receive, deadline, "the build")
            receive.close()
        return results  # type: ignore[return-value]

    def _run_one(self, func: PrimFunc, candidate: Candidate, checker: Checker) -> MeasureResult:
        ctx = _context()
        receive, send = ctx.Pipe(duplex=False)
        process = ctx.Process(target=_run_child, args=(send, func, candidate.trace, self.target, self.build,
                                                       checker, self.repeats), daemon=True)
        process.start()
        send.close()
        result = _finish(process, receive, time.monotonic() + self.timeout_s, "the candidate")
        receive.close()
        return result
