"""Golden files of the three stages of sparse programs (a change in the lowering shows up in
review), and the printed stage II / III parse back to the same function.

Run with REFCOMP_UPDATE_GOLDEN=1 to rewrite the files after an intended change.
"""
from __future__ import annotations

import os
import pathlib

import pytest

from refcomp.ast import structural_equal
from refcomp.ast.parser import from_source
from refcomp.ast.printer import script
from refcomp.sparse import (
    script_stage1, sddmm_gpu, sddmm_iteration, sparse_fuse, sparse_reorder, spmm_csr_gpu, spmm_iteration,
)
from refcomp.sparse.lower import lower_stage2, lower_stage3
from refcomp.sparse.schedule import partition_rows, select_rows, vectorize_row_tile

from test_sparse_stages import _masked_spmm

GOLDEN = pathlib.Path(__file__).parent / "golden"

CASES = {
    "spmm_csr": lambda: spmm_iteration(),
    "spmm_csr_reordered": lambda: sparse_reorder(spmm_iteration(), ["I", "F", "J"]),
    "sddmm_fused_w32": lambda: sparse_fuse(sddmm_iteration("float32", 32), ["I", "J"]),
    "masked_spmm_search": _masked_spmm,
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_stages_match_golden(name):
    it = CASES[name]()
    text = "\n".join([script_stage1(it), "# stage II", script(lower_stage2(it)), "", "# stage III",
                      script(lower_stage3(it)), ""])
    path = GOLDEN / f"{name}.txt"
    if os.environ.get("REFCOMP_UPDATE_GOLDEN") == "1" or not path.exists():
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), f"stages differ from {path}; REFCOMP_UPDATE_GOLDEN=1 rewrites it"


@pytest.mark.parametrize("name", sorted(CASES))
def test_printed_stages_parse_back(name):
    it = CASES[name]()
    for func in (lower_stage2(it), lower_stage3(it)):
        assert structural_equal(from_source(script(func)), func)


SCHEDULED = {
    # the CSR SpMM's schedule with the vector width pinned (16 float32 lanes), so the file is the
    # same on every machine
    "spmm_csr_scheduled_w128": lambda: partition_rows(vectorize_row_tile(
        lower_stage3(spmm_iteration("float32", 128), row_tile=64), 16)),
    "spmm_csr_rows_acc_w32": lambda: partition_rows(select_rows(vectorize_row_tile(
        lower_stage3(spmm_iteration("float32", 32, accumulate=True), row_tile=128), 16))),
    # the GPU schedules: a block per row and a thread per column; a thread per stored entry
    "spmm_csr_gpu_w128_t64": lambda: spmm_csr_gpu("float32", 128, threads=64),
    "sddmm_gpu_w32_t128": lambda: sddmm_gpu("float32", 32, threads=128),
}


@pytest.mark.parametrize("name", sorted(SCHEDULED))
def test_scheduled_stage3_matches_golden_and_parses_back(name):
    func = SCHEDULED[name]()
    text = script(func) + "\n"
    path = GOLDEN / f"{name}.txt"
    if os.environ.get("REFCOMP_UPDATE_GOLDEN") == "1" or not path.exists():
        path.write_text(text)
    assert text == path.read_text(), f"schedule differs from {path}; REFCOMP_UPDATE_GOLDEN=1 rewrites it"
    assert structural_equal(from_source(script(func)), func)
