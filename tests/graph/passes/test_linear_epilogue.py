"""A float32 linear layer left to refcomp's own GEMM (blas=False): the matmul recipe reads the
weight W[j, k] in place of B[k, j], and the fused epilogue (bias + gelu, bias + residual) is
computed inside the recipe's parallel block loop, per cache block of C."""
import numpy as np
import pytest

import refcomp
from refcomp.ast import Block, For, PrimFunc, SizeVar
from refcomp.graph import BlockBuilder, Var, op, tensor
from refcomp.loops.primitives.tree import walk

GELU_C = 0.7978845608028654


def _linear_module(n: int, k: int, epilogue: str):
    batch = SizeVar("batch", "int64")
    x, w, b = Var("x", tensor((batch, k))), Var("w", tensor((n, k))), Var("b", tensor((n,)))
    params = [x, w, b]
    if epilogue == "residual":
        params.append(Var("r", tensor((batch, n))))
    bb = BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            product = op.linear(x, w, b)
            value = op.gelu_tanh(product) if epilogue == "gelu" else op.add(product, params[3])
            out = bb.emit_output(bb.emit(value))
        bb.emit_func_output(out)
    return bb.get()


def _expected(x, w, b, r, epilogue):
    y = x.astype(np.float64) @ w.T.astype(np.float64) + b
    if epilogue == "gelu":
        return 0.5 * y * (1.0 + np.tanh(GELU_C * (y + 0.044715 * y ** 3)))
    return y + r


def _matmul_kernel(ex):
    found = [f for f in ex.module.functions.values() if isinstance(f, PrimFunc) and "tensorized" in f.script()]
    return found[0] if found else None


@pytest.mark.parametrize("epilogue", ["gelu", "residual"])
@pytest.mark.parametrize("n", [64, 96])  # 2 column blocks (rows outside them), 3 (threads over rows)
def test_linear_epilogue_runs_in_the_matmul_tile_loop(rng, monkeypatch, epilogue, n):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    k = 48
    ex = refcomp.graph.build(_linear_module(n, k, epilogue), target="c", blas=False)
    kernel = _matmul_kernel(ex)
    assert kernel is not None, "the linear layer was not given the matmul recipe"
    # the epilogue block sits inside the parallel loop over blocks of C, after the tile block
    outer = [s for s in walk(kernel.body) if isinstance(s, For) and s.kind == "parallel"
             and any(isinstance(b, Block) and "sgemm" in b.annotations.get("tensorized", "") for b in walk(s))]
    assert len(outer) == 1
    inside = [b.name for b in walk(outer[0]) if isinstance(b, Block)]
    assert "compute" in inside and inside.index("compute") > inside.index(next(n for n in inside if n.endswith("_o")))
    vm = refcomp.runtime.VirtualMachine(ex)
    for rows in (37, 5):  # a partial last row tile
        x = rng.standard_normal((rows, k)).astype(np.float32)
        w = rng.standard_normal((n, k)).astype(np.float32)
        b = rng.standard_normal(n).astype(np.float32)
        r = rng.standard_normal((rows, n)).astype(np.float32)
        args = (x, w, b) if epilogue == "gelu" else (x, w, b, r)
        out = np.asarray(vm["main"](*args))
        np.testing.assert_allclose(out, _expected(x, w, b, r, epilogue), rtol=1e-4, atol=1e-4)


def test_linear_the_recipe_cannot_tile_falls_back(rng):
    """N = 20 is no multiple of any tile width: the default schedule runs it, still exact."""
    n, k = 20, 24
    ex = refcomp.graph.build(_linear_module(n, k, "gelu"), target="c", blas=False)
    assert _matmul_kernel(ex) is None
    x = rng.standard_normal((9, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    out = np.asarray(refcomp.runtime.VirtualMachine(ex)["main"](x, w, b))
    np.testing.assert_allclose(out, _expected(x, w, b, None, "gelu"), rtol=1e-4, atol=1e-4)
