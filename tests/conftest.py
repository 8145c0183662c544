"""Shared test configuration: hypothesis profiles sized for CI, and fresh random data helpers."""
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=25, deadline=None, derandomize=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "dev", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "thorough", max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("REFCOMP_HYPOTHESIS_PROFILE", "ci"))


def pytest_xdist_auto_num_workers(config):
    """`-n auto`: a worker per core this process may run on, at most 8 (each worker holds its own
    torch, onnxruntime and compiled kernels; the kernels' OpenMP teams share the same cores)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(cores, 8))


@pytest.fixture
def rng():
    """A numpy Generator with a fresh seed each run (printed on failure by pytest's -ra)."""
    seed = int.from_bytes(os.urandom(4), "little")
    print(f"rng seed {seed}")
    return np.random.default_rng(seed)


@pytest.fixture(params=["native", "avx2"])
def vector_isa(request, monkeypatch):
    """A schedule on this CPU's widest vectors, and on AVX2's (8 lanes, 16 registers) through the
    feature override, which the C build follows too."""
    from refcomp.emit_c import toolchain
    from refcomp.loops.intrin import cpu

    def forget():  # every cached answer that follows the CPU's features
        cpu.cpu_features.cache_clear()
        toolchain.native_vector_bytes.cache_clear()

    if request.param == "avx2":
        if not cpu.has("avx2", "fma"):
            pytest.skip("this CPU has no AVX2")
        # an AVX2 machine's flags include avx: without it the C build takes 16-byte vectors
        monkeypatch.setenv("REFCOMP_CPU_FEATURES", "avx,avx2,fma")
        forget()
    try:
        yield request.param
    finally:
        monkeypatch.delenv("REFCOMP_CPU_FEATURES", raising=False)
        forget()
