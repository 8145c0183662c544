"""The graph function compiled to C: the default executor where it applies, results equal to the
VM's on odd, zero and one sizes, the VM's argument errors, and the VM (with its reason) elsewhere."""
import logging
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import refcomp

from graph_helpers import load_benchmark_models
from refcomp.ast import SizeVar
from refcomp.ast.graph import TupleGetItem
from refcomp.graph import BlockBuilder, Var, op, tensor
from refcomp.runtime.blas import openblas_path
from refcomp.runtime.vm import register_extern

from test_vm import attention_like, attention_ref, exp_or_negative

BLAS = [False, True] if openblas_path() is not None else [False]


def sv(name):
    return SizeVar(name, "int64")


def both(ex):
    return refcomp.runtime.VirtualMachine(ex), refcomp.runtime.VirtualMachine(ex, executor="vm")


def same(a, b, exact):
    if exact:
        np.testing.assert_array_equal(a, b)
    else:
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


_CACHE = {}


def attention_executable(blas):
    if blas not in _CACHE:
        _CACHE[blas] = refcomp.graph.build(attention_like(), target="c", blas=blas)
    return _CACHE[blas]


@pytest.mark.parametrize("blas", BLAS)
def test_attention_compiled_by_default_and_equal_to_the_vm(rng, blas):
    ex = attention_executable(blas)
    assert ex.executor == "compiled"
    assert ex.compiled["main"].kernel_calls >= 1
    fast, slow = both(ex)
    w = rng.standard_normal((8, 8)).astype("float32")
    for shape in [(1, 1, 8), (3, 5, 8), (4, 16, 8), (2, 0, 8), (0, 3, 8)]:
        x = rng.standard_normal(shape).astype("float32")
        got = fast["main"](x, w)
        same(got, slow["main"](x, w), exact=not blas)
        assert got.shape == x.shape
        if x.size:
            np.testing.assert_allclose(got, attention_ref(x, w), rtol=1e-4, atol=1e-5)


@settings(max_examples=15, deadline=None)
@given(batch=st.integers(0, 4), seq=st.integers(0, 16), seed=st.integers(0, 2**32 - 1))
def test_attention_any_size_within_bounds_matches_the_vm(batch, seq, seed):
    rng = np.random.default_rng(seed)
    fast, slow = both(attention_executable(False))
    x = rng.standard_normal((batch, seq, 8)).astype("float32")
    w = rng.standard_normal((8, 8)).astype("float32")
    np.testing.assert_array_equal(fast["main"](x, w), slow["main"](x, w))


def _raised(fn, *args):
    try:
        fn(*args)
    except refcomp.errors.RefcompError as exc:
        return type(exc), str(exc)
    return None


def test_wrong_inputs_raise_what_the_vm_raises(rng):
    fast, slow = both(attention_executable(False))
    w = rng.standard_normal((8, 8)).astype("float32")
    cases = [(np.ones((1, 2, 7), "float32"), w), (np.ones((1, 2, 8), "float64"), w), (np.ones((2, 8), "float32"), w),
             (w,), (np.ones((1, 2, 8), "float32"), np.ones((8, 9), "float32")),
             (np.ones((5, 17, 8), "float32"), w), ([1.0], w)]
    for args in cases:
        got, expected = _raised(fast["main"], *args), _raised(slow["main"], *args)
        assert got is not None and got == expected, args
    assert issubclass(_raised(fast["main"], np.ones((2, 8), "float32"), w)[0], refcomp.ArgumentError)


def test_size_var_shared_by_two_params_is_checked_in_c():
    n = sv("n")
    x, y = Var("x", tensor((n,))), Var("y", tensor((n,)))
    bb = BlockBuilder()
    with bb.function("main", [x, y]):
        with bb.dataflow():
            out = bb.emit_output(op.add(x, y))
        bb.emit_func_output(out)
    ex = refcomp.graph.build(bb.get(), target="c")
    assert ex.executor == "compiled"
    fast, _ = both(ex)
    with pytest.raises(refcomp.ArgumentError, match="dim 0 is 4 but must be n = 3"):
        fast["main"](np.ones(3, "float32"), np.ones(4, "float32"))
    fixed = Var("x", tensor((n, 16)))
    bb = BlockBuilder()
    with bb.function("main", [fixed]):
        with bb.dataflow():
            out = bb.emit_output(op.relu(fixed))
        bb.emit_func_output(out)
    for run in both(refcomp.graph.build(bb.get(), target="c")):   # compiled C and the VM: one text
        with pytest.raises(refcomp.ArgumentError, match=r"argument x: dim 1 is 15 but must be 16 \(shape \(3, 15\)"):
            run["main"](np.ones((3, 15), "float32"))
    np.testing.assert_array_equal(fast["main"](np.arange(3, dtype="float32"), np.ones(3, "float32")),
                                  np.arange(3) + 1)


def test_tuple_results_and_constants(rng):
    n = sv("n")
    x = Var("x", tensor((n, 3)))
    c = rng.standard_normal((1, 3)).astype("float32")
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(op.add(x, refcomp.graph.const(c)))
            z = bb.emit(op.exp(y))
            out = bb.emit_output(refcomp.ast.graph.Tuple((z, op.sum(y, axis=[1]))))
        bb.emit_func_output(out)
    ex = refcomp.graph.build(bb.get(), target="c")
    assert ex.executor == "compiled"
    fast, slow = both(ex)
    for rows in (0, 1, 5):
        a = rng.standard_normal((rows, 3)).astype("float32")
        got, expected = fast["main"](a), slow["main"](a)
        assert isinstance(got, tuple) and len(got) == 2
        for g, e in zip(got, expected):
            np.testing.assert_array_equal(g, e)
        np.testing.assert_allclose(got[0], np.exp(a + c), rtol=1e-6)


def test_control_flow_runs_in_the_vm_with_its_reason(rng, caplog):
    mod, _ = exp_or_negative()
    with caplog.at_level(logging.INFO, logger="refcomp.graph"):
        ex = refcomp.graph.build(mod, target="c")
    assert ex.executor == "vm: control flow (R.If)"
    assert "vm: control flow" in caplog.text
    a = rng.standard_normal(4).astype("float32")
    np.testing.assert_array_equal(refcomp.runtime.VirtualMachine(ex)["main"](np.array(False), a), -a)
    with pytest.raises(refcomp.BuildError, match="cannot be compiled to C"):
        refcomp.graph.build(mod, target="c", executor="compiled")


def test_python_extern_runs_in_the_vm(rng):
    register_extern("test.graph_c.double", lambda a, out: out.__setitem__(..., 2 * a))
    x = Var("x", tensor((4,)))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        y = bb.emit(op.call_dps_packed("test.graph_c.double", (x,), tensor((4,))))
        bb.emit_func_output(y)
    ex = refcomp.graph.build(bb.get(), target="c")
    assert ex.executor == "vm: calls the Python extern test.graph_c.double"
    a = rng.standard_normal(4).astype("float32")
    np.testing.assert_array_equal(refcomp.runtime.VirtualMachine(ex)["main"](a), 2 * a)


def test_interpret_target_and_vm_executor_use_the_vm():
    ex = refcomp.graph.build(attention_like(), target="c", executor="vm")
    assert ex.compiled == {} and ex.executor == "vm"
    with pytest.raises(refcomp.BuildError, match="executor must be"):
        refcomp.graph.build(attention_like(), target="c", executor="fast")


def test_tuple_getitem_of_a_kernel_with_two_outputs(rng):
    n = sv("n")
    x = Var("x", tensor((n, 3)))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            parts = bb.emit(op.split(x, 3, axis=1))
            y = bb.emit_output(op.multiply(bb.emit(TupleGetItem(parts, 0)), bb.emit(TupleGetItem(parts, 2))))
        bb.emit_func_output(y)
    ex = refcomp.graph.build(bb.get(), target="c")
    fast, slow = both(ex)
    a = rng.standard_normal((5, 3)).astype("float32")
    np.testing.assert_array_equal(fast["main"](a), slow["main"](a))
    np.testing.assert_allclose(fast["main"](a), a[:, :1] * a[:, 2:], rtol=1e-6)


@pytest.fixture(scope="module")
def models():
    return load_benchmark_models("graph_benchmark_models_c")


@pytest.mark.parametrize("blas", BLAS)
def test_benchmark_mlp_compiled_equals_the_vm(models, rng, blas):
    mod, shapes = models.mlp(32, 64, 2)
    ex = refcomp.graph.build(mod, target="c", blas=blas)
    assert ex.executor == "compiled"
    fast, slow = both(ex)
    w = [(rng.standard_normal(s) / math.sqrt(s[-1])).astype("float32") for s in shapes]
    for batch in (1, 7):
        x = rng.standard_normal((batch, 32)).astype("float32")
        same(fast["main"](x, *w), slow["main"](x, *w), exact=not blas)


@pytest.mark.skipif(openblas_path() is None, reason="numpy's OpenBLAS is not available")
def test_large_blas_products_shared_over_threads_match_the_vm(rng):
    m = sv("m")
    x, w = Var("x", tensor((m, 256))), Var("w", tensor((4, 160, 160)))
    bb = BlockBuilder()
    with bb.function("main", [x, w]):
        with bb.dataflow():
            wide = bb.emit(op.matmul(x, refcomp.graph.const(rng.standard_normal((256, 1024)).astype("float32"))))
            batched = bb.emit(op.matmul(w, w))
            out = bb.emit_output(refcomp.ast.graph.Tuple((wide, batched)))
        bb.emit_func_output(out)
    ex = refcomp.graph.build(bb.get(), target="c", blas="always")
    assert ex.executor == "compiled" and ex.compiled["main"]._uses_blas
    fast, slow = both(ex)
    xa = rng.standard_normal((64, 256)).astype("float32")
    wa = rng.standard_normal((4, 160, 160)).astype("float32")
    for got, expected in zip(fast["main"](xa, wa), slow["main"](xa, wa)):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(fast["main"](xa, wa)[1], wa @ wa, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("blas", BLAS)
def test_strict_c99_target_compiles_the_graph_function(rng, blas):
    ex = refcomp.graph.build(attention_like(), target="c -std=c99", blas=blas)
    assert ex.executor == "compiled"
    fast, slow = both(ex)
    x = rng.standard_normal((2, 3, 8)).astype("float32")
    w = rng.standard_normal((8, 8)).astype("float32")
    same(fast["main"](x, w), slow["main"](x, w), exact=not blas)


def _positions_added(table_rows: int):
    """out[b, s, :] = x[b, s, :] + table[s, :] for s < seq, where the table slice has shape
    (min(seq, rows), 8) and a match_cast says it is (seq, 8): a transformer's position
    embeddings, checked at run time (seq <= rows) as an exported BERT does."""
    from refcomp.ast.graph import Constant
    from refcomp.ast.graph_struct_info import TensorStructInfo

    batch, seq = sv("batch"), sv("seq")
    x = Var("x", tensor((batch, seq, 8)))
    table = np.random.default_rng(table_rows).standard_normal((table_rows, 8)).astype("float32")
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            rows = bb.emit(op.strided_slice(Constant(table), axes=(0,), begin=(0,), end=(seq,)))
            cast = bb.match_cast(rows, TensorStructInfo((seq, 8), "float32"))
            out = bb.emit_output(op.add(x, cast))
        bb.emit_func_output(out)
    return bb.get(), table


@pytest.mark.parametrize("batch, seq", [(1, 1), (2, 5), (3, 16)])
def test_match_cast_of_a_computed_shape_is_checked_in_c(batch, seq):
    """A match_cast whose shape follows from the inputs' shapes (no data) no longer sends the
    function to the VM: the check runs in C before any kernel, with the VM's message."""
    mod, table = _positions_added(16)
    ex = refcomp.graph.build(mod, target="c")
    assert ex.executor == "compiled"
    fast, slow = both(ex)
    x = np.random.default_rng(batch * seq).standard_normal((batch, seq, 8)).astype("float32")
    np.testing.assert_array_equal(fast["main"](x), x + table[:seq])
    np.testing.assert_array_equal(slow["main"](x), x + table[:seq])
    too_long = np.ones((batch, 17, 8), "float32")
    got, expected = _raised(fast["main"], too_long), _raised(slow["main"], too_long)
    assert got is not None and got == expected
    assert issubclass(got[0], refcomp.ArgumentError) and "match_cast" in got[1]


@pytest.mark.parametrize("blas", BLAS)
def test_profile_names_every_call_site_and_runs_the_same_kernels(rng, blas):
    ex = attention_executable(blas)
    fn = ex.compiled["main"]
    x = rng.standard_normal((3, 7, 8)).astype("float32")
    w = rng.standard_normal((8, 8)).astype("float32")
    report = fn.profile(x, w, repeat=3)
    assert [name for name, _ in report.sites] == list(fn.call_sites)
    assert len(fn.call_sites) == fn.kernel_calls + (sum(s.startswith("refcomp.blas.") for s in fn.call_sites))
    assert all(seconds >= 0.0 for _, seconds in report.sites) and report.total > 0.0
    assert sum(seconds for _, seconds in report.sites) <= report.total * 1.5
    assert sum(calls for _, calls, _ in report.by_kernel()) == len(fn.call_sites)
    text = str(report)
    assert all(name in text for name in set(fn.call_sites)) and "(outside the calls)" in text
    # the profiled twin is a separate build: the function keeps its own C (no timers) and results
    assert "RCG_PROFILE_MARK(0);" in fn.source and "#define RCG_PROFILE 1" not in fn.source
    np.testing.assert_array_equal(fn(x, w), fn._profiled(x, w))
    same(fn(x, w), refcomp.runtime.VirtualMachine(ex, executor="vm")["main"](x, w), exact=not blas)
    with pytest.raises(ValueError, match="repeat"):
        fn.profile(x, w, repeat=0)
    with pytest.raises(refcomp.errors.ArgumentError):
        fn.profile(x)  # the call's own argument checks


def test_profile_marks_compile_to_nothing_without_the_define():
    from refcomp.graph.passes.lower_to_c import _profile_section

    section = _profile_section("rcg_graph_main", 3)
    assert "#ifdef RCG_PROFILE" in section and "#define RCG_PROFILE_MARK(site) ((void)0)" in section
    assert "rcg_site_seconds[3]" in section


@pytest.mark.skipif(openblas_path() is None, reason="numpy's OpenBLAS is not available")
@pytest.mark.parametrize("rows, batch", [(64, 4), (63, 5), (65, 3), (1, 2), (100, 1)])
def test_small_blas_products_shared_over_threads_match_numpy(rng, rows, batch):
    """Products just past SHARE_MIN_MNK (a transformer's 128 x 128 x 128 linear, its attention's
    batch of 64 x 64 x 32 products) are shared over the threads in C, by batch entries or column
    blocks; odd sizes leave uneven blocks."""
    from refcomp.graph.passes.lower_to_c import SHARE_MIN_MNK

    n = sv("n")
    x, q = Var("x", tensor((n, 128))), Var("q", tensor((batch, rows, 64)))
    bb = BlockBuilder()
    weight = rng.standard_normal((128, 144)).astype("float32")
    with bb.function("main", [x, q]):
        with bb.dataflow():
            linear = bb.emit(op.matmul(x, refcomp.graph.const(weight)))
            scores = bb.emit(op.matmul(q, op.permute_dims(q, (0, 2, 1))))
            out = bb.emit_output(refcomp.ast.graph.Tuple((linear, scores)))
        bb.emit_func_output(out)
    ex = refcomp.graph.build(bb.get(), target="c", blas="always")
    assert ex.executor == "compiled" and ex.compiled["main"]._uses_blas
    xa = rng.standard_normal((rows * batch, 128)).astype("float32")
    qa = rng.standard_normal((batch, rows, 64)).astype("float32")
    assert (rows * batch) * 128 * 144 >= SHARE_MIN_MNK or rows == 1
    fast, slow = both(ex)
    got = fast["main"](xa, qa)
    for g, expected in zip(got, slow["main"](xa, qa)):
        np.testing.assert_allclose(g, expected, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(got[0], xa @ weight, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(got[1], qa @ qa.transpose(0, 2, 1), rtol=1e-4, atol=1e-3)
