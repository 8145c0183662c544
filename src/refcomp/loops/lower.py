"""Lowering: a block-level PrimFunc to the loop-and-pointer form that the C and CUDA emitters print.

    lowered = lower(func)

runs, in order, `lower_blocks` (blocks -> loops, init under the first reduction iteration,
predicates -> if, alloc_buffers -> Allocate), `flatten_buffers` (1-D buffers and indices),
`simplify` (constant folding, index arithmetic, branches decided by loop ranges, unit loops gone),
`shift_stages` (loops annotated `stage_shift` software-pipelined across their iterations),
`vectorize` (vectorized loops -> Ramp/Broadcast vector IR, with scalar tails) and `simplify` again.
Each pass is a pure function PrimFunc -> PrimFunc in its own module under `refcomp.loops.passes`
(vectorize: `refcomp.loops.vectorize`); each module's docstring says what it requires and
guarantees.

A target adds its own steps through `LoweringHooks` (the CUDA backend: kernel normal form, on-chip
buffer placement before flattening, barriers after): passes run at the three declared points,
`before_blocks` (the block-level function), `after_blocks` (loops exist, buffers are still
multi-dimensional) and `after_lowering` (the final form).  The driver passes the hooks of the
target it builds for.

With `REFCOMP_DEBUG=1` in the environment, or the logger "refcomp.lower" at DEBUG level, the IR
after each pass is printed (to stderr, or to the log).

The contract for emitters -- what a lowered PrimFunc may contain:
  statements  For of every kind, with its annotations: serial (also the chunk loops and scalar
              tails vectorize makes, and vectorized loops whose iterations might interact),
              parallel, unrolled, thread_binding (never removed, even of extent 1), and
              vectorized -- kept only where the body could not become vector code but its
              iterations touch disjoint memory and have no effects, so `#pragma omp simd` is
              valid for it; SeqStmt, IfThenElse, BufferStore, Evaluate (call_extern,
              tvm_storage_sync, prefetch, or the no-op `Evaluate(0)`), LetStmt (scalar or vector value),
              Allocate, AssertStmt, While.  Never Block, BlockRealize or MatchBufferRegion.
  buffers     one-dimensional, compact, offset 0, scope as scheduled ("global", "shared", "local",
              ...); parameters are flat too, and `func.attrs["original_buffers"]` maps each one to
              the buffer it stood for (original shape, strides, symbolic dims): callers pass
              arrays of the original shapes.  Other function attrs are kept.
  expressions scalars as in the core IR, plus vector forms with power-of-two lane counts of at most
              vector_bytes per vector: Ramp, Broadcast, vector arithmetic (integer floordiv and
              floormod included), comparisons, logic, Select, Cast, Let, elementwise math Calls on
              vectors, BufferLoad with a vector index (a Ramp of stride 1 is contiguous,
              anything else a gather), BufferStore with a Ramp index of non-zero constant stride
              (stride 1 contiguous, else a scatter to distinct addresses) and a vector value,
              `if_then_else` with a scalar condition and vector arms.
"""
from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from typing import Callable

from ..ast import IRModule, PrimFunc
from .passes.bind_repeated_math import bind_repeated_math
from .passes.flatten_buffers import flatten_buffers, original_buffer
from .passes.lower_blocks import lower_blocks
from .passes.simplify import simplify
from .passes.stage_shift import shift_stages
from .vectorize import vectorize

logger = logging.getLogger("refcomp.lower")

Pass = Callable[[PrimFunc], PrimFunc]

PIPELINE: tuple[tuple[str, Pass], ...] = (
    ("lower_blocks", lower_blocks),
    ("flatten_buffers", flatten_buffers),
    ("simplify", simplify),
    ("shift_stages", shift_stages),
    ("vectorize", vectorize),
    ("simplify_vector", simplify),
    ("bind_repeated_math", bind_repeated_math),
)


@dataclass(frozen=True)
class LoweringHooks:
    """A target's extra lowering passes, each run at one declared point of PIPELINE."""

    before_blocks: tuple[Pass, ...] = ()  # before lower_blocks: blocks are still there
    after_blocks: tuple[Pass, ...] = ()  # after lower_blocks: loops, multi-dimensional buffers
    after_lowering: tuple[Pass, ...] = ()  # after the whole pipeline: the form the emitter prints


NO_HOOKS = LoweringHooks()

__all__ = ["NO_HOOKS", "PIPELINE", "LoweringHooks", "lower", "original_buffer"]


def lower(func: PrimFunc | IRModule, *, after_pass: Callable[[str, PrimFunc], None] | None = None,
          vector_bytes: int | None = None, hooks: LoweringHooks = NO_HOOKS):
    """func lowered for the emitters (an IRModule: each PrimFunc in it, other functions unchanged).

    after_pass(name, func), when given, is called with the IR after each pass (tests use it to
    run the well-formedness checker or the interpreter between passes).  vector_bytes is the
    widest vector `vectorize` makes: by default 16 (CUDA's float4) for a function with GPU thread
    bindings, else 64 (an AVX-512 register).  hooks are the target's extra passes.
    """
    if isinstance(func, IRModule):
        lowered = {name: lower(f, after_pass=after_pass, vector_bytes=vector_bytes, hooks=hooks)
                   if isinstance(f, PrimFunc) else f for name, f in func.functions.items()}
        return func.with_(functions=lowered)
    if not isinstance(func, PrimFunc):
        raise TypeError(f"lower expects a PrimFunc or IRModule, got {type(func).__name__}")
    debug = debug_enabled()

    def step(name: str, run: Pass, func: PrimFunc) -> PrimFunc:
        func = run(func, vector_bytes=vector_bytes) if run is vectorize else run(func)
        if after_pass is not None:
            after_pass(name, func)
        if debug:
            _show(name, func)
        return func

    for hook in hooks.before_blocks:
        func = step(_hook_name(hook), hook, func)
    for name, run in PIPELINE:
        func = step(name, run, func)
        if name == "lower_blocks":
            for hook in hooks.after_blocks:
                func = step(_hook_name(hook), hook, func)
    for hook in hooks.after_lowering:
        func = step(_hook_name(hook), hook, func)
    return func


def _hook_name(hook: Pass) -> str:
    return getattr(hook, "__name__", type(hook).__name__)


def debug_enabled() -> bool:
    """True when the IR after each pass is to be shown (REFCOMP_DEBUG=1, or the logger at DEBUG)."""
    return os.environ.get("REFCOMP_DEBUG", "") not in ("", "0") or logger.isEnabledFor(logging.DEBUG)


def _show(name: str, func: PrimFunc) -> None:
    message = f"--- IR after {name} ({func.name})\n{func.script()}"
    if os.environ.get("REFCOMP_DEBUG", "") not in ("", "0"):
        print(message, file=sys.stderr)
    else:
        logger.debug(message)
