"""fold_packed_weights: the packing stage of a constant kernel argument (a convolution's weights in
its register tile's layout) runs once at build time; the kernel takes the packed array."""
import re

import numpy as np
import pytest

import refcomp
from refcomp.ast import PrimFunc, as_int
from refcomp.ast.graph import Constant
from refcomp.graph import BlockBuilder, Var, op, tensor
from refcomp.graph.op.nn import _np_conv
from refcomp.graph.passes.fold_packed_weights import find_packing_stage


def _kernels(ex):
    return {name: f for name, f in ex.module.functions.items() if isinstance(f, PrimFunc)}


def _packs(func) -> bool:
    """Whether func has a packing stage (a block named after the buffer it copies, *_global)."""
    return re.search(r'T\.block\("[^"]*_global"\)', func.script()) is not None


def _shape(buffer):
    return tuple(as_int(d) for d in buffer.shape)


def _conv_model(x_shape, w, stride, pad, groups, constant=True):
    x = Var("x", tensor(x_shape))
    params = [x]
    if constant:
        weight = Constant(w)
    else:
        weight = Var("w", tensor(w.shape))
        params.append(weight)
    bb = BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(op.relu(op.conv2d(x, weight, strides=stride, padding=pad, groups=groups)))
        bb.emit_func_output(out)
    return bb.get()


@pytest.mark.parametrize("x_shape,o,k,stride,pad,groups", [
    ((2, 16, 9, 9), 32, 3, 1, 1, 1),      # the channel-vector tile: Wp[o // L, c, r0, r1, o % L]
    ((1, 3, 16, 16), 8, 3, 1, 1, 1),      # a short reduction on the GEMM tile: packed per call
    ((1, 64, 7, 7), 16, 1, 2, 0, 1),      # a strided 1x1
    ((2, 6, 11, 13), 12, 3, 2, 1, 3),     # grouped, the direct form
])
def test_constant_weights_are_packed_at_build_time(rng, x_shape, o, k, stride, pad, groups):
    w = rng.standard_normal((o, x_shape[1] // groups, k, k)).astype(np.float32)
    ex = refcomp.graph.build(_conv_model(x_shape, w, stride, pad, groups), target="c")
    kernels = _kernels(ex)
    xv = rng.standard_normal(x_shape).astype(np.float32)
    got = np.asarray(refcomp.runtime.VirtualMachine(ex)["main"](xv))
    expected = np.maximum(_np_conv(xv.astype(np.float64), w.astype(np.float64), (stride,) * 2, (pad,) * 4,
                                   (1, 1), groups), 0)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    packed = [f for name, f in kernels.items() if name.endswith("_packed")]
    unpacked = [f for name, f in kernels.items() if not name.endswith("_packed")]
    if packed:  # the kernel reads the packed array; no copy of the weights runs per call
        (kernel,) = packed
        assert not unpacked
        assert _shape(kernel.params[1]) != w.shape and not _packs(kernel)
    else:  # a form that reads the weights in place, or the GEMM tile's micro-kernel (whose operand
        # address is taken: the argument checks count it as written, so no read-only constant)
        assert all(not _packs(f) or "tensorized" in f.script() for f in unpacked)


def test_weights_passed_at_run_time_keep_the_packing_stage(rng):
    w = rng.standard_normal((32, 16, 3, 3)).astype(np.float32)
    ex = refcomp.graph.build(_conv_model((1, 16, 9, 9), w, 1, 1, 1, constant=False), target="c")
    (kernel,) = _kernels(ex).values()
    assert _shape(kernel.params[1]) == w.shape and _packs(kernel)
    assert find_packing_stage(kernel, 1) is not None and find_packing_stage(kernel, 0) is None
    xv = rng.standard_normal((1, 16, 9, 9)).astype(np.float32)
    got = np.asarray(refcomp.runtime.VirtualMachine(ex)["main"](xv, w))
    expected = np.maximum(_np_conv(xv.astype(np.float64), w.astype(np.float64), (1, 1), (1,) * 4, (1, 1)), 0)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_two_convolutions_share_a_packed_kernel_with_their_own_constants(rng):
    w1 = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
    w2 = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
    x = Var("x", tensor((1, 16, 8, 8)))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(op.conv2d(x, Constant(w1), padding=1))
            out = bb.emit_output(op.conv2d(y, Constant(w2), padding=1))
        bb.emit_func_output(out)
    # NCHW kernels (a chain of two convolutions would otherwise run in the blocked layout, whose
    # weights the layout pass packs itself)
    ex = refcomp.graph.build(bb.get(), target="c", layouts=False)
    assert all(name.endswith("_packed") for name in _kernels(ex))
    xv = rng.standard_normal((1, 16, 8, 8)).astype(np.float32)
    conv = lambda a, w: _np_conv(a, w.astype(np.float64), (1, 1), (1,) * 4, (1, 1))  # noqa: E731
    expected = conv(conv(xv.astype(np.float64), w1), w2)
    np.testing.assert_allclose(np.asarray(refcomp.runtime.VirtualMachine(ex)["main"](xv)), expected,
                               rtol=1e-4, atol=1e-3)


# ----------------------------------------------------------------------------- GEMM weights
# The matmul recipe packs a constant weight in a stage of its own (mark_constant_params), which
# the tile kernel only reads (its B operand is declared read); the stage runs at build time.

def _gelu_tanh(z):
    return 0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z ** 3)))


def _gemm_model(kind, rows, w, b, constant=True):
    from refcomp.ast import SizeVar

    k = w.shape[0] if kind == "matmul" else w.shape[1]
    n = w.shape[1] if kind == "matmul" else w.shape[0]
    m = SizeVar("m", "int64") if rows is None else rows
    x = Var("x", tensor((m, k)))
    params = [x]
    if constant:
        weight = Constant(w)
    else:
        weight = Var("w", tensor(w.shape))
        params.append(weight)
    res = Var("r", tensor((m, n)))
    if kind == "linear_residual":
        params.append(res)
    bb = BlockBuilder()
    with bb.function("main", params, attrs={"tir_var_upper_bound": {"m": 256}} if rows is None else None):
        with bb.dataflow():
            if kind == "matmul":
                y = op.matmul(x, weight)
            else:
                y = op.linear(x, weight, Constant(b))
            if kind == "linear_gelu":
                y = op.gelu_tanh(y)
            elif kind == "linear_residual":
                y = op.add(y, res)
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get()


def _gemm_expected(kind, xv, w, b, rv):
    x64 = xv.astype(np.float64)
    if kind == "matmul":
        return x64 @ w.astype(np.float64)
    z = x64 @ w.T.astype(np.float64) + b
    return _gelu_tanh(z) if kind == "linear_gelu" else z + rv if kind == "linear_residual" else z


def _constant_bytes(ex) -> int:
    return sum(inst.value.nbytes for inst in ex.functions["main"].code
               if type(inst).__name__ == "LoadConst" and isinstance(inst.value, np.ndarray))


@pytest.mark.parametrize("rows", [40, None], ids=["rows40", "symbolic_rows"])
@pytest.mark.parametrize("kind", ["matmul", "linear", "linear_gelu", "linear_residual"])
def test_constant_gemm_weight_is_packed_at_build_time(rng, kind, rows):
    n, k = 256, 64
    w = rng.standard_normal((k, n) if kind == "matmul" else (n, k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    ex = refcomp.graph.build(_gemm_model(kind, rows, w, b), target="c", blas=False)  # refcomp's GEMM (BLAS may take it)
    kernels = _kernels(ex)
    (kernel,) = [f for f in kernels.values() if any(iv.kind == "reduce" for blk in _blocks(f) for iv in blk.iter_vars)]
    assert kernel.name.endswith("_packed"), f"{kind}: the weight's packing stage was not folded"
    assert _shape(kernel.params[1]) != w.shape and find_packing_stage(kernel, 1) is None
    # the packed weight is the only copy of it the executable keeps (the original is not loaded)
    assert _constant_bytes(ex) <= w.nbytes + b.nbytes
    for m in ([rows] if rows is not None else [1, 37, 96]):
        xv = rng.standard_normal((m, k)).astype(np.float32)
        rv = rng.standard_normal((m, n)).astype(np.float32)
        args = (xv, rv) if kind == "linear_residual" else (xv,)
        expected = _gemm_expected(kind, xv, w, b, rv)
        for run in (refcomp.runtime.VirtualMachine(ex, executor="vm")["main"], ex.compiled.get("main")):
            if run is not None:
                np.testing.assert_allclose(np.asarray(run(*args)), expected, rtol=1e-4, atol=1e-4)


def test_gemm_weight_passed_at_run_time_is_packed_per_call(rng):
    n, k = 256, 64
    w = rng.standard_normal((n, k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    ex = refcomp.graph.build(_gemm_model("linear_gelu", None, w, b, constant=False), target="c")
    assert not any(name.endswith("_packed") for name in _kernels(ex))
    xv = rng.standard_normal((29, k)).astype(np.float32)
    got = np.asarray(refcomp.runtime.VirtualMachine(ex)["main"](xv, w))
    np.testing.assert_allclose(got, _gemm_expected("linear_gelu", xv, w, b, None), rtol=1e-4, atol=1e-4)


def _blocks(func):
    from refcomp.ast import Block, collect

    return collect(func.body, Block)
