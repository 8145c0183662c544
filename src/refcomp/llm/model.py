"""The Llama architecture compiled by refcomp: `CompiledLlama` (a CausalLM) and `load_llama`.

The dense part of the model is a graph module built with refcomp's BlockBuilder (`dense_module`),
batch `b` and sequence `t` symbolic, compiled by `graph.build` (each function one C function).
One build holds every layer's functions with that layer's weights as graph constants, so the
products run on refcomp's GEMM on panels packed once, at load (the layers share their kernels):

    embed(tokens (b, t) int64, table (V, h))                -> x (b, t, h)
    attn_in_<l>(x, cos, sin (b, t, 1, D))                    -> q (b, t, Hq, D), k, v (b, t, Hkv, D)
        RMSNorm, the fused q/k/v projection, rotary embedding (rotate-half form) of q and k
    attn_out_<l>(x, attn (b, t, Hq D))                       -> h = x + attn @ wo, act (b, t, I)
        act = silu(gate) * up of h's RMSNorm (gate and up one fused product)
    mlp_down_<l>(h, act)                                     -> x' = h + act @ wdown
    head(x)                                                  -> logits (b, t, V)

Where a product's shape sends it to sgemm instead, calls of at most FEW_ROWS rows take a second,
shared build with the weights as arguments (after the activations) on refcomp's own kernels.

Attention runs between attn_in and attn_out: refcomp.llm.attention's kernel reads the layer's
cache pages in place and appends the new keys and values to them.  A step is therefore a short
sequence of compiled calls from Python (embed, per layer attn_in / attention / attn_out /
mlp_down, head):
the graph level has no call form yet that writes into an argument (the cache pages), so
the attention kernel is called between graph functions instead of inside one.

Positions are absolute: token t of sequence b gets rotary position lengths()[b] + t, also with a
streaming cache.
"""
from __future__ import annotations

import functools
import os
import warnings
from typing import Any, Mapping, Sequence

import numpy as np

from ..ast import SizeVar
from ..errors import ArgumentError
from ..graph import BlockBuilder, Call, Constant, ExternFunc, Function, Var, op, tensor
from ..graph.passes.default_schedule import RuleFallbackWarning
from ..graph.pipeline import build as build_graph
from .attention import PagedAttention
from .cache import DEFAULT_PAGE_SIZE, KV_DTYPES, DraftView, PagedKVCache
from .checkpoint import check_weights, load_checkpoint
from .protocol import LlamaConfig, StreamingBudget


def _size(name: str) -> SizeVar:
    return SizeVar(name, "int64")


DENSE_FUNCTIONS = ("embed", "attn_in", "attn_out", "mlp_down", "head")
LAYER_FUNCTIONS = ("attn_in", "attn_out", "mlp_down")
# the weight parameters of each function, in order, after its activations
LAYER_WEIGHTS = {"attn_in": ("norm1", "wqkv"), "attn_out": ("wo", "norm2", "wgate_up"), "mlp_down": ("wdown",)}
HEAD_WEIGHTS = ("norm", "head")


def dense_module(config: LlamaConfig, layers: Sequence[Mapping[str, np.ndarray]] | None = None,
                 head: Mapping[str, np.ndarray] | None = None):
    """The IRModule of the model's dense functions.

    Without weights: DENSE_FUNCTIONS, every weight a parameter of its function (after the
    activations, in the order of LAYER_WEIGHTS / HEAD_WEIGHTS), one build serving every layer.
    With them (`layers`: per layer, LAYER_WEIGHTS' names -> arrays; `head`: HEAD_WEIGHTS'): embed,
    `attn_in_<l>`, `attn_out_<l>`, `mlp_down_<l>` for each layer l and head, the weights graph
    constants: graph.build then keeps the products for refcomp's GEMM (dispatch_blas "auto"), each
    weight packed once at build time, and the layers' kernels, structurally equal, are scheduled
    and compiled once (fuse_tir shares them)."""
    if (layers is None) != (head is None):
        raise ArgumentError("dense_module: give both the layers' and the head's weights, or neither")
    bb = BlockBuilder()
    rows = (_size("b"), _size("t"))  # one batch and sequence for all functions (shared kernels)
    if layers is None:
        _dense_functions(bb, config, None, DENSE_FUNCTIONS, "", rows)
    else:
        _dense_functions(bb, config, head, ("embed", "head"), "", rows)
        for layer, weights in enumerate(layers):
            _dense_functions(bb, config, weights, LAYER_FUNCTIONS, f"_{layer}", rows)
    return bb.get()


def _dense_functions(bb: BlockBuilder, config: LlamaConfig, weights: Mapping[str, np.ndarray] | None,
                     functions: tuple[str, ...], suffix: str, rows: tuple[SizeVar, SizeVar]) -> None:
    c = config
    h, d, v, i = c.hidden_size, c.dim_head, c.vocab_size, c.intermediate_size
    hq, hkv = c.num_attention_heads, c.num_key_value_heads
    b, t = rows
    eps = c.rms_norm_eps

    def weight(name: str, shape: tuple, params: list) -> Any:
        if weights is not None:
            return Constant(np.ascontiguousarray(weights[name], dtype=np.float32))
        var = Var(name, tensor(shape))
        params.append(var)
        return var

    if "embed" in functions:
        tokens, table = Var("tokens", tensor((b, t), "int64")), Var("table", tensor((v, h)))
        with bb.function("embed", [tokens, table]):
            with bb.dataflow():
                out = bb.emit_output(op.take(table, tokens, axis=0))
            bb.emit_func_output(out)

    # the products run on the (b * t, h) rows: RMSNorm's row reduction then feeds the GEMM a plain
    # buffer (a reshape between them would fuse into the GEMM and keep it off refcomp's recipe)
    if "attn_in" in functions:
        x, cos, sin = Var("x", tensor((b, t, h))), Var("cos", tensor((b, t, 1, d))), Var("sin", tensor((b, t, 1, d)))
        params = [x, cos, sin]
        norm, wqkv = weight("norm1", (h,), params), weight("wqkv", (h, (hq + 2 * hkv) * d), params)
        with bb.function("attn_in" + suffix, params):
            with bb.dataflow():
                rows = bb.emit(op.reshape(x, (b * t, h)))
                xn = bb.emit(op.rms_norm(rows, norm, axes=(-1,), epsilon=eps))
                qkv = bb.emit(op.matmul(xn, wqkv))

                def heads(lo: int, count: int) -> Any:
                    part = bb.emit(op.strided_slice(qkv, axes=(1,), begin=(lo * d,), end=((lo + count) * d,)))
                    return bb.emit(op.reshape(part, (b, t, count, d)))

                def rotary(z: Any) -> Any:
                    first = bb.emit(op.strided_slice(z, axes=(3,), begin=(0,), end=(d // 2,)))
                    second = bb.emit(op.strided_slice(z, axes=(3,), begin=(d // 2,), end=(d,)))
                    rotated = bb.emit(op.concat(op.negative(second), first, axis=3))
                    return bb.emit(op.add(op.multiply(z, cos), op.multiply(rotated, sin)))

                q = bb.emit_output(rotary(heads(0, hq)))
                k = bb.emit_output(rotary(heads(hq, hkv)))
                val = bb.emit_output(heads(hq + hkv, hkv))
            bb.emit_func_output((q, k, val))

    # attn arrives as (b, t, Hq * D) (a view of the kernel's (b, t, Hq, D) output): the o product's
    # input is then the parameter itself
    if "attn_out" in functions:
        x2, attn = Var("x", tensor((b, t, h))), Var("attn", tensor((b, t, hq * d)))
        params = [x2, attn]
        wo, norm2 = weight("wo", (hq * d, h), params), weight("norm2", (h,), params)
        wgu = weight("wgate_up", (h, 2 * i), params)
        with bb.function("attn_out" + suffix, params):
            with bb.dataflow():
                h1 = bb.emit(op.reshape(op.add(x2, op.matmul(attn, wo)), (b * t, h)))
                hn = bb.emit(op.rms_norm(h1, norm2, axes=(-1,), epsilon=eps))
                gu = bb.emit(op.matmul(hn, wgu))
                gate = bb.emit(op.strided_slice(gu, axes=(1,), begin=(0,), end=(i,)))
                up = bb.emit(op.strided_slice(gu, axes=(1,), begin=(i,), end=(2 * i,)))
                act = bb.emit_output(op.reshape(op.multiply(op.silu(gate), up), (b, t, i)))
                res = bb.emit_output(op.reshape(h1, (b, t, h)))
            bb.emit_func_output((res, act))

    # the down product is a function of its own: silu(gate) * up computed in attn_out would fuse
    # into its GEMM as a prologue (off the recipe); here its input is a parameter
    if "mlp_down" in functions:
        h2, act2 = Var("h", tensor((b, t, h))), Var("act", tensor((b, t, i)))
        params = [h2, act2]
        wdown = weight("wdown", (i, h), params)
        with bb.function("mlp_down" + suffix, params):
            with bb.dataflow():
                out = bb.emit_output(op.add(h2, op.matmul(act2, wdown)))
            bb.emit_func_output(out)

    if "head" in functions:
        x3 = Var("x", tensor((b, t, h)))
        params = [x3]
        norm3, whead = weight("norm", (h,), params), weight("head", (h, v), params)
        with bb.function("head" + suffix, params):
            with bb.dataflow():
                rows = bb.emit(op.reshape(x3, (b * t, h)))
                xn = bb.emit(op.rms_norm(rows, norm3, axes=(-1,), epsilon=eps))
                out = bb.emit_output(op.reshape(op.matmul(xn, whead), (b, t, v)))
            bb.emit_func_output(out)


def rotary_tables(config: LlamaConfig, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin (b, t, 1, D) of Hugging Face's default rotary embedding at int positions (b, t),
    computed in float32 as transformers does."""
    d = config.dim_head
    inv_freq = (1.0 / (np.float32(config.rope_theta) ** (np.arange(0, d, 2, dtype=np.int64).astype(np.float32)
                                                           / np.float32(d)))).astype(np.float32)
    freqs = positions.astype(np.float32)[..., None] * inv_freq
    emb = np.concatenate([freqs, freqs], axis=-1)[:, :, None, :]
    return np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)


class RotaryTable:
    """rotary_tables' cos and sin, computed once per position and looked up by a step.

    The table covers positions [0, size) and grows (to the next power of two, at least
    MIN_ROTARY_POSITIONS) when a step reaches past it; its rows are rotary_tables' own values
    (each element is a function of its position alone), so a lookup gives the same bits as
    computing the step's positions afresh, without the per-step cos and sin."""

    def __init__(self, config: LlamaConfig) -> None:
        self.config = config
        self._cos = self._sin = np.empty((0, config.dim_head), np.float32)

    def __call__(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """cos and sin (b, t, 1, D) at int positions (b, t), as rotary_tables(config, positions)."""
        needed = int(positions.max()) + 1 if positions.size else 0
        if needed > len(self._cos):
            size = max(MIN_ROTARY_POSITIONS, 1 << (needed - 1).bit_length())
            cos, sin = rotary_tables(self.config, np.arange(size, dtype=np.int64)[None, :])
            self._cos, self._sin = cos[0, :, 0], sin[0, :, 0]
        shape = positions.shape + (1, self.config.dim_head)
        return self._cos[positions].reshape(shape), self._sin[positions].reshape(shape)


# The rotary table's first size (positions); it doubles from there as steps reach further.
MIN_ROTARY_POSITIONS = 4096


# Up to this many token rows per call, a model some of whose products go to the BLAS GEMM (shapes
# refcomp's GEMM recipe does not tile) runs the shared build with refcomp's own kernels instead
# (blas=False): a product with so few rows is a matrix-vector product, where the BLAS call costs
# more than the arithmetic.  (Where every product runs on refcomp's GEMM, all calls take it.)
FEW_ROWS = 4
# the KV cache's element type unless asked otherwise (refcomp.llm.cache.KV_DTYPES); MagicDec's
# speedup is largest on refcomp.llm.attention.speculative_kv_dtype's (bfloat16 where AMX computes
# both attention products)
DEFAULT_KV_DTYPE = "float16"
# Token rows per compiled call when a long prompt is split (CompiledLlama.forward).
CHUNK_ROWS = 2048


def _dense_executable(config: LlamaConfig, target: str) -> Any:
    """The compiled dense functions with the weights as arguments (blas=False: refcomp's own
    kernels, the products matrix-vector sized), shared by every model of the same shapes."""
    shapes = (config.vocab_size, config.hidden_size, config.intermediate_size, config.num_attention_heads,
              config.num_key_value_heads, config.dim_head, config.rms_norm_eps)
    return _dense_build(shapes, target)


@functools.lru_cache(maxsize=None)
def _dense_build(shapes: tuple, target: str) -> Any:
    v, h, i, hq, hkv, d, eps = shapes
    config = LlamaConfig(vocab_size=v, hidden_size=h, intermediate_size=i, num_hidden_layers=1,
                         num_attention_heads=hq, num_key_value_heads=hkv, max_position_embeddings=1,
                         rms_norm_eps=eps, head_dim=d)
    return _build(dense_module(config), target, blas=False)


def _build(mod: Any, target: str, blas: bool) -> Any:
    with warnings.catch_warnings():
        if not blas:
            # the matmul-plus-residual kernels take the generic schedule (the row-reduction rule
            # does not match them); chosen on purpose for matrix-vector sized calls
            warnings.simplefilter("ignore", RuleFallbackWarning)
        return build_graph(mod, target=target, executor="compiled", blas=None if blas else False)


def _calls_blas(ex: Any) -> bool:
    """Whether a graph function of the built executable calls a BLAS extern (refcomp.blas.*)."""
    for func in ex.module.functions.values():
        if isinstance(func, Function):
            for block in func.body.blocks:
                for binding in block.bindings:
                    value = binding.value
                    if isinstance(value, Call) and any(isinstance(a, ExternFunc) and a.symbol.startswith("refcomp.blas.")
                                                       for a in value.args):
                        return True
    return False


def _with_weights(fn: Any, weights: tuple) -> Any:
    return lambda *activations: fn(*activations, *weights)


def set_threads(threads: int) -> None:
    """The number of OpenMP threads compiled kernels use in this process."""
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise ArgumentError(f"CompiledLlama: threads must be a positive integer, got {threads!r}")
    os.environ["OMP_NUM_THREADS"] = str(threads)
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("gomp")
    if name:
        try:
            ctypes.CDLL(name).omp_set_num_threads(threads)
        except (OSError, AttributeError):
            pass


class CompiledLlama:
    """A Llama-architecture CausalLM whose every step runs refcomp-compiled code."""

    def __init__(self, config: LlamaConfig, weights: Mapping[str, np.ndarray], *, target: str = "c",
                 threads: int | None = None, page_size: int = DEFAULT_PAGE_SIZE,
                 kv_dtype: str = DEFAULT_KV_DTYPE) -> None:
        if not isinstance(config, LlamaConfig):
            raise ArgumentError(f"CompiledLlama: config must be a LlamaConfig, got {type(config).__name__}")
        if not isinstance(page_size, int) or isinstance(page_size, bool) or page_size < 1:
            raise ArgumentError(f"CompiledLlama: page_size must be a positive integer, got {page_size!r}")
        if kv_dtype not in KV_DTYPES:
            raise ArgumentError(f"CompiledLlama: kv_dtype must be one of {KV_DTYPES}, got {kv_dtype!r}")
        self.config = config
        self.page_size = page_size
        self.kv_dtype = kv_dtype
        w = check_weights(config, weights, where="CompiledLlama")
        if threads is not None:
            set_threads(threads)
        c = config
        self._embed = w["model.embed_tokens.weight"]
        self._layers: list[dict[str, np.ndarray]] = []
        for layer in range(c.num_hidden_layers):
            p = f"model.layers.{layer}."
            wqkv = np.concatenate([w[p + "self_attn.q_proj.weight"], w[p + "self_attn.k_proj.weight"],
                                   w[p + "self_attn.v_proj.weight"]]).T
            wgu = np.concatenate([w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"]]).T
            self._layers.append({
                "norm1": w[p + "input_layernorm.weight"], "wqkv": np.ascontiguousarray(wqkv),
                "wo": np.ascontiguousarray(w[p + "self_attn.o_proj.weight"].T),
                "norm2": w[p + "post_attention_layernorm.weight"], "wgate_up": np.ascontiguousarray(wgu),
                "wdown": np.ascontiguousarray(w[p + "mlp.down_proj.weight"].T)})
        head = w["model.embed_tokens.weight"] if c.tie_word_embeddings else w["lm_head.weight"]
        self._head = {"norm": w["model.norm.weight"], "head": np.ascontiguousarray(head.T)}
        self._target = target
        self._fn_many: dict[str, Any] | None = None
        self._fn_few: dict[str, Any] | None = None
        self._many_calls_blas = False
        self._attention = PagedAttention(c.num_attention_heads // c.num_key_value_heads, c.dim_head,
                                         page_size, c.num_key_value_heads, kv_dtype)
        self._rotary = RotaryTable(config)

    def new_cache(self, batch: int, max_tokens: int, *, streaming: StreamingBudget | None = None,
                  pages: int | None = None) -> PagedKVCache:
        if max_tokens > self.config.max_position_embeddings:
            raise ArgumentError(f"new_cache: max_tokens {max_tokens} exceeds the model's context "
                                f"(max_position_embeddings {self.config.max_position_embeddings})")
        return PagedKVCache(self.config, batch, max_tokens, streaming=streaming, page_size=self.page_size,
                            pages=pages, dtype=self.kv_dtype)

    def forward(self, tokens: np.ndarray, cache: PagedKVCache) -> np.ndarray:
        tokens = self._check_tokens(tokens, cache)
        batch, steps = tokens.shape
        start = cache.reserve(steps)
        logits = np.empty((batch, steps, self.config.vocab_size), np.float32)
        # a long prompt runs in chunks of about CHUNK_ROWS token rows: the activations of one call
        # (the MLP's is batch x T x 2 intermediate) stay small; attention sees the same keys
        chunk = max(1, CHUNK_ROWS // batch)
        for offset in range(0, steps, chunk):
            part = tokens[:, offset:offset + chunk]
            logits[:, offset:offset + part.shape[1]] = self._step(part, cache, start + np.int32(offset))
        cache.commit(steps)
        return logits

    def _step(self, tokens: np.ndarray, cache: PagedKVCache, start: np.ndarray) -> np.ndarray:
        """Logits of tokens appended at positions start[b] + t (pages already reserved)."""
        batch, steps = tokens.shape
        positions = start[:, None].astype(np.int64) + np.arange(steps, dtype=np.int64)
        cos, sin = self._rotary(positions)
        sinks, ring, window = cache.kernel_scalars()
        fn = self._functions(batch * steps)
        x = fn["embed"](np.ascontiguousarray(tokens), self._embed)
        c = self.config
        attn = np.empty((batch, steps, c.num_attention_heads, c.dim_head), np.float32)
        attn_rows = attn.reshape(batch, steps, c.num_attention_heads * c.dim_head)
        for layer, dense in enumerate(fn["layers"]):
            q, k, v = dense["attn_in"](x, cos, sin)
            self._attention(q, k, v, cache.k_pool[layer], cache.v_pool[layer], cache.table, start, attn,
                            sinks, ring, window)
            x = dense["mlp_down"](*dense["attn_out"](x, attn_rows))
        return fn["head"](x)

    def prepare(self, rows: Sequence[int] = (1,)) -> None:
        """Build (or take from the build cache) the compiled functions that forward calls of these
        token-row counts (batch x tokens) use.  forward builds them on first use otherwise, inside
        whatever is being timed: a first prefill would then report the build's seconds."""
        for count in rows:
            if not isinstance(count, (int, np.integer)) or isinstance(count, bool) or count < 1:
                raise ArgumentError(f"prepare: row counts must be positive integers, got {count!r}")
            self._functions(int(count))

    def _functions(self, rows: int) -> dict[str, Any]:
        """The compiled dense functions for a call of `rows` token rows (built on first use):
        {"embed": f, "layers": [{name: f} per layer], "head": f}, each f taking the activations.

        The build per layer (weights as constants) serves every call whose products all run on
        refcomp's GEMM: it is faster than the shared build at any row count, and the same kernels
        at every row count give each row the same arithmetic (a verify's rows equal a decode's).
        Where some product went to sgemm (shapes the GEMM recipe does not tile), calls of at most
        FEW_ROWS rows take the shared build instead (matrix-vector kernels, no BLAS call)."""
        if self._fn_many is None:
            self._fn_many = self._compiled_per_layer()
        if rows > FEW_ROWS or not self._many_calls_blas:
            return self._fn_many
        if self._fn_few is None:
            self._fn_few = self._compiled_shared()
        return self._fn_few

    def _compiled_shared(self) -> dict[str, Any]:
        """One build serving every layer, the weights passed as arguments (refcomp's own kernels)."""
        fns = _dense_executable(self.config, self._target).compiled
        layers = [{name: _with_weights(fns[name], tuple(weights[w] for w in LAYER_WEIGHTS[name]))
                   for name in LAYER_FUNCTIONS} for weights in self._layers]
        return {"embed": fns["embed"], "layers": layers,
                "head": _with_weights(fns["head"], tuple(self._head[w] for w in HEAD_WEIGHTS))}

    def _compiled_per_layer(self) -> dict[str, Any]:
        """One build with every layer's weights as graph constants: the products run on refcomp's
        GEMM where dispatch_blas keeps them (each weight packed once, here), otherwise on sgemm."""
        ex = _build(dense_module(self.config, self._layers, self._head), self._target, blas=True)
        self._many_calls_blas = _calls_blas(ex)
        fns = ex.compiled
        layers = [{name: fns[f"{name}_{layer}"] for name in LAYER_FUNCTIONS} for layer in range(len(self._layers))]
        return {"embed": fns["embed"], "layers": layers, "head": fns["head"]}

    def _check_tokens(self, tokens: Any, cache: Any) -> np.ndarray:
        if not isinstance(cache, (PagedKVCache, DraftView)):
            raise ArgumentError(f"forward: cache must come from this model's new_cache, got {type(cache).__name__}")
        if cache.config != self.config or cache.page_size != self.page_size:
            raise ArgumentError("forward: the cache was made for a different model")
        tokens = np.asarray(tokens)
        if tokens.ndim != 2 or tokens.dtype.kind not in "iu":
            raise ArgumentError(f"forward: tokens must be integers of shape (batch, T), got {tokens.dtype} "
                                f"{tokens.shape}")
        if tokens.shape[0] != cache.batch:
            raise ArgumentError(f"forward: {tokens.shape[0]} sequences of tokens for a cache of batch {cache.batch}")
        if tokens.shape[1] == 0:
            raise ArgumentError("forward: no tokens to append (T = 0); an empty prompt has nothing to condition on")
        bad = (tokens < 0) | (tokens >= self.config.vocab_size)
        if bad.any():
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            raise ArgumentError(f"forward: token {tokens[where]} at {where} is outside the vocabulary "
                                f"[0, {self.config.vocab_size})")
        return np.ascontiguousarray(tokens, dtype=np.int64)


def load_llama(path: str | os.PathLike, **kwargs: Any) -> CompiledLlama:
    """A CompiledLlama of the Hugging Face checkpoint directory at path (kwargs: CompiledLlama's)."""
    config, weights = load_checkpoint(path)
    return CompiledLlama(config, weights, **kwargs)
