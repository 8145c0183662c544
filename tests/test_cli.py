"""The refcomp command, run as users run it (a real subprocess)."""
import json
import subprocess
import sys
import textwrap

import pytest


def run(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "refcomp.cli", *args], capture_output=True, text=True,
                          timeout=600, cwd=cwd)


def test_help_and_unknown_command():
    assert run("--help").returncode == 0
    result = run("frobnicate")
    assert result.returncode == 2 and "unknown command 'frobnicate'" in result.stderr
    assert run().returncode == 2


def test_version():
    result = run("version")
    assert result.returncode == 0 and result.stdout.startswith("refcomp ")
    result = run("version", "extra")
    assert result.returncode == 2 and "unrecognized arguments: extra" in result.stderr


@pytest.fixture
def kernels_file(tmp_path):
    path = tmp_path / "kernels.py"
    path.write_text(textwrap.dedent("""
        from refcomp import te
        n = te.var("n")
        A = te.placeholder((n,), "float32", name="A")
        good = te.create_prim_func([A, te.compute((n,), lambda i: A[i] * 2.0, name="B")])
        bad = te.create_prim_func([A, te.compute((n,), lambda i: A[i + 1], name="C")])
    """))
    return path


def test_check_reports_the_bad_kernel_and_fails(kernels_file):
    result = run("check", str(kernels_file))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "good" in result.stdout and "bad" in result.stdout
    assert "n = 1" in result.stdout  # the counterexample


def test_check_json_is_machine_readable(kernels_file):
    result = run("check", str(kernels_file), "--format", "json")
    report = json.loads(result.stdout)
    by_name = {f["name"]: f for f in report["functions"]}
    assert report["ok"] is False and by_name["good"]["ok"] and not by_name["bad"]["ok"]


def test_check_of_a_missing_file_is_a_usage_error(tmp_path):
    result = run("check", str(tmp_path / "nope.py"))
    assert result.returncode == 2 and "no such file" in result.stderr
    result = run("check", str(tmp_path))
    assert result.returncode == 2 and "is a directory; give a Python or script-format file" in result.stderr
    result = run("check", str(tmp_path / "nope.py"), "--timeout-ms", "-5")
    assert result.returncode == 2 and "--timeout-ms: expected a positive integer, got '-5'" in result.stderr


def test_python_dash_m_refcomp_is_the_refcomp_command():
    result = subprocess.run([sys.executable, "-m", "refcomp", "version"], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0 and result.stdout.startswith("refcomp ")
    assert subprocess.run([sys.executable, "-m", "refcomp", "--help"], capture_output=True, text=True,
                          timeout=600).returncode == 0


def test_a_missing_c_compiler_is_one_clear_line_not_a_traceback(tmp_path):
    import os

    env = dict(os.environ, CC=str(tmp_path / "no-such-cc"), REFCOMP_CACHE_DIR=str(tmp_path / "cache"))
    result = subprocess.run([sys.executable, "-m", "refcomp", "demo"], capture_output=True, text=True,
                            timeout=600, env=env)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "refcomp demo: the C compiler" in result.stderr and "cannot be run" in result.stderr
    assert "hint: install gcc or set $CC" in result.stderr and "Traceback" not in result.stderr


def test_generate_says_on_stderr_that_it_builds_first(monkeypatch, capsys):
    import refcomp.llm.command
    from refcomp.cli import main
    from refcomp.errors import RefcompError

    seen = []

    def load_model(path, compiled=True, **options):
        seen.append(compiled)
        raise RefcompError("stop here")

    monkeypatch.setattr(refcomp.llm.command, "load_model", load_model)
    assert main(["generate", "--prompt", "def f("]) == 1
    assert "building the model's kernels first" in capsys.readouterr().err
    assert main(["generate", "--prompt", "def f(", "--reference"]) == 1  # numpy: nothing to build
    assert "building" not in capsys.readouterr().err and seen == [True, False]


@pytest.mark.parametrize("argv, message", [
    (["--prompt", "def f(", "--max-new-tokens", "-1"], "--max-new-tokens must be a positive integer, got -1"),
    (["--prompt", "def f(", "--max-new-tokens", "0"], "--max-new-tokens must be a positive integer, got 0"),
    (["--prompt", ""], "--prompt is empty"),
])
def test_generate_refuses_bad_arguments_before_loading_the_model(monkeypatch, capsys, argv, message):
    import refcomp.llm.command as command

    def load_model(*args, **kwargs):
        raise AssertionError("the model was loaded before the arguments were checked")

    monkeypatch.setattr(command, "load_model", load_model)
    assert command.main(argv) == 1
    out = capsys.readouterr()
    assert message in out.err and "Traceback" not in out.err and out.out == ""
