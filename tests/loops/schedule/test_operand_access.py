"""The access a tensor intrinsic declares per operand (read / write / readwrite), carried by
tensorize into the function's attrs (refcomp.ast.intrinsics.EXTERN_ACCESS), and the analyses that
ask whether a buffer is written: an operand declared read is not, an undeclared address is."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import refcomp
from refcomp import te
from refcomp.ast import Buffer, Evaluate, StringImm
from refcomp.ast.expr import Call
from refcomp.ast.intrinsics import EXTERN_ACCESS, address_accesses, addressed_writes, merge_extern_access
from refcomp.loops import intrin, recipes
from refcomp.loops.intrin.registry import TensorIntrin
from refcomp.loops.lower import lower
from refcomp.loops.passes.compact_buffers import _handed_to
from refcomp.shape.arguments import written_buffers
from refcomp.shape.facts import _opaque_writes

SMALL = recipes.Tiling(mc=24, nc=32, kc=32)
AVX2_TILE = "x86.avx2.sgemm_6x16"


def _matmul(m=48, n=64, k=64):
    a = te.placeholder((m, k), "float32", "A")
    b = te.placeholder((k, n), "float32", "B")
    r = te.reduce_axis((0, k), "k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    return te.create_prim_func([a, b, c])


def _names(buffers) -> set[str]:
    return {b.name for b in buffers}


def _without_declarations(func):
    return func.with_(attrs={k: v for k, v in func.attrs.items() if k != EXTERN_ACCESS})


def test_gemm_tiles_declare_their_operands():
    from refcomp.loops.intrin import cuda_wmma

    for name in (*recipes.matmul.FP32_INTRINS, *(v[0] for v in cuda_wmma.VARIANTS.values())):
        tile = intrin.get(name)
        assert tile.operand_access == ("read", "read", "readwrite")
        table = tile.extern_access()
        assert set(table) >= {tile.impl.name}
        accesses = [a for a in table[tile.impl.name] if a]
        assert accesses == ["read", "read", "readwrite"]  # A, B, C addresses in the call's order


def test_tensorized_read_operand_is_not_written():
    sch = recipes.matmul_fp32(_matmul(), intrin=AVX2_TILE, tiling=SMALL, parallel=False)
    after = sch.func
    assert EXTERN_ACCESS in after.attrs
    # after: A reaches the tile only by address, declared read; C is updated through its address
    assert "A" not in _names(written_buffers(after)) and "C" in _names(written_buffers(after))
    assert "A" not in _names(addressed_writes(after.body, after.attrs))
    assert "C" in _names(addressed_writes(after.body, after.attrs))
    # before (no declaration): every address handed out counts as written
    assert "A" in _names(written_buffers(_without_declarations(after)))
    lowered = lower(after)
    assert lowered.attrs.get(EXTERN_ACCESS) == after.attrs[EXTERN_ACCESS]
    assert "A" not in _names(written_buffers(lowered)) and "C" in _names(written_buffers(lowered))
    assert "A" in _names(written_buffers(_without_declarations(lowered)))


def test_undeclared_intrinsic_keeps_every_address_written():
    from refcomp.loops.primitives.tensorize import _with_requirements

    declared = intrin.get(AVX2_TILE)
    undeclared = dataclasses.replace(declared, name="test.undeclared_6x16", operand_access=())
    assert undeclared.extern_access() == {}
    func = _without_declarations(recipes.matmul_fp32(_matmul(), intrin=AVX2_TILE, tiling=SMALL, parallel=False).func)
    # what tensorize records of the intrinsic: nothing for an undeclared one
    assert EXTERN_ACCESS not in _with_requirements(func, undeclared).attrs
    assert {"A", "C"} <= _names(written_buffers(_with_requirements(func, undeclared)))
    assert "A" not in _names(written_buffers(_with_requirements(func, declared)))


def test_declared_access_per_argument():
    a = Buffer("A", (4,), "float32")
    b = Buffer("B", (4,), "float32")
    address = lambda buf: Call("address_of", (buf.vload((0,)),), "handle")  # noqa: E731
    call = lambda name: Evaluate(Call("call_extern", (StringImm(name), address(a), 4, address(b)), "int32"))  # noqa: E731
    attrs = {EXTERN_ACCESS: (("f", ("read", "", "readwrite")),)}
    assert [(load.buffer.name, access) for load, access in address_accesses(call("f"), attrs)] == \
        [("A", "read"), ("B", "readwrite")]
    assert _names(addressed_writes(call("f"), attrs)) == {"B"}
    assert _names(addressed_writes(call("g"), attrs)) == {"A", "B"}  # g declares nothing
    assert _names(addressed_writes(call("f"), None)) == {"A", "B"}
    assert _names(_opaque_writes(call("f"), attrs)) == {"B"}
    assert _names(_opaque_writes(call("f"))) == {"A", "B"}
    # a relocatable call fills (writes) only the operands it does not declare read
    assert not _handed_to(call("f"), a, frozenset({"f"}), attrs)
    assert _handed_to(call("f"), b, frozenset({"f"}), attrs)
    assert _handed_to(call("f"), a, frozenset({"f"}), None)


def test_one_address_node_under_a_declared_and_an_undeclared_call_counts_as_written():
    """The IR is immutable, so one address_of node may be shared: its place under a read
    operand does not make it read where it also reaches an undeclared call."""
    from refcomp.ast import SeqStmt

    a = Buffer("A", (4,), "float32")
    shared = Call("address_of", (a.vload((0,)),), "handle")
    declared = Evaluate(Call("call_extern", (StringImm("f"), shared), "int32"))
    undeclared = Evaluate(Call("call_extern", (StringImm("g"), shared), "int32"))
    attrs = {EXTERN_ACCESS: (("f", ("read",)),)}
    assert _names(addressed_writes(declared, attrs)) == set()
    assert _names(addressed_writes(SeqStmt((declared, undeclared)), attrs)) == {"A"}
    assert sorted(access for _, access in address_accesses(SeqStmt((declared, undeclared)), attrs)) == \
        ["read", "write"]


def test_declarations_of_one_function_join():
    table = merge_extern_access((), "f", ("read", "", "write"))
    assert table == (("f", ("read", "", "write")),)
    assert merge_extern_access(table, "f", ("read", "", "write")) == table
    assert merge_extern_access(table, "f", ("write", "", "read")) == (("f", ("readwrite", "", "readwrite")),)
    assert merge_extern_access(table, "f", ("read", "read", "write")) == (("f", ("read", "", "write")),)


def test_bad_operand_access_is_refused():
    tile = intrin.get(AVX2_TILE)
    with pytest.raises(TypeError, match="operand_access"):
        TensorIntrin("test.bad", tile.desc, tile.impl, operand_access=("read", "write"))
    with pytest.raises(TypeError, match="operand_access"):
        TensorIntrin("test.bad", tile.desc, tile.impl, operand_access=("read", "read", "modify"))


def test_read_only_operand_may_be_a_read_only_array(rng):
    available = [name for name in recipes.matmul.FP32_INTRINS if intrin.get(name).available()]
    if not available:
        pytest.skip("no fp32 tile intrinsic runs on this CPU")
    func = recipes.matmul_fp32(_matmul(), intrin=available[-1], tiling=SMALL, parallel=False).func
    lib = refcomp.build(func, target="c")
    a = rng.standard_normal((48, 64)).astype(np.float32)
    b = rng.standard_normal((64, 64)).astype(np.float32)
    a.setflags(write=False)
    b.setflags(write=False)
    c = np.full((48, 64), np.nan, np.float32)
    lib(a, b, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-4)
    c.setflags(write=False)  # the tile's C operand is declared readwrite: still refused read-only
    with pytest.raises(refcomp.ArgumentError, match="read-only"):
        lib(a, b, c)
