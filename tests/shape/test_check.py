"""`refcomp check`: the report API, main(argv) exit codes, text and JSON output, the real CLI."""
from __future__ import annotations

import importlib
import json
import subprocess
import sys
import textwrap

import pytest

from refcomp import te
from refcomp import check
from refcomp.shape.check import main

KERNELS = textwrap.dedent('''
    from refcomp import te

    n = te.size_var("n")
    A = te.placeholder((n,), "float32", "A")
    good = te.create_prim_func([A, te.compute((n,), lambda i: A[i] * 2, name="B")], name="good")
    bad = te.create_prim_func([A, te.compute((n,), lambda i: A[i + 1], name="B")], name="bad")
''')


@pytest.fixture
def kernel_file(tmp_path):
    path = tmp_path / "kernels.py"
    path.write_text(KERNELS)
    return str(path)


def test_report_of_good_and_bad():
    n = te.size_var("n")
    A = te.placeholder((n,), "float32", "A")
    good = te.create_prim_func([A, te.compute((n,), lambda i: A[i] * 2, name="B")], name="good")
    bad = te.create_prim_func([A, te.compute((n,), lambda i: A[i + 1], name="B")], name="bad")
    assert check(good).ok
    report = check([good, bad])
    assert not report.ok
    (problem,) = report.problems
    assert problem.function == "bad" and problem.block == "B" and problem.spot == "A[v_i + 1]"
    assert problem.counterexample["v_i"] + 1 >= problem.counterexample["n"]
    assert any(text.startswith("good: ") for text in report.proved)


def test_main_exit_code_and_text(kernel_file, capsys):
    assert main([kernel_file]) == 1
    out = capsys.readouterr().out
    assert "ok    good: all 3 obligations proved" in out
    assert "FAIL  bad" in out and "reads row 1 of 1" in out and "counterexample: n = 1" in out


def test_main_json(kernel_file, capsys):
    assert main([kernel_file, "--format", "json"]) == 1
    payload = json.loads(capsys.readouterr().out)
    by_name = {f["name"]: f for f in payload["functions"]}
    assert payload["ok"] is False and by_name["good"]["ok"] and not by_name["bad"]["ok"]
    (problem,) = by_name["bad"]["problems"]
    assert problem["kind"] == "out_of_bounds" and problem["counterexample"]["n"] == 1


def test_main_all_proved_exits_zero(tmp_path, capsys):
    path = tmp_path / "only_good.py"
    path.write_text(KERNELS.replace("bad = ", "_bad = ") + "\n__refcomp__ = ['good']\n")
    assert main([str(path)]) == 0


def test_refcomp_list_may_name_a_builder(tmp_path):
    path = tmp_path / "builder.py"
    path.write_text(textwrap.dedent('''
        from refcomp import te

        def make():
            n = te.size_var("n")
            A = te.placeholder((n,), "float32", "A")
            return te.create_prim_func([A, te.compute((n,), lambda i: A[i + 1], name="B")])

        __refcomp__ = [make]
    '''))
    assert main([str(path)]) == 1


def test_load_errors_exit_two(tmp_path, capsys):
    assert main([str(tmp_path / "missing.py")]) == 2
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('boom')\n")
    assert main([str(broken)]) == 2
    assert "boom" in capsys.readouterr().err
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    assert main([str(empty)]) == 2
    assert main([]) == 2


def test_a_binary_file_is_a_load_error_not_a_traceback(tmp_path, capsys):
    model = tmp_path / "model.onnx"
    model.write_bytes(b"\x08\x07\x12\xa4\xff\x00binary")
    assert main([str(model)]) == 2
    err = capsys.readouterr().err
    assert "model.onnx: not a text file (byte 3 is not UTF-8)" in err and "an ONNX model?" in err


def test_script_format_file(tmp_path):
    n = te.size_var("n")
    A = te.placeholder((n,), "float32", "A")
    bad = te.create_prim_func([A, te.compute((n,), lambda i: A[i + 1], name="B")], name="bad")
    path = tmp_path / "bad.rc"
    path.write_text(bad.script())
    assert main([str(path)]) == 1


def test_real_cli_in_a_subprocess(kernel_file):
    run = subprocess.run([sys.executable, "-m", "refcomp.cli", "check", kernel_file, "--format", "json"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 1, run.stderr
    payload = json.loads(run.stdout)
    assert [f["ok"] for f in payload["functions"]] == [True, False]


def test_overflow_wrap_mode_rejects_what_only_holds_without_overflow(tmp_path, capsys):
    path = tmp_path / "tiles.py"
    path.write_text(textwrap.dedent('''
        from refcomp import te

        n = te.size_var("n")
        A = te.placeholder((n * 32,), "float32", "A")
        tiles = te.create_prim_func([A, te.compute((n, 32), lambda i, j: A[i * 32 + j], name="B")], name="tiles")
    '''))
    assert main([str(path)]) == 0
    capsys.readouterr()
    assert main([str(path), "--overflow", "wrap", "--format", "json"]) == 1
    (problem,) = json.loads(capsys.readouterr().out)["functions"][0]["problems"]
    assert problem["counterexample"]["n"] * 32 >= 2 ** 31  # only a wrapping size breaks it


def test_module_with_graph_functions_uses_the_graph_checker():
    from refcomp.ast import SizeVar
    from refcomp.graph import BlockBuilder, Var, op, tensor
    from refcomp.graph.passes.legalize_ops import legalize_ops

    n = SizeVar("n", "int64")
    x = Var("x", tensor((n, 4)))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(op.exp(op.add(x, x)))
        bb.emit_func_output(out)
    report = check(legalize_ops(bb.get()))
    assert report.ok, report.text()
    assert report.functions["main"]["proved"] >= 1  # the call_tir shape relations
    assert any(text.startswith("main: ") for text in report.proved)


def test_graph_functions_without_a_registered_checker_are_reported_unchecked(monkeypatch):
    from refcomp.ast import SizeVar
    from refcomp.graph import BlockBuilder, Var, op, tensor
    shape_check = importlib.import_module("refcomp.shape.check")  # the package's `check` is the function
    monkeypatch.setattr(shape_check, "GRAPH_CHECKERS", [])
    n = SizeVar("n", "int64")
    x = Var("x", tensor((n, 4)))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(op.exp(x))
        bb.emit_func_output(out)
    report = shape_check.check(bb.get())
    assert not report.ok
    (problem,) = report.problems
    assert problem.kind == "unchecked" and "no graph checker is registered" in problem.message


def test_stated_assumptions_are_shown_with_the_proof():
    from refcomp.ast import Buffer, BufferStore, For, IntImm, PrimFunc, SizeVar, Var

    n = SizeVar("n")
    A = Buffer("A", (n,))
    i, j = Var("i"), Var("j")
    store = BufferStore(A, te.const(0.0), (i * 4 + j,))
    loops = For(i, IntImm(0), (n + 3) // 4, "serial", For(j, IntImm(0), IntImm(4), "serial", store))
    report = check(PrimFunc((A,), loops, "by4", {"assumptions": (n % 4 == 0,)}))
    assert report.ok and report.assumed == {"by4": ["n % 4 == 0"]}
    assert "given n % 4 == 0, checked before each call" in report.text()
    assert report.as_dict()["functions"][0]["assumptions"] == ["n % 4 == 0"]
