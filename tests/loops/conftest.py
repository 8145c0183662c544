"""Fixtures shared by the loop-level tests."""
import pytest


@pytest.fixture(params=["native", "avx2"])
def vector_isa(request, monkeypatch):
    """A schedule on this CPU's widest vectors, and on AVX2's (8 lanes, 16 registers) through the
    feature override, which the C build follows too."""
    from refcomp.loops.intrin import cpu

    if request.param == "avx2":
        if not cpu.has("avx2", "fma"):
            pytest.skip("this CPU has no AVX2")
        monkeypatch.setenv("REFCOMP_CPU_FEATURES", "avx2,fma")
        cpu.cpu_features.cache_clear()
    try:
        yield request.param
    finally:
        monkeypatch.delenv("REFCOMP_CPU_FEATURES", raising=False)
        cpu.cpu_features.cache_clear()
