"""GPU schedule recipes: ordinary Schedule programs that bind a te-built function to the GPU.

    sch = refcomp.Schedule(func)
    schedule_elementwise(sch, "B", threads=256)
    lib = refcomp.build(sch.func, target="cuda")

Each recipe only calls Schedule primitives, so every step is checked and traced like any other
schedule; the same function gives the same numbers on the CPU (simulation) and the GPU.

* `schedule_elementwise`: all loops of a spatial block fused, split by the block size, bound to
  blockIdx.x / threadIdx.x.
* `schedule_row_reduction`: a reduction over the last axis (max, sum) done *across threads*: the
  reduction loop is split so that thread t of the block for row i reduces elements t, t + T, ...
  (coalesced), the partial results go through `rfactor`, and a second kernel combines the T
  partials of each row.
* `schedule_softmax` / `schedule_layer_norm`: the stages of row softmax / layer norm, each
  reduction with `schedule_row_reduction` and each elementwise stage with `schedule_elementwise`.
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


def schedule_row_reduction(sch: Schedule, block: str | BlockRV, threads: int = 64) -> None:
    """Reduce the last axis of a (rows..., reduce) block across `threads` threads per row."""
    rv = sch.get_block(block) if isinstance(block, str) else block
    loops = sch.get_loops(rv)
    *rows, reduce = loops
    _, lane = sch.split(reduce, factors=[None, threads])
    partial = sch.rfactor(lane, 0)
    partial_loops = sch.get_loops(partial)
    row_loops, (serial, lane_loop) = partial_loops[:-2], partial_loops[-2:]
    sch.reorder(lane_loop, serial)
    row = sch.fuse(*row_loops) if len(row_loops) > 1 else row_loops[0]
    sch.bind(row, "blockIdx.x")
    sch.bind(lane_loop, "threadIdx.x")
    # The combine step: one thread per row adds up the `threads` partial results.
    final_loops = sch.get_loops(rv)
    final_rows = final_loops[:-1]
    final_row = sch.fuse(*final_rows) if len(final_rows) > 1 else final_rows[0]
    outer, inner = sch.split(final_row, factors=[None, 32])
    sch.bind(outer, "blockIdx.x")
    sch.bind(inner, "threadIdx.x")


def schedule_softmax(sch: Schedule, threads: int = 64, names=("M", "E", "S", "O")) -> None:
    """Row softmax built as max (M), exp (E), sum (S), divide (O) stages (see refcomp.loops.gpu_recipes)."""
    max_block, exp_block, sum_block, out_block = names
    schedule_row_reduction(sch, max_block, threads)
    schedule_elementwise(sch, exp_block, threads * 4)
    schedule_row_reduction(sch, sum_block, threads)
    schedule_elementwise(sch, out_block, threads * 4)


def schedule_layer_norm(sch: Schedule, threads: int = 64, names=("mean", "var", "out")) -> None:
    """Layer norm built as mean, variance (row reductions) and the normalising elementwise stage."""
    mean_block, var_block, out_block = names
    schedule_row_reduction(sch, mean_block, threads)
    schedule_row_reduction(sch, var_block, threads)
    schedule_elementwise(sch, out_block, threads * 4)


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
        fused = sch.fuse(*sch.get_loops(tile_block)[-2:])
        _, load_y, load_x = sch.split(fused, factors=[None, threads_y, threads_x])
        sch.bind(load_y, "threadIdx.y")
        sch.bind(load_x, "threadIdx.x")
