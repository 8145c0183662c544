"""ONNX Einsum and Det as graphs of existing ops.

Einsum: each operand's repeated letters are reduced to their diagonal, its axes are permuted into
one common letter order and padded with size-1 axes, the operands are multiplied with
broadcasting, and the letters missing from the output are summed away.  Det: the Leibniz sum
over permutations, gathered with constant indices (static matrices up to MAX_DET_ORDER).
"""
from __future__ import annotations

import itertools

import numpy as np

from ...ast.graph import Constant
from ...graph import op
from ...graph.shape_facts import const_value
from .importer import converter

MAX_DET_ORDER = 6


def _parse(ctx, equation: str, ranks: list[int]):
    equation = equation.replace(" ", "")
    lhs, arrow, rhs = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        ctx.fail(f"equation {equation!r} names {len(terms)} operands, the node has {len(ranks)}")
    used = set(c for c in equation if c.isalpha())
    spare = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" if c not in used]
    ellipsis_rank = max((r - len(t.replace("...", "")) for t, r in zip(terms, ranks) if "..." in t), default=0)
    dots = "".join(spare[:ellipsis_rank])
    expanded = []
    for term, rank in zip(terms, ranks):
        if "..." in term:
            term = term.replace("...", dots[ellipsis_rank - (rank - len(term.replace("...", ""))):])
        if len(term) != rank:
            ctx.fail(f"einsum term {term!r} does not match an operand of rank {rank}")
        expanded.append(term)
    if arrow:
        out = rhs.replace("...", dots)
    else:  # implicit output: the broadcast dims, then letters used once, alphabetically
        counts = {}
        for term in expanded:
            for c in term:
                counts[c] = counts.get(c, 0) + 1
        out = dots + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in dots))
    return expanded, out


def _diagonal(ctx, x, term):
    """Reduce repeated letters of one operand to their diagonal."""
    while len(set(term)) != len(term):
        letter = next(c for c in term if term.count(c) > 1)
        first = term.index(letter)
        second = term.index(letter, first + 1)
        dims = [const_value(d) for d in ctx.static_shape(x)]
        n = dims[first]
        if n is None:
            ctx.fail("an einsum diagonal needs a static dim")
        rest = [k for k in range(len(term)) if k not in (first, second)]
        x = ctx.emit(op.permute_dims(x, tuple(rest + [first, second])))
        x = ctx.emit(op.reshape(x, tuple(dims[k] for k in rest) + (n * n,)))
        x = ctx.emit(op.take(x, Constant(np.arange(n, dtype=np.int64) * (n + 1)), axis=len(rest)))
        term = "".join(term[k] for k in rest) + letter
    return x, term


@converter("Einsum")
def _einsum(ctx, node, inputs, attrs):
    equation = attrs["equation"]
    equation = equation.decode() if isinstance(equation, bytes) else equation
    terms, out = _parse(ctx, equation, [ctx.info(x).ndim for x in inputs])
    operands = [_diagonal(ctx, x, t) for x, t in zip(inputs, terms)]
    letters = "".join(dict.fromkeys("".join(t for _, t in operands) + out))
    product = None
    for x, term in operands:
        order = sorted(range(len(term)), key=lambda k: letters.index(term[k]))
        if order != list(range(len(term))):
            x = ctx.emit(op.permute_dims(x, tuple(order)))
        term = "".join(term[k] for k in order)
        missing = tuple(k for k, c in enumerate(letters) if c not in term)
        if missing:
            x = ctx.emit(op.expand_dims(x, missing))
        product = x if product is None else ctx.emit(op.multiply(product, x))
    summed = tuple(k for k, c in enumerate(letters) if c not in out)
    if summed:
        product = ctx.emit(op.sum(product, axis=summed))
    kept = "".join(c for c in letters if c in out)
    if kept != out:
        product = ctx.emit(op.permute_dims(product, tuple(kept.index(c) for c in out)))
    if product is inputs[0]:  # "->" on a scalar, or "ij->ij": the result is a new value
        product = ctx.emit(op.add(product, Constant(np.zeros((), ctx.info(product).dtype.numpy()))))
    return product


def _parity(perm) -> int:
    sign, seen = 1, set()
    for start in range(len(perm)):
        if start in seen:
            continue
        length, k = 0, start
        while k not in seen:
            seen.add(k)
            k = perm[k]
            length += 1
        if length % 2 == 0:
            sign = -sign
    return sign


@converter("Det")
def _det(ctx, node, inputs, attrs):
    x = inputs[0]
    dims = [const_value(d) for d in ctx.static_shape(x)]
    n = dims[-1]
    if n is None or dims[-2] != n:
        ctx.fail("Det needs static square matrices")
    if n > MAX_DET_ORDER:
        ctx.fail(f"Det of matrices larger than {MAX_DET_ORDER}x{MAX_DET_ORDER} is not supported")
    perms = list(itertools.permutations(range(n)))
    # flat positions (row i, column perm[i]) of every permutation's factors
    flat_index = np.asarray([[i * n + p[i] for i in range(n)] for p in perms], np.int64)
    signs = np.asarray([_parity(p) for p in perms], ctx.info(x).dtype.numpy())
    flat = ctx.emit(op.reshape(x, tuple(dims[:-2]) + (n * n,)))
    factors = ctx.emit(op.take(flat, Constant(flat_index), axis=len(dims) - 2))
    terms = ctx.emit(op.multiply(op.prod(factors, axis=(len(dims) - 1,)), Constant(signs)))
    return ctx.emit(op.sum(terms, axis=(len(dims) - 2,)))
