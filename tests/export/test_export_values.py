"""The exported C loaded as a shared library: for every batch size within the bound and fresh
random data, model_run equals numpy; above the bound it returns MODEL_ERROR_BOUND and writes
nothing into the arena or the output."""
from __future__ import annotations

import ctypes
import os
import subprocess

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from export_helpers import small_mlp
from refcomp.export import export_c

BOUND = 5


@pytest.fixture(scope="module")
def mlp_library(tmp_path_factory):
    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    mod, reference = small_mlp(rng, batch_bound=BOUND)
    out = tmp_path_factory.mktemp("mlp_lib")
    result = export_c(mod, out)
    lib = out / "libmodel.so"
    subprocess.run(["cc", "-std=c99", "-pedantic", "-Wall", "-Wextra", "-Werror", "-O1", "-fPIC", "-shared",
                    "-o", str(lib), str(out / "model.c"), str(out / "model_weights.c"), "-lm"], check=True)
    handle = ctypes.CDLL(str(lib))
    handle.model_run.restype = ctypes.c_int32
    handle.model_message.restype = ctypes.c_char_p
    return handle, reference, result.arena_bytes


def _run(handle, arena_bytes, x, fill=0xA5):
    out = np.full((BOUND, 8), np.nan, np.float32)
    arena = np.full(arena_bytes + 128, fill, np.uint8)
    base = arena.ctypes.data + (-arena.ctypes.data) % 64
    shapes = np.array(x.shape, np.int64)
    out_shapes = np.zeros(2, np.int64)
    code = handle.model_run(shapes.ctypes.data_as(ctypes.c_void_p), (ctypes.c_void_p * 1)(x.ctypes.data),
                            (ctypes.c_void_p * 1)(out.ctypes.data), out_shapes.ctypes.data_as(ctypes.c_void_p),
                            ctypes.c_void_p(base), ctypes.c_size_t(arena_bytes))
    return code, out, out_shapes, arena


@settings(max_examples=15, deadline=None)
@given(batch=st.integers(0, BOUND), seed=st.integers(0, 2 ** 32 - 1))
def test_every_batch_within_the_bound_matches_numpy(mlp_library, batch, seed):
    handle, reference, arena_bytes = mlp_library
    x = np.random.default_rng(seed).standard_normal((batch, 16)).astype(np.float32) * 2
    code, out, out_shapes, _ = _run(handle, arena_bytes, x)
    assert code == 0, handle.model_message()
    assert tuple(out_shapes) == (batch, 8)
    np.testing.assert_allclose(out[:batch], reference(x), rtol=1e-5, atol=1e-6)
    assert np.isnan(out[batch:]).all()  # nothing written past this call's output


@settings(max_examples=10, deadline=None)
@given(extra=st.integers(1, 1000))
def test_above_the_bound_is_refused_untouched(mlp_library, extra):
    handle, _, arena_bytes = mlp_library
    x = np.ones((BOUND + extra, 16), np.float32)
    code, out, _, arena = _run(handle, arena_bytes, x)
    assert code == 3
    assert f"above its declared bound {BOUND}" in handle.model_message().decode()
    assert np.isnan(out).all() and (arena == 0xA5).all()
