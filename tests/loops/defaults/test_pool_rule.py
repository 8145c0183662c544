"""The pooling rule: a window reduction with its accumulator in a local (register) tile, a vector
of output columns per tile where one divides the width (max pooling: one block, or with padding a
padded copy made per plane and the window; average pooling, three, keeps the generic schedule);
both checked against
the operators' numpy references and the interpreter over odd, prime and unit shapes, padding,
stride 2, a symbolic batch, on AVX-512 and AVX2 widths."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import refcomp
from refcomp.ast import Block, For, SizeVar
from refcomp.graph import BlockBuilder, Var, op, tensor
from refcomp.graph.op.registry import get
from refcomp.graph.passes import default_schedule as ds
from refcomp.graph.pipeline import optimize
from refcomp.ast import PrimFunc
from refcomp.loops.defaults import padded_rows_window_reduction, padded_window_reduction, window_reduction
from refcomp.loops.interpreter import interpret
from refcomp.loops.primitives.tree import walk



def _pool_kernel(kind, batch, c, h, w, k, stride, pad, **attrs):
    x = Var("x", tensor((batch, c, h, w)))
    make = op.max_pool2d if kind == "max" else op.avg_pool2d
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(make(x, pool_size=k, strides=stride, padding=pad, **attrs))
        bb.emit_func_output(out)
    call = bb.get()
    mod = optimize(call, schedule=False)
    (func,) = [f for f in mod.functions.values() if isinstance(f, PrimFunc)]
    return func, make(Var("y", tensor((2, c, h, w))), pool_size=k, strides=stride, padding=pad, **attrs)


def _check(kind, batch, c, h, w, k, stride, pad, seed, interpreter=False, **attrs):
    func, call = _pool_kernel(kind, batch, c, h, w, k, stride, pad, **attrs)
    scheduled = ds.schedule_kernel(func)
    x = np.random.default_rng(seed).standard_normal((2, c, h, w)).astype(np.float32)
    expected = get(call.op.name).evaluate([x], call.attrs)
    out = np.full(expected.shape, np.nan, np.float32)
    refcomp.build(scheduled)(x, out)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
    if interpreter:
        again = np.full(expected.shape, np.nan, np.float32)
        interpret(scheduled, x, again)
        np.testing.assert_allclose(again, expected, rtol=1e-5, atol=1e-6)
    return func, scheduled


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("c,h,w,k,stride,pad", [
    (3, 9, 16, 3, 2, 1),    # the ResNet stem's pool: 8 output columns, stride 2, padding
    (2, 8, 8, 2, 2, 0),     # 2x2, 4 columns
    (1, 5, 7, 3, 1, 1),     # 7 columns: no vector divides them, scalar accumulators
    (2, 1, 1, 1, 1, 0),     # one pixel
])
def test_pool_rule_matches_numpy(rng, vector_isa, kind, c, h, w, k, stride, pad):
    func, scheduled = _check(kind, 2, c, h, w, k, stride, pad, int(rng.integers(1 << 30)), interpreter=True)
    if kind == "avg":  # a window sum, a count and a division: several blocks, not this rule's
        return
    assert padded_rows_window_reduction(func) is None
    padded = padded_window_reduction(func)
    assert (padded is not None) == (pad > 0) and (window_reduction(func) is not None) == (pad == 0)
    columns = pad > 0 and k > stride  # windows overlapping in y: each output row's column maxima first
    if padded is not None:
        assert (padded[0].name == "pool_columns") == columns
    local = [b for s in walk(scheduled.body) if isinstance(s, Block) for b in s.alloc_buffers if b.scope == "local"]
    assert local and any(f.kind == "parallel" for f in walk(scheduled.body) if isinstance(f, For))
    assert len([f for f in walk(scheduled.body) if isinstance(f, For) and f.kind == "parallel"]) == 1
    if padded is not None:  # the padded plane is a local stack array, its window reads untested
        assert any(b.name == padded[0].name for b in local)
        pool = next(s for s in walk(scheduled.body) if isinstance(s, Block) and s.name == padded[1].name)
        assert "if_then_else" not in str(pool.body)
    if columns:  # the column maxima of a plane (an elementwise max) read the input, no padded plane
        assert not any(b.name == "pad" for s in walk(scheduled.body) if isinstance(s, Block) for b in s.alloc_buffers)
        if ((w + 2 * pad - k) // stride + 1) % 4 == 0:  # both windows vectorized
            assert len([f for f in walk(scheduled.body) if isinstance(f, For) and f.kind == "vectorized"]) >= 2


@pytest.mark.parametrize("c,h,w,k,stride,pad,dilation", [
    (2, 10, 11, 3, 2, 1, 1),   # ceil_mode: the last window starts inside the input, ends past the padding
    (3, 9, 9, 2, 2, 1, 1),     # an even window
    (2, 12, 13, 3, 1, 2, 2),   # dilated
])
def test_padded_max_pool_in_ceil_mode_and_dilated(rng, c, h, w, k, stride, pad, dilation):
    """The padded copy covers every window ceil_mode and dilation reach: the same values as the
    operator's reference (and the interpreter)."""
    func, _ = _check("max", 2, c, h, w, k, stride, pad, int(rng.integers(1 << 30)), interpreter=True,
                     ceil_mode=True, dilation=dilation)
    assert padded_window_reduction(func) is not None


def test_pool_rule_with_a_symbolic_batch(rng):
    _check("max", SizeVar("batch", "int64"), 4, 12, 16, 3, 2, 1, int(rng.integers(1 << 30)))


def test_a_matmul_or_row_reduction_is_not_a_window():
    from refcomp import te

    a = te.placeholder((4, 8), "float32", "A")
    r = te.reduce_axis((0, 8), "r")
    row_max = te.compute((4,), lambda i: te.max(a[i, r], axis=r), name="m")
    assert window_reduction(te.create_prim_func([a, row_max])) is None


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(["max", "avg"]), c=st.integers(1, 5), h=st.integers(1, 13), w=st.integers(1, 37),
       k=st.sampled_from([1, 2, 3]), stride=st.integers(1, 2), pad=st.integers(0, 1), seed=st.integers(0, 1 << 30))
def test_pool_rule_random_shapes(kind, c, h, w, k, stride, pad, seed):
    pad = min(pad, k // 2)
    if h + 2 * pad < k or w + 2 * pad < k:
        return
    _check(kind, 2, c, h, w, k, stride, pad, seed)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(c=st.sampled_from([1, 2, 3]), h=st.sampled_from([1, 2, 5, 7, 13, 24]), w=st.sampled_from([1, 3, 7, 16, 17, 31, 48]),
       k=st.sampled_from([2, 3, 5]), stride=st.sampled_from([1, 2, 3]), seed=st.integers(0, 1 << 30))
def test_max_pool_in_two_windows_matches_numpy_and_interpreter(vector_isa, c, h, w, k, stride, seed):
    """Max pooling with padding and windows overlapping in y (k > stride) is, per output row, the
    max of its window's k rows at every padded column (read from the input with the bounds test),
    then the maxima of those over each window's columns: the same values as the reference and the
    interpreter (max is exact), on odd, prime and unit sizes and both vector widths."""
    pad = k // 2
    if h + 2 * pad < k or w + 2 * pad < k:
        return
    func, _ = _check("max", 2, c, h, w, k, stride, pad, seed, interpreter=True)
    assert (padded_window_reduction(func)[0].name == "pool_columns") == (k > stride)


@pytest.mark.parametrize("y,x_", [(3, 7), (0, 0), (8, 15)])
def test_max_pool_propagates_nan_through_both_windows(vector_isa, y, x_):
    func, call = _pool_kernel("max", 2, 2, 9, 16, 3, 2, 1)
    x = np.random.default_rng(5).standard_normal((2, 2, 9, 16)).astype(np.float32)
    x[0, 1, y, x_] = np.nan
    expected = get(call.op.name).evaluate([x], call.attrs)
    out = np.zeros(expected.shape, np.float32)
    refcomp.build(ds.schedule_kernel(func))(x, out)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(expected))
    if (y, x_) == (3, 7):
        assert np.isnan(out).sum() == 4  # the 2 x 2 windows holding (3, 7): rows 1-2, columns 3-4
    np.testing.assert_array_equal(out[~np.isnan(out)], expected[~np.isnan(expected)])


def test_three_block_max_pool_keeps_its_schedule(rng):
    """A copy, each copied row's window maxima gathered at stride 2, and their maxima over the
    window's rows (a chain the legalization no longer makes, written by hand) are still taken by
    the rule: each moved into the plane loop and vectorized, the same values as numpy."""
    from refcomp import te
    from refcomp.loops.defaults import schedule_pool
    from refcomp.loops.schedule import Schedule

    n, c, h, w, out_h, out_w = 2, 3, 11, 17, 5, 8  # 3 x 3 windows, stride 2, no padding
    x = te.placeholder((n, c, h, w), "float32", "x")
    copy = te.compute((n, c, h, w), lambda i, j, y, z: x[i, j, y, z], name="pad")
    rx = te.reduce_axis((0, 3), "rx")
    rows = te.compute((n, c, h, out_w), lambda i, j, y, ox: te.max(copy[i, j, y, ox * 2 + rx], axis=rx),
                      name="pool_rows")
    ry = te.reduce_axis((0, 3), "ry")
    pool = te.compute((n, c, out_h, out_w), lambda i, j, oy, ox: te.max(rows[i, j, oy * 2 + ry, ox], axis=ry),
                      name="pool")
    func = te.create_prim_func([x, pool])
    assert padded_rows_window_reduction(func) is not None
    scheduled = schedule_pool(Schedule(func)).func
    assert any(f.kind == "parallel" for f in walk(scheduled.body) if isinstance(f, For))
    data = rng.standard_normal((n, c, h, w)).astype(np.float32)
    expected = np.full((n, c, out_h, out_w), -np.inf, np.float32)
    for dy in range(3):
        for dx in range(3):
            expected = np.maximum(expected, data[:, :, dy:dy + 2 * out_h:2, dx:dx + 2 * out_w:2])
    out = np.full(expected.shape, np.nan, np.float32)
    refcomp.build(scheduled)(data, out)
    np.testing.assert_array_equal(out, expected)
    again = np.full(expected.shape, np.nan, np.float32)
    interpret(scheduled, data, again)
    np.testing.assert_array_equal(again, expected)
