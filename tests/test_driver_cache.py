"""refcomp.build's cached builds: a "c" kernel's checked, lowered and emitted form, reused by key.

A rebuilt function takes the entry (its proofs and runtime guards were made with it) and computes
what a fresh build computes; a truncated entry, one from another refcomp version or one that does
not unpickle is removed and built again; names, bounds modes and targets key separate entries.
"""
import pickle

import numpy as np
import pytest

import refcomp
from refcomp.ast import Buffer, BufferStore, For, PrimFunc, SizeVar, Var
from refcomp.ast.structural import StructuralHasher, UnhashableIR
from refcomp.emit_c import CACHE_STATS, toolchain


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("REFCOMP_CACHE_DIR", str(tmp_path))
    return tmp_path


def _scaled_sum(shift: int = 0, name: str = "B", scale: float = 3.0) -> PrimFunc:
    """B[i] = scale * A[i + shift] + A[i] over n: shift 1 reads one past A's end at the last i."""
    n = SizeVar("n", "int32")
    A, B = Buffer("A", (n,), "float32"), Buffer(name, (n,), "float32")
    i = Var("i", "int32")
    return PrimFunc((A, B), For(i, 0, n, "serial", BufferStore(B, A[i + shift] * scale + A[i], (i,))), "scaled")


def _entries(cache):
    return sorted(cache.rglob("*.build"))


def _run(lib, n: int, rng) -> tuple[np.ndarray, np.ndarray]:
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    lib(a, b)
    return a, b


def test_second_build_takes_the_entry_and_computes_the_same(cache):
    rng = np.random.default_rng()
    before = dict(CACHE_STATS)
    fresh = refcomp.build(_scaled_sum(), bounds="prove")
    assert CACHE_STATS["build_misses"] == before["build_misses"] + 1 and len(_entries(cache)) == 1
    func = _scaled_sum()
    cached = refcomp.build(func, bounds="prove")
    assert CACHE_STATS["build_hits"] == before["build_hits"] + 1
    assert cached.source == fresh.source and cached.path == fresh.path
    # the restored module and lowered IR refer to this call's own vars and buffers
    assert cached.func is func
    sizes = [p.obj for p in cached.module.params if p.kind == "size"]
    assert sizes and all(any(v is dim for b in func.buffers for dim in b.shape) for v in sizes)
    assert set(cached.lowered.attrs["original_buffers"].values()) <= set(func.buffers)
    for n in (1, 7, 33):
        a, b = _run(cached, n, rng)
        np.testing.assert_allclose(b, a * 3 + a, rtol=1e-6)


def test_runtime_guards_come_back_with_the_entry(cache):
    rng = np.random.default_rng()
    refcomp.build(_scaled_sum(shift=1), bounds="runtime")
    before = dict(CACHE_STATS)
    lib = refcomp.build(_scaled_sum(shift=1), bounds="runtime")
    assert CACHE_STATS["build_hits"] == before["build_hits"] + 1
    with pytest.raises(refcomp.RuntimeFailure, match="out of bounds"):
        _run(lib, 5, rng)


def test_a_failed_proof_leaves_no_entry(cache):
    for _ in range(2):
        with pytest.raises(refcomp.ShapeError, match="out of bounds"):
            refcomp.build(_scaled_sum(shift=1), bounds="prove")
    assert _entries(cache) == []


def test_names_bounds_and_targets_key_separate_entries(cache):
    refcomp.build(_scaled_sum(), bounds="prove")
    refcomp.build(_scaled_sum(name="C"), bounds="prove")  # the C text names the buffer
    refcomp.build(_scaled_sum(), bounds="runtime")
    refcomp.build(_scaled_sum(), target="c -O1", bounds="prove")
    refcomp.build(_scaled_sum(scale=4.0), bounds="prove")
    assert len(_entries(cache)) == 5


def _damage_and_rebuild(cache, damage) -> None:
    rng = np.random.default_rng()
    refcomp.build(_scaled_sum(), bounds="prove")
    [entry] = _entries(cache)
    entry.write_bytes(damage(entry.read_bytes()))
    before = dict(CACHE_STATS)
    lib = refcomp.build(_scaled_sum(), bounds="prove")
    assert CACHE_STATS["build_rejected"] == before["build_rejected"] + 1
    a, b = _run(lib, 9, rng)
    np.testing.assert_allclose(b, a * 3 + a, rtol=1e-6)
    # the entry was written again, whole: the next build takes it
    hits = CACHE_STATS["build_hits"]
    refcomp.build(_scaled_sum(), bounds="prove")
    assert CACHE_STATS["build_hits"] == hits + 1 and CACHE_STATS["build_rejected"] == before["build_rejected"] + 1


def test_a_truncated_entry_is_rebuilt(cache):
    _damage_and_rebuild(cache, lambda data: data[: len(data) // 2])


def test_an_empty_entry_is_rebuilt(cache):
    _damage_and_rebuild(cache, lambda data: b"")


def test_an_entry_from_another_version_is_rebuilt(cache):
    def other_version(data: bytes) -> bytes:
        magic, header, payload = data.split(b"\n", 2)
        key, _, length, checksum = header.split(b" ")
        return b"\n".join([magic, b" ".join([key, b"0.0.0-other", length, checksum]), payload])

    _damage_and_rebuild(cache, other_version)


def test_an_entry_whose_payload_does_not_unpickle_is_rebuilt(cache):
    # a checksum that matches bytes that are not a build (written by a broken writer)
    def garbage(data: bytes) -> bytes:
        key = data.split(b"\n", 2)[1].split(b" ")[0].decode()
        toolchain.write_build(key, pickle.dumps(("not", "a", "build")))
        return next(iter(_entries(cache))).read_bytes()

    _damage_and_rebuild(cache, garbage)


def test_exact_hash_keeps_names_and_refuses_inexact_leaves():
    def digest(func, exact):
        hasher = StructuralHasher(exact=exact)
        hasher.visit(func)
        return hasher.digest()

    assert digest(_scaled_sum(), True) == digest(_scaled_sum(), True)
    assert digest(_scaled_sum(name="C"), True) != digest(_scaled_sum(), True)
    assert digest(_scaled_sum(name="C"), False) == digest(_scaled_sum(), False)
    hasher = StructuralHasher(exact=True)
    with pytest.raises(UnhashableIR):
        hasher.visit(object())


def test_the_interpret_target_keeps_no_entry(cache):
    refcomp.build(_scaled_sum(), target="interpret", bounds="prove")
    assert _entries(cache) == []


def test_the_lowering_debug_switch_builds_without_the_entry(cache, monkeypatch, capsys):
    refcomp.build(_scaled_sum(), bounds="prove")
    monkeypatch.setenv("REFCOMP_DEBUG", "1")
    before = dict(CACHE_STATS)
    refcomp.build(_scaled_sum(), bounds="prove")
    assert "IR after flatten_buffers" in capsys.readouterr().err
    assert CACHE_STATS["build_hits"] == before["build_hits"]
