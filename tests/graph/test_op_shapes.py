"""Every operator's shape rule against numpy, with concrete shapes and with symbolic ones.

For random sizes, the struct info inferred for concrete input shapes must equal the shape and
dtype of the numpy reference's result; the info inferred once for symbolic shapes (size vars),
evaluated at those sizes, must equal it too.
"""
import functools

import numpy as np
import pytest
from hypothesis import given, strategies as st

from refcomp.ast import IntImm
from refcomp.ast.functor import substitute
from refcomp.graph.op import registry
from refcomp.graph.shape_facts import const_value

from graph_helpers import concrete_shapes, infos_of, one_op_module, symbolic_dims
from op_cases import CASES, draw_values, letters


@functools.lru_cache(maxsize=None)
def _symbolic_info(index):
    case = CASES[index]
    dims = symbolic_dims(case)
    _, info, _ = one_op_module(case, dims)
    return dims, info


def _static(info, env):
    assert info.shape is not None, f"shape unknown: {info}"
    return tuple(const_value(substitute(d, env)) for d in info.shape)


@pytest.mark.parametrize("index", range(len(CASES)), ids=[c.name for c in CASES])
@given(data=st.data())
def test_shape_rule_matches_numpy(index, data):
    case = CASES[index]
    sizes = {name: data.draw(st.integers(*case.sizes), label=name) for name in letters(case)}
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1), label="seed"))
    shapes = concrete_shapes(case, sizes)
    arrays = [draw_values(inp, s, sizes, rng) for inp, s in zip(case.inputs, shapes)]
    _, concrete, call = one_op_module(case, {k: IntImm(v, "int64") for k, v in sizes.items()})
    expected = registry.get(case.op).evaluate(arrays, call.attrs)
    expected = expected if isinstance(expected, tuple) else (expected,)

    for info, want in zip(infos_of(concrete), expected, strict=True):
        assert info.static_shape == np.shape(want), f"concrete rule gives {info}, numpy {np.shape(want)}"
        assert info.dtype.numpy() == np.asarray(want).dtype

    dims, symbolic = _symbolic_info(index)
    env = {dims[k]: IntImm(v, "int64") for k, v in sizes.items()}
    for info, want in zip(infos_of(symbolic), expected, strict=True):
        if info.shape is None:  # allowed only where the rank itself depends on the sizes (squeeze)
            assert case.op == "squeeze" and info.ndim == -1, f"symbolic rule lost the shape: {info}"
            continue
        assert _static(info, env) == np.shape(want), f"symbolic rule gives {info} at {sizes}"
        assert info.dtype.numpy() == np.asarray(want).dtype


def test_every_registered_op_has_a_case():
    covered = {c.op for c in CASES}
    # tensor_to_shape has no tensor-to-tensor case; the VM tests of run-time shape
    # operands (tests/frontend/test_onnx_runtime_operands.py) run them; the minifloat conversions
    # and the string host ops take element types these cases do not draw (tests/graph/test_minifloat.py,
    # tests/graph/test_strings.py); sparse.spmm_csr (registered when refcomp.sparse is imported) needs
    # valid CSR operands, which tests/sparse/test_sparse_graph_layers.py draws
    exempt = ("call_tir", "call_dps_packed", "tensor_to_shape", "minifloat_encode", "minifloat_decode",
              "string_equal", "string_concat", "regex_full_match", "string_split", "string_normalize",
              "string_cast", "label_encode", "sparse.spmm_csr")
    missing = [n for n in registry.names() if n not in covered and n not in exempt]
    assert not missing, f"operators without a test case: {missing}"
    assert len(registry.names()) >= 80
