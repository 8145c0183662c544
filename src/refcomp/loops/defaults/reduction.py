"""Row reductions (softmax, layer norm, RMS norm, mean/variance, argmax): every stage per row.

A legalized row reduction is a chain of stages over the same leading "row" axes: partial
reductions into a few lanes, their final combine, and a last spatial stage that writes the
output row from the input row and the per-row results.  Scheduled stage by stage, each stage is
its own pass over the whole input (softmax: max, sum of exp, output: three reads of a tensor that
does not fit any cache).  This rule moves every earlier stage under the output stage's row loop
(compute_at, which proves each move covers what the consumer reads), so one thread makes one
pass: the row is read from memory once and the later stages find it in L1/L2.  The row loop
(the leading loops fused when there are several) is the one parallel loop; a partial stage's
lane loop is put innermost and the loops inside are left to the vectorizer.  The stages moved
under the row loop get the "local" scope: one row of each per thread (softmax's row of
exponentials in L1, the lane partials in registers), no whole-tensor scratch buffers.  A kernel
with a row stage over the output's domain (softmax's exponentials) is pipelined across rows: the
row loop in blocks of rows, the output of row r - 1 written inside row r's exp loop (the
advisory `stage_shift` mark, which the lowering takes where its preconditions hold).

Applies when: the last block is spatial, every other block writes a buffer that is not a
parameter, at least one block reduces, and the output has a leading (row) axis.
"""
from __future__ import annotations

import math

from ...ast.expr import BufferLoad, IntImm, Var, as_int
from ...ast.function import PrimFunc
from ...ast.functor import collect, free_vars, substitute, uses_var
from ...ast.stmt import NONTEMPORAL_STORE, Block, BlockRealize
from ...ast.structural import structural_equal
from ...errors import RefcompError
from ..passes.bind_repeated_math import has_costly_math
from ..schedule import Schedule


def _stages(func: PrimFunc) -> list[Block]:
    return [b for b in collect(func.body, Block) if b.name != "root"]


def is_row_reduction(func: PrimFunc) -> bool:
    """True for a chain of stages ending in a spatial output stage with reductions before it,
    every earlier stage writing a per-row buffer: its leading dims are the output's row dims (a
    column reduction, whose result every row reads whole, is not one: moved under the row loop
    it would be computed again for every row).  A contraction stage (a matmul with its epilogue:
    many dot products per row) is not one; the matmul schedules take it."""
    blocks = _stages(func)
    if len(blocks) < 2:
        return False
    last = blocks[-1]
    if any(iv.kind != "spatial" for iv in last.iter_vars) or len(last.iter_vars) < 2 or len(last.writes) != 1:
        return False
    if not any(iv.kind == "reduce" for b in blocks[:-1] for iv in b.iter_vars):
        return False
    if any(iv.kind not in ("spatial", "reduce") for b in blocks for iv in b.iter_vars):
        return False
    params = {id(p) for p in func.params}
    row_dims = last.writes[0].buffer.shape[:len(last.iter_vars) - 1]
    for block in blocks[:-1]:
        if not block.writes:
            return False
        for write in block.writes:
            buffer = write.buffer
            if id(buffer) in params or len(buffer.shape) < len(row_dims):
                return False
            if not all(structural_equal(a, b) for a, b in zip(buffer.shape, row_dims)):
                return False
        if _is_contraction(block, len(row_dims)):
            return False  # a matmul and its epilogue: many dot products per row
    return True


def _is_contraction(block: Block, rows: int) -> bool:
    """True when block reads a buffer with a reduce iter alone in one dimension and a column iter
    (a spatial iter past the first `rows`) alone in another, as a matmul reads its B[k, j]; a
    row reduction's partial stage reads x[i, k * lanes + j], both in one dimension."""
    reduce = {id(iv.var) for iv in block.iter_vars if iv.kind == "reduce"}
    columns = {id(iv.var) for iv in block.iter_vars[rows:] if iv.kind == "spatial"}
    if not reduce or not columns:
        return False
    for load in collect(block.body, BufferLoad):
        dims = [{id(v) for v in free_vars(index)} for index in load.indices]
        if any(d and d <= reduce for d in dims) and any(d and d <= columns for d in dims):
            return True
    return False


def _gather(sch: Schedule, output: str, fuse_rows: bool) -> tuple[int, int, RefcompError | None]:
    """Move the stages before `output` under its (fused, when fuse_rows) last row loop: each
    stage the primitive refuses stays where it is (a pass of its own over the rows), and so do
    the stages that feed only it.  Returns (moved, stages, the first refusal)."""
    blocks = _stages(sch.func)
    out = sch.get_block(output)
    loops = sch.get_loops(out)
    count = len(blocks[-1].iter_vars) - 1
    rows = loops[:count]
    group = _fusable_rows(sch, rows) if fuse_rows else rows[:1]
    if len(group) > 1:
        sch.fuse(*group)
        rows = sch.get_loops(out)[:count - len(group) + 1]
    row = rows[-1]
    refusal, moved = None, 0
    for block in reversed(blocks[:-1]):
        try:
            sch.compute_at(sch.get_block(block.name), row)
            moved += 1
        except RefcompError as err:
            refusal = refusal or err
    return moved, len(blocks) - 1, refusal


def _fusable_rows(sch: Schedule, rows: list) -> list:
    """The leading row loops to fuse: the first and, when constant, the second.  Fused loops bind
    `f // c`, `f % c`; two of them give indices the simplifier makes linear again
    (`(f // 4) * 4225 + (f % 4) * 65 * 65` is `f * 4225`), a third a nested `f % 260 // 65` it
    does not, computed per access (measured 2.6x slower on a (2, 4, 65, 65) softmax than the
    loops left apart).  A symbolic extent would divide by a run-time value (`f % m`): checked,
    per element, in the emitted C, where the vector loops cannot take it.  The rows after the
    group stay loops inside it."""
    group = rows[:1]
    if len(rows) > 1 and as_int(sch.get(rows[1]).extent) is not None:
        group.append(rows[1])
    return group


# A plain row reduction at least this long reduces into _CHAINS vector registers of partials
# (when they divide it): one register is one chain of dependent adds, each waiting on the last.
_WIDE_ROW = 256
_CHAINS = 4


def _lane_partials(sch: Schedule, block: Block) -> None:
    """Reduce a plain row reduction (spatial iters, then one reduce iter over a contiguous run) in
    as many partials as a vector register holds (four registers' worth for a row of _WIDE_ROW or
    more that they divide): the reduce loop is split by the lanes and the lanes factored out
    (rfactor), so the partial stage's lane loop, spatial, is vectorized; a serial chain of scalar
    adds cannot be (float addition does not reassociate).  Skipped when the extent is symbolic
    or not a multiple of twice the lanes, or rfactor refuses."""
    from ..intrin import cpu

    kinds = [iv.kind for iv in block.iter_vars]
    if kinds.count("reduce") != 1 or kinds[-1] != "reduce" or not block.writes:
        return
    extent = as_int(block.iter_vars[-1].dom.extent)
    bits = block.writes[0].buffer.dtype.bits
    lanes = native = cpu.vector_lanes(max(bits, 8))
    if extent is None or lanes < 2 or extent % lanes or extent < 2 * lanes:
        return
    if extent >= _WIDE_ROW and extent % (_CHAINS * lanes) == 0:
        lanes *= _CHAINS  # four registers of partials: four independent chains of adds
    rv = sch.get_block(block.name)
    loops = sch.get_loops(rv)
    if len(loops) != len(kinds):
        return
    try:
        trial = sch.copy()
        _, inner = trial.split(trial.get_loops(trial.get_block(block.name))[-1], [None, lanes])
        trial.rfactor(inner, len(kinds) - 1)
    except RefcompError:
        return
    sch.split(loops[-1], [None, lanes])
    sch.rfactor(sch.get_loops(rv)[-1], len(kinds) - 1)
    if lanes > 2 * native:
        _lane_partials(sch, sch.get(sch.get_block(block.name)))  # the four registers combined in one


def _lanes_inside(sch: Schedule, output: str) -> None:
    """Under the row loop, a partial stage's nest is (lanes, chunks): the lane loop, spatial,
    outside the reduce loop over the row's chunks.  Swapped, the lane loop is innermost and the
    per-block treatment vectorizes it (one vector of partials updated per chunk, its math, exp
    included, a vector call); left outside, every element is a scalar step.  A stage whose
    reorder the primitive refuses stays as it is."""
    for block in _stages(sch.func)[:-1]:
        try:
            rv = sch.get_block(block.name)
            loops = sch.get_loops(rv)
        except RefcompError:
            continue
        if len(loops) < 2:
            continue
        inner, outer = sch.get(loops[-1]).loop_var, sch.get(loops[-2]).loop_var
        if _binds(sch, block, inner) == {"reduce"} and _binds(sch, block, outer) == {"spatial"}:
            try:
                sch.reorder(loops[-1], loops[-2])
            except RefcompError:
                pass


def _inits_first(sch: Schedule) -> None:
    """Each reduction stage with its init inside its reduce loop (`if t == 0: init`) gets the init
    before that loop (decompose_reduction).  A per-row result in a local buffer would otherwise be
    written first under a condition in a loop of symbolic extent, which the C compiler cannot
    prove runs (-Wmaybe-uninitialized); and the test leaves the loop.  The lane-partial stages,
    whose lane loop is innermost, get theirs from the vectorizing treatment after the rule."""
    for block in _stages(sch.func)[:-1]:
        if block.init is None:
            continue
        try:
            rv = sch.get_block(block.name)
            loops = sch.get_loops(rv)
            first = next((loop for loop in loops if _binds(sch, block, sch.get(loop).loop_var) == {"reduce"}), None)
            if first is not None and sch.get(loops[-1]) is sch.get(first):
                sch.decompose_reduction(rv, first)
        except RefcompError:
            continue


def _rows_local(sch: Schedule, output: str) -> None:
    """Each stage moved under the output's row loop writes only what that row uses: its buffers
    get the "local" scope, which the C target places inside the row loop and shrinks to one
    row's part (compact_buffers): per-thread stack arrays, the lane partials a vector register,
    instead of whole-tensor heap buffers.  A stage left at the root (a pass of its own) keeps
    its buffer."""
    out_loops = {id(sch.get(rv)) for rv in sch.get_loops(sch.get_block(output))}
    moved = [block for block in _stages(sch.func)[:-1]
             if any(id(sch.get(rv)) in out_loops for rv in sch.get_loops(sch.get_block(block.name)))]
    for block in moved:
        for index, write in enumerate(block.writes):
            if write.buffer.scope == "global":
                try:
                    sch.set_scope(sch.get_block(block.name), index, "local")
                except RefcompError:
                    pass


def _binds(sch: Schedule, block: Block, loop_var) -> set[str]:
    """The kinds of the iter vars of block whose bindings use loop_var."""
    realize = next(r for r in collect(sch.func.body, BlockRealize) if r.block.name == block.name)
    return {iv.kind for iv, value in zip(realize.block.iter_vars, realize.iter_values) if uses_var(value, loop_var)}


def schedule_row_reduction(sch: Schedule, parallel: bool = True) -> Schedule | None:
    """A new schedule with every earlier stage under the output stage's row loop, that loop (its
    outermost row loop) parallel; None when the function is not a row reduction (nothing done).

    The first two row loops are fused first when the second is constant (one parallel loop over
    more rows: a batch of 1 still splits over the threads; see _fusable_rows), the stages under
    the last row loop; when a stage cannot be
    moved there (its region through the fused indices is not a box the prover bounds), they are
    tried unfused.  Of the two, the one that moves every
    stage, else the one that moves more, is kept; raises the first refusal when none moves."""
    if not is_row_reduction(sch.func):
        return None
    sch = sch.copy()
    output = _stages(sch.func)[-1].name
    for block in _stages(sch.func)[:-1]:
        _lane_partials(sch, block)
    out_block = _stages(sch.func)[-1]
    if len(sch.get_loops(sch.get_block(output))) != len(out_block.iter_vars):
        return None  # a unit loop folded away (one row): nothing to gather under a row loop
    best, best_moved, refusal = None, 0, None
    for fuse_rows in (True, False):
        trial = sch.copy()
        try:
            moved, stages, err = _gather(trial, output, fuse_rows)
        except RefcompError as err_fuse:
            refusal = refusal or err_fuse
            continue
        refusal = refusal or err
        if moved > best_moved:
            best, best_moved = trial, moved
        if moved == stages or len(out_block.iter_vars) == 2:
            break
    if best is None:
        raise refusal
    _lanes_inside(best, output)
    _inits_first(best)
    _rows_local(best, output)
    if parallel:
        blocked = best.copy()
        try:
            if _blocks_of_rows(blocked, output):
                blocked.parallel(blocked.get_loops(blocked.get_block(output))[0])
                best = blocked
        except RefcompError:
            pass  # the blocks' loop is not proved parallel (fused rows' nested indices): rows as they were
        if best is not blocked:
            best.parallel(best.get_loops(best.get_block(output))[0])
    _stream_large_output(best, output)
    return best


# A thread's rows are pipelined in blocks of at most this many (rows per block: the largest divisor
# of the row count that leaves at least _MIN_BLOCKS blocks for the threads): each block starts
# and ends the pipeline once, so its first row's stores and last row's arithmetic do not overlap.
_PIPELINE_ROWS = 64
_MIN_BLOCKS = 16


def _row_stage(func: PrimFunc) -> bool:
    """True when an earlier stage writes a row buffer over the output's own domain that the output
    reads (softmax's row of exponentials: spatial iters only, the output's extents)."""
    stages = _stages(func)
    last = stages[-1]
    extents = [as_int(iv.dom.extent) for iv in last.iter_vars]
    read = {load.buffer for load in collect(last.body, BufferLoad)}
    return any(all(iv.kind == "spatial" for iv in b.iter_vars)
               and [as_int(iv.dom.extent) for iv in b.iter_vars] == extents
               and any(w.buffer in read for w in b.writes) for b in stages[:-1])


def _blocks_of_rows(sch: Schedule, output: str) -> bool:
    """When the function has a row stage (`_row_stage`), split the row loop into blocks of rows
    (the outer loop is made parallel by the caller; a thread's rows stay contiguous) and mark the
    loop over a block's rows `stage_shift` (the mark also keeps the per-block treatment from
    splitting that loop).  The mark is advisory: the lowering shifts the loop where the pass's
    preconditions hold and leaves it as it is where they do not (a row of one vector chunk has
    no loop to fuse into), so a default schedule never fails to build on it.  False (nothing
    done) when there is no row stage, the row count is symbolic or has no divisor that fits."""
    from ...ast.stmt import STAGE_SHIFT, STAGE_SHIFT_ADVISORY

    if not _row_stage(sch.func):
        return False
    row = sch.get_loops(sch.get_block(output))[0]
    count = as_int(sch.get(row).extent)
    if count is None or sch.get(row).kind != "serial":
        return False
    size = next((r for r in range(min(_PIPELINE_ROWS, count // _MIN_BLOCKS), 3, -1) if count % r == 0), None)
    if size is None:
        return False
    _, inner = sch.split(row, [None, size])
    sch.annotate(inner, STAGE_SHIFT, STAGE_SHIFT_ADVISORY)
    return True


# An output of at least this many bytes, or of the last-level cache's size when that is smaller,
# is written with streaming stores (measured on a 2-core AVX-512 virtual machine whose sysfs
# reports the host's 480 MiB L3: 64 MiB row layer and RMS norms 1.4-1.5x faster with them, the
# copy of such a tensor 1.2x with 16-byte aligned pieces, 1.45x with whole lines).  Smaller
# outputs stay in the cache for the kernel that reads them next.
STREAM_MIN_BYTES = 32 << 20


def stream_min_bytes() -> int:
    """The output size from which the row rule streams: STREAM_MIN_BYTES, or the last-level
    cache's size (`cpu.last_level_cache_bytes`) when that is smaller."""
    from ..intrin import cpu

    llc = cpu.last_level_cache_bytes()
    return min(STREAM_MIN_BYTES, llc) if llc else STREAM_MIN_BYTES


def _stream_large_output(sch: Schedule, output: str) -> None:
    """Annotate the output stage's outermost loop `nontemporal_store` with the output buffer's
    name when that buffer has a constant size of at least `stream_min_bytes()`: written once, row
    after row, and too large to be read again from a cache, it is stored with streaming stores
    (spec/c_abi.md), which skip the read of each line before it is written."""
    buffer = _stages(sch.func)[-1].writes[0].buffer
    sizes = [as_int(extent) for extent in buffer.shape]
    if any(size is None for size in sizes) or math.prod(sizes) * buffer.dtype.bits // 8 < stream_min_bytes():
        return
    sch.annotate(sch.get_loops(sch.get_block(output))[0], NONTEMPORAL_STORE, buffer.name)


def prefetch_rows(sch: Schedule) -> Schedule:
    """sch (a row reduction this rule scheduled, vectorized since) as a new schedule whose row
    loop overlaps memory with computation.  A thread reads its row from memory in the first pass
    and writes it in the last; in between it computes from cache while memory idles.  So, one
    hint (`prefetch`) per vector chunk, spread over the row's work:
    - the next row of each input of the output's shape, in the chunk loop of the first spatial
      stage with costly math (exp, log, ...: softmax's exp row), else of the output stage;
    - the output row, in the chunk loop of the last stage before the output that reads the
      input row (softmax's exp row, layer norm's variance pass, RMS norm's sum of squares), so
      the lines the output pass writes are owned by then; not when the output is written with
      streaming stores (`nontemporal_store`), which own no line.
    sch itself when nothing can carry the hints (no parallel loop around every stage, a row not
    in vector chunks, indices an index map cannot express)."""
    func = sch.func
    stages = _stages(func)
    nests = [[sch.get(rv) for rv in sch.get_loops(sch.get_block(b.name))] for b in stages]
    shared = 0
    while all(len(n) > shared for n in nests) and all(n[shared] is nests[0][shared] for n in nests):
        shared += 1
    if shared == 0 or not any(loop.kind == "parallel" for loop in nests[0][:shared]):
        return sch
    row = nests[0][shared - 1].loop_var
    shape = stages[-1].writes[0].buffer.shape
    inputs = [b for b in func.buffers if _same_shape(b.shape, shape) and b is not stages[-1].writes[0].buffer]
    costly = [k for k, b in enumerate(stages[:-1])
              if all(iv.kind == "spatial" for iv in b.iter_vars) and has_costly_math(b.body)]
    hints = []  # (stage, buffer whose load gives the element, buffer to prefetch, row shift, write)
    carrier = costly[0] if costly else len(stages) - 1
    for buffer in inputs:
        hints.append((carrier, buffer, buffer, True, False))
    readers = [k for k in range(len(stages) - 1) if inputs and _chunked(nests[k][shared:])
               and any(load.buffer is inputs[0] for load in collect(stages[k].body, BufferLoad))]
    streamed = any((loop.annotations or {}).get(NONTEMPORAL_STORE) for loop in nests[-1])
    if readers and not streamed:  # a streamed output row is not read for ownership: nothing to own early
        hints.append((readers[-1], inputs[0], stages[-1].writes[0].buffer, False, True))
    trial = sch.copy()
    try:
        for k, model, buffer, next_row, write in hints:
            below = nests[k][shared:]
            lanes = _chunked(below)
            if lanes is None:
                continue
            block = stages[k]
            load = next((l for l in collect(block.body, BufferLoad) if l.buffer is model), None)
            if load is None:
                continue  # the carrier does not read that input: no element to model the hint on
            realize = next(r for r in collect(func.body, BlockRealize) if r.block.name == block.name)
            binding = {iv.var: value for iv, value in zip(realize.block.iter_vars, realize.iter_values)}
            inside = {loop.loop_var: IntImm(0, loop.loop_var.dtype) for loop in below[lanes:]}
            shift = {row: row + IntImm(1, row.dtype)} if next_row else {}
            outer = nests[k][:shared + lanes]
            index_map = _loop_index_map(outer, [substitute(substitute(substitute(i, binding), shift), inside)
                                                for i in load.indices])
            if index_map is None:
                return sch
            trial.prefetch(trial.get_loops(trial.get_block(block.name))[len(outer) - 1], buffer.name, index_map,
                           write=write)
    except RefcompError:
        return sch
    return trial


def _chunked(below: list) -> int | None:
    """The position of the first vectorized loop in below when the loops from it on are all
    vectorized and a loop stands before it (the chunk loop that carries hints), else None."""
    lanes = [k for k, loop in enumerate(below) if loop.kind == "vectorized"]
    if not lanes or lanes[0] == 0 or lanes != list(range(lanes[0], len(below))):
        return None
    return lanes[0]


def _same_shape(a, b) -> bool:
    return len(a) == len(b) and all(structural_equal(x, y) for x, y in zip(a, b))


def _loop_index_map(loops: list, exprs: list):
    """The IndexMap from the vars of loops (outermost first) to exprs, or None when an expr uses
    more than the ops an index map holds (+ - * // % min max of ints: a cast, for instance)."""
    from ..primitives.index_map import IndexMap, _check_expr

    initial = tuple(Var(loop.loop_var.name, loop.loop_var.dtype) for loop in loops)
    final = tuple(substitute(e, dict(zip((loop.loop_var for loop in loops), initial))) for e in exprs)
    try:
        for expr in final:
            _check_expr(expr, set(initial))
    except RefcompError:
        return None
    return IndexMap(initial, final)
