"""Pass `shift_stages` (refcomp.loops.passes.stage_shift): a loop's last stage run one iteration
late inside an earlier stage's loop.  Programs in the lowered form (flat buffers), before and
after, run by the interpreter and by the C build against numpy; each precondition refused with
its message."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import refcomp
from refcomp.ast import (
    Allocate, Buffer, BufferLoad, BufferStore, Call, Evaluate, For, IfThenElse, LetStmt, PrimFunc, SeqStmt, SizeVar, Var,
    collect, seq,
)
from refcomp.ast.functor import free_vars
from refcomp.ast.expr import StringImm, as_int
from refcomp.ast.stmt import STAGE_SHIFT, STAGE_SHIFT_ADVISORY
from refcomp.ast.structural import structural_equal
from refcomp.errors import ScheduleError
from refcomp.loops.passes.stage_shift import loads_first, shift_stages


def _row_softmax(rows, cols: int, *, reverse: bool = False, kind: str = "serial", local: bool = True,
                 mark=True):
    """Y[r, :] = exp(X[r, :]) / sum(exp(X[r, :])) over flat (rows * cols,) buffers, one row per
    iteration of a loop annotated stage_shift = mark: the exponentials in a row buffer t (stage 0,
    a loop over the columns), their sum in s (a loop over column pairs: another range), then the
    output (a loop over the columns, reading t backwards when `reverse`)."""
    X = Buffer("X", (rows * cols,), "float32")
    Y = Buffer("Y", (rows * cols,), "float32")
    t = Buffer("t", (cols,), "float32", scope="local")
    s = Buffer("s", (1,), "float32", scope="local")
    r, c, k0, k1, o = Var("r"), Var("c"), Var("k0"), Var("k1"), Var("o")
    exp_row = For(c, 0, cols, "serial", BufferStore(t, Call("exp", (X[r * cols + c],), "float32"), (c,)))
    total = seq(BufferStore(s, 0.0, (0,)),
                For(k0, 0, cols // 2, "serial", For(k1, 0, 2, "serial",
                                                     BufferStore(s, s[0] + t[k0 * 2 + k1], (0,)))),
                *([BufferStore(s, s[0] + t[cols - 1], (0,))] if cols % 2 else []))
    read = t[cols - 1 - o] if reverse else t[o]
    out = For(o, 0, cols, "serial", BufferStore(Y, read / s[0], (r * cols + o,)))
    body = seq(exp_row, total, out)
    if local:
        body = Allocate(t, Allocate(s, body))
        loop = For(r, 0, rows, kind, body, annotations={STAGE_SHIFT: mark})
        return PrimFunc((X, Y), loop, name="row_softmax")
    loop = For(r, 0, rows, kind, body, annotations={STAGE_SHIFT: mark})
    return PrimFunc((X, Y), Allocate(t, Allocate(s, loop)), name="row_softmax")


def _expected(x: np.ndarray, cols: int, reverse: bool) -> np.ndarray:
    e = np.exp(x.reshape(-1, cols).astype(np.float64))
    out = (e[:, ::-1] if reverse else e) / e.sum(axis=1, keepdims=True)
    return out.ravel()


def _unshifted(func: PrimFunc) -> PrimFunc:
    from refcomp.ast import Mutator

    class Drop(Mutator):
        def visit_For(self, loop):
            loop = self.generic_visit(loop)
            return loop.with_(annotations=None) if STAGE_SHIFT in (loop.annotations or {}) else loop

    return func.with_(body=Drop().visit(func.body))


def _run(func, x, **sizes):
    y = np.full(x.shape, np.nan, np.float32)
    refcomp.interpret(func, x, y, **sizes)
    return y


def test_before_and_after_in_place():
    """The row buffer t is reused in place (each output step reads t[o] before the exp step
    writes it); the loop is peeled into row 0's stages, the steady loop from row 1 with the
    output loop fused into the exp loop (output first), and the last row's output."""
    rows, cols = 5, 8
    before = _row_softmax(rows, cols)
    after = shift_stages(before)
    loops = collect(after.body, For)
    rows_loop = [loop for loop in loops if loop.loop_var.name == "r"]
    assert len(rows_loop) == 1 and as_int(rows_loop[0].min) == 1 and as_int(rows_loop[0].extent) == rows - 1
    assert STAGE_SHIFT not in (rows_loop[0].annotations or {})
    fused = [loop for loop in collect(rows_loop[0].body, For) if loop.loop_var.name == "c"]
    assert len(fused) == 1
    stores = [s.buffer.name for s in collect(fused[0].body, BufferStore)]
    assert stores == ["Y", "t"]  # row r - 1's output step, then row r's exponential
    allocs = {a.buffer.name: as_int(a.buffer.shape[0]) for a in collect(after.body, Allocate)}
    assert allocs == {"t": cols, "s": 1}  # one row buffer: reused in place
    assert isinstance(after.body, Allocate)  # the buffers live outside the row loop now
    x = np.random.default_rng(1).standard_normal(rows * cols).astype(np.float32)
    expected = _expected(x, cols, False)
    np.testing.assert_allclose(_run(before, x), expected, rtol=1e-5)
    np.testing.assert_allclose(_run(after, x), _run(before, x), rtol=1e-6)


def test_the_next_rows_loads_come_before_the_previous_rows_store():
    """In the fused step, row r's load of X is bound (a LetStmt) before row r - 1's store to Y:
    where X and Y start at the same offset in their pages, a load issued after a store whose
    address shares its low 12 bits waits for it (4K aliasing); the values are the same."""
    rows, cols = 4, 8
    before = _row_softmax(rows, cols)
    after = shift_stages(before)
    rows_loop = [loop for loop in collect(after.body, For) if loop.loop_var.name == "r"][0]
    fused = [loop for loop in collect(rows_loop.body, For) if loop.loop_var.name == "c"][0]
    let = fused.body
    assert isinstance(let, LetStmt) and isinstance(let.value, BufferLoad) and let.value.buffer.name == "X"
    assert [s.buffer.name for s in let.body.stmts] == ["Y", "t"]
    assert let.var in free_vars(let.body.stmts[1].value)  # the exponential reads the bound load
    x = np.random.default_rng(3).standard_normal(rows * cols).astype(np.float32)
    np.testing.assert_allclose(_run(after, x), _expected(x, cols, False), rtol=1e-5)


def test_a_guarded_load_is_not_moved_before_the_store():
    """A load under `if_then_else` (it may be out of bounds where its guard fails) stays inside
    its guard; loads_first binds only the unguarded ones."""
    X, Y, t = (Buffer(n, (16,), "float32") for n in ("X", "Y", "t"))
    c = Var("c")
    guarded = Call("if_then_else", (c < 8, X[c + 8], 0.0), "float32")
    late = BufferStore(Y, t[c], (c,))
    early = BufferStore(t, guarded + X[c], (c,))
    step = loads_first(late, early)
    assert isinstance(step, LetStmt) and structural_equal(step.value, X[c])
    guarded_loads = [call for call in collect(step.body, Call) if call.op == "if_then_else"]
    assert len(guarded_loads) == 1 and isinstance(guarded_loads[0].args[1], BufferLoad)
    only_guarded = loads_first(late, BufferStore(t, guarded, (c,)))
    assert isinstance(only_guarded, SeqStmt)  # nothing to bind: the plain order


def test_loops_merge_only_where_each_step_reads_what_the_same_step_overwrites():
    """loads_first runs `for c: late(c)` and `for c: early(c)` as one loop only where late's load
    of the buffer early writes is the element early writes at the same c (read, then
    overwritten); reading t[7 - c] (an element an earlier step of early would already have
    overwritten) keeps the two loops apart."""
    X, Y, t = (Buffer(n, (8,), "float32") for n in ("X", "Y", "t"))
    c, d = Var("c"), Var("d")
    early = For(c, 0, 8, "serial", BufferStore(t, X[c] * 2.0, (c,)))
    same = For(d, 0, 8, "serial", BufferStore(Y, t[d], (d,)))
    merged = loads_first(same, early)
    assert isinstance(merged, For) and isinstance(merged.body, LetStmt)
    mirrored = For(d, 0, 8, "serial", BufferStore(Y, t[7 - d], (d,)))
    apart = loads_first(mirrored, early)
    assert isinstance(apart, SeqStmt) and [type(st) for st in apart.stmts] == [For, For]


def test_a_buffer_not_proved_in_place_gets_two_versions():
    """Reading t backwards, the output step at o reads what the exp steps before it wrote: t gets
    two versions, row r's at offset (r mod 2) * cols."""
    rows, cols = 6, 8
    before = _row_softmax(rows, cols, reverse=True)
    after = shift_stages(before)
    allocs = {a.buffer.name: as_int(a.buffer.shape[0]) for a in collect(after.body, Allocate)}
    assert allocs == {"t": 2 * cols, "s": 1}
    x = np.random.default_rng(2).standard_normal(rows * cols).astype(np.float32)
    np.testing.assert_allclose(_run(after, x), _expected(x, cols, True), rtol=1e-5)
    np.testing.assert_allclose(_run(after, x), _run(before, x), rtol=1e-6)


@settings(max_examples=12, deadline=None)
@given(rows=st.sampled_from([1, 2, 3, 7, 13]), cols=st.sampled_from([1, 2, 3, 5, 16, 17]),
       reverse=st.booleans(), seed=st.integers(0, 2**31 - 1))
def test_shifted_loops_match_numpy_interpreted(rows, cols, reverse, seed):
    func = shift_stages(_row_softmax(rows, cols, reverse=reverse))
    x = np.random.default_rng(seed).standard_normal(rows * cols).astype(np.float32)
    np.testing.assert_allclose(_run(func, x), _expected(x, cols, reverse), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("rows, cols", [(1, 16), (2, 5), (7, 17), (13, 64)])
def test_shifted_loops_match_numpy_compiled(rows, cols, reverse):
    """The C build of the annotated program (lowering runs the pass) and of the same program
    without the annotation agree with numpy."""
    func = _row_softmax(rows, cols, reverse=reverse)
    x = np.random.default_rng(rows * cols).standard_normal(rows * cols).astype(np.float32)
    expected = _expected(x, cols, reverse)
    for version in (func, _unshifted(func)):
        y = np.full(x.shape, np.nan, np.float32)
        refcomp.build(version)(x, y)
        np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-7)


def test_symbolic_row_count_is_guarded():
    """A symbolic row count may be 0: the peeled program runs under `if n >= 1`."""
    n = SizeVar("n")
    func = _row_softmax(n, 4)
    after = shift_stages(func)
    assert collect(after.body, IfThenElse)
    for rows in (0, 1, 2, 5):
        x = np.random.default_rng(rows).standard_normal(rows * 4).astype(np.float32)
        np.testing.assert_allclose(_run(after, x, n=rows), _expected(x, 4, False) if rows else x, rtol=1e-5)


# Programs that fail one precondition each, built with a given mark: (the check, the program, the
# message of its refusal).


def _parallel_rows(mark):
    return _row_softmax(4, 8, kind="parallel", mark=mark)


def _row_buffer_outside_the_loop(mark):
    return _row_softmax(4, 8, local=False, mark=mark)


def _one_stage(mark):
    X = Buffer("X", (8,), "float32")
    r = Var("r")
    return PrimFunc((X,), For(r, 0, 8, "serial", BufferStore(X, 1.0, (r,)), annotations={STAGE_SHIFT: mark}))


def _stages_over_other_ranges(mark):
    X = Buffer("X", (8, ), "float32")
    r, a, b = Var("r"), Var("a"), Var("b")
    body = seq(For(a, 0, 3, "serial", BufferStore(X, 1.0, (a,))), For(b, 0, 4, "serial", BufferStore(X, 2.0, (b + 4,))))
    return PrimFunc((X,), For(r, 0, 2, "serial", body, annotations={STAGE_SHIFT: mark}))


def _allocate_sized_by_the_loop(mark):
    X = Buffer("X", (4,), "float32")
    Y = Buffer("Y", (4,), "float32")
    r, a, b = Var("r"), Var("a"), Var("b")
    t = Buffer("t", (r + 1,), "float32", scope="local")
    body = seq(For(a, 0, 4, "serial", BufferStore(t, X[a], (0,))), For(b, 0, 4, "serial", BufferStore(Y, t[0], (b,))))
    return PrimFunc((X, Y), For(r, 0, 3, "serial", Allocate(t, body), annotations={STAGE_SHIFT: mark}))


def _opaque_call(mark):
    X = Buffer("X", (4,), "float32")
    r, a, b = Var("r"), Var("a"), Var("b")
    call = Evaluate(Call("call_extern", (StringImm("touch_everything"),), "int32"))
    body = seq(For(a, 0, 4, "serial", call), For(b, 0, 4, "serial", BufferStore(X, 2.0, (b,))))
    return PrimFunc((X,), For(r, 0, 3, "serial", body, annotations={STAGE_SHIFT: mark}))


def _last_stage_writes_what_the_first_reads(mark):
    X = Buffer("X", (4,), "float32")
    Y = Buffer("Y", (4,), "float32")
    r, a, b = Var("r"), Var("a"), Var("b")
    body = seq(For(a, 0, 4, "serial", BufferStore(Y, X[a] + 1.0, (a,))), For(b, 0, 4, "serial", BufferStore(X, Y[b], (b,))))
    return PrimFunc((X, Y), For(r, 0, 3, "serial", body, annotations={STAGE_SHIFT: mark}))


def _two_versions_of_a_symbolic_buffer(mark):
    """t (n elements) written by a stage before S_j: it needs two versions, which only a buffer of
    constant size gets."""
    n = SizeVar("n")
    X = Buffer("X", (3 * n,), "float32")
    Y = Buffer("Y", (3 * n,), "float32")
    t = Buffer("t", (n,), "float32", scope="local")
    u = Buffer("u", (1,), "float32", scope="local")
    r, a, c, o = Var("r"), Var("a"), Var("c"), Var("o")
    body = seq(For(a, 0, n, "serial", BufferStore(t, X[r * n + a], (a,))),
               For(c, 0, n, "serial", BufferStore(u, t[c], (0,))),
               For(o, 0, n, "serial", BufferStore(Y, t[o] + u[0], (r * n + o,))))
    loop = For(r, 0, 3, "serial", Allocate(t, Allocate(u, body)), annotations={STAGE_SHIFT: mark})
    return PrimFunc((X, Y), loop, name="versions")


REFUSALS = [
    ("check_serial", _parallel_rows, r"stage_shift: loop r: is parallel; only a serial loop"),
    ("check_stages", _one_stage, r"stage_shift: loop r: its body is not a sequence of stages"),
    ("check_stages", _stages_over_other_ranges, r"no earlier stage is a serial loop over the last stage's range"),
    ("check_stages", _allocate_sized_by_the_loop, r"loop r: the size of t depends on r"),
    ("check_no_opaque_calls", _opaque_call, r"a stage evaluates .*touch_everything.*which may touch any memory"),
    ("check_shift_dependences", _last_stage_writes_what_the_first_reads,
     r"the last stage writes X, which the stages it would run beside"),
    ("check_shift_dependences", _row_buffer_outside_the_loop,
     r"loop r: t written before and read by the last stage is not allocated in the loop body"),
    ("check_shift_dependences", _two_versions_of_a_symbolic_buffer,
     r"loop r: t is not a one-dimensional buffer of constant size"),
]
_IDS = [program.__name__.lstrip("_") for _, program, _ in REFUSALS]


@pytest.mark.parametrize("check, program, message", REFUSALS, ids=_IDS)
def test_a_user_mark_that_fails_a_precondition_is_refused(check, program, message):
    """A mark set to True (a user's, through Schedule.annotate) is a demand: the named error."""
    with pytest.raises(ScheduleError, match=message):
        shift_stages(program(True))


@pytest.mark.parametrize("check, program, message", REFUSALS, ids=_IDS)
def test_an_advisory_mark_that_fails_a_precondition_leaves_the_loop_unshifted(check, program, message):
    """The advisory mark (a default schedule's) on the same programs: no error, the program as it
    was without the mark."""
    func = program(STAGE_SHIFT_ADVISORY)
    after = shift_stages(func)
    assert structural_equal(after, _unshifted(func))
    assert not [loop for loop in collect(after.body, For) if STAGE_SHIFT in (loop.annotations or {})]


@pytest.mark.parametrize("program", [_parallel_rows, _row_buffer_outside_the_loop])
def test_a_declined_advisory_mark_computes_as_numpy(program):
    """Built in C (the lowering runs the pass, which declines), a refused row softmax under an
    advisory mark agrees with numpy."""
    func = program(STAGE_SHIFT_ADVISORY)
    x = np.random.default_rng(7).standard_normal(4 * 8).astype(np.float32)
    y = np.full(x.shape, np.nan, np.float32)
    refcomp.build(func)(x, y)
    np.testing.assert_allclose(y, _expected(x, 8, False), rtol=1e-5, atol=1e-7)


def test_an_advisory_mark_shifts_a_loop_that_meets_the_preconditions():
    """Where the preconditions hold, the advisory mark gives the same program as a user's."""
    assert structural_equal(shift_stages(_row_softmax(5, 8, mark=STAGE_SHIFT_ADVISORY)),
                            shift_stages(_row_softmax(5, 8)))


def _doubled(mark):
    """y = x * 2 over (8, 16), its row loop annotated stage_shift = mark through the Schedule API
    (its body, one loop over a row, is not a sequence of stages)."""
    from refcomp import te
    from refcomp.loops.schedule import Schedule

    x = te.placeholder((8, 16), "float32", "x")
    y = te.compute((8, 16), lambda i, j: x[i, j] * 2.0, name="y")
    sch = Schedule(te.create_prim_func([x, y], name="doubled"))
    sch.annotate(sch.get_loops(sch.get_block("y"))[0], STAGE_SHIFT, mark)
    return sch.func


def test_a_mark_set_through_the_schedule_api_is_refused_at_build():
    with pytest.raises(ScheduleError, match=r"stage_shift: loop i: its body is not a sequence of stages"):
        refcomp.build(_doubled(True))


def test_an_advisory_mark_set_through_the_schedule_api_builds():
    kernel = refcomp.build(_doubled(STAGE_SHIFT_ADVISORY))
    x = np.random.default_rng(3).standard_normal((8, 16)).astype(np.float32)
    y = np.full(x.shape, np.nan, np.float32)
    kernel(x, y)
    np.testing.assert_allclose(y, x * 2)
