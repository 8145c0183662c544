"""numpy == interpreter == C under schedules: the same te program, tiled, vectorized, parallel, cached."""
import functools

import numpy as np
import pytest
from hypothesis import given

from diff_strategies import dims, seeds
import refcomp
from refcomp import te
from refcomp.testing import as_float, check, random_array


def matmul_relu(dtype, acc):
    n = te.var("n")
    A = te.placeholder((n, 16), dtype, "A")
    B = te.placeholder((16, 12), dtype, "B")
    k = te.reduce_axis(16, "k")
    C = te.compute((n, 12), lambda i, j: te.sum(A[i, k].astype(acc) * B[k, j].astype(acc), axis=k), name="C")
    D = te.compute((n, 12), lambda i, j: te.max(C[i, j], te.const(0, acc)), name="D")
    return te.create_prim_func([A, B, D], name=f"matmul_relu_{dtype}")


def tiled(func):
    """Split i/j/k (with a tail on the symbolic i), reorder, cache the accumulator, vectorize/unroll/parallel."""
    s = refcomp.Schedule(func)
    block = s.get_block("C")
    i, j, k = s.get_loops(block)
    io, ii = s.split(i, [None, 4])
    jo, ji = s.split(j, [None, 4])
    ko, ki = s.split(k, [None, 4])
    s.reorder(io, jo, ko, ii, ki, ji)
    local = s.cache_write(block, 0, "local")
    s.reverse_compute_at(local, jo)
    s.vectorize(ji)
    s.unroll(ki)
    s.parallel(io)
    return s.func


def fused_and_inlined(func):
    """Cache A's rows next to their use, and run the ReLU as one fused loop over n * 12 elements."""
    s = refcomp.Schedule(func)
    cr = s.cache_read(s.get_block("C"), 0, "local")
    s.compute_at(cr, s.get_loops(s.get_block("C"))[0])
    d = s.get_block("D")
    i, j = s.get_loops(d)
    s.fuse(i, j)  # (parallel on it is refused for now: the schedule cannot show the fused binding injective)
    return s.func


SCHEDULES = {"te": lambda f: f, "tiled": tiled, "fused": fused_and_inlined}


@functools.lru_cache(maxsize=None)
def program(dtype, acc, schedule):
    return SCHEDULES[schedule](matmul_relu(dtype, acc))


@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
@pytest.mark.parametrize("dtype,acc", [("float32", "float32"), ("int8", "int32"), ("float16", "float32")])
@given(n=dims(1, 11), seed=seeds)
def test_matmul_relu_under_schedules(schedule, dtype, acc, n, seed):
    rng = np.random.default_rng(seed)
    a, b = random_array(rng, (n, 16), dtype), random_array(rng, (16, 12), dtype)
    if dtype.startswith("int"):
        expected = np.maximum(a.astype(np.int64) @ b.astype(np.int64), 0)
        magnitude = None
    else:
        fa, fb = as_float(a, dtype), as_float(b, dtype)
        expected, magnitude = np.maximum(fa @ fb, 0), np.abs(fa) @ np.abs(fb)
    check(program(dtype, acc, schedule), [a, b], [np.empty((n, 12), acc)], [expected], dtype=acc, terms=17,
          magnitude=[magnitude], seed=seed)
