"""The row-reduction rule: every stage of softmax / layer norm / RMS norm / variance / argmax under
the output's row loop, checked against numpy and the interpreter over odd, prime and unit shapes."""
from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import refcomp
from refcomp import te
from refcomp.ast import For
from refcomp.ast.expr import as_int
from refcomp.ast.stmt import STAGE_SHIFT, STAGE_SHIFT_ADVISORY
from refcomp.driver import C_LOWERING
from refcomp.graph.op import registry
from refcomp.graph.passes import default_schedule as ds
from refcomp.loops.defaults import is_row_reduction, schedule_row_reduction
from refcomp.loops.interpreter import interpret
from refcomp.loops.lower import lower
from refcomp.loops.primitives.tree import walk
from refcomp.loops.schedule import Schedule

DIMS = st.sampled_from([2, 3, 5, 7, 13, 16, 17, 31, 37])
# Row lengths: multiples of the legalization's 16 lanes and others (the final combine reads the
# lane partials and the tail under a condition; the partials' read is declared as the row's 16
# lanes, so every stage moves under the row loop either way).
COLS = st.sampled_from([16, 32, 48, 3, 17, 31])


def _kernel(op: str, shape: tuple, **attrs):
    """The legalized PrimFunc of graph op `op` over a float32 input of `shape` (plus its
    per-column parameters), and the numpy reference."""
    info = registry.get(op)
    x = te.placeholder(shape, "float32", "x")
    params = [te.placeholder((shape[-1],), "float32", name) for name in ("g", "b")[:_PARAMS.get(op, 0)]]
    out = info.legalize(x, *params, **attrs)
    return te.create_prim_func([x, *params, out], name=op), info.reference


_PARAMS = {"layer_norm": 2, "rms_norm": 1}


def _loops(func):
    return [s for s in walk(func.body) if isinstance(s, For)]


def _check(op: str, shape: tuple, seed: int, **attrs):
    func, reference = _kernel(op, shape, **attrs)
    rng = np.random.default_rng(seed)
    args = [rng.standard_normal(shape).astype(np.float32)]
    args += [rng.standard_normal((shape[-1],)).astype(np.float32) for _ in range(_PARAMS.get(op, 0))]
    expected = np.asarray(reference(*args, **attrs))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scheduled = ds.schedule_kernel(func)
    assert not [w for w in caught if issubclass(w.category, ds.RuleFallbackWarning)]
    out = np.empty(expected.shape, expected.dtype)
    refcomp.build(scheduled)(*args, out)
    np.testing.assert_allclose(out, expected, rtol=2e-5, atol=2e-5)
    interpreted = np.empty_like(out)
    interpret(scheduled, *args, interpreted)
    np.testing.assert_allclose(interpreted, expected, rtol=2e-5, atol=2e-5)
    return func, scheduled


@settings(max_examples=5, deadline=None)
@given(rows=DIMS, cols=COLS, op=st.sampled_from(["softmax", "layer_norm", "rms_norm"]),
       seed=st.integers(0, 2**31 - 1))
def test_row_rule_matches_numpy_and_interpreter(rows, cols, op, seed):
    func, scheduled = _check(op, (rows, cols), seed)
    assert is_row_reduction(func)
    parallel = [loop for loop in _loops(scheduled) if loop.kind == "parallel"]
    assert len(parallel) == 1  # the row loop, every stage inside it


@settings(max_examples=3, deadline=None)
@given(batch=st.sampled_from([1, 2, 3]), rows=DIMS, cols=COLS, seed=st.integers(0, 2**31 - 1))
def test_row_rule_fuses_leading_axes(batch, rows, cols, seed):
    _, scheduled = _check("softmax", (batch, rows, cols), seed)
    assert len([loop for loop in _loops(scheduled) if loop.kind == "parallel"]) == 1


@pytest.mark.parametrize("op", ["log_softmax", "softmax", "rms_norm"])
@pytest.mark.parametrize("shape", [(1, 1), (1, 17), (7, 1), (13, 2)])
def test_row_rule_on_unit_and_prime_rows(op, shape):
    """One row, one column, primes: the rule applies or leaves the kernel to the generic
    schedule; the numbers agree either way."""
    _check(op, shape, seed=sum(shape))


def test_row_rule_vectorizes_the_partials():
    _, scheduled = _check("softmax", (8, 256), seed=3)
    assert any(loop.kind == "vectorized" for loop in _loops(scheduled))


def test_plain_row_sum_is_reduced_in_vector_partials():
    """RMS norm's mean of squares is a plain row reduction: factored into lane partials (rfactor),
    whose lane loop is vectorized inside the row loop."""
    _, scheduled = _check("rms_norm", (5, 64), seed=11)
    names = {b.name for b in walk(scheduled.body) if hasattr(b, "iter_vars")}
    assert any(name.endswith("_rf") for name in names)
    assert any(loop.kind == "vectorized" for loop in _loops(scheduled))
    assert len([loop for loop in _loops(scheduled) if loop.kind == "parallel"]) == 1


def test_column_reduction_is_not_a_row_reduction():
    """out[i, j] = x[i, j] - max over i of x[:, j]: every row reads the whole column result, so
    the rule leaves it (moved under the row loop it would be recomputed per row)."""
    x = te.placeholder((9, 5), "float32", "x")
    r = te.reduce_axis((0, 9), "r")
    m = te.compute((1, 5), lambda _, j: te.max(x[r, j], axis=r), name="colmax")
    out = te.compute((9, 5), lambda i, j: x[i, j] - m[0, j], name="out")
    func = te.create_prim_func([x, out])
    assert not is_row_reduction(func)
    assert schedule_row_reduction(Schedule(func)) is None


def test_plain_elementwise_is_not_a_row_reduction():
    x = te.placeholder((9, 5), "float32", "x")
    out = te.compute((9, 5), lambda i, j: x[i, j] * 2.0, name="out")
    assert not is_row_reduction(te.create_prim_func([x, out]))


def test_a_rule_that_fails_falls_back_to_the_generic_schedule_and_says_so(monkeypatch):
    from refcomp.errors import ScheduleError
    from refcomp.loops import defaults

    def refusing(sch):
        sch.parallel(sch.get_loops(sch.get_block("softmax"))[0])  # a rule must not leave this behind
        raise ScheduleError("refused for the test")

    monkeypatch.setattr(defaults, "RULES", (("refusing", refusing),))
    func, _ = _kernel("softmax", (5, 33))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scheduled = ds.schedule_kernel(func)
    assert any(issubclass(w.category, ds.RuleFallbackWarning) and "refusing" in str(w.message) for w in caught)
    x = np.random.default_rng(5).standard_normal((5, 33)).astype(np.float32)
    out = np.empty_like(x)
    refcomp.build(scheduled)(x, out)
    np.testing.assert_allclose(out, registry.get("softmax").reference(x), rtol=2e-5, atol=2e-6)


def _symbolic_kernel(op: str, symbolic: tuple):
    """The kernel of `op` over a shape whose entries named by a str are size vars."""
    sizes = {name: te.size_var(name, "int64") for name in symbolic if isinstance(name, str)}
    return _kernel(op, tuple(sizes.get(d, d) if isinstance(d, str) else d for d in symbolic))


@pytest.mark.parametrize("op, symbolic", [
    ("layer_norm", ("n", "m", 128)),   # a transformer's (batch, seq, hidden), both dynamic
    ("softmax", ("n", 4, "m", "m")),   # attention scores: symbolic row count and row length
    ("softmax", ("n", "m", 64)),
    ("rms_norm", ("n", "m", 48)),
])
def test_row_rule_applies_with_symbolic_rows(op, symbolic):
    """Symbolic leading dims: the rows fuse across constant extents only (`(n, 4)` into one
    loop dividing by 4; a symbolic m stays a loop inside), every stage moves under the last row
    loop (a symbolic row length does not keep the per-row results from being bounded), and the
    outer loop is parallel (its iterations proved independent through the symbolic loops
    inside): the rule applies (no fallback), for any sizes."""
    (func, reference) = _symbolic_kernel(op, symbolic)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scheduled = ds.schedule_kernel(func)
    assert not [w for w in caught if issubclass(w.category, ds.RuleFallbackWarning)]
    parallel = [loop for loop in _loops(scheduled) if loop.kind == "parallel"]
    assert len(parallel) == 1
    # rows are fused only across constant extents: no index divides by the run-time m
    assert not re.search(r"(//|%) \(?(T\.int64\(\d+\) \* )?m\b", scheduled.script())
    kernel = refcomp.build(scheduled)
    for seed, (n, m) in enumerate([(1, 1), (2, 7), (3, 13), (1, 64)]):
        args, expected, out = _run_at(kernel, reference, op, symbolic, n, m, seed)
        if n * m <= 14:
            interpreted = np.empty_like(out)
            interpret(scheduled, *args, interpreted)
            np.testing.assert_allclose(interpreted, expected, rtol=2e-5, atol=2e-5)


def test_symbolic_rows_are_reduced_in_vector_partials():
    """A symbolic row count (an LLM step's token rows) still gets RMS norm's lane partials: rfactor
    takes symbolic loops around the factored one."""
    func, reference = _symbolic_kernel("rms_norm", ("n", 64))
    scheduled = ds.schedule_kernel(func)
    names = {b.name for b in walk(scheduled.body) if hasattr(b, "iter_vars")}
    assert any(name.endswith("_rf") for name in names)
    assert any(loop.kind == "vectorized" for loop in _loops(scheduled))
    kernel = refcomp.build(scheduled)
    for seed, n in enumerate([1, 3, 33]):
        _run_at(kernel, reference, "rms_norm", ("n", 64), n, 1, seed)


_SYMBOLIC_BUILDS = {}


def _symbolic_build(op: str, symbolic: tuple):
    key = (op, symbolic)
    if key not in _SYMBOLIC_BUILDS:
        func, reference = _symbolic_kernel(op, symbolic)
        _SYMBOLIC_BUILDS[key] = (refcomp.build(ds.schedule_kernel(func)), reference)
    return _SYMBOLIC_BUILDS[key]


@settings(max_examples=12, deadline=None)
@given(case=st.sampled_from([("softmax", ("n", 4, "m", "m")), ("layer_norm", ("n", "m", 48)),
                             ("rms_norm", ("n", "m", 17)), ("log_softmax", ("n", "m"))]),
       n=st.sampled_from([1, 2, 3, 5]), m=st.sampled_from([1, 2, 7, 16, 17, 31, 33]),
       seed=st.integers(0, 2**31 - 1))
def test_symbolic_row_kernels_match_numpy_for_any_sizes(case, n, m, seed):
    """One build per kernel over symbolic rows (and row length), run at drawn sizes: units,
    primes, around the 16 lanes."""
    op, symbolic = case
    kernel, reference = _symbolic_build(op, symbolic)
    _run_at(kernel, reference, op, symbolic, n, m, seed)


def _run_at(kernel, reference, op: str, symbolic: tuple, n: int, m: int, seed: int):
    """Run kernel on random inputs at sizes n, m, check it against reference; (args, expected, out)."""
    shape = tuple({"n": n, "m": m}.get(d, d) if isinstance(d, str) else d for d in symbolic)
    rng = np.random.default_rng(seed)
    args = [rng.standard_normal(shape).astype(np.float32)]
    args += [rng.standard_normal((shape[-1],)).astype(np.float32) for _ in range(_PARAMS.get(op, 0))]
    expected = np.asarray(reference(*args))
    out = np.empty(expected.shape, expected.dtype)
    kernel(*args, out)
    np.testing.assert_allclose(out, expected, rtol=2e-5, atol=2e-5)
    return args, expected, out


# ----------------------------------------------------------------------------- long rows

LONG_COLS = st.sampled_from([256, 263, 320, 521, 1000, 1024])


def _calls(func, name: str) -> int:
    from refcomp.ast import Call, collect

    return sum(1 for c in collect(func.body, Call) if c.op == name)


def _exponentials(func) -> int:
    """The exponentials func computes: exp calls, and inline ones (refcomp.ast.exp_poly's steps,
    whose first Let binds `et`; float32 softmax computes its exp so)."""
    from refcomp.ast import Let, collect

    return _calls(func, "exp") + sum(1 for let in collect(func.body, Let) if let.var.name == "et")


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.sampled_from([1, 2, 3, 7]), cols=LONG_COLS,
       op=st.sampled_from(["softmax", "log_softmax", "layer_norm", "rms_norm"]), seed=st.integers(0, 2**31 - 1))
def test_long_rows_match_numpy_on_both_widths(vector_isa, rows, cols, op, seed):
    """Rows of 256 or more reduce in four registers of partials (64 lanes of float32 in the
    legalization, four times the native lanes in the rule's rfactor): lengths that 64 divides
    and lengths with a tail (263 and 521 prime), on AVX-512 and on AVX2 widths."""
    _check(op, (rows, cols), seed)


@pytest.mark.parametrize("cols", [64, 263, 1024])
def test_softmax_of_a_known_row_length_computes_exp_once(cols):
    """exp appears once in the scheduled kernel (its row stage, read by the sum and the output),
    the output multiplies by the sum's reciprocal, and every stage under the row loop is a
    per-thread local buffer: no heap allocation in the generated C."""
    _, scheduled = _check("softmax", (5, cols), seed=cols)
    assert _exponentials(scheduled) == 1
    locals_ = {b.name: b.scope for b in _buffers(scheduled)}
    assert locals_["exp"] == "local" and locals_["sum"] == "local" and locals_["max"] == "local"
    source = refcomp.build(scheduled).source
    body = source[source.index("int32_t refcomp_softmax("):]
    assert "aligned_alloc" not in body
    assert not re.search(r"\) / rc_bcast", body)  # no per-element division by the row sum


def test_softmax_of_a_symbolic_row_length_recomputes_exp():
    """compute_at takes regions of constant extent only: with a symbolic row length the exp stage
    is not made: exp is computed for the sum (its partials and its tail) and again for the output
    (test_symbolic_row_kernels_match_numpy_for_any_sizes runs such kernels)."""
    func, _ = _symbolic_kernel("softmax", ("n", "m"))
    assert "exp" not in {b.name for b in _buffers(func)} and _exponentials(func) == 3
    scheduled = ds.schedule_kernel(func)
    assert len([loop for loop in _loops(scheduled) if loop.kind == "parallel"]) == 1


def test_long_row_partials_are_four_vector_chains():
    """A row of 4096: the partial stages of softmax (legalized) and RMS norm (rfactor) hold four
    registers of lanes, combined into one register, then into the row's value.  The sum's
    partials are 64 lanes (four AVX-512 registers, eight AVX2 ones: adds wait on their latency),
    the max's four registers of this CPU (its NaN-propagating form needs a mask register per
    chain)."""
    from refcomp.loops.intrin import cpu

    native = cpu.vector_lanes(32)
    _, scheduled = _check("softmax", (2, 4096), seed=1)
    shapes = {b.name: tuple(d.value for d in b.shape) for b in _buffers(scheduled)}
    assert shapes["max_partial"][-1] == 4 * native and shapes["sum_partial"][-1] == 64
    _, scheduled = _check("rms_norm", (2, 4096), seed=2)
    lanes = sorted(b.shape[-1].value for b in _buffers(scheduled) if b.name.startswith("mean_square_rf"))
    assert lanes == [native, 4 * native]


def _buffers(func):
    from refcomp.ast import Block, collect

    return [b for block in collect(func.body, Block) for b in block.alloc_buffers]


def _prefetches(func):
    from refcomp.ast import Call, Evaluate, collect

    return [(s.value.args[0].buffer.name, s.value.args[1].value) for s in collect(func.body, Evaluate)
            if isinstance(s.value, Call) and s.value.op == "prefetch"]


@pytest.mark.parametrize("op, cols", [("softmax", 1000), ("layer_norm", 1000), ("rms_norm", 1024)])
def test_row_kernels_prefetch_the_next_row_and_the_output_row(op, cols):
    """The default schedule of a row reduction hints the next input row (in softmax's exp row,
    else in the output stage) and the output row (in the last earlier pass over the input row),
    one hint per vector chunk; the numbers are unchanged.  (RMS norm's sum of squares is
    vectorized, and so carries a hint, when the vector lanes divide the row.)"""
    expected = [(op, 1), ("x", 0)]
    _, scheduled = _check(op, (6, cols), seed=7)
    assert sorted(_prefetches(scheduled)) == sorted(expected)
    source = refcomp.build(scheduled).source
    assert source.count("__builtin_prefetch(") == len(expected)


def test_a_row_too_short_for_a_vector_chunk_gets_no_prefetch():
    _, scheduled = _check("softmax", (6, 3), seed=3)
    assert _prefetches(scheduled) == []


@pytest.mark.parametrize("op, symbolic", [
    ("softmax", (5, 300)), ("softmax", ("n", "m")), ("softmax", ("n", 4, "m", "m")),
    ("layer_norm", ("n", 256)), ("rms_norm", ("n", "m", 17)), ("log_softmax", ("n", 64)),
])
def test_row_kernels_compile_as_strict_c99(op, symbolic):
    """Per-row results live in local buffers, written first before the loop that reads them (the
    reductions' inits decomposed): gcc -std=c99 -pedantic -Wall -Wextra -Werror takes the kernels,
    with or without symbolic sizes, and they agree with numpy."""
    func, reference = _symbolic_kernel(op, symbolic)
    kernel = refcomp.build(ds.schedule_kernel(func), target="c -std=c99")
    _run_at(kernel, reference, op, symbolic, 3, 19, seed=len(symbolic))  # checks against numpy


def _streams(func) -> list:
    from refcomp.ast.stmt import NONTEMPORAL_STORE

    return [loop.annotations[NONTEMPORAL_STORE] for loop in _loops(func) if NONTEMPORAL_STORE in loop.annotations]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.sampled_from([1, 2, 3, 7, 13]), cols=st.sampled_from([16, 17, 31, 64, 263, 1024]),
       op=st.sampled_from(["softmax", "log_softmax", "layer_norm", "rms_norm"]), seed=st.integers(0, 2**31 - 1))
def test_large_outputs_are_streamed_and_match_numpy(vector_isa, monkeypatch, rows, cols, op, seed):
    """An output of STREAM_MIN_BYTES or more (the bound lowered here so small shapes take the
    path) is written with streaming stores: the row loop annotated with the output's name, no
    prefetch of the output row (a streamed line is not owned first), one sfence per thread; the
    numbers as numpy's and the interpreter's, on AVX-512 and AVX2 widths, whatever the
    output's alignment (numpy's arrays start anywhere in a line)."""
    from refcomp.loops.defaults import reduction

    monkeypatch.setattr(reduction, "STREAM_MIN_BYTES", 1)
    func, scheduled = _check(op, (rows, cols), seed)
    assert _streams(scheduled) == [op]
    assert all(name != op for name, _ in _prefetches(scheduled))
    lib = refcomp.build(scheduled)
    if cols % 16 == 0:
        assert "rc_vstreamc_float32x" in lib.source and "__builtin_ia32_sfence();" in lib.source
    rng = np.random.default_rng(seed)
    args = [rng.standard_normal((rows, cols)).astype(np.float32)]
    args += [rng.standard_normal((cols,)).astype(np.float32) for _ in range(_PARAMS.get(op, 0))]
    expected = np.asarray(_kernel(op, (rows, cols))[1](*args))
    raw = np.empty(rows * cols + 32, np.float32)
    for shift in (0, 1, 4, 8):  # 64-, 4-, 16- and 32-byte aligned outputs
        offset = (-raw.ctypes.data % 64) // 4 + shift
        out = raw[offset:offset + rows * cols].reshape(rows, cols)
        out[:] = np.nan
        lib(*args, out)
        np.testing.assert_allclose(out, expected, rtol=2e-5, atol=2e-5)


def test_small_outputs_are_not_streamed():
    _, scheduled = _check("softmax", (6, 1000), seed=5)
    assert _streams(scheduled) == []


def test_a_4096_square_softmax_streams_its_output():
    """(4096, 4096) float32 is 64 MiB, past STREAM_MIN_BYTES: the schedule alone (no build)."""
    func, _ = _kernel("softmax", (4096, 4096))
    assert _streams(ds.schedule_kernel(func)) == ["softmax"]


@pytest.mark.parametrize("cols", [64, 263])
def test_softmax_of_masked_scores_matches_numpy(cols):
    """Scores of -1e9 and -inf (masked) next to ordinary ones: their exp is 0 (flushed below -87),
    the rows as numpy's."""
    func, reference = _kernel("softmax", (6, cols))
    rng = np.random.default_rng(cols)
    x = rng.standard_normal((6, cols)).astype(np.float32)
    x[:, ::3] = -1e9
    x[1, 1::5] = -np.inf
    x[2, :] = -1e9
    x[2, 7] = 3.0
    out = np.empty_like(x)
    refcomp.build(ds.schedule_kernel(func))(x, out)
    np.testing.assert_allclose(out, reference(x), rtol=2e-6, atol=1e-7)
    assert out[2, 7] == 1.0 and (np.delete(out[2], 7) == 0).all()


def test_outputs_past_a_small_last_level_cache_are_streamed(monkeypatch):
    """The bound is the last-level cache's size when that is under STREAM_MIN_BYTES: a 2 MiB
    output streams under a 1 MiB cache (REFCOMP_LLC_BYTES), not under the machine's own."""
    from refcomp.loops.intrin import cpu

    func, _ = _kernel("softmax", (512, 1024))
    monkeypatch.setenv("REFCOMP_LLC_BYTES", str(1 << 20))
    cpu.last_level_cache_bytes.cache_clear()
    try:
        assert _streams(ds.schedule_kernel(func)) == ["softmax"]
    finally:
        monkeypatch.delenv("REFCOMP_LLC_BYTES")
        cpu.last_level_cache_bytes.cache_clear()
    if (cpu.last_level_cache_bytes() or 0) > 2 << 20:
        assert _streams(ds.schedule_kernel(func)) == []


def _shifted(func) -> list:
    return [loop for loop in _loops(func) if (loop.annotations or {}).get(STAGE_SHIFT)]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.sampled_from([64, 67, 96, 128, 131]), cols=st.sampled_from([16, 17, 31, 64, 263]),
       op=st.sampled_from(["softmax", "log_softmax"]), streamed=st.booleans(), seed=st.integers(0, 2**31 - 1))
def test_tall_softmax_is_pipelined_across_rows(vector_isa, monkeypatch, rows, cols, op, streamed, seed):
    """A row stage over the output's domain that the output reads (softmax's exponentials): the
    row loop split into blocks of rows (the largest divisor of the row count up to 64 leaving 16
    blocks; a prime count keeps its rows) and the loop over a block's rows marked stage_shift,
    so row r - 1's output is written inside row r's exp loop.  log_softmax's output reads the
    input row and the row's max and log-sum, no row stage: not pipelined.  The numbers as
    numpy's and the interpreter's, on AVX-512 and AVX2 widths, with streaming stores or without."""
    from refcomp.loops.defaults import reduction

    if streamed:
        monkeypatch.setattr(reduction, "STREAM_MIN_BYTES", 1)
    func, scheduled = _check(op, (rows, cols), seed)
    marked = _shifted(scheduled)
    divisor = next((d for d in range(min(64, rows // 16), 3, -1) if rows % d == 0), None)
    parallel = [as_int(loop.extent) for loop in _loops(scheduled) if loop.kind == "parallel"]
    if divisor is None or op == "log_softmax":
        assert not marked and parallel == [rows]
        return
    assert parallel == [rows // divisor]
    assert [as_int(loop.extent) for loop in marked] == [divisor]
    assert all(loop.annotations[STAGE_SHIFT] == STAGE_SHIFT_ADVISORY for loop in marked)
    # the mark is advisory: a row of one vector chunk (16 columns at AVX-512 width) has no loop
    # to fuse into, and the lowering leaves its block's rows unshifted (rows 0 .. divisor - 1)
    lowered = lower(scheduled, hooks=C_LOWERING)
    assert not _shifted(lowered)
    block_rows = [(as_int(loop.min), as_int(loop.extent)) for loop in _loops(lowered)
                  if loop.loop_var.name.startswith("i0_1")]
    assert block_rows in ([[(1, divisor - 1)]] if cols >= 64 else [[(1, divisor - 1)], [(0, divisor)]])


def test_a_4096_square_softmax_is_pipelined_in_blocks_of_64_rows():
    func, _ = _kernel("softmax", (4096, 4096))
    scheduled = ds.schedule_kernel(func)
    assert [as_int(loop.extent) for loop in _shifted(scheduled)] == [64]
    lowered = lower(scheduled, hooks=C_LOWERING)
    assert not _shifted(lowered)  # the pass has run: one loop over a block's rows 1 .. 63
    assert [(as_int(loop.min), as_int(loop.extent)) for loop in _loops(lowered) if loop.loop_var.name.startswith("i0_1")] \
        == [(1, 63)]


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_norms_have_no_row_buffer_to_pipeline(op):
    """Layer and RMS norms read the input row in their output stage, no row stage of their own:
    nothing to shift, the row loop stays whole."""
    func, _ = _kernel(op, (128, 64))
    scheduled = ds.schedule_kernel(func)
    assert not _shifted(scheduled)
    assert [as_int(loop.extent) for loop in _loops(scheduled) if loop.kind == "parallel"] == [128]


@pytest.mark.parametrize("rows, cols", [(64, 64), (128, 263)])
def test_pipelined_softmax_lowered_form_interprets_as_numpy(rows, cols):
    """The lowered kernel itself (the stage shift applied: row r - 1's output inside row r's exp
    loop, the row buffer reused in place) run by the interpreter, against numpy."""
    func, reference = _kernel("softmax", (rows, cols))
    scheduled = ds.schedule_kernel(func)
    assert _shifted(scheduled)
    lowered = lower(scheduled, hooks=C_LOWERING)
    assert not _shifted(lowered)
    x = np.random.default_rng(rows + cols).standard_normal((rows, cols)).astype(np.float32) * 3
    out = np.full((rows, cols), np.nan, np.float32)
    refcomp.interpret(lowered, x, out)
    np.testing.assert_allclose(out, reference(x), rtol=2e-5, atol=2e-5)
