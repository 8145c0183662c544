"""The script parser on hand-written TVMScript (TIR subset) and on malformed input."""
import pytest

import refcomp
from refcomp import ParseError
from refcomp.ast import (
    Block, BlockRealize, BufferStore, Call, FloatImm, FloorDiv, For, IntImm, IRModule, LetStmt,
    Max, PrimFunc, SizeVar, Var, collect, structural_equal,
)
from refcomp.ast.parser import from_source
from refcomp.ast.printer import script
from script_helpers import MATMUL, roundtrip

def blocks_of(func):
    return {b.name: b for b in collect(func.body, Block)}


def test_tvm_matmul_with_handles_and_remap():
    f = from_source(MATMUL)
    assert isinstance(f, PrimFunc) and f.name == "matmul"
    assert [p.name for p in f.params] == ["A", "B", "C"] and f.params[0].shape[1].value == 128
    assert dict(f.attrs) == {"global_symbol": "matmul", "tir.noalias": True}
    root = f.body
    assert isinstance(root, BlockRealize) and root.block.name == "root"  # implicit root block
    update = blocks_of(f)["update"]
    assert [iv.kind for iv in update.iter_vars] == ["spatial", "spatial", "reduce"]
    assert [r.buffer.name for r in update.reads] == ["C", "A", "B"]  # inferred, as TVM does
    assert [r.buffer.name for r in update.writes] == ["C"]
    assert isinstance(update.init, BufferStore) and update.init.value.value == 0.0
    roundtrip(f)


def test_tvm_buffer_params_symbolic_shape_and_axis_spatial():
    f = from_source('''
    @T.prim_func(private=True)
    def add_one(var_A: T.handle, var_B: T.handle):
        n = T.int64()
        A = T.match_buffer(var_A, (n, T.int64(64)), "float16")
        B = T.match_buffer(var_B, (n, T.int64(64)), "float16")
        for i0, i1 in T.grid(n, T.int64(64)):
            with T.sblock("B"):
                v0 = T.axis.spatial(n, i0)
                v1 = T.axis.spatial(T.int64(64), i1)
                T.reads(A[v0, v1])
                T.writes(B[v0, v1])
                B[v0, v1] = A[v0, v1] + T.float16(1)
    ''')
    A, B = f.params
    n = A.shape[0]
    assert isinstance(n, Var) and n.dtype.name == "int64" and B.shape[0] is n
    block = blocks_of(f)["B"]
    assert block.iter_vars[0].var.dtype.name == "int64"
    assert block.body.value.b.dtype.name == "float16"
    roundtrip(f)


def test_conv2d_with_padding_and_min_value_reduction():
    f = from_source('''
    @T.prim_func
    def conv(X: T.Buffer((1, 3, 8, 8), "float32"), W: T.Buffer((4, 3, 3, 3), "float32"),
             Y: T.Buffer((1, 4, 8, 8), "float32"), M: T.Buffer((1, 4), "float32")):
        pad = T.alloc_buffer((1, 3, 10, 10))
        for n, c, h, w in T.grid(1, 3, 10, 10):
            with T.block("pad"):
                vn, vc, vh, vw = T.axis.remap("SSSS", [n, c, h, w])
                pad[vn, vc, vh, vw] = T.if_then_else(1 <= vh and vh < 9 and 1 <= vw and vw < 9,
                                                     X[vn, vc, vh - 1, vw - 1], T.float32(0))
        for n, f, h, w, rc, rh, rw in T.grid(1, 4, 8, 8, 3, 3, 3):
            with T.block("conv"):
                vn, vf, vh, vw, vrc, vrh, vrw = T.axis.remap("SSSSRRR", [n, f, h, w, rc, rh, rw])
                with T.init():
                    Y[vn, vf, vh, vw] = T.float32(0)
                Y[vn, vf, vh, vw] += pad[vn, vrc, vh + vrh, vw + vrw] * W[vf, vrc, vrh, vrw]
        for n, f, h, w in T.grid(1, 4, 8, 8):
            with T.block("max"):
                vn, vf, vh, vw = T.axis.remap("SSRR", [n, f, h, w])
                with T.init():
                    M[vn, vf] = T.min_value("float32")
                M[vn, vf] = T.max(M[vn, vf], Y[vn, vf, vh, vw])
    ''')
    root = f.body.block
    assert [b.name for b in root.alloc_buffers] == ["pad"]
    blocks = blocks_of(f)
    assert isinstance(blocks["pad"].body.value, Call) and blocks["pad"].body.value.op == "if_then_else"
    assert isinstance(blocks["max"].body.value, Max)
    assert blocks["max"].init.value.value == -3.4028234663852886e38
    conv_store = blocks["conv"].body
    assert conv_store.value.a.buffer.name == "Y"  # += is a store of the load plus the value
    roundtrip(f)


def test_gpu_style_split_with_where_and_thread_binding():
    f = from_source('''
    @T.prim_func
    def scale(A: T.Buffer((1000,), "float32"), B: T.Buffer((1000,), "float32")):
        for bx in T.thread_binding(8, thread="blockIdx.x"):
            for tx in T.thread_binding(0, 128, thread="threadIdx.x"):
                with T.block("B"):
                    v = T.axis.spatial(1000, bx * 128 + tx)
                    T.where(bx * 128 + tx < 1000)
                    T.reads(A[v])
                    T.writes(B[v])
                    B[v] = A[v] * T.float32(2)
        for i in T.vectorized(4):
            for j in T.unroll(2, annotations={"pragma": "x"}):
                with T.block("C"):
                    vi = T.axis.spatial(4, i)
                    vj = T.axis.spatial(2, j)
                    B[vi * 2 + vj] = B[vi * 2 + vj] + 1.0
    ''')
    loops = collect(f.body, For)
    kinds = sorted((l.kind, l.thread_binding) for l in loops)
    assert ("thread_binding", "blockIdx.x") in kinds and ("thread_binding", "threadIdx.x") in kinds
    assert ("vectorized", None) in kinds and ("unrolled", None) in kinds
    realize = collect(f.body, BlockRealize)
    assert any(not isinstance(r.predicate, IntImm) for r in realize)
    c = blocks_of(f)["C"]
    assert c.reads[0].region[0].extent.value == 1 and c.writes[0].buffer.name == "B"
    roundtrip(f)


def test_module_of_functions_and_lets():
    mod = from_source('''
    from tvm.script import ir as I
    from tvm.script import tir as T

    @I.ir_module
    class Module:
        @T.prim_func
        def relu(A: T.Buffer((4,), "float32"), B: T.Buffer((4,), "float32")):
            for i in range(4):
                x: T.float32 = A[i]
                B[i] = T.max(x, T.float32(0))

        @T.prim_func
        def halve(A: T.Buffer((4,), "int32"), m: T.int32):
            for i in range(4):
                A[i] = A[i] // 2 + m
    ''')
    assert isinstance(mod, IRModule) and sorted(mod.functions) == ["halve", "relu"]
    let = mod["relu"].body.body
    assert isinstance(let, LetStmt) and let.var.dtype.name == "float32"
    halve = mod["halve"]
    assert isinstance(halve.params[1], Var) and isinstance(halve.body.body.value.a, FloorDiv)
    roundtrip(mod)


def test_several_top_level_functions_make_a_module():
    mod = from_source('''
    @T.prim_func
    def f(A: T.Buffer((2,), "int32")):
        A[0] = 1

    @T.prim_func
    def g(A: T.Buffer((2,), "int32")):
        A[1] = 2
    ''')
    assert isinstance(mod, IRModule) and set(mod.functions) == {"f", "g"}


def test_python_constants_take_tvm_types():
    f = from_source('''
    @T.prim_func
    def k(A: T.Buffer((4,), "float64"), B: T.Buffer((4,), "int64"), n: T.int64):
        for i in range(4):
            A[i] = A[i] * 2.5 + 1
            B[i] = B[i] + n * 3
    ''')
    store_a, store_b = f.body.body.stmts
    assert store_a.value.b.dtype.name == "float64" and store_a.value.b.value == 1.0
    assert store_b.value.b.b.dtype.name == "int64"
    assert refcomp.from_source is not None
    big = from_source('''
    @T.prim_func
    def k(A: T.Buffer((1,), "int64")):
        A[0] = 4294967296
    ''')
    assert big.body.value.dtype.name == "int64"


def test_size_var_and_scalar_params():
    f = from_source('''
    @T.prim_func
    def k(A: T.Buffer((n,), "float32"), m: T.int32(is_size_var=True)):
        n = T.int32(is_size_var=True)
        for i in range(n):
            A[i] = T.Cast("float32", m)
    ''')
    assert isinstance(f.params[0].shape[0], SizeVar) and isinstance(f.params[1], SizeVar)
    roundtrip(f)


def test_parse_of_printed_te_style_function_is_equal():
    text = MATMUL.replace("T.float32(0)", "0.0")
    f = from_source(text)
    g = from_source(script(f))
    assert structural_equal(f, g)
    assert isinstance(blocks_of(f)["update"].init.value, FloatImm)


@pytest.mark.parametrize("source,needle", [
    ("@T.prim_func\ndef f(A: T.Buffer((4,), \"float32\")):\n    A[0] = T.foo(A[1])\n", "unknown function T.foo"),
    ("@T.prim_func\ndef f(A: T.Buffer((4,), \"float32\")):\n    A[0] = B[1]\n", "undefined name 'B'"),
    ("@T.prim_func\ndef f(A: T.Buffer((4,), \"floaty\")):\n    A[0] = 1.0\n", "unknown dtype 'floaty'"),
    ("@T.prim_func\ndef f(A: T.Buffer((4,), \"float32\")):\n    A[0] = T.max(A[1])\n", "T.max takes 2 arguments, got 1"),
    ("@T.prim_func\ndef f(A: T.Buffer((4,), \"float32\")):\n    A[0] = T.exp(A[1], A[2])\n", "T.exp takes 1 argument, got 2"),
    ("@T.prim_func\ndef f(A: T.Buffer((4,), \"float32\")):\n    A[0, 1] = 1.0\n", "A has 1 dimensions, indexed with 2"),
    ("@T.prim_func\ndef f(A: T.Buffer((4,), \"int32\")):\n    A[0] = A[1] / 2\n", "`/` is only defined on floats"),
    ("@T.prim_func\ndef f(A: T.Buffer((4,), \"float32\")):\n    A[0] = 1.0 +\n", "invalid syntax"),
    ("@T.prim_func\ndef f(A: T.Buffer((4,), \"float32\")):\n    import os\n", "Import statements are not part"),
    ("@T.prim_func\ndef f(A: T.Buffer((4,), \"float32\")):\n    A[0] = __import__('os')\n", "only T.<...> calls"),
    ("@T.prim_func\ndef f(A: T.Buffer((4,), \"float32\")):\n    for i in T.grid(4, 4):\n        A[i] = 1.0\n",
     "T.grid gives 2 loops for 1 loop variables"),
    ("@T.prim_func\ndef f(A: T.Buffer((4,), \"float32\")):\n    T.reads(A[0])\n", "T.reads belongs at the top of a block"),
    ("@T.prim_func\ndef f(A: T.Buffer((4,), \"float32\")):\n    for i in range(4):\n"
     "        with T.block(\"b\"):\n            v = T.axis.remap(\"S\", [A])\n", "binds loop variables"),
    ("def f(A: T.Buffer((4,), \"float32\")):\n    A[0] = 1.0\n", "needs a decorator"),
    ("x = 1\n", "expected @T.prim_func functions"),
    ("", "no @T.prim_func"),
    ("@T.prim_func\ndef f(A: T.Buffer((4,), \"float32\")):\n    A[0] = T.int32()\n", "declares a variable"),
    ("@T.prim_func\ndef f(A: T.Buffer((4,), \"float32\")):\n    A[0] = A[1] ** 2\n", "Pow is not part"),
    ("@T.prim_func\ndef f(A: T.Buffer((4,), \"float32\")):\n    A[0] = T.int32(1)\n", "store to A (float32) of a int32"),
    ("@T.prim_func\ndef f(A: T.Buffer((4,), \"float32\")):\n    for i in T.thread_binding(4):\n        A[i] = 1.0\n",
     "T.thread_binding needs thread="),
])
def test_malformed_input_gives_a_located_parse_error(source, needle):
    with pytest.raises(ParseError) as info:
        from_source(source)
    message = str(info.value)
    assert needle in message, message
    if source.strip():
        assert "line" in message
        assert "^" in message or "no @T.prim_func" in message or "expected" in message


def test_error_shows_line_column_and_source():
    source = ("@T.prim_func\n"
              "def f(A: T.Buffer((4,), \"float32\")):\n"
              "    A[0] = T.exp(A[1]) + T.bogus(2)\n")
    with pytest.raises(ParseError) as info:
        from_source(source)
    error = info.value
    assert error.line == 3 and error.column == 26
    lines = str(error).split("\n")
    assert lines[0].startswith("line 3, column 26: unknown function T.bogus")
    assert lines[1].strip() == "A[0] = T.exp(A[1]) + T.bogus(2)"
    assert lines[2].index("^") == lines[1].index("T.bogus")
    assert isinstance(error, ValueError)  # ParseError is an IRError is a ValueError


def test_non_string_input_rejected():
    with pytest.raises(TypeError):
        from_source(b"@T.prim_func")


def test_older_tvmscript_spellings():
    mod = from_source('''
    import tvm
    from tvm.script import tir as T

    @tvm.script.ir_module
    class MatmulModule:
        @T.prim_func
        def main(
            A: T.Buffer[(64, 64), "float16"],
            B: T.Buffer[(64, 64), "float16"],
            C: T.Buffer[(64, 64), "float32"],
        ) -> None:
            T.func_attr({"global_symbol": "main", "tir.noalias": T.bool(True)})
            # with T.block("root"):
            for i, j in T.grid(64, 64):
                for k in T.serial(64):
                    with T.block("matmul"):
                        vi = T.axis.S(64, i)
                        vj = T.axis.S(64, j)
                        vk = T.axis.R(64, k)
                        T.reads(A[vi, 0:64], B[vj, 0:64])
                        T.writes(C[vi, vj])
                        T.block_attr({"meta_schedule.tiling_structure": "SSRSRS"})
                        with T.init():
                            C[vi, vj] = T.float32(0)
                        C[vi, vj] += T.Cast("float32", A[vi, vk]) * T.Cast("float32", B[vj, vk])
    ''')
    f = mod["main"]
    block = blocks_of(f)["matmul"]
    assert [iv.kind for iv in block.iter_vars] == ["spatial", "spatial", "reduce"]
    assert block.reads[0].region[1].extent.value == 64
    assert block.annotations["meta_schedule.tiling_structure"] == "SSRSRS"
    assert f.attrs["tir.noalias"].dtype.name == "bool"
    roundtrip(mod)


def test_decl_buffer_allocates_and_likely_is_a_hint():
    from refcomp.ast import Allocate, IfThenElse

    f = from_source('''
    @T.prim_func
    def k(A: T.Buffer((8,), "float32")):
        tmp = T.decl_buffer((8,), "float32", scope="local")
        for i in range(8):
            if T.likely(i < 7):
                tmp[i] = A[i + 1]
        for i in range(8):
            A[i] = tmp[i]
    ''')
    assert isinstance(f.body, Allocate) and f.body.buffer.scope == "local"
    branch = collect(f.body, IfThenElse)[0]
    assert type(branch.condition).__name__ == "LT"
    roundtrip(f)


def test_match_buffer_after_scalar_params():
    f = from_source('''
    @T.prim_func
    def k(m: T.int32, a: T.handle):
        A = T.match_buffer(a, (m,), "int32")
        for i in range(m):
            A[i] = i
    ''')
    assert f.params[1].name == "A" and f.params[1].shape[0] is f.params[0]
    with pytest.raises(ParseError, match="describes a T.handle parameter"):
        from_source('''
        @T.prim_func
        def k(m: T.int32, a: T.handle):
            A = T.match_buffer(m, (4,), "int32")
        ''')


def test_inferred_regions_cover_neighbouring_accesses():
    f = from_source('''
    @T.prim_func
    def stencil(A: T.Buffer((10, 4), "float32"), B: T.Buffer((8, 4), "float32")):
        for i, j in T.grid(8, 4):
            with T.block("B"):
                vi, vj = T.axis.remap("SS", [i, j])
                B[vi, vj] = A[vi, vj] + A[vi + 2, vj] + A[vi + 1, vj]
    ''')
    (read,) = blocks_of(f)["B"].reads
    rows, cols = read.region
    assert script(rows.min) == "vi" and rows.extent.value == 3
    assert script(cols.min) == "vj" and cols.extent.value == 1
    inner = from_source('''
    @T.prim_func
    def rowsum(A: T.Buffer((8, 4), "float32"), B: T.Buffer((8,), "float32")):
        for i in range(8):
            with T.block("B"):
                vi = T.axis.spatial(8, i)
                B[vi] = T.float32(0)
                for k in range(4):
                    B[vi] = B[vi] + A[vi, k]
    ''')
    (read_b, read_a) = blocks_of(inner)["B"].reads
    assert read_a.buffer.name == "A" and read_a.region[1].extent.value == 4  # the inner loop's range


def test_blockized_nest_with_list_regions_and_vthreads():
    f = from_source('''
    @T.prim_func
    def tiled(a: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, [64, 64], "float32")
        C = T.match_buffer(c, [64, 64], "float32")
        C_local = T.alloc_buffer([64, 64], "float32", scope="local")
        for i, j in T.grid(4, 4):
            with T.block("C_outer"):
                vo, wo = T.axis.remap("SS", [i, j])
                T.reads([A[
                    vo * 16 : vo * 16 + 16,
                    wo * 16 : wo * 16 + 16,
                ]])
                T.writes([C_local[vo * 16 : vo * 16 + 16, wo * 16 : wo * 16 + 16]])
                for ii, ji in T.grid(16, 16):
                    with T.block("C_inner"):
                        vi = T.axis.S(64, vo * 16 + ii)
                        vj = T.axis.S(64, wo * 16 + ji)
                        C_local[vi, vj] = A[vi, vj] + 1.0
        for by in T.thread_binding(0, 2, thread = "blockIdx.y"):
            for vy in T.thread_binding(0, 2, thread = "vthread.y"):
                for tx in T.thread_binding(16, thread="threadIdx.x"):
                    for _, k in T.grid(1, 16):
                        with T.block("C"):
                            vi = T.axis.S(64, by * 32 + vy * 16 + tx)
                            vj = T.axis.S(64, k)
                            C[vi, vj] = C_local[vi, vj]
    ''')
    outer = blocks_of(f)["C_outer"]
    rows, cols = outer.reads[0].region
    assert rows.extent.value == 16 and script(rows.min) == "vo * 16"
    assert outer.writes[0].buffer.name == "C_local"
    assert [b.name for b in f.body.block.alloc_buffers] == ["C_local"]
    tags = [l.thread_binding for l in collect(f.body, For) if l.kind == "thread_binding"]
    assert sorted(tags) == ["blockIdx.y", "threadIdx.x", "vthread.y"]
    roundtrip(f)


def test_buffer_shape_may_use_a_later_scalar_parameter():
    from refcomp.ast import Buffer as IRBuffer

    n = Var("n")
    A = IRBuffer("A", (n, 2), "int32")
    f = PrimFunc((A, n), BufferStore(A, n, (0, 0)))
    text = roundtrip(f)
    assert text.startswith('@T.prim_func\ndef main(A: T.Buffer((n, 2), "int32"), n: T.int32):')
    parsed = from_source(text)
    assert parsed.params[0].shape[0] is parsed.params[1]
