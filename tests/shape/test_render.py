"""The short infix form used in shape messages."""
from refcomp.ast import Buffer, IntImm, SizeVar, Var, floordiv, floormod, max_, min_
from refcomp.shape.render import render

i, j, n = Var("i"), Var("j"), SizeVar("n")


def test_precedence_and_parentheses():
    assert render(i * 32 + j) == "i*32 + j"
    assert render((i + j) * 4) == "(i + j)*4"
    assert render(i - (j - 1)) == "i - (j - 1)"
    assert render(floordiv(i + 31, 32)) == "(i + 31) // 32"
    assert render(floormod(i, 4) == 0) == "i % 4 == 0"
    assert render((i < j) & (j < 4)) == "i < j and j < 4"
    assert render(i < n) == "i < n" and render(n > i) == "n > i"  # operands as written, SizeVar or not


def test_loads_calls_and_constants():
    A = Buffer("A", (n, 4))
    assert render(A[i, j + 1]) == "A[i, j + 1]"
    assert render(min_(i, max_(j, IntImm(3)))) == "min(i, max(j, 3))"
    assert render(IntImm(1, "bool")) == "True"
