"""The ONNX backend node tests the importer passes keep passing (a regression fails CI).

Scored strictly, as the benchmark's headline: every graph input is passed at run time, shape
operands included; nothing is pinned.  The list `onnx_node_passing.txt` is written by
`benchmarks/onnx_conformance.py --write-passing`.
CI imports, compiles (C) and runs the first listed case of every op type; with REFCOMP_ONNX_ALL=1
(or `-m slow` and that variable) every listed case runs.
"""
import os
import sys

import pytest

HERE = os.path.dirname(__file__)

onnx = pytest.importorskip("onnx")


def _load_conformance():
    """benchmarks/onnx_conformance.py, loaded by path: putting benchmarks/ on sys.path would let its
    scripts shadow installed packages of the same name for every later test."""
    import importlib.util

    path = os.path.join(HERE, "..", "..", "benchmarks", "onnx_conformance.py")
    spec = importlib.util.spec_from_file_location("onnx_conformance", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


conformance = _load_conformance()

LIST = os.path.join(HERE, "onnx_node_passing.txt")
CASES = [line.strip() for line in open(LIST)] if os.path.exists(LIST) else []
ROOT = conformance.node_test_root()
OP_OF = conformance.case_op_types(ROOT)


def _one_per_op(cases):
    seen, picked = set(), []
    for case in cases:
        op_type = OP_OF.get(case)
        if op_type not in seen:
            seen.add(op_type)
            picked.append(case)
    return picked


def _check(case):
    status, detail = conformance.run_case(os.path.join(ROOT, case), target="c", specialize=False)
    assert status == "pass", f"{case}: {status}: {detail}"


@pytest.mark.parametrize("case", _one_per_op(CASES))
def test_one_case_per_op_type_passes(case):
    _check(case)


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("REFCOMP_ONNX_ALL"), reason="set REFCOMP_ONNX_ALL=1 to run every case")
@pytest.mark.parametrize("case", CASES)
def test_every_listed_case_passes(case):
    _check(case)


def test_the_list_covers_at_least_170_op_types():
    assert len({OP_OF[c] for c in CASES}) >= 170
