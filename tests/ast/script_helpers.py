"""Helpers shared by the script printer/parser tests: round trip checks and small IR builders."""
from refcomp.ast import (
    Block, BlockRealize, Buffer, For, IntImm, PrimFunc, assert_structural_equal,
)
from refcomp.ast.parser import from_source
from refcomp.ast.printer import script

TRUE = IntImm(1, "bool")


def roundtrip(node):
    """Print node, parse it back, check structural equality and that printing again is identical."""
    text = script(node)
    parsed = from_source(text)
    assert_structural_equal(node, parsed)
    again = script(parsed)
    assert again == text, f"print -> parse -> print is not a fixed point:\n{text}\n----\n{again}"
    return text


def func_of(body, params, name="main", attrs=None):
    """A PrimFunc around body."""
    return PrimFunc(tuple(params), body, name, attrs)


def rooted(body, allocs=()):
    """body inside a root block, as te builds functions."""
    return BlockRealize((), TRUE, Block("root", (), (), (), body, alloc_buffers=tuple(allocs)))
