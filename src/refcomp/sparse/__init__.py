"""Sparse tensors as compositions of axes, their invariants, and kernels lowered to the loop IR.

A format is a chain of axes (`axes.py`): dense_fixed, dense_variable (indptr), sparse_fixed
(indices, ELL) and sparse_variable (indptr + indices, CSR).  `formats.py` builds CSR, BSR, ELL,
DCSR and ragged tensors from them, converts from and to scipy.sparse, and validates the invariants
once per input array (`validate.py`).  `kernels.py` lowers SpMM and SDDMM to ordinary loop IR
whose indirect accesses the shape prover proves in bounds from those invariants; `hyb.py`
decomposes CSR into power-of-two ELL buckets plus a CSR rest.  See spec/sparse.md.
"""
from .axes import Axis, dense_fixed, dense_variable, sparse_fixed, sparse_variable
from .formats import SparseMatrix, bsr, csr, dcsr, ell, from_scipy, ragged, to_scipy, to_torch, validate
from .validate import SparseFormatError
from .kernels import sddmm, sddmm_func, spmm, spmm_bsr_func, spmm_csr_func, spmm_ell_func
from .hyb import Bucket, Hyb, HybPart, Split, format_decompose, spmm_hyb

__all__ = [
    "Axis", "dense_fixed", "dense_variable", "sparse_fixed", "sparse_variable",
    "SparseMatrix", "bsr", "csr", "dcsr", "ell", "ragged", "from_scipy", "to_scipy", "to_torch",
    "SparseFormatError", "validate",
    "spmm", "sddmm", "spmm_csr_func", "spmm_bsr_func", "spmm_ell_func", "sddmm_func",
    "Bucket", "Hyb", "HybPart", "Split", "format_decompose", "spmm_hyb",
]
