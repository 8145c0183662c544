"""The process-wide thread settings of compiled kernels, applied by a call, never by an import.

libgomp reads OMP_WAIT_POLICY once, when it is loaded (by the first OpenMP kernel a process
opens).  A graph run alternates OpenMP kernels with OpenBLAS calls, which have their own thread
pool; libgomp's default lets idle threads spin, which starves the BLAS threads on small machines
(measured: 10-50x slower runs on 2 cores), and passive waiting avoids that.  So graph.build asks
for passive waits before it loads its first kernel; a user's own setting always wins.
"""
from __future__ import annotations

import os


def openmp_loaded() -> bool:
    """Whether libgomp is already in this process (then its wait policy is fixed)."""
    try:
        with open("/proc/self/maps") as maps:
            return any("libgomp" in line for line in maps)
    except OSError:
        return False


def prefer_passive_openmp_waits() -> bool:
    """Set OMP_WAIT_POLICY=PASSIVE unless it is set or libgomp is loaded; True if it was set now."""
    if "OMP_WAIT_POLICY" in os.environ or openmp_loaded():
        return False
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    return True
