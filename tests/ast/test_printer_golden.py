"""Golden files of printed IR: a change in the printer's output shows up in review.

Run with REFCOMP_UPDATE_GOLDEN=1 to rewrite the files after an intended change.
"""
import os
import pathlib

import pytest

from refcomp.ast.parser import from_source
from refcomp.ast.printer import script
from script_helpers import GOOD, MATMUL, matmul, roundtrip

GOLDEN = pathlib.Path(__file__).parent / "golden"

CASES = {
    "matmul_te_style": lambda: matmul(),
    "matmul_tvmscript": lambda: from_source(MATMUL),
    "reduction_and_let": lambda: from_source(GOOD),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_printed_ir_matches_golden(name):
    text = roundtrip(CASES[name]()) + "\n"
    path = GOLDEN / f"{name}.txt"
    if os.environ.get("REFCOMP_UPDATE_GOLDEN") == "1" or not path.exists():
        path.write_text(text)
    assert text == path.read_text(), f"printed IR differs from {path}; REFCOMP_UPDATE_GOLDEN=1 rewrites it"


def test_marked_error_rendering_matches_golden():
    func = matmul()
    block = func.body.block.body.body.body.body.block
    text = script(func, mark=block.body.value.b) + "\n"
    path = GOLDEN / "matmul_marked_load.txt"
    if os.environ.get("REFCOMP_UPDATE_GOLDEN") == "1" or not path.exists():
        path.write_text(text)
    assert text == path.read_text()
