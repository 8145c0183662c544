"""ONNX ops on string tensors: StringNormalizer, RegexFullMatch, StringConcat, StringSplit, Equal
on strings, Cast to and from string, and ai.onnx.ml LabelEncoder.  They import as the host ops of
refcomp.graph.op.strings, which the VM runs (string tensors never reach a kernel)."""
from __future__ import annotations

import numpy as np

from ...ast.dtype import dtype as to_dtype
from ...graph import op
from .importer import converter


def _text(value) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def convert_string(ctx, x, source, target):
    """Cast between strings and numbers (element_types.convert sends these here)."""
    if source.is_minifloat or target.is_minifloat or source.is_sub_byte_int or target.is_sub_byte_int:
        from .element_types import convert

        middle = "float32"
        if source.is_string:
            return convert(ctx, ctx.emit(op.string_cast(x, middle)), target)
        return ctx.emit(op.string_cast(convert(ctx, x, middle), "string"))
    return ctx.emit(op.string_cast(x, target))


def strings_equal(ctx, a, b):
    """Equal on two string tensors."""
    return ctx.emit(op.string_equal(a, b))


@converter("StringConcat")
def _string_concat(ctx, node, inputs, attrs):
    return ctx.emit(op.string_concat(inputs[0], inputs[1]))


@converter("RegexFullMatch")
def _regex_full_match(ctx, node, inputs, attrs):
    if "pattern" not in attrs:
        ctx.fail("the pattern attribute is required")
    return ctx.emit(op.regex_full_match(inputs[0], _text(attrs["pattern"])))


@converter("StringSplit")
def _string_split(ctx, node, inputs, attrs):
    maxsplit = attrs.get("maxsplit")
    return ctx.emit(op.string_split(inputs[0], _text(attrs.get("delimiter", b"")),
                                    -1 if maxsplit is None else int(maxsplit)))


@converter("StringNormalizer")
def _string_normalizer(ctx, node, inputs, attrs):
    action = _text(attrs.get("case_change_action", b"NONE"))
    stopwords = tuple(_text(w) for w in attrs.get("stopwords", []))
    return ctx.emit(op.string_normalize(inputs[0], action, bool(attrs.get("is_case_sensitive", 0)), stopwords))


_DEFAULTS = {"string": "_Unused", "int64": -1, "float": -0.0}


@converter("LabelEncoder", domain="ai.onnx.ml")
def _label_encoder(ctx, node, inputs, attrs):
    from onnx import numpy_helper

    def pick(prefix):
        for kind in ("strings", "int64s", "floats"):
            if f"{prefix}_{kind}" in attrs:
                return [(_text(v) if kind == "strings" else v) for v in attrs[f"{prefix}_{kind}"]], kind
        if f"{prefix}_tensor" in attrs:
            array = numpy_helper.to_array(attrs[f"{prefix}_tensor"])
            values = [_text(v) if array.dtype.kind in "OUS" else v.item() for v in array.reshape(-1)]
            return values, ("strings" if array.dtype.kind in "OUS" else str(array.dtype))
        ctx.fail(f"one of {prefix}_strings, {prefix}_int64s, {prefix}_floats, {prefix}_tensor is required")

    keys, _ = pick("keys")
    values, kind = pick("values")
    dtype = {"strings": "string", "int64s": "int64", "floats": "float32"}.get(kind, kind)
    if "default_tensor" in attrs:
        default_array = numpy_helper.to_array(attrs["default_tensor"]).reshape(-1)
        default = _text(default_array[0]) if default_array.dtype.kind in "OUS" else default_array[0].item()
        dtype = "string" if default_array.dtype.kind in "OUS" else str(default_array.dtype)
    else:
        name = {"string": "string", "int64": "int64", "float32": "float"}.get(dtype, "")
        default = attrs.get(f"default_{name}", _DEFAULTS.get(name))
        default = _text(default) if isinstance(default, bytes) else default
    if to_dtype(dtype).is_float and default is not None:
        default = float(np.asarray(default, to_dtype(dtype).numpy()))
    return ctx.emit(op.label_encode(inputs[0], tuple(keys), tuple(values), default, dtype))
