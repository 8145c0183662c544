"""Checks every schedule test uses: golden script text, numbers vs numpy, replay, rejection."""
from __future__ import annotations

import textwrap
from typing import Callable

import numpy as np
import pytest

from refcomp.ast import assert_structural_equal
from refcomp.errors import ScheduleError
from refcomp.loops.interpreter import interpret
from refcomp.loops.schedule import Schedule

from .programs import random_args


def assert_script(func, expected: str) -> None:
    """func prints exactly as expected (the script format); parsed back too when the parser exists."""
    expected = textwrap.dedent(expected).strip()
    actual = func.script().strip()
    assert actual == expected, f"--- got\n{actual}\n--- expected\n{expected}"
    try:
        from refcomp.ast.parser import from_source
    except ImportError:
        return
    assert_structural_equal(func, from_source(expected))


_LOADED: list = []


def tolerance(dtype: np.dtype) -> dict:
    if np.issubdtype(dtype, np.integer):
        return dict(rtol=0, atol=0)
    return dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-9, atol=1e-9)


def check_numbers(original, scheduled, rng: np.random.Generator, reference: Callable | None = None,
                  compiled: bool = True) -> None:
    """The scheduled function gives the original's results (interpreter and C) on fresh random data;
    with a numpy reference, the original matches it too.  reference(*inputs) returns the outputs
    as a dict {param index: array}."""
    args = random_args(original, rng)
    expected = [a.copy() for a in args]
    interpret(original, *expected)
    if reference is not None:
        for index, value in reference(*[a.copy() for a in args]).items():
            np.testing.assert_allclose(expected[index], value, **tolerance(value.dtype))
    runners = [("interpreter", lambda *xs: interpret(scheduled, *xs))]
    if compiled:
        import refcomp

        library = refcomp.build(scheduled)
        # Keep every library loaded: unloading a kernel that ran an OpenMP loop while libgomp's
        # worker threads live crashes the process (reported to the C backend owner).
        _LOADED.append(library)
        runners.append(("C", library))
    outputs = _written(original)
    for label, run in runners:
        got = [a.copy() for a in args]
        run(*got)
        for index in outputs:
            np.testing.assert_allclose(got[index], expected[index], err_msg=label, **tolerance(got[index].dtype))


def _written(func) -> list[int]:
    from refcomp.ast import BufferStore, collect

    stored = {s.buffer for s in collect(func.body, BufferStore)}
    return [k for k, b in enumerate(func.buffers) if b in stored]


def check_replay(sch: Schedule, original) -> None:
    """Replaying the JSON trace gives the same IR and the same trace text."""
    again = Schedule.from_trace(original, sch.trace.to_json())
    assert_structural_equal(again.func, sch.func)
    assert again.trace.as_python() == sch.trace.as_python()


def assert_rejected(sch: Schedule, action: Callable[[], object], match: str) -> ScheduleError:
    """action raises ScheduleError matching `match`, and the schedule is unchanged."""
    before, steps = sch.func, len(sch.trace)
    with pytest.raises(ScheduleError, match=match) as info:
        action()
    assert sch.func is before
    assert len(sch.trace) == steps
    return info.value
