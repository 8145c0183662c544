"""Builder and runner: every candidate is built and run in its own worker process, with a time
limit, and checked against the reference on random data before its time counts.

Building runs in parallel (`workers` processes at a time; the compiled library lands in the
content-hashed build cache); running is one process at a time so candidates do not disturb each
other's timings.  A candidate whose process dies (a crashing kernel), does not finish within
`timeout_s` (a hanging kernel), raises, or produces a result that differs from the reference is
reported with its status and message and given no time; the search goes on.

Worker processes come from `isolate` (a fork server, or a fresh interpreter in a daemonic
process), never from a plain fork of the tuning process, so tuning works in a process that has
already run OpenMP kernels.  The function, the trace, the build hook and the checker's arrays
reach the child by pickle; the reference runs only in the parent.

`Runner` is the local backend; any object with `target`, `machine()` and `measure(...)` is a
runner (`RunnerBackend`), such as `DaskRunner`, which measures on the workers of a Dask cluster.
Every result names the machine that measured it (`machine_description()`), so records are only
reused on a matching machine.
"""
from __future__ import annotations

import faulthandler
import os
import pickle
import shutil
import tempfile
import time
import traceback
import weakref
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Protocol, Sequence, runtime_checkable

import numpy as np

from ..ast import Buffer, PrimFunc
from ..errors import RefcompError
from ..loops.interpreter import interpret
from ..loops.schedule import Schedule
from ..loops.intrin import cpu
from ..loops.primitives.legality import const_int
from . import isolate
from .features import count_flops

STATUSES = ("ok", "build_error", "run_error", "crash", "timeout", "wrong")
# A run time of a candidate is the mean of as many calls (up to MAX_CALLS_PER_RUN) as last about
# MIN_RUN_SECONDS, after a warm-up call.
MIN_RUN_SECONDS = 2e-3

# The clock of every run time the tuner measures (the runner's workers, the final comparison):
# wall time, or with REFCOMP_TUNE_CLOCK=cpu in the environment (read at each measurement; the
# workers' fork server copies the environment when it starts, so set it before) the process's CPU time, which other jobs on a shared machine
# do not inflate.  CPU time counts every thread of the process: meant for one-thread runs
# (OMP_NUM_THREADS=1; benchmarks/tune.py --single-thread-cpu sets both).
CLOCK_VARIABLE = "REFCOMP_TUNE_CLOCK"


def tune_clock() -> Callable[[], float]:
    """time.process_time when REFCOMP_TUNE_CLOCK is "cpu", else time.perf_counter; any other value
    is a RefcompError."""
    value = os.environ.get(CLOCK_VARIABLE, "wall")
    if value not in ("wall", "cpu"):
        raise RefcompError(f"{CLOCK_VARIABLE}={value!r}: expected 'wall' or 'cpu'")
    return time.process_time if value == "cpu" else time.perf_counter
MAX_CALLS_PER_RUN = 200
# A candidate whose warm-up call takes more than SLOW_FACTOR times the best time measured against
# its checker gets that call as its one run time (checked all the same): timing `repeats` runs of
# a conv2d candidate 100x slower than the recipe cost seconds and ranks it no differently.
SLOW_FACTOR = 10.0
# Workloads of up to this many arithmetic operations are checked against the interpreter (a few
# seconds at most), larger ones against their unscheduled loop nest compiled to C (default_reference).
INTERPRETER_MAX_OPS = 5e6


@dataclass(frozen=True)
class MeasureResult:
    """What became of one candidate: status (one of STATUSES), run times (seconds) when ok, a message,
    and the machine that measured it (`machine_description()` there; empty when none did)."""

    status: str
    run_times: tuple[float, ...] = ()
    message: str = ""
    machine: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def mean_time(self) -> float:
        return sum(self.run_times) / len(self.run_times) if self.run_times else float("inf")


def machine_description(target: str = "c") -> str:
    """The target of measurements taken in this process: the architecture and the vector extensions
    refcomp's kernels can use (`refcomp.loops.intrin.cpu.describe()`), e.g. "x86_64 SSE4_2 AVX AVX2 FMA";
    for a CUDA target followed by the GPU's name ("... cuda NVIDIA H100 80GB HBM3", or "cuda none")."""
    if str(target).split()[:1] == ["cuda"]:
        from ..runtime.cuda_library import cuda_device_name

        return f"{cpu.describe()} cuda {cuda_device_name() or 'none'}"
    return cpu.describe()


def default_build(func: PrimFunc, target: str) -> Callable[..., None]:
    """refcomp.build as the tuner uses it: the kernel as a callable on numpy arrays (for a CUDA
    target, one that keeps the arrays on the device and times only the launches: `DeviceResident`)."""
    from ..driver import build

    kernel = build(func, target=target)
    return DeviceResident(kernel) if str(target).split()[:1] == ["cuda"] else kernel


class DeviceResident:
    """A CUDA kernel called on numpy arrays whose device copies are kept between calls.

    A call uploads the arrays (the first time, or when called with other arrays), launches, and
    copies every array back, so a checker reads the results; `timed_call(*arrays)` launches on the
    device copies alone and returns the seconds until the launcher's final synchronisation:
    the runner times GPU candidates without the copies."""

    def __init__(self, library) -> None:
        self.library = library
        self._key: tuple | None = None
        self._device: list = []

    def _upload(self, arrays) -> list:
        key = tuple(id(a) for a in arrays)
        if key != self._key:
            self._device = [self.library.to_device(a) for a in arrays]
            self._key = key
        return self._device

    def __call__(self, *arrays: np.ndarray) -> None:
        self._key = None  # fresh contents every checked call
        device = self._upload(arrays)
        self.library(*device)
        for host, copy in zip(arrays, device):
            copy.copy_to(host)

    def timed_call(self, *arrays: np.ndarray) -> float:
        device = self._upload(arrays)
        start = time.perf_counter()
        self.library(*device)
        return time.perf_counter() - start


# Where every array the tuner runs a candidate on starts: a cache line (and an AVX-512 vector).
# numpy's allocations start 16 bytes apart at random, and a kernel's speed can depend on it: the
# 12 x 384 x 384 x 64 batched A @ B^T (a 12 x 32 tile storing its C rows after 64 k steps, one
# thread) 1.9 ms with C on a 64-byte boundary, 2.6 ms at 16, 32 or 48 bytes past one, which
# ranked candidates by where their arrays happened to land.
ALIGNMENT = 64


def aligned_copy(array: np.ndarray, alignment: int = ALIGNMENT) -> np.ndarray:
    """A C-contiguous copy of array whose data starts on an `alignment`-byte boundary."""
    array = np.asarray(array)
    raw = np.empty(array.nbytes + alignment, dtype=np.uint8)
    start = -raw.ctypes.data % alignment
    out = raw[start:start + array.nbytes].view(array.dtype).reshape(array.shape)
    out[...] = array
    return out


def random_arguments(func: PrimFunc, seed: int) -> list[np.ndarray]:
    """Fresh random arrays (uniform in [-1, 1), never all zeros) for every buffer parameter, each
    starting on a 64-byte boundary (ALIGNMENT)."""
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
    return [aligned_copy(a) for a in arrays]


def interpreter_reference(func: PrimFunc) -> Callable[[list[np.ndarray]], None]:
    """The reference that runs the unscheduled function in the interpreter, in place."""
    return lambda arrays: interpret(func, *arrays)


def compiled_reference(func: PrimFunc) -> Callable[[list[np.ndarray]], None]:
    """The reference that runs the unscheduled function compiled to C, in place: its plain loop
    nest in the order the definition gives (no schedule, so no tiling, packing, vectorisation
    or tensor intrinsic of any candidate), built once."""
    from ..driver import build

    kernel = build(func, target="c")
    return lambda arrays: kernel(*arrays)


def default_reference(func: PrimFunc) -> Callable[[list[np.ndarray]], None]:
    """The reference a Checker uses when the caller gives none: the interpreter for workloads of
    up to INTERPRETER_MAX_OPS arithmetic operations, else the unscheduled function compiled to C
    (the interpreter runs a reduction element by element in Python, about a million operations a
    second: the 256 x 1024 x 4096 linear of a model would take half an hour)."""
    return interpreter_reference(func) if count_flops(func) <= INTERPRETER_MAX_OPS else compiled_reference(func)


@dataclass
class Checker:
    """Random inputs for a workload and the outputs the reference computes from them."""

    func: PrimFunc
    reference: Callable[[list[np.ndarray]], None] | None = None
    seed: int = 0
    rtol: float = 1e-3
    atol: float = 1e-4
    best_time: float = field(init=False, default=float("inf"))  # the fastest run measured against it
    inputs: list[np.ndarray] = field(init=False)
    expected: list[np.ndarray] = field(init=False)

    def __post_init__(self) -> None:
        reference = self.reference or default_reference(self.func)
        self.inputs = random_arguments(self.func, self.seed)
        self.expected = [a.copy() for a in self.inputs]
        reference(self.expected)

    def __getstate__(self) -> dict:
        # Workers need the data, not the reference that made it (which may not pickle); while the
        # arrays are in files (`in_files`), only the files' paths.
        state = dict(self.__dict__)
        state["reference"] = None
        state.pop("_saved", None)
        paths = state.pop("_paths", None)
        if paths is not None:
            state["inputs"], state["expected"], state["_load"] = None, None, paths
        return state

    def __setstate__(self, state: dict) -> None:
        paths = state.pop("_load", None)
        self.__dict__.update(state)
        if paths is not None:  # read-only maps of the files; fresh_arguments copies them
            self.inputs = [np.load(path, mmap_mode="r") for path in paths[0]]
            self.expected = [np.load(path, mmap_mode="r") for path in paths[1]]

    @contextmanager
    def in_files(self, min_bytes: int = 1 << 20) -> Iterator[None]:
        """While in this context, the checker pickles as the paths of .npy files holding its arrays
        (in a temporary directory of this machine), when they hold at least min_bytes: the local
        runner sends the checker to a process per candidate, and a 1024 matmul's inputs and
        expected outputs are 25 MB to pickle, send and unpickle every time.  The files are written
        once, at the first use, and removed with the checker (tune_model keeps one checker per task
        for all its rounds: a model's linear wrote 40 MB per round)."""
        if "_paths" in self.__dict__ or sum(a.nbytes for a in self.inputs + self.expected) < min_bytes:
            yield
            return
        paths = self.__dict__.get("_saved")
        if paths is None:
            directory = tempfile.mkdtemp(prefix="refcomp-checker-")
            weakref.finalize(self, shutil.rmtree, directory, True)
            paths = ([], [])
            for kind, arrays in enumerate((self.inputs, self.expected)):
                for index, array in enumerate(arrays):
                    path = os.path.join(directory, f"{kind}_{index}.npy")
                    np.save(path, np.ascontiguousarray(array))
                    paths[kind].append(path)
            self.__dict__["_saved"] = paths
        self.__dict__["_paths"] = paths
        try:
            yield
        finally:
            del self.__dict__["_paths"]

    def fresh_arguments(self) -> list[np.ndarray]:
        """Copies of the inputs, each starting on a 64-byte boundary; the output buffers are overwritten with garbage so a kernel that
        writes nothing cannot pass by leaving the reference's answer in place."""
        arrays = [aligned_copy(a) for a in self.inputs]  # on cache lines: see ALIGNMENT
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
        kernel = build(_scheduled(func, trace), target)
        try:  # the built kernel itself, when it pickles: the run process then need not replay
            built = isolate.dumps(kernel, "the built kernel")  # (IR attributes are mappingproxies)
        except Exception:
            built = None
        conn.send(("ok", (), "", built))
    except RefcompError as error:
        conn.send(("build_error", (), f"{type(error).__name__}: {error}"))
    except BaseException:  # a child reports everything; the parent decides
        conn.send(("build_error", (), traceback.format_exc(limit=3)))


def _run_child(conn: Any, func: PrimFunc, trace: dict, target: str, build: Callable,
               checker: Checker, repeats: int, built: bytes | None = None, cutoff: float | None = None) -> None:
    faulthandler.disable()  # a crashing candidate is reported by its exit code, without a dump
    try:
        kernel = pickle.loads(built) if built is not None else build(_scheduled(func, trace), target)
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
        timed_call = getattr(kernel, "timed_call", None)  # a kernel that times itself (DeviceResident)
        if timed_call is not None:
            times = [float(timed_call(*arrays)) for _ in range(repeats)]
        else:
            # each run time is the mean of enough calls to last about MIN_RUN_SECONDS: one call of
            # a short kernel is mostly timer and thread wake-up noise, which ranked candidates by luck
            clock = tune_clock()
            start = clock()
            kernel(*arrays)
            warm = clock() - start
            if cutoff is not None and warm > cutoff:  # hopeless: one run time, the warm-up call
                conn.send(("ok", (warm,), ""))
                return
            calls = max(1, min(MAX_CALLS_PER_RUN, int(MIN_RUN_SECONDS / max(warm, 1e-7))))
            for _ in range(repeats):
                start = clock()
                for _ in range(calls):
                    kernel(*arrays)
                times.append((clock() - start) / calls)
        conn.send(("ok", tuple(times), ""))
    except BaseException:
        conn.send(("run_error", (), traceback.format_exc(limit=3)))


def _finish(process: isolate.IsolatedCall, deadline: float, what: str, target: str = "c") -> MeasureResult:
    """Wait for one worker until deadline; its report, or crash/timeout when it gave none."""
    return _finish_with(process, deadline, what, target)[0]


def _finish_with(process: isolate.IsolatedCall, deadline: float, what: str,
                 target: str = "c") -> tuple[MeasureResult, Any]:
    """_finish, and what the worker sent after its report (the pickled kernel of a build; None)."""
    remaining = max(0.0, deadline - time.monotonic())
    try:
        if process.poll(remaining):
            try:
                status, times, message, *extra = process.recv()
            except (EOFError, OSError):
                status, times, message, extra = None, (), "", []
            process.join(5)
            if process.is_alive():
                process.kill()
                process.join()
            if status is not None:
                return MeasureResult(status, tuple(times), message, machine_description(target)), \
                    (extra[0] if extra else None)
        if process.is_alive():
            process.kill()
            process.join()
            return MeasureResult("timeout", (), f"{what} did not finish within the time limit",
                                 machine_description(target)), None
        process.join()
        return MeasureResult("crash", (), f"{what} process died with exit code {process.exitcode}",
                             machine_description(target)), None
    finally:
        process.close()


@runtime_checkable
class RunnerBackend(Protocol):
    """What the search needs of a runner: the target it builds for, the machine it measures on, and
    one result per candidate, in the candidates' order."""

    target: str

    def machine(self) -> str:
        ...

    def measure(self, func: PrimFunc, candidates: Sequence[Candidate], checker: Checker) -> list[MeasureResult]:
        ...


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

    def machine(self) -> str:
        """The machine the candidates are measured on: this one."""
        return machine_description(self.target)

    def measure(self, func: PrimFunc, candidates: Sequence[Candidate], checker: Checker) -> list[MeasureResult]:
        """A result for every candidate, in order; never raises for a candidate's failure."""
        built = self._build_all(func, candidates)
        results = []
        with checker.in_files():  # run processes of this machine read the arrays from files
            for candidate, (build_result, kernel) in zip(candidates, built):
                if not build_result.ok:
                    results.append(build_result)
                    continue
                cutoff = SLOW_FACTOR * checker.best_time if checker.best_time < float("inf") else None
                result = self.run_one(func, candidate, checker, kernel, cutoff)
                if result.ok:
                    checker.best_time = min(checker.best_time, result.mean_time)
                results.append(result)
        return results

    def _build_all(self, func: PrimFunc, candidates: Sequence[Candidate]) -> list[tuple[MeasureResult, Any]]:
        """(result, the pickled kernel or None) for each candidate, built `workers` at a time."""
        results: list[tuple[MeasureResult, Any] | None] = [None] * len(candidates)
        pending = list(enumerate(candidates))
        active: list[tuple[int, isolate.IsolatedCall, float]] = []
        while pending or active:
            while pending and len(active) < self.workers:
                index, candidate = pending.pop(0)
                process = isolate.start(_build_child, (func, candidate.trace, self.target, self.build),
                                        self.timeout_s, "the build hook")
                active.append((index, process, time.monotonic() + self.timeout_s))
            index, process, deadline = active.pop(0)
            results[index] = _finish_with(process, deadline, "the build", self.target)
        return results  # type: ignore[return-value]

    def run_one(self, func: PrimFunc, candidate: Candidate, checker: Checker,
                built: bytes | None = None, cutoff: float | None = None) -> MeasureResult:
        """Run one candidate in its own process, checked: the kernel its build process pickled
        (`built`, loaded again from the build cache), else built there (replayed and compiled:
        a cache hit after a build).  cutoff (seconds): a warm-up call slower than that is the
        candidate's one run time (`measure` passes SLOW_FACTOR x the checker's best time)."""
        process = isolate.start(_run_child, (func, candidate.trace, self.target, self.build, checker, self.repeats,
                                             built if isinstance(built, bytes) else None, cutoff),
                                self.timeout_s, "the candidate with its build hook and checker")
        return _finish(process, time.monotonic() + self.timeout_s, "the candidate", self.target)
