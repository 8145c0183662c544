"""default_schedule: a sound CPU schedule for every kernel that has none.

For each block of each PrimFunc (skipping kernels already marked `scheduled`):
- the outermost spatial loop becomes `parallel` when the block has more than one loop or the
  loop is long (OpenMP threads over rows);
- the innermost spatial loop of a spatial block with a constant extent is split by the vector
  width and the inner part `vectorized` when it divides: as many lanes as fill the widest vector
  register the CPU has (64 bytes with AVX-512, else 32), halved until they divide the extent.  A
  full register matters for math calls: libmvec's variants (tanh, exp, ...) take exactly one
  native vector, and a narrower vector falls back to a scalar call per lane.
- matmul-like kernels use `refcomp.loops.recipes` when that module provides a recipe.
Every step goes through the checked Schedule primitives; a step they reject is skipped, so the
result is always a legal schedule of the same computation.
"""
from __future__ import annotations

from ...ast.function import IRModule, PrimFunc
from ...ast.functor import collect
from ...ast.stmt import Block
from ...errors import RefcompError
from ..shape_facts import const_value


def schedule_kernel(func: PrimFunc) -> PrimFunc:
    """func with parallel outer loops and vectorized inner loops where legal."""
    from ...loops.schedule import Schedule

    recipe = _recipe_for(func)
    if recipe is not None:
        try:
            return recipe(func).with_attr("scheduled", True)
        except RefcompError:
            pass
    sch = Schedule(func)
    for block in [b for b in collect(func.body, Block) if b.name != "root"]:
        try:
            rv = sch.get_block(block.name)
            loops = sch.get_loops(rv)
        except RefcompError:
            continue
        if not loops:
            continue
        spatial = [iv for iv in block.iter_vars if iv.kind == "spatial"]
        is_spatial = len(spatial) == len(block.iter_vars)
        kinds = [iv.kind for iv in block.iter_vars]
        if len(loops) == len(kinds) >= 3 and kinds[-2:] == ["spatial", "reduce"]:
            # matmul-like (..., i, j, k): put k outside j so the innermost loop walks rows of
            # B and C contiguously, then vectorize it like a spatial loop.
            try:
                sch.reorder(loops[-1], loops[-2])
                loops = sch.get_loops(rv)
                is_spatial = True
            except RefcompError:
                pass
        if is_spatial and len(loops) >= 1:
            inner = loops[-1]
            extent = const_value(sch.get(inner).extent)
            lanes = vector_lanes(block_dtype_bits(block), extent)
            if lanes > 1:
                try:
                    _, vec = sch.split(inner, [None, lanes])
                    sch.vectorize(vec)
                except RefcompError:
                    pass
        try:
            loops = sch.get_loops(rv)
            outer = loops[0]
            first = sch.get(outer)
            if first.kind == "serial" and _is_spatial_loop(block, first.loop_var, sch, rv):
                if len(loops) > 1 or (const_value(first.extent) or 1 << 20) >= 64:
                    sch.parallel(outer)
        except RefcompError:
            pass
    return sch.func.with_attr("scheduled", True)


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
    lanes = (512 if cpu.has("avx512f") else 256) // bits
    while lanes >= 4:
        if extent >= lanes and extent % lanes == 0:
            return lanes
        lanes //= 2
    return 1


def block_dtype_bits(block) -> int:
    return block.writes[0].buffer.dtype.bits if block.writes else 32


def _recipe_for(func: PrimFunc):
    """A recipe for a float32 matmul kernel (one S, S, R block; plus spatial stages), else None."""
    try:
        from ...loops import recipes
    except ImportError:
        return None
    blocks = [b for b in collect(func.body, Block) if b.name != "root"]
    reductions = [b for b in blocks if any(iv.kind == "reduce" for iv in b.iter_vars)]
    if len(reductions) != 1 or [iv.kind for iv in reductions[0].iter_vars] != ["spatial", "spatial", "reduce"]:
        return None
    block = reductions[0]
    if not block.writes or str(block.writes[0].buffer.dtype) != "float32":
        return None

    def apply(f: PrimFunc) -> PrimFunc:
        sch = recipes.matmul_fp32(f, block=block.name)
        return schedule_rest(sch, skip={block.name})

    return apply


def schedule_rest(sch, skip: set) -> PrimFunc:
    """Give the spatial blocks a recipe left alone the default loop treatment."""
    func = sch.func
    for block in [b for b in collect(func.body, Block) if b.name != "root" and b.name not in skip]:
        if any(iv.kind != "spatial" for iv in block.iter_vars):
            continue
        try:
            loops = sch.get_loops(sch.get_block(block.name))
            if loops and sch.get(loops[0]).kind == "serial":
                sch.parallel(loops[0])
        except RefcompError:
            continue
    return sch.func


def default_schedule(mod: IRModule) -> IRModule:
    """The module with every unscheduled PrimFunc given the default CPU schedule."""
    for name, func in list(mod.functions.items()):
        if isinstance(func, PrimFunc) and not func.attrs.get("scheduled"):
            mod = mod.with_function(name, schedule_kernel(func))
    return mod
