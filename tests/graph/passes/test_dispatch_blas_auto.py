"""dispatch_blas mode "auto": which linears stay for refcomp's GEMM (epilogue in the tile) and which
go to sgemm, and that either way the built module equals numpy."""
import numpy as np
import pytest

import refcomp
from refcomp.ast import PrimFunc, SizeVar
from refcomp.graph import BlockBuilder, Var, op, tensor
from refcomp.graph.passes.dispatch_blas import dispatch_blas
from refcomp.loops.intrin import cpu

needs_avx512 = pytest.mark.skipif(not cpu.has("avx512f", "fma"), reason="auto keeps linears only on AVX-512")
# a product with a constant weight is kept on AVX-512 and on AVX2 with FMA
needs_a_tile = pytest.mark.skipif(not cpu.has("avx2", "fma"), reason="auto keeps products only on AVX2/AVX-512")


def _module(body, n=64, k=48, extra=()):
    batch = SizeVar("batch", "int64")
    x, w, b = Var("x", tensor((batch, k))), Var("w", tensor((n, k))), Var("b", tensor((n,)))
    params = [x, w, b, *[Var(name, tensor(shape(batch))) for name, shape in extra]]
    bb = BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(body(bb, *params))
        bb.emit_func_output(out)
    return bb.get()


def _gemm_calls(mod):
    return [b.value.args[0].symbol for block in mod["main"].body.blocks for b in block.bindings
            if getattr(b.value, "op_name", None) == "call_dps_packed"]


def _gelu(y):
    return 0.5 * y * (1.0 + np.tanh(0.7978845608028654 * (y + 0.044715 * y ** 3)))


def _mlp_layer(bb, x, w, b, w2, b2):
    u = bb.emit(op.gelu_tanh(bb.emit(op.linear(x, w, b))))
    return op.add(bb.emit(op.linear(u, w2, b2)), x)


MLP_EXTRA = (("w2", lambda batch: (64, 128)), ("b2", lambda batch: (64,)))


@needs_avx512
def test_auto_keeps_linears_with_an_epilogue_and_always_sends_all():
    mod = _module(_mlp_layer, n=128, k=64, extra=MLP_EXTRA)
    assert _gemm_calls(dispatch_blas(mod)) == []  # both linears feed an elementwise op
    assert _gemm_calls(dispatch_blas(mod, "always")) == ["refcomp.blas.sgemm_nt"] * 2


@needs_avx512
def test_auto_sends_linears_the_recipe_cannot_take_to_blas():
    # no epilogue: the result is read by a reshape
    plain = _module(lambda bb, x, w, b: op.reshape(bb.emit(op.linear(x, w, b)), (-1,)))
    assert _gemm_calls(dispatch_blas(plain)) == ["refcomp.blas.sgemm_nt"]
    # a prologue fusion would fold into the product's kernel (a reshape, an elementwise op)
    for prologue in (lambda x: op.reshape(x, (-1, 48)), op.tanh):
        mod = _module(lambda bb, x, w, b: op.gelu_tanh(bb.emit(op.linear(bb.emit(prologue(x)), w, b))))
        assert _gemm_calls(dispatch_blas(mod)) == ["refcomp.blas.sgemm_nt"]
    # N not a multiple of the 32-wide panels
    narrow = _module(lambda bb, x, w, b: op.gelu_tanh(bb.emit(op.linear(x, w, b))), n=48)
    assert _gemm_calls(dispatch_blas(narrow)) == ["refcomp.blas.sgemm_nt"]


@needs_avx512
def test_auto_sends_a_linear_over_leading_dims_to_blas():
    x, w, b = Var("x", tensor((2, 5, 48))), Var("w", tensor((64, 48))), Var("b", tensor((64,)))
    bb = BlockBuilder()
    with bb.function("main", [x, w, b]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(op.gelu_tanh(bb.emit(op.linear(x, w, b)))))
        bb.emit_func_output(out)
    assert _gemm_calls(dispatch_blas(bb.get())) == ["refcomp.blas.sgemm_nt"]


@needs_a_tile
@pytest.mark.parametrize("kind", ["matmul", "linear"])
def test_auto_keeps_products_with_a_constant_weight_packed_at_build_time(kind, rng):
    from refcomp import graph

    k, n = 48, 64
    w = rng.standard_normal((k, n) if kind == "matmul" else (n, k)).astype("float32")
    bias = rng.standard_normal(n).astype("float32")
    x = Var("x", tensor((SizeVar("batch", "int64"), k)))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            product = op.matmul(x, graph.const(w)) if kind == "matmul" else op.linear(x, graph.const(w),
                                                                                      graph.const(bias))
            out = bb.emit_output(op.reshape(bb.emit(product), (-1,)))  # no epilogue to fuse
        bb.emit_func_output(out)
    mod = bb.get()
    assert _gemm_calls(dispatch_blas(mod)) == []  # the weight's packing is folded at build time
    assert _gemm_calls(dispatch_blas(mod, "always")) == ["refcomp.blas.sgemm_nn" if kind == "matmul"
                                                         else "refcomp.blas.sgemm_nt"]
    a = rng.standard_normal((7, k)).astype("float32")
    want = a @ w if kind == "matmul" else a @ w.T + bias
    got = refcomp.graph.build(mod, target="c").compiled["main"](a)
    np.testing.assert_allclose(got, want.reshape(-1), rtol=1e-4, atol=1e-4)


def _leading_dims_matmul(leading, k, w):
    from refcomp import graph

    x = Var("x", tensor((*leading, k)))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(op.matmul(x, graph.const(w))))
        bb.emit_func_output(out)
    return bb.get()


@needs_a_tile
@pytest.mark.parametrize("seq,n,k,rows", [
    (65, 64, 48, [1, 2, 3]),      # a ViT's 65 tokens: rows = 65 batch, partial last tiles
    (7, 32, 16, [1, 4]),          # a prime seq, the narrowest tile
    (1, 96, 32, [5]),             # one token per image
])
def test_auto_keeps_a_constant_weight_product_over_leading_dims_on_flattened_rows(seq, n, k, rows, rng):
    """x (batch, seq, k) @ W (k, n) with W a constant: kept for the recipe as reshape(x, (batch *
    seq, k)) @ W, reshaped back; equal to numpy for several batch sizes."""
    w = rng.standard_normal((k, n)).astype("float32")
    mod = _leading_dims_matmul((SizeVar("batch", "int64"), seq), k, w)
    dispatched = dispatch_blas(mod)
    assert _gemm_calls(dispatched) == []
    ops = [getattr(b.value, "op_name", None) for block in dispatched["main"].body.blocks for b in block.bindings]
    assert [o for o in ops if o is not None] == ["reshape", "matmul", "reshape"]
    fn = refcomp.graph.build(mod, target="c").compiled["main"]
    for batch in rows:
        a = rng.standard_normal((batch, seq, k)).astype("float32")
        np.testing.assert_allclose(fn(a), a @ w, rtol=1e-4, atol=1e-4)


@needs_a_tile
def test_products_of_one_input_share_its_flattened_rows(rng):
    """Q, K and V projections of one x: one reshape of x to rows feeds all three products."""
    from refcomp import graph

    ws = [rng.standard_normal((32, 64)).astype("float32") for _ in range(3)]
    x = Var("x", tensor((SizeVar("batch", "int64"), 5, 32)))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            q, k, v = (bb.emit(op.matmul(x, graph.const(w))) for w in ws)
            out = bb.emit_output(op.add(bb.emit(op.add(q, k)), v))
        bb.emit_func_output(out)
    mod = bb.get()
    dispatched = dispatch_blas(mod)
    ops = [getattr(b.value, "op_name", None) for block in dispatched["main"].body.blocks for b in block.bindings]
    assert ops.count("matmul") == 3 and ops.count("reshape") == 4  # x once, each result back
    a = rng.standard_normal((3, 5, 32)).astype("float32")
    want = a @ ws[0] + a @ ws[1] + a @ ws[2]
    np.testing.assert_allclose(refcomp.graph.build(mod, target="c").compiled["main"](a), want, rtol=1e-4, atol=1e-4)


@needs_a_tile
def test_auto_keeps_a_product_over_two_symbolic_leading_dims(rng):
    """batch * seq rows (not affine in the sizes): the recipe's partial last tile takes the
    product as its bound; equal to numpy for several (batch, seq), partial tiles included."""
    w = rng.standard_normal((48, 64)).astype("float32")
    mod = _leading_dims_matmul((SizeVar("batch", "int64"), SizeVar("seq", "int64")), 48, w)
    assert _gemm_calls(dispatch_blas(mod)) == []
    fn = refcomp.graph.build(mod, target="c").compiled["main"]
    for batch, seq in [(1, 1), (2, 7), (3, 13), (2, 64)]:
        a = rng.standard_normal((batch, seq, 48)).astype("float32")
        np.testing.assert_allclose(fn(a), a @ w, rtol=1e-4, atol=1e-4)


def test_dispatch_blas_rejects_an_unknown_mode():
    with pytest.raises(refcomp.BuildError, match="mode"):
        dispatch_blas(_module(lambda bb, x, w, b: op.linear(x, w, b)), "sometimes")


@pytest.mark.parametrize("blas", [True, "always"])
def test_mlp_layer_matches_numpy_either_way(rng, blas):
    from refcomp.runtime.blas import register_blas

    if not register_blas():
        pytest.skip("numpy's OpenBLAS library was not found")
    ex = refcomp.graph.build(_module(_mlp_layer, n=128, k=64, extra=MLP_EXTRA), target="c", blas=blas)
    tiled = [f for f in ex.module.functions.values() if isinstance(f, PrimFunc) and "sgemm" in f.script()]
    assert bool(tiled) == (blas is True and cpu.has("avx512f", "fma"))
    x = rng.standard_normal((37, 64)).astype(np.float32)
    w, b = rng.standard_normal((128, 64)).astype(np.float32), rng.standard_normal(128).astype(np.float32)
    w2, b2 = rng.standard_normal((64, 128)).astype(np.float32) * 0.1, rng.standard_normal(64).astype(np.float32)
    out = np.asarray(refcomp.runtime.VirtualMachine(ex)["main"](x, w, b, w2, b2))
    u = _gelu(x.astype(np.float64) @ w.T + b)
    np.testing.assert_allclose(out, u @ w2.T + b2 + x, rtol=1e-4, atol=1e-4)


def _flatten_gemm_unflatten(k, n, reuse_flat=False, last=None):
    """x (batch, seq, k) -> reshape (-1, k) -> @ W (k, n) -> reshape (batch, seq, n) -> tanh, as
    an exported GPT-2's Conv1D does (plus, with reuse_flat, another reader of the (rows, n) value)."""
    from refcomp.ast.graph import Constant

    batch, seq = SizeVar("batch", "int64"), SizeVar("seq", "int64")
    x = Var("x", tensor((batch, seq, k)))
    w = np.random.default_rng(k * n).standard_normal((k if last is None else last, n)).astype("float32")
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            flat = bb.emit(op.reshape(x, (-1, k if last is None else last)))
            product = bb.emit(op.matmul(flat, Constant(w)))
            back = bb.emit(op.reshape(product, (batch, seq, -1) if last is None else (-1, n)))
            out = op.tanh(back)
            if reuse_flat:
                out = op.add(bb.emit(out), op.reshape(bb.emit(op.exp(product)), (batch, seq, n)))
            out = bb.emit_output(out)
        bb.emit_func_output(out)
    return bb.get(), w


@pytest.mark.parametrize("k, n", [(16, 24), (7, 13), (1, 1)])
@pytest.mark.parametrize("reuse_flat", [False, True])
def test_gemm_reads_flattened_rows_in_place_and_the_reshapes_fold(k, n, reuse_flat):
    """The GEMM reads x (batch, seq, k) itself (its leading dims are the rows) and its result in
    (batch, seq, n) is what the reshape back gives: no copy kernel on either side; a reader of
    the (rows, n) value gets a reshape of it.  Equal to numpy for any batch and seq."""
    mod, w = _flatten_gemm_unflatten(k, n, reuse_flat)
    ex = refcomp.graph.build(mod, target="c", blas="always")
    text = ex.module["main"].script() if hasattr(ex, "module") else ""
    assert "sgemm_nn'), (x," in text
    assert ex.executor == "compiled"
    if not reuse_flat:
        assert ex.stats["kernels"] == 1  # tanh alone
    for batch, seq in [(1, 1), (2, 5), (3, 7)]:
        a = np.random.default_rng(batch * seq).standard_normal((batch, seq, k)).astype("float32")
        y = a @ w
        expected = np.tanh(y) + (np.exp(y) if reuse_flat else 0)
        np.testing.assert_allclose(ex.compiled["main"](a), expected, rtol=2e-5, atol=2e-5)


def test_a_reshape_that_changes_the_last_dim_is_not_read_in_place():
    """(batch, seq, 4) -> (-1, 8): the rows of the GEMM are not x's leading dims; left as it was."""
    mod, w = _flatten_gemm_unflatten(4, 6, last=8)
    out = dispatch_blas(refcomp.graph.passes.normalize(mod))
    text = out["main"].script()
    assert "sgemm_nn'), (x," not in text and "sgemm_nn'), (lv0," in text
    ex = refcomp.graph.build(mod, target="c", blas="always")
    a = np.random.default_rng(3).standard_normal((2, 4, 4)).astype("float32")
    np.testing.assert_allclose(ex.compiled["main"](a), np.tanh(a.reshape(-1, 8) @ w), rtol=2e-5, atol=2e-5)
