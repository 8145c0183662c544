"""sink_reshapes: element-wise work between a reshape and its way back runs on the reshape's source.

A projection kept as a 2-d product (dispatch_blas) is reshaped back to (batch, seq, N) before
its activation and flattened again for the next product:

    m = matmul(view_of_x, W)            # (batch * seq, 512)
    r = reshape(m, (batch, seq, 512))
    g = gelu-chain(r)                   # multiply, power, add, tanh ... with scalar constants
    f = reshape(g, (batch * seq, 512))  # the next product's rows

The activation is element-wise, so it commutes with any row-major reshape: it runs on m itself
and f is its result.  With no reshape between them, fusion makes the activation the product's
epilogue (the tile applies it in registers) instead of a kernel of its own.

The region of `r = reshape(m, S)` grows in block order over the bindings whose op is element-wise
or broadcasting (registry pattern), takes no shape or axis attribute, and reads only region values,
0-d tensors and, where the reshape keeps the last dim, vectors (1, ..., 1, K) along it (a bias:
it broadcasts the same way over either shape's rows); each region binding `c = op(...)` becomes `c_flat = op(...)` on the region's
flat values, checked to have m's shape and c's dtype (and c to have r's shape), followed by `c = reshape(c_flat, S)` so
that every other reader of c is unchanged.  A reader `y = reshape(c, T)` with T proved to be m's
shape reads c_flat itself.  A region is rewritten only where it removes such a round trip.
Dead code elimination removes what no one reads.
"""
from __future__ import annotations

from ...ast.function import IRModule
from ...ast.graph import Call, Constant, DataflowBlock, DataflowVar, Op, PrimValue, Var, VarBinding
from ...ast.graph_struct_info import TensorStructInfo
from ...errors import RefcompError
from ..block_builder import BlockBuilder
from ..op.manipulate import reshape
from ..op.registry import get as get_op
from ..shape_facts import const_value
from .common import replace_in_binding, rewrite_blocks
from .fold_reshapes import _is_op, _same_dims, _shape

_POINTWISE = ("elementwise", "broadcast")
_POSITIONAL_ATTRS = ("shape", "axis", "axes")


def sink_reshapes(mod: IRModule) -> IRModule:
    """The module with element-wise regions after a reshape run on its source (module doc)."""
    bb = BlockBuilder(mod)
    # mapping: a round trip's final reshape -> the region value it restores
    return rewrite_blocks(mod, lambda block, mapping: _sink_block(block, mapping, bb))


def _sink_block(block, mapping: dict, bb: BlockBuilder):
    bindings = [replace_in_binding(b, mapping) for b in block.bindings]
    changed = any(x is not y for x, y in zip(bindings, block.bindings))
    made: set = set()  # the reshapes back a rewrite adds (each starts no region of its own)
    k = 0
    while k < len(bindings):
        b = bindings[k]
        if isinstance(b, VarBinding) and _is_op(b.value, "reshape") and b.var not in made:
            rewritten = _sink_one(bindings, k, mapping, bb, isinstance(block, DataflowBlock), made)
            if rewritten is not None:
                bindings, changed = rewritten, True
        k += 1
    return type(block)(tuple(bindings)) if changed else block


def _sink_one(bindings: list, start: int, mapping: dict, bb: BlockBuilder, dataflow: bool, made: set):
    """bindings with the region of the reshape at `start` rewritten, or None (module doc)."""
    r = bindings[start]
    source = r.value.args[0]
    source_shape, reshaped = _shape(source), _shape(r.var)
    if not isinstance(source, Var) or source_shape is None or reshaped is None:
        return None
    region = {r.var}  # the region's values (in r's shape)
    members = []  # positions of the region's op bindings
    width = _row_width(source_shape, reshaped)
    for k in range(start + 1, len(bindings)):
        b = bindings[k]
        if isinstance(b, VarBinding) and _joins(b.value, region, width):
            members.append(k)
            region.add(b.var)
    round_trips = [k for k in range(start + 1, len(bindings))
                   if isinstance(bindings[k], VarBinding) and _is_op(bindings[k].value, "reshape")
                   and bindings[k].value.args[0] in region and bindings[k].value.args[0] is not r.var
                   and isinstance(bindings[k].var, DataflowVar)
                   and _same_dims(_shape(bindings[k].var), source_shape)]
    if not members or not round_trips:
        return None
    fresh = DataflowVar if dataflow else Var
    out = list(bindings[:start + 1])
    flat: dict = {r.var: source}  # region value -> its value on the source's shape
    try:
        for k in range(start + 1, len(bindings)):
            b = bindings[k]
            if k in members:
                call = _on_source(b.value, flat)
                info = bb.infer_call(call)
                if not (isinstance(info, TensorStructInfo) and _same_dims(info.shape, source_shape)
                        and info.dtype == b.var.struct_info.dtype and _same_dims(_shape(b.var), reshaped)):
                    return None
                c_flat = fresh(f"{b.var.name}_flat", info)
                out.append(VarBinding(c_flat, call.with_(struct_info=info)))
                flat[b.var] = c_flat
                back = reshape(c_flat, reshaped)
                out.append(b.with_(value=back.with_(struct_info=b.var.struct_info)))
                made.add(b.var)
            elif k in round_trips:
                mapping[b.var] = flat[b.value.args[0]]
            else:
                out.append(replace_in_binding(b, mapping))
    except RefcompError:
        for k in round_trips:
            mapping.pop(bindings[k].var, None)
        return None
    return out


def _row_width(source_shape: tuple, reshaped: tuple):
    """The last dim both shapes share (proved equal), or None: a reshape that keeps the rows'
    width lets a vector broadcast along the last dim (a bias) move with the region."""
    if source_shape and reshaped and _same_dims(source_shape[-1:], reshaped[-1:]):
        return source_shape[-1]
    return None


def _is_row_vector(shape: tuple, width) -> bool:
    """(1, ..., 1, width): broadcast along the last dim only."""
    return (width is not None and len(shape) >= 1 and _same_dims(shape[-1:], (width,))
            and all(const_value(d) == 1 for d in shape[:-1]))


def _joins(value, region: set, width) -> bool:
    """Whether `value` is a point-wise op on region values, 0-d tensors and (when the reshape
    keeps the last dim, `width`) vectors along the last dim, one region value at least."""
    if not isinstance(value, Call) or not isinstance(value.op, Op):
        return False
    try:
        info = get_op(value.op_name)
    except RefcompError:
        return False
    if info.pattern not in _POINTWISE or any(a in value.attrs for a in _POSITIONAL_ATTRS):
        return False
    reads_region = False
    for arg in value.args:
        if isinstance(arg, Var) and arg in region:
            reads_region = True
        elif isinstance(arg, PrimValue):
            continue
        elif isinstance(arg, (Var, Constant)) and (shape := _shape(arg)) is not None and (
                shape == () or _is_row_vector(shape, width)):
            continue
        else:
            return False
    return reads_region


def _on_source(value: Call, flat: dict) -> Call:
    """value with its region operands replaced by their values on the source's shape."""
    return value.with_(args=tuple(flat.get(a, a) if isinstance(a, Var) else a for a in value.args),
                       struct_info=None)

