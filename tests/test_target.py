"""Targets: one grammar, parsed in one place, used by refcomp.build and refcomp.graph.build alike."""
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import refcomp
from refcomp import te
from refcomp.driver import BACKENDS, BOUNDS_MODES, DEFAULT_BOUNDS
from refcomp.graph import BlockBuilder, Var, op, tensor
from refcomp.target import KINDS, Target, parse_target


@pytest.mark.parametrize("text, kind, options", [
    ("c", "c", ()), ("  c   -std=c99 ", "c", ("-std=c99",)), ("c -sanitize -O0 -g", "c", ("-sanitize", "-O0", "-g")),
    ("cuda", "cuda", ()), ("cuda -arch=sm_80", "cuda", ("-arch=sm_80",)), ("cuda -arch=sm_90a -lineinfo", "cuda",
                                                                         ("-arch=sm_90a", "-lineinfo")),
    ("interpret", "interpret", ()),
])
def test_valid_targets(text, kind, options):
    target = parse_target(text)
    assert (target.kind, target.options) == (kind, options)
    assert parse_target(str(target)) == target and str(target) == " ".join(text.split())
    assert parse_target(target) is target
    assert hash(target) == hash(parse_target(" ".join(text.split())))


def test_option_values():
    assert parse_target("cuda -arch=sm_80").value("-arch") == "sm_80"
    assert parse_target("cuda").value("-arch", "sm_90a") == "sm_90a"
    assert parse_target("c -std=c99").has("-std=c99") and not parse_target("c").has("-std=c99")


@pytest.mark.parametrize("spec, pattern", [
    (None, "must be a target string.*got None"),
    ("llvm", "unknown kind 'llvm'"),
    ("cdua -arch=sm_80", r"unknown kind 'cdua' \(did you mean 'cuda'\?\)"),
    ("", "the target is empty"),
    (3, "must be a target string"),
    ("c -std=c98", r"unknown option '-std=c98' for kind 'c' \(did you mean '-std=c99'\?\)"),
    ("c -O0 -O3", "options -O0 and -O3 conflict"),
    ("c -g -g", "'-g' is given twice"),
    ("cuda -arch=80", "-arch must look like sm_80, got '80'"),
    ("cuda -arch", "unknown option '-arch'"),
    ("interpret -O0", "unknown option '-O0' for kind 'interpret'"),
])
def test_invalid_targets_list_the_valid_ones(spec, pattern):
    with pytest.raises(refcomp.BuildError, match=pattern) as info:
        parse_target(spec)
    if "conflict" not in pattern and "twice" not in pattern and "must look like" not in pattern:
        assert "valid targets: 'c'" in str(info.value) and "'cuda'" in str(info.value)


def test_target_constructor_validates():
    with pytest.raises(refcomp.BuildError, match="unknown kind 'llvm'"):
        Target("llvm")
    with pytest.raises(refcomp.BuildError, match="unknown option"):
        Target("c", ("-fast",))
    assert Target("c", ("-std=c99",)) == parse_target("c -std=c99")


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_round_trip(data):
    kind = data.draw(st.sampled_from(sorted(KINDS)))
    spec = KINDS[kind]
    flags = data.draw(st.lists(st.sampled_from(spec.flags), unique=True)) if spec.flags else []
    for group in spec.exclusive:  # keep at most one option of each exclusive group
        chosen = [f for f in flags if f in group]
        flags = [f for f in flags if f not in group or f == (chosen[0] if chosen else None)]
    options = list(flags)
    if spec.values and data.draw(st.booleans()):
        options.insert(data.draw(st.integers(0, len(options))),
                       f"-arch=sm_{data.draw(st.integers(10, 99))}{data.draw(st.sampled_from(['', 'a']))}")
    target = parse_target(" ".join([kind, *options]))
    assert target.options == tuple(options)
    assert parse_target(str(target)) == target and hash(parse_target(str(target))) == hash(target)


def test_every_kind_has_a_backend():
    assert set(BACKENDS) | {"interpret"} == set(KINDS)


# ----------------------------------------------------------------------------- both builds

def _scale_kernel():
    n = te.var("n")
    A = te.placeholder((n,), "float32", "A")
    B = te.compute((n,), lambda i: A[i] * 3.0 + 1.0, name="B")
    return te.create_prim_func([A, B])


def _scale_graph():
    n = refcomp.ast.SizeVar("n", "int64")
    x = Var("x", tensor((n,)))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(op.add(op.multiply(x, x), x))
        bb.emit_func_output(out)
    return bb.get()


@pytest.mark.parametrize("target", ["c", "c -std=c99", "c -O1 -no-openmp", "interpret",
                                    parse_target("c -std=c99")])
@pytest.mark.parametrize("bounds", BOUNDS_MODES)
def test_both_builds_accept_the_same_vocabulary(target, bounds, rng):
    a = rng.standard_normal(13).astype("float32")
    lib = refcomp.build(_scale_kernel(), target=target, bounds=bounds)
    b = np.full_like(a, np.nan)
    lib(a, b)
    np.testing.assert_allclose(b, a * 3 + 1, rtol=1e-5, atol=1e-6)
    assert lib.target == parse_target(target)
    ex = refcomp.graph.build(_scale_graph(), target=target, bounds=bounds)
    out = refcomp.runtime.VirtualMachine(ex)["main"](a)
    np.testing.assert_allclose(np.asarray(out), a * a + a, rtol=1e-5, atol=1e-6)
    assert ex.target == str(parse_target(target))


@pytest.mark.parametrize("spec", [None, "llvm", "c99", "c -std=c98"])
def test_both_builds_reject_bad_targets_alike(spec):
    for build, arg in ((refcomp.build, _scale_kernel()), (refcomp.graph.build, _scale_graph())):
        with pytest.raises(refcomp.BuildError, match="valid targets: 'c'"):
            build(arg, target=spec)


def test_graph_build_names_the_targets_it_supports():
    with pytest.raises(refcomp.BuildError, match="graph.build: target 'cuda' is not supported here; "
                                                 "valid targets: 'c'.*'interpret'"):
        refcomp.graph.build(_scale_graph(), target="cuda")


@pytest.mark.parametrize("bounds", ["on", "", None, "PROVE"])
def test_both_builds_reject_bad_bounds_alike(bounds):
    with pytest.raises(refcomp.BuildError, match="bounds must be one of 'prove', 'runtime', 'off'"):
        refcomp.build(_scale_kernel(), bounds=bounds)
    with pytest.raises(refcomp.BuildError, match="bounds must be one of 'prove', 'runtime', 'off'"):
        refcomp.graph.build(_scale_graph(), bounds=bounds)


def test_both_builds_share_one_default():
    import inspect

    assert DEFAULT_BOUNDS == "runtime"
    assert inspect.signature(refcomp.build).parameters["bounds"].default == DEFAULT_BOUNDS
    assert inspect.signature(refcomp.graph.build).parameters["bounds"].default == DEFAULT_BOUNDS


def test_graph_build_proves_its_kernels(monkeypatch, tmp_path):
    import refcomp.driver as driver

    # an empty build cache: a cached build was proved when its entry was made, and is not again
    monkeypatch.setenv("REFCOMP_CACHE_DIR", str(tmp_path))
    proved = []
    original = driver.insert_runtime_guards
    monkeypatch.setattr(driver, "insert_runtime_guards", lambda f: proved.append(f.name) or original(f))
    ex = refcomp.graph.build(_scale_graph())
    assert proved and set(proved) == set(ex.kernels)


def test_default_bounds_guard_what_cannot_be_proved(rng):
    """An index read from a buffer cannot be proved: "prove" refuses it, the default guards it."""
    n = te.var("n")
    A = te.placeholder((n,), "float32", "A")
    idx = te.placeholder((n,), "int32", "idx")
    B = te.compute((n,), lambda i: A[idx[i]], name="B")
    func = te.create_prim_func([A, idx, B])
    with pytest.raises(refcomp.ShapeError, match="may be out of bounds"):
        refcomp.build(func, bounds="prove")
    lib = refcomp.build(func)
    a = rng.standard_normal(6).astype("float32")
    perm = rng.permutation(6).astype("int32")
    b = np.full_like(a, np.nan)
    lib(a, perm, b)
    np.testing.assert_array_equal(b, a[perm])
    with pytest.raises(refcomp.RuntimeFailure):
        lib(a, perm + 6, b)


def test_importing_refcomp_leaves_the_environment_alone():
    code = ("import os; before = dict(os.environ); import refcomp.graph, refcomp.graph.pipeline, "
            "refcomp.runtime, refcomp.driver, refcomp.emit_c, refcomp.emit_cuda; "
            "assert dict(os.environ) == before, set(os.environ.items()) ^ set(before.items())")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.join(os.path.dirname(__file__), "..", "src"),
                                                      env.get("PYTHONPATH")]))
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=300)


def test_short_spins_are_asked_only_before_openmp_starts(monkeypatch):
    from refcomp.runtime import threads

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    monkeypatch.setattr(threads, "openmp_loaded", lambda: True)
    assert not threads.prefer_short_openmp_spins() and "OMP_WAIT_POLICY" not in os.environ
    monkeypatch.setattr(threads, "openmp_loaded", lambda: False)
    assert threads.prefer_short_openmp_spins()
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE" and os.environ["GOMP_SPINCOUNT"] == threads.SPIN_COUNT
    # a user's own setting of either wins
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    monkeypatch.delenv("GOMP_SPINCOUNT")
    assert not threads.prefer_short_openmp_spins() and os.environ["OMP_WAIT_POLICY"] == "ACTIVE"
    assert "GOMP_SPINCOUNT" not in os.environ
    monkeypatch.delenv("OMP_WAIT_POLICY")
    monkeypatch.setenv("GOMP_SPINCOUNT", "0")
    assert not threads.prefer_short_openmp_spins() and "OMP_WAIT_POLICY" not in os.environ
