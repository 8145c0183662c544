"""Schedule rules beyond plain tiling: tensorize on a registered tile intrinsic with packing and
sampled cache tiles, auto-inline, random compute location, and parallel outer loops.

Every choice a rule makes goes through a sampling primitive, and every tile size reaches the
loops as the sampled value itself (a split factor), so a mutator that changes one decision and
replays the trace changes the schedule accordingly.  A rule whose block does not fit leaves the
schedule unchanged.  Rules with an `apply_default(sch, block)` method also know a preferred
choice for each decision (the hand recipe's); `DesignSpace.default_sample` uses it to seed the
search with the rule-based default schedule.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..ast import Block, as_int
from ..ast.functor import collect
from ..errors import RefcompError, ScheduleError
from ..loops import intrin as intrin_registry
from ..loops.recipes.common import MatmulShape, matmul_shape, takes_partial_rows, tile_of
from ..loops.recipes.matmul import (_GROUP, PANEL_INTRINS, _b_panels, _schedule_copy, _schedule_grouped_copy,
                                    _schedule_panel_copy, _schedule_transposed_copy)
from ..loops.schedule import BlockRV, Schedule


def _choose(sch: Schedule, candidates: Sequence[int], preferred: int | None, default: bool):
    """sample_categorical over candidates (uniform); the preferred one when default is set."""
    candidates = list(candidates)
    decision = candidates.index(preferred) if default and preferred in candidates else None
    return sch.sample_categorical(candidates, [1.0] * len(candidates), decision=decision)


def _nearest(values: Sequence[int], preferred: int) -> int:
    return min(values, key=lambda v: (abs(v - preferred), v))


def _choose_near(sch: Schedule, candidates: Sequence[int], preferred: int, default: bool):
    """sample_categorical over candidates, the preferred one (nearest to `preferred`) when default is
    set; a fresh draw favours values near it: weight 1 / (1 + d)^2 for a distance of d octaves, so a
    tile twice or half the preferred size is drawn a quarter as often, four times as big a ninth."""
    import math

    candidates = list(candidates)
    nearest = _nearest(candidates, preferred)
    weights = [1.0 / (1.0 + abs(math.log2(max(c, 1) / max(nearest, 1)))) ** 2 for c in candidates]
    return sch.sample_categorical(candidates, weights, decision=candidates.index(nearest) if default else None)


def _recipe_tiling(name: str, n, k):
    """The matmul recipe's cache tiles for a tile intrinsic and an N x K operand B
    (refcomp.loops.recipes.matmul): MC, NC, KC."""
    from ..loops.recipes.matmul import Tiling, _fp32_tiling, _low_precision_tiling

    tiling = _fp32_tiling(name, Tiling(), n, k) if "sgemm" in name else _low_precision_tiling(name, Tiling())
    return tiling.mc, tiling.nc, tiling.kc


def _desc_dtypes(name: str) -> tuple[str, str, str]:
    desc = intrin_registry.get(name).desc
    a, b, c = (str(p.dtype) for p in desc.params[:3])
    return a, b, c


def tile_intrinsics(block: Block, shape: MatmulShape) -> list[str]:
    """The registered matmul tile intrinsics this CPU runs that compute block's element types and
    tile its shape without padding (N a multiple of NR, K of the k multiple, M of MR unless the
    intrinsic takes partial tiles); A-panel forms are left out (they need A packed in panels), and so
    are unrolled forms (x86.unrolled_form: TensorizeTiling's k loop decision takes them)."""
    a_dtype = str(block.reads[shape.a_index].buffer.dtype)
    b_dtype = str(block.reads[shape.b_index].buffer.dtype)
    c_dtype = str(block.writes[0].buffer.dtype)
    n, k, m = as_int(shape.n), as_int(shape.k), as_int(shape.m)
    found = []
    for name in intrin_registry.names(available_only=True):
        try:
            mr, nr, k_multiple = tile_of(name)
        except KeyError:
            continue  # not a matmul tile
        if intrin_registry.get(name).impl.attrs.get("a_panel") or name.endswith("_panel"):
            continue
        if intrin_registry.x86.is_unrolled(name):
            continue  # offered by TensorizeTiling's k loop decision
        if _desc_dtypes(name) != (a_dtype, b_dtype, c_dtype) or None in (n, k, m):
            continue
        if n % nr or k % k_multiple or (m % mr and not takes_partial_rows(name)):
            continue
        found.append(name)
    return found


@dataclass
class TensorizeTiling:
    """Multi-level tiling around a tensorized register tile, for matmul blocks (C[i, j] += A[i, k]
    * B[k, j], or * W[j, k]) that a registered tile intrinsic computes.

    Decisions (each a sample_categorical): the intrinsic (among those the CPU has, widest tile
    first, preferred; a fresh draw takes the widest `widest_weight` times as often as each other;
    on AVX-512 the 6 x 64 tile, 3-4% faster than the 12 x 32 one at N = 1024), the row
    block MC (as MC / MR tiles), the column block NC (as NC / NR panels), the reduction slab KC,
    for a tile with an unrolled form (x86.unrolled_form: the 6 x 64 one) its k loop (four k a step
    without software prefetch of B, preferred, or one k a step with it), which loop runs in parallel (column blocks, each thread packing its own slab of B; or row
    blocks, all reading B packed once), for an intrinsic with a panel form whether A is packed
    into MR-row panels, and the order of the tiles in a block (each B panel across the row tiles,
    or each A tile across the column panels).  The preferred MC, NC and KC are the matmul recipe's for the
    intrinsic (`preferred_*` when set), tuned to the caches of the machines it was measured on;
    a fresh draw of a tile size favours sizes near them (`_choose_near`), so fewer trials go to
    tiles far from anything that ran well, while every size stays possible.  The first three reach the loops as split
    factors (mutable); the others choose the structure (explored by fresh samples).  B is packed into NR-wide panels
    (cache_read + transform_layout) in the layout the intrinsic reads; the tile block zeroes its
    C tile before the first slab, so C needs no separate write cache.  The structure is:

        for j0 | i0 in parallel:  for k0:  for (i0 | j0):  for j1, i1 (or i1, j1):  tile(MR, NR, KC)
    """

    restructures = True  # left out after a function-level rule (DesignSpace)
    preferred_mc: int | None = None  # None: the matmul recipe's tiling for the intrinsic
    preferred_nc: int | None = None
    preferred_kc: int | None = None
    widest_weight: float = 16.0
    mc_tiles: Sequence[int] = (2, 4, 8, 12, 16, 24, 32)
    nc_range: tuple[int, int] = (64, 2048)
    kc_range: tuple[int, int] = (64, 1024)
    intrinsics: Sequence[str] | None = None  # offer only these tile intrinsics (None: every one that fits)
    unrolled_forms: bool = True  # a tile's unrolled form as a k loop decision (False: the tile as named)

    def apply(self, sch: Schedule, block: BlockRV) -> None:
        self._apply(sch, block, default=False)

    def apply_default(self, sch: Schedule, block: BlockRV) -> None:
        self._apply(sch, block, default=True)

    def _apply(self, sch: Schedule, block: BlockRV, default: bool) -> None:
        node = sch.get(block)
        try:
            shape = matmul_shape(node, "tensorize tiling")
        except ScheduleError:
            return
        if len(sch.get_loops(block)) != 3:
            return
        names = [name for name in tile_intrinsics(node, shape) if self.intrinsics is None or name in self.intrinsics]
        if not names:
            return
        names.sort(key=lambda name: -tile_of(name)[1])  # widest tile (best vector ISA) first
        m, n, k = as_int(shape.m), as_int(shape.n), as_int(shape.k)
        weights = [self.widest_weight] + [1.0] * (len(names) - 1)
        pick = int(sch.sample_categorical(list(range(len(names))), weights, decision=0 if default else None))
        name = names[pick]
        mr, nr, k_multiple = tile_of(name)
        recipe_mc, recipe_nc, recipe_kc = _recipe_tiling(name, shape.n, shape.k)
        preferred_mc = self.preferred_mc or recipe_mc
        preferred_nc = self.preferred_nc or recipe_nc
        preferred_kc = self.preferred_kc or recipe_kc
        layout = intrin_registry.x86.b_layout(name)
        row_tiles = -(-m // mr)
        mc_choices = sorted({t for t in self.mc_tiles if t <= row_tiles} | {min(row_tiles, self.mc_tiles[0])})
        nc_choices = [p for p in range(1, n // nr + 1) if (n // nr) % p == 0
                      and self.nc_range[0] <= p * nr <= self.nc_range[1]] or [n // nr]
        kc_choices = [c for c in range(k_multiple, k + 1, k_multiple) if k % c == 0
                      and self.kc_range[0] <= c <= self.kc_range[1]] or [k]
        mc_tiles = _choose_near(sch, mc_choices, max(1, preferred_mc // mr), default)
        nc_panels = _choose_near(sch, nc_choices, max(1, preferred_nc // nr), default)
        kc = _choose_near(sch, kc_choices, preferred_kc, default)
        # the tile's k loop, where it has an unrolled form (x86.unrolled_form): four k a step with
        # no software prefetch of B (preferred: 5% faster at N = 1024), or one k a step with B's
        # lines prefetched 16 k ahead
        unrolled = intrin_registry.x86.unrolled_form(name) if self.unrolled_forms else None
        if unrolled is not None and int(_choose(sch, [1, 0], 1, default)):
            name = unrolled
        by_columns = _choose(sch, [1, 0], 1, default)
        # A in MR-row panels read by the intrinsic's panel form: one stream of A per tile instead
        # of MR rows that may share an L1 set (a row stride of 4 KiB)
        panels = int(_choose(sch, [0, 1], 0, default)) if name in PANEL_INTRINS else 0
        # the order of the NR panels and MR tiles in a block: each B panel across the row tiles
        # (the recipe's), or each A tile across the column panels
        a_outer = int(_choose(sch, [0, 1], 0, default))

        if panels:
            packed_a = sch.cache_read(block, shape.a_index, "global")
            sch.transform_layout(packed_a, ("write", 0), lambda i, k: (i // mr, k, i % mr),
                                 pad_value=0.0 if m % mr else None)
            _schedule_panel_copy(sch, packed_a, True, mr)
            name = PANEL_INTRINS[name]
        # a thread packing its own slabs of B fills a block-sized "local" buffer (as the matmul
        # recipe does: a B-sized buffer means fresh memory for every slab)
        per_block = bool(int(by_columns))
        packed = sch.cache_read(block, shape.b_index, "local" if per_block else "global")
        i, j, kk = sch.get_loops(block)
        i0, i1, i2 = sch.split(i, [None, mc_tiles, mr])
        j0, j1, j2 = sch.split(j, [None, nc_panels, nr])
        k0, k1 = sch.split(kk, [None, kc])
        tiles = (i1, j1) if a_outer else (j1, i1)
        if int(by_columns):
            sch.reorder(j0, k0, i0, *tiles, i2, j2, k1)
            sch.compute_at(packed, k0)
        else:
            sch.reorder(i0, j0, k0, *tiles, i2, j2, k1)
        blocks = (int(nc_panels) * nr, int(kc)) if per_block else None
        sch.transform_layout(packed, ("write", 0), _b_panels(nr, layout, shape.b_transposed, blocks))
        copy_in_parallel = not per_block
        if shape.b_transposed:
            _schedule_transposed_copy(sch, packed, block, copy_in_parallel, nr, _GROUP.get(layout, 1),
                                      registers=not per_block)
        elif layout == "rows":
            _schedule_copy(sch, packed, copy_in_parallel, nr)
        else:
            _schedule_grouped_copy(sch, packed, copy_in_parallel, nr, _GROUP[layout])
        sch.tensorize(i2, name)
        outer = j0 if int(by_columns) else i0
        sch.parallel(outer)
        sch.annotate(outer, "omp_schedule", "dynamic")


def _is_output(sch: Schedule, block: Block) -> bool:
    outputs = {id(p) for p in sch.func.params}
    return any(id(region.buffer) in outputs for region in block.writes)


@dataclass
class GraphDefault:
    """A function-level rule: the schedule graph.build gives the kernel when it has no tuning
    record (graph.passes.default_schedule: the conv and matmul recipes, the rule-based defaults of
    loops.defaults, the per-block parallel and vector treatment), made with schedule primitives so
    its trace replays it.  The default sample keeps it, so the search measures the graph's own
    default first and never ends behind it; a fresh sample keeps it with probability `keep` and
    otherwise leaves the function to the other rules.  When kept, no other rule runs (`complete`).
    The kernel should have been through graph.passes.default_schedule.prepare_kernel, as the
    kernels graph.build and extract_tasks give are."""

    keep: float = 0.125
    complete = True  # DesignSpace: after it applied, no other rule runs

    def apply_function(self, sch: Schedule, default: bool = False) -> tuple[Schedule, bool]:
        """(the schedule, whether the graph default was applied)."""
        from ..graph.passes.default_schedule import default_schedule_of

        trial = sch.copy()
        kept = trial.sample_categorical([1, 0], [self.keep, 1.0 - self.keep], decision=0 if default else None)
        if not int(kept):
            return trial, False
        try:
            return default_schedule_of(trial), True
        except RefcompError:
            return sch, False


@dataclass
class ConvTiling:
    """A function-level rule for a kernel with one convolution (and spatial stages: its padded
    input, an epilogue): the graph's default schedule (`GraphDefault`'s, the same per-stage
    treatment) with the conv recipe's channel-vector register tile chosen by sampled decisions
    (loops.recipes.conv_fp32's channel_vector_tile): MV vectors of L output channels, XB output
    columns of one row (any divisor of the width whose MV x XB accumulators, MV weight vectors and
    the broadcast fit the vector registers; a fresh draw favours XB near the recipe's), and the
    parallel loop (the channel blocks, or the output rows).  The preferred decisions are the
    recipe's (MV 2 where it divides, its XB: the divisor of the width up to 20 / MV (3 x 3) or 24
    / MV (1 x 1) leaving the fewest tiles; channel blocks parallel while there are at least 8 of
    them, else the rows).  When it applied, no other rule runs (`complete`); a kernel it does
    not fit goes on to the other rules unchanged.  The decisions choose the structure (the
    recipe's unrolling follows them), so only fresh samples explore them."""

    complete = True

    def apply_function(self, sch: Schedule, default: bool = False) -> tuple[Schedule, bool]:
        from ..graph.passes.default_schedule import default_schedule_of
        from ..loops.recipes.conv_match import channel_lanes, find_convs, native_lanes
        from ..loops.recipes.conv_tiles import channel_vector_tiles, recipe_channel_vector_tile

        shapes = find_convs(sch.func)
        if len(shapes) != 1 or shapes[0].out_channels is None or shapes[0].out_width is None:
            return sch, False
        shape, native = shapes[0], native_lanes()
        lanes = channel_lanes(shape.out_channels, native)
        tiles = channel_vector_tiles(shape, lanes, native) if lanes else []
        if not tiles:
            return sch, False
        block = next(b for b in collect(sch.func.body, Block) if b.name == shape.block)
        _, recipe_mv, _, recipe_xb = recipe_channel_vector_tile(block, shape, lanes, native)
        trial = sch.copy()
        vectors = sorted({mv for mv, _ in tiles})
        mv = int(_choose(trial, vectors, recipe_mv, default))
        widths = [xb for m, xb in tiles if m == mv]
        xb = int(_choose_near(trial, widths, recipe_xb * recipe_mv // mv or 1, default))
        rows = False
        if shape.spatial_dims == 2:
            few = shape.out_channels // (mv * lanes) < 8
            rows = bool(int(_choose(trial, [0, 1], int(few), default)))
        try:
            return default_schedule_of(trial, conv_options={"channel_vector_tile": (mv, xb, rows)}), True
        except RefcompError:
            return sch, False


def fp32_tile_intrinsics() -> list[str]:
    """The fp32 matmul tile intrinsics (A read in place) this CPU runs, widest tile first."""
    found = []
    for name in intrin_registry.names(available_only=True):
        try:
            _, nr, _ = tile_of(name)
        except KeyError:
            continue
        if intrin_registry.get(name).impl.attrs.get("a_panel") or name.endswith("_panel"):
            continue
        if intrin_registry.x86.is_unrolled(name):
            continue
        if _desc_dtypes(name) == ("float32", "float32", "float32"):
            found.append(name)
    return sorted(found, key=lambda name: -tile_of(name)[1])


@dataclass
class BatchedMatmulTiling:
    """A function-level rule for a batched A @ B^T (attention scores; loops.defaults'
    `transposed_operand`): the graph's default schedule (B packed in NR-wide panels, a register
    tile over the whole of K, the same per-stage treatment) with its choices sampled
    (loops.defaults.tiled_batched_matmul_bt): the tile intrinsic (every fp32 tile this CPU runs
    that fits M, N and K; preferred: the recipe's, the first of the matmul recipe's list that
    fits), the loop order (each B panel across the row blocks, preferred; or each A block across
    the column panels), and the parallel loop (the batch fused with the outer block loop,
    preferred; or the batch alone).  `complete` when it applied; a kernel it does not fit goes
    on to the other rules unchanged.  The decisions choose the structure: fresh samples explore
    them."""

    complete = True

    def apply_function(self, sch: Schedule, default: bool = False) -> tuple[Schedule, bool]:
        from ..graph.passes.default_schedule import default_schedule_of
        from ..loops.defaults import bt_tile_intrinsics, transposed_operand
        from ..loops.recipes.matmul import FP32_INTRINS

        found = transposed_operand(sch.func)
        if found is None:
            return sch, False
        block, b_index = found
        names = bt_tile_intrinsics(block, b_index, fp32_tile_intrinsics())
        if not names:
            return sch, False
        recipe = next(iter(bt_tile_intrinsics(block, b_index, FP32_INTRINS)), names[0])
        trial = sch.copy()
        name = names[int(_choose(trial, list(range(len(names))), names.index(recipe) if recipe in names else 0,
                                 default))]
        columns_outer = bool(int(_choose(trial, [0, 1], 0, default)))
        parallel_blocks = bool(int(_choose(trial, [1, 0], 1, default)))
        options = {"intrin": name, "columns_outer": columns_outer, "parallel_blocks": parallel_blocks}
        try:
            return default_schedule_of(trial, batched_matmul_options=options), True
        except RefcompError:
            return sch, False


@dataclass
class RowReductionDefault:
    """A function-level rule: for a row reduction (softmax, layer norm: stages over the same rows
    ending in a spatial output stage), the rule-based default's structure, every earlier stage
    under the output's (fused) row loop, that loop parallel (loops.defaults.schedule_row_reduction).
    A sampled choice keeps it or leaves the function to the block rules (preferred: keep it).
    After it, the rules that place or tile blocks (`restructures`) are left out; the block-level
    parallel and vector rules still apply to the loops it left serial."""

    def apply_function(self, sch: Schedule, default: bool = False) -> tuple[Schedule, bool]:
        """(the schedule, whether the structure was applied); sch itself when it does not fit."""
        from ..loops.defaults import is_row_reduction, schedule_row_reduction

        if not is_row_reduction(sch.func):
            return sch, False
        trial = sch.copy()
        if not int(_choose(trial, [1, 0], 1, default)):
            return trial, False
        try:
            scheduled = schedule_row_reduction(trial)
        except RefcompError:
            return sch, False
        return (scheduled, True) if scheduled is not None else (sch, False)


@dataclass
class RowPrefetch:
    """A postprocessing rule (`apply_postprocess`: after every block rule): a row reduction whose
    row loop is parallel and whose stages run in vector chunks gets the default's prefetch hints
    (loops.defaults.prefetch_rows: the next row of each input and the output row, one hint per
    chunk), so a tuned row kernel streams memory while it computes as the default does.  A
    sampled choice adds them or not (preferred: add them); a schedule they do not fit is left
    as it was."""

    def apply_postprocess(self, sch: Schedule, func, default: bool = False) -> Schedule:
        from ..loops.defaults import is_row_reduction, prefetch_rows

        if not is_row_reduction(func):
            return sch
        trial = sch.copy()
        if not int(_choose(trial, [1, 0], 1, default)):
            return trial
        try:
            return prefetch_rows(trial)
        except RefcompError:
            return trial


@dataclass
class AutoInline:
    """Inline a spatial block that is not an output into its readers (an elementwise producer)."""

    restructures = True

    def apply(self, sch: Schedule, block: BlockRV) -> None:
        node = sch.get(block)
        if any(iv.kind != "spatial" for iv in node.iter_vars) or _is_output(sch, node):
            return
        if not sch.get_consumers(block):
            return
        try:
            sch.compute_inline(block)
        except RefcompError:
            return


@dataclass
class RandomComputeLocation:
    """Compute a block that is not an output at a sampled loop of its consumer (or leave it)."""

    restructures = True

    def apply(self, sch: Schedule, block: BlockRV) -> None:
        node = sch.get(block)
        if _is_output(sch, node) or not sch.get_loops(block) or len(sch.get_consumers(block)) != 1:
            return
        location = sch.sample_compute_location(block)
        sch.compute_at(block, location)  # the inline and stay-where-it-is markers are understood


@dataclass
class ParallelOuter:
    """Run the outermost loop of a block in parallel when it binds only spatial iters, the block
    has more than one loop and none is parallel yet; `min_extent` keeps tiny loops serial."""

    min_extent: int = 2

    def apply(self, sch: Schedule, block: BlockRV) -> None:
        from .space import _loop_bindings

        node = sch.get(block)
        loops = sch.get_loops(block)
        if len(loops) < 2 or any(sch.get(loop).kind == "parallel" for loop in loops):
            return  # a single loop is left to the vectorizer
        first = sch.get(loops[0])
        extent = as_int(first.extent)
        if first.kind != "serial" or extent is None or extent < self.min_extent:
            return
        if _loop_bindings(sch.func, node).get(id(first.loop_var)) != "spatial":
            return
        try:
            sch.parallel(loops[0])
        except RefcompError:
            return
