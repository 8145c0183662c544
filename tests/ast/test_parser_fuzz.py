"""Mangled script text never crashes the parser: it parses, or raises a located ParseError."""
from hypothesis import given, strategies as st

from refcomp import ParseError
from refcomp.ast.parser import from_source
from script_helpers import GOOD, MATMUL

SOURCES = [GOOD, MATMUL, '''
@T.prim_func
def k(A: T.Buffer((8,), "float32"), n: T.int32):
    tmp = T.decl_buffer((8,), "float32", scope="local")
    for i in T.parallel(0, 8, annotations={"a": 1}):
        with T.LetStmt(A[i] * 2.0) as x:
            if T.likely(i < 7):
                tmp[i] = T.Select(x > 0.0, x, T.float32("-inf"))
            else:
                assert i == 7, "last"
                tmp[i] = T.exp(A[i])
    for i in range(8):
        A[i] = tmp[i] + T.Cast("float32", T.truncdiv(n, 3))
''']
TOKENS = ["T.", "(", ")", ",", ":", "[", "]", "=", "0", "-1", "T.int32()", "T.grid(", "with", "vi",
          '"S"', "T.axis.remap(", "T.block(", "for", "in", "\n", "    ", "T.Buffer(", "+=", "not", "x"]


@given(st.sampled_from(SOURCES), st.lists(st.tuples(st.integers(0, 2000), st.integers(0, 8),
                                                     st.sampled_from(TOKENS)), min_size=1, max_size=3))
def test_mangled_text_parses_or_raises_parse_error(source, edits):
    text = source
    for position, length, token in edits:
        position %= max(len(text), 1)
        text = text[:position] + token + text[position + length:]
    try:
        from_source(text)
    except ParseError as error:
        assert str(error)


WORDS = ["T", "A", "vi", "i", "range", "block", "remap", "grid", "int32", "float32", "Buffer", "init",
         "reads", "writes", "where", "alloc_buffer", "match_buffer", "axis", "spatial", "reduce", "x",
         "serial", "handle", "Cast", "Let", "prim_func", "ir_module", "0", "1", "2", "None", "True",
         "exp", "max", "Ramp", "evaluate", "LetStmt", "Assert", "seq", "func_attr", "block_attr"]


@given(st.sampled_from(SOURCES), st.lists(st.tuples(st.integers(0, 400), st.sampled_from(WORDS)),
                                          min_size=1, max_size=3))
def test_words_swapped_parse_or_raise_parse_error(source, edits):
    import re

    words = list(re.finditer(r"\w+", source))
    text = source
    for index, word in edits:
        match = list(re.finditer(r"\w+", text))[index % len(words)]
        text = text[:match.start()] + word + text[match.end():]
    try:
        from_source(text)
    except ParseError as error:
        assert str(error)
