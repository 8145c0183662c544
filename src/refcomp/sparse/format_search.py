"""tune_format: a measured evolutionary search over the composition of a sparse matrix's format.

SparseTIR's point is that no one format is best: whether CSR, or hyb with some ELL bucket width,
some number of column partitions and long rows split or not, runs SpMM fastest depends on the
matrix, the feature width and the machine.  `tune_format` searches those parameters the way the
tuner searches schedules:

1. the first round measures plain CSR and the fixed candidates of `choose_format`;
2. each later round mutates the fastest formats measured so far, one parameter a step (the ELL
   width, the partition count and the hot-column count move to the next value of their lists,
   the long-row split flips), plus a fresh random point now and then, and measures the ones not
   tried yet;
3. every candidate runs SpMM on a random dense operand and is compared with CSR's product before
   it is timed (an InternalError when one differs: a format must never change the answer);
4. each measurement is committed to a `refcomp.tune.Database` (append-only JSON lines, crash-safe)
   under a workload that names the matrix's profile (shape, stored entries, value type, feature
   width, and the histogram of row lengths in powers of two), the target "c" and this machine;
   a later search with the same database starts from those records and measures only what they
   do not hold, and a matrix of the same profile reuses them.

The result is a `FormatChoice` (as `choose_format` returns) with every measured time.
"""
from __future__ import annotations

import hashlib
import json
import random
import time
from typing import Any, Callable

import numpy as np

from ..errors import ArgumentError
from .formats import SparseMatrix
from .hyb import DEFAULT_CANDIDATES, FormatChoice, measure_format
from .kernels import _require_csr, spmm

ELL_WIDTHS = (0, 4, 8, 16, 32, 64, 128)  # 0: no ELL buckets
COLUMN_PARTS = (1, 2, 4, 8, 16, 32, 64)
HOT_COLUMNS = (0, 1024, 2048, 3072, 4096)  # a first partition of the most frequent columns (clamped to n)
SPACE_SIZE = 1 + (2 * (len(ELL_WIDTHS) - 1) + 1) * len(COLUMN_PARTS) * len(HOT_COLUMNS)  # CSR and every hyb
TARGET = "c"


def format_workload(A: SparseMatrix, width: int) -> str:
    """The database workload of SpMM with A (CSR) and `width` dense columns: a digest of A's
    shape, stored entries, value type, the width, and how many rows have 0, 1, 2-3, 4-7, ... entries."""
    A = _require_csr(A, "format_workload")
    lengths = np.diff(A.indptr["j"].astype(np.int64))
    bins = np.zeros(64, dtype=np.int64)
    if lengths.size:
        levels = np.where(lengths > 0, np.floor(np.log2(np.maximum(lengths, 1))).astype(np.int64) + 1, 0)
        np.add.at(bins, levels, 1)
    profile = {"op": "spmm", "shape": list(A.shape), "nnz": int(lengths.sum()), "dtype": str(A.dtype),
               "width": int(width), "rows_by_length": [int(b) for b in np.trim_zeros(bins, "b")]}
    return hashlib.sha256(json.dumps(profile, sort_keys=True).encode()).hexdigest()[:32]


def _key(params: dict | None) -> str:
    return json.dumps(params, sort_keys=True)


def _neighbours(params: dict | None) -> list[dict | None]:
    """The formats one step from params: CSR's neighbour is the default hyb; a hyb's are its ELL
    width, partition count and hot-column count moved to the next value up or down their lists,
    the long-row split flipped (where there is an ELL width), and CSR."""
    if params is None:
        return [dict(max_width=32)]
    params = _normal(params)
    found: list[dict | None] = [None]
    for key, values in (("max_width", ELL_WIDTHS), ("column_parts", COLUMN_PARTS), ("hot_columns", HOT_COLUMNS)):
        if params[key] in values:
            at = values.index(params[key])
            found += [dict(params, **{key: values[i]}) for i in (at - 1, at + 1) if 0 <= i < len(values)]
    if params["max_width"]:
        found.append(dict(params, split_long_rows=not params["split_long_rows"]))
    return found


def _random_format(rng: random.Random) -> dict | None:
    if rng.random() < 0.1:
        return None
    return dict(max_width=rng.choice(ELL_WIDTHS), column_parts=rng.choice(COLUMN_PARTS),
                split_long_rows=rng.random() < 0.5, hot_columns=rng.choice(HOT_COLUMNS))


def _normal(params: dict | None) -> dict | None:
    """params with every field spelled out (so equal formats have one key; a split needs an ELL
    width, and is dropped without one)."""
    if params is None:
        return None
    width = params.get("max_width", 32)
    return dict(max_width=width, column_parts=params.get("column_parts", 1),
                split_long_rows=bool(params.get("split_long_rows", False)) and width > 0,
                hot_columns=params.get("hot_columns", 0))


def tune_format(A: SparseMatrix, width: int, trials: int = 16, *, database: Any = None, seed: int | None = None,
                repeat: int = 3, batch: int = 4, progress: Callable[[int, int, float, float], None] | None = None
                ) -> FormatChoice:
    """The fastest SpMM format for CSR A and `width` dense columns among the `trials` formats the
    search measures (see the module docstring); database: a refcomp.tune.Database (or a path) to
    commit the measurements to and start from.  progress(trials, total, best GFLOP/s, seconds)
    is called after each round (refcomp.tune.ProgressBar draws it)."""
    from ..tune.database import Database, TuningRecord
    from ..tune.runner import machine_description

    A = _require_csr(A, "tune_format")
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise ArgumentError(f"tune_format: width must be a positive int, got {width!r}")
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise ArgumentError(f"tune_format: trials must be a positive int, got {trials!r}")
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ArgumentError(f"tune_format: batch must be a positive int, got {batch!r}")
    if database is not None and not isinstance(database, Database):
        database = Database(database)
    rng = random.Random(seed)
    operand = np.random.default_rng(rng.randrange(2**32))
    B = operand.uniform(-1.0, 1.0, (A.shape[1], width)).astype(A.dtype)
    expected = spmm(A, B)  # every candidate is checked against CSR's product
    workload, machine = format_workload(A, width), machine_description(TARGET)
    flops = 2.0 * float(A.indptr["j"][-1]) * width

    times: dict[str, tuple[dict | None, float]] = {}
    matrices: dict[str, Any] = {}
    if database is not None:
        database.refresh()
        for record in database.query(workload, TARGET, machine):
            params = _normal(record.trace.get("format"))
            times.setdefault(_key(params), (params, record.mean_time))
    measured, start = 0, time.monotonic()
    queue = [_normal(p) for p in DEFAULT_CANDIDATES]
    while measured < trials:
        round_: list[dict | None] = []
        for params in queue:
            if _key(params) not in times and all(_key(params) != _key(p) for p in round_):
                round_.append(params)
            if len(round_) == min(batch, trials - measured):
                break
        if not round_:  # everything queued was measured: a random point
            fresh = _normal(_random_format(rng))
            if _key(fresh) in times:
                if len(times) >= SPACE_SIZE:
                    break  # the whole space is measured
                continue
            round_ = [fresh]
        for params in round_:
            seconds, matrix = measure_format(A, B, expected, params, repeat, "tune_format")
            times[_key(params)] = (params, seconds)
            matrices[_key(params)] = matrix
            measured += 1
            if database is not None:
                database.commit(TuningRecord(workload, TARGET, {"format": params}, (seconds,), machine))
        best = sorted(times.values(), key=lambda item: item[1])
        if progress is not None:
            progress(measured, trials, flops / best[0][1] / 1e9, time.monotonic() - start)
        parents = [params for params, _ in best[:2]]
        queue = [_normal(n) for parent in parents for n in _neighbours(parent)]
        rng.shuffle(queue)
        if rng.random() < 0.25:
            queue.insert(0, _normal(_random_format(rng)))
    params, _ = min(times.values(), key=lambda item: item[1])
    matrix = matrices.get(_key(params))
    if matrix is None:  # the best came from the database: build it (and check it) here
        _, matrix = measure_format(A, B, expected, params, 1, "tune_format")
    tried = tuple(sorted(times.values(), key=lambda item: item[1]))
    return FormatChoice(params, matrix, tried)


__all__ = ["format_workload", "tune_format"]
