"""Property test: on random tiled 1-D kernels, a proof is never contradicted by brute force and every
reported counterexample really reads outside the buffer."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from refcomp.ast import Buffer, BufferStore, For, IfThenElse, IntImm, PrimFunc, SizeVar, Var
from refcomp.errors import ShapeError
from refcomp.shape import check_accesses, evaluate

n = SizeVar("n")
i, j = Var("i"), Var("j")

# pieces of a kernel: buffer size, outer extent, inner extent, index, optional guard
SIZES = [n, n + 1, n * 4, n * 4 + 3, (n + 3) // 4 * 4, n - 1]
OUTER = [n, (n + 3) // 4, n // 4, n + 1, IntImm(4)]
INNER = [IntImm(1), IntImm(4), IntImm(5)]
INDICES = [lambda: i, lambda: i * 4 + j, lambda: i + j, lambda: i * 4 + j - 1, lambda: i * 5 + j, lambda: j * 4 + i % 4]
GUARDS = [None, lambda ix: ix < n, lambda ix: ix < n * 4, lambda ix: (ix >= 0) & (ix < n)]


@st.composite
def kernels(draw):
    size = draw(st.sampled_from(SIZES))
    outer, inner = draw(st.sampled_from(OUTER)), draw(st.sampled_from(INNER))
    index = draw(st.sampled_from(INDICES))()
    guard = draw(st.sampled_from(GUARDS))
    A = Buffer("A", (size,))
    store = BufferStore(A, IntImm(0).astype("float32"), (index,))
    body = store if guard is None else IfThenElse(guard(index), store)
    loops = For(i, IntImm(0), outer, "serial", For(j, IntImm(0), inner, "serial", body))
    return PrimFunc((A,), loops, "k"), (size, outer, inner, index, guard)


def _violations(parts, n_max=9):
    size, outer, inner, index, guard = parts
    for nv in range(n_max):
        env = {n: nv}
        extent = evaluate(size, env)
        if extent < 0:
            continue  # no array has a negative dimension: the runtime rejects it first
        for iv in range(evaluate(outer, env)):
            for jv in range(evaluate(inner, env)):
                env2 = {n: nv, i: iv, j: jv}
                if guard is not None and not evaluate(guard(index), env2):
                    continue
                value = evaluate(index, env2)
                if not 0 <= value < extent:
                    yield env2


@settings(deadline=None)
@given(kernels())
def test_proofs_agree_with_brute_force(kernel):
    func, parts = kernel
    (ob,) = [o for o in check_accesses(func) if o.kind == "store"]
    found = next(_violations(parts), None)
    if ob.proved:
        assert found is None, f"proved, but {found} is out of bounds"
    if ob.result.disproved:
        env = dict(ob.result.model)
        size, outer, inner, index, guard = parts
        env.setdefault(j, 0)  # a loop var the index does not use is not part of the counterexample
        assert 0 <= env[i] < evaluate(outer, env) and 0 <= env[j] < evaluate(inner, env)
        assert guard is None or evaluate(guard(index), env)
        value, extent = evaluate(index, env), evaluate(size, env)
        assert not 0 <= value < extent
        assert evaluate(size, env) >= 0  # the counterexample respects "dims are >= 0"


@settings(deadline=None)
@given(kernels(), st.integers(0, 8))
def test_verdicts_agree_with_the_interpreter(kernel, n_value):
    """A proved kernel runs clean in the reference interpreter; a counterexample's sizes make it fail."""
    import numpy as np
    import pytest

    import refcomp
    from refcomp.errors import RuntimeFailure

    func, parts = kernel
    size = parts[0]
    (ob,) = [o for o in check_accesses(func) if o.kind == "store"]
    if ob.proved:
        extent = evaluate(size, {n: n_value})
        if extent >= 0:
            refcomp.interpret(func, np.ones(extent, "float32"), n=n_value)
    elif ob.result.disproved:
        bad_n = ob.result.model[n] if n in ob.result.model else 0
        with pytest.raises(RuntimeFailure, match="out of bounds"):
            refcomp.interpret(func, np.ones(evaluate(size, {n: bad_n}), "float32"), n=bad_n)
