"""split_to_slices: each field read of a `split` becomes a `strided_slice` of its input.

A split is one kernel with several outputs, which fusion cannot fold into its readers: an
exported GPT-2 block splits its fused QKV projection into three copies, and each is read by a
reshape and transpose kernel that copies it again.  A slice is an injective op of one output, so
fusion folds it into its reader and the reader reads the projection in place.

Rewritten: `t = split(x, indices_or_sections, axis)` with section bounds that are constant, and a
binding `y = t[i]` in the same block: `y = strided_slice(x, (axis,), (lo_i,), (hi_i,))`.  The
split stays while anything else reads t (dead code elimination removes it otherwise).
"""
from __future__ import annotations

from ...ast.function import IRModule
from ...ast.graph import Call, Op, TupleGetItem, VarBinding
from ...ast.graph_struct_info import TensorStructInfo
from ..block_builder import BlockBuilder
from ..op.manipulate import _split_bounds, strided_slice
from ..shape_facts import const_value
from .common import graph_functions, map_blocks


def _constant_sections(call: Call):
    """(x, axis, [(lo, hi)...]) for a split whose section bounds are all constant, else None."""
    x = call.args[0]
    info = x.struct_info
    if not isinstance(info, TensorStructInfo) or info.shape is None or not info.ndim:
        return None
    axis = int(call.attrs.get("axis", 0)) % info.ndim
    length = const_value(info.shape[axis])
    if length is None:
        return None
    bounds = [(const_value(lo), const_value(hi)) for lo, hi in
              _split_bounds(None, length, call.attrs.get("indices_or_sections"))]
    if any(lo is None or hi is None or not 0 <= lo <= hi <= length for lo, hi in bounds):
        return None
    return x, axis, bounds


def split_to_slices(mod: IRModule) -> IRModule:
    """The module with each field read of a constant-bounds split made a strided_slice."""
    bb = BlockBuilder(mod)
    for name, func in graph_functions(mod):

        def block_fn(block):
            splits: dict = {}  # tuple var -> (x, axis, bounds)
            out = []
            for b in block.bindings:
                value = b.value
                if isinstance(b, VarBinding) and isinstance(value, Call) and isinstance(value.op, Op) \
                        and value.op_name == "split":
                    found = _constant_sections(value)
                    if found is not None:
                        splits[b.var] = found
                elif isinstance(b, VarBinding) and isinstance(value, TupleGetItem) and value.tuple_value in splits:
                    x, axis, bounds = splits[value.tuple_value]
                    if 0 <= value.index < len(bounds):
                        lo, hi = bounds[value.index]
                        call = strided_slice(x, (axis,), (lo,), (hi,))
                        b = b.with_(value=call.with_(struct_info=bb.infer_call(call)))
                out.append(b)
            return type(block)(tuple(out))

        mod = mod.with_function(name, map_blocks(func, block_fn))
    return mod
