"""Property tests: prove never says proved for a false claim; its counterexamples really violate."""
from __future__ import annotations

import itertools

from hypothesis import given, settings

from refcomp.ast import IntImm, free_vars
from refcomp.shape import EvaluationError, evaluate, prove
from refcomp.shape.render import render

from shape_strategies import RANGES, conditions


def _range_facts(variables):
    facts = []
    for var in variables:
        lo, ext = RANGES[var]
        facts += [IntImm(lo) <= var, var < IntImm(lo + ext)]
    return facts


def _brute_force(cond, variables):
    """(always_true, some_assignment_false) over the whole small domain, skipping undefined points."""
    domains = [range(RANGES[v][0], RANGES[v][0] + RANGES[v][1]) for v in variables]
    for values in itertools.product(*domains):
        env = dict(zip(variables, values))
        try:
            if not evaluate(cond, env):
                return False
        except (EvaluationError, ZeroDivisionError):
            return None  # undefined somewhere: the claim has no truth value there
    return True


@settings(deadline=None)
@given(conditions())
def test_prove_agrees_with_brute_force(cond):
    variables = free_vars(cond)
    result = prove(cond, _range_facts(variables), timeout_ms=3000)
    truth = _brute_force(cond, variables)
    if result.proved:
        assert truth is not False, f"proved a false claim: {render(cond)}"
    if result.disproved:
        env = result.model
        assert all(RANGES[v][0] <= env[v] < RANGES[v][0] + RANGES[v][1] for v in variables)
        assert not evaluate(cond, env), f"counterexample {result.counterexample} satisfies {render(cond)}"
        assert set(result.counterexample) == {v.name for v in variables}
    if truth is True:
        assert not result.disproved


@settings(deadline=None)
@given(conditions())
def test_fast_path_and_z3_never_contradict(cond):
    variables = free_vars(cond)
    facts = _range_facts(variables)
    fast = prove(cond, facts)
    slow = prove(cond, facts, use_fast_path=False, timeout_ms=3000)
    assert not (fast.proved and slow.disproved), (render(cond), slow.counterexample)


from hypothesis import strategies as st  # noqa: E402

from refcomp.ast import Var, floordiv, floormod  # noqa: E402

_X8, _Y8 = Var("x8", "int8"), Var("y8", "int8")


def _int8_exprs():
    leaf = st.one_of(st.sampled_from([_X8, _Y8]), st.integers(-128, 127).map(lambda v: IntImm(v, "int8")))

    def combine(children):
        ops = st.sampled_from(["+", "-", "*", "//", "%"])

        def build(op, a, b):
            return {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b,
                    "//": lambda: floordiv(a, b), "%": lambda: floormod(a, b)}[op]()

        return st.builds(build, ops, children, children)

    return st.recursive(leaf, combine, max_leaves=5)


@settings(deadline=None)
@given(_int8_exprs(), _int8_exprs(), st.sampled_from(["<", "<=", "=="]))
def test_wrap_mode_agrees_with_two_complement_brute_force(a, b, op):
    cond = {"<": lambda: a < b, "<=": lambda: a <= b, "==": lambda: a == b}[op]()
    facts = [IntImm(-3, "int8") <= _Y8, _Y8 <= IntImm(3, "int8")]  # x8 free over all of int8
    result = prove(cond, facts, overflow="wrap", timeout_ms=3000)
    if result.disproved:
        env = result.model
        assert not evaluate(cond, {_X8: 0, _Y8: 0, **env}, wrap=True)
        return
    if not result.proved:
        return
    for x in range(-128, 128):
        for y in range(-3, 4):
            try:
                value = evaluate(cond, {_X8: x, _Y8: y}, wrap=True)
            except (EvaluationError, ZeroDivisionError):
                continue
            assert value, f"proved under wrap but false at x8={x}, y8={y}: {render(cond)}"
