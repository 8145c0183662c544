"""The Relax script forms users write survive print -> parse -> print unchanged.

Unannotated bindings, nested calls, shapes written inline with arithmetic, negative dims,
namespaced operators (R.nn.*), list attributes, `cls = Module`, quoted size vars in signatures,
R.shape / R.prim_value / R.match_cast and tuples: each program is parsed, printed, parsed back,
and the two parses must print the same text and be structurally equal.
"""
import pytest

import refcomp
from refcomp.ast import structural_equal
from refcomp.ast.parser import from_source

HEADER = "from tvm.script import ir as I, relax as R, tir as T\n\n@I.ir_module\nclass Module:\n"

FORMS = {
    "unannotated": '''
    @R.function
    def main(x: R.Tensor(("n", 4), "float32"), w: R.Tensor((4, 4), "float32")):
        n = T.int64()
        with R.dataflow():
            h = R.matmul(x, w)
            y = R.add(h, x)
            R.output(y)
        return y
''',
    "nested_and_namespaced": '''
    @R.function
    def main(x: R.Tensor(("n", 8), "float32"), g: R.Tensor((8,), "float32"), b: R.Tensor((8,), "float32")):
        with R.dataflow():
            y = R.nn.layer_norm(R.nn.relu(x), g, b, axes=[-1], epsilon=1e-5)
            z = R.nn.softmax(y, axis=-1)
            R.output(z)
        return z
''',
    "inline_shapes": '''
    @R.function
    def main(x: R.Tensor(("n", "k"), "float32")):
        n = T.int64()
        k = T.int64()
        with R.dataflow():
            a = R.reshape(x, (n * k,))
            b = R.reshape(a, R.shape([k, n]))
            c = R.reshape(b, (-1, 2))
            d = R.permute_dims(x, [1, 0])
            e = R.nn.leaky_relu(d, 0.125)
            R.output(c, e)
        return (c, e)
''',
    "match_cast_shape_prim": '''
    @R.function
    def main(x: R.Tensor(ndim=2, dtype="float32")) -> R.Tuple(R.Tensor(ndim=2, dtype="float32"), R.Shape(ndim=2)):
        m = T.int64()
        k = T.int64()
        cls = Module
        y = R.match_cast(x, R.Tensor((m, k), "float32"))
        s: R.Shape([m, k]) = R.shape([m, k])
        p: R.Prim(value=m * k) = R.prim_value(m * k)
        t = (y, s)
        u = t[0]
        return (u, s)
''',
    "if_else": '''
    @R.function
    def main(c: R.Tensor((), "bool"), x: R.Tensor(("n", 3), "float32")):
        if c:
            a = R.exp(x)
            y: R.Tensor(("n", 3), "float32") = R.add(a, x)
        else:
            y = R.multiply(x, x)
        return R.sum(y, axis=1)
''',
    "keyword_struct_info_and_tir_vars": '''
    @T.prim_func
    def fill(b: T.handle, k: T.int64):
        n = T.int64()
        B = T.match_buffer(b, (n,), "float32")
        for i in range(n):
            with T.block("B"):
                vi = T.axis.spatial(n, i)
                B[vi] = T.Cast("float32", vi * k)

    @R.function
    def main(x: R.Tensor(shape=["n"], dtype="float32"), y: R.Tensor(ndim=1, dtype="float32")):
        n = T.int64()
        cls = Module
        z = R.call_tir(cls.fill, (), out_sinfo=R.Tensor((n,), dtype="float32"), tir_vars=R.shape([n + 1]))
        c = R.prim_value(T.int64(3))
        return (z, c)
''',
}


@pytest.mark.parametrize("name", sorted(FORMS))
def test_user_forms_round_trip(name):
    mod = from_source(HEADER + FORMS[name])
    printed = mod.script()
    back = from_source(printed)
    assert back.script() == printed
    assert structural_equal(back["main"], mod["main"])


def test_an_unknown_namespaced_operator_is_named_in_the_error():
    text = HEADER + '''
    @R.function
    def main(x: R.Tensor((4,), "float32")):
        y = R.nn.no_such_op(x)
        return y
'''
    mod = from_source(text)
    from refcomp.graph import build

    with pytest.raises(refcomp.IRError, match="no_such_op"):
        build(mod, "c")


def test_an_undeclared_size_var_in_an_inline_shape_says_how_to_declare_it():
    text = HEADER + '''
    @R.function
    def main(x: R.Tensor(("n",), "float32")):
        y = R.reshape(x, (k * 1,))
        return y
'''
    with pytest.raises(refcomp.ParseError, match=r"size var k is not declared \(write k = T.int64\(\)\)"):
        from_source(text)
