"""`refcomp profile MODEL.onnx`: the compiled graph's profile of a model on random inputs, onnxruntime
beside it where installed, and clear errors for what it cannot run."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from refcomp.cli import main  # noqa: E402


def mlp_model(path, rows="batch"):
    """x (rows, 16) -> MatMul W1 (16, 32) -> Relu -> MatMul W2 (32, 8) -> Softmax; a symbolic row count."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((16, 32)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((32, 8)).astype(np.float32), "w2")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["o"]), helper.make_node("Softmax", ["o"], ["y"], axis=-1)]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, 8])], [w1, w2])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_profile_prints_every_kernel_and_the_peer(tmp_path, capsys):
    path = mlp_model(tmp_path / "mlp.onnx")
    assert main(["profile", str(path), "--input", "x=5,16", "--repeat", "3"]) == 0
    out = capsys.readouterr().out
    assert "mlp.onnx: built in" in out and "x (5, 16) float32" in out
    assert "profile of main:" in out and "(outside the calls)" in out
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return
    line = next(line for line in out.splitlines() if line.startswith("onnxruntime:"))
    difference = float(line.rsplit(" ", 1)[1])
    assert difference < 1e-4  # the same model on the same inputs


def test_constant_shapes_need_no_input_and_the_peer_can_be_left_out(tmp_path, capsys):
    path = mlp_model(tmp_path / "fixed.onnx", rows=3)
    assert main(["profile", str(path), "--repeat", "1", "--no-peer"]) == 0
    out = capsys.readouterr().out
    assert "x (3, 16) float32" in out and "onnxruntime:" not in out


@pytest.mark.parametrize("argv, message", [
    (["--repeat", "1"], "symbolic dims; give them values with --input x="),
    (["--input", "x=5,16", "--repeat", "0"], "--repeat must be at least 1"),
    (["--input", "x=5,zero"], "--input expects NAME=D0,D1,..."),
    (["--input", "x=5,17"], ""),  # a shape the model refuses: the importer's own error
])
def test_bad_arguments_are_one_clear_line(tmp_path, capsys, argv, message):
    path = mlp_model(tmp_path / "mlp.onnx")
    assert main(["profile", str(path), *argv]) != 0
    err = capsys.readouterr().err
    assert err.startswith("refcomp") and "Traceback" not in err and message in err


def test_a_missing_or_broken_file_is_a_clear_error(tmp_path, capsys):
    assert main(["profile", str(tmp_path / "none.onnx")]) != 0
    assert "no such file" in capsys.readouterr().err
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not a model")
    assert main(["profile", str(broken)]) != 0
    assert "Traceback" not in capsys.readouterr().err
