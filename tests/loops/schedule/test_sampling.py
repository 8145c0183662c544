"""sample_perfect_tile, sample_categorical, sample_compute_location: seeded, recorded, replayed."""
import pytest
from hypothesis import given, strategies as st

from refcomp.loops.schedule import Schedule

from . import programs as P
from .helpers import assert_rejected, check_numbers, check_replay


@given(extent=st.sampled_from([1, 6, 16, 24, 36]), n=st.integers(1, 4), cap=st.integers(1, 16),
       seed=st.integers(0, 2**31 - 1))
def test_perfect_tile_multiplies_to_the_extent(extent, n, cap, seed):
    before = P.row_sum(2, extent)
    sch = Schedule(before, seed=seed)
    _, k = sch.get_loops(sch.get_block("B"))
    if n == 1 and extent > cap:  # the only 1-tiling is [extent]
        assert_rejected(sch, lambda: sch.sample_perfect_tile(k, n=n, max_innermost_factor=cap),
                        f"sample_perfect_tile: no 1-tiling of {extent} has an innermost factor <= {cap}")
        return
    tiles = sch.sample_perfect_tile(k, n=n, max_innermost_factor=cap)
    values = [t.value for t in tiles]
    product = 1
    for v in values:
        product *= v
    assert len(values) == n and product == extent and values[-1] <= cap
    sch.split(k, tiles)
    check_replay(sch, before)


def test_same_seed_same_decisions():
    def draw(seed):
        sch = Schedule(P.matmul(16, 12, 24), seed=seed)
        i, j, k = sch.get_loops(sch.get_block("C"))
        return [[t.value for t in sch.sample_perfect_tile(l, n=3)] for l in (i, j, k)] + [
            sch.sample_categorical([1, 2, 3, 4], [0.25] * 4).value]

    assert draw(7) == draw(7)
    assert len({str(draw(s)) for s in range(8)}) > 1


def test_decision_is_printed_and_reused(rng):
    before = P.matmul(16, 12, 24)
    sch = Schedule(before, seed=1)
    i, j, k = sch.get_loops(sch.get_block("C"))
    tiles = sch.sample_perfect_tile(j, n=2, max_innermost_factor=4)
    sch.split(j, tiles)
    text = sch.trace.as_python()
    assert f"decision={[t.value for t in tiles]}" in text
    replayed = Schedule.from_trace(before, sch.trace.to_json(), seed=999)
    assert replayed.trace.as_python() == text
    check_numbers(before, sch.func, rng, compiled=False)


def test_sampling_rejections():
    sch = Schedule(P.matmul(16, 12, 24))
    i, _, _ = sch.get_loops(sch.get_block("C"))
    assert_rejected(sch, lambda: sch.sample_perfect_tile(i, n=2, decision=[3, 5]),
                    r"sample_perfect_tile: decision \[3, 5\] is not a perfect 2-tiling of 16")
    assert_rejected(sch, lambda: sch.sample_perfect_tile(i, n=0), "sample_perfect_tile: n: expected a positive int")
    assert_rejected(sch, lambda: sch.sample_categorical([1, 2], [1.0]), "expected as many probs as candidates")
    assert_rejected(sch, lambda: sch.sample_categorical([1, 2], [-1.0, 0.5]), "probs: expected non-negative")
    assert_rejected(sch, lambda: sch.sample_categorical([1, 2], [0.5, 0.5], decision=2),
                    "decision 2 is not an index")


@pytest.mark.parametrize("seed", range(6))
def test_sample_compute_location_then_compute_at(seed, rng):
    before = P.two_elementwise(8, 4)
    sch = Schedule(before, seed=seed)
    b = sch.get_block("B")
    location = sch.sample_compute_location(b)
    sch.compute_at(b, location)
    check_numbers(before, sch.func, rng, compiled=False)
    check_replay(sch, before)


def test_sample_compute_location_decisions():
    sch = Schedule(P.two_elementwise(8, 4))
    b = sch.get_block("B")
    from refcomp.loops.primitives.sampling import compute_location_candidates

    assert compute_location_candidates(sch.func, sch.get(b)) == [-2, -1, 0, 1]
    assert_rejected(sch, lambda: sch.sample_compute_location(b, decision=5), "decision 5 is not a valid location")
    loop = sch.sample_compute_location(b, decision=-2)
    sch.compute_at(b, loop)
    assert [x.name for x in sch.get_child_blocks(sch.get_block("root"))] == ["C"]
