"""The process-wide thread settings of compiled kernels, applied by a call, never by an import.

libgomp reads OMP_WAIT_POLICY and GOMP_SPINCOUNT once, when it is loaded (by the first OpenMP
kernel a process opens).  A graph run is a sequence of short parallel kernels, often with
OpenBLAS calls (their own thread pool) between them:
- libgomp's default lets an idle worker spin for about 3 ms before it sleeps, which starved the
  BLAS threads on small machines (measured: 10-50x slower runs on 2 cores);
- passive waits (no spin) make every kernel wake its sleeping workers first; on a quiet 2-core
  machine that was about half of a small model's time (`benchmarks/models.py`, 2 threads:
  geometric mean 0.54x onnxruntime passive, 0.80-0.86x with the spin below; ResNet-18 at half
  width 4.6 -> 2.1-2.7 ms; the demo's MLP 0.63 -> 0.38 ms, row softmax 0.20 -> 0.09 ms);
- GOMP_SPINCOUNT=100000 (well under libgomp's default) with OMP_WAIT_POLICY=PASSIVE behind it
  keeps the workers awake across a model's kernels and sleeps soon after; when a process has more
  OpenMP workers than CPUs, libgomp uses its throttled spin count instead, which the passive
  policy keeps near zero.  A spin of 10000 was worse than either (calls of 3-10 ms).
Spinning costs where other processes want the same cores: on a machine shared with other busy
jobs set OMP_WAIT_POLICY=PASSIVE (or GOMP_SPINCOUNT=0) yourself.
So graph.build asks for that pair before it loads its first kernel; a user's own setting of
either variable always wins.
"""
from __future__ import annotations

import os

SPIN_COUNT = "100000"


def openmp_loaded() -> bool:
    """Whether libgomp is already in this process (then its wait policy is fixed)."""
    try:
        with open("/proc/self/maps") as maps:
            return any("libgomp" in line for line in maps)
    except OSError:
        return False


def prefer_short_openmp_spins() -> bool:
    """Set OMP_WAIT_POLICY=PASSIVE and GOMP_SPINCOUNT=SPIN_COUNT unless either is set or libgomp is
    loaded; True if they were set now."""
    if "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ or openmp_loaded():
        return False
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    os.environ["GOMP_SPINCOUNT"] = SPIN_COUNT
    return True
