"""Autoregressive generation: batched and ragged equals one sequence at a time equals recomputing
from scratch; streaming callback; errors; the byte tokenizer."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

from decoding_helpers import tiny_model
from refcomp.errors import ArgumentError
from refcomp.llm import tokenizer
from refcomp.llm.generate import generate
from refcomp.llm.sampling import SamplingParams


def greedy_from_scratch(model, prompt, n):
    """Greedy decoding without reusing a cache: the whole sequence is run again for each token."""
    seq = list(map(int, prompt))
    for _ in range(n):
        logits = model.forward(np.array([seq]), model.new_cache(1, len(seq)))
        seq.append(int(np.argmax(logits[0, -1])))
    return seq[len(prompt):]


def test_batched_ragged_greedy_equals_single_and_from_scratch(rng):
    model = tiny_model(seed=int(rng.integers(1 << 30)), vocab=32, scale=1.5)
    prompts = [rng.integers(0, 32, size=n) for n in (7, 1, 15)]
    batched = generate(model, prompts, 12)
    assert batched.as_array().shape == (3, 12)
    for b, prompt in enumerate(prompts):
        assert generate(model, [prompt], 12).tokens[0] == batched.tokens[b]
        assert greedy_from_scratch(model, prompt, 12) == batched.tokens[b]
    assert batched.decoded > 0 and batched.tokens_per_second > 0


def test_sampling_is_seeded_and_callback_streams(rng):
    model = tiny_model(seed=int(rng.integers(1 << 30)), vocab=32)
    prompts = [[3, 1, 4], [1, 5, 9, 2, 6]]
    params = SamplingParams(temperature=1.0, top_k=10)
    seen: list[list[int]] = [[], []]

    def on_tokens(new):
        for b, toks in enumerate(new):
            seen[b].extend(toks)

    a = generate(model, prompts, 10, params=params, seed=5, on_tokens=on_tokens)
    b = generate(model, prompts, 10, params=params, seed=5)
    assert a.tokens == b.tokens == seen
    c = generate(model, prompts, 10, params=params, seed=6)
    assert c.tokens != a.tokens


def test_errors_name_the_problem():
    model = tiny_model(max_pos=32)
    with pytest.raises(ArgumentError, match="prompt 0 is empty"):
        generate(model, [[]], 4)
    with pytest.raises(ArgumentError, match="prompt 1 has 30 tokens; with 4 new tokens it exceeds the "
                                            "model's context of 32 tokens"):
        generate(model, [[1], [2] * 30], 4)
    with pytest.raises(ArgumentError, match="no prompts"):
        generate(model, [], 4)
    with pytest.raises(ArgumentError, match="max_new_tokens"):
        generate(model, [[1]], 0)
    with pytest.raises(ArgumentError, match=r"outside \[0, 32\)"):
        generate(model, [[1, 99]], 2)


@given(st.text(max_size=40))
def test_tokenizer_round_trip(text):
    tokens = tokenizer.encode(text)
    assert tokens.dtype == np.int64 and tokenizer.decode(tokens) == text
    decoder = tokenizer.StreamDecoder()
    assert "".join(decoder.feed([t]) for t in tokens) + decoder.flush() == text


def test_tokenizer_errors():
    with pytest.raises(ArgumentError, match="256"):
        tokenizer.decode([300])
    assert tokenizer.decode([0xff, 0x41]) == "\ufffdA"


# --- loading checkpoints and the command line ---------------------------------------------------

import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

from decoding_helpers import tiny_config, write_checkpoint  # noqa: E402
from refcomp.llm.checkpoint import load_checkpoint  # noqa: E402
from refcomp.llm.loading import DEFAULT_MODEL, load_model  # noqa: E402
from refcomp.llm.protocol import CheckpointError  # noqa: E402
from refcomp.llm.reference import ReferenceLlama, random_weights  # noqa: E402


@pytest.fixture
def byte_checkpoint(tmp_path):
    config = tiny_config(vocab=256, hidden=32, layers=1, heads=4, kv_heads=2, inter=48, max_pos=256)
    weights = random_weights(config, seed=3)
    write_checkpoint(tmp_path / "m", config, weights)
    return tmp_path / "m", config, weights


def test_checkpoint_round_trip(byte_checkpoint):
    path, config, weights = byte_checkpoint
    got_config, got = load_checkpoint(path)
    assert got_config == config and set(got) == set(weights)
    for name, value in weights.items():
        np.testing.assert_array_equal(np.asarray(got[name], np.float32), value.astype(np.float16).astype(np.float32))
    model, kind = load_model(path, compiled=False)
    assert kind == "reference" and isinstance(model, ReferenceLlama)


def test_bad_checkpoints_name_the_problem(tmp_path):
    config = tiny_config(vocab=256)
    weights = random_weights(config)
    del weights["model.norm.weight"]
    write_checkpoint(tmp_path / "a", config, weights)
    with pytest.raises(CheckpointError, match="model.norm.weight"):
        load_model(tmp_path / "a", compiled=False)
    weights = random_weights(config)
    weights["model.layers.0.mlp.down_proj.weight"] = weights["model.layers.0.mlp.down_proj.weight"].T
    write_checkpoint(tmp_path / "b", config, weights)
    with pytest.raises(CheckpointError, match="model.layers.0.mlp.down_proj.weight"):
        load_model(tmp_path / "b", compiled=False)
    write_checkpoint(tmp_path / "c", config, random_weights(config),
                     config_json=dict(config.to_hf(), architectures=["GPT2LMHeadModel"], model_type="gpt2"))
    with pytest.raises(CheckpointError, match="unsupported architecture"):
        load_model(tmp_path / "c", compiled=False)
    with pytest.raises(CheckpointError, match="config.json"):
        load_model(tmp_path, compiled=False)


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "refcomp.cli", "generate", *args], capture_output=True,
                          text=True, timeout=600)


def test_generate_command(byte_checkpoint):
    path, config, weights = byte_checkpoint
    model = ReferenceLlama(config, {k: v.astype(np.float16).astype(np.float32) for k, v in weights.items()})
    expected = generate(model, [tokenizer.encode("def f(")], 12).tokens[0]
    result = run_cli("--model", str(path), "--prompt", "def f(", "--max-new-tokens", "12", "--reference")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "def f(" + tokenizer.decode(expected) + "\n"
    assert "tokens/s" in result.stderr and "reference model" in result.stderr
    result = run_cli("--model", str(path), "--prompt", "def f(", "--max-new-tokens", "12", "--reference",
                     "--speculative", "--gamma", "3", "--budget", "8", "--temperature", "0.8", "--top-p", "0.9")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("def f(") and "gamma 3, K 8, acceptance" in result.stderr
    result = run_cli("--model", str(path), "--prompt", "def f(", "--max-new-tokens", "120", "--reference",
                     "--speculative", "auto")
    assert result.returncode == 0, result.stderr
    expected = generate(model, [tokenizer.encode("def f(")], 120).tokens[0]
    assert result.stdout == "def f(" + tokenizer.decode(expected) + "\n"      # greedy: the target's tokens
    assert "best predicted speedup" in result.stderr
    assert ("declined:" in result.stderr) != ("speculating" in result.stderr) and "pilot before the decision: pilotx1 3x1 pilotx2" in result.stderr   # (then the sweep, unless declined)
    assert "; after it: K " in result.stderr and "switches)" in result.stderr
    result = run_cli("--model", str(path), "--prompt", "", "--reference")
    assert result.returncode == 1 and "--prompt is empty" in result.stderr
    result = run_cli("--model", str(path), "--prompt", "def", "--reference", "--kv-dtype", "bfloat16")
    assert result.returncode == 1 and "--kv-dtype sets the compiled model's KV pages" in result.stderr
    result = run_cli("--model", str(path), "--prompt", "def", "--kv-dtype", "float64")
    assert result.returncode == 2 and "invalid choice" in result.stderr
    result = run_cli("--model", str(path), "--prompt", "x" * 300, "--reference")
    assert result.returncode == 1 and "exceeds the model's context of 256" in result.stderr


@pytest.mark.parametrize("extra, length, message", [
    ([], 300, "--prompt is 300 tokens (bytes) long; with 200 new tokens it exceeds the model's context of "
              "256 tokens (max_position_embeddings): at most 56 bytes of prompt fit"),
    (["--max-new-tokens", "256"], 1, "no prompt fits; lower --max-new-tokens"),
    (["--max-new-tokens", "6"], 251, "with 6 new tokens it exceeds the model's context of 256 tokens "
                                     "(max_position_embeddings): at most 250 bytes of prompt fit"),
    (["--max-new-tokens", "6", "--speculative", "--gamma", "3"], 248,
     "with 6 new tokens and 3 positions of speculation it exceeds"),
])
def test_generate_refuses_a_prompt_beyond_the_context_before_building(byte_checkpoint, monkeypatch, capsys,
                                                                      extra, length, message):
    """The context is read from config.json: nothing is built and no text is written first."""
    import refcomp.llm.command as command

    def load_model(*args, **kwargs):
        raise AssertionError("the model was loaded before the prompt was checked against the context")

    monkeypatch.setattr(command, "load_model", load_model)
    path = byte_checkpoint[0]
    assert command.main(["--model", str(path), "--prompt", "x" * length, *extra]) == 1
    out = capsys.readouterr()
    assert message in out.err and out.out == "" and "building" not in out.err


def test_generate_builds_the_kernels_before_the_clock_starts(byte_checkpoint, monkeypatch, capsys):
    """A compiled model builds a call's functions on first use; the command has them built (prepare)
    for the prompt's call and a decode step's before it times the prefill and the decoding."""
    import refcomp.llm.command as command

    path, config, weights = byte_checkpoint
    calls = []

    class Prepared(ReferenceLlama):
        def prepare(self, rows):
            calls.append(("prepare", tuple(rows)))

        def forward(self, tokens, cache):
            calls.append(("forward", tokens.shape[1]))
            return super().forward(tokens, cache)

    monkeypatch.setattr(command, "load_model", lambda *a, **k: (Prepared(config, weights), "compiled"))
    assert command.main(["--model", str(path), "--prompt", "def f(", "--max-new-tokens", "3"]) == 0
    assert calls == [("prepare", (6, 1)), ("forward", 6), ("forward", 1), ("forward", 1)]
    out = capsys.readouterr()
    assert out.out.startswith("def f(") and "building the model's kernels first" in out.err


@pytest.mark.skipif(not (DEFAULT_MODEL / "model.safetensors").is_file(), reason="the shipped model is absent")
def test_shipped_model_has_learned_python():
    config, weights = load_checkpoint(DEFAULT_MODEL)
    assert json.loads((DEFAULT_MODEL / "config.json").read_text())["vocab_size"] == 256
    model = ReferenceLlama(config, weights)
    text = tokenizer.encode(json.__doc__ or "import os\nimport sys\n\n\ndef main():\n    return 0\n")[:400]
    logits = model.forward(text[None], model.new_cache(1, len(text)))[0, :-1].astype(np.float64)
    logp = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) \
        - logits.max(-1, keepdims=True)
    loss = -logp[np.arange(len(text) - 1), text[1:]].mean()
    assert loss < 0.6 * np.log(256)        # far better than a uniform guess over bytes


@pytest.mark.skipif(not (DEFAULT_MODEL / "model.safetensors").is_file(), reason="the shipped model is absent")
def test_shipped_model_greedy_tokens_same_with_float16_cache():
    """The float16 KV cache (the compiled model's default) leaves the shipped model's greedy
    tokens unchanged on Python source: the compiled model with float16 pages gives the tokens of
    the float32 numpy reference model, its logits within float16 rounding of the reference's."""
    import inspect

    texts = [inspect.getsource(json.dumps), inspect.getsource(subprocess.run), inspect.getsource(np.pad)]
    prompts = [tokenizer.encode(t)[:200] for t in texts]
    half, kind = load_model(DEFAULT_MODEL, kv_dtype="float16")
    reference, reference_kind = load_model(DEFAULT_MODEL, compiled=False)
    assert (kind, half.kv_dtype, reference_kind) == ("compiled", "float16", "reference")
    np.testing.assert_array_equal(generate(half, prompts, 32).as_array(), generate(reference, prompts, 32).as_array())
    tokens = np.stack(prompts)
    a = half.forward(tokens, half.new_cache(3, 200))
    b = reference.forward(tokens, reference.new_cache(3, 200))
    np.testing.assert_allclose(a, b, rtol=0, atol=5e-2)
