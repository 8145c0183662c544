"""default_schedule: a sound CPU schedule for every kernel that has none.

For each PrimFunc not marked `scheduled`:
- a power with a constant exponent of 2 or 3 becomes a product (constant_powers);
- buffer indices are simplified under the block iter domains (block_indices), so a reshape's
  flat-offset divisions become plain indices the vectorizer turns into contiguous loads;
- spatial stages that are not outputs are inlined into their readers (as fuse_tir does),
  except costly math read by a reduction (see fuse_tir.inline_spatial_stages);
then for each block:
- the leading spatial loops become `parallel` (OpenMP threads over rows) when the block has
  more than one loop or the loop is long; when the first is short (< 64 iterations, e.g. 16
  heads) they are fused first (all constant) or the symbolic one is moved outermost;
- the innermost spatial loop of a spatial block with a constant extent is split by the vector
  width and the inner part `vectorized` when it divides: as many lanes as fill the widest vector
  register the CPU has (64 bytes with AVX-512, else 32), halved until they divide the extent.  A
  full register matters for math calls: libmvec's variants (tanh, exp, ...) take exactly one
  native vector, and a narrower vector falls back to a scalar call per lane.  A symbolic extent
  (or one the lanes do not divide) is split with a predicate: full vectors, then a scalar tail.
  The width grows to a constant divisor d of the vector iter (`v // d`, `v % d`) that divides
  the extent, so those stay constant across a chunk.  A reduction whose innermost loop is
  spatial (lanes inside the reduce loop) is vectorized the same way and its init decomposed
  out of the reduce loop;
- matmul-like kernels use `refcomp.loops.recipes` when that module provides a recipe.
Every step goes through the checked Schedule primitives; a step they reject is skipped, so the
result is always a legal schedule of the same computation.
"""
from __future__ import annotations

import math
import warnings

from ...ast.function import IRModule, PrimFunc
from ...ast.functor import collect
from ...ast.stmt import Block
from ...errors import RefcompError, ScheduleError
from ..shape_facts import const_value


def prepare_kernel(func: PrimFunc) -> PrimFunc:
    """func with the rewrites the default schedule assumes and that are not schedule primitives:
    constant powers as products, block indices simplified under the iter domains.  Idempotent;
    graph.build runs it on every unscheduled kernel before tuning records are looked up, so the
    tuner sees the kernels in the form the default schedule starts from."""
    from .block_indices import simplify_block_indices
    from .constant_powers import reduce_constant_powers

    return simplify_block_indices(reduce_constant_powers(func))


def prepare_kernels(mod: IRModule) -> IRModule:
    """The module with every unscheduled PrimFunc prepared (prepare_kernel)."""
    for name, func in list(mod.functions.items()):
        if isinstance(func, PrimFunc) and not func.attrs.get("scheduled"):
            mod = mod.with_function(name, prepare_kernel(func))
    return mod


def schedule_kernel(func: PrimFunc, prepared: bool = False) -> PrimFunc:
    """func with parallel outer loops and vectorized inner loops where legal (prepared: func has
    been through prepare_kernel already)."""
    from ...loops.schedule import Schedule

    if not prepared:
        func = prepare_kernel(func)
    return default_schedule_of(Schedule(func)).func.with_attr("scheduled", True)


def default_schedule_of(sch, conv_options: dict | None = None, batched_matmul_options: dict | None = None):
    """The default schedule of sch's (prepared) kernel, made with Schedule primitives only, so
    its trace replays it: the conv recipe for a kernel whose reductions are convolutions, the
    matmul recipes, else the rule-based defaults and the per-block treatment.  sch is left as it
    was; the result is a new Schedule.  The tuner's choices: with conv_options (keywords of the
    conv recipe) the kernel must be a convolution the recipe takes with them; with
    batched_matmul_options (keywords of loops.defaults.tiled_batched_matmul_bt) a batched A @ B^T
    that the register tile they name fits; else a ScheduleError."""
    from ...loops.defaults import is_row_reduction, prefetch_rows
    from .fuse_tir import inline_spatial_stages
    from .schedule_conv import schedule_conv

    conv = schedule_conv(sch.copy(), _schedule_block, conv_options)
    if conv is not None:
        return conv
    if conv_options is not None:
        raise ScheduleError(f"default schedule: {sch.func.name} is not a convolution the conv recipe takes with "
                            f"{conv_options}")
    recipe = _recipe_for(sch.func) if batched_matmul_options is None else None
    if recipe is not None:
        try:
            return recipe(sch.copy())
        except RefcompError:
            pass
    sch = sch.copy()
    inline_spatial_stages(sch)
    rows = is_row_reduction(sch.func)
    sch = _apply_rules(sch) if batched_matmul_options is None else _tiled_batched_matmul(sch, batched_matmul_options)
    done = _tensorized_blocks(sch.func)
    for block in [b for b in collect(sch.func.body, Block) if b.name != "root" and b.name not in done]:
        try:
            rv = sch.get_block(block.name)
            loops = sch.get_loops(rv)
        except RefcompError:
            continue
        if loops:
            _schedule_block(sch, rv, block, loops)
    return prefetch_rows(sch) if rows else sch


def _apply_rules(sch):
    """sch after the first rule of loops.defaults that applies to it (the loops each rule leaves
    serial get the per-block treatment after).  When a rule applies but a primitive refuses one
    of its steps, the schedule as it was goes on to the generic treatment, with a warning."""
    from ...loops.defaults import RULES

    for name, rule in RULES:
        try:
            scheduled = rule(sch.copy())  # a rule that fails half-way leaves sch as it was
            if scheduled is not None:
                return scheduled
        except RefcompError as err:
            warnings.warn(f"default_schedule: {sch.func.name}: the {name} rule could not be applied "
                          f"({str(err).splitlines()[0]}); using the generic schedule", RuleFallbackWarning,
                          stacklevel=2)
            return sch
    return sch


def _tiled_batched_matmul(sch, options: dict):
    """sch's batched A @ B^T on the register tile with the tuner's options (a ScheduleError when it
    is not one, or the options do not fit it)."""
    from ...loops.defaults import tiled_batched_matmul_bt

    tiled = tiled_batched_matmul_bt(sch, **options)
    if tiled is None:
        raise ScheduleError(f"default schedule: {sch.func.name} is not a batched A @ B^T that an fp32 register "
                            f"tile fits")
    return tiled


def _tensorized_blocks(func) -> set:
    """The names of the tensorized blocks of func and of the blocks inside them (a tile's init):
    scheduled already, they get no per-block treatment (a parallel loop in a tile's init would open
    a nested parallel region for every tile)."""
    names = set()
    for block in collect(func.body, Block):
        if "tensorized" in block.annotations:
            names.add(block.name)
            for part in (block.body, block.init):
                if part is not None:
                    names.update(b.name for b in collect(part, Block))
    return names


class RuleFallbackWarning(UserWarning):
    """A rule-based default schedule did not apply to a kernel it matched; the generic one did."""


def _schedule_block(sch, rv, block: Block, loops: list) -> None:
    kinds = [iv.kind for iv in block.iter_vars]
    is_spatial = all(k == "spatial" for k in kinds)
    if len(loops) == len(kinds) >= 3 and kinds[-2:] == ["spatial", "reduce"] and \
            not _is_spatial_loop(block, sch.get(loops[-1]).loop_var, sch, rv):
        # matmul-like (..., i, j, k): put k outside j so the innermost loop walks rows of
        # B and C contiguously, then vectorize it like a spatial loop (unless a rule already
        # put a spatial loop innermost).
        try:
            sch.reorder(loops[-1], loops[-2])
            loops = sch.get_loops(rv)
            is_spatial = True
        except RefcompError:
            pass
    if not is_spatial and block.init is not None and \
            _is_spatial_loop(block, sch.get(loops[-1]).loop_var, sch, rv):
        is_spatial = True  # lanes already inside the reduce loop (a factored-out partial)
    vector_loops = 0
    if is_spatial:
        vector_loops = _vectorize_inner(sch, rv, block, loops[-1])
        if vector_loops and block.init is not None:
            # the init as its own nest before the reduce loop, so the vector loop is one
            # update with no `if (k == 0)` inside (the lowering vectorizes only plain bodies)
            try:
                loops = sch.get_loops(rv)
                reduce_loop = next(l for l in loops if not _is_spatial_loop(block, sch.get(l).loop_var, sch, rv))
                sch.decompose_reduction(rv, reduce_loop)
            except (RefcompError, StopIteration):
                pass
    try:
        loops = sch.get_loops(rv)
        # the leading loops that bind spatial iters only, short of the (split) innermost loop
        keep = max(vector_loops, 1) if is_spatial else 0
        lead = []
        for loop in loops[:len(loops) - keep]:
            node = sch.get(loop)
            if node.kind != "serial" or not _is_spatial_loop(block, node.loop_var, sch, rv):
                break
            lead.append(loop)
        if not lead:
            lead = loops[:1] if sch.get(loops[0]).kind == "serial" and \
                _is_spatial_loop(block, sch.get(loops[0]).loop_var, sch, rv) else []
        if not lead:
            return
        outer = _parallel_candidate(sch, lead)
        extent = const_value(sch.get(outer).extent)
        if len(loops) > 1 or extent is None or extent >= 64:
            sch.parallel(outer)
    except RefcompError:
        pass


# A leading loop shorter than this is fused with the spatial loops below it before it is made
# parallel (16 heads on 6 threads leave a third of them idle for the last round).
_FEW_ITERATIONS = 64

# When a later leading loop is symbolic, constant loops before it making this many iterations
# are made parallel where they are (fused): moving the symbolic loop outermost makes each
# thread's inner walk jump by the outer axes' strides (for a 16-head (16, seq, seq) softmax, a
# 2 KB row then a 1 MB jump: measured 1.9x slower on one thread, the loads missing cache), while
# 16 iterations still share out evenly over a few threads.  Fewer (3 alone) keep the reorder.
_IN_PLACE_ITERATIONS = 16


def _parallel_candidate(sch, lead: list):
    """The loop to make parallel among the leading spatial loops `lead` (outermost first).

    A short first loop is fused with the loops after it, as few as make _FEW_ITERATIONS, when all
    are constant (the parallel check proves `f // n`, `f % n` distinct for constant n).  With a symbolic one among them (fusing it would
    give bindings the prover cannot split), the constant loops before it stay outermost, fused,
    when they make at least _IN_PLACE_ITERATIONS iterations together; when fewer, the symbolic
    loop is moved outermost instead.  Either step is skipped when its primitive refuses."""
    first = const_value(sch.get(lead[0]).extent)
    if len(lead) < 2 or first is None or first >= _FEW_ITERATIONS:
        return lead[0]
    extents = [const_value(sch.get(loop).extent) for loop in lead]
    same_dtype = len({str(sch.get(loop).loop_var.dtype) for loop in lead}) == 1  # fuse mixes them badly
    try:
        if all(e is not None for e in extents):
            # the shortest prefix making _FEW_ITERATIONS: the loops below it stay nested, so an
            # element's indices need no division (a fused (2, 1280, 3) copy divided by 3840
            # and 3 for every 3 elements: 150 us for NCHW8c -> NCHW of 23k floats, 15 nested)
            count = 1
            while count < len(lead) and math.prod(extents[:count]) < _FEW_ITERATIONS:
                count += 1
            return sch.fuse(*lead[:count]) if same_dtype else lead[0]
        prefix = lead[:extents.index(None)]  # the constant loops before the first symbolic one
        if math.prod(extents[:len(prefix)]) >= _IN_PLACE_ITERATIONS:
            prefix_dtypes = {str(sch.get(loop).loop_var.dtype) for loop in prefix}
            return sch.fuse(*prefix) if len(prefix) > 1 and len(prefix_dtypes) == 1 else prefix[0]
        symbolic = lead[extents.index(None)]
        sch.reorder(symbolic, lead[0])
        return symbolic
    except RefcompError:
        return lead[0]


def _vectorize_inner(sch, rv, block: Block, inner) -> int:
    """Split the innermost spatial loop by the vector width and vectorize the inner part; a
    symbolic or indivisible extent gets a predicated tail (full vectors, then a scalar rest).
    Returns the number of loops the innermost loop became (2), or 0 when nothing changed."""
    from ...loops.intrin import cpu

    from .block_indices import aligned_vector_width

    loop = sch.get(inner)
    extent = const_value(loop.extent)
    bits = block_dtype_bits(block)
    lanes = vector_lanes(bits, extent)
    if lanes > 1:
        iters = [iv.var for iv, value in zip(block.iter_vars, _realize_of(sch.func, sch.get(rv)).iter_values)
                 if value is loop.loop_var]
        if iters:
            lanes = aligned_vector_width(sch.get(rv), iters[0], extent, lanes)
    if lanes == 1:
        native = cpu.vector_lanes(max(bits, 1))
        if extent is not None and extent < native:
            return 0
        lanes = native  # symbolic (or indivisible) extent: predicated last vector
    try:
        _, vec = sch.split(inner, [None, lanes])
        sch.vectorize(vec)
        return 2
    except RefcompError:
        return 0


def _is_spatial_loop(block, loop_var, sch, rv) -> bool:
    realize = sch.get(rv)
    from ...ast.functor import uses_var

    block_node = realize if isinstance(realize, Block) else getattr(realize, "block", realize)
    realize_node = _realize_of(sch.func, block_node)
    if realize_node is None:
        return False
    for iv, value in zip(block_node.iter_vars, realize_node.iter_values):
        if iv.kind != "spatial" and uses_var(value, loop_var):
            return False
    return True


def _realize_of(func, block):
    from ...ast.stmt import BlockRealize

    for r in collect(func.body, BlockRealize):
        if r.block is block:
            return r
    return None


def vector_lanes(bits: int, extent: int | None) -> int:
    """Lanes of a vector loop over `extent` elements of `bits` bits: a full native register when
    it divides the extent, else the largest halving (at least 4 lanes) that does; 1 for none."""
    from ...loops.intrin import cpu

    if extent is None or bits <= 0:
        return 1
    lanes = cpu.vector_lanes(bits)
    while lanes >= 4:
        if extent >= lanes and extent % lanes == 0:
            return lanes
        lanes //= 2
    return 1


def block_dtype_bits(block) -> int:
    """Bits per element of what the block writes (bool counts as a byte, as it is stored)."""
    return max(block.writes[0].buffer.dtype.bits, 8) if block.writes else 32


def _recipe_for(func: PrimFunc):
    """A recipe for a float32 matmul kernel (one S, S, R block; plus spatial stages), else None."""
    from ...loops import recipes

    blocks = [b for b in collect(func.body, Block) if b.name != "root"]
    reductions = [b for b in blocks if any(iv.kind == "reduce" for iv in b.iter_vars)]
    if len(reductions) != 1 or [iv.kind for iv in reductions[0].iter_vars] != ["spatial", "spatial", "reduce"]:
        return None
    block = reductions[0]
    if not block.writes or str(block.writes[0].buffer.dtype) != "float32":
        return None

    spatial = [b for b in blocks if b is not block]

    def apply(sch):
        if len(spatial) == 1:
            # one elementwise epilogue (bias, gelu, residual...) over the product: computed per
            # cache block of C while it is still in cache, by the thread that computed it
            try:
                return recipes.matmul_bias_gelu(sch.copy(), block.name, spatial[0].name)
            except RefcompError:
                pass
        sch = recipes.matmul_fp32(sch, block=block.name)
        return schedule_rest(sch, skip={block.name})

    return apply


def schedule_rest(sch, skip: set):
    """sch with the spatial blocks a recipe left alone given the default loop treatment."""
    func = sch.func
    skip = set(skip) | _tensorized_blocks(func)
    for block in [b for b in collect(func.body, Block) if b.name != "root" and b.name not in skip]:
        if any(iv.kind != "spatial" for iv in block.iter_vars):
            continue
        try:
            loops = sch.get_loops(sch.get_block(block.name))
            if loops and sch.get(loops[0]).kind == "serial":
                sch.parallel(loops[0])
        except RefcompError:
            continue
    return sch


def default_schedule(mod: IRModule) -> IRModule:
    """The module with every unscheduled PrimFunc given the default CPU schedule (the pipeline
    has prepared them: prepare_kernels)."""
    for name, func in list(mod.functions.items()):
        if isinstance(func, PrimFunc) and not func.attrs.get("scheduled"):
            mod = mod.with_function(name, schedule_kernel(func, prepared=True))
    return mod
