"""The trace: printed Python runs, JSON round-trips every argument kind, replay errors are typed."""
import json

import pytest

from refcomp.ast import IRModule, assert_structural_equal
from refcomp.errors import ScheduleError
from refcomp.loops.schedule import Schedule

from . import programs as P


def _busy_schedule():
    before = P.two_elementwise(16, 8)
    sch = Schedule(before, seed=11)
    b, c = sch.get_block("B"), sch.get_block("C")
    cache = sch.cache_read(b, 0, "local")
    sch.transform_layout(cache, ("write", 0), lambda x, y: (y, x))
    i, j = sch.get_loops(c)
    tiles = sch.sample_perfect_tile(i, n=2, max_innermost_factor=4)
    io, ii = sch.split(i, tiles)
    sch.reorder(ii, io)
    location = sch.sample_compute_location(b)
    sch.compute_at(b, location)
    sch.annotate(sch.get_loops(c)[0], "note", sch.sample_categorical([3, 5], [0.5, 0.5]))
    sch.unroll(sch.get_loops(c)[-1])
    return before, sch


def test_python_text_runs_and_reproduces_the_ir():
    before, sch = _busy_schedule()
    text = sch.trace.as_python()
    again = Schedule(before)
    exec(text, {"sch": again})
    assert_structural_equal(again.func, sch.func)
    assert again.trace.as_python() == text


def test_json_round_trip_is_a_fixed_point():
    before, sch = _busy_schedule()
    data = sch.trace.to_json()
    again = Schedule.from_trace(before, data)
    assert_structural_equal(again.func, sch.func)
    assert again.trace.to_json() == data
    assert json.loads(data)["version"] == 1


def test_fuse_prints_its_loops_positionally():
    sch = Schedule(P.elementwise())
    i, j = sch.get_loops(sch.get_block("B"))
    sch.fuse(i, j)
    assert "l3 = sch.fuse(l1, l2, preserve_unit_iters=True)" in sch.trace.as_python()


def test_replay_errors_are_schedule_errors():
    before = P.elementwise()
    with pytest.raises(ScheduleError, match="from_trace: expected a trace JSON object of version 1"):
        Schedule.from_trace(before, json.dumps({"instructions": []}))
    bad_kind = {"version": 1, "instructions": [{"kind": "explode", "args": {}, "outputs": None}]}
    with pytest.raises(ScheduleError, match="unknown primitive 'explode'"):
        Schedule.from_trace(before, bad_kind)
    early = {"version": 1, "instructions": [{"kind": "get_loops", "args": {"block": {"rv": "b9"}},
                                             "outputs": ["l0"], "multi": True}]}
    with pytest.raises(ScheduleError, match="handle b9 is used before it is defined"):
        Schedule.from_trace(before, early)


def test_replay_on_a_different_program_fails_cleanly():
    sch = Schedule(P.two_elementwise())
    sch.compute_inline(sch.get_block("B"))
    with pytest.raises(ScheduleError, match="compute_inline: block B is an output block"):
        Schedule.from_trace(P.elementwise(), sch.trace.to_json())


def test_copy_is_independent():
    sch = Schedule(P.elementwise(), seed=3)
    i, j = sch.get_loops(sch.get_block("B"))
    fork = sch.copy()
    fork.split(i, [None, 4])
    assert sch.get(i) is not None and len(sch.trace) == 2 and len(fork.trace) == 3
    assert fork.sample_categorical([1, 2, 3], [1, 1, 1]).value == sch.sample_categorical([1, 2, 3], [1, 1, 1]).value


def test_module_and_work_on():
    mod = IRModule({"first": P.elementwise().with_(name="first"), "main": P.row_sum()})
    sch = Schedule(mod)
    assert sch.func.name == "main"
    sch.work_on("first")
    sch.split(sch.get_loops(sch.get_block("B"))[0], [None, 4])
    assert sch.mod["main"] is mod["main"] and sch.mod["first"] is not mod["first"]
    with pytest.raises(ScheduleError, match="work_on: the module has no PrimFunc 'nope'"):
        sch.work_on("nope")
    two = IRModule({"a": P.elementwise().with_(name="a"), "b": P.row_sum().with_(name="b")})
    with pytest.raises(ScheduleError, match="pick a PrimFunc with func_name"):
        Schedule(two)
    assert Schedule(two, func_name="b").func.name == "b"


def test_blocks_may_be_given_by_name(rng):
    from .helpers import check_numbers, check_replay

    before = P.two_elementwise(8, 4)
    sch = Schedule(before)
    loops = sch.get_loops("C")
    sch.compute_at("B", loops[0])
    sch.annotate("C", "note", 1)
    assert sch.trace.as_python().splitlines()[:3] == [
        "b0 = sch.get_block(name='C')", "l1, l2 = sch.get_loops(block=b0)", "b3 = sch.get_block(name='B')"]
    check_numbers(before, sch.func, rng)
    check_replay(sch, before)
