"""Random sparse matrices for property tests: empty rows, an optional dense row, nnz 0."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from hypothesis import strategies as st


@st.composite
def sparse_matrices(draw, max_dim: int = 14, dtype=np.float32, block: tuple[int, int] = (1, 1)):
    """A csr_matrix with sorted, duplicate-free columns and no stored zeros; shape a multiple of block."""
    m = draw(st.integers(0, max_dim // block[0])) * block[0]
    n = draw(st.integers(0, max_dim // block[1])) * block[1]
    density = draw(st.sampled_from([0.0, 0.05, 0.2, 0.6]))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    mask = rng.random((m, n)) < density
    if m and n and draw(st.booleans()):
        mask[rng.integers(m)] = True  # one dense row
    values = rng.uniform(0.5, 2.0, (m, n)) * rng.choice([-1.0, 1.0], (m, n))
    dense = np.where(mask, values, 0.0).astype(dtype)
    out = sp.csr_matrix(dense, shape=(m, n))
    out.sort_indices()
    return out
