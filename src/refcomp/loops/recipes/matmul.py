"""Matmul recipes: multi-level tiling around a tensorized register tile, packed operands, threads.

The structure is the one BLIS uses, written as ordinary schedule primitives:

    pack B into column panels   Bp[j // NR, k, j % NR]      (cache_read + transform_layout)
    pack A into k slabs         Ap[k // KC, i, k % KC]      (rows of a slab are KC apart, so the
                                                             MR rows a tile reads never alias in L1)
    for jc, ic in parallel:     NC x MC blocks of C         (fuse + parallel)
      C[block] = 0                                         (decompose_reduction)
      for pc:                   KC slabs of the reduction
        for jr:                 NR-wide panels: KC x NR of B stays in L1 across ...
          for ir:               ... the MR-high tiles: MC x KC of A stays in L2
            C[MR, NR] += A[MR, KC] * B[KC, NR]             (tensorize: a micro-kernel call)

Rows (M) may be symbolic or not divisible by MR: the last tile is partial and the kernel touches
only its rows.  N must be a multiple of NR; K of the intrinsic's k multiple.  Each recipe returns
the Schedule; the caller builds `sch.func`.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...ast import PrimFunc, as_int
from ...errors import ScheduleError
from ..schedule import BlockRV, Schedule
from .common import divides, k_tile, matmul_shape, pick_intrin, tile_of

FP32_INTRINS = ["x86.avx512.sgemm_8x32", "x86.avx2.sgemm_6x16"]


@dataclass(frozen=True)
class Tiling:
    """Cache-level tile sizes: MC rows and NC columns of C per parallel task, KC of the reduction."""

    mc: int = 96
    nc: int = 256
    kc: int = 256


def as_schedule(func_or_sch: PrimFunc | Schedule) -> Schedule:
    return func_or_sch if isinstance(func_or_sch, Schedule) else Schedule(func_or_sch)


def matmul_fp32(func_or_sch: PrimFunc | Schedule, block: str = "C", *, intrin: str | None = None,
                tiling: Tiling = Tiling(), pack_a: bool = True, pack_b: bool = True,
                parallel: bool = True) -> Schedule:
    """Schedule the fp32 matmul block `block` (C[i, j] += A[i, k] * B[k, j]) on an fp32 tile intrinsic."""
    sch = as_schedule(func_or_sch)
    name = intrin or pick_intrin(FP32_INTRINS, "matmul_fp32")
    return tiled_matmul(sch, block, name, tiling, pack_a=pack_a, pack_b=pack_b, parallel=parallel,
                        recipe="matmul_fp32")


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
    mc = max(mr, tiling.mc // mr * mr)
    nc = max(nr, tiling.nc // nr * nr)
    while not divides(shape.n, nc):
        nc -= nr

    if pack_b:
        packed_b = sch.cache_read(blk, shape.b_index, "global")
        sch.transform_layout(packed_b, ("write", 0), _b_panels(nr, b_layout))
        _schedule_copy(sch, packed_b, parallel)
    if pack_a and kc < as_int(shape.k):
        packed_a = sch.cache_read(blk, shape.a_index, "global")
        sch.transform_layout(packed_a, ("write", 0), lambda i, k: (k // kc, i, k % kc))
        _schedule_copy(sch, packed_a, parallel)

    i, j, k = sch.get_loops(blk)
    i0, i1, i2 = sch.split(i, [None, mc // mr, mr])
    j0, j1, j2 = sch.split(j, [None, nc // nr, nr])
    k_loops = sch.split(k, [None, kc]) if kc < as_int(shape.k) else [None, k]
    k0, k1 = k_loops
    order = [j0, i0] + ([k0] if k0 is not None else []) + [j1, i1, i2, j2, k1]
    sch.reorder(*order)
    outer = sch.fuse(j0, i0)
    if parallel:
        sch.parallel(outer)
    init = sch.decompose_reduction(blk, k0 if k0 is not None else j1)
    init_loops = sch.get_loops(init)
    sch.vectorize(init_loops[-1])
    sch.tensorize(i2, intrin)
    return sch


def _b_panels(nr: int, layout: str):
    """Index map packing B (K, N) into NR-wide column panels, in the layout the kernel reads."""
    if layout == "rows":
        return lambda k, j: (j // nr, k, j % nr)
    if layout == "pairs":
        return lambda k, j: (j // nr, k // 2, j % nr, k % 2)
    if layout == "quads":
        return lambda k, j: (j // nr, k // 4, j % nr, k % 4)
    raise ValueError(f"unknown B layout {layout!r}")


def _schedule_copy(sch: Schedule, copy: BlockRV, parallel: bool) -> None:
    """Run a packing copy on all threads, with its inner loop vectorized where it is a whole tile."""
    loops = sch.get_loops(copy)
    if parallel and loops:
        sch.parallel(loops[0])
