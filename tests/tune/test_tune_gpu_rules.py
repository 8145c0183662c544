"""The CUDA design space: every sampled, default or mutated schedule simulates to numpy's result
on the CPU, and compiles with nvcc."""
import json
import random

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import refcomp
from refcomp import te, workloads
from refcomp.ast import Allocate, collect
from refcomp.emit_cuda.prepare import prepare
from refcomp.emit_cuda.simulate import run_checked
from refcomp.tune import (AutoBind, AutoInline, CrossThreadReduction, DesignSpace, DeviceResident,
                          GPUMultiLevelTiling, GPURowReduction, default_mutators, default_rules, mutate_trace)



def _has_nvcc() -> bool:
    from refcomp.emit_cuda.toolchain import nvcc

    try:
        return bool(nvcc())
    except refcomp.BuildError:
        return False


needs_nvcc = pytest.mark.skipif(not _has_nvcc(), reason="nvcc is not installed")

SPACE = DesignSpace(default_rules("cuda"))


def _softmax(a):
    e = np.exp(a - a.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def _layer_norm(a):
    return (a - a.mean(1, keepdims=True)) / np.sqrt(a.var(1, keepdims=True) + 1e-5)


def _row_sum(rows, cols):
    A = te.placeholder((rows, cols), "float32", name="A")
    k = te.reduce_axis((0, cols), name="k")
    return te.create_prim_func([A, te.compute((rows,), lambda i: te.sum(A[i, k], axis=k), name="B")])


CASES = {
    "matmul": (lambda: workloads.matmul(32, 24, 16), [(32, 16), (16, 24)], lambda a, b: a @ b),
    "batch_matmul_bt": (lambda: workloads.batch_matmul_bt(2, 8, 12, 16), [(2, 8, 16), (2, 12, 16)],
                        lambda a, b: a @ b.transpose(0, 2, 1)),
    "softmax": (lambda: workloads.softmax(3, 96), [(3, 96)], _softmax),
    "layer_norm": (lambda: workloads.layer_norm(3, 160), [(3, 160)], _layer_norm),
    "row_sum": (lambda: _row_sum(5, 100), [(5, 100)], lambda a: a.sum(1)),
    "elementwise": (lambda: workloads.exp_scale(300), [(300,)], lambda a: np.exp(a) * 2),
    "conv2d": (lambda: workloads.conv2d_nchw(1, 4, 6, 8), [(1, 4, 6, 6), (8, 4, 3, 3)], lambda x, w: _conv(x, w)),
}


def _conv(x, w):
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((x.shape[0], w.shape[0], x.shape[2], x.shape[3]), "float64")
    for ky in range(3):
        for kx in range(3):
            window = padded[:, :, ky:ky + x.shape[2], kx:kx + x.shape[3]]
            out += np.einsum("nchw,fc->nfhw", window, w[:, :, ky, kx])
    return out


def _check(name, func, seed):
    _, shapes, reference = CASES[name]
    rng = np.random.default_rng(seed)
    inputs = [rng.uniform(-1, 1, s).astype("float32") for s in shapes]
    expected = reference(*inputs)
    out = rng.uniform(-1, 1, expected.shape).astype("float32")
    run_checked(func, *inputs, out)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)


def test_cuda_targets_get_the_gpu_rules():
    rules = default_rules("cuda -arch=sm_80")
    assert [type(r) for r in rules] == [GPURowReduction, AutoInline, CrossThreadReduction, GPUMultiLevelTiling,
                                        AutoBind]
    assert default_rules("c") != rules


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
@pytest.mark.parametrize("name", list(CASES))
def test_sampled_gpu_schedules_simulate_to_numpy(name, seed):
    func = CASES[name][0]()
    try:
        sch = SPACE.sample(func, seed)
    except refcomp.ScheduleError as err:  # a GPU limit (threads, shared memory) refuses the sample
        assert "GPUMultiLevelTiling" in str(err)
        return
    _check(name, sch.func, seed)


@pytest.mark.parametrize("name", list(CASES))
def test_default_gpu_schedules_simulate_to_numpy(name):
    sch = SPACE.default_sample(CASES[name][0]())
    _check(name, sch.func, 7)


def test_matmul_structure_and_register_tiles():
    sch = SPACE.default_sample(workloads.matmul(64, 64, 32))
    kinds = [inst.kind for inst in sch.trace.instructions]
    assert kinds.count("sample_perfect_tile") == 3 and kinds.count("cache_read") == 2 and "cache_write" in kinds
    decisions = [inst.args["decision"] for inst in sch.trace.instructions if inst.kind == "sample_perfect_tile"]
    assert decisions == [[1, 16, 1, 4, 1], [1, 16, 1, 4, 1], [4, 8, 1]]
    prepared = prepare(sch.func)
    sizes = {a.buffer.name: (a.buffer.scope, a.buffer.shape[0].value) for a in collect(prepared.body, Allocate)}
    # each thread keeps its own 4 x 4 tile of C; A and B tiles of depth 8 for the 64 x 64 block tile
    assert sizes == {"C_local": ("local", 16), "A_shared": ("shared", 64 * 8), "B_shared": ("shared", 8 * 64)}
    _check_matmul_shape(sch.func, 64, 64, 32)


def _check_matmul_shape(func, n, m, k):
    rng = np.random.default_rng(3)
    a = rng.uniform(-1, 1, (n, k)).astype("float32")
    b = rng.uniform(-1, 1, (k, m)).astype("float32")
    c = rng.uniform(-1, 1, (n, m)).astype("float32")
    run_checked(func, a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-5)


def test_row_reductions_are_one_kernel_with_cross_thread_reductions():
    sch = SPACE.default_sample(workloads.softmax(4, 256))
    loops = [s for s in collect(sch.func.body, refcomp.ast.For) if s.kind == "thread_binding"]
    assert sum(1 for l in loops if l.thread_binding == "blockIdx.x") == 1
    prepared = prepare(sch.func)
    names = {a.buffer.name for a in collect(prepared.body, Allocate)}
    assert {"M_red", "S_red"} <= names  # both reductions across the block's 128 threads


@settings(max_examples=5, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_mutated_gpu_matmul_schedules_stay_correct(seed):
    func = CASES["matmul"][0]()
    base = SPACE.default_sample(func)
    mutated = mutate_trace(func, json.loads(base.trace.to_json()), default_mutators(), random.Random(seed))
    if mutated is None:
        return
    _check("matmul", mutated.func, seed)


def test_a_trace_with_more_threads_than_a_block_has_is_refused():
    func = workloads.matmul(64, 64, 8)
    trace = json.loads(SPACE.default_sample(func).trace.to_json())
    tiles = [inst for inst in trace["instructions"] if inst["kind"] == "sample_perfect_tile"]
    tiles[0]["args"]["decision"] = [1, 64, 1, 1, 1]
    tiles[1]["args"]["decision"] = [1, 32, 1, 2, 1]  # 64 x 32 = 2048 threads
    with pytest.raises(refcomp.ScheduleError, match="threads per GPU block"):
        refcomp.Schedule.from_trace(func, trace)


class _FakeLibrary:
    """Stands in for a CudaLibrary: 'device' arrays are numpy copies; the kernel doubles A into B."""

    class _Copy:
        def __init__(self, host):
            self.data = host.copy()

        def copy_to(self, host):
            host[...] = self.data

    def __init__(self):
        self.uploads = 0

    def to_device(self, array):
        self.uploads += 1
        return self._Copy(array)

    def __call__(self, a, b):
        b.data[...] = a.data * 2


def test_device_resident_copies_once_and_times_launches_only():
    lib = _FakeLibrary()
    kernel = DeviceResident(lib)
    a = np.arange(4, dtype="float32") + 1
    b = np.zeros(4, "float32") - 1
    kernel(a, b)
    np.testing.assert_array_equal(b, a * 2)
    assert lib.uploads == 2
    times = [kernel.timed_call(a, b) for _ in range(3)]
    assert lib.uploads == 2 and all(t >= 0 for t in times)  # the timed calls reuse the device copies


@needs_nvcc
@pytest.mark.parametrize("name", ["matmul", "batch_matmul_bt", "softmax", "layer_norm", "row_sum", "elementwise"])
def test_default_and_sampled_gpu_schedules_compile_with_nvcc(name):
    func = CASES[name][0]()
    for sch in [SPACE.default_sample(func)] + SPACE.sample_many(func, 1, random.Random(5)):
        lib = refcomp.build(sch.func, target="cuda")
        assert "__global__" in lib.source and lib.path.exists()


@pytest.mark.gpu
def test_tuning_on_the_gpu_finds_a_checked_kernel():
    from refcomp.runtime.cuda_library import cuda_device_count
    from refcomp.tune import tune

    if cuda_device_count() == 0 or not _has_nvcc():
        pytest.skip("no CUDA device")
    func = workloads.matmul(64, 64, 32)
    result = tune(func, "cuda", trials=4, batch=4, population=8,
                  reference=lambda arrays: arrays[2].__setitem__(..., arrays[0] @ arrays[1]))
    assert result.schedule is not None and result.best_time < float("inf")
    _check_matmul_shape(result.schedule.func, 64, 64, 32)


def test_cuda_measurements_name_the_gpu():
    from refcomp.runtime.cuda_library import cuda_device_count, cuda_device_name
    from refcomp.tune import Runner, machine_description

    cpu = machine_description("c")
    gpu = machine_description("cuda -arch=sm_90a")
    assert gpu.startswith(cpu + " cuda ") and Runner(target="cuda").machine() == gpu
    assert gpu.endswith("cuda none") if cuda_device_count() == 0 else gpu.endswith(cuda_device_name())


@settings(max_examples=4, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_mutated_thread_counts_stay_correct(seed):
    """The thread count of a row reduction is a mutable decision (a split factor handle)."""
    func = CASES["softmax"][0]()
    base = SPACE.default_sample(func)
    trace = json.loads(base.trace.to_json())
    mutated = mutate_trace(func, trace, default_mutators(), random.Random(seed))
    assert mutated is not None
    _check("softmax", mutated.func, seed)


def simulated_build(func, target):
    """A build hook for CUDA targets that runs the schedule in the CPU simulation (its times mean
    nothing; it lets the whole GPU search run where there is no GPU)."""
    return lambda *arrays: run_checked(func, *arrays)


def _matmul_reference(arrays):
    arrays[2][...] = arrays[0] @ arrays[1]


def test_the_gpu_search_runs_end_to_end_in_simulation(tmp_path):
    from refcomp.tune import Database, Runner, apply_best, tune

    func = workloads.matmul(16, 16, 8)
    database = Database(str(tmp_path / "gpu.jsonl"))
    runner = Runner(target="cuda", workers=1, timeout_s=120, build=simulated_build)
    # (the final comparison re-times the best record and the default: each simulated call lowers again)
    result = tune(func, "cuda", trials=4, batch=4, population=4, database=database, runner=runner,
                  reference=_matmul_reference, seed=3, final=1)
    assert result.trials == 4 and result.schedule is not None and not result.failures
    records = Database(str(tmp_path / "gpu.jsonl")).query(result.workload, "cuda")
    assert records and all(r.machine == runner.machine() for r in records)
    _check_matmul_shape(apply_best(func, database, "cuda", runner.machine()), 16, 16, 8)


def test_refcomp_tune_for_cuda_without_a_gpu_says_why(capsys):
    from refcomp.cli import main
    from refcomp.runtime.cuda_library import cuda_device_count

    if cuda_device_count() > 0:
        pytest.skip("a GPU is present")
    assert main(["tune", "matmul", "--shape", "16,16,16", "--target", "cuda", "--trials", "2", "--quiet"]) == 2
    assert "no CUDA device" in capsys.readouterr().err
