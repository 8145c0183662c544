"""One or more test cases per graph operator: input shape templates, value domains, attributes.

A shape template is a tuple of ints and letters; each letter is a symbolic dim (a SizeVar in the
symbolic build, a drawn size in the concrete one).  `attrs` values may be callables of the
letter -> dim mapping, for attributes that mention dims (reshape targets).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from refcomp.graph.op import elementwise as E


@dataclass
class Input:
    """One tensor argument: shape template, dtype and how to draw its values."""

    shape: tuple
    dtype: str = "float32"
    domain: str = "normal"  # normal | positive | unit | ge1 | int | bool | index:<letter or int>[:axis-neg]
    low: int = -5
    high: int = 6


@dataclass
class Case:
    """A call of `op` on inputs with attrs; `sizes` bounds the letters' values."""

    op: str
    inputs: list
    attrs: dict = field(default_factory=dict)
    sizes: tuple = (1, 5)
    rtol: float = 1e-4
    atol: float = 1e-5
    id: str = ""

    @property
    def name(self) -> str:
        return self.id or self.op


F = "float32"
POSITIVE = {"log", "log2", "log10", "sqrt", "rsqrt", "reciprocal"}
UNIT = {"asin", "acos", "atanh"}
LOOSE = {"tan": 1e-3, "sinh": 1e-3, "cosh": 1e-3, "exp": 1e-4, "exp2": 1e-4, "mish": 1e-4}


def _unary_cases() -> list[Case]:
    cases = []
    for name in E.UNARY:
        dtype = "bool" if name == "logical_not" else F
        domain = ("positive" if name in POSITIVE else "unit" if name in UNIT else "ge1" if name == "acosh"
                  else "bool" if dtype == "bool" else "normal")
        cases.append(Case(name, [Input(("n", "m"), dtype, domain)], rtol=LOOSE.get(name, 1e-4)))
    cases.append(Case("abs", [Input(("n",), "int32", "int")], id="abs_int"))
    cases.append(Case("negative", [Input(("n", 3), "int64", "int")], id="negative_int"))
    for name in ("leaky_relu", "elu", "selu", "hard_sigmoid", "hard_swish", "celu", "thresholded_relu"):
        attrs = {"leaky_relu": {"alpha": 0.1}, "elu": {"alpha": 0.7}, "celu": {"alpha": 1.3},
                 "thresholded_relu": {"alpha": 0.5}, "hard_sigmoid": {"alpha": 0.3, "beta": 0.4}}.get(name, {})
        cases.append(Case(name, [Input(("n", "m"))], attrs))
    return cases


def _binary_cases() -> list[Case]:
    cases = []
    for name, (_, _, kind) in E.BINARY.items():
        if kind == "logic":
            ins = [Input(("n", "m"), "bool", "bool"), Input(("m",), "bool", "bool")]
        elif name in ("power",):
            ins = [Input(("n", "m"), F, "positive"), Input(("m",))]
        elif name in ("floor_divide", "floor_mod", "fmod", "divide"):
            ins = [Input(("n", "m")), Input(("m",), F, "positive")]
        else:
            ins = [Input(("n", "m")), Input(("m",))]
        cases.append(Case(name, ins))
    cases.append(Case("add", [Input(("n", 1, "m")), Input(("p", 1))], id="add_broadcast3"))
    cases.append(Case("add", [Input(("n", "m"), "int32", "int"), Input(("n", "m"), "int32", "int")], id="add_int"))
    cases.append(Case("floor_divide", [Input(("n",), "int32", "int"), Input(("n",), "int32", "nonzero")],
                      id="floor_divide_int"))
    cases.append(Case("floor_mod", [Input(("n",), "int64", "int"), Input(("n",), "int64", "nonzero")],
                      id="floor_mod_int"))
    cases.append(Case("less", [Input(("n", "m"), "int32", "int"), Input((1,), "int32", "int")], id="less_int"))
    cases.append(Case("maximum", [Input(("n",), "int32", "int"), Input(("n",), "int32", "int")], id="maximum_int"))
    return cases


def _other_elementwise() -> list[Case]:
    return [
        Case("where", [Input(("n", "m"), "bool", "bool"), Input(("n", "m")), Input(("m",))]),
        Case("clip", [Input(("n", "m"))], {"min": -0.5, "max": 0.7}),
        Case("clip", [Input(("n",), "int32", "int")], {"min": -2, "max": 3}, id="clip_int"),
        Case("astype", [Input(("n", "m"))], {"dtype": "int32"}, id="astype_f2i"),
        Case("astype", [Input(("n", "m"), "int32", "int")], {"dtype": "float32"}, id="astype_i2f"),
        Case("astype", [Input(("n",))], {"dtype": "bool"}, id="astype_f2b"),
    ]


def _linear_cases() -> list[Case]:
    return [
        Case("matmul", [Input(("n", "k")), Input(("k", "m"))]),
        Case("matmul", [Input(("b", "n", "k")), Input(("k", "m"))], id="matmul_batched"),
        Case("matmul", [Input(("b", 1, "n", "k")), Input(("c", "k", "m"))], id="matmul_broadcast"),
        Case("matmul", [Input(("k",)), Input(("k", "m"))], id="matmul_vec_mat"),
        Case("matmul", [Input(("n", "k")), Input(("k",))], id="matmul_mat_vec"),
        Case("dense", [Input(("n", "k")), Input(("m", "k"))]),
        Case("linear", [Input(("b", "n", "k")), Input(("m", "k")), Input(("m",))]),
    ]


def _reduce_cases() -> list[Case]:
    cases = []
    for name in ("sum", "max", "min", "prod", "mean", "l1_norm", "l2_norm", "sum_square", "variance", "std",
                 "logsumexp"):
        cases.append(Case(name, [Input(("n", "m", "p"))], {"axis": (1,), "keepdims": False}, rtol=1e-3))
        cases.append(Case(name, [Input(("n", "m"))], {"axis": None, "keepdims": True}, id=f"{name}_all",
                          rtol=1e-3, atol=1e-4))
    cases.append(Case("sum", [Input(("n", "m", "p"))], {"axis": (0, 2), "keepdims": True}, id="sum_two_axes"))
    cases.append(Case("sum", [Input(("n", "m"), "int32", "int")], {"axis": (1,)}, id="sum_int"))
    for name in ("argmax", "argmin"):
        cases.append(Case(name, [Input(("n", "m", "p"))], {"axis": 1, "keepdims": False}))
        cases.append(Case(name, [Input(("n", "m"))], {"axis": -1, "keepdims": True}, id=f"{name}_keep"))
        cases.append(Case(name, [Input(("n", "m"))], {"axis": None}, id=f"{name}_flat"))
    for name in ("cumsum", "cumprod"):
        cases.append(Case(name, [Input(("n", "m"))], {"axis": 1}, rtol=1e-3))
        cases.append(Case(name, [Input(("n", "m"))], {"axis": 0, "exclusive": True, "reverse": True},
                          id=f"{name}_excl_rev", rtol=1e-3))
    cases.append(Case("cumsum", [Input(("n", "m"), "int32", "int")], {"axis": None}, id="cumsum_flat_int"))
    return cases


def _nn_cases() -> list[Case]:
    return [
        Case("conv2d", [Input(("b", 4, 7, 7)), Input((6, 2, 3, 3))],
             {"strides": 2, "padding": 1, "dilation": 1, "groups": 2}, rtol=1e-3, atol=1e-4),
        Case("conv2d", [Input((1, 3, "h", "w")), Input((4, 3, 2, 3))], {"padding": (1, 0, 0, 2), "dilation": 2},
             id="conv2d_dilated", sizes=(5, 8), rtol=1e-3, atol=1e-4),
        Case("conv1d", [Input(("b", 2, "w")), Input((3, 2, 3))], {"strides": 1, "padding": 1}, sizes=(3, 7),
             rtol=1e-3, atol=1e-4),
        Case("conv2d_transpose", [Input((1, 4, 3, 3)), Input((4, 3, 3, 3))],
             {"strides": 2, "padding": 1, "output_padding": 1}, rtol=1e-3, atol=1e-4),
        Case("conv2d_transpose", [Input((2, 4, 3, 2)), Input((4, 1, 2, 2))], {"strides": 1, "groups": 2},
             id="conv2d_transpose_groups", rtol=1e-3, atol=1e-4),
        Case("max_pool2d", [Input(("b", 2, "h", "w"))], {"pool_size": 2, "strides": 2}, sizes=(2, 7)),
        Case("max_pool2d", [Input((1, 2, 5, 6))], {"pool_size": 3, "strides": 2, "padding": 1, "ceil_mode": True},
             id="max_pool2d_ceil"),
        Case("avg_pool2d", [Input((1, 2, 5, 6))], {"pool_size": 3, "strides": 2, "padding": 1}),
        Case("avg_pool2d", [Input((1, 2, 5, 6))], {"pool_size": 2, "strides": 1, "padding": 1,
                                                   "count_include_pad": True}, id="avg_pool2d_include_pad"),
        Case("global_avg_pool", [Input(("b", "c", "h", "w"))]),
        Case("global_max_pool", [Input(("b", "c", "h", "w"))]),
        Case("softmax", [Input(("n", "m"))], {"axis": -1}),
        Case("softmax", [Input(("n", "m", "p"))], {"axis": 1}, id="softmax_axis1"),
        Case("log_softmax", [Input(("n", "m"))], {"axis": -1}),
        Case("layer_norm", [Input(("n", "m")), Input(("m",)), Input(("m",))], {"axes": (-1,)}, sizes=(2, 6),
             rtol=1e-3, atol=1e-4),
        Case("rms_norm", [Input(("n", "m")), Input(("m",))], {"axes": (-1,)}, rtol=1e-3, atol=1e-4),
        Case("group_norm", [Input((2, 6, "h", "w")), Input((6,)), Input((6,))], {"num_groups": 3}, sizes=(2, 4),
             rtol=1e-3, atol=1e-4),
        Case("batch_norm", [Input(("n", 4, "h")), Input((4,)), Input((4,)), Input((4,)), Input((4,), F, "positive")],
             {"axis": 1}),
    ]


def _manipulate_cases() -> list[Case]:
    return [
        Case("reshape", [Input(("n", 6))], {"shape": lambda d: (d["n"], 2, 3)}),
        Case("reshape", [Input(("n", 6))], {"shape": (-1,)}, id="reshape_infer"),
        Case("reshape", [Input((4, 6))], {"shape": (3, -1, 2)}, id="reshape_static"),
        Case("view", [Input(("n", 6))], {"shape": lambda d: (2, d["n"], 3)}),
        Case("view", [Input((4, 6))], {"shape": (24,)}, id="view_static"),
        Case("permute_dims", [Input(("n", "m", "p"))], {"axes": (2, 0, 1)}),
        Case("permute_dims", [Input(("n", "m"))], {}, id="permute_reverse"),
        Case("expand_dims", [Input(("n", "m"))], {"axis": (0, 2)}),
        Case("squeeze", [Input(("n", 1, "m"))], {"axis": (1,)}),
        Case("squeeze", [Input((1, "n", 1))], {}, id="squeeze_all"),
        Case("flatten", [Input(("n", "m", "p"))], {"start_dim": 1}),
        Case("concat", [Input(("n", 3)), Input(("n", "m"))], {"axis": 1}),
        Case("concat", [Input((2, "m")), Input(("n", "m")), Input((1, "m"))], {"axis": 0}, id="concat3"),
        Case("split", [Input(("n", 6))], {"indices_or_sections": 3, "axis": 1}),
        Case("split", [Input((7, "m"))], {"indices_or_sections": (1, 4), "axis": 0}, id="split_indices"),
        Case("strided_slice", [Input(("n", 9))], {"axes": (1,), "begin": (1,), "end": (8,), "strides": (2,)}),
        Case("strided_slice", [Input((5, 8))], {"axes": (1, 0), "begin": (6, -1), "end": (1, -6),
                                                "strides": (-2, -1)}, id="strided_slice_negative"),
        Case("strided_slice", [Input(("n", "m"))], {"axes": (0,), "begin": (1,), "end": (2 ** 62,)},
             id="strided_slice_to_end", sizes=(2, 5)),
        Case("broadcast_to", [Input((1, "m"))], {"shape": lambda d: (3, d["m"])}),
        Case("tile", [Input(("n", 3))], {"repeats": (2, 2)}),
        Case("tile", [Input((2,))], {"repeats": (3, 2)}, id="tile_more_dims"),
        Case("repeat", [Input(("n", 3))], {"repeats": 2, "axis": 0}),
        Case("repeat", [Input(("n", 3))], {"repeats": 3}, id="repeat_flat"),
        Case("flip", [Input(("n", "m"))], {"axis": (0, 1)}),
        Case("pad", [Input(("n", "m"))], {"pad_width": ((1, 2), (0, 1)), "pad_value": 0.5}),
        Case("pad", [Input(("n", "m"))], {"pad_width": ((2, 1), (1, 0)), "mode": "edge"}, id="pad_edge"),
        Case("pad", [Input(("n", "m"))], {"pad_width": ((1, 1), (2, 1)), "mode": "reflect"}, sizes=(3, 6),
             id="pad_reflect"),
    ]


def _index_cases() -> list[Case]:
    return [
        Case("take", [Input(("n", "m")), Input(("p",), "int64", "index:m:neg")], {"axis": 1}),
        Case("take", [Input(("n", "m")), Input(("p", 2), "int32", "index:n")], {"axis": 0}, id="take_2d_indices"),
        Case("embedding", [Input((7, "h")), Input(("b", "s"), "int64", "index:7")]),
        Case("gather_elements", [Input(("n", "m")), Input(("n", "k"), "int64", "index:m:neg")], {"axis": 1}),
        Case("gather_nd", [Input((4, 5, 6)), Input(("p", 2), "int64", "index:4")]),
        Case("gather_nd", [Input((3, 4, 5)), Input((3, "p", 1), "int64", "index:4")], {"batch_dims": 1},
             id="gather_nd_batch"),
        Case("scatter_elements", [Input((4, 5)), Input((4, 3), "int64", "perm:5"), Input((4, 3))], {"axis": 1}),
        Case("scatter_elements", [Input((4, 5)), Input((2, 5), "int64", "index:4"), Input((2, 5))],
             {"axis": 0, "reduction": "add"}, id="scatter_add"),
        Case("scatter_elements", [Input((4, 5)), Input((3, 5), "int64", "index:4"), Input((3, 5))],
             {"axis": 0, "reduction": "max"}, id="scatter_max"),
        Case("one_hot", [Input(("n", "m"), "int64", "index:5:neg")], {"depth": 5, "on_value": 2.0, "off_value": -1.0}),
        Case("topk", [Input(("n", "m"))], {"k": 3, "axis": -1}, sizes=(3, 6)),
        Case("topk", [Input(("n", "m"))], {"k": 2, "axis": 0, "largest": False}, sizes=(2, 5), id="topk_smallest"),
    ]


def _create_cases() -> list[Case]:
    return [
        Case("full", [], {"shape": (2, 3), "fill_value": 1.5, "dtype": "float32"}),
        Case("full", [], {"shape": (4,), "fill_value": 7, "dtype": "int32"}, id="full_int"),
        Case("full_like", [Input(("n", "m"))], {"fill_value": 3.0}),
        Case("arange", [], {"start": 2, "stop": 11, "step": 3, "dtype": "int64"}),
        Case("arange", [], {"start": 0.5, "stop": 3.0, "step": 0.5, "dtype": "float32"}, id="arange_float"),
        Case("shape_to_tensor", [], {"values": (3, 5, 2)}),
        Case("shape_to_tensor", [], {"values": (7,), "scalar": True}, id="shape_to_tensor_scalar"),
        Case("eye", [], {"n": 3, "m": 4, "k": 1, "dtype": "float32"}),
        Case("tril", [Input(("b", "n", "m"))], {"k": 0}),
        Case("triu", [Input(("n", "m"))], {"k": 1}),
    ]


def _image_cases() -> list[Case]:
    cases = []
    for method in ("nearest", "linear"):
        for mode in ("half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel"):
            cases.append(Case("resize2d", [Input((1, 2, 4, 5))], {"size": (7, 3), "method": method,
                                                                  "coordinate_transformation_mode": mode},
                              id=f"resize2d_{method}_{mode}", rtol=1e-4, atol=1e-5))
    cases.append(Case("resize2d", [Input((1, 1, 3, 3))], {"size": (6, 5), "method": "nearest",
                                                          "coordinate_transformation_mode": "asymmetric",
                                                          "nearest_mode": "floor"}, id="resize2d_nearest_floor"))
    return cases


def _bitwise_cases() -> list[Case]:
    wide = dict(low=-2 ** 62, high=2 ** 62)
    return [
        Case("bitwise_and", [Input(("n", "m"), "int32", "int", **wide), Input(("m",), "int32", "int", **wide)]),
        Case("bitwise_or", [Input(("n", "m"), "uint8", "int", 0, 256), Input(("n", "m"), "uint8", "int", 0, 256)]),
        Case("bitwise_xor", [Input(("n", 1, "m"), "int64", "int", **wide), Input(("p", 1), "int64", "int", **wide)]),
        Case("bitwise_and", [Input(("n",), "uint64", "int", **wide), Input(("n",), "uint64", "int", **wide)],
             id="bitwise_and_u64"),
        Case("bitwise_not", [Input(("n", "m"), "int8", "int", -128, 128)]),
        Case("bitwise_not", [Input(("n",), "uint16", "int", 0, 2 ** 16)], id="bitwise_not_u16"),
        Case("left_shift", [Input(("n", "m"), "uint32", "int", 0, 2 ** 32), Input(("m",), "uint32", "int", 0, 40)]),
        Case("right_shift", [Input(("n",), "uint64", "int", **wide), Input(("n",), "uint64", "int", 0, 70)]),
        Case("bitcast", [Input(("n", "m"))], {"dtype": "int32"}, id="bitcast_f2i"),
        Case("bitcast", [Input(("n",), "int32", "int", 0, 2 ** 30)], {"dtype": "float32"}, id="bitcast_i2f"),
        Case("bitcast", [Input(("n", "m"), "float64")], {"dtype": "uint64"}, id="bitcast_f64_u64"),
    ]


def _layout_cases() -> list[Case]:
    """The channel-blocked layout's operators (refcomp.graph.op.layout): channel counts that are
    and are not a multiple of the lanes, symbolic batch and spatial sizes."""
    return [
        Case("layout_transform", [Input(("b", 5, "h", "w"))], {"src": "NCHW", "dst": "NCHW4c"}, id="to_nchw4c"),
        Case("layout_transform", [Input(("b", 16, "h", 3))], {"src": "NCHW", "dst": "NCHW8c"}, id="to_nchw8c"),
        Case("layout_transform", [Input(("b", 2, "h", "w", 4))], {"src": "NCHW4c", "dst": "NCHW", "channels": 7},
             id="from_nchw4c"),
        Case("layout_transform", [Input(("b", 2, 3, "w", 8))], {"src": "NCHW8c", "dst": "NCHW"}, id="from_nchw8c"),
        Case("conv2d_nchwc", [Input(("b", 2, "h", "w", 4)), Input((3, 8, 3, 3, 4))],
             {"strides": 1, "padding": 1}, sizes=(3, 7), rtol=1e-3, atol=1e-4),
        Case("conv2d_nchwc", [Input((1, 1, "h", "w", 8)), Input((2, 8, 2, 3, 8))],
             {"strides": 2, "padding": (1, 0, 0, 2), "dilation": 2}, id="conv2d_nchwc_strided", sizes=(5, 8),
             rtol=1e-3, atol=1e-4),
        Case("conv2d_nchwc", [Input(("b", 3, "h", "w")), Input((2, 3, 3, 3, 8))],
             {"strides": 2, "padding": (0, 0, 1, 1)}, id="conv2d_nchwc_plain_input", sizes=(4, 9),
             rtol=1e-3, atol=1e-4),
        Case("conv2d_nchwc", [Input(("b", 3, "h", "w", 4)), Input((3, 1, 3, 3, 4))],
             {"strides": 2, "padding": (0, 0, 1, 1), "depthwise": True}, id="conv2d_nchwc_depthwise", sizes=(3, 7),
             rtol=1e-3, atol=1e-4),
        Case("max_pool2d_nchwc", [Input(("b", 2, "h", "w", 4))], {"pool_size": 3, "strides": 2, "padding": 1},
             sizes=(2, 7)),
        Case("avg_pool2d_nchwc", [Input((1, 2, 5, 6, 4))], {"pool_size": 3, "strides": 2, "padding": 1,
                                                            "count_include_pad": True}),
        Case("avg_pool2d_nchwc", [Input((1, 1, 5, 6, 8))], {"pool_size": 2, "strides": 1, "padding": 1},
             id="avg_pool2d_nchwc_exclude_pad"),
        Case("global_avg_pool_nchwc", [Input(("b", 2, "h", "w", 4))]),
    ]


CASES: list[Case] = (_unary_cases() + _binary_cases() + _other_elementwise() + _linear_cases() + _reduce_cases()
                     + _nn_cases() + _manipulate_cases() + _index_cases() + _create_cases() + _image_cases()
                     + _bitwise_cases() + _layout_cases())


def letters(case: Case) -> list[str]:
    """The symbolic dims of a case, in first-seen order."""
    seen: dict[str, None] = {}
    for inp in case.inputs:
        for d in inp.shape:
            if isinstance(d, str):
                seen.setdefault(d, None)
    return list(seen)


def draw_values(inp: Input, shape: tuple, sizes: dict, rng: np.random.Generator) -> np.ndarray:
    """Fresh random values for one input (never all zeros)."""
    domain = inp.domain
    if domain == "bool":
        return rng.random(shape) < 0.5
    if domain in ("int", "nonzero"):
        values = rng.integers(inp.low, inp.high, size=shape)
        if domain == "nonzero":
            values = np.where(values == 0, 3, values)
        return values.astype(inp.dtype)
    if domain.startswith("index:") or domain.startswith("perm:"):
        parts = domain.split(":")
        bound = sizes[parts[1]] if parts[1] in sizes else int(parts[1])
        if parts[0] == "perm":  # distinct indices along the last axis (scatter without collisions)
            rows = [rng.permutation(bound)[: shape[-1]] for _ in range(int(np.prod(shape[:-1])))]
            return np.array(rows, dtype=inp.dtype).reshape(shape)
        low = -bound if len(parts) > 2 and parts[2] == "neg" else 0
        return rng.integers(low, bound, size=shape).astype(inp.dtype)
    if domain == "positive":
        return (rng.random(shape) * 2 + 0.1).astype(inp.dtype)
    if domain == "unit":
        return (rng.random(shape) * 1.8 - 0.9).astype(inp.dtype)
    if domain == "ge1":
        return (rng.random(shape) * 3 + 1.0).astype(inp.dtype)
    return rng.standard_normal(shape).astype(inp.dtype)


def resolve_attrs(case: Case, dims: dict) -> dict:
    """The case's attributes with dim-dependent ones evaluated for `dims` (letter -> dim)."""
    return {k: (v(dims) if callable(v) else v) for k, v in case.attrs.items()}


def builder(case: Case) -> Callable[..., Any]:
    import refcomp.graph.op as op

    return getattr(op, case.op)
