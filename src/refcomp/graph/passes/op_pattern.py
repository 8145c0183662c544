"""The fusion pattern of a PrimFunc, read off its blocks (not the op it came from).

elementwise: one spatial block storing out[v...] from loads at exactly [v...];
broadcast:   the same, but some loads use a subset of the iter vars (others fixed at 0);
injective:   spatial blocks with any other index expressions;
reduction:   reduction stages (plus spatial stages), e.g. a sum, a softmax or a layer norm: an
             injective producer may be inlined into the stages that read it;
out_fusable: the last stage is a multiply-accumulate of two inputs (matmul, conv): an
             element-wise epilogue may be fused after it;
opaque:      anything else (a multiply-accumulate among other reductions, opaque blocks).
"""
from __future__ import annotations

from ...ast import expr as tir
from ...ast.function import PrimFunc
from ...ast.functor import collect
from ...ast.stmt import Block, BufferStore

ORDER = ("elementwise", "broadcast", "injective", "reduction", "out_fusable", "opaque")


def rank(pattern: str) -> int:
    return ORDER.index(pattern)


def analyze_pattern(func: PrimFunc) -> str:
    """The pattern of func (see module docstring)."""
    blocks = [b for b in collect(func.body, Block) if b.name != "root"]
    if not blocks:
        return "opaque"
    kinds = [_block_kind(b) for b in blocks]
    reductions = [k for k in kinds if k in ("reduction", "out_fusable")]
    if "opaque" in kinds:
        return "opaque"
    if not reductions:
        if len(blocks) == 1:
            return kinds[0]
        return "injective"
    if len(reductions) == 1 and kinds[-1] == "out_fusable" and all(k in ORDER[:3] for k in kinds[:-1]):
        return "out_fusable"
    if "out_fusable" in reductions and len(reductions) > 1:
        return "opaque"
    return "reduction"


def _block_kind(block: Block) -> str:
    stores = collect(block.body, BufferStore)
    if len(stores) != 1:
        return "opaque"
    store = stores[0]
    spatial = [iv.var for iv in block.iter_vars if iv.kind == "spatial"]
    reduce = [iv.var for iv in block.iter_vars if iv.kind == "reduce"]
    if any(iv.kind == "opaque" for iv in block.iter_vars):
        return "opaque"
    if reduce:
        value = store.value
        if isinstance(value, tir.Add) and _is_self_load(value.a, store) and _is_product_of_two_inputs(value.b):
            return "out_fusable"
        return "reduction"
    if not all(isinstance(i, tir.Var) for i in store.indices) or list(store.indices) != spatial:
        return "injective"
    kind = "elementwise"
    for load in collect(store.value, tir.BufferLoad):
        indices = list(load.indices)
        if len(indices) == len(spatial) and all(a is b for a, b in zip(indices, spatial)):
            continue
        if _is_broadcast(indices, spatial):
            kind = "broadcast"
            continue
        return "injective"
    return kind


def _is_product_of_two_inputs(e) -> bool:
    """A * B with operands reading different buffers (a matmul / conv term; not a square x * x)."""
    if not isinstance(e, tir.Mul):
        return False
    a = {id(load.buffer) for load in collect(e.a, tir.BufferLoad)}
    b = {id(load.buffer) for load in collect(e.b, tir.BufferLoad)}
    return bool(a) and bool(b) and a != b


def _is_self_load(e, store: BufferStore) -> bool:
    return isinstance(e, tir.BufferLoad) and e.buffer is store.buffer


def _is_broadcast(indices, spatial) -> bool:
    """Each index an iter var (in increasing position) or the constant 0, aligned from the right."""
    last = -1
    for index in indices:
        if isinstance(index, tir.IntImm) and index.value == 0:
            continue
        if not isinstance(index, tir.Var):
            return False
        pos = next((k for k, v in enumerate(spatial) if v is index), None)
        if pos is None or pos <= last:
            return False
        last = pos
    return True
