"""Sampling primitives: seeded random choices whose decisions are recorded in the trace.

Each sampler takes `rng` (the schedule's random.Random) and returns (values, decision); given a
decision, it checks it is still valid and reuses it, so replaying a trace is deterministic.
"""
from __future__ import annotations

import random
from functools import lru_cache
from typing import Sequence

from ...ast import Block, For, PrimFunc
from ...errors import RefcompError, ScheduleError
from .legality import const_int
from .lookup import get_consumers, locate_block, locate_loop


@lru_cache(maxsize=256)
def _factorizations(extent: int, n: int) -> tuple[tuple[int, ...], ...]:
    """Every ordered n-tuple of positive ints whose product is extent."""
    if n == 1:
        return ((extent,),)
    result = []
    for first in range(1, extent + 1):
        if extent % first == 0:
            for rest in _factorizations(extent // first, n - 1):
                result.append((first,) + rest)
    return tuple(result)


def sample_perfect_tile(func: PrimFunc, loop: For, n: int, max_innermost_factor: int = 16,
                        decision: Sequence[int] | None = None, *, rng: random.Random):
    """n factors whose product is the loop's (constant) extent, the innermost at most
    max_innermost_factor, drawn uniformly among all such tilings.  Requires n >= 1."""
    locate_loop(func, loop, "sample_perfect_tile")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ScheduleError(f"sample_perfect_tile: n: expected a positive int, got {n!r}", ir=func)
    if isinstance(max_innermost_factor, bool) or not isinstance(max_innermost_factor, int) or max_innermost_factor < 1:
        raise ScheduleError(f"sample_perfect_tile: max_innermost_factor: expected a positive int, got "
                            f"{max_innermost_factor!r}", ir=func)
    extent = const_int(loop.extent)
    if extent is None or extent < 1:
        raise ScheduleError(f"sample_perfect_tile: loop {loop.loop_var.name} needs a constant positive extent",
                            ir=func, spot=loop)
    if decision is not None:
        decision = [int(d) for d in decision]
        product = 1
        for d in decision:
            product *= d
        if len(decision) != n or product != extent or min(decision) < 1 or decision[-1] > max_innermost_factor:
            raise ScheduleError(f"sample_perfect_tile: decision {decision} is not a perfect {n}-tiling of "
                                f"{extent} with innermost <= {max_innermost_factor}", ir=func, spot=loop)
        return list(decision), list(decision)
    candidates = [t for t in _factorizations(extent, n) if t[-1] <= max_innermost_factor]
    if not candidates:
        raise ScheduleError(f"sample_perfect_tile: no {n}-tiling of {extent} has an innermost factor <= "
                            f"{max_innermost_factor}", ir=func, spot=loop)
    choice = list(rng.choice(candidates))
    return choice, choice


def sample_categorical(func: PrimFunc, candidates: Sequence[int], probs: Sequence[float],
                       decision: int | None = None, *, rng: random.Random):
    """One of candidates (ints), drawn with the given probabilities; the decision is its index."""
    candidates, probs = list(candidates), list(probs)
    if not candidates or len(candidates) != len(probs):
        raise ScheduleError(f"sample_categorical: expected as many probs as candidates (at least one), got "
                            f"{len(candidates)} and {len(probs)}", ir=func)
    if any(isinstance(c, bool) or not isinstance(c, int) for c in candidates):
        raise ScheduleError(f"sample_categorical: candidates: expected ints, got {candidates}", ir=func)
    if any(p < 0 for p in probs) or sum(probs) <= 0:
        raise ScheduleError(f"sample_categorical: probs: expected non-negative numbers with a positive sum, got "
                            f"{probs}", ir=func)
    if decision is not None:
        if isinstance(decision, bool) or not isinstance(decision, int) or not 0 <= decision < len(candidates):
            raise ScheduleError(f"sample_categorical: decision {decision!r} is not an index into the candidates",
                                ir=func)
        return candidates[decision], decision
    index = rng.choices(range(len(candidates)), weights=probs)[0]
    return candidates[index], index


def compute_location_candidates(func: PrimFunc, block: Block) -> list[int]:
    """Valid decisions for sample_compute_location: -2 (inline), -1 (stay), k (k-th loop of the
    first consumer), each kept only when that primitive accepts it on the current IR."""
    from .compute_location import compute_at, compute_inline

    locate_block(func, block, "sample_compute_location")
    result = []
    try:
        compute_inline(func, block)
        result.append(-2)
    except RefcompError:
        pass
    result.append(-1)
    _, consumers = get_consumers(func, block)
    if consumers:
        loops = locate_block(func, consumers[0], "sample_compute_location").loops
        for k, loop in enumerate(loops):
            try:
                compute_at(func, block, loop)
            except RefcompError:
                continue
            result.append(k)
    return result


def sample_compute_location(func: PrimFunc, block: Block, decision: int | None = None, *, rng: random.Random):
    """Where to compute block: -2 inline, -1 where it is, k >= 0 at the k-th loop of its first
    consumer; drawn uniformly among the locations the primitives accept.  Returns (loop or marker, decision)."""
    candidates = compute_location_candidates(func, block)
    if decision is not None:
        if decision not in candidates:
            raise ScheduleError(f"sample_compute_location: decision {decision!r} is not a valid location for block "
                                f"{block.name} (valid: {candidates})", ir=func)
    else:
        decision = rng.choice(candidates)
    if decision < 0:
        return decision, decision
    _, consumers = get_consumers(func, block)
    loop = locate_block(func, consumers[0], "sample_compute_location").loops[decision]
    return loop, decision
