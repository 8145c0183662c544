"""`Schedule`: TVM-style scheduling of a PrimFunc by pure, checked primitives, with a trace.

How a primitive is written
--------------------------
Every primitive is a *pure function* in `refcomp.loops.primitives.<family>`:

    def split(func: PrimFunc, loop: For, factors: list[int | None], ...) -> tuple[PrimFunc, results]

* It receives the current PrimFunc and its arguments with handles already resolved: a `BlockRV`
  becomes the current `Block` node, a `LoopRV` the current `For` node, an `ExprRV` its int value
  (lists are resolved element-wise).  Other arguments arrive as given.
* It checks its preconditions first and raises `ScheduleError` (message prefixed with the
  primitive's name, `ir=func, spot=<node>`) when one fails.  It never mutates anything: the IR is
  immutable, so a failure leaves the schedule unchanged for free.
* It returns the new PrimFunc and its results: `None`, a `Block`, a `For`, an int, or a list of
  these.  The Schedule turns Blocks and Fors back into handles.
* Blocks are found again by *name* (primitives keep names unique), loops by *loop var identity*;
  a primitive that replaces a loop gives the new loops fresh vars, so old handles to it go stale.

A Schedule method is one line: `return self._apply("split", loop_prims.split, loop=loop, ...)`.
`_apply` resolves handles, calls the function, installs the result, records an `Instruction` in
`self.trace` (keyword arguments exactly as the method received them), and returns handles.
Replay (`Schedule.from_trace`) calls the methods by name with the recorded keywords, so a
method's keyword names are its trace format.  Sampling primitives use `_sample` instead (they
also get the schedule's `random.Random` and return `(values, decision)`).
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..ast import Block, For, IRModule, PrimFunc, Var
from ..errors import InternalError, RefcompError, ScheduleError
from .primitives import compute_location, kinds, lookup, loop as loop_prims, reduction, sampling, storage
from .primitives import prefetch as prefetch_prims
from .primitives.index_map import IndexMap
from .trace import Instruction, Trace


# ----------------------------------------------------------------------------- handles

@dataclass(frozen=True, eq=False)
class BlockRV:
    """A handle to a block, found by its (unique) name in the current IR."""

    name: str

    def __repr__(self) -> str:
        return f"BlockRV({self.name!r})"


@dataclass(frozen=True, eq=False)
class LoopRV:
    """A handle to a loop, found by the identity of its loop variable in the current IR."""

    var: Var

    def __repr__(self) -> str:
        return f"LoopRV({self.var.name})"


@dataclass(frozen=True, eq=False)
class ExprRV:
    """A sampled integer (a tile factor, a categorical choice, a compute location)."""

    value: int

    def __int__(self) -> int:
        return self.value

    def __index__(self) -> int:
        return self.value

    def __repr__(self) -> str:
        return f"ExprRV({self.value})"


Handle = BlockRV | LoopRV | ExprRV

# sample_compute_location returns loop handles with these vars for "leave at the root" and "inline".
ROOT_VAR = Var("root")
INLINE_VAR = Var("inline")


def _leave_in_place(func: PrimFunc, block: Block, loop: Any, preserve_unit_loops: bool = False):
    return func, None


def _inline_instead(func: PrimFunc, block: Block, loop: Any, preserve_unit_loops: bool = False):
    return compute_location.compute_inline(func, block)


class Schedule:
    """Schedules one PrimFunc of a module; every step is checked and recorded in `trace`.

    With verify=True (default: `Schedule.verify_default`, which the test suite turns on) the IR is
    checked for well-formedness after every primitive.
    """

    verify_default = False

    def __init__(self, func_or_mod: PrimFunc | IRModule, seed: int | None = None,
                 func_name: str | None = None, verify: bool | None = None) -> None:
        if isinstance(func_or_mod, PrimFunc):
            self._mod = IRModule({func_or_mod.name: func_or_mod})
            self._func_name = func_or_mod.name
        elif isinstance(func_or_mod, IRModule):
            self._mod = func_or_mod
            prim_names = [n for n, f in func_or_mod if isinstance(f, PrimFunc)]
            if func_name is None:
                func_name = "main" if "main" in prim_names else (prim_names[0] if len(prim_names) == 1 else None)
            if func_name is None or func_name not in prim_names:
                raise ScheduleError(
                    f"Schedule: pick a PrimFunc with func_name=...; the module has {sorted(prim_names)}"
                )
            self._func_name = func_name
        else:
            raise ScheduleError(f"Schedule: expected a PrimFunc or IRModule, got {type(func_or_mod).__name__}")
        self.seed = seed
        self._rng = random.Random(seed)
        self.verify = Schedule.verify_default if verify is None else verify
        self.trace = Trace()

    # ------------------------------------------------------------------ state

    @property
    def func(self) -> PrimFunc:
        """The PrimFunc being scheduled, as it is now."""
        return self._mod[self._func_name]

    @property
    def mod(self) -> IRModule:
        """The whole module, with the scheduled function as it is now."""
        return self._mod

    def work_on(self, func_name: str) -> None:
        """Schedule another PrimFunc of the module from now on."""
        if func_name not in self._mod or not isinstance(self._mod[func_name], PrimFunc):
            raise ScheduleError(f"work_on: the module has no PrimFunc {func_name!r}")
        self._func_name = func_name

    def copy(self) -> "Schedule":
        """An independent schedule in the same state; handles stay valid in both."""
        other = Schedule.__new__(Schedule)
        other._mod, other._func_name, other.seed, other.verify = self._mod, self._func_name, self.seed, self.verify
        other._rng = random.Random()
        other._rng.setstate(self._rng.getstate())
        other.trace = self.trace.copy()
        return other

    def get(self, handle: Handle) -> Block | For | int:
        """The current node (Block or For) or value (int) a handle refers to."""
        return self._resolve(handle, "get")

    def show(self) -> str:
        """The current function in the script format."""
        return self.func.script()

    @staticmethod
    def from_trace(func_or_mod: PrimFunc | IRModule, trace_json: str | dict, seed: int | None = None) -> "Schedule":
        """A new schedule of func with the JSON trace replayed (decisions included)."""
        sch = Schedule(func_or_mod, seed=seed)
        Trace.apply_json(sch, trace_json)
        return sch

    # ------------------------------------------------------------------ machinery

    def _resolve(self, value: Any, primitive: str) -> Any:
        if isinstance(value, BlockRV):
            block = lookup.find_block_by_name(self.func, value.name)
            if block is None:
                raise ScheduleError(f"{primitive}: block handle {value.name!r} refers to no block "
                                    "(it was inlined or renamed)", ir=self.func)
            return block
        if isinstance(value, LoopRV):
            if value.var is ROOT_VAR or value.var is INLINE_VAR:
                return value
            loop = lookup.find_loop_by_var(self.func, value.var)
            if loop is None:
                raise ScheduleError(f"{primitive}: loop handle {value.var.name} refers to no loop "
                                    "(a split/fuse/compute_at replaced it)", ir=self.func)
            return loop
        if isinstance(value, ExprRV):
            return value.value
        if isinstance(value, (list, tuple)):
            return [self._resolve(item, primitive) for item in value]
        return value

    def _wrap(self, value: Any) -> Any:
        if isinstance(value, Block):
            return BlockRV(value.name)
        if isinstance(value, For):
            return LoopRV(value.loop_var)
        if isinstance(value, (list, tuple)):
            return [self._wrap(item) for item in value]
        return value

    def _install(self, func: PrimFunc) -> None:
        if not isinstance(func, PrimFunc):
            raise InternalError(f"a primitive returned {type(func).__name__} instead of a PrimFunc")
        if self.verify and func is not self.func:
            from ..ast.wellformed import verify_well_formed

            try:
                verify_well_formed(func)
            except RefcompError as exc:  # a primitive built bad IR: that is a refcomp bug
                raise InternalError(f"the schedule produced ill-formed IR: {exc.message}", ir=func,
                                    spot=exc.spot) from exc
        self._mod = self._mod.with_function(self._func_name, func)

    def _call(self, kind: str, primitive: Callable[..., Any], args: dict[str, Any], **extra: Any) -> Any:
        resolved = {key: self._resolve(value, kind) for key, value in args.items()}
        try:
            return primitive(self.func, **resolved, **extra)
        except RefcompError:
            raise
        except Exception as exc:  # a primitive must raise ScheduleError; anything else is a bug
            raise InternalError(f"{kind}: {type(exc).__name__}: {exc}", ir=self.func) from exc

    def _named_blocks(self, args: dict[str, Any]) -> dict[str, Any]:
        """Block arguments given by name (TVM allows `sch.compute_inline("B")`) become handles."""
        for key in ("block", "block_or_loop"):
            if isinstance(args.get(key), str):
                args[key] = self.get_block(args[key])
        return args

    def _apply(self, kind: str, primitive: Callable[..., Any], **args: Any) -> Any:
        """Run a transforming or lookup primitive, install its result, record it, return handles."""
        if kind != "get_block":
            args = self._named_blocks(args)
        func, result = self._call(kind, primitive, args)
        self._install(func)
        handles = self._wrap(result)
        self.trace.append(Instruction(kind, dict(args), handles, isinstance(handles, list)))
        return handles

    def _sample(self, kind: str, sampler: Callable[..., Any], **args: Any) -> Any:
        """Run a sampling primitive: record its decision with it, return ExprRV(s)."""
        values, decision = self._call(kind, sampler, args, rng=self._rng)
        handles = [ExprRV(v) for v in values] if isinstance(values, list) else ExprRV(values)
        recorded = dict(args)
        recorded["decision"] = decision
        self.trace.append(Instruction(kind, recorded, handles, isinstance(handles, list)))
        return handles

    # ================================================================== lookup

    def get_block(self, name: str) -> BlockRV:
        """The block called name (exactly one must exist)."""
        return self._apply("get_block", lookup.get_block, name=name)

    def get_loops(self, block: BlockRV) -> list[LoopRV]:
        """The loops above block in its scope, outermost first."""
        return self._apply("get_loops", lookup.get_loops, block=block)

    def get_child_blocks(self, block_or_loop: BlockRV | LoopRV) -> list[BlockRV]:
        """Blocks directly inside a block or loop."""
        return self._apply("get_child_blocks", lookup.get_child_blocks, block_or_loop=block_or_loop)

    def get_producers(self, block: BlockRV) -> list[BlockRV]:
        """Blocks of the same scope that write what block reads, before it."""
        return self._apply("get_producers", lookup.get_producers, block=block)

    def get_consumers(self, block: BlockRV) -> list[BlockRV]:
        """Blocks of the same scope that read what block writes, after it."""
        return self._apply("get_consumers", lookup.get_consumers, block=block)

    # ================================================================== loops

    def split(self, loop: LoopRV, factors: Sequence[int | ExprRV | None], preserve_unit_iters: bool = True,
              disable_predication: bool = False) -> list[LoopRV]:
        """Split a loop into nested loops by factors (one may be None); see primitives.loop.split."""
        return self._apply("split", loop_prims.split, loop=loop, factors=list(factors),
                           preserve_unit_iters=preserve_unit_iters, disable_predication=disable_predication)

    def fuse(self, *loops: LoopRV, preserve_unit_iters: bool = True) -> LoopRV:
        """Fuse a chain of nested loops into one; see primitives.loop.fuse."""
        return self._apply("fuse", loop_prims.fuse, loops=list(loops), preserve_unit_iters=preserve_unit_iters)

    def reorder(self, *loops: LoopRV) -> None:
        """Reorder loops of one chain into the given order; see primitives.loop.reorder."""
        return self._apply("reorder", loop_prims.reorder, loops=list(loops))

    def add_unit_loop(self, block_or_loop: BlockRV | LoopRV) -> LoopRV:
        """Wrap a block or loop in a loop of extent 1."""
        return self._apply("add_unit_loop", loop_prims.add_unit_loop, block_or_loop=block_or_loop)

    # ================================================================== loop kinds, annotations

    def parallel(self, loop: LoopRV) -> None:
        """Run a loop's iterations in parallel (requires independent iterations)."""
        return self._apply("parallel", kinds.parallel, loop=loop)

    def vectorize(self, loop: LoopRV) -> None:
        """Mark a loop for SIMD (requires independent iterations and a constant extent)."""
        return self._apply("vectorize", kinds.vectorize, loop=loop)

    def unroll(self, loop: LoopRV) -> None:
        """Mark a loop to be unrolled."""
        return self._apply("unroll", kinds.unroll, loop=loop)

    def bind(self, loop: LoopRV, thread_axis: str) -> None:
        """Bind a loop to a GPU thread axis such as "threadIdx.x"."""
        return self._apply("bind", kinds.bind, loop=loop, thread_axis=thread_axis)

    def annotate(self, block_or_loop: BlockRV | LoopRV, ann_key: str, ann_val: Any) -> None:
        """Attach an annotation (str, int, float, bool or a sampled ExprRV) to a block or loop."""
        return self._apply("annotate", kinds.annotate, block_or_loop=block_or_loop, ann_key=ann_key,
                           ann_val=ann_val)

    def unannotate(self, block_or_loop: BlockRV | LoopRV, ann_key: str) -> None:
        """Remove an annotation from a block or loop."""
        return self._apply("unannotate", kinds.unannotate, block_or_loop=block_or_loop, ann_key=ann_key)

    # ================================================================== compute location

    def compute_at(self, block: BlockRV, loop: LoopRV, preserve_unit_loops: bool = False) -> None:
        """Move a producer under a loop of its consumers, computing only what they read there."""
        if isinstance(block, str):
            block = self.get_block(block)
        if loop.var is ROOT_VAR:
            return self._apply("compute_at", _leave_in_place, block=block, loop=loop,
                               preserve_unit_loops=preserve_unit_loops)
        if loop.var is INLINE_VAR:
            return self._apply("compute_at", _inline_instead, block=block, loop=loop,
                               preserve_unit_loops=preserve_unit_loops)
        return self._apply("compute_at", compute_location.compute_at, block=block, loop=loop,
                           preserve_unit_loops=preserve_unit_loops)

    def reverse_compute_at(self, block: BlockRV, loop: LoopRV, preserve_unit_loops: bool = False) -> None:
        """Move a consumer under a loop of its producers, consuming what one iteration produces."""
        return self._apply("reverse_compute_at", compute_location.reverse_compute_at, block=block, loop=loop,
                           preserve_unit_loops=preserve_unit_loops)

    def compute_inline(self, block: BlockRV) -> None:
        """Inline a complete block into its consumers and remove it."""
        return self._apply("compute_inline", compute_location.compute_inline, block=block)

    def reverse_compute_inline(self, block: BlockRV) -> None:
        """Fold a consumer into its single producer and remove it."""
        return self._apply("reverse_compute_inline", compute_location.reverse_compute_inline, block=block)

    # ================================================================== storage

    def cache_read(self, block: BlockRV, read_buffer_index: int, storage_scope: str,
                   consumer_blocks: Sequence[BlockRV] | None = None) -> BlockRV:
        """Copy a buffer the block reads into storage_scope; its readers read the copy."""
        args: dict[str, Any] = dict(block=block, read_buffer_index=read_buffer_index, storage_scope=storage_scope)
        if consumer_blocks is not None:
            args["consumer_blocks"] = list(consumer_blocks)
        return self._apply("cache_read", storage.cache_read, **args)

    def cache_write(self, block: BlockRV, write_buffer_index: int, storage_scope: str) -> BlockRV:
        """Make the block write a buffer in storage_scope, copied back to the original after it."""
        return self._apply("cache_write", storage.cache_write, block=block, write_buffer_index=write_buffer_index,
                           storage_scope=storage_scope)

    def set_scope(self, block: BlockRV, buffer_index: int, storage_scope: str) -> None:
        """Change the memory scope of an allocated buffer the block writes."""
        return self._apply("set_scope", storage.set_scope, block=block, buffer_index=buffer_index,
                           storage_scope=storage_scope)

    def storage_align(self, block: BlockRV, buffer_index: int, axis: int, factor: int, offset: int) -> None:
        """Pad the stride of one axis of an allocated buffer to k * factor + offset."""
        return self._apply("storage_align", storage.storage_align, block=block, buffer_index=buffer_index,
                           axis=axis, factor=factor, offset=offset)

    def transform_layout(self, block: BlockRV, buffer: Any, index_map: Callable[..., Any] | IndexMap,
                         pad_value: int | float | None = None) -> None:
        """Store a buffer (("read", i), ("write", i) or its name) in the layout index_map gives;
        padding added by the map is filled with pad_value."""
        if isinstance(buffer, tuple):
            buffer = list(buffer)
        if isinstance(block, str):
            block = self.get_block(block)
        if not isinstance(index_map, IndexMap):
            target = storage.resolve_buffer(self.func, self._resolve(block, "transform_layout"), buffer,
                                            "transform_layout")
            index_map = IndexMap.from_callable(index_map, target.ndim)
        extra = {} if pad_value is None else {"pad_value": pad_value}
        return self._apply("transform_layout", storage.transform_layout, block=block, buffer=buffer,
                           index_map=index_map, **extra)

    def prefetch(self, loop: LoopRV, buffer: str, index_map: Callable[..., Any] | IndexMap,
                 write: bool = False) -> None:
        """Hint, at the start of each iteration of loop, that buffer[index_map(loops)] is accessed
        soon (the loops from the outermost down to loop; each index clamped into its dim)."""
        if not isinstance(index_map, IndexMap):
            index_map = IndexMap.from_callable(index_map)
        return self._apply("prefetch", prefetch_prims.prefetch, loop=loop, buffer=buffer, index_map=index_map,
                           write=write)

    def pad_einsum(self, block: BlockRV, padding: Sequence[int]) -> None:
        """Pad an einsum block's iteration domain to multiples of padding, with padded copies."""
        return self._apply("pad_einsum", storage.pad_einsum, block=block, padding=list(padding))

    # ================================================================== reduction

    def decompose_reduction(self, block: BlockRV, loop: LoopRV) -> BlockRV:
        """Split a reduction's init into its own block placed before loop."""
        return self._apply("decompose_reduction", reduction.decompose_reduction, block=block, loop=loop)

    def rfactor(self, loop: LoopRV, factor_axis: int) -> BlockRV:
        """Factor a reduction over loop into partial results plus a write-back; returns the rf block."""
        return self._apply("rfactor", reduction.rfactor, loop=loop, factor_axis=factor_axis)

    # ================================================================== sampling

    def sample_perfect_tile(self, loop: LoopRV, n: int, max_innermost_factor: int = 16,
                            decision: Sequence[int] | None = None) -> list[ExprRV]:
        """n tile sizes whose product is the loop extent (seeded; the decision is recorded)."""
        return self._sample("sample_perfect_tile", sampling.sample_perfect_tile, loop=loop, n=n,
                            max_innermost_factor=max_innermost_factor,
                            decision=list(decision) if decision is not None else None)

    def sample_categorical(self, candidates: Sequence[int], probs: Sequence[float],
                           decision: int | None = None) -> ExprRV:
        """One of candidates drawn with probs (seeded; the decision is recorded)."""
        return self._sample("sample_categorical", sampling.sample_categorical, candidates=list(candidates),
                            probs=list(probs), decision=decision)

    def sample_compute_location(self, block: BlockRV, decision: int | None = None) -> LoopRV:
        """A loop to compute_at the block under (or markers for inline / stay), drawn among legal ones."""
        block = self._named_blocks({"block": block})["block"]
        location, chosen = self._call("sample_compute_location", sampling.sample_compute_location,
                                      dict(block=block, decision=decision), rng=self._rng)
        handle = LoopRV(location.loop_var) if isinstance(location, For) else LoopRV(
            INLINE_VAR if location == -2 else ROOT_VAR)
        self.trace.append(Instruction("sample_compute_location", dict(block=block, decision=chosen), handle))
        return handle

    # ================================================================== tensorization
    # Each delegates to its module in loops/primitives.

    def blockize(self, target: LoopRV | Sequence[BlockRV], preserve_unit_iters: bool = True) -> BlockRV:
        """Wrap the subtree under a loop (or a list of blocks) in a new outer block."""
        from .primitives import blockize as module

        return self._apply("blockize", module.blockize, target=target, preserve_unit_iters=preserve_unit_iters)

    def tensorize(self, block_or_loop: BlockRV | LoopRV, intrin: str, preserve_unit_iters: bool = True) -> None:
        """Replace a block (or the subtree under a loop) by a registered tensor intrinsic."""
        from .primitives import tensorize as module

        return self._apply("tensorize", module.tensorize, block_or_loop=block_or_loop, intrin=intrin,
                           preserve_unit_iters=preserve_unit_iters)
