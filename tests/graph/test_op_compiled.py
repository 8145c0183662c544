"""Every operator compiled to C through legalize -> graph.build, run in the VM, checked against numpy.

All cases are built once, as functions of one module (so their kernels compile in parallel), with
symbolic dims: one compiled kernel serves every size.  Each test then runs its function on fresh
random data at sizes hypothesis draws; the reference is the op's numpy semantics.
"""
import functools

import numpy as np
import pytest
from hypothesis import given, strategies as st

from threadpoolctl import threadpool_limits

import refcomp
from refcomp.ast import IRModule, IntImm
from refcomp.graph.op import registry

from graph_helpers import assert_close, concrete_shapes, one_op_module, symbolic_dims
from op_cases import CASES, draw_values, letters


@functools.lru_cache(maxsize=None)
def _all_symbolic():
    """One executable holding every case whose result shape is known symbolically (name f<index>)."""
    functions = {}
    for index, case in enumerate(CASES):
        try:
            mod, info, _ = one_op_module(case, symbolic_dims(case))
        except Exception:  # the per-case test reports it
            continue
        if getattr(info, "shape", 1) is None:
            continue
        for name, func in mod.functions.items():
            functions[f"f{index}" if name == "main" else name] = func
    return refcomp.graph.build(IRModule(functions), target="c", blas=False)


@functools.lru_cache(maxsize=None)
def _per_size(index, sizes):
    case = CASES[index]
    mod, _, _ = one_op_module(case, {k: IntImm(v, "int64") for k, v in sizes})
    return refcomp.graph.build(mod, target="c", blas=False)


@pytest.fixture(scope="module", autouse=True)
def _one_openmp_thread():
    """Tiny arrays: one OpenMP thread avoids waking a thread team per call on a busy machine."""
    _all_symbolic()  # load the kernels (and libgomp) first, so the limit applies to them
    with threadpool_limits(1, user_api="openmp"):
        yield


@pytest.mark.parametrize("index", range(len(CASES)), ids=[c.name for c in CASES])
@given(data=st.data())
def test_compiled_op_matches_numpy(index, data):
    case = CASES[index]
    sizes = {name: data.draw(st.integers(*case.sizes), label=name) for name in letters(case)}
    ex = _all_symbolic()
    entry = f"f{index}"
    if entry not in ex.functions:
        ex, entry = _per_size(index, tuple(sorted(sizes.items()))), "main"
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1), label="seed"))
    arrays = [draw_values(inp, s, sizes, rng) for inp, s in zip(case.inputs, concrete_shapes(case, sizes))]
    concrete_attrs = one_op_module(case, {k: IntImm(v, "int64") for k, v in sizes.items()})[2].attrs
    expected = registry.get(case.op).evaluate(arrays, concrete_attrs)
    actual = refcomp.runtime.VirtualMachine(ex)[entry](*arrays)
    assert_close(actual, expected, case)
