"""fold_reshapes: a product over flattened rows reads the rows as they are; reshapes of reshapes fold.

Checked on the operators' numpy references (the rewritten graph computes what the original did,
for shapes hypothesis draws), on the graph's structure (what is rewritten and what is left), and
compiled through graph.build against numpy."""
import numpy as np
from hypothesis import given, settings, strategies as st

import refcomp
from refcomp.testing import evaluate_graph
from refcomp.ast import SizeVar
from refcomp.ast.graph import Call, Constant, Op
from refcomp.graph import BlockBuilder, Var, op, tensor
from refcomp.graph.passes import normalize
from refcomp.graph.passes.dead_code_elimination import dead_code_elimination
from refcomp.graph.passes.fold_reshapes import fold_reshapes


def _projection(lead, k, n, w, flatten_to=None, back=True):
    """x (*lead, k) -> reshape to (rows, k) -> @ w (k, n) -> reshape back to (*lead, n) -> + 1, as
    GPT-2's Conv1D exports; flatten_to: another (rows, k') to flatten to (merging the last dims)."""
    x = Var("x", tensor(tuple(lead) + (k,)))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            rows = bb.emit(op.reshape(x, flatten_to or (-1, w.shape[0])))
            y = bb.emit(op.matmul(rows, Constant(w)))
            if back:
                y = bb.emit(op.reshape(y, tuple(lead) + (n,)) if flatten_to is None else y)
            out = bb.emit_output(op.add(y, Constant(np.float32(1.0))))
        bb.emit_func_output(out)
    return normalize(bb.get())


def _ops(mod) -> list[str]:
    return [b.value.op.name for block in mod["main"].body.blocks for b in block.bindings
            if isinstance(b.value, Call) and isinstance(b.value.op, Op)]


@settings(max_examples=25, deadline=None)
@given(lead=st.lists(st.integers(1, 5), min_size=2, max_size=3), k=st.integers(1, 9), n=st.integers(1, 7),
       back=st.booleans(), seed=st.integers(0, 2 ** 32 - 1))
def test_the_product_reads_the_rows_as_they_are(lead, k, n, back, seed):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((k, n)).astype(np.float32)
    mod = _projection(lead, k, n, w, back=back)
    folded = dead_code_elimination(fold_reshapes(mod))
    matmuls = [b.value for block in folded["main"].body.blocks for b in block.bindings
               if isinstance(b.value, Call) and isinstance(b.value.op, Op) and b.value.op.name == "matmul"]
    assert len(matmuls) == 1 and matmuls[0].args[0] is folded["main"].params[0]  # x itself, not a reshape
    # reshaped back to x's leading shape: the two reshapes cancel, none is left
    assert _ops(folded).count("reshape") == (0 if back else 1)
    x = rng.standard_normal(tuple(lead) + (k,)).astype(np.float32)
    np.testing.assert_allclose(evaluate_graph(folded["main"], x), evaluate_graph(mod["main"], x), rtol=1e-5, atol=1e-5)


def test_a_flattening_that_merges_the_last_dims_is_left_alone(rng):
    """(2, 3, 4, 2) flattened to (6, 8): the product's k is not x's last dim, nothing changes."""
    w = rng.standard_normal((8, 5)).astype(np.float32)
    mod = _projection((2, 3, 4), 2, 5, w, flatten_to=(6, 8))
    assert fold_reshapes(mod) is mod


def test_symbolic_rows_compile_and_match_numpy(rng):
    """batch and seq symbolic: reshape(x, (-1, k)) @ W reshaped back to (batch, seq, n) is the
    product over x's rows; graph.build's result agrees with numpy for several sizes."""
    batch, seq = SizeVar("batch", "int64"), SizeVar("seq", "int64")
    w = rng.standard_normal((16, 32)).astype(np.float32)
    x = Var("x", tensor((batch, seq, 16)))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            rows = bb.emit(op.reshape(x, (-1, 16)))
            y = bb.emit(op.matmul(rows, Constant(w)))
            back = bb.emit(op.reshape(y, (batch, seq, 32)))
            out = bb.emit_output(op.tanh(back))
        bb.emit_func_output(out)
    mod = bb.get()
    folded = dead_code_elimination(fold_reshapes(normalize(mod)))
    assert "reshape" not in _ops(folded)
    fn = refcomp.graph.build(mod, target="c").compiled["main"]
    for b, s in ((1, 1), (2, 5), (3, 7)):
        xv = rng.standard_normal((b, s, 16)).astype(np.float32)
        np.testing.assert_allclose(np.asarray(fn(xv)), np.tanh(xv @ w), rtol=1e-4, atol=1e-5)
