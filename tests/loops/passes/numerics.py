"""Numeric checks for lowering tests: run a function before and after a pass on the same data."""
from __future__ import annotations

import numpy as np
import pytest

from refcomp.ast import PrimFunc
from refcomp.ast.expr import as_int
from refcomp.loops.passes.flatten_buffers import original_buffer


def interpreter():
    """refcomp.interpret, or skip the test while the interpreter is not there yet."""
    module = pytest.importorskip("refcomp.loops.interpreter")
    return module.interpret


def random_arrays(func: PrimFunc, rng: np.random.Generator, sizes: dict | None = None) -> list[np.ndarray]:
    """Fresh random arrays for func's buffer parameters (symbolic dims looked up in sizes by name)."""
    sizes = sizes or {}
    arrays = []
    for buffer in func.buffers:
        buffer = original_buffer(func, buffer)  # a lowered function is called with the original arrays
        shape = []
        for dim in buffer.shape:
            value = as_int(dim)
            shape.append(value if value is not None else sizes[dim.name])
        dtype = buffer.dtype.numpy()
        if np.issubdtype(dtype, np.floating):
            arrays.append(rng.standard_normal(shape).astype(dtype))
        elif dtype == np.bool_:
            arrays.append(rng.integers(0, 2, size=shape).astype(dtype))
        else:
            arrays.append(rng.integers(-50, 50, size=shape).astype(dtype))
    return arrays


def check_same_results(before: PrimFunc, after: PrimFunc, sizes: dict | None = None, seed: int | None = None,
                       rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """after is well formed, and before and after compute the same outputs on fresh random data."""
    from refcomp.ast.wellformed import verify_well_formed

    verify_well_formed(after)
    interpret = interpreter()
    rng = np.random.default_rng(seed)
    inputs = random_arrays(before, rng, sizes)
    expected = [a.copy() for a in inputs]
    interpret(before, *expected)
    flat = [a.copy() for a in inputs]  # flattened params are called with the original arrays
    interpret(after, *flat)
    for want, got in zip(expected, flat):
        np.testing.assert_allclose(got.reshape(want.shape), want, rtol=rtol, atol=atol)
