"""refcomp.export.export_c on the host: the round trip (export, make test, outputs equal numpy), the
weights as a blob, the sizes in model.h and the report, bad models refused, user names escaped."""
from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

from export_helpers import make, small_cnn, small_mlp
from refcomp.ast import SizeVar
from refcomp.errors import BuildError
from refcomp.export import export_c
from refcomp.graph import BlockBuilder, Var, op, tensor


def test_mlp_round_trip_on_the_host_matches_numpy(tmp_path, rng):
    mod, reference = small_mlp(rng)
    x = rng.standard_normal((3, 16)).astype(np.float32)
    result = export_c(mod, tmp_path, inputs=[x])
    np.testing.assert_allclose(result.outputs[0], reference(x), rtol=1e-5, atol=1e-6)
    done = make(tmp_path, "test")
    assert done.returncode == 0, done.stdout + done.stderr
    log = done.stdout
    assert "PASS" in log and "a dim above its bound: code 3" in log and "a wrong static dim: code 1" in log
    assert "a smaller static dim: code 1" in log and "a small arena: code 4" in log
    header = (tmp_path / "model.h").read_text()
    assert f"#define MODEL_ARENA_BYTES {result.arena_bytes}" in header
    assert "#define MODEL_DIM_MAX_BATCH 4" in header
    assert "#define MODEL_INPUT_0_MAX_SHAPE {4, 16}" in header
    assert "#define MODEL_OUTPUT_0_MAX_ELEMS 32" in header
    assert {"model.h", "model.c", "model_weights.c", "main.c", "Makefile", "memory_report.txt"} <= set(result.files)


def test_cnn_at_the_bound_with_weights_as_a_blob(tmp_path, rng):
    mod, reference = small_cnn(rng)
    result = export_c(mod, tmp_path, weights="blob", seed=int(rng.integers(1 << 30)))
    assert result.inputs[0].shape == (2, 3, 12, 12)  # recorded at the bound
    np.testing.assert_allclose(result.outputs[0], reference(result.inputs[0]), rtol=1e-4, atol=1e-4)
    blob = (tmp_path / "model_weights.bin").read_bytes()
    assert len(blob) >= result.weight_bytes == 8 * 27 * 4 + 8 * 4 + 10 * 200 * 4
    assert "model_weights.c" not in result.files
    done = make(tmp_path, "test")
    assert done.returncode == 0, done.stdout + done.stderr


def test_memory_report_and_no_allocation_in_the_model(tmp_path, rng):
    mod, _ = small_cnn(rng, batch_bound=4)
    result = export_c(mod, tmp_path)
    report = (tmp_path / "memory_report.txt").read_text()
    assert report == result.report
    assert re.search(rf"arena\s+{result.arena_bytes} bytes", report)
    assert re.search(rf"weights\s+{result.weight_bytes} bytes", report)
    assert re.search(r"fused_conv2d\w*\s+1\s+\d+\s+\d+", report)
    plan = result.plan
    # the arena holds the planned intermediates at batch = 4 and the largest kernel scratch
    assert plan.graph_arena_bytes >= 4 * 8 * 10 * 10 * 4 and plan.scratch_bytes >= 0
    assert result.code_bytes and result.code_bytes > 0
    done = make(tmp_path, "size")
    assert done.returncode == 0 and "model.o" in done.stdout, done.stderr
    symbols = subprocess.run(["nm", "-u", str(tmp_path / "build" / "host" / "model.o")], capture_output=True,
                             text=True).stdout.split()
    assert not {"malloc", "calloc", "realloc", "free", "aligned_alloc"} & set(symbols)
    assert not any("omp" in s for s in symbols)


def test_unbounded_dim_is_refused_with_its_name(tmp_path):
    n = SizeVar("tokens", "int64")
    x = Var("x", tensor((n, 8)))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(op.relu(x))
        bb.emit_func_output(y)
    with pytest.raises(BuildError, match=r"dim 0 of input x is tokens, which has no upper bound") as info:
        export_c(bb.get(), tmp_path)
    assert "--bound tokens=N" in str(info.value)
    with pytest.raises(BuildError, match=r"bound for 'batch', which is no symbolic dim .*tokens"):
        export_c(bb.get(), tmp_path, bounds={"batch": 4})
    with pytest.raises(BuildError, match=r"the bound of tokens must be a positive int"):
        export_c(bb.get(), tmp_path, bounds={"tokens": 0})
    result = export_c(bb.get(), tmp_path, bounds={"tokens": 5})
    assert result.inputs[0].shape == (5, 8)
    # random inputs at a huge bound would not fit in memory (nor in test_data.h): named, not a MemoryError
    with pytest.raises(BuildError, match=r"input x of shape \(100000000000, 8\) alone is 3200000000000 bytes"):
        export_c(bb.get(), tmp_path / "huge", bounds={"tokens": 10 ** 11})
    result = export_c(bb.get(), tmp_path / "huge", bounds={"tokens": 10 ** 11}, inputs=[np.ones((3, 8), np.float32)])
    assert result.inputs[0].shape == (3, 8)


def test_bad_arguments_are_build_errors(tmp_path, rng):
    mod, _ = small_mlp(rng)
    with pytest.raises(BuildError, match="weights must be one of const, blob"):
        export_c(mod, tmp_path, weights="flash")
    with pytest.raises(BuildError, match="name must be a C identifier"):
        export_c(mod, tmp_path, name="my model")
    with pytest.raises(BuildError, match="no such model file"):
        export_c(str(tmp_path / "missing.onnx"), tmp_path)
    with pytest.raises(BuildError, match="is a directory; give an .onnx file or a script file"):
        export_c(str(tmp_path), tmp_path / "out")
    with pytest.raises(BuildError, match=r"recorded input x of shape \(9, 16\) is above the bounds"):
        export_c(mod, tmp_path, inputs=[np.zeros((9, 16), np.float32)])
    (tmp_path / "a_file").write_text("")
    with pytest.raises(BuildError, match="output directory '.*a_file' is an existing file"):
        export_c(mod, tmp_path / "a_file")
    with pytest.raises(BuildError, match="cannot create the output directory '.*a_file/out'"):
        export_c(mod, tmp_path / "a_file" / "out")


def test_user_names_are_escaped_in_the_c(tmp_path, rng):
    name = 'in "x" */ #define y\\'
    mod, reference = small_mlp(rng, name=name)
    x = rng.standard_normal((2, 16)).astype(np.float32)
    result = export_c(mod, tmp_path, inputs={name: x}, name="net")
    header = (tmp_path / "net.h").read_text()
    assert '#define NET_INPUT_0_NAME "in \\"x\\" */ #define y\\\\"' in header
    assert "int32_t net_run(" in header
    done = make(tmp_path, "test")
    assert done.returncode == 0, done.stdout + done.stderr
    np.testing.assert_allclose(result.outputs[0], reference(x), rtol=1e-5, atol=1e-6)


def test_cli_exports_an_onnx_file_with_a_bound(tmp_path, rng):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    w = rng.standard_normal((6, 4)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])], [numpy_helper.from_array(w, "w")])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "refcomp.cli", "export-c", str(path), "--out", str(out)]
    refused = subprocess.run(cmd, capture_output=True, text=True)
    assert refused.returncode == 1 and "N, which has no upper bound" in refused.stderr
    done = subprocess.run([*cmd, "--bound", "N=3"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "arena" in done.stdout and "weights" in done.stdout
    built = make(out, "test")
    assert built.returncode == 0, built.stdout + built.stderr


def test_cli_exports_a_script_file_with_two_inputs(tmp_path, rng):
    n = SizeVar("n", "int64")
    x, w = Var("x", tensor((n, 8))), Var("w", tensor((8, 4)))
    bb = BlockBuilder()
    with bb.function("main", [x, w], attrs={"tir_var_upper_bound": {"n": 6}}):
        with bb.dataflow():
            y = bb.emit_output(op.relu(op.matmul(x, w)))
        bb.emit_func_output(y)
    script = tmp_path / "model.py"
    script.write_text(bb.get().script())
    out = tmp_path / "out"
    seed = int(rng.integers(1 << 30))
    done = subprocess.run([sys.executable, "-m", "refcomp.cli", "export-c", str(script), "--out", str(out),
                           "--bound", "n=3", "--seed", str(seed)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    header = (out / "model.h").read_text()
    assert "#define MODEL_DIM_MAX_N 3" in header and "#define MODEL_NUM_INPUTS 2" in header
    built = make(out, "test")
    assert built.returncode == 0, built.stdout + built.stderr
    # the recorded outputs are numpy's
    data = (out / "test_data.h").read_text()
    assert "test_input_shapes[4] = {INT64_C(3), INT64_C(8), INT64_C(8), INT64_C(4)}" in data


def test_openmp_export_keeps_parallel_loops_and_matches(tmp_path, rng):
    mod, reference = small_cnn(rng, batch_bound=3)
    result = export_c(mod, tmp_path, openmp=True)
    np.testing.assert_allclose(result.outputs[0], reference(result.inputs[0]), rtol=1e-4, atol=1e-4)
    assert "#pragma omp parallel for" in (tmp_path / "model.c").read_text()
    done = make(tmp_path, "test")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "-fopenmp" in (tmp_path / "Makefile").read_text()


def test_static_model_with_two_outputs_an_int_input_and_no_weights(tmp_path, rng):
    from refcomp.ast.graph import Tuple

    x, idx = Var("x", tensor((3, 5))), Var("idx", tensor((4,), "int64"))
    bb = BlockBuilder()
    with bb.function("main", [x, idx]):
        with bb.dataflow():
            out = bb.emit_output(Tuple((bb.emit(op.exp(x)), bb.emit(op.take(x, idx, axis=0)))))
        bb.emit_func_output(out)
    xv = rng.standard_normal((3, 5)).astype(np.float32)
    iv = rng.integers(0, 3, 4).astype(np.int64)
    result = export_c(bb.get(), tmp_path, inputs=[xv, iv], weights="blob")
    np.testing.assert_allclose(result.outputs[0], np.exp(xv), rtol=1e-6)
    np.testing.assert_array_equal(result.outputs[1], xv[iv])
    assert result.weight_bytes == 0
    done = make(tmp_path, "test")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "output 1: 20 values" in done.stdout and "a smaller static dim: code 1" in done.stdout


def test_odd_size_var_names_become_safe_macros(tmp_path):
    names = ('seq len"*/', "seq-len")  # both map to SEQ_LEN___ / SEQ_LEN: distinct macros
    a, b = SizeVar(names[0], "int64"), SizeVar(names[1], "int64")
    x, y = Var("x", tensor((a, 4))), Var("y", tensor((b, 4)))
    bb = BlockBuilder()
    with bb.function("main", [x, y]):
        with bb.dataflow():
            out = bb.emit_output(op.relu(op.add(op.sum(x, axis=(0,)), op.sum(y, axis=(0,)))))
        bb.emit_func_output(out)
    export_c(bb.get(), tmp_path, bounds={names[0]: 3, names[1]: 2})
    header = (tmp_path / "model.h").read_text()
    assert "#define MODEL_DIM_MAX_SEQ_LEN___ 3  /* seq len\"* / */" in header
    assert "#define MODEL_DIM_MAX_SEQ_LEN 2" in header
    done = make(tmp_path, "test")
    assert done.returncode == 0, done.stdout + done.stderr


def test_control_flow_is_refused_with_the_reason(tmp_path):
    from refcomp.ast.graph import BindingBlock, SeqExpr, VarBinding
    from refcomp.graph.block_builder import make_if

    n = SizeVar("n", "int64")
    x, c = Var("x", tensor((n,))), Var("c", tensor((), "bool"))
    bb = BlockBuilder()
    with bb.function("main", [c, x]):
        branches = []
        for build in (op.exp, op.negative):
            value = bb.normalize(build(x))
            var = Var("r", value.struct_info)
            branches.append(SeqExpr((BindingBlock((VarBinding(var, value),)),), var))
        bb.emit_func_output(bb.emit(make_if(None, c, branches[0], branches[1], bb.defined_vars)))
    with pytest.raises(BuildError, match=r"main cannot be compiled to one C function \(control flow \(R.If\)\)"):
        export_c(bb.get(), tmp_path, bounds={"n": 8})


def test_export_leaves_the_detected_cpu_features_in_place(tmp_path, rng):
    from refcomp.emit_c.toolchain import native_vector_bytes
    from refcomp.loops.intrin import cpu

    before, width = cpu.cpu_features(), native_vector_bytes()
    mod, _ = small_mlp(rng)
    export_c(mod, tmp_path)
    assert cpu.cpu_features() == before and native_vector_bytes() == width
