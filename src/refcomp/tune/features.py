"""Features of a scheduled function for the cost model, read from its lowered IR.

For every buffer store of the lowered function (loops, flat buffers, vector Ramps): the loop
nest around it (number of loops, total iterations, the parallel extent, the innermost extent
and whether it is unrolled), its vector width, its arithmetic mix (adds, multiplies, divisions,
calls), and for the store and each load the stride along the innermost loop (0: reused,
1: contiguous, more: strided) and the reuse (iterations of enclosing loops the index does not
depend on).  The function's vector is the features of its heaviest store (most iterations)
followed by totals over all stores; every count enters as log2(1 + x).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from ..ast import PrimFunc
from ..ast import expr as E
from ..ast import stmt as S
from ..ast.functor import free_vars
from ..ast.node import Node
from ..shape.evaluate import evaluate

STORE_FEATURES = ("loops", "iterations", "parallel", "innermost", "unrolled", "lanes",
                  "adds", "muls", "divs", "calls", "loads",
                  "stride0", "stride1", "strided", "max_stride", "reuse")
FEATURE_NAMES = STORE_FEATURES + ("stores", "total_iterations", "total_arith")


def _log(x: float) -> float:
    return math.log2(1.0 + max(0.0, x))


def _const(expr: Any) -> int | None:
    value = getattr(expr, "value", None)
    return value if isinstance(value, int) else None


def _nodes(node: Any, kind: type) -> list:
    found: list = []

    def walk(value: Any) -> None:
        if isinstance(value, kind):
            found.append(value)
        if isinstance(value, Node):
            for field in dataclasses.fields(value):
                walk(getattr(value, field.name))
        elif isinstance(value, (tuple, list)):
            for item in value:
                walk(item)
    walk(node)
    return found


def _arith(value: Any, kinds: type | tuple) -> int:
    """Operations of the given kinds on floating-point values (index arithmetic is not counted)."""
    return sum(1 for node in _nodes(value, kinds) if str(node.dtype).startswith(("float", "bfloat")))


def _stride(index: Any, loops: list[S.For]) -> int | None:
    """How far index moves when the innermost serial loop (or a Ramp's lane) advances by one."""
    if isinstance(index, E.Ramp):
        return _const(index.stride)
    if not loops:
        return 0
    inner = loops[-1].loop_var
    env = {v: 0 for v in free_vars(index)}
    try:
        at0 = evaluate(index, env)
        env[inner] = 1
        at1 = evaluate(index, env)
        return int(at1 - at0)
    except Exception:  # an index the evaluator cannot take (a load inside it): unknown stride
        return None


def _access_features(indices: tuple, loops: list[S.For]) -> tuple[int, int, int, int, float]:
    """(stride 0?, stride 1?, strided?, |stride|, log2 reuse) of one access."""
    index = indices[0] if len(indices) == 1 else None
    stride = _stride(index, loops) if index is not None else None
    used = {id(v) for i in indices for v in free_vars(i.base if isinstance(i, E.Ramp) else i)}
    reuse = sum(_log(_const(l.extent) or 1) for l in loops if id(l.loop_var) not in used)
    if stride is None:
        return 0, 0, 1, 0, reuse
    return int(stride == 0), int(abs(stride) == 1), int(abs(stride) > 1), abs(stride), reuse


def _store_features(store: S.BufferStore, loops: list[S.For]) -> list[float]:
    extents = [_const(l.extent) or 1 for l in loops]
    iterations = float(np.prod(extents)) if extents else 1.0
    parallel = float(np.prod([e for e, l in zip(extents, loops) if l.kind == "parallel"] or [1]))
    lanes = store.indices[0].lanes if len(store.indices) == 1 and isinstance(store.indices[0], E.Ramp) else 1
    value = store.value
    adds = _arith(value, (E.Add, E.Sub))
    muls = _arith(value, E.Mul)
    divs = _arith(value, (E.Div, E.FloorDiv, E.FloorMod))
    calls = len(_nodes(value, E.Call))
    loads = _nodes(value, E.BufferLoad)
    accesses = [_access_features(store.indices, loops)] + [_access_features(l.indices, loops) for l in loads]
    return [
        _log(len(loops)), _log(iterations), _log(parallel), _log(extents[-1] if extents else 1),
        float(bool(loops) and loops[-1].kind == "unroll"), _log(lanes),
        _log(adds * lanes), _log(muls * lanes), _log(divs), _log(calls), _log(len(loads)),
        float(sum(a[0] for a in accesses)), float(sum(a[1] for a in accesses)), float(sum(a[2] for a in accesses)),
        _log(max(a[3] for a in accesses)), float(sum(a[4] for a in accesses)),
    ]


def extract_features(lowered: PrimFunc) -> np.ndarray:
    """The feature vector (len(FEATURE_NAMES) floats) of a lowered PrimFunc."""
    rows: list[tuple[float, list[float], float]] = []  # (iterations, features, arithmetic operations)

    def walk(value: Any, loops: list[S.For]) -> None:
        if isinstance(value, S.For):
            walk(value.body, loops + [value])
            return
        if isinstance(value, S.BufferStore):
            feats = _store_features(value, loops)
            iterations = float(np.prod([_const(l.extent) or 1 for l in loops])) if loops else 1.0
            arith = (2.0 ** feats[6] - 1 + 2.0 ** feats[7] - 1) * iterations  # adds and muls count lanes
            rows.append((iterations, feats, arith))
            return
        if isinstance(value, Node):
            for field in dataclasses.fields(value):
                walk(getattr(value, field.name), loops)
        elif isinstance(value, (tuple, list)):
            for item in value:
                walk(item, loops)

    walk(lowered.body, [])
    if not rows:
        return np.zeros(len(FEATURE_NAMES))
    heaviest = max(rows, key=lambda r: r[0])[1]
    total_iterations = sum(r[0] for r in rows)
    total_arith = sum(r[2] for r in rows)
    return np.array(heaviest + [_log(len(rows)), _log(total_iterations), _log(total_arith)], dtype=np.float64)


def features_of(func: PrimFunc) -> np.ndarray:
    """Lower a scheduled function and extract its features."""
    from ..loops.lower import lower

    lowered = lower(func)
    if not isinstance(lowered, PrimFunc):
        lowered = next(f for _, f in lowered if isinstance(f, PrimFunc))
    return extract_features(lowered)


def count_flops(func: PrimFunc) -> float:
    """Arithmetic operations of one call (adds and multiplies of every store times its iterations)."""
    feats = features_of(func)
    return float(round(2.0 ** feats[FEATURE_NAMES.index("total_arith")] - 1))
