"""Sparse tensors as compositions of axes, their invariants, three stages of sparse programs, and
kernels lowered to the loop IR.

A format is a chain of axes (`axes.py`): dense_fixed, dense_variable (indptr), sparse_fixed
(indices, ELL) and sparse_variable (indptr + indices, CSR).  `formats.py` builds CSR, BSR, ELL,
DCSR and ragged tensors from them, converts from and to scipy.sparse, and validates the invariants
once per input array (`validate.py`).

A sparse program is written at stage I (`iteration.py`: iterations over the coordinates of axes,
printable, checked, run by a numpy reference), rewritten by `sparse_reorder` and `sparse_fuse`,
and lowered (`lower.py`) to stage II (loops over positions, binary search where a coordinate must
be found) and stage III (stage II plus the format invariants as assumptions: the loop IR whose
indirect accesses the shape prover proves in bounds and the C backend compiles).  `kernels.py`
builds SpMM and SDDMM that way (and ELL / BSR SpMM directly in the loop IR); `hyb.py` decomposes
CSR by column partitions into power-of-two ELL buckets, a CSR rest and split long rows, and
`format_search.py` searches those parameters with measurements kept in a tuning database; `ops.py`
has block-sparse attention over BSR and RGCN with the relations fused; `graph_layers.py` emits GCN
and GraphSAGE layers in the graph IR.  See spec/sparse.md.
"""
from .axes import Axis, dense_fixed, dense_variable, sparse_fixed, sparse_variable
from .formats import SparseMatrix, bsr, csr, dcsr, ell, from_scipy, ragged, to_scipy, to_torch, validate
from .validate import SparseFormatError
from .kernels import sddmm, sddmm_func, spmm, spmm_bsr_func, spmm_csr_func, spmm_csr_gpu, spmm_ell_func, sddmm_gpu
from .iteration import (
    SparseIteration, SparseIterationError, SparseScheduleError, SpAxis, SpBuffer, check_iteration, run_stage1,
    script_stage1, sp_axis, sp_iter, sparse_fuse, sparse_reorder,
)
from .lower import lower_stage2, lower_stage3
from .kernels import sddmm_iteration, spmm_iteration
from .hyb import (
    Bucket, FormatChoice, Hyb, HybPart, Split, choose_format, format_decompose, hyb_gpu_launches, spmm_hyb,
)
from .format_search import format_workload, tune_format
from .ops import RelationalGraph, block_sparse_attention, rgcn
from .graph_layers import gcn_layer, sage_layer

__all__ = [
    "Axis", "dense_fixed", "dense_variable", "sparse_fixed", "sparse_variable",
    "SparseMatrix", "bsr", "csr", "dcsr", "ell", "ragged", "from_scipy", "to_scipy", "to_torch",
    "SparseFormatError", "validate",
    "spmm", "sddmm", "spmm_csr_func", "spmm_bsr_func", "spmm_ell_func", "sddmm_func", "spmm_csr_gpu", "sddmm_gpu",
    "Bucket", "Hyb", "HybPart", "Split", "format_decompose", "spmm_hyb", "hyb_gpu_launches", "FormatChoice", "choose_format", "format_workload", "tune_format",
    "SparseIteration", "SparseIterationError", "SparseScheduleError", "SpAxis", "SpBuffer", "sp_axis", "sp_iter",
    "check_iteration", "run_stage1", "script_stage1", "sparse_reorder", "sparse_fuse", "lower_stage2",
    "lower_stage3", "spmm_iteration", "sddmm_iteration",
    "RelationalGraph", "block_sparse_attention", "rgcn", "gcn_layer", "sage_layer",
]
