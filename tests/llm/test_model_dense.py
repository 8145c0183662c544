"""The compiled model's dense layers on refcomp's GEMM: every weight a graph constant packed once at
load, the same kernels (and so the same arithmetic per token row) at every row count."""
import numpy as np
import pytest

from refcomp.llm.model import CompiledLlama, FEW_ROWS, MIN_ROTARY_POSITIONS, RotaryTable, rotary_tables
from refcomp.llm.protocol import LlamaConfig
from refcomp.llm.reference import random_weights
from refcomp.loops.intrin import cpu

import numpy_llama

# shapes the GEMM recipe tiles (every product's N a multiple of 32, K of 16)
CONFIG = LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                     rms_norm_eps=1e-5, tie_word_embeddings=False)
# every product of CONFIG on refcomp's GEMM (dispatch_blas keeps a constant weight: on AVX-512 with N a
# multiple of 32 and K of 16, on AVX2 of 16 and 8 and at most the L2 size; CONFIG's are all that)
ON_GEMM = cpu.has("avx512f", "fma") or cpu.has("avx2", "fma")


@pytest.fixture(scope="module")
def model():
    return CompiledLlama(CONFIG, random_weights(CONFIG, seed=5, scale=0.3), kv_dtype="float32")


def _dense(fn, x, cos, sin, attn_scale):
    """The dense functions of a step on x (rows, 1, h), the attention replaced by a scaled q."""
    for layer in fn["layers"]:
        q, _, _ = layer["attn_in"](x, cos, sin)
        x = layer["mlp_down"](*layer["attn_out"](x, np.ascontiguousarray(q.reshape(len(q), 1, -1)) * attn_scale))
    return fn["head"](x)


def test_products_run_on_refcomp_gemm_with_one_shared_kernel_set(model):
    model._functions(FEW_ROWS + 1)
    assert model._many_calls_blas is (not ON_GEMM)
    if ON_GEMM:  # calls of any size take the constant build; no shared build with weights as arguments
        assert model._functions(1) is model._functions(64) and model._fn_few is None


def test_prepare_builds_what_a_call_of_those_rows_uses():
    """prepare((prompt rows, 1)) leaves nothing for a first forward to build; bad counts are named."""
    from refcomp.errors import ArgumentError

    fresh = CompiledLlama(CONFIG, random_weights(CONFIG, seed=5, scale=0.3), kv_dtype="float32")
    assert fresh._fn_many is None and fresh._fn_few is None
    fresh.prepare((FEW_ROWS + 3, 1))
    assert fresh._fn_many is not None and (fresh._fn_few is not None) is fresh._many_calls_blas
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ArgumentError, match="row counts must be positive integers"):
            fresh.prepare((bad,))


def test_logits_match_the_numpy_reference(model, rng):
    tokens = rng.integers(0, CONFIG.vocab_size, (3, 7))
    cache = model.new_cache(3, 32)
    got = np.concatenate([model.forward(tokens[:, :5], cache), model.forward(tokens[:, 5:6], cache),
                          model.forward(tokens[:, 6:], cache)], axis=1)
    weights = random_weights(CONFIG, seed=5, scale=0.3)
    for b in range(3):
        np.testing.assert_allclose(got[b], numpy_llama.logits(CONFIG, weights, tokens[b]), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rows", [1, 2, FEW_ROWS, FEW_ROWS + 1, 17, 32])
def test_a_rows_arithmetic_does_not_depend_on_the_rows_in_its_call(model, rng, rows):
    # a verify's token rows must equal the decode steps' rows bitwise (greedy speculation is lossless)
    total = 40
    h, d = CONFIG.hidden_size, CONFIG.dim_head
    x = rng.standard_normal((total, 1, h)).astype(np.float32)
    angles = rng.uniform(0, 6.3, (total, 1, 1, d)).astype(np.float32)
    cos, sin = np.cos(angles), np.sin(angles)
    full = _dense(model._functions(total), x, cos, sin, 0.5)
    part = _dense(model._functions(rows), x[:rows], cos[:rows], sin[:rows], 0.5)
    if ON_GEMM:
        assert np.array_equal(part, full[:rows])
    else:  # products on sgemm or the matrix-vector build: the same values within float32 rounding
        np.testing.assert_allclose(part, full[:rows], rtol=1e-5, atol=1e-5)


def test_the_rotary_table_gives_rotary_tables_bits_and_grows(rng):
    # a step looks cos and sin up per position: the same bits as computing them for its positions
    table = RotaryTable(CONFIG)
    for top in (40, MIN_ROTARY_POSITIONS + 3, 5 * MIN_ROTARY_POSITIONS):
        positions = rng.integers(0, top, (5, 1)) + np.arange(3)
        cos, sin = table(positions)
        want_cos, want_sin = rotary_tables(CONFIG, positions)
        assert cos.shape == want_cos.shape == (5, 3, 1, CONFIG.dim_head)
        assert np.array_equal(cos.view(np.uint32), want_cos.view(np.uint32))
        assert np.array_equal(sin.view(np.uint32), want_sin.view(np.uint32))
