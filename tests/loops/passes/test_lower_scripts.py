"""Each lowering pass on a program written in the script format, against the expected program.

The TVM habit: a before/after pair of readable programs per pass, compared structurally; the
numbers are checked too, through the interpreter.
"""
import refcomp
from refcomp.ast import assert_structural_equal
from refcomp.loops.passes.flatten_buffers import flatten_buffers
from refcomp.loops.passes.lower_blocks import lower_blocks
from refcomp.loops.passes.simplify import simplify
from refcomp.loops.vectorize import vectorize

from numerics import check_same_results

SPLIT_MATMUL = '''
@T.prim_func
def main(A: T.Buffer((4, 4), "float32"), B: T.Buffer((4, 6), "float32"), C: T.Buffer((4, 6), "float32")):
    with T.block("root"):
        T.reads()
        T.writes()
        for i, j, k_o, k_i in T.grid(4, 6, 2, 2):
            with T.block("C"):
                v_i, v_j = T.axis.remap("SS", [i, j])
                v_k = T.axis.reduce(4, k_o * 2 + k_i)
                T.reads(A[v_i, v_k], B[v_k, v_j])
                T.writes(C[v_i, v_j])
                with T.init():
                    C[v_i, v_j] = T.float32(0.0)
                C[v_i, v_j] = C[v_i, v_j] + A[v_i, v_k] * B[v_k, v_j]
'''

SPLIT_MATMUL_LOOPS = '''
@T.prim_func
def main(A: T.Buffer((4, 4), "float32"), B: T.Buffer((4, 6), "float32"), C: T.Buffer((4, 6), "float32")):
    for i, j, k_o, k_i in T.grid(4, 6, 2, 2):
        if k_o * 2 + k_i == 0:
            C[i, j] = T.float32(0.0)
        C[i, j] = C[i, j] + A[i, k_o * 2 + k_i] * B[k_o * 2 + k_i, j]
'''

SPLIT_MATMUL_FLAT = '''
@T.prim_func
def main(A: T.Buffer((16,), "float32"), B: T.Buffer((24,), "float32"), C: T.Buffer((24,), "float32")):
    A_1 = T.Buffer((4, 4), "float32", name="A")
    B_1 = T.Buffer((4, 6), "float32", name="B")
    C_1 = T.Buffer((4, 6), "float32", name="C")
    T.func_attr({"original_buffers": {A: A_1, B: B_1, C: C_1}})
    for i, j, k_o, k_i in T.grid(4, 6, 2, 2):
        if k_o * 2 + k_i == 0:
            C[i * 6 + j] = T.float32(0.0)
        C[i * 6 + j] = C[i * 6 + j] + A[i * 4 + k_o * 2 + k_i] * B[k_o * 12 + k_i * 6 + j]
'''

SPLIT_MATMUL_SIMPLE = '''
@T.prim_func
def main(A: T.Buffer((16,), "float32"), B: T.Buffer((24,), "float32"), C: T.Buffer((24,), "float32")):
    A_1 = T.Buffer((4, 4), "float32", name="A")
    B_1 = T.Buffer((4, 6), "float32", name="B")
    C_1 = T.Buffer((4, 6), "float32", name="C")
    T.func_attr({"original_buffers": {A: A_1, B: B_1, C: C_1}})
    for i, j, k_o, k_i in T.grid(4, 6, 2, 2):
        if k_o == 0 and k_i == 0:
            C[i * 6 + j] = T.float32(0.0)
        C[i * 6 + j] = C[i * 6 + j] + A[i * 4 + k_o * 2 + k_i] * B[k_o * 12 + k_i * 6 + j]
'''

PREDICATED_VECTOR_LOOP = '''
@T.prim_func
def main(A: T.Buffer((10,), "float32"), B: T.Buffer((10,), "float32"), C: T.Buffer((10,), "float32")):
    for i_o in range(3):
        for i_i in T.vectorized(4):
            if i_o * 4 + i_i < 10:
                C[i_o * 4 + i_i] = A[i_o * 4 + i_i] * B[i_o * 4 + i_i] + A[i_o * 4 + i_i]
'''

PREDICATED_VECTOR_CODE = '''
@T.prim_func
def main(A: T.Buffer((10,), "float32"), B: T.Buffer((10,), "float32"), C: T.Buffer((10,), "float32")):
    for i_o in range(3):
        if i_o * 4 + 3 < 10:
            C[T.Ramp(i_o * 4, 1, 4)] = A[T.Ramp(i_o * 4, 1, 4)] * B[T.Ramp(i_o * 4, 1, 4)] + A[T.Ramp(i_o * 4, 1, 4)]
        else:
            for i_i in range(4):
                if i_o * 4 + i_i < 10:
                    C[i_o * 4 + i_i] = A[i_o * 4 + i_i] * B[i_o * 4 + i_i] + A[i_o * 4 + i_i]
'''


def check_pass(run, before_text, after_text):
    before = refcomp.from_source(before_text)
    after = run(before)
    assert_structural_equal(after, refcomp.from_source(after_text))
    check_same_results(before, after)


def test_lower_blocks_script_pair():
    check_pass(lower_blocks, SPLIT_MATMUL, SPLIT_MATMUL_LOOPS)


def test_flatten_buffers_script_pair():
    check_pass(flatten_buffers, SPLIT_MATMUL_LOOPS, SPLIT_MATMUL_FLAT)


def test_simplify_script_pair():
    check_pass(simplify, SPLIT_MATMUL_FLAT, SPLIT_MATMUL_SIMPLE)


def test_vectorize_script_pair():
    check_pass(vectorize, PREDICATED_VECTOR_LOOP, PREDICATED_VECTOR_CODE)


def test_lowered_ir_round_trips_through_the_script_format():
    from refcomp.loops.lower import lower

    lowered = lower(refcomp.from_source(SPLIT_MATMUL))
    assert_structural_equal(refcomp.from_source(lowered.script()), lowered)
