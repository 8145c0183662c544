"""The IR nodes: construction checks, identity, operators, with_, substitution, structural equality."""
import pytest

from refcomp.ast import (
    Add, Buffer, BufferStore, Cast, FloorDiv, For, IntImm, PrimFunc, SizeVar, Var, const,
    assert_structural_equal, free_vars, structural_equal, substitute,
)


def test_vars_compare_by_identity():
    a, b = Var("i"), Var("i")
    assert a is not b and not bool(a == b) and bool(a == a)
    assert len({a, b}) == 2


def test_python_operators_build_ir_with_promotion():
    i = Var("i")
    e = i // 4 + 1
    assert isinstance(e, Add) and isinstance(e.a, FloorDiv) and e.dtype.name == "int32"
    f = i * 0.5
    assert f.dtype.name == "float32" and isinstance(f.a, Cast)


def test_bad_nodes_rejected_where_built():
    with pytest.raises(TypeError):
        For(Var("i"), 0, const(1.5), "serial", BufferStore(Buffer("A", (4,)), const(1.0), (0,)))
    with pytest.raises(ValueError):
        IntImm(300, "int8")
    with pytest.raises(TypeError):
        Var("x") / 2  # integer true division is not defined: use //
    with pytest.raises(TypeError):
        BufferStore(Buffer("A", (4,), "float32"), const(1), (0,))


def test_with_returns_self_when_unchanged():
    i = Var("i")
    e = i + 1
    assert e.with_(a=i) is e
    assert e.with_(a=Var("j")) is not e


def test_substitute_and_free_vars():
    n = SizeVar("n")
    A = Buffer("A", (n,))
    i = Var("i")
    loop = For(i, 0, n, "serial", BufferStore(A, A[i] + 1.0, (i,)))
    assert free_vars(loop) == [n]
    new = substitute(loop, {n: 8})
    assert new.extent.value == 8 and new.body.buffer.shape[0].value == 8
    assert new.body.buffer is new.body.value.a.buffer  # one new buffer everywhere
    assert substitute(loop, {Var("other"): 3}) is loop


def test_structural_equality_is_alpha_equivalence():
    def make():
        n = SizeVar("n")
        A = Buffer("A", (n,))
        i = Var("i")
        return PrimFunc((A,), For(i, 0, n, "serial", BufferStore(A, A[i] * 2.0, (i,))))

    assert structural_equal(make(), make())
    x = Var("x")
    assert not structural_equal(x + 1, Var("y") + 1, map_free_vars=False)
    assert structural_equal(x + 1, x + 1, map_free_vars=False)
    with pytest.raises(AssertionError):
        assert_structural_equal(x + 1, x + 2)


def test_comparisons_with_a_size_var_keep_the_operands_in_written_order():
    import dataclasses

    from refcomp.ast import EQ, GE, GT, LE, LT, NE, Visitor
    from refcomp.ast.printer import script

    i, n, m = Var("i"), SizeVar("n"), SizeVar("m")
    cases = [
        (lambda a, b: a < b, LT), (lambda a, b: a <= b, LE), (lambda a, b: a > b, GT),
        (lambda a, b: a >= b, GE), (lambda a, b: a == b, EQ), (lambda a, b: a != b, NE),
    ]
    for build, cls in cases:
        for a, b in [(i, n), (n, i), (n, m), (i, i * 2), (n * 2, i)]:
            e = build(a, b)
            assert type(e) is cls and e.a is a and e.b is b, (cls.__name__, script(e))
    assert script(i < n) == "i < n" and script(n > i) == "n > i"
    # a SizeVar is still a Var everywhere else
    assert isinstance(n, Var) and issubclass(SizeVar, Var) and not isinstance(i, SizeVar)
    assert not isinstance(IntImm(1), Var) and not issubclass(Add, Var)
    assert isinstance(n, (IntImm, Var)) and free_vars(i + n) == [i, n]
    renamed = dataclasses.replace(n, name="k")
    assert type(renamed) is SizeVar and renamed.name == "k"
    with pytest.raises(TypeError, match="SizeVar name"):
        SizeVar("")
    seen = []

    class Names(Visitor):
        def visit_SizeVar(self, var):
            seen.append(var.name)

    Names().visit(i < n)
    assert seen == ["n"]
