"""String tensors: the host ops run by the VM, against plain Python; typed errors elsewhere."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

import refcomp
from refcomp.ast import SizeVar
from refcomp.ast.graph import Tuple, Var
from refcomp.ast.graph_struct_info import TensorStructInfo
from refcomp.graph import BlockBuilder, op

WORDS = st.text(alphabet=st.sampled_from("ab .,-éZ"), max_size=8)


def _run(build_body, *params):
    """Build main(params) -> build_body(*vars) and return its VM function."""
    bb = BlockBuilder()
    vars_ = [Var(name, info) for name, info in params]
    with bb.function("main", vars_):
        with bb.dataflow():
            out = bb.emit_output(build_body(*vars_))
        bb.emit_func_output(out)
    ex = refcomp.graph.build(bb.get(), target="c")
    assert ex.executor.startswith("vm")  # strings stay in the VM
    return refcomp.runtime.VirtualMachine(ex)["main"]


def _strings(*dims):
    return TensorStructInfo(tuple(dims), "string")


@given(words=st.lists(WORDS, min_size=1, max_size=6), delimiter=st.sampled_from(["", " ", ".", "ab"]),
       maxsplit=st.sampled_from([-1, 0, 1, 2]))
def test_split_matches_str_split(words, delimiter, maxsplit):
    n = SizeVar("n", "int64")
    run = _run(lambda x: op.string_split(x, delimiter, maxsplit), ("x", _strings(n)))
    parts, counts = run(np.array(words, dtype=object))
    expected = [w.split(delimiter or None, maxsplit) for w in words]
    assert counts.tolist() == [len(p) for p in expected]
    assert parts.shape == (len(words), max(len(p) for p in expected))
    for row, want in zip(parts.tolist(), expected):
        assert row == want + [""] * (parts.shape[1] - len(want))


@given(a=st.lists(WORDS, min_size=3, max_size=3), b=WORDS)
def test_concat_and_equal_broadcast(a, b):
    run = _run(lambda x, y: Tuple((op.string_concat(x, y), op.string_equal(x, y))),
               ("x", _strings(3)), ("y", _strings(1)))
    joined, same = run(np.array(a, dtype=object), np.array([b]))  # a numpy str array is taken too
    assert joined.tolist() == [s + b for s in a]
    assert same.tolist() == [s == b for s in a] and same.dtype == np.bool_


def test_normalize_drops_stopwords_and_changes_case():
    run = _run(lambda x: op.string_normalize(x, "UPPER", False, ("monday",)), ("x", _strings(1, 4)))
    out = run(np.array([["Monday", "tuesday", "", "wednesday"]], dtype=object))
    assert out.tolist() == [["TUESDAY", "WEDNESDAY"]]
    everything = run(np.array([["monday", "MONDAY", "Monday", "monday"]], dtype=object))
    assert everything.tolist() == [[""]]


def test_regex_cast_and_label_encode():
    run = _run(lambda x: Tuple((op.regex_full_match(x, r"-?\d+(\.\d+)?"), op.string_cast(x, "float32"),
                                op.label_encode(x, ("1", "2.5"), (10, 20), -1, "int64"))),
               ("x", _strings(3)))
    matches, values, labels = run(np.array(["1", "2.5", "-3e2"], dtype=object))
    assert matches.tolist() == [True, True, False]
    assert values.dtype == np.float32 and values.tolist() == [1.0, 2.5, -300.0]
    assert labels.tolist() == [10, 20, -1]
    back = _run(lambda x: op.string_cast(x, "string"), ("x", TensorStructInfo((2,), "int32")))
    assert back(np.array([7, -12], np.int32)).tolist() == ["7", "-12"]


def test_a_bad_pattern_and_kernel_ops_on_strings_are_typed_errors():
    x = Var("x", _strings(2))
    with pytest.raises(refcomp.IRError, match="not a regular expression"):
        BlockBuilder().normalize(op.regex_full_match(x, "("))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(op.maximum(x, x))
        bb.emit_func_output(out)
    with pytest.raises(refcomp.IRError, match="element type string"):
        refcomp.graph.build(bb.get(), target="c")
    with pytest.raises(refcomp.IRError, match="must be a string tensor"):
        BlockBuilder().normalize(op.string_concat(Var("y", TensorStructInfo((2,), "float32")), x))


def test_element_moves_on_strings_run_on_the_host():
    n = SizeVar("n", "int64")
    run = _run(lambda x, i: Tuple((op.reshape(op.concat([x, x], axis=0), (2, n)), op.take(x, i, axis=0),
                                   op.permute_dims(op.expand_dims(x, [1]), [1, 0]))),
               ("x", _strings(n)), ("i", TensorStructInfo((2,), "int64")))
    words = np.array(["x", "yy", "ééé"], dtype=object)
    both, picked, column = run(words, np.array([2, 0], np.int64))
    assert both.tolist() == [words.tolist(), words.tolist()]
    assert picked.tolist() == ["ééé", "x"] and column.tolist() == [words.tolist()]
