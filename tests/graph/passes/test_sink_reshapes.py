"""sink_reshapes: element-wise work between a reshape and its way back runs on the reshape's source.

Checked on the operators' numpy references (the rewritten graph computes what the original did,
for the shapes and chains hypothesis draws), on the graph's structure (the round trip is gone;
what may not move stays), and through graph.build: the activation becomes the product's epilogue."""
import numpy as np
from hypothesis import given, settings, strategies as st

import refcomp
from refcomp.ast import SizeVar
from refcomp.ast.graph import Call, Constant, Op, Tuple
from refcomp.graph import BlockBuilder, Var, op, tensor
from refcomp.graph.passes import normalize
from refcomp.graph.passes.dead_code_elimination import dead_code_elimination
from refcomp.graph.passes.sink_reshapes import sink_reshapes
from refcomp.graph.pipeline import optimize
from refcomp.testing import evaluate_graph

N = SizeVar("n", "int64")


def _scalar(v):
    return Constant(np.float32(v))


# each step: (name, function of the current value and the reshaped product) -> next value
STEPS = {
    "tanh": lambda v, r: op.tanh(v),
    "half": lambda v, r: op.multiply(v, _scalar(0.5)),
    "plus_r": lambda v, r: op.add(v, r),
    "cube": lambda v, r: op.power(v, _scalar(3.0)),
    "exp_neg": lambda v, r: op.exp(op.negative(v)),
    "max_r": lambda v, r: op.maximum(v, r),
}


def _round_trip(rows, k, inner, steps, w, w2, extra_output=False):
    """x (rows, k) @ w -> reshape to inner -> steps -> reshape back -> @ w2."""
    x = Var("x", tensor((rows, k)))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            m = bb.emit(op.matmul(x, Constant(w)))
            r = bb.emit(op.reshape(m, inner))
            v = r
            for s in steps:
                v = bb.emit(STEPS[s](v, r))
            f = bb.emit(op.reshape(v, (rows, w.shape[1])))
            y = bb.emit(op.matmul(f, Constant(w2)))
            out = bb.emit_output(Tuple((y, v)) if extra_output else y)
        bb.emit_func_output(out)
    return normalize(bb.get())


def _ops(mod) -> list[str]:
    return [b.value.op.name for block in mod["main"].body.blocks for b in block.bindings
            if isinstance(b.value, Call) and isinstance(b.value.op, Op)]


def _same_results(a, b, *args):
    ra, rb = evaluate_graph(a["main"], *args), evaluate_graph(b["main"], *args)
    for p, q in zip(ra if isinstance(ra, tuple) else (ra,), rb if isinstance(rb, tuple) else (rb,)):
        np.testing.assert_allclose(p, q, rtol=1e-5, atol=1e-5)


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 4), inner=st.sampled_from([(2, 8), (4, 4), (16,), (2, 2, 4)]),
       steps=st.lists(st.sampled_from(sorted(STEPS)), min_size=1, max_size=4),
       extra_output=st.booleans(), seed=st.integers(0, 2 ** 32 - 1))
def test_the_region_runs_on_the_source_and_computes_the_same(rows, inner, steps, extra_output, seed):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((3, 16)).astype(np.float32)
    w2 = rng.standard_normal((16, 5)).astype(np.float32)
    inner = (rows,) + inner
    mod = _round_trip(rows, 3, inner, steps, w, w2, extra_output)
    sunk = dead_code_elimination(sink_reshapes(mod))
    # the round trip is gone; a region value returned in its own shape is reshaped for that reader
    assert _ops(sunk).count("reshape") == (1 if extra_output else 0)
    x = rng.uniform(-1, 1, (rows, 3)).astype(np.float32)
    _same_results(sunk, mod, x)


def test_without_a_way_back_nothing_moves(rng):
    w = rng.standard_normal((3, 16)).astype(np.float32)
    x = Var("x", tensor((2, 3)))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            r = bb.emit(op.reshape(op.matmul(x, Constant(w)), (2, 4, 4)))
            out = bb.emit_output(op.tanh(r))
        bb.emit_func_output(out)
    mod = normalize(bb.get())
    assert sink_reshapes(mod) is mod


def test_an_operand_that_broadcasts_along_a_dim_stops_the_region(rng):
    """r + b with b (4,) adds b along the reshaped last dim: it cannot run on the source; the
    tanh before it moves only when its own result makes a round trip (here it does not)."""
    w = rng.standard_normal((3, 16)).astype(np.float32)
    w2 = rng.standard_normal((16, 5)).astype(np.float32)
    b = rng.standard_normal((4,)).astype(np.float32)
    x = Var("x", tensor((2, 3)))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            r = bb.emit(op.reshape(op.matmul(x, Constant(w)), (2, 4, 4)))
            t = bb.emit(op.add(op.tanh(r), Constant(b)))
            f = bb.emit(op.reshape(t, (2, 16)))
            out = bb.emit_output(op.matmul(f, Constant(w2)))
        bb.emit_func_output(out)
    mod = normalize(bb.get())
    sunk = dead_code_elimination(sink_reshapes(mod))
    assert sunk is mod or _ops(sunk).count("reshape") == 2
    _same_results(sunk, mod, rng.standard_normal((2, 3)).astype(np.float32))


def test_the_activation_becomes_the_products_epilogue(rng):
    """GPT-2's MLP shape: (n, 8) @ W -> (n, 2, 16) -> a GELU written out -> (n, 32) @ W2.
    After the pipeline the first product and the whole GELU are one kernel, and graph.build's
    result matches numpy for several row counts."""
    w = rng.standard_normal((8, 32)).astype(np.float32)
    w2 = rng.standard_normal((32, 16)).astype(np.float32)
    x = Var("x", tensor((N, 8)))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            r = bb.emit(op.reshape(op.matmul(x, Constant(w)), (N, 2, 16)))
            inner = op.multiply(op.add(r, op.multiply(op.power(r, _scalar(3.0)), _scalar(0.044715))),
                                _scalar(0.7978845608))
            g = bb.emit(op.multiply(op.multiply(r, _scalar(0.5)), op.add(op.tanh(inner), _scalar(1.0))))
            f = bb.emit(op.reshape(g, (N, 32)))
            out = bb.emit_output(op.matmul(f, Constant(w2)))
        bb.emit_func_output(out)
    mod = bb.get()
    optimized = optimize(mod, blas=False)
    calls = [b.value.args[0].name for block in optimized["main"].body.blocks for b in block.bindings
             if isinstance(b.value, Call) and b.value.op_name == "call_tir"]
    assert len(calls) == 2 and "tanh" in calls[0] and "matmul" in calls[0], calls
    fn = refcomp.graph.build(mod, target="c", blas=False)
    for rows in (1, 5, 13):
        xv = rng.standard_normal((rows, 8)).astype(np.float32)
        h = xv @ w
        gelu = 0.5 * h * (1 + np.tanh(0.7978845608 * (h + 0.044715 * h ** 3)))
        got = fn.compiled["main"](xv) if fn.executor == "compiled" else refcomp.runtime.VirtualMachine(fn)["main"](xv)
        np.testing.assert_allclose(got, gelu @ w2, rtol=1e-4, atol=1e-4)


@settings(max_examples=15, deadline=None)
@given(rows=st.integers(1, 4), split=st.sampled_from([1, 2, 3]), leading_ones=st.integers(0, 1),
       seed=st.integers(0, 2 ** 32 - 1))
def test_a_bias_along_the_kept_last_dim_moves_with_the_region(rows, split, leading_ones, seed):
    """BERT's MLP: (rows * split, 8) -> (rows, split, 8) -> + bias (8,) -> gelu -> back: the
    reshape keeps the last dim, so the bias broadcasts the same way over the product's rows."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((3, 8)).astype(np.float32)
    w2 = rng.standard_normal((8, 5)).astype(np.float32)
    bias = rng.standard_normal((1,) * leading_ones + (8,)).astype(np.float32)
    x = Var("x", tensor((rows * split, 3)))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            r = bb.emit(op.reshape(op.matmul(x, Constant(w)), (rows, split, 8)))
            g = bb.emit(op.gelu(op.add(r, Constant(bias))))
            f = bb.emit(op.reshape(g, (rows * split, 8)))
            out = bb.emit_output(op.matmul(f, Constant(w2)))
        bb.emit_func_output(out)
    mod = normalize(bb.get())
    sunk = dead_code_elimination(sink_reshapes(mod))
    assert "reshape" not in _ops(sunk)
    _same_results(sunk, mod, rng.standard_normal((rows * split, 3)).astype(np.float32))
