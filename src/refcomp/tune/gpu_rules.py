"""Schedule rules of the CUDA design space (`default_rules("cuda")`; spec/tune.md, "GPU design space").

* `GPURowReduction` (function-level): a row reduction (softmax, layer norm) in one kernel, one
  GPU block per row, each reduction a cross-thread reduction over a sampled thread count.
* `CrossThreadReduction`: a reduction block without operand reuse (a row sum): its spatial loops
  over blockIdx.x, its reduction split by a sampled thread count, the lane loop bound to
  threadIdx.x (lowered by the backend to a shared-memory tree or a warp shuffle).
* `GPUMultiLevelTiling("SSSRRSRS")`: a reduction block with operand reuse (matmul, batched
  matmul): each spatial loop split in 5 levels S0..S4 (blockIdx, virtual thread, threadIdx, two
  register levels), each reduction loop in 3 levels R0..R2; shared-memory copies of the inputs
  per R0 step, loaded by all threads of the block; a `local` write cache per thread.
* `AutoBind`: any block left unbound (an elementwise stage): its leading spatial loops fused,
  split by a sampled thread count, over blockIdx.x / threadIdx.x.

Every tile size and thread count is a sampled decision, and reaches the loops as the sampled
handle itself (a split factor), so the tile-size and categorical mutators change it; a sample that
breaks a GPU limit (1024 threads, 48 KiB of static shared memory) is refused with a ScheduleError
and dropped.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..ast import Block, BlockRealize, as_int, collect, free_vars
from ..errors import RefcompError, ScheduleError
from ..loops.schedule import BlockRV, Schedule
from .rules import _choose

MAX_THREADS = 1024
SHARED_BYTES = 48 * 1024  # static __shared__ memory per block


def _kinds(block: Block) -> list[str]:
    return [iv.kind for iv in block.iter_vars]


def _realize(sch: Schedule, block: Block) -> BlockRealize:
    return next(r for r in collect(sch.func.body, BlockRealize) if r.block.name == block.name)


def _is_bound(sch: Schedule, block: BlockRV) -> bool:
    return any(sch.get(loop).kind == "thread_binding" for loop in sch.get_loops(block))


def _plain_nest(sch: Schedule, block: BlockRV) -> bool:
    """The block's loops are one per iter var, each with a constant extent, none bound yet."""
    node = sch.get(block)
    loops = sch.get_loops(block)
    return (len(loops) == len(node.iter_vars) and all(as_int(sch.get(l).extent) is not None for l in loops)
            and not _is_bound(sch, block))


def has_reuse(sch: Schedule, block: BlockRV) -> bool:
    """Some buffer the block reads is indexed by fewer than all its spatial iter vars (a matmul's A
    does not use j): tiling can share loads between threads."""
    node = sch.get(block)
    spatial = {iv.var for iv in node.iter_vars if iv.kind == "spatial"}
    for read in node.reads:
        used = set()
        for r in read.region:
            used |= set(free_vars(r.min))
        if spatial - used and read.buffer is not node.writes[0].buffer:
            return True
    return False


def _thread_choices(extent: int, candidates: Sequence[int]) -> list[int]:
    found = [t for t in candidates if t <= max(extent, 1)]
    return found or [min(candidates)]


@dataclass
class CrossThreadReduction:
    """A reduction block without operand reuse: rows over blockIdx.x, the reduction over a sampled
    number of threads (a cross-thread reduction; preferred: 128 or the largest that fits)."""

    thread_choices: Sequence[int] = (32, 64, 128, 256, 512)
    preferred: int = 128
    restructures = True

    def apply(self, sch: Schedule, block: BlockRV) -> None:
        self._apply(sch, block, False)

    def apply_default(self, sch: Schedule, block: BlockRV) -> None:
        self._apply(sch, block, True)

    def _apply(self, sch: Schedule, block: BlockRV, default: bool) -> None:
        node = sch.get(block)
        kinds = _kinds(node)
        if "reduce" not in kinds or not _plain_nest(sch, block) or has_reuse(sch, block):
            return
        if any(k not in ("spatial", "reduce") for k in kinds) or node.init is None:
            return
        loops = sch.get_loops(block)
        spatial = [l for l, k in zip(loops, kinds) if k == "spatial"]
        reduce = [l for l, k in zip(loops, kinds) if k == "reduce"]
        sch.reorder(*spatial, *reduce)
        extent = 1
        for l in reduce:
            extent *= as_int(sch.get(l).extent)
        choices = _thread_choices(extent, self.thread_choices)
        threads = _choose(sch, choices, _nearest_at_most(choices, self.preferred), default)  # a handle: mutable
        fused_r = sch.fuse(*reduce) if len(reduce) > 1 else reduce[0]
        outer, lane = sch.split(fused_r, [None, threads])
        sch.reorder(lane, outer)
        if spatial:
            rows = sch.fuse(*spatial) if len(spatial) > 1 else spatial[0]
            sch.bind(rows, "blockIdx.x")
        sch.bind(lane, "threadIdx.x")


def _nearest_at_most(choices: Sequence[int], preferred: int) -> int:
    fitting = [c for c in choices if c <= preferred]
    return max(fitting) if fitting else min(choices)


@dataclass
class GPUMultiLevelTiling:
    """Multi-level tiling for the GPU, structure "SSSRRSRS" (spatial loops in 5 levels, reduction
    loops in 3).  The levels are S0 = blockIdx.x (fused), S1 = threadIdx.x (fused), S2 = the
    virtual-thread level, S3 and S4 in registers, in this order of the split (outer to inner);
    R0 steps the shared-memory tiles, R1 and R2 run inside a thread.  The loop order is
    S0 R0 S1 S2 R1 S3 R2 S4: R0 sits above the thread loops so that the input tiles it stages are
    loaded once per step by all threads of the block (the backend does not nest two loops bound
    to one axis).  The backend has no virtual threads, and a strided per-thread tile would not
    shrink to registers (an on-chip buffer is compacted to the range its accesses cover), so the
    virtual-thread level is a serial loop inside the thread's own contiguous tile of S2 x S3 x S4
    elements per dimension.  Every input the block reads is staged through `shared` memory at R0
    (fused, split by the thread count, bound to threadIdx.x); the output accumulates in a
    `local` write cache written back by each thread after the reduction."""

    structure: str = "SSSRRSRS"
    max_innermost_factor: int = 4
    max_reduce_innermost: int = 8
    shared_inputs: bool = True
    restructures = True

    def apply(self, sch: Schedule, block: BlockRV) -> None:
        self._apply(sch, block, False)

    def apply_default(self, sch: Schedule, block: BlockRV) -> None:
        self._apply(sch, block, True)

    @staticmethod
    def preferred_spatial(extent: int, threads: int) -> list[int]:
        """[block, thread, virtual thread, register, register] with `threads` threads (or the
        largest power of two below that divides), 4 (2, 1) registers, the rest over blocks."""
        t = threads
        while extent % t:
            t //= 2
        r = next(r for r in (4, 2, 1) if (extent // t) % r == 0)
        return [extent // (t * r), t, 1, r, 1]

    @staticmethod
    def preferred_reduce(extent: int) -> list[int]:
        """[steps, 8 (4, 2, 1), 1]: tiles of depth 8 staged per step."""
        d = next(d for d in (8, 4, 2, 1) if extent % d == 0)
        return [extent // d, d, 1]

    def _apply(self, sch: Schedule, block: BlockRV, default: bool) -> None:
        node = sch.get(block)
        kinds = _kinds(node)
        if "reduce" not in kinds or "spatial" not in kinds or not _plain_nest(sch, block):
            return
        if any(k not in ("spatial", "reduce") for k in kinds) or not has_reuse(sch, block):
            return
        if self.structure != "SSSRRSRS":
            raise RefcompError(f"GPUMultiLevelTiling: structure: only 'SSSRRSRS' is built, got {self.structure!r}")
        loops = sch.get_loops(block)
        sampled = []
        spatial_count = kinds.count("spatial")
        seen_spatial = 0
        for loop, kind in zip(loops, kinds):
            extent = as_int(sch.get(loop).extent)
            if kind == "spatial":
                seen_spatial += 1
                # preferred: 16 x 16 threads over the last two spatial dims, 4 x 4 registers each
                wanted = 16 if seen_spatial > spatial_count - 2 else 1
                decision = self.preferred_spatial(extent, wanted) if default else None
                factors = sch.sample_perfect_tile(loop, 5, self.max_innermost_factor, decision=decision)
            else:
                decision = self.preferred_reduce(extent) if default else None
                factors = sch.sample_perfect_tile(loop, 3, self.max_reduce_innermost, decision=decision)
            sampled.append((loop, kind, factors, [sch.get(f) for f in factors]))
        threads = 1
        for _, kind, _, values in sampled:
            threads *= values[1] if kind == "spatial" else 1
        if threads > MAX_THREADS:
            raise ScheduleError(f"GPUMultiLevelTiling: {threads} threads per block (at most {MAX_THREADS})")
        estimate = _shared_tile_bytes(node, [(kind, values) for _, kind, _, values in sampled])
        if self.shared_inputs and estimate is not None and estimate > SHARED_BYTES:
            raise ScheduleError(f"GPUMultiLevelTiling: {estimate} bytes of shared memory per block "
                                f"(at most {SHARED_BYTES})")
        s_tiles, r_tiles = [], []
        for loop, kind, factors, values in sampled:
            (s_tiles if kind == "spatial" else r_tiles).append((sch.split(loop, factors), values, factors))
        s = [parts for parts, _, _ in s_tiles]
        r = [parts for parts, _, _ in r_tiles]
        # split levels (outer to inner): block, thread, virtual thread, register, register
        order = ([p[0] for p in s] + [p[0] for p in r] + [p[1] for p in s] + [p[2] for p in s]
                 + [p[1] for p in r] + [p[3] for p in s] + [p[2] for p in r] + [p[4] for p in s])
        sch.reorder(*order)
        # up to three block levels over blockIdx.z / y / x (more: the leading ones fused into z)
        outers = [p[0] for p in s]
        if len(outers) > 3:
            outers = [sch.fuse(*outers[:-2])] + outers[-2:]
        for loop, axis in zip(reversed(outers), ("blockIdx.x", "blockIdx.y", "blockIdx.z")):
            sch.bind(loop, axis)
        block_loop = outers[-1]
        thread_loop = sch.fuse(*[p[1] for p in s]) if len(s) > 1 else s[0][1]
        sch.bind(thread_loop, "threadIdx.x")
        # the write cache: one tile per thread in registers, written back by the same threads
        cache = sch.cache_write(block, 0, "local")
        sch.reverse_compute_at(cache, block_loop, preserve_unit_loops=True)
        out_loops = _loops_below(sch, cache, block_loop)
        if len(out_loops) != len(s):
            raise ScheduleError(f"GPUMultiLevelTiling: the write cache has {len(out_loops)} loops under the block "
                                f"loop, expected {len(s)}")
        # the sampled factors themselves, so a mutated tile size reaches the write-back too
        parts = [sch.split(loop, [handles[1], None]) for loop, (_, _, handles) in zip(out_loops, s_tiles)]
        sch.reorder(*[p[0] for p in parts], *[p[1] for p in parts])
        out_threads = sch.fuse(*[p[0] for p in parts]) if len(parts) > 1 else parts[0][0]
        sch.bind(out_threads, "threadIdx.x")
        if r:  # the accumulators zeroed once, before the reduction, by their own threads
            init = sch.decompose_reduction(block, r[0][0])
            sch.bind(_loops_below(sch, init, block_loop)[0], "threadIdx.x")
        if not (self.shared_inputs and r):
            return
        step = r[-1][0]  # the innermost R0 loop
        shared_bytes = 0
        reads = [i for i, read in enumerate(sch.get(block).reads) if read.buffer is not sch.get(block).writes[0].buffer]
        for index in reads:
            copy = sch.cache_read(block, index, "shared")
            sch.compute_at(copy, step, preserve_unit_loops=True)
            copy_node = sch.get(copy)
            copy_loops = _loops_below(sch, copy, step)
            if not copy_loops:
                copy_loops = [sch.add_unit_loop(copy)]
            size = 1
            for l in copy_loops:
                size *= as_int(sch.get(l).extent) or 1
            shared_bytes += size * copy_node.writes[0].buffer.dtype.bytes
            fused = sch.fuse(*copy_loops) if len(copy_loops) > 1 else copy_loops[0]
            _, lane = sch.split(fused, [None, threads])
            sch.bind(lane, "threadIdx.x")
        if shared_bytes > SHARED_BYTES:
            raise ScheduleError(f"GPUMultiLevelTiling: {shared_bytes} bytes of shared memory per block "
                                f"(at most {SHARED_BYTES})")


def _shared_tile_bytes(node: Block, tiles: list[tuple[str, list[int]]]) -> int | None:
    """The bytes of the shared input tiles one R0 step stages, from the sampled tile sizes (per
    spatial iter the block tile S1..S4, per reduce iter R1 x R2); None when a read index is not
    a linear form of the iter vars (the rule then checks after staging)."""
    from ..shape.canonical import linear_form

    span = {}
    for iv, (_, values) in zip(node.iter_vars, tiles):
        tile = 1
        for v in values[1:]:  # every level below the block (spatial) or the step (reduce)
            tile *= v
        span[iv.var] = tile
    total = 0
    for read in node.reads:
        if read.buffer is node.writes[0].buffer:
            continue
        size = 1
        for r in read.region:
            form = linear_form(r.min)
            terms = list(form.linear_terms())
            if len(terms) != form.term_count() or any(atom not in span for atom, _ in terms):
                return None
            size *= 1 + sum(abs(c) * (span[atom] - 1) for atom, c in terms) + (as_int(r.extent) or 1) - 1
        total += size * read.buffer.dtype.bytes
    return total


def _loops_below(sch: Schedule, block: BlockRV, loop) -> list:
    """The loops of block below loop (all of them when loop is not among them)."""
    loops = sch.get_loops(block)
    target = sch.get(loop)
    for k, other in enumerate(loops):
        if sch.get(other) is target:
            return loops[k + 1:]
    return loops


@dataclass
class GPURowReduction:
    """A function-level rule for row reductions (softmax, layer norm): one kernel, one GPU block per
    row; the output's columns and every spatial stage's over the threads, each reduction a
    cross-thread reduction over the same sampled thread count; per-row intermediates in shared
    memory when they fit (else global)."""

    thread_choices: Sequence[int] = (32, 64, 128, 256, 512)
    preferred: int = 128

    def apply_function(self, sch: Schedule, default: bool = False) -> tuple[Schedule, bool]:
        from ..loops.defaults.reduction import is_row_reduction

        if not is_row_reduction(sch.func):
            return sch, False
        stages = [b for b in collect(sch.func.body, Block) if b.name != "root"]  # in program order
        out = stages[-1]
        if len(out.iter_vars) != 2:
            return sch, False
        cols = as_int(out.writes[0].buffer.shape[1])
        if cols is None:
            return sch, False
        trial = sch.copy()
        choices = _thread_choices(cols, self.thread_choices)
        threads = _choose(trial, choices, _nearest_at_most(choices, self.preferred), default)  # a handle: mutable
        try:
            self._schedule(trial, stages, threads)
        except RefcompError:
            return sch, False
        return trial, True

    def _schedule(self, sch: Schedule, stages: list[Block], threads) -> None:
        out = stages[-1]
        row, col = sch.get_loops(sch.get_block(out.name))
        sch.bind(row, "blockIdx.x")
        _, lane = sch.split(col, [None, threads])
        sch.bind(lane, "threadIdx.x")
        for stage in reversed(stages[:-1]):
            sch.compute_at(sch.get_block(stage.name), row)
        for stage in stages[:-1]:
            block = sch.get_block(stage.name)
            node = sch.get(block)
            if "reduce" in _kinds(node):
                reduce_loops = [l for l in sch.get_loops(block)[1:]]
                fused = sch.fuse(*reduce_loops) if len(reduce_loops) > 1 else reduce_loops[0]
                outer, inner = sch.split(fused, [None, threads])
                sch.reorder(inner, outer)
                sch.bind(inner, "threadIdx.x")
            else:
                loops = sch.get_loops(block)[1:]
                fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
                _, inner = sch.split(fused, [None, threads])
                sch.bind(inner, "threadIdx.x")
            buffer = node.writes[0].buffer
            per_row = 1
            for d in buffer.shape[1:]:
                per_row *= as_int(d) or SHARED_BYTES
            if per_row * buffer.dtype.bytes <= SHARED_BYTES // 4:
                sch.set_scope(block, 0, "shared")


@dataclass
class AutoBind:
    """A block with no bound loop yet: its leading spatial loops fused, split by a sampled thread
    count (preferred 256), bound to blockIdx.x / threadIdx.x.  A block with no leading spatial
    loop cannot run on the GPU this way: the sample is refused (ScheduleError)."""

    thread_choices: Sequence[int] = (64, 128, 256, 512, 1024)
    preferred: int = 256

    def apply(self, sch: Schedule, block: BlockRV) -> None:
        self._apply(sch, block, False)

    def apply_default(self, sch: Schedule, block: BlockRV) -> None:
        self._apply(sch, block, True)

    def _apply(self, sch: Schedule, block: BlockRV, default: bool) -> None:
        if _is_bound(sch, block):
            return
        node = sch.get(block)
        loops = sch.get_loops(block)
        realize = _realize(sch, node)
        leading = []
        for loop in loops:
            var = sch.get(loop).loop_var
            uses = [iv.kind for iv, v in zip(node.iter_vars, realize.iter_values) if var in free_vars(v)]
            if not uses or any(k != "spatial" for k in uses):
                break
            leading.append(loop)
        if not leading:
            raise ScheduleError(f"AutoBind: block {node.name} has no spatial loop to bind to GPU threads")
        extent = 1
        for loop in leading:
            extent *= as_int(sch.get(loop).extent) or MAX_THREADS
        choices = _thread_choices(extent, self.thread_choices)
        threads = _choose(sch, choices, _nearest_at_most(choices, self.preferred), default)  # a handle: mutable
        fused = sch.fuse(*leading) if len(leading) > 1 else leading[0]
        outer, inner = sch.split(fused, [None, threads])
        sch.bind(outer, "blockIdx.x")
        sch.bind(inner, "threadIdx.x")


def gpu_rules() -> list:
    """The CUDA design space's rules, in order (see the module docstring)."""
    from .rules import AutoInline

    return [GPURowReduction(), AutoInline(), CrossThreadReduction(), GPUMultiLevelTiling(), AutoBind()]


__all__ = ["AutoBind", "CrossThreadReduction", "GPUMultiLevelTiling", "GPURowReduction", "gpu_rules", "has_reuse"]
