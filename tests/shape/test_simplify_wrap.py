"""The built-in expression simplifier: folding rules, exactness under wrap-around, bounds."""
import numpy as np
from hypothesis import given, settings, strategies as st

from refcomp.ast import (
    Add, Cast, FloatImm, FloorDiv, FloorMod, IntImm, Max, Min, Mul, Select, SizeVar, Sub, Var, const,
)
from refcomp.shape.bounds import Bounds
from refcomp.shape.keys import same_expr
from refcomp.shape.simplify import Simplifier, simplify_expr
from refcomp.shape import evaluate

i, j, n = Var("i"), Var("j"), SizeVar("n")


def simplified_with(ranges, expr):
    bounds = Bounds()
    for var, interval in ranges.items():
        bounds.ranges[var] = interval
    return Simplifier(wrap=True, bounds=bounds).simplify(expr)


def test_split_index_recombines():
    ranges = {i: (0, 15), j: (0, 3)}
    assert simplified_with(ranges, (i * 4 + j) // 4) is i
    assert simplified_with(ranges, (i * 4 + j) % 4) is j
    assert simplified_with(ranges, (i * 4 + j) < 64).value == 1
    assert simplified_with(ranges, (i * 4 + j) < 63).dtype.is_bool  # not decided: stays a compare
    assert not isinstance(simplified_with(ranges, (i * 4 + j) < 63), IntImm)


def test_linear_terms_cancel_and_constants_fold():
    assert simplify_expr((i + 1) * 4 - i * 4 + j - j).value == 4
    e = simplify_expr((i * 16 + j) * 1 + 0)
    assert same_expr(e, i * 16 + j)
    assert simplify_expr(const(7) // 2).value == 3 and simplify_expr(const(-7) // 2).value == -4
    assert simplify_expr(const(-7) % 2).value == 1


def test_unchanged_expression_is_returned_itself():
    e = i * 16 + j
    assert simplify_expr(e) is e


def test_wrapping_dividend_is_not_rewritten():
    # i in [0, 2**30]: i * 4 may wrap in int32, so (i * 4 + j) // 4 is not i
    ranges = {i: (0, 2**30), j: (0, 3)}
    result = simplified_with(ranges, (i * 4 + j) // 4)
    assert isinstance(result, FloorDiv)


def test_constants_wrap_in_their_width():
    big = IntImm(2**31 - 1, "int32")
    assert simplify_expr(big + 1).value == -(2**31)
    u = IntImm(0, "uint8")
    assert simplify_expr(Sub(u, IntImm(1, "uint8"))).value == 255


def test_min_max_select_decided_by_bounds():
    ranges = {i: (0, 3), j: (4, 9)}
    assert simplified_with(ranges, Min(i, j)) is i
    assert simplified_with(ranges, Max(i, j)) is j
    assert simplified_with(ranges, Select(i < j, i, j)) is i


def test_float_folding_is_exact_in_precision():
    a = FloatImm(0.1, "float32")
    b = FloatImm(0.2, "float32")
    folded = simplify_expr(a + b)
    assert folded.value == float(np.float32(0.1) + np.float32(0.2))
    x = Var("x", "float32")
    assert simplify_expr(x * 1.0) is x
    assert isinstance(simplify_expr(x + 0.0), Add)  # -0.0 + 0.0 is +0.0: not an identity


def test_casts_fold_with_interpreter_semantics():
    assert simplify_expr(Cast("int8", IntImm(300, "int32"))).value == 44
    assert simplify_expr(Cast("int32", FloatImm(-2.7, "float32"))).value == -2
    assert isinstance(simplify_expr(Cast("int8", FloatImm(1000.0, "float32"))), Cast)  # saturating: left
    assert simplify_expr(Cast("float32", IntImm(3, "int32"))).value == 3.0


def test_symbolic_size_var_bounds():
    assert simplify_expr(Max(n, const(0))) is n


# ----------------------------------------------------------------------------- property test

_ops = [Add, Sub, Mul, FloorDiv, FloorMod, Min, Max, Add, Mul]


def _exprs(leaves):
    def extend(children):
        binary = st.tuples(st.sampled_from(_ops), children, children).map(lambda t: _build(*t))
        return binary
    return st.recursive(leaves, extend, max_leaves=8)


def _build(op, a, b):
    if op in (FloorDiv, FloorMod):
        b = const(3) if not isinstance(b, IntImm) or b.value == 0 else b
    return op(a, b)


_leaf = st.one_of(st.sampled_from([i, j]), st.integers(-8, 8).map(lambda v: IntImm(v, "int32")))


@given(expr=_exprs(_leaf), vi=st.integers(0, 15), vj=st.integers(-3, 3))
def test_simplified_expression_has_the_same_value(expr, vi, vj):
    ranges = {i: (0, 15), j: (-3, 3)}
    result = simplified_with(ranges, expr)
    env = {i: vi, j: vj}
    try:
        expected = evaluate(expr, env, wrap=True)
    except ValueError:  # a division by zero somewhere: nothing to compare
        return
    assert evaluate(result, env, wrap=True) == expected


@given(expr=_exprs(st.one_of(st.sampled_from([i, j]), st.sampled_from(
    [IntImm(2**31 - 1, "int32"), IntImm(-(2**31), "int32"), IntImm(65536, "int32")]))),
    vi=st.integers(-(2**31), 2**31 - 1), vj=st.integers(-(2**31), 2**31 - 1))
def test_simplifier_is_exact_when_values_wrap(expr, vi, vj):
    result = simplify_expr(expr)  # no ranges: anything may wrap
    env = {i: vi, j: vj}
    try:
        expected = evaluate(expr, env, wrap=True)
    except ValueError:
        return
    assert evaluate(result, env, wrap=True) == expected


def test_init_guard_after_split_splits_into_per_loop_tests():
    ranges = {i: (0, 3), j: (0, 1)}
    result = simplified_with(ranges, (i * 2 + j) == 0)
    assert same_expr(result, (i == 0) & (j == 0))
    assert not same_expr(simplified_with({i: (-1, 3), j: (0, 1)}, (i * 2 + j) == 0), (i == 0) & (j == 0))


_comparisons = st.sampled_from(["lt", "le", "eq", "ne", "gt", "ge"])


@given(a=_exprs(_leaf), b=st.one_of(_exprs(_leaf), st.just(IntImm(0, "int32"))), op=_comparisons,
       vi=st.integers(0, 15), vj=st.integers(-3, 3))
def test_simplified_comparison_has_the_same_truth_value(a, b, op, vi, vj):
    condition = {"lt": a < b, "le": a <= b, "eq": a == b, "ne": a != b, "gt": a > b, "ge": a >= b}[op]
    ranges = {i: (0, 15), j: (-3, 3)}
    result = simplified_with(ranges, condition)
    env = {i: vi, j: vj}
    try:
        expected = evaluate(condition, env, wrap=True)
    except ValueError:
        return
    assert bool(evaluate(result, env, wrap=True)) == bool(expected)


def test_fused_index_recombines():
    x = i * 8 + j
    assert same_expr(simplify_expr(x // 3 * 3 + x % 3), x)
    assert same_expr(simplify_expr((x % 5) * 2 + (x // 5) * 10 + 1), simplify_expr(x * 2 + 1))


@settings(max_examples=15)
@given(expr=_exprs(_leaf))
def test_z3_finds_no_input_where_simplified_differs(expr):
    """For all i in [0, 15], j in [-3, 3] (machine arithmetic): expr == simplified."""
    from refcomp.shape.prove import prove

    ranges = {i: (0, 15), j: (-3, 3)}
    result = simplified_with(ranges, expr)
    if result is expr:
        return
    facts = (i >= 0, i <= 15, j >= -3, j <= 3)
    # a division by zero somewhere makes both sides undefined: only compare where expr is defined
    proof = prove(result == expr, facts, overflow="wrap", use_fast_path=False, timeout_ms=5000)
    assert proof.status != "disproved", f"{expr.script()} -> {result.script()}: {proof.counterexample}"
