"""Matmul recipes: multi-level tiling around a tensorized register tile, packed operands, threads.

The structure is BLIS's, written as ordinary schedule primitives:

    pack B into column panels   Bp[j // NR, k, j % NR]      (cache_read + transform_layout;
                                                             pairs / quads of k for bf16 / int8)
    for ic in parallel:         MC-high row blocks of C, handed out dynamically
      for jc:                   NC-wide column blocks
        for pc:                 KC slabs of the reduction: MC x KC of A stays in L2 across ...
          for jr:               ... the NR-wide panels: KC x NR of B stays in L1/L2 across ...
            for ir:             ... the MR-high tiles
              if pc == 0: C[MR, NR] = A[MR, KC] * B[KC, NR]   (the kernel's init form: the tile
              else:       C[MR, NR] += A[MR, KC] * B[KC, NR]   block's zeroing folded in; tensorize)

With fewer than two row blocks per thread the loops run `jc, pc, ic, jr, ir` with the column
blocks in parallel; with a symbolic M (and Tiling.mc_symbolic) `ic` runs serially around them.
Where neither gives a call worth splitting two tasks per thread (a few rows, or a symbolic M
called with a few), `ic` and `jc` fuse into one parallel loop over the (row block x column
block) grid, the blocks narrowed until there are (see tiled_matmul).  A is read in place unless
pack_a asks for k slabs Ap[k // KC, i, k % KC].
The AVX2 6 x 16 tile reading A in place runs `ir` outside `jr`; past half of L2 it packs A into
panels and takes BLIS's blocks (AVX2_TILE below).
B may be read as W[j, k] (C = A @ W^T, a `linear` layer's weight): the packing copy then reads W
transposed into the same panels, NR rows of W at a time.
Rows (M) may be symbolic or not divisible by MR: the last tile is partial and the kernel touches
only its rows.  N must be a multiple of NR; K of the intrinsic's k multiple.  Each recipe returns
the Schedule; the caller builds `sch.func`.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...ast import PrimFunc, as_int
from ...errors import ScheduleError
from ..schedule import BlockRV, Schedule
from ..intrin import cpu, get as get_intrin
from ..intrin.x86 import stream_form, unrolled_form
from .common import divides, fits, k_tile, matmul_shape, pick_intrin, takes_partial_rows, tile_of
from .transpose import (
    TRANSPOSE_16X8_AT, TRANSPOSE_32X16, TRANSPOSE_32X16_AT, transpose_16x8_intrin, transpose_intrin,
)

# 12 x 32 first: twelve FMAs per vector of B where 8 x 32 has eight (see kernels_fp32).
FP32_INTRINS = ["x86.avx512.sgemm_12x32", "x86.avx512.sgemm_8x32", "x86.avx2.sgemm_6x16"]
# The form of a tile intrinsic that reads A from packed MR-row panels Ap[i // MR, k, i % MR].
PANEL_INTRINS = {"x86.avx2.sgemm_6x16": "x86.avx2.sgemm_6x16_panel",
                 "x86.avx512.sgemm_12x32": "x86.avx512.sgemm_12x32_panel",
                 "x86.avx512.sgemm_14x32": "x86.avx512.sgemm_14x32_panel",
                 "x86.avx512.sgemm_6x64": "x86.avx512.sgemm_6x64_panel",
                 "x86.avx512.sgemm_6x64_unrolled": "x86.avx512.sgemm_6x64_unrolled_panel"}


@dataclass(frozen=True)
class Tiling:
    """Cache-level tile sizes: MC rows and NC columns of C per parallel task, KC of the reduction.

    mc_symbolic is MC when the row count is symbolic; given, and with the column blocks balanced
    over the threads, those row blocks run one after another around the parallel column loop
    (None: MC rows, threads over row blocks).  Where a call would get fewer than two tasks per
    thread, tiled_matmul narrows NC (then MC) for its (row block x column block) grid."""

    mc: int = 96
    nc: int = 512
    kc: int = 512
    mc_symbolic: int | None = None


def as_schedule(func_or_sch: PrimFunc | Schedule) -> Schedule:
    return func_or_sch if isinstance(func_or_sch, Schedule) else Schedule(func_or_sch)


def matmul_fp32(func_or_sch: PrimFunc | Schedule, block: str = "C", *, intrin: str | None = None,
                tiling: Tiling = Tiling(), pack_a: bool | str | None = None, pack_b: bool = True,
                parallel: bool = True) -> Schedule:
    """Schedule the fp32 matmul block `block` (C[i, j] += A[i, k] * B[k, j], or * W[j, k]) on an
    fp32 tile intrinsic.

    A is read in place by default: the MR rows a tile reads share an L1 set when the row stride
    is a multiple of 4 KiB, but a 12-way L1 holds them, and the packing pass cost more than it
    saved (at N = 2048 on one Zen 5 core, 216 GFLOP/s packed against 261 in place).
    With no `intrin`, the first tile of FP32_INTRINS this CPU runs that fits, the AVX-512 6x64
    tile in place of the 12x32 one where it wins (_wide_tile).
    pack_a="panels" (the AVX2 6x16 and AVX-512 12x32 / 14x32 / 6x64 tiles; M constant or symbolic) packs A
    into MR-row panels Ap[i // MR, k, i % MR] (rows past M zero) read by the tile's panel form: the
    tile then reads one stream of A instead of MR rows whose addresses may share an L1 set (a row
    stride of 4 KiB on an 8-way 32 KiB L1).  pack_a=None (the default) packs panels where B was
    packed before the call (a constant weight, see tiled_matmul) and the tile has a panel form, and
    reads A in place otherwise; False always reads it in place.
    """
    sch = as_schedule(func_or_sch)
    shape = matmul_shape(sch.get(sch.get_block(block)), "matmul_fp32")
    constant_b = pack_b and _is_constant_param(sch, sch.get_block(block), shape.b_index)
    name = intrin or _wide_tile(_pick(sch, block, FP32_INTRINS, "matmul_fp32"), shape, constant_b)
    return tiled_matmul(sch, block, name, _fp32_tiling(name, tiling, shape.n, shape.k, shape.m), pack_a=pack_a,
                        pack_b=pack_b, parallel=parallel, recipe="matmul_fp32")


# The AVX-512 6 x 64 tile (kernels_fp32) takes the 12 x 32 tile's place where N is a multiple of
# 64 and either K is at most WIDE_TILE_MAX_K or B is a constant packed before the call: per k four
# loads of B and six broadcasts of A feed 24 FMAs (the 12 x 32 tile: two and twelve).  One thread
# of an AVX-512 Xeon, CPU time, A/B in one process, the 12 x 32 tile against this one in its own
# blocks (_WIDE_KC below), two runs: N = 512 +2.0 / +1.6%, 1024 +2.8 / +3.4%, 2048 +3.0 / +3.3%
# (161.5 -> 166.4 GFLOP/s); the graph benchmark's mlp (batch 256, hidden 1024, constant weights)
# 28.42 -> 27.87 / 28.23 -> 27.88 ms, from its 256 x 1024 x 4096 linear (A panels, stream form).
WIDE_TILE = "x86.avx512.sgemm_6x64"
WIDE_TILE_MAX_K = 2048
# ... and N at least four of its tiles wide (its column blocks are twice as wide as the 12 x 32
# tile's, half as many to share among threads), and W (N, K) not packed on every call: W packs
# into 32-wide panels by the AVX-512 register transpose, into 64-wide ones by a plain copy.
WIDE_TILE_MIN_N = 256


def _wide_tile(name: str, shape, constant_b: bool) -> str:
    """`name`, or the 6 x 64 tile in place of the 12 x 32 one where it wins (see WIDE_TILE)."""
    k, n = as_int(shape.k), as_int(shape.n)
    short_k = k is not None and k <= WIDE_TILE_MAX_K
    packs_w_per_call = shape.b_transposed and not constant_b
    if (name == "x86.avx512.sgemm_12x32" and (short_k or constant_b) and not packs_w_per_call
            and n is not None and n >= WIDE_TILE_MIN_N and fits(WIDE_TILE, shape)
            and get_intrin(WIDE_TILE).available()):
        return WIDE_TILE
    return name


# The 6 x 64 tile's own blocks: KC at most 1024 (a 256 KiB panel of B), NC at most 256, MC 48.
# N = 2048, one thread, A/B in one process against the 12 x 32 tile's defaults (160.6-161.0
# GFLOP/s): (MC, NC, KC) = (96, 512, 2048), the general rule's, 156.4-157.3; (96, 256, 1024)
# 163.8; (96, 128, 1024) 164.5-165.8; (48, 256, 1024) 165.9-166.4.
_WIDE_KC, _WIDE_NC, _WIDE_MC = 1024, 256, 48


# Rows of a symbolic M are taken in blocks of this many, rounded up to a multiple of MR (see
# _fp32_tiling): 516 for the 12-row tile, so that 512 rows (a transformer's sequence) are one block
# rather than 504 + 8, which read all of B a second time for 8 rows.  The graph benchmark's
# transformer block (seq 512, one thread of an AVX-512 Xeon, A/B in one process): kernels 118.7 ->
# 114.7 ms.
_SYMBOLIC_ROWS = 512

# The KC x NR panel of B a tile streams from L2: at most 512 KiB (KC 4096 for 32-wide tiles, 8192
# for 16-wide ones; see _fp32_tiling).
_PANEL_BYTES = 512 << 10


def _fp32_tiling(intrin: str, tiling: Tiling, n, k, m=None) -> Tiling:
    """The default tiling of an fp32 tile intrinsic (a Tiling given by the caller is kept).

    KC: whole K while the tile's KC x NR panel of B is at most 512 KiB (K up to 4096 for the
    32-wide tiles, 8192 for the 16-wide ones).  Whole-K slabs load and store each C tile once,
    and with the kernels' init forms (spec/tensorize.md) never load it: the first slab writes C
    without reading it, every later one loads and stores it again.  On a Xeon with AVX-512 (one
    core, alternating in one process, init forms in place): N = 2048 KC 1024 -> 2048 152.2 ->
    158.2 and 153.1 -> 156.4 GFLOP/s; 256 x 1024 x 4096 (a linear layer with its residual, rows
    symbolic) KC 1024 -> 4096 128.0 -> 130.9 (NC 256, as chosen below; 133.4 with NC 128).
    Before the init forms, KC 512 gave 139.5 against 151.8 for 1024 at N = 2048 and 2048 was
    within noise of 1024; the AVX2 tile went from 88.2 to 93.3 at N = 2048 with KC 512 -> 1024
    and to 96.5-99.0 with 2048; on Zen 5 (1 MiB L2) whole-K slabs were 1.5-2% faster at N =
    1024 and 2048 than KC 512.
    NC: the KC x NC block of B each thread packs takes at most a quarter of L2 (read at run
    time; A's MC x KC block and the C tiles keep the rest), unless that makes more than four
    column blocks: each column block reads all of A again (in place), so NC is at least N / 4;
    at least four tiles wide, at most 512.  The 12x32 tile on one core of a Xeon with 2 MiB L2,
    KC = 1024, NC = 128 / 256 / 512: N = 1024 154-156 / 150-153 / 147-149 GFLOP/s (the block
    in L2 wins), N = 2048 144-146 / 147-149 / 150-152 (A's 16 MiB read 16 / 8 / 4 times
    loses); the AVX2 tile was within noise of each at both sizes.
    MC: 96 rows (a multiple of 6, 8 and 12): 48 and 96 were within noise, 192 5% slower.
    Symbolic rows (AVX-512): 512-row blocks (rounded up to a multiple of MR) around the parallel
    column loop (see tiled_matmul),
    so a few hundred rows pack B once; A's block is read in place.  On the graph benchmark's mlp
    (batch 256, no BLAS) on 2 threads 21.6 ms, against 22.6 with threads over 64-row blocks and
    27.7 over 96-row ones (3 blocks of 96 for 2 threads); on one thread 38.5 against 40.3.  Its
    transformer block (seq 512) ran 2-3% slower with 256-row blocks than with sgemm, 2-3% faster
    with 512.
    """
    if tiling != Tiling():
        return tiling
    if intrin == AVX2_TILE:
        return _avx2_tiling(n, k, m)
    _, nr, _ = tile_of(intrin)
    wide = intrin.startswith(WIDE_TILE)
    kc_max = _WIDE_KC if wide else _PANEL_BYTES // (4 * nr)
    kc = k_tile(k, kc_max, 1) or kc_max
    _, l2 = cpu.cache_sizes()
    in_l2 = l2 // 4 // (4 * kc) // nr * nr
    columns = as_int(n)
    few_passes = (columns // 4) // nr * nr if columns is not None else 0
    nc = max(4 * nr, min(_WIDE_NC if wide else 512, max(in_l2, few_passes)))
    mr, _, _ = tile_of(intrin)
    return Tiling(mc=_WIDE_MC if wide else 96, nc=nc, kc=kc, mc_symbolic=-(-_SYMBOLIC_ROWS // mr) * mr if "avx512" in intrin else None)


# ----------------------------------------------------------------------------- AVX2 6 x 16 tile
# Its own blocks (the AVX-512 tiles keep theirs above).  A tile reads six rows of A (24 bytes a k)
# and B's 16-wide panel (64 bytes a k); with A read in place at a row stride that is a multiple
# of 4 KiB those six rows share one set of a 32 KiB 8-way L1, and the tile waits on A.
#
# M constant and A past half of L2 (threads over column blocks): A is packed into 6-row panels
# (one stream a tile) and the blocks take BLIS's shape for this tile: a row block of
# _AVX2_PANEL_MC rows by KC (at most 1024: 192 KiB of panels) stays in L2 while the tiles sweep
# the column block's panels, each KC x 16 panel of B (64 KiB) read from L2 by the block's eight
# row tiles; NC 512 (the thread's KC x NC block of B in L3).  The 2 cores of a Zen 3 host, 2
# threads, alternating with numpy in one process in rotated order, 3 calls a round, GFLOP/s
# median / best: N = 2048 (8 rounds) 100.8 / 117.8 -> 118.1 / 136.6, numpy 129.0 / 137.5; N =
# 1024 (12) 107.9 / 130.5 -> 105.2 / 129.2, numpy 110.8 / 139.1; N = 512 (20) 75.9 / 119.6 ->
# 93.1 / 133.7, numpy 82.5 / 131.1.  Other blocks at N = 2048 (MC, KC; median): (24 or 36,
# 1024) within 1% of (48, 1024); (66, 512) -3%; (36, 2048) -6%; (132, 512) -7%; (36, 1024) with
# A in place -13%.
#
# Otherwise (a small A, or M symbolic: the graph's linear layers, threads over column blocks
# inside serial row blocks of 516) A is read in place and the row tiles run outside the panels
# instead: a tile's 6 x KC rows of A (KC at most 1024: at most 24 KiB) are read again for each
# panel of the block while they are still in L1 or L2, and the KC x NC block of B takes at most
# half of L2, so that B, the wider stream, comes from L2 and no panel from L3 (see the spec for
# what lost).  The tile names its C lines to the cache before its K loop
# (kernels_fp32.sgemm_tile_source, c_early) since the K / KC slabs sweep C more than once.
AVX2_TILE = "x86.avx2.sgemm_6x16"
_AVX2_KC = 1024
_AVX2_PANEL_MC = 48
_AVX2_PANEL_NC = 512


def _avx2_tiling(n, k, m=None) -> Tiling:
    """The AVX2 tile's blocks: KC the largest divisor of K up to 1024 (whole K where K has no
    divisor of at least half that, so that an odd K does not get tiny slabs).  A constant M whose
    A takes more than half of L2: MC 48, NC 512 (A packed into panels, see AVX2_TILE).  Otherwise
    A is read in place: MC 96, NC from half of L2 (B's KC x NC block; at least four tiles wide,
    at most 512), and a symbolic M in blocks of 516 rows around the parallel column loop, as the
    AVX-512 tiles (each thread packs its own blocks of B in cache instead of all of B going
    through memory before the call's row blocks).
    The benchmark's linear layers under the AVX2 feature set, rows symbolic, one thread, A/B in
    one process: 256 x 1024 x 4096 + residual 29.35 ms -> 25.33 (row blocks of 516) -> 23.24
    (and the row tiles outside), numpy 24.21; 256 x 4096 x 1024 + gelu 29.70 -> 26.37 -> 24.80,
    numpy 28.69."""
    mr, nr, _ = tile_of(AVX2_TILE)
    whole = k_tile(k, _PANEL_BYTES // (4 * nr), 1)
    kc = k_tile(k, _AVX2_KC, 1)
    if kc is None or whole is None or 2 * kc < min(whole, _AVX2_KC):
        kc = whole or _AVX2_KC
    symbolic = -(-_SYMBOLIC_ROWS // mr) * mr
    if _avx2_a_past_l2(m, k):
        return Tiling(mc=_AVX2_PANEL_MC, nc=_AVX2_PANEL_NC, kc=kc, mc_symbolic=symbolic)
    _, l2 = cpu.cache_sizes()
    nc = max(4 * nr, min(512, l2 // 2 // (4 * kc) // nr * nr))
    return Tiling(mc=96, nc=nc, kc=kc, mc_symbolic=symbolic)


def _avx2_a_past_l2(m, k) -> bool:
    """Whether A (M x K, both constant) takes more than half of L2: the AVX2 tile then reads it
    from panels (see AVX2_TILE); A read in place stays in cache otherwise."""
    rows, depth = as_int(m), as_int(k)
    return rows is not None and depth is not None and rows * depth * 4 > cpu.cache_sizes()[1] // 2


def _avx2_panels(intrin: str, shape, constant_b: bool, by_columns: bool) -> bool:
    """Whether the AVX2 tile packs A into panels by default: threads over column blocks, B packed
    in the call, A past L2 (see AVX2_TILE)."""
    return intrin == AVX2_TILE and by_columns and not constant_b and _avx2_a_past_l2(shape.m, shape.k)


def _row_tiles_outside(intrin: str, streams_b: bool) -> bool:
    """Whether the row tiles of a column block run outside its panels (see AVX2_TILE): the AVX2
    tile reading A in place (its panel form is another intrinsic), B packed in the call."""
    return intrin == AVX2_TILE and not streams_b
# ----------------------------------------------------------------------------- end of the AVX2 tile


def tiled_matmul(sch: Schedule, block: str, intrin: str, tiling: Tiling, *, pack_a: bool, pack_b: bool,
                 parallel: bool, recipe: str, b_layout: str = "rows") -> Schedule:
    """The recipe of the module docstring for any matmul tile intrinsic (B layout: rows/pairs/quads)."""
    mr, nr, k_multiple = tile_of(intrin)
    blk = sch.get_block(block)
    shape = matmul_shape(sch.get(blk), recipe)
    if not divides(shape.n, nr):
        raise ScheduleError(f"{recipe}: N = {shape.n} is not a multiple of the tile width {nr} of {intrin}",
                            hint="pad N, or use an intrinsic with a narrower tile")
    kc = k_tile(shape.k, tiling.kc, k_multiple)
    if kc is None:
        raise ScheduleError(f"{recipe}: K = {shape.k} has no tile size that is a multiple of {k_multiple} "
                            f"(needed by {intrin})")
    preferred_mc = tiling.mc if as_int(shape.m) is not None else (tiling.mc_symbolic or tiling.mc)
    mc = _row_block(shape.m, mr, preferred_mc, takes_partial_rows(intrin), recipe, intrin)
    rows = as_int(shape.m)
    constant_b = pack_b and _is_constant_param(sch, blk, shape.b_index)
    nc = _column_block(as_int(shape.n), nr, tiling.nc, narrow_ok=_a_block_cached(shape, mc))

    threads = cpu.openmp_threads()
    # Threads take whole column blocks (NC wide) when N / NC is a multiple of the thread count:
    # each packs its own KC x NC blocks of B (compute_at under the slab loop: one parallel
    # region, the packed block lands in the cache of the core that uses it) and the iterations
    # provably write disjoint parts of C.  Otherwise, with at least two row blocks per thread or
    # a symbolic M, threads take row blocks (MC high), all reading one packed B.  Either way the
    # blocks are handed out dynamically: a thread the OS deschedules on a shared machine no
    # longer holds up the call.  (The legality check relaxes over the loops inside the parallel
    # one, which must then be constant: a symbolic M cannot sit inside a parallel column loop.)
    #
    # With a symbolic M and a row block given for that case (mc_symbolic), the row blocks run
    # serially outside the parallel column loop instead, so that each thread still packs its
    # own blocks of B in cache rather than all of B going through memory in a pass of its own
    # (the graph benchmark's mlp, batch 256 in one row block, 2 threads: 21.6 ms against 22.6
    # for threads over 64-row blocks; OpenBLAS 22.5).
    balanced_columns = (as_int(shape.n) // nc) % threads == 0
    by_columns = parallel and rows is not None and balanced_columns
    rows_outside = parallel and rows is None and balanced_columns and tiling.mc_symbolic is not None
    by_rows = parallel and not by_columns and not rows_outside and (rows is None or -(-rows // mc) >= 2 * threads)
    # Where that leaves a call worth splitting with fewer than two tasks per thread (a few rows,
    # or a symbolic M called with a few rows: one row block), the tasks are the (row block x
    # column block) grid instead, one parallel loop over both (fused, rows outer), B packed
    # before it as for row blocks, and NC (then MC) narrowed until a call has 2 x threads tasks
    # (see _grid_blocks).  A thread packing its own blocks of B keeps doing so where that gives
    # each thread a block; a B packed before the call has nothing to lose.
    grid = parallel and threads > 1 and _wants_grid(shape, mc, nc, threads, constant_b, by_columns, rows_outside)
    if grid:
        by_columns = rows_outside = by_rows = False
        mc, nc = _grid_blocks(shape, mr, nr, mc, nc, threads, takes_partial_rows(intrin))

    # A B the caller passes as a constant on every call (see below) streams from L3 or memory
    # while the tiles run.  Where A's row block stays in L2 (_streams_b), the tiles then read A
    # from MR-row panels (one stream instead of MR rows) and name the next panel of B to the cache
    # as they go (the tile's stream form).
    streams_b = constant_b and _streams_b(shape, mc, mr)
    if pack_a is None:
        wants_panels = streams_b or _avx2_panels(intrin, shape, constant_b, by_columns)
        pack_a = "panels" if wants_panels and intrin in PANEL_INTRINS else False
    # With a symbolic M the panels are ceildiv(M, MR), the last one padded with zeros by a fill
    # of at most MR - 1 rows (transform_layout splits the symbolic row dim).
    if pack_a == "panels":
        if intrin not in PANEL_INTRINS:
            raise ScheduleError(f"{recipe}: pack_a='panels' needs a tile intrinsic with a panel form "
                                f"({sorted(PANEL_INTRINS)}), got {intrin}")
        intrin = PANEL_INTRINS[intrin]
        packed_a = sch.cache_read(blk, shape.a_index, "global")
        sch.transform_layout(packed_a, ("write", 0), lambda i, k: (i // mr, k, i % mr),
                             pad_value=0.0 if rows is None or rows % mr else None)
        _schedule_panel_copy(sch, packed_a, parallel, mr)
    elif pack_a and kc < as_int(shape.k) and rows is not None:
        packed_a = sch.cache_read(blk, shape.a_index, "global")
        sch.transform_layout(packed_a, ("write", 0), lambda i, k: (k // kc, i, k % kc))
        _schedule_copy(sch, packed_a, parallel, kc)
    # Packed inside the parallel loop, each thread's KC x NC block of B is a buffer of that size,
    # allocated where it is filled and used ("local": the C target's compaction places and
    # shrinks it; the block index leads the layout so that only leading dimensions shrink, see
    # refcomp.loops.passes.compact_buffers), not a slice of a buffer as large as B: a block
    # written to fresh memory for each slab cost 8% at N = 2048 (one thread, 131 -> 141
    # GFLOP/s).  W (N, K) is packed there by the register transpose's relocatable form (its
    # strides as address distances, so compaction still shrinks the buffer to one block; the
    # plain form kept B's size, which lost to the 16-lane gather copy: one thread, 256 x 4096 x
    # 1024, 118 -> 128 GFLOP/s); against that gather copy the graph benchmark's linear + gelu
    # kernel (batch 256 symbolic, one thread of an AVX-512 Xeon, best of 6) went 16.85 -> 16.24
    # ms and its mlp 66.3 -> 63.8 ms.
    #
    # A B the caller passes as a constant on every call (the PrimFunc attr "constant_params" lists
    # its parameter index: the graph's linears with Constant weights) is packed by a stage of its
    # own before the kernel, into a global buffer in the same block-major layout, by a plain copy
    # (no tile kernel): graph.build's fold_packed_weights then runs that stage once at build time
    # and the kernel takes the packed weight as a parameter (the graph benchmark's mlp: 16 MiB of
    # W no longer read and packed on every call).
    in_thread = by_columns or rows_outside
    per_block = in_thread and not constant_b
    packed_b = sch.cache_read(blk, shape.b_index, "local" if per_block else "global") if pack_b else None

    i, j, k = sch.get_loops(blk)
    i0, i1, i2 = sch.split(i, [None, mc // mr, mr])
    j0, j1, j2 = sch.split(j, [None, nc // nr, nr])
    k0, k1 = sch.split(k, [None, kc]) if kc < as_int(shape.k) else [None, k]
    slabs = [k0] if k0 is not None else []
    if rows_outside and _row_tiles_outside(intrin, streams_b):
        sch.reorder(i0, j0, *slabs, i1, j1, i2, j2, k1)  # i0 serial, j0 parallel
    elif by_rows or rows_outside or grid:
        sch.reorder(i0, j0, *slabs, j1, i1, i2, j2, k1)  # rows outside: i0 serial, j0 parallel
    elif _row_tiles_outside(intrin, streams_b):
        sch.reorder(j0, *slabs, i0, i1, j1, i2, j2, k1)
    else:
        sch.reorder(j0, *slabs, i0, j1, i1, i2, j2, k1)
    if shape.b_transposed and packed_b is None:
        raise ScheduleError(f"{recipe}: B read as W[j, k] needs pack_b (the kernel reads k-major panels)")
    if packed_b is not None:
        if per_block:
            sch.compute_at(packed_b, slabs[0] if slabs else j0)
        blocks = (nc, kc) if in_thread else None
        sch.transform_layout(packed_b, ("write", 0), _b_panels(nr, b_layout, shape.b_transposed, blocks))
        copy_in_parallel = parallel and not per_block
        if shape.b_transposed:
            _schedule_transposed_copy(sch, packed_b, blk, copy_in_parallel, nr, _GROUP.get(b_layout, 1),
                                      registers=not per_block, plain=constant_b)
        elif b_layout == "rows":
            _schedule_copy(sch, packed_b, copy_in_parallel, nr)
        else:
            _schedule_grouped_copy(sch, packed_b, copy_in_parallel, nr, _GROUP[b_layout])
    # tensorize blockizes the tile; the reduction's init moves to the tile block, and where the
    # intrinsic has an init form (the fp32 tiles) into the kernel: the first k slab writes its C
    # tile without reading it (N = 1024, one thread: 150.5 -> 155.2 GFLOP/s); other tiles zero
    # the C tile right before the first k slab (in cache) instead of in a separate pass.
    if streams_b and stream_form(intrin) is not None:
        # B was packed before the call (a constant weight): on every call it comes from L3 or
        # memory, so the tile's stream form names the next panel to the cache while the row
        # tiles of this one compute (kernels_fp32.sgemm_tile_source)
        intrin = stream_form(intrin)
    elif unrolled_form(intrin) is not None:
        # B packed on this call (or small enough to stay cached): the tile's unrolled form, its k
        # loop four k a step with no software prefetch (the AVX-512 6x64 tile, see
        # kernels_fp32.SGEMM_AVX512_6X64_UNROLLED: 3-6% faster at N = 512, 1024, 2048)
        intrin = unrolled_form(intrin)
    sch.tensorize(i2, intrin)
    if grid:
        tasks = sch.fuse(i0, j0)
        sch.parallel(tasks)
        sch.annotate(tasks, "omp_schedule", "dynamic")
    elif by_columns or rows_outside:
        sch.parallel(j0)
        sch.annotate(j0, "omp_schedule", "dynamic")
    elif by_rows:
        sch.parallel(i0)
        sch.annotate(i0, "omp_schedule", "dynamic")
    elif parallel:
        sch.parallel(i0)  # few row blocks and unbalanced column blocks
    return sch


def _streams_b(shape, mc: int, mr: int) -> bool:
    """Whether the tiles of a matmul whose B was packed before the call (a constant weight, read
    from L3 or memory on every call) should read A from MR-row panels and name the next panel of
    B to the cache as they run (the tile's stream form): where A's row block (MC rows, or all of
    a constant M, by the whole K) fits in L2, so that B is the one operand coming from further
    out.  The graph benchmark's mlp (batch 256 symbolic, K = 1024 / 4096, one thread of an
    AVX-512 Xeon with 2 MiB L2, best of 3 A/B): linear + gelu (A 1 MiB) 15.2-15.4 -> 13.9-14.1
    ms; linear + residual (A 4 MiB) 14.2-14.7 -> 15.4 with both, 15.0-15.2 with the stream form
    alone, 15.3-15.6 with the panels alone: A then streams from L3 too, and the panel copy of 4 MiB
    and the hint's traffic only add to it."""
    rows = as_int(shape.m)
    block_rows = min(mc, _SYMBOLIC_ROWS) if rows is None else min(mc, -(-rows // mr) * mr)
    k, n = as_int(shape.k), as_int(shape.n)
    _, l2 = cpu.cache_sizes()
    # and only where B itself is too big to stay in L2 between calls: a transformer's small
    # weights (ViT / BERT of the models benchmark, hidden 192) stay cached, and there the panel
    # copy and the hints only cost (ViT 2 layers 0.87 -> 1.05 ms with them, batch 2)
    return k is not None and n is not None and block_rows * k * 4 <= l2 and k * n * 4 > l2 // 2


def _is_constant_param(sch: Schedule, blk: BlockRV, read_index: int) -> bool:
    """Whether the buffer of the block's read `read_index` is a parameter the function's attr
    "constant_params" lists (by position): every caller passes a constant there."""
    func = sch.func
    constant = func.attrs.get("constant_params", ())
    buffer = sch.get(blk).reads[read_index].buffer
    return any(index < len(func.params) and func.params[index] is buffer for index in constant)


def _pick(sch: Schedule, block: str, candidates: list[str], recipe: str) -> str:
    """The first intrinsic of `candidates` this CPU runs that tiles the block's shape."""
    return pick_intrin(candidates, recipe, matmul_shape(sch.get(sch.get_block(block)), recipe))


def _column_block(n: int, nr: int, preferred: int, narrow_ok: bool = False) -> int:
    """NC: a multiple of NR dividing N, near `preferred`, giving a multiple of the thread count of
    column blocks when some such size is at least half the preferred one (any size when
    `narrow_ok`: A's row block stays in cache, so reading it once more per column block costs
    little), and at least two blocks per thread when that is possible too (so dynamic scheduling
    has something to move)."""
    threads = cpu.openmp_threads()
    sizes = [nc for nc in range(nr, n + 1, nr) if n % nc == 0]
    fitting = [nc for nc in sizes if nc <= max(preferred, nr)]
    balanced = [nc for nc in fitting if (n // nc) % threads == 0 and (narrow_ok or 2 * nc >= min(preferred, n))]
    several = [nc for nc in balanced if n // nc >= 2 * threads]
    return max(several or balanced or fitting)


# A product is split into tasks for the threads only where a call does at least this many flops
# (about 15 us on one core at 130 GFLOP/s; an OpenMP fork, join and a few dynamic hand-outs cost
# a few us), counting SMALL_CALL_ROWS rows where M is symbolic: a decode step's or a small batch's
# call, the one that most needs its tasks cut fine.
SPLIT_MIN_FLOPS = 1 << 21
SMALL_CALL_ROWS = 32


def _a_block_cached(shape, mc: int) -> bool:
    """Whether A's row block (MC rows, or all of a constant M, by the whole K) takes at most half
    of L2: then each column block reads it from cache, and narrow column blocks cost little."""
    rows, k = as_int(shape.m), as_int(shape.k)
    block_rows = mc if rows is None else min(mc, rows)
    return k is not None and block_rows * k * 4 <= cpu.cache_sizes()[1] // 2


def _wants_grid(shape, mc: int, nc: int, threads: int, constant_b: bool, by_columns: bool,
                rows_outside: bool) -> bool:
    """Whether the (row block x column block) grid should replace the thread split tiled_matmul
    chose: the call is worth splitting (SPLIT_MIN_FLOPS) and that split gives it fewer than two
    tasks per thread, counting one row block for a symbolic M (a call of up to MC rows).  Column
    blocks whose threads pack their own blocks of B (B not a constant) are kept: each thread has
    one at least, and its packed block stays in its own cache."""
    rows, n, k = as_int(shape.m), as_int(shape.n), as_int(shape.k)
    call_rows = rows if rows is not None else SMALL_CALL_ROWS
    if k is not None and 2 * call_rows * n * k < SPLIT_MIN_FLOPS:
        return False
    if by_columns or rows_outside:
        return n // nc < 2 * threads and constant_b
    row_blocks = -(-rows // mc) if rows is not None else 1
    return row_blocks < 2 * threads  # the tasks are row blocks


def _grid_blocks(shape, mr: int, nr: int, mc: int, nc: int, threads: int, partial_ok: bool) -> tuple[int, int]:
    """(MC, NC) of the grid: NC the widest multiple of NR dividing N, at most `nc`, that gives a
    call (all of a constant M, SMALL_CALL_ROWS of a symbolic one) 2 x threads tasks; where even NR
    falls short, MC the widest multiple of MR (dividing M for a tile without partial rows) whose
    row blocks make up the rest, MR where none does.  A symbolic M keeps its row block wherever N
    alone gives the tasks, so that a large call still reads each block of B once per MC rows."""
    rows, n = as_int(shape.m), as_int(shape.n)
    want = 2 * threads
    row_blocks = -(-rows // mc) if rows is not None else 1
    sizes = [c for c in range(nr, n + 1, nr) if n % c == 0 and c <= max(nc, nr)]
    enough = [c for c in sizes if row_blocks * (n // c) >= want]
    nc = max(enough) if enough else min(sizes)
    if row_blocks * (n // nc) >= want:
        return mc, nc
    call_rows = rows if rows is not None else SMALL_CALL_ROWS
    need = -(-want // (n // nc))  # row blocks per call
    usable = [c for c in range(mr, mc + 1, mr) if partial_ok or rows is None or rows % c == 0] or [mc]
    return max((c for c in usable if -(-call_rows // c) >= need), default=min(usable)), nc


def _row_block(m, mr: int, preferred: int, partial_ok: bool, recipe: str, intrin: str) -> int:
    """MC: a multiple of MR near `preferred`; without partial-tile support it must divide M."""
    rows = as_int(m)
    mc = max(mr, preferred // mr * mr)
    if rows is None:
        if not partial_ok:
            raise ScheduleError(f"{recipe}: M = {m} is symbolic and {intrin} has no partial-tile form")
        return mc
    if partial_ok:
        return min(mc, -(-rows // mr) * mr)
    if rows % mr:
        raise ScheduleError(f"{recipe}: M = {rows} is not a multiple of the tile height {mr} of {intrin}",
                            hint="pad M, or use an intrinsic with partial tiles")
    while rows % mc:
        mc -= mr
    return mc


def _b_panels(nr: int, layout: str, transposed: bool = False, blocks: tuple[int, int] | None = None):
    """Index map packing B (K, N) into NR-wide column panels, in the layout the kernel reads.
    A transposed B, W (N, K), packs into the same panels: the map takes its indices as (j, k).
    With blocks = (NC, KC) the NC x KC block index leads: Bp[j // NC, k // KC, panel, ...]."""
    if transposed:
        panels = _b_panels(nr, layout, blocks=blocks)
        return lambda j, k: panels(k, j)
    if blocks is not None:
        nc, kc = blocks
        inner = _b_panels(nr, layout)
        return lambda k, j: (j // nc, k // kc) + tuple(inner(k % kc, j % nc))
    if layout == "rows":
        return lambda k, j: (j // nr, k, j % nr)
    if layout == "pairs":
        return lambda k, j: (j // nr, k // 2, j % nr, k % 2)
    if layout == "quads":
        return lambda k, j: (j // nr, k // 4, j % nr, k % 4)
    raise ValueError(f"unknown B layout {layout!r}")


def _schedule_copy(sch: Schedule, copy: BlockRV, parallel: bool, run: int) -> None:
    """Run a packing copy on all threads, moving `run` contiguous elements at a time in vectors.

    The copy reads its source row-major; `run` (the packed panel width, or the k slab) is how many
    consecutive source elements stay consecutive in the packed buffer, so the inner loop split
    off at 16 (or 8) lanes is a plain vector copy.
    """
    loops = sch.get_loops(copy)
    if parallel and loops:
        sch.parallel(loops[0])
        sch.annotate(loops[0], "omp_schedule", "dynamic")
    inner = loops[-1]
    extent = as_int(sch.get(inner).extent)
    for lanes in (16, 8):
        if run % lanes == 0 and extent is not None and extent % run == 0:
            # split as [extent / run, run / lanes, lanes] so that the packed index of each vector
            # is affine in the loops (k // run is the outermost loop, not a division to simplify)
            factors = [None, run // lanes, lanes] if run > lanes else [None, lanes]
            vector = sch.split(inner, factors)[-1]
            sch.vectorize(vector)
            return


def _schedule_panel_copy(sch: Schedule, copy: BlockRV, parallel: bool, mr: int) -> None:
    """Run the copy packing A (M, K) into MR-row panels Ap[i // MR, k, i % MR] in A's order, rows
    over the threads: one read stream per thread (ordering the copy by panel instead, MR read
    streams of A each 4 KiB apart when K is 1024, measured slower on Zen 3)."""
    i_loop = sch.get_loops(copy)[-2]
    if parallel:
        sch.parallel(i_loop)


_GROUP = {"pairs": 2, "quads": 4}


def _divisible(sch: Schedule, loop, factor: int) -> bool:
    extent = as_int(sch.get(loop).extent)
    return extent is not None and extent % factor == 0


def _schedule_transposed_copy(sch: Schedule, copy: BlockRV, product: BlockRV, parallel: bool, nr: int,
                              group: int, registers: bool = True, plain: bool = False) -> None:
    """Order the copy packing W (N, K) into panels Bp[j // NR, k (// g), j % NR (, k % g)] so that
    it writes the packed buffer in order: j // NR, k (// g), then j % NR (, k % g) innermost.

    Each inner run reads NR rows of W at one k (NR streams that each advance along k, so every
    cache line of W is used whole while the panel is built) and writes NR (* g) contiguous floats.
    Without groups the j % NR loop is vectorized (a gather at stride K, a contiguous store): 256 x 4096 x 1024 on
    2 Zen 5 threads went from 316 to 360 GFLOP/s against the scalar copy.  With `registers` (a
    copy of all of W before the parallel loop) 16 k-rows of a 32-wide panel are transposed in
    registers instead (a per-thread block by the transpose's relocatable form, see tiled_matmul;
    16-wide panels by the AVX2 16 x 8 form).  `plain` keeps the vectorized copy (no tile kernel: a
    stage fold_packed_weights evaluates).
    """
    shared = {sch.get(loop).loop_var for loop in sch.get_loops(product)}
    own = [loop for loop in sch.get_loops(copy) if sch.get(loop).loop_var not in shared]
    if len(own) == 1:
        # K = 1: compute_at made no loop of extent one, so the copy moved into a block of the
        # product's loops runs over j alone
        sch.vectorize(sch.split(own[0], [None, nr])[1])
        return
    j_loop, k_loop = own[-2:]
    j_outer, j_inner = sch.split(j_loop, [None, nr])
    if group > 1:
        k_outer, k_inner = sch.split(k_loop, [None, group])
        sch.reorder(j_outer, k_outer, j_inner, k_inner)
    elif not plain and nr == 32 and _divisible(sch, k_loop, 16) and transpose_intrin().available():
        # 16 k-rows of a panel at a time, transposed in registers; a per-thread block by the
        # relocatable form, so that the C target still shrinks it to one block
        k_outer, k_inner = sch.split(k_loop, [None, 16])
        sch.reorder(j_outer, k_outer, k_inner, j_inner)
        sch.tensorize(k_inner, TRANSPOSE_32X16 if registers else TRANSPOSE_32X16_AT)
    elif not plain and nr == 16 and _divisible(sch, k_loop, 8) and transpose_16x8_intrin().available():
        # the same for 16-wide panels (the AVX2 tile): 8 k-rows at a time, two 8 x 8 transposes
        k_outer, k_inner = sch.split(k_loop, [None, 8])
        sch.reorder(j_outer, k_outer, k_inner, j_inner)
        sch.tensorize(k_inner, TRANSPOSE_16X8_AT)
    else:
        sch.reorder(j_outer, k_loop, j_inner)
        sch.vectorize(j_inner)
    if parallel:
        sch.parallel(j_outer)
        sch.annotate(j_outer, "omp_schedule", "dynamic")


def _schedule_grouped_copy(sch: Schedule, copy: BlockRV, parallel: bool, nr: int, group: int) -> None:
    """Order the copy packing B (K, N) into pairs or quads, Bp[j // NR, k // g, j % NR, k % g],
    so that it writes the packed buffer in order: k // g, j // NR, then j % NR, k % g innermost.

    Split this way every packed index is affine in the loops (no division per element), and the
    two inner loops read g rows of B and interleave them into one contiguous NR * g run.
    """
    k_loop, j_loop = sch.get_loops(copy)[-2:]
    k_outer, k_inner = sch.split(k_loop, [None, group])
    j_outer, j_inner = sch.split(j_loop, [None, nr])
    sch.reorder(k_outer, j_outer, j_inner, k_inner)
    if parallel:
        sch.parallel(k_outer)
        sch.annotate(k_outer, "omp_schedule", "dynamic")


BF16_INTRINS = ["x86.amx.bf16gemm_32x32", "x86.avx512bf16.bf16gemm_8x32", "x86.avx2.bf16gemm_6x16"]
INT8_INTRINS = ["x86.amx.i8gemm_32x32", "x86.vnni.i8gemm_8x32", "x86.avx2.i8gemm_6x16"]


def matmul_bf16(func_or_sch: PrimFunc | Schedule, block: str = "C", *, intrin: str | None = None,
                tiling: Tiling = Tiling(), parallel: bool = True) -> Schedule:
    """bf16 x bf16 -> fp32 matmul on AMX tiles where the CPU has them, else AVX512-BF16, else AVX2 FMA."""
    from ..intrin.x86 import b_layout

    sch = as_schedule(func_or_sch)
    name = intrin or _pick(sch, block, BF16_INTRINS, "matmul_bf16")
    return tiled_matmul(sch, block, name, _low_precision_tiling(name, tiling), pack_a=False, pack_b=True,
                        parallel=parallel, recipe="matmul_bf16", b_layout=b_layout(name))


def matmul_int8(func_or_sch: PrimFunc | Schedule, block: str = "C", *, intrin: str | None = None,
                tiling: Tiling = Tiling(), parallel: bool = True) -> Schedule:
    """int8 x int8 -> int32 matmul on AMX, else AVX-512 VNNI, else AVX2 (all exact)."""
    from ..intrin.x86 import b_layout

    sch = as_schedule(func_or_sch)
    name = intrin or _pick(sch, block, INT8_INTRINS, "matmul_int8")
    return tiled_matmul(sch, block, name, _low_precision_tiling(name, tiling), pack_a=False, pack_b=True,
                        parallel=parallel, recipe="matmul_int8", b_layout=b_layout(name))


def _low_precision_tiling(intrin: str, tiling: Tiling) -> Tiling:
    # Narrow types fit twice (bf16) or four times (int8) the k per cache line; AMX tiles want
    # k in whole tiles (32 bf16 / 64 int8), so KC grows with the element size.
    if tiling != Tiling():
        return tiling
    if "amx" in intrin:
        return Tiling(mc=128, nc=256, kc=1024)
    return Tiling(mc=96, nc=512, kc=1024)
