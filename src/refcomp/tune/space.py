"""Design spaces: schedule rules with random decisions, applied to every block of a PrimFunc.

A rule is a plain object with `apply(sch, block) -> None` that may call sampling primitives
(`sample_perfect_tile`, `sample_categorical`, ...); every decision lands in the trace, so a
sampled schedule is a trace that replays exactly, and a mutator can change one decision and
replay the rest.  A rule that does not fit a block leaves the schedule unchanged (it checks
first, or the primitive raises and the whole sample is discarded by the caller).

`DesignSpace(rules)` samples a schedule: first the function-level rules (`apply_function(sch,
default)`: a whole-kernel structure), then every block rule, in order, on every block it applies
to, then the postprocessing rules (`apply_postprocess(sch, func, default)`: hints over the
finished loop nest).
`default_rules(target)` is the set for a target; users add their own rule objects to the list.
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Protocol, Sequence

from ..ast import Block, BlockRealize, PrimFunc
from ..ast.functor import collect, free_vars
from ..errors import RefcompError, ScheduleError
from ..loops.schedule import BlockRV, Schedule


class ScheduleRule(Protocol):
    """A rule of a design space: schedules one block, with random decisions recorded in the trace."""

    def apply(self, sch: Schedule, block: BlockRV) -> None: ...


def _iter_kinds(block: Block) -> list[str]:
    return [iv.kind for iv in block.iter_vars]


def _is_reduction(block: Block) -> bool:
    return "reduce" in _iter_kinds(block)


@dataclass
class MultiLevelTiling:
    """Multi-level tiling of a block whose loops are all spatial or reduction, in the CPU structure
    `SSRSRS`: spatial loops split in 4 levels, reduction loops in 2, ordered
    S0 S1 R0 S2 R1 S3, with a write cache (scope "local") written back under S1.
    The outer spatial levels are fused and run in parallel when `parallel` is set."""

    structure: str = "SSRSRS"
    max_innermost_factor: int = 64
    write_cache: bool = True
    parallel: bool = True
    restructures = True  # left out after a function-level rule (DesignSpace)

    def apply(self, sch: Schedule, block: BlockRV) -> None:
        node = sch.get(block)
        if not _is_reduction(node) or len(node.iter_vars) != len(sch.get_loops(block)):
            return
        kinds = _iter_kinds(node)
        if any(kind not in ("spatial", "reduce") for kind in kinds):
            return
        s_levels, r_levels = self.structure.count("S"), self.structure.count("R")
        loops = sch.get_loops(block)
        tiles: dict[str, list[list]] = {"S": [], "R": []}
        for loop, kind in zip(loops, kinds):
            levels = s_levels if kind == "spatial" else r_levels
            factors = sch.sample_perfect_tile(loop, levels, self.max_innermost_factor if kind == "spatial" else 16)
            tiles["S" if kind == "spatial" else "R"].append(sch.split(loop, factors))
        order, used = [], {"S": 0, "R": 0}
        for letter in self.structure:
            level = used[letter]
            used[letter] += 1
            order.extend(parts[level] for parts in tiles[letter])
        sch.reorder(*order)
        if self.write_cache and tiles["S"]:
            cache = sch.cache_write(block, 0, "local")
            second_spatial = [parts[1] for parts in tiles["S"]][-1]
            sch.reverse_compute_at(cache, second_spatial)
        if self.parallel and tiles["S"]:
            outers = [parts[0] for parts in tiles["S"]]
            sch.parallel(sch.fuse(*outers) if len(outers) > 1 else outers[0])


@dataclass
class ParallelVectorizeUnroll:
    """Vectorize the innermost loop of a block when it is spatial and the block writes along it
    contiguously; unroll the innermost reduction loop with a sampled choice (0 = leave it)."""

    unroll_choices: Sequence[int] = (0, 1)
    max_vector_extent: int = 64
    split_lanes: Sequence[int] = (8, 16)

    def apply(self, sch: Schedule, block: BlockRV) -> None:
        self._apply(sch, block, default=False)

    def apply_default(self, sch: Schedule, block: BlockRV) -> None:
        self._apply(sch, block, default=True)

    def _apply(self, sch: Schedule, block: BlockRV, default: bool) -> None:
        node = sch.get(block)
        loops = sch.get_loops(block)
        if not loops:
            return
        innermost = sch.get(loops[-1])
        bindings = _loop_bindings(sch.func, node)
        kind = bindings.get(id(innermost.loop_var))
        extent = getattr(innermost.extent, "value", None)
        if kind == "spatial" and isinstance(extent, int) and 1 < extent <= self.max_vector_extent \
                and innermost.kind == "serial":
            try:
                sch.vectorize(loops[-1])
            except ScheduleError:
                pass
        elif kind == "spatial" and isinstance(extent, int) and extent > self.max_vector_extent \
                and innermost.kind == "serial":
            lanes = [n for n in self.split_lanes if extent % n == 0]
            if lanes:
                # a long spatial loop: split off a vector of lanes (sampled; the first is preferred)
                width = sch.sample_categorical(lanes, [1.0] * len(lanes), decision=0 if default else None)
                try:
                    sch.vectorize(sch.split(loops[-1], [None, width])[-1])
                except ScheduleError:
                    pass
        if _is_reduction(node) and len(self.unroll_choices) > 1:
            reduce_loops = [l for l in loops if bindings.get(id(sch.get(l).loop_var)) == "reduce"]
            choice = sch.sample_categorical(list(self.unroll_choices), [1.0] * len(self.unroll_choices),
                                            decision=0 if default else None)
            if int(choice) and reduce_loops and sch.get(reduce_loops[-1]).kind == "serial":
                extent = getattr(sch.get(reduce_loops[-1]).extent, "value", None)
                if isinstance(extent, int) and extent <= 16:
                    sch.unroll(reduce_loops[-1])


def _loop_bindings(func: PrimFunc, block: Block) -> dict[int, str]:
    """For each loop var a block's bindings use: "reduce" if it feeds a reduction iter var, else "spatial"."""
    realize = next(r for r in collect(func.body, BlockRealize) if r.block.name == block.name)
    kinds: dict[int, str] = {}
    for iv, value in zip(block.iter_vars, realize.iter_values):
        for var in free_vars(value):
            if kinds.get(id(var)) != "reduce":
                kinds[id(var)] = "reduce" if iv.kind == "reduce" else "spatial"
    return kinds


def default_rules(target: str = "c") -> list[ScheduleRule]:
    """The rules for a target.  CUDA (`cuda ...`): `gpu_rules.gpu_rules()` -- GPU row reduction,
    auto-inline, cross-thread reduction, GPU multi-level tiling SSSRRSRS, auto-bind.  CPU: graph.build's
    own default schedule, the conv and batched A @ B^T tilings around their recipes and the row-reduction
    structure (function-level rules), auto-inline, tensorize tiling (where a tile intrinsic this CPU
    runs matches), multi-level tiling SSRSRS (the other reductions), random compute location,
    parallel outer loops, parallel-vectorize-unroll, and after them the row prefetch hints (a
    postprocessing rule)."""
    if target.split()[:1] == ["cuda"]:
        from .gpu_rules import gpu_rules

        return gpu_rules()
    from .rules import (AutoInline, BatchedMatmulTiling, ConvTiling, GraphDefault, ParallelOuter,
                        RandomComputeLocation, RowPrefetch, RowReductionDefault, TensorizeTiling)

    return [GraphDefault(), ConvTiling(), BatchedMatmulTiling(), RowReductionDefault(), AutoInline(), TensorizeTiling(), MultiLevelTiling(),
            RandomComputeLocation(), ParallelOuter(), ParallelVectorizeUnroll(), RowPrefetch()]


def _block_names(func: PrimFunc) -> set[str]:
    return {b.name for b in collect(func.body, Block)}


@dataclass
class DesignSpace:
    """Samples schedules of a function: every rule on every block (blocks found by name up front)."""

    rules: list[ScheduleRule] = field(default_factory=default_rules)

    def sample(self, func: PrimFunc, seed: int) -> Schedule:
        """One sampled schedule; raises ScheduleError when a rule fails for these decisions."""
        return self._sample(func, seed, default=False)

    def default_sample(self, func: PrimFunc, seed: int = 0) -> Schedule:
        """The schedule the rules make with their preferred decisions (rules with `apply_default`;
        the others sample as usual): the rule-based default the search starts from."""
        return self._sample(func, seed, default=True)

    def _sample(self, func: PrimFunc, seed: int, default: bool) -> Schedule:
        sch = Schedule(func, seed=seed)
        restructured = False
        for rule in self.rules:
            whole = getattr(rule, "apply_function", None)
            if whole is not None:
                sch, applied = whole(sch, default)
                if applied and getattr(rule, "complete", False):
                    return sch  # a whole schedule (GraphDefault): nothing else to add
                restructured = restructured or applied
        names = [b.name for b in collect(func.body, Block) if b.name != "root"]
        for name in names:
            for rule in self.rules:
                if getattr(rule, "apply_function", None) is not None or not hasattr(rule, "apply"):
                    continue
                if restructured and getattr(rule, "restructures", False):
                    continue  # a function rule placed every block already
                if name not in _block_names(sch.func):
                    break  # inlined, or replaced by a rule (a tensorized tile)
                apply = getattr(rule, "apply_default", None) if default else None
                (apply or rule.apply)(sch, sch.get_block(name))
        for rule in self.rules:
            post = getattr(rule, "apply_postprocess", None)
            if post is not None:
                sch = post(sch, func, default)
        return sch

    def sample_many(self, func: PrimFunc, count: int, rng: random.Random, attempts: int = 10) -> list[Schedule]:
        """Up to count sampled schedules (samples that a primitive rejects are dropped)."""
        result = []
        for _ in range(count * attempts):
            if len(result) == count:
                break
            try:
                result.append(self.sample(func, rng.randrange(2**31)))
            except RefcompError:
                continue
        return result


# ----------------------------------------------------------------------------- mutators

SAMPLING_KINDS = ("sample_perfect_tile", "sample_categorical", "sample_compute_location")


@dataclass
class MutateTileSize:
    """Re-draw the decision of one sample_perfect_tile: move a factor of 2..7 from one level to another."""

    kind: str = "sample_perfect_tile"

    def mutate(self, decision: list[int], rng: random.Random, **_: object) -> list[int] | None:
        donors = [i for i, d in enumerate(decision) if d > 1]
        if not donors or len(decision) < 2:
            return None
        src = rng.choice(donors)
        primes = [p for p in (2, 3, 5, 7) if decision[src] % p == 0] or [decision[src]]
        factor = rng.choice(primes)
        dst = rng.choice([i for i in range(len(decision)) if i != src])
        new = list(decision)
        new[src] //= factor
        new[dst] *= factor
        return new


@dataclass
class MutateCategorical:
    """Re-draw one sample_categorical decision (the unroll choice and the like) to another index."""

    kind: str = "sample_categorical"

    def mutate(self, decision: int, rng: random.Random, args: dict | None = None, **_: object) -> int | None:
        count = len(args.get("candidates", [])) if args else 0
        others = [i for i in range(count) if i != decision]
        return rng.choice(others) if others else None


def default_mutators() -> list:
    """Tile size and categorical (unroll) mutators."""
    return [MutateTileSize(), MutateCategorical()]


def _outputs(inst: dict) -> list[str]:
    out = inst.get("outputs")
    return [o for o in (out if isinstance(out, list) else [out]) if isinstance(o, str)]


def _referenced_handles(trace: dict) -> set[str]:
    """The handles ({"rv": name}) that instructions of trace take as arguments."""
    found: set[str] = set()

    def walk(value) -> None:
        if isinstance(value, dict):
            if isinstance(value.get("rv"), str) and len(value) == 1:
                found.add(value["rv"])
            else:
                for item in value.values():
                    walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    for inst in trace["instructions"]:
        walk(inst["args"])
    return found


def _neighbour_decisions(inst: dict) -> list:
    """The decisions one step from inst's: a categorical's next and previous index; a perfect tile
    with a factor 2 moved between two adjacent levels."""
    decision = inst["args"]["decision"]
    if inst["kind"] == "sample_categorical":
        count = len(inst["args"].get("candidates", []))
        return [d for d in (decision + 1, decision - 1) if 0 <= d < count]
    if inst["kind"] == "sample_perfect_tile" and isinstance(decision, list):
        found = []
        for level in range(len(decision) - 1):
            for src, dst in ((level, level + 1), (level + 1, level)):
                if decision[src] % 2 == 0:
                    new = list(decision)
                    new[src] //= 2
                    new[dst] *= 2
                    found.append(new)
        return found
    return []


def neighbours(func: PrimFunc, sch: Schedule, limit: int) -> list[Schedule]:
    """Up to `limit` schedules one step from sch (its default, say) in one decision that later
    instructions read (a tile size, as `mutate_trace` changes): each categorical moved to an
    adjacent candidate, each perfect tile with a factor 2 moved between adjacent levels; those that
    replay, in the order of the trace's decisions.  Structure decisions (which instructions follow)
    are not moved: replaying the rest would not follow them."""
    trace = json.loads(sch.trace.to_json())
    used = _referenced_handles(trace)
    found: list[Schedule] = []
    seen = {sch.trace.to_json()}
    for index, inst in enumerate(trace["instructions"]):
        if inst["kind"] not in SAMPLING_KINDS or not any(out in used for out in _outputs(inst)):
            continue
        for decision in _neighbour_decisions(inst):
            if len(found) >= limit:
                return found
            changed = json.loads(json.dumps(trace))
            changed["instructions"][index]["args"]["decision"] = decision
            try:
                near = Schedule.from_trace(func, changed)
            except RefcompError:
                continue
            if near.trace.to_json() not in seen:
                seen.add(near.trace.to_json())
                found.append(near)
    return found


def mutate_trace(func: PrimFunc, trace: dict, mutators: Sequence, rng: random.Random,
                 attempts: int = 8, tried: set[str] | None = None) -> Schedule | None:
    """A schedule whose trace differs from trace in one decision, replayed from the start; None
    when no mutation replays (a primitive rejects every changed decision tried).  `tried` holds
    the changed traces replayed before (JSON text); they are not replayed again."""
    by_kind = {m.kind: m for m in mutators}
    used = _referenced_handles(trace)
    # only decisions whose value a later instruction reads: a decision that chose the structure
    # (which instructions follow) is not replayed by them, so changing it would change nothing
    spots = [i for i, inst in enumerate(trace["instructions"]) if inst["kind"] in by_kind
             and any(out in used for out in _outputs(inst))]
    if not spots:
        return None
    for _ in range(attempts):
        index = rng.choice(spots)
        inst = trace["instructions"][index]
        new = by_kind[inst["kind"]].mutate(inst["args"]["decision"], rng, args=inst["args"])
        if new is None or new == inst["args"]["decision"]:
            continue
        changed = json.loads(json.dumps(trace))
        changed["instructions"][index]["args"]["decision"] = new
        if tried is not None:
            text = json.dumps(changed, sort_keys=True)
            if text in tried:
                continue
            tried.add(text)
        try:
            return Schedule.from_trace(func, changed)
        except RefcompError:
            continue
    return None
