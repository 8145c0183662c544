"""The CPU design space and the mutators: every sampled or mutated schedule computes the same result."""
import json
import random

import numpy as np
from hypothesis import given, settings, strategies as st

from refcomp import workloads
from refcomp.ast.structural import structural_equal
from refcomp.loops.interpreter import interpret
from refcomp.loops.schedule import Schedule
from refcomp.tune import (AutoInline, DesignSpace, GraphDefault, MultiLevelTiling, ParallelOuter, RandomComputeLocation,
                          BatchedMatmulTiling, ConvTiling, RowPrefetch, RowReductionDefault, TensorizeTiling, MutateTileSize, ParallelVectorizeUnroll, default_mutators,
                          default_rules, mutate_trace, neighbours)


def _check_matmul(func, rng):
    a = rng.uniform(-1, 1, (12, 6)).astype("float32")
    b = rng.uniform(-1, 1, (6, 8)).astype("float32")
    c = rng.uniform(-1, 1, (12, 8)).astype("float32")
    interpret(func, a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


# The plain tiling rules (the default set would tensorize these matmuls on a tile intrinsic,
# which the interpreter does not run).
TILING = DesignSpace([MultiLevelTiling(), ParallelVectorizeUnroll()])


def _decisions(trace: dict) -> list:
    return [inst["args"]["decision"] for inst in trace["instructions"] if "decision" in inst["args"]]


@settings(max_examples=8)
@given(seed=st.integers(0, 2**31 - 1))
def test_sampled_schedules_compute_the_matmul(seed):
    func = workloads.matmul(12, 8, 6)
    sch = TILING.sample(func, seed)
    kinds = [inst.kind for inst in sch.trace.instructions]
    assert kinds.count("sample_perfect_tile") == 3 and "cache_write" in kinds and "parallel" in kinds
    _check_matmul(sch.func, np.random.default_rng(seed))


@settings(max_examples=6)
@given(seed=st.integers(0, 2**31 - 1))
def test_a_sampled_trace_replays_to_the_same_function(seed):
    func = workloads.matmul(12, 8, 6)
    sch = TILING.sample(func, seed)
    again = Schedule.from_trace(func, sch.trace.to_json())
    assert structural_equal(again.func, sch.func)
    assert again.trace.to_json() == sch.trace.to_json()


@settings(max_examples=6)
@given(seed=st.integers(0, 2**31 - 1))
def test_a_mutation_changes_one_decision_and_keeps_the_result(seed):
    func = workloads.matmul(12, 8, 6)
    rng = random.Random(seed)
    sch = TILING.sample(func, seed)
    trace = json.loads(sch.trace.to_json())
    child = mutate_trace(func, trace, default_mutators(), rng)
    assert child is not None
    before, after = _decisions(trace), _decisions(json.loads(child.trace.to_json()))
    assert len(before) == len(after)
    assert sum(x != y for x, y in zip(before, after)) == 1
    _check_matmul(child.func, np.random.default_rng(seed))


def test_tile_mutation_keeps_the_product():
    mutator = MutateTileSize()
    rng = random.Random(4)
    for _ in range(50):
        new = mutator.mutate([2, 3, 4, 1], rng)
        assert new is not None and np.prod(new) == 24 and new != [2, 3, 4, 1]
    assert mutator.mutate([1, 1, 1], rng) is None


def test_rules_are_plain_objects_users_can_add_to():
    seen = []

    class Record:
        def apply(self, sch, block):
            seen.append(sch.get(block).name)

    space = DesignSpace([AutoInline(), Record()])
    space.sample(workloads.softmax(4, 8), 0)
    assert sorted(seen) == ["M", "O", "S"]  # E, elementwise and read by S and O, was inlined first
    assert [type(r) for r in default_rules("c")] == [GraphDefault, ConvTiling, BatchedMatmulTiling, RowReductionDefault,
                                                     AutoInline, TensorizeTiling,
                                                     MultiLevelTiling, RandomComputeLocation, ParallelOuter,
                                                     ParallelVectorizeUnroll, RowPrefetch]


def test_elementwise_blocks_are_vectorized_not_tiled():
    sch = DesignSpace().sample(workloads.exp_scale(64), 1)
    kinds = [inst.kind for inst in sch.trace.instructions]
    assert "split" not in kinds and "vectorize" in kinds


@settings(max_examples=4, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_neighbours_are_one_step_from_a_schedule_and_keep_the_result(seed):
    func = workloads.matmul(12, 8, 6)
    sch = TILING.sample(func, seed)
    near = neighbours(func, sch, 6)
    assert 1 <= len(near) <= 6
    assert len({n.trace.to_json() for n in near} | {sch.trace.to_json()}) == len(near) + 1
    before = _decisions(json.loads(sch.trace.to_json()))
    rng = np.random.default_rng(seed)
    for other in near:
        after = _decisions(json.loads(other.trace.to_json()))
        changed = [(x, y) for x, y in zip(before, after) if x != y]
        assert len(after) == len(before) and len(changed) == 1
        x, y = changed[0]
        if isinstance(x, list):  # a factor 2 moved between two adjacent levels of a perfect tile
            assert np.prod(x) == np.prod(y) and sum(a != b for a, b in zip(x, y)) == 2
        else:
            assert abs(x - y) == 1
        _check_matmul(other.func, rng)
    assert neighbours(func, sch, 0) == []
