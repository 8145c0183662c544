"""tune_format: a measured search over format parameters, every candidate checked, kept in a database."""
from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from refcomp import sparse
from refcomp.errors import ArgumentError
from refcomp.tune import Database

from sparse_strategies import sparse_matrices


def _power_law(seed: int, rows: int = 300, cols: int = 200):
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    lengths = np.minimum(cols, (rng.pareto(1.2, rows) * 2).astype(int))
    lengths[rng.integers(rows)] = cols  # one dense row
    lengths[rng.integers(rows)] = 0     # and an empty one
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    indices = np.concatenate([np.sort(rng.choice(cols, n, replace=False)) for n in lengths]).astype(np.int32)
    data = rng.uniform(-1, 1, indptr[-1]).astype(np.float32)
    return sp.csr_matrix((data, indices, indptr), shape=(rows, cols))


@settings(deadline=None, max_examples=8)
@given(sparse_matrices(), st.sampled_from([1, 16, 32]), st.integers(0, 2**32 - 1))
def test_the_chosen_format_computes_what_scipy_does(A, width, seed):
    choice = sparse.tune_format(sparse.from_scipy(A), width, trials=6, seed=seed, repeat=1)
    assert choice.params is None or isinstance(choice.params, dict)
    assert choice.seconds[0][0] == choice.params  # fastest first
    B = np.random.default_rng(seed).uniform(-1, 1, (A.shape[1], width)).astype(np.float32)
    np.testing.assert_allclose(choice.spmm(B), A @ B, rtol=1e-5, atol=1e-4)


def test_measurements_go_to_the_database_and_a_later_search_starts_from_them(tmp_path):
    A = sparse.from_scipy(_power_law(random.randrange(2**20)))
    path = tmp_path / "formats.jsonl"
    first = sparse.tune_format(A, 16, trials=5, database=path, seed=random.randrange(2**20), repeat=1)
    records = Database(path).records
    assert len(records) == 5
    assert {r.workload for r in records} == {sparse.format_workload(A, 16)}
    assert all(r.trace["format"] is None or set(r.trace["format"]) == {"max_width", "column_parts", "split_long_rows", "hot_columns"}
               for r in records)
    # a second search measures only formats the database does not hold
    calls = []
    second = sparse.tune_format(A, 16, trials=3, database=Database(path), seed=random.randrange(2**20), repeat=1,
                                progress=lambda *args: calls.append(args))
    assert len(Database(path).records) == 8
    assert len(second.seconds) == 8 and calls and calls[-1][0] == 3 and calls[-1][2] > 0
    assert min(s for _, s in second.seconds) <= min(s for _, s in first.seconds)
    # another width is another workload
    assert sparse.format_workload(A, 32) != sparse.format_workload(A, 16)


def test_the_search_walks_past_the_fixed_candidates():
    A = sparse.from_scipy(_power_law(random.randrange(2**20)))
    choice = sparse.tune_format(A, 8, trials=12, seed=random.randrange(2**20), repeat=1)
    tried = [p for p, _ in choice.seconds]
    assert len(tried) == 12 and len({repr(sorted(p.items())) if p else "csr" for p in tried}) == 12
    fixed = [sparse.format_search._normal(p) for p in sparse.hyb.DEFAULT_CANDIDATES]
    assert any(p not in fixed for p in tried)


def test_bad_arguments_are_refused():
    import scipy.sparse as sp

    M = sparse.from_scipy(sp.eye(3, format="csr", dtype=np.float32))
    with pytest.raises(ArgumentError, match="width"):
        sparse.tune_format(M, 0)
    with pytest.raises(ArgumentError, match="trials"):
        sparse.tune_format(M, 4, trials=0)
    with pytest.raises(ArgumentError):
        sparse.tune_format(np.eye(3, dtype=np.float32), 4)
