"""Matmul with a fused epilogue: D = gelu(A @ B + bias), the epilogue computed per cache block.

The matmul block is scheduled by the fp32 recipe; the epilogue block is moved with
reverse_compute_at under the loop just inside the parallel loop over (NC x MC) blocks of C (a
panel or a row block of the task, where C is final there), else under the parallel loop itself,
so each part of C is turned into D while it is still in cache, by the thread that computed it,
instead of in a second pass over memory.  Its innermost loop is vectorized (the inline vector
tanh, libmvec's erf).
Any elementwise epilogue over C works the same (bias + residual, say), and B may be read as
W[j, k] as a `linear` layer stores it.
"""
from __future__ import annotations

from ...ast import PrimFunc, as_int
from ...errors import RefcompError
from ..primitives.cross_thread import carries_reduction
from ..schedule import Schedule
from .matmul import Tiling, as_schedule, matmul_fp32


def matmul_bias_gelu(func_or_sch: PrimFunc | Schedule, matmul_block: str = "C", epilogue_block: str = "D",
                     *, intrin: str | None = None, tiling: Tiling = Tiling(), parallel: bool = True,
                     inline: tuple[str, ...] = ()) -> Schedule:
    """Schedule `epilogue_block` (elementwise over C) fused into the blocks of the matmul recipe.

    `inline` names elementwise blocks between the matmul and the epilogue (say a bias add kept as
    its own stage) to fold into the epilogue first.
    """
    sch = as_schedule(func_or_sch)
    for name in inline:
        sch.compute_inline(sch.get_block(name))
    matmul_fp32(sch, matmul_block, intrin=intrin, tiling=tiling, parallel=parallel)
    loops = sch.get_loops(sch.get_block(matmul_block + "_o"))
    # under the parallel loop over blocks of C (the first loop, unless rows run outside it), and
    # one loop further in where C is final there (no K slab loop between): the epilogue then runs
    # over each panel (or row block) of the task while it is in cache, not over the task's whole
    # block after its last tile.  The models benchmark, A/B in one process (the GELU or residual
    # epilogues of the transformers' products, Zen 3, 2 threads): ViT 4.5%, GPT-2 3.6%, BERT 2.4%
    # faster.
    block_loop = next((l for l in loops if sch.get(l).kind == "parallel"), loops[0])
    epilogue = sch.get_block(epilogue_block)
    position = loops.index(block_loop)
    inner = loops[position + 1] if position + 1 < len(loops) else None
    placed = False
    # not under a K slab loop: the primitive would take it and run D once per slab
    if inner is not None and not carries_reduction(sch.get(inner)):
        try:
            sch.reverse_compute_at(epilogue, inner)
            placed = True
        except RefcompError:
            pass  # refused: under the block loop, below
    if not placed:
        sch.reverse_compute_at(epilogue, block_loop)
    loops = sch.get_loops(epilogue)
    inner = loops[-1]
    extent = as_int(sch.get(inner).extent)
    if extent is not None and extent % 8 == 0:
        _, lanes = sch.split(inner, [None, 16 if extent % 16 == 0 else 8])
        sch.vectorize(lanes)
    return sch

