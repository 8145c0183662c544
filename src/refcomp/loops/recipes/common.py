"""Helpers shared by the schedule recipes: finding a matmul block's operands, choosing tile sizes."""
from __future__ import annotations

from dataclasses import dataclass

from ...ast import Block, BufferLoad, BufferStore, Cast, IntImm, Mul, PrimExpr, as_int, post_order_visit
from ...errors import ScheduleError
from ..intrin import get as get_intrin
from ..intrin import x86


@dataclass(frozen=True)
class MatmulShape:
    """The operands of a block computing C[i, j] (+)= A[i, k] * B[k, j] (or * W[j, k]): read
    positions and extents."""

    a_index: int  # position of A in block.reads
    b_index: int  # position of B in block.reads
    m: PrimExpr
    n: PrimExpr
    k: PrimExpr
    b_transposed: bool = False  # B is read as W[j, k] (C = A @ W^T, a `linear` layer's weight)


def matmul_shape(block: Block, recipe: str) -> MatmulShape:
    """Recognise C[i, j] = C[i, j] + cast?(A[i, k]) * cast?(B[k, j]) with iters (S, S, R); B may
    also be read as W[j, k] (b_transposed)."""
    kinds = [iv.kind for iv in block.iter_vars]
    if kinds != ["spatial", "spatial", "reduce"] or not isinstance(block.body, BufferStore):
        raise ScheduleError(f"{recipe}: block {block.name!r} is not a matmul (iters S, S, R and one store); "
                            f"its iters are {kinds}", spot=block)
    vi, vj, vk = (iv.var for iv in block.iter_vars)
    loads: list[BufferLoad] = []

    def take(node) -> None:
        if isinstance(node, Mul):
            for side in (node.a, node.b):
                inner = side.value if isinstance(side, Cast) else side
                if isinstance(inner, BufferLoad):
                    loads.append(inner)

    post_order_visit(block.body.value, take)
    a = next((l for l in loads if _is(l.indices, vi, vk)), None)
    b = next((l for l in loads if _is(l.indices, vk, vj)), None)
    transposed = b is None
    if transposed:
        b = next((l for l in loads if l is not a and _is(l.indices, vj, vk)), None)
    if a is None or b is None:
        raise ScheduleError(f"{recipe}: block {block.name!r} does not read A[i, k] and B[k, j] (or W[j, k])",
                            spot=block)
    names = [r.buffer for r in block.reads]
    if transposed and a.buffer is b.buffer:
        raise ScheduleError(f"{recipe}: block {block.name!r} reads one buffer as both A and W (A @ A^T)",
                            spot=block)
    if a.buffer not in names or b.buffer not in names:
        raise ScheduleError(f"{recipe}: block {block.name!r} does not declare its reads of A and B", spot=block)
    return MatmulShape(names.index(a.buffer), names.index(b.buffer), block.iter_vars[0].dom.extent,
                       block.iter_vars[1].dom.extent, block.iter_vars[2].dom.extent, transposed)


def _is(indices, first, second) -> bool:
    return len(indices) == 2 and indices[0] is first and indices[1] is second


def k_tile(k_extent: PrimExpr, preferred: int, multiple: int) -> int | None:
    """The largest divisor of K that is <= preferred and a multiple of `multiple` (None: K symbolic)."""
    k = as_int(k_extent)
    if k is None:
        return None
    for candidate in range(min(preferred, k), 0, -1):
        if k % candidate == 0 and candidate % multiple == 0:
            return candidate
    return None


def pick_intrin(candidates: list[str], recipe: str, shape: MatmulShape | None = None) -> str:
    """The first candidate this CPU can run whose tile fits `shape` (N a multiple of its width, K of
    its k multiple, M of its height unless it takes partial tiles).

    When every runnable candidate is too wide for the shape, the first runnable one is returned,
    so the recipe reports why it does not fit.
    """
    runnable = [name for name in candidates if get_intrin(name).available()]
    for name in runnable:
        if shape is None or fits(name, shape):
            return name
    if runnable:
        return runnable[0]
    raise ScheduleError(f"{recipe}: this CPU runs none of the intrinsics {candidates}",
                        hint="pass intrin= explicitly to build for another machine")


def fits(intrin: str, shape: MatmulShape) -> bool:
    """Whether a matmul tile intrinsic can cover the whole of `shape` without padding."""
    mr, nr, k_multiple = tile_of(intrin)
    rows_ok = takes_partial_rows(intrin) or divides(shape.m, mr)
    return divides(shape.n, nr) and divides(shape.k, k_multiple) and rows_ok


def takes_partial_rows(intrin: str) -> bool:
    """Whether a tile intrinsic's implementation takes the row count (a last tile may be partial)."""
    return any(v.name == "m_rows" for v in get_intrin(intrin).impl.body.value.args if hasattr(v, "name"))


def tile_of(intrin: str) -> tuple[int, int, int]:
    """(MR, NR, k multiple) of a shipped matmul intrinsic."""
    return x86.tile_shape(intrin)


def divides(value: PrimExpr, factor: int) -> bool:
    v = as_int(value)
    return v is not None and v % factor == 0


__all__ = ["MatmulShape", "matmul_shape", "k_tile", "pick_intrin", "fits", "takes_partial_rows", "tile_of", "divides", "IntImm"]
