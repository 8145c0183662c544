"""fold_reshapes: products over flattened rows read the rows as they are; reshapes of reshapes fold.

Exporters flatten the leading dims around a projection: GPT-2's Conv1D is
`reshape(x, (-1, K)) @ W` then a reshape back to (batch, seq, N).  Fusion folds the flattening
reshape into the product's kernel as a prologue, and a product with a prologue is not the plain
[i, k] GEMM the matmul recipe takes, so it stays on sgemm (or copies x first).  Row-major
reshapes move no data, so in each block:

- `a = reshape(x, (P, K))` with x of shape (d0, ..., K) (its last dim kept), read by
  `b = matmul(a, W)` with W 2-d: b becomes `reshape(matmul(x, W), (P, N))`, the product over x's
  own (d0, ..., K) rows, which `matmul` broadcasts over the leading dims;
- `c = reshape(b, s)` where b is itself `reshape(u, s1)` in the block: c becomes `reshape(u, s)`,
  and when s is u's own shape (the dims proved equal) c is u: its uses read u, the binding goes.

What the rewrites leave unread (the flattening, the inner reshape) dead code elimination removes.
Values are unchanged: each rewrite reorders the same elements in the same row-major order.
"""
from __future__ import annotations

from ...ast.function import IRModule
from ...ast.graph import Call, DataflowBlock, DataflowVar, Op, Var, VarBinding
from ...ast.graph_struct_info import TensorStructInfo
from ..block_builder import BlockBuilder
from ..op.linear import matmul
from ..op.manipulate import reshape
from ..shape_facts import decide_equal
from .common import replace_in_binding, rewrite_blocks


def _shape(expr) -> tuple | None:
    """expr's dims when it is a tensor of known shape, else None (also used by sink_reshapes)."""
    info = getattr(expr, "struct_info", None)
    if isinstance(info, TensorStructInfo) and info.shape is not None:
        return tuple(info.shape)
    return None


def _same_dims(a: tuple | None, b: tuple | None) -> bool:
    """Both shapes known, of one rank, every dim proved equal."""
    return (a is not None and b is not None and len(a) == len(b)
            and all(decide_equal(x, y).status == "proved" for x, y in zip(a, b)))


def _is_op(value, name: str) -> bool:
    return isinstance(value, Call) and isinstance(value.op, Op) and value.op_name == name


def _flattened_rows(a, defs: dict):
    """x when a is `reshape(x, (P, K))` of x (d0, ..., K) with at least 3 dims, else None."""
    value = defs.get(a)
    if not _is_op(value, "reshape"):
        return None
    x = value.args[0]
    xs, as_ = _shape(x), _shape(a)
    if xs is None or as_ is None or len(xs) < 3 or len(as_) != 2 or not _same_dims(xs[-1:], as_[-1:]):
        return None
    return x


def fold_reshapes(mod: IRModule) -> IRModule:
    """The module with products over flattened rows made over the rows as they are, and reshapes
    of reshapes folded (module doc)."""
    bb = BlockBuilder(mod)
    # mapping: a reshape that restores its source's shape -> that source
    return rewrite_blocks(mod, lambda block, mapping: _fold_block(block, mapping, bb))


def _fold_block(block, mapping: dict, bb: BlockBuilder):
    """block with both rewrites applied (block itself when neither applies); the vars whose
    bindings go are added to mapping, which the later bindings' uses follow."""
    defs: dict = {}  # var -> its value, for the bindings of this block so far
    out: list = []
    changed = False
    for b in block.bindings:
        b = replace_in_binding(b, mapping)
        if isinstance(b, VarBinding):
            unflattened = _product_over_rows(b, defs, block, bb, out)
            if unflattened is not None:
                b, changed = unflattened, True
            folded = _reshape_of_reshape(b, defs, mapping, bb)
            if folded is not None:
                changed = True
                if folded is _GONE:
                    continue
                b = folded
            defs[b.var] = b.value
        out.append(b)
    return type(block)(tuple(out)) if changed or any(x is not y for x, y in zip(out, block.bindings)) else block


_GONE = object()  # _reshape_of_reshape: the binding goes, its uses read the source


def _product_over_rows(b: VarBinding, defs: dict, block, bb: BlockBuilder, out: list):
    """For `b = matmul(a, W)` over a = reshape(x, (P, K)) flattening x's leading dims, W 2-d: the
    binding `rows = matmul(x, W)` appended to out (and defs) and b as `reshape(rows, (P, N))`;
    else None."""
    value = b.value
    if not _is_op(value, "matmul") or len(value.args) != 2 or _shape(b.var) is None:
        return None
    a, w = value.args
    x = _flattened_rows(a, defs)
    ws = _shape(w)
    if x is None or ws is None or len(ws) != 2:
        return None
    product = matmul(x, w, out_dtype=value.attrs.get("out_dtype"))
    fresh = DataflowVar if isinstance(block, DataflowBlock) else Var
    rows = fresh(f"{b.var.name}_rows", bb.infer_call(product))
    out.append(VarBinding(rows, product.with_(struct_info=rows.struct_info)))
    defs[rows] = product
    flat = reshape(rows, _shape(b.var))
    return b.with_(value=flat.with_(struct_info=bb.infer_call(flat)))


def _reshape_of_reshape(b: VarBinding, defs: dict, mapping: dict, bb: BlockBuilder):
    """For `c = reshape(v, s)` with v = reshape(u, s1) in the block: _GONE (mapping c -> u) when s
    is u's shape and c a dataflow var, else c as `reshape(u, s)`; None when b is no such reshape."""
    value = b.value
    if not (_is_op(value, "reshape") and _is_op(defs.get(value.args[0]), "reshape")):
        return None
    source = defs[value.args[0]].args[0]
    target, own = _shape(b.var), _shape(source)
    if target is None:
        return None
    if own is not None and _same_dims(target, own) and isinstance(b.var, DataflowVar) and isinstance(source, Var):
        mapping[b.var] = source
        return _GONE
    folded = reshape(source, target)
    return b.with_(value=folded.with_(struct_info=bb.infer_call(folded)))
