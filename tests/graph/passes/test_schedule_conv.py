"""Convolution chains built by graph.build: each conv kernel (with its fused epilogue) gets the
conv recipe from the default schedule, and the chain computes what numpy computes."""
import numpy as np
import pytest

import refcomp
from refcomp.ast import PrimFunc, SizeVar
from refcomp.graph import BlockBuilder, Var, op, tensor
from refcomp.graph.op.nn import _np_conv


def _chain(n, c, size, mid, width):
    x = Var("x", tensor((n, c, size, width)))
    w1, b1 = Var("w1", tensor((mid, c, 3, 3))), Var("b1", tensor((1, mid, 1, 1)))
    w2 = Var("w2", tensor((mid, 1, 3, 3)))
    bb = BlockBuilder()
    with bb.function("main", [x, w1, b1, w2]):
        with bb.dataflow():
            y = bb.emit(op.relu(op.add(op.conv2d(x, w1, padding=1), b1)))
            z = bb.emit(op.conv2d(y, w2, strides=2, padding=1, groups=mid))  # depthwise, stride 2
            out = bb.emit_output(z)
        bb.emit_func_output(out)
    return bb.get()


def _expected(x, w1, b1, w2):
    y = np.maximum(_np_conv(x.astype(np.float64), w1.astype(np.float64), (1, 1), (1, 1, 1, 1), (1, 1)) + b1, 0)
    return _np_conv(y, w2.astype(np.float64), (2, 2), (1, 1, 1, 1), (1, 1), w2.shape[0])


@pytest.mark.parametrize("n,c,size,mid,width", [(2, 3, 9, 8, 16), (1, 5, 7, 6, 11)])
def test_conv_chain_matches_numpy(rng, n, c, size, mid, width):
    mod = _chain(n, c, size, mid, width)
    ex = refcomp.graph.build(mod, target="c", blas=False)
    kernels = [f for f in ex.module.functions.values() if isinstance(f, PrimFunc)]
    # the 3x3 conv's weights are packed for its register tile (the depthwise one reads them in place)
    assert any("_global" in f.script() for f in kernels)
    x = rng.standard_normal((n, c, size, width)).astype(np.float32)
    w1 = rng.standard_normal((mid, c, 3, 3)).astype(np.float32)
    b1 = rng.standard_normal((1, mid, 1, 1)).astype(np.float32)
    w2 = rng.standard_normal((mid, 1, 3, 3)).astype(np.float32)
    got = refcomp.runtime.VirtualMachine(ex)["main"](x, w1, b1, w2)
    np.testing.assert_allclose(got, _expected(x, w1, b1, w2), rtol=1e-4, atol=1e-4)


def test_symbolic_batch_conv_still_scheduled(rng):
    """A symbolic batch leaves the width and channels constant: the conv recipe still applies."""
    batch = SizeVar("batch", "int64")
    x, w = Var("x", tensor((batch, 4, 6, 16))), Var("w", tensor((8, 4, 3, 3)))
    bb = BlockBuilder()
    with bb.function("main", [x, w]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(op.conv2d(x, w, padding=1)))
        bb.emit_func_output(out)
    ex = refcomp.graph.build(bb.get(), target="c", blas=False)
    for n in (1, 3):
        xv = rng.standard_normal((n, 4, 6, 16)).astype(np.float32)
        wv = rng.standard_normal((8, 4, 3, 3)).astype(np.float32)
        got = refcomp.runtime.VirtualMachine(ex)["main"](xv, wv)
        np.testing.assert_allclose(got, _np_conv(xv, wv, (1, 1), (1, 1, 1, 1), (1, 1)), rtol=1e-4, atol=1e-4)
