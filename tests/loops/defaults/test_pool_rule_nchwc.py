"""The pooling rule on the channel-blocked pools (N, C/L, H, W, L): max pooling taken by the rule
with no fallback (parallel over batch x channel blocks, x output rows when those planes are few;
the L lanes vectorized, no padded copy), average and global average pooling scheduled without a fallback either; all checked
against the operators' numpy references over odd, unit and prime sizes, padding, strides,
ceil_mode, symbolic sizes, on this CPU's widest vectors and AVX2's."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import refcomp
from refcomp.ast import Block, For, PrimFunc, SizeVar
from refcomp.graph import BlockBuilder, Var, op, tensor
from refcomp.graph.op.registry import get
from refcomp.graph.passes import default_schedule as ds
from refcomp.graph.pipeline import optimize
from refcomp.loops.defaults import schedule_pool, window_reduction
from refcomp.loops.primitives.tree import walk
from refcomp.loops.schedule import Schedule

pytestmark = pytest.mark.filterwarnings("error::refcomp.graph.passes.default_schedule.RuleFallbackWarning")

_MAKE = {"max": op.max_pool2d_nchwc, "avg": op.avg_pool2d_nchwc}


def _kernel(kind, shape, **attrs):
    x = Var("x", tensor(shape))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(_MAKE[kind](x, **attrs) if kind != "global" else op.global_avg_pool_nchwc(x))
        bb.emit_func_output(out)
    mod = optimize(bb.get(), schedule=False)
    (func,) = [f for f in mod.functions.values() if isinstance(f, PrimFunc)]
    return func


def _check(kind, shape, concrete, seed, **attrs):
    """The kernel of the op over `shape` (sizes or size vars) scheduled by default (a fallback
    warning is an error here), run on data of the `concrete` shape against the reference."""
    func = _kernel(kind, shape, **attrs)
    scheduled = ds.schedule_kernel(func)
    x = np.random.default_rng(seed).standard_normal(concrete).astype(np.float32)
    name = {"max": "max_pool2d_nchwc", "avg": "avg_pool2d_nchwc", "global": "global_avg_pool_nchwc"}[kind]
    call = _MAKE[kind](Var("y", tensor(concrete)), **attrs) if kind != "global" else \
        op.global_avg_pool_nchwc(Var("y", tensor(concrete)))
    expected = get(name).evaluate([x], call.attrs)
    out = np.full(expected.shape, np.nan, np.float32)
    refcomp.build(scheduled)(x, out)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
    return func, scheduled


def _loops(func, kind):
    return [f for f in walk(func.body) if isinstance(f, For) and f.kind == kind]


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("shape,k,stride,pad,ceil_mode", [
    ((2, 3, 9, 9, 8), 3, 2, 1, False),     # ResNet's pool shape: 3 x 3, stride 2, padding 1
    ((1, 2, 7, 5, 4), 3, 2, 0, False),     # no padding, odd sizes
    ((2, 1, 11, 13, 16), 2, 2, 0, True),   # ceil_mode: the last window past the input
    ((1, 3, 5, 7, 8), 3, 1, 1, False),     # stride 1, prime sizes
    ((1, 1, 1, 1, 4), 1, 1, 0, False),     # one pixel
    ((3, 1, 6, 4, 4), 2, 1, 1, True),      # an even window over padding, ceil_mode
    ((2, 5, 7, 6, 4), 3, 2, 1, False),     # 10 planes: enough for the threads, their rows serial
])
def test_blocked_pool_matches_numpy_without_fallback(rng, vector_isa, kind, shape, k, stride, pad, ceil_mode):
    func, scheduled = _check(kind, shape, shape, int(rng.integers(1 << 30)), pool_size=k, strides=stride,
                             padding=pad, ceil_mode=ceil_mode)
    if kind != "max":  # a window sum, a count and a division: several blocks, not this rule's
        return
    assert window_reduction(func) is not None  # the blocked form bounds-tests inline: no padded copy
    assert not any(b.name == "pad" for s in walk(scheduled.body) if isinstance(s, Block) for b in s.alloc_buffers)
    (plane,) = _loops(scheduled, "parallel")
    out_rows = func.params[-1].shape[2]
    planes = shape[0] * shape[1]  # n x channel blocks, and their output rows when the planes are few
    assert int(plane.extent.value) == (planes if planes >= 8 else planes * int(out_rows.value))
    assert _loops(scheduled, "vectorized")  # the L lanes


@pytest.mark.parametrize("k,stride,pad,ceil_mode", [(3, 2, 1, False), (3, 2, 0, False), (2, 2, 0, True),
                                                    (3, 2, 0, True)])
def test_blocked_max_pool_over_symbolic_sizes_is_parallel(rng, vector_isa, k, stride, pad, ceil_mode):
    """Batch, height and width symbolic: the output rows' extent (`(h + 1) // 2 - 1` and the like, a
    negative number for too small an input) is fused into the parallel loop all the same."""
    b, h, w = (SizeVar(n, "int64") for n in "bhw")
    for concrete in [(2, 2, 7, 9, 4), (1, 2, 3, 3, 4), (3, 2, 10, 5, 4)]:
        func, scheduled = _check("max", (b, 2, h, w, 4), concrete, int(rng.integers(1 << 30)), pool_size=k,
                                 strides=stride, padding=pad, ceil_mode=ceil_mode)
        assert len(_loops(scheduled, "parallel")) == 1 and _loops(scheduled, "vectorized")
    assert "n_cb_fused" in str(scheduled.body)  # a symbolic row count stays serial (no division per lane)


def test_blocked_global_avg_pool_without_fallback(rng, vector_isa):
    b, h, w = (SizeVar(n, "int64") for n in "bhw")
    for concrete in [(2, 3, 7, 5, 4), (1, 3, 1, 1, 4)]:
        _check("global", (b, 3, h, w, 4), concrete, int(rng.integers(1 << 30)))


def test_blocked_max_pool_rule_before_and_after(rng):
    """The rule's own effect on a blocked max pool: one block -> a parallel (n, cb, oy) loop, a
    local accumulator vector over the lanes, its init split off; the same values before and after."""
    func = _kernel("max", (2, 2, 7, 7, 8), pool_size=3, strides=2, padding=1)
    scheduled = schedule_pool(Schedule(func)).func
    names = {s.name for s in walk(scheduled.body) if isinstance(s, Block)}
    assert {"pool", "pool_init", "pool_local"} <= names
    assert [f.loop_var.name for f in _loops(scheduled, "parallel")] == ["n_cb_oy_fused"]
    x = rng.standard_normal((2, 2, 7, 7, 8)).astype(np.float32)
    before, after = (np.full((2, 2, 4, 4, 8), np.nan, np.float32) for _ in range(2))
    refcomp.build(func)(x, before)
    refcomp.build(scheduled)(x, after)
    np.testing.assert_array_equal(after, before)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(["max", "avg"]), n=st.integers(1, 2), cb=st.integers(1, 3), h=st.integers(1, 13),
       w=st.integers(1, 17), lanes=st.sampled_from([4, 8, 16]), k=st.sampled_from([1, 2, 3]),
       stride=st.integers(1, 3), pad=st.integers(0, 1), ceil_mode=st.booleans(), seed=st.integers(0, 1 << 30))
def test_blocked_pool_random_shapes(kind, n, cb, h, w, lanes, k, stride, pad, ceil_mode, seed):
    pad = min(pad, k // 2)
    if h + 2 * pad < k or w + 2 * pad < k:
        return
    _check(kind, (n, cb, h, w, lanes), (n, cb, h, w, lanes), seed, pool_size=k, strides=stride, padding=pad,
           ceil_mode=ceil_mode)


def test_blocked_max_pool_border_loads_are_not_evaluated(vector_isa):
    """The window's bounds test is the same for all L lanes: the vector code branches on it, the
    loads of a border window (before the input's first row) never run (a lane select evaluated
    both sides and read before the array)."""
    func = _kernel("max", (1, 1, 6, 6, 8), pool_size=3, strides=2, padding=1)
    source = refcomp.build(ds.schedule_kernel(func)).source
    assert "rc_vload" in source and "_bcast_mask_" not in source


_SANITIZED = """
import numpy as np, refcomp, sys
sys.path.insert(0, {here!r})
from test_pool_rule_nchwc import _kernel
from refcomp.graph.passes import default_schedule as ds
lib = refcomp.build(ds.schedule_kernel(_kernel("max", (1, 2, 9, 9, 16), pool_size=3, strides=2, padding=1)),
                    target="c -sanitize -O1")
x = np.random.default_rng(0).standard_normal((1, 2, 9, 9, 16)).astype(np.float32)
out = np.empty((1, 2, 5, 5, 16), np.float32)
lib(x, out)
xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1), (0, 0)), constant_values=-np.inf)
ref = np.max([xp[:, :, dy:dy + 9:2, dx:dx + 9:2] for dy in range(3) for dx in range(3)], axis=0)
np.testing.assert_array_equal(out, ref)
print("clean")
"""


@pytest.mark.sanitize
def test_blocked_max_pool_runs_clean_under_address_sanitizer():
    import os
    import subprocess
    import sys

    lib = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    if not os.path.isabs(lib) or not os.path.exists(lib):
        pytest.skip("gcc has no libasan.so")
    env = dict(os.environ, LD_PRELOAD=lib, ASAN_OPTIONS="detect_leaks=0:abort_on_error=0")
    out = subprocess.run([sys.executable, "-c", _SANITIZED.format(here=os.path.dirname(__file__))], env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and "clean" in out.stdout, out.stderr[-4000:]
