"""ONNX TfIdfVectorizer over integer token ids: n-gram counts by comparing gathered windows with
the pool, then TF / IDF / TFIDF weighting.

An n-gram of size n with skip distance d starting at i is (x[i], x[i+d], ..., x[i+(n-1)d]);
sizes run from min_gram_length to max_gram_length, d from 1 to max_skip_count + 1, and unigrams
are counted once (skips do not change them).  Each (n, d) pair is one constant-index `take`, an
equality against the pool's n-grams and a sum over start positions; the per-gram counts map to
output columns through ngram_indexes (a constant 0/1 matrix).
"""
from __future__ import annotations

import numpy as np

from ...ast.graph import Constant
from ...graph import op
from ...graph.shape_facts import const_value
from .importer import converter


def _pool_grams(attrs, total):
    """[(size, grams (G, size) int64 array, output columns (G,))] for the sizes to count."""
    pool = np.asarray(attrs["pool_int64s"], np.int64)
    starts = list(attrs["ngram_counts"])
    indexes = list(attrs["ngram_indexes"])
    lo, hi = attrs["min_gram_length"], attrs["max_gram_length"]
    groups, gram_id = [], 0
    for k, start in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else total
        size = k + 1
        count = (end - start) // size
        if lo <= size <= hi and count:
            grams = pool[start:start + count * size].reshape(count, size)
            groups.append((size, grams, np.asarray(indexes[gram_id:gram_id + count], np.int64)))
        gram_id += count
    return groups


@converter("TfIdfVectorizer")
def _tfidf(ctx, node, inputs, attrs):
    x = inputs[0]
    if "pool_int64s" not in attrs:
        ctx.fail("string pools are not supported (token ids in pool_int64s are)")
    dims = [const_value(d) for d in ctx.static_shape(x)]
    if None in dims or len(dims) not in (1, 2):
        ctx.fail("TfIdfVectorizer needs a static 1-d or 2-d input")
    rows = ctx.emit(op.expand_dims(x, (0,))) if len(dims) == 1 else x
    rows = rows if ctx.info(rows).dtype == "int64" else ctx.emit(op.astype(rows, "int64"))
    length = dims[-1]
    out_size = max(attrs["ngram_indexes"]) + 1
    max_distance = attrs.get("max_skip_count", 0) + 1
    total = None
    for size, grams, columns in _pool_grams(attrs, len(attrs["pool_int64s"])):
        to_column = np.zeros((len(grams), out_size), np.float32)
        to_column[np.arange(len(grams)), columns] = 1.0
        for distance in range(1, (max_distance if size > 1 else 1) + 1):
            starts = length - distance * (size - 1)
            if starts <= 0:
                continue
            positions = np.arange(starts).reshape(-1, 1) + distance * np.arange(size).reshape(1, -1)
            windows = ctx.emit(op.take(rows, Constant(positions.astype(np.int64)), axis=1))  # (B, P, n)
            same = ctx.emit(op.equal(op.expand_dims(windows, (2,)), Constant(grams[None, None])))  # (B, P, G, n)
            hit = ctx.emit(op.min(op.astype(same, "float32"), axis=(3,)))
            counts = ctx.emit(op.matmul(op.sum(hit, axis=(1,)), Constant(to_column)))  # (B, out)
            total = counts if total is None else ctx.emit(op.add(total, counts))
    if total is None:
        total = Constant(np.zeros((const_value(ctx.static_shape(rows)[0]), out_size), np.float32))
    mode = attrs.get("mode", b"TF")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    weights = np.asarray(attrs.get("weights", []), np.float32)
    if mode == "IDF":
        present = ctx.emit(op.astype(op.greater(total, Constant(np.float32(0))), "float32"))
        total = ctx.emit(op.multiply(present, Constant(weights))) if weights.size else present
    elif mode == "TFIDF":
        total = ctx.emit(op.multiply(total, Constant(weights))) if weights.size else total
    elif mode != "TF":
        ctx.fail(f"unknown mode {mode!r}")
    return ctx.emit(op.squeeze(total, (0,))) if len(dims) == 1 else total
