"""minifloat_encode / minifloat_decode: the C kernels and the numpy reference against ml_dtypes
(the library ONNX's reference uses), bit for bit; sub-byte integer astype; typed errors."""
import functools

import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis.extra import numpy as hnp

import refcomp
from refcomp.ast import SizeVar
from refcomp.ast.graph import Tuple, Var
from refcomp.ast.graph_struct_info import TensorStructInfo
from refcomp.graph import BlockBuilder, op
from refcomp.graph.op.registry import get as get_op

ml_dtypes = pytest.importorskip("ml_dtypes")

FLOAT8 = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")
MINIFLOATS = FLOAT8 + ("float4_e2m1fn",)


def _patterns(name: str) -> np.ndarray:
    return np.arange(16 if name.startswith("float4") else 256, dtype=np.uint8)


def _expected_encode(x: np.ndarray, name: str, saturate: bool) -> np.ndarray:
    """ONNX's reference Cast: ml_dtypes' conversion, after clipping to the finite range when saturating."""
    t = getattr(ml_dtypes, name)
    with np.errstate(all="ignore"):
        if saturate and name in FLOAT8:
            info = ml_dtypes.finfo(t)
            x = np.clip(x, x.dtype.type(float(info.min)), x.dtype.type(float(info.max)))
        return x.astype(t).view(np.uint8)


def _same_floats(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal bit for bit, except that any NaN equals any NaN."""
    nan = np.isnan(a)
    return np.array_equal(nan, np.isnan(b)) and np.array_equal(
        a[~nan].view(np.uint32) if a.dtype == np.float32 else a[~nan].view(np.uint16),
        b[~nan].view(np.uint32) if b.dtype == np.float32 else b[~nan].view(np.uint16))


@functools.lru_cache(maxsize=None)
def _converter(name: str, source: str, saturate: bool):
    """A VM function x -> (encode(x), decode(encode(x))) over a 1-d tensor of any length."""
    n = SizeVar("n", "int64")
    bb = BlockBuilder()
    x = Var("x", TensorStructInfo((n,), source))
    with bb.function("main", [x]):
        with bb.dataflow():
            bits = bb.emit(op.minifloat_encode(x, name, saturate))
            back = bb.emit(op.minifloat_decode(bits, name, "float32"))
            out = bb.emit_output(Tuple((bits, back)))
        bb.emit_func_output(out)
    return refcomp.runtime.VirtualMachine(refcomp.graph.build(bb.get(), target="c"))["main"]


@functools.lru_cache(maxsize=None)
def _decoder(name: str, target: str):
    n = SizeVar("n", "int64")
    bb = BlockBuilder()
    x = Var("x", TensorStructInfo((n,), name))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(op.minifloat_decode(x, name, target))
        bb.emit_func_output(out)
    return refcomp.runtime.VirtualMachine(refcomp.graph.build(bb.get(), target="c"))["main"]


@pytest.mark.parametrize("name", MINIFLOATS + ("float8_e8m0fnu",))
def test_every_pattern_decodes_as_ml_dtypes(name):
    codes = _patterns(name)
    want = codes.view(getattr(ml_dtypes, name)).astype(np.float32)
    assert _same_floats(_decoder(name, "float32")(codes), want)
    assert _same_floats(get_op("minifloat_decode").evaluate([codes], {"source": name, "dtype": "float32"}), want)
    # the ml_dtypes array itself is taken too (the VM converts it to its bits)
    assert _same_floats(_decoder(name, "float32")(codes.view(getattr(ml_dtypes, name))), want)


@pytest.mark.parametrize("name", MINIFLOATS)
def test_every_pattern_round_trips(name):
    codes = _patterns(name)
    values = codes.view(getattr(ml_dtypes, name)).astype(np.float32)
    bits, back = _converter(name, "float32", False)(values)  # (saturation would turn e5m2 inf to max)
    nan = np.isnan(values)
    assert np.array_equal(bits[~nan], codes[~nan])  # every value's own pattern, -0 included
    assert np.isnan(bits.view(getattr(ml_dtypes, name)).astype(np.float32)[nan]).all()
    assert _same_floats(back, values)


def _specials(dtype) -> np.ndarray:
    f = np.finfo(dtype)
    return np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, f.max, -f.max, f.tiny, -f.tiny,
                     f.smallest_subnormal, 448.0, 464.0, 465.0, 480.0, -464.0, 240.0, 248.0, 57344.0, 61440.0,
                     2.0 ** -9, 2.0 ** -10, 2.0 ** -11, 1.5 * 2.0 ** -10, 6.0, 7.0, 5.0, 0.25, 0.75],
                    dtype=dtype)


# float32 sources for every format by default; float16 and float64 for two formats (all under -m slow)
_SOURCES = [(name, "float32") for name in MINIFLOATS] + [
    ("float8_e4m3fn", "float16"), ("float8_e5m2fnuz", "float64")] + [
    pytest.param(name, source, marks=pytest.mark.slow) for name in MINIFLOATS for source in ("float16", "float64")
    if (name, source) not in (("float8_e4m3fn", "float16"), ("float8_e5m2fnuz", "float64"))]


@pytest.mark.parametrize("saturate", [True, False])
@pytest.mark.parametrize("name, source", _SOURCES)
def test_encode_matches_ml_dtypes_on_edge_values(name, source, saturate, rng):
    scale = rng.integers(-20, 20, 400).astype(np.float64)
    with np.errstate(over="ignore"):  # float16 overflows to inf, which is one more edge value
        x = np.concatenate([_specials(source), (rng.standard_normal(400) * 2.0 ** scale).astype(source)])
    bits, _ = _converter(name, source, saturate)(x)
    assert np.array_equal(bits, _expected_encode(x, name, saturate or name.startswith("float4")))
    folded = get_op("minifloat_encode").evaluate([x], {"dtype": name, "saturate": saturate, "round_mode": "up"})
    assert np.array_equal(np.asarray(folded).view(np.uint8), bits)


@given(x=hnp.arrays(np.float32, st.integers(1, 40),
                    elements=st.floats(width=32, allow_nan=True, allow_infinity=True, allow_subnormal=True)),
       name=st.sampled_from(MINIFLOATS), saturate=st.booleans())
def test_encode_random_floats_exactly(x, name, saturate):
    bits, _ = _converter(name, "float32", saturate)(x)
    assert np.array_equal(bits, _expected_encode(x, name, saturate or name.startswith("float4")))


@pytest.mark.parametrize("mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [True, False])
def test_e8m0_follows_onnx(mode, saturate, rng):
    from onnx.numpy_helper import to_float8e8m0

    f = np.finfo(np.float32)
    x = np.concatenate([np.array([0.0, -0.0, 1.0, 1.5, 3.0, f.max, -f.max, f.tiny, np.inf, np.nan, 2.0 ** -127],
                                 np.float32),
                        (rng.standard_normal(300) * 2.0 ** rng.integers(-126, 126, 300)).astype(np.float32)])
    want = to_float8e8m0(x, saturate, mode).view(np.uint8)
    got = get_op("minifloat_encode").evaluate([x], {"dtype": "float8_e8m0fnu", "saturate": saturate,
                                                    "round_mode": mode})
    assert np.array_equal(np.asarray(got).view(np.uint8), want)
    n = SizeVar("n", "int64")
    bb = BlockBuilder()
    v = Var("x", TensorStructInfo((n,), "float32"))
    with bb.function("main", [v]):
        with bb.dataflow():
            out = bb.emit_output(op.minifloat_encode(v, "float8_e8m0fnu", saturate, mode))
        bb.emit_func_output(out)
    run = refcomp.runtime.VirtualMachine(refcomp.graph.build(bb.get(), target="c"))["main"]
    assert np.array_equal(run(x), want)


@pytest.mark.parametrize("target", ["int4", "uint4", "int2", "uint2"])
def test_astype_to_sub_byte_integers_wraps(target, rng):
    bits = int(target[-1])
    x = rng.integers(-40, 40, 200).astype(np.int32)
    n = SizeVar("n", "int64")
    bb = BlockBuilder()
    v = Var("x", TensorStructInfo((n,), "int32"))
    with bb.function("main", [v]):
        with bb.dataflow():
            narrow = bb.emit(op.astype(v, target))
            out = bb.emit_output(Tuple((narrow, op.astype(narrow, "float32"))))
        bb.emit_func_output(out)
    narrow, wide = refcomp.runtime.VirtualMachine(refcomp.graph.build(bb.get(), target="c"))["main"](x)
    span = 1 << bits
    want = x % span - (span if target.startswith("int") else 0) * (x % span >= span // 2)
    assert narrow.dtype == (np.int8 if target.startswith("int") else np.uint8)
    assert np.array_equal(narrow, want) and np.array_equal(wide, want.astype(np.float32))
    assert np.array_equal(want, x.astype(getattr(ml_dtypes, target)).astype(np.int64))


def test_ops_refuse_storage_only_types_by_name():
    bb = BlockBuilder()
    x = Var("x", TensorStructInfo((4,), "float8_e4m3fn"))
    with pytest.raises(refcomp.IRError, match="float8_e4m3fn"):
        with bb.function("main", [x]):
            with bb.dataflow():
                bb.emit(op.exp(x))
    with pytest.raises(refcomp.IRError, match="minifloat_encode"):
        BlockBuilder().normalize(op.astype(x, "float32"))
    y = Var("y", TensorStructInfo((4,), "int4"))
    bb = BlockBuilder()
    with bb.function("main", [y]):
        with bb.dataflow():
            out = bb.emit_output(op.add(y, y))
        bb.emit_func_output(out)
    with pytest.raises(refcomp.IRError, match="add: argument 0 has element type int4"):
        refcomp.graph.build(bb.get(), target="c")


def test_moves_keep_the_element_type():
    """A reshape/concat/take of a minifloat tensor copies the bits and stays typed."""
    bb = BlockBuilder()
    x = Var("x", TensorStructInfo((2, 3), "float8_e5m2"))
    with bb.function("main", [x]):
        with bb.dataflow():
            r = bb.emit(op.reshape(x, (3, 2)))
            c = bb.emit(op.concat([x, x], axis=0))
            out = bb.emit_output(Tuple((r, c, op.minifloat_decode(c, "float8_e5m2"))))
        bb.emit_func_output(out)
    mod = bb.get()
    assert str(mod["main"].ret_struct_info.fields[0].dtype) == "float8_e5m2"
    codes = np.array([[0x3C, 0xBC, 0x7C], [0xFC, 0x01, 0x80]], np.uint8)
    r, c, values = refcomp.runtime.VirtualMachine(refcomp.graph.build(mod, target="c"))["main"](codes)
    assert np.array_equal(r, codes.reshape(3, 2)) and np.array_equal(c, np.concatenate([codes, codes]))
    assert _same_floats(values, np.concatenate([codes, codes]).view(ml_dtypes.float8_e5m2).astype(np.float32))


def test_fold_constant_keeps_minifloat_constants_typed():
    from refcomp.ast.graph import Constant
    from refcomp.graph.passes import fold_constant

    values = np.array([0.3, -1000.0, 2.0 ** -12, np.nan], np.float32)
    bb = BlockBuilder()
    x = Var("x", TensorStructInfo((4,), "float8_e4m3fn"))
    with bb.function("main", [x]):
        with bb.dataflow():
            c = bb.emit(op.minifloat_encode(Constant(values), "float8_e4m3fn"))
            both = bb.emit(op.concat([x, c], axis=0))
            out = bb.emit_output(op.minifloat_decode(both, "float8_e4m3fn"))
        bb.emit_func_output(out)
    mod = bb.get()
    folded = fold_constant(mod)
    assert "minifloat_encode" not in str(folded["main"])
    codes = np.array([0x01, 0x80, 0x7E, 0x40], np.uint8)
    want = np.concatenate([codes, _expected_encode(values, "float8_e4m3fn", True)])
    for m in (mod, folded):
        got = refcomp.runtime.VirtualMachine(refcomp.graph.build(m, target="c"))["main"](codes)
        assert _same_floats(got, want.view(ml_dtypes.float8_e4m3fn).astype(np.float32))
