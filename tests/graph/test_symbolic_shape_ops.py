"""Graph ops over symbolic shape values: arange up to a size var, strided_slice with symbolic bounds,
shape_to_tensor (size vars as tensor data), compiled once and run at several sizes."""
import numpy as np
import pytest

import refcomp
from refcomp.ast import SizeVar
from refcomp.errors import IRError
from refcomp.graph import BlockBuilder, Var, op, tensor


def sv(name):
    return SizeVar(name, "int64")


def _compile(params, body):
    bb = BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(body(bb))
        bb.emit_func_output(out)
    mod = bb.get()
    return mod, refcomp.runtime.VirtualMachine(refcomp.graph.build(mod, target="c"))["main"]


def test_arange_between_symbolic_bounds_follows_the_sizes(rng):
    # y = x + arange(m, m + n): a start no buffer carries reaches the kernel as a scalar
    n, m = sv("n"), sv("m")
    x, z = Var("x", tensor((n,), "int64")), Var("z", tensor((m,), "int64"))
    mod, run = _compile([x, z], lambda bb: op.add(x, bb.emit(op.arange(m, m + n))))
    assert str(mod["main"].ret_struct_info.shape[0]) == "n"
    for a, b in [(1, 0), (4, 3), (9, 5)]:
        xs = rng.integers(-50, 50, a)
        np.testing.assert_array_equal(run(xs, rng.integers(0, 9, b)), xs + np.arange(b, b + a))


def test_arange_with_a_step_counts_by_ceiling():
    from refcomp.graph.op.create import _arange_len
    from refcomp.graph.shape_facts import evaluate

    n = sv("n")
    for step in (3, -2):
        start, stop = (0, n) if step > 0 else (n, 0)
        length = _arange_len(start, stop, step)
        for value in range(0, 10):
            want = len(range(0, value, 3)) if step > 0 else len(range(value, 0, -2))
            assert evaluate(length, {n: value}) == want


def test_arange_with_a_symbolic_bound_needs_an_integer_step():
    n = sv("n")
    bb = BlockBuilder()
    with pytest.raises(IRError, match="integer step"):
        with bb.function("main", [Var("x", tensor((n,)))]):
            bb.normalize(op.arange(0, n, 0.5))


def test_strided_slice_with_symbolic_bounds(rng):
    # y = x[:, 1:n] and x[:, 0:n + 5] (the end clamps) of an (r, n) tensor
    r, n = sv("r"), sv("n")
    x = Var("x", tensor((r, n)))
    _, run = _compile([x], lambda bb: op.concat(bb.emit(op.strided_slice(x, [1], [1], [n])),
                                                bb.emit(op.strided_slice(x, [1], [0], [n + 5])), axis=1))
    for a, b in [(1, 0), (2, 1), (3, 7)]:
        xs = rng.standard_normal((a, b)).astype("float32")
        np.testing.assert_array_equal(run(xs), np.concatenate([xs[:, 1:b], xs[:, 0:b + 5]], 1))


def test_strided_slice_bound_of_unknown_sign_is_refused():
    n, m = sv("n"), sv("m")
    bb = BlockBuilder()
    x = Var("x", tensor((n,)))
    with pytest.raises(IRError, match="sign of the bound"):
        with bb.function("main", [x, Var("z", tensor((m,)))]):
            bb.normalize(op.strided_slice(x, [0], [0], [n - m]))


def test_shape_to_tensor_holds_the_sizes(rng):
    # y = float(shape(x)) per entry, times 2
    n, m = sv("n"), sv("m")
    x = Var("x", tensor((n, m)))
    _, run = _compile([x], lambda bb: op.multiply(op.shape_to_tensor([n, m * 2, n + m]), op.shape_to_tensor([2],
                                                                                                          True)))
    for a, b in [(1, 1), (3, 5), (6, 2)]:
        np.testing.assert_array_equal(run(rng.standard_normal((a, b)).astype("float32")),
                                      np.asarray([a, 2 * b, a + b]) * 2)


def test_reshape_minus_one_cancels_the_symbolic_factors_both_sides_share():
    """(batch, seq, 128) to (batch, seq, -1, 32) infers 4, as an exported attention's head
    split does: the shared batch * seq cancels (no `batch * seq * 128 // (batch * seq * 32)`
    left for every later shape and kernel); distinct size vars never cancel each other."""
    import numpy as np

    import refcomp
    from refcomp.ast import SizeVar
    from refcomp.graph import BlockBuilder, Var, op, tensor

    batch, seq = SizeVar("batch", "int64"), SizeVar("seq", "int64")
    x = Var("x", tensor((batch, seq, 128)))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            heads = bb.emit(op.reshape(x, (batch, seq, -1, 32)))
            merged = bb.emit(op.reshape(heads, (-1, seq, 32)))
            out = bb.emit_output(op.reshape(merged, (batch, seq, -1)))
        bb.emit_func_output(out)
    mod = bb.get()
    text = mod.functions["main"].script()
    assert "R.Tensor((batch, seq, 4, 32)" in text and "R.Tensor((batch * 4, seq, 32)" in text
    ex = refcomp.graph.build(mod, target="c")
    for b, s in [(1, 1), (2, 5), (3, 7)]:
        a = np.random.default_rng(b * s).standard_normal((b, s, 128)).astype("float32")
        np.testing.assert_array_equal(refcomp.runtime.VirtualMachine(ex)["main"](a), a)
