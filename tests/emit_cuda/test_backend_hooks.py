"""The CUDA backend through the driver: declared lowering hooks, the shared loader base, nvcc flags."""
import numpy as np
import pytest

import refcomp
from refcomp.emit_cuda import CUDA_LOWERING, nvcc_flags
from refcomp.emit_cuda.prepare import prepare
from refcomp.loops.lower import PIPELINE, LoweringHooks, lower
from refcomp.runtime import CudaLibrary, Library, LoadedKernel
from refcomp.target import parse_target

from gpu_programs import elementwise, needs_nvcc


def test_hooks_run_at_their_declared_points():
    seen = []
    marker = lambda func: func  # noqa: E731
    marker.__name__ = "marker"
    hooks = LoweringHooks(before_blocks=(marker,), after_blocks=(marker,), after_lowering=(marker,))
    lower(elementwise(), hooks=hooks, after_pass=lambda name, func: seen.append(name))
    names = [name for name, _ in PIPELINE]
    assert seen == ["marker", names[0], "marker", *names[1:], "marker"]


def test_cuda_lowering_is_the_pipeline_with_the_cuda_hooks():
    seen = []
    lower(elementwise(), hooks=CUDA_LOWERING, after_pass=lambda name, func: seen.append(name))
    assert seen == ["lower_cross_thread_reductions", "lower_blocks", "normalize_kernels", "sink_on_chip_allocations", "compact_on_chip_buffers",
                    *[name for name, _ in PIPELINE[1:]], "plan_kernels"]
    assert refcomp.ast.structural_equal(prepare(elementwise()), lower(elementwise(), hooks=CUDA_LOWERING))


def test_nvcc_flags_follow_the_target():
    assert "-arch=sm_90a" in nvcc_flags("cuda") and "-O3" in nvcc_flags("cuda")
    flags = nvcc_flags(parse_target("cuda -arch=sm_80 -G -lineinfo"))
    assert "-arch=sm_80" in flags and "-G" in flags and "-lineinfo" in flags and "-O3" not in flags
    with pytest.raises(refcomp.BuildError, match="'c' is not supported here"):
        nvcc_flags("c")


@needs_nvcc
def test_c_and_cuda_kernels_share_the_loader_base(rng):
    cuda = refcomp.build(elementwise(), target="cuda -arch=sm_80")
    n = refcomp.te.var("n")
    A = refcomp.te.placeholder((n,), "float32", "A")
    c = refcomp.build(refcomp.te.create_prim_func([A, refcomp.te.compute((n,), lambda i: A[i] * 2.0, name="B")]))
    assert isinstance(cuda, CudaLibrary) and isinstance(c, Library)
    assert isinstance(cuda, LoadedKernel) and isinstance(c, LoadedKernel)
    assert cuda.target == parse_target("cuda -arch=sm_80") and "target='cuda -arch=sm_80'" in repr(cuda)
    again = refcomp.build(elementwise(), target="cuda -arch=sm_80")
    assert again.path == cuda.path and again._lib is cuda._lib  # one loaded-library cache
    a = rng.standard_normal(8).astype("float32")
    b = np.zeros_like(a)
    assert c.time(a, b, number=2, repeat=2) > 0
    if not cuda.device_available():
        with pytest.raises(refcomp.RuntimeFailure, match="no CUDA device"):
            cuda.time(a, b, number=1, repeat=1)
