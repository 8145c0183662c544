"""refcomp's face: lazy names that resolve, a cheap `import refcomp`, and signatures a type checker sees."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import refcomp

SRC = Path(__file__).resolve().parent.parent / "src"


@pytest.mark.parametrize("name", sorted(refcomp._LAZY))
def test_every_lazy_name_resolves(name):
    module_name, attribute = refcomp._LAZY[name]
    value = getattr(refcomp, name)
    assert value is not None and name in dir(refcomp) and name in refcomp.__all__
    if attribute is None:
        assert value.__name__ == module_name
    else:
        assert value.__module__ == module_name and value.__name__ == attribute


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'evaluate'"):
        refcomp.evaluate  # noqa: B018


def test_import_refcomp_loads_only_the_ground_floor():
    code = "import sys, refcomp; print(sorted(m for m in sys.modules if m.startswith(('refcomp', 'numpy', 'z3'))))"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(SRC), "PATH": ""})
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "['refcomp', 'refcomp.errors', 'refcomp.lazy', 'refcomp.version']"


def test_graph_has_no_evaluate():
    import refcomp.graph

    with pytest.raises(AttributeError):
        refcomp.graph.evaluate  # noqa: B018


def test_a_type_checker_sees_the_real_signatures(tmp_path):
    pytest.importorskip("mypy")
    snippet = tmp_path / "use_refcomp.py"
    snippet.write_text(textwrap.dedent("""
        import refcomp

        reveal_type(refcomp.build)
        reveal_type(refcomp.Schedule)
        refcomp.build("not a function")
    """))
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--follow-imports=silent", "--ignore-missing-imports", "--no-error-summary",
         "--cache-dir", str(tmp_path / "cache"), str(snippet)],
        capture_output=True, text=True, timeout=600, env={"MYPYPATH": str(SRC), "PATH": ""}, cwd=tmp_path)
    lines = run.stdout.splitlines()
    revealed = [line.split("Revealed type is ", 1)[1] for line in lines if "Revealed type is" in line]
    assert len(revealed) == 2, run.stdout + run.stderr
    assert revealed[0].startswith('"def (func: ')  # the driver's signature, not Any
    assert revealed[1].startswith('"def (func_or_mod: ') and revealed[1].endswith('refcomp.loops.schedule.Schedule"')
    assert any(":6: error: Argument 1 to \"build\" has incompatible type" in line for line in lines), run.stdout


def test_a_missing_optional_package_names_the_extra_to_install(monkeypatch):
    from refcomp.frontend.onnx import from_onnx

    monkeypatch.setitem(sys.modules, "onnx", None)  # makes `import onnx` fail as if not installed
    with pytest.raises(ModuleNotFoundError, match=r"needs the onnx package: pip install 'refcomp\[onnx\]'"):
        from_onnx(b"")


def test_errors_show_ir_with_the_printer_that_ast_registers():
    code = textwrap.dedent("""
        from refcomp.errors import IRError
        print(IRError("bad", ir=object()))
        from refcomp import te
        n = te.size_var("n")
        A = te.placeholder((n,), "float32", "A")
        f = te.create_prim_func([A, te.compute((n,), lambda i: A[i] * 2, name="B")], name="twice")
        print(IRError("bad", ir=f))
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(SRC), "PATH": ""})
    assert run.returncode == 0, run.stderr
    first, rest = run.stdout.split("\n", 2)[1], run.stdout.split("\n", 2)[2]
    assert first == "(IR not shown: no printer is registered for object)"
    assert "def twice(" in rest
