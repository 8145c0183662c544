"""Shared helpers of the graph tests: one-op functions from op cases, running through the VM."""
from __future__ import annotations

import numpy as np

from refcomp.ast import SizeVar
from refcomp.ast.graph_struct_info import TensorStructInfo, TupleStructInfo
from refcomp.graph import BlockBuilder, Var

from op_cases import Case, builder, letters, resolve_attrs


def symbolic_dims(case: Case) -> dict:
    return {name: SizeVar(name, "int64") for name in letters(case)}


def one_op_module(case: Case, dims: dict, upper_bound: int | None = None):
    """A module whose main applies case.op to fresh params shaped by dims (letters -> dim)."""
    params = []
    for k, inp in enumerate(case.inputs):
        shape = tuple(dims[d] if isinstance(d, str) else d for d in inp.shape)
        params.append(Var(f"x{k}", TensorStructInfo(shape, inp.dtype)))
    attrs = {"tir_var_upper_bound": {n: upper_bound for n in letters(case)}} if upper_bound else None
    bb = BlockBuilder()
    with bb.function("main", params, attrs=attrs):
        with bb.dataflow():
            out = bb.emit_output(builder(case)(*params, **resolve_attrs(case, dims)))
        bb.emit_func_output(out)
    call = bb.get()["main"].body.blocks[0].bindings[-1].value
    return bb.get(), out.struct_info, call


def concrete_shapes(case: Case, sizes: dict) -> list[tuple]:
    return [tuple(sizes[d] if isinstance(d, str) else d for d in inp.shape) for inp in case.inputs]


def as_tuple(value) -> tuple:
    return value if isinstance(value, tuple) else (value,)


def infos_of(info) -> tuple:
    return info.fields if isinstance(info, TupleStructInfo) else (info,)


def assert_close(actual, expected, case: Case) -> None:
    """Compare by shape, dtype, then values with the case's tolerance (exact for ints and bools)."""
    for a, e in zip(as_tuple(actual), as_tuple(expected), strict=True):
        e = np.asarray(e)
        assert a.shape == e.shape, f"{case.name}: shape {a.shape} != {e.shape}"
        assert a.dtype == e.dtype, f"{case.name}: dtype {a.dtype} != {e.dtype}"
        if a.dtype.kind == "f":
            np.testing.assert_allclose(a, e, rtol=case.rtol, atol=case.atol, equal_nan=True, err_msg=case.name)
        else:
            np.testing.assert_array_equal(a, e, err_msg=case.name)


def load_benchmark_models(module_name: str):
    """benchmarks/graph.py as a module (its MLP and transformer block), or a skip when the checkout
    has no benchmarks. The script puts benchmarks/ first on sys.path for its harness; the path is
    restored so that its file names never shadow installed packages in later tests."""
    import importlib.util
    import pathlib
    import sys

    import pytest

    path = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "graph.py"
    if not path.exists():
        pytest.skip("benchmarks/graph.py is not in this checkout")
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    saved_path = list(sys.path)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = saved_path
    return module
