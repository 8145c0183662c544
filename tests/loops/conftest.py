"""Fixtures shared by the loop-level tests."""
import pytest


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
