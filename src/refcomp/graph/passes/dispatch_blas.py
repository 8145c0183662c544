"""dispatch_blas: float32 matmul / dense / linear become calls of BLAS sgemm (call_dps_packed).

Matched before legalization: `matmul(a, b)` with a (..., k) and a 2-d b (k, n), or a and b with
the same batch dims (one sgemm per batch entry), where a b bound in the same block to
`permute_dims` of a tensor swapping its last two axes is read transposed in place (also through
reshapes keeping the last two dims and one multiply by a scalar constant, as exporters write K^T:
the factor then multiplies the source, which fuses into its producer); `dense(x, w)` and
`linear(x, w, bias)` with x (..., k) and w (n, k).  The leading dims of a are flattened into the
GEMM's rows (the arrays are contiguous), so batched-by-row products are one sgemm call.  linear's
bias is added by a separate `add`, which fusion folds into what follows.  (An a that flattens the
leading dims of an x, `reshape(x, (rows, k))`, is read as x since fold_reshapes, which runs
before, makes such a product one over x's own rows.)  Anything else is left to
legalization.  The externs `refcomp.blas.sgemm_nn` / `sgemm_nt` are registered by refcomp.runtime.blas.

mode "auto" (the default) keeps a product whose weight is a graph constant (matmul, dense or
linear; 2-d operands of the shapes below) for refcomp's own GEMM, which ran faster than sgemm there
(the demo's MLP, 64 x 256 -> 1024 -> 256, one AVX-512 thread: 0.51 against 0.59 ms).  Its weight is
packed once, at build time: the matmul recipe packs a constant weight in a stage of its own
(mark_constant_params) and fold_packed_weights evaluates it, the tile kernel declaring that it
only reads the packed panels it is handed (sgemm packs its operand on every call).  It also keeps a `linear` where that measured faster: the
matmul recipe on the AVX-512 tile with the weight packed through the register transpose (N a
multiple of 32, K of 16, both constant), its input a plain buffer after fusion, and its result
read only by an elementwise op, so that the bias and that epilogue (gelu, a residual add) are
computed in the tile loop while C is in cache.  On the graph benchmark (Zen 5, hidden 1024, ffn
4096) that ran 4-6% faster than sgemm followed by the fused epilogue for the mlp (batch 256, 2
threads and one) and 0-2.5% for the transformer block (seq 512, within the noise).  A matmul with a
constant weight whose lhs has leading dims (x (batch, seq, k), as exporters write a Linear) is kept
too: it becomes reshape(x, (rows, k)), the 2-d matmul, and a reshape back (rows = batch * seq, the
recipe's partial last tile bound by that product as it is), the products of one x sharing its
reshape (ViT's (batch, 65, 128) @ (128, 512), one AVX-512 thread: 112 against 134 us with sgemm;
the whole 2-layer ViT 1.34 -> 1.17 ms, BERT's 2 layers 1.25 -> 1.10 ms).  On AVX2 (the 6 x 16 tile: N
a multiple of 16, K of 8) only the constant-weight products whose weight fits L2 are kept: with
sgemm, a small transformer's weights come from L3 and are packed again on every call; kept, they
are packed once (larger ones stay with sgemm, whose kernel ran faster there, see _tile_multiples).  The models
benchmark on a Zen 3, 2 threads, the compiled graph's profile (best of three, A/B in one process):
BERT 1.365 -> 1.294 ms, ViT 1.669 -> 1.545 ms (timed from Python: 2.08 -> 1.70 and 1.70 -> 1.53).
mode "always" sends every matched product to BLAS.
"""
from __future__ import annotations

from ...ast.function import IRModule
from ...ast.graph import Call, DataflowBlock, DataflowVar, Op, Var, VarBinding
from ...ast.graph_struct_info import TensorStructInfo
from ...errors import BuildError
from ..block_builder import BlockBuilder
from ..op.base import call_dps_packed
from ..op.elementwise import add, multiply
from .common import graph_functions, map_blocks, used_vars


def _f32(info) -> bool:
    return isinstance(info, TensorStructInfo) and info.shape is not None and info.dtype is not None \
        and str(info.dtype) == "float32"


def _match(call: Call):
    name = call.op_name
    if name not in ("matmul", "dense", "linear") or not all(_f32(a.struct_info) for a in call.args):
        return None
    a, b = call.args[0].struct_info, call.args[1].struct_info
    if a.ndim < 2 or call.attrs.get("out_dtype") not in (None, "float32"):
        return None
    if b.ndim != 2:
        # batched matmul with the very same batch dims on both sides (no broadcasting)
        from ..shape_facts import decide_equal

        if name != "matmul" or b.ndim != a.ndim or not all(
                decide_equal(x, y).proved for x, y in zip(a.shape[:-2], b.shape[:-2])):
            return None
    return "refcomp.blas.sgemm_nn" if name == "matmul" else "refcomp.blas.sgemm_nt"


def _transposed_source(value, defs: dict):
    """b when value is a var bound (in this block) to permute_dims(b) swapping b's last two axes."""
    bound = defs.get(value) if isinstance(value, Var) else None
    if not (isinstance(bound, Call) and isinstance(bound.op, Op) and bound.op_name == "permute_dims"):
        return None
    source = bound.args[0]
    info = source.struct_info
    if not _f32(info) or info.ndim < 2:
        return None
    swap = tuple(range(info.ndim - 2)) + (info.ndim - 1, info.ndim - 2)
    axes = bound.attrs.get("axes")
    axes = tuple(reversed(range(info.ndim))) if axes is None else tuple(int(a) % info.ndim for a in axes)
    return source if axes == swap else None


def _scalar_f32(value) -> bool:
    from ...ast.graph import Constant

    return isinstance(value, Constant) and _f32(value.struct_info) and value.struct_info.ndim == 0


def _same_rows(value, defs: dict):
    """x when value is bound (in this block) to reshape(x, shape) keeping x's last two dims: only
    the leading (batch) dims are merged or split, so value[b, i, j] is x at the same flat batch
    entry (both contiguous, row-major)."""
    from ..shape_facts import decide_equal

    bound = defs.get(value) if isinstance(value, Var) else None
    if not (isinstance(bound, Call) and isinstance(bound.op, Op) and bound.op_name == "reshape"):
        return None
    x = bound.args[0]
    have, want = x.struct_info, value.struct_info
    if not (_f32(have) and _f32(want) and have.ndim >= 2 and want.ndim >= 2):
        return None
    if not all(decide_equal(a, b).proved for a, b in zip(have.shape[-2:], want.shape[-2:])):
        return None
    return x


def _transposed_operand(value, defs: dict, depth: int = 8):
    """(src, scale) when value (a matmul's rhs) is swap-last-two(src) times scale, up to merges and
    splits of the leading dims, so that `a @ value` is `scale * (a @ src^T)` entry by entry:
    value bound (in this block) through any of reshape keeping the last two dims, multiply by a
    float32 scalar constant (scale: that constant, else None; at most one), and one permute_dims
    swapping the last two axes.  src then has the same element count as value and its last two
    dims swapped (its leading dims may be split differently)."""
    scale, swapped = None, None
    for _ in range(depth):
        bound = defs.get(value) if isinstance(value, Var) else None
        if not (isinstance(bound, Call) and isinstance(bound.op, Op)):
            break
        name = bound.op_name
        if name == "multiply" and scale is None and len(bound.args) == 2:
            x, y = bound.args
            if _scalar_f32(y) and _f32(x.struct_info):
                scale, value = y, x
                continue
            if _scalar_f32(x) and _f32(y.struct_info):
                scale, value = x, y
                continue
            break
        if name == "reshape":
            x = _same_rows(value, defs)
            if x is None:
                break
            value = x
            continue
        if name == "permute_dims" and swapped is None:
            src = _transposed_source(value, defs)
            if src is None:
                break
            swapped = value = src
            continue
        break
    if swapped is None:
        return None
    return value, scale


MODES = ("auto", "always")


def _bind(call, bb, block, b, counter, out, what):
    """A new var of block bound to call (its struct info inferred), appended to out."""
    counter[0] += 1
    info = bb.infer_call(call)
    cls = DataflowVar if isinstance(block, DataflowBlock) else type(b.var)
    var = cls(f"{b.var.name}_{what}{counter[0]}", info)
    out.append(VarBinding(var, call.with_(struct_info=info)))
    return var


def _as_batch_of(source, w, bb, block, b, counter, out):
    """source (..., n, k), reshaped when its leading dims are not provably w's (..., k, n)."""
    from ..op.manipulate import reshape
    from ..shape_facts import decide_equal

    have, want = source.struct_info, w.struct_info
    if have.ndim == want.ndim and all(decide_equal(x, y).proved for x, y in zip(have.shape[:-2], want.shape[:-2])):
        return source
    shape = tuple(want.shape[:-2]) + (want.shape[-1], want.shape[-2])
    return _bind(reshape(source, shape), bb, block, b, counter, out, "rows")


def _reshape_call(x, shape):
    from ..op.manipulate import reshape

    return reshape(x, tuple(shape))


def _reshape_to(x, info, bb):
    from ..op.manipulate import reshape

    call = reshape(x, tuple(info.shape))
    return call.with_(struct_info=bb.infer_call(call))


def _own_gemm_is_faster(call: Call, defs: dict, kept: set) -> bool:
    """Whether refcomp's recipe beats sgemm on this product (see the module docstring): on
    AVX-512 a linear, or a product whose weight is a constant; on AVX2 a product whose weight is
    a constant; of the shapes the CPU's tile takes."""
    from ..shape_facts import const_value

    multiples = _tile_multiples(call)
    if multiples is None:
        return False
    if call.args[1].struct_info.ndim != 2 or (call.args[0].struct_info.ndim != 2 and not (
            call.op_name == "matmul" and _constant_weight(call))):
        return False  # leading dims beyond the rows make a kernel the recipe does not tile
    shape = call.args[1].struct_info.shape
    n, k = (const_value(d) for d in (shape[::-1] if call.op_name == "matmul" else shape))
    n_multiple, k_multiple, max_weight_bytes = multiples
    if n is None or k is None or n % n_multiple or k % k_multiple:
        return False
    if max_weight_bytes is not None and 4 * n * k > max_weight_bytes:
        return False
    return _input_stays_plain(call.args[0], defs, kept)


def _tile_multiples(call: Call) -> tuple[int, int, int | None] | None:
    """(N multiple, K multiple, the largest weight in bytes or None) the recipe takes this product
    with on this CPU, or None where sgemm takes it: the AVX-512 tiles (32-wide panels; W packed
    by the 16-row register transpose) for a linear or a constant weight; the AVX2 6 x 16 tile for
    a constant weight (packed at build time; a weight packed on every call was not measured to win
    there) of at most the L2 size: sgemm's packing on every call is a large share of a small
    product's work, while on a larger weight OpenBLAS's kernel ran faster than the tile (the graph
    benchmark's transformer block, 1024 x 1024 and 1024 x 4096 weights, one Zen 3 thread, CPU
    time: 194-205 ms with sgemm, 221-234 with the tile)."""
    from ...loops.intrin import cpu

    if cpu.has("avx512f", "fma"):
        return (32, 16, None) if call.op_name == "linear" or _constant_weight(call) else None
    if cpu.has("avx2", "fma"):
        return (16, 8, cpu.cache_sizes()[1]) if _constant_weight(call) else None
    return None


def _constant_weight(call: Call) -> bool:
    """The product's weight (matmul's b, dense's and linear's w) is a constant of the graph: the
    recipe's packed copy of it is then made once, at build time (fold_packed_weights), where sgemm
    packs it again on every call."""
    from ...ast.graph import Constant

    return isinstance(call.args[1], Constant)


def _input_stays_plain(x, defs: dict, kept: set) -> bool:
    """Whether fusion leaves the GEMM's input a plain [i, k] buffer, as the recipe needs.

    fuse_ops folds an injective producer (a reshape, a transpose, an activation) into the GEMM
    that reads it, unless that producer is already the epilogue of an earlier GEMM kept here.
    Such a folded prologue makes the recipe decline, and the default loops are far slower than
    sgemm, so those products stay on BLAS."""
    bound = defs.get(x) if isinstance(x, Var) else None
    if not (isinstance(bound, Call) and isinstance(bound.op, Op)):
        return True  # a parameter, or computed in another block
    if _pattern(bound) not in _INJECTIVE:
        return True  # a reduction (layer_norm, softmax...) or opaque: its own kernel
    return _is_kept_epilogue(x, defs, kept)


def _is_kept_epilogue(x, defs: dict, kept: set, depth: int = 4) -> bool:
    """x computed elementwise from the result of a GEMM kept for the recipe (its epilogue)."""
    if x in kept:
        return True
    bound = defs.get(x)
    if depth == 0 or not (isinstance(bound, Call) and isinstance(bound.op, Op)) or \
            _pattern(bound) not in _EPILOGUE:
        return False
    return any(isinstance(a, Var) and _is_kept_epilogue(a, defs, kept, depth - 1) for a in bound.args)


def _feeds_an_epilogue(var, readers: dict) -> bool:
    """The linear's one reader is elementwise (gelu, a residual add): an epilogue for the tile."""
    values = readers.get(var, [])
    return len(values) == 1 and isinstance(values[0], Call) and isinstance(values[0].op, Op) \
        and _pattern(values[0]) in _EPILOGUE


_EPILOGUE = ("elementwise", "broadcast")
_INJECTIVE = _EPILOGUE + ("injective",)


def _pattern(call: Call) -> str:
    from ..op import registry

    return registry.get(call.op_name).pattern


def dispatch_blas(mod: IRModule, mode: str = "auto") -> IRModule:
    """The module with float32 GEMM-shaped products sent to BLAS (mode: see the module docstring)."""
    if mode not in MODES:
        raise BuildError(f"dispatch_blas: mode must be one of {MODES}, got {mode!r}")
    bb = BlockBuilder(mod)
    for name, func in graph_functions(mod):
        counter = [0]

        def block_fn(block):
            out = []
            defs: dict = {}  # var -> value, for the bindings of this block so far
            kept: set = set()  # vars of the linears left to the matmul recipe (mode "auto")
            readers: dict = {}  # var -> the values in this block that read it
            rows_of: dict = {}  # x (..., k) -> its (rows, k) reshape, for products kept on flattened rows
            for b in block.bindings:
                for v in used_vars(b.value):
                    readers.setdefault(v, []).append(b.value)
            for b in block.bindings:
                value = b.value
                if isinstance(b, VarBinding):
                    defs[b.var] = value
                symbol = _match(value) if isinstance(value, Call) and isinstance(value.op, Op) else None
                if symbol is not None and mode == "auto" and _own_gemm_is_faster(value, defs, kept) \
                        and (_feeds_an_epilogue(b.var, readers) or _constant_weight(value)):
                    kept.add(b.var)
                    symbol = None
                    if value.args[0].struct_info.ndim > 2:
                        # x (..., k) @ W on rows: reshape(x, (rows, k)) @ W, reshaped back
                        x, info = value.args[0], b.var.struct_info
                        rows = x.struct_info.shape[0]
                        for d in x.struct_info.shape[1:-1]:
                            rows = rows * d
                        if x not in rows_of:  # one flattened copy per source (Q, K and V read one x)
                            rows_of[x] = _bind(_reshape_call(x, (rows, x.struct_info.shape[-1])), bb, block, b,
                                               counter, out, "rows")
                        flat_x = rows_of[x]
                        gemm = _bind(value.with_(args=(flat_x, *value.args[1:])), bb, block, b, counter, out, "flat")
                        out.append(b.with_(value=_reshape_to(gemm, info, bb)))
                        continue
                if symbol is None or not isinstance(b, VarBinding):
                    out.append(b)
                    continue
                x, w = value.args[0], value.args[1]
                found = _transposed_operand(w, defs) if symbol == "refcomp.blas.sgemm_nn" else None
                if found is not None:
                    # a @ permute_dims(b) is a @ b.T: BLAS reads b transposed, no copy of it is made
                    # (the permute becomes dead when nothing else reads it); a scalar factor on the
                    # way is applied to b (an element-wise op that fuses into b's producer), and b
                    # split into other leading dims is reshaped to w's (a view of the same order)
                    source, scale = found
                    source = _as_batch_of(source, w, bb, block, b, counter, out)
                    if scale is not None:
                        source = _bind(multiply(source, scale), bb, block, b, counter, out, "scaled")
                    symbol, w = "refcomp.blas.sgemm_nt", source
                out_info = b.var.struct_info
                if value.op_name != "linear":
                    gemm = call_dps_packed(symbol, (x, w), out_info).with_(struct_info=out_info)
                    out.append(b.with_(value=gemm))
                    continue
                counter[0] += 1
                cls = DataflowVar if isinstance(block, DataflowBlock) else type(b.var)
                tmp = cls(f"{b.var.name}_gemm{counter[0]}", out_info)
                gemm = call_dps_packed(symbol, (x, w), out_info).with_(struct_info=out_info)
                out.append(VarBinding(tmp, gemm))
                bias = add(tmp, value.args[2])
                out.append(b.with_(value=bias.with_(struct_info=bb.infer_call(bias))))
            return type(block)(tuple(out))

        mod = mod.with_function(name, map_blocks(func, block_fn))
    return mod
