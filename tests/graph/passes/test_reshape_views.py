"""reshape_views: a kernel that only reshapes becomes a view of its input.

`is_reshape` is checked on the PrimFuncs legalize_ops makes (reshapes over constant and
symbolic shapes recognized; transposes, slices, casts and arithmetic not); the pass on graphs
compiled by graph.build, the VM and the compiled graph function both against numpy, including
the storage plan: a view's source stays live while the view is read."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import refcomp
from refcomp.ast import SizeVar
from refcomp.ast.graph import Call, Constant, Op, Tuple
from refcomp.graph import BlockBuilder, Var, op, tensor
from refcomp.graph.pipeline import optimize
from refcomp.graph.passes import legalize_ops, normalize
from refcomp.graph.passes.reshape_views import is_reshape


def sv(name):
    return SizeVar(name, "int64")


def _one_kernel(make, shape, dtype="float32"):
    """The PrimFunc legalize_ops makes for make(x) on x of that shape."""
    x = Var("x", tensor(shape, dtype))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(make(x))
        bb.emit_func_output(out)
    mod = legalize_ops(normalize(bb.get()))
    (name,) = [n for n in mod.functions if n != "main"]
    return mod[name]


N, B, S = SizeVar("n", "int64"), SizeVar("b", "int64"), SizeVar("s", "int64")


@pytest.mark.parametrize("shape, target", [
    ((2, 3, 4), (6, 4)), ((2, 3, 4), (24,)), ((24,), (2, 3, 4)), ((2, 3, 4), (4, 3, 2)), ((1, 1), (1,)),
    ((N, 12), (N, 3, 4)), ((2, N, 12), (-1, 12)), ((B, S, 8), (-1, 8)),
    ((B, S, 2, 4), (B, S, 8)), ((B, S, 8), (B, S * 2, 4)), ((N, 6), (N, 2, 3, 1)),
])
def test_reshapes_are_recognized(shape, target):
    assert is_reshape(_one_kernel(lambda x: op.reshape(x, target), shape))


def test_a_transpose_that_keeps_the_element_order_is_a_reshape():
    """(1, 4) -> (4, 1) moves no element: what the kernel does, not the op it came from, counts."""
    assert is_reshape(_one_kernel(lambda x: op.permute_dims(x, (1, 0)), (1, 4)))
    assert not is_reshape(_one_kernel(lambda x: op.permute_dims(x, (1, 0)), (2, 4)))


@pytest.mark.parametrize("make, shape", [
    (lambda x: op.permute_dims(x, (1, 0)), (3, 4)),
    (lambda x: op.strided_slice(x, axes=(0,), begin=(1,), end=(3,)), (4, 5)),
    (lambda x: op.astype(x, "float64"), (3, 4)),
    (lambda x: op.negative(x), (3, 4)),
    (lambda x: op.flip(x, axis=1), (3, 4)),
    (lambda x: op.add(x, x), (N, 4)),
    (lambda x: op.broadcast_to(x, (2, 3, 4)), (3, 4)),
])
def test_other_kernels_are_not(make, shape):
    assert not is_reshape(_one_kernel(make, shape))


def _chain(x_shape, k, mid, n, return_reshape=False):
    """x @ w1 -> reshape to mid -> @ w2 (-> the reshape returned too): the reshape sits between
    two products, so fusion leaves it a kernel of its own."""
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((x_shape[-1], k)).astype(np.float32)
    w2 = rng.standard_normal((mid[-1], n)).astype(np.float32)
    x = Var("x", tensor(x_shape))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(op.matmul(x, Constant(w1)))
            r = bb.emit(op.reshape(y, mid))
            z = bb.emit(op.matmul(r, Constant(w2)))
            out = bb.emit_output(Tuple((z, r)) if return_reshape else z)
        bb.emit_func_output(out)
    return bb.get(), w1, w2


def _ops(mod) -> list[str]:
    return [b.value.op.name for block in mod["main"].body.blocks for b in block.bindings
            if isinstance(b.value, Call) and isinstance(b.value.op, Op)]


def _run_both(mod, *args):
    ex = refcomp.graph.build(mod, target="c", blas=False)
    vm = refcomp.runtime.VirtualMachine(ex, executor="vm")
    return ex, vm["main"](*args), ex.compiled["main"](*args) if ex.executor == "compiled" else None


@settings(max_examples=10, deadline=None)
@given(rows=st.integers(1, 7), parts=st.sampled_from([(2, 3), (3, 2), (1, 6), (6, 1)]),
       seed=st.integers(0, 2 ** 32 - 1))
def test_a_reshape_between_products_is_a_view(rows, parts, seed):
    n = sv("n")
    mod, w1, w2 = _chain((n, 5), 6, (n, *parts), 4)
    assert _ops(optimize(mod, blas=False)).count("view") == 1
    x = np.random.default_rng(seed).standard_normal((rows, 5)).astype(np.float32)
    expected = ((x @ w1).reshape(rows, *parts)) @ w2
    ex, by_vm, compiled = _run_both(mod, x)
    assert ex.executor == "compiled"
    np.testing.assert_allclose(by_vm, expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(compiled, expected, rtol=1e-4, atol=1e-5)


def test_a_returned_reshape_keeps_its_copy(rng):
    """The result may not alias an intermediate the function goes on using: the kernel stays."""
    mod, w1, w2 = _chain((4, 5), 6, (3, 8), 3, return_reshape=True)
    optimized = optimize(mod, blas=False)
    assert "view" not in _ops(optimized)
    x = rng.standard_normal((4, 5)).astype(np.float32)
    ex = refcomp.graph.build(mod, target="c", blas=False)
    z, r = ex.compiled["main"](x) if ex.executor == "compiled" else refcomp.runtime.VirtualMachine(ex)["main"](x)
    np.testing.assert_allclose(r, (x @ w1).reshape(3, 8), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(z, (x @ w1).reshape(3, 8) @ w2, rtol=1e-4, atol=1e-5)


def test_the_source_of_a_view_stays_live_while_the_view_is_read(rng):
    """a = x @ w1 is read only through its view v; b = x @ w2 (a's size) comes after; v @ b reads
    both.  Were a's storage free once v was made, b would take it and overwrite v."""
    w1 = rng.standard_normal((4, 6)).astype(np.float32)
    w2 = rng.standard_normal((4, 6)).astype(np.float32)
    x = Var("x", tensor((6, 4)))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            a = bb.emit(op.matmul(x, Constant(w1)))
            v = bb.emit(op.reshape(a, (6, -1)))
            b = bb.emit(op.matmul(x, Constant(w2)))
            out = bb.emit_output(op.matmul(v, b))
        bb.emit_func_output(out)
    mod = bb.get()
    func = optimize(mod, blas=False)["main"]
    plan = func.attrs["memory_plan"]
    views = [(bi, k) for bi, block in enumerate(func.body.blocks) for k, bnd in enumerate(block.bindings)
             if isinstance(bnd.value, Call) and bnd.value.op_name == "view"]
    assert len(views) == 1 and views[0] not in plan  # the view has no storage of its own
    xv = rng.standard_normal((6, 4)).astype(np.float32)
    expected = (xv @ w1).reshape(6, -1) @ (xv @ w2)
    _, by_vm, compiled = _run_both(mod, xv)
    np.testing.assert_allclose(by_vm, expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(compiled, expected, rtol=1e-4, atol=1e-4)


def test_a_view_with_another_element_count_is_refused():
    x = Var("x", tensor((sv("n"), 6)))
    bb = BlockBuilder()
    with pytest.raises(refcomp.errors.RefcompError, match="element counts"):
        with bb.function("main", [x]):
            with bb.dataflow():
                out = bb.emit_output(op.view(x, (sv("n"), 4)))
            bb.emit_func_output(out)
