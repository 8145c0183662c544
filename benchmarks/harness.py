"""What every timing script here shares: a process set up so numpy runs at its best, and the
alternating best-of timer.

Import this module before numpy: it edits the environment OpenBLAS and libgomp read when they load.
- The user's OpenBLAS overrides (`OPENBLAS_CORETYPE`, `OPENBLAS_L2_SIZE`) are dropped in this process,
  so numpy runs the kernel OpenBLAS picks for this CPU (unless a benchmark names one through
  `REFCOMP_BENCH_OPENBLAS_CORETYPE`, to compare at a narrower ISA).
- Idle OpenMP workers spin briefly, then sleep (`OMP_WAIT_POLICY=PASSIVE` with `GOMP_SPINCOUNT=100000`,
  about 1 ms, unless either is set): what graph.build asks for (refcomp.runtime.threads).  libgomp's
  default 3 ms spin takes the core that numpy's thread pool needs on a small machine; no spin at all
  makes every parallel kernel wake its workers first.
- glibc keeps freed blocks up to 32 MiB in the heap (`mallopt`). numpy allocates fresh temporaries
  on every call; with glibc's default, history-dependent thresholds, whether they come back as mapped
  heap memory or as fresh pages to fault in depends on what the process did before (the same numpy
  mlp measured 24 ms in one process and 31 ms in another). Keeping freed memory gives numpy its fast
  case every time, so the baseline is the demanding one.
"""
from __future__ import annotations

import os
import time

for _name in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
    os.environ.pop(_name, None)
# A benchmark that compares an ISA below the machine's (matmul.py --isa avx2) names the OpenBLAS
# kernel of that ISA here, before numpy loads, so both sides run the same vector width.
_CORETYPE = os.environ.pop("REFCOMP_BENCH_OPENBLAS_CORETYPE", None)
if _CORETYPE:
    os.environ["OPENBLAS_CORETYPE"] = _CORETYPE
from refcomp.runtime.threads import prefer_short_openmp_spins  # noqa: E402  (after the OpenBLAS edits)

prefer_short_openmp_spins()

# Pause before each side's round: OpenBLAS's idle threads busy-wait for a while after a call and
# would take a core from the next kernel.
SETTLE_SECONDS = 0.3


def keep_freed_memory() -> bool:
    """Ask glibc to keep freed blocks up to 32 MiB in the heap; False where that is not glibc."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    if libc is None or not hasattr(libc, "mallopt"):
        return False
    m_trim_threshold, m_top_pad, m_mmap_threshold = -1, -2, -3
    return bool(libc.mallopt(m_mmap_threshold, 32 << 20) and libc.mallopt(m_trim_threshold, 1 << 30)
                and libc.mallopt(m_top_pad, 64 << 20))


KEEPS_FREED_MEMORY = keep_freed_memory()


def best_times(fns: list, repeat: int, rounds: int, clock=time.perf_counter) -> list[float]:
    """Best time of each function by `clock`, timed in alternating rounds of `repeat` calls (a busy
    machine then slows every side alike)."""
    for fn in fns:
        fn()  # warm up: first touches, thread pools
    best = [float("inf")] * len(fns)
    for _ in range(rounds):
        for index, fn in enumerate(fns):
            time.sleep(SETTLE_SECONDS)
            for _ in range(repeat):
                start = clock()
                fn()
                best[index] = min(best[index], clock() - start)
    return best


def interleaved_best_times(fns: list, passes: int, clock=time.perf_counter) -> list[float]:
    """Best time of each function by `clock` over `passes` passes, a pass calling every function
    once, in an order rotated every pass: call by call, each side meets the same bursts of other
    jobs (blocks of calls, as in best_times, let a burst fall on one side only)."""
    for fn in fns:
        fn()  # warm up: first touches, thread pools
    best = [float("inf")] * len(fns)
    for turn in range(passes):
        for index in [(turn + k) % len(fns) for k in range(len(fns))]:
            start = clock()
            fns[index]()
            best[index] = min(best[index], clock() - start)
    return best
