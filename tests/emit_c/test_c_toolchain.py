"""Targets, gcc errors and the build cache (hits, misses, two processes building one kernel)."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import refcomp
from refcomp.ast import Buffer, BufferStore, Call, FloatImm, For, PrimFunc, SizeVar, StringImm, Var
from refcomp.emit_c import CACHE_STATS, c_options
from refcomp.emit_c.toolchain import compile_shared


def test_target_strings():
    native = c_options("c")
    assert "-march=native" in native.compile_flags() and "-fopenmp" in native.compile_flags()
    strict = c_options("c  -std=c99")
    flags = strict.compile_flags()
    for flag in ("-std=c99", "-pedantic", "-Wall", "-Wextra", "-Werror"):
        assert flag in flags
    assert "-fopenmp" not in flags and "-march=native" not in flags
    assert not strict.emit_options().vectors and not strict.emit_options().openmp
    debug = c_options("c -O0 -g -sanitize")
    assert "-O0" in debug.compile_flags() and "-g" in debug.compile_flags()
    assert "-fsanitize=address,undefined" in debug.compile_flags()


@pytest.mark.parametrize("text, pattern", [
    ("cuda", "'cuda' is not supported here"), ("", "the target is empty"),
    ("c -ffast-math", "unknown option '-ffast-math'"), (3, "must be a target string"),
])
def test_bad_targets(text, pattern):
    with pytest.raises(refcomp.BuildError, match=pattern):
        c_options(text)


def _fill_kernel(value: float, name: str = "fill") -> PrimFunc:
    n = SizeVar("n", "int32")
    A = Buffer("A", (n,), "float32")
    i = Var("i", "int32")
    return PrimFunc((A,), For(i, 0, n, "serial", BufferStore(A, FloatImm(value), (i,))), name)


def test_cache_hit_and_miss(tmp_path, monkeypatch):
    monkeypatch.setenv("REFCOMP_CACHE_DIR", str(tmp_path))
    value = float(np.random.default_rng().integers(1, 10**6))
    before = dict(CACHE_STATS)
    lib = refcomp.build(_fill_kernel(value), bounds="off")
    assert CACHE_STATS["misses"] == before["misses"] + 1
    again = refcomp.build(_fill_kernel(value), bounds="off")
    assert CACHE_STATS["hits"] == before["hits"] + 1 and again.path == lib.path
    assert str(lib.path).startswith(str(tmp_path))
    a = np.zeros(3, np.float32)
    again(a)
    np.testing.assert_array_equal(a, value)
    refcomp.build(_fill_kernel(value), target="c -O1", bounds="off")  # other flags: another entry
    assert CACHE_STATS["misses"] == before["misses"] + 2
    assert not [p for p in tmp_path.rglob(".*.so")], "temporary files must not be left behind"


def test_cache_debug_switch(tmp_path):
    script = textwrap.dedent(f"""
        import numpy as np, refcomp, sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_c_toolchain import _fill_kernel
        refcomp.build(_fill_kernel(2.5), bounds="off")
        refcomp.build(_fill_kernel(2.5), bounds="off")
    """)
    env = dict(os.environ, REFCOMP_CACHE_DIR=str(tmp_path), REFCOMP_CACHE_DEBUG="1")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stderr.count("refcomp cache miss") == 1 and out.stderr.count("refcomp cache hit") == 1


def test_two_processes_build_the_same_kernel(tmp_path):
    script = textwrap.dedent(f"""
        import numpy as np, refcomp, sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_c_toolchain import _fill_kernel
        lib = refcomp.build(_fill_kernel(4.25, "shared_fill"), bounds="off")
        a = np.zeros(5, np.float32)
        lib(a)
        assert (a == 4.25).all()
        print(lib.path)
    """)
    env = dict(os.environ, REFCOMP_CACHE_DIR=str(tmp_path))
    procs = [subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [p.communicate(timeout=300) for p in procs]
    for proc, (out, err) in zip(procs, outputs):
        assert proc.returncode == 0, err
    paths = {out.strip() for out, _ in outputs}
    assert len(paths) == 1
    assert len(list(tmp_path.rglob("*.so"))) == 1


def test_compiler_error_shows_source_lines(tmp_path, monkeypatch):
    monkeypatch.setenv("REFCOMP_CACHE_DIR", str(tmp_path))
    with pytest.raises(refcomp.BuildError) as info:
        compile_shared("int main_thing(void) {\n  return undefined_name;\n}\n", c_options("c"))
    text = str(info.value)
    assert "undefined_name" in text and "source around the error" in text
    assert ">    2 |   return undefined_name;" in text


def test_undefined_extern_function_is_a_build_error(tmp_path, monkeypatch):
    monkeypatch.setenv("REFCOMP_CACHE_DIR", str(tmp_path))
    n = SizeVar("n", "int32")
    A = Buffer("A", (n,), "float32")
    i = Var("i", "int32")
    call = Call("call_extern", (StringImm("no_such_function_anywhere"), A[i]), "float32")
    func = PrimFunc((A,), For(i, 0, n, "serial", BufferStore(A, call, (i,))), "missing")
    with pytest.raises(refcomp.BuildError):
        refcomp.build(func, bounds="off")


def test_damaged_cache_entry_is_rebuilt(tmp_path):
    # The entry is made by another process: a library loaded here must never be overwritten.
    env = dict(os.environ, REFCOMP_CACHE_DIR=str(tmp_path))
    script = textwrap.dedent(f"""
        import sys, refcomp
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_c_toolchain import _fill_kernel
        print(refcomp.build(_fill_kernel(6.5, "damaged"), bounds="off").path)
    """)
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    from pathlib import Path
    Path(out.stdout.strip()).write_bytes(b"not an ELF file")
    use = textwrap.dedent(f"""
        import sys, numpy as np, refcomp
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_c_toolchain import _fill_kernel
        lib = refcomp.build(_fill_kernel(6.5, "damaged"), bounds="off")
        a = np.zeros(2, np.float32)
        lib(a)
        assert (a == 6.5).all()
    """)
    rerun = subprocess.run([sys.executable, "-c", use], env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
