"""The rules beyond plain tiling: tensorize tiling on a tile intrinsic, auto-inline, compute location,
parallel outer loops; the search starts from the rule-based default."""
import json
import random

import numpy as np
import pytest

import refcomp
from refcomp import workloads
from refcomp.ast.structural import structural_equal
from refcomp.loops.interpreter import interpret
from refcomp.loops.recipes.common import matmul_shape
from refcomp.loops.schedule import Schedule
from refcomp.tune import (AutoInline, Checker, Database, DesignSpace, ParallelOuter, RandomComputeLocation, Runner,
                          TensorizeTiling, default_rules, tune)
from refcomp.tune.rules import tile_intrinsics
from refcomp.tune.runner import Candidate
from refcomp.tune.runner import random_arguments


def _needs_a_tile_intrinsic(func):
    block = Schedule(func).get(Schedule(func).get_block("C"))
    if not tile_intrinsics(block, matmul_shape(block, "test")):
        pytest.skip("this CPU runs no fp32 matmul tile intrinsic")


def _matmul_reference(arrays):
    arrays[2][...] = arrays[0] @ arrays[1]


def test_tensorize_tiling_samples_are_checked_correct_and_the_default_comes_first():
    func = workloads.matmul(18, 32, 24)
    _needs_a_tile_intrinsic(func)
    space = DesignSpace([TensorizeTiling()])
    default = space.default_sample(func)
    kinds = [inst.kind for inst in default.trace.instructions]
    assert "tensorize" in kinds and "cache_read" in kinds and "transform_layout" in kinds and "parallel" in kinds
    assert all(d == 0 for d in _categorical_decisions(default)[-1:])  # parallel over columns by default
    samples = space.sample_many(func, 4, random.Random(random.randrange(2**20)))
    candidates = [Candidate(json.loads(s.trace.to_json())) for s in [default] + samples]
    results = Runner(workers=2, timeout_s=300).measure(func, candidates, Checker(func, _matmul_reference,
                                                                                     seed=random.randrange(2**20)))
    assert [r.status for r in results] == ["ok"] * len(candidates), [r.message for r in results]


def _categorical_decisions(sch):
    return [inst.args["decision"] for inst in sch.trace.instructions if inst.kind == "sample_categorical"]


def test_a_changed_tile_decision_reaches_the_loops():
    func = workloads.matmul(12, 64, 128)  # KC: 64 or 128
    _needs_a_tile_intrinsic(func)
    sch = DesignSpace([TensorizeTiling()]).default_sample(func)
    trace = json.loads(sch.trace.to_json())
    sampled = [i for i, inst in enumerate(trace["instructions"]) if inst["kind"] == "sample_categorical"]
    columns = trace["instructions"][sampled[2]]["args"]  # NC as NC / NR panels
    assert len(columns["candidates"]) >= 1
    kc = trace["instructions"][sampled[3]]["args"]
    assert kc["candidates"] == [64, 128]
    kc["decision"] = 1 - kc["decision"]
    changed = Schedule.from_trace(func, trace)
    assert not structural_equal(changed.func, sch.func)


def test_tile_order_and_a_panels_decisions_are_drawn_and_stay_correct():
    """The structure decisions of a tile with a panel form (A packed into panels or read in place;
    in a block, each B panel across the row tiles or each A tile across the column panels) are
    drawn by fresh samples, reach the program (the order of the tile loops in the trace's
    reorder, a panel-form tile), and every combination computes the matmul."""
    func = workloads.matmul(37, 64, 48)
    _needs_a_tile_intrinsic(func)
    space = DesignSpace([TensorizeTiling()])
    seen = {}
    for seed in range(64):
        sch = space.sample(func, seed)
        trace = json.loads(sch.trace.to_json())
        decisions = [inst["args"] for inst in trace["instructions"] if inst["kind"] == "sample_categorical"]
        if len(decisions) < 7:
            continue  # a tile without a panel form
        panels, a_outer = (d["candidates"][d["decision"]] for d in decisions[-2:])
        seen.setdefault((panels, a_outer), sch)
    if not seen:
        pytest.skip("no tile this CPU runs has a panel form")
    assert {a for _, a in seen} == {0, 1} and {p for p, _ in seen} == {0, 1}
    for (panels, a_outer), sch in seen.items():
        tiled = _tensorized(sch.func)
        assert all(name.endswith("_panel") == bool(panels) for name in tiled)
        rng = np.random.default_rng(random.randrange(2**20))
        a = rng.standard_normal((37, 48)).astype("float32")
        b = rng.standard_normal((48, 64)).astype("float32")
        c = rng.standard_normal((37, 64)).astype("float32")
        refcomp.build(sch.func)(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-4)
    for (_, a_outer), sch in seen.items():
        trace = json.loads(sch.trace.to_json())["instructions"]
        splits = [inst["outputs"] for inst in trace if inst["kind"] == "split"]
        order = [loop["rv"] for loop in next(inst for inst in trace if inst["kind"] == "reorder")["args"]["loops"]]
        row_tiles, column_panels = splits[0][1], splits[1][1]  # i1 of i0, i1, i2 and j1 of j0, j1, j2
        assert (order.index(row_tiles) < order.index(column_panels)) == bool(a_outer)


def test_the_wide_avx512_tile_is_offered_and_preferred_and_every_tile_computes_the_matmul():
    """On AVX-512 the 6 x 64 tile is a value of the intrinsic decision, the widest, so the default
    sample takes it (in its unrolled form, the preferred k loop); `intrinsics=` restricts the
    decision to the named tiles; each tile the CPU runs, with M not a multiple of its rows (a
    partial last tile), computes the matmul."""
    from refcomp.loops import intrin
    from refcomp.loops.intrin import x86

    func = workloads.matmul(37, 128, 64)
    _needs_a_tile_intrinsic(func)
    block = Schedule(func).get(Schedule(func).get_block("C"))
    names = tile_intrinsics(block, matmul_shape(block, "test"))
    wide = "x86.avx512.sgemm_6x64"
    assert (wide in names) == intrin.get(wide).available()
    assert not any(x86.is_unrolled(name) for name in names)  # the k loop decision offers them
    if wide in names:
        assert _tensorized(DesignSpace([TensorizeTiling()]).default_sample(func).func) == {wide + "_unrolled"}
    rng = np.random.default_rng(random.randrange(2**20))
    a = rng.standard_normal((37, 64)).astype("float32")
    b = rng.standard_normal((64, 128)).astype("float32")
    for name in names:
        space = DesignSpace([TensorizeTiling(intrinsics=(name,))])
        for sch in (space.default_sample(func), space.sample(func, random.randrange(2**20))):
            forms = {name, name + "_panel", x86.unrolled_form(name), x86.unrolled_form(name + "_panel")}
            assert _tensorized(sch.func) <= forms and _tensorized(sch.func)
            c = rng.standard_normal((37, 128)).astype("float32")
            refcomp.build(sch.func)(a, b, c)
            np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-4)
    untouched = DesignSpace([TensorizeTiling(intrinsics=("no.such_tile",))]).default_sample(func)
    assert not _tensorized(untouched.func) and "sample_categorical" not in {i.kind for i in untouched.trace.instructions}


def test_the_k_loop_decision_of_a_tile_with_an_unrolled_form_is_drawn_and_stays_correct():
    """For the 6 x 64 tile (the one with an unrolled form) the k loop is a decision: the default
    sample takes the unrolled form, fresh samples draw both forms (with A in place or in panels),
    and every one computes the matmul.  It comes after KC and before the parallel loop, so the
    decisions before it keep their places."""
    from refcomp.loops import intrin
    from refcomp.loops.intrin import x86

    wide = "x86.avx512.sgemm_6x64"
    if not intrin.get(wide).available():
        pytest.skip("this CPU does not run the AVX-512 6 x 64 tile")
    func = workloads.matmul(37, 128, 64)
    space = DesignSpace([TensorizeTiling(intrinsics=(wide,))])
    default = space.default_sample(func)
    loop_decision = [inst.args for inst in default.trace.instructions if inst.kind == "sample_categorical"][4]
    assert loop_decision["candidates"] == [1, 0] and loop_decision["decision"] == 0
    seen = {}
    for seed in range(48):
        sch = space.sample(func, seed)
        seen.setdefault(frozenset(_tensorized(sch.func)), sch)
    assert {next(iter(forms)) for forms in seen} == {wide, wide + "_panel", wide + "_unrolled",
                                                     wide + "_unrolled_panel"}
    rng = np.random.default_rng(random.randrange(2**20))
    a = rng.standard_normal((37, 64)).astype("float32")
    b = rng.standard_normal((64, 128)).astype("float32")
    for forms, sch in seen.items():
        c = rng.standard_normal((37, 128)).astype("float32")
        refcomp.build(sch.func)(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-4)
        assert all(x86.is_unrolled(name) == ("_unrolled" in name) for name in forms)
    _check_against_interpreter(func, seen[frozenset({wide + "_unrolled"})], random.randrange(2**20))
    # unrolled_forms=False: no such decision, the tile as named
    plain = DesignSpace([TensorizeTiling(intrinsics=(wide,), unrolled_forms=False)]).default_sample(func)
    assert _tensorized(plain.func) == {wide}
    assert len([i for i in plain.trace.instructions if i.kind == "sample_categorical"]) == \
        len([i for i in default.trace.instructions if i.kind == "sample_categorical"]) - 1


def _tensorized(func) -> set:
    from refcomp.ast import Block, collect

    return {b.annotations["tensorized"] for b in collect(func.body, Block) if "tensorized" in b.annotations}


def test_auto_inline_and_compute_location_keep_softmax_correct():
    func = workloads.softmax(6, 16)
    rng = np.random.default_rng(random.randrange(2**20))
    a = rng.uniform(-2, 2, (6, 16)).astype("float32")
    want = np.exp(a - a.max(1, keepdims=True))
    want /= want.sum(1, keepdims=True)
    inlined = DesignSpace([AutoInline()]).sample(func, 0)
    names = {inst.args.get("block") for inst in inlined.trace.instructions if inst.kind == "compute_inline"}
    assert names  # E, the exponentials, is inlined into its readers
    for seed in range(4):
        sch = DesignSpace([RandomComputeLocation(), ParallelOuter()]).sample(func, seed)
        out = np.full((6, 16), 7.0, dtype="float32")
        interpret(sch.func, a, out)
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
    out = np.full((6, 16), 7.0, dtype="float32")
    interpret(inlined.func, a, out)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


def test_the_search_measures_the_rule_based_default_first():
    func = workloads.matmul(12, 32, 16)
    _needs_a_tile_intrinsic(func)
    seed = random.randrange(2**20)
    db = Database()
    result = tune(func, "c", trials=3, batch=3, population=4, seed=seed, database=db,
                  reference=_matmul_reference, runner=Runner(workers=2, timeout_s=300))
    assert result.trials == 3 and not result.failures and result.schedule is not None
    default = DesignSpace(default_rules()).default_sample(func, seed)
    assert any("tensorize" == inst.kind for inst in default.trace.instructions)
    assert db.records[0].trace == json.loads(default.trace.to_json())


def test_row_reductions_start_from_the_default_structure_and_stay_correct():
    from refcomp.tune import GraphDefault, RowReductionDefault

    func = workloads.layer_norm(6, 128)
    rng = np.random.default_rng(random.randrange(2**20))
    a = rng.uniform(-2, 2, (6, 128)).astype("float32")
    want = (a - a.mean(1, keepdims=True)) / np.sqrt(a.var(1, keepdims=True) + 1e-5)
    # without the graph default in front (it would make the default sample its own schedule)
    space = DesignSpace([rule for rule in default_rules() if not isinstance(rule, GraphDefault)])
    default = space.default_sample(func)
    kinds = [inst.kind for inst in default.trace.instructions]
    assert "compute_at" in kinds and "parallel" in kinds and "sample_perfect_tile" not in kinds
    assert any(isinstance(rule, RowReductionDefault) for rule in space.rules)
    for sch in [default] + space.sample_many(func, 3, random.Random(random.randrange(2**20))):
        out = np.full((6, 128), 7.0, dtype="float32")
        interpret(sch.func, a, out)
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)
        again = Schedule.from_trace(func, sch.trace.to_json())
        assert structural_equal(again.func, sch.func)


def test_tuned_row_reductions_get_the_default_prefetch_hints():
    from refcomp.tune import GraphDefault, RowPrefetch

    func = workloads.softmax(6, 256)
    space = DesignSpace([rule for rule in default_rules() if not isinstance(rule, GraphDefault)])
    assert isinstance(space.rules[-1], RowPrefetch)
    default = space.default_sample(func)
    assert [inst.kind for inst in default.trace.instructions].count("prefetch") == 2  # next input row, output row
    rng = np.random.default_rng(random.randrange(2**20))
    a = rng.uniform(-4, 4, (6, 256)).astype("float32")
    e = np.exp(a - a.max(1, keepdims=True))
    samples = [default] + space.sample_many(func, 6, random.Random(random.randrange(2**20)))
    for sch in samples:
        out = np.full((6, 256), 7.0, dtype="float32")
        refcomp.build(sch.func)(a, out)  # the hints are C; the interpreter skips them
        np.testing.assert_allclose(out, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
        again = Schedule.from_trace(func, sch.trace.to_json())
        assert structural_equal(again.func, sch.func)
    # a kernel that is not a row reduction is left alone
    plain = space.default_sample(workloads.exp_scale(64))
    assert "prefetch" not in [inst.kind for inst in plain.trace.instructions]


GRAPH_DEFAULT_CASES = {
    "conv2d": lambda: workloads.conv2d_nchw(1, 8, 9, 16),
    "matmul": lambda: workloads.matmul(64, 48, 32),
    "softmax": lambda: workloads.softmax(6, 96),
    "layer_norm": lambda: workloads.layer_norm(5, 64),
    "bmm_bt": lambda: workloads.batch_matmul_bt(2, 24, 20, 16),
}


@pytest.mark.parametrize("name", sorted(GRAPH_DEFAULT_CASES))
def test_the_design_space_default_is_the_schedule_graph_build_gives(name):
    from refcomp.graph.passes.default_schedule import prepare_kernel, schedule_kernel
    from refcomp.tune import GraphDefault

    func = prepare_kernel(GRAPH_DEFAULT_CASES[name]())
    space = DesignSpace(default_rules())
    assert isinstance(space.rules[0], GraphDefault)
    default = space.default_sample(func)
    # exactly what graph.build's default_schedule makes of the kernel, recipes included
    assert structural_equal(default.func.with_attr("scheduled", True), schedule_kernel(func, prepared=True))
    again = Schedule.from_trace(func, default.trace.to_json())
    assert structural_equal(again.func, default.func)
    # fresh samples keep it or leave the function to the other rules; either computes the same
    rng = random.Random(random.randrange(2**20))
    arrays = random_arguments(func, rng.randrange(2**20))
    want = [a.copy() for a in arrays]
    interpret(func, *want)
    outputs = [i for i, p in enumerate(func.params) if any(p is b for b in _written(func))]
    for sch in [default] + space.sample_many(func, 2, rng):
        got = [a.copy() for a in arrays]
        for i in outputs:
            got[i][...] = 7
        refcomp.build(sch.func)(*got)  # compiled: a tensorized tile does not interpret
        for i in outputs:
            np.testing.assert_allclose(got[i], want[i], rtol=1e-4, atol=1e-4)


def _written(func):
    from refcomp.ast import Block
    from refcomp.ast.functor import collect

    return [region.buffer for block in collect(func.body, Block) for region in block.writes]


def test_the_default_tiles_are_the_matmul_recipes_and_fresh_draws_favour_them():
    from refcomp.loops.recipes.common import tile_of
    from refcomp.tune.rules import _recipe_tiling

    func = workloads.matmul(256, 256, 256)
    _needs_a_tile_intrinsic(func)
    space = DesignSpace([TensorizeTiling()])
    values = [inst.args["candidates"][inst.args["decision"]] for inst in space.default_sample(func).trace.instructions
              if inst.kind == "sample_categorical"]
    block = Schedule(func).get(Schedule(func).get_block("C"))
    names = sorted(tile_intrinsics(block, matmul_shape(block, "test")), key=lambda n: -tile_of(n)[1])
    mr, nr, _ = tile_of(names[0])
    mc, nc, kc = _recipe_tiling(names[0], 256, 256)
    assert values[0] == 0  # the widest tile
    assert values[1] * mr == min(mc, 256) or values[1] * mr >= 256 - mr  # as many rows as the recipe's block
    assert values[2] * nr == min(nc, 256) and values[3] == min(kc, 256)
    probs = [inst.args["probs"] for inst in space.sample(func, random.randrange(2**20)).trace.instructions
             if inst.kind == "sample_categorical"]
    kc_candidates = [inst.args["candidates"] for inst in space.default_sample(func).trace.instructions
                     if inst.kind == "sample_categorical"][3]
    assert probs[0][0] > max(probs[0][1:], default=0.0)  # the widest tile drawn most often
    assert probs[3][kc_candidates.index(values[3])] == max(probs[3])  # the recipe's KC the likeliest


def _check_against_interpreter(func, sch, seed):
    arrays = random_arguments(func, seed)
    want = [a.copy() for a in arrays]
    interpret(func, *want)
    got = [a.copy() for a in arrays]
    refcomp.build(sch.func)(*got)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(w).max())))


def _decisions(sch) -> tuple:
    return tuple(inst.args["candidates"][inst.args["decision"]] for inst in sch.trace.instructions
                 if inst.kind == "sample_categorical")


@pytest.mark.parametrize("rule, make", [
    ("conv", lambda: workloads.conv2d_nchw(1, 8, 12, 32)),
    ("bmm_bt", lambda: workloads.batch_matmul_bt(3, 26, 64, 16)),
])
def test_conv_and_batched_matmul_tilings_sample_real_decisions_around_the_recipe(rule, make):
    """ConvTiling (the channel-vector tile's MV x XB and parallel loop) and BatchedMatmulTiling
    (the register tile, the block order, the parallel loop): their default sample is the graph's
    default schedule itself, fresh samples reach several different programs, and each computes
    what the interpreter computes on the unscheduled function."""
    from refcomp.graph.passes.default_schedule import prepare_kernel, schedule_kernel
    from refcomp.tune import BatchedMatmulTiling, ConvTiling
    from refcomp.loops.recipes.conv_match import channel_lanes, native_lanes

    func = prepare_kernel(make())
    if rule == "conv" and channel_lanes(32, native_lanes()) is None:
        pytest.skip("no channel-vector tile on this CPU")
    if rule == "bmm_bt":
        _needs_a_tile_intrinsic(workloads.matmul(26, 64, 16))
    space = DesignSpace([ConvTiling() if rule == "conv" else BatchedMatmulTiling()])
    default = space.default_sample(func)
    assert structural_equal(default.func.with_attr("scheduled", True), schedule_kernel(func, prepared=True))
    rng = random.Random(random.randrange(2**20))
    programs = {}
    for _ in range(12):
        sch = space.sample(func, rng.randrange(2**20))
        assert _decisions(sch), "the rule applied"
        programs.setdefault(_decisions(sch), sch)
    distinct = []
    for sch in programs.values():
        if not any(structural_equal(sch.func, other.func) for other in distinct):
            distinct.append(sch)
    assert len(distinct) >= 2
    for sch in distinct[:4]:
        _check_against_interpreter(func, sch, rng.randrange(2**20))
        again = Schedule.from_trace(func, sch.trace.to_json())
        assert structural_equal(again.func, sch.func)


def test_conv_and_batched_matmul_tilings_leave_other_kernels_and_refuse_bad_choices():
    """The rules do not apply to a kernel that is not theirs (it goes on to the other rules), and
    the recipes refuse a tile that does not fit with a ScheduleError."""
    from refcomp.errors import ScheduleError
    from refcomp.graph.passes.default_schedule import default_schedule_of, prepare_kernel
    from refcomp.tune import BatchedMatmulTiling, ConvTiling

    matmul = workloads.matmul(16, 32, 8)
    for rule in (ConvTiling(), BatchedMatmulTiling()):
        sch = Schedule(matmul)
        out, applied = rule.apply_function(sch)
        assert not applied and out is sch
    conv = Schedule(prepare_kernel(workloads.conv2d_nchw(1, 8, 12, 32)))
    with pytest.raises(ScheduleError):
        default_schedule_of(conv, conv_options={"channel_vector_tile": (1, 5, False)})  # 5 does not divide 12
    bmm = Schedule(prepare_kernel(workloads.batch_matmul_bt(2, 8, 48, 8)))
    with pytest.raises(ScheduleError):
        default_schedule_of(bmm, batched_matmul_options={"intrin": "x86.avx512.sgemm_6x64"})  # 64 does not divide 48
    with pytest.raises(ScheduleError):
        default_schedule_of(bmm, batched_matmul_options={"intrin": "no.such_tile"})
