"""GPU schedule recipes: ordinary Schedule programs that bind a te-built function to the GPU.

    sch = refcomp.Schedule(func)
    schedule_elementwise(sch, "B", threads=256)
    lib = refcomp.build(sch.func, target="cuda")

Each recipe only calls Schedule primitives, so every step is checked and traced like any other
schedule; the same function gives the same numbers on the CPU (simulation) and the GPU.

* `schedule_elementwise`: all loops of a spatial block fused, split by the block size, bound to
  blockIdx.x / threadIdx.x.
* `schedule_row_reduction`: a reduction over the last axis (max, sum) split *across threads*:
  thread t of a row reduces elements t, t + T, ... (coalesced) into a partial result (`rfactor`).
* `schedule_softmax` / `schedule_layer_norm`: every stage of a row in one kernel, one block per
  row: the partial results in shared memory, combined by thread 0 (a one-iteration loop bound to
  threadIdx.x), elementwise stages spread over the threads, intermediates of a row in shared
  memory; the barriers between stages come from the CUDA backend's barrier placement.
* `schedule_matmul_tensor_core`: float16 / bfloat16 matmul with float32 accumulation, one 16 x 16
  tile per warp through the tensor-core intrinsics `cuda.wmma.{f16,bf16}_f32_16x16` (`tensorize`).
* `schedule_matmul`: C = A @ B with a block tile of (BM, BN), a thread tile of (TM, TN) held in
  registers (`cache_write` to "local"), and A/B tiles of depth BK staged through shared memory
  (`cache_read` + `compute_at`, loaded cooperatively by all threads of the block).
"""
from __future__ import annotations

from .schedule import BlockRV, Schedule


def schedule_elementwise(sch: Schedule, block: str | BlockRV, threads: int = 256) -> None:
    """Bind a spatial block: fuse its loops, split by `threads`, bind to blockIdx.x/threadIdx.x."""
    rv = sch.get_block(block) if isinstance(block, str) else block
    loops = sch.get_loops(rv)
    fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
    outer, inner = sch.split(fused, factors=[None, threads])
    sch.bind(outer, "blockIdx.x")
    sch.bind(inner, "threadIdx.x")


def schedule_row_reduction(sch: Schedule, block: str | BlockRV, threads: int = 64) -> BlockRV:
    """Split the last (reduce) axis of a block across `threads` threads: thread t of a row reduces
    elements t, t + T, ... (coalesced) into a partial result (`rfactor`); returns the partial block.

    The partial block's lane loop is bound to threadIdx.x.  The caller places both blocks (see
    `schedule_softmax`), and the combine step, left serial over the T partials, runs in one thread.
    """
    rv = sch.get_block(block) if isinstance(block, str) else block
    *_, reduce = sch.get_loops(rv)
    _, lane = sch.split(reduce, factors=[None, threads])
    return sch.rfactor(lane, 0)


def _bind_partial_and_combine(sch: Schedule, partial: BlockRV, combine: BlockRV) -> None:
    """Lane loop of the partial block -> threadIdx.x; the combine block runs in thread 0 only."""
    serial, lane = sch.get_loops(partial)[-2:]
    sch.reorder(lane, serial)
    sch.bind(lane, "threadIdx.x")
    sch.set_scope(partial, 0, "shared")
    sch.set_scope(combine, 0, "shared")
    single = sch.add_unit_loop(combine)  # a one-iteration loop bound to threadIdx.x: thread 0 only
    sch.bind(single, "threadIdx.x")


def _fused_rows(sch: Schedule, output: str, threads: int, reductions: list[str], elementwise: list[str],
                producers_in_reverse_order: list[str]) -> None:
    """One kernel per block of rows: every stage of a row computed by the block of that row."""
    partials = {name: schedule_row_reduction(sch, name, threads) for name in reductions}
    out = sch.get_block(output)
    row, col = sch.get_loops(out)
    sch.bind(row, "blockIdx.x")
    _, lane = sch.split(col, factors=[None, threads])
    sch.bind(lane, "threadIdx.x")
    for name in producers_in_reverse_order:
        sch.compute_at(sch.get_block(name), row)
    for name in reductions:
        _bind_partial_and_combine(sch, partials[name], sch.get_block(name))
    for name in elementwise:
        stage = sch.get_block(name)
        _, lane = sch.split(sch.get_loops(stage)[-1], factors=[None, threads])
        sch.bind(lane, "threadIdx.x")
        sch.set_scope(stage, 0, "shared")


def schedule_softmax(sch: Schedule, threads: int = 64, names=("M", "E", "S", "O")) -> None:
    """Row softmax (max M, exp E, sum S, divide O) fused into one kernel, one block per row.

    The row of E stays in shared memory, so each element of A is read once from global memory.
    """
    max_block, exp_block, sum_block, out_block = names
    _fused_rows(sch, out_block, threads, [max_block, sum_block], [exp_block],
                [sum_block, sum_block + "_rf", exp_block, max_block, max_block + "_rf"])


def schedule_layer_norm(sch: Schedule, threads: int = 64, names=("mean", "var", "out")) -> None:
    """Layer norm (row mean, row variance, normalise) fused into one kernel, one block per row."""
    mean_block, var_block, out_block = names
    _fused_rows(sch, out_block, threads, [mean_block, var_block], [],
                [var_block, var_block + "_rf", mean_block, mean_block + "_rf"])


def schedule_matmul(sch: Schedule, block: str | BlockRV = "C", tile=(32, 32, 8), thread_tile=(2, 2)) -> None:
    """Shared-memory tiled matmul for a block C[i, j] += A[i, k] * B[k, j] (module docstring)."""
    block_m, block_n, depth = tile
    thread_m, thread_n = thread_tile
    threads_y, threads_x = block_m // thread_m, block_n // thread_n
    rv = sch.get_block(block) if isinstance(block, str) else block
    i, j, k = sch.get_loops(rv)
    bi, ti, ii = sch.split(i, factors=[None, threads_y, thread_m])
    bj, tj, jj = sch.split(j, factors=[None, threads_x, thread_n])
    ko, ki = sch.split(k, factors=[None, depth])
    sch.reorder(bi, bj, ko, ti, tj, ki, ii, jj)
    sch.bind(bi, "blockIdx.y")
    sch.bind(bj, "blockIdx.x")
    sch.bind(ti, "threadIdx.y")
    sch.bind(tj, "threadIdx.x")
    accumulator = sch.cache_write(rv, 0, "local")
    sch.reverse_compute_at(accumulator, bj)
    row, col = sch.get_loops(accumulator)[-2:]
    row_thread, row_inner = sch.split(row, factors=[threads_y, thread_m])
    col_thread, col_inner = sch.split(col, factors=[threads_x, thread_n])
    sch.reorder(row_thread, col_thread, row_inner, col_inner)
    sch.bind(row_thread, "threadIdx.y")
    sch.bind(col_thread, "threadIdx.x")
    for operand in (0, 1):
        tile_block = sch.cache_read(rv, operand, "shared")
        sch.compute_at(tile_block, ko)
        # Rows of the tile over threadIdx.y, columns over threadIdx.x (no fused index, so each
        # thread's element is an affine function of its indices).
        tile_row, tile_col = sch.get_loops(tile_block)[-2:]
        rows, cols = (block_m, depth) if operand == 0 else (depth, block_n)
        _, load_y = sch.split(tile_row, factors=[None, min(threads_y, rows)])
        _, load_x = sch.split(tile_col, factors=[None, min(threads_x, cols)])
        row_outer = sch.get_loops(tile_block)[-4]
        sch.reorder(row_outer, sch.get_loops(tile_block)[-2], load_y, load_x)
        sch.bind(load_y, "threadIdx.y")
        sch.bind(load_x, "threadIdx.x")


def schedule_matmul_tensor_core(sch: Schedule, block: str | BlockRV = "C") -> None:
    """C[i, j] = sum_k f32(A[i, k]) * f32(B[k, j]) with float16 or bfloat16 A, B on tensor cores.

    One warp per block computes one 16 x 16 tile of C: the zeroing of the tile is spread over the
    32 threads (`decompose_reduction`, then a loop bound to threadIdx.x), the k loop of the tile
    becomes one warp-collective `cuda.wmma.<f16|bf16>_f32_16x16` call (`tensorize`).  Rows,
    columns and the k extent must be multiples of 16.
    """
    from .intrin import cuda_wmma

    rv = sch.get_block(block) if isinstance(block, str) else block
    operand_dtype = sch.get(rv).reads[0].buffer.dtype.name
    i, j, k = sch.get_loops(rv)
    i_tile, i_inner = sch.split(i, factors=[None, 16])
    j_tile, j_inner = sch.split(j, factors=[None, 16])
    sch.reorder(i_tile, j_tile, i_inner, j_inner, k)
    init = sch.decompose_reduction(rv, i_inner)
    sch.tensorize(i_inner, cuda_wmma.intrin_name(operand_dtype))
    sch.bind(i_tile, "blockIdx.y")
    sch.bind(j_tile, "blockIdx.x")
    zero_loop = sch.fuse(*sch.get_loops(init)[-2:])
    _, lane = sch.split(zero_loop, factors=[None, 32])
    sch.bind(lane, "threadIdx.x")
