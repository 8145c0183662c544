"""Helpers shared by the script printer/parser tests: round trip checks and small IR builders."""
from refcomp.ast import (
    Block, BlockRealize, Buffer, BufferRegion, BufferStore, FloatImm, For, IntImm, IterVar, PrimFunc,
    Range, SizeVar, Var, assert_structural_equal,
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


# ---------------------------------------------------------------------- shared programs

# A TVM-style matmul with handle parameters, written as TVM users write it.
MATMUL = '''
from tvm.script import tir as T

@T.prim_func
def matmul(a: T.handle, b: T.handle, c: T.handle) -> None:
    T.func_attr({"global_symbol": "matmul", "tir.noalias": True})
    A = T.match_buffer(a, [128, 128])
    B = T.match_buffer(b, [128, 128])
    C = T.match_buffer(c, [128, 128])
    for i, j, k in T.grid(128, 128, 128):
        with T.block("update"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vj, vk]
'''

# A reduction into an intermediate buffer, then a let and a cast: passes every well-formedness rule.
GOOD = '''
@T.prim_func
def main(A: T.Buffer((n, 16), "float32"), C: T.Buffer((n,), "float32"), m: T.int32):
    n = T.int32(is_size_var=True)
    with T.block("root"):
        T.reads()
        T.writes()
        acc = T.alloc_buffer((n,), "float32")
        for i, k in T.grid(n, 16):
            with T.block("acc"):
                vi, vk = T.axis.remap("SR", [i, k])
                T.reads(A[vi, vk])
                T.writes(acc[vi])
                with T.init():
                    acc[vi] = T.float32(0)
                acc[vi] = acc[vi] + A[vi, vk]
        for i in range(n):
            with T.block("out"):
                vi = T.axis.spatial(n, i)
                T.reads(acc[vi])
                T.writes(C[vi])
                x: T.float32 = acc[vi] * T.Cast("float32", m)
                C[vi] = x
'''


def matmul(n=None):
    """C[i, j] = sum_k A[i, k] * B[k, j] built node by node, with a root block (te's layout)."""
    n = n if n is not None else SizeVar("n")
    A, B, C = Buffer("A", (n, 16)), Buffer("B", (16, 8)), Buffer("C", (n, 8))
    i, j, k = Var("i"), Var("j"), Var("k")
    vi, vj, vk = Var("vi"), Var("vj"), Var("vk")
    block = Block(
        "C",
        (IterVar(vi, Range.from_extent(n)), IterVar(vj, Range.from_extent(8)),
         IterVar(vk, Range.from_extent(16), "reduce")),
        (BufferRegion(A, (Range(vi, 1), Range(0, 16))), BufferRegion(B, (Range(0, 16), Range(vj, 1)))),
        (BufferRegion(C, (Range(vi, 1), Range(vj, 1))),),
        BufferStore(C, C[vi, vj] + A[vi, vk] * B[vk, vj], (vi, vj)),
        init=BufferStore(C, FloatImm(0.0), (vi, vj)),
    )
    nest = For(i, 0, n, "serial", For(j, 0, 8, "serial", For(k, 0, 16, "serial",
                                                                BlockRealize((i, j, k), TRUE, block))))
    return func_of(rooted(nest), (A, B, C), attrs={"global_symbol": "main", "tir.noalias": True})
