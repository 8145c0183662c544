"""GPU recipes: simulated on the CPU against numpy, compiled by nvcc, run on a GPU when there is one."""
import numpy as np
import pytest

import refcomp
from refcomp.emit_cuda.simulate import run_checked
from refcomp.loops import gpu_recipes

from gpu_programs import check_on_the_gpu, elementwise, layer_norm_func, matmul_func, needs_nvcc, softmax_func

def _softmax(a):
    e = np.exp(a - a.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def _layer_norm(a):
    return (a - a.mean(1, keepdims=True)) / np.sqrt(a.var(1, keepdims=True) + 1e-5)


def _scheduled(kind, rows=5, cols=128):
    if kind == "softmax":
        sch = refcomp.Schedule(softmax_func(rows, cols))
        gpu_recipes.schedule_softmax(sch, threads=32)
    elif kind == "layer_norm":
        sch = refcomp.Schedule(layer_norm_func(rows, cols))
        gpu_recipes.schedule_layer_norm(sch, threads=32)
    elif kind == "matmul":
        sch = refcomp.Schedule(matmul_func(rows, cols, 32))
        gpu_recipes.schedule_matmul(sch, tile=(32, 32, 8), thread_tile=(2, 2))
    else:
        return elementwise()
    return sch.func


@pytest.mark.parametrize("kind,reference", [("softmax", _softmax), ("layer_norm", _layer_norm)])
def test_row_recipes_simulated(kind, reference, rng):
    func = _scheduled(kind, rows=3, cols=64)
    a = rng.standard_normal((3, 64)).astype("float32")
    out = rng.standard_normal((3, 64)).astype("float32")
    run_checked(func, a, out)
    np.testing.assert_allclose(out, reference(a), rtol=1e-5, atol=1e-6)


def test_matmul_recipe_simulated(rng):
    func = _scheduled("matmul", rows=32, cols=64)
    a = rng.standard_normal((32, 32)).astype("float32")
    b = rng.standard_normal((32, 64)).astype("float32")
    c = rng.standard_normal((32, 64)).astype("float32")
    run_checked(func, a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_matmul_tiles_are_compacted_to_one_block():
    from refcomp.ast import Allocate, collect
    from refcomp.emit_cuda.prepare import prepare

    prepared = prepare(_scheduled("matmul", rows=64, cols=64))
    sizes = {a.buffer.name: a.buffer.shape[0].value for a in collect(prepared.body, Allocate)}
    assert sizes["A_shared"] == 32 * 8 and sizes["B_shared"] == 8 * 32 and sizes["C_local"] == 4


@needs_nvcc
@pytest.mark.parametrize("kind", ["elementwise", "softmax", "layer_norm", "matmul"])
def test_recipes_compile_with_nvcc(kind):
    lib = refcomp.build(_scheduled(kind, rows=64, cols=64), target="cuda")
    assert "__global__" in lib.source and lib.path.exists()
    assert "__syncthreads" in lib.source or kind != "matmul"


@needs_nvcc
def test_calling_without_a_gpu_is_a_clear_error():
    lib = refcomp.build(elementwise(), target="cuda")
    if lib.device_available():
        pytest.skip("a GPU is present")
    with pytest.raises(refcomp.RuntimeFailure, match="no CUDA device"):
        lib(np.ones(4, "float32"), np.zeros(4, "float32"))


def test_bad_cuda_target_is_an_error():
    with pytest.raises(refcomp.BuildError, match="unknown option"):
        refcomp.build(elementwise(), target="cuda -funroll")


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["elementwise", "softmax", "layer_norm", "matmul"])
def test_recipes_on_the_gpu(kind, rng):
    func = _scheduled(kind, rows=64, cols=64)
    check_on_the_gpu(func, rng)


@needs_nvcc
def test_contiguous_copies_use_float4(rng):
    from refcomp import te

    A = te.placeholder((1024,), "float32", name="A")
    B = te.compute((1024,), lambda i: A[i] * 1.0, name="B")
    sch = refcomp.Schedule(te.create_prim_func([A, B]))
    (i,) = sch.get_loops(sch.get_block("B"))
    bx, tx, lanes = sch.split(i, factors=[None, 64, 4])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    cache = sch.cache_read(sch.get_block("B"), 0, "local")
    sch.compute_at(cache, tx)
    sch.vectorize(sch.get_loops(cache)[-1])
    lib = refcomp.build(sch.func, target="cuda")
    assert "*(const float4*)" in lib.source and lib.module.pointer_alignment == 16
    a = rng.standard_normal(1024).astype("float32")
    b = rng.standard_normal(1024).astype("float32")
    run_checked(sch.func, a, b)
    np.testing.assert_array_equal(b, a)


@pytest.mark.parametrize("kind,reference", [("softmax", _softmax), ("layer_norm", _layer_norm)])
def test_one_warp_rows_combine_with_shuffles(kind, reference, rng):
    sch = refcomp.Schedule(softmax_func(3, 96) if kind == "softmax" else layer_norm_func(3, 96))
    (gpu_recipes.schedule_softmax if kind == "softmax" else gpu_recipes.schedule_layer_norm)(sch, threads=32)
    from refcomp.emit_cuda.prepare import prepare

    assert prepare(sch.func).script().count("warp_reduce") == 2
    a = rng.standard_normal((3, 96)).astype("float32")
    out = rng.standard_normal((3, 96)).astype("float32")
    run_checked(sch.func, a, out)
    np.testing.assert_allclose(out, reference(a), rtol=1e-5, atol=1e-6)


@needs_nvcc
def test_warp_shuffles_reach_the_cuda_source():
    sch = refcomp.Schedule(softmax_func(8, 128))
    gpu_recipes.schedule_softmax(sch, threads=32)
    lib = refcomp.build(sch.func, target="cuda")
    assert "rc_warp_max_f32(" in lib.source and "rc_warp_sum_f32(" in lib.source
    assert "__shfl_xor_sync" in lib.source


def _tensor_core_matmul(n, m, k, dtype="float16"):
    from refcomp import te

    A = te.placeholder((n, k), dtype, name="A")
    B = te.placeholder((k, m), dtype, name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, r].astype("float32") * B[r, j].astype("float32"), axis=r),
                   name="C")
    sch = refcomp.Schedule(te.create_prim_func([A, B, C]))
    gpu_recipes.schedule_matmul_tensor_core(sch)
    return sch.func


def test_tensor_core_matmul_simulated(rng):
    func = _tensor_core_matmul(32, 48, 32)
    assert "cuda_wmma_f16_f32_16x16" in func.script()
    a = rng.standard_normal((32, 32)).astype("float16")
    b = rng.standard_normal((32, 48)).astype("float16")
    c = rng.standard_normal((32, 48)).astype("float32")
    run_checked(func, a, b, c)
    np.testing.assert_allclose(c, a.astype("float32") @ b.astype("float32"), rtol=1e-5, atol=1e-4)


def test_bf16_tensor_core_matmul_simulated(rng):
    def to_bfloat16(x):  # round to nearest even, kept as the uint16 bit pattern refcomp uses
        bits = x.astype("float32").view("uint32").astype("uint64")
        return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("uint16")

    def from_bfloat16(bits):
        return (bits.astype("uint32") << 16).view("float32")

    func = _tensor_core_matmul(16, 32, 48, "bfloat16")
    assert "cuda_wmma_bf16_f32_16x16" in func.script()
    a = to_bfloat16(rng.standard_normal((16, 48)).astype("float32"))
    b = to_bfloat16(rng.standard_normal((48, 32)).astype("float32"))
    c = rng.standard_normal((16, 32)).astype("float32")
    run_checked(func, a, b, c)
    np.testing.assert_allclose(c, from_bfloat16(a) @ from_bfloat16(b), rtol=1e-5, atol=1e-4)


def test_tensor_core_tile_refuses_a_k_extent_that_is_not_a_multiple_of_16():
    with pytest.raises(refcomp.ScheduleError):
        _tensor_core_matmul(32, 32, 24)


@needs_nvcc
@pytest.mark.parametrize("dtype,element", [("float16", "__half"), ("bfloat16", "__nv_bfloat16")])
def test_tensor_core_matmul_compiles_to_wmma(dtype, element):
    lib = refcomp.build(_tensor_core_matmul(64, 64, 64, dtype), target="cuda")
    assert "nvcuda::wmma::mma_sync" in lib.source and "#include <mma.h>" in lib.source
    assert f"const {element}*" in lib.source


@pytest.mark.gpu
def test_tensor_core_matmul_on_the_gpu(rng):
    func = _tensor_core_matmul(64, 64, 64)
    lib = refcomp.build(func, target="cuda")
    if not lib.device_available():
        pytest.skip("no CUDA device")
    a = rng.standard_normal((64, 64)).astype("float16")
    b = rng.standard_normal((64, 64)).astype("float16")
    c = np.zeros((64, 64), "float32")
    lib(a, b, c)
    np.testing.assert_allclose(c, a.astype("float32") @ b.astype("float32"), rtol=1e-3, atol=1e-2)


class _DeviceArray:
    """An object that looks like a CUDA array (CuPy, torch) to the argument checks."""

    def __init__(self, shape, dtype="float32", pointer=0x7F0000000000):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": np.dtype(dtype).str,
                                         "data": (pointer, False), "version": 3, "strides": None}


@needs_nvcc
def test_device_arrays_are_checked_before_any_launch():
    lib = refcomp.build(elementwise(), target="cuda")
    if lib.device_available():
        pytest.skip("a GPU is present: the fake pointers would be used")
    with pytest.raises(refcomp.ArgumentError, match="expected dtype float32"):
        lib(_DeviceArray((10,)), _DeviceArray((10,), "float64", 0x7F0000100000))
    with pytest.raises(refcomp.ArgumentError, match="overlap in device memory"):
        lib(_DeviceArray((10,)), _DeviceArray((10,), pointer=0x7F0000000010))
    with pytest.raises(refcomp.RuntimeFailure, match="no CUDA device"):
        lib(_DeviceArray((10,)), _DeviceArray((10,), pointer=0x7F0000100000))


@needs_nvcc
def test_global_intermediates_are_allocated_on_the_device(rng):
    from refcomp import te

    n = te.var("n")
    A = te.placeholder((n,), "float32", name="A")
    B = te.compute((n,), lambda i: te.exp(A[i]), name="B")
    C = te.compute((n,), lambda i: B[i] * 2.0, name="C")
    sch = refcomp.Schedule(te.create_prim_func([A, C]))
    gpu_recipes.schedule_elementwise(sch, "B", threads=64)
    gpu_recipes.schedule_elementwise(sch, "C", threads=64)
    lib = refcomp.build(sch.func, target="cuda")
    assert "cudaMalloc" in lib.source and "cudaFree" in lib.source and lib.source.count("__global__") == 2
    a = rng.standard_normal(100).astype("float32")
    c = rng.standard_normal(100).astype("float32")
    run_checked(sch.func, a, c)
    np.testing.assert_allclose(c, np.exp(a) * 2, rtol=1e-6)
