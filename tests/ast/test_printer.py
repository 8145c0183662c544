"""The script printer, one construct at a time: expected text fragments, then a round trip."""
import pytest

from refcomp.ast import (
    Allocate, AssertStmt, Block, BlockRealize, Broadcast, Buffer, BufferRegion, BufferStore, Call,
    Cast, Evaluate, FloatImm, For, IfThenElse, IntImm, IRModule, IterVar, Let, LetStmt,
    MatchBufferRegion, Max, Min, Not, Ramp, Range, Select, SeqStmt, SizeVar, StringImm,
    TruncDiv, TruncMod, Var, While, const, seq,
)
from refcomp.ast.printer import script
from script_helpers import TRUE, func_of, matmul, roundtrip, rooted


def test_matmul_prints_in_tvmscript_style_and_round_trips():
    text = roundtrip(matmul())
    assert text.startswith("@T.prim_func\ndef main(A: T.Buffer((n, 16), \"float32\"), ")
    for fragment in [
        "    n = T.int32(is_size_var=True)\n",
        'T.func_attr({"global_symbol": "main", "tir.noalias": True})',
        'with T.block("root"):',
        "for i, j, k in T.grid(n, 8, 16):",
        'with T.block("C"):',
        'vi, vj, vk = T.axis.remap("SSR", [i, j, k])',
        "T.reads(A[vi, 0:16], B[0:16, vj])",
        "T.writes(C[vi, vj])",
        "with T.init():",
        "C[vi, vj] = T.float32(0.0)",
        "C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]",
    ]:
        assert fragment in text, fragment


def test_node_script_method_and_repr_use_the_printer():
    i = Var("i")
    assert (i + 1).script() == "i + 1"
    assert repr(i * 2) == "i * 2"
    assert "def main" in repr(matmul())


@pytest.mark.parametrize("kind,spelling", [
    ("parallel", "T.parallel(16)"), ("vectorized", "T.vectorized(16)"), ("unrolled", "T.unroll(16)"),
])
def test_loop_kinds(kind, spelling):
    A = Buffer("A", (16,))
    i = Var("i")
    f = func_of(For(i, 0, 16, kind, BufferStore(A, A[i] * 2.0, (i,))), (A,))
    text = roundtrip(f)
    assert f"for i in {spelling}:" in text


def test_thread_binding_annotations_and_loop_offsets():
    A = Buffer("A", (64,))
    i, j, k = Var("i"), Var("j"), Var("k")
    inner = For(k, 2, 5, "serial", BufferStore(A, A[i + j + k], (i,)), annotations={"pragma_unroll": 4})
    f = func_of(For(i, 0, 32, "thread_binding", For(j, Var("m"), 3, "serial", inner), "threadIdx.x"), (A,))
    text = roundtrip(f)
    assert 'for i in T.thread_binding(32, thread="threadIdx.x"):' in text
    assert "for j in range(m, m + 3):" in text
    assert 'for k in T.serial(2, 7, annotations={"pragma_unroll": 4}):' in text
    assert "    m = T.int32()\n" in text  # an undeclared var is declared at the top


def test_int64_loops_and_buffers():
    n = SizeVar("n", "int64")
    A = Buffer("A", (n,), "float16")
    i = Var("i", "int64")
    f = func_of(For(i, IntImm(0, "int64"), n, "serial",
                    BufferStore(A, A[i + IntImm(1, "int64")], (i,))), (A,))
    text = roundtrip(f)
    assert "n = T.int64(is_size_var=True)" in text
    assert "A[i + T.int64(1)]" in text


def test_expressions_print_with_python_precedence():
    a, b, c = Var("a"), Var("b"), Var("c")
    assert script(a - (b - c)) == "a - (b - c)"
    assert script((a - b) - c) == "a - b - c"
    assert script((a + b) * c) == "(a + b) * c"
    assert script(a // b % c) == "a // b % c"
    assert script(a // (b % c)) == "a // (b % c)"
    assert script((a < b) == (b < c)) == "(a < b) == (b < c)"
    assert script(Not((a < b) & (b < c))) == "not (a < b and b < c)"
    assert script(const(-3) * a) == "-3 * a"
    assert script(a - const(-3)) == "a - -3"
    assert script(TruncDiv(a, b)) == "T.truncdiv(a, b)"
    assert script(TruncMod(a, b)) == "T.truncmod(a, b)"
    assert script(Min(a, Max(b, c))) == "T.min(a, T.max(b, c))"


def test_constants_carry_their_dtypes():
    assert script(const(3)) == "3"
    assert script(IntImm(3, "int8")) == "T.int8(3)"
    assert script(IntImm(7, "uint64")) == "T.uint64(7)"
    assert script(const(True)) == "True"
    assert script(FloatImm(1.5)) == "T.float32(1.5)"
    assert script(FloatImm(0.1, "float64")) == "T.float64(0.1)"
    assert script(FloatImm(float("inf"), "float16")) == 'T.float16("inf")'
    assert script(FloatImm(float("nan"), "bfloat16")) == 'T.bfloat16("nan")'
    assert script(StringImm('a"b')) == '"a\\"b"'


def test_calls_casts_select_vectors_let():
    x = Var("x", "float32")
    i = Var("i")
    assert script(Call("exp", (x,), "float32")) == "T.exp(x)"
    assert script(Call("isnan", (x,), "bool")) == "T.isnan(x)"
    assert script(Call("exp", (x,), "float64")) == 'T.call_intrin("float64", "exp", x)'
    assert script(Call("if_then_else", (i < 3, x, FloatImm(0.0)), "float32")) == \
        "T.if_then_else(i < 3, x, T.float32(0.0))"
    assert script(Call("call_extern", (StringImm("f"), i), "int32")) == 'T.call_extern("int32", "f", i)'
    assert script(Cast("float16", x)) == 'T.Cast("float16", x)'
    assert script(Select(i < 3, x, x)) == "T.Select(i < 3, x, x)"
    assert script(Ramp(i, const(2), 4)) == "T.Ramp(i, 2, 4)"
    assert script(Broadcast(x, 8)) == "T.Broadcast(x, 8)"
    y = Var("y")
    assert script(Let(y, i + 1, y * y)) == "T.Let(y := i + 1, y * y)"


def test_statements_round_trip():
    A = Buffer("A", (8,), "int32")
    i, x = Var("i"), Var("x")
    tmp = Buffer("tmp", (4,), "float32", scope="local", align=64)
    body = seq(
        LetStmt(x, A[0] + 1, BufferStore(A, x, (1,))),
        AssertStmt(A[0] > 0, "A[0] must be positive", Evaluate(Call("tvm_storage_sync", (StringImm("shared"),), "int32"))),
        Allocate(tmp, BufferStore(tmp, FloatImm(1.0), (0,))),
        IfThenElse(A[2] == 3, BufferStore(A, 4, (2,)),
                   IfThenElse(A[2] == 4, BufferStore(A, 5, (2,)), BufferStore(A, 6, (2,)))),
        While(A[3] < 10, BufferStore(A, A[3] + 1, (3,))),
        For(i, 0, 8, "serial", IfThenElse(i % 2 == 0, BufferStore(A, A[i] * 2, (i,)))),
        LetStmt(Var("y"), const(5), AssertStmt(A[4] != 7, 'no "seven"', BufferStore(A, 0, (4,)))),
    )
    text = roundtrip(func_of(body, (A,)))
    assert "with T.LetStmt(A[0] + 1) as x:" in text
    assert 'with T.Assert(A[0] > 0, "A[0] must be positive"):' in text
    assert 'with T.allocate((4,), "float32", "local", align=64) as tmp:' in text
    assert "elif A[2] == 4:" in text and "else:" in text
    assert "while A[3] < 10:" in text
    assert "y: T.int32 = 5" in text  # the last binder is written flat
    assert "assert A[4] != 7, " in text


def test_odd_sequences_round_trip():
    A = Buffer("A", (2,), "int32")
    one = BufferStore(A, 1, (0,))
    two = BufferStore(A, 2, (1,))
    for body in [SeqStmt(()), SeqStmt((one,)), SeqStmt((SeqStmt((one, two)), two)),
                 For(Var("i"), 0, 2, "serial", SeqStmt(()))]:
        text = roundtrip(func_of(body, (A,)))
        assert "with T.seq():" in text


def test_block_features_round_trip():
    n = SizeVar("n")
    A = Buffer("A", (n, 16), strides=(Var("s0"), 1), elem_offset=Var("off"))
    B = Buffer("B", (n, 16))
    i, j, jo = Var("i"), Var("j"), Var("jo")
    vi, vj = Var("vi"), Var("vj")
    sub = Buffer("A_sub", (4,))
    cache = Buffer("cache", (16,), scope="shared")
    block = Block(
        "B", (IterVar(vi, Range.from_extent(n)), IterVar(vj, Range(2, 14))),
        (BufferRegion(A, (Range(vi, 1), Range(vj, 4))),), (BufferRegion(B, (Range(vi, 1), Range(vj, 1))),),
        seq(BufferStore(cache, sub[0], (vj,)), BufferStore(B, cache[vj] + sub[1], (vi, vj))),
        alloc_buffers=(cache,), match_buffers=(MatchBufferRegion(sub, BufferRegion(A, (Range(vi, 1), Range(vj, 4)))),),
        annotations={"schedule_rule": "x", "sizes": [1, 2], "pair": (3, FloatImm(0.5))},
    )
    realize = BlockRealize((i, jo * 4 + j), (jo * 4 + j) < 14, block)
    nest = For(i, 0, n, "parallel", For(jo, 0, 4, "serial", For(j, 0, 4, "serial", realize)))
    text = roundtrip(func_of(rooted(nest), (A, B)))
    assert 'A: T.Buffer((n, 16), "float32", strides=(s0, 1), elem_offset=off)' in text
    assert "vi = T.axis.spatial(n, i)" in text
    assert "vj = T.axis.spatial((2, 16), jo * 4 + j)" in text
    assert "T.where(jo * 4 + j < 14)" in text
    assert "T.reads(A[vi, vj:vj + 4])" in text
    assert 'cache = T.alloc_buffer((16,), "float32", scope="shared")' in text
    assert 'A_sub = T.match_buffer(A[vi, vj:vj + 4], (4,), "float32")' in text
    assert 'T.block_attr({"schedule_rule": "x", "sizes": [1, 2], "pair": (3, T.float32(0.5))})' in text


def test_opaque_iter_vars_unrealized_block_and_no_root():
    A = Buffer("A", (4,))
    v = Var("v")
    block = Block("b", (IterVar(v, Range.from_extent(4), "opaque"),), (), (), BufferStore(A, FloatImm(1.0), (v,)))
    text = roundtrip(func_of(block, (A,)))
    assert 'with T.block("b", no_realize=True):' in text
    assert "v = T.axis.opaque(4)" in text
    assert "@T.prim_func(implicit_root=False)" in text


def test_same_names_are_made_unique_deterministically():
    A = Buffer("A", (4, 4), "int32")
    i1, i2 = Var("i"), Var("i")
    body = seq(For(i1, 0, 4, "serial", BufferStore(A, 0, (i1, 0))),
               For(i2, 0, 4, "serial", BufferStore(A, 1, (i2, 1))))
    f = func_of(body, (A,))
    text = roundtrip(f)
    assert "for i in range(4):" in text and "for i_1 in range(4):" in text
    assert script(f) == text  # stable across calls


def test_unsafe_names_are_escaped_and_kept():
    A = Buffer("a; exit(1);", (4,), "int32")
    B = Buffer("a; exit(1);", (4,), "int32")
    block_name = 'x"); import os; ("'
    i = Var("for")
    f = func_of(For(i, 0, 4, "serial", BufferStore(A, B[i], (i,))), (A, B), name="my func")
    text = roundtrip(f)
    assert 'a__exit_1__: T.Buffer((4,), "int32", name="a; exit(1);")' in text
    assert 'a__exit_1___1: T.Buffer((4,), "int32", name="a; exit(1);")' in text
    assert '@T.prim_func(name="my func")' in text and "def my_func(" in text
    assert "for for_ in range(4):" in text
    g = func_of(rooted(BlockRealize((), TRUE, Block(block_name, (), (), (), Evaluate(0)))), ())
    assert script(g).count(block_name.replace('"', '\\"')) == 1
    roundtrip(g)


def test_module_sorted_by_name():
    f = matmul(16)
    g = func_of(Evaluate(0), (), name="another")
    mod = IRModule({"zeta": f, "alpha": g}, attrs={"target": "c"})
    text = roundtrip(mod)
    assert text.startswith("@I.ir_module\nclass Module:\n")
    assert 'I.module_attrs({"target": "c"})' in text
    assert text.index("def alpha") < text.index("def zeta")
    assert '@T.prim_func(name="another")' in text and '@T.prim_func(name="main")' in text


def test_mark_points_at_the_node():
    f = matmul()
    block = f.body.block.body.body.body.body.block
    load = block.body.value.b.a
    text = script(f, mark=load)
    lines = text.split("\n")
    marked = [n for n, line in enumerate(lines) if line.startswith("--> ")]
    assert len(marked) == 1
    line, carets = lines[marked[0]], lines[marked[0] + 1]
    start = line.index("A[vi, vk]")
    assert carets.index("^") == start and carets.count("^") == len("A[vi, vk]")
    assert all(l.startswith("    ") or l.startswith("--> ") for l in lines)
    assert "-->" in script(f, mark=block).split("\n")[[i for i, l in enumerate(script(f, mark=block).split("\n"))
                                                        if 'T.block("C")' in l][0]]


def test_mark_not_in_tree_is_reported():
    text = script(matmul(), mark=Var("zzz"))
    assert "not part of this PrimFunc" in text and "zzz" in text


def test_mark_for_statements_and_buffers():
    f = matmul()
    A = f.params[0]
    text = script(f, mark=A)
    assert "--> def main(A: T.Buffer" in text
    store = f.body.block.body.body.body.body.block.init
    text = script(f, mark=store)
    assert "-->" in [l for l in text.split("\n") if "T.float32(0.0)" in l][0]


def test_printing_nodes_of_every_kind_alone():
    A = Buffer("A", (4,))
    assert script(A) == 'A: T.Buffer((4,), "float32")'
    assert script(BufferRegion(A, (Range(1, 2),))) == "A[1:3]"
    assert script(IterVar(Var("v"), Range.from_extent(4), "reduce")) == "v = T.axis.reduce(4)"
    assert script(BufferStore(A, FloatImm(2.0), (0,))) == "A[0] = T.float32(2.0)"


def test_module_with_a_graph_function_uses_the_graph_printer():
    graph = pytest.importorskip("refcomp.graph")
    from refcomp import te
    from refcomp.ast.graph_struct_info import TensorStructInfo
    from refcomp.graph.block_builder import emit_te

    n = SizeVar("n", "int64")
    x = graph.Var("x", TensorStructInfo((n, 4), "float32"))
    bb = graph.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = emit_te(bb, lambda a: te.compute(a.shape, lambda i, j: a[i, j] + 1.0, name="add"), x,
                        primfunc_name_hint="add_one")
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    text = script(bb.get())
    assert text.index("@T.prim_func\n    def add_one(") < text.index("@R.function\n    def main(")
    assert "n = T.int64(is_size_var=True)" in text


def test_mark_on_ranges_of_regions_and_domains():
    f = matmul()
    block = f.body.block.body.body.body.body.block
    text = script(f, mark=block.reads[0].region[1])
    line = [l for l in text.split("\n") if l.startswith("-->")][0]
    assert "T.reads(A[vi, 0:16]" in line
    text = script(f, mark=block.iter_vars[2].dom)
    assert "not part of" not in text


def test_vars_and_buffers_inside_function_attrs_are_declared():
    n = SizeVar("n")
    A = Buffer("A", (n,))
    original = Buffer("A", (n, Var("m")))
    bound = Var("k")
    i = Var("i")
    f = func_of(For(i, 0, n, "serial", BufferStore(A, FloatImm(1.0), (i,))), (A,),
                attrs={"original_buffers": {A: original}, "upper_bound": {bound: 64}})
    text = roundtrip(f)
    assert 'A_1 = T.Buffer((n, m), "float32", name="A")' in text
    assert "k = T.int32()" in text and "m = T.int32()" in text


def test_mark_on_a_node_not_written_points_at_its_statement():
    f = matmul()
    loop = f.body.block.body
    text = script(f, mark=loop.min)  # the implicit 0 of T.grid
    assert "--> " in text and "not part of" not in text
    assert [l for l in text.split("\n") if l.startswith("-->")][0][4:].strip().startswith("for i, j, k in T.grid(")
    A = Buffer("A", (4,), "int32")
    unused = Var("u")
    g = func_of(For(unused, 0, 4, "serial", BufferStore(A, 1, (0,))), (A,))
    assert "-->     for u in range(4):" in script(g, mark=unused)


def test_handle_params_extern_calls_and_addresses_round_trip():
    from refcomp.ast import BufferLoad

    A = Buffer("A", (16,), "float32")
    ctx = Var("ctx", "handle")
    call = Call("call_extern", (StringImm("micro_kernel"), Call("address_of", (BufferLoad(A, (const(4),)),), "handle"),
                                ctx, const(12)), "int32")
    text = roundtrip(func_of(Evaluate(call), (A, ctx)))
    assert "def main(A: T.Buffer((16,), \"float32\"), ctx: T.handle):" in text
    assert 'T.evaluate(T.call_extern("int32", "micro_kernel", T.address_of(A[4]), ctx, 12))' in text


def test_prefetch_round_trips():
    from refcomp.ast import BufferLoad

    A = Buffer("A", (16, 8), "float32")
    text = roundtrip(func_of(Evaluate(Call("prefetch", (BufferLoad(A, (const(4), const(0))), const(0)), "int32")), (A,)))
    assert "T.evaluate(T.prefetch(A[4, 0], 0))" in text
