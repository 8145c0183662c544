"""The ONNX backend node tests the importer passes keep passing (a regression fails CI).

The list `onnx_node_passing.txt` is written by `benchmarks/onnx_conformance.py --write-passing`.
Every listed case is imported, compiled and run; CI uses the reference-interpreter target for the
kernels (the node tests are tiny, and interpreting them is faster than compiling each with gcc);
a sample of cases also runs through the C backend, and `-m slow` runs them all through C.
"""
import os
import sys

import pytest

HERE = os.path.dirname(__file__)
sys.path.insert(0, os.path.join(HERE, "..", "..", "benchmarks"))

onnx = pytest.importorskip("onnx")
import onnx_conformance as conformance  # noqa: E402

LIST = os.path.join(HERE, "onnx_node_passing.txt")
CASES = [line.strip() for line in open(LIST)] if os.path.exists(LIST) else []
ROOT = conformance.node_test_root()


@pytest.mark.parametrize("case", CASES)
def test_node_case_passes_on_the_interpreter(case):
    status, detail = conformance.run_case(os.path.join(ROOT, case), target="interpret", specialize=True)
    assert status in ("pass", "pass_specialized"), f"{case}: {status}: {detail}"


@pytest.mark.parametrize("case", CASES[::25])
def test_node_case_sample_passes_on_c(case):
    status, detail = conformance.run_case(os.path.join(ROOT, case), target="c", specialize=True)
    assert status in ("pass", "pass_specialized"), f"{case}: {status}: {detail}"


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_node_case_passes_on_c(case):
    status, detail = conformance.run_case(os.path.join(ROOT, case), target="c", specialize=True)
    assert status in ("pass", "pass_specialized"), f"{case}: {status}: {detail}"


def test_the_list_covers_at_least_100_op_types():
    op_of = conformance.case_op_types(ROOT)
    assert len({op_of[c] for c in CASES}) >= 100
