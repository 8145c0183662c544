"""Operators on string tensors, run by the VM on the host.

A string tensor is a numpy object array of Python str (spec/graph.md, "Element types").  No
kernel computes on strings: these operators are host ops (`host=True`), which the VM runs through
their numpy reference, returning fresh arrays, so an output shape may depend on the data
(string_split's widest split, string_normalize's kept words).  Such a result has a known rank
and unknown dims; bind them with R.match_cast where a later op needs them.

    string_equal(a, b)                    bool, broadcasting
    string_concat(a, b)                   string, broadcasting
    regex_full_match(x, pattern)          bool: does the whole string match (Python `re` syntax)
    string_split(x, delimiter, maxsplit)  (parts padded with "", x.shape + (widest,); counts int64)
    string_normalize(x, ...)              ONNX StringNormalizer: stopwords dropped, case changed
    string_cast(x, dtype)                 strings parsed as numbers, or numbers written as strings
    label_encode(x, keys, values, ...)    a lookup table from keys to values (any element types)
"""
from __future__ import annotations

import re

import numpy as np

from ...ast.dtype import DataType, dtype as to_dtype, storage_array
from ...ast.graph_struct_info import TensorStructInfo, TupleStructInfo
from ...errors import IRError
from ._common import infer_broadcast, make_call
from .registry import register

STRING = DataType("string")


def string_equal(a, b):
    """a == b element-wise on string tensors (broadcasting)."""
    return make_call("string_equal", a, b)


def string_concat(a, b):
    """a + b element-wise on string tensors (broadcasting)."""
    return make_call("string_concat", a, b)


def regex_full_match(x, pattern: str):
    """Whether each string matches `pattern` as a whole."""
    return make_call("regex_full_match", x, pattern=str(pattern))


def string_split(x, delimiter: str = "", maxsplit: int = -1):
    """Each string split at `delimiter` (an empty one: at runs of whitespace), at most maxsplit
    times (-1: no limit); the parts padded with "" to the widest split, and the part counts."""
    return make_call("string_split", x, delimiter=str(delimiter), maxsplit=int(maxsplit))


def string_normalize(x, case_change_action: str = "NONE", is_case_sensitive: bool = False,
                     stopwords: tuple = ()):
    """ONNX StringNormalizer on a [C] or [1, C] string tensor."""
    return make_call("string_normalize", x, case_change_action=str(case_change_action),
                     is_case_sensitive=bool(is_case_sensitive), stopwords=tuple(str(w) for w in stopwords))


def string_cast(x, dtype):
    """Strings parsed as numbers of dtype, or numbers (and bools) written as strings."""
    return make_call("string_cast", x, dtype=str(to_dtype(dtype)))


def label_encode(x, keys: tuple, values: tuple, default, dtype):
    """Each element of x looked up in keys, giving the value at the same place (default when absent)."""
    return make_call("label_encode", x, keys=tuple(keys), values=tuple(values), default=default,
                     dtype=str(to_dtype(dtype)))


# ----------------------------------------------------------------------------- shape rules

def _strings(ctx, index: int) -> TensorStructInfo:
    info = ctx.tensor(index)
    if info.dtype is not None and not info.dtype.is_string:
        ctx.fail(f"argument {index} must be a string tensor, got {info.dtype}", kind=IRError)
    return info


def _binary_infer(dtype):
    def infer(call, ctx):
        return infer_broadcast(ctx, (_strings(ctx, 0), _strings(ctx, 1)), to_dtype(dtype))

    return infer


def _match_infer(call, ctx):
    x = _strings(ctx, 0)
    try:
        re.compile(ctx.attr("pattern"))
    except re.error as exc:
        ctx.fail(f"pattern {ctx.attr('pattern')!r} is not a regular expression: {exc}", kind=IRError)
    return TensorStructInfo(x.shape, "bool", x.ndim)


def _split_infer(call, ctx):
    x = _strings(ctx, 0)
    parts = TensorStructInfo(None, STRING, x.ndim + 1 if x.ndim >= 0 else -1)
    return TupleStructInfo((parts, TensorStructInfo(x.shape, "int64", x.ndim)))


def _normalize_infer(call, ctx):
    x = _strings(ctx, 0)
    if x.ndim not in (-1, 1, 2):
        ctx.fail(f"expects a [C] or [1, C] string tensor, got {x.ndim} dims", kind=IRError)
    if ctx.attr("case_change_action") not in ("NONE", "LOWER", "UPPER"):
        ctx.fail(f"case_change_action must be NONE, LOWER or UPPER, got {ctx.attr('case_change_action')!r}",
                 kind=IRError)
    return TensorStructInfo(None, STRING, x.ndim)


def _cast_infer(call, ctx):
    x = ctx.tensor(0)
    target = to_dtype(ctx.attr("dtype"))
    source = x.dtype
    numeric = (lambda t: t.is_bool or t.is_integer or (t.is_float and t.name != "bfloat16"))
    ok = source is not None and ((source.is_string and numeric(target)) or
                                 (target.is_string and numeric(source)) or (source.is_string and target.is_string))
    if not ok:
        ctx.fail(f"converts between strings and bool/integer/float16/float32/float64, not {source} to {target}",
                 kind=IRError)
    return TensorStructInfo(x.shape, target, x.ndim)


def _label_infer(call, ctx):
    x = ctx.tensor(0)
    if len(ctx.attr("keys")) != len(ctx.attr("values")):
        ctx.fail(f"{len(ctx.attr('keys'))} keys but {len(ctx.attr('values'))} values", kind=IRError)
    return TensorStructInfo(x.shape, to_dtype(ctx.attr("dtype")), x.ndim)


# ----------------------------------------------------------------------------- host implementations

def _text(value) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _as_strings(x) -> np.ndarray:
    x = storage_array(np.asarray(x))
    return np.vectorize(_text, otypes=[object])(x) if x.size else x.astype(object)


def _map(fn, *arrays, otype):
    arrays = np.broadcast_arrays(*[_as_strings(a) for a in arrays])
    if arrays[0].size == 0:
        return np.zeros(arrays[0].shape, otype)
    return np.vectorize(fn, otypes=[otype])(*arrays)


def _equal(a, b):
    return _map(lambda s, t: s == t, a, b, otype=np.bool_)


def _concat(a, b):
    return _map(lambda s, t: s + t, a, b, otype=object)


def _full_match(x, pattern):
    compiled = re.compile(pattern)
    return _map(lambda s: compiled.fullmatch(s) is not None, x, otype=np.bool_)


def _split(x, delimiter="", maxsplit=-1):
    x = _as_strings(x)
    sep = delimiter or None
    pieces = [s.split(sep, maxsplit) for s in x.reshape(-1)]
    widest = max((len(p) for p in pieces), default=0)
    parts = np.full((len(pieces), widest), "", dtype=object)
    for k, p in enumerate(pieces):
        parts[k, :len(p)] = p
    counts = np.array([len(p) for p in pieces], np.int64).reshape(x.shape)
    return parts.reshape(x.shape + (widest,)), counts


def _normalize(x, case_change_action="NONE", is_case_sensitive=False, stopwords=()):
    x = _as_strings(x)
    if x.ndim == 2 and x.shape[0] != 1:
        raise ValueError(f"expects a [C] or [1, C] string tensor, got shape {x.shape}")
    change = {"LOWER": str.lower, "UPPER": str.upper}.get(case_change_action, lambda s: s)
    if is_case_sensitive:
        stops = set(stopwords)
        keep = [change(s) for s in x.reshape(-1) if s not in stops]
    else:
        stops = {w.lower() for w in stopwords}
        keep = [change(s) for s in x.reshape(-1) if s.lower() not in stops]
    keep = [s for s in keep if s] or [""]
    out = np.array(keep, dtype=object)
    return out.reshape(1, -1) if x.ndim == 2 else out


def _cast(x, dtype):
    target = to_dtype(dtype)
    x = storage_array(np.asarray(x))
    if target.is_string:
        if x.dtype.kind == "O":
            return _as_strings(x)
        return _as_strings(x.astype(np.str_))
    strings = _as_strings(x)
    if target.is_bool:
        return np.vectorize(lambda s: float(s) != 0.0, otypes=[np.bool_])(strings) if x.size else \
            np.zeros(x.shape, np.bool_)
    return np.asarray(strings.astype(np.str_) if x.size else np.zeros(x.shape)).astype(target.numpy())


def _label(x, keys=(), values=(), default=None, dtype="int64"):
    target = to_dtype(dtype)
    x = storage_array(np.asarray(x))
    if x.dtype.kind == "O":
        x = _as_strings(x)
    table = dict(zip(keys, values))
    otype = object if target.is_string else target.numpy()
    if x.size == 0:
        return np.zeros(x.shape, otype)
    return np.vectorize(lambda v: table.get(v.item() if isinstance(v, np.generic) else v, default),
                        otypes=[otype])(x)


register("string_equal", infer=_binary_infer("bool"), reference=_equal, host=True, doc="string equality")
register("string_concat", infer=_binary_infer("string"), reference=_concat, host=True, doc="string concatenation")
register("regex_full_match", infer=_match_infer, reference=_full_match, host=True, doc="whole-string regex match")
register("string_split", infer=_split_infer, reference=_split, host=True, doc="split strings at a delimiter")
register("string_normalize", infer=_normalize_infer, reference=_normalize, host=True,
         doc="ONNX StringNormalizer: stopwords and case")
register("string_cast", infer=_cast_infer, reference=_cast, host=True, doc="strings to numbers and back")
register("label_encode", infer=_label_infer, reference=_label, host=True, doc="a lookup table from keys to values")
