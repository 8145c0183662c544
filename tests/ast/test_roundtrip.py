"""Random expression trees and random small PrimFuncs survive print -> parse -> print exactly."""
import math

from hypothesis import given, strategies as st

from refcomp.ast import (
    EQ, GE, GT, LE, LT, NE, Add, Allocate, And, AssertStmt, Block, BlockRealize, Broadcast, Buffer,
    BufferRegion, BufferStore, Call, Cast, Div, Evaluate, FloatImm, FloorDiv, FloorMod, For,
    IfThenElse, IntImm, IterVar, Let, LetStmt, MatchBufferRegion, Max, Min, Mul, Not, Or, Ramp, Range,
    Select, SizeVar, Sub, TruncDiv, TruncMod, Var, While, post_order_visit, seq,
)
from refcomp.ast.dtype import DataType
from refcomp import IRError
from refcomp.ast.parser import from_source
from refcomp.ast.printer import script
from refcomp.ast.wellformed import verify_well_formed
from refcomp.ast.stmt import THREAD_TAGS
from script_helpers import TRUE, func_of, roundtrip, rooted

INT_TYPES = ["int32", "int64", "int8", "uint8", "uint32", "int16"]
FLOAT_TYPES = ["float32", "float64", "float16", "bfloat16"]
NAMES = ["i", "j", "x", "i", "a b", "for", "T", "i_1"]


class Builder:
    """Draws IR pieces from hypothesis data, with pools of vars and buffers to refer to."""

    def __init__(self, data):
        self.data = data
        self.vars: dict[str, list[Var]] = {}
        self.buffers: list[Buffer] = []

    def draw(self, strategy):
        return self.data.draw(strategy)

    def var(self, dtype):
        pool = self.vars.setdefault(dtype, [])
        if not pool or self.draw(st.booleans()):
            pool.append(Var(self.draw(st.sampled_from(NAMES)), dtype))
        return self.draw(st.sampled_from(pool))

    def constant(self, dtype):
        dt = DataType(dtype)
        if dt.is_bool:
            return IntImm(int(self.draw(st.booleans())), "bool")
        if dt.is_integer:
            return IntImm(self.draw(st.integers(dt.min_value(), dt.max_value())), dtype)
        value = self.draw(st.floats(allow_nan=True, allow_infinity=True, width=64))
        return FloatImm(value, dtype)

    def buffer_load(self, dtype, depth):
        candidates = [b for b in self.buffers if str(b.dtype) == dtype]
        if not candidates:
            return self.constant(dtype)
        buffer = self.draw(st.sampled_from(candidates))
        return buffer[tuple(self.expr("int32", depth - 1) for _ in buffer.shape)] if buffer.shape else buffer[()]

    def expr(self, dtype, depth=3):
        dt = DataType(dtype)
        if depth <= 0 or self.draw(st.integers(0, 4)) == 0:
            return self.draw(st.sampled_from([self.var, self.constant]))(dtype)
        if dt.is_bool:
            choice = self.draw(st.integers(0, 4))
            if choice == 0:
                other = self.draw(st.sampled_from(INT_TYPES + FLOAT_TYPES))
                cls = self.draw(st.sampled_from([EQ, NE, LT, LE, GT, GE]))
                return cls(self.expr(other, depth - 1), self.expr(other, depth - 1))
            if choice == 1:
                cls = self.draw(st.sampled_from([And, Or]))
                return cls(self.expr("bool", depth - 1), self.expr("bool", depth - 1))
            if choice == 2:
                return Not(self.expr("bool", depth - 1))
            if choice == 3:
                return Call("isnan", (self.expr("float32", depth - 1),), "bool")
            return self.buffer_load(dtype, depth)
        ops = [Add, Sub, Mul, Min, Max]
        ops += [FloorDiv, FloorMod, TruncDiv, TruncMod] if dt.is_integer else [Div]
        choice = self.draw(st.integers(0, 6))
        if choice <= 1:
            cls = self.draw(st.sampled_from(ops))
            return cls(self.expr(dtype, depth - 1), self.expr(dtype, depth - 1))
        if choice == 2:
            return Select(self.expr("bool", depth - 1), self.expr(dtype, depth - 1), self.expr(dtype, depth - 1))
        if choice == 3:
            source = self.draw(st.sampled_from(INT_TYPES + FLOAT_TYPES + ["bool"]))
            return Cast(dtype, self.expr(source, depth - 1))
        if choice == 4:
            value = self.expr(dtype, depth - 1)
            var = Var(self.draw(st.sampled_from(NAMES)), dtype)
            self.vars.setdefault(dtype, []).append(var)
            body = self.expr(dtype, depth - 1)
            self.vars[dtype].remove(var)
            return Let(var, value, body)
        if choice == 5:
            if dt.is_float:
                op = self.draw(st.sampled_from(["exp", "sqrt", "tanh", "pow", "if_then_else", "odd"]))
                if op == "pow":
                    return Call("pow", (self.expr(dtype, depth - 1), self.expr(dtype, depth - 1)), dtype)
                if op == "if_then_else":
                    return Call(op, (self.expr("bool", depth - 1), self.expr(dtype, depth - 1),
                                     self.expr(dtype, depth - 1)), dtype)
                if op == "odd":  # an intrinsic with a dtype that must be written out
                    return Call("exp", (self.expr("float32", depth - 1),), dtype) if dtype != "float32" else \
                        Call("my_op", (self.expr(dtype, depth - 1),), dtype)
                return Call(op, (self.expr(dtype, depth - 1),), dtype)
            return Call("abs", (self.expr(dtype, depth - 1),), dtype)
        return self.buffer_load(dtype, depth)


@given(st.data())
def test_random_expressions_round_trip(data):
    builder = Builder(data)
    builder.buffers = [Buffer("A", (4,), "float32"), Buffer("B", (2, 2), "int32"), Buffer("C", (), "bool")]
    expr = builder.expr(data.draw(st.sampled_from(INT_TYPES + FLOAT_TYPES + ["bool"])))
    roundtrip(func_of(Evaluate(expr), builder.buffers))
    script(expr)  # printing alone never fails


@given(st.data())
def test_vector_expressions_round_trip(data):
    lanes = data.draw(st.sampled_from([2, 4, 8]))
    i = Var("i")
    A = Buffer("A", (64,), "float32")
    base = data.draw(st.integers(-5, 5))
    ramp = Ramp(i * lanes + base, IntImm(data.draw(st.integers(1, 3))), lanes)
    value = A[ramp] * Broadcast(FloatImm(data.draw(st.floats(-4, 4, width=32))), lanes)
    body = For(i, 0, 4, "vectorized", BufferStore(A, value, (ramp,)))
    roundtrip(func_of(body, (A,)))


class FuncBuilder(Builder):
    """Draws small PrimFuncs: loops of every kind, blocks with bindings, control flow, binders."""

    def index(self, loop_vars):
        if loop_vars and self.draw(st.booleans()):
            v = self.draw(st.sampled_from(loop_vars))
            return v if self.draw(st.booleans()) else v * IntImm(self.draw(st.integers(1, 4))) + self.var("int32")
        return self.expr("int32", 1)

    def store(self, loop_vars):
        buffer = self.draw(st.sampled_from(self.buffers))
        indices = tuple(self.index(loop_vars) for _ in buffer.shape)
        return BufferStore(buffer, self.expr(str(buffer.dtype), 2), indices)

    def stmt(self, loop_vars, depth, in_block=False):
        if depth <= 0:
            return self.store(loop_vars)
        choice = self.draw(st.integers(0, 9))
        if choice == 0:
            return seq(*[self.stmt(loop_vars, depth - 1, in_block) for _ in range(self.draw(st.integers(2, 3)))])
        if choice in (1, 2):
            kind = self.draw(st.sampled_from(["serial", "serial", "parallel", "vectorized", "unrolled", "thread_binding"]))
            var = Var(self.draw(st.sampled_from(NAMES)), "int32")
            low = IntImm(self.draw(st.integers(0, 3)))
            extent = self.draw(st.sampled_from([IntImm(self.draw(st.integers(1, 8))), self.n]))
            tag = self.draw(st.sampled_from(THREAD_TAGS)) if kind == "thread_binding" else None
            annotations = {"unroll": self.draw(st.integers(0, 4))} if self.draw(st.integers(0, 4)) == 0 else None
            body = self.stmt(loop_vars + [var], depth - 1, in_block)
            return For(var, low, extent, kind, body, tag, annotations)
        if choice == 3 and not in_block:
            return self.block(loop_vars, depth)
        if choice == 4:
            else_case = self.stmt(loop_vars, depth - 1, in_block) if self.draw(st.booleans()) else None
            return IfThenElse(self.expr("bool", 2), self.stmt(loop_vars, depth - 1, in_block), else_case)
        if choice == 5:
            var = Var(self.draw(st.sampled_from(NAMES)), "int32")
            value = self.expr("int32", 2)
            return LetStmt(var, value, self.stmt(loop_vars + [var], depth - 1, in_block))
        if choice == 6:
            return AssertStmt(self.expr("bool", 1), self.draw(st.text(max_size=8)), self.stmt(loop_vars, depth - 1, in_block))
        if choice == 7:
            buffer = Buffer(self.draw(st.sampled_from(NAMES)), (IntImm(4),), "float32",
                            scope=self.draw(st.sampled_from(["global", "local", "shared"])))
            self.buffers.append(buffer)
            body = self.stmt(loop_vars, depth - 1, in_block)
            self.buffers.remove(buffer)
            return Allocate(buffer, body)
        if choice == 8:
            return While(self.expr("bool", 1), self.stmt(loop_vars, depth - 1, in_block))
        return Evaluate(self.expr("int32", 2))

    def block(self, loop_vars, depth):
        iter_vars, values = [], []
        for _ in range(self.draw(st.integers(0, 3))):
            var = Var(self.draw(st.sampled_from(["vi", "vj", "v", "vi"])), "int32")
            if loop_vars and self.draw(st.booleans()):
                value = self.draw(st.sampled_from(loop_vars))
            else:
                value = self.index(loop_vars)
            extent = self.draw(st.sampled_from([IntImm(self.draw(st.integers(1, 8))), self.n]))
            low = IntImm(self.draw(st.sampled_from([0, 0, 2])))
            iter_vars.append(IterVar(var, Range(low, extent), self.draw(st.sampled_from(["spatial", "reduce", "opaque"]))))
            values.append(value)
        block_vars = [iv.var for iv in iter_vars]
        regions = []
        for buffer in self.draw(st.lists(st.sampled_from(self.params), max_size=2)):
            regions.append(BufferRegion(buffer, tuple(
                Range(self.index(block_vars), IntImm(self.draw(st.integers(1, 3)))) for _ in buffer.shape)))
        alloc = [Buffer("tmp", (IntImm(2),), "int32")] if self.draw(st.booleans()) else []
        matches = []
        if self.draw(st.booleans()):
            source = self.draw(st.sampled_from(self.params))
            view = Buffer("view", (IntImm(2),), source.dtype, strides=(Var("vs"),) if self.draw(st.booleans()) else ())
            ranges = tuple(Range(self.index(block_vars), IntImm(2 if d == len(source.shape) - 1 else 1))
                           for d in range(len(source.shape)))
            matches.append(MatchBufferRegion(view, BufferRegion(source, ranges)))
            alloc_or_view = view
            self.buffers.append(alloc_or_view)
        self.buffers.extend(alloc)
        body = self.stmt(block_vars, depth - 1, in_block=True)
        init = self.store(block_vars) if self.draw(st.booleans()) else None
        for b in alloc + [m.buffer for m in matches]:
            self.buffers.remove(b)
        name = self.draw(st.sampled_from(["B", "C", "a; exit(1);", "root_1"]))
        block = Block(name, tuple(iter_vars), tuple(regions[:1]), tuple(regions[1:]), body, init, tuple(alloc),
                      tuple(matches),
                      annotations={"k": self.draw(st.integers(0, 2))} if self.draw(st.booleans()) else None)
        predicate = TRUE if self.draw(st.booleans()) else self.expr("bool", 1)
        return BlockRealize(tuple(values), predicate, block)


@given(st.data())
def test_random_prim_funcs_round_trip(data):
    builder = FuncBuilder(data)
    builder.n = SizeVar("n")
    dtypes = data.draw(st.lists(st.sampled_from(INT_TYPES[:3] + FLOAT_TYPES[:2]), min_size=1, max_size=3))
    builder.params = []
    for dt in dtypes:
        shape = (builder.n, IntImm(4))[: data.draw(st.integers(1, 2))]
        layout = {}
        if data.draw(st.booleans()):
            layout = {"strides": tuple(Var("s") if k == 0 else IntImm(1) for k in range(len(shape))),
                      "elem_offset": data.draw(st.sampled_from([IntImm(0, "int64"), IntImm(3), Var("off")])),
                      "align": data.draw(st.sampled_from([0, 16, 64])),
                      "scope": data.draw(st.sampled_from(["global", "shared", "global.packed"]))}
        builder.params.append(Buffer(data.draw(st.sampled_from(["A", "B", "A"])), shape, dt, **layout))
    builder.buffers = list(builder.params)
    body = builder.stmt([], data.draw(st.integers(1, 4)))
    if data.draw(st.booleans()):
        body = rooted(body, [Buffer("cache", (builder.n,), "float32", scope="shared")] if data.draw(st.booleans()) else [])
    scalars = [builder.var("int32")] if data.draw(st.booleans()) else []
    scalars += data.draw(st.lists(st.sampled_from([Var("h", "handle"), Var("f", "float32"), SizeVar("s", "int64")]),
                                  max_size=2, unique=True))
    func = func_of(body, builder.params + scalars, attrs={"global_symbol": "main"} if data.draw(st.booleans()) else None)
    roundtrip(func)
    # every node inside can be pointed at: the mark lands on it or on its nearest printed ancestor
    nodes = []
    post_order_visit(func.body, nodes.append)
    spot = data.draw(st.sampled_from(nodes))
    assert "\n-->" in "\n" + script(func, mark=spot)
    # random programs are often ill-formed: the checker must say so with a typed, printable error
    try:
        verify_well_formed(func)
    except IRError as error:
        assert "ill-formed IR in main (" in str(error) and "-->" in str(error)


def test_float_constants_that_need_care():
    for value in [0.1, -0.0, 1e-45, 3.4028234663852886e38, float("inf"), -float("inf"), float("nan"), 1e300]:
        e = FloatImm(value, "float64")
        f = func_of(Evaluate(e), ())
        text = roundtrip(f)
        assert math.isnan(value) or repr(value) in text or "inf" in text


@given(st.lists(st.text(min_size=1, max_size=12), min_size=5, max_size=5))
def test_arbitrary_names_are_printed_safely_and_round_trip(names):
    import ast as pyast

    from refcomp.ast import IRModule

    buffer_name, var_name, block_name, func_name, key = names
    A = Buffer(buffer_name, (IntImm(4),), "int32")
    v, i = Var(var_name), Var(var_name)
    block = Block(block_name, (IterVar(v, Range.from_extent(IntImm(4))),), (),
                  (BufferRegion(A, (Range(v, IntImm(1)),)),), BufferStore(A, v, (v,)), annotations={key: key})
    body = rooted(For(i, 0, 4, "serial", BlockRealize((i,), TRUE, block)))
    func = func_of(AssertStmt(A[0] > 0, key, body), (A,), name=func_name, attrs={key: [key]})
    text = roundtrip(func)
    pyast.parse(text)  # always valid Python
    assert text.isascii()
    roundtrip(IRModule({func_name: func, key: func_of(Evaluate(0), (), name=key)}))


@given(st.data())
def test_tree_facts_free_vars_agree_with_functor(data):
    from refcomp.ast import free_vars
    from refcomp.ast.script_common import TreeFacts

    builder = FuncBuilder(data)
    builder.n = SizeVar("n")
    builder.params = [Buffer("A", (builder.n, IntImm(4)), "float32")]
    builder.buffers = list(builder.params)
    func = func_of(builder.stmt([], data.draw(st.integers(1, 4))), builder.params)
    assert list(TreeFacts(func).free_vars) == free_vars(func)


@given(st.data())
def test_shape_vars_round_trip_wherever_they_are_bound(data):
    """Vars in buffer shapes, strides and offsets, bound as scalar parameters anywhere in the list
    (before or after the buffers using them) or only through the buffers themselves."""
    from refcomp.ast import PrimFunc, free_vars

    shape_vars = [data.draw(st.sampled_from([Var, SizeVar]))(name) for name in ("n", "m", "n")]

    def dim():
        var = data.draw(st.sampled_from(shape_vars))
        return data.draw(st.sampled_from([var, var * 2 + 1, IntImm(4)]))

    buffers = []
    for name in data.draw(st.lists(st.sampled_from(["A", "B", "n"]), min_size=1, max_size=3)):
        shape = tuple(dim() for _ in range(data.draw(st.integers(1, 2))))
        layout = {}
        if data.draw(st.booleans()):
            layout = {"strides": tuple(dim() for _ in shape), "elem_offset": data.draw(st.sampled_from(shape_vars))}
        buffers.append(Buffer(name, shape, "float32", **layout))
    i = Var("i")
    first = buffers[0]
    store = BufferStore(first, FloatImm(1.0, "float32"), tuple(IntImm(0) for _ in first.shape))
    body = For(i, 0, data.draw(st.sampled_from(shape_vars)), "serial", store)
    params = list(buffers)
    for var in data.draw(st.lists(st.sampled_from(shape_vars), unique=True)):
        params.insert(data.draw(st.integers(0, len(params))), var)
    func = PrimFunc(tuple(params), body)
    text = roundtrip(func)
    parsed = from_source(text)
    # each shape var is bound to the parsed parameter at the same position (or, when it is not a
    # parameter, to one var shared by every buffer using it)
    position = {id(p): k for k, p in enumerate(func.params)}
    seen = {}
    for before, after in zip(func.params, parsed.params):
        if isinstance(before, Buffer):
            for old, new in zip(free_vars(before.shape), free_vars(after.shape)):
                if id(old) in position:
                    assert new is parsed.params[position[id(old)]]
                else:
                    assert seen.setdefault(id(old), new) is new
