"""Every operator compiled to C through legalize -> graph.build, run in the VM, checked against numpy.

Each case is built once with symbolic dims (so one compiled kernel serves every size) and run on
fresh random data at sizes hypothesis draws; the reference is the op's numpy semantics.
"""
import functools

import numpy as np
import pytest
from hypothesis import given, strategies as st

import refcomp
from refcomp.ast import IntImm
from refcomp.graph.op import registry

from graph_helpers import assert_close, concrete_shapes, one_op_module, symbolic_dims
from op_cases import CASES, draw_values, letters


@functools.lru_cache(maxsize=None)
def _compiled(index, fixed_sizes=None):
    case = CASES[index]
    dims = symbolic_dims(case) if fixed_sizes is None else {k: IntImm(v, "int64") for k, v in fixed_sizes}
    mod, info, call = one_op_module(case, dims)
    if fixed_sizes is None and getattr(info, "shape", 1) is None:
        return None  # the result's rank depends on the sizes: build per size instead
    return refcomp.graph.build(mod, target="c"), call


@pytest.mark.parametrize("index", range(len(CASES)), ids=[c.name for c in CASES])
@given(data=st.data())
def test_compiled_op_matches_numpy(index, data):
    case = CASES[index]
    sizes = {name: data.draw(st.integers(*case.sizes), label=name) for name in letters(case)}
    built = _compiled(index)
    if built is None:
        built = _compiled(index, tuple(sorted(sizes.items())))
    ex, call = built
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1), label="seed"))
    arrays = [draw_values(inp, s, sizes, rng) for inp, s in zip(case.inputs, concrete_shapes(case, sizes))]
    concrete_attrs = one_op_module(case, {k: IntImm(v, "int64") for k, v in sizes.items()})[2].attrs
    expected = registry.get(case.op).evaluate(arrays, concrete_attrs)
    actual = refcomp.runtime.VirtualMachine(ex)["main"](*arrays)
    assert_close(actual, expected, case)
