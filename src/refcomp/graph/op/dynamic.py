"""tensor_to_shape: a 1-d integer tensor's values as a shape value, at run time.

This is how a value computed by the program becomes a shape (the Relax way): the tensor is
read when the program runs, the resulting shape is bound to fresh size vars with `match_cast`,
and ops after it are typed with those vars.  The VM runs it directly; it has no kernel.

    s = R.tensor_to_shape(t)                       # t: Tensor((3,), "int64")
    lv = R.match_cast(s, R.Shape([n0, n1, n2]))     # n0, n1, n2 bound when the program runs

The other way, a shape value as tensor data, is `shape_to_tensor` (graph/op/create.py): a kernel
that writes the entries' values, evaluated from the size vars when the program runs.
"""
from __future__ import annotations

import numpy as np

from ...ast.graph_struct_info import ShapeStructInfo
from ...errors import IRError
from ..shape_facts import const_value
from ._common import make_call
from .registry import register


def tensor_to_shape(x):
    """The entries of a 1-d integer tensor of static length, as a shape value."""
    return make_call("tensor_to_shape", x)


def _tensor_to_shape_infer(call, ctx):
    x = ctx.tensor(0)
    if x.dtype is not None and not x.dtype.is_integer:
        ctx.fail(f"expects an integer tensor, got {x.dtype}", kind=IRError)
    if x.ndim != 1 or x.shape is None or const_value(x.shape[0]) is None:
        ctx.fail(f"expects a 1-d tensor of static length, got {x}", kind=IRError,
                 hint="the length of a shape value must be known when the program is built")
    return ShapeStructInfo(None, const_value(x.shape[0]))


def _tensor_to_shape_reference(x):
    return tuple(int(v) for v in np.asarray(x).reshape(-1))


register("tensor_to_shape", infer=_tensor_to_shape_infer, reference=_tensor_to_shape_reference,
         pattern="opaque", doc="a 1-d integer tensor's values as a shape value, read at run time")
