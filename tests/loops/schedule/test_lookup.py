"""Lookup primitives and the handle/trace machinery of Schedule."""
import pytest

from refcomp.errors import ScheduleError
from refcomp.loops.schedule import BlockRV, LoopRV, Schedule

from . import programs as P


def test_get_block_and_loops():
    sch = Schedule(P.matmul_relu())
    block = sch.get_block("C")
    assert isinstance(block, BlockRV)
    loops = sch.get_loops(block)
    assert [sch.get(l).loop_var.name for l in loops] == ["i", "j", "r0"]
    assert all(isinstance(l, LoopRV) for l in loops)
    assert sch.get(block).name == "C"


def test_producers_consumers_children():
    sch = Schedule(P.matmul_relu())
    c, d = sch.get_block("C"), sch.get_block("D")
    assert [b.name for b in sch.get_consumers(c)] == ["D"]
    assert [b.name for b in sch.get_producers(d)] == ["C"]
    assert sch.get_producers(c) == [] and sch.get_consumers(d) == []
    assert [b.name for b in sch.get_child_blocks(sch.get_block("root"))] == ["C", "D"]
    outer = sch.get_loops(d)[0]
    assert [b.name for b in sch.get_child_blocks(outer)] == ["D"]


def test_get_block_missing_name():
    sch = Schedule(P.elementwise())
    with pytest.raises(ScheduleError, match="get_block: no block named 'X'"):
        sch.get_block("X")
    assert len(sch.trace) == 0


def test_trace_prints_and_replays():
    sch = Schedule(P.matmul_relu())
    c = sch.get_block("C")
    sch.get_loops(c)
    text = sch.trace.as_python()
    assert text.splitlines() == ["b0 = sch.get_block(name='C')", "l1, l2, l3 = sch.get_loops(block=b0)"]
    again = Schedule.from_trace(P.matmul_relu(), sch.trace.to_json())
    assert again.trace.as_python() == text


def test_schedule_rejects_non_function():
    with pytest.raises(ScheduleError, match="expected a PrimFunc or IRModule"):
        Schedule(42)
