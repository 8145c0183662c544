"""The two models of benchmarks/graph.py (an MLP and a causal transformer block), built with the
default pipeline at small sizes, against the benchmark's own numpy versions on random data."""
import math

import numpy as np
import pytest

import refcomp

from graph_helpers import load_benchmark_models


@pytest.fixture(scope="module")
def models():
    return load_benchmark_models("graph_benchmark_models")


def weights(rng, shapes):
    return [(rng.standard_normal(s) / math.sqrt(s[-1])).astype("float32") for s in shapes]


@pytest.mark.parametrize("blas", [False, True])
def test_mlp_matches_numpy(models, blas, rng):
    mod, shapes = models.mlp(64, 256, 2)
    ex = refcomp.graph.build(mod, target="c", blas=blas)
    vm = refcomp.runtime.VirtualMachine(ex)
    w = weights(rng, shapes)
    for batch in (1, 7, 32):
        x = rng.standard_normal((batch, 64)).astype("float32")
        np.testing.assert_allclose(vm["main"](x, *w), models.mlp_numpy(x, *w), rtol=2e-4, atol=2e-5)


def test_models_with_constant_weights_match_numpy(models, rng):
    """The benchmark's default: the weights are Constants of the model (each GEMM's packed at
    build time: the kernels that take them are `_packed` ones); main takes x alone.  refcomp's own
    GEMMs (blas=False): without AVX-512 the default sends these products to BLAS."""
    from refcomp.ast import PrimFunc

    for build, reference, width in ((lambda w: models.mlp(64, 256, 2, weights=w), models.mlp_numpy, 64),
                                    (lambda w: models.transformer_block(64, 4, weights=w),
                                     lambda x, *w: models.transformer_numpy(4, x, *w), 64)):
        w = weights(rng, build(None)[1])
        ex = refcomp.graph.build(build(w)[0], target="c", blas=False)
        assert any(name.endswith("_packed") for name, f in ex.module.functions.items() if isinstance(f, PrimFunc))
        vm = refcomp.runtime.VirtualMachine(ex)
        for rows in (1, 7, 32):
            x = rng.standard_normal((rows, width)).astype("float32")
            np.testing.assert_allclose(vm["main"](x), reference(x, *w), rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("blas", [False, True])
def test_transformer_block_matches_numpy(models, blas, rng):
    heads = 4
    mod, shapes = models.transformer_block(64, heads)
    ex = refcomp.graph.build(mod, target="c", blas=blas)
    vm = refcomp.runtime.VirtualMachine(ex)
    assert ex.stats["kernels"] < 30  # fused (unfused: one kernel per op)
    w = weights(rng, shapes)
    for seq in (1, 5, 16, 37):
        x = rng.standard_normal((seq, 64)).astype("float32")
        np.testing.assert_allclose(vm["main"](x, *w), models.transformer_numpy(heads, x, *w), rtol=2e-4, atol=2e-5)


def test_profile_times_every_kernel_and_counts_gemm_flops(models):
    """graph.py --profile: one row per kernel the model calls, the GEMMs' GFLOP/s from their exact
    multiply-add count (2 * batch * n * k), the elementwise and row kernels without one."""
    import time

    mod, shapes = models.mlp(64, 256, 1)
    rows = models.profile_case("mlp", mod, shapes, (8, 64), repeat=1, rounds=1, clock=time.perf_counter,
                               blas=False, sizes={"batch": 8})
    names = [r["kernel"] for r in rows]
    assert len(names) == len(set(names)) >= 2 and all(r["ms"] > 0 and r["calls"] == 1 for r in rows)
    gemms = [r for r in rows if r["gflops"] is not None]
    assert {r["kernel"] for r in gemms} == {n for n in names if "linear" in n}
    for r in gemms:
        assert r["gflops"] == pytest.approx(2 * 8 * 256 * 64 / (r["ms"] * 1e-3) / 1e9)
    assert all(r["gflops"] is None for r in rows if "layer_norm" in r["kernel"])


def test_profile_counts_each_blas_extern_once(models):
    """An extern called at several places (the transformer block's sgemm_nt) is timed once per
    call, not once per place that calls it: its time is at most the sum of all the rows."""
    import time

    mod, shapes = models.transformer_block(64, 4)
    rows = models.profile_case("transformer_block", mod, shapes, (16, 64), repeat=1, rounds=1,
                               clock=time.perf_counter, blas=True, sizes={"seq": 16})
    externs = [r for r in rows if r["kernel"].startswith("refcomp.blas.")]
    if not externs:
        pytest.skip("no BLAS found")
    assert len({r["kernel"] for r in rows}) == len(rows)
    ex = refcomp.graph.build(mod, target="c", blas=True)
    code = [i for i in ex.functions["main"].code if type(i).__name__ == "CallPacked"]
    for r in externs:
        assert r["calls"] == sum(1 for i in code if i.symbol == r["kernel"])
        assert r["gflops"] is None and r["gbs"] is None
