"""`refcomp tune` with a tiny budget, the progress bar's text, and the plot's optional dependency."""
import io
import json

import pytest

from refcomp.cli import main
from refcomp.errors import RefcompError
from refcomp.tune import Database, ProgressBar, format_seconds, matplotlib_available, plot_curve


def test_refcomp_tune_a_named_workload_fills_the_database(tmp_path, capsys):
    db = tmp_path / "db.jsonl"
    plot = tmp_path / "curve.png"
    status = main(["tune", "matmul", "--shape", "8,16,8", "--trials", "2", "--database", str(db),
                   "--plot", str(plot), "--seed", "3"])
    out, err = capsys.readouterr()
    assert status == 0, out + err
    assert "2/2 trials" in err and "GFLOP/s" in err
    assert "matmul: 2 trials" in out
    assert "  kept: " in out and "ms in this process" in out  # the final comparison's winner
    assert len(Database(db)) == 2
    assert all(json.loads(line)["workload"] for line in db.read_text().splitlines())
    if matplotlib_available():
        assert plot.stat().st_size > 0
    else:
        assert "needs matplotlib" in err and not plot.exists()


def test_refcomp_tune_a_script_file(tmp_path, capsys):
    from refcomp import workloads
    from refcomp.ast.printer import script

    path = tmp_path / "exp.txt"
    path.write_text(script(workloads.exp_scale(32)))
    assert main(["tune", str(path), "--trials", "2", "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("main: ") and " trial" in out and "trials" not in err  # --quiet: no bar


@pytest.mark.parametrize("argv, message", [
    (["tune", "nosuch"], "neither a file nor a named workload"),
    (["tune", "matmul"], "needs its sizes"),
    (["tune", "matmul", "--shape", "8,8"], "does not fit matmul"),
    (["tune", "missing.onnx"], "no such file"),
    (["tune", "matmul", "--shape", "8,8,8", "--trials", "0"], "--trials must be positive"),
    (["tune", "matmul", "--shape", "8,8,8", "--max-seconds", "-5"], "--max-seconds must be a positive number"),
    (["tune", "matmul", "--shape", "8,8,8", "--max-seconds", "nan"], "--max-seconds must be a positive number"),
    (["tune", "matmul", "--shape", "8,8,8", "--trials", "1", "--target", "bogus"], "unknown kind 'bogus'"),
])
def test_refcomp_tune_bad_input_is_a_clear_error(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_refcomp_tune_a_file_with_nothing_to_tune_says_so(tmp_path, capsys):
    path = tmp_path / "empty.py"
    path.write_text("x = 1\n")
    assert main(["tune", str(path)]) == 2
    assert "defines no PrimFunc or IRModule to tune" in capsys.readouterr().err


def test_progress_bar_text_and_estimate():
    stream = io.StringIO()
    bar = ProgressBar(stream=stream, width=10, in_place=False)
    bar(16, 64, 41.25, 12.0)
    bar(64, 64, 50.0, 48.0)
    first, last = stream.getvalue().splitlines()
    assert first == "[##........] 16/64 trials  best 41.2 GFLOP/s  12 s, ETA 36 s"
    assert last.startswith("[##########] 64/64 trials") and last.endswith("ETA done")
    assert format_seconds(185) == "3 min 05 s" and format_seconds(3720) == "1 h 02 min"


def test_plot_without_matplotlib_says_how_to_get_it(tmp_path):
    if matplotlib_available():
        path = plot_curve([(1, 0.5, 2e-3), (2, 1.0, 1e-3)], 2e6, str(tmp_path / "c.png"), title="t")
        assert (tmp_path / "c.png").stat().st_size > 0 and path.endswith("c.png")
    else:
        with pytest.raises(RefcompError, match="pip install matplotlib"):
            plot_curve([(1, 0.5, 2e-3)], 2e6, str(tmp_path / "c.png"))


def test_refcomp_tune_an_onnx_model_with_a_symbolic_dim_says_to_give_its_shape(tmp_path, capsys):
    onnx = pytest.importorskip("onnx")
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    w = np.random.default_rng().standard_normal((16, 8)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])],
                              [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "mm.onnx"
    onnx.save(model, str(path))
    assert main(["tune", str(path), "--trials", "1", "--quiet"]) == 1
    assert "no kernel with constant shapes to tune; give the inputs' shapes with --input" in capsys.readouterr().out
    for given, message in [("x=a,b", "--input expects NAME=D0,D1,... with positive integer dims, got 'x=a,b'"),
                           ("x", "--input expects NAME=D0,D1,..."),
                           ("y=2,16", "shape_dict names 'y', which is no input of the model (inputs: x)"),
                           ("x=2", "gives input x the shape (2,), but the model declares (batch, 16)")]:
        assert main(["tune", str(path), "--input", given, "--trials", "1", "--quiet"]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, err
